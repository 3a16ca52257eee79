//! SGLang's prefill/decode protocol: one body, the client's plus the prefill server's bootstrap
//! address and a random room number, sent to the prefill and the decode server at once; the
//! decode server waits in that room for the prefill server's KV cache.

use serde_json::{Map, Value};

/// The body both servers get.
pub fn body(original: &Map<String, Value>, host: &str, port: u16, room: u64) -> Vec<u8> {
    let mut body = original.clone();
    body.insert("bootstrap_host".into(), Value::String(host.to_owned()));
    body.insert("bootstrap_port".into(), port.into());
    body.insert("bootstrap_room".into(), room.into());
    serde_json::to_vec(&body).expect("a JSON map serializes")
}

/// A random room: 63 bits, as SGLang's own router draws them (a signed 64-bit value that is
/// never negative).
pub fn room() -> u64 {
    rand::random::<u64>() >> 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_is_the_clients_plus_the_bootstrap_fields() {
        let original =
            match serde_json::from_str(r#"{"model":"m","prompt":"p","stream":true}"#).unwrap() {
                Value::Object(m) => m,
                _ => unreachable!(),
            };
        assert_eq!(
            String::from_utf8(body(&original, "10.1.2.3", 8998, 42)).unwrap(),
            r#"{"bootstrap_host":"10.1.2.3","bootstrap_port":8998,"bootstrap_room":42,"model":"m","prompt":"p","stream":true}"#
        );
        for _ in 0..100 {
            assert!(room() < 1 << 63);
        }
    }
}
