//! The scheduler's configuration: which policy, the weighted policy's weights, the hot-spot
//! guard, the peer baselines' knobs, and the one place their values are checked
//! ([`SchedulerConfig::validate`]). Front ends deserialize these types as they are, so that the
//! rules here are the only rules.

use super::weighted::LEAVE_FACTOR;
use crate::ConfigError;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    RoundRobin,
    LeastLoad,
    /// Weighted sum of scorers.
    /// The default: on the shared-prefix benchmark (BENCHMARKS.md) it has the best hit rate and
    /// TTFT of the four, in closed and open loop.
    #[default]
    Prefix,
    /// Argmin of predicted TTFT. Meant for replicas that differ in speed (a mixed fleet); the
    /// benchmark of one (BENCHMARKS.md, suite `sim-mixed-fleet`) has not shown it ahead of `prefix`.
    PredictedTtft,
    /// Peer baseline: bounded-load consistent hashing on the prompt's first blocks (as Envoy's
    /// ring hash and HAProxy's `hash-balance-factor` ship it). Settings: [`ConsistentHash`].
    ConsistentHash,
    /// Peer baseline: llm-d's default scorers and weights, without warmpath's additions.
    /// Settings: [`LlmD`].
    LlmD,
    /// Peer baseline: NVIDIA Dynamo's KV-router cost at temperature 0. Settings: [`Dynamo`].
    Dynamo,
}

impl Policy {
    /// The name it is configured by.
    pub fn name(self) -> &'static str {
        match self {
            Policy::RoundRobin => "round_robin",
            Policy::LeastLoad => "least_load",
            Policy::Prefix => "prefix",
            Policy::PredictedTtft => "predicted_ttft",
            Policy::ConsistentHash => "consistent_hash",
            Policy::LlmD => "llm_d",
            Policy::Dynamo => "dynamo",
        }
    }

    /// Every policy, warmpath's first, then the peer baselines.
    pub const ALL: [Policy; 7] = [
        Policy::RoundRobin,
        Policy::LeastLoad,
        Policy::Prefix,
        Policy::PredictedTtft,
        Policy::ConsistentHash,
        Policy::LlmD,
        Policy::Dynamo,
    ];

    /// Whether the policy routes by the prompt's prefix: by the prefix index, or for
    /// `consistent_hash` by the hash of its first blocks (all but round-robin and least-load).
    pub fn is_prefix_aware(self) -> bool {
        !matches!(self, Policy::RoundRobin | Policy::LeastLoad)
    }
}

/// Weights of the weighted-sum policy (llm-d's defaults: prefix 3, queue 2, kv 2).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Weights {
    pub prefix: f64,
    pub load: f64,
    pub queue: f64,
    pub kv_cache: f64,
}

impl Default for Weights {
    fn default() -> Self {
        Self {
            prefix: 3.0,
            load: 1.0,
            queue: 2.0,
            kv_cache: 2.0,
        }
    }
}

/// Hot-spot guard settings. Off by default (`max_wait_s: inf`): the `prefix` policy's
/// stickiness rule and the `predicted_ttft` cost already leave a warm replica when waiting
/// there costs more than the prefill a move repeats, and in every measured case where the
/// guard fired on top of them it cost hit rate and throughput (a saturated fleet whose caches
/// bind, `bench/results-replicas/probes/guard-off-s11`: one router 0.645 → 0.735 hit rate,
/// 37.8 → 47.7 req/s; slow prefill, `bench/results-diagnosis/`: 18.8 → 26-34 req/s). Set
/// `max_wait_s` to spill a prefix whose replica's predicted wait passes it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HotspotGuard {
    /// Spill when the best replica's predicted wait (queueing only, seconds) exceeds this…
    pub max_wait_s: f64,
    /// …and another replica's predicted wait is at most `1 / spill_factor` of it (the hot spot
    /// is relative to the fleet), and that replica's predicted TTFT is within this factor of
    /// the best's.
    pub spill_factor: f64,
}

impl Default for HotspotGuard {
    fn default() -> Self {
        Self {
            max_wait_s: f64::INFINITY,
            spill_factor: 2.0,
        }
    }
}

/// Where the weighted policy puts a prompt's new part (`scheduler/weighted.rs`,
/// `new_prefix_home`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Placement {
    /// Among the warmest candidates scoring within this much of the best (in weighted-score
    /// units at the default weights: 0.5 is 8 more in-flight requests at light load, or one
    /// more waiting in the engine's queue, or 25% more KV use), the prompt's first unmatched
    /// block chooses by its hash. 0: only among exact ties; negative: off (the best score
    /// wins, ties at random).
    pub new_prefix_slack: f64,
    /// The weighted pick is left for the cheapest candidate when it is predicted to cost more
    /// than this many times as much (`left_backed_up`; `scheduler/weighted.rs`,
    /// `leave_backed_up`). At least 1; `inf` turns the rule off (a request then leaves its
    /// warmest replica only by the stickiness rule and the hot-spot guard).
    pub leave_factor: f64,
    /// The weighted pick is left (`left_backed_up`) only when it holds more than this many
    /// times the candidates' mean of requests queued or running, and at least one more than
    /// the mean: a replica over its share serves more conversations than it can, and a move
    /// moves one of them home for good; one at or under its share is only busy for a moment (a
    /// long prefill ahead), and a move repeats prefill the next moment would not have needed.
    /// 0: any replica may be left (the cost comparison alone).
    pub leave_over_share: f64,
    /// Count a replica's pending prefill as what its prefill clock says is left of it, not as
    /// every prompt token still owed a first token (the router's side: `ReplicaState::
    /// pending_prefill_left`). Off by default until scored: on tuning seeds it bought hit rate
    /// on the Mooncake trace and cost TTFT at 300 µs per token (docs/architecture.md).
    pub drain_pending_prefill: bool,
}

impl Default for Placement {
    fn default() -> Self {
        Self {
            new_prefix_slack: 0.5,
            leave_factor: LEAVE_FACTOR,
            leave_over_share: 0.0,
            drain_pending_prefill: false,
        }
    }
}

/// Settings of the `consistent_hash` policy (`scheduler/consistent_hash.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsistentHash {
    /// The key is the chained hash of this many leading blocks (of the last full block of a
    /// shorter prompt).
    pub prefix_blocks: u32,
    /// A replica takes the request only while its in-flight requests are below
    /// `ceil((1 + epsilon) × (total in flight + 1) / replicas)` (Envoy's `hash_balance_factor`
    /// is `100 × (1 + epsilon)`).
    pub epsilon: f64,
    /// Points per replica on the ring.
    pub virtual_nodes: u32,
}

/// The most points per replica a ring may have: 256 replicas at this many take 12 MB.
pub const MAX_VIRTUAL_NODES: u32 = 4096;

impl Default for ConsistentHash {
    fn default() -> Self {
        Self {
            prefix_blocks: 4,
            epsilon: 0.25,
            virtual_nodes: 100,
        }
    }
}

/// Settings of the `llm_d` policy (`scheduler/llm_d.rs`): llm-d's default scorer weights and
/// its prefix scorer's match cap.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LlmD {
    /// `prefix-cache-scorer` weight.
    pub prefix: f64,
    /// `queue-scorer` weight.
    pub queue: f64,
    /// `kv-cache-utilization-scorer` weight.
    pub kv_cache: f64,
    /// The prefix scorer looks at this many leading prompt tokens at most (llm-d: 256 blocks of
    /// 16 tokens); longer prompts that agree up to it score alike. 0: no cap.
    pub max_prefix_tokens: u32,
}

impl Default for LlmD {
    fn default() -> Self {
        Self {
            prefix: 3.0,
            queue: 2.0,
            kv_cache: 2.0,
            max_prefix_tokens: 4096,
        }
    }
}

/// Settings of the `dynamo` policy (`scheduler/dynamo.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Dynamo {
    /// Weight of the prefill blocks against the active blocks (Dynamo's
    /// `--kv-overlap-score-weight`, now `prefill_load_scale`); 0 ignores the prefix cache.
    pub overlap_score_weight: f64,
}

impl Default for Dynamo {
    fn default() -> Self {
        Self {
            overlap_score_weight: 1.0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulerConfig {
    pub policy: Policy,
    pub weights: Weights,
    pub hotspot: HotspotGuard,
    pub placement: Placement,
    pub consistent_hash: ConsistentHash,
    pub llm_d: LlmD,
    pub dynamo: Dynamo,
}

impl SchedulerConfig {
    /// Check the values the scheduler would otherwise quietly neutralise: a negative or
    /// non-finite weight (scored as 0), all-zero weights under the weighted policy (every score
    /// 0, so ties at random), a NaN or negative `max_wait_s` and a `spill_factor` below 1 (the
    /// guard then never fires). `max_wait_s: inf` is valid and turns the guard off. The peer
    /// baselines' knobs are checked whatever the policy, except that llm-d's weights may all be 0
    /// when another policy is selected (as the weighted policy's may).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let w = &self.weights;
        let weights = [
            ("prefix", w.prefix),
            ("load", w.load),
            ("queue", w.queue),
            ("kv_cache", w.kv_cache),
        ];
        if let Some(&(name, value)) = weights.iter().find(|w| !non_negative(w.1)) {
            return Err(ConfigError::Weight { name, value });
        }
        // Only the weighted policy reads the weights; the others may leave them all at 0.
        if self.policy == Policy::Prefix && w.prefix + w.load + w.queue + w.kv_cache <= 0.0 {
            return Err(ConfigError::AllWeightsZero);
        }
        let h = &self.hotspot;
        if h.max_wait_s.is_nan() || h.max_wait_s < 0.0 {
            return Err(ConfigError::MaxWait(h.max_wait_s));
        }
        if !(h.spill_factor.is_finite() && h.spill_factor >= 1.0) {
            return Err(ConfigError::SpillFactor(h.spill_factor));
        }
        let leave = self.placement.leave_factor;
        if leave.is_nan() || leave < 1.0 {
            return Err(ConfigError::LeaveFactor(leave));
        }
        let share = self.placement.leave_over_share;
        if !(share.is_finite() && share >= 0.0) {
            return Err(ConfigError::Knob {
                section: "placement",
                name: "leave_over_share",
                value: share,
                rule: "a finite number >= 0",
            });
        }
        self.validate_peers()
    }

    fn validate_peers(&self) -> Result<(), ConfigError> {
        let (ch, l) = (&self.consistent_hash, &self.llm_d);
        let knob = |section, name, value, rule| ConfigError::Knob {
            section,
            name,
            value,
            rule,
        };
        if ch.prefix_blocks == 0 {
            return Err(knob(
                "consistent_hash",
                "prefix_blocks",
                0.0,
                "an integer >= 1",
            ));
        }
        if !(1..=MAX_VIRTUAL_NODES).contains(&ch.virtual_nodes) {
            return Err(knob(
                "consistent_hash",
                "virtual_nodes",
                f64::from(ch.virtual_nodes),
                "an integer between 1 and 4096",
            ));
        }
        let reals = [
            ("consistent_hash", "epsilon", ch.epsilon),
            ("llm_d", "prefix", l.prefix),
            ("llm_d", "queue", l.queue),
            ("llm_d", "kv_cache", l.kv_cache),
            (
                "dynamo",
                "overlap_score_weight",
                self.dynamo.overlap_score_weight,
            ),
        ];
        if let Some(&(section, name, value)) = reals.iter().find(|r| !non_negative(r.2)) {
            return Err(knob(section, name, value, "a finite number >= 0"));
        }
        if self.policy == Policy::LlmD && l.prefix + l.queue + l.kv_cache <= 0.0 {
            return Err(ConfigError::AllLlmDWeightsZero);
        }
        Ok(())
    }
}

/// A finite number >= 0: what every weight and factor must be.
fn non_negative(v: f64) -> bool {
    v.is_finite() && v >= 0.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_names_the_bad_value() {
        assert_eq!(SchedulerConfig::default().validate(), Ok(()));
        let mut c = SchedulerConfig::default();
        c.weights.queue = -1.0;
        assert_eq!(
            c.validate(),
            Err(ConfigError::Weight {
                name: "queue",
                value: -1.0
            })
        );
        let mut c = SchedulerConfig {
            policy: Policy::Prefix,
            ..SchedulerConfig::default()
        };
        c.weights = Weights {
            prefix: 0.0,
            load: 0.0,
            queue: 0.0,
            kv_cache: 0.0,
        };
        assert_eq!(c.validate(), Err(ConfigError::AllWeightsZero));
        for policy in [Policy::RoundRobin, Policy::LeastLoad, Policy::PredictedTtft] {
            assert_eq!(
                SchedulerConfig { policy, ..c }.validate(),
                Ok(()),
                "{policy:?}"
            );
        }
        let mut c = SchedulerConfig::default();
        c.hotspot.max_wait_s = f64::INFINITY;
        assert_eq!(c.validate(), Ok(()));
        c.hotspot.spill_factor = 0.5;
        assert_eq!(c.validate(), Err(ConfigError::SpillFactor(0.5)));
        c.hotspot.spill_factor = 2.0;
        c.hotspot.max_wait_s = -1.0;
        assert!(c.validate().unwrap_err().to_string().contains("max_wait_s"));
        let mut c = SchedulerConfig::default();
        for bad in [0.5, f64::NAN, -1.0] {
            c.placement.leave_factor = bad;
            let e = c.validate().unwrap_err();
            assert_eq!(e.field(), ["placement", "leave_factor"], "{bad}");
        }
        for good in [1.0, 2.0, f64::INFINITY] {
            c.placement.leave_factor = good;
            assert_eq!(c.validate(), Ok(()), "{good}");
        }
        for bad in [-0.5, f64::NAN, f64::INFINITY] {
            c.placement.leave_over_share = bad;
            let e = c.validate().unwrap_err();
            assert_eq!(e.field(), ["placement", "leave_over_share"], "{bad}");
        }
        for good in [0.0, 1.0, 1.5] {
            c.placement.leave_over_share = good;
            assert_eq!(c.validate(), Ok(()), "{good}");
        }
    }

    #[test]
    fn errors_name_their_field_in_serde_terms() {
        let mut c = SchedulerConfig::default();
        c.weights.kv_cache = f64::NAN;
        assert_eq!(c.validate().unwrap_err().field(), ["weights", "kv_cache"]);
        c.weights = Weights {
            prefix: 0.0,
            load: 0.0,
            queue: 0.0,
            kv_cache: 0.0,
        };
        assert_eq!(c.validate().unwrap_err().field(), ["weights"]);
        let mut c = SchedulerConfig::default();
        c.hotspot.spill_factor = f64::INFINITY;
        assert_eq!(
            c.validate().unwrap_err().field(),
            ["hotspot", "spill_factor"]
        );
        c.hotspot.spill_factor = 1.0;
        c.hotspot.max_wait_s = f64::NAN;
        assert_eq!(c.validate().unwrap_err().field(), ["hotspot", "max_wait_s"]);
    }

    /// A way to spoil a configuration, and the field that then names the error.
    type Spoil = (fn(&mut SchedulerConfig), [&'static str; 2]);

    #[test]
    fn peer_knobs_are_checked_and_named() {
        let bad: [Spoil; 8] = [
            (
                |c| c.consistent_hash.prefix_blocks = 0,
                ["consistent_hash", "prefix_blocks"],
            ),
            (
                |c| c.consistent_hash.epsilon = -0.1,
                ["consistent_hash", "epsilon"],
            ),
            (
                |c| c.consistent_hash.epsilon = f64::INFINITY,
                ["consistent_hash", "epsilon"],
            ),
            (
                |c| c.consistent_hash.virtual_nodes = 0,
                ["consistent_hash", "virtual_nodes"],
            ),
            (
                |c| c.consistent_hash.virtual_nodes = MAX_VIRTUAL_NODES + 1,
                ["consistent_hash", "virtual_nodes"],
            ),
            (|c| c.llm_d.queue = f64::NAN, ["llm_d", "queue"]),
            (|c| c.llm_d.kv_cache = -2.0, ["llm_d", "kv_cache"]),
            (
                |c| c.dynamo.overlap_score_weight = -1.0,
                ["dynamo", "overlap_score_weight"],
            ),
        ];
        for (break_it, field) in bad {
            // Checked whatever the policy.
            for policy in [Policy::Prefix, Policy::ConsistentHash, Policy::Dynamo] {
                let mut c = SchedulerConfig {
                    policy,
                    ..SchedulerConfig::default()
                };
                break_it(&mut c);
                let e = c.validate().unwrap_err();
                assert_eq!(e.field(), field, "{e}");
                assert!(e.to_string().contains(field[1]), "{e}");
            }
        }
        let mut c = SchedulerConfig::default();
        c.consistent_hash.virtual_nodes = MAX_VIRTUAL_NODES;
        c.consistent_hash.epsilon = 0.0;
        c.dynamo.overlap_score_weight = 0.0;
        assert_eq!(c.validate(), Ok(()));
        c.consistent_hash.virtual_nodes = MAX_VIRTUAL_NODES + 1;
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains(&format!("between 1 and {MAX_VIRTUAL_NODES}")));
        // llm-d's weights may all be 0 only when another policy is selected.
        let mut c = SchedulerConfig {
            llm_d: LlmD {
                prefix: 0.0,
                queue: 0.0,
                kv_cache: 0.0,
                ..LlmD::default()
            },
            ..SchedulerConfig::default()
        };
        assert_eq!(c.validate(), Ok(()));
        c.policy = Policy::LlmD;
        assert_eq!(c.validate(), Err(ConfigError::AllLlmDWeightsZero));
        assert_eq!(c.validate().unwrap_err().field(), ["llm_d"]);
        // The weighted policy's weights may all be 0 under the peer policies.
        for policy in [Policy::ConsistentHash, Policy::LlmD, Policy::Dynamo] {
            let c = SchedulerConfig {
                policy,
                weights: Weights {
                    prefix: 0.0,
                    load: 0.0,
                    queue: 0.0,
                    kv_cache: 0.0,
                },
                ..SchedulerConfig::default()
            };
            assert_eq!(c.validate(), Ok(()), "{policy:?}");
        }
    }

    #[test]
    fn all_lists_every_policy_once() {
        let names: Vec<String> = Policy::ALL
            .iter()
            .map(|p| serde_json::to_string(p).unwrap())
            .collect();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len());
        let blind: Vec<Policy> = Policy::ALL
            .into_iter()
            .filter(|p| !p.is_prefix_aware())
            .collect();
        assert_eq!(blind, [Policy::RoundRobin, Policy::LeastLoad]);
    }

    #[test]
    fn peer_policies_have_snake_case_names_and_defaults() {
        let peers = [Policy::ConsistentHash, Policy::LlmD, Policy::Dynamo];
        let names: Vec<String> = peers
            .iter()
            .map(|p| serde_json::to_string(p).unwrap())
            .collect();
        assert_eq!(names, [r#""consistent_hash""#, r#""llm_d""#, r#""dynamo""#]);
        for (policy, name) in peers.into_iter().zip(&names) {
            let json = format!(r#"{{"policy":{name}}}"#);
            let c: SchedulerConfig = serde_json::from_str(&json).unwrap();
            assert_eq!(c.policy, policy);
        }
        let c = SchedulerConfig::default();
        let want = ConsistentHash {
            prefix_blocks: 4,
            epsilon: 0.25,
            virtual_nodes: 100,
        };
        assert_eq!(c.consistent_hash, want);
        let want = LlmD {
            prefix: 3.0,
            queue: 2.0,
            kv_cache: 2.0,
            max_prefix_tokens: 4096,
        };
        assert_eq!(c.llm_d, want);
        assert_eq!(c.dynamo.overlap_score_weight, 1.0);
        let c: SchedulerConfig = serde_json::from_str(
            r#"{"policy":"dynamo","dynamo":{"overlap_score_weight":2},"consistent_hash":{"epsilon":0.5},"llm_d":{"queue":1}}"#,
        )
        .unwrap();
        assert_eq!(c.dynamo.overlap_score_weight, 2.0);
        assert_eq!(c.consistent_hash.epsilon, 0.5);
        assert_eq!(c.consistent_hash.prefix_blocks, 4);
        assert_eq!((c.llm_d.queue, c.llm_d.prefix), (1.0, 3.0));
        assert!(
            serde_json::from_str::<SchedulerConfig>(r#"{"dynamo":{"temperature":0}}"#).is_err()
        );
    }

    #[test]
    fn config_round_trips_through_serde_names() {
        let c: SchedulerConfig = serde_json::from_str(
            r#"{"policy":"round_robin","weights":{"prefix":1.0},"hotspot":{"max_wait_s":1.0}}"#,
        )
        .unwrap();
        assert_eq!(c.policy, Policy::RoundRobin);
        assert_eq!(c.weights.prefix, 1.0);
        assert_eq!(c.weights.queue, 2.0);
        assert_eq!(c.hotspot.spill_factor, 2.0);
        assert!(serde_json::from_str::<SchedulerConfig>(r#"{"bogus":1}"#).is_err());
    }
}
