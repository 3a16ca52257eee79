//! Where the router's knowledge comes from, each a task that owns what it learns:
//! [`reload`] (the configuration file) and [`kubernetes`] (the cluster's resources) send updates
//! to the table publisher (`crate::state::publish`); [`scrape`] reads each replica's engine
//! metrics into that replica's live state.

pub mod kubernetes;
pub mod kv_events;
pub mod reload;
pub mod scrape;
