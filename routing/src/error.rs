//! Errors of the routing core. Only configuration can be wrong: the per-request paths accept any
//! input (odd values degrade to documented defaults), so the router can validate a configuration
//! once, at load or reload, and report every problem clearly.

/// A configuration value the routing core cannot use.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("scheduler weight `{name}` must be a finite number >= 0, got {value}")]
    Weight { name: &'static str, value: f64 },
    #[error("the weighted-sum policy needs at least one scheduler weight above 0")]
    AllWeightsZero,
    #[error("hotspot `max_wait_s` must be >= 0 (inf disables the guard), got {0}")]
    MaxWait(f64),
    #[error("hotspot `spill_factor` must be a finite number >= 1, got {0}")]
    SpillFactor(f64),
    #[error("TTFT prior `{name}` must be a finite number >= 0, got {value}")]
    Prior { name: &'static str, value: f64 },
    #[error("block_bytes must be at least 1")]
    BlockBytes,
}
