//! `dlq replay`: the flags lowered once into the table, queue or archive engine's options.

use super::lower;
use crate::cli::ReplayArgs;
use crate::error::{Exit, usage};
use crate::model::Target;
use crate::output::Printer;
use crate::replay::{self, Canary, ReplayCommon};
use crate::settings::Settings;
use crate::source::SourceChoice;
use crate::when;
use anyhow::Result;
use chrono::{DateTime, Utc};
use std::num::{NonZeroU64, NonZeroUsize};

/// Which engine runs the replay, with its options.
enum Request {
    /// `--from-file`: an archive goes back.
    Restore(replay::restore::Options),
    /// Failed-task table rows become Celery tasks again.
    Table(replay::table::Options),
    /// Dead letters move back out of their queues.
    Queue(replay::queue::Options),
}

pub(crate) async fn run(
    settings: &Settings,
    printer: &Printer,
    a: ReplayArgs,
    now: DateTime<Utc>,
) -> Result<Exit> {
    let endpoints = &settings.endpoints;
    match lower_request(settings, a, now)? {
        Request::Restore(o) => replay::restore::run(endpoints, printer, o).await,
        Request::Table(o) => replay::table::run(endpoints, printer, o).await,
        Request::Queue(o) => replay::queue::run(endpoints, printer, o).await,
    }
}

/// Turns the replay flags into one validated request; every bad value or combination is a
/// usage error naming the flag, before anything connects.
fn lower_request(settings: &Settings, a: ReplayArgs, now: DateTime<Utc>) -> Result<Request> {
    let source = lower::source(&a.source);
    let queues = match source {
        SourceChoice::Queues(q) => Some(q),
        SourceChoice::Table => None,
    };
    if queues.is_some() && a.from_file.is_some() {
        return Err(usage(
            "--from-file replays an archive; it cannot be combined with -Q",
        ));
    }
    if queues.is_none() && a.plan_first {
        return Err(usage("--plan-first applies to queue replays (-Q)"));
    }
    if a.max_replays == 0 && queues.is_some() {
        return Err(usage("--max-replays must be at least 1"));
    }
    let canary = canary(&a)?;
    let follow = follow(&a)?;
    if follow.is_some_and(|f| f.mark_on_success) && queues.is_some() {
        return Err(usage(
            "--mark-on-success applies to table replays: a queue replay acknowledges each DLQ copy at the broker's confirm",
        ));
    }
    if follow.is_some_and(|f| f.mark_on_success) && a.from_file.is_some() {
        return Err(usage(
            "--mark-on-success applies to table replays: a restore keeps its journal at the broker's confirm",
        ));
    }
    let mut common = common(settings, &a, now)?;
    if let Some(file) = a.from_file {
        return Ok(Request::Restore(replay::restore::Options {
            file,
            common,
            canary,
            follow,
        }));
    }
    let Some(queues) = queues else {
        // Tasks go to Celery's default queue unless told otherwise.
        let target_is_default = common.target.is_none();
        let target = common
            .target
            .take()
            .unwrap_or_else(|| Target::Queue(crate::celery::DEFAULT_CELERY_QUEUE.into()));
        return Ok(Request::Table(replay::table::Options {
            common,
            target,
            target_is_default,
            canary,
            follow,
        }));
    };
    Ok(Request::Queue(replay::queue::Options {
        record: crate::source::queue::RecordOptions {
            motivo_headers: queues.motivo_headers,
            ..Default::default()
        },
        queues: queues.names,
        force: queues.force,
        common,
        canary,
        plan_first: a.plan_first,
        follow,
    }))
}

/// What every replay shares: selection, destination, pace, window, safety, the worker check
/// and `--transform`.
fn common(settings: &Settings, a: &ReplayArgs, now: DateTime<Utc>) -> Result<ReplayCommon> {
    if let Some(r) = a.rate
        && !(r.is_finite() && r > 0.0)
    {
        return Err(usage(format!(
            "--rate must be a positive number of messages per second, got {r}"
        )));
    }
    let window = NonZeroUsize::new(a.window.unwrap_or(crate::replay::DEFAULT_WINDOW))
        .ok_or_else(|| usage("--window must be at least 1"))?;
    Ok(ReplayCommon {
        selection: lower::selection(&a.selection, now)?,
        target: target(a)?,
        rate: a.rate,
        window,
        window_fixed: a.window.is_some(),
        max_replays: a.max_replays,
        safety: lower::safety(&a.safety),
        workers: lower::worker_check(settings, &a.workers)?,
        transform: a
            .transform
            .as_deref()
            .map(|code| {
                crate::transform::Transform::compile(code)
                    .map(std::sync::Arc::new)
                    .map_err(|e| usage(format!("invalid --transform jq program {code:?}: {e}")))
            })
            .transpose()?,
    })
}

/// `--to-queue` / `--to-exchange` with `--routing-key`; `None` leaves the default to the engine.
fn target(a: &ReplayArgs) -> Result<Option<Target>> {
    Ok(match (&a.to_queue, &a.to_exchange) {
        (Some(q), _) if q.trim().is_empty() => return Err(usage("--to-queue must not be empty")),
        (Some(q), _) => Some(Target::Queue(q.clone())),
        (None, Some(ex)) => Some(Target::Exchange {
            exchange: ex.clone(),
            // Checked now, not at publish time: a forgotten key would route nothing.
            routing_key: a.routing_key.clone().ok_or_else(|| {
                usage("--to-exchange needs --routing-key (pass --routing-key '' for a fanout or headers exchange)")
            })?,
        }),
        (None, None) => None,
    })
}

/// `--canary N` with `--canary-wait D`.
fn canary(a: &ReplayArgs) -> Result<Option<Canary>> {
    let wait =
        when::parse_duration(&a.canary_wait).map_err(|e| usage(format!("--canary-wait: {e}")))?;
    let Some(n) = a.canary else {
        return Ok(None);
    };
    let count = NonZeroU64::new(n).ok_or_else(|| usage("--canary must be at least 1"))?;
    Ok(Some(Canary {
        count,
        wait: wait.to_std().unwrap_or_default(),
    }))
}

/// `--follow` with its timeout, `--enable-events` and `--mark-on-success`.
fn follow(a: &ReplayArgs) -> Result<Option<replay::follow::Follow>> {
    let f = &a.follow;
    if !f.follow {
        return Ok(None);
    }
    let timeout = when::parse_duration(&f.follow_timeout)
        .map_err(|e| usage(format!("--follow-timeout: {e}")))?
        .to_std()
        .unwrap_or_default();
    if timeout.is_zero() {
        return Err(usage("--follow-timeout must be more than 0s"));
    }
    if a.workers.no_worker_check {
        return Err(usage(
            "--follow needs the workers' answers: it cannot be combined with --no-worker-check",
        ));
    }
    Ok(Some(replay::follow::Follow {
        timeout,
        enable_events: f.enable_events,
        mark_on_success: f.mark_on_success,
    }))
}
