//! The request path's series: requests answered and how long they took, failures talking to
//! replicas, and tries sent again.

use super::{ReasonLabels, RequestLabels, RouteLabels, UpstreamErrorLabels};
use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::collections::{BTreeSet, HashSet};

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 1 ms .. ~130 s
    Histogram::new(exponential_buckets(0.001, 2.0, 18))
}

/// Requests answered, by route ([`super::RouteMetrics`] holds one route's handles), and what
/// went wrong with their replicas. A replica's series go when it leaves the configuration
/// ([`super::Metrics::remove_replica`]).
pub struct RequestMetrics {
    pub answered: Family<RequestLabels, Counter>,
    pub duration: HistogramFamily<RouteLabels>,
    pub first_byte: HistogramFamily<RouteLabels>,
    pub upstream_errors: Family<UpstreamErrorLabels, Counter>,
    /// Tries sent to another replica, by why (`refused`, `unavailable`), and retries the budget
    /// refused (`budget_exhausted`).
    pub retries: Family<ReasonLabels, Counter>,
    /// Label sets with a replica among other labels, as created: a family cannot list its
    /// series, and a removed replica's must all go (or every rollout adds series for good).
    pub(super) series: Mutex<ReplicaSeries>,
}

#[derive(Default)]
pub(super) struct ReplicaSeries {
    pub(super) routes: HashSet<RouteLabels>,
    /// Statuses other than 200 counted on any route.
    pub(super) statuses: BTreeSet<u16>,
    /// Kinds of upstream errors counted on any replica.
    error_kinds: BTreeSet<&'static str>,
}

impl RequestMetrics {
    /// Create the series and register them under `registry`'s prefix.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self {
            answered: Family::default(),
            duration: Family::new_with_constructor(latency_histogram),
            first_byte: Family::new_with_constructor(latency_histogram),
            upstream_errors: Family::default(),
            retries: Family::default(),
            series: Default::default(),
        };
        registry.register(
            "requests",
            "Requests answered, by model, pool, replica (empty when none was chosen) and status",
            m.answered.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Time from request arrival to the end of the response body",
            m.duration.clone(),
        );
        registry.register(
            "time_to_first_byte_seconds",
            "Time from forwarding to the first response body chunk (TTFT for streams)",
            m.first_byte.clone(),
        );
        registry.register(
            "upstream_errors",
            "Failures talking to replicas, by kind",
            m.upstream_errors.clone(),
        );
        registry.register(
            "retries",
            "Requests tried again on another replica, by reason (refused, unavailable: a 502/503 answer, server_error: another 5xx that does not blame the request, stalled: taken back from a replica showing no progress), and retries the retry budget refused (budget_exhausted)",
            m.retries.clone(),
        );
        m
    }

    /// Count a failure talking to `replica`.
    pub fn upstream_error(&self, replica: &str, kind: &'static str) {
        self.series.lock().error_kinds.insert(kind);
        self.upstream_errors
            .get_or_create(&UpstreamErrorLabels {
                replica: replica.to_owned(),
                kind,
            })
            .inc();
    }

    /// Forget the series of a replica that left the configuration.
    pub(super) fn remove_replica(&self, name: &str) {
        let mut series = self.series.lock();
        for &kind in &series.error_kinds {
            self.upstream_errors.remove(&UpstreamErrorLabels {
                replica: name.to_owned(),
                kind,
            });
        }
        let ReplicaSeries {
            routes, statuses, ..
        } = &mut *series;
        routes.retain(|route| {
            if route.replica != name {
                return true;
            }
            self.duration.remove(route);
            self.first_byte.remove(route);
            for &status in std::iter::once(&200).chain(statuses.iter()) {
                self.answered.remove(&RequestLabels {
                    model: route.model.clone(),
                    pool: route.pool.clone(),
                    replica: route.replica.clone(),
                    status,
                });
            }
            false
        });
    }
}
