//! Lowering the flag groups several commands share (selection, source, safety, the worker
//! check) into validated values: every bad value is a usage error naming its flag, before
//! anything connects.

use crate::bulk::Safety;
use crate::celery::workers::TaskMap;
use crate::cli::{SafetyArgs, SelectionArgs, SourceArgs, WorkerCheckArgs};
use crate::error::usage;
use crate::jq::JqFilter;
use crate::model::RecordId;
use crate::replay::workers::WorkerCheck;
use crate::select::{ReplayedFilter, Selection};
use crate::settings::Settings;
use crate::source::{QueueOptions, SourceChoice};
use crate::when;
use anyhow::Result;
use chrono::{DateTime, Utc};

/// `-Q` and its companions: the table unless queues are named.
pub(crate) fn source(args: &SourceArgs) -> SourceChoice {
    if args.queues.is_empty() {
        SourceChoice::Table
    } else {
        SourceChoice::Queues(QueueOptions {
            names: args.queues.clone(),
            motivo_headers: args.motivo_header.clone(),
            force: args.force,
        })
    }
}

/// The queues named with `-Q` and in the config file, each once, in that order.
pub(crate) fn named_queues(flags: &[String], settings: &Settings) -> Vec<String> {
    let mut named: Vec<String> = Vec::new();
    for q in flags.iter().chain(&settings.config_queues) {
        if !named.contains(q) {
            named.push(q.clone());
        }
    }
    named
}

/// `--dry-run` and `--yes`.
pub(crate) fn safety(a: &SafetyArgs) -> Safety {
    Safety {
        dry_run: a.dry_run,
        yes: a.yes,
    }
}

/// Turns the selection flags into a validated `Selection`; every bad value is a usage error
/// naming the flag.
pub(crate) fn selection(args: &SelectionArgs, now: DateTime<Utc>) -> Result<Selection> {
    let pattern = args
        .pattern
        .as_deref()
        .map(|p| regex::Regex::new(p).map_err(|e| usage(format!("invalid --pattern regex: {e}"))))
        .transpose()?;
    let jq = args
        .where_
        .as_deref()
        .map(|j| {
            JqFilter::compile(j)
                .map_err(|e| usage(format!("invalid --where jq expression {j:?}: {e}")))
        })
        .transpose()?;
    let (since, until) = window(args, now)?;
    check_values(args)?;
    let ids = args
        .id
        .iter()
        .map(|s| RecordId::parse(s.trim()))
        .collect::<Vec<_>>();
    let replayed = if args.include_replayed {
        ReplayedFilter::All
    } else if args.only_replayed {
        ReplayedFilter::Only
    } else {
        ReplayedFilter::Pending
    };
    Ok(Selection {
        motivo: args.motivo.clone(),
        ignore_case: args.ignore_case,
        pattern,
        tasks: args.task.clone(),
        since,
        until,
        jq,
        ids,
        fingerprint: None,
        replayed,
        limit: args.limit,
    })
}

type Window = (Option<DateTime<Utc>>, Option<DateTime<Utc>>);

/// `--since`, `--until` and `--older-than` as one time window; an empty one is an error.
fn window(args: &SelectionArgs, now: DateTime<Utc>) -> Result<Window> {
    let when = |raw: &Option<String>, flag: &str| {
        raw.as_deref()
            .map(|s| when::parse_when(s, now).map_err(|e| usage(format!("--{flag}: {e}"))))
            .transpose()
    };
    let since = when(&args.since, "since")?;
    let until = when(&args.until, "until")?;
    let older = args
        .older_than
        .as_deref()
        .map(|s| when::parse_cutoff(s, now).map_err(|e| usage(format!("--older-than: {e}"))))
        .transpose()?;
    let until = match (until, older) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    if let (Some(s), Some(u)) = (since, until)
        && s >= u
    {
        return Err(usage(format!(
            "empty time window: --since {} is not before the upper bound {}",
            crate::model::rfc3339(&s),
            crate::model::rfc3339(&u)
        )));
    }
    Ok((since, until))
}

/// Values clap accepts but a selection cannot use.
fn check_values(args: &SelectionArgs) -> Result<()> {
    if args.limit == Some(0) {
        return Err(usage("--limit must be at least 1"));
    }
    if args.motivo.as_deref() == Some("") {
        return Err(usage("--motivo must not be empty"));
    }
    if args.ignore_case && args.motivo.is_none() {
        return Err(usage(
            "-i/--ignore-case applies to --motivo, which is missing",
        ));
    }
    if args.task.iter().any(|t| t.trim().is_empty()) {
        return Err(usage("--task must not be empty"));
    }
    if args.id.iter().any(|s| s.trim().is_empty()) {
        return Err(usage("--id must not be empty"));
    }
    Ok(())
}

/// `--task-map` (after the config's `task_map`), `--worker-timeout`, `--no-worker-check`.
pub(crate) fn worker_check(settings: &Settings, a: &WorkerCheckArgs) -> Result<WorkerCheck> {
    let mut entries = settings.config_task_map.clone();
    entries.extend(a.task_map.iter().cloned());
    let map = TaskMap::parse(&entries).map_err(|e| usage(format!("--task-map: {e}")))?;
    Ok(WorkerCheck {
        enabled: !a.no_worker_check,
        timeout: worker_timeout(&a.worker_timeout)?,
        map,
        mailbox: settings.endpoints.mailbox.clone(),
    })
}

/// `--worker-timeout`: a positive duration.
pub(crate) fn worker_timeout(raw: &str) -> Result<std::time::Duration> {
    let d = when::parse_duration(raw).map_err(|e| usage(format!("--worker-timeout: {e}")))?;
    match d.to_std() {
        Ok(d) if !d.is_zero() => Ok(d),
        _ => Err(usage(format!(
            "--worker-timeout must be a positive duration, got {raw:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection_validation() {
        let now = Utc::now();
        let bad = |a: SelectionArgs| selection(&a, now).map(|_| ()).unwrap_err().to_string();
        assert!(
            bad(SelectionArgs {
                pattern: Some("(".into()),
                ..Default::default()
            })
            .contains("--pattern")
        );
        assert!(
            bad(SelectionArgs {
                where_: Some(".a |".into()),
                ..Default::default()
            })
            .contains("--where")
        );
        assert!(
            bad(SelectionArgs {
                older_than: Some("7x".into()),
                ..Default::default()
            })
            .contains("--older-than")
        );
        assert!(
            bad(SelectionArgs {
                limit: Some(0),
                ..Default::default()
            })
            .contains("--limit")
        );
        assert!(
            bad(SelectionArgs {
                since: Some("1d".into()),
                until: Some("2d".into()),
                ..Default::default()
            })
            .contains("empty time window")
        );
    }
}
