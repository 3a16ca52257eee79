//! Waiting between attempts to reach a socket that fails (an engine's KV-event publisher, a peer
//! router): waits that double from 100 ms to 5 s and start over after a success, and one warning
//! a minute, so that an endpoint down for hours neither spins nor floods the log.

use std::time::{Duration, Instant};

const MIN: Duration = Duration::from_millis(100);
const MAX: Duration = Duration::from_secs(5);
const WARN_EVERY: Duration = Duration::from_secs(60);

#[derive(Debug)]
pub(crate) struct Backoff {
    next: Duration,
    last_warning: Option<Instant>,
}

impl Backoff {
    pub(crate) fn new() -> Self {
        Self {
            next: MIN,
            last_warning: None,
        }
    }

    /// After a failed attempt: `warn` (unless it ran less than a minute ago), then wait.
    pub(crate) async fn failed(&mut self, warn: impl FnOnce()) {
        if self.last_warning.is_none_or(|t| t.elapsed() >= WARN_EVERY) {
            self.last_warning = Some(Instant::now());
            warn();
        }
        tokio::time::sleep(self.next).await;
        self.next = (self.next * 2).min(MAX);
    }

    /// After a successful attempt: the next failure waits the least again.
    pub(crate) fn succeeded(&mut self) {
        self.next = MIN;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn waits_double_to_the_cap_and_start_over_after_a_success() {
        let mut b = Backoff::new();
        let mut waits = Vec::new();
        for _ in 0..8 {
            let t = tokio::time::Instant::now();
            b.failed(|| {}).await;
            waits.push(t.elapsed().as_millis());
        }
        assert_eq!(waits, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        b.succeeded();
        let t = tokio::time::Instant::now();
        b.failed(|| {}).await;
        assert_eq!(t.elapsed(), MIN);
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_failure_warns_and_the_next_ones_within_a_minute_do_not() {
        let mut b = Backoff::new();
        let mut warnings = 0;
        for _ in 0..5 {
            b.failed(|| warnings += 1).await;
        }
        assert_eq!(warnings, 1);
    }
}
