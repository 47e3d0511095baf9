//! How many acknowledgements a take channel may still send while its consumer is live.
//!
//! On a live consumer every acknowledgement gives credit for one more message. A renewing
//! take puts its copies at the tail, right behind the messages it counted at the start, so
//! credit past those reaches the copies: they were delivered, held and given back with a
//! delivery counted (128 of 200 copies in a 300-message quorum DLQ, 1,536 of 2,000 in
//! 3,000, measured on 4.0), and under load came back out of order. Once copies exist, a
//! consumer with `batch` credit that started after `start` of `want` messages may take
//! `want - start - batch` acknowledgements; the rest wait until it is cancelled, at the end
//! of the take (once it has taken every message it counted, or when the mover stops).
//!
//! Shared by the take, which acknowledges kept originals, and the mover, which acknowledges
//! moved ones on the same channel.

use std::sync::{Arc, Mutex};

#[derive(Debug, Clone, Copy)]
struct State {
    /// Acknowledgements sent on the channel while its consumer was live.
    acked: u64,
    /// At most this many in all; `u64::MAX` while unbounded.
    most: u64,
}

/// A take channel's acknowledgement budget (see the module's notes). Cheap to clone.
#[derive(Debug, Clone, Default)]
pub(crate) struct AckBudget(Option<Arc<Mutex<State>>>);

impl AckBudget {
    /// A channel whose acknowledgements never need bounding.
    pub(crate) fn unbounded() -> AckBudget {
        AckBudget(None)
    }

    /// A continuous consumer's channel: counts its acknowledgements, unbounded until `bound`.
    pub(crate) fn counting() -> AckBudget {
        AckBudget(Some(Arc::new(Mutex::new(State {
            acked: 0,
            most: u64::MAX,
        }))))
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> Option<T> {
        self.0
            .as_ref()
            .map(|s| f(&mut s.lock().expect("not poisoned")))
    }

    /// How many acknowledgements may be sent now.
    pub(crate) fn room(&self) -> u64 {
        self.with(|s| match s.most {
            u64::MAX => u64::MAX,
            most => most.saturating_sub(s.acked),
        })
        .unwrap_or(u64::MAX)
    }

    /// Acknowledgements sent on the channel while its consumer was live (0 if not counted).
    pub(crate) fn sent(&self) -> u64 {
        self.with(|s| s.acked).unwrap_or(0)
    }

    /// `n` acknowledgements were sent.
    pub(crate) fn spend(&self, n: u64) {
        self.with(|s| s.acked += n);
    }

    /// From now on at most `most` acknowledgements in all (counting those sent already).
    pub(crate) fn bound(&self, most: u64) {
        self.with(|s| s.most = most);
    }

    /// No acknowledgement beyond those sent already, until `lift`.
    pub(crate) fn freeze(&self) {
        self.with(|s| s.most = s.acked);
    }

    /// The consumer is cancelled: acknowledgements give it nothing any more.
    pub(crate) fn lift(&self) {
        self.with(|s| s.most = u64::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::AckBudget;

    #[test]
    fn counts_before_the_bound_and_frees_everything_when_lifted() {
        let b = AckBudget::counting();
        b.spend(5);
        assert_eq!(b.room(), u64::MAX);
        b.bound(8);
        assert_eq!(b.room(), 3);
        b.spend(3);
        assert_eq!(b.room(), 0);
        b.lift();
        assert_eq!(b.room(), u64::MAX);
    }

    #[test]
    fn a_frozen_budget_sends_nothing_more_until_lifted() {
        let b = AckBudget::counting();
        b.spend(7);
        b.freeze();
        assert_eq!(b.room(), 0);
        b.lift();
        assert_eq!(b.room(), u64::MAX);
    }

    #[test]
    fn a_bound_below_what_was_sent_leaves_no_room() {
        let b = AckBudget::counting();
        b.spend(10);
        b.bound(4);
        assert_eq!(b.room(), 0);
        let u = AckBudget::unbounded();
        u.bound(0);
        assert_eq!(u.room(), u64::MAX);
    }
}
