//! The dead-letter topology and the read-safety rule, computed from what the management
//! API reports. Pure: no I/O, so every rule here is unit-tested.

use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};

/// A queue as `/api/queues/{vhost}` describes it. Stats-derived fields (`consumers`,
/// `messages_unacknowledged`, `effective_policy_definition`, `policy`) are missing for a
/// few seconds after a queue is created: the broker emits stats every 5 s.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct ApiQueue {
    pub(crate) name: String,
    #[serde(rename = "type")]
    pub(crate) kind: Option<String>,
    #[serde(default)]
    pub(crate) arguments: Map<String, Value>,
    pub(crate) effective_policy_definition: Option<Map<String, Value>>,
    pub(crate) messages: Option<u64>,
    pub(crate) messages_unacknowledged: Option<u64>,
    pub(crate) consumers: Option<u64>,
    /// The consumers the management API sees on live channels (one GET of the queue only).
    pub(crate) consumer_details: Option<Vec<Value>>,
    pub(crate) leader: Option<String>,
}

/// Consumers a quorum queue still counts though no live channel owns them: their connection
/// was lost with its node. RabbitMQ keeps such a consumer until it learns the connection is
/// gone, and a *cancelled* one keeps the messages it holds until then (`rabbit_fifo` gives
/// back only what live consumers held, and re-checks only those): a leader change while
/// that node is running. RabbitMQ 4.3 gives back what any consumer on an unreachable node
/// held, cancelled or not, once its `consumer_disconnected_timeout` has passed (60 s by
/// default; measured on 4.3.6: 300 held by a cancelled consumer and 200 by a live one, all
/// ready again in order 58-59 s after their node was killed; on 4.0.5 they stay).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Lost {
    pub(crate) consumers: u32,
    /// Unacknowledged messages (all of them the lost consumers' when no live one is seen;
    /// otherwise some may be the live consumers'); unknown while the broker has not yet
    /// published the queue's statistics (seconds after a node was lost).
    pub(crate) held: Option<u64>,
    pub(crate) any_live: bool,
    pub(crate) leader: Option<String>,
    /// RabbitMQ 4.3+: they come back by themselves after the disconnected timeout.
    pub(crate) timed_out_back: bool,
}

/// From 4.3 a quorum queue gives back what consumers on an unreachable node held.
pub(crate) const DISCONNECTED_TIMEOUT_FROM: Version = Version(4, 3, 0);

/// More consumers than the live ones the management API shows (a quorum queue only).
/// `counted` is the queue's own count (passive declare): the API's copy of it lags.
pub(crate) fn lost_consumers(q: &ApiQueue, counted: u32) -> Option<Lost> {
    if QueueKind::from_api(q.kind.as_deref()) != QueueKind::Quorum {
        return None;
    }
    let live = u32::try_from(q.consumer_details.as_ref()?.len()).unwrap_or(u32::MAX);
    let lost = counted.checked_sub(live).filter(|&n| n > 0)?;
    Some(Lost {
        consumers: lost,
        held: q.messages_unacknowledged,
        any_live: live > 0,
        leader: q.leader.clone(),
        timed_out_back: false,
    })
}

/// The held count of two looks a statistics interval apart: the smaller. The management
/// API's count lags, so a larger one can still include messages that a consumer gone since
/// held a moment ago (a dry run's own, seen quoting 1,000 held for 300).
pub(crate) fn nearer_held(before: Option<u64>, after: Option<u64>) -> Option<u64> {
    match (before, after) {
        (Some(b), Some(a)) => Some(b.min(a)),
        (_, after) => after,
    }
}

impl Lost {
    /// What the operator reads, with what to do.
    pub(crate) fn warning(&self, queue: &str) -> String {
        let n = self.consumers;
        let held = match self.held {
            Some(0) => {
                return format!(
                    "{queue:?} still counts {n} consumer(s) of a connection lost with its node; \
                     they hold nothing and get nothing while that node is away, so dlq does not \
                     count them"
                );
            }
            None => "any message".to_string(),
            Some(h) if self.any_live => format!("up to {h} message(s)"),
            Some(h) => format!("{h} message(s)"),
        };
        let leader = self
            .leader
            .as_deref()
            .map(|l| format!(" ({l})"))
            .unwrap_or_default();
        let verb = if self.held.is_none() {
            "may be"
        } else {
            "held"
        };
        let how = if self.timed_out_back {
            "RabbitMQ gives them back by itself once the queue's consumer-disconnected timeout \
             has passed since their node was lost (60 s unless a policy's \
             consumer-disconnected-timeout says otherwise), each lost consumer's together but \
             not in the DLQ's order (the newest consumer's first, as measured): run dlq again \
             then. If they are still held, the queue's leader must change while the lost \
             consumer's node is running"
        } else {
            "RabbitMQ gives them back only when the queue's leader changes while the lost \
             consumer's node is running"
        };
        format!(
            "{queue:?}: {held} {verb} unacknowledged by {n} consumer(s) that no live connection \
             owns (a connection lost with its node?): no reader sees them and dlq cannot move \
             them. {how}: bring that node back, then restart the leader node{leader} or run \
             `rabbitmq-queues rebalance quorum`; for a node gone for good, `rabbitmqctl \
             forget_cluster_node NODE`. dlq counts and moves only the ready ones"
        )
    }
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ApiBinding {
    pub(crate) source: String,
    pub(crate) destination: String,
    pub(crate) destination_type: String,
    #[serde(default)]
    pub(crate) routing_key: String,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ApiExchange {
    pub(crate) name: String,
    #[serde(rename = "type")]
    pub(crate) kind: String,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ApiPolicy {
    pub(crate) name: String,
    pub(crate) pattern: String,
    #[serde(rename = "apply-to", default = "apply_to_all")]
    pub(crate) apply_to: String,
    #[serde(default)]
    pub(crate) definition: Map<String, Value>,
    #[serde(default)]
    pub(crate) priority: i64,
}

fn apply_to_all() -> String {
    "all".into()
}

/// The queue types dlq reads differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QueueKind {
    Classic,
    Quorum,
    Stream,
    /// Without the management API the type cannot be known over AMQP 0-9-1.
    Unknown,
}

impl QueueKind {
    pub(crate) fn from_api(kind: Option<&str>) -> QueueKind {
        match kind {
            Some("classic") => QueueKind::Classic,
            Some("quorum") => QueueKind::Quorum,
            Some("stream") => QueueKind::Stream,
            // Other plugin-provided types behave like classic queues for a consumer.
            Some(_) => QueueKind::Classic,
            None => QueueKind::Unknown,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            QueueKind::Classic => "classic",
            QueueKind::Quorum => "quorum",
            QueueKind::Stream => "stream",
            QueueKind::Unknown => "unknown",
        }
    }
}

/// A broker version, `major.minor.patch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Version(pub u32, pub u32, pub u32);

impl Version {
    pub(crate) fn parse(s: &str) -> Option<Version> {
        let mut parts = s
            .split(|c: char| !c.is_ascii_digit())
            .filter(|p| !p.is_empty())
            .map(|p| p.parse::<u32>().ok());
        let major = parts.next()??;
        let minor = parts.next().flatten().unwrap_or(0);
        let patch = parts.next().flatten().unwrap_or(0);
        Some(Version(major, minor, patch))
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// Whether a policy's `apply-to` covers a queue of this type.
fn applies_to(apply_to: &str, kind: QueueKind) -> bool {
    match apply_to {
        "all" | "queues" => true,
        "classic_queues" => kind == QueueKind::Classic,
        "quorum_queues" => kind == QueueKind::Quorum,
        "streams" => kind == QueueKind::Stream,
        _ => false,
    }
}

/// The policy the broker applies: the matching one with the highest priority. RabbitMQ
/// patterns are PCRE; the few a Rust regex cannot compile are reported, never guessed.
fn matching_policy<'a>(
    name: &str,
    kind: QueueKind,
    policies: &'a [ApiPolicy],
    warnings: &mut Vec<String>,
) -> Option<&'a ApiPolicy> {
    let mut best: Option<&ApiPolicy> = None;
    for p in policies {
        if !applies_to(&p.apply_to, kind) {
            continue;
        }
        let re = match regex::Regex::new(&p.pattern) {
            Ok(re) => re,
            Err(_) => {
                warnings.push(format!(
                    "policy {:?} has a pattern dlq cannot evaluate ({:?}); it was ignored for {name}",
                    p.name, p.pattern
                ));
                continue;
            }
        };
        if re.is_match(name) && best.is_none_or(|b| p.priority > b.priority) {
            best = Some(p);
        }
    }
    best
}

/// Keys where RabbitMQ combines a policy and an operator policy by taking the smaller value.
const OPERATOR_MIN_KEYS: &[&str] = &[
    "expires",
    "message-ttl",
    "max-length",
    "max-length-bytes",
    "max-in-memory-length",
    "max-in-memory-bytes",
    "delivery-limit",
];

/// The effective policy definition of a queue: the broker's own view when the API has it,
/// otherwise computed from the policy lists (the API leaves it out until the queue's first
/// stats emission, and a freshly declared DLQ must not look unprotected).
pub(crate) fn effective_policy(
    q: &ApiQueue,
    policies: &[ApiPolicy],
    operator_policies: &[ApiPolicy],
    warnings: &mut Vec<String>,
) -> Map<String, Value> {
    if let Some(e) = &q.effective_policy_definition {
        return e.clone();
    }
    let kind = QueueKind::from_api(q.kind.as_deref());
    let mut def = matching_policy(&q.name, kind, policies, warnings)
        .map(|p| p.definition.clone())
        .unwrap_or_default();
    if let Some(op) = matching_policy(&q.name, kind, operator_policies, warnings) {
        for (k, v) in &op.definition {
            match (def.get(k).and_then(Value::as_i64), v.as_i64()) {
                (Some(a), Some(b)) if OPERATOR_MIN_KEYS.contains(&k.as_str()) => {
                    def.insert(k.clone(), Value::from(a.min(b)));
                }
                _ => {
                    def.insert(k.clone(), v.clone());
                }
            }
        }
    }
    def
}

/// What makes a queue dead-letter somewhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeadLetterTarget {
    pub(crate) exchange: String,
    pub(crate) routing_key: Option<String>,
}

/// `x-dead-letter-exchange` wins over the policy's `dead-letter-exchange` (RabbitMQ's
/// rule for these two keys); same for the routing key.
pub(crate) fn dead_letter_target(
    arguments: &Map<String, Value>,
    policy: &Map<String, Value>,
) -> Option<DeadLetterTarget> {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
    let exchange = text(arguments.get("x-dead-letter-exchange"))
        .or_else(|| text(policy.get("dead-letter-exchange")))?;
    let routing_key = text(arguments.get("x-dead-letter-routing-key"))
        .or_else(|| text(policy.get("dead-letter-routing-key")));
    Some(DeadLetterTarget {
        exchange,
        routing_key,
    })
}

/// The delivery limit a quorum queue enforces. RabbitMQ takes the smaller of the argument
/// and the policy; from 4.0 a quorum queue without either has a limit of 20, and a
/// negative value disables it.
pub(crate) fn delivery_limit(
    arguments: &Map<String, Value>,
    policy: &Map<String, Value>,
    version: Option<Version>,
) -> Option<i64> {
    let arg = arguments.get("x-delivery-limit").and_then(Value::as_i64);
    let pol = policy.get("delivery-limit").and_then(Value::as_i64);
    let explicit = smaller(arg, pol);
    let v4 = version.is_none_or(|v| v >= Version(4, 0, 0));
    match explicit {
        // 4.x: a negative limit means none. 3.x compares `count > limit`, so a negative
        // limit drops (or dead-letters) a message at its first return (seen on 3.10.8).
        Some(l) if l < 0 && v4 => None,
        Some(l) if l < 0 => Some(0),
        Some(l) => Some(l),
        // Unknown version: assume the newer default rather than no limit.
        None if v4 => Some(20),
        None => None,
    }
}

/// What dlq knows about a queue before reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QueueFacts {
    pub(crate) kind: QueueKind,
    pub(crate) delivery_limit: Option<i64>,
    pub(crate) version: Option<Version>,
    /// Why the queue cannot be read by renewing it (see `GiveBack::Renew`), if anything.
    pub(crate) renew_blocker: Option<String>,
    /// The queue's own consumer timeout, in milliseconds (`consumer_timeout`).
    pub(crate) consumer_timeout: Option<u64>,
}

/// A duration in milliseconds (a consumer timeout), as a person reads it: `10 s`, `2.5 s`.
pub(crate) fn duration_text(ms: u64) -> String {
    match ms % 1000 {
        0 => format!("{} s", ms / 1000),
        _ => format!("{:.1} s", ms as f64 / 1000.0),
    }
}

/// Per-queue consumer timeouts came with RabbitMQ 3.12 (and 3.11.15); earlier brokers keep
/// the argument and the policy key but ignore them.
const QUEUE_CONSUMER_TIMEOUT_FROM: Version = Version(3, 12, 0);

/// The consumer timeout a queue sets for itself, in milliseconds: the smaller of its
/// `x-consumer-timeout` argument and its policy's `consumer-timeout`. What dlq holds from
/// the queue longer than that goes back to it (the channel is closed, or on 4.3 a quorum
/// queue cancels the consumer). The broker-wide `consumer_timeout` (30 min by default) is
/// not in the management API.
pub(crate) fn consumer_timeout(
    arguments: &Map<String, Value>,
    policy: &Map<String, Value>,
    version: Option<Version>,
) -> Option<u64> {
    if version.is_some_and(|v| v < QUEUE_CONSUMER_TIMEOUT_FROM) {
        return None;
    }
    let arg = arguments.get("x-consumer-timeout").and_then(Value::as_u64);
    let pol = policy.get("consumer-timeout").and_then(Value::as_u64);
    smaller(arg, pol).filter(|&ms| ms > 0)
}

/// The smaller of a queue's argument and its policy's value where both are set, else
/// whichever is. (`Option::min` would take an unset one, `None`, as the smaller.)
pub(crate) fn smaller<T: Ord>(arg: Option<T>, policy: Option<T>) -> Option<T> {
    match (arg, policy) {
        (Some(a), Some(p)) => Some(a.min(p)),
        (a, p) => a.or(p),
    }
}

/// What in a queue's arguments or policy makes a renewal unsafe: a message TTL or a length
/// limit could drop an original or a copy while both are in the queue.
pub(crate) fn renew_blocker(
    arguments: &Map<String, Value>,
    policy: &Map<String, Value>,
) -> Option<String> {
    let keys = [
        ("x-message-ttl", "message-ttl"),
        ("x-max-length", "max-length"),
        ("x-max-length-bytes", "max-length-bytes"),
    ];
    keys.iter().find_map(|(arg, pol)| {
        if arguments.contains_key(*arg) {
            Some(format!("it has the argument {arg}"))
        } else {
            policy
                .contains_key(*pol)
                .then(|| format!("its policy sets {pol}"))
        }
    })
}

/// How a read gives the messages it held back to the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GiveBack {
    /// Close the channel: every held message goes back to its place. Counts toward a quorum
    /// queue's delivery limit, so used where there is no limit (or with `--force`).
    Close,
    /// `basic.nack(multiple, requeue)`, then close: RabbitMQ 4.3+ does not count a nack
    /// toward a quorum queue's delivery limit.
    Nack,
    /// Publish a confirmed copy of each held message at the tail of the queue (every
    /// property and header kept, the broker's delivery count dropped) and acknowledge the
    /// original: the copies start again at delivery count 0, in the original order. For
    /// quorum queues whose broker counts every return (before 4.3).
    Renew,
}

/// Whether a read may go ahead, and how it gives messages back; why not when it may not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ReadVerdict {
    Safe(GiveBack),
    /// Allowed only with `--force` (then given back by closing); the text says why.
    Risky(String),
}

/// Why a queue cannot be renewed now: its arguments or policy, or consumers that could take
/// a copy before dlq acknowledged its original.
pub(crate) fn why_not_renewed(facts: &QueueFacts, consumers: u32) -> Option<String> {
    match (&facts.renew_blocker, consumers) {
        (Some(b), _) => Some(b.clone()),
        (None, 0) => None,
        (None, n) => Some(format!("it has {n} consumer(s)")),
    }
}

/// RabbitMQ 4.3 stopped counting `basic.nack(requeue)` toward the delivery limit.
const NACK_NOT_COUNTED: Version = Version(4, 3, 0);
/// From 4.0 a quorum queue without a limit is given back by nack (see `read_verdict`).
const NACK_IN_PLACE: Version = Version(4, 0, 0);

/// Whether a nacked message of this queue goes to the back of it, behind what is ready:
/// before 4.3 on a quorum queue without a delivery limit, rabbit_fifo's `handle_aux` turns
/// the return into a `requeue`, which appends it (4.0.5; with a limit it keeps its place,
/// and 4.3's uncounted nack keeps it too). A close keeps the place on every version. Read
/// on 4.0.5: `inspect` of 3,000 while 10 newcomers landed left `100000-100009, 0-2999`.
pub(crate) fn nack_goes_behind(facts: &QueueFacts) -> bool {
    facts.kind == QueueKind::Quorum
        && facts.delivery_limit.is_none()
        && facts.version.is_some_and(|v| v < NACK_NOT_COUNTED)
}

/// From 4.3 a quorum queue enforces its consumer timeout by cancelling the consumer and
/// taking back what it held, on a channel it leaves open (before, it closes the channel).
const TIMEOUT_CANCELS_FROM: Version = Version(4, 3, 0);

/// Whether RabbitMQ may take back what dlq holds from this queue while dlq's channel stays
/// open, so that a take must watch for its consumer's cancel: a quorum queue from 4.3, or
/// a queue whose type or broker version is unknown.
pub(crate) fn timeout_cancels(facts: &QueueFacts) -> bool {
    matches!(facts.kind, QueueKind::Quorum | QueueKind::Unknown)
        && facts.version.is_none_or(|v| v >= TIMEOUT_CANCELS_FROM)
}

/// From 4.3 a quorum queue gives back a *cancelled* consumer's messages too when its node
/// is lost: rabbit_fifo's `{down, Pid, noconnection}` marks every consumer of that channel
/// suspected down, cancelled or not, and returns what it holds after
/// `consumer_disconnected_timeout` or at the node's return. 4.0.5 (and 3.10) mark and return
/// only `up` consumers, so a cancelled one's messages stay out of reach (read in both
/// versions' code; #31's crash trials on 3.10).
const CANCELLED_RETURNED_FROM: Version = Version(4, 3, 0);

/// Whether a take of this queue may cancel consumers that still hold messages without
/// stranding them should dlq's node be lost (see `CANCELLED_RETURNED_FROM`).
pub(crate) fn cancelled_given_back(facts: &QueueFacts) -> bool {
    facts.kind == QueueKind::Quorum && facts.version.is_some_and(|v| v >= CANCELLED_RETURNED_FROM)
}

/// A quorum queue with a delivery limit: whatever dlq's give-back, a lost connection or a
/// channel RabbitMQ closes brings what dlq held one delivery closer to it.
pub(crate) fn delivery_limited(facts: &QueueFacts) -> bool {
    facts.kind == QueueKind::Quorum && facts.delivery_limit.is_some()
}

/// Whether giving a message back this way adds to its quorum delivery count.
pub(crate) fn give_back_counts(facts: &QueueFacts, give_back: GiveBack) -> bool {
    facts.kind == QueueKind::Quorum
        && match give_back {
            GiveBack::Close => true,
            GiveBack::Nack => facts.version.is_none_or(|v| v < NACK_NOT_COUNTED),
            GiveBack::Renew => false,
        }
}

/// The quorum-queue rule. Giving a held message back by closing the channel adds 1 to its
/// delivery count on every RabbitMQ version, and a message given back more than `limit`
/// times is dropped or dead-lettered again (RabbitMQ 4.x gives every quorum queue a limit
/// of 20). So a quorum queue is read:
/// - on 4.3+, giving back with `basic.nack(requeue)`, which 4.3 does not count, limit or
///   not;
/// - on 4.0–4.2 without a limit, with a nack too (or a close where the nack would go
///   behind messages ready, `nack_goes_behind`): it counts once there, as a close does,
///   but the nack path gives a take's channels back one at a time, oldest first, where
///   closed channels came back out of order (a selective replay's kept messages: a block
///   of 648 of 4,000 ahead of their turn on 4.3.6, 2,496 behind on 4.0.5 in CI,
///   `selective_replays_without_a_limit_keep_both_orders`);
/// - before 4.3 (or version unknown), with a limit, by renewing it (`GiveBack::Renew`),
///   which needs a queue nobody else consumes and with no TTL or length limit;
/// - otherwise not without `--force`.
///
/// (`basic.nack` is not used on 3.x: it moves quorum messages to the back of the queue.)
/// A queue whose type is unknown is risky.
pub(crate) fn read_verdict(queue: &str, facts: &QueueFacts, consumers: u32) -> ReadVerdict {
    let nack_uncounted = facts.version.is_some_and(|v| v >= NACK_NOT_COUNTED);
    let nack_in_place = facts.version.is_some_and(|v| v >= NACK_IN_PLACE);
    let limit = match (facts.kind, facts.delivery_limit) {
        (QueueKind::Quorum, _) if nack_uncounted => return ReadVerdict::Safe(GiveBack::Nack),
        (QueueKind::Quorum, None) if nack_in_place => return ReadVerdict::Safe(GiveBack::Nack),
        (QueueKind::Classic | QueueKind::Stream, _) | (QueueKind::Quorum, None) => {
            return ReadVerdict::Safe(GiveBack::Close);
        }
        (QueueKind::Unknown, _) => {
            return ReadVerdict::Risky(format!(
                "cannot check the type of queue {queue:?} without the management API; if it is a \
                 quorum queue with a delivery limit, reading it can push messages over that limit \
                 and the broker drops or dead-letters them"
            ));
        }
        (QueueKind::Quorum, Some(limit)) => limit,
    };
    let Some(blocker) = why_not_renewed(facts, consumers) else {
        return ReadVerdict::Safe(GiveBack::Renew);
    };
    let version = facts
        .version
        .map(|v| format!("RabbitMQ {v}"))
        .unwrap_or_else(|| "this RabbitMQ (version unknown)".into());
    ReadVerdict::Risky(format!(
        "{queue:?} is a quorum queue with delivery limit {limit}: {version} adds 1 to a \
         message's delivery count each time a reader gives it back, and a message given back \
         more than {limit} times is dropped or dead-lettered again. dlq reads such a queue by \
         renewing it (confirmed copies at the tail, originals acknowledged), but not now: \
         {blocker}"
    ))
}

/// One dead-letter queue and what feeds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Dlq {
    pub(crate) name: String,
    /// Queues that dead-letter into this one, sorted.
    pub(crate) fed_by: Vec<String>,
    /// The dead-letter exchanges that route here, sorted.
    pub(crate) via: Vec<String>,
}

/// The result of discovery: DLQs, and what looked wrong on the way.
#[derive(Debug, Clone, Default)]
pub(crate) struct Topology {
    pub(crate) dlqs: Vec<Dlq>,
    pub(crate) warnings: Vec<String>,
    /// Queues recognised as retry or delay hops (`is_hop`), sorted: what they dead-letter
    /// into is a work queue, not a DLQ.
    pub(crate) hops: Vec<String>,
}

/// A queue whose dead-lettering is a scheduled hop back to work, not a death: Celery's
/// delayed-delivery queues (by name, prefixed or not), or a wait queue with a message TTL
/// and no consumer of its own whose every target is consumed (a TTL retry loop).
fn is_hop(
    q: &ApiQueue,
    policy: &Map<String, Value>,
    targets: &BTreeSet<String>,
    consumers: &BTreeMap<&str, u64>,
) -> bool {
    if super::death::is_delay_hop(&q.name) {
        return true;
    }
    let ttl = q.arguments.contains_key("x-message-ttl") || policy.contains_key("message-ttl");
    ttl && q.consumers == Some(0)
        && !targets.is_empty()
        && targets
            .iter()
            .all(|t| consumers.get(t.as_str()).is_some_and(|&n| n > 0))
}

/// Topic matching as RabbitMQ does it: words split on `.`, `*` one word, `#` zero or more.
pub(crate) fn topic_matches(pattern: &str, key: &str) -> bool {
    fn go(p: &[&str], k: &[&str]) -> bool {
        match p.split_first() {
            None => k.is_empty(),
            Some((&"#", rest)) => (0..=k.len()).any(|i| go(rest, &k[i..])),
            Some((&w, rest)) => match k.split_first() {
                Some((&kw, krest)) => (w == "*" || w == kw) && go(rest, krest),
                None => false,
            },
        }
    }
    let p: Vec<&str> = pattern.split('.').collect();
    let k: Vec<&str> = key.split('.').collect();
    go(&p, &k)
}

/// The queues a message published to `exchange` with `key` can reach. `None` as the key
/// means "any key" (the dead-letter routing key is not set, so the message keeps its own
/// routing keys, which only the producer knows).
fn reachable_queues(
    exchange: &str,
    key: Option<&str>,
    bindings: &BTreeMap<&str, Vec<&ApiBinding>>,
    kinds: &BTreeMap<&str, &str>,
    out: &mut BTreeSet<String>,
    seen: &mut BTreeSet<String>,
) {
    if !seen.insert(exchange.to_owned()) {
        return;
    }
    let kind = kinds.get(exchange).copied().unwrap_or("direct");
    for b in bindings.get(exchange).into_iter().flatten() {
        let routes = match (kind, key) {
            (_, None) | ("fanout", _) => true,
            ("direct", Some(k)) => b.routing_key == k,
            ("topic", Some(k)) => topic_matches(&b.routing_key, k),
            // headers, consistent-hash, ...: depends on the message; count it as reachable.
            _ => true,
        };
        if !routes {
            continue;
        }
        match b.destination_type.as_str() {
            "queue" => {
                out.insert(b.destination.clone());
            }
            "exchange" => reachable_queues(&b.destination, key, bindings, kinds, out, seen),
            _ => {}
        }
    }
}

/// What the dead-letter routing can reach: queue names, exchanges and their bindings.
struct Graph<'a> {
    names: &'a BTreeSet<&'a str>,
    by_source: &'a BTreeMap<&'a str, Vec<&'a ApiBinding>>,
    kinds: &'a BTreeMap<&'a str, &'a str>,
}

impl Graph<'_> {
    /// The queues `queue`'s dead letters reach; a warning for each way they are dropped;
    /// `None` when its dead-letter exchange does not exist.
    fn reach(
        &self,
        queue: &str,
        target: &DeadLetterTarget,
        warnings: &mut Vec<String>,
    ) -> Option<BTreeSet<String>> {
        let mut reached = BTreeSet::new();
        if target.exchange.is_empty() {
            // The default exchange routes by queue name.
            match &target.routing_key {
                Some(k) if self.names.contains(k.as_str()) => {
                    reached.insert(k.clone());
                }
                Some(k) => warnings.push(format!(
                    "queue {} dead-letters to the default exchange with routing key {k:?}, \
                     but no queue has that name: its dead letters are dropped",
                    queue
                )),
                None => {}
            }
        } else if !self.kinds.contains_key(target.exchange.as_str()) {
            warnings.push(format!(
                "queue {} dead-letters to exchange {:?}, which does not exist: its dead letters are dropped",
                queue, target.exchange
            ));
            return None;
        } else {
            reachable_queues(
                &target.exchange,
                target.routing_key.as_deref(),
                self.by_source,
                self.kinds,
                &mut reached,
                &mut BTreeSet::new(),
            );
            if reached.is_empty() {
                warnings.push(format!(
                    "queue {} dead-letters to exchange {:?}{}, which routes to no queue: its dead letters are dropped",
                    queue,
                    target.exchange,
                    target
                        .routing_key
                        .as_deref()
                        .map(|k| format!(" with routing key {k:?}"))
                        .unwrap_or_default()
                ));
            }
        }
        Some(reached)
    }
}

/// Every queue that receives dead letters (the DLQs) and which queues feed each of them.
/// `policies[i]` is the effective policy of `queues[i]`.
pub(crate) fn discover(
    queues: &[ApiQueue],
    policies: &[Map<String, Value>],
    bindings: &[ApiBinding],
    exchanges: &[ApiExchange],
) -> Topology {
    let mut by_source: BTreeMap<&str, Vec<&ApiBinding>> = BTreeMap::new();
    for b in bindings {
        by_source.entry(b.source.as_str()).or_default().push(b);
    }
    let kinds: BTreeMap<&str, &str> = exchanges
        .iter()
        .map(|e| (e.name.as_str(), e.kind.as_str()))
        .collect();
    let names: BTreeSet<&str> = queues.iter().map(|q| q.name.as_str()).collect();
    let consumers: BTreeMap<&str, u64> = queues
        .iter()
        .map(|q| (q.name.as_str(), q.consumers.unwrap_or(0)))
        .collect();
    let mut fed: BTreeMap<String, (BTreeSet<String>, BTreeSet<String>)> = BTreeMap::new();
    let mut warnings = Vec::new();
    let mut hops = Vec::new();
    for (q, policy) in queues.iter().zip(policies) {
        let Some(target) = dead_letter_target(&q.arguments, policy) else {
            continue;
        };
        let graph = Graph {
            names: &names,
            by_source: &by_source,
            kinds: &kinds,
        };
        let Some(reached) = graph.reach(&q.name, &target, &mut warnings) else {
            continue;
        };
        if is_hop(q, policy, &reached, &consumers) {
            hops.push(q.name.clone());
            continue;
        }
        for dlq in reached {
            let e = fed.entry(dlq).or_default();
            e.0.insert(q.name.clone());
            e.1.insert(if target.exchange.is_empty() {
                "(default exchange)".to_owned()
            } else {
                target.exchange.clone()
            });
        }
    }
    Topology {
        dlqs: fed
            .into_iter()
            .map(|(name, (fed_by, via))| Dlq {
                name,
                fed_by: fed_by.into_iter().collect(),
                via: via.into_iter().collect(),
            })
            .collect(),
        warnings,
        hops,
    }
}

#[cfg(test)]
mod tests;
