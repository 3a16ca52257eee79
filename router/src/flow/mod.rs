//! Per-tenant flow control: the router's [`Admission`], built on the pure core in
//! [`warmpath_flow`].
//!
//! For each request, under one lock:
//! 1. The tenant's limits (requests/s, tokens/s, concurrency): over them → 429 `rate-limited`
//!    with the wait in `retry-after`. Limits apply whether or not queueing is enabled.
//! 2. With `flow.enabled`, if the model's pool is saturated ([`saturation`]) or requests are
//!    already waiting for it: a sheddable tenant's request is refused (429 `saturated`); any
//!    other waits in the model's [`FlowQueue`] (priority bands, token-fair within a band, FIFO
//!    within a tenant), or is refused when the queue has no room for it (`queue-full`), and may
//!    later be pushed out by higher-priority work (`evicted`) or wait too long (`ttl-expired`).
//! 3. Otherwise it goes on at once, holding a [`Grant`] until its response ends.
//!
//! The dispatcher task ([`FlowControl::run`]) releases queued requests while the pool is not
//! saturated: woken when a request ends (capacity freed) or gets its first token (its prefill
//! is done), on each queue's next deadline, and every [`TICK`] while anything waits (engine
//! load changes with scrapes, which nothing announces). A queued request whose client goes
//! away leaves the queue at once.
//!
//! Latency isolation: a tenant under its fair share of the pool's slots
//! ([`saturation::under_share`]) may take `saturation.headroom_requests` slots above the regular
//! bound, straight away when it has nothing queued, and from the head of the queue otherwise;
//! queued work of every other tenant also waits while the prompt tokens admitted but not yet at
//! their first token reach `saturation.max_pending_prefill_tokens` per ready replica (the
//! pool's total, counted here at dispatch) or every ready replica has that many of its own
//! (counted by the replica choice), so that a light tenant's prefill shares its engine step
//! with a bounded amount of a backlog's prefills. Each grant tells the replica choice where its
//! prefill may go ([`PrefillRule`]): a backlog's work only to a replica under the bound while one
//! is, a light tenant's to the replica with the least prefill work ahead of its first token.
//!
//! A request is charged at dispatch its prompt tokens plus its expected output (`max_tokens`,
//! capped by `flow.expected_output_tokens`), or 1 with `fairness: requests`; when its response
//! ends its charge is corrected to the prompt tokens the replica did not have cached plus the
//! output tokens it produced ([`crate::body::usage`]), for the fair queue and the tokens/s
//! bucket alike.
//!
//! State is bounded: one queue per model the configuration serves (each bounded by
//! `flow.queue`), limiters for at most `flow.limiters.max_tenants` tenants, metric labels for
//! at most `flow.metric_tenants`.

pub mod saturation;
#[cfg(test)]
mod tests;

use crate::api::admission::{Admission, AdmissionRequest, Admit, Held, Permit};
use crate::choice::PrefillRule;
use crate::config::{Fairness, FlowConfig, SaturationConfig};
use crate::errors::ApiError;
use crate::metrics::{DispatchLabels, Metrics, ObjectiveLabels, RefusalLabels, TenantLabels};
use crate::state::publish::TableReader;
use crate::state::table::Table;
use crate::tenants::{Objective, Tenant};
use parking_lot::Mutex;
use saturation::AdmittedLoad;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch, Notify};
use warmpath_flow::{
    Arrival, ConfigError, Entry, FlowQueue, Handle, LimitersConfig, Reason, TenantLimiters,
    TenantPermit, Ticket,
};

/// How often the dispatcher looks at a saturated pool again while requests wait.
pub const TICK: Duration = Duration::from_millis(10);

/// Output tokens not known (the response was not scanned, or said nothing countable).
const UNKNOWN: u64 = u64::MAX;

/// Flow control for one router.
#[derive(Clone)]
pub struct FlowControl {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// A request ended or one was queued: the dispatcher has something to look at.
    wake: Notify,
    metrics: Arc<Metrics>,
}

struct State {
    limiters: TenantLimiters,
    models: HashMap<Arc<str>, ModelFlow>,
}

#[derive(Default)]
struct ModelFlow {
    queue: Option<FlowQueue<Waiter>>,
    admitted: AdmittedLoad,
    /// Of `admitted`, the requests that have no first token yet, and their prompt tokens
    /// (uncached, once the replica choice has said): prefill work still ahead in the engines.
    prefilling: AdmittedLoad,
    /// Of `prefilling`, the requests admitted while their tenant was under its share.
    light_prefilling: u32,
    /// Requests in flight per tenant (entries go at zero, so the map holds at most one entry
    /// per admitted request).
    tenants: HashMap<Arc<str>, u32>,
}

/// A tenant's requests of one model, now.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TenantNow {
    pub model: Arc<str>,
    pub tenant: Arc<str>,
    pub in_flight: u32,
    pub queued: usize,
    pub queued_bytes: u64,
}

/// A queued request: where its answer goes, and what its grant will hold.
struct Waiter {
    tx: oneshot::Sender<Result<Permit, ApiError>>,
    seed: Seed,
}

/// What a request brings to its grant.
struct Seed {
    tenant: Arc<Tenant>,
    label: String,
    limit: TenantPermit,
    /// Prompt plus expected output tokens (limits and in-flight accounting).
    tokens: u64,
    prompt_tokens: u64,
    expected_output: u64,
    fairness: Fairness,
}

impl FlowControl {
    pub fn new(limiters: LimitersConfig, metrics: Arc<Metrics>) -> Result<Self, ConfigError> {
        Ok(Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    limiters: TenantLimiters::new(limiters)?,
                    models: HashMap::new(),
                }),
                wake: Notify::new(),
                metrics,
            }),
        })
    }

    /// Requests waiting now, all models.
    pub fn queued(&self) -> usize {
        let st = self.shared.state.lock();
        st.models
            .values()
            .filter_map(|m| m.queue.as_ref())
            .map(FlowQueue::len)
            .sum()
    }

    /// Per model and tenant: requests in flight and queued now (tenants with neither are
    /// left out), for the status page.
    pub fn tenants(&self) -> Vec<TenantNow> {
        let st = self.shared.state.lock();
        let mut out = Vec::new();
        for (model, flow) in &st.models {
            let mut rows: HashMap<&Arc<str>, TenantNow> = HashMap::new();
            let row = |tenant: &Arc<str>| TenantNow {
                model: model.clone(),
                tenant: tenant.clone(),
                in_flight: 0,
                queued: 0,
                queued_bytes: 0,
            };
            for (tenant, &n) in &flow.tenants {
                rows.entry(tenant).or_insert_with(|| row(tenant)).in_flight = n;
            }
            for (tenant, entries, bytes) in flow.queue.iter().flat_map(FlowQueue::queued_by_tenant)
            {
                if entries > 0 {
                    let r = rows.entry(tenant).or_insert_with(|| row(tenant));
                    r.queued = entries;
                    r.queued_bytes = bytes;
                }
            }
            out.extend(rows.into_values());
        }
        out.sort_by(|a, b| (&a.model, &a.tenant).cmp(&(&b.model, &b.tenant)));
        out
    }

    /// Release queued requests as capacity allows, until `shutdown`; then answer every queued
    /// request 503 (the router is going away).
    pub async fn run(self, tables: TableReader, mut shutdown: watch::Receiver<bool>) {
        loop {
            let (waiting, deadline) = {
                let st = self.shared.state.lock();
                let queues = st.models.values().filter_map(|m| m.queue.as_ref());
                let waiting = queues.clone().any(|q| !q.is_empty());
                (waiting, queues.filter_map(FlowQueue::next_deadline).min())
            };
            let next = if waiting {
                let tick = tokio::time::Instant::now() + TICK;
                deadline.map_or(tick, |d| tick.min(d.into()))
            } else {
                tokio::time::Instant::now() + Duration::from_secs(3600)
            };
            tokio::select! {
                _ = self.shared.wake.notified() => {}
                _ = tokio::time::sleep_until(next) => {}
                _ = shutdown.changed() => break,
            }
            self.dispatch(&tables.current(), Instant::now());
        }
        let mut st = self.shared.state.lock();
        let State { limiters, models } = &mut *st;
        let now = Instant::now();
        for (_, m) in models.iter_mut() {
            if let Some(mut q) = m.queue.take() {
                while let Some(d) = q.pop(now) {
                    limiters.release(d.entry.payload.seed.limit, None);
                    let _ = d.entry.payload.tx.send(Err(shutting_down()));
                }
            }
        }
    }

    /// Expire what waited too long, then dispatch while each pool has room.
    fn dispatch(&self, table: &Arc<Table>, now: Instant) {
        let flow = &table.config.flow;
        let metrics = &self.shared.metrics.flow;
        // Permits whose client left between dispatch and delivery; dropped after the lock.
        let mut undelivered = Vec::new();
        {
            let mut st = self.shared.state.lock();
            let State { limiters, models } = &mut *st;
            for (model, m) in models.iter_mut() {
                let ModelFlow {
                    queue,
                    admitted,
                    prefilling,
                    light_prefilling,
                    tenants,
                } = m;
                let Some(q) = queue.as_mut() else { continue };
                if q.is_empty() {
                    continue;
                }
                for e in q.expire(now) {
                    refuse_entry(limiters, &self.shared.metrics, e, Reason::TtlExpired);
                }
                let candidates = table.candidates(model);
                let ready = candidates.map_or(0, |c| saturation::ready(c, now));
                let bounds = &flow.saturation;
                let headroom = saturation::with_headroom(bounds);
                let isolating = isolating(bounds);
                while let Some(head) = q.peek() {
                    // The head is next in fair order whatever happens; these rules only say
                    // whether it goes now.
                    let light =
                        isolating && under_share(tenants, &head.seed.tenant.name, bounds, ready);
                    let held = if light {
                        headroom.as_ref().unwrap_or(bounds)
                    } else {
                        bounds
                    };
                    let saturated = flow.enabled
                        && candidates.is_some_and(|c| {
                            saturation::saturated(c, held, *admitted, table.stale_after, now)
                        });
                    // Held by prefill work: the pool's count moves at dispatch (so one pass
                    // cannot release a burst), the replicas' when the choice has been made.
                    let prefill_held = flow.enabled
                        && !light
                        && (saturation::prefill_gated(
                            bounds,
                            prefilling.tokens,
                            *light_prefilling,
                            ready,
                        ) || candidates
                            .is_some_and(|c| saturation::every_replica_prefilling(c, bounds, now)));
                    if saturated || prefill_held {
                        break;
                    }
                    let d = q.pop(now).expect("a non-empty queue pops");
                    let Waiter { tx, seed } = d.entry.payload;
                    metrics.queued.get_or_create(&label(&seed)).dec();
                    metrics
                        .queue_wait
                        .get_or_create(&label(&seed))
                        .observe(d.waited.as_secs_f64());
                    metrics
                        .dispatched
                        .get_or_create(&DispatchLabels {
                            tenant: seed.label.clone(),
                            path: "queued",
                        })
                        .inc();
                    count_in(admitted, prefilling, tenants, &seed);
                    *light_prefilling += u32::from(light);
                    let grant = self.grant(model.clone(), seed, Some(d.ticket), light, flow);
                    if let Err(Ok(permit)) = tx.send(Ok(grant)) {
                        undelivered.push(permit);
                    }
                }
            }
            self.set_totals(&st);
        }
        drop(undelivered);
    }

    fn grant(
        &self,
        model: Arc<str>,
        seed: Seed,
        ticket: Option<Ticket>,
        light: bool,
        flow: &FlowConfig,
    ) -> Permit {
        Permit(Some(Arc::new(Grant {
            shared: self.shared.clone(),
            model,
            uncached: AtomicU64::new(seed.prompt_tokens),
            prefilling: AtomicU64::new(seed.prompt_tokens),
            light,
            prefill_rule: prefill_rule(flow, light),
            output: AtomicU64::new(UNKNOWN),
            seed: Some(seed),
            ticket,
        })))
    }

    fn set_totals(&self, st: &State) {
        let (mut n, mut bytes) = (0usize, 0u64);
        for q in st.models.values().filter_map(|m| m.queue.as_ref()) {
            n += q.len();
            bytes += q.bytes();
        }
        let m = &self.shared.metrics.flow;
        m.queue_requests.set(n as i64);
        m.queue_bytes.set(bytes as i64);
    }

    fn refused(&self, tenant: &str, reason: &'static str) {
        self.shared
            .metrics
            .flow
            .refused
            .get_or_create(&RefusalLabels {
                tenant: tenant.to_owned(),
                reason,
            })
            .inc();
    }
}

impl FlowControl {
    /// Whether a request may take one of the pool's headroom slots
    /// (`saturation.headroom_requests`) instead of queueing: the pool is saturated for tenants
    /// at their share but not past the headroom, the tenant has nothing queued, and it has
    /// fewer requests in flight than its fair share of the pool's regular slots. A light tenant
    /// then starts at once beside a flood instead of waiting for a slot to free.
    fn may_use_headroom(
        &self,
        m: &ModelFlow,
        tenant: &Tenant,
        candidates: Option<&Arc<[crate::state::table::Candidate]>>,
        bounds: &SaturationConfig,
        saturated: &dyn Fn(&SaturationConfig, AdmittedLoad) -> bool,
        now: Instant,
    ) -> bool {
        let Some(wider) = saturation::with_headroom(bounds) else {
            return false;
        };
        let queued = m
            .queue
            .as_ref()
            .and_then(|q| q.tenant_queued(&tenant.name))
            .is_some_and(|(n, _)| n > 0);
        if queued {
            return false;
        }
        if saturated(&wider, m.admitted) {
            return false;
        }
        let ready = candidates.map_or(0, |c| saturation::ready(c, now));
        under_share(&m.tenants, &tenant.name, bounds, ready)
    }
}

/// Whether any rule that puts tenants under their share first is configured (only then is a
/// request's share looked at).
fn isolating(bounds: &SaturationConfig) -> bool {
    (bounds.headroom_requests > 0 && bounds.max_inflight_requests.is_some())
        || bounds.max_pending_prefill_tokens.is_some()
        || bounds.light_prefill_first
}

/// Where the replica choice may put a request admitted now, light (under its share) or not:
/// the per-replica half of the pending-prefill bound, and a light request's prefill steered to
/// the replica with the least prefill work ahead of it.
fn prefill_rule(flow: &FlowConfig, light: bool) -> PrefillRule {
    match (
        flow.enabled,
        light,
        flow.saturation.max_pending_prefill_tokens,
    ) {
        (false, _, _) => PrefillRule::Any,
        (true, true, _) => PrefillRule::LeastPrefill,
        (true, false, Some(max)) => PrefillRule::PrefillBelow(max),
        (true, false, None) => PrefillRule::Any,
    }
}

/// Whether `tenant` has fewer requests in flight for this model than its even share of the
/// pool's regular slots ([`saturation::under_share`]).
fn under_share(
    tenants: &HashMap<Arc<str>, u32>,
    tenant: &str,
    bounds: &SaturationConfig,
    ready: usize,
) -> bool {
    let in_flight = tenants.get(tenant).copied().unwrap_or(0);
    let sharing = tenants.len() as u64 + u64::from(in_flight == 0);
    saturation::under_share(bounds, ready, in_flight, sharing)
}

/// A request of `seed` is admitted: it counts in flight, and its prompt as prefill ahead (the
/// fields of a [`ModelFlow`], apart so that its queue can stay borrowed).
fn count_in(
    admitted: &mut AdmittedLoad,
    prefilling: &mut AdmittedLoad,
    tenants: &mut HashMap<Arc<str>, u32>,
    seed: &Seed,
) {
    admitted.requests += 1;
    admitted.tokens += seed.tokens;
    prefilling.requests += 1;
    prefilling.tokens += seed.prompt_tokens;
    *tenants.entry(seed.tenant.name.clone()).or_default() += 1;
}

impl ModelFlow {
    /// `tokens` of the prefill counted for a request are done (or were never needed); `last`
    /// when the request's prefill is over, `light` if it was admitted under its share.
    fn prefilled(&mut self, tokens: u64, last: bool, light: bool) {
        self.prefilling.tokens = self.prefilling.tokens.saturating_sub(tokens);
        if last {
            self.prefilling.requests = self.prefilling.requests.saturating_sub(1);
            if light {
                self.light_prefilling = self.light_prefilling.saturating_sub(1);
            }
        }
    }
}

impl FlowControl {
    /// The known objective `r` names for its model, counted; an unknown one is counted and
    /// logged, and the request keeps its tenant's band.
    fn objective<'t>(&self, r: &AdmissionRequest<'t>) -> Option<&'t Objective> {
        let name = r.objective?;
        let metrics = &self.shared.metrics.flow;
        match r.table.objectives.get(name, r.model) {
            Some(o) => {
                metrics
                    .objectives
                    .get_or_create(&ObjectiveLabels {
                        objective: o.name.to_string(),
                        priority: o.priority,
                    })
                    .inc();
                Some(o)
            }
            None => {
                metrics.unknown_objectives.inc();
                tracing::debug!(
                    objective = name,
                    model = r.model,
                    "no such objective for this model; the tenant's priority applies"
                );
                None
            }
        }
    }
}

impl Admission for FlowControl {
    fn admit(&self, r: &AdmissionRequest<'_>) -> Admit {
        let config = &r.table.config;
        let flow = &config.flow;
        let now = Instant::now();
        let tenant = r.tenant;
        let expected_output = u64::from(
            r.max_tokens
                .unwrap_or(config.limits.default_max_tokens)
                .min(flow.expected_output_tokens),
        );
        let prompt_tokens = u64::from(r.prompt_tokens);
        let tokens = prompt_tokens + expected_output;
        let metrics = &self.shared.metrics.flow;
        let label = metrics.label(&tenant.name, flow.metric_tenants);
        let (priority, sheddable) = tenant.band(self.objective(r));

        let mut st = self.shared.state.lock();
        let State { limiters, models } = &mut *st;
        let limit = match limiters.check(&tenant.name, &tenant.limits, now, tokens) {
            Ok(p) => p,
            Err(refusal) => {
                drop(st);
                self.refused(&label, Reason::RateLimited.as_str());
                return Admit::Reject(ApiError::dropped(
                    Reason::RateLimited,
                    format!(
                        "Tenant `{}` is over its limit `{}`; retry after {} s.",
                        tenant.name,
                        refusal.limit.field(),
                        refusal.retry_after_secs()
                    ),
                    u32::try_from(refusal.retry_after_secs()).unwrap_or(u32::MAX),
                ));
            }
        };
        let seed = Seed {
            tenant: tenant.clone(),
            label,
            limit,
            tokens,
            prompt_tokens,
            expected_output,
            fairness: flow.fairness,
        };
        let model = match models.get_key_value(r.model) {
            Some((k, _)) => k.clone(),
            None => {
                // Only models a pool serves reach admission (others are 404 at parse), so the
                // map is bounded by the configuration.
                let k: Arc<str> = Arc::from(r.model);
                models.insert(k.clone(), ModelFlow::default());
                k
            }
        };
        let m = models.get_mut(&model).expect("inserted above");
        let waiting = m.queue.as_ref().is_some_and(|q| !q.is_empty());
        let candidates = r.table.candidates(r.model);
        let saturated = |bounds: &SaturationConfig, admitted| {
            candidates.is_some_and(|c| {
                saturation::saturated(c, bounds, admitted, r.table.stale_after, now)
            })
        };
        let must_wait = flow.enabled && (waiting || saturated(&flow.saturation, m.admitted));
        let path = if !must_wait {
            Some("direct")
        } else if self.may_use_headroom(m, tenant, candidates, &flow.saturation, &saturated, now) {
            Some("headroom")
        } else {
            None
        };
        if let Some(path) = path {
            // A request on the headroom is under its share by that rule; one going straight on
            // is looked at only when a rule needs to know.
            let light = path == "headroom"
                || (isolating(&flow.saturation)
                    && under_share(
                        &m.tenants,
                        &tenant.name,
                        &flow.saturation,
                        candidates.map_or(0, |c| saturation::ready(c, now)),
                    ));
            count_in(&mut m.admitted, &mut m.prefilling, &mut m.tenants, &seed);
            m.light_prefilling += u32::from(light);
            drop(st);
            metrics
                .dispatched
                .get_or_create(&DispatchLabels {
                    tenant: seed.label.clone(),
                    path,
                })
                .inc();
            return Admit::Now(self.grant(model, seed, None, light, flow));
        }
        if sheddable {
            limiters.release(seed.limit, None);
            drop(st);
            self.refused(&seed.label, Reason::Saturated.as_str());
            return Admit::Reject(ApiError::dropped(
                Reason::Saturated,
                format!(
                    "The pool serving `{}` is saturated and the request is sheddable (tenant `{}`, priority {priority}).",
                    r.model, tenant.name
                ),
                1,
            ));
        }
        let queue = m.queue.get_or_insert_with(|| {
            FlowQueue::new(flow.queue).expect("flow.queue was validated with the configuration")
        });
        if queue.is_empty() && *queue.config() != flow.queue {
            // A reload changed the bounds: take them up while nothing waits.
            *queue = FlowQueue::new(flow.queue).expect("flow.queue was validated");
        }
        let (tx, rx) = oneshot::channel();
        let cost = match flow.fairness {
            Fairness::Tokens => tokens,
            Fairness::Requests => 1,
        };
        let tenant_label = seed.label.clone();
        let arrival = Arrival {
            weight: tenant.weight,
            priority,
            cost,
            bytes: r.body_bytes as u64,
            max_queued: tenant.max_queued,
            ..Arrival::new(&tenant.name, Waiter { tx, seed })
        };
        match queue.enqueue(now, arrival) {
            Ok(enqueued) => {
                for e in enqueued.evicted {
                    refuse_entry(limiters, &self.shared.metrics, e, Reason::Evicted);
                }
                metrics
                    .queued
                    .get_or_create(&TenantLabels {
                        tenant: tenant_label,
                    })
                    .inc();
                self.set_totals(&st);
                drop(st);
                self.shared.wake.notify_one();
                let leave = Leave {
                    shared: self.shared.clone(),
                    model,
                    handle: enqueued.handle,
                };
                Admit::Later(Box::pin(async move {
                    let answer = rx.await;
                    // Answered: nothing to take out of the queue any more.
                    std::mem::forget(leave);
                    answer.unwrap_or_else(|_| Err(shutting_down()))
                }))
            }
            Err(refused) => {
                let reason = refused.reason();
                let Waiter { seed, .. } = refused.payload;
                limiters.release(seed.limit, None);
                drop(st);
                self.refused(&seed.label, reason.as_str());
                Admit::Reject(ApiError::dropped(
                    reason,
                    format!(
                        "The queue for `{}` has no room for tenant `{}` ({}).",
                        r.model,
                        tenant.name,
                        refused.bound.field()
                    ),
                    1,
                ))
            }
        }
    }
}

fn label(seed: &Seed) -> TenantLabels {
    TenantLabels {
        tenant: seed.label.clone(),
    }
}

/// Answer a request that leaves the queue without being dispatched.
fn refuse_entry(
    limiters: &mut TenantLimiters,
    metrics: &Metrics,
    e: Entry<Waiter>,
    reason: Reason,
) {
    let Waiter { tx, seed } = e.payload;
    metrics.flow.queued.get_or_create(&label(&seed)).dec();
    metrics
        .flow
        .refused
        .get_or_create(&RefusalLabels {
            tenant: seed.label.clone(),
            reason: reason.as_str(),
        })
        .inc();
    let message = match reason {
        Reason::TtlExpired => format!(
            "The request waited {:.1} s in tenant `{}`'s queue without capacity freeing up.",
            e.enqueued_at.elapsed().as_secs_f64(),
            seed.tenant.name
        ),
        _ => format!(
            "The request was pushed out of the queue by higher-priority work (tenant `{}`).",
            seed.tenant.name
        ),
    };
    limiters.release(seed.limit, None);
    let _ = tx.send(Err(ApiError::dropped(reason, message, 1)));
}

fn shutting_down() -> ApiError {
    ApiError::new(
        http::StatusCode::SERVICE_UNAVAILABLE,
        "service_unavailable_error",
        "shutting_down",
        "The router is shutting down; retry on another instance.".to_owned(),
    )
}

/// Takes a queued request out of its queue when its client goes away (the waiting future is
/// dropped before an answer came).
struct Leave {
    shared: Arc<Shared>,
    model: Arc<str>,
    handle: Handle,
}

impl Drop for Leave {
    fn drop(&mut self) {
        let mut st = self.shared.state.lock();
        let State { limiters, models } = &mut *st;
        let Some(q) = models.get_mut(&self.model).and_then(|m| m.queue.as_mut()) else {
            return;
        };
        if let Some(e) = q.remove(self.handle) {
            let seed = e.payload.seed;
            let metrics = &self.shared.metrics.flow;
            metrics.queued.get_or_create(&label(&seed)).dec();
            metrics
                .refused
                .get_or_create(&RefusalLabels {
                    tenant: seed.label.clone(),
                    reason: "client-gone",
                })
                .inc();
            limiters.release(seed.limit, None);
        }
    }
}

/// An admitted request's hold on its tenant's limits, its pool's admitted count and (when it
/// was queued) its fair-queue charge; released, with what it used, when the response ends.
struct Grant {
    shared: Arc<Shared>,
    model: Arc<str>,
    seed: Option<Seed>,
    ticket: Option<Ticket>,
    uncached: AtomicU64,
    /// Prompt tokens this request counts in its model's `prefilling`; [`PREFILLED`] once its
    /// first token came (or it ended without one). Changed only under the state lock, so that
    /// it and the model's count move together.
    prefilling: AtomicU64,
    /// AdmittedLoad while its tenant was under its share (`light_prefill_first` holds others'
    /// queued work until its first token).
    light: bool,
    /// What the replica choice is asked for this request.
    prefill_rule: PrefillRule,
    output: AtomicU64,
}

/// A grant whose prefill no longer counts.
const PREFILLED: u64 = u64::MAX;

impl Grant {
    /// Lowers this request's pending prefill to `tokens` (all of it done when [`PREFILLED`]).
    fn prefill_down_to(&self, tokens: u64) {
        let lower = |before: u64| before != PREFILLED && (tokens == PREFILLED || tokens < before);
        // Without the lock first: a prompt with nothing cached changes nothing.
        if !lower(self.prefilling.load(Ordering::Relaxed)) {
            return;
        }
        {
            let mut st = self.shared.state.lock();
            let before = self.prefilling.load(Ordering::Relaxed);
            if !lower(before) {
                return;
            }
            self.prefilling.store(tokens, Ordering::Relaxed);
            if let Some(m) = st.models.get_mut(&self.model) {
                let last = tokens == PREFILLED;
                m.prefilled(
                    if last { before } else { before - tokens },
                    last,
                    self.light,
                );
            }
        }
        // Prefill work left the pool: queued work held back by it may go.
        self.shared.wake.notify_one();
    }
}

impl Held for Grant {
    fn set_uncached_prompt(&self, tokens: u64) {
        self.uncached.store(tokens, Ordering::Relaxed);
        // Cached prompt tokens are no prefill work.
        self.prefill_down_to(tokens);
    }
    fn set_output(&self, tokens: u64) {
        self.output.store(tokens, Ordering::Relaxed);
    }
    fn first_token(&self) {
        self.prefill_down_to(PREFILLED);
    }
    fn prefill_rule(&self) -> PrefillRule {
        self.prefill_rule
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        let Some(seed) = self.seed.take() else { return };
        let output = match self.output.load(Ordering::Relaxed) {
            UNKNOWN => seed.expected_output,
            n => n,
        };
        let used = self.uncached.load(Ordering::Relaxed) + output;
        let labels = label(&seed);
        {
            let mut st = self.shared.state.lock();
            let State { limiters, models } = &mut *st;
            limiters.release(seed.limit, Some(used));
            if let Some(m) = models.get_mut(&self.model) {
                let prefilling = self.prefilling.swap(PREFILLED, Ordering::Relaxed);
                if prefilling != PREFILLED {
                    // Ended without a first token (failed, refused, or not streamed).
                    m.prefilled(prefilling, true, self.light);
                }
                m.admitted.requests = m.admitted.requests.saturating_sub(1);
                m.admitted.tokens = m.admitted.tokens.saturating_sub(seed.tokens);
                if let Some(n) = m.tenants.get_mut(&seed.tenant.name) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        m.tenants.remove(&seed.tenant.name);
                    }
                }
                if let (Some(ticket), Some(q)) = (self.ticket.take(), m.queue.as_mut()) {
                    let actual = match seed.fairness {
                        Fairness::Tokens => used,
                        Fairness::Requests => 1,
                    };
                    q.complete(ticket, actual);
                }
            }
        }
        self.shared
            .metrics
            .flow
            .tokens_served
            .get_or_create(&labels)
            .inc_by(used);
        self.shared.wake.notify_one();
    }
}
