//! What the integration tests of several crates share (router, simulator, cluster tests): a
//! plain HTTP/1 client over loopback that returns the whole reply, or a readable error,
//! always within a time limit; and a [`Recorder`], a server that keeps every request it gets,
//! for tests about the exact bytes a proxy sends; and a Gateway's ext_proc client
//! ([`ext_proc`]); and how a test of an optional dependency skips ([`optional`]). Used only by
//! tests.
#![forbid(unsafe_code)]

pub mod ext_proc;
pub mod optional;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Send requests one after another in the order given (`send(i)` is the i-th), each once the
/// router whose admin listener is `admin` has seen the one before arrive at flow control
/// ([`flow_arrivals`]), and return their labels (`label` and the index, `"a0"`), replies and the
/// instants they finished, in the order they finished: for tests of the order a queue serves
/// them in, on however busy a machine.
pub async fn finishing_order<Fut>(
    admin: SocketAddr,
    labels: &[&str],
    send: impl Fn(usize) -> Fut,
) -> Vec<(String, Reply, std::time::Instant)>
where
    Fut: std::future::Future<Output = Reply> + Send + 'static,
{
    let before = flow_arrivals(admin).await;
    let mut tasks = Vec::new();
    for (i, label) in labels.iter().enumerate() {
        let request = send(i);
        let name = format!("{label}{i}");
        tasks.push(tokio::spawn(async move {
            let reply = request.await;
            (name, reply, std::time::Instant::now())
        }));
        until_flow_arrivals(admin, before + i + 1).await;
    }
    let mut done = Vec::new();
    for t in tasks {
        done.push(t.await.expect("request task"));
    }
    done.sort_by_key(|(_, _, at)| *at);
    done
}

/// Requests flow control of the router whose admin listener is `admin` has seen in all:
/// dispatched, queued or refused (a sum that only grows).
pub async fn flow_arrivals(admin: SocketAddr) -> usize {
    let page = send(admin, "GET", "/metrics", &[], "", Duration::from_secs(5))
        .await
        .expect("the router's metrics")
        .body;
    let seen = metric(&page, "warmpath_flow_dispatched_total", &[])
        + metric(&page, "warmpath_flow_refused_total", &[])
        + metric(&page, "warmpath_flow_queued_requests", &[]);
    seen as usize
}

/// Until [`flow_arrivals`] reaches `n`, for at most 10 s.
///
/// # Panics
/// When it has not by then.
pub async fn until_flow_arrivals(admin: SocketAddr, n: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let seen = flow_arrivals(admin).await;
        if seen >= n {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "flow control saw {seen} of {n} requests"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A loopback port nothing listens on now, released for a process to bind.
pub fn free_port() -> u16 {
    free_ports(1)
}

/// The first of `n` consecutive loopback ports nothing listens on now, released for a process
/// to bind. They are taken below the kernel's ephemeral range, from a counter this process
/// advances: a port the OS picked for `:0` could be handed out again, to a client connection
/// or another test's listener, in the moment between our check and the process's bind (a CI
/// failure once came from exactly that), and no two calls in one process share a port.
pub fn free_ports(n: u16) -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::OnceLock;
    const LOW: u32 = 10_000;
    // The top of the range (the kernel's first ephemeral port) and the next offset into it.
    static RANGE: OnceLock<(u32, AtomicU32)> = OnceLock::new();
    let (high, next) = RANGE.get_or_init(|| {
        let high = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
            .filter(|&lo| lo > LOW + 2_000)
            .unwrap_or(32_768);
        // Start each process somewhere else, so test binaries run one after another (or two
        // workspaces tested at once) rarely walk the same ports.
        let seed = std::process::id().wrapping_mul(2_654_435_761)
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
        (high, AtomicU32::new(seed % (high - LOW)))
    });
    let (high, n32) = (*high, u32::from(n.max(1)));
    let span = high - LOW;
    for _ in 0..span {
        let base = LOW + next.fetch_add(n32, Ordering::Relaxed) % span;
        if base + n32 > high {
            continue;
        }
        let free = (0..n32).all(|i| {
            let port = u16::try_from(base + i).expect("below the ephemeral range");
            std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
        });
        if free {
            return u16::try_from(base).expect("below the ephemeral range");
        }
    }
    panic!("no {n} consecutive free loopback ports below {high}");
}

/// A fresh client (no connection reuse between calls, so tests stay independent).
pub fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// A whole reply.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The replica the router says answered (`x-warmpath-replica`).
    pub fn replica(&self) -> String {
        self.header("x-warmpath-replica")
            .unwrap_or_else(|| panic!("no x-warmpath-replica: {self:?}"))
            .to_owned()
    }

    /// Assert an OpenAI-shaped error with this status and code.
    pub fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(self.status, status, "{}", self.body);
        let j = self.json();
        assert_eq!(j["error"]["code"], code, "{}", self.body);
        assert!(j["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
        assert!(j["error"]["type"].as_str().is_some());
        assert_eq!(self.header("content-type"), Some("application/json"));
    }
}

/// Send one request (JSON content type) and read the whole reply, within `limit`.
pub async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
    limit: Duration,
) -> Result<Reply, String> {
    let mut b = http::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .header("content-type", "application/json");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let req = b
        .body(Full::new(body.into()))
        .map_err(|e| format!("request: {e}"))?;
    let fut = async {
        let resp = client()
            .request(req)
            .await
            .map_err(|e| format!("request: {e:?}"))?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("body: {e:?}"))?
            .to_bytes();
        Ok(Reply {
            status,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    };
    tokio::time::timeout(limit, fut)
        .await
        .map_err(|_| format!("timed out after {limit:?}"))?
}

/// A server that records every request (head and body) and answers its n-th request (from 0)
/// with `answer(n)` (status, JSON body), after `delay`. The request is recorded on arrival,
/// before the delay. It is an engine with no health endpoint: `GET /health` (the router's
/// active check, on by default) is answered 404 at once and not recorded, so that what a test
/// counts is what the data path sent; [`Recorder::with_health_path`] treats it as any other.
#[derive(Clone, Default)]
pub struct Recorder {
    seen: Arc<Mutex<Vec<(http::request::Parts, Bytes)>>>,
    health_path: bool,
}

impl Recorder {
    /// A recorder that records and answers `GET /health` like any other request (for a test
    /// of what passes through to an engine).
    pub fn with_health_path() -> Self {
        Self {
            health_path: true,
            ..Self::default()
        }
    }

    /// Listen on a loopback port chosen by the OS, until the runtime ends.
    pub async fn start(&self, answer: fn(usize) -> (u16, String), delay: Duration) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = self.seen.clone();
        let health_path = self.health_path;
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let seen = seen.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let seen = seen.clone();
                        async move {
                            if !health_path
                                && req.method() == http::Method::GET
                                && req.uri().path() == "/health"
                            {
                                return Ok(http::Response::builder()
                                    .status(404)
                                    .body(Full::new(Bytes::new()))
                                    .unwrap());
                            }
                            let (head, body) = req.into_parts();
                            let body = body.collect().await.unwrap().to_bytes();
                            let n = {
                                let mut s = seen.lock().unwrap();
                                s.push((head, body));
                                s.len() - 1
                            };
                            tokio::time::sleep(delay).await;
                            let (status, text) = answer(n);
                            Ok::<_, std::convert::Infallible>(
                                http::Response::builder()
                                    .status(status)
                                    .header("content-type", "application/json")
                                    .body(Full::new(Bytes::from(text)))
                                    .unwrap(),
                            )
                        }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        addr
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<(http::request::Parts, Bytes)> {
        self.seen.lock().unwrap().clone()
    }
}

/// The sum of the Prometheus series named `name` whose labels include every `k="v"` of
/// `labels`: 0 when the family is on the page but no series matches (a labelled counter not yet
/// counted). A family the page does not have at all (no sample, no `# TYPE` line: a renamed or
/// removed metric) panics, so that no `== 0` assertion passes because the name is wrong; ask
/// [`has_metric`] where absence is the point.
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    assert!(
        has_metric(text, name),
        "no metric {name} on the page (renamed or removed?)"
    );
    samples_of(text, name)
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Whether the page has the family of series `name`: a sample of it, or a `# TYPE` line for it
/// or for the family it belongs to (`x` for `x_total`, `x_count`, `x_sum`, `x_bucket`).
pub fn has_metric(text: &str, name: &str) -> bool {
    let family = ["_total", "_count", "_sum", "_bucket"]
        .iter()
        .find_map(|suffix| name.strip_suffix(suffix))
        .unwrap_or(name);
    let declared = |n: &str| {
        text.lines().any(|l| {
            l.strip_prefix("# TYPE ")
                .and_then(|rest| rest.split_whitespace().next())
                .is_some_and(|declared| declared == n)
        })
    };
    samples_of(text, name).next().is_some() || declared(name) || declared(family)
}

/// The sample lines of series `name` (any labels).
fn samples_of<'a>(text: &'a str, name: &'a str) -> impl Iterator<Item = &'a str> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(move |l| {
            l.starts_with(name) && matches!(l.as_bytes().get(name.len()), Some(b'{') | Some(b' '))
        })
}

/// A [`Recorder`] answer: a prefill engine's one-token answer with the `kv_transfer_params`
/// of vLLM's NIXL connector (fixed values, for tests that check they are passed on unchanged).
pub fn nixl_prefill_answer(_: usize) -> (u16, String) {
    (
        200,
        serde_json::json!({"id": "cmpl-p", "choices": [{"text": "x", "index": 0}],
               "kv_transfer_params": {"do_remote_prefill": true, "do_remote_decode": false,
               "remote_engine_id": "engine-7", "remote_block_ids": [5, 6, 7],
               "remote_host": "10.0.0.9", "remote_port": 5600, "tp_size": 1}})
        .to_string(),
    )
}

/// A [`Recorder`] answer: a plain completion.
pub fn completion_answer(_: usize) -> (u16, String) {
    (
        200,
        serde_json::json!({"id": "cmpl-d", "choices": [{"text": "hello", "index": 0}]}).to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::{has_metric, metric};

    #[test]
    fn metric_sums_matching_series_only() {
        let text = "# HELP x\nx_total{a=\"1\",b=\"2\"} 3\nx_total{a=\"1\",b=\"3\"} 4\nx_total_other 9\nx_total 1\n";
        assert_eq!(metric(text, "x_total", &[("a", "1")]), 7.0);
        assert_eq!(metric(text, "x_total", &[("b", "3")]), 4.0);
        assert_eq!(metric(text, "x_total", &[]), 8.0);
        assert_eq!(
            metric(text, "x_total", &[("a", "9")]),
            0.0,
            "no such series yet"
        );
    }

    #[test]
    fn a_declared_family_without_samples_is_zero_and_an_absent_one_is_not() {
        let text = "# HELP w_retries Retries.\n# TYPE w_retries counter\n# TYPE w_wait histogram\nw_wait_count 2\n";
        assert_eq!(metric(text, "w_retries_total", &[]), 0.0);
        assert_eq!(metric(text, "w_wait_sum", &[]), 0.0);
        assert_eq!(metric(text, "w_wait_count", &[]), 2.0);
        assert!(!has_metric(text, "w_renamed_total"));
        let absent = std::panic::catch_unwind(|| metric(text, "w_renamed_total", &[]));
        assert!(absent.is_err());
    }
}
