//! Fleet prefix-cache counters from the replicas' own Prometheus endpoints.
//!
//! Each replica is scraped before and after a run; the fleet hit rate is
//! `Σ Δhits / Σ Δqueries` over replicas (token-weighted, as vLLM's counters count tokens).
//! The cache shape (`vllm:cache_config_info{block_size, num_gpu_blocks}`) is read too, so the
//! oracle can use the fleet's real capacity.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::client::HttpClient;

pub const HITS: &str = "vllm:prefix_cache_hits_total";
pub const QUERIES: &str = "vllm:prefix_cache_queries_total";
pub const CACHE_CONFIG: &str = "vllm:cache_config_info";

#[derive(Debug, Error)]
pub enum ScrapeError {
    #[error("GET {url}: {reason}")]
    Http { url: String, reason: String },
    #[error("{url} has no {metric} sample")]
    Missing { url: String, metric: &'static str },
}

/// One scrape of one replica.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct CacheCounters {
    pub hits: f64,
    pub queries: f64,
    pub block_size: Option<u32>,
    pub num_blocks: Option<u32>,
}

/// Sum of every sample of `name` (any labels) in a Prometheus text exposition.
pub fn sum_samples(text: &str, name: &str) -> Option<f64> {
    let mut total = None;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        // The name must end here: `foo` must not match `foo_bar`.
        let rest = match rest.as_bytes().first() {
            Some(b'{') => match rest.find('}') {
                Some(i) => &rest[i + 1..],
                None => continue,
            },
            Some(b' ') | Some(b'\t') => rest,
            _ => continue,
        };
        if let Some(v) = rest
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        {
            *total.get_or_insert(0.0) += v;
        }
    }
    total
}

/// The value of label `label` on the first sample of `name`.
pub fn label_value(text: &str, name: &str, label: &str) -> Option<String> {
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix(name) else {
            continue;
        };
        let Some(labels) = rest.strip_prefix('{').and_then(|r| r.split('}').next()) else {
            continue;
        };
        for pair in labels.split(',') {
            if let Some((k, v)) = pair.split_once('=') {
                if k.trim() == label {
                    return Some(v.trim().trim_matches('"').to_owned());
                }
            }
        }
    }
    None
}

/// Parses the counters out of one exposition.
pub fn parse_counters(url: &str, text: &str) -> Result<CacheCounters, ScrapeError> {
    // vLLM exposes counters with the `_total` suffix; accept the bare name as well.
    let get = |metric: &'static str| {
        sum_samples(text, metric)
            .or_else(|| sum_samples(text, metric.trim_end_matches("_total")))
            .ok_or(ScrapeError::Missing {
                url: url.to_owned(),
                metric,
            })
    };
    Ok(CacheCounters {
        hits: get(HITS)?,
        queries: get(QUERIES)?,
        block_size: label_value(text, CACHE_CONFIG, "block_size").and_then(|v| v.parse().ok()),
        num_blocks: label_value(text, CACHE_CONFIG, "num_gpu_blocks").and_then(|v| v.parse().ok()),
    })
}

/// GETs `url` and parses its counters.
pub async fn scrape(client: &HttpClient, url: &str) -> Result<CacheCounters, ScrapeError> {
    let http_err = |reason: String| ScrapeError::Http {
        url: url.to_owned(),
        reason,
    };
    let req = http::Request::get(url)
        .body(Full::new(Bytes::new()))
        .map_err(|e| http_err(e.to_string()))?;
    let fut = async {
        let resp = client
            .request(req)
            .await
            .map_err(|e| http_err(e.to_string()))?;
        if !resp.status().is_success() {
            return Err(http_err(format!("status {}", resp.status())));
        }
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| http_err(e.to_string()))?
            .to_bytes();
        Ok(String::from_utf8_lossy(&body).into_owned())
    };
    let text = tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .map_err(|_| http_err("timed out".into()))??;
    parse_counters(url, &text)
}

/// Before/after counters of one replica.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplicaCache {
    pub url: String,
    pub hits: f64,
    pub queries: f64,
    pub hit_rate: Option<f64>,
}

/// The fleet's prefix-cache result of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetCache {
    pub hits: f64,
    pub queries: f64,
    pub hit_rate: Option<f64>,
    pub replicas: Vec<ReplicaCache>,
}

fn ratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0).then(|| a / b)
}

/// Differences of the counters, summed over the fleet.
pub fn fleet_delta(
    urls: &[String],
    before: &[CacheCounters],
    after: &[CacheCounters],
) -> FleetCache {
    let replicas: Vec<ReplicaCache> = urls
        .iter()
        .zip(before.iter().zip(after))
        .map(|(url, (b, a))| {
            let hits = (a.hits - b.hits).max(0.0);
            let queries = (a.queries - b.queries).max(0.0);
            ReplicaCache {
                url: url.clone(),
                hits,
                queries,
                hit_rate: ratio(hits, queries),
            }
        })
        .collect();
    let hits = replicas.iter().map(|r| r.hits).sum();
    let queries = replicas.iter().map(|r| r.queries).sum();
    FleetCache {
        hits,
        queries,
        hit_rate: ratio(hits, queries),
        replicas,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXPOSITION: &str = r#"# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 1200.0
vllm:prefix_cache_hits_total_extra{engine="0"} 99
vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 2000
vllm:prefix_cache_queries_total{engine="1",model_name="tiny"} 1000
vllm:cache_config_info{block_size="16",cache_dtype="auto",num_gpu_blocks="512"} 1.0
"#;

    #[test]
    fn sums_samples_over_labels_without_prefix_confusion() {
        assert_eq!(sum_samples(EXPOSITION, HITS), Some(1200.0));
        assert_eq!(sum_samples(EXPOSITION, QUERIES), Some(3000.0));
        assert_eq!(sum_samples(EXPOSITION, "vllm:absent"), None);
        assert_eq!(sum_samples("foo 3\nfoo{a=\"b\"} 4e0\n", "foo"), Some(7.0));
    }

    #[test]
    fn parses_counters_and_cache_shape() {
        let c = parse_counters("u", EXPOSITION).unwrap();
        assert_eq!(c.hits, 1200.0);
        assert_eq!(c.queries, 3000.0);
        assert_eq!(c.block_size, Some(16));
        assert_eq!(c.num_blocks, Some(512));
        assert!(matches!(
            parse_counters("u", "x 1\n"),
            Err(ScrapeError::Missing { metric: HITS, .. })
        ));
    }

    #[test]
    fn fleet_delta_is_token_weighted() {
        let urls = vec!["a".to_owned(), "b".to_owned()];
        let c = |hits, queries| CacheCounters {
            hits,
            queries,
            ..Default::default()
        };
        let before = [c(10.0, 100.0), c(0.0, 0.0)];
        let after = [c(90.0, 200.0), c(0.0, 300.0)];
        let f = fleet_delta(&urls, &before, &after);
        assert_eq!(f.hits, 80.0);
        assert_eq!(f.queries, 400.0);
        assert_eq!(f.hit_rate, Some(0.2));
        assert_eq!(f.replicas[0].hit_rate, Some(0.8));
        assert_eq!(f.replicas[1].hit_rate, Some(0.0));
    }
}
