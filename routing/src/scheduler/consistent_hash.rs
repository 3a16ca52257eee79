//! Peer baseline `consistent_hash`: consistent hashing with bounded loads (Mirrokni, Thorup,
//! Zadimoghaddam, "Consistent Hashing with Bounded Loads", SODA 2018), keyed on the prompt's
//! first blocks, without warmpath's additions (no prefix index, no engine metrics, no hot-spot
//! guard, no stickiness rule).
//!
//! The algorithm, as Envoy's ring hash with `hash_balance_factor` and HAProxy's
//! `hash-type consistent` with `hash-balance-factor` ship it:
//! - a ring of `virtual_nodes` points per replica (the xxh3 hash of the replica id and the point
//!   number; Envoy hashes `"host_i"` strings with xxHash the same way);
//! - the request's key is the chained hash of its first `prefix_blocks` blocks (the hash of block
//!   `N − 1` covers blocks `0..N`), of its last full block when the prompt is shorter, and
//!   [`EMPTY_PROMPT_KEY`] when it has no full block;
//! - walk clockwise from the key (the first point at or after it, wrapping) to the first replica
//!   whose in-flight requests are below the capacity
//!   `ceil((1 + epsilon) × (total in flight + 1) / replicas)`, the `+ 1` being the request being
//!   placed (the paper's `m` balls include it). Envoy's `hash_balance_factor` is
//!   `100 × (1 + epsilon)`.
//!
//! The capacity exceeds the average load, so some replica is always below it and the walk ends
//! within one turn of the ring. Load is the router's own in-flight count per replica, as Envoy
//! and HAProxy count their own active requests or connections.
//!
//! The ring depends only on the candidate ids. Building one for 256 replicas at 100 points each
//! (sorting 25,600 points) and deciding took 588 µs where the whole index lookup and decision
//! with the ring cached took 3.4 µs (`benches/decision.rs`: `consistent_hash_ring/
//! build_256x100_and_decide` against `lookup_and_decide_32k_256_replicas/Typical/ConsistentHash`,
//! at `nice 19` on the shared 2-core machine), so the [`RingCache`] keeps the rings of the last
//! few candidate lists and a decision only looks its ring up and walks it.

use super::config::{ConsistentHash, MAX_VIRTUAL_NODES};
use super::view::ReplicaView;
use crate::{BlockHash, ReplicaId};
use std::sync::{Arc, Mutex, PoisonError};
use xxhash_rust::xxh3::xxh3_64;

/// The key of a prompt with no full block: all such prompts share one place on the ring.
pub const EMPTY_PROMPT_KEY: BlockHash = 0;

/// Rings kept per scheduler: one per candidate list in use (one per pool, plus the lists left
/// when a replica is unready or excluded by a retry). Least recently used first out.
const CACHED_RINGS: usize = 8;

/// The request's place on the ring: the chained hash of its first `prefix_blocks` full blocks.
pub fn ring_key(hashes: &[BlockHash], prefix_blocks: u32) -> BlockHash {
    let n = usize::try_from(prefix_blocks.max(1))
        .unwrap_or(usize::MAX)
        .min(hashes.len());
    match n {
        0 => EMPTY_PROMPT_KEY,
        n => hashes[n - 1],
    }
}

/// The bounded-load capacity: a replica takes the request while its in-flight count is below
/// this. A NaN or negative `epsilon` counts as 0 (the tightest bound, still always satisfiable).
pub fn capacity(epsilon: f64, total_inflight: u64, replicas: usize) -> f64 {
    let eps = if epsilon >= 0.0 { epsilon } else { 0.0 };
    let exact = (1.0 + eps) * (total_inflight as f64 + 1.0) / replicas.max(1) as f64;
    // Float rounding must not lift an exact integer (1.1 × 10 / 11) to the next one.
    (exact - exact * 1e-12).ceil()
}

/// Pick a candidate by bounded-load consistent hashing.
pub(super) fn consistent_hash(
    config: &ConsistentHash,
    rings: &RingCache,
    hashes: &[BlockHash],
    candidates: &[ReplicaView<'_>],
) -> usize {
    let ring = rings.get(candidates, config.virtual_nodes);
    let total: u64 = candidates
        .iter()
        .map(|c| u64::from(c.inflight_requests))
        .sum();
    let cap = capacity(config.epsilon, total, candidates.len());
    let key = ring_key(hashes, config.prefix_blocks);
    ring.walk(key, |i| f64::from(candidates[i].inflight_requests) < cap)
        .unwrap_or(0)
}

/// A hash ring over one candidate list: sorted points, each owned by a candidate index.
#[derive(Debug)]
pub(super) struct Ring {
    /// The candidate ids the ring was built for, in candidate order (the cache key).
    ids: Vec<ReplicaId>,
    points: Vec<u64>,
    /// `owners[k]`: index into the candidate list of the replica at `points[k]`.
    owners: Vec<u32>,
}

impl Ring {
    pub(super) fn build(ids: &[ReplicaId], virtual_nodes: u32) -> Self {
        let per = virtual_nodes.clamp(1, MAX_VIRTUAL_NODES);
        let mut all: Vec<(u64, ReplicaId, u32)> = Vec::with_capacity(ids.len() * per as usize);
        for (i, &id) in ids.iter().enumerate() {
            let index = u32::try_from(i).unwrap_or(u32::MAX);
            all.extend((0..per).map(|v| (point(id, v), id, index)));
        }
        // By point, then id: the order (and so every decision) does not depend on the order
        // of the candidates.
        all.sort_unstable();
        Self {
            ids: ids.to_vec(),
            points: all.iter().map(|p| p.0).collect(),
            owners: all.iter().map(|p| p.2).collect(),
        }
    }

    /// The first candidate clockwise from `key` (at or after it, wrapping) that `accepts`.
    pub(super) fn walk(&self, key: u64, mut accepts: impl FnMut(usize) -> bool) -> Option<usize> {
        let len = self.points.len();
        let start = self.points.partition_point(|&p| p < key);
        (0..len)
            .map(|k| self.owners[(start + k) % len] as usize)
            .find(|&i| accepts(i))
    }

    fn serves(&self, candidates: &[ReplicaView<'_>]) -> bool {
        self.ids.len() == candidates.len()
            && self.ids.iter().zip(candidates).all(|(&id, c)| id == c.id)
    }
}

/// Replica `id`'s `vnode`-th point on the ring.
fn point(id: ReplicaId, vnode: u32) -> u64 {
    let mut bytes = [0u8; 8];
    bytes[..4].copy_from_slice(&id.to_le_bytes());
    bytes[4..].copy_from_slice(&vnode.to_le_bytes());
    xxh3_64(&bytes)
}

/// The rings of the last [`CACHED_RINGS`] candidate lists, most recently used first. A cache,
/// not state: a decision is the same whether its ring was cached or built.
#[derive(Debug, Default)]
pub(super) struct RingCache {
    rings: Mutex<Vec<Arc<Ring>>>,
}

impl RingCache {
    /// The ring for this candidate list (same ids, same order), built if it is not cached.
    pub(super) fn get(&self, candidates: &[ReplicaView<'_>], virtual_nodes: u32) -> Arc<Ring> {
        {
            let mut rings = self.rings.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(pos) = rings.iter().position(|r| r.serves(candidates)) {
                rings[..=pos].rotate_right(1);
                return Arc::clone(&rings[0]);
            }
        }
        // Built outside the lock: other lists' decisions do not wait for it.
        let ids: Vec<ReplicaId> = candidates.iter().map(|c| c.id).collect();
        let ring = Arc::new(Ring::build(&ids, virtual_nodes));
        let mut rings = self.rings.lock().unwrap_or_else(PoisonError::into_inner);
        if !rings.iter().any(|r| r.serves(candidates)) {
            rings.insert(0, Arc::clone(&ring));
            rings.truncate(CACHED_RINGS);
        }
        ring
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.rings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predict::TtftModel;

    fn fleet<'a>(m: &'a TtftModel, inflight: &[u32]) -> Vec<ReplicaView<'a>> {
        inflight
            .iter()
            .enumerate()
            .map(|(i, &n)| ReplicaView {
                id: i as ReplicaId * 10 + 3,
                key: i as u64,
                inflight_requests: n,
                inflight_tokens: 0,
                engine: None,
                matched_blocks: 0,
                pending_prefill_tokens: 0,
                inflight_uncached_tokens: 0,
                room: None,
                ttft: m,
            })
            .collect()
    }

    fn pick(config: &ConsistentHash, hashes: &[BlockHash], cands: &[ReplicaView<'_>]) -> usize {
        consistent_hash(config, &RingCache::default(), hashes, cands)
    }

    #[test]
    fn the_key_is_the_hash_of_the_first_blocks() {
        let h = [11, 22, 33, 44, 55, 66];
        assert_eq!(ring_key(&h, 4), 44);
        assert_eq!(ring_key(&h, 1), 11);
        assert_eq!(
            ring_key(&h[..2], 4),
            22,
            "shorter prompt: its last full block"
        );
        assert_eq!(ring_key(&[], 4), EMPTY_PROMPT_KEY);
        assert_eq!(ring_key(&h, 0), 11, "0 blocks is read as 1");
        assert_eq!(ring_key(&h, u32::MAX), 66);
    }

    #[test]
    fn capacity_is_the_papers_bound() {
        // ceil(1.25 × (7 + 1) / 4) = ceil(2.5) = 3.
        assert_eq!(capacity(0.25, 7, 4), 3.0);
        // Exact integers stay exact: ceil(1.25 × 4 / 5) = 1, ceil(1.1 × 10 / 11) = 1.
        assert_eq!(capacity(0.25, 3, 5), 1.0);
        assert_eq!(capacity(0.1, 9, 11), 1.0);
        assert_eq!(capacity(0.0, 0, 8), 1.0);
        assert_eq!(capacity(f64::NAN, 7, 4), 2.0);
        assert_eq!(capacity(-3.0, 7, 4), 2.0);
        assert_eq!(capacity(0.25, 7, 0), 10.0);
    }

    #[test]
    fn the_ring_walks_clockwise_and_wraps() {
        let ring = Ring::build(&[5, 6, 7], 1);
        let mut pts: Vec<(u64, u32)> = [5u32, 6, 7]
            .iter()
            .enumerate()
            .map(|(i, &id)| (point(id, 0), i as u32))
            .collect();
        pts.sort_unstable();
        // At a point: that point's owner. Just past it: the next one. Past the last: the first.
        assert_eq!(ring.walk(pts[1].0, |_| true), Some(pts[1].1 as usize));
        assert_eq!(ring.walk(pts[1].0 + 1, |_| true), Some(pts[2].1 as usize));
        assert_eq!(ring.walk(pts[2].0 + 1, |_| true), Some(pts[0].1 as usize));
        assert_eq!(ring.walk(0, |_| true), Some(pts[0].1 as usize));
        // Skipping a full replica moves on clockwise; none accepted: none.
        let owner = pts[1].1 as usize;
        assert_eq!(ring.walk(pts[1].0, |i| i != owner), Some(pts[2].1 as usize));
        assert_eq!(ring.walk(pts[1].0, |_| false), None);
    }

    #[test]
    fn same_first_blocks_same_replica_whatever_follows() {
        let m = TtftModel::default();
        let cands = fleet(&m, &[0; 8]);
        let c = ConsistentHash::default();
        let a = pick(&c, &[1, 2, 3, 4, 100, 101], &cands);
        assert_eq!(pick(&c, &[1, 2, 3, 4, 200], &cands), a);
        assert_eq!(
            pick(&c, &[9, 9, 9, 4], &cands),
            a,
            "only block N-1's hash counts"
        );
        // Keys spread over the fleet.
        let mut used = [0u32; 8];
        for k in 0..4000u64 {
            let key = k.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            used[pick(&c, &[key], &cands)] += 1;
        }
        assert!(used.iter().all(|&n| (300..700).contains(&n)), "{used:?}");
    }

    #[test]
    fn a_full_replica_passes_the_request_clockwise() {
        let m = TtftModel::default();
        let c = ConsistentHash::default();
        let key = [42u64];
        let idle = fleet(&m, &[0; 4]);
        let home = pick(&c, &key, &idle);
        // 6 in flight in total, 2 on home: capacity ceil(1.25 × 7 / 4) = 3, home takes it.
        let mut load = [0u32; 4];
        load[home] = 2;
        load[(home + 1) % 4] = 4;
        assert_eq!(pick(&c, &key, &fleet(&m, &load)), home);
        // 2 in flight, both on home: capacity ceil(1.25 × 3 / 4) = 1, home is full, so the
        // next replica clockwise with room takes it.
        let mut load = [0u32; 4];
        load[home] = 2;
        let next = pick(&c, &key, &fleet(&m, &load));
        assert_ne!(next, home);
        let ring = Ring::build(
            &fleet(&m, &load).iter().map(|v| v.id).collect::<Vec<_>>(),
            100,
        );
        assert_eq!(ring.walk(42, |i| i != home), Some(next));
        // epsilon large: the bound never binds.
        let loose = ConsistentHash {
            epsilon: 100.0,
            ..c
        };
        assert_eq!(pick(&loose, &key, &fleet(&m, &load)), home);
    }

    #[test]
    fn no_replica_ever_exceeds_the_bound() {
        // Every request has the same key: plain consistent hashing would send all of them to
        // one replica; the bound spreads them, and no replica exceeds it.
        let m = TtftModel::default();
        let c = ConsistentHash::default();
        let rings = RingCache::default();
        let mut load = vec![0u32; 5];
        for _ in 0..200 {
            let total: u32 = load.iter().sum();
            let cap = capacity(c.epsilon, u64::from(total), load.len());
            let cands = fleet(&m, &load);
            let i = consistent_hash(&c, &rings, &[7], &cands);
            assert!(f64::from(load[i]) < cap, "{load:?} cap {cap}");
            load[i] += 1;
        }
        let max = *load.iter().max().unwrap();
        assert!(f64::from(max) <= (1.25f64 * 200.0 / 5.0).ceil(), "{load:?}");
    }

    #[test]
    fn removing_a_replica_moves_only_its_keys() {
        let m = TtftModel::default();
        let c = ConsistentHash::default();
        let all = fleet(&m, &[0; 8]);
        let without: Vec<ReplicaView<'_>> =
            all.iter().filter(|v| v.id != all[3].id).cloned().collect();
        let mut moved = 0;
        for k in 0..2000u64 {
            let key = [k.wrapping_mul(0x9e37_79b9_7f4a_7c15)];
            let before = all[pick(&c, &key, &all)].id;
            let after = without[pick(&c, &key, &without)].id;
            if before != all[3].id {
                assert_eq!(before, after, "key {k}");
            } else {
                moved += 1;
            }
        }
        assert!((150..350).contains(&moved), "{moved}");
    }

    #[test]
    fn rings_are_cached_per_candidate_list() {
        let m = TtftModel::default();
        let cache = RingCache::default();
        let a = fleet(&m, &[0; 4]);
        let r1 = cache.get(&a, 100);
        assert!(Arc::ptr_eq(&r1, &cache.get(&a, 100)));
        let b = fleet(&m, &[0; 3]);
        let r2 = cache.get(&b, 100);
        assert!(!Arc::ptr_eq(&r1, &r2));
        assert_eq!(cache.len(), 2);
        for n in 1..=20 {
            cache.get(&fleet(&m, &vec![0; n]), 100);
        }
        assert_eq!(cache.len(), CACHED_RINGS);
        // A reordered list is another key but places keys identically.
        let mut rev = a.clone();
        rev.reverse();
        let c = ConsistentHash::default();
        for k in 0..100u64 {
            let key = [k.wrapping_mul(0x9e37_79b9_7f4a_7c15)];
            assert_eq!(
                a[pick(&c, &key, &a)].id,
                rev[pick(&c, &key, &rev)].id,
                "key {k}"
            );
        }
    }
}
