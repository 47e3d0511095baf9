//! `dlq list`: every dead-letter source at a glance: counts, oldest, top reasons.

use crate::error::Exit;
use crate::fingerprint;
use crate::model::rfc3339;
use crate::output::{Printer, ellipsize, short_time};
use crate::settings::Settings;
use crate::source::sql::FailedTable;
use anyhow::Result;
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::collections::HashMap;

pub struct Options {
    /// Queues named on the command line, listed even without the management API.
    pub queues: Vec<String>,
    pub top: usize,
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
    if !opts.queues.is_empty() || !settings.config_queues.is_empty() {
        printer.warn("queue listing is not available yet");
    }
    print(printer, &summaries)?;
    Ok(Exit::Ok)
}

fn print(printer: &Printer, summaries: &[SourceSummary]) -> Result<()> {
    use crate::cli::OutputFormat;
    match printer.format {
        OutputFormat::Table => {
            let rows: Vec<Vec<serde_json::Value>> = summaries
                .iter()
                .map(|s| {
                    let reasons: Vec<String> = s
                        .top_reasons
                        .iter()
                        .map(|r| format!("{:>6}× {}", r.count, ellipsize(&r.fingerprint, 60)))
                        .collect();
                    let oldest = s
                        .oldest
                        .as_deref()
                        .and_then(|o| o.parse::<DateTime<Utc>>().ok())
                        .map(|t| format!("{} ({})", short_time(&t), age(t)))
                        .unwrap_or_else(|| "-".into());
                    vec![
                        s.source.into(),
                        s.location.clone().into(),
                        s.pending.into(),
                        s.total.into(),
                        oldest.into(),
                        reasons.join("\n").into(),
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
