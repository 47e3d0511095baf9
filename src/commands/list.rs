//! `dlq list`: every dead-letter source at a glance: counts, oldest, top reasons.

use crate::error::Exit;
use crate::output::{Printer, Tabled, age, ellipsize, short_time};
use crate::settings::Settings;
use crate::source::overview::{
    self, Note, OverviewOptions, QueueDetails, SampleView, SourceSummary,
};
use anyhow::Result;

pub(crate) struct Options {
    /// Queues named on the command line, listed even without the management API.
    pub(crate) queues: Vec<String>,
    pub(crate) top: usize,
    /// Messages read at the head of each DLQ for oldest/top reasons (`None`: automatic).
    pub(crate) sample: Option<u64>,
    pub(crate) motivo_headers: Vec<String>,
    /// `--exclude GLOB`: discovered DLQs left out.
    pub(crate) exclude: Vec<String>,
}

impl Tabled for SourceSummary {
    fn columns() -> &'static [&'static str] {
        &[
            "source",
            "location",
            "pending",
            "total",
            "oldest pending",
            "top reasons",
            "details",
        ]
    }

    fn cells(&self) -> Vec<String> {
        let d = self.details.as_ref();
        let partial = match d.map(|d| &d.sample) {
            Some(SampleView::Read { read, of, complete }) if !complete && *read != 0 => {
                Some((*read, *of))
            }
            _ => None,
        };
        let mut reasons: Vec<String> = Vec::new();
        if let Some((read, of)) = partial {
            reasons.push(format!("(first {read} of {of})"));
        }
        if let Some(SampleView::Skipped { skipped, .. }) = d.map(|d| &d.sample) {
            reasons.push(format!("({skipped})"));
        }
        reasons.extend(
            self.top_reasons
                .iter()
                .map(|r| format!("{:>6}× {}", r.count, ellipsize(&r.fingerprint, 60))),
        );
        let mut oldest = self
            .oldest
            .map(|t| format!("{} ({})", short_time(&t), age(t)))
            .unwrap_or_else(|| "-".into());
        if let (Some((read, _)), true) = (partial, self.oldest.is_some()) {
            oldest.push_str(&format!("\n(in first {read})"));
        }
        vec![
            self.source.into(),
            self.location.clone(),
            self.pending.to_string(),
            self.total.to_string(),
            oldest,
            reasons.join("\n"),
            d.map(queue_details).unwrap_or_default(),
        ]
    }
}

/// `dlq list`'s flags, as its options.
pub(crate) fn lower(a: crate::cli::ListArgs) -> Options {
    Options {
        queues: a.queues,
        top: a.top,
        sample: a.sample,
        motivo_headers: a.motivo_header,
        exclude: a.exclude,
    }
}

pub(crate) async fn run(settings: &Settings, printer: &Printer, opts: Options) -> Result<Exit> {
    let named = super::lower::named_queues(&opts.queues, settings);
    let overview = overview::gather(
        &settings.endpoints,
        &OverviewOptions {
            named,
            top: opts.top,
            sample: opts.sample,
            motivo_headers: opts.motivo_headers,
            exclude: opts.exclude,
        },
    )
    .await?;
    for note in &overview.notes {
        match note {
            Note::Info(m) => printer.info(m),
            Note::Warn(m) => printer.warn(m),
            Note::Debug(m) => printer.debug(1, m),
        }
    }
    printer.typed(&overview.sources)?;
    Ok(overview.exit)
}

/// The queue facts of a `list` row, for humans: type, unacked, consumers, feeders.
fn queue_details(d: &QueueDetails) -> String {
    let mut first = vec![d.kind.to_string()];
    match d.unacked {
        Some(n) => first.push(format!("{n} unacked")),
        None => first.push("unacked ?".into()),
    }
    first.push(format!(
        "{} consumer{}",
        d.consumers,
        if d.consumers == 1 { "" } else { "s" }
    ));
    if let Some(l) = d.delivery_limit {
        first.push(format!("delivery limit {l}"));
    }
    let mut lines = vec![first.join(", ")];
    if !d.fed_by.is_empty() {
        lines.push(format!("fed by {}", d.fed_by.join(", ")));
    } else if !d.discovered {
        lines.push("named (-Q / config)".into());
    }
    if !d.dead_letter_exchanges.is_empty() {
        lines.push(format!("via {}", d.dead_letter_exchanges.join(", ")));
    }
    lines.join("\n")
}
