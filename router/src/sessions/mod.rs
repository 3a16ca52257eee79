//! Session affinity: a conversation or an agent's session goes back to the replica that holds
//! its context, even when its prompt no longer starts the same way (tool results spliced in,
//! histories compacted, system prompts re-rendered), which a prefix index alone cannot follow.
//!
//! Two ways to remember a session's home, so that any number of router replicas agree:
//! - a token on every answer (`x-session-token`, llm-d's name and form: the replica's name,
//!   base64) with an HMAC-SHA256 tag, which the client echoes; any router holding the same key
//!   honours it, and a client cannot aim at a replica of its choosing (a tampered token is
//!   ignored);
//! - a bounded server-side map from the session id (`x-session-id`, or the OpenAI `user` field
//!   when configured) with an idle TTL, for clients that cannot echo headers (per router).
//!
//! Affinity is a strong preference, not a pin ([`affinity`]): it yields when the home is gone or
//! not ready, when another replica holds more of the prompt (the prefix index already knows
//! better), or when the home has far more queued than the scheduler's pick; the session then
//! moves once, and the new replica becomes its home.
//!
//! [`SessionMap`] and [`affinity`] are pure (time comes in as an argument).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[cfg(test)]
mod tests;

/// Bytes of the HMAC tag kept in a token (128 bits).
const TAG_BYTES: usize = 16;

/// What a request says about its session.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionRef {
    /// The session id, from a configured header or the `user` field.
    pub id: Option<String>,
    /// The token the client echoed (unverified).
    pub token: Option<String>,
}

impl SessionRef {
    pub fn is_some(&self) -> bool {
        self.id.is_some() || self.token.is_some()
    }
}

/// Signs and checks session tokens.
#[derive(Clone)]
pub struct TokenKey(Arc<[u8]>);

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenKey(..)")
    }
}

impl TokenKey {
    pub fn new(key: &[u8]) -> Self {
        Self(key.into())
    }

    /// A key of this process alone: its tokens mean nothing to other routers.
    pub fn random() -> Self {
        let key: [u8; 32] = rand::random();
        Self::new(&key)
    }

    fn mac(&self) -> Hmac<Sha256> {
        Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes keys of any length")
    }

    /// The token naming `replica`: `base64(name).base64(tag)`.
    pub fn sign(&self, replica: &str) -> String {
        let mut mac = self.mac();
        mac.update(replica.as_bytes());
        let tag = mac.finalize().into_bytes();
        format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(replica),
            URL_SAFE_NO_PAD.encode(&tag[..TAG_BYTES])
        )
    }

    /// The replica a token names, if this key signed it.
    pub fn verify(&self, token: &str) -> Option<String> {
        let (name, tag) = token.trim().split_once('.')?;
        let name = URL_SAFE_NO_PAD.decode(name).ok()?;
        let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
        if tag.len() != TAG_BYTES {
            return None;
        }
        let mut mac = self.mac();
        mac.update(&name);
        mac.verify_truncated_left(&tag).ok()?;
        String::from_utf8(name).ok()
    }
}

/// Session id → its home replica's name, bounded in entries, forgetting idle sessions.
#[derive(Debug)]
pub struct SessionMap {
    max: usize,
    ttl: Duration,
    homes: HashMap<Arc<str>, (Arc<str>, Instant)>,
    /// Sessions in the order they were last seen, with that time (an entry whose time differs
    /// from the map's is stale and skipped).
    order: VecDeque<(Instant, Arc<str>)>,
}

impl SessionMap {
    pub fn new(max: usize, ttl: Duration) -> Self {
        Self {
            max: max.max(1),
            ttl,
            homes: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// New bounds (a configuration reload); shrinking forgets the least recently seen.
    pub fn set_limits(&mut self, max: usize, ttl: Duration) {
        self.max = max.max(1);
        self.ttl = ttl;
    }

    /// The session's home, if it was seen within the TTL.
    pub fn get(&self, id: &str, now: Instant) -> Option<&str> {
        let (home, seen) = self.homes.get(id)?;
        (now.saturating_duration_since(*seen) < self.ttl).then_some(&**home)
    }

    /// Record that the session was just served by `home`.
    pub fn set(&mut self, id: &str, home: &str, now: Instant) {
        self.expire(now);
        let id: Arc<str> = match self.homes.get_key_value(id) {
            Some((k, _)) => k.clone(),
            None => id.into(),
        };
        let home: Arc<str> = match self.homes.get(&id) {
            Some((h, _)) if &**h == home => h.clone(),
            _ => home.into(),
        };
        self.homes.insert(id.clone(), (home, now));
        self.order.push_back((now, id));
        while self.homes.len() > self.max {
            self.pop_oldest();
        }
        if self.order.len() > 2 * self.homes.len() + 64 {
            let homes = &self.homes;
            self.order
                .retain(|(t, id)| homes.get(id).is_some_and(|(_, seen)| seen == t));
        }
    }

    /// Forget sessions idle past the TTL.
    pub fn expire(&mut self, now: Instant) {
        while let Some((t, _)) = self.order.front() {
            if now.saturating_duration_since(*t) < self.ttl {
                break;
            }
            self.pop_oldest();
        }
    }

    fn pop_oldest(&mut self) {
        while let Some((t, id)) = self.order.pop_front() {
            if self.homes.get(&id).is_some_and(|(_, seen)| *seen == t) {
                self.homes.remove(&id);
                return;
            }
        }
    }

    pub fn len(&self) -> usize {
        self.homes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.homes.is_empty()
    }
}

/// What became of a session's affinity on one request (a metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Affinity {
    /// No home known yet: the scheduler's pick becomes it.
    New,
    /// Went to its home.
    Kept,
    /// Its home is gone or not ready.
    MovedUnavailable,
    /// Another replica holds more of the prompt, by the engines' KV events.
    MovedPrefix,
    /// Its home has too much queued.
    MovedOverload,
}

impl Affinity {
    pub fn label(self) -> &'static str {
        match self {
            Affinity::New => "new",
            Affinity::Kept => "kept",
            Affinity::MovedUnavailable => "moved_unavailable",
            Affinity::MovedPrefix => "moved_prefix",
            Affinity::MovedOverload => "moved_overload",
        }
    }
}

/// What affinity needs to know of a candidate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Seen {
    /// Leading prompt blocks it holds.
    pub matched: u32,
    /// Requests ahead of a new one on it.
    pub queued_ahead: f64,
    /// `matched` is what the engine reported (KV events, fresh), not the router's guess.
    pub exact: bool,
}

/// Whether to send the request to its home (`true`) instead of the scheduler's pick, and why.
/// `home`: `None` when the session has no home yet, `Some(None)` when its home is not among
/// the ready candidates, `Some(Some(seen))` otherwise; `home_is_pick` when they are the same.
pub fn affinity(
    home: Option<Option<Seen>>,
    home_is_pick: bool,
    pick: Seen,
    max_extra_queue: u32,
) -> (bool, Affinity) {
    let Some(home) = home else {
        return (false, Affinity::New);
    };
    let Some(home) = home else {
        return (false, Affinity::MovedUnavailable);
    };
    if home_is_pick {
        return (false, Affinity::Kept);
    }
    // Only an engine's own report says the home holds less: an approximate index knows only
    // where this router sent prompts, and with several routers it misses the turns the others
    // sent home, while every replica shows the shared system prompt it did see go there.
    if pick.matched > home.matched && pick.exact && home.exact {
        return (false, Affinity::MovedPrefix);
    }
    if home.queued_ahead - pick.queued_ahead > f64::from(max_extra_queue) {
        return (false, Affinity::MovedOverload);
    }
    (true, Affinity::Kept)
}

/// The router's sessions: the signing key and the server-side map.
#[derive(Debug)]
pub struct Sessions {
    pub key: TokenKey,
    pub map: parking_lot::Mutex<SessionMap>,
}

impl Sessions {
    pub fn new(key: TokenKey, config: &crate::config::SessionsConfig) -> Self {
        Self {
            key,
            map: parking_lot::Mutex::new(SessionMap::new(
                config.max_sessions,
                Duration::from_secs(config.idle_ttl_s),
            )),
        }
    }

    /// From the configuration: the key file's key, else a random one.
    pub fn from_config(config: &crate::config::SessionsConfig) -> std::io::Result<Self> {
        let key = match &config.key_file {
            Some(p) => TokenKey::new(&crate::config::read_secret(p, "key")?),
            None => TokenKey::random(),
        };
        Ok(Self::new(key, config))
    }

    /// The home a request's session names: its valid token first, else the map's entry.
    pub fn home(&self, session: &SessionRef, now: Instant) -> Option<String> {
        if let Some(home) = session.token.as_deref().and_then(|t| self.key.verify(t)) {
            return Some(home);
        }
        let id = session.id.as_deref()?;
        self.map.lock().get(id, now).map(str::to_owned)
    }

    /// Record where the session went; the token to answer with.
    pub fn record(&self, session: &SessionRef, replica: &str, now: Instant) -> String {
        if let Some(id) = session.id.as_deref() {
            self.map.lock().set(id, replica, now);
        }
        self.key.sign(replica)
    }
}
