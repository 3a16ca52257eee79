//! Peers that lie about sizes, stall, flood or speak something else: each loses its own
//! connection, and the socket goes on serving well-formed peers.

mod common;

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use common::Raw;
use tokio::io::AsyncWriteExt;
use warmpath_zmtp::{encode_command, Command, Item, Options, PubSocket, SubSocket};

fn options() -> Options {
    Options {
        handshake_timeout: Duration::from_millis(300),
        reconnect_min: Duration::from_millis(10),
        reconnect_max: Duration::from_millis(50),
        ..Options::default()
    }
    .with_max_message_bytes(1 << 20)
}

/// A long frame header announcing `size` bytes (and none of them sent).
fn long_header(flags: u8, size: u64) -> BytesMut {
    let mut out = BytesMut::new();
    out.put_u8(flags | 0x02);
    out.put_u64(size);
    out
}

/// Whether a well-formed publisher connecting now still reaches `sub`.
async fn still_serves(sub: &mut SubSocket, endpoint: &str) -> bool {
    let mut publisher = PubSocket::new(options());
    publisher.connect(endpoint).unwrap();
    for _ in 0..200 {
        publisher.send(vec![
            Bytes::from_static(b"kv@ok"),
            Bytes::from_static(b"hello"),
        ]);
        if let Ok(Ok(m)) = tokio::time::timeout(Duration::from_millis(20), sub.recv()).await {
            return m[1] == Bytes::from_static(b"hello");
        }
    }
    false
}

/// The announced length is refused from its header: `u64::MAX` and 1 TiB, before READY (the
/// handshake's own bound), in a message's first frame, after a MORE frame, and as a command.
/// Had the socket reserved them it would have aborted (1 TiB) or panicked (capacity overflow).
#[tokio::test]
async fn announced_terabyte_frames_close_the_connection_and_nothing_else() {
    let mut sub = SubSocket::new(options());
    sub.subscribe(b"kv@");
    let endpoint = sub.bind("tcp://127.0.0.1:0").await.unwrap();
    for size in [u64::MAX, 1 << 40, (1 << 20) + 1] {
        // Instead of READY.
        let mut raw = Raw::greeted(&endpoint, 1).await;
        raw.stream
            .write_all(&long_header(0x04, size))
            .await
            .unwrap();
        assert!(raw.closed().await, "{size} before READY");
        for (flags, prefix) in [
            (0x00, &b""[..]),
            (0x01, &b""[..]),
            (0x00, &[0x01, 3, b'k', b'v', b'@'][..]),
            (0x04, &b""[..]),
        ] {
            let mut raw = Raw::ready(&endpoint, "PUB", 1).await;
            let mut wire = BytesMut::from(prefix);
            wire.extend_from_slice(&long_header(flags, size));
            raw.stream.write_all(&wire).await.unwrap();
            assert!(raw.closed().await, "{size} {flags:#x} {prefix:?}");
        }
    }
    assert!(still_serves(&mut sub, &endpoint).await);
}

#[tokio::test]
async fn a_message_over_its_total_or_frame_count_closes_the_connection() {
    let mut sub = SubSocket::new(options());
    sub.subscribe(b"");
    let endpoint = sub.bind("tcp://127.0.0.1:0").await.unwrap();
    // Two frames of 600 KiB: each within the frame limit, together over the 1 MiB message.
    let mut raw = Raw::ready(&endpoint, "PUB", 1).await;
    let mut wire = long_header(0x01, 600 << 10);
    wire.put_bytes(0, 600 << 10);
    wire.extend_from_slice(&long_header(0x00, 600 << 10));
    raw.stream.write_all(&wire).await.unwrap();
    assert!(raw.closed().await);
    // 65 empty frames, each with MORE.
    let mut raw = Raw::ready(&endpoint, "PUB", 1).await;
    raw.stream.write_all(&[0x01, 0].repeat(65)).await.unwrap();
    assert!(raw.closed().await);
    assert!(still_serves(&mut sub, &endpoint).await);
}

#[tokio::test]
async fn peers_that_are_not_zmtp_publishers_are_refused() {
    let mut sub = SubSocket::new(options());
    sub.subscribe(b"");
    let endpoint = sub.bind("tcp://127.0.0.1:0").await.unwrap();
    let addr = endpoint.strip_prefix("tcp://").unwrap().to_owned();
    // HTTP.
    let mut http = tokio::net::TcpStream::connect(&addr).await.unwrap();
    http.write_all(&[b'G'; 64]).await.unwrap();
    let mut raw = Raw::from(http);
    assert!(raw.closed().await);
    // A greeting that never finishes: closed at the handshake timeout.
    let mut silent = tokio::net::TcpStream::connect(&addr).await.unwrap();
    silent.write_all(&common::greeting(1)[..20]).await.unwrap();
    let mut raw = Raw::from(silent);
    assert!(raw.closed().await);
    // Another mechanism, another socket type.
    let mut curve = common::greeting(1);
    curve[12..17].copy_from_slice(b"CURVE");
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    s.write_all(&curve).await.unwrap();
    let mut raw = Raw::from(s);
    assert!(raw.closed().await);
    let mut raw = Raw::greeted(&endpoint, 1).await;
    raw.stream.write_all(&common::ready("SUB")).await.unwrap();
    assert!(raw.closed().await);
    assert!(still_serves(&mut sub, &endpoint).await);
}

#[tokio::test]
async fn a_bound_socket_holds_at_most_max_connections() {
    let mut sub = SubSocket::new(Options {
        max_connections: 2,
        handshake_timeout: Duration::from_secs(30),
        ..options()
    });
    sub.subscribe(b"");
    let endpoint = sub.bind("tcp://127.0.0.1:0").await.unwrap();
    let _a = Raw::ready(&endpoint, "PUB", 1).await;
    let _b = Raw::ready(&endpoint, "PUB", 1).await;
    let addr = endpoint.strip_prefix("tcp://").unwrap();
    let third = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut raw = Raw::from(third);
    assert!(
        raw.closed().await,
        "the third connection is closed on arrival"
    );
    drop((_a, _b));
    assert!(still_serves(&mut sub, &endpoint).await, "slots come back");
}

#[tokio::test]
async fn pings_are_answered_and_unknown_commands_ignored() {
    let mut sub = SubSocket::new(options());
    sub.subscribe(b"");
    let endpoint = sub.bind("tcp://127.0.0.1:0").await.unwrap();
    let mut raw = Raw::ready(&endpoint, "PUB", 1).await;
    let mut wire = BytesMut::new();
    encode_command(&mut wire, "X-WHATEVER", b"data");
    encode_command(&mut wire, "PING", b"\x00\x64context");
    warmpath_zmtp::encode_message(&mut wire, &[&b"t"[..], b"after"]);
    raw.stream.write_all(&wire).await.unwrap();
    // The SUB first tells its subscription (""), then answers the PING.
    let mut pong = None;
    while let Some(item) = raw.next().await {
        if let Item::Command(Command::Pong) = item {
            pong = Some(item);
            break;
        }
    }
    assert!(pong.is_some());
    let got = tokio::time::timeout(Duration::from_secs(5), sub.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got[1], Bytes::from_static(b"after"));
}

/// A ZMTP 3.0 subscriber subscribes with a message (`0x01` + topic) and cancels with `0x00`;
/// a 3.1 one with SUBSCRIBE and CANCEL. A subscriber asking for too many topics is cut off.
#[tokio::test]
async fn publishers_honour_both_subscription_forms() {
    let mut publisher = PubSocket::new(options());
    let endpoint = publisher.bind("tcp://127.0.0.1:0").await.unwrap();
    let mut old = Raw::ready(&endpoint, "SUB", 0).await;
    let mut new = Raw::ready(&endpoint, "SUB", 1).await;
    let mut wire = BytesMut::new();
    warmpath_zmtp::encode_message(&mut wire, &[&b"\x01a"[..]]);
    old.stream.write_all(&wire).await.unwrap();
    let mut wire = BytesMut::new();
    encode_command(&mut wire, "SUBSCRIBE", b"b");
    new.stream.write_all(&wire).await.unwrap();
    let send = |topic: &'static [u8]| publisher.send(vec![Bytes::from_static(topic)]);
    let mut both = false;
    for _ in 0..100 {
        if send(b"a") == 1 && send(b"b") == 1 {
            both = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(both);
    let mut wire = BytesMut::new();
    warmpath_zmtp::encode_message(&mut wire, &[&b"\x00a"[..]]);
    old.stream.write_all(&wire).await.unwrap();
    let mut wire = BytesMut::new();
    encode_command(&mut wire, "CANCEL", b"b");
    new.stream.write_all(&wire).await.unwrap();
    let mut cancelled = false;
    for _ in 0..100 {
        if send(b"a") == 0 && send(b"b") == 0 {
            cancelled = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(cancelled);
    let mut wire = BytesMut::new();
    for i in 0..=warmpath_zmtp::MAX_SUBSCRIPTIONS {
        encode_command(&mut wire, "SUBSCRIBE", format!("t{i}").as_bytes());
    }
    new.stream.write_all(&wire).await.unwrap();
    assert!(new.closed().await);
}
