//! The mover: publishes what a run picks (`mandatory`, with a confirm) and acknowledges each
//! DLQ copy only after a clean confirm, at most `--window` unsettled at once. Touches the
//! broker: publishes, acknowledgements and renewals on the take channels, and give-backs.

use super::follow::Moves;
use super::gate;
use super::plan::{Holding, PublishIds, Taken, edit_of, edited, key};
use super::route::{Route, destination};
use super::window::Window;
use super::{Dlq, Options, Session};
use crate::bulk::release_unmoved;
use crate::error::Exit;
use crate::model::{DeadLetter, RecordId};
use crate::rabbit::publish::{Outcome, Outgoing, Pipeline};
use crate::rabbit::reader::ReadSpec;

use crate::rabbit::take::Taker;
use crate::rabbit::{self, Checked};
use crate::redact;
use crate::replay::acks::{Acked, Acks};
use crate::replay::requeue;
use crate::replay::workers::TaskGate;
use crate::replay::{Canary, stop_on_signal_since};
use crate::report::Report;
use crate::select::Selector;
use crate::source::queue as record;
use anyhow::Result;
use lapin::message::Delivery;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// 2. Move what the plan selected (a canary first when asked), then give back the rest.
pub(crate) async fn move_planned(session: Session<'_>, taken: Taken) -> Result<Exit> {
    let Taken {
        mut plan,
        mut takers,
        mut holding,
        publish_ids,
        ..
    } = taken;
    let mut report = Report::new("replay");
    for (id, why) in std::mem::take(&mut plan.refused) {
        report.fail(id, why);
    }
    // The plan already refused what no worker would run: no gate.
    let picks = Picks::Planned(plan.selected);
    let mut mover = Mover::open(&session, plan.count, report, publish_ids, picks, None).await?;
    if takers.iter_mut().any(|t| t.taken_back(&session.conn)) {
        // Acknowledging them would do nothing: moving them would leave them in the DLQ too.
        mover.report.stopped = Some(crate::rabbit::take::taken_back_note(false, true));
    }
    if holding.single_pass {
        // Held messages are acknowledged on the take channels that delivered them; the
        // consumers the plan left live (`Taker::open_holding`) stay live meanwhile, or are
        // cancelled first where that strands nothing (`Taker::before_acks`).
        mover.unmoved = Some(Vec::new());
        let acking = move_time(&session, plan.count);
        for t in takers.iter_mut() {
            t.moving();
            t.before_acks(acking).await;
            mover.taken_back.push((t.taken_back_flag(), true));
        }
        for (qi, t) in takers.iter().enumerate() {
            for (ci, ch) in t.channels().iter().enumerate() {
                mover.acks.channel(qi, ci, ch, t.ack_budget(ci));
            }
        }
    } else {
        // The plan did not fit in memory: give everything back, then read again.
        let takers = std::mem::take(&mut takers);
        release_unmoved(&session.conn, session.printer, takers, None).await;
    }
    if let Some(canary) = session.opts.canary
        && mover.report.stopped.is_none()
    {
        mover.canary(canary, &mut holding).await?;
    }
    if !mover.canary_failed && mover.report.stopped.is_none() {
        mover.move_planned_part(&mut holding, None).await?;
    }
    let mut ended = mover.end();
    let left = holding.held.drain(..).map(|h| (h.queue, h.chan, h.tag));
    ended.unmoved.extend(left);
    drop(holding);
    renew_unmoved(session.printer, &mut takers, &ended.unmoved);
    session.finish(ended, Some(takers), Ok(())).await
}

/// The slowest an unpaced move is taken to go, in messages a second, when it decides
/// whether the take's consumers can be cancelled before it (`Taker::before_acks`): dlq
/// moves thousands a second (bench/).
const SLOWEST_MOVE: f64 = 200.0;

/// How long the planned move of `n` messages will hold its take's messages, when dlq can
/// tell: at `--rate`, at most `SLOWEST_MOVE`. Not with a canary or `--follow`, which wait
/// on workers.
fn move_time(session: &Session<'_>, n: u64) -> Option<Duration> {
    if session.opts.canary.is_some() || session.opts.follow.is_some() {
        return None;
    }
    let rate = session
        .opts
        .common
        .rate
        .map_or(SLOWEST_MOVE, |r| r.min(SLOWEST_MOVE));
    (rate > 0.0).then(|| Duration::from_secs_f64(n as f64 / rate))
}

/// A move that stopped part-way (a signal, a canary, a refusal): what the plan meant to
/// move and did not is renewed on release with what it kept, in take order, where giving
/// it back would count a delivery (`Taker::renew_planned`); else given back with it, one
/// window at a time (`Taker::left_unmoved`).
fn renew_unmoved(
    printer: &crate::output::Printer,
    takers: &mut [Taker],
    unmoved: &[(usize, usize, u64)],
) {
    for (qi, t) in takers.iter_mut().enumerate() {
        let mine: std::collections::HashSet<(usize, u64)> = unmoved
            .iter()
            .filter(|(q, ..)| *q == qi)
            .map(|&(_, chan, tag)| (chan, tag))
            .collect();
        if mine.is_empty() {
            continue;
        }
        t.left_unmoved(mine.iter().copied());
        if let Some(note) = t.renew_planned(|chan, tag| mine.contains(&(chan, tag))) {
            printer.warn(note);
        }
    }
}

/// Replay under `--yes`: every DLQ's messages present now are taken in order and the
/// selected ones moved at once, with the same confirms, acknowledgements and duplicate
/// window as after a plan. What differs: a missing destination queue is found when its
/// first message comes, so its messages stay in the DLQ and are reported (exit 3) while
/// the others move; without `--yes` (or with `--dry-run`) the plan refuses the whole run.
pub(crate) async fn stream(mut session: Session<'_>) -> Result<Exit> {
    gate::announce_stream(&mut session).await?;
    let opts = session.opts;
    // The messages present at the start: every selected one is among them.
    let present: u64 = session
        .checked
        .iter()
        .map(|q| u64::from(q.depth.ready))
        .sum();
    let present = opts
        .common
        .selection
        .limit
        .map_or(present, |l| l.min(present));
    let picks = Picks::Streaming {
        selector: Selector::new(&opts.common.selection),
        destinations: HashMap::new(),
    };
    let gate = Some(TaskGate::new(&session.conn, &opts.common.workers));
    let publish_ids = PublishIds::new(session.audit.run_id());
    let report = Report::new("replay");
    let mut mover = Mover::open(&session, present, report, publish_ids, picks, gate).await?;
    let passed = mover.pass(None).await.map(|_| ());
    let ended = mover.end();
    session.finish(ended, None, passed).await
}

/// Why a run a signal stopped stopped (`Report::stopped`).
const INTERRUPTED: &str = "interrupted";

/// Why a take of a quorum DLQ goes on to its end after its moves (`Mover::keep_rest`).
#[derive(Clone, Copy)]
enum Rest {
    /// A signal stopped the run.
    Interrupted,
    /// The selection is complete (`--limit`) before the take's end.
    Unselected,
}

impl Rest {
    /// What dlq says as it begins.
    fn notice(self, queue: &str) -> String {
        let tail = match self {
            Rest::Interrupted => {
                " (signal again to exit at once: then what it holds goes back counted)"
            }
            Rest::Unselected => ", the selection being complete",
        };
        format!(
            "{queue:?} is a quorum queue: dlq takes the rest of it to its end, unseen, to give it back in order without counting a delivery{tail}"
        )
    }
}

/// State of the move phase.
struct Mover<'a> {
    /// The connection, the options, the DLQs; its printer gives stage lines at -vv (where
    /// a stuck run waits).
    session: &'a Session<'a>,
    /// Publishes from this task: no hand-off to another task per message.
    pipeline: Pipeline<Pending>,
    publish_ids: PublishIds,
    report: Report,
    bar: indicatif::ProgressBar,
    stop: Arc<AtomicBool>,
    /// Sets `stop` on Ctrl-C or SIGTERM.
    signals: tokio::task::JoinHandle<()>,
    picks: Picks<'a>,
    /// Celery task messages move only where a live worker runs them.
    gate: Option<TaskGate<'a>>,
    /// Messages acknowledged per DLQ.
    acked: Vec<u64>,
    acks: Acks,
    /// Moved since the last `settle_*` returned.
    moved_now: u64,
    /// The canary stopped the run on purpose: running it again would fail the same way.
    canary_failed: bool,
    /// `--follow`: what is followed once the move is over.
    follow: Option<Moves>,
    /// How many may be unsettled at once (`--window`, or adaptive).
    window: Window,
    /// The last acknowledgements sent (`Ended::recent`).
    recent: std::collections::VecDeque<(usize, RecordId)>,
    /// Set when RabbitMQ took back what a take held (`Taker::taken_back`), each with
    /// whether the take held it for a plan.
    taken_back: Vec<(Arc<AtomicBool>, bool)>,
    /// What the plan's takes hold and did not move (see `Ended::unmoved`); `None` when no
    /// plan's take holds what moves (a streamed run, or a plan too large to hold).
    unmoved: Option<Vec<(usize, usize, u64)>>,
}

/// What the move phase leaves for `Session::finish`.
pub(crate) struct Ended {
    pub(crate) report: Report,
    pub(crate) bar: indicatif::ProgressBar,
    pub(crate) signals: tokio::task::JoinHandle<()>,
    /// Messages acknowledged per DLQ: the rest of what the takes hold goes back.
    pub(crate) acked: Vec<u64>,
    /// A streamed run's selection, reported at the end.
    pub(crate) streamed: Option<Streamed>,
    pub(crate) canary_failed: bool,
    /// `--follow`: the messages that moved, to follow.
    pub(crate) followed: Option<Moves>,
    /// The run's duplicate bound (the largest window it could use).
    pub(crate) window_bound: usize,
    /// The last acknowledgements sent (DLQ index, id): after a lost connection, the ones
    /// that may have been lost with it.
    pub(crate) recent: std::collections::VecDeque<(usize, RecordId)>,
    /// What was taken and did not move (DLQ index, take channel, delivery tag).
    pub(crate) unmoved: Vec<(usize, usize, u64)>,
}

/// What a streamed run's selector says at the end.
pub(crate) struct Streamed {
    pub(crate) warning: Option<String>,
    /// Messages selected.
    pub(crate) selected: u64,
}

/// What acknowledges a published message's DLQ copy once it is confirmed.
struct Pending {
    queue: usize,
    chan: usize,
    tag: u64,
    id: RecordId,
}

/// A delivery on its way out; `body` is `Some` when --transform edited it.
struct Moving {
    id: RecordId,
    route: Route,
    props: lapin::BasicProperties,
    body: Option<Vec<u8>>,
}

impl<'a> Mover<'a> {
    /// The move phase's set-up, the same for both runs: the publish pipeline, a stop on
    /// Ctrl-C or SIGTERM, and a progress bar over `total` messages.
    async fn open(
        session: &'a Session<'a>,
        total: u64,
        report: Report,
        publish_ids: PublishIds,
        picks: Picks<'a>,
        gate: Option<TaskGate<'a>>,
    ) -> Result<Mover<'a>> {
        let pipeline = Pipeline::open(&session.conn, session.opts.common.rate).await?;
        let stop = Arc::new(AtomicBool::new(false));
        let signals = stop_on_signal_since(stop.clone(), session.signals_at);
        let bar = session.printer.progress(Some(total), "replaying");
        Ok(Mover {
            session,
            pipeline,
            publish_ids,
            report,
            bar,
            stop,
            signals,
            picks,
            gate,
            acked: vec![0; session.checked.len()],
            acks: Acks::default(),
            moved_now: 0,
            canary_failed: false,
            follow: session
                .watch
                .as_ref()
                .map(|w| Moves::new(w.watch.tracker())),
            window: session.window(),
            recent: Default::default(),
            taken_back: Vec::new(),
            unmoved: None,
        })
    }

    /// Ends the move phase: the pipeline and the acknowledger close here, before anything
    /// held is given back.
    fn end(self) -> Ended {
        let streamed = match &self.picks {
            Picks::Streaming { selector, .. } => Some(Streamed {
                warning: selector.warning(),
                selected: selector.taken(),
            }),
            Picks::Planned(_) => None,
        };
        let Mover {
            report,
            bar,
            signals,
            acked,
            canary_failed,
            follow,
            window,
            recent,
            unmoved,
            ..
        } = self;
        Ended {
            report,
            bar,
            signals,
            acked,
            streamed,
            canary_failed,
            followed: follow,
            window_bound: window.bound(),
            recent,
            unmoved: unmoved.unwrap_or_default(),
        }
    }

    /// `--canary`: moves the first few, waits, and stops the run when any died again.
    async fn canary(&mut self, canary: Canary, holding: &mut Holding) -> Result<()> {
        let session = self.session;
        let moved = self
            .move_planned_part(holding, Some(canary.count.get()))
            .await?;
        if self.report.stopped.is_some() || moved == 0 {
            return Ok(());
        }
        if let (Some(f), Some(moves)) = (&session.watch, self.follow.as_mut()) {
            // Followed: the canary's own outcomes decide, and are its part of the report.
            let dlqs = (session.checked.as_slice(), session.audit.run_id());
            let canaries = std::mem::take(&mut moves.moved);
            let printer = session.printer;
            let o = super::follow::outcomes(
                &session.conn,
                printer,
                &f.watch,
                dlqs,
                canaries,
                canary.wait,
            )
            .await;
            moves.earlier.extend(o.tasks.iter().cloned());
            // Ctrl-C cut the wait short: what did not come back yet proves nothing.
            if self.stop.load(Ordering::SeqCst) {
                self.report.stopped = Some(INTERRUPTED.into());
                return Ok(());
            }
            match o.canary_failure("message", "replayed") {
                None => printer.info(
                    "canary: every task succeeded and no message came back; replaying the rest",
                ),
                Some(why) => {
                    self.canary_failed = true;
                    self.report.stopped = Some(why);
                }
            }
            return Ok(());
        }
        session.printer.info(format!(
            "canary: {moved} message(s) replayed; watching for {}s whether they die again",
            canary.wait.as_secs()
        ));
        if !self.wait_unless_stopped(canary.wait).await {
            return Ok(());
        }
        // Only messages that came back after being replayed are ready in the DLQs now
        // (the rest are still held by this run): they carry this run's replay id.
        let died = died_again(&session.conn, &session.checked, session.audit.run_id()).await?;
        if died > 0 {
            self.canary_failed = true;
            self.report.stopped = Some(format!(
                "canary failed: {died} of {moved} replayed message(s) died again and are back in the DLQ; the rest were not replayed"
            ));
        } else {
            session
                .printer
                .info("canary: none died again; replaying the rest");
        }
        Ok(())
    }

    /// Waits `wait`, unless a signal stops the run first (false). Before, Ctrl-C during a
    /// canary's wait was acted on once it was over (30 s by default), after "canary: none
    /// died again; replaying the rest".
    async fn wait_unless_stopped(&mut self, wait: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + wait;
        while tokio::time::Instant::now() < deadline {
            if self.stop.load(Ordering::SeqCst) {
                self.report.stopped = Some(INTERRUPTED.into());
                return false;
            }
            let slice = tokio::time::Instant::now() + std::time::Duration::from_millis(100);
            tokio::time::sleep_until(slice.min(deadline)).await;
        }
        true
    }

    /// Moves planned messages, at most `limit`: the held ones, or (when they did not fit
    /// in memory) those a new take finds still selected. Returns how many moved.
    async fn move_planned_part(
        &mut self,
        holding: &mut Holding,
        limit: Option<u64>,
    ) -> Result<u64> {
        if holding.single_pass {
            Ok(self.move_held(holding, limit).await)
        } else {
            self.pass(limit).await
        }
    }

    /// False once the run stopped (an error, a signal) or `limit` messages are moved or
    /// in flight.
    fn may_continue(&mut self, moved: u64, limit: Option<u64>) -> bool {
        if self.report.stopped.is_some() {
            return false;
        }
        if self.stop.load(Ordering::SeqCst) {
            self.report.stopped = Some(INTERRUPTED.into());
            return false;
        }
        if let Some(why) = self.taken_back_note() {
            self.report.stopped = Some(why);
            return false;
        }
        limit.is_none_or(|l| moved + (self.unsettled() as u64) < l)
    }

    /// Why the run must stop, when RabbitMQ took back what a take holds: acknowledging
    /// those messages does nothing, so moving them would leave them in the DLQ too.
    fn taken_back_note(&self) -> Option<String> {
        let (_, planned) = self
            .taken_back
            .iter()
            .find(|(t, _)| t.load(Ordering::SeqCst))?;
        Some(crate::rabbit::take::taken_back_note(true, *planned))
    }

    /// Moves messages the plan holds, in order, at most `limit`. Returns how many moved.
    async fn move_held(&mut self, holding: &mut Holding, limit: Option<u64>) -> u64 {
        let mut moved = 0u64;
        loop {
            moved += self.settle_ready().await;
            if !self.may_continue(moved, limit) {
                break;
            }
            let Some(h) = holding.held.pop_front() else {
                break;
            };
            let Some(props) = crate::rabbit::codec::decode_properties(&h.props) else {
                // Encoded by this process a moment ago: cannot happen, but never guess.
                self.not_moved(h.queue, h.chan, h.tag);
                self.report.fail(
                    h.id,
                    "internal: held properties unreadable; left in the DLQ",
                );
                continue;
            };
            let route = holding.routes.get(h.route).clone();
            if let Err(why) = self.followable(props.headers().as_ref(), &route).await {
                self.not_moved(h.queue, h.chan, h.tag);
                self.report.fail(h.id, why);
                continue;
            }
            if let Some(f) = self.follow.as_mut() {
                f.publishing(&h.id, &props, &super::follow::publish_id(&props));
            }
            self.publish(
                route.outgoing(h.body, props),
                Pending {
                    queue: h.queue,
                    chan: h.chan,
                    tag: h.tag,
                    id: h.id,
                },
            )
            .await;
        }
        self.session.printer.debug(
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
        if self.session.opts.common.rate.is_some() {
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
        loop {
            let window = self.window.current();
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
        self.settle_publishes().await;
        let acked = self.acks.flush().await;
        self.count_acked(acked);
        std::mem::take(&mut self.moved_now)
    }

    /// Waits for every publish in flight (a stopped run sends none of what is staged); their
    /// acknowledgements go as their take's budget allows.
    async fn settle_publishes(&mut self) {
        if self.report.stopped.is_some() {
            for p in self.pipeline.unstage() {
                self.not_moved(p.queue, p.chan, p.tag);
            }
        }
        while let Some(done) = self.pipeline.next().await {
            self.settle(done);
        }
    }

    /// Takes the messages present now from every DLQ and moves the ones `picks` selects (at
    /// most `limit`). Returns how many were moved.
    async fn pass(&mut self, limit: Option<u64>) -> Result<u64> {
        let session = self.session;
        let mut moved = 0u64;
        for (qi, q) in session.checked.iter().enumerate() {
            if self.report.stopped.is_some()
                || limit.is_some_and(|l| moved >= l)
                || self.picks.full()
            {
                break;
            }
            let Some(mut taker) = self.open_taker(q).await? else {
                break;
            };
            let from = session.dlq(qi, q);
            let acked_before = self.acked[qi];
            // Watched while it moves: a consumer timeout stops the run at once (see
            // `rabbit::consumer`).
            self.taken_back.push((taker.taken_back_flag(), false));
            self.take_from(&from, &mut taker, limit, &mut moved).await;
            // A take that ended after RabbitMQ took messages back may have ended short of
            // the selection (`Taker::note_closed_channels`).
            if self.report.stopped.is_none() {
                self.report.stopped = self.taken_back_note();
            }
            moved += self.give_back(&from, taker, acked_before).await;
            self.taken_back.pop();
        }
        Ok(moved)
    }

    /// A take of what one DLQ holds now; `None` (the run stops) when it disappeared.
    async fn open_taker(&mut self, q: &Checked) -> Result<Option<Taker>> {
        let Some(now) = as_now(&self.session.conn, q).await? else {
            self.report.stopped = Some(format!("queue {:?} disappeared during the replay", q.name));
            return Ok(None);
        };
        self.session.printer.debug(
            2,
            format!(
                "replay: taking from {:?} ({} ready)",
                q.name, now.depth.ready
            ),
        );
        let spec = ReadSpec::for_checked(&now, None);
        let unsettled = self.window.bound() as u64;
        let ahead = self.session.paced_ahead_of(q);
        Ok(Some(Taker::open_settling(&spec, unsettled, ahead).await?))
    }

    /// Moves what one take delivers, in queue order, until it is drained, the run stops
    /// or `limit` (counting `moved` so far) is reached.
    async fn take_from(
        &mut self,
        from: &Dlq<'_>,
        taker: &mut Taker,
        limit: Option<u64>,
        moved: &mut u64,
    ) {
        loop {
            // Settle what is done; keep at most `window` publishes in flight.
            *moved += self.settle_ready().await;
            if !self.may_continue(*moved, limit) || self.picks.full() {
                break;
            }
            if !taker.ready() {
                // About to wait for deliveries: publish what is staged first.
                self.pipeline.flush().await;
            }
            let d = match taker.next(&self.session.conn).await {
                Ok(Some(d)) => d,
                Ok(None) => break,
                Err(e) => {
                    let why = crate::rabbit::named_loss(format!("{e:#}"));
                    let stopped = format!("reading {:?}: {why}", from.name);
                    self.report.stopped = Some(self.taken_back_note().unwrap_or(stopped));
                    break;
                }
            };
            self.move_one(from, taker, d).await;
        }
        // Ended short of the take's end: by a signal, or with the selection complete
        // (`--limit`). Other stops (an error, a take-back) leave nothing to keep in order.
        let why = match self.report.stopped.as_deref() {
            Some(INTERRUPTED) => Some(Rest::Interrupted),
            None => Some(Rest::Unselected),
            Some(_) => None,
        };
        if let Some(why) = why.filter(|_| taker.is_quorum()) {
            *moved += self.keep_rest(from, taker, why).await;
        }
    }

    /// When a take of a quorum DLQ ends short of its end (`why`): what is staged goes as the
    /// items in flight do, and the take goes on to its end keeping everything, as a read
    /// does, so that the release gives back the rest in its order (renewed or nacked where a
    /// close would count a delivery); a signal meanwhile stops the run, a second exits at
    /// once. Before, what its consumer had been delivered, up to its credit, and what was
    /// staged went back with the channel's close, each counted once, ahead of or behind the
    /// rest. After a signal (3,000, Ctrl-C once 300 moved): 966 counted on 4.0.5, 1,088 on
    /// 3.10.8, 1,984 on 4.3.6, the last two out of order (a nack alone put 4.3's behind the
    /// rest). After `--limit 100` of 40,000: 1,052 on 3.10.8 and 4.0.5. How many the
    /// settling moved.
    async fn keep_rest(&mut self, from: &Dlq<'_>, taker: &mut Taker, why: Rest) -> u64 {
        self.pipeline.flush().await;
        let mut moved = 0;
        let mut said = false;
        loop {
            moved += self.settle_ready().await;
            match taker.next(&self.session.conn).await {
                Ok(Some(d)) => {
                    // Said once there is a rest: it can take a while on a large DLQ.
                    if !std::mem::replace(&mut said, true) {
                        let line = why.notice(from.name);
                        self.bar.suspend(|| self.session.printer.info(line));
                    }
                    self.keep(taker, &d, from.name).await
                }
                Ok(None) | Err(_) => break,
            }
        }
        moved
    }

    /// Publishes one delivery when it is picked and can move; else it stays in its DLQ
    /// (reported when it cannot move).
    async fn move_one(&mut self, from: &Dlq<'_>, taker: &mut Taker, d: Delivery) {
        let (qi, chan, tag) = (from.index, taker.channel_index(), d.delivery_tag);
        let budget = taker.ack_budget(chan);
        self.acks.channel(qi, chan, &taker.channels()[chan], budget);
        let moving = match self.prepare_move(from, &d).await {
            Some(Ok(moving)) => moving,
            stays => {
                self.not_moved(qi, chan, tag);
                if let Some(Err((id, why))) = stays {
                    self.report.fail(id, why);
                }
                self.keep(taker, &d, from.name).await;
                return;
            }
        };
        self.picks.taken(from.name, &moving.id);
        // In queue order.
        let body = moving.body.unwrap_or(d.data);
        self.publish(
            moving.route.outgoing(body, moving.props),
            Pending {
                queue: qi,
                chan,
                tag,
                id: moving.id,
            },
        )
        .await;
    }

    /// Settles one take's publishes, then gives back what it holds and did not move.
    /// Returns how many the settling moved.
    async fn give_back(&mut self, from: &Dlq<'_>, mut taker: Taker, acked_before: u64) -> u64 {
        let printer = self.session.printer;
        printer.debug(
            2,
            format!(
                "replay: {:?}: {} taken; settling {} publish(es) and acknowledgement(s)",
                from.name,
                taker.taken,
                self.unsettled()
            ),
        );
        // Its consumer stays live while the publishes settle, so that a crash of dlq's node
        // gives back what it holds, and gets no more credit meanwhile; the acknowledgements
        // held back go once it is cancelled.
        taker.freeze();
        self.settle_publishes().await;
        taker.stop_consuming().await;
        let moved = self.settle_all().await;
        let held = taker
            .taken
            .saturating_sub(self.acked[from.index] - acked_before);
        printer.debug(
            2,
            format!("replay: {:?}: giving back {held} not moved", from.name),
        );
        for note in taker.release(&self.session.conn, held).await {
            printer.warn(note);
        }
        moved
    }

    /// Leaves a message in its DLQ (renewed where a give-back would count; see `Taker::keep`).
    /// A failure stops the replay: what is held goes back on release.
    async fn keep(&mut self, taker: &mut Taker, d: &Delivery, queue: &str) {
        if let Err(e) = taker.keep(&self.session.conn, d).await
            && self.report.stopped.is_none()
        {
            let why = crate::rabbit::named_loss(format!("{e:#}"));
            self.report.stopped = Some(format!("renewing {queue:?}: {why}"));
        }
    }

    /// Where a delivery goes, with which properties and (edited by --transform) body:
    /// `None` when it is not picked, `Err` (reported, it stays in the DLQ) when it cannot
    /// move.
    async fn prepare_move(
        &mut self,
        from: &Dlq<'_>,
        d: &Delivery,
    ) -> Option<Result<Moving, (RecordId, String)>> {
        let (opts, queue) = (self.session.opts, from.name);
        let rec = self.picks.pick(queue, d, opts)?;
        let stored = crate::rabbit::codec::stored_properties(&d.properties);
        let origin = rec.origin_queue();
        let route = match destination(&opts.common.target, origin, queue) {
            Ok(r) => r,
            Err(why) => return Some(Err((rec.id, why.to_string()))),
        };
        if let Err(why) = self
            .picks
            .check_destination(&self.session.conn, &route)
            .await
        {
            return Some(Err((rec.id, why)));
        }
        if let Some(gate) = self.gate.as_mut()
            && let Err(why) = gate
                .allows(
                    d.properties.headers().as_ref(),
                    &route.exchange,
                    &route.routing_key,
                )
                .await
        {
            return Some(Err((rec.id, why)));
        }
        if let Err(why) = self
            .followable(d.properties.headers().as_ref(), &route)
            .await
        {
            return Some(Err((rec.id, why)));
        }
        let edit = match edit_of(opts, &rec) {
            Ok(e) => e,
            Err(why) => return Some(Err((rec.id, why))),
        };
        let original = rec.id.to_string();
        let publish_id = self.publish_ids.next();
        let prepared = requeue::prepare(&stored, &from.stamp, &publish_id);
        if let (Some(f), Ok(_)) = (self.follow.as_mut(), &prepared) {
            f.publishing(&rec.id, &d.properties, &publish_id);
        }
        Some(match prepared {
            Ok(props) => Ok(Moving {
                props: edited(opts, edit.as_ref(), props, &original),
                body: edit.map(|e| e.payload.into_bytes()),
                id: rec.id,
                route,
            }),
            Err(why) => Err((rec.id, why.to_string())),
        })
    }

    /// `--follow`: a Celery task message moves only where its task can be followed.
    async fn followable(
        &self,
        headers: Option<&lapin::types::FieldTable>,
        route: &Route,
    ) -> Result<(), String> {
        let Some(f) = &self.session.watch else {
            return Ok(());
        };
        if !super::follow::is_task(headers) {
            return Ok(());
        }
        let queue = route
            .exchange
            .is_empty()
            .then_some(route.routing_key.as_str());
        let timeout = self.session.opts.common.workers.timeout;
        f.watch.ready_for(&f.dispatcher, queue, timeout).await
    }

    /// Records one publish outcome; a clean confirm queues the DLQ copy's acknowledgement.
    fn settle(&mut self, (p, out): (Pending, Result<Outcome>)) {
        self.bar.inc(1);
        let blocked = crate::rabbit::blocked().is_some();
        self.window.settled(1, std::time::Instant::now(), blocked);
        let Pending {
            queue,
            chan,
            tag,
            id,
        } = p;
        if !matches!(out, Ok(Outcome::Confirmed)) {
            self.not_moved(queue, chan, tag);
            if let Some(f) = self.follow.as_mut() {
                f.settled(&id, false);
            }
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
                    "outcome unknown: the broker connection was lost before its confirm; still in the DLQ (and in its destination if the broker took the publish)",
                );
                self.report
                    .stopped
                    .get_or_insert_with(|| crate::rabbit::broker_failure(&e));
            }
        }
    }

    /// A taken message that does not move (never published, or not confirmed): no batch
    /// acknowledgement may reach past it, and a plan's take renews it on release
    /// (`Taker::renew_planned`).
    fn not_moved(&mut self, queue: usize, chan: usize, tag: u64) {
        self.acks.not_moved(queue, chan);
        if let Some(unmoved) = self.unmoved.as_mut() {
            unmoved.push((queue, chan, tag));
        }
    }

    /// Records sent acknowledgements: a message moved once its DLQ copy is acknowledged.
    fn count_acked(&mut self, acked: Vec<Acked>) {
        for a in acked {
            if let Some(f) = self.follow.as_mut() {
                f.settled(&a.id, a.result.is_ok());
            }
            match a.result {
                Ok(()) => {
                    self.report.success();
                    self.acked[a.queue] += 1;
                    self.moved_now += 1;
                    // Four times the largest window: more than can be unsettled when the
                    // connection goes.
                    if self.recent.len() >= 4 * self.window.bound() {
                        self.recent.pop_front();
                    }
                    self.recent.push_back((a.queue, a.id));
                }
                Err(e) => {
                    let why = redact::scrub(&e.to_string());
                    self.report.fail(
                        a.id,
                        format!("published, but its DLQ copy could not be acknowledged ({why}): it is in both places"),
                    );
                    let lost = crate::rabbit::lost_connection_in(&why);
                    self.report.stopped.get_or_insert_with(|| {
                        lost.unwrap_or_else(|| format!("lost the channel to the DLQ ({why})"))
                    });
                }
            }
        }
    }
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
    fn pick(&mut self, queue: &str, d: &Delivery, opts: &Options) -> Option<DeadLetter> {
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
        conn: &crate::rabbit::Connection,
        route: &Route,
    ) -> Result<(), String> {
        let Picks::Streaming { destinations, .. } = self else {
            return Ok(());
        };
        let Some(queue) = route.queue() else {
            return Ok(()); // an explicit target, checked before the run
        };
        let exists = match destinations.get(queue) {
            Some(&e) => e,
            None => {
                let e = rabbit::passive_declare(conn, queue)
                    .await
                    .map_err(|e| format!("{e:#}; left in the DLQ"))?
                    .is_some();
                destinations.insert(queue.to_string(), e);
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

/// The queue as it is now (its depth read again); `None` when it is gone.
async fn as_now(conn: &crate::rabbit::Connection, q: &Checked) -> Result<Option<Checked>> {
    let Some(depth) = rabbit::passive_declare(conn, &q.name).await? else {
        return Ok(None);
    };
    let mut now = q.clone();
    // Consumers found lost at the start stay out of the count (see `Checked`).
    let consumers = depth.consumers.saturating_sub(q.lost_consumers);
    now.depth = rabbit::Depth { consumers, ..depth };
    Ok(Some(now))
}

/// How many messages stamped with this run's id are in the DLQs now (a read).
async fn died_again(
    conn: &crate::rabbit::Connection,
    checked: &[Checked],
    replay_id: &str,
) -> Result<u64> {
    Ok(super::follow::died_again(conn, checked, replay_id)
        .await?
        .len() as u64)
}
