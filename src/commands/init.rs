//! `dlq init`: create the failed-task table (idempotent), then check it.

use crate::error::Exit;
use crate::output::Printer;
use crate::settings::Settings;
use crate::source::table;
use anyhow::Result;

pub(crate) struct Options {
    pub(crate) dry_run: bool,
}

/// `dlq init`'s flags, as its options.
pub(crate) fn lower(a: crate::cli::InitArgs) -> Options {
    Options { dry_run: a.dry_run }
}

pub(crate) async fn run(settings: &Settings, printer: &Printer, opts: Options) -> Result<Exit> {
    let db = settings.endpoints.require_database()?;
    let (table, db) = (&db.table, &db.url);
    let statements = table::init_statements(db.dialect, table);
    if opts.dry_run {
        for s in statements {
            printer.data_line(&format!("{s};"))?;
        }
        return Ok(Exit::Ok);
    }
    // An existing table with the same name must still have what dlq needs: checked too.
    table::FailedTable::create(db, table).await?;
    printer.info(format!("table {table} is ready"));
    Ok(Exit::Ok)
}
