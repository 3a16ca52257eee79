//! Unit tests of request parsing: the routing fields, chat canonicalisation and every bad input.

use super::*;

fn hasher() -> BlockHasher {
    BlockHasher::new(16)
}

fn ok(ep: Endpoint, body: &str) -> RequestFeatures {
    parse(ep, body.as_bytes(), &hasher(), |_| None).expect("valid request")
}

fn bad(ep: Endpoint, body: &str) -> ApiError {
    parse(ep, body.as_bytes(), &hasher(), |_| None).expect_err("invalid request")
}

#[test]
fn completions_fields() {
    let f = ok(
        Endpoint::Completions,
        r#"{"model":"m","prompt":"hello world, this is a prompt","stream":true,"max_tokens":7,"temperature":0.5,"user":"t1"}"#,
    );
    assert_eq!(f.model, "m");
    assert!(f.stream);
    assert_eq!(f.max_tokens, Some(7));
    assert_eq!(f.user.as_deref(), Some("t1"));
    assert_eq!(
        f.prompt,
        hasher().hash_text("hello world, this is a prompt")
    );
}

#[test]
fn escaped_strings_hash_as_decoded_text() {
    let a = ok(
        Endpoint::Completions,
        r#"{"model":"m","prompt":"line\none \"quoted\" and more text"}"#,
    );
    assert_eq!(
        a.prompt,
        hasher().hash_text("line\none \"quoted\" and more text")
    );
}

#[test]
fn prompt_shapes() {
    let batch = ok(
        Endpoint::Completions,
        r#"{"model":"m","prompt":["first prompt of the batch", "second"]}"#,
    );
    assert_eq!(
        batch.prompt,
        hasher().hash_text("first prompt of the batch")
    );
    let tokens = ok(
        Endpoint::Completions,
        r#"{"model":"m","prompt":[1,22,333,4444,5,6,7,8,9]}"#,
    );
    assert_eq!(
        tokens.prompt,
        hasher().hash_text("1 22 333 4444 5 6 7 8 9 ")
    );
    let nested = ok(
        Endpoint::Completions,
        r#"{"model":"m","prompt":[[1,22,333,4444,5,6,7,8,9],[1]]}"#,
    );
    assert_eq!(nested.prompt, tokens.prompt);
}

#[test]
fn chat_messages_in_order_with_roles() {
    let f = ok(
        Endpoint::ChatCompletions,
        r#"{"model":"m","messages":[{"role":"system","content":"be brief and kind"},{"role":"user","content":[{"type":"text","text":"hi there"},{"type":"image_url","image_url":{"url":"x"}}]},{"role":"assistant","content":null,"tool_calls":[]}],"max_completion_tokens":3}"#,
    );
    let want = hasher().hash_chat([
        ("system", "be brief and kind"),
        ("user", "hi there"),
        ("assistant", ""),
    ]);
    assert_eq!(f.prompt, want);
    assert_eq!(f.max_tokens, Some(3));
    assert!(!f.stream);
}

#[test]
fn bad_inputs_have_codes() {
    let cases: &[(Endpoint, &str, &str)] = &[
        (Endpoint::Completions, "{not json", "invalid_json"),
        (Endpoint::Completions, "", "invalid_json"),
        (Endpoint::Completions, "[1,2]", "invalid_field"),
        (Endpoint::Completions, r#"{"prompt":"x"}"#, "missing_model"),
        (
            Endpoint::Completions,
            r#"{"model":"","prompt":"x"}"#,
            "missing_model",
        ),
        (
            Endpoint::Completions,
            r#"{"model":5,"prompt":"x"}"#,
            "invalid_field",
        ),
        (Endpoint::Completions, r#"{"model":"m"}"#, "missing_prompt"),
        (
            Endpoint::Completions,
            r#"{"model":"m","prompt":[]}"#,
            "invalid_field",
        ),
        (
            Endpoint::Completions,
            r#"{"model":"m","prompt":{"a":1}}"#,
            "invalid_field",
        ),
        (
            Endpoint::Completions,
            r#"{"model":"m","prompt":"x","stream":"yes"}"#,
            "invalid_field",
        ),
        (
            Endpoint::Completions,
            r#"{"model":"m","prompt":"x","max_tokens":-1}"#,
            "invalid_field",
        ),
        (
            Endpoint::ChatCompletions,
            r#"{"model":"m","messages":[]}"#,
            "missing_messages",
        ),
        (
            Endpoint::ChatCompletions,
            r#"{"model":"m","prompt":"x"}"#,
            "missing_messages",
        ),
        (
            Endpoint::ChatCompletions,
            r#"{"model":"m","messages":[{"content":"x"}]}"#,
            "invalid_field",
        ),
    ];
    for (ep, body, code) in cases {
        let e = bad(*ep, body);
        assert_eq!(e.status, http::StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(e.code, *code, "{body}: {e}");
    }
}
