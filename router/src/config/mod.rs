//! The static configuration file (`warmpath-router --config FILE`): its YAML types, defaults and
//! validation.
//!
//! Every error names the field (as a path like `pools[1].replicas[0].url`) and the line where it
//! appears, whether serde rejected it (unknown field, wrong type) or validation did (bad URL,
//! duplicate name), because a router that refuses to start should say exactly why.
//!
//! The routing core's settings (`scheduling`, `predictor`, `index.block_bytes`) are the core's
//! own types and rules: this file deserializes them and reports the core's
//! [`warmpath_routing::ConfigError`] at the field it names, so the router can never accept a
//! value the core would neutralise, nor refuse one the core documents as valid.

mod api_key;
mod endpoint_picker;
mod explain;
mod flow;
mod kv_events;
mod locate;
mod objectives;
mod peers;
mod sessions;
mod tenants;

use crate::errors::ConfigError;
use serde::Deserialize;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
use warmpath_routing::predict::TtftPrior;
use warmpath_routing::prompt::BlockHasher;
use warmpath_routing::scheduler::SchedulerConfig;

pub use api_key::{ApiKey, KeyDigest, KeyShape};
pub use endpoint_picker::{EndpointPickerConfig, FailureMode};
pub use explain::{ExplainConfig, MAX_RECENT};
pub use flow::{Fairness, FlowConfig, SaturationConfig};
pub use kv_events::KvEventsConfig;
pub use locate::FieldPath;
pub use objectives::{ObjectiveConfig, MAX_OBJECTIVES};
pub use peers::PeersConfig;
pub use sessions::SessionsConfig;
pub use tenants::{is_token, TenantPolicyConfig, TenantsConfig};

/// The whole file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where clients send OpenAI API requests.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    #[serde(default = "default_admin")]
    pub admin: SocketAddr,
    /// A file holding a token (at least 16 bytes) that the admin listener's `/metrics` then
    /// asks for as `Authorization: Bearer <token>` (read at start). `/healthz` and `/readyz`
    /// stay open: kubelets probe them without credentials, and they say nothing secret.
    #[serde(default)]
    pub admin_token_file: Option<std::path::PathBuf>,
    /// TLS on the API listener (`listen`); absent: plain HTTP/1.1 and h2c.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    pub pools: Vec<PoolConfig>,
    #[serde(default)]
    pub scheduling: SchedulerConfig,
    /// Starting beliefs of the per-replica TTFT model, before it has observed anything: the
    /// core's [`TtftPrior`] as it is, checked by [`TtftPrior::validate`].
    #[serde(default)]
    pub predictor: TtftPrior,
    #[serde(default)]
    pub index: IndexConfig,
    #[serde(default)]
    pub limits: LimitsConfig,
    #[serde(default)]
    pub timeouts: TimeoutsConfig,
    #[serde(default)]
    pub scrape: ScrapeConfig,
    #[serde(default)]
    pub health: HealthConfig,
    #[serde(default)]
    pub response_headers: ResponseHeadersConfig,
    /// Decision explanations: the `x-warmpath-explain` header, the recent decisions kept.
    #[serde(default)]
    pub explain: ExplainConfig,
    /// The prefill/decode split (used when a model has pools with role `prefill`).
    #[serde(default)]
    pub pd: PdConfig,
    /// Who requests belong to (API keys, trusted tenant headers) and each tenant's settings.
    #[serde(default)]
    pub tenants: TenantsConfig,
    /// Request objectives (llm-d's InferenceObjectives): a request naming one in
    /// `x-llm-d-inference-objective` is queued in its priority band.
    #[serde(default)]
    pub objectives: Vec<ObjectiveConfig>,
    /// Per-tenant queueing when a pool is saturated.
    #[serde(default)]
    pub flow: FlowConfig,
    /// Session affinity for conversations and agents.
    #[serde(default)]
    pub sessions: SessionsConfig,
    /// Leaving on SIGTERM (read at start).
    #[serde(default)]
    pub shutdown: ShutdownConfig,
    /// Envoy's ext_proc protocol for a Gateway (GIE's endpoint picker); off unless it listens.
    #[serde(default)]
    pub endpoint_picker: EndpointPickerConfig,
    /// The other replicas of this router: each tells the others where it sent every prompt, so
    /// that they follow its placements before the engines report them (read at start).
    #[serde(default)]
    pub peers: PeersConfig,
}

/// The settings a running router reads only at start (its listeners, their TLS and auth, how it
/// leaves, its session key, the bounds its long-lived structures were built with): a reload
/// that changes them is applied otherwise, with a warning naming them.
#[derive(Debug, Clone, PartialEq)]
pub struct StartOnly(Vec<(&'static str, String)>);

impl StartOnly {
    /// The settings that differ between `self` (what the router started with) and `now`.
    pub fn changed(&self, now: &StartOnly) -> Vec<&'static str> {
        self.0
            .iter()
            .zip(&now.0)
            .filter(|(a, b)| a.1 != b.1)
            .map(|(a, _)| a.0)
            .collect()
    }
}

impl Config {
    pub fn start_only(&self) -> StartOnly {
        let v = |name: &'static str, value: &dyn std::fmt::Debug| (name, format!("{value:?}"));
        let (l, t, i, s) = (&self.limits, &self.timeouts, &self.index, &self.sessions);
        StartOnly(vec![
            v("listen", &self.listen),
            v("admin", &self.admin),
            v("tls", &self.tls),
            v("admin_token_file", &self.admin_token_file),
            v("shutdown", &self.shutdown),
            v("sessions.key_file", &s.key_file),
            v("sessions.max_sessions", &s.max_sessions),
            v(
                "sessions.max_sessions_per_client",
                &s.max_sessions_per_client,
            ),
            v("sessions.idle_ttl_s", &s.idle_ttl_s),
            v("limits.max_connections", &l.max_connections),
            v("limits.max_buffered_body_bytes", &l.max_buffered_body_bytes),
            // The connection guards' (request heads, first bytes, TLS handshakes); body reads
            // take the reloaded value.
            v("timeouts.client_ms (connection guards)", &t.client_ms),
            v("timeouts.write_stall_ms", &t.write_stall_ms),
            v(
                "index.precise_max_blocks_per_replica",
                &i.precise_max_blocks_per_replica,
            ),
            v(
                "index.precise_max_blocks_total",
                &i.precise_max_blocks_total,
            ),
            v("index.pending_max_blocks", &i.pending_max_blocks),
            v("index.pending_ttl_ms", &i.pending_ttl_ms),
            v("index.pending_grace_ms", &i.pending_grace_ms),
            v("flow.limiters.max_tenants", &self.flow.limiters.max_tenants),
            v("endpoint_picker.listen", &self.endpoint_picker.listen),
            v(
                "endpoint_picker.token_file",
                &self.endpoint_picker.token_file,
            ),
            v("peers", &self.peers),
            v(
                "endpoint_picker.max_streams",
                &self.endpoint_picker.max_streams,
            ),
        ])
    }
}

/// A certificate chain and its private key, PEM files (a `kubernetes.io/tls` Secret's
/// `tls.crt` and `tls.key`), read at start and again whenever they change.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    pub cert_file: std::path::PathBuf,
    pub key_file: std::path::PathBuf,
}

/// How the router leaves on SIGTERM: readiness fails at once; new connections are still
/// accepted for `accept_ms` (load balancers and Kubernetes endpoints take a moment to stop
/// sending); then open requests, streams too, have `drain_ms` to finish. The chart's
/// `terminationGracePeriodSeconds` must cover both.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ShutdownConfig {
    pub accept_ms: u64,
    pub drain_ms: u64,
}

impl Default for ShutdownConfig {
    fn default() -> Self {
        Self {
            accept_ms: 5_000,
            drain_ms: 45_000,
        }
    }
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}
fn default_admin() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9090))
}

/// Replicas that serve the same models the same way.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolConfig {
    pub name: String,
    pub models: Vec<String>,
    #[serde(default)]
    pub role: Role,
    #[serde(default)]
    pub engine: Engine,
    /// Path of the engine's Prometheus endpoint; `null` turns scraping off for this pool (its
    /// replicas are then ready unless passive health checks eject them).
    #[serde(default = "default_metrics_path")]
    pub metrics_path: Option<String>,
    /// Port of the engine's Prometheus endpoint when it is not the serving port.
    #[serde(default)]
    pub metrics_port: Option<u16>,
    /// Route from the engines' KV-cache events (precise prefix matching).
    #[serde(default)]
    pub kv_events: Option<KvEventsConfig>,
    /// The `models` that are LoRA adapters (vLLM `--lora-modules NAME=PATH`, or loaded at run
    /// time): an engine caches an adapter's blocks apart from the base model's, so the router
    /// keys them apart too. With `kv_events`, adapters the engines' events name are learned
    /// without this; listing them makes the first requests exact as well.
    #[serde(default)]
    pub lora_adapters: Vec<String>,
    /// This pool's weights of the `prefix` policy, instead of `scheduling.weights`.
    #[serde(default)]
    pub weights: Option<warmpath_routing::scheduler::Weights>,
    /// Endpoint-picker mode: what the picker does with this pool's requests it cannot route,
    /// instead of `endpoint_picker.failure_mode` (a GIE pool's `endpointPickerRef.failureMode`
    /// arrives here).
    #[serde(default)]
    pub failure_mode: Option<FailureMode>,
    pub replicas: Vec<ReplicaConfig>,
}

impl Config {
    /// The picker's failure mode for requests for `model`: the pools serving it decide when any
    /// says (`closed` if any says `closed`), else `endpoint_picker.failure_mode`.
    pub fn failure_mode_for(&self, model: &str) -> FailureMode {
        let said = self
            .pools
            .iter()
            .filter(|p| p.models.iter().any(|m| m == model))
            .filter_map(|p| p.failure_mode);
        said.reduce(|a, b| {
            if a == FailureMode::Closed || b == FailureMode::Closed {
                FailureMode::Closed
            } else {
                FailureMode::Open
            }
        })
        .unwrap_or(self.endpoint_picker.failure_mode)
    }
}

fn default_metrics_path() -> Option<String> {
    Some("/metrics".to_owned())
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicaConfig {
    /// Unique across the file: the replica's identity in metrics, headers and the prefix index.
    pub name: String,
    /// `http://host:port` of the engine's OpenAI-compatible server.
    pub url: String,
    /// SGLang P/D: this prefill server's bootstrap port, when not `pd.bootstrap_port`.
    #[serde(default)]
    pub bootstrap_port: Option<u16>,
    /// Where this replica's engine publishes KV events, when not the pool's
    /// `kv_events.endpoint` (e.g. `tcp://10.0.0.7:5557`).
    #[serde(default)]
    pub kv_events_endpoint: Option<String>,
    /// This replica's KV-event replay endpoint, when not the pool's.
    #[serde(default)]
    pub kv_events_replay_endpoint: Option<String>,
}

/// What a pool does in a prefill/decode split. `both` and `decode` pools answer requests;
/// `prefill` pools only compute prompts for them (see [`PdConfig`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Prefill,
    Decode,
    #[default]
    Both,
}

/// Which metric names the scraper reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Engine {
    #[default]
    Vllm,
    Sglang,
}

/// How a split request's KV cache gets from the prefill replica to the decode replica: the
/// protocol the engines speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Connector {
    /// vLLM's NIXL connector, as llm-d's sidecar drives it: a one-token prefill request whose
    /// answer's `kv_transfer_params` go into the decode request.
    #[default]
    Nixl,
    /// SGLang's: one body with `bootstrap_host`/`bootstrap_port`/`bootstrap_room`, sent to both
    /// at once.
    Sglang,
    /// The decode replicas run a P/D sidecar (`warmpath-router sidecar`, or llm-d's routing
    /// sidecar): the request goes to the decode replica with `x-prefiller-host-port` naming the
    /// chosen prefill replica, and the sidecar runs both legs next to its engine.
    Sidecar,
}

/// What happens to a split request whose prefill could not be done on any prefill replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PrefillFailure {
    /// The decode replica prefills the prompt itself (slower, but answered).
    #[default]
    Decode,
    /// The client gets the error (502).
    Fail,
}

/// The prefill/decode split. A request for a model with `prefill` pools is split when the
/// part of its prompt that the chosen decode replica does not hold (by the prefix index) is at
/// least `threshold_tokens`; otherwise the decode replica serves all of it.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PdConfig {
    /// Uncached prompt tokens (on the chosen decode replica) from which a request is split.
    /// Below it the KV transfer and the second hop cost more than the prefill saves: in
    /// `bench/pd.sh` (bench/results-pd/), splitting 384-token prompts raised TTFT p90 from 48.9
    /// to 56.6 ms against not splitting them, hence 1024 and not 256 or 512.
    pub threshold_tokens: u32,
    pub connector: Connector,
    /// Prefill replicas tried per request; the next one only after a refused connection or a
    /// 502/503/504 answer (nothing was computed).
    pub prefill_attempts: u32,
    pub on_prefill_failure: PrefillFailure,
    /// SGLang: the prefill servers' bootstrap port (SGLang's default 8998), unless a replica
    /// names its own.
    pub bootstrap_port: u16,
    /// The longest a prefill leg may take, answer included; then it counts as failed (and
    /// `on_prefill_failure` applies) instead of waiting for the engine's own timeout.
    pub prefill_timeout_ms: u64,
}

impl Default for PdConfig {
    fn default() -> Self {
        Self {
            threshold_tokens: 1024,
            connector: Connector::Nixl,
            prefill_attempts: 2,
            on_prefill_failure: PrefillFailure::Decode,
            bootstrap_port: 8998,
            prefill_timeout_ms: 60_000,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IndexConfig {
    /// Bytes of canonical prompt per hashed block (about 4 bytes per engine token); the range
    /// is the core's ([`BlockHasher::try_new`]).
    pub block_bytes: usize,
    /// Memory bound of the approximate prefix index per replica.
    pub max_bytes_per_replica: usize,
    /// …and for all replicas together: with many replicas each gets an equal share of this
    /// when that is less (never under 4 KiB).
    pub max_bytes_total: usize,
    /// Engine blocks the KV-event index keeps per replica: above any engine's own capacity
    /// (vLLM's `num_gpu_blocks`), so that it bites only after lost removals.
    pub precise_max_blocks_per_replica: usize,
    /// Engine blocks the KV-event index keeps over all replicas.
    pub precise_max_blocks_total: usize,
    /// Blocks of requests routed to event-followed replicas whose engines have not yet
    /// reported them (over all replicas); they count as held until then.
    pub pending_max_blocks: usize,
    /// A routed request's blocks count at most this long without the engine's report.
    pub pending_ttl_ms: u64,
    /// And this long after its first byte (time for the report to arrive).
    pub pending_grace_ms: u64,
}

impl IndexConfig {
    pub fn pending_limits(&self) -> warmpath_routing::index::PendingLimits {
        warmpath_routing::index::PendingLimits {
            max_blocks: self.pending_max_blocks,
            ttl: std::time::Duration::from_millis(self.pending_ttl_ms),
            grace: std::time::Duration::from_millis(self.pending_grace_ms),
        }
    }
}

impl Default for IndexConfig {
    fn default() -> Self {
        Self {
            block_bytes: 256,
            max_bytes_per_replica: 8 << 20,
            max_bytes_total: 512 << 20,
            precise_max_blocks_per_replica: 1 << 20,
            precise_max_blocks_total: 8 << 20,
            pending_max_blocks: 1 << 18,
            pending_ttl_ms: 30_000,
            pending_grace_ms: 1_000,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Largest request body accepted; larger ones get 413.
    pub max_body_bytes: usize,
    /// Output tokens assumed for load accounting when a request does not set `max_tokens`.
    pub default_max_tokens: u32,
    /// Client connections open at once on the API listener (read at start); more are answered
    /// 503 and closed.
    pub max_connections: usize,
    /// Request bodies held at once, all requests together (read at start): a body is held until
    /// its replica's response head arrives; one that does not fit gets 503 `overloaded`.
    pub max_buffered_body_bytes: usize,
    /// Threads that tokenize prompts for models routed from KV events (read at start; 0: one
    /// per CPU). Tokenizing runs off the threads that serve connections.
    pub tokenize_threads: usize,
    /// Requests that may wait for a tokenizing thread (read at start); past them a request is
    /// routed without its tokens, from the approximate index, rather than wait.
    pub tokenize_queue: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_body_bytes: 16 << 20,
            default_max_tokens: 256,
            max_connections: 10_000,
            max_buffered_body_bytes: 256 << 20,
            tokenize_threads: 0,
            tokenize_queue: 256,
        }
    }
}

/// Timeouts, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TimeoutsConfig {
    /// Opening a TCP connection to a replica (then 502 and the replica is ejected for a while).
    pub connect_ms: u64,
    /// From sending the request to the replica's response headers (then 504). Non-streaming
    /// engines send headers only when generation ends, so this bounds whole non-streamed requests.
    pub header_ms: u64,
    /// Longest silence between two chunks of a replica's response body (then the stream is cut).
    pub idle_ms: u64,
    /// Reading a client's request head and body (then 408).
    pub client_ms: u64,
    /// Keep-alive of idle pooled upstream connections. Shorter than the engines' own (vLLM's
    /// uvicorn closes idle connections after 5 s): a connection the engine is closing just as
    /// the router reuses it fails the request with a 502.
    pub pool_idle_ms: u64,
    /// Longest a write to a client may wait (a client that stops reading its answer): then
    /// the connection is closed, which ends its requests and frees their replicas.
    pub write_stall_ms: u64,
}

impl Default for TimeoutsConfig {
    fn default() -> Self {
        Self {
            connect_ms: 1_000,
            header_ms: 300_000,
            idle_ms: 60_000,
            client_ms: 30_000,
            pool_idle_ms: 4_000,
            write_stall_ms: 30_000,
        }
    }
}

impl TimeoutsConfig {
    pub fn connect(&self) -> Duration {
        Duration::from_millis(self.connect_ms)
    }
    pub fn header(&self) -> Duration {
        Duration::from_millis(self.header_ms)
    }
    pub fn idle(&self) -> Duration {
        Duration::from_millis(self.idle_ms)
    }
    pub fn client(&self) -> Duration {
        Duration::from_millis(self.client_ms)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScrapeConfig {
    /// How often each replica's metrics are read (50–100 ms keeps load signals fresh).
    pub interval_ms: u64,
    /// A scrape that takes longer fails.
    pub timeout_ms: u64,
    /// Metrics older than this are unknown to the scheduler, not zero.
    pub stale_after_ms: u64,
    /// Consecutive failed scrapes (other than refused connections, which count at once) after
    /// which a replica is not ready.
    pub failures_before_unready: u32,
    /// At most this share of an engine's time goes to answering scrapes: where one takes long
    /// (vLLM renders hundreds of series in Python, about 4 ms of CPU each time), the pause
    /// after it stretches to its duration divided by this share.
    pub engine_share: f64,
    /// The longest that stretched pause.
    pub max_interval_ms: u64,
}

impl Default for ScrapeConfig {
    fn default() -> Self {
        Self {
            interval_ms: 75,
            timeout_ms: 500,
            stale_after_ms: 300,
            failures_before_unready: 3,
            engine_share: 0.02,
            max_interval_ms: 500,
        }
    }
}

/// Passive health checking: a replica that refuses connections is ejected for a backoff that
/// doubles on each consecutive failure.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HealthConfig {
    pub eject_base_ms: u64,
    pub eject_max_ms: u64,
    /// Failed answers in a row (5xx, timeouts, resets) that eject a replica, as long as at
    /// most half its pool is ejected; 0 turns this off (refused connections still eject).
    pub consecutive_failures: u32,
    /// A replica is also ejected (with the same proviso) when at least this percentage of its
    /// last `failure_window` answers failed, in a row or not; 0 turns this off.
    pub failure_percent: u32,
    /// Answers (2-64) the failure percentage is taken over; a replica is judged only once it
    /// has answered this many since it was last ejected.
    pub failure_window: u32,
    /// A replica owing a stream's first byte for longer than this many times that request's
    /// predicted TTFT (and at least `overdue_min_ms`), with no progress from it meanwhile (no
    /// first byte or answer, no token counted by its engine's metrics), is passed over while
    /// another replica can serve; its progress ends that. A request that waited that long with
    /// no progress from its replica (a stream until its first byte; any request until its head
    /// when the engine's metrics count tokens) is taken back, nothing of it having reached the
    /// client, and tried on another replica, and the replica is ejected. 0 turns this off.
    pub overdue_factor: f64,
    pub overdue_min_ms: u64,
    /// Active checks: a GET of this path on each replica's serving port every
    /// `active_interval_ms` (vLLM's and SGLang's `/health`, the default); a replica failing
    /// `scrape.failures_before_unready` in a row (a refused connection at once) is no candidate
    /// until one passes, and one that serves no such path (404, 405, 501) is not judged by it.
    /// `None` (`null` in the file): off (the metrics scrape still doubles as a probe).
    pub active_path: Option<String>,
    pub active_interval_ms: u64,
}

impl Default for HealthConfig {
    fn default() -> Self {
        Self {
            eject_base_ms: 1_000,
            eject_max_ms: 30_000,
            consecutive_failures: 5,
            failure_percent: 50,
            failure_window: 20,
            overdue_factor: 10.0,
            overdue_min_ms: 1_000,
            active_path: Some("/health".to_owned()),
            active_interval_ms: 1_000,
        }
    }
}

impl HealthConfig {
    /// How long a stream's first byte may take on a replica before the replica is suspect,
    /// given the TTFT predicted for it (`None`: never).
    pub fn overdue_after(&self, predicted_ttft_s: f64) -> Option<std::time::Duration> {
        if self.overdue_factor <= 0.0 {
            return None;
        }
        let scaled = std::time::Duration::try_from_secs_f64(self.overdue_factor * predicted_ttft_s)
            .unwrap_or(std::time::Duration::ZERO);
        Some(scaled.max(std::time::Duration::from_millis(self.overdue_min_ms)))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ResponseHeadersConfig {
    /// Add `x-warmpath-replica: <name>` to proxied responses.
    pub replica: bool,
    /// Add `x-warmpath-decision` (policy reason, matched blocks, predicted TTFT) for debugging.
    pub decision: bool,
}

impl Default for ResponseHeadersConfig {
    fn default() -> Self {
        Self {
            replica: true,
            decision: false,
        }
    }
}

impl Config {
    /// Read and validate a configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: path.display().to_string(),
            line: None,
            field: String::new(),
            message: format!("cannot read: {e}"),
        })?;
        Self::parse(&text).map_err(|mut e| {
            e.file = path.display().to_string();
            e
        })
    }

    /// Parse and validate configuration text (the error's `file` is left empty); the
    /// `${NAME}` references of `peers.listen` are read from the process's environment.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        Self::parse_with_env(text, |name| std::env::var(name).ok())
    }

    /// [`Config::parse`] with the environment `peers.listen`'s `${NAME}` references are read
    /// from given as `env` (a name's value, `None` when unset).
    pub fn parse_with_env(
        text: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let mut config: Config =
            serde_yaml::from_str(text).map_err(|e| ConfigError::from_yaml(&e))?;
        let located = |(path, message): (FieldPath, String)| ConfigError {
            file: String::new(),
            line: locate::line_of(text, &path),
            field: path.to_string(),
            message,
        };
        for (i, p) in config.tenants.policies.iter_mut().enumerate() {
            p.load_key_file().map_err(|message| {
                let path = FieldPath::root()
                    .key("tenants")
                    .key("policies")
                    .index(i)
                    .key("api_keys_file");
                located((path, message))
            })?;
        }
        // Expanded once, here: what the router binds, shows and compares on reload.
        config
            .peers
            .expand_listen(&env)
            .map_err(|message| located((FieldPath::root().key("peers").key("listen"), message)))?;
        config.validate().map_err(located)?;
        Ok(config)
    }

    /// Semantic checks serde cannot express; the error names the offending field.
    fn validate(&self) -> Result<(), (FieldPath, String)> {
        let root = FieldPath::root();
        // Port 0 (tests) lets the OS pick distinct ports.
        if self.listen == self.admin && self.listen.port() != 0 {
            return Err((root.key("admin"), "must differ from `listen`".to_owned()));
        }
        validate_pools(&self.pools, &self.scheduling, root.key("pools"))?;
        self.pd.validate(root.key("pd"))?;
        core_check(root.key("scheduling"), self.scheduling.validate())?;
        core_check(root.key("predictor"), self.predictor.validate())?;
        self.index.validate(root.key("index"))?;
        self.limits.validate(root.key("limits"))?;
        self.shutdown.validate(root.key("shutdown"))?;
        self.timeouts.validate(root.key("timeouts"))?;
        self.scrape.validate(root.key("scrape"))?;
        self.tenants.validate(root.key("tenants"))?;
        objectives::validate(&self.objectives, root.key("objectives"))?;
        self.sessions.validate(root.key("sessions"))?;
        self.peers.validate(root.key("peers"))?;
        self.explain.validate(root.key("explain"))?;
        self.endpoint_picker.validate(
            root.key("endpoint_picker"),
            &[("listen", self.listen), ("admin", self.admin)],
        )?;
        self.flow.validate(root.key("flow"))?;
        self.health.validate(root.key("health"))
    }
}

/// The pools: each valid on its own (names unique, across pools for replicas), and every
/// prefill pool's models decoded by another.
fn validate_pools(
    pools: &[PoolConfig],
    scheduling: &SchedulerConfig,
    at: FieldPath,
) -> Result<(), (FieldPath, String)> {
    // An empty pool list is valid: the Helm chart's default has none until pools are
    // configured (or, later, discovered from InferencePools). The router then answers 404 for
    // every model and stays not-ready, instead of crash-looping.
    let mut pool_names = HashSet::new();
    let mut replica_names = HashSet::new();
    for (p, pool) in pools.iter().enumerate() {
        let pp = at.index(p);
        if !pool_names.insert(pool.name.as_str()) {
            return Err((
                pp.key("name"),
                format!("duplicate pool name `{}`", pool.name),
            ));
        }
        pool.validate(pp.clone(), scheduling)?;
        for (r, replica) in pool.replicas.iter().enumerate() {
            if !replica_names.insert(replica.name.as_str()) {
                return Err((
                    pp.key("replicas").index(r).key("name"),
                    format!(
                        "duplicate replica name `{}` (names are unique across pools)",
                        replica.name
                    ),
                ));
            }
        }
    }
    // A prefill pool only helps models that some pool decodes.
    for (p, pool) in pools.iter().enumerate() {
        if pool.role != Role::Prefill {
            continue;
        }
        for (m, model) in pool.models.iter().enumerate() {
            let decoded = pools
                .iter()
                .any(|q| q.role != Role::Prefill && q.models.contains(model));
            if !decoded {
                return Err((
                    at.index(p).key("models").index(m),
                    format!("no `decode` or `both` pool serves `{model}`, so nothing would decode what this prefill pool computes"),
                ));
            }
        }
    }
    Ok(())
}

impl PoolConfig {
    /// This pool on its own (names across pools are [`validate_pools`]'s).
    fn validate(
        &self,
        at: FieldPath,
        scheduling: &SchedulerConfig,
    ) -> Result<(), (FieldPath, String)> {
        if self.name.trim().is_empty() {
            return Err((at.key("name"), "must not be empty".to_owned()));
        }
        if self.models.is_empty() {
            return Err((
                at.key("models"),
                "at least one model is required".to_owned(),
            ));
        }
        for (m, model) in self.models.iter().enumerate() {
            if model.trim().is_empty() {
                return Err((at.key("models").index(m), "must not be empty".to_owned()));
            }
        }
        if let Some(path) = &self.metrics_path {
            if !path.starts_with('/') {
                return Err((at.key("metrics_path"), "must start with `/`".to_owned()));
            }
        }
        if let Some(kv) = &self.kv_events {
            kv.validate(at.key("kv_events"))?;
        }
        for (i, adapter) in self.lora_adapters.iter().enumerate() {
            if !self.models.contains(adapter) {
                return Err((
                    at.key("lora_adapters").index(i),
                    format!("`{adapter}` is not one of the pool's `models`"),
                ));
            }
        }
        if let Some(weights) = self.weights {
            let scheduling = SchedulerConfig {
                weights,
                ..scheduling.clone()
            };
            // The core's rules, placed at the pool's field.
            core_check(at.clone(), scheduling.validate())?;
        }
        if self.replicas.is_empty() {
            return Err((
                at.key("replicas"),
                "at least one replica is required".to_owned(),
            ));
        }
        for (r, replica) in self.replicas.iter().enumerate() {
            replica.validate(at.key("replicas").index(r))?;
        }
        Ok(())
    }
}

impl ReplicaConfig {
    fn validate(&self, at: FieldPath) -> Result<(), (FieldPath, String)> {
        if self.name.trim().is_empty() {
            return Err((at.key("name"), "must not be empty".to_owned()));
        }
        if let Err(msg) = parse_base_url(&self.url) {
            return Err((at.key("url"), msg));
        }
        if let Some(e) = &self.kv_events_endpoint {
            kv_events::check_endpoint(e).map_err(|m| (at.key("kv_events_endpoint"), m))?;
        }
        if let Some(e) = &self.kv_events_replay_endpoint {
            kv_events::check_endpoint(e).map_err(|m| (at.key("kv_events_replay_endpoint"), m))?;
        }
        Ok(())
    }
}

impl PdConfig {
    fn validate(&self, at: FieldPath) -> Result<(), (FieldPath, String)> {
        if self.prefill_attempts == 0 {
            return Err((at.key("prefill_attempts"), "must be >= 1".to_owned()));
        }
        if self.prefill_timeout_ms == 0 {
            return Err((at.key("prefill_timeout_ms"), "must be > 0".to_owned()));
        }
        if self.bootstrap_port == 0 {
            return Err((
                at.key("bootstrap_port"),
                "must be a port number (1-65535)".to_owned(),
            ));
        }
        Ok(())
    }
}

impl IndexConfig {
    fn validate(&self, at: FieldPath) -> Result<(), (FieldPath, String)> {
        core_check(
            at.key("block_bytes"),
            BlockHasher::try_new(self.block_bytes).map(drop),
        )?;
        if self.max_bytes_total < 4096 {
            return Err((
                at.key("max_bytes_total"),
                "must be at least 4096".to_owned(),
            ));
        }
        if self.max_bytes_per_replica < 4096 {
            return Err((
                at.key("max_bytes_per_replica"),
                "must be at least 4096".to_owned(),
            ));
        }
        if self.precise_max_blocks_per_replica == 0
            || self.precise_max_blocks_total < self.precise_max_blocks_per_replica
        {
            return Err((
                at.key("precise_max_blocks_total"),
                "needs 0 < precise_max_blocks_per_replica <= precise_max_blocks_total".to_owned(),
            ));
        }
        Ok(())
    }
}

impl LimitsConfig {
    fn validate(&self, at: FieldPath) -> Result<(), (FieldPath, String)> {
        if self.max_buffered_body_bytes < self.max_body_bytes {
            return Err((
                at.key("max_buffered_body_bytes"),
                "must be at least limits.max_body_bytes (or no largest body could ever pass)"
                    .to_owned(),
            ));
        }
        if self.max_connections == 0 {
            return Err((at.key("max_connections"), "must be > 0".to_owned()));
        }
        if self.max_body_bytes < 1024 {
            return Err((at.key("max_body_bytes"), "must be at least 1024".to_owned()));
        }
        Ok(())
    }
}

impl ShutdownConfig {
    fn validate(&self, at: FieldPath) -> Result<(), (FieldPath, String)> {
        if self.drain_ms == 0 {
            return Err((at.key("drain_ms"), "must be > 0".to_owned()));
        }
        Ok(())
    }
}

impl TimeoutsConfig {
    fn validate(&self, at: FieldPath) -> Result<(), (FieldPath, String)> {
        for (name, v) in [
            ("connect_ms", self.connect_ms),
            ("header_ms", self.header_ms),
            ("idle_ms", self.idle_ms),
            ("client_ms", self.client_ms),
            ("pool_idle_ms", self.pool_idle_ms),
            ("write_stall_ms", self.write_stall_ms),
        ] {
            if v == 0 {
                return Err((at.key(name), "must be > 0".to_owned()));
            }
        }
        Ok(())
    }
}

impl ScrapeConfig {
    fn validate(&self, at: FieldPath) -> Result<(), (FieldPath, String)> {
        if !(10..=60_000).contains(&self.interval_ms) {
            return Err((
                at.key("interval_ms"),
                "must be between 10 and 60000".to_owned(),
            ));
        }
        if self.timeout_ms == 0 {
            return Err((at.key("timeout_ms"), "must be > 0".to_owned()));
        }
        if self.stale_after_ms <= self.interval_ms {
            return Err((
                at.key("stale_after_ms"),
                "must be greater than `scrape.interval_ms`".to_owned(),
            ));
        }
        if !(self.engine_share > 0.0 && self.engine_share <= 1.0) {
            return Err((
                at.key("engine_share"),
                "must be greater than 0 and at most 1".to_owned(),
            ));
        }
        if self.max_interval_ms < self.interval_ms {
            return Err((
                at.key("max_interval_ms"),
                "must be at least `scrape.interval_ms`".to_owned(),
            ));
        }
        if self.failures_before_unready == 0 {
            return Err((at.key("failures_before_unready"), "must be >= 1".to_owned()));
        }
        Ok(())
    }
}

impl HealthConfig {
    fn validate(&self, at: FieldPath) -> Result<(), (FieldPath, String)> {
        if self.eject_base_ms == 0 || self.eject_max_ms < self.eject_base_ms {
            return Err((
                at.key("eject_max_ms"),
                "needs 0 < eject_base_ms <= eject_max_ms".to_owned(),
            ));
        }
        if self.failure_percent > 100 {
            return Err((at.key("failure_percent"), "must be 0-100".to_owned()));
        }
        if !(2..=64).contains(&self.failure_window) {
            return Err((at.key("failure_window"), "must be 2-64".to_owned()));
        }
        if let Some(path) = &self.active_path {
            if !path.starts_with('/') || path.parse::<http::uri::PathAndQuery>().is_err() {
                return Err((
                    at.key("active_path"),
                    format!("`{path}` is not a path (like /health)"),
                ));
            }
        }
        if self.active_interval_ms == 0 {
            return Err((
                at.key("active_interval_ms"),
                "must be at least 1".to_owned(),
            ));
        }
        if !(self.overdue_factor.is_finite() && self.overdue_factor >= 0.0) {
            return Err((
                at.key("overdue_factor"),
                format!(
                    "{} is not a factor (0 or more; 0 turns it off)",
                    self.overdue_factor
                ),
            ));
        }
        Ok(())
    }
}

/// The core's verdict on the settings kept at `at`, its error placed at the field it names.
fn core_check(
    at: FieldPath,
    verdict: Result<(), warmpath_routing::ConfigError>,
) -> Result<(), (FieldPath, String)> {
    verdict.map_err(|e| {
        let field = e.field().into_iter().fold(at, |path, key| path.key(key));
        (field, e.to_string())
    })
}

/// A secret a file names (a signing key, a bearer token): its bytes, surrounding whitespace
/// trimmed, at least 16 of them; errors name the file and say what `what` lacks.
pub fn read_secret(path: &std::path::Path, what: &str) -> std::io::Result<Vec<u8>> {
    let bytes = std::fs::read(path)
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    let secret = bytes.trim_ascii();
    if secret.len() < 16 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{}: the {what} needs at least 16 bytes", path.display()),
        ));
    }
    Ok(secret.to_vec())
}

/// A replica URL reduced to what the proxy needs: `http://host:port` with no path.
pub fn parse_base_url(url: &str) -> Result<http::uri::Authority, String> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| format!("`{url}` is not a URL: {e}"))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some(other) => {
            return Err(format!(
                "`{url}`: scheme `{other}` is not supported (use http://)"
            ))
        }
        None => return Err(format!("`{url}`: missing scheme (use http://host:port)")),
    }
    let authority = uri
        .authority()
        .cloned()
        .ok_or_else(|| format!("`{url}`: missing host"))?;
    if authority.host().is_empty() {
        return Err(format!("`{url}`: missing host"));
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(format!(
            "`{url}`: must have no path or query (the request path is appended)"
        ));
    }
    Ok(authority)
}

#[cfg(test)]
mod tests;
