//! Deterministic filler text whose length in tokens is known without a tokenizer.
//!
//! Every word is three lowercase letters preceded by a space: four bytes, which is one token
//! under the simulator's byte-level approximation (4 bytes per token) and, for these common
//! English words, one token under the BPE tokenizers of real models as well. So "N tokens of
//! text" means the same thing to the simulator, to a real engine and to the oracle, and shared
//! prefixes end on token boundaries.
//!
//! That alignment flatters any router that cuts text into 4-byte tokens. [`TextStyle::Natural`]
//! takes it away: every filler word is replaced, one for one, by a word of natural English
//! (1 to 15 letters, capitals, punctuation, digits), so prompts keep their sharing structure but
//! shared prefixes end anywhere within a token, and a real tokenizer cuts them as it would cut
//! prose. Sizes stay in 4-byte units of the original filler.

use serde::{Deserialize, Serialize};

use crate::rng::Rng64;
use crate::workload::{Prompt, RequestStream};

/// How filler text reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum TextStyle {
    /// Three-letter words, one 4-byte token each.
    #[default]
    Words,
    /// English words of natural lengths with punctuation: token boundaries do not line up.
    Natural,
}

impl TextStyle {
    pub fn is_words(&self) -> bool {
        *self == TextStyle::Words
    }

    /// The requests of `stream`, their text in this style.
    pub fn apply(self, stream: RequestStream) -> RequestStream {
        match self {
            TextStyle::Words => stream,
            TextStyle::Natural => Box::new(stream.map(|mut r| {
                match &mut r.prompt {
                    Prompt::Text(t) => *t = naturalize(t),
                    Prompt::Chat(ms) => {
                        for m in ms {
                            m.content = naturalize(&m.content);
                        }
                    }
                }
                r
            })),
        }
    }
}

/// Natural words, one per entry of `WORDS` (same index): varied lengths, some capitalized,
/// some with punctuation or digits.
const NATURAL: &[&str] = &[
    "The",
    "of",
    "and",
    "a",
    "to",
    "in",
    "is",
    "you",
    "that",
    "it",
    "he,",
    "was",
    "for",
    "on",
    "are",
    "as",
    "with",
    "his",
    "they",
    "I",
    "at",
    "be",
    "this",
    "have",
    "from",
    "or",
    "one",
    "had",
    "by",
    "word",
    "but",
    "not",
    "what",
    "all",
    "were",
    "we",
    "when",
    "your",
    "can",
    "said:",
    "there",
    "use",
    "an",
    "each",
    "which",
    "she",
    "do",
    "how",
    "their",
    "if",
    "will",
    "up",
    "other",
    "about",
    "out",
    "many",
    "then",
    "them",
    "these",
    "so",
    "some",
    "her",
    "would",
    "make",
    "like",
    "him",
    "into",
    "time",
    "has",
    "look",
    "two",
    "more",
    "write",
    "go",
    "see",
    "number",
    "no",
    "way",
    "could",
    "people",
    "my",
    "than",
    "first",
    "water",
    "been",
    "call",
    "who",
    "oil",
    "its",
    "now",
    "find",
    "long",
    "down",
    "day",
    "did",
    "get",
    "come",
    "made",
    "may",
    "part.",
    "However,",
    "configuration",
    "understanding",
    "implementation",
    "responsibility",
    "(for",
    "example)",
    "\"quoted\"",
    "don't",
    "e.g.",
    "2024",
    "3.14",
    "Kubernetes",
    "inference",
    "latency;",
    "throughput",
    "cache",
    "prefix",
    "tokens",
    "replica",
    "request",
    "response",
    "model",
    "engine",
    "decode",
    "prefill",
    "schedule",
    "router",
    "balance",
    "memory",
    "GPU",
    "TPU",
    "batch",
    "queue",
    "tenant",
    "priority",
    "fairness",
    "Question:",
    "Answer:",
    "assistant",
    "system",
    "user",
    "tool",
    "function",
    "argument",
    "return",
    "value",
    "error",
    "result",
    "file",
    "path",
    "line",
    "code",
    "test",
    "build",
    "deploy",
    "service",
    "cluster",
    "node",
    "pod",
    "container",
    "image",
    "version",
    "release",
    "feature",
    "issue",
    "review",
    "merge",
    "branch",
    "commit",
    "history",
    "summary",
    "detail",
    "context",
    "window",
    "length",
    "budget",
    "limit",
    "policy",
    "score",
    "weight",
    "metric",
    "signal",
    "health",
    "ready",
    "alive",
    "restart",
    "failure",
    "retry",
    "timeout",
    "deadline",
    "stream",
    "chunk",
    "event",
    "block",
    "hash",
    "index",
    "table",
    "map",
    "list",
    "set.",
    "Therefore",
    "because",
    "although",
    "whereas",
    "nevertheless",
    "furthermore",
    "particularly",
    "approximately",
    "significantly",
    "independently",
    "simultaneously",
    "characteristics",
    "recommendations",
    "infrastructure",
    "authentication",
    "authorization",
    "observability",
    "reproducible",
    "deterministic",
    "concurrency",
    "parallelism",
    "2,048",
    "8B",
    "1.5x",
    "p90",
    "100%",
    "v1",
    "HTTP/2",
    "JSON",
    "YAML",
    "API",
    "URL",
    "ID",
    "Mr.",
    "Dr.",
    "St.",
    "etc.",
    "i.e.",
    "vs.",
    "a.m.",
    "p.m.",
    "No.",
    "Fig.",
    "Ch.",
    "Vol.",
    "end.",
    "yes!",
    "no?",
    "ok,",
    "well...",
    "hmm;",
    "right:",
    "so-called",
    "well-known",
    "state-of-the-art",
    "up-to-date",
    "long-term",
    "real-time",
    "end-to-end",
    "day-to-day",
    "Monday",
    "Tuesday",
    "January",
    "February",
    "London",
    "Paris",
    "Tokyo",
    "Berlin",
];

/// `text` with every filler word in its natural counterpart (other text, such as labels, left
/// as it is).
pub fn naturalize(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3 / 2);
    for (i, piece) in text.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        match WORDS.iter().position(|w| *w == piece) {
            Some(k) => out.push_str(NATURAL[k]),
            None => out.push_str(piece),
        }
    }
    out
}

/// Bytes per generated token (one word).
pub const BYTES_PER_TOKEN: usize = 4;

const WORDS: &[&str] = &[
    "the", "and", "for", "are", "but", "not", "you", "all", "any", "can", "had", "her", "was",
    "one", "our", "out", "day", "get", "has", "him", "his", "how", "man", "new", "now", "old",
    "see", "two", "way", "who", "boy", "did", "its", "let", "put", "say", "she", "too", "use",
    "act", "add", "age", "ago", "air", "art", "ask", "bad", "bag", "bed", "big", "bit", "box",
    "bus", "buy", "car", "cat", "cup", "cut", "dog", "dry", "ear", "eat", "egg", "end", "eye",
    "far", "few", "fit", "fix", "fly", "fun", "gas", "god", "gun", "guy", "hat", "hit", "hot",
    "ice", "job", "key", "kid", "lab", "law", "lay", "leg", "lie", "lot", "low", "map", "mix",
    "mom", "net", "oil", "own", "pay", "pen", "per", "pie", "pop", "pot", "raw", "red", "row",
    "run", "sad", "sea", "set", "sit", "six", "sky", "son", "sun", "tax", "tea", "ten", "tie",
    "tip", "top", "toy", "try", "war", "wet", "win", "yes", "yet", "zoo", "arm", "bar", "bat",
    "bet", "bow", "cap", "cow", "dad", "den", "dig", "fan", "fat", "fee", "fog", "fox", "fur",
    "gap", "gum", "hen", "hip", "hog", "hug", "jam", "jar", "jet", "joy", "kit", "lap", "lip",
    "log", "mad", "mat", "mud", "mug", "nap", "nut", "oak", "odd", "owl", "pad", "pan", "pat",
    "pet", "pig", "pin", "pit", "rag", "rat", "rib", "rid", "rim", "rod", "rug", "sap", "saw",
    "sew", "shy", "sip", "ski", "sob", "spy", "sum", "tag", "tan", "tap", "tin", "ton", "tub",
    "van", "vet", "web", "wig", "wit", "yam", "zip", "ant", "ape", "axe", "bee", "bin", "bud",
    "bug", "bun", "cab", "cob", "cod", "cot", "cub", "dam", "dew", "dot", "dub", "elf", "elk",
    "emu", "fig", "fin", "gel", "gem", "gin", "hay", "hem", "hut", "ink", "inn", "ivy", "jaw",
];

/// Append `tokens` words drawn from `rng` to `out`.
pub fn push_words(out: &mut String, rng: &mut Rng64, tokens: usize) {
    out.reserve(tokens * BYTES_PER_TOKEN);
    for _ in 0..tokens {
        out.push(' ');
        out.push_str(WORDS[rng.below(WORDS.len() as u64) as usize]);
    }
}

/// `tokens` words drawn from `rng`.
pub fn words(rng: &mut Rng64, tokens: usize) -> String {
    let mut s = String::new();
    push_words(&mut s, rng, tokens);
    s
}

/// Approximate token count of text built from [`words`] plus short literal labels.
pub fn approx_tokens(text: &str) -> usize {
    text.len().div_ceil(BYTES_PER_TOKEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_word_is_three_ascii_letters_and_distinct() {
        let mut seen = std::collections::HashSet::new();
        for w in WORDS {
            assert_eq!(w.len(), 3, "{w}");
            assert!(w.bytes().all(|b| b.is_ascii_lowercase()), "{w}");
            assert!(seen.insert(*w), "duplicate {w}");
        }
        assert!(WORDS.len() >= 200);
    }

    #[test]
    fn natural_words_are_one_for_one_distinct_and_of_many_lengths() {
        assert!(
            NATURAL.len() >= WORDS.len(),
            "{} < {}",
            NATURAL.len(),
            WORDS.len()
        );
        let mut seen = std::collections::HashSet::new();
        for w in &NATURAL[..WORDS.len()] {
            assert!(!w.is_empty() && !w.contains(' '), "{w:?}");
            assert!(seen.insert(*w), "duplicate {w}");
        }
        let lengths: std::collections::HashSet<usize> = NATURAL.iter().map(|w| w.len()).collect();
        assert!(lengths.len() >= 10, "{lengths:?}");
    }

    #[test]
    fn naturalized_text_keeps_shared_prefixes_and_loses_alignment() {
        let mut rng = Rng64::new(3);
        let shared = words(&mut rng, 40);
        let a = format!("{shared}{}", words(&mut rng, 10));
        let b = format!("{shared}{}", words(&mut rng, 10));
        let (na, nb) = (naturalize(&a), naturalize(&b));
        let ns = naturalize(&shared);
        assert!(na.starts_with(&ns) && nb.starts_with(&ns));
        assert_ne!(na, nb);
        assert_ne!(ns.len(), shared.len());
        // Labels that are not filler pass through.
        assert_eq!(naturalize("group-7: the"), "group-7: The");
    }

    #[test]
    fn words_have_exact_length_and_are_seeded() {
        let a = words(&mut Rng64::new(1), 50);
        assert_eq!(a.len(), 50 * BYTES_PER_TOKEN);
        assert_eq!(approx_tokens(&a), 50);
        assert_eq!(a, words(&mut Rng64::new(1), 50));
        assert_ne!(a, words(&mut Rng64::new(2), 50));
    }
}
