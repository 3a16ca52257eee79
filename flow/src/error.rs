//! Errors of the flow-control core. Only configuration can be wrong: the per-request paths
//! accept any input (odd values degrade to documented defaults), so the router can validate a
//! configuration once, at load or reload, and report every problem clearly.
//!
//! Refusals of requests (queue full, rate limited…) are not errors of this kind: they are
//! ordinary outcomes, returned as values ([`crate::queue::Refused`], [`crate::limits::Refusal`])
//! that carry a [`crate::Reason`].

/// A configuration value the flow-control core cannot use.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// A bound or a count that must allow at least one of its kind.
    #[error("`{field}` must be at least 1, got 0")]
    Zero { field: &'static str },
    /// A per-tenant bound above the total bound it is part of.
    #[error("`{field}` ({value}) must not be above `{total_field}` ({total})")]
    AboveTotal {
        field: &'static str,
        value: u64,
        total_field: &'static str,
        total: u64,
    },
    /// A rate (per second) that is not a positive finite number.
    #[error("`{field}` must be a finite number > 0, got {value}")]
    Rate { field: &'static str, value: f64 },
    /// A bucket size below one request or token, or not finite.
    #[error("`{field}` must be a finite number >= 1, got {value}")]
    Burst { field: &'static str, value: f64 },
    /// A bucket size without the rate that refills it.
    #[error("`{field}` needs `{rate_field}`: it is the size of that rate's bucket")]
    BurstWithoutRate {
        field: &'static str,
        rate_field: &'static str,
    },
}

impl ConfigError {
    /// The serde field names from the validated value down to the bad field (`["max_bytes"]`
    /// for a [`crate::FlowQueueConfig`]). A front end prepends where it keeps that value to
    /// name the field in its own terms.
    pub fn field(&self) -> Vec<&'static str> {
        match self {
            ConfigError::Zero { field }
            | ConfigError::AboveTotal { field, .. }
            | ConfigError::Rate { field, .. }
            | ConfigError::Burst { field, .. }
            | ConfigError::BurstWithoutRate { field, .. } => vec![field],
        }
    }
}
