//! Archiving dead-letter queues and restoring from the archive, against a real broker.

use crate::broker::{Broker, Snap, ls, table};
use lapin::types::{AMQPValue, DecimalValue, FieldArray, FieldTable, LongString};
use lapin::{BasicProperties, ExchangeKind};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const DLX: &str = "matriculas.dlx";
const DLQ: &str = "matriculas.dlq";
const MAIN: &str = "matriculas.processar";

async fn topology(b: &Broker) {
    b.exchange(DLX, ExchangeKind::Fanout).await;
    b.queue(DLQ, FieldTable::default()).await;
    b.bind(DLQ, DLX, "").await;
    b.queue(MAIN, table(vec![("x-dead-letter-exchange", ls(DLX))]))
        .await;
}

/// Every AMQP header type a producer can send (the broker cannot carry NaN/inf floats).
fn every_header_type(i: usize) -> FieldTable {
    table(vec![
        ("bool", AMQPValue::Boolean(i.is_multiple_of(2))),
        ("i8", AMQPValue::ShortShortInt(-5)),
        ("u8", AMQPValue::ShortShortUInt(250)),
        ("i16", AMQPValue::ShortInt(-30_000)),
        ("u16", AMQPValue::ShortUInt(60_000)),
        ("i32", AMQPValue::LongInt(-2_000_000_000)),
        ("u32", AMQPValue::LongUInt(4_000_000_000)),
        ("i64", AMQPValue::LongLongInt(i64::MIN + i as i64)),
        ("f32", AMQPValue::Float(1.5)),
        ("f64", AMQPValue::Double(-0.1)),
        (
            "decimal",
            AMQPValue::DecimalValue(DecimalValue {
                scale: 2,
                value: 12345,
            }),
        ),
        ("text", ls("ação ✓")),
        (
            "not-utf8",
            AMQPValue::LongString(LongString::from(vec![0xff, 0xfe, 0x00, b'z'])),
        ),
        ("timestamp", AMQPValue::Timestamp(1_700_000_000)),
        ("bytes", AMQPValue::ByteArray(vec![0u8, 1, 2, 255].into())),
        (
            "array",
            AMQPValue::FieldArray(FieldArray::from(vec![
                AMQPValue::LongInt(1),
                ls("two"),
                AMQPValue::Void,
            ])),
        ),
        (
            "nested",
            AMQPValue::FieldTable(table(vec![(
                "deep",
                AMQPValue::FieldTable(table(vec![("x", AMQPValue::Boolean(true))])),
            )])),
        ),
        ("void", AMQPValue::Void),
        ("x-exception-message", ls(&format!("KeyError: {i}"))),
    ])
}

/// `n` real dead letters: binary and JSON bodies, every header type, rich properties.
async fn dead_letters(b: &Broker, n: usize) {
    for i in 0..n {
        let body = if i.is_multiple_of(2) {
            vec![0u8, 0xff, i as u8, 0x80, b'\n']
        } else {
            format!(r#"{{"i": {i}}}"#).into_bytes()
        };
        let props = BasicProperties::default()
            .with_message_id(format!("m-{i}").as_str().into())
            .with_content_type("application/octet-stream".into())
            .with_delivery_mode(2)
            .with_priority(7)
            .with_correlation_id("corr".into())
            .with_reply_to("replies".into())
            .with_timestamp(1_700_000_123)
            .with_type("kind".into())
            .with_app_id("svc".into())
            .with_headers(every_header_type(i));
        b.publish(MAIN, &body, props).await;
    }
    b.reject(MAIN, n).await;
    b.wait_depth(DLQ, n as u32).await;
}

fn headers(s: &Snap) -> &serde_json::Map<String, Value> {
    s.props["headers"].as_object().unwrap()
}

#[tokio::test]
async fn archive_delete_restore_round_trip_is_exact() {
    let b = Broker::new("qarch").await;
    topology(&b).await;
    dead_letters(&b, 8).await;
    let before = b.snapshot(DLQ).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dlq.ndjson.gz");
    let f = file.to_str().unwrap();

    // Without --delete the queue is untouched.
    let plain = dir.path().join("copy.ndjson");
    b.run(&["archive", "-Q", DLQ, "--to", plain.to_str().unwrap()])
        .await
        .ok();
    assert_eq!(b.snapshot(DLQ).await, before);

    let run = b
        .run(&["archive", "-Q", DLQ, "--to", f, "--delete", "--yes"])
        .await;
    run.ok();
    assert!(
        run.stderr().contains("8 message(s)") && run.stderr().contains("8 deleted"),
        "{}",
        run.stderr()
    );
    b.wait_depth(DLQ, 0).await;

    let restore = b.run(&["replay", "--from-file", f, "--yes"]).await;
    restore.ok();
    assert!(
        restore.stderr().contains("8 replayed"),
        "{}",
        restore.stderr()
    );
    b.wait_depth(MAIN, 8).await;
    let back = b.snapshot(MAIN).await;
    for (r, o) in back.iter().zip(&before) {
        assert_eq!(r.body, o.body, "body bytes");
        for p in [
            "message_id",
            "content_type",
            "delivery_mode",
            "priority",
            "correlation_id",
            "reply_to",
            "timestamp",
            "type",
            "app_id",
        ] {
            assert_eq!(r.props[p], o.props[p], "{p}");
        }
        let (rh, oh) = (headers(r), headers(o));
        // dlq-x-death: a string holding the history as typed JSON.
        let saved: Value = serde_json::from_str(rh["dlq-x-death"][1].as_str().unwrap()).unwrap();
        // Every header as it was, with its AMQP type, except the documented history move
        // (x-last-death-* exist from RabbitMQ 3.13 on).
        for (k, v) in oh {
            if k.starts_with("x-death")
                || k.starts_with("x-first-death")
                || k.starts_with("x-last-death")
            {
                assert_eq!(&saved[k], v, "{k} kept in dlq-x-death");
            } else {
                assert_eq!(&rh[k], v, "{k}");
            }
        }
        assert_eq!(rh["dlq-replay-count"], json!(["l", 1]));
    }
    // Restoring again does nothing (journal).
    let again = b.run(&["replay", "--from-file", f, "--yes"]).await;
    again.ok();
    assert!(
        again.stderr().contains("already restored"),
        "{}",
        again.stderr()
    );
    assert_eq!(b.depth(MAIN).await, 8);
    b.delete().await;
}

#[tokio::test]
async fn selective_archive_delete_leaves_the_rest_in_order() {
    let b = Broker::new("qarch-sel").await;
    topology(&b).await;
    dead_letters(&b, 10).await;
    let before = b.snapshot(DLQ).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("odd.ndjson");
    // Odd messages have JSON bodies.
    b.run(&[
        "archive",
        "-Q",
        DLQ,
        "--where",
        ".payload.i? != null",
        "--to",
        file.to_str().unwrap(),
        "--delete",
        "--yes",
    ])
    .await
    .ok();
    b.wait_depth(DLQ, 5).await;
    let left = b.snapshot(DLQ).await;
    let expected: Vec<Snap> = before.iter().step_by(2).cloned().collect();
    assert_eq!(left, expected);
    let lines = std::fs::read_to_string(&file).unwrap().lines().count();
    assert_eq!(lines, 5 + 2);
    b.delete().await;
}

async fn big_dlq(b: &Broker, n: usize) {
    b.queue(DLQ, FieldTable::default()).await;
    b.publish_many(
        DLQ,
        (0..n).map(|i| format!(r#"{{"i": {i}, "pad": "{}"}}"#, "x".repeat(200)).into_bytes()),
    )
    .await;
    b.wait_depth(DLQ, n as u32).await;
}

fn spawn_archive(b: &Broker, file: &std::path::Path) -> std::process::Child {
    crate::common::dlq_command()
        .env(
            "XDG_CONFIG_HOME",
            std::env::temp_dir().join("dlq-tests-no-config"),
        )
        .env("DLQ_AMQP_URL", b.amqp_url())
        .args([
            "archive",
            "-Q",
            DLQ,
            "--to",
            file.to_str().unwrap(),
            "--delete",
            "--yes",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

fn wait_for_growth(p: &std::path::Path, bytes: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::metadata(p).map(|m| m.len()).unwrap_or(0) < bytes {
        assert!(
            Instant::now() < deadline,
            "{} never reached {bytes} bytes",
            p.display()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[tokio::test]
async fn killed_archive_removes_nothing_and_overlapping_runs_are_locked_out() {
    let b = Broker::new("qarch-kill").await;
    let n = 20_000;
    big_dlq(&b, n).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a.ndjson");
    let mut child = spawn_archive(&b, &file);
    wait_for_growth(&dir.path().join("a.ndjson.partial"), 100_000);
    // A second run while the first holds the queue: refused at once.
    let second = b
        .run(&[
            "archive",
            "-Q",
            DLQ,
            "--to",
            dir.path().join("b.ndjson").to_str().unwrap(),
            "--delete",
            "--yes",
        ])
        .await;
    second.fails(1, "holds the lock");
    // kill -9 in the middle of writing: the broker requeues everything it held.
    child.kill().unwrap();
    child.wait().unwrap();
    b.wait_depth(DLQ, n as u32).await;
    assert!(!file.exists());
    let snap = b.snapshot(DLQ).await;
    let order: Vec<i64> = snap
        .iter()
        .map(|s| {
            serde_json::from_slice::<Value>(&s.body).unwrap()["i"]
                .as_i64()
                .unwrap()
        })
        .collect();
    assert_eq!(
        order,
        (0..n as i64).collect::<Vec<_>>(),
        "all back, in order"
    );
    // The lock went with the killed process; a new run completes.
    let out = spawn_archive(&b, &file).wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    b.wait_depth(DLQ, 0).await;
    assert_eq!(
        std::fs::read_to_string(&file).unwrap().lines().count(),
        n + 2
    );
    b.delete().await;
}

/// A disk that fills up: the archive fails and nothing is removed from the queue.
#[tokio::test]
async fn full_disk_removes_nothing() {
    let b = Broker::new("qarch-full").await;
    big_dlq(&b, 2_000).await;
    let mnt = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            "size=64k",
            "tmpfs",
            mnt.path().to_str().unwrap(),
        ])
        .status()
        .expect("mount is available");
    assert!(status.success(), "mounting a small tmpfs needs root");
    let file = mnt.path().join("a.ndjson");
    let run = b
        .run(&[
            "archive",
            "-Q",
            DLQ,
            "--to",
            file.to_str().unwrap(),
            "--delete",
            "--yes",
        ])
        .await;
    run.fails(1, "nothing was deleted");
    b.wait_depth(DLQ, 2_000).await;
    assert!(!file.exists());
    assert!(
        std::fs::read_dir(mnt.path()).unwrap().next().is_none(),
        "no partial file left"
    );
    let _ = std::process::Command::new("umount")
        .arg(mnt.path())
        .status();
    b.delete().await;
}

/// `archive --delete` on a quorum DLQ (#31 item 1): the count dlq prints and records is the
/// count that left the queue, every time, at several sizes of `--limit` (one `multiple`
/// acknowledgement per fully archived take window, per-message ones otherwise, and the
/// removal checked by reading the queue again).
#[tokio::test]
async fn quorum_archive_delete_reports_what_actually_left() {
    let b = Broker::new("qarch-quorum").await;
    let dlq = "q.dlq";
    b.queue(dlq, table(vec![("x-queue-type", ls("quorum"))]))
        .await;
    b.publish_many(
        dlq,
        (0..2_000).map(|i| format!("{{\"n\": {i}}}").into_bytes()),
    )
    .await;
    b.wait_depth(dlq, 2_000).await;
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.ndjson");
    let mut left = 2_000u32;
    for (i, limit) in ["100", "333", "1000"].iter().enumerate() {
        let n: u32 = limit.parse().unwrap();
        archive_deleting(
            &b,
            dlq,
            &dir.path().join(format!("a{i}.ndjson")),
            limit,
            &audit,
            n,
        )
        .await;
        left -= n;
        // Settled: the queue holds exactly what was not archived.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(b.depth(dlq).await, left, "--limit {limit}");
    }
    let done: Vec<u64> = archive_ends(&audit)
        .iter()
        .map(|r| r["done"].as_u64().unwrap())
        .collect();
    assert_eq!(done, vec![100, 333, 1000]);
    b.delete().await;
}

/// `archive --delete --limit` of `dlq` to `file`, recorded in `audit`: exit 0, and it says
/// `deleted` were deleted.
async fn archive_deleting(
    b: &Broker,
    dlq: &str,
    file: &std::path::Path,
    limit: &str,
    audit: &std::path::Path,
    deleted: u32,
) {
    let f = file.to_str().unwrap();
    let args = [
        "archive", "-Q", dlq, "--to", f, "--delete", "--limit", limit, "--yes",
    ];
    let run = b
        .run_with(&args, &[("DLQ_AUDIT_LOG", audit.to_str().unwrap())])
        .await;
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let said = format!("{deleted} deleted");
    assert!(run.stderr().contains(&said), "{}", run.stderr());
}

/// The archives' end records in the audit trail `audit` (reads that renew a quorum queue
/// with a delivery limit, RabbitMQ 4's default, record themselves as `renew`).
fn archive_ends(audit: &std::path::Path) -> Vec<Value> {
    let trail = std::fs::read_to_string(audit).unwrap();
    trail
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["event"] == "end" && r["action"] == "archive")
        .collect()
}

/// A quorum DLQ can hold identical messages (a producer's retried publish, a replay's
/// duplicate). An archive that selects some of them removes those and says so: before, the
/// check of the removal found the identical copies it had given back, and reported the
/// archived ones as still queued: "0 deleted", exit 3, "run the same archive again", and an
/// audit end record with exit 0.
#[tokio::test]
async fn a_quorum_archive_of_some_identical_copies_reports_them_deleted() {
    let b = Broker::new("qarch-same").await;
    let dlq = "q.dlq";
    b.queue(dlq, table(vec![("x-queue-type", ls("quorum"))]))
        .await;
    b.publish_many(dlq, (0..10).map(|_| br#"{"same": true}"#.to_vec()))
        .await;
    b.wait_depth(dlq, 10).await;
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.ndjson");
    for (i, (limit, deleted, left)) in [("3", 3, 7), ("10", 7, 0)].into_iter().enumerate() {
        let file = dir.path().join(format!("a{i}.ndjson"));
        archive_deleting(&b, dlq, &file, limit, &audit, deleted).await;
        b.wait_depth(dlq, left).await;
    }
    let ends: Vec<(u64, u64)> = archive_ends(&audit)
        .iter()
        .map(|r| (r["done"].as_u64().unwrap(), r["exit"].as_u64().unwrap()))
        .collect();
    assert_eq!(ends, vec![(3, 0), (7, 0)]);
    b.delete().await;
}

/// `archive --to -` (a read: `--delete` needs a file) whose reader stops reading for five
/// heartbeats (see `queue_read::a_reader_that_stops_reading_costs_no_delivery`). Before, dlq's
/// runtime blocked in its write to stdout and the connection was lost: exit 1, and a quorum
/// DLQ's messages back with a delivery counted. The archive now goes to stdout through a
/// thread of its own: whole (header, 3,000 records in order, trailer), exit 0, and the DLQ
/// unchanged, none delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archive_to_stdout_whose_reader_stops_reading_completes() {
    let (b, q, n) = crate::queue_read::paged_quorum_dlq("pagerarch").await;
    let args = ["archive", "-Q", q, "--to", "-"];
    let (out, err) = crate::queue_read::read_late(&b, &args, n).await;
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), n as usize + 2, "{err}");
    let ns: Vec<i64> = lines[1..=n as usize]
        .iter()
        .map(|r| r["payload"]["n"].as_i64().unwrap())
        .collect();
    assert_eq!(ns, (0..i64::from(n)).collect::<Vec<_>>(), "{err}");
    assert_eq!(
        lines[n as usize + 1]["dlq_archive_end"]["count"],
        n,
        "{err}"
    );
    crate::queue_read::unchanged_and_undelivered(b, q, n).await;
}

/// A selective `archive --delete` of a quorum DLQ on RabbitMQ 4.3 gives back what it did
/// not select with a nack. Its windows share one channel while they keep fewer than 2,000,
/// and one nack over many consumers is one return each: past 32 in flight the channel
/// stashes them, sends them newest consumer first, and drops them as it closes (then
/// counted). 3,000 messages in windows of 16, the 300 whose `n` ends in 7 not selected: each
/// window's kept ones now go back by themselves, once the window before shows. The 300 stay,
/// in order unless dlq said otherwise, none counted; the 2,700 are in the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selective_archive_gives_back_what_it_kept_window_by_window_counting_none() {
    if crate::target::rabbitmq_version().await < (4, 3) {
        return;
    }
    let (b, q, n) = crate::queue_read::paged_quorum_dlq("qarchkept").await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a.ndjson");
    let to = file.to_str().unwrap();
    let args = ["archive", "-Q", q, "-e", r#""n":[0-9]*[0-689],"#];
    let args = [&args[..], &["--to", to, "--delete", "--yes"]].concat();
    let run = b.run_with(&args, &[("DLQ_READ_WINDOW", "16")]).await;
    let said = run.stderr();
    run.ok();
    let archived = std::fs::read_to_string(&file).unwrap().lines().count();
    assert_eq!(archived, n as usize - 300 + 2, "{said}");
    let after = b.snapshot(q).await;
    let mut ns = crate::quorum_limits::snap_ns(&after);
    let kept: Vec<i64> = (0..i64::from(n)).filter(|i| i % 10 == 7).collect();
    if crate::queue_read::order_change_said(&said) {
        ns.sort_unstable();
    }
    let ids: Vec<u64> = ns.iter().map(|&i| i as u64).collect();
    assert!(ns == kept, "{}: {said}", crate::cluster::runs(&ids));
    let counted = after.iter().filter(|m| m.delivery_count.unwrap_or(0) > 0);
    assert_eq!(counted.count(), 0, "a delivery counted: {said}");
    b.delete().await;
}
