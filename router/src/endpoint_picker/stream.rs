//! One ext_proc stream: one HTTP request through the Gateway, from its headers to the end of
//! its response (or of its request, when the Gateway does not send responses).
//!
//! The request phase holds the body until it has ended (the model and prompt are in it), picks,
//! and answers with the destination; the response phase follows the answer as the proxy's
//! body wrappers do (first byte, usage, outcome) and hands every chunk back.
//!
//! Load accounting: the pick's in-flight guards live as long as the stream. A Gateway that
//! processes responses (GIE's configuration: response headers sent, bodies in full duplex)
//! keeps the stream open until the response has ended, so the replica counts the request in
//! flight exactly as long as the proxy would, its pending prefill until the first response
//! byte, and its outcome feeds passive health and the TTFT model. A Gateway that processes
//! only requests closes the stream once the request went on: the request then counts only
//! at its pick (it is in the prefix index all the same), and the replica's load comes from its
//! engine's metrics alone.

use super::pick::{self, Admit, Core, Picked, Refusal};
use super::wire::{
    self, Direction, Head, Modes, RequestBodyMode, RequestMutation, ResponseBodyMode,
};
use crate::api::admission::Permit;
use crate::api::served::{Served, ServedAs};
use crate::body::{Outcome, UsageScan};
use crate::config::FailureMode;
use crate::errors::ApiError;
use crate::request::Endpoint;
use crate::state::replica::FirstByteOwed;
use crate::state::table::Table;
use crate::tenants::Identity;
use bytes::{Bytes, BytesMut};
use envoy_types::pb::envoy::service::ext_proc::v3::{
    processing_request::Request as Message, HttpBody, ProcessingRequest, ProcessingResponse,
};
use futures_util::FutureExt;
use http_body_util::BodyExt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tonic::{Status, Streaming};

pub type Outbound = mpsc::Sender<Result<ProcessingResponse, Status>>;

/// What every stream shares besides the routing core.
pub struct Shared {
    pub core: Core,
    /// Request bodies held at once, in KiB (`limits.max_buffered_body_bytes`, read at start).
    pub body_budget: Arc<Semaphore>,
    /// Set when open streams must end (the drain after shutdown is over).
    pub cut: watch::Receiver<bool>,
}

/// How a stream ended for the picker's part.
enum Flow {
    Go,
    End,
}

enum Phase {
    /// Nothing yet: the request headers come first.
    Start,
    /// The request's body is being held until its end.
    Body(Box<Holding>),
    /// The request went on (picked or not): what follows passes through.
    Passing,
}

/// Which phase, without its contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    Start,
    Body,
    Passing,
}

struct Holding {
    head: Head,
    endpoint: Endpoint,
    subset: Option<Vec<String>>,
    body: BytesMut,
    /// Whether any body came (a request whose headers ended it has none to hand back).
    has_body: bool,
    /// Room for `body` in the budget.
    held: Option<OwnedSemaphorePermit>,
    held_kib: u32,
    /// The tenant the head proved ([`Core::identify`](super::pick::Core::identify)).
    identity: Option<Identity>,
    /// The body has come whole (the pick is being made).
    whole: bool,
}

/// A picked request as its response passes: the proxy's own bookkeeping ([`Served`]) and what
/// the picker adds to the answer.
struct Following {
    served: Served,
    stream: bool,
    /// How long its replica may take to show a stream's first byte ([`FirstByteOwed`]).
    allowance: Option<std::time::Duration>,
    /// Headers for the response (the session token, the replica's name, an explanation).
    response_headers: Vec<(String, Vec<u8>)>,
    usage: Option<Usage>,
}

pub struct Stream {
    shared: Arc<Shared>,
    tx: Outbound,
    peer: Option<SocketAddr>,
    modes: Option<Modes>,
    phase: Phase,
    /// The table when the stream started: its timeouts and failure mode hold to the end.
    table: Arc<Table>,
    started: Instant,
    /// When the request went on, and whether its response has started.
    answered_at: Option<Instant>,
    response_started: bool,
    last_message: Instant,
    following: Option<Following>,
}

/// Run one stream to its end; a protocol error ends it with its status.
pub async fn run(
    shared: Arc<Shared>,
    inbound: Streaming<ProcessingRequest>,
    tx: Outbound,
    peer: Option<SocketAddr>,
) {
    let now = Instant::now();
    let mut stream = Stream {
        table: shared.core.parts.tables.current(),
        shared,
        tx,
        peer,
        modes: None,
        phase: Phase::Start,
        started: now,
        answered_at: None,
        response_started: false,
        last_message: now,
        following: None,
    };
    let mut inbound = inbound;
    if let Err(status) = stream.drive(&mut inbound).await {
        tracing::debug!(code = ?status.code(), "endpoint picker stream: {}", status.message());
        let _ = stream.tx.send(Err(status)).await;
    }
    // The pick's guards go with the stream (see the module's note on load accounting).
}

impl Stream {
    async fn drive(&mut self, inbound: &mut Streaming<ProcessingRequest>) -> Result<(), Status> {
        let mut cut = self.shared.cut.clone();
        loop {
            let deadline = self.deadline();
            let message = tokio::select! {
                m = inbound.message() => m,
                _ = tokio::time::sleep_until(deadline.into()) => {
                    match self.timed_out().await? {
                        Flow::Go => continue,
                        Flow::End => return Ok(()),
                    }
                }
                _ = cut_off(&mut cut) => {
                    return match self.phase {
                        Phase::Passing => Ok(()),
                        _ => Err(Status::unavailable("the router is shutting down")),
                    };
                }
            };
            // The Gateway ended the stream, or it broke: nothing more to answer.
            let Ok(Some(message)) = message else {
                return Ok(());
            };
            self.last_message = Instant::now();
            if let Flow::End = self.on_message(message, inbound).await? {
                return Ok(());
            }
        }
    }

    fn deadline(&self) -> Instant {
        let t = &self.table.config.timeouts;
        match (self.answered_at, self.response_started) {
            (None, _) => self.started + t.client(),
            (Some(at), false) => at + t.header(),
            (Some(_), true) => self.last_message + t.idle(),
        }
    }

    /// Silence past the phase's timeout: a request body not received in time is the proxy's
    /// 408; afterwards the stream is let go cleanly, which lets the Gateway carry on alone
    /// rather than fail a request that is being served.
    async fn timed_out(&mut self) -> Result<Flow, Status> {
        match std::mem::replace(&mut self.phase, Phase::Passing) {
            Phase::Passing => Ok(Flow::End),
            Phase::Start => Err(Status::deadline_exceeded("no request headers in time")),
            Phase::Body(holding) => {
                let modes = self.modes.expect("set by the first message");
                if modes.request == RequestBodyMode::Buffered {
                    // Nothing is owed an answer: the body has not come.
                    return Err(Status::deadline_exceeded(
                        "the request body did not come in time",
                    ));
                }
                let refusal = Refusal {
                    error: ApiError::body_timeout(),
                    model: String::new(),
                };
                self.refuse(refusal, holding, false).await
            }
        }
    }

    async fn send(&self, response: ProcessingResponse) -> Result<(), Status> {
        // The Gateway went away: the stream ends with nothing more to say.
        self.tx
            .send(Ok(response))
            .await
            .map_err(|_| Status::cancelled("the Gateway closed the stream"))
    }

    async fn on_message(
        &mut self,
        message: ProcessingRequest,
        inbound: &mut Streaming<ProcessingRequest>,
    ) -> Result<Flow, Status> {
        let modes = match self.modes {
            Some(m) => m,
            None => {
                let m = Modes::of(&message).map_err(|e| {
                    tracing::warn!("endpoint picker: {e}");
                    Status::failed_precondition(e.to_string())
                })?;
                self.modes = Some(m);
                m
            }
        };
        let Some(request) = message.request.as_ref() else {
            // A message with nothing to process (a flow-control update) needs no answer.
            return Ok(Flow::Go);
        };
        let at = match self.phase {
            Phase::Start => At::Start,
            Phase::Body(_) => At::Body,
            Phase::Passing => At::Passing,
        };
        match (request, at) {
            (Message::RequestHeaders(h), At::Start) => {
                let head = Head::of(h);
                let subset = wire::subset(&message);
                match pick::endpoint(&head) {
                    Some(endpoint) => {
                        let mut holding = Box::new(Holding {
                            head,
                            endpoint,
                            subset,
                            body: BytesMut::new(),
                            has_body: false,
                            held: None,
                            held_kib: 0,
                            identity: None,
                            whole: false,
                        });
                        // Identity before work: no body is held for a request that proves no
                        // tenant.
                        let peer = self.peer.map(|p| p.ip());
                        match self.shared.core.identify(&holding.head, peer) {
                            Ok(identity) => holding.identity = Some(identity),
                            Err(refusal) => return self.refuse(refusal, holding, false).await,
                        }
                        if h.end_of_stream {
                            // A completion request with no body: the proxy's 400.
                            return self.decide(holding, inbound, false).await;
                        }
                        if modes.request == RequestBodyMode::Buffered {
                            self.send(wire::headers_continue()).await?;
                        }
                        self.phase = Phase::Body(holding);
                    }
                    None => {
                        let destination = self.shared.core.any(subset.as_deref());
                        let mutation = RequestMutation {
                            destination,
                            remove: self.untrusted_removals(),
                            body: None,
                        };
                        self.went_on();
                        self.send(mutation.on_headers()).await?;
                    }
                }
                Ok(Flow::Go)
            }
            (Message::RequestBody(b), At::Body) => {
                let Phase::Body(mut holding) = std::mem::replace(&mut self.phase, Phase::Passing)
                else {
                    unreachable!("matched above")
                };
                holding.has_body = true;
                if let Err(error) = self.hold(&mut holding, &b.body) {
                    let refusal = Refusal {
                        error,
                        model: String::new(),
                    };
                    holding.body.extend_from_slice(&b.body);
                    return self.refuse(refusal, holding, b.end_of_stream).await;
                }
                // A buffered body comes whole in one message, its end said or not (trailers may
                // follow, after its answer).
                if b.end_of_stream || modes.request == RequestBodyMode::Buffered {
                    return self.decide(holding, inbound, b.end_of_stream).await;
                }
                self.phase = Phase::Body(holding);
                Ok(Flow::Go)
            }
            (Message::RequestTrailers(_), At::Body) => {
                // In full duplex, trailers are how the end of a body without end_of_stream is
                // said.
                let Phase::Body(holding) = std::mem::replace(&mut self.phase, Phase::Passing)
                else {
                    unreachable!("matched above")
                };
                let flow = self.decide(holding, inbound, false).await?;
                if let Flow::Go = flow {
                    self.send(wire::trailers_continue(Direction::Request))
                        .await?;
                }
                Ok(flow)
            }
            (Message::RequestBody(b), At::Passing) => {
                self.pass(
                    Direction::Request,
                    modes.request == RequestBodyMode::FullDuplex,
                    b,
                )
                .await?;
                Ok(Flow::Go)
            }
            (Message::RequestTrailers(_), At::Passing) => {
                self.send(wire::trailers_continue(Direction::Request))
                    .await?;
                Ok(Flow::Go)
            }
            (Message::ResponseHeaders(h), At::Passing) => {
                self.response_started = true;
                let set = self.on_response_head(wire::Head::status(h));
                let set: Vec<(&str, Vec<u8>)> =
                    set.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
                if h.end_of_stream {
                    self.settle();
                }
                self.send(wire::response_headers(&set)).await?;
                Ok(Flow::Go)
            }
            (Message::ResponseBody(b), At::Passing) => {
                self.response_started = true;
                self.on_response_chunk(&b.body);
                // Settled before the last chunk goes back: once the Gateway has the response's
                // end, the replica no longer counts it.
                if b.end_of_stream {
                    self.settle();
                }
                self.pass(
                    Direction::Response,
                    modes.response == ResponseBodyMode::FullDuplex,
                    b,
                )
                .await?;
                Ok(Flow::Go)
            }
            (Message::ResponseTrailers(_), At::Passing) => {
                self.settle();
                self.send(wire::trailers_continue(Direction::Response))
                    .await?;
                Ok(Flow::Go)
            }
            (m, _) => Err(Status::invalid_argument(format!(
                "unexpected {} at this point of the stream",
                kind(m)
            ))),
        }
    }

    /// Room for `chunk` in the body: within `limits.max_body_bytes` (the proxy's 413) and the
    /// bodies' budget (its 503 `overloaded`).
    fn hold(&self, holding: &mut Holding, chunk: &[u8]) -> Result<(), ApiError> {
        let limit = self.table.config.limits.max_body_bytes;
        let len = holding.body.len() + chunk.len();
        if len > limit {
            return Err(ApiError::body_too_large(limit));
        }
        let kib = u32::try_from(len.div_ceil(1024)).unwrap_or(u32::MAX);
        if kib > holding.held_kib {
            let more = self
                .shared
                .body_budget
                .clone()
                .try_acquire_many_owned(kib - holding.held_kib)
                .map_err(|_| {
                    self.shared
                        .core
                        .parts
                        .metrics
                        .connections
                        .body_budget_refusals
                        .inc();
                    ApiError::body_budget()
                })?;
            match &mut holding.held {
                Some(held) => held.merge(more),
                None => holding.held = Some(more),
            }
            holding.held_kib = kib;
        }
        holding.body.extend_from_slice(chunk);
        Ok(())
    }

    /// The body has ended (`body_ended`: said by its last chunk, not by trailers): pick, and
    /// answer with the destination, or refuse.
    async fn decide(
        &mut self,
        mut holding: Box<Holding>,
        inbound: &mut Streaming<ProcessingRequest>,
        body_ended: bool,
    ) -> Result<Flow, Status> {
        let shared = self.shared.clone();
        let core = &shared.core;
        let peer = self.peer.map(|p| p.ip());
        // Tokenizing may take the body to another thread; it comes back whole (unshared, so
        // without a copy) for the answer.
        holding.whole = true;
        let body = std::mem::take(&mut holding.body).freeze();
        let identity = holding.identity.take().expect("identified at the head");
        let parsed = core
            .parse(
                holding.endpoint,
                &holding.head,
                body.clone(),
                peer,
                identity,
            )
            .await;
        holding.body = BytesMut::from(body);
        let parsed = match parsed {
            Ok(p) => p,
            Err(refusal) => return self.refuse(refusal, holding, body_ended).await,
        };
        let strip_authorization = parsed.table.tenants.strips_authorization();
        let model = parsed.features.model.clone();
        // As the proxy's parse stage: an untrusted client may not steer a prefill/decode split,
        // so its P/D fields go before the body is handed back to reach an engine. Judged on the
        // stream's table, as its header is (`untrusted_removals`): one verdict for both.
        let cleaned = if !self.trusts_gateway() && parsed.features.pd_fields {
            match crate::request::without_pd_fields(&holding.body) {
                Ok(cleaned) => cleaned,
                Err(_) => {
                    let error = ApiError::not_reencoded();
                    return self
                        .refuse(Refusal { error, model }, holding, body_ended)
                        .await;
                }
            }
        } else {
            None
        };
        let permit = match core.admit(&parsed) {
            Admit::Now(permit) => permit,
            Admit::Reject(error) => {
                return self
                    .refuse(Refusal { error, model }, holding, body_ended)
                    .await;
            }
            Admit::Later(waiting) => {
                // Queued by flow control: the Gateway waits on this stream meanwhile (up to
                // its message timeout); a Gateway that gives up ends the wait.
                let mut cut = shared.cut.clone();
                let waited = tokio::select! {
                    w = waiting => w,
                    m = inbound.message() => {
                        return match m {
                            Ok(Some(m)) => Err(Status::invalid_argument(format!(
                                "unexpected {} while the request waits for admission",
                                m.request.as_ref().map_or("message", kind)
                            ))),
                            _ => Ok(Flow::End),
                        };
                    }
                    _ = cut_off(&mut cut) => {
                        return Err(Status::unavailable("the router is shutting down"));
                    }
                };
                match waited {
                    Ok(permit) => permit,
                    Err(error) => {
                        return self
                            .refuse(Refusal { error, model }, holding, body_ended)
                            .await;
                    }
                }
            }
        };
        let picked = match core.choose(parsed, permit, &holding.head, holding.subset.as_deref()) {
            Ok(p) => p,
            Err(refusal) => return self.refuse(refusal, holding, body_ended).await,
        };
        let mut remove = self.untrusted_removals();
        // The client's key stays with the router, as the proxy's admission stage keeps it.
        if strip_authorization {
            remove.push(http::header::AUTHORIZATION);
        }
        let mutation = RequestMutation {
            destination: Some(picked.endpoint.clone()),
            remove,
            body: cleaned,
        };
        self.serve(picked);
        self.answer(mutation, holding, body_ended).await?;
        Ok(Flow::Go)
    }

    /// The request goes on with `mutation`: the headers' answer, then (full duplex) the body
    /// handed back; or the buffered body's answer.
    async fn answer(
        &mut self,
        mutation: RequestMutation,
        holding: Box<Holding>,
        body_ended: bool,
    ) -> Result<(), Status> {
        self.went_on();
        let mode = self
            .modes
            .map_or(RequestBodyMode::FullDuplex, |m| m.request);
        match (mode, holding.has_body) {
            (RequestBodyMode::Buffered, true) => self.send(mutation.on_body()).await?,
            // The headers said the request has no body: theirs is the only answer owed.
            (_, false) => self.send(mutation.on_headers()).await?,
            (RequestBodyMode::FullDuplex, true) => {
                self.send(mutation.on_headers()).await?;
                let body = mutation.body.as_deref().unwrap_or(&holding.body);
                for chunk in wire::streamed_all(Direction::Request, body, body_ended) {
                    self.send(chunk).await?;
                }
            }
        }
        // The body's bytes and their room in the budget go now.
        drop(holding);
        Ok(())
    }

    /// A request the picker will not route: answered with the proxy's error when the failure
    /// mode is `closed`, and always for a verdict rather than a failure (flow control's 429, a
    /// request that proves no tenant: failing open must not let it past the API keys) or a body
    /// that may not go on as it is ([`Self::vetted`]); otherwise it goes on without a
    /// destination.
    async fn refuse(
        &mut self,
        refusal: Refusal,
        holding: Box<Holding>,
        body_ended: bool,
    ) -> Result<Flow, Status> {
        use http::StatusCode;
        let mode = self.table.config.failure_mode_for(&refusal.model);
        let verdict = [
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::UNAUTHORIZED,
            StatusCode::FORBIDDEN,
        ]
        .contains(&refusal.error.status);
        let open = (mode == FailureMode::Open && !verdict)
            .then(|| self.vetted(&holding))
            .flatten();
        let Some(body) = open else {
            self.shared.core.count_refusal(&refusal);
            self.send(wire::immediate(&refusal.error)).await?;
            // Envoy ignores the stream after a local reply.
            return Ok(Flow::End);
        };
        tracing::debug!("endpoint picker (fail open): {}", refusal.error);
        let mutation = RequestMutation {
            destination: None,
            remove: self.untrusted_removals(),
            body,
        };
        self.answer(mutation, holding, body_ended).await?;
        Ok(Flow::Go)
    }

    /// Whether the Gateway is a trusted source (`tenants.trusted_sources`): only then do a
    /// client's prefill/decode header and fields reach an engine, as in the proxy.
    fn trusts_gateway(&self) -> bool {
        self.table.tenants.trusts(self.peer.map(|p| p.ip()))
    }

    /// Request headers an engine must not see from this Gateway's clients.
    fn untrusted_removals(&self) -> Vec<http::HeaderName> {
        if self.trusts_gateway() {
            Vec::new()
        } else {
            vec![crate::pd_wire::PREFILLER_HEADER]
        }
    }

    /// The body as it may go on without the picker's choice, which it still reaches an engine
    /// through: `Some(None)` as it is, `Some(Some(body))` less an untrusted client's P/D fields,
    /// `None` when it cannot be vetted (not read whole, or not a JSON object).
    fn vetted(&self, holding: &Holding) -> Option<Option<Bytes>> {
        if self.trusts_gateway() || !holding.has_body {
            return Some(None);
        }
        if !holding.whole {
            return None;
        }
        crate::request::without_pd_fields(&holding.body).ok()
    }

    fn went_on(&mut self) {
        self.phase = Phase::Passing;
        self.answered_at = Some(Instant::now());
    }

    /// A body chunk after the pick, handed back (full duplex) or acknowledged.
    async fn pass(
        &self,
        direction: Direction,
        full_duplex: bool,
        body: &HttpBody,
    ) -> Result<(), Status> {
        let answer = if full_duplex {
            wire::streamed(direction, &body.body, body.end_of_stream)
        } else {
            wire::body_continue(direction)
        };
        self.send(answer).await
    }

    fn serve(&mut self, picked: Picked) {
        let Picked {
            routed,
            permit,
            table,
            model,
            stream,
            ..
        } = picked;
        let config = &table.config;
        let mut response_headers = Vec::new();
        if config.response_headers.replica {
            response_headers.push((
                crate::api::forward::REPLICA_HEADER.as_str().to_owned(),
                routed.candidate.replica.name.clone().into_bytes(),
            ));
        }
        if let Some((token, _)) = &routed.session {
            response_headers.push((
                config.sessions.token_header.clone(),
                token.clone().into_bytes(),
            ));
        }
        if let Some(v) = routed.explanation.as_ref().and_then(|e| e.header_value()) {
            response_headers.push((
                crate::decisions::EXPLAIN_HEADER.as_str().to_owned(),
                v.as_bytes().to_vec(),
            ));
        }
        let usage = permit
            .wants_usage()
            .then(|| Usage::new(permit.clone(), stream));
        let now = Instant::now();
        let allowance = config
            .health
            .overdue_after(routed.decision.predicted_ttft_s);
        let served = Served::new(
            routed,
            ServedAs {
                permit,
                table,
                model,
                metrics: self.shared.core.parts.metrics.clone(),
                stream,
                arrived: now,
                sent: now,
                prefilled_elsewhere: false,
                // No retry stage judged a 502 or 503 on its head: the end does.
                settles_unavailable: true,
            },
        );
        self.following = Some(Following {
            served,
            stream,
            allowance,
            response_headers,
            usage,
        });
    }

    /// The response head of a picked request: the headers to add to it.
    fn on_response_head(&mut self, status: Option<u16>) -> Vec<(String, Vec<u8>)> {
        let Some(f) = &mut self.following else {
            return Vec::new();
        };
        if let Some(status) = status {
            // A stream's first byte is what shows the engine working: owed from its head on
            // (the Gateway sent the request a moment before).
            let owed = f
                .allowance
                .filter(|_| f.stream && status < 300)
                .map(|a| FirstByteOwed::new(f.served.replica().clone(), a, Instant::now()));
            f.served.on_head(status, owed);
        }
        std::mem::take(&mut f.response_headers)
    }

    fn on_response_chunk(&mut self, chunk: &[u8]) {
        let Some(f) = &mut self.following else { return };
        f.served.first_byte(Instant::now());
        if let Some(usage) = &mut f.usage {
            usage.feed(chunk);
        }
        f.served.peek(chunk);
    }

    /// The response has ended: its outcome counts as the proxy's does, and the replica is
    /// released.
    fn settle(&mut self) {
        if let Some(f) = self.following.take() {
            f.served.settle(Outcome::Ended);
        }
    }
}

/// Until open streams must end. (The watch's guard goes before anything else is awaited.)
async fn cut_off(cut: &mut watch::Receiver<bool>) {
    let _ = cut.wait_for(|c| *c).await;
}

fn kind(m: &Message) -> &'static str {
    match m {
        Message::RequestHeaders(_) => "request_headers",
        Message::ResponseHeaders(_) => "response_headers",
        Message::RequestBody(_) => "request_body",
        Message::ResponseBody(_) => "response_body",
        Message::RequestTrailers(_) => "request_trailers",
        Message::ResponseTrailers(_) => "response_trailers",
    }
}

/// Output tokens of the response for flow control, counted by the proxy's own scanner
/// ([`UsageScan`]) as chunks pass: it reads a body, so each chunk is put where it reads.
struct Usage {
    slot: Arc<parking_lot::Mutex<Option<Bytes>>>,
    scan: UsageScan<Slot, Box<dyn Fn(u64) + Send + Sync>>,
}

impl Usage {
    fn new(permit: Permit, stream: bool) -> Self {
        let slot = Arc::new(parking_lot::Mutex::new(None));
        let report: Box<dyn Fn(u64) + Send + Sync> = Box::new(move |n| permit.set_output(n));
        Self {
            scan: UsageScan::new(Slot(slot.clone()), Some(report), stream),
            slot,
        }
    }

    fn feed(&mut self, chunk: &[u8]) {
        *self.slot.lock() = Some(Bytes::copy_from_slice(chunk));
        // The slot is full, so the frame is ready at once.
        let _ = self.scan.frame().now_or_never();
    }
}

/// A body whose next frame is whatever was last put in the slot.
struct Slot(Arc<parking_lot::Mutex<Option<Bytes>>>);

impl http_body::Body for Slot {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        match self.0.lock().take() {
            Some(b) => std::task::Poll::Ready(Some(Ok(http_body::Frame::data(b)))),
            // Never polled empty: `feed` fills it first.
            None => std::task::Poll::Pending,
        }
    }
}
