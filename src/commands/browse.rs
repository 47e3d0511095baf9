//! `dlq browse`: the flags lowered once into the browser's request; the browser's prompt
//! terms are lowered by the same selection rules as the flags.

use super::lower;
use crate::browse::{self, Request, Term};
use crate::cli::{BrowseArgs, SelectionArgs};
use crate::error::{Exit, usage};
use crate::output::Printer;
use crate::select::Selection;
use crate::settings::Settings;
use crate::source::QueueOptions;
use crate::source::overview::OverviewOptions;
use crate::when;
use anyhow::Result;

/// `dlq browse`'s flags as its request; every bad value is a usage error before the screen
/// changes.
pub(crate) fn lower(settings: &Settings, a: BrowseArgs) -> Result<Request> {
    let refresh = when::parse_duration(&a.refresh)
        .map_err(|e| usage(format!("--refresh: {e}")))?
        .to_std()
        .map_err(|_| usage("--refresh must not be negative"))?;
    Ok(Request {
        overview: OverviewOptions {
            named: lower::named_queues(&a.queues, settings),
            top: 1,
            sample: None,
            motivo_headers: a.motivo_header.clone(),
            exclude: a.exclude,
        },
        queue: QueueOptions {
            names: Vec::new(),
            motivo_headers: a.motivo_header,
            force: a.force,
        },
        refresh: (!refresh.is_zero()).then_some(refresh),
        read_only: a.read_only,
        workers: lower::worker_check(settings, &a.workers)?,
        profile: settings.profile.clone(),
        lower: Box::new(|terms| lower_terms(terms, chrono::Utc::now())),
    })
}

pub(crate) async fn run(settings: &Settings, printer: &Printer, req: Request) -> Result<Exit> {
    browse::run(&settings.endpoints, printer, req).await
}

/// The prompt's terms (`:motivo X`, `/REGEX` …) as the selection flags they name, lowered
/// like the flags: the same checks, the same messages.
fn lower_terms(terms: &[Term], now: chrono::DateTime<chrono::Utc>) -> Result<Selection> {
    let mut a = SelectionArgs::default();
    for t in terms {
        let v = Some(t.value.clone());
        match t.key.as_str() {
            "motivo" => a.motivo = v,
            "pattern" => a.pattern = v,
            "task" => a.task.push(t.value.clone()),
            "since" => a.since = v,
            "until" => a.until = v,
            "older-than" => a.older_than = v,
            "where" => a.where_ = v,
            "id" => a.id.push(t.value.clone()),
            "ignore-case" => a.ignore_case = true,
            "include-replayed" => a.include_replayed = true,
            other => return Err(usage(format!("unknown selection :{other}"))),
        }
    }
    lower::selection(&a, now)
}
