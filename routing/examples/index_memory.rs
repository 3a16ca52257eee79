//! Index memory under a stream of unique prompts: prints, every so often, the index's estimated
//! bytes ([`IndexStats::bytes`]), its configured bound, the bytes its tables actually reserve,
//! and this process's resident set size, to show that memory stays flat once the bound is hit.
//!
//! Run: `cargo run --release -p warmpath-routing --example index_memory [prompts] [replicas] [MiB per replica]`
//! (defaults 20000, 16, 8).

use std::hint::black_box;
use warmpath_routing::index::{ApproxIndex, IndexLimits, PrefixIndex};
use warmpath_routing::prompt::BlockHasher;

fn rss_mib() -> Option<f64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: f64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096.0 / f64::from(1 << 20))
}

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().ok());
    let prompts = args.next().flatten().unwrap_or(20_000);
    let replicas = args.next().flatten().unwrap_or(16) as u32;
    let mib = args.next().flatten().unwrap_or(8);
    let mut index = ApproxIndex::new(IndexLimits {
        max_bytes_per_replica: mib << 20,
    });
    let hasher = BlockHasher::new(64);
    // 16 KiB prompts (~4k tokens), unique from the first byte.
    let mut prompt = vec![b'x'; 16 * 1024];
    let rss0 = rss_mib().unwrap_or(0.0);
    println!(
        "{:>8} {:>10} {:>12} {:>12} {:>12} {:>12} {:>10}",
        "prompts", "entries", "bytes(MiB)", "bound(MiB)", "alloc(MiB)", "rss+(MiB)", "evictions"
    );
    let mut worst = 0.0f64;
    for i in 0..prompts {
        prompt[..8].copy_from_slice(&(i as u64).to_le_bytes());
        let h = hasher.hash_bytes(&prompt);
        index.on_routed(i as u32 % replicas, &h.hashes);
        let s = index.stats();
        assert!(s.bytes <= s.capacity_bytes, "bound exceeded: {s:?}");
        if (i + 1) % (prompts / 20).max(1) == 0 {
            let alloc = index.allocated_bytes();
            worst = worst.max(alloc as f64 / s.capacity_bytes as f64);
            let mb = |b: usize| b as f64 / f64::from(1 << 20);
            println!(
                "{:>8} {:>10} {:>12.1} {:>12.1} {:>12.1} {:>12.1} {:>10}",
                i + 1,
                s.entries,
                mb(s.bytes),
                mb(s.capacity_bytes),
                mb(alloc),
                rss_mib().map_or(f64::NAN, |r| r - rss0),
                s.evictions
            );
        }
    }
    black_box(&index);
    println!("peak allocated / bound = {worst:.2}");
}
