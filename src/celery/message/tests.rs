//! Unit and property tests of Celery task messages: building, validation, reprs.

use super::validate::{is_decimal_literal, is_uuid_hex};
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
    let text =
        "[12345678901234567890.123456789, 1e400, -0.0, 1E+2, 123456789012345678901234567890, 0.1]";
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
}

#[test]
fn validate_refuses_bad_header_values() {
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
