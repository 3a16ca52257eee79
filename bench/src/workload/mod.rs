//! Workloads: deterministic (by seed) infinite sequences of requests, each shaped to exercise one
//! way prompts share prefixes.
//!
//! A workload is described by a [`WorkloadSpec`] (recorded in every result file) and turned into
//! requests by [`WorkloadSpec::requests`]. Requests that belong to one session (a conversation,
//! an agent's tool loop) carry its id; the runner never sends a session's request before the
//! previous one of the same session has finished, so a conversation grows as it would with a
//! real client. Sequences are infinite: the runner takes as many as `--requests` or the
//! duration allows, and the oracle replays exactly the ones that were sent.
//!
//! Sizes are in tokens (see [`crate::text`]). [`Fleet`] derives default sizes so that the
//! prefix working set is about half the fleet's total KV cache: more than one replica can hold,
//! less than all of them can, which is where routing decides the hit rate.

mod agent;
mod long_doc;
mod multi_turn;
mod no_sharing;
mod noisy;
mod sessions;
mod shared_prefix;

pub use agent::AgentSessions;
pub use long_doc::LongDoc;
pub use multi_turn::MultiTurn;
pub use no_sharing::NoSharing;
pub use noisy::NoisyNeighbour;
pub use shared_prefix::SharedPrefix;

use serde::{Deserialize, Serialize};

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: &str, content: String) -> Self {
        Self {
            role: role.to_owned(),
            content,
        }
    }
}

/// What is sent: a completion prompt or a chat conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prompt {
    Text(String),
    Chat(Vec<Message>),
}

/// One request of a workload, independent of the wire format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkRequest {
    /// Requests of one session are sent one after the other, in sequence order; sent as the
    /// `x-session-id` header and the OpenAI `user` field.
    pub session: Option<u64>,
    /// Sent as the `x-tenant-id` header; results are also broken down by it.
    pub tenant: Option<String>,
    pub prompt: Prompt,
    pub max_tokens: u32,
}

/// The target fleet the default sizes are derived from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fleet {
    pub replicas: u32,
    /// KV cache blocks of one replica.
    pub kv_blocks: u32,
    /// Tokens per block.
    pub block_size: u32,
}

impl Fleet {
    pub fn replica_tokens(&self) -> u64 {
        u64::from(self.kv_blocks) * u64::from(self.block_size)
    }

    pub fn fleet_tokens(&self) -> u64 {
        self.replica_tokens() * u64::from(self.replicas)
    }

    /// The prefix working set the default sizes aim at: half the fleet's cache, leaving the
    /// other half for the unshared tails, the generated tokens and the requests in flight.
    pub fn target_working_set(&self) -> u64 {
        self.fleet_tokens() / 2
    }
}

impl Default for Fleet {
    /// The simulator fleet `bench/compare.sh` starts.
    fn default() -> Self {
        Self {
            replicas: 8,
            kv_blocks: 512,
            block_size: 16,
        }
    }
}

/// A workload and all its parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum WorkloadSpec {
    SharedPrefix(SharedPrefix),
    MultiTurn(MultiTurn),
    LongDoc(LongDoc),
    Agent(AgentSessions),
    NoSharing(NoSharing),
    NoisyNeighbour(NoisyNeighbour),
}

/// An infinite, seeded request sequence.
pub type RequestStream = Box<dyn Iterator<Item = WorkRequest> + Send>;

impl WorkloadSpec {
    pub fn name(&self) -> &'static str {
        match self {
            Self::SharedPrefix(_) => "shared-prefix",
            Self::MultiTurn(_) => "multi-turn",
            Self::LongDoc(_) => "long-doc",
            Self::Agent(_) => "agent",
            Self::NoSharing(_) => "no-sharing",
            Self::NoisyNeighbour(_) => "noisy-neighbour",
        }
    }

    /// The request sequence for `seed`: the same seed always gives the same sequence.
    pub fn requests(&self, seed: u64) -> RequestStream {
        match self {
            Self::SharedPrefix(w) => Box::new(w.stream(seed)),
            Self::MultiTurn(w) => Box::new(w.stream(seed)),
            Self::LongDoc(w) => Box::new(w.stream(seed)),
            Self::Agent(w) => Box::new(w.stream(seed)),
            Self::NoSharing(w) => Box::new(w.stream(seed)),
            Self::NoisyNeighbour(w) => Box::new(w.stream(seed)),
        }
    }

    /// Tokens of reusable prefix that are live at once (the cache a perfect router needs to
    /// keep every reusable prefix).
    pub fn prefix_working_set(&self) -> u64 {
        match self {
            Self::SharedPrefix(w) => w.prefix_working_set(),
            Self::MultiTurn(w) => w.prefix_working_set(),
            Self::LongDoc(w) => w.prefix_working_set(),
            Self::Agent(w) => w.prefix_working_set(),
            Self::NoSharing(_) => 0,
            Self::NoisyNeighbour(w) => w.prefix_working_set(),
        }
    }

    /// Defaults of the named workload for a fleet.
    pub fn defaults_for(name: &str, fleet: &Fleet) -> Option<Self> {
        Some(match name {
            "shared-prefix" => Self::SharedPrefix(SharedPrefix::for_fleet(fleet)),
            "multi-turn" => Self::MultiTurn(MultiTurn::for_fleet(fleet)),
            "long-doc" => Self::LongDoc(LongDoc::for_fleet(fleet)),
            "agent" => Self::Agent(AgentSessions::for_fleet(fleet)),
            "no-sharing" => Self::NoSharing(NoSharing::default()),
            "noisy-neighbour" => Self::NoisyNeighbour(NoisyNeighbour::for_fleet(fleet)),
            _ => return None,
        })
    }

    pub const NAMES: [&'static str; 6] = [
        "shared-prefix",
        "multi-turn",
        "long-doc",
        "agent",
        "no-sharing",
        "noisy-neighbour",
    ];
}

/// `ceil(a / b)`, at least 1.
pub(crate) fn at_least_one_div(a: u64, b: u64) -> u32 {
    a.div_ceil(b.max(1)).max(1) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix_tokens(a: &WorkRequest, b: &WorkRequest) -> usize {
        let (Prompt::Text(x), Prompt::Text(y)) = (&a.prompt, &b.prompt) else {
            panic!("text prompts expected")
        };
        x.bytes().zip(y.bytes()).take_while(|(p, q)| p == q).count() / crate::text::BYTES_PER_TOKEN
    }

    #[test]
    fn every_workload_is_deterministic_by_seed() {
        let fleet = Fleet::default();
        for name in WorkloadSpec::NAMES {
            let spec = WorkloadSpec::defaults_for(name, &fleet).unwrap();
            let a: Vec<_> = spec.requests(5).take(50).collect();
            let b: Vec<_> = spec.requests(5).take(50).collect();
            let c: Vec<_> = spec.requests(6).take(50).collect();
            assert_eq!(a, b, "{name}");
            assert_ne!(a, c, "{name}");
        }
    }

    #[test]
    fn default_working_sets_exceed_one_replica_and_fit_the_fleet() {
        let fleet = Fleet::default();
        for name in WorkloadSpec::NAMES {
            let spec = WorkloadSpec::defaults_for(name, &fleet).unwrap();
            let ws = spec.prefix_working_set();
            if name == "no-sharing" {
                assert_eq!(ws, 0);
                continue;
            }
            assert!(ws > fleet.replica_tokens(), "{name}: {ws}");
            assert!(ws < fleet.fleet_tokens(), "{name}: {ws}");
        }
    }

    #[test]
    fn spec_round_trips_through_json() {
        let spec = WorkloadSpec::defaults_for("agent", &Fleet::default()).unwrap();
        let json = serde_json::to_string(&spec).unwrap();
        assert!(json.contains("\"kind\":\"agent\""), "{json}");
        let back: WorkloadSpec = serde_json::from_str(&json).unwrap();
        assert_eq!(back, spec);
    }

    #[test]
    fn shared_prefix_requests_share_exactly_the_group_prompt() {
        let w = SharedPrefix {
            groups: 3,
            prompts_per_group: 4,
            system_tokens: 64,
            question_tokens: 16,
            output_tokens: 8,
        };
        let reqs: Vec<_> = w.stream(1).take(12).collect();
        let mut same_group = 0;
        for i in 0..reqs.len() {
            for j in i + 1..reqs.len() {
                let shared = prefix_tokens(&reqs[i], &reqs[j]);
                // Either the same group (the system prompt plus its label and maybe a few
                // coincidental question words) or a different group (a few coincidental words).
                if shared >= 64 {
                    same_group += 1;
                    assert!(shared < 64 + 16, "{shared}");
                } else {
                    assert!(shared < 8, "{shared}");
                }
            }
        }
        // 3 groups of 4 prompts: 3 × C(4,2) pairs share a system prompt.
        assert_eq!(same_group, 18);
    }
}
