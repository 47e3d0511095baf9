//! Monitoring: `dlq check` (Nagios levels and exit codes) and `dlq metrics` (Prometheus
//! text, parsed by the real Python client's parser; the textfile; the `--listen` server),
//! against real queues and tables. Queues are proven unchanged by a check.

use crate::broker::{Broker, ls, table};
use crate::common::{Dialect, Dlq, Run, TestDb, repo_root, row, unique};
use chrono::{Duration as Age, Utc};
use lapin::types::FieldTable;
use lapin::{BasicProperties, ExchangeKind};
use serde_json::Value;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A work queue dead-lettering through a fanout DLX into `dlq`.
async fn topology(b: &Broker, dlq: &str) -> String {
    let work = format!("{dlq}.work");
    let dlx = format!("{dlq}.dlx");
    b.exchange(&dlx, ExchangeKind::Fanout).await;
    b.queue(dlq, FieldTable::default()).await;
    b.bind(dlq, &dlx, "").await;
    b.queue(&work, table(vec![("x-dead-letter-exchange", ls(&dlx))]))
        .await;
    work
}

/// `n` real dead letters: published to the work queue and rejected by a "worker".
async fn kill(b: &Broker, work: &str, n: usize) {
    for i in 0..n {
        let body = format!("{{\"n\": {i}}}");
        b.publish(work, body.as_bytes(), BasicProperties::default())
            .await;
    }
    b.reject(work, n).await;
}

/// Two messages that died three hours ago (their timestamp is their only time), then
/// three fresh dead letters: the head is old, the tail new.
async fn seeded_dlq(b: &Broker) -> &'static str {
    let dlq = "matriculas.dlq";
    let work = topology(b, dlq).await;
    let old = (Utc::now() - Age::hours(3)).timestamp() as u64;
    for i in 0..2 {
        let props = BasicProperties::default().with_timestamp(old);
        b.publish(dlq, format!("old {i}").as_bytes(), props).await;
    }
    kill(b, &work, 3).await;
    b.wait_depth(dlq, 5).await;
    dlq
}

fn first_line(r: &Run) -> String {
    r.stdout().lines().next().unwrap_or_default().to_string()
}

/// Asserts the exit code and that the first line starts with `start`.
fn status(r: &Run, code: i32, start: &str) {
    assert_eq!(
        r.code(),
        code,
        "stdout:\n{}\nstderr:\n{}",
        r.stdout(),
        r.stderr()
    );
    assert!(
        first_line(r).starts_with(start),
        "first line {:?} does not start with {start:?}\nstderr:\n{}",
        first_line(r),
        r.stderr()
    );
}

#[tokio::test]
async fn check_queue_levels_and_queue_unchanged() {
    let b = Broker::new("check").await;
    let dlq = seeded_dlq(&b).await;
    let before = b.snapshot(dlq).await;

    let ok = b.run(&["check"]).await;
    status(
        &ok,
        0,
        "DLQ OK - 5 pending in 1 source | 'matriculas.dlq'=5;;;0 ",
    );
    let line = first_line(&ok);
    assert!(line.contains("'matriculas.dlq new'=3;;;0"), "{line}");
    assert!(line.contains("'matriculas.dlq age'=10"), "{line}");
    assert!(
        ok.stdout()
            .contains("queue matriculas.dlq: OK - 5 pending, oldest 3h")
    );

    // Pending: ready messages.
    let r = b.run(&["check", "--warn-pending", "4"]).await;
    status(
        &r,
        1,
        "DLQ WARNING - matriculas.dlq 5 pending (warn 4) | 'matriculas.dlq'=5;4;;0",
    );
    let r = b
        .run(&["check", "--warn-pending", "2", "--crit-pending", "4"])
        .await;
    status(
        &r,
        2,
        "DLQ CRITICAL - matriculas.dlq 5 pending (crit 4) | 'matriculas.dlq'=5;2;4;0",
    );
    let r = b.run(&["check", "--warn-pending", "5", "-Q", dlq]).await;
    status(&r, 0, "DLQ OK - 5 pending");

    // Age: the oldest death time at the head.
    let r = b.run(&["check", "--warn-age", "1h"]).await;
    status(&r, 1, "DLQ WARNING - matriculas.dlq oldest 3h");
    assert!(first_line(&r).contains("(warn 1h)"), "{}", first_line(&r));
    let r = b
        .run(&["check", "--warn-age", "1h", "--crit-age", "2h"])
        .await;
    status(&r, 2, "DLQ CRITICAL - matriculas.dlq oldest 3h");
    assert!(first_line(&r).contains("'matriculas.dlq age'=10"));
    assert!(
        first_line(&r).contains("s;3600;7200;0"),
        "{}",
        first_line(&r)
    );
    let r = b.run(&["check", "--crit-age", "4h"]).await;
    status(&r, 0, "DLQ OK");

    // New: dead letters of the head sample that died within --new-within.
    let r = b.run(&["check", "--warn-new", "2"]).await;
    status(&r, 1, "DLQ WARNING - matriculas.dlq 3 new in 1h (warn 2)");
    let r = b
        .run(&["check", "--warn-new", "1", "--crit-new", "2"])
        .await;
    status(&r, 2, "DLQ CRITICAL - matriculas.dlq 3 new in 1h (crit 2)");
    let r = b.run(&["check", "--warn-new", "3"]).await;
    status(&r, 0, "DLQ OK");
    let r = b
        .run(&["check", "--warn-new", "4", "--new-within", "4h"])
        .await;
    status(&r, 1, "DLQ WARNING - matriculas.dlq 5 new in 4h (warn 4)");
    // A sample of 2 sees only the old head: nothing new in it.
    let r = b.run(&["check", "--warn-new", "0", "--sample", "2"]).await;
    status(&r, 0, "DLQ OK");
    assert!(
        r.stdout().contains("age and new from the first 2"),
        "{}",
        r.stdout()
    );

    // JSON: the same per source.
    let r = b
        .run(&[
            "check",
            "--warn-pending",
            "1",
            "--crit-age",
            "2h",
            "-o",
            "json",
        ])
        .await;
    assert_eq!(r.code(), 2, "{}", r.stderr());
    let j: Value = serde_json::from_str(&r.stdout()).unwrap();
    assert_eq!(j["status"], "CRITICAL");
    let s = &j["sources"][0];
    assert_eq!(s["source"], "queue");
    assert_eq!(s["location"], dlq);
    assert_eq!(s["status"], "CRITICAL");
    assert_eq!(s["pending"], 5);
    assert_eq!(s["new"], 3);
    assert!(s["oldest_age_seconds"].as_i64().unwrap() >= 3 * 3600);
    assert_eq!(s["thresholds"]["pending"]["warn"], 1);
    assert_eq!(s["thresholds"]["age_seconds"]["crit"], 7200);
    assert_eq!(s["thresholds"]["new_within_seconds"], 3600);

    // A named queue that does not exist: UNKNOWN, nothing created.
    let r = b.run(&["check", "-Q", "nope.dlq"]).await;
    status(&r, 3, "DLQ UNKNOWN - queue \"nope.dlq\" does not exist");
    assert!(!b.exists("nope.dlq").await);

    assert_eq!(b.snapshot(dlq).await, before, "check changed the queue");
    b.delete().await;
}

/// Before RabbitMQ 4.3 such a queue is not read (a give-back would count); on 4.3, which
/// does not count a nack, it is read and given back by nacking. Either way its messages'
/// delivery count is what it was.
#[tokio::test]
async fn check_quorum_queue_with_delivery_limit_keeps_its_delivery_counts() {
    let b = Broker::new("check-quorum").await;
    let q = "limited.dlq";
    // A TTL: the queue cannot be read by renewal (quorum_limits.rs has the renewed case).
    b.queue(
        q,
        table(vec![
            ("x-queue-type", ls("quorum")),
            ("x-delivery-limit", lapin::types::AMQPValue::LongInt(3)),
            ("x-message-ttl", lapin::types::AMQPValue::LongInt(3_600_000)),
        ]),
    )
    .await;
    b.publish(q, b"x", BasicProperties::default()).await;
    b.wait_depth(q, 1).await;
    let before = b.snapshot(q).await;
    let r = b
        .run(&["check", "-Q", q, "--warn-age", "1h", "-o", "json"])
        .await;
    let j = r.json();
    assert_eq!(j["status"], "OK");
    let s = &j["sources"][0];
    assert_eq!(s["pending"], 1);
    if crate::target::nacks_uncounted().await {
        assert_eq!(s["sampled"], 1, "{j}");
        assert!(s["not_read"].is_null(), "{j}");
    } else {
        assert!(
            j["summary"]
                .as_str()
                .unwrap()
                .contains("age and new not read on limited.dlq")
        );
        assert!(s["oldest_age_seconds"].is_null());
        let not_read = s["not_read"].as_str().unwrap();
        assert!(
            not_read.contains("delivery counts") && not_read.contains("x-message-ttl"),
            "{not_read}"
        );
    }
    // Still judged on depth, which reads nothing.
    let r = b.run(&["check", "-Q", q, "--crit-pending", "0"]).await;
    status(&r, 2, "DLQ CRITICAL - limited.dlq 1 pending (crit 0)");
    let after = b.snapshot(q).await;
    assert_eq!(after.len(), before.len());
    assert_eq!(after[0].body, before[0].body);
    // Counted once, by the test's own first snapshot (closed with it held): not by dlq.
    assert_eq!(after[0].delivery_count, Some(1));
    b.delete().await;
}

/// A command line clap refuses is a plugin usage error: UNKNOWN (3), never CRITICAL (2),
/// under `check` only; other commands keep 2.
#[test]
fn check_usage_errors_are_unknown() {
    let r = Dlq::new().args(&["check", "--warn-pendin", "3"]).run();
    status(&r, 3, "DLQ UNKNOWN - unexpected argument '--warn-pendin'");
    let r = Dlq::new()
        .args(&["--table", "t", "check", "--crit-age"])
        .run();
    status(&r, 3, "DLQ UNKNOWN - a value is required for '--crit-age");
    let r = Dlq::new().args(&["list", "--warn-pendin", "3"]).run();
    r.fails(2, "unexpected argument '--warn-pendin'");
    assert_eq!(Dlq::new().args(&["check", "--help"]).run().code(), 0);
}

#[tokio::test]
async fn check_unknown_when_a_source_is_unreachable() {
    let r = Dlq::new()
        .args(&["--amqp-url", "amqp://guest:guest@127.0.0.1:1/%2f", "check"])
        .run();
    status(&r, 3, "DLQ UNKNOWN - ");
    assert!(first_line(&r).contains("127.0.0.1:1"), "{}", first_line(&r));
    assert!(!r.stdout().contains(":guest@") && !r.stderr().contains(":guest@"));

    let r = Dlq::new()
        .args(&[
            "--database-url",
            "postgres://postgres:Sekr3tPw0rd@127.0.0.1:1/test",
            "check",
        ])
        .run();
    status(&r, 3, "DLQ UNKNOWN - ");
    assert!(!r.stdout().contains("Sekr3tPw0rd") && !r.stderr().contains("Sekr3tPw0rd"));
    let r = Dlq::new()
        .args(&[
            "--amqp-url",
            "amqp://dlq:Sekr3tPw0rd@127.0.0.1:1/%2f",
            "check",
            "-o",
            "json",
        ])
        .run();
    assert_eq!(r.code(), 3);
    let j: Value = serde_json::from_str(&r.stdout()).unwrap();
    assert_eq!(j["status"], "UNKNOWN");
    assert!(j["summary"].as_str().unwrap().contains("127.0.0.1:1"));
    assert!(!r.stdout().contains("Sekr3tPw0rd") && !r.stderr().contains("Sekr3tPw0rd"));
}

#[test]
fn check_bad_levels_are_unknown() {
    for (args, needle) in [
        (
            vec!["--warn-pending", "10", "--crit-pending", "5"],
            "--warn-pending 10 is above --crit-pending 5",
        ),
        (vec!["--warn-pending", "-1"], "--warn-pending \"-1\""),
        (vec!["--crit-new", "lots"], "--crit-new \"lots\""),
        (vec!["--warn-age", "2x"], "--warn-age \"2x\""),
        (vec!["--crit-age", "-5m"], "--crit-age \"-5m\""),
        (
            vec!["--warn-age", "3h", "--crit-age", "2h"],
            "--warn-age 3h is above --crit-age 2h",
        ),
        (vec!["--new-within", "0s"], "--new-within"),
        (vec!["--sample", "many"], "--sample"),
    ] {
        let mut all = vec!["check"];
        all.extend(args);
        let r = Dlq::new().args(&all).run();
        status(&r, 3, "DLQ UNKNOWN - ");
        assert!(
            first_line(&r).contains(needle),
            "{all:?}: {}",
            first_line(&r)
        );
    }
    let help = Dlq::new().args(&["check", "--help"]).run().ok();
    assert!(
        help.contains("Nagios") && help.contains("3  UNKNOWN"),
        "{help}"
    );
    assert!(help.contains("head sample"), "{help}");
}

/// Pending: 3 rows 3h old, 2 fresh; one fresh row already replayed.
async fn table_with_levels(dialect: Dialect) -> TestDb {
    let db = TestDb::new(dialect, "check").await;
    db.init();
    let t = |ago: Age| (Utc::now() - ago).to_rfc3339();
    let mut rows = Vec::new();
    for _ in 0..3 {
        rows.push(row(
            "pagar",
            None,
            "IntegrityError: 1",
            &t(Age::hours(3)),
            false,
        ));
    }
    for _ in 0..2 {
        rows.push(row(
            "email",
            None,
            "TimeoutError: 2",
            &t(Age::minutes(5)),
            false,
        ));
    }
    rows.push(row(
        "email",
        None,
        "TimeoutError: 2",
        &t(Age::minutes(5)),
        true,
    ));
    db.insert(&rows).await;
    db
}

async fn check_table_levels(dialect: Dialect) {
    let db = table_with_levels(dialect).await;
    let tn = db.table.as_str();
    let ok = db.dlq(&["check"]);
    status(
        &ok,
        0,
        &format!("DLQ OK - 5 pending in 1 source | '{tn}'=5;;;0 '{tn} age'=10"),
    );
    assert!(
        first_line(&ok).ends_with(&format!("'{tn} new'=2;;;0")),
        "{}",
        first_line(&ok)
    );

    let cases: Vec<(Vec<&str>, i32, String)> = vec![
        (
            vec!["--warn-pending", "4"],
            1,
            format!("DLQ WARNING - {tn} 5 pending (warn 4)"),
        ),
        (
            vec!["--crit-pending", "4"],
            2,
            format!("DLQ CRITICAL - {tn} 5 pending (crit 4)"),
        ),
        (vec!["--warn-pending", "5"], 0, "DLQ OK".into()),
        (
            vec!["--warn-age", "2h"],
            1,
            format!("DLQ WARNING - {tn} oldest 3h"),
        ),
        (
            vec!["--warn-age", "1h", "--crit-age", "2h"],
            2,
            format!("DLQ CRITICAL - {tn} oldest 3h"),
        ),
        (vec!["--crit-age", "4h"], 0, "DLQ OK".into()),
        (
            vec!["--warn-new", "1"],
            1,
            format!("DLQ WARNING - {tn} 2 new in 1h (warn 1)"),
        ),
        (
            vec!["--crit-new", "1"],
            2,
            format!("DLQ CRITICAL - {tn} 2 new in 1h (crit 1)"),
        ),
        (vec!["--warn-new", "2"], 0, "DLQ OK".into()),
        (
            vec!["--warn-new", "4", "--new-within", "4h"],
            1,
            format!("DLQ WARNING - {tn} 5 new in 4h (warn 4)"),
        ),
    ];
    for (args, code, start) in cases {
        let mut all = vec!["check"];
        all.extend(&args);
        status(&db.dlq(&all), code, &start);
    }
    // Pending and critical at once: the worst level names both figures.
    let r = db.dlq(&[
        "check",
        "--crit-pending",
        "1",
        "--crit-age",
        "1h",
        "--warn-new",
        "1",
    ]);
    status(
        &r,
        2,
        &format!("DLQ CRITICAL - {tn} 5 pending (crit 1), oldest 3h"),
    );

    let j = {
        let r = db.dlq(&["check", "--warn-new", "1", "-o", "json"]);
        assert_eq!(r.code(), 1, "{}", r.stderr());
        serde_json::from_str::<Value>(&r.stdout()).unwrap()
    };
    let s = &j["sources"][0];
    assert_eq!(
        (s["source"].as_str(), s["status"].as_str()),
        (Some("table"), Some("WARNING"))
    );
    assert_eq!(
        (s["pending"].as_u64(), s["new"].as_u64()),
        (Some(5), Some(2))
    );
    let age = s["oldest_age_seconds"].as_i64().unwrap();
    assert!((3 * 3600..3 * 3600 + 120).contains(&age), "{age}");

    // The same table as metrics.
    let m = parse(&db.dlq(&["metrics"]).ok());
    let l = [("source", "table"), ("location", tn)];
    assert_eq!(value(&m, "dlq_dead_letters", &l), Some(5.0));
    assert_eq!(value(&m, "dlq_replayed", &l), Some(1.0));
    let age = value(&m, "dlq_oldest_age_seconds", &l).unwrap();
    assert!(age >= 3.0 * 3600.0, "{age}");
    let by = |r: &str| {
        value(
            &m,
            "dlq_dead_letters_by_reason",
            &[l[0], l[1], ("reason", r)],
        )
    };
    assert_eq!(by("IntegrityError: <n>"), Some(3.0));
    assert_eq!(by("TimeoutError: <n>"), Some(2.0));
    db.drop().await;
}
crate::per_dialect!(check_table_levels);

#[tokio::test]
async fn check_unknown_when_the_table_is_missing() {
    let db = TestDb::new(Dialect::Sqlite, "check_missing").await;
    let r = db.dlq(&["check"]);
    status(&r, 3, "DLQ UNKNOWN - ");
}

/// One Prometheus sample, as the Python client's parser reads it.
#[derive(Debug)]
struct Sample {
    family: String,
    kind: String,
    name: String,
    labels: serde_json::Map<String, Value>,
    value: f64,
}

/// Parses the exposition text with `prometheus_client` (.ci/.venv): it fails on anything
/// a real scraper would reject.
fn parse(text: &str) -> Vec<Sample> {
    use std::io::Write as _;
    let script = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = []
for f in text_string_to_metric_families(sys.stdin.read()):
    assert f.documentation, f.name
    for s in f.samples:
        out.append({"family": f.name, "type": f.type, "name": s.name, "labels": s.labels, "value": s.value})
print(json.dumps(out))
"#;
    let mut child = Command::new(repo_root().join(".ci/.venv/bin/python"))
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python in .ci/.venv (pip install -r .ci/requirements.txt)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the Prometheus parser rejected:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    v.into_iter()
        .map(|s| Sample {
            family: s["family"].as_str().unwrap().into(),
            kind: s["type"].as_str().unwrap().into(),
            name: s["name"].as_str().unwrap().into(),
            labels: s["labels"].as_object().unwrap().clone(),
            value: s["value"].as_f64().unwrap(),
        })
        .collect()
}

fn value(m: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    m.iter()
        .find(|s| {
            s.name == name
                && s.labels.len() == labels.len()
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).and_then(Value::as_str) == Some(v))
        })
        .map(|s| s.value)
}

#[tokio::test]
async fn metrics_parse_and_count_table_and_queues() {
    let b = Broker::new("metrics").await;
    let dlq = seeded_dlq(&b).await;
    let before = b.snapshot(dlq).await;
    let db = TestDb::new(Dialect::Postgres, "metrics").await;
    db.init();
    let now = Utc::now().to_rfc3339();
    // 25 reasons (top 20 and `other`), one with a backslash and a lone double quote.
    let mut rows: Vec<_> = (0..25u8)
        .map(|i| {
            let motivo = format!("Err{}: boom", (b'a' + i) as char);
            row("t", None, &motivo, &now, false)
        })
        .collect();
    rows.push(row("t", None, r#"Err: C:\tmp "x"#, &now, false));
    rows.push(row("t", None, r#"Err: C:\tmp "x"#, &now, false));
    rows.push(row("t", None, "Errz: boom", &now, true));
    db.insert(&rows).await;
    let env = [
        ("DLQ_DATABASE_URL", db.url.as_str()),
        ("DLQ_TABLE", db.table.as_str()),
    ];
    let text = b.run_with(&["metrics"], &env).await.ok();
    let m = parse(&text);
    assert!(m.iter().all(|s| s.kind == "gauge" && s.family == s.name));
    let t = [("source", "table"), ("location", db.table.as_str())];
    let q = [("source", "queue"), ("location", dlq)];
    assert_eq!(value(&m, "dlq_dead_letters", &t), Some(27.0));
    assert_eq!(value(&m, "dlq_dead_letters", &q), Some(5.0));
    assert_eq!(value(&m, "dlq_replayed", &t), Some(1.0));
    assert!(value(&m, "dlq_replayed", &q).is_none());
    // Without --sample nothing of a queue is read: no age, no reasons.
    assert!(value(&m, "dlq_oldest_age_seconds", &q).is_none());
    assert!(value(&m, "dlq_oldest_age_seconds", &t).unwrap() < 600.0);
    let reasons: Vec<&Sample> = m
        .iter()
        .filter(|s| s.name == "dlq_dead_letters_by_reason")
        .collect();
    assert_eq!(reasons.len(), 21, "{reasons:?}");
    let by = |r: &str| {
        value(
            &m,
            "dlq_dead_letters_by_reason",
            &[t[0], t[1], ("reason", r)],
        )
    };
    assert_eq!(by(r#"Err: C:\tmp "x"#), Some(2.0), "{text}");
    let sum: f64 = reasons.iter().map(|s| s.value).sum();
    assert_eq!(sum, 27.0);
    assert!(by("other").unwrap() >= 1.0);

    // --sample reads the queue's head (and gives it back).
    let text = b.run_with(&["metrics", "--sample", "10"], &env).await.ok();
    let m = parse(&text);
    let age = value(&m, "dlq_oldest_age_seconds", &q).unwrap();
    assert!(age >= 3.0 * 3600.0, "{age}");
    let queue_reasons: f64 = m
        .iter()
        .filter(|s| s.name == "dlq_dead_letters_by_reason")
        .filter(|s| s.labels["source"] == "queue")
        .map(|s| s.value)
        .sum();
    assert_eq!(queue_reasons, 5.0, "{text}");
    assert_eq!(b.snapshot(dlq).await, before, "metrics changed the queue");
    db.drop().await;
    b.delete().await;
}

#[tokio::test]
async fn metrics_textfile_is_written_atomically() {
    let db = TestDb::new(Dialect::Sqlite, "textfile").await;
    db.init();
    db.insert(&[row("t", None, "E: x", &Utc::now().to_rfc3339(), false)])
        .await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dlq.prom");
    let p = path.to_str().unwrap();
    assert_eq!(db.dlq(&["metrics", "--textfile", p]).ok(), "");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.ends_with('\n'));
    let l = [("source", "table"), ("location", db.table.as_str())];
    assert_eq!(value(&parse(&text), "dlq_dead_letters", &l), Some(1.0));
    // Overwritten whole; never a temporary file left beside it.
    db.insert(&[row("t", None, "E: y", &Utc::now().to_rfc3339(), false)])
        .await;
    db.dlq(&["metrics", "--textfile", p]).ok();
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(value(&parse(&text), "dlq_dead_letters", &l), Some(2.0));
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec!["dlq.prom"]);
    // A failed refresh leaves the last good file alone.
    let r = Dlq::new()
        .args(&[
            "--database-url",
            "postgres://u@127.0.0.1:1/x",
            "metrics",
            "--textfile",
            p,
        ])
        .run();
    assert_eq!(r.code(), 1, "{}", r.stderr());
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

/// The `--listen` process, killed when the test ends however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn get(url: &str) -> (u16, String) {
    let r = reqwest::get(url).await.expect("metrics server answers");
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test]
async fn metrics_listen_serves_caches_and_refreshes() {
    let b = Broker::new("listen").await;
    let dlq = "listen.dlq";
    let work = topology(&b, dlq).await;
    kill(&b, &work, 1).await;
    b.wait_depth(dlq, 1).await;
    let addr = format!("127.0.0.1:{}", crate::support::node::free_port());
    let interval = Duration::from_secs(3);
    let child = crate::common::dlq_command()
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(crate::target::dlq_env())
        .env(
            "XDG_CONFIG_HOME",
            std::env::temp_dir().join(unique("dlq-no-config")),
        )
        .env("DLQ_AMQP_URL", b.amqp_url())
        .args(["metrics", "--listen", &addr, "--interval", "3s"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut server = Server(child);
    let base = format!("http://{addr}");
    let start = Instant::now();
    while reqwest::get(format!("{base}/")).await.is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "server never listened"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let q = [("source", "queue"), ("location", dlq)];
    let depth = |text: &str| value(&parse(text), "dlq_dead_letters", &q);

    let (code, _) = get(&format!("{base}/elsewhere")).await;
    assert_eq!(code, 404);
    let (code, text) = get(&format!("{base}/metrics")).await;
    let first = Instant::now();
    assert_eq!(code, 200, "{text}");
    assert_eq!(depth(&text), Some(1.0));

    kill(&b, &work, 1).await;
    b.wait_depth(dlq, 2).await;
    // Within the interval: the cached text, whatever arrived meanwhile.
    let (_, text) = get(&format!("{base}/metrics")).await;
    if first.elapsed() < interval - Duration::from_millis(500) {
        assert_eq!(depth(&text), Some(1.0), "refreshed within the interval");
    }
    tokio::time::sleep(interval.saturating_sub(first.elapsed()) + Duration::from_millis(300)).await;
    let (_, text) = get(&format!("{base}/metrics")).await;
    assert_eq!(depth(&text), Some(2.0), "not refreshed after the interval");

    // SIGTERM stops it cleanly.
    let pid = server.0.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let start = Instant::now();
    let code = loop {
        if let Some(s) = server.0.try_wait().unwrap() {
            break s.code();
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "server ignored SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(code, Some(0));
    drop(server);
    b.delete().await;
}
