//! SGLang P/D on the HTTP side: the role a request's bootstrap fields give this replica, the
//! decode side's wait for its prefill (in this process, or over HTTP in another one), and
//! `POST /internal/sglang_bootstrap`, where a decode replica of another process waits.
//!
//! Across processes the decode replica asks `bootstrap_host:bootstrap_port` over HTTP: that
//! reaches the prefill replica only when its bootstrap port is its HTTP port
//! (`--bootstrap-port 0`, see [`crate::config`]); SGLang's real bootstrap server speaks
//! another protocol, so a sim decode pairs with sim prefills only.

use std::time::Duration;

use bytes::Bytes;
use http::{header, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{error_response, json_response, read_body, Body, Ctx};
use crate::api::{ApiError, Bootstrap};
use crate::bootstrap::{names_ip, resolve, PrefillTicket, Prompt};

/// The route a decode replica of another process waits on.
pub(super) const WAIT_PATH: &str = "/internal/sglang_bootstrap";

/// What a prefill replica must be started with for decodes of other processes to reach it.
const CROSS_PROCESS: &str = "pairing across simulator processes needs the prefill process started with --bootstrap-port 0 (or equal to its --listen port), so that its bootstrap port is its HTTP port";

/// The side of an SGLang pair a request is on, here.
pub(super) enum Pairing {
    /// This replica is the one the bootstrap fields name: prefill, and report to the room.
    Prefill(PrefillTicket),
    /// Another replica prefilled: this many leading prompt blocks come from it.
    Decode { remote_blocks: usize },
}

/// The body of [`WAIT_PATH`].
#[derive(Debug, Serialize, Deserialize)]
struct WaitRequest {
    bootstrap_room: u64,
    bootstrap_port: u16,
    prompt: Prompt,
    timeout_ms: u64,
}

fn failed(room: u64, m: impl std::fmt::Display) -> ApiError {
    ApiError::internal(format!("KV transfer failed (bootstrap room {room}): {m}"))
}

/// Finds this request's side: claims the room when the fields name this replica, otherwise
/// waits (at most `--bootstrap-timeout-ms`) for the prefill they name to finish.
pub(super) async fn pair(ctx: &Ctx, b: &Bootstrap, tokens: &[u32]) -> Result<Pairing, ApiError> {
    let r = &ctx.replica;
    let prompt = Prompt::of(tokens, r.engine.lock().config().block_size);
    let ips = resolve(&b.host).await;
    if b.port == r.bootstrap_port && ips.iter().any(|ip| names_ip(*ip, r.addr.ip())) {
        return r
            .rooms
            .prefill(b.room, prompt)
            .map(Pairing::Prefill)
            .map_err(|e| failed(b.room, e));
    }
    let remote_blocks = match ctx.fleet.find_bootstrap(&ips, b.port) {
        Some(p) => p
            .rooms
            .await_prefill(b.room, r.bootstrap_timeout)
            .await
            .map_err(|e| e.to_string())
            .and_then(|done| done.blocks_for(&prompt)),
        None => wait_remote(ctx, b, prompt).await,
    }
    .map_err(|e| failed(b.room, e))?;
    Ok(Pairing::Decode { remote_blocks })
}

/// The decode side of a pair whose prefill replica is in another process.
async fn wait_remote(ctx: &Ctx, b: &Bootstrap, prompt: Prompt) -> Result<usize, String> {
    let timeout = ctx.replica.bootstrap_timeout;
    let host = if b.host.contains(':') && !b.host.starts_with('[') {
        format!("[{}]", b.host)
    } else {
        b.host.clone()
    };
    let at = format!("{host}:{}", b.port);
    let body = WaitRequest {
        bootstrap_room: b.room,
        bootstrap_port: b.port,
        prompt,
        timeout_ms: timeout.as_millis().try_into().unwrap_or(u64::MAX),
    };
    let uri = format!("http://{at}{WAIT_PATH}");
    let req = Request::post(uri.as_str())
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(
            serde_json::to_vec(&body).unwrap_or_default(),
        )))
        .map_err(|e| format!("no prefill server at {at}: {e}"))?;
    let ask = async {
        let resp = ctx.client.request(req).await.map_err(|e| {
            format!("no prefill server reachable at bootstrap address {at} ({e}); {CROSS_PROCESS}")
        })?;
        let status = resp.status();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("reading the answer of {at}: {e}"))?
            .to_bytes();
        let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if let (StatusCode::OK, Some(n)) = (status, v["blocks"].as_u64()) {
            return Ok(n as usize);
        }
        match v["error"].as_str().or(v["error"]["message"].as_str()) {
            Some(e) if status == StatusCode::OK => Err(e.to_owned()),
            _ => Err(format!(
                "{at} is no simulator prefill replica's bootstrap endpoint (HTTP {status}); {CROSS_PROCESS}"
            )),
        }
    };
    // The prefill side gives up at the timeout; the slack covers the round trip.
    match tokio::time::timeout(timeout + Duration::from_secs(2), ask).await {
        Ok(r) => r,
        Err(_) => Err(format!(
            "no prefill server answered at bootstrap address {at} within {} ms",
            timeout.as_millis()
        )),
    }
}

/// Prefill side, for a decode replica of another process: waits for the room's prefill and
/// answers `{"blocks": n}`, or `{"error": "..."}` when pairing fails.
pub(super) async fn bootstrap_wait(ctx: &Ctx, req: Request<Incoming>) -> Response<Body> {
    let r = &ctx.replica;
    let body = match read_body(req).await {
        Ok(b) => b,
        Err(e) => return error_response(&e),
    };
    let w: WaitRequest = match serde_json::from_slice(&body) {
        Ok(w) => w,
        Err(e) => {
            return error_response(&ApiError::bad_request(
                None,
                format!("expected {{\"bootstrap_room\", \"bootstrap_port\", \"prompt\", \"timeout_ms\"}}: {e}"),
            ))
        }
    };
    if w.bootstrap_port != r.bootstrap_port {
        return json_response(
            StatusCode::OK,
            &json!({"error": format!(
                "the replica at {} has bootstrap port {}, not {}; {CROSS_PROCESS}",
                r.addr, r.bootstrap_port, w.bootstrap_port
            )}),
        );
    }
    let timeout = Duration::from_millis(w.timeout_ms).min(r.bootstrap_timeout);
    let got = r
        .rooms
        .await_prefill(w.bootstrap_room, timeout)
        .await
        .map_err(|e| e.to_string())
        .and_then(|done| done.blocks_for(&w.prompt));
    match got {
        Ok(n) => json_response(StatusCode::OK, &json!({ "blocks": n })),
        Err(e) => json_response(StatusCode::OK, &json!({ "error": e })),
    }
}
