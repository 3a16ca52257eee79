//! Notice a body's first data chunk: for a stream that is the first token, which times TTFT
//! and ends the request's prefill on its replica. A body that ends with no data counts its end
//! as the first chunk (a prefill that produced nothing still finished).

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll};

pub struct FirstChunk<B, F> {
    inner: B,
    /// Taken when called: at most once.
    on_first: Option<F>,
}

impl<B, F: FnOnce()> FirstChunk<B, F> {
    pub fn new(inner: B, on_first: F) -> Self {
        Self {
            inner,
            on_first: Some(on_first),
        }
    }

    fn fire(&mut self) {
        if let Some(f) = self.on_first.take() {
            f();
        }
    }
}

impl<B, F> Body for FirstChunk<B, F>
where
    B: Body<Data = Bytes> + Unpin,
    F: FnOnce() + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) if frame.is_data() => this.fire(),
            Poll::Ready(None) => this.fire(),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Empty, StreamBody};
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    fn counter() -> (Arc<AtomicU32>, impl FnOnce() + Unpin) {
        let n = Arc::new(AtomicU32::new(0));
        let m = n.clone();
        (n, move || {
            m.fetch_add(1, Ordering::SeqCst);
        })
    }

    #[tokio::test]
    async fn fires_once_on_the_first_data_frame() {
        let frames: Vec<Result<Frame<Bytes>, Infallible>> = vec![
            Ok(Frame::trailers(http::HeaderMap::new())),
            Ok(Frame::data(Bytes::from_static(b"a"))),
            Ok(Frame::data(Bytes::from_static(b"b"))),
        ];
        let (n, f) = counter();
        let mut body = FirstChunk::new(StreamBody::new(futures_util::stream::iter(frames)), f);
        body.frame().await.unwrap().unwrap();
        assert_eq!(n.load(Ordering::SeqCst), 0, "trailers are not a chunk");
        body.frame().await.unwrap().unwrap();
        assert_eq!(n.load(Ordering::SeqCst), 1);
        body.frame().await.unwrap().unwrap();
        assert!(body.frame().await.is_none());
        assert_eq!(n.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn an_empty_body_fires_at_its_end_and_a_dropped_one_never() {
        let (n, f) = counter();
        let mut body = FirstChunk::new(Empty::<Bytes>::new(), f);
        assert!(body.frame().await.is_none());
        assert_eq!(n.load(Ordering::SeqCst), 1);
        let (n, f) = counter();
        drop(FirstChunk::new(Empty::<Bytes>::new(), f));
        assert_eq!(n.load(Ordering::SeqCst), 0);
    }
}
