//! No sharing: every prompt is fresh random text. The control case: no policy can get hits,
//! so what remains is load balance.

use serde::{Deserialize, Serialize};

use super::{Prompt, WorkRequest};
use crate::rng::Rng64;
use crate::text;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoSharing {
    pub prompt_tokens: u32,
    pub output_tokens: u32,
}

impl Default for NoSharing {
    fn default() -> Self {
        Self {
            prompt_tokens: 512,
            output_tokens: 32,
        }
    }
}

impl NoSharing {
    pub fn stream(&self, seed: u64) -> impl Iterator<Item = WorkRequest> + Send {
        let spec = self.clone();
        let mut rng = Rng64::derive(seed, 0x4e53);
        std::iter::from_fn(move || {
            Some(WorkRequest {
                session: None,
                tenant: None,
                prompt: Prompt::Text(text::words(&mut rng, spec.prompt_tokens as usize)),
                max_tokens: spec.output_tokens,
                arrival: None,
            })
        })
    }
}
