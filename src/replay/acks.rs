//! Acknowledging moved DLQ messages in batches.
//!
//! One `basic.ack` with `multiple` covers every unacknowledged delivery up to its tag on that
//! channel, so it is only sent while everything the channel delivered up to there has been
//! confirmed in its destination: a take channel delivers tags 1, 2, 3 … in queue order and
//! the move publishes in that order, so a channel stays in batch mode while each confirm is
//! for the next tag. The first tag that will not be acknowledged (not selected, returned,
//! nacked) switches that channel to one acknowledgement per message for the rest of the run.
//! Batching halved what the broker spends on acknowledgements in a full replay.
//!
//! Acknowledgements are handed to lapin as soon as their messages are confirmed, and their
//! writes are collected later. They go through the take channel itself, which queues the
//! frame when called, in call order: a delivery's `Acker` runs each acknowledgement as a
//! task of its own, so two sent together could reach the wire in either order, and a
//! multiple acknowledgement arriving after a higher one names a tag the broker has already
//! forgotten (it closes the channel). It also costs a hand-off between threads each.
//!
//! A take channel whose consumer is live may have an acknowledgement budget
//! (`rabbit::AckBudget`): what is beyond it waits, still counted as unsettled, until the take
//! cancels that consumer.

use crate::model::RecordId;
use crate::rabbit::AckBudget;
use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use lapin::Channel;
use std::collections::HashMap;

/// One confirmed message's acknowledgement, as sent.
pub(crate) struct Acked {
    /// Index of its DLQ.
    pub(crate) queue: usize,
    pub(crate) id: RecordId,
    /// `Ok`: written; an error: the message may now be in both places.
    pub(crate) result: Result<(), lapin::Error>,
}

struct Chan {
    /// The tag a batch acknowledgement can extend to next.
    next: u64,
    batch: bool,
    /// The highest confirmed tag of the batch, and the messages it covers.
    last: Option<u64>,
    covered: Vec<RecordId>,
    /// Single mode: messages to acknowledge one by one at the next send.
    single: Vec<(RecordId, u64)>,
    /// The take channel, which delivered these tags, and its budget.
    channel: Channel,
    budget: AckBudget,
}

impl Chan {
    fn new(channel: Channel, budget: AckBudget) -> Chan {
        Chan {
            next: 1,
            batch: true,
            last: None,
            covered: Vec::new(),
            single: Vec::new(),
            channel,
            budget,
        }
    }

    /// The acknowledgements this channel may send now, oldest first, within its budget: the
    /// batch first (its tags all come before the single ones). How many messages they cover.
    fn due(&mut self, queue: usize) -> (Vec<Sending>, usize) {
        let mut room = usize::try_from(self.budget.room()).unwrap_or(usize::MAX);
        let mut sends = Vec::new();
        let mut covered = 0;
        if let Some(last) = self.last {
            let n = self.covered.len().min(room);
            if n > 0 {
                // The batch's tags run up to `last` without a gap.
                let upto = last - (self.covered.len() - n) as u64;
                let ids: Vec<RecordId> = self.covered.drain(..n).collect();
                sends.push(ack(queue, self.channel.clone(), upto, true, ids));
                room -= n;
                covered += n;
            }
            if self.covered.is_empty() {
                self.last = None;
            }
        }
        let n = match self.last {
            Some(_) => 0,
            None => self.single.len().min(room),
        };
        for (id, tag) in self.single.drain(..n) {
            sends.push(ack(queue, self.channel.clone(), tag, false, vec![id]));
        }
        (sends, covered + n)
    }
}

/// One acknowledgement being written, and how it went.
type Sending = std::pin::Pin<Box<dyn std::future::Future<Output = Vec<Acked>> + Send>>;

/// Acknowledgements waiting to be sent, per (DLQ index, take channel index), and those
/// handed to lapin but not yet written.
#[derive(Default)]
pub(crate) struct Acks {
    chans: HashMap<(usize, usize), Chan>,
    /// Confirmed messages whose acknowledgement is not sent yet.
    waiting: usize,
    sending: FuturesUnordered<Sending>,
    /// Messages covered by `sending`.
    in_sending: usize,
    /// Written at once, not yet reported.
    done: Vec<Acked>,
}

impl Acks {
    /// Confirmed messages whose acknowledgement is not written yet (waiting or being
    /// sent): if dlq died now, these would be both in their destination and in the DLQ.
    pub(crate) fn pending(&self) -> usize {
        self.waiting + self.in_sending
    }

    /// Whether acknowledgements are being written (or written and not yet reported).
    pub(crate) fn sending(&self) -> bool {
        !self.sending.is_empty() || !self.done.is_empty()
    }

    /// Take channel `chan` of DLQ `queue`, with its acknowledgement budget: announced before
    /// any of its messages is confirmed or skipped.
    pub(crate) fn channel(
        &mut self,
        queue: usize,
        chan: usize,
        channel: &Channel,
        budget: AckBudget,
    ) {
        self.chans
            .entry((queue, chan))
            .or_insert_with(|| Chan::new(channel.clone(), budget));
    }

    fn chan(&mut self, queue: usize, chan: usize) -> &mut Chan {
        self.chans
            .get_mut(&(queue, chan))
            .expect("take channels are announced before their messages")
    }

    /// A message whose publish was cleanly confirmed: acknowledged at the next send.
    pub(crate) fn confirmed(&mut self, queue: usize, chan: usize, tag: u64, id: RecordId) {
        let c = self.chan(queue, chan);
        if c.batch && tag == c.next {
            c.next = tag + 1;
            c.last = Some(tag);
            c.covered.push(id);
        } else {
            c.batch = false;
            c.single.push((id, tag));
        }
        self.waiting += 1;
    }

    /// A taken message of this channel that will not be acknowledged: batches on that
    /// channel cannot reach past it any more.
    pub(crate) fn not_moved(&mut self, queue: usize, chan: usize) {
        self.chan(queue, chan).batch = false;
    }

    /// Hands the waiting acknowledgements to lapin now, in order (a batch as one frame per
    /// channel, the rest one per message) and within each channel's budget, without waiting
    /// for the writes: `written` and `next_written` say how each went.
    pub(crate) fn send(&mut self) {
        if self.waiting == 0 {
            return;
        }
        let mut sends: Vec<Sending> = Vec::new();
        let mut sent = 0;
        for (&(queue, _), c) in self.chans.iter_mut() {
            let (due, n) = c.due(queue);
            c.budget.spend(n as u64);
            sent += n;
            sends.extend(due);
        }
        self.in_sending += sent;
        self.waiting -= sent;
        // The first poll queues the frame in lapin, now, in this order.
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        for mut s in sends {
            match s.as_mut().poll(&mut cx) {
                std::task::Poll::Ready(acked) => self.finished(acked),
                std::task::Poll::Pending => self.sending.push(s),
            }
        }
    }

    /// The acknowledgements written since the last call, without waiting.
    pub(crate) fn written(&mut self) -> Vec<Acked> {
        while let Some(Some(acked)) = self.sending.next().now_or_never() {
            self.finished(acked);
        }
        std::mem::take(&mut self.done)
    }

    /// Waits for the next acknowledgement write; `None` when none is being sent.
    pub(crate) async fn next_written(&mut self) -> Option<Vec<Acked>> {
        if self.done.is_empty() {
            let acked = self.sending.next().await?;
            self.finished(acked);
        }
        Some(std::mem::take(&mut self.done))
    }

    fn finished(&mut self, acked: Vec<Acked>) {
        self.in_sending = self.in_sending.saturating_sub(acked.len());
        self.done.extend(acked);
    }

    /// Sends every waiting acknowledgement and waits until all are written.
    pub(crate) async fn flush(&mut self) -> Vec<Acked> {
        self.send();
        let mut out = Vec::new();
        while let Some(acked) = self.next_written().await {
            out.extend(acked);
        }
        out
    }
}

/// One acknowledgement (up to `tag` with `multiple`) and how it went for each message it covers.
fn ack(queue: usize, ch: Channel, tag: u64, multiple: bool, ids: Vec<RecordId>) -> Sending {
    Box::pin(async move {
        let r = crate::rabbit::ack(&ch, tag, multiple).await;
        ids.into_iter()
            .map(|id| Acked {
                queue,
                id,
                result: r.clone(),
            })
            .collect()
    })
}
