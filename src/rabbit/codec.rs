//! Conversions between what a RabbitMQ delivery carries (AMQP field tables and basic properties)
//! and JSON. Pure: no I/O, no broker.
//!
//! Two encodings exist because they serve different readers:
//!
//! * **Readable** ([`table_to_json`], [`properties_to_json`]): for `inspect` and `-o json`. Values
//!   become the JSON a person (or `jq`) expects: strings, numbers, RFC 3339 times. It is lossy on
//!   purpose: the AMQP type of a number, the bits of a NaN and the difference between a string and
//!   a byte array are dropped.
//! * **Typed** ([`table_to_typed_json`], [`properties_to_typed_json`] and their `_from_` inverses):
//!   for archive files. A restored message must be identical on the wire, and consumers do branch
//!   on header types (an `x-death` `count` that comes back as a string is a different message), so
//!   every value keeps its AMQP type tag and exact bits.
//!
//! # Typed JSON format
//!
//! A typed value is a two-element array `[tag, value]`. The tag is the AMQP field type letter as
//! lapin/RabbitMQ put it on the wire:
//!
//! | tag | AMQP type           | value                                                         |
//! |-----|---------------------|---------------------------------------------------------------|
//! | `t` | boolean             | `true` / `false`                                              |
//! | `b` | short-short-int i8  | integer                                                       |
//! | `B` | short-short-uint u8 | integer                                                       |
//! | `s` | short-int i16       | integer (RabbitMQ's letter, not the spec's `U`)               |
//! | `u` | short-uint u16      | integer                                                       |
//! | `I` | long-int i32        | integer                                                       |
//! | `i` | long-uint u32       | integer                                                       |
//! | `l` | long-long-int i64   | integer                                                       |
//! | `f` | float f32           | number, or `"NaN"`, `"inf"`, `"-inf"`, or `"0x"` + 8 hex digits of the bits (other NaNs) |
//! | `d` | double f64          | number, or `"NaN"`, `"inf"`, `"-inf"`, or `"0x"` + 16 hex digits of the bits (other NaNs) |
//! | `D` | decimal             | `[scale, value]` (u8, u32): the number is value / 10^scale    |
//! | `S` | long string         | string if UTF-8, else `{"base64": "..."}`                     |
//! | `_` | short string        | string (lapin-only variant, no wire letter of its own)         |
//! | `T` | timestamp           | integer seconds since the Unix epoch (u64)                    |
//! | `x` | byte array          | base64 string (standard alphabet, padded)                     |
//! | `A` | field array         | array of typed values                                         |
//! | `F` | field table         | object of key -> typed value                                  |
//! | `V` | void                | `null`                                                        |
//!
//! A typed table is an object of key -> typed value, e.g.
//! `{"x-death": ["A", [["F", {"count": ["l", 1], "queue": ["S", "orders"]}]]]}`.
//! Finite floats are written in shortest round-trip form; with serde_json's `arbitrary_precision`
//! the text survives a file round trip unchanged. NaN and infinities are kept for completeness,
//! but RabbitMQ (3.10, Erlang floats) closes the connection on them, so no broker delivers them.
//!
//! Typed properties are an object with the optional keys `content_type`, `content_encoding`,
//! `headers` (a typed table), `delivery_mode`, `priority`, `correlation_id`, `reply_to`,
//! `expiration`, `message_id`, `timestamp` (integer seconds), `type`, `user_id`, `app_id`,
//! `cluster_id`; absent properties are omitted, unknown keys are rejected (a restore must not
//! silently drop something).

use crate::model::{json_kind, rfc3339};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use chrono::{DateTime, Utc};
use lapin::BasicProperties;
use lapin::types::{
    AMQPValue, ByteArray, DecimalValue, FieldArray, FieldTable, LongString, ShortString,
};
use serde_json::{Map, Number, Value, json};
use std::borrow::Cow;

/// Headers the broker adds when it delivers a message, not part of the stored message:
/// a quorum queue's counters (`x-delivery-count`; from RabbitMQ 4.3 `x-acquired-count`, on
/// every delivery after the first) and a stream's offset. A copy without them starts
/// counting again.
pub(crate) const DELIVERY_HEADERS: &[&str] =
    &["x-delivery-count", "x-acquired-count", "x-stream-offset"];

/// The properties as stored in the queue: delivery-time headers removed. Borrowed when
/// there are none (a classic queue adds none): the headers are the biggest part of a
/// message a replay handles, and cloning them per message showed in profiles.
pub(crate) fn stored_properties(props: &BasicProperties) -> Cow<'_, BasicProperties> {
    let Some(headers) = props.headers() else {
        return Cow::Borrowed(props);
    };
    if !DELIVERY_HEADERS
        .iter()
        .any(|h| headers.inner().contains_key(*h))
    {
        return Cow::Borrowed(props);
    }
    let mut kept = FieldTable::default();
    for (k, v) in headers.inner() {
        if !DELIVERY_HEADERS.contains(&k.as_str()) {
            kept.insert(k.clone(), v.clone());
        }
    }
    if !kept.inner().is_empty() {
        return Cow::Owned(props.clone().with_headers(kept));
    }
    // The broker made up a header table just for its own header: the stored message had
    // none. BasicProperties cannot unset a field, so rebuild it without `headers`.
    let mut typed = properties_to_typed_json(props);
    if let Some(m) = typed.as_object_mut() {
        m.remove("headers");
    }
    Cow::Owned(properties_from_typed_json(&typed).unwrap_or_else(|_| props.clone()))
}

/// Longest error text kept in a reason: enough for an exception line, short enough for a table cell.
pub(crate) const MAX_ERROR_TEXT_CHARS: usize = 240;

/// Short strings (table keys, property values) carry a one-byte length on the wire.
const MAX_SHORT_STRING_BYTES: usize = 255;

/// A typed-JSON value that cannot be turned back into AMQP. `path` names the bad value the way a
/// person would point at it, e.g. `headers.x-death[0].count`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub(crate) struct CodecError {
    pub(crate) path: String,
    pub(crate) message: String,
}

impl CodecError {
    fn new(message: impl Into<String>) -> Self {
        CodecError {
            path: String::new(),
            message: message.into(),
        }
    }

    // Paths are built while the error travels up, so the happy path allocates nothing for them.
    fn under_key(mut self, key: &str) -> Self {
        self.path = if self.path.is_empty() {
            key.to_owned()
        } else if self.path.starts_with('[') {
            format!("{key}{}", self.path)
        } else {
            format!("{key}.{}", self.path)
        };
        self
    }

    fn under_index(mut self, index: usize) -> Self {
        self.path = if self.path.is_empty() || self.path.starts_with('[') {
            format!("[{index}]{}", self.path)
        } else {
            format!("[{index}].{}", self.path)
        };
        self
    }

    fn at_root(mut self) -> Self {
        if self.path.is_empty() {
            self.path = "<root>".to_owned();
        }
        self
    }
}

/// Short English name of a value's AMQP type, for messages and warnings.
pub(crate) fn amqp_kind_name(v: &AMQPValue) -> &'static str {
    match v {
        AMQPValue::Boolean(_) => "boolean",
        AMQPValue::ShortShortInt(_) => "i8",
        AMQPValue::ShortShortUInt(_) => "u8",
        AMQPValue::ShortInt(_) => "i16",
        AMQPValue::ShortUInt(_) => "u16",
        AMQPValue::LongInt(_) => "i32",
        AMQPValue::LongUInt(_) => "u32",
        AMQPValue::LongLongInt(_) => "i64",
        AMQPValue::Float(_) => "f32",
        AMQPValue::Double(_) => "f64",
        AMQPValue::DecimalValue(_) => "decimal",
        AMQPValue::ShortString(_) => "short string",
        AMQPValue::LongString(_) => "string",
        AMQPValue::FieldArray(_) => "array",
        AMQPValue::Timestamp(_) => "timestamp",
        AMQPValue::FieldTable(_) => "table",
        AMQPValue::ByteArray(_) => "byte array",
        AMQPValue::Void => "void",
    }
}

/// "a string", "an array", "an i64": for warnings that read as English.
pub(crate) fn with_article(kind: &str) -> String {
    let an = matches!(kind.chars().next(), Some('a' | 'e' | 'i' | 'o' | 'f'));
    format!("{} {kind}", if an { "an" } else { "a" })
}

// ---------------------------------------------------------------------------------------------
// Readable view
// ---------------------------------------------------------------------------------------------

/// Readable JSON of a field table (headers): see the module docs. Lossy by design.
pub(crate) fn table_to_json(t: &FieldTable) -> Value {
    Value::Object(
        t.inner()
            .iter()
            .map(|(k, v)| (k.to_string(), value_to_json(v)))
            .collect(),
    )
}

/// Readable JSON of one AMQP value.
pub(crate) fn value_to_json(v: &AMQPValue) -> Value {
    match v {
        AMQPValue::Boolean(b) => Value::Bool(*b),
        AMQPValue::ShortShortInt(i) => (*i).into(),
        AMQPValue::ShortShortUInt(i) => (*i).into(),
        AMQPValue::ShortInt(i) => (*i).into(),
        AMQPValue::ShortUInt(i) => (*i).into(),
        AMQPValue::LongInt(i) => (*i).into(),
        AMQPValue::LongUInt(i) => (*i).into(),
        AMQPValue::LongLongInt(i) => (*i).into(),
        AMQPValue::Float(f) => {
            if f.is_finite() {
                Value::from(*f)
            } else {
                Value::String(non_finite_name(f.is_nan(), f.is_sign_negative()).to_owned())
            }
        }
        AMQPValue::Double(f) => {
            if f.is_finite() {
                Value::from(*f)
            } else {
                Value::String(non_finite_name(f.is_nan(), f.is_sign_negative()).to_owned())
            }
        }
        AMQPValue::DecimalValue(d) => Value::Number(decimal_number(*d)),
        AMQPValue::ShortString(s) => Value::String(s.to_string()),
        AMQPValue::LongString(s) => bytes_readable(s.as_bytes()),
        AMQPValue::FieldArray(a) => Value::Array(a.as_slice().iter().map(value_to_json).collect()),
        AMQPValue::Timestamp(t) => timestamp_readable(*t),
        AMQPValue::FieldTable(t) => table_to_json(t),
        AMQPValue::ByteArray(b) => json!({ "base64": B64.encode(b.as_slice()) }),
        AMQPValue::Void => Value::Null,
    }
}

fn non_finite_name(nan: bool, negative: bool) -> &'static str {
    match (nan, negative) {
        (true, _) => "NaN",
        (false, false) => "inf",
        (false, true) => "-inf",
    }
}

/// Exact decimal text as a JSON number (arbitrary_precision keeps the text), e.g. scale 2,
/// value 12340 -> `123.40`: the scale stays visible.
fn decimal_number(d: DecimalValue) -> Number {
    let digits = d.value.to_string();
    let scale = usize::from(d.scale);
    let text = if scale == 0 {
        digits
    } else {
        let padded = format!("{digits:0>width$}", width = scale + 1);
        let (int, frac) = padded.split_at(padded.len() - scale);
        format!("{int}.{frac}")
    };
    // Always valid JSON number text: digits, optionally "." and more digits.
    serde_json::from_str(&text).unwrap_or_else(|_| Number::from(d.value))
}

fn bytes_readable(bytes: &[u8]) -> Value {
    match std::str::from_utf8(bytes) {
        Ok(s) => Value::String(s.to_owned()),
        Err(_) => json!({ "base64": B64.encode(bytes) }),
    }
}

fn timestamp_to_datetime(secs: u64) -> Option<DateTime<Utc>> {
    i64::try_from(secs)
        .ok()
        .and_then(|s| DateTime::from_timestamp(s, 0))
}

/// RFC 3339 when chrono can represent it; the raw seconds otherwise (still better than nothing).
fn timestamp_readable(secs: u64) -> Value {
    match timestamp_to_datetime(secs) {
        Some(t) => Value::String(rfc3339(&t)),
        None => secs.into(),
    }
}

/// Readable JSON of the basic properties, headers excluded (shown separately). Absent properties
/// are omitted; `timestamp` is RFC 3339.
pub(crate) fn properties_to_json(p: &BasicProperties) -> Value {
    let mut m = Map::new();
    let put_str = |m: &mut Map<String, Value>, name: &str, v: &Option<ShortString>| {
        if let Some(v) = v {
            m.insert(name.to_owned(), Value::String(v.to_string()));
        }
    };
    put_str(&mut m, "content_type", p.content_type());
    put_str(&mut m, "content_encoding", p.content_encoding());
    if let Some(v) = p.delivery_mode() {
        m.insert("delivery_mode".to_owned(), (*v).into());
    }
    if let Some(v) = p.priority() {
        m.insert("priority".to_owned(), (*v).into());
    }
    put_str(&mut m, "correlation_id", p.correlation_id());
    put_str(&mut m, "reply_to", p.reply_to());
    put_str(&mut m, "expiration", p.expiration());
    put_str(&mut m, "message_id", p.message_id());
    if let Some(v) = p.timestamp() {
        m.insert("timestamp".to_owned(), timestamp_readable(*v));
    }
    put_str(&mut m, "type", p.kind());
    put_str(&mut m, "user_id", p.user_id());
    put_str(&mut m, "app_id", p.app_id());
    put_str(&mut m, "cluster_id", p.cluster_id());
    Value::Object(m)
}

/// Properties as they go on the wire (compact to hold in memory); `None` if unencodable.
pub(crate) fn encode_properties(p: &BasicProperties) -> Option<Box<[u8]>> {
    lapin::protocol::basic::gen_properties(p)(Vec::new().into())
        .ok()
        .map(|w| w.write.into_boxed_slice())
}

/// The inverse of `encode_properties`.
pub(crate) fn decode_properties(bytes: &[u8]) -> Option<BasicProperties> {
    lapin::protocol::basic::parse_properties(bytes)
        .ok()
        .filter(|(rest, _)| rest.is_empty())
        .map(|(_, p)| p)
}

// ---------------------------------------------------------------------------------------------
// Typed (lossless) encoding
// ---------------------------------------------------------------------------------------------

/// Lossless typed JSON of a field table: an object of key -> `[tag, value]`.
pub(crate) fn table_to_typed_json(t: &FieldTable) -> Value {
    Value::Object(
        t.inner()
            .iter()
            .map(|(k, v)| (k.to_string(), value_to_typed_json(v)))
            .collect(),
    )
}

/// Lossless typed JSON of one value: `[tag, value]`.
pub(crate) fn value_to_typed_json(v: &AMQPValue) -> Value {
    let (tag, val): (&str, Value) = match v {
        AMQPValue::Boolean(b) => ("t", Value::Bool(*b)),
        AMQPValue::ShortShortInt(i) => ("b", (*i).into()),
        AMQPValue::ShortShortUInt(i) => ("B", (*i).into()),
        AMQPValue::ShortInt(i) => ("s", (*i).into()),
        AMQPValue::ShortUInt(i) => ("u", (*i).into()),
        AMQPValue::LongInt(i) => ("I", (*i).into()),
        AMQPValue::LongUInt(i) => ("i", (*i).into()),
        AMQPValue::LongLongInt(i) => ("l", (*i).into()),
        AMQPValue::Float(f) => ("f", f32_typed(*f)),
        AMQPValue::Double(f) => ("d", f64_typed(*f)),
        AMQPValue::DecimalValue(d) => ("D", json!([d.scale, d.value])),
        AMQPValue::ShortString(s) => ("_", Value::String(s.to_string())),
        AMQPValue::LongString(s) => ("S", bytes_readable(s.as_bytes())),
        AMQPValue::FieldArray(a) => (
            "A",
            Value::Array(a.as_slice().iter().map(value_to_typed_json).collect()),
        ),
        AMQPValue::Timestamp(t) => ("T", (*t).into()),
        AMQPValue::FieldTable(t) => ("F", table_to_typed_json(t)),
        AMQPValue::ByteArray(b) => ("x", Value::String(B64.encode(b.as_slice()))),
        AMQPValue::Void => ("V", Value::Null),
    };
    Value::Array(vec![Value::String(tag.to_owned()), val])
}

fn f32_typed(f: f32) -> Value {
    if f.is_finite() {
        Value::from(f)
    } else if f.is_infinite() || f.to_bits() == f32::NAN.to_bits() {
        Value::String(non_finite_name(f.is_nan(), f.is_sign_negative()).to_owned())
    } else {
        // Any other NaN: keep its payload and sign.
        Value::String(format!("0x{:08x}", f.to_bits()))
    }
}

fn f64_typed(f: f64) -> Value {
    if f.is_finite() {
        Value::from(f)
    } else if f.is_infinite() || f.to_bits() == f64::NAN.to_bits() {
        Value::String(non_finite_name(f.is_nan(), f.is_sign_negative()).to_owned())
    } else {
        Value::String(format!("0x{:016x}", f.to_bits()))
    }
}

/// Inverse of [`table_to_typed_json`]. Errors name the path of the bad value.
#[cfg(test)]
pub(crate) fn table_from_typed_json(v: &Value) -> Result<FieldTable, CodecError> {
    table_from_typed(v).map_err(CodecError::at_root)
}

/// Inverse of [`value_to_typed_json`].
#[cfg(test)]
pub(crate) fn value_from_typed_json(v: &Value) -> Result<AMQPValue, CodecError> {
    value_from_typed(v).map_err(CodecError::at_root)
}

fn table_from_typed(v: &Value) -> Result<FieldTable, CodecError> {
    let obj = v.as_object().ok_or_else(|| {
        CodecError::new(format!(
            "expected object (typed table), got {}",
            json_kind(v)
        ))
    })?;
    let mut table = FieldTable::default();
    for (k, val) in obj {
        let key = short_string(k).map_err(|e| e.under_key(k))?;
        let value = value_from_typed(val).map_err(|e| e.under_key(k))?;
        table.insert(key, value);
    }
    Ok(table)
}

fn short_string(s: &str) -> Result<ShortString, CodecError> {
    if s.len() > MAX_SHORT_STRING_BYTES {
        return Err(CodecError::new(format!(
            "short string is {} bytes, at most {MAX_SHORT_STRING_BYTES} allowed",
            s.len()
        )));
    }
    ShortString::try_new(s).map_err(|e| CodecError::new(e.to_string()))
}

fn value_from_typed(v: &Value) -> Result<AMQPValue, CodecError> {
    let pair = match v.as_array() {
        Some(a) if a.len() == 2 => a,
        _ => {
            return Err(CodecError::new(format!(
                "expected [tag, value] pair, got {}",
                json_kind(v)
            )));
        }
    };
    let Some(tag) = pair[0].as_str() else {
        return Err(CodecError::new(format!(
            "expected string type tag, got {}",
            json_kind(&pair[0])
        )));
    };
    let val = &pair[1];
    Ok(match tag {
        "t" => AMQPValue::Boolean(val.as_bool().ok_or_else(|| expected("boolean", tag, val))?),
        "b" => AMQPValue::ShortShortInt(int_in_range(val, tag, "i8")?),
        "B" => AMQPValue::ShortShortUInt(int_in_range(val, tag, "u8")?),
        "s" => AMQPValue::ShortInt(int_in_range(val, tag, "i16")?),
        "u" => AMQPValue::ShortUInt(int_in_range(val, tag, "u16")?),
        "I" => AMQPValue::LongInt(int_in_range(val, tag, "i32")?),
        "i" => AMQPValue::LongUInt(int_in_range(val, tag, "u32")?),
        "l" => AMQPValue::LongLongInt(int_in_range(val, tag, "i64")?),
        "T" => AMQPValue::Timestamp(
            val.as_u64()
                .ok_or_else(|| expected("integer (u64 seconds)", tag, val))?,
        ),
        "f" => AMQPValue::Float(f32_from_typed(val, tag)?),
        "d" => AMQPValue::Double(f64_from_typed(val, tag)?),
        "D" => AMQPValue::DecimalValue(decimal_from_typed(val, tag)?),
        "_" => {
            let s = val.as_str().ok_or_else(|| expected("string", tag, val))?;
            AMQPValue::ShortString(short_string(s)?)
        }
        "S" => AMQPValue::LongString(LongString::from(bytes_from_typed(val, tag)?)),
        "x" => {
            let s = val
                .as_str()
                .ok_or_else(|| expected("base64 string", tag, val))?;
            AMQPValue::ByteArray(ByteArray::from(base64_decode(s)?))
        }
        "A" => {
            let items = val.as_array().ok_or_else(|| expected("array", tag, val))?;
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                out.push(value_from_typed(item).map_err(|e| e.under_index(i))?);
            }
            AMQPValue::FieldArray(FieldArray::from(out))
        }
        "F" => AMQPValue::FieldTable(table_from_typed(val)?),
        "V" => {
            if !val.is_null() {
                return Err(expected("null", tag, val));
            }
            AMQPValue::Void
        }
        other => {
            return Err(CodecError::new(format!("unknown type tag {other:?}")));
        }
    })
}

fn expected(what: &str, tag: &str, got: &Value) -> CodecError {
    CodecError::new(format!(
        "expected {what} for type tag {tag:?}, got {}",
        json_kind(got)
    ))
}

fn int_in_range<T: TryFrom<i64>>(val: &Value, tag: &str, ty: &str) -> Result<T, CodecError> {
    let Some(n) = val.as_i64() else {
        if let Value::Number(n) = val {
            return Err(CodecError::new(format!(
                "expected integer ({ty}) for type tag {tag:?}, got {n}"
            )));
        }
        return Err(expected(&format!("integer ({ty})"), tag, val));
    };
    T::try_from(n).map_err(|_| {
        CodecError::new(format!(
            "expected integer ({ty}) for type tag {tag:?}, {n} is out of range"
        ))
    })
}

fn special_float(s: &str) -> Option<f64> {
    match s {
        "NaN" => Some(f64::NAN),
        "inf" => Some(f64::INFINITY),
        "-inf" => Some(f64::NEG_INFINITY),
        _ => None,
    }
}

fn f32_from_typed(val: &Value, tag: &str) -> Result<f32, CodecError> {
    match val {
        // Parse the text straight to f32: going through f64 could round twice.
        Value::Number(n) => match n.to_string().parse::<f32>() {
            Ok(f) if f.is_finite() => Ok(f),
            _ => Err(CodecError::new(format!(
                "expected number in f32 range for type tag {tag:?}, got {n}"
            ))),
        },
        Value::String(s) => {
            if let Some(f) = special_float(s) {
                // f32::NAN has the bits the encoder writes as "NaN".
                return Ok(if f.is_nan() { f32::NAN } else { f as f32 });
            }
            hex_bits(s, 8)
                .map(|b| f32::from_bits(b as u32))
                .ok_or_else(|| bad_float_string(s, tag, 8))
        }
        _ => Err(expected("number", tag, val)),
    }
}

fn f64_from_typed(val: &Value, tag: &str) -> Result<f64, CodecError> {
    match val {
        Value::Number(n) => n.as_f64().ok_or_else(|| {
            CodecError::new(format!(
                "expected number in f64 range for type tag {tag:?}, got {n}"
            ))
        }),
        Value::String(s) => special_float(s)
            .or_else(|| hex_bits(s, 16).map(f64::from_bits))
            .ok_or_else(|| bad_float_string(s, tag, 16)),
        _ => Err(expected("number", tag, val)),
    }
}

fn bad_float_string(s: &str, tag: &str, digits: usize) -> CodecError {
    CodecError::new(format!(
        "expected number, \"NaN\", \"inf\", \"-inf\" or \"0x\" + {digits} hex digits for type tag {tag:?}, got {s:?}"
    ))
}

fn hex_bits(s: &str, digits: usize) -> Option<u64> {
    let hex = s.strip_prefix("0x")?;
    if hex.len() != digits || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

fn decimal_from_typed(val: &Value, tag: &str) -> Result<DecimalValue, CodecError> {
    match val.as_array().map(Vec::as_slice) {
        Some([scale, value]) => {
            let scale = int_in_range(scale, tag, "u8").map_err(|e| e.under_index(0))?;
            let value = int_in_range(value, tag, "u32").map_err(|e| e.under_index(1))?;
            Ok(DecimalValue { scale, value })
        }
        _ => Err(expected("[scale, value] array", tag, val)),
    }
}

fn bytes_from_typed(val: &Value, tag: &str) -> Result<Vec<u8>, CodecError> {
    match val {
        Value::String(s) => Ok(s.as_bytes().to_vec()),
        Value::Object(o) if o.len() == 1 => match o.get("base64") {
            Some(Value::String(b)) => base64_decode(b).map_err(|e| e.under_key("base64")),
            _ => Err(expected("string or {\"base64\": string}", tag, val)),
        },
        _ => Err(expected("string or {\"base64\": string}", tag, val)),
    }
}

fn base64_decode(s: &str) -> Result<Vec<u8>, CodecError> {
    B64.decode(s)
        .map_err(|e| CodecError::new(format!("invalid base64: {e}")))
}

const PROPERTY_NAMES: &[&str] = &[
    "content_type",
    "content_encoding",
    "headers",
    "delivery_mode",
    "priority",
    "correlation_id",
    "reply_to",
    "expiration",
    "message_id",
    "timestamp",
    "type",
    "user_id",
    "app_id",
    "cluster_id",
];

/// Lossless typed JSON of the basic properties, headers included as a typed table: the
/// tree of what [`TypedProperties`] writes (one list of the fields, not two).
pub fn properties_to_typed_json(p: &BasicProperties) -> Value {
    serde_json::to_value(TypedProperties(p)).expect("typed properties are JSON")
}

/// Typed JSON written straight to a serializer: the same text as
/// `value_to_typed_json(v).to_string()` without building the tree. The replay writes a
/// typed table per message and the id hash a typed property set per message, and building
/// the tree first cost more than the rest of either.
pub(crate) struct TypedValue<'a>(pub &'a AMQPValue);
/// [`table_to_typed_json`], written straight to a serializer.
pub(crate) struct TypedTable<'a>(pub &'a FieldTable);
/// [`properties_to_typed_json`], written straight to a serializer.
pub(crate) struct TypedProperties<'a>(pub &'a BasicProperties);

impl serde::Serialize for TypedValue<'_> {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeTuple as _;
        fn pair<S: serde::Serializer, T: serde::Serialize + ?Sized>(
            ser: S,
            tag: &str,
            value: &T,
        ) -> Result<S::Ok, S::Error> {
            let mut t = ser.serialize_tuple(2)?;
            t.serialize_element(tag)?;
            t.serialize_element(value)?;
            t.end()
        }
        struct Items<'a>(&'a [AMQPValue]);
        impl serde::Serialize for Items<'_> {
            fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
                ser.collect_seq(self.0.iter().map(TypedValue))
            }
        }
        match self.0 {
            AMQPValue::Boolean(b) => pair(ser, "t", b),
            AMQPValue::ShortShortInt(i) => pair(ser, "b", i),
            AMQPValue::ShortShortUInt(i) => pair(ser, "B", i),
            AMQPValue::ShortInt(i) => pair(ser, "s", i),
            AMQPValue::ShortUInt(i) => pair(ser, "u", i),
            AMQPValue::LongInt(i) => pair(ser, "I", i),
            AMQPValue::LongUInt(i) => pair(ser, "i", i),
            AMQPValue::LongLongInt(i) => pair(ser, "l", i),
            AMQPValue::ShortString(s) => pair(ser, "_", s.as_str()),
            AMQPValue::LongString(s) => match std::str::from_utf8(s.as_bytes()) {
                Ok(text) => pair(ser, "S", text),
                Err(_) => value_to_typed_json(self.0).serialize(ser),
            },
            AMQPValue::FieldArray(a) => pair(ser, "A", &Items(a.as_slice())),
            AMQPValue::Timestamp(t) => pair(ser, "T", t),
            AMQPValue::FieldTable(t) => pair(ser, "F", &TypedTable(t)),
            AMQPValue::Void => pair(ser, "V", &()),
            // Floats, decimals, byte arrays: rare, and their text has rules of its own.
            _ => value_to_typed_json(self.0).serialize(ser),
        }
    }
}

impl serde::Serialize for TypedTable<'_> {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        ser.collect_map(
            self.0
                .inner()
                .iter()
                .map(|(k, v)| (k.as_str(), TypedValue(v))),
        )
    }
}

impl serde::Serialize for TypedProperties<'_> {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let p = self.0;
        let mut m = ser.serialize_map(None)?;
        let text = |m: &mut S::SerializeMap, name: &str, v: &Option<ShortString>| match v {
            Some(v) => m.serialize_entry(name, v.as_str()),
            None => Ok(()),
        };
        text(&mut m, "content_type", p.content_type())?;
        text(&mut m, "content_encoding", p.content_encoding())?;
        if let Some(h) = p.headers() {
            m.serialize_entry("headers", &TypedTable(h))?;
        }
        if let Some(v) = p.delivery_mode() {
            m.serialize_entry("delivery_mode", v)?;
        }
        if let Some(v) = p.priority() {
            m.serialize_entry("priority", v)?;
        }
        text(&mut m, "correlation_id", p.correlation_id())?;
        text(&mut m, "reply_to", p.reply_to())?;
        text(&mut m, "expiration", p.expiration())?;
        text(&mut m, "message_id", p.message_id())?;
        if let Some(v) = p.timestamp() {
            m.serialize_entry("timestamp", v)?;
        }
        text(&mut m, "type", p.kind())?;
        text(&mut m, "user_id", p.user_id())?;
        text(&mut m, "app_id", p.app_id())?;
        text(&mut m, "cluster_id", p.cluster_id())?;
        m.end()
    }
}

/// Inverse of [`properties_to_typed_json`]. Unknown keys are an error.
pub(crate) fn properties_from_typed_json(v: &Value) -> Result<BasicProperties, CodecError> {
    properties_from_typed(v).map_err(CodecError::at_root)
}

fn properties_from_typed(v: &Value) -> Result<BasicProperties, CodecError> {
    let obj = v.as_object().ok_or_else(|| {
        CodecError::new(format!(
            "expected object (typed properties), got {}",
            json_kind(v)
        ))
    })?;
    let mut p = BasicProperties::default();
    for (k, val) in obj {
        p = set_property(p, k, val).map_err(|e| e.under_key(k))?;
    }
    Ok(p)
}

fn set_property(p: BasicProperties, key: &str, val: &Value) -> Result<BasicProperties, CodecError> {
    let text = || -> Result<ShortString, CodecError> {
        match val {
            Value::String(s) => short_string(s),
            _ => Err(CodecError::new(format!(
                "expected string, got {}",
                json_kind(val)
            ))),
        }
    };
    let octet = || -> Result<u8, CodecError> {
        val.as_u64()
            .and_then(|n| u8::try_from(n).ok())
            .ok_or_else(|| CodecError::new(format!("expected integer 0..=255, got {}", show(val))))
    };
    Ok(match key {
        "content_type" => p.with_content_type(text()?),
        "content_encoding" => p.with_content_encoding(text()?),
        "headers" => p.with_headers(table_from_typed(val)?),
        "delivery_mode" => p.with_delivery_mode(octet()?),
        "priority" => p.with_priority(octet()?),
        "correlation_id" => p.with_correlation_id(text()?),
        "reply_to" => p.with_reply_to(text()?),
        "expiration" => p.with_expiration(text()?),
        "message_id" => p.with_message_id(text()?),
        "timestamp" => p.with_timestamp(val.as_u64().ok_or_else(|| {
            CodecError::new(format!("expected integer (u64 seconds), got {}", show(val)))
        })?),
        "type" => p.with_type(text()?),
        "user_id" => p.with_user_id(text()?),
        "app_id" => p.with_app_id(text()?),
        "cluster_id" => p.with_cluster_id(text()?),
        _ => {
            return Err(CodecError::new(format!(
                "unknown property (expected one of {})",
                PROPERTY_NAMES.join(", ")
            )));
        }
    })
}

fn show(v: &Value) -> String {
    match v {
        Value::Number(n) => n.to_string(),
        other => json_kind(other).to_owned(),
    }
}

/// The broker's delivery count for a quorum-queue message (absent = never given back).
pub(crate) fn delivery_count(props: &BasicProperties) -> Option<i64> {
    match props.headers().as_ref()?.inner().get("x-delivery-count")? {
        AMQPValue::LongLongInt(n) => Some(*n),
        AMQPValue::LongInt(n) => Some(i64::from(*n)),
        AMQPValue::LongUInt(n) => Some(i64::from(*n)),
        AMQPValue::ShortInt(n) => Some(i64::from(*n)),
        AMQPValue::ShortUInt(n) => Some(i64::from(*n)),
        AMQPValue::ShortShortInt(n) => Some(i64::from(*n)),
        AMQPValue::ShortShortUInt(n) => Some(i64::from(*n)),
        _ => None,
    }
}

/// A stream message's offset.
pub(crate) fn stream_offset(props: &BasicProperties) -> Option<i64> {
    match props.headers().as_ref()?.inner().get("x-stream-offset")? {
        AMQPValue::LongLongInt(n) => Some(*n),
        AMQPValue::LongInt(n) => Some(i64::from(*n)),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
