//! Faults that stop shared services (the broker application, the database server). They
//! would break every other test running at the same time, so they are ignored by default
//! and run alone: `.ci/run` gives each its own nextest run, with the services brought up
//! before it; by hand, `cargo nextest run --run-ignored only -j 1`.

use crate::broker::{Broker, ls, table};
use crate::celery_worker::*;
use crate::common::*;
use lapin::BasicProperties;
use lapin::types::FieldTable;
use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const WINDOW: usize = 8;

fn sh(cmd: &str) {
    assert!(try_sh(cmd), "`{cmd}` failed");
}

fn try_sh(cmd: &str) -> bool {
    Command::new("bash")
        .args(["-c", cmd])
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Every wait on a service or on dlq ends well before nextest's five-minute limit: a test
/// killed there would leave the service stopped for the tests after it.
const LIMIT: Duration = Duration::from_secs(90);

/// A shared service a test stopped. `start` brings it back and checks it came back; if the
/// test fails first, dropping it brings the service back anyway, so one failure never takes
/// the broker or the database from the tests that run after it.
struct Stopped {
    start: fn() -> Result<(), String>,
    started: bool,
}

impl Stopped {
    /// The guard exists before the stop is asked for: a stop that fails or hangs half-way
    /// is undone too.
    fn rabbit() -> Stopped {
        let guard = Stopped {
            start: rabbit_start,
            started: false,
        };
        sh(&format!(
            "timeout 90 {} -q stop_app",
            crate::target::rabbitmqctl()
        ));
        guard
    }

    fn postgres() -> Stopped {
        let guard = Stopped {
            start: postgres_start,
            started: false,
        };
        sh(&format!("timeout 90 {PG_CTL} stop -m fast"));
        guard
    }

    fn start(mut self) {
        self.started = true;
        if let Err(e) = (self.start)() {
            panic!("{e}");
        }
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        if !self.started
            && let Err(e) = (self.start)()
        {
            eprintln!("could not bring the service back: {e}");
        }
    }
}

const PG_CTL: &str =
    "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql | head -n1) main";

fn rabbit_start() -> Result<(), String> {
    let ctl = crate::target::rabbitmqctl();
    if !try_sh(&format!(
        "timeout 90 {ctl} -q start_app && {ctl} -q await_startup --timeout 90"
    )) {
        return Err("RabbitMQ did not start again".into());
    }
    // The management API and the listeners come up a moment after the app.
    let overview = format!(
        "curl -fsS -u guest:guest {}/overview >/dev/null",
        crate::target::api()
    );
    wait_until("the management API", || try_sh(&overview))
}

fn postgres_start() -> Result<(), String> {
    if !try_sh(&format!("timeout 90 {PG_CTL} start")) {
        return Err("PostgreSQL did not start again".into());
    }
    wait_until("PostgreSQL", || try_sh("pg_isready -h 127.0.0.1 -q"))
}

fn wait_until(what: &str, up: impl Fn() -> bool) -> Result<(), String> {
    let deadline = Instant::now() + LIMIT;
    while !up() {
        if Instant::now() > deadline {
            return Err(format!("{what} did not come back within {LIMIT:?}"));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    Ok(())
}

/// dlq's exit once the service under it stopped: it must notice and stop, within `LIMIT`.
/// A dlq still running then is killed and the test fails (the service is brought back by
/// the `Stopped` guard as the panic unwinds).
fn exited(child: std::process::Child, why: &str) -> std::process::Output {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    match rx.recv_timeout(LIMIT) {
        Ok(out) => out.expect("wait dlq"),
        Err(_) => {
            let stacks = thread_stacks(pid);
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            let stderr = rx
                .recv()
                .ok()
                .and_then(Result::ok)
                .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                .unwrap_or_default();
            let lines: Vec<&str> = stderr.lines().collect();
            let tail = &lines[lines.len().saturating_sub(30)..];
            panic!(
                "dlq was still running {LIMIT:?} after {why}; its last lines:\n{}\nits threads:\n{stacks}",
                tail.join("\n")
            );
        }
    }
}

fn dlq_child(env: &[(&str, &str)], args: &[&str]) -> std::process::Child {
    let mut c = crate::common::dlq_command();
    c.env(
        "XDG_CONFIG_HOME",
        std::env::temp_dir().join("dlq-tests-no-config"),
    );
    for (k, v) in env {
        c.env(k, v);
    }
    // -vv: a queue replay's stage lines say where a run that does not stop was waiting.
    c.arg("-vv")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

async fn seeded_table(prefix: &str, n: usize) -> TestDb {
    let rows: Vec<Row> = (0..n)
        .map(|i| {
            row(
                "processar_pagamento",
                Some(&format!(r#"{{"pedido_id": {i}}}"#)),
                "IntegrityError",
                "2026-10-01T00:00:00Z",
                false,
            )
        })
        .collect();
    TestDb::with_rows(Dialect::Postgres, prefix, &rows).await
}

async fn marked(db: &TestDb) -> i64 {
    db.scalar_i64("SELECT COUNT(*) FROM {t} WHERE reprocessada")
        .await
}

async fn wait_marked(db: &TestDb, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while marked(db).await < n {
        assert!(Instant::now() < deadline, "no progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every row published at least once, duplicates within the window.
async fn check_table_messages(queue: &str, rows: usize) {
    let mut per_row: BTreeMap<String, usize> = BTreeMap::new();
    for m in drain(queue).await {
        *per_row
            .entry(header_str(&m.delivery.properties, "dlq-replay-of").unwrap())
            .or_default() += 1;
    }
    assert_eq!(per_row.len(), rows, "every row was published");
    let dups: usize = per_row.values().map(|n| n - 1).sum();
    assert!(dups <= WINDOW, "{dups} duplicates > window {WINDOW}");
}

fn replay_args(queue: &str) -> Vec<String> {
    [
        "replay",
        "--no-worker-check",
        "--to-queue",
        queue,
        "--yes",
        "--rate",
        "100",
        "--window",
        &WINDOW.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

#[tokio::test]
#[ignore = "stops the shared RabbitMQ; run alone with --run-ignored only -j 1"]
async fn broker_restarted_mid_table_replay() {
    let db = seeded_table("disr_mq", 1500).await;
    let queue = unique("disr_mq_q");
    declare_queue(&queue).await;
    let args = replay_args(&queue);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let child = dlq_child(
        &[("DLQ_DATABASE_URL", &db.url), ("DLQ_TABLE", &db.table)],
        &args,
    );
    wait_marked(&db, 100).await;
    let stopped = Stopped::rabbit();
    let out = exited(child, "the broker stopped");
    stopped.start();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = marked(&db).await;
    assert!(after < 1500);
    let published = queue_state(&queue).await.unwrap().messages as i64;
    assert!(
        published >= after && published <= after + WINDOW as i64,
        "{published} vs {after}"
    );
    db.dlq_root(&["replay", "--no-worker-check", "--to-queue", &queue, "--yes"])
        .ok();
    assert_eq!(marked(&db).await, 1500);
    check_table_messages(&queue, 1500).await;
    delete_queue(&queue).await;
    db.drop().await;
}

#[tokio::test]
#[ignore = "stops the shared PostgreSQL; run alone with --run-ignored only -j 1"]
async fn database_stopped_mid_table_replay() {
    let db = seeded_table("disr_pg", 1500).await;
    let queue = unique("disr_pg_q");
    declare_queue(&queue).await;
    let args = replay_args(&queue);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let child = dlq_child(
        &[("DLQ_DATABASE_URL", &db.url), ("DLQ_TABLE", &db.table)],
        &args,
    );
    wait_marked(&db, 100).await;
    let before_stop = marked(&db).await;
    let stopped = Stopped::postgres();
    let out = exited(child, "the database stopped");
    stopped.start();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("database"), "{stderr}");
    // The test's own pool died with the server: a fresh one.
    let mut db2 = db;
    db2.reconnect().await;
    let after = marked(&db2).await;
    assert!(after >= before_stop && after < 1500);
    let published = queue_state(&queue).await.unwrap().messages as i64;
    assert!(
        published >= after && published <= after + WINDOW as i64,
        "{published} vs {after}"
    );
    db2.dlq_root(&["replay", "--no-worker-check", "--to-queue", &queue, "--yes"])
        .ok();
    assert_eq!(marked(&db2).await, 1500);
    check_table_messages(&queue, 1500).await;
    delete_queue(&queue).await;
    db2.drop().await;
}

#[tokio::test]
#[ignore = "stops the shared RabbitMQ; run alone with --run-ignored only -j 1"]
async fn broker_restarted_mid_queue_replay() {
    let mut b = Broker::new("disr-queue").await;
    let (dlq, main) = ("restart.dlq", "restart.process");
    b.queue(dlq, FieldTable::default()).await;
    b.queue(main, FieldTable::default()).await;
    let n = 1500;
    for i in 0..n {
        let props = BasicProperties::default()
            .with_message_id(format!("m-{i}").as_str().into())
            .with_delivery_mode(2)
            .with_headers(table(vec![("x-first-death-queue", ls(main))]));
        b.publish(dlq, format!("{{\"i\": {i}}}").as_bytes(), props)
            .await;
    }
    let url = b.amqp_url();
    let child = dlq_child(
        &[("DLQ_AMQP_URL", &url)],
        &[
            "replay",
            "--no-worker-check",
            "-Q",
            dlq,
            "--yes",
            "--rate",
            "100",
            "--window",
            &WINDOW.to_string(),
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while b.depth(main).await < 100 {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stopped = Stopped::rabbit();
    let out = exited(child, "the broker stopped");
    stopped.start();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    b.reconnect().await;
    // Durable queues and persistent messages survive the restart: nothing lost.
    let ids = |snap: Vec<crate::broker::Snap>| {
        snap.into_iter()
            .map(|s| s.props["message_id"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    let (in_dlq, in_main) = (ids(b.snapshot(dlq).await), ids(b.snapshot(main).await));
    let mut all: BTreeMap<String, usize> = BTreeMap::new();
    for id in in_dlq.iter().chain(&in_main) {
        *all.entry(id.clone()).or_default() += 1;
    }
    assert_eq!(all.len(), n, "nothing lost");
    assert!(all.values().map(|c| c - 1).sum::<usize>() <= WINDOW);
    b.run(&["replay", "--no-worker-check", "-Q", dlq, "--yes"])
        .await
        .ok();
    b.wait_depth(dlq, 0).await;
    let moved = ids(b.snapshot(main).await);
    let distinct: std::collections::BTreeSet<&String> = moved.iter().collect();
    assert_eq!(distinct.len(), n);
    assert!(moved.len() - n <= WINDOW);
    b.delete().await;
}
