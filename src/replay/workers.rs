//! The worker gate of every Celery dispatch (table replay, restore of archived rows): a
//! broker's confirm is not the goal, the task running again is. The live workers are asked
//! once per run; every selected task name (after `--task-map`) must be registered by a worker
//! that consumes the target queue, or nothing is sent.

use crate::celery::dispatch::Dispatcher;
use crate::celery::workers::{self, Worker};
use crate::error::usage;
use crate::model::Target;
use crate::output::Printer;
use anyhow::Result;
use std::collections::BTreeMap;

/// `ensure_runnable`, then with `follow` the watch of what the workers do with what is
/// sent to `target`, started and described (for the plan).
pub(crate) async fn ensure_runnable_and_watch(
    printer: &Printer,
    dispatcher: &Dispatcher,
    check: &WorkerCheck,
    target: &Target,
    tasks: &BTreeMap<String, u64>,
    follow: Option<super::follow::Follow>,
) -> Result<Option<super::follow::Watch>> {
    ensure_runnable(printer, dispatcher, check, target, tasks).await?;
    let Some(f) = follow else {
        return Ok(None);
    };
    let watch = super::follow::Watch::start(dispatcher, f, Some(target), check.timeout).await?;
    printer.info(watch.describe());
    Ok(Some(watch))
}

/// Refuses (a usage error: nothing was sent, nothing marked) unless every task in `tasks`
/// (stored name -> rows) will be run by a live worker reading `target`; prints, for the plan,
/// which name is sent for each stored one and which workers will run it.
pub(crate) async fn ensure_runnable(
    printer: &Printer,
    dispatcher: &Dispatcher,
    check: &WorkerCheck,
    target: &Target,
    tasks: &BTreeMap<String, u64>,
) -> Result<()> {
    if tasks.is_empty() {
        return Ok(());
    }
    if !check.enabled {
        printer.warn(
            "worker check skipped (--no-worker-check): a worker discards any task it does not register",
        );
        for (stored, rows) in tasks {
            printer.info(format!(
                "task {stored} -> {} ({rows} row(s)): not checked",
                check.map.sent_name(stored)
            ));
        }
        return Ok(());
    }
    let (queue, live) = match target {
        Target::Queue(q) => (q.as_str(), dispatcher.workers(check.timeout).await?),
        // Through an exchange the queue is the broker's choice: any worker must do.
        Target::Exchange { .. } => ("*", any_queue(dispatcher.workers(check.timeout).await?)),
    };
    if live.is_empty() {
        return Err(usage(format!(
            "no Celery worker answered on {} ({}) within {:?}: nothing was sent. The workers may be stopped (a deploy?), started with worker_enable_remote_control=False, on another vhost, or using another control_exchange (--control-exchange); start a worker that consumes {}, or pass --no-worker-check to send anyway (a worker discards any task it does not register)",
            dispatcher.describe(),
            check.mailbox.request,
            check.timeout,
            describe_queue(queue),
        )));
    }
    let verdicts = workers::check(&live, queue, tasks, &check.map, "row");
    let refused: Vec<&str> = verdicts
        .iter()
        .filter_map(|v| v.problem.as_deref())
        .collect();
    if !refused.is_empty() {
        return Err(usage(format!(
            "{} task name(s) would not run, so nothing was sent:\n  {}",
            refused.len(),
            refused.join("\n  ")
        )));
    }
    for v in &verdicts {
        printer.info(format!(
            "task {} -> {} ({} row(s)): run by {}",
            v.stored,
            v.sent,
            v.rows,
            v.runners.join(", ")
        ));
    }
    Ok(())
}

fn describe_queue(queue: &str) -> String {
    if queue == "*" {
        "the target".into()
    } else {
        format!("{queue:?}")
    }
}

/// Every worker as if it read the `*` queue.
fn any_queue(live: Vec<Worker>) -> Vec<Worker> {
    live.into_iter()
        .map(|w| Worker {
            queues: vec!["*".into()],
            ..w
        })
        .collect()
}

/// The worker gate of a queue replay: a Celery task message (one with a `task` header)
/// moves only to a queue a live worker consumes and whose workers register the task; other
/// messages pass. The workers are asked once, when the first Celery message comes, so a
/// replay of non-Celery dead letters never waits for them.
pub(crate) struct TaskGate<'a> {
    conn: &'a crate::rabbit::Connection,
    check: &'a WorkerCheck,
    live: Option<Vec<Worker>>,
}

impl<'a> TaskGate<'a> {
    pub(crate) fn new(conn: &'a crate::rabbit::Connection, check: &'a WorkerCheck) -> TaskGate<'a> {
        TaskGate {
            conn,
            check,
            live: None,
        }
    }

    /// `Err(why)`: the message stays in the DLQ, reported.
    pub(crate) async fn allows(
        &mut self,
        headers: Option<&lapin::types::FieldTable>,
        exchange: &str,
        routing_key: &str,
    ) -> Result<(), String> {
        let Some(task) = crate::rabbit::death::celery_task_name(headers) else {
            return Ok(());
        };
        if !self.check.enabled {
            return Ok(());
        }
        if self.live.is_none() {
            let live = workers::ask_amqp(self.conn, &self.check.mailbox, self.check.timeout)
                .await
                .map_err(|e| format!("asking the Celery workers: {e:#}; left in the DLQ"))?;
            self.live = Some(live);
        }
        let live = self.live.as_deref().unwrap_or_default();
        if live.is_empty() {
            return Err(format!(
                "Celery task {task}: no Celery worker answered within {:?}; left in the DLQ (start its workers, or pass --no-worker-check)",
                self.check.timeout
            ));
        }
        let (queue, live) = if exchange.is_empty() {
            (routing_key, live.to_vec())
        } else {
            ("*", any_queue(live.to_vec()))
        };
        let tasks = BTreeMap::from([(task, 1)]);
        let verdict = workers::check(
            &live,
            queue,
            &tasks,
            &workers::TaskMap::default(),
            "message",
        );
        match verdict.into_iter().find_map(|v| v.problem) {
            Some(p) => Err(format!("{p}; left in the DLQ")),
            None => Ok(()),
        }
    }
}

/// Asking the live Celery workers before any task is sent.
#[derive(Debug, Clone)]
pub(crate) struct WorkerCheck {
    /// False only with `--no-worker-check`.
    pub(crate) enabled: bool,
    pub(crate) timeout: std::time::Duration,
    pub(crate) map: workers::TaskMap,
    /// Where the workers answer (`--control-exchange`).
    pub(crate) mailbox: crate::celery::workers::Mailbox,
}
