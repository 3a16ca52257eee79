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
        r#"{"model":"m","messages":[{"role":"system","content":"be brief and kind"},{"role":"user","content":[{"type":"text","text":"hi there"},{"type":"input_text","text":"and here"}]},{"role":"assistant","content":null,"tool_calls":[]}],"max_completion_tokens":3}"#,
    );
    let want = hasher().hash_chat([
        ("system", "be brief and kind"),
        ("user", "hi there\nand here"),
        ("assistant", ""),
    ]);
    assert_eq!(f.prompt, want);
    assert_eq!(f.max_tokens, Some(3));
    assert!(!f.stream);
    assert!(!f.media);
}

fn chat_with(image: &str) -> String {
    format!(
        r#"{{"model":"m","messages":[{{"role":"system","content":"be brief and kind, always"}},{{"role":"user","content":[{{"type":"text","text":"what is in this picture?"}},{{"type":"image_url","image_url":{{"url":"{image}"}}}}]}}]}}"#
    )
}

#[test]
fn a_multimodal_item_is_one_digest_to_the_approximate_index() {
    let cat = ok(
        Endpoint::ChatCompletions,
        &chat_with("data:image/png;base64,Y2F0"),
    );
    let again = ok(
        Endpoint::ChatCompletions,
        &chat_with("data:image/png;base64,Y2F0"),
    );
    let dog = ok(
        Endpoint::ChatCompletions,
        &chat_with("data:image/png;base64,ZG9n"),
    );
    let text_only = hasher().hash_chat([
        ("system", "be brief and kind, always"),
        ("user", "what is in this picture?"),
    ]);
    assert!(cat.media);
    assert_eq!(cat.prompt, again.prompt, "the same image matches");
    assert_ne!(cat.prompt, dog.prompt, "another image does not");
    assert_ne!(cat.prompt, text_only, "nor does no image");
    // The system message's blocks are shared by all three.
    assert_eq!(cat.prompt.hashes[0], dog.prompt.hashes[0]);
    assert_eq!(cat.prompt.hashes[0], text_only.hashes[0]);
}

#[test]
fn token_blocks_stop_before_the_message_holding_the_first_multimodal_item() {
    let tokens = Arc::new(Tokens {
        tokenizer: Tokenizer::bytes(),
        prefixes: PrefixCache::new(1 << 16),
    });
    let parse_with = |body: &str| {
        parse(
            Endpoint::ChatCompletions,
            body.as_bytes(),
            &hasher(),
            |_| Some(tokens.clone()),
        )
        .expect("valid request")
    };
    let f = parse_with(&chat_with("https://example.com/cat.png"));
    assert!(f.media);
    // The default template renders `role: content` lines: the tokens of everything before the
    // user message's content, less the last (which may merge with what follows).
    let mut want = tokens
        .tokenizer
        .encode("system: be brief and kind, always\nuser: ", false)
        .unwrap();
    want.pop();
    assert!(!want.is_empty());
    assert_eq!(f.tokens.as_deref(), Some(&want[..]));
    // Without the image, the whole chat is tokenized.
    let plain = parse_with(
        r#"{"model":"m","messages":[{"role":"system","content":"be brief and kind, always"},{"role":"user","content":[{"type":"text","text":"what is in this picture?"}]}]}"#,
    );
    assert!(!plain.media);
    assert!(plain.tokens.expect("tokens").len() > want.len() + 1);
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
