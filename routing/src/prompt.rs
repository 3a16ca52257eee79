//! Canonical prompt → chained block hashes.
//!
//! The approximate index never sees engine tokens, so it hashes the prompt's bytes in fixed-size
//! blocks (`block_bytes`, about `block_tokens × 4` bytes). Chat requests are canonicalised as each
//! message's role and content, in order, with separators that cannot occur in JSON strings'
//! decoded text boundaries being confused (a role/content boundary is never the same as a
//! content that contains the role's text). Hashing is streaming: no concatenated copy of the
//! prompt is built.

use crate::BlockHash;

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

impl BlockHasher {
    pub fn new(block_bytes: usize) -> Self {
        Self {
            block_bytes: block_bytes.max(1),
        }
    }

    /// Hash a plain-text prompt (`/v1/completions`).
    pub fn hash_text(&self, text: &str) -> BlockHashes {
        let _ = text;
        todo!("routing core")
    }

    /// Hash a chat prompt given as (role, content) pairs in order (`/v1/chat/completions`).
    pub fn hash_chat<'a, I>(&self, messages: I) -> BlockHashes
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        let _ = messages.into_iter();
        todo!("routing core")
    }
}

/// Estimated engine tokens for `bytes` of prompt text (about 4 bytes per token for BPE
/// tokenizers on English text). Used where the router has no tokenizer.
pub fn estimate_tokens(bytes: usize) -> u32 {
    bytes.div_ceil(4).min(u32::MAX as usize) as u32
}
