//! The block map's hasher. Block hashes are already uniformly distributed, so SipHash's cost
//! buys nothing; a keyed multiply is enough, as long as the key stays secret from clients.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

/// A keyed multiply-fold hasher for block hashes. Keys are already xxh3 outputs, so one
/// multiplication mixes enough; the per-process random key keeps crafted prompts from
/// steering many blocks into one bucket chain.
#[derive(Debug, Clone, Copy)]
pub(super) struct BlockKey {
    key: u64,
}

impl BlockKey {
    pub(super) fn random() -> Self {
        Self {
            key: RandomState::new().hash_one(0x5eed_u64) | 1,
        }
    }
}

impl BuildHasher for BlockKey {
    type Hasher = BlockKeyHasher;
    fn build_hasher(&self) -> BlockKeyHasher {
        BlockKeyHasher {
            key: self.key,
            state: 0,
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub(super) struct BlockKeyHasher {
    key: u64,
    state: u64,
}

impl Hasher for BlockKeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, v: u64) {
        let m = u128::from(v ^ self.key ^ self.state) * u128::from(0x9e37_79b9_7f4a_7c15_u64);
        self.state = (m as u64) ^ ((m >> 64) as u64);
    }

    fn finish(&self) -> u64 {
        self.state
    }
}
