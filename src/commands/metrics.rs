//! `dlq metrics`: the figures of every dead-letter source in the Prometheus text format,
//! on stdout, in a textfile for node_exporter, or served on `GET /metrics`.

use crate::error::{Exit, usage};
use crate::monitor::{self, Request, exposition, serve};
use crate::output::Printer;
use crate::settings::Settings;
use anyhow::Result;
use std::path::PathBuf;

/// `dlq metrics`'s flags, as its options (`--interval` is checked in `run`).
pub(crate) fn lower(a: crate::cli::MetricsArgs) -> Options {
    Options {
        queues: a.source.queues,
        motivo_headers: a.source.motivo_header,
        force: a.source.force,
        sample: a.sample,
        textfile: a.textfile,
        listen: a.listen,
        interval: a.interval,
    }
}

pub(crate) struct Options {
    /// `-Q`: only these queues.
    pub(crate) queues: Vec<String>,
    pub(crate) motivo_headers: Vec<String>,
    pub(crate) force: bool,
    /// Messages read at the head of each DLQ for age and reasons; `None` reads nothing.
    pub(crate) sample: Option<u64>,
    pub(crate) textfile: Option<PathBuf>,
    pub(crate) listen: Option<String>,
    /// `--interval` as given: the least time between two refreshes of `--listen`.
    pub(crate) interval: String,
}

pub(crate) async fn run(settings: &Settings, printer: &Printer, opts: Options) -> Result<Exit> {
    let interval = crate::when::parse_duration(&opts.interval)
        .map_err(|e| usage(format!("--interval: {e}")))?
        .to_std()
        .map_err(|_| usage("--interval must not be negative"))?;
    let req = Request {
        queues: opts.queues,
        config_queues: settings.config_queues.clone(),
        motivo_headers: opts.motivo_headers,
        force: opts.force,
        // By default metrics never read a queue: depth alone is exact and cheap.
        sample: Some(opts.sample.unwrap_or(0)),
        new_since: None,
    };
    let render = || async {
        let figures = monitor::gather(&settings.endpoints, &req).await?;
        for w in &figures.warnings {
            printer.warn(w);
        }
        Ok(exposition::render(&figures.sources, chrono::Utc::now()))
    };
    match (&opts.listen, &opts.textfile) {
        (Some(addr), _) => serve::listen(addr, interval, render, printer).await?,
        (None, Some(path)) => serve::write_atomically(path, &render().await?)?,
        (None, None) => {
            use std::io::Write as _;
            let text = render().await?;
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())?;
            out.flush()?;
        }
    }
    Ok(Exit::Ok)
}
