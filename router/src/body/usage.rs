//! Count the output tokens of a response as it streams past, for flow control's accounting
//! (a tenant is charged what it used, not its `max_tokens`).
//!
//! The count is read from the body without parsing it: the `"completion_tokens":N` of a usage
//! object when one goes by (every non-streamed answer; streams with `include_usage`), else, for
//! a stream, the number of server-sent events less the closing `[DONE]` (engines send about
//! one token per event). Events are separated by a blank line, and a raw `\n\n` cannot occur
//! inside an event's JSON (newlines in strings are escaped), so counting separators counts
//! events. A pattern split across two frames is missed, which costs an estimate its
//! correction, nothing else.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use memchr::memmem;
use std::pin::Pin;
use std::task::{Context, Poll};

const USAGE_KEY: &[u8] = b"\"completion_tokens\":";

/// Passes frames through; tells `report` the output tokens seen so far.
pub struct UsageScan<B, F> {
    inner: B,
    /// `None`: nothing wants the count, frames pass untouched.
    report: Option<F>,
    stream: bool,
    events: u64,
    usage: Option<u64>,
    last_was_newline: bool,
}

impl<B, F: Fn(u64)> UsageScan<B, F> {
    /// Scan for `report` when there is one; `stream` says whether the answer is SSE.
    pub fn new(inner: B, report: Option<F>, stream: bool) -> Self {
        Self {
            inner,
            report,
            stream,
            events: 0,
            usage: None,
            last_was_newline: false,
        }
    }

    fn scan(&mut self, data: &[u8]) {
        let Some(report) = &self.report else { return };
        if let Some(at) = memmem::find(data, USAGE_KEY) {
            let digits = data[at + USAGE_KEY.len()..]
                .iter()
                .skip_while(|b| b.is_ascii_whitespace())
                .take_while(|b| b.is_ascii_digit())
                .fold(None, |n: Option<u64>, b| {
                    Some(n.unwrap_or(0).saturating_mul(10) + u64::from(b - b'0'))
                });
            if digits.is_some() {
                self.usage = digits;
            }
        }
        if self.stream {
            let split = self.last_was_newline && data.first() == Some(&b'\n');
            self.events += memmem::find_iter(data, b"\n\n").count() as u64 + u64::from(split);
            self.last_was_newline = data.last() == Some(&b'\n');
        }
        match (self.usage, self.stream) {
            (Some(n), _) => report(n),
            (None, true) => report(self.events.saturating_sub(1)),
            (None, false) => {}
        }
    }
}

impl<B, F> Body for UsageScan<B, F>
where
    B: Body<Data = Bytes> + Unpin,
    F: Fn(u64) + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if this.report.is_some() {
            if let Poll::Ready(Some(Ok(frame))) = &polled {
                if let Some(data) = frame.data_ref() {
                    this.scan(data);
                }
            }
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
    use http_body_util::{BodyExt, StreamBody};
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    async fn count(chunks: &[&'static str], stream: bool) -> u64 {
        let seen = Arc::new(AtomicU64::new(u64::MAX));
        let into = seen.clone();
        let report = move |n| into.store(n, Ordering::Relaxed);
        let frames = chunks
            .iter()
            .map(|c| Ok::<_, Infallible>(Frame::data(Bytes::from_static(c.as_bytes()))))
            .collect::<Vec<_>>();
        let body = StreamBody::new(futures_util::stream::iter(frames));
        let out = UsageScan::new(body, Some(report), stream)
            .collect()
            .await
            .unwrap();
        assert_eq!(
            out.to_bytes().len(),
            chunks.iter().map(|c| c.len()).sum::<usize>(),
            "frames pass untouched"
        );
        seen.load(Ordering::Relaxed)
    }

    #[tokio::test]
    async fn streams_count_events_less_done() {
        let n = count(
            &[
                "data: {\"a\":\"x\\n\\ny\"}\n\n",
                "data: {}\n",
                "\ndata: {}\n\ndata: [DONE]\n\n",
            ],
            true,
        )
        .await;
        assert_eq!(
            n, 3,
            "three token events; escaped newlines are not separators"
        );
    }

    #[tokio::test]
    async fn a_usage_object_wins() {
        let stream = count(
            &[
                "data: {}\n\n",
                "data: {\"usage\":{\"prompt_tokens\":9,\"completion_tokens\": 42}}\n\n",
                "data: [DONE]\n\n",
            ],
            true,
        )
        .await;
        assert_eq!(stream, 42);
        let whole = count(
            &["{\"choices\":[],\"usage\":{\"completion_tokens\":17,\"total_tokens\":30}}"],
            false,
        )
        .await;
        assert_eq!(whole, 17);
        assert_eq!(
            count(&["{\"choices\":[]}"], false).await,
            u64::MAX,
            "nothing countable: left unknown"
        );
    }
}
