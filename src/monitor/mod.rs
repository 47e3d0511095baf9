//! Monitoring (`check`, `metrics`): the figures of every dead-letter source, gathered once
//! per run (or per refresh) from the same sources as `list`: the table whenever a database
//! is configured, and every discovered DLQ or only the ones named with `-Q`.
//!
//! Queue depth comes from `list`'s discovery (passive declare, the management API); the
//! head of a queue is read only when a sample is asked for (sample.rs).

pub(crate) mod exposition;
pub(crate) mod sample;
pub(crate) mod serve;

use crate::endpoints::{Database, Endpoints};
use crate::rabbit::connect;
use crate::rabbit::topology::Version;
use crate::select::Selection;
use crate::source::summary::{self, ListOptions, QueueSummary};
use crate::source::table::FailedTable;
use anyhow::{Result, anyhow};
use chrono::{DateTime, Utc};
use sample::{HeadRead, SampleSpec};

/// What to gather.
#[derive(Debug, Clone, Default)]
pub(crate) struct Request {
    /// `-Q`: only these queues (else every discovered DLQ and the config file's `queues`).
    pub(crate) queues: Vec<String>,
    /// The config file's `queues`: they join the discovered DLQs when `queues` is empty.
    pub(crate) config_queues: Vec<String>,
    pub(crate) motivo_headers: Vec<String>,
    pub(crate) force: bool,
    /// Messages read at the head of each queue; `None`: `list`'s automatic size.
    pub(crate) sample: Option<u64>,
    /// Count the pending dead letters that arrived at or after this time.
    pub(crate) new_since: Option<DateTime<Utc>>,
}

/// One source's figures.
#[derive(Debug, Clone)]
pub(crate) struct SourceFigures {
    /// `table` or `queue`.
    pub(crate) source: &'static str,
    pub(crate) location: String,
    /// Pending rows / ready messages.
    pub(crate) pending: u64,
    /// The oldest pending dead letter's time, when known (queues: in the sample).
    pub(crate) oldest: Option<DateTime<Utc>>,
    /// Whether `oldest` and `reasons` were read (false: a queue not sampled).
    pub(crate) read: bool,
    /// Dead letters that arrived since `Request::new_since` (queues: in the sample).
    pub(crate) new: Option<u64>,
    /// Raw reason -> pending dead letters (table: all pending rows; queue: the sample).
    pub(crate) reasons: Vec<(String, u64)>,
    /// Table only: rows already replayed.
    pub(crate) replayed: Option<u64>,
    /// Queue only: messages read at its head.
    pub(crate) sampled: Option<u64>,
    /// Why the queue's head was not read.
    pub(crate) not_read: Option<String>,
    /// Queue only: a delivery limit that can drop dead letters, and how to remove it.
    pub(crate) limit_risk: Option<String>,
}

impl SourceFigures {
    /// Seconds the oldest pending dead letter has waited; 0 when nothing is pending,
    /// `None` when unknown (a queue not read, messages without a death time).
    pub(crate) fn oldest_age_seconds(&self, now: DateTime<Utc>) -> Option<i64> {
        match (self.pending, self.oldest) {
            (0, _) => Some(0),
            (_, Some(t)) => Some(now.signed_duration_since(t).num_seconds().max(0)),
            (_, None) => None,
        }
    }
}

/// Every source's figures, and what the user should hear on stderr.
#[derive(Debug, Clone, Default)]
pub(crate) struct Figures {
    pub(crate) sources: Vec<SourceFigures>,
    pub(crate) warnings: Vec<String>,
}

/// Gathers the table's and the queues' figures. Fails when a configured source cannot be
/// read, or a named queue does not exist: a monitor must not report a partial picture as
/// the whole. RabbitMQ is optional exactly as in `list` (only the built-in default URL,
/// nothing named): then it is a warning when unreachable.
pub(crate) async fn gather(endpoints: &Endpoints, req: &Request) -> Result<Figures> {
    let mut figures = Figures::default();
    if let Some(db) = &endpoints.database {
        figures.sources.push(table_figures(db, req).await?);
    }
    let named = distinct(if req.queues.is_empty() {
        &req.config_queues
    } else {
        &req.queues
    });
    let rabbit_optional = endpoints.rabbit_is_default && named.is_empty();
    // A Redis-only team's RabbitMQ is nobody's: not tried (see `list`).
    if named.is_empty() && endpoints.rabbit_unused() && !figures.sources.is_empty() {
        return Ok(figures);
    }
    match queue_figures(endpoints, req, named).await {
        Ok((queues, warnings)) => {
            figures.sources.extend(queues);
            figures.warnings.extend(warnings);
        }
        Err(e) if rabbit_optional && !figures.sources.is_empty() => {
            figures
                .warnings
                .push(format!("RabbitMQ not checked: {e:#}"));
        }
        Err(e) => return Err(e),
    }
    Ok(figures)
}

/// The queues named (each once), which join the discovered DLQs.
fn distinct(queues: &[String]) -> Vec<String> {
    let mut named: Vec<String> = Vec::new();
    for q in queues {
        if !named.contains(q) {
            named.push(q.clone());
        }
    }
    named
}

async fn table_figures(db: &Database, req: &Request) -> Result<SourceFigures> {
    let table = FailedTable::open(&db.url, &db.table).await?;
    let s = table.summary().await?;
    let new = match req.new_since {
        Some(since) => Some(pending_since(&table, since).await?),
        None => None,
    };
    table.close().await;
    Ok(SourceFigures {
        source: "table",
        location: table.location(),
        pending: s.pending,
        oldest: s.oldest_pending,
        read: true,
        new,
        reasons: s.reasons,
        replayed: Some(s.total.saturating_sub(s.pending)),
        sampled: None,
        not_read: None,
        limit_risk: None,
    })
}

/// Pending rows created at or after `since`: one `COUNT(*)` where SQL decides it exactly,
/// else (SQLite text timestamps) the pre-selected rows counted by the selection itself.
async fn pending_since(table: &FailedTable, since: DateTime<Utc>) -> Result<u64> {
    let sel = Selection {
        since: Some(since),
        ..Default::default()
    };
    if let Some(n) = table.count_exact(&sel).await? {
        return Ok(n);
    }
    let mut rx = table.stream(&sel)?;
    let mut n = 0;
    while let Some(r) = rx.recv().await {
        if sel.matches(&r?).unwrap_or(false) {
            n += 1;
        }
    }
    Ok(n)
}

/// The queues' figures: depth from `list`'s discovery, which reads nothing; then, when a
/// sample is wanted, each head read through sample.rs.
async fn queue_figures(
    endpoints: &Endpoints,
    req: &Request,
    named: Vec<String>,
) -> Result<(Vec<SourceFigures>, Vec<String>)> {
    let only_named = !req.queues.is_empty();
    let list_opts = ListOptions {
        named: named.clone(),
        sample: Some(0),
        motivo_headers: req.motivo_headers.clone(),
        exclude: Vec::new(),
    };
    let listing = summary::list(&endpoints.rabbit, &list_opts).await?;
    if let Some(m) = listing.missing.first() {
        return Err(anyhow!("queue {m:?} does not exist (nothing was created)"));
    }
    let mut warnings = listing.warnings.clone();
    // Without the API nothing is discovered: only a check of named queues is whole then.
    if !listing.notes.is_empty() && named.is_empty() {
        return Err(anyhow!("{}", listing.notes.join("; ")));
    }
    warnings.extend(listing.notes.iter().cloned());
    let queues: Vec<QueueSummary> = listing
        .queues
        .into_iter()
        .filter(|q| !only_named || named.contains(&q.name))
        .collect();
    let spec = SampleSpec {
        size: req
            .sample
            .unwrap_or_else(|| summary::default_sample(queues.len())),
        force: req.force,
        motivo_headers: req.motivo_headers.clone(),
    };
    let heads = if spec.size == 0 || queues.is_empty() {
        vec![HeadRead::Skipped("head not read (sample size 0)".into()); queues.len()]
    } else {
        let conn = connect(&endpoints.rabbit.clone()).await?;
        let heads = sample::sample_all(&conn, &queues, &spec).await;
        crate::rabbit::close(&conn, "dlq monitoring done").await;
        heads?
    };
    let sources = queues
        .iter()
        .zip(heads)
        .map(|(q, head)| queue_source(q, head, req.new_since, &mut warnings))
        .collect();
    Ok((sources, warnings))
}

/// A DLQ that is a quorum queue with a delivery limit drops (or dead-letters again) a dead
/// letter given back more than `limit` times, by readers or by a consumer that failed.
fn limit_risk(queue: &str, limit: i64, version: Option<Version>) -> String {
    let risk = format!(
        "{queue:?} is a quorum queue with delivery limit {limit}: a dead letter returned more than {limit} times (by a consumer that fails or a reader that gives it back) is dropped."
    );
    if version.is_some_and(|v| v < Version(4, 0, 0)) {
        return format!(
            "{risk} Remove the limit: drop delivery-limit from the policy that sets it, or redeclare the queue without x-delivery-limit (on RabbitMQ 3.x a negative limit drops every message at its first return)"
        );
    }
    let pattern = format!("^{}$", regex::escape(queue));
    format!(
        "{risk} Remove the limit for DLQs with a policy, e.g. rabbitmqctl set_policy dlq-no-delivery-limit '{pattern}' '{{\"delivery-limit\":-1}}' --apply-to quorum_queues (a queue takes one policy: if one already applies, add \"delivery-limit\": -1 to it instead)"
    )
}

fn queue_source(
    q: &QueueSummary,
    head: HeadRead,
    new_since: Option<DateTime<Utc>>,
    warnings: &mut Vec<String>,
) -> SourceFigures {
    let mut f = SourceFigures {
        source: "queue",
        location: q.name.clone(),
        pending: q.ready,
        oldest: None,
        read: false,
        new: None,
        reasons: Vec::new(),
        replayed: None,
        sampled: None,
        not_read: None,
        limit_risk: q.delivery_limit.map(|l| limit_risk(&q.name, l, q.version)),
    };
    match head {
        HeadRead::Read(s) => {
            warnings.extend(s.warnings);
            f.read = true;
            f.oldest = s.times.iter().min().copied();
            f.new = new_since.map(|t| s.times.iter().filter(|&&at| at >= t).count() as u64);
            f.reasons = s.reasons;
            f.sampled = Some(s.read);
        }
        // An empty queue has nothing new, read or not.
        HeadRead::Skipped(_) if q.ready == 0 => f.new = new_since.map(|_| 0),
        HeadRead::Skipped(why) => f.not_read = Some(why),
    }
    f
}
