//! `dlq filter`: evaluate a selection: count it, group it, or export its records.

use crate::cli;
use crate::error::Exit;
use crate::group::{Group, GroupKey, group};
use crate::model::rfc3339;
use crate::output::{Printer, ellipsize};
use crate::select::{Selected, Selection};
use crate::settings::Settings;
use crate::source::queue::Parts;
use crate::source::{self, SourceChoice};
use anyhow::Result;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use std::collections::HashMap;

impl From<cli::GroupBy> for GroupKey {
    fn from(g: cli::GroupBy) -> Self {
        match g {
            cli::GroupBy::Motivo => GroupKey::Motivo,
            cli::GroupBy::Task => GroupKey::Task,
            cli::GroupBy::Day => GroupKey::Day,
        }
    }
}

pub(crate) enum Mode {
    Count,
    Group(GroupKey),
    Export,
}

pub(crate) struct Options {
    pub(crate) source: SourceChoice,
    pub(crate) selection: Selection,
    pub(crate) mode: Mode,
}

/// `dlq filter`'s flags, as its options.
pub(crate) fn lower(a: cli::FilterArgs, now: DateTime<Utc>) -> Result<Options> {
    let mode = match (a.group_by, a.count) {
        (Some(g), _) => Mode::Group(g.into()),
        (None, true) => Mode::Count,
        (None, false) => Mode::Export,
    };
    Ok(Options {
        source: super::lower::source(&a.source),
        selection: super::lower::selection(&a.selection, now)?,
        mode,
    })
}

pub(crate) async fn run(settings: &Settings, printer: &Printer, opts: Options) -> Result<Exit> {
    if matches!(opts.mode, Mode::Count)
        && matches!(opts.source, SourceChoice::Table)
        && let Some(n) = count_in_sql(settings, &opts.selection).await?
    {
        printer.data_line(&n.to_string())?;
        return Ok(Exit::Ok);
    }
    // A count or a grouping reads the selection's parts of a record and nothing else.
    let parts = match opts.mode {
        Mode::Export => Parts::ALL,
        Mode::Count | Mode::Group(_) => Parts::for_selection(&opts.selection),
    };
    let rx = source::open_stream(
        &settings.endpoints,
        printer,
        &opts.source,
        &opts.selection,
        parts,
    )
    .await?;
    let mut selected = Selected::new(rx, &opts.selection);
    match opts.mode {
        Mode::Count => count(printer, &mut selected).await?,
        Mode::Export => {
            let mut out = printer.records(false)?;
            while let Some(rec) = selected.next().await {
                out.write(&rec?).await?;
            }
            // Past a --limit the reader goes on without waiting for the output (`inspect`).
            let warning = selected.eval_warning();
            drop(selected);
            out.finish().await?;
            if let Some(w) = warning {
                printer.warn(w);
            }
            return Ok(Exit::Ok);
        }
        Mode::Group(key) => {
            let groups = group(&mut selected, key).await?;
            print_groups(printer, key, groups)?;
        }
    }
    if let Some(w) = selected.eval_warning() {
        printer.warn(w);
    }
    Ok(Exit::Ok)
}

async fn count(printer: &Printer, selected: &mut Selected<'_>) -> Result<()> {
    let mut n: u64 = 0;
    let bar = printer.progress(None, "counting");
    while let Some(rec) = selected.next().await {
        rec?;
        n += 1;
        bar.inc(1);
    }
    bar.finish_and_clear();
    printer.data_line(&n.to_string())?;
    Ok(())
}

/// Days in order; otherwise the largest group first.
fn print_groups(printer: &Printer, key: GroupKey, groups: HashMap<String, Group>) -> Result<()> {
    let mut sorted: Vec<(String, Group)> = groups.into_iter().collect();
    match key {
        GroupKey::Day => sorted.sort_by(|a, b| a.0.cmp(&b.0)),
        _ => sorted.sort_by(|a, b| b.1.count.cmp(&a.1.count).then_with(|| a.0.cmp(&b.0))),
    }
    let key_name = match key {
        GroupKey::Motivo => "motivo",
        GroupKey::Task => "task",
        GroupKey::Day => "day",
    };
    let time =
        |t: Option<DateTime<Utc>>| t.map(|t| Value::String(rfc3339(&t))).unwrap_or(Value::Null);
    let mut columns = vec![key_name, "count", "oldest", "newest"];
    if key == GroupKey::Motivo {
        columns.push("example");
    }
    // Tables stay readable; machine formats get the full text.
    let fit = |s: String| {
        if printer.format == crate::output::OutputFormat::Table {
            ellipsize(&s, 70)
        } else {
            s
        }
    };
    let rows: Vec<Vec<Value>> = sorted
        .into_iter()
        .map(|(k, g)| {
            let mut row = vec![
                json!(fit(k)),
                json!(g.count),
                time(g.oldest),
                time(g.newest),
            ];
            if key == GroupKey::Motivo {
                row.push(json!(fit(g.example)));
            }
            row
        })
        .collect();
    printer.rows(&columns, &rows)?;
    Ok(())
}

async fn count_in_sql(settings: &Settings, sel: &Selection) -> Result<Option<u64>> {
    let db = settings.endpoints.require_database()?;
    let table = source::table::FailedTable::open(&db.url, &db.table).await?;
    table.count_exact(sel).await
}
