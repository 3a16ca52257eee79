//! warmpath-sim: a vLLM-compatible model-server simulator.
//!
//! One process serves many replicas (consecutive ports) on one tokio runtime. Each replica has
//! a simulated KV cache with prefix caching and LRU eviction ([`kv_cache`]), a vLLM-like
//! scheduler and timing model ([`engine`]) driven in real time ([`replica`]), vLLM's OpenAI
//! API, error shapes and `/metrics` ([`api`], [`server`], [`metrics`]), KV events over ZMQ in
//! vLLM's wire format ([`kv_publisher`]), P/D `kv_transfer_params`, and faults on demand
//! ([`faults`]). Flags and timing defaults: [`config`] and `sim/README.md`.
#![forbid(unsafe_code)]

pub mod api;
pub mod config;
pub mod engine;
pub mod faults;
pub mod kv_cache;
pub mod kv_publisher;
pub mod metrics;
pub mod replica;
pub mod server;
pub mod tokens;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use config::Cli;
use replica::Replica;
use server::{Body, Ctx};
use tokens::Tokenizer;

/// Why the simulator could not start.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Tokenizer(#[from] tokens::TokenError),
}

/// Every replica of this process (P/D pulls find their prefill replica here).
#[derive(Debug)]
pub struct Fleet {
    pub replicas: Vec<Arc<Replica>>,
}

impl Fleet {
    /// The replica listening at `host:port`.
    pub fn find(&self, host: &str, port: u16) -> Option<&Arc<Replica>> {
        let ip: Option<IpAddr> = host.parse().ok();
        self.replicas.iter().find(|r| {
            r.addr.port() == port
                && (ip == Some(r.addr.ip()) || host == "localhost" && r.addr.ip().is_loopback())
        })
    }
}

/// A running simulator; dropping it stops every replica.
pub struct SimHandle {
    pub fleet: Arc<Fleet>,
    /// The process admin address, when `--admin-listen` was given.
    pub admin_addr: Option<SocketAddr>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl SimHandle {
    /// Addresses of the replicas, in order.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.fleet.replicas.iter().map(|r| r.addr).collect()
    }

    /// Stops serving: listeners close, open connections are dropped, engines stop.
    pub fn shutdown(&mut self) {
        let _ = self.shutdown.send(true);
        for t in self.tasks.drain(..) {
            t.abort();
        }
    }
}

impl Drop for SimHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn topic(template: &str, addr: SocketAddr, model: &str) -> String {
    template
        .replace("{host}", &addr.ip().to_string())
        .replace("{port}", &addr.port().to_string())
        .replace("{model}", model)
}

/// Starts every replica on the current tokio runtime.
pub async fn start(cli: &Cli) -> Result<SimHandle, SimError> {
    cli.validate().map_err(SimError::Config)?;
    let tokenizer = Arc::new(Tokenizer::load(
        cli.tokenizer.as_deref(),
        cli.chat_template.as_deref(),
    )?);
    let mut listeners = Vec::with_capacity(cli.replicas as usize);
    for i in 0..cli.replicas as usize {
        let mut addr = cli.listen;
        if addr.port() != 0 {
            addr.set_port(addr.port() + i as u16);
        }
        let l = TcpListener::bind(addr)
            .await
            .map_err(|source| SimError::Bind { addr, source })?;
        let addr = l
            .local_addr()
            .map_err(|source| SimError::Bind { addr, source })?;
        listeners.push((l, addr));
    }
    let faults = cli.initial_faults();
    let publish = cli.kv_events_endpoint.is_some();
    let replicas: Vec<Arc<Replica>> = listeners
        .iter()
        .enumerate()
        .map(|(i, (_, addr))| {
            Arc::new(Replica::new(
                i,
                *addr,
                cli.model.clone(),
                cli.engine_config(i),
                tokenizer.clone(),
                faults,
                cli.default_max_tokens,
                publish,
            ))
        })
        .collect();
    let fleet = Arc::new(Fleet { replicas });
    let (shutdown, shutdown_rx) = watch::channel(false);
    let mut tasks = Vec::new();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http();
    for (r, (listener, addr)) in fleet.replicas.iter().zip(listeners) {
        let events = cli.kv_events_endpoint.as_ref().map(|ep| {
            kv_publisher::spawn(
                kv_publisher::endpoint_for(ep, r.index),
                topic(&cli.kv_events_topic, addr, &cli.model),
            )
        });
        tasks.push(tokio::spawn(r.clone().drive(events)));
        let ctx = Arc::new(Ctx {
            fleet: fleet.clone(),
            replica: r.clone(),
            client: client.clone(),
        });
        tasks.push(tokio::spawn(server::serve(
            listener,
            ctx,
            shutdown_rx.clone(),
        )));
    }
    let mut admin_addr = None;
    if let Some(addr) = cli.admin_listen {
        let l = TcpListener::bind(addr)
            .await
            .map_err(|source| SimError::Bind { addr, source })?;
        admin_addr = Some(
            l.local_addr()
                .map_err(|source| SimError::Bind { addr, source })?,
        );
        tasks.push(tokio::spawn(serve_admin(l, fleet.clone(), shutdown_rx)));
    }
    Ok(SimHandle {
        fleet,
        admin_addr,
        shutdown,
        tasks,
    })
}

/// The process admin server: `GET /admin/faults` lists every replica's faults;
/// `POST /admin/faults` patches one (`"replica": i`) or all.
async fn serve_admin(
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
            let svc = hyper::service::service_fn(move |req| admin(fleet.clone(), req));
            let _ =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
        });
    }
}

async fn admin(
    fleet: Arc<Fleet>,
    req: Request<Incoming>,
) -> Result<Response<Body>, std::convert::Infallible> {
    let reply = |status: StatusCode, v: serde_json::Value| {
        let mut r = Response::new(
            Full::new(Bytes::from(v.to_string()))
                .map_err(|never: std::convert::Infallible| match never {})
                .boxed(),
        );
        *r.status_mut() = status;
        r
    };
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/admin/faults") => {
            let v: Vec<_> = fleet
                .replicas
                .iter()
                .map(|r| serde_json::json!({"replica": r.index, "addr": r.addr.to_string(), "faults": *r.faults.borrow()}))
                .collect();
            Ok(reply(StatusCode::OK, serde_json::Value::Array(v)))
        }
        (&Method::POST, "/admin/faults") => {
            match Limited::new(req.into_body(), 1 << 20).collect().await {
                Ok(b) => Ok(server::admin_patch(&fleet.replicas, &b.to_bytes(), true)),
                Err(e) => Ok(reply(
                    StatusCode::BAD_REQUEST,
                    serde_json::json!({"error": {"message": e.to_string(), "type": "BadRequestError", "param": null, "code": 400}}),
                )),
            }
        }
        _ => Ok(reply(
            StatusCode::NOT_FOUND,
            serde_json::json!({"detail": "Not Found"}),
        )),
    }
}
