//! warmpath-bench: a streaming load generator for OpenAI-compatible endpoints, seeded workloads
//! that share prefixes in different ways, fleet prefix-cache hit rates from the replicas' own
//! counters, an offline oracle of the best hit rate a workload allows, and the benchmark report.
//!
//! The binary (`src/main.rs`) wires these together; `bench/compare.sh` runs the side-by-side
//! comparison and regenerates `BENCHMARKS.md` with `warmpath-bench report`.
#![forbid(unsafe_code)]

pub mod cli;
pub mod client;
pub mod fairness;
pub mod metrics;
pub mod oracle;
pub mod progress;
pub mod provenance;
pub mod report;
pub mod results;
pub mod rng;
pub mod runner;
pub mod sse;
pub mod stats;
pub mod text;
pub mod workload;
