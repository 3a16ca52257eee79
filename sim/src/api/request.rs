//! Request parsing with vLLM's validation: the same fields accepted, the same errors (status,
//! type, `param` and message) for the ones it rejects, so that a router's error handling is
//! tested against what a real engine sends.

use serde_json::{json, Map, Value};

use super::ApiError;
use crate::tokens::ChatMessage;

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

/// SGLang's P/D pairing fields, top-level in the body: the prefill server's bootstrap endpoint
/// and the room pairing one prefill request with one decode request (see [`crate::bootstrap`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bootstrap {
    pub host: String,
    pub port: u16,
    pub room: u64,
}

impl Bootstrap {
    /// SGLang's default bootstrap port (`--disaggregation-bootstrap-port`), assumed when a
    /// request names a host and a room but no port.
    pub const DEFAULT_PORT: u16 = 8998;

    fn parse(m: &Map<String, Value>) -> Result<Option<Self>, ApiError> {
        let get = |k: &str| m.get(k).filter(|v| !v.is_null());
        let (host, port, room) = (
            get("bootstrap_host"),
            get("bootstrap_port"),
            get("bootstrap_room"),
        );
        if host.is_none() && port.is_none() && room.is_none() {
            return Ok(None);
        }
        let host = match host {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            Some(Value::String(_)) | None => {
                return Err(ApiError::bad_request(
                    Some("bootstrap_host"),
                    "bootstrap_host (the prefill server's host) is required with bootstrap_port and bootstrap_room",
                ))
            }
            Some(_) => {
                return Err(ApiError::validation(
                    "body.bootstrap_host",
                    "string_type",
                    "Input should be a valid string",
                ))
            }
        };
        let port = match port {
            None => Self::DEFAULT_PORT,
            Some(v) => v
                .as_u64()
                .and_then(|p| u16::try_from(p).ok())
                .filter(|p| *p != 0)
                .ok_or_else(|| {
                    ApiError::bad_request(
                        Some("bootstrap_port"),
                        "bootstrap_port must be a port number",
                    )
                })?,
        };
        let room = match room {
            Some(v) => v.as_u64().ok_or_else(|| {
                ApiError::bad_request(
                    Some("bootstrap_room"),
                    // SGLang also takes a list (one room per prompt of a batch); the simulator
                    // serves one prompt per request.
                    "bootstrap_room must be one non-negative integer",
                )
            })?,
            None => {
                return Err(ApiError::bad_request(
                    Some("bootstrap_room"),
                    "bootstrap_room (pairing the prefill and decode requests) is required with bootstrap_host",
                ))
            }
        };
        Ok(Some(Bootstrap { host, port, room }))
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
    /// SGLang P/D: set when the body carries `bootstrap_host`/`bootstrap_port`/`bootstrap_room`.
    pub bootstrap: Option<Bootstrap>,
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
    let kv_transfer_params =
        KvTransferParams::parse(m.get("kv_transfer_params").unwrap_or(&Value::Null))?;
    let bootstrap = Bootstrap::parse(m)?;
    if bootstrap.is_some()
        && kv_transfer_params
            .as_ref()
            .is_some_and(|k| k.do_remote_decode || k.do_remote_prefill)
    {
        // Two P/D protocols at once would make the request both sides of two transfers.
        return Err(ApiError::bad_request(
            Some("kv_transfer_params"),
            "kv_transfer_params (vLLM P/D) and bootstrap_* fields (SGLang P/D) cannot be combined",
        ));
    }
    Ok(GenerateRequest {
        model,
        input,
        max_tokens: max_tokens.map(|v| v as usize),
        stream: opt_bool(m, "stream")?,
        include_usage,
        seed: opt_uint(m, "seed")?,
        kv_transfer_params,
        bootstrap,
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
            for (k, p) in parts.iter().enumerate() {
                match p.get("text").and_then(Value::as_str) {
                    Some(t) => {
                        // vLLM joins text parts with newlines.
                        if k > 0 {
                            s.push('\n');
                        }
                        s.push_str(t)
                    }
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
