//! The simulator's responses have the fields a real vLLM 0.32 engine's have (fixtures
//! captured from the engine, see `fixtures/vllm-0.32.0/README.md`).

mod common;

use common::*;
use serde_json::{json, Value};

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/fixtures/vllm-0.32.0/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// Object keys must match at every level (first array elements compared), except that ours may
/// carry `prompt_tokens_details` where vLLM without the flag has null or nothing.
fn same_fields(ours: &Value, theirs: &Value, path: &str) {
    match (ours, theirs) {
        (Value::Object(o), Value::Object(t)) => {
            let mut ok: Vec<&String> = o.keys().filter(|k| *k != "prompt_tokens_details").collect();
            let mut tk: Vec<&String> = t.keys().filter(|k| *k != "prompt_tokens_details").collect();
            ok.sort();
            tk.sort();
            assert_eq!(ok, tk, "fields at {path}");
            for (k, v) in o {
                if let Some(tv) = t.get(k) {
                    same_fields(v, tv, &format!("{path}.{k}"));
                }
            }
        }
        (Value::Array(o), Value::Array(t)) => {
            if let (Some(a), Some(b)) = (o.first(), t.first()) {
                same_fields(a, b, &format!("{path}[0]"));
            }
        }
        _ => {}
    }
}

fn chunks(body: &str) -> Vec<Value> {
    sse_data(body)
        .iter()
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

#[tokio::test]
async fn completion_and_chat_bodies_have_vllms_fields() {
    let s = sim(&["--timing", "zero"]).await;
    let a = s.addrs()[0];
    let ours = post(
        a,
        "/v1/completions",
        r#"{"model":"tiny","prompt":"hello","max_tokens":5}"#,
    )
    .await
    .json();
    same_fields(
        &ours,
        &serde_json::from_str(&fixture("completion.json")).unwrap(),
        "completion",
    );
    let ours = post(
        a,
        "/v1/chat/completions",
        r#"{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":4}"#,
    )
    .await
    .json();
    same_fields(
        &ours,
        &serde_json::from_str(&fixture("chat.json")).unwrap(),
        "chat",
    );
    let ours = get(a, "/v1/models").await.json();
    same_fields(
        &ours,
        &serde_json::from_str(&fixture("models.json")).unwrap(),
        "models",
    );
    let ours = post(a, "/tokenize", r#"{"model":"tiny","prompt":"hello world"}"#)
        .await
        .json();
    same_fields(
        &ours,
        &serde_json::from_str(&fixture("tokenize.json")).unwrap(),
        "tokenize",
    );
}

#[tokio::test]
async fn stream_chunks_have_vllms_fields() {
    let s = sim(&["--timing", "zero"]).await;
    let a = s.addrs()[0];
    for (req, file) in [
        (
            json!({"prompt": "hello", "max_tokens": 3, "stream": true}),
            "completion_stream.txt",
        ),
        (
            json!({"prompt": "hi", "max_tokens": 3, "stream": true, "stream_options": {"include_usage": true}}),
            "completion_stream_usage.txt",
        ),
    ] {
        let ours = chunks(&post(a, "/v1/completions", &req.to_string()).await.body);
        let theirs = chunks(&fixture(file));
        assert_eq!(ours.len(), theirs.len(), "{file}");
        for (i, (o, t)) in ours.iter().zip(&theirs).enumerate() {
            same_fields(o, t, &format!("{file}[{i}]"));
        }
    }
    let req = json!({"messages": [{"role": "user", "content": "hello"}], "max_tokens": 3, "stream": true});
    let ours = chunks(&post(a, "/v1/chat/completions", &req.to_string()).await.body);
    let theirs = chunks(&fixture("chat_stream.txt"));
    assert_eq!(ours.len(), theirs.len());
    for (i, (o, t)) in ours.iter().zip(&theirs).enumerate() {
        same_fields(o, t, &format!("chat_stream[{i}]"));
    }
}

#[tokio::test]
async fn errors_match_vllms() {
    let s = sim(&["--timing", "zero"]).await;
    let a = s.addrs()[0];
    let long = "x".repeat(4 * 4200);
    let cases = [
        ("err_badjson.json", "{bad".to_string(), false),
        (
            "err_badfield.json",
            r#"{"model":"tiny","prompt":"x","max_tokens":"a"}"#.to_string(),
            false,
        ),
        (
            "err_model.json",
            r#"{"model":"nope","prompt":"x"}"#.to_string(),
            true,
        ),
        ("err_noprompt.json", r#"{"model":"tiny"}"#.to_string(), true),
        (
            "err_maxtok.json",
            r#"{"model":"tiny","prompt":"hi","max_tokens":5000}"#.to_string(),
            true,
        ),
        (
            "err_toolong.json",
            json!({"model": "tiny", "prompt": long}).to_string(),
            false,
        ),
    ];
    for (file, body, same_message) in cases {
        let theirs: Value = serde_json::from_str(&fixture(file)).unwrap();
        let r = post(a, "/v1/completions", &body).await;
        let ours = r.json();
        assert_eq!(
            r.status as u64,
            theirs["error"]["code"].as_u64().unwrap(),
            "{file}"
        );
        same_fields(&ours, &theirs, file);
        assert_eq!(ours["error"]["type"], theirs["error"]["type"], "{file}");
        assert_eq!(ours["error"]["code"], theirs["error"]["code"], "{file}");
        if file != "err_badjson.json" {
            assert_eq!(ours["error"]["param"], theirs["error"]["param"], "{file}");
        }
        if same_message {
            assert_eq!(
                ours["error"]["message"], theirs["error"]["message"],
                "{file}"
            );
        }
    }
}

#[tokio::test]
async fn metric_names_and_types_are_vllms() {
    let s = sim(&["--timing", "zero"]).await;
    let ours = metrics(s.addrs()[0]).await;
    let theirs = fixture("metric_types.txt");
    let types: Vec<&str> = ours.lines().filter(|l| l.starts_with("# TYPE ")).collect();
    assert!(types.len() >= 12);
    for t in types {
        assert!(theirs.lines().any(|l| l == t), "vLLM has no `{t}`");
    }
}
