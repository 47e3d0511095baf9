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

mod repr;
mod validate;
use repr::{args_repr, py_repr_bounded};
pub(crate) use validate::validate;
use validate::{check_task_name, is_kombu_marker};

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

impl TaskMessage {
    /// The headers as JSON, as kombu's Redis transport stores them in its envelope.
    pub(crate) fn headers_json(&self) -> Value {
        crate::rabbit::codec::table_to_json(&self.headers)
    }
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

    let (args, kwargs, body) = split_args(args_text)?;
    let id = task_id.hyphenated().to_string();
    let headers = task_headers(task_name, &id, &args, &kwargs, origin, now);
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

/// The stored `args` text as (args, kwargs) and the body that carries them: the stored text
/// is spliced in as is (see `build`).
fn split_args(args_text: Option<&str>) -> Result<(Value, Value, String), InvalidTask> {
    let empty_args = Value::Array(Vec::new());
    let empty_kwargs = Value::Object(Map::new());
    Ok(match args_text {
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
    })
}

/// Celery protocol v2 headers for a fresh run of `task_name`, plus dlq's provenance.
fn task_headers(
    task_name: &str,
    id: &str,
    args: &Value,
    kwargs: &Value,
    origin: &ReplayOrigin,
    now: DateTime<Utc>,
) -> FieldTable {
    let mut headers = FieldTable::default();
    let mut put = |k: &str, v: AMQPValue| {
        headers.insert(ShortString::from(k), v);
    };
    put("lang", long("py"));
    put("task", long(task_name));
    put("id", long(id));
    put("root_id", long(id));
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
    put("argsrepr", long(args_repr(args)));
    put("kwargsrepr", long(py_repr_bounded(kwargs)));
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
    headers
}

fn long(s: impl Into<String>) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s.into()))
}

#[cfg(test)]
mod tests;
