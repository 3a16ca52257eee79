//! Interoperability with libzmq (through pyzmq, as vLLM runs it): a pyzmq PUB that binds (vLLM
//! with a wildcard endpoint) and one that connects (vLLM's default) reach our subscriber; a
//! pyzmq ROUTER answering vLLM's replay protocol serves our replay client; a pyzmq SUB hears
//! our PUB (the peers' publisher) and only its topic.
//!
//! Without pyzmq the tests say so loudly and pass, unless `WARMPATH_PYZMQ_REQUIRED=1` (set by
//! CI): `python3 -m pip install pyzmq`.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use warmpath_kv_events::subscriber::{replay, KvEventSubscriber, DEFAULT_MAX_MESSAGE_BYTES};
use warmpath_kv_events::{encode_message, EventBatch, KvEvent, KvMessage};
use warmpath_zmtp::{Options, PubSocket};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/pyzmq_peer.py");

/// A pyzmq process, killed when dropped (a failing test leaves none behind).
struct Python {
    child: Child,
    stdout: BufReader<ChildStdout>,
}

impl Python {
    /// `None` (after a loud notice) when pyzmq is missing and not required.
    fn spawn(args: &[String]) -> Option<Self> {
        let present = Command::new("python3")
            .args(["-c", "import zmq"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !present {
            warmpath_testkit::optional::skip(
                "the libzmq interoperability test",
                "WARMPATH_PYZMQ_REQUIRED",
                "python3 cannot import zmq (python3 -m pip install pyzmq)",
            );
            return None;
        }
        let mut child = Command::new("python3")
            .arg(SCRIPT)
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Some(Self { child, stdout })
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        assert!(!line.is_empty(), "the pyzmq peer exited");
        line.trim().to_owned()
    }
}

impl Drop for Python {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn hex(frames: &[impl AsRef<[u8]>]) -> String {
    frames
        .iter()
        .map(|f| {
            f.as_ref()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join(":")
}

fn batch(seq: u64) -> [Vec<u8>; 3] {
    let batch = EventBatch {
        timestamp: seq as f64,
        events: vec![KvEvent::AllBlocksCleared],
        data_parallel_rank: Some(0),
    };
    encode_message(b"kv@engine", seq, &batch).unwrap()
}

async fn next(sub: &mut KvEventSubscriber) -> KvMessage {
    tokio::time::timeout(Duration::from_secs(10), sub.recv())
        .await
        .expect("a message from the pyzmq publisher within 10 s")
        .expect("it decodes")
}

#[tokio::test]
async fn pyzmq_publishers_reach_our_subscriber_bound_or_connected() {
    // Another topic beside ours: libzmq filters it out on our subscription.
    let messages = vec![hex(&batch(7)), hex(&[&b"other@x"[..], &[0; 8], b"junk"])];
    let mut args = vec![
        "pub".to_owned(),
        "bind".to_owned(),
        "tcp://127.0.0.1".to_owned(),
    ];
    args.extend(messages.iter().cloned());
    let Some(mut python) = Python::spawn(&args) else {
        return;
    };
    let port = python.line();
    let mut sub = KvEventSubscriber::connect(&format!("tcp://127.0.0.1:{port}"), "kv@")
        .await
        .unwrap();
    for _ in 0..5 {
        let m = next(&mut sub).await;
        assert_eq!((m.topic.as_slice(), m.seq), (&b"kv@engine"[..], 7));
        assert_eq!(m.batch.events, vec![KvEvent::AllBlocksCleared]);
    }
    drop(python);

    // vLLM's default: the engine connects to the router's bound socket.
    let mut sub = KvEventSubscriber::bind("tcp://127.0.0.1:0", "kv@")
        .await
        .unwrap();
    let mut args = vec![
        "pub".to_owned(),
        "connect".to_owned(),
        sub.endpoint().to_owned(),
    ];
    args.extend(messages);
    let mut python = Python::spawn(&args).unwrap();
    python.line();
    for _ in 0..5 {
        assert_eq!(next(&mut sub).await.seq, 7);
    }
}

#[tokio::test]
async fn a_pyzmq_replay_server_serves_our_replay_client() {
    let mut args = vec!["replay".to_owned()];
    args.extend((0..5).map(|seq| hex(&batch(seq))));
    let Some(mut python) = Python::spawn(&args) else {
        return;
    };
    let endpoint = format!("tcp://127.0.0.1:{}", python.line());
    let got = replay(
        &endpoint,
        2,
        100,
        DEFAULT_MAX_MESSAGE_BYTES,
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    assert_eq!(got.iter().map(|m| m.seq).collect::<Vec<_>>(), [2, 3, 4]);
    assert_eq!(got[0].topic, b"kv@engine");
    // At most `max` kept, the rest read through to the end marker.
    let got = replay(
        &endpoint,
        0,
        2,
        DEFAULT_MAX_MESSAGE_BYTES,
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    assert_eq!(got.iter().map(|m| m.seq).collect::<Vec<_>>(), [0, 1]);
}

/// SGLang's replay server leaves the topic frame out; its batches come back all the same.
#[tokio::test]
async fn a_pyzmq_replay_server_in_sglangs_layout_serves_our_replay_client() {
    let mut args = vec!["replay-sglang".to_owned()];
    args.extend((0..4).map(|seq| hex(&batch(seq))));
    let Some(mut python) = Python::spawn(&args) else {
        return;
    };
    let endpoint = format!("tcp://127.0.0.1:{}", python.line());
    let got = replay(
        &endpoint,
        1,
        100,
        DEFAULT_MAX_MESSAGE_BYTES,
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    assert_eq!(got.iter().map(|m| m.seq).collect::<Vec<_>>(), [1, 2, 3]);
    assert!(got[0].topic.is_empty());
}

#[tokio::test]
async fn a_pyzmq_subscriber_hears_our_publisher_on_its_topic_only() {
    let mut publisher = PubSocket::new(Options::default());
    let endpoint = publisher.bind("tcp://127.0.0.1:0").await.unwrap();
    let args = ["sub".to_owned(), endpoint, hex(&[b"kv@"]), "3".to_owned()];
    let Some(mut python) = Python::spawn(&args) else {
        return;
    };
    let sending = tokio::spawn(async move {
        for i in 0u64.. {
            publisher.send(vec![
                Bytes::from_static(b"other"),
                Bytes::from(i.to_be_bytes().to_vec()),
            ]);
            let [topic, seq, payload] = batch(i);
            publisher.send(vec![topic.into(), seq.into(), payload.into()]);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let lines = tokio::task::spawn_blocking(move || {
        let lines: Vec<String> = (0..3).map(|_| python.line()).collect();
        lines
    })
    .await
    .unwrap();
    sending.abort();
    for line in lines {
        let frames: Vec<Vec<u8>> = line
            .split(':')
            .map(|f| {
                (0..f.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&f[i..i + 2], 16).unwrap())
                    .collect()
            })
            .collect();
        let m =
            warmpath_kv_events::decode_message(&frames).expect("the subscriber got whole messages");
        assert_eq!(m.topic, b"kv@engine");
    }
}
