//! The admission layer: runs after a request is parsed and before a replica is chosen.
//!
//! First identity: the request's tenant ([`crate::tenants`]: API key, trusted tenant header or
//! the default; 401 for a missing or unknown key when keys are required), and the client's key
//! removed before it can reach an engine. Then [`Admission`]: flow control
//! ([`crate::flow::FlowControl`]) or [`AdmitAll`], which may answer at once, make the request
//! wait, or reject it. Its [`Permit`] lives as long as the request (until the response body
//! ends), so a flow controller can count what is in flight, and hears what the request used.

use super::{Admitted, Parsed, StageFuture};
use crate::choice::PrefillRule;
use crate::errors::{ApiError, RespBody};
use crate::state::table::Table;
use crate::tenants::{Identity, PeerAddr, Tenant};
use futures_util::future::Either;
use http::Response;
use std::future::Future;
use std::future::{ready, Ready};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::{Layer, Service};

/// What admission sees of a request.
#[derive(Debug, Clone, Copy)]
pub struct AdmissionRequest<'a> {
    pub tenant: &'a Arc<Tenant>,
    pub model: &'a str,
    /// The objective the request names (`x-llm-d-inference-objective`), known or not.
    pub objective: Option<&'a str>,
    pub prompt_tokens: u32,
    pub max_tokens: Option<u32>,
    /// The request body's size (what a queued request holds in memory).
    pub body_bytes: usize,
    /// The routing table the request will use.
    pub table: &'a Arc<Table>,
}

/// What a permit's holder learns about its request as it is served, for flow control's
/// accounting (fair-share correction, token limits, tokens served).
pub trait Held: Send + Sync {
    /// The prompt tokens the chosen replica did not have cached (the router's estimate).
    fn set_uncached_prompt(&self, _tokens: u64) {}
    /// Output tokens seen so far in the response.
    fn set_output(&self, _tokens: u64) {}
    /// The response's first token (its first body chunk) arrived: the request's prefill is
    /// done on its replica.
    fn first_token(&self) {}
    /// Which replicas the request's prefill may go to (flow control's isolation rules).
    fn prefill_rule(&self) -> PrefillRule {
        PrefillRule::Any
    }
}

/// Held for the life of an admitted request; released when its response ends (the last clone
/// goes with the response body, so the request itself, its body included, can go as soon as the
/// replica has answered).
#[derive(Default, Clone)]
pub struct Permit(pub Option<Arc<dyn Held>>);

impl Permit {
    /// Whether anything counts this request's usage (then the response is scanned for it).
    pub fn wants_usage(&self) -> bool {
        self.0.is_some()
    }
    pub fn set_uncached_prompt(&self, tokens: u64) {
        if let Some(h) = &self.0 {
            h.set_uncached_prompt(tokens);
        }
    }
    pub fn set_output(&self, tokens: u64) {
        if let Some(h) = &self.0 {
            h.set_output(tokens);
        }
    }
    pub fn first_token(&self) {
        if let Some(h) = &self.0 {
            h.first_token();
        }
    }
    pub fn prefill_rule(&self) -> PrefillRule {
        self.0
            .as_ref()
            .map_or(PrefillRule::Any, |h| h.prefill_rule())
    }
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Permit(held)"
        } else {
            "Permit(none)"
        })
    }
}

pub type Waiting = Pin<Box<dyn Future<Output = Result<Permit, ApiError>> + Send>>;

/// Admission's answer.
pub enum Admit {
    /// Go ahead (the common case: no allocation).
    Now(Permit),
    /// Wait in a queue; resolves to a permit or a rejection.
    Later(Waiting),
    /// Refuse (typically `ApiError::dropped`, a 429 with `retry-after` and a reason).
    Reject(ApiError),
}

pub trait Admission: Send + Sync + 'static {
    fn admit(&self, request: &AdmissionRequest<'_>) -> Admit;
}

/// No flow control: every request goes straight to scheduling.
#[derive(Debug, Default, Clone, Copy)]
pub struct AdmitAll;

impl Admission for AdmitAll {
    fn admit(&self, _request: &AdmissionRequest<'_>) -> Admit {
        Admit::Now(Permit::default())
    }
}

#[derive(Clone)]
pub struct AdmissionLayer {
    admission: Arc<dyn Admission>,
}

impl AdmissionLayer {
    pub fn new(admission: Arc<dyn Admission>) -> Self {
        Self { admission }
    }
}

impl<S> Layer<S> for AdmissionLayer {
    type Service = AdmissionService<S>;
    fn layer(&self, inner: S) -> AdmissionService<S> {
        AdmissionService {
            admission: self.admission.clone(),
            inner,
        }
    }
}

#[derive(Clone)]
pub struct AdmissionService<S> {
    admission: Arc<dyn Admission>,
    inner: S,
}

impl<S> Service<Parsed> for AdmissionService<S>
where
    S: Service<Admitted, Response = Response<RespBody>, Error = ApiError> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<RespBody>;
    type Error = ApiError;
    type Future = Either<
        Either<S::Future, Ready<Result<Response<RespBody>, ApiError>>>,
        StageFuture<Response<RespBody>, ApiError>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ApiError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut parsed: Parsed) -> Self::Future {
        let read = &mut parsed.read;
        let directory = &read.ctx.table.tenants;
        let peer = PeerAddr::ip_of(&read.head.extensions);
        // Found from the head before the body was read (`read_body`); a request that reached
        // this stage some other way is identified here.
        let identity = match read.head.extensions.remove::<Identity>() {
            Some(identity) => identity,
            None => match directory.identify(&read.head.headers, peer) {
                Ok(identity) => identity,
                Err(e) => return Either::Left(Either::Right(ready(Err(e)))),
            },
        };
        if directory.strips_authorization() {
            read.head.headers.remove(http::header::AUTHORIZATION);
        }
        let tenant = identity.tenant;
        let f = &parsed.features;
        let objective = (parsed.read.ctx.table.tenants).objective(&parsed.read.head.headers, peer);
        let admit = self.admission.admit(&AdmissionRequest {
            tenant: &tenant,
            model: &f.model,
            objective,
            prompt_tokens: warmpath_routing::prompt::estimate_tokens(f.prompt.total_bytes),
            max_tokens: f.max_tokens,
            body_bytes: parsed.read.body.len(),
            table: &parsed.read.ctx.table,
        });
        match admit {
            // The common case goes straight on, with no extra await.
            Admit::Now(permit) => Either::Left(Either::Left(self.inner.call(Admitted {
                parsed,
                permit,
                tenant,
            }))),
            Admit::Reject(e) => Either::Left(Either::Right(ready(Err(e)))),
            Admit::Later(wait) => {
                let clone = self.inner.clone();
                let mut inner = std::mem::replace(&mut self.inner, clone);
                Either::Right(Box::pin(async move {
                    let permit = wait.await?;
                    inner
                        .call(Admitted {
                            parsed,
                            permit,
                            tenant,
                        })
                        .await
                }))
            }
        }
    }
}
