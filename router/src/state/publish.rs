//! The one task that turns configuration changes into routing tables.
//!
//! Sources (the file watcher, the Kubernetes watch) send [`Update`]s; the [`Publisher`] owns the
//! last file configuration, the discovered pools and the replica registry, applies each update
//! (replicas added and removed, index entries of removed replicas forgotten, scrapers started and
//! stopped) and publishes the new [`Table`] on a watch channel. Requests read the channel and
//! keep the `Arc<Table>` they started with, so a change never alters the rules mid-request.

use super::index::SharedIndex;
use super::replica::{ReplicaRegistry, ReplicaState, Replicas};
use super::table::Table;
use crate::config::{Config, PoolConfig};
use crate::metrics::Metrics;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, watch};
use warmpath_routing::index::PrefixIndex;

/// A change for the publisher to apply.
#[derive(Debug)]
pub enum Update {
    /// The configuration file's contents (already validated). Boxed: a file is large and rare.
    File(Box<Config>),
    /// The pools found in the cluster (Kubernetes mode); routed beside the file's. `applied`,
    /// when given, is told once the table with them is published.
    Discovered {
        pools: Vec<PoolConfig>,
        applied: Option<oneshot::Sender<()>>,
    },
}

/// Where sources send their updates.
pub type Updates = mpsc::UnboundedSender<Update>;

/// The readers' end: the table as last published.
#[derive(Debug, Clone)]
pub struct TableReader(watch::Receiver<Arc<Table>>);

impl TableReader {
    /// The current table; callers keep this `Arc` for the life of a request.
    pub fn current(&self) -> Arc<Table> {
        self.0.borrow().clone()
    }

    /// Whether the publisher is gone (the router stopped).
    pub fn closed(&self) -> bool {
        self.0.has_changed().is_err()
    }
}

/// Starts a replica's scraper (which reads its settings from the tables) and returns the handle
/// that stops it. Given by the caller so that this module does not depend on how replicas are
/// scraped.
pub type StartScraper =
    Box<dyn Fn(Arc<ReplicaState>, TableReader) -> tokio::task::AbortHandle + Send>;

pub struct Publisher {
    file: Option<Config>,
    discovered: Vec<PoolConfig>,
    registry: ReplicaRegistry,
    index: SharedIndex,
    metrics: Arc<Metrics>,
    table: watch::Sender<Arc<Table>>,
    reader: TableReader,
    start_scraper: StartScraper,
}

impl Publisher {
    /// A publisher whose first table has no pools; apply the file's configuration next.
    pub fn new(
        base: &Config,
        index: SharedIndex,
        metrics: Arc<Metrics>,
        start_scraper: StartScraper,
    ) -> (Self, TableReader) {
        let registry = ReplicaRegistry::default();
        let empty = Arc::new(Config {
            pools: Vec::new(),
            ..base.clone()
        });
        let (tx, rx) = watch::channel(Arc::new(Table::build(empty, &registry, &metrics)));
        let reader = TableReader(rx);
        let publisher = Self {
            file: None,
            discovered: Vec::new(),
            registry,
            index,
            metrics,
            table: tx,
            reader: reader.clone(),
            start_scraper,
        };
        (publisher, reader)
    }

    /// Every replica known, for readers that are not on the request path.
    pub fn replicas(&self) -> Replicas {
        self.registry.view()
    }

    /// Apply one update and publish the resulting table. (The Kubernetes source sends a pool list
    /// only when it changed, so every update here is a change.)
    pub fn apply(&mut self, update: Update) {
        match update {
            Update::File(config) => self.file = Some(*config),
            Update::Discovered { pools, applied } => {
                self.discovered = pools;
                self.install_merged();
                if let Some(tx) = applied {
                    let _ = tx.send(());
                }
                return;
            }
        }
        self.install_merged();
    }

    fn install_merged(&mut self) {
        let Some(mut config) = self.file.clone() else {
            return;
        };
        config.pools.extend(self.discovered.iter().cloned());
        self.install(config);
    }

    /// Sync replicas, prune the index, start and stop scrapers, then publish the table.
    fn install(&mut self, config: Config) {
        let config = Arc::new(config);
        let change = self.registry.sync(&config);
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
        let table = Arc::new(Table::build(config, &self.registry, &self.metrics));
        self.table.send_replace(table);
        for r in change.added {
            let task = (self.start_scraper)(r.clone(), self.reader.clone());
            r.set_scrape_task(task);
        }
    }

    /// Apply updates until every source is gone or `shutdown` fires, then stop the scrapers.
    pub async fn run(
        mut self,
        mut updates: mpsc::UnboundedReceiver<Update>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        loop {
            tokio::select! {
                update = updates.recv() => match update {
                    Some(u) => self.apply(u),
                    None => break,
                },
                _ = shutdown.changed() => break,
            }
        }
        for r in self.registry.view().snapshot() {
            r.stop_scraping();
        }
    }
}
