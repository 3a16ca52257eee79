//! Cut a body that stays silent too long: a replica that stops sending mid-stream must not hold
//! the client, the connection and the replica's in-flight slot forever.

use crate::errors::BodyError;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Sleep;

/// The error a cut body ends with.
#[derive(Debug, thiserror::Error)]
#[error("replica sent nothing for {0:?}; stream cut")]
pub struct IdleTimedOut(pub Duration);

pub struct IdleTimeout<B> {
    inner: B,
    idle: Duration,
    /// Created on the first wait, so bodies that are ready at once never arm a timer.
    timer: Option<Pin<Box<Sleep>>>,
    fired: bool,
}

impl<B> IdleTimeout<B> {
    pub fn new(inner: B, idle: Duration) -> Self {
        Self {
            inner,
            idle,
            timer: None,
            fired: false,
        }
    }
}

impl<B> Body for IdleTimeout<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BodyError>,
{
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        if this.fired {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(timer) = this.timer.as_mut() {
                    timer
                        .as_mut()
                        .reset(tokio::time::Instant::now() + this.idle);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                let idle = this.idle;
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        this.fired = true;
                        Poll::Ready(Some(Err(Box::new(IdleTimedOut(idle)))))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.fired || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};
    use std::convert::Infallible;
    use tokio::sync::mpsc;
    use tokio_stream_shim::Receiver;

    /// A body fed by a channel, so the test decides when frames arrive.
    mod tokio_stream_shim {
        use super::*;
        pub struct Receiver(pub mpsc::Receiver<Bytes>);
        impl futures_util::Stream for Receiver {
            type Item = Result<Frame<Bytes>, Infallible>;
            fn poll_next(
                mut self: Pin<&mut Self>,
                cx: &mut Context<'_>,
            ) -> Poll<Option<Self::Item>> {
                self.0.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b))))
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn cuts_after_silence_and_not_before() {
        let (tx, rx) = mpsc::channel(4);
        let mut body = IdleTimeout::new(StreamBody::new(Receiver(rx)), Duration::from_secs(5));
        tx.send(Bytes::from_static(b"a")).await.unwrap();
        let f = body.frame().await.unwrap().unwrap();
        assert_eq!(f.into_data().unwrap(), "a");
        // Silence shorter than the bound: the next chunk still arrives.
        let sender = tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(4)).await;
            sender.send(Bytes::from_static(b"b")).await.unwrap();
        });
        let f = body.frame().await.unwrap().unwrap();
        assert_eq!(f.into_data().unwrap(), "b");
        // Then nothing for longer than the bound: cut, with the idle error, then the end.
        let started = tokio::time::Instant::now();
        let e = body.frame().await.unwrap().unwrap_err();
        assert!(e.is::<IdleTimedOut>(), "{e}");
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        assert!(body.frame().await.is_none());
        assert!(body.is_end_stream());
        drop(tx);
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_ends_is_not_cut() {
        let (tx, rx) = mpsc::channel(4);
        let mut body = IdleTimeout::new(StreamBody::new(Receiver(rx)), Duration::from_secs(1));
        tx.send(Bytes::from_static(b"x")).await.unwrap();
        drop(tx);
        assert!(body.frame().await.unwrap().is_ok());
        assert!(body.frame().await.is_none());
    }
}
