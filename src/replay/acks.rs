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
//! writes are collected later. lapin runs each acknowledgement as a task of its own, so two
//! sent together may reach the wire in either order: a channel has at most one multiple
//! acknowledgement in flight, or a lower one arriving second would name a tag the broker
//! has already forgotten, and the broker would close the channel.

use crate::model::RecordId;
use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use lapin::Acker;
use lapin::options::BasicAckOptions;
use std::collections::HashMap;

/// One confirmed message's acknowledgement, as sent.
pub struct Acked {
    /// Index of its DLQ.
    pub queue: usize,
    pub id: RecordId,
    /// `Ok(true)`: sent; anything else: the message may now be in both places.
    pub result: Result<bool, lapin::Error>,
}

struct Chan {
    /// The tag a batch acknowledgement can extend to next.
    next: u64,
    batch: bool,
    /// Acker of the highest confirmed tag of the batch, and the messages it covers.
    last: Option<Acker>,
    covered: Vec<RecordId>,
    /// Single mode: messages to acknowledge one by one at the next send.
    single: Vec<(RecordId, Acker)>,
    /// A multiple acknowledgement of this channel is being written.
    in_flight: bool,
}

impl Chan {
    fn new() -> Chan {
        Chan {
            next: 1,
            batch: true,
            last: None,
            covered: Vec::new(),
            single: Vec::new(),
            in_flight: false,
        }
    }
}

/// One acknowledgement being written: the channel of a multiple one, and how it went.
type Sending = std::pin::Pin<
    Box<dyn std::future::Future<Output = (Option<(usize, usize)>, Vec<Acked>)> + Send>,
>;

/// Acknowledgements waiting to be sent, per (DLQ index, take channel index), and those
/// handed to lapin but not yet written.
#[derive(Default)]
pub struct Acks {
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
    pub fn pending(&self) -> usize {
        self.waiting + self.in_sending
    }

    /// Whether acknowledgements are being written (or written and not yet reported).
    pub fn sending(&self) -> bool {
        !self.sending.is_empty() || !self.done.is_empty()
    }

    /// A message whose publish was cleanly confirmed: acknowledged at the next send.
    pub fn confirmed(&mut self, queue: usize, chan: usize, tag: u64, acker: Acker, id: RecordId) {
        let c = self.chans.entry((queue, chan)).or_insert_with(Chan::new);
        if c.batch && tag == c.next {
            c.next = tag + 1;
            c.last = Some(acker);
            c.covered.push(id);
        } else {
            c.batch = false;
            c.single.push((id, acker));
        }
        self.waiting += 1;
    }

    /// A taken message of this channel that will not be acknowledged: batches on that
    /// channel cannot reach past it any more.
    pub fn not_moved(&mut self, queue: usize, chan: usize) {
        self.chans
            .entry((queue, chan))
            .or_insert_with(Chan::new)
            .batch = false;
    }

    /// Hands the waiting acknowledgements to lapin now (a batch as one frame per channel,
    /// unless that channel's previous one is still being written; the rest one per
    /// message), without waiting for the writes: `written` and `next_written` say how each
    /// went.
    pub fn send(&mut self) {
        if self.waiting == 0 {
            return;
        }
        let mut sends: Vec<Sending> = Vec::new();
        for (&(queue, chan), c) in self.chans.iter_mut() {
            if !c.in_flight
                && let Some(acker) = c.last.take()
            {
                let ids = std::mem::take(&mut c.covered);
                c.in_flight = true;
                self.waiting -= ids.len();
                self.in_sending += ids.len();
                sends.push(Box::pin(async move {
                    let r = acker.ack(BasicAckOptions { multiple: true }).await;
                    (Some((queue, chan)), fan_out(queue, ids, r))
                }));
            }
            for (id, acker) in c.single.drain(..) {
                self.waiting -= 1;
                self.in_sending += 1;
                sends.push(Box::pin(async move {
                    let r = acker.ack(BasicAckOptions::default()).await;
                    (
                        None,
                        vec![Acked {
                            queue,
                            id,
                            result: r,
                        }],
                    )
                }));
            }
        }
        // The first poll queues the acknowledgement in lapin, now.
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        for mut s in sends {
            match s.as_mut().poll(&mut cx) {
                std::task::Poll::Ready(out) => self.finished(out),
                std::task::Poll::Pending => self.sending.push(s),
            }
        }
    }

    /// The acknowledgements written since the last call, without waiting.
    pub fn written(&mut self) -> Vec<Acked> {
        while let Some(Some(out)) = self.sending.next().now_or_never() {
            self.finished(out);
        }
        std::mem::take(&mut self.done)
    }

    /// Waits for the next acknowledgement write; `None` when none is being sent.
    pub async fn next_written(&mut self) -> Option<Vec<Acked>> {
        if self.done.is_empty() {
            let out = self.sending.next().await?;
            self.finished(out);
        }
        Some(std::mem::take(&mut self.done))
    }

    fn finished(&mut self, (chan, acked): (Option<(usize, usize)>, Vec<Acked>)) {
        if let Some(c) = chan.and_then(|k| self.chans.get_mut(&k)) {
            c.in_flight = false;
        }
        self.in_sending = self.in_sending.saturating_sub(acked.len());
        self.done.extend(acked);
    }

    /// Sends every waiting acknowledgement and waits until all are written.
    pub async fn flush(&mut self) -> Vec<Acked> {
        let mut out = Vec::new();
        loop {
            self.send();
            match self.next_written().await {
                Some(acked) => out.extend(acked),
                None if self.waiting == 0 => return out,
                None => {} // cannot happen: nothing in flight lets every batch go
            }
        }
    }
}

fn fan_out(queue: usize, ids: Vec<RecordId>, r: Result<bool, lapin::Error>) -> Vec<Acked> {
    ids.into_iter()
        .map(|id| Acked {
            queue,
            id,
            result: match &r {
                Ok(b) => Ok(*b),
                Err(e) => Err(e.clone()),
            },
        })
        .collect()
}
