//! `warmpath.dev/v1`: the stable version of warmpath's resources, served beside `v1alpha1` and
//! the version the API server stores.
//!
//! The two versions are converted with the CRD's `None` strategy (the API server only rewrites
//! `apiVersion`), so that reading and writing the resources never depends on a conversion
//! webhook being up. That only works while both versions mean the same by the same JSON: these
//! types keep every `v1alpha1` field's name, shape, default and meaning, and
//! `api/tests/schema.rs` fails when the two schemas drift apart beyond the differences listed
//! in `api/CHANGES-v1.md`, which also records why each field is safe to freeze.
//!
//! The types are a copy of `v1alpha1`'s rather than shared with it: a stable version must not
//! change when the deprecated one is edited or removed.

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

/// The version these types are served as, and the one the API server stores.
pub const VERSION: &str = "v1";
