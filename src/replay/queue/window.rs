//! How many messages a queue replay keeps unsettled (published, or confirmed with their DLQ
//! copy not yet acknowledged) when `--window` is not given: chosen from what the broker
//! sustains. It starts at `START` and doubles after each round (one window's worth of settled
//! messages) that kept up with the round before; it halves after a round much slower than
//! that, and whenever the broker blocks publishing; never beyond `MAX`, which is the
//! run's duplicate bound (stated in the plan and the report). A wider window that moves no
//! faster costs nothing the bound does not already state, so a steady broker gets `MAX`. `--window N` fixes it at N, and
//! `--rate` at the default, or lower where a DLQ's consumer timeout asks (`paced_ahead`).

use std::time::{Duration, Instant};

/// Where an adaptive window starts: the fixed default of earlier versions.
pub(crate) const START: usize = 64;
/// The most an adaptive window grows to: the duplicate bound of a run without `--window`.
pub(crate) const MAX: usize = 1024;
const MIN: usize = 16;
/// A round that keeps this share of the previous round's rate grows the window (noise).
const KEEP_UP: f64 = 0.90;
/// A round slower than this share of the previous one shrinks it.
const SHRINK: f64 = 0.60;

/// The window a queue replay with these options uses: fixed by `--window N` or `--rate`
/// (paced, a wider window moves nothing faster), adaptive otherwise. `ahead`: the least
/// `paced_ahead` of the run's DLQs; a paced window is at most half of it, since a take's
/// credit is about twice its caller's window.
pub(crate) fn of(common: &crate::replay::ReplayCommon, ahead: Option<u64>) -> Window {
    let fixed = common.window_fixed || common.rate.is_some();
    Window::new(fixed.then_some(common.window.get())).fit(ahead)
}

/// What a take paced by `--rate` may hold ahead of its moves where a DLQ sets its own
/// consumer timeout (`timeout_ms`): the last of them waits that many / rate seconds, and
/// RabbitMQ takes back what a consumer holds longer than the timeout, stopping the run. Half
/// the timeout's worth, for the broker's coarse timer and the confirms; at least 2.
pub(crate) fn paced_ahead(rate: Option<f64>, timeout_ms: Option<u64>) -> Option<u64> {
    let (rate, ms) = (rate?, timeout_ms?);
    Some(((rate * ms as f64 / 2000.0) as u64).max(2))
}

#[derive(Debug, Clone)]
pub(crate) struct Window {
    cur: usize,
    adaptive: bool,
    round_start: Option<Instant>,
    round_settled: usize,
    /// The previous round's rate (messages per second).
    last: f64,
    /// Lowered below `--window` to fit a DLQ's consumer timeout (`of`).
    fitted: bool,
}

impl Window {
    /// `fixed`: `--window N`.
    pub(crate) fn new(fixed: Option<usize>) -> Window {
        Window {
            cur: fixed.unwrap_or(START),
            adaptive: fixed.is_none(),
            round_start: None,
            round_settled: 0,
            last: 0.0,
            fitted: false,
        }
    }

    /// A fixed window lowered to half of `ahead` where that is less (see `of`).
    fn fit(mut self, ahead: Option<u64>) -> Window {
        let Some(a) = ahead.filter(|_| !self.adaptive) else {
            return self;
        };
        let most = usize::try_from(a / 2).unwrap_or(usize::MAX).max(1);
        if most < self.cur {
            (self.cur, self.fitted) = (most, true);
        }
        self
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
            false if self.fitted => format!(
                "at most {} unsettled at once (below --window, so that each message moves within half of a DLQ's consumer timeout at this --rate)",
                self.cur
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
        // Against the previous round, not the best ever: one short, lucky round early on
        // must not make every later one look like a collapse.
        if rate >= self.last * KEEP_UP {
            self.cur = (self.cur * 2).min(MAX);
        } else if rate < self.last * SHRINK {
            self.cur = (self.cur / 2).max(MIN);
        }
        self.last = rate;
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
    fn grows_while_the_broker_keeps_up_and_stops_at_the_bound() {
        let mut w = Window::new(None);
        let mut t = Instant::now();
        w.settled(1, t, false);
        rounds(&mut w, &mut t, 1000.0, 10);
        assert_eq!(w.current(), MAX);
        assert_eq!(w.bound(), MAX);
        // Noise within 10% does not shrink it.
        rounds(&mut w, &mut t, 950.0, 3);
        assert_eq!(w.current(), MAX);
    }

    #[test]
    fn a_collapse_or_a_block_halves_it_down_to_the_floor() {
        let mut w = Window::new(None);
        let mut t = Instant::now();
        w.settled(1, t, false);
        rounds(&mut w, &mut t, 1000.0, 2);
        assert_eq!(w.current(), START * 4);
        rounds(&mut w, &mut t, 300.0, 1);
        assert_eq!(w.current(), START * 2);
        w.settled(1, t, true);
        assert_eq!(w.current(), START);
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

    #[test]
    fn a_paced_window_fits_a_consumer_timeout() {
        // 30/s within a 3 s timeout: 45 held ahead at most, so a window of 22.
        assert_eq!(paced_ahead(Some(30.0), Some(3_000)), Some(45));
        assert_eq!(paced_ahead(Some(0.5), Some(1_000)), Some(2));
        assert_eq!(paced_ahead(None, Some(3_000)), None);
        assert_eq!(paced_ahead(Some(30.0), None), None);
        let w = Window::new(Some(64)).fit(Some(45));
        assert_eq!((w.current(), w.bound()), (22, 22));
        assert!(
            w.describe().contains("consumer timeout"),
            "{}",
            w.describe()
        );
        // Room enough, or no bound: the window stays; an adaptive one is never fitted.
        let w = Window::new(Some(64)).fit(Some(1_000));
        assert_eq!((w.current(), w.describe().contains("timeout")), (64, false));
        assert_eq!(Window::new(Some(64)).fit(None).current(), 64);
        assert_eq!(Window::new(Some(64)).fit(Some(2)).current(), 1);
        assert_eq!(Window::new(None).fit(Some(10)).bound(), MAX);
    }
}
