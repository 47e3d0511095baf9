//! Where dead letters live: the failed-task table and RabbitMQ queues.
pub mod sql;

use crate::model::DeadLetter;
use crate::select::Selection;
use crate::settings::Settings;
use anyhow::Result;
use tokio::sync::mpsc;

/// Which source a command acts on.
#[derive(Debug, Clone, Default)]
pub enum SourceChoice {
    /// The failed-task table (default).
    #[default]
    Table,
    /// RabbitMQ dead-letter queues.
    Queues(QueueOptions),
}

#[derive(Debug, Clone, Default)]
pub struct QueueOptions {
    pub names: Vec<String>,
    /// Extra headers holding error text for `motivo`.
    pub motivo_headers: Vec<String>,
    /// Read a quorum queue even near its delivery limit.
    pub force: bool,
}

/// Candidate records for a selection, streamed with bounded memory. The caller wraps
/// the receiver in `select::Selected` for the final decision.
pub async fn open_stream(
    settings: &Settings,
    source: &SourceChoice,
    sel: &Selection,
) -> Result<mpsc::Receiver<Result<DeadLetter>>> {
    match source {
        SourceChoice::Table => {
            let db = settings.require_database()?;
            let table = sql::FailedTable::open(db, &settings.table).await?;
            table.stream(sel)
        }
        SourceChoice::Queues(_) => Err(crate::error::usage(
            "reading RabbitMQ queues (-Q) is not available yet",
        )),
    }
}
