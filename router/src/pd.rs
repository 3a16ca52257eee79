//! The prefill/decode step: runs after the replica is chosen, and decides whether the prompt's
//! prefill should run elsewhere (a `prefill` pool) before the chosen replica decodes.
//!
//! This is the seam for P/D disaggregation. The router ships [`NoSplit`]: the chosen replica
//! does both. A splitting policy would return [`PdPlan::Split`] (for example when the uncached
//! part of the prompt is long), and the proxy would then send the prefill request first and
//! add `x-warmpath-prefill-replica` to the response.

use crate::request::RequestFeatures;
use warmpath_routing::scheduler::Decision;

/// What the proxy should do with a routed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PdPlan {
    /// The chosen replica prefills and decodes.
    Local,
    /// Prefill on this replica (by name) first, then decode on the chosen one.
    Split { prefill_replica: String },
}

pub trait PdPolicy: Send + Sync + 'static {
    fn plan(&self, request: &RequestFeatures, decision: &Decision, uncached_tokens: u32) -> PdPlan;
}

/// No disaggregation.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoSplit;

impl PdPolicy for NoSplit {
    fn plan(&self, _: &RequestFeatures, _: &Decision, _: u32) -> PdPlan {
        PdPlan::Local
    }
}
