//! Unit and property tests of the AMQP <-> JSON codec.

use super::*;
use crate::rabbit::death::*;
use lapin::types::generation::gen_field_table;
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;

fn ls(s: &str) -> AMQPValue {
    AMQPValue::LongString(s.into())
}

fn table(entries: Vec<(&str, AMQPValue)>) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in entries {
        t.insert(k.into(), v);
    }
    t
}

fn arr(items: Vec<AMQPValue>) -> AMQPValue {
    AMQPValue::FieldArray(items.into())
}

/// Field-table bytes exactly as lapin puts them on the wire.
fn wire(t: &FieldTable) -> Vec<u8> {
    gen_field_table(t)(Vec::new().into())
        .expect("serialize field table")
        .write
}

fn properties_wire(p: &BasicProperties) -> Vec<u8> {
    lapin::protocol::basic::gen_properties(p)(Vec::new().into())
        .expect("serialize properties")
        .write
}

#[test]
fn properties_round_trip_through_their_wire_form() {
    let p = BasicProperties::default()
        .with_content_type("application/json".into())
        .with_delivery_mode(2)
        .with_message_id("m-1".into())
        .with_headers(broker_headers());
    let bytes = encode_properties(&p).unwrap();
    assert_eq!(&bytes[..], &properties_wire(&p)[..]);
    assert_eq!(decode_properties(&bytes), Some(p));
    assert_eq!(decode_properties(&bytes[..bytes.len() - 1]), None);
}

/// `x-death` as RabbitMQ 3.10 writes it after one reject from `orders`.
fn broker_headers() -> FieldTable {
    let death = table(vec![
        ("count", AMQPValue::LongLongInt(1)),
        ("exchange", ls("")),
        ("queue", ls("orders")),
        ("reason", ls("rejected")),
        ("routing-keys", arr(vec![ls("orders")])),
        ("time", AMQPValue::Timestamp(1_700_000_000)),
    ]);
    table(vec![
        ("x-death", arr(vec![AMQPValue::FieldTable(death)])),
        ("x-first-death-exchange", ls("")),
        ("x-first-death-queue", ls("orders")),
        ("x-first-death-reason", ls("rejected")),
    ])
}

// ----- readable view -----

#[test]
fn readable_view_of_every_type() {
    let t = table(vec![
        ("bool", AMQPValue::Boolean(true)),
        ("i8", AMQPValue::ShortShortInt(-8)),
        ("u8", AMQPValue::ShortShortUInt(200)),
        ("i16", AMQPValue::ShortInt(-300)),
        ("u16", AMQPValue::ShortUInt(60000)),
        ("i32", AMQPValue::LongInt(i32::MIN)),
        ("u32", AMQPValue::LongUInt(u32::MAX)),
        ("i64", AMQPValue::LongLongInt(i64::MIN)),
        ("f32", AMQPValue::Float(0.1)),
        ("f64", AMQPValue::Double(2.5)),
        ("nan", AMQPValue::Double(f64::NAN)),
        ("inf", AMQPValue::Float(f32::INFINITY)),
        ("ninf", AMQPValue::Double(f64::NEG_INFINITY)),
        (
            "dec",
            AMQPValue::DecimalValue(DecimalValue {
                scale: 2,
                value: 12340,
            }),
        ),
        ("short", AMQPValue::ShortString("hi".into())),
        ("text", ls("olá")),
        ("bin", AMQPValue::LongString(vec![0xff, 0x00].into())),
        ("ts", AMQPValue::Timestamp(1_700_000_000)),
        ("bytes", AMQPValue::ByteArray(vec![1, 2, 3].into())),
        ("void", AMQPValue::Void),
        (
            "nested",
            arr(vec![
                AMQPValue::FieldTable(table(vec![("k", ls("v"))])),
                AMQPValue::LongLongInt(1),
            ]),
        ),
    ]);
    let got = table_to_json(&t).to_string();
    assert_eq!(
        got,
        r#"{"bin":{"base64":"/wA="},"bool":true,"bytes":{"base64":"AQID"},"dec":123.40,"f32":0.1,"f64":2.5,"i16":-300,"i32":-2147483648,"i64":-9223372036854775808,"i8":-8,"inf":"inf","nan":"NaN","nested":[{"k":"v"},1],"ninf":"-inf","short":"hi","text":"olá","ts":"2023-11-14T22:13:20Z","u16":60000,"u32":4294967295,"u8":200,"void":null}"#
    );
}

#[test]
fn readable_decimal_keeps_scale_and_leading_zeros() {
    let dec = |scale, value| {
        value_to_json(&AMQPValue::DecimalValue(DecimalValue { scale, value })).to_string()
    };
    assert_eq!(dec(0, 42), "42");
    assert_eq!(dec(3, 5), "0.005");
    assert_eq!(dec(2, 0), "0.00");
    assert_eq!(dec(1, u32::MAX), "429496729.5");
    assert_eq!(dec(12, 7), "0.000000000007");
}

#[test]
fn readable_timestamp_out_of_range_stays_a_number() {
    assert_eq!(
        value_to_json(&AMQPValue::Timestamp(u64::MAX)),
        json!(u64::MAX)
    );
    assert_eq!(
        value_to_json(&AMQPValue::Timestamp(0)),
        json!("1970-01-01T00:00:00Z")
    );
}

#[test]
fn readable_properties_omit_absent_and_headers() {
    let p = BasicProperties::default()
        .with_content_type("application/json".into())
        .with_delivery_mode(2)
        .with_priority(0)
        .with_message_id("m-1".into())
        .with_timestamp(1_700_000_000)
        .with_type("order.created".into())
        .with_headers(broker_headers());
    assert_eq!(
        properties_to_json(&p).to_string(),
        r#"{"content_type":"application/json","delivery_mode":2,"priority":0,"message_id":"m-1","timestamp":"2023-11-14T22:13:20Z","type":"order.created"}"#
    );
    assert_eq!(properties_to_json(&BasicProperties::default()), json!({}));
}

// ----- typed encoding -----

#[test]
fn typed_format_is_tag_value_pairs() {
    let t = table(vec![
        ("n", AMQPValue::LongLongInt(5)),
        ("s", ls("x")),
        ("bin", AMQPValue::LongString(vec![0xc3].into())),
        (
            "d",
            AMQPValue::DecimalValue(DecimalValue {
                scale: 2,
                value: 199,
            }),
        ),
        ("f", AMQPValue::Float(0.1)),
        (
            "nan",
            AMQPValue::Double(f64::from_bits(0x7ff0_0000_0000_0001)),
        ),
        ("neg0", AMQPValue::Double(-0.0)),
        ("a", arr(vec![AMQPValue::Void, AMQPValue::Boolean(false)])),
        ("x", AMQPValue::ByteArray(vec![1, 2].into())),
        ("T", AMQPValue::Timestamp(7)),
        ("sh", AMQPValue::ShortString("k".into())),
        ("i16", AMQPValue::ShortInt(-1)),
    ]);
    assert_eq!(
        table_to_typed_json(&t).to_string(),
        r#"{"T":["T",7],"a":["A",[["V",null],["t",false]]],"bin":["S",{"base64":"ww=="}],"d":["D",[2,199]],"f":["f",0.1],"i16":["s",-1],"n":["l",5],"nan":["d","0x7ff0000000000001"],"neg0":["d",-0.0],"s":["S","x"],"sh":["_","k"],"x":["x","AQI="]}"#
    );
    let back = table_from_typed_json(&table_to_typed_json(&t)).unwrap();
    assert_eq!(wire(&back), wire(&t));
}

#[test]
fn typed_writers_write_what_the_tree_writes() {
    let mut every = table(vec![
        ("n", AMQPValue::LongLongInt(5)),
        ("bin", AMQPValue::LongString(vec![0xc3].into())),
        ("esc", ls("a\"b\\c\u{1}ção")),
        (
            "d",
            AMQPValue::DecimalValue(DecimalValue {
                scale: 2,
                value: 199,
            }),
        ),
        ("f", AMQPValue::Float(0.1)),
        ("g", AMQPValue::Double(f64::NAN)),
        ("neg0", AMQPValue::Double(-0.0)),
        ("a", arr(vec![AMQPValue::Void, AMQPValue::Boolean(false)])),
        ("x", AMQPValue::ByteArray(vec![1, 2].into())),
        ("T", AMQPValue::Timestamp(7)),
        ("sh", AMQPValue::ShortString("k".into())),
        ("i8", AMQPValue::ShortShortInt(-3)),
        ("u8", AMQPValue::ShortShortUInt(3)),
        ("i16", AMQPValue::ShortInt(-1)),
        ("u16", AMQPValue::ShortUInt(1)),
        ("i32", AMQPValue::LongInt(-7)),
        ("u32", AMQPValue::LongUInt(u32::MAX)),
        ("empty", AMQPValue::FieldTable(FieldTable::default())),
    ]);
    for (k, v) in broker_headers().inner() {
        every.insert(k.clone(), v.clone());
    }
    assert_eq!(
        serde_json::to_string(&TypedTable(&every)).unwrap(),
        table_to_typed_json(&every).to_string()
    );
}

#[test]
fn typed_properties_text() {
    let props = BasicProperties::default()
        .with_content_type("application/json".into())
        .with_content_encoding("utf-8".into())
        .with_headers(table(vec![
            ("n", AMQPValue::LongLongInt(5)),
            ("s", ls("x")),
        ]))
        .with_delivery_mode(2)
        .with_priority(4)
        .with_correlation_id("c".into())
        .with_reply_to("r".into())
        .with_expiration("60000".into())
        .with_message_id("m".into())
        .with_timestamp(9)
        .with_type("t".into())
        .with_user_id("guest".into())
        .with_app_id("a".into())
        .with_cluster_id("k".into());
    let text = r#"{"content_type":"application/json","content_encoding":"utf-8","headers":{"n":["l",5],"s":["S","x"]},"delivery_mode":2,"priority":4,"correlation_id":"c","reply_to":"r","expiration":"60000","message_id":"m","timestamp":9,"type":"t","user_id":"guest","app_id":"a","cluster_id":"k"}"#;
    assert_eq!(
        serde_json::to_string(&TypedProperties(&props)).unwrap(),
        text
    );
    let tree: Value = serde_json::from_str(text).unwrap();
    assert_eq!(properties_to_typed_json(&props), tree);
    let bare = BasicProperties::default();
    assert_eq!(
        serde_json::to_string(&TypedProperties(&bare)).unwrap(),
        "{}"
    );
}

#[test]
fn typed_special_floats() {
    for (f, text) in [
        (f64::NAN, r#"["d","NaN"]"#),
        (f64::INFINITY, r#"["d","inf"]"#),
        (f64::NEG_INFINITY, r#"["d","-inf"]"#),
        (-f64::NAN, r#"["d","0xfff8000000000000"]"#),
    ] {
        let v = value_to_typed_json(&AMQPValue::Double(f));
        assert_eq!(v.to_string(), text);
        match value_from_typed_json(&v).unwrap() {
            AMQPValue::Double(g) => assert_eq!(g.to_bits(), f.to_bits()),
            other => panic!("{other:?}"),
        }
    }
    let v = value_to_typed_json(&AMQPValue::Float(f32::from_bits(0x7fa0_0001)));
    assert_eq!(v.to_string(), r#"["f","0x7fa00001"]"#);
    // f32 text is parsed as f32 itself; the largest f32 is accepted, past it is an error.
    let v: Value = serde_json::from_str(r#"["f",3.4028235e38]"#).unwrap();
    assert_eq!(
        value_from_typed_json(&v).unwrap(),
        AMQPValue::Float(f32::MAX)
    );
}

#[test]
fn typed_survives_a_text_round_trip() {
    let t = broker_headers();
    let text = serde_json::to_string_pretty(&table_to_typed_json(&t)).unwrap();
    let back = table_from_typed_json(&serde_json::from_str(&text).unwrap()).unwrap();
    assert_eq!(wire(&back), wire(&t));
}

#[test]
fn typed_properties_round_trip() {
    let p = BasicProperties::default()
        .with_content_type("application/json".into())
        .with_content_encoding("utf-8".into())
        .with_headers(broker_headers())
        .with_delivery_mode(2)
        .with_priority(9)
        .with_correlation_id("c".into())
        .with_reply_to("r".into())
        .with_expiration("60000".into())
        .with_message_id("m".into())
        .with_timestamp(u64::MAX)
        .with_type("t".into())
        .with_user_id("guest".into())
        .with_app_id("app".into())
        .with_cluster_id("cl".into());
    let v = properties_to_typed_json(&p);
    assert_eq!(v["headers"]["x-death"][0], json!("A"));
    assert_eq!(v["timestamp"], json!(u64::MAX));
    let back = properties_from_typed_json(&v).unwrap();
    assert_eq!(back, p);
    assert_eq!(properties_wire(&back), properties_wire(&p));
    assert_eq!(
        properties_from_typed_json(&json!({})).unwrap(),
        BasicProperties::default()
    );
}

fn err_of(v: Value) -> String {
    properties_from_typed_json(&v).unwrap_err().to_string()
}

#[test]
fn typed_errors_name_the_path() {
    let bad_count = json!({"headers": {"x-death": ["A", [["F", {"count": ["l", "1"]}]]]}});
    let e = err_of(bad_count);
    assert!(
        e.starts_with("headers.x-death[0].count: expected integer"),
        "{e}"
    );
    let e = err_of(json!({"headers": {"a": ["A", [["l", 1], ["A", [["b", 300]]]]]}}));
    assert!(
        e.starts_with("headers.a[1][0]: expected integer (i8)"),
        "{e}"
    );
    assert!(e.contains("out of range"), "{e}");
    let e = err_of(json!({"headers": {"a": ["q", 1]}}));
    assert_eq!(e, r#"headers.a: unknown type tag "q""#);
    let e = err_of(json!({"headers": {"a": ["S", {"base64": "!!"}]}}));
    assert!(e.starts_with("headers.a.base64: invalid base64"), "{e}");
    let e = err_of(json!({"headers": {"a": ["l", 1, 2]}}));
    assert!(
        e.starts_with("headers.a: expected [tag, value] pair"),
        "{e}"
    );
    let e = err_of(json!({"headers": {"a": ["D", [2, -1]]}}));
    assert!(e.starts_with("headers.a[1]: expected integer (u32)"), "{e}");
    let e = err_of(json!({"headers": {"a": ["d", "nope"]}}));
    assert!(e.starts_with("headers.a: expected number"), "{e}");
    let e = err_of(json!({"headers": {"a": ["f", 1e39]}}));
    assert!(e.contains("f32 range"), "{e}");
    let e = err_of(json!({"priority": 256}));
    assert_eq!(e, "priority: expected integer 0..=255, got 256");
    let e = err_of(json!({"delivery_mode": "2"}));
    assert_eq!(e, "delivery_mode: expected integer 0..=255, got string");
    let e = err_of(json!({"colour": "red"}));
    assert!(e.starts_with("colour: unknown property"), "{e}");
    let e = err_of(json!({"message_id": "x".repeat(256)}));
    assert!(
        e.starts_with("message_id: short string is 256 bytes"),
        "{e}"
    );
    let long_key = "k".repeat(256);
    let e = err_of(json!({"headers": {long_key.clone(): ["V", null]}}));
    assert!(
        e.starts_with(&format!("headers.{long_key}: short string")),
        "{e}"
    );
    assert_eq!(
        err_of(json!([])),
        "<root>: expected object (typed properties), got array"
    );
    let e = table_from_typed_json(&json!({"a": ["V", 1]})).unwrap_err();
    assert_eq!(e.path, "a");
    let e = table_from_typed_json(&json!("x")).unwrap_err();
    assert_eq!(e.path, "<root>");
    // 255 bytes is the limit, not beyond it.
    let ok = "k".repeat(255);
    assert!(table_from_typed_json(&json!({ok: ["V", null]})).is_ok());
}

// ----- dead-letter history -----

#[test]
fn parses_a_broker_written_history() {
    let info = parse_deaths(Some(&broker_headers()));
    assert!(info.warnings.is_empty(), "{:?}", info.warnings);
    assert_eq!(info.deaths.len(), 1);
    let d = &info.deaths[0];
    assert_eq!(d.queue.as_deref(), Some("orders"));
    assert_eq!(d.reason.as_deref(), Some("rejected"));
    assert_eq!(d.count, Some(1));
    assert_eq!(d.time, DateTime::from_timestamp(1_700_000_000, 0));
    assert_eq!(d.exchange.as_deref(), Some(""));
    assert_eq!(d.routing_keys, vec!["orders".to_owned()]);
    assert_eq!(info.origin_queue(), Some("orders"));
    assert_eq!(info.total_count(), 1);
    assert_eq!(info.first_death_exchange.as_deref(), Some(""));
    let j = info.to_json();
    assert_eq!(j["deaths"][0]["time"], json!("2023-11-14T22:13:20Z"));
    assert_eq!(j["origin_queue"], json!("orders"));
    assert_eq!(j["last_death_reason"], Value::Null);
    assert_eq!(j["warnings"], json!([]));
}

#[test]
fn origin_is_the_oldest_entry_without_first_death_header() {
    let newer = table(vec![
        ("queue", ls("retry")),
        ("reason", ls("expired")),
        ("count", AMQPValue::LongInt(3)),
    ]);
    let older = table(vec![
        ("queue", ls("orders")),
        ("reason", ls("rejected")),
        ("count", AMQPValue::ShortShortUInt(2)),
        ("time", AMQPValue::LongLongInt(1_700_000_000)),
    ]);
    let h = table(vec![(
        "x-death",
        arr(vec![
            AMQPValue::FieldTable(newer),
            AMQPValue::FieldTable(older),
        ]),
    )]);
    let info = parse_deaths(Some(&h));
    assert!(info.warnings.is_empty(), "{:?}", info.warnings);
    assert_eq!(info.origin_queue(), Some("orders"));
    assert_eq!(info.total_count(), 5);
    assert_eq!(info.latest_reason(), Some("expired"));
    assert_eq!(
        info.deaths[1].time,
        DateTime::from_timestamp(1_700_000_000, 0)
    );
}

#[test]
fn odd_headers_become_warnings() {
    let odd = table(vec![
        ("queue", AMQPValue::LongString(vec![b'q', 0xff].into())),
        ("count", ls("3")),
        ("time", AMQPValue::Double(1.5)),
        ("routing-keys", ls("rk")),
        ("reason", AMQPValue::LongLongInt(7)),
    ]);
    let h = table(vec![
        (
            "x-death",
            arr(vec![
                AMQPValue::LongLongInt(1),
                AMQPValue::FieldTable(odd),
                AMQPValue::FieldTable(FieldTable::default()),
            ]),
        ),
        ("x-first-death-queue", AMQPValue::Boolean(true)),
        (
            "x-last-death-reason",
            AMQPValue::ShortString("maxlen".into()),
        ),
    ]);
    let info = parse_deaths(Some(&h));
    assert_eq!(
        info.warnings,
        vec![
            "x-first-death-queue is a boolean",
            "x-death[0] is an i64, expected a table",
            "x-death[1].count is a string",
            "x-death[1].queue is not valid UTF-8",
            "x-death[1].reason is an i64",
            "x-death[1].routing-keys is a string, expected an array",
            "x-death[1].time is an f64",
        ]
    );
    assert_eq!(info.deaths.len(), 2);
    assert_eq!(info.deaths[0].count, Some(3));
    assert_eq!(info.deaths[0].queue.as_deref(), Some("q\u{fffd}"));
    assert_eq!(info.deaths[0].routing_keys, vec!["rk".to_owned()]);
    assert_eq!(info.deaths[1], Death::default());
    // The one readable queue name (lossy) is where it goes back.
    assert_eq!(info.origin_queue(), Some("q\u{fffd}"));
    assert_eq!(info.total_count(), 4);
    assert_eq!(info.latest_reason(), Some("maxlen"));

    let not_array = table(vec![("x-death", ls("nope"))]);
    let info = parse_deaths(Some(&not_array));
    assert_eq!(
        info.warnings,
        vec!["x-death is a string, expected an array"]
    );
    assert!(info.is_empty());
    assert_eq!(parse_deaths(None), DeathInfo::default());
}

// ----- reason text -----

fn with(mut t: FieldTable, entries: Vec<(&str, AMQPValue)>) -> FieldTable {
    for (k, v) in entries {
        t.insert(k.into(), v);
    }
    t
}

fn reason(h: &FieldTable, extra: &[&str]) -> Option<String> {
    let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    reason_text(Some(h), &parse_deaths(Some(h)), &extra)
}

#[test]
fn reason_joins_dead_letter_reason_and_error_text() {
    let h = with(
        broker_headers(),
        vec![
            ("x-exception-message", ls("KeyError: 'usuario_id'")),
            ("x-exception-stacktrace", ls("java.lang.Foo\n\tat x")),
        ],
    );
    assert_eq!(
        reason(&h, &[]).as_deref(),
        Some("rejected: KeyError: 'usuario_id'")
    );
    assert_eq!(reason(&broker_headers(), &[]).as_deref(), Some("rejected"));
    assert_eq!(reason(&FieldTable::default(), &[]), None);
    assert_eq!(reason_text(None, &DeathInfo::default(), &[]), None);
}

#[test]
fn reason_uses_stack_trace_only_line_that_matters() {
    let java = with(
        broker_headers(),
        vec![(
            "x-exception-stacktrace",
            ls(
                "java.lang.IllegalStateException: no stock\n\tat com.shop.Orders.take(Orders.java:42)\n",
            ),
        )],
    );
    assert_eq!(
        reason(&java, &[]).as_deref(),
        Some("rejected: java.lang.IllegalStateException: no stock")
    );
    let python = table(vec![(
        "x-exception-stacktrace",
        ls(
            "Traceback (most recent call last):\n  File \"t.py\", line 3, in f\n    d['usuario_id']\nKeyError: 'usuario_id'\n",
        ),
    )]);
    assert_eq!(
        reason(&python, &[]).as_deref(),
        Some("KeyError: 'usuario_id'")
    );
}

#[test]
fn reason_knows_masstransit_nservicebus_and_generic_headers() {
    let mt = with(
        broker_headers(),
        vec![
            ("MT-Fault-Message", ls("Order not found")),
            (
                "MT-Fault-ExceptionType",
                ls("System.InvalidOperationException"),
            ),
        ],
    );
    assert_eq!(
        reason(&mt, &[]).as_deref(),
        Some("rejected: System.InvalidOperationException: Order not found")
    );
    let mt_type_only = table(vec![("MT-Fault-ExceptionType", ls("System.Exception"))]);
    assert_eq!(
        reason(&mt_type_only, &[]).as_deref(),
        Some("System.Exception")
    );
    let nsb = table(vec![
        ("NServiceBus.ExceptionInfo.Message", ls("boom")),
        (
            "NServiceBus.ExceptionInfo.ExceptionType",
            AMQPValue::ShortString("System.Exception".into()),
        ),
    ]);
    assert_eq!(reason(&nsb, &[]).as_deref(), Some("System.Exception: boom"));
    let generic = table(vec![
        ("motivo", ls("cliente inválido")),
        ("reason", ls("ignored: lower priority")),
    ]);
    assert_eq!(reason(&generic, &[]).as_deref(), Some("cliente inválido"));
    let case = table(vec![("Error", ls("Bad input"))]);
    assert_eq!(reason(&case, &[]).as_deref(), Some("Bad input"));
    let nested = table(vec![(
        "error",
        AMQPValue::FieldTable(table(vec![
            ("code", AMQPValue::LongInt(4)),
            ("message", ls("nested text")),
        ])),
    )]);
    assert_eq!(reason(&nested, &[]).as_deref(), Some("nested text"));
}

#[test]
fn reason_checks_extra_headers_first_and_is_defensive() {
    let h = with(
        broker_headers(),
        vec![
            ("x-exception-message", ls("generic")),
            (
                "x-app-error",
                AMQPValue::LongString(vec![b'b', b'a', b'd', 0xff].into()),
            ),
            ("blank", ls("   \n  ")),
        ],
    );
    assert_eq!(
        reason(&h, &["blank", "x-app-error"]).as_deref(),
        Some("rejected: bad\u{fffd}")
    );
    let same = with(broker_headers(), vec![("reason", ls("rejected"))]);
    assert_eq!(reason(&same, &[]).as_deref(), Some("rejected"));
    let long = table(vec![("error", ls(&"é".repeat(1000)))]);
    let r = reason(&long, &[]).unwrap();
    assert_eq!(r.chars().count(), MAX_ERROR_TEXT_CHARS + 1);
    assert!(r.ends_with('…'));
    let numeric = table(vec![("error", AMQPValue::LongLongInt(500))]);
    assert_eq!(reason(&numeric, &[]).as_deref(), Some("500"));
}

#[test]
fn celery_task_name_from_task_header() {
    let h = table(vec![("task", ls("shop.tasks.charge"))]);
    assert_eq!(
        celery_task_name(Some(&h)).as_deref(),
        Some("shop.tasks.charge")
    );
    let h = table(vec![("task", AMQPValue::LongLongInt(1))]);
    assert_eq!(celery_task_name(Some(&h)), None);
    assert_eq!(celery_task_name(None), None);
}

// ----- properties -----

/// Bitwise equality: `PartialEq` on floats says NaN != NaN and 0.0 == -0.0.
fn same_value(a: &AMQPValue, b: &AMQPValue) -> bool {
    match (a, b) {
        (AMQPValue::Float(x), AMQPValue::Float(y)) => x.to_bits() == y.to_bits(),
        (AMQPValue::Double(x), AMQPValue::Double(y)) => x.to_bits() == y.to_bits(),
        (AMQPValue::FieldArray(x), AMQPValue::FieldArray(y)) => {
            x.as_slice().len() == y.as_slice().len()
                && x.as_slice()
                    .iter()
                    .zip(y.as_slice())
                    .all(|(x, y)| same_value(x, y))
        }
        (AMQPValue::FieldTable(x), AMQPValue::FieldTable(y)) => same_table(x, y),
        _ => a == b,
    }
}

fn same_table(a: &FieldTable, b: &FieldTable) -> bool {
    a.inner().len() == b.inner().len()
        && a.inner()
            .iter()
            .zip(b.inner())
            .all(|((ka, va), (kb, vb))| ka == kb && same_value(va, vb))
}

fn arb_short_string() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9._-]{0,20}",
        ".{0,40}",
        Just("k".repeat(MAX_SHORT_STRING_BYTES)),
        Just(String::new()),
    ]
}

fn arb_f32() -> impl Strategy<Value = f32> {
    prop_oneof![
        any::<u32>().prop_map(f32::from_bits),
        // NaN payloads, both signs, infinities, zeros, subnormals, extremes.
        (any::<bool>(), 1u32..0x80_0000)
            .prop_map(|(s, p)| f32::from_bits((u32::from(s) << 31) | 0x7f80_0000 | p)),
        prop::sample::select(vec![
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
            f32::MIN_POSITIVE,
            f32::from_bits(1),
            f32::MAX,
            f32::MIN,
            0.1,
            16_777_217.0,
        ]),
    ]
}

fn arb_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<u64>().prop_map(f64::from_bits),
        (any::<bool>(), 1u64..(1 << 52))
            .prop_map(|(s, p)| f64::from_bits((u64::from(s) << 63) | 0x7ff0_0000_0000_0000 | p)),
        prop::sample::select(vec![
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            0.0,
            -0.0,
            f64::MIN_POSITIVE,
            f64::from_bits(1),
            f64::MAX,
            f64::MIN,
            0.1,
            1e300,
        ]),
    ]
}

fn arb_i64() -> impl Strategy<Value = i64> {
    prop_oneof![
        any::<i64>(),
        prop::sample::select(vec![i64::MIN, i64::MIN + 1, -1, 0, 1, i64::MAX]),
    ]
}

fn arb_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        vec(any::<u8>(), 0..48),
        ".{0,30}".prop_map(String::into_bytes),
        // Valid UTF-8 with an invalid byte in the middle.
        ("[a-z]{0,5}", "[a-z]{0,5}").prop_map(|(a, b)| {
            let mut v = a.into_bytes();
            v.push(0xc3);
            v.extend(b.into_bytes());
            v
        }),
    ]
}

fn arb_leaf() -> impl Strategy<Value = AMQPValue> {
    prop_oneof![
        any::<bool>().prop_map(AMQPValue::Boolean),
        any::<i8>().prop_map(AMQPValue::ShortShortInt),
        any::<u8>().prop_map(AMQPValue::ShortShortUInt),
        any::<i16>().prop_map(AMQPValue::ShortInt),
        any::<u16>().prop_map(AMQPValue::ShortUInt),
        any::<i32>().prop_map(AMQPValue::LongInt),
        any::<u32>().prop_map(AMQPValue::LongUInt),
        arb_i64().prop_map(AMQPValue::LongLongInt),
        arb_f32().prop_map(AMQPValue::Float),
        arb_f64().prop_map(AMQPValue::Double),
        (any::<u8>(), any::<u32>())
            .prop_map(|(scale, value)| AMQPValue::DecimalValue(DecimalValue { scale, value })),
        arb_short_string().prop_map(|s| AMQPValue::ShortString(s.into())),
        arb_bytes().prop_map(|b| AMQPValue::LongString(b.into())),
        prop_oneof![any::<u64>(), Just(u64::MAX), Just(0u64)].prop_map(AMQPValue::Timestamp),
        arb_bytes().prop_map(|b| AMQPValue::ByteArray(b.into())),
        Just(AMQPValue::Void),
    ]
}

fn arb_value() -> impl Strategy<Value = AMQPValue> {
    arb_leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..6).prop_map(|v| AMQPValue::FieldArray(v.into())),
            btree_map(arb_short_string(), inner, 0..6).prop_map(|m| {
                let m: std::collections::BTreeMap<ShortString, AMQPValue> =
                    m.into_iter().map(|(k, v)| (k.into(), v)).collect();
                AMQPValue::FieldTable(m.into())
            }),
        ]
    })
}

fn arb_table() -> impl Strategy<Value = FieldTable> {
    btree_map(arb_short_string(), arb_value(), 0..8).prop_map(|m| {
        let m: std::collections::BTreeMap<ShortString, AMQPValue> =
            m.into_iter().map(|(k, v)| (k.into(), v)).collect();
        FieldTable::from(m)
    })
}

fn arb_properties() -> impl Strategy<Value = BasicProperties> {
    let s = || proptest::option::of(arb_short_string());
    let a = (
        s(),
        s(),
        proptest::option::of(arb_table()),
        proptest::option::of(any::<u8>()),
    );
    let b = (proptest::option::of(any::<u8>()), s(), s(), s(), s());
    let c = (proptest::option::of(any::<u64>()), s(), s(), s(), s());
    (a, b, c).prop_map(
        |(
            (content_type, content_encoding, headers, delivery_mode),
            (priority, correlation_id, reply_to, expiration, message_id),
            (timestamp, kind, user_id, app_id, cluster_id),
        )| {
            let mut p = BasicProperties::default();
            macro_rules! set {
                ($field:expr, $with:ident) => {
                    if let Some(v) = $field {
                        p = p.$with(v.into());
                    }
                };
            }
            set!(content_type, with_content_type);
            set!(content_encoding, with_content_encoding);
            set!(headers, with_headers);
            set!(delivery_mode, with_delivery_mode);
            set!(priority, with_priority);
            set!(correlation_id, with_correlation_id);
            set!(reply_to, with_reply_to);
            set!(expiration, with_expiration);
            set!(message_id, with_message_id);
            set!(timestamp, with_timestamp);
            set!(kind, with_type);
            set!(user_id, with_user_id);
            set!(app_id, with_app_id);
            set!(cluster_id, with_cluster_id);
            p
        },
    )
}

/// Mostly x-death-shaped tables with random values, so parsing meets odd types where it looks.
fn arb_death_headers() -> impl Strategy<Value = FieldTable> {
    let field = prop::sample::select(vec![
        "queue",
        "reason",
        "count",
        "time",
        "exchange",
        "routing-keys",
        "original-expiration",
    ]);
    let death = btree_map(field, arb_value(), 0..7).prop_map(|m| {
        AMQPValue::FieldTable(
            m.into_iter()
                .map(|(k, v)| (ShortString::from(k), v))
                .collect::<std::collections::BTreeMap<_, _>>()
                .into(),
        )
    });
    let header = prop::sample::select(vec![
        "x-first-death-queue",
        "x-first-death-reason",
        "x-last-death-reason",
        "x-exception-message",
        "x-exception-stacktrace",
        "MT-Fault-Message",
        "error",
        "task",
    ]);
    (
        prop_oneof![
            vec(prop_oneof![death, arb_value()], 0..4)
                .prop_map(|v| AMQPValue::FieldArray(v.into())),
            arb_value(),
        ],
        btree_map(header, arb_value(), 0..5),
    )
        .prop_map(|(x_death, extra)| {
            let mut t = FieldTable::default();
            t.insert("x-death".into(), x_death);
            for (k, v) in extra {
                t.insert(k.into(), v);
            }
            t
        })
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        prop::sample::select(vec![
            "t",
            "b",
            "l",
            "f",
            "d",
            "D",
            "S",
            "_",
            "x",
            "A",
            "F",
            "T",
            "V",
            "NaN",
            "0x7ff00000"
        ])
        .prop_map(Value::from),
        ".{0,8}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::Array),
            (
                prop::sample::select(vec!["t", "l", "S", "A", "F", "x"]),
                inner.clone()
            )
                .prop_map(|(t, v)| json!([t, v])),
            btree_map(".{0,4}", inner, 0..4).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn typed_table_round_trips_exactly(t in arb_table()) {
        let v = table_to_typed_json(&t);
        let back = table_from_typed_json(&v).unwrap();
        prop_assert!(same_table(&back, &t), "{back:?} != {t:?}");
        prop_assert_eq!(wire(&back), wire(&t));
        // Through a file too: the archive is text.
        let text = serde_json::to_string(&v).unwrap();
        let reread: Value = serde_json::from_str(&text).unwrap();
        let back = table_from_typed_json(&reread).unwrap();
        prop_assert_eq!(wire(&back), wire(&t));
        // Encoding is a function of the value: re-encoding gives the same text.
        prop_assert_eq!(serde_json::to_string(&table_to_typed_json(&back)).unwrap(), text);
    }

    #[test]
    fn typed_properties_round_trip_exactly(p in arb_properties()) {
        let text = serde_json::to_string(&properties_to_typed_json(&p)).unwrap();
        let back = properties_from_typed_json(&serde_json::from_str(&text).unwrap()).unwrap();
        prop_assert_eq!(properties_wire(&back), properties_wire(&p));
        match (back.headers(), p.headers()) {
            (Some(a), Some(b)) => prop_assert!(same_table(a, b)),
            (None, None) => {}
            _ => prop_assert!(false, "headers presence differs"),
        }
        let strip = |p: &BasicProperties| properties_to_json(p);
        prop_assert_eq!(strip(&back), strip(&p));
    }

    #[test]
    fn readable_view_never_fails(t in arb_table(), p in arb_properties()) {
        let v = table_to_json(&t);
        let text = serde_json::to_string(&v).unwrap();
        prop_assert!(serde_json::from_str::<Value>(&text).is_ok());
        prop_assert!(serde_json::to_string(&properties_to_json(&p)).is_ok());
    }

    #[test]
    fn death_parsing_never_panics(h in arb_death_headers(), extra in vec(".{0,6}", 0..3)) {
        let info = parse_deaths(Some(&h));
        let _ = info.to_json();
        let _ = info.origin_queue();
        let _ = info.total_count();
        let _ = reason_text(Some(&h), &info, &extra);
        let _ = celery_task_name(Some(&h));
    }

    #[test]
    fn typed_decoding_rejects_garbage_without_panicking(v in arb_json()) {
        let _ = table_from_typed_json(&v);
        let _ = value_from_typed_json(&v);
        let _ = properties_from_typed_json(&v);
        if let Err(e) = value_from_typed_json(&v) {
            prop_assert!(!e.path.is_empty());
        }
    }
}
