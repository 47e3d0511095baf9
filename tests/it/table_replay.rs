//! Table replay against a real broker, real databases and a real Celery worker.

use crate::celery_worker::*;
use crate::common::*;
use crate::per_dialect;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

async fn marked(db: &TestDb) -> i64 {
    db.scalar_i64(
        "SELECT COUNT(*) FROM {t} WHERE reprocessada <> false AND reprocessada IS NOT NULL",
    )
    .await
}

async fn marked_at(db: &TestDb) -> i64 {
    db.scalar_i64("SELECT COUNT(*) FROM {t} WHERE reprocessada_em IS NOT NULL")
        .await
}

/// The seed's scenario 2, end to end: 340 IntegrityError rows run again on a stock worker
/// with exactly their stored arguments, each row marked; nothing else changes; a second run
/// replays nothing.
async fn scenario2_end_to_end(dialect: Dialect) {
    let db = TestDb::with_rows(dialect, "s2_replay", &scenario2()).await;
    let queue = unique("celery_s2");
    let worker = CeleryWorker::start(&queue).await;
    assert_eq!(marked(&db).await, 40);

    let run = db.dlq_root(&[
        "replay",
        "--motivo",
        "IntegrityError",
        "--to-queue",
        &queue,
        "--yes",
    ]);
    run.ok();
    assert!(
        run.stderr().contains("340 replayed, 0 failed, 0 skipped"),
        "{}",
        run.stderr()
    );
    let runs = worker.wait_runs(340).await;
    assert_eq!(runs.len(), 340, "each task ran exactly once");

    // Exactly the stored arguments: kwargs objects, keyed by pedido_id.
    let mut got: BTreeMap<i64, Value> = BTreeMap::new();
    for r in &runs {
        assert_eq!(r["task"], "processar_pagamento");
        assert_eq!(r["args"], json!([]));
        let pid = r["kwargs"]["pedido_id"].as_i64().unwrap();
        assert!(
            r["replay_of"]
                .as_str()
                .unwrap()
                .starts_with(&format!("table:{}:", db.table))
        );
        got.insert(pid, r["kwargs"].clone());
    }
    let expected: BTreeMap<i64, Value> = scenario2()
        .into_iter()
        .filter(|r| r.motivo.contains("IntegrityError") && !r.replayed)
        .map(|r| {
            let v: Value = serde_json::from_str(r.args.as_deref().unwrap()).unwrap();
            (v["pedido_id"].as_i64().unwrap(), v)
        })
        .collect();
    assert_eq!(got, expected);

    // The 340 rows are marked (with reprocessada_em), the other rows untouched.
    assert_eq!(marked(&db).await, 40 + 340);
    assert_eq!(marked_at(&db).await, 340);
    let still = db.dlq_root(&["filter", "--count"]).ok();
    assert_eq!(still.trim(), (120 + 80 + 7).to_string());

    // A second run finds nothing to do.
    let again = db.dlq_root(&[
        "replay",
        "--no-worker-check",
        "--motivo",
        "IntegrityError",
        "--to-queue",
        &queue,
        "--yes",
    ]);
    again.ok();
    assert!(
        again.stderr().contains("nothing to replay"),
        "{}",
        again.stderr()
    );
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(worker.runs().len(), 340);
    drop(worker);
    db.drop().await;
}
per_dialect!(scenario2_end_to_end);

/// kwargs and args rows, kombu markers reaching the worker as real Python types, an empty
/// args row, and rows whose args cannot be a task: refused, left un-marked, exit code 3.
async fn argument_shapes(dialect: Dialect) {
    let db = TestDb::new(dialect, "shapes").await;
    db.init();
    let at = "2026-11-20T10:00:00Z";
    db.insert(&[
        row(
            "agendar_aula",
            Some(r#"{"aula_id": 7, "quando": {"__type__": "datetime", "__value__": "2026-12-01T09:30:00-03:00"}, "preco": {"__type__": "decimal", "__value__": "19.90"}}"#),
            "IntegrityError: a",
            at,
            false,
        ),
        row("agendar_aula", Some(r#"[8, "sala 2", {"__type__": "date", "__value__": "2026-12-02"}]"#), "IntegrityError: b", at, false),
        row("agendar_aula", None, "IntegrityError: c", at, false),
        row("agendar_aula", Some(r#""only a string""#), "IntegrityError: d", at, false),
        row("agendar_aula", Some("42"), "IntegrityError: e", at, false),
    ])
    .await;
    let queue = unique("celery_shapes");
    let worker = CeleryWorker::start(&queue).await;
    let run = db.dlq_root(&[
        "replay",
        "--task",
        "agendar_aula",
        "--to-queue",
        &queue,
        "--yes",
        "-o",
        "json",
    ]);
    assert_eq!(run.code(), 3, "partial failure\n{}", run.stderr());
    let report: Value = serde_json::from_str(run.stdout().trim()).unwrap();
    assert_eq!(report["succeeded"], 3);
    assert_eq!(report["failed_count"], 2);
    let reasons: Vec<String> = report["failed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["reason"].as_str().unwrap().to_string())
        .collect();
    assert!(reasons.iter().all(|r| r.contains("args")), "{reasons:?}");

    let runs = worker.wait_runs(3).await;
    assert_eq!(runs.len(), 3);
    let by_first: BTreeSet<String> = runs.iter().map(|r| r.to_string()).collect();
    let kw = runs
        .iter()
        .find(|r| r["kwargs"]["aula_id"] == 7)
        .expect("kwargs row ran");
    assert_eq!(
        kw["kwargs"]["quando"],
        json!({"py": "datetime", "iso": "2026-12-01T09:30:00-03:00"})
    );
    assert_eq!(
        kw["kwargs"]["preco"],
        json!({"py": "decimal", "str": "19.90"})
    );
    let ar = runs
        .iter()
        .find(|r| r["args"].get(0) == Some(&json!(8)))
        .expect("args row ran");
    assert_eq!(
        ar["args"],
        json!([8, "sala 2", {"py": "date", "iso": "2026-12-02"}])
    );
    assert!(
        runs.iter()
            .any(|r| r["args"] == json!([]) && r["kwargs"] == json!({})),
        "{by_first:?}"
    );
    // The refused rows are still pending; the others are marked.
    assert_eq!(marked(&db).await, 3);
    assert_eq!(db.dlq_root(&["filter", "--count"]).ok().trim(), "2");
    drop(worker);
    db.drop().await;
}
per_dialect!(argument_shapes);

/// Refusals change nothing: an unknown target queue, no terminal without --yes, --dry-run.
async fn refusals_and_dry_run(dialect: Dialect) {
    let db = TestDb::with_rows(dialect, "refuse", &scenario2()[..30]).await;
    let missing = unique("no_such_queue");
    db.dlq_root(&[
        "replay",
        "--no-worker-check",
        "--to-queue",
        &missing,
        "--yes",
    ])
    .fails(2, "does not exist");
    assert!(queue_state(&missing).await.is_none(), "nothing was created");

    let queue = unique("celery_dry");
    declare_queue(&queue).await;
    db.dlq_root(&["replay", "--no-worker-check", "--to-queue", &queue])
        .fails(2, "refusing to act without confirmation");

    let run = db.dlq_root(&[
        "replay",
        "--no-worker-check",
        "--to-queue",
        &queue,
        "--dry-run",
        "-o",
        "ndjson",
    ]);
    let msgs = run.ndjson();
    assert_eq!(msgs.len(), 30);
    assert_eq!(msgs[0]["task"], "processar_pagamento");
    assert_eq!(msgs[0]["routing_key"], queue.as_str());
    assert_eq!(msgs[0]["body"][0], json!([]));
    assert_eq!(msgs[0]["body"][1]["pedido_id"], 1000);
    assert_eq!(msgs[0]["properties"]["content_type"], "application/json");
    assert!(
        run.stderr().contains("Plan: replay 30 row(s)"),
        "{}",
        run.stderr()
    );
    assert!(run.stderr().contains("no consumers"), "{}", run.stderr());

    assert_eq!(marked(&db).await, 0);
    assert_eq!(queue_state(&queue).await.unwrap().messages, 0);
    delete_queue(&queue).await;
    db.drop().await;
}
per_dialect!(refusals_and_dry_run);

/// Two replays of the same selection at once dispatch every row exactly once.
async fn concurrent_replays_dispatch_once(dialect: Dialect) {
    let db = TestDb::with_rows(dialect, "concurrent", &scenario2()).await;
    let queue = unique("celery_conc");
    declare_queue(&queue).await;
    let spawn = || {
        let (url, table, queue) = (db.url.clone(), db.table.clone(), queue.clone());
        std::thread::spawn(move || {
            Dlq::new()
                .env("DLQ_DATABASE_URL", &url)
                .env("DLQ_TABLE", &table)
                .args(&[
                    "replay",
                    "--no-worker-check",
                    "--motivo",
                    "IntegrityError",
                    "--to-queue",
                    &queue,
                    "--yes",
                    "--window",
                    "8",
                ])
                .run()
        })
    };
    let (a, b) = (spawn(), spawn());
    let (a, b) = (a.join().unwrap(), b.join().unwrap());
    a.ok();
    b.ok();
    let msgs = drain(&queue).await;
    let origins: Vec<String> = msgs
        .iter()
        .map(|m| header_str(&m.delivery.properties, "dlq-replay-of").expect("replay-of header"))
        .collect();
    let distinct: BTreeSet<&String> = origins.iter().collect();
    assert_eq!(
        origins.len(),
        340,
        "one message per row\nA: {}\nB: {}",
        a.stderr(),
        b.stderr()
    );
    assert_eq!(distinct.len(), 340);
    assert_eq!(marked(&db).await, 40 + 340);
    delete_queue(&queue).await;
    db.drop().await;
}
per_dialect!(concurrent_replays_dispatch_once);

/// Ctrl-C while a table replay's canary waits (`--canary 5 --canary-wait 300s`): the run stops
/// at once with its report (exit 1, "STOPPED: interrupted"), the 5 canaries sent and marked,
/// the other 25 rows untouched, nothing more sent. Before, nothing listened during the wait:
/// dlq ended at once, 130, without a report.
#[tokio::test]
async fn ctrl_c_during_a_table_canarys_wait_stops_with_a_report() {
    use std::time::{Duration, Instant};
    let db = TestDb::with_rows(Dialect::Sqlite, "canarystop", &scenario2()[..30]).await;
    let queue = unique("celery_canary");
    declare_queue(&queue).await;
    let child = dlq_command()
        .env("DLQ_DATABASE_URL", &db.url)
        .env("DLQ_TABLE", &db.table)
        .args(["replay", "--no-worker-check", "--to-queue", &queue, "--yes"])
        .args(["--canary", "5", "--canary-wait", "300s"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while marked(&db).await < 5 {
        assert!(Instant::now() < deadline, "no canary marked in 60 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Into the wait.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (out, err) = signalled(child, "-INT").await;
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("5 replayed") && err.contains("STOPPED: interrupted"),
        "{err}"
    );
    assert_eq!(marked(&db).await, 5);
    assert_eq!(queue_state(&queue).await.unwrap().messages, 5);
    db.drop().await;
}
