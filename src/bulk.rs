//! The gate every mutating command passes between its plan and its run:
//! plan -> gate (nothing to do, dry run, confirmation unless `--yes`, no-TTY refusal) -> run -> report.
//! Each action prints its own plan; what happens next is decided here, once, and recorded in
//! the audit trail: a dry run, a decline, a refusal, or the start of the run.

use crate::audit::Audit;
use crate::error::Exit;
use crate::output::Printer;
use anyhow::Result;

/// What a plan found, and how to word the gate's outcome.
pub(crate) struct Gate<'a> {
    pub(crate) safety: Safety,
    /// Items the run would act on.
    pub(crate) planned: u64,
    /// Items the plan already refused (reported by the run; they make the exit partial).
    pub(crate) refused: usize,
    /// e.g. "nothing to replay".
    pub(crate) nothing: &'a str,
    /// e.g. "dry run: nothing was moved".
    pub(crate) dry_run: &'a str,
    /// e.g. "Move 12 message(s)?".
    pub(crate) prompt: String,
    /// The run's audit trail (`None`: the run changes nothing, e.g. archive without --delete).
    pub(crate) audit: Option<&'a mut Audit>,
}

/// `Some(exit)`: stop here with that exit code; `None`: go ahead and run (the audit's start
/// record is written; if it cannot be, the run is refused with an error).
pub(crate) async fn gate(printer: &Printer, mut g: Gate<'_>) -> Result<Option<Exit>> {
    if g.planned == 0 && g.refused == 0 {
        printer.info(g.nothing);
        return Ok(Some(Exit::Ok));
    }
    if g.safety.dry_run {
        printer.info(g.dry_run);
        if let Some(a) = g.audit.as_mut() {
            a.dry_run(g.planned);
        }
        return Ok(Some(if g.refused == 0 {
            Exit::Ok
        } else {
            Exit::Partial
        }));
    }
    // Nothing but refusals: the run reports them without asking.
    if g.planned > 0 {
        match printer.confirm(&g.prompt, g.safety.yes).await {
            Ok(true) => {}
            Ok(false) => {
                printer.info("nothing done");
                if let Some(a) = g.audit.as_mut() {
                    a.declined(g.planned);
                }
                return Ok(Some(Exit::Ok));
            }
            Err(e) => {
                if let Some(a) = g.audit.as_mut() {
                    a.refused(&e);
                }
                return Err(e);
            }
        }
    }
    if let Some(a) = g.audit {
        a.start(Some(g.planned))?;
    }
    Ok(None)
}

/// `--dry-run` and `--yes`, shared by every mutating command.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Safety {
    pub(crate) dry_run: bool,
    pub(crate) yes: bool,
}
