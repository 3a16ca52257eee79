//! Command-line flags and the configuration they produce.
//!
//! ```text
//! warmpath-sim --listen 127.0.0.1:8001 [--replicas N] [--model tiny]
//!              [--kv-events-endpoint tcp://127.0.0.1:5557] [--kv-events-topic TEMPLATE]
//!              [--threads 2] [--admin-listen ADDR]
//!              [--kv-blocks 8192] [--block-size 16] [--max-model-len 4096]
//!              [--max-num-seqs 256] [--max-num-batched-tokens 2048] [--default-max-tokens 16]
//!              [--timing default|zero] [--prefill-us-per-token 20] [--decode-base-ms 5]
//!              [--decode-per-seq-ms 0.05] [--step-overhead-ms 0] [--kv-transfer-ms-per-block 0.2]
//!              [--speed 1.0] [--replica-speeds 1,1,0.5,...]
//!              [--tokenizer tokenizer.json] [--chat-template FILE]
//!              [--error-rate 0.0] [--fault hang|slow-stream|drop-mid-stream|refuse|unhealthy]...
//!              [--slow-stream-ms 50] [--drop-after-chunks 2]
//!              [--bootstrap-port 8998] [--bootstrap-timeout-ms 30000]
//! ```
//!
//! Timing defaults, chosen to resemble an 8B model on one modern accelerator (the numbers are
//! what a router can see, not a performance claim): prefill 20 µs per uncached prompt token
//! (50k tokens/s), a decode step of 5 ms plus 0.05 ms per running sequence, a step budget of
//! 2,048 tokens (vLLM's `max_num_batched_tokens`), 256 running sequences at most, and 0.2 ms per
//! block pulled from a prefill replica. `--step-overhead-ms` adds a fixed cost to every step that
//! does any work, prefill-only steps included (the engine's scheduling, sampling and kernel
//! launches, a few milliseconds per step on real servers; 0 by default). `--speed 2` makes a replica twice as fast;
//! `--replica-speeds` sets it per replica (a mixed fleet). `--timing zero` sets every cost to 0.
//!
//! SGLang P/D ([`crate::bootstrap`]): a request naming `bootstrap_host`/`bootstrap_port` is
//! served as the prefill side by the replica those name, as the decode side by any other.
//! Replica i's bootstrap port is `--bootstrap-port` + i (one replica per process: 8998,
//! SGLang's default); a host names a replica when it is its listen IP or a loopback address
//! (any local address when listening on a wildcard). A decode replica finds a prefill replica
//! of its own process by (host, bootstrap port). A prefill replica of another process is asked
//! over HTTP at `bootstrap_host:bootstrap_port`, which reaches it only when its bootstrap port
//! is its HTTP port: start the prefill process with `--bootstrap-port 0` (every replica's
//! bootstrap port is its own HTTP port) or with `--bootstrap-port` equal to its `--listen`
//! port, and give both processes the same `--block-size`. Processes sharing a host need
//! bootstrap ports that do not overlap, or a decode takes a request meant for another
//! process's prefill as its own. A decode waits at most `--bootstrap-timeout-ms` for its
//! prefill, then answers 500.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use clap::{Parser, ValueEnum};

use crate::faults::FaultState;

/// Per-token and per-step costs of one replica, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    pub prefill_per_token: f64,
    pub decode_base: f64,
    pub decode_per_seq: f64,
    /// Fixed cost of every step that computes anything.
    pub step_overhead: f64,
    pub transfer_per_block: f64,
}

impl Timing {
    pub const ZERO: Timing = Timing {
        prefill_per_token: 0.0,
        decode_base: 0.0,
        decode_per_seq: 0.0,
        step_overhead: 0.0,
        transfer_per_block: 0.0,
    };

    /// The same costs on an accelerator `speed` times as fast.
    pub fn scaled(self, speed: f64) -> Timing {
        let s = if speed > 0.0 { 1.0 / speed } else { 1.0 };
        Timing {
            prefill_per_token: self.prefill_per_token * s,
            decode_base: self.decode_base * s,
            decode_per_seq: self.decode_per_seq * s,
            step_overhead: self.step_overhead * s,
            transfer_per_block: self.transfer_per_block * s,
        }
    }

    pub fn is_zero(&self) -> bool {
        *self == Timing::ZERO
    }
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            prefill_per_token: 20e-6,
            decode_base: 5e-3,
            decode_per_seq: 0.05e-3,
            step_overhead: 0.0,
            transfer_per_block: 0.2e-3,
        }
    }
}

/// Scheduler limits and cache shape of one replica.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub kv_blocks: usize,
    pub block_size: usize,
    pub max_model_len: usize,
    pub max_num_seqs: usize,
    pub max_num_batched_tokens: usize,
    pub timing: Timing,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            kv_blocks: 8192,
            block_size: 16,
            max_model_len: 4096,
            max_num_seqs: 256,
            max_num_batched_tokens: 2048,
            timing: Timing::default(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TimingMode {
    /// The costs given by the flags.
    Default,
    /// Every cost 0: for throughput benchmarks of whatever sits in front.
    Zero,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FaultFlag {
    /// Accept requests and never answer.
    Hang,
    /// Stream chunks `--slow-stream-ms` apart.
    SlowStream,
    /// Close the connection after `--drop-after-chunks` streamed chunks.
    DropMidStream,
    /// Close the listening socket: connections are refused.
    Refuse,
    /// `/health` answers 503.
    Unhealthy,
}

/// `warmpath-sim`: a vLLM-compatible model-server simulator.
#[derive(Debug, Clone, Parser)]
#[command(name = "warmpath-sim", version, about)]
pub struct Cli {
    /// Address of the first replica; replica i listens on port PORT+i.
    #[arg(long, default_value = "127.0.0.1:8001")]
    pub listen: SocketAddr,
    /// Number of replicas, on consecutive ports.
    #[arg(long, default_value_t = 1)]
    pub replicas: u16,
    /// Served model name.
    #[arg(long, default_value = "tiny")]
    pub model: String,
    /// ZMQ endpoint for KV events. A non-wildcard endpoint is connected to (the subscriber
    /// binds it, as with vLLM); a wildcard one (`tcp://*:P`, `tcp://0.0.0.0:P`) is bound, at
    /// port P+i for replica i.
    #[arg(long)]
    pub kv_events_endpoint: Option<String>,
    /// vLLM's replay endpoint (a ROUTER socket, bound at port P+i for replica i): a subscriber
    /// that missed messages asks for every buffered batch from a sequence number on.
    #[arg(long)]
    pub kv_events_replay_endpoint: Option<String>,
    /// Batches kept for replay (vLLM's `buffer_steps`).
    #[arg(long, default_value_t = 10_000)]
    pub kv_events_replay_buffer: usize,
    /// Topic of KV-event messages; `{host}`, `{port}` and `{model}` are replaced.
    #[arg(long, default_value = "kv@{host}:{port}@{model}")]
    pub kv_events_topic: String,
    /// Worker threads of the async runtime (all replicas share it).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Optional process-wide admin address (`POST /admin/faults` with `"replica"`), reachable
    /// even while a replica refuses connections.
    #[arg(long)]
    pub admin_listen: Option<SocketAddr>,
    /// The address other engines reach these replicas at for P/D KV transfers, when `--listen`
    /// is a wildcard (in a pod: its IP). vLLM's NIXL connector reads the same variable.
    #[arg(long, env = "VLLM_NIXL_SIDE_CHANNEL_HOST")]
    pub advertise_host: Option<IpAddr>,
    /// On SIGTERM, stop accepting and let open requests finish for at most this long before
    /// exiting (a pod being deleted), as vLLM's server does.
    #[arg(long, default_value_t = 30)]
    pub drain_seconds: u64,

    /// KV cache capacity in blocks, per replica.
    #[arg(long, default_value_t = 8192)]
    pub kv_blocks: usize,
    /// Tokens per KV block.
    #[arg(long, default_value_t = 16)]
    pub block_size: usize,
    /// Longest prompt plus completion; longer prompts get 400 as from vLLM.
    #[arg(long, default_value_t = 4096)]
    pub max_model_len: usize,
    /// Most sequences running at once; the rest wait.
    #[arg(long, default_value_t = 256)]
    pub max_num_seqs: usize,
    /// Token budget of one engine step (prefill chunks plus one token per decoding sequence).
    #[arg(long, default_value_t = 2048)]
    pub max_num_batched_tokens: usize,
    /// `max_tokens` when a request does not set it.
    #[arg(long, default_value_t = 16)]
    pub default_max_tokens: usize,

    #[arg(long, value_enum, default_value_t = TimingMode::Default)]
    pub timing: TimingMode,
    /// Prefill cost per uncached prompt token, microseconds.
    #[arg(long, default_value_t = 20.0)]
    pub prefill_us_per_token: f64,
    /// Cost of a decode step, milliseconds.
    #[arg(long, default_value_t = 5.0)]
    pub decode_base_ms: f64,
    /// Added decode step cost per running sequence, milliseconds.
    #[arg(long, default_value_t = 0.05)]
    pub decode_per_seq_ms: f64,
    /// Fixed cost of every step that computes anything (prefill-only steps too), milliseconds.
    #[arg(long, default_value_t = 0.0)]
    pub step_overhead_ms: f64,
    /// Cost of pulling one KV block from a prefill replica (P/D), milliseconds.
    #[arg(long, default_value_t = 0.2)]
    pub kv_transfer_ms_per_block: f64,
    /// Speed of every replica relative to the costs above (2 = twice as fast).
    #[arg(long, default_value_t = 1.0)]
    pub speed: f64,
    /// Per-replica speeds, comma-separated, overriding --speed for the first replicas.
    #[arg(long, value_delimiter = ',')]
    pub replica_speeds: Vec<f64>,

    /// A HF `tokenizer.json`; without it, a byte-level approximation (4 bytes per token).
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// A Jinja chat template file (or a `tokenizer_config.json` holding `chat_template`).
    #[arg(long)]
    pub chat_template: Option<PathBuf>,

    /// Fraction of requests answered with a 500 error.
    #[arg(long, default_value_t = 0.0)]
    pub error_rate: f64,
    /// Faults active from the start (repeatable).
    #[arg(long = "fault", value_enum)]
    pub faults: Vec<FaultFlag>,
    /// Delay between streamed chunks under the slow-stream fault, milliseconds.
    #[arg(long, default_value_t = 50)]
    pub slow_stream_ms: u64,
    /// Chunks sent before the connection is dropped under the drop-mid-stream fault.
    #[arg(long, default_value_t = 2)]
    pub drop_after_chunks: u32,

    /// SGLang P/D: replica i's bootstrap port is BASE+i, matched against a request's
    /// `bootstrap_port`. 0 makes it each replica's own HTTP port, which is what a decode
    /// replica in another process needs to reach this one as its prefill server (so does a
    /// BASE equal to the --listen port).
    #[arg(long, value_name = "BASE", default_value_t = 8998)]
    pub bootstrap_port: u16,
    /// SGLang P/D: how long a decode request waits for its prefill request (same
    /// `bootstrap_room`) to finish before answering 500; also how long a finished prefill
    /// waits for its decode before its room is dropped. Milliseconds.
    #[arg(long, default_value_t = 30_000)]
    pub bootstrap_timeout_ms: u64,
}

impl Cli {
    /// The timing of replica `i`.
    pub fn timing_for(&self, i: usize) -> Timing {
        if self.timing == TimingMode::Zero {
            return Timing::ZERO;
        }
        let base = Timing {
            prefill_per_token: self.prefill_us_per_token * 1e-6,
            decode_base: self.decode_base_ms * 1e-3,
            decode_per_seq: self.decode_per_seq_ms * 1e-3,
            step_overhead: self.step_overhead_ms * 1e-3,
            transfer_per_block: self.kv_transfer_ms_per_block * 1e-3,
        };
        base.scaled(self.replica_speeds.get(i).copied().unwrap_or(self.speed))
    }

    /// The configuration of replica `i`. The model length is capped at what the KV cache
    /// holds (vLLM refuses to start instead), so that one sequence always fits.
    pub fn engine_config(&self, i: usize) -> EngineConfig {
        EngineConfig {
            kv_blocks: self.kv_blocks,
            block_size: self.block_size,
            max_model_len: self
                .max_model_len
                .min(self.kv_blocks.saturating_mul(self.block_size)),
            max_num_seqs: self.max_num_seqs,
            max_num_batched_tokens: self.max_num_batched_tokens,
            timing: self.timing_for(i),
        }
    }

    /// The SGLang bootstrap port of replica `i`, listening at `addr`.
    pub fn bootstrap_port_for(&self, i: usize, addr: SocketAddr) -> u16 {
        if self.bootstrap_port == 0 {
            addr.port()
        } else {
            // `validate` keeps BASE + i within range.
            self.bootstrap_port + i as u16
        }
    }

    pub fn initial_faults(&self) -> FaultState {
        let mut f = FaultState {
            error_rate: self.error_rate,
            slow_stream_ms: self.slow_stream_ms,
            drop_after_chunks: self.drop_after_chunks,
            ..FaultState::default()
        };
        for flag in &self.faults {
            match flag {
                FaultFlag::Hang => f.hang = true,
                FaultFlag::SlowStream => f.slow_stream = true,
                FaultFlag::DropMidStream => f.drop_mid_stream = true,
                FaultFlag::Refuse => f.refuse_connections = true,
                FaultFlag::Unhealthy => f.unhealthy = true,
            }
        }
        f
    }

    /// Checks what clap cannot.
    pub fn validate(&self) -> Result<(), String> {
        if self.replicas == 0 {
            return Err("--replicas must be at least 1".into());
        }
        if u32::from(self.listen.port()) + u32::from(self.replicas) > 65536 {
            return Err("--listen port + --replicas exceeds 65535".into());
        }
        if u32::from(self.bootstrap_port) + u32::from(self.replicas) > 65536 {
            return Err("--bootstrap-port + --replicas exceeds 65535".into());
        }
        if self.bootstrap_timeout_ms == 0 {
            return Err("--bootstrap-timeout-ms must be positive".into());
        }
        if self.block_size == 0 || self.kv_blocks == 0 {
            return Err("--block-size and --kv-blocks must be positive".into());
        }
        if self.max_num_seqs == 0 || self.max_num_batched_tokens == 0 {
            return Err("--max-num-seqs and --max-num-batched-tokens must be positive".into());
        }
        if !(0.0..=1.0).contains(&self.error_rate) {
            return Err("--error-rate must be within [0, 1]".into());
        }
        if self.speed <= 0.0 || self.replica_speeds.iter().any(|s| *s <= 0.0) {
            return Err("speeds must be positive".into());
        }
        let costs = [
            self.prefill_us_per_token,
            self.decode_base_ms,
            self.decode_per_seq_ms,
            self.step_overhead_ms,
            self.kv_transfer_ms_per_block,
        ];
        if costs.iter().any(|c| !c.is_finite() || *c < 0.0) {
            return Err("costs must be finite and non-negative".into());
        }
        Ok(())
    }
}
