//! Quorum DLQs with a delivery limit (RabbitMQ 4.x gives every quorum queue one of 20):
//! reading never brings a dead letter closer to being dropped. Each test sets the limit
//! explicitly where it matters, so that it runs alike on RabbitMQ 3.10 and 4.0.

use crate::broker::{Broker, Snap, ls, table};
use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// A quorum DLQ `q.dlq` with `limit_args`, fed by `q.src` through a fanout DLX, holding `n`
/// real dead letters whose bodies are `{"n": i}` and whose message ids are `m<i>`.
async fn quorum_dlq(prefix: &str, limit_args: Vec<(&str, AMQPValue)>, n: usize) -> Broker {
    let b = Broker::new(prefix).await;
    b.exchange("q.dlx", lapin::ExchangeKind::Fanout).await;
    let mut args = vec![("x-queue-type", ls("quorum"))];
    args.extend(limit_args);
    b.queue("q.dlq", table(args)).await;
    b.bind("q.dlq", "q.dlx", "").await;
    b.queue(
        "q.src",
        table(vec![("x-dead-letter-exchange", ls("q.dlx"))]),
    )
    .await;
    for i in 0..n {
        let props = BasicProperties::default()
            .with_message_id(format!("m{i}").into())
            .with_content_type("application/json".into())
            .with_headers(table(vec![(
                "x-exception-message",
                ls(&format!("boom {i}")),
            )]));
        b.publish("q.src", format!("{{\"n\": {i}}}").as_bytes(), props)
            .await;
    }
    b.reject("q.src", n).await;
    b.wait_depth("q.dlq", n as u32).await;
    b
}

/// A quorum DLQ without a delivery limit. 4.x: `delivery-limit: -1` by policy (as `dlq check`
/// advises). 3.x has none by default, and there -1 would drop every message at its first
/// return (dlq takes it as a limit of 0 and renews).
async fn unlimited_quorum_dlq(b: &Broker, name: &str) {
    if crate::target::rabbitmq_major().await >= 4 {
        let pattern = format!("^{}$", regex::escape(name));
        b.policy(
            "dlq-no-delivery-limit",
            &pattern,
            json!({"delivery-limit": -1}),
        )
        .await;
    }
    b.queue(name, table(vec![("x-queue-type", ls("quorum"))]))
        .await;
}

fn limit(n: i64) -> Vec<(&'static str, AMQPValue)> {
    vec![("x-delivery-limit", AMQPValue::LongLongInt(n))]
}

/// The `n` of each message's body, in queue order.
pub(crate) fn snap_ns(snaps: &[Snap]) -> Vec<i64> {
    let n = |s: &Snap| serde_json::from_slice::<Value>(&s.body).unwrap()["n"].as_i64();
    snaps.iter().map(|s| n(s).unwrap()).collect()
}

/// The messages back at a delivery count above 0 in `snaps`: each counted once, and no more
/// of them than dlq said a channel RabbitMQ closed or a lost connection counted (`err`, "up
/// to N message(s) counted" or "were given back instead of renewed", added up).
fn counted_as_said(snaps: &[Snap], err: &str) {
    let counted: Vec<(i64, i64)> = snaps
        .iter()
        .zip(snap_ns(snaps))
        .filter_map(|(s, i)| s.delivery_count.filter(|&c| c > 0).map(|c| (i, c)))
        .collect();
    // `\s*`: a terminal's screen wraps lines (joined before, trailing spaces trimmed).
    let said = regex::Regex::new(
        r"up to\s*(\d+)\s*message\(s\)\s*(counted|were given back instead of renewed)",
    )
    .unwrap();
    let most: usize = said
        .captures_iter(err)
        .map(|c| c[1].parse::<usize>().unwrap())
        .sum();
    assert!(
        counted.len() <= most && counted.iter().all(|&(_, c)| c == 1),
        "counted (n, count), {most} said: {counted:?}\n{err}"
    );
}

fn ns(recs: &[Value]) -> Vec<i64> {
    recs.iter()
        .map(|r| r["payload"]["n"].as_i64().unwrap())
        .collect()
}

/// The issue's case: 25 reads in a row of a 100-message quorum DLQ with a limit of 20, by
/// every reading command. Each sees all 100, none is dropped, the order and every property
/// and header stay, and the audit trail records each renewal (before RabbitMQ 4.3; on 4.3
/// each read gives back by a nack, which does not count, and renews nothing).
#[tokio::test]
async fn quorum_dlq_read_25_times_keeps_every_message() {
    let n = 100;
    let renews = !crate::target::nacks_uncounted().await;
    let b = quorum_dlq("q25", limit(20), n).await;
    let before = b.snapshot("q.dlq").await;
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.ndjson");
    let audit_s = audit.to_str().unwrap();
    let env = [("DLQ_AUDIT_LOG", audit_s)];
    for round in 0..25 {
        let run = match round % 5 {
            0 | 1 => {
                let run = b
                    .run_with(
                        &["inspect", "-Q", "q.dlq", "--limit", "500", "-o", "ndjson"],
                        &env,
                    )
                    .await;
                assert_eq!(
                    ns(&run.ndjson()),
                    (0..n as i64).collect::<Vec<_>>(),
                    "round {round}"
                );
                run
            }
            2 => {
                let run = b
                    .run_with(&["filter", "-Q", "q.dlq", "--count"], &env)
                    .await;
                assert_eq!(run.ok().trim(), n.to_string(), "round {round}");
                run
            }
            3 => {
                let run = b
                    .run_with(&["list", "-Q", "q.dlq", "-o", "json"], &env)
                    .await;
                let row = &run.json()[0];
                assert_eq!(row["pending"], n, "round {round}");
                assert_eq!(row["details"]["sample"]["read"], n, "round {round}: {row}");
                run
            }
            _ => {
                let run = b.run_with(&["check", "-Q", "q.dlq"], &env).await;
                assert_eq!(run.code(), 0, "round {round}: {}", run.stdout());
                assert!(run.stdout().contains("100 pending"), "{}", run.stdout());
                run
            }
        };
        assert_eq!(
            run.stderr().contains("renewed 100 message(s)"),
            renews,
            "round {round}: {}",
            run.stderr()
        );
        assert_eq!(b.depth("q.dlq").await, n as u32, "round {round}");
    }
    let after = b.snapshot("q.dlq").await;
    assert_eq!(after.len(), n);
    // Renewed copies start at 0 (nacked ones are not counted): only the snapshots' own
    // give-backs count.
    assert!(
        after.iter().all(|m| m.delivery_count.unwrap_or(0) <= 1),
        "{:?}",
        after.iter().map(|m| m.delivery_count).collect::<Vec<_>>()
    );
    for (a, z) in before.iter().zip(&after) {
        assert_eq!(a.body, z.body);
        assert_eq!(a.props, z.props, "every property and header kept");
    }
    // Nothing to record when nothing was renewed.
    let records = std::fs::read_to_string(&audit).unwrap_or_default();
    let renewals: Vec<Value> = records
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["action"] == "renew" && r["event"] == "end")
        .collect();
    assert_eq!(renewals.len(), if renews { 25 } else { 0 }, "{records}");
    assert!(
        renewals
            .iter()
            .all(|r| r["done"] == n && r["location"] == "q.dlq")
    );
    b.wait_depth("q.dlq", n as u32).await;
    b.delete().await;
}

/// A dlq killed with SIGKILL in the middle of a renewing read: the broker gives back what
/// was held, the copies already confirmed stay. Nothing is lost; the duplicates are bounded
/// by what was confirmed but not yet acknowledged.
#[tokio::test]
async fn renewal_killed_mid_read_loses_nothing() {
    let n = 20_000;
    let b = Broker::new("qkill").await;
    let q = "kill.dlq";
    b.queue(
        q,
        table(vec![
            ("x-queue-type", ls("quorum")),
            ("x-delivery-limit", AMQPValue::LongLongInt(20)),
        ]),
    )
    .await;
    b.publish_many(q, (0..n).map(|i| format!("{{\"n\": {i}}}").into_bytes()))
        .await;
    b.wait_depth(q, n as u32).await;
    // Kill it once it has read (and renewed) part of the queue.
    let (mut child, _out) = filter_shown(&b, q, 5_000, std::process::Stdio::null());
    child.kill().unwrap();
    child.wait().unwrap();
    // The broker requeues the dead connection's messages asynchronously: wait until the
    // queue holds at least the original count and has stopped growing.
    let mut depth = 0;
    for _ in 0..300 {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let now = b.depth(q).await;
        if now as usize >= n && now == depth {
            break;
        }
        depth = now;
    }
    let recs = b.run(&["filter", "-Q", q, "-o", "ndjson"]).await.ndjson();
    assert_eq!(recs.len(), depth as usize);
    let mut seen: BTreeMap<i64, u32> = BTreeMap::new();
    for v in ns(&recs) {
        *seen.entry(v).or_default() += 1;
    }
    let missing: Vec<i64> = (0..n as i64).filter(|i| !seen.contains_key(i)).collect();
    assert!(
        missing.is_empty(),
        "lost {} message(s): {:?}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    let duplicated = recs.len() - n;
    eprintln!("killed mid-renewal: {duplicated} duplicate(s) of {n}");
    // Originals are acknowledged as their copies are confirmed, 64 at a time: only those
    // confirmed since the last acknowledgement are doubled (120 seen; 3,278 when it was done
    // per read window of up to 4,000). Acknowledgements sent but not yet applied when dlq
    // dies are lost too (424 once in CI on 781d43a, past the 256 this allowed), so the bound
    // is the read's credit, as for a node's crash (`cluster`): an original the broker still
    // counts unacknowledged holds one of its 2,000, and no more are delivered.
    assert!(duplicated <= 2_000, "{duplicated} duplicates");
    b.delete().await;
}

/// Without a limit (`delivery-limit: -1` by policy) nothing is renewed, and a classic DLQ
/// is never renewed; a queue a renewal could lose messages from (a TTL) is refused unless
/// `--force`, which reads it the old way and says what that did.
#[tokio::test]
async fn no_limit_classic_and_refused_quorum_dlqs() {
    let b = Broker::new("qnolimit").await;
    unlimited_quorum_dlq(&b, "free.dlq").await;
    b.queue("classic.dlq", FieldTable::default()).await;
    b.queue(
        "ttl.dlq",
        table(vec![
            ("x-queue-type", ls("quorum")),
            ("x-delivery-limit", AMQPValue::LongLongInt(1)),
            ("x-message-ttl", AMQPValue::LongLongInt(3_600_000)),
        ]),
    )
    .await;
    for q in ["free.dlq", "classic.dlq", "ttl.dlq"] {
        for i in 0..3 {
            b.publish(
                q,
                format!("{{\"n\": {i}}}").as_bytes(),
                BasicProperties::default(),
            )
            .await;
        }
    }
    for q in ["free.dlq", "classic.dlq"] {
        let run = b.run(&["inspect", "-Q", q, "-o", "json"]).await;
        assert_eq!(run.json().as_array().unwrap().len(), 3);
        assert!(!run.stderr().contains("renewed"), "{}", run.stderr());
    }
    // Given back by closing: the policy's -1 leaves the count free to grow; 4.3 gives
    // back with a nack, which does not count.
    b.wait_depth("free.dlq", 3).await;
    let count = if crate::target::nacks_uncounted().await {
        None
    } else {
        Some(1)
    };
    assert!(
        b.snapshot("free.dlq")
            .await
            .iter()
            .all(|m| m.delivery_count == count)
    );

    if crate::target::nacks_uncounted().await {
        // RabbitMQ 4.3 does not count a nack: nothing to refuse, the count stays.
        let run = b.run(&["inspect", "-Q", "ttl.dlq", "-o", "json"]).await;
        assert_eq!(run.json().as_array().unwrap().len(), 3);
        let after = b.snapshot("ttl.dlq").await;
        assert_eq!(after.len(), 3);
        assert!(after.iter().all(|m| m.delivery_count.is_none()));
        b.delete().await;
        return;
    }
    let err = b
        .run(&["inspect", "-Q", "ttl.dlq"])
        .await
        .fails(2, "delivery limit 1");
    assert!(
        err.contains("x-message-ttl") && err.contains("--force"),
        "{err}"
    );
    let list = b.run(&["list", "-Q", "ttl.dlq", "-o", "json"]).await.json();
    assert!(
        list[0]["details"]["sample"]["skipped"]
            .as_str()
            .unwrap()
            .contains("cannot be renewed: it has the argument x-message-ttl"),
        "{list}"
    );
    let run = b
        .run(&["inspect", "-Q", "ttl.dlq", "--force", "-o", "json"])
        .await;
    assert_eq!(run.json().as_array().unwrap().len(), 3);
    assert!(
        run.stderr().contains("are now at the delivery limit 1"),
        "{}",
        run.stderr()
    );
    assert_eq!(b.depth("ttl.dlq").await, 3);
    b.delete().await;
}

/// `dlq check` names a DLQ whose limit can drop dead letters, on a line of its own, with
/// what removes it on this generation; the status stays what the thresholds say.
#[tokio::test]
async fn check_warns_about_a_dlq_delivery_limit() {
    let v4 = crate::target::rabbitmq_major().await >= 4;
    let b = Broker::new("qcheck").await;
    unlimited_quorum_dlq(&b, "free.dlq").await;
    b.queue(
        "lim.dlq",
        table(vec![
            ("x-queue-type", ls("quorum")),
            ("x-delivery-limit", AMQPValue::LongLongInt(20)),
        ]),
    )
    .await;
    let run = b.run(&["check", "-Q", "lim.dlq", "-Q", "free.dlq"]).await;
    assert_eq!(run.code(), 0, "{}", run.stdout());
    let out = run.stdout();
    assert!(out.starts_with("DLQ OK"), "{out}");
    let warnings: Vec<&str> = out.lines().filter(|l| l.starts_with("warning: ")).collect();
    assert_eq!(warnings.len(), 1, "{out}");
    assert!(
        warnings[0].starts_with("warning: \"lim.dlq\" is a quorum queue with delivery limit 20"),
        "{out}"
    );
    let advice = if v4 {
        r#"set_policy dlq-no-delivery-limit '^lim\.dlq$' '{"delivery-limit":-1}' --apply-to quorum_queues"#
    } else {
        "on RabbitMQ 3.x a negative limit drops every message at its first return"
    };
    assert!(warnings[0].contains(advice), "{out}");
    let json = b
        .run(&["check", "-Q", "lim.dlq", "-o", "json"])
        .await
        .json();
    assert!(
        json["sources"][0]["limit_risk"]
            .as_str()
            .unwrap()
            .contains("limit 20")
    );
    b.delete().await;
}

/// Sends `n` `quorum_tasks.add` tasks with a stock Celery client (a countdown when > 0).
fn send_celery_tasks(broker: &str, n: u32, countdown: u32) {
    let out = std::process::Command::new(crate::celery_worker::python())
        .args(["quorum_tasks.py", &n.to_string(), &countdown.to_string()])
        .current_dir(crate::common::repo_root().join("tests/celery"))
        .env("DLQ_TEST_BROKER", broker)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Celery 5.7 on quorum queues with a topic default exchange: its work queue `celery` is fed
/// only by the celery_delayed_* hops of countdown tasks. With ordinary tasks waiting for a
/// worker it is never listed, read, checked or exported as a DLQ; the real DLQ beside it is.
#[tokio::test]
async fn celery_quorum_work_queue_is_never_a_dlq() {
    let b = Broker::new("celeryq").await;
    b.queue("real.dlq", FieldTable::default()).await;
    b.queue(
        "real.src",
        table(vec![
            ("x-dead-letter-exchange", ls("")),
            ("x-dead-letter-routing-key", ls("real.dlq")),
        ]),
    )
    .await;
    let url = b.amqp_url();
    let worker = crate::celery_worker::CeleryWorker::start_app(
        "quorum_tasks",
        "celery",
        &[("DLQ_TEST_BROKER", url.as_str())],
    )
    .await;
    // The app runs tasks on this broker, and a countdown took the native delayed delivery.
    send_celery_tasks(&url, 1, 0);
    worker.wait_runs(1).await;
    drop(worker);
    send_celery_tasks(&url, 15, 0);
    send_celery_tasks(&url, 3, 3600);
    b.wait_depth("celery", 15).await;
    assert!(
        b.exists("celery_delayed_0").await,
        "no native delayed delivery"
    );

    let run = b.run(&["list", "-o", "json"]).await;
    let rows = run.json();
    let names: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["location"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["real.dlq"], "{rows}");
    assert!(
        run.stderr()
            .contains("delayed-delivery queues were recognised"),
        "{}",
        run.stderr()
    );
    let check = b.run(&["check"]).await;
    assert_eq!(check.code(), 0, "{}", check.stdout());
    assert!(check.stdout().starts_with("DLQ OK"), "{}", check.stdout());
    assert!(!check.stdout().contains("celery"), "{}", check.stdout());
    let metrics = b.run(&["metrics"]).await.ok();
    assert!(metrics.contains("real.dlq"), "{metrics}");
    assert!(!metrics.contains("\"celery\""), "{metrics}");
    // Never read: the waiting tasks were never delivered, so none has a delivery count.
    let waiting = b.snapshot("celery").await;
    assert_eq!(waiting.len(), 15);
    assert!(
        waiting.iter().all(|m| m.delivery_count.unwrap_or(0) == 0),
        "{:?}",
        waiting.iter().map(|m| m.delivery_count).collect::<Vec<_>>()
    );
    b.wait_depth("celery", 15).await;
    b.delete().await;
}

/// What a selective replay or an `archive --delete` leaves in a quorum DLQ with a limit is
/// renewed, not given back: 25 dry runs, 22 replays that select nothing, a real selective
/// replay (streamed and planned first) and an archive leave every other message as it was,
/// in order, its delivery count never growing.
#[tokio::test]
async fn selective_replay_and_archive_renew_what_they_leave() {
    let b = quorum_dlq("qsel", limit(20), 40).await;
    let left = |from: i64| (from..40).collect::<Vec<_>>();
    for round in 0..25 {
        let run = b
            .run(&[
                "replay",
                "-Q",
                "q.dlq",
                "--where",
                ".payload.n < 10",
                "--dry-run",
            ])
            .await;
        run.ok();
        assert_eq!(b.depth("q.dlq").await, 40, "dry run {round}");
    }
    for round in 0..22 {
        let run = replay_where(&b, ".payload.n > 1000").await;
        assert_eq!(run.code(), 0, "round {round}: {}", run.stderr());
        assert_eq!(b.depth("q.dlq").await, 40, "replay of nothing {round}");
    }
    // Streamed, then planned first: the first 10, then the next 5, back where they died.
    b.run(&[
        "replay",
        "-Q",
        "q.dlq",
        "--where",
        ".payload.n < 10",
        "--yes",
    ])
    .await
    .ok();
    b.run(&[
        "replay",
        "-Q",
        "q.dlq",
        "--where",
        ".payload.n < 15",
        "--yes",
        "--plan-first",
    ])
    .await
    .ok();
    b.wait_depth("q.src", 15).await;
    b.wait_depth("q.dlq", 25).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a.ndjson");
    let run = b
        .run(&[
            "archive",
            "-Q",
            "q.dlq",
            "--where",
            ".payload.n < 20",
            "--delete",
            "--yes",
            "--to",
            file.to_str().unwrap(),
        ])
        .await;
    assert!(run.stderr().contains("5 deleted"), "{}", run.stderr());
    b.wait_depth("q.dlq", 20).await;
    let snaps = b.snapshot("q.dlq").await;
    assert_eq!(snap_ns(&snaps), left(20));
    assert!(
        snaps.iter().all(|m| m.delivery_count.unwrap_or(0) <= 1),
        "{:?}",
        snaps.iter().map(|m| m.delivery_count).collect::<Vec<_>>()
    );
    b.wait_depth("q.dlq", 20).await;
    b.delete().await;
}

/// A streamed replay that selects nothing among more messages than its consumer's credit
/// (1,088 at the default window; 2,112 before its acknowledgements were bounded): every
/// message it takes is kept, and renewed. The
/// consumer gets more credit only as kept originals are acknowledged, which dlq must do
/// while it waits for deliveries (it stalled for 30 s and failed here, all kept held).
/// Then one selected at the very end: it moves, nothing else does, and every kept message
/// is there once, in order, at delivery count 0.
#[tokio::test]
async fn a_replay_that_keeps_more_than_its_credit_renews_and_goes_on() {
    const N: usize = 3_000;
    let b = quorum_dlq("qkeep", limit(20), N).await;
    let run = b.run(&SELECTS_NONE).await;
    assert_eq!(run.code(), 0, "{}", run.stderr());
    assert!(
        run.stderr().contains("nothing to replay"),
        "{}",
        run.stderr()
    );
    let renews = !crate::target::nacks_uncounted().await;
    assert_eq!(
        run.stderr().contains("renewed 3000"),
        renews,
        "{}",
        run.stderr()
    );
    b.wait_depth("q.dlq", N as u32).await;
    let last = format!(".payload.n == {}", N - 1);
    let run = replay_where(&b, &last).await;
    assert_eq!(run.code(), 0, "{}", run.stderr());
    assert!(run.stderr().contains("1 replayed"), "{}", run.stderr());
    b.wait_depth("q.src", 1).await;
    b.wait_depth("q.dlq", N as u32 - 1).await;
    let snaps = b.snapshot("q.dlq").await;
    let left = snap_ns(&snaps);
    let mut all = left.clone();
    all.sort_unstable();
    assert_eq!(
        all,
        (0..N as i64 - 1).collect::<Vec<_>>(),
        "lost or doubled"
    );
    // Its acknowledgements stay within what reaches its last counted message (see
    // `a_selective_replay_reaches_none_of_its_copies`): no copy reached it, every one is
    // in order at count 0. Before, 1,224–2,074 were given back counted once, and under
    // load out of order (3 of 8 runs at -j 8, and once in CI).
    assert_eq!(given_back_copies(&run.stderr()), 0, "{}", run.stderr());
    assert_eq!(left, (0..N as i64 - 1).collect::<Vec<_>>(), "out of order");
    assert!(
        snaps.iter().all(|m| m.delivery_count.unwrap_or(0) == 0),
        "{:?}",
        snaps.iter().map(|m| m.delivery_count).collect::<Vec<_>>()
    );
    b.delete().await;
}

/// A streamed replay selecting 1 in 3 of 3,000 keeps 2,000, renewed at the tail, while it
/// acknowledges what it moves on the same live consumer: each acknowledgement gives that
/// consumer credit for one more message, and dlq keeps them within what reaches the last
/// message it counted. So none of its copies is delivered to it (before: 1,536 of 2,000
/// were, and given back counted once, sometimes out of order), and every kept message is
/// there once, in order, at delivery count 0.
#[tokio::test]
async fn a_selective_replay_reaches_none_of_its_copies() {
    const N: usize = 3_000;
    let b = quorum_dlq("qcopies", limit(20), N).await;
    let run = replay_where(&b, ".payload.n % 3 == 0").await;
    assert_eq!(run.code(), 0, "{}", run.stderr());
    assert!(run.stderr().contains("1000 replayed"), "{}", run.stderr());
    b.wait_depth("q.src", 1000).await;
    b.wait_depth("q.dlq", 2000).await;
    let snaps = b.snapshot("q.dlq").await;
    let kept: Vec<i64> = (0..N as i64).filter(|n| n % 3 != 0).collect();
    assert_eq!(snap_ns(&snaps), kept, "lost, doubled or out of order");
    renewed_without_a_copy(&run, &snaps, 2000).await;
    let moved: Vec<i64> = (0..N as i64).filter(|n| n % 3 == 0).collect();
    assert_eq!(snap_ns(&b.snapshot("q.src").await), moved);
    b.delete().await;
}

/// Streamed replays of one in three of 6,000 real dead letters in each of three quorum DLQs
/// without a delivery limit, at once: nothing renews, and what a take leaves fills its
/// consumers in turn, each replaced once kept messages hold half its credit. Both orders
/// stay: the moved in their destination, the kept in the DLQ, read from the head one by one.
///
/// A consumer cancelled with credit left raced the deliveries on their way, which the broker
/// gave back behind what the next consumer took (on 4.0 those came back counted twice):
/// 3 of 4 such replays ended out of order on 4.0, 2 of 6 on both generations alone (a
/// block of 80-2,400 kept messages at the back, the moved out of order too), until the take
/// drained what its credit still brought before the cancel (`take::drain_credit`).
#[tokio::test]
async fn selective_replays_without_a_limit_keep_both_orders() {
    const N: i64 = 6_000;
    let b = Broker::new("qfreeorder").await;
    if crate::target::rabbitmq_major().await >= 4 {
        let free = json!({"delivery-limit": -1});
        b.policy("dlq-no-delivery-limit", "^q\\d\\.dlq$", free)
            .await;
    }
    for i in 0..3 {
        dead_letters_in_order(&b, i, N).await;
    }
    let replay = |i: usize| {
        let dlq = format!("q{i}.dlq");
        let b = &b;
        async move {
            b.run(&[
                "replay",
                "-Q",
                &dlq,
                "--where",
                ".payload.n % 3 == 0",
                "--yes",
            ])
            .await
        }
    };
    let runs = tokio::join!(replay(0), replay(1), replay(2));
    for run in [runs.0, runs.1, runs.2] {
        assert_eq!(run.code(), 0, "{}", run.stderr());
    }
    let body_n = |body: &Vec<u8>| serde_json::from_slice::<Value>(body).unwrap()["n"].as_i64();
    let selected =
        |moved: bool| -> Vec<_> { (0..N).filter(|n| (n % 3 == 0) == moved).map(Some).collect() };
    for i in 0..3 {
        let moved = b.take_all(&format!("q{i}.src"), 2_000).await;
        let kept = b.take_all(&format!("q{i}.dlq"), 4_000).await;
        let moved: Vec<_> = moved.iter().map(body_n).collect();
        let kept: Vec<_> = kept.iter().map(body_n).collect();
        assert_eq!(moved, selected(true), "the moved of q{i}.dlq");
        assert_eq!(kept, selected(false), "the kept of q{i}.dlq");
    }
    b.delete().await;
}

/// `n` real dead letters `{"n": 0..n}` in quorum DLQ `q<i>.dlq`, rejected in `q<i>.src`.
async fn dead_letters_in_order(b: &Broker, i: usize, n: i64) {
    let (dlx, dlq, src) = (
        format!("q{i}.dlx"),
        format!("q{i}.dlq"),
        format!("q{i}.src"),
    );
    b.queue(&dlq, table(vec![("x-queue-type", ls("quorum"))]))
        .await;
    b.exchange(&dlx, lapin::ExchangeKind::Fanout).await;
    b.bind(&dlq, &dlx, "").await;
    b.queue(&src, table(vec![("x-dead-letter-exchange", ls(&dlx))]))
        .await;
    let bodies = (0..n).map(|i| format!("{{\"n\": {i}}}").into_bytes());
    b.publish_many(&src, bodies).await;
    b.reject(&src, n as usize).await;
    b.wait_depth(&dlq, n as u32).await;
}

/// The same path end to end with a stock Celery 5.7 app on quorum queues: 3,000 of its
/// tasks die in its work queue into a quorum DLQ with a delivery limit of 20. A streamed
/// replay of one in three (1,000, past a renewing take's credit of 1,088 with what it keeps)
/// while a real worker consumes the work queue: the worker runs each selected task once and
/// no other, and the 2,000 kept stay in the DLQ once each, in order, at delivery count 0.
#[tokio::test]
async fn a_worker_runs_exactly_a_selective_replay_of_a_renewed_quorum_dlq() {
    let mut args = vec![("x-queue-type", ls("quorum"))];
    args.extend(limit(20));
    let b = celery_dead_letters("qcelery", table(args)).await;
    let (run, snaps) = a_worker_runs_one_in_three(&b, &[]).await;
    assert_eq!(first_args(&snaps), one_in_three_kept(), "out of order");
    renewed_without_a_copy(&run, &snaps, 2000).await;
    b.delete().await;
}

/// `run` renewed `n` messages and none of its copies reached it (on RabbitMQ 4.3: gave them
/// back by a nack, which does not count, and renewed none): every message of the DLQ
/// (`snaps`) is at delivery count 0.
async fn renewed_without_a_copy(run: &crate::common::Run, snaps: &[Snap], n: usize) {
    let said = run.stderr();
    if crate::target::nacks_uncounted().await {
        assert!(!said.contains("renewed"), "{said}");
    } else {
        assert!(said.contains(&format!("renewed {n}")), "{said}");
        assert_eq!(given_back_copies(&said), 0, "{said}");
    }
    assert!(
        snaps.iter().all(|m| m.delivery_count.unwrap_or(0) == 0),
        "{:?}",
        snaps.iter().map(|m| m.delivery_count).collect::<Vec<_>>()
    );
}

/// The same without a delivery limit (4.x: `delivery-limit: -1` by policy; 3.x: none), where
/// nothing is renewed: the 2,000 kept fill the take's consumers, which dlq replaces as they
/// fill, and go back when it ends. The worker runs exactly the selection; the kept are in
/// the DLQ once each, in order (CI once found 64 of them at the back: see
/// `selective_replays_without_a_limit_keep_both_orders`).
#[tokio::test]
async fn a_worker_runs_exactly_a_selective_replay_of_a_quorum_dlq_without_a_limit() {
    let b = Broker::new("qceleryfree").await;
    if crate::target::rabbitmq_major().await >= 4 {
        let free = json!({"delivery-limit": -1});
        b.policy("dlq-no-delivery-limit", "^celery\\.dlq$", free)
            .await;
    }
    let b = celery_dead_letters_in(b, table(vec![("x-queue-type", ls("quorum"))])).await;
    let (run, snaps) = a_worker_runs_one_in_three(&b, &[]).await;
    assert!(!run.stderr().contains("renewed"), "{}", run.stderr());
    assert_eq!(first_args(&snaps), one_in_three_kept(), "out of order");
    b.delete().await;
}

/// The same as a planned replay (`--plan-first`): everything held, then moved. On 4.3 its
/// consumers are cancelled before the move (`Taker::before_acks`); the worker still runs
/// exactly the selection, and the kept are in the DLQ once each, in order, uncounted.
#[tokio::test]
async fn a_worker_runs_exactly_a_selective_planned_replay_of_a_quorum_dlq() {
    if crate::target::rabbitmq_version().await < (4, 3) {
        return;
    }
    let mut args = vec![("x-queue-type", ls("quorum"))];
    args.extend(limit(20));
    let b = celery_dead_letters("qceleryplan", table(args)).await;
    let (run, snaps) = a_worker_runs_one_in_three(&b, &["--plan-first"]).await;
    assert_eq!(first_args(&snaps), one_in_three_kept(), "out of order");
    renewed_without_a_copy(&run, &snaps, 2000).await;
    b.delete().await;
}

/// A vhost of its own (`prefix`) where 3,000 tasks of the stock Celery app `quorum_tasks`
/// (tests/celery) died in its work queue `celery`, which a policy gives a DLX: they are in
/// `celery.dlq`, declared with `dlq_args`. Task `i` is `quorum_tasks.add(i, i)`.
async fn celery_dead_letters(prefix: &str, dlq_args: FieldTable) -> Broker {
    celery_dead_letters_in(Broker::new(prefix).await, dlq_args).await
}

async fn celery_dead_letters_in(b: Broker, dlq_args: FieldTable) -> Broker {
    b.exchange("celery.dlx", lapin::ExchangeKind::Fanout).await;
    b.queue("celery.dlq", dlq_args).await;
    b.bind("celery.dlq", "celery.dlx", "").await;
    b.policy(
        "celery-dlx",
        "^celery$",
        json!({"dead-letter-exchange": "celery.dlx"}),
    )
    .await;
    let url = b.amqp_url();
    let env = [("DLQ_TEST_BROKER", url.as_str())];
    let worker =
        crate::celery_worker::CeleryWorker::start_app("quorum_tasks", "celery", &env).await;
    send_celery_tasks(&url, 1, 0);
    worker.wait_runs(1).await;
    drop(worker);
    left_by_the_warm_up(&b).await;
    // With no worker, the app's tasks wait; then a consumer gives up on every one.
    send_celery_tasks(&url, CELERY_TASKS as u32, 0);
    b.wait_depth("celery", CELERY_TASKS as u32).await;
    let n = CELERY_TASKS as u32;
    b.reject_into("celery", n as usize, "celery.dlq", n).await;
    b
}

const CELERY_TASKS: i64 = 3_000;

/// Takes what the killed warm-up worker left in its work queue, which would otherwise count
/// among the tasks sent next (seen on 4.3: 3,001 where 3,000 were sent): until the queue has
/// stayed empty for half a second.
async fn left_by_the_warm_up(b: &Broker) {
    let mut quiet = 0;
    while quiet < 5 {
        match b.depth("celery").await {
            0 => quiet += 1,
            n => {
                eprintln!("the warm-up left {n} in the work queue");
                b.take_all("celery", n as usize).await;
                quiet = 0;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// A streamed replay (or, with `more` arguments, another) of one in three of
/// `celery_dead_letters` while a real worker consumes the work queue: it succeeds, the
/// worker runs each selected task once and no other, and the rest are in the DLQ once each.
/// The run, and the DLQ as it is then.
async fn a_worker_runs_one_in_three(b: &Broker, more: &[&str]) -> (crate::common::Run, Vec<Snap>) {
    let url = b.amqp_url();
    let env = [("DLQ_TEST_BROKER", url.as_str())];
    let worker =
        crate::celery_worker::CeleryWorker::start_app("quorum_tasks", "celery", &env).await;
    let one_in_three = ".payload[0][0] % 3 == 0";
    let args = [
        "replay",
        "-Q",
        "celery.dlq",
        "--where",
        one_in_three,
        "--yes",
    ];
    let run = b.run(&[&args[..], more].concat()).await;
    assert_eq!(run.code(), 0, "{}", run.stderr());
    assert!(run.stderr().contains("1000 replayed"), "{}", run.stderr());
    let runs = worker.wait_runs(1_000).await;
    let mut ran: Vec<i64> = runs
        .iter()
        .map(|r| r["args"][0].as_i64().unwrap())
        .collect();
    ran.sort_unstable();
    let selected: Vec<i64> = (0..CELERY_TASKS).filter(|n| n % 3 == 0).collect();
    assert_eq!(ran, selected, "not each selected task once");
    b.wait_depth("celery", 0).await;
    b.wait_depth("celery.dlq", 2_000).await;
    let snaps = b.snapshot("celery.dlq").await;
    let mut each = first_args(&snaps);
    each.sort_unstable();
    assert_eq!(each, one_in_three_kept(), "lost or doubled");
    drop(worker);
    (run, snaps)
}

/// The tasks a replay of one in three leaves, in the DLQ's order: their first arguments.
fn one_in_three_kept() -> Vec<i64> {
    (0..CELERY_TASKS).filter(|n| n % 3 != 0).collect()
}

/// The first argument of each Celery task in `snaps`.
fn first_args(snaps: &[Snap]) -> Vec<i64> {
    let first = |s: &Snap| serde_json::from_slice::<Value>(&s.body).unwrap()[0][0].as_i64();
    snaps.iter().map(|s| first(s).unwrap()).collect()
}

/// A streamed replay (`--yes`) of what `selection` selects in `q.dlq`.
async fn replay_where(b: &Broker, selection: &str) -> crate::common::Run {
    b.run(&["replay", "-Q", "q.dlq", "--where", selection, "--yes"])
        .await
}

/// A replay of `q.dlq` that selects none: its plan takes and renews every message.
const SELECTS_NONE: [&str; 6] = [
    "replay",
    "-Q",
    "q.dlq",
    "--where",
    ".payload.n < 0",
    "--yes",
];

/// How many copies a renewing take says it gave back ("N of those copies ..."), else 0.
fn given_back_copies(stderr: &str) -> usize {
    let re = regex::Regex::new(r"(\d+) of those copies").unwrap();
    re.captures(stderr).map_or(0, |c| c[1].parse().unwrap())
}

/// Messages that reach a quorum DLQ while dlq gives back what it held, after a take (a
/// replay that selects none, so it renews every one) and after a renewing read: the queue
/// then holds more than dlq gave back, and dlq says so (newcomers, or acknowledgements the
/// broker dropped). Every message is there, and any surplus is within what dlq named.
#[tokio::test]
async fn newcomers_during_a_give_back_are_named_and_kept() {
    const N: usize = 500;
    let b = quorum_dlq("qmore", limit(20), N).await;
    let (mut total, mut named) = (N, 0);
    let read = ["filter", "-Q", "q.dlq", "--count"];
    // On RabbitMQ 4.3 a read gives back by a nack and acknowledges nothing: a surplus
    // cannot come from it, and it has none to name.
    let nacked_read = crate::target::nacks_uncounted().await;
    for args in [&SELECTS_NONE[..], &read[..]] {
        let (run, sent) = trickle_during(&b, args, total).await;
        assert_eq!(run.code(), 0, "{}", run.stderr());
        let more = more_back(&run.stderr());
        assert!(
            more > 0 || (nacked_read && args[0] == "filter"),
            "{args:?}: {sent} sent, none named: {}",
            run.stderr()
        );
        (total, named) = (total + sent, named + more);
        // Given back asynchronously, and perhaps some twice: at least every one, then settled.
        let start = std::time::Instant::now();
        while (b.depth("q.dlq").await as usize) < total {
            let waited = start.elapsed().as_secs();
            assert!(waited < 30, "fewer than {total} came back");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let snaps = b.snapshot("q.dlq").await;
        let mut all = snap_ns(&snaps);
        all.sort_unstable();
        all.dedup();
        assert_eq!(all, (0..total as i64).collect::<Vec<_>>(), "lost");
        let surplus = snaps.len() - total;
        eprintln!(
            "{}: {sent} sent meanwhile, {more} named, {surplus} twice",
            args[0]
        );
        assert!(surplus <= named, "{surplus} twice, {named} named");
    }
    b.delete().await;
}

/// Runs dlq with `args` while publishing a steady trickle into `q.dlq` until it has ended,
/// each publish confirmed, bodies numbered from `from`. How many were sent.
async fn trickle_during(b: &Broker, args: &[&str], from: usize) -> (crate::common::Run, usize) {
    // A second between dlq's count and its give-back: newcomers land there on any load
    // (none had, once in CI, where each confirmed publish took longer than the window).
    let dlq = b
        .dlq()
        .env("DLQ_TEST_GIVE_BACK_PAUSE_MS", "1000")
        .args(args);
    let dlq = tokio::task::spawn_blocking(move || dlq.run());
    let mut sent = 0;
    while !dlq.is_finished() {
        let body = format!("{{\"n\": {}}}", from + sent);
        b.publish("q.dlq", body.as_bytes(), BasicProperties::default())
            .await;
        sent += 1;
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    (dlq.await.unwrap(), sent)
}

/// How many more than it gave back dlq says are ready again, else 0.
fn more_back(stderr: &str) -> usize {
    let re = regex::Regex::new(r"(\d+) message\(s\) more than dlq gave back").unwrap();
    re.captures(stderr).map_or(0, |c| c[1].parse().unwrap())
}

/// RabbitMQ 4.3+ does not count `basic.nack(requeue)` toward the delivery limit, so dlq gives
/// back with one there instead of renewing. On 4.3 (`.ci/forky`) the real thing; on 4.0
/// `DLQ_TEST_BROKER_VERSION` takes the same path, where a nack still counts, once, so a
/// stray close would show as a second count. Every consumer is cancelled before the nack:
/// a live one is handed the messages again, and the close then returns them counted (each
/// read came back at delivery count 2, before). A read, a selective replay (several take
/// channels) and a selective archive: what each leaves is there once, in order, given back
/// once by each give-back (the archive's take, then the read that checks every archived
/// message is gone). Not on 3.x, where a nack sends quorum messages to the back.
#[tokio::test]
async fn a_nack_give_back_returns_each_message_once_in_order() {
    if crate::target::rabbitmq_major().await < 4 {
        return;
    }
    let as_43 = [("DLQ_TEST_BROKER_VERSION", "4.3.0")];
    let b = quorum_dlq("qnackr", limit(20), 300).await;
    let run = b.run_with(&["inspect", "-Q", "q.dlq"], &as_43).await;
    assert_eq!(run.code(), 0, "{}", run.stderr());
    given_back(&b, (0..300).collect(), 1).await;
    b.delete().await;

    const N: i64 = 3_000;
    let b = quorum_dlq("qnackp", limit(20), N as usize).await;
    let even = [
        "replay",
        "-Q",
        "q.dlq",
        "--where",
        ".payload.n % 2 == 0",
        "--yes",
    ];
    let run = b.run_with(&even, &as_43).await;
    assert_eq!(run.code(), 0, "{}", run.stderr());
    b.wait_depth("q.src", N as u32 / 2).await;
    let moved = snap_ns(&b.snapshot("q.src").await);
    assert_eq!(moved, (0..N).filter(|n| n % 2 == 0).collect::<Vec<_>>());
    given_back(&b, (0..N).filter(|n| n % 2 == 1).collect(), 1).await;
    b.delete().await;

    let b = quorum_dlq("qnacka", limit(20), N as usize).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a.ndjson");
    let file = file.to_str().unwrap();
    let third = ".payload.n % 3 == 0";
    let archive = [
        "archive", "-Q", "q.dlq", "--where", third, "--delete", "--yes", "--to", file,
    ];
    let run = b.run_with(&archive, &as_43).await;
    assert_eq!(run.code(), 0, "{}", run.stderr());
    assert!(run.stderr().contains("1000 deleted"), "{}", run.stderr());
    given_back(&b, (0..N).filter(|n| n % 3 != 0).collect(), 2).await;
    b.delete().await;
}

/// `q.dlq` holds exactly the messages `ns`, in that order, each given back `times` times:
/// its delivery count on 4.0, where a nack counts; on 4.3 its acquired count, the delivery
/// count staying 0.
async fn given_back(b: &Broker, ns: Vec<i64>, times: i64) {
    b.wait_depth("q.dlq", ns.len() as u32).await;
    let snaps = b.snapshot("q.dlq").await;
    assert_eq!(snap_ns(&snaps), ns);
    let real_43 = crate::target::nacks_uncounted().await;
    if real_43 {
        assert!(snaps.iter().all(|s| s.delivery_count.is_none()));
    }
    let mut counts = BTreeMap::new();
    for s in &snaps {
        let count = if real_43 {
            s.acquired_count
        } else {
            s.delivery_count
        };
        *counts.entry(count.unwrap_or(0)).or_insert(0) += 1;
    }
    assert_eq!(
        counts.keys().copied().collect::<Vec<_>>(),
        vec![times],
        "{counts:?}"
    );
}

/// Messages published straight into a limited quorum DLQ with no properties at all, each
/// returned once by an application (so delivered with the broker's header alone): their
/// ids are hashes of the stored message, and a read that renews them (before 4.3) must put
/// back the same stored message, with no header table, so every id stays what it was (the
/// first message's changed when an empty one was left).
#[tokio::test]
async fn ids_of_bare_messages_survive_a_renewal() {
    let b = Broker::new("qbare").await;
    let mut args = vec![("x-queue-type", ls("quorum"))];
    args.extend(limit(20));
    b.queue("q.dlq", table(args)).await;
    for i in 0..20 {
        let body = format!("{{\"n\": {i}}}");
        b.publish("q.dlq", body.as_bytes(), BasicProperties::default())
            .await;
    }
    let ids = |run: crate::common::Run| -> Vec<String> {
        assert_eq!(run.code(), 0, "{}", run.stderr());
        run.ndjson().iter().map(|r| r["id"].to_string()).collect()
    };
    // An application's consumer returned each once: every delivery now carries the
    // broker's `x-delivery-count` in a header table the stored message does not have.
    returned_once(&b, "q.dlq", 20).await;
    let read = ["inspect", "-Q", "q.dlq", "-o", "ndjson"];
    let first = ids(b.run(&read).await);
    let second = ids(b.run(&read).await);
    let third = ids(b.run(&read).await);
    assert_eq!(first.len(), 20);
    assert_eq!(first, second, "ids changed by the first read's give-back");
    assert_eq!(first, third, "ids changed by the second read's give-back");
    b.delete().await;
}

/// Takes the `n` messages of `queue`, then returns each (`basic.reject` with requeue),
/// counted toward a quorum queue's limit.
async fn returned_once(b: &Broker, queue: &str, n: usize) {
    let ch = b.conn.create_channel().await.unwrap();
    let mut tags = Vec::new();
    for _ in 0..n {
        let got = ch
            .basic_get(queue.into(), lapin::options::BasicGetOptions::default())
            .await
            .unwrap()
            .expect("a message");
        tags.push(got.delivery_tag);
    }
    for tag in tags {
        let requeue = lapin::options::BasicRejectOptions { requeue: true };
        ch.basic_reject(tag, requeue).await.unwrap();
    }
    ch.close(200, "returned".into()).await.unwrap();
}

/// RabbitMQ 4.3 enforces a quorum queue's consumer timeout by cancelling the consumer and
/// putting what it held back in the queue, on a channel that stays open: acknowledging
/// those messages then does nothing. A replay's plan answered after the timeout moved all
/// 100 and said so, while all 100 were still in the DLQ. It now moves none, says why and
/// exits 1; and when the timeout strikes mid-move, it stops there and says that what it
/// moved since may be in the DLQ too. (3.x and 4.0 close the channel instead, on a timer
/// of their own.) A timeout dlq knows ends the question first
/// (`a_plan_left_unanswered_gives_back_at_half_its_consumer_timeout`): here dlq cannot know
/// it, without a management API (`--force` reads a queue of unknown type).
#[tokio::test]
async fn a_consumer_timeout_stops_a_planned_replay() {
    if crate::target::rabbitmq_version().await < (4, 3) {
        return;
    }
    let timeout = vec![("x-consumer-timeout", AMQPValue::LongLongInt(2_000))];
    let b = quorum_dlq("qtimeout", timeout, 100).await;
    let url = b.amqp_url();
    let env = [
        ("DLQ_AMQP_URL", url.as_str()),
        ("DLQ_MANAGEMENT_URL", "http://127.0.0.1:1/"),
        ("NO_COLOR", "1"),
    ];
    let args = ["replay", "-Q", "q.dlq", "--force"];
    let t = crate::tmux::Term::start(120, &env, &args);
    t.wait_for(std::time::Duration::from_secs(60), |s| s.contains("[y/N]"));
    // Until the queue has given them back.
    let start = std::time::Instant::now();
    while b.depth("q.dlq").await < 100 {
        assert!(
            start.elapsed().as_secs() < 30,
            "the timeout gave nothing back"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    t.type_text("y");
    t.keys(&["Enter"]);
    let screen = t.wait_exit();
    assert!(screen.contains("[dlq exited 1]"), "{screen}");
    assert!(
        screen.contains("RabbitMQ took back the messages dlq held")
            && screen.contains("nothing was moved"),
        "{screen}"
    );
    assert!(screen.contains("0 replayed"), "{screen}");
    assert_eq!(b.depth("q.src").await, 0, "moved though still in the DLQ");
    let snaps = b.snapshot("q.dlq").await;
    counted_as_said(&snaps, &screen.replace('\n', ""));
    assert_eq!(snap_ns(&snaps), (0..100).collect::<Vec<_>>());
    b.delete().await;

    // Answered at once (within half the timeout: dlq waits no longer), the timeout strikes
    // mid-move (100 at 5 a second take 20 s): dlq stops there.
    let timeout = vec![("x-consumer-timeout", AMQPValue::LongLongInt(10_000))];
    let b = quorum_dlq("qtimeout2", timeout, 100).await;
    let url = b.amqp_url();
    let env = [("DLQ_AMQP_URL", url.as_str()), ("NO_COLOR", "1")];
    let args = ["replay", "-Q", "q.dlq", "--rate", "5"];
    let t = crate::tmux::Term::start(120, &env, &args);
    t.wait_for(std::time::Duration::from_secs(60), |s| s.contains("[y/N]"));
    t.type_text("y");
    t.keys(&["Enter"]);
    let screen = t.wait_exit();
    assert!(screen.contains("[dlq exited 1]"), "{screen}");
    assert!(
        screen.contains("what moved since may be in the DLQ again too"),
        "{screen}"
    );
    let said = regex::Regex::new(r"replay: (\d+) replayed").unwrap();
    let replayed: u32 = said.captures(&screen).expect(&screen)[1].parse().unwrap();
    assert!(replayed > 0 && replayed < 100, "{screen}");
    // Publishes in flight when it stopped are in the destination too, unreported (at most
    // the window of 64, as it warns): every publish was confirmed before dlq exited.
    let in_destination = b.depth("q.src").await;
    assert!(
        (replayed..=replayed + 64).contains(&in_destination),
        "{in_destination} in the destination: {screen}"
    );
    let snaps = b.snapshot("q.dlq").await;
    counted_as_said(&snaps, &screen.replace('\n', ""));
    let mut all = snap_ns(&snaps);
    let left = all.len();
    all.extend(snap_ns(&b.snapshot("q.src").await));
    all.sort_unstable();
    all.dedup();
    assert_eq!(all, (0..100).collect::<Vec<_>>(), "lost");
    eprintln!("{replayed} replayed before the timeout, {left} left in the DLQ");
    b.delete().await;
}

/// The same timeout during a replay under `--yes`, paced by `--rate`: its consumer held its
/// whole credit (2 x window + 64) ahead of the publishes, each message that credit / rate
/// seconds. On 4.3.6 the timeout then struck part-way (exit 1, "RabbitMQ took back the
/// messages dlq held", 231 of 300 replayed), though dlq knew the timeout and the rate. The
/// window and the take's credit now fit within half the timeout at that rate, said in the
/// announcement: the whole DLQ moves, in order, exit 0.
#[tokio::test]
async fn a_streamed_replay_paced_within_a_consumer_timeout_moves_it_all() {
    if crate::target::rabbitmq_version().await < (4, 3) {
        return;
    }
    let n = 300;
    // 20/s within 4 s: 40 held ahead, a window of 20 (192 held before, 9.6 s each).
    // 50/s within 3 s: 75 ahead, a window of 37 (300 held before, 6 s).
    for (prefix, timeout_ms, rate, window, fitted) in [
        ("qtstream", 4_000, "20", 64, 20),
        ("qtstream2", 3_000, "50", 500, 37),
    ] {
        let timeout = vec![("x-consumer-timeout", AMQPValue::LongLongInt(timeout_ms))];
        let b = quorum_dlq(prefix, timeout, n).await;
        let w = window.to_string();
        let args = [
            "replay", "-Q", "q.dlq", "--yes", "--rate", rate, "--window", &w,
        ];
        let run = b.run(&args).await;
        let err = run.stderr();
        assert_eq!(run.code(), 0, "{err}");
        assert!(
            err.contains(&format!(
                "Window: at most {fitted} unsettled at once (below --window, so that each message moves within half of a DLQ's consumer timeout at this --rate)"
            )),
            "{err}"
        );
        assert!(!err.contains("took back"), "{err}");
        assert!(!err.contains("the timeout will stop the replay"), "{err}");
        assert!(err.contains(&format!("{n} replayed")), "{err}");
        assert_eq!(b.depth("q.dlq").await, 0, "{err}");
        assert_eq!(
            snap_ns(&b.snapshot("q.src").await),
            (0..n as i64).collect::<Vec<_>>(),
            "not every message, once and in order: {err}"
        );
        b.delete().await;
    }
}

/// Where even the least a paced take may hold (two messages) outlasts the timeout at that
/// rate, the timeout strikes. lapin gave the broker's cancel only behind the deliveries it
/// had buffered, so dlq went on publishing messages that were back in the DLQ: "231
/// replayed" (exit 1) with 192 of them still in the DLQ, and with `--window 500` "300
/// replayed", exit 0, with 150 still there. It now stops at the cancel: exit 1 and the
/// reason, warned before it started, at most what the take held in both queues, the DLQ in
/// order, none lost.
#[tokio::test]
async fn a_consumer_timeout_stops_a_streamed_replay() {
    if crate::target::rabbitmq_version().await < (4, 3) {
        return;
    }
    let n = 300;
    let said = regex::Regex::new(r"(\d+) replayed").unwrap();
    let timeout = vec![("x-consumer-timeout", AMQPValue::LongLongInt(2_000))];
    let b = quorum_dlq("qtstream3", timeout, n).await;
    // 0.5/s within 2 s: the window fitted to 1, the take holding 2, the second 4 s.
    let args = ["replay", "-Q", "q.dlq", "--yes", "--rate", "0.5"];
    let run = b.run(&args).await;
    let err = run.stderr();
    assert_eq!(run.code(), 1, "{err}");
    assert!(
        err.contains("RabbitMQ took back the messages dlq held")
            && err.contains("a smaller --window or a higher --rate"),
        "{err}"
    );
    assert!(
        err.contains("gives back what a consumer holds after 2 s (its consumer timeout), and at --rate 0.5 a message may wait 4 s between dlq taking it and moving it (2 taken ahead)")
            && err.contains("Window: at most 1 unsettled at once"),
        "{err}"
    );
    let replayed: u32 = said.captures(&err).expect(&err)[1].parse().unwrap();
    assert!(replayed < n as u32, "{err}");
    // Every publish was confirmed before dlq exited: its destination holds what it
    // reported replayed, and the one in flight when it stopped (not reported: it may be in
    // both queues, as it warns).
    let snaps = b.snapshot("q.dlq").await;
    counted_as_said(&snaps, &err);
    let left = snap_ns(&snaps);
    let moved = snap_ns(&b.snapshot("q.src").await);
    let unreported = moved.len() as i64 - i64::from(replayed);
    assert!(
        (0..=1).contains(&unreported),
        "{} in the destination, {replayed} replayed: {err}",
        moved.len()
    );
    // RabbitMQ puts what it took back (the take held 2, the smallest ids left) where it
    // likes: at the head and reversed on 4.3.6 ([4, 3, 5, ...]). The rest keeps its order.
    let mut smallest = left.clone();
    smallest.sort_unstable();
    let rest: Vec<i64> = left
        .iter()
        .filter(|n| !smallest[..2].contains(n))
        .copied()
        .collect();
    assert!(rest.is_sorted(), "the DLQ's order changed: {left:?}");
    assert!(
        moved.windows(2).all(|w| w[0] < w[1]),
        "replayed out of order or twice: {moved:?}"
    );
    // At most what the take held (2): RabbitMQ took both back, and dlq had them in hand,
    // one confirmed (its acknowledgement then did nothing) and one waiting for its slot.
    let both = moved.iter().filter(|m| left.contains(m)).count();
    assert!(both <= 2, "{both} in both queues, the take holding 2");
    eprintln!(
        "{replayed} replayed, {both} in both queues, the DLQ starting {:?}",
        &left[..4.min(left.len())]
    );
    let mut all = [left, moved].concat();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all, (0..n as i64).collect::<Vec<_>>(), "lost");
    b.delete().await;
}

/// A DLQ's own consumer timeout (argument or policy, the smaller) is named in the plan, with
/// how long moving the plan at `--rate` takes when that alone reaches it; a DLQ without one,
/// or a broker that ignores it (before 3.12), gets no such line. Nothing moves (`--dry-run`).
#[tokio::test]
async fn a_plan_names_a_dlq_consumer_timeout() {
    let v = crate::target::rabbitmq_version().await;
    let timeout = vec![("x-consumer-timeout", AMQPValue::LongLongInt(600_000))];
    let b = quorum_dlq("qtplan", timeout, 100).await;
    if v >= (3, 12) {
        b.policy(
            "short-timeout",
            "^q\\.dlq$",
            json!({"consumer-timeout": 10_000}),
        )
        .await;
        b.wait_policy("q.dlq", "short-timeout").await;
    }
    let run = b
        .run(&["replay", "-Q", "q.dlq", "--dry-run", "--rate", "5"])
        .await;
    let err = run.stderr();
    assert_eq!(run.code(), 0, "{err}");
    let named = "\"q.dlq\" gives back what a consumer holds after 10 s (its consumer timeout)";
    if v >= (3, 12) {
        assert!(err.contains(named), "{err}");
        assert!(
            err.contains("moving 100 at --rate 5 alone takes 20 s"),
            "{err}"
        );
    } else {
        assert!(!err.contains("consumer timeout"), "{err}");
    }
    // Without --rate: the timeout, not the pace.
    let run = b.run(&["replay", "-Q", "q.dlq", "--dry-run"]).await;
    let err = run.stderr();
    assert_eq!(err.contains(named), v >= (3, 12), "{err}");
    assert!(!err.contains("alone takes"), "{err}");
    assert_eq!(b.depth("q.dlq").await, 100);
    assert_eq!(b.depth("q.src").await, 0);
    b.delete().await;

    let b = quorum_dlq("qtplan2", vec![], 10).await;
    let run = b
        .run(&["replay", "-Q", "q.dlq", "--dry-run", "--rate", "1"])
        .await;
    assert!(
        !run.stderr().contains("consumer timeout"),
        "{}",
        run.stderr()
    );
    b.delete().await;
}

/// A selective replay holds what it leaves in the DLQ until its take ends. On RabbitMQ
/// 4.3.6, once that outlived a 5-s consumer timeout the broker closed the channel of a
/// consumer dlq had already cancelled, and put the kept messages it held back in the queue,
/// where the take met them again: it ended short, and reported 121 of the 150 selected
/// replayed with exit 0. dlq now notices the closed channel and stops: exit 1 and the
/// reason. On every version that keeps the timeout (3.12+), a run that exits 0 replayed
/// exactly the selection; and none is lost, none is replayed twice.
#[tokio::test]
async fn a_consumer_timeout_never_cuts_a_selective_replay_short_unsaid() {
    let v = crate::target::rabbitmq_version().await;
    if v < (3, 12) {
        return;
    }
    let timeout = vec![("x-consumer-timeout", AMQPValue::LongLongInt(5_000))];
    let b = quorum_dlq("qtselect", timeout, 300).await;
    let args = [
        "replay",
        "-Q",
        "q.dlq",
        "--where",
        ".payload.n % 2 == 0",
        "--yes",
        "--rate",
        "20",
        "--window",
        "8",
    ];
    let run = b.run(&args).await;
    let err = run.stderr();
    // What a channel RabbitMQ closed held comes back on its own time, after dlq's exit
    // maybe: a snapshot taken at once could miss it and call it lost. No more than 15 s.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while b.depth("q.dlq").await + b.depth("q.src").await < 300
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let snaps = b.snapshot("q.dlq").await;
    // On 4.3.6 RabbitMQ closed the channel of a consumer dlq had cancelled, holding kept
    // messages: 12 came back at delivery count 1, unsaid.
    counted_as_said(&snaps, &err);
    let left = snap_ns(&snaps);
    let mut moved = snap_ns(&b.snapshot("q.src").await);
    moved.sort_unstable();
    let evens: Vec<i64> = (0..300).filter(|n| n % 2 == 0).collect();
    match run.code() {
        0 => {
            assert_eq!(moved, evens, "exit 0 but not the selection replayed: {err}");
            assert!(
                left.iter().all(|n| n % 2 == 1) && left.len() == 150,
                "{left:?}"
            );
        }
        1 => {
            assert!(
                err.contains("RabbitMQ took back the messages dlq held"),
                "{err}"
            );
            assert!(moved.iter().all(|n| n % 2 == 0), "{moved:?}");
            let mut once = moved.clone();
            once.dedup();
            assert_eq!(once.len(), moved.len(), "replayed twice: {moved:?}");
            let mut all = [left.clone(), moved.clone()].concat();
            all.sort_unstable();
            all.dedup();
            // dlq's own account too: CI on 30cc3be once missed 250-299 here (4.3.6), not
            // seen again in 12 runs, and the assertion did not say what dlq reported.
            let missing: Vec<i64> = (0..300).filter(|n| !all.contains(n)).collect();
            assert!(missing.is_empty(), "lost {missing:?}: {err}");
        }
        code => panic!("exit {code}: {err}"),
    }
    // Measured on 4.3.6 before the fix: the timeout strikes there.
    if v >= (4, 3) {
        assert_eq!(run.code(), 1, "{err}");
    }
    eprintln!(
        "exit {}: {} replayed, {} left",
        run.code(),
        moved.len(),
        left.len()
    );
    b.delete().await;
}

/// A quorum read holds every message until it ends, and RabbitMQ 4.3 takes back, with the
/// channel open, what was held past the queue's consumer timeout. The read then met those
/// messages again: on 4.3.6 a read of 1,000 whose output waited 6 s past a 2-s timeout
/// showed the first 100 twice and never the last 100, with exit 0 and a warning that some
/// of what it gave back was "not ready again", as if another consumer or an expiry had
/// taken it. It now stops before showing anything twice, says what RabbitMQ took back and
/// exits 1; the queue holds all 5,000, none counted toward the delivery limit.
/// A read whose output waits now gives back at half a timeout it knows
/// (`queue_read::a_read_whose_output_waits_half_a_consumer_timeout_gives_back_and_says_so`);
/// here the timeout comes after the read started, by a policy dlq did not see (as the
/// broker-wide `consumer_timeout`, which the management API does not show). Under load,
/// RabbitMQ 4.3.6 at times closes the channel at the timeout instead ("delivery
/// acknowledgement on channel 2 timed out. Timeout value used: -1 ms", 4 runs in about 40
/// here, one in CI): what dlq held came back counted once, and dlq now says so.
#[tokio::test]
async fn a_read_held_past_a_consumer_timeout_names_it_and_loses_nothing() {
    if crate::target::rabbitmq_version().await < (4, 3) {
        return;
    }
    // More output than the 1 MiB dlq keeps waiting for its reader (`output::pipe`): with
    // 1,000 the read ended, whole, before its reader read anything.
    let n = 5_000;
    let b = quorum_dlq("qtread", vec![], n).await;
    let child = crate::common::dlq_command()
        .env(
            "XDG_CONFIG_HOME",
            std::env::temp_dir().join("dlq-tests-no-config"),
        )
        .env("DLQ_AMQP_URL", b.amqp_url())
        .env("DLQ_READ_WINDOW", "100")
        .args(["inspect", "-Q", "q.dlq", "--limit", "5000", "-o", "ndjson"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    while b.depth("q.dlq").await == n as u32 {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let timeout = json!({"consumer-timeout": 2_000});
    b.policy("late-timeout", "^q\\.dlq$", timeout).await;
    // Its output unread for three times the timeout: the pipe fills, and dlq waits with
    // what it took held.
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let recs: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // What it showed is the queue's head, each message once.
    let shown = ns(&recs);
    assert!(!shown.is_empty() && shown.len() < n, "{err}");
    assert_eq!(shown, (0..shown.len() as i64).collect::<Vec<_>>(), "{err}");
    assert!(
        err.contains("RabbitMQ took back")
            && err.contains(&format!("the read stopped after {} of {n}", shown.len())),
        "{err}"
    );
    assert!(!err.contains("not ready again"), "{err}");
    b.wait_depth("q.dlq", n as u32).await;
    let snaps = b.snapshot("q.dlq").await;
    // Each once, none counted. Not in order: a consumer keeps the timeout it started with,
    // so RabbitMQ took back the windows opened after the policy (900 messages, 100-999)
    // and dlq gave back the first window's 100 behind them (`[100-999, 0-99, 1000-…]` on
    // 4.3.6); with the timeout there from the start it took back all at once,
    // in order.
    let mut all = snap_ns(&snaps);
    all.sort_unstable();
    assert_eq!(all, (0..n as i64).collect::<Vec<_>>());
    // The channel RabbitMQ closed (see above): each counted once, and said.
    counted_as_said(&snaps, &err);
    b.delete().await;
}

/// An `archive --delete` of a quorum DLQ holds what it takes until the archive is written
/// and synced; what RabbitMQ 4.3 takes back meanwhile (a 50-ms consumer timeout, 20,000
/// messages) would not be removed by the acknowledgements. dlq deletes nothing then, keeps
/// no archive file, names the timeout and exits 1; the DLQ holds all of them.
#[tokio::test]
async fn an_archive_held_past_a_consumer_timeout_deletes_nothing() {
    if crate::target::rabbitmq_version().await < (4, 3) {
        return;
    }
    let n = 20_000u32;
    let b = Broker::new("qtarch").await;
    let args = vec![
        ("x-queue-type", ls("quorum")),
        ("x-consumer-timeout", AMQPValue::LongLongInt(50)),
    ];
    b.queue("q.dlq", table(args)).await;
    let bodies = (0..n).map(|i| format!("{{\"n\": {i}}}").into_bytes());
    b.publish_many("q.dlq", bodies).await;
    b.wait_depth("q.dlq", n).await;
    let dir = tempfile::tempdir().unwrap();
    let to = dir.path().join("a.ndjson");
    let to = to.to_str().unwrap();
    let run = b
        .run(&["archive", "-Q", "q.dlq", "--to", to, "--delete", "--yes"])
        .await;
    let err = run.stderr();
    assert_eq!(run.code(), 1, "{err}");
    assert!(
        err.contains("nothing was deleted")
            && err.contains(
                "RabbitMQ took back the messages dlq held from \"q.dlq\" for the archive"
            ),
        "{err}"
    );
    assert!(!err.contains("not ready again"), "{err}");
    let kept = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(kept, 0, "an archive file was kept: {err}");
    b.wait_depth("q.dlq", n).await;
    counted_as_said(&b.snapshot("q.dlq").await, &err);
    b.delete().await;
}

/// A replay's plan declined at its `[y/N]` gives back what it meant to move without counting
/// a delivery: it renews it with what it left, in take order. Before, what the plan meant to
/// move went back by the channel's close: on RabbitMQ 4.0.5 a declined plan of 100 left every
/// one at delivery count 1, a delivery closer to the limit each time a plan is declined.
/// (4.3 gives back with a nack, which counts nothing: there the test checks the order.)
#[tokio::test]
async fn a_declined_plan_counts_no_delivery_and_keeps_the_order() {
    for (tag, args) in [
        ("qdeclined", &["replay", "-Q", "q.dlq"][..]),
        ("qdeclinedsel", &["replay", "-Q", "q.dlq", "--limit", "50"]),
    ] {
        let b = quorum_dlq(tag, limit(20), 100).await;
        let t = plan_asked(&b, args);
        t.type_text("n");
        t.keys(&["Enter"]);
        let screen = t.wait_exit();
        assert!(
            screen.contains("nothing done") && screen.contains("[dlq exited 0]"),
            "{args:?}: {screen}"
        );
        given_back_uncounted(b).await;
    }
}

/// A replay's plan left unanswered no longer holds its DLQ into the consumer timeout: dlq
/// waits for the answer half of it (here 4 s of an 8-s `x-consumer-timeout`), then gives
/// every message back (renewed, where a return would count), says so and exits 1. Before, the
/// question waited for ever: on RabbitMQ 4.0.5 a plan of 100 left unanswered 75 s under a
/// 2-s timeout had the broker close its channel (the answer `y` then moved nothing, exit 1)
/// and left every one at delivery count 1; 4.3 takes them back uncounted.
#[tokio::test]
async fn a_plan_left_unanswered_gives_back_at_half_its_consumer_timeout() {
    if crate::target::rabbitmq_version().await < (3, 12) {
        // 3.10 has no per-queue consumer timeout.
        return;
    }
    let mut args = limit(20);
    args.push(("x-consumer-timeout", AMQPValue::LongLongInt(8_000)));
    let b = quorum_dlq("qunanswered", args, 100).await;
    let t = plan_asked(&b, &["replay", "-Q", "q.dlq"]);
    let screen = t.wait_exit();
    assert!(
        screen.contains("gives back what a consumer holds after 8 s (its consumer timeout)"),
        "{screen}"
    );
    assert!(screen.contains("[dlq exited 1]"), "{screen}");
    assert!(
        screen.contains("no answer while dlq held the plan's messages for 4 s"),
        "{screen}"
    );
    given_back_uncounted(b).await;
}

/// Ctrl-C at a replay plan's `[y/N]` gives back what the plan holds before dlq exits (130):
/// renewed where a return would count, in order. Before, the signal ended dlq at once with
/// every message held, and the broker gave them back counted: on 4.0.5 (and 3.10.8 with a
/// limit) all 100 at delivery count 1.
#[tokio::test]
async fn ctrl_c_at_a_plans_question_gives_back_uncounted() {
    let b = quorum_dlq("qplanctrlc", limit(20), 100).await;
    let t = plan_asked(&b, &["replay", "-Q", "q.dlq"]);
    t.keys(&["C-c"]);
    let screen = t.wait_exit();
    assert!(screen.contains("[dlq exited 130]"), "{screen}");
    assert!(
        screen.contains("interrupted at the confirmation: nothing was moved"),
        "{screen}"
    );
    given_back_uncounted(b).await;
}

/// `replay --yes --limit 100` of 3,000 quorum dead letters with a delivery limit: the first
/// 100 move, in order, and the rest stays in the DLQ, in order, none counted. Before, what
/// the take's consumer had been delivered past the selection went back by the channel's
/// close, each counted once (of 40,000: 1,052 on RabbitMQ 3.10.8 and 4.0.5; 4.3 gives back
/// with a nack, uncounted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_streamed_replay_leaves_the_rest_uncounted_in_order() {
    let (b, q, n) = crate::queue_read::paged_quorum_dlq("qlimitrest").await;
    let to = "pager.work";
    b.queue(to, FieldTable::default()).await;
    let run = b
        .run(&[
            "replay",
            "-Q",
            q,
            "--to-queue",
            to,
            "--yes",
            "--limit",
            "100",
        ])
        .await;
    let err = run.stderr();
    assert_eq!(run.code(), 0, "{err}");
    assert!(err.contains("100 replayed, 0 failed"), "{err}");
    assert_eq!(snap_ns(&b.snapshot(to).await), (0..100).collect::<Vec<_>>());
    let left = b.snapshot(q).await;
    assert_eq!(snap_ns(&left), (100..i64::from(n)).collect::<Vec<_>>());
    let counted = left.iter().filter(|m| m.delivery_count.unwrap_or(0) > 0);
    assert_eq!(counted.count(), 0, "{err}");
    b.delete().await;
}

/// All 100 dead letters of `quorum_dlq` in `q.dlq` once, in order, at delivery count 0, none
/// moved; the broker deleted.
async fn given_back_uncounted(b: Broker) {
    let snaps = b.snapshot("q.dlq").await;
    assert_eq!(snap_ns(&snaps), (0..100).collect::<Vec<_>>());
    assert!(
        snaps.iter().all(|m| m.delivery_count.unwrap_or(0) == 0),
        "{:?}",
        snaps.iter().map(|m| m.delivery_count).collect::<Vec<_>>()
    );
    assert_eq!(b.depth("q.src").await, 0);
    b.delete().await;
}

/// dlq with `args` (a replay) on a terminal, once its plan asks `[y/N]`.
fn plan_asked(b: &Broker, args: &[&str]) -> crate::tmux::Term {
    let url = b.amqp_url();
    let env = [("DLQ_AMQP_URL", url.as_str()), ("NO_COLOR", "1")];
    let t = crate::tmux::Term::start(120, &env, args);
    t.wait_for(std::time::Duration::from_secs(60), |s| s.contains("[y/N]"));
    t
}

/// A quorum read whose connection the broker closes part-way (the management API, after
/// 5,000 of 20,000 shown, the delivery limit 20) says what that did to the queue before its
/// error. Before, it said only that the connection was lost: on 3.10.8 and 4.0.5 the
/// renewal's account was dropped on the error path, though 296 messages were then in the
/// queue twice (copies confirmed, originals not acknowledged) and 2,000 at delivery count
/// 1; on 4.3.6, which gives back with a nack, the lost connection gave back all 8,200 the
/// read held, counted. Now: how many are there twice (at least, and up to how many more
/// whose acknowledgements the loss may have cut off), and up to how many were counted, each
/// once; none lost.
#[tokio::test]
async fn a_read_whose_connection_is_lost_says_what_that_did_to_the_queue() {
    let n = 20_000;
    let b = Broker::new("qcut").await;
    let mut args = vec![("x-queue-type", ls("quorum"))];
    args.extend(limit(20));
    b.queue("q.dlq", table(args)).await;
    let bodies = (0..n).map(|i| format!("{{\"n\": {i}}}").into_bytes());
    b.publish_many("q.dlq", bodies).await;
    b.wait_depth("q.dlq", n as u32).await;
    let (child, out) = filter_shown(&b, "q.dlq", 5_000, std::process::Stdio::piped());
    crate::table_faults::close_broker_connection(child.id()).await;
    let rest = std::thread::spawn(move || std::io::read_to_string(out).unwrap());
    let done = child.wait_with_output().unwrap();
    rest.join().unwrap();
    let err = String::from_utf8_lossy(&done.stderr).into_owned();
    assert_eq!(done.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the connection to the broker was lost"),
        "{err}"
    );
    // lapin's account of the acknowledgement it then could not send adds nothing.
    assert!(!err.contains("invalid channel state"), "{err}");
    // The broker requeues a dead connection's messages asynchronously.
    let mut depth = 0;
    for _ in 0..100 {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let now = b.depth("q.dlq").await as usize;
        if now >= n && now == depth {
            break;
        }
        depth = now;
    }
    let snaps = b.snapshot("q.dlq").await;
    let mut all = snap_ns(&snaps);
    all.sort_unstable();
    let twice = all.len() - n;
    all.dedup();
    assert_eq!(all, (0..n as i64).collect::<Vec<_>>(), "lost: {err}");
    // Exactly those whose copies were confirmed and originals not acknowledged, and up to
    // as many more as dlq says its last acknowledgements may not have reached RabbitMQ for
    // (79 once in 8 loaded runs on 3.10.8, unsaid before).
    let said = |re: &str| {
        let re = regex::Regex::new(re).unwrap();
        re.captures(&err)
            .map_or(0, |c| c[1].parse::<usize>().unwrap())
    };
    let at_least = said(r"(\d+) message\(s\) are there twice");
    let more = said(r"up to (\d+) more message\(s\) may be there twice");
    assert!(
        (at_least..=at_least + more).contains(&twice),
        "{twice} in the queue twice: {err}"
    );
    counted_as_said(&snaps, &err);
    let counted = snaps.iter().filter(|m| m.delivery_count.unwrap_or(0) > 0);
    eprintln!("{twice} twice, {} counted", counted.count());
    b.delete().await;
}

/// `filter -Q queue -o ndjson` running, once it has shown `lines` records: the process and
/// the rest of its output.
fn filter_shown(
    b: &Broker,
    queue: &str,
    lines: usize,
    stderr: std::process::Stdio,
) -> (
    std::process::Child,
    std::io::BufReader<std::process::ChildStdout>,
) {
    let mut child = crate::common::dlq_command()
        .args(["filter", "-Q", queue, "-o", "ndjson"])
        .env("DLQ_AMQP_URL", b.amqp_url())
        .env("DLQ_AUDIT_LOG", "/dev/null")
        .stdout(std::process::Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    for _ in 0..lines {
        line.clear();
        std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    }
    (child, out)
}

/// A streamed replay of a quorum DLQ (2,000, delivery limit 20, `--rate 150`) whose
/// connection the broker closes after 100 moved: none lost, and no more messages come back
/// counted than dlq says. On 4.3.6, which gives back with a nack, the lost connection gave
/// back the 191 the take held, counted, unsaid before stop 66; the one more counted (192)
/// was confirmed and its acknowledgement lost, which the replay names as in both places.
/// A selective one (the even ids) held 107, and 183 came back counted: its consumer had
/// been delivered more than the take had pulled from its stream, up to its credit, which
/// the notice now adds. (On 3.10.8 and 4.0.5 none came back counted, either way.)
#[tokio::test]
async fn a_replay_whose_connection_is_lost_says_what_was_counted() {
    let all = ["replay", "-Q", "q.dlq", "--yes", "--rate", "150"];
    let evens = [&all[..], &["--where", ".payload.n % 2 == 0"]].concat();
    for (tag, args) in [("qcutr", &all[..]), ("qcutsel", &evens[..])] {
        replay_whose_connection_is_lost(tag, args).await;
    }
}

async fn replay_whose_connection_is_lost(tag: &str, args: &[&str]) {
    let n = 2_000;
    let b = quorum_dlq(tag, limit(20), n).await;
    let child = crate::common::dlq_command()
        .args(args)
        .env("DLQ_AMQP_URL", b.amqp_url())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    while b.depth("q.src").await < 100 {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    crate::table_faults::close_broker_connection(child.id()).await;
    let done = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&done.stderr).into_owned();
    assert_eq!(done.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the connection to the broker was lost"),
        "{err}"
    );
    // Until the broker has given back what the lost connection held.
    let moved = snap_ns(&b.snapshot("q.src").await);
    let start = std::time::Instant::now();
    while (b.depth("q.dlq").await as usize) + moved.len() < n {
        assert!(start.elapsed().as_secs() < 30, "not all back: {err}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let snaps = b.snapshot("q.dlq").await;
    let mut all = [snap_ns(&snaps), moved].concat();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all, (0..n as i64).collect::<Vec<_>>(), "lost: {err}");
    // What the replay names as in both places came back too, counted.
    let in_both = err.matches("it is in both places").count();
    counted_as_said(
        &snaps,
        &format!("{err}\nup to {in_both} message(s) counted"),
    );
    b.delete().await;
}

/// Before 4.3, RabbitMQ puts a nacked message of a quorum queue without a delivery limit at
/// the back (rabbit_fifo turns the return into a requeue), behind messages that landed while
/// dlq held the queue: on 4.0.5 an `inspect` of 3,000 with 10 newcomers left
/// `100000-100009, 0-2999`, and a dry run did the same, unsaid. dlq now closes instead there
/// (in place, ahead of the newcomers), each take channel in turn. A read and a dry run with
/// a trickle of newcomers, on a DLQ whose limit is off: what dlq held is first, in order,
/// then the newcomers, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_give_back_without_a_limit_stays_ahead_of_newcomers() {
    if crate::target::rabbitmq_major().await < 4 {
        return;
    }
    const N: i64 = 3_000;
    let dry = [
        "replay",
        "-Q",
        "q.dlq",
        "--to-queue",
        "q.src",
        "--dry-run",
        "-o",
        "ndjson",
    ];
    let read = ["inspect", "-Q", "q.dlq", "--limit", "5000", "-o", "ndjson"];
    for args in [&read[..], &dry] {
        let b = quorum_dlq("qnewc", limit(-1), N as usize).await;
        let (run, sent) = trickle_during(&b, args, 100_000).await;
        assert_eq!(run.code(), 0, "{args:?}: {}", run.stderr());
        b.wait_depth("q.dlq", (N as usize + sent) as u32).await;
        let ns = snap_ns(&b.snapshot("q.dlq").await);
        let newcomers = 100_000..100_000 + sent as i64;
        let expected: Vec<i64> = (0..N).chain(newcomers).collect();
        let differs = where_differs(&ns, &expected);
        assert!(ns == expected, "{args:?}: {differs}: {}", run.stderr());
        b.delete().await;
    }
}

/// A selective archive on 4.3 with a trickle of newcomers: its acknowledgements gave the
/// take's live consumers credit, newcomers were delivered to them, and the consumers
/// cancelled then returned those in flight at once (rabbit_fifo_client), ahead of the kept
/// messages given back after (a block of 3-6 first, 4 runs of 4). What the archive kept is
/// back first, in order, then every newcomer, in order; none counted; and the newcomers
/// raise no warning, since the archive checks that what it archived is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selective_archive_gives_back_what_it_kept_ahead_of_newcomers() {
    let Some(b) = selective_on_4_3("qarchnew").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a.ndjson");
    let to = file.to_str().unwrap();
    let args = ["archive", "-Q", "q.dlq", "-e", ALL_BUT_7S];
    let args = [&args[..], &["--to", to, "--delete", "--yes"]].concat();
    let (run, sent) = trickle_during(&b, &args, 100_000).await;
    assert_eq!(run.code(), 0, "{}", run.stderr());
    // Its check found every archived message gone: the newcomers are no cause for alarm
    // ("up to 226 message(s) that dlq moved, archived or renewed are there twice", before).
    assert!(
        !run.stderr().contains("more than dlq gave back"),
        "{}",
        run.stderr()
    );
    let archived = std::fs::read_to_string(&file).unwrap().lines().count();
    assert_eq!(archived, TAKEN as usize - 300 + 2, "{}", run.stderr());
    kept_then_newcomers(&b, TAKEN, sent, &run.stderr()).await;
    b.delete().await;
}

/// The same with a selective planned replay, whose moves gave the consumers credit as
/// the archive's acknowledgements did (1 to 5 newcomers ahead of a kept message, 3 runs
/// of 3, on the old code). What it moved is in the destination, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selective_planned_replay_gives_back_what_it_kept_ahead_of_newcomers() {
    let Some(b) = selective_on_4_3("qplannew").await else {
        return;
    };
    let args = ["replay", "-Q", "q.dlq", "--to-queue", "q.src"];
    let select = ["-e", ALL_BUT_7S, "--plan-first", "--yes"];
    let (run, sent) = trickle_during(&b, &[&args[..], &select].concat(), 100_000).await;
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let moved = snap_ns(&b.snapshot("q.src").await);
    let selected: Vec<i64> = (0..TAKEN).filter(|i| i % 10 != 7).collect();
    assert!(
        moved == selected,
        "moved: {} of {}",
        moved.len(),
        selected.len()
    );
    kept_then_newcomers(&b, TAKEN, sent, &run.stderr()).await;
    b.delete().await;
}

/// The dead letters of a selective take with newcomers, in a DLQ with a limit.
const TAKEN: i64 = 3_000;

/// Selects every one of them but those ending in 7; never a newcomer (6 digits), which is
/// kept where dlq takes it.
const ALL_BUT_7S: &str = r#""n": [0-9]{0,3}[0-689]}"#;

/// `TAKEN` dead letters in a quorum DLQ with a limit of 20, on RabbitMQ 4.3 or later only.
async fn selective_on_4_3(tag: &str) -> Option<Broker> {
    if crate::target::rabbitmq_version().await < (4, 3) {
        return None;
    }
    Some(quorum_dlq(tag, limit(20), TAKEN as usize).await)
}

/// `q.dlq` after a take of its first `n` that kept those ending in 7, while `sent`
/// newcomers landed: the kept ones first, in order, then every newcomer, in order; none
/// counted.
async fn kept_then_newcomers(b: &Broker, n: i64, sent: usize, said: &str) {
    b.wait_depth("q.dlq", (n as usize / 10 + sent) as u32).await;
    let after = b.snapshot("q.dlq").await;
    let ns = snap_ns(&after);
    let kept = (0..n).filter(|i| i % 10 == 7);
    let expected: Vec<i64> = kept.chain(100_000..100_000 + sent as i64).collect();
    let last_kept = ns.iter().rposition(|&i| i < n).unwrap_or(0);
    let ahead: Vec<i64> = ns[..last_kept]
        .iter()
        .filter(|&&i| i >= n)
        .copied()
        .collect();
    let differs = where_differs(&ns, &expected);
    assert!(
        ns == expected,
        "{differs}; newcomers ahead of a kept message: {ahead:?}: {said}"
    );
    let counted = after.iter().filter(|m| m.delivery_count.unwrap_or(0) > 0);
    assert_eq!(counted.count(), 0, "a delivery counted: {said}");
}

/// Where `ns` first differs from `expected`, and a few of each from there, for a failure.
fn where_differs(ns: &[i64], expected: &[i64]) -> String {
    let at = ns.iter().zip(expected).take_while(|(a, b)| a == b).count();
    let near = |v: &[i64]| v[at.saturating_sub(2)..(at + 5).min(v.len())].to_vec();
    format!("from {at} on, {:?} where {:?}", near(ns), near(expected))
}
