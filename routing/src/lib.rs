//! The pure routing core of warmpath.
//!
//! Everything here is a plain data structure or function: no sockets, no async, no clock of
//! its own (callers pass time in). The router (`warmpath-router`) owns the I/O around it:
//! it parses a request into a [`prompt::BlockHashes`], asks the [`index::PrefixIndex`] how many
//! leading blocks each candidate replica holds, fills a [`scheduler::ReplicaView`] per candidate
//! from its load counters and scraped engine metrics, and lets the [`scheduler::Scheduler`] pick.
//! After the answer it feeds the outcome back ([`index::PrefixIndex::on_routed`],
//! [`predict::TtftModel::observe`]).
//!
//! Configuration is checked once with `validate` methods returning [`error::ConfigError`]; the
//! per-request functions accept any input and never panic on odd values.
#![forbid(unsafe_code)]

pub mod error;
pub mod index;
pub mod predict;
pub mod prompt;
pub mod scheduler;

/// A replica's identity inside the routing core: a small dense integer that the router assigns
/// per replica name and keeps stable across configuration reloads, so that index state survives
/// a reload. Dense ids let the index keep per-block replica sets as bitsets.
pub type ReplicaId = u32;

/// A chained block hash: block `i`'s hash covers its own bytes and the hash of block `i - 1`, so
/// equal hashes at position `i` mean equal prefixes up to and including block `i`.
pub type BlockHash = u64;

pub use error::ConfigError;
