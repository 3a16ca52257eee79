//! Shared prefix: `groups` system prompts, each followed by `prompts_per_group` different
//! questions, in a seeded random order (the shape of SGLang's generated-shared-prefix dataset
//! and inference-perf's `shared_prefix`).
//!
//! With uniform popularity (`zipf` 0), one pass sends every (group, question) pair once,
//! shuffled; the next pass draws new questions for the same system prompts, so the sequence is
//! infinite while the reusable working set stays `groups × system_tokens`. With `zipf` S > 0
//! every request draws its group independently, group g (from 0) with probability ∝ 1/(g+1)^S,
//! and `prompts_per_group` plays no part.

use serde::{Deserialize, Serialize};

use super::{at_least_one_div, is_zero, Fleet, PrefixPicker, Prompt, WorkRequest};
use crate::rng::Rng64;
use crate::text;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SharedPrefix {
    pub groups: u32,
    pub prompts_per_group: u32,
    pub system_tokens: u32,
    pub question_tokens: u32,
    pub output_tokens: u32,
    /// Zipf exponent of group popularity; 0 is uniform.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub zipf: f64,
}

impl SharedPrefix {
    /// System prompts a quarter of one replica's cache (at most 2,048 tokens); as many groups
    /// as make `working_set` tokens.
    pub fn for_fleet(fleet: &Fleet, working_set: u64) -> Self {
        let system_tokens = (fleet.replica_tokens() / 4).clamp(64, 2048) as u32;
        Self {
            groups: at_least_one_div(working_set, u64::from(system_tokens)),
            prompts_per_group: 16,
            system_tokens,
            question_tokens: 64,
            output_tokens: 32,
            zipf: 0.0,
        }
    }

    pub fn prefix_working_set(&self) -> u64 {
        u64::from(self.groups) * u64::from(self.system_tokens)
    }

    /// The system prompt of group `g`: a label that makes groups differ from the first token,
    /// then filler.
    pub fn system_prompt(&self, seed: u64, g: u32) -> String {
        let mut rng = Rng64::derive(seed, 0x5350_0000 + u64::from(g));
        let mut s = String::new();
        text::push_words(&mut s, &mut rng, self.system_tokens as usize);
        s
    }

    pub fn stream(&self, seed: u64) -> impl Iterator<Item = WorkRequest> + Send {
        let spec = self.clone();
        let systems: Vec<String> = (0..spec.groups)
            .map(|g| spec.system_prompt(seed, g))
            .collect();
        let mut order_rng = Rng64::derive(seed, 1);
        let mut question_rng = Rng64::derive(seed, 2);
        let mut picker = PrefixPicker::new(spec.groups, spec.prompts_per_group, spec.zipf, true);
        std::iter::from_fn(move || {
            let g = picker.next(&mut order_rng)?;
            let mut prompt = systems[g as usize].clone();
            text::push_words(
                &mut prompt,
                &mut question_rng,
                spec.question_tokens as usize,
            );
            Some(WorkRequest {
                session: None,
                tenant: None,
                prompt: Prompt::Text(prompt),
                max_tokens: spec.output_tokens,
                arrival: None,
            })
        })
    }
}
