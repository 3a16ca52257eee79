//! Errors of the routing core. Only configuration can be wrong: the per-request paths accept any
//! input (odd values degrade to documented defaults), so the router can validate a configuration
//! once, at load or reload, and report every problem clearly.
//!
//! The core owns these rules; a front end (the router's YAML file, a custom resource) only
//! deserializes the core's configuration types and reports the core's verdict, with
//! [`ConfigError::field`] telling it where in its own document the bad value sits.

/// A configuration value the routing core cannot use.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("scheduler weight `{name}` must be a finite number >= 0, got {value}")]
    Weight { name: &'static str, value: f64 },
    #[error("the weighted-sum policy needs at least one scheduler weight above 0")]
    AllWeightsZero,
    #[error("`llm_d` needs at least one of its weights (prefix, queue, kv_cache) above 0")]
    AllLlmDWeightsZero,
    /// A knob of one of the peer-baseline policies (`consistent_hash`, `llm_d`, `dynamo`).
    #[error("`{section}.{name}` must be {rule}, got {value}")]
    Knob {
        section: &'static str,
        name: &'static str,
        value: f64,
        rule: &'static str,
    },
    #[error("hotspot `max_wait_s` must be >= 0 (inf disables the guard), got {0}")]
    MaxWait(f64),
    #[error("hotspot `spill_factor` must be a finite number >= 1, got {0}")]
    SpillFactor(f64),
    #[error("placement `leave_factor` must be a number >= 1 (inf: off), got {0}")]
    LeaveFactor(f64),
    #[error("TTFT prior `{name}` must be a finite number >= 0, got {value}")]
    Prior { name: &'static str, value: f64 },
    #[error(
        "block_bytes must be between {min} and {max}, got {0}",
        min = crate::prompt::MIN_BLOCK_BYTES,
        max = crate::prompt::MAX_BLOCK_BYTES
    )]
    BlockBytes(usize),
}

impl ConfigError {
    /// The serde field names from the validated value down to the bad field: `["weights",
    /// "queue"]` for a [`crate::scheduler::SchedulerConfig`], `["per_token_s"]` for a
    /// [`crate::predict::TtftPrior`], empty when the validated value is itself the field (a
    /// block size). A front end prepends where it keeps that value to name the field in its
    /// own terms.
    pub fn field(&self) -> Vec<&'static str> {
        match self {
            ConfigError::Weight { name, .. } => vec!["weights", name],
            ConfigError::AllWeightsZero => vec!["weights"],
            ConfigError::AllLlmDWeightsZero => vec!["llm_d"],
            ConfigError::Knob { section, name, .. } => vec![section, name],
            ConfigError::MaxWait(_) => vec!["hotspot", "max_wait_s"],
            ConfigError::SpillFactor(_) => vec!["hotspot", "spill_factor"],
            ConfigError::LeaveFactor(_) => vec!["placement", "leave_factor"],
            ConfigError::Prior { name, .. } => vec![name],
            ConfigError::BlockBytes(_) => Vec::new(),
        }
    }
}
