//! The plan pass: every DLQ's messages present now are taken and held unacknowledged, the
//! selected ones planned and (while they fit) kept in memory to move without a second read.
//! Touches the broker only through the take channels (it acknowledges nothing) and, under
//! `--dry-run`, stdout with the preview.

use super::Options;
use super::preview::MovePreview;
use super::route::{Route, Routes, guarded_route};
use super::{Dlq, Session};
use crate::fingerprint;
use crate::model::{DeadLetter, RecordId};
use crate::output::{RowWriter, ellipsize};
use crate::rabbit::Checked;
use crate::rabbit::reader::{ReadSpec, within_hold};
use crate::rabbit::take::Taker;
use crate::replay::requeue;
use crate::replay::workers::TaskGate;
use crate::select::Selector;
use crate::source::queue as record;
use crate::transform::Edit;
use anyhow::{Error, Result};
use lapin::message::Delivery;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::hash::{Hash, Hasher};

/// What the plan pass found, per run.
#[derive(Default)]
pub(crate) struct Plan {
    /// hash(queue, id) -> how many selected messages carry it.
    pub(crate) selected: HashMap<u64, u32>,
    pub(crate) count: u64,
    /// (destination as the plan names it, reason fingerprint) -> count.
    pub(crate) groups: BTreeMap<(String, String), u64>,
    pub(crate) refused: Vec<(RecordId, String)>,
    /// `--transform`: messages whose payload or headers the program changes, and the
    /// first few of them as before -> after lines for the plan.
    pub(crate) transformed: u64,
    pub(crate) diffs: Vec<String>,
    /// Destination queues reached through the default exchange: they must exist.
    pub(crate) destinations: BTreeSet<String>,
}

impl Plan {
    /// One selected message goes into the plan.
    fn take(&mut self, queue: &str, rec: &DeadLetter, route: &Route, edit: Option<&Edit>) {
        if let Some(e) = edit.filter(|e| e.changed) {
            self.transformed += 1;
            if self.transformed <= 10 {
                self.diffs.push(diff_line(rec, e));
            }
        }
        *self.selected.entry(key(queue, &rec.id)).or_default() += 1;
        self.count += 1;
        if let Some(q) = route.queue() {
            self.destinations.insert(q.to_string());
        }
        let fp = fingerprint::fingerprint(rec.motivo.as_deref().unwrap_or(""));
        *self.groups.entry((route.describe(), fp)).or_default() += 1;
    }
}

/// Which message the plan selected: a 64-bit hash of its queue and record id, so the plan
/// keeps no ids.
pub(crate) fn key(queue: &str, id: &RecordId) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    queue.hash(&mut h);
    id.to_string().hash(&mut h);
    h.finish()
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
pub(crate) struct Held {
    /// Index of its DLQ among the checked queues.
    pub(crate) queue: usize,
    pub(crate) id: RecordId,
    /// Index into the plan's `Routes`.
    pub(crate) route: u32,
    /// The properties to publish (already rewritten), wire-encoded.
    pub(crate) props: Box<[u8]>,
    pub(crate) body: Vec<u8>,
    /// Take channel and delivery tag, for batched acknowledgements.
    pub(crate) chan: usize,
    pub(crate) tag: u64,
}

/// The selected messages kept in memory, ready to publish, while they fit in `budget`.
pub(crate) struct Holding {
    pub(crate) held: VecDeque<Held>,
    pub(crate) routes: Routes,
    bytes: usize,
    budget: usize,
    /// False once they did not fit: the move reads again.
    pub(crate) single_pass: bool,
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
        route: Route,
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

/// What the plan pass took: the plan, the take channels holding every message, and (while
/// they fit in memory) the selected messages themselves, ready to publish.
pub(crate) struct Taken {
    pub(crate) plan: Plan,
    pub(crate) takers: Vec<Taker>,
    pub(crate) holding: Holding,
    pub(crate) publish_ids: PublishIds,
    /// `--dry-run`'s rows, finished once everything is given back (`DryRows::finish`).
    pub(crate) dry: Option<DryRows>,
    /// How long the plan may wait for its answer.
    pub(crate) hold: PlanHold,
}

/// How long a plan may hold its DLQs while it waits on its user (a dry run's reader, the
/// answer to its question): from its first take, half the shortest consumer timeout of the
/// DLQs it holds (`ReadSpec::hold_wait`, which learns the broker's own through the session's
/// connection).
#[derive(Clone)]
pub(crate) struct PlanHold {
    pub(crate) started: std::time::Instant,
    specs: Vec<ReadSpec>,
}

impl PlanHold {
    fn new(session: &Session<'_>) -> PlanHold {
        let conn = &session.conn;
        let spec = |q| ReadSpec::for_checked(q, None).with_reported(conn);
        PlanHold {
            started: std::time::Instant::now(),
            specs: session.checked.iter().map(spec).collect(),
        }
    }

    /// The shortest `ReadSpec::hold_wait` of the DLQs held.
    pub(crate) fn wait(&self) -> std::time::Duration {
        let waits = self.specs.iter().map(ReadSpec::hold_wait);
        waits.min().unwrap_or_default()
    }
}

/// A dry run's rows, written while the plan takes: the writer, and whether they stopped
/// because nobody read them while the plan held the DLQs for half of their consumer
/// timeout (`ReadSpec::hold_wait`; the plan reads on unseen, so that it gives back before
/// RabbitMQ takes back).
pub(crate) struct DryRows {
    out: RowWriter<MovePreview>,
    hold: PlanHold,
    stalled: bool,
    /// A signal while the rows wait for their reader stops the plan (it gives back).
    signals: crate::signals::Listener,
}

impl DryRows {
    /// Writes a row unless the rows stopped; waits for the output while the hold allows.
    async fn write(&mut self, row: MovePreview) -> Result<()> {
        if self.stalled {
            return Ok(());
        }
        self.out.write(row)?;
        if let Some(ready) = futures_util::FutureExt::now_or_never(self.out.ready()) {
            return Ok(ready?);
        }
        let hold = || self.hold.wait();
        let waited = tokio::select! {
            w = within_hold(self.hold.started, hold, self.out.ready()) => w,
            _ = self.signals.next() => {
                crate::signals::announce(self.signals.seen());
                return Err(crate::error::interrupted(
                    "interrupted while the dry run's rows waited for their reader",
                ));
            }
        };
        match waited {
            Some(ready) => Ok(ready?),
            None => {
                self.stalled = true;
                Ok(())
            }
        }
    }

    /// Writes what waits, once the plan gave back what it held: the error of rows that
    /// stopped.
    pub(crate) async fn finish(self) -> Result<()> {
        let (stalled, hold) = (self.stalled, self.hold.wait());
        let n = self.out.finish_piped().await?;
        if stalled {
            let what = format!("the dry run's rows after {n}");
            return Err(crate::rabbit::reader::output_stalled(&what, hold));
        }
        Ok(())
    }
}

/// The plan pass while it takes the DLQs one after the other.
struct Planner<'s> {
    session: &'s Session<'s>,
    plan: Plan,
    /// `--dry-run`: the preview, written as the plan goes.
    dry: Option<DryRows>,
    selector: Selector<'s>,
    holding: Holding,
    publish_ids: PublishIds,
    gate: TaskGate<'s>,
}

/// 1. Plan: every message present now is taken and held; the selected ones are planned.
pub(crate) async fn take_plan(session: &Session<'_>) -> Result<Taken> {
    let (printer, opts) = (session.printer, session.opts);
    let hold = PlanHold::new(session);
    let mut planner = Planner {
        session,
        plan: Plan::default(),
        dry: opts
            .common
            .safety
            .dry_run
            .then(|| dry_rows(session, hold.clone()))
            .transpose()?,
        selector: Selector::new(&opts.common.selection),
        holding: Holding::new(hold_budget()),
        publish_ids: PublishIds::new(&session.replay_id),
        gate: TaskGate::new(&session.conn, &opts.common.workers),
    };
    let bar = printer.progress(None, "planning");
    let mut takers: Vec<Taker> = Vec::new();
    for (qi, q) in session.checked.iter().enumerate() {
        // Held live while the plan waits for its answer (see `Taker::open_holding`).
        let mut taker = Taker::open_holding(&ReadSpec::for_checked(q, None)).await?;
        taker.stop_on_signal();
        let took = planner.take_queue(qi, q, &mut taker, &bar).await;
        takers.push(taker);
        if let Err(e) = took {
            bar.finish_and_clear();
            return Err(given_back(session, takers, e).await);
        }
    }
    bar.finish_and_clear();
    let Planner {
        plan,
        dry,
        selector,
        holding,
        publish_ids,
        ..
    } = planner;
    if let Some(w) = selector.warning() {
        printer.warn(w);
    }
    Ok(Taken {
        plan,
        takers,
        holding,
        publish_ids,
        dry,
        hold,
    })
}

/// A plan that failed while it took (a signal, a stall): what it took goes back as a
/// declined plan's does (renewed where a return counts), not with the process; after a
/// signal, a quorum DLQ's take goes on to its end first, to give it back in order.
async fn given_back(session: &Session<'_>, takers: Vec<Taker>, e: Error) -> Error {
    crate::bulk::release_unmoved(&session.conn, session.printer, takers, Some(&e)).await;
    e
}

/// A dry run's rows, which may wait for their reader as long as the plan's `hold` allows.
fn dry_rows(session: &Session<'_>, hold: PlanHold) -> Result<DryRows> {
    Ok(DryRows {
        out: session.printer.stream_piped::<MovePreview>()?,
        hold,
        stalled: false,
        signals: crate::signals::listen(),
    })
}

impl Planner<'_> {
    /// Takes every message of one DLQ present now.
    async fn take_queue(
        &mut self,
        qi: usize,
        q: &Checked,
        taker: &mut Taker,
        bar: &indicatif::ProgressBar,
    ) -> Result<()> {
        let from = self.session.dlq(qi, q);
        while let Some(d) = taker.next(&self.session.conn).await? {
            bar.inc(1);
            self.take_one(&from, taker, d).await?;
        }
        Ok(())
    }

    /// One message: planned when it is selected and can move (previewed under --dry-run,
    /// held to move while it fits); else held, and given back at the end.
    async fn take_one(&mut self, from: &Dlq<'_>, taker: &mut Taker, d: Delivery) -> Result<()> {
        let session = self.session;
        let (conn, opts, queue, stamp) = (&session.conn, session.opts, from.name, &from.stamp);
        if self.selector.full() {
            return taker.keep(conn, &d).await;
        }
        let Some(rec) = record::selected(queue, &d, &opts.record, &mut self.selector) else {
            return taker.keep(conn, &d).await;
        };
        let (route, edit) = match self.decide(queue, &rec, &d).await {
            Ok(decided) => decided,
            Err(why) => {
                self.plan.refused.push((rec.id, why));
                return taker.keep(conn, &d).await;
            }
        };
        self.plan.take(queue, &rec, &route, edit.as_ref());
        let stored = crate::rabbit::codec::stored_properties(&d.properties);
        let original = rec.id.to_string();
        let edited = |props| edited(opts, edit.as_ref(), props, &original);
        let body = edit
            .as_ref()
            .map_or(d.data.clone(), |e| e.payload.clone().into_bytes());
        // A dry run moves nothing: every message stays, kept before its row waits for the
        // reader. Kept after, a signal during that wait left it neither kept nor planned:
        // the one message the release did not renew, given back by the close, counted, at
        // the queue's head (4.0.5 in CI: `471, 0-470, 472-2999`).
        let dry_run = opts.common.safety.dry_run;
        if dry_run {
            taker.keep(conn, &d).await?;
        }
        if let Some(out) = self.dry.as_mut()
            && let Ok(props) = requeue::prepare(&stored, stamp, "dry-run").map(edited)
        {
            let replays = requeue::replay_count(d.properties.headers().as_ref());
            out.write(MovePreview::new(
                &rec, queue, &route, &props, &body, replays,
            ))
            .await?;
        }
        if dry_run {
            return Ok(());
        }
        taker.plan_move(&d);
        if self.holding.single_pass {
            let props = requeue::prepare(&stored, stamp, &self.publish_ids.next())
                .ok()
                .map(edited);
            let place = (taker.channel_index(), d.delivery_tag);
            self.holding
                .keep(from.index, rec.id, route, props, body, place);
        }
        Ok(())
    }

    /// Its route (past the loop guard and the live-worker check) and its edit; `Err`
    /// keeps it in the DLQ, reported.
    async fn decide(
        &mut self,
        queue: &str,
        rec: &DeadLetter,
        d: &Delivery,
    ) -> Result<(Route, Option<Edit>), String> {
        let common = &self.session.opts.common;
        let headers = d.properties.headers().as_ref();
        let replays = requeue::replay_count(headers);
        let route = guarded_route(
            &common.target,
            common.max_replays,
            rec.origin_queue(),
            queue,
            replays,
        )
        .map_err(|why| why.to_string())?;
        self.gate
            .allows(headers, &route.exchange, &route.routing_key)
            .await?;
        Ok((route, edit_of(self.session.opts, rec)?))
    }
}

/// `--transform` on one record: `Ok(None)` without a transform, `Err` when the program
/// cannot edit it (the message stays in the DLQ, reported).
pub(crate) fn edit_of(opts: &Options, rec: &DeadLetter) -> Result<Option<Edit>, String> {
    opts.common
        .transform
        .as_deref()
        .map(|t| t.apply(rec))
        .transpose()
}

/// The published properties of an edited message (a new message: see requeue::transformed).
pub(crate) fn edited(
    opts: &Options,
    edit: Option<&Edit>,
    props: lapin::BasicProperties,
    original_id: &str,
) -> lapin::BasicProperties {
    match (edit, opts.common.transform.as_deref()) {
        (Some(e), Some(t)) => requeue::transformed(props, e, original_id, t.sha256()),
        _ => props,
    }
}

/// One compact before -> after line of a transformed message, for the plan.
fn diff_line(rec: &DeadLetter, e: &Edit) -> String {
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

/// Correlation keys for publishes (the `dlq-publish-id` header): unique per publish, built
/// from the run's id and a counter (a random id per message cost a system call each).
pub(crate) struct PublishIds {
    prefix: String,
    next: u64,
}

impl PublishIds {
    pub(crate) fn new(replay_id: &str) -> PublishIds {
        PublishIds {
            prefix: replay_id.to_string(),
            next: 0,
        }
    }

    pub(crate) fn next(&mut self) -> String {
        self.next += 1;
        format!("{}.{}", self.prefix, self.next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::SourceKind;
    use serde_json::json;

    fn rec(id: i64, motivo: &str) -> DeadLetter {
        let mut r = DeadLetter::blank(SourceKind::Queue, "orders.dlq", RecordId::Int(id));
        r.motivo = Some(motivo.into());
        r.payload = json!({"n": id});
        r
    }

    fn edit(changed: bool) -> Edit {
        Edit {
            payload: r#"{"n":0}"#.into(),
            headers: vec![],
            changed,
        }
    }

    #[test]
    fn keys_tell_queues_and_ids_apart() {
        let one = RecordId::Int(1);
        assert_eq!(key("a", &one), key("a", &RecordId::Int(1)));
        assert_ne!(key("a", &one), key("b", &one));
        assert_ne!(key("a", &one), key("a", &RecordId::Text("2".into())));
    }

    #[test]
    fn the_plan_counts_groups_and_names_default_exchange_destinations() {
        let mut plan = Plan::default();
        let orders = Route::to_queue("orders");
        let events = Route {
            exchange: "events".into(),
            routing_key: "k".into(),
        };
        plan.take("orders.dlq", &rec(1, "boom"), &orders, None);
        plan.take("orders.dlq", &rec(1, "boom"), &orders, None);
        plan.take("orders.dlq", &rec(2, "bang"), &events, None);
        assert_eq!(plan.count, 3);
        assert_eq!(plan.selected[&key("orders.dlq", &RecordId::Int(1))], 2);
        assert_eq!(plan.selected[&key("orders.dlq", &RecordId::Int(2))], 1);
        assert_eq!(
            plan.destinations.iter().collect::<Vec<_>>(),
            [&"orders".to_string()]
        );
        let boom = ("queue orders".to_string(), fingerprint::fingerprint("boom"));
        let bang = (
            "exchange events / k".to_string(),
            fingerprint::fingerprint("bang"),
        );
        assert_eq!(plan.groups[&boom], 2);
        assert_eq!(plan.groups[&bang], 1);
        assert_eq!(plan.transformed, 0);
    }

    #[test]
    fn the_plan_shows_the_first_ten_changed_edits() {
        let mut plan = Plan::default();
        let to = Route::to_queue("orders");
        plan.take("q", &rec(0, ""), &to, Some(&edit(false)));
        for i in 1..=12 {
            plan.take("q", &rec(i, ""), &to, Some(&edit(true)));
        }
        assert_eq!(plan.transformed, 12);
        assert_eq!(plan.diffs.len(), 10);
        assert!(plan.diffs[0].starts_with("id 1: "));
    }

    #[test]
    fn a_diff_line_shows_payload_and_headers() {
        let e = Edit {
            payload: r#"{"n":2}"#.into(),
            headers: vec![("tenant".into(), Some(json!("acme"))), ("old".into(), None)],
            changed: true,
        };
        assert_eq!(
            diff_line(&rec(1, ""), &e),
            r#"id 1: payload {"n":1} -> {"n":2}; header tenant = "acme"; header old removed"#
        );
    }

    #[test]
    fn a_diff_line_shortens_long_payloads() {
        let e = Edit {
            payload: "x".repeat(100),
            headers: vec![],
            changed: true,
        };
        let line = diff_line(&rec(1, ""), &e);
        assert!(line.ends_with(&format!("{}…", "x".repeat(59))));
    }

    /// Holds message `id` (delivery tag `id`) of DLQ `queue`, routed to queue "a".
    fn hold(h: &mut Holding, queue: usize, id: u64, body: Vec<u8>) {
        let props = Some(lapin::BasicProperties::default());
        let route = Route::to_queue("a");
        h.keep(queue, RecordId::Int(id as i64), route, props, body, (0, id));
    }

    #[test]
    fn holding_keeps_messages_while_they_fit() {
        let mut h = Holding::new(10_000);
        hold(&mut h, 0, 1, vec![1; 10]);
        hold(&mut h, 1, 2, vec![2; 10]);
        assert!(h.single_pass);
        assert_eq!(h.held.len(), 2);
        assert_eq!(h.held[0].route, h.held[1].route);
        assert_eq!(h.routes.get(h.held[1].route), &Route::to_queue("a"));
        assert_eq!((h.held[1].queue, h.held[1].tag), (1, 2));
    }

    #[test]
    fn past_the_budget_holding_lets_go_of_everything() {
        let mut h = Holding::new(HELD_OVERHEAD + 100);
        hold(&mut h, 0, 1, vec![]);
        assert_eq!(h.held.len(), 1);
        hold(&mut h, 0, 2, vec![0; 200]);
        assert!(!h.single_pass);
        assert!(h.held.is_empty());
        // Once past, nothing more is held: the move reads again.
        hold(&mut h, 0, 3, vec![]);
        assert!(h.held.is_empty());
    }

    #[test]
    fn properties_that_cannot_be_held_mean_a_second_read() {
        let mut h = Holding::new(10_000);
        h.keep(
            0,
            RecordId::Int(1),
            Route::to_queue("a"),
            None,
            vec![],
            (0, 1),
        );
        assert!(!h.single_pass);
        assert!(h.held.is_empty());
    }
}
