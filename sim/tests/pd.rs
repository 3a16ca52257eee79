//! P/D disaggregation with vLLM's `kv_transfer_params`: the prefill replica returns the
//! parameters, the decode replica pulls the blocks with them, and fails clearly once the
//! prefill replica has evicted them.

mod common;

use common::*;
use serde_json::json;

#[tokio::test]
async fn kv_transfer_params_round_trip_and_fail_when_blocks_are_gone() {
    let s = sim(&["--timing", "zero", "--replicas", "2", "--kv-blocks", "16"]).await;
    let [p, d] = [s.addrs()[0], s.addrs()[1]];
    let prompt = "p".repeat(4 * 16 * 6 + 8); // 6 full blocks and a partial one
    let pre = post(
        p,
        "/v1/completions",
        &json!({"prompt": prompt, "max_tokens": 1, "kv_transfer_params": {"do_remote_decode": true}}).to_string(),
    )
    .await;
    assert_eq!(pre.status, 200, "{}", pre.body);
    let pre = pre.json();
    let kv = pre["kv_transfer_params"].clone();
    assert_eq!(kv["do_remote_prefill"], true);
    assert_eq!(kv["do_remote_decode"], false);
    assert_eq!(kv["remote_host"], "127.0.0.1");
    assert_eq!(kv["remote_port"], p.port());
    assert_eq!(kv["remote_block_ids"].as_array().unwrap().len(), 6);
    assert!(kv["remote_engine_id"]
        .as_str()
        .unwrap()
        .contains(&p.port().to_string()));
    assert_eq!(pre["usage"]["completion_tokens"], 1);

    let dec = post(
        d,
        "/v1/completions",
        &json!({"prompt": prompt, "max_tokens": 4, "kv_transfer_params": kv}).to_string(),
    )
    .await;
    assert_eq!(dec.status, 200, "{}", dec.body);
    let dec = dec.json();
    // The 6 pulled blocks count as cached; nothing was cached locally before.
    assert_eq!(dec["usage"]["prompt_tokens_details"]["cached_tokens"], 96);
    assert_eq!(dec["usage"]["completion_tokens"], 4);
    assert!(dec["kv_transfer_params"].is_null());
    let m = metrics(d).await;
    assert_eq!(metric(&m, "vllm:prefix_cache_hits_total"), 0.0);

    // Fill the prefill replica with other prompts: its blocks are evicted.
    for i in 0..4 {
        post(
            p,
            "/v1/completions",
            &json!({"prompt": format!("{i}").repeat(256), "max_tokens": 1}).to_string(),
        )
        .await;
    }
    let gone = post(
        d,
        "/v1/completions",
        &json!({"prompt": prompt, "max_tokens": 4, "kv_transfer_params": kv}).to_string(),
    )
    .await;
    assert_eq!(gone.status, 500, "{}", gone.body);
    let msg = gone.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(
        msg.contains("KV transfer failed") && msg.contains("no longer holds"),
        "{msg}"
    );

    // Unknown prefill engine, and malformed parameters.
    let mut elsewhere = kv.clone();
    elsewhere["remote_port"] = json!(1);
    let r = post(
        d,
        "/v1/completions",
        &json!({"prompt": prompt, "kv_transfer_params": elsewhere}).to_string(),
    )
    .await;
    assert_eq!(r.status, 500);
    assert!(r.body.contains("no prefill engine"), "{}", r.body);
    let r = post(d, "/v1/completions", &json!({"prompt": prompt, "kv_transfer_params": {"do_remote_prefill": true, "remote_block_ids": "x"}}).to_string()).await;
    assert_eq!(r.status, 400);
}

/// Prefill and decode replicas in different simulator processes (separate fleets here): the
/// decode side asks the prefill side over HTTP.
#[tokio::test]
async fn pulls_work_across_processes() {
    let ps = sim(&["--timing", "zero", "--kv-blocks", "16"]).await;
    let ds = sim(&["--timing", "zero"]).await;
    let (p, d) = (ps.addrs()[0], ds.addrs()[0]);
    let prompt = "q".repeat(4 * 16 * 3);
    let kv = post(
        p,
        "/v1/completions",
        &json!({"prompt": prompt, "max_tokens": 1, "kv_transfer_params": {"do_remote_decode": true}}).to_string(),
    )
    .await
    .json()["kv_transfer_params"]
        .clone();
    // 48 tokens: 3 full blocks named; the decode side always computes the last token, so it
    // pulls 2 of them.
    assert_eq!(kv["remote_block_ids"].as_array().unwrap().len(), 3);
    let dec = post(
        d,
        "/v1/completions",
        &json!({"prompt": prompt, "max_tokens": 2, "kv_transfer_params": kv}).to_string(),
    )
    .await;
    assert_eq!(dec.status, 200, "{}", dec.body);
    assert_eq!(
        dec.json()["usage"]["prompt_tokens_details"]["cached_tokens"],
        32
    );
    // Another prompt cannot pull those blocks.
    let other = post(
        d,
        "/v1/completions",
        &json!({"prompt": "r".repeat(4 * 16 * 3), "kv_transfer_params": kv}).to_string(),
    )
    .await;
    assert_eq!(other.status, 500);
    assert!(other.body.contains("no longer holds"), "{}", other.body);
}
