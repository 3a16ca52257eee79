//! The OpenAI API over loopback: completions, chat, streaming, errors, models, tokenize,
//! replicas on consecutive ports.

mod common;

use common::*;
use serde_json::json;

#[tokio::test]
async fn completions_report_cached_tokens_on_the_second_request() {
    let s = sim(&["--timing", "zero"]).await;
    let a = s.addrs()[0];
    let body = json!({"model": "tiny", "prompt": prompt("You are a helpful assistant. ", "Q?", 10), "max_tokens": 4}).to_string();
    let first = post(a, "/v1/completions", &body).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let v = first.json();
    assert_eq!(v["object"], "text_completion");
    assert!(v["id"].as_str().unwrap().starts_with("cmpl-"));
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 4);
    // 292 bytes = 73 tokens at 4 bytes per token.
    assert_eq!(v["usage"]["prompt_tokens"], 73);
    assert_eq!(v["usage"]["total_tokens"], 77);
    assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    assert!(v["choices"][0]["text"].as_str().unwrap().len() >= 4);
    assert!(v.get("kv_transfer_params").is_some());
    let second = post(a, "/v1/completions", &body).await.json();
    // Four full blocks of 16: all but the last partial block.
    assert_eq!(
        second["usage"]["prompt_tokens_details"]["cached_tokens"],
        64
    );
    // Same prompt, same completion.
    assert_eq!(second["choices"][0]["text"], v["choices"][0]["text"]);
}

#[tokio::test]
async fn chat_and_streaming_follow_vllms_chunks() {
    let s = sim(&["--timing", "zero"]).await;
    let a = s.addrs()[0];
    let r = post(
        a,
        "/v1/chat/completions",
        &json!({"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 3}).to_string(),
    )
    .await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    // "user: hello\nassistant:" is 22 bytes: 6 tokens.
    assert_eq!(v["usage"]["prompt_tokens"], 6);

    let r = post(
        a,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hello"}], "max_tokens": 3, "stream": true,
                "stream_options": {"include_usage": true}})
        .to_string(),
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(r.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let data = sse_data(&r.body);
    assert_eq!(data.last().unwrap(), "[DONE]");
    let chunks: Vec<serde_json::Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    // role chunk, 3 tokens, usage
    assert_eq!(chunks.len(), 5, "{data:?}");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert!(chunks[1]["choices"][0]["finish_reason"].is_null());
    assert_eq!(chunks[3]["choices"][0]["finish_reason"], "length");
    assert_eq!(chunks[4]["choices"], json!([]));
    assert_eq!(chunks[4]["usage"]["completion_tokens"], 3);
    let text: String = chunks[1..4]
        .iter()
        .map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(
        text,
        v["choices"][0]["message"]["content"].as_str().unwrap()
    );

    let r = post(
        a,
        "/v1/completions",
        &json!({"prompt": "hello", "max_tokens": 2, "stream": true}).to_string(),
    )
    .await;
    let data = sse_data(&r.body);
    assert_eq!(data.len(), 3, "{data:?}");
    let last: serde_json::Value = serde_json::from_str(&data[1]).unwrap();
    assert_eq!(last["object"], "text_completion");
    assert_eq!(last["choices"][0]["finish_reason"], "length");
}

#[tokio::test]
async fn bad_input_answers_like_vllm_and_the_server_keeps_serving() {
    let s = sim(&["--timing", "zero", "--max-model-len", "64"]).await;
    let a = s.addrs()[0];
    let cases = [
        ("/v1/completions", "{bad".to_string(), 400, "Bad Request"),
        (
            "/v1/completions",
            json!({"prompt": "x", "max_tokens": "a"}).to_string(),
            400,
            "Bad Request",
        ),
        (
            "/v1/completions",
            json!({"model": "tiny"}).to_string(),
            400,
            "BadRequestError",
        ),
        (
            "/v1/completions",
            json!({"model": "nope", "prompt": "x"}).to_string(),
            404,
            "NotFoundError",
        ),
        (
            "/v1/completions",
            json!({"prompt": "x".repeat(400)}).to_string(),
            400,
            "BadRequestError",
        ),
        (
            "/v1/completions",
            json!({"prompt": "x", "max_tokens": 65}).to_string(),
            400,
            "BadRequestError",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": "x"}).to_string(),
            400,
            "Bad Request",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"content": "x"}]}).to_string(),
            400,
            "Bad Request",
        ),
    ];
    for (path, body, status, kind) in cases {
        let r = post(a, path, &body).await;
        assert_eq!(r.status, status, "{body}: {}", r.body);
        let v = r.json();
        assert_eq!(v["error"]["type"], kind, "{body}: {v}");
        assert_eq!(v["error"]["code"], status);
        assert!(v["error"]["message"].as_str().unwrap().len() > 5);
        assert!(v["error"].get("param").is_some());
    }
    let too_long = post(
        a,
        "/v1/completions",
        &json!({"prompt": "x".repeat(400)}).to_string(),
    )
    .await
    .json();
    assert_eq!(too_long["error"]["param"], "input_tokens");
    assert!(too_long["error"]["message"]
        .as_str()
        .unwrap()
        .contains("maximum context length is 64 tokens"));
    assert_eq!(get(a, "/nope").await.status, 404);
    let ok = post(
        a,
        "/v1/completions",
        &json!({"prompt": "x", "max_tokens": 1}).to_string(),
    )
    .await;
    assert_eq!(ok.status, 200);
}

#[tokio::test]
async fn models_health_tokenize() {
    let s = sim(&["--timing", "zero", "--model", "m1"]).await;
    let a = s.addrs()[0];
    let m = get(a, "/v1/models").await.json();
    assert_eq!(m["data"][0]["id"], "m1");
    assert_eq!(m["data"][0]["max_model_len"], 4096);
    assert_eq!(get(a, "/health").await.status, 200);
    let t = post(
        a,
        "/tokenize",
        &json!({"model": "m1", "prompt": "hello world!"}).to_string(),
    )
    .await
    .json();
    assert_eq!(t["count"], 3);
    let t = post(
        a,
        "/tokenize",
        &json!({"messages": [{"role": "user", "content": "hello"}]}).to_string(),
    )
    .await
    .json();
    assert_eq!(t["count"], 6);
}

#[tokio::test]
async fn hf_tokenizer_counts_like_the_engine() {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tokenize/tests/fixtures/tiny"
    );
    let tok = format!("{dir}/tokenizer.json");
    let tpl = format!("{dir}/tokenizer_config.json");
    let s = sim(&[
        "--timing",
        "zero",
        "--tokenizer",
        &tok,
        "--chat-template",
        &tpl,
    ])
    .await;
    let a = s.addrs()[0];
    // Ids the real vLLM engine returned for the same model.
    let t = post(
        a,
        "/tokenize",
        &json!({"prompt": "hello world"}).to_string(),
    )
    .await
    .json();
    assert_eq!(t["tokens"], json!([318, 337]));
    let r = post(
        a,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hello"}], "max_tokens": 2}).to_string(),
    )
    .await
    .json();
    assert_eq!(r["usage"]["prompt_tokens"], 11);
}

#[tokio::test]
async fn replicas_listen_on_consecutive_ports_and_other_loopback_addresses() {
    let mut started = None;
    for _ in 0..20 {
        let base = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if base > 65000 {
            continue;
        }
        let cli = <warmpath_sim::Cli as clap::Parser>::try_parse_from([
            "warmpath-sim",
            "--listen",
            &format!("127.0.0.1:{base}"),
            "--replicas",
            "3",
            "--timing",
            "zero",
        ])
        .unwrap();
        if let Ok(s) = warmpath_sim::start(&cli).await {
            started = Some((s, base));
            break;
        }
    }
    let (s, base) = started.expect("found three free consecutive ports");
    let ports: Vec<u16> = s.addrs().iter().map(|a| a.port()).collect();
    assert_eq!(ports, vec![base, base + 1, base + 2]);
    for a in s.addrs() {
        assert_eq!(
            post(a, "/v1/completions", r#"{"prompt":"hi","max_tokens":1}"#)
                .await
                .status,
            200
        );
    }
    let cli = <warmpath_sim::Cli as clap::Parser>::try_parse_from([
        "warmpath-sim",
        "--listen",
        "127.0.0.2:0",
        "--timing",
        "zero",
    ])
    .unwrap();
    let s2 = warmpath_sim::start(&cli).await.unwrap();
    let a = s2.addrs()[0];
    assert_eq!(a.ip().to_string(), "127.0.0.2");
    assert_eq!(get(a, "/health").await.status, 200);
}

#[tokio::test]
async fn model_length_is_capped_by_the_kv_cache() {
    let s = sim(&["--timing", "zero", "--kv-blocks", "4"]).await;
    let a = s.addrs()[0];
    let m = get(a, "/v1/models").await.json();
    assert_eq!(m["data"][0]["max_model_len"], 64);
    let r = post(
        a,
        "/v1/completions",
        &json!({"prompt": "x".repeat(400)}).to_string(),
    )
    .await;
    assert_eq!(r.status, 400);
    // The longest allowed prompt still runs to completion within the 4 blocks.
    let r = post(
        a,
        "/v1/completions",
        &json!({"prompt": "x".repeat(4 * 60), "max_tokens": 10}).to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["usage"]["completion_tokens"], 4);
}

/// Routers may speak HTTP/2 without TLS (h2c, prior knowledge) to their upstreams.
#[tokio::test]
async fn h2c_clients_are_served() {
    use http_body_util::{BodyExt, Full};
    let s = sim(&["--timing", "zero"]).await;
    let a = s.addrs()[0];
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<Full<bytes::Bytes>>();
    let req = http::Request::post(format!("http://{a}/v1/completions"))
        .header("content-type", "application/json")
        .body(Full::new(bytes::Bytes::from_static(
            br#"{"prompt":"hi","max_tokens":2,"stream":true}"#,
        )))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    assert_eq!(resp.version(), http::Version::HTTP_2);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let body = String::from_utf8_lossy(&body);
    assert_eq!(sse_data(&body).last().unwrap(), "[DONE]");
}

/// Like vLLM, a chat stream's first chunk (the role) comes with the engine's first output,
/// after prefill: routers time the first chunk as TTFT. A 2 s prefill must delay it (the
/// bound is a lower one, so a loaded machine cannot make this fail).
#[tokio::test]
async fn chat_role_chunk_waits_for_prefill() {
    use http_body_util::{BodyExt, Full};
    let s = sim(&["--prefill-us-per-token", "20000"]).await;
    let a = s.addrs()[0];
    let body = json!({
        "model": "tiny", "max_tokens": 1, "stream": true,
        "messages": [{"role": "user", "content": "x".repeat(400)}],
    })
    .to_string();
    let req = http::Request::post(format!("http://{a}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(Full::new(bytes::Bytes::from(body)))
        .unwrap();
    let start = std::time::Instant::now();
    let resp = client().request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let first = body.frame().await.expect("a chunk").unwrap();
    let waited = start.elapsed();
    let text = String::from_utf8_lossy(first.data_ref().unwrap()).into_owned();
    assert!(text.contains("\"role\":\"assistant\""), "{text}");
    assert!(
        waited >= std::time::Duration::from_secs(1),
        "the role chunk came after {waited:?}, before the ~2 s prefill"
    );
}
