//! The one task that turns configuration changes into routing tables.
//!
//! Sources (the file watcher, the Kubernetes watch) send [`Update`]s; the [`Publisher`] owns the
//! last file configuration, the discovered pools and tenants and the replica registry, applies
//! each update
//! (replicas added and removed, index entries of removed replicas forgotten, scrapers started and
//! stopped) and publishes the new [`Table`] on a watch channel. Requests read the channel and
//! keep the `Arc<Table>` they started with, so a change never alters the rules mid-request.

use super::index::SharedIndex;
use super::replica::{ReplicaRegistry, ReplicaState, Replicas};
use super::table::Table;
use crate::config::{Config, ObjectiveConfig, PoolConfig, TenantPolicyConfig, TenantsConfig};
use crate::metrics::Metrics;
use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, watch};
use warmpath_routing::index::PrefixIndex;

/// A change for the publisher to apply.
#[derive(Debug)]
pub enum Update {
    /// The configuration file's contents (already validated). Boxed: a file is large and rare.
    File(Box<Config>),
    /// The pools, tenants and objectives found in the cluster (Kubernetes mode); routed beside
    /// the file's (tenants and objectives after the file's, see [`merge_tenants`] and
    /// [`merge_objectives`]). `applied`, when given, is told once the table with them is
    /// published.
    Discovered {
        pools: Vec<PoolConfig>,
        tenants: Vec<TenantPolicyConfig>,
        objectives: Vec<ObjectiveConfig>,
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
    discovered_tenants: Vec<TenantPolicyConfig>,
    discovered_objectives: Vec<ObjectiveConfig>,
    /// The discovered tenants and objectives left out at the last rebuild, as logged.
    unused: BTreeSet<String>,
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
            discovered_tenants: Vec::new(),
            discovered_objectives: Vec::new(),
            unused: BTreeSet::new(),
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

    /// Apply one update and publish the resulting table. (The Kubernetes source sends its lists
    /// only when the pools or the tenants changed, so every update here is a change.)
    pub fn apply(&mut self, update: Update) {
        match update {
            Update::File(config) => self.file = Some(*config),
            Update::Discovered {
                pools,
                tenants,
                objectives,
                applied,
            } => {
                self.discovered = pools;
                self.discovered_tenants = tenants;
                self.discovered_objectives = objectives;
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
        let mut unused: BTreeSet<String> =
            merge_tenants(&mut config.tenants, &self.discovered_tenants)
                .into_iter()
                .map(|skipped| {
                    format!(
                        "TenantPolicy {} not used: {}",
                        skipped.tenant, skipped.conflict
                    )
                })
                .collect();
        unused.extend(
            merge_objectives(&mut config.objectives, &self.discovered_objectives)
                .into_iter()
                .map(|name| {
                    format!(
                        "InferenceObjective {name} not used: the configuration file names it for the same models (or the limit of {} objectives is reached)",
                        crate::config::MAX_OBJECTIVES
                    )
                }),
        );
        // Once per conflict, not on every rebuild (every pod that turns ready rebuilds).
        for message in unused.difference(&self.unused) {
            tracing::warn!("{message}");
        }
        self.unused = unused;
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
            index.set_limits(per_replica_bytes(&config.index, self.registry.len()));
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

/// What a discovered tenant has in common with one already known, which keeps it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conflict {
    Name,
    Header,
    ApiKey,
}

impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Conflict::Name => "another tenant (in the file or an earlier TenantPolicy) has its name",
            Conflict::Header => {
                "another tenant (in the file or an earlier TenantPolicy) is named by its header value"
            }
            // The key itself is never printed.
            Conflict::ApiKey => {
                "one of its API keys belongs to another tenant (in the file or an earlier TenantPolicy)"
            }
        })
    }
}

/// A discovered tenant left out, by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedTenant {
    pub tenant: String,
    pub conflict: Conflict,
}

/// Append the discovered objectives (each for some models) to the file's, the file winning:
/// a discovered objective keeps only the models for which neither the file nor an earlier
/// discovered one gives its name (a request's priority must not depend on the order things were
/// read), and is left out when none remain; the names left out entirely are returned. Beyond
/// [`crate::config::MAX_OBJECTIVES`] the rest are left out too.
pub fn merge_objectives(
    into: &mut Vec<ObjectiveConfig>,
    discovered: &[ObjectiveConfig],
) -> Vec<String> {
    let mut every: HashSet<String> = HashSet::new();
    let mut taken: HashSet<(String, String)> = HashSet::new();
    for o in into.iter() {
        if o.models.is_empty() {
            every.insert(o.name.clone());
        }
        taken.extend(o.models.iter().map(|m| (o.name.clone(), m.clone())));
    }
    let mut skipped = Vec::new();
    for o in discovered {
        let models: Vec<String> = if every.contains(&o.name) {
            Vec::new()
        } else {
            o.models
                .iter()
                .filter(|m| taken.insert((o.name.clone(), (*m).clone())))
                .cloned()
                .collect()
        };
        if models.is_empty() || into.len() >= crate::config::MAX_OBJECTIVES {
            skipped.push(o.name.clone());
            continue;
        }
        into.push(ObjectiveConfig {
            models,
            ..o.clone()
        });
    }
    skipped
}

/// Append the discovered tenants to the file's, in order, leaving out each one whose name,
/// header value or any API key is already taken: by the file (which the operator wrote and
/// which was validated as a whole) or by an earlier discovered tenant. The same rules as the
/// file's own validation, so the merged list is one a file could have said; a key shared by
/// two tenants would make the request's tenant depend on which was read first.
pub fn merge_tenants(
    into: &mut TenantsConfig,
    discovered: &[TenantPolicyConfig],
) -> Vec<SkippedTenant> {
    if discovered.is_empty() {
        return Vec::new();
    }
    let mut names: HashSet<String> = HashSet::from([into.default.name.clone()]);
    let mut headers: HashSet<String> = HashSet::new();
    let mut keys: HashSet<crate::config::ApiKey> = HashSet::new();
    for p in &into.policies {
        names.insert(p.name.clone());
        headers.insert(p.header_value().to_owned());
        keys.extend(p.api_keys.iter().copied());
    }
    let mut skipped = Vec::new();
    for t in discovered {
        let conflict = if names.contains(&t.name) {
            Some(Conflict::Name)
        } else if headers.contains(t.header_value()) {
            Some(Conflict::Header)
        } else if t.api_keys.iter().any(|k| keys.contains(k)) {
            Some(Conflict::ApiKey)
        } else {
            None
        };
        if let Some(conflict) = conflict {
            skipped.push(SkippedTenant {
                tenant: t.name.clone(),
                conflict,
            });
            continue;
        }
        names.insert(t.name.clone());
        headers.insert(t.header_value().to_owned());
        keys.extend(t.api_keys.iter().copied());
        into.policies.push(t.clone());
    }
    skipped
}

/// Each replica's share of the approximate index: its own bound, or an equal share of the total
/// when that is less (at least the 4 KiB a replica's bound may be).
fn per_replica_bytes(index: &crate::config::IndexConfig, replicas: usize) -> usize {
    index
        .max_bytes_per_replica
        .min((index.max_bytes_total / replicas.max(1)).max(4096))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ApiKey;
    use crate::state::index::RouterIndex;

    fn tenant(name: &str, header: Option<&str>, keys: &[&str]) -> TenantPolicyConfig {
        TenantPolicyConfig {
            name: name.into(),
            header: header.map(str::to_owned),
            api_keys: keys.iter().map(|k| ApiKey::new(k)).collect(),
            ..Default::default()
        }
    }

    fn names(t: &TenantsConfig) -> Vec<&str> {
        t.policies.iter().map(|p| p.name.as_str()).collect()
    }

    #[test]
    fn discovered_objectives_yield_to_the_files_per_model() {
        let o = |name: &str, priority, models: &[&str]| ObjectiveConfig {
            name: name.to_owned(),
            priority,
            models: models.iter().map(|m| m.to_string()).collect(),
        };
        let mut file = vec![o("chat", 1, &["llama"]), o("batch", -1, &[])];
        let skipped = merge_objectives(
            &mut file,
            &[
                o("chat", 9, &["llama", "qwen"]),
                o("batch", 5, &["qwen"]),
                o("chat", 7, &["qwen"]),
                o("new", 3, &["qwen"]),
            ],
        );
        assert_eq!(skipped, ["batch", "chat"]);
        assert_eq!(
            file,
            [
                o("chat", 1, &["llama"]),
                o("batch", -1, &[]),
                o("chat", 9, &["qwen"]),
                o("new", 3, &["qwen"]),
            ]
        );
        let c = Config::parse("pools: []\n").unwrap();
        let mut merged = c.clone();
        merged.objectives = file;
        assert!(
            Config::parse(&format!(
                "pools: []\nobjectives:\n{}",
                merged
                    .objectives
                    .iter()
                    .map(|o| format!(
                        "  - {{ name: {}, priority: {}, models: [{}] }}\n",
                        o.name,
                        o.priority,
                        o.models.join(", ")
                    ))
                    .collect::<String>()
            ))
            .is_ok(),
            "the merged list is one a file could have said"
        );
    }

    #[test]
    fn discovered_tenants_follow_the_files_in_order() {
        let mut t = TenantsConfig {
            policies: vec![tenant("file-a", None, &["sk-file-a-key"])],
            ..Default::default()
        };
        let skipped = merge_tenants(
            &mut t,
            &[
                tenant("k8s-b", Some("bee"), &["sk-k8s-b-key"]),
                tenant("k8s-a", None, &[]),
            ],
        );
        assert!(skipped.is_empty(), "{skipped:?}");
        assert_eq!(names(&t), ["file-a", "k8s-b", "k8s-a"]);
        assert_eq!(t.policies[1].header_value(), "bee");
        assert_eq!(t.policies[1].api_keys, ["sk-k8s-b-key"]);
        // Nothing discovered: the file's list as it was.
        let before = t.clone();
        assert!(merge_tenants(&mut t, &[]).is_empty());
        assert_eq!(t, before);
    }

    #[test]
    fn a_tenant_whose_name_header_or_key_is_taken_is_skipped() {
        let mut t = TenantsConfig {
            policies: vec![tenant("acme", Some("acme-corp"), &["sk-acme-file-1"])],
            ..Default::default()
        };
        let skipped = merge_tenants(
            &mut t,
            &[
                // The file's name, and the default tenant's.
                tenant("acme", None, &[]),
                tenant("default", None, &[]),
                // The file's header value, given as a header or as a name.
                tenant("other", Some("acme-corp"), &[]),
                tenant("acme-corp", None, &[]),
                // One of the file's keys among new ones.
                tenant("thief", None, &["sk-thief-own-1", "sk-acme-file-1"]),
                // Fine: taken by nothing.
                tenant("first", None, &["sk-first-key-1"]),
                // Conflicts with an earlier discovered tenant, not the file.
                tenant("second", Some("first"), &[]),
                tenant("third", None, &["sk-first-key-1"]),
                tenant("first", Some("unique"), &[]),
                // A skipped tenant takes nothing: its name, header and keys stay free.
                tenant("thief", None, &["sk-thief-own-1"]),
            ],
        );
        let got: Vec<(&str, Conflict)> = skipped
            .iter()
            .map(|s| (s.tenant.as_str(), s.conflict))
            .collect();
        assert_eq!(
            got,
            [
                ("acme", Conflict::Name),
                ("default", Conflict::Name),
                ("other", Conflict::Header),
                ("acme-corp", Conflict::Header),
                ("thief", Conflict::ApiKey),
                ("second", Conflict::Header),
                ("third", Conflict::ApiKey),
                ("first", Conflict::Name),
            ]
        );
        assert_eq!(names(&t), ["acme", "first", "thief"]);
        assert_eq!(t.policies[2].api_keys, ["sk-thief-own-1"]);
        for s in &skipped {
            assert!(!s.conflict.to_string().contains("sk-"), "{}", s.conflict);
        }
    }

    fn publisher(config: &Config) -> (Publisher, TableReader) {
        let index: SharedIndex =
            Arc::new(parking_lot::Mutex::new(RouterIndex::approximate(1 << 20)));
        let start_scraper: StartScraper = Box::new(|_, _| tokio::spawn(async {}).abort_handle());
        let (mut p, reader) =
            Publisher::new(config, index, Arc::new(Metrics::new()), start_scraper);
        p.apply(Update::File(Box::new(config.clone())));
        (p, reader)
    }

    fn discovered(tenants: Vec<TenantPolicyConfig>) -> Update {
        Update::Discovered {
            pools: Vec::new(),
            tenants,
            objectives: Vec::new(),
            applied: None,
        }
    }

    #[tokio::test]
    async fn discovered_tenants_reach_the_table_and_survive_a_file_reload() {
        let file = Config::parse(
            "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\npools: []\n\
             tenants:\n  policies:\n    - name: file-tenant\n      api_keys: [sk-file-key-1]\n",
        )
        .unwrap();
        let (mut p, reader) = publisher(&file);
        let policies = |r: &TableReader| -> Vec<(String, Vec<ApiKey>)> {
            r.current()
                .config
                .tenants
                .policies
                .iter()
                .map(|t| (t.name.clone(), t.api_keys.clone()))
                .collect()
        };
        assert_eq!(
            policies(&reader),
            [("file-tenant".to_owned(), vec![ApiKey::new("sk-file-key-1")])]
        );

        // Only the tenants change (no pools at all): still a new table.
        let (tx, rx) = oneshot::channel();
        p.apply(Update::Discovered {
            pools: Vec::new(),
            tenants: vec![tenant("acme", None, &["sk-acme-first-key"])],
            objectives: Vec::new(),
            applied: Some(tx),
        });
        rx.await.expect("told once applied");
        assert_eq!(
            policies(&reader),
            [
                ("file-tenant".to_owned(), vec![ApiKey::new("sk-file-key-1")]),
                ("acme".to_owned(), vec![ApiKey::new("sk-acme-first-key")]),
            ]
        );

        // A rotated key replaces the old one.
        p.apply(discovered(vec![tenant(
            "acme",
            None,
            &["sk-acme-second-key"],
        )]));
        assert_eq!(policies(&reader)[1].1, ["sk-acme-second-key"]);

        // The file is re-read: its tenants first again, the discovered ones kept.
        p.apply(Update::File(Box::new(file.clone())));
        assert_eq!(policies(&reader).len(), 2);
        assert_eq!(policies(&reader)[1].0, "acme");

        // A conflicting tenant is left out of the table; deleting the policy empties the list.
        p.apply(discovered(vec![
            tenant("copycat", None, &["sk-file-key-1"]),
            tenant("acme", None, &["sk-acme-second-key"]),
        ]));
        let names: Vec<String> = policies(&reader).into_iter().map(|t| t.0).collect();
        assert_eq!(names, ["file-tenant", "acme"]);
        p.apply(discovered(Vec::new()));
        assert_eq!(policies(&reader).len(), 1);
    }
}
