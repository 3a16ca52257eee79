//! The prefill/decode layer: after the decode replica is chosen, decide whether the prompt's
//! prefill runs on a `prefill` pool first, and run it.
//!
//! A request is split when its model has prefill pools and the part of its prompt that the
//! chosen decode replica does not hold (by the prefix index) is at least `pd.threshold_tokens`;
//! otherwise the decode replica serves all of it, as without P/D. The prefill replica is chosen
//! by the same scheduler among the prefill candidates (prefix and load: its cache is where the
//! prompt's blocks live), the decode replica was chosen above by prefix, load and KV use. Both
//! are named in the response (`x-warmpath-replica`, `x-warmpath-prefill-replica`).
//!
//! The connectors ([`nixl`], [`sglang`], or a P/D sidecar in the decode pods that gets the
//! prefill replica in `x-prefiller-host-port`) say what goes over the wire. A prefill that fails
//! before computing anything (refused connection, 502/503/504) is tried on another prefill
//! replica, up to `pd.prefill_attempts`; after that, or after any other failure, the decode
//! replica prefills the prompt itself (`on_prefill_failure: decode`) or the client gets a 502
//! (`fail`). Nothing waits out an engine timeout: the prefill answer is bounded by the router's
//! header and idle timeouts. A client that goes away drops this future, and with it both legs.

use super::forward::{send, UpstreamError};
use super::{AttemptError, Chosen, StageFuture};
use crate::choice::{Choice, Chooser, Routed};
use crate::config::{Connector, PrefillFailure};
use crate::errors::{ApiError, RespBody};
use crate::metrics::Metrics;
use crate::pd_wire::{nixl, prefill_headers, read_prefill_answer, sglang, AnswerError};
use crate::state::replica::PrefillGuard;
use crate::state::table::{Candidate, Table};
use crate::upstream::PooledBody;
use bytes::Bytes;
use futures_util::future::Either;
use http::header::{HeaderName, HeaderValue};
use http::Response;
use serde_json::{Map, Value};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;
use tower::{Layer, Service};
use warmpath_routing::index::PrefixIndex;
use warmpath_routing::ReplicaId;

pub const PREFILL_REPLICA_HEADER: HeaderName =
    HeaderName::from_static("x-warmpath-prefill-replica");

#[derive(Clone)]
pub struct PdLayer {
    choose: Arc<Chooser>,
    metrics: Arc<Metrics>,
}

impl PdLayer {
    /// `choose`: the router's chooser (index, tie-break seeds), shared so that the prefill
    /// replica is chosen and recorded exactly as the decode replica was.
    pub(super) fn new(choose: Arc<Chooser>, metrics: Arc<Metrics>) -> Self {
        Self { choose, metrics }
    }
}

impl<S> Layer<S> for PdLayer {
    type Service = Pd<S>;
    fn layer(&self, inner: S) -> Pd<S> {
        Pd {
            choose: self.choose.clone(),
            metrics: self.metrics.clone(),
            inner,
        }
    }
}

#[derive(Clone)]
pub struct Pd<S> {
    choose: Arc<Chooser>,
    metrics: Arc<Metrics>,
    inner: S,
}

impl<S> Service<Chosen> for Pd<S>
where
    S: Service<Chosen, Response = Response<RespBody>, Error = AttemptError>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<RespBody>;
    type Error = AttemptError;
    type Future = Either<S::Future, StageFuture<Response<RespBody>, AttemptError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), AttemptError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, chosen: Chosen) -> Self::Future {
        let table = &chosen.request.ctx().table;
        let Some(prefill) = table
            .prefill_candidates(&chosen.request.features().model)
            .cloned()
        else {
            return Either::Left(self.inner.call(chosen));
        };
        if chosen.routed.uncached_tokens < table.config.pd.threshold_tokens {
            self.metrics.pd.decided("local");
            return Either::Left(self.inner.call(chosen));
        }
        // The clone that was made ready goes into the future; a fresh clone stays.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let split = Split {
            choose: self.choose.clone(),
            metrics: self.metrics.clone(),
            prefill,
        };
        Either::Right(Box::pin(split.run(inner, chosen)))
    }
}

/// Why a prefill leg failed, and whether another prefill replica may be tried.
struct LegFailure {
    kind: &'static str,
    /// Nothing was computed (refused, or 502/503/504): another replica may be tried.
    retry: bool,
    detail: String,
}

impl LegFailure {
    fn new(kind: &'static str, retry: bool, detail: impl Into<String>) -> Self {
        Self {
            kind,
            retry,
            detail: detail.into(),
        }
    }
}

struct Split {
    choose: Arc<Chooser>,
    metrics: Arc<Metrics>,
    prefill: Arc<[Candidate]>,
}

impl Split {
    async fn run<S>(self, inner: S, chosen: Chosen) -> Result<Response<RespBody>, AttemptError>
    where
        S: Service<Chosen, Response = Response<RespBody>, Error = AttemptError>
            + Clone
            + Send
            + 'static,
        S::Future: Send + 'static,
    {
        let request = chosen.request.clone();
        let table = request.ctx().table.clone();
        let pd = table.config.pd;
        // Parse accepted the body, so it is a JSON object; this is the split's one re-parse.
        let original: Map<String, Value> = match serde_json::from_slice(&request.parsed.read.body) {
            Ok(Value::Object(m)) => m,
            _ => return call(inner, chosen).await,
        };
        let decode = chosen.routed.candidate.clone();
        let mut chosen = Some(chosen);
        let mut exclude: Vec<ReplicaId> = Vec::new();
        let mut last = LegFailure::new("no_prefill_replica", false, "no prefill replica is ready");
        for _ in 0..pd.prefill_attempts {
            let leg = Choice {
                exclude: &exclude,
                // The prefill leg is where the prompt's prefill runs.
                prefill_rule: request.permit.prefill_rule(),
                seed: self.choose.next_seed(),
                ..Choice::among(
                    self.choose.indexes(),
                    &table,
                    &self.prefill,
                    request.features(),
                )
            };
            let leg = match leg.choose() {
                Ok(leg) => leg,
                Err(_) => break,
            };
            let this = match chosen.take() {
                Some(c) => c,
                None => self.reroute(&table, &decode, &request)?,
            };
            // The decode replica will not compute this prompt: its pending-prefill count must
            // not make it look busier to the requests that follow.
            let mut this = this;
            this.routed.prefill = PrefillGuard::new(this.routed.candidate.replica.clone(), 0);
            let outcome = match pd.connector {
                Connector::Nixl => self.nixl(inner.clone(), this, leg, &original).await,
                Connector::Sglang => self.sglang(inner.clone(), this, leg, &original).await,
                Connector::Sidecar => Ok(self.sidecar(inner.clone(), this, leg).await),
            };
            match outcome {
                Ok(resp) => {
                    self.metrics.pd.decided("split");
                    return resp;
                }
                Err((failure, back, prefill_id)) => {
                    self.metrics.pd.failed(failure.kind);
                    tracing::warn!(kind = failure.kind, detail = %failure.detail, "P/D prefill leg failed");
                    chosen = back;
                    let retry = failure.retry;
                    last = failure;
                    if !retry {
                        break;
                    }
                    exclude.push(prefill_id);
                }
            }
        }
        if last.kind == "no_prefill_replica" {
            self.metrics.pd.failed(last.kind);
        }
        match pd.on_prefill_failure {
            PrefillFailure::Decode => {
                self.metrics.pd.decided("fallback_decode");
                let this = match chosen {
                    Some(mut c) => {
                        // Back to prefilling here: count it again.
                        c.routed.prefill = PrefillGuard::counted(
                            c.routed.candidate.replica.clone(),
                            u64::from(c.routed.uncached_tokens),
                            table.config.scheduling.placement.drain_pending_prefill,
                        );
                        c
                    }
                    None => self.reroute(&table, &decode, &request)?,
                };
                call(inner, this).await
            }
            PrefillFailure::Fail => {
                self.metrics.pd.decided("failed");
                Err(AttemptError::Failed(ApiError::upstream_failed(
                    "(prefill)",
                    format!("the prefill of this split request failed: {}", last.detail),
                )))
            }
        }
    }

    /// The decode replica bound again (a fresh `Routed`, its counters up), after a leg that
    /// consumed the first binding failed.
    fn reroute(
        &self,
        table: &Table,
        decode: &Candidate,
        request: &Arc<super::Admitted>,
    ) -> Result<Chosen, AttemptError> {
        let routed = Choice {
            seed: self.choose.next_seed(),
            ..Choice::among(
                self.choose.indexes(),
                table,
                std::slice::from_ref(decode),
                request.features(),
            )
        }
        .choose()
        .map_err(AttemptError::NoReplica)?;
        Ok(Chosen {
            request: request.clone(),
            routed,
            body: None,
            prefill_replica: None,
            prefiller: None,
        })
    }

    /// NIXL: the prefill first, then the decode with its answer's `kv_transfer_params`.
    async fn nixl<S>(
        &self,
        inner: S,
        mut chosen: Chosen,
        leg: Routed,
        original: &Map<String, Value>,
    ) -> Result<Result<Response<RespBody>, AttemptError>, (LegFailure, Option<Chosen>, ReplicaId)>
    where
        S: Service<Chosen, Response = Response<RespBody>, Error = AttemptError>,
    {
        let prefill_id = leg.candidate.replica.id;
        let body = Bytes::from(nixl::prefill_body(original));
        let answer = match self.prefill_leg(&chosen, &leg, body).await {
            Ok(a) => a,
            Err(f) => return Err((f, Some(chosen), prefill_id)),
        };
        let params = match nixl::kv_params(&answer) {
            Ok(p) => p,
            Err(e) => {
                return Err((
                    LegFailure::new("no_kv_transfer_params", false, e.to_string()),
                    Some(chosen),
                    prefill_id,
                ))
            }
        };
        chosen.body = Some(Bytes::from(nixl::decode_body(original, params)));
        chosen.prefill_replica = Some(leg.candidate.replica.name.clone());
        // The prefill replica's counters go down now: its part is done.
        drop(leg);
        Ok(self.decode_leg(inner, chosen).await)
    }

    /// Sidecar: the decode replica's sidecar runs both legs; the router names the prefill
    /// replica. Its failures are the sidecar's to handle (it falls back or answers 502).
    async fn sidecar<S>(
        &self,
        inner: S,
        mut chosen: Chosen,
        leg: Routed,
    ) -> Result<Response<RespBody>, AttemptError>
    where
        S: Service<Chosen, Response = Response<RespBody>, Error = AttemptError>,
    {
        let prefill = &leg.candidate.replica;
        chosen.prefiller = Some(
            HeaderValue::from_str(prefill.authority.as_str())
                .expect("a URI authority is a valid header value"),
        );
        chosen.prefill_replica = Some(prefill.name.clone());
        // The prefill replica's counters stay up while the decode leg (which includes the
        // sidecar's prefill) runs to its first byte.
        let resp = self.decode_leg(inner, chosen).await;
        drop(leg);
        resp
    }

    /// SGLang: one body to both at once. The decode's answer is the client's; a prefill that
    /// fails before the decode answers cancels the decode (it would wait for KV that never
    /// comes). Once the decode has answered, the prefill leg finishes on its own.
    async fn sglang<S>(
        &self,
        inner: S,
        mut chosen: Chosen,
        leg: Routed,
        original: &Map<String, Value>,
    ) -> Result<Result<Response<RespBody>, AttemptError>, (LegFailure, Option<Chosen>, ReplicaId)>
    where
        S: Service<Chosen, Response = Response<RespBody>, Error = AttemptError>,
        S::Future: Send + 'static,
    {
        let prefill = leg.candidate.replica.clone();
        let prefill_id = prefill.id;
        let table = &chosen.request.ctx().table;
        let port = table.bootstrap_port(&prefill.name);
        let body = Bytes::from(sglang::body(
            original,
            prefill.authority.host(),
            port,
            sglang::room(),
        ));
        chosen.body = Some(body.clone());
        chosen.prefill_replica = Some(prefill.name.clone());
        let prefill_leg = {
            let head = prefill_head(&chosen);
            let config = table.config.clone();
            let index = self.choose.indexes().approx.clone();
            let metrics = self.metrics.clone();
            async move {
                let result = run_leg(&prefill, head, body, &config, &index, &metrics).await;
                drop(leg);
                result
            }
        };
        let decode = self.decode_leg(inner, chosen);
        tokio::pin!(decode);
        let mut prefill_leg = Box::pin(prefill_leg);
        tokio::select! {
            resp = &mut decode => {
                // The prefill leg finishes on its own; its failure no longer matters to the
                // client, who has the decode's answer.
                let metrics = self.metrics.clone();
                tokio::spawn(async move {
                    if let Err(f) = prefill_leg.await {
                        metrics.pd.failed(f.kind);
                    }
                });
                Ok(resp)
            }
            result = &mut prefill_leg => match result {
                // The prefill is done; the decode now has its KV and answers.
                Ok(_) => Ok(decode.await),
                Err(f) => Err((f, None, prefill_id)),
            },
        }
    }

    /// The decode leg of a split, its time to the response head measured.
    async fn decode_leg<S>(
        &self,
        inner: S,
        chosen: Chosen,
    ) -> Result<Response<RespBody>, AttemptError>
    where
        S: Service<Chosen, Response = Response<RespBody>, Error = AttemptError>,
    {
        let started = Instant::now();
        let resp = call(inner, chosen).await;
        self.metrics
            .pd
            .decode_first_byte
            .observe(started.elapsed().as_secs_f64());
        resp
    }

    /// Send a prefill leg and read its whole (one-token) answer.
    async fn prefill_leg(
        &self,
        chosen: &Chosen,
        leg: &Routed,
        body: Bytes,
    ) -> Result<Bytes, LegFailure> {
        run_leg(
            &leg.candidate.replica,
            prefill_head(chosen),
            body,
            &chosen.request.ctx().table.config,
            &self.choose.indexes().approx,
            &self.metrics,
        )
        .await
    }
}

/// Send a prefill leg and read its whole (one-token) answer, within `pd.prefill_timeout_ms`
/// (a hung prefill engine must not hold the request until the engine's own timeout).
async fn run_leg(
    replica: &crate::state::replica::ReplicaState,
    head: http::request::Parts,
    body: Bytes,
    config: &crate::config::Config,
    index: &crate::state::index::SharedIndex,
    metrics: &Metrics,
) -> Result<Bytes, LegFailure> {
    let started = Instant::now();
    let leg = async {
        match send(replica, &head, body, &config.timeouts).await {
            Ok(resp) => read_answer(resp, config.timeouts.idle()).await,
            Err(e) => Err(leg_error(e, replica, &config.health, index)),
        }
    };
    let limit = std::time::Duration::from_millis(config.pd.prefill_timeout_ms);
    let result = match tokio::time::timeout(limit, leg).await {
        Ok(r) => r,
        Err(_) => Err(LegFailure::new(
            "timeout",
            false,
            format!("{}: no prefill answer within {limit:?}", replica.name),
        )),
    };
    metrics
        .pd
        .prefill_duration
        .observe(started.elapsed().as_secs_f64());
    if result.is_ok() {
        replica.health.on_success();
    }
    result
}

/// Forward through the layers below, naming the prefill replica in the answer of a split.
async fn call<S>(mut inner: S, chosen: Chosen) -> Result<Response<RespBody>, AttemptError>
where
    S: Service<Chosen, Response = Response<RespBody>, Error = AttemptError>,
{
    let prefill = chosen.prefill_replica.clone();
    let name_it = chosen.request.ctx().table.config.response_headers.replica;
    let mut resp = inner.call(chosen).await?;
    if let (Some(name), true) = (prefill, name_it) {
        if let Ok(v) = HeaderValue::from_str(&name) {
            resp.headers_mut().insert(PREFILL_REPLICA_HEADER, v);
        }
    }
    Ok(resp)
}

/// The prefill leg's request head: the client's, with [`prefill_headers`].
fn prefill_head(chosen: &Chosen) -> http::request::Parts {
    let mut head = chosen.request.parsed.read.head.clone();
    prefill_headers(&mut head.headers);
    head
}

/// A prefill replica's answer, whole, or why it cannot be used.
async fn read_answer(
    resp: Response<PooledBody>,
    idle: std::time::Duration,
) -> Result<Bytes, LegFailure> {
    read_prefill_answer(resp, idle).await.map_err(|e| {
        LegFailure::new(
            e.kind(),
            matches!(e, AnswerError::Unavailable(_)),
            format!("the prefill replica {e}"),
        )
    })
}

/// What a failed send says, and what it does to the prefill replica: a refused connection
/// ejects it and forgets its index entries, as for any replica.
fn leg_error(
    e: UpstreamError,
    replica: &crate::state::replica::ReplicaState,
    health: &crate::config::HealthConfig,
    index: &crate::state::index::SharedIndex,
) -> LegFailure {
    match e {
        UpstreamError::Connect(err) => {
            replica.health.on_connect_error(health, Instant::now());
            index.lock().remove_replica(replica.id);
            LegFailure::new("connect", true, format!("{}: {err}", replica.name))
        }
        UpstreamError::Timeout(d) | UpstreamError::Stalled(d) => LegFailure::new(
            "timeout",
            false,
            format!("{}: no answer within {d:?}", replica.name),
        ),
        UpstreamError::Other(err) => {
            LegFailure::new("other", false, format!("{}: {err}", replica.name))
        }
    }
}
