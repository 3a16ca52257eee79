//! What tokenizing a long prompt costs the router (issue 14's budget: a 32k-token prompt
//! tokenized and matched in 2 ms with a cached system prompt).
//! `cargo bench -p warmpath-tokenize --bench encode`.
//!
//! `encode/chat_*_tokens` tokenizes a chat in full; `encode/cached_chat_*_tokens` tokenizes a
//! ~32k-token chat through a [`PrefixCache`] that has seen its system prompt, with a user
//! message it has not seen (a new one every iteration). Before them, the cached case's
//! latency percentiles over a few hundred requests are printed.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use std::path::Path;
use std::time::Instant;
use warmpath_tokenize::{ChatMessage, PrefixCache, Tokenizer};

fn words(n: usize, seed: u64) -> String {
    let vocab = [
        "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog.", "Answer", "question",
    ];
    let mut s = String::new();
    let mut x: u64 = seed;
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push_str(vocab[(x % vocab.len() as u64) as usize]);
        s.push(' ');
    }
    s
}

fn chat(t: &Tokenizer, system: &str, user: String) -> String {
    t.render_chat(&[
        ChatMessage {
            role: "system".into(),
            content: system.to_owned(),
        },
        ChatMessage {
            role: "user".into(),
            content: user,
        },
    ])
    .unwrap()
}

fn bench(c: &mut Criterion) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny");
    let t = Tokenizer::load(
        Some(&dir.join("tokenizer.json")),
        Some(&dir.join("tokenizer_config.json")),
    )
    .unwrap();
    let text = chat(&t, &words(20_000, 7), words(200, 7));
    let n = t.encode(&text, false).unwrap().len();

    // About 32k tokens: 29k words of system prompt and a 200-word user message. Eight system
    // prompts of different lengths, so that where the user message starts varies relative to
    // the cache's chunk boundaries.
    let systems: Vec<String> = (0..8).map(|i| words(29_000 + 37 * i, 7)).collect();
    let big = chat(&t, &systems[0], words(200, 1));
    let big_n = t.encode(&big, false).unwrap().len();
    let mut seed = 1000u64;
    let mut fresh = || {
        seed += 1;
        chat(
            &t,
            &systems[seed as usize % systems.len()],
            words(200, seed),
        )
    };
    let warm = |cache: &PrefixCache| {
        for system in &systems {
            let x = chat(&t, system, words(200, 1));
            assert_eq!(
                cache.encode(&t, &x, false).unwrap(),
                t.encode(&x, false).unwrap()
            );
        }
    };
    // Latency percentiles of the cached case by chunk size (wall time: on a loaded machine its
    // tail is the scheduler's), answers checked against a full encode now and then.
    for chunk in [1024, 2048, 4096] {
        let cache = PrefixCache::with_chunk_bytes(4 << 20, chunk);
        warm(&cache);
        let mut times = Vec::new();
        for i in 0..400 {
            let x = fresh();
            let start = Instant::now();
            let ids = cache.encode(&t, &x, false).unwrap();
            times.push(start.elapsed());
            if i % 10 == 0 {
                assert_eq!(ids, t.encode(&x, false).unwrap());
            }
        }
        times.sort();
        let q = |p: f64| times[((times.len() - 1) as f64 * p) as usize];
        let s = cache.stats();
        eprintln!(
            "cached {big_n}-token chat, new user message, {chunk}-byte chunks: p50 {:?} p90 {:?} \
             p99 {:?} max {:?}; hits {} misses {} held {} boundaries {}",
            q(0.5),
            q(0.9),
            q(0.99),
            times[times.len() - 1],
            s.hits,
            s.misses,
            s.held,
            s.boundaries,
        );
    }
    let cache = PrefixCache::new(4 << 20);
    warm(&cache);

    let mut g = c.benchmark_group("encode");
    g.sample_size(20);
    g.bench_function(format!("chat_{n}_tokens"), |b| {
        b.iter(|| t.encode(std::hint::black_box(&text), false).unwrap())
    });
    g.bench_function(format!("chat_{big_n}_tokens"), |b| {
        b.iter(|| t.encode(std::hint::black_box(&big), false).unwrap())
    });
    g.sample_size(100);
    g.bench_function(format!("cached_chat_{big_n}_tokens"), |b| {
        b.iter_batched(
            &mut fresh,
            |x| cache.encode(&t, &x, false).unwrap(),
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
