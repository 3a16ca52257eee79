//! The admission layer: runs after a request is parsed and before a replica is chosen.
//!
//! This is the seam for per-tenant flow control (fair queueing, priorities, shedding with 429).
//! The router ships [`AdmitAll`]; a flow controller implements [`Admission`] and may answer at
//! once, make the request wait, or reject it. Its [`Permit`] lives as long as the request
//! (until the response body ends), so a flow controller can count what is in flight.

use super::{Admitted, Parsed, StageFuture};
use crate::errors::{ApiError, RespBody};
use futures_util::future::Either;
use http::Response;
use std::any::Any;
use std::future::Future;
use std::future::{ready, Ready};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::{Layer, Service};

/// What admission sees of a request.
#[derive(Debug, Clone, Copy)]
pub struct AdmissionRequest<'a> {
    pub tenant: Option<&'a str>,
    pub model: &'a str,
    pub prompt_tokens: u32,
    pub max_tokens: Option<u32>,
}

/// Held for the life of an admitted request; released when its response ends (the last clone
/// goes with the response body, so the request itself, its body included, can go as soon as the
/// replica has answered).
#[derive(Default, Clone)]
pub struct Permit(pub Option<Arc<dyn Any + Send + Sync>>);

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
    /// Refuse (typically `ApiError::over_limit`, a 429 with `retry-after`).
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

    fn call(&mut self, parsed: Parsed) -> Self::Future {
        let f = &parsed.features;
        let admit = self.admission.admit(&AdmissionRequest {
            tenant: f.tenant.as_deref(),
            model: &f.model,
            prompt_tokens: warmpath_routing::prompt::estimate_tokens(f.prompt.total_bytes),
            max_tokens: f.max_tokens,
        });
        match admit {
            // The common case goes straight on, with no extra await.
            Admit::Now(permit) => {
                Either::Left(Either::Left(self.inner.call(Admitted { parsed, permit })))
            }
            Admit::Reject(e) => Either::Left(Either::Right(ready(Err(e)))),
            Admit::Later(wait) => {
                let clone = self.inner.clone();
                let mut inner = std::mem::replace(&mut self.inner, clone);
                Either::Right(Box::pin(async move {
                    let permit = wait.await?;
                    inner.call(Admitted { parsed, permit }).await
                }))
            }
        }
    }
}
