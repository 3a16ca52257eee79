//! warmpath's data plane: an OpenAI-compatible proxy that sends each request to the replica
//! that should answer it fastest (cache-warm, not overloaded), from a static configuration.
//!
//! The binary (`warmpath-router --config FILE`) is a thin wrapper around [`start`], which
//! integration tests call in-process on port 0. Request path: [`server`] accepts →
//! [`api`] reads and parses ([`request`]) → [`admission`] → [`route`] (prefix index +
//! scheduler from `warmpath-routing`) → [`pd`] → [`proxy`] forwards over [`upstream`]'s pooled
//! connections and streams the answer back.
//! Around it: [`scrape`] and [`health`] keep replica state fresh, [`reload`] swaps the
//! [`table`] when the file changes, [`kubernetes`] when the cluster's InferencePools and
//! InferenceReplicas change, [`admin`] serves metrics and probes.
#![forbid(unsafe_code)]

pub mod admin;
pub mod admission;
pub mod api;
pub mod config;
pub mod errors;
pub mod health;
pub mod index;
pub mod kubernetes;
pub mod metrics;
pub mod pd;
pub mod proxy;
pub mod reload;
pub mod replica;
pub mod request;
pub mod route;
pub mod scrape;
pub mod server;
pub mod table;
pub mod upstream;

use crate::admission::{Admission, AdmitAll};
use crate::config::Config;
use crate::errors::StartError;
use crate::index::RouterIndex;
use crate::metrics::{Metrics, ResultLabels};
use crate::pd::{NoSplit, PdPolicy};
use crate::replica::ReplicaRegistry;
use crate::table::Table;
use parking_lot::{Mutex, RwLock};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use warmpath_routing::index::PrefixIndex;

pub use config::Config as RouterConfig;
pub use errors::{ApiError, ConfigError};

/// State shared by every connection and background task.
pub struct Shared {
    table: RwLock<Arc<Table>>,
    pub(crate) registry: Mutex<ReplicaRegistry>,
    pub(crate) index: Mutex<RouterIndex>,
    pub metrics: Metrics,
    pub(crate) admission: Box<dyn Admission>,
    pub(crate) pd: Box<dyn PdPolicy>,
    seed: AtomicU64,
    /// The configuration file as last applied; its pools are routed beside discovered ones.
    file_config: Mutex<Option<Config>>,
    /// Pools found in the cluster (Kubernetes mode).
    discovered: Mutex<Vec<config::PoolConfig>>,
    /// Serializes table installs (file reloads and cluster changes race otherwise).
    apply_lock: Mutex<()>,
    /// False in Kubernetes mode until the first full list has been applied.
    discovery_synced: AtomicBool,
    /// The last error of a Kubernetes watch, for `/readyz` while not yet synced.
    discovery_error: Mutex<Option<String>>,
    /// Lets scrape tasks started on reload find their way back here without a cycle.
    this: std::sync::Weak<Shared>,
}

impl Shared {
    /// The current routing table; callers keep this `Arc` for the life of a request.
    pub fn table(&self) -> Arc<Table> {
        self.table.read().clone()
    }

    /// A per-request random value for the scheduler's tie-breaks (splitmix64 of a counter:
    /// cheap, and distinct across requests).
    pub(crate) fn next_seed(&self) -> u64 {
        let mut z = self
            .seed
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Install a (validated) configuration file's contents. In Kubernetes mode the pools found
    /// in the cluster stay routed beside the file's.
    pub fn apply(&self, config: Config) {
        let _serial = self.apply_lock.lock();
        *self.file_config.lock() = Some(config);
        self.install_merged();
    }

    /// Replace the pools found in the cluster; returns whether the table changed.
    pub(crate) fn set_discovered(&self, pools: Vec<config::PoolConfig>) -> bool {
        let _serial = self.apply_lock.lock();
        {
            let mut d = self.discovered.lock();
            if *d == pools {
                return false;
            }
            *d = pools;
        }
        self.install_merged();
        true
    }

    /// Whether routing may start: always in static mode; in Kubernetes mode once the first
    /// full list of the watched resources has been applied.
    pub fn discovery_synced(&self) -> bool {
        self.discovery_synced.load(Ordering::Acquire)
    }

    /// The last watch error seen (cleared once synced): why the router is not ready yet.
    pub fn discovery_error(&self) -> Option<String> {
        self.discovery_error.lock().clone()
    }

    pub(crate) fn set_discovery_error(&self, error: Option<String>) {
        *self.discovery_error.lock() = error;
    }

    pub(crate) fn mark_discovery_synced(&self) {
        self.discovery_synced.store(true, Ordering::Release);
    }

    fn install_merged(&self) {
        let Some(mut config) = self.file_config.lock().clone() else {
            return;
        };
        config.pools.extend(self.discovered.lock().iter().cloned());
        self.install(config);
    }

    /// Sync replicas, prune the index, start and stop scrapers, then swap the table. Requests
    /// already running keep the previous table.
    fn install(&self, config: Config) {
        let config = Arc::new(config);
        let old = self.table.read().clone();
        let upstream = if old.config.timeouts == config.timeouts {
            old.upstream.clone()
        } else {
            proxy::build_client(&config.timeouts)
        };
        let mut registry = self.registry.lock();
        let change = registry.sync(&config);
        {
            let mut index = self.index.lock();
            for r in &change.removed {
                index.remove_replica(r.id);
            }
            index.set_limits(config.index.max_bytes_per_replica);
        }
        for r in &change.removed {
            self.metrics.remove_replica(&r.name);
        }
        let table = Arc::new(Table::build(config, &registry, upstream, &self.metrics));
        *self.table.write() = table;
        for r in change.added {
            let task = tokio::spawn(scrape::run(self.this.clone(), r.clone()));
            r.set_scrape_task(task.abort_handle());
        }
    }

    fn stop_background(&self) {
        for r in self.registry.lock().all() {
            r.stop_scraping();
        }
    }
}

/// How to run the router besides its configuration.
#[derive(Debug, Clone)]
pub struct Options {
    /// Watch this file and apply its changes (static mode: the `--config` file).
    pub watch: Option<PathBuf>,
    pub reload_interval: Duration,
    /// How long shutdown waits for open connections to finish.
    pub drain: Duration,
    /// Kubernetes mode: also route to the InferencePools and InferenceReplicas of the cluster.
    pub kubernetes: Option<kubernetes::Discovery>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            watch: None,
            reload_interval: Duration::from_secs(1),
            drain: Duration::from_secs(10),
            kubernetes: None,
        }
    }
}

/// A running router.
pub struct RouterHandle {
    pub addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub shared: Arc<Shared>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl RouterHandle {
    /// Stop accepting, let open connections finish (up to the drain time), stop background work.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
        self.shared.stop_background();
    }
}

/// Start the router: bind both listeners, start scrapers and the reload watcher.
pub async fn start(config: Config, options: Options) -> Result<RouterHandle, StartError> {
    start_with(config, options, Box::new(AdmitAll), Box::new(NoSplit)).await
}

/// [`start`] with a custom admission step and P/D policy.
pub async fn start_with(
    config: Config,
    options: Options,
    admission: Box<dyn Admission>,
    pd: Box<dyn PdPolicy>,
) -> Result<RouterHandle, StartError> {
    let bind = |addr: SocketAddr| async move {
        TcpListener::bind(addr)
            .await
            .map_err(|source| StartError::Bind { addr, source })
    };
    if config.pools.is_empty() && options.kubernetes.is_none() {
        tracing::warn!(
            "the configuration has no pools: every model answers 404 and /readyz stays 503"
        );
    }
    let api_listener = bind(config.listen).await?;
    let admin_listener = bind(config.admin).await?;
    let addr = api_listener
        .local_addr()
        .map_err(|source| StartError::Bind {
            addr: config.listen,
            source,
        })?;
    let admin_addr = admin_listener
        .local_addr()
        .map_err(|source| StartError::Bind {
            addr: config.admin,
            source,
        })?;

    let empty = Arc::new(Config {
        pools: Vec::new(),
        ..config.clone()
    });
    let upstream = proxy::build_client(&config.timeouts);
    let metrics = Metrics::new();
    let shared = Arc::new_cyclic(|this| Shared {
        table: RwLock::new(Arc::new(Table::build(
            empty,
            &ReplicaRegistry::default(),
            upstream,
            &metrics,
        ))),
        registry: Mutex::new(ReplicaRegistry::default()),
        index: Mutex::new(RouterIndex::approximate(config.index.max_bytes_per_replica)),
        metrics,
        admission,
        pd,
        seed: AtomicU64::new(rand::random()),
        file_config: Mutex::new(None),
        discovered: Mutex::new(Vec::new()),
        apply_lock: Mutex::new(()),
        discovery_synced: AtomicBool::new(options.kubernetes.is_none()),
        discovery_error: Mutex::new(None),
        this: this.clone(),
    });
    shared.apply(config);
    shared
        .metrics
        .config_reloads
        .get_or_create(&ResultLabels { result: "ok" })
        .inc();

    let (tx, rx) = watch::channel(false);
    let mut tasks = vec![
        tokio::spawn(server::serve(
            api_listener,
            shared.clone(),
            rx.clone(),
            server::Listener::Api,
            options.drain,
        )),
        tokio::spawn(server::serve(
            admin_listener,
            shared.clone(),
            rx.clone(),
            server::Listener::Admin,
            options.drain,
        )),
    ];
    if let Some(discovery) = options.kubernetes {
        tasks.push(tokio::spawn(kubernetes::run(
            Arc::downgrade(&shared),
            discovery,
            rx.clone(),
        )));
    }
    if let Some(path) = options.watch {
        tasks.push(tokio::spawn(reload::watch(
            Arc::downgrade(&shared),
            path,
            options.reload_interval,
            rx,
        )));
    }
    tracing::info!(%addr, %admin_addr, "warmpath-router listening");
    Ok(RouterHandle {
        addr,
        admin_addr,
        shared,
        shutdown: tx,
        tasks,
    })
}
