//! Noisy-neighbour tenants: `quiet_tenants` tenants each send shared-prefix traffic on their own
//! system prompts, while one `noisy` tenant sends long unshared prompts as `noisy_share` of all
//! requests. Every request carries `x-tenant-id`; results are broken down by tenant, so the
//! quiet tenants' TTFT shows what the noisy one costs them.

use serde::{Deserialize, Serialize};

use super::{Fleet, Prompt, SharedPrefix, WorkRequest, Zipf};
use crate::rng::Rng64;
use crate::text;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoisyNeighbour {
    pub quiet_tenants: u32,
    /// The quiet tenants' traffic; group `g` belongs to tenant `g % quiet_tenants`.
    pub quiet: SharedPrefix,
    /// Fraction of requests that come from the noisy tenant.
    pub noisy_share: f64,
    pub noisy_prompt_tokens: u32,
    pub noisy_output_tokens: u32,
}

impl NoisyNeighbour {
    /// The quiet tenants' groups make `working_set` tokens.
    pub fn for_fleet(fleet: &Fleet, working_set: u64) -> Self {
        let quiet = SharedPrefix::for_fleet(fleet, working_set);
        Self {
            quiet_tenants: 4,
            quiet,
            noisy_share: 0.5,
            noisy_prompt_tokens: 2048,
            noisy_output_tokens: 64,
        }
    }

    pub fn prefix_working_set(&self) -> u64 {
        self.quiet.prefix_working_set()
    }

    pub fn stream(&self, seed: u64) -> impl Iterator<Item = WorkRequest> + Send {
        let spec = self.clone();
        let tenants = spec.quiet_tenants.max(1);
        let systems: Vec<String> = (0..spec.quiet.groups)
            .map(|g| spec.quiet.system_prompt(seed, g))
            .collect();
        let mut pick_rng = Rng64::derive(seed, 3);
        let mut noisy_rng = Rng64::derive(seed, 4);
        let mut question_rng = Rng64::derive(seed, 2);
        let zipf = (spec.quiet.zipf > 0.0).then(|| Zipf::new(spec.quiet.groups, spec.quiet.zipf));
        std::iter::from_fn(move || {
            if pick_rng.unit() < spec.noisy_share {
                return Some(WorkRequest {
                    session: None,
                    tenant: Some("noisy".to_owned()),
                    prompt: Prompt::Text(text::words(
                        &mut noisy_rng,
                        spec.noisy_prompt_tokens as usize,
                    )),
                    max_tokens: spec.noisy_output_tokens,
                    arrival: None,
                });
            }
            let g = match &zipf {
                Some(z) => z.sample(&mut pick_rng),
                None => pick_rng.below(u64::from(spec.quiet.groups.max(1))) as u32,
            };
            let mut prompt = systems[g as usize].clone();
            text::push_words(
                &mut prompt,
                &mut question_rng,
                spec.quiet.question_tokens as usize,
            );
            Some(WorkRequest {
                session: None,
                tenant: Some(format!("tenant-{}", g % tenants)),
                prompt: Prompt::Text(prompt),
                max_tokens: spec.quiet.output_tokens,
                arrival: None,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noisy_share_and_tenants_are_as_configured() {
        let fleet = Fleet::default();
        let w = NoisyNeighbour::for_fleet(&fleet, fleet.working_set_tokens(0.5));
        let reqs: Vec<_> = w.stream(1).take(2000).collect();
        let noisy = reqs
            .iter()
            .filter(|r| r.tenant.as_deref() == Some("noisy"))
            .count();
        assert!((900..1100).contains(&noisy), "{noisy}");
        let quiet: std::collections::HashSet<_> = reqs
            .iter()
            .filter_map(|r| r.tenant.clone())
            .filter(|t| t != "noisy")
            .collect();
        assert_eq!(quiet.len(), 4);
    }
}
