//! vLLM's NIXL connector, as a router drives it (and as llm-d's routing sidecar does): first a
//! prefill request, the client's body made into a one-token, non-streamed generation that asks
//! the engine to keep the prompt's KV for a remote decode; then the client's own body to the
//! decode replica, carrying the `kv_transfer_params` the prefill answered with, unchanged, so
//! that the decode engine pulls those blocks instead of computing them.

use serde_json::{json, Map, Value};

/// Why a prefill answer cannot be used for the decode.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NixlError {
    #[error("the prefill answer is not a JSON object")]
    NotJson,
    #[error(
        "the prefill answer has no kv_transfer_params (is the engine running with a KV connector, \
         --kv-transfer-config?)"
    )]
    NoParams,
}

/// The prefill request's body: the client's, with `kv_transfer_params` asking for a remote
/// decode, no streaming, one token at most (`max_completion_tokens` too when the client sent it:
/// for chat it overrides `max_tokens`) and at least (`min_tokens`, which must not exceed it).
pub fn prefill_body(original: &Map<String, Value>) -> Vec<u8> {
    let mut body = original.clone();
    body.insert(
        "kv_transfer_params".into(),
        json!({
            "do_remote_decode": true,
            "do_remote_prefill": false,
            "remote_engine_id": null,
            "remote_block_ids": null,
            "remote_host": null,
            "remote_port": null,
        }),
    );
    body.insert("stream".into(), Value::Bool(false));
    body.remove("stream_options");
    body.insert("max_tokens".into(), 1.into());
    if body.contains_key("max_completion_tokens") {
        body.insert("max_completion_tokens".into(), 1.into());
    }
    body.insert("min_tokens".into(), 1.into());
    serde_json::to_vec(&body).expect("a JSON map serializes")
}

/// The `kv_transfer_params` of a prefill answer, as they came.
pub fn kv_params(answer: &[u8]) -> Result<Value, NixlError> {
    let v: Value = serde_json::from_slice(answer).map_err(|_| NixlError::NotJson)?;
    match v.get("kv_transfer_params") {
        Some(p @ Value::Object(_)) => Ok(p.clone()),
        Some(_) | None if v.is_object() => Err(NixlError::NoParams),
        _ => Err(NixlError::NotJson),
    }
}

/// The decode request's body: the client's (its stream flag and token limits as it sent them),
/// with the prefill's `kv_transfer_params`.
pub fn decode_body(original: &Map<String, Value>, params: Value) -> Vec<u8> {
    let mut body = original.clone();
    body.insert("kv_transfer_params".into(), params);
    serde_json::to_vec(&body).expect("a JSON map serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(s: &str) -> Map<String, Value> {
        match serde_json::from_str(s).unwrap() {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    #[test]
    fn the_prefill_body_is_a_one_token_unstreamed_remote_decode() {
        let chat = map(
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,
                "stream_options":{"include_usage":true},"max_tokens":50,
                "max_completion_tokens":60,"min_tokens":5,"temperature":0.5}"#,
        );
        let got: Value = serde_json::from_slice(&prefill_body(&chat)).unwrap();
        assert_eq!(
            got,
            json!({"model":"m","messages":[{"role":"user","content":"hi"}],"stream":false,
                   "max_tokens":1,"max_completion_tokens":1,"min_tokens":1,"temperature":0.5,
                   "kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,
                   "remote_engine_id":null,"remote_block_ids":null,"remote_host":null,
                   "remote_port":null}})
        );
        // Byte for byte (keys in serde_json's order), and no max_completion_tokens invented
        // for an API that has none.
        let completion = map(r#"{"prompt":"abc","model":"m","max_tokens":7}"#);
        assert_eq!(
            String::from_utf8(prefill_body(&completion)).unwrap(),
            r#"{"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,"remote_block_ids":null,"remote_engine_id":null,"remote_host":null,"remote_port":null},"max_tokens":1,"min_tokens":1,"model":"m","prompt":"abc","stream":false}"#
        );
    }

    #[test]
    fn the_decode_body_is_the_clients_with_the_prefills_params_unchanged() {
        let original = map(r#"{"model":"m","prompt":"abc","stream":true,"max_tokens":9}"#);
        let answer = br#"{"id":"x","choices":[{"text":"a"}],"kv_transfer_params":{"do_remote_prefill":true,"remote_block_ids":[3,4],"remote_engine_id":"e1","remote_host":"10.0.0.1","remote_port":5600,"extra":{"k":[1]}}}"#;
        let params = kv_params(answer).unwrap();
        let got: Value = serde_json::from_slice(&decode_body(&original, params)).unwrap();
        assert_eq!(
            got,
            json!({"model":"m","prompt":"abc","stream":true,"max_tokens":9,
                   "kv_transfer_params":{"do_remote_prefill":true,"remote_block_ids":[3,4],
                   "remote_engine_id":"e1","remote_host":"10.0.0.1","remote_port":5600,
                   "extra":{"k":[1]}}})
        );
    }

    #[test]
    fn answers_without_params_are_refused() {
        assert_eq!(kv_params(b"not json"), Err(NixlError::NotJson));
        assert_eq!(kv_params(b"[1]"), Err(NixlError::NotJson));
        assert_eq!(kv_params(br#"{"id":"x"}"#), Err(NixlError::NoParams));
        assert_eq!(
            kv_params(br#"{"kv_transfer_params":null}"#),
            Err(NixlError::NoParams)
        );
    }
}
