//! Archiving failed-task rows.
//!
//! With `--delete`, the rows are read inside one transaction that locks them (`FOR UPDATE
//! SKIP LOCKED`; SQLite: `BEGIN IMMEDIATE`), so a concurrent replay can neither mark nor
//! re-dispatch what is being archived. The archive is written, flushed, fsynced and renamed
//! into place; only then are exactly the archived ids deleted and the transaction committed.
//! A crash or a full disk before that point deletes nothing.

use super::ArchiveWriter;
use crate::bulk::Safety;
use crate::endpoints::Endpoints;
use crate::error::{Exit, usage};
use crate::model::RecordId;
use crate::output::Printer;
use crate::select::{Selection, Selector};
use crate::settings::Dialect;
use crate::source::table::{DecodeRecord, FailedTable, SqlBuilder, scrubbed};
use crate::{bind_all, with_pool};
use anyhow::{Context, Result};
use futures_util::TryStreamExt;
use std::path::PathBuf;

/// Rows deleted per DELETE statement.
const DELETE_CHUNK: usize = 500;

pub struct Options {
    pub selection: Selection,
    pub to: PathBuf,
    pub delete: bool,
    pub safety: Safety,
}

pub async fn run(endpoints: &Endpoints, printer: &Printer, opts: Options) -> Result<Exit> {
    let db = endpoints.require_database()?;
    if opts.delete && opts.to.as_os_str() == "-" {
        return Err(usage(
            "--delete needs an archive file: stdout cannot be fsynced before deleting",
        ));
    }
    let table = FailedTable::open(&db.url, &db.table).await?;
    let _lock = table.archive_lock(&db.url).await?;
    let destination = super::destination(&opts.to);
    let mut audit = super::audit(
        endpoints,
        printer,
        opts.delete,
        "table",
        table.location(),
        opts.selection.describe(),
    );

    if opts.safety.dry_run || (opts.delete && !opts.safety.yes) {
        let n = count(&table, &opts.selection).await?;
        let intent = super::Intent {
            count: n,
            what: format!("row(s) of table {}", table.location()),
            selection: &opts.selection.describe(),
            to: &opts.to,
            delete: opts.delete,
            safety: opts.safety,
        };
        if let Some(exit) = super::confirm(printer, intent, audit.as_mut()).await? {
            return Ok(exit);
        }
    }
    // Under --yes there was no gate: the run starts here.
    if let Some(a) = audit.as_mut() {
        a.start(None)?;
    }

    let header = super::header("table", &table.location(), &opts.selection.describe());
    let mut writer = ArchiveWriter::create(&opts.to, &header)?;
    let mut b = SqlBuilder::new(table.dialect);
    let sql = select_sql(&table, &opts, &mut b)?;
    let bar = printer.progress(None, "archiving");
    let mut selector = Selector::new(&opts.selection);

    let (archived, deleted) = with_pool!(&table.pool, p => {
        let mut tx = if table.dialect == Dialect::Sqlite && opts.delete {
            p.begin_with("BEGIN IMMEDIATE").await
        } else {
            p.begin().await
        }
        .map_err(scrubbed)?;
        let mut ids: Vec<RecordId> = Vec::new();
        {
            let mut rows = bind_all!(sqlx::query(sqlx::AssertSqlSafe(sql)), b.binds).fetch(&mut *tx);
            while let Some(row) = rows.try_next().await.map_err(scrubbed)? {
                if selector.full() {
                    break;
                }
                let mut rec = table.decode(&row)?;
                if !selector.offer(&rec) {
                    continue;
                }
                // The stored args text, so that a restore re-dispatches exactly what was stored.
                rec.raw = rec.payload_text.as_ref().map(|t| serde_json::json!({ "args": t }));
                writer.write(&rec)?;
                if opts.delete {
                    ids.push(rec.id);
                }
                bar.inc(1);
            }
        }
        let trailer = writer.finish()?;
        let mut deleted: u64 = 0;
        if opts.delete {
            for chunk in ids.chunks(DELETE_CHUNK) {
                let mut db_ = SqlBuilder::new(table.dialect);
                let ps = table.id_params(&mut db_, chunk)?;
                let del = format!("DELETE FROM {} WHERE id IN ({ps})", table.quoted);
                let r = bind_all!(sqlx::query(sqlx::AssertSqlSafe(del)), db_.binds)
                    .execute(&mut *tx)
                    .await
                    .map_err(scrubbed)
                    .context("deleting archived rows (nothing was deleted: the archive stays valid)")?;
                deleted += r.rows_affected();
            }
        }
        tx.commit().await.map_err(scrubbed).context("committing the deletion (nothing was deleted)")?;
        Ok::<_, anyhow::Error>((trailer, deleted))
    })?;
    bar.finish_and_clear();
    if let Some(w) = selector.warning() {
        printer.warn(w);
    }
    let deleted_note = opts.delete.then(|| format!(", {deleted} deleted"));
    printer.info(format!(
        "archive: {} row(s) of table {} -> {destination} (sha256 {}){}",
        archived.count,
        table.location(),
        &archived.sha256[..16],
        deleted_note.unwrap_or_default()
    ));
    super::audit_end(audit.as_mut(), archived.count, deleted);
    Ok(Exit::Ok)
}

/// The rows to archive, in id order; with --delete locked against a concurrent replay.
fn select_sql(table: &FailedTable, opts: &Options, b: &mut SqlBuilder) -> Result<String> {
    let (clause, exact) = table.where_clause(&opts.selection, b)?;
    let limit = match (exact, opts.selection.limit) {
        (true, Some(n)) => format!(" LIMIT {n}"),
        _ => String::new(),
    };
    let lock = match (opts.delete, table.dialect) {
        (true, Dialect::Postgres | Dialect::MySql) => " FOR UPDATE SKIP LOCKED",
        _ => "",
    };
    Ok(format!(
        "SELECT {} FROM {}{clause} ORDER BY id{limit}{lock}",
        table.record_columns(),
        table.quoted
    ))
}

async fn count(table: &FailedTable, sel: &Selection) -> Result<u64> {
    if let Some(n) = table.count_exact(sel).await? {
        return Ok(n);
    }
    let mut selected = crate::select::Selected::new(table.stream(sel)?, sel);
    let mut n = 0;
    while let Some(r) = selected.next().await {
        r?;
        n += 1;
    }
    Ok(n)
}
