//! P/D disaggregation as SGLang's router drives it: one body, with `bootstrap_host`,
//! `bootstrap_port` and `bootstrap_room`, sent to a prefill and a decode replica at once. The
//! prefill answers after one token; the decode waits for it, takes its blocks and decodes.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

/// 98 tokens (4 bytes a token): 6 full blocks of 16 and a partial one.
fn long_prompt(c: &str) -> String {
    c.repeat(4 * 16 * 6 + 8)
}

fn body(prompt: &str, max_tokens: usize, port: u16, room: u64) -> String {
    json!({
        "prompt": prompt, "max_tokens": max_tokens,
        "bootstrap_host": "127.0.0.1", "bootstrap_port": port, "bootstrap_room": room,
    })
    .to_string()
}

fn spawn_post(
    addr: SocketAddr,
    path: &'static str,
    body: String,
) -> tokio::task::JoinHandle<Reply> {
    tokio::spawn(async move { post(addr, path, &body).await })
}

#[tokio::test]
async fn the_decode_takes_the_prompt_from_the_prefill_instead_of_computing_it() {
    // Prefill costs 5 ms a token, so that a decode computing the prompt would show in its TTFT.
    let s = sim(&[
        "--replicas",
        "2",
        "--prefill-us-per-token",
        "5000",
        "--decode-base-ms",
        "0",
        "--decode-per-seq-ms",
        "0",
        "--kv-transfer-ms-per-block",
        "0",
    ])
    .await;
    let [p, d] = [s.addrs()[0], s.addrs()[1]];
    // Replica 0's bootstrap port is the default base.
    let b = body(&long_prompt("p"), 4, 8998, 42);
    let (pre, dec) = tokio::join!(
        spawn_post(p, "/v1/completions", b.clone()),
        spawn_post(d, "/v1/completions", b.clone()),
    );
    let (pre, dec) = (pre.unwrap(), dec.unwrap());
    assert_eq!(pre.status, 200, "{}", pre.body);
    assert_eq!(dec.status, 200, "{}", dec.body);
    let (pre, dec) = (pre.json(), dec.json());
    assert_eq!(pre["usage"]["completion_tokens"], 1);
    assert!(pre["kv_transfer_params"].is_null());
    assert_eq!(dec["usage"]["completion_tokens"], 4);
    assert_eq!(dec["usage"]["prompt_tokens"], 98);
    // The 6 full blocks came from the prefill replica; only the partial one was computed.
    assert_eq!(dec["usage"]["prompt_tokens_details"]["cached_tokens"], 96);

    let (pm, dm) = (metrics(p).await, metrics(d).await);
    // 98 tokens at 5 ms on the prefill side; 2 on the decode side.
    let ttft = "vllm:time_to_first_token_seconds_sum";
    assert!(metric(&pm, ttft) >= 0.45, "{}", metric(&pm, ttft));
    assert!(metric(&dm, ttft) < 0.25, "{}", metric(&dm, ttft));
    // Each engine counts its own lookup once; the decode had nothing cached locally.
    for m in [&pm, &dm] {
        assert_eq!(metric(m, "vllm:prefix_cache_queries_total"), 98.0);
        assert_eq!(metric(m, "vllm:prefix_cache_hits_total"), 0.0);
    }
    assert_eq!(metric(&pm, "vllm:generation_tokens_total"), 1.0);
    assert_eq!(metric(&dm, "vllm:generation_tokens_total"), 4.0);
    assert!(s.fleet.replicas.iter().all(|r| r.rooms.is_empty()));

    // The prefill replica's blocks stay findable.
    let again = post(
        p,
        "/v1/completions",
        &json!({"prompt": long_prompt("p"), "max_tokens": 1}).to_string(),
    )
    .await
    .json();
    assert_eq!(again["usage"]["prompt_tokens_details"]["cached_tokens"], 96);
}

/// Token chunks of an SGLang-paired stream, and its usage chunk.
fn stream_parts(body: &str) -> (usize, Value) {
    let data = sse_data(body);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{body}");
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let tokens = chunks
        .iter()
        .filter(|c| c["choices"][0]["delta"].get("content").is_some())
        .filter(|c| c["choices"][0]["delta"].get("role").is_none())
        .count();
    let usage = chunks.last().unwrap()["usage"].clone();
    (tokens, usage)
}

#[tokio::test]
async fn a_decode_arriving_first_waits_for_its_prefill_and_streams() {
    let s = sim(&["--timing", "zero", "--replicas", "3"]).await;
    let (p, d) = (s.addrs()[2], s.addrs()[0]);
    let b = json!({
        "messages": [{"role": "user", "content": long_prompt("m")}],
        "max_tokens": 5, "stream": true, "stream_options": {"include_usage": true},
        "bootstrap_host": "localhost", "bootstrap_port": 9000, "bootstrap_room": 7,
    })
    .to_string();
    let dec = spawn_post(d, "/v1/chat/completions", b.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!dec.is_finished(), "the decode must wait for its prefill");
    assert_eq!(s.fleet.replicas[2].rooms.len(), 1);

    let pre = post(p, "/v1/chat/completions", &b).await;
    assert_eq!(pre.status, 200, "{}", pre.body);
    let (tokens, usage) = stream_parts(&pre.body);
    assert_eq!((tokens, usage["completion_tokens"].as_u64()), (1, Some(1)));

    let dec = dec.await.unwrap();
    assert_eq!(dec.status, 200, "{}", dec.body);
    let (tokens, usage) = stream_parts(&dec.body);
    assert_eq!((tokens, usage["completion_tokens"].as_u64()), (5, Some(5)));
    let cached = usage["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert!(cached >= 96, "{usage}");
    assert_eq!(
        metric(&metrics(d).await, "vllm:prefix_cache_hits_total"),
        0.0
    );
}

#[tokio::test]
async fn a_decode_whose_prefill_never_comes_fails_at_the_timeout() {
    let s = sim(&[
        "--timing",
        "zero",
        "--replicas",
        "2",
        "--bootstrap-timeout-ms",
        "300",
    ])
    .await;
    let d = s.addrs()[1];
    let start = Instant::now();
    let r = post(d, "/v1/completions", &body("hello world", 4, 8998, 1)).await;
    let took = start.elapsed();
    assert_eq!(r.status, 500, "{}", r.body);
    let e = r.json();
    assert_eq!(e["error"]["type"], "InternalServerError");
    let msg = e["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("bootstrap room 1")
            && msg.contains("did not finish its prefill within 300 ms"),
        "{msg}"
    );
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    // Nothing left behind by the decode that gave up.
    assert!(s.fleet.replicas[0].rooms.is_empty());

    // A late prefill of that room is served (one token) and its room expires unclaimed.
    let pre = post(
        s.addrs()[0],
        "/v1/completions",
        &body("hello world", 4, 8998, 1),
    )
    .await;
    assert_eq!(pre.status, 200, "{}", pre.body);
    assert_eq!(s.fleet.replicas[0].rooms.len(), 1);
    tokio::time::sleep(Duration::from_millis(1400)).await;
    // Any room operation sweeps the expired ones.
    let other = post(d, "/v1/completions", &body("hello world", 1, 8998, 2)).await;
    assert_eq!(other.status, 500);
    assert!(s.fleet.replicas[0].rooms.is_empty());
}

#[tokio::test]
async fn unknown_bootstrap_endpoints_and_bad_fields_fail_clearly() {
    let s = sim(&[
        "--timing",
        "zero",
        "--replicas",
        "2",
        "--bootstrap-timeout-ms",
        "2000",
    ])
    .await;
    let d = s.addrs()[1];
    // Nothing listens there.
    let r = post(d, "/v1/completions", &body("hello world", 4, 1, 3)).await;
    assert_eq!(r.status, 500, "{}", r.body);
    let msg = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(
        msg.contains("no prefill server reachable at bootstrap address 127.0.0.1:1"),
        "{msg}"
    );
    assert!(msg.contains("--bootstrap-port 0"), "{msg}");

    // A replica's HTTP port is not its bootstrap port unless --bootstrap-port 0.
    let p = s.addrs()[0];
    let r = post(d, "/v1/completions", &body("hello world", 4, p.port(), 3)).await;
    assert_eq!(r.status, 500, "{}", r.body);
    let msg = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(msg.contains("has bootstrap port 8998"), "{msg}");

    let r = post(
        d,
        "/v1/completions",
        &json!({"prompt": "x", "bootstrap_host": "127.0.0.1", "bootstrap_port": 8998}).to_string(),
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["param"], "bootstrap_room");
    let r = post(
        d,
        "/v1/completions",
        &json!({"prompt": "x", "bootstrap_host": "127.0.0.1", "bootstrap_room": -1}).to_string(),
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["param"], "bootstrap_room");
}

#[tokio::test]
async fn the_prefill_generates_one_token_whatever_max_tokens_says() {
    let s = sim(&["--timing", "zero"]).await;
    let p = s.addrs()[0];
    let r = post(p, "/v1/completions", &body("some prompt text", 50, 8998, 5)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["usage"]["completion_tokens"], 1);
    assert_eq!(v["choices"][0]["finish_reason"], "length");

    let mut b: Value = serde_json::from_str(&body("some prompt text", 50, 8998, 6)).unwrap();
    b["stream"] = json!(true);
    let r = post(p, "/v1/completions", &b.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let data = sse_data(&r.body);
    assert_eq!(data.len(), 2, "one token chunk, then [DONE]: {data:?}");
    let chunk: Value = serde_json::from_str(&data[0]).unwrap();
    assert_eq!(chunk["choices"][0]["finish_reason"], "length");
    assert_eq!(
        metric(&metrics(p).await, "vllm:generation_tokens_total"),
        2.0
    );
    // The same body without bootstrap fields is served as before.
    let plain = post(
        p,
        "/v1/completions",
        &json!({"prompt": "some prompt text", "max_tokens": 50}).to_string(),
    )
    .await
    .json();
    assert_eq!(plain["usage"]["completion_tokens"], 50);
}

/// The prefill replica in another process, reachable because its bootstrap port is its HTTP
/// port.
#[tokio::test]
async fn pairs_across_processes() {
    let ps = sim(&["--timing", "zero", "--bootstrap-port", "0"]).await;
    let ds = sim(&["--timing", "zero"]).await;
    let (p, d) = (ps.addrs()[0], ds.addrs()[0]);
    let b = body(&long_prompt("x"), 3, p.port(), 11);
    let dec = spawn_post(d, "/v1/completions", b.clone());
    tokio::time::sleep(Duration::from_millis(100)).await;
    let pre = post(p, "/v1/completions", &b).await;
    assert_eq!(pre.status, 200, "{}", pre.body);
    let dec = dec.await.unwrap();
    assert_eq!(dec.status, 200, "{}", dec.body);
    let dec = dec.json();
    assert_eq!(dec["usage"]["completion_tokens"], 3);
    assert_eq!(dec["usage"]["prompt_tokens_details"]["cached_tokens"], 96);
    assert!(ps.fleet.replicas[0].rooms.is_empty());

    // A different prompt in the same room is refused, not decoded from the wrong blocks.
    let b2 = body(&long_prompt("y"), 3, p.port(), 12);
    let (pre, dec) = tokio::join!(
        spawn_post(
            p,
            "/v1/completions",
            body(&long_prompt("x"), 3, p.port(), 12)
        ),
        spawn_post(d, "/v1/completions", b2),
    );
    assert_eq!(pre.unwrap().status, 200);
    let dec = dec.unwrap();
    assert_eq!(dec.status, 500);
    assert!(dec.body.contains("different prompt"), "{}", dec.body);
}
