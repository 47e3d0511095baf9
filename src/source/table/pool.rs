//! The connection layer: the pool (one of three concrete sqlx pools), transactions, and
//! how database errors are worded and scrubbed before they travel.

use crate::error::usage;
use crate::redact;
use crate::source::table::{DatabaseUrl, Dialect};
use anyhow::{Context, Result, anyhow};
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};
use std::str::FromStr;
use std::time::Duration;

#[derive(Clone)]
pub(super) enum Pool {
    Postgres(PgPool),
    MySql(MySqlPool),
    Sqlite(SqlitePool),
}

/// A transaction on whichever database the pool reaches; rolled back when dropped.
pub(super) enum Tx {
    Postgres(sqlx::Transaction<'static, sqlx::Postgres>),
    MySql(sqlx::Transaction<'static, sqlx::MySql>),
    Sqlite(sqlx::Transaction<'static, sqlx::Sqlite>),
}

/// Runs the same code against whichever concrete pool we have; each arm is type-checked
/// with its own concrete database types. Written `with_pool!(pool, |p| body)` so that
/// rustfmt formats the body.
macro_rules! with_pool {
    ($pool:expr, |$p:ident| $body:expr) => {
        match $pool {
            $crate::source::table::pool::Pool::Postgres($p) => $body,
            $crate::source::table::pool::Pool::MySql($p) => $body,
            $crate::source::table::pool::Pool::Sqlite($p) => $body,
        }
    };
}

/// Like `with_pool!`, for a `&mut Tx`: `$t` is the concrete `&mut sqlx::Transaction`.
macro_rules! with_tx {
    ($tx:expr, |$t:ident| $body:expr) => {
        match $tx {
            $crate::source::table::pool::Tx::Postgres($t) => $body,
            $crate::source::table::pool::Tx::MySql($t) => $body,
            $crate::source::table::pool::Tx::Sqlite($t) => $body,
        }
    };
}

/// Binds every value to a sqlx query, whatever the database.
macro_rules! bind_all {
    ($query:expr, $binds:expr) => {{
        let mut q = $query;
        for b in $binds {
            q = match b {
                $crate::source::table::sql::Bind::I64(v) => q.bind(v),
                $crate::source::table::sql::Bind::Text(v) => q.bind(v),
                $crate::source::table::sql::Bind::Bool(v) => q.bind(v),
                $crate::source::table::sql::Bind::Tz(v) => q.bind(v),
                $crate::source::table::sql::Bind::Naive(v) => q.bind(v),
            };
        }
        q
    }};
}

pub(super) use {bind_all, with_pool, with_tx};

impl Pool {
    /// Begins a transaction. `immediate`: on SQLite, take the write lock at `BEGIN`
    /// (`BEGIN IMMEDIATE`), so that two writers queue instead of failing at their first write.
    pub(super) async fn begin(&self, immediate: bool) -> Result<Tx, sqlx::Error> {
        Ok(match self {
            Pool::Postgres(p) => Tx::Postgres(p.begin().await?),
            Pool::MySql(p) => Tx::MySql(p.begin().await?),
            Pool::Sqlite(p) if immediate => Tx::Sqlite(p.begin_with("BEGIN IMMEDIATE").await?),
            Pool::Sqlite(p) => Tx::Sqlite(p.begin().await?),
        })
    }

    pub(super) async fn close(&self) {
        with_pool!(self, |p| p.close().await)
    }
}

impl Tx {
    pub(super) async fn commit(self) -> Result<(), sqlx::Error> {
        match self {
            Tx::Postgres(t) => t.commit().await,
            Tx::MySql(t) => t.commit().await,
            Tx::Sqlite(t) => t.commit().await,
        }
    }
}

/// Connects to the database; `create` lets SQLite create a missing file (for `init`).
pub(super) async fn connect(db: &DatabaseUrl, create: bool) -> Result<Pool> {
    connect_sized(db, create, 8).await
}

/// Like `connect`, with room for `max` concurrent connections (replay workers each hold one).
pub(super) async fn connect_sized(db: &DatabaseUrl, create: bool, max: u32) -> Result<Pool> {
    let shown = redact::url(&db.url);
    let ctx = || format!("cannot connect to database {shown}");
    let invalid =
        |e: sqlx::Error| usage(redact::scrub(&format!("invalid database URL {shown}: {e}")));
    // A dead database must fail fast, not hang a cron job.
    let acquire = Duration::from_secs(10);
    let pool = match db.dialect {
        Dialect::Postgres => {
            let opts = PgConnectOptions::from_str(&db.url)
                .map_err(invalid)?
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
            let opts = MySqlConnectOptions::from_str(&db.url).map_err(invalid)?;
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
                .map_err(invalid)?
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
pub(super) fn scrubbed(e: sqlx::Error) -> anyhow::Error {
    anyhow!(redact::scrub(&without_server_line(&e.to_string())))
}

/// PostgreSQL errors end in the server's own source line (`... at line 3665`): noise for
/// an operator.
fn without_server_line(text: &str) -> String {
    static AT_LINE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = AT_LINE.get_or_init(|| regex::Regex::new(r" at line \d+\b").expect("valid regex"));
    re.replace_all(text, "").into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_servers_source_line_is_dropped() {
        assert_eq!(
            without_server_line("relation \"x\" does not exist at line 3665"),
            "relation \"x\" does not exist"
        );
        assert_eq!(
            without_server_line("at line 12b stays"),
            "at line 12b stays"
        );
    }
}
