//! Archive's transaction: read the selected rows (locked against a concurrent replay when
//! they are to be deleted), then delete exactly the archived ids, then commit.

use super::FailedTable;
use super::pool::{Tx, bind_all, scrubbed, with_tx};
use super::schema::Layout;
use super::sql::Statement;
use crate::model::{DeadLetter, RecordId};
use crate::select::Selection;
use anyhow::{Context, Result};
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use sqlx::AssertSqlSafe;

/// Rows deleted per DELETE statement.
const DELETE_CHUNK: usize = 500;

/// One archive run's transaction. Dropped without `commit`, it rolls back: nothing is
/// deleted.
pub(crate) struct ArchiveSession<'a> {
    layout: &'a Layout,
    tx: Tx,
    /// The selection's query, until `records` runs it.
    select: Option<Statement>,
}

impl FailedTable {
    /// Begins the archive transaction for `sel`. With `delete`, the rows read are locked
    /// (`FOR UPDATE SKIP LOCKED`; SQLite: `BEGIN IMMEDIATE`) until the commit.
    pub(crate) async fn archive_session(
        &self,
        sel: &Selection,
        delete: bool,
    ) -> Result<ArchiveSession<'_>> {
        let select = self.layout.archive_select_stmt(sel, delete)?;
        let tx = self.pool.begin(delete).await.map_err(scrubbed)?;
        Ok(ArchiveSession {
            layout: &self.layout,
            tx,
            select: Some(select),
        })
    }
}

impl ArchiveSession<'_> {
    /// The records SQL pre-selects, in id order (the caller applies the selection). Runs
    /// the query once: a second call yields nothing.
    pub(crate) fn records(&mut self) -> BoxStream<'_, Result<DeadLetter>> {
        let Some(stmt) = self.select.take() else {
            return futures_util::stream::empty().boxed();
        };
        let layout = self.layout;
        with_tx!(&mut self.tx, |t| {
            bind_all!(sqlx::query(AssertSqlSafe(stmt.sql)), stmt.binds)
                .fetch(&mut **t)
                .map(move |row| layout.decode(&row.map_err(scrubbed)?))
                .boxed()
        })
    }

    /// Deletes these rows (in chunks, inside the transaction); returns how many went.
    pub(crate) async fn delete(&mut self, ids: &[RecordId]) -> Result<u64> {
        let mut deleted = 0;
        for chunk in ids.chunks(DELETE_CHUNK) {
            let stmt = self.layout.delete_stmt(chunk)?;
            let done = with_tx!(&mut self.tx, |t| {
                bind_all!(sqlx::query(AssertSqlSafe(stmt.sql)), stmt.binds)
                    .execute(&mut **t)
                    .await
                    .map(|r| r.rows_affected())
            });
            deleted += done
                .map_err(scrubbed)
                .context("deleting archived rows (nothing was deleted: the archive stays valid)")?;
        }
        Ok(deleted)
    }

    pub(crate) async fn commit(self) -> Result<()> {
        self.tx
            .commit()
            .await
            .map_err(scrubbed)
            .context("committing the deletion (nothing was deleted)")
    }
}
