//! Why a request was refused, as the router says it on the wire.
//!
//! The router answers every refusal 429 with `retry-after` and the reason's name in
//! [`DROPPED_REASON_HEADER`]; for drop-in use behind clients written for llm-d it also sends
//! [`LLM_D_DROPPED_REASON_HEADER`] with llm-d's value for the same situation
//! ([`Reason::llm_d`]).

use std::fmt;

/// warmpath's refusal header.
pub const DROPPED_REASON_HEADER: &str = "x-warmpath-dropped-reason";

/// llm-d's refusal header (its flow control and endpoint picker set it on 429 and 503).
pub const LLM_D_DROPPED_REASON_HEADER: &str = "x-llm-d-request-dropped-reason";

/// Why a request was refused or dropped before reaching a replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    /// The pool is saturated and the request may not wait (sheddable, or queueing is off).
    Saturated,
    /// The queue (in total or the tenant's share) has no room and nothing of lower priority can
    /// make room.
    QueueFull,
    /// The request waited in the queue past its deadline.
    TtlExpired,
    /// A per-tenant limit (requests/s, tokens/s, concurrency) refused it.
    RateLimited,
    /// It was queued, then pushed out by a higher-priority arrival when the queue was full.
    Evicted,
}

impl Reason {
    pub const ALL: [Reason; 5] = [
        Reason::Saturated,
        Reason::QueueFull,
        Reason::TtlExpired,
        Reason::RateLimited,
        Reason::Evicted,
    ];

    /// The value of [`DROPPED_REASON_HEADER`] (also the metric label).
    pub const fn as_str(self) -> &'static str {
        match self {
            Reason::Saturated => "saturated",
            Reason::QueueFull => "queue-full",
            Reason::TtlExpired => "ttl-expired",
            Reason::RateLimited => "rate-limited",
            Reason::Evicted => "evicted",
        }
    }

    /// The value llm-d's router sends in [`LLM_D_DROPPED_REASON_HEADER`] for the same
    /// situation (llm-d-router `pkg/common/error`: `rejected-saturated`,
    /// `rejected-ttl-expired`, `evicted`, …).
    ///
    /// llm-d has fewer reasons than we do. A full queue is `rejected-saturated` there too (its
    /// flow control maps "queue at capacity" to it), and so is a concurrency refusal; llm-d has
    /// no rate limits, so `rate-limited` maps to the nearest capacity refusal,
    /// `rejected-saturated`. llm-d's eviction reasons describe requests taken back after
    /// dispatch; ours happens before dispatch, and we send the generic `evicted` (the value
    /// llm-d emits today; its `evicted-priority` and `evicted-queue-pressure` share the
    /// `evicted` prefix clients branch on).
    pub const fn llm_d(self) -> &'static str {
        match self {
            Reason::Saturated | Reason::QueueFull | Reason::RateLimited => "rejected-saturated",
            Reason::TtlExpired => "rejected-ttl-expired",
            Reason::Evicted => "evicted",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_are_the_documented_ones() {
        let names: Vec<_> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(
            names,
            [
                "saturated",
                "queue-full",
                "ttl-expired",
                "rate-limited",
                "evicted"
            ]
        );
        assert_eq!(Reason::QueueFull.to_string(), "queue-full");
    }

    #[test]
    fn llm_d_names_follow_llm_d() {
        assert_eq!(Reason::Saturated.llm_d(), "rejected-saturated");
        assert_eq!(Reason::QueueFull.llm_d(), "rejected-saturated");
        assert_eq!(Reason::RateLimited.llm_d(), "rejected-saturated");
        assert_eq!(Reason::TtlExpired.llm_d(), "rejected-ttl-expired");
        assert_eq!(Reason::Evicted.llm_d(), "evicted");
        // Every value is one llm-d clients recognise: a rejection or the eviction prefix.
        for r in Reason::ALL {
            let v = r.llm_d();
            assert!(
                v.starts_with("rejected-") || v.starts_with("evicted"),
                "{v}"
            );
        }
    }
}
