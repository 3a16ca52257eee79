//! `peers`: the other replicas of this router, told of every placement as it is made.

use super::kv_events::check_endpoint;
use super::FieldPath;
use serde::Deserialize;
use std::path::PathBuf;

/// Where this router tells its placements and where it hears the others'.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PeersConfig {
    /// The ZMQ endpoint this router publishes its placements on (`tcp://0.0.0.0:5570`);
    /// absent: peering is off and the other fields are ignored.
    pub listen: Option<String>,
    /// The other routers' `listen` endpoints. A host name is resolved every
    /// `resolve_every_ms` and every address it has is followed (a headless Service's name
    /// reaches every router pod); this router's own messages, when it is among them, are
    /// recognised and skipped.
    pub routers: Vec<String>,
    /// How often host names in `routers` are resolved again.
    pub resolve_every_ms: u64,
    /// Placements waiting to be sent; past it new ones are dropped (and counted) rather than
    /// slowing the request path.
    pub queue: usize,
    /// Peers' placements remembered at once (to match their prefill-done messages); the oldest
    /// are forgotten first.
    pub max_remembered: usize,
    /// A file holding a secret every router of the group shares (at least 32 bytes; surrounding
    /// whitespace is ignored): placements are then sealed with a key derived from it (an AEAD,
    /// XChaCha20-Poly1305) and carry their send time, and placements that do not open with it,
    /// or were sent more than 30 s from this router's clock, are dropped. Absent: peering is
    /// unauthenticated (a warning at start): whoever reaches `listen` reads every placement,
    /// and whoever `routers` resolves to can inject them. Read at start; a router refuses to
    /// start when the file is unreadable or short.
    pub key_file: Option<PathBuf>,
}

impl Default for PeersConfig {
    fn default() -> Self {
        Self {
            listen: None,
            routers: Vec::new(),
            resolve_every_ms: 10_000,
            queue: 4096,
            max_remembered: 65_536,
            key_file: None,
        }
    }
}

impl PeersConfig {
    pub(super) fn validate(&self, at: FieldPath) -> Result<(), (FieldPath, String)> {
        if let Some(l) = &self.listen {
            check_endpoint(l).map_err(|m| (at.key("listen"), m))?;
        }
        for (i, r) in self.routers.iter().enumerate() {
            check_endpoint(r).map_err(|m| (at.key("routers").index(i), m))?;
        }
        for (field, value) in [
            ("resolve_every_ms", self.resolve_every_ms),
            ("queue", self.queue as u64),
            ("max_remembered", self.max_remembered as u64),
        ] {
            if value == 0 {
                return Err((at.key(field), "must be > 0".to_owned()));
            }
        }
        Ok(())
    }
}
