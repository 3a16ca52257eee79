//! The P/D sidecar's series (`warmpath-router sidecar`): what it did with each request, how
//! long the prefill legs took, and why they failed.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// What the sidecar did with a request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SidecarOutcomeLabels {
    /// `local` (no prefill host named, or a path that is not split), `split` (prefill on the
    /// named host, decode here), `fallback_decode` (the prefill failed; the local engine did
    /// it all), `failed` (the sidecar answered an error of its own: the prefill failed under
    /// `--on-prefill-failure fail`, or the local engine could not be reached), `forbidden`
    /// (the named prefill host is not allowed), `bad_request` (malformed header, body too
    /// large, slow or not JSON).
    pub outcome: &'static str,
}

/// Why a prefill leg failed.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SidecarFailureLabels {
    /// `connect`, `unavailable` (502/503/504), `status` (another error answer), `timeout`,
    /// `body`, `no_kv_transfer_params`, `other`.
    pub kind: &'static str,
}

/// The sidecar's own registry: it serves these series only, and the router none of them.
pub struct SidecarMetrics {
    registry: Registry,
    pub requests: Family<SidecarOutcomeLabels, Counter>,
    /// Every prefill leg, failed or not: from sending to the whole answer (or the failure).
    pub prefill_duration: Histogram,
    pub prefill_failures: Family<SidecarFailureLabels, Counter>,
}

impl SidecarMetrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("warmpath");
        let metrics = Self {
            registry: Registry::default(),
            requests: Family::default(),
            // 1 ms .. ~65 s, like the router's own prefill legs.
            prefill_duration: Histogram::new(exponential_buckets(1e-3, 2.0, 17)),
            prefill_failures: Family::default(),
        };
        registry.register(
            "sidecar_requests",
            "Requests the P/D sidecar answered, by outcome: local, split, fallback_decode, failed, forbidden, bad_request, not_served",
            metrics.requests.clone(),
        );
        registry.register(
            "sidecar_prefill_duration_seconds",
            "Prefill legs the P/D sidecar ran: from sending to the whole answer or the failure",
            metrics.prefill_duration.clone(),
        );
        registry.register(
            "sidecar_prefill_failures",
            "Prefill legs the P/D sidecar ran that failed, by kind",
            metrics.prefill_failures.clone(),
        );
        Self {
            registry,
            ..metrics
        }
    }

    /// The Prometheus text exposition of every series.
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(2048);
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    pub fn answered(&self, outcome: &'static str) {
        self.requests
            .get_or_create(&SidecarOutcomeLabels { outcome })
            .inc();
    }

    pub fn prefill_failed(&self, kind: &'static str) {
        self.prefill_failures
            .get_or_create(&SidecarFailureLabels { kind })
            .inc();
    }
}

impl Default for SidecarMetrics {
    fn default() -> Self {
        Self::new()
    }
}
