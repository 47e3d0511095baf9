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

/// kombu's default `sep` transport option: between a queue and its priority step, and the
/// parts of a binding. Celery's own Redis priority recipe sets `':'`.
pub(crate) const DEFAULT_SEP: &str = "\x06\x16";
/// kombu's `PRIORITY_STEPS`; the plain list (step 0) is read first: 0 is the highest priority.
pub(crate) const PRIORITY_STEPS: [u8; 4] = [0, 3, 6, 9];
/// kombu's `max_priority`: priorities are clamped to 0..=9 before picking a step.
const MAX_PRIORITY: u8 = 9;

/// The transport options that change kombu's key names: `global_keyprefix` and `sep`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Keys {
    pub(crate) prefix: String,
    pub(crate) sep: String,
}

impl Keys {
    /// The list holding `queue`'s messages of `priority`: `queue` for step 0, else
    /// `queue<sep><step>`, the step being the largest one not above the priority (kombu's
    /// `priority()`: `steps[bisect(steps, n) - 1]`).
    pub(crate) fn queue(&self, queue: &str, priority: u8) -> String {
        let p = priority.min(MAX_PRIORITY);
        let step = PRIORITY_STEPS
            .iter()
            .rev()
            .find(|s| **s <= p)
            .copied()
            .unwrap_or(0);
        let prefix = &self.prefix;
        match step {
            0 => format!("{prefix}{queue}"),
            s => format!("{prefix}{queue}{}{s}", self.sep),
        }
    }

    /// Every list of `queue`, one per priority step (LLEN them to size it, DEL them to drop it).
    pub(crate) fn queues(&self, queue: &str) -> Vec<String> {
        PRIORITY_STEPS
            .iter()
            .map(|p| self.queue(queue, *p))
            .collect()
    }

    /// The set of `exchange`'s bindings: `_kombu.binding.<exchange>`.
    pub(crate) fn binding(&self, exchange: &str) -> String {
        format!("{}_kombu.binding.{exchange}", self.prefix)
    }

    /// One binding as `_queue_bind` stores it: `<routing_key><sep><pattern><sep><queue>`.
    pub(crate) fn binding_member(&self, routing_key: &str, pattern: &str, queue: &str) -> String {
        let sep = &self.sep;
        format!("{routing_key}{sep}{pattern}{sep}{queue}")
    }

    /// The queue a binding member names (its third part).
    pub(crate) fn binding_queue(&self, member: &[u8]) -> Option<String> {
        let text = std::str::from_utf8(member).ok()?;
        let mut parts = text.split(self.sep.as_str());
        let (_, _, queue) = (parts.next()?, parts.next()?, parts.next()?);
        parts.next().is_none().then(|| queue.to_owned())
    }

    /// The channel a fanout exchange publishes on (`fanout_prefix` and `fanout_patterns` on,
    /// the default): `/<db>.<exchange>`, with no routing key (kombu appends `/<key>` only for one).
    pub(crate) fn fanout_channel(&self, db: i64, exchange: &str) -> String {
        format!("{}/{db}.{exchange}", self.prefix)
    }
}

/// The `sep` in a worker's binding to its remote-control fanout (`<control>.pidbox`): no routing
/// key and no pattern, so `<sep><sep><hostname>.<control>.pidbox`. `None` for another shape.
pub(crate) fn detect_fanout_sep(member: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(member).ok()?;
    if text.starts_with(DEFAULT_SEP) {
        return Some(DEFAULT_SEP.into());
    }
    (1..=4).find_map(|k| {
        let (a, b, rest) = (text.get(..k)?, text.get(k..2 * k)?, text.get(2 * k..)?);
        let name_first = rest.chars().next().is_some_and(|c| c.is_alphanumeric());
        (a == b && name_first && rest.ends_with(".pidbox")).then(|| a.to_owned())
    })
}

/// The `sep` a worker used, read from one of its bindings to Celery's default exchange (or to
/// the exchange Celery makes for a `-Q` queue): kombu binds a queue there with its own name as
/// routing key and no pattern, `<q><sep><sep><q>`. `None` when the member has another shape.
pub(crate) fn detect_sep(member: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(member).ok()?;
    if text.contains(DEFAULT_SEP) {
        return Some(DEFAULT_SEP.into());
    }
    let n = text.len();
    (1..=4).find_map(|k| {
        let rest = n.checked_sub(2 * k).filter(|r| *r > 0 && r % 2 == 0)?;
        let q = rest / 2;
        let (head, sep1, sep2, tail) = (
            text.get(..q)?,
            text.get(q..q + k)?,
            text.get(q + k..q + 2 * k)?,
            text.get(q + 2 * k..)?,
        );
        (head == tail && sep1 == sep2).then(|| sep1.to_owned())
    })
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
        "headers": msg.headers_json(),
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

    fn keys(prefix: &str) -> Keys {
        Keys {
            prefix: prefix.into(),
            sep: DEFAULT_SEP.into(),
        }
    }

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
            assert_eq!(keys("").queue("q", p as u8), *key, "priority {p}");
        }
        assert_eq!(keys("pre:").queue("q", 200), "pre:q\x06\x169");
        assert_eq!(
            keys("x.").queues("celery"),
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
        assert_eq!(keys("p").binding("celery"), "p_kombu.binding.celery");
        let m = keys("").binding_member("celery", "", "celery");
        assert_eq!(m, "celery\x06\x16\x06\x16celery");
        assert_eq!(
            keys("").binding_queue(m.as_bytes()).as_deref(),
            Some("celery")
        );
        assert_eq!(keys("").binding_queue(b"a\x06\x16b"), None);
        assert_eq!(
            keys("").fanout_channel(0, "celery.pidbox"),
            "/0.celery.pidbox"
        );
        assert_eq!(
            keys("k:").fanout_channel(3, "celery.pidbox"),
            "k:/3.celery.pidbox"
        );
        // Celery's Redis priority recipe: `sep` ':'.
        let colon = Keys {
            prefix: String::new(),
            sep: ":".into(),
        };
        assert_eq!(colon.binding_member("oid", "", "r"), "oid::r");
        assert_eq!(
            colon.binding_queue(b"celery::celery").as_deref(),
            Some("celery")
        );
        assert_eq!(colon.queue("celery", 5), "celery:3");
        assert_eq!(detect_sep(b"celery::celery").as_deref(), Some(":"));
        assert_eq!(
            detect_sep(b"celery\x06\x16\x06\x16celery").as_deref(),
            Some(DEFAULT_SEP)
        );
        assert_eq!(detect_sep(b"a||a").as_deref(), Some("|"));
        assert_eq!(detect_sep(b"hosts::other"), None);
        assert_eq!(
            detect_fanout_sep(b"::celery@h.loja.pidbox").as_deref(),
            Some(":")
        );
        assert_eq!(
            detect_fanout_sep(b"\x06\x16\x06\x16celery@h.celery.pidbox").as_deref(),
            Some(DEFAULT_SEP)
        );
        assert_eq!(detect_fanout_sep(b"::celery@h"), None);
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
