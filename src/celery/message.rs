//! Celery protocol v2 task messages rebuilt from a failed-task table row.
//!
//! Pure: no I/O. The caller supplies the hostname and publishes the result (default exchange,
//! routing key = the worker's queue, `mandatory`, publisher confirms).
//!
//! Everything a stock worker would choke on is refused here, because a malformed task message is
//! worse than a refused replay: some shapes crash the worker's receive path (and the requeued
//! message then kills the next worker too), others are acked and silently lost. A refused row
//! simply stays un-replayed.

use crate::model::json_kind;
use chrono::{DateTime, NaiveDate, SecondsFormat, Utc};
use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldArray, FieldTable, LongString, ShortString};
use serde_json::{Map, Value};
use uuid::Uuid;

/// Longest task name accepted, in bytes. Celery sets no limit; a longer name is a data error.
pub(crate) const MAX_TASK_NAME_BYTES: usize = 255;

/// Largest body built, in bytes. RabbitMQ 4.x refuses messages over 16 MiB by default (3.x:
/// 128 MiB); 64 KiB is kept for headers and properties so the message fits every default.
pub(crate) const MAX_BODY_BYTES: usize = 16 * 1024 * 1024 - 64 * 1024;

/// Deepest nesting accepted inside args or kwargs (a scalar is 0, `[1]` is 1). Python's JSON
/// decoder recurses per level and a worker drops a body it cannot decode; 100 keeps far from any
/// recursion limit on the way (serde_json itself stops at 128).
pub(crate) const MAX_NESTING: usize = 100;

/// Most digits in a JSON integer. Python (3.11+, 3.10.7+, 3.9.14+, 3.8.14+) refuses to parse
/// longer integers by default, so the worker cannot decode the body and drops the message.
pub(crate) const MAX_INT_DIGITS: usize = 4300;

/// Longest `argsrepr`/`kwargsrepr`, in characters: Celery's `argsrepr_maxsize` default.
pub(crate) const MAX_REPR_CHARS: usize = 1024;

/// The `__type__` names a stock worker's kombu decodes. Any other name in an object whose keys are
/// exactly `__type__` and `__value__` makes kombu raise "Unsupported type": the message is lost.
pub(crate) const KOMBU_MARKER_TYPES: [&str; 7] = [
    "bytes", "base64", "datetime", "date", "time", "decimal", "uuid",
];

/// The embed element every replay carries: no callbacks, errbacks, chain or chord.
const EMBED: &str = r#"{"callbacks":null,"errbacks":null,"chain":null,"chord":null}"#;

/// A Celery protocol v2 task message, ready to publish.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TaskMessage {
    /// Fresh uuid4 of this replay: headers `id` and `root_id`, `correlation_id`, `message_id`.
    pub(crate) task_id: String,
    /// Registered task name, header `task`.
    pub(crate) task: String,
    /// UTF-8 JSON body `[args, kwargs, embed]`.
    pub(crate) body: Vec<u8>,
    /// Task headers. `properties.headers` holds the same table: publish `properties` as is.
    pub(crate) headers: FieldTable,
    /// AMQP properties, headers included.
    pub(crate) properties: BasicProperties,
}

/// Where a replayed task comes from; written into the provenance headers so that tasks and
/// consumers can deduplicate replays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReplayOrigin {
    /// Failed-task table the row was read from (a setting: `tasks_falhadas`, `<app>_taskfalhada`).
    pub(crate) table: String,
    /// Primary key of the row, as text.
    pub(crate) row_id: String,
    /// uuid of this dlq run; every message of one run carries the same value.
    pub(crate) replay_id: String,
    /// Host dlq runs on, for the `origin` header (`dlq@<host>`). Supplied by the caller: this
    /// module does no I/O.
    pub(crate) host: String,
}

/// Why a row cannot be (or a message must not be) sent to a Celery worker.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum InvalidTask {
    #[error("task name is empty")]
    EmptyTaskName,
    #[error("task name is {len} bytes long, at most {max} accepted", max = MAX_TASK_NAME_BYTES)]
    TaskNameTooLong { len: usize },
    #[error("task name has a control character at byte {at}")]
    TaskNameControlChar { at: usize },
    #[error(
        "task name has leading or trailing whitespace (the worker would reject it as unregistered)"
    )]
    TaskNameWhitespace,
    #[error("replay origin field `{field}` is empty")]
    EmptyOrigin { field: &'static str },
    #[error("args is not valid JSON: {reason}")]
    ArgsUnparsable { reason: String },
    #[error("args is a JSON {kind}, expected an object, an array or null")]
    ArgsScalar { kind: &'static str },
    #[error(
        "{at} is an object with exactly the keys __type__ and __value__: kombu decodes it to a \
         single value, so it cannot be keyword arguments"
    )]
    KwargsIsKombuMarker { at: String },
    #[error(
        "{at}: kombu type marker the worker cannot decode (it would drop the message): {reason}"
    )]
    BadKombuMarker { at: String, reason: String },
    #[error(
        "{at}: integer has {digits} digits; Python parses at most {max} by default, the worker \
         would drop the message",
        max = MAX_INT_DIGITS
    )]
    IntegerTooLong { at: String, digits: usize },
    #[error("{at} nests deeper than {max} levels", max = MAX_NESTING)]
    TooDeep { at: String },
    #[error("body would be {size} bytes, at most {max} accepted", max = MAX_BODY_BYTES)]
    BodyTooLarge { size: usize },
    #[error("body is not UTF-8")]
    BodyNotUtf8,
    #[error("body is not valid JSON: {reason}")]
    BodyNotJson { reason: String },
    #[error("body is a JSON {kind}, expected an array [args, kwargs, embed]")]
    BodyNotArray { kind: &'static str },
    #[error("body has {len} elements, expected exactly 3 [args, kwargs, embed]")]
    BodyLength { len: usize },
    #[error("body args (element 0) is a JSON {kind}, expected an array")]
    BodyArgsNotArray { kind: &'static str },
    #[error("body kwargs (element 1) is a JSON {kind}, expected an object")]
    BodyKwargsNotObject { kind: &'static str },
    #[error("body embed (element 2) is a JSON {kind}, expected an object")]
    BodyEmbedNotObject { kind: &'static str },
    #[error("embed `{field}` is a JSON {kind}, expected null or {expected}")]
    EmbedField {
        field: &'static str,
        kind: &'static str,
        expected: &'static str,
    },
    #[error("properties carry no headers")]
    NoHeaders,
    #[error("properties.headers differ from the message's headers")]
    HeadersMismatch,
    #[error("header `{name}` is missing")]
    MissingHeader { name: &'static str },
    #[error("header `{name}` is empty")]
    EmptyHeader { name: &'static str },
    #[error("header `{name}` is a {found}, expected {expected}")]
    HeaderType {
        name: String,
        found: &'static str,
        expected: &'static str,
    },
    #[error("header `{name}` is a short string; AMQP field-table strings must be long strings")]
    ShortStringHeader { name: String },
    #[error("header `{name}` is not UTF-8")]
    HeaderNotUtf8 { name: String },
    #[error("header `{name}` is {found:?}, but the message says {expected:?}")]
    HeaderMismatch {
        name: &'static str,
        found: String,
        expected: String,
    },
    #[error("header `timelimit` has {len} elements, expected exactly 2 [hard, soft]")]
    TimelimitLength { len: usize },
    #[error("header `{name}` is set; a replay must not carry eta or expires")]
    Scheduled { name: &'static str },
    #[error("content_type is {found:?}, expected \"application/json\"")]
    ContentType { found: Option<String> },
    #[error("content_encoding is {found:?}, expected \"utf-8\"")]
    ContentEncoding { found: Option<String> },
    #[error("expiration is set ({found:?}); a replay must not expire")]
    ExpirationSet { found: String },
}

/// Builds the task message replaying one failed-task row.
///
/// `args_text` is the stored `args` column text (JSON). `None` (SQL NULL) means no arguments.
/// A JSON object becomes kwargs (args `[]`), an array becomes args (kwargs `{}`), `null` means
/// both empty; anything else is refused. The stored text is copied into the body byte for byte,
/// so numbers, escapes, key order and kombu markers reach the worker exactly as stored. (The
/// worker's Python json still reads non-integer numbers as floats: `12345678901234567890.1`
/// runs as `1.2345678901234567e+19`, `1e400` as `inf`; integers and `decimal` markers stay exact.)
pub(crate) fn build(
    task_name: &str,
    args_text: Option<&str>,
    origin: &ReplayOrigin,
) -> Result<TaskMessage, InvalidTask> {
    build_with(task_name, args_text, origin, Uuid::new_v4(), Utc::now())
}

/// [`build`] with the task id and the clock supplied, for tests.
fn build_with(
    task_name: &str,
    args_text: Option<&str>,
    origin: &ReplayOrigin,
    task_id: Uuid,
    now: DateTime<Utc>,
) -> Result<TaskMessage, InvalidTask> {
    check_task_name(task_name)?;
    for (field, value) in [
        ("table", &origin.table),
        ("row_id", &origin.row_id),
        ("replay_id", &origin.replay_id),
        ("host", &origin.host),
    ] {
        if value.is_empty() {
            return Err(InvalidTask::EmptyOrigin { field });
        }
    }

    let empty_args = Value::Array(Vec::new());
    let empty_kwargs = Value::Object(Map::new());
    let (args, kwargs, body) = match args_text {
        None => (empty_args, empty_kwargs, format!("[[],{{}},{EMBED}]")),
        Some(text) => {
            // Cheap early refusal before parsing a huge column.
            if text.len() > MAX_BODY_BYTES {
                return Err(InvalidTask::BodyTooLarge { size: text.len() });
            }
            let value: Value =
                serde_json::from_str(text).map_err(|e| InvalidTask::ArgsUnparsable {
                    reason: e.to_string(),
                })?;
            // Splice the stored text itself: serde_json accepted it as one JSON value, and
            // anything around it is JSON whitespace.
            let raw = text.trim();
            match value {
                Value::Null => (empty_args, empty_kwargs, format!("[[],{{}},{EMBED}]")),
                Value::Array(_) => (value, empty_kwargs, format!("[{raw},{{}},{EMBED}]")),
                Value::Object(ref map) => {
                    // kombu would decode it to one value; a real worker then raises
                    // InvalidTaskError outside the task body: a log warning, message acked, lost.
                    if is_kombu_marker(map) {
                        return Err(InvalidTask::KwargsIsKombuMarker { at: "args".into() });
                    }
                    (empty_args, value, format!("[[],{raw},{EMBED}]"))
                }
                other => {
                    return Err(InvalidTask::ArgsScalar {
                        kind: json_kind(&other),
                    });
                }
            }
        }
    };

    let id = task_id.hyphenated().to_string();
    let mut headers = FieldTable::default();
    let mut put = |k: &str, v: AMQPValue| {
        headers.insert(ShortString::from(k), v);
    };
    put("lang", long("py"));
    put("task", long(task_name));
    put("id", long(&id));
    put("root_id", long(&id));
    put("parent_id", AMQPValue::Void);
    put("group", AMQPValue::Void);
    put("retries", AMQPValue::LongLongInt(0));
    // [hard, soft]; exactly two elements or the worker's receive path crashes.
    put(
        "timelimit",
        AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::Void, AMQPValue::Void])),
    );
    // Never copied from the failed run: a past `expires` makes the worker discard the task.
    put("eta", AMQPValue::Void);
    put("expires", AMQPValue::Void);
    put("argsrepr", long(args_repr(&args)));
    put("kwargsrepr", long(py_repr_bounded(&kwargs)));
    put("origin", long(format!("dlq@{}", origin.host)));
    put("ignore_result", AMQPValue::Boolean(false));
    // Provenance, not `x-` prefixed: RabbitMQ owns that namespace.
    put(
        "dlq-replay-of",
        long(format!("table:{}:{}", origin.table, origin.row_id)),
    );
    put("dlq-replay-id", long(&origin.replay_id));
    put(
        "dlq-replayed-at",
        long(now.to_rfc3339_opts(SecondsFormat::Micros, true)),
    );

    let properties = BasicProperties::default()
        .with_content_type(ShortString::from("application/json"))
        .with_content_encoding(ShortString::from("utf-8"))
        .with_delivery_mode(2)
        .with_priority(0)
        .with_correlation_id(ShortString::from(id.as_str()))
        .with_message_id(ShortString::from(id.as_str()))
        .with_headers(headers.clone());

    let msg = TaskMessage {
        task_id: id,
        task: task_name.to_owned(),
        body: body.into_bytes(),
        headers,
        properties,
    };
    validate(&msg)?;
    Ok(msg)
}

/// Re-checks a finished message the way a stock worker's receive path would read it, plus dlq's
/// own rules for replays (no eta, expires or expiration).
///
/// Checks: JSON content type and UTF-8 encoding; body a JSON array of exactly
/// `[args array, kwargs object, embed object]` within [`MAX_BODY_BYTES`]; args/kwargs free of
/// anything Python's decoder or kombu would reject (see [`MAX_INT_DIGITS`], [`MAX_NESTING`],
/// [`KOMBU_MARKER_TYPES`]); `task` and `id` headers present as long strings matching the message;
/// every header string a UTF-8 long string (never a short string); `timelimit` exactly 2 elements.
pub(crate) fn validate(msg: &TaskMessage) -> Result<(), InvalidTask> {
    let props = &msg.properties;
    let content_type = props.content_type().as_ref().map(|s| s.as_str());
    if content_type != Some("application/json") {
        return Err(InvalidTask::ContentType {
            found: content_type.map(str::to_owned),
        });
    }
    let encoding = props.content_encoding().as_ref().map(|s| s.as_str());
    if encoding != Some("utf-8") {
        return Err(InvalidTask::ContentEncoding {
            found: encoding.map(str::to_owned),
        });
    }
    if let Some(exp) = props.expiration() {
        return Err(InvalidTask::ExpirationSet {
            found: exp.as_str().to_owned(),
        });
    }
    let headers = props.headers().as_ref().ok_or(InvalidTask::NoHeaders)?;
    if *headers != msg.headers {
        return Err(InvalidTask::HeadersMismatch);
    }
    validate_headers(msg, headers)?;
    validate_body(&msg.body)
}

fn validate_headers(msg: &TaskMessage, headers: &FieldTable) -> Result<(), InvalidTask> {
    for (key, value) in headers {
        check_header_strings(key.as_str(), value)?;
    }
    let get = |name: &'static str| headers.inner().get(name);
    let required_str = |name: &'static str| -> Result<&str, InvalidTask> {
        match get(name) {
            None => Err(InvalidTask::MissingHeader { name }),
            Some(v) => header_str(name, v),
        }
    };

    let task = required_str("task")?;
    check_task_name(task)?;
    if task != msg.task {
        return Err(InvalidTask::HeaderMismatch {
            name: "task",
            found: task.to_owned(),
            expected: msg.task.clone(),
        });
    }
    let id = required_str("id")?;
    if id.is_empty() {
        return Err(InvalidTask::EmptyHeader { name: "id" });
    }
    if id != msg.task_id {
        return Err(InvalidTask::HeaderMismatch {
            name: "id",
            found: id.to_owned(),
            expected: msg.task_id.clone(),
        });
    }

    // Strings the worker reads; null allowed where Celery itself sends null.
    for name in ["root_id", "parent_id", "group", "shadow"] {
        match get(name) {
            None | Some(AMQPValue::Void) => {}
            Some(v) => {
                header_str(name, v)?;
            }
        }
    }
    for name in ["lang", "argsrepr", "kwargsrepr", "origin"] {
        if let Some(v) = get(name) {
            header_str(name, v)?;
        }
    }
    match get("retries") {
        Some(v) if !is_amqp_int(v) => return Err(header_type("retries", v, "an integer")),
        _ => {}
    }
    match get("ignore_result") {
        Some(v) if !matches!(v, AMQPValue::Boolean(_)) => {
            return Err(header_type("ignore_result", v, "a boolean"));
        }
        _ => {}
    }
    match get("timelimit") {
        None | Some(AMQPValue::Void) => {}
        Some(AMQPValue::FieldArray(items)) => {
            let items = items.as_slice();
            if items.len() != 2 {
                return Err(InvalidTask::TimelimitLength { len: items.len() });
            }
            for (i, item) in items.iter().enumerate() {
                let numeric =
                    is_amqp_int(item) || matches!(item, AMQPValue::Float(_) | AMQPValue::Double(_));
                if !(numeric || matches!(item, AMQPValue::Void)) {
                    return Err(header_type(
                        &format!("timelimit[{i}]"),
                        item,
                        "null or a number",
                    ));
                }
            }
        }
        Some(v) => return Err(header_type("timelimit", v, "an array of 2")),
    }
    for name in ["eta", "expires"] {
        match get(name) {
            None | Some(AMQPValue::Void) => {}
            Some(_) => return Err(InvalidTask::Scheduled { name }),
        }
    }
    Ok(())
}

fn validate_body(body: &[u8]) -> Result<(), InvalidTask> {
    if body.len() > MAX_BODY_BYTES {
        return Err(InvalidTask::BodyTooLarge { size: body.len() });
    }
    let text = std::str::from_utf8(body).map_err(|_| InvalidTask::BodyNotUtf8)?;
    let value: Value = serde_json::from_str(text).map_err(|e| InvalidTask::BodyNotJson {
        reason: e.to_string(),
    })?;
    let parts = match &value {
        Value::Array(parts) => parts,
        other => {
            return Err(InvalidTask::BodyNotArray {
                kind: json_kind(other),
            });
        }
    };
    let [args, kwargs, embed] = parts.as_slice() else {
        return Err(InvalidTask::BodyLength { len: parts.len() });
    };
    if !args.is_array() {
        return Err(InvalidTask::BodyArgsNotArray {
            kind: json_kind(args),
        });
    }
    let Value::Object(kwargs_map) = kwargs else {
        return Err(InvalidTask::BodyKwargsNotObject {
            kind: json_kind(kwargs),
        });
    };
    if is_kombu_marker(kwargs_map) {
        return Err(InvalidTask::KwargsIsKombuMarker {
            at: "kwargs".into(),
        });
    }
    let Value::Object(embed_map) = embed else {
        return Err(InvalidTask::BodyEmbedNotObject {
            kind: json_kind(embed),
        });
    };
    for (field, expected) in [
        ("callbacks", "an array"),
        ("errbacks", "an array"),
        ("chain", "an array"),
        ("chord", "an object"),
    ] {
        let ok = match embed_map.get(field) {
            None | Some(Value::Null) => true,
            Some(Value::Array(_)) => expected == "an array",
            Some(Value::Object(_)) => expected == "an object",
            Some(_) => false,
        };
        if !ok {
            return Err(InvalidTask::EmbedField {
                field,
                kind: json_kind(&embed_map[field]),
                expected,
            });
        }
    }
    let mut path = String::from("args");
    check_decodable(args, &mut path, 0)?;
    let mut path = String::from("kwargs");
    check_decodable(kwargs, &mut path, 0)?;
    let mut path = String::from("embed");
    check_decodable(embed, &mut path, 0)
}

/// Task name rules: what a worker could have registered, and what fits a sane header.
fn check_task_name(name: &str) -> Result<(), InvalidTask> {
    if name.is_empty() {
        return Err(InvalidTask::EmptyTaskName);
    }
    if name.len() > MAX_TASK_NAME_BYTES {
        return Err(InvalidTask::TaskNameTooLong { len: name.len() });
    }
    if let Some((at, _)) = name.char_indices().find(|(_, c)| c.is_control()) {
        return Err(InvalidTask::TaskNameControlChar { at });
    }
    if name.trim() != name {
        return Err(InvalidTask::TaskNameWhitespace);
    }
    Ok(())
}

/// Walks a value the way Python's json + kombu's object_hook will decode it on the worker, and
/// refuses what would make the decode fail (the worker acks and drops such a message).
/// `path` is a JSON Pointer below `args`/`kwargs`/`embed`.
fn check_decodable(value: &Value, path: &mut String, depth: usize) -> Result<(), InvalidTask> {
    match value {
        Value::Number(n) => {
            let text = n.as_str();
            if !text.contains(['.', 'e', 'E']) {
                let digits = text.trim_start_matches('-').len();
                if digits > MAX_INT_DIGITS {
                    return Err(InvalidTask::IntegerTooLong {
                        at: path.clone(),
                        digits,
                    });
                }
            }
            Ok(())
        }
        Value::Array(items) => {
            if depth >= MAX_NESTING {
                return Err(InvalidTask::TooDeep { at: path.clone() });
            }
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push('/');
                path.push_str(&i.to_string());
                check_decodable(item, path, depth + 1)?;
                path.truncate(len);
            }
            Ok(())
        }
        Value::Object(map) => {
            if depth >= MAX_NESTING {
                return Err(InvalidTask::TooDeep { at: path.clone() });
            }
            // object_hook runs bottom-up: children are decoded first.
            for (key, item) in map {
                let len = path.len();
                path.push('/');
                path.push_str(&key.replace('~', "~0").replace('/', "~1"));
                check_decodable(item, path, depth + 1)?;
                path.truncate(len);
            }
            if is_kombu_marker(map) {
                check_kombu_marker(map).map_err(|reason| InvalidTask::BadKombuMarker {
                    at: path.clone(),
                    reason,
                })?;
            }
            Ok(())
        }
        Value::Null | Value::Bool(_) | Value::String(_) => Ok(()),
    }
}

/// kombu treats an object whose keys are exactly `__type__` and `__value__` as a typed value.
fn is_kombu_marker(map: &Map<String, Value>) -> bool {
    map.len() == 2 && map.contains_key("__type__") && map.contains_key("__value__")
}

/// Checks a marker's value against what every supported Python's decoder accepts. Deliberately
/// conservative: only the forms kombu itself writes (e.g. `datetime.isoformat()` output).
fn check_kombu_marker(map: &Map<String, Value>) -> Result<(), String> {
    let type_name = match &map["__type__"] {
        Value::String(s) => s.as_str(),
        other => return Err(format!("__type__ is a JSON {}", json_kind(other))),
    };
    let value = &map["__value__"];
    let text = || match value {
        Value::String(s) => Ok(s.as_str()),
        other => Err(format!(
            "{type_name:?} value is a JSON {}, expected a string",
            json_kind(other)
        )),
    };
    match type_name {
        "bytes" => text().map(drop),
        "base64" => {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD
                .decode(text()?)
                .map(drop)
                .map_err(|e| format!("\"base64\" value is not padded standard base64: {e}"))
        }
        "datetime" | "date" => {
            let s = text()?;
            check_iso_datetime(s)
                .map_err(|e| format!("{type_name:?} value {s:?} is not an ISO date-time: {e}"))
        }
        "time" => {
            let s = text()?;
            let mut cur = Cursor::new(s);
            check_iso_time(&mut cur)
                .and_then(|()| cur.end())
                .map_err(|e| format!("\"time\" value {s:?} is not an ISO time: {e}"))
        }
        "decimal" => match value {
            Value::Number(_) => Ok(()),
            Value::String(s) if is_decimal_literal(s) => Ok(()),
            Value::String(s) => Err(format!("\"decimal\" value {s:?} is not a decimal number")),
            other => Err(format!(
                "\"decimal\" value is a JSON {}, expected a string or a number",
                json_kind(other)
            )),
        },
        "uuid" => match value {
            Value::Object(m) if m.len() == 1 && m.contains_key("hex") => match &m["hex"] {
                Value::String(h) if is_uuid_hex(h) => Ok(()),
                Value::String(h) => Err(format!("\"uuid\" hex {h:?} is not 32 hex digits")),
                other => Err(format!("\"uuid\" hex is a JSON {}", json_kind(other))),
            },
            _ => Err("\"uuid\" value must be {\"hex\": \"...\"}, as kombu writes it".into()),
        },
        other => Err(format!(
            "unknown __type__ {other:?} (a stock worker decodes only {})",
            KOMBU_MARKER_TYPES.join(", ")
        )),
    }
}

/// A tiny byte cursor for the ISO checks.
struct Cursor<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    fn new(s: &'a str) -> Self {
        Self {
            s: s.as_bytes(),
            i: 0,
        }
    }
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
    fn eat(&mut self, b: u8) -> bool {
        let hit = self.peek() == Some(b);
        self.i += usize::from(hit);
        hit
    }
    fn expect(&mut self, b: u8) -> Result<(), String> {
        if self.eat(b) {
            Ok(())
        } else {
            Err(format!("expected {:?} at {}", b as char, self.i))
        }
    }
    /// Exactly `n` ASCII digits.
    fn digits(&mut self, n: usize) -> Result<u32, String> {
        let part = self
            .s
            .get(self.i..self.i + n)
            .filter(|p| p.iter().all(u8::is_ascii_digit))
            .ok_or_else(|| format!("expected {n} digits at {}", self.i))?;
        self.i += n;
        Ok(part.iter().fold(0, |acc, d| acc * 10 + u32::from(d - b'0')))
    }
    /// A run of ASCII digits, returning its length.
    fn digit_run(&mut self) -> usize {
        let start = self.i;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.i += 1;
        }
        self.i - start
    }
    fn end(&self) -> Result<(), String> {
        if self.i == self.s.len() {
            Ok(())
        } else {
            Err(format!("unexpected text at {}", self.i))
        }
    }
}

/// `YYYY-MM-DD[(T| )HH:MM[:SS[.fff|.ffffff]][(+|-)HH:MM[:SS[.ffffff]]]]`: what Python 3.7+'s
/// `datetime.fromisoformat` reads (3.11 reads more, older workers do not).
fn check_iso_datetime(s: &str) -> Result<(), String> {
    let mut cur = Cursor::new(s);
    let year = cur.digits(4)?;
    cur.expect(b'-')?;
    let month = cur.digits(2)?;
    cur.expect(b'-')?;
    let day = cur.digits(2)?;
    if year == 0 || NaiveDate::from_ymd_opt(year as i32, month, day).is_none() {
        return Err(format!("no such date {year:04}-{month:02}-{day:02}"));
    }
    if cur.eat(b'T') || cur.eat(b' ') {
        check_iso_time(&mut cur)?;
    }
    cur.end()
}

/// `HH:MM[:SS[.fff|.ffffff]][(+|-)HH:MM[:SS[.ffffff]]]`, ranges checked.
fn check_iso_time(cur: &mut Cursor) -> Result<(), String> {
    let h = cur.digits(2)?;
    cur.expect(b':')?;
    let m = cur.digits(2)?;
    let mut sec = 0;
    if cur.eat(b':') {
        sec = cur.digits(2)?;
        if cur.eat(b'.') {
            let n = cur.digit_run();
            if n != 3 && n != 6 {
                return Err("fraction must have 3 or 6 digits".into());
            }
        }
    }
    if h > 23 || m > 59 || sec > 59 {
        return Err(format!("time {h:02}:{m:02}:{sec:02} out of range"));
    }
    if cur.eat(b'+') || cur.eat(b'-') {
        let oh = cur.digits(2)?;
        cur.expect(b':')?;
        let om = cur.digits(2)?;
        let mut os = 0;
        if cur.eat(b':') {
            os = cur.digits(2)?;
            if cur.eat(b'.') && cur.digit_run() != 6 {
                return Err("offset fraction must have 6 digits".into());
            }
        }
        if oh > 23 || om > 59 || os > 59 {
            return Err(format!("offset {oh:02}:{om:02}:{os:02} out of range"));
        }
    }
    Ok(())
}

/// Python `Decimal(str)` syntax without whitespace or underscores: `[+-]` then digits with an
/// optional point and exponent, or `Inf`, `Infinity`, `NaN`, `sNaN` (any case, NaN payload digits).
fn is_decimal_literal(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let lower = s.to_ascii_lowercase();
    if lower == "inf" || lower == "infinity" {
        return true;
    }
    if let Some(payload) = lower
        .strip_prefix("snan")
        .or_else(|| lower.strip_prefix("nan"))
    {
        return payload.bytes().all(|b| b.is_ascii_digit());
    }
    let (mantissa, exponent) = match s.find(['e', 'E']) {
        Some(at) => (&s[..at], Some(&s[at + 1..])),
        None => (s, None),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all_digits = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = all_digits(int) && all_digits(frac) && !(int.is_empty() && frac.is_empty());
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        !e.is_empty() && all_digits(e)
    });
    mantissa_ok && exponent_ok
}

/// What Python's `uuid.UUID(hex=...)` accepts, minus oddities: optional `urn:uuid:` prefix and
/// braces, hyphens anywhere, then exactly 32 hex digits.
fn is_uuid_hex(h: &str) -> bool {
    let h = h.replace("urn:", "").replace("uuid:", "");
    let h = h.trim_matches(['{', '}']).replace('-', "");
    h.len() == 32 && h.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Every string anywhere in the headers must be a UTF-8 long string: py-amqp reads a field-table
/// `s` as a 16-bit integer, which garbles the rest of the table.
fn check_header_strings(name: &str, value: &AMQPValue) -> Result<(), InvalidTask> {
    match value {
        AMQPValue::ShortString(_) => Err(InvalidTask::ShortStringHeader { name: name.into() }),
        AMQPValue::LongString(s) => std::str::from_utf8(s.as_bytes())
            .map(drop)
            .map_err(|_| InvalidTask::HeaderNotUtf8 { name: name.into() }),
        AMQPValue::FieldArray(items) => {
            for (i, item) in items.as_slice().iter().enumerate() {
                check_header_strings(&format!("{name}[{i}]"), item)?;
            }
            Ok(())
        }
        AMQPValue::FieldTable(table) => {
            for (k, v) in table {
                check_header_strings(&format!("{name}.{}", k.as_str()), v)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

fn header_str<'a>(name: &'static str, value: &'a AMQPValue) -> Result<&'a str, InvalidTask> {
    match value {
        AMQPValue::LongString(s) => {
            std::str::from_utf8(s.as_bytes()).map_err(|_| InvalidTask::HeaderNotUtf8 {
                name: name.to_owned(),
            })
        }
        other => Err(header_type(name, other, "a long string")),
    }
}

fn header_type(name: &str, value: &AMQPValue, expected: &'static str) -> InvalidTask {
    InvalidTask::HeaderType {
        name: name.to_owned(),
        found: amqp_kind(value),
        expected,
    }
}

fn is_amqp_int(v: &AMQPValue) -> bool {
    matches!(
        v,
        AMQPValue::ShortShortInt(_)
            | AMQPValue::ShortShortUInt(_)
            | AMQPValue::ShortInt(_)
            | AMQPValue::ShortUInt(_)
            | AMQPValue::LongInt(_)
            | AMQPValue::LongUInt(_)
            | AMQPValue::LongLongInt(_)
    )
}

fn amqp_kind(v: &AMQPValue) -> &'static str {
    match v {
        AMQPValue::Boolean(_) => "boolean",
        v if is_amqp_int(v) => "integer",
        AMQPValue::Float(_) | AMQPValue::Double(_) => "float",
        AMQPValue::DecimalValue(_) => "decimal",
        AMQPValue::ShortString(_) => "short string",
        AMQPValue::LongString(_) => "long string",
        AMQPValue::FieldArray(_) => "array",
        AMQPValue::Timestamp(_) => "timestamp",
        AMQPValue::FieldTable(_) => "table",
        AMQPValue::ByteArray(_) => "byte array",
        _ => "null",
    }
}

fn long(s: impl Into<String>) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s.into()))
}

/// A string that stops growing at [`MAX_REPR_CHARS`] + 1 characters, so a huge argument never
/// builds a huge repr.
struct Bounded {
    out: String,
    chars: usize,
}

impl Bounded {
    fn new() -> Self {
        Self {
            out: String::new(),
            chars: 0,
        }
    }
    fn full(&self) -> bool {
        self.chars > MAX_REPR_CHARS
    }
    fn push(&mut self, s: &str) {
        for c in s.chars() {
            if self.full() {
                return;
            }
            self.out.push(c);
            self.chars += 1;
        }
    }
    /// Truncated like Celery's saferepr: at most [`MAX_REPR_CHARS`], ending in `...` when cut.
    fn finish(self) -> String {
        if !self.full() {
            return self.out;
        }
        let mut cut: String = self.out.chars().take(MAX_REPR_CHARS - 3).collect();
        cut.push_str("...");
        cut
    }
}

/// Python-style repr of positional args, as a tuple: `(1, 'a')`, `(1,)`, `()`.
fn args_repr(args: &Value) -> String {
    let mut b = Bounded::new();
    let items = args.as_array().map(Vec::as_slice).unwrap_or_default();
    b.push("(");
    for (i, item) in items.iter().enumerate() {
        if b.full() {
            break;
        }
        if i > 0 {
            b.push(", ");
        }
        py_repr(item, &mut b);
    }
    if items.len() == 1 {
        b.push(",");
    }
    b.push(")");
    b.finish()
}

fn py_repr_bounded(v: &Value) -> String {
    let mut b = Bounded::new();
    py_repr(v, &mut b);
    b.finish()
}

/// Python-style repr of a JSON value (for humans reading logs and Flower; never parsed back).
fn py_repr(v: &Value, b: &mut Bounded) {
    if b.full() {
        return;
    }
    match v {
        Value::Null => b.push("None"),
        Value::Bool(true) => b.push("True"),
        Value::Bool(false) => b.push("False"),
        Value::Number(n) => b.push(n.as_str()),
        Value::String(s) => py_str_repr(s, b),
        Value::Array(items) => {
            b.push("[");
            for (i, item) in items.iter().enumerate() {
                if b.full() {
                    return;
                }
                if i > 0 {
                    b.push(", ");
                }
                py_repr(item, b);
            }
            b.push("]");
        }
        Value::Object(map) => {
            b.push("{");
            for (i, (k, item)) in map.iter().enumerate() {
                if b.full() {
                    return;
                }
                if i > 0 {
                    b.push(", ");
                }
                py_str_repr(k, b);
                b.push(": ");
                py_repr(item, b);
            }
            b.push("}");
        }
    }
}

fn py_str_repr(s: &str, b: &mut Bounded) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut q = [0u8; 4];
    b.push(quote.encode_utf8(&mut q));
    for c in s.chars() {
        if b.full() {
            return;
        }
        match c {
            '\\' => b.push("\\\\"),
            '\n' => b.push("\\n"),
            '\r' => b.push("\\r"),
            '\t' => b.push("\\t"),
            c if c == quote => {
                b.push("\\");
                b.push(c.encode_utf8(&mut q));
            }
            c if c.is_control() => {
                let code = u32::from(c);
                b.push(&if code < 0x100 {
                    format!("\\x{code:02x}")
                } else {
                    format!("\\u{code:04x}")
                });
            }
            c => b.push(c.encode_utf8(&mut q)),
        }
    }
    b.push(quote.encode_utf8(&mut q));
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn origin() -> ReplayOrigin {
        ReplayOrigin {
            table: "tasks_falhadas".into(),
            row_id: "42".into(),
            replay_id: "0b8f8a0e-4c1a-4d6e-9a0e-3f6f4b2a9c11".into(),
            host: "box".into(),
        }
    }

    fn ok(args: Option<&str>) -> TaskMessage {
        build("app.tasks.send", args, &origin()).unwrap()
    }

    fn err(args: &str) -> InvalidTask {
        build("app.tasks.send", Some(args), &origin()).unwrap_err()
    }

    fn body_parts(msg: &TaskMessage) -> Vec<Value> {
        match serde_json::from_slice(&msg.body).unwrap() {
            Value::Array(parts) => parts,
            other => panic!("body not an array: {other}"),
        }
    }

    fn header<'a>(msg: &'a TaskMessage, name: &str) -> &'a AMQPValue {
        msg.headers
            .inner()
            .get(name)
            .unwrap_or_else(|| panic!("no {name}"))
    }

    fn header_text(msg: &TaskMessage, name: &str) -> String {
        match header(msg, name) {
            AMQPValue::LongString(s) => String::from_utf8(s.as_bytes().to_vec()).unwrap(),
            other => panic!("{name} is {other:?}"),
        }
    }

    #[test]
    fn object_becomes_kwargs() {
        let msg = ok(Some(r#"{"to": "a@b.c", "n": 3}"#));
        assert_eq!(
            String::from_utf8(msg.body).unwrap(),
            format!(r#"[[],{{"to": "a@b.c", "n": 3}},{EMBED}]"#)
        );
    }

    #[test]
    fn array_becomes_args() {
        let msg = ok(Some(" [1, \"x\"]\n"));
        assert_eq!(
            String::from_utf8(msg.body).unwrap(),
            format!(r#"[[1, "x"],{{}},{EMBED}]"#)
        );
    }

    #[test]
    fn null_and_none_mean_no_arguments() {
        let expected = format!("[[],{{}},{EMBED}]").into_bytes();
        assert_eq!(ok(None).body, expected);
        assert_eq!(ok(Some("null")).body, expected);
        assert_eq!(ok(Some(" null ")).body, expected);
    }

    #[test]
    fn scalars_are_refused_with_their_kind() {
        for (text, kind) in [
            (r#""hello""#, "string"),
            ("12", "number"),
            ("true", "boolean"),
            ("false", "boolean"),
        ] {
            assert_eq!(err(text), InvalidTask::ArgsScalar { kind });
        }
        assert_eq!(
            err(r#""x""#).to_string(),
            "args is a JSON string, expected an object, an array or null"
        );
    }

    #[test]
    fn unparsable_text_is_refused() {
        for text in [
            "",
            "   ",
            "{",
            "[1,]",
            "NaN",
            "[NaN]",
            "[Infinity]",
            "{'a': 1}",
            "[1] [2]",
        ] {
            assert!(
                matches!(err(text), InvalidTask::ArgsUnparsable { .. }),
                "{text:?}"
            );
        }
    }

    #[test]
    fn numbers_survive_byte_exactly() {
        let text = "[12345678901234567890.123456789, 1e400, -0.0, 1E+2, 123456789012345678901234567890, 0.1]";
        let msg = ok(Some(text));
        // Byte for byte: even serde_json's arbitrary_precision would rewrite `1e400` as `1e+400`
        // and `1E+2` as `1e+2`, which is why the stored text is spliced rather than re-serialized.
        assert_eq!(msg.body, format!("[{text},{{}},{EMBED}]").into_bytes());
        let parts = body_parts(&msg);
        let first = parts[0][0].as_number().unwrap().as_str();
        assert_eq!(first, "12345678901234567890.123456789");
    }

    #[test]
    fn key_order_and_escapes_are_kept() {
        let text = r#"{"z": 1, "a": {"y": 2, "b": 3}, "m": "\u00e9\/"}"#;
        let msg = ok(Some(text));
        let body = String::from_utf8(msg.body.clone()).unwrap();
        assert!(body.contains(text));
        let parts = body_parts(&msg);
        let keys: Vec<&String> = parts[1].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["z", "a", "m"]);
        let inner: Vec<&String> = parts[1]["a"].as_object().unwrap().keys().collect();
        assert_eq!(inner, ["y", "b"]);
    }

    #[test]
    fn kombu_markers_pass_untouched() {
        let text = r#"{"when": {"__type__": "datetime", "__value__": "2024-03-01T12:30:00.123456+00:00"},
            "day": {"__type__": "date", "__value__": "2024-02-29"},
            "at": {"__type__": "time", "__value__": "23:59:59.500"},
            "price": {"__type__": "decimal", "__value__": "12.3400"},
            "id": {"__type__": "uuid", "__value__": {"hex": "0b8f8a0e4c1a4d6e9a0e3f6f4b2a9c11"}},
            "raw": {"__type__": "bytes", "__value__": "abc"},
            "bin": {"__type__": "base64", "__value__": "AAEC/w=="},
            "naive": {"__type__": "datetime", "__value__": "2024-03-01T12:30:00"},
            "space": {"__type__": "datetime", "__value__": "2024-03-01 12:30"}}"#;
        let msg = ok(Some(text));
        assert!(String::from_utf8(msg.body).unwrap().contains(text));
    }

    #[test]
    fn undecodable_kombu_markers_are_refused() {
        for marker in [
            r#"{"__type__": "datetime", "__value__": "nope"}"#,
            r#"{"__type__": "datetime", "__value__": "2024-02-30T00:00:00"}"#,
            r#"{"__type__": "datetime", "__value__": "2024-01-01T24:00:00"}"#,
            r#"{"__type__": "datetime", "__value__": "2024-01-01T00:00:00Z"}"#,
            r#"{"__type__": "datetime", "__value__": "2024-01-01T00:00:00.1234567"}"#,
            r#"{"__type__": "datetime", "__value__": 1700000000}"#,
            r#"{"__type__": "date", "__value__": "01/02/2024"}"#,
            r#"{"__type__": "time", "__value__": "25:00"}"#,
            r#"{"__type__": "decimal", "__value__": "12,5"}"#,
            r#"{"__type__": "decimal", "__value__": null}"#,
            r#"{"__type__": "uuid", "__value__": "0b8f8a0e4c1a4d6e9a0e3f6f4b2a9c11"}"#,
            r#"{"__type__": "uuid", "__value__": {"hex": "xyz"}}"#,
            r#"{"__type__": "base64", "__value__": "AAE"}"#,
            r#"{"__type__": "bytes", "__value__": 5}"#,
            r#"{"__type__": "pydantic", "__value__": {}}"#,
            r#"{"__type__": ["datetime"], "__value__": "2024-01-01"}"#,
        ] {
            let text = format!(r#"{{"x": [{marker}]}}"#);
            match err(&text) {
                InvalidTask::BadKombuMarker { at, .. } => assert_eq!(at, "kwargs/x/0", "{marker}"),
                other => panic!("{marker}: {other}"),
            }
        }
    }

    #[test]
    fn marker_lookalikes_are_plain_dicts() {
        ok(Some(
            r#"[{"__type__": "nope"}, {"__type__": "x", "__value__": 1, "more": 2}]"#,
        ));
    }

    #[test]
    fn kwargs_that_are_a_marker_are_refused() {
        let e = err(r#"{"__type__": "datetime", "__value__": "2024-01-01T00:00:00"}"#);
        assert_eq!(e, InvalidTask::KwargsIsKombuMarker { at: "args".into() });
    }

    #[test]
    fn non_identifier_keys_are_kept() {
        // Checked on Celery 5.7: a `**kwargs` task runs with them; a task with named parameters
        // fails with TypeError (task failure, worker alive), as with any wrong keyword name.
        let msg = ok(Some(r#"{"1a": 1, "": 2, "a-b": 3, "class": 4}"#));
        let parts = body_parts(&msg);
        let keys: Vec<&String> = parts[1].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["1a", "", "a-b", "class"]);
    }

    #[test]
    fn integer_digit_limit() {
        let at_limit = format!("[{}]", "9".repeat(MAX_INT_DIGITS));
        ok(Some(&at_limit));
        let negative = format!("[-{}]", "9".repeat(MAX_INT_DIGITS));
        ok(Some(&negative));
        let over = format!(r#"{{"n": {}}}"#, "9".repeat(MAX_INT_DIGITS + 1));
        assert_eq!(
            err(&over),
            InvalidTask::IntegerTooLong {
                at: "kwargs/n".into(),
                digits: MAX_INT_DIGITS + 1
            }
        );
        // Floats have no such limit in Python.
        ok(Some(&format!("[{}.5]", "9".repeat(MAX_INT_DIGITS * 2))));
    }

    #[test]
    fn nesting_limit() {
        let nested = |levels: usize| format!("{}{}", "[".repeat(levels), "]".repeat(levels));
        ok(Some(&nested(MAX_NESTING)));
        assert!(matches!(
            err(&nested(MAX_NESTING + 1)),
            InvalidTask::TooDeep { .. }
        ));
        assert!(matches!(
            err(&nested(1000)),
            InvalidTask::ArgsUnparsable { .. }
        ));
    }

    #[test]
    fn body_size_limit() {
        let fits = format!(r#"["{}"]"#, "a".repeat(MAX_BODY_BYTES - 200));
        ok(Some(&fits));
        let big = format!(r#"["{}"]"#, "a".repeat(MAX_BODY_BYTES));
        assert!(matches!(err(&big), InvalidTask::BodyTooLarge { .. }));
        let just_over = format!(r#"["{}"]"#, "a".repeat(MAX_BODY_BYTES - 60));
        assert!(matches!(err(&just_over), InvalidTask::BodyTooLarge { .. }));
    }

    #[test]
    fn task_name_rules() {
        let o = origin();
        assert_eq!(build("", None, &o).unwrap_err(), InvalidTask::EmptyTaskName);
        assert_eq!(
            build("a\nb", None, &o).unwrap_err(),
            InvalidTask::TaskNameControlChar { at: 1 }
        );
        assert_eq!(
            build("a\u{7f}", None, &o).unwrap_err(),
            InvalidTask::TaskNameControlChar { at: 1 }
        );
        assert_eq!(
            build(" app.t", None, &o).unwrap_err(),
            InvalidTask::TaskNameWhitespace
        );
        build(&"t".repeat(255), None, &o).unwrap();
        assert_eq!(
            build(&"t".repeat(256), None, &o).unwrap_err(),
            InvalidTask::TaskNameTooLong { len: 256 }
        );
        build("app.tâches.envoyer", None, &o).unwrap();
    }

    #[test]
    fn empty_origin_fields_are_refused() {
        let mut o = origin();
        o.row_id.clear();
        assert_eq!(
            build("t", None, &o).unwrap_err(),
            InvalidTask::EmptyOrigin { field: "row_id" }
        );
    }

    #[test]
    fn headers_follow_the_protocol() {
        let now = DateTime::parse_from_rfc3339("2026-05-01T10:00:00.5Z")
            .unwrap()
            .with_timezone(&Utc);
        let id = Uuid::new_v4();
        let msg = build_with(
            "app.tasks.send",
            Some("[1, 'x']".replace('\'', "\"").as_str()),
            &origin(),
            id,
            now,
        )
        .unwrap();
        let id = id.hyphenated().to_string();
        assert_eq!(msg.task_id, id);
        assert_eq!(header_text(&msg, "lang"), "py");
        assert_eq!(header_text(&msg, "task"), "app.tasks.send");
        assert_eq!(header_text(&msg, "id"), id);
        assert_eq!(header_text(&msg, "root_id"), id);
        for name in ["parent_id", "group", "eta", "expires"] {
            assert_eq!(header(&msg, name), &AMQPValue::Void, "{name}");
        }
        assert_eq!(header(&msg, "retries"), &AMQPValue::LongLongInt(0));
        assert_eq!(
            header(&msg, "timelimit"),
            &AMQPValue::FieldArray(vec![AMQPValue::Void, AMQPValue::Void].into())
        );
        assert_eq!(header(&msg, "ignore_result"), &AMQPValue::Boolean(false));
        assert_eq!(header_text(&msg, "argsrepr"), "(1, 'x')");
        assert_eq!(header_text(&msg, "kwargsrepr"), "{}");
        assert_eq!(header_text(&msg, "origin"), "dlq@box");
        assert_eq!(
            header_text(&msg, "dlq-replay-of"),
            "table:tasks_falhadas:42"
        );
        assert_eq!(header_text(&msg, "dlq-replay-id"), origin().replay_id);
        assert_eq!(
            header_text(&msg, "dlq-replayed-at"),
            "2026-05-01T10:00:00.500000Z"
        );
        assert!(
            msg.headers
                .inner()
                .keys()
                .all(|k| !k.as_str().starts_with("x-"))
        );
        assert!(
            msg.headers
                .inner()
                .values()
                .all(|v| !matches!(v, AMQPValue::ShortString(_)))
        );
    }

    #[test]
    fn properties_follow_the_protocol() {
        let msg = ok(Some("[]"));
        let p = &msg.properties;
        let s = |v: &Option<ShortString>| v.as_ref().map(|s| s.as_str().to_owned());
        assert_eq!(s(p.content_type()).as_deref(), Some("application/json"));
        assert_eq!(s(p.content_encoding()).as_deref(), Some("utf-8"));
        assert_eq!(p.delivery_mode(), &Some(2));
        assert_eq!(p.priority(), &Some(0));
        assert_eq!(s(p.correlation_id()), Some(msg.task_id.clone()));
        assert_eq!(s(p.message_id()), Some(msg.task_id.clone()));
        assert_eq!(p.expiration(), &None);
        assert_eq!(p.headers().as_ref(), Some(&msg.headers));
    }

    #[test]
    fn every_build_gets_a_fresh_uuid4() {
        let a = ok(None);
        let b = ok(None);
        assert_ne!(a.task_id, b.task_id);
        let parsed = Uuid::parse_str(&a.task_id).unwrap();
        assert_eq!(parsed.get_version_num(), 4);
    }

    #[test]
    fn reprs_are_pythonic_and_bounded() {
        let msg = ok(Some(
            r#"[null, true, false, 1.5, "it's", "a\"b", "\n", [1], {"k": "v"}]"#,
        ));
        assert_eq!(
            header_text(&msg, "argsrepr"),
            r#"(None, True, False, 1.5, "it's", 'a"b', '\n', [1], {'k': 'v'})"#
        );
        let msg = ok(Some(r#"{"a": "x'y\"z"}"#));
        assert_eq!(header_text(&msg, "kwargsrepr"), r#"{'a': 'x\'y"z'}"#);
        let msg = ok(Some(r#"["solo"]"#));
        assert_eq!(header_text(&msg, "argsrepr"), "('solo',)");
        let long_arg = format!(r#"["{}"]"#, "é".repeat(5000));
        let repr = header_text(&ok(Some(&long_arg)), "argsrepr");
        assert_eq!(repr.chars().count(), MAX_REPR_CHARS);
        assert!(repr.ends_with("..."));
    }

    /// A valid message, then one field broken at a time.
    fn broken(f: impl FnOnce(&mut TaskMessage)) -> InvalidTask {
        let mut msg = ok(Some(r#"{"a": 1}"#));
        f(&mut msg);
        validate(&msg).unwrap_err()
    }

    fn set_header(msg: &mut TaskMessage, name: &str, v: Option<AMQPValue>) {
        let mut map = msg.headers.inner().clone();
        match v {
            Some(v) => map.insert(ShortString::from(name), v),
            None => map.remove(name),
        };
        msg.headers = FieldTable::from(map);
        msg.properties = msg.properties.clone().with_headers(msg.headers.clone());
    }

    #[test]
    fn validate_refuses_bad_bodies() {
        let cases: [(&str, InvalidTask); 8] = [
            ("[[], {}]", InvalidTask::BodyLength { len: 2 }),
            ("[[], {}, {}, {}]", InvalidTask::BodyLength { len: 4 }),
            ("{}", InvalidTask::BodyNotArray { kind: "object" }),
            (
                "[{}, {}, {}]",
                InvalidTask::BodyArgsNotArray { kind: "object" },
            ),
            (
                "[[], [], {}]",
                InvalidTask::BodyKwargsNotObject { kind: "array" },
            ),
            (
                "[[], {}, null]",
                InvalidTask::BodyEmbedNotObject { kind: "null" },
            ),
            (
                r#"[[], {}, {"chord": []}]"#,
                InvalidTask::EmbedField {
                    field: "chord",
                    kind: "array",
                    expected: "an object",
                },
            ),
            (
                r#"[[], {"__type__": "date", "__value__": "2024-01-01"}, {}]"#,
                InvalidTask::KwargsIsKombuMarker {
                    at: "kwargs".into(),
                },
            ),
        ];
        for (body, expected) in cases {
            assert_eq!(
                broken(|m| m.body = body.as_bytes().to_vec()),
                expected,
                "{body}"
            );
        }
        assert_eq!(
            broken(|m| m.body = vec![0xff, b'[']),
            InvalidTask::BodyNotUtf8
        );
        assert!(matches!(
            broken(|m| m.body = b"[[],{},{}".to_vec()),
            InvalidTask::BodyNotJson { .. }
        ));
    }

    #[test]
    fn validate_refuses_bad_headers() {
        assert_eq!(
            broken(|m| set_header(m, "id", None)),
            InvalidTask::MissingHeader { name: "id" }
        );
        assert_eq!(
            broken(|m| set_header(m, "task", None)),
            InvalidTask::MissingHeader { name: "task" }
        );
        assert_eq!(
            broken(|m| set_header(m, "id", Some(AMQPValue::ShortString("x".into())))),
            InvalidTask::ShortStringHeader { name: "id".into() }
        );
        assert_eq!(
            broken(|m| set_header(
                m,
                "stamps",
                Some(AMQPValue::FieldArray(
                    vec![AMQPValue::ShortString("x".into())].into()
                ))
            )),
            InvalidTask::ShortStringHeader {
                name: "stamps[0]".into()
            }
        );
        assert_eq!(
            broken(|m| set_header(
                m,
                "origin",
                Some(AMQPValue::LongString(vec![0xffu8].into()))
            )),
            InvalidTask::HeaderNotUtf8 {
                name: "origin".into()
            }
        );
        assert_eq!(
            broken(|m| set_header(
                m,
                "timelimit",
                Some(AMQPValue::FieldArray(vec![AMQPValue::Void].into()))
            )),
            InvalidTask::TimelimitLength { len: 1 }
        );
        assert!(matches!(
            broken(|m| set_header(
                m,
                "timelimit",
                Some(AMQPValue::FieldArray(
                    vec![AMQPValue::Void, long("10")].into()
                ))
            )),
            InvalidTask::HeaderType { .. }
        ));
        assert_eq!(
            broken(|m| set_header(m, "eta", Some(long("2020-01-01T00:00:00")))),
            InvalidTask::Scheduled { name: "eta" }
        );
        assert_eq!(
            broken(|m| set_header(m, "expires", Some(long("2020-01-01T00:00:00")))),
            InvalidTask::Scheduled { name: "expires" }
        );
        assert!(matches!(
            broken(|m| set_header(m, "retries", Some(long("0")))),
            InvalidTask::HeaderType { .. }
        ));
        assert!(matches!(
            broken(|m| set_header(m, "id", Some(long("other")))),
            InvalidTask::HeaderMismatch { name: "id", .. }
        ));
        assert_eq!(
            broken(|m| m.headers = FieldTable::default()),
            InvalidTask::HeadersMismatch
        );
        assert_eq!(
            broken(|m| m.properties = m.properties.clone().with_headers(FieldTable::default())),
            InvalidTask::HeadersMismatch
        );
        assert_eq!(
            broken(|m| {
                m.properties = BasicProperties::default()
                    .with_content_type("application/json".into())
                    .with_content_encoding("utf-8".into())
            }),
            InvalidTask::NoHeaders
        );
    }

    #[test]
    fn validate_refuses_bad_properties() {
        assert_eq!(
            broken(|m| m.properties = BasicProperties::default().with_headers(m.headers.clone())),
            InvalidTask::ContentType { found: None }
        );
        assert_eq!(
            broken(|m| m.properties = m.properties.clone().with_content_type("text/plain".into())),
            InvalidTask::ContentType {
                found: Some("text/plain".into())
            }
        );
        assert_eq!(
            broken(|m| m.properties = m.properties.clone().with_content_encoding("binary".into())),
            InvalidTask::ContentEncoding {
                found: Some("binary".into())
            }
        );
        assert_eq!(
            broken(|m| m.properties = m.properties.clone().with_expiration("60000".into())),
            InvalidTask::ExpirationSet {
                found: "60000".into()
            }
        );
    }

    #[test]
    fn decimal_and_uuid_syntax() {
        for ok in [
            "1", "-1.5", "+.5", "5.", "1e-3", "1E+30", "Infinity", "-inf", "NaN", "sNaN12",
        ] {
            assert!(is_decimal_literal(ok), "{ok}");
        }
        for bad in ["", ".", "1e", "e3", "1_000", " 1", "0x10", "1.2.3", "nan1a"] {
            assert!(!is_decimal_literal(bad), "{bad}");
        }
        assert!(is_uuid_hex("{0b8f8a0e-4c1a-4d6e-9a0e-3f6f4b2a9c11}"));
        assert!(is_uuid_hex("urn:uuid:0b8f8a0e-4c1a-4d6e-9a0e-3f6f4b2a9c11"));
        assert!(!is_uuid_hex("0b8f8a0e-4c1a-4d6e-9a0e-3f6f4b2a9c1"));
    }

    // ---------- property tests ----------

    fn number_text() -> impl Strategy<Value = String> {
        "-?(0|[1-9][0-9]{0,60})(\\.[0-9]{1,40})?([eE][+-]?[0-9]{1,4})?"
    }

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![any::<String>(), "[a-z_]{1,8}"]
    }

    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            number_text().prop_map(|t| serde_json::from_str(&t).unwrap()),
            any::<String>().prop_map(Value::String),
        ];
        leaf.prop_recursive(6, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::vec((key(), inner), 0..8).prop_map(object),
            ]
        })
    }

    /// An object in the generated key order, never a kombu marker.
    fn object(pairs: Vec<(String, Value)>) -> Value {
        let mut map = Map::new();
        for (k, v) in pairs {
            map.insert(k, v);
        }
        if is_kombu_marker(&map) {
            map.insert("extra".into(), Value::Null);
        }
        Value::Object(map)
    }

    fn render(v: &Value, pretty: bool) -> String {
        if pretty {
            serde_json::to_string_pretty(v).unwrap()
        } else {
            serde_json::to_string(v).unwrap()
        }
    }

    fn keys_in_order(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Array(items) => items.iter().for_each(|i| keys_in_order(i, out)),
            Value::Object(map) => {
                for (k, i) in map {
                    out.push(k.clone());
                    keys_in_order(i, out);
                }
            }
            _ => {}
        }
    }

    fn no_short_strings(v: &AMQPValue) -> bool {
        match v {
            AMQPValue::ShortString(_) => false,
            AMQPValue::FieldArray(a) => a.as_slice().iter().all(no_short_strings),
            AMQPValue::FieldTable(t) => t.inner().values().all(no_short_strings),
            _ => true,
        }
    }

    proptest! {
        #[test]
        fn arrays_become_args_unchanged(items in prop::collection::vec(json(), 0..8), pretty in any::<bool>()) {
            let args = Value::Array(items);
            let text = render(&args, pretty);
            let msg = build("t", Some(&text), &origin()).unwrap();
            let body = String::from_utf8(msg.body.clone()).unwrap();
            let prefix = format!("[{text},{{}},");
            prop_assert!(body.starts_with(&prefix));
            let parts = body_parts(&msg);
            prop_assert_eq!(&parts[0], &args);
            prop_assert_eq!(&parts[1], &Value::Object(Map::new()));
            let (mut want, mut got) = (Vec::new(), Vec::new());
            keys_in_order(&args, &mut want);
            keys_in_order(&parts[0], &mut got);
            prop_assert_eq!(want, got);
        }

        #[test]
        fn objects_become_kwargs_unchanged(pairs in prop::collection::vec((key(), json()), 0..8), pretty in any::<bool>()) {
            let kwargs = object(pairs);
            let text = render(&kwargs, pretty);
            let msg = build("t", Some(&text), &origin()).unwrap();
            let body = String::from_utf8(msg.body.clone()).unwrap();
            let prefix = format!("[[],{text},");
            prop_assert!(body.starts_with(&prefix));
            let parts = body_parts(&msg);
            prop_assert_eq!(&parts[0], &Value::Array(Vec::new()));
            prop_assert_eq!(&parts[1], &kwargs);
            let (mut want, mut got) = (Vec::new(), Vec::new());
            keys_in_order(&kwargs, &mut want);
            keys_in_order(&parts[1], &mut got);
            prop_assert_eq!(want, got);
        }

        #[test]
        fn numbers_are_never_rewritten(texts in prop::collection::vec(number_text(), 1..10)) {
            let text = format!("[{}]", texts.join(", "));
            let msg = build("t", Some(&text), &origin()).unwrap();
            let expected = format!("[{text},{{}},{EMBED}]").into_bytes();
            prop_assert_eq!(&msg.body, &expected);
            // And each one reads back as the same number.
            let parts = body_parts(&msg);
            for (got, want) in parts[0].as_array().unwrap().iter().zip(&texts) {
                let want: Value = serde_json::from_str(want).unwrap();
                prop_assert_eq!(got, &want);
            }
        }

        #[test]
        fn scalars_are_refused(v in prop_oneof![
            any::<bool>().prop_map(Value::Bool),
            number_text().prop_map(|t| serde_json::from_str(&t).unwrap()),
            any::<String>().prop_map(Value::String),
        ]) {
            let e = build("t", Some(&render(&v, false)), &origin()).unwrap_err();
            prop_assert!(matches!(e, InvalidTask::ArgsScalar { .. }), "{e}");
        }

        #[test]
        fn any_text_is_refused_or_valid(text in any::<String>(), name in any::<String>()) {
            for (n, t) in [(name.as_str(), text.as_str()), ("t", text.as_str())] {
                if let Ok(msg) = build(n, Some(t), &origin()) {
                    prop_assert!(validate(&msg).is_ok());
                    prop_assert_eq!(body_parts(&msg).len(), 3);
                }
            }
        }

        #[test]
        fn task_names_follow_the_rules(name in any::<String>()) {
            let expected_ok = !name.is_empty()
                && name.len() <= MAX_TASK_NAME_BYTES
                && !name.chars().any(char::is_control)
                && name.trim() == name;
            let got = build(&name, None, &origin());
            prop_assert_eq!(got.is_ok(), expected_ok, "{:?} -> {:?}", name, got.err());
            if let Ok(msg) = got {
                prop_assert_eq!(header_text(&msg, "task"), name);
            }
        }

        #[test]
        fn headers_are_well_typed(v in json(), table in ".{1,40}", row in ".{1,40}") {
            let text = render(&Value::Array(vec![v]), false);
            let o = ReplayOrigin { table: table.clone(), row_id: row.clone(), ..origin() };
            let msg = build("t", Some(&text), &o).unwrap();
            prop_assert!(msg.headers.inner().values().all(no_short_strings));
            prop_assert_eq!(header_text(&msg, "dlq-replay-of"), format!("table:{table}:{row}"));
            prop_assert!(header_text(&msg, "argsrepr").chars().count() <= MAX_REPR_CHARS);
            prop_assert!(header_text(&msg, "kwargsrepr").chars().count() <= MAX_REPR_CHARS);
            prop_assert!(DateTime::parse_from_rfc3339(&header_text(&msg, "dlq-replayed-at")).is_ok());
        }

        #[test]
        fn reprs_stay_bounded(v in json()) {
            prop_assert!(py_repr_bounded(&v).chars().count() <= MAX_REPR_CHARS);
            prop_assert!(args_repr(&Value::Array(vec![v.clone(), v])).chars().count() <= MAX_REPR_CHARS);
        }
    }
}
