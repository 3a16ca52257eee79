//! The replicas holding one block. Most blocks have one holder, so that case stays inline; a
//! shared system prompt's blocks may have every replica, so those carry a bitset and a lookup
//! costs the same however many hold them. The bitset over inline replica ids is also what the
//! index's bisection intersects.

use crate::ReplicaId;
use std::mem::size_of;
use warmpath_lru::NIL;

/// Replica ids below this are matched with a bitset bisection shared by all candidates (the
/// fast path); larger ids work too, through a per-candidate binary search.
pub const INLINE_REPLICAS: u32 = 256;
pub(super) const WORDS: usize = (INLINE_REPLICAS / 64) as usize;
pub(super) type Bits = [u64; WORDS];

/// Per-holder share of a shared block's holder-list overhead, worst case over the layouts: a
/// `Few` list of k >= 2 pays one 16 B allocation header (<= 8 B each); a `Many` list of k > 8
/// pays its 56 B struct, two 16 B allocation headers and an exact-capacity list (< 10 B each).
pub(super) const SHARE_BYTES: usize = 10;

/// A replica holding a block, and the slot of the block's node in that replica's LRU.
pub(super) type Holder = (ReplicaId, u32);

/// Up to this many holders are kept as a plain sorted list (scanned); more get a bitset too.
const FEW: usize = 8;

/// The replicas holding one block. Never empty: an entry without holders leaves the map.
#[derive(Debug, Clone)]
pub(super) enum Holders {
    One(Holder),
    /// 2..=FEW holders, sorted by replica id.
    Few(Box<[Holder]>),
    /// More than FEW/2 holders (hysteresis), with a bitset of the inline ids so that a lookup
    /// costs the same for a block every replica holds.
    Many(Box<ManyHolders>),
}

#[derive(Debug, Clone)]
pub(super) struct ManyHolders {
    bits: Bits,
    /// Sorted by replica id.
    list: Vec<Holder>,
}

fn bit(r: ReplicaId) -> Option<(usize, u64)> {
    (r < INLINE_REPLICAS).then(|| ((r / 64) as usize, 1u64 << (r % 64)))
}

impl Holders {
    fn as_slice(&self) -> &[Holder] {
        match self {
            Holders::One(h) => std::slice::from_ref(h),
            Holders::Few(v) => v,
            Holders::Many(m) => &m.list,
        }
    }

    fn as_mut_slice(&mut self) -> &mut [Holder] {
        match self {
            Holders::One(h) => std::slice::from_mut(h),
            Holders::Few(v) => v,
            Holders::Many(m) => &mut m.list,
        }
    }

    fn position(&self, r: ReplicaId) -> Option<usize> {
        match self {
            Holders::One(h) => (h.0 == r).then_some(0),
            Holders::Few(v) => v.iter().position(|h| h.0 == r),
            Holders::Many(m) => m.list.binary_search_by_key(&r, |h| h.0).ok(),
        }
    }

    pub(super) fn node_of(&self, r: ReplicaId) -> Option<u32> {
        self.position(r).map(|at| self.as_slice()[at].1)
    }

    pub(super) fn set_node(&mut self, r: ReplicaId, node: u32) {
        if let Some(at) = self.position(r) {
            self.as_mut_slice()[at].1 = node;
        }
    }

    /// Add `r` (known absent).
    pub(super) fn insert(&mut self, r: ReplicaId, node: u32) {
        if let Holders::Many(m) = self {
            let at = m.list.partition_point(|h| h.0 < r);
            // Exact capacity keeps the per-holder overhead within SHARE_BYTES; a block gains
            // holders rarely, so the copy is cheap overall.
            m.list.reserve_exact(1);
            m.list.insert(at, (r, node));
            if let Some((w, b)) = bit(r) {
                m.bits[w] |= b;
            }
            return;
        }
        let list = self.as_slice();
        let at = list.partition_point(|h| h.0 < r);
        let mut grown = Vec::with_capacity(list.len() + 1);
        grown.extend_from_slice(&list[..at]);
        grown.push((r, node));
        grown.extend_from_slice(&list[at..]);
        *self = Holders::from_sorted(grown);
    }

    fn from_sorted(list: Vec<Holder>) -> Self {
        match list.len() {
            0 | 1 => Holders::One(list.first().copied().unwrap_or((NIL, NIL))),
            n if n <= FEW => Holders::Few(list.into_boxed_slice()),
            _ => {
                let mut bits = [0; WORDS];
                for &(r, _) in &list {
                    if let Some((w, b)) = bit(r) {
                        bits[w] |= b;
                    }
                }
                Holders::Many(Box::new(ManyHolders { bits, list }))
            }
        }
    }

    /// Remove `r`; `true` when no holder is left.
    pub(super) fn remove(&mut self, r: ReplicaId) -> bool {
        let Some(at) = self.position(r) else {
            return false;
        };
        match self {
            Holders::One(_) => return true,
            Holders::Few(v) => {
                let mut shrunk = v.to_vec();
                shrunk.remove(at);
                *self = Holders::from_sorted(shrunk);
            }
            Holders::Many(m) => {
                m.list.remove(at);
                if let Some((w, b)) = bit(r) {
                    m.bits[w] &= !b;
                }
                if m.list.len() <= FEW / 2 {
                    *self = Holders::from_sorted(std::mem::take(&mut m.list));
                } else {
                    m.list.shrink_to_fit();
                }
            }
        }
        false
    }

    /// The holders among `mask`'s bits.
    pub(super) fn bits(&self, mask: &Bits) -> Bits {
        let mut out = [0; WORDS];
        match self {
            Holders::Many(m) => return and(&m.bits, mask),
            _ => {
                for &(r, _) in self.as_slice() {
                    if let Some((w, b)) = bit(r) {
                        out[w] |= mask[w] & b;
                    }
                }
            }
        }
        out
    }

    pub(super) fn heap_bytes(&self) -> usize {
        // Each allocation also pays the allocator's overhead, taken as 16 bytes.
        match self {
            Holders::One(_) => 0,
            Holders::Few(v) => v.len() * size_of::<Holder>() + 16,
            Holders::Many(m) => {
                size_of::<ManyHolders>() + 16 + m.list.capacity() * size_of::<Holder>() + 16
            }
        }
    }
}

pub(super) fn and(a: &Bits, b: &Bits) -> Bits {
    let mut out = [0; WORDS];
    for (o, (x, y)) in out.iter_mut().zip(a.iter().zip(b.iter())) {
        *o = x & y;
    }
    out
}
