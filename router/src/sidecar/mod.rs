//! `warmpath-router sidecar`: the decode pod's P/D sidecar (the role of llm-d's routing
//! sidecar), so that warmpath drops in under an llm-d-style scheduler, or under warmpath's own
//! router with `pd.connector: sidecar`.
//!
//! The scheduler in front picks a decode pod and a prefill pod, and sends the request to the
//! decode pod's sidecar with `x-prefiller-host-port: HOST:PORT` naming the prefill pod. The
//! sidecar runs the prefill there with vLLM's NIXL protocol ([`crate::pd_wire::nixl`]: a
//! one-token request whose answer carries `kv_transfer_params`), then sends the decode request
//! with those parameters to its local engine and streams the answer back. Without the header,
//! or on another of the engine's inference, health and metrics paths
//! ([`proxy::ENGINE_PATHS`]), it is a plain reverse proxy to the local engine; every other
//! path gets 404, so the engine's administrative endpoints stay out of clients' reach. The
//! prefill host, which a client names, gets only the protocol's headers and the client's
//! credentials and trace context, and a client never learns why a prefill failed.
//!
//! The pieces: [`guard`] decides which prefill hosts may be called (the header is client
//! input: an SSRF guard); [`proxy`] is the request path; [`admin`] serves `/metrics`,
//! `/healthz` and `/readyz`. Listeners are the router's own ([`crate::server`]), the series
//! are [`crate::metrics::SidecarMetrics`].
//!
//! Where the allow list comes from: the flags (`--prefill-allow CIDR`, `--prefill-host
//! HOST:PORT`), fixed at start. The seam for a Kubernetes watch of the prefill pools (a later
//! step) is [`SidecarHandle::set_allow_list`]: the request path reads the list through a watch
//! channel, so a watcher that builds an [`AllowList`] of the pools' pod IPs on every change
//! and publishes it there needs nothing else from this module.

pub mod admin;
pub mod guard;
pub mod proxy;

pub use guard::{AllowList, Cidr, CidrPorts, PrefillHost, PrefillTarget};

use crate::config::{LimitsConfig, PrefillFailure, TimeoutsConfig};
use crate::errors::StartError;
use crate::metrics::SidecarMetrics;
use bytes::Bytes;
use http::uri::{Authority, Scheme};
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The local engine: `http://HOST:PORT` (same pod, so plain HTTP, no base path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineUrl {
    authority: Authority,
}

/// Why `--engine` cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineUrlError {
    #[error("`{0}` is not an URL")]
    Invalid(String),
    #[error("`{0}`: the engine must be named as http://HOST:PORT (no TLS, path or query)")]
    Shape(String),
}

impl FromStr for EngineUrl {
    type Err = EngineUrlError;

    fn from_str(s: &str) -> Result<Self, EngineUrlError> {
        let uri: http::Uri = s
            .parse()
            .map_err(|_| EngineUrlError::Invalid(s.to_owned()))?;
        let shape = || EngineUrlError::Shape(s.to_owned());
        if uri.scheme() != Some(&Scheme::HTTP) {
            return Err(shape());
        }
        let authority = uri.authority().cloned().ok_or_else(shape)?;
        // Userinfo would be sent nowhere (and might be a credential in a process listing).
        if authority.as_str().contains('@') || authority.port_u16().is_none() {
            return Err(shape());
        }
        if !matches!(uri.path_and_query().map(|p| p.as_str()), None | Some("/")) {
            return Err(shape());
        }
        Ok(Self { authority })
    }
}

impl EngineUrl {
    pub fn authority(&self) -> &Authority {
        &self.authority
    }

    /// The engine's URI for a request's path and query.
    fn uri(&self, path_and_query: Option<&http::uri::PathAndQuery>) -> http::Uri {
        let pq = path_and_query.map_or("/", |p| p.as_str());
        http::Uri::builder()
            .scheme(Scheme::HTTP)
            .authority(self.authority.clone())
            .path_and_query(pq)
            .build()
            .expect("an authority and a request's path make an URI")
    }
}

impl std::fmt::Display for EngineUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "http://{}", self.authority)
    }
}

/// How long the sidecar waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SidecarTimeouts {
    /// Opening a TCP connection to the prefill host or the engine.
    pub connect: Duration,
    /// From sending a request to its response head. A non-streamed answer (the prefill's is
    /// one) comes with its head only when generation ends, so this bounds the whole prefill.
    pub header: Duration,
    /// Longest silence between two chunks of an answer body (then the stream is cut); the
    /// prefill's whole (one-token) body must arrive within it.
    pub idle: Duration,
    /// Reading a client's request head and body (then 408).
    pub client: Duration,
}

impl Default for SidecarTimeouts {
    /// The router's defaults (`timeouts` in its configuration).
    fn default() -> Self {
        let t = TimeoutsConfig::default();
        Self {
            connect: t.connect(),
            header: t.header(),
            idle: t.idle(),
            client: t.client(),
        }
    }
}

/// What the sidecar is started with.
#[derive(Debug, Clone)]
pub struct SidecarOptions {
    pub listen: SocketAddr,
    pub admin: SocketAddr,
    pub engine: EngineUrl,
    pub allow: AllowList,
    pub on_prefill_failure: PrefillFailure,
    /// Largest request body accepted; larger ones get 413.
    pub max_body_bytes: usize,
    pub timeouts: SidecarTimeouts,
    /// How long shutdown waits for open connections to finish.
    pub drain: Duration,
    /// Engine paths served besides [`proxy::ENGINE_PATHS`] (each with what lies under it).
    pub engine_paths: Vec<String>,
}

/// Defaults of `warmpath-router sidecar`.
pub mod defaults {
    /// All interfaces: schedulers reach the sidecar by pod IP. 8080 is the router's own data
    /// port and leaves the engine on vLLM's default 8000, so the engine's command line does not
    /// change; only the pool's target port moves to the sidecar. (llm-d's sidecar instead takes
    /// 8000 and moves vLLM to 8001; pass `--listen 0.0.0.0:8000 --engine
    /// http://127.0.0.1:8001` for that layout.)
    pub const LISTEN: &str = "0.0.0.0:8080";
    /// vLLM's default port, on loopback: the engine shares the pod's network namespace.
    pub const ENGINE: &str = "http://127.0.0.1:8000";
    /// All interfaces: the kubelet's probes and Prometheus come from outside the pod (unlike
    /// the router's admin default, which is loopback). It serves no secrets. 9091, not the
    /// router's 9090, so that both can run in one pod.
    pub const ADMIN: &str = "0.0.0.0:9091";
}

impl Default for SidecarOptions {
    fn default() -> Self {
        Self {
            listen: defaults::LISTEN.parse().expect("a socket address"),
            admin: defaults::ADMIN.parse().expect("a socket address"),
            engine: defaults::ENGINE.parse().expect("an engine URL"),
            allow: AllowList::default(),
            on_prefill_failure: PrefillFailure::Decode,
            max_body_bytes: LimitsConfig::default().max_body_bytes,
            timeouts: SidecarTimeouts::default(),
            drain: Duration::from_secs(10),
            engine_paths: Vec::new(),
        }
    }
}

/// The HTTP client for both upstreams (prefill hosts and the engine): a general-purpose pooled
/// client is enough for one engine and a handful of prefill pods.
pub(crate) type UpstreamClient = Client<HttpConnector, Full<Bytes>>;

fn build_client(t: &SidecarTimeouts) -> UpstreamClient {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(t.connect));
    connector.set_nodelay(true);
    connector.enforce_http(true);
    Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(Duration::from_millis(
            TimeoutsConfig::default().pool_idle_ms,
        ))
        .build(connector)
}

/// A running sidecar.
pub struct SidecarHandle {
    pub addr: SocketAddr,
    pub admin_addr: SocketAddr,
    metrics: Arc<SidecarMetrics>,
    allow: watch::Sender<Arc<AllowList>>,
    /// What [`CidrPorts::Serving`] means here: the engine's port and the listen port.
    serving_ports: [u16; 2],
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl SidecarHandle {
    pub fn metrics(&self) -> &SidecarMetrics {
        &self.metrics
    }

    /// Replace the allowed prefill hosts; requests that arrive from now on are checked against
    /// the new list. The seam for a source that follows the cluster (see the module doc).
    pub fn set_allow_list(&self, allow: AllowList) {
        self.allow
            .send_replace(Arc::new(allow.serving_on(&self.serving_ports)));
    }

    /// The allow list requests are checked against now (its serving ports made concrete).
    pub fn allow_list(&self) -> Arc<AllowList> {
        self.allow.borrow().clone()
    }

    /// Stop accepting, let open connections finish (up to the drain time).
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), StartError> {
    let bind_error = |source| StartError::Bind { addr, source };
    let listener = TcpListener::bind(addr).await.map_err(bind_error)?;
    let local = listener.local_addr().map_err(bind_error)?;
    Ok((listener, local))
}

/// Start the sidecar: bind both listeners and serve.
pub async fn start(options: SidecarOptions) -> Result<SidecarHandle, StartError> {
    if options.allow.is_empty() {
        tracing::warn!(
            "no --prefill-allow or --prefill-host: every request naming a prefill host (x-prefiller-host-port) is refused with 403"
        );
    }
    if let Some(c) = options.allow.cidrs().iter().find(|c| c.prefix() == 0) {
        tracing::warn!(cidr = %c, "--prefill-allow allows every address of its family: clients can make the sidecar POST to any host of the cluster");
    }
    if options.allow.ports() == &CidrPorts::Any && !options.allow.cidrs().is_empty() {
        tracing::warn!("--prefill-port any: clients can make the sidecar POST to every port of the --prefill-allow networks");
    }
    let (api_listener, addr) = bind(options.listen).await?;
    let (admin_listener, admin_addr) = bind(options.admin).await?;
    let metrics = Arc::new(SidecarMetrics::new());
    let serving_ports = [
        options
            .engine
            .authority()
            .port_u16()
            .expect("an engine URL has a port"),
        addr.port(),
    ];
    let allow_list = options.allow.serving_on(&serving_ports);
    tracing::info!(ports = ?allow_list.ports(), "prefill hosts allowed by CIDR are called on these ports only");
    let (allow, allow_rx) = watch::channel(Arc::new(allow_list));
    let (shutdown, shutdown_rx) = watch::channel(false);
    let client = build_client(&options.timeouts);
    let shared = Arc::new(proxy::Shared {
        client: client.clone(),
        engine: options.engine.clone(),
        allow: allow_rx,
        on_prefill_failure: options.on_prefill_failure,
        max_body_bytes: options.max_body_bytes,
        timeouts: options.timeouts,
        metrics: metrics.clone(),
        extra_paths: options.engine_paths.clone(),
    });
    let admin = admin::service(admin::AdminState {
        client,
        engine: options.engine.clone(),
        metrics: metrics.clone(),
    });
    let serve_options = crate::server::ServeOptions {
        header_read: options.timeouts.client,
        drain: options.drain,
        max_connections: crate::config::LimitsConfig::default().max_connections,
        write_stall: Duration::from_millis(crate::config::TimeoutsConfig::default().write_stall_ms),
        counters: None,
        tls: None,
    };
    let tasks = vec![
        tokio::spawn(crate::server::serve(
            api_listener,
            proxy::service(shared),
            shutdown_rx.clone(),
            serve_options.clone(),
        )),
        tokio::spawn(crate::server::serve(
            admin_listener,
            admin,
            shutdown_rx,
            serve_options,
        )),
    ];
    tracing::info!(%addr, %admin_addr, engine = %options.engine, "warmpath P/D sidecar listening");
    Ok(SidecarHandle {
        addr,
        admin_addr,
        metrics,
        allow,
        serving_ports,
        shutdown,
        tasks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engine_is_plain_http_with_a_port() {
        let e: EngineUrl = "http://127.0.0.1:8000".parse().unwrap();
        assert_eq!(e.to_string(), "http://127.0.0.1:8000");
        assert_eq!(
            e.uri(Some(&"/v1/models?x=1".parse().unwrap())).to_string(),
            "http://127.0.0.1:8000/v1/models?x=1"
        );
        "http://localhost:8001/".parse::<EngineUrl>().unwrap();
        "http://[::1]:8001".parse::<EngineUrl>().unwrap();
        for bad in [
            "https://127.0.0.1:8000",
            "127.0.0.1:8000",
            "http://127.0.0.1",
            "http://127.0.0.1:8000/v1",
            "http://u:p@127.0.0.1:8000",
            "not a url",
        ] {
            assert!(bad.parse::<EngineUrl>().is_err(), "{bad} was accepted");
        }
        SidecarOptions::default();
    }
}
