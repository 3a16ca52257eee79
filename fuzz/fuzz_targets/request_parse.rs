//! A request body, whatever a client sends: parsing answers with features or a clear error,
//! never a panic, for both endpoints.
#![no_main]

use libfuzzer_sys::fuzz_target;
use warmpath_router::request::{parse, Endpoint};
use warmpath_routing::prompt::BlockHasher;

fuzz_target!(|data: &[u8]| {
    let hasher = BlockHasher::new(64);
    for endpoint in [Endpoint::Completions, Endpoint::ChatCompletions] {
        let _ = parse(endpoint, data, &hasher, |_| None);
    }
});
