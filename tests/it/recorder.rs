//! The recorder recipe of examples/celery_recorder, with a stock Celery 5.7 worker: a task
//! whose retries run out (Celery's `autoretry_for`, and `self.retry` by hand) is stored once in
//! the failed-task table, and `dlq replay` runs it once after the fix.

use crate::broker::Broker;
use crate::celery_worker::{CeleryWorker, python};
use crate::common::{Dialect, TestDb, repo_root, unique};
use std::time::{Duration, Instant};

#[tokio::test]
async fn exhausted_retries_are_recorded_and_replayed_once() {
    let db = TestDb::new(Dialect::Sqlite, "recorder").await;
    db.init();
    let b = Broker::new("recorder").await;
    let queue = unique("pagamentos");
    let dir = tempfile::tempdir().unwrap();
    let fail = dir.path().join("fail");
    std::fs::write(&fail, "").unwrap();
    let sqlite = db.url.trim_start_matches("sqlite://").to_string();
    let example = repo_root().join("examples/celery_recorder");
    let url = b.amqp_url();
    let env = [
        ("DLQ_TEST_BROKER", url.as_str()),
        ("DLQ_EXAMPLE_BROKER", url.as_str()),
        ("DLQ_EXAMPLE_SQLITE", sqlite.as_str()),
        ("DLQ_EXAMPLE_TABLE", db.table.as_str()),
        ("DLQ_EXAMPLE_QUEUE", queue.as_str()),
        ("DLQ_EXAMPLE_FAIL", fail.to_str().unwrap()),
        ("PYTHONPATH", example.to_str().unwrap()),
    ];
    let worker = CeleryWorker::start_app("recorder_app", &queue, &env).await;
    let sent = std::process::Command::new(python())
        .args([
            "-c",
            "from recorder_app import *; processar_pagamento.delay(7); enviar_recibo.delay(8, 'a@b.c')",
        ])
        .current_dir(&example)
        .envs(env)
        .output()
        .unwrap();
    assert!(
        sent.status.success(),
        "{}",
        String::from_utf8_lossy(&sent.stderr)
    );

    // Each task is tried 3 times (2 retries), then recorded once.
    let deadline = Instant::now() + Duration::from_secs(60);
    while db.scalar_i64("SELECT COUNT(*) FROM {t}").await < 2 {
        assert!(
            Instant::now() < deadline,
            "no rows recorded:\n{}",
            worker.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rows = db.dlq(&["inspect", "--full", "-o", "json"]).json();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2, "recorded once each: {rows:?}");
    let by_task = |t: &str| {
        rows.iter()
            .find(|r| r["task"] == t)
            .unwrap_or_else(|| panic!("{t}: {rows:?}"))
    };
    let auto = by_task("pagamentos.processar_pagamento");
    assert_eq!(auto["payload"], serde_json::json!([7]));
    assert!(
        auto["motivo"]
            .as_str()
            .unwrap()
            .starts_with("IntegrityError: duplicate key"),
        "{auto}"
    );
    let manual = by_task("pagamentos.enviar_recibo");
    assert_eq!(manual["payload"], serde_json::json!([8, "a@b.c"]));
    assert!(worker.runs().is_empty());

    // The fix: the tasks succeed now, and dlq replays each once.
    std::fs::remove_file(&fail).unwrap();
    let run = crate::common::Dlq::new()
        .env("DLQ_DATABASE_URL", &db.url)
        .env("DLQ_TABLE", &db.table)
        .env("DLQ_AMQP_URL", &url)
        .args(&[
            "replay",
            "--motivo",
            "IntegrityError",
            "--to-queue",
            &queue,
            "--yes",
        ])
        .run();
    run.ok();
    assert!(
        run.stderr().contains("2 replayed, 0 failed"),
        "{}",
        run.stderr()
    );
    let runs = worker.wait_runs(2).await;
    assert_eq!(runs.len(), 2, "each ran once: {runs:?}");
    assert_eq!(
        db.scalar_i64("SELECT COUNT(*) FROM {t} WHERE reprocessada")
            .await,
        2
    );
    assert_eq!(
        db.scalar_i64("SELECT COUNT(*) FROM {t}").await,
        2,
        "no new failure"
    );
    drop(worker);
    b.delete().await;
    db.drop().await;
}
