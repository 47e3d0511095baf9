//! `dlq replay`: validated options in, the table, queue or archive replay engine out.

use crate::cli::ReplayArgs;
use crate::error::Exit;
use crate::output::Printer;
use crate::replay::{self, Target};
use crate::select::Selection;
use crate::settings::{self, ReplayRequest, Settings};
use crate::source::SourceChoice;
use anyhow::Result;

pub async fn run(
    settings: &Settings,
    printer: &Printer,
    source: SourceChoice,
    selection: Selection,
    a: &ReplayArgs,
) -> Result<Exit> {
    match settings::replay_request(settings, a, source, selection)? {
        ReplayRequest::Restore {
            file,
            common,
            canary,
        } => {
            let opts = replay::restore::Options {
                file: &file,
                common,
                canary: canary.map(|(n, wait)| (n.get(), wait)),
            };
            replay::restore::run(&settings.endpoints, printer, opts).await
        }
        ReplayRequest::Table { mut common, canary } => {
            let target = common
                .target
                .take()
                .unwrap_or_else(|| Target::Queue(crate::celery::DEFAULT_CELERY_QUEUE.into()));
            let opts = replay::table::Options {
                common,
                target,
                canary: canary.map(|(n, wait)| (n.get(), wait)),
            };
            replay::table::run(&settings.endpoints, printer, opts).await
        }
        ReplayRequest::Queue {
            queues,
            common,
            canary,
            canary_wait,
            plan_first,
        } => {
            let opts = replay::queue::Options {
                record: crate::source::queue::RecordOptions {
                    motivo_headers: queues.motivo_headers,
                    ..Default::default()
                },
                queues: queues.names,
                force: queues.force,
                common,
                canary: canary.map(|n| n.get()),
                canary_wait,
                plan_first,
            };
            replay::queue::run(&settings.endpoints, printer, opts).await
        }
    }
}
