//! Reading engine load from each replica's Prometheus endpoint every 75 ms, or less often where
//! answering costs the engine more than `scrape.engine_share` of its time.
//!
//! Only a few series matter (running and waiting requests, KV-cache use), so this holds a
//! minimal Prometheus text parser rather than a client library. A scrape that succeeds marks
//! the replica's server up; a refused connection marks it down at once; other failures only
//! after a few in a row. Values older than `stale_after_ms` are unknown to the scheduler.
//!
//! With `health.active_path` (`/health` unless configured otherwise), the same task checks the
//! engine's own health endpoint every `active_interval_ms`: an engine can serve metrics while it
//! cannot serve requests (vLLM's `/health` fails once its engine core died). An engine that
//! serves no such path (404, 405, 501) is left to its metrics and answers.

use crate::config::{Engine, ScrapeConfig, TimeoutsConfig};
use crate::metrics::{Metrics, ResultLabels};
use crate::state::publish::TableReader;
use crate::state::replica::{ReplicaState, ScrapeTarget};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use std::sync::Arc;
use std::time::{Duration, Instant};
use warmpath_routing::scheduler::EngineLoad;

/// A general-purpose HTTP client is plenty for one GET per replica every 75 ms; the data path
/// has its own pool ([`crate::upstream`]).
type ScrapeClient = Client<HttpConnector, Full<Bytes>>;

fn build_client(t: &TimeoutsConfig) -> ScrapeClient {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(t.connect()));
    connector.set_nodelay(true);
    connector.enforce_http(true);
    Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(Duration::from_millis(t.pool_idle_ms))
        .pool_max_idle_per_host(4)
        .build(connector)
}

/// Largest metrics page read (vLLM's is tens of KB; this keeps a broken endpoint bounded).
const MAX_METRICS_BYTES: usize = 4 << 20;

/// Series names per engine: (running, waiting, kv-cache use 0..1).
fn series(
    engine: Engine,
) -> (
    &'static [&'static str],
    &'static [&'static str],
    &'static [&'static str],
) {
    match engine {
        Engine::Vllm => (
            &["vllm:num_requests_running"],
            &["vllm:num_requests_waiting"],
            &["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
        ),
        Engine::Sglang => (
            &["sglang:num_running_reqs"],
            &["sglang:num_queue_reqs"],
            &["sglang:token_usage"],
        ),
    }
}

/// Extract engine load from Prometheus text. Series with several label sets (one per model or
/// engine rank) are summed for counts and maxed for cache use. `None` when neither the running
/// nor the waiting series is present.
pub fn parse_engine_load(text: &str, engine: Engine) -> Option<EngineLoad> {
    let (running_names, waiting_names, kv_names) = series(engine);
    let mut running = None::<f64>;
    let mut waiting = None::<f64>;
    let mut kv = None::<f64>;
    for (name, value) in samples(text) {
        if running_names.contains(&name) {
            *running.get_or_insert(0.0) += value;
        } else if waiting_names.contains(&name) {
            *waiting.get_or_insert(0.0) += value;
        } else if kv_names.contains(&name) {
            kv = Some(kv.map_or(value, |k: f64| k.max(value)));
        }
    }
    if running.is_none() && waiting.is_none() {
        return None;
    }
    Some(EngineLoad {
        running: running.unwrap_or(0.0),
        waiting: waiting.unwrap_or(0.0),
        kv_cache_usage: kv.unwrap_or(0.0).clamp(0.0, 1.0),
    })
}

/// Counters of the tokens an engine has processed (prompt and generated): while they grow the
/// engine is working, answered or not.
fn work_series(engine: Engine) -> &'static [&'static str] {
    match engine {
        Engine::Vllm => &["vllm:prompt_tokens_total", "vllm:generation_tokens_total"],
        Engine::Sglang => &[
            "sglang:prompt_tokens_total",
            "sglang:generation_tokens_total",
        ],
    }
}

/// The engine's tokens processed so far (every label set summed), when its page counts them.
pub fn parse_work_total(text: &str, engine: Engine) -> Option<f64> {
    let names = work_series(engine);
    samples(text)
        .filter(|(name, _)| names.contains(name))
        .map(|(_, v)| v)
        .reduce(|a, b| a + b)
}

/// Every finite sample of a Prometheus text page, as (series name, value); comments and lines
/// that do not parse are skipped.
fn samples(text: &str) -> impl Iterator<Item = (&str, f64)> {
    text.lines().filter_map(|line| {
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') {
            return None;
        }
        let name_end = line
            .find(|c: char| c == '{' || c.is_whitespace())
            .unwrap_or(line.len());
        let name = &line[..name_end];
        let rest = &line[name_end..];
        let rest = match rest.strip_prefix('{') {
            // Label values may contain `}` inside quotes; find the closing brace outside quotes.
            Some(labels) => &labels[closing_brace(labels)? + 1..],
            None => rest,
        };
        let value = rest.split_whitespace().next()?.parse::<f64>().ok()?;
        value.is_finite().then_some((name, value))
    })
}

/// The engine's KV-cache capacity in tokens, from vLLM's
/// `vllm:cache_config_info{block_size="16",num_gpu_blocks="8192",...} 1` (blocks × block
/// size), when the page has it.
pub fn parse_kv_capacity(text: &str) -> Option<u64> {
    let line = text
        .lines()
        .map(str::trim_start)
        .find(|l| l.starts_with("vllm:cache_config_info{"))?;
    let labels = &line["vllm:cache_config_info{".len()..];
    let labels = &labels[..closing_brace(labels)?];
    let label = |name: &str| -> Option<u64> {
        let at = labels.find(&format!("{name}=\""))? + name.len() + 2;
        let value = &labels[at..];
        value[..value.find('"')?].parse().ok()
    };
    let blocks = label("num_gpu_blocks")?;
    let size = label("block_size")?;
    blocks.checked_mul(size).filter(|&c| c > 0)
}

fn closing_brace(labels: &str) -> Option<usize> {
    let mut in_quotes = false;
    let mut escaped = false;
    for (i, c) in labels.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_quotes => escaped = true,
            '"' => in_quotes = !in_quotes,
            '}' if !in_quotes => return Some(i),
            _ => {}
        }
    }
    None
}

enum ScrapeFailure {
    Refused,
    /// 404, 405 or 501: the engine serves nothing at that path, which says nothing of its health.
    NotServed,
    Other,
}

/// How long a replica that serves no health endpoint goes unchecked before the next try (an
/// engine restarted in a version that has one is checked again within this).
const NOT_SERVED_RECHECK: Duration = Duration::from_secs(60);

/// GET `path` on `authority` within `timeout`: the body (at most `max_bytes`) of a 2xx answer.
async fn get(
    client: &ScrapeClient,
    authority: http::uri::Authority,
    path: &str,
    timeout: Duration,
    max_bytes: usize,
) -> Result<Bytes, ScrapeFailure> {
    let uri = http::Uri::builder()
        .scheme("http")
        .authority(authority)
        .path_and_query(path)
        .build()
        .map_err(|_| ScrapeFailure::Other)?;
    let fut = async {
        let resp = client.get(uri).await.map_err(|e| {
            if e.is_connect() {
                ScrapeFailure::Refused
            } else {
                ScrapeFailure::Other
            }
        })?;
        match resp.status().as_u16() {
            200..=299 => {}
            404 | 405 | 501 => return Err(ScrapeFailure::NotServed),
            _ => return Err(ScrapeFailure::Other),
        }
        Ok(Limited::new(resp.into_body(), max_bytes)
            .collect()
            .await
            .map_err(|_| ScrapeFailure::Other)?
            .to_bytes())
    };
    tokio::time::timeout(timeout, fut)
        .await
        .unwrap_or(Err(ScrapeFailure::Other))
}

async fn scrape_once(
    client: &ScrapeClient,
    replica: &ReplicaState,
    target: &ScrapeTarget,
    timeout: Duration,
) -> Result<String, ScrapeFailure> {
    let authority = match target.port {
        None => replica.authority.clone(),
        Some(port) => format!("{}:{port}", replica.authority.host())
            .parse()
            .map_err(|_| ScrapeFailure::Other)?,
    };
    let body = get(client, authority, &target.path, timeout, MAX_METRICS_BYTES).await?;
    String::from_utf8(body.to_vec()).map_err(|_| ScrapeFailure::Other)
}

/// A health endpoint's body is not read for meaning; a broken one is bounded all the same.
const MAX_HEALTH_BYTES: usize = 64 << 10;

/// Scrape one replica until it is removed (the publisher aborts the task) or the router stops
/// (the table channel closes). Settings are re-read from the current table every round, so a
/// reload changes them in place. This task is the only writer of the replica's engine load and
/// of its active health.
pub async fn run(replica: Arc<ReplicaState>, tables: TableReader, metrics: Arc<Metrics>) {
    let mut client: Option<(TimeoutsConfig, ScrapeClient)> = None;
    let mut next_check = Instant::now();
    let mut checking = false;
    // A successful scrape's duration, smoothed (one slow answer does not stretch the pause
    // for long); `None` before the first.
    let mut took: Option<Duration> = None;
    loop {
        if tables.closed() {
            return;
        }
        let table = tables.current();
        let cfg = table.config.scrape;
        let timeouts = table.config.timeouts;
        let active = table.config.health.active_path.clone();
        let active_every = Duration::from_millis(table.config.health.active_interval_ms);
        let learn = table
            .config
            .flow
            .learns_inflight()
            .then(|| table.config.flow.saturation.clone());
        drop(table);
        if client.as_ref().is_some_and(|(t, _)| *t != timeouts) {
            client = None;
        }
        let (_, http) = client.get_or_insert_with(|| (timeouts, build_client(&timeouts)));
        match active {
            Some(path) if Instant::now() >= next_check => {
                next_check = Instant::now() + active_every;
                checking = true;
                let result = get(
                    http,
                    replica.authority.clone(),
                    &path,
                    Duration::from_millis(cfg.timeout_ms),
                    MAX_HEALTH_BYTES,
                )
                .await;
                let label = match result {
                    // On by default, the check must not take out an engine that has no such
                    // endpoint: it is judged by its metrics and answers alone until it has one.
                    Err(ScrapeFailure::NotServed) => {
                        replica.health.clear_probe();
                        next_check = Instant::now() + NOT_SERVED_RECHECK;
                        "not_served"
                    }
                    result => {
                        let (ok, refused, label) = match result {
                            Ok(_) => (true, false, "ok"),
                            Err(ScrapeFailure::Refused) => (false, true, "refused"),
                            Err(_) => (false, false, "error"),
                        };
                        replica
                            .health
                            .on_probe(ok, refused, cfg.failures_before_unready);
                        label
                    }
                };
                metrics
                    .replicas
                    .health_checks
                    .get_or_create(&ResultLabels { result: label })
                    .inc();
            }
            Some(_) => {}
            None if checking => {
                checking = false;
                replica.health.clear_probe();
            }
            None => {}
        }
        if let Some(target) = replica.scrape_target() {
            let started = Instant::now();
            let result = scrape_once(
                http,
                &replica,
                &target,
                Duration::from_millis(cfg.timeout_ms),
            )
            .await;
            let now = Instant::now();
            let label = match result {
                Ok(text) => {
                    let sample = now.saturating_duration_since(started);
                    took = Some(took.map_or(sample, |t| t.mul_f64(0.7) + sample.mul_f64(0.3)));
                    replica.health.on_scrape_ok();
                    let load = parse_engine_load(&text, target.engine);
                    if let (Some(load), Some(bounds)) = (&load, &learn) {
                        replica.learn_inflight_limit(load, bounds);
                    }
                    replica.set_engine_load(load, now);
                    replica
                        .health
                        .on_engine_work(parse_work_total(&text, target.engine), now);
                    if let Some(capacity) = parse_kv_capacity(&text) {
                        replica.set_kv_capacity_tokens(capacity);
                    }
                    "ok"
                }
                Err(ScrapeFailure::Refused) => {
                    replica
                        .health
                        .on_scrape_failed(true, cfg.failures_before_unready);
                    "refused"
                }
                Err(ScrapeFailure::NotServed | ScrapeFailure::Other) => {
                    replica
                        .health
                        .on_scrape_failed(false, cfg.failures_before_unready);
                    "error"
                }
            };
            metrics
                .replicas
                .scrapes
                .get_or_create(&ResultLabels { result: label })
                .inc();
        }
        let pause = pause(&cfg, took.unwrap_or_default());
        replica.set_scrape_every(pause);
        tokio::time::sleep(pause).await;
    }
}

/// The pause before the next scrape: `interval_ms`, stretched so that answering scrapes that
/// take `took` each is at most `engine_share` of the engine's time, up to `max_interval_ms`.
/// An engine's time to answer is what it spends on it (the event loop that renders the page
/// serves requests too), so the duration is a fair stand-in for its cost.
pub fn pause(cfg: &ScrapeConfig, took: Duration) -> Duration {
    let fastest = Duration::from_millis(cfg.interval_ms);
    let slowest = Duration::from_millis(cfg.max_interval_ms).max(fastest);
    took.div_f64(cfg.engine_share.clamp(f64::MIN_POSITIVE, 1.0))
        .clamp(fastest, slowest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_stretches_so_that_scrapes_cost_the_engine_its_share_at_most() {
        let cfg = ScrapeConfig::default();
        let ms = Duration::from_millis;
        // A fast page (the simulator's, or a remote engine's small one): the interval.
        assert_eq!(pause(&cfg, Duration::ZERO), ms(75));
        assert_eq!(pause(&cfg, ms(1)), ms(75));
        // vLLM on a CPU, 4 ms a page: 200 ms, 2% of its time.
        assert_eq!(pause(&cfg, ms(4)), ms(200));
        // Never past the longest pause.
        assert_eq!(pause(&cfg, ms(400)), ms(500));
        let every_time = ScrapeConfig {
            engine_share: 1.0,
            ..cfg
        };
        assert_eq!(pause(&every_time, ms(40)), ms(75));
        assert_eq!(pause(&every_time, ms(120)), ms(120));
    }

    const VLLM: &str = r#"# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 3.0
vllm:num_requests_running{engine="1",model_name="tiny"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny"} 7.0
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="t}i\"ny"} 0.5
vllm:num_requests_running_total 99
"#;

    #[test]
    fn parses_vllm_series() {
        let load = parse_engine_load(VLLM, Engine::Vllm).unwrap();
        assert_eq!(load.running, 5.0);
        assert_eq!(load.waiting, 7.0);
        assert_eq!(load.kv_cache_usage, 0.5);
    }

    #[test]
    fn work_counters_sum_prompt_and_generated_tokens() {
        let page = "# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{engine=\"0\"} 100.0\nvllm:prompt_tokens_total{engine=\"1\"} 20.0\nvllm:generation_tokens_total{engine=\"0\"} 7\nvllm:num_requests_running 1\n";
        assert_eq!(parse_work_total(page, Engine::Vllm), Some(127.0));
        assert_eq!(parse_work_total(page, Engine::Sglang), None);
        assert_eq!(
            parse_work_total("sglang:generation_tokens_total 5\n", Engine::Sglang),
            Some(5.0)
        );
        assert_eq!(parse_work_total(VLLM, Engine::Vllm), None);
    }

    #[test]
    fn parses_sglang_series() {
        let text = "sglang:num_running_reqs{model_name=\"m\"} 4\nsglang:num_queue_reqs{model_name=\"m\"} 1\nsglang:token_usage{model_name=\"m\"} 0.75\n";
        let load = parse_engine_load(text, Engine::Sglang).unwrap();
        assert_eq!(
            (load.running, load.waiting, load.kv_cache_usage),
            (4.0, 1.0, 0.75)
        );
        assert!(parse_engine_load(text, Engine::Vllm).is_none());
    }

    #[test]
    fn kv_capacity_is_blocks_times_block_size() {
        let page = "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\nvllm:cache_config_info{block_size=\"128\",cache_dtype=\"auto\",num_gpu_blocks=\"64\",prefix_caching_hash_algo=\"sha256\"} 1.0\n";
        assert_eq!(parse_kv_capacity(page), Some(8192));
        assert_eq!(parse_kv_capacity(VLLM), None);
        assert_eq!(
            parse_kv_capacity(
                "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"None\"} 1"
            ),
            None
        );
    }

    #[test]
    fn unknown_or_broken_pages_give_none() {
        assert!(parse_engine_load("{\"not\":\"metrics\"}", Engine::Vllm).is_none());
        assert!(parse_engine_load("vllm:num_requests_running{x=\"1\" 3", Engine::Vllm).is_none());
        assert!(parse_engine_load("vllm:num_requests_running NaN", Engine::Vllm).is_none());
    }
}
