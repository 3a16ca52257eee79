//! Decision explanations and the admin listener's status APIs, against simulator replicas:
//! `x-warmpath-explain: 1` gets every candidate's scores when configuration allows it (and
//! nothing otherwise), the admin API lists recent decisions, `/api/status` shows the replicas as
//! the router sees them, and `warmpath-router check` routes sample prompts from a file.

mod common;

use common::*;
use std::net::SocketAddr;

fn chat(prompt: &str) -> String {
    serde_json::json!({
        "model": "tiny",
        "max_tokens": 4,
        "messages": [{"role": "user", "content": prompt}],
    })
    .to_string()
}

async fn explained(addr: SocketAddr, prompt: &str, id: &str) -> Reply {
    send(
        addr,
        "POST",
        "/v1/chat/completions",
        &[("x-warmpath-explain", "1"), ("x-request-id", id)],
        chat(prompt),
    )
    .await
    .unwrap()
}

/// The header's candidates: (name, parameters).
fn candidates(header: &str) -> Vec<(String, Vec<(String, String)>)> {
    header
        .split(", ")
        .skip(1)
        .map(|item| {
            let mut parts = item.split(';');
            let name = parts.next().unwrap().trim_matches('"').to_owned();
            let params = parts
                .map(|p| match p.split_once('=') {
                    Some((k, v)) => (k.to_owned(), v.to_owned()),
                    None => (p.to_owned(), "?1".to_owned()),
                })
                .collect();
            (name, params)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explained_request_gets_every_candidates_scores_and_is_listed() {
    let s = Setup::new(
        &["--timing", "zero", "--replicas", "3"],
        "explain: { header: true, recent: 8, sample_interval_ms: 3600000 }\n",
    )
    .await;
    let api = s.router.addr;
    let admin = s.router.admin_addr;
    let prompt = text(7, 2000);

    let first = explained(api, &prompt, "req-first").await;
    assert_eq!(first.status, 200, "{}", first.body);
    let replica = first.header("x-warmpath-replica").unwrap().to_owned();
    let header = first.header("x-warmpath-explain").expect("explain header");
    assert!(
        header.starts_with("decision;policy=prefix;reason="),
        "{header}"
    );
    let cs = candidates(header);
    assert_eq!(cs.len(), 3, "{header}");
    let chosen: Vec<&str> = cs
        .iter()
        .filter(|(_, p)| p.iter().any(|(k, _)| k == "chosen"))
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(chosen, [replica.as_str()], "{header}");
    for (name, params) in &cs {
        for key in [
            "matched", "score", "prefix", "load", "queue", "kv", "pending", "ttft_ms", "cost_ms",
            "leave_ms",
        ] {
            assert!(
                params.iter().any(|(k, _)| k == key),
                "{name} lacks {key}: {header}"
            );
        }
    }

    // The same prompt again: it matched on the replica that answered it, and the scores say so.
    let again = explained(api, &prompt, "req-again").await;
    assert_eq!(again.header("x-warmpath-replica"), Some(replica.as_str()));
    let cs = candidates(again.header("x-warmpath-explain").unwrap());
    let matched = |name: &str| -> u32 {
        let (_, p) = cs.iter().find(|(n, _)| n == name).unwrap();
        p.iter()
            .find(|(k, _)| k == "matched")
            .unwrap()
            .1
            .parse()
            .unwrap()
    };
    assert!(matched(&replica) > 0);
    for (name, _) in &cs {
        if *name != replica {
            assert_eq!(matched(name), 0);
        }
    }

    // Not asked: no header. The first such decision of the sampling interval (an hour) is
    // recorded, the second not.
    for prompt in ["unasked", "unasked too"] {
        let plain = post(api, "/v1/chat/completions", &chat(prompt)).await;
        assert_eq!(plain.status, 200);
        assert!(plain.header("x-warmpath-explain").is_none());
    }

    let d = get(admin, "/api/decisions").await.unwrap();
    assert_eq!(d.status, 200, "{}", d.body);
    assert_eq!(d.header("content-type"), Some("application/json"));
    let d = d.json();
    let listed: Vec<(bool, &str)> = d["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["asked"].as_bool().unwrap(),
                x["request_id"].as_str().unwrap(),
            )
        })
        .collect();
    // Newest first.
    assert_eq!(listed.len(), 3, "{d}");
    assert!(!listed[0].0, "{d}");
    assert_eq!(
        &listed[1..],
        [(true, "req-again"), (true, "req-first")],
        "{d}"
    );
    let newest = &d["decisions"][1];
    assert_eq!(newest["model"], "tiny");
    assert_eq!(newest["tenant"], "default");
    assert_eq!(newest["chosen"], replica.as_str());
    let listed = newest["candidates"].as_array().unwrap();
    assert_eq!(listed.len(), 3);
    assert!(listed
        .iter()
        .all(|c| c["score"].is_number() && c["pool"] == "p"));

    // The status API: the pool, its three replicas ready, the requests counted on the one.
    let st = get(admin, "/api/status").await.unwrap().json();
    assert_eq!(st["models"][0]["model"], "tiny");
    assert_eq!(st["models"][0]["ready"], 3);
    let replicas = st["pools"][0]["replicas"].as_array().unwrap();
    assert_eq!(replicas.len(), 3);
    assert!(replicas
        .iter()
        .all(|r| r["ready"] == true && r["kv_events"] == "off"));
    let r = replicas
        .iter()
        .find(|r| r["name"] == replica.as_str())
        .unwrap();
    assert!(r["blocks_routed"].as_u64().unwrap() > 0);
    assert!(r["hit_rate"].as_f64().unwrap() > 0.0);
    assert!(st["index"]["entries"].as_u64().unwrap() > 0);
    s.stop().await;
}

/// Unless configuration allows it, the request header is ignored: the scores say how loaded
/// every replica is, which not every client should learn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_explain_header_is_ignored_unless_allowed() {
    let s = Setup::new(&["--timing", "zero", "--replicas", "2"], "").await;
    let r = explained(s.router.addr, "hello", "req-1").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.header("x-warmpath-explain").is_none());
    // Still sampled for the admin API (the first decision of its interval), marked unasked.
    let d = get(s.router.admin_addr, "/api/decisions")
        .await
        .unwrap()
        .json();
    assert_eq!(d["decisions"][0]["request_id"], "req-1", "{d}");
    assert_eq!(d["decisions"][0]["asked"], false);
    s.stop().await;
}

/// A replica that stops answering shows as not ready, and explained decisions say it was not
/// considered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_replica_is_shown_and_skipped() {
    let mut sims = Vec::new();
    for _ in 0..2 {
        sims.push(sim(&["--timing", "zero"]).await);
    }
    let addrs: Vec<SocketAddr> = sims.iter().map(|s| s.addrs()[0]).collect();
    let extra =
        "explain: { header: true }\nscrape: { interval_ms: 50, failures_before_unready: 1 }\n";
    let router = router(&config_yaml("tiny", &addrs, extra)).await;
    wait_ready(router.admin_addr).await;
    sims[1].shutdown();
    let mut status = serde_json::Value::Null;
    for _ in 0..100 {
        status = get(router.admin_addr, "/api/status").await.unwrap().json();
        if status["models"][0]["ready"] == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(status["models"][0]["ready"], 1, "{status}");
    let r1 = status["pools"][0]["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "r1")
        .unwrap()
        .clone();
    assert_eq!(r1["ready"], false, "{status}");
    let r = explained(router.addr, "after the fall", "req-x").await;
    assert_eq!(r.header("x-warmpath-replica"), Some("r0"));
    let h = r.header("x-warmpath-explain").unwrap();
    assert!(h.ends_with(", \"r1\";skipped=not_ready"), "{h}");
    router.shutdown().await;
}

/// `warmpath-router check` on the demo's configuration: valid, and each sample prompt routed
/// with every replica scored; on a broken file it says where and exits 1.
#[test]
fn check_routes_sample_prompts_and_refuses_a_broken_file() {
    let bin = env!("CARGO_BIN_EXE_warmpath-router");
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/static.yaml");
    let out = std::process::Command::new(bin)
        .args([
            "check", "--config", example, "--prompt", "hi there", "--prompt", "hi there",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("Configuration is valid."), "{stdout}");
    let decisions: Vec<&str> = stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("→ ") && l.contains('('))
        .collect();
    assert_eq!(decisions.len(), 2, "{stdout}");
    // Every replica of the demo (sim-0..3) scored for each prompt, one chosen each time; the
    // second prompt, the same as the first, follows it (the check remembers what it routed).
    let scored: Vec<&str> = stdout
        .lines()
        .map(|l| l.trim_start().trim_start_matches("→ "))
        // Candidate rows: not the configuration's replica lines (their URLs), nor the decision
        // lines (`→ sim-N (reason; …)`).
        .filter(|l| l.starts_with("sim-") && !l.contains("http://"))
        .filter(|l| !l.contains('(') && !l.contains("not considered"))
        .collect();
    assert_eq!(scored.len(), 8, "{stdout}");
    for i in 0..4 {
        let name = format!("sim-{i} ");
        assert_eq!(
            scored.iter().filter(|l| l.starts_with(&name)).count(),
            2,
            "{stdout}"
        );
    }
    let chosen: Vec<&str> = stdout
        .lines()
        .filter(|l| !l.contains('('))
        .filter_map(|l| l.trim_start().strip_prefix("→ sim-"))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(chosen.len(), 2, "{stdout}");
    assert_eq!(chosen[0], chosen[1], "{stdout}");
    let dir = std::env::temp_dir().join(format!("warmpath-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.yaml");
    std::fs::write(
        &bad,
        "pools:\n  - name: p\n    models: [m]\n    replicas:\n      - {name: a, url: 'ftp://x'}\n",
    )
    .unwrap();
    let out = std::process::Command::new(bin)
        .args(["check", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("pools[0].replicas[0].url"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
