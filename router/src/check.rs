//! `warmpath-router check --config FILE`: what a configuration means before it serves. It is
//! validated as the router would at start, summarised, and sample prompts are routed through the
//! real parse, index and scheduler against its replicas (all taken as ready and idle, since
//! none is asked): each prompt's decision with every candidate's scores. The prompts are routed
//! in order and remembered, so a prompt that repeats an earlier one's prefix shows the match.

use crate::choice::{Choice, Indexes};
use crate::config::{Config, Role};
use crate::errors::ApiError;
use crate::metrics::Metrics;
use crate::request::Endpoint;
use crate::sessions::{Sessions, TokenKey};
use crate::state::index::RouterIndex;
use crate::state::replica::ReplicaRegistry;
use crate::state::table::Table;
use std::fmt::Write;
use std::sync::Arc;

/// Prompts routed when none are given: a shared system prompt with two questions, then the
/// first again (it should follow itself), so that the output shows a cold choice and a match.
pub const SAMPLE_PROMPTS: [&str; 3] = [
    "What is the capital of France?",
    "How many legs does a spider have?",
    "What is the capital of France?",
];

/// The system prompt the sample prompts share (a few blocks long, so that it can match).
const SAMPLE_SYSTEM: &str = "You are a careful assistant. Answer briefly and precisely, name \
your sources when you have them, say so when you do not know, and never invent facts. Keep \
every answer under fifty words unless asked for more, and use plain language throughout. When a question is ambiguous, say which reading you answer. When a question asks for a number, give the number first and the explanation after it. When you are given a document, quote it rather than paraphrase it, and say where in it the quote is found.";

#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("the configuration serves no model{0}")]
    NoModel(String),
    #[error("sample prompt {index}: {message}")]
    Route { index: usize, message: String },
}

/// The report for `config` (already loaded and validated): a summary, then each of `prompts`
/// (chat messages after the sample system prompt; [`SAMPLE_PROMPTS`] when empty) routed for
/// `model` (the first model served when `None`).
pub fn report(
    config: Config,
    model: Option<&str>,
    prompts: &[String],
) -> Result<String, CheckError> {
    let mut out = String::new();
    summarise(&config, &mut out);
    let model = match model {
        Some(m) => m.to_owned(),
        None => config
            .pools
            .iter()
            .find(|p| p.role != Role::Prefill)
            .and_then(|p| p.models.first())
            .cloned()
            .ok_or_else(|| CheckError::NoModel(String::new()))?,
    };
    let config = Arc::new(config);
    let mut registry = ReplicaRegistry::default();
    registry.sync(&config);
    let table = Table::build(config.clone(), &registry, &Metrics::new());
    if !table.serves(&model) {
        return Err(CheckError::NoModel(format!(" named {model:?}")));
    }
    let indexes = Indexes {
        approx: Arc::new(parking_lot::Mutex::new(RouterIndex::new(
            config.index.max_bytes_per_replica,
            config.index.pending_limits(),
        ))),
        precise: crate::state::index::precise(&config.index),
        sessions: Arc::new(Sessions::new(TokenKey::random(), &config.sessions)),
        peers: None,
    };
    let samples: Vec<String> = if prompts.is_empty() {
        SAMPLE_PROMPTS.iter().map(|p| (*p).to_owned()).collect()
    } else {
        prompts.to_vec()
    };
    let _ = writeln!(
        out,
        "\nRouting {} sample prompt(s) for model {model:?} (replicas taken as ready and idle; \
         each prompt is remembered, as the router would):",
        samples.len()
    );
    for (i, prompt) in samples.iter().enumerate() {
        let route_err = |e: ApiError| CheckError::Route {
            index: i + 1,
            message: e.message,
        };
        let body = serde_json::json!({
            "model": model,
            "messages": [
                {"role": "system", "content": SAMPLE_SYSTEM},
                {"role": "user", "content": prompt},
            ],
        });
        let body = serde_json::to_vec(&body).expect("JSON values serialize");
        // As the proxy parses a request (its tokenizer, its adapter's and salt's keys).
        let features = crate::api::features::features(
            Endpoint::ChatCompletions,
            &body,
            &http::HeaderMap::new(),
            &table,
        )
        .map_err(|r| route_err(r.error))?;
        let routed = Choice {
            seed: i as u64,
            explain: true,
            ..Choice::serving(&indexes, &table, &features).map_err(route_err)?
        }
        .choose()
        .map_err(route_err)?;
        let _ = writeln!(out, "\n{}. {prompt:?}", i + 1);
        if let Some(e) = &routed.explanation {
            let _ = writeln!(
                out,
                "   → {} ({}; policy {}; {} prompt tokens, {} blocks, {} matched there{})",
                e.chosen,
                e.reason,
                e.policy,
                e.prompt_tokens,
                e.blocks,
                routed.decision.matched_blocks,
                if e.spilled { "; spilled" } else { "" }
            );
            let _ = writeln!(
                out,
                "   {:<24} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>9}",
                "candidate", "matched", "score", "prefix", "load", "queue", "kv", "ttft ms"
            );
            for c in &e.candidates {
                let mark = if c.chosen { "→ " } else { "  " };
                match &c.scores {
                    Some(s) => {
                        let _ = writeln!(
                            out,
                            "   {mark}{:<22} {:>7} {:>7.3} {:>7.3} {:>7.3} {:>7.3} {:>7.3} {:>9.2}",
                            c.replica,
                            s.matched_blocks,
                            s.score,
                            s.prefix,
                            s.load,
                            s.queue,
                            s.kv_cache,
                            s.predicted_ttft_s * 1e3
                        );
                    }
                    None => {
                        let _ = writeln!(
                            out,
                            "   {mark}{:<22} not considered: {}",
                            c.replica,
                            c.skipped.unwrap_or("?")
                        );
                    }
                }
            }
        }
    }
    Ok(out)
}

/// What the file configures, briefly.
fn summarise(config: &Config, out: &mut String) {
    let _ = writeln!(out, "Configuration is valid.");
    let _ = writeln!(
        out,
        "API on {}{}, admin on {}{}",
        config.listen,
        if config.tls.is_some() { " (TLS)" } else { "" },
        config.admin,
        if config.admin_token_file.is_some() {
            " (token required)"
        } else {
            ""
        }
    );
    let s = &config.scheduling;
    let _ = writeln!(
        out,
        "Scheduling: policy {}; weights prefix {} load {} queue {} kv_cache {}; prefix blocks of {} bytes",
        s.policy.name(),
        s.weights.prefix,
        s.weights.load,
        s.weights.queue,
        s.weights.kv_cache,
        config.index.block_bytes
    );
    for p in &config.pools {
        let role = match p.role {
            Role::Prefill => "prefill",
            Role::Decode => "decode",
            Role::Both => "serving",
        };
        let _ = writeln!(
            out,
            "Pool {:?} ({role}) for {}: {} replica(s){}{}",
            p.name,
            p.models.join(", "),
            p.replicas.len(),
            if p.kv_events.is_some() {
                ", KV events"
            } else {
                ""
            },
            if p.weights.is_some() {
                ", own weights"
            } else {
                ""
            }
        );
        for r in &p.replicas {
            let _ = writeln!(out, "  {:<24} {}", r.name, r.url);
        }
    }
    if config.pools.is_empty() {
        let _ = writeln!(
            out,
            "No pools in the file (in Kubernetes mode the cluster's InferencePools add them)."
        );
    }
    let _ = writeln!(
        out,
        "Explanations: x-warmpath-explain header {}; {} recent decisions kept",
        if config.explain.header {
            "honoured"
        } else {
            "ignored"
        },
        config.explain.recent
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = "
pools:
  - name: main
    models: [tiny]
    replicas:
      - {name: r0, url: 'http://127.0.0.1:1'}
      - {name: r1, url: 'http://127.0.0.1:2'}
      - {name: r2, url: 'http://127.0.0.1:3'}
";

    #[test]
    fn a_repeated_prompt_follows_its_first_and_every_replica_is_scored() {
        let config = Config::parse(CONFIG).unwrap();
        let text = report(config, None, &[]).unwrap();
        assert!(text.starts_with("Configuration is valid."), "{text}");
        assert!(
            text.contains("Pool \"main\" (serving) for tiny: 3 replica(s)"),
            "{text}"
        );
        let chosen: Vec<&str> = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("→ "))
            .filter(|l| l.contains('('))
            .map(|l| l.split_whitespace().next().unwrap())
            .collect();
        assert_eq!(chosen.len(), 3, "{text}");
        assert_eq!(chosen[0], chosen[2], "the repeat follows the first: {text}");
        // Scored in each of the three decisions.
        for r in ["r0", "r1", "r2"] {
            let rows = text
                .lines()
                .map(|l| l.trim().trim_start_matches("→ "))
                .filter(|l| {
                    l.starts_with(&format!("{r} ")) && !l.contains("http") && !l.contains('(')
                })
                .count();
            assert_eq!(rows, 3, "{r}: {text}");
        }
        // (blocks, matched) per decision: the first cold, the second matches the shared system
        // prompt, the repeat all of its blocks.
        let seen: Vec<(u32, u32)> = text
            .lines()
            .filter(|l| l.contains(" matched there"))
            .map(|l| {
                let n = |key: &str| -> u32 {
                    let at = l.find(key).unwrap();
                    l[..at].rsplit(' ').next().unwrap().parse().unwrap()
                };
                (n(" blocks"), n(" matched there"))
            })
            .collect();
        assert_eq!(seen.len(), 3, "{text}");
        assert_eq!(seen[0].1, 0, "{text}");
        assert!(seen[1].1 >= 1 && seen[1].1 < seen[1].0, "{seen:?}: {text}");
        assert_eq!(seen[2].1, seen[2].0, "{text}");
    }

    #[test]
    fn an_unknown_model_is_said() {
        let config = Config::parse(CONFIG).unwrap();
        let err = report(config, Some("gpt-9"), &[]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the configuration serves no model named \"gpt-9\""
        );
    }
}
