//! Table replay when the database or the broker goes away mid-run: it stops, reports,
//! leaves every unconfirmed row un-marked, exits non-zero, and a re-run finishes the job
//! with duplicates only within the documented window.

use crate::celery_worker::*;
use crate::common::*;
use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const WINDOW: usize = 4;

/// The replay every test here runs: the 340 IntegrityError rows to `queue`.
fn replay_args(queue: &str) -> [&str; 7] {
    [
        "replay",
        "--no-worker-check",
        "--motivo",
        "IntegrityError",
        "--to-queue",
        queue,
        "--yes",
    ]
}

fn spawn_replay(db: &TestDb, queue: &str, rate: u32) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_dlq"))
        .env_remove("DLQ_CONFIG")
        .envs(crate::target::dlq_env())
        .env(
            "XDG_CONFIG_HOME",
            std::env::temp_dir().join("dlq-tests-no-config"),
        )
        .env("DLQ_DATABASE_URL", &db.url)
        .env("DLQ_TABLE", &db.table)
        .args(replay_args(queue))
        .args(["--rate", &rate.to_string()])
        .args(["--window", &WINDOW.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

async fn marked(db: &TestDb) -> i64 {
    db.scalar_i64("SELECT COUNT(*) FROM {t} WHERE reprocessada")
        .await
}

/// Every row published at least once, duplicates at most `allowed`.
fn check_messages(queue_msgs: &[lapin::message::BasicGetMessage], rows: usize, allowed: usize) {
    let mut per_row: BTreeMap<String, usize> = BTreeMap::new();
    for m in queue_msgs {
        *per_row
            .entry(header_str(&m.delivery.properties, "dlq-replay-of").unwrap())
            .or_default() += 1;
    }
    assert_eq!(per_row.len(), rows, "every row was published");
    let dups: usize = per_row.values().map(|n| n - 1).sum();
    assert!(
        dups <= allowed,
        "{dups} duplicates, more than the window {allowed}"
    );
}

async fn wait_until_some_marked(db: &TestDb) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while marked(db).await < 40 {
        assert!(Instant::now() < deadline, "replay made no progress");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// After a fault stopped a replay of the 340 rows part-way: every marked row was published,
/// unmarked-but-published rows stay within the window, and a re-run finishes the job.
async fn stopped_part_way_then_completes(db: &TestDb, queue: &str) {
    let after = marked(db).await;
    assert!(after < 340, "the fault came too late to test anything");
    let published = queue_state(queue).await.unwrap().messages as i64;
    // Marked implies confirmed; an unconfirmed publish may or may not have landed.
    assert!(
        published >= after,
        "every marked row was published first: {published} vs {after}"
    );
    assert!(
        published <= after + WINDOW as i64,
        "unmarked but published rows stay within the window: {published} vs {after}"
    );
    db.dlq_root(&replay_args(queue)).ok();
    assert_eq!(marked(db).await, 340);
    check_messages(&drain(queue).await, 340, WINDOW);
    delete_queue(queue).await;
}

#[tokio::test]
async fn database_connection_killed_mid_replay() {
    let db = TestDb::with_rows(Dialect::Postgres, "fault_pg", &scenario2()[..340]).await;
    let queue = unique("fault_pg_q");
    declare_queue(&queue).await;
    let mut child = spawn_replay(&db, &queue, 150);
    let pid = child.id();
    wait_until_some_marked(&db).await;
    // Every 50 ms until dlq ends: a kill that finds the connection idle in dlq's pool is
    // repaired unseen (the pool opens another), one mid-statement stops the run.
    while child.try_wait().unwrap().is_none() {
        db.exec(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'dlq-{pid}'"
        ))
        .await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("STOPPED") && stderr.contains("database"),
        "{stderr}"
    );
    stopped_part_way_then_completes(&db, &queue).await;
    db.drop().await;
}

/// Closes this dlq process's AMQP connection through the management API.
pub async fn close_broker_connection(pid: u32) {
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let conns: serde_json::Value = http
            .get(format!("{}/connections", crate::target::api()))
            .basic_auth("guest", Some("guest"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let ours: Vec<String> = conns
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| {
                c["client_properties"]["connection_name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(&format!("dlq-{pid} ")))
            })
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect();
        if !ours.is_empty() {
            for name in ours {
                let url = format!("{}/connections/{}", crate::target::api(), urlencode(&name));
                http.delete(url)
                    .basic_auth("guest", Some("guest"))
                    .send()
                    .await
                    .unwrap();
            }
            return;
        }
        // Connection stats reach the API a little late.
        assert!(
            Instant::now() < deadline,
            "dlq's connection never showed up in the management API"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn urlencode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

#[tokio::test]
async fn broker_connection_closed_mid_replay() {
    let db = TestDb::with_rows(Dialect::MySql, "fault_mq", &scenario2()[..340]).await;
    let queue = unique("fault_mq_q");
    declare_queue(&queue).await;
    // Slow enough that the management API (stats every few seconds) lists the connection.
    let child = spawn_replay(&db, &queue, 30);
    let pid = child.id();
    wait_until_some_marked(&db).await;
    close_broker_connection(pid).await;
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("STOPPED") && stderr.contains("broker"),
        "{stderr}"
    );
    stopped_part_way_then_completes(&db, &queue).await;
    db.drop().await;
}

#[tokio::test]
async fn kill_9_mid_table_replay() {
    let db = TestDb::with_rows(Dialect::Postgres, "fault_kill", &scenario2()[..340]).await;
    let queue = unique("fault_kill_q");
    declare_queue(&queue).await;
    let mut child = spawn_replay(&db, &queue, 150);
    wait_until_some_marked(&db).await;
    child.kill().unwrap();
    child.wait().unwrap();
    stopped_part_way_then_completes(&db, &queue).await;
    db.drop().await;
}
