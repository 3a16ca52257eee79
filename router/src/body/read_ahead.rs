//! A body whose first frame was read ahead, to know that it came before the answer goes on
//! (a stream's first byte is what shows its engine working), and is given back first.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll};

pub struct ReadAhead<B> {
    first: Option<Frame<Bytes>>,
    inner: B,
}

impl<B> ReadAhead<B> {
    /// `inner`, with `first` (read from it already) to come before the rest.
    pub fn new(first: Option<Frame<Bytes>>, inner: B) -> Self {
        Self { first, inner }
    }
}

impl<B> Body for ReadAhead<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.first.take() {
            Some(frame) => Poll::Ready(Some(Ok(frame))),
            None => Pin::new(&mut self.inner).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let ahead = self
            .first
            .as_ref()
            .and_then(|f| f.data_ref())
            .map_or(0, |d| d.len() as u64);
        let inner = self.inner.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower() + ahead);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + ahead);
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Full};

    #[tokio::test]
    async fn the_frame_read_ahead_comes_first_then_the_rest() {
        let body = ReadAhead::new(
            Some(Frame::data(Bytes::from_static(b"ahead "))),
            Full::new(Bytes::from_static(b"rest")),
        );
        assert_eq!(body.size_hint().exact(), Some(10));
        let all = body.collect().await.unwrap().to_bytes();
        assert_eq!(all.as_ref(), b"ahead rest");
        let none = ReadAhead::new(None, Full::new(Bytes::from_static(b"x")));
        assert!(!none.is_end_stream());
        assert_eq!(none.collect().await.unwrap().to_bytes().as_ref(), b"x");
    }
}
