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

/// The tokenizer of a pool's `kv_events` settings (loaded on first use). With a `root`, each
/// path must resolve under it (and is read from where it resolves).
pub fn load(kv: &KvEventsConfig) -> Result<Arc<Tokens>, TokenError> {
    let confined = |path: &Option<PathBuf>| -> Result<Option<PathBuf>, TokenError> {
        match (path, &kv.root) {
            (Some(p), Some(root)) => warmpath_tokenize::resolve_under(root, p).map(Some),
            _ => Ok(path.clone()),
        }
    };
    let key = (
        confined(&kv.tokenizer)?,
        confined(&kv.chat_template)?,
        kv.prefix_cache_tokens,
    );
    if let Some(t) = cache().lock().get(&key) {
        return Ok(t.clone());
    }
    let t = Arc::new(Tokens {
        tokenizer: Tokenizer::load(key.0.as_deref(), key.1.as_deref())?,
        prefixes: PrefixCache::new(kv.prefix_cache_tokens),
    });
    let mut cache = cache().lock();
    // Files are few (one per model); the map stays as small as the configurations seen.
    cache.insert(key, t.clone());
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// The same tokenizer file: read for a pool of the configuration file (no root), refused
    /// for a pool from the cluster whose root does not hold it, read when the root does.
    #[test]
    fn a_pools_root_bounds_where_its_tokenizer_is_read_from() {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tokenize/tests/fixtures");
        let file = KvEventsConfig {
            tokenizer: Some(fixtures.join("tiny/tokenizer.json")),
            ..Default::default()
        };
        assert!(!load(&file).unwrap().tokenizer.is_bytes());
        let elsewhere = KvEventsConfig {
            root: Some(fixtures.join("tiny")),
            tokenizer: Some(fixtures.join("tiny/../../../src/lib.rs")),
            ..file.clone()
        };
        assert!(matches!(load(&elsewhere), Err(TokenError::Outside { .. })));
        let device = KvEventsConfig {
            root: Some(fixtures.clone()),
            tokenizer: Some("/dev/zero".into()),
            ..file.clone()
        };
        assert!(matches!(load(&device), Err(TokenError::Outside { .. })));
        let inside = KvEventsConfig {
            root: Some(fixtures),
            ..file
        };
        assert!(!load(&inside).unwrap().tokenizer.is_bytes());
    }
}
