//! Replicas as the router knows them at run time, and the registry that gives each one a stable
//! [`ReplicaId`].
//!
//! A replica's state (load counters, scraped engine load, health, learned TTFT model) outlives
//! configuration reloads: the registry keys it by name and URL, so a reload that keeps a replica
//! keeps its id, its prefix-index entries and what the predictor learned about it.

use super::health::Health;
use crate::config::{Config, Engine};
use crate::upstream::ConnPool;
use dashmap::DashMap;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use warmpath_routing::predict::{TtftModel, TtftPrior};
use warmpath_routing::scheduler::EngineLoad;
use warmpath_routing::ReplicaId;

/// Where and how to read a replica's engine metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScrapeTarget {
    pub path: String,
    /// The metrics port, when not the serving port.
    pub port: Option<u16>,
    pub engine: Engine,
}

/// Where a replica's engine publishes its KV events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvSource {
    pub endpoint: String,
    pub topic: String,
    /// The engine's replay endpoint, if any.
    pub replay: Option<String>,
    /// The pool's `kv_events.max_message_bytes`.
    pub max_message_bytes: usize,
}

/// How far the router's view of a replica's KV cache can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvMode {
    /// No events (none configured, or not connected yet): the approximate index alone.
    #[default]
    Off,
    /// Events arrive but some were missed (the router started after the engine, a sequence
    /// gap, a block whose parent was never seen): the engine may hold blocks the router does
    /// not know of, so a replica's match is the better of the events' and the approximate
    /// index's.
    Uncertain,
    /// Every event since the engine's cache was last empty has been seen: the events alone.
    Fresh,
}

/// A replica's KV-event stream as the router has followed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KvStatus {
    pub mode: KvMode,
    /// The last sequence number seen.
    pub last_seq: Option<u64>,
    /// Tokens per block, from the events.
    pub block_size: Option<usize>,
}

/// One serving endpoint.
#[derive(Debug)]
pub struct ReplicaState {
    pub id: ReplicaId,
    /// Its identity as every router knows it: a hash of its name (the scheduler's
    /// `ReplicaView::key`).
    pub key: u64,
    pub name: String,
    pub url: String,
    pub authority: http::uri::Authority,
    /// The `host` header sent with every forwarded request (made once, not per request).
    pub host: http::HeaderValue,
    inflight_requests: AtomicU32,
    /// The learned in-flight bound (0: none yet), read on every choice; a copy of
    /// `learned.limit`, which the scrape task alone writes.
    inflight_limit: AtomicU32,
    learned: Mutex<super::inflight_limit::Learned>,
    inflight_tokens: AtomicU64,
    /// Uncached prompt tokens of in-flight requests that have no first token yet.
    pending_prefill: AtomicU64,
    /// When that prefill should be done, µs after [`epoch_us`]'s epoch: a clock each request
    /// pushes on by its own prefill at the replica's cautious per-token cost, so that a long
    /// prompt prefilling for a while counts for what it has left, not for all of it.
    prefill_done_at_us: AtomicU64,
    /// Uncached prompt tokens of in-flight requests, until their responses end.
    inflight_uncached: AtomicU64,
    engine: Mutex<Option<(EngineLoad, Instant)>>,
    /// The scrape task's current pause between scrapes, ms (0: not scraped yet): a load
    /// stays fresh for a few of them however long they are stretched.
    scrape_every_ms: AtomicU64,
    /// Whether a scrape ever found load series: only then does a stale load mean "unknown"
    /// rather than "this engine does not say" (flow control counts the first as saturated).
    reported_load: std::sync::atomic::AtomicBool,
    /// The engine's KV-cache capacity in tokens (`vllm:cache_config_info`); 0 unknown.
    kv_capacity_tokens: AtomicU64,
    pub health: Health,
    pub ttft: Mutex<TtftModel>,
    /// Idle data-path connections to this replica.
    pub pool: Arc<ConnPool>,
    scrape_target: Mutex<Option<ScrapeTarget>>,
    kv_source: Mutex<Option<KvSource>>,
    /// Written by the replica's KV-event task, read by the replica choice.
    pub kv: Mutex<KvStatus>,
    scrape_task: Mutex<Option<tokio::task::AbortHandle>>,
    /// Prompt blocks of the requests routed here, and of those the blocks it held: its
    /// cache-hit rate as the router sees it (the status page's).
    blocks_routed: AtomicU64,
    blocks_matched: AtomicU64,
}

impl ReplicaState {
    fn new(
        id: ReplicaId,
        name: &str,
        url: &str,
        authority: http::uri::Authority,
        prior: TtftPrior,
    ) -> Self {
        let host = http::HeaderValue::from_str(authority.as_str())
            .expect("a URI authority is a valid header value");
        Self {
            id,
            key: warmpath_routing::scheduler::replica_key(name),
            name: name.to_owned(),
            url: url.trim_end_matches('/').to_owned(),
            authority,
            host,
            inflight_requests: AtomicU32::new(0),
            inflight_limit: AtomicU32::new(0),
            learned: Mutex::new(Default::default()),
            inflight_tokens: AtomicU64::new(0),
            pending_prefill: AtomicU64::new(0),
            prefill_done_at_us: AtomicU64::new(0),
            inflight_uncached: AtomicU64::new(0),
            engine: Mutex::new(None),
            scrape_every_ms: AtomicU64::new(0),
            reported_load: std::sync::atomic::AtomicBool::new(false),
            kv_capacity_tokens: AtomicU64::new(0),
            health: Health::default(),
            ttft: Mutex::new(TtftModel::new(prior)),
            pool: Arc::default(),
            scrape_target: Mutex::new(None),
            kv_source: Mutex::new(None),
            kv: Mutex::new(KvStatus::default()),
            scrape_task: Mutex::new(None),
            blocks_routed: AtomicU64::new(0),
            blocks_matched: AtomicU64::new(0),
        }
    }

    /// A request was routed here with `blocks` prompt blocks, `matched` of them held here.
    pub fn count_blocks(&self, blocks: u64, matched: u64) {
        self.blocks_routed.fetch_add(blocks, Ordering::Relaxed);
        self.blocks_matched.fetch_add(matched, Ordering::Relaxed);
    }

    /// Prompt blocks routed here and of those found held here, since the router started.
    pub fn blocks(&self) -> (u64, u64) {
        (
            self.blocks_routed.load(Ordering::Relaxed),
            self.blocks_matched.load(Ordering::Relaxed),
        )
    }

    pub fn inflight_requests(&self) -> u32 {
        self.inflight_requests.load(Ordering::Relaxed)
    }

    /// The in-flight bound learned from the engine (`flow.saturation.learn_inflight_requests`),
    /// `None` until its metrics have reported load.
    pub fn learned_inflight_limit(&self) -> Option<u32> {
        Some(self.inflight_limit.load(Ordering::Relaxed)).filter(|&l| l > 0)
    }

    /// One scrape's lesson about the engine's batch ([`super::inflight_limit::learn_limit`]);
    /// only the scrape task calls it.
    pub fn learn_inflight_limit(
        &self,
        load: &EngineLoad,
        bounds: &crate::config::SaturationConfig,
    ) {
        let mut learned = self.learned.lock();
        *learned =
            super::inflight_limit::learn_limit(*learned, load, self.inflight_requests(), bounds);
        self.inflight_limit.store(learned.limit, Ordering::Relaxed);
    }

    pub fn inflight_tokens(&self) -> u64 {
        self.inflight_tokens.load(Ordering::Relaxed)
    }

    pub fn pending_prefill_tokens(&self) -> u64 {
        self.pending_prefill.load(Ordering::Relaxed)
    }

    /// The pending prefill still ahead at `now`, draining at `per_token_s` (the replica's
    /// [`TtftModel::cautious_per_token_s`]): never more than [`Self::pending_prefill_tokens`],
    /// fewer where the prefill clock says part of it is done. A request waits behind what is
    /// left of a long prompt, and leaving a warm replica for it repeated prefills that a short
    /// wait would have spared (on the Mooncake trace most moves away from a warm replica were
    /// for a long prompt counted whole until its first token).
    pub fn pending_prefill_left(&self, now: Instant, per_token_s: f64) -> u64 {
        let count = self.pending_prefill_tokens();
        if count == 0 || !(per_token_s.is_finite() && per_token_s > 0.0) {
            return count;
        }
        let left_us = self
            .prefill_done_at_us
            .load(Ordering::Relaxed)
            .saturating_sub(epoch_us(now));
        let left = (left_us as f64 / (per_token_s * 1e6)).ceil();
        count.min(left as u64)
    }

    pub fn inflight_uncached_tokens(&self) -> u64 {
        self.inflight_uncached.load(Ordering::Relaxed)
    }

    /// Engine load from the last scrape, or `None` when it is older than `stale_after`.
    /// The staleness bound grows to four of the replica's scrape pauses when those are
    /// stretched past it ([`crate::config::ScrapeConfig::engine_share`]).
    pub fn engine_load(&self, now: Instant, stale_after: Duration) -> Option<EngineLoad> {
        let stale_after = stale_after.max(Duration::from_millis(
            4 * self.scrape_every_ms.load(Ordering::Relaxed),
        ));
        let guard = self.engine.lock();
        match *guard {
            Some((load, at)) if now.saturating_duration_since(at) <= stale_after => Some(load),
            _ => None,
        }
    }

    /// The scrape task's pause before its next scrape.
    pub fn set_scrape_every(&self, pause: Duration) {
        self.scrape_every_ms.store(
            pause.as_millis().min(u128::from(u64::MAX / 8)) as u64,
            Ordering::Relaxed,
        );
    }

    /// The scrape task's current pause between scrapes (`None` before the first).
    pub fn scrape_every(&self) -> Option<Duration> {
        Some(self.scrape_every_ms.load(Ordering::Relaxed))
            .filter(|&ms| ms > 0)
            .map(Duration::from_millis)
    }

    /// Record a scrape. `None` means the engine answered but exposes no load series we know.
    pub fn set_engine_load(&self, load: Option<EngineLoad>, at: Instant) {
        if load.is_some() {
            self.reported_load.store(true, Ordering::Relaxed);
        }
        *self.engine.lock() = load.map(|l| (l, at));
    }

    /// The engine's KV-cache capacity in tokens, when its metrics say (`None` unknown).
    pub fn kv_capacity_tokens(&self) -> Option<u64> {
        Some(self.kv_capacity_tokens.load(Ordering::Relaxed)).filter(|&c| c > 0)
    }

    pub fn set_kv_capacity_tokens(&self, tokens: u64) {
        self.kv_capacity_tokens.store(tokens, Ordering::Relaxed);
    }

    /// Whether any scrape has found the engine's load series.
    pub fn has_reported_load(&self) -> bool {
        self.reported_load.load(Ordering::Relaxed)
    }

    pub fn scrape_target(&self) -> Option<ScrapeTarget> {
        self.scrape_target.lock().clone()
    }

    pub(crate) fn set_scrape_target(&self, target: Option<ScrapeTarget>) {
        *self.scrape_target.lock() = target;
    }

    pub fn kv_source(&self) -> Option<KvSource> {
        self.kv_source.lock().clone()
    }

    pub(crate) fn set_scrape_task(&self, handle: tokio::task::AbortHandle) {
        if let Some(old) = self.scrape_task.lock().replace(handle) {
            old.abort();
        }
    }

    pub(crate) fn stop_scraping(&self) {
        if let Some(old) = self.scrape_task.lock().take() {
            old.abort();
        }
    }
}

/// Holds a replica's in-flight request and token counters up for as long as a request is in
/// flight (until its response body ends or is dropped).
#[derive(Debug)]
pub struct InflightGuard {
    replica: Arc<ReplicaState>,
    tokens: u64,
    uncached: u64,
}

impl InflightGuard {
    /// `tokens`: prompt plus expected output; `uncached`: the prompt tokens the replica's cache
    /// did not hold when the request was sent.
    pub fn new(replica: Arc<ReplicaState>, tokens: u64, uncached: u64) -> Self {
        replica.inflight_requests.fetch_add(1, Ordering::Relaxed);
        replica.inflight_tokens.fetch_add(tokens, Ordering::Relaxed);
        replica
            .inflight_uncached
            .fetch_add(uncached, Ordering::Relaxed);
        Self {
            replica,
            tokens,
            uncached,
        }
    }

    pub fn replica(&self) -> &Arc<ReplicaState> {
        &self.replica
    }
}

impl Drop for InflightGuard {
    fn drop(&mut self) {
        self.replica
            .inflight_requests
            .fetch_sub(1, Ordering::Relaxed);
        self.replica
            .inflight_tokens
            .fetch_sub(self.tokens, Ordering::Relaxed);
        self.replica
            .inflight_uncached
            .fetch_sub(self.uncached, Ordering::Relaxed);
    }
}

/// Holds a replica's pending-prefill count up until the request's first token: the scheduler
/// counts prefill work still ahead on a replica, which ends before the response does.
#[derive(Debug)]
pub struct PrefillGuard {
    replica: Arc<ReplicaState>,
    tokens: u64,
}

impl PrefillGuard {
    /// Counts `tokens` as pending prefill on `replica` until dropped.
    pub fn new(replica: Arc<ReplicaState>, tokens: u64) -> Self {
        replica.pending_prefill.fetch_add(tokens, Ordering::Relaxed);
        Self { replica, tokens }
    }

    /// [`Self::clocked`] when `clock` (`scheduling.placement.drain_pending_prefill`), else
    /// [`Self::new`].
    pub fn counted(replica: Arc<ReplicaState>, tokens: u64, clock: bool) -> Self {
        if clock {
            Self::clocked(replica, tokens)
        } else {
            Self::new(replica, tokens)
        }
    }

    /// As [`Self::new`], and pushes the replica's prefill clock on by those tokens at its
    /// cautious per-token cost (`scheduling.placement.drain_pending_prefill`, the only reader
    /// of the clock: with it off, dispatch neither locks the TTFT model nor moves the clock).
    pub fn clocked(replica: Arc<ReplicaState>, tokens: u64) -> Self {
        let before = replica.pending_prefill.fetch_add(tokens, Ordering::Relaxed);
        if tokens > 0 {
            let work_us = tokens as f64 * replica.ttft.lock().cautious_per_token_s() * 1e6;
            let now = epoch_us(Instant::now());
            // Nothing pending before this one: the clock starts now, whatever it said (the
            // engine may have been quicker than the cost). Races with a guard dropped at the
            // same moment only move the clock later, and the count bounds what it can say.
            let _ = replica.prefill_done_at_us.fetch_update(
                Ordering::Relaxed,
                Ordering::Relaxed,
                |done| {
                    let start = if before == 0 { now } else { done.max(now) };
                    Some(start.saturating_add(work_us.min(u64::MAX as f64) as u64))
                },
            );
        }
        Self { replica, tokens }
    }
}

/// Microseconds from a process-wide epoch (the first call) to `at`; 0 before it.
fn epoch_us(at: Instant) -> u64 {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    at.saturating_duration_since(epoch)
        .as_micros()
        .min(u128::from(u64::MAX)) as u64
}

impl Drop for PrefillGuard {
    fn drop(&mut self) {
        self.replica
            .pending_prefill
            .fetch_sub(self.tokens, Ordering::Relaxed);
    }
}

/// What changed in the registry on a configuration (re)load.
#[derive(Debug, Default)]
pub struct RegistryChange {
    pub added: Vec<Arc<ReplicaState>>,
    pub removed: Vec<Arc<ReplicaState>>,
}

/// Name → replica state, with dense ids reused after removal (the prefix index keeps per-id
/// state, so ids stay small and are only reused once the index has forgotten them).
///
/// Written only by the table publisher ([`super::publish`]); others read it through
/// [`Replicas`], a concurrent map, so that `/metrics` never waits for a table rebuild.
#[derive(Debug, Default)]
pub struct ReplicaRegistry {
    by_name: Replicas,
    free_ids: Vec<ReplicaId>,
    next_id: ReplicaId,
}

/// A read-only view of every replica the router knows, by name (pools of every role).
#[derive(Debug, Clone, Default)]
pub struct Replicas(Arc<DashMap<String, Arc<ReplicaState>>>);

impl Replicas {
    /// How many replicas there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every replica, in no particular order.
    pub fn snapshot(&self) -> Vec<Arc<ReplicaState>> {
        self.0.iter().map(|e| e.value().clone()).collect()
    }

    pub fn get(&self, name: &str) -> Option<Arc<ReplicaState>> {
        self.0.get(name).map(|e| e.value().clone())
    }
}

impl ReplicaRegistry {
    pub fn get(&self, name: &str) -> Option<Arc<ReplicaState>> {
        self.by_name.get(name)
    }

    /// The view handed to readers.
    pub fn view(&self) -> Replicas {
        self.by_name.clone()
    }

    /// Bring the registry in line with `config` (already validated: names are unique and URLs
    /// parse). A replica whose URL changed is a new replica under the same name.
    /// How many replicas the configuration names.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    pub fn sync(&mut self, config: &Config) -> RegistryChange {
        let mut change = RegistryChange::default();
        type Wanted<'a> = (&'a str, Option<ScrapeTarget>, Option<KvSource>);
        let mut wanted: HashMap<&str, Wanted<'_>> = HashMap::new();
        for pool in &config.pools {
            let target = pool.metrics_path.as_ref().map(|p| ScrapeTarget {
                path: p.clone(),
                port: pool.metrics_port,
                engine: pool.engine,
            });
            for r in &pool.replicas {
                let kv = pool.kv_events.as_ref().and_then(|kv| {
                    let host = crate::config::parse_base_url(&r.url).ok()?;
                    Some(KvSource {
                        endpoint: kv.endpoint_for(host.host(), r.kv_events_endpoint.as_deref())?,
                        topic: kv.topic.clone(),
                        replay: kv.replay_for(host.host(), r.kv_events_replay_endpoint.as_deref()),
                        max_message_bytes: kv.max_message_bytes,
                    })
                });
                wanted.insert(&r.name, (&r.url, target.clone(), kv));
            }
        }
        let stale: Vec<String> = self
            .by_name
            .0
            .iter()
            .filter(|e| match wanted.get(e.key().as_str()) {
                Some((url, ..)) => e.value().url != url.trim_end_matches('/'),
                None => true,
            })
            .map(|e| e.key().clone())
            .collect();
        for name in stale {
            if let Some((_, state)) = self.by_name.0.remove(&name) {
                state.stop_scraping();
                state.pool.clear();
                self.free_ids.push(state.id);
                change.removed.push(state);
            }
        }
        let prior = config.predictor;
        for (name, (url, target, kv)) in wanted {
            if let Some(state) = self.by_name.get(name) {
                state.set_scrape_target(target);
                *state.kv_source.lock() = kv;
                continue;
            }
            let authority = match crate::config::parse_base_url(url) {
                Ok(a) => a,
                Err(_) => continue, // validated before; unreachable in practice
            };
            let id = self.free_ids.pop().unwrap_or_else(|| {
                let id = self.next_id;
                self.next_id += 1;
                id
            });
            let state = Arc::new(ReplicaState::new(id, name, url, authority, prior));
            state.set_scrape_target(target);
            *state.kv_source.lock() = kv;
            self.by_name.0.insert(name.to_owned(), state.clone());
            change.added.push(state);
        }
        change
    }
}

/// A stream's first byte, owed by its replica from when it is sent until it arrives (or the
/// request ends without one): see [`Health::is_stalled`].
#[derive(Debug)]
pub struct FirstByteOwed {
    replica: Arc<ReplicaState>,
}

impl FirstByteOwed {
    /// The stream was sent now; its first byte is overdue after `allowance`.
    pub fn new(replica: Arc<ReplicaState>, allowance: Duration, now: Instant) -> Self {
        replica.health.owe_first_byte(allowance, now);
        Self { replica }
    }

    /// The first byte came: the replica is making progress.
    pub fn arrived(self, now: Instant) {
        self.replica.health.first_byte_arrived(now);
        // Drop settles the debt.
    }
}

impl Drop for FirstByteOwed {
    fn drop(&mut self) {
        self.replica.health.first_byte_settled();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A replica named r0 at an address nothing listens on.
    fn test_replica() -> Arc<ReplicaState> {
        Arc::new(ReplicaState::new(
            0,
            "r0",
            "http://127.0.0.1:1",
            http::uri::Authority::from_static("127.0.0.1:1"),
            TtftPrior::default(),
        ))
    }

    #[test]
    fn a_replica_owing_first_bytes_past_their_allowance_is_stalled_until_one_comes() {
        use crate::state::replica::FirstByteOwed;
        use std::time::{Duration, Instant};
        let replica = test_replica();
        let h = &replica.health;
        let (t0, ms) = (Instant::now(), Duration::from_millis);
        let stalled = |at: Duration| h.is_stalled(t0 + at, "r0");
        let a = FirstByteOwed::new(replica.clone(), ms(100), t0);
        assert!(!stalled(ms(100)));
        assert!(stalled(ms(101)));
        // Another stream sent meanwhile does not reset the clock: the replica showed nothing.
        let b = FirstByteOwed::new(replica.clone(), ms(50), t0 + ms(90));
        assert!(stalled(ms(101)));
        // A first byte is progress: the clock starts again for what is still owed.
        a.arrived(t0 + ms(120));
        assert!(!stalled(ms(200)));
        assert!(stalled(ms(221)));
        // Nothing owed, nothing stalled, however long it has been.
        drop(b);
        assert!(!stalled(ms(10_000)));
        // A stream that ends without a first byte (an error, a timeout) settles its debt too.
        let c = FirstByteOwed::new(replica.clone(), ms(10), t0 + ms(20_000));
        assert!(stalled(ms(20_011)));
        drop(c);
        assert!(!stalled(ms(20_011)));
    }

    #[test]
    fn pending_prefill_counts_what_is_left_of_it_by_the_prefill_clock() {
        use std::time::Duration;
        let replica = test_replica();
        let per_token = replica.ttft.lock().cautious_per_token_s();
        let at = Instant::now();
        let long = PrefillGuard::clocked(replica.clone(), 4000);
        // Just sent: all of it is ahead (the clock ran a moment since, hence the margin).
        assert_eq!(replica.pending_prefill_left(at, per_token), 4000);
        // Half its prefill time later, about half is left; the count still says all.
        let half = at + Duration::from_secs_f64(2000.0 * per_token);
        let left = replica.pending_prefill_left(half, per_token);
        assert!((2000..=2100).contains(&left), "{left}");
        assert_eq!(replica.pending_prefill_tokens(), 4000);
        // A second prompt queues behind what is left of the first.
        let short = PrefillGuard::clocked(replica.clone(), 1000);
        let left = replica.pending_prefill_left(half, per_token);
        assert!((3000..=3100).contains(&left), "{left}");
        // Past the clock: nothing left by it, though no first token has come yet.
        let late = at + Duration::from_secs_f64(10_000.0 * per_token);
        assert_eq!(replica.pending_prefill_left(late, per_token), 0);
        // Never more than the count, and the count alone without a rate.
        drop(long);
        assert!(replica.pending_prefill_left(half, per_token) <= 1000);
        assert_eq!(replica.pending_prefill_left(half, 0.0), 1000);
        drop(short);
        assert_eq!(replica.pending_prefill_left(at, per_token), 0);
        // Nothing pending: the clock starts again from now, not from where it was (thousands of
        // tokens' time ahead, had the engine been quicker than the clock).
        let again = Instant::now();
        let _again = PrefillGuard::clocked(replica.clone(), 100);
        let after = again + Duration::from_secs_f64(1000.0 * per_token);
        assert_eq!(replica.pending_prefill_left(after, per_token), 0);
    }

    #[test]
    fn a_load_stays_fresh_for_four_stretched_scrape_pauses() {
        use std::time::{Duration, Instant};
        let replica = test_replica();
        let at = Instant::now();
        let load = EngineLoad {
            running: 2.0,
            waiting: 0.0,
            kv_cache_usage: 0.5,
        };
        replica.set_engine_load(Some(load), at);
        let stale_after = Duration::from_millis(300);
        let later = at + Duration::from_millis(1000);
        assert_eq!(replica.engine_load(later, stale_after), None);
        replica.set_scrape_every(Duration::from_millis(75));
        assert_eq!(replica.engine_load(later, stale_after), None);
        replica.set_scrape_every(Duration::from_millis(400));
        assert_eq!(replica.scrape_every(), Some(Duration::from_millis(400)));
        assert_eq!(replica.engine_load(later, stale_after), Some(load));
        assert_eq!(
            replica.engine_load(at + Duration::from_millis(1700), stale_after),
            None
        );
    }

    #[test]
    fn guards_release_what_they_hold() {
        let replica = test_replica();
        let a = InflightGuard::new(replica.clone(), 300, 100);
        let a_prefill = PrefillGuard::new(replica.clone(), 100);
        let b = InflightGuard::new(replica.clone(), 50, 20);
        let b_prefill = PrefillGuard::new(replica.clone(), 20);
        assert_eq!(replica.pending_prefill_tokens(), 120);
        drop(a_prefill);
        // The uncached tokens stay counted until the response ends, not the first token.
        assert_eq!(replica.inflight_uncached_tokens(), 120);
        assert_eq!(replica.pending_prefill_tokens(), 20);
        assert_eq!(replica.inflight_requests(), 2);
        drop(b);
        drop(b_prefill);
        assert_eq!(replica.pending_prefill_tokens(), 0);
        assert_eq!(replica.inflight_tokens(), 300);
        assert_eq!(replica.inflight_uncached_tokens(), 100);
        drop(a);
        assert_eq!(
            (
                replica.inflight_requests(),
                replica.inflight_tokens(),
                replica.inflight_uncached_tokens()
            ),
            (0, 0, 0)
        );
    }
}
