//! The simulated KV cache: a fixed number of blocks, prefix caching by chained block hashes,
//! reference counts for blocks that running requests hold, and LRU eviction of the rest.
//!
//! Pure data structure (no I/O, no clock). It mirrors vLLM v1's block pool where a router can
//! observe it:
//! - a block is either held (reference count > 0), cached and free (evictable, still
//!   findable by hash), or empty; usage counts only held blocks, as `vllm:kv_cache_usage_perc`
//!   does;
//! - a block is findable by hash only once it is full and computed ([`KvCache::commit`]);
//! - freeing a request's blocks releases them last block first, so the tail of a sequence is
//!   evicted before its head (vLLM appends freed blocks to its free queue in reverse order);
//! - each hashed block has a small integer id (its slot), which P/D transfers name.
//!
//! Memory grows with use up to the configured capacity, never beyond.

use std::collections::{BTreeMap, HashMap};

use xxhash_rust::xxh3::Xxh3;

/// A block's chained hash: it depends on every token before it.
pub type BlockHash = u64;

/// Chained hash of one full block: xxh3 over the parent's hash and the block's token ids.
pub fn block_hash(parent: Option<BlockHash>, tokens: &[u32]) -> BlockHash {
    let mut h = Xxh3::new();
    // A distinct marker for "no parent" keeps a first block apart from one whose parent hash
    // happens to be 0.
    match parent {
        Some(p) => {
            h.update(&[1]);
            h.update(&p.to_le_bytes());
        }
        None => h.update(&[0]),
    }
    for t in tokens {
        h.update(&t.to_le_bytes());
    }
    h.digest()
}

/// Hashes of the full blocks of `tokens`, extending `hashes` (which already covers a prefix).
pub fn extend_hashes(hashes: &mut Vec<BlockHash>, tokens: &[u32], block_size: usize) {
    let full = tokens.len() / block_size;
    while hashes.len() < full {
        let i = hashes.len();
        let parent = i.checked_sub(1).map(|p| hashes[p]);
        hashes.push(block_hash(
            parent,
            &tokens[i * block_size..(i + 1) * block_size],
        ));
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    refs: u32,
    /// LRU position while free (refs == 0).
    tick: u64,
    slot: u32,
}

/// Not enough free blocks, even after evicting every evictable one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("KV cache full: need {needed} blocks, {available} available")]
pub struct CacheFull {
    pub needed: usize,
    pub available: usize,
}

/// The block pool of one replica.
#[derive(Debug)]
pub struct KvCache {
    capacity: usize,
    block_size: usize,
    entries: HashMap<BlockHash, Entry>,
    /// Free cached blocks by LRU tick: the first is evicted first.
    evictable: BTreeMap<u64, BlockHash>,
    /// Blocks allocated to requests but not (yet) findable by hash: partial blocks and blocks
    /// whose tokens are not computed yet.
    anonymous: usize,
    tick: u64,
    slots: HashMap<u32, BlockHash>,
    free_slots: Vec<u32>,
    next_slot: u32,
}

impl KvCache {
    pub fn new(capacity: usize, block_size: usize) -> Self {
        assert!(block_size > 0, "block size must be positive");
        Self {
            capacity,
            block_size,
            entries: HashMap::new(),
            evictable: BTreeMap::new(),
            anonymous: 0,
            tick: 0,
            slots: HashMap::new(),
            free_slots: Vec::new(),
            next_slot: 0,
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Blocks held by requests (hashed or not).
    pub fn used_blocks(&self) -> usize {
        self.entries.len() - self.evictable.len() + self.anonymous
    }

    /// Blocks findable by hash (held or evictable).
    pub fn cached_blocks(&self) -> usize {
        self.entries.len()
    }

    /// Fraction of blocks held by requests, as vLLM reports it (cached free blocks count as free).
    pub fn usage(&self) -> f64 {
        if self.capacity == 0 {
            return 0.0;
        }
        self.used_blocks() as f64 / self.capacity as f64
    }

    /// Blocks that an allocation could get now, evicting if it must.
    pub fn available(&self) -> usize {
        self.capacity - self.used_blocks()
    }

    pub fn contains(&self, hash: BlockHash) -> bool {
        self.entries.contains_key(&hash)
    }

    /// Number of leading blocks of `hashes` present, without touching LRU state.
    pub fn longest_prefix(&self, hashes: &[BlockHash]) -> usize {
        hashes
            .iter()
            .take_while(|h| self.entries.contains_key(h))
            .count()
    }

    /// Holds the longest present prefix of `hashes` (at most `max` blocks) and returns its length.
    pub fn acquire_prefix(&mut self, hashes: &[BlockHash], max: usize) -> usize {
        let n = self.longest_prefix(&hashes[..hashes.len().min(max)]);
        for h in &hashes[..n] {
            let e = self.entries.get_mut(h).expect("present");
            if e.refs == 0 {
                self.evictable.remove(&e.tick);
            }
            e.refs += 1;
        }
        n
    }

    /// Allocates `n` anonymous blocks, evicting least recently used free blocks as needed.
    /// Returns the hashes evicted. Fails without changing anything if `n` cannot fit.
    pub fn reserve(&mut self, n: usize) -> Result<Vec<BlockHash>, CacheFull> {
        let available = self.available();
        if n > available {
            return Err(CacheFull {
                needed: n,
                available,
            });
        }
        let mut evicted = Vec::new();
        while self.capacity - self.entries.len() - self.anonymous < n {
            let (_, hash) = self.evictable.pop_first().expect("evictable block");
            let e = self.entries.remove(&hash).expect("entry");
            self.slots.remove(&e.slot);
            self.free_slots.push(e.slot);
            evicted.push(hash);
        }
        self.anonymous += n;
        Ok(evicted)
    }

    /// Turns anonymous blocks of a request into findable ones, one per hash, held by it.
    /// Returns the hashes that are new to the cache (another request may have stored the same
    /// block meanwhile; then the duplicate is dropped and the existing block is shared).
    pub fn commit(&mut self, hashes: &[BlockHash]) -> Vec<BlockHash> {
        assert!(
            hashes.len() <= self.anonymous,
            "commit of more blocks than allocated"
        );
        let mut stored = Vec::with_capacity(hashes.len());
        for &h in hashes {
            self.anonymous -= 1;
            match self.entries.get_mut(&h) {
                Some(e) => {
                    if e.refs == 0 {
                        self.evictable.remove(&e.tick);
                    }
                    e.refs += 1;
                }
                None => {
                    let slot = self.free_slots.pop().unwrap_or_else(|| {
                        self.next_slot += 1;
                        self.next_slot - 1
                    });
                    self.slots.insert(slot, h);
                    self.entries.insert(
                        h,
                        Entry {
                            refs: 1,
                            tick: 0,
                            slot,
                        },
                    );
                    stored.push(h);
                }
            }
        }
        stored
    }

    /// Releases a request's blocks: its hashed blocks (in sequence order) and its anonymous
    /// ones. Hashed blocks stay findable until evicted; the last block becomes the first
    /// candidate for eviction.
    pub fn release(&mut self, hashed: &[BlockHash], anonymous: usize) {
        assert!(anonymous <= self.anonymous, "release of unallocated blocks");
        self.anonymous -= anonymous;
        for h in hashed.iter().rev() {
            let e = self.entries.get_mut(h).expect("released block is cached");
            assert!(e.refs > 0, "release of a block not held");
            e.refs -= 1;
            if e.refs == 0 {
                self.tick += 1;
                e.tick = self.tick;
                self.evictable.insert(self.tick, *h);
            }
        }
    }

    /// Drops every free cached block, as vLLM's prefix-cache reset does. Refuses (returns
    /// false) while any block is held, like vLLM.
    pub fn reset(&mut self) -> bool {
        if self.used_blocks() > 0 {
            return false;
        }
        self.entries.clear();
        self.evictable.clear();
        self.slots.clear();
        self.free_slots.clear();
        self.next_slot = 0;
        true
    }

    /// Slot ids of the given cached blocks (for P/D `remote_block_ids`), or None if one is gone.
    pub fn slots_of(&self, hashes: &[BlockHash]) -> Option<Vec<u32>> {
        hashes
            .iter()
            .map(|h| self.entries.get(h).map(|e| e.slot))
            .collect()
    }

    /// Whether each slot still holds the given block (a P/D pull checks before it copies).
    pub fn slots_hold(&self, slots: &[u32], hashes: &[BlockHash]) -> bool {
        slots.len() == hashes.len()
            && slots
                .iter()
                .zip(hashes)
                .all(|(s, h)| self.slots.get(s) == Some(h))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hashes(tokens: &[u32], bs: usize) -> Vec<BlockHash> {
        let mut v = Vec::new();
        extend_hashes(&mut v, tokens, bs);
        v
    }

    /// Allocate, compute and free one request's full blocks, returning its hit.
    fn run(c: &mut KvCache, hs: &[BlockHash]) -> (usize, Vec<BlockHash>) {
        let hit = c.acquire_prefix(hs, hs.len());
        let evicted = c.reserve(hs.len() - hit).unwrap();
        c.commit(&hs[hit..]);
        c.release(hs, 0);
        (hit, evicted)
    }

    #[test]
    fn hashes_chain_over_the_whole_prefix() {
        let a = hashes(&[1, 2, 3, 4, 5, 6], 2);
        let b = hashes(&[9, 2, 3, 4, 5, 6], 2);
        assert_eq!(a.len(), 3);
        assert_ne!(a[0], b[0]);
        // Same tokens in block 2, different history: different hash.
        assert_ne!(a[2], b[2]);
        assert_eq!(a, hashes(&[1, 2, 3, 4, 5, 6, 7], 2));
    }

    #[test]
    fn second_request_hits_the_shared_prefix() {
        let mut c = KvCache::new(16, 4);
        let a = hashes(&(0..16).collect::<Vec<_>>(), 4);
        let mut t: Vec<u32> = (0..8).collect();
        t.extend(100..108);
        let b = hashes(&t, 4);
        assert_eq!(run(&mut c, &a).0, 0);
        assert_eq!(run(&mut c, &b).0, 2);
        assert_eq!(run(&mut c, &a).0, 4);
        assert_eq!(c.used_blocks(), 0);
        assert_eq!(c.cached_blocks(), 6);
    }

    #[test]
    fn lru_evicts_least_recently_used_and_tail_first() {
        let mut c = KvCache::new(4, 1);
        let a = hashes(&[1, 2], 1);
        let b = hashes(&[3, 4], 1);
        run(&mut c, &a);
        run(&mut c, &b);
        // Touch a: b becomes least recently used.
        assert_eq!(run(&mut c, &a).0, 2);
        let d = hashes(&[5], 1);
        let (_, evicted) = run(&mut c, &d);
        // b's tail goes first.
        assert_eq!(evicted, vec![b[1]]);
        assert_eq!(c.longest_prefix(&b), 1);
        assert_eq!(c.longest_prefix(&a), 2);
    }

    #[test]
    fn held_blocks_are_never_evicted() {
        let mut c = KvCache::new(3, 1);
        let a = hashes(&[1, 2], 1);
        let hit = c.acquire_prefix(&a, 2);
        c.reserve(2 - hit).unwrap();
        c.commit(&a);
        assert_eq!(c.usage(), 2.0 / 3.0);
        // One block free; two cannot fit while `a` is held.
        assert_eq!(
            c.reserve(2),
            Err(CacheFull {
                needed: 2,
                available: 1
            })
        );
        assert!(c.reserve(1).unwrap().is_empty());
        assert_eq!(c.longest_prefix(&a), 2);
        c.release(&a, 1);
        assert_eq!(c.used_blocks(), 0);
        // Now both can go.
        assert_eq!(c.reserve(3).unwrap().len(), 2);
    }

    #[test]
    fn duplicate_commit_shares_the_block() {
        let mut c = KvCache::new(4, 1);
        let a = hashes(&[7], 1);
        c.reserve(2).unwrap();
        assert_eq!(c.commit(&a), a);
        assert!(c.commit(&a).is_empty());
        assert_eq!(c.used_blocks(), 1);
        c.release(&a, 0);
        assert_eq!(c.used_blocks(), 1);
        c.release(&a, 0);
        assert_eq!(c.used_blocks(), 0);
    }

    #[test]
    fn slots_name_blocks_until_they_are_evicted() {
        let mut c = KvCache::new(2, 1);
        let a = hashes(&[1, 2], 1);
        run(&mut c, &a);
        let slots = c.slots_of(&a).unwrap();
        assert!(c.slots_hold(&slots, &a));
        run(&mut c, &hashes(&[9], 1));
        assert!(!c.slots_hold(&slots, &a));
        assert!(c.slots_of(&a).is_none());
    }

    #[test]
    fn reset_only_when_nothing_is_held() {
        let mut c = KvCache::new(4, 1);
        let a = hashes(&[1], 1);
        c.reserve(1).unwrap();
        c.commit(&a);
        assert!(!c.reset());
        c.release(&a, 0);
        assert!(c.reset());
        assert_eq!(c.cached_blocks(), 0);
    }
}
