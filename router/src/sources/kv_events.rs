//! Following each replica's KV-cache events (vLLM's ZMQ publisher, or `warmpath-sim`'s) into
//! the precise index.
//!
//! One task per replica connects to the endpoint its engine binds (`kv_events` in the pool,
//! or the replica's `kv_events_endpoint`), so that any number of router replicas can each
//! follow every engine and, fed the same events, make the same choices. Sequence numbers say
//! whether the view is complete ([`KvMode`]):
//! - the first message seen is number 0: the router has seen the engine's cache from empty,
//!   `Fresh`; a later number: events were missed before it connected, `Uncertain`;
//! - a number below the last one: the engine restarted (its cache is empty again): the
//!   replica's blocks are forgotten, and the view is `Fresh` again when the number is 0;
//! - a gap (a number skipped): `Uncertain`;
//! - `AllBlocksCleared`: the cache is empty, so the view is complete again, `Fresh`;
//! - a stored block whose parent was never seen: `Uncertain`.
//!
//! With the engine's replay endpoint configured, missed messages (before the first one seen,
//! or in a gap) are fetched from it before the next one is applied, so a router that starts
//! after the engines, or drops messages, still reaches `Fresh` while the engine keeps them.
//!
//! An uncertain replica is matched by the better of its events and the approximate index
//! (see `crate::choice`). When the replica leaves the configuration or its endpoint changes,
//! its blocks are forgotten and the task starts over.

use crate::backoff::Backoff;
use crate::metrics::{KvEventLabels, Metrics, ReplicaLabels};
use crate::state::index::SharedPrecise;
use crate::state::publish::TableReader;
use crate::state::replica::{KvMode, KvSource, KvStatus, ReplicaState};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use warmpath_kv_events::subscriber::{KvEventSubscriber, SubscribeError};
use warmpath_kv_events::{KvEvent, KvMessage};
use warmpath_routing::index::ApplyError;

/// How often the task looks for a changed endpoint while connected.
const RECHECK: Duration = Duration::from_secs(1);
/// Messages decoded ahead of the index (a burst of events from a busy engine).
const QUEUE: usize = 1024;
/// Messages one replay may bring (vLLM keeps 10,000 batches by default).
const MAX_REPLAY: usize = 100_000;
/// How long a replay may take; the live stream waits meanwhile (its messages queue).
const REPLAY_TIMEOUT: Duration = Duration::from_secs(5);

/// Follow `replica`'s events until the router stops (the task is aborted with the replica).
pub async fn run(
    replica: Arc<ReplicaState>,
    tables: TableReader,
    precise: SharedPrecise,
    metrics: Arc<Metrics>,
) {
    // However the task ends (the replica removed aborts it), its blocks are forgotten: ids are
    // reused, and a new replica must not inherit them.
    let _forget = Forget {
        replica: replica.clone(),
        precise: precise.clone(),
        metrics: metrics.clone(),
    };
    let mut backoff = Backoff::new();
    loop {
        if tables.closed() {
            return;
        }
        let Some(source) = replica.kv_source() else {
            tokio::time::sleep(RECHECK).await;
            continue;
        };
        let subscriber = match KvEventSubscriber::connect_with(
            &source.endpoint,
            &source.topic,
            source.max_message_bytes,
        )
        .await
        {
            Ok(s) => s,
            Err(e) => {
                backoff
                    .failed(|| tracing::warn!(replica = %replica.name, endpoint = %source.endpoint, "cannot subscribe to KV events, retrying: {e}"))
                    .await;
                continue;
            }
        };
        backoff.succeeded();
        tracing::info!(replica = %replica.name, endpoint = %source.endpoint, "following KV events");
        follow(&replica, &source, subscriber, &precise, &metrics).await;
        forget(&replica, &precise, &metrics);
    }
}

/// Apply messages until the endpoint changes or the socket fails.
async fn follow(
    replica: &ReplicaState,
    source: &KvSource,
    mut subscriber: KvEventSubscriber,
    precise: &SharedPrecise,
    metrics: &Metrics,
) {
    *replica.kv.lock() = KvStatus {
        mode: KvMode::Uncertain,
        ..KvStatus::default()
    };
    set_mode(replica, metrics, KvMode::Uncertain);
    // The socket is read by its own task, so that waiting for a message is never cancelled
    // half-way by the endpoint check.
    let (tx, mut rx) = mpsc::channel(QUEUE);
    let reader = tokio::spawn(async move {
        loop {
            let got = subscriber.recv().await;
            let fatal = matches!(got, Err(SubscribeError::Zmtp(_)));
            if tx.send(got).await.is_err() || fatal {
                return;
            }
        }
    });
    loop {
        tokio::select! {
            got = rx.recv() => match got {
                Some(Ok(message)) => {
                    if let Some(endpoint) = &source.replay {
                        catch_up(replica, endpoint, source.max_message_bytes, message.seq, precise, metrics).await;
                    }
                    apply(replica, precise, metrics, message)
                }
                Some(Err(SubscribeError::Decode(e))) => {
                    count(metrics, "undecodable");
                    tracing::debug!(replica = %replica.name, "undecodable KV-event message: {e}");
                    // What it said is lost: the view may miss blocks.
                    mark(replica, metrics, KvMode::Uncertain);
                }
                Some(Err(e)) => {
                    tracing::warn!(replica = %replica.name, "KV-event socket failed, reconnecting: {e}");
                    break;
                }
                None => break,
            },
            _ = tokio::time::sleep(RECHECK) => {
                if replica.kv_source().as_ref() != Some(source) {
                    break;
                }
            }
        }
    }
    reader.abort();
}

/// Before a message numbered `seq`: when messages before it were missed (the first one seen
/// is not number 0, or numbers were skipped), fetch them from the engine's replay endpoint and
/// apply them in order, so that the view stays complete. What the engine no longer keeps stays
/// missed (and the replica uncertain).
async fn catch_up(
    replica: &ReplicaState,
    endpoint: &str,
    max_message_bytes: usize,
    seq: u64,
    precise: &SharedPrecise,
    metrics: &Metrics,
) {
    let from = match replica.kv.lock().last_seq {
        None if seq > 0 => 0,
        Some(last) if seq > last.wrapping_add(1) && last < seq => last + 1,
        _ => return,
    };
    let missing = usize::try_from(seq - from).unwrap_or(usize::MAX);
    match warmpath_kv_events::subscriber::replay(
        endpoint,
        from,
        missing.min(MAX_REPLAY),
        max_message_bytes,
        REPLAY_TIMEOUT,
    )
    .await
    {
        Ok(messages) => {
            count(metrics, "replay");
            for m in messages
                .into_iter()
                .filter(|m| m.seq >= from && m.seq < seq)
            {
                apply(replica, precise, metrics, m);
            }
        }
        Err(e) => {
            count(metrics, "replay_failed");
            tracing::debug!(replica = %replica.name, %endpoint, "KV-event replay failed: {e}");
        }
    }
}

/// One message: check its sequence number, then apply its events.
pub(crate) fn apply(
    replica: &ReplicaState,
    precise: &SharedPrecise,
    metrics: &Metrics,
    message: KvMessage,
) {
    let seq = message.seq;
    let mut index = precise.lock();
    let mut status = replica.kv.lock();
    match status.last_seq {
        None => status.mode = fresh_if(seq == 0),
        Some(last) if seq == last.wrapping_add(1) => {}
        Some(last) if seq <= last => {
            // The engine restarted: its cache is empty, and so is our view of it.
            count(metrics, "restart");
            index.remove_replica(replica.id);
            status.mode = fresh_if(seq == 0);
        }
        Some(_) => {
            count(metrics, "gap");
            status.mode = KvMode::Uncertain;
        }
    }
    status.last_seq = Some(seq);
    for event in &message.batch.events {
        let kind = match event {
            KvEvent::BlockStored { block_size, .. } => {
                status.block_size = Some(*block_size as usize);
                "stored"
            }
            KvEvent::BlockRemoved { .. } => "removed",
            KvEvent::AllBlocksCleared => {
                status.mode = KvMode::Fresh;
                "cleared"
            }
        };
        match index.apply(replica.id, event) {
            Ok(applied) => {
                count(metrics, kind);
                if applied.evicted > 0 {
                    // A bound bit: the view has drifted from the engine's.
                    count(metrics, "bound_evicted");
                    status.mode = KvMode::Uncertain;
                }
            }
            Err(ApplyError::UnknownParent) => {
                count(metrics, "unknown_parent");
                status.mode = KvMode::Uncertain;
            }
            Err(ApplyError::BlockSizeChanged { .. }) => {
                // Only a restarted engine changes its block size: its cache is new.
                count(metrics, "restart");
                index.remove_replica(replica.id);
                status.mode = KvMode::Uncertain;
                if let Err(e) = index.apply(replica.id, event) {
                    tracing::debug!(replica = %replica.name, "KV event not applied: {e}");
                }
            }
            Err(e) => {
                count(metrics, "malformed");
                tracing::debug!(replica = %replica.name, "KV event not applied: {e}");
            }
        }
    }
    let mode = status.mode;
    drop(status);
    drop(index);
    set_mode(replica, metrics, mode);
}

fn fresh_if(complete: bool) -> KvMode {
    if complete {
        KvMode::Fresh
    } else {
        KvMode::Uncertain
    }
}

fn mark(replica: &ReplicaState, metrics: &Metrics, mode: KvMode) {
    replica.kv.lock().mode = mode;
    set_mode(replica, metrics, mode);
}

/// The subscription ended: nothing the router knew of this replica's cache is current.
fn forget(replica: &ReplicaState, precise: &SharedPrecise, metrics: &Metrics) {
    precise.lock().remove_replica(replica.id);
    *replica.kv.lock() = KvStatus::default();
    // Only a series that exists: a replica removed from the configuration has lost its series,
    // and its subscription ending after that must not bring one back.
    let labels = ReplicaLabels {
        replica: replica.name.clone(),
    };
    if let Some(mode) = metrics.replicas.kv_mode.get(&labels) {
        mode.set(0);
    }
}

struct Forget {
    replica: Arc<ReplicaState>,
    precise: SharedPrecise,
    metrics: Arc<Metrics>,
}

impl Drop for Forget {
    fn drop(&mut self) {
        forget(&self.replica, &self.precise, &self.metrics);
    }
}

fn count(metrics: &Metrics, kind: &'static str) {
    metrics
        .index
        .kv_events
        .get_or_create(&KvEventLabels { kind })
        .inc();
}

fn set_mode(replica: &ReplicaState, metrics: &Metrics, mode: KvMode) {
    let value = match mode {
        KvMode::Off => 0,
        KvMode::Uncertain => 1,
        KvMode::Fresh => 2,
    };
    metrics
        .replicas
        .kv_mode
        .get_or_create(&ReplicaLabels {
            replica: replica.name.clone(),
        })
        .set(value);
}
