//! warmpath's custom resources and the CRDs generated from them.
//!
//! - [`v1::InferencePool`] (user-written): models served, which pods serve them, their role in
//!   a prefill/decode split, engine, metrics and KV-event settings, scheduling weights.
//! - [`v1::InferenceReplica`]: one serving endpoint. The controller keeps one per ready pod of
//!   each pool (owned by the pool); users write their own for endpoints outside the cluster.
//! - [`v1::TenantPolicy`]: who a tenant is, its weight, priority, limits, and whether it may be
//!   shed.
//!
//! - [`gie::InferencePool`]: reading types for the Gateway API Inference Extension's pools,
//!   which the controller mirrors into warmpath pools (not a warmpath CRD).
//! - [`llmd::InferenceObjective`]: reading types for llm-d's objectives, whose priority the
//!   router gives requests naming them (not a warmpath CRD).
//!
//! Each API version lives in its own module. `v1` is stored; `v1alpha1` is still served
//! (deprecated) from the same CRDs, merged with [`kube::core::crd::merge_crds`], and the API
//! server converts between them by rewriting `apiVersion` only (`api/CHANGES-v1.md` says why
//! that is enough). [`crds`] renders the YAML in the repository's `crds/` folder; a test fails
//! when they drift.
#![forbid(unsafe_code)]

pub mod boundaries;
pub mod conditions;
pub mod crds;
pub mod gie;
pub mod llmd;
pub mod v1;
pub mod v1alpha1;

/// The API group of every warmpath resource.
pub const GROUP: &str = "warmpath.dev";
