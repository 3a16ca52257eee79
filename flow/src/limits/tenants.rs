//! Limits for many tenants, within a bound on the tenants tracked.
//!
//! Only tenants with a limit need state: a check with no limit configured returns at once,
//! touching nothing. A tenant with requests in flight is never forgotten (its concurrency
//! count must stay right); the others are kept in least-recently-used order, and when a new
//! tenant needs room beyond `max_tenants` the least recently used is forgotten, coming back
//! later with full buckets (at most one burst more than its limits allow). When every tracked
//! tenant has requests in flight a new one is refused ([`Limit::Tenants`]): memory stays
//! bounded, and that many limited tenants in flight at once means the bound is set too low.

use super::{Limit, LimitPermit, Limits, Refusal};
use crate::{ConfigError, LimitersConfig, TenantLimitsConfig};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use warmpath_lru::{LruOrder, NIL};

/// Held by an admitted request; give it back to [`TenantLimiters::release`].
#[derive(Debug, PartialEq, Eq)]
#[must_use = "release the permit when the request ends, or its concurrency slot leaks"]
pub struct TenantPermit {
    /// `NIL` when the tenant has no limits (nothing to release).
    pub(super) slot: u32,
    pub(super) generation: u32,
    pub(super) permit: Option<LimitPermit>,
}

impl TenantPermit {
    /// Whether the permit counts against a tenant's limits (false for unlimited tenants).
    pub fn is_tracked(&self) -> bool {
        self.slot != NIL
    }
}

#[derive(Debug)]
struct Tracked {
    name: Box<str>,
    config: TenantLimitsConfig,
    limits: Limits,
}

#[derive(Debug)]
struct Slot {
    generation: u32,
    tracked: Option<Tracked>,
}

/// Per-tenant [`Limits`] for up to `max_tenants` limited tenants.
#[derive(Debug)]
pub struct TenantLimiters {
    max_tenants: usize,
    slots: Vec<Slot>,
    free: Vec<u32>,
    by_name: HashMap<Box<str>, u32>,
    /// Tracked tenants with nothing in flight, least recently used first.
    unpinned: LruOrder,
}

impl TenantLimiters {
    pub fn new(config: LimitersConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            max_tenants: config.max_tenants,
            slots: Vec::new(),
            free: Vec::new(),
            by_name: HashMap::new(),
            unpinned: LruOrder::new(),
        })
    }

    /// Tenants tracked now.
    pub fn tenants(&self) -> usize {
        self.by_name.len()
    }

    /// A tenant's limits state, if tracked.
    pub fn get(&self, tenant: &str) -> Option<&Limits> {
        let slot = &self.slots[*self.by_name.get(tenant)? as usize];
        slot.tracked.as_ref().map(|t| &t.limits)
    }

    /// Admit a request of `tenant`, estimated at `tokens`, under `limits` (the tenant's current
    /// configuration: a changed one is followed, keeping bucket levels), or refuse it.
    pub fn check(
        &mut self,
        tenant: &str,
        limits: &TenantLimitsConfig,
        now: Instant,
        tokens: u64,
    ) -> Result<TenantPermit, Refusal> {
        if limits.is_unlimited() {
            return Ok(TenantPermit {
                slot: NIL,
                generation: 0,
                permit: None,
            });
        }
        let i = match self.by_name.get(tenant) {
            Some(&i) => i,
            None => self.track(tenant, limits, now)?,
        };
        let slot = &mut self.slots[i as usize];
        let tracked = slot.tracked.as_mut().expect("tracked tenant");
        if tracked.config != *limits {
            tracked.limits.reconfigure(limits, now);
            tracked.config = *limits;
        }
        match tracked.limits.check(now, tokens) {
            Ok(permit) => {
                self.unpinned.remove(i);
                Ok(TenantPermit {
                    slot: i,
                    generation: slot.generation,
                    permit: Some(permit),
                })
            }
            Err(refusal) => {
                if tracked.limits.in_flight() == 0 {
                    self.unpinned.push_newest(i);
                }
                Err(refusal)
            }
        }
    }

    /// The request ended: release its concurrency slot and correct the tokens bucket when the
    /// tokens used are known ([`Limits::release`]).
    pub fn release(&mut self, permit: TenantPermit, actual_tokens: Option<u64>) {
        let TenantPermit {
            slot: i,
            generation,
            permit,
        } = permit;
        let (Some(slot), Some(permit)) = (self.slots.get_mut(i as usize), permit) else {
            return;
        };
        if slot.generation != generation {
            return;
        }
        let Some(tracked) = slot.tracked.as_mut() else {
            return;
        };
        tracked.limits.release(permit, actual_tokens);
        if tracked.limits.in_flight() == 0 {
            self.unpinned.push_newest(i);
        }
    }

    fn track(
        &mut self,
        tenant: &str,
        limits: &TenantLimitsConfig,
        now: Instant,
    ) -> Result<u32, Refusal> {
        if self.by_name.len() >= self.max_tenants {
            let Some(oldest) = self.unpinned.oldest() else {
                return Err(Refusal {
                    limit: Limit::Tenants,
                    retry_after: Duration::from_secs(1),
                });
            };
            self.unpinned.remove(oldest);
            let slot = &mut self.slots[oldest as usize];
            let gone = slot.tracked.take().expect("tracked tenant");
            slot.generation = slot.generation.wrapping_add(1);
            self.by_name.remove(&gone.name);
            self.free.push(oldest);
        }
        let tracked = Tracked {
            name: tenant.into(),
            config: *limits,
            limits: Limits::new(limits, now),
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize].tracked = Some(tracked);
                i
            }
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    tracked: Some(tracked),
                });
                (self.slots.len() - 1) as u32
            }
        };
        self.by_name.insert(tenant.into(), i);
        Ok(i)
    }

    /// Check the internal invariants (tests only).
    #[cfg(test)]
    pub(crate) fn assert_consistent(&self) {
        assert!(self.by_name.len() <= self.max_tenants);
        let live = self.slots.iter().filter(|s| s.tracked.is_some()).count();
        assert_eq!(live, self.by_name.len());
        let mut unpinned = 0;
        for (name, &i) in &self.by_name {
            let t = self.slots[i as usize].tracked.as_ref().unwrap();
            assert_eq!(&t.name, name);
            // Exactly the tenants with nothing in flight may be forgotten.
            assert_eq!(self.unpinned.contains(i), t.limits.in_flight() == 0);
            unpinned += usize::from(self.unpinned.contains(i));
        }
        assert_eq!(unpinned, self.unpinned.len());
    }
}
