//! Read a request's whole body, bounded in size (413) and time (408), into one contiguous
//! buffer: a body sent in many tiny chunks costs its bytes, not a list of chunks. First the
//! request's tenant is found from its head (identity before work: a wrong API key is refused
//! before the router reads, parses or tokenizes the body; the [`Identity`] rides on in the
//! head's extensions for admission). Bodies held at once are bounded too ([`BodyBudget`]): a
//! body is kept until its replica's response head arrives (it may be sent again meanwhile),
//! which can take minutes, so without a budget a burst of large prompts to a slow fleet could
//! take the router's memory.

use super::{Incoming, Read, Rejection, StageFuture};
use crate::body::read_body_reserving;
use crate::errors::{ApiError, RespBody};
use crate::metrics::Metrics;
use crate::tenants::{Identity, PeerAddr};
use bytes::Bytes;
use http::Response;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::{Layer, Service};

/// The bytes of request bodies the router holds at once, in KiB permits; a body that does not
/// fit is refused with 503 (`overloaded`, `retry-after: 1`) instead of queued.
#[derive(Clone)]
pub struct BodyBudget {
    kib: Arc<Semaphore>,
    metrics: Arc<Metrics>,
}

impl BodyBudget {
    pub fn new(bytes: usize, metrics: Arc<Metrics>) -> Self {
        let kib = bytes.div_ceil(1024).clamp(1, Semaphore::MAX_PERMITS);
        Self {
            kib: Arc::new(Semaphore::new(kib)),
            metrics,
        }
    }

    /// Room for `kib` KiB more, held until the permit is dropped.
    fn hold_kib(&self, kib: u32) -> Result<OwnedSemaphorePermit, ApiError> {
        self.kib.clone().try_acquire_many_owned(kib).map_err(|_| {
            self.metrics.connections.body_budget_refusals.inc();
            ApiError::body_budget()
        })
    }

    /// An empty reservation, grown as a body's bytes arrive ([`Reserved::grow`]).
    fn reserve(&self) -> Reserved {
        Reserved {
            budget: self.clone(),
            permit: None,
        }
    }
}

/// A body's share of the [`BodyBudget`], taken as its bytes arrive rather than once it is
/// whole: bodies still arriving hold memory too, and a thousand clients each sending most of a
/// large body slowly would otherwise hold it all outside the budget.
struct Reserved {
    budget: BodyBudget,
    /// The KiB held so far, as permits.
    permit: Option<OwnedSemaphorePermit>,
}

impl Reserved {
    /// Room for `bytes` in all (at least 1 KiB): more permits when the body has outgrown what
    /// it holds, a 503 (`overloaded`) when the budget has none to give.
    fn grow(&mut self, bytes: usize) -> Result<(), ApiError> {
        let need = u32::try_from(bytes.div_ceil(1024).max(1)).unwrap_or(u32::MAX);
        let held = self.permit.as_ref().map_or(0, |p| p.num_permits() as u32);
        if need <= held {
            return Ok(());
        }
        let more = self.budget.hold_kib(need - held)?;
        match &mut self.permit {
            Some(held) => held.merge(more),
            None => self.permit = Some(more),
        }
        Ok(())
    }
}

#[derive(Clone)]
pub struct ReadBodyLayer {
    budget: BodyBudget,
}

impl ReadBodyLayer {
    pub fn new(budget: BodyBudget) -> Self {
        Self { budget }
    }
}

impl<S> Layer<S> for ReadBodyLayer {
    type Service = ReadBody<S>;
    fn layer(&self, inner: S) -> ReadBody<S> {
        ReadBody {
            inner,
            budget: self.budget.clone(),
        }
    }
}

#[derive(Clone)]
pub struct ReadBody<S> {
    inner: S,
    budget: BodyBudget,
}

impl<S, B> Service<Incoming<B>> for ReadBody<S>
where
    S: Service<Read, Response = Response<RespBody>, Error = Rejection> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    type Response = Response<RespBody>;
    type Error = Rejection;
    type Future = StageFuture<Response<RespBody>, Rejection>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Rejection>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, incoming: Incoming<B>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let budget = self.budget.clone();
        Box::pin(async move {
            let Incoming { ctx, request } = incoming;
            let (mut head, body) = request.into_parts();
            let peer = PeerAddr::ip_of(&head.extensions);
            let identity: Identity = ctx
                .table
                .tenants
                .identify(&head.headers, peer)
                .map_err(Rejection::before_parse)?;
            head.extensions.insert(identity);
            let config = &ctx.table.config;
            // Held until the rest of the stack has the response head.
            let mut held = budget.reserve();
            let mut grow = |bytes| held.grow(bytes);
            let body = read_body_reserving(
                &head.headers,
                body,
                config.limits.max_body_bytes,
                config.timeouts.client(),
                &mut grow,
            )
            .await
            .map_err(Rejection::before_parse)?;
            // An empty body holds its 1 KiB too, as every body always has.
            held.grow(body.len()).map_err(Rejection::before_parse)?;
            inner.call(Read { ctx, head, body }).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderMap;
    use http_body::Frame;
    use http_body_util::StreamBody;
    use std::time::Duration;

    #[tokio::test]
    async fn bodies_still_arriving_hold_their_share_of_the_budget() {
        let budget = BodyBudget::new(10 * 1024, Arc::new(Metrics::new()));
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(4);
        let mut rx = rx;
        let body = StreamBody::new(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)));
        let mut held = budget.reserve();
        let reading = tokio::spawn(async move {
            let r = read_body_reserving(
                &HeaderMap::new(),
                body,
                1 << 20,
                Duration::from_secs(30),
                &mut |bytes| held.grow(bytes),
            )
            .await;
            (r, held)
        });
        // 8 KiB of a body that has not finished: another 4 KiB does not fit beside it.
        tx.send(Ok(Frame::data(Bytes::from(vec![b'x'; 8 * 1024]))))
            .await
            .unwrap();
        let mut refused = false;
        for _ in 0..200 {
            if budget.hold_kib(4).is_err() {
                refused = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(refused, "a body still arriving held none of the budget");
        // Growing past the budget refuses the body itself with 503.
        tx.send(Ok(Frame::data(Bytes::from(vec![b'y'; 4 * 1024]))))
            .await
            .unwrap();
        let (r, held) = reading.await.unwrap();
        assert_eq!(r.unwrap_err().status, http::StatusCode::SERVICE_UNAVAILABLE);
        drop(held);
        assert!(
            budget.hold_kib(10).is_ok(),
            "the refused body's share came back"
        );
    }
}
