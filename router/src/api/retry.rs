//! Retry within a budget, only where it is safe: a replica that refused the connection was sent
//! nothing, so the request goes to another replica (the refused one excluded). Anything that
//! may have reached a replica is final: a retry could run a generation twice. The client's
//! first byte is never at stake, because the response head is only returned once a replica
//! answered.
//!
//! tower's [`tower::retry::Retry`] runs the loop; [`RetryRefused`] is the policy.

use super::{Admitted, Attempt, AttemptError};
use crate::errors::{ApiError, RespBody};
use futures_util::future::MapErr;
use futures_util::TryFutureExt;
use http::Response;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::retry::{Policy, Retry};
use tower::{Layer, Service};

/// Replicas tried per request when connections are refused.
pub const MAX_ATTEMPTS: usize = 2;

#[derive(Debug, Clone, Copy)]
pub struct RetryLayer {
    attempts: usize,
}

impl Default for RetryLayer {
    fn default() -> Self {
        Self {
            attempts: MAX_ATTEMPTS,
        }
    }
}

impl RetryLayer {
    pub fn new(attempts: usize) -> Self {
        Self {
            attempts: attempts.max(1),
        }
    }
}

impl<S> Layer<S> for RetryLayer {
    type Service = RetryService<S>;
    fn layer(&self, inner: S) -> RetryService<S> {
        RetryService {
            inner: Retry::new(RetryRefused::new(self.attempts), inner),
        }
    }
}

/// Retry after a refused connection, at most `attempts` tries in all. When no replica is left
/// after a refusal, the refusal is the answer (it says more than "no ready replica").
#[derive(Debug, Clone)]
pub struct RetryRefused {
    remaining: usize,
    last_refusal: Option<ApiError>,
}

impl RetryRefused {
    pub fn new(attempts: usize) -> Self {
        Self {
            remaining: attempts,
            last_refusal: None,
        }
    }
}

impl<Res> Policy<Attempt, Res, AttemptError> for RetryRefused {
    type Future = std::future::Ready<()>;

    fn retry(
        &mut self,
        attempt: &mut Attempt,
        result: &mut Result<Res, AttemptError>,
    ) -> Option<Self::Future> {
        match result {
            Err(AttemptError::Refused { replica, error }) => {
                attempt.exclude.push(*replica);
                self.last_refusal = Some(error.clone());
                self.remaining = self.remaining.saturating_sub(1);
                (self.remaining > 0).then(|| std::future::ready(()))
            }
            Err(AttemptError::NoReplica(_)) => {
                if let Some(refusal) = self.last_refusal.take() {
                    *result = Err(AttemptError::Failed(refusal));
                }
                None
            }
            _ => None,
        }
    }

    fn clone_request(&mut self, attempt: &Attempt) -> Option<Attempt> {
        Some(attempt.clone())
    }
}

#[derive(Clone)]
pub struct RetryService<S> {
    inner: Retry<RetryRefused, S>,
}

impl<S> Service<Admitted> for RetryService<S>
where
    S: Service<Attempt, Response = Response<RespBody>, Error = AttemptError>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<RespBody>;
    type Error = ApiError;
    type Future =
        MapErr<<Retry<RetryRefused, S> as Service<Attempt>>::Future, fn(AttemptError) -> ApiError>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ApiError>> {
        self.inner.poll_ready(cx).map_err(AttemptError::into_api)
    }

    fn call(&mut self, admitted: Admitted) -> Self::Future {
        let attempt = Attempt {
            request: Arc::new(admitted),
            exclude: Vec::new(),
        };
        self.inner
            .call(attempt)
            .map_err(AttemptError::into_api as fn(AttemptError) -> ApiError)
    }
}
