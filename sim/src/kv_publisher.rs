//! Publishes a replica's KV events over ZMQ the way vLLM does: a PUB socket that connects to
//! a non-wildcard endpoint (the subscriber binds it) or binds a wildcard one, sending
//! `[topic, seq, payload]` with one sequence number per batch.
//!
//! The queue to the socket is bounded: when no one keeps up, batches are dropped (and the
//! sequence numbers show the gap), so memory stays bounded.
//!
//! With a replay endpoint, the last `buffer` batches are kept and served as vLLM's
//! `ZmqEventPublisher` serves them: a ROUTER socket takes `[identity, "", start_seq]` and
//! answers `[identity, "", topic, seq, payload]` for every kept batch from `start_seq` on, then
//! the end marker `[identity, "", "", 0xFF×8, ""]`.

use std::collections::VecDeque;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tokio::sync::mpsc;
use warmpath_kv_events::{encode_message, EventBatch, KvEvent};
use warmpath_zmtp::{Options, PubSocket, RouterSocket};

/// The sequence number vLLM sends to end a replay (-1 as a signed 8-byte integer).
pub const END_SEQ: [u8; 8] = [0xFF; 8];

/// Batches queued per replica before new ones are dropped.
pub const QUEUE: usize = 1024;

/// Whether vLLM would bind (rather than connect to) this endpoint.
pub fn is_wildcard(endpoint: &str) -> bool {
    endpoint.contains("://*") || endpoint.contains("://0.0.0.0") || endpoint.contains("://[::]")
}

/// The endpoint replica `index` uses: wildcard endpoints are bound at port + index, so that
/// replicas of one process do not collide (vLLM offsets by data-parallel rank likewise).
pub fn endpoint_for(endpoint: &str, index: usize) -> String {
    if !is_wildcard(endpoint) || index == 0 {
        return endpoint.to_owned();
    }
    match endpoint.rsplit_once(':') {
        Some((head, port)) => match port.parse::<u16>() {
            Ok(p) => format!("{head}:{}", p as usize + index),
            Err(_) => endpoint.to_owned(),
        },
        None => endpoint.to_owned(),
    }
}

/// Starts the publisher task; send batches of events into the returned queue. `replay`: the
/// replay endpoint and how many batches it keeps.
pub fn spawn(
    endpoint: String,
    topic: String,
    replay: Option<(String, usize)>,
) -> mpsc::Sender<Vec<KvEvent>> {
    let (tx, rx) = mpsc::channel(QUEUE);
    tokio::spawn(run(endpoint, topic, replay, rx));
    tx
}

async fn run(
    endpoint: String,
    topic: String,
    replay: Option<(String, usize)>,
    mut rx: mpsc::Receiver<Vec<KvEvent>>,
) {
    // Batches are dropped per subscriber when it does not keep up, as vLLM's PUB does.
    let mut socket = PubSocket::new(Options::default());
    let attached = if is_wildcard(&endpoint) {
        socket.bind(&endpoint).await.map(drop)
    } else {
        // The subscriber may come up later: the socket keeps trying, batches are dropped
        // meanwhile.
        socket.connect(&endpoint)
    };
    if let Err(e) = attached {
        tracing::error!(%endpoint, error = %e, "opening the KV-event socket failed");
        return;
    }
    let mut replayer = None;
    if let Some((at, keep)) = replay {
        let mut router = RouterSocket::new(Options::default());
        match router.bind(&at).await {
            Ok(_) => replayer = Some((router, keep, VecDeque::<(u64, Bytes)>::new())),
            Err(e) => {
                tracing::error!(endpoint = %at, error = %e, "binding the replay socket failed")
            }
        }
    }
    let mut seq: u64 = 0;
    loop {
        let events = match &mut replayer {
            None => rx.recv().await,
            Some((router, _, kept)) => tokio::select! {
                events = rx.recv() => events,
                request = router.recv() => {
                    match request {
                        Ok(m) => serve_replay(router, topic.as_bytes(), kept, m).await,
                        Err(e) => tracing::warn!(error = %e, "replay request failed"),
                    }
                    continue;
                }
            },
        };
        let Some(events) = events else { break };
        let batch = EventBatch {
            timestamp: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0),
            events,
            data_parallel_rank: Some(0),
        };
        let frames = match encode_message(topic.as_bytes(), seq, &batch) {
            Ok(f) => f,
            Err(e) => {
                tracing::error!(error = %e, "encoding KV events failed");
                continue;
            }
        };
        let frames: Vec<Bytes> = frames.into_iter().map(Bytes::from).collect();
        if let Some((_, keep, kept)) = &mut replayer {
            if kept.len() >= *keep {
                kept.pop_front();
            }
            kept.push_back((seq, frames[2].clone()));
        }
        seq += 1;
        socket.send(frames);
    }
}

/// Answer one replay request: every kept batch from the asked sequence number on, then the
/// end marker.
async fn serve_replay(
    router: &RouterSocket,
    topic: &[u8],
    kept: &VecDeque<(u64, Bytes)>,
    frames: Vec<Bytes>,
) {
    let (Some(identity), Some(start)) = (frames.first(), frames.last()) else {
        return;
    };
    let Ok(start) = <[u8; 8]>::try_from(start.as_ref()).map(u64::from_be_bytes) else {
        tracing::warn!("replay request without an 8-byte start sequence");
        return;
    };
    for (seq, payload) in kept.iter().filter(|(s, _)| *s >= start) {
        let parts = vec![
            identity.clone(),
            Bytes::new(),
            Bytes::copy_from_slice(topic),
            Bytes::copy_from_slice(&seq.to_be_bytes()),
            payload.clone(),
        ];
        if router.send(parts).await.is_err() {
            return;
        }
    }
    let end = vec![
        identity.clone(),
        Bytes::new(),
        Bytes::new(),
        Bytes::copy_from_slice(&END_SEQ),
        Bytes::new(),
    ];
    let _ = router.send(end).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcard_endpoints_are_bound_at_offset_ports() {
        assert!(!is_wildcard("tcp://127.0.0.1:5557"));
        assert!(is_wildcard("tcp://*:5557"));
        assert_eq!(endpoint_for("tcp://*:5557", 2), "tcp://*:5559");
        assert_eq!(
            endpoint_for("tcp://127.0.0.1:5557", 2),
            "tcp://127.0.0.1:5557"
        );
    }
}
