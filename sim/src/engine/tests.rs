//! The scheduler and timing model against hand-computed step times, cache hits and events.

use super::*;
use crate::config::Timing;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

fn cfg(blocks: usize, timing: Timing) -> EngineConfig {
    EngineConfig {
        kv_blocks: blocks,
        block_size: 4,
        max_model_len: 1024,
        max_num_seqs: 2,
        max_num_batched_tokens: 64,
        timing,
    }
}

fn timing() -> Timing {
    Timing {
        prefill_per_token: 1e-3,
        decode_base: 10e-3,
        decode_per_seq: 1e-3,
        step_overhead: 0.0,
        transfer_per_block: 0.5e-3,
    }
}

fn engine(blocks: usize) -> Engine {
    Engine::new(cfg(blocks, timing()), Arc::new(Tokenizer::bytes()), true)
}

fn req(tokens: Vec<u32>, max_tokens: usize) -> (Request, UnboundedReceiver<Output>) {
    let (tx, rx) = unbounded_channel();
    (
        Request {
            tokens,
            max_tokens,
            seed: 1,
            prefill_only: false,
            remote_blocks: 0,
            out: tx,
        },
        rx,
    )
}

/// Steps until idle, delivering outputs; returns the clock at the end.
fn run(e: &mut Engine, mut now: f64) -> f64 {
    for _ in 0..10_000 {
        let s = e.step(now);
        if !s.busy {
            match s.wake_at {
                Some(t) => {
                    now = t;
                    continue;
                }
                None => return now,
            }
        }
        now = s.end;
        for (tx, o) in s.deliveries {
            let _ = tx.send(o);
        }
    }
    panic!("engine did not go idle");
}

fn summary(rx: &mut UnboundedReceiver<Output>) -> Summary {
    while let Ok(o) = rx.try_recv() {
        if let Output::Done(s) = o {
            return s;
        }
    }
    panic!("no summary");
}

#[test]
fn a_cache_hit_is_faster_than_a_miss() {
    let mut e = engine(64);
    let prompt: Vec<u32> = (0..40).collect();
    let (r, mut rx) = req(prompt.clone(), 1);
    e.submit(r, None, 0.0);
    run(&mut e, 0.0);
    let miss = summary(&mut rx);
    assert_eq!(miss.cached_tokens, 0);
    let (r, mut rx) = req(prompt, 1);
    e.submit(r, None, 1.0);
    run(&mut e, 1.0);
    let hit = summary(&mut rx);
    // All but the last block (the last token is always computed).
    assert_eq!(hit.cached_tokens, 36);
    assert!((miss.ttft - 0.040).abs() < 1e-9, "{}", miss.ttft);
    assert!((hit.ttft - 0.004).abs() < 1e-9, "{}", hit.ttft);
    assert_eq!(e.stats.prefix_cache_queries, 80);
    assert_eq!(e.stats.prefix_cache_hits, 36);
}

#[test]
fn load_adds_queueing_and_decode_slows_with_running_sequences() {
    // max_num_seqs = 2: the third request waits for a slot.
    let mut e = engine(256);
    let mut rxs = Vec::new();
    for k in 0..3u32 {
        let (r, rx) = req((k * 100..k * 100 + 8).collect(), 5);
        e.submit(r, None, 0.0);
        rxs.push(rx);
    }
    let first = e.step(0.0);
    assert_eq!((e.num_running(), e.num_waiting()), (2, 1));
    // Two 8-token prefills.
    assert!((first.end - 0.016).abs() < 1e-9);
    run(&mut e, first.end);
    let s: Vec<Summary> = rxs.iter_mut().map(summary).collect();
    assert!(s[2].ttft > s[0].ttft + 0.03, "{s:?}");
    // A decode step with two running costs more than with one.
    let mut e = engine(256);
    let (r, _rx1) = req((0..8).collect(), 3);
    e.submit(r, None, 0.0);
    let t = e.step(0.0).end;
    let one = e.step(t);
    assert!((one.end - t - 0.011).abs() < 1e-9);
    let (r, _rx2) = req((50..58).collect(), 3);
    e.submit(r, None, one.end);
    let both = e.step(one.end);
    // Prefill of 8 plus decode with 2 running.
    assert!((both.end - one.end - (0.008 + 0.012)).abs() < 1e-9);
}

#[test]
fn chunked_prefill_respects_the_step_budget() {
    let mut e = engine(256);
    let (r, mut rx) = req((0..150).collect(), 1);
    e.submit(r, None, 0.0);
    let s1 = e.step(0.0);
    assert!(s1.deliveries.is_empty());
    assert!((s1.end - 0.064).abs() < 1e-9);
    run(&mut e, s1.end);
    assert!((summary(&mut rx).ttft - 0.150).abs() < 1e-9);
}

#[test]
fn the_step_overhead_is_paid_by_every_step_with_work_prefill_only_too() {
    let mut e = Engine::new(
        cfg(
            256,
            Timing {
                step_overhead: 2e-3,
                ..timing()
            },
        ),
        Arc::new(Tokenizer::bytes()),
        true,
    );
    let (r, mut rx) = req((0..150).collect(), 1);
    e.submit(r, None, 0.0);
    // A prefill-only step: 64 tokens at 1 ms plus the fixed 2 ms.
    let s1 = e.step(0.0);
    assert!((s1.end - 0.066).abs() < 1e-9);
    run(&mut e, s1.end);
    // Three prefill steps (64 + 64 + 22 tokens), each with its overhead.
    assert!((summary(&mut rx).ttft - (0.150 + 3.0 * 0.002)).abs() < 1e-9);
    // An idle engine pays nothing.
    assert!(!e.step(1.0).busy);
}

#[test]
fn events_publish_stored_and_removed_blocks() {
    let mut e = engine(4);
    let (r, mut rx) = req((0..9).collect(), 1);
    e.submit(r, None, 0.0);
    run(&mut e, 0.0);
    summary(&mut rx);
    let ev = e.take_events();
    let KvEvent::BlockStored {
        block_hashes,
        parent_block_hash,
        token_ids,
        ..
    } = &ev[0]
    else {
        panic!("{ev:?}")
    };
    // 9 prompt tokens + 1 sampled: two full blocks.
    assert_eq!(block_hashes.len(), 2);
    assert_eq!(*parent_block_hash, None);
    assert_eq!(token_ids, &(0..8).collect::<Vec<_>>());
    // A different 16-token prompt needs all 4 blocks: both cached ones are evicted.
    let (r, mut rx) = req((100..116).collect(), 1);
    e.submit(r, None, 1.0);
    run(&mut e, 1.0);
    summary(&mut rx);
    let removed = e
        .take_events()
        .iter()
        .filter(|e| matches!(e, KvEvent::BlockRemoved { .. }))
        .count();
    assert_eq!(removed, 2);
}

#[test]
fn a_request_that_does_not_fit_waits_for_blocks() {
    let mut e = engine(4);
    let (a, mut ra) = req((0..12).collect(), 3);
    let (b, mut rb) = req((50..62).collect(), 1);
    e.submit(a, None, 0.0);
    e.submit(b, None, 0.0);
    e.step(0.0);
    assert_eq!((e.num_running(), e.num_waiting()), (1, 1));
    run(&mut e, 0.0);
    assert_eq!(summary(&mut ra).completion_tokens, 3);
    assert_eq!(summary(&mut rb).completion_tokens, 1);
    assert_eq!(e.cache().used_blocks(), 0);
}

#[test]
fn abandoned_requests_free_their_blocks() {
    let mut e = engine(16);
    let (r, rx) = req((0..8).collect(), 100);
    e.submit(r, None, 0.0);
    e.step(0.0);
    assert!(e.cache().used_blocks() > 0);
    drop(rx);
    e.step(1.0);
    assert_eq!(e.cache().used_blocks(), 0);
    assert_eq!(e.stats.success_abort, 1);
}

#[test]
fn pulled_blocks_skip_prefill_but_cost_transfer_time() {
    let mut e = engine(64);
    let (mut r, mut rx) = req((0..40).collect(), 1);
    r.remote_blocks = 9;
    e.submit(r, None, 0.0);
    run(&mut e, 0.0);
    let s = summary(&mut rx);
    assert_eq!(s.cached_tokens, 36);
    // 9 blocks × 0.5 ms, then 4 tokens of prefill.
    assert!((s.ttft - (0.0045 + 0.004)).abs() < 1e-9, "{}", s.ttft);
}

#[test]
fn prefill_only_reports_its_blocks() {
    let mut e = engine(64);
    let (mut r, mut rx) = req((0..10).collect(), 50);
    r.prefill_only = true;
    e.submit(r, None, 0.0);
    run(&mut e, 0.0);
    let s = summary(&mut rx);
    assert_eq!(s.completion_tokens, 1);
    let (slots, hashes) = s.prefill_blocks.unwrap();
    assert_eq!(hashes.len(), 2);
    assert!(e.slots_hold(&slots, &hashes));
}

#[test]
fn decode_short_of_blocks_preempts_the_newest_and_both_finish() {
    // 6 blocks of 4 tokens; two 8-token prompts take 2 blocks each (plus one each for the
    // first sampled token's block later), and 12 tokens of decode each need 3 more.
    let mut e = engine(6);
    let (a, mut ra) = req((0..8).collect(), 12);
    let (b, mut rb) = req((100..108).collect(), 12);
    e.submit(a, None, 0.0);
    e.submit(b, None, 0.0);
    run(&mut e, 0.0);
    assert!(e.stats.preemptions > 0);
    assert_eq!(summary(&mut ra).completion_tokens, 12);
    assert_eq!(summary(&mut rb).completion_tokens, 12);
    assert_eq!(e.cache().used_blocks(), 0);
    assert_eq!(e.num_running() + e.num_waiting(), 0);
}
