//! A rolling restart of two router processes under load loses no request: the way Kubernetes
//! does it (SIGTERM, readiness watched by the load balancer, a new process on the same port),
//! with real `warmpath-router` processes in front of in-process simulator replicas.

mod common;

use common::*;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use warmpath_testkit::free_port;

struct Router {
    api: SocketAddr,
    admin: SocketAddr,
    config: PathBuf,
    child: Option<Child>,
}

impl Router {
    /// A router on ports of its own, ready. A port picked free may be taken by another test's
    /// process before this one binds it: then the router exits at start, and new ports are
    /// picked (the restarts later reuse the ports it got).
    async fn ready(dir: &Path, name: &str, replicas: &[SocketAddr]) -> Router {
        for _ in 0..5 {
            let mut r = Router::new(dir, name, replicas);
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                if is_ready(r.admin).await {
                    return r;
                }
                let exited = r.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
                if exited.is_some() {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "router at {} never became ready",
                    r.admin
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        panic!("router {name} could not start on free ports");
    }

    fn new(dir: &Path, name: &str, replicas: &[SocketAddr]) -> Router {
        let (api, admin) = (free_port(), free_port());
        let mut yaml = config_yaml(
            "tiny",
            replicas,
            "shutdown:\n  accept_ms: 500\n  drain_ms: 10000\n",
        );
        yaml = yaml
            .replace("listen: 127.0.0.1:0", &format!("listen: 127.0.0.1:{api}"))
            .replace("admin: 127.0.0.1:0", &format!("admin: 127.0.0.1:{admin}"));
        let config = dir.join(format!("{name}.yaml"));
        std::fs::write(&config, yaml).unwrap();
        let mut r = Router {
            api: SocketAddr::from(([127, 0, 0, 1], api)),
            admin: SocketAddr::from(([127, 0, 0, 1], admin)),
            config,
            child: None,
        };
        r.start();
        r
    }

    fn start(&mut self) {
        self.child = Some(
            Command::new(env!("CARGO_BIN_EXE_warmpath-router"))
                .arg("--config")
                .arg(&self.config)
                .env("WARMPATH_LOG", "warn")
                .spawn()
                .expect("start warmpath-router"),
        );
    }

    /// SIGTERM, then wait for the process to leave (it drains first).
    fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        child.wait().unwrap()
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

async fn is_ready(admin: SocketAddr) -> bool {
    matches!(get(admin, "/readyz").await, Ok(r) if r.status == 200)
}

async fn until_ready(admin: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !is_ready(admin).await {
        assert!(
            Instant::now() < deadline,
            "router at {admin} never became ready"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Until more than `before` requests have been served (20 s at most).
async fn served_past(served: &AtomicU64, before: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while served.load(Ordering::Relaxed) <= before {
        assert!(Instant::now() < deadline, "no traffic served past {before}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_two_routers_under_load_loses_no_request() {
    // 10 ms decode steps: each streamed answer of 8 tokens is in flight for about 100 ms.
    let mut sim = sim(&["--replicas", "2", "--decode-base-ms", "10"]).await;
    let dir = std::env::temp_dir().join(format!("warmpath-rolling-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut routers = [
        Router::ready(&dir, "a", &sim.addrs()).await,
        Router::ready(&dir, "b", &sim.addrs()).await,
    ];

    // The load balancer: sends only to routers whose readiness it last saw pass, as
    // Kubernetes endpoints do, polling every 50 ms.
    let endpoints: Vec<(SocketAddr, SocketAddr)> =
        routers.iter().map(|r| (r.api, r.admin)).collect();
    let ready = Arc::new(Mutex::new(vec![true; endpoints.len()]));
    let stop = Arc::new(AtomicBool::new(false));
    let poller = {
        let (ready, stop, endpoints) = (ready.clone(), stop.clone(), endpoints.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                for (i, (_, admin)) in endpoints.iter().enumerate() {
                    let ok = is_ready(*admin).await;
                    ready.lock().unwrap()[i] = ok;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let (served, failed) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(Mutex::new(Vec::new())),
    );
    let clients: Vec<_> = (0..4)
        .map(|c| {
            let (ready, stop, endpoints) = (ready.clone(), stop.clone(), endpoints.clone());
            let (served, failed) = (served.clone(), failed.clone());
            tokio::spawn(async move {
                let mut turn = c;
                while !stop.load(Ordering::Relaxed) {
                    turn += 1;
                    let pick = {
                        let r = ready.lock().unwrap();
                        (0..r.len()).map(|k| (turn + k) % r.len()).find(|&k| r[k])
                    };
                    let Some(i) = pick else {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    };
                    let body = serde_json::json!({"model": "tiny", "prompt": format!("client {c} turn {turn}"),
                        "max_tokens": 8, "stream": true})
                    .to_string();
                    match send(endpoints[i].0, "POST", "/v1/completions", &[], body).await {
                        Ok(r) if r.status == 200 && r.body.contains("[DONE]") => {
                            served.fetch_add(1, Ordering::Relaxed);
                        }
                        other => failed.lock().unwrap().push(format!("router {i}: {other:?}")),
                    }
                }
            })
        })
        .collect();

    // Traffic flows through every router before the first restart.
    served_past(&served, 0).await;
    for r in &mut routers {
        let before = served.load(Ordering::Relaxed);
        // The old process leaves on its own, cleanly, after draining…
        let status = tokio::task::block_in_place(|| r.terminate());
        assert!(
            status.success(),
            "a SIGTERMed router exits cleanly: {status}"
        );
        // …and its replacement takes the same port.
        r.start();
        until_ready(r.admin).await;
        served_past(&served, before).await;
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    poller.await.unwrap();
    let failed = failed.lock().unwrap().clone();
    assert!(
        failed.is_empty(),
        "{} requests lost: {failed:?}",
        failed.len()
    );
    assert!(
        served.load(Ordering::Relaxed) > 50,
        "too little load to say anything"
    );
    drop(routers);
    sim.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}
