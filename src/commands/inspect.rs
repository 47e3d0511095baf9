//! `dlq inspect`: individual dead letters.

use crate::error::Exit;
use crate::output::Printer;
use crate::select::{Selected, Selection};
use crate::settings::Settings;
use crate::source::queue::Parts;
use crate::source::{self, SourceChoice};
use anyhow::Result;
use chrono::{DateTime, Utc};

pub(crate) const DEFAULT_LIMIT: u64 = 20;

pub(crate) struct Options {
    pub(crate) source: SourceChoice,
    pub(crate) selection: Selection,
    pub(crate) full: bool,
}

/// `dlq inspect`'s flags, as its options (at most `DEFAULT_LIMIT` records unless `--limit`).
pub(crate) fn lower(a: crate::cli::InspectArgs, now: DateTime<Utc>) -> Result<Options> {
    let mut selection = super::lower::selection(&a.selection, now)?;
    if selection.limit.is_none() {
        selection.limit = Some(DEFAULT_LIMIT);
    }
    Ok(Options {
        source: super::lower::source(&a.source),
        selection,
        full: a.full,
    })
}

pub(crate) async fn run(settings: &Settings, printer: &Printer, opts: Options) -> Result<Exit> {
    let rx = source::open_stream(
        &settings.endpoints,
        printer,
        &opts.source,
        &opts.selection,
        Parts::ALL,
    )
    .await?;
    let mut selected = Selected::new(rx, &opts.selection);
    let mut out = printer.records(opts.full)?;
    while let Some(rec) = selected.next().await {
        out.write(&rec?).await?;
    }
    // Past the limit a quorum read reads on to the end before it gives back: it must not
    // wait for the output too, holding the queue (see `rabbit::reader::ReadSpec::hold_wait`).
    let more = selected.has_more().await;
    let eval_warning = selected.eval_warning();
    drop(selected);
    let n = out.finish().await?;
    if let Some(w) = eval_warning {
        printer.warn(w);
    }
    if more? {
        printer.info(format!(
            "showing the first {n}; more match (use --limit N, or `dlq filter --count`)"
        ));
    } else if n == 0 {
        printer.info("no dead letters match");
    }
    Ok(Exit::Ok)
}
