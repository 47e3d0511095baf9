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
use crate::source::table::{ArchiveSession, FailedTable};
use anyhow::Result;
use futures_util::TryStreamExt;
use std::path::PathBuf;

pub(crate) struct Options {
    pub(crate) selection: Selection,
    pub(crate) to: PathBuf,
    pub(crate) delete: bool,
    pub(crate) safety: Safety,
}

pub(crate) async fn run(endpoints: &Endpoints, printer: &Printer, opts: Options) -> Result<Exit> {
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
    let mut session = table.archive_session(&opts.selection, opts.delete).await?;
    let bar = printer.progress(None, "archiving");
    let mut selector = Selector::new(&opts.selection);
    let ids = write_records(&mut session, &mut writer, &mut selector, &bar, opts.delete).await?;
    let archived = writer.finish().await?;
    let deleted = if opts.delete {
        session.delete(&ids).await?
    } else {
        0
    };
    session.commit().await?;
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
    super::audit_end(
        audit.as_mut(),
        archived.count,
        deleted,
        crate::error::Exit::Ok,
        None,
    );
    Ok(Exit::Ok)
}

/// Streams the selected records into the archive; returns the ids written when they are
/// to be deleted (else none).
async fn write_records(
    session: &mut ArchiveSession<'_>,
    writer: &mut ArchiveWriter,
    selector: &mut Selector<'_>,
    bar: &indicatif::ProgressBar,
    delete: bool,
) -> Result<Vec<RecordId>> {
    let mut ids: Vec<RecordId> = Vec::new();
    let mut records = session.records();
    // A signal stops the archive: no file kept, nothing deleted. Before, nothing listened:
    // dlq ended by the signal's default, leaving the `.partial` file.
    let mut signals = crate::signals::listen();
    let mut rows = 0u64;
    while !selector.full() {
        // The rows come buffered: without a yield now and then, the signal watch (a task on
        // the same thread) would not run until the file was whole.
        rows += 1;
        if rows.is_multiple_of(256) {
            tokio::task::yield_now().await;
        }
        if signals.came() {
            return Err(crate::error::interrupted(
                "interrupted while writing the archive: no file was kept and nothing was deleted",
            ));
        }
        let Some(mut rec) = records.try_next().await? else {
            break;
        };
        if !selector.offer(&rec) {
            continue;
        }
        // The stored args text, so that a restore re-dispatches exactly what was stored.
        rec.raw = rec
            .payload_text
            .as_ref()
            .map(|t| serde_json::json!({ "args": t }));
        writer.write(&rec)?;
        writer.ready().await?;
        if delete {
            ids.push(rec.id);
        }
        bar.inc(1);
    }
    Ok(ids)
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
