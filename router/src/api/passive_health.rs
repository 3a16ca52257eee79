//! Passive health: what forwarding tells about a replica. A refused or unreachable connection
//! ejects it for a backoff (see `crate::state::health`) and forgets its index entries (a replica
//! that refuses connections has likely restarted, with an empty cache), and the attempt may be
//! retried. So may a 5xx answer, which nothing of has reached the client yet: a 502/503 judged
//! on its head, another 5xx once its (short) body is read and does not blame the request
//! ([`ERROR_BODY_WAIT`], [`ERROR_BODY_MAX`]; an error that does is the client's answer).
//! Failed answers (5xx, unless the error's body blames the request; no head in time, unless it
//! answered others meanwhile; resets, connections that time out, streams that break or go
//! silent after their head) eject it after a run of them, or when they are too large a share of
//! its last answers, unless half its pool is out already; a good answer (its
//! body ended cleanly) ends a run and an ejection's doubling. A connection this process could
//! not open (out of file descriptors, ports, buffers) says nothing about the replica: it is
//! retried elsewhere and changes no health. Every upstream failure is counted by kind.

use super::forward::UpstreamError;
use super::{Admitted, AttemptError, Chosen};
use crate::body::ReadAhead;
use crate::errors::{ApiError, RespBody};
use crate::metrics::Metrics;
use crate::state::index::SharedIndex;
use crate::state::replica::ReplicaState;
use bytes::{Bytes, BytesMut};
use http::Response;
use http_body_util::{BodyExt, StreamBody};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
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

/// How long a 5xx's body (other than a 502/503's) may take to arrive before the answer is
/// passed on as it comes, unjudged and not retried: engines send their JSON errors at once.
pub const ERROR_BODY_WAIT: Duration = Duration::from_secs(2);
/// The most of such a body held to judge it; a longer one is passed on, not retried.
pub const ERROR_BODY_MAX: usize = 64 * 1024;

impl<S> Service<Chosen> for PassiveHealth<S>
where
    S: Service<Chosen, Response = Response<RespBody>, Error = UpstreamError>,
    S::Future: Send + 'static,
{
    type Response = Response<RespBody>;
    type Error = AttemptError;
    type Future = super::StageFuture<Response<RespBody>, AttemptError>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), AttemptError>> {
        self.inner
            .poll_ready(cx)
            .map_err(|e| AttemptError::Failed(ApiError::upstream_failed("(none)", e)))
    }

    fn call(&mut self, chosen: Chosen) -> Self::Future {
        let replica = chosen.routed.candidate.replica.clone();
        let request = chosen.request.clone();
        let inner = self.inner.call(chosen);
        let observed = Observed {
            sent: Instant::now(),
            replica,
            request,
            index: self.index.clone(),
            metrics: self.metrics.clone(),
        };
        Box::pin(async move {
            match inner.await {
                Ok(resp)
                    if matches!(
                        resp.status(),
                        http::StatusCode::BAD_GATEWAY | http::StatusCode::SERVICE_UNAVAILABLE
                    ) =>
                {
                    observed
                        .metrics
                        .requests
                        .upstream_error(&observed.replica.name, "unavailable");
                    observed.answer_failed();
                    Err(observed.unavailable(resp))
                }
                Ok(resp) if resp.status().is_server_error() => {
                    observed.judge_server_error(resp).await
                }
                // Judged when its body ends (`forward::respond`): a stream that breaks midway
                // is a failed answer, not a good one.
                Ok(resp) => Ok(resp),
                Err(e) => Err(observed.failed(e)),
            }
        })
    }
}

/// Forwarding's outcome on its way back, read for what it says about the replica.
struct Observed {
    /// When the request went to the replica: a timeout counts against the replica only if it
    /// answered nothing since.
    sent: Instant,
    replica: Arc<ReplicaState>,
    /// Its table's health settings and the model's pool, read only when an answer fails.
    request: Arc<Admitted>,
    index: SharedIndex,
    metrics: Arc<Metrics>,
}

impl Observed {
    fn failed(&self, error: UpstreamError) -> AttemptError {
        let replica = &self.replica;
        let kind = match &error {
            UpstreamError::Connect(e) => connect_failure(e),
            other => other.kind(),
        };
        self.metrics.requests.upstream_error(&replica.name, kind);
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
            (UpstreamError::Stalled(after), _) => {
                self.request
                    .ctx()
                    .table
                    .answer_stalled(&self.replica, &self.request.features().model);
                tracing::warn!(replica = %replica.name, ?after, "a request waited for its first byte with no progress from its replica; tried elsewhere");
                AttemptError::Stalled {
                    replica: replica.id,
                    error: ApiError::upstream_stalled(&replica.name, after),
                }
            }
            (UpstreamError::Other(err), _) => {
                self.answer_failed();
                AttemptError::Reset {
                    replica: replica.id,
                    error: ApiError::upstream_failed(&replica.name, err),
                }
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
    /// The replica's 5xx answer, tried again elsewhere: nothing of it has reached the client.
    fn unavailable(&self, resp: Response<RespBody>) -> AttemptError {
        AttemptError::Unavailable {
            replica: self.replica.id,
            name: self.replica.name.clone(),
            status: resp.status(),
            response: Box::new(std::sync::Mutex::new(resp)),
        }
    }

    /// A 5xx other than 502/503: its body is read (at most [`ERROR_BODY_MAX`] bytes, for at
    /// most [`ERROR_BODY_WAIT`]). Reading it to its end judges the replica (`forward::respond`
    /// counts the failure unless the body blames the request). An error that blames the request
    /// is the client's answer; any other is tried again elsewhere. A body longer or slower than
    /// that is passed on as it comes.
    async fn judge_server_error(
        self,
        resp: Response<RespBody>,
    ) -> Result<Response<RespBody>, AttemptError> {
        let (parts, mut body) = resp.into_parts();
        let mut held = BytesMut::new();
        let mut trailers = None;
        let deadline = tokio::time::Instant::now() + ERROR_BODY_WAIT;
        let ended = loop {
            match tokio::time::timeout_at(deadline, body.frame()).await {
                Err(_) => break false,
                // A body that breaks has said all it will.
                Ok(None) | Ok(Some(Err(_))) => break true,
                Ok(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        held.extend_from_slice(&data);
                        if held.len() > ERROR_BODY_MAX {
                            break false;
                        }
                    }
                    Err(frame) => trailers = frame.into_trailers().ok(),
                },
            }
        };
        let held = held.freeze();
        if !ended {
            let body = ReadAhead::new(Some(http_body::Frame::data(held)), body);
            return Ok(Response::from_parts(parts, body.boxed_unsync()));
        }
        let mut peeked = crate::body::error_peek::Peeked::default();
        peeked.feed(&held);
        let answer = Response::from_parts(parts, held_body(held, trailers));
        if peeked.blames_the_request() {
            return Ok(answer);
        }
        self.metrics
            .requests
            .upstream_error(&self.replica.name, "server_error");
        Err(self.unavailable(answer))
    }
}

/// A body read whole, given again.
fn held_body(data: Bytes, trailers: Option<http::HeaderMap>) -> RespBody {
    let frames = std::iter::once(http_body::Frame::data(data))
        .chain(trailers.map(http_body::Frame::trailers))
        .map(Ok);
    StreamBody::new(futures_util::stream::iter(frames)).boxed_unsync()
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
