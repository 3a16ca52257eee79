//! Response bodies, complete and streamed, with vLLM's field sets and order.

use serde::Serialize;
use serde_json::{json, Value};

use super::SYSTEM_FINGERPRINT;

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
