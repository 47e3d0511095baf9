//! `list` for RabbitMQ: every DLQ with exact depth, what feeds it, and a bounded sample of
//! its head for the oldest message and the top reasons. Work runs concurrently so that a
//! broker with hundreds of DLQs is listed in well under a second.

use super::queue::{self as record, RecordOptions};
use crate::rabbit::Connection;
use crate::rabbit::death::is_delay_hop;
use crate::rabbit::management::{ApiError, Management};
use crate::rabbit::reader::{self, ReadSpec};
use crate::rabbit::topology::{self, ApiQueue, QueueFacts, QueueKind, ReadVerdict, Version};
use crate::rabbit::{Checked, Target, connect, passive_declare_keep};
use anyhow::Result;
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tokio::sync::{Semaphore, mpsc};

/// Queues sampled at the same time (each on its own channel of one connection).
const CONCURRENCY: usize = 32;
/// Without `--sample`: at most this many messages read per DLQ ...
const SAMPLE_PER_QUEUE: u64 = 100;
/// ... and about this many in all, so that a broker with hundreds of DLQs is still listed
/// in a fraction of a second ...
const SAMPLE_TOTAL: u64 = 4000;
/// ... but never fewer than this per DLQ.
const SAMPLE_MIN: u64 = 20;

/// Messages sampled per DLQ when `--sample` is not given.
pub(crate) fn default_sample(dlqs: usize) -> u64 {
    (SAMPLE_TOTAL / (dlqs.max(1) as u64)).clamp(SAMPLE_MIN, SAMPLE_PER_QUEUE)
}

#[derive(Debug, Clone)]
pub(crate) struct ListOptions {
    /// Queues named with `-Q` or in the config file: listed even without the API.
    pub(crate) named: Vec<String>,
    /// Messages read at the head of each DLQ for oldest/top reasons (0: none); `None`:
    /// `default_sample`.
    pub(crate) sample: Option<u64>,
    pub(crate) motivo_headers: Vec<String>,
    /// `--exclude`: discovered DLQs whose name matches one of these globs are not listed.
    pub(crate) exclude: Vec<String>,
}

/// `*` any run of characters, `?` one character; everything else literal.
pub(crate) fn glob_match(pattern: &str, name: &str) -> bool {
    fn go(p: &[char], n: &[char]) -> bool {
        match (p.first(), n.first()) {
            (None, None) => true,
            (Some('*'), _) => go(&p[1..], n) || (!n.is_empty() && go(p, &n[1..])),
            (Some('?'), Some(_)) => go(&p[1..], &n[1..]),
            (Some(a), Some(b)) if a == b => go(&p[1..], &n[1..]),
            _ => false,
        }
    }
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    go(&p, &n)
}

/// What a head sample found, or why there is none.
#[derive(Debug, Clone)]
pub(crate) enum Sample {
    Read {
        /// Messages read (the first `read` of the queue).
        read: u64,
        /// Reason text -> messages in the sample.
        reasons: Vec<(String, u64)>,
        oldest: Option<DateTime<Utc>>,
    },
    Skipped(String),
}

#[derive(Debug, Clone)]
pub(crate) struct QueueSummary {
    pub(crate) name: String,
    pub(crate) kind: QueueKind,
    /// Exact, from passive declare (for a stream: the API's message count, if known).
    pub(crate) ready: u64,
    /// From the management API (stats up to 5 s old); `None` without it.
    pub(crate) unacked: Option<u64>,
    pub(crate) consumers: u32,
    pub(crate) fed_by: Vec<String>,
    pub(crate) via: Vec<String>,
    pub(crate) delivery_limit: Option<i64>,
    /// Why the queue cannot be read by renewing it (`topology::renew_blocker`).
    pub(crate) renew_blocker: Option<String>,
    /// The broker's version, from the management API.
    pub(crate) version: Option<Version>,
    /// What the sample's read did that the user must hear (a renewal, delivery counts).
    pub(crate) notes: Vec<String>,
    /// Found by topology discovery (else only named).
    pub(crate) discovered: bool,
    pub(crate) sample: Sample,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Listing {
    pub(crate) queues: Vec<QueueSummary>,
    /// What could not be discovered, and other remarks.
    pub(crate) notes: Vec<String>,
    /// Informational only (what was recognised and left out).
    pub(crate) remarks: Vec<String>,
    /// Topology problems (a DLX that does not exist, ...).
    pub(crate) warnings: Vec<String>,
    /// Named queues that do not exist.
    pub(crate) missing: Vec<String>,
}

/// Everything the API tells at once, or why it could not.
struct ApiView {
    /// For what the bulk listing leaves out (a quorum queue's live consumers).
    mgmt: Management,
    vhost: String,
    version: Option<Version>,
    queues: HashMap<String, (ApiQueue, serde_json::Map<String, serde_json::Value>)>,
    topology: topology::Topology,
}

async fn api_view(mgmt: &Management, vhost: &str) -> Result<ApiView, ApiError> {
    let (version, queues, bindings, exchanges, policies, ops) = tokio::try_join!(
        mgmt.version(),
        mgmt.queues(vhost),
        mgmt.bindings(vhost),
        mgmt.exchanges(vhost),
        mgmt.policies(vhost),
        mgmt.operator_policies(vhost),
    )?;
    let mut warnings = Vec::new();
    let effective: Vec<_> = queues
        .iter()
        .map(|q| topology::effective_policy(q, &policies, &ops, &mut warnings))
        .collect();
    let mut topo = topology::discover(&queues, &effective, &bindings, &exchanges);
    topo.warnings.extend(warnings);
    Ok(ApiView {
        mgmt: mgmt.clone(),
        vhost: vhost.to_string(),
        version,
        queues: queues
            .into_iter()
            .zip(effective)
            .map(|(q, p)| (q.name.clone(), (q, p)))
            .collect(),
        topology: topo,
    })
}

/// Topology warnings start with the queue they are about (`queue <name> dead-letters ...`).
fn about_a_delay_hop(warning: &str) -> bool {
    warning
        .strip_prefix("queue ")
        .and_then(|rest| rest.split(' ').next())
        .is_some_and(is_delay_hop)
}

/// Lists every DLQ (and every named queue). Fails only when RabbitMQ itself cannot be
/// reached; a missing management API is a note.
pub(crate) async fn list(target: &Target, opts: &ListOptions) -> Result<Listing> {
    let mgmt = target.management()?;
    // The API and the AMQP connection are independent: ask both at once.
    let (conn, api) = tokio::join!(connect(target), api_view(&mgmt, &target.vhost));
    let conn = Arc::new(conn?);
    let mut listing = Listing::default();
    let mut wanted: BTreeMap<String, Place> = BTreeMap::new();
    let api = match api {
        Ok(v) => {
            discovered(&v, opts, &mut listing, &mut wanted);
            Some(v)
        }
        Err(e) => {
            listing.notes.push(format!(
                "{e}; DLQ discovery, queue types, unacked counts, feeding queues and message samples are unavailable{}",
                if opts.named.is_empty() {
                    " (name queues with -Q or `queues` in the config file to list them over AMQP)"
                } else {
                    "; listing the named queues over AMQP only"
                }
            ));
            None
        }
    };
    for n in &opts.named {
        wanted.entry(n.clone()).or_default();
    }
    let per_queue = opts.sample.unwrap_or_else(|| default_sample(wanted.len()));
    let sem = Arc::new(Semaphore::new(CONCURRENCY));
    let api = api.map(Arc::new);
    let mut tasks = Vec::new();
    for (name, place) in wanted {
        let conn = conn.clone();
        let sem = sem.clone();
        let api = api.clone();
        let opts = opts.clone();
        tasks.push(tokio::spawn(async move {
            let _permit = sem.acquire().await;
            summarize(&conn, api.as_deref(), name, place, per_queue, &opts).await
        }));
    }
    for t in tasks {
        match t
            .await
            .map_err(|e| anyhow::anyhow!("listing task failed: {e}"))??
        {
            Ok(s) => {
                listing.warnings.extend(s.notes.iter().cloned());
                listing.queues.push(s)
            }
            Err(missing) => listing.missing.push(missing),
        }
    }
    crate::rabbit::close(&conn, "dlq list done").await;
    // The biggest DLQs first: that is where an incident is.
    listing
        .queues
        .sort_by(|a, b| b.ready.cmp(&a.ready).then_with(|| a.name.cmp(&b.name)));
    Ok(listing)
}

/// The DLQs the management API's topology shows (less `--exclude`), with remarks on the
/// queues recognised as not being DLQs.
fn discovered(
    v: &ApiView,
    opts: &ListOptions,
    listing: &mut Listing,
    wanted: &mut BTreeMap<String, Place>,
) {
    // Celery's own delayed delivery (5.5+, quorum queues) is a chain of TTL hops that
    // dead-letter into each other and into the work queues; a TTL wait queue that
    // dead-letters back into consumed queues is a retry loop. Neither feeds a DLQ.
    let retry: Vec<&String> = v
        .topology
        .hops
        .iter()
        .filter(|h| !is_delay_hop(h))
        .collect();
    // Counted among all queues: the top level of the chain is fed by no queue and so is
    // neither a hop nor a DLQ in the topology.
    let delay = v.queues.keys().filter(|q| is_delay_hop(q)).count();
    if delay > 0 {
        listing.remarks.push(format!(
            "Celery's delayed-delivery queues were recognised ({delay} celery_delayed_* queue(s)): they are TTL hops of countdown/eta tasks into the work queues, not dead-letter queues; neither they nor the queues they feed are listed as DLQs"
        ));
    }
    if !retry.is_empty() {
        listing.remarks.push(format!(
            "retry queues recognised (a message TTL, no consumer, dead-lettering back into consumed queues): {}; the queues they feed are work queues, not listed as DLQs",
            retry.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
        ));
    }
    let mut excluded = 0;
    for d in &v.topology.dlqs {
        if is_delay_hop(&d.name) {
            continue;
        }
        if opts.exclude.iter().any(|p| glob_match(p, &d.name)) {
            excluded += 1;
            continue;
        }
        let place = Place {
            fed_by: d.fed_by.clone(),
            via: d.via.clone(),
            discovered: true,
        };
        wanted.insert(d.name.clone(), place);
    }
    if excluded > 0 {
        listing
            .remarks
            .push(format!("{excluded} DLQ(s) left out by --exclude"));
    }
    let warnings = v.topology.warnings.iter().filter(|w| !about_a_delay_hop(w));
    listing.warnings.extend(warnings.cloned());
}

/// Where a queue sits in the dead-letter topology.
#[derive(Debug, Clone, Default)]
struct Place {
    fed_by: Vec<String>,
    via: Vec<String>,
    /// Found by discovery (else only named).
    discovered: bool,
}

/// One queue's summary; `Err(name)` when it does not exist.
async fn summarize(
    conn: &Connection,
    api: Option<&ApiView>,
    name: String,
    place: Place,
    sample_size: u64,
    opts: &ListOptions,
) -> Result<Result<QueueSummary, String>> {
    let Some((depth, ch)) = passive_declare_keep(conn, &name).await? else {
        return Ok(Err(name));
    };
    // The channel is reused for the sample, or closed.
    let mut ch = Some(ch);
    let entry = api.and_then(|a| a.queues.get(&name));
    let version = api.and_then(|a| a.version);
    let kind = match (api, entry) {
        (Some(_), Some((q, _))) => QueueKind::from_api(q.kind.as_deref()),
        _ => QueueKind::Unknown,
    };
    let delivery_limit = match (kind, entry) {
        (QueueKind::Quorum, Some((q, policy))) => {
            topology::delivery_limit(&q.arguments, policy, version)
        }
        _ => None,
    };
    let facts = QueueFacts {
        kind,
        delivery_limit,
        version,
        renew_blocker: entry.and_then(|(q, policy)| topology::renew_blocker(&q.arguments, policy)),
        consumer_timeout: entry
            .and_then(|(q, policy)| topology::consumer_timeout(&q.arguments, policy, version)),
    };
    let stream_messages = entry.and_then(|(q, _)| q.messages);
    let ready = match kind {
        QueueKind::Stream => stream_messages.unwrap_or(0),
        _ => u64::from(depth.ready),
    };
    // Consumers of a connection lost with its node: named, and not counted (see `Checked`).
    let (depth, lost) = match api {
        Some(a) if kind == QueueKind::Quorum => {
            crate::rabbit::without_lost_consumers(&a.mgmt, &a.vhost, &name, None, depth).await
        }
        _ => (depth, None),
    };
    let lost_consumers = lost.as_ref().map_or(0, |l| l.consumers);
    let checked = Checked {
        name: name.clone(),
        facts: facts.clone(),
        depth,
        lost_consumers,
    };
    let (sample, mut notes) = match sample_verdict(&checked, ready, sample_size) {
        Some(skipped) => (skipped, Vec::new()),
        None => sample(conn, ch.take(), &checked, sample_size, opts).await?,
    };
    notes.extend(lost.map(|l| l.warning(&name)));
    if let Some(ch) = ch {
        let _ = ch.close(200, "dlq list done".into()).await;
    }
    Ok(Ok(QueueSummary {
        name,
        kind,
        ready,
        unacked: entry.and_then(|(q, _)| q.messages_unacknowledged),
        consumers: depth.consumers,
        fed_by: place.fed_by,
        via: place.via,
        delivery_limit,
        renew_blocker: facts.renew_blocker,
        version,
        notes,
        discovered: place.discovered,
        sample,
    }))
}

/// Why a queue's head is not sampled (`None`: read it): sampling is off, the queue is
/// empty, or reading it could wear its messages out or reorder it.
fn sample_verdict(checked: &Checked, ready: u64, sample_size: u64) -> Option<Sample> {
    let (facts, kind) = (&checked.facts, checked.facts.kind);
    if sample_size == 0 {
        return Some(Sample::Skipped("sampling disabled (--sample 0)".into()));
    }
    if ready == 0 && kind != QueueKind::Stream {
        return Some(Sample::Read {
            read: 0,
            reasons: Vec::new(),
            oldest: None,
        });
    }
    let consumers = checked.depth.consumers;
    match topology::read_verdict(&checked.name, facts, consumers) {
        ReadVerdict::Risky(_) if kind == QueueKind::Unknown => Some(Sample::Skipped(
            "not sampled: queue type unknown without the management API".into(),
        )),
        ReadVerdict::Risky(_) => Some(Sample::Skipped(format!(
            "not sampled: reading would add to delivery counts (limit {}) and it cannot be renewed: {}",
            facts.delivery_limit.unwrap_or_default(),
            topology::why_not_renewed(facts, consumers).unwrap_or_default()
        ))),
        // A partial read would reorder a quorum queue (see `read_all_to_keep_order`).
        ReadVerdict::Safe(_) if kind == QueueKind::Quorum && ready > sample_size => {
            Some(Sample::Skipped(format!(
                "not sampled: a quorum queue is read whole to keep its order, and it holds more than the sample size {sample_size} (--sample)"
            )))
        }
        ReadVerdict::Safe(_) => None,
    }
}

/// Reads the first `size` messages the same way `inspect` does (and gives them
/// back), decoding only the reason and the time.
async fn sample(
    conn: &Connection,
    ch: Option<lapin::Channel>,
    checked: &Checked,
    size: u64,
    opts: &ListOptions,
) -> Result<(Sample, Vec<String>)> {
    type Item = (Option<String>, Option<DateTime<Utc>>);
    let spec = ReadSpec::for_checked(checked, Some(size));
    let (tx, mut rx) = mpsc::channel::<Result<Item>>(64);
    let record_opts = RecordOptions {
        motivo_headers: opts.motivo_headers.clone(),
        ..Default::default()
    };
    let make = move |_: &str, _: &str, _: &str, p: &lapin::BasicProperties, body: &[u8]| {
        record::reason_and_time(p, body, &record_opts)
    };
    let collect = async {
        let mut reasons: HashMap<String, u64> = HashMap::new();
        let mut oldest: Option<DateTime<Utc>> = None;
        while let Some(r) = rx.recv().await {
            let Ok((motivo, at)) = r else { continue };
            *reasons.entry(motivo.unwrap_or_default()).or_default() += 1;
            if let Some(t) = at {
                oldest = Some(oldest.map_or(t, |o| o.min(t)));
            }
        }
        (reasons, oldest)
    };
    let read = async {
        let r = reader::read_queue_on(conn, ch, &spec, &make, &tx).await;
        drop(tx);
        r
    };
    let (report, (reasons, oldest)) = tokio::join!(read, collect);
    let report = report?;
    let mut reasons: Vec<(String, u64)> = reasons.into_iter().collect();
    reasons.sort();
    let notes = report.warnings(checked);
    let read = Sample::Read {
        read: report.read,
        reasons,
        oldest,
    };
    Ok((read, notes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_sample_shrinks_with_many_dlqs() {
        assert_eq!(default_sample(0), 100);
        assert_eq!(default_sample(10), 100);
        assert_eq!(default_sample(80), 50);
        assert_eq!(default_sample(200), 20);
        assert_eq!(default_sample(5000), 20);
    }
}
