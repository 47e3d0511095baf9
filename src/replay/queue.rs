//! Queue replay: move selected dead letters back where they died.
//!
//! 1. Plan: take every DLQ's messages present now and hold them unacknowledged, select, and
//!    keep the selected ones in memory (up to about 192 MiB) together with a 64-bit hash
//!    of queue + record id per selected message.
//! 2. After confirmation, move exactly the held selected messages: no second read. Past the
//!    budget, everything is given back and the messages present then are taken again in
//!    order; a message is moved only if it was in the plan and still matches. Each is published (default
//!    exchange -> the queue a consumer last gave up on it in, or `--to-queue`/`--to-exchange`) with
//!    `mandatory` and a confirm, and its DLQ copy is acknowledged only after a clean confirm
//!    without a return. Everything else is given back in place when the run ends.
//! 3. At most `--window` publishes are not yet acknowledged in their DLQ at once (in flight,
//!    or confirmed and waiting for a batched ack: `acks`): if dlq dies, those may exist
//!    both in the destination and (given back) in the DLQ: the duplicate window.

use super::ReplayCommon;
use super::acks::{Acked, Acks};
use super::requeue::{self, Refusal, Stamp};
use super::workers::TaskGate;
use super::{Target, print_plan_groups, print_report};
use crate::audit::{Audit, Subject};
use crate::endpoints::Endpoints;
use crate::error::{Exit, usage};
use crate::model::RecordId;
use crate::output::{Printer, ellipsize};
use crate::rabbit::publish::{Outcome, Outgoing, Pipeline};
use crate::rabbit::reader::{self, ReadSpec};
use crate::rabbit::take::Taker;
use crate::rabbit::topology::QueueKind;
use crate::rabbit::{self, Checked};
use crate::report::Report;
use crate::select::Selector;
use crate::source::queue::{self as record, RecordOptions};
use crate::{fingerprint, redact};
use anyhow::Result;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::mpsc;

pub(crate) struct Options {
    pub(crate) queues: Vec<String>,
    pub(crate) record: RecordOptions,
    pub(crate) force: bool,
    /// `common.target` `None`: each message goes back to the queue it died in.
    pub(crate) common: ReplayCommon,
    pub(crate) canary: Option<super::Canary>,
    /// Plan (take and select everything) before moving even under `--yes`.
    pub(crate) plan_first: bool,
}

/// What the plan pass found, per run.
#[derive(Default)]
struct Plan {
    /// hash(queue, id) -> how many selected messages carry it.
    selected: HashMap<u64, u32>,
    count: u64,
    groups: BTreeMap<(String, String), u64>,
    refused: Vec<(RecordId, String)>,
    /// `--transform`: messages whose payload or headers the program changes, and the
    /// first few of them as before -> after lines for the plan.
    transformed: u64,
    diffs: Vec<String>,
    destinations: BTreeSet<String>,
}

/// Selected message bodies the plan may keep in memory to move them without a second read;
/// `DLQ_HOLD_BUDGET` (bytes) overrides it (tests use it to exercise the two-pass path).
fn hold_budget() -> usize {
    std::env::var("DLQ_HOLD_BUDGET")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(192 << 20)
}

/// Memory a held message takes besides its body and encoded properties (the struct,
/// allocator slack): measured as RSS growth per held message (with the acker it held then).
const HELD_OVERHEAD: usize = 640;

/// A selected message held by the plan, ready to move.
struct Held {
    /// Index of its DLQ among the checked queues.
    queue: usize,
    id: RecordId,
    /// Index into the plan's `Routes`.
    route: u32,
    /// The properties to publish (already rewritten), wire-encoded.
    props: Box<[u8]>,
    body: Vec<u8>,
    /// Take channel and delivery tag, for batched acknowledgements.
    chan: usize,
    tag: u64,
}

/// Destinations (exchange, routing key) of held messages, each stored once.
#[derive(Default)]
struct Routes {
    list: Vec<(String, String)>,
    index: HashMap<(String, String), u32>,
}

impl Routes {
    fn intern(&mut self, route: (String, String)) -> u32 {
        if let Some(&i) = self.index.get(&route) {
            return i;
        }
        let i = self.list.len() as u32;
        self.list.push(route.clone());
        self.index.insert(route, i);
        i
    }
}

/// Gives back everything the takers hold and not acknowledged (`acked` per DLQ, may be empty).
async fn release_all(
    conn: &lapin::Connection,
    printer: &Printer,
    takers: Vec<Taker>,
    acked: &[u64],
) {
    for (i, t) in takers.into_iter().enumerate() {
        let held = t.taken.saturating_sub(acked.get(i).copied().unwrap_or(0));
        for note in t.release(conn, held).await {
            printer.warn(note);
        }
    }
}

fn key(queue: &str, id: &RecordId) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    queue.hash(&mut h);
    id.to_string().hash(&mut h);
    h.finish()
}

/// Where a message goes: the explicit target, else the default exchange to its origin queue.
fn destination(
    target: &Option<Target>,
    origin: Option<&str>,
    from: &str,
) -> Result<(String, String), Refusal> {
    match target {
        Some(t) => Ok(t.route()),
        None => {
            let q = origin.filter(|q| !q.is_empty()).ok_or(Refusal::NoOrigin)?;
            if q == from {
                return Err(Refusal::NoOrigin);
            }
            Ok((String::new(), q.to_string()))
        }
    }
}

fn describe_target(target: &Option<Target>) -> String {
    match target {
        Some(t) => t.describe(),
        None => "back to the queue where a consumer last gave up on each message (its last rejected x-death entry, else its last death that was not a delay hop; default exchange)".into(),
    }
}

fn warn_unfinished(printer: &Printer, window: usize) {
    printer.warn(format!(
        "messages not reported as replayed are still in the DLQ; run the same command again to finish (at most {window} may now be both in their destination and in the DLQ)"
    ));
}

fn describe_dest((exchange, rk): &(String, String)) -> String {
    if exchange.is_empty() {
        format!("queue {rk}")
    } else {
        format!("exchange {exchange} / {rk}")
    }
}

pub(crate) async fn run(
    endpoints: &Endpoints,
    printer: &Printer,
    mut opts: Options,
) -> Result<Exit> {
    // Without a plan to show, a record needs no more than its id, reason and origin, and
    // what --where reads; the plan shows more but never the readable headers, properties
    // and raw copy. --transform may read anything.
    let selected = record::Parts::for_selection(&opts.common.selection);
    opts.record.parts = if opts.common.transform.is_some() {
        record::Parts::ALL
    } else if streams(&opts) {
        record::Parts {
            id: true,
            ..selected
        }
    } else {
        record::Parts {
            headers: selected.headers,
            properties: selected.properties,
            raw: selected.raw,
            ..record::Parts::ALL
        }
    };
    let conn = rabbit::connect(&endpoints.rabbit).await?;
    let checked =
        rabbit::check_queues(&conn, &endpoints.rabbit, printer, &opts.queues, opts.force).await?;
    for q in &checked {
        if q.facts.kind == QueueKind::Stream {
            return Err(usage(format!(
                "{:?} is a stream: a stream keeps every message, so dlq cannot move messages out of it",
                q.name
            )));
        }
    }
    let replay_id = uuid::Uuid::new_v4().to_string();
    let stamp_for = |from: &str| Stamp {
        replay_id: replay_id.clone(),
        at: chrono::Utc::now(),
        from_queue: from.to_string(),
        user: endpoints.rabbit.user().to_string(),
        max_replays: opts.common.max_replays,
    };
    let names: Vec<&str> = checked.iter().map(|q| q.name.as_str()).collect();
    let subject = Subject {
        action: "replay",
        source: "queue",
        location: names.join(","),
        selection: opts.common.selection.describe(),
        run_id: replay_id.clone(),
    };
    let mut audit = Audit::new(endpoints, printer, subject);
    if streams(&opts) {
        return stream(
            endpoints, printer, &opts, &conn, &checked, &stamp_for, &mut audit,
        )
        .await;
    }

    // 1. Plan. Every DLQ's messages present now are taken and held unacknowledged (nothing
    // else can take them meanwhile); the selected ones are kept in memory while they fit,
    // so what is moved afterwards is exactly what the plan showed, read once. Past the
    // budget the plan keeps only which messages were selected, and the move reads again.
    let mut taken = take_plan(printer, &opts, &conn, &checked, &stamp_for, &replay_id).await?;
    let gated = plan_gate(
        endpoints, printer, &opts, &conn, &checked, &mut taken, &mut audit,
    )
    .await;
    if !matches!(gated, Ok(None)) {
        // Stopped at the gate (or the audit log refused the run): give everything back.
        release_all(&conn, printer, taken.takers, &[]).await;
        return gated.map(|exit| exit.unwrap_or(Exit::Ok));
    }
    move_planned(
        printer, &opts, &conn, &checked, &stamp_for, &mut audit, taken,
    )
    .await
}

/// What the plan pass took: the plan, the take channels holding every message, and (while
/// they fit in memory) the selected messages themselves, ready to publish.
struct Taken {
    plan: Plan,
    takers: Vec<Taker>,
    held: VecDeque<Held>,
    routes: Routes,
    /// False when the selection did not fit in memory: the move reads again.
    single_pass: bool,
    publish_ids: PublishIds,
}

/// The selected messages kept in memory, ready to publish, while they fit in `budget`.
struct Holding {
    held: VecDeque<Held>,
    routes: Routes,
    bytes: usize,
    budget: usize,
    /// False once they did not fit: the move reads again.
    single_pass: bool,
}

impl Holding {
    fn new(budget: usize) -> Holding {
        Holding {
            held: VecDeque::new(),
            routes: Routes::default(),
            bytes: 0,
            budget,
            single_pass: true,
        }
    }

    /// Keeps one message as it will be published: the rewritten properties wire-encoded
    /// (a few hundred bytes, where parsed dead-letter headers take ~3 KiB).
    fn keep(
        &mut self,
        queue: usize,
        id: RecordId,
        route: (String, String),
        props: Option<lapin::BasicProperties>,
        body: Vec<u8>,
        (chan, tag): (usize, u64),
    ) {
        if !self.single_pass {
            return;
        }
        let props = props.and_then(|p| crate::rabbit::codec::encode_properties(&p));
        self.bytes += body.len() + props.as_ref().map_or(0, |p| p.len()) + HELD_OVERHEAD;
        match props {
            Some(props) if self.bytes <= self.budget => self.held.push_back(Held {
                queue,
                id,
                route: self.routes.intern(route),
                props,
                body,
                chan,
                tag,
            }),
            _ => {
                // Too much to hold (or, defensively, not encodable): read again.
                self.single_pass = false;
                self.held = VecDeque::new();
                self.routes = Routes::default();
            }
        }
    }
}

/// 1. Plan: every message present now is taken and held; the selected ones are planned.
async fn take_plan(
    printer: &Printer,
    opts: &Options,
    conn: &lapin::Connection,
    checked: &[Checked],
    stamp_for: &dyn Fn(&str) -> Stamp,
    replay_id: &str,
) -> Result<Taken> {
    let mut plan = Plan::default();
    let mut dry = opts
        .common
        .safety
        .dry_run
        .then(|| printer.stream::<MovePreview>());
    let mut selector = Selector::new(&opts.common.selection);
    let mut takers: Vec<Taker> = Vec::new();
    let mut holding = Holding::new(hold_budget());
    let mut publish_ids = PublishIds::new(replay_id);
    let bar = printer.progress(None, "planning");
    let mut gate = TaskGate::new(conn, &opts.common.workers);
    for (qi, q) in checked.iter().enumerate() {
        let mut taker = Taker::open(&ReadSpec::for_checked(q, None)).await?;
        let stamp = stamp_for(&q.name);
        while let Some(d) = taker.next(conn).await? {
            bar.inc(1);
            if selector.full() {
                taker.keep(conn, &d).await?;
                continue; // held, and given back at the end like every unselected message
            }
            let Some(rec) = record::selected(&q.name, &d, &opts.record, &mut selector) else {
                taker.keep(conn, &d).await?;
                continue;
            };
            let decided = match guarded_route(opts, &rec, &d, &q.name) {
                Err(why) => Err(why.to_string()),
                Ok(route) => match gate.allows(d.properties.headers().as_ref(), &route).await {
                    Err(why) => Err(why),
                    Ok(()) => edit_of(opts, &rec).map(|edit| (route, edit)),
                },
            };
            let (route, edit) = match decided {
                Err(why) => {
                    plan.refused.push((rec.id, why));
                    taker.keep(conn, &d).await?;
                    continue;
                }
                Ok(decided) => decided,
            };
            plan.take(&q.name, &rec, &route, edit.as_ref());
            let stored = record::stored_properties(&d.properties);
            let original = rec.id.to_string();
            let edited = |props| edited(opts, edit.as_ref(), props, &original);
            let body = edit
                .as_ref()
                .map_or(d.data.clone(), |e| e.payload.clone().into_bytes());
            if let Some(out) = dry.as_mut()
                && let Ok(props) = requeue::prepare(&stored, &stamp, "dry-run").map(edited)
            {
                let replays = requeue::replay_count(d.properties.headers().as_ref());
                out.write(MovePreview::new(
                    &rec, &q.name, &route, &props, &body, replays,
                ))?;
            }
            // A dry run moves nothing: nothing to hold, and every message stays.
            if opts.common.safety.dry_run {
                taker.keep(conn, &d).await?;
            } else if holding.single_pass {
                let props = requeue::prepare(&stored, &stamp, &publish_ids.next())
                    .ok()
                    .map(edited);
                let place = (taker.channel_index(), d.delivery_tag);
                holding.keep(qi, rec.id, route, props, body, place);
            }
        }
        takers.push(taker);
    }
    bar.finish_and_clear();
    if let Some(out) = dry {
        out.finish()?;
    }
    if let Some(w) = selector.warning() {
        printer.warn(w);
    }

    Ok(Taken {
        plan,
        takers,
        held: holding.held,
        routes: holding.routes,
        single_pass: holding.single_pass,
        publish_ids,
    })
}

/// Destinations checked, the plan printed, then the gate: `Some(exit)` stops here.
async fn plan_gate(
    endpoints: &Endpoints,
    printer: &Printer,
    opts: &Options,
    conn: &lapin::Connection,
    checked: &[Checked],
    taken: &mut Taken,
    audit: &mut Audit,
) -> Result<Option<Exit>> {
    let plan = &taken.plan;
    // Destinations must exist before anything moves.
    let mut missing = Vec::new();
    for d in &plan.destinations {
        if rabbit::passive_declare(conn, d).await?.is_none() {
            missing.push(d.clone());
        }
    }
    if !missing.is_empty() {
        release_all(conn, printer, std::mem::take(&mut taken.takers), &[]).await;
        return Err(usage(format!(
            "destination queue(s) {} do not exist: nothing was moved (declare them or pass --to-queue)",
            missing.join(", ")
        )));
    }
    let target_note = match &opts.common.target {
        Some(t) => super::note_target(printer, crate::rabbit::check_target(conn, t).await?),
        None => None,
    };

    let names: Vec<&str> = checked.iter().map(|q| q.name.as_str()).collect();
    let to = describe_target(&opts.common.target);
    printer.info(format!(
        "Plan: move {} message(s) from {} ({}) {to} on {}",
        plan.count,
        names.join(", "),
        opts.common.selection.describe(),
        endpoints.rabbit.shown.clone()
    ));
    print_plan_groups(printer, &plan.groups);
    if let Some(n) = target_note {
        printer.info(n);
    }
    for (id, why) in plan.refused.iter().take(10) {
        printer.warn(format!("stays in the DLQ: id {id}: {why}"));
    }
    if let Some(t) = opts.common.transform.as_deref() {
        printer.info(format!(
            "--transform (sha256 {}) changes {} of {} message(s); each goes as a new message (new message_id, dlq-transformed-from)",
            &t.sha256()[..16],
            plan.transformed,
            plan.count
        ));
        for d in &plan.diffs {
            printer.info(format!("  {d}"));
        }
    }
    let amqp = endpoints.rabbit.clone();
    let full_check: Vec<&String> = match &opts.common.target {
        Some(Target::Queue(q)) => vec![q],
        _ => plan.destinations.iter().collect(),
    };
    for d in full_check {
        if let Some(w) = rabbit::length_limit_warning(&amqp, d, plan.count).await {
            printer.warn(w);
        }
    }
    let gate = crate::bulk::Gate {
        safety: opts.common.safety,
        planned: plan.count,
        refused: plan.refused.len(),
        nothing: "nothing to replay",
        dry_run: "dry run: nothing was moved",
        prompt: format!("Move {} message(s)?", plan.count),
        audit: Some(audit),
    };
    crate::bulk::gate(printer, gate).await
}

/// 2. Move what the plan selected (a canary first when asked), then give back the rest.
async fn move_planned(
    printer: &Printer,
    opts: &Options,
    conn: &lapin::Connection,
    checked: &[Checked],
    stamp_for: &dyn Fn(&str) -> Stamp,
    audit: &mut Audit,
    taken: Taken,
) -> Result<Exit> {
    let Taken {
        mut plan,
        mut takers,
        mut held,
        routes,
        single_pass,
        publish_ids,
    } = taken;
    let mut report = Report::new("replay");
    for (id, why) in std::mem::take(&mut plan.refused) {
        report.fail(id, why);
    }
    let pipeline = Pipeline::open(conn, opts.common.rate).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let signals = super::stop_on_signal(stop.clone());
    let bar = printer.progress(Some(plan.count), "replaying");
    let mut mover = Mover {
        conn,
        pipeline,
        publish_ids,
        opts,
        printer,
        report: &mut report,
        bar: &bar,
        stop: &stop,
        picks: Picks::Planned(plan.selected),
        // The plan already refused what no worker would run.
        gate: None,
        acked: vec![0; checked.len()],
        acks: Acks::default(),
        moved_now: 0,
    };
    if single_pass {
        // Held messages are acknowledged on the take channels that delivered them.
        for (qi, t) in takers.iter().enumerate() {
            for (ci, ch) in t.channels().iter().enumerate() {
                mover.acks.channel(qi, ci, ch);
            }
        }
    } else {
        // The plan did not fit in memory: give everything back, then read again.
        release_all(conn, printer, std::mem::take(&mut takers), &[]).await;
    }
    let mut canary_ok = true;
    if let Some(canary) = opts.canary {
        let n = canary.count.get();
        let moved = if single_pass {
            mover.move_held(&mut held, &routes, Some(n)).await
        } else {
            mover.pass(checked, stamp_for, Some(n)).await?
        };
        if mover.report.stopped.is_none() && moved > 0 {
            printer.info(format!(
                "canary: {moved} message(s) replayed; watching for {}s whether they die again",
                canary.wait.as_secs()
            ));
            tokio::time::sleep(canary.wait).await;
            // Only messages that came back after being replayed are ready in the DLQs now
            // (the rest are still held by this run): they carry this run's replay id.
            let died = died_again(conn, checked, audit.run_id()).await?;
            if died > 0 {
                canary_ok = false;
                mover.report.stopped = Some(format!(
                    "canary failed: {died} of {moved} replayed message(s) died again and are back in the DLQ; the rest were not replayed"
                ));
            } else {
                printer.info("canary: none died again; replaying the rest");
            }
        }
    }
    if canary_ok && mover.report.stopped.is_none() {
        if single_pass {
            mover.move_held(&mut held, &routes, None).await;
        } else {
            mover.pass(checked, stamp_for, None).await?;
        }
    }
    let acked = std::mem::take(&mut mover.acked);
    drop(mover);
    drop(held);
    printer.debug(2, "replay: giving back what was not moved");
    release_all(conn, printer, takers, &acked).await;
    bar.finish_and_clear();
    signals.abort();
    printer.debug(2, "replay: closing the connection");
    rabbit::close(conn, "dlq replay done").await;
    print_report(printer, &report, "replayed", audit);
    if report.stopped.is_some() && canary_ok {
        warn_unfinished(printer, opts.common.window.get());
    }
    Ok(report.exit())
}

/// Which taken messages the move pass sends.
enum Picks<'a> {
    /// Those the plan selected (hash of queue + id -> how many), if they still match.
    Planned(HashMap<u64, u32>),
    /// Those the selection matches now, up to `--limit`, with destination queues checked
    /// the first time each is seen (the plan checked them all before anything moved).
    Streaming {
        selector: Selector<'a>,
        destinations: HashMap<String, bool>,
    },
}

impl Picks<'_> {
    /// The message's record when it is to be moved.
    fn pick(
        &mut self,
        queue: &str,
        d: &lapin::message::Delivery,
        opts: &Options,
    ) -> Option<crate::model::DeadLetter> {
        match self {
            Picks::Planned(selected) => {
                let rec = record::from_delivery(
                    queue,
                    d.exchange.as_str(),
                    d.routing_key.as_str(),
                    &d.properties,
                    &d.data,
                    &opts.record,
                );
                // Only what the plan selected, and only as many times as it was selected.
                selected.get(&key(queue, &rec.id)).filter(|n| **n > 0)?;
                matches!(opts.common.selection.matches(&rec), Ok(true)).then_some(rec)
            }
            Picks::Streaming { selector, .. } => record::selected(queue, d, &opts.record, selector),
        }
    }

    /// `--limit` reached: nothing more is selected.
    fn full(&self) -> bool {
        match self {
            Picks::Planned(_) => false,
            Picks::Streaming { selector, .. } => selector.full(),
        }
    }

    /// A picked message is being published.
    fn taken(&mut self, queue: &str, id: &RecordId) {
        if let Picks::Planned(selected) = self
            && let Some(n) = selected.get_mut(&key(queue, id))
        {
            *n = n.saturating_sub(1);
        }
    }

    /// Whether a destination queue exists (a passive declare the first time it is seen).
    async fn check_destination(
        &mut self,
        conn: &lapin::Connection,
        (exchange, queue): &(String, String),
    ) -> Result<(), String> {
        let Picks::Streaming { destinations, .. } = self else {
            return Ok(());
        };
        if !exchange.is_empty() {
            return Ok(()); // an explicit target, checked before the run
        }
        let exists = match destinations.get(queue) {
            Some(&e) => e,
            None => {
                let e = rabbit::passive_declare(conn, queue)
                    .await
                    .map_err(|e| format!("{e:#}; left in the DLQ"))?
                    .is_some();
                destinations.insert(queue.clone(), e);
                e
            }
        };
        if exists {
            Ok(())
        } else {
            Err(format!(
                "destination queue {queue:?} does not exist; left in the DLQ (declare it or pass --to-queue)"
            ))
        }
    }
}

/// Replay under `--yes`: every DLQ's messages present now are taken in order and the
/// selected ones moved at once, with the same confirms, acknowledgements and duplicate
/// window as after a plan. What differs: a missing destination queue is found when its
/// first message comes, so its messages stay in the DLQ and are reported (exit 3) while
/// the others move; without `--yes` (or with `--dry-run`) the plan refuses the whole run.
async fn stream(
    endpoints: &Endpoints,
    printer: &Printer,
    opts: &Options,
    conn: &lapin::Connection,
    checked: &[Checked],
    stamp_for: &dyn Fn(&str) -> Stamp,
    audit: &mut Audit,
) -> Result<Exit> {
    let target_note = match &opts.common.target {
        Some(t) => super::note_target(printer, rabbit::check_target(conn, t).await?),
        None => None,
    };
    let names: Vec<&str> = checked.iter().map(|q| q.name.as_str()).collect();
    let to = describe_target(&opts.common.target);
    printer.info(format!(
        "Moving the messages in {} that match ({}) {to} on {}, as they are read (--yes)",
        names.join(", "),
        opts.common.selection.describe(),
        endpoints.rabbit.shown.clone()
    ));
    if let Some(n) = target_note {
        printer.info(n);
    }
    // No gate under --yes: the run starts here.
    audit.start(None)?;
    let mut report = Report::new("replay");
    let pipeline = Pipeline::open(conn, opts.common.rate).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let signals = super::stop_on_signal(stop.clone());
    // The messages present at the start: every selected one is among them.
    let present: u64 = checked.iter().map(|q| u64::from(q.depth.ready)).sum();
    let present = opts
        .common
        .selection
        .limit
        .map_or(present, |l| l.min(present));
    let bar = printer.progress(Some(present), "replaying");
    let mut mover = Mover {
        conn,
        pipeline,
        publish_ids: PublishIds::new(audit.run_id()),
        opts,
        printer,
        report: &mut report,
        bar: &bar,
        stop: &stop,
        gate: Some(TaskGate::new(conn, &opts.common.workers)),
        picks: Picks::Streaming {
            selector: Selector::new(&opts.common.selection),
            destinations: HashMap::new(),
        },
        acked: vec![0; checked.len()],
        acks: Acks::default(),
        moved_now: 0,
    };
    let passed = mover.pass(checked, stamp_for, None).await;
    let picks = std::mem::replace(&mut mover.picks, Picks::Planned(HashMap::new()));
    drop(mover);
    bar.finish_and_clear();
    signals.abort();
    passed?;
    printer.debug(2, "replay: closing the connection");
    rabbit::close(conn, "dlq replay done").await;
    if let Picks::Streaming { selector, .. } = picks {
        if let Some(w) = selector.warning() {
            printer.warn(w);
        }
        if selector.taken() == 0 && report.stopped.is_none() {
            printer.info("nothing to replay");
            audit.end(&report, Exit::Ok);
            return Ok(Exit::Ok);
        }
    }
    print_report(printer, &report, "replayed", audit);
    if report.stopped.is_some() {
        warn_unfinished(printer, opts.common.window.get());
    }
    Ok(report.exit())
}

/// Correlation keys for publishes (the `dlq-publish-id` header): unique per publish, built
/// from the run's id and a counter (a random id per message cost a system call each).
struct PublishIds {
    prefix: String,
    next: u64,
}

impl PublishIds {
    fn new(replay_id: &str) -> PublishIds {
        PublishIds {
            prefix: replay_id.to_string(),
            next: 0,
        }
    }

    fn next(&mut self) -> String {
        self.next += 1;
        format!("{}.{}", self.prefix, self.next)
    }
}

/// State of the move phase.
struct Mover<'a> {
    conn: &'a lapin::Connection,
    /// Publishes from this task: no hand-off to another task per message.
    pipeline: Pipeline<Pending>,
    publish_ids: PublishIds,
    opts: &'a Options,
    /// Stage lines at -vv: where a stuck run waits.
    printer: &'a Printer,
    report: &'a mut Report,
    bar: &'a indicatif::ProgressBar,
    stop: &'a AtomicBool,
    picks: Picks<'a>,
    /// Celery task messages move only where a live worker runs them.
    gate: Option<TaskGate<'a>>,
    /// Messages acknowledged per DLQ.
    acked: Vec<u64>,
    acks: Acks,
    /// Moved since the last `settle_*` returned.
    moved_now: u64,
}

/// What acknowledges a published message's DLQ copy once it is confirmed.
struct Pending {
    queue: usize,
    chan: usize,
    tag: u64,
    id: RecordId,
}

impl Mover<'_> {
    /// False once the run stopped (an error, a signal) or `limit` messages are moved or
    /// in flight.
    fn may_continue(&mut self, moved: u64, limit: Option<u64>) -> bool {
        if self.report.stopped.is_some() {
            return false;
        }
        if self.stop.load(Ordering::SeqCst) {
            self.report.stopped = Some("interrupted".into());
            return false;
        }
        limit.is_none_or(|l| moved + (self.unsettled() as u64) < l)
    }

    /// Moves messages the plan holds, in order, at most `limit`. Returns how many moved.
    async fn move_held(
        &mut self,
        held: &mut VecDeque<Held>,
        routes: &Routes,
        limit: Option<u64>,
    ) -> u64 {
        let mut moved = 0u64;
        loop {
            moved += self.settle_ready().await;
            if !self.may_continue(moved, limit) {
                break;
            }
            let Some(h) = held.pop_front() else { break };
            let Some(props) = crate::rabbit::codec::decode_properties(&h.props) else {
                // Encoded by this process a moment ago: cannot happen, but never guess.
                self.acks.not_moved(h.queue, h.chan);
                self.report.fail(
                    h.id,
                    "internal: held properties unreadable; left in the DLQ",
                );
                continue;
            };
            let (exchange, routing_key) = routes.list[h.route as usize].clone();
            self.publish(
                Outgoing {
                    exchange,
                    routing_key,
                    body: h.body,
                    properties: props,
                },
                Pending {
                    queue: h.queue,
                    chan: h.chan,
                    tag: h.tag,
                    id: h.id,
                },
            )
            .await;
        }
        self.printer.debug(
            2,
            format!(
                "replay: settling {} publish(es) and acknowledgement(s)",
                self.unsettled()
            ),
        );
        moved + self.settle_all().await
    }

    /// Stages a message, published with the others ready now; under `--rate` one by one
    /// (paced), so a stop is seen between messages.
    async fn publish(&mut self, msg: Outgoing, p: Pending) {
        self.pipeline.stage(msg, p);
        if self.opts.common.rate.is_some() {
            self.pipeline.flush().await;
        }
    }

    /// Published (or staged) and not yet acknowledged in their DLQ: at most `--window`.
    fn unsettled(&self) -> usize {
        self.pipeline.len() + self.acks.pending()
    }

    /// Settles the publishes that are done, acknowledges their DLQ copies, and returns how
    /// many messages moved. Published but not yet acknowledged DLQ copies (staged, in
    /// flight, or confirmed with an acknowledgement not yet written) stay at most `window`:
    /// the duplicate window if dlq dies. Waits only while that window is full.
    async fn settle_ready(&mut self) -> u64 {
        let window = self.opts.common.window.get();
        loop {
            while let Some(done) = self.pipeline.try_next() {
                self.settle(done);
            }
            // Acknowledged as soon as confirmed, without waiting for the write: a full
            // window then holds publishes, not acknowledgements waiting their turn.
            self.acks.send();
            let acked = self.acks.written();
            self.count_acked(acked);
            if self.unsettled() < window {
                break;
            }
            self.pipeline.flush().await;
            tokio::select! {
                done = self.pipeline.next(), if !self.pipeline.is_empty() => {
                    if let Some(done) = done {
                        self.settle(done);
                    }
                }
                acked = self.acks.next_written(), if self.acks.sending() => {
                    if let Some(acked) = acked {
                        self.count_acked(acked);
                    }
                }
                else => break, // nothing to wait for: cannot happen, but never spin
            }
        }
        std::mem::take(&mut self.moved_now)
    }

    /// Settles everything still in flight and sends every acknowledgement due. A stopped
    /// run publishes nothing more: what is staged was never sent and stays in the DLQ
    /// (given back when the take channels close).
    async fn settle_all(&mut self) -> u64 {
        if self.report.stopped.is_some() {
            for p in self.pipeline.unstage() {
                self.acks.not_moved(p.queue, p.chan);
            }
        }
        while let Some(done) = self.pipeline.next().await {
            self.settle(done);
        }
        let acked = self.acks.flush().await;
        self.count_acked(acked);
        std::mem::take(&mut self.moved_now)
    }

    /// Takes the messages present now from every DLQ and moves the ones `picks` selects (at
    /// most `limit`). Returns how many were moved.
    async fn pass(
        &mut self,
        checked: &[Checked],
        stamp_for: &dyn Fn(&str) -> Stamp,
        limit: Option<u64>,
    ) -> Result<u64> {
        let mut moved = 0u64;
        for (qi, q) in checked.iter().enumerate() {
            if self.report.stopped.is_some()
                || limit.is_some_and(|l| moved >= l)
                || self.picks.full()
            {
                break;
            }
            let Some(depth) = rabbit::passive_declare(self.conn, &q.name).await? else {
                self.report.stopped =
                    Some(format!("queue {:?} disappeared during the replay", q.name));
                break;
            };
            let mut now = q.clone();
            now.depth = depth;
            self.printer.debug(
                2,
                format!("replay: taking from {:?} ({} ready)", q.name, depth.ready),
            );
            let spec = ReadSpec::for_checked(&now, None);
            let mut taker = Taker::open(&spec).await?;
            let stamp = stamp_for(&q.name);
            let acked_before = self.acked[qi];
            loop {
                // Settle what is done; keep at most `window` publishes in flight.
                moved += self.settle_ready().await;
                if !self.may_continue(moved, limit) || self.picks.full() {
                    break;
                }
                if !taker.ready() {
                    // About to wait for deliveries: publish what is staged first.
                    self.pipeline.flush().await;
                }
                let d = match taker.next(self.conn).await {
                    Ok(Some(d)) => d,
                    Ok(None) => break,
                    Err(e) => {
                        self.report.stopped = Some(format!("reading {:?}: {e:#}", q.name));
                        break;
                    }
                };
                let (chan, tag) = (taker.channel_index(), d.delivery_tag);
                self.acks.channel(qi, chan, &taker.channels()[chan]);
                let (id, route, props, body) = match self.prepare_move(&q.name, &d, &stamp).await {
                    None => {
                        self.acks.not_moved(qi, chan);
                        self.keep(&mut taker, &d, &q.name).await;
                        continue;
                    }
                    Some(Err((id, why))) => {
                        self.acks.not_moved(qi, chan);
                        self.report.fail(id, why);
                        self.keep(&mut taker, &d, &q.name).await;
                        continue;
                    }
                    Some(Ok(moving)) => moving,
                };
                self.picks.taken(&q.name, &id);
                // In queue order.
                self.publish(
                    Outgoing {
                        exchange: route.0,
                        routing_key: route.1,
                        body: body.unwrap_or(d.data),
                        properties: props,
                    },
                    Pending {
                        queue: qi,
                        chan,
                        tag,
                        id,
                    },
                )
                .await;
            }
            self.printer.debug(
                2,
                format!(
                    "replay: {:?}: {} taken; settling {} publish(es) and acknowledgement(s)",
                    q.name,
                    taker.taken,
                    self.unsettled()
                ),
            );
            moved += self.settle_all().await;
            let held = taker.taken.saturating_sub(self.acked[qi] - acked_before);
            self.printer.debug(
                2,
                format!("replay: {:?}: giving back {held} not moved", q.name),
            );
            for note in taker.release(self.conn, held).await {
                self.printer.warn(note);
            }
        }
        Ok(moved)
    }

    /// Leaves a message in its DLQ (renewed where a give-back would count; see `Taker::keep`).
    /// A failure stops the replay: what is held goes back on release.
    async fn keep(&mut self, taker: &mut Taker, d: &lapin::message::Delivery, queue: &str) {
        if let Err(e) = taker.keep(self.conn, d).await
            && self.report.stopped.is_none()
        {
            self.report.stopped = Some(format!("renewing {queue:?}: {e:#}"));
        }
    }

    /// Where a delivery goes, with which properties and (edited by --transform) body: `None`
    /// when it is not picked,
    /// `Err` (reported, it stays in the DLQ) when it cannot move.
    async fn prepare_move(
        &mut self,
        queue: &str,
        d: &lapin::message::Delivery,
        stamp: &Stamp,
    ) -> Option<Result<Moving, (RecordId, String)>> {
        let rec = self.picks.pick(queue, d, self.opts)?;
        let stored = record::stored_properties(&d.properties);
        let origin = rec.origin_queue();
        let route = match destination(&self.opts.common.target, origin, queue) {
            Ok(r) => r,
            Err(why) => return Some(Err((rec.id, why.to_string()))),
        };
        if let Err(why) = self.picks.check_destination(self.conn, &route).await {
            return Some(Err((rec.id, why)));
        }
        if let Some(gate) = self.gate.as_mut()
            && let Err(why) = gate.allows(d.properties.headers().as_ref(), &route).await
        {
            return Some(Err((rec.id, why)));
        }
        let edit = match edit_of(self.opts, &rec) {
            Ok(e) => e,
            Err(why) => return Some(Err((rec.id, why))),
        };
        let original = rec.id.to_string();
        Some(
            match requeue::prepare(&stored, stamp, &self.publish_ids.next()) {
                Ok(props) => {
                    let props = edited(self.opts, edit.as_ref(), props, &original);
                    let body = edit.map(|e| e.payload.into_bytes());
                    Ok((rec.id, route, props, body))
                }
                Err(why) => Err((rec.id, why.to_string())),
            },
        )
    }

    /// Records one publish outcome; a clean confirm queues the DLQ copy's acknowledgement.
    fn settle(&mut self, (p, out): (Pending, Result<Outcome>)) {
        self.bar.inc(1);
        let Pending {
            queue,
            chan,
            tag,
            id,
        } = p;
        if !matches!(out, Ok(Outcome::Confirmed)) {
            self.acks.not_moved(queue, chan);
        }
        match out {
            Ok(Outcome::Confirmed) => self.acks.confirmed(queue, chan, tag, id),
            Ok(Outcome::Returned { code, text }) => {
                self.report.fail(
                    id,
                    format!(
                        "returned by the broker as unroutable ({code} {text}); left in the DLQ"
                    ),
                );
            }
            Ok(Outcome::Nacked) => {
                self.report.fail(
                    id,
                    "nacked by the broker (destination full or unavailable); left in the DLQ",
                );
            }
            Err(e) => {
                self.report.fail(
                    id,
                    "outcome unknown: the broker connection was lost; left in the DLQ",
                );
                self.report
                    .stopped
                    .get_or_insert_with(|| format!("broker: {e:#}"));
            }
        }
    }

    /// Records sent acknowledgements: a message moved once its DLQ copy is acknowledged.
    fn count_acked(&mut self, acked: Vec<Acked>) {
        for a in acked {
            match a.result {
                Ok(()) => {
                    self.report.success();
                    self.acked[a.queue] += 1;
                    self.moved_now += 1;
                }
                Err(e) => {
                    let why = redact::scrub(&e.to_string());
                    self.report.fail(
                        a.id,
                        format!("published, but its DLQ copy could not be acknowledged ({why}): it is in both places"),
                    );
                    self.report
                        .stopped
                        .get_or_insert_with(|| "lost the channel to the DLQ".into());
                }
            }
        }
    }
}

/// How many messages stamped with this run's id are in the DLQs now (a read).
async fn died_again(conn: &lapin::Connection, checked: &[Checked], replay_id: &str) -> Result<u64> {
    let mut n = 0;
    for q in checked {
        let Some(depth) = rabbit::passive_declare(conn, &q.name).await? else {
            continue;
        };
        let mut now = q.clone();
        now.depth = depth;
        let spec = ReadSpec::for_checked(&now, None);
        let (tx, mut rx) = mpsc::channel(256);
        let id = replay_id.to_string();
        let make = move |_: &str, _: &str, _: &str, p: &lapin::BasicProperties, _: &[u8]| {
            let h = p.headers().clone().unwrap_or_default();
            matches!(h.inner().get(requeue::REPLAY_ID), Some(lapin::types::AMQPValue::LongString(s)) if s.as_bytes() == id.as_bytes())
        };
        let read = async {
            let r = reader::read_queue(conn, &spec, &make, &tx).await;
            drop(tx);
            r
        };
        let count = async {
            let mut c = 0u64;
            while let Some(Ok(hit)) = rx.recv().await {
                c += u64::from(hit);
            }
            c
        };
        let (r, c) = tokio::join!(read, count);
        r?;
        n += c;
    }
    Ok(n)
}

/// A delivery on its way out: its id, route, properties, and the body when --transform
/// edited it.
type Moving = (
    RecordId,
    (String, String),
    lapin::BasicProperties,
    Option<Vec<u8>>,
);

/// `--transform` on one record: `Ok(None)` without a transform, `Err` when the program
/// cannot edit it (the message stays in the DLQ, reported).
fn edit_of(
    opts: &Options,
    rec: &crate::model::DeadLetter,
) -> Result<Option<crate::transform::Edit>, String> {
    opts.common
        .transform
        .as_deref()
        .map(|t| t.apply(rec))
        .transpose()
}

/// The published properties of an edited message (a new message: see requeue::transformed).
fn edited(
    opts: &Options,
    edit: Option<&crate::transform::Edit>,
    props: lapin::BasicProperties,
    original_id: &str,
) -> lapin::BasicProperties {
    match (edit, opts.common.transform.as_deref()) {
        (Some(e), Some(t)) => requeue::transformed(props, e, original_id, t.sha256()),
        _ => props,
    }
}

/// One compact before -> after line of a transformed message, for the plan.
fn diff_line(rec: &crate::model::DeadLetter, e: &crate::transform::Edit) -> String {
    let mut line = format!(
        "id {}: payload {} -> {}",
        rec.id,
        ellipsize(&rec.payload.to_string(), 60),
        ellipsize(&e.payload, 60)
    );
    for (k, v) in &e.headers {
        match v {
            Some(v) => line.push_str(&format!("; header {k} = {}", ellipsize(&v.to_string(), 30))),
            None => line.push_str(&format!("; header {k} removed")),
        }
    }
    line
}

impl Plan {
    /// One selected message goes into the plan.
    fn take(
        &mut self,
        queue: &str,
        rec: &crate::model::DeadLetter,
        route: &(String, String),
        edit: Option<&crate::transform::Edit>,
    ) {
        if let Some(e) = edit.filter(|e| e.changed) {
            self.transformed += 1;
            if self.transformed <= 10 {
                self.diffs.push(diff_line(rec, e));
            }
        }
        *self.selected.entry(key(queue, &rec.id)).or_default() += 1;
        self.count += 1;
        if route.0.is_empty() {
            self.destinations.insert(route.1.clone());
        }
        let fp = fingerprint::fingerprint(rec.motivo.as_deref().unwrap_or(""));
        *self.groups.entry((describe_dest(route), fp)).or_default() += 1;
    }
}

/// Where a message goes, unless it was replayed too often already (the loop guard, checked
/// cheaply here; `requeue::prepare` checks it again).
fn guarded_route(
    opts: &Options,
    rec: &crate::model::DeadLetter,
    d: &lapin::message::Delivery,
    queue: &str,
) -> Result<(String, String), Refusal> {
    let origin = rec.origin_queue();
    let route = destination(&opts.common.target, origin, queue)?;
    let replays = requeue::replay_count(d.properties.headers().as_ref());
    if replays >= i64::from(opts.common.max_replays) {
        return Err(Refusal::LoopGuard {
            count: replays,
            max: opts.common.max_replays,
        });
    }
    Ok(route)
}

/// With --yes (and no dry run, no canary, no --plan-first) nobody reads the plan: select
/// and move in one pass, as a shovel does, instead of taking everything first.
fn streams(opts: &Options) -> bool {
    opts.common.safety.yes
        && !opts.common.safety.dry_run
        && opts.canary.is_none()
        && !opts.plan_first
}

/// What a dry run shows for one message.
#[derive(serde::Serialize)]
struct MovePreview {
    id: RecordId,
    from: String,
    exchange: String,
    routing_key: String,
    properties: Value,
    headers: Option<Value>,
    payload: Box<serde_json::value::RawValue>,
    /// Times dlq replayed it before this run.
    #[serde(skip)]
    replays: i64,
}

impl MovePreview {
    fn new(
        rec: &crate::model::DeadLetter,
        from: &str,
        (exchange, routing_key): &(String, String),
        props: &lapin::BasicProperties,
        body: &[u8],
        replays: i64,
    ) -> MovePreview {
        MovePreview {
            id: rec.id.clone(),
            from: from.to_string(),
            exchange: exchange.clone(),
            routing_key: routing_key.clone(),
            properties: crate::rabbit::codec::properties_to_json(props),
            headers: props
                .headers()
                .as_ref()
                .map(crate::rabbit::codec::table_to_json),
            payload: crate::model::exact_json(body),
            replays,
        }
    }
}

impl crate::output::Tabled for MovePreview {
    fn columns() -> &'static [&'static str] {
        &["id", "from", "to", "replays", "body"]
    }

    fn cells(&self) -> Vec<String> {
        let to = if self.exchange.is_empty() {
            self.routing_key.clone()
        } else {
            format!("{}/{}", self.exchange, self.routing_key)
        };
        vec![
            self.id.to_string(),
            self.from.clone(),
            to,
            self.replays.to_string(),
            ellipsize(self.payload.get(), 60),
        ]
    }
}
