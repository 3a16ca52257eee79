//! The choose stage: an attempt bound to a replica by the router's [`Chooser`] (the proxy's
//! and the endpoint picker's one path: `crate::choice`), its own candidates excluded.

use super::{Attempt, AttemptError, Chosen};
use crate::choice::{Ask, Chooser};
use crate::errors::RespBody;
use futures_util::future::Either;
use http::Response;
use std::future::{ready, Ready};
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::{Layer, Service};

#[derive(Clone)]
pub struct ChooseLayer {
    chooser: Arc<Chooser>,
}

impl ChooseLayer {
    pub fn new(chooser: Arc<Chooser>) -> Self {
        Self { chooser }
    }

    /// With no KV events (an empty precise index) and no decision log: for tests of the stack.
    #[cfg(test)]
    pub(crate) fn alone(
        index: crate::state::index::SharedIndex,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Self {
        Self::new(Arc::new(Chooser::new(
            crate::choice::Indexes::alone(index),
            metrics,
            Arc::default(),
        )))
    }
}

impl<S> Layer<S> for ChooseLayer {
    type Service = Choose<S>;
    fn layer(&self, inner: S) -> Choose<S> {
        Choose {
            chooser: self.chooser.clone(),
            inner,
        }
    }
}

#[derive(Clone)]
pub struct Choose<S> {
    chooser: Arc<Chooser>,
    inner: S,
}

impl<S> Service<Attempt> for Choose<S>
where
    S: Service<Chosen, Response = Response<RespBody>, Error = AttemptError>,
{
    type Response = Response<RespBody>;
    type Error = AttemptError;
    type Future = Either<Ready<Result<Response<RespBody>, AttemptError>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), AttemptError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, attempt: Attempt) -> Self::Future {
        let request = &attempt.request;
        let routed = self.chooser.route(&Ask {
            table: &request.ctx().table,
            features: request.features(),
            exclude: &attempt.exclude,
            prefill_rule: request.permit.prefill_rule(),
            headers: &request.parsed.read.head.headers,
            request_id: Some(&request.ctx().request_id),
            tenant: &request.tenant.name,
        });
        match routed {
            Ok(routed) => Either::Right(self.inner.call(Chosen {
                request: attempt.request,
                routed,
                body: None,
                prefill_replica: None,
                prefiller: None,
            })),
            Err(e) => Either::Left(ready(Err(AttemptError::NoReplica(e)))),
        }
    }
}
