//! Where dead letters live: the failed-task table and RabbitMQ queues.
pub(crate) mod framework;
pub(crate) mod overview;
pub(crate) mod queue;
pub(crate) mod summary;
pub(crate) mod table;

use crate::endpoints::Endpoints;
use crate::model::DeadLetter;
use crate::output::Printer;
use crate::select::Selection;
use anyhow::Result;
use tokio::sync::mpsc;

/// Which source a command acts on.
#[derive(Debug, Clone, Default)]
pub(crate) enum SourceChoice {
    /// The failed-task table (default).
    #[default]
    Table,
    /// RabbitMQ dead-letter queues.
    Queues(QueueOptions),
}

#[derive(Debug, Clone, Default)]
pub(crate) struct QueueOptions {
    pub(crate) names: Vec<String>,
    /// Extra headers holding error text for `motivo`.
    pub(crate) motivo_headers: Vec<String>,
    /// Read a quorum queue even near its delivery limit.
    pub(crate) force: bool,
}

/// Candidate records for a selection, streamed with bounded memory. The caller wraps
/// the receiver in `select::Selected` for the final decision. Queue records carry only
/// `parts` beyond what every record has.
pub(crate) async fn open_stream(
    endpoints: &Endpoints,
    printer: &Printer,
    source: &SourceChoice,
    sel: &Selection,
    parts: queue::Parts,
) -> Result<mpsc::Receiver<Result<DeadLetter>>> {
    match source {
        SourceChoice::Table => {
            let db = endpoints.require_database()?;
            let table = table::FailedTable::open(&db.url, &db.table).await?;
            table.stream(sel)
        }
        SourceChoice::Queues(q) => {
            let opts = queue::StreamOptions {
                names: q.names.clone(),
                record: queue::RecordOptions {
                    motivo_headers: q.motivo_headers.clone(),
                    parts,
                },
                force: q.force,
            };
            queue::open_stream(&endpoints.rabbit, printer, &opts, sel).await
        }
    }
}

/// Background work a source must finish before the process exits: a queue reader gives
/// its messages back after the command stopped reading.
fn pending() -> &'static std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>> {
    static P: std::sync::OnceLock<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>> =
        std::sync::OnceLock::new();
    P.get_or_init(Default::default)
}

/// Registers a task that `settle` waits for.
pub(crate) fn track(handle: tokio::task::JoinHandle<()>) {
    pending()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(handle);
}

/// Errors of background reads that came after the command stopped taking records (an
/// `inspect` past its `--limit`): `dispatch` still fails with them.
fn late_errors() -> &'static std::sync::Mutex<Option<anyhow::Error>> {
    static E: std::sync::OnceLock<std::sync::Mutex<Option<anyhow::Error>>> =
        std::sync::OnceLock::new();
    E.get_or_init(Default::default)
}

/// Hands a background read's error to the command, or, once it stopped taking records,
/// keeps the first such for `late_error`: a read that fails after the last record shown
/// must not end in exit 0.
pub(crate) async fn fail<T>(tx: &mpsc::Sender<Result<T>>, e: anyhow::Error) {
    if let Err(mpsc::error::SendError(Err(e))) = tx.send(Err(e)).await {
        let mut kept = late_errors().lock().unwrap_or_else(|p| p.into_inner());
        kept.get_or_insert(e);
    }
}

/// The first error `fail` kept, once every tracked task has ended (see `settle`).
pub(crate) fn late_error() -> Option<anyhow::Error> {
    late_errors()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
}

/// Whether a tracked task is still to be waited for (`settle`).
pub(crate) fn unsettled() -> bool {
    let handles = pending().lock().unwrap_or_else(|e| e.into_inner());
    handles.iter().any(|h| !h.is_finished())
}

/// Waits for every tracked task: called once the command is done with its records.
pub(crate) async fn settle() {
    loop {
        let handles: Vec<_> =
            std::mem::take(&mut *pending().lock().unwrap_or_else(|e| e.into_inner()));
        if handles.is_empty() {
            return;
        }
        for h in handles {
            let _ = h.await;
        }
    }
}
