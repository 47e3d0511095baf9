//! `--transform JQ` (issue 15): dead letters edited on their way back, on a real broker and
//! a real Celery worker.

use crate::broker::{Broker, ls, table};
use crate::celery_worker::CeleryWorker;
use crate::common::{Dialect, TestDb, row, unique};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, ExchangeKind};
use serde_json::{Value, json};

const MAIN: &str = "matriculas.processar";
const DLQ: &str = "matriculas.dlq";
const RENAME: &str = ".payload.usuario_id = .payload.usuario | del(.payload.usuario)";

/// The seed's scenario 1: an old producer renamed `usuario_id` to `usuario`; every such
/// event died with KeyError. `n` dead letters, every fifth with the renamed field.
async fn scenario1(b: &Broker, n: usize) {
    b.exchange("matriculas.dlx", ExchangeKind::Fanout).await;
    b.queue(DLQ, FieldTable::default()).await;
    b.bind(DLQ, "matriculas.dlx", "").await;
    b.queue(
        MAIN,
        table(vec![("x-dead-letter-exchange", ls("matriculas.dlx"))]),
    )
    .await;
    for i in 0..n {
        let (body, err) = if i % 5 == 0 {
            (json!({"usuario": i, "curso": 3}), "KeyError: 'usuario_id'")
        } else {
            (json!({"usuario_id": i, "curso": 3}), "ValueError: bad cpf")
        };
        let props = BasicProperties::default()
            .with_message_id(format!("m-{i}").as_str().into())
            .with_content_type("application/json".into())
            .with_headers(table(vec![
                ("x-exception-message", ls(err)),
                ("tenant", ls("escola-1")),
            ]));
        b.publish(MAIN, body.to_string().as_bytes(), props).await;
    }
    b.reject(MAIN, n).await;
    b.wait_depth(DLQ, n as u32).await;
}

fn body(s: &crate::broker::Snap) -> Value {
    serde_json::from_slice(&s.body).unwrap()
}

fn header<'a>(s: &'a crate::broker::Snap, k: &str) -> &'a Value {
    &s.props["headers"][k]
}

#[tokio::test]
async fn scenario1_the_keyerror_messages_go_back_fixed() {
    let b = Broker::new("tr_s1").await;
    scenario1(&b, 50).await;
    let run = b
        .run(&[
            "replay",
            "-Q",
            DLQ,
            "--motivo",
            "KeyError",
            "--transform",
            RENAME,
            "--dry-run",
        ])
        .await;
    run.ok();
    assert!(
        run.stderr().contains("changes 10 of 10 message(s)"),
        "{}",
        run.stderr()
    );
    assert!(
        run.stderr()
            .contains(r#"{"usuario":0,"curso":3} -> {"usuario_id":0,"curso":3}"#),
        "{}",
        run.stderr()
    );
    assert_eq!(b.depth(DLQ).await, 50, "a dry run moves nothing");

    let run = b
        .run(&[
            "replay",
            "-Q",
            DLQ,
            "--motivo",
            "KeyError",
            "--transform",
            RENAME,
            "--yes",
        ])
        .await;
    run.ok();
    let fixed = b.snapshot(MAIN).await;
    assert_eq!(fixed.len(), 10);
    for (k, s) in fixed.iter().enumerate() {
        let i = k * 5;
        assert_eq!(body(s), json!({"curso": 3, "usuario_id": i}));
        assert_eq!(
            header(s, "dlq-transformed-from"),
            &json!(["S", format!("m-{i}")])
        );
        assert_eq!(
            header(s, "tenant"),
            &json!(["S", "escola-1"]),
            "headers kept"
        );
        assert_ne!(
            s.props["message_id"],
            json!(format!("m-{i}")),
            "a new message"
        );
        assert_eq!(header(s, "dlq-transform")[1].as_str().unwrap().len(), 64);
    }
    // The 40 others untouched and in order.
    let rest = b.snapshot(DLQ).await;
    let ids: Vec<i64> = rest
        .iter()
        .map(|s| body(s)["usuario_id"].as_i64().unwrap())
        .collect();
    let expected: Vec<i64> = (0..50).filter(|i| i % 5 != 0).collect();
    assert_eq!(ids, expected);
    b.delete().await;
}

/// A program that fails on some records leaves those in the DLQ (exit 3); one that does not
/// compile moves nothing (exit 2); reserved headers cannot be set.
#[tokio::test]
async fn failing_programs_leave_their_records_where_they_are() {
    let b = Broker::new("tr_fail").await;
    scenario1(&b, 10).await;
    b.run(&["replay", "-Q", DLQ, "--transform", ".payload |||", "--yes"])
        .await
        .fails(2, "invalid --transform jq program");
    assert_eq!(b.depth(DLQ).await, 10);
    let reserved = r#".headers["x-exception-message"] = "fixed""#;
    let run = b
        .run(&["replay", "-Q", DLQ, "--transform", reserved, "--yes"])
        .await;
    assert_eq!(run.code(), 3, "{}", run.stderr());
    assert!(
        run.stderr().contains("may not set header"),
        "{}",
        run.stderr()
    );
    assert_eq!(b.depth(DLQ).await, 10);
    let partial = r#"if .payload.usuario == 0 then error("boom") else .headers.fixed = "yes" end"#;
    let run = b
        .run(&["replay", "-Q", DLQ, "--transform", partial, "--yes"])
        .await;
    assert_eq!(run.code(), 3, "{}", run.stderr());
    assert_eq!(
        b.depth(DLQ).await,
        1,
        "the record the program failed on stays"
    );
    let moved = b.snapshot(MAIN).await;
    assert_eq!(moved.len(), 9);
    for s in &moved {
        assert_eq!(header(s, "fixed"), &json!(["S", "yes"]), "{}", s.props);
    }
    b.delete().await;
}

/// A table replay whose transform changes an argument: a stock worker runs every task once
/// with the new value; the stored rows keep their args.
#[tokio::test]
async fn table_rows_go_as_transformed_tasks() {
    let db = TestDb::new(Dialect::Postgres, "tr_table").await;
    db.init();
    let at = "2026-11-30T10:00:00Z";
    db.insert(&[
        row(
            "liberar_acesso_curso",
            Some(r#"{"usuario": 1}"#),
            "KeyError",
            at,
            false,
        ),
        row(
            "liberar_acesso_curso",
            Some(r#"{"usuario": 2}"#),
            "KeyError",
            at,
            false,
        ),
    ])
    .await;
    let queue = unique("celery_tr");
    let worker = CeleryWorker::start(&queue).await;
    db.dlq_root(&[
        "replay",
        "--to-queue",
        &queue,
        "--transform",
        RENAME,
        "--yes",
    ])
    .ok();
    let runs = worker.wait_runs(2).await;
    assert_eq!(runs.len(), 2);
    let mut got: Vec<Value> = runs.iter().map(|r| r["kwargs"].clone()).collect();
    got.sort_by_key(|v| v["usuario_id"].as_i64());
    assert_eq!(
        got,
        vec![json!({"usuario_id": 1}), json!({"usuario_id": 2})]
    );
    let kept = db
        .scalar_i64(
            "SELECT COUNT(*) FROM {t} WHERE args::text LIKE '%\"usuario\"%' AND reprocessada",
        )
        .await;
    assert_eq!(kept, 2, "rows keep their args and are marked");
    let _ = AMQPValue::Void;
    drop(worker);
    db.drop().await;
}

/// The table canary: a task that still fails (its error handler stores it again) stops the
/// run after N rows, the rest untouched; once fixed, the canary passes and the rest follow.
#[tokio::test]
async fn the_table_canary_stops_while_the_task_still_fails() {
    let db = TestDb::new(Dialect::Sqlite, "tr_canary").await;
    db.init();
    let at = "2026-11-30T10:00:00Z";
    let rows: Vec<_> = (0..5)
        .map(|i| {
            let args = format!(r#"{{"pedido": {i}}}"#);
            row("falha_e_registra", Some(&args), "IntegrityError", at, false)
        })
        .collect();
    db.insert(&rows).await;
    let dir = tempfile::tempdir().unwrap();
    let flag = dir.path().join("still-broken");
    std::fs::write(&flag, "").unwrap();
    let path = db.url.trim_start_matches("sqlite://").to_string();
    let queue = unique("celery_canary");
    let worker = CeleryWorker::start_with(
        &queue,
        &[
            ("DLQ_TEST_SQLITE", path.as_str()),
            ("DLQ_TEST_TABLE", db.table.as_str()),
            ("DLQ_TEST_FAIL_FILE", flag.to_str().unwrap()),
        ],
    )
    .await;
    let canary = [
        "replay",
        "--to-queue",
        &queue,
        "--canary",
        "2",
        "--canary-wait",
        "4s",
        "--yes",
    ];
    let run = db.dlq_root(&canary);
    assert_eq!(run.code(), 1, "{}", run.stderr());
    assert!(
        run.stderr().contains("canary failed: 2 of 2"),
        "{}",
        run.stderr()
    );
    // Not "run the same command again": that would fail the same way.
    assert!(
        run.stderr().contains("fix the cause") && !run.stderr().contains("same command again"),
        "{}",
        run.stderr()
    );
    assert_eq!(worker.runs().len(), 2);
    let pending = "SELECT COUNT(*) FROM {t} WHERE reprocessada = 0";
    assert_eq!(
        db.scalar_i64(pending).await,
        3 + 2,
        "3 untouched, 2 stored again"
    );

    std::fs::remove_file(&flag).unwrap();
    let run = db.dlq_root(&canary);
    run.ok();
    assert!(
        run.stderr().contains("none failed again"),
        "{}",
        run.stderr()
    );
    assert_eq!(worker.wait_runs(7).await.len(), 7);
    assert_eq!(db.scalar_i64(pending).await, 0);
    drop(worker);
    db.drop().await;
}

/// A restore from an archive takes --transform too: archived rows go as edited tasks.
#[tokio::test]
async fn a_restore_sends_transformed_records() {
    let b = Broker::new("tr_restore").await;
    b.queue("celery", FieldTable::default()).await;
    let mut db = TestDb::new(Dialect::Sqlite, "tr_restore").await;
    db.amqp_url = b.amqp_url();
    db.init();
    let at = "2026-11-30T10:00:00Z";
    db.insert(&[row("t", Some(r#"{"usuario": 9}"#), "KeyError", at, false)])
        .await;
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("a.ndjson");
    let f = f.to_str().unwrap();
    db.dlq(&["archive", "--to", f, "--yes"]).ok();
    db.dlq(&[
        "replay",
        "--from-file",
        f,
        "--no-worker-check",
        "--transform",
        RENAME,
        "--yes",
    ])
    .ok();
    let sent = b.snapshot("celery").await;
    assert_eq!(sent.len(), 1);
    let body: Value = serde_json::from_slice(&sent[0].body).unwrap();
    assert_eq!(body[1], json!({"usuario_id": 9}), "{body}");
    db.drop().await;
    b.delete().await;
}

/// The canary on a restore of archived rows: stops while the task still fails, then, fixed,
/// restores the rest (the journal skips what the canary already sent).
#[tokio::test]
async fn the_restore_canary_stops_while_the_task_still_fails() {
    let db = TestDb::new(Dialect::Sqlite, "tr_rcanary").await;
    db.init();
    let at = "2026-11-30T10:00:00Z";
    let rows: Vec<_> = (0..4)
        .map(|i| {
            let args = format!(r#"{{"pedido": {i}}}"#);
            row("falha_e_registra", Some(&args), "IntegrityError", at, false)
        })
        .collect();
    db.insert(&rows).await;
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("a.ndjson");
    let f = f.to_str().unwrap().to_string();
    db.dlq(&["archive", "--to", &f, "--yes"]).ok();
    let flag = dir.path().join("still-broken");
    std::fs::write(&flag, "").unwrap();
    let path = db.url.trim_start_matches("sqlite://").to_string();
    let queue = unique("celery_rcanary");
    let worker = CeleryWorker::start_with(
        &queue,
        &[
            ("DLQ_TEST_SQLITE", path.as_str()),
            ("DLQ_TEST_TABLE", db.table.as_str()),
            ("DLQ_TEST_FAIL_FILE", flag.to_str().unwrap()),
        ],
    )
    .await;
    let canary = [
        "replay",
        "--from-file",
        &f,
        "--to-queue",
        &queue,
        "--canary",
        "1",
        "--canary-wait",
        "4s",
        "--yes",
    ];
    let run = db.dlq_root(&canary);
    assert_eq!(run.code(), 1, "{}", run.stderr());
    assert!(
        run.stderr().contains("canary failed: 1 of 1"),
        "{}",
        run.stderr()
    );
    assert_eq!(worker.runs().len(), 1);
    std::fs::remove_file(&flag).unwrap();
    db.dlq_root(&canary).ok();
    assert_eq!(
        worker.wait_runs(4).await.len(),
        4,
        "one canary each time, then the rest"
    );
    drop(worker);
    db.drop().await;
}
