//! One simulated replica: its engine behind a lock, the task that drives the engine's steps in
//! real time, its faults, and the admission of a request (tokenize, validate, P/D checks).

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::{mpsc, watch, Notify};
use warmpath_kv_events::KvEvent;

use crate::api::{ApiError, GenerateRequest, Input};
use crate::bootstrap::{BootstrapConfig, PrefillTicket, Rooms, MAX_ROOMS};
use crate::config::EngineConfig;
use crate::engine::{Engine, Output, Request};
use crate::faults::FaultState;
use crate::kv_cache::{block_hash, extend_hashes};
use crate::tokens::Tokenizer;

/// Timers are coarse (about 1 ms); a step may start this late behind the previous one without
/// the engine clock drifting from the timing model.
const LATENESS: f64 = 0.002;

/// vLLM's checks of a prompt's and a completion's length.
fn check_limits(req: &GenerateRequest, prompt_len: usize, max_len: usize) -> Result<(), ApiError> {
    if prompt_len == 0 {
        return Err(ApiError::bad_request(
            Some("prompt"),
            "The prompt is empty.",
        ));
    }
    if prompt_len >= max_len {
        return Err(ApiError::bad_value(
            "input_tokens",
            prompt_len,
            &format!(
                "This model's maximum context length is {max_len} tokens. However, your prompt contains at least {prompt_len} input tokens, which exceeds this limit even without any output tokens. Please reduce the length of the input prompt."
            ),
        ));
    }
    if let Some(m) = req.max_tokens {
        if m > max_len {
            return Err(ApiError::bad_value(
                "max_tokens",
                m,
                &format!("max_tokens={m} cannot be greater than max_model_len={max_len}. Please request fewer output tokens."),
            ));
        }
    }
    Ok(())
}

/// One replica of the fleet.
#[derive(Debug)]
pub struct Replica {
    pub index: usize,
    pub addr: SocketAddr,
    /// Where other engines reach this one for P/D (`kv_transfer_params.remote_host`): `addr`,
    /// or the pod's address when `addr` is a wildcard ([`Replica::advertised_at`]).
    pub advertised: SocketAddr,
    pub model: String,
    /// Named in P/D `kv_transfer_params.remote_engine_id`.
    pub engine_id: String,
    pub engine: Mutex<Engine>,
    pub faults: watch::Sender<FaultState>,
    pub tokenizer: Arc<Tokenizer>,
    pub default_max_tokens: usize,
    pub created: u64,
    /// SGLang P/D: matched against a request's `bootstrap_port`.
    pub bootstrap_port: u16,
    /// SGLang P/D: how long a decode waits for its prefill.
    pub bootstrap_timeout: Duration,
    /// SGLang P/D: the rooms of the prefill requests this replica serves.
    pub rooms: Rooms,
    wake: Notify,
    origin: Instant,
    requests: AtomicU64,
}

/// A request admitted to the engine: its outputs arrive through [`Admitted::recv`].
pub struct Admitted {
    rx: mpsc::UnboundedReceiver<Output>,
    pub prompt_tokens: usize,
    /// vLLM P/D prefill (`do_remote_decode`): the answer carries `kv_transfer_params`.
    pub nixl_prefill: bool,
    /// SGLang P/D prefill: told when the prefill is done, for the decode waiting on it.
    room: Option<PrefillTicket>,
}

impl Admitted {
    /// The next output; `None` once the engine dropped the request.
    pub async fn recv(&mut self) -> Option<Output> {
        let o = self.rx.recv().await;
        self.observe(o.as_ref());
        o
    }

    /// The next output if one is there already.
    pub fn try_recv(&mut self) -> Option<Output> {
        let o = self.rx.try_recv().ok()?;
        self.observe(Some(&o));
        Some(o)
    }

    /// Reports the end of an SGLang prefill as soon as the engine says it, before the client
    /// is answered: the decode should not wait for a slow (or gone) client.
    fn observe(&mut self, o: Option<&Output>) {
        match o {
            Some(Output::Token { .. }) => {}
            Some(Output::Done(s)) => {
                if let Some(t) = self.room.take() {
                    t.ready(s.prefill_blocks.as_ref().map_or(0, |(_, h)| h.len()));
                }
            }
            Some(Output::Error(e)) => {
                if let Some(t) = self.room.take() {
                    t.fail(e.clone());
                }
            }
            None => {
                if let Some(t) = self.room.take() {
                    t.fail("the engine dropped the request");
                }
            }
        }
    }
}

impl Replica {
    /// The replica as other engines reach it at `host` (its port unchanged): a server listening
    /// on 0.0.0.0 in a pod names the pod's address, as vLLM's NIXL side channel does with
    /// `VLLM_NIXL_SIDE_CHANNEL_HOST`.
    pub fn advertised_at(mut self, host: Option<IpAddr>) -> Self {
        if let Some(ip) = host {
            self.advertised = SocketAddr::new(ip, self.addr.port());
            self.engine_id = format!("warmpath-sim-{}", self.advertised);
        }
        self
    }

    #[allow(clippy::too_many_arguments)]
    pub fn new(
        index: usize,
        addr: SocketAddr,
        model: String,
        cfg: EngineConfig,
        tokenizer: Arc<Tokenizer>,
        faults: FaultState,
        default_max_tokens: usize,
        publish_events: bool,
        bootstrap: BootstrapConfig,
    ) -> Self {
        Replica {
            index,
            addr,
            advertised: addr,
            engine_id: format!("warmpath-sim-{addr}"),
            model,
            engine: Mutex::new(Engine::new(cfg, tokenizer.clone(), publish_events)),
            faults: watch::channel(faults).0,
            tokenizer,
            default_max_tokens,
            created: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            bootstrap_port: bootstrap.port,
            bootstrap_timeout: bootstrap.timeout,
            rooms: Rooms::new(bootstrap.timeout, MAX_ROOMS),
            wake: Notify::new(),
            origin: Instant::now(),
            requests: AtomicU64::new(0),
        }
    }

    /// Seconds since this replica started (the engine's clock).
    pub fn now(&self) -> f64 {
        self.origin.elapsed().as_secs_f64()
    }

    /// Makes the engine task look at its state now (e.g. to publish events made outside a step).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// A fresh request number (for ids and the error-rate fault).
    pub fn next_request(&self) -> u64 {
        self.requests.fetch_add(1, Ordering::Relaxed)
    }

    /// Token ids of a request's input.
    pub fn tokenize(&self, input: &Input) -> Result<Vec<u32>, ApiError> {
        let internal = |e: crate::tokens::TokenError| ApiError::internal(e.to_string());
        match input {
            Input::Text(t) => self.tokenizer.encode(t, true).map_err(internal),
            Input::Tokens(t) => Ok(t.clone()),
            Input::Chat(m) => {
                let text = self
                    .tokenizer
                    .render_chat(m)
                    .map_err(|e| ApiError::bad_request(Some("messages"), e.to_string()))?;
                self.tokenizer.encode(&text, false).map_err(internal)
            }
        }
    }

    /// Checks a request against the model's limits, as vLLM does before it queues one.
    pub fn validate(&self, req: &GenerateRequest, prompt_len: usize) -> Result<(), ApiError> {
        let max_len = self.engine.lock().config().max_model_len;
        check_limits(req, prompt_len, max_len)
    }

    /// Validates a request and queues it in the engine. `remote_blocks` says how many leading
    /// prompt blocks a P/D transfer provides (checked by the caller); `room` makes it the
    /// prefill side of an SGLang pair.
    pub fn admit(
        &self,
        req: &GenerateRequest,
        tokens: Vec<u32>,
        remote_blocks: usize,
        room: Option<PrefillTicket>,
    ) -> Result<Admitted, ApiError> {
        let prompt_len = tokens.len();
        let (max_len, bs) = {
            let e = self.engine.lock();
            (e.config().max_model_len, e.config().block_size)
        };
        if let Err(e) = check_limits(req, prompt_len, max_len) {
            if let Some(t) = room {
                t.fail(e.message.clone());
            }
            return Err(e);
        }
        let nixl_prefill = req
            .kv_transfer_params
            .as_ref()
            .is_some_and(|k| k.do_remote_decode);
        // SGLang's prefill server, like vLLM's with do_remote_decode, generates one token.
        let prefill_only = nixl_prefill || room.is_some();
        // Hash outside the engine's lock: it is the costliest per-token work.
        let mut hashes = Vec::with_capacity(prompt_len / bs + 1);
        extend_hashes(&mut hashes, &tokens, bs);
        let seed = req.seed.unwrap_or_else(|| {
            hashes
                .last()
                .copied()
                .unwrap_or_else(|| block_hash(None, &tokens))
        });
        let (tx, rx) = mpsc::unbounded_channel();
        let request = Request {
            tokens,
            max_tokens: req.max_tokens.unwrap_or(self.default_max_tokens),
            seed,
            prefill_only,
            remote_blocks,
            out: tx,
        };
        self.engine.lock().submit(request, Some(hashes), self.now());
        self.wake.notify_one();
        Ok(Admitted {
            rx,
            prompt_tokens: prompt_len,
            nixl_prefill,
            room,
        })
    }

    /// Chained hashes of the full blocks of `tokens` at this replica's block size.
    pub fn prompt_hashes(&self, tokens: &[u32]) -> Vec<crate::kv_cache::BlockHash> {
        let bs = self.engine.lock().config().block_size;
        let mut hashes = Vec::with_capacity(tokens.len() / bs);
        extend_hashes(&mut hashes, tokens, bs);
        hashes
    }

    /// P/D decode side: checks that `slots` on this (prefill) replica still hold the leading
    /// blocks of `tokens`, and returns how many blocks can be pulled.
    pub fn check_pull(&self, tokens: &[u32], slots: &[u32]) -> Result<usize, String> {
        let e = self.engine.lock();
        let bs = e.config().block_size;
        let mut hashes = Vec::new();
        extend_hashes(&mut hashes, tokens, bs);
        if slots.len() > hashes.len() {
            return Err(format!(
                "{} remote blocks named, but the prompt has only {} full blocks",
                slots.len(),
                hashes.len()
            ));
        }
        if !e.slots_hold(slots, &hashes[..slots.len()]) {
            return Err(format!(
                "the prefill engine {} no longer holds the requested blocks (evicted or never computed for this prompt)",
                self.engine_id
            ));
        }
        Ok(slots.len())
    }

    /// Drives the engine: one step at a time, each taking the time the timing model says,
    /// delivering outputs and publishing KV events when the step ends.
    pub async fn drive(self: Arc<Self>, events: Option<mpsc::Sender<Vec<KvEvent>>>) {
        let mut prev_end = 0.0f64;
        let mut busy = false;
        loop {
            let now = self.now();
            // Back to back with the previous step when busy; an idle engine starts now.
            let start = if busy {
                prev_end.max(now - LATENESS)
            } else {
                now
            };
            let (step, ev) = {
                let mut e = self.engine.lock();
                let s = e.step(start);
                (s, e.take_events())
            };
            busy = step.busy;
            if step.busy {
                if step.end > now {
                    tokio::time::sleep_until(
                        (self.origin + Duration::from_secs_f64(step.end)).into(),
                    )
                    .await;
                } else {
                    tokio::task::yield_now().await;
                }
                prev_end = step.end;
            }
            if !ev.is_empty() {
                if let Some(tx) = &events {
                    // Dropped when the publisher is behind; sequence numbers show the gap.
                    let _ = tx.try_send(ev);
                }
            }
            if step.busy {
                for (tx, out) in step.deliveries {
                    let _ = tx.send(out);
                }
                continue;
            }
            match step.wake_at {
                Some(t) => {
                    let at = self.origin + Duration::from_secs_f64(t);
                    tokio::select! {
                        _ = tokio::time::sleep_until(at.into()) => {}
                        _ = self.wake.notified() => {}
                    }
                }
                None => self.wake.notified().await,
            }
        }
    }
}
