//! The prefix index: which replica holds which prompt blocks.
//!
//! [`PrefixIndex`] is the seam between the two ways of knowing: [`ApproxIndex`] learns from the
//! router's own decisions (a replica that was sent a prompt is assumed to hold its blocks), and a
//! later implementation fed by engine KV events will answer the same queries from what the engines
//! report. Both are bounded in memory by configuration: peers shipped unbounded indexes, we don't.
//!
//! # How [`ApproxIndex`] is laid out
//! - One map `BlockHash → Holders`: the replicas holding the block, each with the slot of its
//!   LRU node (inline for the common single holder, a sorted boxed slice for a few, plus a
//!   bitset for many). One probe
//!   answers "who holds block `i`" for all candidates at once, and finds a replica's node to
//!   refresh or evict, so no per-replica map is needed.
//! - Per replica, an LRU: a slab of nodes (block hash, prev, next) linked most-recent first,
//!   with a free list; eviction pops the tail.
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
//! Each (replica, block) entry is charged [`ENTRY_BYTES`]: its LRU node (16 B), its holder record
//! (8 B), a whole map slot (at the table's 7/8 maximum load) and 10 B towards a shared block's
//! holder-list overhead (see `SHARE_BYTES`). The map slot is shared by all holders of a
//! block, so charging it to every entry over-estimates when blocks are shared, never
//! under-estimates. Not counted: the map's spare capacity between growth steps (it grows by
//! doubling, so right after a growth its slots take up to twice their share, and the whole index
//! up to ~1.55× the estimate; `examples/index_memory.rs` measured 1.25× at a full 128 MiB
//! bound). [`ApproxIndex::allocated_bytes`] reports the figure from the table's actual capacity.

use crate::{BlockHash, ReplicaId};
use std::collections::hash_map::{Entry, RandomState};
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::mem::size_of;

/// Memory bound of an index, in bytes of index state per replica (estimated from the structures'
/// sizes, including per-entry overhead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexLimits {
    pub max_bytes_per_replica: usize,
}

/// What the index holds now, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexStats {
    /// Estimated bytes in use, all replicas together.
    pub bytes: usize,
    /// The configured bound, all replicas together.
    pub capacity_bytes: usize,
    /// (replica, block) entries held.
    pub entries: usize,
    /// Entries dropped to stay within the bound since creation.
    pub evictions: u64,
}

/// What the scheduler needs to know about cached prefixes, whoever maintains it.
///
/// The second implementation this seam is for, an index fed by engine KV events
/// (`warmpath-kv-events` decodes vLLM's `BlockStored` / `BlockRemoved` / `AllBlocksCleared`),
/// answers the same question from the engines' own block hashes: the caller passes the
/// request's hashes in the engine's scheme (token blocks hashed the engine's way, which needs the
/// model's tokenizer, as llm-d's precise scorer does), the index treats `BlockStored` as
/// insertion, `BlockRemoved` as eviction and `AllBlocksCleared` as
/// [`PrefixIndex::remove_replica`], ignores
/// [`PrefixIndex::on_routed`], and keeps the same byte bound. The contract for any implementation:
/// `longest_prefix` answers at most `hashes.len()` for every candidate and 0 for unknown ones,
/// memory stays within `stats().capacity_bytes`, and no method panics on any input.
pub trait PrefixIndex: Send + Sync {
    /// For each candidate, the number of leading blocks of `hashes` it holds; `out[i]` answers
    /// `candidates[i]`. `out.len() == candidates.len()`.
    fn longest_prefix(&self, hashes: &[BlockHash], candidates: &[ReplicaId], out: &mut [u32]);

    /// The router sent a prompt with these blocks to `replica`. The approximate index records
    /// them (most recently used); an index fed by engine events ignores this.
    fn on_routed(&mut self, replica: ReplicaId, hashes: &[BlockHash]);

    /// Forget everything about `replica` (it left the pool, or its engine cleared its cache).
    fn remove_replica(&mut self, replica: ReplicaId);

    fn stats(&self) -> IndexStats;
}

/// Replica ids below this are matched with a bitset bisection shared by all candidates (the
/// fast path); larger ids work too, through a per-candidate binary search.
pub const INLINE_REPLICAS: u32 = 256;
const WORDS: usize = (INLINE_REPLICAS / 64) as usize;
type Bits = [u64; WORDS];

const SLOT_BYTES: usize = size_of::<(BlockHash, Holders)>() + 1;
/// Estimated bytes per (replica, block) entry; see the module docs.
pub const ENTRY_BYTES: usize =
    size_of::<Node>() + size_of::<Holder>() + SLOT_BYTES.div_ceil(7) * 8 + SHARE_BYTES;
/// Per-holder share of a shared block's holder-list overhead, worst case over the layouts: a
/// `Few` list of k >= 2 pays one 16 B allocation header (<= 8 B each); a `Many` list of k > 8
/// pays its 56 B struct, two 16 B allocation headers and an exact-capacity list (< 10 B each).
const SHARE_BYTES: usize = 10;

const NIL: u32 = u32::MAX;

// The estimate above is only as good as these layouts; keep them from growing unnoticed.
const _: () = assert!(size_of::<Node>() == 16);
const _: () = assert!(size_of::<Holders>() <= 24);

/// A replica holding a block, and the slot of the block's node in that replica's LRU.
type Holder = (ReplicaId, u32);

/// Up to this many holders are kept as a plain sorted list (scanned); more get a bitset too.
const FEW: usize = 8;

/// The replicas holding one block. Never empty: an entry without holders leaves the map.
#[derive(Debug, Clone)]
enum Holders {
    One(Holder),
    /// 2..=FEW holders, sorted by replica id.
    Few(Box<[Holder]>),
    /// More than FEW/2 holders (hysteresis), with a bitset of the inline ids so that a lookup
    /// costs the same for a block every replica holds.
    Many(Box<ManyHolders>),
}

#[derive(Debug, Clone)]
struct ManyHolders {
    bits: Bits,
    /// Sorted by replica id.
    list: Vec<Holder>,
}

fn bit(r: ReplicaId) -> Option<(usize, u64)> {
    (r < INLINE_REPLICAS).then(|| ((r / 64) as usize, 1u64 << (r % 64)))
}

impl Holders {
    fn as_slice(&self) -> &[Holder] {
        match self {
            Holders::One(h) => std::slice::from_ref(h),
            Holders::Few(v) => v,
            Holders::Many(m) => &m.list,
        }
    }

    fn as_mut_slice(&mut self) -> &mut [Holder] {
        match self {
            Holders::One(h) => std::slice::from_mut(h),
            Holders::Few(v) => v,
            Holders::Many(m) => &mut m.list,
        }
    }

    fn position(&self, r: ReplicaId) -> Option<usize> {
        match self {
            Holders::One(h) => (h.0 == r).then_some(0),
            Holders::Few(v) => v.iter().position(|h| h.0 == r),
            Holders::Many(m) => m.list.binary_search_by_key(&r, |h| h.0).ok(),
        }
    }

    fn node_of(&self, r: ReplicaId) -> Option<u32> {
        self.position(r).map(|at| self.as_slice()[at].1)
    }

    fn set_node(&mut self, r: ReplicaId, node: u32) {
        if let Some(at) = self.position(r) {
            self.as_mut_slice()[at].1 = node;
        }
    }

    /// Add `r` (known absent).
    fn insert(&mut self, r: ReplicaId, node: u32) {
        if let Holders::Many(m) = self {
            let at = m.list.partition_point(|h| h.0 < r);
            // Exact capacity keeps the per-holder overhead within SHARE_BYTES; a block gains
            // holders rarely, so the copy is cheap overall.
            m.list.reserve_exact(1);
            m.list.insert(at, (r, node));
            if let Some((w, b)) = bit(r) {
                m.bits[w] |= b;
            }
            return;
        }
        let list = self.as_slice();
        let at = list.partition_point(|h| h.0 < r);
        let mut grown = Vec::with_capacity(list.len() + 1);
        grown.extend_from_slice(&list[..at]);
        grown.push((r, node));
        grown.extend_from_slice(&list[at..]);
        *self = Holders::from_sorted(grown);
    }

    fn from_sorted(list: Vec<Holder>) -> Self {
        match list.len() {
            0 | 1 => Holders::One(list.first().copied().unwrap_or((NIL, NIL))),
            n if n <= FEW => Holders::Few(list.into_boxed_slice()),
            _ => {
                let mut bits = [0; WORDS];
                for &(r, _) in &list {
                    if let Some((w, b)) = bit(r) {
                        bits[w] |= b;
                    }
                }
                Holders::Many(Box::new(ManyHolders { bits, list }))
            }
        }
    }

    /// Remove `r`; `true` when no holder is left.
    fn remove(&mut self, r: ReplicaId) -> bool {
        let Some(at) = self.position(r) else {
            return false;
        };
        match self {
            Holders::One(_) => return true,
            Holders::Few(v) => {
                let mut shrunk = v.to_vec();
                shrunk.remove(at);
                *self = Holders::from_sorted(shrunk);
            }
            Holders::Many(m) => {
                m.list.remove(at);
                if let Some((w, b)) = bit(r) {
                    m.bits[w] &= !b;
                }
                if m.list.len() <= FEW / 2 {
                    *self = Holders::from_sorted(std::mem::take(&mut m.list));
                } else {
                    m.list.shrink_to_fit();
                }
            }
        }
        false
    }

    /// The holders among `mask`'s bits.
    fn bits(&self, mask: &Bits) -> Bits {
        let mut out = [0; WORDS];
        match self {
            Holders::Many(m) => return and(&m.bits, mask),
            _ => {
                for &(r, _) in self.as_slice() {
                    if let Some((w, b)) = bit(r) {
                        out[w] |= mask[w] & b;
                    }
                }
            }
        }
        out
    }

    fn heap_bytes(&self) -> usize {
        // Each allocation also pays the allocator's overhead, taken as 16 bytes.
        match self {
            Holders::One(_) => 0,
            Holders::Few(v) => v.len() * size_of::<Holder>() + 16,
            Holders::Many(m) => {
                size_of::<ManyHolders>() + 16 + m.list.capacity() * size_of::<Holder>() + 16
            }
        }
    }
}

/// A keyed multiply-fold hasher for block hashes. Keys are already xxh3 outputs, so one
/// multiplication mixes enough; the per-process random key keeps crafted prompts from
/// steering many blocks into one bucket chain.
#[derive(Debug, Clone, Copy)]
struct BlockKey {
    key: u64,
}

impl BlockKey {
    fn random() -> Self {
        Self {
            key: RandomState::new().hash_one(0x5eed_u64) | 1,
        }
    }
}

impl BuildHasher for BlockKey {
    type Hasher = BlockKeyHasher;
    fn build_hasher(&self) -> BlockKeyHasher {
        BlockKeyHasher {
            key: self.key,
            state: 0,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct BlockKeyHasher {
    key: u64,
    state: u64,
}

impl Hasher for BlockKeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, v: u64) {
        let m = u128::from(v ^ self.key ^ self.state) * u128::from(0x9e37_79b9_7f4a_7c15_u64);
        self.state = (m as u64) ^ ((m >> 64) as u64);
    }

    fn finish(&self) -> u64 {
        self.state
    }
}

#[derive(Debug, Clone, Copy)]
struct Node {
    hash: BlockHash,
    prev: u32,
    next: u32,
}

/// One replica's LRU of block hashes (the hash → node lookup lives in the shared map).
#[derive(Debug)]
struct ReplicaLru {
    nodes: Vec<Node>,
    free: Vec<u32>,
    head: u32,
    tail: u32,
    len: usize,
}

impl Default for ReplicaLru {
    fn default() -> Self {
        Self::new()
    }
}

impl ReplicaLru {
    fn new() -> Self {
        Self {
            nodes: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }

    fn unlink(&mut self, i: u32) {
        let Node { prev, next, .. } = self.nodes[i as usize];
        match prev {
            NIL => self.head = next,
            p => self.nodes[p as usize].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.nodes[n as usize].prev = prev,
        }
    }

    fn link_front(&mut self, i: u32) {
        let old = self.head;
        let node = &mut self.nodes[i as usize];
        node.prev = NIL;
        node.next = old;
        match old {
            NIL => self.tail = i,
            o => self.nodes[o as usize].prev = i,
        }
        self.head = i;
    }

    fn touch(&mut self, i: u32) {
        if self.head != i {
            self.unlink(i);
            self.link_front(i);
        }
    }

    /// Drop the least recently used hash; `None` when empty.
    fn pop_back(&mut self) -> Option<BlockHash> {
        let i = self.tail;
        if i == NIL {
            return None;
        }
        self.unlink(i);
        self.free.push(i);
        self.len -= 1;
        Some(self.nodes[i as usize].hash)
    }

    /// Insert a hash (known absent) as most recently used; returns its slot. `cap` bounds the
    /// slab's growth so that its spare capacity stays within the replica's bound.
    fn push_front(&mut self, hash: BlockHash, cap: usize) -> u32 {
        let node = Node {
            hash,
            prev: NIL,
            next: NIL,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                if self.nodes.len() == self.nodes.capacity() {
                    let room = cap.saturating_sub(self.nodes.len());
                    self.nodes
                        .reserve_exact(self.nodes.len().max(64).min(room).max(1));
                }
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        self.link_front(i);
        self.len += 1;
        i
    }

    /// Hashes from least to most recently used.
    fn oldest_first(&self) -> Vec<BlockHash> {
        let mut order = Vec::with_capacity(self.len);
        let mut i = self.tail;
        while i != NIL {
            order.push(self.nodes[i as usize].hash);
            i = self.nodes[i as usize].prev;
        }
        order
    }

    fn allocated_bytes(&self) -> usize {
        self.nodes.capacity() * size_of::<Node>() + self.free.capacity() * size_of::<u32>()
    }
}

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
    replicas: HashMap<ReplicaId, ReplicaLru>,
    entries: usize,
    evictions: u64,
}

impl ApproxIndex {
    pub fn new(limits: IndexLimits) -> Self {
        Self {
            limits,
            holders: HashMap::with_hasher(BlockKey::random()),
            replicas: HashMap::new(),
            entries: 0,
            evictions: 0,
        }
    }

    /// Change the bound (configuration reload); shrinking evicts at once.
    pub fn set_limits(&mut self, limits: IndexLimits) {
        self.limits = limits;
        let cap = self.entries_per_replica();
        let ids: Vec<ReplicaId> = self.replicas.keys().copied().collect();
        for id in ids {
            let held = self.replica_entries(id);
            if cap == 0 {
                self.remove_replica(id);
                self.evictions += held as u64;
                continue;
            }
            if held <= cap {
                continue;
            }
            let Some(lru) = self.replicas.get_mut(&id) else {
                continue;
            };
            while lru.len > cap {
                let Some(hash) = lru.pop_back() else { break };
                forget(&mut self.holders, hash, id);
                self.entries -= 1;
                self.evictions += 1;
            }
            // Compact so the slab's memory goes back too, re-pointing the holders' slots.
            let mut fresh = ReplicaLru::new();
            for hash in lru.oldest_first() {
                let slot = fresh.push_front(hash, cap);
                if let Some(h) = self.holders.get_mut(&hash) {
                    h.set_node(id, slot);
                }
            }
            *lru = fresh;
        }
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
        (self.limits.max_bytes_per_replica / ENTRY_BYTES).min(NIL as usize)
    }

    /// Whether `replica` holds the block `hash` (one probe; used by tests and debugging).
    pub fn contains(&self, replica: ReplicaId, hash: BlockHash) -> bool {
        self.holders
            .get(&hash)
            .is_some_and(|h| h.node_of(replica).is_some())
    }

    /// Entries held for one replica.
    pub fn replica_entries(&self, replica: ReplicaId) -> usize {
        self.replicas.get(&replica).map_or(0, |l| l.len)
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

fn and(a: &Bits, b: &Bits) -> Bits {
    let mut out = [0; WORDS];
    for (o, (x, y)) in out.iter_mut().zip(a.iter().zip(b.iter())) {
        *o = x & y;
    }
    out
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
        let cap = self.entries_per_replica();
        if cap == 0 || hashes.is_empty() {
            return;
        }
        // Blocks past the bound would be evicted by this very call (the first blocks are
        // touched last, so they are the ones that stay): skip them.
        let hashes = &hashes[..hashes.len().min(cap)];
        let lru = self.replicas.entry(replica).or_default();
        for &hash in hashes.iter().rev() {
            if let Some(node) = self.holders.get(&hash).and_then(|h| h.node_of(replica)) {
                lru.touch(node);
                continue;
            }
            if lru.len >= cap {
                if let Some(old) = lru.pop_back() {
                    forget(&mut self.holders, old, replica);
                    self.entries -= 1;
                    self.evictions += 1;
                }
            }
            let node = lru.push_front(hash, cap);
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
        if let Some(lru) = self.replicas.remove(&replica) {
            for hash in lru.oldest_first() {
                forget(&mut self.holders, hash, replica);
            }
            self.entries -= lru.len;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::BlockHasher;
    use proptest::prelude::*;

    fn index_with_entries(entries: usize) -> ApproxIndex {
        ApproxIndex::new(IndexLimits {
            max_bytes_per_replica: entries * ENTRY_BYTES,
        })
    }

    fn chain(text: &str) -> Vec<BlockHash> {
        BlockHasher::new(1).hash_text(text).hashes
    }

    fn matches(ix: &ApproxIndex, hashes: &[BlockHash], candidates: &[ReplicaId]) -> Vec<u32> {
        let mut out = vec![u32::MAX; candidates.len()];
        ix.longest_prefix(hashes, candidates, &mut out);
        out
    }

    /// Linear reference: count leading blocks held, per candidate.
    fn brute(ix: &ApproxIndex, hashes: &[BlockHash], candidates: &[ReplicaId]) -> Vec<u32> {
        candidates
            .iter()
            .map(|&c| hashes.iter().take_while(|&&h| ix.contains(c, h)).count() as u32)
            .collect()
    }

    #[test]
    fn longest_prefix_per_candidate() {
        let mut ix = index_with_entries(1000);
        let sys = chain("system prompt, then question one");
        let other = chain("system prompt, then question two");
        ix.on_routed(3, &sys);
        ix.on_routed(7, &other);
        let shared = "system prompt, then question ".len() as u32;
        assert_eq!(
            matches(&ix, &sys, &[3, 7, 9]),
            vec![sys.len() as u32, shared, 0]
        );
        assert_eq!(
            matches(&ix, &other, &[7, 3]),
            vec![other.len() as u32, shared]
        );
        assert_eq!(matches(&ix, &chain("unrelated"), &[3, 7]), vec![0, 0]);
        assert_eq!(matches(&ix, &[], &[3, 7]), vec![0, 0]);
        assert_eq!(matches(&ix, &sys, &[]), Vec::<u32>::new());
        // A longer prompt than what was routed matches only the routed part.
        let longer = chain("system prompt, then question one, and a follow-up");
        assert_eq!(matches(&ix, &longer, &[3]), vec![sys.len() as u32]);
        let s = ix.stats();
        assert_eq!(s.entries, sys.len() + other.len());
        assert_eq!(s.bytes, s.entries * ENTRY_BYTES);
        assert_eq!(s.capacity_bytes, 2 * 1000 * ENTRY_BYTES);
        assert_eq!(s.evictions, 0);
    }

    #[test]
    fn short_out_slice_is_filled_not_overrun() {
        let mut ix = index_with_entries(100);
        let h = chain("abcdef");
        ix.on_routed(1, &h);
        let mut out = [9u32; 1];
        ix.longest_prefix(&h, &[1, 2], &mut out);
        assert_eq!(out, [6]);
    }

    #[test]
    fn lru_evicts_least_recent_prompt_first() {
        let mut ix = index_with_entries(10);
        let a = chain("aaaaa");
        let b = chain("bbbbb");
        let c = chain("ccccc");
        ix.on_routed(0, &a);
        ix.on_routed(0, &b);
        // Touch a again so b is now the oldest.
        ix.on_routed(0, &a);
        ix.on_routed(0, &c);
        assert_eq!(matches(&ix, &a, &[0]), vec![5]);
        assert_eq!(matches(&ix, &b, &[0]), vec![0]);
        assert_eq!(matches(&ix, &c, &[0]), vec![5]);
        let s = ix.stats();
        assert_eq!(s.entries, 10);
        assert_eq!(s.evictions, 5);
        assert!(s.bytes <= s.capacity_bytes);
    }

    #[test]
    fn eviction_eats_chains_from_the_tail() {
        let mut ix = index_with_entries(8);
        let a = chain("aaaaaa");
        ix.on_routed(0, &a);
        ix.on_routed(0, &chain("bbb"));
        // 6 + 3 > 8: one block of `a` goes, and it must be its last one.
        assert_eq!(matches(&ix, &a, &[0]), vec![5]);
    }

    #[test]
    fn prompt_longer_than_the_bound_keeps_its_head() {
        let mut ix = index_with_entries(4);
        let a = chain("abcdefghij");
        ix.on_routed(2, &a);
        assert_eq!(matches(&ix, &a, &[2]), vec![4]);
        assert_eq!(ix.stats().entries, 4);
        assert_eq!(ix.replica_entries(2), 4);
    }

    #[test]
    fn zero_bound_records_nothing() {
        let mut ix = ApproxIndex::new(IndexLimits {
            max_bytes_per_replica: ENTRY_BYTES - 1,
        });
        ix.on_routed(0, &chain("abc"));
        assert_eq!(ix.stats(), IndexStats::default());
    }

    #[test]
    fn remove_replica_forgets_only_that_replica() {
        let mut ix = index_with_entries(100);
        let a = chain("shared prefix");
        ix.on_routed(1, &a);
        ix.on_routed(2, &a);
        ix.remove_replica(1);
        assert_eq!(matches(&ix, &a, &[1, 2]), vec![0, a.len() as u32]);
        assert_eq!(ix.stats().entries, a.len());
        assert_eq!(ix.stats().capacity_bytes, 100 * ENTRY_BYTES);
        ix.remove_replica(2);
        ix.remove_replica(42);
        assert_eq!(ix.stats().entries, 0);
        assert!(ix.holders.is_empty());
    }

    #[test]
    fn shrinking_limits_evicts_at_once() {
        let mut ix = index_with_entries(100);
        let a = chain(&"x".repeat(60));
        ix.on_routed(0, &a);
        ix.on_routed(1, &a[..30]);
        ix.set_limits(IndexLimits {
            max_bytes_per_replica: 20 * ENTRY_BYTES,
        });
        assert_eq!(matches(&ix, &a, &[0, 1]), vec![20, 20]);
        let s = ix.stats();
        assert_eq!(s.entries, 40);
        assert_eq!(s.evictions, 50);
        assert!(s.bytes <= s.capacity_bytes);
        ix.set_limits(IndexLimits {
            max_bytes_per_replica: 0,
        });
        assert_eq!(ix.stats().entries, 0);
        assert_eq!(matches(&ix, &a, &[0, 1]), vec![0, 0]);
    }

    #[test]
    fn widely_shared_blocks_switch_layouts_and_back() {
        let mut ix = index_with_entries(100);
        let a = chain("a prompt every replica gets");
        let ids: Vec<ReplicaId> = (0..40).chain([300, 301]).collect();
        for &r in &ids {
            ix.on_routed(r, &a[..(r as usize % a.len()) + 1]);
        }
        let want: Vec<u32> = ids
            .iter()
            .map(|&r| (r as usize % a.len()) as u32 + 1)
            .collect();
        assert_eq!(matches(&ix, &a, &ids), want);
        assert_eq!(matches(&ix, &a, &ids), brute(&ix, &a, &ids));
        for &r in &ids[..38] {
            ix.remove_replica(r);
        }
        assert_eq!(matches(&ix, &a, &ids[38..]), want[38..].to_vec());
        assert!(matches(&ix, &a, &ids[..38]).iter().all(|&m| m == 0));
        for &r in &ids[38..] {
            ix.remove_replica(r);
        }
        assert!(ix.holders.is_empty());
        assert_eq!(ix.stats().entries, 0);
    }

    #[test]
    fn large_replica_ids_work() {
        let mut ix = index_with_entries(100);
        let a = chain("hello world");
        ix.on_routed(300, &a);
        ix.on_routed(5, &a[..4]);
        ix.on_routed(u32::MAX - 1, &a[..7]);
        assert_eq!(
            matches(&ix, &a, &[300, 5, u32::MAX - 1, 301]),
            vec![a.len() as u32, 4, 7, 0]
        );
        ix.remove_replica(300);
        ix.remove_replica(u32::MAX - 1);
        assert_eq!(matches(&ix, &a, &[300, 5]), vec![0, 4]);
    }

    #[test]
    fn stream_of_unique_prompts_stays_within_the_bound() {
        let mut ix = index_with_entries(500);
        let hasher = BlockHasher::new(16);
        for i in 0..2000u32 {
            let prompt = format!("unique prompt number {i} {}", "pad ".repeat(40));
            let h = hasher.hash_text(&prompt);
            ix.on_routed(i % 4, &h.hashes);
            let s = ix.stats();
            assert!(s.bytes <= s.capacity_bytes, "{s:?}");
        }
        let s = ix.stats();
        assert_eq!(s.entries, 4 * 500);
        assert!(s.evictions > 0);
        // Actual allocation stays within a small factor of the bound.
        assert!(
            ix.allocated_bytes() <= 3 * s.capacity_bytes,
            "{}",
            ix.allocated_bytes()
        );
    }

    #[derive(Debug, Clone)]
    enum Op {
        Route(ReplicaId, String),
        Remove(ReplicaId),
        Limit(usize),
    }

    fn replica() -> impl Strategy<Value = ReplicaId> {
        prop_oneof![0u32..6, 250u32..260, Just(u32::MAX)]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            8 => (replica(), "[ab]{0,24}").prop_map(|(r, s)| Op::Route(r, s)),
            1 => replica().prop_map(Op::Remove),
            1 => (0usize..40).prop_map(Op::Limit),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn index_invariants_hold_under_random_operations(
            start in 0usize..40,
            ops in proptest::collection::vec(op(), 1..60),
            probes in proptest::collection::vec("[ab]{0,30}", 1..6),
        ) {
            let mut ix = index_with_entries(start);
            let all: Vec<ReplicaId> = (0..6).chain(250..260).chain([u32::MAX]).collect();
            for op in ops {
                match op {
                    Op::Route(r, s) => {
                        let h = chain(&s);
                        ix.on_routed(r, &h);
                        // A just-routed prompt fully matches there, up to the bound.
                        let want = h.len().min(ix.entries_per_replica()) as u32;
                        prop_assert_eq!(matches(&ix, &h, &[r]), vec![want]);
                    }
                    Op::Remove(r) => {
                        ix.remove_replica(r);
                        prop_assert_eq!(ix.replica_entries(r), 0);
                    }
                    Op::Limit(n) => ix.set_limits(IndexLimits { max_bytes_per_replica: n * ENTRY_BYTES }),
                }
                let s = ix.stats();
                prop_assert!(s.bytes <= s.capacity_bytes, "{:?}", s);
                let per: usize = all.iter().map(|&r| ix.replica_entries(r)).sum();
                prop_assert_eq!(per, s.entries);
                for &r in &all {
                    prop_assert!(ix.replica_entries(r) <= ix.entries_per_replica());
                }
                for p in &probes {
                    let h = chain(p);
                    let got = matches(&ix, &h, &all);
                    prop_assert!(got.iter().all(|&m| m as usize <= h.len()));
                    prop_assert_eq!(got, brute(&ix, &h, &all));
                }
            }
        }

        #[test]
        fn bisection_matches_brute_force_on_wide_fleets(
            depths in proptest::collection::vec((0u32..300, 0usize..200), 1..120),
            len in 1usize..200,
        ) {
            // Many replicas (inline and large ids) holding one long chain to assorted depths,
            // with every holder-list layout in play.
            let mut ix = index_with_entries(1000);
            let text: String = (0..len).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
            let h = chain(&text);
            for &(r, d) in &depths {
                ix.on_routed(r, &h[..d.min(h.len())]);
            }
            let all: Vec<ReplicaId> = (0..300).collect();
            let got = matches(&ix, &h, &all);
            prop_assert_eq!(&got, &brute(&ix, &h, &all));
            for &(r, _) in &depths {
                let most = depths.iter().filter(|x| x.0 == r).map(|x| x.1.min(h.len())).max();
                prop_assert_eq!(Some(got[r as usize] as usize), most);
            }
        }

        #[test]
        fn longest_prefix_never_exceeds_the_hashes(
            hashes in proptest::collection::vec(any::<u64>(), 0..50),
            routed in proptest::collection::vec(any::<u64>(), 0..50),
        ) {
            // Arbitrary (non-chained) hashes: the answer stays in range even without the
            // chain invariant.
            let mut ix = index_with_entries(64);
            ix.on_routed(0, &routed);
            ix.on_routed(1, &hashes);
            let got = matches(&ix, &hashes, &[0, 1, 2]);
            prop_assert!(got.iter().all(|&m| m as usize <= hashes.len()));
            prop_assert_eq!(got[1] as usize, hashes.len().min(64));
        }
    }
}
