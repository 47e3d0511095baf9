//! The task frameworks whose messages dlq recognises in a dead-letter queue. Each knows where
//! its own message keeps its id, the task's name, the last error and the retries; a new
//! framework is one file here and one entry in `FRAMEWORKS`. Pure: no I/O.

mod celery;
mod dramatiq;

use lapin::types::FieldTable;

/// What a framework's message says about itself (beyond RabbitMQ's `x-death`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Facts {
    pub(crate) framework: &'static str,
    /// The framework's own message id.
    pub(crate) id: Option<String>,
    /// The task (Celery) or actor (dramatiq) name.
    pub(crate) task: Option<String>,
    /// The last error the framework kept in the message, one line.
    pub(crate) error: Option<String>,
    /// How many times the framework retried the task before it died.
    pub(crate) retries: Option<u64>,
}

type Recognise = fn(Option<&FieldTable>, &[u8]) -> Option<Facts>;

/// In order: the first that recognises a message describes it.
const FRAMEWORKS: [Recognise; 2] = [celery::recognise, dramatiq::recognise];

/// The facts of the first framework that recognises the message, if any.
pub(crate) fn recognise(headers: Option<&FieldTable>, body: &[u8]) -> Option<Facts> {
    FRAMEWORKS.iter().find_map(|f| f(headers, body))
}
