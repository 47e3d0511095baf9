//! Reading a quorum queue without bringing its messages closer to the delivery limit.
//!
//! Before RabbitMQ 4.3 every return of a quorum message counts toward the queue's delivery
//! limit (20 by default from 4.0), whatever the protocol: 20 peeks drop a DLQ. So such a read
//! renews the queue instead of giving messages back (`GiveBack::Renew`): each held message
//! is published again to the queue, through the default exchange, with confirms; once copies
//! are confirmed, their originals are acknowledged (`multiple` on a read's channel). A read's
//! one consumer stays live meanwhile, its credit bounded so that it never reaches a copy
//! (`reader::consume_renewing`); a take acknowledges only where no live consumer gains
//! credit. The copies stand at the tail in the original order, with every property and
//! header, less the broker's own delivery counters (`x-delivery-count`, `x-acquired-count`),
//! so their count starts again at 0, and they are not flagged redelivered.
//!
//! What can go wrong, and what is left:
//! - A copy not confirmed (nacked, returned, channel lost): its original and every later one
//!   are given back by closing the channel, counted once; nothing is lost. A confirmed copy
//!   whose original cannot be acknowledged (the channel gone) is there twice, and said so.
//! - dlq killed mid-read: the broker gives back the originals not yet acknowledged, and the
//!   copies confirmed since the last acknowledgement stay too: at most one window and the
//!   publishes in flight are duplicated, nothing is lost. A crash of dlq's node gives them
//!   back too, since the consumer that holds them is live (see `take`'s notes).
//! - Only for a queue with no consumer and no TTL or length limit (`topology::renew_blocker`),
//!   where nothing else can remove an original or take a copy.

use super::Connection;
use super::codec::stored_properties;
use super::publish::{Outcome, Outgoing, Pipeline};
use anyhow::Result;
use lapin::Channel;
use lapin::message::Delivery;
use std::borrow::Cow;

/// Copies handed to lapin together.
const FLUSH_EVERY: usize = 64;

/// Where an original is held: the index of its channel (a taker has one per window; a
/// read has one, index 0) and its delivery tag.
type Held = (usize, u64);

/// A held message to renew: where it is held, and what its copy carries.
pub(crate) struct Kept {
    pub(crate) channel: usize,
    pub(crate) tag: u64,
    pub(crate) properties: lapin::BasicProperties,
    pub(crate) body: Vec<u8>,
}

impl Kept {
    /// What renewing `d`, held on `channel`, needs once its delivery is gone.
    pub(crate) fn of(channel: usize, d: &Delivery) -> Kept {
        Kept {
            channel,
            tag: d.delivery_tag,
            properties: d.properties.clone(),
            body: d.data.clone(),
        }
    }
}

/// The copies of one read or take, in delivery order, and which originals they cover.
pub(crate) struct Renewal {
    pipeline: Pipeline<Held>,
    queue: String,
    staged: usize,
    /// Originals whose copies are confirmed (in order, with no failure before them) and
    /// that are not acknowledged yet.
    to_ack: Vec<Held>,
    pub(crate) copied: u64,
    confirmed: u64,
    /// Originals acknowledged: the messages renewed (a confirmed copy whose original could not
    /// be acknowledged is in the queue twice).
    acked: u64,
    /// Why a copy was not confirmed; from then on nothing more is confirmed or acknowledged.
    failed: Option<String>,
    /// A read's channel, whose one live consumer may gain credit up to this many
    /// acknowledgements: originals are then acknowledged as their copies are confirmed
    /// (`ack_as_confirmed`).
    live: Option<(Channel, u64)>,
    /// (originals acknowledged, when that count was reached), oldest first, at most one
    /// mark per `MARK_EVERY`: for `held_since`.
    acked_at: std::collections::VecDeque<(u64, std::time::Instant)>,
    audit: crate::audit::Audit,
}

/// The finest `Renewal::held_since` tells when a message was delivered: at most ten marks
/// a second (about 14 KiB a minute of reading), dropped once a read asks past them.
const MARK_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

impl Renewal {
    /// Opens the confirm channel and writes the audit start record: a renewal changes the
    /// queue, so none starts without a trace.
    pub(crate) async fn open(conn: &Connection, queue: &str, ready: u64) -> Result<Renewal> {
        let mut audit = crate::audit::renewal(queue, uuid::Uuid::new_v4().to_string());
        audit.start(Some(ready))?;
        Ok(Renewal {
            pipeline: Pipeline::open(conn, None).await?,
            queue: queue.to_string(),
            staged: 0,
            to_ack: Vec::new(),
            copied: 0,
            confirmed: 0,
            acked: 0,
            failed: None,
            live: None,
            acked_at: Default::default(),
            audit,
        })
    }

    /// Publishes the copy of one message held on `channel` (staged; sent every `FLUSH_EVERY`).
    pub(crate) async fn copy(&mut self, channel: usize, d: &Delivery) {
        self.copy_kept(Kept::of(channel, d)).await;
    }

    /// `copy`, of a message whose delivery is gone (a take that deferred its copies).
    pub(crate) async fn copy_kept(&mut self, kept: Kept) {
        let Kept {
            channel,
            tag,
            mut properties,
            body,
        } = kept;
        // As stored: an empty header table left behind would change a content id.
        if let Cow::Owned(stored) = stored_properties(&properties) {
            properties = stored;
        }
        let msg = Outgoing {
            exchange: String::new(),
            routing_key: self.queue.clone(),
            body,
            properties,
        };
        self.pipeline.stage(msg, (channel, tag));
        self.copied += 1;
        self.staged += 1;
        if self.staged >= FLUSH_EVERY {
            self.staged = 0;
            self.pipeline.flush().await;
        }
        while let Some((tag, outcome)) = self.pipeline.try_next() {
            self.settle_one(tag, outcome);
        }
        if self.to_ack.len() >= FLUSH_EVERY {
            self.ack_live().await;
        }
    }

    /// Acknowledges confirmed originals on a read's live channel, within its bound
    /// (`ack_as_confirmed`); nothing without one.
    async fn ack_live(&mut self) {
        if let Some((ch, most)) = self.live.clone() {
            // A failed ack fails the read's channel: the read sees that on its own.
            let _ = self
                .ack_confirmed_first(&ch, most.saturating_sub(self.acked))
                .await;
        }
    }

    /// Acknowledges originals on `ch` as their copies are confirmed, as long as no more than
    /// `most` are acknowledged in all: a crash of dlq then leaves few messages twice.
    pub(crate) fn ack_as_confirmed(&mut self, ch: &Channel, most: u64) {
        self.live = Some((ch.clone(), most));
    }

    fn settle_one(&mut self, held: Held, outcome: Result<Outcome>) {
        if self.failed.is_some() {
            return;
        }
        match outcome {
            Ok(Outcome::Confirmed) => {
                self.confirmed += 1;
                self.to_ack.push(held);
            }
            Ok(Outcome::Nacked) => self.failed = Some("the broker refused a copy (nack)".into()),
            Ok(Outcome::Returned { code, text }) => {
                self.failed = Some(format!("a copy was returned unroutable ({code} {text})"))
            }
            Err(e) => self.failed = Some(format!("{e:#}")),
        }
    }

    /// Waits for every copy's confirm.
    pub(crate) async fn settle(&mut self) {
        while let Some((tag, outcome)) = self.pipeline.next().await {
            self.settle_one(tag, outcome);
        }
    }

    /// Acknowledges, in one `multiple` ack on the read's channel, the originals whose copies
    /// are confirmed: a read holds every message on it, and copies are confirmed in order.
    /// Only once the consumers that delivered them are cancelled: an ack gives a live
    /// consumer credit for one more message, which could be a copy.
    pub(crate) async fn ack_confirmed(&mut self, ch: &Channel) -> Result<()> {
        self.ack_confirmed_first(ch, u64::MAX).await.map(drop)
    }

    /// Like `ack_confirmed`, for at most `max` of the oldest confirmed originals: a live
    /// consumer gets one credit per acknowledgement, which the caller bounds. How many.
    pub(crate) async fn ack_confirmed_first(&mut self, ch: &Channel, max: u64) -> Result<u64> {
        let n = self
            .to_ack
            .len()
            .min(usize::try_from(max).unwrap_or(usize::MAX));
        let Some(&(_, upto)) = n.checked_sub(1).and_then(|i| self.to_ack.get(i)) else {
            return Ok(0);
        };
        super::ack(ch, upto, true).await?;
        self.to_ack.drain(..n);
        self.acked += n as u64;
        let now = std::time::Instant::now();
        let due = |&(_, at): &(u64, std::time::Instant)| now.duration_since(at) >= MARK_EVERY;
        if self.acked_at.back().is_none_or(due) {
            self.acked_at.push_back((self.acked, now));
        }
        Ok(n as u64)
    }

    /// For a read whose one consumer holds at most `credit` unacknowledged
    /// (`reader::consume_renewing`), acknowledging as it goes: the earliest RabbitMQ can have
    /// delivered the oldest original not acknowledged yet, from which its consumer timeout
    /// counts. It delivers the `i`th message (from 0) once `i + 1 - credit` are
    /// acknowledged, so that is when dlq had acknowledged as many (a mark at or before it).
    /// `None`: it may have come with the first credit, at the read's start.
    pub(crate) fn held_since(&mut self, credit: u64) -> Option<std::time::Instant> {
        let k = (self.acked + 1).checked_sub(credit).filter(|&k| k > 0)?;
        while self.acked_at.get(1).is_some_and(|&(c, _)| c <= k) {
            self.acked_at.pop_front();
        }
        let first = self.acked_at.front().filter(|&&(c, _)| c <= k);
        first.map(|&(_, at)| at)
    }

    /// Acknowledges, one by one and oldest first, at most `max` originals held on the take
    /// channel `index` (`ch`) whose copies are confirmed; the others stay for later. How many.
    pub(crate) async fn ack_on(&mut self, index: usize, ch: &Channel, max: u64) -> Result<u64> {
        if max == 0 || !self.to_ack.iter().any(|&(i, _)| i == index) {
            return Ok(0);
        }
        let mut n = 0u64;
        let mut rest = Vec::with_capacity(self.to_ack.len());
        let mut failure = None;
        for (i, tag) in std::mem::take(&mut self.to_ack) {
            if i != index || n >= max || failure.is_some() {
                rest.push((i, tag));
                continue;
            }
            match super::ack(ch, tag, false).await {
                Ok(()) => n += 1,
                Err(e) => {
                    rest.push((i, tag));
                    failure = Some(e);
                }
            }
        }
        self.to_ack = rest;
        self.acked += n;
        failure.map_or(Ok(n), |e| Err(e.into()))
    }

    /// Copies published whose originals are not acknowledged yet, while nothing failed:
    /// `settle` and an acknowledgement would renew them.
    pub(crate) fn unacknowledged(&self) -> bool {
        self.failed.is_none() && self.copied > self.acked
    }

    /// Why a copy was not confirmed, once one was not: nothing after it is acknowledged.
    pub(crate) fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// Acknowledges each original whose copy is confirmed on its own channel. A take holds
    /// the messages it moves beside those it keeps, so `multiple` only over a run that
    /// begins right after `settled[i]` (channel `i`'s tags up to it are settled, which this
    /// keeps true): a run of a channel's first deliveries, all kept. One settle command on a
    /// quorum queue, not one per message: 40,000 single ones took 1.3 s on 4.0.5, and then
    /// a 10-s wait before the close, for the queue to apply them (`settle_grace_after`).
    pub(crate) async fn ack_each(
        &mut self,
        channels: &[Channel],
        settled: &mut [u64],
    ) -> Result<()> {
        let to_ack = std::mem::take(&mut self.to_ack);
        let mut at = 0;
        while let Some(&(i, _)) = to_ack.get(at) {
            let ch = channels
                .get(i)
                .ok_or_else(|| anyhow::anyhow!("no take channel {i}"))?;
            let from = settled.get(i).map_or(0, |s| s + 1);
            let here = to_ack[at..].iter().take_while(|h| h.0 == i).map(|h| h.1);
            let run = super::take::run_from(from, here);
            // Outside a run, one message alone.
            let n = run.max(1);
            let last = to_ack[at + n - 1].1;
            super::ack(ch, last, run > 1).await?;
            self.acked += n as u64;
            if let Some(s) = settled.get_mut(i).filter(|_| run > 0) {
                *s = last;
            }
            at += n;
        }
        Ok(())
    }

    /// Messages renewed (copy confirmed, original acknowledged): none of them goes back.
    pub(crate) fn renewed(&self) -> u64 {
        self.acked
    }

    /// Messages held and not renewed: given back by the channel's close.
    pub(crate) fn unrenewed(&self, held: u64) -> u64 {
        held.saturating_sub(self.acked)
    }

    /// The audit end record and what the user must hear. `unread`: the most that may have
    /// been delivered beyond `held` and given back with it (a read stopped early); `lost`:
    /// the connection was lost, and up to how many acknowledgements sent may not have been
    /// applied.
    pub(crate) fn finish(
        mut self,
        held: u64,
        unread: u64,
        lost: Option<u64>,
        error: Option<&anyhow::Error>,
    ) -> Vec<String> {
        let left = self.unrenewed(held);
        let most = left + unread;
        let why = self
            .failed
            .clone()
            .or_else(|| error.map(|e| format!("{e:#}")));
        // Not lapin's "invalid channel state" of the publish or acknowledgement it then tried.
        let why = why.map(|w| match lost {
            Some(_) => super::named_loss(w),
            None => w,
        });
        self.audit.finish(self.acked, most, why.clone());
        let q = &self.queue;
        let mut notes = vec![format!(
            "{q:?}: renewed {} message(s) so that reading does not bring them closer to the delivery limit: each was put back at the tail as a confirmed copy with every property and header (delivery count reset to 0) and the original acknowledged",
            self.acked
        )];
        let doubled = self.confirmed.saturating_sub(self.acked);
        if doubled > 0 {
            notes.push(format!(
                "{q:?}: {doubled} message(s) are there twice: their copies were confirmed but the originals could not be acknowledged"
            ));
        }
        // Acknowledgements on their way when the connection was lost may never have been
        // applied: their originals came back beside their copies (79 of 7,296 renewed, once
        // in 8 loaded runs on 3.10.8, unsaid). A consumer holds at most its credit
        // unacknowledged, so they are at most as many as it had room for beyond what was
        // held, `unread`; under load that bound said 0 where 67 were (3.10.8, CI, stop 67):
        // the caller's `lost` bound.
        if let Some(doubt) = lost.filter(|&d| d > 0) {
            notes.push(format!(
                "{q:?}: up to {doubt} more message(s) may be there twice: the connection was lost, and the last acknowledgements of renewed originals may not have reached RabbitMQ"
            ));
        }
        // A lost connection's give-back counted none on 3.10.8 and 4.0.5 for a take (a
        // replay of 2,000 cut after 100 moved) and 2,000 for a read: not always every one.
        let up_to = if unread > 0 || lost.is_some() {
            "up to "
        } else {
            ""
        };
        if most > 0 {
            notes.push(format!(
                "{q:?}: {up_to}{most} message(s) were given back instead of renewed (their delivery count went up by 1): {}",
                why.unwrap_or_else(|| "the read stopped".into())
            ));
        }
        notes
    }
}
