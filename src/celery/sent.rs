//! What became of a sent task: shared by the dispatcher and each broker's sender.

use anyhow::Result;
use std::future::Future;
use std::pin::Pin;

/// How one sent task ended, as far as the broker can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Sent {
    /// The broker has it in a queue (confirmed).
    Delivered,
    /// The broker refused or could not route it; the text says why.
    Refused(String),
}

/// The outcome of a send, awaited later so that sends can be pipelined. An error means the
/// outcome is unknown (connection lost): treat the task as not sent.
pub(crate) type Pending = Pin<Box<dyn Future<Output = Result<Sent>> + Send>>;
