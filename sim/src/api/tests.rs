//! Parsing against vLLM's accepted inputs and error shapes.

use serde_json::json;

use super::*;
use crate::tokens::ChatMessage;

#[test]
fn parses_completions_and_chat() {
    let r = parse_completion(br#"{"model":"tiny","prompt":"hi","max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}"#).unwrap();
    assert_eq!(r.input, Input::Text("hi".into()));
    assert_eq!(
        (r.max_tokens, r.stream, r.include_usage),
        (Some(3), true, true)
    );
    let r = parse_completion(br#"{"prompt":[1,2,3]}"#).unwrap();
    assert_eq!(r.input, Input::Tokens(vec![1, 2, 3]));
    // vLLM joins text parts with newlines (renderers/chat_utils.py).
    let r = parse_chat(br#"{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"max_completion_tokens":2}"#).unwrap();
    assert_eq!(r.max_tokens, Some(2));
    assert_eq!(
        r.input,
        Input::Chat(vec![ChatMessage {
            role: "user".into(),
            content: "a\nb".into()
        }])
    );
}

#[test]
fn bad_input_gets_vllms_error_shape() {
    let e = parse_completion(b"{bad").unwrap_err();
    assert_eq!((e.status.as_u16(), e.kind), (400, "Bad Request"));
    assert!(e.message.contains("json_invalid"));
    let e = parse_completion(br#"{"model":"tiny","prompt":"x","max_tokens":"a"}"#).unwrap_err();
    assert_eq!(e.param.as_deref(), Some("body.max_tokens"));
    let e = parse_completion(br#"{"model":"tiny"}"#).unwrap_err();
    assert_eq!(e.kind, "BadRequestError");
    assert_eq!(
        e.body(),
        json!({"error": {"message": "Either prompt or prompt_embeds must be provided and non-empty. (parameter=prompt)", "type": "BadRequestError", "param": "prompt", "code": 400}})
    );
    let e = parse_chat(br#"{"model":"tiny","messages":"x"}"#).unwrap_err();
    assert_eq!(e.param.as_deref(), Some("body.messages"));
    assert!(
        parse_completion(br#"{"prompt":"x","kv_transfer_params":{"remote_block_ids":"x"}}"#)
            .is_err()
    );
}

#[test]
fn kv_transfer_params_round_trip() {
    let r = parse_completion(br#"{"prompt":"x","kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":"e","remote_block_ids":[1,2],"remote_host":"127.0.0.1","remote_port":8001}}"#).unwrap();
    let kv = r.kv_transfer_params.unwrap();
    assert!(kv.do_remote_prefill && !kv.do_remote_decode);
    assert_eq!(kv.remote_block_ids, vec![1, 2]);
    let again = parse_completion(
        serde_json::to_vec(&json!({"prompt": "x", "kv_transfer_params": kv.to_json()}))
            .unwrap()
            .as_slice(),
    )
    .unwrap();
    assert_eq!(again.kv_transfer_params.unwrap(), kv);
}

#[test]
fn bootstrap_fields_parse_with_sglangs_default_port() {
    let r = parse_completion(br#"{"prompt":"x"}"#).unwrap();
    assert_eq!(r.bootstrap, None);
    let r = parse_chat(br#"{"messages":[{"role":"user","content":"a"}],"bootstrap_host":"10.0.0.1","bootstrap_port":9001,"bootstrap_room":9223372036854775807}"#).unwrap();
    assert_eq!(
        r.bootstrap,
        Some(Bootstrap {
            host: "10.0.0.1".into(),
            port: 9001,
            room: (1 << 63) - 1
        })
    );
    let r = parse_completion(
        br#"{"prompt":"x","bootstrap_host":"h","bootstrap_port":null,"bootstrap_room":1}"#,
    )
    .unwrap();
    assert_eq!(r.bootstrap.unwrap().port, 8998);
    for (bad, param) in [
        (r#""bootstrap_room":1"#, "bootstrap_host"),
        (r#""bootstrap_host":"h""#, "bootstrap_room"),
        (
            r#""bootstrap_host":"h","bootstrap_room":[1,2]"#,
            "bootstrap_room",
        ),
        (
            r#""bootstrap_host":"h","bootstrap_room":1,"bootstrap_port":70000"#,
            "bootstrap_port",
        ),
        (
            r#""bootstrap_host":"h","bootstrap_room":1,"kv_transfer_params":{"do_remote_decode":true}"#,
            "kv_transfer_params",
        ),
    ] {
        let body = format!(r#"{{"prompt":"x",{bad}}}"#);
        let e = parse_completion(body.as_bytes()).unwrap_err();
        assert_eq!(
            (e.status.as_u16(), e.param.as_deref()),
            (400, Some(param)),
            "{bad}"
        );
    }
}
