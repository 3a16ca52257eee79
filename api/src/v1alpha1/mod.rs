//! `warmpath.dev/v1alpha1`: the first, served and stored, version of warmpath's resources.
//!
//! Shaped for a `v1` to follow: every field optional in the spec has a default or documented
//! meaning when absent; statuses are conditions plus counters; enums are strings that can grow
//! new values. A later `v1` module would sit beside this one and be merged with
//! `kube::core::crd::merge_crds`.

mod pool;
mod replica;
mod shared;
mod tenant;

pub use pool::{
    InferencePool, InferencePoolSpec, InferencePoolStatus, KvEventsSpec, MetricsSpec,
    SchedulingSpec,
};
pub use replica::{InferenceReplica, InferenceReplicaSpec, InferenceReplicaStatus};
pub use shared::{Engine, Role, SchedulingWeights};
pub use tenant::{SecretKeyRef, TenantLimits, TenantPolicy, TenantPolicySpec, TenantPolicyStatus};

/// The version these types are served and stored as.
pub const VERSION: &str = "v1alpha1";
