//! Tokenization as an engine does it: token ids for prompts and chat messages, shared by the
//! simulator (which caches and reports blocks of them) and the router (which must cut a
//! request into the same token blocks to look them up in what the engines report).
//!
//! The default is a fast byte-level approximation: every 4 bytes of text are one token, whose
//! id is those bytes read as a little-endian integer (lossless, no vocabulary, about the
//! 4 characters per token of real BPE vocabularies on English). With the `hf` feature and a
//! `tokenizer.json`, prompts are tokenized exactly as an engine with that tokenizer would, and
//! chat messages are rendered through the model's chat template (minijinja).
#![forbid(unsafe_code)]

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Deserialize;

pub mod cache;
pub use cache::{CacheStats, PrefixCache};

/// Why a tokenizer or template could not be loaded or applied.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("chat template: {0}")]
    Template(String),
    #[error("this build has no HF tokenizer support (feature `hf`)")]
    NoHf,
    #[error("{path} is not a regular file: only files are read as tokenizers or templates")]
    NotAFile { path: String },
    #[error("{path} is larger than {cap} bytes, the most read as a {what}")]
    TooLarge {
        path: String,
        cap: u64,
        what: &'static str,
    },
    #[error("{path} resolves outside {root}, the only directory tokenizers are read from")]
    Outside { path: String, root: String },
}

/// The largest `tokenizer.json` read (the largest real ones are about 20 MB).
pub const MAX_TOKENIZER_BYTES: u64 = 64 << 20;
/// The largest chat template (or `tokenizer_config.json`) read.
pub const MAX_TEMPLATE_BYTES: u64 = 1 << 20;

/// The contents of `path`, refused unless it is a regular file of at most `cap` bytes. Checked
/// before the file is opened (opening a FIFO would block) and again on the open file, and read
/// through a bounded reader: a file that grows, or a device that reports no size, is never read
/// past the cap.
fn read_capped(path: &Path, cap: u64, what: &'static str) -> Result<Vec<u8>, TokenError> {
    let shown = || path.display().to_string();
    let io = |source| TokenError::Read {
        path: shown(),
        source,
    };
    let too_large = || TokenError::TooLarge {
        path: shown(),
        cap,
        what,
    };
    if !std::fs::metadata(path).map_err(io)?.is_file() {
        return Err(TokenError::NotAFile { path: shown() });
    }
    let file = std::fs::File::open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(TokenError::NotAFile { path: shown() });
    }
    if meta.len() > cap {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(cap + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > cap {
        return Err(too_large());
    }
    Ok(bytes)
}

/// `path` with every link resolved, refused unless it lies under `root` (also resolved): a
/// `..` or a symbolic link cannot lead out of the directory.
pub fn resolve_under(root: &Path, path: &Path) -> Result<PathBuf, TokenError> {
    let io = |p: &Path| {
        let p = p.display().to_string();
        move |source| TokenError::Read { path: p, source }
    };
    let root_real = root.canonicalize().map_err(io(root))?;
    let real = path.canonicalize().map_err(io(path))?;
    if real.starts_with(&root_real) && real != root_real {
        Ok(real)
    } else {
        Err(TokenError::Outside {
            path: path.display().to_string(),
            root: root.display().to_string(),
        })
    }
}

/// One chat message, with its content flattened to text.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

/// Bytes per token of the byte-level approximation.
pub const BYTES_PER_TOKEN: usize = 4;

enum Kind {
    Bytes,
    #[cfg(feature = "hf")]
    Hf(Box<tokenizers::Tokenizer>),
}

/// Tokenizer plus chat template of a model.
pub struct Tokenizer {
    kind: Kind,
    #[cfg(feature = "hf")]
    template: Option<(minijinja::Environment<'static>, TemplateTokens)>,
    #[cfg(not(feature = "hf"))]
    template: Option<()>,
}

#[derive(Debug, Clone, Default)]
#[cfg_attr(not(feature = "hf"), allow(dead_code))]
struct TemplateTokens {
    bos: String,
    eos: String,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.kind {
            Kind::Bytes => "Tokenizer(bytes)",
            #[cfg(feature = "hf")]
            Kind::Hf(_) => "Tokenizer(hf)",
        })
    }
}

impl Default for Tokenizer {
    fn default() -> Self {
        Self::bytes()
    }
}

impl Tokenizer {
    /// The byte-level approximation.
    pub fn bytes() -> Self {
        Tokenizer {
            kind: Kind::Bytes,
            template: None,
        }
    }

    /// Loads a HF `tokenizer.json` and optionally a chat template (a Jinja file, or a
    /// `tokenizer_config.json` whose `chat_template`, `bos_token` and `eos_token` are used).
    /// Each file is size-capped ([`MAX_TOKENIZER_BYTES`], [`MAX_TEMPLATE_BYTES`]) and must be a
    /// regular file.
    pub fn load(tokenizer: Option<&Path>, template: Option<&Path>) -> Result<Self, TokenError> {
        let read = |p: &Path| {
            let bytes = read_capped(p, MAX_TEMPLATE_BYTES, "chat template")?;
            String::from_utf8(bytes)
                .map_err(|e| TokenError::Template(format!("{}: {e}", p.display())))
        };
        #[cfg(feature = "hf")]
        {
            let kind = match tokenizer {
                Some(p) => Kind::Hf(Box::new(
                    tokenizers::Tokenizer::from_bytes(read_capped(
                        p,
                        MAX_TOKENIZER_BYTES,
                        "tokenizer",
                    )?)
                    .map_err(|e| TokenError::Tokenizer(format!("{}: {e}", p.display())))?,
                )),
                None => Kind::Bytes,
            };
            let template = match template {
                Some(p) => {
                    let text = read(p)?;
                    let (source, tokens) = if p.extension().is_some_and(|e| e == "json") {
                        let v: serde_json::Value = serde_json::from_str(&text)
                            .map_err(|e| TokenError::Template(format!("{}: {e}", p.display())))?;
                        let field = |k: &str| {
                            v.get(k)
                                .and_then(|x| x.as_str().or_else(|| x.get("content")?.as_str()))
                                .unwrap_or_default()
                                .to_owned()
                        };
                        let src = field("chat_template");
                        if src.is_empty() {
                            return Err(TokenError::Template(format!(
                                "{} has no chat_template",
                                p.display()
                            )));
                        }
                        (
                            src,
                            TemplateTokens {
                                bos: field("bos_token"),
                                eos: field("eos_token"),
                            },
                        )
                    } else {
                        (text, TemplateTokens::default())
                    };
                    let mut env = minijinja::Environment::new();
                    env.add_function("raise_exception", |msg: String| -> Result<String, _> {
                        Err(minijinja::Error::new(
                            minijinja::ErrorKind::InvalidOperation,
                            msg,
                        ))
                    });
                    env.add_template_owned("chat", source)
                        .map_err(|e| TokenError::Template(e.to_string()))?;
                    Some((env, tokens))
                }
                None => None,
            };
            Ok(Tokenizer { kind, template })
        }
        #[cfg(not(feature = "hf"))]
        {
            if tokenizer.is_some() || template.is_some() {
                let _ = read;
                return Err(TokenError::NoHf);
            }
            Ok(Tokenizer::bytes())
        }
    }

    pub fn is_bytes(&self) -> bool {
        matches!(self.kind, Kind::Bytes)
    }

    /// Token ids of `text`. `special` adds the tokenizer's special tokens (BOS), as vLLM does
    /// for completions prompts but not for rendered chats.
    pub fn encode(&self, text: &str, special: bool) -> Result<Vec<u32>, TokenError> {
        match &self.kind {
            Kind::Bytes => {
                let _ = special;
                Ok(encode_bytes(text.as_bytes()))
            }
            #[cfg(feature = "hf")]
            Kind::Hf(t) => t
                .encode(text, special)
                .map(|e| e.get_ids().to_vec())
                .map_err(|e| TokenError::Tokenizer(e.to_string())),
        }
    }

    /// The HF encoding of `text`: its ids, each token's *byte* range in `text`
    /// (`Encoding::get_offsets`; the Rust API's `encode` gives byte offsets, `encode_char_offsets`
    /// char offsets) and the index of the pre-tokenizer word it belongs to. Same ids as
    /// [`Tokenizer::encode`]. `None` for the byte-level approximation. What
    /// [`PrefixCache`] needs to cut a tokenization at a token and splice another onto it.
    #[cfg(feature = "hf")]
    pub fn encode_with_offsets(
        &self,
        text: &str,
        special: bool,
    ) -> Result<Option<tokenizers::Encoding>, TokenError> {
        match &self.kind {
            Kind::Bytes => Ok(None),
            Kind::Hf(t) => t
                .encode(text, special)
                .map(Some)
                .map_err(|e| TokenError::Tokenizer(e.to_string())),
        }
    }

    /// Text of `ids` (lossy where ids do not form valid UTF-8).
    pub fn decode(&self, ids: &[u32]) -> String {
        match &self.kind {
            Kind::Bytes => {
                let mut bytes = Vec::with_capacity(ids.len() * BYTES_PER_TOKEN);
                for id in ids {
                    let b = id.to_le_bytes();
                    let n = b.iter().rposition(|x| *x != 0).map_or(0, |p| p + 1);
                    bytes.extend_from_slice(&b[..n]);
                }
                String::from_utf8_lossy(&bytes).into_owned()
            }
            #[cfg(feature = "hf")]
            Kind::Hf(t) => t.decode(ids, false).unwrap_or_default(),
        }
    }

    /// The prompt text of a chat: the model's template when there is one, otherwise the
    /// default `role: content` lines followed by `assistant:` (the template of the tiny model
    /// the vLLM peer serves).
    pub fn render_chat(&self, messages: &[ChatMessage]) -> Result<String, TokenError> {
        #[cfg(feature = "hf")]
        if let Some((env, tokens)) = &self.template {
            let t = env
                .get_template("chat")
                .map_err(|e| TokenError::Template(e.to_string()))?;
            return t
                .render(minijinja::context! {
                    messages => messages,
                    add_generation_prompt => true,
                    bos_token => tokens.bos,
                    eos_token => tokens.eos,
                })
                .map_err(|e| TokenError::Template(e.to_string()));
        }
        let _ = &self.template;
        let mut s = String::new();
        for m in messages {
            s.push_str(&m.role);
            s.push_str(": ");
            s.push_str(&m.content);
            s.push('\n');
        }
        s.push_str("assistant:");
        Ok(s)
    }

    /// The vocabulary's size (`None` for the byte-level approximation, which has none).
    pub fn vocab_size(&self) -> Option<usize> {
        match &self.kind {
            Kind::Bytes => None,
            #[cfg(feature = "hf")]
            Kind::Hf(t) => Some(t.get_vocab_size(false)),
        }
    }
}

fn encode_bytes(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks(BYTES_PER_TOKEN)
        .map(|c| {
            let mut b = [0u8; 4];
            b[..c.len()].copy_from_slice(c);
            u32::from_le_bytes(b)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("warmpath-tokenize-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A device that never ends, a directory and an oversized file are refused without being
    /// read; a file at the cap is read whole.
    #[test]
    fn only_regular_files_within_the_cap_are_read() {
        let started = std::time::Instant::now();
        assert!(matches!(
            read_capped(Path::new("/dev/zero"), MAX_TOKENIZER_BYTES, "tokenizer"),
            Err(TokenError::NotAFile { .. })
        ));
        assert!(matches!(
            Tokenizer::load(Some(Path::new("/dev/zero")), None),
            Err(TokenError::NotAFile { .. })
        ));
        assert!(matches!(
            Tokenizer::load(None, Some(Path::new("/dev/urandom"))),
            Err(TokenError::NotAFile { .. })
        ));
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        let dir = scratch("cap");
        assert!(matches!(
            read_capped(&dir, 10, "tokenizer"),
            Err(TokenError::NotAFile { .. })
        ));
        let big = dir.join("big.json");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(MAX_TEMPLATE_BYTES + 1)
            .unwrap();
        let e = Tokenizer::load(None, Some(&big)).unwrap_err();
        assert!(
            matches!(
                e,
                TokenError::TooLarge {
                    cap: MAX_TEMPLATE_BYTES,
                    ..
                }
            ),
            "{e}"
        );
        let fits = dir.join("fits.jinja");
        std::fs::write(&fits, b"0123456789").unwrap();
        assert_eq!(read_capped(&fits, 10, "chat template").unwrap().len(), 10);
        assert!(matches!(
            read_capped(&fits, 9, "chat template"),
            Err(TokenError::TooLarge { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `..` and links that lead out of the root are refused; a link within it is followed.
    #[cfg(unix)]
    #[test]
    fn paths_resolve_only_under_the_root() {
        let base = scratch("root");
        let root = base.join("tokenizers");
        std::fs::create_dir_all(root.join("llama")).unwrap();
        let inside = root.join("llama/tokenizer.json");
        std::fs::write(&inside, b"{}").unwrap();
        let outside = base.join("secret");
        std::fs::write(&outside, b"x").unwrap();
        assert_eq!(
            resolve_under(&root, &inside).unwrap(),
            inside.canonicalize().unwrap()
        );
        std::os::unix::fs::symlink(&inside, root.join("alias.json")).unwrap();
        assert!(resolve_under(&root, &root.join("alias.json")).is_ok());
        std::os::unix::fs::symlink(&outside, root.join("escape.json")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", root.join("zero")).unwrap();
        for bad in [
            root.join("escape.json"),
            root.join("zero"),
            root.join("../secret"),
            root.join("llama/../../secret"),
            PathBuf::from("/dev/zero"),
            root.clone(),
        ] {
            assert!(
                matches!(resolve_under(&root, &bad), Err(TokenError::Outside { .. })),
                "{}",
                bad.display()
            );
        }
        assert!(matches!(
            resolve_under(&root, &root.join("missing.json")),
            Err(TokenError::Read { .. })
        ));
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn byte_tokens_are_deterministic_and_lossless() {
        let t = Tokenizer::bytes();
        let ids = t.encode("hello world!", true).unwrap();
        assert_eq!(ids.len(), 3);
        assert_eq!(ids, t.encode("hello world!", true).unwrap());
        assert_eq!(t.decode(&ids), "hello world!");
        assert_eq!(t.encode("hello", true).unwrap().len(), 2);
        // A shared prefix gives shared leading tokens.
        let a = t.encode("The same system prompt. Q1", true).unwrap();
        let b = t.encode("The same system prompt. Q2", true).unwrap();
        assert_eq!(a[..5], b[..5]);
    }

    #[test]
    fn default_chat_rendering_matches_the_tiny_models_template() {
        let t = Tokenizer::bytes();
        let m = vec![
            ChatMessage {
                role: "system".into(),
                content: "be brief".into(),
            },
            ChatMessage {
                role: "user".into(),
                content: "hi".into(),
            },
        ];
        assert_eq!(
            t.render_chat(&m).unwrap(),
            "system: be brief\nuser: hi\nassistant:"
        );
    }

    /// Same ids as the real vLLM engine gave for the tiny model's tokenizer (its `/tokenize`,
    /// captured in the README): prompts and chats through the model's template.
    #[cfg(feature = "hf")]
    #[test]
    fn hf_tokenizer_and_template_match_vllm() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny");
        let t = Tokenizer::load(
            Some(&dir.join("tokenizer.json")),
            Some(&dir.join("tokenizer_config.json")),
        )
        .unwrap();
        assert_eq!(t.encode("hello world", true).unwrap(), vec![318, 337]);
        let chat = t
            .render_chat(&[ChatMessage {
                role: "user".into(),
                content: "hello".into(),
            }])
            .unwrap();
        assert_eq!(chat, "user: hello\nassistant:");
        assert_eq!(
            t.encode(&chat, false).unwrap(),
            vec![86, 84, 260, 27, 303, 289, 200, 66, 300, 324, 27]
        );
        assert!(!t.is_bytes());
        assert!(Tokenizer::load(Some(&dir.join("missing.json")), None).is_err());
    }
}
