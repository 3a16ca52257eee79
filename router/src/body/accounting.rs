//! Settle a request when its response body is over: how it ended ([`Outcome`]) goes to one
//! callback, and whatever the callback owns (in-flight counters, the admission permit) is
//! released with it. A body dropped before its end is a client that went away; hyper drops the
//! body then, which also drops the upstream response and so cancels the engine's work.

use crate::errors::BodyError;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll};

/// How a response body's life ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Read to its end.
    Ended,
    /// The body failed (the upstream broke or went silent); the error it ended with is given
    /// to the callback's caller through [`Accounting::new`]'s classifier.
    Failed(&'static str),
    /// Dropped before its end: the client went away.
    Abandoned,
}

pub struct Accounting<B: Body, F: FnOnce(Outcome)> {
    inner: B,
    outcome: Option<Outcome>,
    classify: fn(&BodyError) -> &'static str,
    on_end: Option<F>,
}

impl<B: Body, F: FnOnce(Outcome)> Accounting<B, F> {
    /// `classify` names a body error's kind for [`Outcome::Failed`].
    pub fn new(inner: B, classify: fn(&BodyError) -> &'static str, on_end: F) -> Self {
        Self {
            inner,
            outcome: None,
            classify,
            on_end: Some(on_end),
        }
    }
}

impl<B, F> Body for Accounting<B, F>
where
    B: Body<Data = Bytes, Error = BodyError> + Unpin,
    F: FnOnce(Outcome) + Unpin,
{
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        if this.outcome.is_some() {
            return Poll::Ready(None);
        }
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => this.outcome = Some(Outcome::Ended),
            Poll::Ready(Some(Err(e))) => this.outcome = Some(Outcome::Failed((this.classify)(e))),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.outcome.is_some() || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B: Body, F: FnOnce(Outcome)> Drop for Accounting<B, F> {
    fn drop(&mut self) {
        // A body that was complete before anyone polled it (an empty one) still ended.
        let outcome = self.outcome.unwrap_or(if self.inner.is_end_stream() {
            Outcome::Ended
        } else {
            Outcome::Abandoned
        });
        if let Some(f) = self.on_end.take() {
            f(outcome);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Full, StreamBody};
    use std::sync::{Arc, Mutex};

    fn kind(_: &BodyError) -> &'static str {
        "body"
    }

    fn recorder() -> (Arc<Mutex<Vec<Outcome>>>, impl FnOnce(Outcome) + Unpin) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        (seen, move |o| s.lock().unwrap().push(o))
    }

    fn full(text: &'static str) -> impl Body<Data = Bytes, Error = BodyError> + Unpin {
        Full::new(Bytes::from_static(text.as_bytes())).map_err(|never| match never {})
    }

    #[tokio::test]
    async fn read_to_the_end_is_ended_once() {
        let (seen, f) = recorder();
        let mut body = Accounting::new(full("hi"), kind, f);
        assert_eq!(
            body.frame().await.unwrap().unwrap().into_data().unwrap(),
            "hi"
        );
        assert!(body.frame().await.is_none());
        drop(body);
        assert_eq!(*seen.lock().unwrap(), vec![Outcome::Ended]);
    }

    #[tokio::test]
    async fn dropped_early_is_abandoned() {
        let (seen, f) = recorder();
        let mut body = Accounting::new(
            StreamBody::new(futures_util::stream::iter(vec![
                Ok::<_, BodyError>(Frame::data(Bytes::from_static(b"a"))),
                Ok(Frame::data(Bytes::from_static(b"b"))),
            ])),
            kind,
            f,
        );
        body.frame().await.unwrap().unwrap();
        drop(body);
        assert_eq!(*seen.lock().unwrap(), vec![Outcome::Abandoned]);
    }

    #[tokio::test]
    async fn an_empty_body_never_polled_ended() {
        let (seen, f) = recorder();
        let empty = http_body_util::Empty::<Bytes>::new().map_err(|never| match never {});
        drop(Accounting::new(empty, kind, f));
        assert_eq!(*seen.lock().unwrap(), vec![Outcome::Ended]);
    }

    #[tokio::test]
    async fn an_error_is_failed_with_its_kind_and_ends_the_body() {
        let frames: Vec<Result<Frame<Bytes>, BodyError>> = vec![
            Ok(Frame::data(Bytes::from_static(b"a"))),
            Err("broken".into()),
            Ok(Frame::data(Bytes::from_static(b"never"))),
        ];
        let (seen, f) = recorder();
        let mut body = Accounting::new(
            StreamBody::new(futures_util::stream::iter(frames)),
            |_| "idle",
            f,
        );
        body.frame().await.unwrap().unwrap();
        assert!(body.frame().await.unwrap().is_err());
        assert!(body.frame().await.is_none(), "nothing after the error");
        drop(body);
        assert_eq!(*seen.lock().unwrap(), vec![Outcome::Failed("idle")]);
    }
}
