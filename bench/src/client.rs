//! One streamed request over a pooled hyper client, timed: TTFT, inter-token gaps, end-to-end
//! latency, token counts from the server's usage block, and the kind of error if it failed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use serde_json::json;

use crate::sse::{Chunk, SseParser};
use crate::text;
use crate::workload::{Prompt, WorkRequest};

/// The header a request's tenant ([`WorkRequest::tenant`]) is sent in: warmpath's own, which
/// the router believes from trusted sources (loopback by default).
pub const TENANT_HEADER: &str = "x-warmpath-tenant";

/// The header a request's session ([`WorkRequest::session`]) is sent in unless
/// [`Target::session_header`] says otherwise: warmpath's default (and llm-d's).
pub const SESSION_HEADER: &str = "x-session-id";

/// The header warmpath's session token comes back in, and goes out in when echoed.
pub const SESSION_TOKEN_HEADER: &str = "x-session-token";

/// The header that says why warmpath's flow control refused a request (on its 429s).
pub const DROPPED_REASON_HEADER: &str = "x-warmpath-dropped-reason";

/// Response headers of one request that [`send_detailed`] keeps beside its [`Outcome`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResponseInfo {
    /// The [`DROPPED_REASON_HEADER`] value, when the answer carried one.
    pub dropped_reason: Option<String>,
}

/// Where and how requests are sent.
#[derive(Debug, Clone)]
pub struct Target {
    /// `http://host:port`, without a trailing slash.
    pub base_url: String,
    pub model: String,
    /// Ask the server to generate exactly `max_tokens` (vLLM's `ignore_eos`).
    pub ignore_eos: bool,
    /// Per request, from sending to the end of the stream.
    pub timeout: Duration,
    /// The header a session's id goes in ([`SESSION_HEADER`] unless set).
    pub session_header: http::HeaderName,
    /// Each session's latest [`SESSION_TOKEN_HEADER`], echoed with its next request; `None`:
    /// no echo.
    pub session_tokens: Option<Arc<Mutex<HashMap<u64, http::HeaderValue>>>>,
}

impl Target {
    /// A target at `url` (`http://host:port`, a trailing slash dropped); `None` for anything
    /// else.
    pub fn new(url: &str, model: &str, ignore_eos: bool, timeout: Duration) -> Option<Self> {
        let base_url = url.trim_end_matches('/').to_owned();
        base_url
            .parse::<http::Uri>()
            .ok()
            .filter(|u| u.scheme_str() == Some("http") && u.authority().is_some())?;
        Some(Self {
            base_url,
            model: model.to_owned(),
            ignore_eos,
            timeout,
            session_header: http::HeaderName::from_static(SESSION_HEADER),
            session_tokens: None,
        })
    }

    /// Sessions' ids in `header` (`None` if it is no header name), and their tokens echoed
    /// when `echo`.
    pub fn with_sessions(mut self, header: &str, echo: bool) -> Option<Self> {
        self.session_header = http::HeaderName::try_from(header).ok()?;
        self.session_tokens = echo.then(Arc::default);
        Some(self)
    }
}

/// Why a request failed; the keys of `errors_by_kind` in results.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorKind {
    /// No connection could be made.
    Connect,
    /// The server answered with a non-2xx status.
    Status(u16),
    /// The whole request took longer than the timeout.
    Timeout,
    /// The stream was not valid SSE / OpenAI chunks, or ended without `[DONE]`.
    MalformedStream,
    /// The server sent an error object inside the stream.
    StreamError,
    /// The connection failed while sending or reading the body.
    Io,
}

impl ErrorKind {
    pub fn key(&self) -> String {
        match self {
            Self::Connect => "connect".into(),
            Self::Status(code) => format!("status_{code}"),
            Self::Timeout => "timeout".into(),
            Self::MalformedStream => "malformed_stream".into(),
            Self::StreamError => "stream_error".into(),
            Self::Io => "io".into(),
        }
    }
}

/// What happened to one request.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Seconds from the start of the run to sending.
    pub start_s: f64,
    pub ttft_s: Option<f64>,
    /// Gaps between successive chunks that carried text.
    pub itl_s: Vec<f64>,
    pub e2e_s: f64,
    pub output_tokens: u64,
    pub prompt_tokens: u64,
    pub error: Option<(ErrorKind, String)>,
    /// The `x-warmpath-replica` response header, when present.
    pub replica: Option<String>,
    /// A success status reached the client: from then on the router was committed to this
    /// answer, and a failure after it is one no retry could have saved.
    pub responded: bool,
    pub tenant: Option<String>,
}

pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// A pooled HTTP/1.1 client: connections are kept alive and reused across requests.
pub fn http_client(max_idle_per_host: usize) -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(Duration::from_secs(5)));
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(max_idle_per_host)
        .pool_idle_timeout(Duration::from_secs(30))
        .build(connector)
}

/// The JSON body and path of a streaming request.
pub fn request_body(target: &Target, req: &WorkRequest) -> (&'static str, serde_json::Value) {
    let mut body = match &req.prompt {
        Prompt::Text(p) => json!({ "prompt": p }),
        Prompt::Chat(m) => json!({ "messages": m }),
    };
    let obj = body.as_object_mut().expect("object literal");
    obj.insert("model".into(), json!(target.model));
    obj.insert("max_tokens".into(), json!(req.max_tokens));
    obj.insert("stream".into(), json!(true));
    obj.insert("stream_options".into(), json!({ "include_usage": true }));
    obj.insert("temperature".into(), json!(0.0));
    if target.ignore_eos {
        obj.insert("ignore_eos".into(), json!(true));
    }
    if let Some(s) = req.session {
        obj.insert("user".into(), json!(format!("session-{s}")));
    }
    let path = match req.prompt {
        Prompt::Text(_) => "/v1/completions",
        Prompt::Chat(_) => "/v1/chat/completions",
    };
    (path, body)
}

/// Sends `req` and times it. `run_start` is the zero of `Outcome::start_s`.
pub async fn send(
    client: &HttpClient,
    target: &Target,
    req: &WorkRequest,
    run_start: Instant,
) -> Outcome {
    send_detailed(client, target, req, run_start).await.0
}

/// [`send`], keeping the response headers of [`ResponseInfo`] too.
pub async fn send_detailed(
    client: &HttpClient,
    target: &Target,
    req: &WorkRequest,
    run_start: Instant,
) -> (Outcome, ResponseInfo) {
    let mut info = ResponseInfo::default();
    let started = Instant::now();
    let mut out = Outcome {
        start_s: started.duration_since(run_start).as_secs_f64(),
        ttft_s: None,
        itl_s: Vec::new(),
        e2e_s: 0.0,
        output_tokens: 0,
        prompt_tokens: 0,
        error: None,
        replica: None,
        responded: false,
        tenant: req.tenant.clone(),
    };
    let result = tokio::time::timeout(
        target.timeout,
        exchange(client, target, req, started, &mut out, &mut info),
    )
    .await;
    out.e2e_s = started.elapsed().as_secs_f64();
    match result {
        Err(_) => {
            out.error = Some((
                ErrorKind::Timeout,
                format!("no complete answer within {:?}", target.timeout),
            ))
        }
        Ok(Err(e)) => out.error = Some(e),
        Ok(Ok(())) => {}
    }
    (out, info)
}

async fn exchange(
    client: &HttpClient,
    target: &Target,
    req: &WorkRequest,
    started: Instant,
    out: &mut Outcome,
    info: &mut ResponseInfo,
) -> Result<(), (ErrorKind, String)> {
    let (path, body) = request_body(target, req);
    let mut builder = http::Request::post(format!("{}{}", target.base_url, path))
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "text/event-stream");
    if let Some(t) = &req.tenant {
        builder = builder.header(TENANT_HEADER, t);
    }
    if let Some(s) = req.session {
        builder = builder.header(&target.session_header, format!("session-{s}"));
        if let Some(token) = target
            .session_tokens
            .as_ref()
            .and_then(|t| t.lock().expect("session tokens").get(&s).cloned())
        {
            builder = builder.header(SESSION_TOKEN_HEADER, token);
        }
    }
    let request = builder
        .body(Full::new(Bytes::from(body.to_string())))
        .map_err(|e| (ErrorKind::Io, format!("bad request: {e}")))?;
    let response = client.request(request).await.map_err(|e| {
        if e.is_connect() {
            (ErrorKind::Connect, e.to_string())
        } else {
            (ErrorKind::Io, format!("{e:?}"))
        }
    })?;
    out.replica = response
        .headers()
        .get("x-warmpath-replica")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let (Some(s), Some(tokens), Some(token)) = (
        req.session,
        &target.session_tokens,
        response.headers().get(SESSION_TOKEN_HEADER),
    ) {
        tokens
            .lock()
            .expect("session tokens")
            .insert(s, token.clone());
    }
    info.dropped_reason = response
        .headers()
        .get(DROPPED_REASON_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let status = response.status();
    let mut body = response.into_body();
    if !status.is_success() {
        let mut text = Vec::new();
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(f) => {
                    if let Some(d) = f.data_ref() {
                        text.extend_from_slice(
                            &d[..d.len().min(512usize.saturating_sub(text.len()))],
                        );
                    }
                }
                Err(_) => break,
            }
        }
        return Err((
            ErrorKind::Status(status.as_u16()),
            String::from_utf8_lossy(&text).into_owned(),
        ));
    }
    out.responded = true;
    let mut parser = SseParser::new();
    let mut last_text: Option<Instant> = None;
    let mut text_chunks = 0u64;
    let mut usage = None;
    let mut done = false;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| (ErrorKind::Io, format!("reading stream: {e}")))?;
        let Some(data) = frame.data_ref() else {
            continue;
        };
        let now = Instant::now();
        let events = parser
            .feed(data)
            .map_err(|e| (ErrorKind::MalformedStream, e.to_string()))?;
        for ev in events {
            match Chunk::parse(&ev).map_err(|e| (ErrorKind::MalformedStream, e))? {
                Chunk::Done => done = true,
                Chunk::Error(m) => return Err((ErrorKind::StreamError, m)),
                Chunk::Data {
                    text_bytes,
                    usage: u,
                } => {
                    if u.is_some() {
                        usage = u;
                    }
                    if text_bytes > 0 {
                        text_chunks += 1;
                        match last_text {
                            None => out.ttft_s = Some(now.duration_since(started).as_secs_f64()),
                            Some(prev) => out.itl_s.push(now.duration_since(prev).as_secs_f64()),
                        }
                        last_text = Some(now);
                    }
                }
            }
        }
    }
    if !done {
        return Err((
            ErrorKind::MalformedStream,
            "stream ended without [DONE]".to_owned(),
        ));
    }
    match usage {
        Some(u) => {
            out.output_tokens = u.completion_tokens;
            out.prompt_tokens = u.prompt_tokens;
        }
        None => {
            // Servers that ignore include_usage: one chunk per token is the common case.
            out.output_tokens = text_chunks;
            out.prompt_tokens = match &req.prompt {
                Prompt::Text(p) => text::approx_tokens(p) as u64,
                Prompt::Chat(m) => m
                    .iter()
                    .map(|x| text::approx_tokens(&x.content) as u64)
                    .sum(),
            };
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Message;

    fn target() -> Target {
        Target {
            base_url: "http://127.0.0.1:1".into(),
            model: "tiny".into(),
            ignore_eos: true,
            timeout: Duration::from_secs(1),
            session_header: http::HeaderName::from_static(SESSION_HEADER),
            session_tokens: None,
        }
    }

    #[test]
    fn completion_and_chat_bodies() {
        let req = WorkRequest {
            session: None,
            tenant: None,
            prompt: Prompt::Text(" the cat".into()),
            max_tokens: 7,
            arrival: None,
        };
        let (path, body) = request_body(&target(), &req);
        assert_eq!(path, "/v1/completions");
        assert_eq!(body["prompt"], " the cat");
        assert_eq!(body["max_tokens"], 7);
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert_eq!(body["ignore_eos"], true);
        assert!(body.get("user").is_none());

        let req = WorkRequest {
            session: Some(4),
            tenant: Some("a".into()),
            prompt: Prompt::Chat(vec![Message::new("user", " hi".into())]),
            max_tokens: 1,
            arrival: None,
        };
        let mut t = target();
        t.ignore_eos = false;
        let (path, body) = request_body(&t, &req);
        assert_eq!(path, "/v1/chat/completions");
        assert_eq!(body["messages"][0]["role"], "user");
        assert_eq!(body["user"], "session-4");
        assert!(body.get("ignore_eos").is_none());
    }

    #[tokio::test]
    async fn refused_connection_is_a_connect_error() {
        // Bind then drop a listener: nothing listens on that port afterwards.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let mut t = target();
        t.base_url = format!("http://127.0.0.1:{port}");
        let req = WorkRequest {
            session: None,
            tenant: None,
            prompt: Prompt::Text(" x".into()),
            max_tokens: 1,
            arrival: None,
        };
        let out = send(&http_client(1), &t, &req, Instant::now()).await;
        assert_eq!(out.error.map(|e| e.0), Some(ErrorKind::Connect));
        assert_eq!(out.ttft_s, None);
    }
    /// The tenant travels in [`TENANT_HEADER`] and a refusal's reason comes back in
    /// A server that answers one request with `head` and `body` and returns the request's
    /// head, lowercased.
    async fn answer_once(
        head: &'static str,
        body: &'static [u8],
    ) -> (u16, tokio::task::JoinHandle<String>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = sock.read(&mut buf).await.unwrap();
                assert!(n > 0, "request ended early");
                seen.extend_from_slice(&buf[..n]);
            }
            let head = format!("{head}content-length: {}\r\n\r\n", body.len());
            sock.write_all(head.as_bytes()).await.unwrap();
            sock.write_all(body).await.unwrap();
            String::from_utf8_lossy(&seen).to_lowercase()
        });
        (port, server)
    }

    /// [`ResponseInfo`]: a one-shot server that answers 429 like warmpath's flow control.
    #[tokio::test]
    async fn tenant_header_goes_out_and_the_dropped_reason_comes_back() {
        let (port, server) = answer_once(
            "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\n\
             x-warmpath-dropped-reason: queue-full\r\n",
            b"{\"error\":{\"message\":\"queue full\"}}",
        )
        .await;
        let mut t = target();
        t.base_url = format!("http://127.0.0.1:{port}");
        let req = WorkRequest {
            session: None,
            tenant: Some("flood".into()),
            prompt: Prompt::Text(" x".into()),
            max_tokens: 1,
            arrival: None,
        };
        let (out, info) = send_detailed(&http_client(1), &t, &req, Instant::now()).await;
        assert_eq!(out.error.map(|e| e.0), Some(ErrorKind::Status(429)));
        assert_eq!(info.dropped_reason.as_deref(), Some("queue-full"));
        let head = server.await.unwrap();
        assert!(head.contains("\r\nx-warmpath-tenant: flood\r\n"), "{head}");
        assert!(!head.contains("x-tenant-id"), "{head}");
    }

    /// A session's id goes out in the configured header, and the token of one answer goes out
    /// with the session's next request.
    #[tokio::test]
    async fn session_tokens_are_echoed() {
        let t = target()
            .with_sessions("x-smg-routing-key", true)
            .expect("a header name");
        let req = WorkRequest {
            session: Some(4),
            tenant: None,
            prompt: Prompt::Text(" x".into()),
            max_tokens: 1,
            arrival: None,
        };
        let mut heads = Vec::new();
        for _ in 0..2 {
            let (port, server) = answer_once(
                "HTTP/1.1 503 Service Unavailable\r\nx-session-token: tok.en\r\n",
                b"no",
            )
            .await;
            let t = Target {
                base_url: format!("http://127.0.0.1:{port}"),
                ..t.clone()
            };
            send_detailed(&http_client(1), &t, &req, Instant::now()).await;
            heads.push(server.await.unwrap());
        }
        assert!(
            heads[0].contains("\r\nx-smg-routing-key: session-4\r\n"),
            "{}",
            heads[0]
        );
        assert!(!heads[0].contains("x-session-token"), "{}", heads[0]);
        assert!(!heads[0].contains("x-session-id"), "{}", heads[0]);
        assert!(
            heads[1].contains("\r\nx-session-token: tok.en\r\n"),
            "{}",
            heads[1]
        );
        assert!(target().with_sessions("not a header", false).is_none());
    }
}
