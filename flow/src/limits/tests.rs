//! Unit and property tests of the token bucket, the per-tenant limits and the bounded map.

use super::*;
use crate::LimitersConfig;
use proptest::prelude::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

#[test]
fn bucket_starts_full_and_refills_at_its_rate() {
    let t0 = Instant::now();
    let mut b = TokenBucket::new(10.0, 5.0, t0);
    for _ in 0..5 {
        b.try_take(t0, 1.0).unwrap();
    }
    // Empty: one more needs 1/10 s.
    let wait = b.try_take(t0, 1.0).unwrap_err();
    assert!(
        wait >= ms(100) && wait <= ms(100) + Duration::from_micros(1),
        "{wait:?}"
    );
    assert!(b.try_take(t0 + ms(99), 1.0).is_err());
    b.try_take(t0 + ms(100), 1.0).unwrap();
    // Refill stops at the burst.
    assert!(close(b.level(t0 + ms(10_000)), 5.0));
    // Waiting exactly as long as told passes.
    for _ in 0..5 {
        b.try_take(t0 + ms(10_000), 1.0).unwrap();
    }
    let wait = b.try_take(t0 + ms(10_000), 3.0).unwrap_err();
    b.try_take(t0 + ms(10_000) + wait, 3.0).unwrap();
}

#[test]
fn bucket_lets_oversized_amounts_through_when_full_and_goes_into_debt() {
    let t0 = Instant::now();
    let mut b = TokenBucket::new(100.0, 100.0, t0);
    // 250 > burst: passes on a full bucket, leaves -150.
    b.try_take(t0, 250.0).unwrap();
    assert!(close(b.level(t0), -150.0));
    // The next one waits for the debt and a full bucket: (100 + 150) / 100 s.
    let wait = b.try_take(t0, 250.0).unwrap_err();
    assert!(close(wait.as_secs_f64(), 2.5), "{wait:?}");
}

#[test]
fn bucket_ignores_time_going_backwards() {
    let t0 = Instant::now();
    let mut b = TokenBucket::new(1.0, 1.0, t0 + ms(1_000));
    b.try_take(t0 + ms(1_000), 1.0).unwrap();
    assert!(close(b.level(t0), 0.0), "no negative refill");
    assert!(close(b.level(t0 + ms(1_500)), 0.5));
}

#[test]
fn bucket_reconfigure_keeps_level_within_the_new_size() {
    let t0 = Instant::now();
    let mut b = TokenBucket::new(10.0, 10.0, t0);
    b.take(2.0);
    b.reconfigure(1.0, 5.0, t0);
    assert!(close(b.level(t0), 5.0));
    assert!(close(b.rate(), 1.0) && close(b.burst(), 5.0));
    // A negative take refunds, capped at the size.
    b.take(3.0);
    b.take(-10.0);
    assert!(close(b.level(t0), 5.0));
    // Unvalidated values are clamped, never divide by zero.
    let mut odd = TokenBucket::new(0.0, f64::NAN, t0);
    assert!(odd.burst() >= 1.0 && odd.rate() > 0.0);
    odd.take(1.0);
    assert!(odd.try_take(t0, 1.0).is_err());
}

fn limits(config: TenantLimitsConfig) -> (Limits, Instant) {
    config.validate().unwrap();
    let t0 = Instant::now();
    (Limits::new(&config, t0), t0)
}

#[test]
fn requests_per_second_with_burst() {
    let (mut l, t0) = limits(TenantLimitsConfig {
        requests_per_second: Some(1.0),
        burst: Some(2.0),
        ..Default::default()
    });
    let a = l.check(t0, 10).unwrap();
    let b = l.check(t0, 10).unwrap();
    let r = l.check(t0, 10).unwrap_err();
    assert_eq!(r.limit, Limit::Requests);
    assert_eq!(r.limit.field(), "requests_per_second");
    assert_eq!(r.reason(), Reason::RateLimited);
    assert_eq!(r.retry_after_secs(), 1);
    let c = l.check(t0 + r.retry_after, 10).unwrap();
    for p in [a, b, c] {
        l.release(p, None);
    }
    assert_eq!(l.in_flight(), 0);
}

#[test]
fn tokens_per_second_charges_the_estimate_and_corrects_it() {
    let (mut l, t0) = limits(TenantLimitsConfig {
        tokens_per_second: Some(100.0),
        ..Default::default()
    });
    let p = l.check(t0, 60).unwrap();
    assert_eq!(p.tokens(), 60);
    let r = l.check(t0, 60).unwrap_err();
    assert_eq!(r.limit, Limit::Tokens);
    // 20 short of 60 at 100/s: 0.2 s, said as 1 s.
    assert!(close(r.retry_after.as_secs_f64(), 0.2));
    assert_eq!(r.retry_after_secs(), 1);
    // It used only 10: 50 come back, and the next 60 passes.
    l.release(p, Some(10));
    let p = l.check(t0, 60).unwrap();
    // 90 - 60 = 30 left; this one used 200: charged 140 more, the bucket goes into debt.
    l.release(p, Some(200));
    assert!(close(l.tokens_bucket().unwrap().clone().level(t0), -110.0));
    let r = l.check(t0, 1).unwrap_err();
    assert_eq!(r.retry_after_secs(), 2); // 111 tokens at 100/s = 1.11 s
}

#[test]
fn concurrency_is_held_until_release() {
    let (mut l, t0) = limits(TenantLimitsConfig {
        max_concurrent_requests: Some(2),
        ..Default::default()
    });
    let a = l.check(t0, 1).unwrap();
    let _b = l.check(t0, 1).unwrap();
    let r = l.check(t0, 1).unwrap_err();
    assert_eq!((r.limit, r.retry_after_secs()), (Limit::Concurrency, 1));
    l.release(a, None);
    let _c = l.check(t0, 1).unwrap();
    assert_eq!(l.in_flight(), 2);
}

#[test]
fn a_refusal_takes_nothing_and_names_the_longest_wait() {
    let (mut l, t0) = limits(TenantLimitsConfig {
        requests_per_second: Some(2.0),
        burst: Some(1.0),
        tokens_per_second: Some(10.0),
        token_burst: Some(40.0),
        max_concurrent_requests: Some(5),
    });
    let _p = l.check(t0, 40).unwrap();
    // Requests wait 0.5 s, tokens 3 s for 30: tokens is named, 3 s.
    let r = l.check(t0, 30).unwrap_err();
    assert_eq!(r.limit, Limit::Tokens);
    assert_eq!(r.retry_after_secs(), 3);
    assert_eq!(l.in_flight(), 1, "a refusal holds no slot");
    // Nothing was taken from the requests bucket by the refusal: at 0.5 s it has 1 again.
    let at = t0 + ms(500);
    assert!(close(l.requests_bucket().unwrap().clone().level(at), 1.0));
}

#[test]
fn retry_after_rounds_up_to_whole_seconds_at_least_one() {
    let r = |d| Refusal {
        limit: Limit::Requests,
        retry_after: d,
    };
    assert_eq!(r(Duration::ZERO).retry_after_secs(), 1);
    assert_eq!(r(ms(1)).retry_after_secs(), 1);
    assert_eq!(r(ms(1_000)).retry_after_secs(), 1);
    assert_eq!(r(ms(1_000) + Duration::from_nanos(1)).retry_after_secs(), 1);
    assert_eq!(r(ms(1_001)).retry_after_secs(), 2);
    assert_eq!(r(ms(2_500)).retry_after_secs(), 3);
}

#[test]
fn reconfigure_follows_a_changed_policy() {
    let (mut l, t0) = limits(TenantLimitsConfig {
        requests_per_second: Some(1.0),
        ..Default::default()
    });
    let _p = l.check(t0, 1).unwrap();
    assert!(l.check(t0, 1).is_err());
    // The rate limit goes, a concurrency limit of 1 comes: the one in flight counts.
    l.reconfigure(
        &TenantLimitsConfig {
            max_concurrent_requests: Some(1),
            ..Default::default()
        },
        t0,
    );
    assert!(l.requests_bucket().is_none());
    assert_eq!(l.check(t0, 1).unwrap_err().limit, Limit::Concurrency);
}

fn limiters(max_tenants: usize) -> TenantLimiters {
    TenantLimiters::new(LimitersConfig { max_tenants }).unwrap()
}

const ONE_RPS: TenantLimitsConfig = TenantLimitsConfig {
    requests_per_second: Some(1.0),
    burst: None,
    tokens_per_second: None,
    token_burst: None,
    max_concurrent_requests: None,
};

#[test]
fn unlimited_tenants_need_no_state() {
    let mut m = limiters(1);
    let t0 = Instant::now();
    for i in 0..100 {
        let p = m
            .check(&format!("t{i}"), &TenantLimitsConfig::default(), t0, 1)
            .unwrap();
        assert!(!p.is_tracked());
        m.release(p, Some(5));
    }
    assert_eq!(m.tenants(), 0);
    assert!(TenantLimiters::new(LimitersConfig { max_tenants: 0 }).is_err());
}

#[test]
fn limiters_forget_the_least_recently_used_idle_tenant() {
    let mut m = limiters(2);
    let t0 = Instant::now();
    let a = m.check("a", &ONE_RPS, t0, 1).unwrap();
    m.release(a, None);
    let b = m.check("b", &ONE_RPS, t0, 1).unwrap();
    m.release(b, None);
    assert!(m.check("a", &ONE_RPS, t0, 1).is_err(), "a is rate limited");
    // "b" is now the least recently used: "c" takes its place.
    let c = m.check("c", &ONE_RPS, t0, 1).unwrap();
    m.assert_consistent();
    assert!(m.get("b").is_none() && m.get("a").is_some());
    assert_eq!(m.tenants(), 2);
    // "b" comes back with a full bucket (the documented cost of forgetting).
    m.release(c, None);
    let b = m.check("b", &ONE_RPS, t0, 1).unwrap();
    m.release(b, None);
    m.assert_consistent();
}

#[test]
fn limiters_never_forget_a_tenant_in_flight() {
    let mut m = limiters(2);
    let t0 = Instant::now();
    let a = m.check("a", &ONE_RPS, t0, 1).unwrap();
    let b = m.check("b", &ONE_RPS, t0, 1).unwrap();
    let r = m.check("c", &ONE_RPS, t0, 1).unwrap_err();
    assert_eq!((r.limit, r.reason()), (Limit::Tenants, Reason::RateLimited));
    m.release(a, None);
    // Now "a" can be forgotten; "c" is tracked; "a"'s stale permit is harmless.
    let c = m.check("c", &ONE_RPS, t0, 1).unwrap();
    assert!(m.get("a").is_none());
    m.release(b, None);
    m.release(c, None);
    m.assert_consistent();
}

#[test]
fn stale_permit_after_forgetting_is_ignored() {
    let mut m = limiters(1);
    let t0 = Instant::now();
    let conc = TenantLimitsConfig {
        max_concurrent_requests: Some(1),
        ..Default::default()
    };
    let a = m.check("a", &ONE_RPS, t0, 1).unwrap();
    // Reconfigured on the fly: a's state follows.
    let r = m.check("a", &conc, t0, 1).unwrap_err();
    assert_eq!(r.limit, Limit::Concurrency);
    m.release(a, None);
    let a2 = m.check("a", &conc, t0, 1).unwrap();
    m.release(a2, None);
    let b = m.check("b", &conc, t0, 1).unwrap(); // forgets "a"
                                                 // A tenant in flight is never forgotten, so a stale permit cannot arise from the API;
                                                 // forge one for the slot "a" had.
    let stale = TenantPermit {
        slot: 0,
        generation: 0,
        permit: Some(LimitPermit { tokens: 1 }),
    };
    m.release(stale, None); // slot 0 now belongs to "b" with a newer generation
    assert_eq!(m.get("b").unwrap().in_flight(), 1);
    m.release(b, None);
    assert_eq!(m.get("b").unwrap().in_flight(), 0);
}

proptest! {
    /// Over any sequence of checks, a bucket never lets through more than its burst plus its
    /// rate times the time elapsed (amounts within the burst).
    #[test]
    fn bucket_never_exceeds_rate_plus_burst(
        rate in 0.5f64..100.0,
        burst in 1.0f64..50.0,
        steps in prop::collection::vec((0u64..200, 0.0f64..1.0), 1..300),
    ) {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(rate, burst, t0);
        let (mut now, mut taken) = (t0, 0.0);
        for (advance_ms, frac) in steps {
            now += ms(advance_ms);
            let amount = (frac * burst).max(0.01);
            if b.try_take(now, amount).is_ok() {
                taken += amount;
            }
            let allowed = burst + rate * (now - t0).as_secs_f64();
            prop_assert!(taken <= allowed + 1e-6, "{taken} > {allowed}");
        }
    }

    /// Per tenant, requests in flight never exceed the concurrency limit; the map never tracks
    /// more than its bound; releasing everything leaves nothing in flight.
    #[test]
    fn limiters_hold_their_bounds(
        ops in prop::collection::vec((0u8..12, any::<bool>(), 0u64..50), 1..400),
    ) {
        let mut m = limiters(4);
        let t0 = Instant::now();
        let conc = TenantLimitsConfig {
            max_concurrent_requests: Some(2),
            requests_per_second: Some(20.0),
            ..Default::default()
        };
        let mut held: Vec<(u8, TenantPermit)> = Vec::new();
        let mut now = t0;
        for (tenant, release, advance) in ops {
            now += ms(advance);
            if release && !held.is_empty() {
                let (_, p) = held.remove(usize::from(tenant) % held.len());
                m.release(p, None);
            } else if let Ok(p) = m.check(&format!("t{tenant}"), &conc, now, 1) {
                held.push((tenant, p));
            }
            m.assert_consistent();
            prop_assert!(m.tenants() <= 4);
            for t in 0..12u8 {
                let n = held.iter().filter(|(x, _)| *x == t).count();
                prop_assert!(n <= 2, "tenant {t} has {n} in flight");
                if let Some(l) = m.get(&format!("t{t}")) {
                    prop_assert_eq!(l.in_flight() as usize, n);
                }
            }
        }
        for (_, p) in held {
            m.release(p, None);
        }
        m.assert_consistent();
    }
}
