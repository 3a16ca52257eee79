//! The prefill/decode layer: runs after the replica is chosen, and decides whether the prompt's
//! prefill should run elsewhere (a `prefill` pool) before the chosen replica decodes.
//!
//! This is the seam for P/D disaggregation. The router ships [`NoSplit`]: the chosen replica
//! does both. A splitting policy would return [`PdPlan::Split`] (for example when the uncached
//! part of the prompt is long), and this layer would then send the prefill request first and
//! add `x-warmpath-prefill-replica` to the response.

use super::{AttemptError, Chosen};
use crate::errors::RespBody;
use crate::request::RequestFeatures;
use http::Response;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::{Layer, Service};
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

#[derive(Clone)]
pub struct PdLayer {
    policy: Arc<dyn PdPolicy>,
}

impl PdLayer {
    pub fn new(policy: Arc<dyn PdPolicy>) -> Self {
        Self { policy }
    }
}

impl<S> Layer<S> for PdLayer {
    type Service = Pd<S>;
    fn layer(&self, inner: S) -> Pd<S> {
        Pd {
            policy: self.policy.clone(),
            inner,
        }
    }
}

#[derive(Clone)]
pub struct Pd<S> {
    policy: Arc<dyn PdPolicy>,
    inner: S,
}

impl<S> Service<Chosen> for Pd<S>
where
    S: Service<Chosen, Response = Response<RespBody>, Error = AttemptError>,
{
    type Response = Response<RespBody>;
    type Error = AttemptError;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), AttemptError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, chosen: Chosen) -> S::Future {
        let routed = &chosen.routed;
        match self.policy.plan(
            chosen.request.features(),
            &routed.decision,
            routed.uncached_tokens,
        ) {
            PdPlan::Local => {}
            PdPlan::Split { prefill_replica } => {
                // No splitting policy ships yet; a custom one must not be silently ignored.
                tracing::warn!(%prefill_replica, "P/D split requested but not implemented; serving locally");
            }
        }
        self.inner.call(chosen)
    }
}
