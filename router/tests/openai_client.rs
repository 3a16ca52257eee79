//! The official `openai` Python client works through the router, streaming and not.
//! Needs `python3` with `openai` installed (`pip install openai`); skips loudly without it.

mod common;

use common::*;
use std::process::Command;

const SCRIPT: &str = r#"
import sys, openai
base = sys.argv[1]
client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=20)

models = [m.id for m in client.models.list().data]
assert models == ["tiny"], models

c = client.completions.create(model="tiny", prompt="Once upon a time", max_tokens=4)
assert c.choices[0].text, c
assert c.usage.completion_tokens == 4, c.usage

chat = client.chat.completions.create(model="tiny", max_tokens=3,
    messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}])
assert chat.choices[0].message.role == "assistant", chat
assert chat.usage.completion_tokens == 3, chat.usage

raw = client.chat.completions.with_raw_response.create(model="tiny", max_tokens=1,
    messages=[{"role": "user", "content": "who answers?"}])
assert raw.headers.get("x-warmpath-replica") in ("r0", "r1"), dict(raw.headers)

chunks = list(client.chat.completions.create(model="tiny", max_tokens=5, stream=True,
    messages=[{"role": "user", "content": "stream please"}]))
text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
assert len(chunks) >= 5 and text, chunks
assert any(c.choices and c.choices[0].finish_reason for c in chunks), chunks

pieces = list(client.completions.create(model="tiny", prompt="stream this", max_tokens=4, stream=True))
assert sum(1 for p in pieces if p.choices and p.choices[0].text) >= 4, pieces

try:
    client.completions.create(model="nope", prompt="x", max_tokens=1)
    raise SystemExit("unknown model accepted")
except openai.NotFoundError as e:
    assert e.status_code == 404 and e.body["code"] == "model_not_found", e.body

try:
    client.completions.create(model="tiny", max_tokens=1, prompt=None)
    raise SystemExit("missing prompt accepted")
except openai.BadRequestError as e:
    assert e.status_code == 400, e
print("OK")
"#;

fn python_with_openai() -> Option<String> {
    for py in ["python3", "python"] {
        let ok = Command::new(py)
            .args(["-c", "import openai"])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if ok {
            return Some(py.to_owned());
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_openai_client_through_router() {
    let Some(py) = python_with_openai() else {
        warmpath_testkit::optional::skip(
            "official_openai_client_through_router",
            "WARMPATH_OPENAI_REQUIRED",
            "`python3 -c 'import openai'` failed (python3 -m pip install openai)",
        );
        return;
    };
    let s = Setup::new(&["--replicas", "2"], "").await;
    let base = format!("http://{}/v1", s.router.addr);
    let out =
        tokio::task::spawn_blocking(move || Command::new(py).args(["-c", SCRIPT, &base]).output())
            .await
            .unwrap()
            .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("OK"),
        "openai client failed:\n{stdout}\n{stderr}"
    );
    s.stop().await;
}
