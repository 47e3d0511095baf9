//! kombu's Redis wire, pure: the JSON envelope every list element and PUBLISH carries
//! (`Channel.prepare_message` and `_inplace_augment_message` in `kombu/transport/virtual/base.py`),
//! and the key names `kombu/transport/redis.py` uses: queue lists per priority step
//! (`_q_for_pri`), binding sets (`keyprefix_queue`, `_queue_bind`) and fanout channels
//! (`keyprefix_fanout`, `_get_publish_topic`). Every key and channel carries the app's
//! `global_keyprefix` first, as kombu's prefixed client adds it to LPUSH, LLEN, SADD, SREM,
//! SMEMBERS, DEL, BRPOP and PUBLISH.

use crate::celery::TaskMessage;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};

/// kombu's `sep`: between a queue and its priority step, and the parts of a binding.
pub(crate) const SEP: &str = "\x06\x16";
/// kombu's `PRIORITY_STEPS`; the plain list (step 0) is read first: 0 is the highest priority.
pub(crate) const PRIORITY_STEPS: [u8; 4] = [0, 3, 6, 9];
/// kombu's `max_priority`: priorities are clamped to 0..=9 before picking a step.
const MAX_PRIORITY: u8 = 9;

/// The list holding `queue`'s messages of `priority`: `queue` for step 0, else
/// `queue<SEP><step>`, the step being the largest one not above the priority (kombu's
/// `priority()`: `steps[bisect(steps, n) - 1]`).
pub(crate) fn queue_key(prefix: &str, queue: &str, priority: u8) -> String {
    let p = priority.min(MAX_PRIORITY);
    let step = PRIORITY_STEPS
        .iter()
        .rev()
        .find(|s| **s <= p)
        .copied()
        .unwrap_or(0);
    match step {
        0 => format!("{prefix}{queue}"),
        s => format!("{prefix}{queue}{SEP}{s}"),
    }
}

/// Every list of `queue`, one per priority step (LLEN them to size it, DEL them to drop it).
pub(crate) fn queue_keys(prefix: &str, queue: &str) -> Vec<String> {
    PRIORITY_STEPS
        .iter()
        .map(|p| queue_key(prefix, queue, *p))
        .collect()
}

/// The set of `exchange`'s bindings: `_kombu.binding.<exchange>`.
pub(crate) fn binding_key(prefix: &str, exchange: &str) -> String {
    format!("{prefix}_kombu.binding.{exchange}")
}

/// One binding as `_queue_bind` stores it: `<routing_key><SEP><pattern><SEP><queue>`.
pub(crate) fn binding_member(routing_key: &str, pattern: &str, queue: &str) -> String {
    format!("{routing_key}{SEP}{pattern}{SEP}{queue}")
}

/// The queue a binding member names (its third part).
pub(crate) fn binding_queue(member: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(member).ok()?;
    let mut parts = text.split(SEP);
    let (_, _, queue) = (parts.next()?, parts.next()?, parts.next()?);
    parts.next().is_none().then(|| queue.to_owned())
}

/// The channel a fanout exchange publishes on (`fanout_prefix` and `fanout_patterns` on, the
/// default): `/<db>.<exchange>`, with no routing key (kombu appends `/<key>` only for one).
pub(crate) fn fanout_channel(prefix: &str, db: i64, exchange: &str) -> String {
    format!("{prefix}/{db}.{exchange}")
}

/// A task message as kombu's Redis transport stores it for a publish through the default
/// exchange to `queue`. Returns the element and the priority that picks its list.
pub(crate) fn task(msg: &TaskMessage, queue: &str) -> (u8, Vec<u8>) {
    let props = &msg.properties;
    let priority = props.priority().unwrap_or(0);
    let text = |v: &Option<lapin::types::ShortString>| v.as_ref().map(|s| s.to_string());
    let content_type = text(props.content_type()).unwrap_or("application/json".into());
    let content_encoding = text(props.content_encoding()).unwrap_or("utf-8".into());
    let correlation_id = text(props.correlation_id()).unwrap_or_else(|| msg.task_id.clone());
    let envelope = json!({
        "body": B64.encode(&msg.body),
        "content-encoding": content_encoding,
        "content-type": content_type,
        "headers": crate::rabbit::codec::table_to_json(&msg.headers),
        "properties": {
            "correlation_id": correlation_id,
            "reply_to": text(props.reply_to()).unwrap_or_default(),
            "delivery_mode": props.delivery_mode().unwrap_or(2),
            "delivery_info": {"exchange": "", "routing_key": queue},
            "priority": priority,
            "body_encoding": "base64",
            "delivery_tag": uuid::Uuid::new_v4().to_string(),
        },
    });
    (priority, envelope.to_string().into_bytes())
}

/// A remote-control request as Celery's Mailbox publishes it to the fanout `exchange`: a JSON
/// message with the `clock` and `expires` headers (the delivery mode is Celery's own, 2).
pub(crate) fn request(body: &Value, exchange: &str, expires: f64) -> Vec<u8> {
    json!({
        "body": B64.encode(body.to_string()),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {"clock": 1, "expires": expires},
        "properties": {
            "delivery_mode": 2,
            "delivery_info": {"exchange": exchange, "routing_key": ""},
            "priority": 0,
            "body_encoding": "base64",
            "delivery_tag": uuid::Uuid::new_v4().to_string(),
        },
    })
    .to_string()
    .into_bytes()
}

/// A list element read back: its headers and decoded body.
#[derive(Debug, PartialEq)]
pub(crate) struct Received {
    pub(crate) headers: Value,
    pub(crate) body: Vec<u8>,
}

/// Opens an envelope (base64 body, or the body as text when `body_encoding` is absent).
pub(crate) fn open(raw: &[u8]) -> Option<Received> {
    let v: Value = serde_json::from_slice(raw).ok()?;
    let body = v.get("body")?.as_str()?;
    let encoding = v
        .pointer("/properties/body_encoding")
        .and_then(Value::as_str);
    let body = match encoding {
        Some("base64") => B64.decode(body).ok()?,
        _ => body.as_bytes().to_vec(),
    };
    Some(Received {
        headers: v.get("headers").cloned().unwrap_or(Value::Null),
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::celery::{ReplayOrigin, build};

    #[test]
    fn priorities_pick_kombu_steps() {
        // kombu: steps[bisect([0, 3, 6, 9], n) - 1], after clamping to 0..=9.
        let expect = [
            "q",
            "q",
            "q",
            "q\x06\x163",
            "q\x06\x163",
            "q\x06\x163",
            "q\x06\x166",
            "q\x06\x166",
            "q\x06\x166",
            "q\x06\x169",
        ];
        for (p, key) in expect.iter().enumerate() {
            assert_eq!(queue_key("", "q", p as u8), *key, "priority {p}");
        }
        assert_eq!(queue_key("pre:", "q", 200), "pre:q\x06\x169");
        assert_eq!(
            queue_keys("x.", "celery"),
            [
                "x.celery",
                "x.celery\x06\x163",
                "x.celery\x06\x166",
                "x.celery\x06\x169"
            ]
        );
    }

    #[test]
    fn binding_and_channel_names() {
        assert_eq!(binding_key("p", "celery"), "p_kombu.binding.celery");
        let m = binding_member("celery", "", "celery");
        assert_eq!(m, "celery\x06\x16\x06\x16celery");
        assert_eq!(binding_queue(m.as_bytes()).as_deref(), Some("celery"));
        assert_eq!(binding_queue(b"a\x06\x16b"), None);
        assert_eq!(fanout_channel("", 0, "celery.pidbox"), "/0.celery.pidbox");
        assert_eq!(
            fanout_channel("k:", 3, "celery.pidbox"),
            "k:/3.celery.pidbox"
        );
    }

    #[test]
    fn a_task_envelope_is_kombus() {
        let origin = ReplayOrigin {
            table: "tasks_falhadas".into(),
            row_id: "7".into(),
            replay_id: "r".into(),
            host: "h".into(),
        };
        let msg = build("tasks.x", Some(r#"{"a": 1}"#), &origin).unwrap();
        let (priority, raw) = task(&msg, "celery");
        assert_eq!(priority, 0);
        let v: Value = serde_json::from_slice(&raw).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "body",
                "content-encoding",
                "content-type",
                "headers",
                "properties"
            ]
        );
        assert_eq!(v["content-type"], "application/json");
        assert_eq!(v["content-encoding"], "utf-8");
        let p = &v["properties"];
        assert_eq!(p["correlation_id"], msg.task_id.as_str());
        assert_eq!(p["reply_to"], "");
        assert_eq!(p["delivery_mode"], 2);
        assert_eq!(
            p["delivery_info"],
            json!({"exchange": "", "routing_key": "celery"})
        );
        assert_eq!(p["priority"], 0);
        assert_eq!(p["body_encoding"], "base64");
        assert_eq!(p["delivery_tag"].as_str().unwrap().len(), 36);
        let h = &v["headers"];
        assert_eq!(h["task"], "tasks.x");
        assert_eq!(h["id"], msg.task_id.as_str());
        assert_eq!(h["parent_id"], Value::Null);
        assert_eq!(h["timelimit"], json!([null, null]));
        assert_eq!(h["retries"], 0);
        assert_eq!(h["dlq-replay-of"], "table:tasks_falhadas:7");
        let back = open(&raw).unwrap();
        assert_eq!(back.body, msg.body);
        assert_eq!(&back.headers, h);
    }

    #[test]
    fn a_request_opens_back() {
        let raw = request(&json!({"method": "ping"}), "celery.pidbox", 1.5);
        let v: Value = serde_json::from_slice(&raw).unwrap();
        assert_eq!(
            v["properties"]["delivery_info"]["exchange"],
            "celery.pidbox"
        );
        let back = open(&raw).unwrap();
        assert_eq!(back.body, br#"{"method":"ping"}"#);
        assert_eq!(back.headers, json!({"clock": 1, "expires": 1.5}));
        assert_eq!(open(b"{}"), None);
        assert_eq!(open(b"nope"), None);
    }
}
