//! [`PendingIndex`]: the blocks of requests routed to a replica whose engine has not yet
//! reported storing them.
//!
//! A replica followed through KV events is matched on what its engine reports, and an engine
//! reports a prompt's blocks only once it has computed them. Between the choice and that event
//! (queueing and prefill: milliseconds to seconds under load) the router would see none of the
//! prompt on the replica it just chose, so a burst of requests sharing a new prefix spreads over
//! the fleet, each copy evicting some other group. (Measured: with 8 requests in flight, one new
//! prefix landed on 3.6 replicas against 2.4 for the approximate index; the loss vanished at 1
//! in flight.) The pending index closes that window: a routed request's blocks count as held
//! on its replica until its prefill is done (its first byte) plus a grace for the event to
//! arrive, and never longer than a hard time-to-live.
//!
//! Pure data: time comes in as arguments. Bounded by the number of blocks it holds; past the
//! bound the oldest requests are forgotten first.

use super::block_key::BlockKey;
use crate::{BlockHash, ReplicaId};
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// How long pending blocks count, and how many are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingLimits {
    /// Blocks over all pending requests (each request's blocks counted once per request).
    pub max_blocks: usize,
    /// A request's blocks stop counting this long after it was routed, whatever happens.
    pub ttl: Duration,
    /// And this long after its prefill finished (time for the engine's event to arrive).
    pub grace: Duration,
}

impl Default for PendingLimits {
    fn default() -> Self {
        Self {
            max_blocks: 1 << 18,
            ttl: Duration::from_secs(30),
            grace: Duration::from_secs(1),
        }
    }
}

/// A routed request's handle in the index.
pub type PendingId = u64;

#[derive(Debug)]
struct Request {
    replica: ReplicaId,
    hashes: Box<[BlockHash]>,
}

/// Per replica, the blocks of its routed-but-not-yet-reported requests.
#[derive(Debug)]
pub struct PendingIndex {
    limits: PendingLimits,
    requests: HashMap<PendingId, Request>,
    /// How many pending requests hold each (replica, block).
    held: HashMap<(ReplicaId, BlockHash), u32, BlockKey>,
    /// Requests in routing order with their hard deadline (the TTL is fixed, so this order is
    /// deadline order too).
    by_deadline: VecDeque<(Instant, PendingId)>,
    /// Requests whose prefill finished, with the end of their grace (fixed, so ordered too).
    by_grace: VecDeque<(Instant, PendingId)>,
    blocks: usize,
    next_id: PendingId,
}

impl PendingIndex {
    pub fn new(limits: PendingLimits) -> Self {
        Self {
            limits,
            requests: HashMap::new(),
            held: HashMap::with_hasher(BlockKey::random()),
            by_deadline: VecDeque::new(),
            by_grace: VecDeque::new(),
            blocks: 0,
            next_id: 0,
        }
    }

    pub fn limits(&self) -> PendingLimits {
        self.limits
    }

    /// Record that a request with these blocks was routed to `replica`.
    pub fn insert(&mut self, replica: ReplicaId, hashes: &[BlockHash], now: Instant) -> PendingId {
        self.expire(now);
        let id = self.next_id;
        self.next_id += 1;
        let hashes = &hashes[..hashes.len().min(self.limits.max_blocks)];
        if hashes.is_empty() {
            return id;
        }
        while self.blocks + hashes.len() > self.limits.max_blocks {
            match self.by_deadline.pop_front() {
                Some((_, old)) => self.remove(old),
                None => break,
            }
        }
        for &h in hashes {
            *self.held.entry((replica, h)).or_insert(0) += 1;
        }
        self.blocks += hashes.len();
        self.requests.insert(
            id,
            Request {
                replica,
                hashes: hashes.into(),
            },
        );
        self.by_deadline.push_back((now + self.limits.ttl, id));
        self.compact();
        id
    }

    /// Drop the queues' entries of requests already gone (evicted by the bound, or past their
    /// grace before their deadline), so that the queues stay within twice the live requests.
    fn compact(&mut self) {
        let live = self.requests.len();
        if self.by_deadline.len() + self.by_grace.len() > 2 * live + 64 {
            let requests = &self.requests;
            self.by_deadline.retain(|(_, id)| requests.contains_key(id));
            self.by_grace.retain(|(_, id)| requests.contains_key(id));
        }
    }

    /// The request's prefill is done (or it ended): its blocks count for the grace period
    /// more, until the engine's event has had time to arrive.
    pub fn prefilled(&mut self, id: PendingId, now: Instant) {
        if self.requests.contains_key(&id) {
            self.by_grace.push_back((now + self.limits.grace, id));
        }
        self.expire(now);
        self.compact();
    }

    /// How many of `hashes`' leading blocks pending requests hold on `replica`.
    pub fn longest_prefix(&self, replica: ReplicaId, hashes: &[BlockHash]) -> u32 {
        if self.held.is_empty() {
            return 0;
        }
        hashes
            .iter()
            .take_while(|&&h| self.held.contains_key(&(replica, h)))
            .count() as u32
    }

    /// Forget pending requests past their deadline or grace.
    pub fn expire(&mut self, now: Instant) {
        while let Some(&(at, id)) = self.by_grace.front() {
            if at > now {
                break;
            }
            self.by_grace.pop_front();
            self.remove(id);
        }
        while let Some(&(at, id)) = self.by_deadline.front() {
            if at > now {
                break;
            }
            self.by_deadline.pop_front();
            self.remove(id);
        }
    }

    /// Forget everything pending on `replica` (it was removed from the fleet).
    pub fn remove_replica(&mut self, replica: ReplicaId) {
        let ids: Vec<PendingId> = self
            .requests
            .iter()
            .filter(|(_, r)| r.replica == replica)
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            self.remove(id);
        }
    }

    /// Requests pending now.
    pub fn len(&self) -> usize {
        self.requests.len()
    }

    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }

    /// Blocks held by pending requests (at most `max_blocks`).
    pub fn blocks(&self) -> usize {
        self.blocks
    }

    /// Remove a request's blocks. Its ids left in the deadline queues are skipped when they
    /// come up (removing an absent id does nothing) or dropped by `compact`.
    fn remove(&mut self, id: PendingId) {
        let Some(request) = self.requests.remove(&id) else {
            return;
        };
        for &h in request.hashes.iter() {
            let key = (request.replica, h);
            if let Some(n) = self.held.get_mut(&key) {
                *n -= 1;
                if *n == 0 {
                    self.held.remove(&key);
                }
            }
        }
        self.blocks -= request.hashes.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn limits() -> PendingLimits {
        PendingLimits {
            max_blocks: 10,
            ttl: Duration::from_secs(30),
            grace: Duration::from_secs(1),
        }
    }

    #[test]
    fn a_routed_prompt_counts_on_its_replica_only() {
        let t = Instant::now();
        let mut p = PendingIndex::new(limits());
        p.insert(1, &[10, 11, 12], t);
        assert_eq!(p.longest_prefix(1, &[10, 11, 12, 13]), 3);
        assert_eq!(p.longest_prefix(1, &[10, 99, 12]), 1);
        assert_eq!(p.longest_prefix(2, &[10, 11, 12]), 0);
    }

    #[test]
    fn blocks_count_until_the_grace_after_prefill_ends() {
        let t = Instant::now();
        let mut p = PendingIndex::new(limits());
        let a = p.insert(1, &[10, 11], t);
        let b = p.insert(1, &[10], t);
        p.prefilled(a, t + Duration::from_secs(2));
        p.expire(t + Duration::from_millis(2999));
        assert_eq!(p.longest_prefix(1, &[10, 11]), 2);
        p.expire(t + Duration::from_secs(3));
        // b still holds the first block.
        assert_eq!(p.longest_prefix(1, &[10, 11]), 1);
        p.prefilled(b, t + Duration::from_secs(3));
        p.expire(t + Duration::from_secs(4));
        assert_eq!(p.longest_prefix(1, &[10, 11]), 0);
        assert!(p.is_empty());
        assert_eq!(p.blocks(), 0);
    }

    #[test]
    fn a_request_that_never_finishes_expires_at_its_ttl() {
        let t = Instant::now();
        let mut p = PendingIndex::new(limits());
        p.insert(1, &[10], t);
        p.expire(t + Duration::from_secs(29));
        assert_eq!(p.longest_prefix(1, &[10]), 1);
        p.expire(t + Duration::from_secs(30));
        assert_eq!(p.longest_prefix(1, &[10]), 0);
    }

    #[test]
    fn the_oldest_requests_go_first_past_the_bound() {
        let t = Instant::now();
        let mut p = PendingIndex::new(limits());
        p.insert(1, &[1, 2, 3, 4, 5, 6], t);
        p.insert(2, &[7, 8, 9], t);
        p.insert(3, &[20, 21, 22], t);
        assert_eq!(p.blocks(), 6);
        assert_eq!(p.longest_prefix(1, &[1]), 0);
        assert_eq!(p.longest_prefix(2, &[7, 8, 9]), 3);
        assert_eq!(p.longest_prefix(3, &[20, 21, 22]), 3);
        // A prompt longer than the whole bound keeps its first blocks.
        p.insert(4, &(100..120).collect::<Vec<_>>(), t);
        assert_eq!(p.blocks(), 10);
        assert_eq!(p.longest_prefix(4, &(100..120).collect::<Vec<_>>()), 10);
    }

    #[test]
    fn removing_a_replica_forgets_its_requests() {
        let t = Instant::now();
        let mut p = PendingIndex::new(limits());
        p.insert(1, &[10], t);
        p.insert(2, &[10], t);
        p.remove_replica(1);
        assert_eq!(p.longest_prefix(1, &[10]), 0);
        assert_eq!(p.longest_prefix(2, &[10]), 1);
        assert_eq!(p.len(), 1);
    }

    proptest! {
        /// Whatever happens, the block count is bounded and agrees with the held map, and
        /// after every deadline nothing is left.
        #[test]
        fn bounded_and_consistent(
            ops in proptest::collection::vec(
                (0u32..4, proptest::collection::vec(0u64..16, 0..8), 0u64..3000, any::<bool>()),
                0..200,
            )
        ) {
            let t = Instant::now();
            let mut p = PendingIndex::new(limits());
            let mut ids = Vec::new();
            let mut clock = t;
            for (replica, hashes, step_ms, finish) in ops {
                clock += Duration::from_millis(step_ms);
                if finish && !ids.is_empty() {
                    let id = ids.swap_remove(hashes.len() % ids.len());
                    p.prefilled(id, clock);
                } else {
                    ids.push(p.insert(replica, &hashes, clock));
                }
                prop_assert!(p.blocks() <= 10);
                prop_assert!(p.by_deadline.len() + p.by_grace.len() <= 2 * p.len() + 64);
                let held: u32 = p.held.values().sum();
                prop_assert_eq!(held as usize, p.blocks());
            }
            p.expire(clock + Duration::from_secs(31));
            prop_assert!(p.is_empty());
            prop_assert!(p.held.is_empty());
            prop_assert_eq!(p.blocks(), 0);
        }
    }
}
