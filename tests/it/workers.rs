//! The worker check: a replayed Celery task must be run by a live worker, or nothing is sent.
//! Real RabbitMQ, real stock Celery workers (tests/celery/tasks.py registers `tasks.<fn>`,
//! the seed's shape; dlq_test_tasks.py registers bare names).

use crate::broker::Broker;
use crate::celery_worker::{CeleryWorker, queue_state};
use crate::common::{Dialect, TestDb, row, unique};
use lapin::types::FieldTable;
use std::time::Duration;

async fn marked(db: &TestDb) -> i64 {
    db.scalar_i64(
        "SELECT COUNT(*) FROM {t} WHERE reprocessada <> false AND reprocessada IS NOT NULL",
    )
    .await
}

fn seed_rows(n: usize) -> Vec<crate::common::Row> {
    (0..n)
        .map(|i| {
            let args = format!(r#"{{"matricula_id": {i}}}"#);
            row(
                "liberar_acesso_curso",
                Some(&args),
                "IntegrityError: duplicate key",
                "2026-11-30T10:00:00Z",
                false,
            )
        })
        .collect()
}

/// The seed's case: the worker registers `tasks.liberar_acesso_curso`, the rows say
/// `liberar_acesso_curso`. Refused before anything is sent; with --task-map every row runs once.
#[tokio::test]
async fn short_names_are_refused_and_task_map_runs_each_once() {
    // Its own vhost: other tests' workers register the bare names.
    let b = Broker::new("wk_seed").await;
    let mut db = TestDb::new(Dialect::Postgres, "wk_seed").await;
    db.amqp_url = b.amqp_url();
    db.init();
    db.insert(&seed_rows(50)).await;
    let queue = unique("celery_wk_seed");
    let worker =
        CeleryWorker::start_app("tasks", &queue, &[("DLQ_TEST_BROKER", &b.amqp_url())]).await;
    b.wait_queue(&queue).await;

    // Celery's default queue does not exist here: the refusal names what the workers consume.
    let err = db
        .dlq(&["replay", "--yes"])
        .fails(2, "target queue \"celery\" does not exist");
    assert!(
        err.contains(&format!(
            "the live Celery workers consume {queue:?}: pass --to-queue"
        )),
        "{err}"
    );

    let run = db.dlq(&["replay", "--to-queue", &queue, "--yes"]);
    let err = run.fails(2, "liberar_acesso_curso (50 rows)");
    assert!(
        err.contains("did you mean tasks.liberar_acesso_curso"),
        "{err}"
    );
    assert!(
        err.contains("--task-map liberar_acesso_curso=tasks.liberar_acesso_curso"),
        "{err}"
    );
    assert_eq!(marked(&db).await, 0);
    assert_eq!(b.depth(&queue).await, 0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(worker.runs().is_empty());
    assert!(
        !worker.log().contains("unregistered task"),
        "{}",
        worker.log()
    );

    // The dry run runs the check too.
    db.dlq(&["replay", "--to-queue", &queue, "--dry-run"])
        .fails(2, "did you mean tasks.liberar_acesso_curso");

    let map = "liberar_acesso_curso=tasks.liberar_acesso_curso";
    let run = db.dlq(&["replay", "--to-queue", &queue, "--task-map", map, "--yes"]);
    run.ok();
    assert!(
        run.stderr().contains(
            "task liberar_acesso_curso -> tasks.liberar_acesso_curso (50 row(s)): run by"
        ),
        "{}",
        run.stderr()
    );
    assert!(
        run.stderr().contains("50 replayed, 0 failed"),
        "{}",
        run.stderr()
    );
    let runs = worker.wait_runs(50).await;
    assert_eq!(runs.len(), 50, "each row ran exactly once");
    assert!(
        runs.iter()
            .all(|r| r["task"] == "tasks.liberar_acesso_curso")
    );
    let mut ids: Vec<i64> = runs
        .iter()
        .map(|r| r["kwargs"]["matricula_id"].as_i64().unwrap())
        .collect();
    ids.sort();
    assert_eq!(ids, (0..50).collect::<Vec<_>>());
    assert_eq!(marked(&db).await, 50);
    assert!(
        !worker.log().contains("unregistered task"),
        "{}",
        worker.log()
    );
    drop(worker);
    db.drop().await;
    b.delete().await;
}

/// A name registered only by a worker that does not consume the target is refused as such;
/// names with colons and non-ASCII letters are matched exactly.
#[tokio::test]
async fn a_task_registered_only_off_the_target_queue_is_refused() {
    let db = TestDb::new(Dialect::Sqlite, "wk_two").await;
    db.init();
    db.insert(&[row(
        "tasks.enviar_email",
        Some("[1]"),
        "Timeout",
        "2026-11-30T10:00:00Z",
        false,
    )])
    .await;
    let target = unique("celery_wk_target");
    let other = unique("celery_wk_other");
    let on_target = CeleryWorker::start(&target).await; // bare names only
    let off_target = CeleryWorker::start_app("tasks", &other, &[]).await;

    let err = db
        .dlq_root(&["replay", "--to-queue", &target, "--yes"])
        .fails(2, "tasks.enviar_email (1 row)");
    assert!(err.contains("do not consume"), "{err}");
    assert_eq!(marked(&db).await, 0);
    assert_eq!(queue_state(&target).await.unwrap().messages, 0);

    // Sent where the worker that registers it reads: runs.
    db.dlq_root(&["replay", "--to-queue", &other, "--yes"]).ok();
    assert_eq!(off_target.wait_runs(1).await.len(), 1);

    // A name with a colon and unicode, mapped from a stored one.
    db.insert(&[row(
        "confirmar",
        Some("[2]"),
        "KeyError",
        "2026-11-30T10:00:00Z",
        false,
    )])
    .await;
    db.dlq_root(&[
        "replay",
        "--to-queue",
        &other,
        "--task-map",
        "confirmar=matrícula:confirmar",
        "--yes",
    ])
    .ok();
    let runs = off_target.wait_runs(2).await;
    assert!(
        runs.iter().any(|r| r["task"] == "matrícula:confirmar"),
        "{runs:?}"
    );
    assert!(on_target.runs().is_empty());
    drop((on_target, off_target));
    db.drop().await;
}

/// No worker answers (none running; remote control disabled): refused, saying why;
/// --no-worker-check sends anyway.
#[tokio::test]
async fn no_answer_is_refused_unless_no_worker_check() {
    let b = Broker::new("wk_none").await;
    let mut db = TestDb::new(Dialect::Sqlite, "wk_none").await;
    db.amqp_url = b.amqp_url();
    db.init();
    db.insert(&seed_rows(3)).await;
    let queue = "celery";
    b.queue(queue, FieldTable::default()).await;

    let err = db
        .dlq(&["replay", "--worker-timeout", "1s", "--yes"])
        .fails(2, "no Celery worker answered");
    assert!(err.contains("--no-worker-check"), "{err}");
    assert!(err.contains("worker_enable_remote_control=False"), "{err}");
    assert_eq!(b.depth(queue).await, 0);

    // A live worker whose remote control is off is just as silent.
    let worker = CeleryWorker::start_app(
        "tasks",
        queue,
        &[
            ("DLQ_TEST_BROKER", &b.amqp_url()),
            ("DLQ_TEST_NO_REMOTE_CONTROL", "1"),
        ],
    )
    .await;
    db.dlq(&["replay", "--worker-timeout", "1s", "--yes"])
        .fails(2, "no Celery worker answered");
    assert_eq!(marked(&db).await, 0);
    drop(worker);

    let run = db.dlq(&["replay", "--no-worker-check", "--yes"]);
    run.ok();
    assert!(
        run.stderr().contains("worker check skipped"),
        "{}",
        run.stderr()
    );
    assert_eq!(b.depth(queue).await, 3);
    assert_eq!(marked(&db).await, 3);
    db.drop().await;
    b.delete().await;
}

/// `dlq workers` shows what the check sees.
#[tokio::test]
async fn workers_lists_queues_and_tasks() {
    let b = Broker::new("wk_list").await;
    let queue = unique("celery_wk_list");
    let worker =
        CeleryWorker::start_app("tasks", &queue, &[("DLQ_TEST_BROKER", &b.amqp_url())]).await;
    let run = b.run(&["workers", "-o", "json"]).await;
    let v = run.json();
    let list = v.as_array().unwrap();
    assert_eq!(list.len(), 1, "{v}");
    assert_eq!(list[0]["queues"], serde_json::json!([queue]));
    let tasks: Vec<&str> = list[0]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(tasks.contains(&"tasks.liberar_acesso_curso"), "{tasks:?}");
    assert!(!tasks.iter().any(|t| t.starts_with("celery.")), "{tasks:?}");
    let table = b.run(&["workers"]).await;
    assert!(table.ok().contains(&queue));
    drop(worker);
    b.delete().await;
    // A vhost no worker ever used answers nothing, and says so.
    let empty = Broker::new("wk_empty").await;
    let run = empty.run(&["workers", "--worker-timeout", "1s"]).await;
    assert!(
        run.stderr().contains("no Celery worker answered"),
        "{}",
        run.stderr()
    );
    empty.delete().await;
}

/// Every malformed --task-map is a usage error before anything connects.
#[tokio::test]
async fn bad_task_maps_are_usage_errors() {
    let db = TestDb::new(Dialect::Sqlite, "wk_map").await;
    db.init();
    for (maps, needle) in [
        (vec!["noequals"], "noequals"),
        (vec!["=b"], "=b"),
        (vec!["a="], "a="),
        (vec!["a=b", "a=c"], "a"),
    ] {
        let mut args = vec!["replay", "--yes"];
        for m in &maps {
            args.extend(["--task-map", m]);
        }
        let err = db.dlq(&args).fails(2, "--task-map");
        assert!(err.contains(needle), "{maps:?}: {err}");
    }
    db.dlq(&["replay", "--worker-timeout", "0s", "--yes"])
        .fails(2, "--worker-timeout");
    db.drop().await;
}

/// A Celery DLQ: a worker's queue dead-letters rejected tasks and tasks it does not know.
/// Replaying the DLQ moves the task the worker registers; the one it no longer registers
/// stays in the DLQ, reported (exit 3), instead of being discarded again.
#[tokio::test]
async fn queue_replay_keeps_tasks_no_worker_registers() {
    use crate::celery_worker::{connection, declare_queue, delete_queue};
    use lapin::ExchangeKind;
    let queue = unique("celery_wk_dlx");
    let dlx = format!("{queue}.dlx");
    let dlq = format!("{queue}.dlq");
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
    let env = [
        ("DLQ_TEST_DLX", dlx.as_str()),
        ("DLQ_TEST_QUEUE", queue.as_str()),
        ("DLQ_TEST_REJECT_FILE", flag_s.as_str()),
    ];
    let worker = CeleryWorker::start_with(&queue, &env).await;
    // An app sends a task the worker registers (it rejects it while broken) and one it
    // no longer registers (discarded into the DLQ): sent unchecked, as an app would.
    let db = TestDb::new(Dialect::Sqlite, "wk_dlx").await;
    db.init();
    let at = "2026-11-01T00:00:00Z";
    db.insert(&[
        row("rejeitar", Some(r#"{"pedido_id": 1}"#), "x", at, false),
        row(
            "tarefa_removida",
            Some(r#"{"pedido_id": 2}"#),
            "x",
            at,
            false,
        ),
    ])
    .await;
    db.dlq_root(&["replay", "--no-worker-check", "--to-queue", &queue, "--yes"])
        .ok();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while queue_state(&dlq).await.unwrap().messages < 2 {
        assert!(std::time::Instant::now() < deadline, "{}", worker.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    std::fs::remove_file(&flag).unwrap();
    let run = crate::common::Dlq::new()
        .args(&["replay", "-Q", &dlq, "--yes"])
        .run();
    assert_eq!(run.code(), 3, "{}", run.stderr());
    assert!(run.stderr().contains("tarefa_removida"), "{}", run.stderr());
    assert!(run.stderr().contains("left in the DLQ"), "{}", run.stderr());
    let runs = worker.wait_runs(2).await;
    assert_eq!(
        runs.len(),
        2,
        "rejeitar ran twice (rejected, then replayed)"
    );
    assert!(runs.iter().all(|r| r["task"] == "rejeitar"));
    assert_eq!(
        queue_state(&dlq).await.unwrap().messages,
        1,
        "the unknown task stays"
    );
    drop(worker);
    delete_queue(&dlq).await;
    let _ = ch
        .exchange_delete(dlx.as_str().into(), Default::default())
        .await;
}

/// A classic TTL delay in front of the work queue: the message first "died" (expired) in
/// the delay queue, then a consumer rejected it in the work queue. The replay sends it back
/// to the work queue, where it was given up on, not to the delay queue it first died in.
#[tokio::test]
async fn a_delayed_then_rejected_message_goes_back_where_it_was_rejected() {
    use crate::broker::{ls, table};
    use lapin::ExchangeKind;
    use lapin::types::AMQPValue;
    let b = Broker::new("wk_ttl").await;
    b.exchange("to.work", ExchangeKind::Fanout).await;
    b.exchange("to.dlq", ExchangeKind::Fanout).await;
    b.queue("work.dlq", FieldTable::default()).await;
    b.bind("work.dlq", "to.dlq", "").await;
    b.queue(
        "work",
        table(vec![("x-dead-letter-exchange", ls("to.dlq"))]),
    )
    .await;
    b.bind("work", "to.work", "").await;
    b.queue(
        "delay",
        table(vec![
            ("x-dead-letter-exchange", ls("to.work")),
            ("x-message-ttl", AMQPValue::LongInt(50)),
        ]),
    )
    .await;
    b.publish(
        "delay",
        br#"{"pedido": 1}"#,
        lapin::BasicProperties::default(),
    )
    .await;
    b.wait_depth("work", 1).await;
    b.reject("work", 1).await;
    b.wait_depth("work.dlq", 1).await;
    let run = b.run(&["replay", "-Q", "work.dlq", "--yes"]).await;
    run.ok();
    b.wait_depth("work", 1).await;
    assert_eq!(
        b.depth("delay").await,
        0,
        "not sent to the queue it first died in"
    );
    assert_eq!(b.depth("work.dlq").await, 0);
    b.delete().await;
}

/// An app with its own `control_exchange` (several apps on one vhost): its workers answer
/// on `loja.pidbox`, so dlq sees them only with `--control-exchange loja`, and says which
/// mailbox it asked when nobody answered.
#[tokio::test]
async fn a_custom_control_exchange_is_asked_when_named() {
    let b = Broker::new("wk_ctl").await;
    let queue = unique("celery_wk_ctl");
    let env = [
        ("DLQ_TEST_BROKER", b.amqp_url()),
        ("DLQ_TEST_CONTROL_EXCHANGE", "loja".to_string()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let worker = CeleryWorker::start_app("tasks", &queue, &env).await;
    let run = b.run(&["workers", "--worker-timeout", "1s"]).await;
    let err = run.stderr();
    assert!(
        err.contains("no Celery worker answered")
            && err.contains("celery.pidbox")
            && err.contains("--control-exchange"),
        "{err}"
    );
    let v = b
        .run(&["workers", "--control-exchange", "loja", "-o", "json"])
        .await
        .json();
    let list = v.as_array().unwrap();
    assert_eq!(list.len(), 1, "{v}");
    assert_eq!(list[0]["queues"], serde_json::json!([queue]));
    drop(worker);
    b.delete().await;
}
