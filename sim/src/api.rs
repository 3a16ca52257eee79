//! The OpenAI API as vLLM 0.32 serves it: request parsing with vLLM's validation errors, and
//! response bodies with vLLM's field sets (compared against a real engine; see the README).

use http::StatusCode;
use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::tokens::ChatMessage;

/// The fingerprint vLLM puts in responses; ours says it is the simulator.
pub const SYSTEM_FINGERPRINT: &str = "vllm-0.32.0-warmpath-sim";

/// An error answered in vLLM's shape:
/// `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{status} {kind}: {message}")]
pub struct ApiError {
    pub status: StatusCode,
    pub kind: &'static str,
    pub message: String,
    pub param: Option<String>,
}

impl ApiError {
    /// A request vLLM's schema validation rejects (FastAPI answers with type "Bad Request").
    pub fn validation(param: &str, kind: &str, msg: &str) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            kind: "Bad Request",
            message: format!(
                "1 validation error:\n  {{'type': '{kind}', 'loc': '{param}', 'msg': '{msg}'}}"
            ),
            param: Some(param.to_owned()),
        }
    }

    /// A request the engine rejects after validation (type "BadRequestError"); like vLLM,
    /// the message ends with `(parameter=...)`.
    pub fn bad_request(param: Option<&str>, message: impl Into<String>) -> Self {
        let mut message = message.into();
        if let Some(p) = param {
            message.push_str(&format!(" (parameter={p})"));
        }
        ApiError {
            status: StatusCode::BAD_REQUEST,
            kind: "BadRequestError",
            message,
            param: param.map(str::to_owned),
        }
    }

    /// Like [`ApiError::bad_request`], naming the offending value too.
    pub fn bad_value(param: &str, value: impl std::fmt::Display, message: &str) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            kind: "BadRequestError",
            message: format!("{message} (parameter={param}, value={value})"),
            param: Some(param.to_owned()),
        }
    }

    pub fn model_not_found(model: &str, served: &str) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            kind: "NotFoundError",
            message: format!("The model `{model}` does not exist. Valid aliases: {served}."),
            param: Some("model".into()),
        }
    }

    pub fn internal(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            kind: "InternalServerError",
            message: message.into(),
            param: None,
        }
    }

    pub fn not_found_route(path: &str) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            kind: "NotFoundError",
            message: format!("no route for {path}"),
            param: None,
        }
    }

    /// The JSON body, fields in vLLM's order.
    pub fn to_bytes(&self) -> Vec<u8> {
        #[derive(Serialize)]
        struct Inner<'a> {
            message: &'a str,
            #[serde(rename = "type")]
            kind: &'a str,
            param: Option<&'a str>,
            code: u16,
        }
        #[derive(Serialize)]
        struct Outer<'a> {
            error: Inner<'a>,
        }
        serde_json::to_vec(&Outer {
            error: Inner {
                message: &self.message,
                kind: self.kind,
                param: self.param.as_deref(),
                code: self.status.as_u16(),
            },
        })
        .unwrap_or_default()
    }

    pub fn body(&self) -> Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.status.as_u16(),
        }})
    }
}

/// What the prompt is.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    Text(String),
    Tokens(Vec<u32>),
    Chat(Vec<ChatMessage>),
}

/// vLLM's `kv_transfer_params` (P/D disaggregation through a KV connector).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KvTransferParams {
    pub do_remote_decode: bool,
    pub do_remote_prefill: bool,
    pub remote_engine_id: Option<String>,
    pub remote_block_ids: Vec<u32>,
    pub remote_host: Option<String>,
    pub remote_port: Option<u16>,
}

impl KvTransferParams {
    fn parse(v: &Value) -> Result<Option<Self>, ApiError> {
        let m = match v {
            Value::Null => return Ok(None),
            Value::Object(m) => m,
            _ => {
                return Err(ApiError::validation(
                    "body.kv_transfer_params",
                    "dict_type",
                    "Input should be a valid dictionary",
                ))
            }
        };
        let flag = |k: &str| m.get(k).and_then(Value::as_bool).unwrap_or(false);
        let string = |k: &str| m.get(k).and_then(Value::as_str).map(str::to_owned);
        let ids = match m.get("remote_block_ids") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => a
                .iter()
                .map(|x| x.as_u64().and_then(|x| u32::try_from(x).ok()))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| {
                    ApiError::bad_request(
                        Some("kv_transfer_params"),
                        "kv_transfer_params.remote_block_ids must be a list of block ids",
                    )
                })?,
            Some(_) => {
                return Err(ApiError::bad_request(
                    Some("kv_transfer_params"),
                    "kv_transfer_params.remote_block_ids must be a list of block ids",
                ))
            }
        };
        let port = match m.get("remote_port") {
            None | Some(Value::Null) => None,
            Some(p) => Some(
                p.as_u64()
                    .and_then(|p| u16::try_from(p).ok())
                    .or_else(|| p.as_str().and_then(|s| s.parse().ok()))
                    .ok_or_else(|| {
                        ApiError::bad_request(
                            Some("kv_transfer_params"),
                            "kv_transfer_params.remote_port must be a port number",
                        )
                    })?,
            ),
        };
        Ok(Some(KvTransferParams {
            do_remote_decode: flag("do_remote_decode"),
            do_remote_prefill: flag("do_remote_prefill"),
            remote_engine_id: string("remote_engine_id"),
            remote_block_ids: ids,
            remote_host: string("remote_host"),
            remote_port: port,
        }))
    }

    pub fn to_json(&self) -> Value {
        json!({
            "do_remote_decode": self.do_remote_decode,
            "do_remote_prefill": self.do_remote_prefill,
            "remote_engine_id": self.remote_engine_id,
            "remote_block_ids": self.remote_block_ids,
            "remote_host": self.remote_host,
            "remote_port": self.remote_port,
        })
    }
}

/// A parsed `/v1/completions` or `/v1/chat/completions` request.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateRequest {
    pub model: Option<String>,
    pub input: Input,
    pub max_tokens: Option<usize>,
    pub stream: bool,
    pub include_usage: bool,
    pub seed: Option<u64>,
    pub kv_transfer_params: Option<KvTransferParams>,
}

fn object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(ApiError::validation(
            "body",
            "model_attributes_type",
            "Input should be a valid dictionary or object to extract fields from",
        )),
        Err(e) => Err(ApiError {
            message: format!(
                "1 validation error:\n  {{'type': 'json_invalid', 'loc': 'body.{}', 'msg': 'JSON decode error', 'ctx': {{'error': '{e}'}}}}",
                e.column()
            ),
            param: Some(format!("body.{}", e.column())),
            ..ApiError::validation("body", "json_invalid", "JSON decode error")
        }),
    }
}

fn opt_uint(m: &Map<String, Value>, key: &str) -> Result<Option<u64>, ApiError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| {
            ApiError::validation(
                &format!("body.{key}"),
                "int_parsing",
                "Input should be a valid integer",
            )
        }),
    }
}

fn opt_bool(m: &Map<String, Value>, key: &str) -> Result<bool, ApiError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(ApiError::validation(
            &format!("body.{key}"),
            "bool_parsing",
            "Input should be a valid boolean",
        )),
    }
}

fn parse_common(
    m: &Map<String, Value>,
    input: Input,
    chat: bool,
) -> Result<GenerateRequest, ApiError> {
    let model = match m.get("model") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            return Err(ApiError::validation(
                "body.model",
                "string_type",
                "Input should be a valid string",
            ))
        }
    };
    let mut max_tokens = opt_uint(m, "max_tokens")?;
    if chat {
        if let Some(v) = opt_uint(m, "max_completion_tokens")? {
            max_tokens = Some(v);
        }
    }
    if max_tokens == Some(0) {
        return Err(ApiError::bad_request(
            Some("max_tokens"),
            "max_tokens must be at least 1, got 0.",
        ));
    }
    let include_usage = match m.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(o)) => o
            .get("include_usage")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        Some(_) => {
            return Err(ApiError::validation(
                "body.stream_options",
                "model_type",
                "Input should be a valid dictionary",
            ))
        }
    };
    if let Some(n) = opt_uint(m, "n")? {
        if n != 1 {
            return Err(ApiError::bad_request(
                Some("n"),
                "the simulator serves n=1 only",
            ));
        }
    }
    Ok(GenerateRequest {
        model,
        input,
        max_tokens: max_tokens.map(|v| v as usize),
        stream: opt_bool(m, "stream")?,
        include_usage,
        seed: opt_uint(m, "seed")?,
        kv_transfer_params: KvTransferParams::parse(
            m.get("kv_transfer_params").unwrap_or(&Value::Null),
        )?,
    })
}

/// Parses a `/v1/completions` body.
pub fn parse_completion(body: &[u8]) -> Result<GenerateRequest, ApiError> {
    let m = object(body)?;
    let missing = || {
        ApiError::bad_request(
            Some("prompt"),
            "Either prompt or prompt_embeds must be provided and non-empty.",
        )
    };
    let input = match m.get("prompt") {
        None | Some(Value::Null) => return Err(missing()),
        Some(Value::String(s)) if s.is_empty() => return Err(missing()),
        Some(Value::String(s)) => Input::Text(s.clone()),
        Some(Value::Array(a)) if a.is_empty() => return Err(missing()),
        Some(Value::Array(a)) if a.len() == 1 && a[0].is_string() => {
            Input::Text(a[0].as_str().unwrap_or_default().to_owned())
        }
        Some(Value::Array(a)) if a.iter().all(Value::is_u64) => Input::Tokens(
            a.iter()
                .map(|t| t.as_u64().and_then(|t| u32::try_from(t).ok()))
                .collect::<Option<_>>()
                .ok_or_else(|| ApiError::bad_request(Some("prompt"), "token id out of range"))?,
        ),
        Some(Value::Array(_)) => {
            return Err(ApiError::bad_request(
                Some("prompt"),
                "the simulator serves one prompt per request (a string or a list of token ids)",
            ))
        }
        Some(_) => {
            return Err(ApiError::validation(
                "body.prompt",
                "string_type",
                "Input should be a valid string",
            ))
        }
    };
    parse_common(&m, input, false)
}

/// Flattens message content (a string, or a list of `{"type": "text", "text": ...}` parts).
fn content_text(v: &Value, i: usize) -> Result<String, ApiError> {
    match v {
        Value::Null => Ok(String::new()),
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => {
            let mut s = String::new();
            for p in parts {
                match p.get("text").and_then(Value::as_str) {
                    Some(t) => s.push_str(t),
                    None => {
                        return Err(ApiError::bad_request(
                            Some("messages"),
                            format!("messages[{i}].content: only text parts are supported"),
                        ))
                    }
                }
            }
            Ok(s)
        }
        _ => Err(ApiError::validation(
            &format!("body.messages.{i}.content"),
            "string_type",
            "Input should be a valid string",
        )),
    }
}

/// Parses a `/v1/chat/completions` body.
pub fn parse_chat(body: &[u8]) -> Result<GenerateRequest, ApiError> {
    let m = object(body)?;
    let messages = match m.get("messages") {
        Some(Value::Array(a)) => a,
        None => {
            return Err(ApiError::validation(
                "body.messages",
                "missing",
                "Field required",
            ))
        }
        Some(_) => {
            return Err(ApiError::validation(
                "body.messages",
                "list_type",
                "Input should be a valid list",
            ))
        }
    };
    let mut out = Vec::with_capacity(messages.len());
    for (i, msg) in messages.iter().enumerate() {
        let role = msg.get("role").and_then(Value::as_str).ok_or_else(|| {
            ApiError::validation(
                &format!("body.messages.{i}.role"),
                "missing",
                "Field required",
            )
        })?;
        out.push(ChatMessage {
            role: role.to_owned(),
            content: content_text(msg.get("content").unwrap_or(&Value::Null), i)?,
        });
    }
    if out.is_empty() {
        return Err(ApiError::bad_request(
            Some("messages"),
            "messages must not be empty",
        ));
    }
    parse_common(&m, Input::Chat(out), true)
}

/// A parsed `/tokenize` body: `{"prompt": ...}` or `{"messages": [...]}`.
pub fn parse_tokenize(body: &[u8]) -> Result<(Option<String>, Input), ApiError> {
    let m = object(body)?;
    let model = m.get("model").and_then(Value::as_str).map(str::to_owned);
    if m.contains_key("messages") {
        let r = parse_chat(body)?;
        return Ok((model, r.input));
    }
    match m.get("prompt") {
        Some(Value::String(s)) => Ok((model, Input::Text(s.clone()))),
        _ => Err(ApiError::validation(
            "body.prompt",
            "missing",
            "Field required",
        )),
    }
}

/// Fields every generation response shares.
pub struct Meta<'a> {
    pub id: &'a str,
    pub created: u64,
    pub model: &'a str,
    pub chat: bool,
}

/// JSON `null` in a field vLLM always sends.
type Null = Option<()>;

// The response types below serialize with vLLM's field order, so that a byte-level diff
// against a real engine's response shows only values.

#[derive(Debug, Clone, Serialize)]
pub struct PromptTokensDetails {
    pub cached_tokens: usize,
}

/// `usage` with `prompt_tokens_details.cached_tokens`, as vLLM reports it with
/// `--enable-prompt-tokens-details`.
#[derive(Debug, Clone, Serialize)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub total_tokens: usize,
    pub completion_tokens: usize,
    pub prompt_tokens_details: Option<PromptTokensDetails>,
    /// `null` in complete responses, absent in streamed usage chunks (as vLLM sends them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_tokens_details: Option<Null>,
}

pub fn usage(prompt: usize, completion: usize, cached: usize) -> Usage {
    Usage {
        prompt_tokens: prompt,
        total_tokens: prompt + completion,
        completion_tokens: completion,
        prompt_tokens_details: Some(PromptTokensDetails {
            cached_tokens: cached,
        }),
        completion_tokens_details: Some(None),
    }
}

#[derive(Serialize)]
struct CompletionChoice<'a> {
    index: u32,
    text: &'a str,
    logprobs: Null,
    finish_reason: &'a str,
    stop_reason: Null,
    token_ids: Null,
    prompt_logprobs: Null,
    prompt_token_ids: Null,
    routed_experts: Null,
}

#[derive(Serialize)]
struct Completion<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: [CompletionChoice<'a>; 1],
    service_tier: Null,
    system_fingerprint: &'static str,
    usage: Usage,
    kv_transfer_params: Option<Value>,
    ec_transfer_params: Null,
    metrics: Null,
}

#[derive(Serialize)]
struct ChatMessageOut<'a> {
    role: &'static str,
    content: &'a str,
    refusal: Null,
    annotations: Null,
    audio: Null,
    function_call: Null,
    reasoning: Null,
}

#[derive(Serialize)]
struct ChatChoice<'a> {
    index: u32,
    message: ChatMessageOut<'a>,
    logprobs: Null,
    finish_reason: &'a str,
    stop_reason: Null,
    token_ids: Null,
    routed_experts: Null,
}

#[derive(Serialize)]
struct ChatCompletion<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: [ChatChoice<'a>; 1],
    service_tier: Null,
    system_fingerprint: &'static str,
    usage: Usage,
    prompt_logprobs: Null,
    prompt_token_ids: Null,
    prompt_text: Null,
    kv_transfer_params: Option<Value>,
    ec_transfer_params: Null,
    metrics: Null,
}

/// A complete (non-streaming) response, serialized.
pub fn full_response(
    m: &Meta,
    text: &str,
    finish: &str,
    usage: Usage,
    kv: Option<Value>,
) -> Vec<u8> {
    let r = if m.chat {
        serde_json::to_vec(&ChatCompletion {
            id: m.id,
            object: "chat.completion",
            created: m.created,
            model: m.model,
            choices: [ChatChoice {
                index: 0,
                message: ChatMessageOut {
                    role: "assistant",
                    content: text,
                    refusal: None,
                    annotations: None,
                    audio: None,
                    function_call: None,
                    reasoning: None,
                },
                logprobs: None,
                finish_reason: finish,
                stop_reason: None,
                token_ids: None,
                routed_experts: None,
            }],
            service_tier: None,
            system_fingerprint: SYSTEM_FINGERPRINT,
            usage,
            prompt_logprobs: None,
            prompt_token_ids: None,
            prompt_text: None,
            kv_transfer_params: kv,
            ec_transfer_params: None,
            metrics: None,
        })
    } else {
        serde_json::to_vec(&Completion {
            id: m.id,
            object: "text_completion",
            created: m.created,
            model: m.model,
            choices: [CompletionChoice {
                index: 0,
                text,
                logprobs: None,
                finish_reason: finish,
                stop_reason: None,
                token_ids: None,
                prompt_logprobs: None,
                prompt_token_ids: None,
                routed_experts: None,
            }],
            service_tier: None,
            system_fingerprint: SYSTEM_FINGERPRINT,
            usage,
            kv_transfer_params: kv,
            ec_transfer_params: None,
            metrics: None,
        })
    };
    r.unwrap_or_default()
}

#[derive(Serialize)]
struct RoleDelta {
    role: &'static str,
    content: &'static str,
}

#[derive(Serialize)]
struct RoleChoice {
    index: u32,
    delta: RoleDelta,
    logprobs: Null,
    finish_reason: Null,
}

#[derive(Serialize)]
struct Chunk<'a, C> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: C,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Usage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_token_ids: Option<Null>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_text: Option<Null>,
    #[serde(skip_serializing_if = "Option::is_none")]
    system_fingerprint: Option<&'static str>,
}

impl<'a, C> Chunk<'a, C> {
    fn new(m: &Meta<'a>, choices: C) -> Self {
        Chunk {
            id: m.id,
            object: if m.chat {
                "chat.completion.chunk"
            } else {
                "text_completion"
            },
            created: m.created,
            model: m.model,
            choices,
            usage: None,
            prompt_token_ids: None,
            prompt_text: None,
            system_fingerprint: None,
        }
    }
}

#[derive(Serialize)]
struct ContentDelta<'a> {
    content: &'a str,
}

#[derive(Serialize)]
struct ChatTokenChoice<'a> {
    index: u32,
    delta: ContentDelta<'a>,
    logprobs: Null,
    finish_reason: Option<&'a str>,
    // Only the last chunk of a chat stream has it.
    #[serde(skip_serializing_if = "Option::is_none")]
    stop_reason: Option<Null>,
    token_ids: Null,
}

#[derive(Serialize)]
struct TextTokenChoice<'a> {
    index: u32,
    text: &'a str,
    logprobs: Null,
    finish_reason: Option<&'a str>,
    stop_reason: Null,
    prompt_token_ids: Null,
    token_ids: Null,
}

/// An SSE event carrying `v`.
pub fn sse<T: Serialize>(v: &T) -> bytes::Bytes {
    let mut b = Vec::with_capacity(256);
    b.extend_from_slice(b"data: ");
    let _ = serde_json::to_writer(&mut b, v);
    b.extend_from_slice(b"\n\n");
    bytes::Bytes::from(b)
}

/// The first chunk of a chat stream (the assistant role, empty content).
pub fn chat_role_chunk(m: &Meta) -> bytes::Bytes {
    let mut c = Chunk::new(
        m,
        [RoleChoice {
            index: 0,
            delta: RoleDelta {
                role: "assistant",
                content: "",
            },
            logprobs: None,
            finish_reason: None,
        }],
    );
    c.prompt_token_ids = Some(None);
    c.prompt_text = Some(None);
    sse(&c)
}

/// One streamed token; the last one carries the finish reason, and the fingerprint unless a
/// usage chunk follows (which then carries it, as in vLLM).
pub fn token_chunk(
    m: &Meta,
    text: &str,
    finish: Option<&str>,
    usage_follows: bool,
) -> bytes::Bytes {
    let fingerprint = finish
        .filter(|_| !usage_follows)
        .map(|_| SYSTEM_FINGERPRINT);
    if m.chat {
        let mut c = Chunk::new(
            m,
            [ChatTokenChoice {
                index: 0,
                delta: ContentDelta { content: text },
                logprobs: None,
                finish_reason: finish,
                stop_reason: finish.map(|_| None),
                token_ids: None,
            }],
        );
        c.system_fingerprint = fingerprint;
        sse(&c)
    } else {
        let mut c = Chunk::new(
            m,
            [TextTokenChoice {
                index: 0,
                text,
                logprobs: None,
                finish_reason: finish,
                stop_reason: None,
                prompt_token_ids: None,
                token_ids: None,
            }],
        );
        c.system_fingerprint = fingerprint;
        sse(&c)
    }
}

/// The usage chunk sent before `[DONE]` when `stream_options.include_usage` is set.
pub fn usage_chunk(m: &Meta, mut usage: Usage) -> bytes::Bytes {
    usage.completion_tokens_details = None;
    let mut c = Chunk::new(m, [(); 0]);
    c.usage = Some(usage);
    c.system_fingerprint = Some(SYSTEM_FINGERPRINT);
    sse(&c)
}

/// `/v1/models`.
pub fn models(model: &str, created: u64, max_model_len: usize) -> Value {
    json!({"object": "list", "data": [{
        "id": model, "object": "model", "created": created, "owned_by": "vllm", "root": model,
        "parent": null, "max_model_len": max_model_len,
        "permission": [{"id": format!("modelperm-{model}"), "object": "model_permission",
            "created": created, "allow_create_engine": false, "allow_sampling": true,
            "allow_logprobs": true, "allow_search_indices": false, "allow_view": true,
            "allow_fine_tuning": false, "organization": "*", "group": null, "is_blocking": false}],
    }]})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_completions_and_chat() {
        let r = parse_completion(br#"{"model":"tiny","prompt":"hi","max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}"#).unwrap();
        assert_eq!(r.input, Input::Text("hi".into()));
        assert_eq!(
            (r.max_tokens, r.stream, r.include_usage),
            (Some(3), true, true)
        );
        let r = parse_completion(br#"{"prompt":[1,2,3]}"#).unwrap();
        assert_eq!(r.input, Input::Tokens(vec![1, 2, 3]));
        let r = parse_chat(br#"{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"max_completion_tokens":2}"#).unwrap();
        assert_eq!(r.max_tokens, Some(2));
        assert_eq!(
            r.input,
            Input::Chat(vec![ChatMessage {
                role: "user".into(),
                content: "ab".into()
            }])
        );
    }

    #[test]
    fn bad_input_gets_vllms_error_shape() {
        let e = parse_completion(b"{bad").unwrap_err();
        assert_eq!((e.status.as_u16(), e.kind), (400, "Bad Request"));
        assert!(e.message.contains("json_invalid"));
        let e = parse_completion(br#"{"model":"tiny","prompt":"x","max_tokens":"a"}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("body.max_tokens"));
        let e = parse_completion(br#"{"model":"tiny"}"#).unwrap_err();
        assert_eq!(e.kind, "BadRequestError");
        assert_eq!(
            e.body(),
            json!({"error": {"message": "Either prompt or prompt_embeds must be provided and non-empty. (parameter=prompt)", "type": "BadRequestError", "param": "prompt", "code": 400}})
        );
        let e = parse_chat(br#"{"model":"tiny","messages":"x"}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("body.messages"));
        assert!(parse_completion(
            br#"{"prompt":"x","kv_transfer_params":{"remote_block_ids":"x"}}"#
        )
        .is_err());
    }

    #[test]
    fn kv_transfer_params_round_trip() {
        let r = parse_completion(br#"{"prompt":"x","kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":"e","remote_block_ids":[1,2],"remote_host":"127.0.0.1","remote_port":8001}}"#).unwrap();
        let kv = r.kv_transfer_params.unwrap();
        assert!(kv.do_remote_prefill && !kv.do_remote_decode);
        assert_eq!(kv.remote_block_ids, vec![1, 2]);
        let again = parse_completion(
            serde_json::to_vec(&json!({"prompt": "x", "kv_transfer_params": kv.to_json()}))
                .unwrap()
                .as_slice(),
        )
        .unwrap();
        assert_eq!(again.kv_transfer_params.unwrap(), kv);
    }
}
