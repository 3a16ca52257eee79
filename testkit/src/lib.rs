//! What the integration tests of several crates share (router, simulator, cluster tests): a
//! plain HTTP/1 client over loopback that returns the whole reply, or a readable error,
//! always within a time limit. Used only by tests.
#![forbid(unsafe_code)]

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use std::net::SocketAddr;
use std::time::Duration;

/// A fresh client (no connection reuse between calls, so tests stay independent).
pub fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// A whole reply.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The replica the router says answered (`x-warmpath-replica`).
    pub fn replica(&self) -> String {
        self.header("x-warmpath-replica")
            .unwrap_or_else(|| panic!("no x-warmpath-replica: {self:?}"))
            .to_owned()
    }

    /// Assert an OpenAI-shaped error with this status and code.
    pub fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(self.status, status, "{}", self.body);
        let j = self.json();
        assert_eq!(j["error"]["code"], code, "{}", self.body);
        assert!(j["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
        assert!(j["error"]["type"].as_str().is_some());
        assert_eq!(self.header("content-type"), Some("application/json"));
    }
}

/// Send one request (JSON content type) and read the whole reply, within `limit`.
pub async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
    limit: Duration,
) -> Result<Reply, String> {
    let mut b = http::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .header("content-type", "application/json");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let req = b
        .body(Full::new(body.into()))
        .map_err(|e| format!("request: {e}"))?;
    let fut = async {
        let resp = client()
            .request(req)
            .await
            .map_err(|e| format!("request: {e:?}"))?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("body: {e:?}"))?
            .to_bytes();
        Ok(Reply {
            status,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    };
    tokio::time::timeout(limit, fut)
        .await
        .map_err(|_| format!("timed out after {limit:?}"))?
}

/// The sum of the Prometheus series named `name` whose labels include every `k="v"` of
/// `labels` (0 when there is none).
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.starts_with(name) && matches!(l.as_bytes().get(name.len()), Some(b'{') | Some(b' '))
        })
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::metric;

    #[test]
    fn metric_sums_matching_series_only() {
        let text = "# HELP x\nx_total{a=\"1\",b=\"2\"} 3\nx_total{a=\"1\",b=\"3\"} 4\nx_total_other 9\nx_total 1\n";
        assert_eq!(metric(text, "x_total", &[("a", "1")]), 7.0);
        assert_eq!(metric(text, "x_total", &[("b", "3")]), 4.0);
        assert_eq!(metric(text, "x_total", &[]), 8.0);
        assert_eq!(metric(text, "missing", &[]), 0.0);
    }
}
