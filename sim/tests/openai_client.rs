//! The official OpenAI Python client talks to the simulator: completions, chat, streaming,
//! usage with cached tokens. Needs `python3` with `openai` installed (`pip install openai`);
//! without it the test is skipped with a loud message.

mod common;

use common::*;

const SCRIPT: &str = r#"
import json, sys
from openai import OpenAI
c = OpenAI(base_url=sys.argv[1] + "/v1", api_key="unused", max_retries=0, timeout=10)
p = "You are a helpful assistant. " * 8 + "Say hi."
a = c.completions.create(model="tiny", prompt=p, max_tokens=4)
b = c.completions.create(model="tiny", prompt=p, max_tokens=4)
chat = c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hello"}], max_tokens=3)
parts, usage = [], None
for ch in c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hello"}],
                                    max_tokens=3, stream=True, stream_options={"include_usage": True}):
    if ch.choices and ch.choices[0].delta.content:
        parts.append(ch.choices[0].delta.content)
    if ch.usage:
        usage = ch.usage.completion_tokens
try:
    c.completions.create(model="nope", prompt="x")
    err = None
except Exception as e:
    err = type(e).__name__
print(json.dumps({
    "text": a.choices[0].text, "finish": a.choices[0].finish_reason,
    "cached": b.usage.prompt_tokens_details.cached_tokens,
    "chat": chat.choices[0].message.content, "streamed": "".join(parts), "stream_usage": usage,
    "error": err,
}))
"#;

#[tokio::test]
async fn the_openai_python_client_works() {
    let has_openai = std::process::Command::new("python3")
        .args(["-c", "import openai"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !has_openai {
        warmpath_testkit::optional::skip(
            "the_openai_python_client_works",
            "WARMPATH_OPENAI_REQUIRED",
            "python3 with `openai` not found (python3 -m pip install openai)",
        );
        return;
    }
    let s = sim(&["--timing", "zero"]).await;
    let url = format!("http://{}", s.addrs()[0]);
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        tokio::process::Command::new("python3")
            .args(["-c", SCRIPT, &url])
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the client finished in time")
    .expect("python3 ran");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["finish"], "length");
    assert!(!v["text"].as_str().unwrap().is_empty());
    // 239 bytes: 60 tokens, 3 full blocks of 16 cached.
    assert_eq!(v["cached"], 48);
    assert_eq!(v["stream_usage"], 3);
    assert_eq!(v["streamed"], v["chat"]);
    assert_eq!(v["error"], "NotFoundError");
}
