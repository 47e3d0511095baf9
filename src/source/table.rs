//! The failed-task table (`tasks_falhadas`) on PostgreSQL, MySQL/MariaDB and SQLite.
//!
//! Rows are streamed (bounded channel, flat memory). What SQL can decide is pushed down
//! as bound parameters; the selection's own `matches` stays the final word, so every
//! pushed-down predicate only has to select a superset. `LIMIT` is pushed down only
//! when every predicate is exact in SQL.

use crate::error::usage;
use crate::model::{DeadLetter, RecordId, SourceKind};
use crate::redact;
use crate::select::{ReplayedFilter, Selection};
use crate::settings::{DatabaseUrl, Dialect, TableName};
use anyhow::{Context, Result, anyhow};
use chrono::{DateTime, NaiveDateTime, TimeZone, Utc};
use futures_util::TryStreamExt;
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};
use sqlx::{AssertSqlSafe, Row};
use std::str::FromStr;
use std::time::Duration;
use tokio::sync::mpsc;

/// Rows in flight between the database and the consumer: bounds memory.
const CHANNEL_DEPTH: usize = 256;

#[derive(Clone)]
pub enum Pool {
    Postgres(PgPool),
    MySql(MySqlPool),
    Sqlite(SqlitePool),
}

/// Runs the same code against whichever concrete pool we have; each arm is
/// type-checked with its own concrete database types.
#[macro_export]
macro_rules! with_pool {
    ($pool:expr, $p:ident => $body:expr) => {
        match $pool {
            $crate::source::table::Pool::Postgres($p) => $body,
            $crate::source::table::Pool::MySql($p) => $body,
            $crate::source::table::Pool::Sqlite($p) => $body,
        }
    };
}

/// A value bound to a query parameter.
#[derive(Debug, Clone)]
pub enum Bind {
    I64(i64),
    Text(String),
    Bool(bool),
    Tz(DateTime<Utc>),
    Naive(NaiveDateTime),
}

/// Binds every value to a sqlx query, whatever the database.
#[macro_export]
macro_rules! bind_all {
    ($query:expr, $binds:expr) => {{
        let mut q = $query;
        for b in $binds {
            q = match b {
                $crate::source::table::Bind::I64(v) => q.bind(v),
                $crate::source::table::Bind::Text(v) => q.bind(v),
                $crate::source::table::Bind::Bool(v) => q.bind(v),
                $crate::source::table::Bind::Tz(v) => q.bind(v),
                $crate::source::table::Bind::Naive(v) => q.bind(v),
            };
        }
        q
    }};
}

/// How a column's values are typed in this table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdKind {
    Int,
    Text,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeKind {
    /// timestamptz (PostgreSQL), TIMESTAMP (MySQL): an instant.
    Tz,
    /// timestamp without time zone, DATETIME: read as UTC.
    Naive,
    /// Text (SQLite, or anything else): parsed leniently.
    Text,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlagKind {
    /// A real boolean column (PostgreSQL).
    Bool,
    /// An integer 0/1 (MySQL BOOLEAN, SQLite).
    Int,
}

#[derive(Debug, Clone)]
pub struct TableSchema {
    pub id: IdKind,
    pub created: TimeKind,
    pub flag: FlagKind,
    pub flag_nullable: bool,
    /// `reprocessada_em`, when the table has it.
    pub replayed_at: Option<TimeKind>,
}

pub const REQUIRED_COLUMNS: [&str; 6] = [
    "id",
    "task_original",
    "args",
    "motivo",
    "criada_em",
    "reprocessada",
];

/// A connected, checked failed-task table.
#[derive(Clone)]
pub struct FailedTable {
    pub pool: Pool,
    pub dialect: Dialect,
    pub name: TableName,
    /// The quoted identifier to splice into SQL (validated, then quoted).
    pub quoted: String,
    pub schema: TableSchema,
}

/// Builds SQL with the right placeholder style and collects bind values in order.
pub struct SqlBuilder {
    pub dialect: Dialect,
    pub binds: Vec<Bind>,
}

impl SqlBuilder {
    pub fn new(dialect: Dialect) -> SqlBuilder {
        SqlBuilder {
            dialect,
            binds: Vec::new(),
        }
    }

    /// Adds a bind value; returns its placeholder.
    pub fn param(&mut self, b: Bind) -> String {
        self.binds.push(b);
        match self.dialect {
            Dialect::Postgres => format!("${}", self.binds.len()),
            _ => "?".to_string(),
        }
    }
}

pub fn quote_ident(dialect: Dialect, t: &TableName) -> String {
    let q = |s: &str| match dialect {
        Dialect::MySql => format!("`{s}`"),
        _ => format!("\"{s}\""),
    };
    match &t.schema {
        Some(s) => format!("{}.{}", q(s), q(&t.name)),
        None => q(&t.name),
    }
}

/// Connects to the database; `create` lets SQLite create a missing file (for `init`).
pub async fn connect(db: &DatabaseUrl, create: bool) -> Result<Pool> {
    connect_sized(db, create, 8).await
}

/// Like `connect`, with room for `max` concurrent connections (replay workers each hold one).
pub async fn connect_sized(db: &DatabaseUrl, create: bool, max: u32) -> Result<Pool> {
    let shown = redact::url(&db.url);
    let ctx = || format!("cannot connect to database {shown}");
    // A dead database must fail fast, not hang a cron job.
    let acquire = Duration::from_secs(10);
    let pool = match db.dialect {
        Dialect::Postgres => {
            let opts = PgConnectOptions::from_str(&db.url)
                .map_err(|e| usage(redact::scrub(&format!("invalid database URL {shown}: {e}"))))?
                // Named per process so an operator (or a test) can find this run's sessions.
                .application_name(&format!("dlq-{}", std::process::id()));
            Pool::Postgres(
                PgPoolOptions::new()
                    .max_connections(max)
                    .acquire_timeout(acquire)
                    .connect_with(opts)
                    .await
                    .map_err(|e| connect_failed(e, db.dialect))
                    .with_context(ctx)?,
            )
        }
        Dialect::MySql => {
            let opts = MySqlConnectOptions::from_str(&db.url)
                .map_err(|e| usage(redact::scrub(&format!("invalid database URL {shown}: {e}"))))?;
            Pool::MySql(
                MySqlPoolOptions::new()
                    .max_connections(max)
                    .acquire_timeout(acquire)
                    .connect_with(opts)
                    .await
                    .map_err(|e| connect_failed(e, db.dialect))
                    .with_context(ctx)?,
            )
        }
        Dialect::Sqlite => {
            let opts = SqliteConnectOptions::from_str(&db.url)
                .map_err(|e| usage(redact::scrub(&format!("invalid database URL {shown}: {e}"))))?
                .create_if_missing(create)
                .busy_timeout(Duration::from_secs(30));
            Pool::Sqlite(
                SqlitePoolOptions::new()
                    .max_connections(max.min(4))
                    .acquire_timeout(acquire)
                    .connect_with(opts)
                    .await
                    .map_err(|e| connect_failed(e, db.dialect))
                    .with_context(ctx)?,
            )
        }
    };
    Ok(pool)
}

/// A failed connection, with what to do when TLS is the reason.
fn connect_failed(e: sqlx::Error, dialect: Dialect) -> anyhow::Error {
    use crate::tls::Problem;
    let ca = match dialect {
        Dialect::MySql => "ssl-ca",
        _ => "sslrootcert",
    };
    let problem = crate::tls::find_rustls_error(&e).map(crate::tls::classify);
    let msg = match problem {
        Some(Problem::Untrusted) => format!(
            "the database server's TLS certificate is not trusted: no CA of the system's store (or of {ca}) signed it. Add {ca}=/path/to/ca.pem to the URL"
        ),
        Some(Problem::WrongName {
            expected,
            presented,
        }) => format!(
            "the database server's TLS certificate is not valid for host {expected:?} (it names {presented}): use a host name the certificate names, or {} to check the CA only",
            match dialect {
                Dialect::MySql => "ssl-mode=VERIFY_CA",
                _ => "sslmode=verify-ca",
            }
        ),
        Some(Problem::Rejected(why)) => {
            format!("the database server's TLS certificate was rejected: {why}")
        }
        Some(Problem::ClientCertificate(alert)) => format!(
            "the database server refused the TLS client certificate (TLS alert {alert}): check sslcert/sslkey in the URL"
        ),
        Some(Problem::Alert(alert)) => format!(
            "the database server ended the TLS handshake (TLS alert {alert}): see its log for why"
        ),
        _ => match &e {
            // sqlx's words for a plain server under a TLS-requiring mode.
            sqlx::Error::Tls(t) if t.to_string().contains("does not support TLS") => format!(
                "{e}: the URL requires TLS ({}), and this server does not offer it",
                match dialect {
                    Dialect::MySql => "ssl-mode REQUIRED, VERIFY_CA or VERIFY_IDENTITY",
                    _ => "sslmode require, verify-ca or verify-full",
                }
            ),
            _ => e.to_string(),
        },
    };
    anyhow!(redact::scrub(&msg))
}

/// Database errors can echo connection parameters: scrub them before they travel.
pub fn scrubbed(e: sqlx::Error) -> anyhow::Error {
    anyhow!(redact::scrub(&without_server_line(&e.to_string())))
}

/// PostgreSQL errors end in the server's own source line (`... at line 3665`): noise for
/// an operator.
fn without_server_line(text: &str) -> String {
    static AT_LINE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = AT_LINE.get_or_init(|| regex::Regex::new(r" at line \d+\b").expect("valid regex"));
    re.replace_all(text, "").into_owned()
}

struct Column {
    name: String,
    data_type: String,
    nullable: bool,
}

impl FailedTable {
    /// Connects and checks that the table exists with the required columns.
    pub async fn open(db: &DatabaseUrl, table: &TableName) -> Result<FailedTable> {
        let pool = connect(db, false).await?;
        FailedTable::check(pool, db.dialect, table).await
    }

    /// Like `open`, with a pool big enough for `max` concurrent connections.
    pub async fn open_sized(db: &DatabaseUrl, table: &TableName, max: u32) -> Result<FailedTable> {
        let pool = connect_sized(db, false, max).await?;
        FailedTable::check(pool, db.dialect, table).await
    }

    /// Locks these rows for this transaction if they are still selectable by their replayed
    /// flag. PostgreSQL and MySQL skip rows another run holds (`SKIP LOCKED`); SQLite runs
    /// this inside `BEGIN IMMEDIATE`, which admits one writer at a time.
    pub fn claim_sql(
        &self,
        b: &mut SqlBuilder,
        ids: &[RecordId],
        replayed: ReplayedFilter,
    ) -> Result<String> {
        let ps = self.id_params(b, ids)?;
        let flag = match replayed {
            ReplayedFilter::Pending => format!(" AND {}", self.pending_sql()),
            ReplayedFilter::Only => format!(" AND {}", self.replayed_sql()),
            ReplayedFilter::All => String::new(),
        };
        let lock = match self.dialect {
            Dialect::Sqlite => "",
            _ => " FOR UPDATE SKIP LOCKED",
        };
        Ok(format!(
            "SELECT {} FROM {} WHERE id IN ({ps}){flag} ORDER BY id{lock}",
            self.record_columns(),
            self.quoted
        ))
    }

    /// Marks these rows replayed (and `reprocessada_em` when the column exists).
    pub fn mark_sql(
        &self,
        b: &mut SqlBuilder,
        ids: &[RecordId],
        at: DateTime<Utc>,
    ) -> Result<String> {
        let flag = b.param(self.replayed_flag());
        let mut set = format!("reprocessada = {flag}");
        if let Some(kind) = self.schema.replayed_at {
            let p = b.param(Self::time_bind(kind, at));
            set.push_str(&format!(", reprocessada_em = {p}"));
        }
        let ps = self.id_params(b, ids)?;
        Ok(format!(
            "UPDATE {} SET {set} WHERE id IN ({ps})",
            self.quoted
        ))
    }

    /// Bound placeholders for a list of ids, comma-separated.
    pub fn id_params(&self, b: &mut SqlBuilder, ids: &[RecordId]) -> Result<String> {
        let ps = ids
            .iter()
            .map(|id| Ok(b.param(self.id_bind(id)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(ps.join(", "))
    }

    pub async fn check(pool: Pool, dialect: Dialect, table: &TableName) -> Result<FailedTable> {
        let columns = read_columns(&pool, dialect, table).await?;
        if columns.is_empty() {
            return Err(usage(format!(
                "table {table} not found in this database (create it with `dlq init`, or name another with --table)"
            )));
        }
        let find = |n: &str| columns.iter().find(|c| c.name.eq_ignore_ascii_case(n));
        let missing: Vec<&str> = REQUIRED_COLUMNS
            .iter()
            .copied()
            .filter(|c| find(c).is_none())
            .collect();
        if !missing.is_empty() {
            let found: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
            return Err(usage(format!(
                "table {table} is missing required column(s): {} (found: {})",
                missing.join(", "),
                found.join(", ")
            )));
        }
        let ty = |n: &str| {
            find(n)
                .map(|c| c.data_type.to_ascii_lowercase())
                .unwrap_or_default()
        };
        let id = if is_integer_type(&ty("id")) {
            IdKind::Int
        } else {
            IdKind::Text
        };
        let flag_type = ty("reprocessada");
        let flag = match dialect {
            Dialect::Postgres if flag_type.starts_with("bool") => FlagKind::Bool,
            Dialect::Postgres if is_integer_type(&flag_type) => FlagKind::Int,
            Dialect::Postgres => {
                return Err(usage(format!(
                    "table {table}: column reprocessada has type {flag_type}, expected boolean"
                )));
            }
            _ if is_integer_type(&flag_type)
                || flag_type.starts_with("bool")
                || flag_type.starts_with("bit") =>
            {
                FlagKind::Int
            }
            _ => {
                return Err(usage(format!(
                    "table {table}: column reprocessada has type {flag_type}, expected a boolean/integer"
                )));
            }
        };
        let schema = TableSchema {
            id,
            created: time_kind(dialect, &ty("criada_em")),
            flag,
            flag_nullable: find("reprocessada").is_some_and(|c| c.nullable),
            replayed_at: find("reprocessada_em")
                .map(|c| time_kind(dialect, &c.data_type.to_ascii_lowercase())),
        };
        Ok(FailedTable {
            pool,
            dialect,
            name: table.clone(),
            quoted: quote_ident(dialect, table),
            schema,
        })
    }

    /// Display name for records' `location`.
    pub fn location(&self) -> String {
        self.name.to_string()
    }

    /// SQL for "not yet replayed".
    pub fn pending_sql(&self) -> &'static str {
        match (self.schema.flag, self.schema.flag_nullable) {
            (FlagKind::Bool, false) => "NOT reprocessada",
            (FlagKind::Bool, true) => "reprocessada IS NOT TRUE",
            (FlagKind::Int, false) => "reprocessada = 0",
            (FlagKind::Int, true) => "COALESCE(reprocessada, 0) = 0",
        }
    }

    fn replayed_sql(&self) -> &'static str {
        match self.schema.flag {
            FlagKind::Bool => "reprocessada IS TRUE",
            FlagKind::Int => "COALESCE(reprocessada, 0) <> 0",
        }
    }

    /// The value that marks a row replayed.
    pub fn replayed_flag(&self) -> Bind {
        match self.schema.flag {
            FlagKind::Bool => Bind::Bool(true),
            FlagKind::Int => Bind::I64(1),
        }
    }

    /// A point in time bound the way the column compares.
    pub fn time_bind(kind: TimeKind, t: DateTime<Utc>) -> Bind {
        match kind {
            TimeKind::Tz => Bind::Tz(t),
            TimeKind::Naive => Bind::Naive(t.naive_utc()),
            TimeKind::Text => Bind::Text(t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()),
        }
    }

    /// An id bound with the column's type; a non-integer id for an integer column is bad input.
    pub fn id_bind(&self, id: &RecordId) -> Result<Bind> {
        match (self.schema.id, id) {
            (IdKind::Int, RecordId::Int(i)) => Ok(Bind::I64(*i)),
            (IdKind::Int, RecordId::Text(t)) => Err(usage(format!(
                "--id {t:?}: the id column of {} is an integer",
                self.name
            ))),
            (IdKind::Text, id) => Ok(Bind::Text(id.to_string())),
        }
    }

    /// The column list every record query selects, in `decode_*` order.
    pub fn record_columns(&self) -> String {
        let (id, args, created) = match self.dialect {
            Dialect::Postgres => (
                if self.schema.id == IdKind::Int {
                    "id::bigint"
                } else {
                    "id::text"
                },
                "args::text",
                if self.schema.created == TimeKind::Text {
                    "criada_em::text"
                } else {
                    "criada_em"
                },
            ),
            Dialect::MySql => (
                if self.schema.id == IdKind::Int {
                    "CAST(id AS SIGNED)"
                } else {
                    "CAST(id AS CHAR)"
                },
                "CAST(args AS CHAR)",
                if self.schema.created == TimeKind::Text {
                    "CAST(criada_em AS CHAR)"
                } else {
                    "criada_em"
                },
            ),
            Dialect::Sqlite => (
                if self.schema.id == IdKind::Int {
                    "id"
                } else {
                    "CAST(id AS TEXT)"
                },
                "CAST(args AS TEXT)",
                "criada_em",
            ),
        };
        let flag = match self.schema.flag {
            FlagKind::Bool => "COALESCE(reprocessada, false)",
            FlagKind::Int => "(COALESCE(reprocessada, 0) <> 0)",
        };
        format!("{id}, task_original, {args}, motivo, {created}, {flag}")
    }

    /// Translates the selection into a WHERE clause. Returns the clause and whether it is
    /// exact (so that LIMIT may be pushed down).
    pub fn where_clause(&self, sel: &Selection, b: &mut SqlBuilder) -> Result<(String, bool)> {
        let mut preds: Vec<String> = Vec::new();
        let mut exact = sel.exact_in_sql();
        match sel.replayed {
            ReplayedFilter::Pending => preds.push(self.pending_sql().to_string()),
            ReplayedFilter::Only => preds.push(self.replayed_sql().to_string()),
            ReplayedFilter::All => {}
        }
        if let Some(m) = &sel.motivo {
            let ascii = m.is_ascii();
            if sel.ignore_case {
                // Case folding differs between databases and Rust: a pre-filter only, and
                // only for ASCII needles where every engine folds alike.
                if ascii {
                    let p = b.param(Bind::Text(format!("%{}%", like_escape(&m.to_lowercase()))));
                    preds.push(match self.dialect {
                        Dialect::Sqlite => format!("motivo LIKE {p} ESCAPE '!'"),
                        _ => format!("LOWER(motivo) LIKE {p} ESCAPE '!'"),
                    });
                }
            } else {
                match self.dialect {
                    Dialect::Postgres => {
                        let p = b.param(Bind::Text(m.clone()));
                        preds.push(format!("strpos(motivo, {p}) > 0"));
                    }
                    Dialect::Sqlite => {
                        let p = b.param(Bind::Text(m.clone()));
                        preds.push(format!("instr(motivo, {p}) > 0"));
                    }
                    Dialect::MySql if ascii => {
                        // Byte-wise search: case-sensitive whatever the column's collation.
                        let p = b.param(Bind::Text(m.clone()));
                        preds.push(format!("INSTR(motivo, CAST({p} AS BINARY)) > 0"));
                    }
                    Dialect::MySql => {
                        // Collation-based LIKE selects a superset; the client decides.
                        let p = b.param(Bind::Text(format!("%{}%", like_escape(m))));
                        preds.push(format!("motivo LIKE {p} ESCAPE '!'"));
                        exact = false;
                    }
                }
            }
        }
        if !sel.tasks.is_empty() {
            let ps: Vec<String> = sel
                .tasks
                .iter()
                .map(|t| b.param(Bind::Text(t.clone())))
                .collect();
            preds.push(format!("task_original IN ({})", ps.join(", ")));
            if self.dialect == Dialect::MySql {
                exact = false; // case-insensitive collations: superset
            }
        }
        if !sel.ids.is_empty() {
            let ps = self.id_params(b, &sel.ids)?;
            preds.push(format!("id IN ({ps})"));
        }
        for (bound, op) in [(sel.since, ">="), (sel.until, "<")] {
            let Some(t) = bound else { continue };
            let p = b.param(Self::time_bind(self.schema.created, t));
            match (self.dialect, self.schema.created) {
                (Dialect::Sqlite, _) => {
                    // Text timestamps compare as instants via julianday; rows stored in other
                    // shapes, and text julianday cannot read, are left for the client to decide
                    // (and report).
                    preds.push(format!(
                        "(typeof(criada_em) <> 'text' OR julianday(criada_em) IS NULL OR julianday(criada_em) {op} julianday({p}))"
                    ));
                    exact = false;
                }
                (_, TimeKind::Text) => exact = false,
                _ => preds.push(format!("criada_em {op} {p}")),
            }
        }
        let clause = if preds.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", preds.join(" AND "))
        };
        Ok((clause, exact))
    }

    /// Streams the records SQL pre-selects, ordered by id. The consumer applies the
    /// selection (`select::Selected`); dropping the receiver stops the query.
    pub fn stream(&self, sel: &Selection) -> Result<mpsc::Receiver<Result<DeadLetter>>> {
        let mut b = SqlBuilder::new(self.dialect);
        let (clause, exact) = self.where_clause(sel, &mut b)?;
        // One row past the limit lets the consumer tell "more match" from "that was all".
        let limit = match (exact, sel.limit) {
            (true, Some(n)) => format!(" LIMIT {}", n.saturating_add(1)),
            _ => String::new(),
        };
        let sql = format!(
            "SELECT {} FROM {}{clause} ORDER BY id{limit}",
            self.record_columns(),
            self.quoted
        );
        let (tx, rx) = mpsc::channel(CHANNEL_DEPTH);
        let table = self.clone();
        let binds = b.binds;
        tokio::spawn(async move {
            let result: Result<()> = async {
                with_pool!(&table.pool, p => {
                    let q = bind_all!(sqlx::query(AssertSqlSafe(sql)), binds);
                    let mut rows = q.fetch(p);
                    while let Some(row) = rows.try_next().await.map_err(scrubbed)? {
                        let rec = table.decode(&row);
                        if tx.send(rec).await.is_err() {
                            break; // consumer has what it needs
                        }
                    }
                    Ok::<(), anyhow::Error>(())
                })
            }
            .await;
            if let Err(e) = result {
                let _ = tx
                    .send(Err(e.context(format!("reading table {}", table.name))))
                    .await;
            }
        });
        Ok(rx)
    }

    /// `SELECT COUNT(*)` for a selection that SQL decides exactly.
    pub async fn count_exact(&self, sel: &Selection) -> Result<Option<u64>> {
        let mut b = SqlBuilder::new(self.dialect);
        let (clause, exact) = self.where_clause(sel, &mut b)?;
        if !exact {
            return Ok(None);
        }
        let sql = format!("SELECT COUNT(*) FROM {}{clause}", self.quoted);
        let n: i64 = with_pool!(&self.pool, p => {
            bind_all!(sqlx::query_scalar(AssertSqlSafe(sql)), b.binds).fetch_one(p).await.map_err(scrubbed)?
        });
        let n = n.max(0) as u64;
        Ok(Some(sel.limit.map_or(n, |l| n.min(l))))
    }

    /// Counts for `list`: all rows, pending rows, oldest pending, and reasons with counts.
    pub async fn summary(&self) -> Result<TableSummary> {
        let total_sql = format!("SELECT COUNT(*) FROM {}", self.quoted);
        let pending_sql = format!(
            "SELECT COUNT(*) FROM {} WHERE {}",
            self.quoted,
            self.pending_sql()
        );
        let oldest_sql = format!(
            "SELECT {} FROM {} WHERE {} ORDER BY criada_em LIMIT 1",
            self.record_columns(),
            self.quoted,
            self.pending_sql()
        );
        let reasons_sql = format!(
            "SELECT motivo, COUNT(*) FROM {} WHERE {} GROUP BY motivo",
            self.quoted,
            self.pending_sql()
        );
        with_pool!(&self.pool, p => {
            let total: i64 = sqlx::query_scalar(AssertSqlSafe(total_sql)).fetch_one(p).await.map_err(scrubbed)?;
            let pending: i64 = sqlx::query_scalar(AssertSqlSafe(pending_sql)).fetch_one(p).await.map_err(scrubbed)?;
            let oldest = match sqlx::query(AssertSqlSafe(oldest_sql)).fetch_optional(p).await.map_err(scrubbed)? {
                Some(row) => self.decode(&row)?.created_at,
                None => None,
            };
            let mut reasons: Vec<(String, u64)> = Vec::new();
            let mut rows = sqlx::query(AssertSqlSafe(reasons_sql)).fetch(p);
            while let Some(row) = rows.try_next().await.map_err(scrubbed)? {
                let motivo = text_or_bytes(&row, 0).map_err(scrubbed)?;
                let n: i64 = row.try_get(1).map_err(scrubbed)?;
                reasons.push((motivo.unwrap_or_default(), n.max(0) as u64));
            }
            Ok(TableSummary { total: total.max(0) as u64, pending: pending.max(0) as u64, oldest_pending: oldest, reasons })
        })
    }
}

/// Held for the whole of an archive run so that two overlapping runs (cron and a person)
/// never archive or delete the same rows. Released when dropped (the session or file closes).
pub enum ArchiveLock {
    Postgres(sqlx::postgres::PgConnection),
    MySql(sqlx::mysql::MySqlConnection),
    File(std::fs::File),
    /// In-memory SQLite: nobody else can see it.
    None,
}

impl FailedTable {
    /// Takes the archive lock or fails at once naming who holds it.
    pub async fn archive_lock(&self, db: &DatabaseUrl) -> Result<ArchiveLock> {
        use sqlx::Acquire;
        let key = format!("dlq-archive:{}", self.name);
        let busy = || {
            anyhow!(
                "another dlq archive run holds the lock on table {} (try again when it is done)",
                self.name
            )
        };
        match &self.pool {
            Pool::Postgres(p) => {
                let mut conn = p.acquire().await.map_err(scrubbed)?.detach();
                let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock(hashtext($1))")
                    .bind(&key)
                    .fetch_one(conn.acquire().await.map_err(scrubbed)?)
                    .await
                    .map_err(scrubbed)?;
                if got {
                    Ok(ArchiveLock::Postgres(conn))
                } else {
                    Err(busy())
                }
            }
            Pool::MySql(p) => {
                let mut conn = p.acquire().await.map_err(scrubbed)?.detach();
                // Lock names are server-wide and at most 64 characters: hash database + table.
                let got: Option<i64> = sqlx::query_scalar(
                    "SELECT GET_LOCK(CONCAT('dlq-archive-', SHA1(CONCAT(DATABASE(), '.', ?))), 0)",
                )
                .bind(&key)
                .fetch_one(conn.acquire().await.map_err(scrubbed)?)
                .await
                .map_err(scrubbed)?;
                if got == Some(1) {
                    Ok(ArchiveLock::MySql(conn))
                } else {
                    Err(busy())
                }
            }
            Pool::Sqlite(_) => {
                let Some(path) = sqlite_path(&db.url) else {
                    return Ok(ArchiveLock::None);
                };
                let mut lock_path = path.into_os_string();
                lock_path.push(format!(".{}.dlq-archive.lock", self.name));
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&lock_path)
                    .with_context(|| {
                        format!(
                            "cannot open lock file {}",
                            std::path::Path::new(&lock_path).display()
                        )
                    })?;
                match file.try_lock() {
                    Ok(()) => Ok(ArchiveLock::File(file)),
                    Err(std::fs::TryLockError::WouldBlock) => Err(busy()),
                    Err(std::fs::TryLockError::Error(e)) => {
                        Err(anyhow!(e).context("locking the archive lock file"))
                    }
                }
            }
        }
    }
}

/// The file behind a SQLite URL (`sqlite://path`, `sqlite:path`); `None` for in-memory.
pub fn sqlite_path(url: &str) -> Option<std::path::PathBuf> {
    let rest = url.strip_prefix("sqlite:")?;
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let path = rest.split('?').next().unwrap_or("");
    if path.is_empty() || path == ":memory:" || url.contains("mode=memory") {
        None
    } else {
        Some(std::path::PathBuf::from(path))
    }
}

/// What `list` shows for the table.
#[derive(Debug, Clone)]
pub struct TableSummary {
    pub total: u64,
    pub pending: u64,
    /// created_at of the oldest pending row.
    pub oldest_pending: Option<DateTime<Utc>>,
    /// Every distinct pending reason with its count (grouped by fingerprint by the caller).
    pub reasons: Vec<(String, u64)>,
}

/// Decodes one record row; implemented per database by the same code.
pub trait DecodeRecord<R> {
    fn decode(&self, row: &R) -> Result<DeadLetter>;
}

macro_rules! impl_decode {
    ($row:ty) => {
        impl DecodeRecord<$row> for FailedTable {
            fn decode(&self, row: &$row) -> Result<DeadLetter> {
                let id = match self.schema.id {
                    IdKind::Int => RecordId::Int(row.try_get::<i64, _>(0).map_err(scrubbed)?),
                    IdKind::Text => RecordId::Text(row.try_get::<String, _>(0).map_err(scrubbed)?),
                };
                let text = |i: usize| -> Result<Option<String>> {
                    // Python's sqlite3 stores `bytes` as BLOB, and a text column can hold
                    // bytes that are not UTF-8: read them losslessly instead of failing.
                    match row.try_get::<Option<String>, _>(i) {
                        Ok(t) => Ok(t),
                        Err(_) => row
                            .try_get::<Option<Vec<u8>>, _>(i)
                            .map(|b| b.map(|b| escape_bytes(&b)))
                            .map_err(|e| {
                                anyhow!("row id {id}: column {}: {}", COLUMN_NAMES[i], scrubbed(e))
                            }),
                    }
                };
                let task = text(1)?;
                let args = text(2)?;
                let motivo = text(3)?;
                let mut unreadable_time = None;
                let created_at = match self.schema.created {
                    TimeKind::Tz => row.try_get::<Option<DateTime<Utc>>, _>(4).ok().flatten(),
                    TimeKind::Naive => row
                        .try_get::<Option<NaiveDateTime>, _>(4)
                        .ok()
                        .flatten()
                        .map(|n| Utc.from_utc_datetime(&n)),
                    TimeKind::Text => match row.try_get::<Option<String>, _>(4) {
                        Ok(Some(s)) => {
                            let t = crate::when::parse_stored_time(&s);
                            if t.is_none() && !s.trim().is_empty() {
                                unreadable_time = Some(s);
                            }
                            t
                        }
                        Ok(None) => None,
                        Err(_) => row
                            .try_get::<Option<i64>, _>(4)
                            .ok()
                            .flatten()
                            .and_then(|secs| Utc.timestamp_opt(secs, 0).single()),
                    },
                };
                let replayed: bool = row.try_get(5).map_err(scrubbed)?;
                let payload = match &args {
                    Some(text) => crate::model::payload_from_bytes(text.as_bytes()),
                    None => serde_json::Value::Null,
                };
                Ok(DeadLetter {
                    source: SourceKind::Table,
                    location: self.location(),
                    id,
                    task,
                    motivo,
                    created_at,
                    replayed,
                    payload,
                    headers: None,
                    death: None,
                    properties: None,
                    raw: None,
                    payload_text: args,
                    unreadable_time,
                    origin: None,
                })
            }
        }
    };
}

/// A text column, read losslessly: Python's sqlite3 stores `bytes` as BLOB, and a text
/// column can hold bytes that are not UTF-8.
fn text_or_bytes<'r, R: sqlx::Row>(row: &'r R, i: usize) -> Result<Option<String>, sqlx::Error>
where
    usize: sqlx::ColumnIndex<R>,
    Option<String>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    Option<Vec<u8>>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    match row.try_get::<Option<String>, _>(i) {
        Ok(t) => Ok(t),
        Err(_) => row
            .try_get::<Option<Vec<u8>>, _>(i)
            .map(|b| b.map(|b| escape_bytes(&b))),
    }
}

/// The record columns in `record_columns` order, for messages.
const COLUMN_NAMES: [&str; 6] = [
    "id",
    "task_original",
    "args",
    "motivo",
    "criada_em",
    "reprocessada",
];

/// Bytes as text: valid UTF-8 as it is, every other byte as `\xNN` (lossless, and shown
/// escaped rather than as replacement characters).
fn escape_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

impl_decode!(sqlx::postgres::PgRow);
impl_decode!(sqlx::mysql::MySqlRow);
impl_decode!(sqlx::sqlite::SqliteRow);

fn is_integer_type(t: &str) -> bool {
    let t = t.to_ascii_lowercase();
    [
        "int",
        "serial",
        "bigint",
        "smallint",
        "tinyint",
        "mediumint",
        "integer",
    ]
    .iter()
    .any(|k| t.contains(k))
}

fn time_kind(dialect: Dialect, data_type: &str) -> TimeKind {
    let t = data_type.to_ascii_lowercase();
    match dialect {
        Dialect::Postgres if t.starts_with("timestamp with time zone") || t == "timestamptz" => {
            TimeKind::Tz
        }
        Dialect::Postgres if t.starts_with("timestamp") => TimeKind::Naive,
        Dialect::MySql if t.starts_with("timestamp") => TimeKind::Tz,
        Dialect::MySql if t.starts_with("datetime") => TimeKind::Naive,
        _ => TimeKind::Text,
    }
}

/// Escapes LIKE wildcards with `!` (used with `ESCAPE '!'`).
pub fn like_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '%' | '_' | '!') {
            out.push('!');
        }
        out.push(c);
    }
    out
}

async fn read_columns(pool: &Pool, dialect: Dialect, table: &TableName) -> Result<Vec<Column>> {
    let rows: Vec<(String, String, bool)> = match (pool, dialect) {
        (Pool::Postgres(p), _) => {
            let rel = quote_ident(Dialect::Postgres, table);
            sqlx::query_as::<_, (String, String, bool)>(
                "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), NOT a.attnotnull \
                 FROM pg_attribute a WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped \
                 ORDER BY a.attnum",
            )
            .bind(rel)
            .fetch_all(p)
            .await
            .map_err(scrubbed)?
        }
        (Pool::MySql(p), _) => {
            let rows: Vec<(String, String, String)> = sqlx::query_as(
                "SELECT CAST(column_name AS CHAR), CAST(column_type AS CHAR), CAST(is_nullable AS CHAR) \
                 FROM information_schema.columns WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ? \
                 ORDER BY ordinal_position",
            )
            .bind(table.schema.clone())
            .bind(table.name.clone())
            .fetch_all(p)
            .await
            .map_err(scrubbed)?;
            rows.into_iter()
                .map(|(n, t, nul)| (n, t, nul.eq_ignore_ascii_case("YES")))
                .collect()
        }
        (Pool::Sqlite(p), _) => {
            let rows: Result<Vec<(String, String, i64)>, _> = sqlx::query_as(
                "SELECT name, type, \"notnull\" FROM pragma_table_info(?, COALESCE(?, 'main'))",
            )
            .bind(table.name.clone())
            .bind(table.schema.clone())
            .fetch_all(p)
            .await;
            let rows = match rows {
                // `--table public.x`: SQLite has no such schema, so no such table.
                Err(e) if e.to_string().contains("unknown database") => Vec::new(),
                r => r.map_err(scrubbed)?,
            };
            rows.into_iter().map(|(n, t, nn)| (n, t, nn == 0)).collect()
        }
    };
    Ok(rows
        .into_iter()
        .map(|(name, data_type, nullable)| Column {
            name,
            data_type,
            nullable,
        })
        .collect())
}

/// The DDL `dlq init` runs: the table and an index serving `WHERE NOT reprocessada`.
pub fn init_statements(dialect: Dialect, table: &TableName) -> Vec<String> {
    let q = quote_ident(dialect, table);
    let idx = match dialect {
        Dialect::MySql => format!("`{}_pendentes_idx`", table.name),
        _ => format!("\"{}_pendentes_idx\"", table.name),
    };
    match dialect {
        Dialect::Postgres => vec![
            format!(
                "CREATE TABLE IF NOT EXISTS {q} (\n  id BIGSERIAL PRIMARY KEY,\n  task_original VARCHAR(255) NOT NULL,\n  args JSONB,\n  motivo TEXT NOT NULL DEFAULT '',\n  criada_em TIMESTAMPTZ NOT NULL DEFAULT now(),\n  reprocessada BOOLEAN NOT NULL DEFAULT false,\n  reprocessada_em TIMESTAMPTZ\n)"
            ),
            format!("CREATE INDEX IF NOT EXISTS {idx} ON {q} (id) WHERE NOT reprocessada"),
        ],
        Dialect::MySql => vec![format!(
            "CREATE TABLE IF NOT EXISTS {q} (\n  id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,\n  task_original VARCHAR(255) NOT NULL,\n  args JSON NULL,\n  motivo TEXT NOT NULL,\n  criada_em DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),\n  reprocessada BOOLEAN NOT NULL DEFAULT FALSE,\n  reprocessada_em DATETIME(6) NULL,\n  INDEX {idx} (reprocessada, id)\n) DEFAULT CHARSET = utf8mb4"
        )],
        Dialect::Sqlite => vec![
            format!(
                "CREATE TABLE IF NOT EXISTS {q} (\n  id INTEGER PRIMARY KEY AUTOINCREMENT,\n  task_original TEXT NOT NULL,\n  args TEXT CHECK (args IS NULL OR json_valid(args)),\n  motivo TEXT NOT NULL DEFAULT '',\n  criada_em TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),\n  reprocessada INTEGER NOT NULL DEFAULT 0,\n  reprocessada_em TEXT\n)"
            ),
            format!("CREATE INDEX IF NOT EXISTS {idx} ON {q} (id) WHERE reprocessada = 0"),
        ],
    }
}

/// Runs `init_statements`; safe to run twice.
pub async fn init(pool: &Pool, dialect: Dialect, table: &TableName) -> Result<()> {
    // An existing table must have dlq's columns before its index is created: otherwise
    // PostgreSQL stops at `CREATE INDEX` naming only the first missing column.
    if !read_columns(pool, dialect, table).await?.is_empty() {
        FailedTable::check(pool.clone(), dialect, table).await?;
    }
    for stmt in init_statements(dialect, table) {
        with_pool!(pool, p => {
            sqlx::query(AssertSqlSafe(stmt)).execute(p).await.map_err(scrubbed)?;
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_escaping() {
        assert_eq!(like_escape("100%_done!"), "100!%!_done!!");
    }

    #[test]
    fn identifiers_are_quoted_per_dialect() {
        let t = TableName::parse("app.tasks_falhadas").unwrap();
        assert_eq!(
            quote_ident(Dialect::Postgres, &t),
            "\"app\".\"tasks_falhadas\""
        );
        assert_eq!(quote_ident(Dialect::MySql, &t), "`app`.`tasks_falhadas`");
    }

    #[test]
    fn time_kinds() {
        assert_eq!(
            time_kind(Dialect::Postgres, "timestamp with time zone"),
            TimeKind::Tz
        );
        assert_eq!(
            time_kind(Dialect::Postgres, "timestamp(6) without time zone"),
            TimeKind::Naive
        );
        assert_eq!(time_kind(Dialect::MySql, "datetime(6)"), TimeKind::Naive);
        assert_eq!(time_kind(Dialect::Sqlite, "DATETIME"), TimeKind::Text);
    }
}
