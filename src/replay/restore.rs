//! `dlq replay --from-file ARCHIVE`: re-dispatch archived dead letters.
//!
//! The archive's checksum is verified before anything else. Archived table rows become Celery
//! tasks again exactly as a table replay builds them (same validation, confirms, provenance
//! headers); archived queue messages are rebuilt from their exact bytes and typed
//! properties and go where a queue replay sends them (the queue a consumer last gave up on
//! them in, or `--to-queue`), with the same header handling and loop guard. Progress is kept in
//! `<archive>.journal`: each record number is appended right after its confirm, so a re-run
//! resumes (duplicates are limited to the publishes in flight when a run dies: `--window`).

use super::ReplayCommon;
use super::follow::{Follow, Tracker, Watch};
use super::requeue::{self, Stamp};
use super::{Target, print_plan_groups, print_report};
use crate::archive::{self, Journal};
use crate::celery::dispatch::{Dispatcher, Pending, Sent, TaskSender};
use crate::celery::{self, ReplayOrigin, TaskMessage};
use crate::endpoints::Endpoints;
use crate::error::{Exit, usage};
use crate::fingerprint;
use crate::model::{DeadLetter, RecordId, SourceKind};
use crate::output::Printer;
use crate::rabbit::publish::{Outgoing, Publisher};
use crate::report::Report;
use crate::select::Selector;
use anyhow::Result;
use base64::Engine as _;
use futures_util::StreamExt;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;

pub(crate) struct Options {
    pub(crate) file: std::path::PathBuf,
    /// `common.target`: explicit; table rows default to the Celery queue, queue messages to
    /// their origin.
    pub(crate) common: ReplayCommon,
    /// `--canary N --canary-wait D` (archives of table rows): restore N, wait, and stop if
    /// the app stored their failures again.
    pub(crate) canary: Option<super::Canary>,
    /// `--follow` (archives of table rows): each task followed to its outcome.
    pub(crate) follow: Option<Follow>,
}

/// What every archived record becomes before it is published.
struct Context<'a> {
    kind: SourceKind,
    target: &'a Option<Target>,
    replay_id: String,
    user: String,
    max_replays: u32,
    map: crate::celery::workers::TaskMap,
    transform: Option<std::sync::Arc<crate::transform::Transform>>,
    /// `--follow`: each task registered before it is sent.
    tracker: Option<Tracker>,
}

/// One archived record, ready to send: a Celery task (through the dispatcher) or a RabbitMQ
/// message rebuilt from its exact bytes.
enum Prepared {
    Task(TaskMessage, Target),
    Message(Outgoing),
}

impl Prepared {
    /// A Celery task's id: what `--follow` follows.
    fn task_id(&self) -> Option<String> {
        match self {
            Prepared::Task(m, _) => Some(m.task_id.clone()),
            Prepared::Message(_) => None,
        }
    }

    /// (exchange, routing key): for the plan and the dry run.
    fn route(&self) -> (String, String) {
        match self {
            Prepared::Task(_, t) => t.route(),
            Prepared::Message(m) => (m.exchange.clone(), m.routing_key.clone()),
        }
    }

    fn parts(&self) -> (&lapin::BasicProperties, &[u8]) {
        match self {
            Prepared::Task(m, _) => (&m.properties, &m.body),
            Prepared::Message(m) => (&m.properties, &m.body),
        }
    }
}

/// Where prepared records go: table rows to the Celery dispatcher, queue messages to RabbitMQ.
enum Sender {
    Tasks(TaskSender),
    Messages(Publisher),
}

impl Sender {
    async fn submit(&self, p: Prepared) -> Result<Pending> {
        match (self, p) {
            (Sender::Tasks(s), Prepared::Task(msg, target)) => s.submit(msg, &target).await,
            (Sender::Messages(s), Prepared::Message(m)) => {
                let outcome = s.submit(m).await?;
                Ok(Box::pin(async move {
                    Ok(crate::celery::amqp::sent(outcome.await?))
                }))
            }
            _ => unreachable!("an archive holds one kind of record"),
        }
    }
}

impl Context<'_> {
    /// `--transform` on one archived record whose stored payload text is `text`.
    fn edit(
        &self,
        rec: &DeadLetter,
        text: Option<String>,
    ) -> Result<Option<crate::transform::Edit>, String> {
        let Some(t) = &self.transform else {
            return Ok(None);
        };
        let mut rec = rec.clone();
        rec.payload_text = text;
        t.apply(&rec).map(Some)
    }

    /// What to send for one archived record, or why it cannot be replayed.
    fn prepare(&self, rec: &DeadLetter) -> Result<Prepared, String> {
        match self.kind {
            SourceKind::Table => {
                let origin = ReplayOrigin {
                    table: rec.location.clone(),
                    row_id: rec.id.to_string(),
                    replay_id: self.replay_id.clone(),
                    host: super::hostname(),
                };
                // The stored args text when archived (exact), else the payload re-serialized.
                let args = rec
                    .raw
                    .as_ref()
                    .and_then(|r| r.get("args"))
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .or_else(|| (!rec.payload.is_null()).then(|| rec.payload.to_string()));
                let edit = self.edit(rec, args.clone())?;
                let args = edit.map(|e| e.payload).or(args);
                let task = self.map.sent_name(rec.task.as_deref().unwrap_or(""));
                let msg =
                    celery::build(task, args.as_deref(), &origin).map_err(|e| e.to_string())?;
                let target = self
                    .target
                    .clone()
                    .unwrap_or_else(|| Target::Queue(celery::DEFAULT_CELERY_QUEUE.into()));
                Ok(Prepared::Task(msg, target))
            }
            SourceKind::Queue => {
                let raw = rec
                    .raw
                    .as_ref()
                    .ok_or("the archived message has no raw copy")?;
                let props = crate::rabbit::codec::properties_from_typed_json(&raw["properties"])
                    .map_err(|e| format!("archived properties: {e}"))?;
                let body = base64::engine::general_purpose::STANDARD
                    .decode(raw["body"].as_str().unwrap_or(""))
                    .map_err(|e| format!("archived body: {e}"))?;
                let (exchange, routing_key) = match self.target {
                    Some(t) => t.route(),
                    None => {
                        let origin = rec
                            .origin_queue()
                            .filter(|q| !q.is_empty())
                            .ok_or_else(|| requeue::Refusal::NoOrigin.to_string())?;
                        (String::new(), origin.to_string())
                    }
                };
                let stamp = Stamp {
                    replay_id: self.replay_id.clone(),
                    at: chrono::Utc::now(),
                    from_queue: rec.location.clone(),
                    user: self.user.clone(),
                    max_replays: self.max_replays,
                };
                let mut properties =
                    requeue::prepare(&props, &stamp, &uuid::Uuid::new_v4().to_string())
                        .map_err(|e| e.to_string())?;
                let mut body = body;
                let text = String::from_utf8_lossy(&body).into_owned();
                if let (Some(e), Some(t)) = (self.edit(rec, Some(text))?, &self.transform) {
                    let original = rec.id.to_string();
                    properties = requeue::transformed(properties, &e, &original, t.sha256());
                    body = e.payload.into_bytes();
                }
                Ok(Prepared::Message(Outgoing {
                    exchange,
                    routing_key,
                    body,
                    properties,
                }))
            }
        }
    }
}

/// The archived records this run would act on: selected, not yet restored, in file order.
fn selected<'s>(
    file: &'s Path,
    selector: &'s mut Selector<'_>,
    done: &'s HashSet<u64>,
) -> Result<impl Iterator<Item = Result<(u64, DeadLetter)>> + 's> {
    let records = archive::records(file)?;
    Ok(records.filter(move |r| match r {
        Err(_) => true,
        Ok((n, rec)) => !done.contains(n) && selector.offer(rec),
    }))
}

/// What a dry run shows for one archived record.
#[derive(serde::Serialize)]
struct ArchivePreview {
    id: RecordId,
    task: Option<String>,
    exchange: String,
    routing_key: String,
    properties: Value,
    headers: Option<Value>,
    body: Box<serde_json::value::RawValue>,
}

impl ArchivePreview {
    fn new(rec: &DeadLetter, m: &Prepared) -> ArchivePreview {
        let (exchange, routing_key) = m.route();
        let (properties, body) = m.parts();
        ArchivePreview {
            id: rec.id.clone(),
            task: rec.task.clone(),
            exchange,
            routing_key,
            properties: crate::rabbit::codec::properties_to_json(properties),
            headers: properties
                .headers()
                .as_ref()
                .map(crate::rabbit::codec::table_to_json),
            body: crate::model::exact_json(body),
        }
    }
}

impl crate::output::Tabled for ArchivePreview {
    fn columns() -> &'static [&'static str] {
        &["id", "task", "exchange/routing key", "body"]
    }

    fn cells(&self) -> Vec<String> {
        vec![
            self.id.to_string(),
            self.task.clone().unwrap_or_default(),
            format!("{}/{}", self.exchange, self.routing_key),
            crate::output::ellipsize(self.body.get(), 80),
        ]
    }
}

/// The broker an archive goes back to: Celery's dispatcher for table rows, RabbitMQ for queue
/// messages.
enum Broker {
    Celery(Dispatcher),
    Rabbit(crate::rabbit::Connection, String),
}

impl Broker {
    async fn open(endpoints: &Endpoints, kind: SourceKind) -> Result<Broker> {
        Ok(match kind {
            SourceKind::Table => {
                Broker::Celery(Dispatcher::connect(&endpoints.celery, &endpoints.mailbox).await?)
            }
            SourceKind::Queue => {
                let target = endpoints.rabbit.clone();
                let conn = crate::rabbit::connect(&target).await?;
                Broker::Rabbit(conn, target.shown.clone())
            }
        })
    }

    fn describe(&self) -> String {
        match self {
            Broker::Celery(d) => d.describe(),
            Broker::Rabbit(_, shown) => shown.clone(),
        }
    }

    /// Destinations exist before anything is sent: the explicit target, or every queue the
    /// records would go back to.
    async fn check_destinations(
        &self,
        printer: &Printer,
        target: &Option<Target>,
        destinations: &BTreeSet<String>,
    ) -> Result<Option<String>> {
        let conn = match (self, target) {
            (Broker::Celery(d), Some(t)) => {
                return Ok(super::note_target(printer, d.check_target(t).await?));
            }
            (Broker::Celery(d), None) => {
                let t = Target::Queue(celery::DEFAULT_CELERY_QUEUE.into());
                return Ok(super::note_target(printer, d.check_target(&t).await?));
            }
            (Broker::Rabbit(conn, _), Some(t)) => {
                return Ok(super::note_target(
                    printer,
                    crate::rabbit::check_target(conn, t).await?,
                ));
            }
            (Broker::Rabbit(conn, _), None) => conn,
        };
        let mut missing = Vec::new();
        for d in destinations {
            if crate::rabbit::passive_declare(conn, d).await?.is_none() {
                missing.push(d.clone());
            }
        }
        if !missing.is_empty() {
            return Err(usage(format!(
                "destination queue(s) {} do not exist: nothing was replayed (declare them or pass --to-queue)",
                missing.join(", ")
            )));
        }
        Ok(None)
    }

    async fn sender(&self, window: usize, rate: Option<f64>) -> Result<Sender> {
        Ok(match self {
            Broker::Celery(d) => Sender::Tasks(d.sender(window, rate).await?),
            Broker::Rabbit(conn, _) => {
                Sender::Messages(Publisher::start(conn, window, rate).await?)
            }
        })
    }
}

/// What the plan pass found.
#[derive(Default)]
struct RestorePlan {
    groups: BTreeMap<(String, String), u64>,
    invalid: Vec<(RecordId, String)>,
    destinations: BTreeSet<String>,
    planned: u64,
    /// Table archives: stored task name -> records (the worker check's question).
    tasks: BTreeMap<String, u64>,
    /// Table archives: the first records to restore, as (task, args), for a canary.
    first: Vec<(String, Value)>,
}

/// verify -> plan -> destination and worker checks -> gate -> run -> report.
pub(crate) async fn run(endpoints: &Endpoints, printer: &Printer, opts: Options) -> Result<Exit> {
    let (kind, mut journal) = open_archive(printer, &opts.file)?;
    let canary_table = canary_table(endpoints, opts.canary.is_some(), kind).await?;
    let amqp_target = endpoints.rabbit.clone();
    let broker = Broker::open(endpoints, kind).await?;
    if opts.follow.is_some() && kind == SourceKind::Queue {
        return Err(usage(
            "--follow on a restore applies to archives of table rows (queue archives: not yet)",
        ));
    }
    let mut ctx = Context {
        kind,
        target: &opts.common.target,
        replay_id: uuid::Uuid::new_v4().to_string(),
        user: amqp_target.user().to_string(),
        max_replays: opts.common.max_replays,
        map: opts.common.workers.map.clone(),
        transform: opts.common.transform.clone(),
        tracker: None,
    };
    let done = journal.done().clone();
    let mut plan = plan_archive(printer, &ctx, &opts, &done)?;
    // Destinations exist before anything is sent.
    let note = broker
        .check_destinations(printer, &opts.common.target, &plan.destinations)
        .await?;
    let timeout = opts.common.workers.timeout;
    let watch = check_workers(printer, &broker, &opts, &plan).await?;
    ctx.tracker = watch.as_ref().map(Watch::tracker);
    print_plan(printer, &opts, &plan, &broker.describe(), note);
    let mut audit = audit_of(endpoints, printer, &opts, &ctx);
    if let Some(exit) = gate(printer, &opts, &plan, &mut audit).await? {
        return Ok(exit);
    }
    let sender = broker
        .sender(opts.common.window.get(), opts.common.rate)
        .await?;
    if let (Some(w), Broker::Celery(d)) = (watch.as_ref(), &broker)
        && let Some(exit) = w.enable_or_stop(printer, d, timeout, &mut audit).await
    {
        return Ok(exit);
    }
    let mut report = Report::new("replay");
    for (id, why) in std::mem::take(&mut plan.invalid) {
        report.fail(id, why);
    }
    let planned = plan.planned;
    match (opts.canary, &canary_table) {
        (Some(canary), Some(table)) => {
            let sent = Sending {
                printer,
                ctx: &ctx,
                opts: &opts,
                sender: &sender,
                planned,
                watch: watch.as_ref(),
            };
            with_canary(&sent, &mut report, &mut journal, table, &plan.first, canary).await?;
        }
        _ => report.absorb(
            restore_records(printer, &ctx, &opts, &sender, &mut journal, planned, None).await?,
        ),
    }
    if let (Some(w), Broker::Celery(d)) = (watch.as_ref(), &broker) {
        follow_through(printer, w, &mut report).await;
        if let Some(left_on) = w.finish(d, timeout).await {
            printer.warn_always(left_on);
        }
    }
    print_report(printer, &report, "replayed", &mut audit);
    if report.stopped.is_some() {
        printer.warn(
            "run the same command again to finish: records already confirmed are skipped (journal)",
        );
    }
    Ok(report.exit())
}

/// The audit trail of this restore.
fn audit_of(
    endpoints: &Endpoints,
    printer: &Printer,
    opts: &Options,
    ctx: &Context<'_>,
) -> crate::audit::Audit {
    crate::audit::Audit::new(
        endpoints.audit_log.as_deref(),
        printer,
        crate::audit::Subject {
            action: "restore",
            source: ctx.kind.as_str(),
            location: opts.file.display().to_string(),
            selection: opts.common.selection.describe(),
            run_id: ctx.replay_id.clone(),
        },
    )
}

/// Celery: `workers::ensure_runnable_and_watch` for the target; nothing for plain AMQP.
async fn check_workers(
    printer: &Printer,
    broker: &Broker,
    opts: &Options,
    plan: &RestorePlan,
) -> Result<Option<Watch>> {
    let Broker::Celery(d) = broker else {
        return Ok(None);
    };
    let (check, target) = (&opts.common.workers, &celery_target(opts));
    super::workers::ensure_runnable_and_watch(printer, d, check, target, &plan.tasks, opts.follow)
        .await
}

/// Where archived table rows go: `--to-queue`/`--to-exchange`, else Celery's default queue.
fn celery_target(opts: &Options) -> Target {
    opts.common
        .target
        .clone()
        .unwrap_or_else(|| Target::Queue(celery::DEFAULT_CELERY_QUEUE.into()))
}

/// `--follow`: waits for the sent tasks' outcomes, prints them and puts them in the report
/// (the journal already holds every confirmed record: a re-run does not send them again).
async fn follow_through(printer: &Printer, watch: &Watch, report: &mut Report) {
    if let Some(outcomes) = watch.follow_sent(printer, report).await {
        outcomes.print(printer, "archived record");
        report.follow = Some(outcomes);
    }
}

/// Where a failure coming back would show, for `--canary`: checked before anything is sent.
async fn canary_table(
    endpoints: &Endpoints,
    canary: bool,
    kind: SourceKind,
) -> Result<Option<crate::source::table::FailedTable>> {
    match (canary, kind) {
        (false, _) => Ok(None),
        (true, SourceKind::Queue) => Err(usage(
            "--canary on a restore applies to archives of table rows (queue archives: not yet)",
        )),
        (true, SourceKind::Table) => {
            let db = endpoints.require_database().map_err(|e| {
                usage(format!(
                    "--canary on a restore watches the failed-task table: {e:#}"
                ))
            })?;
            Ok(Some(
                crate::source::table::FailedTable::open(&db.url, &db.table).await?,
            ))
        }
    }
}

/// The plan's confirmation (or its dry run): `Some(exit)` when nothing is to be sent.
async fn gate(
    printer: &Printer,
    opts: &Options,
    plan: &RestorePlan,
    audit: &mut crate::audit::Audit,
) -> Result<Option<Exit>> {
    let gate = crate::bulk::Gate {
        safety: opts.common.safety,
        planned: plan.planned,
        refused: plan.invalid.len(),
        nothing: "nothing to replay",
        dry_run: "dry run: nothing was published",
        prompt: format!("Replay {} archived record(s)?", plan.planned),
        audit: Some(audit),
        hold: None,
    };
    crate::bulk::gate(printer, gate).await
}

fn print_plan(
    printer: &Printer,
    opts: &Options,
    plan: &RestorePlan,
    broker: &str,
    note: Option<String>,
) {
    printer.info(format!(
        "Plan: replay {} archived record(s) ({}) on {broker}",
        plan.planned + plan.invalid.len() as u64,
        opts.common.selection.describe(),
    ));
    print_plan_groups(printer, &plan.groups);
    if let Some(n) = note {
        printer.info(n);
    }
    for (id, why) in plan.invalid.iter().take(10) {
        printer.warn(format!("cannot be replayed: id {id}: {why}"));
    }
}

/// What a restore run sends with, for the canary's two passes.
struct Sending<'a> {
    printer: &'a Printer,
    ctx: &'a Context<'a>,
    opts: &'a Options,
    sender: &'a Sender,
    planned: u64,
    /// `--follow`: the canary decides from its tasks' outcomes.
    watch: Option<&'a Watch>,
}

/// Restores the first `n` records, waits, and restores the rest only if none of them was
/// stored again by the app (the journal skips what the canary already sent).
async fn with_canary(
    s: &Sending<'_>,
    report: &mut Report,
    journal: &mut Journal,
    table: &crate::source::table::FailedTable,
    first: &[(String, Value)],
    canary: super::Canary,
) -> Result<()> {
    let started = chrono::Utc::now();
    let (n, wait) = (canary.count.get() as usize, canary.wait);
    report.absorb(
        restore_records(
            s.printer,
            s.ctx,
            s.opts,
            s.sender,
            journal,
            s.planned,
            Some(n),
        )
        .await?,
    );
    if report.stopped.is_some() || report.succeeded == 0 {
        return Ok(());
    }
    if let Some(w) = s.watch {
        let o = w.wait(s.printer, &report.sent_tasks, wait).await;
        match o.canary_failure("task", "restored") {
            None => {
                s.printer
                    .info("canary: every task succeeded; restoring the rest");
                let rest =
                    restore_records(s.printer, s.ctx, s.opts, s.sender, journal, s.planned, None);
                report.absorb(rest.await?);
            }
            Some(why) => {
                report.canary_failed = true;
                report.stopped = Some(why);
            }
        }
        return Ok(());
    }
    s.printer.info(format!(
        "canary: {} record(s) restored; watching for {}s whether they fail again",
        report.succeeded,
        wait.as_secs()
    ));
    let deadline = tokio::time::Instant::now() + wait;
    if !super::wait_unless_signal(deadline, super::CANARY_CUT).await {
        report.stopped = Some("interrupted".into());
        return Ok(());
    }
    match super::table::failed_again(table, started, &first[..n.min(first.len())]).await? {
        0 => {
            s.printer
                .info("canary: none failed again; restoring the rest");
            report.absorb(
                restore_records(s.printer, s.ctx, s.opts, s.sender, journal, s.planned, None)
                    .await?,
            );
        }
        died => {
            report.stopped = Some(format!(
                "canary failed: {died} of {} restored record(s) failed again (the app stored them again); the rest were not restored",
                report.succeeded
            ));
        }
    }
    Ok(())
}

/// Verifies the archive and opens its journal (what earlier runs already restored).
fn open_archive(printer: &Printer, file: &Path) -> Result<(SourceKind, Journal)> {
    let (header, trailer) = archive::verify(file)?;
    printer.info(format!(
        "archive {}: {} record(s) from {} {} written {} on {}; checksum verified",
        file.display(),
        trailer.count,
        header.source,
        header.location,
        header.created_at,
        header.host
    ));
    let kind = match header.source.as_str() {
        "table" => SourceKind::Table,
        "queue" => SourceKind::Queue,
        other => {
            return Err(usage(format!(
                "archive {}: unknown source {other:?}",
                file.display()
            )));
        }
    };
    let journal = Journal::open(file, &trailer.sha256)?;
    if let Some(w) = &journal.foreign {
        printer.warn(w);
    }
    if journal.done_count() > 0 {
        printer.info(format!(
            "{} record(s) already restored by an earlier run (journal)",
            journal.done_count()
        ));
    }
    Ok((kind, journal))
}

/// The plan pass (and the dry run's view of every record).
fn plan_archive(
    printer: &Printer,
    ctx: &Context<'_>,
    opts: &Options,
    done: &HashSet<u64>,
) -> Result<RestorePlan> {
    let mut plan = RestorePlan::default();
    let mut dry = opts
        .common
        .safety
        .dry_run
        .then(|| printer.stream::<ArchivePreview>());
    let mut selector = Selector::new(&opts.common.selection);
    for r in selected(&opts.file, &mut selector, done)? {
        let (_, rec) = r?;
        let m = match ctx.prepare(&rec) {
            Ok(m) => m,
            Err(why) => {
                plan.invalid.push((rec.id.clone(), why));
                continue;
            }
        };
        plan.planned += 1;
        let (exchange, routing_key) = m.route();
        if exchange.is_empty() {
            plan.destinations.insert(routing_key.clone());
        }
        let label = if ctx.kind == SourceKind::Table {
            let task = rec.task.clone().unwrap_or_default();
            *plan.tasks.entry(task.clone()).or_default() += 1;
            if plan.first.len() < super::table::FIRST_ROWS {
                plan.first.push((task.clone(), rec.payload.clone()));
            }
            task
        } else {
            routing_key
        };
        let fp = fingerprint::fingerprint(rec.motivo.as_deref().unwrap_or(""));
        *plan.groups.entry((label, fp)).or_default() += 1;
        if let Some(out) = dry.as_mut() {
            out.write(ArchivePreview::new(&rec, &m))?;
        }
    }
    if let Some(out) = dry {
        out.finish()?;
    }
    if let Some(w) = selector.warning() {
        printer.warn(w);
    }
    Ok(plan)
}

/// The run: records read lazily and sent in file order with up to `window` outcomes
/// outstanding; each confirmed one goes in the journal; a signal stops reading new ones.
async fn restore_records(
    printer: &Printer,
    ctx: &Context<'_>,
    opts: &Options,
    sender: &Sender,
    journal: &mut Journal,
    planned: u64,
    take: Option<usize>,
) -> Result<Report> {
    let mut report = Report::new("replay");
    let bar = printer.progress(Some(planned), "replaying");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let signals = super::stop_on_signal(stop.clone());
    let stop_reading = stop.clone();
    let done = journal.done().clone();
    let mut run_selector = Selector::new(&opts.common.selection);
    let source = selected(&opts.file, &mut run_selector, &done)?
        .take_while(move |_| !stop_reading.load(std::sync::atomic::Ordering::SeqCst))
        .filter_map(|r| match r {
            Err(e) => Some(Err(e)),
            Ok((n, rec)) => ctx.prepare(&rec).ok().map(|m| Ok((n, rec, m))),
        })
        .take(take.unwrap_or(usize::MAX));
    let outcomes = futures_util::stream::iter(source)
        .then(|r| {
            async move {
                let (n, rec, m) = r?;
                let task_id = m.task_id();
                if let (Some(t), Prepared::Task(msg, _)) = (&ctx.tracker, &m) {
                    t.expect(rec.id.clone(), &msg.task_id, &msg.task);
                }
                // Submitted in file order; the outcome is awaited by `buffered` below.
                let outcome = sender.submit(m).await?;
                Ok::<_, anyhow::Error>((n, (rec.id, task_id), outcome))
            }
        })
        .map(|r| async move {
            match r {
                Ok((n, id, outcome)) => Ok((n, id, outcome.await)),
                Err(e) => Err(e),
            }
        })
        .buffered(opts.common.window.get());
    let mut outcomes = std::pin::pin!(outcomes);
    while let Some(item) = outcomes.next().await {
        bar.inc(1);
        if stop.load(std::sync::atomic::Ordering::SeqCst) && report.stopped.is_none() {
            // Outcomes already in flight are still recorded; no new publish starts.
            report.stopped = Some("interrupted".into());
        }
        let (n, (id, task_id), outcome) = match item {
            Ok(x) => x,
            Err(e) => {
                report.stopped = Some(format!("{e:#}"));
                break;
            }
        };
        match outcome {
            Ok(Sent::Delivered) => {
                journal.record(n)?;
                report.success();
                if let (Some(_), Some(t)) = (&ctx.tracker, task_id) {
                    report.sent_tasks.push(t);
                }
            }
            Ok(Sent::Refused(why)) => report.fail(id, why),
            Err(e) => {
                report.stopped = Some(crate::rabbit::broker_failure(&e));
                report.fail(id, "outcome unknown: broker connection lost");
                break;
            }
        }
    }
    signals.abort();
    journal.sync()?;
    bar.finish_and_clear();
    Ok(report)
}
