//! `/metrics`: Prometheus text with vLLM 0.32's metric names, labels and help texts.
//!
//! Hand-written exposition: the names carry colons (`vllm:...`) and the label sets follow
//! vLLM exactly (`engine`, `model_name`, `finished_reason`), which a generic registry makes
//! awkward. Only what a router reads is exposed.

use std::fmt::Write;

use crate::engine::Engine;

/// vLLM's buckets for `vllm:time_to_first_token_seconds`.
pub const TTFT_BUCKETS: [f64; 22] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];

/// A cumulative-at-render histogram over [`TTFT_BUCKETS`].
#[derive(Debug, Clone, Default)]
pub struct Histogram {
    counts: [u64; TTFT_BUCKETS.len() + 1],
    sum: f64,
    count: u64,
}

impl Histogram {
    pub fn observe(&mut self, v: f64) {
        let i = TTFT_BUCKETS
            .iter()
            .position(|b| v <= *b)
            .unwrap_or(TTFT_BUCKETS.len());
        self.counts[i] += 1;
        self.sum += v;
        self.count += 1;
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn sum(&self) -> f64 {
        self.sum
    }
}

fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// Python-style float text, as vLLM's client library prints it.
fn num(v: f64) -> String {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.1}")
    } else {
        format!("{v}")
    }
}

fn histogram(out: &mut String, name: &str, help: &str, model: &str, h: &Histogram) {
    header(out, name, help, "histogram");
    let labels = format!("engine=\"0\",model_name=\"{model}\"");
    let mut cum = 0;
    // vLLM sorts labels by name, so `le` sits between `engine` and `model_name`.
    for (i, b) in TTFT_BUCKETS.iter().enumerate() {
        cum += h.counts[i];
        let _ = writeln!(
            out,
            "{name}_bucket{{engine=\"0\",le=\"{}\",model_name=\"{model}\"}} {}",
            num(*b),
            num(cum as f64)
        );
    }
    let _ = writeln!(
        out,
        "{name}_bucket{{engine=\"0\",le=\"+Inf\",model_name=\"{model}\"}} {}",
        num(h.count as f64)
    );
    let _ = writeln!(out, "{name}_count{{{labels}}} {}", num(h.count as f64));
    let _ = writeln!(out, "{name}_sum{{{labels}}} {}", num(h.sum));
}

/// Renders one replica's metrics.
pub fn render(e: &Engine, model: &str) -> String {
    let l = format!("engine=\"0\",model_name=\"{model}\"");
    let s = &e.stats;
    let c = e.config();
    let mut o = String::with_capacity(4096);
    let gauge = |o: &mut String, name: &str, help: &str, v: f64| {
        header(o, name, help, "gauge");
        let _ = writeln!(o, "{name}{{{l}}} {}", num(v));
    };
    let counter = |o: &mut String, name: &str, help: &str, v: u64| {
        header(o, name, help, "counter");
        let _ = writeln!(o, "{name}{{{l}}} {}", num(v as f64));
    };
    gauge(
        &mut o,
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        e.num_running() as f64,
    );
    gauge(
        &mut o,
        "vllm:num_requests_waiting",
        "Number of requests waiting to be processed.",
        e.num_waiting() as f64,
    );
    gauge(
        &mut o,
        "vllm:kv_cache_usage_perc",
        "KV-cache usage. 1 means 100 percent usage.",
        e.cache().usage(),
    );
    counter(
        &mut o,
        "vllm:prefix_cache_queries_total",
        "Prefix cache queries, in terms of number of queried tokens.",
        s.prefix_cache_queries,
    );
    counter(
        &mut o,
        "vllm:prefix_cache_hits_total",
        "Prefix cache hits, in terms of number of cached tokens.",
        s.prefix_cache_hits,
    );
    counter(
        &mut o,
        "vllm:num_preemptions_total",
        "Cumulative number of preemption from the engine.",
        s.preemptions,
    );
    counter(
        &mut o,
        "vllm:prompt_tokens_total",
        "Number of prefill tokens processed.",
        s.prompt_tokens,
    );
    counter(
        &mut o,
        "vllm:generation_tokens_total",
        "Number of generation tokens processed.",
        s.generation_tokens,
    );
    header(
        &mut o,
        "vllm:request_success_total",
        "Count of successfully processed requests.",
        "counter",
    );
    for (reason, v) in [
        ("stop", 0),
        ("length", s.success_length),
        ("abort", s.success_abort),
    ] {
        let _ = writeln!(
            o,
            "vllm:request_success_total{{engine=\"0\",finished_reason=\"{reason}\",model_name=\"{model}\"}} {}",
            num(v as f64)
        );
    }
    histogram(
        &mut o,
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        model,
        &s.ttft,
    );
    histogram(
        &mut o,
        "vllm:e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.",
        model,
        &s.e2e,
    );
    header(
        &mut o,
        "vllm:cache_config_info",
        "Information of the LLMEngine CacheConfig",
        "gauge",
    );
    let _ = writeln!(
        o,
        "vllm:cache_config_info{{block_size=\"{}\",enable_prefix_caching=\"True\",engine=\"0\",num_gpu_blocks=\"{}\",prefix_caching_hash_algo=\"xxh3\"}} 1.0",
        c.block_size, c.kv_blocks
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::EngineConfig;
    use std::sync::Arc;

    #[test]
    fn exposes_vllm_names_and_labels() {
        let mut e = Engine::new(
            EngineConfig::default(),
            Arc::new(crate::tokens::Tokenizer::bytes()),
            false,
        );
        e.stats.ttft.observe(0.003);
        e.stats.ttft.observe(100.0);
        let text = render(&e, "tiny");
        for line in [
            "vllm:num_requests_running{engine=\"0\",model_name=\"tiny\"} 0.0",
            "vllm:num_requests_waiting{engine=\"0\",model_name=\"tiny\"} 0.0",
            "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"tiny\"} 0.0",
            "vllm:prefix_cache_queries_total{engine=\"0\",model_name=\"tiny\"} 0.0",
            "vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"tiny\"} 0.0",
            "vllm:prompt_tokens_total{engine=\"0\",model_name=\"tiny\"} 0.0",
            "vllm:generation_tokens_total{engine=\"0\",model_name=\"tiny\"} 0.0",
            "vllm:request_success_total{engine=\"0\",finished_reason=\"length\",model_name=\"tiny\"} 0.0",
            "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"0.001\",model_name=\"tiny\"} 0.0",
            "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"0.005\",model_name=\"tiny\"} 1.0",
            "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"2560.0\",model_name=\"tiny\"} 2.0",
            "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"+Inf\",model_name=\"tiny\"} 2.0",
            "vllm:time_to_first_token_seconds_count{engine=\"0\",model_name=\"tiny\"} 2.0",
            "# TYPE vllm:time_to_first_token_seconds histogram",
            "# TYPE vllm:prefix_cache_hits_total counter",
            "# TYPE vllm:kv_cache_usage_perc gauge",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
        }
        let info = text
            .lines()
            .find(|l| l.starts_with("vllm:cache_config_info{"))
            .unwrap();
        assert!(info.contains("block_size=\"16\"") && info.contains("num_gpu_blocks=\"8192\""));
    }
}
