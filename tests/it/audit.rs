//! The audit trail (issue 19): every run that changes something leaves a start and an end
//! record; dry runs, declines and kill -9 leave theirs; an unwritable log refuses the run;
//! no record holds a password.

use crate::broker::{Broker, ls, table};
use crate::common::{Dialect, Dlq, TestDb, row, unique};
use lapin::BasicProperties;
use lapin::types::FieldTable;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const DLQ: &str = "orders.dlq";
const MAIN: &str = "orders.process";

/// A fresh audit log path in its own temp dir (kept alive by the returned guard).
fn log_path() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("state/audit.ndjson");
    (dir, p)
}

fn records(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("an audit line is JSON"))
        .collect()
}

fn events(recs: &[Value]) -> Vec<&str> {
    recs.iter().map(|r| r["event"].as_str().unwrap()).collect()
}

/// Checks a start/end pair of one run and returns its run id.
fn assert_pair(recs: &[Value], action: &str, source: &str, counts: [u64; 4], exit: u64) -> String {
    assert_eq!(events(recs), ["start", "end"], "{recs:#?}");
    let (start, end) = (&recs[0], &recs[1]);
    for r in recs {
        assert_eq!(r["action"], action);
        assert_eq!(r["source"], source);
        assert_eq!(r["run_id"], start["run_id"]);
        for k in ["at", "user", "host", "location", "selection"] {
            assert!(r[k].as_str().is_some_and(|v| !v.is_empty()), "{k}: {r}");
        }
        assert!(r["argv"].as_array().is_some_and(|a| a.len() > 1), "{r}");
        chrono::DateTime::parse_from_rfc3339(r["at"].as_str().unwrap()).unwrap();
    }
    let [planned, done, failed, skipped] = counts;
    assert_eq!(end["planned"], planned, "{end}");
    assert_eq!(end["done"], done, "{end}");
    assert_eq!(end["failed"], failed, "{end}");
    assert_eq!(end["skipped"], skipped, "{end}");
    assert_eq!(end["exit"], exit, "{end}");
    start["run_id"].as_str().unwrap().to_string()
}

/// A table on SQLite whose replays go to a `celery` queue on a fresh virtual host.
async fn table_setup(prefix: &str, n: usize) -> (Broker, TestDb) {
    let b = Broker::new(prefix).await;
    b.queue("celery", FieldTable::default()).await;
    let mut db = TestDb::new(Dialect::Sqlite, prefix).await;
    db.amqp_url = b.amqp_url();
    db.init();
    db.insert(&crate::common::tagged_rows(n, "audit")).await;
    (b, db)
}

/// `n` dead letters in DLQ that died in MAIN.
async fn fill(b: &Broker, n: usize) {
    b.queue(DLQ, FieldTable::default()).await;
    b.queue(MAIN, FieldTable::default()).await;
    for i in 0..n {
        let props = BasicProperties::default()
            .with_message_id(format!("m-{i}").as_str().into())
            .with_headers(table(vec![
                ("x-first-death-queue", ls(MAIN)),
                ("x-first-death-reason", ls("rejected")),
            ]));
        b.publish(DLQ, format!(r#"{{"i": {i}}}"#).as_bytes(), props)
            .await;
    }
    b.wait_depth(DLQ, n as u32).await;
}

#[tokio::test]
async fn a_table_replay_leaves_a_start_and_an_end_record() {
    let (b, db) = table_setup("audit_table", 4).await;
    // One row that cannot become a Celery message: failed, never sent.
    db.insert(&[row(
        "liberar_acesso_curso",
        Some("42"),
        "IntegrityError",
        "2026-11-30T10:00:00Z",
        false,
    )])
    .await;
    let (_dir, log) = log_path();
    let log_s = log.to_str().unwrap();
    let run = db.dlq(&["replay", "--no-worker-check", "--yes", "--audit-log", log_s]);
    assert_eq!(run.code(), 3, "{}", run.stderr());
    let recs = records(&log);
    // Under --yes the bad row is found when it is sent: planned, then failed.
    let id = assert_pair(&recs, "replay", "table", [5, 4, 1, 0], 3);
    assert_eq!(recs[0]["location"], db.table.as_str());
    assert_eq!(b.depth("celery").await, 4);

    // `dlq audit --run ID -o json`, and --since.
    let audit = |args: &[&str]| {
        Dlq::new()
            .args(&[&["audit", "--audit-log", log_s], args].concat())
            .run()
    };
    let shown = audit(&["--run", &id, "-o", "json"]).json();
    assert_eq!(shown.as_array().unwrap().len(), 2, "{shown}");
    assert_eq!(shown[1]["done"], 4);
    assert_eq!(
        audit(&["--run", "nope", "-o", "json"]).json(),
        Value::Array(vec![])
    );
    assert_eq!(audit(&["--since", "1h", "-o", "ndjson"]).ndjson().len(), 2);
    assert_eq!(
        audit(&["--since", "2099-01-01", "-o", "json"]).json(),
        Value::Array(vec![])
    );
    audit(&["--since", "yesterday-ish"]).fails(2, "--since");
    let table = audit(&[]).ok();
    assert!(table.contains(&id), "{id} not in:\n{table}");
    // The replay id on the message is the run id of the record.
    let snap = b.snapshot("celery").await;
    assert!(snap[0].props.to_string().contains(&id), "{}", snap[0].props);
    db.drop().await;
    b.delete().await;
}

#[tokio::test]
async fn a_queue_replay_is_recorded_planned_and_streamed() {
    let b = Broker::new("audit_queue").await;
    fill(&b, 5).await;
    let (_dir, log) = log_path();
    let log_s = log.to_str().unwrap();
    // Planned (through the gate), then streamed (--yes: no gate).
    b.run(&[
        "replay",
        "-Q",
        DLQ,
        "--yes",
        "--plan-first",
        "--limit",
        "3",
        "--audit-log",
        log_s,
    ])
    .await
    .ok();
    assert_pair(&records(&log), "replay", "queue", [3, 3, 0, 0], 0);
    assert_eq!(records(&log)[0]["planned"], 3);
    std::fs::remove_file(&log).unwrap();
    b.run(&["replay", "-Q", DLQ, "--yes", "--audit-log", log_s])
        .await
        .ok();
    let recs = records(&log);
    assert_pair(&recs, "replay", "queue", [2, 2, 0, 0], 0);
    assert_eq!(recs[0]["location"], DLQ);
    assert_eq!(b.depth(MAIN).await, 5);
    b.delete().await;
}

#[tokio::test]
async fn a_restore_and_an_archive_delete_are_recorded() {
    let (b, db) = table_setup("audit_restore", 3).await;
    let (_dir, log) = log_path();
    let log_s = log.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("a.ndjson");
    let f = f.to_str().unwrap();
    // An archive without --delete changes nothing: not recorded.
    db.dlq(&["archive", "--to", f, "--yes", "--audit-log", log_s])
        .ok();
    assert!(records(&log).is_empty());

    db.dlq(&[
        "replay",
        "--from-file",
        f,
        "--no-worker-check",
        "--yes",
        "--audit-log",
        log_s,
    ])
    .ok();
    let recs = records(&log);
    assert_pair(&recs, "restore", "table", [3, 3, 0, 0], 0);
    assert_eq!(recs[0]["location"], f);
    assert_eq!(b.depth("celery").await, 3);

    std::fs::remove_file(&log).unwrap();
    let g = dir.path().join("b.ndjson");
    let g = g.to_str().unwrap();
    db.dlq(&[
        "archive",
        "--to",
        g,
        "--delete",
        "--yes",
        "--audit-log",
        log_s,
    ])
    .ok();
    let recs = records(&log);
    assert_pair(&recs, "archive", "table", [3, 3, 0, 0], 0);
    assert_eq!(db.scalar_i64("SELECT COUNT(*) FROM {t}").await, 0);
    // A fresh uuid per archive run.
    assert_eq!(recs[0]["run_id"].as_str().unwrap().len(), 36);
    db.drop().await;
    b.delete().await;
}

#[tokio::test]
async fn a_declined_run_and_a_dry_run_are_recorded() {
    let (b, db) = table_setup("audit_declined", 3).await;
    let (_dir, log) = log_path();
    let log_s = log.to_str().unwrap();
    Dlq::new()
        .env("DLQ_DATABASE_URL", &db.url)
        .env("DLQ_TABLE", &db.table)
        .env("DLQ_AMQP_URL", &db.amqp_url)
        .env("DLQ_FORCE_TTY", "1")
        .env("DLQ_AUDIT_LOG", log_s)
        .args(&["replay", "--no-worker-check"])
        .stdin(b"")
        .run()
        .ok();
    db.dlq(&[
        "replay",
        "--no-worker-check",
        "--dry-run",
        "--audit-log",
        log_s,
    ])
    .ok();
    let recs = records(&log);
    assert_eq!(events(&recs), ["declined", "dry-run"], "{recs:#?}");
    assert!(recs.iter().all(|r| r["planned"] == 3), "{recs:#?}");
    assert_ne!(recs[0]["run_id"], recs[1]["run_id"]);
    assert_eq!(b.depth("celery").await, 0);
    db.drop().await;
    b.delete().await;
}

#[tokio::test]
async fn a_run_killed_with_kill_9_leaves_its_start_record() {
    let b = Broker::new("audit_kill").await;
    fill(&b, 300).await;
    let (_dir, log) = log_path();
    let mut child = crate::common::dlq_command()
        .env(
            "XDG_CONFIG_HOME",
            std::env::temp_dir().join("dlq-tests-no-config"),
        )
        .env("DLQ_AMQP_URL", b.amqp_url())
        .args(["replay", "-Q", DLQ, "--yes", "--rate", "20", "--audit-log"])
        .arg(&log)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while b.depth(MAIN).await < 5 {
        assert!(Instant::now() < deadline, "replay made no progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let recs = records(&log);
    assert_eq!(events(&recs), ["start"], "{recs:#?}");
    assert_eq!(recs[0]["action"], "replay");
    b.delete().await;
}

#[tokio::test]
async fn an_unwritable_audit_log_refuses_the_run() {
    let (b, db) = table_setup("audit_unwritable", 3).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    // Its directory is a file: neither the directory nor the log can be created.
    let bad = file.join("audit.ndjson");
    let run = db.dlq(&[
        "replay",
        "--no-worker-check",
        "--yes",
        "--audit-log",
        bad.to_str().unwrap(),
    ]);
    run.fails(1, "audit log");
    assert!(
        run.stderr().contains("nothing was changed"),
        "{}",
        run.stderr()
    );
    assert_eq!(b.depth("celery").await, 0);
    assert_eq!(
        db.scalar_i64("SELECT COUNT(*) FROM {t} WHERE reprocessada_em IS NOT NULL")
            .await,
        0
    );
    // /dev/null on purpose: the run goes ahead.
    db.dlq(&[
        "replay",
        "--no-worker-check",
        "--yes",
        "--audit-log",
        "/dev/null",
    ])
    .ok();
    assert_eq!(b.depth("celery").await, 3);
    db.drop().await;
    b.delete().await;
}

async fn management(method: reqwest::Method, path: &str, body: Option<Value>) {
    let mut req = reqwest::Client::new()
        .request(method, format!("{}/{path}", crate::target::api()))
        .basic_auth("guest", Some("guest"));
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.expect("management API");
    assert!(resp.status().is_success(), "{path}: {}", resp.status());
}

#[tokio::test]
async fn no_audit_record_holds_a_password_given_on_the_command_line() {
    const SECRET: &str = "s3cr3t-audit-pw";
    let b = Broker::new("audit_secret").await;
    fill(&b, 2).await;
    let user = unique("dlq_audit_user");
    let vhost = percent_encoding::utf8_percent_encode(&b.vhost, percent_encoding::NON_ALPHANUMERIC)
        .to_string();
    management(
        reqwest::Method::PUT,
        &format!("users/{user}"),
        Some(serde_json::json!({"password": SECRET, "tags": "management"})),
    )
    .await;
    management(
        reqwest::Method::PUT,
        &format!("permissions/{vhost}/{user}"),
        Some(serde_json::json!({"configure": ".*", "write": ".*", "read": ".*"})),
    )
    .await;
    let (_dir, log) = log_path();
    let url = crate::target::amqp_url_as(&user, SECRET, &vhost);
    let flag = format!("--amqp-url={url}");
    let log_s = log.to_str().unwrap();
    Dlq::new()
        .args(&[
            "replay",
            "-Q",
            DLQ,
            "--yes",
            "--plan-first",
            "--limit",
            "1",
            "--amqp-url",
            &url,
        ])
        .args(&["--audit-log", log_s])
        .run()
        .ok();
    Dlq::new()
        .args(&["replay", "-Q", DLQ, "--yes", &flag, "--audit-log", log_s])
        .run()
        .ok();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains(SECRET), "{text}");
    let recs = records(&log);
    assert_eq!(events(&recs), ["start", "end", "start", "end"], "{text}");
    assert!(text.contains(&format!("{user}:***@")), "{text}");
    assert_eq!(b.depth(MAIN).await, 2, "the runs did work");
    management(reqwest::Method::DELETE, &format!("users/{user}"), None).await;
    b.delete().await;
}
