//! The extra keys an engine folds into a request's block hashes, as the router must fold them
//! into its own keys for the request: otherwise a request under a LoRA adapter, or with a
//! `cache_salt`, would match blocks the engine computed for other requests and will not reuse.
//!
//! vLLM (`generate_block_hash_extra_keys`) keys every block of an adapter's request with the
//! adapter, the blocks covering a multimodal item with that item, and the first block with the
//! cache salt, in that order; its KV events carry each block's keys untagged (the adapter's name,
//! `(identifier, offset)` per multimodal item, the salt) as one msgpack array per block, which
//! the precise index folds as it receives them. This builds the same arrays for a request.
//! Multimodal items are not keyed here: a request's token blocks stop before its first one
//! (`crate::request`), since neither the item's identifier nor its placeholder tokens can be
//! known without the engine's processor.

/// A request's per-block extra-key bytes: the first block's, and every later block's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct BlockExtras {
    first: Vec<u8>,
    rest: Vec<u8>,
}

impl BlockExtras {
    /// For a request under LoRA adapter `adapter` (its served name, `None` for the base model)
    /// with `salt`.
    pub(crate) fn new(adapter: Option<&str>, salt: Option<&str>) -> Self {
        let encode = |keys: &[&str]| {
            if keys.is_empty() {
                return Vec::new();
            }
            let tuple = rmpv::Value::Array(keys.iter().map(|&k| rmpv::Value::from(k)).collect());
            let mut bytes = Vec::new();
            rmpv::encode::write_value(&mut bytes, &tuple).expect("writing to a Vec cannot fail");
            bytes
        };
        let rest: Vec<&str> = adapter.into_iter().collect();
        let first: Vec<&str> = adapter.into_iter().chain(salt).collect();
        Self {
            first: encode(&first),
            rest: encode(&rest),
        }
    }

    /// Everything that keeps the request's cache apart from the same tokens' elsewhere (the
    /// first block holds every key), for the approximate index's hashes.
    pub(crate) fn scope(&self) -> &[u8] {
        &self.first
    }

    /// Block `i`'s bytes (empty: no extra keys).
    pub(crate) fn block(&self, i: usize) -> &[u8] {
        if i == 0 {
            &self.first
        } else {
            &self.rest
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warmpath_kv_events::{BlockHash, KvEvent};
    use warmpath_routing::index::{prompt_keys_by, PreciseIndex, PreciseLimits};

    const BS: usize = 4;

    /// A `BlockStored` of three blocks as vLLM publishes it for a request under `adapter` with
    /// `salt`: each block's untagged keys, a msgpack array (or nil when it has none).
    fn stored(tokens: &[u32], adapter: Option<&str>, salt: Option<&str>) -> KvEvent {
        let n = tokens.len() / BS;
        let extra_keys = (0..n)
            .map(|i| {
                let keys: Vec<rmpv::Value> = adapter
                    .into_iter()
                    .chain(salt.filter(|_| i == 0))
                    .map(rmpv::Value::from)
                    .collect();
                if keys.is_empty() {
                    return Vec::new();
                }
                let mut b = Vec::new();
                rmpv::encode::write_value(&mut b, &rmpv::Value::Array(keys)).unwrap();
                b
            })
            .collect::<Vec<_>>();
        KvEvent::BlockStored {
            block_hashes: (0..n as u64).map(|i| BlockHash::Int(100 + i)).collect(),
            parent_block_hash: None,
            token_ids: tokens.to_vec(),
            block_size: BS as u32,
            lora_id: adapter.map(|_| 1),
            medium: None,
            lora_name: adapter.map(str::to_owned),
            extra_keys: if extra_keys.iter().all(Vec::is_empty) {
                Vec::new()
            } else {
                extra_keys
            },
        }
    }

    fn matched(index: &PreciseIndex, tokens: &[u32], extras: &BlockExtras) -> u32 {
        let keys = prompt_keys_by(tokens, BS, |i| extras.block(i));
        let mut out = [0];
        index.longest_prefix(&keys, &[0], &mut out);
        out[0]
    }

    #[test]
    fn a_requests_keys_fold_what_vllm_folds_for_its_adapter_and_salt() {
        let tokens: Vec<u32> = (0..12).collect();
        for (adapter, salt) in [
            (None, None),
            (Some("sql-lora"), None),
            (None, Some("s1")),
            (Some("sql-lora"), Some("s1")),
        ] {
            let mut index = PreciseIndex::new(PreciseLimits {
                max_blocks_per_replica: 64,
                max_blocks_total: 64,
            });
            index.apply(0, &stored(&tokens, adapter, salt)).unwrap();
            assert_eq!(
                matched(&index, &tokens, &BlockExtras::new(adapter, salt)),
                3,
                "{adapter:?} {salt:?}: the request's own keys match all its blocks"
            );
            // Any other adapter or salt matches nothing: the engine would reuse nothing.
            for (a, s) in [
                (None, None),
                (Some("sql-lora"), None),
                (Some("other"), None),
                (None, Some("s1")),
                (Some("sql-lora"), Some("s1")),
                (Some("sql-lora"), Some("s2")),
            ] {
                if (a, s) != (adapter, salt) {
                    assert_eq!(
                        matched(&index, &tokens, &BlockExtras::new(a, s)),
                        0,
                        "stored under {adapter:?} {salt:?}, asked under {a:?} {s:?}"
                    );
                }
            }
            assert_eq!(index.is_adapter_on("sql-lora", [0]), adapter.is_some());
        }
    }

    #[test]
    fn no_adapter_and_no_salt_is_no_extra_bytes() {
        let extras = BlockExtras::new(None, None);
        assert_eq!(extras, BlockExtras::default());
        assert_eq!(extras.block(0), b"");
        let salted = BlockExtras::new(None, Some("s"));
        assert!(!salted.block(0).is_empty());
        assert!(salted.block(1).is_empty());
    }
}
