//! `dlq audit`: the audit trail, filtered by time and run.

use crate::audit::{self, Record};
use crate::error::{Exit, usage};
use crate::output::Printer;
use crate::settings::Settings;
use anyhow::Result;
use chrono::{DateTime, Utc};

pub(crate) struct Options {
    pub(crate) since: Option<DateTime<Utc>>,
    pub(crate) run: Option<String>,
}

/// `dlq audit`'s flags, as its options.
pub(crate) fn lower(a: crate::cli::AuditArgs, now: DateTime<Utc>) -> Result<Options> {
    Ok(Options {
        since: since(a.since.as_deref(), now)?,
        run: a.run,
    })
}

/// `--since`: the forms the selection's `--since` takes.
fn since(raw: Option<&str>, now: DateTime<Utc>) -> Result<Option<DateTime<Utc>>> {
    raw.map(|s| crate::when::parse_when(s, now).map_err(|e| usage(format!("--since: {e}"))))
        .transpose()
}

pub(crate) async fn run(settings: &Settings, printer: &Printer, opts: Options) -> Result<Exit> {
    let Some(path) = settings.endpoints.audit_log.as_deref() else {
        return Err(usage(
            "no audit log path: set --audit-log, DLQ_AUDIT_LOG, XDG_STATE_HOME or HOME",
        ));
    };
    let (records, bad) = audit::read(path)?;
    if bad > 0 {
        printer.warn(format!(
            "{bad} line(s) of {} are not audit records (cut short by a crash?); skipped",
            path.display()
        ));
    }
    let rows: Vec<Record> = records
        .into_iter()
        .filter(|r| opts.run.as_ref().is_none_or(|id| &r.run_id == id))
        .filter(|r| opts.since.is_none_or(|t| at(r).is_some_and(|at| at >= t)))
        .collect();
    printer.typed(&rows)?;
    Ok(Exit::Ok)
}

fn at(r: &Record) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(&r.at)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}
