//! Passive health: what forwarding tells about a replica. A refused connection ejects it for a
//! backoff (see `crate::state::health`) and forgets its index entries (a replica that refuses
//! connections has likely restarted, with an empty cache), and the attempt may be retried
//! elsewhere; an answer clears a past ejection. Every upstream failure is counted by kind.

use super::forward::UpstreamError;
use super::{AttemptError, Chosen};
use crate::config::HealthConfig;
use crate::errors::{ApiError, RespBody};
use crate::metrics::Metrics;
use crate::state::index::SharedIndex;
use crate::state::replica::ReplicaState;
use http::Response;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;
use tower::{Layer, Service};
use warmpath_routing::index::PrefixIndex;

#[derive(Clone)]
pub struct PassiveHealthLayer {
    index: SharedIndex,
    metrics: Arc<Metrics>,
}

impl PassiveHealthLayer {
    pub fn new(index: SharedIndex, metrics: Arc<Metrics>) -> Self {
        Self { index, metrics }
    }
}

impl<S> Layer<S> for PassiveHealthLayer {
    type Service = PassiveHealth<S>;
    fn layer(&self, inner: S) -> PassiveHealth<S> {
        PassiveHealth {
            index: self.index.clone(),
            metrics: self.metrics.clone(),
            inner,
        }
    }
}

#[derive(Clone)]
pub struct PassiveHealth<S> {
    index: SharedIndex,
    metrics: Arc<Metrics>,
    inner: S,
}

impl<S> Service<Chosen> for PassiveHealth<S>
where
    S: Service<Chosen, Response = Response<RespBody>, Error = UpstreamError>,
    S::Future: Unpin,
{
    type Response = Response<RespBody>;
    type Error = AttemptError;
    type Future = Observed<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), AttemptError>> {
        self.inner
            .poll_ready(cx)
            .map_err(|e| AttemptError::Failed(ApiError::upstream_failed("(none)", e)))
    }

    fn call(&mut self, chosen: Chosen) -> Self::Future {
        let replica = chosen.routed.candidate.replica.clone();
        let health = chosen.request.ctx().table.config.health;
        Observed {
            inner: self.inner.call(chosen),
            replica,
            health,
            index: self.index.clone(),
            metrics: self.metrics.clone(),
        }
    }
}

/// Forwarding's outcome on its way back, read for what it says about the replica.
pub struct Observed<F> {
    inner: F,
    replica: Arc<ReplicaState>,
    health: HealthConfig,
    index: SharedIndex,
    metrics: Arc<Metrics>,
}

impl<F> Observed<F> {
    fn failed(&self, error: UpstreamError) -> AttemptError {
        let replica = &self.replica;
        self.metrics.upstream_error(&replica.name, error.kind());
        match error {
            UpstreamError::Connect(err) => {
                let backoff = replica
                    .health
                    .on_connect_error(&self.health, Instant::now());
                self.index.lock().remove_replica(replica.id);
                tracing::warn!(replica = %replica.name, ?backoff, error = %err, "replica unreachable; ejected");
                AttemptError::Refused {
                    replica: replica.id,
                    error: ApiError::upstream_connect(&replica.name, err),
                }
            }
            UpstreamError::Timeout(_) => {
                AttemptError::Failed(ApiError::upstream_timeout(&replica.name))
            }
            UpstreamError::Other(err) => {
                AttemptError::Failed(ApiError::upstream_failed(&replica.name, err))
            }
        }
    }
}

impl<F> Future for Observed<F>
where
    F: Future<Output = Result<Response<RespBody>, UpstreamError>> + Unpin,
{
    type Output = Result<Response<RespBody>, AttemptError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match Pin::new(&mut self.inner).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(resp)) => {
                self.replica.health.on_success();
                Poll::Ready(Ok(resp))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(self.failed(e))),
        }
    }
}
