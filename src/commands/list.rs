//! `dlq list`: every dead-letter source at a glance: counts, oldest, top reasons.

use crate::error::Exit;
use crate::fingerprint;
use crate::model::rfc3339;
use crate::output::{Printer, ellipsize, short_time};
use crate::settings::Settings;
use crate::source::summary::{ListOptions, QueueSummary, Sample};
use crate::source::table::FailedTable;
use anyhow::Result;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::json;
use std::collections::HashMap;

pub struct Options {
    /// Queues named on the command line, listed even without the management API.
    pub queues: Vec<String>,
    pub top: usize,
    /// Messages read at the head of each DLQ for oldest/top reasons (`None`: automatic).
    pub sample: Option<u64>,
    pub motivo_headers: Vec<String>,
}

/// One reason group in a summary.
#[derive(Debug, Clone, Serialize)]
pub struct ReasonCount {
    pub fingerprint: String,
    pub count: u64,
    pub example: String,
}

/// One line of `list`: a table or a DLQ.
#[derive(Debug, Clone, Serialize)]
pub struct SourceSummary {
    pub source: &'static str,
    pub location: String,
    /// Dead letters waiting (pending rows / ready messages).
    pub pending: u64,
    /// All rows (table) or ready + unacked (queue).
    pub total: u64,
    pub oldest: Option<String>,
    /// Queue only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
    pub top_reasons: Vec<ReasonCount>,
}

/// Groups raw reasons by fingerprint, most frequent first.
pub fn top_reasons(
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

pub async fn run(settings: &Settings, printer: &Printer, opts: Options) -> Result<Exit> {
    let mut summaries = Vec::new();
    let mut exit = Exit::Ok;
    if let Some(db) = &settings.database {
        let table = FailedTable::open(db, &settings.table).await?;
        let s = table.summary().await?;
        summaries.push(SourceSummary {
            source: "table",
            location: table.location(),
            pending: s.pending,
            total: s.total,
            oldest: s.oldest_pending.as_ref().map(rfc3339),
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
    // Only the built-in default URL, nothing named: RabbitMQ is optional here.
    let rabbit_optional = !settings.amqp_url_explicit
        && named.is_empty()
        && settings.management_url.is_none()
        && settings.vhost.is_none();
    let list_opts = ListOptions {
        named,
        sample: opts.sample,
        motivo_headers: opts.motivo_headers.clone(),
    };
    match crate::source::summary::list(settings, &list_opts).await {
        Ok(listing) => {
            for w in &listing.warnings {
                printer.warn(w);
            }
            for n in &listing.notes {
                printer.warn(n);
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
    print(printer, &summaries)?;
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
            json!({"read": read, "of": q.ready, "complete": *read >= q.ready}),
            oldest.as_ref().map(rfc3339),
            top_reasons(reasons.iter().cloned(), top),
        ),
        Sample::Skipped(why) => (json!({"read": 0, "skipped": why}), None, Vec::new()),
    };
    let details = json!({
        "type": q.kind.as_str(),
        "ready": q.ready,
        "unacked": q.unacked,
        "consumers": q.consumers,
        "fed_by": q.fed_by,
        "dead_letter_exchanges": q.via,
        "delivery_limit": q.delivery_limit,
        "discovered": q.discovered,
        "sample": sample,
    });
    SourceSummary {
        source: "queue",
        location: q.name.clone(),
        pending: q.ready,
        total: q.ready + q.unacked.unwrap_or(0),
        oldest,
        details: Some(details),
        top_reasons: reasons,
    }
}

fn print(printer: &Printer, summaries: &[SourceSummary]) -> Result<()> {
    use crate::cli::OutputFormat;
    match printer.format {
        OutputFormat::Table => {
            let rows: Vec<Vec<serde_json::Value>> = summaries
                .iter()
                .map(|s| {
                    let d = s.details.as_ref();
                    let partial = d
                        .and_then(|d| d.get("sample"))
                        .filter(|smp| smp["complete"] == false && smp["read"] != 0)
                        .map(|smp| (smp["read"].clone(), smp["of"].clone()));
                    let mut reasons: Vec<String> = Vec::new();
                    if let Some((read, of)) = &partial {
                        reasons.push(format!("(first {read} of {of})"));
                    }
                    if let Some(why) = d.and_then(|d| d["sample"]["skipped"].as_str()) {
                        reasons.push(format!("({why})"));
                    }
                    reasons.extend(
                        s.top_reasons
                            .iter()
                            .map(|r| format!("{:>6}× {}", r.count, ellipsize(&r.fingerprint, 60))),
                    );
                    let mut oldest = s
                        .oldest
                        .as_deref()
                        .and_then(|o| o.parse::<DateTime<Utc>>().ok())
                        .map(|t| format!("{} ({})", short_time(&t), age(t)))
                        .unwrap_or_else(|| "-".into());
                    if let (Some((read, _)), true) = (&partial, s.oldest.is_some()) {
                        oldest.push_str(&format!("\n(in first {read})"));
                    }
                    vec![
                        s.source.into(),
                        s.location.clone().into(),
                        s.pending.into(),
                        s.total.into(),
                        oldest.into(),
                        reasons.join("\n").into(),
                        d.map(queue_details).unwrap_or_default().into(),
                    ]
                })
                .collect();
            printer.rows(
                &[
                    "source",
                    "location",
                    "pending",
                    "total",
                    "oldest pending",
                    "top reasons",
                    "details",
                ],
                &rows,
            )?;
        }
        _ => {
            let rows: Vec<Vec<serde_json::Value>> = summaries
                .iter()
                .map(|s| {
                    vec![
                        s.source.into(),
                        s.location.clone().into(),
                        s.pending.into(),
                        s.total.into(),
                        s.oldest.clone().into(),
                        serde_json::to_value(&s.top_reasons).unwrap_or_default(),
                        s.details.clone().unwrap_or(serde_json::Value::Null),
                    ]
                })
                .collect();
            printer.rows(
                &[
                    "source",
                    "location",
                    "pending",
                    "total",
                    "oldest",
                    "top_reasons",
                    "details",
                ],
                &rows,
            )?;
        }
    }
    Ok(())
}

/// The queue facts of a `list` row, for humans: type, unacked, consumers, feeders.
fn queue_details(d: &serde_json::Value) -> String {
    let mut first = vec![d["type"].as_str().unwrap_or("?").to_string()];
    match d["unacked"].as_u64() {
        Some(n) => first.push(format!("{n} unacked")),
        None => first.push("unacked ?".into()),
    }
    let consumers = d["consumers"].as_u64().unwrap_or(0);
    first.push(format!(
        "{consumers} consumer{}",
        if consumers == 1 { "" } else { "s" }
    ));
    if let Some(l) = d["delivery_limit"].as_i64() {
        first.push(format!("delivery limit {l}"));
    }
    let mut lines = vec![first.join(", ")];
    let names = |k: &str| -> Vec<String> {
        d[k].as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let fed_by = names("fed_by");
    if !fed_by.is_empty() {
        lines.push(format!("fed by {}", fed_by.join(", ")));
    } else if d["discovered"] == false {
        lines.push("named (-Q / config)".into());
    }
    let via = names("dead_letter_exchanges");
    if !via.is_empty() {
        lines.push(format!("via {}", via.join(", ")));
    }
    lines.join("\n")
}

/// "3d 4h" style age, for humans.
pub fn age(t: DateTime<Utc>) -> String {
    let d = Utc::now().signed_duration_since(t);
    let mins = d.num_minutes().max(0);
    match mins {
        m if m < 60 => format!("{m}m ago"),
        m if m < 60 * 48 => format!("{}h {}m ago", m / 60, m % 60),
        m => format!("{}d {}h ago", m / (60 * 24), (m / 60) % 24),
    }
}
