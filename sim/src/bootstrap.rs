//! SGLang's prefill/decode disaggregation as a router drives it: one request body, carrying
//! `bootstrap_host`, `bootstrap_port` and `bootstrap_room`, goes concurrently to a prefill
//! server and to a decode server. The prefill server is the one whose bootstrap endpoint
//! (host, bootstrap port) the fields name; it computes the prompt and answers after one token.
//! The decode server waits until the prefill of the same room has finished, takes the prompt's
//! blocks from it, and decodes.
//!
//! Here: the table of rooms a prefill replica keeps ([`Rooms`]), bounded in size and expiring
//! rooms nobody comes for, and which addresses name a replica ([`names_ip`], [`resolve`]).
//! The HTTP side (roles, the wait across processes) is in `server/sglang.rs`.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::kv_cache::{block_hash, BlockHash};

/// Rooms a replica keeps at most: a flood of prefills whose decodes never come fails new
/// rooms instead of growing without bound.
pub const MAX_ROOMS: usize = 4096;

/// How often a table drops expired rooms even when it is not full.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// A replica's bootstrap endpoint and how long pairing may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BootstrapConfig {
    /// Matched against a request's `bootstrap_port`.
    pub port: u16,
    /// How long a decode waits for its prefill, and a finished prefill for its decode.
    pub timeout: Duration,
}

impl Default for BootstrapConfig {
    fn default() -> Self {
        BootstrapConfig {
            port: crate::api::Bootstrap::DEFAULT_PORT,
            timeout: Duration::from_secs(30),
        }
    }
}

/// What identifies a prompt across the two sides: the bodies are meant to be identical, and a
/// router sending different ones must get an error rather than a decode of the wrong blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prompt {
    pub tokens: usize,
    pub hash: BlockHash,
    pub block_size: usize,
}

impl Prompt {
    pub fn of(tokens: &[u32], block_size: usize) -> Self {
        Prompt {
            tokens: tokens.len(),
            hash: block_hash(None, tokens),
            block_size,
        }
    }
}

/// A finished prefill: its prompt, and how many full prompt blocks it computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefilled {
    pub prompt: Prompt,
    pub blocks: usize,
}

impl Prefilled {
    /// How many blocks a decode of `prompt` takes from this prefill.
    pub fn blocks_for(&self, prompt: &Prompt) -> Result<usize, String> {
        if prompt.block_size != self.prompt.block_size {
            return Err(format!(
                "the prefill server uses --block-size {}, the decode server {}",
                self.prompt.block_size, prompt.block_size
            ));
        }
        if *prompt != self.prompt {
            return Err(format!(
                "the prefill request of this room had a different prompt ({} tokens, the decode request has {})",
                self.prompt.tokens, prompt.tokens
            ));
        }
        Ok(self.blocks)
    }
}

/// Why pairing through a room failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RoomError {
    #[error("bootstrap room {0} already has a prefill request")]
    PrefillTaken(u64),
    #[error("bootstrap room {0} already has a decode request")]
    DecodeTaken(u64),
    #[error("too many pending bootstrap rooms on this prefill server (at most {0})")]
    Full(usize),
    #[error("the prefill request of bootstrap room {room} did not finish its prefill within {ms} ms (--bootstrap-timeout-ms)")]
    Timeout { room: u64, ms: u128 },
    #[error("the prefill request of bootstrap room {room} failed: {reason}")]
    PrefillFailed { room: u64, reason: String },
    #[error("bootstrap room {0} was dropped while waiting")]
    Dropped(u64),
}

#[derive(Debug, Clone, PartialEq)]
enum State {
    Waiting,
    Ready(Prefilled),
    Failed(String),
}

#[derive(Debug)]
struct Room {
    /// Tells this room from a later one with the same number, for holders of a stale claim.
    gen: u64,
    expires: Instant,
    prefill: bool,
    decode: bool,
    state: watch::Sender<State>,
}

impl Room {
    /// A room with its decode waiting stays: the decode removes it when it stops waiting,
    /// within its own timeout.
    fn expired(&self, now: Instant) -> bool {
        !self.decode && now >= self.expires
    }
}

#[derive(Debug)]
struct Table {
    rooms: HashMap<u64, Room>,
    next_gen: u64,
    next_sweep: Instant,
}

impl Table {
    /// The room `room`, opened if absent (and the table has space).
    fn open(
        &mut self,
        room: u64,
        now: Instant,
        ttl: Duration,
        cap: usize,
    ) -> Result<&mut Room, RoomError> {
        let full = self.rooms.len() >= cap && !self.rooms.contains_key(&room);
        if full || now >= self.next_sweep {
            self.rooms.retain(|_, r| !r.expired(now));
            self.next_sweep = now + SWEEP_EVERY;
        } else if self.rooms.get(&room).is_some_and(|r| r.expired(now)) {
            self.rooms.remove(&room);
        }
        let len = self.rooms.len();
        match self.rooms.entry(room) {
            Entry::Occupied(e) => Ok(e.into_mut()),
            Entry::Vacant(_) if len >= cap => Err(RoomError::Full(cap)),
            Entry::Vacant(e) => {
                self.next_gen += 1;
                Ok(e.insert(Room {
                    gen: self.next_gen,
                    expires: now + ttl,
                    prefill: false,
                    decode: false,
                    state: watch::channel(State::Waiting).0,
                }))
            }
        }
    }

    fn get(&mut self, room: u64, gen: u64) -> Option<&mut Room> {
        self.rooms.get_mut(&room).filter(|r| r.gen == gen)
    }
}

/// The bootstrap rooms of one prefill replica: a prefill request claims its room and reports
/// when its prefill finished; the decode request of the same room waits for that report.
#[derive(Debug)]
pub struct Rooms {
    table: Arc<Mutex<Table>>,
    ttl: Duration,
    cap: usize,
}

impl Rooms {
    /// Rooms that expire `ttl` after they open or their prefill finishes, `cap` at most.
    pub fn new(ttl: Duration, cap: usize) -> Self {
        Rooms {
            table: Arc::new(Mutex::new(Table {
                rooms: HashMap::new(),
                next_gen: 0,
                next_sweep: Instant::now() + SWEEP_EVERY,
            })),
            ttl,
            cap,
        }
    }

    /// Rooms held now, expired ones not swept yet included.
    pub fn len(&self) -> usize {
        self.table.lock().rooms.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Claims `room` for a prefill request of `prompt`; the ticket reports how it ends.
    pub fn prefill(&self, room: u64, prompt: Prompt) -> Result<PrefillTicket, RoomError> {
        let mut t = self.table.lock();
        let r = t.open(room, Instant::now(), self.ttl, self.cap)?;
        if r.prefill {
            return Err(RoomError::PrefillTaken(room));
        }
        r.prefill = true;
        Ok(PrefillTicket {
            table: self.table.clone(),
            ttl: self.ttl,
            room,
            gen: r.gen,
            prompt,
            done: false,
        })
    }

    /// Claims `room` for a decode request and waits up to `timeout` for its prefill to finish
    /// (it may not have arrived yet). The room is gone afterwards, whatever happened.
    pub async fn await_prefill(
        &self,
        room: u64,
        timeout: Duration,
    ) -> Result<Prefilled, RoomError> {
        let (mut rx, _claim) = {
            let mut t = self.table.lock();
            let r = t.open(room, Instant::now(), self.ttl, self.cap)?;
            if r.decode {
                return Err(RoomError::DecodeTaken(room));
            }
            r.decode = true;
            let claim = DecodeClaim {
                table: self.table.clone(),
                room,
                gen: r.gen,
            };
            (r.state.subscribe(), claim)
        };
        let state = match tokio::time::timeout(
            timeout,
            rx.wait_for(|s| !matches!(s, State::Waiting)),
        )
        .await
        {
            Ok(Ok(s)) => s.clone(),
            Ok(Err(_)) => return Err(RoomError::Dropped(room)),
            Err(_) => {
                return Err(RoomError::Timeout {
                    room,
                    ms: timeout.as_millis(),
                })
            }
        };
        match state {
            State::Ready(p) => Ok(p),
            State::Failed(reason) => Err(RoomError::PrefillFailed { room, reason }),
            State::Waiting => Err(RoomError::Dropped(room)),
        }
    }
}

/// A decode's claim on a room: removes the room when the decode stops waiting, including when
/// its client goes away mid-wait.
struct DecodeClaim {
    table: Arc<Mutex<Table>>,
    room: u64,
    gen: u64,
}

impl Drop for DecodeClaim {
    fn drop(&mut self) {
        let mut t = self.table.lock();
        if t.get(self.room, self.gen).is_some() {
            t.rooms.remove(&self.room);
        }
    }
}

/// A prefill's claim on a room. Reports the finished prefill ([`PrefillTicket::ready`]) or its
/// failure; dropped unreported, it reports the request aborted, so a waiting decode fails at
/// once instead of at its timeout.
#[derive(Debug)]
pub struct PrefillTicket {
    table: Arc<Mutex<Table>>,
    ttl: Duration,
    room: u64,
    gen: u64,
    prompt: Prompt,
    done: bool,
}

impl PrefillTicket {
    pub fn room(&self) -> u64 {
        self.room
    }

    /// The prefill finished, having computed `blocks` full prompt blocks.
    pub fn ready(mut self, blocks: usize) {
        let p = Prefilled {
            prompt: self.prompt,
            blocks,
        };
        self.publish(State::Ready(p));
    }

    pub fn fail(mut self, reason: impl Into<String>) {
        self.publish(State::Failed(reason.into()));
    }

    fn publish(&mut self, s: State) {
        self.done = true;
        let mut t = self.table.lock();
        // A room that expired meanwhile is gone, and so is anyone who waited on it.
        if let Some(r) = t.get(self.room, self.gen) {
            r.state.send_replace(s);
            // The decode has the timeout again to come for a finished prefill.
            r.expires = Instant::now() + self.ttl;
        }
    }
}

impl Drop for PrefillTicket {
    fn drop(&mut self) {
        if !self.done {
            self.publish(State::Failed(
                "the prefill request ended before its prefill finished (client gone or request aborted)".into(),
            ));
        }
    }
}

/// Whether `ip` reaches a replica listening on `listen`: its own address, any loopback address
/// of a replica on loopback (all the sim's replicas share a host), and, for a replica on a
/// wildcard address, any address of this machine.
pub fn names_ip(ip: IpAddr, listen: IpAddr) -> bool {
    ip == listen
        || ip.is_loopback() && (listen.is_loopback() || listen.is_unspecified())
        || listen.is_unspecified() && is_local(ip)
}

/// Binding succeeds only to an address of one of this machine's interfaces.
fn is_local(ip: IpAddr) -> bool {
    !ip.is_unspecified() && !ip.is_multicast() && std::net::UdpSocket::bind((ip, 0)).is_ok()
}

/// The addresses a `bootstrap_host` stands for: an IP (bracketed or not), `localhost`, or a
/// name resolved by the system (nothing when it does not resolve in time).
pub async fn resolve(host: &str) -> Vec<IpAddr> {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if let Ok(ip) = bare.parse() {
        return vec![ip];
    }
    if bare.eq_ignore_ascii_case("localhost") {
        return vec![Ipv4Addr::LOCALHOST.into(), Ipv6Addr::LOCALHOST.into()];
    }
    match tokio::time::timeout(Duration::from_secs(2), tokio::net::lookup_host((bare, 0))).await {
        Ok(Ok(addrs)) => addrs.map(|a| a.ip()).collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompt(n: u32) -> Prompt {
        Prompt::of(&(0..n).collect::<Vec<_>>(), 4)
    }

    #[tokio::test]
    async fn a_decode_gets_the_prefill_whichever_comes_first() {
        let rooms = Rooms::new(Duration::from_secs(5), 8);
        // Prefill first.
        rooms.prefill(1, prompt(10)).unwrap().ready(2);
        let p = rooms.await_prefill(1, Duration::from_millis(10)).await;
        assert_eq!(p.unwrap().blocks_for(&prompt(10)), Ok(2));
        assert!(rooms.is_empty(), "a paired room is gone");

        // Decode first.
        let rooms = Arc::new(rooms);
        let waiter = {
            let rooms = rooms.clone();
            tokio::spawn(async move { rooms.await_prefill(2, Duration::from_secs(5)).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        let t = rooms.prefill(2, prompt(9)).unwrap();
        assert_eq!(rooms.len(), 1, "the decode and the prefill share one room");
        t.ready(2);
        let p = waiter.await.unwrap().unwrap();
        assert!(p
            .blocks_for(&prompt(10))
            .unwrap_err()
            .contains("different prompt"));
        assert!(rooms.is_empty());
    }

    #[tokio::test]
    async fn failures_reach_the_decode_and_timeouts_free_the_room() {
        let rooms = Rooms::new(Duration::from_secs(5), 8);
        drop(rooms.prefill(3, prompt(4)).unwrap());
        let e = rooms.await_prefill(3, Duration::from_secs(5)).await;
        assert!(
            matches!(e, Err(RoomError::PrefillFailed { room: 3, .. })),
            "{e:?}"
        );

        let e = rooms.await_prefill(4, Duration::from_millis(20)).await;
        assert_eq!(e, Err(RoomError::Timeout { room: 4, ms: 20 }));
        assert!(rooms.is_empty());

        let _t = rooms.prefill(5, prompt(4)).unwrap();
        assert_eq!(
            rooms.prefill(5, prompt(4)).unwrap_err(),
            RoomError::PrefillTaken(5)
        );
    }

    #[tokio::test]
    async fn the_table_is_bounded_and_unclaimed_rooms_expire() {
        // Generous margins: the machine running the tests may be busy.
        let rooms = Rooms::new(Duration::from_millis(200), 2);
        rooms.prefill(1, prompt(4)).unwrap().ready(1);
        rooms.prefill(2, prompt(4)).unwrap().ready(1);
        assert_eq!(rooms.prefill(3, prompt(4)).unwrap_err(), RoomError::Full(2));
        tokio::time::sleep(Duration::from_millis(250)).await;
        // The decodes never came: their rooms make way.
        rooms.prefill(3, prompt(4)).unwrap().ready(1);
        assert_eq!(rooms.len(), 1);
        // An expired room is not handed to a late decode.
        tokio::time::sleep(Duration::from_millis(250)).await;
        let e = rooms.await_prefill(3, Duration::from_millis(10)).await;
        assert_eq!(e, Err(RoomError::Timeout { room: 3, ms: 10 }));
    }

    #[test]
    fn loopback_and_wildcard_listeners_answer_to_local_addresses() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let any: IpAddr = "0.0.0.0".parse().unwrap();
        let other: IpAddr = "192.0.2.7".parse().unwrap();
        assert!(names_ip(lo, lo));
        assert!(names_ip("127.0.0.2".parse().unwrap(), lo));
        assert!(names_ip(lo, any));
        assert!(!names_ip(other, lo));
        assert!(!names_ip(other, any), "not an address of this machine");
        assert!(names_ip(other, other));
    }

    #[tokio::test]
    async fn hosts_resolve() {
        assert_eq!(
            resolve("[::1]").await,
            vec![IpAddr::from(Ipv6Addr::LOCALHOST)]
        );
        assert!(resolve("localhost")
            .await
            .contains(&IpAddr::from(Ipv4Addr::LOCALHOST)));
    }
}
