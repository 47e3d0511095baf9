//! `dlq replay`: validate the flags, then hand over to the table or queue replay engine.

use crate::cli::ReplayArgs;
use crate::error::{Exit, usage};
use crate::output::Printer;
use crate::replay::{self, Target};
use crate::select::Selection;
use crate::settings::Settings;
use crate::source::SourceChoice;
use anyhow::Result;

pub async fn run(
    settings: &Settings,
    printer: &Printer,
    source: SourceChoice,
    selection: Selection,
    a: &ReplayArgs,
) -> Result<Exit> {
    if let Some(r) = a.rate
        && !(r.is_finite() && r > 0.0)
    {
        return Err(usage(format!(
            "--rate must be a positive number of messages per second, got {r}"
        )));
    }
    if a.window == 0 {
        return Err(usage("--window must be at least 1"));
    }
    let explicit_target = match (&a.to_queue, &a.to_exchange) {
        (Some(q), _) if q.trim().is_empty() => return Err(usage("--to-queue must not be empty")),
        (Some(q), _) => Some(Target::Queue(q.clone())),
        (None, Some(ex)) => Some(Target::Exchange {
            exchange: ex.clone(),
            routing_key: a.routing_key.clone().unwrap_or_default(),
        }),
        (None, None) => None,
    };
    if let Some(file) = &a.from_file {
        if matches!(source, SourceChoice::Queues(_)) {
            return Err(usage(
                "--from-file replays an archive; it cannot be combined with -Q",
            ));
        }
        if a.canary.is_some() || a.plan_first {
            return Err(usage(
                "--canary and --plan-first apply to queue replays (-Q)",
            ));
        }
        let opts = replay::restore::Options {
            file,
            selection,
            target: explicit_target,
            dry_run: a.safety.dry_run,
            yes: a.safety.yes,
            rate: a.rate,
            window: a.window,
            max_replays: a.max_replays,
        };
        return replay::restore::run(settings, printer, opts).await;
    }
    match source {
        SourceChoice::Table => {
            if a.canary.is_some() || a.plan_first {
                return Err(usage(
                    "--canary and --plan-first apply to queue replays (-Q)",
                ));
            }
            let opts = replay::table::Options {
                selection,
                target: explicit_target
                    .unwrap_or_else(|| Target::Queue(crate::celery::DEFAULT_CELERY_QUEUE.into())),
                dry_run: a.safety.dry_run,
                yes: a.safety.yes,
                rate: a.rate,
                window: a.window,
            };
            replay::table::run(settings, printer, opts).await
        }
        SourceChoice::Queues(q) => {
            let canary_wait = crate::when::parse_duration(&a.canary_wait)
                .map_err(|e| usage(format!("--canary-wait: {e}")))?;
            if a.canary == Some(0) {
                return Err(usage("--canary must be at least 1"));
            }
            if a.max_replays == 0 {
                return Err(usage("--max-replays must be at least 1"));
            }
            let opts = replay::queue::Options {
                queues: q.names,
                record: crate::source::queue::RecordOptions {
                    motivo_headers: q.motivo_headers,
                    // Only jq can look at headers, properties or the raw copy.
                    lean: selection.jq.is_none(),
                },
                force: q.force,
                selection,
                target: explicit_target,
                dry_run: a.safety.dry_run,
                yes: a.safety.yes,
                rate: a.rate,
                window: a.window,
                max_replays: a.max_replays,
                canary: a.canary,
                plan_first: a.plan_first,
                canary_wait: canary_wait.to_std().unwrap_or_default(),
            };
            replay::queue::run(settings, printer, opts).await
        }
    }
}
