//! The pure flow-control core of warmpath: what the router's admission layer asks when a pool is
//! saturated or a tenant is limited.
//!
//! Everything here is a plain data structure: no sockets, no async, no clock of its own. Time
//! comes in as [`std::time::Instant`] arguments (`now`), so the router passes the instant it
//! read once per admission decision and tests pass `origin + offset`; only differences between
//! instants matter, so the results are deterministic. An instant earlier than one already seen
//! counts as no time passing (never as negative time).
//!
//! - [`queue::FlowQueue`]: requests waiting while a pool is saturated. Strict priority bands,
//!   weighted fair share by tokens within a band (start-time fair queuing over per-tenant
//!   virtual token counters, corrected at completion), FIFO within a tenant; bounded by count
//!   and bytes in total and per tenant, and in the number of tenants it remembers.
//! - [`limits`]: [`limits::TokenBucket`], the per-tenant [`limits::Limits`] (requests/s,
//!   tokens/s, concurrency) and the bounded [`limits::TenantLimiters`] map.
//! - [`reason::Reason`]: why a request was refused, with the wire names of
//!   `x-warmpath-dropped-reason` and llm-d's `x-llm-d-request-dropped-reason`.
//!
//! Configuration is checked once with `validate` methods returning [`error::ConfigError`]; the
//! per-request methods accept any input (odd values degrade to documented defaults) and never
//! panic.
#![forbid(unsafe_code)]

pub mod config;
pub mod error;
pub mod limits;
pub mod queue;
pub mod reason;

pub use config::{FlowQueueConfig, LimitersConfig, TenantLimitsConfig};
pub use error::ConfigError;
pub use limits::{Limit, LimitPermit, Limits, Refusal, TenantLimiters, TenantPermit, TokenBucket};
pub use queue::{Arrival, Bound, Dispatched, Enqueued, Entry, FlowQueue, Handle, Refused, Ticket};
pub use reason::Reason;
