//! What is on the screen (a stack of views over the sources) and what each key does there.

use super::act::{Action, Job};
use super::load::{self, GroupRow, Kind, Loaded, PAGE, Pending, SourceRef};
use super::{Request, Term};
use crate::endpoints::Endpoints;
use crate::model::DeadLetter;
use crate::output::Printer;
use crate::source::overview::{Note, SourceSummary};
use crate::source::{QueueOptions, SourceChoice};
use crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use std::cell::Cell;
use std::collections::BTreeSet;
use std::time::Instant;

pub(super) enum Step {
    Stay,
    Quit,
    /// Drop the load in flight.
    Cancel,
    Load(Kind),
    Act(Job),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sort {
    Count,
    Oldest,
    Newest,
}

pub(super) struct GroupsView {
    pub(super) source: SourceRef,
    pub(super) rows: Vec<GroupRow>,
    pub(super) capped: bool,
    pub(super) sort: Sort,
    pub(super) list: ListPos,
}

pub(super) struct RecordsView {
    pub(super) source: SourceRef,
    /// The group chosen (`None`: every reason).
    pub(super) group: Option<GroupRow>,
    pub(super) terms: Vec<Term>,
    pub(super) rows: Vec<DeadLetter>,
    pub(super) more: bool,
    pub(super) marked: BTreeSet<String>,
    pub(super) list: ListPos,
}

pub(super) struct DetailView {
    pub(super) record: Box<DeadLetter>,
    pub(super) scroll: u16,
}

pub(super) enum View {
    Sources,
    Groups(GroupsView),
    Records(RecordsView),
    Detail(DetailView),
}

/// A cursor, and the first row drawn (kept between frames so the list does not jump).
#[derive(Default)]
pub(super) struct ListPos {
    pub(super) cursor: usize,
    pub(super) offset: Cell<usize>,
}

impl ListPos {
    fn step(&mut self, by: isize, len: usize) {
        let max = len.saturating_sub(1) as isize;
        self.cursor = (self.cursor as isize + by).clamp(0, max) as usize;
    }
}

pub(super) enum PromptKind {
    /// `/` or `:` on the records: the selection.
    Selection,
    /// A file for an archive or an export.
    File(Job),
    /// A file for the record shown.
    WriteRecord,
}

pub(super) struct Prompt {
    pub(super) kind: PromptKind,
    pub(super) label: &'static str,
    pub(super) text: String,
}

pub(super) struct Status {
    pub(super) text: String,
    pub(super) error: bool,
}

pub(super) struct App<'a> {
    pub(super) req: &'a Request,
    pub(super) endpoints: &'a Endpoints,
    pub(super) printer: &'a Printer,
    /// Loads report through the screen, never on stderr under it.
    quiet: &'a Printer,
    pub(super) views: Vec<View>,
    pub(super) sources: Vec<SourceSummary>,
    pub(super) sources_list: ListPos,
    pub(super) sources_read: Option<chrono::DateTime<chrono::Utc>>,
    pub(super) loading: Option<&'static str>,
    pub(super) prompt: Option<Prompt>,
    pub(super) help: bool,
    pub(super) status: Option<Status>,
    last_sources: Instant,
}

impl<'a> App<'a> {
    pub(super) fn new(
        req: &'a Request,
        endpoints: &'a Endpoints,
        printer: &'a Printer,
        quiet: &'a Printer,
    ) -> App<'a> {
        App {
            req,
            endpoints,
            printer,
            quiet,
            views: vec![View::Sources],
            sources: Vec::new(),
            sources_list: ListPos::default(),
            sources_read: None,
            loading: None,
            prompt: None,
            help: false,
            status: None,
            last_sources: Instant::now(),
        }
    }

    pub(super) fn top(&self) -> &View {
        self.views.last().expect("the sources view stays")
    }

    fn top_mut(&mut self) -> &mut View {
        self.views.last_mut().expect("the sources view stays")
    }

    pub(super) fn start(&mut self, kind: Kind) -> Option<Pending<'a>> {
        self.loading = Some(match &kind {
            Kind::Sources => "reading the sources",
            Kind::Groups(_) => "grouping by reason",
            Kind::Records { .. } => "reading records",
        });
        if matches!(kind, Kind::Sources) {
            self.last_sources = Instant::now();
        }
        Some(load::start(
            self.endpoints,
            self.quiet,
            &self.req.overview,
            kind,
        ))
    }

    pub(super) fn cancelled(&mut self) {
        self.loading = None;
        self.say("stopped reading", false);
    }

    /// A notice from outside the view (`output::hold_notices`), on the status line.
    pub(super) fn notice(&mut self, text: String) {
        self.say(text, true);
    }

    fn say(&mut self, text: impl Into<String>, error: bool) {
        self.status = Some(Status {
            text: crate::redact::scrub(&text.into()),
            error,
        });
    }

    /// A finished load lands in the view it was started for (the top one: while a load
    /// runs, only Esc and q act).
    pub(super) fn apply(&mut self, done: Loaded) {
        self.loading = None;
        match done {
            Loaded::Sources(Ok(o)) => {
                self.sources = o.sources;
                self.sources_read = Some(chrono::Utc::now());
                let len = self.sources.len();
                self.sources_list.step(0, len);
                let warn = o.notes.iter().find_map(|n| match n {
                    Note::Warn(w) => Some(w.clone()),
                    _ => None,
                });
                if let Some(w) = warn {
                    self.say(w, false);
                }
            }
            Loaded::Groups(Ok(g)) => {
                if let View::Groups(v) = self.top_mut() {
                    v.rows = g.rows;
                    v.capped = g.capped;
                    sort_groups(&mut v.rows, v.sort);
                    let len = v.rows.len();
                    v.list.step(0, len);
                }
            }
            Loaded::Records(Ok(p)) => {
                if let View::Records(v) = self.top_mut() {
                    v.rows = p.rows;
                    v.more = p.more;
                    let len = v.rows.len();
                    v.list.step(0, len);
                }
            }
            Loaded::Sources(Err(e)) | Loaded::Groups(Err(e)) | Loaded::Records(Err(e)) => {
                self.say(format!("error: {}", crate::error::describe(&e)), true);
            }
        }
    }

    pub(super) fn on_tick(&mut self, loading: bool) -> Step {
        let due = self
            .req
            .refresh
            .is_some_and(|r| self.last_sources.elapsed() >= r);
        if due && !loading && self.prompt.is_none() && matches!(self.top(), View::Sources) {
            return Step::Load(Kind::Sources);
        }
        Step::Stay
    }

    /// After an action: the view it started from is read again (what was replayed or
    /// archived has left it).
    pub(super) fn after_action(&mut self) -> Option<Pending<'a>> {
        if let View::Records(v) = self.top_mut() {
            v.marked.clear();
        }
        self.reload().and_then(|k| self.start(k))
    }

    fn reload(&self) -> Option<Kind> {
        match self.top() {
            View::Sources => Some(Kind::Sources),
            View::Groups(v) => Some(Kind::Groups(v.source.clone())),
            View::Records(v) => self.records_load(v, v.terms.clone(), PAGE),
            View::Detail(_) => None,
        }
    }

    fn records_load(&self, v: &RecordsView, terms: Vec<Term>, want: u64) -> Option<Kind> {
        let mut selection = (self.req.lower)(&terms).ok()?;
        selection.fingerprint = v.group.as_ref().and_then(|g| g.fingerprint.clone());
        Some(Kind::Records {
            source: v.source.clone(),
            selection: Box::new(selection),
            want,
        })
    }

    pub(super) fn on_event(&mut self, ev: Event, loading: bool) -> Step {
        let Event::Key(key) = ev else {
            return Step::Stay; // a resize: the loop redraws
        };
        if key.kind != KeyEventKind::Press {
            return Step::Stay;
        }
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            return Step::Quit;
        }
        if self.help {
            self.help = false;
            return Step::Stay;
        }
        if self.prompt.is_some() {
            return self.on_prompt_key(key);
        }
        if loading {
            return match key.code {
                KeyCode::Esc => Step::Cancel,
                KeyCode::Char('q') => Step::Quit,
                _ => Step::Stay,
            };
        }
        self.status = None;
        self.on_key(key)
    }

    fn on_key(&mut self, key: KeyEvent) -> Step {
        match key.code {
            KeyCode::Char('q') => return Step::Quit,
            KeyCode::Char('?') => self.help = true,
            KeyCode::Esc | KeyCode::Left | KeyCode::Char('h') => return self.back(),
            KeyCode::Down | KeyCode::Char('j') => return self.move_by(1),
            KeyCode::Up | KeyCode::Char('k') => return self.move_by(-1),
            KeyCode::PageDown | KeyCode::Char(' ') if !self.on_records() => {
                return self.move_by(10);
            }
            KeyCode::PageDown => return self.move_by(10),
            KeyCode::PageUp => return self.move_by(-10),
            KeyCode::Home | KeyCode::Char('g') => return self.move_by(isize::MIN / 2),
            KeyCode::End | KeyCode::Char('G') => return self.move_by(isize::MAX / 2),
            KeyCode::Enter | KeyCode::Right | KeyCode::Char('l') => return self.open(),
            KeyCode::Char('r') => return self.reload().map_or(Step::Stay, Step::Load),
            KeyCode::Char('s') => self.sort(),
            KeyCode::Char(' ') => return self.mark(),
            KeyCode::Char('/') | KeyCode::Char(':') => self.selection_prompt(key.code),
            KeyCode::Char('w') => self.write_prompt(),
            KeyCode::Char('R') => return self.act(Action::Replay),
            KeyCode::Char('F') => return self.act(Action::ReplayFollow),
            KeyCode::Char('A') => return self.act(Action::Archive(default_file("archive"))),
            KeyCode::Char('E') => return self.act(Action::Export(default_file("export"))),
            _ => {}
        }
        Step::Stay
    }

    fn on_records(&self) -> bool {
        matches!(self.top(), View::Records(_))
    }

    fn back(&mut self) -> Step {
        if self.views.len() > 1 {
            self.views.pop();
        }
        match self.top() {
            // What was acted on may have left the source since it was read.
            View::Sources => Step::Load(Kind::Sources),
            _ => Step::Stay,
        }
    }

    fn move_by(&mut self, by: isize) -> Step {
        let sources = self.sources.len();
        let mut more = None;
        match self.views.last_mut().expect("the sources view stays") {
            View::Sources => self.sources_list.step(by, sources),
            View::Groups(v) => v.list.step(by, v.rows.len()),
            View::Records(v) => {
                v.list.step(by, v.rows.len());
                // The cursor at the end of what was read: read the next page.
                if v.more && by > 0 && v.list.cursor + 1 >= v.rows.len() {
                    more = Some(v.rows.len() as u64 + PAGE);
                }
            }
            View::Detail(d) => {
                d.scroll = (d.scroll as isize + by).clamp(0, u16::MAX as isize) as u16;
            }
        }
        if let (Some(want), View::Records(v)) = (more, self.top()) {
            return self
                .records_load(v, v.terms.clone(), want)
                .map_or(Step::Stay, Step::Load);
        }
        Step::Stay
    }

    fn open(&mut self) -> Step {
        let next = match self.top() {
            View::Sources => {
                let Some(s) = self.sources.get(self.sources_list.cursor) else {
                    return Step::Stay;
                };
                let source = self.source_ref(s);
                self.views.push(View::Groups(GroupsView {
                    source: source.clone(),
                    rows: Vec::new(),
                    capped: false,
                    sort: Sort::Count,
                    list: ListPos::default(),
                }));
                return Step::Load(Kind::Groups(source));
            }
            View::Groups(v) => {
                let Some(g) = v.rows.get(v.list.cursor) else {
                    return Step::Stay;
                };
                View::Records(RecordsView {
                    source: v.source.clone(),
                    group: Some(g.clone()),
                    terms: Vec::new(),
                    rows: Vec::new(),
                    more: false,
                    marked: BTreeSet::new(),
                    list: ListPos::default(),
                })
            }
            View::Records(v) => {
                let Some(r) = v.rows.get(v.list.cursor) else {
                    return Step::Stay;
                };
                View::Detail(DetailView {
                    record: Box::new(r.clone()),
                    scroll: 0,
                })
            }
            View::Detail(_) => return Step::Stay,
        };
        self.views.push(next);
        self.reload().map_or(Step::Stay, Step::Load)
    }

    fn source_ref(&self, s: &SourceSummary) -> SourceRef {
        let choice = match s.source {
            "table" => SourceChoice::Table,
            _ => SourceChoice::Queues(QueueOptions {
                names: vec![s.location.clone()],
                ..self.req.queue.clone()
            }),
        };
        SourceRef {
            kind: s.source,
            label: s.location.clone(),
            choice,
        }
    }

    fn sort(&mut self) {
        if let View::Groups(v) = self.top_mut() {
            v.sort = match v.sort {
                Sort::Count => Sort::Oldest,
                Sort::Oldest => Sort::Newest,
                Sort::Newest => Sort::Count,
            };
            sort_groups(&mut v.rows, v.sort);
        }
    }

    fn mark(&mut self) -> Step {
        if let View::Records(v) = self.top_mut()
            && let Some(r) = v.rows.get(v.list.cursor)
        {
            let id = r.id.to_string();
            if !v.marked.remove(&id) {
                v.marked.insert(id);
            }
            return self.move_by(1);
        }
        Step::Stay
    }

    fn selection_prompt(&mut self, code: KeyCode) {
        if !self.on_records() {
            self.say(
                "the selection prompt works on records: open a group first",
                true,
            );
            return;
        }
        let text = if code == KeyCode::Char('/') { "/" } else { ":" };
        self.prompt = Some(Prompt {
            kind: PromptKind::Selection,
            label: "select",
            text: text.into(),
        });
    }

    fn write_prompt(&mut self) {
        if let View::Detail(d) = self.top() {
            let id: String = d
                .record
                .id
                .to_string()
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            self.prompt = Some(Prompt {
                kind: PromptKind::WriteRecord,
                label: "write the record to",
                text: format!("dlq-record-{id}.json"),
            });
        }
    }

    /// An action on the marked records, else on the group (and the prompt's selection).
    fn act(&mut self, action: Action) -> Step {
        if self.req.read_only {
            let verb = action.verb();
            self.say(format!("{verb} refused: dlq browse --read-only"), true);
            return Step::Stay;
        }
        let job = match self.top() {
            View::Groups(v) => v.rows.get(v.list.cursor).map(|g| Job {
                action: action.clone(),
                source: v.source.clone(),
                terms: Vec::new(),
                fingerprint: g.fingerprint.clone(),
                ids: Vec::new(),
            }),
            View::Records(v) => Some(Job {
                action: action.clone(),
                source: v.source.clone(),
                terms: v.terms.clone(),
                fingerprint: v.group.as_ref().and_then(|g| g.fingerprint.clone()),
                ids: v.marked.iter().cloned().collect(),
            }),
            _ => None,
        };
        let Some(job) = job else {
            self.say("choose a group or records first", true);
            return Step::Stay;
        };
        if matches!(action, Action::ReplayFollow) && !self.req.workers.enabled {
            self.say(
                "following needs the workers' answers: dlq browse was started with --no-worker-check",
                true,
            );
            return Step::Stay;
        }
        match &action {
            Action::Replay | Action::ReplayFollow => Step::Act(job),
            Action::Archive(to) | Action::Export(to) => {
                self.prompt = Some(Prompt {
                    label: if matches!(action, Action::Archive(_)) {
                        "archive (then delete) to"
                    } else {
                        "export to"
                    },
                    text: to.display().to_string(),
                    kind: PromptKind::File(job),
                });
                Step::Stay
            }
        }
    }

    fn on_prompt_key(&mut self, key: KeyEvent) -> Step {
        let prompt = self.prompt.as_mut().expect("checked");
        match key.code {
            KeyCode::Esc => self.prompt = None,
            KeyCode::Backspace => {
                prompt.text.pop();
            }
            // Ctrl-U clears the line, as in a shell; other control keys type nothing.
            KeyCode::Char('u') if key.modifiers.contains(KeyModifiers::CONTROL) => {
                prompt.text.clear();
            }
            KeyCode::Char(_) if key.modifiers.contains(KeyModifiers::CONTROL) => {}
            KeyCode::Char(c) => prompt.text.push(c),
            KeyCode::Enter => {
                let prompt = self.prompt.take().expect("checked");
                return self.submit(prompt);
            }
            _ => {}
        }
        Step::Stay
    }

    fn submit(&mut self, prompt: Prompt) -> Step {
        let text = prompt.text.trim().to_string();
        match prompt.kind {
            PromptKind::Selection => self.submit_selection(&text),
            PromptKind::File(mut job) if !text.is_empty() => {
                let to = std::path::PathBuf::from(text);
                job.action = match job.action {
                    Action::Archive(_) => Action::Archive(to),
                    _ => Action::Export(to),
                };
                Step::Act(job)
            }
            PromptKind::File(_) => Step::Stay,
            PromptKind::WriteRecord => {
                self.write_record(&text);
                Step::Stay
            }
        }
    }

    /// `/REGEX` sets the pattern (`/` alone clears it); `:KEY VALUE` sets a selection flag
    /// (`:KEY` alone clears it, `:clear` clears all). Checked like the flags before it applies.
    fn submit_selection(&mut self, text: &str) -> Step {
        let View::Records(v) = self.top() else {
            return Step::Stay;
        };
        let terms = match edit_terms(&v.terms, text) {
            Ok(t) => t,
            Err(e) => {
                self.say(e, true);
                return Step::Stay;
            }
        };
        if let Err(e) = (self.req.lower)(&terms) {
            self.say(format!("{e:#}"), true);
            return Step::Stay;
        }
        let kind = self.records_load(v, terms.clone(), PAGE);
        if let View::Records(v) = self.top_mut() {
            v.terms = terms;
            v.rows.clear();
            v.marked.clear();
            v.list = ListPos::default();
        }
        kind.map_or(Step::Stay, Step::Load)
    }

    fn write_record(&mut self, path: &str) {
        let View::Detail(d) = self.top() else {
            return;
        };
        let json = serde_json::to_string_pretty(&d.record).unwrap_or_default();
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, format!("{json}\n").as_bytes()));
        match written {
            Ok(()) => self.say(format!("wrote {path}"), false),
            Err(e) => self.say(format!("cannot write {path}: {e}"), true),
        }
    }
}

/// The terms after one prompt line.
fn edit_terms(terms: &[Term], text: &str) -> Result<Vec<Term>, String> {
    let mut out = terms.to_vec();
    let (key, value) = if let Some(p) = text.strip_prefix('/') {
        ("pattern", p.to_string())
    } else if let Some(rest) = text.strip_prefix(':') {
        let (k, v) = rest.trim().split_once(' ').unwrap_or((rest.trim(), ""));
        (k, v.trim().to_string())
    } else {
        return Err(format!(
            "{text:?}: start with / for a pattern or : for a selection"
        ));
    };
    match key {
        "clear" => return Ok(Vec::new()),
        "" => return Err("a selection after ':', e.g. :motivo IntegrityError".into()),
        "ignore-case" | "include-replayed" => {
            if out.iter().any(|t| t.key == key) {
                out.retain(|t| t.key != key);
            } else {
                out.push(Term {
                    key: key.into(),
                    value: String::new(),
                });
            }
            return Ok(out);
        }
        _ => {}
    }
    // Repeatable flags add; the others replace.
    if !matches!(key, "task" | "id") || value.is_empty() {
        out.retain(|t| t.key != key);
    }
    if !value.is_empty() {
        out.push(Term {
            key: key.into(),
            value,
        });
    }
    Ok(out)
}

fn sort_groups(rows: &mut [GroupRow], sort: Sort) {
    // The "all" row stays first.
    let Some((_, groups)) = rows.split_first_mut() else {
        return;
    };
    match sort {
        Sort::Count => groups.sort_by_key(|g| std::cmp::Reverse(g.group.count)),
        Sort::Oldest => groups.sort_by_key(|g| g.group.oldest),
        Sort::Newest => groups.sort_by_key(|g| std::cmp::Reverse(g.group.newest)),
    }
}

fn default_file(what: &str) -> std::path::PathBuf {
    let at = chrono::Utc::now().format("%Y%m%dT%H%M%SZ");
    format!("dlq-{what}-{at}.ndjson").into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(k: &str, v: &str) -> Term {
        Term {
            key: k.into(),
            value: v.into(),
        }
    }

    #[test]
    fn prompt_lines_edit_the_terms() {
        let a = edit_terms(&[], ":motivo IntegrityError").unwrap();
        assert_eq!(a, vec![t("motivo", "IntegrityError")]);
        let b = edit_terms(&a, "/pedido_id=5").unwrap();
        assert_eq!(
            b,
            vec![t("motivo", "IntegrityError"), t("pattern", "pedido_id=5")]
        );
        let c = edit_terms(&b, ":motivo KeyError").unwrap();
        assert_eq!(
            c,
            vec![t("pattern", "pedido_id=5"), t("motivo", "KeyError")]
        );
        let d = edit_terms(&c, ":task a")
            .and_then(|d| edit_terms(&d, ":task b"))
            .unwrap();
        assert_eq!(d.iter().filter(|t| t.key == "task").count(), 2);
        assert_eq!(edit_terms(&d, "/").unwrap().len(), 3);
        assert!(edit_terms(&d, ":clear").unwrap().is_empty());
        assert!(edit_terms(&d, "motivo x").is_err());
        assert!(edit_terms(&d, ":").is_err());
    }
}
