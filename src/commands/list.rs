//! `dlq list`: every dead-letter source at a glance: counts, oldest, top reasons.

use crate::error::Exit;
use crate::fingerprint;
use crate::model::rfc3339;
use crate::output::{Printer, Tabled, ellipsize, short_time};
use crate::settings::Settings;
use crate::source::summary::{ListOptions, QueueSummary, Sample};
use crate::source::table::FailedTable;
use anyhow::Result;
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::collections::HashMap;

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

/// One reason group in a summary.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ReasonCount {
    pub(crate) fingerprint: String,
    pub(crate) count: u64,
    pub(crate) example: String,
}

/// One line of `list`: a table or a DLQ. Fields in the JSON order.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SourceSummary {
    pub(crate) source: &'static str,
    pub(crate) location: String,
    /// Dead letters waiting (pending rows / ready messages).
    pub(crate) pending: u64,
    /// All rows (table) or ready + unacked (queue).
    pub(crate) total: u64,
    #[serde(serialize_with = "opt_rfc3339")]
    pub(crate) oldest: Option<DateTime<Utc>>,
    pub(crate) top_reasons: Vec<ReasonCount>,
    /// Queue only (null for the table).
    pub(crate) details: Option<QueueDetails>,
}

/// The queue-only facts of a `list` line.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct QueueDetails {
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    pub(crate) ready: u64,
    pub(crate) unacked: Option<u64>,
    pub(crate) consumers: u32,
    pub(crate) fed_by: Vec<String>,
    pub(crate) dead_letter_exchanges: Vec<String>,
    pub(crate) delivery_limit: Option<i64>,
    pub(crate) discovered: bool,
    pub(crate) sample: SampleView,
}

/// How much of a DLQ's head was read for its oldest message and reasons.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub(crate) enum SampleView {
    Read { read: u64, of: u64, complete: bool },
    Skipped { read: u64, skipped: String },
}

fn opt_rfc3339<S: serde::Serializer>(t: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_str(&rfc3339(t)),
        None => s.serialize_none(),
    }
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

/// Groups raw reasons by fingerprint, most frequent first.
pub(crate) fn top_reasons(
    reasons: impl IntoIterator<Item = (String, u64)>,
    top: usize,
) -> Vec<ReasonCount> {
    let mut groups: HashMap<String, ReasonCount> = HashMap::new();
    for (motivo, n) in reasons {
        let fp = fingerprint::fingerprint(&motivo);
        groups
            .entry(fp.clone())
            .or_insert_with(|| ReasonCount {
                fingerprint: fp,
                count: 0,
                example: fingerprint::headline(&motivo).to_string(),
            })
            .count += n;
    }
    let mut v: Vec<ReasonCount> = groups.into_values().collect();
    v.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then_with(|| a.fingerprint.cmp(&b.fingerprint))
    });
    v.truncate(top);
    v
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
    let mut summaries = Vec::new();
    let mut exit = Exit::Ok;
    if let Some(db) = &settings.endpoints.database {
        let table = FailedTable::open(&db.url, &db.table).await?;
        let s = table.summary().await?;
        summaries.push(SourceSummary {
            source: "table",
            location: table.location(),
            pending: s.pending,
            total: s.total,
            oldest: s.oldest_pending,
            details: None,
            top_reasons: top_reasons(s.reasons, opts.top),
        });
    } else {
        printer
            .info("no database configured (--database-url / DLQ_DATABASE_URL): table not listed");
    }
    let mut named: Vec<String> = Vec::new();
    for q in opts.queues.iter().chain(&settings.config_queues) {
        if !named.contains(q) {
            named.push(q.clone());
        }
    }
    // Only the built-in default URL, nothing named: RabbitMQ is optional here, and not even
    // tried for a Redis-only team that has a table to list.
    let rabbit_optional = settings.endpoints.rabbit_is_default && named.is_empty();
    if named.is_empty() && settings.endpoints.rabbit_unused() && !summaries.is_empty() {
        printer.debug(
            1,
            "RabbitMQ not listed: Celery's broker is Redis and no RabbitMQ is configured (--amqp-url)",
        );
        printer.typed(&summaries)?;
        return Ok(exit);
    }
    let list_opts = ListOptions {
        named,
        sample: opts.sample,
        motivo_headers: opts.motivo_headers.clone(),
        exclude: opts.exclude.clone(),
    };
    match crate::source::summary::list(&settings.endpoints.rabbit, &list_opts).await {
        Ok(listing) => {
            for w in &listing.warnings {
                printer.warn(w);
            }
            for n in &listing.notes {
                printer.warn(n);
            }
            for r in &listing.remarks {
                printer.info(r);
            }
            for m in &listing.missing {
                printer.warn(format!("queue {m:?} does not exist (nothing was created)"));
                exit = Exit::Usage;
            }
            summaries.extend(listing.queues.iter().map(|q| queue_summary(q, opts.top)));
        }
        Err(e) if crate::error::exit_for(&e) == Exit::Usage => return Err(e),
        Err(e) if rabbit_optional && !summaries.is_empty() => {
            printer.info(format!("RabbitMQ not listed: {e:#}"));
        }
        Err(e) if summaries.is_empty() => return Err(e),
        Err(e) => {
            printer.warn(format!("RabbitMQ not listed: {e:#}"));
            exit = Exit::Partial;
        }
    }
    printer.typed(&summaries)?;
    Ok(exit)
}

/// A DLQ as a `list` row: the queue-only facts go in `details`.
fn queue_summary(q: &QueueSummary, top: usize) -> SourceSummary {
    let (sample, oldest, reasons) = match &q.sample {
        Sample::Read {
            read,
            reasons,
            oldest,
        } => (
            SampleView::Read {
                read: *read,
                of: q.ready,
                complete: *read >= q.ready,
            },
            *oldest,
            top_reasons(reasons.iter().cloned(), top),
        ),
        Sample::Skipped(why) => (
            SampleView::Skipped {
                read: 0,
                skipped: why.clone(),
            },
            None,
            Vec::new(),
        ),
    };
    SourceSummary {
        source: "queue",
        location: q.name.clone(),
        pending: q.ready,
        total: q.ready + q.unacked.unwrap_or(0),
        oldest,
        details: Some(QueueDetails {
            kind: q.kind.as_str(),
            ready: q.ready,
            unacked: q.unacked,
            consumers: q.consumers,
            fed_by: q.fed_by.clone(),
            dead_letter_exchanges: q.via.clone(),
            delivery_limit: q.delivery_limit,
            discovered: q.discovered,
            sample,
        }),
        top_reasons: reasons,
    }
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

/// "3d 4h" style age, for humans.
pub(crate) fn age(t: DateTime<Utc>) -> String {
    let d = Utc::now().signed_duration_since(t);
    let mins = d.num_minutes().max(0);
    match mins {
        m if m < 60 => format!("{m}m ago"),
        m if m < 60 * 48 => format!("{}h {}m ago", m / 60, m % 60),
        m => format!("{}d {}h ago", m / (60 * 24), (m / 60) % 24),
    }
}
