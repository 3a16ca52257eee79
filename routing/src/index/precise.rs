//! [`PreciseIndex`], the index fed by the engines' own KV events: which replica holds which token
//! blocks, as the engines report them (`BlockStored`, `BlockRemoved`, `AllBlocksCleared`). A
//! pure data structure: no I/O, no clock, no async; the caller decodes the events
//! (`warmpath-kv-events`) and tracks sequence numbers.
//!
//! # Dual keys
//! The router cannot know an engine's hash seed or algorithm (vLLM seeds its hashes per process
//! unless `PYTHONHASHSEED` is fixed, and may use sha256 or builtin hashes), so it does not use the
//! engines' block hashes to match requests. Every stored block gets two keys:
//! - its **router key**, a `u64` the router computes itself from the block's tokens: xxh3-64 over
//!   the parent block's router key (or [`ROOT_KEY`] at the start of a sequence), the block's
//!   token ids as little-endian `u32`s, the block's extra-key bytes, and both lengths (so that
//!   the encoding is injective). [`block_key`] is one step, [`prompt_keys`] hashes a request's
//!   tokens the same way, so a request matches exactly the blocks whose whole token prefix
//!   (and extra keys) it shares. Router keys depend only on tokens: every router process, fed
//!   the same events, computes the same keys, whatever the engines' hashes are.
//! - its **engine hash**, kept per replica in a map engine hash → block, only so that
//!   `BlockRemoved` (which names blocks by engine hash) and the next `BlockStored`'s
//!   `parent_block_hash` can be resolved. Engine hashes are stored as a `u64` digest
//!   ([`engine_digest`]: an integer hash as is, a byte-string hash through xxh3). The maps are per
//!   replica: a parent known only through another replica is unknown
//!   ([`ApplyError::UnknownParent`]).
//!
//! [`PreciseIndex::apply`] folds each block's `extra_keys` as the event carries them (vLLM's
//! untagged tuple: the LoRA adapter's name, multimodal identifiers and offsets, the cache salt,
//! in that order) into its router key; a request's keys must fold the same tuple
//! ([`prompt_keys_by`]). It also remembers the LoRA adapter names the events carry, and which
//! replicas carried each ([`PreciseIndex::is_adapter_on`], at most [`MAX_ADAPTERS`] names), so
//! that a router learns which served model names are adapters without being told, and one
//! pool's engine naming another pool's model as its adapter changes nothing for that pool.
//!
//! Per router key, the index keeps the replicas holding it, with a count per replica (two engine
//! blocks of one replica may share a router key, e.g. the same tokens under a LoRA adapter whose
//! identity the caller did not fold into the extra keys; the replica holds the key while any of
//! them is held). Holder sets reuse the approximate index's layout (`holders.rs`): inline for one
//! holder, a sorted list for a few, plus a bitset over inline replica ids for many.
//!
//! # Media
//! Only blocks whose `medium` is absent or `"GPU"` (any case) count as cached: vLLM says "GPU"
//! for its main KV cache even when it runs on CPU. Events for other media (the CPU / disk
//! offloading tiers of KV connectors) are ignored and counted in [`Applied::ignored`]; a later
//! version may score them as slower hits.
//!
//! # Bounds
//! [`PreciseLimits`] bounds the (replica, engine block) entries per replica and in total. Engines
//! report their evictions, so the bounds only bite when removals were lost (a gap) or an engine
//! misbehaves; size them a little above the engines' capacities (`num_gpu_blocks`). A store that
//! would exceed a bound first evicts the replica's oldest-stored blocks (per-replica insertion
//! order); for the total bound it evicts the oldest block of the replica holding the most (ties:
//! the lowest id, so that every router process evicts the same blocks). A store inserts its
//! blocks last first, so that if it must evict its own blocks it drops its tail, and a store
//! with more blocks than a bound allows keeps only its leading blocks. Age-ordered eviction is a
//! safety net, not a model of the engine's cache: a chain stored over many events loses its
//! oldest, leading blocks first, which ends its matches. So [`Applied::evicted`] `> 0` means the
//! view has drifted from the engine (removals were lost, or the bounds are too tight): treat
//! the replica as uncertain, as after a gap. Evicted and skipped blocks count in
//! [`PreciseStats::evictions`].
//!
//! Memory is therefore bounded by configuration under any input: about
//! [`PRECISE_ENTRY_BYTES`] per entry plus [`REPLICA_BYTES`] per replica seen (replica ids are
//! assigned by the router, and [`PreciseIndex::remove_replica`] forgets one), plus the hash
//! tables' spare capacity (up to about twice their share right after a doubling). A replica
//! that empties releases its tables; [`PreciseIndex::set_limits`] compacts replicas that shrank.
//!
//! # Cost
//! - [`PreciseIndex::longest_prefix`] is exact: a candidate's answer is the number of leading
//!   keys it holds, stopping at the first missing one (engines do not guarantee that their
//!   cached blocks are prefix-closed, so the approximate index's bisection would over-count).
//!   Candidates with ids below [`INLINE_REPLICAS`] share one walk: one map probe per position up
//!   to the longest match among them (+1), intersecting a bitset of still-matching candidates;
//!   so `O(L + candidates)` for a longest match of `L` blocks. Larger ids cost `O(L_c + 1)`
//!   probes each.
//! - `BlockStored` costs one xxh3 over each block's tokens plus O(1) map operations per block;
//!   `BlockRemoved` O(1) per hash; `AllBlocksCleared` O(blocks of the replica). A store that
//!   must evict for the total bound scans the replicas (`O(replicas)`) per evicted block.
//! - [`prompt_keys`] copies each block's token ids into a buffer and hashes it: linear in the
//!   prompt (a 32k-token prompt is 128 KiB of token ids). `benches/precise.rs` measures it and
//!   `longest_prefix` at 512 keys × 8 replicas.
//!
//! # Determinism
//! Two indexes fed the same events in the same order hold the same state and give the same
//! answers: keys depend only on tokens, eviction choices only on event order and replica ids.
//! The maps' hashers are keyed per process (crafted prompts cannot steer buckets) but that only
//! changes their layout.

use super::block_key::BlockKey;
use super::holders::{Bits, Holder, Holders, SHARE_BYTES, WORDS};
use super::{IndexStats, PrefixIndex, INLINE_REPLICAS};
use crate::{BlockHash, ReplicaId};
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::mem::size_of;
use warmpath_kv_events::{BlockHash as EngineHash, KvEvent, MEDIUM_GPU};
use warmpath_lru::{SlabLru, MAX_SLOTS};
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

/// The parent key of a sequence's first block ("precise!").
pub const ROOT_KEY: u64 = 0x7072_6563_6973_6521;

/// Seed of the digest of byte-string engine hashes, so that they do not collide with integer
/// hashes by construction.
const BYTES_DIGEST_SEED: u64 = 0x656e_6769_6e65_2121; // "engine!!"

/// Hash one block into `buf` (cleared first) and return its router key.
fn key_into(buf: &mut Vec<u8>, parent: Option<u64>, tokens: &[u32], extra: &[u8]) -> u64 {
    buf.clear();
    buf.reserve(
        (tokens.len().saturating_mul(4))
            .saturating_add(extra.len())
            .saturating_add(24),
    );
    buf.extend_from_slice(&parent.unwrap_or(ROOT_KEY).to_le_bytes());
    for t in tokens {
        buf.extend_from_slice(&t.to_le_bytes());
    }
    buf.extend_from_slice(extra);
    // Trailing lengths make the byte string injective: (tokens, extra) is read back from the end.
    buf.extend_from_slice(&(tokens.len() as u64).to_le_bytes());
    buf.extend_from_slice(&(extra.len() as u64).to_le_bytes());
    xxh3_64(buf)
}

/// The router key of one block: xxh3-64 over the parent's router key ([`ROOT_KEY`] for `None`),
/// the block's token ids (little-endian `u32`), its extra-key bytes and both lengths.
pub fn block_key(parent: Option<u64>, tokens: &[u32], extra: &[u8]) -> u64 {
    key_into(&mut Vec::new(), parent, tokens, extra)
}

/// The chained router keys of a request's full blocks of `block_size` tokens (a partial last
/// block is not cached by engines and gets no key), every block with the same `extra` bytes.
/// `block_size == 0` gives no keys.
pub fn prompt_keys(tokens: &[u32], block_size: usize, extra: &[u8]) -> Vec<u64> {
    prompt_keys_by(tokens, block_size, |_| extra)
}

/// [`prompt_keys`] with block `i`'s extra-key bytes given by `extra(i)` (e.g. a `cache_salt`
/// that vLLM folds into the first block only).
pub fn prompt_keys_by<'e>(
    tokens: &[u32],
    block_size: usize,
    mut extra: impl FnMut(usize) -> &'e [u8],
) -> Vec<u64> {
    if block_size == 0 {
        return Vec::new();
    }
    let mut keys = Vec::with_capacity(tokens.len() / block_size);
    let mut buf = Vec::with_capacity(block_size * 4 + 64);
    let mut parent = None;
    for (i, block) in tokens.chunks_exact(block_size).enumerate() {
        let key = key_into(&mut buf, parent, block, extra(i));
        keys.push(key);
        parent = Some(key);
    }
    keys
}

/// The compact digest an engine hash is stored under: an integer as is, a byte string hashed
/// with xxh3.
pub fn engine_digest(hash: &EngineHash) -> u64 {
    match hash {
        EngineHash::Int(v) => *v,
        EngineHash::Bytes(b) => xxh3_64_with_seed(b, BYTES_DIGEST_SEED),
    }
}

/// Whether blocks in `medium` count as cached (see the module docs).
pub fn is_cached_medium(medium: Option<&str>) -> bool {
    medium.is_none_or(|m| m.eq_ignore_ascii_case(MEDIUM_GPU))
}

/// The bounds of a [`PreciseIndex`], in (replica, engine block) entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreciseLimits {
    /// At most this many blocks per replica. Size it a little above the engine's own capacity
    /// (`num_gpu_blocks` from `vllm:cache_config_info`): then it only bites after lost removals.
    pub max_blocks_per_replica: usize,
    /// At most this many blocks over all replicas.
    pub max_blocks_total: usize,
}

/// Why an event was not applied. Nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// `BlockStored` names a parent this replica's map does not hold: the router missed the
    /// parent's store (a gap) or dropped it (a bound). The caller should treat the replica's
    /// view as uncertain.
    #[error("BlockStored's parent block is unknown for this replica")]
    UnknownParent,
    /// The event's lengths do not add up.
    #[error("malformed BlockStored: {0}")]
    Malformed(&'static str),
    /// `BlockStored` with another block size than this replica's earlier ones. An engine's block
    /// size is fixed for its lifetime, so the engine restarted (and lost its cache) or lies.
    #[error("block size changed from {was} to {now}")]
    BlockSizeChanged { was: u32, now: u32 },
}

/// What one event did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Applied {
    /// Blocks newly stored (including an engine hash re-stored with other tokens).
    pub stored: usize,
    /// Blocks stored again under an engine hash the replica already held with the same router
    /// key: only their age was refreshed.
    pub refreshed: usize,
    /// Blocks dropped by `BlockRemoved` or `AllBlocksCleared`.
    pub removed: usize,
    /// `BlockRemoved` hashes that the replica did not hold (a lost or skipped store).
    pub unknown: usize,
    /// Blocks of a medium that does not count (see the module docs), ignored.
    pub ignored: usize,
    /// Blocks evicted, or not stored, to stay within the bounds (any replica's).
    pub evicted: usize,
}

/// What the index holds now, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PreciseStats {
    /// (replica, engine block) entries held.
    pub entries: usize,
    /// Distinct router keys held by at least one replica.
    pub blocks: usize,
    /// Replicas with state (blocks, or a known block size).
    pub replicas: usize,
    /// Entries evicted or not stored to stay within the bounds, since creation.
    pub evictions: u64,
    /// Estimated bytes in use: [`PRECISE_ENTRY_BYTES`] per entry plus [`REPLICA_BYTES`] per
    /// replica.
    pub bytes: usize,
    /// The estimate at the total bound (with the current replicas).
    pub capacity_bytes: usize,
}

/// One engine block of one replica: its digest and router key.
#[derive(Debug, Clone, Copy)]
struct Block {
    digest: u64,
    key: BlockHash,
}

const ENGINE_SLOT_BYTES: usize = size_of::<(u64, u32)>() + 1;
const HOLDER_SLOT_BYTES: usize = size_of::<(BlockHash, Holders)>() + 1;

/// Estimated bytes per (replica, engine block) entry: its block with its links (24 B) and a
/// free-list slot (4 B), its engine-map slot and a whole holder-map slot (both at the tables' 7/8
/// maximum load), its holder record (8 B) and its share of a shared block's holder-list
/// overhead. The holder-map slot is shared by all holders of a router key, so charging it to
/// each entry over-estimates shared blocks. Not counted, as in the approximate index: the maps'
/// spare capacity between doublings ([`PreciseIndex::allocated_bytes`] has the figure from
/// actual capacities).
pub const PRECISE_ENTRY_BYTES: usize = SlabLru::<Block>::ENTRY_BYTES
    + size_of::<u32>()
    + ENGINE_SLOT_BYTES.div_ceil(7) * 8
    + HOLDER_SLOT_BYTES.div_ceil(7) * 8
    + size_of::<Holder>()
    + SHARE_BYTES;

/// Estimated fixed bytes per replica with state (its record and its slot in the replica map).
pub const REPLICA_BYTES: usize = (size_of::<(ReplicaId, Replica)>() + 1).div_ceil(7) * 8;

const _: () = assert!(SlabLru::<Block>::ENTRY_BYTES == 24);

/// One replica: its block size, engine hash → slot, and its blocks in insertion order (oldest
/// evicted first; a store of a block it holds already makes it the newest).
#[derive(Debug)]
struct Replica {
    block_size: Option<u32>,
    by_engine: HashMap<u64, u32, BlockKey>,
    blocks: SlabLru<Block>,
}

impl Replica {
    fn new(hasher: BlockKey) -> Self {
        Self {
            block_size: None,
            by_engine: HashMap::with_hasher(hasher),
            blocks: SlabLru::new(),
        }
    }

    fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Drop all blocks and release the tables (the caller releases the router keys first);
    /// the block size stays.
    fn reset(&mut self) {
        let block_size = self.block_size;
        *self = Self::new(*self.by_engine.hasher());
        self.block_size = block_size;
    }

    /// Add a block (its digest known absent) as the newest. `cap` bounds the slab's growth.
    fn push(&mut self, digest: u64, key: BlockHash, cap: usize) {
        let slot = self.blocks.push_newest(Block { digest, key }, cap);
        self.by_engine.insert(digest, slot);
    }

    /// Remove the block in `slot` and return it (the caller releases its router key).
    fn take(&mut self, slot: u32) -> Block {
        let block = self.blocks.take(slot);
        self.by_engine.remove(&block.digest);
        block
    }

    /// The slot of the block stored under `digest`.
    fn slot(&self, digest: u64) -> Option<u32> {
        self.by_engine.get(&digest).copied()
    }

    /// Blocks from oldest to newest.
    fn oldest_first(&self) -> Vec<Block> {
        self.blocks.oldest_first().map(|(_, b)| *b).collect()
    }

    fn allocated_bytes(&self) -> usize {
        self.blocks.allocated_bytes()
            + self.by_engine.capacity().div_ceil(7) * 8 * ENGINE_SLOT_BYTES
    }
}

type HolderMap = HashMap<BlockHash, Holders, BlockKey>;

/// One more block of `replica` has router key `key`. The holder record's second field is the
/// replica's count of blocks with that key.
fn hold(holders: &mut HolderMap, key: BlockHash, replica: ReplicaId) {
    match holders.entry(key) {
        Entry::Occupied(mut e) => {
            let h = e.get_mut();
            match h.node_of(replica) {
                Some(count) => h.set_node(replica, count.saturating_add(1)),
                None => h.insert(replica, 1),
            }
        }
        Entry::Vacant(e) => {
            e.insert(Holders::One((replica, 1)));
        }
    }
}

/// One block of `replica` with router key `key` is gone.
fn release(holders: &mut HolderMap, key: BlockHash, replica: ReplicaId) {
    if let Entry::Occupied(mut e) = holders.entry(key) {
        let h = e.get_mut();
        match h.node_of(replica) {
            Some(count) if count > 1 => h.set_node(replica, count - 1),
            Some(_) if h.remove(replica) => {
                e.remove();
            }
            _ => {}
        }
    }
}

/// A `BlockStored` as borrowed parts, for [`PreciseIndex::apply_stored`]; the fields mean what
/// [`KvEvent::BlockStored`]'s do.
#[derive(Debug, Clone, Copy)]
pub struct StoredBlocks<'a> {
    pub block_hashes: &'a [EngineHash],
    pub parent_block_hash: Option<&'a EngineHash>,
    pub token_ids: &'a [u32],
    pub block_size: u32,
    pub medium: Option<&'a str>,
    /// Per-block extra-key bytes folded into the router keys (LoRA identity, `cache_salt`,
    /// multimodal hashes, serialised the same way the router serialises a request's): empty
    /// for none, else one entry per block.
    pub extras: &'a [&'a [u8]],
}

impl<'a> StoredBlocks<'a> {
    /// The parts of a [`KvEvent::BlockStored`] (no extras); `None` for other events.
    pub fn from_event(event: &'a KvEvent) -> Option<Self> {
        match event {
            KvEvent::BlockStored {
                block_hashes,
                parent_block_hash,
                token_ids,
                block_size,
                medium,
                ..
            } => Some(Self {
                block_hashes,
                parent_block_hash: parent_block_hash.as_ref(),
                token_ids,
                block_size: *block_size,
                medium: medium.as_deref(),
                extras: &[],
            }),
            _ => None,
        }
    }
}

/// The index fed by engine KV events; see the module docs.
#[derive(Debug)]
pub struct PreciseIndex {
    limits: PreciseLimits,
    hasher: BlockKey,
    holders: HolderMap,
    replicas: HashMap<ReplicaId, Replica>,
    entries: usize,
    evictions: u64,
    /// LoRA adapter names seen in `BlockStored` events (bounded by [`MAX_ADAPTERS`]), with the
    /// replicas whose events named each (each at most once).
    adapters: HashMap<Box<str>, Vec<ReplicaId>>,
}

/// LoRA adapter names an index remembers from events: engines serve a few adapters each, and
/// a name past the bound can still be declared in the configuration.
pub const MAX_ADAPTERS: usize = 1024;

/// Longest adapter name remembered (longer ones are not served model names anyone routes).
const MAX_ADAPTER_NAME: usize = 256;

impl PreciseIndex {
    pub fn new(limits: PreciseLimits) -> Self {
        let hasher = BlockKey::random();
        Self {
            limits,
            hasher,
            holders: HashMap::with_hasher(hasher),
            replicas: HashMap::new(),
            entries: 0,
            evictions: 0,
            adapters: HashMap::new(),
        }
    }

    /// Whether one of `replicas` (a request's candidates) has reported blocks computed under
    /// the LoRA adapter `model`. Only they count: another pool's engine that names `model` as
    /// its adapter says nothing about how these replicas cache it.
    pub fn is_adapter_on(
        &self,
        model: &str,
        replicas: impl IntoIterator<Item = ReplicaId>,
    ) -> bool {
        self.adapters
            .get(model)
            .is_some_and(|by| replicas.into_iter().any(|r| by.contains(&r)))
    }

    fn learn_adapter(&mut self, replica: ReplicaId, name: &str) {
        if let Some(by) = self.adapters.get_mut(name) {
            if !by.contains(&replica) {
                by.push(replica);
            }
        } else if self.adapters.len() < MAX_ADAPTERS && name.len() <= MAX_ADAPTER_NAME {
            self.adapters.insert(name.into(), vec![replica]);
        }
    }

    pub fn limits(&self) -> PreciseLimits {
        self.limits
    }

    /// Blocks one replica may hold (slab slots are `u32`, at most [`MAX_SLOTS`]).
    fn per_replica_cap(&self) -> usize {
        self.limits
            .max_blocks_per_replica
            .min(self.limits.max_blocks_total)
            .min(MAX_SLOTS)
    }

    /// Change the bounds (configuration reload); shrinking evicts at once, by the same rules
    /// as a store, and compacts the replicas that shrank.
    pub fn set_limits(&mut self, limits: PreciseLimits) {
        self.limits = limits;
        let cap = self.per_replica_cap();
        let mut ids: Vec<ReplicaId> = self.replicas.keys().copied().collect();
        ids.sort_unstable();
        for &id in &ids {
            while self.replica_blocks(id) > cap && self.evict_oldest(id) {}
        }
        while self.entries > self.limits.max_blocks_total {
            let Some(victim) = self.largest_replica() else {
                break;
            };
            if !self.evict_oldest(victim) {
                break;
            }
        }
        // Give back the slab memory of replicas that were allowed more before.
        for id in ids {
            if let Some(r) = self
                .replicas
                .get_mut(&id)
                .filter(|r| r.blocks.capacity() > cap)
            {
                let order = r.oldest_first();
                r.reset();
                for Block { digest, key } in order {
                    r.push(digest, key, cap);
                }
            }
        }
    }

    /// Apply one event from `replica`'s engine. `BlockStored` folds in each block's extra keys
    /// as the event carries them (the msgpack bytes of vLLM's `extra_keys` tuple, so that a
    /// salted or LoRA block never matches a request without the same keys) and remembers its
    /// `lora_name`; `AllBlocksCleared` drops the replica's blocks but keeps its block size.
    pub fn apply(&mut self, replica: ReplicaId, event: &KvEvent) -> Result<Applied, ApplyError> {
        if let KvEvent::BlockStored {
            lora_name: Some(name),
            ..
        } = event
        {
            self.learn_adapter(replica, name);
        }
        match event {
            KvEvent::BlockStored { extra_keys, .. } => match StoredBlocks::from_event(event) {
                Some(stored) if extra_keys.is_empty() => self.apply_stored(replica, stored),
                Some(stored) => {
                    let extras: Vec<&[u8]> = extra_keys.iter().map(Vec::as_slice).collect();
                    self.apply_stored(
                        replica,
                        StoredBlocks {
                            extras: &extras,
                            ..stored
                        },
                    )
                }
                None => Ok(Applied::default()),
            },
            KvEvent::BlockRemoved {
                block_hashes,
                medium,
            } => Ok(self.apply_removed(replica, block_hashes, medium.as_deref())),
            KvEvent::AllBlocksCleared => Ok(self.clear_replica(replica)),
        }
    }

    /// Apply a `BlockStored`. Checks, in order, before changing anything: a medium that does not
    /// count → `Ok` with everything in [`Applied::ignored`]; no blocks → `Ok` (tokens or extras
    /// without blocks → `Malformed`); block size 0, `token_ids.len() != blocks × block_size`,
    /// or extras neither empty nor one per block → `Malformed`; a block size other than the
    /// replica's → `BlockSizeChanged`; a parent not in this replica's map → `UnknownParent`.
    pub fn apply_stored(
        &mut self,
        replica: ReplicaId,
        s: StoredBlocks<'_>,
    ) -> Result<Applied, ApplyError> {
        let n = s.block_hashes.len();
        if !is_cached_medium(s.medium) {
            return Ok(Applied {
                ignored: n,
                ..Applied::default()
            });
        }
        if n == 0 {
            return if s.token_ids.is_empty() && s.extras.is_empty() {
                Ok(Applied::default())
            } else {
                Err(ApplyError::Malformed("token ids or extras without blocks"))
            };
        }
        let bs = s.block_size as usize;
        if bs == 0 {
            return Err(ApplyError::Malformed("block size 0"));
        }
        if n.checked_mul(bs) != Some(s.token_ids.len()) {
            return Err(ApplyError::Malformed(
                "token_ids.len() != block_hashes.len() * block_size",
            ));
        }
        if !s.extras.is_empty() && s.extras.len() != n {
            return Err(ApplyError::Malformed(
                "extras must be empty or one per block",
            ));
        }
        let known = self.replicas.get(&replica);
        if let Some(was) = known.and_then(|r| r.block_size) {
            if was != s.block_size {
                return Err(ApplyError::BlockSizeChanged {
                    was,
                    now: s.block_size,
                });
            }
        }
        let parent_key = match s.parent_block_hash.map(engine_digest) {
            None => None,
            Some(d) => match known.and_then(|r| r.slot(d).map(|i| r.blocks.get(i).key)) {
                Some(key) => Some(key),
                None => return Err(ApplyError::UnknownParent),
            },
        };

        let hasher = self.hasher;
        self.replicas
            .entry(replica)
            .or_insert_with(|| Replica::new(hasher))
            .block_size = Some(s.block_size);
        let keep = n.min(self.per_replica_cap());
        let mut applied = Applied {
            evicted: n - keep,
            ..Applied::default()
        };
        self.evictions += (n - keep) as u64;
        if keep == 0 {
            return Ok(applied);
        }
        let mut keys = Vec::with_capacity(keep);
        let mut buf = Vec::with_capacity(bs * 4 + 64);
        let mut parent = parent_key;
        for (i, block) in s.token_ids.chunks_exact(bs).take(keep).enumerate() {
            let extra = s.extras.get(i).copied().unwrap_or(&[]);
            let key = key_into(&mut buf, parent, block, extra);
            keys.push(key);
            parent = Some(key);
        }
        // Tail first, so that if a bound makes this store evict its own blocks, its head stays.
        for (hash, &key) in s.block_hashes[..keep].iter().zip(&keys).rev() {
            self.insert(replica, engine_digest(hash), key, &mut applied);
        }
        Ok(applied)
    }

    /// Apply a `BlockRemoved`: drop the replica's blocks with these engine hashes; unknown
    /// hashes are counted in [`Applied::unknown`].
    pub fn apply_removed(
        &mut self,
        replica: ReplicaId,
        block_hashes: &[EngineHash],
        medium: Option<&str>,
    ) -> Applied {
        let mut applied = Applied::default();
        if !is_cached_medium(medium) {
            applied.ignored = block_hashes.len();
            return applied;
        }
        let Some(r) = self.replicas.get_mut(&replica) else {
            applied.unknown = block_hashes.len();
            return applied;
        };
        for hash in block_hashes {
            match r.slot(engine_digest(hash)) {
                Some(i) => {
                    let block = r.take(i);
                    release(&mut self.holders, block.key, replica);
                    self.entries -= 1;
                    applied.removed += 1;
                }
                None => applied.unknown += 1,
            }
        }
        if r.len() == 0 {
            r.reset();
        }
        applied
    }

    /// Drop all blocks of `replica` (`AllBlocksCleared`); its block size is kept.
    pub fn clear_replica(&mut self, replica: ReplicaId) -> Applied {
        let Some(r) = self.replicas.get_mut(&replica) else {
            return Applied::default();
        };
        for (_, block) in r.blocks.oldest_first() {
            release(&mut self.holders, block.key, replica);
        }
        let removed = r.len();
        self.entries -= removed;
        r.reset();
        Applied {
            removed,
            ..Applied::default()
        }
    }

    /// Forget everything about `replica`, its block size included (it left the pool, or its
    /// engine restarted).
    pub fn remove_replica(&mut self, replica: ReplicaId) {
        self.clear_replica(replica);
        self.replicas.remove(&replica);
        self.adapters.retain(|_, by| {
            by.retain(|r| *r != replica);
            !by.is_empty()
        });
    }

    /// For each candidate, the number of leading `keys` it holds, stopping at the first one it
    /// does not; `out[i]` answers `candidates[i]` (extra candidates or slots are left alone /
    /// zeroed). Cost: see the module docs.
    pub fn longest_prefix(&self, keys: &[BlockHash], candidates: &[ReplicaId], out: &mut [u32]) {
        out.fill(0);
        if keys.is_empty() || self.holders.is_empty() {
            return;
        }
        let mut alive: Bits = [0; WORDS];
        for &c in candidates {
            if c < INLINE_REPLICAS {
                alive[(c / 64) as usize] |= 1 << (c % 64);
            }
        }
        let mut depth = [0u32; INLINE_REPLICAS as usize];
        let mut at = 0usize;
        while alive != [0; WORDS] && at < keys.len() {
            let held = match self.holders.get(&keys[at]) {
                Some(h) => h.bits(&alive),
                None => [0; WORDS],
            };
            for (w, (&a, &h)) in alive.iter().zip(held.iter()).enumerate() {
                let mut ended = a & !h;
                while ended != 0 {
                    depth[w * 64 + ended.trailing_zeros() as usize] = at as u32;
                    ended &= ended - 1;
                }
            }
            alive = held;
            at += 1;
        }
        for (w, &a) in alive.iter().enumerate() {
            let mut left = a;
            while left != 0 {
                depth[w * 64 + left.trailing_zeros() as usize] = at as u32;
                left &= left - 1;
            }
        }
        for (o, &c) in out.iter_mut().zip(candidates) {
            *o = if c < INLINE_REPLICAS {
                depth[c as usize]
            } else {
                keys.iter().take_while(|&&k| self.contains(c, k)).count() as u32
            };
        }
    }

    /// Whether `replica` holds a block with router key `key`.
    pub fn contains(&self, replica: ReplicaId, key: BlockHash) -> bool {
        self.holders
            .get(&key)
            .is_some_and(|h| h.node_of(replica).is_some())
    }

    /// Blocks (engine blocks) held for one replica.
    pub fn replica_blocks(&self, replica: ReplicaId) -> usize {
        self.replicas.get(&replica).map_or(0, Replica::len)
    }

    /// The block size `replica`'s events use, once one `BlockStored` told it (kept across
    /// `AllBlocksCleared`, forgotten by [`PreciseIndex::remove_replica`]). The router hashes a
    /// request with [`prompt_keys`] at this size before asking about this replica.
    pub fn block_size(&self, replica: ReplicaId) -> Option<usize> {
        self.replicas
            .get(&replica)
            .and_then(|r| r.block_size)
            .map(|b| b as usize)
    }

    pub fn stats(&self) -> PreciseStats {
        let replicas = self.replicas.len();
        PreciseStats {
            entries: self.entries,
            blocks: self.holders.len(),
            replicas,
            evictions: self.evictions,
            bytes: self.entries * PRECISE_ENTRY_BYTES + replicas * REPLICA_BYTES,
            capacity_bytes: self
                .limits
                .max_blocks_total
                .saturating_mul(PRECISE_ENTRY_BYTES)
                .saturating_add(replicas * REPLICA_BYTES),
        }
    }

    /// Heap bytes actually reserved, from the tables' capacities (includes the spare capacity
    /// that [`PreciseStats::bytes`] leaves out). Walks every holder set: for metrics and tests,
    /// not the request path.
    pub fn allocated_bytes(&self) -> usize {
        self.holders.capacity().div_ceil(7) * 8 * HOLDER_SLOT_BYTES
            + self
                .holders
                .values()
                .map(Holders::heap_bytes)
                .sum::<usize>()
            + self.replicas.capacity().div_ceil(7) * 8 * REPLICA_BYTES
            + self
                .replicas
                .values()
                .map(Replica::allocated_bytes)
                .sum::<usize>()
    }

    /// Store one block (the replica exists), evicting first if a bound demands it.
    fn insert(&mut self, replica: ReplicaId, digest: u64, key: BlockHash, applied: &mut Applied) {
        if let Some(r) = self.replicas.get_mut(&replica) {
            if let Some(i) = r.slot(digest) {
                if r.blocks.get(i).key == key {
                    r.blocks.touch(i);
                    applied.refreshed += 1;
                    return;
                }
                // The engine reused a hash for other tokens: re-point it.
                let old = r.take(i);
                release(&mut self.holders, old.key, replica);
                self.entries -= 1;
            }
        }
        let cap = self.per_replica_cap();
        while self.replica_blocks(replica) >= cap && self.evict_oldest(replica) {
            applied.evicted += 1;
        }
        while self.entries >= self.limits.max_blocks_total {
            let Some(victim) = self.largest_replica() else {
                break;
            };
            if !self.evict_oldest(victim) {
                break;
            }
            applied.evicted += 1;
        }
        let hasher = self.hasher;
        let r = self
            .replicas
            .entry(replica)
            .or_insert_with(|| Replica::new(hasher));
        r.push(digest, key, cap);
        hold(&mut self.holders, key, replica);
        self.entries += 1;
        applied.stored += 1;
    }

    /// Evict `replica`'s oldest block; `false` when it has none.
    fn evict_oldest(&mut self, replica: ReplicaId) -> bool {
        let Some(r) = self.replicas.get_mut(&replica) else {
            return false;
        };
        let Some(oldest) = r.blocks.oldest() else {
            return false;
        };
        let block = r.take(oldest);
        release(&mut self.holders, block.key, replica);
        if r.len() == 0 {
            r.reset();
        }
        self.entries -= 1;
        self.evictions += 1;
        true
    }

    /// The replica holding the most blocks (ties: the lowest id), if any holds one.
    fn largest_replica(&self) -> Option<ReplicaId> {
        self.replicas
            .iter()
            .filter(|(_, r)| r.len() > 0)
            .max_by_key(|(&id, r)| (r.len(), std::cmp::Reverse(id)))
            .map(|(&id, _)| id)
    }

    /// Check every internal invariant (tests only): counts, links, maps and holder counts agree.
    /// `ids` must list every replica id the test used, for the holder cross-check.
    #[cfg(test)]
    pub(super) fn check(&self, ids: &[ReplicaId]) {
        let mut counts: HashMap<(BlockHash, ReplicaId), u32> = HashMap::new();
        let mut total = 0;
        for (&id, r) in &self.replicas {
            assert!(ids.contains(&id), "{id}");
            r.blocks.assert_consistent();
            assert_eq!(r.by_engine.len(), r.len());
            assert!(r.len() <= self.per_replica_cap());
            assert!(r.blocks.capacity() <= self.per_replica_cap().max(1));
            if r.len() == 0 {
                assert_eq!(r.blocks.capacity(), 0);
            }
            for Block { digest, key } in r.oldest_first() {
                let i = r.by_engine[&digest];
                assert_eq!(r.blocks.get(i).key, key);
                *counts.entry((key, id)).or_default() += 1;
            }
            total += r.len();
        }
        assert_eq!(total, self.entries);
        assert!(self.entries <= self.limits.max_blocks_total);
        for (&key, h) in &self.holders {
            for &id in ids {
                assert_eq!(
                    h.node_of(id),
                    counts.get(&(key, id)).copied(),
                    "{key:x} {id}"
                );
            }
        }
        let keys: std::collections::HashSet<BlockHash> = counts.keys().map(|k| k.0).collect();
        assert_eq!(keys.len(), self.holders.len());
    }
}

impl PrefixIndex for PreciseIndex {
    fn longest_prefix(&self, hashes: &[BlockHash], candidates: &[ReplicaId], out: &mut [u32]) {
        PreciseIndex::longest_prefix(self, hashes, candidates, out);
    }

    /// Ignored: only the engines' events say what they hold.
    fn on_routed(&mut self, _replica: ReplicaId, _hashes: &[BlockHash]) {}

    fn remove_replica(&mut self, replica: ReplicaId) {
        PreciseIndex::remove_replica(self, replica);
    }

    fn stats(&self) -> IndexStats {
        let s = PreciseIndex::stats(self);
        IndexStats {
            bytes: s.bytes,
            capacity_bytes: s.capacity_bytes,
            entries: s.entries,
            evictions: s.evictions,
        }
    }
}

#[cfg(test)]
mod tests;
