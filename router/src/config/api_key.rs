//! API keys as the router holds them: a keyed hash, never the key.
//!
//! The router faces the internet; its memory (a core dump, a heap read through some future
//! bug, a `Debug` print of a table) should not give anyone a key that works. Each key is kept
//! as HMAC-SHA256 under a secret drawn when the process starts, and a request's bearer token is
//! hashed the same way to be looked up: equal keys give equal digests within one process, and a
//! digest taken out of it is worth nothing elsewhere (nor can it be checked against guesses
//! without the process's secret).

use hmac::{Hmac, Mac};
use serde::{Deserialize, Deserializer};
use sha2::Sha256;
use std::fmt;
use std::sync::OnceLock;

/// The shortest key accepted: a shorter one is guessable.
pub const MIN_KEY_LEN: usize = 8;
/// The longest (as every other header value the router keeps).
pub const MAX_KEY_LEN: usize = 256;

/// The process's hashing secret, drawn on first use.
fn process_secret() -> &'static [u8; 32] {
    static SECRET: OnceLock<[u8; 32]> = OnceLock::new();
    SECRET.get_or_init(rand::random)
}

/// The keyed hash of one key.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyDigest([u8; 32]);

impl KeyDigest {
    /// The digest of `key` in this process.
    pub fn of(key: &[u8]) -> Self {
        let mut mac = Hmac::<Sha256>::new_from_slice(process_secret())
            .expect("HMAC takes keys of any length");
        mac.update(key);
        Self(mac.finalize().into_bytes().into())
    }

    /// The digest's bytes (to keep it where only bytes fit, see [`KeyDigest::from_bytes`]).
    pub fn to_bytes(self) -> [u8; 32] {
        self.0
    }

    /// A digest from [`KeyDigest::to_bytes`] of this process; `None` for any other length.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(Self)
    }
}

impl fmt::Debug for KeyDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyDigest(..)")
    }
}

/// What is wrong with a value given as an API key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KeyShape {
    /// Not text.
    NotUtf8,
    /// Spaces, control or non-ASCII characters (after trimming), or longer than
    /// [`MAX_KEY_LEN`].
    NotVisibleAscii,
    /// Shorter than [`MIN_KEY_LEN`].
    TooShort,
}

impl KeyShape {
    /// What is wrong with `key`, if anything (`key` as given, before trimming).
    pub fn check(key: &str) -> Option<Self> {
        if key.len() > MAX_KEY_LEN || !key.bytes().all(|b| b.is_ascii_graphic()) {
            Some(Self::NotVisibleAscii)
        } else if key.len() < MIN_KEY_LEN {
            Some(Self::TooShort)
        } else {
            None
        }
    }
}

impl fmt::Display for KeyShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NotUtf8 => "is not UTF-8",
            Self::NotVisibleAscii => "has characters other than visible ASCII, or more than 256",
            Self::TooShort => "is shorter than 8 characters",
        })
    }
}

/// An API key of a tenant: its digest, and whether the value given was usable as a key (the
/// configuration's validation refuses the file otherwise, naming the entry, never the value).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ApiKey {
    digest: KeyDigest,
    shape: Option<KeyShape>,
}

impl ApiKey {
    /// The key `text` (as written: the caller trims).
    pub fn new(text: &str) -> Self {
        Self {
            digest: KeyDigest::of(text.as_bytes()),
            shape: KeyShape::check(text),
        }
    }

    /// A well-formed key known only by its digest.
    pub fn from_digest(digest: KeyDigest) -> Self {
        Self {
            digest,
            shape: None,
        }
    }

    pub fn digest(&self) -> KeyDigest {
        self.digest
    }

    /// What is wrong with the value it was made from, if anything.
    pub fn shape(&self) -> Option<KeyShape> {
        self.shape
    }
}

impl From<&str> for ApiKey {
    fn from(text: &str) -> Self {
        Self::new(text)
    }
}

/// Whether `self` is the key `other` (tests and assertions name keys by their text).
impl PartialEq<&str> for ApiKey {
    fn eq(&self, other: &&str) -> bool {
        self.digest == KeyDigest::of(other.as_bytes())
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(..)")
    }
}

impl<'de> Deserialize<'de> for ApiKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Ok(Self::new(&text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_keys_have_equal_digests_and_print_nothing() {
        let a = ApiKey::new("sk-acme-0001");
        assert_eq!(a, ApiKey::new("sk-acme-0001"));
        assert_ne!(a, ApiKey::new("sk-acme-0002"));
        assert_eq!(a, "sk-acme-0001");
        assert_eq!(a.shape(), None);
        let shown = format!("{a:?} {:?}", a.digest());
        assert!(!shown.contains("acme"), "{shown}");
        assert_eq!(
            KeyDigest::from_bytes(&a.digest().to_bytes()),
            Some(a.digest())
        );
        assert_eq!(KeyDigest::from_bytes(b"short"), None);
    }

    #[test]
    fn malformed_keys_say_why() {
        assert_eq!(ApiKey::new("short").shape(), Some(KeyShape::TooShort));
        assert_eq!(
            ApiKey::new("has a space").shape(),
            Some(KeyShape::NotVisibleAscii)
        );
        assert_eq!(
            ApiKey::new(&"k".repeat(MAX_KEY_LEN + 1)).shape(),
            Some(KeyShape::NotVisibleAscii)
        );
        assert_eq!(ApiKey::new(&"k".repeat(MAX_KEY_LEN)).shape(), None);
    }
}
