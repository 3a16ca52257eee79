//! A request's features from its body and headers, for a model the table serves: the pure part
//! of the parse stage, shared by the proxy's parse stage, the tokenize pool (which runs its slow
//! part on a blocking thread) and the endpoint picker. From here on a failure's metric carries
//! the model label: the model when the table serves it, `(unknown)` otherwise, never the raw
//! client string (series stay bounded).

use super::Rejection;
use crate::errors::ApiError;
use crate::request::{Endpoint, RequestFeatures};
use crate::state::table::Table;

/// The model label for a request that failed after parsing.
pub(crate) fn model_label(table: &Table, model: &str) -> String {
    if table.serves(model) {
        model.to_owned()
    } else {
        "(unknown)".to_owned()
    }
}

/// The request's features from its body and headers, for a model the table serves: the parse
/// stage of the proxy and of the endpoint picker alike, tokenizing inline (see
/// [`super::tokenize`] for the pool). A refusal carries its metric label.
pub(crate) fn features(
    endpoint: Endpoint,
    body: &[u8],
    headers: &http::HeaderMap,
    table: &Table,
) -> Result<RequestFeatures, Rejection> {
    finish_features(parse_body(endpoint, body, table, true)?, headers, table)
}

/// The body's routing fields; its prompt tokenized when `tokenize` and its model is routed from
/// KV events (within the model's `max_prompt_bytes`). The part that may take milliseconds.
pub(crate) fn parse_body(
    endpoint: Endpoint,
    body: &[u8],
    table: &Table,
    tokenize: bool,
) -> Result<RequestFeatures, Rejection> {
    crate::request::parse(endpoint, body, &table.hasher, |model| {
        let p = table.precise(model).filter(|_| tokenize)?;
        (body.len() <= p.max_prompt_bytes).then(|| p.tokens.clone())
    })
    .map_err(Rejection::before_parse)
}

/// The rest of [`features`], after the body is parsed: the prompt's scope, the session, and the
/// refusal of models no pool serves.
pub(crate) fn finish_features(
    mut features: RequestFeatures,
    headers: &http::HeaderMap,
    table: &Table,
) -> Result<RequestFeatures, Rejection> {
    // The engine caches an adapter's or a salted prompt's blocks apart: so does the approximate
    // index (the precise keys fold the same in `choose`, with the adapters events name too).
    let adapter = table
        .is_adapter(&features.model)
        .then_some(features.model.as_str());
    let extras = crate::choice::BlockExtras::new(adapter, features.cache_salt.as_deref());
    features.prompt.scope(extras.scope());
    features.session = session_of(headers, &table.config.sessions, &features);
    if !table.serves(&features.model) {
        let error = ApiError::unknown_model(&features.model);
        let model = model_label(table, &features.model);
        return Err(Rejection { error, model });
    }
    Ok(features)
}

/// What the request says about its session: the first configured session header present, else
/// (when configured) its `user` field; and the token it echoed.
fn session_of(
    headers: &http::HeaderMap,
    config: &crate::config::SessionsConfig,
    features: &RequestFeatures,
) -> crate::sessions::SessionRef {
    if !config.enabled {
        return Default::default();
    }
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty() && v.len() <= 256)
            .map(str::to_owned)
    };
    let id = config.headers.iter().find_map(|h| text(h)).or_else(|| {
        config
            .user_field
            .then(|| features.user.clone())
            .flatten()
            .filter(|u| !u.is_empty() && u.len() <= 256)
    });
    crate::sessions::SessionRef {
        id,
        token: text(&config.token_header),
        client: None,
    }
}
