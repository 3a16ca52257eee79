//! Tokenization in the simulator: the shared tokenizer ([`warmpath_tokenize`]), and the tokens
//! of simulated completions.

use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::SplitMix64;

pub use warmpath_tokenize::{ChatMessage, TokenError, Tokenizer, BYTES_PER_TOKEN};

/// Words a simulated completion is made of: 4 bytes each, so that each is one byte-level token.
const WORDS: [&str; 16] = [
    " the", " and", " for", " you", " are", " not", " but", " all", " can", " her", " was", " one",
    " our", " out", " day", " get",
];

/// The `i`-th token of a simulated completion seeded by `seed`: deterministic, so the same
/// request gives the same text everywhere.
pub fn sample(tokenizer: &Tokenizer, seed: u64, i: usize) -> u32 {
    let r = splitmix(seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    match tokenizer.vocab_size() {
        None => {
            let w = WORDS[(r % WORDS.len() as u64) as usize].as_bytes();
            u32::from_le_bytes([w[0], w[1], w[2], w[3]])
        }
        Some(vocab) => (r % vocab.max(1) as u64) as u32,
    }
}

/// One SplitMix64 output for `x`: a stateless hash, so token `i` needs no state from token `i - 1`.
fn splitmix(x: u64) -> u64 {
    SplitMix64::seed_from_u64(x).next_u64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampled_words_are_single_byte_tokens() {
        let t = Tokenizer::bytes();
        let ids: Vec<u32> = (0..8).map(|i| sample(&t, 42, i)).collect();
        assert_eq!(ids, (0..8).map(|i| sample(&t, 42, i)).collect::<Vec<_>>());
        let text = t.decode(&ids);
        assert_eq!(t.encode(&text, true).unwrap(), ids);
    }

    /// Outputs of the hand-written SplitMix64 this module had before it used `rand_xoshiro`:
    /// simulated completions (and so benchmark token counts) were generated from them.
    #[test]
    fn splitmix_outputs_never_change() {
        assert_eq!(splitmix(0), 0xe220_a839_7b1d_cdaf);
        assert_eq!(splitmix(1), 0x910a_2dec_8902_5cc1);
        assert_eq!(splitmix(42), 0xbdd7_3226_2feb_6e95);
        assert_eq!(splitmix(0xdead_beef), 0x4adf_b90f_68c9_eb9b);
    }
}
