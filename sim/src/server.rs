//! The HTTP side of a replica: a hyper 1 server (HTTP/1.1 and h2c) answering vLLM's routes,
//! with streaming as server-sent events and the faults applied where a client would see them.
//!
//! Routes: `POST /v1/completions`, `POST /v1/chat/completions`, `GET /v1/models`,
//! `GET /health`, `GET /metrics`, `POST /tokenize`, `GET /version`,
//! `POST /reset_prefix_cache`, `GET|POST /admin/faults`.

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::{combinators::BoxBody, BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use crate::api::{self, ApiError, GenerateRequest, Meta};
use crate::engine::Output;
use crate::faults::{should_fail, FaultPatch, FaultState};
use crate::replica::Replica;
use crate::Fleet;

/// Largest request body accepted (vLLM has no limit; a bound keeps memory bounded).
pub const MAX_BODY: usize = 32 << 20;

pub type Body = BoxBody<Bytes, io::Error>;

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

fn full(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(
        Full::new(body.into())
            .map_err(|never: Infallible| match never {})
            .boxed(),
    );
    *r.status_mut() = status;
    if !content_type.is_empty() {
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static(content_type),
        );
    }
    r
}

fn json_response(status: StatusCode, v: &Value) -> Response<Body> {
    full(
        status,
        "application/json",
        serde_json::to_vec(v).unwrap_or_default(),
    )
}

fn error_response(e: &ApiError) -> Response<Body> {
    full(e.status, "application/json", e.to_bytes())
}

/// What a replica's handlers need.
pub struct Ctx {
    pub fleet: Arc<Fleet>,
    pub replica: Arc<Replica>,
    /// Asks prefill replicas of other processes about their blocks (P/D).
    pub client: Client<HttpConnector, Full<Bytes>>,
}

async fn read_body(req: Request<Incoming>) -> Result<Bytes, ApiError> {
    match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) => Err(
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                ApiError {
                    status: StatusCode::PAYLOAD_TOO_LARGE,
                    kind: "BadRequestError",
                    message: format!("request body larger than {MAX_BODY} bytes"),
                    param: None,
                }
            } else {
                ApiError::bad_request(None, format!("reading the request body: {e}"))
            },
        ),
    }
}

/// Answers one request on a replica.
pub async fn handle(ctx: Arc<Ctx>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let r = &ctx.replica;
    let path = req.uri().path().to_owned();
    let resp = match (req.method(), path.as_str()) {
        (&Method::GET, "/health") => {
            if r.faults.borrow().unhealthy {
                full(StatusCode::SERVICE_UNAVAILABLE, "", Bytes::new())
            } else {
                full(StatusCode::OK, "", Bytes::new())
            }
        }
        (&Method::GET, "/v1/models") => {
            let max_len = r.engine.lock().config().max_model_len;
            json_response(StatusCode::OK, &api::models(&r.model, r.created, max_len))
        }
        (&Method::GET, "/metrics") => {
            let text = crate::metrics::render(&r.engine.lock(), &r.model);
            full(
                StatusCode::OK,
                "text/plain; version=0.0.4; charset=utf-8",
                text,
            )
        }
        (&Method::GET, "/version") => json_response(StatusCode::OK, &json!({"version": "0.32.0"})),
        (&Method::POST, "/v1/completions") => generate(&ctx, req, false).await,
        (&Method::POST, "/v1/chat/completions") => generate(&ctx, req, true).await,
        (&Method::POST, "/tokenize") => tokenize(&ctx, req).await,
        (&Method::POST, "/internal/kv_pull") => kv_pull(&ctx, req).await,
        (&Method::POST, "/reset_prefix_cache") => {
            let reset = r.engine.lock().reset_prefix_cache();
            if reset {
                r.wake();
                full(StatusCode::OK, "", Bytes::new())
            } else {
                error_response(&ApiError::bad_request(
                    None,
                    "cannot reset the prefix cache while requests are running",
                ))
            }
        }
        (&Method::GET, "/admin/faults") => {
            json_response(StatusCode::OK, &json!(*r.faults.borrow()))
        }
        (&Method::POST, "/admin/faults") => match read_body(req).await {
            Ok(b) => admin_patch(std::slice::from_ref(r), &b, false),
            Err(e) => error_response(&e),
        },
        (m, p) => {
            let known = [
                "/health",
                "/v1/models",
                "/metrics",
                "/version",
                "/v1/completions",
                "/v1/chat/completions",
                "/tokenize",
                "/internal/kv_pull",
                "/reset_prefix_cache",
                "/admin/faults",
            ];
            if known.contains(&p) {
                json_response(
                    StatusCode::METHOD_NOT_ALLOWED,
                    &json!({"detail": format!("Method {m} Not Allowed")}),
                )
            } else {
                json_response(StatusCode::NOT_FOUND, &json!({"detail": "Not Found"}))
            }
        }
    };
    Ok(resp)
}

/// Applies a fault patch to `replicas` (all of them, or the one the patch names when
/// `by_index` is set) and answers with the new states.
pub fn admin_patch(replicas: &[Arc<Replica>], body: &[u8], by_index: bool) -> Response<Body> {
    let patch: FaultPatch = match serde_json::from_slice(body) {
        Ok(p) => p,
        Err(e) => return error_response(&ApiError::bad_request(None, format!("fault patch: {e}"))),
    };
    let targets: Vec<&Arc<Replica>> = match (by_index, patch.replica) {
        (true, Some(i)) => match replicas.iter().find(|r| r.index == i) {
            Some(r) => vec![r],
            None => {
                return error_response(&ApiError::bad_request(
                    Some("replica"),
                    format!("no replica {i}"),
                ))
            }
        },
        _ => replicas.iter().collect(),
    };
    let mut states = Vec::new();
    for r in targets {
        let before = *r.faults.borrow();
        let mut after = before;
        if let Err(e) = patch.apply(&mut after) {
            return error_response(&ApiError::bad_request(None, e));
        }
        r.faults.send_replace(after);
        if let Some(ms) = patch.for_ms {
            let r = r.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                r.faults.send_replace(before);
            });
        }
        states.push(json!({"replica": r.index, "addr": r.addr.to_string(), "faults": after}));
    }
    json_response(StatusCode::OK, &Value::Array(states))
}

async fn tokenize(ctx: &Ctx, req: Request<Incoming>) -> Response<Body> {
    let r = &ctx.replica;
    let result = async {
        let body = read_body(req).await?;
        let (model, input) = api::parse_tokenize(&body)?;
        check_model(r, model.as_deref())?;
        let tokens = r.tokenize(&input)?;
        let max_len = r.engine.lock().config().max_model_len;
        Ok::<_, ApiError>(json!({
            "count": tokens.len(), "max_model_len": max_len, "tokens": tokens, "token_strs": null,
        }))
    }
    .await;
    match result {
        Ok(v) => json_response(StatusCode::OK, &v),
        Err(e) => error_response(&e),
    }
}

fn check_model(r: &Replica, model: Option<&str>) -> Result<(), ApiError> {
    match model {
        Some(m) if m != r.model => Err(ApiError::model_not_found(m, &r.model)),
        _ => Ok(()),
    }
}

/// P/D decode side: how many prompt blocks the named prefill replica can provide. A replica
/// of this process is asked directly; another process is asked over HTTP
/// (`POST /internal/kv_pull`), which needs the same `--block-size` on both sides.
async fn remote_blocks(
    ctx: &Ctx,
    req: &GenerateRequest,
    tokens: &[u32],
) -> Result<usize, ApiError> {
    let Some(kv) = req.kv_transfer_params.as_ref() else {
        return Ok(0);
    };
    if !kv.do_remote_prefill || kv.remote_block_ids.is_empty() {
        return Ok(0);
    }
    let fail = |m: String| ApiError::internal(format!("KV transfer failed: {m}"));
    let local = match (&kv.remote_host, kv.remote_port) {
        (Some(h), Some(p)) => ctx.fleet.find(h, p),
        _ => kv
            .remote_engine_id
            .as_deref()
            .and_then(|id| ctx.fleet.replicas.iter().find(|r| r.engine_id == id)),
    };
    if let Some(source) = local {
        if let Some(id) = &kv.remote_engine_id {
            if *id != source.engine_id {
                return Err(fail(format!(
                    "remote_engine_id {id} does not match the engine at that address ({})",
                    source.engine_id
                )));
            }
        }
        return source
            .check_pull(tokens, &kv.remote_block_ids)
            .map_err(fail);
    }
    let (Some(host), Some(port)) = (&kv.remote_host, kv.remote_port) else {
        return Err(fail(
            "kv_transfer_params names no remote_host/remote_port of a known engine".into(),
        ));
    };
    let ids = &kv.remote_block_ids;
    let hashes = ctx.replica.prompt_hashes(tokens);
    if ids.len() > hashes.len() {
        return Err(fail(format!(
            "{} remote blocks named, but the prompt has only {} full blocks",
            ids.len(),
            hashes.len()
        )));
    }
    let body = json!({
        "engine_id": kv.remote_engine_id,
        "block_ids": ids,
        "block_hashes": &hashes[..ids.len()],
    });
    let uri = format!("http://{host}:{port}/internal/kv_pull");
    let req = Request::post(uri.as_str())
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .map_err(|e| fail(format!("{uri}: {e}")))?;
    let ask = async {
        let resp = ctx
            .client
            .request(req)
            .await
            .map_err(|e| format!("no prefill engine reachable at {host}:{port}: {e}"))?;
        let status = resp.status();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        let v: Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
        match (status, v["held"].as_bool()) {
            (StatusCode::OK, Some(true)) => Ok(ids.len()),
            _ => Err(v["error"]
                .as_str()
                .unwrap_or("the prefill engine no longer holds the requested blocks")
                .to_owned()),
        }
    };
    match tokio::time::timeout(Duration::from_secs(5), ask).await {
        Ok(r) => r.map_err(fail),
        Err(_) => Err(fail(format!(
            "the prefill engine at {host}:{port} did not answer"
        ))),
    }
}

/// P/D prefill side, asked by a decode replica of another process: do these slots still
/// hold these blocks?
async fn kv_pull(ctx: &Ctx, req: Request<Incoming>) -> Response<Body> {
    let r = &ctx.replica;
    let body = match read_body(req).await {
        Ok(b) => b,
        Err(e) => return error_response(&e),
    };
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let ids: Option<Vec<u32>> = v["block_ids"].as_array().and_then(|a| {
        a.iter()
            .map(|x| x.as_u64().and_then(|x| u32::try_from(x).ok()))
            .collect()
    });
    let hashes: Option<Vec<u64>> = v["block_hashes"]
        .as_array()
        .and_then(|a| a.iter().map(Value::as_u64).collect());
    let (Some(ids), Some(hashes)) = (ids, hashes) else {
        return error_response(&ApiError::bad_request(
            None,
            "expected {\"block_ids\": [u32], \"block_hashes\": [u64]}",
        ));
    };
    if let Some(id) = v["engine_id"].as_str() {
        if id != r.engine_id {
            return json_response(
                StatusCode::OK,
                &json!({"held": false, "error": format!("remote_engine_id {id} does not match the engine at that address ({})", r.engine_id)}),
            );
        }
    }
    let held = r.engine.lock().slots_hold(&ids, &hashes);
    let mut v = json!({ "held": held });
    if !held {
        v["error"] = json!(format!(
            "the prefill engine {} no longer holds the requested blocks (evicted, never computed for this prompt, or a different --block-size)",
            r.engine_id
        ));
    }
    json_response(StatusCode::OK, &v)
}

async fn generate(ctx: &Arc<Ctx>, req: Request<Incoming>, chat: bool) -> Response<Body> {
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
        let remote = remote_blocks(ctx, &p, &tokens).await?;
        let a = r.admit(&p, tokens, remote)?;
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
        match a.rx.recv().await {
            Some(Output::Token { id }) => ids.push(id),
            Some(Output::Done(s)) => break s,
            Some(Output::Error(e)) => return error_response(&ApiError::internal(e)),
            None => return error_response(&ApiError::internal("the engine dropped the request")),
        }
    };
    let kv = a.prefill_only.then(|| pd_params(r, &summary));
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

/// `kv_transfer_params` a prefill-only request returns, for the decode side to pull with.
fn pd_params(r: &Replica, s: &crate::engine::Summary) -> Value {
    let slots = s
        .prefill_blocks
        .as_ref()
        .map(|(slots, _)| slots.clone())
        .unwrap_or_default();
    json!({
        "do_remote_prefill": true,
        "do_remote_decode": false,
        "remote_engine_id": r.engine_id,
        "remote_block_ids": slots,
        "remote_host": r.addr.ip().to_string(),
        "remote_port": r.addr.port(),
    })
}

fn stream(
    ctx: Arc<Ctx>,
    id: String,
    chat: bool,
    p: GenerateRequest,
    mut a: crate::replica::Admitted,
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
        let mut out = ChunkSender {
            tx,
            faults,
            sent: 0,
        };
        let mut next = a.rx.recv().await;
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
                    let after = a.rx.try_recv().ok();
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
                        None => a.rx.recv().await,
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
struct ChunkSender {
    tx: mpsc::Sender<Result<Bytes, io::Error>>,
    faults: FaultState,
    sent: u32,
}

impl ChunkSender {
    /// Sends one chunk; false when the stream must end (client gone or connection dropped).
    async fn send(&mut self, b: Bytes) -> bool {
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

/// Serves a replica's listener until `shutdown`, closing it (and every open connection) while
/// the refuse-connections fault is on.
pub async fn serve(listener: TcpListener, ctx: Arc<Ctx>, mut shutdown: watch::Receiver<bool>) {
    let addr = ctx.replica.addr;
    let mut faults = ctx.replica.faults.subscribe();
    let mut listener = Some(listener);
    loop {
        let refusing = faults.borrow_and_update().refuse_connections;
        if refusing {
            listener = None;
        } else if listener.is_none() {
            match TcpListener::bind(addr).await {
                Ok(l) => listener = Some(l),
                Err(e) => {
                    tracing::warn!(%addr, error = %e, "rebinding after refuse fault failed; retrying");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            }
        }
        let accept = async {
            match &listener {
                Some(l) => l.accept().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = accept => match r {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(connection(stream, ctx.clone(), shutdown.clone()));
                }
                Err(e) => {
                    tracing::debug!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            c = faults.changed() => if c.is_err() { return },
            _ = shutdown.changed() => return,
        }
    }
}

async fn connection(
    stream: tokio::net::TcpStream,
    ctx: Arc<Ctx>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut faults = ctx.replica.faults.subscribe();
    let svc_ctx = ctx.clone();
    let svc = service_fn(move |req| handle(svc_ctx.clone(), req));
    let builder = auto::Builder::new(TokioExecutor::new());
    let conn = builder.serve_connection(TokioIo::new(stream), svc);
    tokio::pin!(conn);
    let refused = async {
        loop {
            if faults.borrow_and_update().refuse_connections {
                return;
            }
            if faults.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = refused => {}
        _ = shutdown.changed() => {}
    }
}
