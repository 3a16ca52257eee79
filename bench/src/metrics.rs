//! Fleet counters from the replicas' own Prometheus endpoints.
//!
//! Each replica is scraped before and after a run; the fleet hit rate is
//! `Σ Δhits / Σ Δqueries` over replicas (token-weighted, as vLLM's counters count tokens).
//! The cache shape (`vllm:cache_config_info{block_size, num_gpu_blocks}`) is read too, so the
//! oracle can use the fleet's real capacity. Where the engines export them, two more things
//! come from the same scrapes: the requests each replica finished
//! (`vllm:request_success_total`), which shows how the router spread the load (a router that
//! sends everything to one replica is plain to see), and the engine's own TTFT histogram
//! (`vllm:time_to_first_token_seconds`), whose before/after difference summed over the fleet
//! gives the TTFT the engines measured, to set beside the client's: the gap is what the
//! network, the router and the client add.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::client::HttpClient;
use crate::stats::Summary;

pub const HITS: &str = "vllm:prefix_cache_hits_total";
pub const QUERIES: &str = "vllm:prefix_cache_queries_total";
pub const CACHE_CONFIG: &str = "vllm:cache_config_info";
pub const REQUESTS: &str = "vllm:request_success_total";
pub const TTFT: &str = "vllm:time_to_first_token_seconds";

#[derive(Debug, Error)]
pub enum ScrapeError {
    #[error("GET {url}: {reason}")]
    Http { url: String, reason: String },
    #[error("{url} has no {metric} sample")]
    Missing { url: String, metric: &'static str },
}

/// One scrape of one replica.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CacheCounters {
    pub hits: f64,
    pub queries: f64,
    pub block_size: Option<u32>,
    pub num_blocks: Option<u32>,
    /// Finished requests, every reason summed.
    pub requests: Option<f64>,
    /// The engine's TTFT histogram.
    pub ttft: Option<Histogram>,
}

/// A Prometheus histogram: cumulative counts at each finite upper bound (`le`, ascending), and
/// the total count (the `+Inf` bucket) and sum.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Histogram {
    pub buckets: Vec<(f64, f64)>,
    pub count: f64,
    pub sum: f64,
}

impl Histogram {
    /// `self − before`, bucket by bucket (`None` when the buckets differ); a counter that went
    /// backwards (a restarted replica) counts from zero.
    pub fn minus(&self, before: &Histogram) -> Option<Histogram> {
        if self.buckets.len() != before.buckets.len()
            || self
                .buckets
                .iter()
                .zip(&before.buckets)
                .any(|(a, b)| a.0 != b.0)
        {
            return None;
        }
        let reset = self.count < before.count;
        let base = |v: f64| if reset { 0.0 } else { v };
        Some(Histogram {
            buckets: self
                .buckets
                .iter()
                .zip(&before.buckets)
                .map(|(a, b)| (a.0, (a.1 - base(b.1)).max(0.0)))
                .collect(),
            count: (self.count - base(before.count)).max(0.0),
            sum: (self.sum - base(before.sum)).max(0.0),
        })
    }

    /// The sum of two histograms with the same buckets.
    pub fn plus(&self, other: &Histogram) -> Option<Histogram> {
        if self.buckets.len() != other.buckets.len() {
            return None;
        }
        let mut buckets = Vec::with_capacity(self.buckets.len());
        for (a, b) in self.buckets.iter().zip(&other.buckets) {
            if a.0 != b.0 {
                return None;
            }
            buckets.push((a.0, a.1 + b.1));
        }
        Some(Histogram {
            buckets,
            count: self.count + other.count,
            sum: self.sum + other.sum,
        })
    }

    /// The `q` quantile as Prometheus' `histogram_quantile` computes it: linear within the
    /// bucket that holds rank `q × count` (from 0 for the first bucket); in the `+Inf` bucket,
    /// the last finite bound. Coarse by nature: only as fine as the buckets.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count <= 0.0 || !(0.0..=1.0).contains(&q) {
            return None;
        }
        let rank = q * self.count;
        let (mut lower, mut below) = (0.0, 0.0);
        for (le, cum) in &self.buckets {
            if *cum >= rank {
                let width = cum - below;
                let frac = if width > 0.0 {
                    (rank - below) / width
                } else {
                    1.0
                };
                return Some(lower + (le - lower) * frac);
            }
            (lower, below) = (*le, *cum);
        }
        self.buckets.last().map(|b| b.0)
    }
}

/// The histogram `name` (its `_bucket`, `_count` and `_sum` series), every label set summed
/// bucket by bucket.
pub fn parse_histogram(text: &str, name: &str) -> Option<Histogram> {
    let bucket = format!("{name}_bucket{{");
    let mut by_le: Vec<(f64, f64)> = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix(&bucket) else {
            continue;
        };
        let Some((labels, value)) = rest.split_once('}') else {
            continue;
        };
        let le = labels.split(',').find_map(|p| {
            let (k, v) = p.split_once('=')?;
            (k.trim() == "le").then(|| v.trim().trim_matches('"').to_owned())
        });
        let (Some(le), Some(v)) = (
            le.and_then(|l| l.parse::<f64>().ok()),
            value
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<f64>().ok()),
        ) else {
            continue;
        };
        if !le.is_finite() {
            continue;
        }
        match by_le.iter_mut().find(|(l, _)| *l == le) {
            Some(entry) => entry.1 += v,
            None => by_le.push((le, v)),
        }
    }
    if by_le.is_empty() {
        return None;
    }
    by_le.sort_by(|a, b| a.0.total_cmp(&b.0));
    Some(Histogram {
        buckets: by_le,
        count: sum_samples(text, &format!("{name}_count"))?,
        sum: sum_samples(text, &format!("{name}_sum")).unwrap_or(0.0),
    })
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
        requests: sum_samples(text, REQUESTS)
            .or_else(|| sum_samples(text, REQUESTS.trim_end_matches("_total"))),
        ttft: parse_histogram(text, TTFT),
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
    /// Requests the replica finished during the run (absent when the engine does not export
    /// `vllm:request_success_total`, and in schema 1 files).
    #[serde(default)]
    pub requests: Option<f64>,
}

/// The engines' own TTFT over the run from their histogram, in milliseconds: the mean is exact
/// (Δsum / Δcount), the percentiles are interpolated within the engines' buckets (vLLM's: 1, 5,
/// 10, 20, 40, 60, 80, 100, 250 ms…), and a histogram has no min or max.
fn engine_ttft(h: &Histogram) -> Summary {
    let ms = |v: Option<f64>| v.map(|s| s * 1e3);
    Summary {
        count: h.count as usize,
        mean: ms((h.count > 0.0).then(|| h.sum / h.count)),
        min: None,
        p50: ms(h.quantile(0.5)),
        p90: ms(h.quantile(0.9)),
        p99: ms(h.quantile(0.99)),
        max: None,
    }
}

/// The fleet's result of a run from the engines' counters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetCache {
    pub hits: f64,
    pub queries: f64,
    pub hit_rate: Option<f64>,
    pub replicas: Vec<ReplicaCache>,
    /// The engines' TTFT histograms' difference over the run, summed over the fleet (absent
    /// when any replica does not export one, and in schema 1 files).
    #[serde(default)]
    pub engine_ttft_ms: Option<Summary>,
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
                requests: a.requests.zip(b.requests).map(|(a, b)| {
                    // A restarted replica counts from zero.
                    if a >= b {
                        a - b
                    } else {
                        a
                    }
                }),
            }
        })
        .collect();
    let hits = replicas.iter().map(|r| r.hits).sum();
    let queries = replicas.iter().map(|r| r.queries).sum();
    // Every replica's histogram difference, summed; any replica without one leaves the fleet
    // figure out rather than report part of the fleet as all of it.
    let ttft = before
        .iter()
        .zip(after)
        .map(|(b, a)| a.ttft.as_ref()?.minus(b.ttft.as_ref()?))
        .try_fold(None::<Histogram>, |acc, h| {
            let h = h?;
            Some(Some(match acc {
                None => h,
                Some(acc) => acc.plus(&h)?,
            }))
        })
        .flatten();
    FleetCache {
        hits,
        queries,
        hit_rate: ratio(hits, queries),
        replicas,
        engine_ttft_ms: ttft.filter(|h| h.count > 0.0).map(|h| engine_ttft(&h)),
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

    /// A replica's TTFT histogram as the simulator renders it (vLLM's names and labels), with
    /// `counts` observations in its first buckets.
    fn exposition(counts: [u64; 4], requests: u64) -> String {
        let les = ["0.001", "0.005", "0.01", "0.02", "0.04"];
        let mut s = String::from("# TYPE vllm:time_to_first_token_seconds histogram\n");
        let mut cum = 0;
        for (i, le) in les.iter().enumerate() {
            cum += counts.get(i).copied().unwrap_or(0);
            s.push_str(&format!(
                "vllm:time_to_first_token_seconds_bucket{{engine=\"0\",le=\"{le}\",model_name=\"tiny\"}} {cum}.0\n"
            ));
        }
        s.push_str(&format!(
            "vllm:time_to_first_token_seconds_bucket{{engine=\"0\",le=\"+Inf\",model_name=\"tiny\"}} {cum}.0\n\
             vllm:time_to_first_token_seconds_count{{engine=\"0\",model_name=\"tiny\"}} {cum}.0\n\
             vllm:time_to_first_token_seconds_sum{{engine=\"0\",model_name=\"tiny\"}} {}\n\
             vllm:prefix_cache_hits_total{{engine=\"0\"}} 0\n\
             vllm:prefix_cache_queries_total{{engine=\"0\"}} 0\n\
             vllm:request_success_total{{engine=\"0\",finished_reason=\"stop\",model_name=\"tiny\"}} 0.0\n\
             vllm:request_success_total{{engine=\"0\",finished_reason=\"length\",model_name=\"tiny\"}} {requests}.0\n",
            0.004 * cum as f64
        ));
        s
    }

    #[test]
    fn histograms_parse_and_interpolate_as_prometheus_does() {
        let h = parse_histogram(&exposition([0, 4, 4, 2], 10), TTFT).unwrap();
        assert_eq!(h.buckets.len(), 5);
        assert_eq!(h.buckets[1], (0.005, 4.0));
        assert_eq!((h.count, h.sum), (10.0, 0.04));
        // Rank 5 of 10 lies in (0.005, 0.01], one of its four: 0.005 + 0.005 / 4.
        assert!((h.quantile(0.5).unwrap() - 0.00625).abs() < 1e-12);
        // Rank 9 lies in (0.01, 0.02], the first of its two: halfway.
        assert!((h.quantile(0.9).unwrap() - 0.015).abs() < 1e-12);
        // Rank 2 lies in (0.001, 0.005] (the first bucket is empty), half of its four: 3 ms.
        assert!((h.quantile(0.2).unwrap() - 0.003).abs() < 1e-12);
        assert_eq!(Histogram::default().quantile(0.5), None);
        assert!(parse_histogram("x 1\n", TTFT).is_none());
    }

    #[test]
    fn fleet_engine_ttft_and_requests_are_run_differences() {
        let urls = vec!["a".to_owned(), "b".to_owned()];
        let scrape = |counts, requests| parse_counters("u", &exposition(counts, requests)).unwrap();
        let before = [scrape([1, 0, 0, 0], 1), scrape([0, 0, 0, 0], 0)];
        let after = [scrape([1, 4, 0, 0], 5), scrape([0, 0, 4, 2], 6)];
        assert_eq!(after[0].requests, Some(5.0));
        let f = fleet_delta(&urls, &before, &after);
        assert_eq!(f.replicas[0].requests, Some(4.0));
        assert_eq!(f.replicas[1].requests, Some(6.0));
        let e = f.engine_ttft_ms.unwrap();
        // Ten observations: four in (1, 5] ms, four in (5, 10], two in (10, 20]: the same
        // histogram as above, and its mean 4 ms.
        assert_eq!(e.count, 10);
        assert!((e.mean.unwrap() - 4.0).abs() < 1e-9);
        assert!((e.p50.unwrap() - 6.25).abs() < 1e-9);
        // A replica without the histogram: no fleet figure rather than part of the fleet's.
        let mut partial = after.clone();
        partial[1].ttft = None;
        assert_eq!(fleet_delta(&urls, &before, &partial).engine_ttft_ms, None);
        // A replica that restarted counts from zero.
        let restarted = [scrape([1, 4, 0, 0], 5), scrape([0, 1, 0, 0], 1)];
        let f = fleet_delta(&urls, &after, &restarted);
        assert_eq!(f.replicas[1].requests, Some(1.0));
        assert_eq!(f.engine_ttft_ms.unwrap().count, 1);
    }
}
