//! The one place that decides what an outcome means as an exit code.

use std::process::ExitCode;

/// Exit codes are part of the scripting interface: keep them stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Success, including "nothing matched".
    Ok = 0,
    /// Runtime failure: connection, permission, broker or database error.
    Failure = 1,
    /// Bad usage or bad input; nothing was changed.
    Usage = 2,
    /// Some selected items could not be processed while the rest were.
    Partial = 3,
    /// Stopped by Ctrl-C or SIGTERM (the shell's 128 + SIGINT).
    Interrupted = 130,
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> Self {
        ExitCode::from(e as u8)
    }
}

/// An error the user caused (bad flag value, unknown table, invalid regex ...).
/// Anything else that bubbles up as `anyhow::Error` is a runtime failure.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// A run the user stopped with a signal (Ctrl-C, SIGTERM): it gave back what it held.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Interrupted(pub String);

/// Shorthand to build a usage error inside `anyhow` chains.
pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(msg.into()))
}

/// Shorthand to build the error of a run a signal stopped (exit 130).
pub fn interrupted(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Interrupted(msg.into()))
}

/// Maps an error chain to its exit code: usage errors anywhere in the chain win.
pub fn exit_for(err: &anyhow::Error) -> Exit {
    if err.chain().any(|e| e.is::<UsageError>()) {
        Exit::Usage
    } else if err.chain().any(is_interrupted) {
        Exit::Interrupted
    } else {
        Exit::Failure
    }
}

/// Whether a signal stopped what failed with `err` (it exits 130, `exit_for`).
pub fn by_signal(err: &anyhow::Error) -> bool {
    exit_for(err) == Exit::Interrupted
}

/// A signal stopped dlq: said directly, or inside an I/O error (the output given up, see
/// `output::pipe`), whose own source is not its payload.
fn is_interrupted(e: &(dyn std::error::Error + 'static)) -> bool {
    e.is::<Interrupted>()
        || e.downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            .is_some_and(|inner| inner.is::<Interrupted>())
}

/// The error and its causes, `: ` apart, each said once: lapin's and std's I/O errors repeat
/// their source in their own text, which `{:#}` would print twice
/// (`IO error: Connection reset by peer (os error 104): Connection reset by peer (os error 104)`).
pub fn describe(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if text.is_empty() || out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_already_said_are_not_repeated() {
        let io = std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "Connection reset by peer",
        );
        let e = anyhow::Error::new(io).context("IO error: Connection reset by peer");
        assert_eq!(describe(&e), "IO error: Connection reset by peer");
        let e = anyhow::anyhow!("broker gone").context("replaying q.dlq");
        assert_eq!(describe(&e), "replaying q.dlq: broker gone");
        let e = usage("bad flag");
        assert_eq!(describe(&e), "bad flag");
    }
}
