//! Replay of a recorded production trace in the Mooncake format (FAST'25 release,
//! `FAST25-release/traces/*.jsonl`): one JSON object a line with `timestamp` (ms from the trace's
//! start), `input_length` and `output_length` (tokens) and `hash_ids`, one id per 512-token block
//! of the prompt, equal ids meaning equal blocks (and, ids being prefix hashes, equal prefixes).
//!
//! Each request is rebuilt so that two prompts share exactly the blocks the trace says they
//! share: block id `h` is always the same `block_tokens` words (seeded by `h` alone), and a prompt
//! is its blocks' words in order, the last one cut to the prompt's length. Requests arrive at the
//! trace's times divided by `time_scale` (run with `--mode trace`).
//!
//! Scaling, and what it keeps. A trace block (`source_block_tokens`, 512 in Mooncake's traces)
//! becomes `block_tokens` tokens (by default one KV block of the target fleet), and every length
//! with it: prompt and output lengths are multiplied by `block_tokens / source_block_tokens`
//! (at least one token). What is kept: which requests share which blocks, in which order and at
//! which relative times; each prompt's length relative to the others; the prefill to decode
//! ratio of every request. What changes: the absolute sizes (so the trace's cache footprint
//! against the fleet's KV cache is set by the scale: `describe` prints it) and the absolute rate
//! (`time_scale`). `max_input_tokens` cuts longer prompts at the end (their shared prefix stays),
//! for engines with a short context.
//!
//! A run covers a window of `window` consecutive requests (its `--requests`); each seed starts its
//! window at a different place in the trace (a seeded uniform offset; windows of different seeds
//! may overlap), unless `start` fixes it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Prompt, WorkRequest};
use crate::rng::Rng64;
use crate::text;

/// The block size of Mooncake's traces, in tokens.
pub const MOONCAKE_BLOCK_TOKENS: u32 = 512;

/// Sub-stream of the window offset; and the constant every block's words are drawn under (so
/// that a block reads the same whatever the seed).
const OFFSET_STREAM: u64 = 0x7472_6163_0001;
const BLOCK_TEXT_SEED: u64 = 0x7472_6163_b10c;
/// Sub-stream of the unshared words that pad a prompt longer than its blocks (never in
/// Mooncake's traces, whose ids cover every prompt exactly; other producers may differ).
const PAD_STREAM: u64 = 0x7472_6163_0002;

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("reading trace {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("trace {path}, line {line}: {message}")]
    Line {
        path: String,
        line: usize,
        message: String,
    },
    #[error("trace {0} holds no request")]
    Empty(String),
}

/// One request of the trace, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct TraceRecord {
    pub timestamp: u64,
    pub input_length: u64,
    pub output_length: u64,
    pub hash_ids: Vec<u64>,
}

/// The records of a loaded trace. They follow from the file, which the spec names by path and
/// digest; so specs compare by those, and a spec read back from a result file holds none (it
/// describes the run; it cannot replay it without the file).
#[derive(Debug, Clone, Default)]
pub struct TraceRecords(Arc<Vec<TraceRecord>>);

impl PartialEq for TraceRecords {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    /// The file, as given.
    pub path: String,
    /// xxh3-64 of the file's bytes: which trace this was, wherever it lay.
    pub digest: String,
    /// Requests in the file.
    pub records: u64,
    /// Distinct block ids that occur in two or more requests of the file.
    pub reused_blocks: u64,
    /// Tokens of one trace block in the trace.
    pub source_block_tokens: u32,
    /// Tokens one trace block becomes.
    pub block_tokens: u32,
    /// Trace time is divided by this: 10 replays ten times faster.
    pub time_scale: f64,
    /// Requests a run covers (its `--requests`; the whole trace without one).
    pub window: u64,
    /// The first request of the window; without it each seed draws one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<u64>,
    /// Prompts longer than this (after scaling) are cut to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_input_tokens: Option<u32>,
    #[serde(skip)]
    pub loaded: TraceRecords,
}

impl Trace {
    /// Reads a Mooncake-format trace; `block_tokens` is what one of its 512-token blocks becomes.
    pub fn load(path: &Path, block_tokens: u32) -> Result<Self, TraceError> {
        let shown = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|source| TraceError::Io {
            path: shown.clone(),
            source,
        })?;
        let mut records = Vec::new();
        for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let r: TraceRecord = serde_json::from_slice(line).map_err(|e| TraceError::Line {
                path: shown.clone(),
                line: i + 1,
                message: e.to_string(),
            })?;
            if let Some(prev) = records.last().map(|p: &TraceRecord| p.timestamp) {
                if r.timestamp < prev {
                    return Err(TraceError::Line {
                        path: shown,
                        line: i + 1,
                        message: format!("timestamp {} before the previous {prev}", r.timestamp),
                    });
                }
            }
            records.push(r);
        }
        if records.is_empty() {
            return Err(TraceError::Empty(shown));
        }
        let mut uses: HashMap<u64, u32> = HashMap::new();
        for r in &records {
            for h in &r.hash_ids {
                *uses.entry(*h).or_default() += 1;
            }
        }
        let reused_blocks = uses.values().filter(|n| **n >= 2).count() as u64;
        Ok(Self {
            path: shown,
            digest: format!("{:016x}", xxhash_rust::xxh3::xxh3_64(&bytes)),
            records: records.len() as u64,
            reused_blocks,
            source_block_tokens: MOONCAKE_BLOCK_TOKENS,
            block_tokens: block_tokens.max(1),
            time_scale: 1.0,
            window: records.len() as u64,
            start: None,
            max_input_tokens: None,
            loaded: TraceRecords(Arc::new(records)),
        })
    }

    /// Tokens of the blocks that are reused somewhere in the trace, scaled: what a cache must
    /// hold to serve every reuse.
    pub fn prefix_working_set(&self) -> u64 {
        self.reused_blocks * u64::from(self.block_tokens)
    }

    /// Where a seed's window starts.
    pub fn window_start(&self, seed: u64) -> u64 {
        let n = self.loaded.0.len() as u64;
        let window = self.window.clamp(1, n.max(1));
        match self.start {
            Some(s) => s.min(n.saturating_sub(window)),
            None => Rng64::derive(seed, OFFSET_STREAM).below(n - window + 1),
        }
    }

    fn scale(&self, tokens: u64) -> u64 {
        let scaled = tokens as f64 * f64::from(self.block_tokens)
            / f64::from(self.source_block_tokens.max(1));
        (scaled.round() as u64).max(1)
    }

    /// The window's requests, each with its arrival time in seconds from the window's first.
    /// Finite: a run asking for more than the window gets the window.
    pub fn stream(&self, seed: u64) -> impl Iterator<Item = WorkRequest> + Send {
        let spec = self.clone();
        let records = self.loaded.0.clone();
        let start = if records.is_empty() {
            0
        } else {
            self.window_start(seed) as usize
        };
        let end = (start + self.window.max(1) as usize).min(records.len());
        let t0 = records.get(start).map_or(0, |r| r.timestamp);
        let mut blocks: HashMap<u64, Arc<str>> = HashMap::new();
        (start..end).map(move |i| {
            let r = &records[i];
            let mut tokens = spec.scale(r.input_length);
            if let Some(max) = spec.max_input_tokens {
                tokens = tokens.min(u64::from(max.max(1)));
            }
            let mut prompt = String::with_capacity(tokens as usize * text::BYTES_PER_TOKEN);
            let per_block = u64::from(spec.block_tokens);
            let mut left = tokens;
            for h in &r.hash_ids {
                if left == 0 {
                    break;
                }
                // Bounded by the run's window, which the caller chose: at most the trace's
                // distinct blocks in it.
                let words = blocks.entry(*h).or_insert_with(|| {
                    let mut rng = Rng64::derive(BLOCK_TEXT_SEED, *h);
                    text::words(&mut rng, per_block as usize).into()
                });
                let take = left.min(per_block);
                prompt.push_str(&words[..take as usize * text::BYTES_PER_TOKEN]);
                left -= take;
            }
            if left > 0 {
                let mut rng = Rng64::derive(seed ^ PAD_STREAM, i as u64);
                text::push_words(&mut prompt, &mut rng, left as usize);
            }
            WorkRequest {
                session: None,
                tenant: None,
                prompt: Prompt::Text(prompt),
                max_tokens: spec.scale(r.output_length).min(u64::from(u32::MAX)) as u32,
                arrival: Some(Duration::from_secs_f64(
                    (r.timestamp - t0) as f64 / 1000.0 / spec.time_scale.max(f64::MIN_POSITIVE),
                )),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn trace_file(lines: &[&str]) -> tempfile_path::TempPath {
        let p = tempfile_path::TempPath::new();
        let mut f = std::fs::File::create(&p.0).unwrap();
        for l in lines {
            writeln!(f, "{l}").unwrap();
        }
        p
    }

    /// A file removed when dropped (the bench crate has no tempfile dependency).
    mod tempfile_path {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        pub struct TempPath(pub std::path::PathBuf);
        impl TempPath {
            pub fn new() -> Self {
                Self(std::env::temp_dir().join(format!(
                    "warmpath-trace-{}-{}.jsonl",
                    std::process::id(),
                    N.fetch_add(1, Ordering::Relaxed)
                )))
            }
        }
        impl Drop for TempPath {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(&self.0);
            }
        }
    }

    const SAMPLE: [&str; 4] = [
        r#"{"timestamp": 0, "input_length": 1100, "output_length": 64, "hash_ids": [0, 1, 2]}"#,
        r#"{"timestamp": 500, "input_length": 1300, "output_length": 128, "hash_ids": [0, 1, 3]}"#,
        r#"{"timestamp": 1500, "input_length": 300, "output_length": 5, "hash_ids": [9]}"#,
        r#"{"timestamp": 4000, "input_length": 1024, "output_length": 32, "hash_ids": [0, 4]}"#,
    ];

    fn text_of(r: &WorkRequest) -> &str {
        match &r.prompt {
            Prompt::Text(t) => t,
            Prompt::Chat(_) => panic!("text expected"),
        }
    }

    fn shared_tokens(a: &str, b: &str) -> usize {
        a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count() / text::BYTES_PER_TOKEN
    }

    #[test]
    fn prompts_share_exactly_the_blocks_the_trace_says() {
        let f = trace_file(&SAMPLE);
        let t = Trace::load(&f.0, 16).unwrap();
        assert_eq!(t.records, 4);
        // Block 0 is in three requests, block 1 in two: nothing else is reused.
        assert_eq!(t.reused_blocks, 2);
        assert_eq!(t.prefix_working_set(), 32);
        let reqs: Vec<_> = Trace {
            start: Some(0),
            ..t
        }
        .stream(1)
        .collect();
        assert_eq!(reqs.len(), 4);
        // 1100 tokens × 16/512 = 34.4 → 34; 1300 → 40.6 → 41; 300 → 9.4 → 9; 1024 → 32.
        let lens: Vec<usize> = reqs
            .iter()
            .map(|r| text::approx_tokens(text_of(r)))
            .collect();
        assert_eq!(lens, [34, 41, 9, 32]);
        // Outputs scale alike: 64 → 2, 128 → 4, 5 → 0.16 → at least 1, 32 → 1.
        let outs: Vec<u32> = reqs.iter().map(|r| r.max_tokens).collect();
        assert_eq!(outs, [2, 4, 1, 1]);
        // Requests 0 and 1 share blocks 0 and 1 (32 tokens) and no more: their third blocks
        // (2 and 3) differ from the first word on (barring a one-in-256 same first word).
        let (a, b, c, d) = (
            text_of(&reqs[0]),
            text_of(&reqs[1]),
            text_of(&reqs[2]),
            text_of(&reqs[3]),
        );
        assert!(
            (32..34).contains(&shared_tokens(a, b)),
            "{}",
            shared_tokens(a, b)
        );
        assert!(shared_tokens(a, c) < 3);
        assert!((16..18).contains(&shared_tokens(a, d)));
        assert!((16..18).contains(&shared_tokens(b, d)));
    }

    #[test]
    fn arrivals_follow_the_trace_scaled_in_time_from_the_window_start() {
        let f = trace_file(&SAMPLE);
        let t = Trace {
            time_scale: 2.0,
            start: Some(1),
            window: 3,
            ..Trace::load(&f.0, 16).unwrap()
        };
        let at: Vec<f64> = t
            .stream(7)
            .map(|r| r.arrival.unwrap().as_secs_f64())
            .collect();
        assert_eq!(at, [0.0, 0.5, 1.75]);
    }

    #[test]
    fn seeds_start_their_windows_in_different_places_and_repeat_themselves() {
        let lines: Vec<String> = (0..200)
            .map(|i| {
                format!(r#"{{"timestamp": {i}, "input_length": 512, "output_length": 1, "hash_ids": [{i}]}}"#)
            })
            .collect();
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        let f = trace_file(&lines);
        let t = Trace {
            window: 50,
            ..Trace::load(&f.0, 16).unwrap()
        };
        let starts: Vec<u64> = (1..=10).map(|s| t.window_start(s)).collect();
        assert!(starts.iter().all(|s| *s <= 150), "{starts:?}");
        let distinct: std::collections::HashSet<_> = starts.iter().collect();
        assert!(distinct.len() >= 8, "{starts:?}");
        let a: Vec<_> = t.stream(3).collect();
        assert_eq!(a, t.stream(3).collect::<Vec<_>>());
        assert_eq!(a.len(), 50);
        assert_eq!(a[0].arrival, Some(Duration::ZERO));
    }

    #[test]
    fn long_prompts_are_cut_keeping_their_prefix() {
        let f = trace_file(&SAMPLE);
        let full = Trace {
            start: Some(0),
            ..Trace::load(&f.0, 16).unwrap()
        };
        let cut = Trace {
            max_input_tokens: Some(20),
            ..full.clone()
        };
        let a: Vec<_> = full.stream(1).collect();
        let b: Vec<_> = cut.stream(1).collect();
        assert_eq!(text::approx_tokens(text_of(&b[1])), 20);
        assert!(text_of(&a[1]).starts_with(text_of(&b[1])));
        assert_eq!(text_of(&a[2]), text_of(&b[2]));
    }

    #[test]
    fn bad_files_are_refused_with_the_line() {
        let f = trace_file(&[SAMPLE[0], "{\"timestamp\": 3}"]);
        let e = Trace::load(&f.0, 16).unwrap_err().to_string();
        assert!(e.contains("line 2"), "{e}");
        let f = trace_file(&[SAMPLE[1], SAMPLE[0]]);
        let e = Trace::load(&f.0, 16).unwrap_err().to_string();
        assert!(e.contains("before the previous"), "{e}");
        let f = trace_file(&["", "  "]);
        assert!(matches!(Trace::load(&f.0, 16), Err(TraceError::Empty(_))));
        assert!(matches!(
            Trace::load(Path::new("/nonexistent/trace.jsonl"), 16),
            Err(TraceError::Io { .. })
        ));
    }

    #[test]
    fn a_spec_read_back_from_a_result_describes_but_replays_nothing() {
        let f = trace_file(&SAMPLE);
        let t = Trace::load(&f.0, 16).unwrap();
        let json = serde_json::to_string(&super::super::WorkloadSpec::Trace(t.clone())).unwrap();
        assert!(json.contains("\"kind\":\"trace\""), "{json}");
        let back: super::super::WorkloadSpec = serde_json::from_str(&json).unwrap();
        assert_eq!(back, super::super::WorkloadSpec::Trace(t));
        assert_eq!(back.requests(1).count(), 0);
    }
}
