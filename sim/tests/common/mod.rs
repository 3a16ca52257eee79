//! Helpers for the loopback integration tests: start a simulator in-process, talk HTTP to it.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use warmpath_sim::{Cli, SimHandle};

pub async fn sim(args: &[&str]) -> SimHandle {
    let mut all = vec!["warmpath-sim", "--listen", "127.0.0.1:0"];
    all.extend_from_slice(args);
    let cli = Cli::try_parse_from(all).expect("flags");
    warmpath_sim::start(&cli).await.expect("start")
}

#[allow(unused_imports)]
pub use warmpath_testkit::{client, Reply};

/// [`warmpath_testkit::send`] with a 10 s limit.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
) -> Result<Reply, String> {
    let body = bytes::Bytes::from(body.to_owned());
    warmpath_testkit::send(addr, method, path, &[], body, Duration::from_secs(10)).await
}

pub async fn post(addr: SocketAddr, path: &str, body: &str) -> Reply {
    request(addr, "POST", path, body).await.expect("request")
}

pub async fn get(addr: SocketAddr, path: &str) -> Reply {
    request(addr, "GET", path, "").await.expect("request")
}

/// The value of an unlabelled-beyond-engine/model metric line, e.g. `vllm:prefix_cache_hits_total`.
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(&format!("{name}{{")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no metric {name}"))
}

pub async fn metrics(addr: SocketAddr) -> String {
    get(addr, "/metrics").await.body
}

/// SSE `data:` payloads of a stream body.
pub fn sse_data(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .map(str::to_owned)
        .collect()
}

/// A long prompt sharing `shared` leading characters with others of the same seed.
pub fn prompt(shared: &str, tail: &str, repeat: usize) -> String {
    format!("{}{}", shared.repeat(repeat), tail)
}
