//! Offering several tenants' load at once to one endpoint and recording every request.
//!
//! Each tenant has its own generator: a closed loop (`concurrency` workers, each sending its
//! next request when the previous one is answered) or an open loop (Poisson arrivals, each
//! request in its own task). Prompts are fresh random words (no prefix shared between any two
//! requests), seeded by the run's seed and the tenant's name.
//!
//! Timeline: the warm-up, then the measured window, then a drain: load keeps coming until every
//! request sent in the window is answered (so that the window's last requests wait behind the
//! same load as its first), or the drain bound passes. Then every generator stops, and requests
//! still in flight are cancelled (their connections closed) and recorded as unfinished.

use std::io::Write;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::client::{send_detailed, HttpClient, Target};
use crate::progress::{Live, Progress};
use crate::rng::Rng64;
use crate::text;
use crate::workload::{Arrivals, Prompt, WorkRequest};

use super::account::{Fate, Record, Window};
use super::spec::{name_stream, TenantLoad, TenantSpec};

/// The timeline of a run.
#[derive(Debug, Clone, Copy)]
pub struct Timeline {
    pub warmup: Duration,
    pub duration: Duration,
    /// Longest wait after the window for the window's requests to be answered.
    pub drain: Duration,
}

impl Timeline {
    pub fn window(&self) -> Window {
        Window {
            start_s: self.warmup.as_secs_f64(),
            end_s: (self.warmup + self.duration).as_secs_f64(),
        }
    }
}

pub struct RunOutput {
    pub records: Vec<Record>,
    /// From the start to the moment the last request ended or was cancelled.
    pub wall_s: f64,
}

/// What every generator and request task shares.
struct Ctx {
    client: HttpClient,
    target: Arc<Target>,
    start: Instant,
    window: Window,
    /// Requests sent in the window and not yet ended.
    pending_in_window: AtomicI64,
    records: mpsc::UnboundedSender<Record>,
    stop: watch::Receiver<bool>,
    live: Arc<Live>,
}

impl Ctx {
    fn now_s(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// Sends one request, or gives it up when the run stops.
    async fn request(&self, tenant: usize, req: WorkRequest) -> Record {
        let start_s = self.now_s();
        self.live.sent();
        let counted = self.window.contains(start_s);
        if counted {
            self.pending_in_window.fetch_add(1, Ordering::SeqCst);
        }
        let mut stop = self.stop.clone();
        let record = tokio::select! {
            (out, info) = send_detailed(&self.client, &self.target, &req, self.start) => {
                let fate = match out.error {
                    None => Fate::Ok {
                        ttft_s: out.ttft_s,
                        prompt_tokens: out.prompt_tokens,
                        output_tokens: out.output_tokens,
                    },
                    Some((kind, _)) => Fate::Failed { kind, reason: info.dropped_reason },
                };
                Record { tenant, start_s: out.start_s, end_s: out.start_s + out.e2e_s, fate }
            }
            _ = stop.wait_for(|s| *s) => Record {
                tenant,
                start_s,
                end_s: self.now_s(),
                fate: Fate::Unfinished,
            },
        };
        if counted {
            self.pending_in_window.fetch_sub(1, Ordering::SeqCst);
        }
        record
    }

    fn stopped(&self) -> bool {
        *self.stop.borrow()
    }
}

/// A tenant's requests: fresh random words of its prompt length.
fn next_request(spec: &TenantSpec, rng: &mut Rng64) -> WorkRequest {
    let prompt_tokens = spec.prompt_tokens.draw(rng);
    let max_tokens = spec.output_tokens.draw(rng);
    WorkRequest {
        session: None,
        tenant: Some(spec.name.clone()),
        prompt: Prompt::Text(text::words(rng, prompt_tokens as usize)),
        max_tokens,
        arrival: None,
    }
}

/// Runs the tenants' load against `target` and returns every request's record.
pub async fn run(
    client: HttpClient,
    target: Arc<Target>,
    specs: &[TenantSpec],
    timeline: Timeline,
    seed: u64,
    mut progress: Progress,
) -> RunOutput {
    let start = Instant::now();
    progress.begin(start);
    let live = progress.live();
    let window = timeline.window();
    let (tx, rx) = mpsc::unbounded_channel::<Record>();
    let (stop_tx, stop_rx) = watch::channel(false);
    let ctx = Arc::new(Ctx {
        client,
        target,
        start,
        window,
        pending_in_window: AtomicI64::new(0),
        records: tx,
        stop: stop_rx,
        live: live.clone(),
    });
    let names: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
    let collector = tokio::spawn(collect(
        rx,
        names,
        start,
        window,
        live.clone(),
        progress.lines(),
        progress.drawn(),
    ));

    let mut generators = JoinSet::new();
    for (i, spec) in specs.iter().enumerate() {
        let stream = name_stream(&spec.name);
        match spec.load {
            TenantLoad::Closed {
                concurrency,
                pause_after_error_ms,
            } => {
                for w in 0..concurrency {
                    let (ctx, spec) = (ctx.clone(), spec.clone());
                    let mut rng = Rng64::derive(seed, stream.wrapping_add(w as u64));
                    let pause = Duration::from_millis(pause_after_error_ms);
                    generators.spawn(async move {
                        while !ctx.stopped() {
                            let record = ctx.request(i, next_request(&spec, &mut rng)).await;
                            let fate = record.fate.clone();
                            let _ = ctx.records.send(record);
                            match fate {
                                Fate::Ok { .. } => {}
                                Fate::Unfinished => break,
                                _ if !pause.is_zero() => {
                                    let mut stop = ctx.stop.clone();
                                    tokio::select! {
                                        _ = tokio::time::sleep(pause) => {}
                                        _ = stop.wait_for(|s| *s) => break,
                                    }
                                }
                                _ => {}
                            }
                        }
                    });
                }
            }
            TenantLoad::Open {
                rate,
                max_in_flight,
            } => {
                let (ctx, spec) = (ctx.clone(), spec.clone());
                let mut rng = Rng64::derive(seed, stream);
                let mut arrivals = Arrivals::new(seed ^ stream, rate, None);
                generators.spawn(async move {
                    let in_flight = Arc::new(AtomicUsize::new(0));
                    let mut stop = ctx.stop.clone();
                    loop {
                        let at = arrivals.next_arrival();
                        let when =
                            tokio::time::Instant::from_std(ctx.start + Duration::from_secs_f64(at));
                        tokio::select! {
                            _ = tokio::time::sleep_until(when) => {}
                            _ = stop.wait_for(|s| *s) => break,
                        }
                        let req = next_request(&spec, &mut rng);
                        if in_flight.load(Ordering::SeqCst) >= max_in_flight {
                            let _ = ctx.records.send(Record {
                                tenant: i,
                                start_s: at,
                                end_s: at,
                                fate: Fate::Skipped,
                            });
                            continue;
                        }
                        in_flight.fetch_add(1, Ordering::SeqCst);
                        let (ctx, in_flight) = (ctx.clone(), in_flight.clone());
                        tokio::spawn(async move {
                            let record = ctx.request(i, req).await;
                            let _ = ctx.records.send(record);
                            in_flight.fetch_sub(1, Ordering::SeqCst);
                        });
                    }
                });
            }
        }
    }

    // The window, then the drain: until the window's requests are answered or the bound.
    let window_end = start + timeline.warmup + timeline.duration;
    tokio::time::sleep_until(tokio::time::Instant::from_std(window_end)).await;
    let drain_end = window_end + timeline.drain;
    while ctx.pending_in_window.load(Ordering::SeqCst) > 0 && Instant::now() < drain_end {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = stop_tx.send(true);
    live.stop_sending();
    while generators.join_next().await.is_some() {}
    // Request tasks of the open loops end on the stop signal too; the collector ends when the
    // last of them has sent its record and dropped its handle.
    drop(ctx);
    let records = collector.await.expect("collector task");
    progress.finish();
    RunOutput {
        wall_s: start.elapsed().as_secs_f64(),
        records,
    }
}

/// Gathers records and counts them for the live line; once a second, the last second per
/// tenant: a plain line on stderr (`lines`, where there is no terminal: the same lines as ever,
/// which scripts' logs keep) or the tail of the live line (`drawn`).
async fn collect(
    mut rx: mpsc::UnboundedReceiver<Record>,
    names: Vec<String>,
    start: Instant,
    window: Window,
    live: Arc<Live>,
    lines: bool,
    drawn: bool,
) -> Vec<Record> {
    let mut records = Vec::new();
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    ticker.tick().await;
    let mut last = 0usize;
    loop {
        tokio::select! {
            r = rx.recv() => match r {
                Some(r) => {
                    match r.fate {
                        // Never sent: neither done nor failed.
                        Fate::Skipped => {}
                        // Cancelled at the stop: every closed loop has some in flight then, so
                        // counting them as failures would flag every run.
                        Fate::Ok { .. } | Fate::Unfinished => live.finished(false),
                        Fate::Failed { .. } => live.finished(true),
                    }
                    records.push(r);
                }
                None => break,
            },
            _ = ticker.tick(), if lines || drawn => {
                let t = start.elapsed().as_secs_f64();
                let phase = if t < window.start_s {
                    "warm-up"
                } else if t < window.end_s {
                    "window"
                } else {
                    "drain"
                };
                let mut line = format!("[{t:>4.0}s {phase}]");
                for (i, name) in names.iter().enumerate() {
                    let recent = records[last..].iter().filter(|r| r.tenant == i);
                    let (mut ok, mut refused, mut other, mut ttft) = (0, 0, 0, Vec::new());
                    for r in recent {
                        match &r.fate {
                            Fate::Ok { ttft_s, .. } => {
                                ok += 1;
                                ttft.extend(ttft_s.map(|s| s * 1e3));
                            }
                            Fate::Failed { kind: crate::client::ErrorKind::Status(_), .. } => refused += 1,
                            _ => other += 1,
                        }
                    }
                    ttft.sort_by(f64::total_cmp);
                    let p50 = crate::stats::quantile(&ttft, 0.5)
                        .map_or("-".into(), |v| format!("{v:.0}"));
                    line.push_str(&format!(" | {name}: ok {ok} refused {refused} err {other} TTFT p50 {p50} ms"));
                }
                last = records.len();
                if drawn {
                    // The live line has its own time and phase in front.
                    let tenants = line.split_once(" | ").map_or("", |(_, t)| t);
                    live.set_extra(format!("last 1s: {tenants}"));
                } else {
                    let _ = writeln!(std::io::stderr().lock(), "{line}");
                }
            }
        }
    }
    records
}
