//! Tokenization that reuses the tokens of a text prefix seen before.
//!
//! Agent and chat requests share long prefixes (a system prompt, the earlier turns), and a BPE
//! tokenizer costs about 1 ms per 1k tokens (35 ms for a 32k-token chat with the tiny model's), far
//! more than the router's budget for a request. [`PrefixCache::encode`] gives exactly the ids of
//! [`Tokenizer::encode`] but, when a long prefix of the text was tokenized before, only tokenizes
//! the text after (most of) that prefix again.
//!
//! # How it works
//!
//! * **Chunk boundaries.** A text is cut at fixed byte positions (every `chunk_bytes`, 2 KiB by
//!   default, each moved forward to the next char boundary; the positions depend only on the
//!   bytes before them). The key of a boundary `b` is the 128-bit xxh3 of `text[..b]`, taken
//!   from one streaming hasher, so two texts share a key exactly when (but for a 2^-128 hash
//!   collision) they share the whole prefix up to it.
//! * **Restart points.** After a text is tokenized, each of its boundaries remembers a token
//!   `k` a margin before it (its tokens `k..k+16` end at least 32 bytes before the boundary),
//!   the byte offset where token `k` starts, and the ids and relative start offsets of the 16
//!   tokens from `k` (the *window*). Token `k` must start a pre-tokenizer word, start exactly
//!   where token `k-1` ends and not share its start (tokens of one UTF-8 char do), at a char
//!   boundary. The ids before `k` are kept in pieces of up to 1024 ids shared between the
//!   prompts that spliced from one another, so a system prompt sent by many requests is held
//!   once.
//! * **Splice.** For a new text, the deepest boundary whose key is known gives a restart point
//!   `(k, s)`; only `text[s..]` is tokenized (without special tokens). The re-encoding has
//!   *synchronised* with the cached tokenization when, at a token `k+i` of the window
//!   (`i <= 8`) that starts a word in both, the next 8 tokens agree in id and in start offset;
//!   the result is then the cached ids before `k+i` followed by the re-encoded ids from there.
//!   The first `i` tokens may differ (a tokenizer that adds a prefix space to a text, a
//!   normalizer looking at the start of the text); if no `i` synchronises, the text is
//!   tokenized in full (`rejected`). Either way the new text's own boundaries are remembered.
//!
//! # Why it is exact
//!
//! A HF tokenizer splits the (normalized) text into words with its pre-tokenizer and then tokenizes
//! each word on its own (BPE, WordPiece, Unigram). The new text equals the cached one up to the
//! boundary, so both tokenizations agree on every word that ends before the boundary and whose
//! split did not look past it; the pre-tokenizers' splits look ahead a character or a whitespace
//! run. A change after the boundary that still reaches back into the window (a word or whitespace
//! run running across the boundary, a special token's stripping) changes the re-encoded window,
//! which then does not agree, and the cache tokenizes in full. When the window agrees on word
//! starts and ids, the word split of the new text from the splice on is that of its re-encoding,
//! whose words are tokenized as the full tokenization would. Tokenizers without a pre-tokenizer
//! (the whole text one word, as SentencePiece BPE converted to `tokenizer.json`) are cut at any
//! token start: BPE merges are local in practice, and the agreement over 8 tokens is the check.
//! Offsets must be true where the text is cut: a BPE without unknown token or byte fallback drops
//! the chars it has no token for and shifts the offsets after them within their word, so it is only
//! cut at words, and passed through when it has no pre-tokenizer; BPE dropout (random) is passed
//! through too. The tests compare every result with a full tokenization on random texts (words,
//! whitespace runs and long words across boundaries, unicode, special tokens).
//!
//! Special tokens: `special = true` is served from the cache only when the tokenizer's
//! post-processor adds tokens at the start only (probed once: `encode("a", true)` is
//! `encode("", true)` followed by `encode("a", false)`); those leading ids are put before the
//! cached ids of the text. Otherwise (an end-of-sequence token), and for tokenizers with
//! truncation or padding, for the byte-level approximation (which is cheap) and for texts of
//! 4 GiB or more, [`PrefixCache::encode`] is [`Tokenizer::encode`] (`bypassed`).
//!
//! # The bound
//!
//! The cache holds at most `max_tokens` *units* of 4 bytes: each distinct token id held counts
//! one (a piece of ids counts in full while any remembered prompt uses part of it), each
//! remembered boundary [`BOUNDARY_COST`] (its key, restart point and window, about 160 bytes),
//! each remembered prompt [`PROMPT_COST`] plus [`SPAN_COST`] per piece it uses. So the memory
//! held is about `4 * max_tokens` bytes plus allocator and hash-map slack (and about 40 bytes
//! per piece of 1024 ids). When an insertion goes over, least recently used prompts are dropped
//! (a prompt is used when a lookup lands on one of its boundaries). A prompt that alone would
//! not fit is not remembered; a prompt none of whose boundaries still point to it (a newer
//! tokenization of the same prefix took them over) is dropped at once.
//!
//! # Contract
//!
//! One cache per [`Tokenizer`]: keys are texts, not (tokenizer, text) pairs, and the special
//! token probe is made on the first call. The lock is held only for map look-ups and
//! insertions, never while tokenizing.
//!
//! [`Tokenizer::encode`]: crate::Tokenizer::encode

// Without `hf` everything passes through and the machinery is unused.
#![cfg_attr(not(feature = "hf"), allow(dead_code))]

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use crate::{TokenError, Tokenizer};

/// Default distance between chunk boundaries, in bytes.
pub const DEFAULT_CHUNK_BYTES: usize = 2048;
/// Smallest chunk accepted by [`PrefixCache::with_chunk_bytes`] (a window must fit in one).
pub const MIN_CHUNK_BYTES: usize = 128;
/// Units (of 4 bytes) a remembered boundary counts against `max_tokens`.
pub const BOUNDARY_COST: usize = 40;
/// Units (of 4 bytes) a remembered prompt counts against `max_tokens`, besides its ids.
pub const PROMPT_COST: usize = 32;
/// Units a remembered prompt counts per piece of (up to 1024) ids it uses, its own or shared.
pub const SPAN_COST: usize = 4;

/// Cached tokens kept per restart point, from the restart token on.
const WINDOW: usize = 16;
/// Consecutive tokens that must agree for a splice.
const AGREE: usize = 8;
/// The window ends this many bytes before its boundary: a text that differs after the boundary
/// may change the last word before it.
const MARGIN_BYTES: usize = 32;
/// Ids per shared piece.
const PIECE_TOKENS: usize = 1024;
/// Candidate restart tokens examined per boundary.
const SEARCH: usize = 64;

/// Counters of a [`PrefixCache`], for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Texts tokenized by splicing onto cached tokens.
    pub hits: u64,
    /// Texts tokenized in full through the cache (no known prefix, too short, or rejected).
    pub misses: u64,
    /// Of the misses, those whose known prefix was not used because the re-encoding did not
    /// agree with the cached tokens (the text was then tokenized in full).
    pub rejected: u64,
    /// Texts passed straight to the tokenizer (byte-level approximation, a post-processor that
    /// adds tokens at the end with `special = true`, truncation, padding, see the module).
    pub bypassed: u64,
    /// Token ids taken from the cache instead of being tokenized, summed over hits.
    pub spliced_tokens: u64,
    /// Units held now, at most `max_tokens` (see the module's bound).
    pub held: usize,
    /// Prompts remembered now.
    pub prompts: usize,
    /// Chunk boundaries remembered now.
    pub boundaries: usize,
}

/// A tokenization cache keyed by text prefixes (see the module documentation).
pub struct PrefixCache {
    max_tokens: usize,
    chunk_bytes: usize,
    inner: Mutex<Inner>,
    profile: OnceLock<Profile>,
    hits: AtomicU64,
    misses: AtomicU64,
    rejected: AtomicU64,
    bypassed: AtomicU64,
    spliced_tokens: AtomicU64,
}

impl std::fmt::Debug for PrefixCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrefixCache")
            .field("max_tokens", &self.max_tokens)
            .field("chunk_bytes", &self.chunk_bytes)
            .field("stats", &self.stats())
            .finish()
    }
}

/// What the tokenizer allows (probed once).
#[derive(Debug, Clone)]
struct Profile {
    /// HF tokenizer without truncation, padding or BPE dropout, whose offsets can be trusted
    /// where it is cut.
    cacheable: bool,
    /// `special = true` adds these ids before the text and nothing else (`None`: it adds
    /// something elsewhere, so such texts are not cached).
    leading: Option<Vec<u32>>,
    /// Restart tokens must start a pre-tokenizer word (the tokenizer has a pre-tokenizer).
    words: bool,
}

/// Ids shared between prompts; `holders` counts the remembered prompts using it (changed
/// under the lock only) so that it is counted once in `held`.
struct Piece {
    ids: Box<[u32]>,
    holders: AtomicU32,
}

/// The first `len` ids of a piece.
#[derive(Clone)]
struct Span {
    piece: Arc<Piece>,
    len: usize,
}

/// Where a tokenization can be resumed before a boundary.
#[derive(Clone, Copy)]
struct Restart {
    /// The prompt whose ids precede the window.
    prompt: u64,
    /// Index of the window's first token.
    token: u32,
    /// Byte offset where it starts.
    offset: u32,
    /// The window's ids.
    ids: [u32; WINDOW],
    /// Their start offsets relative to `offset`.
    starts: [u16; WINDOW],
    /// Bit `i`: a splice may happen before window token `i` (see `restart_at`).
    cuts: u16,
}

struct Prompt {
    /// Its ids up to its last restart token (the window's ids are in the restart points).
    spans: Arc<[Span]>,
    /// Keys of boundaries that pointed to it when it was inserted.
    keys: Vec<u128>,
    /// How many of them still do.
    owned: usize,
    tick: u64,
}

#[derive(Default)]
struct Inner {
    bounds: HashMap<u128, Restart>,
    prompts: HashMap<u64, Prompt>,
    /// Use tick -> prompt, oldest first.
    lru: BTreeMap<u64, u64>,
    tick: u64,
    next_id: u64,
    held: usize,
}

impl Inner {
    fn touch(&mut self, id: u64) {
        self.tick += 1;
        let tick = self.tick;
        if let Some(p) = self.prompts.get_mut(&id) {
            self.lru.remove(&p.tick);
            p.tick = tick;
            self.lru.insert(tick, id);
        }
    }

    /// Forgets a prompt and the boundaries still pointing to it; returns it so that its ids
    /// are freed after the lock is released.
    fn remove(&mut self, id: u64) -> Option<Prompt> {
        let p = self.prompts.remove(&id)?;
        self.lru.remove(&p.tick);
        for k in &p.keys {
            if self.bounds.get(k).is_some_and(|r| r.prompt == id) {
                self.bounds.remove(k);
                self.held -= BOUNDARY_COST;
            }
        }
        for s in p.spans.iter() {
            if s.piece.holders.fetch_sub(1, Relaxed) == 1 {
                self.held -= s.piece.ids.len();
            }
        }
        self.held -= prompt_cost(p.spans.len());
        Some(p)
    }
}

impl PrefixCache {
    /// A cache holding at most `max_tokens` units (token ids, see the module's bound), with
    /// boundaries every [`DEFAULT_CHUNK_BYTES`].
    pub fn new(max_tokens: usize) -> Self {
        Self::with_chunk_bytes(max_tokens, DEFAULT_CHUNK_BYTES)
    }

    /// A cache with boundaries every `chunk_bytes` (at least [`MIN_CHUNK_BYTES`]). Smaller
    /// chunks re-tokenize less after a known prefix but hold more boundaries.
    pub fn with_chunk_bytes(max_tokens: usize, chunk_bytes: usize) -> Self {
        PrefixCache {
            max_tokens,
            chunk_bytes: chunk_bytes.max(MIN_CHUNK_BYTES),
            inner: Mutex::new(Inner::default()),
            profile: OnceLock::new(),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            bypassed: AtomicU64::new(0),
            spliced_tokens: AtomicU64::new(0),
        }
    }

    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    pub fn stats(&self) -> CacheStats {
        let g = self.inner.lock();
        CacheStats {
            hits: self.hits.load(Relaxed),
            misses: self.misses.load(Relaxed),
            rejected: self.rejected.load(Relaxed),
            bypassed: self.bypassed.load(Relaxed),
            spliced_tokens: self.spliced_tokens.load(Relaxed),
            held: g.held,
            prompts: g.prompts.len(),
            boundaries: g.bounds.len(),
        }
    }

    /// Exactly `tokenizer.encode(text, special)`, reusing the tokens of a known prefix of
    /// `text`; `text` is remembered for later calls. `tokenizer` must be the same for every
    /// call on this cache.
    pub fn encode(
        &self,
        tokenizer: &Tokenizer,
        text: &str,
        special: bool,
    ) -> Result<Vec<u32>, TokenError> {
        #[cfg(feature = "hf")]
        {
            let profile = self.profile(tokenizer)?;
            let leading = if special {
                profile.leading.as_deref()
            } else {
                Some(&[][..])
            };
            if let (true, Some(leading), true) =
                (profile.cacheable, leading, text.len() < u32::MAX as usize)
            {
                return self.encode_cached(tokenizer, text, leading, profile.words);
            }
        }
        self.bypassed.fetch_add(1, Relaxed);
        tokenizer.encode(text, special)
    }
}

#[cfg(feature = "hf")]
impl PrefixCache {
    fn profile(&self, t: &Tokenizer) -> Result<&Profile, TokenError> {
        if let Some(p) = self.profile.get() {
            return Ok(p);
        }
        let p = match &t.kind {
            crate::Kind::Hf(hf) => {
                let empty = t.encode("", true)?;
                let mut plain = empty.clone();
                plain.extend(t.encode("a", false)?);
                let words = hf.get_pre_tokenizer().is_some();
                let (random, lossy) = match hf.get_model() {
                    tokenizers::models::ModelWrapper::BPE(bpe) => (
                        bpe.dropout.is_some_and(|p| p > 0.0),
                        !bpe.byte_fallback && bpe.unk_token.is_none(),
                    ),
                    _ => (false, false),
                };
                Profile {
                    // A lossy BPE drops the chars it has no token for, and the offsets of the
                    // tokens after them in their word are then off: only a word's first token
                    // has a true offset, so such a tokenizer is cut at words only.
                    cacheable: hf.get_truncation().is_none()
                        && hf.get_padding().is_none()
                        && !random
                        && (words || !lossy),
                    leading: (t.encode("a", true)? == plain).then_some(empty),
                    words,
                }
            }
            crate::Kind::Bytes => Profile {
                cacheable: false,
                leading: None,
                words: false,
            },
        };
        Ok(self.profile.get_or_init(|| p))
    }

    fn full(&self, t: &Tokenizer, text: &str) -> Result<tokenizers::Encoding, TokenError> {
        t.encode_with_offsets(text, false)?
            .ok_or_else(|| TokenError::Tokenizer("not a HF tokenizer".into()))
    }

    fn encode_cached(
        &self,
        t: &Tokenizer,
        text: &str,
        leading: &[u32],
        words: bool,
    ) -> Result<Vec<u32>, TokenError> {
        let bounds = boundaries(text, self.chunk_bytes);
        let found = {
            let mut g = self.inner.lock();
            let found = bounds
                .iter()
                .enumerate()
                .rev()
                .find_map(|(depth, (_, key))| {
                    let r = *g.bounds.get(key)?;
                    Some((depth, r, g.prompts.get(&r.prompt)?.spans.clone()))
                });
            if let Some((_, r, _)) = &found {
                g.touch(r.prompt);
            }
            found
        };
        if let Some((depth, restart, spans)) = found {
            let s = restart.offset as usize;
            if let Some(rest) = text.get(s..) {
                let enc = self.full(t, rest)?;
                if let Some((i, j)) = synchronise(&restart, &enc, words) {
                    let k = restart.token as usize;
                    // The cached ids before the window, then its first `i`: `k + i` in all.
                    let mut kept = Vec::new();
                    let mut need = k;
                    for span in spans.iter() {
                        if need == 0 {
                            break;
                        }
                        let n = span.len.min(need);
                        kept.push(Span {
                            piece: span.piece.clone(),
                            len: n,
                        });
                        need -= n;
                    }
                    if need == 0 {
                        let ids = enc.get_ids();
                        let mut out = Vec::with_capacity(leading.len() + k + i + ids.len() - j);
                        out.extend_from_slice(leading);
                        for span in &kept {
                            out.extend_from_slice(&span.piece.ids[..span.len]);
                        }
                        out.extend_from_slice(&restart.ids[..i]);
                        out.extend_from_slice(&ids[j..]);
                        self.hits.fetch_add(1, Relaxed);
                        self.spliced_tokens.fetch_add((k + i) as u64, Relaxed);
                        // Remember the boundaries after the one used, from the re-encoding.
                        let restarts =
                            restarts(text, &bounds[depth + 1..], &enc, s, k + i, j, words);
                        if let Some(last) = restarts.iter().map(|(_, r)| r.token as usize).max() {
                            let mut tail = restart.ids[..i].to_vec();
                            tail.extend_from_slice(&ids[j..j + (last - k - i)]);
                            kept.extend(pieces(&tail));
                            self.insert(kept, restarts);
                        }
                        return Ok(out);
                    }
                }
            }
            self.rejected.fetch_add(1, Relaxed);
        }
        self.misses.fetch_add(1, Relaxed);
        let enc = self.full(t, text)?;
        let restarts = restarts(text, &bounds, &enc, 0, 0, 0, words);
        if let Some(last) = restarts.iter().map(|(_, r)| r.token as usize).max() {
            self.insert(pieces(&enc.get_ids()[..last]), restarts);
        }
        let mut out = Vec::with_capacity(leading.len() + enc.len());
        out.extend_from_slice(leading);
        out.extend_from_slice(enc.get_ids());
        Ok(out)
    }

    fn insert(&self, spans: Vec<Span>, restarts: Vec<(u128, Restart)>) {
        let upper = spans.iter().map(|s| s.piece.ids.len()).sum::<usize>()
            + restarts.len() * BOUNDARY_COST
            + prompt_cost(spans.len());
        if upper > self.max_tokens {
            return;
        }
        let mut dropped = Vec::new();
        let mut g = self.inner.lock();
        let g = &mut *g;
        g.next_id += 1;
        g.tick += 1;
        let (id, tick) = (g.next_id, g.tick);
        for s in &spans {
            if s.piece.holders.fetch_add(1, Relaxed) == 0 {
                g.held += s.piece.ids.len();
            }
        }
        g.held += prompt_cost(spans.len());
        let mut keys = Vec::with_capacity(restarts.len());
        for (key, mut r) in restarts {
            r.prompt = id;
            keys.push(key);
            match g.bounds.insert(key, r) {
                None => g.held += BOUNDARY_COST,
                Some(old) => {
                    let orphan = g.prompts.get_mut(&old.prompt).is_some_and(|p| {
                        p.owned -= 1;
                        p.owned == 0
                    });
                    if orphan {
                        dropped.extend(g.remove(old.prompt));
                    }
                }
            }
        }
        g.prompts.insert(
            id,
            Prompt {
                spans: spans.into(),
                owned: keys.len(),
                keys,
                tick,
            },
        );
        g.lru.insert(tick, id);
        while g.held > self.max_tokens {
            let Some((&tick, &oldest)) = g.lru.first_key_value() else {
                break;
            };
            match g.remove(oldest) {
                Some(p) => dropped.push(p),
                None => {
                    g.lru.remove(&tick);
                }
            }
        }
        drop(dropped);
    }
}

fn prompt_cost(spans: usize) -> usize {
    PROMPT_COST + SPAN_COST * spans
}

/// Chunk boundaries of `text` with the key (xxh3-128 of the text before it) of each.
fn boundaries(text: &str, chunk: usize) -> Vec<(usize, u128)> {
    let mut out = Vec::with_capacity(text.len() / chunk);
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    let mut prev = 0;
    loop {
        let mut b = prev + chunk;
        if b > text.len() {
            return out;
        }
        // Whether a char ends at `b` depends only on the bytes before it (UTF-8 is
        // self-synchronising), so the positions are a function of the prefix.
        while !text.is_char_boundary(b) {
            b += 1;
        }
        h.update(&text.as_bytes()[prev..b]);
        out.push((b, h.digest128()));
        prev = b;
    }
}

/// Ids in fresh pieces.
fn pieces(ids: &[u32]) -> Vec<Span> {
    ids.chunks(PIECE_TOKENS)
        .map(|c| Span {
            piece: Arc::new(Piece {
                ids: c.into(),
                holders: AtomicU32::new(0),
            }),
            len: c.len(),
        })
        .collect()
}

/// Whether a tokenization (ids, byte offsets, words) may be cut before token `k` (`k >= 1`):
/// `k` starts a word (if words matter), starts exactly where `k - 1` ends and after `k - 1`
/// starts (tokens of one UTF-8 char share its offsets), and, given `text` and where the
/// offsets start in it, at a char boundary.
#[cfg(feature = "hf")]
fn cut_before(
    enc: &tokenizers::Encoding,
    k: usize,
    words: bool,
    text: Option<(&str, usize)>,
) -> bool {
    let (offs, w) = (enc.get_offsets(), enc.get_word_ids());
    (!words || (w[k].is_some() && w[k] != w[k - 1]))
        && offs[k - 1].1 == offs[k].0
        && offs[k - 1].0 < offs[k].0
        && text.is_none_or(|(text, base)| text.is_char_boundary(base + offs[k].0))
}

/// Restart points for `bounds` from `enc`, the tokenization of `text[base..]` whose token
/// `first` is token `global` of `text`'s; tokens before `first` are not used.
#[cfg(feature = "hf")]
fn restarts(
    text: &str,
    bounds: &[(usize, u128)],
    enc: &tokenizers::Encoding,
    base: usize,
    global: usize,
    first: usize,
    words: bool,
) -> Vec<(u128, Restart)> {
    let offs = enc.get_offsets();
    let mut out = Vec::with_capacity(bounds.len());
    for &(b, key) in bounds {
        let limit = b.saturating_sub(MARGIN_BYTES + base);
        // Tokens ending by `limit` (offsets are non-decreasing; if not, this is only a worse
        // choice: the splice check does not depend on it).
        let end = offs.partition_point(|o| o.1 <= limit);
        let Some(top) = end.checked_sub(WINDOW) else {
            continue;
        };
        // The last valid token, preferring one with a second place to synchronise at within
        // the window (the first re-encoded word may differ: a prefix space added to it).
        let mut fallback = None;
        for k in (first + 1..=top).rev().take(SEARCH) {
            let Some(r) = restart_at(enc, k, words, text, base, global + k - first) else {
                continue;
            };
            if r.cuts & ((2 << (WINDOW - AGREE)) - 2) != 0 {
                fallback = Some(r);
                break;
            }
            fallback = fallback.or(Some(r));
        }
        let restart = fallback;
        out.extend(restart.map(|r| (key, r)));
    }
    out
}

/// The restart point at token `k` of `enc` (token `token` of the text), if it may be cut there.
#[cfg(feature = "hf")]
fn restart_at(
    enc: &tokenizers::Encoding,
    k: usize,
    words: bool,
    text: &str,
    base: usize,
    token: usize,
) -> Option<Restart> {
    let (ids, offs) = (enc.get_ids(), enc.get_offsets());
    if !cut_before(enc, k, words, Some((text, base))) {
        return None;
    }
    let mut r = Restart {
        prompt: 0,
        token: u32::try_from(token).ok()?,
        offset: u32::try_from(base + offs[k].0).ok()?,
        ids: [0; WINDOW],
        starts: [0; WINDOW],
        cuts: 1,
    };
    for i in 0..WINDOW {
        r.ids[i] = ids[k + i];
        r.starts[i] = u16::try_from(offs[k + i].0.checked_sub(offs[k].0)?).ok()?;
        if i > 0 && cut_before(enc, k + i, words, Some((text, base))) {
            r.cuts |= 1 << i;
        }
    }
    Some(r)
}

/// Where the re-encoding `enc` of the text from `restart.offset` on synchronises with the
/// cached window: `(i, j)` such that window token `i` and re-encoded token `j` start at the
/// same byte, may both be cut before, and the `AGREE` tokens from there agree in id and start.
#[cfg(feature = "hf")]
fn synchronise(
    restart: &Restart,
    enc: &tokenizers::Encoding,
    words: bool,
) -> Option<(usize, usize)> {
    let (ids, offs) = (enc.get_ids(), enc.get_offsets());
    (0..=WINDOW - AGREE).find_map(|i| {
        if restart.cuts >> i & 1 == 0 {
            return None;
        }
        let want = restart.starts[i] as usize;
        let j = offs.iter().take(2 * WINDOW).position(|o| o.0 == want)?;
        if j + AGREE > ids.len() {
            return None;
        }
        // The char boundary was checked for the window's token.
        if j > 0 && !cut_before(enc, j, words, None) {
            return None;
        }
        (0..AGREE)
            .all(|a| {
                ids[j + a] == restart.ids[i + a] && offs[j + a].0 == restart.starts[i + a] as usize
            })
            .then_some((i, j))
    })
}

#[cfg(all(test, feature = "hf"))]
mod tests {
    use super::*;

    fn tiny() -> Tokenizer {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny");
        Tokenizer::load(Some(&dir.join("tokenizer.json")), None).unwrap()
    }

    impl PrefixCache {
        /// Recomputes what is held and checks the maps agree with each other.
        fn check_invariants(&self) {
            let g = self.inner.lock();
            let mut pieces = std::collections::HashSet::new();
            let mut held = 0;
            for (id, p) in &g.prompts {
                assert_eq!(g.lru.get(&p.tick), Some(id));
                let owned = p.keys.iter().filter(|k| g.bounds[*k].prompt == *id).count();
                assert_eq!(owned, p.owned);
                assert!(owned > 0);
                for s in p.spans.iter() {
                    assert!(s.len <= s.piece.ids.len());
                    if pieces.insert(Arc::as_ptr(&s.piece)) {
                        held += s.piece.ids.len();
                    }
                }
                held += prompt_cost(p.spans.len());
                // The ids before each of its restart points are there.
                let len: usize = p.spans.iter().map(|s| s.len).sum();
                for k in &p.keys {
                    assert!(g.bounds[k].token as usize <= len || g.bounds[k].prompt != *id);
                }
            }
            assert_eq!(g.lru.len(), g.prompts.len());
            for r in g.bounds.values() {
                assert!(g.prompts.contains_key(&r.prompt));
            }
            held += g.bounds.len() * BOUNDARY_COST;
            assert_eq!(held, g.held);
            assert!(g.held <= self.max_tokens);
        }
    }

    fn words(n: usize, seed: u64) -> String {
        let vocab = [
            "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog.", "\n",
        ];
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                vocab[(x % vocab.len() as u64) as usize]
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn offsets_are_byte_offsets() {
        let t = tiny();
        let text = "日本語 é 👍🏽 hello";
        let e = t.encode_with_offsets(text, false).unwrap().unwrap();
        assert_eq!(e.get_offsets().last().unwrap().1, text.len());
        for &(a, b) in e.get_offsets() {
            assert!(text.get(a..b).is_some(), "{a}..{b}");
        }
        assert_eq!(e.get_ids(), t.encode(text, false).unwrap());
    }

    #[test]
    fn boundaries_depend_on_the_prefix_only() {
        let a = "é".repeat(300) + "x";
        let b = "é".repeat(300) + "日本";
        let (ba, bb) = (boundaries(&a, 128), boundaries(&b, 128));
        assert_eq!(ba[..], bb[..ba.len().min(bb.len())]);
        assert!(ba.iter().all(|(b, _)| b % 2 == 0));
    }

    /// Prompts sharing prefixes in various ways, with a small bound: the accounting is exact
    /// after every call, and the answers are.
    #[test]
    fn accounting_is_exact() {
        let t = tiny();
        for max in [3_000, 20_000, 1 << 20] {
            let c = PrefixCache::with_chunk_bytes(max, 128);
            let bases: Vec<String> = (0..5).map(|i| words(300 + 200 * i, i as u64 + 1)).collect();
            for i in 0..60u64 {
                let base = &bases[(i % 5) as usize];
                let x = match i % 3 {
                    0 => base.clone(),
                    1 => format!("{base} {}", words(40, i + 100)),
                    _ => format!("{} {}", &base[..base.len() / 2], words(60, i + 200)),
                };
                assert_eq!(
                    c.encode(&t, &x, false).unwrap(),
                    t.encode(&x, false).unwrap()
                );
                c.check_invariants();
            }
            let s = c.stats();
            assert!(s.hits > 0, "{s:?}");
        }
    }
}
