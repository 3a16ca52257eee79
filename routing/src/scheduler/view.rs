//! What the scheduler sees: one [`ReplicaView`] per candidate and the [`RequestView`], and the
//! load signals derived from them. Stale or garbage engine metrics become *unknown* here, once,
//! so that no scorer can mistake them for an idle replica.

use crate::index::CacheRoom;
use crate::predict::TtftModel;
use crate::ReplicaId;

/// Engine-reported load, from scraped metrics; `None` in [`ReplicaView::engine`] when the last
/// scrape is stale or failed (unknown, not zero).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct EngineLoad {
    pub running: f64,
    pub waiting: f64,
    /// 0.0..=1.0
    pub kv_cache_usage: f64,
}

/// What the scheduler knows about one candidate replica.
#[derive(Debug, Clone)]
pub struct ReplicaView<'a> {
    pub id: ReplicaId,
    /// The replica's identity as every router knows it (a hash of its name; `id` is this
    /// router's own numbering): new prefixes' homes are chosen by it, so that routers agree.
    pub key: u64,
    /// Requests this router has in flight to the replica.
    pub inflight_requests: u32,
    /// Prompt + max output tokens of those requests.
    pub inflight_tokens: u64,
    pub engine: Option<EngineLoad>,
    /// Leading prompt blocks the replica holds (from the prefix index).
    pub matched_blocks: u32,
    /// Uncached prompt tokens of this router's requests on the replica that have not produced a
    /// first token yet: prefill work queued ahead of a new request. A queue of cache hits is
    /// cheap and a queue of misses is not; counting requests alone cannot tell them apart.
    pub pending_prefill_tokens: u64,
    /// Uncached prompt tokens of this router's requests on the replica, from dispatch to the end
    /// of the response: the KV the live requests added to the replica's cache. A prefix shared
    /// by live requests counts once (only the first paid it), which is how Dynamo counts its
    /// active blocks.
    pub inflight_uncached_tokens: u64,
    /// What the replica's cache can take before it evicts, and how cold its next victim is
    /// (from the approximate index, bounded by the engine's KV capacity); `None`: unknown.
    pub room: Option<CacheRoom>,
    pub ttft: &'a TtftModel,
}

/// A replica's [`ReplicaView::key`] from its name: the same in every router.
pub fn replica_key(name: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(name.as_bytes())
}

/// The request as the scheduler sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RequestView {
    /// Estimated prompt tokens.
    pub prompt_tokens: u32,
    /// Full blocks in the prompt.
    pub blocks: u32,
    /// Estimated tokens per block.
    pub tokens_per_block: u32,
}

/// Engine-reported counts above this are treated as garbage (unknown), not as load.
pub const MAX_ENGINE_COUNT: f64 = 1e9;

impl ReplicaView<'_> {
    /// Requests ahead of a new one on this replica: the engine's running + waiting when its
    /// metrics are fresh (never less than the router's own in-flight count, which may be newer
    /// than the last scrape), else the router's own in-flight count. The router should pass this
    /// same value to [`TtftModel::observe`].
    pub fn queued_ahead(&self) -> f64 {
        let own = f64::from(self.inflight_requests);
        match self.fresh_engine() {
            Some(e) => (e.running + e.waiting).max(own),
            None => own,
        }
    }

    /// Tokens a new request's prefill waits for on this replica plus its own `uncached`: what
    /// the TTFT model's per-token term multiplies. The router passes the same sum to
    /// [`TtftModel::observe`].
    pub fn prefill_tokens(&self, uncached: u32) -> u32 {
        self.pending_prefill_tokens
            .saturating_add(u64::from(uncached))
            .min(u64::from(u32::MAX)) as u32
    }

    /// Predicted wait before the replica starts a new request: requests ahead of it plus the
    /// prefill work they still need, seconds.
    pub fn predicted_wait(&self) -> f64 {
        self.ttft.predict_wait(self.queued_ahead())
            + self.ttft.per_token_s() * self.pending_prefill_tokens.min(u64::from(u32::MAX)) as f64
    }

    /// Engine metrics if present and sane: non-finite, negative or absurd (over
    /// [`MAX_ENGINE_COUNT`]) values make them unknown.
    pub(super) fn fresh_engine(&self) -> Option<EngineLoad> {
        self.engine.filter(|e| {
            [e.running, e.waiting, e.kv_cache_usage]
                .iter()
                .all(|v| v.is_finite() && (0.0..=MAX_ENGINE_COUNT).contains(v))
        })
    }

    /// Requests waiting on the replica. A scrape is up to one interval old, so during a burst
    /// the router's own in-flight requests beyond what the engine reports running are counted
    /// as waiting too: a burst must not all land on one replica before the next scrape.
    pub(super) fn waiting(&self) -> f64 {
        let own = f64::from(self.inflight_requests);
        match self.fresh_engine() {
            Some(e) => e.waiting.max(own - e.running),
            None => own,
        }
    }

    pub(super) fn kv_usage(&self) -> Option<f64> {
        self.fresh_engine().map(|e| e.kv_cache_usage.min(1.0))
    }
}

impl RequestView {
    /// Tokens left to prefill on a replica that holds `matched_blocks` leading blocks.
    pub fn uncached_tokens(&self, matched_blocks: u32) -> u32 {
        let cached = u64::from(matched_blocks.min(self.blocks)) * u64::from(self.tokens_per_block);
        (u64::from(self.prompt_tokens).saturating_sub(cached)) as u32
    }
}
