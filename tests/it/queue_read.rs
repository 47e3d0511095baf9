//! RabbitMQ DLQs read end to end: real dead letters (a worker rejecting without requeue,
//! per-message TTL expiry, max-length overflow), decoded records, every selection flag,
//! and the queue identical afterwards (same messages, order, bodies and headers).

use crate::broker::{Broker, Snap, ls, table};
use base64::Engine as _;
use lapin::types::{AMQPValue, FieldArray, FieldTable};
use lapin::{BasicProperties, ExchangeKind};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn unb64(s: &Value) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(s.as_str().expect("base64 text"))
        .unwrap()
}

fn ids(recs: &[Value]) -> Vec<String> {
    recs.iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect()
}

fn count(run: crate::common::Run) -> u64 {
    run.ok().trim().parse().unwrap()
}

/// Quorum delivery counts are the broker's, not the message's: compare the rest.
fn without_counts(s: &[Snap]) -> Vec<(Vec<u8>, Value)> {
    s.iter()
        .map(|m| (m.body.clone(), m.props.clone()))
        .collect()
}

const TRACEBACK: &str = "Traceback (most recent call last):\n  File \"tasks.py\", line 12, in processar\n    usuario = payload['usuario_id']\nKeyError: 'usuario_id'\n";
const CELERY_ID: &str = "5f0c2a7e-6b1d-4c1e-9a56-0d6f1b7c9e01";

/// The seed topology: matriculas.processar / .expira / .limite dead-letter through the
/// fanout matriculas.dlx into matriculas.dlq. Returns the DLQ name and the bodies in the
/// order they were dead-lettered.
async fn seed(b: &Broker) -> (String, Vec<Vec<u8>>) {
    let dlx = "matriculas.dlx";
    let dlq = "matriculas.dlq";
    b.exchange(dlx, ExchangeKind::Fanout).await;
    b.queue(dlq, FieldTable::default()).await;
    b.bind(dlq, dlx, "").await;
    let dl = |extra: Vec<(&str, AMQPValue)>| {
        let mut t = table(vec![("x-dead-letter-exchange", ls(dlx))]);
        for (k, v) in extra {
            t.insert(k.into(), v);
        }
        t
    };
    b.queue("matriculas.processar", dl(vec![])).await;
    b.queue("matriculas.expira", dl(vec![])).await;
    b.queue(
        "matriculas.limite",
        dl(vec![("x-max-length", AMQPValue::LongLongInt(1))]),
    )
    .await;

    let binary: Vec<u8> = vec![0xff, 0x00, 0xfe, b'a', 0x1b];
    let bodies: Vec<Vec<u8>> = vec![
        br#"{"matricula_id": 1, "aluno": "Ana"}"#.to_vec(),
        br#"[[42], {"curso": "rust"}, {"callbacks": null}]"#.to_vec(),
        b"plain text body: aluno 3".to_vec(),
        binary.clone(),
        br#"{"matricula_id": 5, "cpf": "000.000.000-00"}"#.to_vec(),
        br#"{"matricula_id": 10}"#.to_vec(),
        br#"{"matricula_id": 20, "first": true}"#.to_vec(),
    ];
    let p = BasicProperties::default;
    // 1. A worker rejects what it cannot process.
    let sent = [
        p().with_message_id("m-1".into())
            .with_content_type("application/json".into())
            .with_headers(table(vec![
                ("x-exception-message", ls("KeyError: 'usuario_id'")),
                ("x-exception-stacktrace", ls(TRACEBACK)),
            ])),
        p().with_content_type("application/json".into())
            .with_headers(table(vec![
                ("task", ls("matriculas.tasks.processar")),
                ("id", ls(CELERY_ID)),
            ])),
        p().with_headers(table(vec![
            ("MT-Fault-Message", ls("Timeout waiting for SMTP")),
            ("MT-Fault-ExceptionType", ls("System.TimeoutException")),
        ])),
        p().with_headers(table(vec![
            (
                "NServiceBus.ExceptionInfo.Message",
                ls("Object reference not set"),
            ),
            (
                "NServiceBus.ExceptionInfo.ExceptionType",
                ls("System.NullReferenceException"),
            ),
            (
                "bin-str",
                AMQPValue::LongString(vec![b'o', b'k', 0xff].into()),
            ),
            ("bytes", AMQPValue::ByteArray(vec![1, 2, 3].into())),
            ("ts", AMQPValue::Timestamp(1_700_000_000)),
            (
                "nested",
                AMQPValue::FieldTable(table(vec![
                    ("n", AMQPValue::LongLongInt(5)),
                    ("s", ls("x")),
                ])),
            ),
            (
                "arr",
                AMQPValue::FieldArray(FieldArray::from(vec![ls("a"), AMQPValue::Boolean(true)])),
            ),
        ])),
        p().with_headers(table(vec![("x-app-error", ls("ValueError: CPF inválido"))])),
    ];
    for (body, props) in bodies.iter().zip(sent) {
        b.publish("matriculas.processar", body, props).await;
    }
    b.reject("matriculas.processar", 5).await;
    b.wait_depth(dlq, 5).await;
    // 2. A message whose per-message TTL runs out.
    b.publish(
        "matriculas.expira",
        &bodies[5],
        p().with_expiration("1".into()),
    )
    .await;
    b.wait_depth(dlq, 6).await;
    // 3. A queue overflowing its max-length pushes out its oldest message.
    b.publish("matriculas.limite", &bodies[6], p()).await;
    b.publish("matriculas.limite", b"survivor", p()).await;
    b.wait_depth(dlq, 7).await;
    (dlq.to_owned(), bodies)
}

#[tokio::test]
async fn classic_dlq_decoded_and_left_unchanged() {
    let b = Broker::new("classic").await;
    let (dlq, bodies) = seed(&b).await;
    let before = b.snapshot(&dlq).await;
    assert_eq!(before.len(), 7);

    let recs = b
        .run(&["inspect", "-Q", &dlq, "--limit", "100", "-o", "json"])
        .await
        .json();
    let recs = recs.as_array().unwrap();
    assert_eq!(recs.len(), 7);
    // Queue order, every byte of every body.
    for (r, body) in recs.iter().zip(&bodies) {
        assert_eq!(r["source"], "queue");
        assert_eq!(r["location"], dlq.as_str());
        assert_eq!(r["replayed"], false);
        assert_eq!(&unb64(&r["raw"]["body"]), body);
        assert_eq!(r["raw"]["exchange"], "matriculas.dlx");
    }
    let now = chrono::Utc::now();

    // A Spring-style rejection with a Python traceback: message_id is the id.
    let r = &recs[0];
    assert_eq!(r["id"], "m-1");
    assert_eq!(r["motivo"], "rejected: KeyError: 'usuario_id'");
    assert_eq!(r["task"], "matriculas.processar");
    assert_eq!(r["payload"], json!({"matricula_id": 1, "aluno": "Ana"}));
    assert_eq!(r["properties"]["message_id"], "m-1");
    assert_eq!(r["properties"]["content_type"], "application/json");
    assert_eq!(r["headers"]["x-exception-stacktrace"], TRACEBACK);
    let d = &r["death"]["deaths"][0];
    assert_eq!(d["queue"], "matriculas.processar");
    assert_eq!(d["reason"], "rejected");
    assert_eq!(d["count"], 1);
    assert_eq!(d["exchange"], "");
    assert_eq!(d["routing_keys"], json!(["matriculas.processar"]));
    assert_eq!(r["death"]["first_death_queue"], "matriculas.processar");
    assert_eq!(r["death"]["first_death_reason"], "rejected");
    assert_eq!(r["created_at"], d["time"]);
    let died: chrono::DateTime<chrono::Utc> = d["time"].as_str().unwrap().parse().unwrap();
    assert!((now - died).num_seconds().abs() < 120, "{died}");

    // Celery: task from the header, id from the task id.
    let r = &recs[1];
    assert_eq!(r["id"], CELERY_ID);
    assert_eq!(r["task"], "matriculas.tasks.processar");
    assert_eq!(r["motivo"], "rejected");
    assert_eq!(r["payload"][1]["curso"], "rust");

    // Text body: not JSON, so base64 in JSON; MassTransit fault headers.
    let r = &recs[2];
    assert_eq!(r["payload"], json!({"base64": b64(&bodies[2])}));
    assert_eq!(
        r["motivo"],
        "rejected: System.TimeoutException: Timeout waiting for SMTP"
    );
    assert!(r["id"].as_str().unwrap().starts_with("h:"));

    // Binary body and every odd header type, decoded without loss.
    let r = &recs[3];
    assert_eq!(r["payload"], json!({"base64": b64(&bodies[3])}));
    assert_eq!(
        r["motivo"],
        "rejected: System.NullReferenceException: Object reference not set"
    );
    let h = &r["headers"];
    assert_eq!(h["bin-str"], json!({"base64": b64(&[b'o', b'k', 0xff])}));
    assert_eq!(h["bytes"], json!({"base64": b64(&[1, 2, 3])}));
    assert_eq!(h["ts"], "2023-11-14T22:13:20Z");
    assert_eq!(h["nested"], json!({"n": 5, "s": "x"}));
    assert_eq!(h["arr"], json!(["a", true]));
    let typed = &r["raw"]["properties"]["headers"];
    assert_eq!(
        typed["bin-str"],
        json!(["S", {"base64": b64(&[b'o', b'k', 0xff])}])
    );
    assert_eq!(typed["ts"], json!(["T", 1_700_000_000u64]));

    // An unknown header is not a reason until named with --motivo-header.
    assert_eq!(recs[4]["motivo"], "rejected");

    // Per-message TTL expiry: the original expiration is in the history.
    let r = &recs[5];
    assert_eq!(r["motivo"], "expired");
    assert_eq!(r["task"], "matriculas.expira");
    assert_eq!(r["death"]["deaths"][0]["original_expiration"], "1");
    assert!(r["properties"].get("expiration").is_none());

    // Max-length overflow.
    assert_eq!(recs[6]["motivo"], "maxlen");
    assert_eq!(recs[6]["task"], "matriculas.limite");

    // Ids are stable across reads and select exactly one message.
    let again = b
        .run(&["filter", "-Q", &dlq, "-o", "ndjson"])
        .await
        .ndjson();
    assert_eq!(ids(&again), ids(recs));
    let bin_id = recs[3]["id"].as_str().unwrap();
    let one = b
        .run(&["inspect", "-Q", &dlq, "--id", bin_id, "-o", "json"])
        .await
        .json();
    assert_eq!(one.as_array().unwrap().len(), 1);
    assert_eq!(one[0]["payload"], recs[3]["payload"]);

    // --motivo-header adds a header to look in.
    let r = b
        .run(&[
            "inspect",
            "-Q",
            &dlq,
            "--motivo-header",
            "x-app-error",
            "--motivo",
            "CPF",
            "-o",
            "json",
        ])
        .await
        .json();
    assert_eq!(r.as_array().unwrap().len(), 1);
    assert_eq!(r[0]["motivo"], "rejected: ValueError: CPF inválido");

    // People see text as text and binary escaped, never raw control bytes.
    let full = b
        .run(&["inspect", "-Q", &dlq, "--full", "--limit", "4"])
        .await
        .ok();
    assert!(full.contains("plain text body: aluno 3"), "{full}");
    assert!(full.contains("(binary, 5 bytes"), "{full}");
    assert!(full.contains(r"\xff\x00\xfea\x1b"), "{full}");
    assert!(!full.contains('\u{1b}'), "raw escape byte on the terminal");
    assert!(
        full.contains("rejected in matriculas.processar ×1"),
        "{full}"
    );

    // Group by reason, count, the human table.
    let groups = b
        .run(&["filter", "-Q", &dlq, "--group-by", "motivo", "-o", "json"])
        .await
        .json();
    let total: u64 = groups
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["count"].as_u64().unwrap())
        .sum();
    assert_eq!(total, 7);
    assert_eq!(count(b.run(&["filter", "-Q", &dlq, "--count"]).await), 7);
    let text = b.run(&["inspect", "-Q", &dlq]).await.ok();
    assert!(text.contains("m-1") && text.contains("maxlen"), "{text}");

    // Nothing changed: same messages, same order, same bytes and headers.
    let after = b.snapshot(&dlq).await;
    assert_eq!(after, before);
    assert_eq!(b.depth(&dlq).await, 7);
    b.delete().await;
}

/// A dead letter as a producer would leave it, with a chosen death time: published
/// straight into the DLQ (RabbitMQ keeps a client's x-death as it is).
fn crafted(
    queue: &str,
    reason: &str,
    time: &str,
    extra: Vec<(&str, AMQPValue)>,
) -> BasicProperties {
    let t = chrono::DateTime::parse_from_rfc3339(time)
        .unwrap()
        .timestamp() as u64;
    let mut h = table(vec![
        (
            "x-death",
            AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::FieldTable(table(vec![
                ("queue", ls(queue)),
                ("reason", ls(reason)),
                ("count", AMQPValue::LongLongInt(1)),
                ("time", AMQPValue::Timestamp(t)),
                ("exchange", ls("")),
                (
                    "routing-keys",
                    AMQPValue::FieldArray(FieldArray::from(vec![ls(queue)])),
                ),
            ]))])),
        ),
        ("x-first-death-queue", ls(queue)),
        ("x-first-death-reason", ls(reason)),
    ]);
    for (k, v) in extra {
        h.insert(k.into(), v);
    }
    BasicProperties::default().with_headers(h)
}

#[tokio::test]
async fn every_selection_flag_on_a_queue() {
    let b = Broker::new("select").await;
    let q = "pagamentos.dlq";
    b.queue(q, FieldTable::default()).await;
    let msgs = [
        (
            "pagamentos",
            "rejected",
            "2026-11-01T10:00:00Z",
            Some("IntegrityError: null value in column \"moeda\""),
            None,
            r#"{"pedido_id": 1}"#,
        ),
        (
            "pagamentos",
            "rejected",
            "2026-11-10T10:00:00Z",
            Some("integrityerror lower"),
            None,
            r#"{"pedido_id": 2}"#,
        ),
        (
            "emails",
            "expired",
            "2026-11-20T10:00:00Z",
            None,
            Some("app.tasks.enviar_email"),
            r#"[3, "aluno@example.com"]"#,
        ),
        (
            "emails",
            "rejected",
            "2026-11-25T10:00:00Z",
            Some("TimeoutError: SMTP"),
            Some("app.tasks.enviar_email"),
            "texto puro aluno@example.com",
        ),
    ];
    for (i, (origin, reason, time, err, task, body)) in msgs.iter().enumerate() {
        let mut extra = Vec::new();
        if let Some(e) = err {
            extra.push(("x-exception-message", ls(e)));
        }
        if let Some(t) = task {
            extra.push(("task", ls(t)));
        }
        let props =
            crafted(origin, reason, time, extra).with_message_id(format!("p{i}").as_str().into());
        b.publish(q, body.as_bytes(), props).await;
    }
    let before = b.snapshot(q).await;
    let sel = |args: &[&str]| {
        let mut a = vec!["filter", "-Q", q, "-o", "ndjson"];
        a.extend_from_slice(args);
        a.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (vec![], vec!["p0", "p1", "p2", "p3"]),
        (vec!["--motivo", "IntegrityError"], vec!["p0"]),
        (vec!["--motivo", "IntegrityError", "-i"], vec!["p0", "p1"]),
        (vec!["--motivo", "expired"], vec!["p2"]),
        // The regex looks at payload text, also when it is not JSON.
        (vec!["-e", r"aluno@example\.com"], vec!["p2", "p3"]),
        (vec!["-e", "^texto"], vec!["p3"]),
        // --task: the Celery task header, or the queue the message first died in.
        (vec!["--task", "app.tasks.enviar_email"], vec!["p2", "p3"]),
        (vec!["--task", "pagamentos"], vec!["p0", "p1"]),
        (vec!["--task", "emails"], vec!["p2", "p3"]),
        (
            vec!["--task", "pagamentos", "--task", "emails"],
            vec!["p0", "p1", "p2", "p3"],
        ),
        (vec!["--since", "2026-11-10"], vec!["p1", "p2", "p3"]),
        (vec!["--until", "2026-11-20T10:00:00Z"], vec!["p0", "p1"]),
        (
            vec!["--since", "2026-11-05", "--until", "2026-11-21"],
            vec!["p1", "p2"],
        ),
        (
            vec!["--older-than", "2026-11-15T00:00:00Z"],
            vec!["p0", "p1"],
        ),
        (
            vec![
                "--where",
                r#".headers["x-exception-message"] | test("SMTP")"#,
            ],
            vec!["p3"],
        ),
        (
            vec!["--where", ".death.deaths[0].reason == \"rejected\""],
            vec!["p0", "p1", "p3"],
        ),
        (vec!["--id", "p2", "--id", "p0"], vec!["p0", "p2"]),
        (vec!["--limit", "2"], vec!["p0", "p1"]),
        (vec!["--motivo", "rejected", "--limit", "1"], vec!["p0"]),
        (vec!["--only-replayed"], vec![]),
        (vec!["--include-replayed"], vec!["p0", "p1", "p2", "p3"]),
    ];
    for (args, want) in cases {
        let a = sel(&args);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let got = b.run(&a).await.ndjson();
        assert_eq!(ids(&got), want, "dlq {}", a.join(" "));
    }
    // A count builds only the record fields its --where names (or all of them, when the
    // program may see the record whole): it selects what the full export selects.
    for (code, want) in [
        (r#".headers["x-exception-message"] | test("SMTP")"#, 1),
        (".death.deaths[0].reason == \"rejected\"", 3),
        (
            r#".id == "p2" or (.raw.body | @base64d | test("texto"))"#,
            2,
        ),
        (r#".properties.message_id == "p1""#, 1),
        ("keys | length > 9", 4),
    ] {
        let a = sel(&["--where", code]);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let listed = ids(&b.run(&a).await.ndjson()).len();
        let counted = count(
            b.run(&["filter", "-Q", q, "--count", "--where", code])
                .await,
        );
        assert_eq!((listed, counted), (want, want as u64), "{code}");
    }
    // Everything in the dead-letter time is "older than 1h" (2026-11 is in the past).
    assert_eq!(
        count(
            b.run(&["filter", "-Q", q, "--count", "--older-than", "1h"])
                .await
        ),
        4
    );
    let days = b
        .run(&["filter", "-Q", q, "--group-by", "day", "-o", "json"])
        .await
        .json();
    assert_eq!(days[0]["day"], "2026-11-01");
    assert_eq!(days.as_array().unwrap().len(), 4);
    let tasks = b
        .run(&["filter", "-Q", q, "--group-by", "task", "-o", "json"])
        .await
        .json();
    assert_eq!(tasks[0]["task"], "app.tasks.enviar_email");
    assert_eq!(tasks[0]["count"], 2);
    assert_eq!(tasks[1]["task"], "pagamentos");
    // A jq error on some records: they are not selected, and dlq says so.
    let run = b
        .run(&[
            "filter",
            "-Q",
            q,
            "--count",
            "--where",
            ".payload.pedido_id > 1",
        ])
        .await;
    assert_eq!(run.ok().trim(), "1");
    assert!(
        run.stderr().contains("could not be evaluated on 1"),
        "{}",
        run.stderr()
    );

    assert_eq!(b.snapshot(q).await, before);
    b.delete().await;
}

#[tokio::test]
async fn quorum_dlq_read_in_windows_keeps_order_and_content() {
    let b = Broker::new("quorum").await;
    let dlx = "q.dlx";
    let dlq = "q.dlq";
    let src = "q.src";
    b.exchange(dlx, ExchangeKind::Fanout).await;
    b.queue(dlq, table(vec![("x-queue-type", ls("quorum"))]))
        .await;
    b.bind(dlq, dlx, "").await;
    b.queue(src, table(vec![("x-dead-letter-exchange", ls(dlx))]))
        .await;
    let n = 30;
    for i in 0..n {
        let props = BasicProperties::default().with_headers(table(vec![(
            "x-exception-message",
            ls(&format!("boom {i}")),
        )]));
        b.publish(src, format!("{{\"n\": {i}}}").as_bytes(), props)
            .await;
    }
    b.reject(src, n).await;
    b.wait_depth(dlq, n as u32).await;
    let before = b.snapshot(dlq).await;
    assert!(before.iter().all(|m| m.delivery_count.is_none()));

    // Windows of 7: five consumers one after the other on one channel.
    let env = [("DLQ_READ_WINDOW", "7")];
    let recs = b
        .run_with(&["filter", "-Q", dlq, "-o", "ndjson"], &env)
        .await
        .ndjson();
    let seen: Vec<i64> = recs
        .iter()
        .map(|r| r["payload"]["n"].as_i64().unwrap())
        .collect();
    assert_eq!(seen, (0..n as i64).collect::<Vec<_>>());
    // The delivery count is shown: the snapshot above gave every message back once.
    assert!(
        recs.iter().all(|r| r["headers"]["x-delivery-count"] == 1),
        "{:?}",
        recs[0]["headers"]
    );
    // RabbitMQ 4 gives every quorum queue a delivery limit (20): read by renewal, so the
    // counts start again at 0 instead of growing with every read; on 4.3, given back by a
    // nack, which does not count.
    let nacks = crate::target::nacks_uncounted().await;
    let renews = crate::target::rabbitmq_major().await >= 4 && !nacks;
    assert_eq!(recs[3]["motivo"], "rejected: boom 3");

    // More dead letters arrive behind the ones already read (and given back) once.
    for i in n..n + 5 {
        b.publish(
            src,
            format!("{{\"n\": {i}}}").as_bytes(),
            BasicProperties::default(),
        )
        .await;
    }
    b.reject(src, 5).await;
    b.wait_depth(dlq, n as u32 + 5).await;
    // Stopping early (--limit) gives everything back too, in order: a quorum queue is
    // held whole before the give-back, or its first windows would move to the back.
    for _ in 0..2 {
        let head = b
            .run_with(&["inspect", "-Q", dlq, "--limit", "3", "-o", "json"], &env)
            .await
            .json();
        assert_eq!(head.as_array().unwrap().len(), 3);
        assert_eq!(head[2]["payload"]["n"], 2);
    }

    let after = b.snapshot(dlq).await;
    let order = crate::quorum_limits::snap_ns(&after);
    assert_eq!(order, (0..n as i64 + 5).collect::<Vec<_>>());
    assert_eq!(without_counts(&after[..n]), without_counts(&before));
    // On RabbitMQ before 4.3 every give-back counts: snapshot, filter, inspect (the first
    // 3 + what the window had already delivered), the final snapshot's own delivery. Renewed
    // copies were never given back.
    let counts: Vec<i64> = after[..n]
        .iter()
        .map(|m| m.delivery_count.unwrap_or(0))
        .collect();
    if renews {
        assert!(counts.iter().all(|&c| c == 0), "{counts:?}");
    } else if nacks {
        // The first snapshot's close alone.
        assert!(counts.iter().all(|&c| c == 1), "{counts:?}");
    } else {
        assert!(counts.iter().all(|&c| c >= 2), "{counts:?}");
    }
    // The snapshot's own give-back is asynchronous on a quorum queue: wait for it.
    b.wait_depth(dlq, n as u32 + 5).await;
    b.delete().await;
}

#[tokio::test]
async fn quorum_delivery_limit_refused_unless_forced() {
    let b = Broker::new("qlimit").await;
    let q = "lim.dlq";
    // With a TTL a renewal could lose an original: refused (quorum_limits.rs renews the rest).
    b.queue(
        q,
        table(vec![
            ("x-queue-type", ls("quorum")),
            ("x-delivery-limit", AMQPValue::LongLongInt(1)),
            ("x-message-ttl", AMQPValue::LongLongInt(3_600_000)),
        ]),
    )
    .await;
    for i in 0..3 {
        b.publish(q, format!("m{i}").as_bytes(), BasicProperties::default())
            .await;
    }
    if crate::target::nacks_uncounted().await {
        // RabbitMQ 4.3 does not count a nack: nothing to refuse, and reads cost nothing.
        for _ in 0..3 {
            let recs = b.run(&["inspect", "-Q", q, "-o", "json"]).await.json();
            assert_eq!(recs.as_array().unwrap().len(), 3);
        }
        let after = b.snapshot(q).await;
        assert_eq!(after.len(), 3);
        assert!(after.iter().all(|m| m.delivery_count.is_none()));
        b.delete().await;
        return;
    }
    let err = b
        .run(&["inspect", "-Q", q])
        .await
        .fails(2, "delivery limit 1");
    assert!(
        err.contains("--force") && err.contains("Nothing was read"),
        "{err}"
    );
    let list = b.run(&["list", "-Q", q, "-o", "json"]).await.json();
    let row = &list[0];
    assert_eq!(row["pending"], 3);
    assert_eq!(row["details"]["delivery_limit"], 1);
    assert!(
        row["details"]["sample"]["skipped"]
            .as_str()
            .unwrap()
            .contains("delivery")
    );

    // --force reads; the first read leaves every message at the limit, and says so.
    let run = b.run(&["inspect", "-Q", q, "--force", "-o", "json"]).await;
    let recs = run.json();
    assert_eq!(recs.as_array().unwrap().len(), 3);
    // Never given back before: no count header yet, so dlq's refusal above read nothing.
    assert!(
        recs[0]["headers"].get("x-delivery-count").is_none(),
        "{}",
        recs[0]
    );
    assert!(
        run.stderr()
            .contains("3 message(s) of \"lim.dlq\" are now at the delivery limit 1"),
        "{}",
        run.stderr()
    );
    assert_eq!(b.depth(q).await, 3);
    // A second forced read pushes them over: the broker drops them (no DLX here), and
    // dlq tells instead of pretending nothing happened.
    let run = b.run(&["filter", "-Q", q, "--force", "--count"]).await;
    assert_eq!(run.ok().trim(), "3");
    assert!(
        run.stderr()
            .contains("pushed them over the delivery limit 1"),
        "{}",
        run.stderr()
    );
    b.wait_depth(q, 0).await;

    // A limit set by a policy (freshly created: the API has no stats for it yet) counts too.
    let q2 = "pol.dlq";
    b.policy(
        "limit-dlqs",
        "^pol\\.",
        json!({"delivery-limit": 50, "max-length": 1000}),
    )
    .await;
    b.queue(q2, table(vec![("x-queue-type", ls("quorum"))]))
        .await;
    b.publish(q2, b"x", BasicProperties::default()).await;
    let err = b
        .run(&["filter", "-Q", q2, "--count"])
        .await
        .fails(2, "delivery limit 50");
    assert!(err.contains("its policy sets max-length"), "{err}");
    b.delete().await;
}

#[tokio::test]
async fn long_classic_dlq_past_65535_in_order() {
    let b = Broker::new("long").await;
    let q = "long.dlq";
    b.queue(q, FieldTable::default()).await;
    let n: usize = 70_000;
    b.publish_many(q, (0..n).map(|i| i.to_string().into_bytes()))
        .await;
    b.wait_depth(q, n as u32).await;

    let t = Instant::now();
    assert_eq!(
        count(b.run(&["filter", "-Q", q, "--count"]).await),
        n as u64
    );
    eprintln!("filter --count of {n} messages: {:?}", t.elapsed());
    // Every message, once, in queue order: one channel holds all 70,000 unacknowledged.
    let recs = b.run(&["filter", "-Q", q, "-o", "ndjson"]).await.ndjson();
    assert_eq!(recs.len(), n);
    for (i, r) in recs.iter().enumerate() {
        assert_eq!(r["payload"], json!(i), "position {i}");
    }
    let after = b.snapshot(q).await;
    assert_eq!(after.len(), n);
    for (i, m) in after.iter().enumerate() {
        assert_eq!(m.body, i.to_string().into_bytes(), "position {i}");
    }
    b.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn growing_dlq_read_ends() {
    let b = std::sync::Arc::new(Broker::new("growing").await);
    let q = "grow.dlq";
    b.queue(q, FieldTable::default()).await;
    b.publish_many(q, (0..2000).map(|i| format!("{i}").into_bytes()))
        .await;
    b.wait_depth(q, 2000).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producer = {
        let (b, stop) = (b.clone(), stop.clone());
        tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                b.publish(
                    q,
                    format!("late {i}").as_bytes(),
                    BasicProperties::default(),
                )
                .await;
                i += 1;
            }
        })
    };
    let t = Instant::now();
    let n = count(b.run(&["filter", "-Q", q, "--count"]).await);
    assert!(n >= 2000, "{n}");
    assert!(t.elapsed() < Duration::from_secs(60));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    producer.await.unwrap();
    std::sync::Arc::try_unwrap(b).ok().unwrap().delete().await;
}

#[tokio::test]
async fn stream_dlq_is_read_by_offset() {
    let b = Broker::new("stream").await;
    let dlx = "s.dlx";
    let dlq = "s.dlq";
    let staging = "s.staging";
    let src = "s.src";
    b.exchange(dlx, ExchangeKind::Fanout).await;
    b.queue(dlq, table(vec![("x-queue-type", ls("stream"))]))
        .await;
    b.queue(staging, FieldTable::default()).await;
    b.bind(dlq, dlx, "").await;
    b.bind(staging, dlx, "").await;
    b.queue(src, table(vec![("x-dead-letter-exchange", ls(dlx))]))
        .await;
    for i in 0..5 {
        let props = BasicProperties::default()
            .with_headers(table(vec![("error", ls(&format!("falhou {i}")))]));
        b.publish(src, format!("{{\"i\": {i}}}").as_bytes(), props)
            .await;
    }
    b.reject(src, 5).await;
    b.wait_depth(staging, 5).await;
    // RabbitMQ 3.10 does not dead-letter into streams: move the real dead letters into the
    // stream the way a shovel would. RabbitMQ 4 dead-letters into it itself: it holds them.
    if crate::target::rabbitmq_major().await < 4 {
        b.shovel(staging, dlq, 5).await;
    }
    let before = b.stream_bodies(dlq, 5).await;
    let recs = b.run(&["filter", "-Q", dlq, "-o", "ndjson"]).await.ndjson();
    assert_eq!(recs.len(), 5);
    for (i, r) in recs.iter().enumerate() {
        assert_eq!(r["payload"]["i"], i);
        assert_eq!(r["motivo"], format!("rejected: falhou {i}"));
        assert_eq!(r["task"], src);
        assert_eq!(r["headers"]["x-stream-offset"], i);
        assert!(
            r["raw"]["properties"]["headers"]
                .get("x-stream-offset")
                .is_none()
        );
    }
    let again = b.run(&["filter", "-Q", dlq, "-o", "ndjson"]).await.ndjson();
    assert_eq!(ids(&again), ids(&recs));
    assert_eq!(
        count(
            b.run(&["filter", "-Q", dlq, "--count", "--motivo", "falhou 3"])
                .await
        ),
        1
    );
    // --limit stops early; the stream is untouched either way.
    let head = b
        .run(&["inspect", "-Q", dlq, "--limit", "2", "-o", "json"])
        .await
        .json();
    assert_eq!(head.as_array().unwrap().len(), 2);
    let list = b.run(&["list", "-o", "json"]).await.json();
    let row = list
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["location"] == dlq)
        .expect("stream DLQ listed");
    assert_eq!(row["details"]["type"], "stream");
    assert_eq!(row["details"]["fed_by"], json!([src]));
    assert_eq!(b.stream_bodies(dlq, 5).await, before);
    b.delete().await;
}

#[tokio::test]
async fn missing_queue_is_a_usage_error_and_nothing_is_created() {
    let b = Broker::new("missing").await;
    for cmd in [vec!["inspect"], vec!["filter", "--count"]] {
        let mut args = cmd.clone();
        args.extend(["-Q", "no.such.dlq"]);
        let err = b
            .run(&args)
            .await
            .fails(2, "queue \"no.such.dlq\" does not exist");
        assert!(err.contains("nothing was created"), "{err}");
    }
    let run = b.run(&["list", "-Q", "no.such.dlq"]).await;
    run.fails(2, "\"no.such.dlq\" does not exist");
    assert!(!b.exists("no.such.dlq").await);
    b.delete().await;
}

#[tokio::test]
async fn management_api_down() {
    let b = Broker::new("noapi").await;
    let (dlq, _) = seed(&b).await;
    let before = b.snapshot(&dlq).await;
    let down = ["--management-url", "http://127.0.0.1:1"];
    let mut args = down.to_vec();
    args.extend(["list", "-Q", &dlq, "-o", "json"]);
    let run = b.run(&args).await;
    let rows = run.json();
    assert!(
        run.stderr().contains("is not reachable"),
        "{}",
        run.stderr()
    );
    assert!(run.stderr().contains("DLQ discovery"), "{}", run.stderr());
    assert_eq!(rows[0]["location"], dlq.as_str());
    assert_eq!(rows[0]["pending"], 7);
    assert_eq!(rows[0]["details"]["type"], "unknown");
    // Without the API the queue type is unknown: no read unless --force.
    let mut args = down.to_vec();
    args.extend(["inspect", "-Q", &dlq]);
    b.run(&args).await.fails(2, "without the management API");
    let mut args = down.to_vec();
    args.extend(["filter", "-Q", &dlq, "--count", "--force"]);
    assert_eq!(count(b.run(&args).await), 7);
    assert_eq!(b.snapshot(&dlq).await, before);
    b.delete().await;
}

#[tokio::test]
async fn connection_errors_are_clear_and_hide_the_password() {
    let b = Broker::new("conn").await;
    let secret = "Wr0ng-Pa55-q9";
    let run = crate::common::Dlq::new()
        .args(&[
            "--amqp-url",
            &crate::target::amqp_url_as("guest", secret, "%2f"),
            "inspect",
            "-Q",
            "x",
        ])
        .run();
    let err = run.fails(1, "refused the login");
    assert!(
        !err.contains(secret) && !run.stdout().contains(secret),
        "{err}"
    );
    assert!(err.contains("guest:***@127.0.0.1"), "{err}");
    crate::common::Dlq::new()
        .args(&[
            "--amqp-url",
            &format!("amqp://u:{secret}@127.0.0.1:1/%2f"),
            "list",
            "-Q",
            "x",
        ])
        .run()
        .fails(
            1,
            "cannot connect to RabbitMQ at amqp://u:***@127.0.0.1:1/%2f",
        );
    b.dlq()
        .args(&["--vhost", "no-such-vhost-dlq-it", "inspect", "-Q", "x"])
        .run()
        .fails(2, "virtual host \"no-such-vhost-dlq-it\" does not exist");
    b.delete().await;
}

#[tokio::test]
async fn list_discovers_the_dead_letter_topology() {
    let b = Broker::new("topo").await;
    b.exchange("dlx.direct", ExchangeKind::Direct).await;
    b.exchange("dlx.fan", ExchangeKind::Fanout).await;
    b.exchange("dlx.q", ExchangeKind::Fanout).await;
    b.queue("pag.dlq", FieldTable::default()).await;
    b.queue("other.dlq", FieldTable::default()).await;
    b.queue("fan.dlq", FieldTable::default()).await;
    b.queue(
        "lim.dlq",
        table(vec![
            ("x-queue-type", ls("quorum")),
            ("x-delivery-limit", AMQPValue::LongLongInt(2)),
        ]),
    )
    .await;
    b.bind("pag.dlq", "dlx.direct", "pag").await;
    b.bind("other.dlq", "dlx.direct", "other").await;
    b.bind("fan.dlq", "dlx.fan", "").await;
    b.bind("lim.dlq", "dlx.q", "").await;
    b.queue(
        "q.a",
        table(vec![
            ("x-dead-letter-exchange", ls("dlx.direct")),
            ("x-dead-letter-routing-key", ls("pag")),
        ]),
    )
    .await;
    // Dead-lettering configured by a policy, created just now (no API stats yet).
    b.policy(
        "dl-b",
        "^q\\.b$",
        json!({"dead-letter-exchange": "dlx.fan"}),
    )
    .await;
    b.queue("q.b", FieldTable::default()).await;
    b.queue(
        "q.c",
        table(vec![("x-dead-letter-exchange", ls("missing.ex"))]),
    )
    .await;
    b.queue("q.d", table(vec![("x-dead-letter-exchange", ls("dlx.q"))]))
        .await;
    for i in 0..5 {
        let props = BasicProperties::default().with_headers(table(vec![(
            "x-exception-message",
            ls(&format!("ValueError: {i}")),
        )]));
        b.publish("q.a", b"{}", props).await;
    }
    b.reject("q.a", 5).await;
    for _ in 0..3 {
        b.publish("q.b", b"{}", BasicProperties::default()).await;
    }
    b.reject("q.b", 3).await;
    b.publish("q.d", b"{}", BasicProperties::default()).await;
    b.reject("q.d", 1).await;
    b.wait_depth("pag.dlq", 5).await;
    b.wait_depth("fan.dlq", 3).await;
    b.wait_depth("lim.dlq", 1).await;
    let before = b.snapshot("pag.dlq").await;

    let run = b.run(&["list", "--sample", "2", "-o", "json"]).await;
    let rows = run.json();
    let rows = rows.as_array().unwrap();
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["location"].as_str().unwrap())
        .collect();
    // Biggest first; other.dlq is bound to the DLX, but not with the dead-letter routing key.
    assert_eq!(names, vec!["pag.dlq", "fan.dlq", "lim.dlq"]);
    let pag = &rows[0];
    assert_eq!(pag["source"], "queue");
    assert_eq!(pag["pending"], 5);
    assert_eq!(pag["total"], 5);
    assert_eq!(pag["details"]["fed_by"], json!(["q.a"]));
    assert_eq!(
        pag["details"]["dead_letter_exchanges"],
        json!(["dlx.direct"])
    );
    assert_eq!(pag["details"]["type"], "classic");
    assert_eq!(
        pag["details"]["sample"],
        json!({"read": 2, "of": 5, "complete": false})
    );
    assert_eq!(pag["top_reasons"][0]["count"], 2);
    assert_eq!(
        pag["top_reasons"][0]["fingerprint"],
        "rejected: ValueError: <n>"
    );
    assert!(pag["oldest"].is_string());
    assert_eq!(rows[1]["details"]["fed_by"], json!(["q.b"]));
    assert_eq!(rows[1]["top_reasons"][0]["fingerprint"], "rejected");
    assert_eq!(rows[1]["top_reasons"][0]["count"], 2);
    assert_eq!(rows[1]["details"]["sample"]["complete"], false);
    let lim = &rows[2];
    assert_eq!(lim["details"]["type"], "quorum");
    assert_eq!(lim["details"]["delivery_limit"], 2);
    // Sampled by renewal, a give-back would count toward the limit; on 4.3, by a nack,
    // which does not count.
    assert_eq!(
        lim["details"]["sample"],
        json!({"read": 1, "of": 1, "complete": true})
    );
    assert_eq!(
        run.stderr().contains("\"lim.dlq\": renewed 1 message(s)"),
        !crate::target::nacks_uncounted().await,
        "{}",
        run.stderr()
    );
    assert!(
        run.stderr()
            .contains("q.c dead-letters to exchange \"missing.ex\", which does not exist"),
        "{}",
        run.stderr()
    );

    // The human table: counts, feeders, the sample label.
    let text = b.run(&["list", "--sample", "2"]).await.ok();
    for needle in [
        "pag.dlq",
        "fed by q.a",
        "(first 2 of 5)",
        "classic, ",
        "0 consumers",
        "delivery limit 2",
    ] {
        assert!(text.contains(needle), "{needle:?} missing in\n{text}");
    }
    // Sampling is a read like any other: nothing changed.
    assert_eq!(b.snapshot("pag.dlq").await, before);
    b.delete().await;
}

/// Celery's delayed-delivery chain is recognised and kept out of the DLQ list; --exclude
/// leaves out any other noise.
#[tokio::test]
async fn celery_delay_hops_are_not_listed_as_dlqs() {
    use crate::broker::{ls, table};
    use lapin::ExchangeKind;
    let b = Broker::new("hard_hops").await;
    let dlx = |to: &str| table(vec![("x-dead-letter-exchange", ls(to))]);
    for (_feeder, via, dlq) in [
        ("work", "work.dlx", "work.dlq"),
        ("noise", "noise.dlx", "noise.dlq"),
        ("celery_delayed_1", "cd.x", "celery_delayed_0"),
        ("celery_delayed_0", "cd.y", "celery_delayed_delivery"),
    ] {
        b.exchange(via, ExchangeKind::Fanout).await;
        b.queue(dlq, FieldTable::default()).await;
        b.bind(dlq, via, "").await;
    }
    b.queue("work", dlx("work.dlx")).await;
    b.queue("noise", dlx("noise.dlx")).await;
    b.redeclare("celery_delayed_1", dlx("cd.x")).await;
    b.redeclare("celery_delayed_0", dlx("cd.y")).await;
    let run = b.run(&["list", "-o", "json"]).await;
    let locations: Vec<String> = run
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["location"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(locations, vec!["noise.dlq", "work.dlq"], "{}", run.stderr());
    assert!(
        // Every queue of the chain is counted, the top one too (fed by no queue).
        run.stderr()
            .contains("delayed-delivery queues were recognised (3 celery_delayed_* queue(s))"),
        "{}",
        run.stderr()
    );
    let run = b.run(&["list", "-o", "json", "--exclude", "noise*"]).await;
    let v = run.json();
    assert_eq!(v.as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v[0]["location"], "work.dlq");
    b.delete().await;
}

/// A read whose give-back does not come back (here: messages that expired while dlq held
/// them, behind an output nobody reads) says so, rather than leaving the next command to find
/// fewer without a word.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_give_back_that_does_not_come_back_is_said() {
    let err = give_back_not_back("notback", 0, &[]).await;
    assert!(
        err.contains("dlq gave back were not ready again after"),
        "{err}"
    );
}

/// The same when the queue holds more than dlq read (`--limit`, behind 5,000 messages that do
/// not expire): the count after is compared with the count before, not with what was read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_give_back_short_of_a_longer_queue_is_said() {
    let err = give_back_not_back("notbacktail", 5_000, &["--limit", "3000"]).await;
    assert!(
        err.contains("dlq gave back were not ready again after"),
        "{err}"
    );
}

/// 3,000 messages that expire 20 s after they are published, then `tail` that do not, read by
/// `dlq filter ARGS` behind an output nobody reads until 21 s after publishing; what dlq
/// said, once the queue is checked to hold just the `tail`. (8 s was too short in one CI
/// run, beside two other suites on a slow day: publishing 8,000 took longer, and the first
/// 3,000 expired before the test saw them all.)
async fn give_back_not_back(tag: &str, tail: u32, args: &[&str]) -> String {
    use std::io::Read as _;
    let b = Broker::new(tag).await;
    let q = format!("{tag}.dlq");
    let q = q.as_str();
    b.queue(q, FieldTable::default()).await;
    let n = 3_000u32;
    // Long enough for dlq to take some before they expire, even on a loaded machine.
    let published = Instant::now();
    let props = BasicProperties::default().with_expiration("20000".into());
    let body = vec![b'x'; 1_000];
    b.publish_many_as(q, (0..n).map(|_| body.clone()), props)
        .await;
    let lasting = BasicProperties::default();
    b.publish_many_as(q, (0..tail).map(|_| body.clone()), lasting)
        .await;
    b.wait_depth(q, n + tail).await;

    // Its output is not read: dlq blocks writing it, holding what it took.
    let mut child = crate::common::dlq_command()
        .env("DLQ_AMQP_URL", b.amqp_url())
        .args([&["filter", "-Q", q, "-o", "ndjson"][..], args].concat())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while b.depth(q).await == n + tail {
        assert!(Instant::now() < deadline, "dlq took nothing");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Past every message's expiration: what dlq gives back is dropped as it comes back.
    tokio::time::sleep_until((published + Duration::from_secs(21)).into()).await;
    let mut stdout = child.stdout.take().unwrap();
    let out = tokio::task::spawn_blocking(move || {
        let mut s = String::new();
        stdout.read_to_string(&mut s).unwrap();
        s
    });
    let read = out.await.unwrap().lines().count();
    let done = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap());
    let err = String::from_utf8_lossy(&done.await.unwrap().stderr).into_owned();
    assert!(read > 0, "read {read}: {err}");
    assert!(err.contains("or an expiry took them"), "{err}");
    assert_eq!(b.depth(q).await, tail);
    b.delete().await;
    err
}

/// A reader who stops reading (a pager left open) for longer than two heartbeats. dlq's
/// runtime has one thread, which also serves the connection; blocked in its write to stdout
/// it missed the heartbeats and the connection was lost: on RabbitMQ 4.0.5, a `filter -o
/// ndjson` of 3,000 quorum messages whose reader waited 35 s failed (exit 1, 63 lines), and
/// 2,000 of the messages came back with `x-delivery-count` 1, nearer their delivery limit,
/// from a command that only reads. Its records now go to stdout through a thread of their
/// own. Here a 3-s heartbeat (lost after about 6 s) and a reader that waits 12 s: the read
/// is whole, in order, exit 0, and the queue keeps every message, in order, none delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_stops_reading_costs_no_delivery() {
    let (b, q, n) = paged_quorum_dlq("pager").await;
    let (out, err) = read_late(&b, &["filter", "-Q", q, "-o", "ndjson"], n).await;
    assert_eq!(ns_of(&out), (0..i64::from(n)).collect::<Vec<_>>(), "{err}");
    unchanged_and_undelivered(b, q, n).await;
}

/// The same for a queue replay's dry run, whose plan holds every message while it writes
/// one row per message (`replay --dry-run -o ndjson`): every row, exit 0, nothing moved,
/// nothing delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_whose_reader_stops_reading_costs_no_delivery() {
    let (b, q, n) = paged_quorum_dlq("pagerdry").await;
    b.queue("pager.work", FieldTable::default()).await;
    let args = [
        "replay",
        "-Q",
        q,
        "--to-queue",
        "pager.work",
        "--dry-run",
        "-o",
        "ndjson",
    ];
    let (out, err) = read_late(&b, &args, n).await;
    assert_eq!(out.lines().count(), n as usize, "{err}");
    assert_eq!(b.depth("pager.work").await, 0);
    unchanged_and_undelivered(b, q, n).await;
}

/// A quorum read and a replay's dry run over more than 32 consumer windows on one channel,
/// on RabbitMQ 4.3+, which gives back with a nack. Before, one nack gave back every window
/// at once, one return per consumer: the channel sent 32 and stashed the rest
/// (rabbit_fifo_client's soft limit of commands in flight), and the close right after
/// dropped the stash and gave those back as a close does, counted. On 4.3.6 with windows of
/// 16, the 472 messages past the first 33 windows of 1,000 were left at delivery count 1
/// (read and dry run alike); under CI's load the stash went out first, newest window first
/// (a dry run's `200-2199, 0-199, 2200-2999`). Each window now goes back by itself, once the
/// one before it shows: the queue in order, none counted, whatever each command says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_give_back_over_many_windows_of_a_channel_counts_none() {
    if crate::target::rabbitmq_version().await < (4, 3) {
        return;
    }
    let read = ["inspect", "--limit", "3000", "-o", "ndjson"];
    for (tag, args) in [("manywinread", &read[..]), ("manywindry", DRY_RUN_ROWS)] {
        // A queue each: the check's own read gives back by a close, which counts.
        let (b, q, n) = paged_quorum_dlq(tag).await;
        b.queue("pager.work", FieldTable::default()).await;
        let args = [args, &["-Q", q][..]].concat();
        let run = b.run_with(&args, &[("DLQ_READ_WINDOW", "16")]).await;
        assert_eq!(run.ok().lines().count(), n as usize, "{args:?}");
        assert_eq!(b.depth("pager.work").await, 0);
        given_back_as_said(b, q, n, &run.stderr()).await;
    }
}

/// `inspect` shows 20 and reads on to the end of a quorum DLQ, which it reads whole to keep
/// its order. Past its limit it waited for its output before reading on, holding the queue
/// meanwhile: on RabbitMQ 4.0.5, with a 2-s `x-consumer-timeout` and its output unread for
/// 75 s, RabbitMQ closed its channel (4.0 checks every minute), and the queue was left with
/// 1,000 of its 5,000 messages twice and 2,000 at delivery count 1, while `inspect` exited
/// 0 and said nothing. It now gives everything back while its 20 lines wait: the queue is
/// whole again before anyone reads them (any generation, no timeout needed to see it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inspect_past_its_limit_holds_nothing_while_its_output_waits() {
    let (b, q, n) = paged_quorum_dlq("pagerlimit").await;
    let args = ["inspect", "-Q", q, "-o", "ndjson"];
    let (code, out, err) = given_back_while_unread(&b, q, &args, n).await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(ns_of(&out), (0..20).collect::<Vec<_>>(), "{err}");
    assert!(err.contains("showing the first 20"), "{err}");
    unchanged_and_undelivered(b, q, n).await;
}

/// A read whose output nobody reads holds a quorum DLQ (read whole to keep its order) until
/// RabbitMQ's consumer timeout takes it back: on RabbitMQ 4.0.5, `filter -o ndjson` of
/// 5,000 with a 2-s `x-consumer-timeout` and its output unread for 75 s failed with
/// "invalid channel state: Closed (basic.ack)", leaving 1,000 messages in the queue twice
/// and 2,000 at delivery count 1. Once the read has held the queue for half its consumer
/// timeout with its output full, dlq now stops showing, reads on unseen and gives
/// everything back, then says so (exit 1): the queue is whole again before anyone reads the
/// output, in order, none counted. 3.x has no per-queue timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_whose_output_waits_half_a_consumer_timeout_gives_back_and_says_so() {
    let Some((out, err)) = stopped_unread("pagertimeout", &["filter", "-o", "ndjson"]).await else {
        return;
    };
    let shown = ns_of(&out);
    assert!(!shown.is_empty() && shown.len() < 3_000, "{err}");
    assert_eq!(shown, (0..shown.len() as i64).collect::<Vec<_>>(), "{err}");
    let stopped = format!("dlq stopped showing \"pager.dlq\" after {}", shown.len());
    assert!(
        err.contains(&stopped) || err.contains("RabbitMQ took back"),
        "{err}"
    );
}

/// A renewing read (a quorum DLQ with a delivery limit, before RabbitMQ 4.3) acknowledges
/// its originals as their copies are confirmed, so RabbitMQ's consumer timeout counts from
/// the oldest it has not renewed yet. dlq counted its half-timeout wait from the read's
/// first delivery: a read of 12,000 by a steady reader that pauses 0.2 s every 256 KiB,
/// longer than half a 10-s timeout, stopped showing at the first pause after 5 s (exit 1;
/// 6,303 of 30,000 shown on 4.0.5).
/// It now shows them all, in order, exit 0; the DLQ unchanged, none counted (here with a
/// 20-s timeout and a reader pausing 0.4 s, 23 s in all, for room on a loaded CI). 3.x before
/// 3.12 has no per-queue timeout; 4.3 gives back with a nack and holds everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewing_read_longer_than_half_its_timeout_shows_all_to_a_steady_reader() {
    let v = crate::target::rabbitmq_version().await;
    if !((3, 12)..(4, 3)).contains(&v) {
        return;
    }
    let b = Broker::new("renewsteady").await;
    let q = "pager.dlq";
    let args = vec![
        ("x-queue-type", ls("quorum")),
        ("x-delivery-limit", AMQPValue::LongInt(50)),
        // 20 s, not 10: under a loaded CI a 10-s one failed twice (stop 67), the renewal
        // falling behind while the machine was saturated.
        ("x-consumer-timeout", AMQPValue::LongLongInt(20_000)),
    ];
    b.queue(q, table(args)).await;
    let n = 12_000u32;
    let pad = "x".repeat(300);
    let bodies = (0..n).map(|i| json!({"n": i, "pad": pad}).to_string().into_bytes());
    b.publish_many_as(q, bodies, BasicProperties::default())
        .await;
    b.wait_depth(q, n).await;
    let mut child = piped_dlq(&b.amqp_url(), &["filter", "-Q", q, "-o", "ndjson"]);
    let stdout = child.stdout.take().unwrap();
    let started = Instant::now();
    let out = tokio::task::spawn_blocking(move || steady_reader(stdout, 256 << 10, 400));
    let out = out.await.unwrap();
    let took = started.elapsed();
    let done = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap());
    let done = done.await.unwrap();
    let err = String::from_utf8_lossy(&done.stderr).into_owned();
    eprintln!("== read in {took:?}; dlq said:\n{err}");
    // Longer than half the timeout, or the test shows nothing.
    assert!(took > Duration::from_secs(11), "read in {took:?}");
    assert_eq!(done.status.code(), Some(0), "{err}");
    assert_eq!(
        ns_of(&out),
        (0..i64::from(n)).collect::<Vec<_>>(),
        "not all shown, in order: {err}"
    );
    unchanged_and_undelivered(b, q, n).await;
}

/// Reads `r` to its end, `chunk` bytes at a time with a pause of `pause_ms` after each.
fn steady_reader(mut r: impl std::io::Read, chunk: usize, pause_ms: u64) -> String {
    let mut all = Vec::new();
    let mut buf = vec![0u8; chunk];
    loop {
        let mut got = 0;
        while got < chunk {
            match r.read(&mut buf[got..]).unwrap() {
                0 => return String::from_utf8(all).unwrap(),
                k => {
                    all.extend_from_slice(&buf[got..got + k]);
                    got += k;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(pause_ms));
    }
}

/// The same for a queue replay's dry run, whose plan holds every message while it writes a
/// row for each: on RabbitMQ 4.0.5 (3,000 messages, a 2-s timeout, its rows unread for
/// 75 s) every message was left in the DLQ twice, 2,200 of them counted once or twice. It
/// now stops writing rows, gives everything back, writes what waits, and says so (exit 1);
/// nothing moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_whose_rows_wait_half_a_consumer_timeout_gives_back_and_says_so() {
    let Some((out, err)) = stopped_unread("pagerdrytimeout", DRY_RUN_ROWS).await else {
        return;
    };
    let rows = out.lines().count();
    assert!(rows > 0 && rows < 3_000, "{rows} rows: {err}");
    let stopped = format!("dlq stopped showing the dry run's rows after {rows}:");
    assert!(
        err.contains(&stopped) || err.contains("RabbitMQ took back"),
        "{err}"
    );
}

/// The same for `archive --to -`, which reads what it writes: the archive ends without its
/// trailer, so nobody takes it for a whole one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archive_to_stdout_that_waits_half_a_consumer_timeout_gives_back_and_says_so() {
    let args = ["archive", "--to", "-"];
    let Some((out, err)) = stopped_unread("pagerarchtimeout", &args).await else {
        return;
    };
    assert!(
        err.contains("dlq stopped showing \"pager.dlq\" after"),
        "{err}"
    );
    assert!(!out.contains("dlq_archive_end"), "{err}");
}

/// A read that RabbitMQ delivers nothing to while messages are ready (here another consumer
/// is the queue's single active one) waited 30 s in silence before it stopped, like a hang:
/// seen in the cluster trials on a node whose quorum member lagged. dlq now says so after
/// 5 s, while it waits on, and stops at 30 s with the reason, exit 1; nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_delivered_nothing_says_so_while_it_waits() {
    use std::io::BufRead as _;
    let b = Broker::new("stallnote").await;
    let q = "stall.dlq";
    b.queue(
        q,
        table(vec![("x-single-active-consumer", AMQPValue::Boolean(true))]),
    )
    .await;
    let n = 50u32;
    b.publish_many(q, (0..n).map(|i| json!({"n": i}).to_string().into_bytes()))
        .await;
    b.wait_depth(q, n).await;
    // The active consumer, holding one message.
    let ch = b.conn.create_channel().await.unwrap();
    ch.basic_qos(1, Default::default()).await.unwrap();
    let _active = ch
        .basic_consume(
            q.into(),
            "active".into(),
            Default::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    b.wait_depth(q, n - 1).await;
    let mut child = piped_dlq(&b.amqp_url(), &["inspect", "-Q", q]);
    // Read to the end (a closed stderr would kill dlq), each line handed over as it comes.
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let notice = format!(
        "RabbitMQ has delivered nothing from \"{q}\" for 5 s although {} message(s) are ready",
        n - 1
    );
    let mut seen = Vec::new();
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(60)) {
        let said = line.contains(&notice);
        seen.push(line);
        if said {
            break;
        }
    }
    let seen = seen.join("\n");
    assert!(seen.contains(&notice), "{seen}");
    assert!(child.try_wait().unwrap().is_none(), "ended first: {seen}");
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap());
    let status = status.await.unwrap();
    let err: Vec<String> = rx.iter().collect();
    let err = err.join("\n");
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains("delivered nothing") && err.contains("for 30 s"),
        "{err}"
    );
    ch.close(200, "done".into()).await.unwrap();
    b.wait_depth(q, n).await;
    let mut all = crate::quorum_limits::snap_ns(&b.snapshot(q).await);
    all.sort_unstable();
    assert_eq!(all, (0..i64::from(n)).collect::<Vec<_>>());
    b.delete().await;
}

/// A queue replay's dry run into `pager.work`, its rows as ndjson (`-Q` to add).
pub(crate) const DRY_RUN_ROWS: &[&str] = &[
    "replay",
    "--to-queue",
    "pager.work",
    "--dry-run",
    "-o",
    "ndjson",
];

/// `dlq ARGS -Q pager.dlq` on a `paged_quorum_dlq` with an 8-s consumer timeout (and an empty
/// `pager.work`), its stdout unread until the DLQ is whole again: exit 1, nothing moved, the
/// DLQ unchanged and undelivered; then its stdout and stderr. `None` before 3.12, which has
/// no per-queue timeout. RabbitMQ 4.3 may take the messages back before dlq gives them
/// back, with the channel open and nothing counted
/// (`quorum_limits::a_read_held_past_a_consumer_timeout_names_it_and_loses_nothing`).
async fn stopped_unread(tag: &str, args: &[&str]) -> Option<(String, String)> {
    if crate::target::rabbitmq_version().await < (3, 12) {
        return None;
    }
    // dlq gives back after 4 s; a 2-s timeout left too little room on a loaded CI (RabbitMQ
    // 4.3 took back the first window first, and the order changed).
    let timeout = vec![("x-consumer-timeout", AMQPValue::LongLongInt(8_000))];
    let (b, q, n) = paged_quorum_dlq_with(tag, timeout).await;
    b.queue("pager.work", FieldTable::default()).await;
    let args = [args, &["-Q", q][..]].concat();
    let (code, out, err) = given_back_while_unread(&b, q, &args, n).await;
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(b.depth("pager.work").await, 0);
    given_back_as_said(b, q, n, &err).await;
    Some((out, err))
}

/// Whether dlq `said` the queue's order may have changed: RabbitMQ took back or closed
/// first (under a loaded CI, 4.3.6, stop 67: what it takes back goes to the queue's head,
/// QUEUES.md), or a part of the give-back was not seen back before the next.
pub(crate) fn order_change_said(said: &str) -> bool {
    [
        "RabbitMQ took back",
        "RabbitMQ closed",
        "order may have changed",
    ]
    .iter()
    .any(|s| said.contains(s))
}

/// Every message of `q` once and none counted; in order unless dlq `said` otherwise
/// (`order_change_said`).
pub(crate) async fn given_back_as_said(b: Broker, q: &str, n: u32, said: &str) {
    if order_change_said(said) {
        once_and_undelivered(b, q, n).await;
    } else {
        unchanged_and_undelivered_said(b, q, n, said).await;
    }
}

/// `q` holds each of its `n` messages once, none with a delivery counted, in any order.
async fn once_and_undelivered(b: Broker, q: &str, n: u32) {
    let after = b.snapshot(q).await;
    let mut ns = crate::quorum_limits::snap_ns(&after);
    ns.sort_unstable();
    assert_eq!(ns, (0..i64::from(n)).collect::<Vec<_>>(), "lost or doubled");
    let counted = after.iter().filter(|m| m.delivery_count.unwrap_or(0) > 0);
    assert_eq!(counted.count(), 0, "a delivery counted");
    b.delete().await;
}

/// Runs dlq with `args` and leaves its stdout unread until `q` holds all `n` ready again,
/// within 30 s, dlq still running; then dlq's exit code, stdout and stderr.
async fn given_back_while_unread(
    b: &Broker,
    q: &str,
    args: &[&str],
    n: u32,
) -> (Option<i32>, String, String) {
    use std::io::Read as _;
    let mut child = piped_dlq(&b.amqp_url(), args);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut took = false;
    loop {
        let ready = b.depth(q).await;
        took |= ready < n;
        if took && ready == n {
            break;
        }
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            panic!("dlq ended ({status}) with its output unread: {err}");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the queue not whole again within 30 s of an unread output ({ready} ready)");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let done = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap());
    let done = done.await.unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (done.status.code(), text(&done.stdout), text(&done.stderr))
}

/// The `n` of each ndjson record in `out`.
fn ns_of(out: &str) -> Vec<i64> {
    out.lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["payload"]["n"]
                .as_i64()
                .unwrap()
        })
        .collect()
}

/// A quorum DLQ (with a limit, so that every generation's read gives back without counting
/// a delivery: 3.x has no default one) of 3,000 messages of 2 KB, `{"n": i, ...}`.
pub(crate) async fn paged_quorum_dlq(tag: &str) -> (Broker, &'static str, u32) {
    paged_quorum_dlq_with(tag, vec![]).await
}

/// `paged_quorum_dlq` with more arguments.
pub(crate) async fn paged_quorum_dlq_with(
    tag: &str,
    more: Vec<(&str, AMQPValue)>,
) -> (Broker, &'static str, u32) {
    let b = Broker::new(tag).await;
    let q = "pager.dlq";
    let mut args = vec![
        ("x-queue-type", ls("quorum")),
        ("x-delivery-limit", AMQPValue::LongInt(50)),
    ];
    args.extend(more);
    b.queue(q, table(args)).await;
    let n = 3_000u32;
    let pad = "x".repeat(2_000);
    b.publish_many_as(
        q,
        (0..n).map(|i| json!({"n": i, "pad": pad}).to_string().into_bytes()),
        BasicProperties::default(),
    )
    .await;
    b.wait_depth(q, n).await;
    (b, q, n)
}

/// dlq on `amqp_url` with `args`, its stdout and stderr piped.
pub(crate) fn piped_dlq(amqp_url: &str, args: &[&str]) -> std::process::Child {
    piped_dlq_with(amqp_url, args, &[])
}

/// `piped_dlq` with more environment.
pub(crate) fn piped_dlq_with(
    amqp_url: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> std::process::Child {
    crate::common::dlq_command()
        .env("DLQ_AMQP_URL", amqp_url)
        .envs(env.iter().copied())
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Runs dlq with a 3-s heartbeat (lost after about 6 s; with 2 s a loaded CI lost one that
/// dlq served), its stdout unread for 12 s once it took messages; then its stdout and
/// stderr, once it exited 0.
pub(crate) async fn read_late(b: &Broker, args: &[&str], n: u32) -> (String, String) {
    use std::io::Read as _;
    let mut child = piped_dlq(&format!("{}?heartbeat=3", b.amqp_url()), args);
    let deadline = Instant::now() + Duration::from_secs(30);
    while b.depth("pager.dlq").await == n {
        assert!(Instant::now() < deadline, "dlq took nothing");
        if let Some(status) = child.try_wait().unwrap() {
            panic!("dlq ended ({status}) before taking anything");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Four heartbeats with nobody reading: far more output waits than a pipe holds.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let mut stdout = child.stdout.take().unwrap();
    let out = tokio::task::spawn_blocking(move || {
        let mut s = String::new();
        stdout.read_to_string(&mut s).unwrap();
        s
    });
    let out = out.await.unwrap();
    let done = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap());
    let done = done.await.unwrap();
    let err = String::from_utf8_lossy(&done.stderr).into_owned();
    assert_eq!(done.status.code(), Some(0), "{err}");
    (out, err)
}

/// Every message still in `q`, in order, none with a delivery counted.
pub(crate) async fn unchanged_and_undelivered(b: Broker, q: &str, n: u32) {
    unchanged_and_undelivered_said(b, q, n, "").await;
}

/// `unchanged_and_undelivered`, its failures with the queue's runs and what dlq `said`.
async fn unchanged_and_undelivered_said(b: Broker, q: &str, n: u32, said: &str) {
    let after = b.snapshot(q).await;
    let ns = crate::quorum_limits::snap_ns(&after);
    let ids: Vec<u64> = ns.iter().map(|&i| i as u64).collect();
    let runs = crate::cluster::runs(&ids);
    let every: Vec<i64> = (0..i64::from(n)).collect();
    assert!(ns == every, "the queue changed, {runs}: {said}");
    let counted = after
        .iter()
        .filter(|m| m.delivery_count.unwrap_or(0) > 0)
        .count();
    assert_eq!(
        counted, 0,
        "{counted} message(s) with a delivery counted: {said}"
    );
    b.delete().await;
}
