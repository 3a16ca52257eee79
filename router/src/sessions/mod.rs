//! Session affinity: a conversation or an agent's session goes back to the replica that holds
//! its context, even when its prompt no longer starts the same way (tool results spliced in,
//! histories compacted, system prompts re-rendered), which a prefix index alone cannot follow.
//!
//! Two ways to remember a session's home, so that any number of router replicas agree:
//! - a token on every answer (`x-session-token`, llm-d's name and form: the replica's name,
//!   base64) with its expiry and an HMAC-SHA256 tag over both, which the client echoes; any
//!   router holding the same key honours it until it expires (the session's idle TTL: each
//!   answer renews it), and a client cannot aim at a replica of its choosing nor keep a token
//!   alive for ever (a tampered or expired token is ignored);
//! - a bounded server-side map from the session id (`x-session-id`, or the OpenAI `user` field
//!   when configured) with an idle TTL, for clients that cannot echo headers (per router). Each
//!   client (its tenant when it proved one, else its address) holds at most
//!   `max_sessions_per_client` of it: a client that invents session ids churns through its own
//!   share, never through the others' sessions.
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
    /// Who sent it (its tenant, or its address): whose share of the map a new id counts
    /// against. `None`: counted against no one's share (the map's own bound still holds).
    pub client: Option<Arc<str>>,
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

    /// The tag over a replica's name and an expiry.
    fn tagged(&self, replica: &[u8], expires: [u8; 8]) -> Hmac<Sha256> {
        let mut mac = self.mac();
        mac.update(replica);
        // The name is any bytes: the separator and the fixed-width expiry keep the two apart.
        mac.update(&[0]);
        mac.update(&expires);
        mac
    }

    /// The token naming `replica` until `expires` (Unix seconds):
    /// `base64(name).base64(expiry).base64(tag)`.
    pub fn sign(&self, replica: &str, expires: u64) -> String {
        let expires = expires.to_be_bytes();
        let tag = self
            .tagged(replica.as_bytes(), expires)
            .finalize()
            .into_bytes();
        format!(
            "{}.{}.{}",
            URL_SAFE_NO_PAD.encode(replica),
            URL_SAFE_NO_PAD.encode(expires),
            URL_SAFE_NO_PAD.encode(&tag[..TAG_BYTES])
        )
    }

    /// The replica a token names, if this key signed it and it has not expired by `now` (Unix
    /// seconds).
    pub fn verify(&self, token: &str, now: u64) -> Option<String> {
        let mut parts = token.trim().split('.');
        let (name, expires, tag) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        let name = URL_SAFE_NO_PAD.decode(name).ok()?;
        let expires: [u8; 8] = URL_SAFE_NO_PAD.decode(expires).ok()?.try_into().ok()?;
        let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
        if tag.len() != TAG_BYTES {
            return None;
        }
        self.tagged(&name, expires)
            .verify_truncated_left(&tag)
            .ok()?;
        if u64::from_be_bytes(expires) <= now {
            return None;
        }
        String::from_utf8(name).ok()
    }
}

/// Session id → its home replica's name, bounded in entries and in each client's share,
/// forgetting idle sessions.
#[derive(Debug)]
pub struct SessionMap {
    max: usize,
    max_per_client: usize,
    ttl: Duration,
    homes: HashMap<Arc<str>, Home>,
    /// Sessions in the order they were last seen, with that time (an entry whose time differs
    /// from the map's is stale and skipped).
    order: VecDeque<(Instant, Arc<str>)>,
    /// Each client's sessions, the same way: its share's own order.
    clients: HashMap<Arc<str>, Share>,
}

#[derive(Debug)]
struct Home {
    replica: Arc<str>,
    seen: Instant,
    /// The client whose share it counts against (the one that named it first).
    client: Option<Arc<str>>,
}

#[derive(Debug, Default)]
struct Share {
    count: usize,
    order: VecDeque<(Instant, Arc<str>)>,
}

/// Order entries beyond twice the live ones (plus this) are swept out.
const ORDER_SLACK: usize = 64;

/// Whether an order entry (seen at `t`, in `client`'s share) is the session's latest.
fn is_current(home: &Home, t: Instant, client: &str) -> bool {
    home.seen == t && home.client.as_deref() == Some(client)
}

impl SessionMap {
    pub fn new(max: usize, max_per_client: usize, ttl: Duration) -> Self {
        Self {
            max: max.max(1),
            max_per_client: max_per_client.max(1),
            ttl,
            homes: HashMap::new(),
            order: VecDeque::new(),
            clients: HashMap::new(),
        }
    }

    /// New bounds (a configuration reload); shrinking forgets the least recently seen.
    pub fn set_limits(&mut self, max: usize, max_per_client: usize, ttl: Duration) {
        self.max = max.max(1);
        self.max_per_client = max_per_client.max(1);
        self.ttl = ttl;
    }

    /// The session's home, if it was seen within the TTL.
    pub fn get(&self, id: &str, now: Instant) -> Option<&str> {
        let h = self.homes.get(id)?;
        (now.saturating_duration_since(h.seen) < self.ttl).then_some(&*h.replica)
    }

    /// Record that the session was just served by `home`, on behalf of `client`. A client at
    /// its share that names a new session forgets its own least recently seen one.
    pub fn set(&mut self, id: &str, home: &str, client: Option<&str>, now: Instant) {
        self.expire(now);
        let (id, owner) = match self.homes.get_key_value(id) {
            Some((k, h)) => (k.clone(), h.client.clone()),
            None => {
                let owner = client.map(|c| match self.clients.get_key_value(c) {
                    Some((k, _)) => k.clone(),
                    None => Arc::<str>::from(c),
                });
                if let Some(c) = &owner {
                    while self
                        .clients
                        .get(c)
                        .is_some_and(|share| share.count >= self.max_per_client)
                    {
                        self.pop_oldest_of(c);
                    }
                }
                (Arc::<str>::from(id), owner)
            }
        };
        let replica: Arc<str> = match self.homes.get(&id) {
            Some(h) if &*h.replica == home => h.replica.clone(),
            _ => home.into(),
        };
        let fresh = self
            .homes
            .insert(
                id.clone(),
                Home {
                    replica,
                    seen: now,
                    client: owner.clone(),
                },
            )
            .is_none();
        self.order.push_back((now, id.clone()));
        if let Some(c) = owner {
            let share = self.clients.entry(c.clone()).or_default();
            share.count += usize::from(fresh);
            if share.order.len() >= 2 * share.count + ORDER_SLACK {
                let homes = &self.homes;
                share
                    .order
                    .retain(|(t, id)| homes.get(id).is_some_and(|h| is_current(h, *t, &c)));
            }
            share.order.push_back((now, id));
        }
        while self.homes.len() > self.max {
            self.pop_oldest();
        }
        if self.order.len() > 2 * self.homes.len() + ORDER_SLACK {
            let homes = &self.homes;
            self.order
                .retain(|(t, id)| homes.get(id).is_some_and(|h| h.seen == *t));
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
            if self.homes.get(&id).is_some_and(|h| h.seen == t) {
                self.forget(&id);
                return;
            }
        }
    }

    /// Forget `client`'s least recently seen session.
    fn pop_oldest_of(&mut self, client: &str) {
        loop {
            let Some((t, id)) = self
                .clients
                .get_mut(client)
                .and_then(|s| s.order.pop_front())
            else {
                // Its order ran dry though it counts sessions: cannot happen, but never loop.
                self.clients.remove(client);
                return;
            };
            if self
                .homes
                .get(&id)
                .is_some_and(|h| is_current(h, t, client))
            {
                self.forget(&id);
                return;
            }
        }
    }

    /// Remove a session and its count in its client's share.
    fn forget(&mut self, id: &str) {
        let Some(home) = self.homes.remove(id) else {
            return;
        };
        if let Some(c) = home.client {
            if let Some(share) = self.clients.get_mut(&c) {
                share.count -= 1;
                if share.count == 0 {
                    self.clients.remove(&c);
                } else if share.order.len() > 2 * share.count + ORDER_SLACK {
                    let homes = &self.homes;
                    share
                        .order
                        .retain(|(t, id)| homes.get(id).is_some_and(|h| is_current(h, *t, &c)));
                }
            }
        }
    }

    pub fn len(&self) -> usize {
        self.homes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.homes.is_empty()
    }

    /// Clients holding at least one session.
    pub fn clients(&self) -> usize {
        self.clients.len()
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
    /// How long a token is honoured after its answer (the idle TTL).
    token_ttl: Duration,
    pub map: parking_lot::Mutex<SessionMap>,
}

/// Seconds since the Unix epoch: tokens expire by the wall clock, which every router shares.
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Sessions {
    pub fn new(key: TokenKey, config: &crate::config::SessionsConfig) -> Self {
        Self {
            key,
            token_ttl: Duration::from_secs(config.idle_ttl_s),
            map: parking_lot::Mutex::new(SessionMap::new(
                config.max_sessions,
                config.max_sessions_per_client,
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
        if let Some(home) = session
            .token
            .as_deref()
            .and_then(|t| self.key.verify(t, unix_now()))
        {
            return Some(home);
        }
        let id = session.id.as_deref()?;
        self.map.lock().get(id, now).map(str::to_owned)
    }

    /// Record where the session went; the token to answer with.
    pub fn record(&self, session: &SessionRef, replica: &str, now: Instant) -> String {
        if let Some(id) = session.id.as_deref() {
            self.map
                .lock()
                .set(id, replica, session.client.as_deref(), now);
        }
        self.key
            .sign(replica, unix_now().saturating_add(self.token_ttl.as_secs()))
    }
}
