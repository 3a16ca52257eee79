//! Parsing a client request's body for only the fields routing needs (model, prompt or
//! messages, stream, max tokens, user). The raw bytes are forwarded untouched; strings are
//! borrowed from them where JSON escapes allow, so a 100k-token prompt is neither copied nor
//! parsed twice. A pure function, used by the stack's parse layer (`crate::api::parse`).

use crate::errors::ApiError;
use bytes::Bytes;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;
use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use warmpath_routing::prompt::{BlockHasher, BlockHashes};
use warmpath_tokenize::{ChatMessage, PrefixCache, TokenError, Tokenizer};

/// Which OpenAI endpoint a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Completions,
    ChatCompletions,
}

/// What routing knows about a request after parsing it.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestFeatures {
    pub model: String,
    pub stream: bool,
    pub max_tokens: Option<u32>,
    /// The OpenAI `user` field (an end user's id: never trusted as a tenant, which
    /// [`crate::tenants`] finds from keys and trusted headers).
    pub user: Option<String>,
    pub prompt: BlockHashes,
    /// The prompt's token ids as the engine computes them, for models routed from KV events
    /// (`None` otherwise, or when tokenizing failed: the approximate index still routes it).
    /// With [`RequestFeatures::media`], only those before the message holding the first
    /// multimodal item.
    pub tokens: Option<Vec<u32>>,
    /// A chat message carries a non-text part (an image, audio, video): the engine keys the
    /// blocks from there on with the item's identifier and expands it into placeholder tokens,
    /// neither of which the router can know, so `tokens` stops before it.
    pub media: bool,
    /// vLLM's `cache_salt`: the engine folds it into the first block's hash, so only requests
    /// with the same salt share cached blocks.
    pub cache_salt: Option<String>,
    /// The session the request belongs to (from its headers, set by the parse layer).
    pub session: crate::sessions::SessionRef,
    /// The body carries fields that steer a prefill/decode split (`kv_transfer_params`,
    /// `bootstrap_host`, `bootstrap_port`, `bootstrap_room`): only the router's own split may
    /// set them (the parse layer strips a client's, unless it is a trusted source).
    pub pd_fields: bool,
}

/// Body fields that steer a prefill/decode split on the engine: vLLM's KV-transfer parameters
/// and SGLang's bootstrap rendezvous.
pub const PD_FIELDS: [&str; 4] = [
    "kv_transfer_params",
    "bootstrap_host",
    "bootstrap_port",
    "bootstrap_room",
];

/// The body less the fields that steer a prefill/decode split: `Ok(None)` when it names none
/// (nothing to re-encode), `Err` when it is not a JSON object that can be re-encoded. Keys are
/// compared decoded, as an engine reads them (`"kv\u005ftransfer_params"` is the field too).
pub fn without_pd_fields(body: &[u8]) -> Result<Option<Bytes>, NotAnObject> {
    let mut object: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(body).map_err(|_| NotAnObject)?;
    let mut removed = false;
    for field in PD_FIELDS {
        removed |= object.remove(field).is_some();
    }
    if !removed {
        return Ok(None);
    }
    serde_json::to_vec(&object)
        .map(|v| Some(Bytes::from(v)))
        .map_err(|_| NotAnObject)
}

/// A body [`without_pd_fields`] could not read as a JSON object.
#[derive(Debug, thiserror::Error)]
#[error("the request body could not be re-encoded without its prefill/decode fields")]
pub struct NotAnObject;

/// A model's tokenizer with the cache of its prompts' shared prefixes (a long system prompt is
/// tokenized once; later prompts re-tokenize only what follows it).
#[derive(Debug)]
pub struct Tokens {
    pub tokenizer: Tokenizer,
    pub prefixes: PrefixCache,
}

impl Tokens {
    /// `text`'s token ids, as `Tokenizer::encode` gives them.
    pub fn encode(&self, text: &str, special: bool) -> Result<Vec<u32>, TokenError> {
        self.prefixes.encode(&self.tokenizer, text, special)
    }
}

/// Parse the routing fields of a request body and hash its canonical prompt.
pub fn parse(
    endpoint: Endpoint,
    body: &[u8],
    hasher: &BlockHasher,
    tokenizer_for: impl FnOnce(&str) -> Option<Arc<Tokens>>,
) -> Result<RequestFeatures, ApiError> {
    let wire: Wire<'_> = serde_json::from_slice(body).map_err(|e| {
        use serde_json::error::Category;
        match e.classify() {
            Category::Data => {
                ApiError::bad_request("invalid_field", format!("Invalid request: {e}"))
            }
            _ => ApiError::bad_request(
                "invalid_json",
                format!("The request body is not valid JSON: {e}"),
            ),
        }
    })?;
    let model = match wire.model {
        Some(m) if !m.0.is_empty() => m.0.into_owned(),
        _ => {
            return Err(ApiError::bad_request(
                "missing_model",
                "You must provide a `model` parameter.",
            ))
        }
    };
    let tokenizer = tokenizer_for(&model);
    let tokenizer = tokenizer.as_deref();
    let mut tokens = None;
    let mut media = false;
    let prompt = match endpoint {
        Endpoint::Completions => match wire.prompt {
            Some(p) => {
                if let Some(t) = tokenizer {
                    tokens = match &p {
                        Prompt::Text(s) => t.encode(&s.0, true).ok(),
                        Prompt::Tokens(ids) => ids.iter().map(|&i| u32::try_from(i).ok()).collect(),
                    };
                }
                hash_prompt(&p, hasher)
            }
            None => {
                return Err(ApiError::bad_request(
                    "missing_prompt",
                    "You must provide a `prompt` parameter.",
                ))
            }
        },
        Endpoint::ChatCompletions => match wire.messages {
            Some(msgs) if !msgs.is_empty() => {
                let first_media = msgs.iter().position(Message::has_media);
                media = first_media.is_some();
                if let Some(t) = tokenizer {
                    tokens = chat_tokens(t, &msgs, first_media);
                }
                // The approximate index sees each item as a digest of its part, so that the
                // same image matches and another does not.
                let owned: Vec<(&str, Cow<'_, str>)> = msgs
                    .iter()
                    .map(|m| (m.role.0.as_ref(), m.content_text(true)))
                    .collect();
                hasher.hash_chat(owned.iter().map(|(r, c)| (*r, c.as_ref())))
            }
            _ => {
                return Err(ApiError::bad_request(
                    "missing_messages",
                    "You must provide a non-empty `messages` array.",
                ))
            }
        },
    };
    let pd_fields = wire.kv_transfer_params.is_some()
        || wire.bootstrap_host.is_some()
        || wire.bootstrap_port.is_some()
        || wire.bootstrap_room.is_some();
    let user = wire.user.map(|u| u.0.into_owned());
    let cache_salt = wire.cache_salt.map(|s| s.0.into_owned());
    Ok(RequestFeatures {
        model,
        stream: wire.stream.unwrap_or(false),
        max_tokens: wire.max_tokens.or(wire.max_completion_tokens),
        user,
        prompt,
        tokens,
        media,
        cache_salt,
        session: Default::default(),
        pd_fields,
    })
}

/// Stands for the message holding the first multimodal item while the chat is rendered, to
/// find where its tokens start (private-use characters no real prompt is expected to hold).
const MEDIA_MARK: &str = "\u{F8FF}warmpath-media\u{F8FF}";

/// A chat's token ids as the engine computes them: the rendered chat, tokenized without adding
/// special tokens (as vLLM: the template carries its own). With a multimodal item in message
/// `first_media`, only the tokens before that message, less the last one (which may merge
/// with what follows it); `None` when the template does not show where that message begins.
fn chat_tokens(t: &Tokens, msgs: &[Message<'_>], first_media: Option<usize>) -> Option<Vec<u32>> {
    let messages: Vec<ChatMessage> = msgs
        .iter()
        .enumerate()
        .map(|(i, m)| ChatMessage {
            role: m.role.0.as_ref().to_owned(),
            content: if Some(i) == first_media {
                MEDIA_MARK.to_owned()
            } else {
                m.content_text(false).into_owned()
            },
        })
        .collect();
    let text = t.tokenizer.render_chat(&messages).ok()?;
    let Some(_) = first_media else {
        return t.encode(&text, false).ok();
    };
    let before = &text[..text.find(MEDIA_MARK)?];
    let mut tokens = t.encode(before, false).ok()?;
    tokens.pop();
    Some(tokens)
}

fn hash_prompt(prompt: &Prompt<'_>, hasher: &BlockHasher) -> BlockHashes {
    match prompt {
        Prompt::Text(s) => hasher.hash_text(&s.0),
        // Token ids are hashed through their decimal text: equal id prefixes give equal text
        // prefixes, which is all the approximate index needs.
        Prompt::Tokens(ids) => {
            let mut text = String::with_capacity(ids.len() * 6);
            for id in ids {
                text.push_str(&id.to_string());
                text.push(' ');
            }
            hasher.hash_text(&text)
        }
    }
}

/// A string borrowed from the body when it has no escapes, owned otherwise.
#[derive(Debug)]
struct Str<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// The request fields routing reads; everything else is skipped without being built.
#[derive(Deserialize)]
struct Wire<'a> {
    #[serde(borrow, default)]
    model: Option<Str<'a>>,
    #[serde(borrow, default)]
    prompt: Option<Prompt<'a>>,
    #[serde(borrow, default)]
    messages: Option<Vec<Message<'a>>>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    max_completion_tokens: Option<u32>,
    #[serde(borrow, default)]
    user: Option<Str<'a>>,
    #[serde(borrow, default)]
    cache_salt: Option<Str<'a>>,
    // Present or not is all that matters (PD_FIELDS).
    #[serde(default)]
    kv_transfer_params: Option<de::IgnoredAny>,
    #[serde(default)]
    bootstrap_host: Option<de::IgnoredAny>,
    #[serde(default)]
    bootstrap_port: Option<de::IgnoredAny>,
    #[serde(default)]
    bootstrap_room: Option<de::IgnoredAny>,
}

/// `prompt`: a string, a batch of strings (the first one routes), token ids, or a batch of those.
#[derive(Debug)]
enum Prompt<'a> {
    Text(Str<'a>),
    Tokens(Vec<u64>),
}

impl<'de: 'a, 'a> Deserialize<'de> for Prompt<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Prompt<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string, an array of strings, or an array of token ids")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Prompt::Text(Str(Cow::Borrowed(v))))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Prompt::Text(Str(Cow::Owned(v.to_owned()))))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Prompt::Text(Str(Cow::Owned(v))))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let first: Option<PromptItem<'de>> = seq.next_element()?;
                let prompt = match first {
                    None => return Err(de::Error::invalid_length(0, &"a non-empty prompt")),
                    Some(PromptItem::Text(s)) => Prompt::Text(s),
                    Some(PromptItem::Tokens(t)) => Prompt::Tokens(t),
                    Some(PromptItem::Token(t)) => {
                        let mut ids = vec![t];
                        while let Some(id) = seq.next_element::<u64>()? {
                            ids.push(id);
                        }
                        return Ok(Prompt::Tokens(ids));
                    }
                };
                // Further prompts of a batch are validated for shape but do not route.
                while seq.next_element::<de::IgnoredAny>()?.is_some() {}
                Ok(prompt)
            }
        }
        d.deserialize_any(V)
    }
}

enum PromptItem<'a> {
    Text(Str<'a>),
    Token(u64),
    Tokens(Vec<u64>),
}

impl<'de: 'a, 'a> Deserialize<'de> for PromptItem<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = PromptItem<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string, a token id or an array of token ids")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(PromptItem::Text(Str(Cow::Borrowed(v))))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(PromptItem::Text(Str(Cow::Owned(v.to_owned()))))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(PromptItem::Token(v))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut ids = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(id) = seq.next_element::<u64>()? {
                    ids.push(id);
                }
                Ok(PromptItem::Tokens(ids))
            }
        }
        d.deserialize_any(V)
    }
}

/// A chat message: its role and its text (a string, or the text parts of a parts array).
#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    role: Str<'a>,
    #[serde(borrow, default)]
    content: Option<Content<'a>>,
}

impl Message<'_> {
    /// The message's text: its text parts joined by newlines (as vLLM flattens them), with
    /// `digests` a digest of each multimodal part in its place.
    fn content_text(&self, digests: bool) -> Cow<'_, str> {
        match &self.content {
            None => Cow::Borrowed(""),
            Some(Content::Text(s)) => Cow::Borrowed(s.0.as_ref()),
            Some(Content::Parts(parts)) => {
                let texts: Vec<Cow<'_, str>> = parts
                    .iter()
                    .filter_map(|p| match (&p.text, p.media) {
                        (Some(t), _) => Some(Cow::Borrowed(t.0.as_ref())),
                        (None, Some(raw)) if digests => Some(Cow::Owned(format!(
                            "\u{FFFC}{:016x}",
                            xxhash_rust::xxh3::xxh3_64(raw.as_bytes())
                        ))),
                        (None, _) => None,
                    })
                    .collect();
                match texts.as_slice() {
                    [Cow::Borrowed(one)] => Cow::Borrowed(*one),
                    _ => Cow::Owned(texts.join("\n")),
                }
            }
        }
    }

    fn has_media(&self) -> bool {
        matches!(&self.content, Some(Content::Parts(parts)) if parts.iter().any(|p| p.media.is_some()))
    }
}

enum Content<'a> {
    Text(Str<'a>),
    Parts(Vec<Part<'a>>),
}

/// A content part: text (`text`, `input_text`, `output_text`, `refusal`, or untyped with a
/// `text` field), or a multimodal item (any other type), kept as its raw JSON.
struct Part<'a> {
    text: Option<Str<'a>>,
    media: Option<&'a str>,
}

impl<'de: 'a, 'a> Deserialize<'de> for Part<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct ContentPart<'a> {
            #[serde(rename = "type", borrow, default)]
            kind: Option<Str<'a>>,
            #[serde(borrow, default)]
            text: Option<Str<'a>>,
        }
        let raw: &'de serde_json::value::RawValue = Deserialize::deserialize(d)?;
        let fields: ContentPart<'de> =
            serde_json::from_str(raw.get()).map_err(de::Error::custom)?;
        let textual = match &fields.kind {
            None => true,
            Some(k) => matches!(
                k.0.as_ref(),
                "text" | "input_text" | "output_text" | "refusal"
            ),
        };
        Ok(match textual {
            true => Part {
                text: fields.text,
                media: None,
            },
            false => Part {
                text: None,
                media: Some(raw.get()),
            },
        })
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Content<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Content<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or an array of content parts")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Content::Text(Str(Cow::Borrowed(v))))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Content::Text(Str(Cow::Owned(v.to_owned()))))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut parts = Vec::new();
                while let Some(p) = seq.next_element::<Part<'de>>()? {
                    parts.push(p);
                }
                Ok(Content::Parts(parts))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests;
