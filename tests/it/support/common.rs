//! Test harness: real databases, unique table names, and a fluent way to run the binary.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

pub use dlq::testing::Dialect;

pub fn pg_url() -> String {
    std::env::var("DLQ_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

pub fn mysql_url() -> String {
    std::env::var("DLQ_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into())
}

/// A name no other test (or run) uses: tests run in parallel against shared servers.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{prefix}_{}_{n}_{nanos:x}", std::process::id())
}

/// A scratch database location per dialect; SQLite files live in a temp dir kept alive here.
pub struct TestDb {
    pub url: String,
    pub table: String,
    /// The test's own connection, for setup and for looking at what dlq did.
    pub db: dlq::testing::Db,
    /// An empty RabbitMQ virtual host: `list` here shows the table and no queue.
    pub amqp_url: String,
    _dir: Option<tempfile::TempDir>,
}

impl TestDb {
    pub async fn new(dialect: Dialect, prefix: &str) -> TestDb {
        let (url, dir) = match dialect {
            Dialect::Postgres => (pg_url(), None),
            Dialect::MySql => (mysql_url(), None),
            Dialect::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                let url = format!("sqlite://{}", dir.path().join("dlq.db").display());
                (url, Some(dir))
            }
        };
        let db = dlq::testing::Db::connect(&url, true)
            .await
            .expect("connect to test database");
        TestDb {
            url,
            table: unique(prefix),
            db,
            amqp_url: crate::broker::empty_vhost_url().await,
            _dir: dir,
        }
    }

    /// A fresh pool, after the database server was restarted under the test.
    pub async fn reconnect(&mut self) {
        self.db = dlq::testing::Db::connect(&self.url, false)
            .await
            .expect("reconnect");
    }

    /// Runs SQL with `{t}` replaced by the quoted table name.
    pub async fn exec(&self, sql: &str) {
        self.db.exec(&self.with_table(sql)).await.expect("exec");
    }

    pub async fn scalar_i64(&self, sql: &str) -> i64 {
        self.db
            .scalar_i64(&self.with_table(sql))
            .await
            .expect("scalar")
    }

    /// `sql` with `{t}` replaced by the quoted table name.
    fn with_table(&self, sql: &str) -> String {
        sql.replace("{t}", &self.db.quote(&self.table).unwrap())
    }

    /// A table created with `dlq init` and holding `rows`: the setup most tests start from.
    pub async fn with_rows(dialect: Dialect, prefix: &str, rows: &[Row]) -> TestDb {
        let db = TestDb::new(dialect, prefix).await;
        db.init();
        db.insert(rows).await;
        db
    }

    /// Creates the table with `dlq init`.
    pub fn init(&self) {
        self.dlq(&["init"]).ok();
    }

    /// Inserts rows: (task, args JSON text or None, motivo, created RFC 3339, replayed).
    pub async fn insert(&self, rows: &[Row]) {
        let rows: Vec<dlq::testing::NewRow> = rows
            .iter()
            .map(|r| dlq::testing::NewRow {
                task: &r.task,
                args: r.args.as_deref(),
                motivo: &r.motivo,
                created: chrono::DateTime::parse_from_rfc3339(&r.created)
                    .unwrap()
                    .with_timezone(&chrono::Utc),
                replayed: r.replayed,
            })
            .collect();
        self.db.insert(&self.table, &rows).await.expect("insert");
    }

    pub fn dlq(&self, args: &[&str]) -> Run {
        Dlq::new()
            .env("DLQ_DATABASE_URL", &self.url)
            .env("DLQ_TABLE", &self.table)
            .env("DLQ_AMQP_URL", &self.amqp_url)
            .args(args)
            .run()
    }

    /// Like `dlq`, on RabbitMQ's default virtual host, where replay tests declare their queues
    /// and their Celery workers consume.
    pub fn dlq_root(&self, args: &[&str]) -> Run {
        Dlq::new()
            .env("DLQ_DATABASE_URL", &self.url)
            .env("DLQ_TABLE", &self.table)
            .args(args)
            .run()
    }

    pub async fn drop(&self) {
        self.exec("DROP TABLE IF EXISTS {t}").await;
    }
}

#[derive(Clone, Debug)]
pub struct Row {
    pub task: String,
    pub args: Option<String>,
    pub motivo: String,
    pub created: String,
    pub replayed: bool,
}

pub fn row(task: &str, args: Option<&str>, motivo: &str, created: &str, replayed: bool) -> Row {
    Row {
        task: task.into(),
        args: args.map(Into::into),
        motivo: motivo.into(),
        created: created.into(),
        replayed,
    }
}

/// The seed's scenario 2: 340 `processar_pagamento` rows that failed with IntegrityError,
/// among a few hundred others (some already replayed, some with other reasons/cases).
pub fn scenario2() -> Vec<Row> {
    let mut rows = Vec::new();
    for i in 0..340 {
        let day = 1 + i % 20;
        rows.push(row(
            "processar_pagamento",
            Some(&format!(r#"{{"pedido_id": {}, "valor": "{}.{:02}"}}"#, 1000 + i, 10 + i, i % 100)),
            &format!(
                r#"IntegrityError: null value in column "moeda" of relation "pagamentos" violates not-null constraint DETAIL: Failing row contains ({}, null)."#,
                1000 + i
            ),
            &format!("2026-11-{day:02}T10:{:02}:00Z", i % 60),
            false,
        ));
    }
    for i in 0..120 {
        rows.push(row(
            "enviar_email",
            Some(&format!(r#"[{}, "aluno{}@example.com"]"#, i, i)),
            &format!("TimeoutError: SMTP timed out after {}s", 10 + i % 5),
            &format!("2026-11-{:02}T08:00:00Z", 21 + i % 5),
            false,
        ));
    }
    for i in 0..80 {
        rows.push(row(
            "liberar_acesso_curso",
            Some(&format!(
                r#"{{"matricula_id": {i}, "evento_id": "ev-{i}"}}"#
            )),
            "max_retries esgotado",
            "2026-10-15T12:00:00Z",
            false,
        ));
    }
    for i in 0..40 {
        rows.push(row(
            "processar_pagamento",
            Some(&format!(r#"{{"pedido_id": {}}}"#, 5000 + i)),
            "IntegrityError: duplicate key value violates unique constraint \"pagamentos_pkey\"",
            "2026-11-02T00:00:00Z",
            true,
        ));
    }
    for i in 0..7 {
        rows.push(row(
            "processar_pagamento",
            Some(&format!(r#"{{"pedido_id": {}}}"#, 7000 + i)),
            "integrityerror (lowercase, from a legacy worker)",
            "2026-11-03T00:00:00Z",
            false,
        ));
    }
    rows
}

/// Runs the dlq binary with a clean environment (no user config, no inherited URLs).
pub struct Dlq {
    cmd: Command,
    stdin: Option<Vec<u8>>,
}

impl Dlq {
    pub fn new() -> Dlq {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_dlq"));
        for k in [
            "DLQ_DATABASE_URL",
            "DATABASE_URL",
            "DLQ_TABLE",
            "DLQ_AMQP_URL",
            "AMQP_URL",
            "DLQ_PROFILE",
            "DLQ_CONFIG",
            "DLQ_MANAGEMENT_URL",
            "DLQ_AMQP_CA_FILE",
            "DLQ_AMQP_CLIENT_CERT",
            "DLQ_AMQP_CLIENT_KEY",
            "DLQ_BROKER_URL",
            "CELERY_BROKER_URL",
            "DLQ_REDIS_KEY_PREFIX",
            "DLQ_AUDIT_LOG",
            "PGSSLMODE",
            "PGSSLROOTCERT",
            "NO_COLOR",
            "DLQ_FORCE_TTY",
        ] {
            cmd.env_remove(k);
        }
        // No user config file leaks into tests.
        cmd.env(
            "XDG_CONFIG_HOME",
            std::env::temp_dir().join("dlq-tests-no-config"),
        );
        // Nor does any test write the developer's audit trail (~/.local/state/dlq).
        cmd.env(
            "XDG_STATE_HOME",
            std::env::temp_dir().join("dlq-tests-state"),
        );
        cmd.env("COLUMNS", "200");
        // The broker generation under test, where it is not dlq's default (crate::target).
        for (k, v) in crate::target::dlq_env() {
            cmd.env(k, v);
        }
        Dlq { cmd, stdin: None }
    }

    pub fn env(mut self, k: &str, v: &str) -> Dlq {
        self.cmd.env(k, v);
        self
    }

    /// Unsets a variable, e.g. the target's `DLQ_AMQP_URL` where a config file names the URL.
    pub fn env_remove(mut self, k: &str) -> Dlq {
        self.cmd.env_remove(k);
        self
    }

    pub fn args(mut self, args: &[&str]) -> Dlq {
        self.cmd.args(args);
        self
    }

    /// What the command reads on stdin (answers to its prompt).
    pub fn stdin(mut self, data: &[u8]) -> Dlq {
        self.stdin = Some(data.to_vec());
        self
    }

    pub fn run(mut self) -> Run {
        use std::io::Write;
        use std::process::Stdio;
        self.cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = self.cmd.spawn().expect("spawn dlq");
        let input = self.stdin.take().unwrap_or_default();
        let mut stdin = child.stdin.take().unwrap();
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
        let out = child.wait_with_output().expect("wait dlq");
        writer.join().unwrap();
        Run { out }
    }
}

pub struct Run {
    pub out: Output,
}

impl Run {
    pub fn code(&self) -> i32 {
        self.out.status.code().unwrap_or(-1)
    }
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.stdout).into_owned()
    }
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }
    /// Asserts success and returns stdout.
    pub fn ok(&self) -> String {
        assert_eq!(
            self.code(),
            0,
            "expected success\nstdout:\n{}\nstderr:\n{}",
            self.stdout(),
            self.stderr()
        );
        self.stdout()
    }
    /// Asserts the exit code and that stderr contains `needle`; returns stderr.
    pub fn fails(&self, code: i32, needle: &str) -> String {
        assert_eq!(
            self.code(),
            code,
            "wrong exit code\nstdout:\n{}\nstderr:\n{}",
            self.stdout(),
            self.stderr()
        );
        assert!(
            self.stderr().contains(needle),
            "stderr lacks {needle:?}:\n{}",
            self.stderr()
        );
        self.stderr()
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.ok())
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.stdout()))
    }
    pub fn ndjson(&self) -> Vec<serde_json::Value> {
        self.ok()
            .lines()
            .map(|l| serde_json::from_str(l).expect("ndjson line"))
            .collect()
    }
}

/// The dlq binary for tests that drive the process themselves (kill -9, signals): like
/// `Dlq::new()`, its audit trail goes to a scratch directory, never the user's own, and it
/// starts on the broker generation under test.
pub fn dlq_command() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dlq"));
    c.env("XDG_STATE_HOME", std::env::temp_dir().join("dlq-it-state"));
    for (k, v) in crate::target::dlq_env() {
        c.env(k, v);
    }
    c
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `n` pending IntegrityError rows of one task, told apart by `tag` in their args.
pub fn tagged_rows(n: usize, tag: &str) -> Vec<Row> {
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

/// What each thread of process `pid` waits in, for a test that gives up on a process that
/// should have ended: the kernel's wait channel per thread, and gdb's backtraces where gdb is
/// installed (it is not required).
pub fn thread_stacks(pid: u32) -> String {
    let mut said = String::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            let read = |f: &str| std::fs::read_to_string(t.path().join(f)).unwrap_or_default();
            let name = read("comm");
            said += &format!(
                "{:?} {} waits in {}\n",
                t.file_name(),
                name.trim(),
                read("wchan")
            );
        }
    }
    let gdb = Command::new("timeout")
        .args([
            "30",
            "gdb",
            "-p",
            &pid.to_string(),
            "-batch",
            "-ex",
            "thread apply all bt 25",
        ])
        .output();
    if let Ok(out) = gdb {
        said += &String::from_utf8_lossy(&out.stdout);
    }
    said
}

/// How `child` ended, if it did within `limit`; else it is killed (`None`).
pub fn exit_within(
    mut child: std::process::Child,
    limit: std::time::Duration,
) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// Sends `sig` (`-INT`, `-HUP`) to `child`; its output once it ends, and its stderr.
pub async fn signalled(child: std::process::Child, sig: &str) -> (std::process::Output, String) {
    let sent = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success(), "dlq ended before the signal");
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap());
    let out = out.await.unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, err)
}
