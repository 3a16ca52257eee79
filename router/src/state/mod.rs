//! The router's state, and who owns each piece of it.
//!
//! | state | owner (the only writer) | readers |
//! |---|---|---|
//! | [`table::Table`] (pools, candidates, scheduler, limits) | [`publish::Publisher`], one task | every request (an `Arc` snapshot for its whole life), scrapers, admin |
//! | [`replica::ReplicaRegistry`] (name → [`replica::ReplicaState`], ids) | the publisher | admin, through [`replica::Replicas`] |
//! | a replica's in-flight counters | the request holding an [`replica::InflightGuard`] | scheduler |
//! | a replica's engine load | its scrape task (`sources::scrape`) | scheduler |
//! | a replica's [`health::Health`] | passive: the request path's outcome layer; active: its scrape task | scheduler, admin |
//! | discovery's progress ([`discovery::DiscoveryStatus`]) | the Kubernetes source | readiness, admin |
//! | the prefix index ([`index::SharedIndex`]) | the replica choice (records), the publisher and passive health (forget) | scheduler, admin |
//!
//! Sources of change (the configuration file, the Kubernetes watch) never write here: they send
//! a [`publish::Update`] to the publisher, which applies it and publishes a new table.

pub mod discovery;
pub mod health;
pub mod index;
pub mod inflight_limit;
pub mod publish;
pub mod replica;
pub mod table;
pub mod tokens;
