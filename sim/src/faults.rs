//! Faults on demand: what a router must survive, switched on by flags or at run time through
//! `POST /admin/faults` (per replica, or for any replica through `--admin-listen`).
//!
//! Body of `POST /admin/faults`: any subset of the [`FaultState`] fields, e.g.
//! `{"error_rate": 0.5}`, `{"hang": true}`, `{"refuse_connections": true, "for_ms": 2000}`,
//! or `{"clear": true}`. `for_ms` clears the faults set by that call after the given time
//! (how a replica that refuses connections comes back without the process admin port).

use serde::{Deserialize, Serialize};

/// The faults of one replica.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FaultState {
    /// Fraction of generation requests answered 500.
    pub error_rate: f64,
    /// Generation requests never answer.
    pub hang: bool,
    /// Streamed chunks come `slow_stream_ms` apart.
    pub slow_stream: bool,
    pub slow_stream_ms: u64,
    /// The connection is closed after `drop_after_chunks` chunks (streaming) or half the body.
    pub drop_mid_stream: bool,
    pub drop_after_chunks: u32,
    /// The listening socket is closed and open connections are dropped.
    pub refuse_connections: bool,
    /// `/health` answers 503.
    pub unhealthy: bool,
}

impl Default for FaultState {
    fn default() -> Self {
        FaultState {
            error_rate: 0.0,
            hang: false,
            slow_stream: false,
            slow_stream_ms: 50,
            drop_mid_stream: false,
            drop_after_chunks: 2,
            refuse_connections: false,
            unhealthy: false,
        }
    }
}

/// A change requested through the admin endpoint.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultPatch {
    pub error_rate: Option<f64>,
    pub hang: Option<bool>,
    pub slow_stream: Option<bool>,
    pub slow_stream_ms: Option<u64>,
    pub drop_mid_stream: Option<bool>,
    pub drop_after_chunks: Option<u32>,
    pub refuse_connections: Option<bool>,
    pub unhealthy: Option<bool>,
    /// Reset every fault first.
    #[serde(default)]
    pub clear: bool,
    /// Undo this change after this many milliseconds.
    pub for_ms: Option<u64>,
    /// Process admin endpoint only: the replica index (all replicas when absent).
    pub replica: Option<usize>,
}

impl FaultPatch {
    /// Applies the patch; errors name the bad field.
    pub fn apply(&self, s: &mut FaultState) -> Result<(), String> {
        if let Some(r) = self.error_rate {
            if !(0.0..=1.0).contains(&r) {
                return Err(format!("error_rate must be within [0, 1], got {r}"));
            }
        }
        if self.clear {
            *s = FaultState {
                slow_stream_ms: s.slow_stream_ms,
                drop_after_chunks: s.drop_after_chunks,
                ..FaultState::default()
            };
        }
        macro_rules! set {
            ($($f:ident),*) => { $( if let Some(v) = self.$f { s.$f = v; } )* };
        }
        set!(
            error_rate,
            hang,
            slow_stream,
            slow_stream_ms,
            drop_mid_stream,
            drop_after_chunks,
            refuse_connections,
            unhealthy
        );
        Ok(())
    }
}

/// Whether request number `n` fails at `rate`: deterministic, spread evenly.
pub fn should_fail(rate: f64, n: u64) -> bool {
    if rate <= 0.0 {
        return false;
    }
    // Low-discrepancy sequence: any window of requests fails close to `rate` of the time.
    let x = (n as f64 * 0.618_033_988_749_895).fract();
    x < rate
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patches_apply_and_validate() {
        let mut s = FaultState::default();
        let p: FaultPatch = serde_json::from_str(r#"{"hang":true,"error_rate":0.5}"#).unwrap();
        p.apply(&mut s).unwrap();
        assert!(s.hang && s.error_rate == 0.5);
        let p: FaultPatch = serde_json::from_str(r#"{"clear":true}"#).unwrap();
        p.apply(&mut s).unwrap();
        assert_eq!(s, FaultState::default());
        let p: FaultPatch = serde_json::from_str(r#"{"error_rate":2}"#).unwrap();
        assert!(p.apply(&mut s).is_err());
        assert!(serde_json::from_str::<FaultPatch>(r#"{"nope":1}"#).is_err());
    }

    #[test]
    fn error_rate_is_honoured_over_a_window() {
        let fails = (0..1000).filter(|n| should_fail(0.3, *n)).count();
        assert!((280..=320).contains(&fails), "{fails}");
        assert_eq!((0..100).filter(|n| should_fail(0.0, *n)).count(), 0);
        assert_eq!((0..100).filter(|n| should_fail(1.0, *n)).count(), 100);
    }
}
