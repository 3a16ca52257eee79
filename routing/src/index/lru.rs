//! One replica's blocks in recency order, so that the bound evicts the least recently routed
//! block first. A slab of nodes linked by index, not pointers: 20 bytes a node, no allocation
//! per block, and the node's slot is what the block map stores to find it again. Each node
//! keeps the index's clock at its last use, so that the age of what a replica would evict
//! next is one read (the scheduler places new prefixes where that is oldest).

use crate::BlockHash;
use std::mem::size_of;

pub(super) const NIL: u32 = u32::MAX;

/// The hash is kept as two halves so that the node aligns to 4 bytes: 20 bytes, not 24.
#[derive(Debug, Clone, Copy)]
pub(super) struct Node {
    hash: [u32; 2],
    prev: u32,
    next: u32,
    /// The index's clock when the block was last routed to this replica.
    used: u32,
}

impl Node {
    fn new(hash: BlockHash, used: u32) -> Self {
        Self {
            hash: [hash as u32, (hash >> 32) as u32],
            prev: NIL,
            next: NIL,
            used,
        }
    }

    fn hash(&self) -> BlockHash {
        u64::from(self.hash[0]) | (u64::from(self.hash[1]) << 32)
    }
}

/// One replica's LRU of block hashes (the hash → node lookup lives in the shared map).
#[derive(Debug)]
pub(super) struct ReplicaLru {
    nodes: Vec<Node>,
    free: Vec<u32>,
    head: u32,
    tail: u32,
    pub(super) len: usize,
}

impl Default for ReplicaLru {
    fn default() -> Self {
        Self::new()
    }
}

impl ReplicaLru {
    pub(super) fn new() -> Self {
        Self {
            nodes: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }

    fn unlink(&mut self, i: u32) {
        let Node { prev, next, .. } = self.nodes[i as usize];
        match prev {
            NIL => self.head = next,
            p => self.nodes[p as usize].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.nodes[n as usize].prev = prev,
        }
    }

    fn link_front(&mut self, i: u32) {
        let old = self.head;
        let node = &mut self.nodes[i as usize];
        node.prev = NIL;
        node.next = old;
        match old {
            NIL => self.tail = i,
            o => self.nodes[o as usize].prev = i,
        }
        self.head = i;
    }

    pub(super) fn touch(&mut self, i: u32, now: u32) {
        self.nodes[i as usize].used = now;
        if self.head != i {
            self.unlink(i);
            self.link_front(i);
        }
    }

    /// Drop the least recently used hash; `None` when empty.
    pub(super) fn pop_back(&mut self) -> Option<BlockHash> {
        let i = self.tail;
        if i == NIL {
            return None;
        }
        self.unlink(i);
        self.free.push(i);
        self.len -= 1;
        Some(self.nodes[i as usize].hash())
    }

    /// The clock at the last use of the least recently used block; `None` when empty.
    pub(super) fn oldest_use(&self) -> Option<u32> {
        (self.tail != NIL).then(|| self.nodes[self.tail as usize].used)
    }

    /// Insert a hash (known absent) as most recently used, last used at clock `used`; returns
    /// its slot. `cap` bounds the slab's growth so that its spare capacity stays within the
    /// replica's bound.
    pub(super) fn push_front(&mut self, hash: BlockHash, used: u32, cap: usize) -> u32 {
        let node = Node::new(hash, used);
        let i = match self.free.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                if self.nodes.len() == self.nodes.capacity() {
                    let room = cap.saturating_sub(self.nodes.len());
                    self.nodes
                        .reserve_exact(self.nodes.len().max(64).min(room).max(1));
                }
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        self.link_front(i);
        self.len += 1;
        i
    }

    /// Hashes with their last use, from least to most recently used.
    pub(super) fn oldest_first(&self) -> Vec<(BlockHash, u32)> {
        let mut order = Vec::with_capacity(self.len);
        let mut i = self.tail;
        while i != NIL {
            let node = &self.nodes[i as usize];
            order.push((node.hash(), node.used));
            i = node.prev;
        }
        order
    }

    pub(super) fn allocated_bytes(&self) -> usize {
        self.nodes.capacity() * size_of::<Node>() + self.free.capacity() * size_of::<u32>()
    }
}
