//! Queue replay against a real broker: the seed's topology (matriculas.processar
//! dead-lettering via matriculas.dlx into matriculas.dlq), real dead letters, and checks on
//! what every queue holds afterwards.

use crate::broker::{Broker, Snap, ls, table};
use crate::common::{Dialect, TestDb, row};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, ExchangeKind};
use serde_json::Value;

const DLX: &str = "matriculas.dlx";
const DLQ: &str = "matriculas.dlq";
const MAIN: &str = "matriculas.processar";

/// The seed topology; `quorum` makes the DLQ a quorum queue.
async fn topology(b: &Broker, quorum: bool) {
    b.exchange(DLX, ExchangeKind::Fanout).await;
    let dlq_args = if quorum {
        table(vec![("x-queue-type", ls("quorum"))])
    } else {
        FieldTable::default()
    };
    b.queue(DLQ, dlq_args).await;
    b.bind(DLQ, DLX, "").await;
    b.queue(MAIN, table(vec![("x-dead-letter-exchange", ls(DLX))]))
        .await;
}

/// `n` messages published to the main queue and rejected by a worker: real dead letters.
/// Every third carries `KeyError`, the others `ValueError`, in the exception header.
async fn dead_letters(b: &Broker, n: usize) -> Vec<Vec<u8>> {
    let mut bodies = Vec::new();
    for i in 0..n {
        let body = if i == 4 {
            vec![0xff, 0x00, b'x', i as u8] // not UTF-8, not JSON
        } else {
            format!(r#"{{"matricula_id": {i}, "curso": "rust"}}"#).into_bytes()
        };
        let err = if i % 3 == 0 {
            format!("KeyError: 'usuario_id' ({i})")
        } else {
            format!("ValueError: bad cpf {i}")
        };
        let props = BasicProperties::default()
            .with_message_id(format!("m-{i}").as_str().into())
            .with_content_type("application/json".into())
            .with_content_encoding("utf-8".into())
            .with_delivery_mode(2)
            .with_priority(3)
            .with_correlation_id(format!("c-{i}").as_str().into())
            .with_timestamp(1_700_000_000 + i as u64)
            .with_headers(table(vec![
                ("x-exception-message", ls(&err)),
                ("tenant", ls("escola-1")),
                ("attempt", AMQPValue::LongInt(5)),
            ]));
        b.publish(MAIN, &body, props).await;
        bodies.push(body);
    }
    b.reject(MAIN, n).await;
    b.wait_depth(DLQ, n as u32).await;
    bodies
}

fn header<'a>(s: &'a Snap, k: &str) -> &'a Value {
    &s.props["headers"][k]
}

fn is_key_error(s: &Snap) -> bool {
    header(s, "x-exception-message")[1]
        .as_str()
        .unwrap_or("")
        .starts_with("KeyError")
}

/// A snapshot entry without what a replay is allowed to change (for comparing leftovers).
fn stored(s: &Snap) -> (Vec<u8>, Value) {
    (s.body.clone(), s.props.clone())
}

async fn selective(quorum: bool, plan_first: bool, env: &[(&str, &str)]) {
    let b = Broker::new(if quorum { "qreplay-quorum" } else { "qreplay" }).await;
    topology(&b, quorum).await;
    dead_letters(&b, 30).await;
    let before = b.snapshot(DLQ).await;
    assert_eq!(before.len(), 30);
    let (wanted, rest): (Vec<&Snap>, Vec<&Snap>) = before.iter().partition(|s| is_key_error(s));
    assert_eq!(wanted.len(), 10);

    let mut args = vec!["replay", "-Q", DLQ, "--motivo", "KeyError", "--yes"];
    if plan_first {
        args.push("--plan-first");
    }
    let run = b.run_with(&args, env).await;
    run.ok();
    assert_eq!(
        run.stderr().contains("Plan: move 10 message(s)"),
        plan_first,
        "{}",
        run.stderr()
    );
    assert!(
        run.stderr().contains("10 replayed, 0 failed"),
        "{}",
        run.stderr()
    );

    // Counts conserved; exactly the selected ones moved, where they died.
    b.wait_depth(MAIN, 10).await;
    b.wait_depth(DLQ, 20).await;
    let moved = b.snapshot(MAIN).await;
    let left = b.snapshot(DLQ).await;
    // The rest stays exactly as it was, in the same order.
    assert_eq!(
        left.iter().map(stored).collect::<Vec<_>>(),
        rest.iter().map(|s| stored(s)).collect::<Vec<_>>()
    );
    // The moved ones: bodies byte-identical, in order; properties and app headers kept.
    assert_eq!(
        moved.iter().map(|s| s.body.clone()).collect::<Vec<_>>(),
        wanted.iter().map(|s| s.body.clone()).collect::<Vec<_>>()
    );
    for (m, w) in moved.iter().zip(&wanted) {
        for p in [
            "content_type",
            "content_encoding",
            "delivery_mode",
            "priority",
            "message_id",
            "correlation_id",
            "timestamp",
        ] {
            assert_eq!(m.props[p], w.props[p], "{p}");
        }
        for h in ["tenant", "attempt", "x-exception-message"] {
            assert_eq!(header(m, h), header(w, h), "{h}");
        }
        // x-death moved to dlq-x-death; the loop guard and provenance stamped.
        assert!(header(m, "x-death").is_null() && header(m, "x-first-death-queue").is_null());
        let saved: serde_json::Value =
            serde_json::from_str(header(m, "dlq-x-death")[1].as_str().unwrap()).unwrap();
        assert_eq!(saved["x-first-death-queue"], serde_json::json!(["S", MAIN]));
        assert_eq!(saved["x-death"][0], "A", "x-death kept as an AMQP array");
        assert_eq!(header(m, "dlq-replay-count"), &serde_json::json!(["l", 1]));
        assert_eq!(
            header(m, "dlq-replayed-from"),
            &serde_json::json!(["S", DLQ])
        );
    }
    b.delete().await;
}

/// Under --yes: selected and moved as they are read.
#[tokio::test]
async fn selective_replay_by_reason_classic() {
    selective(false, false, &[]).await;
}

/// --plan-first: everything taken and selected, held, then moved without a second read.
#[tokio::test]
async fn selective_replay_planned_first() {
    selective(false, true, &[]).await;
}

/// The plan does not fit in memory (a tiny budget): it gives everything back and the move
/// reads again, moving only what the plan selected.
#[tokio::test]
async fn selective_replay_in_two_passes() {
    selective(false, true, &[("DLQ_HOLD_BUDGET", "100")]).await;
}

#[tokio::test]
async fn selective_replay_by_reason_quorum() {
    selective(true, false, &[]).await;
}

#[tokio::test]
async fn selective_replay_by_reason_quorum_planned_first() {
    selective(true, true, &[]).await;
}

#[tokio::test]
async fn replay_by_pattern_and_jq_with_limit() {
    let b = Broker::new("qreplay-sel").await;
    topology(&b, false).await;
    dead_letters(&b, 12).await;
    // -e over the payload text: matricula_id 1x (10, 11).
    b.run(&["replay", "-Q", DLQ, "-e", r#""matricula_id": 1\d"#, "--yes"])
        .await
        .ok();
    b.wait_depth(MAIN, 2).await;
    // jq over the record, with a limit: 2 of the remaining ValueError ones.
    b.run(&[
        "replay",
        "-Q",
        DLQ,
        "--where",
        r#".motivo | startswith("rejected: ValueError")"#,
        "--limit",
        "2",
        "--yes",
    ])
    .await
    .ok();
    b.wait_depth(MAIN, 4).await;
    b.wait_depth(DLQ, 8).await;
    let moved: Vec<String> = b
        .snapshot(MAIN)
        .await
        .iter()
        .map(|s| s.props["message_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(moved, ["m-10", "m-11", "m-1", "m-2"]);
    b.delete().await;
}

#[tokio::test]
async fn plan_dry_run_confirmation_and_missing_destination() {
    let b = Broker::new("qreplay-plan").await;
    topology(&b, false).await;
    dead_letters(&b, 6).await;
    let before = b.snapshot(DLQ).await;
    // Dry run: the plan and the messages, nothing moved.
    let run = b
        .run(&["replay", "-Q", DLQ, "--dry-run", "-o", "ndjson"])
        .await;
    let msgs = run.ndjson();
    assert_eq!(msgs.len(), 6);
    assert_eq!(msgs[0]["routing_key"], MAIN);
    assert_eq!(msgs[0]["headers"]["dlq-replay-count"], 1);
    assert!(
        run.stderr().contains("Plan: move 6 message(s)"),
        "{}",
        run.stderr()
    );
    // No terminal and no --yes: refused.
    b.run(&["replay", "-Q", DLQ])
        .await
        .fails(2, "refusing to act without confirmation");
    // The origin queue is gone: the plan refuses before anything moves ...
    b.ch.queue_delete(MAIN.into(), Default::default())
        .await
        .unwrap();
    for args in [
        &["replay", "-Q", DLQ, "--dry-run"][..],
        &["replay", "-Q", DLQ, "--yes", "--plan-first"],
    ] {
        b.run(args)
            .await
            .fails(2, "do not exist: nothing was moved");
        assert_eq!(b.snapshot(DLQ).await, before);
    }
    // ... and under --yes (moving while reading) each of its messages stays, reported.
    let run = b.run(&["replay", "-Q", DLQ, "--yes", "-o", "json"]).await;
    assert_eq!(run.code(), 3, "{}", run.stderr());
    let report: Value = serde_json::from_str(run.stdout().trim()).unwrap();
    assert_eq!(report["succeeded"], 0, "{report}");
    assert_eq!(report["failed_count"], 6, "{report}");
    assert!(
        report["failed"][0]["reason"]
            .as_str()
            .unwrap()
            .contains(&format!("{MAIN:?} does not exist")),
        "{report}"
    );
    b.wait_depth(DLQ, 6).await;
    assert_eq!(
        b.snapshot(DLQ).await,
        before,
        "left in place, in order, unchanged"
    );
    b.delete().await;
}

/// Under --yes, messages from two origin queues, one of them since deleted: those whose
/// queue exists move, the others stay in the DLQ in their order, and the run says so.
#[tokio::test]
async fn streaming_replay_moves_what_it_can_and_keeps_the_rest() {
    const OTHER: &str = "matriculas.outra";
    let b = Broker::new("qreplay-stream").await;
    topology(&b, false).await;
    b.queue(OTHER, table(vec![("x-dead-letter-exchange", ls(DLX))]))
        .await;
    for i in 0..6 {
        let q = if i % 2 == 0 { MAIN } else { OTHER };
        let props = BasicProperties::default().with_message_id(format!("s-{i}").as_str().into());
        b.publish(q, format!("{{\"n\": {i}}}").as_bytes(), props)
            .await;
    }
    // Interleaved in the DLQ: s-0 (MAIN), s-1 (OTHER), s-2 (MAIN) ...
    for i in 0..3 {
        b.reject(MAIN, 1).await;
        b.wait_depth(DLQ, 2 * i + 1).await;
        b.reject(OTHER, 1).await;
        b.wait_depth(DLQ, 2 * i + 2).await;
    }
    b.ch.queue_delete(OTHER.into(), Default::default())
        .await
        .unwrap();
    let before = b.snapshot(DLQ).await;
    let run = b.run(&["replay", "-Q", DLQ, "--yes", "-o", "json"]).await;
    assert_eq!(run.code(), 3, "{}", run.stderr());
    let report: Value = serde_json::from_str(run.stdout().trim()).unwrap();
    assert_eq!(report["succeeded"], 3, "{report}");
    assert_eq!(report["failed_count"], 3, "{report}");
    b.wait_depth(MAIN, 3).await;
    b.wait_depth(DLQ, 3).await;
    let moved: Vec<String> = b
        .snapshot(MAIN)
        .await
        .iter()
        .map(|s| s.props["message_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(moved, ["s-0", "s-2", "s-4"]);
    let left: Vec<_> = b.snapshot(DLQ).await.iter().map(stored).collect();
    let want: Vec<_> = before
        .iter()
        .filter(|m| {
            m.props["message_id"]
                .as_str()
                .unwrap()
                .ends_with(['1', '3', '5'])
        })
        .map(stored)
        .collect();
    assert_eq!(
        left, want,
        "the other queue's messages, in order, unchanged"
    );
    b.delete().await;
}

#[tokio::test]
async fn unroutable_destination_leaves_messages_in_the_dlq() {
    let b = Broker::new("qreplay-unroutable").await;
    topology(&b, false).await;
    dead_letters(&b, 5).await;
    b.exchange("nowhere.x", ExchangeKind::Direct).await;
    let before = b.snapshot(DLQ).await;
    let run = b
        .run(&[
            "replay",
            "-Q",
            DLQ,
            "--to-exchange",
            "nowhere.x",
            "--routing-key",
            "none",
            "--yes",
            "-o",
            "json",
        ])
        .await;
    assert_eq!(run.code(), 3, "{}", run.stderr());
    let report: Value = serde_json::from_str(run.stdout().trim()).unwrap();
    assert_eq!(report["succeeded"], 0);
    assert_eq!(report["failed_count"], 5);
    assert!(
        report["failed"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("unroutable")
    );
    b.wait_depth(DLQ, 5).await;
    assert_eq!(
        b.snapshot(DLQ).await,
        before,
        "left in the DLQ, in order, unchanged"
    );
    b.delete().await;
}

/// Routed and returned messages interleaved on one take channel: acknowledgements are
/// batched (`multiple`) only over consecutive confirmed deliveries, so no returned message
/// may be acknowledged with a later one.
#[tokio::test]
async fn interleaved_returns_are_never_acknowledged_with_their_neighbours() {
    interleaved_returns(false).await;
}

/// The same while moving what a plan holds (`--plan-first`).
#[tokio::test]
async fn interleaved_returns_planned_first() {
    interleaved_returns(true).await;
}

async fn interleaved_returns(plan_first: bool) {
    let b = Broker::new(if plan_first {
        "qreplay-mixed-plan"
    } else {
        "qreplay-mixed"
    })
    .await;
    topology(&b, false).await;
    dead_letters(&b, 12).await;
    // Only the KeyError messages (0, 3, 6, 9) route; the rest are returned as unroutable
    // (`all-with-x`: a headers exchange ignores x- headers otherwise).
    b.exchange("mixed.x", ExchangeKind::Headers).await;
    b.queue("mixed.q", FieldTable::default()).await;
    for i in [0, 3, 6, 9] {
        let err = format!("KeyError: 'usuario_id' ({i})");
        b.bind_with(
            "mixed.q",
            "mixed.x",
            table(vec![
                ("x-match", ls("all-with-x")),
                ("x-exception-message", ls(&err)),
            ]),
        )
        .await;
    }
    let before = b.snapshot(DLQ).await;
    for window in ["64", "1"] {
        let mut args = vec![
            "replay",
            "-Q",
            DLQ,
            "--to-exchange",
            "mixed.x",
            "--routing-key",
            "any",
            "--window",
            window,
            "--yes",
            "-o",
            "json",
        ];
        if plan_first {
            args.push("--plan-first");
        }
        let run = b.run(&args).await;
        let report: Value = serde_json::from_str(run.stdout().trim()).unwrap();
        if window == "64" {
            assert_eq!(run.code(), 3, "{}", run.stderr());
            assert_eq!(report["succeeded"], 4, "{report}");
            assert_eq!(report["failed_count"], 8, "{report}");
        } else {
            // The second run finds only the returned ones, and returns them again.
            assert_eq!(report["succeeded"], 0, "{report}");
            assert_eq!(report["failed_count"], 8, "{report}");
        }
        b.wait_depth(DLQ, 8).await;
        assert_eq!(b.depth("mixed.q").await, 4);
        let left: Vec<_> = b.snapshot(DLQ).await.iter().map(stored).collect();
        let want: Vec<_> = before
            .iter()
            .filter(|m| !is_key_error(m))
            .map(stored)
            .collect();
        assert_eq!(left, want, "exactly the returned ones, in order, unchanged");
    }
    b.delete().await;
}

#[tokio::test]
async fn loop_guard_stops_messages_that_keep_failing() {
    let b = Broker::new("qreplay-loop").await;
    topology(&b, false).await;
    dead_letters(&b, 3).await;
    for round in 1..=2 {
        b.run(&["replay", "-Q", DLQ, "--yes", "--max-replays", "2"])
            .await
            .ok();
        b.wait_depth(MAIN, 3).await;
        // The consumer fails again: back to the DLQ with a fresh history.
        b.reject(MAIN, 3).await;
        b.wait_depth(DLQ, 3).await;
        let s = b.snapshot(DLQ).await;
        assert_eq!(
            header(&s[0], "dlq-replay-count"),
            &serde_json::json!(["l", round])
        );
        assert_eq!(
            header(&s[0], "x-first-death-queue"),
            &serde_json::json!(["S", MAIN])
        );
    }
    let run = b
        .run(&["replay", "-Q", DLQ, "--yes", "--max-replays", "2"])
        .await;
    assert_eq!(run.code(), 3, "{}", run.stderr());
    assert!(
        run.stderr().contains("already replayed 2 time(s)"),
        "{}",
        run.stderr()
    );
    b.wait_depth(DLQ, 3).await;
    assert_eq!(b.depth(MAIN).await, 0);
    // Raising the limit lets them go again.
    b.run(&["replay", "-Q", DLQ, "--yes", "--max-replays", "3"])
        .await
        .ok();
    b.wait_depth(MAIN, 3).await;
    b.delete().await;
}

#[tokio::test]
async fn canary_stops_when_replayed_messages_die_again() {
    let b = Broker::new("qreplay-canary").await;
    topology(&b, false).await;
    dead_letters(&b, 10).await;
    // A worker that still fails: everything it gets is rejected (dead-lettered again).
    let worker = {
        let url = b.amqp_url();
        tokio::spawn(async move {
            let c = lapin::Connection::connect(&url, Default::default())
                .await
                .unwrap();
            let ch = c.create_channel().await.unwrap();
            let mut cons = ch
                .basic_consume(
                    MAIN.into(),
                    "failing-worker".into(),
                    Default::default(),
                    FieldTable::default(),
                )
                .await
                .unwrap();
            use futures_util::StreamExt;
            while let Some(Ok(d)) = cons.next().await {
                d.acker
                    .nack(lapin::options::BasicNackOptions {
                        multiple: false,
                        requeue: false,
                    })
                    .await
                    .unwrap();
            }
        })
    };
    let run = b
        .run(&[
            "replay",
            "-Q",
            DLQ,
            "--canary",
            "2",
            "--canary-wait",
            "2s",
            "--yes",
        ])
        .await;
    assert_eq!(run.code(), 1, "{}", run.stderr());
    assert!(
        run.stderr().contains("canary failed: 2 of 2"),
        "{}",
        run.stderr()
    );
    // All ten are in the DLQ: 8 never moved, 2 died again.
    b.wait_depth(DLQ, 10).await;
    worker.abort();
    // The two that died again say they were replayed once; they are pending again.
    let recs = b.run(&["inspect", "-Q", DLQ, "-o", "json"]).await.json();
    let counts: Vec<u64> = recs
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["replay_count"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(counts.iter().filter(|&&n| n == 1).count(), 2, "{recs}");
    assert_eq!(counts.len(), 10, "{recs}");
    let again = recs
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["replay_count"] == 1)
        .unwrap();
    let id = again["id"].as_str().unwrap();
    let full = b
        .run(&["inspect", "-Q", DLQ, "--id", id, "--full"])
        .await
        .ok();
    assert!(full.contains("no (replayed 1x before)"), "{full}");
    // With the cause fixed (no failing worker), the canary passes and the rest follows.
    let run = b
        .run(&[
            "replay",
            "-Q",
            DLQ,
            "--canary",
            "2",
            "--canary-wait",
            "1s",
            "--yes",
        ])
        .await;
    run.ok();
    assert!(run.stderr().contains("none died again"), "{}", run.stderr());
    b.wait_depth(MAIN, 10).await;
    b.wait_depth(DLQ, 0).await;
    b.delete().await;
}

/// A stock Celery worker whose queue dead-letters (a task raising Reject(requeue=False) with
/// acks_late): after the fix, `dlq replay` sends it back and the worker runs it again.
#[tokio::test]
async fn celery_worker_runs_the_replayed_task_again() {
    use crate::celery_worker::*;
    let queue = crate::common::unique("celery_dlx");
    let dlx = format!("{queue}.dlx");
    let dlq = format!("{queue}.dlq");
    // The DLX and DLQ on the default vhost, where the worker runs.
    let c = connection().await;
    let ch = c.create_channel().await.unwrap();
    ch.exchange_declare(
        dlx.as_str().into(),
        ExchangeKind::Fanout,
        Default::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    declare_queue(&dlq).await;
    ch.queue_bind(
        dlq.as_str().into(),
        dlx.as_str().into(),
        "".into(),
        Default::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let flag = dir.path().join("still-broken");
    std::fs::write(&flag, "").unwrap();
    let flag_s = flag.to_str().unwrap().to_string();
    let worker = CeleryWorker::start_with(
        &queue,
        &[
            ("DLQ_TEST_DLX", &dlx),
            ("DLQ_TEST_QUEUE", &queue),
            ("DLQ_TEST_REJECT_FILE", &flag_s),
        ],
    )
    .await;
    // The task is sent the way an app would (here by dlq's own table replay from SQLite).
    let db = crate::common::TestDb::new(crate::common::Dialect::Sqlite, "celery_dlx").await;
    db.init();
    db.insert(&[crate::common::row(
        "rejeitar",
        Some(r#"{"pedido_id": 77}"#),
        "x",
        "2026-11-01T00:00:00Z",
        false,
    )])
    .await;
    db.dlq_root(&["replay", "--to-queue", &queue, "--yes"]).ok();
    worker.wait_runs(1).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while queue_state(&dlq).await.unwrap().messages < 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "the rejected task never reached the DLQ:\n{}",
            worker.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // The bug is fixed; replay the DLQ: the worker runs the task again and it stays done.
    std::fs::remove_file(&flag).unwrap();
    let run = crate::common::Dlq::new()
        .args(&["replay", "-Q", &dlq, "--yes"])
        .run();
    run.ok();
    let runs = worker.wait_runs(2).await;
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[1]["kwargs"]["pedido_id"], 77);
    assert_eq!(
        runs[1]["task_id"], runs[0]["task_id"],
        "the same task message came back"
    );
    assert_eq!(queue_state(&dlq).await.unwrap().messages, 0);
    drop(worker);
    delete_queue(&dlq).await;
    let _ = ch
        .exchange_delete(dlx.as_str().into(), Default::default())
        .await;
}

/// Thousands of messages, as after an outage: acknowledgements of one take channel overlap
/// (several batches in flight), and the broker closes a channel acknowledged out of order.
/// Every message moves once, in order, and what is left stays in order.
#[tokio::test]
async fn volume_replay_moves_every_message_once_in_order() {
    const N: usize = 5000;
    let b = Broker::new("qreplay-volume").await;
    topology(&b, false).await;
    // Dead-lettered at once by a TTL of 0 (reason "expired"); then the queue is declared
    // again without it, so the replayed messages stay.
    b.redeclare(
        MAIN,
        table(vec![
            ("x-dead-letter-exchange", ls(DLX)),
            ("x-message-ttl", AMQPValue::LongInt(0)),
        ]),
    )
    .await;
    let body = |i: usize| {
        let tag = if i % 10 == 3 { "stay" } else { "go" };
        format!(r#"{{"n": {i}, "tag": "{tag}"}}"#).into_bytes()
    };
    b.publish_many(MAIN, (0..N).map(body)).await;
    b.wait_depth(DLQ, N as u32).await;
    b.redeclare(MAIN, table(vec![("x-dead-letter-exchange", ls(DLX))]))
        .await;

    // The first 4000, in batches of acknowledgements, with a small window.
    let run = b
        .run(&[
            "replay", "-Q", DLQ, "--yes", "--window", "16", "--limit", "4000",
        ])
        .await;
    run.ok();
    assert!(
        run.stderr().contains("4000 replayed, 0 failed"),
        "{}",
        run.stderr()
    );
    b.wait_depth(MAIN, 4000).await;
    b.wait_depth(DLQ, 1000).await;
    // Then a selection among the rest, at the default window: one acknowledgement each.
    let run = b
        .run(&["replay", "-Q", DLQ, "--yes", "-e", "stay", "-vv"])
        .await;
    run.ok();
    assert!(
        run.stderr().contains("100 replayed, 0 failed"),
        "{}",
        run.stderr()
    );
    // -vv: the stages, in order, so a stuck run shows where it waits (how much is still
    // in flight when the DLQ is exhausted varies).
    let stderr = run.stderr();
    let stages: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("replay: ") && !l.contains("replayed,"))
        .collect();
    let want = [
        format!("replay: taking from {DLQ:?} (1000 ready)"),
        format!("replay: {DLQ:?}: 1000 taken; settling "),
        format!("replay: {DLQ:?}: giving back 900 not moved"),
        "replay: closing the connection".to_string(),
    ];
    assert_eq!(stages.len(), want.len(), "{stderr}");
    for (got, want) in stages.iter().zip(&want) {
        assert!(
            got.starts_with(want.as_str()),
            "{got:?} vs {want:?}: {stderr}"
        );
    }
    b.wait_depth(MAIN, 4100).await;
    b.wait_depth(DLQ, 900).await;

    let n_of = |s: &Snap| -> usize {
        let v: Value = serde_json::from_slice(&s.body).unwrap();
        v["n"].as_u64().unwrap() as usize
    };
    let moved: Vec<usize> = b.snapshot(MAIN).await.iter().map(n_of).collect();
    let want: Vec<usize> = (0..4000).chain((4000..N).filter(|i| i % 10 == 3)).collect();
    assert_eq!(moved, want, "moved once each, in queue order");
    let left: Vec<usize> = b.snapshot(DLQ).await.iter().map(n_of).collect();
    let want: Vec<usize> = (4000..N).filter(|i| i % 10 != 3).collect();
    assert_eq!(left, want, "the rest stays, in order");
    b.delete().await;
}

/// A destination at (or near) its x-max-length: the plan says what the broker will do, and
/// the plan shows the real names though the password (guest) is a word of them.
#[tokio::test]
async fn a_full_destination_is_warned_about_in_the_plan() {
    use crate::broker::{ls, table};
    use lapin::types::AMQPValue;
    let b = Broker::new("hard_full").await;
    b.queue(
        "celery",
        table(vec![("x-max-length", AMQPValue::LongInt(3))]),
    )
    .await;
    b.queue(
        "guest.orders",
        table(vec![
            ("x-max-length", AMQPValue::LongInt(100)),
            ("x-overflow", ls("reject-publish")),
        ]),
    )
    .await;
    let mut db = TestDb::new(Dialect::Sqlite, "hard_full").await;
    db.amqp_url = b.amqp_url();
    db.init();
    db.insert(&crate::common::tagged_rows(5, "x")).await;
    let run = db.dlq(&["replay", "--no-worker-check", "--dry-run"]);
    run.ok();
    let err = run.stderr();
    assert!(
        err.contains(r#"destination queue "celery" holds 0 of at most 3"#),
        "{err}"
    );
    assert!(err.contains("drops (or dead-letters) the oldest"), "{err}");
    // Room enough: no warning; and names containing the password are shown as they are.
    let run = db.dlq(&[
        "replay",
        "--no-worker-check",
        "--to-queue",
        "guest.orders",
        "--dry-run",
    ]);
    run.ok();
    assert!(!run.stderr().contains("at most"), "{}", run.stderr());
    assert!(
        run.stderr().contains(r#"queue "guest.orders""#),
        "{}",
        run.stderr()
    );
    assert!(
        run.stderr().contains("amqp://guest:***@"),
        "{}",
        run.stderr()
    );
    db.drop().await;
    b.delete().await;
}

/// The dry run shows the bytes that will be sent, not a re-serialisation of them.
#[tokio::test]
async fn the_dry_run_shows_the_bytes_that_will_go() {
    let b = Broker::new("hard_bytes").await;
    b.queue("celery", FieldTable::default()).await;
    let mut db = TestDb::new(Dialect::Sqlite, "hard_bytes").await;
    db.amqp_url = b.amqp_url();
    db.init();
    let args = r#"[[1e400], {"k": 1, "k": 2}]"#;
    db.insert(&[row("t", Some(args), "m", "2026-11-30T10:00:00Z", false)])
        .await;
    let out = db
        .dlq(&["replay", "--no-worker-check", "--dry-run", "-o", "ndjson"])
        .ok();
    assert!(out.contains("1e400"), "{out}");
    assert!(out.contains(r#""k": 1, "k": 2"#), "{out}");
    db.drop().await;
    b.delete().await;
}
