//! [`SlabLru`]: values in a slab that allocates their slots, kept in recency order.

use crate::order::{LruOrder, LINK_BYTES, MAX_SLOTS};
use std::mem::size_of;

/// Values in slots of their own, in least-recently-used order. A slot stays the value's until
/// it is taken, so owners keep slot numbers in their maps to find a value again. Freed slots
/// are reused (the last freed first) before the slab grows.
#[derive(Debug, Clone)]
pub struct SlabLru<T> {
    values: Vec<T>,
    free: Vec<u32>,
    order: LruOrder,
}

impl<T> Default for SlabLru<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> SlabLru<T> {
    /// Bytes per value held: the value and its links (not counting a free-list slot, which
    /// only a taken value leaves behind).
    pub const ENTRY_BYTES: usize = size_of::<T>() + LINK_BYTES;

    pub const fn new() -> Self {
        Self {
            values: Vec::new(),
            free: Vec::new(),
            order: LruOrder::new(),
        }
    }

    /// Values held now.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Slots the slab can hold without reallocating.
    pub fn capacity(&self) -> usize {
        self.values.capacity()
    }

    /// The value in `slot`. A taken slot still reads its last value until reused; owners ask
    /// only for slots they hold.
    pub fn get(&self, slot: u32) -> &T {
        &self.values[slot as usize]
    }

    pub fn get_mut(&mut self, slot: u32) -> &mut T {
        &mut self.values[slot as usize]
    }

    /// Make a held value the most recently used.
    pub fn touch(&mut self, slot: u32) {
        debug_assert!(self.order.contains(slot));
        self.order.push_newest(slot);
    }

    /// The least recently used value's slot.
    pub fn oldest(&self) -> Option<u32> {
        self.order.oldest()
    }

    /// Add `value` as the most recently used and return its slot. When the slab must grow, it
    /// reserves room for at most `cap` values in all (doubling below it, 64 at least), so that
    /// its spare capacity stays within the owner's bound.
    ///
    /// # Panics
    /// When the slab already holds [`MAX_SLOTS`] slots.
    pub fn push_newest(&mut self, value: T, cap: usize) -> u32 {
        let slot = match self.free.pop() {
            Some(slot) => {
                self.values[slot as usize] = value;
                slot
            }
            None => {
                let len = self.values.len();
                assert!(len < MAX_SLOTS, "slab full");
                if len == self.values.capacity() {
                    let room = cap.saturating_sub(len);
                    self.values.reserve_exact(len.max(64).min(room).max(1));
                    self.order.reserve_exact_slots(self.values.capacity());
                }
                self.values.push(value);
                len as u32
            }
        };
        self.order.push_newest(slot);
        slot
    }

    /// Values with their slots, from the least to the most recently used.
    pub fn oldest_first(&self) -> impl Iterator<Item = (u32, &T)> + '_ {
        self.order
            .oldest_first()
            .map(|i| (i, &self.values[i as usize]))
    }

    pub fn allocated_bytes(&self) -> usize {
        self.values.capacity() * size_of::<T>()
            + self.free.capacity() * size_of::<u32>()
            + self.order.allocated_bytes()
    }

    /// Checks the slab's own invariants (for its owners' consistency checks in tests).
    ///
    /// # Panics
    /// When a slot is both free and held, or one is neither.
    pub fn assert_consistent(&self) {
        assert_eq!(self.oldest_first().count(), self.len());
        assert_eq!(self.values.len(), self.len() + self.free.len());
        assert!(self.free.iter().all(|&f| !self.order.contains(f)));
    }
}

impl<T: Copy> SlabLru<T> {
    /// Remove the value in `slot` (which must be held) and return it.
    pub fn take(&mut self, slot: u32) -> T {
        let held = self.order.remove(slot);
        debug_assert!(held, "slot {slot} is not held");
        self.free.push(slot);
        self.values[slot as usize]
    }

    /// Remove and return the least recently used value.
    pub fn pop_oldest(&mut self) -> Option<T> {
        let slot = self.order.oldest()?;
        Some(self.take(slot))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn slots_are_reused_last_freed_first_and_values_kept_in_order() {
        let mut s = SlabLru::new();
        let a = s.push_newest('a', 100);
        let b = s.push_newest('b', 100);
        let c = s.push_newest('c', 100);
        assert_eq!((a, b, c), (0, 1, 2));
        s.touch(a);
        assert_eq!(s.oldest_first().map(|(_, v)| *v).collect::<String>(), "bca");
        assert_eq!(s.pop_oldest(), Some('b'));
        assert_eq!(s.take(c), 'c');
        assert_eq!(s.push_newest('d', 100), c);
        assert_eq!(s.push_newest('e', 100), b);
        assert_eq!(s.oldest_first().map(|(_, v)| *v).collect::<String>(), "ade");
        assert_eq!(s.len(), 3);
        s.assert_consistent();
    }

    #[test]
    fn growth_stops_at_the_cap() {
        let mut s = SlabLru::new();
        for i in 0..10u32 {
            s.push_newest(i, 10);
        }
        assert_eq!(s.capacity(), 10);
        s.push_newest(10, 10);
        assert_eq!(s.capacity(), 11, "past the cap it grows one slot at a time");
        assert!(s.allocated_bytes() <= 11 * (SlabLru::<u32>::ENTRY_BYTES + 4));
        let mut big = SlabLru::new();
        big.push_newest(0u64, 1_000_000);
        assert_eq!(big.capacity(), 64);
    }

    proptest! {
        /// Values come out in the order a plain list kept by hand would give them.
        #[test]
        fn matches_a_plain_list(ops in proptest::collection::vec((0u8..4, 0usize..16), 0..300)) {
            let mut s = SlabLru::new();
            let mut model: Vec<(u32, u64)> = Vec::new();
            let mut next = 0u64;
            for (op, pick) in ops {
                match op {
                    0 | 1 => {
                        next += 1;
                        let slot = s.push_newest(next, 8);
                        model.push((slot, next));
                    }
                    2 if !model.is_empty() => {
                        let (slot, v) = model.remove(pick % model.len());
                        s.touch(slot);
                        model.push((slot, v));
                    }
                    3 if !model.is_empty() => {
                        let (slot, v) = model.remove(pick % model.len());
                        prop_assert_eq!(s.take(slot), v);
                    }
                    _ => prop_assert_eq!(s.pop_oldest(), None),
                }
                prop_assert_eq!(s.oldest_first().map(|(i, v)| (i, *v)).collect::<Vec<_>>(), model.clone());
                s.assert_consistent();
            }
        }
    }
}
