//! Publishes a replica's KV events over ZMQ the way vLLM does: a PUB socket that connects to
//! a non-wildcard endpoint (the subscriber binds it) or binds a wildcard one, sending
//! `[topic, seq, payload]` with one sequence number per batch.
//!
//! The queue to the socket is bounded: when no one keeps up, batches are dropped (and the
//! sequence numbers show the gap), so memory stays bounded.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tokio::sync::mpsc;
use warmpath_kv_events::{encode_message, EventBatch, KvEvent};
use zeromq::{PubSocket, Socket, SocketSend, ZmqMessage};

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

/// Starts the publisher task; send batches of events into the returned queue.
pub fn spawn(endpoint: String, topic: String) -> mpsc::Sender<Vec<KvEvent>> {
    let (tx, rx) = mpsc::channel(QUEUE);
    tokio::spawn(run(endpoint, topic, rx));
    tx
}

async fn run(endpoint: String, topic: String, mut rx: mpsc::Receiver<Vec<KvEvent>>) {
    let mut socket = PubSocket::new();
    if is_wildcard(&endpoint) {
        // vLLM's (libzmq's) `*` host is every interface; the zeromq crate spells it 0.0.0.0.
        let bind = endpoint.replacen("://*:", "://0.0.0.0:", 1);
        if let Err(e) = socket.bind(&bind).await {
            tracing::error!(%endpoint, error = %e, "binding the KV-event socket failed");
            return;
        }
    } else {
        // The subscriber may come up later: keep trying, dropping batches meanwhile.
        loop {
            tokio::select! {
                r = socket.connect(&endpoint) => match r {
                    Ok(()) => break,
                    Err(e) => {
                        tracing::debug!(%endpoint, error = %e, "KV-event subscriber not reachable yet");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                },
                batch = rx.recv() => if batch.is_none() { return },
            }
        }
    }
    let mut seq: u64 = 0;
    while let Some(events) = rx.recv().await {
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
        seq += 1;
        let frames: Vec<Bytes> = frames.into_iter().map(Bytes::from).collect();
        let msg = ZmqMessage::try_from(frames).expect("three frames");
        if let Err(e) = socket.send(msg).await {
            tracing::warn!(error = %e, "sending KV events failed");
        }
    }
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
