//! Decision explanations: why a request went where it did, as the scheduler weighed each
//! candidate. A request that asks (`x-warmpath-explain: 1`, when `explain.header` allows it) gets
//! them in its response's `x-warmpath-explain` header; a bounded log of recent decisions
//! (`explain.recent`, sampled at most once per `explain.sample_interval_ms`) feeds the admin API
//! (`/api/decisions`) and the status page.
//!
//! The scores are computed only for decisions that are explained or sampled, from the same views
//! the decision used ([`warmpath_routing::scheduler::Scheduler::explain`]).

use http::{HeaderName, HeaderValue};
use parking_lot::Mutex;
use serde::Serialize;
use std::collections::VecDeque;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use warmpath_routing::scheduler::CandidateScores;

/// The request header that asks for an explanation, and the response header that carries it.
pub const EXPLAIN_HEADER: HeaderName = HeaderName::from_static("x-warmpath-explain");

/// Whether a request asks for an explanation: `x-warmpath-explain: 1` (or `true`, `?1`).
pub fn asked(headers: &http::HeaderMap) -> bool {
    headers
        .get(EXPLAIN_HEADER)
        .is_some_and(|v| matches!(v.as_bytes(), b"1" | b"true" | b"?1"))
}

/// One decision, explained.
#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    /// The configured policy of the pool that decided.
    pub policy: &'static str,
    /// The rule that picked (the decision's reason: `weighted_score`, `hotspot_spill`,
    /// `session`, ...).
    pub reason: &'static str,
    pub chosen: String,
    /// Estimated (or, with the model's tokenizer, exact) prompt tokens.
    pub prompt_tokens: u32,
    /// Full blocks in the prompt, the unit of `matched_blocks`.
    pub blocks: u32,
    pub spilled: bool,
    /// Every candidate of the model: the scored ones in the scheduler's order, then those it
    /// did not consider and why.
    pub candidates: Vec<CandidateExplained>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CandidateExplained {
    pub replica: String,
    pub pool: Arc<str>,
    pub chosen: bool,
    /// Why it was not considered (`not_ready`, `tried`: this request already failed there,
    /// `stalled`: it owes first bytes long overdue); absent when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<&'static str>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub scores: Option<CandidateScores>,
}

impl Explanation {
    /// The `x-warmpath-explain` response header: an RFC 8941 structured-field list, a
    /// `decision` item with the policy and reason, then one item per candidate (its name, a
    /// string) with its scores as parameters. `None` when a replica name cannot go in a header.
    pub fn header_value(&self) -> Option<HeaderValue> {
        let mut out = format!(
            "decision;policy={};reason={};prompt_tokens={};blocks={}",
            self.policy, self.reason, self.prompt_tokens, self.blocks
        );
        for c in &self.candidates {
            if c.replica.bytes().any(|b| !(0x20..0x7f).contains(&b)) {
                return None;
            }
            let name = c.replica.replace('\\', "\\\\").replace('"', "\\\"");
            let _ = write!(out, ", \"{name}\"");
            if c.chosen {
                out.push_str(";chosen");
            }
            if let Some(why) = c.skipped {
                let _ = write!(out, ";skipped={why}");
            }
            if let Some(s) = &c.scores {
                // Structured-field decimals carry at most three fractional digits.
                let _ = write!(
                    out,
                    ";matched={};score={:.3};prefix={:.3};load={:.3};queue={:.3};kv={:.3};queued={:.3};pending={};ttft_ms={:.3};cost_ms={:.3};leave_ms={:.3}",
                    s.matched_blocks,
                    finite(s.score),
                    finite(s.prefix),
                    finite(s.load),
                    finite(s.queue),
                    finite(s.kv_cache),
                    finite(s.queued_ahead),
                    s.pending_prefill_tokens,
                    finite(s.predicted_ttft_s * 1e3),
                    finite(s.cost_s * 1e3),
                    finite(s.leave_cost_s * 1e3),
                );
            }
        }
        HeaderValue::from_str(&out).ok()
    }
}

/// Structured fields have no NaN or infinities; a score that is one says nothing anyway.
fn finite(x: f64) -> f64 {
    if x.is_finite() {
        x.clamp(-999_999_999_999.0, 999_999_999_999.0)
    } else {
        0.0
    }
}

/// A decision as the log keeps it.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    /// When it was made, ms since the Unix epoch.
    pub at_unix_ms: u64,
    pub request_id: String,
    pub model: String,
    pub tenant: Arc<str>,
    /// The request asked for its explanation (otherwise it was sampled).
    pub asked: bool,
    #[serde(flatten)]
    pub explanation: Arc<Explanation>,
}

impl Record {
    pub fn now(
        request_id: &HeaderValue,
        model: &str,
        tenant: Arc<str>,
        asked: bool,
        explanation: Arc<Explanation>,
    ) -> Self {
        Self {
            at_unix_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            request_id: String::from_utf8_lossy(request_id.as_bytes()).into_owned(),
            model: model.to_owned(),
            tenant,
            asked,
            explanation,
        }
    }
}

/// The recent decisions, newest last, at most `explain.recent` of them.
#[derive(Debug)]
pub struct DecisionLog {
    recent: Mutex<VecDeque<Arc<Record>>>,
    /// When the last sampled decision was taken, µs after `epoch` (0: never).
    last_sample_us: AtomicU64,
    epoch: Instant,
}

impl Default for DecisionLog {
    fn default() -> Self {
        Self {
            recent: Mutex::new(VecDeque::new()),
            last_sample_us: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }
}

impl DecisionLog {
    /// Whether an ordinary decision made at `now` should be recorded: the first one of each
    /// `interval`. One atomic read on the way out, so that routing pays nothing for the log.
    pub fn sample(&self, now: Instant, interval: Duration) -> bool {
        let at = now.saturating_duration_since(self.epoch).as_micros() as u64 + 1;
        let last = self.last_sample_us.load(Ordering::Relaxed);
        if last != 0 && at.saturating_sub(last) < interval.as_micros() as u64 {
            return false;
        }
        // Of concurrent decisions, one wins the interval.
        self.last_sample_us
            .compare_exchange(last, at, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// Keep `record`, dropping the oldest beyond `cap` (which a reload may change).
    pub fn push(&self, record: Record, cap: usize) {
        let mut recent = self.recent.lock();
        if cap == 0 {
            recent.clear();
            return;
        }
        while recent.len() >= cap {
            recent.pop_front();
        }
        recent.push_back(Arc::new(record));
    }

    /// The kept decisions, newest first.
    pub fn recent(&self) -> Vec<Arc<Record>> {
        self.recent.lock().iter().rev().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn explanation(names: &[&str]) -> Explanation {
        Explanation {
            policy: "prefix",
            reason: "weighted_score",
            chosen: names[0].to_owned(),
            prompt_tokens: 100,
            blocks: 4,
            spilled: false,
            candidates: names
                .iter()
                .enumerate()
                .map(|(i, n)| CandidateExplained {
                    replica: (*n).to_owned(),
                    pool: "p".into(),
                    chosen: i == 0,
                    skipped: (i == 2).then_some("not_ready"),
                    scores: (i < 2).then_some(CandidateScores {
                        matched_blocks: 3,
                        queued_ahead: 1.0,
                        pending_prefill_tokens: 40,
                        prefix: 0.75,
                        load: 1.0,
                        queue: f64::NAN,
                        kv_cache: 0.5,
                        score: 3.25,
                        predicted_ttft_s: 0.0123456,
                        cost_s: 0.02,
                        leave_cost_s: 0.03,
                    }),
                })
                .collect(),
        }
    }

    #[test]
    fn the_header_is_a_structured_list_with_every_candidate() {
        let v = explanation(&["r0", "r\"1", "r2"]).header_value().unwrap();
        let v = v.to_str().unwrap();
        assert!(
            v.starts_with("decision;policy=prefix;reason=weighted_score;prompt_tokens=100;blocks=4, \"r0\";chosen;matched=3;score=3.250;prefix=0.750;load=1.000;queue=0.000;kv=0.500;queued=1.000;pending=40;ttft_ms=12.346;cost_ms=20.000;leave_ms=30.000, \"r\\\"1\";matched=3"),
            "{v}"
        );
        assert!(v.ends_with(", \"r2\";skipped=not_ready"), "{v}");
        // A name a header cannot carry: no header rather than a broken one.
        assert!(explanation(&["r0", "é"]).header_value().is_none());
    }

    #[test]
    fn the_log_keeps_the_newest_within_its_bound() {
        let log = DecisionLog::default();
        let id = HeaderValue::from_static("id");
        let e = Arc::new(explanation(&["a", "b"]));
        for i in 0..10 {
            let mut r = Record::now(&id, "m", "t".into(), false, e.clone());
            r.at_unix_ms = i;
            log.push(r, 4);
        }
        let kept: Vec<u64> = log.recent().iter().map(|r| r.at_unix_ms).collect();
        assert_eq!(kept, [9, 8, 7, 6]);
        log.push(Record::now(&id, "m", "t".into(), false, e), 0);
        assert!(log.recent().is_empty());
    }

    #[test]
    fn sampling_takes_one_decision_per_interval() {
        let log = DecisionLog::default();
        let t0 = Instant::now();
        let every = Duration::from_millis(100);
        assert!(log.sample(t0, every));
        assert!(!log.sample(t0 + Duration::from_millis(50), every));
        assert!(log.sample(t0 + Duration::from_millis(101), every));
        assert!(!log.sample(t0 + Duration::from_millis(150), every));
        assert!(log.sample(t0 + Duration::from_secs(5), every));
        // Interval 0: every decision.
        assert!(log.sample(t0 + Duration::from_secs(5), Duration::ZERO));
    }
}
