//! Replica health: passive (a refused connection ejects a replica at once; answers that fail,
//! 5xx, timeouts and resets, eject it after `consecutive_failures` in a row, or when at least
//! `failure_percent` of its last `failure_window` answers failed, as Envoy's outlier detection
//! does with its consecutive and failure-percentage rules (a replica failing every other answer
//! never fails a run of them); each ejection's backoff doubles) and active (the metrics scrape
//! doubles as a health probe; `health.active_path` adds a check of the engine's own health
//! endpoint).
//!
//! A replica that owes first bytes of streams for far longer than their predicted TTFT, with
//! no progress meanwhile (no first byte, and no token counted by its engine's metrics: a hung
//! engine still answering its metrics), is *stalled*: passed over while another replica can
//! serve, until it shows progress again. A request waiting there that long is taken back and
//! tried elsewhere when nothing of it has reached its client (`api::forward`).
//!
//! A request that times out (no head in time, or a stream gone silent) while its replica went
//! on answering others is the request's own doing, a generation longer than the timeout or a
//! client's crafted request, not a sign the replica is broken: it never counts against it
//! ([`Health::answered_since`]), so no client can eject replicas by sending slow requests.
//!
//! A replica is a routing candidate when it is neither ejected nor failing its scrapes. An
//! ejection ends by itself after the backoff; the next request then tries the replica again
//! (half-open), and a success resets the backoff.

use crate::config::HealthConfig;
use parking_lot::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
pub struct Health {
    inner: Mutex<HealthInner>,
}

#[derive(Debug, Default)]
struct HealthInner {
    ejected_until: Option<Instant>,
    /// Ejections since the last success: the next backoff doubles with each.
    connect_failures: u32,
    /// Failed answers in a row since the last good one.
    failures: u32,
    /// The last answers since the last ejection, newest in bit 0 (1: failed), and how many
    /// there were (at most 64 count).
    outcomes: u64,
    answers: u32,
    scrape_failures: u32,
    scrape_down: bool,
    /// Active checks (`health.active_path`) failed in a row, and whether that made it down.
    probe_failures: u32,
    probe_down: bool,
    /// Streams sent to it whose first byte has not come yet.
    owed: u32,
    /// When it last showed progress while owing (a first byte, or the first debt).
    progress_at: Option<Instant>,
    /// How long it may go without progress: the longest overdue bound among the streams
    /// owed since it last owed nothing.
    allowance: Duration,
    /// The current stall has been logged.
    stall_reported: bool,
    /// When it last finished an answer or sent a stream's first byte: alive then.
    answered_at: Option<Instant>,
    /// The tokens its engine says it has processed (prompt and generated, from its metrics),
    /// and when that count last grew: working then, whether or not anything was answered.
    work_total: Option<f64>,
    worked_at: Option<Instant>,
}

impl Health {
    /// One more stream owes its first byte, sent `now`, overdue after `allowance`
    /// ([`super::replica::FirstByteOwed`]).
    pub(super) fn owe_first_byte(&self, allowance: Duration, now: Instant) {
        let mut h = self.inner.lock();
        if h.owed == 0 {
            h.progress_at = Some(now);
            h.allowance = allowance;
        } else {
            h.allowance = h.allowance.max(allowance);
        }
        h.owed += 1;
    }

    /// An owed first byte came: the replica is making progress.
    pub(super) fn first_byte_arrived(&self, now: Instant) {
        let mut h = self.inner.lock();
        h.progress_at = Some(now);
        h.answered_at = Some(now);
        h.stall_reported = false;
    }

    /// An owed first byte is no longer owed (it came, or its request ended without it).
    pub(super) fn first_byte_settled(&self) {
        let mut h = self.inner.lock();
        h.owed = h.owed.saturating_sub(1);
        if h.owed == 0 {
            h.progress_at = None;
            h.stall_reported = false;
        }
    }
    /// May the router send this replica a request now?
    pub fn is_ready(&self, now: Instant) -> bool {
        let h = self.inner.lock();
        !h.scrape_down && !h.probe_down && h.ejected_until.is_none_or(|t| now >= t)
    }

    /// A connection to the replica failed: eject it. Returns the backoff applied.
    pub fn on_connect_error(&self, config: &HealthConfig, now: Instant) -> Duration {
        let mut h = self.inner.lock();
        eject(&mut h, config, now)
    }

    /// An answer failed (5xx, no head in time, reset, or no connection in time): after
    /// `consecutive_failures` in a row, or `failure_percent` of the last `failure_window`,
    /// and only when `may_eject` says so (the pool is not mostly ejected already; asked only
    /// then, since it looks at the whole pool), eject it. Returns the backoff when it did.
    pub fn on_failure(
        &self,
        config: &HealthConfig,
        now: Instant,
        may_eject: impl FnOnce() -> bool,
    ) -> Option<Duration> {
        let due = |h: &HealthInner| {
            let run = config.consecutive_failures != 0 && h.failures >= config.consecutive_failures;
            // The configuration is checked to 2-64; `outcomes` holds 64 at most.
            let window = config.failure_window.clamp(1, 64);
            let failed = (h.outcomes & (u64::MAX >> (64 - window))).count_ones();
            let share = config.failure_percent != 0
                && h.answers >= window
                && u64::from(failed) * 100 >= u64::from(config.failure_percent) * u64::from(window);
            run || share
        };
        {
            let mut h = self.inner.lock();
            h.failures = h.failures.saturating_add(1);
            h.outcomes = (h.outcomes << 1) | 1;
            h.answers = h.answers.saturating_add(1);
            if !due(&h) {
                return None;
            }
        }
        // `may_eject` reads every replica's health, this one's too: not under its lock.
        if !may_eject() {
            return None;
        }
        let mut h = self.inner.lock();
        // A concurrent failure may have ejected it meanwhile.
        if !due(&h) {
            return None;
        }
        Some(eject(&mut h, config, now))
    }

    /// A request was taken back after waiting a whole allowance with no progress from the
    /// replica (`api::forward`): the clearest sign of a hung engine there is, so it is ejected
    /// at once (when `may_eject` allows: not half its pool out already), for the usual
    /// doubling backoff, after which a request tries it again. Returns the backoff when it did.
    pub fn on_stalled(
        &self,
        config: &HealthConfig,
        now: Instant,
        may_eject: impl FnOnce() -> bool,
    ) -> Option<Duration> {
        if !may_eject() {
            return None;
        }
        let mut h = self.inner.lock();
        if h.ejected_until.is_some_and(|t| t > now) {
            return None;
        }
        Some(eject(&mut h, config, now))
    }

    /// Whether the replica owes a stream's first byte and has shown no progress for longer
    /// than it was allowed. Logs the first sighting of each stall.
    pub fn is_stalled(&self, now: Instant, name: &str) -> bool {
        let mut h = self.inner.lock();
        let stalled = h.owed > 0
            && h.progress_at
                .is_some_and(|t| now.saturating_duration_since(t) > h.allowance);
        if stalled && !h.stall_reported {
            h.stall_reported = true;
            tracing::warn!(replica = name, owed = h.owed, allowance = ?h.allowance,
                "replica owes first bytes long past their predicted TTFT; passed over until one comes");
        }
        stalled
    }

    /// Whether the replica finished an answer or sent a first byte since `t`: then it was
    /// alive and serving, and a request of its that timed out meanwhile timed out by its own
    /// doing.
    pub fn answered_since(&self, t: Instant) -> bool {
        self.inner.lock().answered_at.is_some_and(|a| a > t)
    }

    /// When the replica last showed progress: an answer or first byte, or its engine counting
    /// more tokens processed.
    pub fn last_progress(&self) -> Option<Instant> {
        let h = self.inner.lock();
        h.answered_at.max(h.worked_at)
    }

    /// Whether its engine's metrics count the tokens it processes: then a long answer's
    /// progress shows before the answer does.
    pub fn counts_work(&self) -> bool {
        self.inner.lock().work_total.is_some()
    }

    /// A scrape read the engine's count of tokens processed (`None`: its page has none). A
    /// count that grew is progress; a restarted engine's smaller count is only remembered.
    pub fn on_engine_work(&self, total: Option<f64>, now: Instant) {
        let mut h = self.inner.lock();
        if let (Some(before), Some(now_total)) = (h.work_total, total) {
            if now_total > before {
                h.worked_at = Some(now);
                if h.owed > 0 {
                    h.progress_at = Some(now);
                    h.stall_reported = false;
                }
            }
        }
        h.work_total = total;
    }

    /// A request reached the replica.
    pub fn on_success(&self) {
        let mut h = self.inner.lock();
        h.answered_at = Some(Instant::now());
        h.outcomes <<= 1;
        h.answers = h.answers.saturating_add(1);
        if h.connect_failures != 0 || h.ejected_until.is_some() || h.failures != 0 {
            h.connect_failures = 0;
            h.failures = 0;
            h.ejected_until = None;
        }
    }

    /// A scrape answered 200: the replica's server is up.
    pub fn on_scrape_ok(&self) {
        let mut h = self.inner.lock();
        h.scrape_failures = 0;
        if h.scrape_down {
            h.scrape_down = false;
            // The engine is back: let requests try it without waiting out an old ejection.
            h.ejected_until = None;
            h.connect_failures = 0;
        }
    }

    /// An active check's verdict: a pass brings the replica back at once; failures take it
    /// out after `threshold` in a row, a refused connection at once.
    pub fn on_probe(&self, passed: bool, refused: bool, threshold: u32) {
        let mut h = self.inner.lock();
        if passed {
            h.probe_failures = 0;
            h.probe_down = false;
            return;
        }
        h.probe_failures = h.probe_failures.saturating_add(1);
        if refused || h.probe_failures >= threshold {
            h.probe_down = true;
        }
    }

    /// Active checks were turned off: their verdict no longer counts.
    pub fn clear_probe(&self) {
        let mut h = self.inner.lock();
        h.probe_failures = 0;
        h.probe_down = false;
    }

    /// A scrape failed. A refused connection is conclusive at once; other failures (timeouts,
    /// error statuses) only after `threshold` in a row.
    pub fn on_scrape_failed(&self, refused: bool, threshold: u32) {
        let mut h = self.inner.lock();
        h.scrape_failures = h.scrape_failures.saturating_add(1);
        if refused || h.scrape_failures >= threshold {
            h.scrape_down = true;
        }
    }
}

/// Eject for a backoff that doubles with each ejection since the last success. The answers
/// before it no longer count: the replica starts a new run and a new window when it is back.
fn eject(h: &mut HealthInner, config: &HealthConfig, now: Instant) -> Duration {
    h.failures = 0;
    h.outcomes = 0;
    h.answers = 0;
    h.connect_failures = h.connect_failures.saturating_add(1);
    let shift = (h.connect_failures - 1).min(16);
    let backoff = Duration::from_millis(
        config
            .eject_base_ms
            .saturating_mul(1 << shift)
            .min(config.eject_max_ms),
    );
    h.ejected_until = Some(now + backoff);
    backoff
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> HealthConfig {
        HealthConfig {
            eject_base_ms: 100,
            eject_max_ms: 350,
            consecutive_failures: 3,
            ..HealthConfig::default()
        }
    }

    #[test]
    fn a_replica_answering_others_is_alive() {
        let h = Health::default();
        let sent = Instant::now();
        assert!(!h.answered_since(sent), "nothing answered yet");
        std::thread::sleep(Duration::from_millis(2));
        h.on_success();
        assert!(h.answered_since(sent));
        // Only answers after the instant count.
        assert!(!h.answered_since(Instant::now()));
    }

    #[test]
    fn ejection_backs_off_and_expires() {
        let h = Health::default();
        let t0 = Instant::now();
        assert!(h.is_ready(t0));
        assert_eq!(h.on_connect_error(&cfg(), t0), Duration::from_millis(100));
        assert!(!h.is_ready(t0 + Duration::from_millis(50)));
        assert!(h.is_ready(t0 + Duration::from_millis(100)));
        assert_eq!(h.on_connect_error(&cfg(), t0), Duration::from_millis(200));
        assert_eq!(h.on_connect_error(&cfg(), t0), Duration::from_millis(350));
        h.on_success();
        assert!(h.is_ready(t0));
        assert_eq!(h.on_connect_error(&cfg(), t0), Duration::from_millis(100));
    }

    #[test]
    fn scrape_failures_need_threshold_unless_refused() {
        let h = Health::default();
        let now = Instant::now();
        h.on_scrape_failed(false, 3);
        h.on_scrape_failed(false, 3);
        assert!(h.is_ready(now));
        h.on_scrape_failed(false, 3);
        assert!(!h.is_ready(now));
        h.on_scrape_ok();
        assert!(h.is_ready(now));
        h.on_scrape_failed(true, 3);
        assert!(!h.is_ready(now));
    }

    #[test]
    fn failed_answers_eject_after_a_run_and_only_when_allowed() {
        let h = Health::default();
        let t0 = Instant::now();
        assert_eq!(h.on_failure(&cfg(), t0, || true), None);
        assert_eq!(h.on_failure(&cfg(), t0, || true), None);
        // A good answer breaks the run.
        h.on_success();
        assert_eq!(h.on_failure(&cfg(), t0, || true), None);
        assert_eq!(h.on_failure(&cfg(), t0, || true), None);
        // Third in a row, but the pool is mostly ejected already: stays.
        assert_eq!(h.on_failure(&cfg(), t0, || false), None);
        assert!(h.is_ready(t0));
        assert_eq!(
            h.on_failure(&cfg(), t0, || true),
            Some(Duration::from_millis(100))
        );
        assert!(!h.is_ready(t0));
        assert!(h.is_ready(t0 + Duration::from_millis(100)));
        // Off with 0.
        let off = HealthConfig {
            consecutive_failures: 0,
            failure_percent: 0,
            ..cfg()
        };
        let h = Health::default();
        for _ in 0..10 {
            assert_eq!(h.on_failure(&off, t0, || true), None);
        }
    }

    #[test]
    fn a_replica_failing_every_other_answer_is_ejected_by_its_share_of_failures() {
        let by_share = HealthConfig {
            consecutive_failures: 3,
            failure_percent: 50,
            failure_window: 10,
            ..cfg()
        };
        let t0 = Instant::now();
        let h = Health::default();
        // Never two failures in a row: no run; the fifth failure fills the window at 50%.
        let mut ejected_at = None;
        for i in 0..10 {
            h.on_success();
            if let Some(d) = h.on_failure(&by_share, t0, || true) {
                ejected_at = Some((i, d));
                break;
            }
        }
        assert_eq!(ejected_at, Some((4, Duration::from_millis(100))));
        assert!(!h.is_ready(t0));
        // The window starts over after an ejection; 4 of 10 failed stays.
        for i in 0..10 {
            let failed = i % 5 == 1 || i % 5 == 3;
            if failed {
                assert_eq!(h.on_failure(&by_share, t0, || true), None, "answer {i}");
            } else {
                h.on_success();
            }
        }
        // Without the rule, the same answers never eject.
        let run_only = HealthConfig {
            failure_percent: 0,
            ..by_share.clone()
        };
        let h = Health::default();
        for _ in 0..100 {
            h.on_success();
            assert_eq!(h.on_failure(&run_only, t0, || true), None);
        }
        // Nor with the pool mostly ejected.
        let h = Health::default();
        for _ in 0..100 {
            h.on_success();
            assert_eq!(h.on_failure(&by_share, t0, || false), None);
        }
    }
}
