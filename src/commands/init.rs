//! `dlq init`: create the failed-task table (idempotent), then check it.

use crate::error::Exit;
use crate::output::Printer;
use crate::settings::Settings;
use crate::source::table;
use anyhow::Result;

pub struct Options {
    pub dry_run: bool,
}

pub async fn run(settings: &Settings, printer: &Printer, opts: Options) -> Result<Exit> {
    let db = settings.require_database()?;
    let statements = table::init_statements(db.dialect, &settings.table);
    if opts.dry_run {
        for s in statements {
            printer.data_line(&format!("{s};"))?;
        }
        return Ok(Exit::Ok);
    }
    // An existing table with the same name must still have what dlq needs: checked too.
    table::FailedTable::create(db, &settings.table).await?;
    printer.info(format!("table {} is ready", settings.table));
    Ok(Exit::Ok)
}
