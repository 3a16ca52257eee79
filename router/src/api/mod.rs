//! The OpenAI API listener's request path: a stack of tower layers, one concern each, in the
//! order a request meets them.
//!
//! ```text
//! RequestId        x-request-id in and out, access log
//! Endpoints        /v1/models and /health answered here; errors become OpenAI-shaped answers
//!  └ ReadBody      bounded, timed body read                       (413, 408)
//!    Parse         the routing fields only (prompts tokenized off  (400, 404)
//!                  the async workers, `tokenize`)
//!    Admission     flow control's seam: admit, queue or refuse    (429)
//!    Retry         another replica after a refused connection, before any byte was sent
//!    Choose        prefix index + scheduler → one replica         (503)
//!    Pd            prefill/decode split: a prefill replica first, when it pays
//!    PassiveHealth ejects replicas that refuse connections
//!    Forward       pooled upstream connection; the answer streams back through body
//!                  wrappers (`crate::body`): idle timeout, first chunk, accounting
//! ```
//!
//! Each stage takes the request as the stage above left it (see the types below) and passes a
//! richer one down, so the compiler says which layer may rely on what. A new concern (sessions,
//! a P/D policy, flow control) is a layer at its place in [`stack`].

pub mod admission;
pub mod choose;
pub mod endpoints;
pub mod features;
pub mod forward;
pub mod parse;
pub mod passive_health;
pub mod pd;
pub mod read_body;
pub mod readiness;
pub mod request_id;
pub mod retry;
pub mod served;
#[cfg(test)]
mod tests;
pub mod tokenize;

use crate::errors::{ApiError, RespBody};
use crate::metrics::Metrics;
use crate::request::{Endpoint, RequestFeatures};
use crate::state::discovery::DiscoveryStatus;
use crate::state::index::SharedIndex;
use crate::state::publish::TableReader;
use crate::state::table::Table;
use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;
use tower::ServiceBuilder;
use warmpath_routing::ReplicaId;

pub use admission::{Admission, AdmitAll};

/// The future of a stage that awaits something of its own (the body, the replica): two per
/// request. The other stages return the next stage's future as it is (`Either`) or wrap it in a
/// small named future of their own, so they allocate nothing; the stack's cost per request is
/// measured beside the previous router by `BASELINE_BIN=… bench/datapath.sh`.
pub type StageFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

/// What every stage knows about a request from its arrival: its id, when it came, and the
/// routing table it will use to the end.
#[derive(Debug, Clone)]
pub struct Ctx {
    pub request_id: HeaderValue,
    pub started: Instant,
    pub table: Arc<Table>,
    pub endpoint: Endpoint,
}

/// A proxied request as it enters the stack below [`endpoints::Endpoints`].
#[derive(Debug)]
pub struct Incoming<B> {
    pub ctx: Ctx,
    pub request: Request<B>,
}

/// After [`read_body`]: the head and the whole body.
#[derive(Debug)]
pub struct Read {
    pub ctx: Ctx,
    pub head: http::request::Parts,
    pub body: Bytes,
}

/// After [`parse`]: what routing knows about the request.
#[derive(Debug)]
pub struct Parsed {
    pub read: Read,
    pub features: RequestFeatures,
}

/// After [`admission`]: admitted, holding its permit until the response ends.
#[derive(Debug)]
pub struct Admitted {
    pub parsed: Parsed,
    pub permit: admission::Permit,
    /// Whose request it is.
    pub tenant: Arc<crate::tenants::Tenant>,
}

impl Admitted {
    pub fn ctx(&self) -> &Ctx {
        &self.parsed.read.ctx
    }
    pub fn features(&self) -> &RequestFeatures {
        &self.parsed.features
    }
}

/// One try at serving an admitted request ([`retry`] makes several): replicas already tried
/// are excluded.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub request: Arc<Admitted>,
    pub exclude: Vec<ReplicaId>,
}

/// After [`choose`]: bound to a replica.
#[derive(Debug)]
pub struct Chosen {
    pub request: Arc<Admitted>,
    pub routed: crate::choice::Routed,
    /// The body sent instead of the client's (a P/D split's decode request).
    pub body: Option<Bytes>,
    /// The prefill replica of a split request.
    pub prefill_replica: Option<String>,
    /// `x-prefiller-host-port` for a decode replica's P/D sidecar.
    pub prefiller: Option<HeaderValue>,
}

/// A request that was not served: the answer, and the model label its metric carries (empty
/// before the body was parsed; `(unknown)` for models no pool serves).
#[derive(Debug)]
pub struct Rejection {
    pub error: ApiError,
    pub model: String,
}

impl Rejection {
    pub fn before_parse(error: ApiError) -> Self {
        Self {
            error,
            model: String::new(),
        }
    }
}

/// Why an attempt failed, as [`retry`] needs to know it.
#[derive(Debug, thiserror::Error)]
pub enum AttemptError {
    /// No replica could be chosen.
    #[error("{0}")]
    NoReplica(ApiError),
    /// The replica refused the connection: nothing was sent, another may be tried.
    #[error("{error}")]
    Refused { replica: ReplicaId, error: ApiError },
    /// The replica answered 502 or 503 (an engine that cannot take the request, or a proxy in
    /// front of one that is gone), or another 5xx whose body does not blame the request:
    /// nothing has reached the client, another may be tried; when none is, this answer is the
    /// client's.
    #[error("replica {name} answered {status}")]
    Unavailable {
        replica: ReplicaId,
        name: String,
        status: http::StatusCode,
        /// In a mutex only so that the error is `Sync`, as tower's boxed errors must be; it is
        /// only ever taken whole.
        response: Box<std::sync::Mutex<Response<RespBody>>>,
    },
    /// The replica showed no progress while the request waited for its first byte, and the
    /// request was taken back: nothing has reached the client, another may be tried.
    #[error("{error}")]
    Stalled { replica: ReplicaId, error: ApiError },
    /// The replica's connection failed before its response head came (reset or closed: an
    /// engine that died, or dropped its connections): nothing has reached the client and the
    /// engine no longer holds the request (a closed connection is how engines cancel), so
    /// another may be tried, as after a stall.
    #[error("{error}")]
    Reset { replica: ReplicaId, error: ApiError },
    /// Anything else: final.
    #[error("{0}")]
    Failed(ApiError),
}

impl AttemptError {
    pub fn into_api(self) -> ApiError {
        match self {
            AttemptError::NoReplica(e)
            | AttemptError::Refused { error: e, .. }
            | AttemptError::Stalled { error: e, .. }
            | AttemptError::Reset { error: e, .. }
            | AttemptError::Failed(e) => e,
            AttemptError::Unavailable { name, status, .. } => {
                ApiError::upstream_unavailable(&name, status)
            }
        }
    }
}

/// What the stack's stages need from the rest of the router.
#[derive(Clone)]
pub struct StackParts {
    pub tables: TableReader,
    pub metrics: Arc<Metrics>,
    pub index: SharedIndex,
    /// Where requests are bound to replicas (shared with the endpoint picker).
    pub chooser: Arc<crate::choice::Chooser>,
    pub discovery: Arc<DiscoveryStatus>,
    pub admission: Arc<dyn Admission>,
    /// `limits.max_buffered_body_bytes` (read at start).
    pub body_budget_bytes: usize,
    /// Every response body is registered here, for clients that stop taking data.
    pub stall_watch: Arc<crate::body::StallWatch>,
    /// Where prompts are tokenized (shared with the endpoint picker).
    pub tokenize: Arc<tokenize::TokenizePool>,
}

/// The whole API stack for requests with body type `B`.
pub fn stack<B>(
    parts: StackParts,
) -> impl tower::Service<
    Request<B>,
    Response = Response<RespBody>,
    Error = Infallible,
    Future: Send + 'static,
> + Clone
       + Send
       + 'static
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let proxy = ServiceBuilder::new()
        .layer(read_body::ReadBodyLayer::new(read_body::BodyBudget::new(
            parts.body_budget_bytes,
            parts.metrics.clone(),
        )))
        .layer(parse::ParseLayer::new(parts.tokenize.clone()))
        .layer(admission::AdmissionLayer::new(parts.admission.clone()))
        .layer(retry::RetryLayer::new(
            retry::MAX_ATTEMPTS,
            parts.metrics.clone(),
        ))
        .layer(choose::ChooseLayer::new(parts.chooser.clone()))
        .layer(pd::PdLayer::new(
            parts.chooser.clone(),
            parts.metrics.clone(),
        ))
        .layer(passive_health::PassiveHealthLayer::new(
            parts.index.clone(),
            parts.metrics.clone(),
        ))
        .service(forward::Forward::new(
            parts.metrics.clone(),
            parts.stall_watch.clone(),
        ));
    ServiceBuilder::new()
        .layer(request_id::RequestIdLayer)
        .service(endpoints::Endpoints::new(
            parts.tables,
            parts.discovery,
            parts.metrics,
            proxy,
        ))
}
