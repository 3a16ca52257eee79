//! Completions and chat completions: admission to the engine, then the whole body at once or
//! a server-sent event per token, with the generation faults (errors, hangs, slow and dropped
//! streams) applied.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{header, Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::sync::mpsc;

use super::pd::{pd_params, remote_blocks};
use super::sglang::{pair, Pairing};
use super::{check_model, error_response, full, read_body, Body, Ctx};
use crate::api::{self, ApiError, GenerateRequest, Meta};
use crate::engine::Output;
use crate::faults::{should_fail, FaultState};
use crate::replica::Admitted;

/// A response body fed by a channel: how streamed chunks (and a dropped connection) get out.
struct ChannelBody(mpsc::Receiver<Result<Bytes, io::Error>>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        self.0.poll_recv(cx).map(|o| o.map(|r| r.map(Frame::data)))
    }
}

/// Answers `/v1/completions`, or `/v1/chat/completions` when `chat`.
pub(super) async fn generate(ctx: &Arc<Ctx>, req: Request<Incoming>, chat: bool) -> Response<Body> {
    let r = &ctx.replica;
    let faults = *r.faults.borrow();
    if faults.hang {
        // Hold the request open until the client gives up.
        std::future::pending::<()>().await;
    }
    let n = r.next_request();
    let body = match read_body(req).await {
        Ok(b) => b,
        Err(e) => return error_response(&e),
    };
    if should_fail(faults.error_rate, n) {
        return error_response(&ApiError::internal(
            "simulated engine failure (fault injection)",
        ));
    }
    let parsed = if chat {
        api::parse_chat(&body)
    } else {
        api::parse_completion(&body)
    };
    let admitted = async {
        let p = parsed?;
        check_model(r, p.model.as_deref())?;
        let tokens = r.tokenize(&p.input)?;
        let (remote, room) = match &p.bootstrap {
            Some(b) => {
                // A request that cannot run fails before it pairs: a decode would otherwise
                // wait for its prefill only to be refused.
                r.validate(&p, tokens.len())?;
                match pair(ctx, b, &tokens).await? {
                    Pairing::Prefill(t) => (0, Some(t)),
                    Pairing::Decode { remote_blocks } => (remote_blocks, None),
                }
            }
            None => (remote_blocks(ctx, &p, &tokens).await?, None),
        };
        let a = r.admit(&p, tokens, remote, room)?;
        Ok::<_, ApiError>((p, a))
    }
    .await;
    let (p, mut a) = match admitted {
        Ok(x) => x,
        Err(e) => return error_response(&e),
    };
    let id = format!(
        "{}-{:016x}",
        if chat { "chatcmpl" } else { "cmpl" },
        crate::kv_cache::block_hash(Some(n), &[r.index as u32, r.addr.port() as u32])
    );
    if p.stream {
        return stream(ctx.clone(), id, chat, p, a, faults);
    }
    let mut ids = Vec::new();
    let summary = loop {
        match a.recv().await {
            Some(Output::Token { id }) => ids.push(id),
            Some(Output::Done(s)) => break s,
            Some(Output::Error(e)) => return error_response(&ApiError::internal(e)),
            None => return error_response(&ApiError::internal("the engine dropped the request")),
        }
    };
    let kv = a.nixl_prefill.then(|| pd_params(r, &summary));
    let meta = Meta {
        id: &id,
        created: r.created,
        model: &r.model,
        chat,
    };
    let usage = api::usage(
        a.prompt_tokens,
        summary.completion_tokens,
        summary.cached_tokens,
    );
    let bytes = Bytes::from(api::full_response(
        &meta,
        &r.tokenizer.decode(&ids),
        summary.finish_reason,
        usage,
        kv,
    ));
    if faults.drop_mid_stream {
        // Headers and half the body, then the connection goes.
        let (tx, rx) = mpsc::channel(2);
        let half = bytes.slice(..bytes.len() / 2);
        tokio::spawn(async move {
            let _ = tx.send(Ok(half)).await;
            // Let the headers and the first half reach the client before the cut.
            tokio::time::sleep(Duration::from_millis(20)).await;
            let _ = tx
                .send(Err(io::Error::other(
                    "fault: connection dropped mid-response",
                )))
                .await;
        });
        return Response::builder()
            .header(header::CONTENT_TYPE, "application/json")
            .body(ChannelBody(rx).boxed())
            .expect("response");
    }
    full(StatusCode::OK, "application/json", bytes)
}

fn stream(
    ctx: Arc<Ctx>,
    id: String,
    chat: bool,
    p: GenerateRequest,
    mut a: Admitted,
    faults: FaultState,
) -> Response<Body> {
    let (tx, rx) = mpsc::channel::<Result<Bytes, io::Error>>(16);
    tokio::spawn(async move {
        let r = &ctx.replica;
        let meta = Meta {
            id: &id,
            created: r.created,
            model: &r.model,
            chat,
        };
        let mut out = ChunkSender::new(tx, faults);
        let mut next = a.recv().await;
        // vLLM sends the role chunk with the engine's first output, not before prefill: a
        // router timing the first chunk measures prefill either way.
        if chat && !out.send(api::chat_role_chunk(&meta)).await {
            return;
        }
        loop {
            match next.take() {
                Some(Output::Token { id: tok }) => {
                    // The engine delivers a request's last token and its summary together: peek
                    // so that the last chunk carries the finish reason, as vLLM's does.
                    let after = a.try_recv();
                    let finish = match &after {
                        Some(Output::Done(s)) => Some(s.finish_reason),
                        _ => None,
                    };
                    let text = r.tokenizer.decode(&[tok]);
                    if !out
                        .send(api::token_chunk(&meta, &text, finish, p.include_usage))
                        .await
                    {
                        return;
                    }
                    next = match after {
                        Some(o) => Some(o),
                        None => a.recv().await,
                    };
                }
                Some(Output::Done(s)) => {
                    if p.include_usage {
                        let u = api::usage(a.prompt_tokens, s.completion_tokens, s.cached_tokens);
                        if !out.send(api::usage_chunk(&meta, u)).await {
                            return;
                        }
                    }
                    let _ = out.send(Bytes::from_static(b"data: [DONE]\n\n")).await;
                    return;
                }
                Some(Output::Error(e)) => {
                    let _ = out.send(api::sse(&ApiError::internal(e).body())).await;
                    let _ = out.send(Bytes::from_static(b"data: [DONE]\n\n")).await;
                    return;
                }
                None => return,
            }
        }
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream; charset=utf-8")
        .body(ChannelBody(rx).boxed())
        .expect("response")
}

/// Sends streamed chunks under the stream faults.
pub(super) struct ChunkSender {
    tx: mpsc::Sender<Result<Bytes, io::Error>>,
    faults: FaultState,
    sent: u32,
}

impl ChunkSender {
    pub(super) fn new(tx: mpsc::Sender<Result<Bytes, io::Error>>, faults: FaultState) -> Self {
        ChunkSender {
            tx,
            faults,
            sent: 0,
        }
    }

    /// Sends one chunk; false when the stream must end (client gone or connection dropped).
    pub(super) async fn send(&mut self, b: Bytes) -> bool {
        if self.faults.slow_stream && self.sent > 0 {
            tokio::time::sleep(Duration::from_millis(self.faults.slow_stream_ms)).await;
        }
        if self.faults.drop_mid_stream && self.sent >= self.faults.drop_after_chunks {
            let _ = self
                .tx
                .send(Err(io::Error::other(
                    "fault: connection dropped mid-stream",
                )))
                .await;
            return false;
        }
        self.sent += 1;
        self.tx.send(Ok(b)).await.is_ok()
    }
}
