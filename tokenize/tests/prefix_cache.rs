//! `PrefixCache::encode` gives exactly `Tokenizer::encode`'s ids, on random texts sharing
//! prefixes, chats, and variants of the tiny model's tokenizer (a BOS post-processor, BOS and
//! EOS, a prefix space, no pre-tokenizer); it stays within its bound; and it hits.
#![cfg(feature = "hf")]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use warmpath_tokenize::{ChatMessage, PrefixCache, Tokenizer};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny")
}

fn tiny() -> Tokenizer {
    let dir = fixture();
    Tokenizer::load(
        Some(&dir.join("tokenizer.json")),
        Some(&dir.join("tokenizer_config.json")),
    )
    .unwrap()
}

/// The tiny tokenizer with its `tokenizer.json` changed by `edit`.
fn variant(name: &str, edit: impl FnOnce(&mut serde_json::Value)) -> Tokenizer {
    let dir = fixture();
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tokenizer.json")).unwrap())
            .unwrap();
    edit(&mut json);
    let path = std::env::temp_dir().join(format!(
        "warmpath-prefix-cache-{}-{name}.json",
        std::process::id()
    ));
    std::fs::write(&path, json.to_string()).unwrap();
    let t = Tokenizer::load(Some(&path), Some(&dir.join("tokenizer_config.json"))).unwrap();
    let _ = std::fs::remove_file(&path);
    t
}

fn template(single: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "type": "TemplateProcessing",
        "single": single,
        "pair": [{ "Sequence": { "id": "A", "type_id": 0 } }],
        "special_tokens": {
            "<s>": { "id": "<s>", "ids": [0], "tokens": ["<s>"] },
            "</s>": { "id": "</s>", "ids": [1], "tokens": ["</s>"] }
        }
    })
}

/// Whether the cache is expected to serve a tokenizer.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    Hits,
    /// Passed through: a BPE that drops unknown chars (their words' offsets are off) without
    /// a pre-tokenizer, so it could only be cut inside its one word.
    Bypass,
}

/// The tokenizers under test: the tiny model's and variants of it.
fn tokenizers() -> Vec<(&'static str, Expect, Tokenizer)> {
    use serde_json::json;
    let bos = json!({ "SpecialToken": { "id": "<s>", "type_id": 0 } });
    let eos = json!({ "SpecialToken": { "id": "</s>", "type_id": 0 } });
    let a = json!({ "Sequence": { "id": "A", "type_id": 0 } });
    // Like SentencePiece BPE (Llama 2): spaces become a marker, one is prepended to the text,
    // no pre-tokenizer.
    let sentencepiece = json!({ "type": "Sequence", "normalizers": [
        { "type": "Replace", "pattern": { "String": " " }, "content": "Ġ" },
        { "type": "Prepend", "prepend": "Ġ" }
    ]});
    vec![
        ("tiny", Expect::Hits, tiny()),
        (
            "bos",
            Expect::Hits,
            variant("bos", |j| j["post_processor"] = template(json!([bos, a]))),
        ),
        (
            "bos_eos",
            Expect::Hits,
            variant("bos_eos", |j| {
                j["post_processor"] = template(json!([bos, a, eos]))
            }),
        ),
        (
            "prefix_space",
            Expect::Hits,
            variant("prefix_space", |j| {
                j["pre_tokenizer"]["add_prefix_space"] = json!(true)
            }),
        ),
        (
            // Offsets trimmed of their leading space.
            "trim_offsets",
            Expect::Hits,
            variant("trim_offsets", |j| {
                j["post_processor"] = json!({ "type": "ByteLevel", "add_prefix_space": false,
                    "trim_offsets": true, "use_regex": true })
            }),
        ),
        (
            // The whole text one word: cut at any token.
            "no_pretokenizer",
            Expect::Hits,
            variant("no_pretokenizer", |j| {
                j["normalizer"] = json!({ "type": "ByteLevel" });
                j["pre_tokenizer"] = json!(null);
                j["model"]["unk_token"] = json!("<s>");
            }),
        ),
        (
            "sentencepiece",
            Expect::Hits,
            variant("sentencepiece", |j| {
                j["normalizer"] = sentencepiece.clone();
                j["pre_tokenizer"] = json!(null);
                j["model"]["unk_token"] = json!("<s>");
            }),
        ),
        (
            "sentencepiece_lossy",
            Expect::Bypass,
            variant("sentencepiece_lossy", |j| {
                j["normalizer"] = sentencepiece.clone();
                j["pre_tokenizer"] = json!(null);
            }),
        ),
    ]
}

/// Pieces of text, weighted towards what makes tokenization cuts hard: whitespace runs and
/// long words (across boundaries), contractions, digits, unicode (multi-byte chars split into
/// byte tokens, combining marks), special tokens inside the text.
fn atom() -> impl Strategy<Value = String> {
    let words = [
        "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "Answer", "question",
        "hello", "world", "a", "I",
    ];
    prop_oneof![
        6 => prop::sample::select(words.to_vec()).prop_map(|w| format!(" {w}")),
        2 => prop::sample::select(words.to_vec()).prop_map(str::to_owned),
        3 => prop::sample::select(vec![
            " ", "  ", "   ", "\n", "\n\n", "\t", " \n", "\r\n", "    \n  ", "\n ",
        ])
        .prop_map(str::to_owned),
        2 => prop::sample::select(vec![
            ".", ",", "!", "?", "'s", "'ll", "'re", "--", "...", ":", "{", "}", "\"", "(", ")",
            "##", "://",
        ])
        .prop_map(str::to_owned),
        1 => prop::sample::select(vec!["123", "4", " 2024", "3.14", "0x1f"])
            .prop_map(str::to_owned),
        2 => prop::sample::select(vec![
            "日本語", " é", "é", "👍🏽", "ß", "\u{200b}", "e\u{301}", " Ωμέγα", "中", "🙂",
            "\u{feff}",
        ])
        .prop_map(str::to_owned),
        1 => prop::sample::select(vec!["<s>", "</s>", " <s>", "</s> ", "<s"])
            .prop_map(str::to_owned),
        1 => (1usize..300).prop_map(|n| "a".repeat(n)),
        1 => (1usize..300).prop_map(|n| " ".repeat(n)),
        1 => (1usize..100).prop_map(|n| "\n".repeat(n)),
        1 => "[a-zA-Z0-9 .,\n]{1,24}",
        1 => any::<char>().prop_map(String::from),
    ]
}

fn text(atoms: std::ops::Range<usize>) -> impl Strategy<Value = String> {
    prop::collection::vec(atom(), atoms).prop_map(|v| v.concat())
}

/// The longest prefix of `s` of at most `n` bytes.
fn cut(s: &str, n: usize) -> &str {
    let mut n = n.min(s.len());
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    &s[..n]
}

#[derive(Default)]
struct Tally {
    hits: AtomicU64,
    rejected: AtomicU64,
    misses: AtomicU64,
    bypassed: AtomicU64,
}

impl Tally {
    fn add(&self, c: &PrefixCache) {
        let s = c.stats();
        self.hits.fetch_add(s.hits, Relaxed);
        self.rejected.fetch_add(s.rejected, Relaxed);
        self.misses.fetch_add(s.misses, Relaxed);
        self.bypassed.fetch_add(s.bypassed, Relaxed);
    }
}

fn check(c: &PrefixCache, t: &Tokenizer, x: &str, special: bool) -> Result<(), TestCaseError> {
    let want = t.encode(x, special).unwrap();
    let got = c.encode(t, x, special).unwrap();
    if got != want {
        let at = got.iter().zip(&want).take_while(|(a, b)| a == b).count();
        let around = |v: &[u32]| v[at.saturating_sub(4)..(at + 8).min(v.len())].to_vec();
        return Err(TestCaseError::fail(format!(
            "special {special}, {} bytes: {} ids, want {}, first difference at {at}: {:?} vs {:?} \
             (decoded {:?} vs {:?})",
            x.len(),
            got.len(),
            want.len(),
            around(&got),
            around(&want),
            t.decode(&around(&got)),
            t.decode(&around(&want)),
        )));
    }
    Ok(())
}

fn cases(n: u32) -> Config {
    Config {
        cases: std::env::var("PREFIX_CACHE_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(n),
        failure_persistence: None,
        ..Config::default()
    }
}

/// A shared prefix with several suffixes, the prefix cut at a random place (a space or a word
/// running across a boundary), and the texts again (now all known): the cache gives the full
/// tokenization's ids every time, for both `special` values and every tokenizer variant.
#[test]
fn cached_ids_are_the_full_tokenizations() {
    for (name, expect, t) in tokenizers() {
        let tally = Tally::default();
        let strategy = (
            text(20..250),
            prop::collection::vec(text(0..30), 1..4),
            any::<prop::sample::Index>(),
            prop::sample::select(vec![128usize, 200, 512, 2048]),
            any::<bool>(),
        );
        TestRunner::new(cases(24))
            .run(&strategy, |(prefix, suffixes, at, chunk, special)| {
                let c = PrefixCache::with_chunk_bytes(1 << 20, chunk);
                let mut texts: Vec<String> =
                    suffixes.iter().map(|s| format!("{prefix}{s}")).collect();
                let short = cut(&prefix, at.index(prefix.len() + 1));
                texts.push(format!("{short}{}", suffixes[0]));
                texts.push(short.to_owned());
                for x in texts.iter().chain(texts.iter().rev()) {
                    check(&c, &t, x, special)?;
                }
                tally.add(&c);
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let (hits, rejected, misses, bypassed) = (
            tally.hits.load(Relaxed),
            tally.rejected.load(Relaxed),
            tally.misses.load(Relaxed),
            tally.bypassed.load(Relaxed),
        );
        eprintln!("{name}: hits {hits} misses {misses} (rejected {rejected}) bypassed {bypassed}");
        match expect {
            Expect::Hits => assert!(hits > 0, "{name}: no hits"),
            Expect::Bypass => assert_eq!(hits + misses, 0, "{name}"),
        }
    }
}

fn message(role: &str, content: String) -> ChatMessage {
    ChatMessage {
        role: role.into(),
        content,
    }
}

/// Chats rendered through the tiny model's template: a conversation growing turn by turn
/// and other users' first turns under the same system prompt.
#[test]
fn cached_chat_ids_are_the_full_tokenizations() {
    let t = tiny();
    let strategy = (
        text(50..300),
        prop::collection::vec(text(1..40), 2..6),
        prop::sample::select(vec![128usize, 1024]),
    );
    let tally = Tally::default();
    TestRunner::new(cases(24))
        .run(&strategy, |(system, turns, chunk)| {
            let c = PrefixCache::with_chunk_bytes(1 << 20, chunk);
            let mut chat = vec![message("system", system.clone())];
            for (n, turn) in turns.iter().enumerate() {
                let role = if n % 2 == 0 { "user" } else { "assistant" };
                chat.push(message(role, turn.clone()));
                check(&c, &t, &t.render_chat(&chat).unwrap(), false)?;
                let other = [
                    message("system", system.clone()),
                    message("user", format!("{turn} again")),
                ];
                check(&c, &t, &t.render_chat(&other).unwrap(), false)?;
            }
            tally.add(&c);
            Ok(())
        })
        .unwrap();
    eprintln!(
        "chats: hits {} misses {} (rejected {})",
        tally.hits.load(Relaxed),
        tally.misses.load(Relaxed),
        tally.rejected.load(Relaxed)
    );
    assert!(tally.hits.load(Relaxed) > 0);
}

fn words(n: usize, seed: u64) -> String {
    let vocab = [
        "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog.", "Answer", "question",
    ];
    let mut s = String::new();
    let mut x = seed | 1;
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push_str(vocab[(x % vocab.len() as u64) as usize]);
        s.push(' ');
    }
    s
}

/// A 20k-word system prompt seen before: the next request's prompt is spliced, almost all of
/// it from the cache, and is the full tokenization; the shared prompt is held once.
#[test]
fn a_known_system_prompt_hits() {
    let t = tiny();
    let c = PrefixCache::new(1 << 20);
    let system = words(20_000, 7);
    for (n, question) in ["What is the fox?", "And the dog?", "Why?"]
        .iter()
        .enumerate()
    {
        let chat = t
            .render_chat(&[
                message("system", system.clone()),
                message("user", question.to_string()),
            ])
            .unwrap();
        let want = t.encode(&chat, false).unwrap();
        assert_eq!(c.encode(&t, &chat, false).unwrap(), want);
        let s = c.stats();
        assert_eq!(s.hits, n as u64, "{s:?}");
        if n > 0 {
            assert!(
                s.spliced_tokens as usize >= n * (want.len() - 1000),
                "{s:?} of {}",
                want.len()
            );
            // The system prompt's ids are shared, not held once per request.
            assert!(s.held < want.len() * 3 / 2, "{s:?}");
        }
    }
    assert_eq!(c.stats().misses, 1);
}

/// Many distinct prompts: the units held never exceed the bound, old prompts are dropped, and
/// the answers stay exact.
#[test]
fn the_bound_holds_under_many_distinct_prompts() {
    let t = tiny();
    let max = 6_000;
    let c = PrefixCache::with_chunk_bytes(max, 256);
    let mut peak = 0;
    for i in 0..120u64 {
        // Every fourth prompt shares a prefix with the previous one.
        let x = if i % 4 == 3 {
            format!("{}{}", words(400, i - 1), words(30, i))
        } else {
            words(300 + (i as usize * 37) % 500, i)
        };
        assert_eq!(
            c.encode(&t, &x, i % 2 == 0).unwrap(),
            t.encode(&x, i % 2 == 0).unwrap()
        );
        let s = c.stats();
        assert!(s.held <= max, "{s:?}");
        peak = peak.max(s.held);
    }
    let s = c.stats();
    assert!(peak > max / 2, "peak {peak}");
    assert!(s.prompts < 120 && s.prompts > 0, "{s:?}");
    assert!(s.hits > 0, "{s:?}");
    // A prompt larger than the whole cache is not remembered.
    let c = PrefixCache::with_chunk_bytes(100, 256);
    let x = words(2000, 3);
    assert_eq!(
        c.encode(&t, &x, false).unwrap(),
        t.encode(&x, false).unwrap()
    );
    assert_eq!(c.stats().prompts, 0);
}

/// The byte-level approximation passes through.
#[test]
fn bytes_pass_through() {
    let t = Tokenizer::bytes();
    let c = PrefixCache::new(1 << 16);
    let x = words(2000, 5);
    assert_eq!(c.encode(&t, &x, true).unwrap(), t.encode(&x, true).unwrap());
    let s = c.stats();
    assert_eq!((s.bypassed, s.hits, s.misses, s.prompts), (1, 0, 0, 0));
}

/// Concurrent requests on one cache, sharing a system prompt.
#[test]
fn concurrent_use() {
    let t = Arc::new(tiny());
    let c = Arc::new(PrefixCache::with_chunk_bytes(1 << 18, 512));
    let system = Arc::new(words(3000, 11));
    let threads: Vec<_> = (0..4u64)
        .map(|n| {
            let (t, c, system) = (t.clone(), c.clone(), system.clone());
            std::thread::spawn(move || {
                for i in 0..6 {
                    let x = format!("{system}\nuser {n}: {}", words(20, n * 100 + i));
                    assert_eq!(
                        c.encode(&t, &x, false).unwrap(),
                        t.encode(&x, false).unwrap()
                    );
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    assert!(c.stats().hits > 0, "{:?}", c.stats());
}
