//! [`LruOrder`]: the recency order of slots owned elsewhere.

use std::mem::size_of;

/// No slot: the end of an order, and a sentinel owners may use for "none".
pub const NIL: u32 = u32::MAX;

/// In a link's `newer`: the slot is not a member. A member's `newer` is a slot or [`NIL`].
const OUT: u32 = u32::MAX - 1;

/// Slots are numbered below this (the two highest numbers are the sentinels).
pub const MAX_SLOTS: usize = OUT as usize;

#[derive(Debug, Clone, Copy)]
struct Link {
    /// Towards the oldest member.
    older: u32,
    /// Towards the newest member; [`OUT`] when the slot is not a member.
    newer: u32,
}

const UNLINKED: Link = Link {
    older: NIL,
    newer: OUT,
};

/// Bytes of links per slot.
pub const LINK_BYTES: usize = size_of::<Link>();

/// The recency order of some slots of a slab owned elsewhere. Members are slot numbers below
/// [`MAX_SLOTS`]; the links grow to the highest slot seen, so they are bounded by the slab's
/// bound.
#[derive(Debug, Clone)]
pub struct LruOrder {
    links: Vec<Link>,
    oldest: u32,
    newest: u32,
    len: usize,
}

impl Default for LruOrder {
    fn default() -> Self {
        Self::new()
    }
}

impl LruOrder {
    pub const fn new() -> Self {
        Self {
            links: Vec::new(),
            oldest: NIL,
            newest: NIL,
            len: 0,
        }
    }

    /// Members now.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn contains(&self, slot: u32) -> bool {
        self.links
            .get(slot as usize)
            .is_some_and(|l| l.newer != OUT)
    }

    /// The least recently used member.
    pub fn oldest(&self) -> Option<u32> {
        (self.oldest != NIL).then_some(self.oldest)
    }

    /// The most recently used member.
    pub fn newest(&self) -> Option<u32> {
        (self.newest != NIL).then_some(self.newest)
    }

    /// Make `slot` the most recently used member, adding it when it is not one.
    ///
    /// # Panics
    /// When `slot` is not below [`MAX_SLOTS`].
    pub fn push_newest(&mut self, slot: u32) {
        assert!((slot as usize) < MAX_SLOTS, "slot {slot} out of range");
        if self.newest == slot {
            return;
        }
        if self.contains(slot) {
            self.unlink(slot);
        } else {
            if self.links.len() <= slot as usize {
                self.links.resize(slot as usize + 1, UNLINKED);
            }
            self.len += 1;
        }
        self.links[slot as usize] = Link {
            older: self.newest,
            newer: NIL,
        };
        match self.newest {
            NIL => self.oldest = slot,
            n => self.links[n as usize].newer = slot,
        }
        self.newest = slot;
    }

    /// Take `slot` out of the order; false when it was not a member.
    pub fn remove(&mut self, slot: u32) -> bool {
        if !self.contains(slot) {
            return false;
        }
        self.unlink(slot);
        self.links[slot as usize] = UNLINKED;
        self.len -= 1;
        true
    }

    /// Members from the least to the most recently used.
    pub fn oldest_first(&self) -> impl Iterator<Item = u32> + '_ {
        std::iter::successors(self.oldest(), |&i| match self.links[i as usize].newer {
            NIL => None,
            n => Some(n),
        })
    }

    /// Room for links up to slot `slots - 1` without reallocating, and no more (an owner that
    /// bounds its slab's growth bounds its order's the same way).
    pub fn reserve_exact_slots(&mut self, slots: usize) {
        self.links
            .reserve_exact(slots.saturating_sub(self.links.len()));
    }

    pub fn allocated_bytes(&self) -> usize {
        self.links.capacity() * LINK_BYTES
    }

    /// Unlink a member from its neighbours, leaving its own link stale.
    fn unlink(&mut self, slot: u32) {
        let Link { older, newer } = self.links[slot as usize];
        match older {
            NIL => self.oldest = newer,
            o => self.links[o as usize].newer = newer,
        }
        match newer {
            NIL => self.newest = older,
            n => self.links[n as usize].older = older,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn keeps_recency_order() {
        let mut l = LruOrder::new();
        for i in [3, 1, 4, 5] {
            l.push_newest(i);
        }
        assert_eq!(l.oldest_first().collect::<Vec<_>>(), [3, 1, 4, 5]);
        l.push_newest(1);
        assert_eq!(l.oldest_first().collect::<Vec<_>>(), [3, 4, 5, 1]);
        l.push_newest(1);
        assert_eq!(l.len(), 4);
        assert!(l.remove(4));
        assert!(!l.remove(4));
        assert!(!l.remove(99));
        assert_eq!(l.oldest_first().collect::<Vec<_>>(), [3, 5, 1]);
        assert_eq!((l.oldest(), l.newest()), (Some(3), Some(1)));
        assert!(l.remove(3) && l.remove(1));
        assert_eq!(l.oldest_first().collect::<Vec<_>>(), [5]);
        assert_eq!((l.len(), l.oldest(), l.newest()), (1, Some(5), Some(5)));
        assert!(l.remove(5));
        assert_eq!((l.len(), l.oldest(), l.newest()), (0, None, None));
        assert!(l.is_empty() && !l.contains(5));
    }

    #[test]
    #[should_panic(expected = "out of range")]
    fn the_sentinels_are_not_slots() {
        LruOrder::new().push_newest(u32::MAX - 1);
    }

    proptest! {
        /// The order is the one a vector of members kept by hand would have.
        #[test]
        fn matches_a_plain_list(ops in proptest::collection::vec((any::<bool>(), 0u32..40), 0..300)) {
            let mut l = LruOrder::new();
            let mut model: Vec<u32> = Vec::new();
            for (push, slot) in ops {
                let was = model.iter().position(|&m| m == slot);
                if push {
                    if let Some(at) = was {
                        model.remove(at);
                    }
                    model.push(slot);
                    l.push_newest(slot);
                } else {
                    if let Some(at) = was {
                        model.remove(at);
                    }
                    prop_assert_eq!(l.remove(slot), was.is_some());
                }
                prop_assert_eq!(l.oldest_first().collect::<Vec<_>>(), model.clone());
                prop_assert_eq!(l.len(), model.len());
                prop_assert_eq!(l.oldest(), model.first().copied());
                prop_assert_eq!(l.newest(), model.last().copied());
                for s in 0..40 {
                    prop_assert_eq!(l.contains(s), model.contains(&s));
                }
            }
        }
    }
}
