//! Long documents with questions: `documents` long texts, each asked `questions_per_doc`
//! short questions, in a seeded random order. Few, long prefixes: one miss costs a whole
//! document's prefill.

use serde::{Deserialize, Serialize};

use super::{at_least_one_div, Fleet, Prompt, WorkRequest};
use crate::rng::Rng64;
use crate::text;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LongDoc {
    pub documents: u32,
    pub questions_per_doc: u32,
    pub doc_tokens: u32,
    pub question_tokens: u32,
    pub output_tokens: u32,
}

impl LongDoc {
    /// Documents of 3/4 of one replica's cache (at most 3,000 tokens, under the simulator's
    /// default 4,096-token context); as many as fill half the fleet's cache.
    pub fn for_fleet(fleet: &Fleet) -> Self {
        let doc_tokens = (fleet.replica_tokens() * 3 / 4).clamp(128, 3000) as u32;
        Self {
            documents: at_least_one_div(fleet.target_working_set(), u64::from(doc_tokens)),
            questions_per_doc: 8,
            doc_tokens,
            question_tokens: 32,
            output_tokens: 32,
        }
    }

    pub fn prefix_working_set(&self) -> u64 {
        u64::from(self.documents) * u64::from(self.doc_tokens)
    }

    pub fn stream(&self, seed: u64) -> impl Iterator<Item = WorkRequest> + Send {
        let spec = self.clone();
        let docs: Vec<String> = (0..spec.documents)
            .map(|d| {
                let mut rng = Rng64::derive(seed, 0x4c44_0000 + u64::from(d));
                text::words(&mut rng, spec.doc_tokens as usize)
            })
            .collect();
        let mut order_rng = Rng64::derive(seed, 1);
        let mut question_rng = Rng64::derive(seed, 2);
        let mut pass: Vec<u32> = Vec::new();
        std::iter::from_fn(move || {
            if pass.is_empty() {
                pass = (0..spec.documents)
                    .flat_map(|d| std::iter::repeat_n(d, spec.questions_per_doc as usize))
                    .collect();
                order_rng.shuffle(&mut pass);
            }
            let d = pass.pop()?;
            let mut prompt = docs[d as usize].clone();
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
            })
        })
    }
}
