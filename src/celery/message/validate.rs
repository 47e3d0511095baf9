//! Re-checking a built task message the way a stock worker's receive path reads it: what
//! Python's json, kombu's markers and Celery's headers accept. Pure: no I/O.

use super::*;

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
    if let Some(v) = get("timelimit") {
        check_timelimit(v)?;
    }
    for name in ["eta", "expires"] {
        match get(name) {
            None | Some(AMQPValue::Void) => {}
            Some(_) => return Err(InvalidTask::Scheduled { name }),
        }
    }
    Ok(())
}

/// `[hard, soft]`, each null or a number: any other length crashes the worker's receive path.
fn check_timelimit(v: &AMQPValue) -> Result<(), InvalidTask> {
    let items = match v {
        AMQPValue::Void => return Ok(()),
        AMQPValue::FieldArray(items) => items.as_slice(),
        v => return Err(header_type("timelimit", v, "an array of 2")),
    };
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
pub(super) fn check_task_name(name: &str) -> Result<(), InvalidTask> {
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
pub(super) fn is_kombu_marker(map: &Map<String, Value>) -> bool {
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
pub(super) fn is_decimal_literal(s: &str) -> bool {
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
pub(super) fn is_uuid_hex(h: &str) -> bool {
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
