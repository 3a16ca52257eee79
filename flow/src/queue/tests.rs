//! Unit tests of the flow queue's rules, one behaviour each.

use super::*;

fn t0() -> Instant {
    Instant::now()
}

fn config() -> FlowQueueConfig {
    FlowQueueConfig {
        max_entries: 100,
        max_bytes: 10_000,
        max_entries_per_tenant: 50,
        max_bytes_per_tenant: 5_000,
        max_tenants: 10,
        ttl_ms: 1_000,
    }
}

fn queue(config: FlowQueueConfig) -> FlowQueue<u32> {
    FlowQueue::new(config).unwrap()
}

fn arrival(tenant: &str, priority: i32, cost: u64, bytes: u64, id: u32) -> Arrival<'_, u32> {
    Arrival {
        priority,
        cost,
        bytes,
        ..Arrival::new(tenant, id)
    }
}

fn push(q: &mut FlowQueue<u32>, now: Instant, a: Arrival<'_, u32>) -> Handle {
    let e = q.enqueue(now, a).expect("queued");
    assert!(e.evicted.is_empty());
    q.assert_consistent();
    e.handle
}

/// Pop everything, completing each at its charge; the payloads in order.
fn drain(q: &mut FlowQueue<u32>, now: Instant) -> Vec<u32> {
    let mut out = Vec::new();
    loop {
        let next = q.peek().copied();
        let Some(d) = q.pop(now) else {
            assert_eq!(next, None, "peek sees nothing when pop finds nothing");
            break;
        };
        assert_eq!(next, Some(d.entry.payload), "peek shows what pop returns");
        let charged = d.ticket.charged();
        q.complete(d.ticket, charged);
        q.assert_consistent();
        out.push(d.entry.payload);
    }
    out
}

fn tenant_of(d: &Dispatched<u32>) -> String {
    d.entry.tenant.to_string()
}

#[test]
fn invalid_config_is_refused() {
    let bad = FlowQueueConfig {
        max_entries: 0,
        ..config()
    };
    assert_eq!(
        FlowQueue::<u32>::new(bad).unwrap_err().field(),
        ["max_entries"]
    );
}

#[test]
fn empty_queue_pops_nothing() {
    let mut q = queue(config());
    assert!(q.peek().is_none());
    assert!(q.pop(t0()).is_none());
    assert!(q.is_empty());
    assert!(q.expire(t0()).is_empty());
    assert_eq!(q.next_deadline(), None);
}

#[test]
fn higher_band_goes_first() {
    let now = t0();
    let mut q = queue(config());
    push(&mut q, now, arrival("a", 0, 10, 1, 1));
    push(&mut q, now, arrival("b", -1, 10, 1, 2));
    push(&mut q, now, arrival("c", 5, 10, 1, 3));
    push(&mut q, now, arrival("a", 5, 10, 1, 4));
    // Both band-5 entries, then band 0, then the sheddable one.
    assert_eq!(drain(&mut q, now), [3, 4, 1, 2]);
}

#[test]
fn fifo_within_a_tenant() {
    let now = t0();
    let mut q = queue(config());
    for id in 0..10 {
        // Costs differ; order within the tenant must not depend on them.
        push(&mut q, now, arrival("a", 0, 100 - u64::from(id) * 7, 1, id));
    }
    assert_eq!(drain(&mut q, now), (0..10).collect::<Vec<_>>());
}

#[test]
fn weights_share_by_ratio() {
    let now = t0();
    let mut q = queue(config());
    for i in 0..12 {
        push(
            &mut q,
            now,
            Arrival {
                weight: 1,
                ..arrival("light", 0, 100, 1, i)
            },
        );
        push(
            &mut q,
            now,
            Arrival {
                weight: 2,
                ..arrival("heavy", 0, 100, 1, 100 + i)
            },
        );
    }
    // Over the first 9 dispatches (both backlogged throughout) heavy gets 6, light 3.
    let mut heavy = 0;
    for _ in 0..9 {
        let d = q.pop(now).unwrap();
        heavy += usize::from(tenant_of(&d) == "heavy");
        q.complete(d.ticket, 100);
    }
    assert_eq!(heavy, 6);
}

#[test]
fn shares_tokens_not_requests() {
    let now = t0();
    let mut q = queue(config());
    for i in 0..40 {
        push(&mut q, now, arrival("long", 0, 800, 1, i));
        push(&mut q, now, arrival("short", 0, 100, 1, 100 + i));
    }
    // While both are backlogged, "short" gets 8 requests per "long" one.
    let mut tokens: HashMap<String, u64> = HashMap::new();
    for _ in 0..36 {
        let d = q.pop(now).unwrap();
        *tokens.entry(tenant_of(&d)).or_default() += d.entry.cost;
        q.complete(d.ticket, d.entry.cost);
    }
    assert_eq!(tokens["long"], 3_200);
    assert_eq!(tokens["short"], 3_200);
}

#[test]
fn new_tenant_starts_at_the_band_virtual_time() {
    let now = t0();
    let mut q = queue(config());
    for i in 0..20 {
        push(&mut q, now, arrival("busy", 0, 100, 1, i));
    }
    for _ in 0..10 {
        let d = q.pop(now).unwrap();
        q.complete(d.ticket, 100);
    }
    // "late" arrives after busy was served 1000 tokens alone: it starts at the band's virtual
    // time, not at 0, so the two alternate instead of late going five times in a row.
    for i in 0..5 {
        push(&mut q, now, arrival("late", 0, 100, 1, 100 + i));
    }
    assert_eq!(q.counter("late", 0), q.virtual_time(0));
    assert_alternate(&mut q, now, 6);
}

#[test]
fn idle_tenant_gets_no_credit_for_idle_time() {
    let now = t0();
    let mut q = queue(config());
    // "back" is served once and its request stays in flight, so the queue keeps its state
    // (counter 100) through the idle time.
    push(&mut q, now, arrival("back", 0, 100, 1, 0));
    let held = q.pop(now).unwrap().ticket;
    for i in 0..20 {
        push(&mut q, now, arrival("busy", 0, 100, 1, i + 1));
    }
    for _ in 0..10 {
        let d = q.pop(now).unwrap();
        q.complete(d.ticket, 100);
    }
    assert_eq!(q.counter("back", 0), Some(100.0));
    // Back with five requests: lifted to the band's virtual time (900, where busy's last
    // request started), so the two alternate instead of back going eight times in a row.
    for i in 0..5 {
        push(&mut q, now, arrival("back", 0, 100, 1, 100 + i));
    }
    assert_eq!(q.counter("back", 0), Some(900.0));
    assert_eq!(q.virtual_time(0), Some(900.0));
    assert_alternate(&mut q, now, 6);
    q.complete(held, 100);
}

fn assert_alternate(q: &mut FlowQueue<u32>, now: Instant, pops: usize) {
    let order: Vec<String> = (0..pops)
        .map(|_| {
            let d = q.pop(now).unwrap();
            let t = tenant_of(&d);
            q.complete(d.ticket, 100);
            t
        })
        .collect();
    assert!(
        order.windows(2).all(|w| w[0] != w[1]),
        "alternates: {order:?}"
    );
}

#[test]
fn returning_tenant_keeps_its_lead() {
    // A tenant whose queue drains between requests (one at a time) is still charged for what
    // it was served: its counter stays ahead of the band's virtual time.
    let now = t0();
    let mut q = queue(config());
    push(&mut q, now, arrival("a", 0, 500, 1, 1));
    push(&mut q, now, arrival("b", 0, 100, 1, 2));
    push(&mut q, now, arrival("b", 0, 100, 1, 3));
    let first = q.pop(now).unwrap(); // a (first to join), now idle with counter 500
    assert_eq!(first.entry.payload, 1);
    assert_eq!(q.counter("a", 0), Some(500.0));
    push(&mut q, now, arrival("a", 0, 500, 1, 4));
    assert_eq!(q.counter("a", 0), Some(500.0), "not lifted back to 0");
    let rest: Vec<u32> = (0..3).map(|_| q.pop(now).unwrap().entry.payload).collect();
    assert_eq!(rest, [2, 3, 4]);
}

#[test]
fn completion_corrects_the_counter() {
    let now = t0();
    let mut q = queue(config());
    push(&mut q, now, arrival("a", 0, 1_000, 1, 1));
    let d = q.pop(now).unwrap();
    assert_eq!(d.ticket.charged(), 1_000);
    assert_eq!(q.counter("a", 0), Some(1_000.0));
    // Used 100 of the 1000 charged: the counter comes back to 100.
    push(&mut q, now, arrival("a", 0, 1_000, 1, 2)); // keeps the tenant's state alive
    q.complete(d.ticket, 100);
    q.assert_consistent();
    assert_eq!(q.counter("a", 0), Some(100.0));

    // A request that runs long is charged the rest, divided by the weight.
    let mut q = queue(config());
    push(
        &mut q,
        now,
        Arrival {
            weight: 4,
            ..arrival("w", 0, 400, 1, 1)
        },
    );
    let d = q.pop(now).unwrap();
    assert_eq!(d.ticket.weight(), 4);
    assert_eq!(q.counter("w", 0), Some(100.0));
    q.complete(d.ticket, 1_200);
    assert_eq!(q.counter("w", 0), Some(300.0));
}

#[test]
fn corrections_change_who_goes_next() {
    let now = t0();
    let mut q = queue(config());
    for i in 0..4 {
        push(&mut q, now, arrival("frugal", 0, 1_000, 1, i));
        push(&mut q, now, arrival("greedy", 0, 1_000, 1, 100 + i));
    }
    // Both estimate 1000; frugal uses 100, greedy 1000. With corrections frugal goes again
    // before greedy's second turn.
    let mut order = Vec::new();
    for _ in 0..4 {
        let d = q.pop(now).unwrap();
        let t = tenant_of(&d);
        q.complete(d.ticket, if t == "frugal" { 100 } else { 1_000 });
        order.push(t);
    }
    assert_eq!(order, ["frugal", "greedy", "frugal", "frugal"]);
}

#[test]
fn zero_cost_and_zero_weight_count_as_one() {
    let now = t0();
    let mut q = queue(config());
    push(
        &mut q,
        now,
        Arrival {
            weight: 0,
            ..arrival("z", 0, 0, 1, 1)
        },
    );
    let d = q.pop(now).unwrap();
    assert_eq!((d.ticket.charged(), d.ticket.weight()), (1, 1));
    assert_eq!(q.counter("z", 0), Some(1.0));
}

#[test]
fn full_queue_evicts_lower_priority_newest_of_biggest_holder() {
    let now = t0();
    let mut q = queue(FlowQueueConfig {
        max_entries: 4,
        max_entries_per_tenant: 4,
        ..config()
    });
    push(&mut q, now, arrival("small", -1, 1, 10, 1));
    push(&mut q, now, arrival("big", -1, 1, 100, 2));
    push(&mut q, now, arrival("big", -1, 1, 100, 3));
    push(&mut q, now, arrival("normal", 0, 1, 1_000, 4));
    // Full. A priority-0 arrival evicts from the lower band -1.
    let e = q.enqueue(now, arrival("x", 0, 1, 1, 5)).unwrap();
    q.assert_consistent();
    // Lowest band is -1; its biggest holder is "big"; its newest entry is 3.
    assert_eq!(e.evicted.iter().map(|e| e.payload).collect::<Vec<_>>(), [3]);
    assert!(!q.contains(e.evicted[0].handle));
    // Equal priority never evicts: refused.
    let r = q.enqueue(now, arrival("y", -1, 1, 1, 6)).unwrap_err();
    assert_eq!(
        (r.bound, r.payload, r.reason()),
        (Bound::Entries, 6, Reason::QueueFull)
    );
    // Priority 5: evicts from -1 again, the biggest holder first (big 100 bytes, small 10).
    let e = q.enqueue(now, arrival("z", 5, 1, 1, 7)).unwrap();
    assert_eq!(e.evicted[0].payload, 2);
    let e = q.enqueue(now, arrival("z", 5, 1, 1, 8)).unwrap();
    assert_eq!(e.evicted[0].payload, 1);
    // Band -1 is empty; next victims come from band 0 (the biggest holder, "normal").
    let e = q.enqueue(now, arrival("z", 5, 1, 1, 9)).unwrap();
    assert_eq!(e.evicted[0].payload, 4);
    q.assert_consistent();
    // Only band 5 and "x" (band 0) remain; a band-0 arrival finds nothing lower.
    let r = q.enqueue(now, arrival("w", 0, 1, 1, 10)).unwrap_err();
    assert_eq!(r.bound, Bound::Entries);
    assert_eq!(drain(&mut q, now), [7, 8, 9, 5]);
}

#[test]
fn byte_bound_evicts_as_many_as_needed_or_none() {
    let now = t0();
    let mut q = queue(FlowQueueConfig {
        max_bytes: 1_000,
        max_bytes_per_tenant: 1_000,
        ..config()
    });
    for i in 0..4 {
        push(&mut q, now, arrival("low", -1, 1, 200, i));
    }
    push(&mut q, now, arrival("mid", 0, 1, 200, 10));
    // 1000 of 1000 bytes used. 900 bytes at priority 0 would need 900 from below 0: only 800
    // there, so it is refused and nothing is evicted.
    let r = q.enqueue(now, arrival("hi", 0, 1, 900, 20)).unwrap_err();
    assert_eq!(r.bound, Bound::Bytes);
    assert_eq!(q.len(), 5);
    // 500 bytes at priority 1: three of low's entries go (newest first), 600 bytes.
    let e = q.enqueue(now, arrival("hi", 1, 1, 500, 21)).unwrap();
    q.assert_consistent();
    assert_eq!(
        e.evicted.iter().map(|e| e.payload).collect::<Vec<_>>(),
        [3, 2, 1]
    );
    assert_eq!(q.bytes(), 900);
    // A body bigger than a tenant's share is refused outright.
    let r = q
        .enqueue(now, arrival("huge", 9, 1, 1_001, 30))
        .unwrap_err();
    assert_eq!(r.bound, Bound::TenantBytes);
}

#[test]
fn tenant_bounds_refuse_without_evicting() {
    let now = t0();
    let mut q = queue(FlowQueueConfig {
        max_entries_per_tenant: 2,
        max_bytes_per_tenant: 100,
        ..config()
    });
    push(&mut q, now, arrival("other", -5, 1, 1, 0));
    push(&mut q, now, arrival("a", 0, 1, 10, 1));
    push(&mut q, now, arrival("a", 0, 1, 10, 2));
    let r = q.enqueue(now, arrival("a", 9, 1, 10, 3)).unwrap_err();
    assert_eq!(r.bound, Bound::TenantEntries);
    assert_eq!(r.bound.field(), "max_entries_per_tenant");
    let r = q.enqueue(now, arrival("b", 9, 1, 101, 4)).unwrap_err();
    assert_eq!(r.bound, Bound::TenantBytes);
    push(&mut q, now, arrival("b", 0, 1, 60, 5));
    let r = q.enqueue(now, arrival("b", 0, 1, 41, 6)).unwrap_err();
    assert_eq!(r.bound, Bound::TenantBytes);
    assert_eq!(q.len(), 4, "nobody was evicted");
    // The tenant's own bound (TenantPolicy maxQueuedRequests) is lower still.
    let r = q
        .enqueue(
            now,
            Arrival {
                max_queued: Some(1),
                ..arrival("b", 0, 1, 1, 7)
            },
        )
        .unwrap_err();
    assert_eq!(r.bound, Bound::TenantEntries);
    let r = q
        .enqueue(
            now,
            Arrival {
                max_queued: Some(0),
                ..arrival("c", 0, 1, 1, 8)
            },
        )
        .unwrap_err();
    assert_eq!(r.bound, Bound::TenantEntries);
    assert_eq!(
        q.tenant_queued("c"),
        None,
        "a refused tenant leaves no state"
    );
}

#[test]
fn tenant_table_is_bounded() {
    let now = t0();
    let mut q = queue(FlowQueueConfig {
        max_tenants: 2,
        ..config()
    });
    push(&mut q, now, arrival("a", 0, 1, 1, 1));
    push(&mut q, now, arrival("b", 0, 1, 1, 2));
    let r = q.enqueue(now, arrival("c", 0, 1, 1, 3)).unwrap_err();
    assert_eq!(r.bound, Bound::Tenants);
    // "a" is served (idle, ahead of the band, in flight): kept until room is needed.
    let d = q.pop(now).unwrap();
    assert_eq!(d.entry.tenant.as_ref(), "a");
    assert_eq!(q.tenants(), 2);
    push(&mut q, now, arrival("c", 0, 1, 1, 3));
    assert_eq!(q.tenants(), 2);
    assert_eq!(q.tenant_queued("a"), None, "the idle tenant was forgotten");
    // Its late completion finds nothing to correct.
    q.complete(d.ticket, 5);
    q.assert_consistent();
    assert_eq!(q.counter("a", 0), None);
}

#[test]
fn spent_idle_tenants_are_forgotten() {
    let now = t0();
    let mut q = queue(config());
    push(&mut q, now, arrival("a", 0, 10, 1, 1));
    let d = q.pop(now).unwrap();
    // Idle, but in flight and ahead of the band (counter 10 > virtual time 0): kept.
    assert_eq!(q.tenants(), 1);
    q.complete(d.ticket, 0);
    // Refunded to counter 0 = the band's virtual time, nothing in flight: nothing to remember.
    assert_eq!(q.tenants(), 0);
    assert_eq!(q.virtual_time(0), None, "the band went with its last flow");
    q.assert_consistent();
}

#[test]
fn idle_flows_per_tenant_are_bounded() {
    let now = t0();
    let mut q = queue(config());
    // One tenant visits ten bands, one request each, never completing: every flow it leaves
    // behind is idle, ahead of its band and in flight, so only the cap can drop it.
    let mut tickets = Vec::new();
    for p in 0..10 {
        push(&mut q, now, arrival("a", p, 1, 1, p as u32));
        tickets.push(q.pop(now).unwrap().ticket);
        q.assert_consistent();
    }
    let kept: Vec<i32> = (0..10).filter(|&p| q.counter("a", p).is_some()).collect();
    // The newest flows are kept, the oldest dropped.
    assert_eq!(kept, [6, 7, 8, 9]);
    assert_eq!(kept.len(), MAX_IDLE_FLOWS);
    // Completing against a dropped flow is harmless.
    for t in tickets {
        q.complete(t, 1);
        q.assert_consistent();
    }
}

#[test]
fn expire_removes_entries_past_their_deadline() {
    let now = t0();
    let mut q = queue(config()); // ttl 1 s
    push(&mut q, now, arrival("a", 0, 1, 1, 1));
    push(
        &mut q,
        now,
        Arrival {
            ttl: Some(Duration::from_millis(100)),
            ..arrival("b", 0, 1, 1, 2)
        },
    );
    push(
        &mut q,
        now + Duration::from_millis(50),
        arrival("a", 0, 1, 1, 3),
    );
    assert_eq!(q.next_deadline(), Some(now + Duration::from_millis(100)));
    assert!(q.expire(now + Duration::from_millis(99)).is_empty());
    // At the deadline exactly, it is expired.
    let gone = q.expire(now + Duration::from_millis(100));
    assert_eq!(gone.iter().map(|e| e.payload).collect::<Vec<_>>(), [2]);
    assert_eq!(gone[0].deadline, Some(now + Duration::from_millis(100)));
    let gone = q.expire(now + Duration::from_secs(2));
    assert_eq!(gone.iter().map(|e| e.payload).collect::<Vec<_>>(), [1, 3]);
    assert!(q.is_empty());
    q.assert_consistent();
}

#[test]
fn remove_takes_one_entry_by_handle() {
    let now = t0();
    let mut q = queue(config());
    let h1 = push(&mut q, now, arrival("a", 0, 1, 7, 1));
    let h2 = push(&mut q, now, arrival("a", 0, 1, 8, 2));
    let h3 = push(&mut q, now, arrival("a", 0, 1, 9, 3));
    let e = q.remove(h2).unwrap();
    assert_eq!((e.payload, e.bytes, e.tenant.as_ref()), (2, 8, "a"));
    q.assert_consistent();
    assert!(q.remove(h2).is_none(), "removed once");
    assert_eq!(q.tenant_queued("a"), Some((2, 16)));
    // The slot is reused by a new entry; the old handle still matches nothing.
    let h4 = push(&mut q, now, arrival("a", 0, 1, 1, 4));
    assert_ne!(h2, h4);
    assert!(q.remove(h2).is_none());
    assert!(q.contains(h4));
    assert_eq!(drain(&mut q, now), [1, 3, 4]);
    assert!(q.remove(h1).is_none() && q.remove(h3).is_none());
}

#[test]
fn dispatch_reports_time_waited() {
    let now = t0();
    let mut q = queue(config());
    push(&mut q, now, arrival("a", 0, 1, 1, 1));
    let d = q.pop(now + Duration::from_millis(250)).unwrap();
    assert_eq!(d.waited, Duration::from_millis(250));
    assert_eq!(d.entry.enqueued_at, now);
}
