//! The dead-letter topology and the read-safety rule, computed from what the management
//! API reports. Pure: no I/O, so every rule here is unit-tested.

use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};

/// A queue as `/api/queues/{vhost}` describes it. Stats-derived fields (`consumers`,
/// `messages_unacknowledged`, `effective_policy_definition`, `policy`) are missing for a
/// few seconds after a queue is created: the broker emits stats every 5 s.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ApiQueue {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: Option<String>,
    #[serde(default)]
    pub arguments: Map<String, Value>,
    pub effective_policy_definition: Option<Map<String, Value>>,
    pub messages: Option<u64>,
    pub messages_unacknowledged: Option<u64>,
    pub consumers: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ApiBinding {
    pub source: String,
    pub destination: String,
    pub destination_type: String,
    #[serde(default)]
    pub routing_key: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ApiExchange {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ApiPolicy {
    pub name: String,
    pub pattern: String,
    #[serde(rename = "apply-to", default = "apply_to_all")]
    pub apply_to: String,
    #[serde(default)]
    pub definition: Map<String, Value>,
    #[serde(default)]
    pub priority: i64,
}

fn apply_to_all() -> String {
    "all".into()
}

/// The queue types dlq reads differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueKind {
    Classic,
    Quorum,
    Stream,
    /// Without the management API the type cannot be known over AMQP 0-9-1.
    Unknown,
}

impl QueueKind {
    pub fn from_api(kind: Option<&str>) -> QueueKind {
        match kind {
            Some("classic") => QueueKind::Classic,
            Some("quorum") => QueueKind::Quorum,
            Some("stream") => QueueKind::Stream,
            // Other plugin-provided types behave like classic queues for a consumer.
            Some(_) => QueueKind::Classic,
            None => QueueKind::Unknown,
        }
    }

    pub fn as_str(self) -> &'static str {
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
pub struct Version(pub u32, pub u32, pub u32);

impl Version {
    pub fn parse(s: &str) -> Option<Version> {
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
pub fn effective_policy(
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
pub struct DeadLetterTarget {
    pub exchange: String,
    pub routing_key: Option<String>,
}

/// `x-dead-letter-exchange` wins over the policy's `dead-letter-exchange` (RabbitMQ's
/// rule for these two keys); same for the routing key.
pub fn dead_letter_target(
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
pub fn delivery_limit(
    arguments: &Map<String, Value>,
    policy: &Map<String, Value>,
    version: Option<Version>,
) -> Option<i64> {
    let arg = arguments.get("x-delivery-limit").and_then(Value::as_i64);
    let pol = policy.get("delivery-limit").and_then(Value::as_i64);
    let explicit = match (arg, pol) {
        (Some(a), Some(p)) => Some(a.min(p)),
        (a, p) => a.or(p),
    };
    match explicit {
        Some(l) if l < 0 => None,
        Some(l) => Some(l),
        // Unknown version: assume the newer default rather than no limit.
        None if version.is_none_or(|v| v >= Version(4, 0, 0)) => Some(20),
        None => None,
    }
}

/// What dlq knows about a queue before reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueFacts {
    pub kind: QueueKind,
    pub delivery_limit: Option<i64>,
    pub version: Option<Version>,
}

/// Whether a read may go ahead, and why not when it may not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadVerdict {
    Safe,
    /// Allowed only with `--force`; the text says why.
    Risky(String),
}

/// The quorum-queue rule: reading hands every message back by closing the channel, which
/// adds 1 to each message's delivery count on every RabbitMQ version, and a message given
/// back more than `limit` times is dropped or dead-lettered again. dlq cannot see a
/// message's count without delivering it (and delivering it is what counts), so reading a
/// quorum queue with a delivery limit is risky, and so is a queue whose type is unknown.
/// (RabbitMQ 4.3 does not count `basic.nack(requeue)`, but on 3.10 such a nack moves a
/// quorum queue's messages to its back, so dlq does not use it.)
pub fn read_verdict(queue: &str, facts: &QueueFacts) -> ReadVerdict {
    match facts.kind {
        QueueKind::Classic | QueueKind::Stream => ReadVerdict::Safe,
        QueueKind::Unknown => ReadVerdict::Risky(format!(
            "cannot check the type of queue {queue:?} without the management API; if it is a \
             quorum queue with a delivery limit, reading it can push messages over that limit \
             and the broker drops or dead-letters them"
        )),
        QueueKind::Quorum => match facts.delivery_limit {
            Some(limit) => {
                let version = facts
                    .version
                    .map(|v| format!("RabbitMQ {v}"))
                    .unwrap_or_else(|| "this RabbitMQ (version unknown)".into());
                ReadVerdict::Risky(format!(
                    "{queue:?} is a quorum queue with delivery limit {limit}: {version} adds 1 to \
                     a message's delivery count each time a reader gives it back, and a message \
                     given back more than {limit} times is dropped or dead-lettered again; dlq \
                     cannot see the counts without reading"
                ))
            }
            None => ReadVerdict::Safe,
        },
    }
}

/// One dead-letter queue and what feeds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dlq {
    pub name: String,
    /// Queues that dead-letter into this one, sorted.
    pub fed_by: Vec<String>,
    /// The dead-letter exchanges that route here, sorted.
    pub via: Vec<String>,
}

/// The result of discovery: DLQs, and what looked wrong on the way.
#[derive(Debug, Clone, Default)]
pub struct Topology {
    pub dlqs: Vec<Dlq>,
    pub warnings: Vec<String>,
}

/// Topic matching as RabbitMQ does it: words split on `.`, `*` one word, `#` zero or more.
pub fn topic_matches(pattern: &str, key: &str) -> bool {
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

/// Every queue that receives dead letters (the DLQs) and which queues feed each of them.
/// `policies[i]` is the effective policy of `queues[i]`.
pub fn discover(
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
    let mut fed: BTreeMap<String, (BTreeSet<String>, BTreeSet<String>)> = BTreeMap::new();
    let mut warnings = Vec::new();
    for (q, policy) in queues.iter().zip(policies) {
        let Some(target) = dead_letter_target(&q.arguments, policy) else {
            continue;
        };
        let mut reached = BTreeSet::new();
        if target.exchange.is_empty() {
            // The default exchange routes by queue name.
            match &target.routing_key {
                Some(k) if names.contains(k.as_str()) => {
                    reached.insert(k.clone());
                }
                Some(k) => warnings.push(format!(
                    "queue {} dead-letters to the default exchange with routing key {k:?}, \
                     but no queue has that name: its dead letters are dropped",
                    q.name
                )),
                None => {}
            }
        } else if !kinds.contains_key(target.exchange.as_str()) {
            warnings.push(format!(
                "queue {} dead-letters to exchange {:?}, which does not exist: its dead letters are dropped",
                q.name, target.exchange
            ));
            continue;
        } else {
            reachable_queues(
                &target.exchange,
                target.routing_key.as_deref(),
                &by_source,
                &kinds,
                &mut reached,
                &mut BTreeSet::new(),
            );
            if reached.is_empty() {
                warnings.push(format!(
                    "queue {} dead-letters to exchange {:?}{}, which routes to no queue: its dead letters are dropped",
                    q.name,
                    target.exchange,
                    target
                        .routing_key
                        .as_deref()
                        .map(|k| format!(" with routing key {k:?}"))
                        .unwrap_or_default()
                ));
            }
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn queue(name: &str, args: Value) -> ApiQueue {
        ApiQueue {
            name: name.into(),
            kind: Some("classic".into()),
            arguments: map(args),
            ..Default::default()
        }
    }

    fn binding(source: &str, dest: &str, key: &str) -> ApiBinding {
        ApiBinding {
            source: source.into(),
            destination: dest.into(),
            destination_type: "queue".into(),
            routing_key: key.into(),
        }
    }

    fn exchange(name: &str, kind: &str) -> ApiExchange {
        ApiExchange {
            name: name.into(),
            kind: kind.into(),
        }
    }

    #[test]
    fn topic_matching() {
        assert!(topic_matches("a.*.c", "a.b.c"));
        assert!(!topic_matches("a.*.c", "a.b.b.c"));
        assert!(topic_matches("a.#", "a"));
        assert!(topic_matches("a.#", "a.b.c"));
        assert!(topic_matches("#", ""));
        assert!(topic_matches("#.dlq", "x.y.dlq"));
        assert!(!topic_matches("a.b", "a.c"));
        assert!(topic_matches("*", "x"));
        assert!(!topic_matches("*", "x.y"));
    }

    #[test]
    fn discovers_dlqs_and_feeders() {
        let queues = vec![
            queue(
                "matriculas.processar",
                json!({"x-dead-letter-exchange": "matriculas.dlx"}),
            ),
            queue(
                "pagamentos",
                json!({"x-dead-letter-exchange": "dlx.direct", "x-dead-letter-routing-key": "pag"}),
            ),
            queue("matriculas.dlq", json!({})),
            queue("pag.dlq", json!({})),
            queue("other.dlq", json!({})),
            queue("by.policy", json!({})),
            queue("to.missing", json!({"x-dead-letter-exchange": "nope"})),
            queue(
                "default.ex",
                json!({"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "other.dlq"}),
            ),
        ];
        let mut policies = vec![Map::new(); queues.len()];
        policies[5] = map(json!({"dead-letter-exchange": "matriculas.dlx"}));
        let bindings = vec![
            binding("matriculas.dlx", "matriculas.dlq", ""),
            binding("dlx.direct", "pag.dlq", "pag"),
            binding("dlx.direct", "other.dlq", "other"),
        ];
        let exchanges = vec![
            exchange("matriculas.dlx", "fanout"),
            exchange("dlx.direct", "direct"),
        ];
        let t = discover(&queues, &policies, &bindings, &exchanges);
        assert_eq!(
            t.dlqs,
            vec![
                Dlq {
                    name: "matriculas.dlq".into(),
                    fed_by: vec!["by.policy".into(), "matriculas.processar".into()],
                    via: vec!["matriculas.dlx".into()],
                },
                Dlq {
                    name: "other.dlq".into(),
                    fed_by: vec!["default.ex".into()],
                    via: vec!["(default exchange)".into()],
                },
                Dlq {
                    name: "pag.dlq".into(),
                    fed_by: vec!["pagamentos".into()],
                    via: vec!["dlx.direct".into()],
                },
            ]
        );
        assert_eq!(t.warnings.len(), 1);
        assert!(t.warnings[0].contains("to.missing"), "{:?}", t.warnings);
    }

    #[test]
    fn argument_wins_over_policy_and_exchange_chains_are_followed() {
        let args = map(json!({"x-dead-letter-exchange": "a"}));
        let pol = map(json!({"dead-letter-exchange": "b", "dead-letter-routing-key": "k"}));
        assert_eq!(
            dead_letter_target(&args, &pol),
            Some(DeadLetterTarget {
                exchange: "a".into(),
                routing_key: Some("k".into())
            })
        );
        let queues = vec![queue("src", json!({"x-dead-letter-exchange": "e1"})), {
            let mut q = queue("dlq", json!({}));
            q.kind = Some("quorum".into());
            q
        }];
        let bindings = vec![
            ApiBinding {
                source: "e1".into(),
                destination: "e2".into(),
                destination_type: "exchange".into(),
                routing_key: "".into(),
            },
            binding("e2", "dlq", "#"),
        ];
        let exchanges = vec![exchange("e1", "fanout"), exchange("e2", "topic")];
        let t = discover(&queues, &[Map::new(), Map::new()], &bindings, &exchanges);
        assert_eq!(t.dlqs.len(), 1);
        assert_eq!(t.dlqs[0].fed_by, vec!["src".to_string()]);
    }

    #[test]
    fn effective_policy_is_computed_when_the_api_has_none_yet() {
        let policies = vec![
            ApiPolicy {
                name: "low".into(),
                pattern: "^dl".into(),
                apply_to: "queues".into(),
                definition: map(json!({"delivery-limit": 50})),
                priority: 0,
            },
            ApiPolicy {
                name: "high".into(),
                pattern: "^dlq\\.".into(),
                apply_to: "quorum_queues".into(),
                definition: map(json!({"delivery-limit": 10, "dead-letter-exchange": "x"})),
                priority: 5,
            },
        ];
        let ops = vec![ApiPolicy {
            name: "op".into(),
            pattern: ".*".into(),
            apply_to: "queues".into(),
            definition: map(json!({"delivery-limit": 3})),
            priority: 0,
        }];
        let mut q = queue("dlq.a", json!({}));
        q.kind = Some("quorum".into());
        let mut w = Vec::new();
        let e = effective_policy(&q, &policies, &[], &mut w);
        assert_eq!(e.get("delivery-limit"), Some(&json!(10)));
        let e = effective_policy(&q, &policies, &ops, &mut w);
        assert_eq!(e.get("delivery-limit"), Some(&json!(3)));
        q.kind = Some("classic".into());
        let e = effective_policy(&q, &policies, &[], &mut w);
        assert_eq!(e.get("delivery-limit"), Some(&json!(50)));
        q.effective_policy_definition = Some(map(json!({"delivery-limit": 7})));
        let e = effective_policy(&q, &policies, &[], &mut w);
        assert_eq!(e.get("delivery-limit"), Some(&json!(7)));
        assert!(w.is_empty());
    }

    #[test]
    fn delivery_limits_and_read_verdicts() {
        let v310 = Some(Version(3, 10, 8));
        let v41 = Some(Version(4, 1, 0));
        let v43 = Some(Version(4, 3, 0));
        let none = Map::new();
        let arg5 = map(json!({"x-delivery-limit": 5}));
        let pol3 = map(json!({"delivery-limit": 3}));
        assert_eq!(delivery_limit(&none, &none, v310), None);
        assert_eq!(delivery_limit(&none, &none, v41), Some(20));
        assert_eq!(delivery_limit(&none, &none, None), Some(20));
        assert_eq!(delivery_limit(&arg5, &none, v310), Some(5));
        assert_eq!(delivery_limit(&arg5, &pol3, v310), Some(3));
        assert_eq!(
            delivery_limit(&map(json!({"x-delivery-limit": -1})), &none, v41),
            None
        );
        let facts = |kind, limit, version| QueueFacts {
            kind,
            delivery_limit: limit,
            version,
        };
        assert_eq!(
            read_verdict("q", &facts(QueueKind::Classic, None, v310)),
            ReadVerdict::Safe
        );
        assert_eq!(
            read_verdict("q", &facts(QueueKind::Quorum, None, v310)),
            ReadVerdict::Safe
        );
        assert!(matches!(
            read_verdict("q", &facts(QueueKind::Quorum, Some(5), v310)),
            ReadVerdict::Risky(m) if m.contains("delivery limit 5") && m.contains("3.10.8")
        ));
        assert!(matches!(
            read_verdict("q", &facts(QueueKind::Quorum, Some(20), v41)),
            ReadVerdict::Risky(_)
        ));
        // dlq gives messages back by closing its channel, which 4.3 counts too.
        assert!(matches!(
            read_verdict("q", &facts(QueueKind::Quorum, Some(20), v43)),
            ReadVerdict::Risky(_)
        ));
        assert!(matches!(
            read_verdict("q", &facts(QueueKind::Unknown, None, None)),
            ReadVerdict::Risky(m) if m.contains("management API")
        ));
        assert_eq!(
            read_verdict("q", &facts(QueueKind::Stream, Some(1), v310)),
            ReadVerdict::Safe
        );
    }

    #[test]
    fn versions() {
        assert_eq!(Version::parse("3.10.8"), Some(Version(3, 10, 8)));
        assert_eq!(Version::parse("4.3.0-rc.1"), Some(Version(4, 3, 0)));
        assert_eq!(Version::parse("4"), Some(Version(4, 0, 0)));
        assert_eq!(Version::parse("x"), None);
    }
}
