//! Multi-turn chat: conversations that grow turn by turn under one shared system prompt, each
//! turn resending the whole history (see [`super::sessions`]).

use serde::{Deserialize, Serialize};

use super::sessions::{self, Rewrites, SessionShape};
use super::{at_least_one_div, WorkRequest};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MultiTurn {
    /// Conversations open at once.
    pub active: u32,
    pub turns: u32,
    pub system_tokens: u32,
    pub user_tokens: u32,
    /// Length of the synthetic assistant replies kept in the history.
    pub assistant_tokens: u32,
    pub output_tokens: u32,
}

impl MultiTurn {
    /// As many open sessions as make `working_set` tokens.
    pub fn for_fleet(working_set: u64) -> Self {
        let mut w = Self {
            active: 1,
            turns: 8,
            system_tokens: 256,
            user_tokens: 96,
            assistant_tokens: 96,
            output_tokens: 32,
        };
        let per = w.shape().prefix_working_set() - u64::from(w.system_tokens);
        w.active = at_least_one_div(working_set, per);
        w
    }

    fn shape(&self) -> SessionShape {
        SessionShape {
            active: self.active,
            turns: self.turns,
            system_tokens: self.system_tokens,
            opening_tokens: self.user_tokens,
            reply_tokens: self.assistant_tokens,
            followup_tokens: self.user_tokens,
            output_tokens: self.output_tokens,
            stream_tag: 0x4d54_0000_0000,
            rewrites: Rewrites::default(),
        }
    }

    pub fn prefix_working_set(&self) -> u64 {
        self.shape().prefix_working_set()
    }

    pub fn stream(&self, seed: u64) -> impl Iterator<Item = WorkRequest> + Send {
        sessions::stream(self.shape(), seed, "assistant", "user")
    }
}
