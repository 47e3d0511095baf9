//! What a dead-lettered message looks like when it is sent back: pure, unit-tested.
//!
//! Kept exactly: body bytes, content type/encoding, delivery mode, priority, message id,
//! correlation id, reply-to, timestamp, type, app id, cluster id and every application header.
//!
//! Changed, on purpose:
//! - `x-death`, `x-first-death-*`, `x-last-death-*` are removed and the old history is kept in
//!   `dlq-x-death`, a string holding it as lossless typed JSON (`{"x-death": ["A", …], …}`,
//!   the archive's encoding; an earlier `dlq-x-death` is kept inside it). A broker silently DROPS a message that re-enters a queue
//!   already in its `x-death` without a rejection in the cycle (e.g. expired again), and 4.x
//!   brokers ignore a client-set `x-death` anyway; a fresh history is built if it dies again.
//! - `expiration` is not restored (dead lettering removed it; restoring it could expire the
//!   message again at once); the original value stays readable in the saved history.
//! - `user_id` is dropped when it names another user (the broker refuses such a publish) and
//!   kept in `dlq-original-user-id`.
//! - Added: `dlq-replay-count` (loop guard), `dlq-replay-id` (this run), `dlq-replayed-at`,
//!   `dlq-replayed-from` (the DLQ), and `dlq-publish-id` (correlates broker returns).

use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable, LongString};

pub(crate) use crate::model::REPLAY_COUNT;
pub(crate) const REPLAY_ID: &str = "dlq-replay-id";
pub(crate) const REPLAYED_AT: &str = "dlq-replayed-at";
pub(crate) const REPLAYED_FROM: &str = "dlq-replayed-from";
pub(crate) const SAVED_DEATHS: &str = "dlq-x-death";
pub(crate) const ORIGINAL_USER: &str = "dlq-original-user-id";

/// Headers the broker owns; removed on replay (their content is saved in `dlq-x-death`).
const BROKER_DEATH_HEADERS: [&str; 7] = [
    "x-death",
    "x-first-death-queue",
    "x-first-death-reason",
    "x-first-death-exchange",
    "x-last-death-queue",
    "x-last-death-reason",
    "x-last-death-exchange",
];

/// Facts about this replay run, stamped on every message.
#[derive(Debug, Clone)]
pub(crate) struct Stamp {
    pub(crate) replay_id: String,
    pub(crate) at: chrono::DateTime<chrono::Utc>,
    /// The DLQ the message is taken from.
    pub(crate) from_queue: String,
    /// The user dlq connects as (a message's `user_id` must equal it to be accepted).
    pub(crate) user: String,
    pub(crate) max_replays: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refusal {
    #[error(
        "already replayed {count} time(s) (--max-replays {max}): it keeps failing; fix the cause or raise --max-replays"
    )]
    LoopGuard { count: i64, max: u32 },
    #[error(
        "no destination: the message has no x-death history naming the queue it died in (use --to-queue)"
    )]
    NoOrigin,
}

/// On a transformed message: the id of the dead letter it was made from.
pub(crate) const TRANSFORMED_FROM: &str = "dlq-transformed-from";
/// On a transformed message: the SHA-256 of the `--transform` program.
pub(crate) const TRANSFORM: &str = "dlq-transform";

/// How many times dlq replayed this message already.
pub(crate) fn replay_count(headers: Option<&FieldTable>) -> i64 {
    crate::rabbit::death::header_int(headers, REPLAY_COUNT).unwrap_or(0)
}

fn long(s: impl Into<String>) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s.into().into_bytes()))
}

/// The properties to publish, or why this message must stay in the DLQ.
pub(crate) fn prepare(
    props: &BasicProperties,
    stamp: &Stamp,
    publish_id: &str,
) -> Result<BasicProperties, Refusal> {
    let count = replay_count(props.headers().as_ref());
    if count >= i64::from(stamp.max_replays) {
        return Err(Refusal::LoopGuard {
            count,
            max: stamp.max_replays,
        });
    }
    let mut map = props
        .headers()
        .as_ref()
        .map(|h| h.inner().clone())
        .unwrap_or_default();
    let mut saved = FieldTable::default();
    for key in BROKER_DEATH_HEADERS {
        if let Some(v) = map.remove(key) {
            saved.insert(key.into(), v);
        }
    }
    if !saved.inner().is_empty() {
        // A message replayed before keeps its earlier history inside the new one.
        if let Some(earlier) = map.remove(SAVED_DEATHS) {
            saved.insert(SAVED_DEATHS.into(), earlier);
        }
        // Lossless typed JSON in one string rather than nested tables: RabbitMQ decodes every
        // published message's headers, and a nested x-death table cost it ~20% more CPU per
        // replayed message (measured: 30k publishes, docs/BENCHMARKS-HISTORY.md).
        let text = serde_json::to_string(&crate::rabbit::codec::TypedTable(&saved))
            .expect("JSON serializes");
        map.insert(SAVED_DEATHS.into(), long(text));
    }
    map.insert(REPLAY_COUNT.into(), AMQPValue::LongLongInt(count + 1));
    map.insert(REPLAY_ID.into(), long(stamp.replay_id.clone()));
    map.insert(REPLAYED_AT.into(), long(crate::model::rfc3339(&stamp.at)));
    map.insert(REPLAYED_FROM.into(), long(stamp.from_queue.clone()));
    map.insert(
        crate::rabbit::publish::PUBLISH_ID_HEADER.into(),
        long(publish_id.to_string()),
    );

    let mut out = BasicProperties::default();
    macro_rules! keep {
        ($get:ident, $with:ident) => {
            if let Some(v) = props.$get().clone() {
                out = out.$with(v);
            }
        };
    }
    keep!(content_type, with_content_type);
    keep!(content_encoding, with_content_encoding);
    keep!(delivery_mode, with_delivery_mode);
    keep!(priority, with_priority);
    keep!(correlation_id, with_correlation_id);
    keep!(reply_to, with_reply_to);
    keep!(message_id, with_message_id);
    keep!(timestamp, with_timestamp);
    keep!(kind, with_type);
    keep!(app_id, with_app_id);
    keep!(cluster_id, with_cluster_id);
    if let Some(user) = props.user_id().clone() {
        if user.as_str() == stamp.user {
            out = out.with_user_id(user);
        } else {
            map.insert(ORIGINAL_USER.into(), long(user.as_str().to_string()));
        }
    }
    Ok(out.with_headers(FieldTable::from(map)))
}

/// A transformed message is a new message: a fresh `message_id`, the application headers
/// the program changed, and where it came from (`dlq-transformed-from`, the original id;
/// `dlq-transform`, the program's SHA-256).
pub(crate) fn transformed(
    props: BasicProperties,
    edit: &crate::transform::Edit,
    original_id: &str,
    program_sha256: &str,
) -> BasicProperties {
    let mut map = props.headers().clone().unwrap_or_default().inner().clone();
    for (k, v) in &edit.headers {
        match v {
            Some(v) => {
                map.insert(k.as_str().into(), json_header(v));
            }
            None => {
                map.remove(k.as_str());
            }
        }
    }
    map.insert(TRANSFORMED_FROM.into(), long(original_id.to_string()));
    map.insert(TRANSFORM.into(), long(program_sha256.to_string()));
    props
        .with_headers(FieldTable::from(map))
        .with_message_id(uuid::Uuid::new_v4().to_string().into())
}

/// A header value a program wrote, as AMQP: strings, integers, floats, booleans and null
/// keep their type; arrays and objects go as their JSON text.
fn json_header(v: &serde_json::Value) -> AMQPValue {
    use serde_json::Value;
    match v {
        Value::Null => AMQPValue::Void,
        Value::Bool(b) => AMQPValue::Boolean(*b),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => AMQPValue::LongLongInt(i),
            (None, Some(f)) => AMQPValue::Double(f),
            _ => long(n.to_string()),
        },
        Value::String(s) => long(s.clone()),
        other => long(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(max: u32) -> Stamp {
        Stamp {
            replay_id: "run-1".into(),
            at: "2026-11-30T12:00:00Z".parse().unwrap(),
            from_queue: "matriculas.dlq".into(),
            user: "guest".into(),
            max_replays: max,
        }
    }

    fn dead_letter_headers() -> FieldTable {
        let mut death = FieldTable::default();
        death.insert("queue".into(), long("matriculas.processar"));
        death.insert("reason".into(), long("rejected"));
        death.insert("count".into(), AMQPValue::LongLongInt(1));
        let mut h = FieldTable::default();
        h.insert(
            "x-death".into(),
            AMQPValue::FieldArray(vec![AMQPValue::FieldTable(death)].into()),
        );
        h.insert("x-first-death-queue".into(), long("matriculas.processar"));
        h.insert("x-first-death-reason".into(), long("rejected"));
        h.insert("x-first-death-exchange".into(), long(""));
        h.insert("app".into(), long("matriculas"));
        h.insert("x-exception-message".into(), long("KeyError: 'usuario_id'"));
        h
    }

    fn props() -> BasicProperties {
        BasicProperties::default()
            .with_content_type("application/json".into())
            .with_content_encoding("utf-8".into())
            .with_delivery_mode(2)
            .with_priority(5)
            .with_message_id("m-1".into())
            .with_correlation_id("c-1".into())
            .with_timestamp(1_700_000_000)
            .with_type("matricula.confirmada".into())
            .with_app_id("svc".into())
            .with_expiration("60000".into())
            .with_user_id("someone-else".into())
            .with_headers(dead_letter_headers())
    }

    #[test]
    fn properties_are_kept_and_history_moved() {
        let out = prepare(&props(), &stamp(3), "p-1").unwrap();
        let p = props();
        assert_eq!(out.content_type(), p.content_type());
        assert_eq!(out.content_encoding(), p.content_encoding());
        assert_eq!(out.delivery_mode(), p.delivery_mode());
        assert_eq!(out.priority(), p.priority());
        assert_eq!(out.message_id(), p.message_id());
        assert_eq!(out.correlation_id(), p.correlation_id());
        assert_eq!(out.timestamp(), p.timestamp());
        assert_eq!(out.kind(), p.kind());
        assert_eq!(out.app_id(), p.app_id());
        assert_eq!(out.expiration(), &None, "expiration is not restored");
        assert_eq!(
            out.user_id(),
            &None,
            "another user's id would be refused by the broker"
        );
        let h = out.headers().clone().unwrap();
        let h = h.inner();
        for k in BROKER_DEATH_HEADERS {
            assert!(!h.contains_key(k), "{k} removed");
        }
        assert_eq!(h.get("app"), Some(&long("matriculas")));
        assert_eq!(
            h.get("x-exception-message"),
            Some(&long("KeyError: 'usuario_id'"))
        );
        let AMQPValue::LongString(saved) = h.get(SAVED_DEATHS).unwrap() else {
            panic!("saved history")
        };
        let saved: serde_json::Value = serde_json::from_slice(saved.as_bytes()).unwrap();
        let saved = crate::rabbit::codec::table_from_typed_json(&saved).unwrap();
        assert_eq!(
            saved.inner().get("x-first-death-queue"),
            Some(&long("matriculas.processar"))
        );
        let mut original = FieldTable::default();
        for (k, v) in dead_letter_headers().inner() {
            if BROKER_DEATH_HEADERS.contains(&k.as_str()) {
                original.insert(k.clone(), v.clone());
            }
        }
        assert_eq!(saved, original, "the history is kept losslessly");
        assert_eq!(h.get(REPLAY_COUNT), Some(&AMQPValue::LongLongInt(1)));
        assert_eq!(h.get(REPLAY_ID), Some(&long("run-1")));
        assert_eq!(h.get(REPLAYED_FROM), Some(&long("matriculas.dlq")));
        assert_eq!(h.get(ORIGINAL_USER), Some(&long("someone-else")));
        assert_eq!(
            crate::rabbit::publish::correlation_key(&out).as_deref(),
            Some("p-1")
        );
    }

    #[test]
    fn a_second_death_keeps_the_first_history() {
        let once = prepare(&props(), &stamp(3), "p-1").unwrap();
        // It died again: the broker wrote a fresh x-death beside dlq-x-death.
        let mut h = once.headers().clone().unwrap();
        let first = h.inner().get(SAVED_DEATHS).cloned().unwrap();
        for (k, v) in dead_letter_headers().inner() {
            if BROKER_DEATH_HEADERS.contains(&k.as_str()) {
                h.insert(k.clone(), v.clone());
            }
        }
        let twice = prepare(&once.with_headers(h), &stamp(3), "p-2").unwrap();
        let AMQPValue::LongString(saved) =
            twice.headers().clone().unwrap().inner()[SAVED_DEATHS].clone()
        else {
            panic!("saved history")
        };
        let saved: serde_json::Value = serde_json::from_slice(saved.as_bytes()).unwrap();
        let saved = crate::rabbit::codec::table_from_typed_json(&saved).unwrap();
        assert!(saved.inner().contains_key("x-death"));
        assert_eq!(saved.inner().get(SAVED_DEATHS), Some(&first));
    }

    #[test]
    fn own_user_id_is_kept() {
        let p = BasicProperties::default().with_user_id("guest".into());
        let out = prepare(&p, &stamp(3), "p").unwrap();
        assert_eq!(out.user_id().as_ref().map(|u| u.as_str()), Some("guest"));
    }

    #[test]
    fn loop_guard_counts_replays() {
        let mut p = BasicProperties::default();
        for n in 1..=3 {
            p = prepare(&p, &stamp(3), "p").unwrap();
            assert_eq!(replay_count(p.headers().as_ref()), n);
        }
        assert_eq!(
            prepare(&p, &stamp(3), "p"),
            Err(Refusal::LoopGuard { count: 3, max: 3 })
        );
        assert!(prepare(&p, &stamp(4), "p").is_ok());
        let mut h = FieldTable::default();
        h.insert(REPLAY_COUNT.into(), long("7"));
        assert_eq!(replay_count(Some(&h)), 7);
    }
}
