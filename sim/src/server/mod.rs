//! The HTTP side of a replica: a hyper 1 server (HTTP/1.1 and h2c) answering vLLM's routes,
//! with streaming as server-sent events and the faults applied where a client would see them.
//!
//! Routes: `POST /v1/completions`, `POST /v1/chat/completions`, `GET /v1/models`,
//! `GET /health`, `GET /metrics`, `POST /tokenize`, `GET /version`,
//! `POST /reset_prefix_cache`, `GET|POST /admin/faults`; between simulator processes (P/D),
//! `POST /internal/kv_pull` and `POST /internal/sglang_bootstrap`.
//!
//! This module routes and holds what every handler shares; generation is in `generate.rs`,
//! vLLM-style P/D block transfers in `pd.rs`, SGLang-style P/D pairing in `sglang.rs`, fault
//! administration in `admin.rs`, the accept loop (and the refuse-connections fault) in
//! `listen.rs`.

use std::convert::Infallible;
use std::io;
use std::sync::Arc;

use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use serde_json::{json, Value};

use crate::api::{self, ApiError};
use crate::replica::Replica;
use crate::Fleet;

mod admin;
mod generate;
mod listen;
mod pd;
mod sglang;
#[cfg(test)]
mod tests;

pub use admin::admin_patch;
pub(crate) use admin::serve_admin;
pub use listen::{serve, Lifecycle};

/// Largest request body accepted (vLLM has no limit; a bound keeps memory bounded).
pub const MAX_BODY: usize = 32 << 20;

pub type Body = BoxBody<Bytes, io::Error>;

/// What a replica's handlers need.
pub struct Ctx {
    pub fleet: Arc<Fleet>,
    pub replica: Arc<Replica>,
    /// Asks prefill replicas of other processes about their blocks (P/D).
    pub client: Client<HttpConnector, Full<Bytes>>,
}

/// A complete (not streamed) response; an empty `content_type` sends none, as vLLM's `/health`.
pub(super) fn full(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Body> {
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

pub(super) fn json_response(status: StatusCode, v: &Value) -> Response<Body> {
    full(
        status,
        "application/json",
        serde_json::to_vec(v).unwrap_or_default(),
    )
}

pub(super) fn error_response(e: &ApiError) -> Response<Body> {
    full(e.status, "application/json", e.to_bytes())
}

/// The request body, bounded by [`MAX_BODY`], with vLLM's error when it is not.
pub(super) async fn read_body(req: Request<Incoming>) -> Result<Bytes, ApiError> {
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

/// vLLM answers 404 for a model it does not serve; no model named means the served one.
pub(super) fn check_model(r: &Replica, model: Option<&str>) -> Result<(), ApiError> {
    match model {
        Some(m) if m != r.model => Err(ApiError::model_not_found(m, &r.model)),
        _ => Ok(()),
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
        (&Method::POST, "/v1/completions") => generate::generate(&ctx, req, false).await,
        (&Method::POST, "/v1/chat/completions") => generate::generate(&ctx, req, true).await,
        (&Method::POST, "/tokenize") => tokenize(&ctx, req).await,
        (&Method::POST, "/internal/kv_pull") => pd::kv_pull(&ctx, req).await,
        (&Method::POST, sglang::WAIT_PATH) => sglang::bootstrap_wait(&ctx, req).await,
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
                sglang::WAIT_PATH,
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
