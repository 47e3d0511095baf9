//! `dlq archive`: write selected dead letters to an archive, optionally deleting them.

use super::lower;
use crate::archive;
use crate::cli::ArchiveArgs;
use crate::error::Exit;
use crate::output::Printer;
use crate::settings::Settings;
use crate::source::SourceChoice;
use anyhow::Result;
use chrono::{DateTime, Utc};

/// Which engine archives, with its options.
pub(crate) enum Request {
    Table(archive::table::Options),
    Queue(archive::queue::Options),
}

/// `dlq archive`'s flags, as the table's or the queues' options.
pub(crate) fn lower(a: ArchiveArgs, now: DateTime<Utc>) -> Result<Request> {
    let selection = lower::selection(&a.selection, now)?;
    let safety = lower::safety(&a.safety);
    Ok(match lower::source(&a.source) {
        SourceChoice::Table => Request::Table(archive::table::Options {
            selection,
            to: a.to,
            delete: a.delete,
            safety,
        }),
        SourceChoice::Queues(q) => Request::Queue(archive::queue::Options {
            queues: q.names,
            record: crate::source::queue::RecordOptions {
                motivo_headers: q.motivo_headers,
                ..Default::default()
            },
            force: q.force,
            selection,
            to: a.to,
            delete: a.delete,
            safety,
        }),
    })
}

pub(crate) async fn run(settings: &Settings, printer: &Printer, req: Request) -> Result<Exit> {
    match req {
        Request::Table(o) => archive::table::run(&settings.endpoints, printer, o).await,
        Request::Queue(o) => archive::queue::run(&settings.endpoints, printer, o).await,
    }
}
