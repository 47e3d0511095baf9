//! Drawing: a title with where the operator is, the view, a status line (connection and
//! profile, never a password; or the last message) and the keys, or the prompt.

use super::state::{App, DetailView, GroupsView, ListPos, RecordsView, Sort, View};
use crate::fingerprint;
use crate::output::{ellipsize, short_time};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Row, Table, TableState, Wrap};

pub(super) fn draw(f: &mut Frame, app: &App) {
    let [title, main, status, keys] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .areas(f.area());
    f.render_widget(
        Paragraph::new(breadcrumb(app)).style(Style::new().add_modifier(Modifier::REVERSED)),
        title,
    );
    match app.top() {
        View::Sources => sources(f, app, main),
        View::Groups(v) => groups(f, app, main, v),
        View::Records(v) => records(f, app, main, v),
        View::Detail(d) => detail(f, app, main, d),
    }
    f.render_widget(status_line(app), status);
    f.render_widget(keys_line(app), keys);
    if app.help {
        help(f, main);
    }
}

fn groups(f: &mut Frame, app: &App, main: Rect, v: &GroupsView) {
    let head = format!(
        " reason groups of {} {}{} · sorted by {} ",
        v.source.kind,
        v.source.label,
        if v.capped {
            format!(" (first {} read)", super::load::GROUP_READ)
        } else {
            String::new()
        },
        match v.sort {
            Sort::Count => "count",
            Sort::Oldest => "oldest",
            Sort::Newest => "newest",
        }
    );
    let rows = v.rows.iter().map(|g| {
        Row::new(vec![
            g.group.count.to_string(),
            time(g.group.oldest),
            time(g.group.newest),
            g.fingerprint.clone().map_or(g.group.example.clone(), |fp| {
                if fp == g.group.example {
                    fp
                } else {
                    format!("{fp}  e.g. {}", g.group.example)
                }
            }),
        ])
    });
    let widths = [
        Constraint::Length(7),
        Constraint::Length(16),
        Constraint::Length(16),
        Constraint::Fill(1),
    ];
    list(
        f,
        app,
        main,
        &head,
        ["count", "oldest", "newest", "reason"].to_vec(),
        rows.collect(),
        &widths,
        &v.list,
    );
}

fn records(f: &mut Frame, app: &App, main: Rect, v: &RecordsView) {
    let shown = v.rows.len();
    // What the operator acts on first: how many, how many marked, then where from.
    let head = format!(
        " {} records{} · {}{} {} · {} ",
        if v.more {
            format!("first {shown}")
        } else {
            shown.to_string()
        },
        if v.marked.is_empty() {
            String::new()
        } else {
            format!(" · {} marked", v.marked.len())
        },
        if v.terms.is_empty() {
            String::new()
        } else {
            format!("{} · ", terms_text(&v.terms))
        },
        v.source.kind,
        v.source.label,
        v.group
            .as_ref()
            .and_then(|g| g.fingerprint.clone())
            .map_or("all reasons".into(), |fp| ellipsize(&fp, 40)),
    );
    let rows = v.rows.iter().map(|r| {
        let id = r.id.to_string();
        let mark = if v.marked.contains(&id) { "*" } else { " " };
        let row = Row::new(vec![
            mark.to_string(),
            id,
            time(r.created_at),
            r.task.clone().unwrap_or_else(|| "-".into()),
            fingerprint::headline(r.motivo.as_deref().unwrap_or("-")).to_string(),
        ]);
        if mark == "*" && app.printer.color {
            row.style(Style::new().fg(Color::Yellow))
        } else {
            row
        }
    });
    // Ids and task names as wide as the longest shown, within bounds: the reason
    // gets the rest.
    let widest = |f: &dyn Fn(&crate::model::DeadLetter) -> usize, min, max| {
        v.rows.iter().map(f).max().unwrap_or(0).clamp(min, max) as u16
    };
    let widths = [
        Constraint::Length(1),
        Constraint::Length(widest(&|r| r.id.to_string().chars().count(), 2, 36)),
        Constraint::Length(16),
        Constraint::Length(widest(
            &|r| r.task.as_deref().map_or(1, |t| t.chars().count()),
            4,
            30,
        )),
        Constraint::Fill(1),
    ];
    list(
        f,
        app,
        main,
        &head,
        ["", "id", "created", "task", "motivo"].to_vec(),
        rows.collect(),
        &widths,
        &v.list,
    );
}

fn detail(f: &mut Frame, app: &App, main: Rect, d: &DetailView) {
    let plain = crate::output::Printer {
        color: false,
        ..app.printer.clone()
    };
    let text = plain
        .full_table(&d.record, Some(main.width.saturating_sub(2)))
        .to_string();
    let block = Block::new().borders(Borders::ALL).title(format!(
        " record {} · j/k scroll · w write to a file ",
        d.record.id
    ));
    f.render_widget(
        Paragraph::new(text).block(block).scroll((d.scroll, 0)),
        main,
    );
}

fn breadcrumb(app: &App) -> String {
    let mut parts = vec!["dlq browse".to_string(), "sources".into()];
    for v in &app.views[1..] {
        parts.push(match v {
            View::Groups(g) => g.source.label.clone(),
            View::Records(r) => r
                .group
                .as_ref()
                .and_then(|g| g.fingerprint.clone())
                .map_or("all".into(), |fp| ellipsize(&fp, 30)),
            View::Detail(d) => format!("record {}", d.record.id),
            View::Sources => continue,
        });
    }
    let loading = app
        .loading
        .map(|l| format!("  [{l}… Esc stops]"))
        .unwrap_or_default();
    format!(" {}{loading}", parts.join(" › "))
}

fn sources(f: &mut Frame, app: &App, area: Rect) {
    let read = app
        .sources_read
        .map(|t| {
            format!(
                " · read {}",
                t.with_timezone(&chrono::Local).format("%H:%M:%S")
            )
        })
        .unwrap_or_default();
    let head = format!(" sources{read} · Enter opens · r re-reads ");
    let rows = app.sources.iter().map(|s| {
        let reason = s
            .top_reasons
            .first()
            .map(|r| format!("{}× {}", r.count, r.fingerprint))
            .unwrap_or_else(|| "-".into());
        let kind = s.details.as_ref().map_or("", |d| d.kind);
        Row::new(vec![
            format!("{} {kind}", s.source),
            s.location.clone(),
            s.pending.to_string(),
            s.oldest
                .map(crate::output::age)
                .unwrap_or_else(|| "-".into()),
            reason,
        ])
    });
    // Locations whole where they fit: they are what the operator recognises.
    let location = app.sources.iter().map(|s| s.location.chars().count());
    let location = location.max().unwrap_or(0).clamp(8, 60) as u16;
    let widths = [
        Constraint::Length(14),
        Constraint::Length(location),
        Constraint::Length(9),
        Constraint::Length(12),
        Constraint::Fill(2),
    ];
    let columns = ["source", "location", "pending", "oldest", "top reason"].to_vec();
    list(
        f,
        app,
        area,
        &head,
        columns,
        rows.collect(),
        &widths,
        &app.sources_list,
    );
}

#[allow(clippy::too_many_arguments)]
fn list(
    f: &mut Frame,
    app: &App,
    area: Rect,
    title: &str,
    columns: Vec<&str>,
    rows: Vec<Row>,
    widths: &[Constraint],
    pos: &ListPos,
) {
    let header_style = if app.printer.color {
        Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD)
    } else {
        Style::new()
    };
    let empty = rows.is_empty();
    let table = Table::new(rows, widths.to_vec())
        .header(Row::new(columns).style(header_style))
        .block(Block::new().borders(Borders::ALL).title(title.to_string()))
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED));
    let mut state = TableState::default()
        .with_offset(pos.offset.get())
        .with_selected((!empty).then_some(pos.cursor));
    f.render_stateful_widget(table, area, &mut state);
    pos.offset.set(state.offset());
    if empty && app.loading.is_none() {
        let inner = Rect {
            x: area.x + 2,
            y: area.y + 2,
            width: area.width.saturating_sub(4),
            height: 1.min(area.height.saturating_sub(3)),
        };
        f.render_widget(Paragraph::new("nothing here"), inner);
    }
}

fn status_line(app: &App) -> Paragraph<'static> {
    if let Some(s) = &app.status {
        let style = match (s.error, app.printer.color) {
            (true, true) => Style::new().fg(Color::Red),
            (true, false) => Style::new().add_modifier(Modifier::BOLD),
            _ => Style::new(),
        };
        return Paragraph::new(Line::from(Span::styled(format!(" {}", s.text), style)));
    }
    let mut parts = vec![format!("rabbit {}", app.endpoints.rabbit.shown)];
    if let Some(db) = &app.endpoints.database {
        parts.push(format!("table {}", db.table));
    }
    if let Some(p) = &app.req.profile {
        parts.push(format!("profile {p}"));
    }
    if app.req.read_only {
        parts.push("READ-ONLY".into());
    }
    Paragraph::new(format!(" {}", crate::redact::scrub(&parts.join(" · "))))
}

fn keys_line(app: &App) -> Paragraph<'static> {
    if let Some(p) = &app.prompt {
        return Paragraph::new(format!(
            " {}: {}█  (Enter applies, Esc cancels)",
            p.label, p.text
        ));
    }
    let keys = match app.top() {
        View::Sources => "Enter open · r re-read · ? help · q quit",
        View::Groups(_) => "Enter open · s sort · R replay · A archive · E export · ? help",
        View::Records(_) => "space mark · / : select · R replay · A archive · E export · ? help",
        View::Detail(_) => "j/k scroll · w write to a file · Esc back · q quit",
    };
    Paragraph::new(format!(" {keys}"))
}

const HELP: &str = "\
j/k ↑/↓      move              PgUp/PgDn g/G  page, first, last
Enter l →    open              Esc h ←        back
space        mark a record     r              read again
/REGEX       pattern (reason, task, payload); / alone clears it
:motivo X    :task T  :since 2h  :until D  :older-than 7d
:where JQ    :id ID   :ignore-case  :include-replayed  :clear
s            sort the groups (count, oldest, newest)
R            replay the marked records, else the group / selection
F            replay them and follow each task (--follow --enable-events)
A            archive them to a file, then delete them from the source
E            export them to a file (nothing changes)
w            (record) write it to a file as JSON
q Ctrl-C     quit

Replay and archive show the plan and ask before anything changes,
exactly like dlq replay / dlq archive, and leave the same audit record.
Press any key to close.";

fn help(f: &mut Frame, area: Rect) {
    let w = area.width.min(76);
    let h = area.height.min(22);
    let r = Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    };
    f.render_widget(Clear, r);
    let block = Block::new().borders(Borders::ALL).title(" keys ");
    f.render_widget(
        Paragraph::new(HELP).block(block).wrap(Wrap { trim: false }),
        r,
    );
}

fn time(t: Option<chrono::DateTime<chrono::Utc>>) -> String {
    t.map(|t| short_time(&t)).unwrap_or_else(|| "-".into())
}

fn terms_text(terms: &[super::Term]) -> String {
    terms
        .iter()
        .map(|t| {
            if t.key == "pattern" {
                format!("/{}", t.value)
            } else {
                format!(":{} {}", t.key, t.value).trim_end().to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
