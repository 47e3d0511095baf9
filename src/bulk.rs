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
    /// The plan holds messages while it asks (`None`: it holds nothing).
    pub(crate) hold: Option<PromptHold<'a>>,
}

/// A confirmation asked while the plan holds messages (a queue replay's): the broker takes
/// them back past their consumer timeout, and a plain Ctrl-C would end dlq with them held
/// (both count a delivery on RabbitMQ 4.0-4.2). So the question waits at most `wait()` from
/// `started` (`rabbit::reader::within_hold`), and a signal answers it; either fails the gate
/// and the caller gives everything back.
pub(crate) struct PromptHold<'a> {
    pub(crate) started: std::time::Instant,
    pub(crate) wait: &'a (dyn Fn() -> std::time::Duration + Sync),
    /// The signals seen when the plan began: one that came since, where the plan listened
    /// for none (after its take), fails the gate too, `--yes` or not.
    pub(crate) signals_at: u64,
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
        match confirm(printer, &g.prompt, g.safety.yes, g.hold.as_ref()).await {
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

/// The answer to the gate's question; within `hold`'s wait, and a signal's stop, when the
/// plan holds messages.
async fn confirm(
    printer: &Printer,
    prompt: &str,
    yes: bool,
    hold: Option<&PromptHold<'_>>,
) -> Result<bool> {
    let Some(h) = hold else {
        return printer.confirm(prompt, yes).await;
    };
    let mut signals = crate::signals::listen_since(h.signals_at);
    if signals.came() {
        crate::signals::announce(signals.seen());
        return Err(interrupted(false));
    }
    if yes {
        return printer.confirm(prompt, yes).await;
    }
    let asked = crate::rabbit::reader::within_hold(h.started, h.wait, printer.confirm(prompt, yes));
    tokio::select! {
        answer = asked => answer.unwrap_or_else(|| {
            // Below the question, which is still waiting for its line.
            say!();
            Err(anyhow::anyhow!(
                "no answer while dlq held the plan's messages for {} s, half of their consumer timeout, past which RabbitMQ takes back what a consumer holds (RabbitMQ 4.0-4.2 by closing its channel, which counts a delivery toward the delivery limit): nothing was moved, every message was given back; run dlq again to see the plan anew",
                (h.wait)().as_secs()
            ))
        }),
        _ = signals.next() => {
            crate::signals::announce(signals.seen());
            Err(interrupted(true))
        }
    }
}

/// A signal at the confirmation (`asked`: while the question waited for its line): the
/// caller gives back what the plan holds (`exit_on_signal`).
fn interrupted(asked: bool) -> anyhow::Error {
    if asked {
        say!();
    }
    crate::error::interrupted(
        "interrupted at the confirmation: nothing was moved, every message was given back",
    )
}

/// `work` (giving back what dlq holds after a first signal), unless another signal comes
/// first: then dlq exits at once. Scoped to `work`, so that a later run (the browser's next
/// job) keeps its own first-signal stop.
pub(crate) async fn exit_on_signal<F: std::future::Future>(work: F) -> F::Output {
    let mut signals = crate::signals::listen();
    tokio::select! {
        out = work => out,
        _ = signals.next() => exit_now("interrupted again: exited at once"),
    }
}

/// `work`, giving back after a run stopped by `stopped` (an error): under `exit_on_signal`
/// when a signal stopped it, so that a second one exits at once.
pub(crate) async fn give_back_after<F: std::future::Future>(
    stopped: Option<&anyhow::Error>,
    work: F,
) -> F::Output {
    match stopped.is_some_and(crate::error::by_signal) {
        true => exit_on_signal(work).await,
        false => work.await,
    }
}

/// Gives back everything the takers hold, none of it moved (`Taker::release_unmoved`);
/// `stopped`: the error that stopped the run, when one did (`bulk::give_back_after`).
pub(crate) async fn release_unmoved(
    conn: &crate::rabbit::Connection,
    printer: &Printer,
    takers: Vec<crate::rabbit::take::Taker>,
    stopped: Option<&anyhow::Error>,
) {
    let after_signal = stopped.is_some_and(crate::error::by_signal);
    let release = async {
        for t in takers {
            for note in t.release_unmoved(conn, after_signal).await {
                printer.warn(note);
            }
        }
    };
    give_back_after(stopped, release).await
}

/// Exits with 130 now, saying what that leaves and closing the audit trail's open runs.
pub(crate) fn exit_now(why: &str) -> ! {
    let said = format!(
        "{why}. Nothing unconfirmed was acknowledged or marked: it stays in its DLQ or table; what was in flight (at most --window) may also reach its destination, and a new run finishes the job"
    );
    crate::signals::exit_saying(&said, why)
}

/// `--dry-run` and `--yes`, shared by every mutating command.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Safety {
    pub(crate) dry_run: bool,
    pub(crate) yes: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// A signal that came after the plan began, where nothing listened for one (after the
    /// plan's take, before its question), fails the gate, `--yes` or not: the caller gives
    /// back what the plan holds. Before, the question (or, under `--yes`, the move) began
    /// as if none had come. nextest runs each test in a process of its own: the signal is
    /// this one's.
    #[tokio::test]
    async fn a_signal_since_the_plan_began_fails_its_confirmation() {
        let listening = crate::signals::listen();
        let at = listening.seen();
        let me = std::process::id().to_string();
        let kill = std::process::Command::new("kill")
            .args(["-INT", &me])
            .status();
        assert!(kill.unwrap().success());
        let deadline = Instant::now() + Duration::from_secs(10);
        while !crate::signals::came_since(at) {
            assert!(Instant::now() < deadline, "the signal was not counted");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let printer = Printer::quiet();
        let wait = || Duration::from_secs(60);
        let hold = PromptHold {
            started: Instant::now(),
            wait: &wait,
            signals_at: at,
        };
        for yes in [true, false] {
            let e = confirm(&printer, "Move?", yes, Some(&hold))
                .await
                .unwrap_err();
            assert_eq!(crate::error::exit_for(&e), Exit::Interrupted, "{e:#}");
        }
        // The plan's signals are those since it began: one before is not its own.
        let later = PromptHold {
            signals_at: crate::signals::count(),
            ..hold
        };
        assert!(
            confirm(&printer, "Move?", true, Some(&later))
                .await
                .unwrap()
        );
    }
}
