//! `endpoint_picker`: the router as a Gateway API Inference Extension endpoint picker, serving
//! Envoy's ext_proc protocol (gRPC) beside the proxy, so that a Gateway routes to the replicas
//! warmpath chooses ([`crate::endpoint_picker`]).

use super::FieldPath;
use serde::Deserialize;
use std::net::SocketAddr;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EndpointPickerConfig {
    /// Where the ext_proc gRPC server listens (h2c); absent: no endpoint picker. Read at start.
    pub listen: Option<SocketAddr>,
    /// What a Gateway gets for a request the picker cannot route (unknown model, unreadable
    /// body, no ready replica): `closed` answers it (Envoy's ImmediateResponse) with the status
    /// and OpenAI-shaped body the proxy would have answered; `open` names no endpoint, and the
    /// Gateway routes it as it would without a picker. The InferencePool's
    /// `endpointPickerRef.failureMode` says the same to the Gateway about an unreachable picker.
    pub failure_mode: FailureMode,
    /// ext_proc streams open at once (one per request in flight through the Gateway); more are
    /// refused with RESOURCE_EXHAUSTED. Read at start.
    pub max_streams: usize,
    /// File holding a bearer token (at least 16 bytes) the Gateway must send in every stream's
    /// gRPC metadata (`authorization: Bearer <token>`, Envoy's `grpc_service.initial_metadata`);
    /// streams without it are refused with UNAUTHENTICATED. Absent: no token is asked (keep
    /// the port to the Gateway with a NetworkPolicy). Read at start.
    pub token_file: Option<std::path::PathBuf>,
}

impl Default for EndpointPickerConfig {
    fn default() -> Self {
        Self {
            listen: None,
            failure_mode: FailureMode::Closed,
            max_streams: 10_000,
            token_file: None,
        }
    }
}

/// GIE's `FailClose` / `FailOpen`, for requests the picker itself cannot route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureMode {
    /// Answer it with the error (GIE's default).
    #[default]
    Closed,
    /// Let the Gateway route it without a pick.
    Open,
}

impl EndpointPickerConfig {
    pub(super) fn validate(
        &self,
        at: FieldPath,
        others: &[(&str, SocketAddr)],
    ) -> Result<(), (FieldPath, String)> {
        if let Some(listen) = self.listen {
            for (name, addr) in others {
                if *addr == listen && listen.port() != 0 {
                    return Err((at.key("listen"), format!("must differ from `{name}`")));
                }
            }
        }
        if self.max_streams == 0 {
            return Err((at.key("max_streams"), "must be > 0".to_owned()));
        }
        Ok(())
    }
}
