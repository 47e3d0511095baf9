//! `--rate`: spacing sends evenly, for every broker (RabbitMQ publishes and Redis pushes alike).

use std::time::Duration;

/// Spaces publishes evenly to honour `--rate`.
pub(crate) struct Pace {
    interval: Option<Duration>,
    next: tokio::time::Instant,
}

impl Pace {
    pub(crate) fn new(rate: Option<f64>) -> Pace {
        let interval = rate
            .filter(|r| *r > 0.0)
            .map(|r| Duration::from_secs_f64(1.0 / r));
        Pace {
            interval,
            next: tokio::time::Instant::now(),
        }
    }

    /// Waits for this message's slot. Slots follow a schedule, not a gap after each send:
    /// a sleep that overshot (timers are coarse at high rates) is made up by the next ones,
    /// so the rate achieved is the rate asked. A run held up longer (waiting for confirms)
    /// catches up at most `CATCH_UP` worth of slots, so it never bursts far above the rate.
    pub(crate) async fn wait(&mut self) {
        const CATCH_UP: Duration = Duration::from_millis(100);
        if let Some(i) = self.interval {
            tokio::time::sleep_until(self.next).await;
            let floor = tokio::time::Instant::now()
                .checked_sub(CATCH_UP)
                .unwrap_or(self.next);
            self.next = self.next.max(floor) + i;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Pace;
    use std::time::Duration;
    use tokio::time::{Instant, advance};

    /// Sends `n` messages at `rate`, each taking `work` after its slot; returns the rate achieved.
    async fn achieved(rate: f64, n: u32, work: Duration) -> f64 {
        let mut pace = Pace::new(Some(rate));
        let start = Instant::now();
        for _ in 0..n {
            pace.wait().await;
            advance(work).await;
        }
        f64::from(n) / start.elapsed().as_secs_f64()
    }

    /// #17.6: `--rate N` delivers N a second, not N less the time each send takes (the old
    /// fixed gap after each send gave 500 -> 320/s, 1000 -> 474/s).
    #[tokio::test(start_paused = true)]
    async fn the_rate_asked_is_the_rate_delivered() {
        for rate in [500.0, 1000.0, 4000.0] {
            // Each send takes a fifth of its slot, as publishing does.
            let work = Duration::from_secs_f64(0.2 / rate);
            let got = achieved(rate, 2_000, work).await;
            assert!(
                (got - rate).abs() / rate < 0.01,
                "asked {rate}/s, got {got:.0}/s"
            );
        }
    }

    /// A run held up (waiting for confirms) catches up at most 100 ms of slots: no burst far
    /// above the rate afterwards.
    #[tokio::test(start_paused = true)]
    async fn a_stall_is_made_up_only_briefly() {
        let mut pace = Pace::new(Some(100.0));
        pace.wait().await;
        advance(Duration::from_secs(5)).await;
        let start = Instant::now();
        for _ in 0..30 {
            pace.wait().await;
        }
        // 10 slots (100 ms) come at once, the other 20 at the rate: ~200 ms, not 0.
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(190) && took <= Duration::from_millis(210),
            "{took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn no_rate_never_waits() {
        let mut pace = Pace::new(None);
        let start = Instant::now();
        for _ in 0..1000 {
            pace.wait().await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
}
