//! Router replicas that tell each other where they send prompts (`peers` in the configuration).
//!
//! Routers fed the same KV events see the same caches, but an engine reports a prompt's blocks
//! only once it has computed them. Until then each router knows only its own placements (its
//! pending blocks, `state::index`): behind a round-robin balancer, the next request of a new
//! prefix group reaches another router, which sees the group nowhere and may start a copy on
//! another replica. Measured on the simulator fleet (`bench/results-replicas/`): four routers
//! kept 0.92 of one router's hit rate, and running four while one routed kept all of it, so the
//! loss is the private placements. Here every placement is published (ZMQ PUB, fire and
//! forget) and every router counts the others' as its own pending blocks until the sender's
//! request has its first byte, and in its approximate index. No router waits for another or
//! agrees with it on anything: a lost message costs hit rate, never a request, and a router
//! with no peers routes as before.
//!
//! With `peers.key_file`, every message is sealed with the group's key and a receiver drops
//! what does not open with it or was sent more than 30 s from its clock (`wire::PeerKey`).
//! The sockets are `warmpath-zmtp`'s: a frame announcing more than a message may hold closes
//! its connection before anything is buffered for it.

pub mod wire;

use crate::errors::PeersError;
use crate::metrics::{Metrics, PeerLabels};
use crate::state::index::{PrefillListener, SharedIndex};
use crate::state::publish::TableReader;
use crate::state::table::Table;
use bytes::Bytes;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use warmpath_routing::index::{PendingId, PrefixIndex};
use warmpath_routing::{BlockHash, ReplicaId};
use warmpath_zmtp::{Options, PubSocket, SubSocket};
use wire::{Message, PeerKey};

/// The sockets' bounds: one topic frame and one payload frame of at most
/// `wire::MAX_MESSAGE_BYTES`.
fn socket_options() -> Options {
    let mut options =
        Options::default().with_max_message_bytes(wire::MAX_MESSAGE_BYTES + wire::TOPIC.len());
    options.limits.max_frames = 2;
    options
}

/// The key `peers.key_file` holds.
fn load_key(path: &Path) -> Result<PeerKey, PeersError> {
    let secret = crate::config::read_secret(path, "peers key")
        .map_err(|e| PeersError::Key(e.to_string()))?;
    PeerKey::from_secret(&secret).map_err(|e| PeersError::Key(format!("{}: {e}", path.display())))
}

/// This router's side of peering: placements go out through it.
pub struct Peers {
    origin: u64,
    block_bytes: u32,
    tx: mpsc::Sender<Message>,
    metrics: Arc<Metrics>,
}

impl Peers {
    /// Binds `peers.listen` and starts the publisher and the followers of `peers.routers`, as
    /// the current table's configuration has them (read at start); `None` when peering is off.
    /// The tasks end when `shutdown` turns true.
    pub async fn start(
        tables: TableReader,
        index: SharedIndex,
        metrics: Arc<Metrics>,
        shutdown: watch::Receiver<bool>,
    ) -> Result<Option<(Arc<Peers>, Vec<JoinHandle<()>>)>, PeersError> {
        let table = tables.current();
        let config = &table.config.peers;
        let Some(listen) = &config.listen else {
            return Ok(None);
        };
        let key = config
            .key_file
            .as_deref()
            .map(load_key)
            .transpose()?
            .map(Arc::new);
        let mut socket = PubSocket::new(socket_options());
        let bound = socket
            .bind(listen)
            .await
            .map_err(|source| PeersError::Bind {
                endpoint: listen.clone(),
                source,
            })?;
        tracing::info!(endpoint = %bound, routers = ?config.routers, sealed = key.is_some(), "publishing placements to peers");
        if key.is_none() {
            tracing::warn!(
                endpoint = %bound,
                "peering is unauthenticated (no peers.key_file): whoever reaches this port reads every placement, and whoever peers.routers resolves to can inject placements"
            );
        }
        let origin = rand::random::<u64>();
        let block_bytes = u32::try_from(table.config.index.block_bytes).unwrap_or(0);
        let (tx, rx) = mpsc::channel(config.queue);
        let receiver = Arc::new(Receiver {
            origin,
            block_bytes,
            tables,
            index,
            metrics: metrics.clone(),
            remembered: parking_lot::Mutex::new(Remembered::new(config.max_remembered)),
            key: key.clone(),
        });
        let tasks = vec![
            tokio::spawn(publish(socket, key, rx, metrics.clone(), shutdown.clone())),
            tokio::spawn(follow_all(
                config.routers.clone(),
                Duration::from_millis(config.resolve_every_ms),
                receiver,
                shutdown,
            )),
        ];
        let peers = Arc::new(Peers {
            origin,
            block_bytes,
            tx,
            metrics,
        });
        Ok(Some((peers, tasks)))
    }

    /// A request with these blocks was sent to `replica`; `pending`: its id in this router's
    /// pending index (the replica is followed through KV events), ended by [`Self::prefilled`].
    pub fn placed(
        &self,
        model: &str,
        replica: &str,
        hashes: &[BlockHash],
        pending: Option<PendingId>,
    ) {
        if hashes.is_empty() {
            return;
        }
        self.send(Message::Placed {
            origin: self.origin,
            pending,
            model: model.to_owned(),
            replica: replica.to_owned(),
            block_bytes: self.block_bytes,
            hashes: hashes.to_vec(),
        });
    }

    fn send(&self, message: Message) {
        // The request path never waits for peers: a full queue drops the message.
        if self.tx.try_send(message).is_err() {
            count(&self.metrics, "dropped");
        }
    }
}

impl PrefillListener for Peers {
    /// The pending request `id` has its first byte (or ended).
    fn prefilled(&self, id: PendingId) {
        self.send(Message::Prefilled {
            origin: self.origin,
            id,
        });
    }
}

async fn publish(
    socket: PubSocket,
    key: Option<Arc<PeerKey>>,
    mut rx: mpsc::Receiver<Message>,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let message = tokio::select! {
            m = rx.recv() => match m {
                Some(m) => m,
                None => return,
            },
            _ = shutdown.changed() => return,
        };
        let payload = wire::encode(&message, key.as_deref(), wire::now_ms());
        // Queued for every follower that keeps up; one that does not loses it alone.
        socket.send(vec![Bytes::from_static(wire::TOPIC), Bytes::from(payload)]);
        count(&metrics, "sent");
    }
}

/// Follows every address the configured routers resolve to, resolving again every `every`:
/// one task per address, started when it appears and stopped when it goes. A name that does
/// not resolve keeps the addresses it had.
async fn follow_all(
    routers: Vec<String>,
    every: Duration,
    receiver: Arc<Receiver>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut resolved: HashMap<String, BTreeSet<String>> = HashMap::new();
    let mut following: HashMap<String, tokio::task::AbortHandle> = HashMap::new();
    loop {
        for router in &routers {
            match resolve(router).await {
                Ok(addrs) => {
                    resolved.insert(router.clone(), addrs);
                }
                Err(e) => {
                    tracing::warn!(%router, "cannot resolve a peer router, keeping its last addresses: {e}")
                }
            }
        }
        let want: BTreeSet<&String> = resolved.values().flatten().collect();
        following.retain(|addr, task| {
            let keep = want.contains(addr);
            if !keep {
                task.abort();
            }
            keep
        });
        for addr in want {
            if !following.contains_key(addr) {
                let task = tokio::spawn(follow(addr.clone(), receiver.clone()));
                following.insert(addr.clone(), task.abort_handle());
            }
        }
        receiver.metrics.peers.followed.set(following.len() as i64);
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = shutdown.changed() => break,
        }
    }
    for task in following.values() {
        task.abort();
    }
}

/// `tcp://HOST:PORT` as the `tcp://IP:PORT` endpoints HOST has.
async fn resolve(endpoint: &str) -> std::io::Result<BTreeSet<String>> {
    let rest = endpoint.strip_prefix("tcp://").unwrap_or(endpoint);
    let addrs = tokio::net::lookup_host(rest).await?;
    Ok(addrs.map(|a| format!("tcp://{a}")).collect())
}

/// Receive one router's placements until the task is aborted (the socket reconnects by
/// itself).
async fn follow(endpoint: String, receiver: Arc<Receiver>) {
    let mut socket = SubSocket::new(socket_options());
    socket.subscribe(wire::TOPIC);
    if let Err(e) = socket.connect(&endpoint) {
        tracing::warn!(%endpoint, "cannot follow a peer router: {e}");
        return;
    }
    tracing::info!(%endpoint, "following a peer router's placements");
    while let Ok(frames) = socket.recv().await {
        receiver.apply(&frames);
    }
}

/// Applies the other routers' messages to this router's index.
struct Receiver {
    origin: u64,
    block_bytes: u32,
    tables: TableReader,
    index: SharedIndex,
    metrics: Arc<Metrics>,
    remembered: parking_lot::Mutex<Remembered>,
    key: Option<Arc<PeerKey>>,
}

impl Receiver {
    fn apply(&self, frames: &[Bytes]) {
        let message = match wire::decode(frames, self.key.as_deref(), wire::now_ms()) {
            Ok(m) => m,
            Err(e) => {
                let kind = match e {
                    wire::WireError::Unauthenticated => "unauthenticated",
                    wire::WireError::Stale { .. } => "stale",
                    _ => "undecodable",
                };
                count(&self.metrics, kind);
                tracing::debug!("placement message dropped ({kind}): {e}");
                return;
            }
        };
        if message.origin() == self.origin {
            count(&self.metrics, "own");
            return;
        }
        match message {
            Message::Placed {
                origin,
                pending,
                model,
                replica,
                block_bytes,
                hashes,
            } => {
                if block_bytes != self.block_bytes {
                    count(&self.metrics, "other_hashing");
                    return;
                }
                let Some(replica) = find(&self.tables.current(), &model, &replica) else {
                    count(&self.metrics, "unknown_replica");
                    return;
                };
                let mut index = self.index.lock();
                index.on_routed(replica, &hashes);
                if let Some(id) = pending {
                    let local = index.pending().insert(replica, &hashes, Instant::now());
                    drop(index);
                    self.remembered.lock().insert((origin, id), local);
                }
                count(&self.metrics, "placed");
            }
            Message::Prefilled { origin, id } => {
                let local = self.remembered.lock().take((origin, id));
                if let Some(local) = local {
                    self.index.lock().pending().prefilled(local, Instant::now());
                    count(&self.metrics, "prefilled");
                }
            }
        }
    }
}

/// The replica named `name` among the ones serving (or prefilling for) `model`.
fn find(table: &Table, model: &str, name: &str) -> Option<ReplicaId> {
    [table.candidates(model), table.prefill_candidates(model)]
        .into_iter()
        .flatten()
        .flat_map(|c| c.iter())
        .find(|c| &*c.replica.name == name)
        .map(|c| c.replica.id)
}

fn count(metrics: &Metrics, kind: &'static str) {
    metrics
        .peers
        .messages
        .get_or_create(&PeerLabels { kind })
        .inc();
}

/// Peers' pending placements by (origin, their id), to end them when their prefill is done;
/// at most `max` (the oldest forgotten first: their blocks still end by the pending bounds).
#[derive(Debug)]
struct Remembered {
    max: usize,
    ids: HashMap<(u64, u64), PendingId>,
    order: VecDeque<((u64, u64), PendingId)>,
}

impl Remembered {
    fn new(max: usize) -> Self {
        Self {
            max: max.max(1),
            ids: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    fn insert(&mut self, key: (u64, u64), local: PendingId) {
        self.ids.insert(key, local);
        self.order.push_back((key, local));
        while self.order.len() > self.max {
            let Some((old, old_local)) = self.order.pop_front() else {
                break;
            };
            // Only the entry this record was made for (the key may have been taken since).
            if self.ids.get(&old) == Some(&old_local) {
                self.ids.remove(&old);
            }
        }
    }

    fn take(&mut self, key: (u64, u64)) -> Option<PendingId> {
        self.ids.remove(&key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembered_placements_are_bounded_and_taken_once() {
        let mut r = Remembered::new(3);
        for i in 0..10u64 {
            r.insert((1, i), i + 100);
            assert!(r.ids.len() <= 3 && r.order.len() <= 3);
        }
        assert_eq!(r.take((1, 9)), Some(109));
        assert_eq!(r.take((1, 9)), None);
        // Forgotten: the oldest beyond the bound.
        assert_eq!(r.take((1, 6)), None);
        assert_eq!(r.take((1, 7)), Some(107));
        // Another origin's id 8 is another placement.
        assert_eq!(r.take((2, 8)), None);
        assert_eq!(r.take((1, 8)), Some(108));
    }
}
