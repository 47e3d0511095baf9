//! Bad input: a clear message naming what is wrong, exit code 2 (1 for runtime failures),
//! nothing changed, and no credential in any output.

use crate::common::*;
use crate::per_dialect;

async fn schema_problems(dialect: Dialect) {
    let db = TestDb::new(dialect, "errs").await;
    // Unknown table.
    db.dlq(&["list"])
        .fails(2, &format!("table {} not found", db.table));
    // Missing column: named in the message.
    db.exec("CREATE TABLE {t} (id INTEGER PRIMARY KEY, task_original VARCHAR(100), args TEXT, criada_em TIMESTAMP)").await;
    let err = db
        .dlq(&["inspect"])
        .fails(2, "missing required column(s): motivo, reprocessada");
    assert!(
        err.contains("found: id, task_original, args, criada_em"),
        "{err}"
    );
    // Non-integer --id on an integer id column.
    db.drop().await;
    db.init();
    db.dlq(&["inspect", "--id", "abc"]).fails(2, "--id \"abc\"");
    db.drop().await;
}
per_dialect!(schema_problems);

#[test]
fn bad_selection_values_are_usage_errors() {
    // Validation happens before any connection: no database is needed to reject these.
    let cases: &[(&[&str], &str)] = &[
        (&["inspect", "-e", "(unclosed"], "invalid --pattern regex"),
        (
            &["inspect", "--where", ".payload | ("],
            "invalid --where jq expression",
        ),
        (&["inspect", "--where", "nosuchfn(1)"], "nosuchfn"),
        (&["inspect", "--older-than", "7y"], "unknown unit"),
        (&["inspect", "--older-than", "soon"], "--older-than"),
        (
            &["inspect", "--since", "2026-13-45"],
            "--since: invalid time",
        ),
        (&["inspect", "--limit", "0"], "--limit must be at least 1"),
        (
            &["inspect", "--since", "1d", "--until", "2d"],
            "empty time window",
        ),
        (&["inspect", "-i"], "-i/--ignore-case applies to --motivo"),
        (
            &["--table", "x;drop table y", "inspect"],
            "invalid table name",
        ),
        (
            &["--database-url", "oracle://u:pw@h/db", "inspect"],
            "unsupported scheme",
        ),
        (
            &["--database-url", "postgres://", "inspect"],
            "missing host",
        ),
        (
            &["--amqp-url", "http://h", "inspect"],
            "scheme must be amqp",
        ),
    ];
    for (args, needle) in cases {
        let run = Dlq::new()
            .env("DLQ_DATABASE_URL", "postgres://u:pw@127.0.0.1:1/db")
            .args(args)
            .run();
        run.fails(2, needle);
    }
    // clap itself: conflicting flags and unknown values are usage errors too.
    Dlq::new()
        .args(&["inspect", "--include-replayed", "--only-replayed"])
        .run()
        .fails(2, "cannot be used with");
    Dlq::new()
        .args(&["filter", "--count", "--group-by", "task"])
        .run()
        .fails(2, "cannot be used with");
    Dlq::new()
        .args(&["inspect", "-o", "xml"])
        .run()
        .fails(2, "invalid value 'xml'");
    // No database configured.
    Dlq::new()
        .args(&["inspect"])
        .run()
        .fails(2, "no database configured");
}

#[test]
fn unreachable_database_is_a_runtime_failure_without_credentials() {
    let secret = "s3cr3t-Pa55word";
    for url in [
        format!("postgres://app:{secret}@127.0.0.1:1/db"),
        format!("mysql://app:{secret}@127.0.0.1:1/db"),
    ] {
        let run = Dlq::new().args(&["--database-url", &url, "list"]).run();
        let err = run.fails(1, "cannot connect to database");
        assert!(err.contains("app:***@127.0.0.1:1"), "{err}");
        assert!(
            !err.contains(secret) && !run.stdout().contains(secret),
            "{err}"
        );
    }
    let run = Dlq::new()
        .args(&["--database-url", "sqlite:///nonexistent/dir/x.db", "list"])
        .run();
    run.fails(1, "cannot connect to database");
}

#[tokio::test]
async fn wrong_password_is_reported_without_it() {
    // PostgreSQL here trusts local connections; MariaDB's root has no password, so a wrong
    // user exercises the authentication failure path.
    let secret = "Wr0ng-Secret-xyz";
    let url = format!("mysql://no_such_user:{secret}@127.0.0.1:3306/test");
    let run = Dlq::new().args(&["--database-url", &url, "list"]).run();
    let err = run.fails(1, "cannot connect to database");
    assert!(!err.contains(secret), "{err}");
}

#[test]
fn config_file_profiles_and_permissions() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.toml");
    std::fs::write(
        &cfg,
        "database_url = \"postgres://app:cfg-secret-1@127.0.0.1:1/db\"\n[profiles.staging]\ntable = \"not valid!\"\n",
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let cfg_s = cfg.to_str().unwrap();
    // The profile's table name is validated: flag > env > profile > top level.
    let run = Dlq::new()
        .args(&["--config", cfg_s, "--profile", "staging", "list"])
        .run();
    let err = run.fails(2, "invalid table name");
    assert!(err.contains("readable by other users"), "{err}");
    // Top-level database_url from the file is used (and its password never shown).
    let run = Dlq::new().args(&["--config", cfg_s, "list"]).run();
    let err = run.fails(
        1,
        "cannot connect to database postgres://app:***@127.0.0.1:1/db",
    );
    assert!(!err.contains("cfg-secret-1"), "{err}");
    // Unknown profile, missing explicit file.
    Dlq::new()
        .args(&["--config", cfg_s, "--profile", "prod", "list"])
        .run()
        .fails(2, "unknown profile \"prod\"");
    Dlq::new()
        .args(&["--config", "/nonexistent/dlq.toml", "list"])
        .run()
        .fails(2, "cannot read config file");
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
