//! Faults at run time: a replica's own `GET|POST /admin/faults`, and the process admin server
//! (`--admin-listen`) that reaches every replica, including one refusing connections.

use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::{error_response, json_response, Body};
use crate::api::ApiError;
use crate::faults::FaultPatch;
use crate::replica::Replica;
use crate::Fleet;

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

/// The process admin server: `GET /admin/faults` lists every replica's faults;
/// `POST /admin/faults` patches one (`"replica": i`) or all.
pub(crate) async fn serve_admin(
    listener: TcpListener,
    fleet: Arc<Fleet>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let stream = tokio::select! {
            r = listener.accept() => match r { Ok((s, _)) => s, Err(_) => continue },
            _ = shutdown.changed() => return,
        };
        let fleet = fleet.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| admin(fleet.clone(), req));
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

async fn admin(
    fleet: Arc<Fleet>,
    req: Request<Incoming>,
) -> Result<Response<Body>, std::convert::Infallible> {
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/admin/faults") => {
            let v: Vec<_> = fleet
                .replicas
                .iter()
                .map(|r| json!({"replica": r.index, "addr": r.addr.to_string(), "faults": *r.faults.borrow()}))
                .collect();
            Ok(json_response(StatusCode::OK, &Value::Array(v)))
        }
        // A small bound: a fault patch is a few fields.
        (&Method::POST, "/admin/faults") => {
            match Limited::new(req.into_body(), 1 << 20).collect().await {
                Ok(b) => Ok(admin_patch(&fleet.replicas, &b.to_bytes(), true)),
                Err(e) => Ok(error_response(&ApiError::bad_request(None, e.to_string()))),
            }
        }
        _ => Ok(json_response(
            StatusCode::NOT_FOUND,
            &json!({"detail": "Not Found"}),
        )),
    }
}
