//! A request bound to its replica as it is served, from its response head to its end: the one
//! bookkeeping of the proxy's forward stage and the endpoint picker's streams, so that TTFT
//! learning, health accounting and metrics cannot drift between the two modes.
//!
//! - At the head ([`Served::on_head`]): the status is kept, a 5xx that may blame the request is
//!   peeked at, and a stream owes its first byte ([`FirstByteOwed`]).
//! - At the first byte ([`FirstByte::arrived`]): the request's prefill is done on its replica
//!   (its pending-prefill count and pending blocks go), flow control hears of its first token,
//!   the first-byte time is observed and a stream's TTFT is learned from.
//! - At the end ([`Ending::settle`]): the replica is credited, or blamed unless the answer blames
//!   the request, the request is counted, and its in-flight count and admission permit go.

use super::admission::Permit;
use crate::body::{Outcome, Peeked};
use crate::choice::Routed;
use crate::metrics::{Metrics, RouteMetrics};
use crate::state::index::PendingGuard;
use crate::state::replica::FirstByteOwed;
use crate::state::replica::{InflightGuard, PrefillGuard, ReplicaState};
use crate::state::table::Table;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A 5xx answer's first bytes, shared with the body wrapper that reads them.
pub type SharedPeek = Arc<parking_lot::Mutex<Peeked>>;

/// How a request is being served, besides its replica.
pub struct ServedAs {
    pub permit: Permit,
    pub table: Arc<Table>,
    pub model: String,
    pub metrics: Arc<Metrics>,
    pub stream: bool,
    /// When the request's duration began (the proxy: its arrival; the picker: its pick).
    pub arrived: Instant,
    /// When it went to the replica (its first-byte time is counted from here).
    pub sent: Instant,
    /// Its prefill runs on another replica (a split): its first token is not this one's TTFT.
    pub prefilled_elsewhere: bool,
    /// A 502 or 503 is held against the replica here at the end. The proxy's passive-health
    /// stage judges those on their head (and may retry them), so the proxy says no.
    pub settles_unavailable: bool,
}

/// A request on its replica, until its end.
pub struct Served {
    first: Option<FirstByte>,
    end: Ending,
}

/// What the first byte of the answer does.
pub struct FirstByte {
    replica: Arc<ReplicaState>,
    route: Arc<RouteMetrics>,
    permit: Permit,
    sent: Instant,
    prefill: PrefillGuard,
    pending: Option<PendingGuard>,
    owed: Option<FirstByteOwed>,
    /// The TTFT model's inputs, for a stream prefilled here: its first byte is a TTFT.
    ttft: Option<(u32, f64)>,
    /// Learn from it: the head said success.
    learn: bool,
}

/// What the end of the answer does.
pub struct Ending {
    route: Arc<RouteMetrics>,
    table: Arc<Table>,
    model: String,
    metrics: Arc<Metrics>,
    arrived: Instant,
    sent: Instant,
    status: Option<u16>,
    peeked: Option<SharedPeek>,
    settles_unavailable: bool,
    inflight: InflightGuard,
    permit: Permit,
}

impl Served {
    pub fn new(routed: Routed, as_: ServedAs) -> Self {
        let route = routed.candidate.metrics.clone();
        Self {
            first: Some(FirstByte {
                replica: routed.candidate.replica.clone(),
                route: route.clone(),
                permit: as_.permit.clone(),
                sent: as_.sent,
                prefill: routed.prefill,
                pending: routed.pending,
                owed: None,
                ttft: (as_.stream && !as_.prefilled_elsewhere)
                    .then_some((routed.prefill_tokens, routed.queued_ahead)),
                learn: false,
            }),
            end: Ending {
                route,
                table: as_.table,
                model: as_.model,
                metrics: as_.metrics,
                arrived: as_.arrived,
                sent: as_.sent,
                status: None,
                peeked: None,
                settles_unavailable: as_.settles_unavailable,
                inflight: routed.inflight,
                permit: as_.permit,
            },
        }
    }

    pub fn replica(&self) -> &Arc<ReplicaState> {
        self.end.inflight.replica()
    }

    /// The response head came with `status`; a stream owes its first byte from now (`owed`).
    /// Returns the peek to feed with the body's first bytes when it may say whose fault a 5xx
    /// is (not for a 502 or 503, which are judged on their head).
    pub fn on_head(&mut self, status: u16, owed: Option<FirstByteOwed>) -> Option<SharedPeek> {
        self.end.status = Some(status);
        if let Some(first) = &mut self.first {
            first.owed = owed;
            // TTFT is learned from streams only (a non-streamed body arrives after the whole
            // generation, which is not TTFT), and from successes.
            first.learn = status < 300;
        }
        self.end.peeked = (status >= 500 && status != 502 && status != 503)
            .then(|| Arc::new(parking_lot::Mutex::new(Peeked::default())));
        self.end.peeked.clone()
    }

    /// The answer's first byte came (the picker's streams; the proxy's body wrappers hold
    /// [`Served::into_parts`]).
    pub fn first_byte(&mut self, now: Instant) {
        if let Some(first) = self.first.take() {
            first.arrived(now);
        }
    }

    /// A 5xx answer's first bytes, when they may say whose fault it was.
    pub fn peek(&self, chunk: &[u8]) {
        if let Some(p) = &self.end.peeked {
            p.lock().feed(chunk);
        }
    }

    /// The answer ended (its first byte's guards go with it if none came).
    pub fn settle(self, outcome: Outcome) {
        drop(self.first);
        self.end.settle(outcome);
    }

    /// For body wrappers that call each part on its own.
    pub fn into_parts(self) -> (Option<FirstByte>, Ending) {
        (self.first, self.end)
    }
}

impl FirstByte {
    pub fn arrived(self, now: Instant) {
        // This request's prefill is done on the replica, and its engine is about to report
        // the blocks.
        drop(self.prefill);
        drop(self.pending);
        self.permit.first_token();
        if let Some(owed) = self.owed {
            owed.arrived(now);
        }
        let ttfb = now.saturating_duration_since(self.sent).as_secs_f64();
        self.route.first_byte.observe(ttfb);
        if let Some((prefill_tokens, queued_ahead)) = self.ttft.filter(|_| self.learn) {
            self.replica
                .ttft
                .lock()
                .observe(prefill_tokens, queued_ahead, ttfb);
        }
    }
}

impl Ending {
    /// The answer ended as `outcome` says (a body that was never started ends as the
    /// request's end).
    pub fn settle(self, outcome: Outcome) {
        let replica = self.inflight.replica();
        if let Some(status) = self.status {
            match outcome {
                Outcome::Ended if status < 500 => replica.health.on_success(),
                Outcome::Ended => match &self.peeked {
                    Some(p) if p.lock().blames_the_request() => {
                        tracing::debug!(replica = %replica.name, status, "an error answer that blames the request; not held against the replica");
                    }
                    Some(_) => self.table.answer_failed(replica, &self.model),
                    None if self.settles_unavailable => {
                        self.table.answer_failed(replica, &self.model);
                    }
                    None => {}
                },
                Outcome::Abandoned => {
                    self.metrics.connections.client_disconnects.inc();
                }
                Outcome::Failed(kind) => {
                    self.metrics.requests.upstream_error(&replica.name, kind);
                    if kind == "idle" {
                        // Silent while it answered others: this request's doing (a preempted
                        // or crafted request), not the replica's. The silence began `idle` ago.
                        let idle: Duration = self.table.config.timeouts.idle();
                        let silent_since = Instant::now().checked_sub(idle).unwrap_or(self.sent);
                        self.table.answer_timed_out(
                            replica,
                            &self.model,
                            silent_since.max(self.sent),
                        );
                    } else {
                        self.table.answer_failed(replica, &self.model);
                    }
                }
            }
            self.metrics.requests.count(&self.route, status);
        }
        self.route
            .duration
            .observe(self.arrived.elapsed().as_secs_f64());
        // The in-flight counters and the admission permit go with the request.
        drop(self.inflight);
        drop(self.permit);
    }
}
