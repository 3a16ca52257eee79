//! Session affinity against simulator replicas: a session whose context is rewritten (so that
//! no prefix matches any more) goes back to its replica, by the server-side map or by the
//! signed token; a forged token is ignored; a router that does not have the session's replica
//! moves it; two routers with the same key honour each other's tokens.

mod common;

use common::*;
use std::net::SocketAddr;
use warmpath_router::RouterHandle;

/// A 4-replica fleet behind `routers` routers sharing one session key.
async fn fleet(routers: usize) -> (warmpath_sim::SimHandle, Vec<RouterHandle>, tempdir::Key) {
    let sim = sim(&["--timing", "zero", "--replicas", "4"]).await;
    let key = tempdir::Key::new();
    let extra = format!(
        "response_headers: {{ replica: true }}\nsessions: {{ key_file: \"{}\" }}\n",
        key.path.display()
    );
    let mut rs = Vec::new();
    for _ in 0..routers {
        let r = router(&config_yaml("tiny", &sim.addrs(), &extra)).await;
        wait_ready(r.admin_addr).await;
        rs.push(r);
    }
    (sim, rs, key)
}

mod tempdir {
    /// A session key in a file of its own, removed with it.
    pub struct Key {
        pub path: std::path::PathBuf,
    }
    impl Key {
        pub fn new() -> Self {
            let path = std::env::temp_dir().join(format!(
                "warmpath-session-key-{}-{}",
                std::process::id(),
                rand_suffix()
            ));
            std::fs::write(&path, "a test session key of some length\n").unwrap();
            Self { path }
        }
    }
    impl Drop for Key {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
    fn rand_suffix() -> u128 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    }
}

/// A turn whose whole context is new (a compacted history: no prefix in common with anything).
async fn turn(addr: SocketAddr, seed: u64, headers: &[(&str, &str)]) -> Reply {
    let r = send(
        addr,
        "POST",
        "/v1/completions",
        headers,
        completion(&text(seed, 2048), 1),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewritten_session_returns_to_its_replica_by_id_and_by_token() {
    let (_sim, rs, _key) = fleet(1).await;
    let a = rs[0].addr;
    let first = turn(a, 1, &[("x-session-id", "agent-7")]).await;
    let home = first.replica();
    let token = first
        .header("x-session-token")
        .expect("a session token")
        .to_owned();
    for seed in 2..10 {
        // By the server-side map.
        let r = turn(a, seed, &[("x-session-id", "agent-7")]).await;
        assert_eq!(r.replica(), home, "turn {seed}");
        // By the token alone.
        let r = turn(a, 100 + seed, &[("x-session-token", &token)]).await;
        assert_eq!(r.replica(), home, "token turn {seed}");
    }
    // Without a session the same kind of prompts spread.
    let mut others = std::collections::BTreeSet::new();
    for seed in 200..216 {
        others.insert(turn(a, seed, &[]).await.replica());
    }
    assert!(others.len() >= 2, "{others:?}");
    let m = router_metrics(rs[0].admin_addr).await;
    assert_eq!(
        metric(&m, "warmpath_session_affinity_total", &[("result", "kept")]),
        16.0,
        "{m}"
    );
    assert_eq!(metric(&m, "warmpath_sessions", &[]), 1.0, "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_token_is_ignored() {
    let (_sim, rs, _key) = fleet(1).await;
    let a = rs[0].addr;
    let first = turn(a, 1, &[("x-session-id", "s")]).await;
    let token = first.header("x-session-token").unwrap().to_owned();
    let (_, tag) = token.split_once('.').unwrap();
    use base64::Engine as _;
    let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
    // A prompt sent once is held where it went; sent again with a token that names another
    // replica, with a stolen tag or unsigned (llm-d's plain form). Honoured, the token would
    // take it there (nothing is busier there); ignored, the prompt goes where its prefix is.
    for (seed, signed) in [(2, true), (3, false)] {
        let warm = turn(a, seed, &[]).await.replica();
        let target = if warm == "r0" { "r1" } else { "r0" };
        let forged = match signed {
            true => format!("{}.{tag}", b64(target)),
            false => b64(target),
        };
        let again = turn(a, seed, &[("x-session-token", &forged)]).await;
        assert_eq!(again.replica(), warm, "a forged token sent it to {target}");
    }
    let m = router_metrics(rs[0].admin_addr).await;
    let count = |result| metric(&m, "warmpath_session_affinity_total", &[("result", result)]);
    // Neither named a home: both were new sessions, none kept.
    assert_eq!((count("new"), count("kept")), (3.0, 0.0), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_routers_honour_each_others_tokens_and_a_missing_replica_moves_the_session() {
    let (sim, rs, key) = fleet(2).await;
    let first = turn(rs[0].addr, 1, &[("x-session-id", "chat-1")]).await;
    let home = first.replica();
    let token = first.header("x-session-token").unwrap().to_owned();
    for seed in 2..8 {
        let r = turn(rs[1].addr, seed, &[("x-session-token", &token)]).await;
        assert_eq!(r.replica(), home, "router 2, turn {seed}");
    }
    // A third router without the home replica (gone from its view): the session moves once,
    // and its new token names the new home.
    let addrs: Vec<SocketAddr> = sim.addrs().to_vec();
    let home_i: usize = home.trim_start_matches('r').parse().unwrap();
    let mut y = String::from("listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\npools:\n  - name: p\n    models: [tiny]\n    replicas:\n");
    for (i, a) in addrs.iter().enumerate().filter(|(i, _)| *i != home_i) {
        y.push_str(&format!("      - {{ name: r{i}, url: \"http://{a}\" }}\n"));
    }
    y.push_str(&format!(
        "response_headers: {{ replica: true }}\nsessions: {{ key_file: \"{}\" }}\n",
        key.path.display()
    ));
    let c = router(&y).await;
    wait_ready(c.admin_addr).await;
    let moved = turn(c.addr, 10, &[("x-session-token", &token)]).await;
    assert_ne!(moved.replica(), home);
    let new_token = moved.header("x-session-token").unwrap().to_owned();
    for seed in 11..15 {
        let r = turn(c.addr, seed, &[("x-session-token", &new_token)]).await;
        assert_eq!(r.replica(), moved.replica());
    }
    let m = router_metrics(c.admin_addr).await;
    assert_eq!(
        metric(
            &m,
            "warmpath_session_affinity_total",
            &[("result", "moved_unavailable")]
        ),
        1.0,
        "{m}"
    );
}
