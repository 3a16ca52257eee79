//! Canonical prompt → chained block hashes.
//!
//! The approximate index never sees engine tokens, so it hashes the prompt's bytes in fixed-size
//! blocks (`block_bytes`, about `block_tokens × 4` bytes). Chat requests are canonicalised as each
//! message's role and content, in order, with separators that cannot occur in JSON strings'
//! decoded text boundaries being confused (a role/content boundary is never the same as a
//! content that contains the role's text). Hashing is streaming: no concatenated copy of the
//! prompt is built.
//!
//! Canonical chat form, message after message:
//! `escape(role) 0x1E escape(content) 0x1F`, where `escape` writes the three reserved bytes
//! (`0x1B`, `0x1E`, `0x1F`) as `0x1B b`. The encoding is injective (no two different message
//! lists produce the same bytes) and prefix-preserving (two conversations that share their first
//! messages and the start of the next content share that many canonical bytes), which is what
//! the engines' own caches reward.
//!
//! Chaining: block `i`'s hash is `xxh3_64_with_seed(bytes_i, hash_{i-1})`, with
//! [`CHAIN_SEED`] before the first block.

use crate::BlockHash;
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

/// The seed of the first block's hash. Fixed so that every router process (and tests) agree.
pub const CHAIN_SEED: u64 = 0x7761_726d_7061_7468; // "warmpath"

/// The smallest configurable block: below about four tokens per block, an index entry (its
/// fixed per-entry overhead, `index::ENTRY_BYTES`) costs more memory than the prompt text it
/// stands for, and hashing turns into per-byte overhead.
pub const MIN_BLOCK_BYTES: usize = 16;
/// The largest configurable block: beyond this a block is longer than real prompts, and since
/// only full blocks are hashed, nothing would ever match.
pub const MAX_BLOCK_BYTES: usize = 1 << 20;

const ESC: u8 = 0x1b;
const ROLE_END: u8 = 0x1e;
const MESSAGE_END: u8 = 0x1f;

/// Parameters of the canonical hashing. Both the router and (in tests) the simulator's
/// approximation must agree on them only within warmpath; engines use their own hashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHasher {
    /// Bytes per block. Only full blocks are hashed (as engines only cache full blocks).
    pub block_bytes: usize,
}

/// The hashes of one prompt plus what the scheduler needs to know about its size.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockHashes {
    /// Chained hashes of the full blocks, in order.
    pub hashes: Vec<BlockHash>,
    /// Total canonical bytes of the prompt (including the partial last block).
    pub total_bytes: usize,
}

impl BlockHashes {
    /// Key every block by `scope` as well (bytes that keep a prompt's cache apart from the
    /// same text's elsewhere: a LoRA adapter, a cache salt), so that two prompts share a block
    /// only when they share its text prefix and their scope. Empty `scope`: no change.
    pub fn scope(&mut self, scope: &[u8]) {
        if scope.is_empty() {
            return;
        }
        let seed = xxh3_64(scope);
        for h in &mut self.hashes {
            *h = xxh3_64_with_seed(&h.to_le_bytes(), seed);
        }
    }
}

impl BlockHasher {
    pub fn new(block_bytes: usize) -> Self {
        Self {
            block_bytes: block_bytes.max(1),
        }
    }

    /// A hasher for a configured `block_bytes`, refusing sizes outside
    /// [`MIN_BLOCK_BYTES`]`..=`[`MAX_BLOCK_BYTES`] (where [`BlockHasher::new`] takes any size and
    /// silently uses 1 for 0).
    pub fn try_new(block_bytes: usize) -> Result<Self, crate::ConfigError> {
        if !(MIN_BLOCK_BYTES..=MAX_BLOCK_BYTES).contains(&block_bytes) {
            return Err(crate::ConfigError::BlockBytes(block_bytes));
        }
        Ok(Self { block_bytes })
    }

    /// Hash a plain-text prompt (`/v1/completions`).
    pub fn hash_text(&self, text: &str) -> BlockHashes {
        self.hash_bytes(text.as_bytes())
    }

    /// Hash raw prompt bytes (the same result as [`BlockHasher::hash_text`] for UTF-8 text).
    pub fn hash_bytes(&self, bytes: &[u8]) -> BlockHashes {
        let mut stream = self.stream_with_capacity(bytes.len() / self.block_bytes());
        stream.feed(bytes);
        stream.finish()
    }

    /// Hash a prompt given as token ids (`/v1/completions` with `prompt: [int, ...]`): each id
    /// is streamed as 4 little-endian bytes, so `block_bytes / 4` ids make a block.
    pub fn hash_token_ids(&self, ids: &[u32]) -> BlockHashes {
        let mut stream = self.stream_with_capacity(ids.len() * 4 / self.block_bytes());
        for id in ids {
            stream.feed(&id.to_le_bytes());
        }
        stream.finish()
    }

    /// Hash a chat prompt given as (role, content) pairs in order (`/v1/chat/completions`).
    pub fn hash_chat<'a, I>(&self, messages: I) -> BlockHashes
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        let mut stream = self.stream();
        for (role, content) in messages {
            stream.feed_escaped(role.as_bytes());
            stream.feed(&[ROLE_END]);
            stream.feed_escaped(content.as_bytes());
            stream.feed(&[MESSAGE_END]);
        }
        stream.finish()
    }

    /// A streaming hasher, for callers that produce the canonical bytes piece by piece.
    pub fn stream(&self) -> BlockStream {
        self.stream_with_capacity(0)
    }

    fn stream_with_capacity(&self, blocks: usize) -> BlockStream {
        BlockStream {
            block: Vec::with_capacity(self.block_bytes()),
            block_bytes: self.block_bytes(),
            prev: CHAIN_SEED,
            out: BlockHashes {
                hashes: Vec::with_capacity(blocks),
                total_bytes: 0,
            },
        }
    }

    /// `block_bytes`, never 0 even if the public field was set to 0 by hand.
    fn block_bytes(&self) -> usize {
        self.block_bytes.max(1)
    }
}

/// Incremental chained block hashing: feed bytes in any split, get the same hashes as hashing
/// their concatenation. Holds one partial block (copied across `feed` boundaries), nothing more.
#[derive(Debug, Clone)]
pub struct BlockStream {
    block: Vec<u8>,
    block_bytes: usize,
    prev: u64,
    out: BlockHashes,
}

impl BlockStream {
    /// Append canonical bytes.
    pub fn feed(&mut self, mut data: &[u8]) {
        self.out.total_bytes += data.len();
        if !self.block.is_empty() {
            let take = (self.block_bytes - self.block.len()).min(data.len());
            self.block.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.block.len() < self.block_bytes {
                return;
            }
            self.prev = xxh3_64_with_seed(&self.block, self.prev);
            self.out.hashes.push(self.prev);
            self.block.clear();
        }
        // Whole blocks are hashed straight from the caller's slice: no copy.
        let mut chunks = data.chunks_exact(self.block_bytes);
        for chunk in &mut chunks {
            self.prev = xxh3_64_with_seed(chunk, self.prev);
            self.out.hashes.push(self.prev);
        }
        self.block.extend_from_slice(chunks.remainder());
    }

    /// Append text in which the reserved separator bytes are escaped.
    pub fn feed_escaped(&mut self, data: &[u8]) {
        if !has_reserved(data) {
            self.feed(data);
            return;
        }
        let mut rest = data;
        while let Some(pos) = rest.iter().position(|&b| is_reserved(b)) {
            self.feed(&rest[..pos]);
            self.feed(&[ESC, rest[pos]]);
            rest = &rest[pos + 1..];
        }
        self.feed(rest);
    }

    /// The hashes of the full blocks fed so far; a trailing partial block is only counted in
    /// `total_bytes`.
    pub fn finish(self) -> BlockHashes {
        self.out
    }
}

fn is_reserved(b: u8) -> bool {
    b == ESC || b == ROLE_END || b == MESSAGE_END
}

/// Whether `data` holds a reserved byte. The common case (none) runs 32 bytes per step: all
/// three reserved bytes lie in `0x18..=0x1F`, so a word-at-a-time test for bytes in that range
/// prefilters, and only a hit is checked byte by byte.
fn has_reserved(data: &[u8]) -> bool {
    const LOW: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    const MASK: u64 = 0xf8f8_f8f8_f8f8_f8f8;
    const RANGE: u64 = 0x1818_1818_1818_1818;
    // Nonzero iff some byte of `w` is in 0x18..=0x1F (exact zero-byte test on w & 0xF8 ^ 0x18).
    let in_range = |w: u64| {
        let x = (w & MASK) ^ RANGE;
        x.wrapping_sub(LOW) & !x & HIGH
    };
    let mut chunks = data.chunks_exact(32);
    for chunk in &mut chunks {
        let mut hit = 0;
        for word in chunk.chunks_exact(8) {
            hit |= in_range(u64::from_le_bytes(word.try_into().expect("8 bytes")));
        }
        if hit != 0 && chunk.iter().any(|&b| is_reserved(b)) {
            return true;
        }
    }
    chunks.remainder().iter().any(|&b| is_reserved(b))
}

/// Estimated engine tokens for `bytes` of prompt text (about 4 bytes per token for BPE
/// tokenizers on English text). Used where the router has no tokenizer.
pub fn estimate_tokens(bytes: usize) -> u32 {
    bytes.div_ceil(4).min(u32::MAX as usize) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn reference(block: usize, bytes: &[u8]) -> Vec<u64> {
        let mut prev = CHAIN_SEED;
        bytes
            .chunks_exact(block)
            .map(|c| {
                prev = xxh3_64_with_seed(c, prev);
                prev
            })
            .collect()
    }

    #[test]
    fn only_full_blocks_are_hashed() {
        let h = BlockHasher::new(4);
        let out = h.hash_text("abcdefghij");
        assert_eq!(out.total_bytes, 10);
        assert_eq!(out.hashes.len(), 2);
        assert_eq!(out.hashes, reference(4, b"abcdefghij"));
        assert!(h.hash_text("abc").hashes.is_empty());
        assert_eq!(h.hash_text("").total_bytes, 0);
    }

    #[test]
    fn chaining_makes_position_matter() {
        let h = BlockHasher::new(4);
        let a = h.hash_text("xxxxyyyy");
        let b = h.hash_text("yyyyyyyy");
        // Same second block bytes, different prefix: different hash.
        assert_ne!(a.hashes[1], b.hashes[1]);
        // Same prefix: same leading hashes.
        let c = h.hash_text("xxxxzzzz");
        assert_eq!(a.hashes[0], c.hashes[0]);
        assert_ne!(a.hashes[1], c.hashes[1]);
    }

    #[test]
    fn try_new_refuses_sizes_outside_the_range() {
        for bad in [0, 4, MIN_BLOCK_BYTES - 1, MAX_BLOCK_BYTES + 1] {
            assert_eq!(
                BlockHasher::try_new(bad),
                Err(crate::ConfigError::BlockBytes(bad))
            );
        }
        for good in [MIN_BLOCK_BYTES, 64, MAX_BLOCK_BYTES] {
            assert_eq!(BlockHasher::try_new(good), Ok(BlockHasher::new(good)));
        }
    }

    #[test]
    fn zero_block_bytes_is_treated_as_one() {
        let h = BlockHasher { block_bytes: 0 };
        assert_eq!(h.hash_text("abc").hashes.len(), 3);
    }

    #[test]
    fn chat_boundaries_are_not_confusable() {
        let h = BlockHasher::new(1);
        let a = h.hash_chat([("user", "hello")]);
        let b = h.hash_chat([("use", "rhello")]);
        let c = h.hash_chat([("user", "hel"), ("lo", "")]);
        let d = h.hash_chat([("user", "hello\u{1e}")]);
        let e = h.hash_chat([("user", "hello"), ("", "")]);
        let all = [&a, &b, &c, &d, &e];
        for (i, x) in all.iter().enumerate() {
            for y in &all[i + 1..] {
                assert_ne!(x.hashes.last(), y.hashes.last());
            }
        }
    }

    #[test]
    fn chat_shares_prefix_with_its_continuation() {
        let h = BlockHasher::new(8);
        let sys = "You are a helpful assistant. ".repeat(20);
        let a = h.hash_chat([("system", sys.as_str()), ("user", "What is 2+2?")]);
        let b = h.hash_chat([
            ("system", sys.as_str()),
            ("user", "What is 2+2?"),
            ("assistant", "4"),
            ("user", "And 3+3?"),
        ]);
        let full = a.total_bytes / 8;
        assert_eq!(a.hashes[..full], b.hashes[..full]);
    }

    #[test]
    fn token_ids_hash_as_little_endian_bytes() {
        let h = BlockHasher::new(8);
        let ids = [1u32, 2, 3, 4, 5];
        let bytes: Vec<u8> = ids.iter().flat_map(|i| i.to_le_bytes()).collect();
        assert_eq!(h.hash_token_ids(&ids), h.hash_bytes(&bytes));
    }

    #[test]
    fn estimate_tokens_rounds_up() {
        assert_eq!(estimate_tokens(0), 0);
        assert_eq!(estimate_tokens(1), 1);
        assert_eq!(estimate_tokens(8), 2);
        assert_eq!(estimate_tokens(9), 3);
    }

    proptest! {
        #[test]
        fn reserved_scan_matches_the_simple_one(
            data in proptest::collection::vec(prop_oneof![any::<u8>(), 0x10u8..0x20], 0..200),
        ) {
            prop_assert_eq!(has_reserved(&data), data.iter().any(|&b| is_reserved(b)));
        }

        #[test]
        fn streaming_equals_one_shot(
            data in proptest::collection::vec(any::<u8>(), 0..600),
            block in 1usize..80,
            cuts in proptest::collection::vec(0usize..600, 0..8),
        ) {
            let h = BlockHasher::new(block);
            let one = h.hash_bytes(&data);
            prop_assert_eq!(&one.hashes, &reference(block, &data));
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(data.len())).collect();
            cuts.sort_unstable();
            let mut s = h.stream();
            let mut at = 0;
            for c in cuts {
                s.feed(&data[at..c]);
                at = c;
            }
            s.feed(&data[at..]);
            prop_assert_eq!(s.finish(), one);
        }

        #[test]
        fn escaping_is_injective(
            a in proptest::collection::vec(("[a-z\u{1b}\u{1e}\u{1f}]{0,6}", "[a-z\u{1b}\u{1e}\u{1f}]{0,6}"), 0..4),
            b in proptest::collection::vec(("[a-z\u{1b}\u{1e}\u{1f}]{0,6}", "[a-z\u{1b}\u{1e}\u{1f}]{0,6}"), 0..4),
        ) {
            // With 1-byte blocks the last hash identifies the whole canonical byte string.
            let h = BlockHasher::new(1);
            let ha = h.hash_chat(a.iter().map(|(r, c)| (r.as_str(), c.as_str())));
            let hb = h.hash_chat(b.iter().map(|(r, c)| (r.as_str(), c.as_str())));
            if a != b {
                prop_assert_ne!(ha, hb);
            } else {
                prop_assert_eq!(ha, hb);
            }
        }
    }
}
