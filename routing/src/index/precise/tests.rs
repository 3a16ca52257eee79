//! The precise index against `prompt_keys` and a brute-force model: chains, per-replica maps,
//! removals, errors, determinism across router replicas, bounds and random event sequences.

use super::*;
use proptest::prelude::*;
use std::collections::HashSet;

const BS: usize = 4;

fn limits(per: usize, total: usize) -> PreciseLimits {
    PreciseLimits {
        max_blocks_per_replica: per,
        max_blocks_total: total,
    }
}

fn big() -> PreciseIndex {
    PreciseIndex::new(limits(10_000, 100_000))
}

/// An engine's chained block hashes for `tokens`, in its own scheme: `seed` plays the engine's
/// hash seed, so two engines (or two runs) give different hashes for the same tokens.
fn engine_hashes(tokens: &[u32], bs: usize, seed: u64) -> Vec<EngineHash> {
    let mut parent = seed;
    tokens
        .chunks_exact(bs)
        .map(|b| {
            let bytes: Vec<u8> = b.iter().flat_map(|t| t.to_le_bytes()).collect();
            parent = xxh3_64_with_seed(&bytes, parent);
            EngineHash::Int(parent)
        })
        .collect()
}

/// The `BlockStored` events an engine with hash `seed` emits for `tokens`, `per_event` blocks at
/// a time, each naming the previous event's last block as its parent.
fn stores(tokens: &[u32], bs: usize, seed: u64, per_event: usize) -> Vec<KvEvent> {
    let hashes = engine_hashes(tokens, bs, seed);
    let mut parent: Option<EngineHash> = None;
    hashes
        .chunks(per_event)
        .enumerate()
        .map(|(i, hs)| {
            let start = i * per_event * bs;
            let ev = KvEvent::BlockStored {
                block_hashes: hs.to_vec(),
                parent_block_hash: parent.clone(),
                token_ids: tokens[start..start + hs.len() * bs].to_vec(),
                block_size: bs as u32,
                lora_id: None,
                lora_name: None,
                medium: Some(MEDIUM_GPU.to_string()),
                extra_keys: Vec::new(),
            };
            parent = hs.last().cloned();
            ev
        })
        .collect()
}

fn feed(ix: &mut PreciseIndex, replica: ReplicaId, events: &[KvEvent]) {
    for e in events {
        ix.apply(replica, e).unwrap();
    }
}

fn matches(ix: &PreciseIndex, keys: &[u64], candidates: &[ReplicaId]) -> Vec<u32> {
    let mut out = vec![u32::MAX; candidates.len()];
    ix.longest_prefix(keys, candidates, &mut out);
    out
}

fn brute(ix: &PreciseIndex, keys: &[u64], candidates: &[ReplicaId]) -> Vec<u32> {
    candidates
        .iter()
        .map(|&c| keys.iter().take_while(|&&k| ix.contains(c, k)).count() as u32)
        .collect()
}

fn toks(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32).map(|i| i.wrapping_mul(7919) ^ salt).collect()
}

#[test]
fn keys_chain_and_are_injective() {
    let t = toks(12, 0);
    let keys = prompt_keys(&t, BS, &[]);
    assert_eq!(keys.len(), 3);
    assert_eq!(keys[0], block_key(None, &t[..4], &[]));
    assert_eq!(keys[1], block_key(Some(keys[0]), &t[4..8], &[]));
    assert_eq!(keys[2], block_key(Some(keys[1]), &t[8..], &[]));
    // Partial blocks get no key; block size 0 gives none.
    assert_eq!(prompt_keys(&t[..11], BS, &[]), keys[..2]);
    assert!(prompt_keys(&t, 0, &[]).is_empty());
    // Token/extra boundary and extras matter.
    assert_ne!(
        block_key(None, &[1, 2], &[]),
        block_key(None, &[1], &2u32.to_le_bytes())
    );
    assert_ne!(block_key(None, &t[..4], b"salt"), keys[0]);
    assert_eq!(salted_first(&t)[0], block_key(None, &t[..4], b"salt"));
    assert_eq!(
        salted_first(&t)[1],
        block_key(Some(block_key(None, &t[..4], b"salt")), &t[4..8], &[])
    );
    assert_eq!(prompt_keys(&t, BS, b"x"), prompt_keys_by(&t, BS, |_| b"x"));
}

#[test]
fn stored_chains_match_prompt_keys() {
    let mut ix = big();
    let t = toks(40, 1);
    feed(&mut ix, 3, &stores(&t, BS, 99, 3));
    assert_eq!(ix.replica_blocks(3), 10);
    assert_eq!(ix.block_size(3), Some(BS));
    assert_eq!(ix.block_size(4), None);
    // The same tokens, extended: all stored blocks match.
    let mut longer = t.clone();
    longer.extend(toks(17, 5));
    let keys = prompt_keys(&longer, BS, &[]);
    assert_eq!(matches(&ix, &keys, &[3, 4]), vec![10, 0]);
    // A different token in block 6 matches 6 blocks.
    let mut changed = t.clone();
    changed[6 * BS + 2] ^= 1;
    assert_eq!(matches(&ix, &prompt_keys(&changed, BS, &[]), &[3]), vec![6]);
    // Extra keys the store did not have do not match.
    assert_eq!(matches(&ix, &prompt_keys(&t, BS, b"lora"), &[3]), vec![0]);
    assert_eq!(matches(&ix, &[], &[3]), vec![0]);
    let s = ix.stats();
    assert_eq!(
        (s.entries, s.blocks, s.replicas, s.evictions),
        (10, 10, 1, 0)
    );
    assert_eq!(
        s.bytes,
        10 * PRECISE_ENTRY_BYTES + REPLICA_BYTES,
        "{PRECISE_ENTRY_BYTES}"
    );
}

/// `t`'s keys with `salt` folded into its first block only (as vLLM folds a `cache_salt`).
fn salted_first(t: &[u32]) -> Vec<u64> {
    prompt_keys_by(t, BS, |i| if i == 0 { b"salt" } else { b"" })
}

#[test]
fn extras_passed_per_block_match_salted_prompt_keys() {
    let mut ix = big();
    let t = toks(12, 2);
    let hashes = engine_hashes(&t, BS, 1);
    let extras: [&[u8]; 3] = [b"salt", b"", b""];
    let stored = StoredBlocks {
        block_hashes: &hashes,
        parent_block_hash: None,
        token_ids: &t,
        block_size: BS as u32,
        medium: None,
        extras: &extras,
    };
    assert_eq!(ix.apply_stored(0, stored).unwrap().stored, 3);
    let keys = salted_first(&t);
    assert_eq!(matches(&ix, &keys, &[0]), vec![3]);
    assert_eq!(matches(&ix, &prompt_keys(&t, BS, &[]), &[0]), vec![0]);
    let bad = StoredBlocks {
        extras: &extras[..2],
        ..stored
    };
    assert!(matches!(
        ix.apply_stored(0, bad),
        Err(ApplyError::Malformed(_))
    ));
}

#[test]
fn parents_are_per_replica() {
    let mut ix = big();
    let t = toks(16, 3);
    let events = stores(&t, BS, 7, 2);
    feed(&mut ix, 1, &events);
    // Replica 2 never stored the first event: its parent is unknown there.
    let before = ix.stats();
    assert_eq!(ix.apply(2, &events[1]), Err(ApplyError::UnknownParent));
    assert_eq!(ix.stats(), before);
    assert_eq!(ix.replica_blocks(2), 0);
    assert_eq!(ix.block_size(2), None);
    feed(&mut ix, 2, &events);
    let keys = prompt_keys(&t, BS, &[]);
    assert_eq!(matches(&ix, &keys, &[1, 2]), vec![4, 4]);
    // Shared blocks count once in `blocks`, once per replica in `entries`.
    assert_eq!((ix.stats().entries, ix.stats().blocks), (8, 4));
}

#[test]
fn removal_by_engine_hash_clear_and_remove_replica() {
    let mut ix = big();
    let t = toks(24, 4);
    let keys = prompt_keys(&t, BS, &[]);
    feed(&mut ix, 0, &stores(&t, BS, 11, 6));
    feed(&mut ix, 1, &stores(&t, BS, 22, 2));
    let h0 = engine_hashes(&t, BS, 11);
    // Removing block 3 on replica 0 (and an unknown hash, and replica 1's hash for block 0,
    // which replica 0 does not know) cuts replica 0's match at 3.
    let removed = KvEvent::BlockRemoved {
        block_hashes: vec![
            h0[3].clone(),
            EngineHash::Int(12345),
            engine_hashes(&t, BS, 22)[0].clone(),
        ],
        medium: None,
    };
    let a = ix.apply(0, &removed).unwrap();
    assert_eq!((a.removed, a.unknown), (1, 2));
    assert_eq!(matches(&ix, &keys, &[0, 1]), vec![3, 6]);
    assert_eq!(ix.replica_blocks(0), 5);
    // Removing from an unknown replica is harmless.
    assert_eq!(ix.apply(9, &removed).unwrap().unknown, 3);
    // AllBlocksCleared drops the blocks, keeps the block size.
    assert_eq!(ix.apply(0, &KvEvent::AllBlocksCleared).unwrap().removed, 5);
    assert_eq!(matches(&ix, &keys, &[0, 1]), vec![0, 6]);
    assert_eq!(ix.block_size(0), Some(BS));
    assert_eq!(ix.stats().entries, 6);
    ix.remove_replica(1);
    ix.remove_replica(77);
    assert_eq!(matches(&ix, &keys, &[0, 1]), vec![0, 0]);
    let s = ix.stats();
    assert_eq!((s.entries, s.blocks, s.replicas), (0, 0, 1));
    ix.remove_replica(0);
    assert_eq!(ix.stats().replicas, 0);
    assert_eq!(ix.block_size(0), None);
    ix.check(&[0, 1, 9, 77]);
}

#[test]
fn errors_change_nothing() {
    let mut ix = big();
    let t = toks(8, 5);
    feed(&mut ix, 0, &stores(&t, BS, 1, 2));
    let before = ix.stats();
    let stored = |hashes: Vec<EngineHash>, parent, tokens: Vec<u32>, bs| KvEvent::BlockStored {
        block_hashes: hashes,
        parent_block_hash: parent,
        token_ids: tokens,
        block_size: bs,
        lora_id: None,
        lora_name: None,
        medium: None,
        extra_keys: Vec::new(),
    };
    let h = |v: u64| EngineHash::Int(v);
    let cases = [
        stored(vec![h(1)], Some(h(424242)), toks(4, 0), 4),
        stored(vec![h(1)], None, toks(5, 0), 4),
        stored(vec![h(1), h(2)], None, toks(4, 0), 4),
        stored(vec![h(1)], None, vec![], 0),
        stored(vec![], None, toks(4, 0), 4),
        stored(vec![h(1)], None, toks(8, 0), 8),
        stored(vec![h(1)], None, vec![], u32::MAX),
    ];
    let want = [
        ApplyError::UnknownParent,
        ApplyError::Malformed(""),
        ApplyError::Malformed(""),
        ApplyError::Malformed(""),
        ApplyError::Malformed(""),
        ApplyError::BlockSizeChanged { was: 4, now: 8 },
        ApplyError::Malformed(""),
    ];
    for (e, w) in cases.iter().zip(want) {
        let got = ix.apply(0, e).unwrap_err();
        match (&got, &w) {
            (ApplyError::Malformed(_), ApplyError::Malformed(_)) => {}
            _ => assert_eq!(got, w),
        }
        assert_eq!(ix.stats(), before);
    }
    // An empty store is a no-op, whatever its parent.
    assert_eq!(
        ix.apply(0, &stored(vec![], Some(h(9)), vec![], 4)),
        Ok(Applied::default())
    );
    // After forgetting the replica, the new block size is accepted.
    ix.remove_replica(0);
    ix.apply(0, &cases[5]).unwrap();
    assert_eq!(ix.block_size(0), Some(8));
    ix.check(&[0]);
}

#[test]
fn other_media_are_ignored() {
    let mut ix = big();
    let t = toks(8, 6);
    let mut events = stores(&t, BS, 3, 2);
    if let KvEvent::BlockStored { medium, .. } = &mut events[0] {
        *medium = Some("CPU".into());
    }
    assert_eq!(ix.apply(0, &events[0]).unwrap().ignored, 2);
    assert_eq!(ix.replica_blocks(0), 0);
    if let KvEvent::BlockStored { medium, .. } = &mut events[0] {
        *medium = Some("gpu".into());
    }
    feed(&mut ix, 0, &events);
    let removed = KvEvent::BlockRemoved {
        block_hashes: engine_hashes(&t, BS, 3),
        medium: Some("CPU".into()),
    };
    assert_eq!(ix.apply(0, &removed).unwrap().ignored, 2);
    assert_eq!(matches(&ix, &prompt_keys(&t, BS, &[]), &[0]), vec![2]);
}

#[test]
fn router_replicas_agree_and_engine_hashes_do_not_matter() {
    let seqs: Vec<Vec<u32>> = (0..6)
        .map(|i| {
            let mut s = toks(32, 0); // a shared system prompt
            s.extend(toks(8 + 4 * i, i as u32 + 1));
            s
        })
        .collect();
    // Two router replicas fed the same events; a third fed the same tokens with other engine
    // hashes (Int and Bytes).
    let mut a = PreciseIndex::new(limits(16, 40));
    let mut b = PreciseIndex::new(limits(16, 40));
    let mut c = PreciseIndex::new(limits(16, 40));
    for (i, s) in seqs.iter().enumerate() {
        let replica = (i % 3) as ReplicaId;
        // Each engine has its own hash seed.
        let events = stores(s, BS, 100 + u64::from(replica), 3);
        feed(&mut a, replica, &events);
        feed(&mut b, replica, &events);
        let other: Vec<KvEvent> = stores(s, BS, 999 + u64::from(replica), 3)
            .into_iter()
            .map(|e| match e {
                KvEvent::BlockStored {
                    block_hashes,
                    parent_block_hash,
                    token_ids,
                    block_size,
                    lora_id,
                    medium,
                    lora_name,
                    extra_keys,
                } => {
                    let bytes = |h: EngineHash| match h {
                        EngineHash::Int(v) => EngineHash::Bytes(v.to_be_bytes().repeat(4)),
                        other => other,
                    };
                    KvEvent::BlockStored {
                        block_hashes: block_hashes.into_iter().map(bytes).collect(),
                        parent_block_hash: parent_block_hash.map(bytes),
                        token_ids,
                        block_size,
                        lora_id,
                        medium,
                        lora_name,
                        extra_keys,
                    }
                }
                e => e,
            })
            .collect();
        feed(&mut c, replica, &other);
    }
    // The bounds bit (evictions) and all three still agree.
    assert!(a.stats().evictions > 0);
    assert_eq!(a.stats(), b.stats());
    assert_eq!(a.stats().evictions, c.stats().evictions);
    for s in &seqs {
        let keys = prompt_keys(s, BS, &[]);
        let ra = matches(&a, &keys, &[0, 1, 2, 3]);
        assert_eq!(ra, matches(&b, &keys, &[0, 1, 2, 3]));
        assert_eq!(ra, matches(&c, &keys, &[0, 1, 2, 3]));
        assert_eq!(ra, brute(&a, &keys, &[0, 1, 2, 3]));
    }
    a.check(&[0, 1, 2]);
    c.check(&[0, 1, 2]);
}

#[test]
fn per_replica_bound_evicts_oldest_and_keeps_heads() {
    let mut ix = PreciseIndex::new(limits(6, 100));
    let x = toks(16, 10);
    let y = toks(16, 11);
    feed(&mut ix, 0, &stores(&x, BS, 1, 4));
    feed(&mut ix, 0, &stores(&y, BS, 1, 4));
    // 4 + 4 > 6: x's tail (its last two blocks) went first.
    assert_eq!(matches(&ix, &prompt_keys(&x, BS, &[]), &[0]), vec![2]);
    assert_eq!(matches(&ix, &prompt_keys(&y, BS, &[]), &[0]), vec![4]);
    assert_eq!(ix.stats().evictions, 2);
    // A store longer than the bound keeps its head.
    let z = toks(40, 12);
    let a = ix.apply(1, &stores(&z, BS, 1, 10)[0]).unwrap();
    assert_eq!((a.stored, a.evicted), (6, 4));
    assert_eq!(matches(&ix, &prompt_keys(&z, BS, &[]), &[1]), vec![6]);
    // Its next store names a skipped block as parent: a gap.
    let more = toks(44, 12);
    assert_eq!(
        ix.apply(1, &stores(&more, BS, 1, 10)[1]),
        Err(ApplyError::UnknownParent)
    );
    ix.check(&[0, 1]);
}

#[test]
fn a_store_evicting_its_own_blocks_keeps_its_head() {
    let mut ix = PreciseIndex::new(limits(100, 10));
    let a = toks(32, 13);
    let b = toks(20, 14);
    feed(&mut ix, 7, &stores(&b, BS, 1, 5));
    // Replica 3's 8 blocks meet the total bound after 5: 3 and 7 then tie at 5 blocks, the
    // lower id loses its oldest block, which is the store's own tail.
    let applied = ix.apply(3, &stores(&a, BS, 1, 8)[0]).unwrap();
    assert_eq!((applied.stored, applied.evicted), (8, 3));
    assert_eq!(matches(&ix, &prompt_keys(&a, BS, &[]), &[3]), vec![5]);
    assert_eq!(matches(&ix, &prompt_keys(&b, BS, &[]), &[7]), vec![5]);
    ix.check(&[3, 7]);
}

#[test]
fn total_bound_evicts_from_the_largest_replica() {
    let mut ix = PreciseIndex::new(limits(100, 10));
    let a = toks(32, 20);
    let b = toks(8, 21);
    let c = toks(8, 22);
    feed(&mut ix, 5, &stores(&a, BS, 1, 8));
    feed(&mut ix, 6, &stores(&b, BS, 1, 2));
    feed(&mut ix, 7, &stores(&c, BS, 1, 2));
    // 8 + 2 + 2 > 10: replica 5 (the largest) lost its two oldest blocks, which (a store
    // inserts its tail first) are its chain's tail.
    assert_eq!(ix.stats().entries, 10);
    assert_eq!(ix.replica_blocks(5), 6);
    assert_eq!(matches(&ix, &prompt_keys(&a, BS, &[]), &[5]), vec![6]);
    assert_eq!(matches(&ix, &prompt_keys(&b, BS, &[]), &[6]), vec![2]);
    assert_eq!(matches(&ix, &prompt_keys(&c, BS, &[]), &[7]), vec![2]);
    ix.check(&[5, 6, 7]);
}

#[test]
fn zero_bounds_store_nothing() {
    for l in [limits(0, 10), limits(10, 0)] {
        let mut ix = PreciseIndex::new(l);
        let a = ix.apply(0, &stores(&toks(8, 1), BS, 1, 2)[0]).unwrap();
        assert_eq!((a.stored, a.evicted), (0, 2));
        assert_eq!(ix.stats().entries, 0);
        assert_eq!(ix.stats().evictions, 2);
        ix.check(&[0]);
    }
}

#[test]
fn shrinking_limits_evicts_and_compacts() {
    let mut ix = big();
    let t = toks(400, 30);
    feed(&mut ix, 0, &stores(&t, BS, 1, 7));
    feed(&mut ix, 1, &stores(&t[..200], BS, 2, 7));
    ix.set_limits(limits(30, 40));
    ix.check(&[0, 1]);
    assert_eq!(ix.stats().entries, 40);
    let keys = prompt_keys(&t, BS, &[]);
    assert_eq!(matches(&ix, &keys, &[0, 1]), brute(&ix, &keys, &[0, 1]));
    ix.set_limits(limits(0, 0));
    assert_eq!(ix.stats().entries, 0);
    ix.check(&[0, 1]);
}

#[test]
fn same_tokens_under_two_engine_hashes_on_one_replica() {
    // E.g. the same tokens under a LoRA adapter the caller did not fold into extras.
    let mut ix = big();
    let t = toks(8, 40);
    feed(&mut ix, 0, &stores(&t, BS, 1, 2));
    feed(&mut ix, 0, &stores(&t, BS, 2, 2));
    let keys = prompt_keys(&t, BS, &[]);
    assert_eq!(ix.replica_blocks(0), 4);
    ix.apply(
        0,
        &KvEvent::BlockRemoved {
            block_hashes: engine_hashes(&t, BS, 1),
            medium: None,
        },
    )
    .unwrap();
    assert_eq!(matches(&ix, &keys, &[0]), vec![2]);
    // Re-storing a known hash refreshes it; with other tokens it re-points.
    let again = ix.apply(0, &stores(&t, BS, 2, 2)[0]).unwrap();
    assert_eq!((again.stored, again.refreshed), (0, 2));
    let mut other = t.clone();
    other[0] += 1;
    let mut ev = stores(&other, BS, 2, 2);
    if let KvEvent::BlockStored { block_hashes, .. } = &mut ev[0] {
        *block_hashes = engine_hashes(&t, BS, 2);
    }
    ix.apply(0, &ev[0]).unwrap();
    assert_eq!(matches(&ix, &keys, &[0]), vec![0]);
    assert_eq!(matches(&ix, &prompt_keys(&other, BS, &[]), &[0]), vec![2]);
    ix.check(&[0]);
}

#[test]
fn wide_fleets_and_large_ids() {
    let mut ix = PreciseIndex::new(limits(1000, 1_000_000));
    let t = toks(4 * 50, 50);
    let keys = prompt_keys(&t, BS, &[]);
    let ids: Vec<ReplicaId> = (0..40).chain([255, 256, 300, u32::MAX]).collect();
    for (i, &r) in ids.iter().enumerate() {
        let blocks = (i * 7) % 50 + 1;
        feed(&mut ix, r, &stores(&t[..blocks * BS], BS, r as u64, 5));
    }
    let want: Vec<u32> = (0..ids.len()).map(|i| ((i * 7) % 50 + 1) as u32).collect();
    assert_eq!(matches(&ix, &keys, &ids), want);
    // A hole in the middle stops the match there (no bisection over-count).
    ix.apply(
        3,
        &KvEvent::BlockRemoved {
            block_hashes: vec![engine_hashes(&t, BS, 3)[1].clone()],
            medium: None,
        },
    )
    .unwrap();
    ix.apply(
        300,
        &KvEvent::BlockRemoved {
            block_hashes: vec![engine_hashes(&t, BS, 300)[0].clone()],
            medium: None,
        },
    )
    .unwrap();
    let got = matches(&ix, &keys, &ids);
    assert_eq!(got[3], 1);
    assert_eq!(got[ids.len() - 2], 0);
    assert_eq!(got, brute(&ix, &keys, &ids));
    // A short out slice is filled, not overrun.
    let mut out = [9u32; 2];
    ix.longest_prefix(&keys, &ids, &mut out);
    assert_eq!(out, [want[0], want[1]]);
    ix.check(&ids);
}

// ---- random event sequences ----

#[derive(Debug, Clone)]
enum Op {
    /// Replica stores blocks `from..from+len` of sequence `seq` (with parent `from - 1`).
    Store {
        replica: ReplicaId,
        seq: usize,
        from: usize,
        len: usize,
    },
    /// Replica removes block `at` of sequence `seq`.
    Remove {
        replica: ReplicaId,
        seq: usize,
        at: usize,
    },
    Clear(ReplicaId),
    RemoveReplica(ReplicaId),
    /// Arbitrary (lying or garbled) event.
    Garbage(ReplicaId, KvEvent),
    Limits(usize, usize),
}

const IDS: [ReplicaId; 4] = [0, 1, 2, 700];
const SEQ_BLOCKS: usize = 12;

fn replica() -> impl Strategy<Value = ReplicaId> {
    prop::sample::select(IDS.to_vec())
}

fn garbage() -> impl Strategy<Value = KvEvent> {
    let hash = prop_oneof![
        (0u64..8).prop_map(EngineHash::Int),
        prop::collection::vec(0u8..3, 0..3).prop_map(EngineHash::Bytes),
    ];
    prop_oneof![
        (
            prop::collection::vec(hash.clone(), 0..5),
            prop::option::of(hash.clone()),
            prop::collection::vec(0u32..3, 0..20),
            0u32..6,
            prop::option::of(prop_oneof![
                Just("GPU".to_string()),
                Just("CPU".to_string())
            ]),
        )
            .prop_map(
                |(block_hashes, parent_block_hash, token_ids, block_size, medium)| {
                    KvEvent::BlockStored {
                        block_hashes,
                        parent_block_hash,
                        token_ids,
                        block_size,
                        lora_id: None,
                        lora_name: None,
                        medium,
                        extra_keys: Vec::new(),
                    }
                }
            ),
        prop::collection::vec(hash, 0..5).prop_map(|block_hashes| KvEvent::BlockRemoved {
            block_hashes,
            medium: None
        }),
        Just(KvEvent::AllBlocksCleared),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (replica(), 0usize..4, prop_oneof![Just(0usize), 0usize..SEQ_BLOCKS], 1usize..8)
            .prop_map(|(replica, seq, from, len)| Op::Store { replica, seq, from, len }),
        3 => (replica(), 0usize..4, 0usize..SEQ_BLOCKS)
            .prop_map(|(replica, seq, at)| Op::Remove { replica, seq, at }),
        1 => replica().prop_map(Op::Clear),
        1 => replica().prop_map(Op::RemoveReplica),
        2 => (replica(), garbage()).prop_map(|(r, e)| Op::Garbage(r, e)),
        1 => (0usize..20, 0usize..40).prop_map(|(p, t)| Op::Limits(p, t)),
    ]
}

/// Four sequences sharing prefixes (a common first block, pairs sharing more).
fn sequences() -> Vec<Vec<u32>> {
    (0..4u32)
        .map(|s| {
            (0..(SEQ_BLOCKS * BS) as u32)
                .map(|i| match i / BS as u32 {
                    0 => i,
                    1..=3 => i + 1000 * (s / 2),
                    _ => i + 1000 * s,
                })
                .collect()
        })
        .collect()
}

/// The engine's store event for blocks `from..from+len` of `seq` (engine hashes seeded per
/// replica, as separate engines would).
fn store_event(
    seqs: &[Vec<u32>],
    replica: ReplicaId,
    seq: usize,
    from: usize,
    len: usize,
) -> KvEvent {
    let t = &seqs[seq];
    let hashes = engine_hashes(t, BS, u64::from(replica));
    let to = (from + len).min(SEQ_BLOCKS);
    KvEvent::BlockStored {
        block_hashes: hashes[from..to].to_vec(),
        parent_block_hash: from.checked_sub(1).map(|p| hashes[p].clone()),
        token_ids: t[from * BS..to * BS].to_vec(),
        block_size: BS as u32,
        lora_id: None,
        lora_name: None,
        medium: None,
        extra_keys: Vec::new(),
    }
}

fn probes(seqs: &[Vec<u32>]) -> Vec<Vec<u64>> {
    let mut p: Vec<Vec<u64>> = seqs.iter().map(|s| prompt_keys(s, BS, &[])).collect();
    p.push(prompt_keys(&seqs[0][..5 * BS], BS, &[]));
    p.push(vec![1, 2, 3]);
    p.push(Vec::new());
    p
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn bounds_hold_and_nothing_panics(
        per in 0usize..20,
        total in 0usize..40,
        ops in prop::collection::vec(op(), 1..80),
    ) {
        let seqs = sequences();
        let probes = probes(&seqs);
        let mut ix = PreciseIndex::new(limits(per, total));
        let mut lim = ix.limits();
        for op in ops {
            match op {
                Op::Store { replica, seq, from, len } => {
                    let _ = ix.apply(replica, &store_event(&seqs, replica, seq, from, len));
                }
                Op::Remove { replica, seq, at } => {
                    let h = engine_hashes(&seqs[seq], BS, u64::from(replica));
                    let _ = ix.apply(replica, &KvEvent::BlockRemoved {
                        block_hashes: vec![h[at].clone()],
                        medium: None,
                    });
                }
                Op::Clear(r) => {
                    ix.apply(r, &KvEvent::AllBlocksCleared).unwrap();
                    prop_assert_eq!(ix.replica_blocks(r), 0);
                }
                Op::RemoveReplica(r) => {
                    ix.remove_replica(r);
                    prop_assert_eq!(ix.replica_blocks(r), 0);
                    prop_assert_eq!(ix.block_size(r), None);
                }
                Op::Garbage(r, e) => {
                    let _ = ix.apply(r, &e);
                }
                Op::Limits(p, t) => {
                    lim = limits(p, t);
                    ix.set_limits(lim);
                }
            }
            ix.check(&IDS);
            let s = ix.stats();
            prop_assert!(s.entries <= lim.max_blocks_total);
            prop_assert!(s.bytes <= s.capacity_bytes, "{:?}", s);
            for &r in &IDS {
                prop_assert!(ix.replica_blocks(r) <= lim.max_blocks_per_replica);
            }
            // Actual allocations stay within a fixed multiple of the bound (plus small
            // per-replica and per-table minimums).
            let bound = 4 * lim.max_blocks_per_replica.min(lim.max_blocks_total) * IDS.len()
                * PRECISE_ENTRY_BYTES;
            prop_assert!(ix.allocated_bytes() <= bound + 4096, "{} > {}", ix.allocated_bytes(), bound);
            for keys in &probes {
                let got = matches(&ix, keys, &IDS);
                prop_assert!(got.iter().all(|&m| m as usize <= keys.len()));
                prop_assert_eq!(got, brute(&ix, keys, &IDS));
            }
        }
    }

    #[test]
    fn unbounded_index_agrees_with_a_model(
        ops in prop::collection::vec(op(), 1..80),
    ) {
        // Per replica, the model's engine map digest → router key; a replica holds a key iff
        // some digest maps to it. With bounds that never bite, the index must agree exactly.
        let seqs = sequences();
        let probes = probes(&seqs);
        let mut ix = big();
        let mut model: HashMap<ReplicaId, HashMap<u64, u64>> = HashMap::new();
        for op in ops {
            match op {
                Op::Store { replica, seq, from, len } => {
                    let ev = store_event(&seqs, replica, seq, from, len);
                    let got = ix.apply(replica, &ev);
                    let m = model.entry(replica).or_default();
                    let KvEvent::BlockStored { block_hashes, parent_block_hash, token_ids, .. } = &ev else {
                        unreachable!()
                    };
                    let parent = match parent_block_hash {
                        None => Some(None),
                        Some(p) => m.get(&engine_digest(p)).map(|&k| Some(k)),
                    };
                    match parent {
                        None => prop_assert_eq!(got, Err(ApplyError::UnknownParent)),
                        Some(mut parent) => {
                            prop_assert!(got.is_ok());
                            for (h, block) in block_hashes.iter().zip(token_ids.chunks_exact(BS)) {
                                let k = block_key(parent, block, &[]);
                                m.insert(engine_digest(h), k);
                                parent = Some(k);
                            }
                        }
                    }
                }
                Op::Remove { replica, seq, at } => {
                    let h = engine_hashes(&seqs[seq], BS, u64::from(replica))[at].clone();
                    ix.apply(replica, &KvEvent::BlockRemoved { block_hashes: vec![h.clone()], medium: None }).unwrap();
                    if let Some(m) = model.get_mut(&replica) {
                        m.remove(&engine_digest(&h));
                    }
                }
                Op::Clear(r) => {
                    ix.apply(r, &KvEvent::AllBlocksCleared).unwrap();
                    model.remove(&r);
                }
                Op::RemoveReplica(r) => {
                    ix.remove_replica(r);
                    model.remove(&r);
                }
                Op::Garbage(..) | Op::Limits(..) => {}
            }
            ix.check(&IDS);
            prop_assert_eq!(ix.stats().evictions, 0);
            for keys in &probes {
                let want: Vec<u32> = IDS.iter().map(|r| {
                    let held: HashSet<u64> = model.get(r).map(|m| m.values().copied().collect()).unwrap_or_default();
                    keys.iter().take_while(|k| held.contains(k)).count() as u32
                }).collect();
                prop_assert_eq!(matches(&ix, keys, &IDS), want);
            }
        }
    }
}

/// A `BlockStored` with no blocks that names the LoRA adapter `name`.
fn named(name: impl Into<String>) -> KvEvent {
    KvEvent::BlockStored {
        block_hashes: Vec::new(),
        parent_block_hash: None,
        token_ids: Vec::new(),
        block_size: BS as u32,
        lora_id: Some(1),
        medium: None,
        lora_name: Some(name.into()),
        extra_keys: Vec::new(),
    }
}

#[test]
fn adapter_names_from_events_are_remembered_up_to_the_bound() {
    let mut ix = big();
    assert!(!ix.is_adapter_on("a0", [0]));
    for i in 0..MAX_ADAPTERS + 10 {
        ix.apply(0, &named(format!("a{i}"))).unwrap();
    }
    assert!(ix.is_adapter_on("a0", [0]));
    assert!(ix.is_adapter_on(&format!("a{}", MAX_ADAPTERS - 1), [0]));
    assert!(
        !ix.is_adapter_on(&format!("a{MAX_ADAPTERS}"), [0]),
        "past the bound"
    );
    ix.apply(0, &named("x".repeat(300))).unwrap();
    assert!(!ix.is_adapter_on(&"x".repeat(300), [0]), "too long a name");
    // A name already known: another replica may name it too, past the bound of names.
    ix.apply(1, &named("a0")).unwrap();
    assert!(ix.is_adapter_on("a0", [1]));
}

#[test]
fn an_adapter_name_counts_only_for_the_replicas_that_reported_it() {
    let mut ix = big();
    // Replica 3 (another pool's engine) calls the base model `llama` its adapter.
    ix.apply(3, &named("llama")).unwrap();
    assert!(ix.is_adapter_on("llama", [3]));
    assert!(
        !ix.is_adapter_on("llama", [0, 1, 2]),
        "a pool that never reported it keeps matching its base model's blocks"
    );
    assert!(ix.is_adapter_on("llama", [0, 3]));
    // The replica leaves: its word goes with it.
    ix.remove_replica(3);
    assert!(!ix.is_adapter_on("llama", [3]));
}
