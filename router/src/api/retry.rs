//! Retry within a budget, only where it is safe: a replica that refused the connection was sent
//! nothing, and one that answered 5xx gave the client nothing (a 502/503: an engine that cannot
//! take the request, or a proxy in front of one that is gone; another 5xx: an engine that
//! failed, unless its error blames the request, which is the client's answer), so the request
//! goes to another replica (those excluded), as does a request taken back from a replica that
//! showed no progress while it waited for its first byte (`forward`'s rescue: its connection
//! is closed, so the engine drops it), and one whose connection was reset or closed before its
//! response head (an engine that died or dropped its connections: it no longer holds the
//! request). A request whose response head did not come within `timeouts.header_ms` is final
//! (the engine may still be working on it). No retry ever follows a byte sent to the client:
//! the response head is only returned once a replica answered, and a 5xx answer is held back
//! until no other replica can be tried (then it is the client's, as it came).
//!
//! tower's [`tower::retry::Retry`] runs the loop; [`RetrySafe`] is the policy. Retries draw on a
//! budget shared by all requests (tower's [`TpsBudget`]: every request deposits, a retry
//! withdraws), so when the whole fleet fails, retries add at most a fifth to the load plus a
//! trickle, instead of doubling it.

use super::{Admitted, Attempt, AttemptError};
use crate::errors::{ApiError, RespBody};
use crate::metrics::{Metrics, ReasonLabels};
use futures_util::future::MapErr;
use futures_util::TryFutureExt;
use http::Response;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tower::retry::budget::{Budget, TpsBudget};
use tower::retry::{Policy, Retry};
use tower::{Layer, Service};
use warmpath_routing::ReplicaId;

/// Replicas tried per request when connections are refused or answers are 502/503. Three, not
/// two: during a rollout one replica may be restarting while another refuses (a soak with both
/// faults lost a request to that pair with two); the budget, not this, is what bounds retries
/// in an outage.
pub const MAX_ATTEMPTS: usize = 3;

/// The retry budget: each request's deposit counts for 10 s; retries may be a fifth of the
/// requests, and at least 10 a second (so that a quiet router still retries a lone refusal).
fn budget() -> TpsBudget {
    TpsBudget::new(Duration::from_secs(10), 10, 0.2)
}

#[derive(Clone)]
pub struct RetryLayer {
    attempts: usize,
    budget: Arc<TpsBudget>,
    metrics: Arc<Metrics>,
}

impl RetryLayer {
    pub fn new(attempts: usize, metrics: Arc<Metrics>) -> Self {
        Self::with_budget(attempts, budget(), metrics)
    }

    pub fn with_budget(attempts: usize, budget: TpsBudget, metrics: Arc<Metrics>) -> Self {
        Self {
            attempts: attempts.max(1),
            budget: Arc::new(budget),
            metrics,
        }
    }
}

impl<S> Layer<S> for RetryLayer {
    type Service = RetryService<S>;
    fn layer(&self, inner: S) -> RetryService<S> {
        RetryService {
            inner: Retry::new(
                RetrySafe::new(self.attempts, self.budget.clone(), self.metrics.clone()),
                inner,
            ),
            budget: self.budget.clone(),
        }
    }
}

/// Retry after a refused connection, a 5xx answer that does not blame the request, a request
/// taken back from a stalled replica or one whose connection broke before its head, at most
/// `attempts` tries in all and while the budget allows. When no replica is left, the refusal or
/// the replica's own answer is the client's (it says more than "no ready replica").
#[derive(Clone)]
pub struct RetrySafe {
    remaining: usize,
    budget: Arc<TpsBudget>,
    metrics: Arc<Metrics>,
    /// What the last retried try ended with, for when no replica is left.
    last: Option<Last>,
}

/// A retried try's outcome, kept for the client should no replica be left.
#[derive(Clone)]
enum Last {
    Refused(ApiError),
    /// An engine's own 5xx answer, passed on as it came (shared: policies are `Clone`).
    Answer(Arc<parking_lot::Mutex<Option<Response<RespBody>>>>),
}

impl RetrySafe {
    pub fn new(attempts: usize, budget: Arc<TpsBudget>, metrics: Arc<Metrics>) -> Self {
        Self {
            remaining: attempts,
            budget,
            metrics,
            last: None,
        }
    }

    /// Whether another try may go, counting it.
    fn another(&mut self, reason: &'static str) -> bool {
        self.remaining = self.remaining.saturating_sub(1);
        if self.remaining == 0 {
            return false;
        }
        if !self.budget.withdraw() {
            self.count("budget_exhausted");
            return false;
        }
        self.count(reason);
        true
    }

    /// Another try on another replica after one that left nothing to pass on (`replica`
    /// excluded from now on), its error kept for when none is left.
    fn elsewhere(
        &mut self,
        attempt: &mut Attempt,
        replica: ReplicaId,
        error: &ApiError,
        reason: &'static str,
    ) -> Option<std::future::Ready<()>> {
        attempt.exclude.push(replica);
        self.last = Some(Last::Refused(error.clone()));
        self.another(reason).then(|| std::future::ready(()))
    }

    fn count(&self, reason: &'static str) {
        self.metrics
            .requests
            .retries
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }
}

impl Policy<Attempt, Response<RespBody>, AttemptError> for RetrySafe {
    type Future = std::future::Ready<()>;

    fn retry(
        &mut self,
        attempt: &mut Attempt,
        result: &mut Result<Response<RespBody>, AttemptError>,
    ) -> Option<Self::Future> {
        match result {
            Err(AttemptError::Refused { replica, error }) => {
                self.elsewhere(attempt, *replica, error, "refused")
            }
            Err(AttemptError::Stalled { replica, error }) => {
                self.elsewhere(attempt, *replica, error, "stalled")
            }
            Err(AttemptError::Reset { replica, error }) => {
                self.elsewhere(attempt, *replica, error, "reset")
            }
            Err(AttemptError::Unavailable {
                replica,
                response,
                status,
                ..
            }) => {
                // The replica's own answer, as it came.
                let answer = std::mem::replace(
                    response.get_mut().unwrap_or_else(|p| p.into_inner()),
                    Response::new(crate::errors::full_body("")),
                );
                let reason = match status.as_u16() {
                    502 | 503 => "unavailable",
                    _ => "server_error",
                };
                if !self.another(reason) {
                    *result = Ok(answer);
                    return None;
                }
                attempt.exclude.push(*replica);
                self.last = Some(Last::Answer(Arc::new(parking_lot::Mutex::new(Some(
                    answer,
                )))));
                Some(std::future::ready(()))
            }
            Err(AttemptError::NoReplica(_)) => {
                match self.last.take() {
                    Some(Last::Refused(e)) => *result = Err(AttemptError::Failed(e)),
                    Some(Last::Answer(a)) => {
                        if let Some(answer) = a.lock().take() {
                            *result = Ok(answer);
                        }
                    }
                    None => {}
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
    inner: Retry<RetrySafe, S>,
    budget: Arc<TpsBudget>,
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
        MapErr<<Retry<RetrySafe, S> as Service<Attempt>>::Future, fn(AttemptError) -> ApiError>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ApiError>> {
        self.inner.poll_ready(cx).map_err(AttemptError::into_api)
    }

    fn call(&mut self, admitted: Admitted) -> Self::Future {
        self.budget.deposit();
        let attempt = Attempt {
            request: Arc::new(admitted),
            exclude: Vec::new(),
        };
        self.inner
            .call(attempt)
            .map_err(AttemptError::into_api as fn(AttemptError) -> ApiError)
    }
}
