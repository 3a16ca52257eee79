//! The status conditions every warmpath resource reports, and a helper that updates a
//! condition list the way Kubernetes expects (`lastTransitionTime` moves only when the status
//! changes).
//!
//! - `Accepted`: the spec is usable as written (what CEL cannot check, e.g. a replica's pool
//!   serving the replica's models).
//! - `ResolvedRefs`: every object the spec names exists (a replica's pool, a tenant's Secret).
//! - `Ready`: the resource takes traffic (a pool has a ready replica, a replica passes health
//!   checks, a tenant's keys are loaded).
//! - `ModelsClaimed` (pools): every model the pool names is its namespace's to serve; `False`
//!   names each model another namespace claimed first ([`crate::boundaries`]).
//! - `TokenizerAllowed` (pools with `kvEvents` paths): the tokenizer and chat template lie
//!   under the routers' tokenizer root; `False`: the pool is routed without them.
//!
//! Messages say what to fix, e.g. "InferencePool \"llama\" not found in namespace ml: create
//! it or fix spec.pool".

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

pub const ACCEPTED: &str = "Accepted";
pub const RESOLVED_REFS: &str = "ResolvedRefs";
pub const READY: &str = "Ready";
pub const MODELS_CLAIMED: &str = "ModelsClaimed";
pub const TOKENIZER_ALLOWED: &str = "TokenizerAllowed";

/// Reasons (CamelCase, as the API conventions ask).
pub mod reason {
    pub const ACCEPTED: &str = "Accepted";
    pub const INVALID: &str = "Invalid";
    pub const RESOLVED: &str = "Resolved";
    pub const POOL_NOT_FOUND: &str = "PoolNotFound";
    pub const SECRET_NOT_FOUND: &str = "SecretNotFound";
    pub const KEY_NOT_FOUND: &str = "KeyNotFound";
    pub const READY: &str = "Ready";
    pub const NO_READY_REPLICAS: &str = "NoReadyReplicas";
    pub const UNHEALTHY: &str = "Unhealthy";
    /// A model the pool names belongs to another namespace.
    pub const MODEL_CLAIMED_BY_NAMESPACE: &str = "ModelClaimedByNamespace";
    /// Every model the pool names is its namespace's.
    pub const MODELS_OWNED: &str = "ModelsOwned";
    /// A tokenizer or chat-template path outside the routers' tokenizer root.
    pub const OUTSIDE_TOKENIZER_ROOT: &str = "OutsideTokenizerRoot";
    /// Tokenizer and chat-template paths under the routers' tokenizer root.
    pub const UNDER_TOKENIZER_ROOT: &str = "UnderTokenizerRoot";
    /// A replica's address is outside the networks the routers' operator allows.
    pub const ADDRESS_NOT_ALLOWED: &str = "AddressNotAllowed";
    /// A tenant's priority was lowered to the routers' cap.
    pub const PRIORITY_CAPPED: &str = "PriorityCapped";
    /// A tenant's header value belongs to a TenantPolicy that claimed it first.
    pub const HEADER_CLAIMED: &str = "HeaderClaimed";
}

/// Removes the condition of a type; returns whether there was one.
pub fn remove(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

/// A condition with status `True` or `False`.
pub fn new(
    type_: &str,
    ok: bool,
    reason: &str,
    message: impl Into<String>,
    observed_generation: Option<i64>,
    now: Time,
) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: if ok { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message: message.into(),
        observed_generation,
        last_transition_time: now,
    }
}

/// Puts `condition` in `conditions`, replacing the one of the same type. Keeps the old
/// `lastTransitionTime` when the status did not change. Returns whether anything changed (so a
/// controller can skip a status write that would change nothing).
pub fn set(conditions: &mut Vec<Condition>, mut condition: Condition) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        Some(old) => {
            if old.status == condition.status {
                condition.last_transition_time = old.last_transition_time.clone();
            }
            if *old == condition {
                return false;
            }
            *old = condition;
            true
        }
        None => {
            conditions.push(condition);
            true
        }
    }
}

/// The condition of a type, if present.
pub fn get<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of a type is present with status `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    get(conditions, type_).is_some_and(|c| c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap())
    }

    #[test]
    fn transition_time_moves_only_when_status_changes() {
        let mut list = Vec::new();
        assert!(set(
            &mut list,
            new(
                READY,
                false,
                reason::NO_READY_REPLICAS,
                "none",
                Some(1),
                time(10)
            )
        ));
        // Same status, new message: updated, transition time kept.
        assert!(set(
            &mut list,
            new(
                READY,
                false,
                reason::NO_READY_REPLICAS,
                "still none",
                Some(2),
                time(20)
            )
        ));
        assert_eq!(list[0].last_transition_time, time(10));
        assert_eq!(list[0].message, "still none");
        // Nothing new: no change reported.
        assert!(!set(
            &mut list,
            new(
                READY,
                false,
                reason::NO_READY_REPLICAS,
                "still none",
                Some(2),
                time(30)
            )
        ));
        // Status flips: transition time moves.
        assert!(set(
            &mut list,
            new(
                READY,
                true,
                reason::READY,
                "1 of 1 ready",
                Some(2),
                time(40)
            )
        ));
        assert_eq!(list[0].last_transition_time, time(40));
        assert!(is_true(&list, READY));
        assert!(!is_true(&list, ACCEPTED));
        assert!(set(
            &mut list,
            new(ACCEPTED, true, reason::ACCEPTED, "ok", Some(2), time(40))
        ));
        assert_eq!(list.len(), 2);
    }
}
