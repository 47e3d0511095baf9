//! Every dead-letter source at a glance (`dlq list`, the browser's first screen): counts,
//! oldest, top reasons, read by the same rules as every reading command.

use crate::endpoints::Endpoints;
use crate::error::Exit;
use crate::fingerprint;
use crate::model::rfc3339;
use crate::source::summary::{ListOptions, QueueSummary, Sample};
use crate::source::table::FailedTable;
use anyhow::Result;
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::collections::HashMap;

/// What to read: the queues named (beside the discovered ones) and how much of each.
#[derive(Debug, Clone, Default)]
pub(crate) struct OverviewOptions {
    pub(crate) named: Vec<String>,
    pub(crate) top: usize,
    /// Messages read at the head of each DLQ for oldest/top reasons (`None`: automatic).
    pub(crate) sample: Option<u64>,
    pub(crate) motivo_headers: Vec<String>,
    /// Discovered DLQs left out (globs).
    pub(crate) exclude: Vec<String>,
}

/// A line for the operator beside the overview, at its level.
#[derive(Debug, Clone)]
pub(crate) enum Note {
    Info(String),
    Warn(String),
    Debug(String),
}

/// The sources, what to tell the operator, and the exit the overview earns (a named queue
/// missing is a usage error; RabbitMQ unreachable beside a table is partial).
pub(crate) struct Overview {
    pub(crate) sources: Vec<SourceSummary>,
    pub(crate) notes: Vec<Note>,
    pub(crate) exit: Exit,
}

/// Reads every source once: the table's counts, then each DLQ (never changing a queue).
pub(crate) async fn gather(endpoints: &Endpoints, opts: &OverviewOptions) -> Result<Overview> {
    let mut o = Overview {
        sources: Vec::new(),
        notes: Vec::new(),
        exit: Exit::Ok,
    };
    if let Some(db) = &endpoints.database {
        let table = FailedTable::open(&db.url, &db.table).await?;
        let s = table.summary().await?;
        o.sources.push(SourceSummary {
            source: "table",
            location: table.location(),
            pending: s.pending,
            total: s.total,
            oldest: s.oldest_pending,
            details: None,
            top_reasons: top_reasons(s.reasons, opts.top),
        });
    } else {
        o.notes.push(Note::Info(
            "no database configured (--database-url / DLQ_DATABASE_URL): table not listed".into(),
        ));
    }
    // Only the built-in default URL, nothing named: RabbitMQ is optional here, and not even
    // tried for a Redis-only team that has a table to list.
    let rabbit_optional = endpoints.rabbit_is_default && opts.named.is_empty();
    if opts.named.is_empty() && endpoints.rabbit_unused() && !o.sources.is_empty() {
        o.notes.push(Note::Debug(
            "RabbitMQ not listed: Celery's broker is Redis and no RabbitMQ is configured (--amqp-url)".into(),
        ));
        return Ok(o);
    }
    let list_opts = ListOptions {
        named: opts.named.clone(),
        sample: opts.sample,
        motivo_headers: opts.motivo_headers.clone(),
        exclude: opts.exclude.clone(),
    };
    match crate::source::summary::list(&endpoints.rabbit, &list_opts).await {
        Ok(listing) => {
            let warn = listing.warnings.iter().chain(&listing.notes);
            o.notes.extend(warn.map(|w| Note::Warn(w.clone())));
            o.notes
                .extend(listing.remarks.iter().map(|r| Note::Info(r.clone())));
            for m in &listing.missing {
                o.notes.push(Note::Warn(format!(
                    "queue {m:?} does not exist (nothing was created)"
                )));
                o.exit = Exit::Usage;
            }
            let queues = listing.queues.iter().map(|q| queue_summary(q, opts.top));
            o.sources.extend(queues);
        }
        Err(e) if crate::error::exit_for(&e) == Exit::Usage => return Err(e),
        Err(e) if rabbit_optional && !o.sources.is_empty() => {
            o.notes
                .push(Note::Info(format!("RabbitMQ not listed: {e:#}")));
        }
        Err(e) if o.sources.is_empty() => return Err(e),
        Err(e) => {
            o.notes
                .push(Note::Warn(format!("RabbitMQ not listed: {e:#}")));
            o.exit = Exit::Partial;
        }
    }
    Ok(o)
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
