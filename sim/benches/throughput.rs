//! Benchmark: one simulator replica (zero-cost timing) under a pooled HTTP client, and the
//! idle memory of 1 vs 100 replicas.
//!
//! `cargo bench -p warmpath-sim --bench throughput` runs the real `warmpath-sim` binary as a
//! child process, pinned to CPU 1 with `taskset` when available, drives it from this process
//! (pin this one elsewhere: `taskset -c 0 cargo bench ...`) and prints requests/s; then starts
//! 1 and 100 idle replicas and prints VmRSS from /proc. Env: `BENCH_SECS` (default 10),
//! `BENCH_CONNS` (default 32), `BENCH_CPU` (default 1).

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use warmpath_testkit::free_ports;

const BIN: &str = env!("CARGO_BIN_EXE_warmpath-sim");
const BODY: &str = r#"{"model":"tiny","prompt":"You are a helpful assistant. Answer briefly: what is the capital of France?","max_tokens":8}"#;

struct Sim(Child);

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_sim(port: u16, replicas: u16, cpu: Option<&str>) -> Sim {
    let args = [
        "--listen".to_string(),
        format!("127.0.0.1:{port}"),
        "--replicas".into(),
        replicas.to_string(),
        "--timing".into(),
        "zero".into(),
        "--threads".into(),
        "1".into(),
    ];
    let has_taskset = Command::new("taskset")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    let mut cmd = match (cpu, has_taskset) {
        (Some(c), true) => {
            let mut c2 = Command::new("taskset");
            c2.args(["-c", c, BIN]);
            c2
        }
        _ => Command::new(BIN),
    };
    cmd.args(&args).stdout(Stdio::null()).stderr(Stdio::null());
    Sim(cmd.spawn().expect("spawn warmpath-sim"))
}

fn wait_healthy(port: u16) {
    for _ in 0..200 {
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            use std::io::{Read, Write};
            let _ = s.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
            let mut buf = String::new();
            let _ = s.read_to_string(&mut buf);
            if buf.starts_with("HTTP/1.1 200") {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("simulator on port {port} did not come up");
}

fn rss_kb(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn throughput(secs: u64, conns: usize, cpu: &str) {
    let port = free_ports(1);
    let _sim = spawn_sim(port, 1, Some(cpu));
    wait_healthy(port);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let elapsed = rt.block_on(async {
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(conns)
            .build_http::<Full<Bytes>>();
        let uri: http::Uri = format!("http://127.0.0.1:{port}/v1/completions")
            .parse()
            .unwrap();
        // Warm up the connections.
        let run = |measure: bool| {
            let mut tasks = Vec::new();
            for _ in 0..conns {
                let (client, uri, ok, failed, stop) = (
                    client.clone(),
                    uri.clone(),
                    ok.clone(),
                    failed.clone(),
                    stop.clone(),
                );
                tasks.push(tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let req = http::Request::post(uri.clone())
                            .header("content-type", "application/json")
                            .body(Full::new(Bytes::from_static(BODY.as_bytes())))
                            .unwrap();
                        let good = match client.request(req).await {
                            Ok(r) => {
                                let status = r.status();
                                r.into_body().collect().await.is_ok() && status == 200
                            }
                            Err(_) => false,
                        };
                        if measure {
                            if good { &ok } else { &failed }.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }));
            }
            tasks
        };
        let warm = run(false);
        tokio::time::sleep(Duration::from_secs(1)).await;
        stop.store(true, Ordering::Relaxed);
        for t in warm {
            let _ = t.await;
        }
        stop.store(false, Ordering::Relaxed);
        let start = Instant::now();
        let tasks = run(true);
        tokio::time::sleep(Duration::from_secs(secs)).await;
        stop.store(true, Ordering::Relaxed);
        let elapsed = start.elapsed();
        for t in tasks {
            let _ = t.await;
        }
        elapsed
    });
    let n = ok.load(Ordering::Relaxed);
    println!(
        "throughput: {n} ok, {} failed in {:.2} s over {conns} connections: {:.0} requests/s (server pinned to CPU {cpu}, zero-cost timing)",
        failed.load(Ordering::Relaxed),
        elapsed.as_secs_f64(),
        n as f64 / elapsed.as_secs_f64()
    );
}

fn idle_memory() {
    let mut rss = Vec::new();
    for replicas in [1u16, 100] {
        let port = free_ports(replicas);
        let sim = spawn_sim(port, replicas, None);
        for i in 0..replicas {
            wait_healthy(port + i);
        }
        std::thread::sleep(Duration::from_millis(500));
        let kb = rss_kb(sim.0.id());
        println!(
            "idle memory: {replicas} replicas: VmRSS {:.1} MB",
            kb as f64 / 1024.0
        );
        rss.push(kb);
    }
    println!(
        "idle memory: {:.3} MB per additional replica",
        (rss[1] as f64 - rss[0] as f64) / 99.0 / 1024.0
    );
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: then there is nothing to do.
    if !std::env::args().any(|a| a == "--bench") {
        println!("throughput: run with `cargo bench -p warmpath-sim --bench throughput`");
        return;
    }
    let secs = std::env::var("BENCH_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let conns = std::env::var("BENCH_CONNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32);
    let cpu = std::env::var("BENCH_CPU").unwrap_or_else(|_| "1".into());
    throughput(secs, conns, &cpu);
    idle_memory();
}
