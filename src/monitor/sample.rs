//! A bounded, non-destructive read of a DLQ's head for monitoring: the death time and
//! reason of each message read. `list`'s sample (source/summary.rs) keeps only the oldest
//! time and the reasons; `check --warn-new` needs every time, hence this reader. It decides
//! what may be read by the same rules as `list` and reads through the same reader, so the
//! queue is left exactly as it was (see rabbit/reader.rs).

use crate::rabbit::Connection;
use crate::rabbit::reader::{self, ReadSpec};
use crate::rabbit::topology::{self, QueueFacts, QueueKind, ReadVerdict};
use crate::rabbit::{Checked, passive_declare_keep};
use crate::source::queue::{self as record, RecordOptions};
use crate::source::summary::QueueSummary;
use anyhow::Result;
use chrono::{DateTime, Utc};
use futures_util::{StreamExt, TryStreamExt};
use std::collections::HashMap;
use tokio::sync::mpsc;

/// Queues read at the same time, each on its own channel of one connection.
const CONCURRENCY: usize = 16;

/// What was read at the head of one queue.
#[derive(Debug, Clone, Default)]
pub(crate) struct HeadSample {
    /// Messages read (the first `read` of the queue).
    pub(crate) read: u64,
    /// The death time of each message read that has one.
    pub(crate) times: Vec<DateTime<Utc>>,
    /// Reason text -> messages read with it.
    pub(crate) reasons: Vec<(String, u64)>,
    /// What the read did that the user must hear (delivery limits).
    pub(crate) warnings: Vec<String>,
}

/// A queue's head sample, or why it was not read.
#[derive(Debug, Clone)]
pub(crate) enum HeadRead {
    Read(HeadSample),
    Skipped(String),
}

/// How to read the heads.
#[derive(Debug, Clone)]
pub(crate) struct SampleSpec {
    /// Messages read per queue at most (0: none).
    pub(crate) size: u64,
    /// Read quorum queues with a delivery limit, and queues of unknown type (`--force`).
    pub(crate) force: bool,
    pub(crate) motivo_headers: Vec<String>,
}

/// Reads the head of every queue, in the order given.
pub(crate) async fn sample_all(
    conn: &Connection,
    queues: &[QueueSummary],
    spec: &SampleSpec,
) -> Result<Vec<HeadRead>> {
    futures_util::stream::iter(queues)
        .map(|q| sample_one(conn, q, spec))
        .buffered(CONCURRENCY)
        .try_collect()
        .await
}

/// Why a queue may not be read now, by `list`'s rules (source/summary.rs `summarize`).
fn refusal(q: &QueueSummary, ready: u64, spec: &SampleSpec) -> Option<String> {
    let facts = facts(q);
    if spec.size == 0 {
        return Some("not read (--sample 0)".into());
    }
    let verdict = topology::read_verdict(&q.name, &facts, q.consumers);
    if let (ReadVerdict::Risky(_), false) = (verdict, spec.force) {
        return Some(match q.kind {
            QueueKind::Unknown => {
                "not read: queue type unknown without the management API (--force reads it)".into()
            }
            _ => format!(
                "not read: reading would add to delivery counts (limit {}) and it cannot be renewed: {} (--force reads it)",
                q.delivery_limit.unwrap_or_default(),
                topology::why_not_renewed(&facts, q.consumers).unwrap_or_default()
            ),
        });
    }
    // A partial read would reorder a quorum queue (`ReadSpec::read_all_to_keep_order`).
    if matches!(q.kind, QueueKind::Quorum | QueueKind::Unknown) && ready > spec.size {
        return Some(format!(
            "not read: a {} queue is read whole to keep its order, and it holds more than --sample {}",
            q.kind.as_str(),
            spec.size
        ));
    }
    None
}

/// What `list` learnt of a queue, as the reader takes it.
fn facts(q: &QueueSummary) -> QueueFacts {
    QueueFacts {
        kind: q.kind,
        delivery_limit: q.delivery_limit,
        version: q.version,
        renew_blocker: q.renew_blocker.clone(),
        // Not in `list`'s summary: a sample holds messages for a moment only.
        consumer_timeout: None,
    }
}

async fn sample_one(conn: &Connection, q: &QueueSummary, spec: &SampleSpec) -> Result<HeadRead> {
    if let Some(why) = refusal(q, q.ready, spec) {
        return Ok(HeadRead::Skipped(why));
    }
    // Counted again right before the read: the reader reads at most what it was told is there.
    let Some((depth, ch)) = passive_declare_keep(conn, &q.name).await? else {
        return Ok(HeadRead::Skipped(
            "not read: the queue was deleted meanwhile".into(),
        ));
    };
    let ready = match q.kind {
        QueueKind::Stream => q.ready,
        _ => u64::from(depth.ready),
    };
    let refused = refusal(q, ready, spec);
    if refused.is_some() || (ready == 0 && q.kind != QueueKind::Stream) {
        let _ = ch.close(200, "dlq: nothing to read".into()).await;
        return Ok(refused.map_or(HeadRead::Read(HeadSample::default()), HeadRead::Skipped));
    }
    let checked = Checked {
        name: q.name.clone(),
        facts: facts(q),
        depth,
        lost_consumers: 0,
    };
    read_head(conn, ch, &checked, spec)
        .await
        .map(HeadRead::Read)
}

/// Reads the first `spec.size` messages as `list` does, keeping reason and death time.
async fn read_head(
    conn: &Connection,
    ch: lapin::Channel,
    checked: &Checked,
    spec: &SampleSpec,
) -> Result<HeadSample> {
    type Item = (Option<String>, Option<DateTime<Utc>>);
    let read_spec = ReadSpec::for_checked(checked, Some(spec.size));
    let (tx, mut rx) = mpsc::channel::<Result<Item>>(64);
    let record_opts = RecordOptions {
        motivo_headers: spec.motivo_headers.clone(),
        ..Default::default()
    };
    let make = move |_: &str, _: &str, _: &str, p: &lapin::BasicProperties, body: &[u8]| {
        record::reason_and_time(p, body, &record_opts)
    };
    let collect = async {
        let mut reasons: HashMap<String, u64> = HashMap::new();
        let mut times = Vec::new();
        while let Some(r) = rx.recv().await {
            let Ok((motivo, at)) = r else { continue };
            *reasons.entry(motivo.unwrap_or_default()).or_default() += 1;
            times.extend(at);
        }
        (reasons, times)
    };
    let read = async {
        let r = reader::read_queue_on(conn, Some(ch), &read_spec, &make, &tx).await;
        drop(tx);
        r
    };
    let (report, (reasons, times)) = tokio::join!(read, collect);
    let report = report?;
    let mut reasons: Vec<(String, u64)> = reasons.into_iter().collect();
    reasons.sort();
    Ok(HeadSample {
        read: report.read,
        times,
        reasons,
        warnings: report.warnings(checked),
    })
}
