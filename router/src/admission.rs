//! The admission step: runs after a request is parsed and before a replica is chosen.
//!
//! This is the seam for per-tenant flow control (fair queueing, priorities, shedding with 429).
//! The router ships [`AdmitAll`]; a flow controller implements [`Admission`] and may answer at
//! once, make the request wait, or reject it. Its [`Permit`] lives as long as the request
//! (until the response body ends), so a flow controller can count what is in flight.

use crate::errors::ApiError;
use std::any::Any;
use std::future::Future;
use std::pin::Pin;

/// What admission sees of a request.
#[derive(Debug, Clone, Copy)]
pub struct AdmissionRequest<'a> {
    pub tenant: Option<&'a str>,
    pub model: &'a str,
    pub prompt_tokens: u32,
    pub max_tokens: Option<u32>,
}

/// Held for the life of an admitted request; dropped when its response ends.
#[derive(Default)]
pub struct Permit(pub Option<Box<dyn Any + Send + Sync>>);

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Permit(held)"
        } else {
            "Permit(none)"
        })
    }
}

pub type Waiting = Pin<Box<dyn Future<Output = Result<Permit, ApiError>> + Send>>;

/// Admission's answer.
pub enum Admit {
    /// Go ahead (the common case: no allocation).
    Now(Permit),
    /// Wait in a queue; resolves to a permit or a rejection.
    Later(Waiting),
    /// Refuse (typically `ApiError::over_limit`, a 429 with `retry-after`).
    Reject(ApiError),
}

pub trait Admission: Send + Sync + 'static {
    fn admit(&self, request: &AdmissionRequest<'_>) -> Admit;
}

/// No flow control: every request goes straight to scheduling.
#[derive(Debug, Default, Clone, Copy)]
pub struct AdmitAll;

impl Admission for AdmitAll {
    fn admit(&self, _request: &AdmissionRequest<'_>) -> Admit {
        Admit::Now(Permit::default())
    }
}

/// Resolve an admission answer.
pub async fn resolve(admit: Admit) -> Result<Permit, ApiError> {
    match admit {
        Admit::Now(p) => Ok(p),
        Admit::Later(wait) => wait.await,
        Admit::Reject(e) => Err(e),
    }
}
