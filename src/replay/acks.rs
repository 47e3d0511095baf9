//! Acknowledging moved DLQ messages in batches.
//!
//! One `basic.ack` with `multiple` covers every unacknowledged delivery up to its tag on that
//! channel, so it is only sent while everything the channel delivered up to there has been
//! confirmed in its destination: a take channel delivers tags 1, 2, 3 … in queue order and
//! the move publishes in that order, so a channel stays in batch mode while each confirm is
//! for the next tag. The first tag that will not be acknowledged (not selected, returned,
//! nacked) switches that channel to one acknowledgement per message for the rest of the run.
//! Batching halved what the broker spends on acknowledgements in a full replay.

use crate::model::RecordId;
use futures_util::future::join_all;
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
    /// Single mode: messages to acknowledge one by one at the next flush.
    single: Vec<(RecordId, Acker)>,
}

impl Chan {
    fn new() -> Chan {
        Chan {
            next: 1,
            batch: true,
            last: None,
            covered: Vec::new(),
            single: Vec::new(),
        }
    }
}

/// Acknowledgements waiting to be sent, per (DLQ index, take channel index).
#[derive(Default)]
pub struct Acks {
    chans: HashMap<(usize, usize), Chan>,
    pending: usize,
}

impl Acks {
    /// Confirmed messages whose acknowledgement waits for the next flush.
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// A message whose publish was cleanly confirmed: acknowledged at the next flush.
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
        self.pending += 1;
    }

    /// A taken message of this channel that will not be acknowledged: batches on that
    /// channel cannot reach past it any more.
    pub fn not_moved(&mut self, queue: usize, chan: usize) {
        self.chans
            .entry((queue, chan))
            .or_insert_with(Chan::new)
            .batch = false;
    }

    /// Sends every waiting acknowledgement (batches as one frame per channel, the rest one
    /// per message, all concurrently) and says how each went.
    pub async fn flush(&mut self) -> Vec<Acked> {
        if self.pending == 0 {
            return Vec::new();
        }
        self.pending = 0;
        let mut sends = Vec::new();
        for (&(queue, _), c) in self.chans.iter_mut() {
            if let Some(acker) = c.last.take() {
                let ids = std::mem::take(&mut c.covered);
                sends.push(Box::pin(async move {
                    let r = acker.ack(BasicAckOptions { multiple: true }).await;
                    fan_out(queue, ids, r)
                })
                    as std::pin::Pin<
                        Box<dyn std::future::Future<Output = Vec<Acked>> + Send>,
                    >);
            }
            for (id, acker) in c.single.drain(..) {
                sends.push(Box::pin(async move {
                    let r = acker.ack(BasicAckOptions::default()).await;
                    vec![Acked {
                        queue,
                        id,
                        result: r,
                    }]
                }));
            }
        }
        join_all(sends).await.into_iter().flatten().collect()
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
