//! The approximate index against a brute-force reference: matches, eviction order, bounds, and
//! random operation sequences.

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
fn a_replica_capacity_bounds_that_replica_only() {
    let mut ix = index_with_entries(100);
    let prompt = chain("abcdefghijklmnopqrst");
    ix.on_routed(0, &prompt);
    ix.on_routed(1, &prompt);
    // Replica 0's engine holds 8 blocks: the index keeps its 8 most recent, at once.
    ix.set_replica_capacity(0, Some(8));
    assert_eq!(ix.replica_entries(0), 8);
    assert_eq!(ix.replica_entries(1), 20);
    // The first blocks are the most recently touched ones (routing touches them last).
    assert_eq!(matches(&ix, &prompt, &[0, 1]), vec![8, 20]);
    let other = chain("ABCDEFGHIJKLMNOPQRST");
    ix.on_routed(0, &other);
    assert_eq!(
        ix.replica_entries(0),
        8,
        "the bound holds for new blocks too"
    );
    // One request records at most half the bound: its first 4 blocks.
    assert_eq!(matches(&ix, &other, &[0]), vec![4]);
    assert_eq!(matches(&ix, &prompt, &[0]), vec![4]);
    // Back to the byte bound alone; a capacity above it changes nothing.
    ix.set_replica_capacity(0, Some(1000));
    ix.on_routed(0, &prompt);
    assert_eq!(ix.replica_entries(0), 24);
    ix.set_replica_capacity(0, None);
    assert_eq!(brute(&ix, &prompt, &[0, 1]), matches(&ix, &prompt, &[0, 1]));
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
    let mut ix = index_with_entries(12);
    let a = chain("aaaaaa");
    ix.on_routed(0, &a);
    ix.on_routed(0, &chain("bbbb"));
    ix.on_routed(0, &chain("ccc"));
    // 6 + 4 + 3 > 12: one block of `a` goes, and it must be its last one.
    assert_eq!(matches(&ix, &a, &[0]), vec![5]);
}

#[test]
fn a_giant_prompt_keeps_its_head_and_half_of_what_was_there() {
    let mut ix = index_with_entries(8);
    let old = chain("ABCDEFGH");
    ix.on_routed(2, &old[..4]);
    ix.on_routed(2, &old[4..]);
    let a = chain("abcdefghijklmnopqrstuvwxyz");
    ix.on_routed(2, &a);
    // Its first half-a-bound of blocks, no more: the giant prompt (which the engine may well
    // refuse) does not flush the replica.
    assert_eq!(matches(&ix, &a, &[2]), vec![4]);
    assert_eq!(ix.stats().entries, 8);
    assert!(
        ix.contains(2, old[4]),
        "the newer half of what was there stays"
    );
    assert!(!ix.contains(2, old[0]), "the older half made room");
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
    assert_eq!(ix.block_count(), 0);
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
    // Replica 0 held 50 (half the bound: one request's most), replica 1 30.
    assert_eq!(s.evictions, 40);
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
    assert_eq!(ix.block_count(), 0);
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
                    // A just-routed prompt matches there at least as far as one request may
                    // record (half the bound), and never past the bound.
                    let got = matches(&ix, &h, &[r])[0] as usize;
                    let cap = ix.entries_per_replica();
                    prop_assert!(got >= h.len().min(cap.div_ceil(2)), "{} of {}", got, h.len());
                    prop_assert!(got <= h.len().min(cap));
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
        prop_assert!(got[1] as usize >= hashes.len().min(32));
    }
}

/// `room` tells the scheduler what a replica can take before it evicts, and how many routings
/// ago its next victim was last used; a bound shrunk by compaction keeps those ages.
#[test]
fn room_reports_free_blocks_and_the_age_of_the_next_victim() {
    use super::CacheRoom;
    let mut ix = ApproxIndex::new(IndexLimits {
        max_bytes_per_replica: 1000 * ENTRY_BYTES,
    });
    ix.set_replica_capacity(0, Some(10));
    ix.set_replica_capacity(1, Some(10));
    assert_eq!(
        ix.room(0),
        CacheRoom {
            free_blocks: 10,
            idle_routings: u32::MAX
        }
    );
    ix.on_routed(0, &[1, 2, 3, 4]);
    assert_eq!(ix.room(0).free_blocks, 6);
    assert_eq!(ix.room(0).idle_routings, 0);
    // Routings elsewhere age replica 0's blocks; a touch of all of them makes them new again.
    ix.on_routed(1, &[7, 8]);
    ix.on_routed(1, &[7, 8]);
    assert_eq!(ix.room(0).idle_routings, 2);
    assert_eq!(ix.room(1).idle_routings, 0);
    ix.on_routed(0, &[5, 6, 7, 8, 9]);
    assert_eq!(ix.room(0).free_blocks, 1);
    assert_eq!(
        ix.room(0).idle_routings,
        3,
        "blocks 1-4, routed three routings ago"
    );
    // Full: the next prompt evicts block 4, and the next victim is as old.
    ix.on_routed(0, &[10, 11]);
    assert_eq!(ix.room(0).free_blocks, 0);
    assert!(!ix.contains(0, 4));
    assert_eq!(ix.room(0).idle_routings, 4);
    // Blocks 1-3 used again: the oldest left is block 9, from two routings ago.
    ix.on_routed(0, &[1, 2, 3]);
    assert_eq!(ix.room(0).idle_routings, 2);
    // Shrinking compacts the replica's LRU and keeps when each block was last used: the
    // four most recent stay (a prompt is recorded last block first), the oldest of them
    // block 10, from one routing ago.
    ix.set_replica_capacity(0, Some(4));
    assert_eq!(ix.room(0).free_blocks, 0);
    assert!(ix.contains(0, 10) && !ix.contains(0, 11));
    assert_eq!(ix.room(0).idle_routings, 1);
}
