//! How many messages a queue replay keeps unsettled (published, or confirmed with their DLQ
//! copy not yet acknowledged) when `--window` is not given: chosen from what the broker
//! sustains. It starts at `START`, doubles after a round (one window's worth of settled
//! messages) that moved faster than the best round so far, halves after one that moved much
//! slower, and halves whenever the broker blocks publishing; never beyond `MAX`, which is the
//! run's duplicate bound (stated in the plan and the report). `--window N` fixes it at N, and
//! `--rate` at the default.

use std::time::{Duration, Instant};

/// Where an adaptive window starts: the fixed default of earlier versions.
pub(crate) const START: usize = 64;
/// The most an adaptive window grows to: the duplicate bound of a run without `--window`.
pub(crate) const MAX: usize = 1024;
const MIN: usize = 16;
/// A round must beat the best rate by this much to grow the window (noise is not progress).
const GROW: f64 = 1.10;
/// A round slower than this share of the best shrinks it.
const SHRINK: f64 = 0.60;

/// The window a queue replay with these options uses: fixed by `--window N` or `--rate`
/// (paced, a wider window moves nothing faster), adaptive otherwise.
pub(crate) fn of(common: &crate::replay::ReplayCommon) -> Window {
    let fixed = common.window_fixed || common.rate.is_some();
    Window::new(fixed.then_some(common.window.get()))
}

#[derive(Debug, Clone)]
pub(crate) struct Window {
    cur: usize,
    adaptive: bool,
    round_start: Option<Instant>,
    round_settled: usize,
    best: f64,
}

impl Window {
    /// `fixed`: `--window N`.
    pub(crate) fn new(fixed: Option<usize>) -> Window {
        Window {
            cur: fixed.unwrap_or(START),
            adaptive: fixed.is_none(),
            round_start: None,
            round_settled: 0,
            best: 0.0,
        }
    }

    /// Unsettled messages allowed now.
    pub(crate) fn current(&self) -> usize {
        self.cur
    }

    /// The most that can be unsettled at any time in this run: the duplicate bound.
    pub(crate) fn bound(&self) -> usize {
        if self.adaptive { MAX } else { self.cur }
    }

    /// For the plan: how the window is chosen.
    pub(crate) fn describe(&self) -> String {
        match self.adaptive {
            true => format!(
                "at most {MAX} unsettled at once (the window adapts from {START} to what the broker sustains; --window N fixes it)"
            ),
            false => format!("at most {} unsettled at once", self.cur),
        }
    }

    /// `n` messages settled at `now`; `blocked`: the broker blocks publishing.
    pub(crate) fn settled(&mut self, n: usize, now: Instant, blocked: bool) {
        if !self.adaptive || n == 0 {
            return;
        }
        if blocked {
            self.cur = (self.cur / 2).max(MIN);
            self.round_start = None;
            return;
        }
        let start = *self.round_start.get_or_insert(now);
        self.round_settled += n;
        if self.round_settled < self.cur {
            return;
        }
        let took = now
            .saturating_duration_since(start)
            .max(Duration::from_micros(100));
        let rate = self.round_settled as f64 / took.as_secs_f64();
        if rate >= self.best * GROW {
            self.best = rate;
            self.cur = (self.cur * 2).min(MAX);
        } else if rate < self.best * SHRINK {
            self.best = rate;
            self.cur = (self.cur / 2).max(MIN);
        }
        self.round_start = Some(now);
        self.round_settled = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Settles rounds at `rate` messages per second.
    fn rounds(w: &mut Window, t: &mut Instant, rate: f64, count: usize) {
        for _ in 0..count {
            let n = w.current();
            *t += Duration::from_secs_f64(n as f64 / rate);
            w.settled(n, *t, false);
        }
    }

    #[test]
    fn grows_while_the_rate_keeps_rising_and_stops_at_the_bound() {
        let mut w = Window::new(None);
        let mut t = Instant::now();
        w.settled(1, t, false);
        // Each doubling brings 50% more: the window climbs to MAX and stays there.
        for step in 0..8 {
            rounds(&mut w, &mut t, 1000.0 * 1.5f64.powi(step), 1);
        }
        assert_eq!(w.current(), MAX);
        assert_eq!(w.bound(), MAX);
    }

    #[test]
    fn a_flat_rate_stops_growth_and_a_collapse_or_a_block_halves_it() {
        let mut w = Window::new(None);
        let mut t = Instant::now();
        w.settled(1, t, false);
        rounds(&mut w, &mut t, 1000.0, 1); // first round sets the best: grows
        rounds(&mut w, &mut t, 1000.0, 5); // no better: stays
        let flat = w.current();
        assert_eq!(flat, START * 2);
        rounds(&mut w, &mut t, 300.0, 1);
        assert_eq!(w.current(), flat / 2);
        w.settled(1, t, true);
        assert_eq!(w.current(), flat / 4);
        for _ in 0..10 {
            w.settled(1, t, true);
        }
        assert_eq!(w.current(), MIN);
    }

    #[test]
    fn a_fixed_window_never_moves() {
        let mut w = Window::new(Some(8));
        let mut t = Instant::now();
        rounds(&mut w, &mut t, 1e6, 20);
        w.settled(5, t, true);
        assert_eq!((w.current(), w.bound()), (8, 8));
        assert_eq!(w.describe(), "at most 8 unsettled at once");
    }
}
