//! An engine's KV-event message, whatever arrives on the socket: the multipart frames (topic,
//! sequence, payload) and the msgpack payload alone decode or fail cleanly, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use warmpath_kv_events::{decode_batch, decode_message};

fuzz_target!(|data: &[u8]| {
    let _ = decode_batch(data);
    // The same bytes cut into up to three frames at positions the input chooses.
    if let Some((&a, rest)) = data.split_first() {
        if let Some((&b, rest)) = rest.split_first() {
            let i = usize::from(a) % (rest.len() + 1);
            let j = i + usize::from(b) % (rest.len() - i + 1);
            let frames = [&rest[..i], &rest[i..j], &rest[j..]];
            let _ = decode_message(&frames);
            let _ = decode_message(&frames[..2]);
        }
    }
});
