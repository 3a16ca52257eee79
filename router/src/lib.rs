//! warmpath's data plane: an OpenAI-compatible proxy that sends each request to the replica
//! that should answer it fastest (cache-warm, not overloaded).
//!
//! The binary (`warmpath-router --config FILE`) is a thin wrapper around [`start`], which
//! integration tests call in-process on port 0. The pieces, in the order a request meets them:
//! [`server`] accepts; [`api`] is the request path, a tower stack with one concern per layer
//! (request id, body read, parse, admission, retry, replica choice, P/D, passive health,
//! forward) whose response bodies are wrapped by [`body`]; [`choice`] binds a request to a
//! replica (for the proxy, the P/D split and the endpoint picker alike); [`upstream`] pools
//! connections to replicas. Around it: [`state`] holds the routing table and replica state, each piece with one
//! owner (its module doc has the table); [`sources`] feed it (file reload, Kubernetes watch,
//! engine scrapes); [`admin`] serves metrics and probes; [`metrics`] names every series;
//! [`endpoint_picker`] offers the same choices to a Gateway over Envoy's ext_proc.
#![forbid(unsafe_code)]

pub mod admin;
pub mod api;
mod backoff;
pub mod body;
pub mod check;
pub mod choice;
pub mod config;
pub mod decisions;
pub mod endpoint_picker;
pub mod errors;
pub mod flow;
pub mod metrics;
pub mod pd_wire;
pub mod peers;
pub mod request;
pub mod server;
pub mod sessions;
pub mod sidecar;
pub mod sources;
pub mod state;
pub mod tenants;
pub mod upstream;

pub use sources::kubernetes;

use crate::api::Admission;
use crate::config::Config;
use crate::errors::StartError;
use crate::flow::FlowControl;
use crate::metrics::{Metrics, ResultLabels};
use crate::state::discovery::DiscoveryStatus;
use crate::state::index::{RouterIndex, SharedIndex};
use crate::state::publish::{Publisher, TableReader, Update, Updates};
use crate::state::table::Table;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

pub use config::Config as RouterConfig;
pub use errors::{ApiError, ConfigError};

/// How to run the router besides its configuration.
#[derive(Debug, Clone)]
pub struct Options {
    /// Watch this file and apply its changes (static mode: the `--config` file).
    pub watch: Option<PathBuf>,
    pub reload_interval: Duration,
    /// Kubernetes mode: also route to the InferencePools and InferenceReplicas of the cluster.
    pub kubernetes: Option<kubernetes::Discovery>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            watch: None,
            reload_interval: Duration::from_secs(1),
            kubernetes: None,
        }
    }
}

/// A running router.
pub struct RouterHandle {
    pub addr: SocketAddr,
    pub admin_addr: SocketAddr,
    /// The ext_proc listener of endpoint-picker mode (`endpoint_picker.listen`), when on.
    pub endpoint_picker_addr: Option<SocketAddr>,
    tables: TableReader,
    metrics: Arc<Metrics>,
    discovery: Arc<DiscoveryStatus>,
    /// Held so that the publisher runs as long as the router does, with or without a source of
    /// updates (static mode without a file watcher has none).
    _updates: Updates,
    shutdown: watch::Sender<bool>,
    /// Set when leaving: readiness fails.
    draining: Arc<AtomicBool>,
    accept_before_drain: Duration,
    tasks: Vec<JoinHandle<()>>,
}

impl RouterHandle {
    /// The routing table in use now.
    pub fn table(&self) -> Arc<Table> {
        self.tables.current()
    }

    /// A handle that reads the current table, for tasks that follow it.
    pub fn tables(&self) -> TableReader {
        self.tables.clone()
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Kubernetes discovery's progress (always synced in static mode).
    pub fn discovery(&self) -> &DiscoveryStatus {
        &self.discovery
    }

    /// Wait until this router counts no request in flight to `model`'s replicas, polling for
    /// up to `within`; `false` when some still are (a response body not yet finished is in
    /// flight until its last byte, so tests that compare choices wait for this first).
    pub async fn wait_idle(&self, model: &str, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let inflight: u32 = self.table().candidates(model).map_or(0, |all| {
                all.iter().map(|c| c.replica.inflight_requests()).sum()
            });
            if inflight == 0 {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Leave as load balancers expect (on SIGTERM): readiness fails at once, new connections
    /// are still accepted for `shutdown.accept_ms`, then [`RouterHandle::shutdown`].
    pub async fn drain(self) {
        self.draining.store(true, Ordering::Relaxed);
        tokio::time::sleep(self.accept_before_drain).await;
        self.shutdown().await;
    }

    /// Stop accepting, let open requests finish (up to `shutdown.drain_ms`), stop background
    /// work.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// Start the router: bind both listeners, start scrapers and the reload watcher.
pub async fn start(config: Config, options: Options) -> Result<RouterHandle, StartError> {
    start_with(config, options, None).await
}

async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), StartError> {
    let bind_error = |source| StartError::Bind { addr, source };
    let listener = TcpListener::bind(addr).await.map_err(bind_error)?;
    let local = listener.local_addr().map_err(bind_error)?;
    Ok((listener, local))
}

/// [`start`] with a custom admission layer instead of flow control (tests).
pub async fn start_with(
    config: Config,
    options: Options,
    admission: Option<Arc<dyn Admission>>,
) -> Result<RouterHandle, StartError> {
    if config.pools.is_empty() && options.kubernetes.is_none() {
        tracing::warn!(
            "the configuration has no pools: every model answers 404 and /readyz stays 503"
        );
    }
    let (api_listener, addr) = bind(config.listen).await?;
    let (admin_listener, admin_addr) = bind(config.admin).await?;
    let picker_listener = match config.endpoint_picker.listen {
        Some(addr) => Some(bind(addr).await?),
        None => None,
    };
    let mut picker_options = endpoint_picker::Options::of(&config);
    picker_options.token = config
        .endpoint_picker
        .token_file
        .as_deref()
        .map(admin::AdminToken::read)
        .transpose()
        .map_err(StartError::PickerToken)?;

    let metrics = Arc::new(Metrics::new());
    let index: SharedIndex = Arc::new(parking_lot::Mutex::new(RouterIndex::new(
        config.index.max_bytes_per_replica,
        config.index.pending_limits(),
    )));
    let discovery = Arc::new(DiscoveryStatus::new(options.kubernetes.is_none()));
    let serve_options = server::ServeOptions {
        header_read: config.timeouts.client(),
        drain: Duration::from_millis(config.shutdown.drain_ms),
        max_connections: config.limits.max_connections,
        write_stall: Duration::from_millis(config.timeouts.write_stall_ms),
        counters: Some(metrics.connections.listener.clone()),
        tls: config
            .tls
            .as_ref()
            .map(|t| server::tls::acceptor(&t.cert_file, &t.key_file))
            .transpose()?,
    };
    // The admin listener answers probes and scrapes: a few connections, never counted as
    // clients'.
    let admin_options = server::ServeOptions {
        max_connections: ADMIN_CONNECTIONS,
        counters: None,
        // Probes and scrapes stay plain: kubelets and Prometheus reach it inside the cluster.
        tls: None,
        ..serve_options.clone()
    };
    let draining = Arc::new(AtomicBool::new(false));
    let body_budget_bytes = config.limits.max_buffered_body_bytes;
    let tokenize = Arc::new(api::tokenize::TokenizePool::of(
        &config.limits,
        metrics.clone(),
    ));
    let stall_watch = body::StallWatch::new(
        Duration::from_millis(config.timeouts.write_stall_ms),
        metrics.connections.client_write_stalls.clone(),
    );
    let accept_before_drain = Duration::from_millis(config.shutdown.accept_ms);
    let bound = config.start_only();

    let precise = state::index::precise(&config.index);
    let precise_admin = precise.clone();
    let sessions = Arc::new(
        sessions::Sessions::from_config(&config.sessions).map_err(StartError::SessionKey)?,
    );
    let admin_token = config
        .admin_token_file
        .as_deref()
        .map(admin::AdminToken::read)
        .transpose()
        .map_err(StartError::AdminToken)?;
    let scrape_metrics = metrics.clone();
    let scrape_precise = precise.clone();
    // A replica's scraper and KV-event follower live and die together.
    let start_scraper: state::publish::StartScraper = Box::new(move |replica, tables| {
        let scrape = sources::scrape::run(replica.clone(), tables.clone(), scrape_metrics.clone());
        let events = sources::kv_events::run(
            replica,
            tables,
            scrape_precise.clone(),
            scrape_metrics.clone(),
        );
        tokio::spawn(async move {
            tokio::join!(scrape, events);
        })
        .abort_handle()
    });
    let (mut publisher, tables) =
        Publisher::new(&config, index.clone(), metrics.clone(), start_scraper);
    let replicas = publisher.replicas();
    publisher.apply(Update::File(Box::new(config)));
    metrics
        .config
        .reloads
        .get_or_create(&ResultLabels { result: "ok" })
        .inc();

    let (updates, updates_rx) = mpsc::unbounded_channel();
    let (shutdown, shutdown_rx) = watch::channel(false);
    let mut tasks = Vec::new();
    // Placements told to and heard from the other router replicas (`peers`).
    let peers = match peers::Peers::start(
        tables.clone(),
        index.clone(),
        metrics.clone(),
        shutdown_rx.clone(),
    )
    .await?
    {
        Some((peers, peer_tasks)) => {
            tasks.extend(peer_tasks);
            Some(peers)
        }
        None => None,
    };
    let decisions = Arc::new(decisions::DecisionLog::default());
    let mut flow_admin = None;
    let admission = match admission {
        Some(custom) => custom,
        None => {
            let flow = FlowControl::new(tables.current().config.flow.limiters, metrics.clone())?;
            tasks.push(tokio::spawn(
                flow.clone().run(tables.clone(), shutdown_rx.clone()),
            ));
            flow_admin = Some(flow.clone());
            Arc::new(flow)
        }
    };
    // The endpoint picker chooses with the proxy's own chooser: one index, one set of counters,
    // one decision log.
    let chooser = Arc::new(choice::Chooser::new(
        choice::Indexes {
            approx: index.clone(),
            precise,
            sessions: sessions.clone(),
            peers,
        },
        metrics.clone(),
        decisions.clone(),
    ));
    let picker_parts = endpoint_picker::Parts {
        tables: tables.clone(),
        metrics: metrics.clone(),
        chooser: chooser.clone(),
        admission: admission.clone(),
        tokenize: tokenize.clone(),
    };
    let api = api::stack(api::StackParts {
        tables: tables.clone(),
        metrics: metrics.clone(),
        index: index.clone(),
        chooser,
        discovery: discovery.clone(),
        admission,
        body_budget_bytes,
        stall_watch: stall_watch.clone(),
        tokenize,
    });
    let admin = admin::service(admin::AdminState {
        tables: tables.clone(),
        metrics: metrics.clone(),
        index,
        precise: precise_admin,
        sessions: sessions.clone(),
        replicas,
        discovery: discovery.clone(),
        draining: draining.clone(),
        token: admin_token,
        decisions,
        flow: flow_admin,
        started: std::time::Instant::now(),
    });
    tasks.extend([
        tokio::spawn(server::serve(
            api_listener,
            api,
            shutdown_rx.clone(),
            serve_options,
        )),
        tokio::spawn(server::serve(
            admin_listener,
            admin,
            shutdown_rx.clone(),
            admin_options,
        )),
        tokio::spawn(publisher.run(updates_rx, shutdown_rx.clone())),
        tokio::spawn(stall_watch.run(shutdown_rx.clone())),
    ]);
    let endpoint_picker_addr = picker_listener.as_ref().map(|(_, a)| *a);
    if let Some((listener, picker_addr)) = picker_listener {
        tracing::info!(%picker_addr, "endpoint picker (ext_proc) listening");
        tasks.push(tokio::spawn(endpoint_picker::serve(
            listener,
            picker_parts,
            picker_options,
            shutdown_rx.clone(),
        )));
    }
    if let Some(cluster) = options.kubernetes {
        tasks.push(tokio::spawn(kubernetes::run(
            cluster,
            updates.clone(),
            discovery.clone(),
            metrics.clone(),
            shutdown_rx.clone(),
        )));
    }
    if let Some(path) = options.watch {
        tasks.push(tokio::spawn(sources::reload::watch(
            path,
            options.reload_interval,
            bound,
            updates.clone(),
            metrics.clone(),
            shutdown_rx,
        )));
    }
    tracing::info!(%addr, %admin_addr, "warmpath-router listening");
    Ok(RouterHandle {
        addr,
        admin_addr,
        endpoint_picker_addr,
        tables,
        metrics,
        discovery,
        _updates: updates,
        shutdown,
        draining,
        accept_before_drain,
        tasks,
    })
}

/// Connections the admin listener takes at once.
const ADMIN_CONNECTIONS: usize = 256;
