//! Parse the routing fields of a request ([`crate::request::parse`]) and refuse models no pool
//! serves. From here on a failure's metric carries the model label: the model when the table
//! serves it, `(unknown)` otherwise, never the raw client string (series stay bounded).
//!
//! A client may not steer a prefill/decode split: unless it is a trusted source
//! (`tenants.trusted_sources`), its `x-prefiller-host-port` header and the body fields that name
//! a prefill server or a KV transfer ([`crate::request::PD_FIELDS`]) are removed here, so that
//! they reach an engine only through a split the router made (which sets its own).

use super::features::{features, model_label};
use super::tokenize::TokenizePool;
use super::{Parsed, Read, Rejection, StageFuture};
use crate::errors::{ApiError, RespBody};
use crate::request::RequestFeatures;
use futures_util::future::Either;
use http::Response;
use std::future::{ready, Future, Ready};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::{Layer, Service};

#[derive(Debug, Clone)]
pub struct ParseLayer {
    pool: Arc<TokenizePool>,
}

impl ParseLayer {
    pub fn new(pool: Arc<TokenizePool>) -> Self {
        Self { pool }
    }
}

impl<S> Layer<S> for ParseLayer {
    type Service = Parse<S>;
    fn layer(&self, inner: S) -> Parse<S> {
        Parse {
            inner,
            pool: self.pool.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Parse<S> {
    inner: S,
    pool: Arc<TokenizePool>,
}

impl<S> Service<Read> for Parse<S>
where
    S: Service<Parsed, Response = Response<RespBody>, Error = ApiError> + Clone + Send + 'static,
    S::Future: Unpin + Send,
{
    type Response = Response<RespBody>;
    type Error = Rejection;
    /// Inline: the next stage's future as it is, or the refusal. Tokenized on the pool: one
    /// more allocation, only for models routed from KV events.
    type Future = Either<
        Labelled<S::Future>,
        Either<
            Ready<Result<Response<RespBody>, Rejection>>,
            StageFuture<Response<RespBody>, Rejection>,
        >,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Rejection>> {
        self.inner.poll_ready(cx).map_err(Rejection::before_parse)
    }

    fn call(&mut self, read: Read) -> Self::Future {
        if read.ctx.table.tokenizes() {
            // The service made ready is the one that must be called.
            let clone = self.inner.clone();
            let mut inner = std::mem::replace(&mut self.inner, clone);
            let pool = self.pool.clone();
            return Either::Right(Either::Right(Box::pin(async move {
                let ctx = &read.ctx;
                let features = pool
                    .features(
                        ctx.endpoint,
                        read.body.clone(),
                        &read.head.headers,
                        &ctx.table,
                    )
                    .await?;
                let parsed = parsed(read, features)?;
                let model = parsed.features.model.clone();
                Labelled {
                    inner: inner.call(parsed),
                    model,
                }
                .await
            })));
        }
        let parsed = features(
            read.ctx.endpoint,
            &read.body,
            &read.head.headers,
            &read.ctx.table,
        )
        .and_then(|features| parsed(read, features));
        match parsed {
            Ok(parsed) => {
                let model = parsed.features.model.clone();
                Either::Left(Labelled {
                    inner: self.inner.call(parsed),
                    model,
                })
            }
            Err(rejection) => Either::Right(Either::Left(ready(Err(rejection)))),
        }
    }
}

/// The request with its features, less what a client may not send: its session is counted
/// against its own share, and unless it is a trusted source its prefill/decode steering goes.
fn parsed(mut read: Read, mut features: RequestFeatures) -> Result<Parsed, Rejection> {
    let peer = crate::tenants::PeerAddr::ip_of(&read.head.extensions);
    if features.session.id.is_some() {
        features.session.client = Some(session_client(&read.head.extensions, peer));
    }
    if !read.ctx.table.tenants.trusts(peer) {
        read.head.headers.remove(crate::pd_wire::PREFILLER_HEADER);
        if features.pd_fields {
            match crate::request::without_pd_fields(&read.body) {
                Ok(Some(body)) => read.body = body,
                Ok(None) => {}
                Err(_) => {
                    let error = ApiError::not_reencoded();
                    let model = model_label(&read.ctx.table, &features.model);
                    return Err(Rejection { error, model });
                }
            }
        }
    }
    Ok(Parsed { read, features })
}

/// Whose share of the session map a new session id counts against: the tenant the request
/// proved (an API key, or a tenant header from a trusted source), else the address it came from.
fn session_client(
    extensions: &http::Extensions,
    peer: Option<std::net::IpAddr>,
) -> std::sync::Arc<str> {
    use crate::tenants::{Identity, Via};
    match extensions.get::<Identity>() {
        Some(identity) if identity.via != Via::Default => {
            format!("tenant:{}", identity.tenant.name).into()
        }
        _ => peer.map_or_else(|| "unknown".into(), |ip| format!("ip:{ip}").into()),
    }
}

/// The rest of the stack's answer, its failure labelled with the (served) model.
pub struct Labelled<F> {
    inner: F,
    model: String,
}

impl<F> Future for Labelled<F>
where
    F: Future<Output = Result<Response<RespBody>, ApiError>> + Unpin,
{
    type Output = Result<Response<RespBody>, Rejection>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.inner)
            .poll(cx)
            .map_err(|error| Rejection {
                error,
                model: std::mem::take(&mut self.model),
            })
    }
}
