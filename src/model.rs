//! One record shape for a dead letter, whether it came from a queue or a table row.
//! It is also the JSON every command prints with `-o json|ndjson` and what archives hold.

use base64::Engine as _;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum SourceKind {
    Table,
    Queue,
}

impl SourceKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            SourceKind::Table => "table",
            SourceKind::Queue => "queue",
        }
    }
}

/// A row id is usually an integer; text ids (uuid primary keys) are kept as text.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum RecordId {
    Int(i64),
    Text(String),
}

impl std::fmt::Display for RecordId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordId::Int(i) => write!(f, "{i}"),
            RecordId::Text(s) => f.write_str(s),
        }
    }
}

impl RecordId {
    /// `--id` values arrive as text: integers when they look like integers.
    pub(crate) fn parse(s: &str) -> RecordId {
        match s.parse::<i64>() {
            Ok(i) => RecordId::Int(i),
            Err(_) => RecordId::Text(s.to_string()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct DeadLetter {
    pub(crate) source: SourceKind,
    /// Table name or queue name.
    pub(crate) location: String,
    pub(crate) id: RecordId,
    pub(crate) task: Option<String>,
    pub(crate) motivo: Option<String>,
    #[serde(with = "rfc3339_opt")]
    pub(crate) created_at: Option<DateTime<Utc>>,
    pub(crate) replayed: bool,
    /// The JSON value; bytes that are not JSON as `{"base64": "..."}`.
    pub(crate) payload: Value,
    /// Queue only: the framework that recognised the message (`celery`, `dramatiq`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) framework: Option<String>,
    /// Queue only: how many times the framework retried the task before it died.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) retries: Option<u64>,
    /// Queue only: how many times dlq replayed this message before (it died again since).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) replay_count: u32,
    /// Queue only: application headers, readable form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) headers: Option<Value>,
    /// Queue only: the `x-death` history, newest first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) death: Option<Value>,
    /// Queue only: message properties, readable form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) properties: Option<Value>,
    /// Queue only: the exact message (typed headers/properties, body bytes) for a
    /// byte-identical restore from an archive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) raw: Option<Value>,
    /// The payload as stored, for `--pattern`: never serialized.
    #[serde(skip)]
    pub(crate) payload_text: Option<String>,
    /// A stored time dlq cannot read (`created_at` is then empty): reported by the selector
    /// when a time bound cannot select the record. Never serialized.
    #[serde(skip)]
    pub(crate) unreadable_time: Option<String>,
    /// Queue only: the queue the message goes back to, as `death.origin_queue` says; kept
    /// apart so that a scan or a replay need not build `death`. Never serialized.
    #[serde(skip)]
    pub(crate) origin: Option<String>,
}

/// The header dlq counts its replays of a message in (the replay loop guard).
pub(crate) const REPLAY_COUNT: &str = "dlq-replay-count";

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl DeadLetter {
    /// A record with nothing but where it is and its id: tests set the rest.
    #[cfg(test)]
    pub(crate) fn blank(source: SourceKind, location: &str, id: RecordId) -> DeadLetter {
        DeadLetter {
            source,
            location: location.into(),
            id,
            task: None,
            motivo: None,
            created_at: None,
            replayed: false,
            payload: Value::Null,
            framework: None,
            retries: None,
            replay_count: 0,
            headers: None,
            death: None,
            properties: None,
            raw: None,
            payload_text: None,
            unreadable_time: None,
            origin: None,
        }
    }

    /// The queue a queue message goes back to (none for a table row). A record read back
    /// from an archive has it in its `death` JSON only.
    pub(crate) fn origin_queue(&self) -> Option<&str> {
        match self.source {
            SourceKind::Table => None,
            SourceKind::Queue => self.origin.as_deref().or_else(|| {
                self.death
                    .as_ref()
                    .and_then(|d| d.get("origin_queue"))
                    .and_then(Value::as_str)
            }),
        }
    }

    /// Whether `--pattern` finds `re` in the payload. It must see the text `inspect` and
    /// `-o json` show, identically on every source: Python's `json.dumps`, kombu and Django
    /// on MariaDB/SQLite store `ação` as `a\u00e7\u00e3o`, PostgreSQL's jsonb does not. So
    /// the stored text is searched (its spacing is what users write patterns against) and,
    /// when it holds escapes, also the decoded JSON.
    pub(crate) fn payload_matches(&self, re: &regex::Regex) -> bool {
        match &self.payload_text {
            Some(t) if re.is_match(t) => true,
            Some(t) if !t.contains('\\') => false,
            // A scan may not have parsed the payload (`Parts`): decode the text here.
            Some(t) if self.payload.is_null() => {
                serde_json::from_str::<Value>(t).is_ok_and(|v| re.is_match(&v.to_string()))
            }
            _ => re.is_match(&self.payload.to_string()),
        }
    }
}

/// The exact bytes that will be sent, for a dry run's preview: JSON as it is written (no
/// re-serialisation: `1e400` stays `1e400`, duplicate keys stay), anything else decoded as
/// `payload_from_bytes` shows it.
pub(crate) fn exact_json(bytes: &[u8]) -> Box<serde_json::value::RawValue> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|t| serde_json::value::RawValue::from_string(t.trim().to_string()).ok())
        .unwrap_or_else(|| {
            serde_json::value::to_raw_value(&payload_from_bytes(bytes)).expect("JSON serializes")
        })
}

/// Decodes stored bytes into the payload value: JSON when they parse as JSON,
/// otherwise `{"base64": ...}` so that nothing is lost or mangled.
pub(crate) fn payload_from_bytes(bytes: &[u8]) -> Value {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(v) => v,
        Err(_) => serde_json::json!({
            "base64": base64::engine::general_purpose::STANDARD.encode(bytes)
        }),
    }
}

/// Bytes as text, invalid UTF-8 replaced: `String::from_utf8_lossy` checks valid text a
/// byte at a time, and every scanned message goes through here for its body and headers.
pub(crate) fn text_lossy(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(s) => std::borrow::Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

pub(crate) fn rfc3339(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

mod rfc3339_opt {
    use chrono::{DateTime, Utc};
    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(
        v: &Option<DateTime<Utc>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match v {
            Some(t) => s.serialize_str(&super::rfc3339(t)),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<DateTime<Utc>>, D::Error> {
        let s: Option<String> = Option::deserialize(d)?;
        s.map(|s| {
            DateTime::parse_from_rfc3339(&s)
                .map(|t| t.with_timezone(&Utc))
                .map_err(serde::de::Error::custom)
        })
        .transpose()
    }
}

/// Where replayed messages go.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// A queue, through the default exchange: reaches exactly that queue.
    Queue(String),
    /// An exchange and routing key.
    Exchange {
        exchange: String,
        routing_key: String,
    },
}

impl Target {
    pub(crate) fn route(&self) -> (String, String) {
        match self {
            Target::Queue(q) => (String::new(), q.clone()),
            Target::Exchange {
                exchange,
                routing_key,
            } => (exchange.clone(), routing_key.clone()),
        }
    }

    pub(crate) fn describe(&self) -> String {
        match self {
            Target::Queue(q) => format!("to queue {q:?} (default exchange)"),
            Target::Exchange {
                exchange,
                routing_key,
            } => {
                format!("to exchange {exchange:?} with routing key {routing_key:?}")
            }
        }
    }
}

/// This machine's name, for the Celery `origin` header and archive headers.
pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_json_bytes_become_base64() {
        assert_eq!(
            payload_from_bytes(b"\xff\x00abc"),
            serde_json::json!({"base64": "/wBhYmM="})
        );
        assert_eq!(payload_from_bytes(b"[1,2]"), serde_json::json!([1, 2]));
    }

    #[test]
    fn record_json_shape() {
        let r = DeadLetter {
            task: Some("t".into()),
            motivo: Some("IntegrityError".into()),
            created_at: Some("2026-01-02T03:04:05Z".parse().unwrap()),
            payload: serde_json::json!({"a": 1}),
            ..DeadLetter::blank(SourceKind::Table, "tasks_falhadas", RecordId::Int(7))
        };
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(
            v.to_string(),
            r#"{"source":"table","location":"tasks_falhadas","id":7,"task":"t","motivo":"IntegrityError","created_at":"2026-01-02T03:04:05Z","replayed":false,"payload":{"a":1}}"#
        );
        let back: DeadLetter = serde_json::from_value(v).unwrap();
        assert_eq!(back, r);
    }
}

/// What a destination check found, for the plan: no printing here.
#[derive(Debug, Default)]
pub(crate) struct TargetFacts {
    pub(crate) note: Option<String>,
    pub(crate) warnings: Vec<String>,
}

/// The JSON type of a value, for messages naming what was found instead.
pub(crate) fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}
