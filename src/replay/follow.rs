//! `--follow`: a replay is done when the task ran. Before anything is sent dlq subscribes to
//! Celery's events (`celery::events`) and makes sure the workers that will run the tasks send
//! task events; each task goes out with a task id dlq records; after the last send dlq waits,
//! up to `--follow-timeout`, for each task's outcome, and reports them per task and in total.
//!
//! Celery says whether a worker sends task events only when asked to turn them on
//! (`enable_events` answers "already enabled" or "enabled"): without `--enable-events` dlq
//! needs to have seen a task event from every such worker, and refuses otherwise.

use crate::celery::control::{Call, Method};
use crate::celery::dispatch::Dispatcher;
use crate::celery::events::{Event, Feed};
use crate::error::usage;
use crate::model::{RecordId, Target};
use crate::output::{Printer, ellipsize};
use anyhow::Result;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// `--follow`, `--follow-timeout`, `--enable-events`, `--mark-on-success`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Follow {
    pub(crate) timeout: Duration,
    pub(crate) enable_events: bool,
    pub(crate) mark_on_success: bool,
}

/// Where a followed task got to, in the order it gets there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum State {
    /// Sent; no worker said anything about it yet.
    NotSeen,
    Received,
    Started,
    /// Failed and will run again (Celery's retry): not an outcome yet.
    Retrying,
    Succeeded,
    /// Failed again (including a `Reject` without requeue on Celery 5.7).
    Failed,
    /// Rejected by the worker without a failure event.
    Rejected,
    Revoked,
    /// A plain (non-Celery) message that did not come back to its DLQ within the timeout.
    NotBack,
}

impl State {
    fn is_final(self) -> bool {
        self >= State::Succeeded
    }

    fn text(self) -> &'static str {
        match self {
            State::NotSeen => "not seen",
            State::Received => "received, not started",
            State::Started => "still running",
            State::Retrying => "retrying",
            State::Succeeded => "succeeded",
            State::Failed => "failed again",
            State::Rejected => "rejected",
            State::Revoked => "revoked",
            State::NotBack => "not back in the DLQ",
        }
    }
}

/// One followed task.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Tracked {
    /// The row or message it came from.
    pub(crate) from: RecordId,
    pub(crate) task_id: String,
    pub(crate) task: String,
    pub(crate) outcome: State,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) worker: Option<String>,
    /// The last failure or retry's exception.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) exception: Option<String>,
    pub(crate) retries: u32,
}

/// What the feed has told so far.
#[derive(Default)]
struct Seen {
    tasks: HashMap<String, Tracked>,
    /// Workers any event came from (their dispatcher is on).
    any: BTreeSet<String>,
    /// Workers a task event came from (task events are on).
    task_events: BTreeSet<String>,
}

impl Seen {
    fn apply(&mut self, ev: Event) {
        self.any.insert(ev.hostname.clone());
        if !ev.is_task() {
            return;
        }
        self.task_events.insert(ev.hostname.clone());
        let Some(t) = ev.uuid.as_deref().and_then(|id| self.tasks.get_mut(id)) else {
            return;
        };
        let next = match ev.kind.as_str() {
            "task-received" => State::Received,
            "task-started" => State::Started,
            "task-retried" => State::Retrying,
            "task-succeeded" => State::Succeeded,
            "task-failed" => State::Failed,
            "task-rejected" if ev.requeue => State::Received,
            "task-rejected" => State::Rejected,
            "task-revoked" => State::Revoked,
            _ => return,
        };
        if next == State::Retrying && !t.outcome.is_final() {
            t.retries += 1;
        }
        if ev.exception.is_some() {
            t.exception = ev.exception;
        }
        t.worker = Some(ev.hostname);
        // Events can arrive out of order (a batch, two connections): an outcome stays (but
        // Celery 5.7 follows a `Reject` with `task-failed`); a retry reopens the task.
        t.outcome = match (t.outcome, next) {
            (State::Rejected, State::Failed) => State::Failed,
            (cur, _) if cur.is_final() => cur,
            (_, State::Retrying) | (State::Retrying, _) => next,
            (cur, next) => cur.max(next),
        };
    }
}

/// Registers the tasks to follow; shared with the senders.
#[derive(Clone)]
pub(crate) struct Tracker {
    seen: Arc<Mutex<Seen>>,
}

impl Tracker {
    /// Follows `task_id` (from row or message `from`): called before it is sent, so that no
    /// event about it can come first.
    pub(crate) fn expect(&self, from: RecordId, task_id: &str, task: &str) {
        let t = Tracked {
            from,
            task_id: task_id.to_owned(),
            task: task.to_owned(),
            outcome: State::NotSeen,
            worker: None,
            exception: None,
            retries: 0,
        };
        let mut seen = self.seen.lock().expect("not poisoned");
        seen.tasks.insert(task_id.to_owned(), t);
    }
}

/// A live subscription and the tasks it follows.
pub(crate) struct Watch {
    seen: Arc<Mutex<Seen>>,
    changed: Arc<Notify>,
    lost: Arc<AtomicBool>,
    reader: tokio::task::JoinHandle<()>,
    /// The workers that will run the tasks (table replays and restores: those reading the
    /// target).
    workers: Vec<String>,
    /// Every live worker and its `active_queues` answer.
    queues: BTreeMap<String, serde_json::Value>,
    /// Per destination queue, whether its tasks can be followed (queue replays).
    ready: tokio::sync::Mutex<HashMap<String, Result<(), String>>>,
    /// The workers whose task events dlq turned on (and must turn off again).
    turned_on: Mutex<Vec<String>>,
    pub(crate) follow: Follow,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// How long to listen for the heartbeats a `heartbeat` call makes workers send.
const PROBE: Duration = Duration::from_secs(2);

impl Watch {
    /// Subscribes, then asks the workers reading `target` (`None`: every worker; a queue
    /// replay's messages go back where each died) to prove they send events. Refuses (a usage
    /// error: nothing was sent) when they cannot or, without `--enable-events`, when no task
    /// event proved it.
    pub(crate) async fn start(
        dispatcher: &Dispatcher,
        follow: Follow,
        target: Option<&Target>,
        timeout: Duration,
    ) -> Result<Watch> {
        let feed = dispatcher.events().await?;
        let seen = Arc::new(Mutex::new(Seen::default()));
        let changed = Arc::new(Notify::new());
        let lost = Arc::new(AtomicBool::new(false));
        let reader = tokio::spawn(read(feed, seen.clone(), changed.clone(), lost.clone()));
        let calls = [
            Call::all(Method::ActiveQueues),
            Call::all(Method::Heartbeat),
        ];
        let answers = dispatcher.call(&calls, timeout.max(PROBE)).await?;
        let mut queues: BTreeMap<String, serde_json::Value> = BTreeMap::new();
        for a in answers
            .into_iter()
            .filter(|a| a.method == Method::ActiveQueues)
        {
            queues.insert(a.host, a.result);
        }
        let workers = match target {
            Some(t) => queues
                .iter()
                .filter(|(_, q)| reads(q, t))
                .map(|(w, _)| w.clone())
                .collect(),
            None => Vec::new(),
        };
        let watch = Watch {
            seen,
            changed,
            lost,
            reader,
            workers,
            queues,
            ready: tokio::sync::Mutex::new(HashMap::new()),
            turned_on: Mutex::new(Vec::new()),
            follow,
        };
        // A queue replay's messages go back where each died: its workers are checked per
        // destination, as messages come (`ready_for`).
        if let Some(target) = target {
            watch.refuse_unless_ready(target)?;
        }
        Ok(watch)
    }

    fn refuse_unless_ready(&self, target: &Target) -> Result<()> {
        if self.workers.is_empty() {
            return Err(usage(format!(
                "--follow: no live Celery worker reads {}: nothing was sent",
                target.describe()
            )));
        }
        match self.problem(&self.workers) {
            Some(why) => Err(usage(format!("--follow: {why}; nothing was sent"))),
            None => Ok(()),
        }
    }

    /// Why the tasks `workers` run cannot be followed, if they cannot.
    fn problem(&self, workers: &[String]) -> Option<String> {
        let seen = self.seen.lock().expect("not poisoned");
        let missing = |have: &BTreeSet<String>| -> Vec<&str> {
            let missing = workers.iter().filter(|w| !have.contains(*w));
            missing.map(String::as_str).collect()
        };
        let silent = missing(&seen.any);
        if !silent.is_empty() {
            return Some(format!(
                "worker(s) {} send no events at all (started without -E and with --without-heartbeat --without-gossip): Celery cannot turn task events on remotely for them. Restart them with -E, or replay without --follow",
                silent.join(", ")
            ));
        }
        let unproven = missing(&seen.task_events);
        if !self.follow.enable_events && !unproven.is_empty() {
            return Some(format!(
                "cannot tell whether worker(s) {} send task events (Celery says so only when asked to turn them on). Pass --enable-events (dlq turns them on for this run and back off after, for the workers where it turned them on), or start the workers with -E",
                unproven.join(", ")
            ));
        }
        None
    }

    /// Whether a task sent to `queue` (`None`: through an exchange, any worker) can be
    /// followed; with `--enable-events` its workers' task events are turned on at its first
    /// task. Decided once per queue; `Err` says why not (the message stays in its DLQ).
    pub(crate) async fn ready_for(
        &self,
        dispatcher: &Dispatcher,
        queue: Option<&str>,
        timeout: Duration,
    ) -> Result<(), String> {
        let key = queue.unwrap_or("").to_owned();
        let mut ready = self.ready.lock().await;
        if let Some(known) = ready.get(&key) {
            return known.clone();
        }
        let runners: Vec<String> = self
            .queues
            .iter()
            .filter(|(_, q)| queue.is_none_or(|name| reads(q, &Target::Queue(name.into()))))
            .map(|(w, _)| w.clone())
            .collect();
        let verdict = match (runners.is_empty(), self.problem(&runners)) {
            (true, _) => Err(format!(
                "--follow: no live Celery worker consumes {:?}: its task cannot be followed; left in the DLQ",
                queue.unwrap_or("the destination")
            )),
            (false, Some(why)) => Err(format!("--follow: {why}; left in the DLQ")),
            (false, None) => self
                .enable_on(dispatcher, &runners, timeout)
                .await
                .map_err(|e| format!("{e:#}; left in the DLQ")),
        };
        ready.insert(key, verdict.clone());
        verdict
    }

    /// For the plan.
    pub(crate) fn describe(&self) -> String {
        if self.workers.is_empty() {
            let events = match self.follow.enable_events {
                true => {
                    "turned on where they are off (--enable-events) at its first task, and off again after"
                }
                false => "which must have been seen from them",
            };
            return format!(
                "Follow: each Celery task message by its task events from the workers of the queue it goes to ({} live worker(s) on this vhost; events {events}); each plain message by watching its DLQ for {}s for its copy coming back",
                self.queues.len(),
                self.follow.timeout.as_secs()
            );
        }
        let when = match self.follow.mark_on_success {
            true => "once its task succeeded (--mark-on-success)",
            false => "once the broker confirmed it",
        };
        let events = match self.follow.enable_events {
            true => {
                "task events turned on where they are off (--enable-events), and off again after"
            }
            false => "task events seen from each",
        };
        format!(
            "Follow: each task's outcome from {} worker(s) ({}; {events}), up to {}s after the last send; a row is marked {when}",
            self.workers.len(),
            self.workers.join(", "),
            self.follow.timeout.as_secs()
        )
    }

    /// Turns task events on (`--enable-events`), after the gate: records the workers where
    /// they were off, which `finish` turns off again.
    pub(crate) async fn enable(&self, dispatcher: &Dispatcher, timeout: Duration) -> Result<()> {
        self.enable_on(dispatcher, &self.workers, timeout).await
    }

    /// `enable` after the gate, for a run that sends nothing when it fails: then the report
    /// says why (and the audit trail ends), and the exit to return.
    pub(crate) async fn enable_or_stop(
        &self,
        printer: &Printer,
        dispatcher: &Dispatcher,
        timeout: Duration,
        audit: &mut crate::audit::Audit,
    ) -> Option<crate::error::Exit> {
        let e = self.enable(dispatcher, timeout).await.err()?;
        let left_on = self.finish(dispatcher, timeout).await;
        let mut report = crate::report::Report::new("replay");
        report.stopped = Some(format!("{e:#}"));
        super::print_report(printer, &report, "replayed", audit);
        left_on.into_iter().for_each(|w| printer.warn_always(w));
        Some(report.exit())
    }

    /// `enable_events` to `workers` (under `--enable-events`), recording where it changed.
    async fn enable_on(
        &self,
        dispatcher: &Dispatcher,
        workers: &[String],
        timeout: Duration,
    ) -> Result<()> {
        if !self.follow.enable_events || workers.is_empty() {
            return Ok(());
        }
        let call = [Call::to(Method::EnableEvents, workers)];
        let answers = dispatcher.call(&call, timeout.max(PROBE)).await?;
        for a in &answers {
            match a.result.get("ok").and_then(|v| v.as_str()) {
                Some("task events enabled") => self.turned_on().push(a.host.clone()),
                Some(_) => {}
                None => anyhow::bail!("--enable-events: worker {} refused: {}", a.host, a.result),
            }
        }
        let answered: BTreeSet<&str> = answers.iter().map(|a| a.host.as_str()).collect();
        let silent: Vec<&str> = workers
            .iter()
            .map(String::as_str)
            .filter(|w| !answered.contains(w))
            .collect();
        if !silent.is_empty() {
            anyhow::bail!(
                "--enable-events: worker(s) {} did not answer; nothing was sent",
                silent.join(", ")
            );
        }
        Ok(())
    }

    /// Turns task events off again where dlq turned them on. Returns a warning when it could not.
    pub(crate) async fn finish(
        &self,
        dispatcher: &Dispatcher,
        timeout: Duration,
    ) -> Option<String> {
        let turned_on = std::mem::take(&mut *self.turned_on());
        if turned_on.is_empty() {
            return None;
        }
        let call = [Call::to(Method::DisableEvents, &turned_on)];
        let answered: BTreeSet<String> = match dispatcher.call(&call, timeout.max(PROBE)).await {
            Ok(a) => a.into_iter().map(|a| a.host).collect(),
            Err(_) => BTreeSet::new(),
        };
        let left: Vec<String> = turned_on
            .into_iter()
            .filter(|w| !answered.contains(w))
            .collect();
        (!left.is_empty()).then(|| {
            format!(
                "task events are still on for worker(s) {} (they did not answer disable_events): `celery control disable_events -d {}` turns them off",
                left.join(", "),
                left.join(",")
            )
        })
    }

    fn turned_on(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.turned_on.lock().expect("not poisoned")
    }

    pub(crate) fn tracker(&self) -> Tracker {
        Tracker {
            seen: self.seen.clone(),
        }
    }

    /// The tasks a run sent (`report.sent_tasks`, taken), followed to their outcomes after
    /// saying so; `None` when it sent none.
    pub(crate) async fn follow_sent(
        &self,
        printer: &Printer,
        report: &mut crate::report::Report,
    ) -> Option<Outcomes> {
        let sent = std::mem::take(&mut report.sent_tasks);
        if sent.is_empty() {
            return None;
        }
        let timeout = self.follow.timeout;
        printer.info(format!(
            "following {} task(s) for up to {}s (Ctrl-C stops following; what was sent stays sent)",
            sent.len(),
            timeout.as_secs()
        ));
        Some(self.wait(printer, &sent, timeout).await)
    }

    /// Waits until every task of `sent` reached an outcome, `timeout` passed, the feed was
    /// lost, or Ctrl-C; returns their states, in `sent`'s order.
    pub(crate) async fn wait(
        &self,
        printer: &Printer,
        sent: &[String],
        timeout: Duration,
    ) -> Outcomes {
        let deadline = tokio::time::Instant::now() + timeout;
        let bar = printer.progress(Some(sent.len() as u64), "following");
        let stop = Arc::new(AtomicBool::new(false));
        let interrupted = super::stop_on_signal(stop.clone());
        let why = loop {
            let done = self.settled(sent);
            bar.set_position(done as u64);
            if done == sent.len() {
                break None;
            }
            if self.lost.load(Ordering::SeqCst) {
                break Some("the event feed was lost (broker connection closed)".to_owned());
            }
            if stop.load(Ordering::SeqCst) {
                break Some("interrupted: stopped following; what was sent stays sent".to_owned());
            }
            tokio::select! {
                _ = self.changed.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(250)) => {}
                _ = tokio::time::sleep_until(deadline) => break Some(format!(
                    "--follow-timeout {}s passed", timeout.as_secs()
                )),
            }
        };
        bar.finish_and_clear();
        interrupted.abort();
        let seen = self.seen.lock().expect("not poisoned");
        let tasks = sent
            .iter()
            .filter_map(|id| seen.tasks.get(id).cloned())
            .collect();
        Outcomes::new(tasks, why)
    }

    fn settled(&self, sent: &[String]) -> usize {
        let seen = self.seen.lock().expect("not poisoned");
        sent.iter()
            .filter(|id| seen.tasks.get(*id).is_some_and(|t| t.outcome.is_final()))
            .count()
    }
}

/// Whether an `active_queues` answer lists the queue `target` names (any queue for an exchange).
fn reads(result: &serde_json::Value, target: &Target) -> bool {
    let Some(queues) = result.as_array() else {
        return false;
    };
    match target {
        Target::Queue(q) => queues
            .iter()
            .any(|x| x.get("name").and_then(|n| n.as_str()) == Some(q)),
        Target::Exchange { .. } => true,
    }
}

/// Reads the feed into `seen` until it ends.
async fn read(mut feed: Feed, seen: Arc<Mutex<Seen>>, changed: Arc<Notify>, lost: Arc<AtomicBool>) {
    while let Some(events) = feed.next().await {
        {
            let mut s = seen.lock().expect("not poisoned");
            for ev in events {
                s.apply(ev);
            }
        }
        changed.notify_waiters();
    }
    lost.store(true, Ordering::SeqCst);
    changed.notify_waiters();
}

/// The outcome of every followed task, with the totals and failure groups of the report.
#[derive(Debug, Serialize)]
pub(crate) struct Outcomes {
    pub(crate) followed: u64,
    pub(crate) succeeded: u64,
    pub(crate) failed: u64,
    /// Tasks that retried at least once (whatever their outcome).
    pub(crate) retried: u64,
    pub(crate) rejected: u64,
    pub(crate) revoked: u64,
    /// Seen by a worker but without an outcome in time (received, running, retrying).
    pub(crate) unfinished: u64,
    pub(crate) not_seen: u64,
    /// Plain messages that did not come back to their DLQ within the timeout.
    pub(crate) not_back: u64,
    /// Why following ended before every task had an outcome.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) stopped: Option<String>,
    /// Failed again, grouped by the same fingerprints as `--group-by motivo`, biggest first.
    pub(crate) failures: Vec<FailureGroup>,
    /// Every followed task (never cut).
    pub(crate) tasks: Vec<Tracked>,
}

#[derive(Debug, Serialize)]
pub(crate) struct FailureGroup {
    pub(crate) fingerprint: String,
    pub(crate) count: u64,
    pub(crate) example: String,
}

impl Outcomes {
    pub(crate) fn new(tasks: Vec<Tracked>, stopped: Option<String>) -> Outcomes {
        let count = |s: State| tasks.iter().filter(|t| t.outcome == s).count() as u64;
        let unfinished = [State::Received, State::Started, State::Retrying]
            .into_iter()
            .map(count)
            .sum();
        let mut groups: BTreeMap<String, (u64, String)> = BTreeMap::new();
        for t in tasks.iter().filter(|t| t.outcome == State::Failed) {
            let text = t.exception.clone().unwrap_or_default();
            let e = groups
                .entry(crate::fingerprint::fingerprint(&text))
                .or_insert((0, text));
            e.0 += 1;
        }
        let mut failures: Vec<FailureGroup> = groups
            .into_iter()
            .map(|(fingerprint, (count, example))| FailureGroup {
                fingerprint,
                count,
                example,
            })
            .collect();
        failures.sort_by_key(|g| std::cmp::Reverse(g.count));
        Outcomes {
            followed: tasks.len() as u64,
            succeeded: count(State::Succeeded),
            failed: count(State::Failed),
            retried: tasks.iter().filter(|t| t.retries > 0).count() as u64,
            rejected: count(State::Rejected),
            revoked: count(State::Revoked),
            unfinished,
            not_seen: count(State::NotSeen),
            not_back: count(State::NotBack),
            stopped,
            failures,
            tasks,
        }
    }

    /// The totals, for the audit trail (without the per-task list).
    pub(crate) fn totals(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            o.remove("tasks");
            o.remove("failures");
        }
        v
    }

    /// Every followed task succeeded (and no plain message came back).
    pub(crate) fn all_succeeded(&self) -> bool {
        self.succeeded + self.not_back == self.followed
    }

    /// Why a followed canary stops the run, or `None` when every canary succeeded: `items`
    /// names what was followed ("task", "message"), `rest` what was not sent ("replayed").
    pub(crate) fn canary_failure(&self, items: &str, rest: &str) -> Option<String> {
        // Following ended early (Ctrl-C): a plain message not back yet proves nothing.
        if let Some(why) = self.stopped.as_ref().filter(|_| self.not_back > 0) {
            return Some(format!(
                "canary not finished: {why}; the rest were not {rest}"
            ));
        }
        (!self.all_succeeded()).then(|| {
            format!(
                "canary failed: {} of {} canary {items}(s) did not succeed ({}); the rest were not {rest}",
                self.followed - self.succeeded - self.not_back,
                self.followed,
                self.summary()
            )
        })
    }

    /// The rows or messages whose task succeeded.
    pub(crate) fn succeeded_from(&self) -> Vec<RecordId> {
        let ok = self.tasks.iter().filter(|t| t.outcome == State::Succeeded);
        ok.map(|t| t.from.clone()).collect()
    }

    /// One line for the summary.
    pub(crate) fn summary(&self) -> String {
        let mut s = format!(
            "followed {}: {} succeeded, {} failed again, {} not finished, {} not seen",
            self.followed, self.succeeded, self.failed, self.unfinished, self.not_seen
        );
        for (n, what) in [
            (self.rejected, "rejected"),
            (self.revoked, "revoked"),
            (self.retried, "retried at least once"),
            (self.not_back, "plain message(s) not back in the DLQ"),
        ] {
            if n > 0 {
                s.push_str(&format!(", {n} {what}"));
            }
        }
        if let Some(why) = &self.stopped {
            s.push_str(&format!(" ({why})"));
        }
        s
    }

    /// The report on stderr: failure groups, then one line per task that did not succeed
    /// ("row 4711 → task 9c0e… → failed again: IntegrityError …"), at most `LINES` of them.
    pub(crate) fn print(&self, printer: &Printer, unit: &str) {
        const LINES: usize = 50;
        if !self.failures.is_empty() {
            let rows: Vec<Vec<String>> = self
                .failures
                .iter()
                .map(|g| vec![ellipsize(&g.fingerprint, 70), g.count.to_string()])
                .collect();
            printer.table_to_stderr(&["failed again with", "count"], &rows);
        }
        let bad: Vec<&Tracked> = self
            .tasks
            .iter()
            .filter(|t| !matches!(t.outcome, State::Succeeded | State::NotBack))
            .collect();
        for t in bad.iter().take(LINES) {
            let mut line = format!(
                "{unit} {} → task {} ({}) → {}",
                t.from,
                t.task_id,
                t.task,
                t.outcome.text()
            );
            if let Some(e) = &t.exception {
                line.push_str(&format!(": {}", ellipsize(e, 200)));
            }
            printer.warn_always(line);
        }
        if bad.len() > LINES {
            printer.warn_always(format!(
                "... and {} more not succeeded (-o json lists every task)",
                bad.len() - LINES
            ));
        }
        let line = self.summary();
        match self.all_succeeded() {
            true => printer.info(line),
            false => printer.warn_always(line),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: &str, id: &str) -> Event {
        Event {
            kind: kind.into(),
            uuid: Some(id.into()),
            hostname: "w@h".into(),
            exception: kind
                .contains("fail")
                .then(|| "IntegrityError('dup 1')".into()),
            requeue: false,
        }
    }

    fn seen_with(ids: &[&str]) -> Seen {
        let mut s = Seen::default();
        for id in ids {
            s.tasks.insert(
                id.to_string(),
                Tracked {
                    from: RecordId::Int(1),
                    task_id: id.to_string(),
                    task: "t".into(),
                    outcome: State::NotSeen,
                    worker: None,
                    exception: None,
                    retries: 0,
                },
            );
        }
        s
    }

    #[test]
    fn states_move_forward_and_retries_reopen() {
        let mut s = seen_with(&["a", "b", "c"]);
        for e in [
            ev("task-received", "a"),
            ev("task-started", "a"),
            ev("task-succeeded", "a"),
        ] {
            s.apply(e);
        }
        // A late `received` does not undo an outcome.
        s.apply(ev("task-received", "a"));
        assert_eq!(s.tasks["a"].outcome, State::Succeeded);
        s.apply(ev("task-retried", "b"));
        assert_eq!(s.tasks["b"].outcome, State::Retrying);
        s.apply(ev("task-received", "b"));
        s.apply(ev("task-succeeded", "b"));
        assert_eq!(
            (s.tasks["b"].outcome, s.tasks["b"].retries),
            (State::Succeeded, 1)
        );
        s.apply(ev("task-rejected", "c"));
        s.apply(ev("task-failed", "c"));
        assert_eq!(s.tasks["c"].outcome, State::Failed);
        // Someone else's task: only the worker is noted.
        s.apply(ev("task-failed", "zzz"));
        assert!(!s.tasks.contains_key("zzz"));
        assert!(s.task_events.contains("w@h"));
    }

    #[test]
    fn outcomes_group_failures_by_fingerprint() {
        let mut s = seen_with(&["a", "b", "c", "d"]);
        s.apply(ev("task-failed", "a"));
        let mut other = ev("task-failed", "b");
        other.exception = Some("IntegrityError('dup 2')".into());
        s.apply(other);
        s.apply(ev("task-succeeded", "c"));
        let tasks: Vec<Tracked> = ["a", "b", "c", "d"]
            .iter()
            .map(|id| s.tasks[*id].clone())
            .collect();
        let o = Outcomes::new(tasks, Some("--follow-timeout 1s passed".into()));
        assert_eq!(
            (o.followed, o.failed, o.succeeded, o.not_seen),
            (4, 2, 1, 1)
        );
        assert_eq!(o.failures.len(), 1, "{:?}", o.failures);
        assert_eq!(o.failures[0].count, 2);
        assert!(!o.all_succeeded());
        assert_eq!(o.succeeded_from(), vec![RecordId::Int(1)]);
        assert!(o.summary().contains("2 failed again"), "{}", o.summary());
    }
}
