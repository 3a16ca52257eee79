//! warmpath-sim: a vLLM-compatible model-server simulator.
//!
//! One process serves many replicas (consecutive ports) on one tokio runtime. Each replica has
//! a simulated KV cache with prefix caching and LRU eviction ([`kv_cache`]), a vLLM-like
//! scheduler and timing model ([`engine`]) driven in real time ([`replica`]), vLLM's OpenAI
//! API, error shapes and `/metrics` ([`api`], [`server`], [`metrics`]), KV events over ZMQ in
//! vLLM's wire format ([`kv_publisher`]), P/D as vLLM's `kv_transfer_params` and as SGLang's
//! bootstrap rooms ([`bootstrap`]), and faults on demand ([`faults`]). Flags and timing
//! defaults: [`config`] and `sim/README.md`.
#![forbid(unsafe_code)]

pub mod api;
pub mod bootstrap;
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
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use bootstrap::BootstrapConfig;
pub use config::Cli;
use replica::Replica;
use server::Ctx;
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
            let at = |a: SocketAddr| {
                a.port() == port
                    && (ip == Some(a.ip()) || host == "localhost" && a.ip().is_loopback())
            };
            at(r.advertised) || at(r.addr)
        })
    }

    /// The replica whose SGLang bootstrap endpoint is `port` on a host with one of `ips`.
    pub fn find_bootstrap(&self, ips: &[IpAddr], port: u16) -> Option<&Arc<Replica>> {
        self.replicas.iter().find(|r| {
            r.bootstrap_port == port && ips.iter().any(|ip| bootstrap::names_ip(*ip, r.addr.ip()))
        })
    }
}

/// A running simulator; dropping it stops every replica.
pub struct SimHandle {
    pub fleet: Arc<Fleet>,
    /// The process admin address, when `--admin-listen` was given.
    pub admin_addr: Option<SocketAddr>,
    shutdown: watch::Sender<bool>,
    drain: watch::Sender<bool>,
    /// Every accept loop and open connection holds a clone; once all are gone the drain is
    /// over (the receiver sees the channel closed).
    open: Option<mpsc::Sender<()>>,
    closed: mpsc::Receiver<()>,
    tasks: Vec<JoinHandle<()>>,
}

impl SimHandle {
    /// Addresses of the replicas, in order.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.fleet.replicas.iter().map(|r| r.addr).collect()
    }

    /// Stops serving gracefully: listeners close at once (new connections are refused), open
    /// connections finish the requests they carry and close, for at most `limit`; then
    /// everything stops as by [`SimHandle::shutdown`]. Returns whether every connection closed
    /// in time.
    pub async fn drain(&mut self, limit: Duration) -> bool {
        let _ = self.drain.send(true);
        self.open = None;
        let drained = tokio::time::timeout(limit, self.closed.recv())
            .await
            .is_ok();
        self.shutdown();
        drained
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
            Arc::new(
                Replica::new(
                    i,
                    *addr,
                    cli.model.clone(),
                    cli.engine_config(i),
                    tokenizer.clone(),
                    faults,
                    cli.default_max_tokens,
                    publish,
                    BootstrapConfig {
                        port: cli.bootstrap_port_for(i, *addr),
                        timeout: Duration::from_millis(cli.bootstrap_timeout_ms),
                    },
                )
                .advertised_at(cli.advertise_host),
            )
        })
        .collect();
    let fleet = Arc::new(Fleet { replicas });
    let (shutdown, shutdown_rx) = watch::channel(false);
    let (drain, drain_rx) = watch::channel(false);
    let (open, closed) = mpsc::channel(1);
    let mut tasks = Vec::new();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http();
    for (r, (listener, addr)) in fleet.replicas.iter().zip(listeners) {
        let events = cli.kv_events_endpoint.as_ref().map(|ep| {
            kv_publisher::spawn(
                kv_publisher::endpoint_for(ep, r.index),
                topic(&cli.kv_events_topic, addr, &cli.model),
                cli.kv_events_replay_endpoint.as_ref().map(|rp| {
                    (
                        kv_publisher::endpoint_for(rp, r.index),
                        cli.kv_events_replay_buffer,
                    )
                }),
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
            server::Lifecycle {
                shutdown: shutdown_rx.clone(),
                drain: drain_rx.clone(),
                open: open.clone(),
            },
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
        tasks.push(tokio::spawn(server::serve_admin(
            l,
            fleet.clone(),
            shutdown_rx,
        )));
    }
    Ok(SimHandle {
        fleet,
        admin_addr,
        shutdown,
        drain,
        open: Some(open),
        closed,
        tasks,
    })
}
