//! One replica's blocks for the approximate index, in recency order ([`warmpath_lru::SlabLru`]),
//! so that the bound evicts the least recently routed block first: the slot is what the block
//! map stores to find a block again. Each block keeps the index's clock at its last use, so that
//! the age of what a replica would evict next is one read (the scheduler places new prefixes
//! where that is oldest).

use crate::BlockHash;
use warmpath_lru::SlabLru;

/// One block a replica is believed to hold. The hash is kept as two halves so that the value
/// aligns to 4 bytes: 12 bytes, 20 with its links.
#[derive(Debug, Clone, Copy)]
pub(super) struct Held {
    hash: [u32; 2],
    /// The index's clock when the block was last routed to this replica.
    pub(super) used: u32,
}

impl Held {
    pub(super) fn new(hash: BlockHash, used: u32) -> Self {
        Self {
            hash: [hash as u32, (hash >> 32) as u32],
            used,
        }
    }

    pub(super) fn hash(&self) -> BlockHash {
        u64::from(self.hash[0]) | (u64::from(self.hash[1]) << 32)
    }
}

/// One replica's blocks, least recently routed first out.
pub(super) type ReplicaLru = SlabLru<Held>;

/// The clock at the last use of the block `lru` would evict first; `None` when empty.
pub(super) fn oldest_use(lru: &ReplicaLru) -> Option<u32> {
    lru.oldest().map(|slot| lru.get(slot).used)
}
