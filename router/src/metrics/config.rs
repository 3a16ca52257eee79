//! The configuration's series: its reloads.

use super::ResultLabels;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// The configuration file: reloads by result (`ok`, `error`), the load at start counted as one.
#[derive(Default)]
pub struct ConfigMetrics {
    pub reloads: Family<ResultLabels, Counter>,
}

impl ConfigMetrics {
    /// Create the series and register them under `registry`'s prefix.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "config_reloads",
            "Configuration reloads by result",
            m.reloads.clone(),
        );
        m
    }
}
