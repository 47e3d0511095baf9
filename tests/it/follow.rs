//! `dlq replay --follow`: every replayed task followed to its outcome through Celery's task
//! events, with stock Celery workers (tests/celery/follow_tasks.py) on RabbitMQ (a vhost of the
//! test's own) and on Redis (a key prefix of the test's own). The tasks' args decide their
//! outcome: `falhar` fails again with IntegrityError, `tentar_de_novo` retries once then
//! succeeds, `dormir` sleeps.

use crate::broker::Broker;
use crate::celery_worker::{CeleryWorker, Events};
use crate::common::*;
use crate::target::redis_url;
use serde_json::Value;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const APP: &str = "follow_tasks";

fn pedido(id: i64, extra: &str) -> Row {
    let args = format!(r#"{{"pedido_id": {id}{extra}}}"#);
    row(
        "processar_pagamento",
        Some(&args),
        "IntegrityError: duplicate key",
        "2026-12-01T10:00:00Z",
        false,
    )
}

/// Rows 1-4 succeed, 5-6 fail again, 7 retries once then succeeds.
fn mixed() -> Vec<Row> {
    let mut rows: Vec<Row> = (1..=4).map(|i| pedido(i, "")).collect();
    rows.push(pedido(5, r#", "falhar": true"#));
    rows.push(pedido(6, r#", "falhar": true"#));
    rows.push(pedido(7, r#", "tentar_de_novo": true"#));
    rows
}

async fn pending_ids(db: &TestDb) -> BTreeSet<i64> {
    let mut ids = BTreeSet::new();
    for id in 1..=20 {
        let n = db
            .scalar_i64(&format!(
                "SELECT COUNT(*) FROM {{t}} WHERE id = {id} AND (reprocessada = false OR reprocessada IS NULL)"
            ))
            .await;
        if n > 0 {
            ids.insert(id);
        }
    }
    ids
}

/// A RabbitMQ vhost of the test's own, a table, and a worker reading `queue` with `events`.
async fn rabbit_setup(
    name: &str,
    rows: &[Row],
    events: Events,
) -> (Broker, TestDb, CeleryWorker, String) {
    let b = Broker::new(name).await;
    let mut db = TestDb::new(Dialect::Postgres, name).await;
    db.amqp_url = b.amqp_url();
    db.init();
    db.insert(rows).await;
    let queue = unique(name);
    let env = [("DLQ_TEST_BROKER", b.amqp_url())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let worker = CeleryWorker::start_events(APP, &queue, &env, events).await;
    b.wait_queue(&queue).await;
    (b, db, worker, queue)
}

/// Some tasks fail again: the report splits them by outcome and fingerprint, names the row
/// each came from, exits 3, and `--mark-on-success` leaves exactly those rows pending. The
/// workers had task events on (-E): dlq does not turn them off at the end.
#[tokio::test]
async fn failed_again_stay_pending_and_are_named_on_rabbitmq() {
    let (b, db, worker, queue) = rabbit_setup("fw_mixed", &mixed(), Events::Task).await;
    let args = [
        "replay",
        "--to-queue",
        &queue,
        "--follow",
        "--enable-events",
        "--mark-on-success",
        "--follow-timeout",
        "60s",
        "--yes",
        "-o",
        "json",
    ];
    let audit = tempfile::tempdir().unwrap();
    let log = audit.path().join("audit.ndjson");
    let run = Dlq::new()
        .env("DLQ_DATABASE_URL", &db.url)
        .env("DLQ_TABLE", &db.table)
        .env("DLQ_AMQP_URL", &db.amqp_url)
        .env("DLQ_AUDIT_LOG", log.to_str().unwrap())
        .args(&args)
        .run();
    assert_eq!(run.code(), 3, "{}", run.stderr());
    let report: Value = serde_json::from_str(&run.stdout()).unwrap();
    let f = &report["follow"];
    assert_eq!(f["followed"], 7, "{f}");
    assert_eq!(f["succeeded"], 5, "{f}");
    assert_eq!(f["failed"], 2, "{f}");
    assert_eq!(f["retried"], 1, "{f}");
    assert_eq!(f["not_seen"], 0, "{f}");
    let tasks = f["tasks"].as_array().unwrap();
    let failed: BTreeSet<i64> = tasks
        .iter()
        .filter(|t| t["outcome"] == "failed")
        .map(|t| t["from"].as_i64().unwrap())
        .collect();
    assert_eq!(failed, BTreeSet::from([5, 6]));
    assert!(
        f["failures"][0]["example"]
            .as_str()
            .unwrap()
            .contains("IntegrityError"),
        "{f}"
    );
    // Each task went out with its own id, and that id is what the worker ran.
    let runs = worker.wait_runs(8).await;
    let ran: BTreeSet<&str> = runs
        .iter()
        .map(|r| r["task_id"].as_str().unwrap())
        .collect();
    let followed: BTreeSet<&str> = tasks
        .iter()
        .map(|t| t["task_id"].as_str().unwrap())
        .collect();
    assert_eq!(ran, followed);
    assert_eq!(pending_ids(&db).await, BTreeSet::from([5, 6]));
    let err = run.stderr();
    assert!(err.contains("row 5 → task "), "{err}");
    assert!(
        err.contains("failed again: IntegrityError('duplicate key value pedido_id=5')"),
        "{err}"
    );
    assert!(
        err.contains("followed 7: 5 succeeded, 2 failed again"),
        "{err}"
    );
    assert!(
        !worker.log().contains("disabled by remote"),
        "{}",
        worker.log()
    );
    // The audit trail's end record carries the totals.
    let trail = std::fs::read_to_string(&log).unwrap();
    let end: Value = trail
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|r| r["event"] == "end")
        .unwrap_or_else(|| panic!("no end record:\n{trail}"));
    assert_eq!(end["outcomes"]["failed"], 2, "{end}");
    assert_eq!(end["outcomes"]["succeeded"], 5, "{end}");
    assert_eq!(end["exit"], 3, "{end}");
    drop(worker);
    db.drop().await;
    b.delete().await;
}

/// Without `--mark-on-success` rows are marked at the broker's confirm, as before; a task
/// slower than `--follow-timeout` is reported unfinished and the exit is 3.
#[tokio::test]
async fn a_slow_task_is_reported_unfinished_when_the_timeout_passes() {
    // Far longer than dlq's run takes even on a loaded machine: dlq must end while it sleeps.
    let rows = [pedido(1, r#", "dormir": 60"#)];
    let (b, db, worker, queue) = rabbit_setup("fw_slow", &rows, Events::Task).await;
    let run = db.dlq(&[
        "replay",
        "--to-queue",
        &queue,
        "--follow",
        "--enable-events",
        "--follow-timeout",
        "2s",
        "--yes",
        "-o",
        "json",
    ]);
    assert_eq!(run.code(), 3, "{}", run.stderr());
    // dlq did not wait for the task: it had started and not finished when dlq ended.
    assert_eq!(worker.wait_runs(1).await.len(), 1);
    assert!(
        !worker.log().contains("succeeded in"),
        "waited for the slow task:\n{}",
        worker.log()
    );
    let report: Value = serde_json::from_str(&run.stdout()).unwrap();
    let f = &report["follow"];
    // A solo worker sends its buffered task events only between tasks: the sleeping one is
    // "not seen" there (a prefork worker says "started").
    let late = f["unfinished"].as_u64().unwrap() + f["not_seen"].as_u64().unwrap();
    assert_eq!((f["succeeded"].as_u64(), late), (Some(0), 1), "{f}");
    assert!(
        f["stopped"]
            .as_str()
            .unwrap()
            .contains("--follow-timeout 2s"),
        "{f}"
    );
    assert!(run.stderr().contains("row 1 → task "), "{}", run.stderr());
    assert!(pending_ids(&db).await.is_empty(), "marked at the confirm");
    drop(worker);
    db.drop().await;
    b.delete().await;
}

/// A worker that sends no events at all cannot be followed, even with --enable-events:
/// refused before anything is sent.
#[tokio::test]
async fn a_worker_without_events_is_refused_before_anything_is_sent() {
    let (b, db, worker, queue) = rabbit_setup("fw_off", &mixed(), Events::Off).await;
    let run = db.dlq(&[
        "replay",
        "--to-queue",
        &queue,
        "--follow",
        "--enable-events",
        "--yes",
    ]);
    let err = run.fails(2, "send no events at all");
    assert!(err.contains("nothing was sent"), "{err}");
    assert_eq!(b.depth(&queue).await, 0);
    assert_eq!(pending_ids(&db).await.len(), 7);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(worker.runs().is_empty());
    drop(worker);
    db.drop().await;
    b.delete().await;
}

/// One test's corner of the shared Redis.
struct RedisSpace {
    prefix: String,
    queue: String,
}

impl RedisSpace {
    fn dlq(&self, db: &TestDb, args: &[&str]) -> Run {
        Dlq::new()
            .env("DLQ_DATABASE_URL", &db.url)
            .env("DLQ_TABLE", &db.table)
            .env("DLQ_BROKER_URL", &redis_url())
            .env("DLQ_REDIS_KEY_PREFIX", &self.prefix)
            .args(args)
            .run()
    }

    async fn clean(&self) {
        let mut c = redis::Client::open(redis_url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}*", self.prefix))
            .query_async(&mut c)
            .await
            .unwrap();
        for k in keys {
            let _: () = redis::cmd("DEL").arg(k).query_async(&mut c).await.unwrap();
        }
    }

    async fn waiting(&self) -> i64 {
        let mut c = redis::Client::open(redis_url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        redis::cmd("LLEN")
            .arg(format!("{}{}", self.prefix, self.queue))
            .query_async(&mut c)
            .await
            .unwrap()
    }
}

/// On Redis, with Celery's default worker (task events off): `--follow` alone refuses before
/// anything is sent; `--enable-events` turns them on for the run and off again after (the
/// worker's own log says both), every task is followed to success and every row marked.
#[tokio::test]
async fn enable_events_turns_them_on_and_off_again_on_redis() {
    let db = TestDb::with_rows(Dialect::Sqlite, "fw_redis", &mixed()[..4]).await;
    let space = RedisSpace {
        prefix: format!("{}:", unique("dlqt_fw")),
        queue: unique("fw_redis"),
    };
    let url = redis_url();
    let env = [
        ("DLQ_TEST_BROKER", url.as_str()),
        ("DLQ_TEST_KEYPREFIX", space.prefix.as_str()),
    ];
    let worker = CeleryWorker::start_events(APP, &space.queue, &env, Events::WorkerOnly).await;

    let follow = ["replay", "--to-queue", &space.queue, "--follow", "--yes"];
    let err = space.dlq(&db, &follow).fails(2, "--enable-events");
    assert!(err.contains("cannot tell whether worker(s)"), "{err}");
    assert_eq!(space.waiting().await, 0);
    assert_eq!(pending_ids(&db).await.len(), 4);

    let run = space.dlq(
        &db,
        &[
            "replay",
            "--to-queue",
            &space.queue,
            "--follow",
            "--enable-events",
            "--mark-on-success",
            "--yes",
        ],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    assert!(
        run.stderr().contains("followed 4: 4 succeeded"),
        "{}",
        run.stderr()
    );
    assert!(pending_ids(&db).await.is_empty());
    assert_eq!(worker.wait_runs(4).await.len(), 4);
    let log = worker.log();
    assert!(
        log.contains("Events of group {task} enabled by remote"),
        "{log}"
    );
    assert!(
        log.contains("Events of group {task} disabled by remote"),
        "{log}"
    );
    drop(worker);
    space.clean().await;
    db.drop().await;
}

/// The canary decides from its tasks' outcomes: the first task fails again, so the rest are
/// never sent and stay pending.
#[tokio::test]
async fn a_followed_canary_stops_on_its_tasks_failure() {
    let mut rows = vec![pedido(1, r#", "falhar": true"#)];
    rows.extend((2..=5).map(|i| pedido(i, "")));
    let (b, db, worker, queue) = rabbit_setup("fw_canary", &rows, Events::Task).await;
    let run = db.dlq(&[
        "replay",
        "--to-queue",
        &queue,
        "--follow",
        "--enable-events",
        "--canary",
        "1",
        "--canary-wait",
        "30s",
        "--yes",
    ]);
    let err = run.stderr();
    assert_ne!(run.code(), 0, "{err}");
    assert!(
        err.contains("canary failed: 1 of 1 canary task(s) did not succeed"),
        "{err}"
    );
    assert_eq!(worker.wait_runs(1).await.len(), 1, "only the canary ran");
    assert_eq!(pending_ids(&db).await, BTreeSet::from([2, 3, 4, 5]));
    drop(worker);
    db.drop().await;
    b.delete().await;
}

/// dlq killed while following: what was sent stays sent and ran; rows are as the README says
/// (marked at the confirm without `--mark-on-success`; pending with it, so a new run replays
/// them again).
#[tokio::test]
async fn killed_mid_follow_loses_nothing() {
    let rows = [pedido(1, r#", "dormir": 4"#), pedido(2, r#", "dormir": 4"#)];
    let (b, db, worker, queue) = rabbit_setup("fw_kill", &rows, Events::Task).await;
    let mut child = dlq_command()
        .env("DLQ_DATABASE_URL", &db.url)
        .env("DLQ_TABLE", &db.table)
        .env("DLQ_AMQP_URL", &db.amqp_url)
        .env(
            "XDG_CONFIG_HOME",
            std::env::temp_dir().join("dlq-tests-no-config"),
        )
        .args([
            "replay",
            "--to-queue",
            &queue,
            "--follow",
            "--enable-events",
            "--mark-on-success",
            "--yes",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Until dlq says it follows both: both were sent and confirmed, and neither can have
    // succeeded yet (each sleeps 4 s). Waiting for the first task to run instead killed dlq
    // before it had sent the second, once, under CI's load.
    let said = said_until(&mut child, "following 2 task(s)", Duration::from_secs(60));
    child.kill().unwrap();
    let _ = child.wait();
    let runs: Vec<Value> = worker.wait_runs(2).await;
    assert_eq!(runs.len(), 2, "both sent tasks ran once; dlq said:\n{said}");
    assert_eq!(
        pending_ids(&db).await,
        BTreeSet::from([1, 2]),
        "not marked: no success seen"
    );
    drop(worker);
    db.drop().await;
    b.delete().await;
}

/// Reads `child`'s stderr until a line contains `line`; what it said so far. Fails with that
/// if the child ends first or `limit` passes.
fn said_until(child: &mut std::process::Child, line: &str, limit: Duration) -> String {
    use std::io::BufRead;
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(l).is_err() {
                return;
            }
        }
    });
    let deadline = Instant::now() + limit;
    let mut said = String::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => {
                said += &l;
                said.push('\n');
                if l.contains(line) {
                    return said;
                }
            }
            Err(e) => panic!("no {line:?} from dlq ({e}); it said:\n{said}"),
        }
    }
}

/// An archive of table rows restored with `--follow`: each task followed to its outcome, the
/// one that fails again named by its archived record; a re-run sends nothing (the journal).
#[tokio::test]
async fn a_followed_restore_names_what_failed_again() {
    let rows = [
        pedido(1, ""),
        pedido(2, ""),
        pedido(3, r#", "falhar": true"#),
    ];
    let (b, db, worker, queue) = rabbit_setup("fw_restore", &rows, Events::Task).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rows.ndjson");
    let f = file.to_str().unwrap();
    db.dlq(&["archive", "--to", f, "--delete", "--yes"]).ok();
    assert_eq!(db.scalar_i64("SELECT COUNT(*) FROM {t}").await, 0);
    let restore = [
        "replay",
        "--from-file",
        f,
        "--to-queue",
        &queue,
        "--follow",
        "--enable-events",
        "--yes",
    ];
    let run = db.dlq(&restore);
    assert_eq!(run.code(), 3, "{}", run.stderr());
    let err = run.stderr();
    assert!(
        err.contains("followed 3: 2 succeeded, 1 failed again"),
        "{err}"
    );
    assert!(err.contains("archived record 3 → task "), "{err}");
    assert!(
        err.contains("IntegrityError('duplicate key value pedido_id=3')"),
        "{err}"
    );
    assert_eq!(worker.wait_runs(3).await.len(), 3);
    let again = db.dlq(&restore);
    assert_eq!(again.code(), 0, "{}", again.stderr());
    assert!(
        again.stderr().contains("nothing to replay"),
        "{}",
        again.stderr()
    );
    assert_eq!(worker.runs().len(), 3);
    // --mark-on-success has no rows to mark on a restore: refused before anything is sent.
    let err = db
        .dlq(&[
            "replay",
            "--from-file",
            f,
            "--follow",
            "--mark-on-success",
            "--yes",
        ])
        .fails(2, "--mark-on-success applies to table replays");
    assert!(!err.contains("Plan:"), "{err}");
    drop(worker);
    db.drop().await;
    b.delete().await;
}

/// A queue replay of plain messages with `--follow`: the DLQ is watched for the copies this
/// run replayed; the two a consumer rejects again are named with the reason, the two left in
/// their queue are "not back", and the exit is 3.
#[tokio::test]
async fn plain_messages_that_die_again_are_named() {
    let (b, dlq, main) = plain_dead_letters("fw_plain", 4).await;
    let args = [
        "replay",
        "-Q",
        dlq,
        "--follow",
        "--follow-timeout",
        "6s",
        "--yes",
        "-o",
        "json",
    ];
    let run = {
        let d = b.dlq().args(&args);
        tokio::task::spawn_blocking(move || d.run())
    };
    // The replayed copies reach their queue; a consumer rejects two of them again.
    b.wait_depth(main, 4).await;
    b.reject(main, 2).await;
    let run = run.await.unwrap();
    assert_eq!(run.code(), 3, "{}", run.stderr());
    let report: Value = serde_json::from_str(&run.stdout()).unwrap();
    let f = &report["follow"];
    assert_eq!(
        (
            f["followed"].as_u64(),
            f["failed"].as_u64(),
            f["not_back"].as_u64()
        ),
        (Some(4), Some(2), Some(2)),
        "{f}"
    );
    let back: Vec<&Value> = f["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["outcome"] == "failed")
        .collect();
    assert!(
        back.iter()
            .all(|t| t["exception"] == "dead-lettered again: rejected"),
        "{f}"
    );
    assert!(run.stderr().contains("message m-0 → "), "{}", run.stderr());
    assert_eq!(b.depth(dlq).await, 2);
    assert_eq!(b.depth(main).await, 2);
    b.delete().await;
}

/// A queue replay of Celery task messages with `--follow`: each is followed by its own task
/// id through the worker's events. While the bug is there the task is rejected again
/// (Celery 5.7 reports a `Reject` as a failure) and is back in the DLQ: exit 3; once fixed
/// it succeeds: exit 0.
#[tokio::test]
async fn celery_messages_in_a_dlq_are_followed_by_their_task_id() {
    use crate::celery_worker::{declare_queue, delete_queue, queue_state};
    let queue = unique("fw_celery_dlx");
    let (dlx, dlq) = (format!("{queue}.dlx"), format!("{queue}.dlq"));
    let c = crate::celery_worker::connection().await;
    let ch = c.create_channel().await.unwrap();
    let fanout = lapin::ExchangeKind::Fanout;
    ch.exchange_declare(
        dlx.as_str().into(),
        fanout,
        Default::default(),
        Default::default(),
    )
    .await
    .unwrap();
    declare_queue(&dlq).await;
    ch.queue_bind(
        dlq.as_str().into(),
        dlx.as_str().into(),
        "".into(),
        Default::default(),
        Default::default(),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let flag = dir.path().join("still-broken");
    std::fs::write(&flag, "").unwrap();
    let env = [
        ("DLQ_TEST_DLX", dlx.as_str()),
        ("DLQ_TEST_QUEUE", queue.as_str()),
        ("DLQ_TEST_REJECT_FILE", flag.to_str().unwrap()),
    ];
    let worker = CeleryWorker::start_events("dlq_test_tasks", &queue, &env, Events::Task).await;
    let db = TestDb::with_rows(
        Dialect::Sqlite,
        "fw_celery_dlx",
        &[row(
            "rejeitar",
            Some(r#"{"pedido_id": 77}"#),
            "x",
            "2026-11-01T00:00:00Z",
            false,
        )],
    )
    .await;
    db.dlq_root(&["replay", "--to-queue", &queue, "--yes"]).ok();
    let deadline = Instant::now() + Duration::from_secs(30);
    while queue_state(&dlq).await.unwrap().messages < 1 {
        assert!(Instant::now() < deadline, "{}", worker.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let follow = [
        "replay",
        "-Q",
        &dlq,
        "--follow",
        "--enable-events",
        "--follow-timeout",
        "30s",
        "--yes",
        "-o",
        "json",
    ];
    let still = Dlq::new().args(&follow).run();
    assert_eq!(still.code(), 3, "{}", still.stderr());
    let report: Value = serde_json::from_str(&still.stdout()).unwrap();
    let t = &report["follow"]["tasks"][0];
    assert_eq!(t["outcome"], "failed", "{report}");
    assert_eq!(t["task"], "rejeitar");
    let first_id = worker.runs()[0]["task_id"].clone();
    assert_eq!(
        t["task_id"], first_id,
        "followed by the message's own task id"
    );
    while queue_state(&dlq).await.unwrap().messages < 1 {
        assert!(
            Instant::now() < deadline + Duration::from_secs(30),
            "{}",
            worker.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    std::fs::remove_file(&flag).unwrap();
    let fixed = Dlq::new().args(&follow).run();
    assert_eq!(fixed.code(), 0, "{}", fixed.stderr());
    assert!(
        fixed.stderr().contains("followed 1: 1 succeeded"),
        "{}",
        fixed.stderr()
    );
    assert_eq!(worker.wait_runs(3).await.len(), 3);
    assert_eq!(queue_state(&dlq).await.unwrap().messages, 0);
    drop(worker);
    delete_queue(&dlq).await;
    let _ = ch
        .exchange_delete(dlx.as_str().into(), Default::default())
        .await;
    db.drop().await;
}

/// A followed canary on a queue replay: its one message is rejected again within the wait,
/// so the run stops and the rest never leave the DLQ.
#[tokio::test]
async fn a_followed_queue_canary_stops_when_its_message_dies_again() {
    let (b, dlq, main) = plain_dead_letters("fw_qcanary", 3).await;
    let args = [
        "replay",
        "-Q",
        dlq,
        "--follow",
        "--canary",
        "1",
        "--canary-wait",
        "4s",
        "--yes",
    ];
    let run = {
        let d = b.dlq().args(&args);
        tokio::task::spawn_blocking(move || d.run())
    };
    // The canary's copy reaches its queue (the rest stay held in the DLQ meanwhile).
    let deadline = Instant::now() + Duration::from_secs(30);
    while b.depth(main).await == 0 && !run.is_finished() {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let depth = b.depth(main).await;
    if depth != 1 {
        let run = run.await.unwrap();
        panic!("{depth} in {main}:\n{}", run.stderr());
    }
    b.reject(main, 1).await;
    let run = run.await.unwrap();
    let err = run.stderr();
    assert_eq!(run.code(), 1, "{err}");
    assert!(
        err.contains("canary failed: 1 of 1 canary message(s) did not succeed"),
        "{err}"
    );
    b.wait_depth(dlq, 3).await;
    assert_eq!(b.depth(main).await, 0);
    b.delete().await;
}

/// A vhost of the test's own with `n` plain dead letters (ids `m-0` ..., rejected from
/// `main`) in `dlq`: (broker, dlq, main).
async fn plain_dead_letters(tag: &str, n: usize) -> (Broker, &'static str, &'static str) {
    use crate::broker::{ls, table};
    let b = Broker::new(tag).await;
    let (dlx, dlq, main) = ("p.dlx", "p.dlq", "p.main");
    b.exchange(dlx, lapin::ExchangeKind::Fanout).await;
    b.queue(dlq, Default::default()).await;
    b.bind(dlq, dlx, "").await;
    b.queue(main, table(vec![("x-dead-letter-exchange", ls(dlx))]))
        .await;
    for i in 0..n {
        let id = format!("m-{i}");
        let props = lapin::BasicProperties::default().with_message_id(id.as_str().into());
        b.publish(main, format!("{{\"n\": {i}}}").as_bytes(), props)
            .await;
    }
    b.reject(main, n).await;
    b.wait_depth(dlq, n as u32).await;
    (b, dlq, main)
}
