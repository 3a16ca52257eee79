//! PUB, SUB, DEALER and ROUTER talking to each other over loopback.

mod common;

use std::time::Duration;

use bytes::Bytes;
use warmpath_zmtp::{DealerSocket, Options, PubSocket, RouterSocket, SubSocket};

fn frames(parts: &[&'static [u8]]) -> Vec<Bytes> {
    parts.iter().map(|p| Bytes::from_static(p)).collect()
}

fn fast() -> Options {
    Options {
        reconnect_min: Duration::from_millis(10),
        reconnect_max: Duration::from_millis(50),
        ..Options::default()
    }
}

/// Publishes `message` until `sub` receives something (a subscriber joins in the background,
/// and what is published before it has subscribed is not for it).
async fn first_received(
    publisher: &PubSocket,
    message: &[&'static [u8]],
    sub: &mut SubSocket,
) -> Vec<Bytes> {
    for _ in 0..200 {
        publisher.send(frames(message));
        if let Ok(got) = tokio::time::timeout(Duration::from_millis(20), sub.recv()).await {
            return got.unwrap();
        }
    }
    panic!("nothing reached the subscriber");
}

#[tokio::test]
async fn a_subscriber_gets_only_its_topics_from_a_bound_publisher() {
    let mut publisher = PubSocket::new(fast());
    let endpoint = publisher.bind("tcp://127.0.0.1:0").await.unwrap();
    let mut sub = SubSocket::new(fast());
    sub.subscribe(b"kv@");
    sub.connect(&endpoint).unwrap();
    let got = first_received(&publisher, &[b"kv@a", b"1", b"payload"], &mut sub).await;
    assert_eq!(got, frames(&[b"kv@a", b"1", b"payload"]));
    assert_eq!(
        publisher.send(frames(&[b"other", b"x"])),
        0,
        "no one subscribed to it"
    );
    assert_eq!(publisher.send(frames(&[b"kv@b", b"2"])), 1);
    let next = tokio::time::timeout(Duration::from_secs(5), sub.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next, frames(&[b"kv@b", b"2"]));
}

#[tokio::test]
async fn a_bound_subscriber_hears_many_connecting_publishers_and_they_reconnect() {
    let mut sub = SubSocket::new(fast());
    sub.subscribe(b"");
    let endpoint = sub.bind("tcp://127.0.0.1:0").await.unwrap();
    let mut a = PubSocket::new(fast());
    a.connect(&endpoint).unwrap();
    let mut b = PubSocket::new(fast());
    b.connect(&endpoint).unwrap();
    assert_eq!(first_received(&a, &[b"a"], &mut sub).await, frames(&[b"a"]));
    // Drain what `a` sent until the first one arrived.
    while tokio::time::timeout(Duration::from_millis(50), sub.recv())
        .await
        .is_ok()
    {}
    assert_eq!(first_received(&b, &[b"b"], &mut sub).await, frames(&[b"b"]));
    while tokio::time::timeout(Duration::from_millis(50), sub.recv())
        .await
        .is_ok()
    {}
    // A publisher connecting to a subscriber that is not there yet keeps trying.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let later = format!("tcp://127.0.0.1:{port}");
    let mut c = PubSocket::new(fast());
    c.connect(&later).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut sub2 = SubSocket::new(fast());
    sub2.subscribe(b"");
    sub2.bind(&later).await.unwrap();
    assert_eq!(
        first_received(&c, &[b"c"], &mut sub2).await,
        frames(&[b"c"])
    );
}

#[tokio::test]
async fn a_subscriber_reconnects_to_a_restarted_publisher() {
    let mut publisher = PubSocket::new(fast());
    let endpoint = publisher.bind("tcp://127.0.0.1:0").await.unwrap();
    let mut sub = SubSocket::new(fast());
    sub.subscribe(b"t");
    sub.connect(&endpoint).unwrap();
    first_received(&publisher, &[b"t1"], &mut sub).await;
    drop(publisher);
    let mut publisher = PubSocket::new(fast());
    let mut bound = None;
    for _ in 0..100 {
        // The old listener's port is free again once its task has been aborted.
        if let Ok(e) = publisher.bind(&endpoint).await {
            bound = Some(e);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(bound.as_deref(), Some(endpoint.as_str()));
    while tokio::time::timeout(Duration::from_millis(20), sub.recv())
        .await
        .is_ok()
    {}
    assert_eq!(
        first_received(&publisher, &[b"t2"], &mut sub).await,
        frames(&[b"t2"])
    );
}

/// A subscriber that reads nothing: its queue fills and drops, while the publisher's `send`
/// never waits and a reading subscriber gets every message.
#[tokio::test]
async fn a_slow_subscriber_loses_messages_and_slows_no_one() {
    let options = Options { queue: 8, ..fast() };
    let mut publisher = PubSocket::new(options.clone());
    let endpoint = publisher.bind("tcp://127.0.0.1:0").await.unwrap();
    // A raw subscriber that subscribes and then never reads.
    let mut stalled = common::Raw::ready(&endpoint, "SUB", 1).await;
    let mut subscribe = bytes::BytesMut::new();
    warmpath_zmtp::encode_command(&mut subscribe, "SUBSCRIBE", b"");
    tokio::io::AsyncWriteExt::write_all(&mut stalled.stream, &subscribe)
        .await
        .unwrap();
    let mut reader = SubSocket::new(options);
    reader.subscribe(b"");
    reader.connect(&endpoint).unwrap();
    first_received(&publisher, &[b"warm-up"], &mut reader).await;
    while tokio::time::timeout(Duration::from_millis(50), reader.recv())
        .await
        .is_ok()
    {}
    let payload = Bytes::from(vec![7u8; 64 << 10]);
    let started = std::time::Instant::now();
    let mut delivered = 0;
    let mut received = 0;
    for i in 0..2000u32 {
        delivered += publisher.send(vec![Bytes::from(i.to_be_bytes().to_vec()), payload.clone()]);
        // The reading subscriber keeps up (its queue holds 8).
        if i % 4 == 3 {
            while let Ok(Ok(_)) =
                tokio::time::timeout(Duration::from_millis(200), reader.recv()).await
            {
                received += 1;
                if received == i + 1 {
                    break;
                }
            }
        }
    }
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(received, 2000, "the reading subscriber got every message");
    // 2000 × 64 KiB = 125 MiB to a subscriber that reads nothing: most was dropped.
    assert!(delivered < 2000 + 1000, "{delivered}");
    assert_eq!(publisher.subscribers(), 2);
}

#[tokio::test]
async fn a_dealer_and_a_router_exchange_messages_by_identity() {
    let mut router = RouterSocket::new(fast());
    let endpoint = router.bind("tcp://127.0.0.1:0").await.unwrap();
    let mut a = DealerSocket::connect(&endpoint, fast()).await.unwrap();
    let mut b = DealerSocket::connect(&endpoint, fast()).await.unwrap();
    a.send(&frames(&[b"", b"from a"])).await.unwrap();
    b.send(&frames(&[b"", b"from b"])).await.unwrap();
    let mut identities = std::collections::HashMap::new();
    for _ in 0..2 {
        let m = router.recv().await.unwrap();
        assert_eq!(m.len(), 3);
        identities.insert(m[2].clone(), m[0].clone());
    }
    let id_b = identities[&Bytes::from_static(b"from b")].clone();
    router
        .send(vec![
            id_b.clone(),
            Bytes::new(),
            Bytes::from_static(b"to b"),
        ])
        .await
        .unwrap();
    assert_eq!(b.recv().await.unwrap(), frames(&[b"", b"to b"]));
    let id_a = identities[&Bytes::from_static(b"from a")].clone();
    assert_ne!(id_a, id_b);
    router
        .send(vec![id_a, Bytes::from_static(b"to a")])
        .await
        .unwrap();
    assert_eq!(a.recv().await.unwrap(), frames(&[b"to a"]));
    drop(b);
    // A peer gone is unroutable (once its connection has noticed).
    let mut unroutable = false;
    for _ in 0..100 {
        if router
            .send(vec![id_b.clone(), Bytes::from_static(b"x")])
            .await
            .is_err()
        {
            unroutable = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(unroutable);
}

#[tokio::test]
async fn a_dealer_to_nowhere_fails() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    assert!(
        DealerSocket::connect(&format!("tcp://127.0.0.1:{port}"), fast())
            .await
            .is_err()
    );
    assert!(DealerSocket::connect("udp://127.0.0.1:1", fast())
        .await
        .is_err());
}
