//! The pure parts of session affinity: tokens, the bounded map, the affinity rule.

use super::*;
use proptest::prelude::*;

#[test]
fn a_token_names_its_replica_for_every_holder_of_the_key() {
    let a = TokenKey::new(b"a shared secret of some length");
    let b = TokenKey::new(b"a shared secret of some length");
    let t = a.sign("ml/vllm-3");
    assert_eq!(b.verify(&t).as_deref(), Some("ml/vllm-3"));
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
    let t = k.sign("vllm-3");
    let (_, tag) = t.split_once('.').unwrap();
    // Aiming at another replica with the tag of this one.
    let forged = format!("{}.{tag}", URL_SAFE_NO_PAD.encode("vllm-0"));
    assert_eq!(k.verify(&forged), None);
    // Another router's key, garbage, a truncated tag, an unsigned llm-d token.
    assert_eq!(TokenKey::new(b"another secret!!!!").verify(&t), None);
    for bad in [
        "",
        ".",
        "not base64!.x",
        &t[..t.len() - 2],
        &URL_SAFE_NO_PAD.encode("vllm-3"),
    ] {
        assert_eq!(k.verify(bad), None, "{bad:?}");
    }
}

#[test]
fn idle_sessions_are_forgotten() {
    let t = Instant::now();
    let mut m = SessionMap::new(10, Duration::from_secs(60));
    m.set("s1", "r0", t);
    assert_eq!(m.get("s1", t + Duration::from_secs(59)), Some("r0"));
    assert_eq!(m.get("s1", t + Duration::from_secs(60)), None);
    // Seen again: the TTL runs from then.
    m.set("s1", "r1", t + Duration::from_secs(30));
    assert_eq!(m.get("s1", t + Duration::from_secs(89)), Some("r1"));
    m.expire(t + Duration::from_secs(90));
    assert!(m.is_empty());
}

#[test]
fn the_map_keeps_the_most_recently_seen_sessions_within_its_bound() {
    let t = Instant::now();
    let mut m = SessionMap::new(3, Duration::from_secs(600));
    for (i, s) in ["a", "b", "c"].iter().enumerate() {
        m.set(s, "r0", t + Duration::from_secs(i as u64));
    }
    m.set("a", "r1", t + Duration::from_secs(3));
    m.set("d", "r2", t + Duration::from_secs(4));
    assert_eq!(m.len(), 3);
    let now = t + Duration::from_secs(5);
    assert_eq!(m.get("b", now), None, "the least recently seen goes first");
    assert_eq!(m.get("a", now), Some("r1"));
    assert_eq!(m.get("d", now), Some("r2"));
}

proptest! {
    /// Whatever the sequence, the map holds at most its bound and its order queue stays within
    /// twice the live sessions (plus slack).
    #[test]
    fn bounded(ops in proptest::collection::vec((0u8..40, 0u8..4, 0u64..200), 0..400)) {
        let t = Instant::now();
        let mut m = SessionMap::new(16, Duration::from_secs(100));
        let mut clock = t;
        for (id, home, step) in ops {
            clock += Duration::from_millis(step * 10);
            m.set(&format!("s{id}"), &format!("r{home}"), clock);
            prop_assert!(m.len() <= 16);
            prop_assert!(m.order.len() <= 2 * m.len() + 64 + 1);
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
