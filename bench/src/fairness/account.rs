//! What a fairness run measured, from its per-request records: pure functions, no I/O.
//!
//! Two windows over one time span `[start, end)` (the run after its warm-up):
//! - by **send** time: the requests a tenant sent in the window, and what became of each (ok,
//!   refused by status and by the router's `x-warmpath-dropped-reason`, other errors, still
//!   unanswered when the run stopped, skipped at the generator's in-flight bound), and TTFT of
//!   the ok ones. The run keeps offering load after the window until these are answered, so
//!   the last requests of the window see the same load as the first.
//! - by **completion** time: the requests that completed successfully in the window and the
//!   tokens they were served (prompt + output tokens, from the server's usage block). Shares
//!   and Jain's index are computed on these.
//!
//! Jain's index of `x_1 … x_n` is `(Σx)² / (n Σx²)`: 1 when all are equal, `1/n` when one takes
//! everything. Here `x_i` is tenant i's tokens served divided by its weight, so a perfect
//! weighted share gives 1.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::client::ErrorKind;
use crate::stats::Summary;

use super::spec::TenantSpec;

/// How one request ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Fate {
    /// Answered in full; `ttft_s` is `None` when no chunk carried text.
    Ok {
        ttft_s: Option<f64>,
        prompt_tokens: u64,
        output_tokens: u64,
    },
    /// Refused (a non-2xx status; `reason` is the dropped-reason header) or failed.
    Failed {
        kind: ErrorKind,
        reason: Option<String>,
    },
    /// Still unanswered when the run stopped (it was cancelled then).
    Unfinished,
    /// An open-loop arrival not sent: the tenant had `max_in_flight` requests unanswered.
    Skipped,
}

/// One request (or skipped arrival) of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// Index of the tenant in the run's tenant list.
    pub tenant: usize,
    /// Seconds from the start of the run to sending (to the arrival, when skipped).
    pub start_s: f64,
    /// Seconds from the start of the run to the end of the answer (or to the cancellation).
    pub end_s: f64,
    pub fate: Fate,
}

/// The measured span of a run, seconds from its start.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Window {
    pub start_s: f64,
    pub end_s: f64,
}

impl Window {
    pub fn contains(&self, t: f64) -> bool {
        t >= self.start_s && t < self.end_s
    }

    pub fn len_s(&self) -> f64 {
        (self.end_s - self.start_s).max(0.0)
    }
}

/// The requests a tenant sent within the window, by what became of them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SentInWindow {
    pub sent: u64,
    pub ok: u64,
    /// Non-2xx answers by status code (`"429"`).
    pub refused_by_status: BTreeMap<String, u64>,
    /// 429 answers by their `x-warmpath-dropped-reason` (`"none"` without the header).
    pub refused_by_reason: BTreeMap<String, u64>,
    /// Failures other than a status: `timeout`, `connect`, `io`, `malformed_stream`, …
    pub errors_by_kind: BTreeMap<String, u64>,
    /// Still unanswered when the run stopped.
    pub unfinished: u64,
    /// Arrivals not sent because the tenant had `max_in_flight` requests unanswered (not in
    /// `sent`).
    pub skipped: u64,
}

impl SentInWindow {
    /// Requests sent that did not end in a full answer.
    pub fn failed(&self) -> u64 {
        self.sent - self.ok
    }
}

/// What a tenant was served: requests that completed successfully within the window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Served {
    pub requests: u64,
    pub prompt_tokens: u64,
    pub output_tokens: u64,
    /// Prompt plus output tokens.
    pub tokens: u64,
    pub requests_per_s: f64,
    pub tokens_per_s: f64,
}

/// One tenant's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TenantReport {
    pub spec: TenantSpec,
    /// Requests sent during the whole run (warm-up and drain included).
    pub sent_total: u64,
    pub window: SentInWindow,
    /// TTFT of the requests sent in the window and answered in full, milliseconds.
    pub ttft_ms: Summary,
    /// How long refusals (non-2xx answers to requests sent in the window) took, milliseconds.
    pub refusal_ms: Summary,
    /// TTFT p99 of every request sent in the window, a request that never got a first token
    /// (refused, failed, unfinished) counting as infinitely late: `None` when the p99 falls on
    /// such a request (or nothing was sent).
    pub ttft_p99_ms_counting_failures: Option<f64>,
    pub served: Served,
    /// Of the tokens served to all tenants.
    pub token_share: f64,
    /// Of the requests served to all tenants.
    pub request_share: f64,
    /// weight / Σ weights.
    pub target_share: f64,
    /// token_share / target_share − 1 (−1 when nothing was served at all).
    pub token_share_error: f64,
}

/// The run's fairness figures over all its tenants.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FairnessSummary {
    /// Jain's index of tokens served / weight (`None` when nothing was served).
    pub jain_tokens: Option<f64>,
    /// Jain's index of requests served / weight.
    pub jain_requests: Option<f64>,
    /// The largest |token_share / target_share − 1| over the tenants.
    pub max_abs_token_share_error: f64,
    pub tokens_per_s: f64,
    pub requests_per_s: f64,
}

/// Jain's fairness index of `x` (`None` for an empty slice or when every value is 0).
pub fn jain(x: &[f64]) -> Option<f64> {
    let sum: f64 = x.iter().sum();
    let squares: f64 = x.iter().map(|v| v * v).sum();
    (!x.is_empty() && squares > 0.0).then(|| sum * sum / (x.len() as f64 * squares))
}

/// Each value's share of the total (all 0 when the total is 0).
pub fn shares(values: &[f64]) -> Vec<f64> {
    let total: f64 = values.iter().sum();
    values
        .iter()
        .map(|v| if total > 0.0 { v / total } else { 0.0 })
        .collect()
}

/// The `q` quantile of `sorted` (ascending, `+∞` allowed at the top) with linear
/// interpolation; `None` when empty or when it touches an infinite value.
pub fn quantile_or_infinite(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    if !sorted[hi].is_finite() {
        return None;
    }
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64))
}

/// Every tenant's figures and the run's fairness, from the records of one run.
pub fn account(
    specs: &[TenantSpec],
    records: &[Record],
    window: Window,
) -> (Vec<TenantReport>, FairnessSummary) {
    struct Acc {
        sent_total: u64,
        window: SentInWindow,
        ttft_ms: Vec<f64>,
        refusal_ms: Vec<f64>,
        /// TTFT of every request sent in the window, +∞ for those without a first token.
        ttft_or_inf: Vec<f64>,
        served: Served,
    }
    let mut acc: Vec<Acc> = specs
        .iter()
        .map(|_| Acc {
            sent_total: 0,
            window: SentInWindow::default(),
            ttft_ms: Vec::new(),
            refusal_ms: Vec::new(),
            ttft_or_inf: Vec::new(),
            served: Served::default(),
        })
        .collect();
    for r in records {
        let Some(a) = acc.get_mut(r.tenant) else {
            continue;
        };
        let sent = !matches!(r.fate, Fate::Skipped);
        a.sent_total += u64::from(sent);
        if window.contains(r.start_s) {
            let w = &mut a.window;
            w.sent += u64::from(sent);
            match &r.fate {
                Fate::Ok { ttft_s, .. } => {
                    w.ok += 1;
                    let ms = ttft_s.map(|s| s * 1e3);
                    a.ttft_ms.extend(ms);
                    a.ttft_or_inf.push(ms.unwrap_or(f64::INFINITY));
                }
                Fate::Failed { kind, reason } => {
                    match kind {
                        ErrorKind::Status(code) => {
                            a.refusal_ms.push((r.end_s - r.start_s) * 1e3);
                            *w.refused_by_status.entry(code.to_string()).or_default() += 1;
                            if *code == 429 {
                                let reason = reason.clone().unwrap_or_else(|| "none".into());
                                *w.refused_by_reason.entry(reason).or_default() += 1;
                            }
                        }
                        other => *w.errors_by_kind.entry(other.key()).or_default() += 1,
                    }
                    a.ttft_or_inf.push(f64::INFINITY);
                }
                Fate::Unfinished => {
                    w.unfinished += 1;
                    a.ttft_or_inf.push(f64::INFINITY);
                }
                Fate::Skipped => w.skipped += 1,
            }
        }
        if let Fate::Ok {
            prompt_tokens,
            output_tokens,
            ..
        } = r.fate
        {
            if window.contains(r.end_s) {
                let s = &mut a.served;
                s.requests += 1;
                s.prompt_tokens += prompt_tokens;
                s.output_tokens += output_tokens;
                s.tokens += prompt_tokens + output_tokens;
            }
        }
    }
    let len = window.len_s();
    let per_s = |n: u64| if len > 0.0 { n as f64 / len } else { 0.0 };
    for a in &mut acc {
        a.served.requests_per_s = per_s(a.served.requests);
        a.served.tokens_per_s = per_s(a.served.tokens);
    }
    let weights: Vec<f64> = specs.iter().map(|s| s.weight).collect();
    let tokens: Vec<f64> = acc.iter().map(|a| a.served.tokens as f64).collect();
    let requests: Vec<f64> = acc.iter().map(|a| a.served.requests as f64).collect();
    let per_weight =
        |v: &[f64]| -> Vec<f64> { v.iter().zip(&weights).map(|(x, w)| x / w).collect() };
    let token_shares = shares(&tokens);
    let request_shares = shares(&requests);
    let targets = shares(&weights);
    let mut max_err = 0.0f64;
    let reports = specs
        .iter()
        .zip(acc)
        .enumerate()
        .map(|(i, (spec, mut a))| {
            let error = if targets[i] > 0.0 {
                token_shares[i] / targets[i] - 1.0
            } else {
                0.0
            };
            max_err = max_err.max(error.abs());
            a.ttft_or_inf.sort_by(f64::total_cmp);
            TenantReport {
                spec: spec.clone(),
                sent_total: a.sent_total,
                ttft_p99_ms_counting_failures: quantile_or_infinite(&a.ttft_or_inf, 0.99),
                ttft_ms: Summary::of(&mut a.ttft_ms),
                refusal_ms: Summary::of(&mut a.refusal_ms),
                window: a.window,
                served: a.served,
                token_share: token_shares[i],
                request_share: request_shares[i],
                target_share: targets[i],
                token_share_error: error,
            }
        })
        .collect();
    let summary = FairnessSummary {
        jain_tokens: jain(&per_weight(&tokens)),
        jain_requests: jain(&per_weight(&requests)),
        max_abs_token_share_error: max_err,
        tokens_per_s: per_s(tokens.iter().sum::<f64>() as u64),
        requests_per_s: per_s(requests.iter().sum::<f64>() as u64),
    };
    (reports, summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, weight: f64) -> TenantSpec {
        format!("name={name},concurrency=1,weight={weight}")
            .parse()
            .unwrap()
    }

    fn ok(tenant: usize, start_s: f64, end_s: f64, ttft_s: f64, prompt: u64) -> Record {
        Record {
            tenant,
            start_s,
            end_s,
            fate: Fate::Ok {
                ttft_s: Some(ttft_s),
                prompt_tokens: prompt,
                output_tokens: 10,
            },
        }
    }

    fn failed(tenant: usize, start_s: f64, kind: ErrorKind, reason: Option<&str>) -> Record {
        Record {
            tenant,
            start_s,
            end_s: start_s + 0.001,
            fate: Fate::Failed {
                kind,
                reason: reason.map(str::to_owned),
            },
        }
    }

    #[test]
    fn jain_index() {
        assert_eq!(jain(&[]), None);
        assert_eq!(jain(&[0.0, 0.0]), None);
        assert!((jain(&[3.0, 3.0, 3.0]).unwrap() - 1.0).abs() < 1e-12);
        // One of n takes everything: 1/n.
        assert!((jain(&[5.0, 0.0, 0.0, 0.0]).unwrap() - 0.25).abs() < 1e-12);
        // (1 + 7)² / (2 (1 + 49)) = 0.64: equal requests, one tenant's 7× larger.
        assert!((jain(&[1.0, 7.0]).unwrap() - 0.64).abs() < 1e-12);
    }

    #[test]
    fn shares_and_infinite_quantiles() {
        assert_eq!(shares(&[1.0, 3.0]), vec![0.25, 0.75]);
        assert_eq!(shares(&[0.0, 0.0]), vec![0.0, 0.0]);
        let v = [1.0, 2.0, 3.0, f64::INFINITY];
        assert_eq!(quantile_or_infinite(&v, 0.0), Some(1.0));
        assert_eq!(quantile_or_infinite(&v, 0.5), Some(2.5));
        assert_eq!(quantile_or_infinite(&v, 0.99), None);
        assert_eq!(quantile_or_infinite(&[], 0.5), None);
        let hundred: Vec<f64> = (1..=100).map(f64::from).collect();
        assert!((quantile_or_infinite(&hundred, 0.99).unwrap() - 99.01).abs() < 1e-9);
    }

    /// The window [10, 20): sends are judged by start time, tokens by completion time.
    #[test]
    fn window_accounting() {
        let specs = [spec("a", 1.0), spec("b", 3.0)];
        let w = Window {
            start_s: 10.0,
            end_s: 20.0,
        };
        let records = vec![
            // Sent in the warm-up, completed in the window: tokens count, the send does not.
            ok(0, 9.0, 11.0, 0.5, 90),
            // Sent and completed in the window.
            ok(0, 12.0, 13.0, 0.1, 90),
            // Sent in the window, completed after it: the send and its TTFT count, tokens not.
            ok(0, 19.5, 21.0, 0.3, 90),
            // Sent after the window (drain): nothing but the total.
            ok(0, 20.0, 20.5, 0.2, 90),
            failed(0, 15.0, ErrorKind::Status(429), Some("queue-full")),
            failed(0, 15.5, ErrorKind::Status(429), None),
            failed(0, 16.0, ErrorKind::Status(503), None),
            failed(0, 16.5, ErrorKind::Timeout, None),
            Record {
                tenant: 0,
                start_s: 17.0,
                end_s: 30.0,
                fate: Fate::Unfinished,
            },
            Record {
                tenant: 0,
                start_s: 17.5,
                end_s: 17.5,
                fate: Fate::Skipped,
            },
            ok(1, 11.0, 12.0, 0.2, 290),
            ok(1, 12.0, 19.0, 0.4, 290),
            ok(1, 13.0, 19.9, 0.6, 290),
        ];
        let (t, s) = account(&specs, &records, w);
        let a = &t[0];
        assert_eq!(a.sent_total, 9);
        assert_eq!((a.window.sent, a.window.ok), (7, 2));
        assert_eq!(a.window.failed(), 5);
        assert_eq!(a.window.refused_by_status["429"], 2);
        assert_eq!(a.window.refused_by_status["503"], 1);
        assert_eq!(a.window.refused_by_reason["queue-full"], 1);
        assert_eq!(a.window.refused_by_reason["none"], 1);
        assert_eq!(a.window.errors_by_kind["timeout"], 1);
        assert_eq!((a.window.unfinished, a.window.skipped), (1, 1));
        assert_eq!(a.ttft_ms.count, 2);
        // Three refusals (429, 429, 503), each answered in 1 ms.
        assert_eq!(a.refusal_ms.count, 3);
        assert!((a.refusal_ms.max.unwrap() - 1.0).abs() < 1e-6);
        assert!((a.ttft_ms.p50.unwrap() - 200.0).abs() < 1e-9);
        // 7 sent, 5 without a first token: the p99 is infinite.
        assert_eq!(a.ttft_p99_ms_counting_failures, None);
        assert_eq!(a.served.requests, 2);
        assert_eq!(a.served.tokens, 200);
        assert!((a.served.tokens_per_s - 20.0).abs() < 1e-9);

        let b = &t[1];
        assert_eq!((b.window.sent, b.window.ok, b.served.requests), (3, 3, 3));
        assert!((b.ttft_p99_ms_counting_failures.unwrap() - 596.0).abs() < 1e-9);
        assert_eq!(b.served.tokens, 900);
        // Shares: 200 : 900 tokens, 2 : 3 requests; targets 1/4 and 3/4.
        assert!((a.token_share - 200.0 / 1100.0).abs() < 1e-12);
        assert!((b.request_share - 0.6).abs() < 1e-12);
        assert!((a.target_share - 0.25).abs() < 1e-12);
        assert!((a.token_share_error - (800.0 / 1100.0 - 1.0)).abs() < 1e-12);
        // Per weight: 200 and 300 tokens; 2 and 1 requests.
        assert!((s.jain_tokens.unwrap() - 250_000.0 / (2.0 * 130_000.0)).abs() < 1e-12);
        assert!((s.jain_requests.unwrap() - 0.9).abs() < 1e-12);
        assert!((s.max_abs_token_share_error - (1.0 - 800.0 / 1100.0)).abs() < 1e-12);
        assert!((s.tokens_per_s - 110.0).abs() < 1e-9);
    }

    #[test]
    fn perfect_weighted_shares() {
        let specs = [spec("a", 1.0), spec("b", 2.0), spec("c", 4.0)];
        let w = Window {
            start_s: 0.0,
            end_s: 1.0,
        };
        let records: Vec<Record> = [1usize, 2, 4]
            .iter()
            .enumerate()
            .flat_map(|(i, &n)| (0..n).map(move |_| ok(i, 0.1, 0.5, 0.01, 90)))
            .collect();
        let (t, s) = account(&specs, &records, w);
        assert!((s.jain_tokens.unwrap() - 1.0).abs() < 1e-12);
        assert!(s.max_abs_token_share_error < 1e-12);
        assert!((t[2].token_share - 4.0 / 7.0).abs() < 1e-12);
    }
}
