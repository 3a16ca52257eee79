//! Long documents with questions: `documents` long texts, each asked `questions_per_doc`
//! short questions, in a seeded random order. Few, long prefixes: one miss costs a whole
//! document's prefill. With `zipf` S > 0 each request draws its document independently,
//! document d (from 0) with probability ∝ 1/(d+1)^S, and `questions_per_doc` plays no part.

use serde::{Deserialize, Serialize};

use super::{at_least_one_div, is_zero, Fleet, PrefixPicker, Prompt, WorkRequest};
use crate::rng::Rng64;
use crate::text;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LongDoc {
    pub documents: u32,
    pub questions_per_doc: u32,
    pub doc_tokens: u32,
    pub question_tokens: u32,
    pub output_tokens: u32,
    /// Zipf exponent of document popularity; 0 is uniform.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub zipf: f64,
}

impl LongDoc {
    /// Documents of 3/4 of one replica's cache (at most 3,000 tokens, under the simulator's
    /// default 4,096-token context); as many as make `working_set` tokens.
    pub fn for_fleet(fleet: &Fleet, working_set: u64) -> Self {
        let doc_tokens = (fleet.replica_tokens() * 3 / 4).clamp(128, 3000) as u32;
        Self {
            documents: at_least_one_div(working_set, u64::from(doc_tokens)),
            questions_per_doc: 8,
            doc_tokens,
            question_tokens: 32,
            output_tokens: 32,
            zipf: 0.0,
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
        let mut picker =
            PrefixPicker::new(spec.documents, spec.questions_per_doc, spec.zipf, false);
        std::iter::from_fn(move || {
            let d = picker.next(&mut order_rng)?;
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
                arrival: None,
            })
        })
    }
}
