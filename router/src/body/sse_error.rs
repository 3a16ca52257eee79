//! End a broken event stream cleanly: when the replica's stream fails midway (the replica was
//! removed, crashed or went silent), the client gets one last event saying so, in OpenAI's error
//! shape, and `[DONE]`, on a properly ended response, instead of a connection cut mid-chunk
//! that clients report as a transport error with no reason.

use crate::errors::BodyError;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll};

pub struct SseError<B> {
    inner: B,
    /// The bytes passed so far end at an event boundary (a blank line).
    at_boundary: bool,
    done: bool,
}

impl<B> SseError<B> {
    pub fn new(inner: B) -> Self {
        Self {
            inner,
            at_boundary: true,
            done: false,
        }
    }
}

/// The closing event for a stream that broke with `error`.
fn closing(error: &BodyError, at_boundary: bool) -> Bytes {
    let event = serde_json::json!({
        "error": {
            "message": format!("The replica's stream broke before its end: {error}"),
            "type": "upstream_error",
            "code": "stream_broken",
        }
    });
    // Mid-event, a blank line first ends the partial event, so that the error is an event
    // of its own.
    let lead = if at_boundary { "" } else { "\n\n" };
    Bytes::from(format!("{lead}data: {event}\n\ndata: [DONE]\n\n"))
}

impl<B> Body for SseError<B>
where
    B: Body<Data = Bytes, Error = BodyError> + Unpin,
{
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    if !data.is_empty() {
                        this.at_boundary = data.ends_with(b"\n\n") || data.ends_with(b"\r\n\r\n");
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.done = true;
                Poll::Ready(Some(Ok(Frame::data(closing(&e, this.at_boundary)))))
            }
            Poll::Ready(None) => {
                this.done = true;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        // A closing event may be added: no exact size.
        let mut hint = SizeHint::new();
        hint.set_lower(self.inner.size_hint().lower());
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};

    fn body(
        parts: Vec<Result<&'static str, &'static str>>,
    ) -> SseError<impl Body<Data = Bytes, Error = BodyError> + Unpin> {
        let frames: Vec<Result<Frame<Bytes>, BodyError>> = parts
            .into_iter()
            .map(|p| match p {
                Ok(s) => Ok(Frame::data(Bytes::from_static(s.as_bytes()))),
                Err(e) => Err(BodyError::from(e)),
            })
            .collect();
        SseError::new(StreamBody::new(futures_util::stream::iter(frames)))
    }

    #[tokio::test]
    async fn a_broken_stream_ends_with_an_error_event_and_done() {
        let out = body(vec![Ok("data: {\"a\":1}\n\n"), Err("connection reset")])
            .collect()
            .await
            .unwrap()
            .to_bytes();
        let text = std::str::from_utf8(&out).unwrap();
        assert!(
            text.starts_with("data: {\"a\":1}\n\ndata: {\"error\""),
            "{text}"
        );
        assert!(text.contains("\"code\":\"stream_broken\""), "{text}");
        assert!(text.contains("connection reset"), "{text}");
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    }

    #[tokio::test]
    async fn mid_event_the_partial_event_is_closed_first_and_whole_streams_pass_untouched() {
        let out = body(vec![Ok("data: {\"a\":"), Err("gone")])
            .collect()
            .await
            .unwrap()
            .to_bytes();
        assert!(out.starts_with(b"data: {\"a\":\n\ndata: {\"error\""));
        let whole = body(vec![Ok("data: 1\n\n"), Ok("data: [DONE]\n\n")])
            .collect()
            .await
            .unwrap()
            .to_bytes();
        assert_eq!(&whole[..], b"data: 1\n\ndata: [DONE]\n\n");
    }
}
