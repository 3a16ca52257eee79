//! The pure parts of session affinity: tokens, the bounded map, the affinity rule.

use super::*;
use proptest::prelude::*;

/// A wall-clock instant, in Unix seconds, for the tokens.
const NOW: u64 = 1_800_000_000;

#[test]
fn a_token_names_its_replica_for_every_holder_of_the_key() {
    let a = TokenKey::new(b"a shared secret of some length");
    let b = TokenKey::new(b"a shared secret of some length");
    let t = a.sign("ml/vllm-3", NOW + 60);
    assert_eq!(b.verify(&t, NOW).as_deref(), Some("ml/vllm-3"));
    // llm-d's form: the endpoint, base64 (here with the tag after a dot).
    assert_eq!(
        URL_SAFE_NO_PAD
            .decode(t.split('.').next().unwrap())
            .unwrap(),
        b"ml/vllm-3"
    );
}

#[test]
fn tampered_and_foreign_tokens_are_ignored() {
    let k = TokenKey::new(b"a shared secret of some length");
    let t = k.sign("vllm-3", NOW + 60);
    let (_, rest) = t.split_once('.').unwrap();
    // Aiming at another replica with the expiry and tag of this one.
    let forged = format!("{}.{rest}", URL_SAFE_NO_PAD.encode("vllm-0"));
    assert_eq!(k.verify(&forged, NOW), None);
    // Another router's key, garbage, a truncated tag, an unsigned llm-d token, the older
    // two-part form, a fourth part.
    assert_eq!(TokenKey::new(b"another secret!!!!").verify(&t, NOW), None);
    let parts: Vec<&str> = t.split('.').collect();
    for bad in [
        "",
        ".",
        "..",
        "not base64!.x.y",
        &t[..t.len() - 2],
        &URL_SAFE_NO_PAD.encode("vllm-3"),
        &format!("{}.{}", parts[0], parts[2]),
        &format!("{t}.x"),
    ] {
        assert_eq!(k.verify(bad, NOW), None, "{bad:?}");
    }
}

#[test]
fn a_token_expires_and_its_expiry_cannot_be_moved() {
    let k = TokenKey::new(b"a shared secret of some length");
    let t = k.sign("vllm-3", NOW + 60);
    assert_eq!(k.verify(&t, NOW + 59).as_deref(), Some("vllm-3"));
    assert_eq!(k.verify(&t, NOW + 60), None);
    assert_eq!(k.verify(&t, NOW + 10_000), None);
    // A later expiry under the old tag.
    let parts: Vec<&str> = t.split('.').collect();
    let later = URL_SAFE_NO_PAD.encode((NOW + 100_000).to_be_bytes());
    let moved = format!("{}.{later}.{}", parts[0], parts[2]);
    assert_eq!(k.verify(&moved, NOW + 61), None);
    // An expiry of the wrong width.
    let short = format!(
        "{}.{}.{}",
        parts[0],
        URL_SAFE_NO_PAD.encode([1u8; 4]),
        parts[2]
    );
    assert_eq!(k.verify(&short, NOW), None);
}

#[test]
fn idle_sessions_are_forgotten() {
    let t = Instant::now();
    let mut m = SessionMap::new(10, 10, Duration::from_secs(60));
    m.set("s1", "r0", None, t);
    assert_eq!(m.get("s1", t + Duration::from_secs(59)), Some("r0"));
    assert_eq!(m.get("s1", t + Duration::from_secs(60)), None);
    // Seen again: the TTL runs from then.
    m.set("s1", "r1", None, t + Duration::from_secs(30));
    assert_eq!(m.get("s1", t + Duration::from_secs(89)), Some("r1"));
    m.expire(t + Duration::from_secs(90));
    assert!(m.is_empty());
}

#[test]
fn the_map_keeps_the_most_recently_seen_sessions_within_its_bound() {
    let t = Instant::now();
    let mut m = SessionMap::new(3, 3, Duration::from_secs(600));
    for (i, s) in ["a", "b", "c"].iter().enumerate() {
        m.set(s, "r0", Some("c1"), t + Duration::from_secs(i as u64));
    }
    m.set("a", "r1", Some("c1"), t + Duration::from_secs(3));
    m.set("d", "r2", Some("c2"), t + Duration::from_secs(4));
    assert_eq!(m.len(), 3);
    let now = t + Duration::from_secs(5);
    assert_eq!(m.get("b", now), None, "the least recently seen goes first");
    assert_eq!(m.get("a", now), Some("r1"));
    assert_eq!(m.get("d", now), Some("r2"));
}

#[test]
fn a_client_inventing_session_ids_churns_through_its_own_share_only() {
    let t = Instant::now();
    let mut m = SessionMap::new(120, 50, Duration::from_secs(600));
    for i in 0..50 {
        m.set(&format!("alice-{i}"), "r0", Some("tenant:alice"), t);
    }
    let later = t + Duration::from_secs(1);
    // A hundred thousand invented ids from one address.
    for i in 0..100_000u32 {
        m.set(&format!("x{i}"), "r1", Some("ip:192.0.2.9"), later);
    }
    assert_eq!(m.len(), 50 + 50);
    assert_eq!(m.clients(), 2);
    for i in 0..50 {
        assert_eq!(m.get(&format!("alice-{i}"), later), Some("r0"), "alice-{i}");
    }
    // Its latest fifty are what it keeps.
    assert_eq!(m.get("x99999", later), Some("r1"));
    assert_eq!(m.get("x99950", later), Some("r1"));
    assert_eq!(m.get("x99949", later), None);
    // An id another client made counts against its maker, whoever names it next.
    m.set("alice-0", "r2", Some("ip:192.0.2.9"), later);
    assert_eq!(m.get("alice-0", later), Some("r2"));
    assert_eq!(
        m.get("x99950", later),
        Some("r1"),
        "not counted against the namer"
    );
    // Requests with no client count against no share; the map's own bound still holds.
    for i in 0..200 {
        m.set(
            &format!("anon-{i}"),
            "r3",
            None,
            later + Duration::from_secs(1),
        );
    }
    assert_eq!(m.len(), 120);
}

proptest! {
    /// Whatever the sequence, the map holds at most its bound, each client at most its share,
    /// and the order queues stay within twice the live sessions (plus slack); the shares' counts
    /// add up to the sessions that have a client.
    #[test]
    fn bounded(ops in proptest::collection::vec((0u8..40, 0u8..4, 0u8..4, 0u64..200), 0..400)) {
        let t = Instant::now();
        let mut m = SessionMap::new(16, 6, Duration::from_secs(100));
        let mut clock = t;
        for (id, home, client, step) in ops {
            clock += Duration::from_millis(step * 10);
            let client = (client > 0).then(|| format!("c{client}"));
            m.set(&format!("s{id}"), &format!("r{home}"), client.as_deref(), clock);
            prop_assert!(m.len() <= 16);
            prop_assert!(m.order.len() <= 2 * m.len() + ORDER_SLACK + 1);
            let mut owned = 0;
            for share in m.clients.values() {
                prop_assert!(share.count >= 1 && share.count <= 6);
                prop_assert!(share.order.len() <= 2 * share.count + ORDER_SLACK + 1);
                owned += share.count;
            }
            prop_assert_eq!(owned, m.homes.values().filter(|h| h.client.is_some()).count());
        }
    }
}

#[test]
fn affinity_is_a_preference_that_yields() {
    let seen = |matched, queued_ahead| Seen {
        matched,
        queued_ahead,
        exact: true,
    };
    // No home yet: the pick becomes it.
    assert_eq!(
        affinity(None, false, seen(0, 0.0), 8),
        (false, Affinity::New)
    );
    // Home gone or not ready.
    assert_eq!(
        affinity(Some(None), false, seen(0, 0.0), 8),
        (false, Affinity::MovedUnavailable)
    );
    // Home is the pick.
    assert_eq!(
        affinity(Some(Some(seen(4, 1.0))), true, seen(4, 1.0), 8),
        (false, Affinity::Kept)
    );
    // Home holds as much of the prompt and is a little busier: go home.
    assert_eq!(
        affinity(Some(Some(seen(4, 9.0))), false, seen(4, 2.0), 8),
        (true, Affinity::Kept)
    );
    // The prompt was rewritten so that the home matches less: still home, if not overloaded.
    assert_eq!(
        affinity(Some(Some(seen(1, 3.0))), false, seen(0, 1.0), 8),
        (true, Affinity::Kept)
    );
    // Another replica holds more of the prompt: prefix wins.
    assert_eq!(
        affinity(Some(Some(seen(1, 0.0))), false, seen(4, 0.0), 8),
        (false, Affinity::MovedPrefix)
    );
    // …but not by the approximate index: it may not know what other routers sent home.
    let guessed = Seen {
        exact: false,
        ..seen(1, 0.0)
    };
    assert_eq!(
        affinity(Some(Some(guessed)), false, seen(4, 0.0), 8),
        (true, Affinity::Kept)
    );
    assert_eq!(
        affinity(
            Some(Some(seen(1, 0.0))),
            false,
            Seen {
                exact: false,
                ..seen(4, 0.0)
            },
            8
        ),
        (true, Affinity::Kept)
    );
    // Home overloaded.
    assert_eq!(
        affinity(Some(Some(seen(4, 12.0))), false, seen(4, 2.0), 8),
        (false, Affinity::MovedOverload)
    );
}
