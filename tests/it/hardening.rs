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
            "amqp://guest:guest@127.0.0.1:15672/%2f",
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
