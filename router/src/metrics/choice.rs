//! The replica choice's series: how long decisions take and why they went where they did,
//! sessions and their affinity, and where prompts were tokenized.

use super::{ReasonLabels, ResultLabels};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// The replica choice (`crate::choice`) and what feeds it.
pub struct ChoiceMetrics {
    pub duration: Histogram,
    pub decisions: Family<ReasonLabels, Counter>,
    pub spills: Counter,
    /// Sessions in the server-side map; what became of sessions' affinity.
    pub sessions: Gauge,
    pub session_affinity: Family<ResultLabels, Counter>,
    /// Requests of models routed from KV events by where their prompt was tokenized: `pooled`,
    /// or `busy` (too many waiting: routed without tokens).
    pub tokenize: Family<ResultLabels, Counter>,
}

impl ChoiceMetrics {
    /// Create the series and register them under `registry`'s prefix.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self {
            // 1 µs .. ~16 ms
            duration: Histogram::new(exponential_buckets(1e-6, 2.0, 15)),
            decisions: Family::default(),
            spills: Counter::default(),
            sessions: Gauge::default(),
            session_affinity: Family::default(),
            tokenize: Family::default(),
        };
        registry.register(
            "decision_duration_seconds",
            "Time to pick a replica: candidates, prefix-index lookup, scoring (prompt hashing is done while parsing)",
            m.duration.clone(),
        );
        registry.register(
            "decisions",
            "Scheduling decisions by reason",
            m.decisions.clone(),
        );
        registry.register(
            "hotspot_spills",
            "Requests moved off their best-matching replica by the hot-spot guard",
            m.spills.clone(),
        );
        registry.register(
            "sessions",
            "Sessions remembered server-side (by session id)",
            m.sessions.clone(),
        );
        registry.register(
            "session_affinity",
            "Requests of a session by what became of its affinity: new (no home yet), kept, moved_unavailable, moved_prefix, moved_overload",
            m.session_affinity.clone(),
        );
        registry.register(
            "tokenize",
            "Requests of models routed from KV events by where their prompt was tokenized: pooled (a tokenizing thread), busy (too many waiting: routed without tokens)",
            m.tokenize.clone(),
        );
        m
    }
}
