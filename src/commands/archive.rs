//! `dlq archive`: write selected dead letters to an archive, optionally deleting them.

use crate::archive;
use crate::cli::ArchiveArgs;
use crate::error::Exit;
use crate::output::Printer;
use crate::select::Selection;
use crate::settings::Settings;
use crate::source::SourceChoice;
use anyhow::Result;

pub async fn run(
    settings: &Settings,
    printer: &Printer,
    source: SourceChoice,
    selection: Selection,
    a: &ArchiveArgs,
) -> Result<Exit> {
    match source {
        SourceChoice::Table => {
            let opts = archive::table::Options {
                selection,
                to: a.to.clone(),
                delete: a.delete,
                safety: (&a.safety).into(),
            };
            archive::table::run(&settings.endpoints, printer, opts).await
        }
        SourceChoice::Queues(q) => {
            let opts = archive::queue::Options {
                queues: q.names,
                record: crate::source::queue::RecordOptions {
                    motivo_headers: q.motivo_headers,
                    ..Default::default()
                },
                force: q.force,
                selection,
                to: a.to.clone(),
                delete: a.delete,
                safety: (&a.safety).into(),
            };
            archive::queue::run(&settings.endpoints, printer, opts).await
        }
    }
}
