//! Whether the routing table holds what discovery has found yet: in Kubernetes mode readiness
//! waits for the first full list (and says which watch error it is waiting on); in static mode
//! there is nothing to wait for.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether discovery has delivered its first full list, and the last watch error until then.
/// Written by the Kubernetes source (`sources::kubernetes::run`) only; read by `/readyz` and the
/// status page.
#[derive(Debug, Default)]
pub struct DiscoveryStatus {
    synced: AtomicBool,
    error: Mutex<Option<String>>,
}

impl DiscoveryStatus {
    /// `synced` from the start when there is nothing to discover (static mode).
    pub fn new(synced: bool) -> Self {
        Self {
            synced: AtomicBool::new(synced),
            error: Mutex::new(None),
        }
    }

    /// Whether routing may start: once the first full list has been applied.
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// The last watch error seen (cleared once synced): why the router is not ready yet.
    pub fn error(&self) -> Option<String> {
        self.error.lock().clone()
    }

    /// A watch failed before the first full list.
    pub(crate) fn failed(&self, error: String) {
        *self.error.lock() = Some(error);
    }

    /// The first full list has been applied.
    pub(crate) fn set_synced(&self) {
        *self.error.lock() = None;
        self.synced.store(true, Ordering::Release);
    }
}
