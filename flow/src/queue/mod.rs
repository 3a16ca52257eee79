//! The flow queue: requests waiting while a pool is saturated, and the order they leave in.
//!
//! # Order
//! - **Strict priority bands.** [`FlowQueue::pop`] serves the highest priority with anything
//!   queued; a lower band waits as long as a higher one has entries.
//! - **Weighted fair share by tokens within a band.** Start-time fair queuing over per-tenant
//!   virtual token counters (the VTC scheme of "Fairness in Serving Large Language Models",
//!   OSDI '24): each (tenant, band) flow has a counter; the band serves the backlogged flow with
//!   the smallest counter (ties: the one that has waited longest since its last turn), and that
//!   counter advances by the request's cost / the tenant's weight. The band's virtual time is the
//!   counter at which the last request started, and a flow that becomes backlogged again is
//!   lifted to it, so an idle tenant gets no credit for its idle time. Costs count at least one
//!   token (a stream of free requests would otherwise never move its counter) and at most
//!   [`MAX_CHARGE`].
//! - **Completion correction.** [`FlowQueue::complete`] moves the counter by
//!   (actual − charged) / weight, so tenants pay for the tokens they used, not the estimate.
//!   A correction reaching a flow that has gone idle only counts while it stays ahead of the
//!   band's virtual time (a refund cannot build credit for later).
//! - **FIFO within a flow** (a tenant's requests of one priority).
//!
//! No tenant is starved within its band: once backlogged, a flow waits at most for the other
//! flows' counters to pass its own, which each does after cost_max · weight_max + 1 services
//! at most (cost in tokens, weights at least 1; a refund at completion can add the refunded
//! tokens' worth of turns to the refunded flow, which is the point of the correction).
//!
//! # Bounds
//! Entries and bytes in total and per tenant ([`FlowQueueConfig`]). A full tenant share refuses
//! the newcomer ([`Bound::TenantEntries`], [`Bound::TenantBytes`]): a tenant cannot push others
//! out to go beyond its share. A full queue evicts to make room only for a newcomer of strictly
//! higher priority: the victim is the newest entry of the flow holding the most bytes in the
//! lowest non-empty band (negative, sheddable priorities are the lowest), repeated until the
//! newcomer fits; if evicting every lower-priority entry would not make room, nothing is evicted
//! and the newcomer is refused ([`Bound::Entries`], [`Bound::Bytes`]). The newest goes first so
//! that what has waited longest keeps its place; the biggest holder pays first since bytes are
//! what fills the queue.
//!
//! # Memory
//! Everything is bounded by the configuration. Entries live in a slab (at most `max_entries`
//! slots, reused). A tenant's state (weight, counts, one flow per band it used) is kept while it
//! has entries queued and, once idle, in a least-recently-idle list: the oldest idle tenant is
//! forgotten for free once nothing it did can matter any more (no request in flight and every
//! counter at or behind its band's virtual time, so coming back would lift it there anyway),
//! and forgotten regardless when a new tenant needs room beyond `max_tenants` (it then
//! loses the lead it had over the band, at most its last charges). A tenant keeps at most
//! [`MAX_IDLE_FLOWS`] idle flows besides its busy ones. Bands exist while a flow uses them.
//!
//! # Time
//! `now` is passed in ([`std::time::Instant`]); the queue reads no clock. Deadlines are
//! `enqueue time + TTL`; an entry is expired when `now >= deadline`. [`FlowQueue::pop`] does not
//! look at deadlines: call [`FlowQueue::expire`] first with the same `now` (the router does both
//! under one lock), so that nothing past its deadline is dispatched and every expired entry is
//! answered `ttl-expired`.
//!
//! # Cost
//! Enqueue, pop, remove and each expired or evicted entry cost O(log n) (a handful of B-tree
//! operations); `complete` O(log n); no allocation per operation once the slabs have grown,
//! except the first time a tenant is seen.

#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;

use crate::{ConfigError, FlowQueueConfig, Reason};
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};
use warmpath_lru::{LruOrder, NIL};

/// The most tokens one request is charged (at dispatch or after correction). Far above any
/// context window; it keeps one absurd cost from swamping the counters' precision.
pub const MAX_CHARGE: u64 = 1 << 32;

/// Idle flows (bands where the tenant has nothing queued, kept for their counters) a tenant
/// keeps at most; beyond it the oldest is dropped.
pub const MAX_IDLE_FLOWS: usize = 4;

/// Names one queued entry, for [`FlowQueue::remove`]. A handle outlives its entry harmlessly:
/// a slot reused by a later entry has a new generation, so a stale handle matches nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Handle {
    slot: u32,
    generation: u32,
}

/// A request asking to wait. Build with [`Arrival::new`] and struct update syntax:
/// `Arrival { priority: 2, cost: 900, bytes: 4096, ..Arrival::new("acme", tx) }`.
#[derive(Debug)]
pub struct Arrival<'a, T> {
    /// Who it is for; fairness is between tenants.
    pub tenant: &'a str,
    /// The tenant's share relative to the others in its band (TenantPolicy `weight`); 0 counts
    /// as 1. The latest arrival's weight is the tenant's weight from then on.
    pub weight: u32,
    /// Higher first; negative = sheddable (evicted first when the queue is full).
    pub priority: i32,
    /// Tokens charged at dispatch: the prompt's uncached tokens plus the expected output.
    pub cost: u64,
    /// The request body's size, counted against the byte bounds.
    pub bytes: u64,
    /// How long it may wait; `None`: the configured `ttl_ms`.
    pub ttl: Option<Duration>,
    /// The tenant's own bound on queued entries (TenantPolicy `maxQueuedRequests`); the lower
    /// of this and `max_entries_per_tenant` applies.
    pub max_queued: Option<usize>,
    /// What the caller gets back when the entry leaves (the router's oneshot sender).
    pub payload: T,
}

impl<'a, T> Arrival<'a, T> {
    /// Weight 1, priority 0, no cost or bytes, the configured TTL.
    pub fn new(tenant: &'a str, payload: T) -> Self {
        Self {
            tenant,
            weight: 1,
            priority: 0,
            cost: 0,
            bytes: 0,
            ttl: None,
            max_queued: None,
            payload,
        }
    }
}

/// An entry leaving the queue (dispatched, evicted, expired or removed).
#[derive(Debug)]
pub struct Entry<T> {
    pub handle: Handle,
    pub tenant: Arc<str>,
    pub priority: i32,
    pub cost: u64,
    pub bytes: u64,
    pub enqueued_at: Instant,
    /// `None` when the TTL reached past what an `Instant` can say (never expires).
    pub deadline: Option<Instant>,
    pub payload: T,
}

/// The arrival was queued; to make room, `evicted` (lower-priority entries, to be answered
/// 429 [`Reason::Evicted`]) left the queue.
#[derive(Debug)]
#[must_use = "evicted entries must be answered"]
pub struct Enqueued<T> {
    pub handle: Handle,
    pub evicted: Vec<Entry<T>>,
}

/// Which bound refused an arrival. Its [`Bound::field`] names the setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Bound {
    Entries,
    Bytes,
    TenantEntries,
    TenantBytes,
    /// `max_tenants` tenants have entries queued; a new one cannot be tracked.
    Tenants,
}

impl Bound {
    /// The [`FlowQueueConfig`] field that bound (for logs; the wire says `queue-full`).
    pub const fn field(self) -> &'static str {
        match self {
            Bound::Entries => "max_entries",
            Bound::Bytes => "max_bytes",
            Bound::TenantEntries => "max_entries_per_tenant",
            Bound::TenantBytes => "max_bytes_per_tenant",
            Bound::Tenants => "max_tenants",
        }
    }
}

/// The arrival was not queued; its payload comes back.
#[derive(Debug)]
pub struct Refused<T> {
    pub bound: Bound,
    pub payload: T,
}

impl<T> Refused<T> {
    /// Always [`Reason::QueueFull`].
    pub fn reason(&self) -> Reason {
        Reason::QueueFull
    }
}

/// The next request to send to a replica.
#[derive(Debug)]
pub struct Dispatched<T> {
    pub entry: Entry<T>,
    /// Time spent queued (`now - enqueued_at`).
    pub waited: Duration,
    /// Hand back to [`FlowQueue::complete`] with the tokens actually used.
    pub ticket: Ticket,
}

/// What was charged at dispatch, for the correction at completion. Not `Clone`: a request
/// completes once.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "pass the ticket to FlowQueue::complete when the request ends"]
pub struct Ticket {
    tenant: u32,
    generation: u32,
    priority: i32,
    charged: u64,
    weight: u32,
}

impl Ticket {
    /// Tokens charged at dispatch (the cost, clamped to 1..=[`MAX_CHARGE`]).
    pub fn charged(&self) -> u64 {
        self.charged
    }

    /// The tenant's weight at dispatch (the correction divides by it).
    pub fn weight(&self) -> u32 {
        self.weight
    }
}

/// A virtual token count, totally ordered so it can key a B-tree (counters are finite: weights
/// are at least 1 and charges bounded).
#[derive(Debug, Clone, Copy)]
struct Vt(f64);

impl PartialEq for Vt {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Vt {}
impl PartialOrd for Vt {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Vt {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

#[derive(Debug)]
struct Node<T> {
    flow: u32,
    /// Neighbours in the flow's FIFO (slot numbers).
    prev: u32,
    next: u32,
    seq: u64,
    cost: u64,
    bytes: u64,
    enqueued_at: Instant,
    deadline: Option<Instant>,
    payload: T,
}

#[derive(Debug)]
struct Slot<T> {
    generation: u32,
    node: Option<Node<T>>,
}

#[derive(Debug)]
struct Tenant {
    name: Arc<str>,
    weight: u32,
    entries: usize,
    bytes: u64,
    /// Dispatched, not yet completed: corrections are still to come.
    in_flight: u32,
    /// One per band the tenant uses or recently used.
    flows: Vec<u32>,
}

#[derive(Debug)]
struct TenantSlot {
    generation: u32,
    tenant: Option<Tenant>,
}

/// A tenant's requests of one priority.
#[derive(Debug)]
struct Flow {
    tenant: u32,
    priority: i32,
    /// Tokens served / weight, in the band's virtual time.
    counter: f64,
    /// Tie-break among equal counters in the band's backlog: when the flow last (re)joined it.
    key_seq: u64,
    head: u32,
    tail: u32,
    len: usize,
    bytes: u64,
}

#[derive(Debug, Default)]
struct Band {
    /// The counter at which the last dispatched request started; monotone.
    vtime: f64,
    next_seq: u64,
    /// Flows with entries, by (counter, key_seq): the first is served next.
    backlogged: BTreeSet<(Vt, u64, u32)>,
    /// Flows with entries, by queued bytes: the last is the eviction victim's flow.
    by_bytes: BTreeSet<(u64, u32)>,
    entries: usize,
    bytes: u64,
    /// Flows (busy or idle) in this band; the band goes when the last does.
    flows: usize,
}

/// Requests waiting while a pool is saturated; see the module documentation for the order,
/// the bounds and the memory accounting.
#[derive(Debug)]
pub struct FlowQueue<T> {
    config: FlowQueueConfig,
    slots: Vec<Slot<T>>,
    free_slots: Vec<u32>,
    /// (deadline, arrival seq, slot) of every entry that has a deadline.
    deadlines: BTreeSet<(Instant, u64, u32)>,
    tenants: Vec<TenantSlot>,
    free_tenants: Vec<u32>,
    tenant_ids: HashMap<Arc<str>, u32>,
    /// Tenants with nothing queued, least recently idle first.
    idle: LruOrder,
    flows: Vec<Option<Flow>>,
    free_flows: Vec<u32>,
    bands: BTreeMap<i32, Band>,
    /// Bands with entries.
    active: BTreeSet<i32>,
    entries: usize,
    bytes: u64,
    seq: u64,
}

impl<T> FlowQueue<T> {
    pub fn new(config: FlowQueueConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            config,
            slots: Vec::new(),
            free_slots: Vec::new(),
            deadlines: BTreeSet::new(),
            tenants: Vec::new(),
            free_tenants: Vec::new(),
            tenant_ids: HashMap::new(),
            idle: LruOrder::new(),
            flows: Vec::new(),
            free_flows: Vec::new(),
            bands: BTreeMap::new(),
            active: BTreeSet::new(),
            entries: 0,
            bytes: 0,
            seq: 0,
        })
    }

    pub fn config(&self) -> &FlowQueueConfig {
        &self.config
    }

    /// Entries queued.
    pub fn len(&self) -> usize {
        self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// Bytes queued.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Tenants whose state is kept (with entries queued or recently idle).
    pub fn tenants(&self) -> usize {
        self.tenant_ids.len()
    }

    /// Every tenant whose state is kept, with its queued (entries, bytes): for status pages.
    pub fn queued_by_tenant(&self) -> impl Iterator<Item = (&Arc<str>, usize, u64)> {
        self.tenants
            .iter()
            .filter_map(|slot| slot.tenant.as_ref())
            .map(|t| (&t.name, t.entries, t.bytes))
    }

    /// A tenant's queued (entries, bytes); `None` when the queue keeps no state for it.
    pub fn tenant_queued(&self, tenant: &str) -> Option<(usize, u64)> {
        let t = self.tenant(*self.tenant_ids.get(tenant)?);
        Some((t.entries, t.bytes))
    }

    /// A tenant's virtual token counter in a band (tokens served / weight, corrected), for
    /// explanations and tests.
    pub fn counter(&self, tenant: &str, priority: i32) -> Option<f64> {
        let t = self.tenant(*self.tenant_ids.get(tenant)?);
        t.flows
            .iter()
            .map(|&f| self.flow(f))
            .find(|f| f.priority == priority)
            .map(|f| f.counter)
    }

    /// A band's virtual time; `None` when no flow uses the band.
    pub fn virtual_time(&self, priority: i32) -> Option<f64> {
        self.bands.get(&priority).map(|b| b.vtime)
    }

    /// Whether the entry is still queued.
    pub fn contains(&self, handle: Handle) -> bool {
        self.slots
            .get(handle.slot as usize)
            .is_some_and(|s| s.generation == handle.generation && s.node.is_some())
    }

    /// The earliest deadline of a queued entry: when [`FlowQueue::expire`] next has work.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.first().map(|d| d.0)
    }

    /// Queue a request at `now`, evicting lower-priority entries if the queue is full and that
    /// makes room, or refuse it (module documentation, "Bounds").
    pub fn enqueue(
        &mut self,
        now: Instant,
        arrival: Arrival<'_, T>,
    ) -> Result<Enqueued<T>, Refused<T>> {
        let Arrival {
            tenant: name,
            weight,
            priority,
            cost,
            bytes,
            ttl,
            max_queued,
            payload,
        } = arrival;
        let c = self.config;
        let existing = self.tenant_ids.get(name).copied();
        let (t_entries, t_bytes) = existing.map_or((0, 0), |t| {
            let t = self.tenant(t);
            (t.entries, t.bytes)
        });
        let tenant_cap = max_queued.map_or(c.max_entries_per_tenant, |m| {
            m.min(c.max_entries_per_tenant)
        });
        macro_rules! refuse {
            ($bound:expr) => {
                return Err(Refused {
                    bound: $bound,
                    payload,
                })
            };
        }
        if t_entries >= tenant_cap {
            refuse!(Bound::TenantEntries);
        }
        if t_bytes.saturating_add(bytes) > c.max_bytes_per_tenant {
            refuse!(Bound::TenantBytes);
        }
        if existing.is_none() && self.tenant_ids.len() >= c.max_tenants && self.idle.is_empty() {
            refuse!(Bound::Tenants);
        }
        let over_entries = self.entries >= c.max_entries;
        let over_bytes = self.bytes.saturating_add(bytes).saturating_sub(c.max_bytes);
        if over_entries || over_bytes > 0 {
            let (lower_entries, lower_bytes) = self
                .active
                .range(..priority)
                .map(|p| &self.bands[p])
                .fold((0, 0), |(n, b), band| (n + band.entries, b + band.bytes));
            if over_entries && lower_entries == 0 {
                refuse!(Bound::Entries);
            }
            if lower_bytes < over_bytes {
                refuse!(Bound::Bytes);
            }
        }

        let mut evicted = Vec::new();
        while self.entries >= c.max_entries || self.bytes.saturating_add(bytes) > c.max_bytes {
            // Feasibility was checked above, so the lowest band is below `priority` until the
            // arrival fits.
            let Some(slot) = self.victim() else { break };
            debug_assert!(self.slot_priority(slot) < priority);
            evicted.push(self.detach(slot).0);
        }

        let t = match existing {
            Some(t) => t,
            None => self.add_tenant(name),
        };
        self.tenant_mut(t).weight = weight.max(1);
        let f = self.flow_for(t, priority);
        let deadline = now.checked_add(ttl.unwrap_or(c.ttl()));
        let seq = self.seq;
        self.seq += 1;
        let tail = self.flow(f).tail;
        let node = Node {
            flow: f,
            prev: tail,
            next: NIL,
            seq,
            cost,
            bytes,
            enqueued_at: now,
            deadline,
            payload,
        };
        let slot = self.alloc_slot(node);
        let handle = Handle {
            slot,
            generation: self.slots[slot as usize].generation,
        };
        match tail {
            NIL => self.flow_mut(f).head = slot,
            prev => self.node_mut(prev).next = slot,
        }
        let (old_len, old_bytes) = {
            let flow = self.flow_mut(f);
            flow.tail = slot;
            let old = (flow.len, flow.bytes);
            flow.len += 1;
            flow.bytes += bytes;
            old
        };
        if old_len == 0 {
            // Rejoining the backlog: no credit for the time away (SFQ's max(V, F)).
            let band = self.bands.get_mut(&priority).expect("flow's band");
            let flow = self.flows[f as usize].as_mut().expect("live flow");
            flow.counter = flow.counter.max(band.vtime);
            flow.key_seq = band.next_seq;
            band.next_seq += 1;
            band.backlogged.insert((Vt(flow.counter), flow.key_seq, f));
        }
        let band = self.bands.get_mut(&priority).expect("flow's band");
        if old_len > 0 {
            band.by_bytes.remove(&(old_bytes, f));
        }
        band.by_bytes.insert((old_bytes + bytes, f));
        band.entries += 1;
        band.bytes += bytes;
        self.active.insert(priority);
        let tenant = self.tenant_mut(t);
        tenant.entries += 1;
        tenant.bytes += bytes;
        if tenant.entries == 1 {
            self.idle.remove(t);
        }
        self.entries += 1;
        self.bytes += bytes;
        if let Some(d) = deadline {
            self.deadlines.insert((d, seq, slot));
        }
        self.prune_idle();
        Ok(Enqueued { handle, evicted })
    }

    /// The payload [`FlowQueue::pop`] would return next, without dispatching it: the caller may
    /// hold the head back (say, until the pool has room for that tenant) without breaking the
    /// fair order.
    pub fn peek(&self) -> Option<&T> {
        let priority = self.active.last()?;
        let band = self.bands.get(priority).expect("active band");
        let &(_, _, f) = band.backlogged.first().expect("active band has a backlog");
        let slot = self.flow(f).head;
        self.slots[slot as usize]
            .node
            .as_ref()
            .map(|node| &node.payload)
    }

    /// The next request to dispatch: the highest band with entries, in it the backlogged flow
    /// with the smallest counter, its oldest entry. Charges the flow. Deadlines are not
    /// looked at (call [`FlowQueue::expire`] first).
    pub fn pop(&mut self, now: Instant) -> Option<Dispatched<T>> {
        let &priority = self.active.last()?;
        let band = self.bands.get_mut(&priority).expect("active band");
        let &(Vt(start), _, f) = band.backlogged.first().expect("active band has a backlog");
        band.vtime = band.vtime.max(start);
        let slot = self.flow(f).head;
        let (entry, _, t) = self.detach(slot);
        let tenant = self.tenant_mut(t);
        tenant.in_flight = tenant.in_flight.saturating_add(1);
        let weight = tenant.weight;
        let charged = entry.cost.clamp(1, MAX_CHARGE);
        self.set_counter(f, start + charged as f64 / f64::from(weight), true);
        let ticket = Ticket {
            tenant: t,
            generation: self.tenants[t as usize].generation,
            priority,
            charged,
            weight,
        };
        self.prune_idle();
        Some(Dispatched {
            waited: now.saturating_duration_since(entry.enqueued_at),
            entry,
            ticket,
        })
    }

    /// A dispatched request ended having used `actual_tokens` (the prompt's uncached tokens
    /// plus the generated ones; what is known if it failed): correct its flow's counter by
    /// (actual − charged) / weight. Nothing happens if the tenant has been forgotten since.
    pub fn complete(&mut self, ticket: Ticket, actual_tokens: u64) {
        let Some(tenant) = self
            .tenants
            .get_mut(ticket.tenant as usize)
            .filter(|s| s.generation == ticket.generation)
            .and_then(|s| s.tenant.as_mut())
        else {
            return;
        };
        tenant.in_flight = tenant.in_flight.saturating_sub(1);
        let flow = tenant.flows.iter().copied().find(|&f| {
            self.flows[f as usize].as_ref().expect("live flow").priority == ticket.priority
        });
        if let Some(f) = flow {
            let delta = (actual_tokens.min(MAX_CHARGE) as f64 - ticket.charged as f64)
                / f64::from(ticket.weight.max(1));
            let counter = self.flow(f).counter + delta;
            self.set_counter(f, counter, false);
        }
        self.prune_idle();
    }

    /// Remove and return every entry whose deadline is at or before `now`, earliest first
    /// (to be answered 429 [`Reason::TtlExpired`]).
    pub fn expire(&mut self, now: Instant) -> Vec<Entry<T>> {
        let mut out = Vec::new();
        while let Some(&(deadline, _, slot)) = self.deadlines.first() {
            if deadline > now {
                break;
            }
            out.push(self.detach(slot).0);
        }
        if !out.is_empty() {
            self.prune_idle();
        }
        out
    }

    /// Remove one entry (its client went away); `None` if it already left the queue.
    pub fn remove(&mut self, handle: Handle) -> Option<Entry<T>> {
        if !self.contains(handle) {
            return None;
        }
        let entry = self.detach(handle.slot).0;
        self.prune_idle();
        Some(entry)
    }

    // ---- internals ----

    fn tenant(&self, t: u32) -> &Tenant {
        self.tenants[t as usize]
            .tenant
            .as_ref()
            .expect("live tenant")
    }

    fn tenant_mut(&mut self, t: u32) -> &mut Tenant {
        self.tenants[t as usize]
            .tenant
            .as_mut()
            .expect("live tenant")
    }

    fn flow(&self, f: u32) -> &Flow {
        self.flows[f as usize].as_ref().expect("live flow")
    }

    fn flow_mut(&mut self, f: u32) -> &mut Flow {
        self.flows[f as usize].as_mut().expect("live flow")
    }

    fn node_mut(&mut self, slot: u32) -> &mut Node<T> {
        self.slots[slot as usize].node.as_mut().expect("live entry")
    }

    fn slot_priority(&self, slot: u32) -> i32 {
        let node = self.slots[slot as usize].node.as_ref().expect("live entry");
        self.flow(node.flow).priority
    }

    fn alloc_slot(&mut self, node: Node<T>) -> u32 {
        match self.free_slots.pop() {
            Some(s) => {
                self.slots[s as usize].node = Some(node);
                s
            }
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    node: Some(node),
                });
                (self.slots.len() - 1) as u32
            }
        }
    }

    /// The newest entry of the flow with the most bytes in the lowest band with entries.
    fn victim(&self) -> Option<u32> {
        let band = &self.bands[self.active.first()?];
        let &(_, f) = band.by_bytes.last()?;
        Some(self.flow(f).tail)
    }

    /// Set a flow's counter, keeping the band's backlog ordered; `fresh_turn` queues it behind
    /// flows with an equal counter (after it was served).
    fn set_counter(&mut self, f: u32, counter: f64, fresh_turn: bool) {
        let flow = self.flows[f as usize].as_mut().expect("live flow");
        if flow.len == 0 {
            flow.counter = counter;
            return;
        }
        let band = self.bands.get_mut(&flow.priority).expect("flow's band");
        band.backlogged.remove(&(Vt(flow.counter), flow.key_seq, f));
        flow.counter = counter;
        if fresh_turn {
            flow.key_seq = band.next_seq;
            band.next_seq += 1;
        }
        band.backlogged.insert((Vt(flow.counter), flow.key_seq, f));
    }

    /// Take a live entry out of every structure; returns it with its flow and tenant.
    fn detach(&mut self, slot: u32) -> (Entry<T>, u32, u32) {
        let s = &mut self.slots[slot as usize];
        let node = s.node.take().expect("live entry");
        let handle = Handle {
            slot,
            generation: s.generation,
        };
        s.generation = s.generation.wrapping_add(1);
        self.free_slots.push(slot);
        let f = node.flow;
        match node.prev {
            NIL => self.flow_mut(f).head = node.next,
            p => self.node_mut(p).next = node.next,
        }
        match node.next {
            NIL => self.flow_mut(f).tail = node.prev,
            n => self.node_mut(n).prev = node.prev,
        }
        let flow = self.flows[f as usize].as_mut().expect("live flow");
        let (priority, t) = (flow.priority, flow.tenant);
        let band = self.bands.get_mut(&priority).expect("flow's band");
        band.by_bytes.remove(&(flow.bytes, f));
        flow.len -= 1;
        flow.bytes -= node.bytes;
        if flow.len > 0 {
            band.by_bytes.insert((flow.bytes, f));
        } else {
            band.backlogged.remove(&(Vt(flow.counter), flow.key_seq, f));
        }
        band.entries -= 1;
        band.bytes -= node.bytes;
        if band.entries == 0 {
            self.active.remove(&priority);
        }
        let drained = flow.len == 0;
        let tenant = self.tenant_mut(t);
        tenant.entries -= 1;
        tenant.bytes -= node.bytes;
        let name = tenant.name.clone();
        if tenant.entries == 0 {
            self.idle.push_newest(t);
        }
        if drained {
            self.trim_idle_flows(t, f);
        }
        self.entries -= 1;
        self.bytes -= node.bytes;
        if let Some(d) = node.deadline {
            self.deadlines.remove(&(d, node.seq, slot));
        }
        let entry = Entry {
            handle,
            tenant: name,
            priority,
            cost: node.cost,
            bytes: node.bytes,
            enqueued_at: node.enqueued_at,
            deadline: node.deadline,
            payload: node.payload,
        };
        (entry, f, t)
    }

    fn add_tenant(&mut self, name: &str) -> u32 {
        if self.tenant_ids.len() >= self.config.max_tenants {
            // The caller checked that an idle tenant exists.
            if let Some(oldest) = self.idle.oldest() {
                self.forget(oldest);
            }
        }
        let name: Arc<str> = Arc::from(name);
        let tenant = Tenant {
            name: name.clone(),
            weight: 1,
            entries: 0,
            bytes: 0,
            in_flight: 0,
            flows: Vec::new(),
        };
        let t = match self.free_tenants.pop() {
            Some(t) => {
                self.tenants[t as usize].tenant = Some(tenant);
                t
            }
            None => {
                self.tenants.push(TenantSlot {
                    generation: 0,
                    tenant: Some(tenant),
                });
                (self.tenants.len() - 1) as u32
            }
        };
        self.tenant_ids.insert(name, t);
        t
    }

    /// Forget an idle tenant and its (idle) flows.
    fn forget(&mut self, t: u32) {
        let s = &mut self.tenants[t as usize];
        let tenant = s.tenant.take().expect("live tenant");
        debug_assert_eq!(tenant.entries, 0);
        s.generation = s.generation.wrapping_add(1);
        self.free_tenants.push(t);
        self.idle.remove(t);
        self.tenant_ids.remove(&tenant.name);
        for f in tenant.flows {
            self.drop_flow(f);
        }
    }

    fn drop_flow(&mut self, f: u32) {
        let flow = self.flows[f as usize].take().expect("live flow");
        debug_assert_eq!(flow.len, 0);
        self.free_flows.push(f);
        let band = self.bands.get_mut(&flow.priority).expect("flow's band");
        band.flows -= 1;
        if band.flows == 0 {
            self.bands.remove(&flow.priority);
        }
    }

    /// Whether an idle flow's counter no longer matters: rejoining would lift it to the band's
    /// virtual time anyway.
    fn flow_is_spent(&self, f: u32) -> bool {
        let flow = self.flow(f);
        flow.len == 0 && flow.counter <= self.bands[&flow.priority].vtime
    }

    /// The tenant's flow for `priority`, created (at the band's virtual time) if needed.
    fn flow_for(&mut self, t: u32, priority: i32) -> u32 {
        let flows = &self.tenant(t).flows;
        if let Some(&f) = flows.iter().find(|&&f| self.flow(f).priority == priority) {
            return f;
        }
        let band = self.bands.entry(priority).or_default();
        band.flows += 1;
        let flow = Flow {
            tenant: t,
            priority,
            counter: band.vtime,
            key_seq: 0,
            head: NIL,
            tail: NIL,
            len: 0,
            bytes: 0,
        };
        let f = match self.free_flows.pop() {
            Some(f) => {
                self.flows[f as usize] = Some(flow);
                f
            }
            None => {
                self.flows.push(Some(flow));
                (self.flows.len() - 1) as u32
            }
        };
        self.tenant_mut(t).flows.push(f);
        f
    }

    /// A flow of tenant `t` went idle: drop the tenant's idle flows whose counters no longer
    /// matter, then the oldest idle ones beyond [`MAX_IDLE_FLOWS`]. `keep` (the flow that just
    /// went idle, about to be charged if it was dispatched) stays.
    fn trim_idle_flows(&mut self, t: u32, keep: u32) {
        let flows = &self.tenant(t).flows;
        if flows.len() <= 1 {
            return;
        }
        // Newest first (flows are kept in creation order), `keep` already counted.
        let mut kept = 1;
        let mut drop = Vec::new();
        for &f in flows.iter().rev().filter(|&&f| f != keep) {
            if self.flow(f).len > 0 {
                continue;
            }
            if kept >= MAX_IDLE_FLOWS || self.flow_is_spent(f) {
                drop.push(f);
            } else {
                kept += 1;
            }
        }
        for f in drop {
            self.tenant_mut(t).flows.retain(|&x| x != f);
            self.drop_flow(f);
        }
    }

    /// Forget the longest-idle tenant if nothing it did can matter any more (module
    /// documentation, "Memory"). One check per operation keeps it O(1).
    fn prune_idle(&mut self) {
        let Some(t) = self.idle.oldest() else { return };
        let tenant = self.tenant(t);
        if tenant.in_flight == 0 && tenant.flows.iter().all(|&f| self.flow_is_spent(f)) {
            self.forget(t);
        }
    }

    /// Check every internal invariant against a recount (tests only).
    #[cfg(test)]
    pub(crate) fn assert_consistent(&self) {
        let c = &self.config;
        let live: Vec<u32> = (0..self.slots.len() as u32)
            .filter(|&s| self.slots[s as usize].node.is_some())
            .collect();
        assert_eq!(live.len(), self.entries);
        assert!(self.entries <= c.max_entries, "entries over the bound");
        assert!(self.bytes <= c.max_bytes, "bytes over the bound");
        assert!(
            self.tenant_ids.len() <= c.max_tenants,
            "tenants over the bound"
        );
        let bytes: u64 = live
            .iter()
            .map(|&s| self.slots[s as usize].node.as_ref().unwrap().bytes)
            .sum();
        assert_eq!(bytes, self.bytes);
        let with_deadline = live
            .iter()
            .filter(|&&s| {
                self.slots[s as usize]
                    .node
                    .as_ref()
                    .unwrap()
                    .deadline
                    .is_some()
            })
            .count();
        assert_eq!(with_deadline, self.deadlines.len());
        for &(d, seq, s) in &self.deadlines {
            let n = self.slots[s as usize]
                .node
                .as_ref()
                .expect("deadline of a live entry");
            assert_eq!((n.deadline, n.seq), (Some(d), seq));
        }
        let mut band_flows: BTreeMap<i32, usize> = BTreeMap::new();
        let mut seen_flows = 0;
        for (t, s) in self.tenants.iter().enumerate() {
            let Some(tenant) = &s.tenant else { continue };
            assert_eq!(self.tenant_ids.get(&tenant.name), Some(&(t as u32)));
            assert_eq!(self.idle.contains(t as u32), tenant.entries == 0);
            assert!(tenant.entries <= c.max_entries_per_tenant);
            assert!(tenant.bytes <= c.max_bytes_per_tenant);
            assert!(
                tenant
                    .flows
                    .iter()
                    .filter(|&&f| self.flow(f).len == 0)
                    .count()
                    <= MAX_IDLE_FLOWS
            );
            let (mut n, mut b) = (0, 0);
            for &f in &tenant.flows {
                seen_flows += 1;
                let flow = self.flow(f);
                assert_eq!(flow.tenant, t as u32);
                *band_flows.entry(flow.priority).or_default() += 1;
                // Walk the FIFO both ways.
                let (mut len, mut fb, mut prev, mut i) = (0, 0, NIL, flow.head);
                while i != NIL {
                    let node = self.slots[i as usize].node.as_ref().unwrap();
                    assert_eq!((node.flow, node.prev), (f, prev));
                    if prev != NIL {
                        let p = self.slots[prev as usize].node.as_ref().unwrap();
                        assert!(p.seq < node.seq, "FIFO order");
                    }
                    len += 1;
                    fb += node.bytes;
                    prev = i;
                    i = node.next;
                }
                assert_eq!((flow.tail, len, fb), (prev, flow.len, flow.bytes));
                let band = &self.bands[&flow.priority];
                let key = (Vt(flow.counter), flow.key_seq, f);
                assert_eq!(band.backlogged.contains(&key), flow.len > 0);
                assert_eq!(band.by_bytes.contains(&(flow.bytes, f)), flow.len > 0);
                n += flow.len;
                b += flow.bytes;
            }
            assert_eq!((n, b), (tenant.entries, tenant.bytes));
        }
        assert_eq!(self.idle.len(), {
            let idle = self.tenants.iter().filter_map(|s| s.tenant.as_ref());
            idle.filter(|t| t.entries == 0).count()
        });
        assert_eq!(seen_flows, self.flows.iter().flatten().count());
        assert_eq!(band_flows.len(), self.bands.len());
        let (mut n, mut b) = (0, 0);
        for (p, band) in &self.bands {
            assert_eq!(band.flows, band_flows[p]);
            assert_eq!(band.backlogged.len(), band.by_bytes.len());
            let (bn, bb) = band.backlogged.iter().fold((0, 0), |(n, b), &(_, _, f)| {
                (n + self.flow(f).len, b + self.flow(f).bytes)
            });
            assert_eq!((bn, bb), (band.entries, band.bytes));
            assert_eq!(self.active.contains(p), band.entries > 0);
            n += band.entries;
            b += band.bytes;
        }
        assert_eq!((n, b), (self.entries, self.bytes));
    }
}
