//! Replays: table rows re-dispatched as Celery tasks; queue messages moved back.

mod acks;
pub mod queue;
pub mod requeue;
pub mod restore;
pub mod table;

use crate::error::usage;
use crate::output::{Printer, ellipsize};
use crate::rabbit::publish as broker;
use crate::report::Report;
use anyhow::Result;
use std::collections::BTreeMap;

/// Where replayed messages go.
#[derive(Debug, Clone)]
pub enum Target {
    /// A queue, through the default exchange: reaches exactly that queue.
    Queue(String),
    /// An exchange and routing key.
    Exchange {
        exchange: String,
        routing_key: String,
    },
}

impl Target {
    pub fn route(&self) -> (String, String) {
        match self {
            Target::Queue(q) => (String::new(), q.clone()),
            Target::Exchange {
                exchange,
                routing_key,
            } => (exchange.clone(), routing_key.clone()),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Target::Queue(q) => format!("to queue {q:?} (default exchange)"),
            Target::Exchange {
                exchange,
                routing_key,
            } => {
                format!("to exchange {exchange:?} with routing key {routing_key:?}")
            }
        }
    }

    /// Refuses a target that does not exist (nothing is changed); returns a note for the
    /// plan, and warns when a queue has no consumer.
    pub async fn check(
        &self,
        conn: &lapin::Connection,
        printer: &Printer,
    ) -> Result<Option<String>> {
        match self {
            Target::Queue(q) => match crate::rabbit::passive_declare(conn, q).await? {
                None => Err(usage(format!(
                    "target queue {q:?} does not exist: nothing was replayed (declare it, start its workers, or pass --to-queue)"
                ))),
                Some(s) => {
                    if s.consumers == 0 {
                        printer.warn(format!(
                            "queue {q:?} has no consumers: replayed tasks will wait there until a worker starts"
                        ));
                    }
                    Ok(Some(format!(
                        "queue {q:?}: {} message(s) ready, {} consumer(s)",
                        s.ready, s.consumers
                    )))
                }
            },
            Target::Exchange { exchange, .. } => {
                if broker::exchange_exists(conn, exchange).await? {
                    Ok(None)
                } else {
                    Err(usage(format!(
                        "target exchange {exchange:?} does not exist: nothing was replayed"
                    )))
                }
            }
        }
    }
}

/// The plan's groups: (task, reason fingerprint) -> count, biggest first.
pub fn print_plan_groups(printer: &Printer, groups: &BTreeMap<(String, String), u64>) {
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
/// full report on stdout.
pub fn print_report(printer: &Printer, report: &Report, verb_past: &str) {
    use crate::cli::OutputFormat;
    match printer.format {
        OutputFormat::Json | OutputFormat::Ndjson => {
            if let Ok(s) = serde_json::to_string(report) {
                println!("{s}");
            }
        }
        _ => {}
    }
    for f in &report.failed {
        printer.warn(format!("failed: id {}: {}", f.id, f.reason));
    }
    if report.failed_count > report.failed.len() as u64 {
        printer.warn(format!(
            "... and {} more failures",
            report.failed_count - report.failed.len() as u64
        ));
    }
    for s in report.skipped.iter().take(10) {
        printer.debug(1, format!("skipped: id {}: {}", s.id, s.reason));
    }
    let line = report.summary(verb_past);
    if report.exit() == crate::error::Exit::Ok {
        printer.info(line);
    } else {
        printer.warn(line);
    }
}

/// This machine's name, for the Celery `origin` header and archive headers.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into())
}

/// Ctrl-C or SIGTERM asks a bulk run to stop after the items in flight (their outcome is
/// still recorded); a second signal exits at once, which is safe too: whatever was not
/// confirmed was not marked or acked.
pub fn stop_on_signal(
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    use std::sync::atomic::Ordering;
    tokio::spawn(async move {
        let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        else {
            return;
        };
        for round in 0..2 {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            if round == 0 {
                eprintln!("stopping after the items in flight (signal again to exit at once)");
                stop.store(true, Ordering::SeqCst);
            } else {
                std::process::exit(130);
            }
        }
    })
}
