//! `pools[].kv_events`: routing a pool from its engines' own KV-cache events, and the tokenizer
//! that cuts requests into the same token blocks the engines report.

use super::FieldPath;
use serde::Deserialize;
use std::path::PathBuf;

/// How to hear a pool's engines and tokenize its requests.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KvEventsConfig {
    /// Where each replica's engine publishes, when it binds (vLLM
    /// `--kv-events-config '{"enable_kv_cache_events": true, "publisher": "zmq",
    /// "endpoint": "tcp://*:5557"}'`): `{host}` is the replica URL's host. Every router replica
    /// connects to every engine. A replica's `kv_events_endpoint` overrides it.
    pub endpoint: Option<String>,
    /// The engines' replay endpoint (vLLM `replay_endpoint`, e.g. `tcp://{host}:5558`): after
    /// missed messages (a sequence gap, or a router that starts after the engine) the router
    /// asks for them there, and the replica's view stays complete. A replica's
    /// `kv_events_replay_endpoint` overrides it.
    pub replay_endpoint: Option<String>,
    /// Only messages whose topic starts with this are read.
    pub topic: String,
    /// The model's `tokenizer.json`; absent: the byte-level approximation (4 bytes per token,
    /// as `warmpath-sim` without `--tokenizer`).
    pub tokenizer: Option<PathBuf>,
    /// The chat template: a Jinja file, or a `tokenizer_config.json` with `chat_template`;
    /// absent: `role: content` lines and `assistant:`.
    pub chat_template: Option<PathBuf>,
    /// Prompts longer than this (bytes) are not tokenized; they are routed by the approximate
    /// index alone.
    pub max_prompt_bytes: usize,
    /// Token ids kept by the cache of shared prompt prefixes (about 4 bytes each), so that a
    /// long system prompt is tokenized once, not with every request.
    pub prefix_cache_tokens: usize,
    /// The directory `tokenizer` and `chat_template` must resolve under; set for pools from
    /// the cluster (whose authors do not own the router's filesystem), never from the file
    /// (whose author does).
    #[serde(skip)]
    pub root: Option<PathBuf>,
    /// The largest KV-event message (a batch of one engine step's events, or a replayed one)
    /// read from an engine; a frame announcing more closes that connection before anything is
    /// buffered for it (the router reconnects).
    pub max_message_bytes: usize,
}

impl Default for KvEventsConfig {
    fn default() -> Self {
        Self {
            endpoint: None,
            replay_endpoint: None,
            topic: String::new(),
            tokenizer: None,
            chat_template: None,
            max_prompt_bytes: 4 << 20,
            prefix_cache_tokens: 4 << 20,
            root: None,
            max_message_bytes: warmpath_kv_events::subscriber::DEFAULT_MAX_MESSAGE_BYTES,
        }
    }
}

impl KvEventsConfig {
    /// The endpoint of a replica at `host`, from the pool's template or the replica's own.
    pub fn endpoint_for(&self, host: &str, own: Option<&str>) -> Option<String> {
        own.map(str::to_owned)
            .or_else(|| self.endpoint.as_ref().map(|t| t.replace("{host}", host)))
    }

    /// The replay endpoint of a replica at `host`, likewise.
    pub fn replay_for(&self, host: &str, own: Option<&str>) -> Option<String> {
        own.map(str::to_owned).or_else(|| {
            self.replay_endpoint
                .as_ref()
                .map(|t| t.replace("{host}", host))
        })
    }

    pub(super) fn validate(&self, at: FieldPath) -> Result<(), (FieldPath, String)> {
        if let Some(e) = &self.endpoint {
            check_endpoint(e).map_err(|m| (at.key("endpoint"), m))?;
        }
        if let Some(e) = &self.replay_endpoint {
            check_endpoint(e).map_err(|m| (at.key("replay_endpoint"), m))?;
        }
        for (field, path) in [
            ("tokenizer", &self.tokenizer),
            ("chat_template", &self.chat_template),
        ] {
            if let Some(p) = path {
                if !p.is_file() {
                    return Err((at.key(field), format!("`{}` is not a file", p.display())));
                }
            }
        }
        for (field, value) in [
            ("max_prompt_bytes", self.max_prompt_bytes),
            ("max_message_bytes", self.max_message_bytes),
        ] {
            if value == 0 {
                return Err((at.key(field), "must be > 0".to_owned()));
            }
        }
        Ok(())
    }
}

/// A ZMQ TCP endpoint to connect to.
pub fn check_endpoint(e: &str) -> Result<(), String> {
    let rest = e
        .strip_prefix("tcp://")
        .ok_or_else(|| format!("`{e}`: only tcp:// endpoints are supported"))?;
    match rest.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0) => {
            Ok(())
        }
        _ => Err(format!("`{e}`: expected tcp://HOST:PORT")),
    }
}
