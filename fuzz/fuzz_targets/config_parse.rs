//! A configuration file, whatever a user writes: parsed or refused with the line and field,
//! never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Err(e) = warmpath_router::config::Config::parse(text) {
            // Formatting the error must not panic either (it quotes the input).
            let _ = e.to_string();
        }
    }
});
