//! Responses whose client stopped taking data. A client that leaves an HTTP/2 stream's window
//! at 0 (or lets its socket fill) keeps its response's frames from being sent: hyper stops
//! asking the body for more, so nothing the body does on its own can notice, and the request
//! would hold its replica's slot, its in-flight counts and the upstream connection for as long
//! as the client likes. Every response body is registered with a [`StallWatch`], which a
//! sweeper ticks: a body that handed out a frame more than `limit` ago and has not been asked
//! for the next one since is revoked (its inner body dropped, which settles the request as
//! abandoned and closes the upstream connection); hyper gets an error if it ever asks again.
//!
//! A body waiting for its replica (the last poll was `Pending`) is never stalled: that is the
//! replica's silence, which [`super::IdleTimeout`] bounds.

use crate::errors::{BodyError, RespBody};
use bytes::Bytes;
use dashmap::DashMap;
use http_body::{Body, Frame, SizeHint};
use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// The in-flight response bodies, for the sweeper.
#[derive(Debug)]
pub struct StallWatch {
    bodies: DashMap<u64, Arc<Slot>>,
    next: AtomicU64,
    limit: Duration,
    cut: Counter,
}

#[derive(Debug)]
struct Slot {
    state: Mutex<State>,
}

struct State {
    body: Option<RespBody>,
    /// When the last frame was handed out, until the next poll.
    delivered_at: Option<Instant>,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("revoked", &self.body.is_none())
            .field("delivered_at", &self.delivered_at)
            .finish()
    }
}

/// The error hyper gets from a revoked body.
#[derive(Debug, thiserror::Error)]
#[error("the client took no data for {0:?}: response cut")]
pub struct ClientStalled(Duration);

impl StallWatch {
    /// Bodies are revoked when the client has not taken a frame for `limit`; `cut` counts them.
    pub fn new(limit: Duration, cut: Counter) -> Arc<Self> {
        Arc::new(Self {
            bodies: DashMap::new(),
            next: AtomicU64::new(0),
            limit,
            cut,
        })
    }

    /// `body`, watched until it is dropped.
    pub fn watch(self: &Arc<Self>, body: RespBody) -> Watched {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let slot = Arc::new(Slot {
            state: Mutex::new(State {
                body: Some(body),
                delivered_at: None,
            }),
        });
        self.bodies.insert(id, slot.clone());
        Watched {
            slot,
            id,
            watch: self.clone(),
        }
    }

    /// Revoke the bodies whose client has taken nothing for `limit` as of `now`; how many.
    pub fn sweep(&self, now: Instant) -> usize {
        let mut revoked = Vec::new();
        for entry in self.bodies.iter() {
            let mut state = entry.value().state.lock();
            let stalled = state
                .delivered_at
                .is_some_and(|t| now.saturating_duration_since(t) > self.limit);
            if stalled {
                if let Some(body) = state.body.take() {
                    revoked.push(body);
                }
            }
        }
        let n = revoked.len();
        if n > 0 {
            self.cut.inc_by(n as u64);
            tracing::debug!(responses = n, limit = ?self.limit, "responses cut: their clients took no data");
        }
        // Dropped outside the map's and the slots' locks: dropping settles each request.
        drop(revoked);
        n
    }

    /// Sweep every quarter of the limit (at most once a second) until `shutdown` says so.
    pub async fn run(self: Arc<Self>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        let tick = (self.limit / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let mut interval = tokio::time::interval(tick);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = interval.tick() => {
                    self.sweep(Instant::now());
                }
                _ = shutdown.changed() => return,
            }
        }
    }

    /// Bodies watched now.
    pub fn len(&self) -> usize {
        self.bodies.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bodies.is_empty()
    }
}

/// A response body under a [`StallWatch`].
#[derive(Debug)]
pub struct Watched {
    slot: Arc<Slot>,
    id: u64,
    watch: Arc<StallWatch>,
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.watch.bodies.remove(&self.id);
    }
}

impl Body for Watched {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let limit = self.watch.limit;
        let mut state = self.slot.state.lock();
        state.delivered_at = None;
        let Some(body) = state.body.as_mut() else {
            return Poll::Ready(Some(Err(Box::new(ClientStalled(limit)))));
        };
        let polled = Pin::new(body).poll_frame(cx);
        if let Poll::Ready(Some(Ok(_))) = &polled {
            state.delivered_at = Some(Instant::now());
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.slot
            .state
            .lock()
            .body
            .as_ref()
            .is_some_and(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.slot
            .state
            .lock()
            .body
            .as_ref()
            .map_or_else(SizeHint::default, |b| b.size_hint())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};

    fn body(frames: usize, dropped: Arc<AtomicU64>) -> RespBody {
        struct Tell(Arc<AtomicU64>);
        impl Drop for Tell {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
        let tell = Tell(dropped);
        let chunks: Vec<_> = (0..frames)
            .map(|i| Ok::<_, BodyError>(Frame::data(Bytes::from(format!("chunk {i}")))))
            .collect();
        StreamBody::new(futures_util::stream::iter(chunks))
            .map_frame(move |f| {
                let _ = &tell;
                f
            })
            .boxed_unsync()
    }

    #[tokio::test]
    async fn a_body_not_asked_for_its_next_frame_is_revoked_and_one_read_through_is_not() {
        let watch = StallWatch::new(Duration::from_millis(100), Counter::default());
        let dropped = Arc::new(AtomicU64::new(0));
        let mut slow = watch.watch(body(3, dropped.clone()));
        let mut fast = watch.watch(body(3, Arc::new(AtomicU64::new(0))));
        assert_eq!(watch.len(), 2);
        let t0 = Instant::now();
        // One frame taken from each; the fast one is read to its end.
        assert!(slow.frame().await.unwrap().is_ok());
        while let Some(f) = fast.frame().await {
            f.unwrap();
        }
        assert_eq!(watch.sweep(t0), 0, "not yet");
        assert_eq!(watch.sweep(t0 + Duration::from_millis(500)), 1);
        assert_eq!(dropped.load(Ordering::Relaxed), 1, "the inner body is gone");
        let e = slow.frame().await.unwrap().unwrap_err();
        assert!(e.to_string().contains("took no data"), "{e}");
        drop((slow, fast));
        assert!(watch.is_empty());
    }
}
