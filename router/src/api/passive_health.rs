//! Passive health: what forwarding tells about a replica. A refused or unreachable connection
//! ejects it for a backoff (see `crate::state::health`) and forgets its index entries (a replica
//! that refuses connections has likely restarted, with an empty cache), and the attempt may be
//! retried. Failed answers (5xx, unless the error's body blames the request; no head in time,
//! unless it answered others meanwhile; resets, connections that time out, streams that break
//! or go silent after their head) eject it after a run of them, or when they are too
//! large a share of its last answers, unless half its pool is out already; a good answer (its
//! body ended cleanly) ends a run and an ejection's doubling. A connection this process could
//! not open (out of file descriptors, ports, buffers) says nothing about the replica: it is
//! retried elsewhere and changes no health. Every upstream failure is counted by kind.

use super::forward::UpstreamError;
use super::{Admitted, AttemptError, Chosen};
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
        let request = chosen.request.clone();
        Observed {
            inner: self.inner.call(chosen),
            sent: Instant::now(),
            replica,
            request,
            index: self.index.clone(),
            metrics: self.metrics.clone(),
        }
    }
}

/// Forwarding's outcome on its way back, read for what it says about the replica.
pub struct Observed<F> {
    inner: F,
    /// When the request went to the replica: a timeout counts against the replica only if it
    /// answered nothing since.
    sent: Instant,
    replica: Arc<ReplicaState>,
    /// Its table's health settings and the model's pool, read only when an answer fails.
    request: Arc<Admitted>,
    index: SharedIndex,
    metrics: Arc<Metrics>,
}

impl<F> Observed<F> {
    fn failed(&self, error: UpstreamError) -> AttemptError {
        let replica = &self.replica;
        let kind = match &error {
            UpstreamError::Connect(e) => connect_failure(e),
            other => other.kind(),
        };
        self.metrics.upstream_error(&replica.name, kind);
        match (error, kind) {
            (UpstreamError::Connect(err), "connect") => {
                let backoff = replica
                    .health
                    .on_connect_error(&self.config().health, Instant::now());
                self.index.lock().remove_replica(replica.id);
                tracing::warn!(replica = %replica.name, ?backoff, error = %err, "replica unreachable; ejected");
                AttemptError::Refused {
                    replica: replica.id,
                    error: ApiError::upstream_connect(&replica.name, err),
                }
            }
            (UpstreamError::Connect(err), kind) => {
                if kind == "connect_timeout" {
                    self.answer_failed();
                } else {
                    tracing::warn!(replica = %replica.name, error = %err, "could not open a connection here (not the replica's fault)");
                }
                AttemptError::Refused {
                    replica: replica.id,
                    error: ApiError::upstream_connect(&replica.name, err),
                }
            }
            (UpstreamError::Timeout(_), _) => {
                self.request.ctx().table.answer_timed_out(
                    &self.replica,
                    &self.request.features().model,
                    self.sent,
                );
                AttemptError::Failed(ApiError::upstream_timeout(&replica.name))
            }
            (UpstreamError::Other(err), _) => {
                self.answer_failed();
                AttemptError::Failed(ApiError::upstream_failed(&replica.name, err))
            }
        }
    }

    fn config(&self) -> &crate::config::Config {
        &self.request.ctx().table.config
    }

    /// One more failed answer from the replica; a run of them ejects it.
    fn answer_failed(&self) {
        self.request
            .ctx()
            .table
            .answer_failed(&self.replica, &self.request.features().model);
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
            Poll::Ready(Ok(resp))
                if matches!(
                    resp.status(),
                    http::StatusCode::BAD_GATEWAY | http::StatusCode::SERVICE_UNAVAILABLE
                ) =>
            {
                self.metrics
                    .upstream_error(&self.replica.name, "unavailable");
                self.answer_failed();
                Poll::Ready(Err(AttemptError::Unavailable {
                    replica: self.replica.id,
                    name: self.replica.name.clone(),
                    status: resp.status(),
                    response: Box::new(std::sync::Mutex::new(resp)),
                }))
            }
            // Judged when its body ends (`forward::respond`): a stream that breaks midway
            // is a failed answer, not a good one, and another 5xx counts against the replica
            // unless its body blames the request (passed on as it came: not tried again).
            Poll::Ready(Ok(resp)) => Poll::Ready(Ok(resp)),
            Poll::Ready(Err(e)) => Poll::Ready(Err(self.failed(e))),
        }
    }
}

/// What a failed connect says: `connect` (the replica's host refused or cannot be reached: it is
/// down), `connect_timeout` (no answer in time: counts against the replica like a failed
/// answer), `local` (this process could not open a socket: out of descriptors, ports, memory).
fn connect_failure(e: &std::io::Error) -> &'static str {
    use std::io::ErrorKind::*;
    match e.kind() {
        ConnectionRefused | ConnectionReset | ConnectionAborted | HostUnreachable
        | NetworkUnreachable | NotConnected => "connect",
        TimedOut => "connect_timeout",
        // AddrNotAvailable (no local port left), EMFILE, ENFILE, ENOBUFS and the like.
        _ => "local",
    }
}

#[cfg(test)]
mod tests {
    use super::connect_failure;
    use std::io::{Error, ErrorKind};

    #[test]
    fn only_the_replicas_connect_failures_count_against_it() {
        assert_eq!(
            connect_failure(&ErrorKind::ConnectionRefused.into()),
            "connect"
        );
        assert_eq!(
            connect_failure(&ErrorKind::HostUnreachable.into()),
            "connect"
        );
        assert_eq!(
            connect_failure(&ErrorKind::TimedOut.into()),
            "connect_timeout"
        );
        // EMFILE, ENFILE, ENOBUFS: this process ran out, not the replica.
        for errno in [24, 23, 105] {
            assert_eq!(
                connect_failure(&Error::from_raw_os_error(errno)),
                "local",
                "{errno}"
            );
        }
        assert_eq!(
            connect_failure(&ErrorKind::AddrNotAvailable.into()),
            "local"
        );
    }
}
