//! The event types: what an engine tells subscribers about its KV-cache blocks.

/// The medium vLLM reports for blocks in accelerator memory (it says "GPU" even on CPU).
pub const MEDIUM_GPU: &str = "GPU";

/// A block's identity as the engine publishes it.
///
/// vLLM sends 64-bit integers by default and raw hash bytes when configured not to convert
/// them; older versions sent signed Python hashes, which are kept as their two's-complement
/// bit pattern so that equal hashes stay equal.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BlockHash {
    Int(u64),
    Bytes(Vec<u8>),
}

impl From<u64> for BlockHash {
    fn from(v: u64) -> Self {
        BlockHash::Int(v)
    }
}

/// One KV-cache event.
#[derive(Debug, Clone, PartialEq)]
pub enum KvEvent {
    /// Full blocks entered the prefix cache. `block_hashes` are chained: each depends on the
    /// one before, and `parent_block_hash` is the hash of the block before the first (None at
    /// the start of a sequence). `token_ids` hold `block_hashes.len() * block_size` ids.
    BlockStored {
        block_hashes: Vec<BlockHash>,
        parent_block_hash: Option<BlockHash>,
        token_ids: Vec<u32>,
        block_size: u32,
        lora_id: Option<i64>,
        medium: Option<String>,
        /// The LoRA adapter the blocks were computed under (vLLM's `lora_name`: the served
        /// model name a request asked for), `None` for the base model.
        lora_name: Option<String>,
        /// The extra keys each block's hash was computed with (vLLM's `extra_keys`: the LoRA
        /// name, multimodal identifiers and offsets, the cache salt), one entry per block as
        /// the msgpack encoding of its tuple, empty for a block without any; the whole vector
        /// is empty when no block has any.
        extra_keys: Vec<Vec<u8>>,
    },
    /// Blocks left the cache (evicted).
    BlockRemoved {
        block_hashes: Vec<BlockHash>,
        medium: Option<String>,
    },
    /// The engine dropped its whole prefix cache (reset).
    AllBlocksCleared,
}

/// One payload: the events an engine published together.
#[derive(Debug, Clone, PartialEq)]
pub struct EventBatch {
    /// Seconds since the Unix epoch, as the engine's clock saw it.
    pub timestamp: f64,
    pub events: Vec<KvEvent>,
    /// Set by data-parallel engines; absent otherwise.
    pub data_parallel_rank: Option<i64>,
}
