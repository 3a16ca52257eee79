//! A least-recently-used order over the slots of a slab, linked by index: O(1) to append, to
//! remove any member and to find the oldest, with no allocation per operation. The queue keeps
//! its idle tenants in one (so the longest idle is forgotten first) and the limiters their
//! tenants with nothing in flight.

pub(crate) const NIL: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
struct Link {
    prev: u32,
    next: u32,
    linked: bool,
}

const UNLINKED: Link = Link {
    prev: NIL,
    next: NIL,
    linked: false,
};

/// Members are slot numbers of a slab owned elsewhere; the list grows to the highest slot
/// number seen, so it is bounded by the slab's bound.
#[derive(Debug)]
pub(crate) struct LruList {
    links: Vec<Link>,
    head: u32,
    tail: u32,
    len: usize,
}

impl Default for LruList {
    fn default() -> Self {
        Self::new()
    }
}

impl LruList {
    pub(crate) fn new() -> Self {
        Self {
            links: Vec::new(),
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn contains(&self, i: u32) -> bool {
        self.links.get(i as usize).is_some_and(|l| l.linked)
    }

    /// The least recently appended member.
    pub(crate) fn front(&self) -> Option<u32> {
        (self.head != NIL).then_some(self.head)
    }

    /// Append `i` as the most recent member (moving it there if it is already one).
    pub(crate) fn push_back(&mut self, i: u32) {
        self.remove(i);
        if self.links.len() <= i as usize {
            self.links.resize(i as usize + 1, UNLINKED);
        }
        self.links[i as usize] = Link {
            prev: self.tail,
            next: NIL,
            linked: true,
        };
        match self.tail {
            NIL => self.head = i,
            t => self.links[t as usize].next = i,
        }
        self.tail = i;
        self.len += 1;
    }

    /// Take `i` out; false when it was not a member.
    pub(crate) fn remove(&mut self, i: u32) -> bool {
        if !self.contains(i) {
            return false;
        }
        let Link { prev, next, .. } = self.links[i as usize];
        match prev {
            NIL => self.head = next,
            p => self.links[p as usize].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.links[n as usize].prev = prev,
        }
        self.links[i as usize] = UNLINKED;
        self.len -= 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(l: &LruList) -> Vec<u32> {
        let mut out = Vec::new();
        let mut i = l.head;
        while i != NIL {
            out.push(i);
            i = l.links[i as usize].next;
        }
        out
    }

    #[test]
    fn keeps_recency_order() {
        let mut l = LruList::new();
        for i in [3, 1, 4, 5] {
            l.push_back(i);
        }
        assert_eq!(order(&l), [3, 1, 4, 5]);
        l.push_back(1);
        assert_eq!(order(&l), [3, 4, 5, 1]);
        assert!(l.remove(4));
        assert!(!l.remove(4));
        assert!(!l.remove(99));
        assert_eq!(order(&l), [3, 5, 1]);
        assert_eq!(l.front(), Some(3));
        assert!(l.remove(3) && l.remove(1));
        assert_eq!(order(&l), [5]);
        assert_eq!((l.len(), l.front()), (1, Some(5)));
        assert!(l.remove(5));
        assert_eq!((l.len(), l.front()), (0, None));
    }
}
