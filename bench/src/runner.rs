//! Offering load: closed loop (a fixed number of requests in flight), open loop (Poisson or
//! bursty arrivals at a mean rate, whatever the answers do, see [`Arrivals`]) or a trace's own
//! arrival times, until a request count or a duration; progress on stderr (see
//! [`crate::progress`]).
//!
//! Requests are dispatched in workload order. A request that belongs to a session is sent only
//! after the session's previous request has finished (in the closed loop it holds its slot
//! while it waits, in the open loop its arrival is delayed), so a conversation never overtakes
//! itself.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::client::{send, HttpClient, Outcome, Target};
use crate::progress::{Info, Live, Progress};
use crate::results::LoadMode;
use crate::stats::quantile;
use crate::workload::{Arrivals, RequestStream};

/// When to stop sending (the first reached wins; in-flight requests are always awaited).
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub load: LoadMode,
    pub requests: Option<u64>,
    pub duration: Option<Duration>,
    /// Open loop only: the most requests in flight; arrivals beyond wait for a slot, so a
    /// server that stops answering cannot make the generator hold unbounded state.
    pub max_in_flight: usize,
    /// Seed of the arrival process.
    pub seed: u64,
}

pub struct RunOutput {
    pub outcomes: Vec<Outcome>,
    /// From the first send to the last completion.
    pub wall_s: f64,
}

/// [`run_with`] with progress on stderr named after the URL, or none.
pub async fn run(
    client: HttpClient,
    target: Arc<Target>,
    stream: RequestStream,
    plan: Plan,
    progress: bool,
) -> RunOutput {
    let progress = if progress {
        Progress::stderr(Info {
            system: target.base_url.clone(),
            requests: plan.requests,
            duration: plan.duration,
            ..Info::default()
        })
    } else {
        Progress::off()
    };
    run_with(client, target, stream, plan, progress).await
}

pub async fn run_with(
    client: HttpClient,
    target: Arc<Target>,
    mut stream: RequestStream,
    plan: Plan,
    mut progress: Progress,
) -> RunOutput {
    let run_start = Instant::now();
    progress.begin(run_start);
    let live = progress.live();
    let (tx, rx) = mpsc::unbounded_channel::<Outcome>();
    let collector = tokio::spawn(collect(
        rx,
        live.clone(),
        run_start,
        progress.lines(),
        progress.drawn(),
    ));

    let slots = match plan.load {
        LoadMode::Closed { concurrency } => concurrency.max(1),
        LoadMode::Open { .. } | LoadMode::Trace => plan.max_in_flight.max(1),
    };
    let semaphore = Arc::new(Semaphore::new(slots));
    let deadline = plan
        .duration
        .map(|d| tokio::time::Instant::from_std(run_start + d));
    let mut arrivals = match plan.load {
        LoadMode::Open { rate, burst } => Some(Arrivals::new(plan.seed, rate, burst)),
        LoadMode::Closed { .. } | LoadMode::Trace => None,
    };
    let timed = matches!(plan.load, LoadMode::Trace);
    let zero = tokio::time::Instant::from_std(run_start);
    let mut sessions: HashMap<u64, oneshot::Receiver<()>> = HashMap::new();
    let far = tokio::time::Instant::now() + Duration::from_secs(86_400 * 365);
    let mut n = 0u64;
    loop {
        if plan.requests.is_some_and(|r| n >= r) {
            break;
        }
        let end = deadline.unwrap_or(far);
        if tokio::time::Instant::now() >= end {
            break;
        }
        if let Some(arrivals) = &mut arrivals {
            let next_arrival = zero + Duration::from_secs_f64(arrivals.next_arrival());
            if next_arrival >= end {
                break;
            }
            tokio::time::sleep_until(next_arrival).await;
        }
        // A timed request is taken first: its arrival time is in it.
        let mut timed_req = None;
        if timed {
            let Some(req) = stream.next() else { break };
            if let Some(at) = req.arrival {
                if zero + at >= end {
                    break;
                }
                tokio::time::sleep_until(zero + at).await;
            }
            timed_req = Some(req);
        }
        let permit = tokio::select! {
            p = semaphore.clone().acquire_owned() => p.expect("semaphore is never closed"),
            _ = tokio::time::sleep_until(end) => break,
        };
        let Some(req) = timed_req.or_else(|| stream.next()) else {
            break;
        };
        n += 1;
        live.sent();
        let previous = req.session.and_then(|s| sessions.remove(&s));
        let (done_tx, done_rx) = oneshot::channel::<()>();
        if let Some(s) = req.session {
            sessions.insert(s, done_rx);
        }
        let (client, target, tx) = (client.clone(), target.clone(), tx.clone());
        tokio::spawn(async move {
            if let Some(p) = previous {
                // Err means the previous request's task ended: either way it is done.
                let _ = p.await;
            }
            let out = send(&client, &target, &req, run_start).await;
            let _ = tx.send(out);
            drop(done_tx);
            drop(permit);
        });
        // Finished sessions leave a resolved receiver behind; drop those now and then so the
        // map holds only open sessions.
        if sessions.len() > 4096 {
            sessions
                .retain(|_, rx| matches!(rx.try_recv(), Err(oneshot::error::TryRecvError::Empty)));
        }
    }
    drop(tx);
    live.stop_sending();
    let outcomes = collector.await.expect("collector task");
    progress.finish();
    let first = outcomes
        .iter()
        .map(|o| o.start_s)
        .fold(f64::INFINITY, f64::min);
    let last = outcomes
        .iter()
        .map(|o| o.start_s + o.e2e_s)
        .fold(0.0, f64::max);
    RunOutput {
        wall_s: if outcomes.is_empty() {
            0.0
        } else {
            last - first
        },
        outcomes,
    }
}

/// Gathers outcomes and counts them for the live line; once a second, the last second's
/// figures: a plain line on stderr (`lines`, where there is no terminal: the same lines as ever,
/// which scripts' logs keep) or the tail of the live line (`drawn`).
async fn collect(
    mut rx: mpsc::UnboundedReceiver<Outcome>,
    live: Arc<Live>,
    run_start: Instant,
    lines: bool,
    drawn: bool,
) -> Vec<Outcome> {
    let mut outcomes = Vec::new();
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    ticker.tick().await;
    let mut window_start = 0usize;
    let mut errors = 0u64;
    loop {
        tokio::select! {
            o = rx.recv() => match o {
                Some(o) => {
                    errors += u64::from(o.error.is_some());
                    live.finished(o.error.is_some());
                    outcomes.push(o);
                }
                None => break,
            },
            _ = ticker.tick(), if lines || drawn => {
                let window = &outcomes[window_start..];
                window_start = outcomes.len();
                let mut ttft: Vec<f64> = window.iter().filter_map(|o| o.ttft_s).map(|s| s * 1e3).collect();
                ttft.sort_by(f64::total_cmp);
                let tokens: u64 = window.iter().map(|o| o.output_tokens).sum();
                let fmt = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.0}"));
                let (p50, p90) = (fmt(quantile(&ttft, 0.5)), fmt(quantile(&ttft, 0.9)));
                if drawn {
                    live.set_extra(format!("last 1s: {tokens} tok/s, TTFT p50 {p50} p90 {p90} ms"));
                } else {
                    let s = live.sent_count();
                    let line = format!(
                        "[{:>4.0}s] sent {s} done {} err {errors} in-flight {} | last 1s: {} req/s {tokens} tok/s TTFT p50 {p50} p90 {p90} ms",
                        run_start.elapsed().as_secs_f64(),
                        outcomes.len(),
                        s.saturating_sub(outcomes.len() as u64),
                        window.len(),
                    );
                    let _ = writeln!(std::io::stderr().lock(), "{line}");
                }
            }
        }
    }
    outcomes
}
