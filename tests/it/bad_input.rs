//! Bad input: every case gets a clear message naming what is wrong, the right exit code, and
//! changes nothing (the table's rows and flags, and the target queue, are checked after each).

use crate::broker::Broker;
use crate::celery_worker::*;
use crate::common::*;
use lapin::types::FieldTable;

/// A snapshot of everything a wrong command could have changed.
async fn snapshot(db: &TestDb, queue: &str) -> (i64, i64, u32) {
    (
        db.scalar_i64("SELECT COUNT(*) FROM {t}").await,
        db.scalar_i64("SELECT COUNT(*) FROM {t} WHERE reprocessada")
            .await,
        queue_state(queue).await.map(|s| s.messages).unwrap_or(0),
    )
}

struct Case {
    args: Vec<String>,
    code: i32,
    needle: &'static str,
}

fn case(args: &[&str], code: i32, needle: &'static str) -> Case {
    Case {
        args: args.iter().map(|s| s.to_string()).collect(),
        code,
        needle,
    }
}

#[tokio::test]
async fn thirty_bad_inputs_change_nothing() {
    let db = TestDb::with_rows(Dialect::Postgres, "bad", &scenario2()[..60]).await;
    let queue = unique("bad_q");
    declare_queue(&queue).await;
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("a.ndjson");
    db.dlq_root(&["archive", "--to", archive.to_str().unwrap()])
        .ok();
    let text = std::fs::read_to_string(&archive).unwrap();
    let truncated = dir.path().join("truncated.ndjson");
    std::fs::write(
        &truncated,
        text.lines().take(5).collect::<Vec<_>>().join("\n") + "\n",
    )
    .unwrap();
    let tampered = dir.path().join("tampered.ndjson");
    std::fs::write(
        &tampered,
        text.replacen("processar_pagamento", "processar_pagamentX", 1),
    )
    .unwrap();
    let bad_cfg = dir.path().join("bad.toml");
    std::fs::write(&bad_cfg, "databse_url = \"postgres://x\"\n").unwrap();
    let q = queue.as_str();
    let (t, tp) = (truncated.to_str().unwrap(), tampered.to_str().unwrap());
    let (bc, ar) = (bad_cfg.to_str().unwrap(), archive.to_str().unwrap());
    let http_url = format!("http://guest:guest@{}/", crate::target::amqp_addr());
    let wrong_password = crate::target::amqp_url_as("guest", "Wr0ngPass", "%2f");
    let no_vhost = crate::target::amqp_url("no-such-vhost");
    let cases = vec![
        // URLs
        case(
            &["--database-url", "localhost/db", "list"],
            2,
            "invalid database URL",
        ),
        case(
            &["--database-url", "oracle://u:p@h/db", "list"],
            2,
            "unsupported scheme",
        ),
        case(
            &["--database-url", "postgres:///db", "list"],
            2,
            "missing host",
        ),
        case(
            &["--database-url", "sqlite://", "list"],
            2,
            "missing file path",
        ),
        case(
            &[
                "--amqp-url",
                "amqp//nohost",
                "replay",
                "--no-worker-check",
                "--to-queue",
                q,
                "--yes",
            ],
            2,
            "invalid AMQP URL",
        ),
        case(
            &[
                "--amqp-url",
                &http_url,
                "replay",
                "--no-worker-check",
                "--to-queue",
                q,
                "--yes",
            ],
            2,
            "scheme must be amqp",
        ),
        case(
            &["--management-url", "ftp://h", "list"],
            2,
            "invalid management URL",
        ),
        // Wrong credentials / vhost: runtime failures, nothing replayed.
        case(
            &[
                "--amqp-url",
                &wrong_password,
                "replay",
                "--no-worker-check",
                "--to-queue",
                q,
                "--yes",
            ],
            1,
            "refused the login",
        ),
        case(
            &[
                "--amqp-url",
                &no_vhost,
                "replay",
                "--no-worker-check",
                "--to-queue",
                q,
                "--yes",
            ],
            2,
            "virtual host \"no-such-vhost\" does not exist",
        ),
        // Table names are identifiers, validated and quoted.
        case(
            &["--table", "tasks; DROP TABLE x", "list"],
            2,
            "invalid table name",
        ),
        case(&["--table", "t\"x", "list"], 2, "invalid table name"),
        case(&["--table", "a.b.c", "list"], 2, "invalid table name"),
        case(&["--table", "no_such_table_here", "list"], 2, "not found"),
        // Selection values
        case(&["inspect", "-e", "[a-"], 2, "invalid --pattern regex"),
        case(&["inspect", "--where", "map(."], 2, "invalid --where jq"),
        case(&["inspect", "--where", "undefined_fn"], 2, "undefined"),
        case(&["inspect", "--older-than", "5 days"], 2, "--older-than"),
        case(&["inspect", "--older-than", "10x"], 2, "unknown unit"),
        case(
            &["inspect", "--since", "yesterday-ish"],
            2,
            "--since: invalid time",
        ),
        case(
            &["inspect", "--until", "2026-02-30"],
            2,
            "--until: invalid time",
        ),
        case(
            &["inspect", "--since", "2026-11-02", "--until", "2026-11-01"],
            2,
            "empty time window",
        ),
        case(
            &["inspect", "--limit", "0"],
            2,
            "--limit must be at least 1",
        ),
        case(&["inspect", "--limit", "-3"], 2, "unexpected argument"),
        case(
            &["inspect", "--motivo", ""],
            2,
            "--motivo must not be empty",
        ),
        case(&["inspect", "--id", "abc"], 2, "is an integer"),
        // Conflicting flags
        case(
            &["inspect", "--include-replayed", "--only-replayed"],
            2,
            "cannot be used with",
        ),
        case(
            &[
                "replay",
                "--no-worker-check",
                "--to-queue",
                q,
                "--to-exchange",
                "x",
                "--yes",
            ],
            2,
            "cannot be used with",
        ),
        case(
            &["replay", "--no-worker-check", "--to-exchange", "x", "--yes"],
            2,
            "--to-exchange needs --routing-key",
        ),
        case(
            &["replay", "--no-worker-check", "--routing-key", "k", "--yes"],
            2,
            "--to-exchange",
        ),
        case(
            &["filter", "--count", "--group-by", "day"],
            2,
            "cannot be used with",
        ),
        case(
            &["browse", "--refresh", "xyz"],
            2,
            "--refresh: invalid duration",
        ),
        case(
            &["browse", "--worker-timeout", "0s"],
            2,
            "--worker-timeout must be a positive duration",
        ),
        case(
            &[
                "replay",
                "--no-worker-check",
                "--to-queue",
                q,
                "--rate",
                "0",
                "--yes",
            ],
            2,
            "--rate must be a positive",
        ),
        case(
            &[
                "replay",
                "--no-worker-check",
                "--to-queue",
                q,
                "--rate=-5",
                "--yes",
            ],
            2,
            "--rate must be a positive",
        ),
        case(
            &[
                "replay",
                "--no-worker-check",
                "--to-queue",
                q,
                "--window",
                "0",
                "--yes",
            ],
            2,
            "--window must be at least 1",
        ),
        case(
            &[
                "replay",
                "--no-worker-check",
                "--canary",
                "0",
                "--to-queue",
                q,
                "--yes",
            ],
            2,
            "--canary must be at least 1",
        ),
        case(
            &[
                "replay",
                "--no-worker-check",
                "--plan-first",
                "--to-queue",
                q,
                "--yes",
            ],
            2,
            "--plan-first applies to queue replays",
        ),
        case(
            &[
                "replay",
                "--no-worker-check",
                "--from-file",
                ar,
                "-Q",
                q,
                "--yes",
            ],
            2,
            "cannot be combined with -Q",
        ),
        // Targets
        case(
            &[
                "replay",
                "--no-worker-check",
                "--to-queue",
                "dlq-no-such-queue-anywhere",
                "--yes",
            ],
            2,
            "does not exist",
        ),
        case(
            &[
                "replay",
                "--no-worker-check",
                "--to-exchange",
                "dlq-no-such-exchange",
                "--routing-key",
                "k",
                "--yes",
            ],
            2,
            "does not exist",
        ),
        // No confirmation possible
        case(
            &["replay", "--no-worker-check", "--to-queue", q],
            2,
            "refusing to act without confirmation",
        ),
        case(
            &["archive", "--to", &format!("{ar}.2"), "--delete"],
            2,
            "refusing to act without confirmation",
        ),
        case(
            &["archive", "--to", "-", "--delete", "--yes"],
            2,
            "stdout cannot be fsynced",
        ),
        case(&["archive", "--to", ar, "--yes"], 2, "already exists"),
        // Archives
        case(
            &[
                "replay",
                "--no-worker-check",
                "--from-file",
                t,
                "--to-queue",
                q,
                "--yes",
            ],
            2,
            "end marker is missing",
        ),
        case(
            &[
                "replay",
                "--no-worker-check",
                "--from-file",
                tp,
                "--to-queue",
                q,
                "--yes",
            ],
            2,
            "checksum mismatch",
        ),
        case(
            &[
                "replay",
                "--no-worker-check",
                "--from-file",
                "/nonexistent/archive.ndjson",
                "--to-queue",
                q,
                "--yes",
            ],
            2,
            "cannot open archive",
        ),
        // Config
        case(&["--config", bc, "list"], 2, "unknown field"),
        case(&["--profile", "nope", "list"], 2, "unknown profile"),
    ];
    assert!(cases.len() >= 30);
    let before = snapshot(&db, &queue).await;
    for c in &cases {
        let args: Vec<&str> = c.args.iter().map(String::as_str).collect();
        let run = db.dlq_root(&args);
        let err = run.fails(c.code, c.needle);
        assert!(!err.contains("Wr0ngPass"), "password leaked: {err}");
        assert_eq!(
            snapshot(&db, &queue).await,
            before,
            "{args:?} changed something"
        );
    }
    // SQL-looking values are only ever data: they match nothing and harm nothing.
    for args in [
        vec![
            "filter",
            "--count",
            "--motivo",
            "'; DELETE FROM tasks_falhadas; --",
        ],
        vec!["filter", "--count", "--task", "x' OR '1'='1"],
        vec!["filter", "--count", "--motivo", "%' OR 1=1 --", "-i"],
    ] {
        assert_eq!(db.dlq_root(&args).ok().trim(), "0", "{args:?}");
    }
    assert_eq!(snapshot(&db, &queue).await, before);
    delete_queue(&queue).await;
    db.drop().await;
}

/// Rows whose args cannot become a task are refused one by one and stay un-marked; the
/// rest are replayed (exit 3).
#[tokio::test]
async fn hostile_args_are_refused_per_row() {
    let db = TestDb::new(Dialect::Sqlite, "bad_args").await;
    // A table whose args column is plain text, so anything can be stored in it.
    db.exec(
        "CREATE TABLE {t} (id INTEGER PRIMARY KEY, task_original TEXT, args TEXT, motivo TEXT, criada_em TEXT, reprocessada INTEGER NOT NULL DEFAULT 0)",
    )
    .await;
    let deep = "[".repeat(300) + &"]".repeat(300);
    let huge = format!("{{\"blob\": \"{}\"}}", "x".repeat(17 * 1024 * 1024));
    let big_int = format!("[{}]", "9".repeat(5000));
    let rows: Vec<(&str, String)> = vec![
        ("ok", r#"{"a": 1}"#.into()),
        ("not_json", "this is not json".into()),
        ("scalar", "42".into()),
        ("string", r#""text""#.into()),
        ("deep", deep),
        ("huge", huge),
        ("big_int", big_int),
        (
            "bad_marker",
            r#"{"when": {"__type__": "datetime", "__value__": "not a date"}}"#.into(),
        ),
        (
            "unknown_marker",
            r#"{"x": {"__type__": "pickle", "__value__": "gASV"}}"#.into(),
        ),
    ];
    for (name, args) in &rows {
        let sql = format!(
            "INSERT INTO {{t}} (task_original, args, motivo, criada_em) VALUES ('agendar_aula', '{}', '{name}', '2026-11-01T00:00:00Z')",
            args.replace('\'', "''")
        );
        db.exec(&sql).await;
    }
    let queue = unique("bad_args_q");
    declare_queue(&queue).await;
    let run = db.dlq_root(&[
        "replay",
        "--no-worker-check",
        "--to-queue",
        &queue,
        "--yes",
        "-o",
        "json",
    ]);
    assert_eq!(run.code(), 3, "{}", run.stderr());
    let report: serde_json::Value = serde_json::from_str(run.stdout().trim()).unwrap();
    assert_eq!(report["succeeded"], 1);
    assert_eq!(report["failed_count"], 8);
    assert_eq!(queue_state(&queue).await.unwrap().messages, 1);
    assert_eq!(
        db.scalar_i64("SELECT COUNT(*) FROM {t} WHERE reprocessada = 1")
            .await,
        1
    );
    assert_eq!(
        db.scalar_i64("SELECT COUNT(*) FROM {t} WHERE reprocessada = 1 AND motivo = 'ok'")
            .await,
        1
    );
    delete_queue(&queue).await;
}

/// A column with the wrong type is named, before anything is read.
#[tokio::test]
async fn wrong_column_types_are_named() {
    let db = TestDb::new(Dialect::Postgres, "bad_types").await;
    db.exec("CREATE TABLE {t} (id BIGSERIAL PRIMARY KEY, task_original TEXT, args JSONB, motivo TEXT, criada_em TIMESTAMPTZ, reprocessada TEXT)").await;
    db.dlq_root(&["list"])
        .fails(2, "column reprocessada has type text, expected boolean");
    db.drop().await;
}

/// Hostile headers on dead letters: malformed `x-death` of every wrong type, non-UTF-8 and
/// deeply nested headers. Reading never crashes and leaves the queue as it was; a replay
/// refuses what has no usable origin and moves the rest, leaving the refused in the DLQ.
#[tokio::test]
async fn hostile_headers_are_read_and_refused_safely() {
    use crate::broker::{Broker, ls, table};
    use lapin::types::{AMQPValue, FieldArray, LongString};
    let b = Broker::new("hostile").await;
    let (dlq, main) = ("h.dlq", "h.main");
    b.queue(dlq, lapin::types::FieldTable::default()).await;
    b.queue(main, lapin::types::FieldTable::default()).await;
    let mut deep = AMQPValue::LongString(LongString::from("bottom"));
    for _ in 0..60 {
        deep = AMQPValue::FieldTable(table(vec![("d", deep)]));
    }
    let bad_deaths: Vec<AMQPValue> = vec![
        ls("not an array"),
        AMQPValue::LongLongInt(7),
        AMQPValue::FieldArray(FieldArray::from(vec![ls("not a table"), AMQPValue::Void])),
        AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::FieldTable(table(vec![
            ("queue", AMQPValue::LongLongInt(3)),
            ("count", ls("many")),
            ("time", ls("yesterday")),
            ("routing-keys", ls("k")),
            (
                "reason",
                AMQPValue::LongString(LongString::from(vec![0xff, 0xfe])),
            ),
        ]))])),
        // A lone table instead of an array is read leniently as one entry: it has an origin.
        AMQPValue::FieldTable(table(vec![("queue", ls(main))])),
    ];
    let n = bad_deaths.len();
    for (i, d) in bad_deaths.into_iter().enumerate() {
        let props = lapin::BasicProperties::default()
            .with_message_id(format!("bad-{i}").as_str().into())
            .with_headers(table(vec![
                ("x-death", d),
                ("deep", deep.clone()),
                (
                    "x-exception-message",
                    AMQPValue::LongString(LongString::from(vec![0xc3, 0x28, b'!'])),
                ),
            ]));
        b.publish(dlq, b"\xff\xfe binary", props).await;
    }
    // One good dead letter among them.
    let good = lapin::BasicProperties::default()
        .with_message_id("good".into())
        .with_headers(table(vec![
            ("x-first-death-queue", ls(main)),
            ("deep", deep.clone()),
        ]));
    b.publish(dlq, b"{}", good).await;
    let before = b.snapshot(dlq).await;
    let recs = b.run(&["filter", "-Q", dlq, "-o", "ndjson"]).await.ndjson();
    assert_eq!(recs.len(), n + 1);
    assert!(recs.iter().all(|r| r["payload"].is_object()));
    b.run(&["inspect", "-Q", dlq, "--full"]).await.ok();
    assert_eq!(b.snapshot(dlq).await, before, "reading changed nothing");
    let run = b
        .run(&[
            "replay",
            "--no-worker-check",
            "-Q",
            dlq,
            "--yes",
            "-o",
            "json",
        ])
        .await;
    assert_eq!(run.code(), 3, "{}", run.stderr());
    let report: serde_json::Value = serde_json::from_str(run.stdout().trim()).unwrap();
    assert_eq!(report["succeeded"], 2);
    assert_eq!(report["failed_count"], n - 1);
    b.wait_depth(main, 2).await;
    b.wait_depth(dlq, n as u32 - 1).await;
    b.delete().await;
}

/// End of input (Ctrl-D) at the `[y/N]` prompt is "no", at once; `y` is yes.
#[tokio::test]
async fn end_of_input_at_the_prompt_is_no() {
    let b = Broker::new("hard_prompt").await;
    b.queue("celery", FieldTable::default()).await;
    let mut db = TestDb::new(Dialect::Sqlite, "hard_prompt").await;
    db.amqp_url = b.amqp_url();
    db.init();
    db.insert(&crate::common::tagged_rows(2, "x")).await;
    let ask = |answer: &[u8]| {
        crate::common::Dlq::new()
            .env("DLQ_DATABASE_URL", &db.url)
            .env("DLQ_TABLE", &db.table)
            .env("DLQ_AMQP_URL", &db.amqp_url)
            .env("DLQ_FORCE_TTY", "1")
            .args(&["replay", "--no-worker-check"])
            .stdin(answer)
            .run()
    };
    let run = ask(b"");
    run.ok();
    assert!(run.stderr().contains("[y/N]"), "{}", run.stderr());
    assert!(run.stderr().contains("nothing done"), "{}", run.stderr());
    assert_eq!(b.depth("celery").await, 0);
    let run = ask(b"y\n");
    run.ok();
    assert_eq!(b.depth("celery").await, 2);
    db.drop().await;
    b.delete().await;
}

/// A password with `/` left as is: say to percent-encode it, not just "invalid port".
#[test]
fn an_unencoded_password_gets_a_hint() {
    crate::common::Dlq::new()
        .args(&[
            "--database-url",
            "postgres://app:pa/ss@127.0.0.1/db",
            "list",
        ])
        .run()
        .fails(2, "percent-encode it");
}
