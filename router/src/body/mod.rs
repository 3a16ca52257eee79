//! Bodies: a request's read whole ([`read_body`], bounded in bytes and time), and wrappers around
//! a streamed response body, one concern each. They pass frames through as
//! they come (SSE is never buffered) and act on what a body's life tells: the first chunk, a
//! silence, the end, or a drop before the end (the client went away).
//!
//! The API stack composes them around the replica's body (`crate::api::forward`):
//! `Accounting<FirstChunk<UsageScan<ErrorPeek<IdleTimeout<ReadAhead<PooledBody>>>>>>`, innermost first: the
//! pooled connection is handed back at the end, a silent replica is cut, an error answer's first
//! bytes are kept to tell whose fault it was, the output tokens are counted for flow control,
//! the first chunk times TTFT, and the end (or drop) settles the request's metrics, in-flight
//! counters, the replica's health and the admission permit. Around a streamed answer, [`SseError`]
//! turns a break midway into a last error event and a clean end. Outermost, every response is
//! [`Watched`] for a client that stops taking data ([`StallWatch`]).

mod accounting;
pub mod error_peek;
mod first_chunk;
mod idle;
mod read_ahead;
mod request;
mod sse_error;
mod stall;
pub mod usage;

pub use accounting::{Accounting, Outcome};
pub use error_peek::{ErrorPeek, Peeked};
pub use first_chunk::FirstChunk;
pub use idle::{IdleTimedOut, IdleTimeout};
pub use read_ahead::ReadAhead;
pub use request::read_body;
pub(crate) use request::read_body_reserving;
pub use sse_error::SseError;
pub use stall::{StallWatch, Watched};
pub use usage::UsageScan;
