//! warmpath's controller: turns each InferencePool's ready pods into InferenceReplicas (one per
//! pod, owned by the pool), reports the status of pools, replicas and tenant policies, and
//! elects one writer through a Lease.
//!
//! Pure rules (which pod is ready, what replicas a pool should have, names, statuses, lease
//! decisions) live in plain modules tested without a cluster: [`desired`], [`naming`],
//! [`status`], [`lease::decide`]. The reconcilers ([`pools`], [`replicas`], [`tenants`]) and
//! [`run`] are the Kubernetes edges.
#![forbid(unsafe_code)]

pub mod admin;
pub mod claims;
pub mod config;
pub mod context;
pub mod desired;
pub mod error;
pub mod gie;
pub mod lease;
pub mod metrics;
pub mod naming;
pub mod pools;
pub mod replicas;
pub mod run;
pub mod status;
pub mod tenants;

pub use config::Config;
pub use error::Error;
