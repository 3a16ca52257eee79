//! The tokenizers of pools routed from KV events, loaded once per file and shared by every
//! table that uses them (a reload that keeps the file keeps the loaded tokenizer: loading a
//! large `tokenizer.json` takes a noticeable fraction of a second).

use crate::config::KvEventsConfig;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use warmpath_tokenize::{TokenError, Tokenizer};

/// How requests for a model are cut into the token blocks its engines report.
#[derive(Debug)]
pub struct PreciseModel {
    pub tokenizer: Arc<Tokenizer>,
    pub max_prompt_bytes: usize,
}

type Key = (Option<PathBuf>, Option<PathBuf>);

fn cache() -> &'static Mutex<HashMap<Key, Arc<Tokenizer>>> {
    static CACHE: OnceLock<Mutex<HashMap<Key, Arc<Tokenizer>>>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// The tokenizer of a pool's `kv_events` settings (loaded on first use).
pub fn load(kv: &KvEventsConfig) -> Result<Arc<Tokenizer>, TokenError> {
    let key = (kv.tokenizer.clone(), kv.chat_template.clone());
    if let Some(t) = cache().lock().get(&key) {
        return Ok(t.clone());
    }
    let t = Arc::new(Tokenizer::load(
        kv.tokenizer.as_deref(),
        kv.chat_template.as_deref(),
    )?);
    let mut cache = cache().lock();
    // Files are few (one per model); the map stays as small as the configurations seen.
    cache.insert(key, t.clone());
    Ok(t)
}
