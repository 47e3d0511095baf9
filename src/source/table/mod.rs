//! The failed-task table (`tasks_falhadas`) on PostgreSQL, MySQL/MariaDB and SQLite.
//!
//! This directory is the only place that speaks SQL or touches sqlx: the rest of the crate
//! sees `FailedTable` and the sessions it opens (a replay `Claim`, an `ArchiveSession`),
//! which take and give `DeadLetter`s, ids and counts. Nothing here knows about brokers,
//! archives' file format or the command line.
//!
//! - `pool.rs`: connecting, transactions, error scrubbing, the per-database dispatch macros
//! - `schema.rs`: column detection (`Layout`: what SQL and decoding depend on)
//! - `sql.rs`: every statement's text and bound values (pure, unit-tested per dialect)
//! - `decode.rs`: record row -> `DeadLetter`
//! - `ddl.rs`: `dlq init`
//! - `claim.rs`, `archive.rs`, `lock.rs`: replay's and archive's transactions, archive's lock
//! - `testing.rs`: the integration tests' seam (`crate::testing`)
//!
//! Rows are streamed (bounded channel, flat memory).

mod archive;
mod claim;
mod ddl;
mod decode;
mod lock;
mod pool;
mod schema;
mod sql;
#[doc(hidden)]
pub(crate) mod testing;
pub(crate) mod url;

pub(crate) use archive::ArchiveSession;
pub(crate) use claim::ClaimError;
pub(crate) use ddl::init_statements;
pub(crate) use url::{DatabaseUrl, Dialect, TableName};

use crate::model::DeadLetter;
use crate::select::Selection;
use anyhow::Result;
use chrono::{DateTime, Utc};
use futures_util::TryStreamExt;
use pool::{Pool, bind_all, scrubbed, with_pool};
use schema::Layout;
use sqlx::{AssertSqlSafe, Row};
use tokio::sync::mpsc;

/// Rows in flight between the database and the consumer: bounds memory.
const CHANNEL_DEPTH: usize = 256;

/// A connected, checked failed-task table.
#[derive(Clone)]
pub(crate) struct FailedTable {
    pool: Pool,
    layout: Layout,
}

/// What `list` shows for the table.
#[derive(Debug, Clone)]
pub(crate) struct TableSummary {
    pub(crate) total: u64,
    pub(crate) pending: u64,
    /// created_at of the oldest pending row.
    pub(crate) oldest_pending: Option<DateTime<Utc>>,
    /// Every distinct pending reason with its count (grouped by fingerprint by the caller).
    pub(crate) reasons: Vec<(String, u64)>,
}

impl FailedTable {
    /// Connects and checks that the table exists with the required columns.
    pub(crate) async fn open(db: &DatabaseUrl, table: &TableName) -> Result<FailedTable> {
        let pool = pool::connect(db, false).await?;
        FailedTable::check(pool, db, table).await
    }

    /// Like `open`, with a pool big enough for `max` concurrent connections.
    pub(crate) async fn open_sized(
        db: &DatabaseUrl,
        table: &TableName,
        max: u32,
    ) -> Result<FailedTable> {
        let pool = pool::connect_sized(db, false, max).await?;
        FailedTable::check(pool, db, table).await
    }

    /// `dlq init`: creates the table (and SQLite's file) unless it exists, then checks that
    /// what is there has what dlq needs. Safe to run twice.
    pub(crate) async fn create(db: &DatabaseUrl, table: &TableName) -> Result<FailedTable> {
        let pool = pool::connect(db, true).await?;
        ddl::init(&pool, db.dialect, table).await?;
        FailedTable::check(pool, db, table).await
    }

    async fn check(pool: Pool, db: &DatabaseUrl, table: &TableName) -> Result<FailedTable> {
        let layout = schema::detect(&pool, db.dialect, table).await?;
        Ok(FailedTable { pool, layout })
    }

    /// Display name for records' `location`.
    pub(crate) fn location(&self) -> String {
        self.layout.location()
    }

    /// Closes the pool's connections now rather than when the last clone drops.
    pub(crate) async fn close(&self) {
        self.pool.close().await
    }

    /// Streams the records SQL pre-selects, ordered by id. The consumer applies the
    /// selection (`select::Selected`); dropping the receiver stops the query.
    pub(crate) fn stream(&self, sel: &Selection) -> Result<mpsc::Receiver<Result<DeadLetter>>> {
        let stmt = self.layout.select_stmt(sel)?;
        let (tx, rx) = mpsc::channel(CHANNEL_DEPTH);
        let table = self.clone();
        tokio::spawn(async move {
            let result: Result<()> = async {
                with_pool!(&table.pool, |p| {
                    let q = bind_all!(sqlx::query(AssertSqlSafe(stmt.sql)), stmt.binds);
                    let mut rows = q.fetch(p);
                    while let Some(row) = rows.try_next().await.map_err(scrubbed)? {
                        if tx.send(table.layout.decode(&row)).await.is_err() {
                            break; // consumer has what it needs
                        }
                    }
                    Ok(())
                })
            }
            .await;
            if let Err(e) = result {
                let context = format!("reading table {}", table.layout.name);
                let _ = tx.send(Err(e.context(context))).await;
            }
        });
        Ok(rx)
    }

    /// `SELECT COUNT(*)` for a selection that SQL decides exactly; `None` otherwise.
    pub(crate) async fn count_exact(&self, sel: &Selection) -> Result<Option<u64>> {
        let Some(stmt) = self.layout.count_stmt(sel)? else {
            return Ok(None);
        };
        let n: i64 = with_pool!(&self.pool, |p| {
            bind_all!(sqlx::query_scalar(AssertSqlSafe(stmt.sql)), stmt.binds)
                .fetch_one(p)
                .await
                .map_err(scrubbed)?
        });
        let n = n.max(0) as u64;
        Ok(Some(sel.limit.map_or(n, |l| n.min(l))))
    }

    /// Counts for `list`: all rows, pending rows, oldest pending, and reasons with counts.
    pub(crate) async fn summary(&self) -> Result<TableSummary> {
        let sql = self.layout.summary_sql();
        let count = |n: i64| n.max(0) as u64;
        with_pool!(&self.pool, |p| {
            let total: i64 = sqlx::query_scalar(AssertSqlSafe(sql.total))
                .fetch_one(p)
                .await
                .map_err(scrubbed)?;
            let pending: i64 = sqlx::query_scalar(AssertSqlSafe(sql.pending))
                .fetch_one(p)
                .await
                .map_err(scrubbed)?;
            let oldest = sqlx::query(AssertSqlSafe(sql.oldest))
                .fetch_optional(p)
                .await
                .map_err(scrubbed)?;
            let oldest_pending = match oldest {
                Some(row) => self.layout.decode(&row)?.created_at,
                None => None,
            };
            let mut reasons: Vec<(String, u64)> = Vec::new();
            let mut rows = sqlx::query(AssertSqlSafe(sql.reasons)).fetch(p);
            while let Some(row) = rows.try_next().await.map_err(scrubbed)? {
                let motivo = decode::text_or_bytes(&row, 0).map_err(scrubbed)?;
                let n: i64 = row.try_get(1).map_err(scrubbed)?;
                reasons.push((motivo.unwrap_or_default(), count(n)));
            }
            Ok(TableSummary {
                total: count(total),
                pending: count(pending),
                oldest_pending,
                reasons,
            })
        })
    }
}
