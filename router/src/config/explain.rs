//! `explain`: decision explanations for operators (the `x-warmpath-explain` request header,
//! and the recent decisions the admin API and status page show).

use super::FieldPath;
use serde::Deserialize;
use std::time::Duration;

/// Most decisions `recent` may keep: each holds every candidate's scores (a few hundred bytes
/// per candidate), and the admin API answers with all of them.
pub const MAX_RECENT: usize = 10_000;

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExplainConfig {
    /// Honour `x-warmpath-explain: 1` on a request: its response then carries each candidate's
    /// scores in an `x-warmpath-explain` header. Off by default: the scores say how loaded
    /// each replica is, which not every client should learn.
    pub header: bool,
    /// Decisions kept for the admin API and the status page (0: none).
    pub recent: usize,
    /// At most one ordinary decision is recorded per interval (ms), so that recording costs
    /// nothing measurable at any rate; explained requests are always recorded.
    pub sample_interval_ms: u64,
}

impl Default for ExplainConfig {
    fn default() -> Self {
        Self {
            header: false,
            recent: 64,
            sample_interval_ms: 100,
        }
    }
}

impl ExplainConfig {
    pub fn sample_interval(&self) -> Duration {
        Duration::from_millis(self.sample_interval_ms)
    }

    pub(super) fn validate(&self, at: FieldPath) -> Result<(), (FieldPath, String)> {
        if self.recent > MAX_RECENT {
            return Err((
                at.key("recent"),
                format!("at most {MAX_RECENT} (each decision keeps every candidate's scores)"),
            ));
        }
        Ok(())
    }
}
