//! `warmpath.dev/v1alpha1`: the first version of warmpath's resources, still served (marked
//! deprecated) beside [`crate::v1`], which the API server now stores.
//!
//! Kept unchanged so that the CRD describes what v1alpha1 clients and manifests were promised;
//! the API server converts between the two with the `None` strategy, which works because
//! `v1` kept every field of this version (see `api/CHANGES-v1.md`). The router and controller
//! use `v1`; these types remain for tests and for clients not yet moved, until v1alpha1 stops
//! being served.

mod pool;
mod replica;
mod shared;
mod tenant;

pub use pool::{
    EndpointPickerSpec, InferencePool, InferencePoolSpec, InferencePoolStatus, KvEventsSpec,
    MetricsSpec, PickerFailureMode, SchedulingSpec,
};
pub use replica::{InferenceReplica, InferenceReplicaSpec, InferenceReplicaStatus};
pub use shared::{Engine, Role, SchedulingWeights};
pub use tenant::{SecretKeyRef, TenantLimits, TenantPolicy, TenantPolicySpec, TenantPolicyStatus};

/// The version these types are served as (no longer stored).
pub const VERSION: &str = "v1alpha1";
