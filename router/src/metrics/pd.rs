//! The prefill/decode split's series: what was split and why, how long prefills took, and
//! what failed.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// What the P/D layer did with a request for a model that has prefill pools.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PdDecisionLabels {
    /// `split`, `local` (below the threshold), `fallback_decode` (the prefill failed and the
    /// decode replica served it all) or `failed` (the prefill failed and so did the request).
    pub decision: &'static str,
}

/// Why a prefill leg failed.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PdFailureLabels {
    /// `connect`, `unavailable` (502/503/504), `status` (another error answer), `timeout`,
    /// `body`, `no_kv_transfer_params`, `no_prefill_replica`, `other`.
    pub kind: &'static str,
}

pub struct PdMetrics {
    pub decisions: Family<PdDecisionLabels, Counter>,
    pub prefill_failures: Family<PdFailureLabels, Counter>,
    /// NIXL: from sending the prefill request to its answer. SGLang: the prefill leg, which
    /// runs beside the decode.
    pub prefill_duration: Histogram,
    /// Split requests: from the decode request to its response head (TTFT for streams).
    pub decode_first_byte: Histogram,
}

impl PdMetrics {
    /// Create the series and register them under `registry`'s prefix.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            decisions: Family::default(),
            prefill_failures: Family::default(),
            // 1 ms .. ~65 s
            prefill_duration: Histogram::new(exponential_buckets(1e-3, 2.0, 17)),
            decode_first_byte: Histogram::new(exponential_buckets(1e-3, 2.0, 17)),
        };
        registry.register(
            "pd_decisions",
            "Requests for models with prefill pools, by what the P/D layer did: split, local (uncached part below pd.threshold_tokens), fallback_decode or failed",
            metrics.decisions.clone(),
        );
        registry.register(
            "pd_prefill_failures",
            "Prefill legs of split requests that failed, by kind",
            metrics.prefill_failures.clone(),
        );
        registry.register(
            "pd_prefill_duration_seconds",
            "Prefill legs of split requests: from sending to the prefill replica's answer",
            metrics.prefill_duration.clone(),
        );
        registry.register(
            "pd_decode_first_byte_seconds",
            "Decode legs of split requests: from sending to the decode replica's response head",
            metrics.decode_first_byte.clone(),
        );
        metrics
    }

    pub fn decided(&self, decision: &'static str) {
        self.decisions
            .get_or_create(&PdDecisionLabels { decision })
            .inc();
    }

    pub fn failed(&self, kind: &'static str) {
        self.prefill_failures
            .get_or_create(&PdFailureLabels { kind })
            .inc();
    }
}
