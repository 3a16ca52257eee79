//! Routing from KV events against real vLLM engines (the CPU build with the tiny model, see
//! `../shared/peers/vllm-cpu.sh`): the router's predicted cached tokens per request must equal
//! the engine's own (`usage.prompt_tokens_details.cached_tokens`) for at least 95% of a seeded
//! mix of chat and completion requests, for the base model and a LoRA adapter (random weights,
//! written by the test), and exactly for salted prompts and for an adapter the router learns
//! of from the events alone.
//!
//! Needs an installed vLLM: `WARMPATH_VLLM_DIR=/work/peers/vllm` (and `WARMPATH_VLLM_SCRIPT`,
//! default `../shared/peers/vllm-cpu.sh`). Ignored by `make test`, since two engines take 7 GB
//! and minutes to start on CI's two cores: `bench/kv-events-vllm.sh` runs it (`--ignored`) and
//! keeps its output, and run that way it fails rather than skip when vLLM is missing.

mod common;

use common::*;
use serde_json::json;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use warmpath_testkit::free_port;

/// A vLLM server in its own process group: its engine-core and worker processes go with it.
struct Engine(Child);

impl Drop for Engine {
    fn drop(&mut self) {
        // vLLM forks an engine core and workers; signalling the group reaches them all (killing
        // the server alone would leave them running, holding gigabytes).
        let group = format!("-{}", self.0.id());
        let signal = |sig: &str| {
            let _ = Command::new("kill").args([sig, "--", &group]).status();
        };
        signal("-TERM");
        for _ in 0..100 {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        signal("-KILL");
        let _ = self.0.wait();
    }
}

#[tokio::test]
#[ignore = "needs real vLLM engines (WARMPATH_VLLM_DIR): bench/kv-events-vllm.sh runs it"]
async fn predictions_match_real_vllm_engines() {
    let dir = std::env::var("WARMPATH_VLLM_DIR")
        .expect("WARMPATH_VLLM_DIR names a vllm-cpu.sh install (../shared/peers/vllm-cpu.sh)");
    let script = std::env::var("WARMPATH_VLLM_SCRIPT").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/peers/vllm-cpu.sh"
        )
        .to_owned()
    });
    let adapter = lora_adapter(&dir);
    let engines: Vec<(u16, u16, Engine)> = (0..2)
        .map(|_| {
            let (port, events) = (free_port(), free_port());
            let config = json!({"enable_kv_cache_events": true, "publisher": "zmq",
                "endpoint": format!("tcp://*:{events}"), "topic": ""});
            let child = Command::new(&script)
                .process_group(0)
                .args(["serve", &dir, &port.to_string()])
                .args(["--num-gpu-blocks-override", "64"])
                .arg("--enable-prompt-tokens-details")
                .args(["--kv-events-config", &config.to_string()])
                .args(["--enable-lora", "--max-lora-rank", "8", "--lora-modules"])
                .arg(format!("tiny-lora={}", adapter.display()))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start vLLM");
            (port, events, Engine(child))
        })
        .collect();
    let started = Instant::now();
    for (port, _, _) in &engines {
        let addr = format!("127.0.0.1:{port}").parse().unwrap();
        loop {
            if get(addr, "/health").await.is_ok_and(|r| r.status == 200) {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(300),
                "vLLM did not start"
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    let config = |adapters: &str, replicas: usize| {
        let mut y = format!(
            "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\nresponse_headers: {{ decision: true }}\npools:\n  - name: p\n    models: [tiny, tiny-lora]\n    lora_adapters: [{adapters}]\n    kv_events: {{ tokenizer: \"{dir}/tiny/tokenizer.json\", chat_template: \"{dir}/tiny/tokenizer_config.json\" }}\n    replicas:\n"
        );
        for (i, (port, events, _)) in engines.iter().enumerate().take(replicas) {
            y.push_str(&format!(
                "      - {{ name: v{i}, url: \"http://127.0.0.1:{port}\", kv_events_endpoint: \"tcp://127.0.0.1:{events}\" }}\n"
            ));
        }
        y
    };
    let rt = router(&config("tiny-lora", engines.len())).await;
    wait_ready(rt.admin_addr).await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    let a = cached_token_agreement(&rt, &["tiny", "tiny-lora"], 80, 1500, 300).await;
    // vLLM folds a request's cache_salt into its first block: the router must too, so that
    // blocks cached under one salt never count for another salt or for none.
    let prompt = text(777, 2500);
    let mut salted = Vec::new();
    for salt in ["alpha", "alpha", "beta", ""] {
        let (predicted, actual) = completion(rt.addr, "tiny", &prompt, salt).await;
        salted.push((salt, predicted, actual));
    }
    println!("salted (salt, predicted, engine): {salted:?}");
    // A router told nothing of the adapter learns it from the first event naming it: before,
    // it keys the adapter's prompt as the base model's (no blocks of it are cached anywhere,
    // so 0 either way); after, the adapter's second request matches the adapter's blocks, which
    // it would not under the base model's keys, and the base model's request none of them. One
    // replica, so that every request meets the blocks of the ones before.
    let learner = router(&config("", 1)).await;
    wait_ready(learner.admin_addr).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let prompt = text(888, 2500);
    let mut learned = Vec::new();
    for model in ["tiny-lora", "tiny-lora", "tiny", "tiny"] {
        let (predicted, actual) = completion(learner.addr, model, &prompt, "").await;
        learned.push((model, predicted, actual));
    }
    println!("learned adapter (model, predicted, engine): {learned:?}");
    learner.shutdown().await;
    let m = router_metrics(rt.admin_addr).await;
    println!(
        "real vLLM: {} of {} requests predicted exactly; misses (request, predicted, engine): {:?}",
        a.exact, a.total, a.misses
    );
    println!(
        "events: stored {} removed {} gaps {} unknown parents {}",
        metric(&m, "warmpath_kv_events_total", &[("kind", "stored")]),
        metric(&m, "warmpath_kv_events_total", &[("kind", "removed")]),
        metric(&m, "warmpath_kv_events_total", &[("kind", "gap")]),
        metric(
            &m,
            "warmpath_kv_events_total",
            &[("kind", "unknown_parent")]
        ),
    );
    rt.shutdown().await;
    a.assert_at_least(95);
    assert!(
        salted[1].2 > 0,
        "the engine did not reuse the salted prompt: {salted:?}"
    );
    for (salt, predicted, actual) in salted {
        assert_eq!(predicted, actual, "salt {salt:?}");
    }
    assert!(
        learned[1].2 > 0 && learned[2].2 == 0 && learned[3].2 > 0,
        "the engine did not cache the adapter's blocks apart: {learned:?}"
    );
    for (model, predicted, actual) in learned {
        assert_eq!(predicted, actual, "model {model}");
    }
}

/// One completion of `prompt` for `model` (with `salt` unless empty) through the router at
/// `addr`: its predicted and the engine's cached tokens, once its events had time to arrive.
async fn completion(
    addr: std::net::SocketAddr,
    model: &str,
    prompt: &str,
    salt: &str,
) -> (u64, u64) {
    let mut body = json!({"model": model, "max_tokens": 2, "prompt": prompt});
    if !salt.is_empty() {
        body["cache_salt"] = json!(salt);
    }
    let r = post(addr, "/v1/completions", &body.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    tokio::time::sleep(Duration::from_millis(100)).await;
    cached_tokens(&r)
}

/// A LoRA adapter of rank 8 on the tiny model's attention (random weights, PEFT's layout),
/// written with the vLLM install's Python; its directory.
fn lora_adapter(vllm_dir: &str) -> std::path::PathBuf {
    const WRITE: &str = r#"
import json, sys, torch
from safetensors.torch import save_file
out, base = sys.argv[1], sys.argv[2]
cfg = json.load(open(base + "/config.json"))
h, r = cfg["hidden_size"], 8
g = torch.Generator().manual_seed(7)
t = {}
for i in range(cfg["num_hidden_layers"]):
    for m in ("q_proj", "v_proj"):
        p = f"base_model.model.model.layers.{i}.self_attn.{m}"
        t[p + ".lora_A.weight"] = torch.randn(r, h, generator=g) * 0.01
        t[p + ".lora_B.weight"] = torch.randn(h, r, generator=g) * 0.01
save_file(t, out + "/adapter_model.safetensors")
json.dump({"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": r, "lora_alpha": 16,
           "lora_dropout": 0.0, "bias": "none", "target_modules": ["q_proj", "v_proj"],
           "base_model_name_or_path": base}, open(out + "/adapter_config.json", "w"))
"#;
    let out = std::env::temp_dir().join(format!("warmpath-lora-{}", std::process::id()));
    std::fs::create_dir_all(&out).expect("adapter directory");
    let status = Command::new(format!("{vllm_dir}/venv/bin/python"))
        .args(["-c", WRITE])
        .arg(&out)
        .arg(format!("{vllm_dir}/tiny"))
        .status()
        .expect("run the vLLM install's python");
    assert!(status.success(), "writing the LoRA adapter failed");
    out
}
