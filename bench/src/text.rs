//! Deterministic filler text whose length in tokens is known without a tokenizer.
//!
//! Every word is three lowercase letters preceded by a space: four bytes, which is one token
//! under the simulator's byte-level approximation (4 bytes per token) and, for these common
//! English words, one token under the BPE tokenizers of real models as well. So "N tokens of
//! text" means the same thing to the simulator, to a real engine and to the oracle, and shared
//! prefixes end on token boundaries.

use crate::rng::Rng64;

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
    fn words_have_exact_length_and_are_seeded() {
        let a = words(&mut Rng64::new(1), 50);
        assert_eq!(a.len(), 50 * BYTES_PER_TOKEN);
        assert_eq!(approx_tokens(&a), 50);
        assert_eq!(a, words(&mut Rng64::new(1), 50));
        assert_ne!(a, words(&mut Rng64::new(2), 50));
    }
}
