//! Prefill/decode disaggregation over HTTP, as vLLM's NIXL connector exposes it to a router:
//! the decode side checks that the prefill replica still holds the prompt's blocks before it
//! skips computing them; the prefill side answers that check and returns the
//! `kv_transfer_params` naming them.

use std::time::Duration;

use bytes::Bytes;
use http::{header, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use serde_json::{json, Value};

use super::{error_response, json_response, read_body, Body, Ctx};
use crate::api::{ApiError, GenerateRequest};
use crate::engine::Summary;
use crate::replica::Replica;

/// P/D decode side: how many prompt blocks the named prefill replica can provide. A replica
/// of this process is asked directly; another process is asked over HTTP
/// (`POST /internal/kv_pull`), which needs the same `--block-size` on both sides.
pub(super) async fn remote_blocks(
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
pub(super) async fn kv_pull(ctx: &Ctx, req: Request<Incoming>) -> Response<Body> {
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

/// `kv_transfer_params` a prefill-only request returns, for the decode side to pull with.
pub(super) fn pd_params(r: &Replica, s: &Summary) -> Value {
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
        "remote_host": r.advertised.ip().to_string(),
        "remote_port": r.advertised.port(),
    })
}
