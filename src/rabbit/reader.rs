//! Reading a queue without changing it.
//!
//! Classic and quorum queues (AMQP 0-9-1 has no browse):
//! * Count the ready messages first (passive declare) and read at most that many, so a
//!   DLQ that keeps growing still ends.
//! * Consume with manual acknowledgement and hold every delivery unacknowledged. Only the
//!   channel keeps the delivery tags; bodies leave memory as soon as the record is handed
//!   on, so memory stays flat however long the queue is.
//! * Prefetch is per consumer and a 16-bit number, so a long queue is read by a sequence of
//!   consumers on one channel: each gets a window of W messages, and only once it has
//!   received all W (it has no credit left) is it cancelled and the next one started.
//!   Deliveries therefore arrive in queue order across consumers, past 65,535 too. W
//!   adapts to the message size (about 32 MiB in flight).
//! * At the end (or when the command stops early) the channel is closed, which gives every
//!   held message back: a classic queue puts each back in its original position; a quorum
//!   queue appends them, in order, to the list it serves first, so dlq holds every ready
//!   message of a quorum queue before closing, even when the command needed fewer (see
//!   `ReadSpec::read_all_to_keep_order`). An explicit `basic.nack(requeue)` is not used:
//!   on RabbitMQ 3.10 it sends quorum messages to the back of the queue. A close counts
//!   toward a quorum queue's delivery limit on every version, hence `read_verdict`.
//!
//! Streams are read by offset (`x-stream-offset=first`, prefetch, manual ack) and never
//! change. The last offset at the start is found first by reading from `last`, so a
//! growing stream still ends.

use super::Checked;
use super::Connection;
use super::codec::{delivery_count, stream_offset};
use super::renew::Renewal;
use super::reported::ReportedTimeouts;
use super::topology::{
    GiveBack, QueueKind, ReadVerdict, delivery_limited, give_back_counts, read_verdict,
    timeout_cancels,
};
use crate::signals::Finishing;
use anyhow::{Result, anyhow, bail};
use futures_util::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicQosOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel};
use std::time::Duration;
use tokio::sync::mpsc;

/// First consumer window, before the message size is known.
const FIRST_WINDOW: u64 = 200;
const MIN_WINDOW: u64 = 16;
const MAX_WINDOW: u64 = 4_000;
/// A renewing read's one consumer's prefetch (see `consume_renewing`): half of it is
/// delivered while the other half's copies are confirmed.
const RENEW_CREDIT: u64 = 2_000;
/// Bytes of message bodies a window may hold: bounds the client's buffer.
const WINDOW_BYTES: u64 = 32 << 20;
/// Reads of at least this many messages poll lapin every `POLL_PAUSE` (see `poll_pause`).
const PAUSE_FROM: u64 = 1_000;
const POLL_PAUSE: Duration = Duration::from_millis(2);
/// Quiet time after which dlq asks whether anything is still ready.
pub(super) const IDLE: Duration = Duration::from_secs(1);
/// Messages ready but none delivered for this long: something else takes them.
pub(super) const STALL_LIMIT: Duration = Duration::from_secs(30);
/// Messages ready but none delivered for this long: dlq says so while it waits on.
const STALL_NOTICE: Duration = Duration::from_secs(5);
/// How long to wait for given-back messages to be ready again.
const GIVE_BACK_WAIT: Duration = Duration::from_secs(2);
/// Stream prefetch (credit), acknowledged in halves.
const STREAM_PREFETCH: u16 = 1000;
/// The last chunk of a stream arrives in one burst; a gap this long ends it.
const LAST_CHUNK_IDLE: Duration = Duration::from_millis(300);
/// A stream that goes quiet this long before its last offset ends the read.
const STREAM_IDLE: Duration = Duration::from_secs(5);
/// RabbitMQ's default `consumer_timeout`, for a queue without one of its own.
const DEFAULT_CONSUMER_TIMEOUT_MS: u64 = 30 * 60 * 1000;

/// What to read.
#[derive(Debug, Clone)]
pub(crate) struct ReadSpec {
    pub(crate) queue: String,
    pub(crate) kind: QueueKind,
    /// Ready messages when the read started (passive declare).
    pub(crate) ready: u64,
    /// Read at most this many (a `list` sample).
    pub(crate) max: Option<u64>,
    /// The quorum delivery limit, when giving messages back counts toward it.
    pub(crate) counted_limit: Option<i64>,
    /// A quorum queue with a delivery limit, however dlq gives back: a lost connection or
    /// a channel RabbitMQ closes counts what it held.
    pub(crate) limited: bool,
    /// Quorum queue where a return adds to the delivery count.
    pub(crate) counts_returns: bool,
    /// How held messages go back (`topology::read_verdict`; `--force` reads risky
    /// queues by closing).
    pub(crate) give_back: GiveBack,
    /// RabbitMQ may take back what dlq holds with the channel open (`topology::timeout_cancels`).
    pub(crate) timeout_cancels: bool,
    /// A nack puts a message behind what is ready (`topology::nack_goes_behind`).
    pub(crate) nack_behind: bool,
    /// A cancelled consumer's messages come back if dlq's node is lost
    /// (`topology::cancelled_given_back`).
    pub(crate) cancelled_given_back: bool,
    /// The queue's own consumer timeout in milliseconds (`topology::consumer_timeout`).
    pub(crate) consumer_timeout: Option<u64>,
    /// What the broker reports of it, the broker's own included (`with_reported`).
    pub(crate) reported: ReportedTimeouts,
}

impl ReadSpec {
    pub(crate) fn for_checked(c: &Checked, max: Option<u64>) -> ReadSpec {
        let give_back = match read_verdict(&c.name, &c.facts, c.depth.consumers) {
            ReadVerdict::Safe(g) => g,
            ReadVerdict::Risky(_) => GiveBack::Close,
        };
        // Closing the channel adds to a quorum message's delivery count; a nack before 4.3.
        let counts_returns = give_back_counts(&c.facts, give_back);
        ReadSpec {
            queue: c.name.clone(),
            kind: c.facts.kind,
            ready: u64::from(c.depth.ready),
            max,
            counted_limit: c.facts.delivery_limit.filter(|_| counts_returns),
            limited: delivery_limited(&c.facts),
            counts_returns,
            give_back,
            timeout_cancels: timeout_cancels(&c.facts),
            nack_behind: super::topology::nack_goes_behind(&c.facts),
            cancelled_given_back: super::topology::cancelled_given_back(&c.facts),
            consumer_timeout: c.facts.consumer_timeout,
            reported: ReportedTimeouts::default(),
        }
    }

    /// This spec, learning the consumer timeout the broker reports (`hold_wait`) through
    /// `conn`'s management API.
    pub(crate) fn with_reported(self, conn: &Connection) -> ReadSpec {
        ReadSpec {
            reported: conn.reported_timeouts(),
            ..self
        }
    }
}

impl ReadSpec {
    /// How many messages the read takes: those ready at its start, at most `max`.
    pub(crate) fn want(&self) -> u64 {
        self.max.map_or(self.ready, |m| m.min(self.ready))
    }

    /// A quorum queue puts given-back messages at the end of its "returns" list, which it
    /// serves before never-delivered messages. Giving back only a prefix of the queue
    /// therefore reorders it once earlier reads have put messages there (seen on RabbitMQ
    /// 3.10: a second `inspect --limit 3` moved the first window to the back). Holding
    /// every message that was ready at the start empties that list, so the give-back
    /// restores the order exactly. A queue of unknown type is treated the same way.
    pub(crate) fn read_all_to_keep_order(&self) -> bool {
        matches!(self.kind, QueueKind::Quorum | QueueKind::Unknown)
    }

    /// How long a read may hold what it took while its receiver does not take records:
    /// half the consumer timeout (the queue's own, or what the broker reports for its
    /// consumers, which includes the broker's own `consumer_timeout`; else RabbitMQ's
    /// default), counted from the delivery of the oldest message held (`send_within_hold`).
    /// Past the timeout RabbitMQ takes back what dlq holds, and RabbitMQ 4.0-4.2 do so by
    /// closing dlq's channel, which counts a delivery: measured on 4.0.5 with a 2-s
    /// `x-consumer-timeout`, a renewing read of 5,000 whose output waited 75 s left 2,000 at
    /// delivery count 1 and 1,000 in the queue twice. Asks the broker (in the background)
    /// while it has not reported.
    pub(crate) fn hold_wait(&self) -> Duration {
        let reported = self.reported.of(&self.queue);
        let ms = super::topology::smaller(self.consumer_timeout, reported)
            .unwrap_or(DEFAULT_CONSUMER_TIMEOUT_MS);
        Duration::from_millis(ms / 2)
    }

    /// The consumer timeout dlq knows for this queue, without asking (for messages).
    fn known_timeout(&self) -> Option<u64> {
        super::topology::smaller(self.consumer_timeout, self.reported.known(&self.queue))
    }
}

/// What happened during a read.
#[derive(Debug, Clone, Default)]
pub(crate) struct ReadReport {
    pub(crate) read: u64,
    /// Delivered to a window the read stopped taking from, not read: held too.
    unread: u64,
    /// The command stopped taking records (e.g. `--limit` reached).
    pub(crate) receiver_gone: bool,
    /// Fewer messages than counted at the start were there to read.
    pub(crate) ended_short: bool,
    pub(crate) max_delivery_count: Option<i64>,
    /// Given back at exactly the delivery limit: the next return drops them.
    pub(crate) now_at_limit: u64,
    /// Given back past the delivery limit: the broker dropped or re-dead-lettered them.
    pub(crate) pushed_over: u64,
    /// What a renewal (`GiveBack::Renew`) or the give-back did, for the user.
    pub(crate) renewal_notes: Vec<String>,
    /// When the read's first message was delivered (see `ReadSpec::hold_wait`).
    started: Option<std::time::Instant>,
    /// A renewing read's consumer's credit: it acknowledges as it goes, so its consumer
    /// timeout counts from a later delivery (`Renewal::held_since`).
    renew_credit: Option<u64>,
    /// The receiver took no record within `hold_wait`: how many it had been sent, and that
    /// wait.
    output_stalled: Option<(u64, Duration)>,
    /// The signals seen when the read started (`signals::listen_since`), and whether one
    /// came since: the read then stops showing and gives back as when its receiver is gone.
    signals_at: u64,
    /// How many records it had sent on when the signal came.
    interrupted: Option<u64>,
    /// The credit the last window's consumer had left when the read ended in it: what it
    /// may have been delivered and the read never pulled from its stream.
    window_left: u64,
}

impl ReadReport {
    fn note_delivery_count(&mut self, count: Option<i64>, limit: Option<i64>) {
        let c = count.unwrap_or(0);
        self.max_delivery_count = Some(self.max_delivery_count.map_or(c, |m| m.max(c)));
        if let Some(l) = limit {
            // Giving the message back makes its count c + 1.
            if c + 1 > l {
                self.pushed_over += 1;
            } else if c + 1 == l {
                self.now_at_limit += 1;
            }
        }
    }

    /// What the user must hear about this read.
    pub(crate) fn warnings(&self, q: &Checked) -> Vec<String> {
        let limit = q.facts.delivery_limit.unwrap_or_default();
        let mut w = self.give_back_notes(&q.name, limit);
        if self.ended_short && !self.receiver_gone {
            w.push(format!(
                "{:?}: read {} message(s), fewer than the {} present at the start: another consumer took the rest, or they expired, meanwhile",
                q.name, self.read, q.depth.ready
            ));
        }
        w
    }

    /// A renewing read that stopped before it read all `want`: the most its consumer may
    /// have been delivered that dlq had not read, given back with the rest, counted. It is
    /// delivered at most `acked + credit` (`consume_renewing`). A read of 20,000 whose
    /// connection was closed after 5,000 shown (3.10.8 and 4.0.5) had read 1,000 it had not
    /// renewed, and 2,000 came back counted, the renewal saying 1,000.
    fn unread_at_most(&self, want: u64, acked: u64) -> u64 {
        let Some(credit) = self.renew_credit.filter(|_| self.read < want) else {
            return 0;
        };
        (acked + credit).min(want).saturating_sub(self.read)
    }

    /// What the give-back did to the messages' delivery counts (`limit`: the queue's), for
    /// the user whether the read ended well or not.
    fn give_back_notes(&self, queue: &str, limit: i64) -> Vec<String> {
        let mut w = self.renewal_notes.clone();
        if self.pushed_over > 0 {
            w.push(format!(
                "{} message(s) of {queue:?} had already been delivered {limit} time(s) or more: giving them back pushed them over the delivery limit {limit}, so the broker dropped them or dead-lettered them again",
                self.pushed_over
            ));
        }
        if self.now_at_limit > 0 {
            w.push(format!(
                "{} message(s) of {queue:?} are now at the delivery limit {limit}: the next read or failed delivery drops them",
                self.now_at_limit
            ));
        }
        w
    }

    /// How many records the read sent on (fewer than it read once its output stalled, or a
    /// signal stopped it).
    fn shown(&self) -> u64 {
        let stalled = self.output_stalled.map(|(sent, _)| sent);
        stalled.or(self.interrupted).unwrap_or(self.read)
    }

    /// The error of a read that stopped sending records because its receiver took none for
    /// `ReadSpec::hold_wait` (its output unread): it read on to the end unseen, and gave
    /// everything back, rather than hold the queue past its consumer timeout.
    pub(crate) fn stall_error(&self, q: &str) -> Option<anyhow::Error> {
        let (sent, hold) = self.output_stalled?;
        let what = format!("{q:?} after {sent} message(s)");
        Some(output_stalled(&what, hold))
    }
}

/// The error of a command that stopped writing `what` because nobody read its output while
/// it held a DLQ's messages for `hold`, half of their consumer timeout (`ReadSpec::hold_wait`).
pub(crate) fn output_stalled(what: &str, hold: Duration) -> anyhow::Error {
    anyhow!(
        "dlq stopped showing {what}: its output was not read while dlq held the queue's messages for {} s, half of their consumer timeout, past which RabbitMQ takes back what a consumer holds (RabbitMQ 4.0-4.2 by closing its channel, which counts a delivery toward the delivery limit and leaves messages dlq had renewed in the queue twice). dlq gave every message back, having read on to the end unseen where the queue's order needed it; write a large output to a file first (-o ndjson > file) rather than into a pager",
        hold.as_secs_f64()
    )
}

/// `wait`, given until `hold()` has passed since `started` (`ReadSpec::hold_wait`); `None`
/// once it has. `hold` is asked again every second: it shortens once the broker reports a
/// consumer timeout shorter than RabbitMQ's default.
pub(crate) async fn within_hold<F: std::future::Future>(
    started: std::time::Instant,
    hold: impl Fn() -> Duration,
    wait: F,
) -> Option<F::Output> {
    const RECHECK: Duration = Duration::from_secs(1);
    tokio::pin!(wait);
    loop {
        let left = hold().saturating_sub(started.elapsed());
        if left.is_zero() {
            return None;
        }
        if let Ok(done) = tokio::time::timeout(left.min(RECHECK), &mut wait).await {
            return Some(done);
        }
    }
}

/// Turns one delivered message (queue, exchange, routing key, properties, body) into what
/// the caller wants: a full record, or just what a `list` sample needs.
pub(crate) type Make<T> = dyn Fn(&str, &str, &str, &BasicProperties, &[u8]) -> T + Send + Sync;

/// The queue's depth once the consumers it had beyond those counted when it was checked are
/// gone (at most 5 s): the broker gives back what a closed or lost channel held when it
/// removes that channel's consumers (seen on RabbitMQ 4.0 right after a connection was closed
/// from the management API). `after_loss`: dlq's own connection was lost, and the queue must
/// also have that many ready, then hold its ready count still for `SETTLED`: a channel
/// whose consumer was cancelled (a finished window) has no consumer to wait for, and the
/// broker gives its messages back only when it closes that channel. Also whether all of that
/// held in time.
async fn until_given_back(
    conn: &Connection,
    q: &Checked,
    after_loss: Option<u64>,
) -> Result<Option<(super::Depth, bool)>> {
    const LIMIT: Duration = Duration::from_secs(5);
    const SETTLED: Duration = Duration::from_millis(500);
    let deadline = tokio::time::Instant::now() + LIMIT;
    let others = q.depth.consumers.saturating_add(q.lost_consumers);
    let floor = after_loss.unwrap_or(0);
    let back = |d: &super::Depth| d.consumers <= others && u64::from(d.ready) >= floor;
    let Some(depth) = poll_depth(conn, &q.name, LIMIT, back).await? else {
        return Ok(None);
    };
    let all_back = back(&depth);
    if after_loss.is_none() || !all_back {
        return Ok(Some((depth, all_back)));
    }
    let still = std::cell::Cell::new((depth.ready, tokio::time::Instant::now()));
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    let settled = poll_depth(conn, &q.name, left, |d| {
        let (ready, since) = still.get();
        if d.ready != ready {
            still.set((d.ready, tokio::time::Instant::now()));
        }
        since.elapsed() >= SETTLED && d.ready == ready
    })
    .await?;
    Ok(settled.map(|d| (d, all_back)))
}

/// Polls `queue`'s depth (a passive declare) until `done` holds or `limit` has passed: the
/// last depth seen, or `None` if the queue is gone.
pub(super) async fn poll_depth(
    conn: &Connection,
    queue: &str,
    limit: Duration,
    done: impl Fn(&super::Depth) -> bool,
) -> Result<Option<super::Depth>> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let Some(depth) = super::passive_declare(conn, queue).await? else {
            return Ok(None);
        };
        if done(&depth) || tokio::time::Instant::now() >= deadline {
            return Ok(Some(depth));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// What `find_in_queue` found.
pub(crate) struct Found {
    pub(crate) keys: Vec<String>,
    /// Everything a closed connection held looked back before the read (see
    /// `until_given_back`); when not, a key not found may still come back.
    pub(crate) all_back: bool,
}

/// Which of `keys` are in the queue now (each as often as listed), by `key_of` over each
/// message: a non-destructive read of the whole queue, by the same rules as `inspect`, once
/// what a closed connection held is back (`after_loss`: see `until_given_back`).
pub(crate) async fn find_in_queue(
    conn: &Connection,
    q: &Checked,
    keys: Vec<String>,
    key_of: fn(&lapin::BasicProperties, &[u8]) -> String,
    after_loss: Option<u64>,
) -> Result<Found> {
    let Some((depth, all_back)) = until_given_back(conn, q, after_loss).await? else {
        return Ok(Found {
            keys: Vec::new(),
            all_back: true,
        });
    };
    let mut wanted: std::collections::HashMap<String, u64> = Default::default();
    for k in keys {
        *wanted.entry(k).or_default() += 1;
    }
    let mut now = q.clone();
    now.depth = depth;
    let spec = ReadSpec::for_checked(&now, None);
    let (tx, mut rx) = mpsc::channel(256);
    let make = move |_: &str, _: &str, _: &str, p: &lapin::BasicProperties, b: &[u8]| key_of(p, b);
    let read = async {
        let r = read_queue(conn, &spec, &make, &tx).await;
        drop(tx);
        r
    };
    let found = async {
        let mut found = Vec::new();
        while let Some(Ok(key)) = rx.recv().await {
            if let Some(n) = wanted.get_mut(&key).filter(|n| **n > 0) {
                *n -= 1;
                found.push(key);
            }
        }
        found
    };
    let (r, keys) = tokio::join!(read, found);
    r?;
    Ok(Found { keys, all_back })
}

/// Reads one queue, sending `make`'s result per message to `tx`, and gives everything back.
pub(crate) async fn read_queue<T: Send>(
    conn: &Connection,
    spec: &ReadSpec,
    make: &Make<T>,
    tx: &mpsc::Sender<Result<T>>,
) -> Result<ReadReport> {
    read_queue_on(conn, None, spec, make, tx).await
}

/// Like `read_queue`, reading a classic or quorum queue on `channel` when given (one
/// round trip less per queue for `list`). The channel is closed at the end.
pub(crate) async fn read_queue_on<T: Send>(
    conn: &Connection,
    channel: Option<Channel>,
    spec: &ReadSpec,
    make: &Make<T>,
    tx: &mpsc::Sender<Result<T>>,
) -> Result<ReadReport> {
    match spec.kind {
        QueueKind::Stream => {
            if let Some(ch) = channel {
                let _ = ch.close(200, "not needed".into()).await;
            }
            read_stream(conn, spec, make, tx).await
        }
        _ => read_fifo(conn, channel, spec, make, tx).await,
    }
}

/// A consumer window fixed by `DLQ_READ_WINDOW`, for reads and takes: tests use it to cross
/// many consumer boundaries with few messages.
pub(super) fn fixed_window() -> Option<u64> {
    std::env::var("DLQ_READ_WINDOW")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|w| (1..=65_535).contains(w))
}

/// The consumer window: `fixed_window`, else sized so a window holds about `WINDOW_BYTES`.
fn window(bytes: u64, messages: u64) -> u64 {
    if let Some(w) = fixed_window() {
        return w;
    }
    if messages == 0 {
        return FIRST_WINDOW;
    }
    let avg = (bytes / messages).max(256);
    (WINDOW_BYTES / avg).clamp(MIN_WINDOW, MAX_WINDOW)
}

async fn read_fifo<T: Send>(
    conn: &Connection,
    channel: Option<Channel>,
    spec: &ReadSpec,
    make: &Make<T>,
    tx: &mpsc::Sender<Result<T>>,
) -> Result<ReadReport> {
    let spec = &spec.clone().with_reported(conn);
    // Listening for the whole read: a signal stops it, and it gives back what it holds.
    let listening = crate::signals::listen();
    let mut report = ReadReport {
        signals_at: listening.seen(),
        ..ReadReport::default()
    };
    let want = spec.want();
    let ch = match channel {
        Some(ch) => ch,
        None if want == 0 => return Ok(report),
        None => conn.create_channel().await?,
    };
    if want == 0 {
        give_back(&ch).await;
        return Ok(report);
    }
    let mut renewal = match spec.give_back {
        GiveBack::Renew => Some(Renewal::open(conn, &spec.queue, spec.ready).await?),
        _ => None,
    };
    // Every acknowledgement of the read counts toward the wait before the close: a
    // renewing read sends one `multiple` per 64 copies confirmed.
    let marks = super::AckMarks::new();
    let mut open_consumer = None;
    // A quorum read's consumers, live until the give-back (see `consume_fifo`).
    let mut live = Vec::new();
    let mut result = if renewal.is_some() {
        let renewing = (&mut renewal, &mut open_consumer);
        consume_renewing(&ch, spec, want, make, tx, &mut report, renewing).await
    } else {
        consume_fifo(&ch, spec, want, make, tx, &mut report, &mut live).await
    };
    // A lost connection answers nothing more (see `rabbit::Liveness`).
    if let Err(e) = &result {
        conn.note_loss(e);
    }
    // The give-back (up to `give_back_wait`, 2 min) finishes after a first signal.
    let stopped = report.interrupted.is_some();
    let watch = Finishing::start(report.signals_at, stopped, None, INTERRUPTED_TWICE);
    // Already back in the queue: dlq's give-back does not bring them back again.
    let taken_back = taken_back_by_broker(&ch, &live);
    let mut back = (report.read + report.unread).saturating_sub(taken_back);
    let mut ready_before = None;
    // Acknowledgements were sent: the count after may show some the close dropped.
    let mut acked = false;
    if let Some(mut r) = renewal {
        // After an error too: what was copied and confirmed is acknowledged rather than
        // given back beside its copy, as far as the channel still allows.
        let started = std::time::Instant::now();
        let finished = finish_renewal(&ch, &mut r, open_consumer).await;
        if result.is_ok() {
            if let Err(e) = &finished {
                conn.note_loss(e);
            }
            result = finished;
        }
        back = r.unrenewed(report.read);
        if r.renewed() > 0 && conn.alive() {
            super::settle_grace_after(marks.recent(), started.elapsed()).await;
            ready_before = ready_now(conn, &spec.queue).await;
            acked = true;
        }
        let unread = report.unread_at_most(want, r.renewed());
        // Acknowledgements a lost connection may have cut off: up to the consumer's credit
        // of the renewed (a kill -9 left up to 1,000 doubled in CI, see `renewal_killed…`).
        let credit = report.renew_credit.unwrap_or(0);
        let lost = (!conn.alive()).then(|| unread.max(credit.min(r.renewed())));
        report.renewal_notes = r.finish(report.read, unread, lost, result.as_ref().err());
    } else if spec.give_back == GiveBack::Nack && report.read > 0 && conn.alive() {
        let held = (&live[..], back, taken_back);
        ready_before = nack_given_back(conn, &ch, spec, held, &mut report).await;
    } else if spec.give_back == GiveBack::Nack && spec.limited && !conn.alive() {
        // The lost connection gave back what the read held, as a close does: counted; and
        // what its last window's consumer was delivered and the read never pulled.
        let most = back + report.window_left;
        if most > 0 {
            let note = lost_counted(&spec.queue, most, false);
            report.renewal_notes.push(note);
        }
    }
    drop(live);
    // Messages pushed over a delivery limit do not come back.
    let back = back.saturating_sub(report.pushed_over);
    let counted = (ready_before, acked);
    // A read stopped by it says so in its error (`stop_if_taken_back`).
    if taken_back > 0 && result.is_ok() {
        let note = took_back_note(&spec.queue, taken_back, spec.known_timeout());
        report.renewal_notes.push(note);
    }
    let more = give_back_counted(conn, &ch, &spec.queue, back, counted).await;
    report.renewal_notes.extend(more);
    // A signal during the give-back ends the read interrupted.
    if !stopped && watch.came() {
        report.interrupted = Some(report.shown());
    }
    drop(watch);
    drop(listening);
    if result.is_err() || report.interrupted.is_some() {
        // The caller gets no report to warn from.
        let limit = spec.counted_limit.unwrap_or_default();
        report
            .give_back_notes(&spec.queue, limit)
            .into_iter()
            .for_each(crate::output::notice);
    }
    result?;
    if report.interrupted.is_some() {
        return Err(interrupted_read(&spec.queue, &report));
    }
    Ok(report)
}

/// The error of a read a signal stopped, once it gave back what it held (what the give-back
/// did is said first, by the caller).
fn interrupted_read(queue: &str, report: &ReadReport) -> anyhow::Error {
    crate::error::interrupted(format!(
        "interrupted: dlq stopped showing {queue:?} after {} message(s) and gave back what it held, as a finished read does",
        report.shown()
    ))
}

/// How many messages RabbitMQ took back from a quorum read on its own: the windows of the
/// live consumers it cancelled (their streams ended before dlq cancelled any). RabbitMQ 4.3
/// does so once a quorum queue's consumer timeout passes, with the channel open, and puts
/// the messages back in the queue; a read whose output stalled 8-25 s behind a full pipe
/// met a 3-s `x-consumer-timeout` so on 4.3.6, and then warned that 200 of the messages it
/// gave back were "not ready again" while all 3,000 were there.
fn taken_back_by_broker(ch: &Channel, live: &[LiveWindow]) -> u64 {
    // A channel or connection lost ends its consumers too.
    if !ch.status().connected() {
        return 0;
    }
    live.iter().filter(|w| w.ended()).map(|w| w.delivered).sum()
}

/// A quorum read's window whose consumer stays live until the give-back (`consume_fifo`).
struct LiveWindow {
    consumer: lapin::Consumer,
    /// What it delivered: what RabbitMQ took back if it cancelled the consumer.
    delivered: u64,
    /// Its stream ended: lapin says so once (a consumer's end is one item in its stream),
    /// so a second look would miss it. Missed, a read stopped because RabbitMQ took back
    /// 900 of its 1,000 counted them as its own to give back, and waited 2 s for them.
    seen_end: std::sync::atomic::AtomicBool,
}

impl LiveWindow {
    fn new(consumer: lapin::Consumer, delivered: u64) -> LiveWindow {
        let seen_end = std::sync::atomic::AtomicBool::new(false);
        LiveWindow {
            consumer,
            delivered,
            seen_end,
        }
    }

    /// RabbitMQ cancelled its consumer (dlq cancels them only at the give-back).
    fn ended(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        if self.seen_end.load(Relaxed) {
            return true;
        }
        let next = futures_util::FutureExt::now_or_never(self.consumer.clone().next());
        let ended = matches!(next, Some(None));
        self.seen_end.store(ended, Relaxed);
        ended
    }
}

/// What RabbitMQ did when it took back part of what a read held (`taken_back_by_broker`).
fn took_back(queue: &str, n: u64, timeout_ms: Option<u64>) -> String {
    let timeout = match timeout_ms {
        Some(ms) => format!(
            "its consumer timeout, {}",
            super::topology::duration_text(ms)
        ),
        None => "a consumer timeout dlq did not know of (the broker's consumer_timeout, 30 min by default, or a policy's set since dlq started)".into(),
    };
    format!(
        "{queue:?}: RabbitMQ took back {n} message(s) dlq held while reading, once they were held longer than {timeout}; none is lost, they are back in the queue"
    )
}

/// Stops a quorum read once RabbitMQ has taken back what one of its live windows held
/// (`taken_back_by_broker`): those messages are back in the queue, where this read would
/// meet them again. On RabbitMQ 4.3.6 a read held 6 s behind a full pipe past a 2-s
/// consumer timeout showed the first 100 of 1,000 twice and never the last 100. RabbitMQ
/// cancels the consumer before it delivers any of its messages again, so checking at each
/// window and at each redelivered message stops the read before it shows one twice.
fn stop_if_taken_back(
    ch: &Channel,
    spec: &ReadSpec,
    live: &[LiveWindow],
    read: u64,
    want: u64,
) -> Result<()> {
    let taken = taken_back_by_broker(ch, live);
    if taken == 0 {
        return Ok(());
    }
    let why = took_back(&spec.queue, taken, spec.known_timeout());
    bail!(
        "{why}: the read stopped after {read} of {want}, before showing any of them twice; {HOLD_ADVICE}"
    )
}

/// Why a read held its messages that long, and what to do instead.
const HOLD_ADVICE: &str = "a quorum queue is read whole, so a read whose output waits (piped into a pager) holds every message until it ends: write the output to a file first";

/// The read's warning when RabbitMQ took messages back after its last window: what it
/// showed is whole, each message once.
fn took_back_note(queue: &str, n: u64, timeout_ms: Option<u64>) -> String {
    format!(
        "{}, and the read had shown each message once; {HOLD_ADVICE}",
        took_back(queue, n, timeout_ms)
    )
}

/// 4.3+: a nack is not counted, a close is. The consumers are cancelled first: a nack gives
/// a live one its credit back, and the broker hands it the same messages again, which the
/// close then returns, counted (on 4.0, where a nack counts too, each came back at 2).
/// One window at a time (`settle::nack_windows`, up to each of `ends`), from the queue's
/// `ready` count just before. Whether each window showed before the next went; `None`:
/// the nack did not go out, on a channel RabbitMQ closed.
async fn nack_read(
    conn: &Connection,
    ch: &Channel,
    queue: &str,
    live: &[LiveWindow],
    ends: &[u64],
    mut ready: Option<u32>,
) -> Option<bool> {
    for w in live {
        let tag = w.consumer.tag();
        let _ = ch.basic_cancel(tag, BasicCancelOptions::default()).await;
    }
    let nacked = super::settle::nack_windows(conn, ch, queue, ends, &mut ready);
    nacked.await.ok()
}

/// A quorum read's give-back by nack (`nack_read`) of the `back` messages its `live`
/// windows hold (less what RabbitMQ took back), with its notes; the queue's count just
/// before, taken so that the count after can be checked.
async fn nack_given_back(
    conn: &Connection,
    ch: &Channel,
    spec: &ReadSpec,
    (live, back, taken_back): (&[LiveWindow], u64, u64),
    report: &mut ReadReport,
) -> Option<super::Depth> {
    // Counted before the nack puts them back.
    let ready_before = ready_now(conn, &spec.queue).await;
    // On a queue whose nack appends (`topology::nack_goes_behind`), `give_back_counted`
    // closes the channel instead: its consumers' messages go back in place, ahead of any
    // that landed meanwhile (the count just before cannot see those).
    if super::settle::closes_in_place(spec.nack_behind, live.len()) {
        return ready_before;
    }
    let behind = super::settle::behind_note(&spec.queue, spec.nack_behind, ready_before);
    report.renewal_notes.extend(behind);
    let ready = ready_before.map(|d| d.ready);
    let ends = window_ends(live, report.read, taken_back);
    match nack_read(conn, ch, &spec.queue, live, &ends, ready).await {
        // The close gave back what the last window's consumer sent unread too.
        None if conn.alive() => {
            let note = closed_by_broker(&spec.queue, back + report.window_left);
            report.renewal_notes.push(note);
        }
        Some(false) => {
            let note = super::settle::out_of_order_note(&spec.queue);
            report.renewal_notes.push(note);
        }
        _ => {}
    }
    ready_before
}

/// The last delivery tag of each live window but the last, where every window the read
/// delivered (`read` in all) is live and none was taken back: tags count from 1 on the
/// read's channel, on which nothing else consumed.
fn window_ends(live: &[LiveWindow], read: u64, taken_back: u64) -> Vec<u64> {
    let all: u64 = live.iter().map(|w| w.delivered).sum();
    if all != read || taken_back > 0 {
        return Vec::new();
    }
    let mut end = 0;
    let mut ends: Vec<u64> = live
        .iter()
        .map(|w| {
            end += w.delivered;
            end
        })
        .collect();
    ends.pop();
    ends
}

/// RabbitMQ closed a read's channel before its nack could give back what it held. On
/// 4.3.6, under load, a consumer timeout struck a quorum read so in 4 runs of about 40
/// ("delivery acknowledgement on channel 2 timed out. Timeout value used: -1 ms") instead
/// of taking back that consumer's messages with the channel open; the close counted every
/// other message the read held (2,900 of 5,000), and dlq said nothing of it. How many is
/// not known: windows RabbitMQ took back before the close are not counted (of the 4,800
/// one read held, 2,200 were), so the notice gives the most. A take's channels too
/// (`Taker::broker_counted`).
pub(super) fn closed_by_broker(queue: &str, most: u64) -> String {
    format!(
        "{queue:?}: RabbitMQ closed dlq's channel before dlq gave back what it held (a consumer timeout does so, and RabbitMQ 4.3 at times for a consumer it could cancel instead): none is lost, all is back in the queue, but up to {most} message(s) counted one delivery toward the queue's delivery limit"
    )
}

/// The connection was lost while a read or take held `most` messages at most, of a quorum
/// queue with a delivery limit given back uncounted by a nack (RabbitMQ 4.3+): the lost
/// connection gave them back as a close does, counted. Measured on 4.3.6: a read of 20,000
/// whose connection the management API closed after 5,000 shown had 8,200 at delivery
/// count 1, and dlq said only that the connection was lost. `acked`: acknowledgements were
/// sent, and those the loss cut off count too (a replay on 4.3.6: 191 held, 192 counted,
/// the one more named as in both places).
pub(super) fn lost_counted(queue: &str, most: u64, acked: bool) -> String {
    let also = match acked {
        true => ", and so did any whose acknowledgement the loss cut off",
        false => "",
    };
    format!(
        "{queue:?}: the connection to RabbitMQ was lost before dlq gave back what it held: none is lost, all is back in the queue, but up to {most} message(s) counted one delivery toward the queue's delivery limit{also}"
    )
}

/// Closes a read's channel, giving back the `back` messages it holds, and waits until they
/// are ready again (`after_give_back`); `counted`: the queue's count from before, if taken,
/// and whether acknowledgements went on the channel. A lost connection gave everything
/// back already: there is nothing to count with.
async fn give_back_counted(
    conn: &Connection,
    ch: &Channel,
    queue: &str,
    back: u64,
    (mut ready_before, acked): (Option<super::Depth>, bool),
) -> Option<String> {
    let alive = conn.alive();
    if alive && ready_before.is_none() && back > 0 {
        ready_before = ready_now(conn, queue).await;
    }
    give_back(ch).await;
    match alive {
        true => after_give_back(conn, queue, ready_before, back, acked).await,
        false => None,
    }
}

/// The end of a renewing read: the last consumer cancelled (so an ack gives it no credit
/// for a copy), every copy confirmed, the originals of the confirmed ones acknowledged.
async fn finish_renewal(
    ch: &Channel,
    r: &mut Renewal,
    open_consumer: Option<lapin::types::ShortString>,
) -> Result<()> {
    if let Some(tag) = open_consumer {
        ch.basic_cancel(tag.as_str().into(), BasicCancelOptions::default())
            .await?;
    }
    r.settle().await;
    r.ack_confirmed(ch).await
}

/// Returns every held message, whatever state the read ended in, by closing the channel:
/// the broker puts them back in their original positions. Not `basic.nack(requeue)`: on
/// RabbitMQ 3.10 a quorum queue appends nacked messages at the back of the queue (seen
/// when dlq stopped before the end), while a channel close returns them to the front in
/// order, for classic and quorum queues alike. Errors are ignored on purpose: when the
/// channel or connection is already gone, the broker has requeued them already.
async fn give_back(ch: &Channel) {
    super::close_channel(ch, "dlq: read done, every message given back").await;
}

/// How long to wait for `held` given-back messages to be ready again: the broker requeues a
/// closed channel's messages asynchronously, about 20,000 a second here.
pub(super) fn give_back_wait(held: u64) -> Duration {
    (GIVE_BACK_WAIT + Duration::from_millis(held / 10)).min(Duration::from_secs(120))
}

/// The queue's ready count just before a give-back, for `after_give_back`.
/// `DLQ_TEST_GIVE_BACK_PAUSE_MS` pauses after the count: the tests publish meanwhile, so
/// that newcomers surely land between it and the give-back, whatever the machine's load.
pub(super) async fn ready_now(conn: &Connection, queue: &str) -> Option<super::Depth> {
    let depth = super::passive_declare(conn, queue).await.ok().flatten();
    if let Some(ms) = std::env::var("DLQ_TEST_GIVE_BACK_PAUSE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    depth
}

/// After a give-back of `back` messages to `queue` (which had `before` ready just before it,
/// when known): waits (briefly) until they are ready again, so that a command run right
/// after dlq sees the queue as it was, and says so when they are not. The broker requeues a
/// closed channel's messages asynchronously (a classic queue too, on a loaded broker).
/// Without a count from before, a queue holding more than dlq gave back would hide a
/// shortfall. Where dlq `acked` messages on the closed channels, it then says if more than
/// that came back (acknowledgements the broker dropped, or newcomers): each closed
/// channel's messages come back at once, so one more look after a pause sees any that came
/// with them.
pub(super) async fn after_give_back(
    conn: &Connection,
    queue: &str,
    before: Option<super::Depth>,
    back: u64,
    acked: bool,
) -> Option<String> {
    if back == 0 && before.is_none() {
        return None;
    }
    let expected = before.as_ref().map_or(0, |b| u64::from(b.ready)) + back;
    let wait = give_back_wait(back);
    // Gone or unreachable: nothing to wait for, nothing to say.
    let Ok(Some(now)) = poll_depth(conn, queue, wait, |d| u64::from(d.ready) >= expected).await
    else {
        return None;
    };
    let missing = expected.saturating_sub(u64::from(now.ready));
    if missing > 0 {
        return Some(not_back_note(queue, missing, back, wait));
    }
    if before.is_none() || !acked {
        return None;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let more = match super::passive_declare(conn, queue).await {
        Ok(Some(d)) => u64::from(d.ready).saturating_sub(expected),
        _ => 0,
    };
    (more > 0).then(|| more_back_note(queue, more))
}

/// The queue's count after the give-back says more came back than dlq held unacknowledged.
fn more_back_note(queue: &str, n: u64) -> String {
    format!(
        "{queue:?}: {n} message(s) more than dlq gave back are ready again: either acknowledgements the broker dropped when dlq's channel closed (a quorum queue drops those it had not sent on yet), and then up to {n} message(s) that dlq moved, archived or renewed are there twice, or messages that arrived meanwhile"
    )
}

/// The queue's count, `wait` after the give-back, is short of what dlq gave back.
fn not_back_note(queue: &str, missing: u64, back: u64, wait: Duration) -> String {
    format!(
        "{queue:?}: {missing} of the {back} message(s) dlq gave back were not ready again after {} s: either the broker is still requeuing them (a command run right now may see fewer), or another consumer or an expiry took them",
        wait.as_secs()
    )
}

/// The error when RabbitMQ cancels a consumer of dlq's mid-read or mid-take.
pub(super) fn broker_cancelled(queue: &str) -> String {
    format!(
        "the broker cancelled dlq's consumer on {queue:?}: the queue was deleted, or (RabbitMQ 4.3, a quorum queue) dlq held a message longer than the queue's consumer timeout (x-consumer-timeout, a policy's consumer-timeout, else consumer_timeout, 30 min by default), and the queue took back what that consumer held"
    )
}

/// What can keep ready messages from dlq's consumer, for the error after `STALL_LIMIT`.
/// A quorum queue delivers to a consumer from its member on the consumer's node, which
/// waits until that member has the messages (seen twice, on a loaded 4.0 cluster in the
/// tests, on a node started again shortly before).
pub(super) fn stall_cause(quorum: bool) -> &'static str {
    match quorum {
        true => {
            ": a quorum queue delivers from its member on the node dlq is connected to, which may still be catching up (that node restarted lately, or is loaded): try again, or connect to the node of the queue's leader; or another consumer is preferred (single active consumer, consumer priorities)"
        }
        false => {
            ": another consumer is probably preferred (single active consumer, consumer priorities)"
        }
    }
}

/// A consumer has delivered nothing for `IDLE`: does `queue` still hold ready messages?
/// `Ok(false)`: no, the rest went elsewhere (another consumer, a TTL on the DLQ). `Ok(true)`:
/// yes, and `stalled` grows by `IDLE`; at `STALL_NOTICE` dlq says so, and once it reaches
/// `STALL_LIMIT` that is an error, its text ended by `why`. Silent, a stall looked like a
/// hang for 30 s (a read on a cluster node whose queue member lagged, in the cluster
/// trials).
pub(super) async fn still_ready(
    ch: &Channel,
    queue: &str,
    stalled: &mut Duration,
    why: &str,
) -> Result<bool> {
    let depth = ch
        .queue_declare(
            queue.into(),
            QueueDeclareOptions::default().passive(),
            FieldTable::default(),
        )
        .await?;
    if depth.message_count() == 0 {
        return Ok(false);
    }
    *stalled += IDLE;
    let ready = depth.message_count();
    if *stalled >= STALL_LIMIT {
        bail!(
            "RabbitMQ delivered nothing from {queue:?} for {} s although {ready} message(s) are ready{why}",
            STALL_LIMIT.as_secs(),
        );
    }
    if *stalled == STALL_NOTICE {
        crate::output::notice(format!(
            "RabbitMQ has delivered nothing from {queue:?} for {} s although {ready} message(s) are ready{why}; dlq waits up to {} s, holding what it took, then stops and gives it back",
            STALL_NOTICE.as_secs(),
            STALL_LIMIT.as_secs()
        ));
    }
    Ok(true)
}

/// A long read takes its deliveries in batches, every `POLL_PAUSE`, instead of being woken
/// for each: the broker delivers a held queue more slowly than dlq decodes it, so a reader
/// woken per delivery spent more CPU on the wake-ups (lapin's thread waking dlq's, a
/// futex and an eventfd write each) than on the messages. Short reads (`list` samples,
/// `inspect`) are woken per delivery, so they never wait for a pause.
fn poll_pause(want: u64) -> Option<Duration> {
    (want >= PAUSE_FROM).then_some(POLL_PAUSE)
}

/// The pause of a long read: the runtime's thread itself sleeps, then lets the runtime poll
/// its reactor once.
///
/// Not a timer: a task asleep on a timer leaves the runtime waiting in `epoll_wait`, where
/// lapin's socket is registered, so every segment the broker sends woke dlq's thread, which
/// woke lapin's I/O thread (a futex), which read a few messages and parked again: two
/// wake-ups per arrival. A sleeping thread lets the kernel buffer the pause's deliveries and
/// the next reactor poll hands lapin all of them at once (paired 50k scans: CPU 1.34-1.55 s
/// -> 1.01-1.07 s, system time 0.30-0.42 -> 0.07-0.16 s; docs/BENCHMARKS.md). dlq's runtime
/// is current-thread (main.rs); its other tasks (the records' consumer, lapin's heartbeat,
/// Ctrl-C) wait at most one pause.
async fn pause_reactor(pause: Duration) {
    std::thread::sleep(pause);
    tokio::task::yield_now().await;
}

/// A renewing read's copies, and its one consumer, which must be cancelled before the final
/// acknowledgement (`finish_renewal`).
type Renewing<'a> = (
    &'a mut Option<Renewal>,
    &'a mut Option<lapin::types::ShortString>,
);

async fn consume_fifo<T: Send>(
    ch: &Channel,
    spec: &ReadSpec,
    want: u64,
    make: &Make<T>,
    tx: &mpsc::Sender<Result<T>>,
    report: &mut ReadReport,
    live: &mut Vec<LiveWindow>,
) -> Result<()> {
    let q = spec.queue.as_str();
    let mut bytes: u64 = 0;
    let mut n = 0u32;
    let pause = poll_pause(want);
    // lapin cancels a consumer when its last handle is dropped: live ones are kept in
    // `live`, until the caller gives the messages back.
    while report.read < want {
        stop_if_taken_back(ch, spec, live, report.shown(), want)?;
        let batch = window(bytes, report.read).min(want - report.read);
        let batch16 = u16::try_from(batch).unwrap_or(u16::MAX);
        let consumer = open_window(ch, q, batch16, n).await?;
        n += 1;
        let read = Window {
            size: batch16,
            pause,
            watch: live,
        };
        let before = report.read;
        let more = read_window(
            ch, spec, &read, &consumer, make, tx, report, &mut None, &mut bytes,
        )
        .await;
        // A read that ends in this window keeps its consumer live too, for the give-back to
        // cancel before its nack: one left out (lapin cancels a dropped one later) would be
        // handed what the nack puts back, and the close would return that counted.
        let keep_order = spec.read_all_to_keep_order();
        match more {
            Ok(true) => {}
            Ok(false) if !keep_order => {
                report.unread = cancel_unread(ch, &consumer).await;
                return Ok(());
            }
            ended => {
                if keep_order {
                    live.push(LiveWindow::new(consumer, report.read - before));
                }
                report.window_left = batch.saturating_sub(report.read - before);
                return ended.map(|_| ());
            }
        }
        // No credit left on this consumer: cancel it so the next one continues in order.
        // Its messages stay unacknowledged on the channel until the final close (which
        // also ends the last consumer: no cancel needed then). Not on a quorum queue:
        // nothing is acknowledged there, so the consumer gets no more credit, and RabbitMQ
        // gives back what a lost node's consumers held only for live ones (see `take`).
        if keep_order {
            live.push(LiveWindow::new(consumer, batch));
        } else if report.read < want {
            ch.basic_cancel(consumer.tag(), BasicCancelOptions::default())
                .await?;
        }
    }
    Ok(())
}

/// Cancels the consumer of a window the read stopped taking from (its receiver gone), and
/// counts what it delivered that was not read: held as well, and given back with the rest,
/// so the count after the give-back must include it. The stream ends at `cancel-ok`.
async fn cancel_unread(ch: &Channel, consumer: &lapin::Consumer) -> u64 {
    let cancel = ch.basic_cancel(consumer.tag(), BasicCancelOptions::default());
    if cancel.await.is_err() {
        return 0;
    }
    until_cancel_ok(&mut consumer.clone()).await
}

/// Counts what a cancelled consumer still delivers until `cancel-ok` ends its stream; a
/// stream that never ends must not hold the run (`IDLE` between deliveries at most).
pub(super) async fn until_cancel_ok<S>(consumer: &mut S) -> u64
where
    S: futures_util::Stream<Item = lapin::Result<lapin::message::Delivery>> + Unpin,
{
    let mut n = 0;
    while let Ok(Some(Ok(_))) = tokio::time::timeout(IDLE, consumer.next()).await {
        n += 1;
    }
    n
}

/// A renewing read: one live consumer for the whole read, so that a crash of dlq's node
/// gives back everything it holds (see `take`'s notes). Its credit is bounded: it may be
/// delivered at most `acked + credit` messages, and `acked` stays at most `want - credit`,
/// so it never reaches the copies at the tail (nor a newcomer). Originals are acknowledged
/// as their copies are confirmed, and at the end of each half-credit step, while the other
/// half keeps the broker delivering. The last `credit` originals are acknowledged by
/// `finish_renewal`, once the consumer is cancelled.
async fn consume_renewing<T: Send>(
    ch: &Channel,
    spec: &ReadSpec,
    want: u64,
    make: &Make<T>,
    tx: &mpsc::Sender<Result<T>>,
    report: &mut ReadReport,
    (renewal, open_consumer): Renewing<'_>,
) -> Result<()> {
    let credit = RENEW_CREDIT.min(want);
    report.renew_credit = Some(credit);
    let consumer = open_window(ch, &spec.queue, credit as u16, 0).await?;
    *open_consumer = Some(consumer.tag());
    let pause = poll_pause(want);
    let most = want - credit;
    renewal
        .as_mut()
        .expect("a renewing read")
        .ack_as_confirmed(ch, most);
    let mut bytes = 0u64;
    while report.read < want {
        let acked = renewal.as_ref().map_or(0, Renewal::renewed);
        let may = (acked + credit).min(want) - report.read;
        if may == 0 {
            let r = renewal.as_ref().expect("a renewing read");
            let why = r.failure().unwrap_or("no copy was confirmed");
            bail!("renewing {:?} stopped: {why}", spec.queue);
        }
        let read = Window {
            size: may.min((credit / 2).max(1)) as u16,
            pause,
            watch: &[],
        };
        if !read_window(
            ch, spec, &read, &consumer, make, tx, report, renewal, &mut bytes,
        )
        .await?
        {
            return Ok(());
        }
        let r = renewal.as_mut().expect("a renewing read");
        r.settle().await;
        r.ack_confirmed_first(ch, most.saturating_sub(r.renewed()))
            .await?;
    }
    Ok(())
}

/// A read window's size and how its deliveries are polled.
struct Window<'a> {
    size: u16,
    pause: Option<Duration>,
    /// The read's earlier windows, still live (see `stop_if_taken_back`).
    watch: &'a [LiveWindow],
}

/// Reads one window's deliveries off `consumer`. `false`: stop reading (the receiver is
/// gone, or the queue stopped delivering to dlq).
#[allow(clippy::too_many_arguments)]
async fn read_window<T: Send>(
    ch: &Channel,
    spec: &ReadSpec,
    w: &Window<'_>,
    consumer: &lapin::Consumer,
    make: &Make<T>,
    tx: &mpsc::Sender<Result<T>>,
    report: &mut ReadReport,
    renewal: &mut Option<Renewal>,
    bytes: &mut u64,
) -> Result<bool> {
    let mut stream = consumer.clone();
    let (q, pause) = (spec.queue.as_str(), w.pause);
    let mut got = 0u64;
    let mut stalled = Duration::ZERO;
    // One timer and one closed-receiver watch per consumer, not per delivery: creating
    // them for every message cost more than decoding it. The timer is moved only when
    // it fires, to IDLE after the last delivery.
    let mut last = tokio::time::Instant::now();
    let idle = tokio::time::sleep(IDLE);
    tokio::pin!(idle);
    let closed = tx.closed();
    tokio::pin!(closed);
    let mut signals = crate::signals::listen_since(report.signals_at);
    while got < u64::from(w.size) {
        if report.interrupted.is_none() && signals.came() && interrupt(spec, report, signals.seen())
        {
            return Ok(false);
        }
        // What lapin already holds is taken without a wake-up (see `poll_pause`).
        let ready = pause.and_then(|_| futures_util::FutureExt::now_or_never(stream.next()));
        let next = if let Some(d) = ready {
            d
        } else {
            tokio::select! {
                biased;
                _ = &mut closed, if !report.receiver_gone => {
                    report.receiver_gone = true;
                    if spec.read_all_to_keep_order() {
                        continue;
                    }
                    return Ok(false);
                }
                _ = signals.next() => {
                    if signals.seen() <= report.signals_at {
                        continue; // the one a send already stopped on
                    }
                    if report.interrupted.is_some() {
                        crate::signals::exit_at_once(INTERRUPTED_TWICE);
                    }
                    if interrupt(spec, report, signals.seen()) {
                        return Ok(false);
                    }
                    continue;
                }
                d = stream.next(), if pause.is_none() => d,
                _ = pause_reactor(pause.unwrap_or_default()), if pause.is_some() => continue,
                _ = &mut idle => {
                    if last.elapsed() < IDLE {
                        idle.as_mut().reset(last + IDLE);
                        continue;
                    }
                    let why = stall_cause(spec.read_all_to_keep_order());
                    if !still_ready(ch, q, &mut stalled, why).await? {
                        report.ended_short = true;
                        return Ok(false);
                    }
                    idle.as_mut().reset(tokio::time::Instant::now() + IDLE);
                    continue;
                }
            }
        };
        let d = match next {
            None => {
                bail!("{}", broker_cancelled(q))
            }
            Some(Err(e)) => return Err(anyhow!(e)),
            Some(Ok(d)) => d,
        };
        // A message dlq holds comes again only if RabbitMQ took it back.
        if d.redelivered && !w.watch.is_empty() {
            stop_if_taken_back(ch, spec, w.watch, report.shown(), spec.want())?;
        }
        stalled = Duration::ZERO;
        last = tokio::time::Instant::now();
        got += 1;
        *bytes += d.data.len() as u64;
        if !deliver(d, spec, make, tx, report, renewal).await {
            return Ok(false);
        }
    }
    Ok(true)
}

/// What a second signal says while a read gives back after the first.
const INTERRUPTED_TWICE: &str = "interrupted twice: exited at once; what dlq held goes back to its queue as the connection closes (on a quorum queue that counts a delivery toward its delivery limit)";

/// A signal came (`seen` signals so far, which later waits count from): the read stops
/// showing records, and gives back as when its receiver is gone. `true`: stop reading now;
/// else it reads on unseen, to keep a quorum queue's order.
fn interrupt(spec: &ReadSpec, report: &mut ReadReport, seen: u64) -> bool {
    crate::signals::announce(seen);
    report.signals_at = seen;
    report.interrupted.get_or_insert(report.read);
    report.receiver_gone = true;
    !spec.read_all_to_keep_order()
}

/// The record of a delivery, decoded from its parts.
fn record_of<T>(q: &str, make: &Make<T>, d: &lapin::message::Delivery) -> T {
    make(
        q,
        d.exchange.as_str(),
        d.routing_key.as_str(),
        &d.properties,
        &d.data,
    )
}

/// One read window: a consumer whose prefetch is the window's size.
async fn open_window(ch: &Channel, q: &str, size: u16, n: u32) -> Result<lapin::Consumer> {
    // Per-consumer prefetch: applies to the consumer created next.
    ch.basic_qos(size, BasicQosOptions { global: false })
        .await?;
    let consumer = ch
        .basic_consume(
            q.into(),
            // Zero-padded: RabbitMQ 3.10 keys a quorum queue's consumers by tag, and gives
            // back a lost channel's consumers in key order (of up to 32).
            format!("dlq-read-{n:05}").as_str().into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    Ok(consumer)
}

/// One delivery, held: counted, copied when renewing, decoded and sent on while someone
/// receives. `false`: stop reading (the receiver is gone and the order need not be kept).
async fn deliver<T: Send>(
    d: lapin::message::Delivery,
    spec: &ReadSpec,
    make: &Make<T>,
    tx: &mpsc::Sender<Result<T>>,
    report: &mut ReadReport,
    renewal: &mut Option<Renewal>,
) -> bool {
    report.read += 1;
    report.started.get_or_insert_with(std::time::Instant::now);
    if spec.counts_returns {
        report.note_delivery_count(delivery_count(&d.properties), spec.counted_limit);
    }
    if let Some(r) = renewal.as_mut() {
        r.copy(0, &d).await;
    }
    if report.receiver_gone {
        // Draining to the end (see `read_all_to_keep_order`): hold, do not decode.
        return true;
    }
    let rec = record_of(spec.queue.as_str(), make, &d);
    // Only the channel remembers the delivery now: the body is gone with `d`.
    drop(d);
    let credit = report.renew_credit;
    let since = || {
        renewal
            .as_mut()
            .zip(credit)
            .and_then(|(r, c)| r.held_since(c))
    };
    if send_within_hold(spec, tx, report, rec, since).await {
        return true;
    }
    report.receiver_gone = true;
    spec.read_all_to_keep_order()
}

/// Sends a record, waiting for room at most until the read has held its messages for
/// `ReadSpec::hold_wait`, counted from the oldest one's delivery: the read's first, or what
/// `since` finds (a renewing read's, `Renewal::held_since`; asked only once the channel is
/// full, off the path of every delivery). Before, a renewing read counted
/// from its first delivery too, and one longer than half the timeout stopped showing at
/// its reader's first pause, though it held nothing that old. `false` when the receiver is
/// gone or that wait ran out (noted in `output_stalled`). A timer only when the channel is
/// full: one per delivery cost more than decoding it.
async fn send_within_hold<T: Send>(
    spec: &ReadSpec,
    tx: &mpsc::Sender<Result<T>>,
    report: &mut ReadReport,
    rec: T,
    since: impl FnOnce() -> Option<std::time::Instant>,
) -> bool {
    let rec = match tx.try_send(Ok(rec)) {
        Ok(()) => return true,
        Err(mpsc::error::TrySendError::Closed(_)) => return false,
        Err(mpsc::error::TrySendError::Full(rec)) => rec,
    };
    let first = *report.started.get_or_insert_with(std::time::Instant::now);
    let started = since().unwrap_or(first);
    let mut signals = crate::signals::listen_since(report.signals_at);
    let sent = tokio::select! {
        sent = within_hold(started, || spec.hold_wait(), tx.send(rec)) => sent,
        _ = signals.next() => {
            // The record at hand was not sent.
            report.interrupted = Some(report.read - 1);
            interrupt(spec, report, signals.seen());
            return false;
        }
    };
    match sent {
        Some(sent) => sent.is_ok(),
        None => {
            report.output_stalled = Some((report.read - 1, spec.hold_wait()));
            false
        }
    }
}

fn stream_args(offset: &str) -> FieldTable {
    let mut t = FieldTable::default();
    t.insert(
        "x-stream-offset".into(),
        AMQPValue::LongString(LongString::from(offset)),
    );
    t
}

/// A stream consumer from `offset` ("first", "last"), with the stream prefetch.
async fn stream_consumer(
    ch: &Channel,
    q: &str,
    tag: &str,
    offset: &str,
) -> Result<lapin::Consumer> {
    ch.basic_qos(STREAM_PREFETCH, BasicQosOptions::default())
        .await?;
    let consumer = ch
        .basic_consume(
            q.into(),
            tag.into(),
            BasicConsumeOptions::default(),
            stream_args(offset),
        )
        .await?;
    Ok(consumer)
}

/// The offset of the last message in a stream now, or `None` when it is empty.
async fn stream_end(conn: &Connection, q: &str) -> Result<Option<i64>> {
    let ch = conn.create_channel().await?;
    let result = async {
        let mut c = stream_consumer(&ch, q, "dlq-stream-end", "last").await?;
        let mut end: Option<i64> = None;
        let mut unacked = 0u16;
        while let Ok(next) = tokio::time::timeout(LAST_CHUNK_IDLE, c.next()).await {
            let d = match next {
                None => break,
                Some(d) => d?,
            };
            if let Some(o) = stream_offset(&d.properties) {
                end = Some(end.map_or(o, |e| e.max(o)));
            }
            unacked += 1;
            if unacked >= STREAM_PREFETCH / 2 {
                ch.basic_ack(d.delivery_tag, BasicAckOptions { multiple: true })
                    .await?;
                unacked = 0;
            }
        }
        Ok::<_, anyhow::Error>(end)
    }
    .await;
    let _ = ch.close(200, "dlq: stream end found".into()).await;
    result
}

async fn read_stream<T: Send>(
    conn: &Connection,
    spec: &ReadSpec,
    make: &Make<T>,
    tx: &mpsc::Sender<Result<T>>,
) -> Result<ReadReport> {
    let mut report = ReadReport::default();
    let q = spec.queue.as_str();
    let Some(end) = stream_end(conn, q).await? else {
        return Ok(report);
    };
    let ch = conn.create_channel().await?;
    let result = async {
        let mut c = stream_consumer(&ch, q, "dlq-stream-read", "first").await?;
        let mut unacked = 0u16;
        loop {
            if spec.max.is_some_and(|m| report.read >= m) {
                break;
            }
            let next = tokio::select! {
                biased;
                _ = tx.closed() => {
                    report.receiver_gone = true;
                    break;
                }
                d = c.next() => d,
                _ = tokio::time::sleep(STREAM_IDLE) => {
                    report.ended_short = true;
                    break;
                }
            };
            let d = match next {
                None => bail!("the broker cancelled dlq's consumer on stream {q:?}"),
                Some(d) => d?,
            };
            let offset = stream_offset(&d.properties);
            if offset.is_some_and(|o| o > end) {
                break;
            }
            unacked += 1;
            // A stream consumer gets more credit only for acknowledged messages; an ack
            // removes nothing from a stream.
            if unacked >= STREAM_PREFETCH / 2 {
                ch.basic_ack(d.delivery_tag, BasicAckOptions { multiple: true })
                    .await?;
                unacked = 0;
            }
            report.read += 1;
            let rec = record_of(q, make, &d);
            drop(d);
            if tx.send(Ok(rec)).await.is_err() {
                report.receiver_gone = true;
                break;
            }
            if offset.is_some_and(|o| o >= end) {
                break;
            }
        }
        Ok(())
    }
    .await;
    let _ = ch.close(200, "dlq: stream read done".into()).await;
    result.map(|()| report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_adapts_to_message_size() {
        if std::env::var_os("DLQ_READ_WINDOW").is_some() {
            return;
        }
        assert_eq!(window(0, 0), FIRST_WINDOW);
        assert_eq!(window(100 * 100, 100), MAX_WINDOW);
        assert_eq!(window(1 << 30, 100), MIN_WINDOW);
        assert_eq!(window(100 << 20, 100), 32);
        assert_eq!(window(64 << 20, 1000), 500);
    }

    #[test]
    fn delivery_counts_against_the_limit() {
        let mut r = ReadReport::default();
        r.note_delivery_count(None, Some(3));
        r.note_delivery_count(Some(1), Some(3));
        r.note_delivery_count(Some(2), Some(3));
        r.note_delivery_count(Some(3), Some(3));
        r.note_delivery_count(Some(7), None);
        assert_eq!(r.max_delivery_count, Some(7));
        assert_eq!(r.now_at_limit, 1);
        assert_eq!(r.pushed_over, 1);
    }
}
