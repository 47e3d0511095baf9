//! How long a quorum queue's acknowledgements are given before their channel closes.
//!
//! A quorum queue's channel sends a settle command per acknowledgement (a `multiple` one
//! too); past a soft limit of commands in flight it stashes further settles in the channel
//! process and sends them as earlier ones are applied (rabbit_fifo_client `settle/3`).
//! Closing the channel then drops the stash, and the broker gives back messages that were
//! acknowledged. The broker shows a client nothing of that stash, so the wait is timed, by
//! how many acknowledgements were sent lately and how fast the broker confirmed.

use lapin::Channel;
use lapin::options::BasicAckOptions;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The pause after a few acknowledgements: measured here, 6 of 40 came back on RabbitMQ
/// 3.10 after 40 single acknowledgements and an immediate close, and none in 100 runs with
/// this pause. The applied notifications that flush the stash take milliseconds on an idle
/// broker.
const SETTLE_GRACE: Duration = Duration::from_millis(200);

/// The soft limit of commands in flight per channel and quorum queue (rabbit_fifo_client).
pub(crate) const SOFT_LIMIT: u64 = 32;

/// `basic.ack` frames this process sent on take and read channels, single or `multiple`.
/// One count for the process: several DLQs' takes share it, which only makes a wait longer.
static ACKS_SENT: AtomicU64 = AtomicU64::new(0);

fn count_acks(n: u64) {
    ACKS_SENT.fetch_add(n, Ordering::Relaxed);
}

/// `basic.ack` (up to `tag` with `multiple`) on a take or read channel, counted for the wait
/// before such a channel closes: every acknowledgement on a classic or quorum queue goes
/// through here (a stream's, which settles nothing, does not).
pub(crate) async fn ack(ch: &Channel, tag: u64, multiple: bool) -> lapin::Result<()> {
    count_acks(1);
    ch.basic_ack(tag, BasicAckOptions { multiple }).await
}

/// `basic.nack(multiple, requeue)` of every message `ch` holds (delivery tag 0: all
/// outstanding), counted like an acknowledgement: on a quorum queue it is one more command
/// a close could drop. RabbitMQ 4.3+ does not count it toward the delivery limit.
pub(crate) async fn nack_all(ch: &Channel) -> lapin::Result<()> {
    count_acks(1);
    let all = lapin::options::BasicNackOptions {
        multiple: true,
        requeue: true,
    };
    ch.basic_nack(0, all).await
}

/// Gives back what `ch` holds one consumer window at a time, oldest first: a `multiple`
/// nack up to each of `ends` (the last delivery tag of every window but the channel's last,
/// each whole, nothing in it acknowledged), each once the one before it shows in the
/// queue's `ready` count; then the rest. One nack over several consumers is one return per
/// consumer, and a channel with 32 commands in flight to a quorum queue stashes them and
/// sends them newest consumer first (rabbit_fifo_client's flush, 4.3.6): a dry run's plan
/// of 3,000, stopped under CI's load, came back `200-2199, 0-199, 2200-2999`. `ready`: the
/// count just before, `None` where not known (no wait); after, the last count seen.
/// Whether each window showed before the next went (`Err`: the nack did not go out).
pub(crate) async fn nack_windows(
    conn: &super::Connection,
    ch: &Channel,
    queue: &str,
    ends: &[u64],
    ready: &mut Option<u32>,
) -> lapin::Result<bool> {
    let mut in_order = true;
    let mut from = 0;
    for &end in ends {
        count_acks(1);
        let upto = lapin::options::BasicNackOptions {
            multiple: true,
            requeue: true,
        };
        ch.basic_nack(end, upto).await?;
        let Some(before) = *ready else {
            continue;
        };
        let after = shown_back(conn, queue, end - from, before).await;
        // Not seen (applied late, or RabbitMQ took them back already): no more waits.
        in_order = after.is_some_and(|n| n > before);
        *ready = after.filter(|_| in_order);
        from = end;
    }
    nack_all(ch).await?;
    Ok(in_order)
}

/// Waits (up to `reader::give_back_wait` of `n`) until the queue's ready count is past
/// `before`, what it was before `n` messages were given back: the last count seen.
pub(crate) async fn shown_back(
    conn: &super::Connection,
    queue: &str,
    n: u64,
    before: u32,
) -> Option<u32> {
    let wait = super::reader::give_back_wait(n);
    let back = super::reader::poll_depth(conn, queue, wait, |d| d.ready > before);
    back.await.ok().flatten().map(|d| d.ready)
}

/// A give-back in parts (`nack_windows`) one part of which did not show in the queue's
/// count before the next part went.
pub(crate) fn out_of_order_note(queue: &str) -> String {
    format!(
        "{queue:?}: part of what dlq gave back was not seen back in the queue before dlq gave back the next part (a loaded broker applies a give-back late), so the queue's order may have changed; none is lost"
    )
}

/// The most consumers of one channel whose messages a close gives back in the order they
/// started: rabbit_fifo returns a down channel's consumers in the order of `maps:keys`,
/// sorted up to 32 keys and in hash order past them (4.0.5 `handle_down`).
const IN_ORDER_ON_CLOSE: usize = 32;

/// Whether a channel with `consumers` of a queue whose nack goes behind what is ready
/// (`nack_behind`, `topology::nack_goes_behind`) is given back by closing it instead: its
/// consumers' messages then go back in place, in order, ahead of what landed meanwhile.
pub(crate) fn closes_in_place(nack_behind: bool, consumers: usize) -> bool {
    nack_behind && consumers <= IN_ORDER_ON_CLOSE
}

/// What to say of a give-back by nack to `queue`, `ready` just before it, where the nack
/// goes behind what is ready (`nack_behind`) and a close could not keep the order either:
/// that the order may have changed, unless nothing was ready.
pub(crate) fn behind_note(
    queue: &str,
    nack_behind: bool,
    ready: Option<super::Depth>,
) -> Option<String> {
    (nack_behind && ready.is_none_or(|d| d.ready > 0)).then(|| format!(
        "{queue:?}: RabbitMQ before 4.3 puts a nacked message of a quorum queue without a delivery limit at the back of it, and messages were ready there when dlq gave back what it held (new ones, or some it had not reached), so the queue's order may have changed; none is lost"
    ))
}

fn acks_sent() -> u64 {
    ACKS_SENT.load(Ordering::Relaxed)
}

/// The wait before closing a quorum queue's channel after `acks` acknowledgements sent
/// lately, on a broker that took `confirms` to confirm what was in flight just before. Past
/// the soft limit the stash waits for the first settles to be applied, which takes longer
/// on a loaded broker: 200 ms let 301 of 3,000 acknowledged messages come back (twice in
/// the queue) under CI's load on 3.10. Then at least a second, and four times the broker's
/// own confirm wait.
pub(crate) async fn settle_grace_after(acks: u64, confirms: Duration) {
    tokio::time::sleep(grace_after(acks, confirms)).await;
}

fn grace_after(acks: u64, confirms: Duration) -> Duration {
    if acks <= SOFT_LIMIT {
        SETTLE_GRACE
    } else {
        (confirms * 4).clamp(Duration::from_secs(1), Duration::from_secs(10))
    }
}

/// Marks of `ACKS_SENT` at least a second apart, kept as a take goes: at its end, how many
/// acknowledgements were sent in the last one to two seconds (or since it began), those
/// sent just before the release included, not only the release's own.
pub(crate) struct AckMarks {
    older: (Instant, u64),
    newer: (Instant, u64),
}

impl AckMarks {
    pub(crate) fn new() -> AckMarks {
        let now = (Instant::now(), acks_sent());
        AckMarks {
            older: now,
            newer: now,
        }
    }

    /// Called per delivery: keeps the older mark one to two seconds back.
    pub(crate) fn tick(&mut self) {
        if self.newer.0.elapsed() >= Duration::from_secs(1) {
            self.older = self.newer;
            self.newer = (Instant::now(), acks_sent());
        }
    }

    /// Acknowledgements sent since the older mark.
    pub(crate) fn recent(&self) -> u64 {
        acks_sent().saturating_sub(self.older.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grace_grows_past_the_soft_limit() {
        let fast = Duration::from_millis(50);
        assert_eq!(grace_after(32, fast), SETTLE_GRACE);
        assert_eq!(grace_after(33, fast), Duration::from_secs(1));
        assert_eq!(
            grace_after(33, Duration::from_secs(2)),
            Duration::from_secs(8)
        );
        assert_eq!(
            grace_after(33, Duration::from_secs(5)),
            Duration::from_secs(10)
        );
    }

    #[test]
    fn recent_acknowledgements_include_those_before_the_release() {
        let marks = AckMarks::new();
        count_acks(40);
        assert!(marks.recent() >= 40);
    }
}
