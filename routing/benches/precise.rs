//! Criterion benches of the precise (KV-event) index on the request path: hashing a 32k-token
//! prompt into router keys at 64-token blocks (512 keys), and `longest_prefix` over those keys
//! for 8 candidate replicas holding it to assorted depths; plus ingesting one 512-block store.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use std::time::Duration;
use warmpath_kv_events::{BlockHash as EngineHash, KvEvent};
use warmpath_routing::index::{prompt_keys, PreciseIndex, PreciseLimits};
use warmpath_routing::ReplicaId;

const TOKENS: usize = 32 * 1024;
const BLOCK: usize = 64;

fn tokens(seed: u32, n: usize) -> Vec<u32> {
    let mut x = seed.wrapping_mul(0x9e37_79b9) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x % 150_000
        })
        .collect()
}

fn store(tokens: &[u32], engine_seed: u64) -> KvEvent {
    let blocks = tokens.len() / BLOCK;
    KvEvent::BlockStored {
        block_hashes: (0..blocks as u64)
            .map(|i| EngineHash::Int((engine_seed << 32) | i))
            .collect(),
        parent_block_hash: None,
        token_ids: tokens[..blocks * BLOCK].to_vec(),
        block_size: BLOCK as u32,
        lora_id: None,
        lora_name: None,
        medium: None,
        extra_keys: Vec::new(),
    }
}

fn precise(c: &mut Criterion) {
    let prompt = tokens(1, TOKENS);
    let mut ix = PreciseIndex::new(PreciseLimits {
        max_blocks_per_replica: 1 << 16,
        max_blocks_total: 1 << 20,
    });
    let ids: Vec<ReplicaId> = (0..8).collect();
    for &r in &ids {
        // Replica r holds the prompt up to (r + 1) / 8 of it, plus unrelated history.
        let depth = (r as usize + 1) * TOKENS / 8;
        ix.apply(r, &store(&prompt[..depth], u64::from(r))).unwrap();
        for h in 0..8u32 {
            let other = tokens(100 + r * 8 + h, 4096);
            ix.apply(r, &store(&other, (u64::from(r) << 8) + u64::from(h) + 1000))
                .unwrap();
        }
    }
    let keys = prompt_keys(&prompt, BLOCK, &[]);
    assert_eq!(keys.len(), 512);

    let mut g = c.benchmark_group("precise");
    g.throughput(Throughput::Elements(TOKENS as u64));
    g.bench_function("prompt_keys_32k_tokens_64_block", |b| {
        b.iter(|| prompt_keys(black_box(&prompt), BLOCK, &[]))
    });
    g.throughput(Throughput::Elements(keys.len() as u64));
    let mut out = vec![0u32; ids.len()];
    g.bench_function("longest_prefix_512_keys_8_replicas", |b| {
        b.iter(|| ix.longest_prefix(black_box(&keys), black_box(&ids), &mut out))
    });
    let event = store(&prompt, 77);
    g.bench_function("apply_store_512_blocks_and_clear", |b| {
        b.iter(|| {
            ix.apply(100, black_box(&event)).unwrap();
            ix.clear_replica(100)
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = precise
}
criterion_main!(benches);
