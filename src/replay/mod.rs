//! Replays: table rows re-dispatched as Celery tasks; queue messages moved back.

mod acks;
pub(crate) mod follow;
pub(crate) mod queue;
pub(crate) mod requeue;
pub(crate) mod restore;
pub(crate) mod table;
pub(crate) mod workers;

pub(crate) use crate::model::Target;
pub(crate) use crate::model::hostname;

use crate::output::{Printer, ellipsize};
use crate::report::Report;
use std::collections::BTreeMap;

/// Prints what a destination check found: warnings first, then the note the plan carries.
pub(crate) fn note_target(printer: &Printer, facts: crate::model::TargetFacts) -> Option<String> {
    for w in facts.warnings {
        printer.warn(w);
    }
    facts.note
}

/// The plan's groups: (task, reason fingerprint) -> count, biggest first.
pub(crate) fn print_plan_groups(printer: &Printer, groups: &BTreeMap<(String, String), u64>) {
    let mut rows: Vec<(&(String, String), &u64)> = groups.iter().collect();
    rows.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
    let rows: Vec<Vec<String>> = rows
        .into_iter()
        .map(|((task, fp), n)| vec![task.clone(), ellipsize(fp, 70), n.to_string()])
        .collect();
    if !rows.is_empty() {
        printer.table_to_stderr(&["task", "motivo", "count"], &rows);
    }
}

/// The final report: a line on stderr (failures as warnings) and, with -o json/ndjson, the
/// full report on stdout; the audit trail's end record.
pub(crate) fn print_report(
    printer: &Printer,
    report: &Report,
    verb_past: &str,
    audit: &mut crate::audit::Audit,
) {
    use crate::output::OutputFormat;
    audit.end(report, report.exit());
    match printer.format {
        OutputFormat::Json | OutputFormat::Ndjson => {
            // A closed stdout must not hide the summary on stderr below.
            if let Ok(s) = serde_json::to_string(report) {
                let _ = printer.data_line(&s);
            }
        }
        _ => {}
    }
    for f in report.failed.iter().take(crate::report::PRINTED) {
        printer.warn_always(format!("failed: id {}: {}", f.id, f.reason));
    }
    let printed = report.failed.len().min(crate::report::PRINTED) as u64;
    if report.failed_count > printed {
        printer.warn_always(format!(
            "... and {} more failures (`-o json` names each one)",
            report.failed_count - printed
        ));
    }
    for s in report.skipped.iter().take(10) {
        printer.debug(1, format!("skipped: id {}: {}", s.id, s.reason));
    }
    let line = report.summary(verb_past);
    if report.exit() == crate::error::Exit::Ok {
        printer.info(line);
    } else {
        printer.warn_always(line);
    }
}

/// Ctrl-C or SIGTERM asks a bulk run to stop after the items in flight (their outcome is
/// still recorded). A second signal exits at once, which is safe too: whatever was not
/// confirmed was not marked or acked; so does a stop the broker keeps from finishing by
/// blocking publishing (`rabbit::BLOCKED_STOP_GRACE`). Both write the audit trail's end record.
pub(crate) fn stop_on_signal(
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    stop_on_signal_since(stop, crate::signals::count())
}

/// `stop_on_signal`, for the signals after the first `seen` (`signals::listen_since`): one
/// that came before, while the run listened for none, stops it at once.
pub(crate) fn stop_on_signal_since(
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    seen: u64,
) -> tokio::task::JoinHandle<()> {
    use std::sync::atomic::Ordering;
    // Listening from now, not from the task's first poll.
    let mut signals = crate::signals::listen_since(seen);
    tokio::spawn(async move {
        signals.next().await;
        say!("stopping after the items in flight (signal again to exit at once)");
        stop.store(true, Ordering::SeqCst);
        let stopped_at = std::time::Instant::now();
        loop {
            tokio::select! {
                _ = signals.next() => crate::bulk::exit_now("interrupted twice: exited at once"),
                _ = tokio::time::sleep(std::time::Duration::from_millis(250)) => {}
            }
            if let Some((since, reason)) = crate::rabbit::blocked() {
                let waited = stopped_at.max(since).elapsed();
                if waited >= crate::rabbit::BLOCKED_STOP_GRACE {
                    crate::bulk::exit_now(&format!(
                        "stopped, and the broker still blocks publishing ({reason}) {} s later: exited without waiting for the confirms in flight",
                        waited.as_secs()
                    ));
                }
            }
        }
    })
}

/// Sleeps until `deadline`, unless a signal comes first: `false` then, once dlq said `said`.
/// Waits where nothing holds messages and no run's stop listens (a canary's wait on a table
/// or a restore, following the DLQs); before, Ctrl-C in a canary's wait ended dlq at once,
/// 130, with no report.
pub(crate) async fn wait_unless_signal(deadline: tokio::time::Instant, said: &str) -> bool {
    let mut signals = crate::signals::listen();
    tokio::select! {
        _ = tokio::time::sleep_until(deadline) => true,
        _ = signals.next() => {
            say!("{said}");
            false
        }
    }
}

/// What a signal in a table's or a restore's canary wait says (`wait_unless_signal`).
pub(crate) const CANARY_CUT: &str =
    "interrupted: the canary's wait is cut short; the rest is not sent";

/// `--canary N --canary-wait D`: replay N first, wait, and stop if they failed again.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Canary {
    pub(crate) count: std::num::NonZeroU64,
    pub(crate) wait: std::time::Duration,
}

/// `--window` when not given: table rows and archives always; a queue replay starts there.
pub(crate) const DEFAULT_WINDOW: usize = 64;

/// What every replay shares, validated once.
#[derive(Debug)]
pub(crate) struct ReplayCommon {
    pub(crate) selection: crate::select::Selection,
    /// `--to-queue` / `--to-exchange`; `None` leaves the default to the engine.
    pub(crate) target: Option<Target>,
    pub(crate) rate: Option<f64>,
    /// Published but not yet settled, at most (the duplicate window).
    pub(crate) window: std::num::NonZeroUsize,
    /// `--window` was given: a queue replay does not adapt it.
    pub(crate) window_fixed: bool,
    pub(crate) max_replays: u32,
    pub(crate) safety: crate::bulk::Safety,
    pub(crate) workers: workers::WorkerCheck,
    /// `--transform`: compiled once, before anything connects.
    pub(crate) transform: Option<std::sync::Arc<crate::transform::Transform>>,
}
