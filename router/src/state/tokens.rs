//! The tokenizers of pools routed from KV events, loaded once per file and shared by every
//! table that uses them (a reload that keeps the file keeps the loaded tokenizer, and its
//! prefix cache: loading a large `tokenizer.json` takes a noticeable fraction of a second).

use crate::config::KvEventsConfig;
pub use crate::request::Tokens;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use warmpath_tokenize::{PrefixCache, TokenError, Tokenizer};

/// How requests for a model are cut into the token blocks its engines report.
#[derive(Debug)]
pub struct PreciseModel {
    pub tokens: Arc<Tokens>,
    pub max_prompt_bytes: usize,
}

type Key = (Option<PathBuf>, Option<PathBuf>, usize);

fn cache() -> &'static Mutex<HashMap<Key, Arc<Tokens>>> {
    static CACHE: OnceLock<Mutex<HashMap<Key, Arc<Tokens>>>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// The tokenizer of a pool's `kv_events` settings (loaded on first use).
pub fn load(kv: &KvEventsConfig) -> Result<Arc<Tokens>, TokenError> {
    let key = (
        kv.tokenizer.clone(),
        kv.chat_template.clone(),
        kv.prefix_cache_tokens,
    );
    if let Some(t) = cache().lock().get(&key) {
        return Ok(t.clone());
    }
    let t = Arc::new(Tokens {
        tokenizer: Tokenizer::load(kv.tokenizer.as_deref(), kv.chat_template.as_deref())?,
        prefixes: PrefixCache::new(kv.prefix_cache_tokens),
    });
    let mut cache = cache().lock();
    // Files are few (one per model); the map stays as small as the configurations seen.
    cache.insert(key, t.clone());
    Ok(t)
}
