//! Agent sessions: tool loops under one session id. Every session starts with the same long
//! system prompt (instructions and tool definitions), then a task; each step appends the
//! model's tool call and the tool's (long) result, and asks again. Optionally the context is
//! rewritten as real agents do ([`Rewrites`]): late tool results spliced into the middle of the
//! history, and the history compacted into a summary every few steps.

use serde::{Deserialize, Serialize};

use super::sessions::{self, Rewrites, SessionShape};
use super::{at_least_one_div, WorkRequest};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentSessions {
    /// Sessions open at once.
    pub active: u32,
    /// Requests per session.
    pub steps: u32,
    pub system_tokens: u32,
    pub task_tokens: u32,
    pub tool_call_tokens: u32,
    pub tool_result_tokens: u32,
    pub output_tokens: u32,
    /// How the context is rewritten; none by default (and then left out of the JSON, so that
    /// specs written before rewrites existed read back unchanged).
    #[serde(default, flatten)]
    pub rewrites: Rewrites,
}

impl AgentSessions {
    /// As many open sessions as make `working_set` tokens.
    pub fn for_fleet(working_set: u64) -> Self {
        let mut w = Self {
            active: 1,
            steps: 8,
            system_tokens: 1024,
            task_tokens: 128,
            tool_call_tokens: 32,
            tool_result_tokens: 192,
            output_tokens: 32,
            rewrites: Rewrites::default(),
        };
        let per = w.shape().prefix_working_set() - u64::from(w.system_tokens);
        w.active = at_least_one_div(working_set, per);
        w
    }

    fn shape(&self) -> SessionShape {
        SessionShape {
            active: self.active,
            turns: self.steps,
            system_tokens: self.system_tokens,
            opening_tokens: self.task_tokens,
            reply_tokens: self.tool_call_tokens,
            followup_tokens: self.tool_result_tokens,
            output_tokens: self.output_tokens,
            stream_tag: 0x4147_0000_0000,
            rewrites: self.rewrites.clone(),
        }
    }

    pub fn prefix_working_set(&self) -> u64 {
        self.shape().prefix_working_set()
    }

    pub fn stream(&self, seed: u64) -> impl Iterator<Item = WorkRequest> + Send {
        // Tool results come back as user messages: every chat template accepts that role,
        // while "tool" needs tool-call ids that not every template handles.
        sessions::stream(self.shape(), seed, "assistant", "user")
    }
}
