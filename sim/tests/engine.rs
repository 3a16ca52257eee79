//! Metrics, load and timing over loopback: counters move as requests complete, running and
//! waiting reflect the scheduler, and cache hits are faster than misses end to end.

mod common;

use std::time::Duration;

use common::*;
use serde_json::json;

#[tokio::test]
async fn metrics_move_as_requests_complete() {
    let s = sim(&["--timing", "zero", "--kv-blocks", "100"]).await;
    let a = s.addrs()[0];
    let m0 = metrics(a).await;
    for name in [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:time_to_first_token_seconds_count",
    ] {
        assert_eq!(metric(&m0, name), 0.0, "{name}");
    }
    assert!(m0.contains("vllm:cache_config_info{block_size=\"16\""));
    assert!(m0.contains("num_gpu_blocks=\"100\""));
    let body = json!({"prompt": "a".repeat(64 * 4), "max_tokens": 3}).to_string();
    post(a, "/v1/completions", &body).await;
    post(a, "/v1/completions", &body).await;
    let m = metrics(a).await;
    assert_eq!(metric(&m, "vllm:prefix_cache_queries_total"), 128.0);
    // 64 tokens = 4 blocks; the last is always recomputed: 3 blocks hit.
    assert_eq!(metric(&m, "vllm:prefix_cache_hits_total"), 48.0);
    assert_eq!(metric(&m, "vllm:prompt_tokens_total"), 128.0);
    assert_eq!(metric(&m, "vllm:generation_tokens_total"), 6.0);
    assert_eq!(metric(&m, "vllm:time_to_first_token_seconds_count"), 2.0);
    assert!(m.contains(
        "vllm:request_success_total{engine=\"0\",finished_reason=\"length\",model_name=\"tiny\"} 2.0"
    ));
    assert_eq!(metric(&m, "vllm:kv_cache_usage_perc"), 0.0);
}

#[tokio::test]
async fn load_shows_as_running_and_waiting_and_slows_requests() {
    // One sequence at a time, 20 ms per decode step: three 5-token requests queue up.
    let s = sim(&[
        "--max-num-seqs",
        "1",
        "--decode-base-ms",
        "20",
        "--prefill-us-per-token",
        "0",
    ])
    .await;
    let a = s.addrs()[0];
    let mut tasks = Vec::new();
    for i in 0..3 {
        tasks.push(tokio::spawn(async move {
            let t = std::time::Instant::now();
            let body = json!({"prompt": format!("request {i}"), "max_tokens": 5}).to_string();
            post(a, "/v1/completions", &body).await;
            t.elapsed()
        }));
    }
    let mut saw = (0.0, 0.0, 0.0);
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let m = metrics(a).await;
        let (r, w, u) = (
            metric(&m, "vllm:num_requests_running"),
            metric(&m, "vllm:num_requests_waiting"),
            metric(&m, "vllm:kv_cache_usage_perc"),
        );
        if r == 1.0 && w == 2.0 {
            saw = (r, w, u);
            break;
        }
    }
    assert_eq!(
        (saw.0, saw.1),
        (1.0, 2.0),
        "never saw 1 running and 2 waiting"
    );
    assert!(saw.2 > 0.0);
    let mut times = Vec::new();
    for t in tasks {
        times.push(t.await.unwrap());
    }
    times.sort();
    // The last one waited for the other two: at least 3 × 4 decode steps of 20 ms.
    assert!(times[2] >= Duration::from_millis(240), "{times:?}");
    let m = metrics(a).await;
    assert_eq!(metric(&m, "vllm:num_requests_running"), 0.0);
    assert_eq!(metric(&m, "vllm:num_requests_waiting"), 0.0);
}

#[tokio::test]
async fn a_cache_hit_has_a_shorter_ttft_than_a_miss() {
    // 1 ms per prefill token: a 400-token miss takes 400 ms of prefill, a hit 16 ms or less.
    let s = sim(&["--prefill-us-per-token", "1000", "--decode-base-ms", "1"]).await;
    let a = s.addrs()[0];
    let body = json!({"prompt": "b".repeat(1600), "max_tokens": 1}).to_string();
    let t = std::time::Instant::now();
    post(a, "/v1/completions", &body).await;
    let miss = t.elapsed();
    let t = std::time::Instant::now();
    let hit = post(a, "/v1/completions", &body).await.json();
    let hit_time = t.elapsed();
    assert_eq!(hit["usage"]["prompt_tokens_details"]["cached_tokens"], 384);
    assert!(miss >= Duration::from_millis(400), "{miss:?}");
    assert!(hit_time < miss, "{hit_time:?} vs {miss:?}");
    let m = metrics(a).await;
    // The miss lands in the 0.5 s bucket, the hit in the 0.02 s bucket.
    assert!(m.contains("vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"0.02\",model_name=\"tiny\"} 1.0"), "{m}");
}

#[tokio::test]
async fn replica_speeds_make_a_mixed_fleet() {
    let s = sim(&[
        "--replicas",
        "2",
        "--replica-speeds",
        "1,4",
        "--prefill-us-per-token",
        "1000",
        "--decode-base-ms",
        "1",
    ])
    .await;
    let [slow, fast] = [s.addrs()[0], s.addrs()[1]];
    let body = json!({"prompt": "c".repeat(800), "max_tokens": 1}).to_string();
    post(slow, "/v1/completions", &body).await;
    post(fast, "/v1/completions", &body).await;
    let ttft = |m: &str| metric(m, "vllm:time_to_first_token_seconds_sum");
    let (ms, mf) = (metrics(slow).await, metrics(fast).await);
    // 200 tokens: 200 ms at speed 1, 50 ms at speed 4.
    assert!((ttft(&ms) - 0.200).abs() < 0.01, "{}", ttft(&ms));
    assert!((ttft(&mf) - 0.050).abs() < 0.01, "{}", ttft(&mf));
}
