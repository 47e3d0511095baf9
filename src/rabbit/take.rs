//! Taking messages from a classic or quorum queue, in queue order, each one held
//! unacknowledged with the handle that acknowledges it. Replay and archive use it to remove
//! exactly the messages they moved or archived; everything else goes back in place when the
//! taker is released (channel close), as a read does (see `reader`).
//!
//! Consumers follow one another, each with a window of credit, as in the reader. Acknowledging
//! a message mid-window gives its consumer more credit, so a consumer is cancelled once it has
//! delivered its window and then drained to its end: what it still delivers before
//! `cancel-ok` comes in order, before the next consumer starts.
//!
//! Each window gets a channel of its own: RabbitMQ finds an acknowledged delivery tag by
//! walking the channel's unacknowledged messages from the oldest, so one channel holding
//! 90,000 skipped messages made every acknowledgement slow (minutes for a 10% selective
//! replay of 100,000). Per-window channels bound that walk to one window.
//!
//! Except on a holding take of a quorum queue (`open_holding`: an archive, a replay's
//! plan), whose windows share a channel until it holds `MAX_WINDOW` kept (skipped)
//! messages: the walk stays as short, and a graceful stop of dlq's node gives the
//! messages back in order. The stopping node closes channels in an order of its own
//! (newest first on 3.10), but gives back one channel's consumers in tag order: an archive
//! of 16,000 with a channel per window came back `8200-10199, 6200-8199, ..., 0-2199,
//! 10200-15999`.
//!
//! Quorum queues are taken by one live consumer instead (`continuous`), cancelled only at
//! the end of the take or once the messages it keeps hold half its credit (and then only
//! after it delivered all of it: `drain_credit`): RabbitMQ (3.10
//! at least) never gives back what a *cancelled* consumer holds when that consumer's node
//! is lost (`rabbit_fifo` returns the messages of `up` consumers only, and re-monitors only
//! those), so a window model that cancels every consumer while its messages are still being
//! moved left ~1,700 messages out of reach after a crash of dlq's node. A live consumer's
//! messages come back at once; acknowledgements only give it credit for the next messages,
//! in queue order.

use super::Connection;
use super::consumer::Deliveries;
use super::reader::{IDLE, ReadSpec, STALL_LIMIT, broker_cancelled, stall_cause, still_ready};
use super::renew::{Kept, Renewal};
use super::topology::GiveBack;
use super::{AckBudget, AckMarks};
use anyhow::{Result, anyhow, bail};
use futures_util::{FutureExt, StreamExt};
use lapin::Channel;
use lapin::message::Delivery;
use lapin::options::{BasicCancelOptions, BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const FIRST_WINDOW: u64 = 200;
/// Kept messages a holding renewing take keeps in memory to copy on release, once its
/// consumers are cancelled (`keep`), in bytes; past this it copies them as it takes.
const DEFER_BYTES: u64 = 64 << 20;
const MAX_WINDOW: u64 = 2_000;
/// The least a window holds, however a paced caller bounds it: each window of a classic
/// queue's take keeps a channel open until the take ends.
const MIN_WINDOW: u64 = 16;
/// Bytes of bodies a window may hold in the client.
const WINDOW_BYTES: u64 = 32 << 20;
/// How long a continuous renewing take waits for a delivery before it settles its copies
/// and acknowledges kept originals (`Taker::next`).
const SETTLE_AFTER: Duration = Duration::from_millis(2);

struct Current {
    consumer: Deliveries,
    got: u64,
    batch: u64,
    /// Messages taken before this consumer started.
    start: u64,
    /// Kept originals acknowledged on its channel while it was live: each gave it one more
    /// credit (`Taker::ack_kept_here`).
    acked: u64,
    cancelled: bool,
    /// What the consumer yielded and `next` has not handed out yet, in order: what `ready`
    /// looked at, and a continuous consumer's last deliveries taken before its cancel
    /// (`drain_credit`). An error or the stream's end is always last.
    ahead: std::collections::VecDeque<Option<lapin::Result<Delivery>>>,
}

impl Current {
    /// Delivered all the credit it had: its window and one more per kept original
    /// acknowledged on its channel.
    fn out_of_credit(&self) -> bool {
        self.got >= self.batch + self.acked
    }
}

/// Whether the current consumer has delivered its window and is to be cancelled: a window
/// consumer once it delivered its batch; a continuous one once kept messages hold half its
/// credit (at the end of the take it stays live until `stop_consuming`).
fn window_done(continuous: bool, kept_here: u64, cur: &Current) -> bool {
    if continuous {
        kept_here * 2 >= cur.batch
    } else {
        cur.out_of_credit()
    }
}

/// Before a live continuous consumer is cancelled: no more acknowledgements on its channel
/// (its budget frozen), and everything its credit still brings taken into `cur.ahead`, up
/// to the `counted` messages it may reach. A cancel with credit left races the deliveries
/// on their way: the broker gives those back (rabbitmq-server#3729) behind what the next
/// consumer already took, and a selective replay of a quorum DLQ without a limit left its
/// kept messages out of order in about half the runs (blocks of 20 to 4,900 at the back).
/// A channel error ends the drain; the cancel after it fails the same way.
async fn drain_credit(
    cur: &mut Current,
    ch: &Channel,
    budget: &AckBudget,
    queue: &str,
    counted: u64,
) -> Result<()> {
    budget.freeze();
    let credit = (cur.batch + budget.sent()).min(counted);
    let mut stalled = Duration::ZERO;
    loop {
        if cur.ahead.back().is_some_and(|n| !matches!(n, Some(Ok(_)))) {
            return Ok(()); // the stream ended, or failed
        }
        if cur.got + cur.ahead.len() as u64 >= credit {
            return Ok(());
        }
        match tokio::time::timeout(IDLE, cur.consumer.next()).await {
            Ok(Some(Ok(d))) => cur.ahead.push_back(Some(Ok(d))),
            // An error or the end, handed out after the deliveries before it.
            Ok(n) => {
                cur.ahead.push_back(n);
                return Ok(());
            }
            // Nothing ready any more: the rest of its credit has nothing to bring.
            Err(_) if !still_ready(ch, queue, &mut stalled, stall_cause(true)).await? => {
                return Ok(());
            }
            Err(_) => {}
        }
    }
}

/// Acknowledges `r`'s kept originals whose copies are confirmed, on each take channel
/// within its budget (`budgets`, as `channels`); the rest wait.
async fn ack_kept_within(
    r: &mut Renewal,
    channels: &[Channel],
    budgets: &[AckBudget],
) -> Result<()> {
    for (i, (ch, budget)) in channels.iter().zip(budgets).enumerate() {
        budget.spend(r.ack_on(i, ch, budget.room()).await?);
    }
    Ok(())
}

/// A continuous consumer's credit for a caller with at most `unsettled` messages
/// unacknowledged: those, and room for the next deliveries. Twice as many where nothing
/// renews; a renewing one holds its last acknowledgements back once its credit reaches its
/// count (see `budget`), so what it takes after that (at most this credit less what is
/// unsettled) is kept small.
fn continuous_credit(unsettled: u64, renews: bool) -> u64 {
    let credit = match renews {
        true => unsettled + 64,
        false => 2 * unsettled + 64,
    };
    credit.min(u64::from(u16::MAX))
}

/// A continuous consumer's credit (`continuous_credit`), at most `ahead` where a paced
/// caller bounds what the take holds ahead (`open_settling`); always more than `unsettled`,
/// or the take would wait on its own caller.
fn credit_within(unsettled: u64, renews: bool, ahead: Option<u64>) -> u64 {
    let credit = continuous_credit(unsettled, renews);
    ahead.map_or(credit, |a| credit.min(a.max(unsettled + 1)))
}

/// The most a window may hold under a paced caller's bound (`open_settling`): that bound,
/// though never under `MIN_WINDOW`; unbounded without one.
fn window_cap(ahead: Option<u64>) -> u64 {
    ahead.map_or(u64::MAX, |a| a.max(MIN_WINDOW))
}

/// The most messages a take for a caller with at most `unsettled` unacknowledged
/// (`Taker::open_settling`, with the same `ahead`) holds ahead of what it moves: a
/// continuous consumer's credit, else a window's largest size; no more than the queue holds.
pub(crate) fn most_held(spec: &ReadSpec, unsettled: u64, ahead: Option<u64>) -> u64 {
    let held = match spec.read_all_to_keep_order() {
        true => credit_within(unsettled, spec.give_back == GiveBack::Renew, ahead),
        false => MAX_WINDOW.min(window_cap(ahead)),
    };
    held.min(spec.ready)
}

pub(crate) struct Taker {
    /// One channel per consumer window (a holding take's windows may share one: see the
    /// module's notes), oldest first; the last one is in use.
    channels: Vec<Channel>,
    /// Deliveries received on each channel (handed out or held beyond the count).
    delivered: Vec<u64>,
    /// Per channel, a delivery tag up to which every delivery is settled by this take
    /// (acknowledged in order from the first): a `multiple` acknowledgement from just after
    /// it settles only what it means to (`Renewal::ack_each`).
    settled: Vec<u64>,
    /// Per channel, the last delivery tag of each window before its last one (a holding
    /// take's windows share a channel): `give_back_in_turn` gives them back one by one, in order.
    window_ends: Vec<Vec<u64>>,
    /// Per channel, the delivery tags of a holding take's kept messages and of what its
    /// caller planned and did not move (`left_unmoved`), given back by nack: never
    /// acknowledged, so a nack may name them (`give_back_parts`).
    kept_tags: Vec<Vec<u64>>,
    queue: String,
    want: u64,
    /// Messages handed out so far.
    pub(crate) taken: u64,
    bytes: u64,
    consumers: u32,
    current: Option<Current>,
    /// Fewer messages than counted at the start were there to take.
    pub(crate) ended_short: bool,
    /// Kept messages are renewed, not given back (opened at the first `keep`).
    renews: bool,
    /// Kept messages are given back with a nack (RabbitMQ 4.3+, which counts a close).
    nacks: bool,
    /// A nack puts a message behind what is ready (`topology::nack_goes_behind`).
    nack_behind: bool,
    /// A cancelled consumer's messages come back if dlq's node is lost (`before_acks`).
    cancelled_given_back: bool,
    /// When the take began, and half the queue's consumer timeout (`ReadSpec::hold_wait`):
    /// `before_acks` cancels only well within it.
    opened: std::time::Instant,
    hold_wait: Duration,
    renewal: Option<Renewal>,
    /// Ready messages at the start, for the renewal's audit record.
    ready: u64,
    /// A quorum queue (or one of unknown type): acknowledgements need `settle_grace_after`.
    quorum: bool,
    /// A quorum queue with a delivery limit (`ReadSpec::limited`).
    limited: bool,
    /// One live consumer for the whole take (quorum queues: see the module's notes), and
    /// its credit.
    continuous: bool,
    credit: u64,
    /// The most a window may hold (`window_cap`).
    window_cap: u64,
    /// Kept messages held (not renewed) on the current window's channel: they use its
    /// credit, so a continuous consumer is cancelled once they hold half of it.
    kept_here: u64,
    /// A holding take's windows on the current channel, and the messages kept on it
    /// (`open_window`).
    windows_here: u32,
    kept_on_channel: u64,
    /// Windows are not cancelled once delivered (`open_holding`): the consumers that
    /// delivered them, live with no credit left, and their channels' indices.
    holding: bool,
    live: Vec<(usize, Deliveries)>,
    /// The consumers `watch_consumers` watches (channel, tag): cancelled before a renewing
    /// take's kept originals are acknowledged on release.
    watched: Vec<(Channel, lapin::types::ShortString)>,
    /// Set when RabbitMQ cancelled a watched consumer (`taken_back`).
    taken_back: Arc<AtomicBool>,
    /// RabbitMQ may take back what a consumer holds with its channel open (a quorum queue's
    /// consumer timeout from 4.3): each consumer is watched for that (`consumer`).
    timeout_cancels: bool,
    /// The caller looks for what it acknowledged in the queue after the release (an
    /// archive's check of the removal): the count after the give-back need not guess.
    removal_checked: bool,
    /// A holding take's kept messages, not copied yet (`keep`), and their bodies' bytes.
    deferred: Vec<Kept>,
    deferred_bytes: u64,
    /// What a renewing plan means to move (`plan_move`), to renew if it moves none of it,
    /// and their bodies' bytes (a budget of their own, `DEFER_BYTES`, so that the kept
    /// messages' deferral is as it was). `None` once one did not fit.
    planned: Option<Vec<Kept>>,
    planned_bytes: u64,
    /// Acknowledgements sent lately, for the wait before the release closes the channels.
    ack_marks: AckMarks,
    /// Each channel's acknowledgement budget (see `budget`), as `channels`.
    budgets: Vec<AckBudget>,
    /// A signal stops the take (`stop_on_signal`).
    signals: Option<crate::signals::Listener>,
}

impl Taker {
    /// Prepares to take at most the ready messages counted in `spec` (so a growing queue
    /// still ends: later arrivals are left for the next run), for a caller that
    /// acknowledges nothing until the take is over and then calls `before_acks` (an
    /// archive, a replay's plan): on a quorum queue, a window's consumer then stays live,
    /// with no credit left, instead of being cancelled while it holds its window (see the
    /// module's notes; a renewing take's kept messages: `ack_kept_here`).
    pub(crate) async fn open_holding(spec: &ReadSpec) -> Result<Taker> {
        let mut t = Self::open_with(spec, None, None)?;
        t.holding = t.quorum;
        Ok(t)
    }

    /// Keeps the consumers `open_holding` left live while the caller acknowledges (where
    /// `before_acks` does not cancel them), so that a crash of dlq's node strands none of
    /// what they hold (see the module's notes). An acknowledgement gives its consumer
    /// credit, which only a message that came into the queue since can use: at the first
    /// such delivery every one of them is cancelled, and what they delivered stays held,
    /// given back on release (a newcomer may then come back ahead of older messages that
    /// were not moved).
    ///
    /// A renewing take too, as long as it copied nothing yet (`keep` defers the copies): a
    /// newcomer given back counts one delivery, which the next run's renewal sets to 0 again.
    /// One that copied kept messages cancels every consumer first: the message after the
    /// last one taken may then be a copy, and the copies delivered before the cancel would be
    /// given back (64 of 6,000, each counted once, measured) at the first acknowledgement.
    async fn watch_consumers(&mut self) {
        if self.renewal.as_ref().is_some_and(|r| r.copied > 0) {
            self.cancel_live().await;
            return;
        }
        let live = std::mem::take(&mut self.live);
        if live.is_empty() {
            return;
        }
        let mut cancels = Vec::new();
        let mut streams = Vec::new();
        for (i, c) in live {
            if let Some(ch) = self.channels.get(i) {
                cancels.push((ch.clone(), c.tag()));
            }
            streams.push(c);
        }
        self.watched = cancels.clone();
        let taken_back = self.taken_back.clone();
        // Each stream ends with `None`: a consumer that ends before dlq cancelled any was
        // cancelled by RabbitMQ.
        let ends = streams
            .into_iter()
            .map(|c| c.map(Some).chain(futures_util::stream::iter([None])));
        tokio::spawn(async move {
            let mut all = futures_util::stream::select_all(ends);
            // A delivery dropped unacknowledged stays held on its channel until the release
            // closes it; the stream drains until then.
            let mut cancelled = false;
            while let Some(item) = all.next().await {
                match item {
                    Some(Ok(_)) if !cancelled => {
                        for (ch, tag) in &cancels {
                            let _ = ch
                                .basic_cancel(tag.clone(), BasicCancelOptions::default())
                                .await;
                        }
                        cancelled = true;
                    }
                    Some(Ok(_)) => {}
                    Some(Err(_)) => break,
                    None if !cancelled => taken_back.store(true, Ordering::SeqCst),
                    None => {}
                }
            }
        });
    }

    /// Before a holding take's caller acknowledges (`open_holding`: an archive what it wrote,
    /// a planned replay what it moves, for `acking`, the caller's estimate). Where a
    /// cancelled consumer's messages come back if dlq's node is lost
    /// (`topology::cancelled_given_back`), every consumer is cancelled first, while none has
    /// credit left, so that no dead letter arriving meanwhile is delivered to it. Left live,
    /// each acknowledgement gave its consumer credit, newcomers came to it, and RabbitMQ
    /// returned those still on their way at the cancel at once, ahead of the kept messages
    /// given back after (4.3.6: 1 to 60 of them, an archive and a planned replay alike).
    ///
    /// Elsewhere they stay live (`watch_consumers`), and so they do unless the take will
    /// have held its messages for less than half the queue's consumer timeout when `acking`
    /// is over (`ReadSpec::hold_wait`: the queue's own, else RabbitMQ's default; a lower
    /// broker-wide `consumer_timeout` is not known here): should the timeout pass
    /// meanwhile, RabbitMQ cancels a live consumer, uncounted (the caller stops:
    /// `taken_back`), but closes a cancelled one's channel, which counts what it held (said
    /// on release: `broker_counted`).
    pub(crate) async fn before_acks(&mut self, acking: Option<Duration>) {
        let early = acking.is_some_and(|a| self.opened.elapsed() + a < self.hold_wait);
        if self.cancelled_given_back && self.renewal.is_none() && early {
            self.cancel_live().await;
        } else {
            self.watch_consumers().await;
        }
    }

    /// Whether RabbitMQ cancelled a consumer this take left live holding messages
    /// (`open_holding`), before `watch_consumers` (checked here) or since (its watch): on
    /// RabbitMQ 4.3 a quorum queue's consumer timeout does, and puts what the consumer held
    /// back in the queue, where acknowledging it does nothing. A live consumer with no credit
    /// left has nothing to deliver; a newcomer delivered since stays held on its channel
    /// until the release.
    pub(crate) fn taken_back(&mut self, conn: &Connection) -> bool {
        self.note_closed_channels(conn);
        let ended =
            |c: &mut Deliveries| matches!(c.next().now_or_never(), Some(None | Some(Err(_))));
        self.live.iter_mut().any(|(_, c)| ended(c)) || self.taken_back.load(Ordering::SeqCst)
    }

    /// What `taken_back` is seen through while the caller moves (a planned replay).
    pub(crate) fn taken_back_flag(&self) -> Arc<AtomicBool> {
        self.taken_back.clone()
    }

    /// Cancels the consumers left live (`open_holding`): what they hold stays held.
    async fn cancel_live(&mut self) {
        for (i, c) in std::mem::take(&mut self.live) {
            if let Some(ch) = self.channels.get(i) {
                let _ = ch
                    .basic_cancel(c.tag(), BasicCancelOptions::default())
                    .await;
            }
        }
    }

    /// For a caller that settles what it takes as it goes, with at most `unsettled`
    /// messages unacknowledged: a quorum queue is then taken by one live consumer whose credit
    /// covers those, and as many kept ones (see the module's notes). `ahead`: the most it may
    /// hold ahead of the caller (a replay paced within a consumer timeout), else unbounded.
    pub(crate) async fn open_settling(
        spec: &ReadSpec,
        unsettled: u64,
        ahead: Option<u64>,
    ) -> Result<Taker> {
        Self::open_with(spec, Some(unsettled), ahead)
    }

    fn open_with(spec: &ReadSpec, unsettled: Option<u64>, ahead: Option<u64>) -> Result<Taker> {
        let continuous = unsettled.is_some() && spec.read_all_to_keep_order();
        let renews = spec.give_back == GiveBack::Renew;
        Ok(Taker {
            channels: Vec::new(),
            delivered: Vec::new(),
            settled: Vec::new(),
            window_ends: Vec::new(),
            kept_tags: Vec::new(),
            queue: spec.queue.clone(),
            want: spec.want(),
            taken: 0,
            bytes: 0,
            consumers: 0,
            current: None,
            ended_short: false,
            renews,
            nacks: spec.give_back == GiveBack::Nack,
            nack_behind: spec.nack_behind,
            cancelled_given_back: spec.cancelled_given_back,
            opened: std::time::Instant::now(),
            hold_wait: spec.hold_wait(),
            renewal: None,
            ready: spec.ready,
            quorum: spec.read_all_to_keep_order(),
            limited: spec.limited,
            continuous,
            credit: unsettled.map_or(0, |u| credit_within(u, renews, ahead)),
            window_cap: window_cap(ahead),
            kept_here: 0,
            windows_here: 0,
            kept_on_channel: 0,
            holding: false,
            live: Vec::new(),
            watched: Vec::new(),
            taken_back: Arc::default(),
            timeout_cancels: spec.timeout_cancels,
            removal_checked: false,
            deferred: Vec::new(),
            deferred_bytes: 0,
            planned: Some(Vec::new()),
            planned_bytes: 0,
            ack_marks: AckMarks::new(),
            budgets: Vec::new(),
            signals: None,
        })
    }

    /// The caller means to move or delete `d` (just returned by `next`): a renewing holding
    /// take keeps what it needs to renew it (up to `DEFER_BYTES` of such messages, beside
    /// what `keep` deferred) in case nothing moves (`nothing_moved`).
    pub(crate) fn plan_move(&mut self, d: &Delivery) {
        if !(self.renews && self.holding) {
            return;
        }
        let size = d.data.len() as u64 + 512;
        let chan = self.channel_index();
        if self.renewal.is_some() || self.planned_bytes + size > DEFER_BYTES {
            self.planned = None;
        } else if let Some(planned) = self.planned.as_mut() {
            self.planned_bytes += size;
            planned.push(Kept::of(chan, d));
        }
    }

    /// The caller moved or deleted nothing of what it planned (a plan declined at the gate,
    /// an archive stopped before it deleted): on release, what it planned is renewed with
    /// what it kept, in take order, rather than given back, which would count a delivery for
    /// each (RabbitMQ 4.0-4.2 with a delivery limit: measured on 4.0.5, a declined plan of
    /// 100 left all of them at delivery count 1). `None`: all of it is renewed; else a note
    /// on what was given back as before (past `DEFER_BYTES`).
    pub(crate) fn nothing_moved(&mut self) -> Option<String> {
        self.renew_planned(|_, _| true)
    }

    /// What the caller planned and did not move (`unmoved(channel, tag)`: a move that
    /// stopped part-way) is renewed on release with what it kept, as `nothing_moved` does;
    /// what moved is acknowledged already and never copied.
    pub(crate) fn renew_planned(&mut self, unmoved: impl Fn(usize, u64) -> bool) -> Option<String> {
        if !(self.renews && self.holding) {
            return None;
        }
        match self.planned.take() {
            Some(planned) if planned.is_empty() => None,
            Some(planned) if self.renewal.is_none() => {
                let left = planned.into_iter().filter(|k| unmoved(k.channel, k.tag));
                self.deferred.extend(left);
                self.deferred.sort_by_key(|k| (k.channel, k.tag));
                None
            }
            _ => Some(format!(
                "{:?}: what dlq meant to move or delete was too large to keep in memory (past {} MiB), so it was given back rather than renewed: each message counts one more delivery toward the delivery limit (a dlq read renews them to 0 again)",
                self.queue,
                DEFER_BYTES >> 20
            )),
        }
    }

    /// What the caller planned and did not move (a move that stopped part-way), each by
    /// channel and delivery tag: held still, like what it kept, for a give-back by nack
    /// one window at a time (`give_back_parts`).
    pub(crate) fn left_unmoved(&mut self, unmoved: impl Iterator<Item = (usize, u64)>) {
        if !(self.nacks && self.holding) {
            return;
        }
        for (chan, tag) in unmoved {
            if let Some(tags) = self.kept_tags.get_mut(chan) {
                tags.push(tag);
            }
        }
        for tags in &mut self.kept_tags {
            tags.sort_unstable();
            tags.dedup();
        }
    }

    /// The plan is answered and the move begins: the move stops on a signal its own way
    /// (`replay::stop_on_signal`). What `plan_move` kept stays, for what does not move
    /// (`renew_planned`).
    pub(crate) fn moving(&mut self) {
        self.signals = None;
    }

    /// The caller will look for what it acknowledged in the queue once the take is
    /// released, and say how many are still there: the release then does not say, from the
    /// queue's count alone, that more came back than it gave back (acknowledgements dropped,
    /// or newcomers). An archive of a DLQ that dead letters kept landing in said that "up
    /// to 226 message(s) that dlq moved, archived or renewed are there twice" when its check
    /// found none of them there.
    pub(crate) fn removal_checked(&mut self) {
        self.removal_checked = true;
    }

    /// From now on a signal makes `next` fail with `error::Interrupted`: for a caller that
    /// gives back what its take holds on an error (an archive, a replay's plan). Without
    /// one listening, a signal ends dlq as its default would, and the broker takes back what
    /// the closed connection held: counted toward a quorum queue's delivery limit, and on
    /// RabbitMQ 4.0 a renewing take's copies left beside their originals.
    pub(crate) fn stop_on_signal(&mut self) {
        self.signals = Some(crate::signals::listen());
    }

    /// After a signal stopped the take (`stop_on_signal`): a quorum queue's take goes on to
    /// the end unseen, keeping everything, so that the release gives back the whole queue in
    /// its order, as an interrupted read does (`ReadSpec::read_all_to_keep_order`; renewed
    /// messages go to the tail, and a partial give-back lands before what was never taken).
    pub(crate) async fn take_rest(&mut self, conn: &Connection) -> Result<()> {
        self.signals = None;
        if !self.quorum || !conn.alive() {
            return Ok(());
        }
        while let Some(d) = self.next(conn).await? {
            self.keep(conn, &d).await?;
        }
        Ok(())
    }

    /// Gives back what this take holds when its caller moved or deleted none of it: what
    /// it meant to is renewed with what it kept (`nothing_moved`); after a signal
    /// (`after_signal`) a quorum take first goes on to its end (`take_rest`). The notes for
    /// the user, in order.
    pub(crate) async fn release_unmoved(
        mut self,
        conn: &Connection,
        after_signal: bool,
    ) -> Vec<String> {
        let mut notes = Vec::new();
        if after_signal && let Err(e) = self.take_rest(conn).await {
            notes.push(format!("taking the rest to give it back in order: {e:#}"));
        }
        notes.extend(self.nothing_moved());
        let held = self.taken;
        notes.extend(self.release(conn, held).await);
        notes
    }

    /// Whether a signal came that stops this take (`stop_on_signal`).
    fn interrupted(signals: &mut Option<crate::signals::Listener>, queue: &str) -> Result<()> {
        if let Some(s) = signals.as_mut()
            && s.came()
        {
            crate::signals::announce(s.seen());
            return Err(crate::error::interrupted(format!(
                "interrupted while taking from {queue:?}"
            )));
        }
        Ok(())
    }

    /// The caller leaves `d` (just returned by `next`) in the queue. Where giving it back would
    /// count toward the delivery limit it is renewed; otherwise the release gives it back.
    /// A holding take copies it only on release, after cancelling its consumers (up to
    /// `DEFER_BYTES` of bodies): until then nothing stands behind what it took but newcomers,
    /// so its consumers can stay live while the caller acknowledges (`watch_consumers`).
    pub(crate) async fn keep(&mut self, conn: &Connection, d: &Delivery) -> Result<()> {
        self.kept_on_channel += 1;
        let chan = self.channel_index();
        if !self.renews {
            self.kept_here += 1;
            if self.holding && self.nacks {
                self.kept_tags[chan].push(d.delivery_tag);
            }
            return Ok(());
        }
        // Headers and properties counted at a rough 512 bytes.
        let size = d.data.len() as u64 + 512;
        if self.holding && self.renewal.is_none() && self.deferred_bytes + size <= DEFER_BYTES {
            self.deferred_bytes += size;
            self.deferred.push(Kept::of(chan, d));
            return Ok(());
        }
        self.open_renewal(conn).await?;
        let r = self.renewal.as_mut().expect("opened above");
        r.copy(chan, d).await;
        if self.holding {
            self.ack_kept_here(false).await?;
            return Ok(());
        }
        // In windows, only originals of cancelled consumers: an ack gives a live one credit
        // beyond its window (see `renew`). A continuous consumer takes that credit as it comes,
        // within its budget.
        if self.continuous {
            self.ack_kept().await?;
        } else if self.current.as_ref().is_none_or(|c| c.cancelled) {
            r.ack_each(&self.channels, &mut self.settled).await?;
        }
        Ok(())
    }

    /// Acknowledges the kept originals whose copies are confirmed, on each channel within
    /// its budget (see `budget`); the rest wait.
    async fn ack_kept(&mut self) -> Result<()> {
        match self.renewal.as_mut() {
            Some(r) => ack_kept_within(r, &self.channels, &self.budgets).await,
            None => Ok(()),
        }
    }

    /// The acknowledgement budget of take channel `channel` (see `budget`), for a caller
    /// that acknowledges on it too.
    pub(crate) fn ack_budget(&self, channel: usize) -> AckBudget {
        self.budgets.get(channel).cloned().unwrap_or_default()
    }

    /// Bounds the live continuous consumer's acknowledgements once copies stand at the tail
    /// (see `budget`).
    fn bound_budget(&self) {
        if let (Some(cur), Some(b)) = (self.current.as_ref(), self.budgets.last())
            && !cur.cancelled
        {
            b.bound((self.want - cur.start).saturating_sub(cur.batch));
        }
    }

    /// The take is over (a continuous one's consumer is still live, so that a crash of
    /// dlq's node gives back what it holds): no acknowledgement gives it credit any more,
    /// and those held back wait for `stop_consuming`. The caller settles its publishes
    /// meanwhile.
    pub(crate) fn freeze(&self) {
        if self.continuous
            && self.current.as_ref().is_some_and(|c| !c.cancelled)
            && let Some(b) = self.budgets.last()
        {
            b.freeze();
        }
    }

    /// The take is over and its publishes settled: a continuous take's live consumer is
    /// cancelled (what it delivered until `cancel-ok` is held, counted, and given back on
    /// release), so that the acknowledgements held back can all go. Done last, because a
    /// cancelled consumer's messages are not given back when dlq's node is lost (see the
    /// module's notes).
    pub(crate) async fn stop_consuming(&mut self) {
        if !self.continuous || self.current.as_ref().is_none_or(|c| c.cancelled) {
            return;
        }
        self.cancel_current().await;
        let Some(cur) = self.current.as_mut() else {
            return;
        };
        let ahead = std::mem::take(&mut cur.ahead);
        let n = ahead.iter().filter(|d| matches!(d, Some(Ok(_)))).count() as u64
            + super::reader::until_cancel_ok(&mut cur.consumer).await;
        cur.got += n;
        if let Some(d) = self.delivered.last_mut() {
            *d += n;
        }
    }

    /// Cancels the current consumer if it is live: what it holds stays held, and
    /// acknowledgements on its channel give it no more credit.
    async fn cancel_current(&mut self) {
        if let Some(cur) = self.current.as_mut().filter(|c| !c.cancelled)
            && let Some(ch) = self.channels.last()
        {
            let _ = ch
                .basic_cancel(cur.consumer.tag(), BasicCancelOptions::default())
                .await;
            cur.cancelled = true;
        }
        if let Some(b) = self.budgets.last() {
            b.lift();
        }
    }

    /// Opens the renewal at its first use, and copies first, in take order, the kept
    /// messages `keep` deferred.
    async fn open_renewal(&mut self, conn: &Connection) -> Result<()> {
        if self.renewal.is_some() {
            return Ok(());
        }
        let r = self
            .renewal
            .insert(Renewal::open(conn, &self.queue, self.ready).await?);
        for kept in std::mem::take(&mut self.deferred) {
            r.copy_kept(kept).await;
        }
        self.deferred_bytes = 0;
        self.bound_budget();
        Ok(())
    }

    /// Gives back by nack what the take holds, or where a nack would go behind what is
    /// ready (`topology::nack_goes_behind`) by closing each channel instead
    /// (`give_back_in_turn`). What to say of the order, if anything.
    async fn give_back_held(
        &mut self,
        conn: &Connection,
        ready: Option<super::Depth>,
        parts: &[Parts],
        held: u64,
    ) -> Option<String> {
        // A channel's windows: its ends, and its last window.
        let in_place =
            |ends: &Vec<u64>| super::settle::closes_in_place(self.nack_behind, ends.len() + 1);
        let close = self.nack_behind && self.window_ends.iter().all(in_place);
        let mut in_order = self.give_back_in_turn(conn, ready, parts, close).await;
        if close {
            return (!in_order).then(|| super::settle::out_of_order_note(&self.queue));
        }
        in_order &= self.all_shown(conn, ready, parts, held).await;
        super::settle::behind_note(&self.queue, self.nack_behind, ready)
            .or_else(|| (!in_order).then(|| super::settle::out_of_order_note(&self.queue)))
    }

    /// Gives back what every take channel holds, every consumer cancelled first: a live
    /// one would be handed what the others give back, for the close to return it counted.
    /// Oldest channel first, each once what the one before it held shows in the queue's
    /// `ready` count (just before, `ready`): otherwise a later channel's could come back
    /// first (on 4.0, the last 91 kept came back ahead of the 1,409 before them in 1 run of
    /// 3). Each channel by nack, in `parts` (`give_back_parts`), or (`close`) by closing it:
    /// a close gives its consumers' messages back in place, in the order they started (32
    /// at most, `settle::closes_in_place`), ahead of what landed meanwhile. Whether each part
    /// showed before the next went.
    async fn give_back_in_turn(
        &mut self,
        conn: &Connection,
        ready: Option<super::Depth>,
        parts: &[Parts],
        close: bool,
    ) -> bool {
        self.cancel_all().await;
        let mut ready = ready.map(|d| d.ready);
        let mut in_order = true;
        let last = self.channels.len().saturating_sub(1);
        for (i, ch) in self.channels.iter().enumerate() {
            let Parts { ends, rest } = &parts[i];
            if close {
                super::close_channel(ch, "dlq: done, every message not moved is given back").await;
            } else {
                let nacked = super::settle::nack_windows(conn, ch, &self.queue, ends, &mut ready);
                match nacked.await {
                    Ok(ordered) => in_order &= ordered,
                    Err(_) => continue,
                }
            }
            // What is left to show, where known: the last window's after its nacks, the
            // channel's after a close (naught only where it holds nothing: a window, or a
            // kept message, counts one at least).
            let left = match close {
                true => rest.map(|r| r + ends.len() as u64),
                false => *rest,
            };
            if i == last || left == Some(0) {
                continue;
            }
            let Some(before) = ready else { continue };
            let n = left.unwrap_or(self.delivered[i]);
            ready = super::settle::shown_back(conn, &self.queue, n, before).await;
            // Unknown: with acknowledgements sent, the rest may be nothing, never to show.
            if left.is_some() && ready.is_none_or(|n| n <= before) {
                (in_order, ready) = (false, None);
            }
        }
        in_order
    }

    /// Where a channel went back in one nack over more windows than the soft limit of 32
    /// commands in flight (`give_back_parts` knew too little): waits until all `held` (and
    /// what came beyond the take) show in the queue, so that the close does not drop the
    /// channel's stash of returns (counted, 4.3.6). Whether the order is surely kept: the
    /// stash goes out newest consumer first.
    async fn all_shown(
        &self,
        conn: &Connection,
        before: Option<super::Depth>,
        parts: &[Parts],
        held: u64,
    ) -> bool {
        let many = |ends: &Vec<u64>| ends.len() as u64 >= super::settle::SOFT_LIMIT;
        let stashed = |(p, ends): (&Parts, &Vec<u64>)| p.rest.is_none() && many(ends);
        if !parts.iter().zip(&self.window_ends).any(stashed) {
            return true;
        }
        let Some(before) = before else { return false };
        let back = held + self.beyond();
        let all = u64::from(before.ready) + back;
        let wait = super::reader::give_back_wait(back);
        let shown =
            super::reader::poll_depth(conn, &self.queue, wait, |d| u64::from(d.ready) >= all);
        let _ = shown.await;
        false
    }

    /// How each take channel goes back (`give_back_in_turn`). One nack over several consumers of a
    /// channel is one return command per consumer, and past 32 in flight the channel stashes
    /// them, sends them newest consumer first, and drops them if it closes first (then
    /// counted, 4.3.6): so a holding take's windows go back one by one, where what each
    /// holds is known. Every window whole when nothing was acknowledged (`whole`); each
    /// window's kept and unmoved messages when exactly those are left (`held`: a selective
    /// archive, a replay stopped part-way); else one nack per channel (`all_shown`).
    fn give_back_parts(&self, whole: bool, held: u64) -> Vec<Parts> {
        let kept: u64 = self.kept_tags.iter().map(|t| t.len() as u64).sum();
        let exact = self.holding && kept == held;
        let parts = |i: usize| {
            let ends = &self.window_ends[i];
            if whole {
                let rest = self.delivered[i] - ends.last().copied().unwrap_or(0);
                return Parts::new(ends.clone(), Some(rest));
            }
            match exact {
                true => Parts::of_kept(ends, &self.kept_tags[i]),
                false => Parts::new(Vec::new(), None),
            }
        };
        (0..self.channels.len()).map(parts).collect()
    }

    /// Cancels every consumer still live: the current one, those left live and those
    /// watched. What they hold stays held.
    async fn cancel_all(&mut self) {
        self.cancel_current().await;
        self.budgets.iter().for_each(AckBudget::lift);
        self.cancel_live().await;
        for (ch, tag) in std::mem::take(&mut self.watched) {
            let _ = ch.basic_cancel(tag, BasicCancelOptions::default()).await;
        }
    }

    /// A holding take's renewed originals (`keep`) are acknowledged only on the current
    /// consumer's channel: the credit each gives it just extends its window, in queue order,
    /// as long as it cannot reach past the messages counted at the start (a copy, a
    /// newcomer). An older consumer, live with no credit, would take the next message out of
    /// order: its kept originals wait until the consumers are cancelled (`release`,
    /// `watch_consumers`). `settle`: wait for every copy's confirm first. How many.
    /// On a channel older windows share (`open_window`) nothing is acknowledged: their
    /// consumers would get the credit.
    async fn ack_kept_here(&mut self, settle: bool) -> Result<u64> {
        let (Some(r), Some(cur)) = (self.renewal.as_mut(), self.current.as_mut()) else {
            return Ok(0);
        };
        if self.windows_here > 1 {
            return Ok(0);
        }
        if settle {
            r.settle().await;
        }
        let room = (self.want - cur.start).saturating_sub(cur.batch + cur.acked);
        let i = self.channels.len() - 1;
        let n = r.ack_on(i, &self.channels[i], room).await?;
        cur.acked += n;
        Ok(n)
    }

    fn window(&self) -> u64 {
        if let Some(w) = super::reader::fixed_window() {
            return w.min(self.window_cap);
        }
        if self.taken == 0 {
            return FIRST_WINDOW.min(self.window_cap);
        }
        let avg = (self.bytes / self.taken).max(256);
        (WINDOW_BYTES / avg)
            .clamp(MIN_WINDOW, MAX_WINDOW)
            .min(self.window_cap)
    }

    /// A new take window: a consumer whose prefetch is the window's size, on a channel of its
    /// own or, for a holding take, on the last one while it may be shared (see the module's
    /// notes). Not once kept messages are renewed: their originals are acknowledged on the
    /// current channel, and an older consumer on it would get the credit.
    async fn open_window(&mut self, conn: &Connection) -> Result<()> {
        let size = if self.continuous {
            self.credit
        } else {
            self.window()
        };
        let batch = size.min(self.want - self.taken).min(u64::from(u16::MAX));
        let share = self.holding
            && self.renewal.is_none()
            && self.kept_on_channel < MAX_WINDOW
            && !self.channels.is_empty();
        if share
            && let (Some(ends), Some(&n)) = (self.window_ends.last_mut(), self.delivered.last())
        {
            // Tags count from 1 on each channel: the last one delivered ends the window.
            ends.push(n);
        }
        if !share {
            self.channels.push(conn.create_channel().await?);
            self.delivered.push(0);
            self.settled.push(0);
            self.window_ends.push(Vec::new());
            self.kept_tags.push(Vec::new());
            self.budgets.push(match self.continuous {
                true => AckBudget::counting(),
                false => AckBudget::unbounded(),
            });
            (self.windows_here, self.kept_on_channel) = (0, 0);
        }
        let ch = self.channels.last().expect("pushed above");
        ch.basic_qos(batch as u16, BasicQosOptions { global: false })
            .await?;
        let consumer = ch
            .basic_consume(
                self.queue.as_str().into(),
                // Zero-padded, as the reader's (see `reader::open_window`).
                format!("dlq-take-{:05}", self.consumers).as_str().into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        let watch = self.timeout_cancels.then(|| self.taken_back.clone());
        let consumer = Deliveries::new(consumer, watch);
        self.consumers += 1;
        self.windows_here += 1;
        self.kept_here = 0;
        self.current = Some(Current {
            consumer,
            got: 0,
            batch,
            start: self.taken,
            acked: 0,
            cancelled: false,
            ahead: std::collections::VecDeque::new(),
        });
        if self.renewal.is_some() {
            self.bound_budget();
        }
        Ok(())
    }

    /// The next message in queue order, or `None` once the counted messages were taken.
    /// Acknowledge it with `delivery.acker`; anything not acknowledged goes back on release.
    pub(crate) async fn next(&mut self, conn: &Connection) -> Result<Option<Delivery>> {
        let next = self.take_next(conn).await;
        if let Err(e) = &next {
            // `release` then asks nothing more of it, nor does the run's publisher.
            conn.note_loss(e);
        }
        // Every 32 deliveries, and at the end: a few channel states read, no round trip.
        if !matches!(next, Ok(Some(_))) || self.taken.is_multiple_of(32) {
            self.note_closed_channels(conn);
        }
        next
    }

    /// Raises `taken_back` when RabbitMQ closed one of this take's channels while the
    /// connection lives (dlq closes them only on release). From 3.12 it does so when a
    /// message held on the channel outlives the consumer timeout, and RabbitMQ 4.3 too for a
    /// consumer dlq had already cancelled: what the channel held goes back to the queue,
    /// where this take meets it again and counts it once more. A selective replay on 4.3.6
    /// that outlived a 5-s timeout met 29 of the messages it kept twice, ended its take short
    /// of 29 it had selected, and reported 121 of 150 replayed with exit 0.
    fn note_closed_channels(&self, conn: &Connection) {
        if conn.alive() && self.channels.iter().any(|c| !c.status().connected()) {
            self.taken_back.store(true, Ordering::SeqCst);
        }
    }

    /// What the channels RabbitMQ closed counted, on a queue with a delivery limit: every
    /// message one held came back one delivery closer to it. At most what they delivered,
    /// and what the take still held (`held`, and what came beyond its count): an
    /// acknowledgement on a closed channel fails, so what moved is not in `held`. A selective
    /// replay on 4.3.6 past a 5-s consumer timeout had one closed (74 delivered there, 161
    /// held in all), and 12 messages came back at delivery count 1, unsaid. A lost
    /// connection counts all the take held where a nack would not have (4.3+; a renewal
    /// says what it did not renew itself, `Renewal::finish`).
    fn broker_counted(&self, conn: &Connection, held: u64) -> Option<String> {
        if !self.limited {
            return None;
        }
        if !conn.alive() {
            let most = held + self.beyond() + self.unpulled();
            let note = || super::reader::lost_counted(&self.queue, most, true);
            return (self.nacks && most > 0).then(note);
        }
        let on_closed: u64 = self
            .channels
            .iter()
            .zip(&self.delivered)
            .filter(|(c, _)| !c.status().connected())
            .map(|(_, &n)| n)
            .sum();
        let most = on_closed.min(held + self.beyond());
        (most > 0).then(|| super::reader::closed_by_broker(&self.queue, most))
    }

    /// The most the current consumer may have been delivered that the take has not pulled
    /// from its stream (`delivered` counts what it pulled): its credit left. A continuous
    /// one's credit is its prefetch, freed by each acknowledgement. A selective replay on
    /// 4.3.6 whose connection was lost held 107, and 183 came back counted.
    fn unpulled(&self) -> u64 {
        match &self.current {
            Some(c) if self.continuous => c.batch,
            Some(c) => (c.batch + c.acked).saturating_sub(c.got),
            None => 0,
        }
    }

    async fn take_next(&mut self, conn: &Connection) -> Result<Option<Delivery>> {
        let q = self.queue.clone();
        loop {
            Taker::interrupted(&mut self.signals, &q)?;
            // A continuous take ends with its consumer live (`stop_consuming`).
            if self.taken >= self.want && (self.continuous || self.current.is_none()) {
                return Ok(None);
            }
            if self.current.is_none() {
                self.open_window(conn).await?;
            }
            if self.holding
                && self
                    .current
                    .as_ref()
                    .is_some_and(|c| c.out_of_credit() && c.ahead.is_empty())
            {
                // Its kept originals' acknowledgements give it more to deliver.
                if self.ack_kept_here(true).await? > 0 {
                    continue;
                }
                // Delivered and out of credit: it stays live (`watch_consumers`).
                let c = self.current.take().expect("checked above");
                self.live.push((self.channels.len() - 1, c.consumer));
                continue;
            }
            let next = self.receive().await?;
            let cur = self.current.as_mut().expect("set above");
            match next {
                None if self.ended_short || cur.cancelled => {
                    self.current = None;
                    if self.ended_short {
                        return Ok(None);
                    }
                }
                None => {
                    bail!("{}", broker_cancelled(&q))
                }
                Some(Err(e)) => return Err(anyhow!(e)),
                Some(Ok(d)) => {
                    cur.got += 1;
                    if let Some(n) = self.delivered.last_mut() {
                        *n += 1;
                    }
                    if self.taken >= self.want {
                        // Beyond the count taken at the start: held, given back on release.
                        continue;
                    }
                    self.taken += 1;
                    self.bytes += d.data.len() as u64;
                    self.ack_marks.tick();
                    return Ok(Some(d));
                }
            }
        }
    }

    /// The current consumer's next delivery, cancelling it first once its window is done;
    /// `None` once it ended, or when the queue has nothing more ready (`ended_short`).
    async fn receive(&mut self) -> Result<Option<lapin::Result<Delivery>>> {
        let cur = self.current.as_mut().expect("a current consumer");
        let ch = self.channels.last().expect("a channel per consumer");
        let budget = self.budgets.last().expect("a budget per channel");
        if window_done(self.continuous, self.kept_here, cur) && !cur.cancelled {
            if self.continuous {
                let counted = self.want - cur.start;
                drain_credit(cur, ch, budget, &self.queue, counted).await?;
            }
            ch.basic_cancel(cur.consumer.tag(), BasicCancelOptions::default())
                .await?;
            cur.cancelled = true;
            budget.lift();
        }
        let mut stalled = Duration::ZERO;
        loop {
            if let Some(n) = cur.ahead.pop_front() {
                return Ok(n);
            }
            // A continuous consumer gets credit back from kept originals only as they
            // are acknowledged (`keep`), which otherwise happens only at the next
            // delivery: with its credit all held by kept messages, none would come.
            // It settles only after 2 ms without one: settling at every momentary gap
            // made a replay selecting 1 in 10 of 20,000 take 1.39 s instead of 1.19 s.
            if self.continuous
                && !cur.cancelled
                && budget.room() > 0
                && let Some(r) = self.renewal.as_mut()
                && r.unacknowledged()
            {
                if let Ok(n) = tokio::time::timeout(SETTLE_AFTER, cur.consumer.next()).await {
                    return Ok(n);
                }
                r.settle().await;
                ack_kept_within(r, &self.channels, &self.budgets).await?;
                continue;
            }
            match tokio::time::timeout(IDLE, cur.consumer.next()).await {
                Ok(n) => return Ok(n),
                Err(_) if cur.cancelled => {
                    // Cancelled: what the broker sent before `cancel-ok` arrives at once.
                    // A stream that never ends must not hold the run forever: anything
                    // still coming stays unacknowledged on this window's channel and is
                    // given back on release.
                    stalled += IDLE;
                    if stalled >= STALL_LIMIT {
                        return Ok(None);
                    }
                }
                Err(_) => {
                    Taker::interrupted(&mut self.signals, &self.queue)?;
                    let why = stall_cause(self.quorum);
                    if !still_ready(ch, &self.queue, &mut stalled, why).await? {
                        self.ended_short = true;
                        self.want = self.taken;
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// Whether `next` would return at once, without waiting for the broker: callers batch
    /// work until it would wait.
    pub(crate) fn ready(&mut self) -> bool {
        let Some(cur) = self.current.as_mut() else {
            return self.taken >= self.want;
        };
        if !cur.ahead.is_empty() || self.continuous && self.taken >= self.want {
            return true;
        }
        if window_done(self.continuous, self.kept_here, cur) && !cur.cancelled {
            return false; // `next` cancels the consumer first: a round trip
        }
        match cur.consumer.next().now_or_never() {
            Some(n) => {
                cur.ahead.push_back(n);
                true
            }
            None => false,
        }
    }

    /// Deliveries beyond the count taken at the start, held and given back on release: on
    /// a renewing take, mostly copies it made itself (`beyond_note`).
    fn beyond(&self) -> u64 {
        self.delivered.iter().sum::<u64>() - self.taken
    }

    /// Which channel the message just returned by `next` came on (for `ack`).
    pub(crate) fn channel_index(&self) -> usize {
        self.channels.len().saturating_sub(1)
    }

    /// Every take channel so far, oldest first (indices as `channel_index`).
    pub(crate) fn channels(&self) -> &[Channel] {
        &self.channels
    }

    /// Acknowledges (removes) one taken message by channel and delivery tag: lighter to keep
    /// than its acker when a whole archive must be on disk before anything is removed.
    pub(crate) async fn ack(&mut self, channel: usize, delivery_tag: u64) -> Result<()> {
        let ch = self
            .channels
            .get(channel)
            .ok_or_else(|| anyhow!("no channel {channel}"))?;
        let sent = super::ack(ch, delivery_tag, false).await;
        sent.map_err(|e| anyhow!("acknowledging a message of {:?}: {e}", self.queue))?;
        if let Some(s) = self
            .settled
            .get_mut(channel)
            .filter(|s| **s + 1 == delivery_tag)
        {
            *s = delivery_tag;
        }
        Ok(())
    }

    /// Acknowledges every delivery on `channel` up to `delivery_tag` at once (one settle
    /// command on a quorum queue instead of one per message).
    pub(crate) async fn ack_through(&mut self, channel: usize, delivery_tag: u64) -> Result<()> {
        let ch = self
            .channels
            .get(channel)
            .ok_or_else(|| anyhow!("no channel {channel}"))?;
        let sent = super::ack(ch, delivery_tag, true).await;
        sent.map_err(|e| anyhow!("acknowledging messages of {:?}: {e}", self.queue))?;
        if let Some(s) = self.settled.get_mut(channel) {
            *s = (*s).max(delivery_tag);
        }
        Ok(())
    }

    /// Acknowledges `tags` (ascending) on `channel`: the run of them from just after what
    /// this take settled there (`settled`) in one `multiple` acknowledgement, the rest one by
    /// one. An archive of the first 100 of 40,000 sent 100 single ones: past the quorum
    /// queue's soft limit of settles in flight, which made dlq wait 10 s before its close.
    pub(crate) async fn ack_tags(&mut self, channel: usize, tags: &[u64]) -> Result<()> {
        let from = self.settled.get(channel).map_or(0, |s| s + 1);
        let run = run_from(from, tags.iter().copied());
        if let Some(&last) = tags[..run].last() {
            self.ack_through(channel, last).await?;
        }
        for &tag in &tags[run..] {
            self.ack(channel, tag).await?;
        }
        Ok(())
    }

    pub(crate) fn queue_name(&self) -> &str {
        &self.queue
    }

    /// A quorum queue (or one of unknown type), where acknowledgements are applied later.
    pub(crate) fn is_quorum(&self) -> bool {
        self.quorum
    }

    /// Opens the renewal for the kept messages `keep` deferred, on a channel still open: a
    /// closed channel's messages are back in the queue already, where a copy would be a
    /// second one, its original beyond acknowledging. What the user must hear if it failed.
    async fn renew_deferred(&mut self, conn: &Connection) -> Option<String> {
        let open = |k: &Kept| {
            self.channels
                .get(k.channel)
                .is_some_and(|c| c.status().connected())
        };
        let deferred = std::mem::take(&mut self.deferred);
        self.deferred = deferred.into_iter().filter(open).collect();
        if self.deferred.is_empty() {
            return None;
        }
        let e = self.open_renewal(conn).await.err()?;
        Some(format!(
            "{:?}: {} kept message(s) were given back instead of renewed: {e:#}",
            self.queue,
            self.deferred.len()
        ))
    }

    /// Gives back everything not acknowledged (channel close: original positions) and waits
    /// briefly until `held` messages are ready again (a quorum queue requeues asynchronously).
    /// The kept messages of a renewing take are renewed first; returns what the user must hear
    /// of that.
    pub(crate) async fn release(mut self, conn: &Connection, held: u64) -> Vec<String> {
        let mut notes = Vec::new();
        // Nothing acknowledged: every window goes back whole (`give_back_parts`).
        let whole = held >= self.taken;
        let parts = self.give_back_parts(whole, held);
        let mut held = held;
        notes.extend(self.broker_counted(conn, held));
        // Before dlq's own cancels, which end the consumers' streams too.
        let taken_back = self.taken_back(conn);
        // Every consumer cancelled first: no copy may reach one with credit, and
        // acknowledging kept originals must not give one credit.
        if self.renewal.is_some() || !self.deferred.is_empty() {
            self.cancel_all().await;
        }
        notes.extend(self.renew_deferred(conn).await);
        // How long the broker took to confirm the copies.
        let mut confirms = Duration::ZERO;
        if let Some(mut r) = self.renewal.take() {
            let started = std::time::Instant::now();
            r.settle().await;
            confirms = started.elapsed();
            let acked = r.ack_each(&self.channels, &mut self.settled).await;
            held = held.saturating_sub(r.renewed());
            let copied = r.copied;
            let lost = !conn.alive();
            notes.extend(r.finish(copied, 0, lost.then_some(0), acked.err().as_ref()));
            let beyond = self.beyond();
            if beyond > 0 {
                notes.push(beyond_note(&self.queue, beyond, lost));
            }
        }
        // A lost connection settles nothing more and its channels' messages are back
        // already: no grace (up to 10 s), no count.
        let alive = conn.alive();
        if alive && self.quorum && held < self.taken {
            // Every acknowledgement sent lately, the caller's and `next`'s too.
            super::settle_grace_after(self.ack_marks.recent(), confirms).await;
        }
        let ready_before = match alive {
            true => super::reader::ready_now(conn, &self.queue).await,
            false => None,
        };
        // After the grace, so that the acknowledgements are applied first (a nack sent
        // behind them may wait in the channel, likely how one channel's overtook another's).
        // What was delivered beyond the take too: a stopped replay's consumer had up to its
        // credit delivered and not taken, and the close counted each (4.3.6: 191 of 3,000
        // at `--rate 200`, 1,984 without, after a Ctrl-C once 300-400 had moved).
        if alive && self.nacks && held + self.beyond() > 0 {
            let said = self.give_back_held(conn, ready_before, &parts, held).await;
            // What RabbitMQ took back was said, and put the queue out of order already.
            notes.extend(said.filter(|_| !taken_back));
        }
        // Oldest first: a quorum queue appends returned messages in the order they come back.
        for ch in &self.channels {
            super::close_channel(ch, "dlq: done, every message not moved is given back").await;
        }
        // The count after includes the deliveries beyond the take.
        let back = held + ready_before.map_or(0, |_| self.beyond());
        // What RabbitMQ took back is in the queue already, and how much of `held` that
        // was is unknown: the count would report a shortfall that is not there (all 20,000
        // of an archive "not ready again", on 4.3.6). The caller says what happened.
        if alive && !taken_back {
            // A quorum queue's channel may drop acknowledgements as it closes.
            let acked = self.quorum && !self.removal_checked;
            let after =
                super::reader::after_give_back(conn, &self.queue, ready_before, back, acked);
            notes.extend(after.await);
        }
        notes
    }
}

/// Why a replay stopped when RabbitMQ took back what its take held (`moved`: after some had
/// moved, whose acknowledgements may have done nothing; `planned`: held for a plan).
pub(crate) fn taken_back_note(moved: bool, planned: bool) -> String {
    let what = match moved {
        false => "nothing was moved",
        true => "what moved since may be in the DLQ again too (its acknowledgement did nothing)",
    };
    // A streamed take's consumer holds its credit (2 x window + 64, `continuous_credit`)
    // ahead of the publishes, each held that long under --rate.
    let advice = match planned {
        true => {
            "run dlq again, and answer sooner; a plan holds every message until it moves it, so a long one also needs a higher --rate or a smaller --limit"
        }
        false => {
            "run dlq again: under --rate a message is held for up to (2 x window + 64) / rate seconds (dlq fits that to the consumer timeout: a DLQ's own, else the broker's where RabbitMQ 4 reports it), so use a smaller --window or a higher --rate; a selective replay also holds what it leaves in the DLQ until its take ends, so a higher --rate or a --limit fits"
        }
    };
    format!(
        "RabbitMQ took back the messages dlq held, cancelling its consumer or closing its channel: a consumer timeout (the queue's x-consumer-timeout, a policy's consumer-timeout, else the broker's consumer_timeout, 30 min by default) puts what a consumer held longer back in the queue (deleting the DLQ also cancels the consumer). {what}; {advice}"
    )
}

/// One take channel's give-back (`Taker::give_back_parts`): a `multiple` nack up to each of
/// `ends`, one window's messages each, then the rest (`rest` of them, where known).
struct Parts {
    ends: Vec<u64>,
    rest: Option<u64>,
}

impl Parts {
    fn new(ends: Vec<u64>, rest: Option<u64>) -> Parts {
        Parts { ends, rest }
    }

    /// A channel whose windows end at `ends` (each's last delivery tag, the channel's last
    /// window excepted), with only `kept` (ascending) left unacknowledged: a nack up to the
    /// last kept tag of each window that kept any (a tag acknowledged already is unknown to
    /// the channel, and a nack of it closes the channel), then those of the last window.
    fn of_kept(ends: &[u64], kept: &[u64]) -> Parts {
        let mut out = Vec::new();
        let mut rest = kept;
        for &end in ends {
            let n = rest.partition_point(|&t| t <= end);
            out.extend(rest[..n].last());
            rest = &rest[n..];
        }
        Parts::new(out, Some(rest.len() as u64))
    }
}

/// What a renewing take says of the messages delivered past its count: the consumer's credit
/// reached the copies it had put at the tail (or newcomers) before its cancel took effect.
/// The acknowledgement budget (`budget`) keeps a streamed replay's credit within its count
/// (before it: 1,224–2,074 of 3,000 kept, every run); what is left is a window consumer's,
/// or messages another consumer took from under the count. `lost`: a lost connection gave
/// them back, which did not always count (`Renewal::finish`).
fn beyond_note(queue: &str, n: u64, lost: bool) -> String {
    let count = match lost {
        true => "may be 1",
        false => "is 1",
    };
    format!(
        "{queue:?}: {n} of those copies (or messages that arrived since) reached dlq's consumer before it stopped and were given back: their delivery count {count}, not 0 (the next read renews them again), and a quorum queue puts them back ahead of the rest, not always in order"
    )
}

/// How many of `tags`' first are `from`, `from + 1`, ...: the run a `multiple`
/// acknowledgement may settle when every tag before `from` is settled.
pub(super) fn run_from(from: u64, tags: impl Iterator<Item = u64>) -> usize {
    tags.zip(from..).take_while(|(t, want)| t == want).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_multiple_acknowledgement_covers_only_a_run_from_what_is_settled() {
        let run = |from, tags: &[u64]| run_from(from, tags.iter().copied());
        assert_eq!(run(1, &[1, 2, 3, 5]), 3);
        assert_eq!(run(101, &[101, 102]), 2);
        // A gap: tag 3 may be a moved message's, or one whose copy failed.
        assert_eq!(run(1, &[1, 2, 4]), 2);
        // Tag 1 not settled (moved elsewhere, or held): nothing in one go.
        assert_eq!(run(1, &[2, 3]), 0);
        assert_eq!(run(0, &[1, 2]), 0);
    }

    #[test]
    fn kept_messages_go_back_one_window_at_a_time_up_to_a_tag_still_held() {
        // Windows 1-16, 17-32, 33-48 and the last from 49; nothing kept in the second.
        let p = Parts::of_kept(&[16, 32, 48], &[3, 16, 40, 41, 50]);
        assert_eq!((p.ends, p.rest), (vec![16, 41], Some(1)));
        let p = Parts::of_kept(&[16], &[2]);
        assert_eq!((p.ends, p.rest), (vec![2], Some(0)));
        let p = Parts::of_kept(&[], &[]);
        assert_eq!((p.ends, p.rest), (vec![], Some(0)));
    }

    #[test]
    fn a_paced_take_holds_no_more_than_its_caller_allows() {
        assert_eq!(credit_within(64, false, None), 192);
        assert_eq!(credit_within(64, true, None), 128);
        assert_eq!(credit_within(22, false, Some(45)), 45);
        assert_eq!(credit_within(22, true, Some(45)), 45);
        // Never at or below what the caller leaves unsettled: the take would wait on it.
        assert_eq!(credit_within(30, false, Some(10)), 31);
        assert_eq!(credit_within(1, false, Some(1_000)), 66);
    }
}
