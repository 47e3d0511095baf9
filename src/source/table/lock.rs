//! The archive lock: one archive run per table at a time, across processes and hosts.

use super::FailedTable;
use super::pool::{Pool, scrubbed};
use crate::source::table::DatabaseUrl;
use anyhow::{Context, Result, anyhow};
use sqlx::Acquire;

/// Held for the whole of an archive run so that two overlapping runs (cron and a person)
/// never archive or delete the same rows. Released when dropped (the session or file closes).
pub(crate) struct ArchiveLock {
    _held: Held,
}

/// What holds the lock: a session (the lock is the session's) or an open file.
#[allow(dead_code, reason = "held to be dropped, never read")]
enum Held {
    Postgres(sqlx::postgres::PgConnection),
    MySql(sqlx::mysql::MySqlConnection),
    File(std::fs::File),
    /// In-memory SQLite: nobody else can see it.
    None,
}

impl FailedTable {
    /// Takes the archive lock or fails at once naming who holds it.
    pub(crate) async fn archive_lock(&self, db: &DatabaseUrl) -> Result<ArchiveLock> {
        let name = &self.layout.name;
        let key = format!("dlq-archive:{name}");
        let held = match &self.pool {
            Pool::Postgres(p) => {
                let mut conn = p.acquire().await.map_err(scrubbed)?.detach();
                let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock(hashtext($1))")
                    .bind(&key)
                    .fetch_one(conn.acquire().await.map_err(scrubbed)?)
                    .await
                    .map_err(scrubbed)?;
                got.then_some(Held::Postgres(conn))
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
                (got == Some(1)).then_some(Held::MySql(conn))
            }
            Pool::Sqlite(_) => match sqlite_path(&db.url) {
                None => Some(Held::None),
                Some(path) => lock_file(path, &name.to_string())?,
            },
        };
        held.map(|h| ArchiveLock { _held: h }).ok_or_else(|| {
            anyhow!(
                "another dlq archive run holds the lock on table {name} (try again when it is done)"
            )
        })
    }
}

/// Locks `<database file>.<table>.dlq-archive.lock`; `None` when another process holds it.
fn lock_file(path: std::path::PathBuf, table: &str) -> Result<Option<Held>> {
    let mut lock_path = path.into_os_string();
    lock_path.push(format!(".{table}.dlq-archive.lock"));
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
        Ok(()) => Ok(Some(Held::File(file))),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(anyhow!(e).context("locking the archive lock file"))
        }
    }
}

/// The file behind a SQLite URL (`sqlite://path`, `sqlite:path`); `None` for in-memory.
fn sqlite_path(url: &str) -> Option<std::path::PathBuf> {
    let rest = url.strip_prefix("sqlite:")?;
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let path = rest.split('?').next().unwrap_or("");
    if path.is_empty() || path == ":memory:" || url.contains("mode=memory") {
        None
    } else {
        Some(std::path::PathBuf::from(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_paths() {
        assert_eq!(
            sqlite_path("sqlite:///tmp/dlq.db?mode=rwc"),
            Some("/tmp/dlq.db".into())
        );
        assert_eq!(sqlite_path("sqlite:dlq.db"), Some("dlq.db".into()));
        assert_eq!(sqlite_path("sqlite::memory:"), None);
        assert_eq!(sqlite_path("sqlite://x.db?mode=memory"), None);
        assert_eq!(sqlite_path("postgres://h/db"), None);
    }
}
