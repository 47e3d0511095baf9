//! `dlq workers`: the live Celery workers, as the replay's worker check sees them.

use crate::celery::dispatch::Dispatcher;
use crate::error::Exit;
use crate::output::Printer;
use crate::output::Tabled;
use crate::settings::Settings;
use anyhow::Result;
use serde::Serialize;
use std::time::Duration;

pub(crate) struct Options {
    pub(crate) full: bool,
    pub(crate) timeout: Duration,
}

/// `dlq workers`'s flags, as its options.
pub(crate) fn lower(a: crate::cli::WorkersArgs) -> Result<Options> {
    Ok(Options {
        full: a.full,
        timeout: super::lower::worker_timeout(&a.worker_timeout)?,
    })
}

pub(crate) async fn run(settings: &Settings, printer: &Printer, opts: Options) -> Result<Exit> {
    let dispatcher =
        Dispatcher::connect(&settings.endpoints.celery, &settings.endpoints.mailbox).await?;
    let live = dispatcher.workers(opts.timeout).await?;
    if live.is_empty() {
        printer.warn(format!(
            "no Celery worker answered on {} ({}) within {:?} (stopped, remote control disabled, another vhost, or another control_exchange: --control-exchange)",
            dispatcher.describe(),
            settings.endpoints.mailbox.request,
            opts.timeout
        ));
    }
    let mut out = printer.stream::<WorkerRow>();
    for w in live {
        out.write(WorkerRow {
            name: w.name,
            queues: w.queues,
            tasks: w.tasks,
            full: opts.full,
        })?;
    }
    out.finish()?;
    Ok(Exit::Ok)
}

/// One live worker; `-o json` always lists every task.
#[derive(Serialize)]
struct WorkerRow {
    name: String,
    queues: Vec<String>,
    tasks: Vec<String>,
    #[serde(skip)]
    full: bool,
}

impl Tabled for WorkerRow {
    fn columns() -> &'static [&'static str] {
        &["worker", "queues", "tasks"]
    }

    fn cells(&self) -> Vec<String> {
        let tasks = if self.full {
            self.tasks.join("\n")
        } else {
            self.tasks.len().to_string()
        };
        vec![self.name.clone(), self.queues.join(", "), tasks]
    }
}
