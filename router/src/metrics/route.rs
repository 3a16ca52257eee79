//! One route's series (model × pool × replica), resolved once per routing table so that the
//! request path touches no label map in the common case.

use super::{RequestLabels, RequestMetrics, RouteLabels};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;

/// Handles to one route's series (model × pool × replica), resolved once per configuration so
/// that the request path touches no label map for the common case.
#[derive(Debug, Clone)]
pub struct RouteMetrics {
    pub labels: RouteLabels,
    pub ok: Counter,
    pub duration: Histogram,
    pub first_byte: Histogram,
}

impl RequestMetrics {
    pub fn route(&self, labels: RouteLabels) -> RouteMetrics {
        self.series.lock().routes.insert(labels.clone());
        RouteMetrics {
            ok: self
                .answered
                .get_or_create(&RequestLabels {
                    model: labels.model.clone(),
                    pool: labels.pool.clone(),
                    replica: labels.replica.clone(),
                    status: 200,
                })
                .clone(),
            duration: self.duration.get_or_create(&labels).clone(),
            first_byte: self.first_byte.get_or_create(&labels).clone(),
            labels,
        }
    }

    /// Count a finished request on its route.
    pub fn count(&self, route: &RouteMetrics, status: u16) {
        if status == 200 {
            route.ok.inc();
        } else {
            self.series.lock().statuses.insert(status);
            self.answered
                .get_or_create(&RequestLabels {
                    model: route.labels.model.clone(),
                    pool: route.labels.pool.clone(),
                    replica: route.labels.replica.clone(),
                    status,
                })
                .inc();
        }
    }
}
