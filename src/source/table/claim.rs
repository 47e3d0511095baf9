//! Replay's transaction: claim a group of rows, and later mark the ones the broker
//! confirmed and commit. Between the two the rows stay locked (`FOR UPDATE SKIP LOCKED`;
//! SQLite: `BEGIN IMMEDIATE`), so no other run replays them.

use super::FailedTable;
use super::pool::{Tx, bind_all, scrubbed, with_tx};
use super::schema::Layout;
use crate::model::{DeadLetter, RecordId};
use crate::select::ReplayedFilter;
use anyhow::Result;
use chrono::{DateTime, Utc};
use sqlx::AssertSqlSafe;

/// Claimed rows' open transaction. Dropped without `mark_and_commit`, it rolls back and
/// the rows are free again.
pub(crate) struct Claim<'a> {
    layout: &'a Layout,
    tx: Tx,
}

/// Why nothing was claimed.
#[derive(Debug)]
pub(crate) enum ClaimError {
    /// An id that cannot be bound (a text id for an integer column).
    Input(anyhow::Error),
    /// The database refused the transaction or the query.
    Database(anyhow::Error),
}

impl FailedTable {
    /// Locks those of `ids` still selectable by `replayed` and not held by another run, in
    /// one new transaction. Returns it with each claimed row decoded, in id order (a row that
    /// cannot be decoded is an `Err` in its place).
    pub(crate) async fn claim(
        &self,
        ids: &[RecordId],
        replayed: ReplayedFilter,
    ) -> Result<(Claim<'_>, Vec<Result<DeadLetter>>), ClaimError> {
        let stmt = self
            .layout
            .claim_stmt(ids, replayed)
            .map_err(ClaimError::Input)?;
        let database = |e| ClaimError::Database(scrubbed(e));
        // SQLite: take the write lock now, so that the claim is the lock.
        let mut tx = self.pool.begin(true).await.map_err(database)?;
        let layout = &self.layout;
        let records = with_tx!(&mut tx, |t| {
            bind_all!(sqlx::query(AssertSqlSafe(stmt.sql)), stmt.binds)
                .fetch_all(&mut **t)
                .await
                .map(|rows| rows.iter().map(|row| layout.decode(row)).collect())
        })
        .map_err(database)?;
        Ok((Claim { layout, tx }, records))
    }
}

impl FailedTable {
    /// Marks `ids` replayed outside any claim (`--mark-on-success`: once their tasks
    /// succeeded), a few hundred per statement, each statement committed.
    pub(crate) async fn mark(&self, ids: &[RecordId], at: DateTime<Utc>) -> Result<()> {
        for chunk in ids.chunks(500) {
            let stmt = self.layout.mark_stmt(chunk, at)?;
            let mut tx = self.pool.begin(false).await.map_err(scrubbed)?;
            with_tx!(&mut tx, |t| {
                bind_all!(sqlx::query(AssertSqlSafe(stmt.sql)), stmt.binds)
                    .execute(&mut **t)
                    .await
                    .map(|_| ())
            })
            .map_err(scrubbed)?;
            tx.commit().await.map_err(scrubbed)?;
        }
        Ok(())
    }
}

impl Claim<'_> {
    /// Marks `confirmed` replayed (at `at`, where the table records when) and commits.
    pub(crate) async fn mark_and_commit(
        self,
        confirmed: &[RecordId],
        at: DateTime<Utc>,
    ) -> Result<()> {
        let stmt = self.layout.mark_stmt(confirmed, at)?;
        let mut tx = self.tx;
        let marked = with_tx!(&mut tx, |t| {
            bind_all!(sqlx::query(AssertSqlSafe(stmt.sql)), stmt.binds)
                .execute(&mut **t)
                .await
                .map(|_| ())
        });
        match marked {
            Ok(()) => tx.commit().await.map_err(scrubbed),
            Err(e) => Err(scrubbed(e)),
        }
    }
}
