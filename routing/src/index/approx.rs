//! [`ApproxIndex`], the index that learns from the router's own decisions.
//!
//! # How [`ApproxIndex`] is laid out
//! - One map `BlockHash → Holders`: the replicas holding the block, each with the slot of its
//!   LRU node (inline for the common single holder, a sorted boxed slice for a few, plus a
//!   bitset for many). One probe answers "who holds block `i`" for all candidates at once, and
//!   finds a replica's node to refresh or evict, so no per-replica map is needed.
//! - Per replica, an LRU of its blocks (`warmpath_lru::SlabLru`: a slab of (block hash, last
//!   use) linked by index, with a free list); eviction takes the least recently routed.
//!
//! [`PrefixIndex::on_routed`] touches a prompt's blocks from last to first, so a prompt's first
//! blocks are always more recent than its later ones and eviction eats chains from the tail.
//! With chained hashes that gives the index its key invariant: **if a replica holds block `i` of
//! a chain it holds blocks `0..i` too**, so the set of holders shrinks monotonically along a
//! prompt. [`ApproxIndex::longest_prefix`] exploits it: it bisects the block positions and only
//! descends where the (candidate-restricted) holder set changes, which costs
//! `O(k · log(n / k))` map probes for `k` distinct match lengths over `n` blocks instead of
//! `n × candidates`.
//!
//! # Memory accounting
//! Each (replica, block) entry is charged [`ENTRY_BYTES`]: its LRU node (20 B), its holder record
//! (8 B), a whole map slot (at the table's 7/8 maximum load) and 10 B towards a shared block's
//! holder-list overhead (see `SHARE_BYTES`). The map slot is shared by all holders of a
//! block, so charging it to every entry over-estimates when blocks are shared, never
//! under-estimates. Not counted: the map's spare capacity between growth steps (it grows by
//! doubling, so right after a growth its slots take up to twice their share, and the whole index
//! up to ~1.55× the estimate; `examples/index_memory.rs` measured 1.25× at a full 128 MiB
//! bound). [`ApproxIndex::allocated_bytes`] reports the figure from the table's actual capacity.

use super::block_key::BlockKey;
use super::holders::{and, Bits, Holder, Holders, SHARE_BYTES, WORDS};
use super::lru::{oldest_use, Held, ReplicaLru};
use super::{CacheRoom, IndexLimits, IndexStats, PrefixIndex, INLINE_REPLICAS};
use crate::{BlockHash, ReplicaId};
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::mem::size_of;
use warmpath_lru::MAX_SLOTS;

const SLOT_BYTES: usize = size_of::<(BlockHash, Holders)>() + 1;
/// Estimated bytes per (replica, block) entry; see the module docs.
pub const ENTRY_BYTES: usize =
    ReplicaLru::ENTRY_BYTES + size_of::<Holder>() + SLOT_BYTES.div_ceil(7) * 8 + SHARE_BYTES;

// The estimate above is only as good as these layouts; keep them from growing unnoticed.
const _: () = assert!(ReplicaLru::ENTRY_BYTES == 20);
const _: () = assert!(size_of::<Holders>() <= 24);

type HolderMap = HashMap<BlockHash, Holders, BlockKey>;

/// Remove `replica` from `hash`'s holders, dropping the entry when none is left.
fn forget(holders: &mut HolderMap, hash: BlockHash, replica: ReplicaId) {
    if let Entry::Occupied(mut e) = holders.entry(hash) {
        if e.get_mut().remove(replica) {
            e.remove();
        }
    }
}

/// The approximate index: per replica, an LRU of block hashes bounded in bytes.
#[derive(Debug)]
pub struct ApproxIndex {
    limits: IndexLimits,
    holders: HolderMap,
    /// Keyed by the router's own replica numbers (no client chooses them), with the block map's
    /// cheap hasher: every decision reads each candidate's entry here (`room`), and SipHash made
    /// that a third of a 256-replica decision.
    replicas: HashMap<ReplicaId, ReplicaLru, BlockKey>,
    /// Replicas whose engines hold fewer blocks than the byte bound allows: their own caps,
    /// so that the index forgets about when the engine does.
    caps: HashMap<ReplicaId, usize, BlockKey>,
    entries: usize,
    evictions: u64,
    /// Counts [`PrefixIndex::on_routed`] calls (wrapping): the time of the LRU nodes' last use.
    clock: u32,
}

impl ApproxIndex {
    pub fn new(limits: IndexLimits) -> Self {
        Self {
            limits,
            holders: HashMap::with_hasher(BlockKey::random()),
            replicas: HashMap::with_hasher(BlockKey::random()),
            caps: HashMap::with_hasher(BlockKey::random()),
            entries: 0,
            evictions: 0,
            clock: 0,
        }
    }

    /// What a new prompt routed to `replica` would displace there: the blocks it may add
    /// before the replica's bound evicts anything, and how long ago (in routings) the block
    /// it would evict first was last used. A replica the index holds nothing for has its
    /// whole bound free.
    pub fn room(&self, replica: ReplicaId) -> CacheRoom {
        let lru = self.replicas.get(&replica);
        let held = lru.map_or(0, ReplicaLru::len);
        CacheRoom {
            free_blocks: self
                .cap_of(replica)
                .saturating_sub(held)
                .min(u32::MAX as usize) as u32,
            idle_routings: lru
                .and_then(oldest_use)
                .map_or(u32::MAX, |used| self.clock.wrapping_sub(used)),
        }
    }

    /// Change the bound (configuration reload); shrinking evicts at once.
    pub fn set_limits(&mut self, limits: IndexLimits) {
        self.limits = limits;
        let ids: Vec<ReplicaId> = self.replicas.keys().copied().collect();
        for id in ids {
            self.trim(id);
        }
    }

    /// Hold at most `entries` blocks for `replica` (below the byte bound; `None`: the byte
    /// bound alone): an engine's KV capacity in index blocks. Lowering it evicts at once.
    pub fn set_replica_capacity(&mut self, replica: ReplicaId, entries: Option<usize>) {
        let old = self.caps.get(&replica).copied();
        if old == entries {
            return;
        }
        match entries {
            Some(n) => self.caps.insert(replica, n.max(1)),
            None => self.caps.remove(&replica),
        };
        self.trim(replica);
    }

    /// `replica`'s bound: the byte bound's, or its own when lower.
    fn cap_of(&self, replica: ReplicaId) -> usize {
        let global = self.entries_per_replica();
        match self.caps.get(&replica) {
            Some(&own) if global > 0 => own.min(global),
            _ => global,
        }
    }

    /// Evict `replica`'s oldest blocks down to its bound.
    fn trim(&mut self, id: ReplicaId) {
        let cap = self.cap_of(id);
        let held = self.replica_entries(id);
        if cap == 0 {
            self.remove_replica(id);
            self.evictions += held as u64;
            return;
        }
        if held <= cap {
            return;
        }
        let Some(lru) = self.replicas.get_mut(&id) else {
            return;
        };
        while lru.len() > cap {
            let Some(old) = lru.pop_oldest() else { break };
            forget(&mut self.holders, old.hash(), id);
            self.entries -= 1;
            self.evictions += 1;
        }
        // Compact so the slab's memory goes back too, re-pointing the holders' slots.
        let mut fresh = ReplicaLru::new();
        for (_, &held) in lru.oldest_first() {
            let slot = fresh.push_newest(held, cap);
            if let Some(h) = self.holders.get_mut(&held.hash()) {
                h.set_node(id, slot);
            }
        }
        *lru = fresh;
    }

    /// Pre-size the block map for `entries` more blocks. The map grows by doubling, and a
    /// doubling rehashes every entry at once (tens of milliseconds per million entries), so a
    /// router that knows its fleet can reserve `replicas × entries_per_replica()` at start-up to
    /// keep that pause off the request path.
    pub fn reserve_entries(&mut self, entries: usize) {
        self.holders.reserve(entries);
    }

    pub fn limits(&self) -> IndexLimits {
        self.limits
    }

    /// How many (replica, block) entries one replica may hold under the current limits.
    pub fn entries_per_replica(&self) -> usize {
        (self.limits.max_bytes_per_replica / ENTRY_BYTES).min(MAX_SLOTS)
    }

    /// Whether `replica` holds the block `hash` (one probe; used by tests and debugging).
    pub fn contains(&self, replica: ReplicaId, hash: BlockHash) -> bool {
        self.holders
            .get(&hash)
            .is_some_and(|h| h.node_of(replica).is_some())
    }

    /// Entries held for one replica.
    pub fn replica_entries(&self, replica: ReplicaId) -> usize {
        self.replicas.get(&replica).map_or(0, ReplicaLru::len)
    }

    /// Heap bytes actually reserved by the index, from its tables' capacities (includes the
    /// spare capacity that [`IndexStats::bytes`] leaves out). Walks every entry: for metrics
    /// and benchmarks, not for the request path.
    pub fn allocated_bytes(&self) -> usize {
        // hashbrown keeps capacity at 7/8 of its buckets.
        self.holders.capacity().div_ceil(7) * 8 * SLOT_BYTES
            + self
                .holders
                .values()
                .map(Holders::heap_bytes)
                .sum::<usize>()
            + self
                .replicas
                .values()
                .map(ReplicaLru::allocated_bytes)
                .sum::<usize>()
    }

    /// Blocks held by at least one replica.
    #[cfg(test)]
    pub(super) fn block_count(&self) -> usize {
        self.holders.len()
    }

    fn low_set(&self, hash: BlockHash, mask: &Bits) -> Bits {
        match self.holders.get(&hash) {
            Some(h) => h.bits(mask),
            None => [0; WORDS],
        }
    }

    /// Match lengths of all inline-id candidates (bits of `mask`) by bisection over positions.
    fn bisect(
        &self,
        hashes: &[BlockHash],
        mask: &Bits,
        depth: &mut [u32; INLINE_REPLICAS as usize],
    ) {
        let first = self.low_set(hashes[0], mask);
        if first == [0; WORDS] {
            return;
        }
        let n = hashes.len();
        // Stack of (lo, set at lo, hi, set at hi) intervals, lo < hi, set(lo) ⊇ set(hi), where
        // position `n` is a virtual block nobody holds.
        let mut stack: Vec<(usize, Bits, usize, Bits)> = Vec::with_capacity(64);
        stack.push((0, first, n, [0; WORDS]));
        while let Some((lo, s_lo, hi, s_hi)) = stack.pop() {
            if s_lo == s_hi {
                continue;
            }
            if hi - lo == 1 {
                for (w, (&a, &b)) in s_lo.iter().zip(s_hi.iter()).enumerate() {
                    let mut ended = a & !b;
                    while ended != 0 {
                        let bit = ended.trailing_zeros() as usize;
                        depth[w * 64 + bit] = (lo + 1) as u32;
                        ended &= ended - 1;
                    }
                }
                continue;
            }
            let mid = lo + (hi - lo) / 2;
            // Intersecting keeps the walk well-defined even if the invariant were broken
            // (e.g. a hash collision): each bit then ends exactly once.
            let s_mid = and(&self.low_set(hashes[mid], mask), &s_lo);
            stack.push((mid, s_mid, hi, and(&s_hi, &s_mid)));
            stack.push((lo, s_lo, mid, s_mid));
        }
    }

    /// Match length of one candidate by binary search (ids outside the inline bitset).
    fn search_one(&self, hashes: &[BlockHash], replica: ReplicaId) -> u32 {
        let (mut lo, mut hi) = (0usize, hashes.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.contains(replica, hashes[mid]) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo as u32
    }
}

impl PrefixIndex for ApproxIndex {
    fn longest_prefix(&self, hashes: &[BlockHash], candidates: &[ReplicaId], out: &mut [u32]) {
        out.fill(0);
        if hashes.is_empty() || self.holders.is_empty() {
            return;
        }
        let mut mask = [0u64; WORDS];
        for &c in candidates {
            if c < INLINE_REPLICAS {
                mask[(c / 64) as usize] |= 1 << (c % 64);
            }
        }
        let mut depth = [0u32; INLINE_REPLICAS as usize];
        if mask != [0; WORDS] {
            self.bisect(hashes, &mask, &mut depth);
        }
        for (o, &c) in out.iter_mut().zip(candidates) {
            *o = if c < INLINE_REPLICAS {
                depth[c as usize]
            } else {
                self.search_one(hashes, c)
            };
        }
    }

    fn on_routed(&mut self, replica: ReplicaId, hashes: &[BlockHash]) {
        let cap = self.cap_of(replica);
        if cap == 0 || hashes.is_empty() {
            return;
        }
        // One request records at most half of the replica's bound (its first blocks: an engine
        // evicts a finished request's last blocks first), so that a giant prompt, which the
        // engine may well refuse, cannot flush everything else the replica is known to hold.
        let hashes = &hashes[..hashes.len().min(cap.div_ceil(2))];
        self.clock = self.clock.wrapping_add(1);
        let now = self.clock;
        let lru = self.replicas.entry(replica).or_default();
        for &hash in hashes.iter().rev() {
            if let Some(node) = self.holders.get(&hash).and_then(|h| h.node_of(replica)) {
                lru.get_mut(node).used = now;
                lru.touch(node);
                continue;
            }
            if lru.len() >= cap {
                if let Some(old) = lru.pop_oldest() {
                    forget(&mut self.holders, old.hash(), replica);
                    self.entries -= 1;
                    self.evictions += 1;
                }
            }
            let node = lru.push_newest(Held::new(hash, now), cap);
            match self.holders.entry(hash) {
                Entry::Occupied(mut e) => e.get_mut().insert(replica, node),
                Entry::Vacant(e) => {
                    e.insert(Holders::One((replica, node)));
                }
            }
            self.entries += 1;
        }
    }

    fn remove_replica(&mut self, replica: ReplicaId) {
        self.caps.remove(&replica);
        if let Some(lru) = self.replicas.remove(&replica) {
            for (_, held) in lru.oldest_first() {
                forget(&mut self.holders, held.hash(), replica);
            }
            self.entries -= lru.len();
        }
    }

    fn stats(&self) -> IndexStats {
        IndexStats {
            bytes: self.entries * ENTRY_BYTES,
            capacity_bytes: self.replicas.len() * self.limits.max_bytes_per_replica,
            entries: self.entries,
            evictions: self.evictions,
        }
    }
}
