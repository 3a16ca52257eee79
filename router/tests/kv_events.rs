//! Routing from engine KV events, end to end: simulator replicas publish their cache's events
//! over ZMQ, the router follows them and routes to where the prompt's blocks really are.

mod common;

use common::*;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::Duration;
use warmpath_router::RouterHandle;

struct Fleet {
    sim: warmpath_sim::SimHandle,
    rt: warmpath_router::RouterHandle,
}

async fn fleet(replicas: u16, sim_extra: &[&str], kv_extra: &str) -> Fleet {
    fleet_with(replicas, sim_extra, kv_extra, "").await
}

/// [`fleet`] with `top` (YAML lines) added to the router's configuration.
async fn fleet_with(replicas: u16, sim_extra: &[&str], kv_extra: &str, top: &str) -> Fleet {
    let port = free_ports(replicas);
    let endpoint = format!("tcp://*:{port}");
    let n = replicas.to_string();
    let mut args = vec![
        "--timing",
        "zero",
        "--replicas",
        n.as_str(),
        "--block-size",
        "16",
        "--kv-events-endpoint",
        endpoint.as_str(),
    ];
    args.extend_from_slice(sim_extra);
    let sim = sim(&args).await;
    let mut y = String::from(top);
    y.push_str(
        "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\nresponse_headers: { decision: true }\npools:\n  - name: p\n    models: [tiny]\n",
    );
    y.push_str(&format!("    kv_events: {{ {kv_extra} }}\n    replicas:\n"));
    for (i, a) in sim.addrs().iter().enumerate() {
        y.push_str(&format!(
            "      - {{ name: r{i}, url: \"http://{a}\", kv_events_endpoint: \"tcp://127.0.0.1:{}\" }}\n",
            port + i as u16
        ));
    }
    let rt = router(&y).await;
    wait_ready(rt.admin_addr).await;
    // ZMQ drops what a subscriber that is still joining would have received: make sure each
    // replica's events reach the router before the test proper.
    for (i, a) in sim.addrs().iter().enumerate() {
        let name = format!("r{i}");
        let mut joined = false;
        for attempt in 0..100u64 {
            let probe =
                json!({"model": "tiny", "prompt": text(90_000 + attempt, 200), "max_tokens": 1});
            assert_eq!(direct(*a, "/v1/completions", &probe).await.status, 200);
            tokio::time::sleep(Duration::from_millis(50)).await;
            let m = router_metrics(rt.admin_addr).await;
            if metric(&m, "warmpath_kv_events_mode", &[("replica", &name)]) >= 1.0
                && metric(&m, "warmpath_kv_events_total", &[("kind", "stored")]) >= (i + 1) as f64
            {
                joined = true;
                break;
            }
        }
        assert!(joined, "{name}'s events never reached the router");
    }
    Fleet { sim, rt }
}

async fn direct(addr: SocketAddr, path: &str, body: &Value) -> Reply {
    post(addr, path, &body.to_string()).await
}

fn cached(r: &Reply) -> u64 {
    r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0)
}

async fn events(admin: SocketAddr, kind: &str) -> f64 {
    metric(
        &router_metrics(admin).await,
        "warmpath_kv_events_total",
        &[("kind", kind)],
    )
}

async fn wait_for(admin: SocketAddr, kind: &str, at_least: f64) {
    for _ in 0..500 {
        let m = router_metrics(admin).await;
        if metric(&m, "warmpath_kv_events_total", &[("kind", kind)]) >= at_least {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no {kind} events: {}", router_metrics(admin).await);
}

#[tokio::test]
async fn requests_go_where_the_engine_reports_the_prefix() {
    let f = fleet(2, &[], "").await;
    let prompt = text(7, 3000);
    // Warm replica r1 behind the router's back: only its events can tell.
    let body = json!({"model": "tiny", "prompt": prompt, "max_tokens": 2});
    let before = events(f.rt.admin_addr, "stored").await;
    let warm = direct(f.sim.addrs()[1], "/v1/completions", &body).await;
    assert_eq!(warm.status, 200, "{}", warm.body);
    wait_for(f.rt.admin_addr, "stored", before + 1.0).await;
    for _ in 0..3 {
        let r = direct(f.rt.addr, "/v1/completions", &body).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(
            r.header("x-warmpath-replica"),
            Some("r1"),
            "{:?}",
            r.header("x-warmpath-decision")
        );
        let predicted: u64 = r
            .header("x-warmpath-cached-tokens")
            .unwrap()
            .parse()
            .unwrap();
        assert!(predicted > 600, "{predicted}");
        assert_eq!(
            predicted,
            cached(&r),
            "the router's view and the engine's disagree"
        );
    }
    let m = router_metrics(f.rt.admin_addr).await;
    assert_eq!(
        metric(&m, "warmpath_kv_events_mode", &[("replica", "r1")]),
        2.0,
        "{m}"
    );
    f.rt.shutdown().await;
}

#[tokio::test]
async fn evictions_and_restarts_are_followed() {
    // A cache of 64 blocks of 16 tokens: a few long prompts evict each other.
    let f = fleet(1, &["--kv-blocks", "64"], "").await;
    let a = json!({"model": "tiny", "prompt": text(1, 2400), "max_tokens": 1});
    let b = json!({"model": "tiny", "prompt": text(2, 2400), "max_tokens": 1});
    let c = json!({"model": "tiny", "prompt": text(3, 2400), "max_tokens": 1});
    for body in [&a, &b, &c] {
        assert_eq!(
            direct(f.sim.addrs()[0], "/v1/completions", body)
                .await
                .status,
            200
        );
    }
    wait_for(f.rt.admin_addr, "removed", 1.0).await;
    // Whatever is left of `a` after b and c, the router says exactly what the engine reuses.
    for body in [&a, &c] {
        let r = direct(f.rt.addr, "/v1/completions", body).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let predicted: u64 = r
            .header("x-warmpath-cached-tokens")
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(predicted, cached(&r), "{}", r.body);
    }
    f.rt.shutdown().await;
}

/// A seeded set of chat and completion requests with shared prefixes: the router's predicted
/// cached tokens equal the engine's own for at least 95% of them.
#[tokio::test]
async fn predictions_match_the_engine_on_a_seeded_mix() {
    let f = fleet(2, &["--kv-blocks", "512"], "").await;
    seeded_mix(&f).await;
    f.rt.shutdown().await;
}

const TINY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tokenize/tests/fixtures/tiny"
);

/// The simulator's arguments and the pool's `kv_events` settings for the tiny model's real BPE
/// tokenizer and chat template (which the vLLM peer serves), in the engine and in the router.
fn real_tokenizer() -> ([String; 6], String) {
    let tokenizer = format!("{TINY}/tokenizer.json");
    let template = format!("{TINY}/tokenizer_config.json");
    let kv = format!("tokenizer: \"{tokenizer}\", chat_template: \"{template}\"");
    let sim = [
        "--kv-blocks".to_owned(),
        "512".to_owned(),
        "--tokenizer".to_owned(),
        tokenizer,
        "--chat-template".to_owned(),
        template,
    ];
    (sim, kv)
}

/// The same with the real tokenizer: every prompt is tokenized on the pool of threads, off the
/// async workers.
#[tokio::test]
async fn predictions_match_with_a_real_tokenizer_and_chat_template() {
    let (sim, kv) = real_tokenizer();
    let sim: Vec<&str> = sim.iter().map(String::as_str).collect();
    let f = fleet(2, &sim, &kv).await;
    seeded_mix(&f).await;
    let m = router_metrics(f.rt.admin_addr).await;
    let pooled = metric(&m, "warmpath_tokenize_total", &[("result", "pooled")]);
    assert!(pooled >= 60.0, "tokenized on the pool: {pooled}\n{m}");
    f.rt.shutdown().await;
}

/// With one tokenizing thread and no room to wait, a burst of long prompts is still served in
/// full: what finds the thread busy is routed without its tokens instead of waiting.
#[tokio::test]
async fn a_busy_tokenizer_pool_routes_without_tokens_rather_than_queue() {
    let (sim, kv) = real_tokenizer();
    let sim: Vec<&str> = sim.iter().map(String::as_str).collect();
    let top = "limits: { tokenize_threads: 1, tokenize_queue: 0 }\n";
    let f = fleet_with(1, &sim, &kv, top).await;
    let m0 = router_metrics(f.rt.admin_addr).await;
    let before = |name| metric(&m0, "warmpath_tokenize_total", &[("result", name)]);
    let (pooled0, busy0) = (before("pooled"), before("busy"));
    let burst = (0..24u64).map(|i| async move {
        let body = json!({"model": "tiny", "prompt": text(500 + i, 3000), "max_tokens": 1});
        direct(f.rt.addr, "/v1/completions", &body).await
    });
    for reply in futures_util::future::join_all(burst).await {
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    let m = router_metrics(f.rt.admin_addr).await;
    let after = |name| metric(&m, "warmpath_tokenize_total", &[("result", name)]);
    let (pooled, busy) = (after("pooled") - pooled0, after("busy") - busy0);
    assert_eq!(pooled + busy, 24.0, "each request counted once:\n{m}");
    assert!(pooled >= 1.0, "the pool tokenized some:\n{m}");
    f.rt.shutdown().await;
}

async fn seeded_mix(f: &Fleet) {
    let a = cached_token_agreement(&f.rt, &["tiny"], 60, 1200, 200).await;
    a.assert_at_least(95);
}

/// A router that starts after the engines has missed their first events; with the replay
/// endpoint it fetches them and its view is complete (fresh), so it finds a prefix cached
/// before it existed.
/// Simulator replicas that publish KV events and serve replays (replica i: events on
/// `port + i`, replays on `port + replicas + i`).
async fn replay_sim(replicas: u16, extra: &[&str]) -> (warmpath_sim::SimHandle, u16) {
    let port = free_ports(2 * replicas);
    let events = format!("tcp://*:{port}");
    let replay = format!("tcp://*:{}", port + replicas);
    let n = replicas.to_string();
    let mut args = vec![
        "--replicas",
        n.as_str(),
        "--block-size",
        "16",
        "--kv-events-endpoint",
        events.as_str(),
        "--kv-events-replay-endpoint",
        replay.as_str(),
    ];
    args.extend_from_slice(extra);
    (sim(&args).await, port)
}

/// A router following `replay_sim`'s replicas, with `top` added to its configuration.
async fn replay_router(sim: &warmpath_sim::SimHandle, port: u16, top: &str) -> RouterHandle {
    let replicas = sim.addrs().len() as u16;
    let mut y = format!(
        "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\nresponse_headers: {{ decision: true }}\n{top}pools:\n  - name: p\n    models: [tiny]\n    kv_events: {{}}\n    replicas:\n",
    );
    for (i, a) in sim.addrs().iter().enumerate() {
        y.push_str(&format!(
            "      - {{ name: r{i}, url: \"http://{a}\", kv_events_endpoint: \"tcp://127.0.0.1:{}\", kv_events_replay_endpoint: \"tcp://127.0.0.1:{}\" }}\n",
            port + i as u16,
            port + replicas + i as u16
        ));
    }
    let rt = router(&y).await;
    wait_ready(rt.admin_addr).await;
    rt
}

/// Send small prompts to replica `i` behind the router's back until the router's view of it
/// is complete (fresh): any new event shows it what it missed, and it replays that.
async fn wait_fresh(rt: &RouterHandle, sim: &warmpath_sim::SimHandle, i: usize) {
    let name = format!("r{i}");
    for attempt in 0..100u64 {
        let probe =
            json!({"model": "tiny", "prompt": text(80_000 + attempt, 200), "max_tokens": 1});
        assert_eq!(
            direct(sim.addrs()[i], "/v1/completions", &probe)
                .await
                .status,
            200
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        let m = router_metrics(rt.admin_addr).await;
        if metric(&m, "warmpath_kv_events_mode", &[("replica", &name)]) == 2.0 {
            return;
        }
    }
    panic!(
        "{name} never became fresh: {}",
        router_metrics(rt.admin_addr).await
    );
}

/// A router that starts after the engines has missed their first events; with the replay
/// endpoint it fetches them and its view is complete (fresh), so it finds a prefix cached
/// before it existed.
#[tokio::test]
async fn a_late_router_catches_up_through_the_replay_endpoint() {
    let (sim, port) = replay_sim(2, &["--timing", "zero"]).await;
    // Before any router exists: r1 caches a long prompt; its events reach no one.
    let early = json!({"model": "tiny", "prompt": text(42, 3000), "max_tokens": 1});
    assert_eq!(
        direct(sim.addrs()[1], "/v1/completions", &early)
            .await
            .status,
        200
    );
    let rt = replay_router(&sim, port, "").await;
    wait_fresh(&rt, &sim, 1).await;
    let m = router_metrics(rt.admin_addr).await;
    assert!(
        metric(&m, "warmpath_kv_events_total", &[("kind", "replay")]) >= 1.0,
        "{m}"
    );
    let r = direct(rt.addr, "/v1/completions", &early).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-warmpath-replica"), Some("r1"));
    let predicted: u64 = r
        .header("x-warmpath-cached-tokens")
        .unwrap()
        .parse()
        .unwrap();
    assert!(predicted > 600, "{predicted}");
    assert_eq!(predicted, cached(&r));
    rt.shutdown().await;
}

/// Replicas the router follows through events, a slow prefill, and a burst of requests for one
/// new prompt: the engine reports the prompt's blocks only after its prefill, so without the
/// pending blocks every request of the burst sees the prompt nowhere and they spread over the
/// fleet (shown with `pending_ttl_ms: 0`); with them, the burst stays on one replica.
#[tokio::test]
async fn a_burst_of_one_new_prompt_stays_on_one_replica() {
    // ~750 tokens at 0.4 ms each: 300 ms of prefill before the engine reports anything.
    let (sim, port) = replay_sim(2, &["--prefill-us-per-token", "400"]).await;
    // Placement by the prompt's hash (which also keeps a burst together while load allows) is
    // off, to show the pending blocks alone.
    let no_home = "scheduling: { placement: { new_prefix_slack: -1 } }\n";
    for (top, one_replica) in [
        (format!("index: {{ pending_ttl_ms: 0 }}\n{no_home}"), false),
        (no_home.to_owned(), true),
    ] {
        let rt = replay_router(&sim, port, &top).await;
        wait_fresh(&rt, &sim, 0).await;
        wait_fresh(&rt, &sim, 1).await;
        let body = json!({"model": "tiny", "prompt": text(7_000 + u64::from(one_replica), 3000), "max_tokens": 1});
        let before = decisions(rt.admin_addr).await;
        let mut burst = Vec::new();
        for i in 0..4 {
            let (addr, body) = (rt.addr, body.clone());
            burst.push(tokio::spawn(async move {
                direct(addr, "/v1/completions", &body).await
            }));
            // Each request chosen before the next arrives: the next meets its pending blocks
            // (or, without them, its load).
            until_decisions(rt.admin_addr, before + f64::from(i + 1)).await;
        }
        // All chosen within the first one's prefill, before the engine reported anything:
        // otherwise the later ones would follow its events, and the test would show nothing.
        assert!(
            burst.iter().all(|r| !r.is_finished()),
            "{top}: the burst outlasted the prefill"
        );
        let mut chosen = std::collections::BTreeSet::new();
        for r in burst {
            let r = r.await.unwrap();
            assert_eq!(r.status, 200, "{}", r.body);
            chosen.insert(r.header("x-warmpath-replica").unwrap().to_owned());
        }
        assert_eq!(chosen.len() == 1, one_replica, "{top}: {chosen:?}");
        rt.shutdown().await;
    }
}

/// Two routers behind a round-robin balancer, a slow prefill, one new prompt sent to each in
/// turn: the engine reports nothing until the first one's prefill is done, so the second
/// router sees the prompt nowhere (no matched blocks; shown without `peers`) unless the first
/// told it where the prompt went. With `peers`, the second router counts the first one's
/// placement as pending blocks, matches them and follows it to the same replica; the first
/// router's prefill-done message then ends them.
#[tokio::test]
async fn peer_routers_follow_each_others_placements() {
    // ~750 tokens at 0.4 ms each: 300 ms of prefill before the engine reports anything.
    let (sim, port) = replay_sim(2, &["--prefill-us-per-token", "400"]).await;
    let no_home = "scheduling: { placement: { new_prefix_slack: -1 } }\n";
    for (peered, seed) in [(false, 11_000u64), (true, 12_000)] {
        let p = free_ports(2);
        let peers = |own: u16, other: u16| {
            if peered {
                format!("peers: {{ listen: \"tcp://127.0.0.1:{own}\", routers: [\"tcp://127.0.0.1:{other}\"] }}\n")
            } else {
                String::new()
            }
        };
        let a = replay_router(&sim, port, &format!("{no_home}{}", peers(p, p + 1))).await;
        let b = replay_router(&sim, port, &format!("{no_home}{}", peers(p + 1, p))).await;
        for rt in [&a, &b] {
            wait_fresh(rt, &sim, 0).await;
            wait_fresh(rt, &sim, 1).await;
        }
        if peered {
            // ZMQ drops what a subscriber still joining would get: wait until A's placements
            // reach B.
            let mut joined = false;
            for attempt in 0..100u64 {
                let probe = json!({"model": "tiny", "prompt": text(seed + 500 + attempt, 1000), "max_tokens": 1});
                assert_eq!(direct(a.addr, "/v1/completions", &probe).await.status, 200);
                let m = router_metrics(b.admin_addr).await;
                if metric(&m, "warmpath_peer_messages_total", &[("kind", "placed")]) >= 1.0 {
                    joined = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert!(
                joined,
                "A's placements never reached B: {}",
                router_metrics(b.admin_addr).await
            );
        }
        let body = json!({"model": "tiny", "prompt": text(seed, 3000), "max_tokens": 1});
        let placed = |m: &str| metric(m, "warmpath_peer_messages_total", &[("kind", "placed")]);
        let before = placed(&router_metrics(b.admin_addr).await);
        let first = {
            let (addr, body) = (a.addr, body.clone());
            tokio::spawn(async move { direct(addr, "/v1/completions", &body).await })
        };
        // Once A has sent it on (and, peered, B has A's placement), well within A's prefill:
        // the engine has reported none of the prompt yet.
        until_in_flight(a.admin_addr, 1.0).await;
        if peered {
            until_metric(
                b.admin_addr,
                "warmpath_peer_messages_total",
                &[("kind", "placed")],
                |v| v > before,
            )
            .await;
        }
        let second = direct(b.addr, "/v1/completions", &body).await;
        let first = first.await.unwrap();
        assert_eq!(
            (first.status, second.status),
            (200, 200),
            "{} {}",
            first.body,
            second.body
        );
        let decision = second.header("x-warmpath-decision").unwrap().to_owned();
        let matched: u32 = decision
            .split("matched_blocks=")
            .nth(1)
            .and_then(|r| r.split(';').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{decision}"));
        assert_eq!(
            matched > 0,
            peered,
            "peered {peered}: B's decision {decision}"
        );
        if peered {
            assert_eq!(
                first.header("x-warmpath-replica"),
                second.header("x-warmpath-replica"),
                "B followed A's placement"
            );
            // A's first byte ended its pending blocks in B too.
            let mut ended = false;
            for _ in 0..100 {
                let m = router_metrics(b.admin_addr).await;
                if metric(&m, "warmpath_peer_messages_total", &[("kind", "prefilled")]) >= 1.0 {
                    ended = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert!(ended, "{}", router_metrics(b.admin_addr).await);
        }
        a.shutdown().await;
        b.shutdown().await;
    }
}
