//! Table replay: re-dispatch failed Celery tasks from the failed-task table.
//!
//! Rows are handled in small groups, each in one database transaction: claim the group
//! (`FOR UPDATE SKIP LOCKED`, or `BEGIN IMMEDIATE` on SQLite), build and validate each Celery
//! message, publish them with `mandatory` and publisher confirms, then mark exactly the
//! confirmed rows `reprocessada` and commit, as soon as the group's confirms are in. Several
//! groups are in flight at once; together they never hold more than `window` rows, so a crash
//! can leave at most `window` rows published but not marked: the documented duplicate window.
//! (One transaction per row capped throughput at the database's commit rate; see
//! docs/BENCHMARKS-HISTORY.md.)

use super::ReplayCommon;
use super::follow::{Follow, Tracker, Watch};
use super::{Target, print_plan_groups};
use crate::celery::dispatch::{Dispatcher, Pending, Sent, TaskSender};
use crate::celery::workers::TaskMap;
use crate::celery::{self, ReplayOrigin};
use crate::endpoints::Endpoints;
use crate::error::Exit;
use crate::model::{DeadLetter, RecordId};
use crate::output::{Printer, Tabled, ellipsize};
use crate::report::Report;
use crate::select::{Selected, Selection};
use crate::source::table::Dialect;
use crate::source::table::{ClaimError, FailedTable};
use crate::transform::Transform;
use anyhow::Result;
use chrono::Utc;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use tokio::sync::mpsc;

pub(crate) struct Options {
    /// `common.window`: rows published but not yet marked, at most (the duplicate window).
    pub(crate) common: ReplayCommon,
    /// Where the tasks go (the Celery default queue unless told otherwise).
    pub(crate) target: Target,
    /// `target` is Celery's default queue, not one the operator named.
    pub(crate) target_is_default: bool,
    /// `--canary N --canary-wait D`: replay N rows, wait, and stop if their failure came back.
    pub(crate) canary: Option<super::Canary>,
    /// `--follow`: each task followed to its outcome through Celery's events.
    pub(crate) follow: Option<Follow>,
}

/// What the plan pass found.
struct Plan {
    ids: Vec<RecordId>,
    /// (task, reason fingerprint) -> rows
    groups: BTreeMap<(String, String), u64>,
    /// Rows that cannot become a valid Celery message: reported, never published.
    invalid: Vec<(RecordId, String)>,
    /// Stored task name -> rows to replay (the worker check's question).
    tasks: BTreeMap<String, u64>,
    /// The first rows to replay, as (task, args): what a failure coming back looks like.
    first: Vec<(String, serde_json::Value)>,
}

/// How one row ended.
#[derive(Clone)]
enum RowEvent {
    /// Confirmed by the broker, with the task id it went out with.
    Replayed(String),
    Failed(String),
    Skipped(String),
    /// The run must stop (broker or database gone); the row is left un-marked.
    Fatal(String),
}

/// Rows per transaction: a few round trips and one commit per group instead of per row,
/// while several groups keep the broker busy.
fn group_size(window: usize) -> usize {
    (window / 4).clamp(1, 32)
}

/// How a run is shaped: rows per transaction, and transactions in flight at once.
struct Shape {
    window: usize,
    group: usize,
    workers: usize,
}

impl Shape {
    fn new(dialect: Dialect, window: usize) -> Shape {
        let group = group_size(window);
        // SQLite admits one writer at a time: one group in flight.
        let workers = match dialect {
            Dialect::Sqlite => 1,
            _ => (window / group).max(1),
        };
        Shape {
            window,
            group,
            workers,
        }
    }
}

/// What every row of one run shares.
struct RunContext {
    table: FailedTable,
    replay_id: String,
    host: String,
    map: Arc<TaskMap>,
}

impl RunContext {
    fn origin(&self, row_id: &RecordId) -> ReplayOrigin {
        ReplayOrigin {
            table: self.table.location(),
            row_id: row_id.to_string(),
            replay_id: self.replay_id.clone(),
            host: self.host.clone(),
        }
    }
}

/// Celery's default queue is missing: the refusal names the queues the live workers consume
/// (asked only when the worker check is on), which `--to-queue` can name.
async fn with_worker_queues(e: anyhow::Error, d: &Dispatcher, opts: &Options) -> anyhow::Error {
    let check = &opts.common.workers;
    let live = match check.enabled {
        true => d.workers(check.timeout).await.unwrap_or_default(),
        false => Vec::new(),
    };
    let queues: std::collections::BTreeSet<&str> = live
        .iter()
        .flat_map(|w| w.queues.iter().map(String::as_str))
        .collect();
    if queues.is_empty() {
        return e;
    }
    let names: Vec<String> = queues.iter().map(|q| format!("{q:?}")).collect();
    crate::error::usage(format!(
        "{e:#}; the live Celery workers consume {}: pass --to-queue NAME",
        names.join(", ")
    ))
}

/// plan -> worker check -> gate -> run -> report.
pub(crate) async fn run(endpoints: &Endpoints, printer: &Printer, opts: Options) -> Result<Exit> {
    let db = endpoints.require_database()?;
    let shape = Shape::new(db.url.dialect, opts.common.window.get());
    // One connection per group in flight, plus one for reading.
    let table = FailedTable::open_sized(&db.url, &db.table, shape.workers as u32 + 2).await?;
    let ctx = RunContext {
        table,
        replay_id: uuid::Uuid::new_v4().to_string(),
        host: super::hostname(),
        map: Arc::new(opts.common.workers.map.clone()),
    };
    // The broker comes first: an unknown target refuses the replay before any planning output.
    let dispatcher = Dispatcher::connect(&endpoints.celery, &endpoints.mailbox).await?;
    let facts = match dispatcher.check_target(&opts.target).await {
        Ok(facts) => facts,
        Err(e) if opts.target_is_default => {
            return Err(with_worker_queues(e, &dispatcher, &opts).await);
        }
        Err(e) => return Err(e),
    };
    let target_note = super::note_target(printer, facts);
    let plan = plan_rows(&ctx, printer, &opts).await?;
    print_plan(printer, &ctx, &opts, &plan, &dispatcher, target_note);
    let adding = plan.ids.len() as u64;
    if let Some(w) = dispatcher.length_warning(&opts.target, adding).await {
        printer.warn(w);
    }
    let timeout = opts.common.workers.timeout;
    let watch = super::workers::ensure_runnable_and_watch(
        printer,
        &dispatcher,
        &opts.common.workers,
        &opts.target,
        &plan.tasks,
        opts.follow,
    )
    .await?;
    let mut audit = audit_of(endpoints, printer, &opts, &ctx);
    let gate = crate::bulk::Gate {
        safety: opts.common.safety,
        planned: plan.ids.len() as u64,
        refused: plan.invalid.len(),
        nothing: "nothing to replay",
        dry_run: "dry run: nothing was published or marked",
        prompt: format!("Replay {} row(s)?", plan.ids.len()),
        audit: Some(&mut audit),
        hold: None,
    };
    if let Some(exit) = crate::bulk::gate(printer, gate).await? {
        return Ok(exit);
    }
    let sender = dispatcher.sender(shape.window, opts.common.rate).await?;
    if let Some(w) = watch.as_ref()
        && let Some(exit) = w
            .enable_or_stop(printer, &dispatcher, timeout, &mut audit)
            .await
    {
        return Ok(exit);
    }
    let table = ctx.table.clone();
    let mut report = replay_rows(printer, ctx, sender, plan, opts, &shape, watch.as_ref()).await;
    if let Some(w) = watch.as_ref() {
        follow_through(printer, &table, w, &mut report).await;
        if let Some(left_on) = w.finish(&dispatcher, timeout).await {
            printer.warn_always(left_on);
        }
    }
    super::print_report(printer, &report, "replayed", &mut audit);
    if report.canary_failed {
        // Nothing was in flight, and running it again would fail the same way.
        printer.warn(
            "the canary's rows failed again: fix the cause (the new rows say why) before replaying the rest; the rows not replayed are left un-marked",
        );
    } else if report.stopped.is_some() {
        printer.warn(format!(
            "rows not reported as replayed were left un-marked; run the same command again to finish (at most {} of them may have been published already and will be published again)",
            shape.window
        ));
    }
    Ok(report.exit())
}

/// The audit trail of this replay.
fn audit_of(
    endpoints: &Endpoints,
    printer: &Printer,
    opts: &Options,
    ctx: &RunContext,
) -> crate::audit::Audit {
    crate::audit::Audit::new(
        endpoints.audit_log.as_deref(),
        printer,
        crate::audit::Subject {
            action: "replay",
            source: "table",
            location: ctx.table.location(),
            selection: opts.common.selection.describe(),
            run_id: ctx.replay_id.clone(),
        },
    )
}

/// `--follow`: waits for the sent tasks' outcomes, marks the rows whose task succeeded
/// (`--mark-on-success`), prints the outcomes and puts them in the report.
async fn follow_through(
    printer: &Printer,
    table: &FailedTable,
    watch: &Watch,
    report: &mut Report,
) {
    let Some(outcomes) = watch.follow_sent(printer, report).await else {
        return;
    };
    if watch.follow.mark_on_success {
        let ok = outcomes.succeeded_from();
        match table.mark(&ok, Utc::now()).await {
            Ok(()) => printer.info(format!(
                "marked {} row(s) reprocessada (their task succeeded); {} left pending",
                ok.len(),
                outcomes.followed - ok.len() as u64
            )),
            Err(e) => {
                report.stopped = Some(format!(
                    "database: marking the rows whose task succeeded: {e:#}; they stay pending and a new run replays them again"
                ))
            }
        }
    }
    outcomes.print(printer, "row");
    report.follow = Some(outcomes);
}

/// The plan pass (and the dry run's view of every message).
async fn plan_rows(ctx: &RunContext, printer: &Printer, opts: &Options) -> Result<Plan> {
    let mut dry = opts
        .common
        .safety
        .dry_run
        .then(|| printer.stream::<TaskPreview>());
    // Under --yes nobody reads the plan before the replay: a row is built (and refused if it
    // cannot become a valid message) when it is replayed, not twice.
    let validate = opts.common.safety.dry_run || !opts.common.safety.yes;
    let transform = opts.common.transform.as_deref();
    let mut changed = 0u64;
    let plan = plan(&ctx.table, &opts.common.selection, printer, |rec| {
        if !validate {
            return Ok(None);
        }
        let built = row_message(rec, &ctx.map, transform, &ctx.origin(&rec.id));
        if let Ok((_, true)) = &built {
            changed += 1;
        }
        if let (Some(out), Ok((msg, _))) = (dry.as_mut(), &built) {
            out.write(TaskPreview::new(rec, msg, &opts.target))?;
        }
        Ok(built.err())
    })
    .await?;
    if let (Some(t), true) = (transform, validate) {
        printer.info(format!(
            "--transform (sha256 {}) changes the args of {changed} row(s); the stored rows keep theirs",
            &t.sha256()[..16]
        ));
    }
    if let Some(out) = dry {
        out.finish()?;
    }
    Ok(plan)
}

fn print_plan(
    printer: &Printer,
    ctx: &RunContext,
    opts: &Options,
    plan: &Plan,
    dispatcher: &Dispatcher,
    target_note: Option<String>,
) {
    let total = plan.ids.len() as u64 + plan.invalid.len() as u64;
    printer.info(format!(
        "Plan: replay {total} row(s) of table {} ({}) as Celery tasks {} on {}",
        ctx.table.location(),
        opts.common.selection.describe(),
        dispatcher.target_text(&opts.target),
        dispatcher.describe(),
    ));
    print_plan_groups(printer, &plan.groups);
    if let Some(note) = target_note {
        printer.info(note);
    }
    if !plan.invalid.is_empty() {
        printer.warn(format!(
            "{} row(s) cannot become a valid Celery message and will be left untouched:",
            plan.invalid.len()
        ));
        for (id, why) in plan.invalid.iter().take(10) {
            printer.warn(format!("  id {id}: {why}"));
        }
    }
}

/// The run: groups of rows claimed, sent and marked by `shape.workers` tasks at once; every
/// How many of the first rows the plan keeps for a canary's check.
pub(super) const FIRST_ROWS: usize = 10_000;

/// The run, with a canary first when asked: every row's outcome lands in the report.
async fn replay_rows(
    printer: &Printer,
    ctx: RunContext,
    sender: TaskSender,
    plan: Plan,
    opts: Options,
    shape: &Shape,
    watch: Option<&Watch>,
) -> Report {
    let mut report = Report::new("replay");
    for (id, why) in plan.invalid {
        report.fail(id, why);
    }
    let shared = Arc::new(Shared {
        table: ctx.table.clone(),
        sel: opts.common.selection,
        target: opts.target,
        map: ctx.map.clone(),
        transform: opts.common.transform.clone(),
        origin: ctx.origin(&RecordId::Text(String::new())),
        tracker: watch.map(Watch::tracker),
        mark_on_confirm: !opts.follow.is_some_and(|f| f.mark_on_success),
    });
    let mut ids = plan.ids;
    let Some(super::Canary { count, wait }) = opts.canary else {
        report.absorb(replay_ids(printer, &shared, &sender, ids, shape).await);
        return report;
    };
    let started = Utc::now();
    let rest = ids.split_off((count.get() as usize).min(ids.len()));
    let tried = ids.len();
    report.absorb(replay_ids(printer, &shared, &sender, ids, shape).await);
    if report.stopped.is_some() || report.succeeded == 0 {
        return report;
    }
    if let Some(w) = watch {
        // Followed: the canary's own tasks say whether they ran.
        printer.info(format!(
            "canary: {} row(s) replayed; waiting up to {}s for their tasks' outcomes",
            report.succeeded,
            wait.as_secs()
        ));
        let o = w.wait(printer, &report.sent_tasks, wait).await;
        match o.canary_failure("task", "replayed") {
            None => {
                printer.info("canary: every task succeeded; replaying the rest");
                report.absorb(replay_ids(printer, &shared, &sender, rest, shape).await);
            }
            Some(why) => {
                report.canary_failed = true;
                report.stopped = Some(why);
            }
        }
        return report;
    }
    printer.info(format!(
        "canary: {} row(s) replayed; watching for {}s whether they fail again",
        report.succeeded,
        wait.as_secs()
    ));
    let deadline = tokio::time::Instant::now() + wait;
    if !super::wait_unless_signal(deadline, super::CANARY_CUT).await {
        report.stopped = Some("interrupted".into());
        return report;
    }
    let canaries = &plan.first[..tried.min(plan.first.len())];
    match failed_again(&ctx.table, started, canaries).await {
        Ok(0) => {
            printer.info("canary: none failed again; replaying the rest");
            report.absorb(replay_ids(printer, &shared, &sender, rest, shape).await);
        }
        Ok(died) => {
            report.canary_failed = true;
            report.stopped = Some(format!(
                "canary failed: {died} of {} replayed row(s) failed again (the app stored them again); the rest were not replayed",
                report.succeeded
            ));
        }
        Err(e) => report.stopped = Some(format!("canary: cannot read the table: {e:#}")),
    }
    report
}

/// Rows stored since `since` for the same task with the same args as a canary row: the
/// app's error handler wrote the failure again.
pub(super) async fn failed_again(
    table: &FailedTable,
    since: chrono::DateTime<Utc>,
    canaries: &[(String, serde_json::Value)],
) -> Result<u64> {
    let sel = Selection {
        since: Some(since),
        replayed: crate::select::ReplayedFilter::All,
        ..Default::default()
    };
    let mut selected = Selected::new(table.stream(&sel)?, &sel);
    let mut died = 0;
    while let Some(rec) = selected.next().await {
        let rec = rec?;
        let task = rec.task.clone().unwrap_or_default();
        if canaries
            .iter()
            .any(|(t, args)| *t == task && *args == rec.payload)
        {
            died += 1;
        }
    }
    Ok(died)
}

/// Replays `ids`: groups of rows claimed, sent and marked by `shape.workers` tasks at once.
async fn replay_ids(
    printer: &Printer,
    shared: &Arc<Shared>,
    sender: &TaskSender,
    ids: Vec<RecordId>,
    shape: &Shape,
) -> Report {
    let mut report = Report::new("replay");
    let ids = Arc::new(ids);
    let next = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, mut rx) = mpsc::channel::<(RecordId, RowEvent)>(shape.window * 2);
    let group = shape.group;
    for _ in 0..shape.workers.min(ids.len().div_ceil(group)) {
        let (ids, next, stop, tx, sender, shared) = (
            ids.clone(),
            next.clone(),
            stop.clone(),
            tx.clone(),
            sender.clone(),
            shared.clone(),
        );
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let i = next.fetch_add(group, Ordering::SeqCst);
                if i >= ids.len() {
                    break;
                }
                let chunk = &ids[i..(i + group).min(ids.len())];
                let events = replay_group(&shared, &sender, chunk).await;
                if events
                    .iter()
                    .any(|(_, ev)| matches!(ev, RowEvent::Fatal(_)))
                {
                    stop.store(true, Ordering::SeqCst);
                }
                for ev in events {
                    if tx.send(ev).await.is_err() {
                        return;
                    }
                }
            }
        });
    }
    drop(tx);

    let following = shared.tracker.is_some();
    let bar = printer.progress(Some(ids.len() as u64), "replaying");
    let interrupted = super::stop_on_signal(stop.clone());
    while let Some((id, ev)) = rx.recv().await {
        bar.inc(1);
        match ev {
            RowEvent::Replayed(task_id) => {
                report.success();
                if following {
                    report.sent_tasks.push(task_id);
                }
            }
            RowEvent::Failed(why) => report.fail(id, why),
            RowEvent::Skipped(why) => report.skip(id, why),
            RowEvent::Fatal(why) => {
                if report.stopped.is_none() {
                    report.stopped = Some(why.clone());
                }
                report.fail(id, why);
            }
        }
    }
    bar.finish_and_clear();
    if stop.load(Ordering::SeqCst) && report.stopped.is_none() {
        report.stopped = Some("interrupted".into());
    }
    interrupted.abort();
    report
}

/// What the group tasks share.
struct Shared {
    table: FailedTable,
    sel: Selection,
    target: Target,
    map: Arc<TaskMap>,
    transform: Option<Arc<Transform>>,
    /// Provenance of the run; each row fills in its id.
    origin: ReplayOrigin,
    /// `--follow`: each task is registered before it is sent.
    tracker: Option<Tracker>,
    /// Rows are marked when the broker confirms (not with `--mark-on-success`).
    mark_on_confirm: bool,
}

/// The Celery message for one row: its stored args, or what `--transform` made of them (the
/// stored row keeps its args). The flag says whether the program changed them.
fn row_message(
    rec: &DeadLetter,
    map: &TaskMap,
    transform: Option<&Transform>,
    origin: &ReplayOrigin,
) -> Result<(celery::TaskMessage, bool), String> {
    let edit = transform.map(|t| t.apply(rec)).transpose()?;
    let args = match &edit {
        Some(e) => Some(e.payload.as_str()),
        None => rec.payload_text.as_deref(),
    };
    let msg = celery::build(
        map.sent_name(rec.task.as_deref().unwrap_or("")),
        args,
        origin,
    )
    .map_err(|e| e.to_string())?;
    Ok((msg, edit.is_some_and(|e| e.changed)))
}

/// Streams the selection once: the ids to replay, groups for the plan, invalid rows.
async fn plan(
    table: &FailedTable,
    sel: &Selection,
    printer: &Printer,
    mut check: impl FnMut(&DeadLetter) -> Result<Option<String>>,
) -> Result<Plan> {
    let rx = table.stream(sel)?;
    let mut selected = Selected::new(rx, sel);
    let mut plan = Plan {
        ids: Vec::new(),
        groups: BTreeMap::new(),
        invalid: Vec::new(),
        tasks: BTreeMap::new(),
        first: Vec::new(),
    };
    while let Some(rec) = selected.next().await {
        let rec = rec?;
        let key = (
            rec.task.clone().unwrap_or_default(),
            crate::fingerprint::fingerprint(rec.motivo.as_deref().unwrap_or("")),
        );
        let task = key.0.clone();
        *plan.groups.entry(key).or_default() += 1;
        match check(&rec)? {
            None => {
                if plan.first.len() < FIRST_ROWS {
                    plan.first.push((task.clone(), rec.payload.clone()));
                }
                *plan.tasks.entry(task).or_default() += 1;
                plan.ids.push(rec.id);
            }
            Some(why) => plan.invalid.push((rec.id, why)),
        }
    }
    if let Some(w) = selected.eval_warning() {
        printer.warn(w);
    }
    Ok(plan)
}

/// One group, one transaction: claim, re-check, build, publish, wait for the confirms, mark
/// the confirmed rows, commit. Every id of `ids` gets exactly one event.
async fn replay_group(
    shared: &Shared,
    publisher: &TaskSender,
    ids: &[RecordId],
) -> Vec<(RecordId, RowEvent)> {
    let all =
        |ev: &dyn Fn() -> RowEvent| ids.iter().map(|id| (id.clone(), ev())).collect::<Vec<_>>();
    let (claim, records) = match shared.table.claim(ids, shared.sel.replayed).await {
        Ok(claimed) => claimed,
        Err(ClaimError::Input(e)) => return all(&|| RowEvent::Failed(e.to_string())),
        Err(ClaimError::Database(e)) => {
            let why = format!("database: {e}");
            return all(&|| RowEvent::Fatal(why.clone()));
        }
    };
    let mut events: Vec<(RecordId, RowEvent)> = Vec::with_capacity(ids.len());
    let mut claimed = std::collections::HashSet::new();
    let mut pending = Vec::new();
    for rec in records {
        let rec = match rec {
            Ok(r) => r,
            Err(e) => {
                // The id could not be read either: report it against the whole group.
                let why = format!("cannot read a claimed row: {e}");
                return all(&|| RowEvent::Failed(why.clone()));
            }
        };
        claimed.insert(rec.id.clone());
        match submit_row(shared, publisher, &rec).await {
            Ok((task_id, outcome)) => pending.push((rec.id, task_id, outcome)),
            Err(ev) => events.push((rec.id, ev)),
        }
    }
    for id in ids {
        if !claimed.contains(id) {
            events.push((
                id.clone(),
                RowEvent::Skipped("already replayed, or being replayed by another run".into()),
            ));
        }
    }
    let mut confirmed = Vec::new();
    for (id, task_id, outcome) in pending {
        match outcome.await {
            Ok(Sent::Delivered) => confirmed.push((id, task_id)),
            Ok(Sent::Refused(why)) => {
                events.push((id, RowEvent::Failed(format!("{why}; not marked"))))
            }
            Err(e) => events.push((id, RowEvent::Fatal(format!("broker: {e:#}")))),
        }
    }
    // Mark what the broker confirmed, even when the run stops: those are delivered. With
    // nothing confirmed, or with `--mark-on-success` (marked once their tasks succeeded), the
    // claim rolls back when dropped.
    if confirmed.is_empty() {
        return events;
    }
    let marked = match shared.mark_on_confirm {
        true => {
            let ids: Vec<RecordId> = confirmed.iter().map(|(id, _)| id.clone()).collect();
            claim.mark_and_commit(&ids, Utc::now()).await
        }
        false => Ok(()),
    };
    for (id, task_id) in confirmed {
        let event = match &marked {
            Ok(()) => RowEvent::Replayed(task_id),
            Err(e) => RowEvent::Fatal(format!(
                "database: {e} (published but not marked; the next run publishes it again)"
            )),
        };
        events.push((id, event));
    }
    events
}

/// Re-checks one claimed row against the selection, builds its message and submits it
/// (pipelined: the outcome is awaited by the caller). `Err`: the row's event, nothing sent.
async fn submit_row(
    shared: &Shared,
    publisher: &TaskSender,
    rec: &DeadLetter,
) -> Result<(String, Pending), RowEvent> {
    // The row may have changed since the plan: replay only what still matches.
    if !matches!(shared.sel.matches(rec), Ok(true)) {
        return Err(RowEvent::Skipped("no longer matches the selection".into()));
    }
    let row_origin = ReplayOrigin {
        row_id: rec.id.to_string(),
        ..shared.origin.clone()
    };
    let transform = shared.transform.as_deref();
    let (msg, _) =
        row_message(rec, &shared.map, transform, &row_origin).map_err(RowEvent::Failed)?;
    let task_id = msg.task_id.clone();
    if let Some(t) = &shared.tracker {
        t.expect(rec.id.clone(), &task_id, &msg.task);
    }
    let pending = publisher
        .submit(msg, &shared.target)
        .await
        .map_err(|e| RowEvent::Fatal(format!("broker: {e:#}")))?;
    Ok((task_id, pending))
}

/// The message a dry run shows for one row.
#[derive(serde::Serialize)]
pub(crate) struct TaskPreview {
    row_id: RecordId,
    task: String,
    exchange: String,
    routing_key: String,
    properties: serde_json::Value,
    headers: serde_json::Value,
    body: Box<serde_json::value::RawValue>,
}

impl TaskPreview {
    fn new(rec: &DeadLetter, msg: &celery::TaskMessage, target: &Target) -> TaskPreview {
        let (exchange, routing_key) = target.route();
        TaskPreview {
            row_id: rec.id.clone(),
            task: msg.task.clone(),
            exchange,
            routing_key,
            properties: crate::rabbit::codec::properties_to_json(&msg.properties),
            headers: crate::rabbit::codec::table_to_json(&msg.headers),
            body: crate::model::exact_json(&msg.body),
        }
    }
}

impl Tabled for TaskPreview {
    fn columns() -> &'static [&'static str] {
        &["row", "task", "exchange/routing key", "body"]
    }

    fn cells(&self) -> Vec<String> {
        vec![
            self.row_id.to_string(),
            self.task.clone(),
            format!("{}/{}", self.exchange, self.routing_key),
            ellipsize(self.body.get(), 80),
        ]
    }
}
