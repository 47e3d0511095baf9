//! What a new user hit in the first hours (issue 17): each test failed before its fix.

use crate::broker::Broker;
use crate::common::{Dialect, TestDb, row};
use lapin::types::FieldTable;

fn rows(n: usize, tag: &str) -> Vec<crate::common::Row> {
    (0..n)
        .map(|i| {
            let args = format!(r#"{{"n": {i}, "tag": "{tag}"}}"#);
            row(
                "liberar_acesso_curso",
                Some(&args),
                "IntegrityError",
                "2026-11-30T10:00:00Z",
                false,
            )
        })
        .collect()
}

/// A restore journal belongs to one archive: the same path written again by a new archive
/// must not make dlq skip its records; a dry run writes no journal.
#[tokio::test]
async fn a_journal_of_another_archive_is_ignored() {
    let b = Broker::new("hard_journal").await;
    b.queue("celery", FieldTable::default()).await;
    let mut db = TestDb::new(Dialect::Sqlite, "hard_journal").await;
    db.amqp_url = b.amqp_url();
    db.init();
    db.insert(&rows(5, "first")).await;
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("a.ndjson");
    let f = f.to_str().unwrap();
    let journal = format!("{f}.journal");
    db.dlq(&["archive", "--to", f, "--yes"]).ok();

    db.dlq(&["replay", "--from-file", f, "--no-worker-check", "--dry-run"])
        .ok();
    assert!(
        !std::path::Path::new(&journal).exists(),
        "a dry run writes no journal"
    );

    db.dlq(&["replay", "--from-file", f, "--no-worker-check", "--yes"])
        .ok();
    assert_eq!(b.depth("celery").await, 5);

    // The archive is deleted and a new one written at the same path.
    std::fs::remove_file(f).unwrap();
    db.insert(&rows(5, "second")).await;
    db.dlq(&["archive", "--to", f, "--yes"]).ok();
    let run = db.dlq(&["replay", "--from-file", f, "--no-worker-check", "--yes"]);
    run.ok();
    assert!(
        run.stderr().contains("belongs to another archive"),
        "{}",
        run.stderr()
    );
    assert_eq!(
        b.depth("celery").await,
        5 + 10,
        "every record of the new archive was sent"
    );
    // And its own journal now resumes it.
    let again = db.dlq(&["replay", "--from-file", f, "--no-worker-check", "--yes"]);
    assert!(
        again.stderr().contains("10 record(s) already restored"),
        "{}",
        again.stderr()
    );
    assert_eq!(b.depth("celery").await, 15);
    db.drop().await;
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
    db.insert(&rows(5, "x")).await;
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

/// End of input (Ctrl-D) at the `[y/N]` prompt is "no", at once; `y` is yes.
#[tokio::test]
async fn end_of_input_at_the_prompt_is_no() {
    let b = Broker::new("hard_prompt").await;
    b.queue("celery", FieldTable::default()).await;
    let mut db = TestDb::new(Dialect::Sqlite, "hard_prompt").await;
    db.amqp_url = b.amqp_url();
    db.init();
    db.insert(&rows(2, "x")).await;
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

/// Another server on the AMQP port (here RabbitMQ's own HTTP API): said in plain words.
#[test]
fn a_server_that_is_not_rabbitmq_is_named_as_such() {
    crate::common::Dlq::new()
        .args(&[
            "--amqp-url",
            &format!("amqp://guest:guest@{}/%2f", crate::target::api_addr()),
            "list",
            "-Q",
            "q",
        ])
        .run()
        .fails(1, "is this the AMQP port");
}

/// `--table public.x` on SQLite: not found (exit 2), as on the other databases.
#[tokio::test]
async fn a_schema_qualified_table_on_sqlite_is_not_found() {
    let db = TestDb::new(Dialect::Sqlite, "hard_schema").await;
    db.init();
    crate::common::Dlq::new()
        .env("DLQ_DATABASE_URL", &db.url)
        .args(&["--table", "public.x", "list"])
        .run()
        .fails(2, "table public.x not found");
}

/// Celery's delayed-delivery chain is recognised and kept out of the DLQ list; --exclude
/// leaves out any other noise.
#[tokio::test]
async fn celery_delay_hops_are_not_listed_as_dlqs() {
    use crate::broker::{ls, table};
    use lapin::ExchangeKind;
    let b = Broker::new("hard_hops").await;
    let dlx = |to: &str| table(vec![("x-dead-letter-exchange", ls(to))]);
    for (_feeder, via, dlq) in [
        ("work", "work.dlx", "work.dlq"),
        ("noise", "noise.dlx", "noise.dlq"),
        ("celery_delayed_1", "cd.x", "celery_delayed_0"),
        ("celery_delayed_0", "cd.y", "celery_delayed_delivery"),
    ] {
        b.exchange(via, ExchangeKind::Fanout).await;
        b.queue(dlq, FieldTable::default()).await;
        b.bind(dlq, via, "").await;
    }
    b.queue("work", dlx("work.dlx")).await;
    b.queue("noise", dlx("noise.dlx")).await;
    b.redeclare("celery_delayed_1", dlx("cd.x")).await;
    b.redeclare("celery_delayed_0", dlx("cd.y")).await;
    let run = b.run(&["list", "-o", "json"]).await;
    let locations: Vec<String> = run
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["location"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(locations, vec!["noise.dlq", "work.dlq"], "{}", run.stderr());
    assert!(
        run.stderr()
            .contains("delayed-delivery queues were recognised"),
        "{}",
        run.stderr()
    );
    let run = b.run(&["list", "-o", "json", "--exclude", "noise*"]).await;
    let v = run.json();
    assert_eq!(v.as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v[0]["location"], "work.dlq");
    b.delete().await;
}

/// A BLOB or non-UTF-8 value (Python's sqlite3 stores `bytes` as BLOB) is read losslessly,
/// shown escaped; the table stays usable.
#[tokio::test]
async fn blob_and_non_utf8_values_do_not_break_the_table() {
    let db = TestDb::with_rows(Dialect::Sqlite, "hard_blob", &rows(1, "ok")).await;
    db.exec(
        "INSERT INTO {t} (task_original, args, motivo, criada_em, reprocessada) \
         VALUES (X'6c6962657261725f61636573736f5f637572736f', '[1]', X'4b65794572726f72ff', '2026-11-30T10:00:00Z', 0)",
    )
    .await;
    db.dlq(&["list"]).ok();
    let run = db.dlq(&["inspect", "-o", "json"]);
    let v = run.json();
    let records = v.as_array().unwrap();
    assert_eq!(records.len(), 2, "{v}");
    assert!(
        records.iter().any(|r| r["motivo"] == "KeyError\\xff"),
        "{v}"
    );
    assert!(
        records.iter().all(|r| r["task"] == "liberar_acesso_curso"),
        "{v}"
    );
    let run = db.dlq(&["filter", "--motivo", "KeyError", "--count"]);
    assert_eq!(run.ok().trim(), "1");
    db.drop().await;
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

/// A criada_em dlq cannot read is reported, not silently treated as "no time": an
/// `archive --older-than --delete` says which rows it can never remove.
#[tokio::test]
async fn an_unreadable_criada_em_is_reported() {
    let db = TestDb::new(Dialect::Sqlite, "hard_time").await;
    db.init();
    db.exec(
        "INSERT INTO {t} (task_original, args, motivo, criada_em, reprocessada) VALUES \
         ('t', '[1]', 'm', '2020-01-01T00:00:00Z', 0), ('t', '[2]', 'm', 'not a time', 0)",
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("old.ndjson");
    let run = db.dlq(&[
        "archive",
        "--older-than",
        "30d",
        "--to",
        f.to_str().unwrap(),
        "--delete",
        "--yes",
    ]);
    run.ok();
    assert!(
        run.stderr()
            .contains("1 record(s) have a time dlq cannot read"),
        "{}",
        run.stderr()
    );
    assert!(run.stderr().contains("not a time"), "{}", run.stderr());
    assert_eq!(
        db.scalar_i64("SELECT COUNT(*) FROM {t}").await,
        1,
        "the old row went, the unreadable one stays"
    );
    db.drop().await;
}

/// Below 60 columns a table is unreadable: rows are stacked, wrapped at word boundaries.
#[tokio::test]
async fn narrow_terminals_get_stacked_rows() {
    let db = TestDb::new(Dialect::Sqlite, "hard_narrow").await;
    db.init();
    db.insert(&[row(
        "t",
        Some("[1]"),
        "MemoryError: could not allocate the buffer",
        "2026-11-30T10:00:00Z",
        false,
    )])
    .await;
    let out = crate::common::Dlq::new()
        .env("DLQ_DATABASE_URL", &db.url)
        .env("DLQ_TABLE", &db.table)
        .env("COLUMNS", "40")
        .args(&["inspect"])
        .run()
        .ok();
    assert!(
        out.contains("motivo:     MemoryError: could not\n"),
        "{out}"
    );
    assert!(!out.contains('┆'), "{out}");
    db.drop().await;
}

/// `dlq init` on an existing PostgreSQL table without dlq's columns names them (exit 2),
/// instead of PostgreSQL's raw `column ... does not exist at line NNN`.
#[tokio::test]
async fn init_names_missing_columns_on_postgres() {
    let db = TestDb::new(Dialect::Postgres, "hard_init").await;
    db.exec("CREATE TABLE {t} (id BIGSERIAL PRIMARY KEY, task_original TEXT, args TEXT, motivo TEXT, criada_em TIMESTAMPTZ)")
        .await;
    let err = db
        .dlq(&["init"])
        .fails(2, "missing required column(s): reprocessada");
    assert!(!err.contains("at line"), "{err}");
    db.drop().await;
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
