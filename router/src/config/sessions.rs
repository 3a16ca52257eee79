//! The `sessions:` section: which requests belong to a conversation or an agent's session, and
//! how long the router remembers where each one lives.

use super::FieldPath;
use serde::Deserialize;
use std::path::PathBuf;

/// `sessions:` session affinity.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionsConfig {
    /// Session affinity on or off.
    pub enabled: bool,
    /// Headers that carry a session id, first present wins (llm-d's `x-session-id` by default).
    pub headers: Vec<String>,
    /// Take the OpenAI `user` field as the session id when no header names one.
    pub user_field: bool,
    /// The header that carries the signed session token: set on answers, echoed by clients
    /// (llm-d's name).
    pub token_header: String,
    /// File holding the key tokens are signed with (at least 16 bytes; read once, at start).
    /// Give every router replica the same key (a Secret: the chart makes one) so that each
    /// honours the others' tokens; absent: a random key per process.
    pub key_file: Option<PathBuf>,
    /// Sessions remembered server-side (for clients that cannot echo the token); the least
    /// recently seen are forgotten past it.
    pub max_sessions: usize,
    /// Sessions one client (its tenant when it proved one, else its address) may hold in the
    /// map; past it, its own least recently seen is forgotten, so that a client inventing
    /// session ids cannot flush the others'.
    pub max_sessions_per_client: usize,
    /// A session not seen for this long is forgotten, and a token this long after its answer
    /// is no longer honoured.
    pub idle_ttl_s: u64,
    /// Affinity yields when the session's replica has more than this many more requests ahead
    /// of a new one (in flight and queued in the engine) than the replica the scheduler chose.
    pub max_extra_queue: u32,
}

impl Default for SessionsConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            headers: vec!["x-session-id".into()],
            user_field: false,
            token_header: "x-session-token".into(),
            key_file: None,
            max_sessions: 100_000,
            max_sessions_per_client: 25_000,
            idle_ttl_s: 1800,
            max_extra_queue: 8,
        }
    }
}

impl SessionsConfig {
    pub(super) fn validate(&self, at: FieldPath) -> Result<(), (FieldPath, String)> {
        for (i, h) in self.headers.iter().enumerate() {
            if http::HeaderName::from_bytes(h.as_bytes()).is_err() {
                return Err((
                    at.key("headers").index(i),
                    format!("{h:?} is not a header name"),
                ));
            }
        }
        if http::HeaderName::from_bytes(self.token_header.as_bytes()).is_err() {
            return Err((at.key("token_header"), "not a header name".into()));
        }
        if self.max_sessions == 0 {
            return Err((at.key("max_sessions"), "must be at least 1".into()));
        }
        if self.max_sessions_per_client == 0 {
            return Err((
                at.key("max_sessions_per_client"),
                "must be at least 1".into(),
            ));
        }
        if self.idle_ttl_s == 0 {
            return Err((at.key("idle_ttl_s"), "must be at least 1".into()));
        }
        Ok(())
    }
}
