//! The load generator against real simulator replicas (started in-process on ephemeral ports):
//! streaming, token counts, the fleet counters, the oracle's agreement with the simulator's
//! own prefix cache, and each error kind the simulator can be made to produce.

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use warmpath_bench::client::{http_client, ErrorKind, Target};
use warmpath_bench::metrics::{fleet_delta, scrape};
use warmpath_bench::oracle::{evaluate, OracleRequest};
use warmpath_bench::results::{aggregate, LoadMode};
use warmpath_bench::runner::{run, Plan};
use warmpath_bench::workload::{
    Arrivals, Burst, Fleet, MultiTurn, SharedPrefix, Trace, WorkloadSpec,
};

async fn sim(extra: &[&str]) -> warmpath_sim::SimHandle {
    let mut args = vec!["warmpath-sim", "--listen", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let cli = warmpath_sim::config::Cli::parse_from(args);
    warmpath_sim::start(&cli).await.expect("simulator starts")
}

fn target(addr: std::net::SocketAddr, timeout: Duration) -> Arc<Target> {
    Arc::new(Target::new(&format!("http://{addr}"), "tiny", true, timeout).expect("a URL"))
}

fn closed(concurrency: usize, requests: u64) -> Plan {
    Plan {
        load: LoadMode::Closed { concurrency },
        requests: Some(requests),
        duration: Some(Duration::from_secs(60)),
        max_in_flight: 64,
        seed: 1,
    }
}

/// One replica with room for everything, requests one at a time: the simulator's hit and query
/// counters must equal the oracle's compulsory-miss bound exactly, for text and chat prompts.
/// This pins the oracle's tokenization and block rules to the simulator's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oracle_matches_the_simulator_cache_exactly_when_everything_fits() {
    let specs = [
        WorkloadSpec::SharedPrefix(SharedPrefix {
            groups: 3,
            prompts_per_group: 4,
            system_tokens: 200,
            question_tokens: 20,
            output_tokens: 4,
            zipf: 0.0,
        }),
        WorkloadSpec::MultiTurn(MultiTurn {
            active: 2,
            turns: 4,
            system_tokens: 50,
            user_tokens: 30,
            assistant_tokens: 25,
            output_tokens: 4,
        }),
    ];
    for spec in specs {
        let handle = sim(&["--kv-blocks", "4096", "--timing", "zero"]).await;
        let addr = handle.addrs()[0];
        let client = http_client(4);
        let metrics = vec![format!("http://{addr}/metrics")];
        let before = scrape(&client, &metrics[0]).await.unwrap();
        assert_eq!(before.block_size, Some(16));
        assert_eq!(before.num_blocks, Some(4096));
        let n = 20;
        let out = run(
            client.clone(),
            target(addr, Duration::from_secs(10)),
            spec.requests(7),
            closed(1, n),
            false,
        )
        .await;
        let after = scrape(&client, &metrics[0]).await.unwrap();
        let cache = fleet_delta(&metrics, &[before], &[after]);
        let agg = aggregate(&out.outcomes, 0);
        let (counts, throughput) = (agg.counts, agg.throughput);
        assert_eq!(counts.ok, n, "{:?}", counts.error_samples);
        // ignore_eos: exactly max_tokens per request, counted from the usage block.
        assert_eq!(throughput.output_tokens, 4 * n);
        let reqs: Vec<OracleRequest> = spec
            .requests(7)
            .take(n as usize)
            .map(|r| OracleRequest::from_work(&r, 16))
            .collect();
        let o = evaluate(&reqs, 16, 4096, 1);
        assert_eq!(cache.queries as u64, o.infinite.queries, "{}", spec.name());
        assert_eq!(
            throughput.prompt_tokens,
            o.infinite.queries,
            "{}",
            spec.name()
        );
        assert_eq!(cache.hits as u64, o.infinite.hits, "{}", spec.name());
        assert!(cache.hits > 0.0);
    }
}

/// A Mooncake-format trace replayed at its own times (scaled): every request is sent no earlier
/// than its arrival, the run spans the trace's time, and the simulator's cache sees exactly the
/// sharing the trace's block ids describe (the oracle's compulsory-miss bound, one replica with
/// room for everything).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_is_replayed_at_its_times_with_its_sharing() {
    let path =
        std::env::temp_dir().join(format!("warmpath-sim-trace-{}.jsonl", std::process::id()));
    let mut lines = String::new();
    for i in 0..24u64 {
        // Three conversations of growing prompts (each turn repeats its history's blocks),
        // a request every 40 ms of trace time.
        let conv = i % 3;
        let turn = i / 3;
        let ids: Vec<String> = (0..=turn + 1)
            .map(|b| (conv * 100 + b).to_string())
            .collect();
        lines.push_str(&format!(
            "{{\"timestamp\": {}, \"input_length\": {}, \"output_length\": 64, \"hash_ids\": [{}]}}\n",
            i * 40,
            (turn + 2) * 512 - 100,
            ids.join(", ")
        ));
    }
    std::fs::write(&path, lines).unwrap();
    let mut trace = Trace::load(&path, 16).unwrap();
    std::fs::remove_file(&path).unwrap();
    trace.time_scale = 2.0;
    trace.window = 24;
    trace.start = Some(0);
    let spec = WorkloadSpec::Trace(trace);

    let handle = sim(&["--kv-blocks", "4096", "--timing", "zero"]).await;
    let addr = handle.addrs()[0];
    let client = http_client(4);
    let metrics = vec![format!("http://{addr}/metrics")];
    let before = scrape(&client, &metrics[0]).await.unwrap();
    let plan = Plan {
        load: LoadMode::Trace,
        requests: Some(24),
        duration: Some(Duration::from_secs(60)),
        max_in_flight: 64,
        seed: 1,
    };
    let out = run(
        client.clone(),
        target(addr, Duration::from_secs(10)),
        spec.requests(1),
        plan,
        false,
    )
    .await;
    let after = scrape(&client, &metrics[0]).await.unwrap();
    let agg = aggregate(&out.outcomes, 0);
    assert_eq!(agg.counts.ok, 24, "{:?}", agg.counts.error_samples);
    let mut starts: Vec<f64> = out.outcomes.iter().map(|o| o.start_s).collect();
    starts.sort_by(f64::total_cmp);
    let arrivals: Vec<f64> = spec
        .requests(1)
        .map(|r| r.arrival.unwrap().as_secs_f64())
        .collect();
    assert_eq!(arrivals.last(), Some(&(23.0 * 0.040 / 2.0)));
    for (s, a) in starts.iter().zip(&arrivals) {
        assert!(*s >= a - 1e-3, "sent at {s} s before its arrival at {a} s");
    }
    let cache = fleet_delta(&metrics, &[before], &[after]);
    let reqs: Vec<OracleRequest> = spec
        .requests(1)
        .map(|r| OracleRequest::from_work(&r, 16))
        .collect();
    let o = evaluate(&reqs, 16, 4096, 1);
    assert_eq!(cache.queries as u64, o.infinite.queries);
    assert_eq!(cache.hits as u64, o.infinite.hits);
    // Every turn after a conversation's first hits its history: 21 of 24 requests, 16 tokens
    // (one block) per shared trace block.
    assert!(o.infinite.hits >= 21 * 16, "{}", o.infinite.hits);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_and_open_loop_stream_and_time_every_request() {
    let handle = sim(&["--replicas", "2", "--kv-blocks", "256"]).await;
    let addrs = handle.addrs();
    let spec = WorkloadSpec::defaults_for(
        "shared-prefix",
        &Fleet {
            replicas: 2,
            kv_blocks: 64,
            block_size: 16,
        },
    )
    .unwrap();
    let client = http_client(8);
    let out = run(
        client.clone(),
        target(addrs[1], Duration::from_secs(10)),
        spec.requests(1),
        closed(4, 30),
        false,
    )
    .await;
    let agg = aggregate(&out.outcomes, 0);
    let (counts, tp, lat, cdf) = (agg.counts, agg.throughput, agg.latency_ms, agg.ttft_cdf_ms);
    assert_eq!((counts.sent, counts.ok, counts.errors), (30, 30, 0));
    assert_eq!(lat.ttft.count, 30);
    // 32 output tokens each: 31 gaps per request when every token is its own chunk.
    assert!(lat.itl.count >= 30 * 20, "{}", lat.itl.count);
    assert!(lat.ttft.p50.unwrap() > 0.0);
    assert!(lat.e2e.p50.unwrap() >= lat.ttft.p50.unwrap());
    assert!(tp.requests_per_s > 0.0);
    assert_eq!(cdf.len(), 101);

    let open = Plan {
        load: LoadMode::Open {
            rate: 40.0,
            burst: None,
        },
        requests: Some(20),
        duration: Some(Duration::from_secs(30)),
        max_in_flight: 64,
        seed: 2,
    };
    let send_all = |plan: Plan| {
        let (client, target, requests) = (
            client.clone(),
            target(addrs[0], Duration::from_secs(10)),
            spec.requests(1),
        );
        async move {
            let out = run(client, target, requests, plan, false).await;
            let counts = aggregate(&out.outcomes, 0).counts;
            assert_eq!((counts.sent, counts.ok), (20, 20));
            out
        }
    };
    let out = send_all(open).await;
    // Poisson arrivals at 40/s: 20 requests are spread over about half a second, not sent at once.
    let last_start = out.outcomes.iter().map(|o| o.start_s).fold(0.0, f64::max);
    assert!(last_start > 0.1, "{last_start}");

    // Bursty arrivals of the same mean rate: every request still sent and answered, at the
    // times the seeded process says.
    let burst = Burst {
        factor: 4.0,
        period_s: 0.4,
    };
    let bursty = Plan {
        load: LoadMode::Open {
            rate: 40.0,
            burst: Some(burst),
        },
        ..open
    };
    let out = send_all(bursty).await;
    let mut starts: Vec<f64> = out.outcomes.iter().map(|o| o.start_s).collect();
    starts.sort_by(f64::total_cmp);
    let mut arrivals = Arrivals::new(2, 40.0, Some(burst));
    let planned: Vec<f64> = (0..20).map(|_| arrivals.next_arrival()).collect();
    for (s, p) in starts.iter().zip(&planned) {
        // Sent at its arrival time, give or take the scheduler.
        assert!(*s >= p - 0.005 && *s < p + 0.25, "sent {s} planned {p}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duration_stops_a_closed_loop() {
    let handle = sim(&["--kv-blocks", "256"]).await;
    let spec = WorkloadSpec::defaults_for("no-sharing", &Fleet::default()).unwrap();
    let plan = Plan {
        load: LoadMode::Closed { concurrency: 2 },
        requests: None,
        duration: Some(Duration::from_millis(700)),
        max_in_flight: 8,
        seed: 1,
    };
    let out = run(
        http_client(2),
        target(handle.addrs()[0], Duration::from_secs(10)),
        spec.requests(1),
        plan,
        false,
    )
    .await;
    assert!(!out.outcomes.is_empty());
    assert!(out
        .outcomes
        .iter()
        .all(|o| o.start_s < 0.7 && o.error.is_none()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_kinds_from_a_faulty_simulator() {
    let spec = WorkloadSpec::defaults_for("no-sharing", &Fleet::default()).unwrap();
    type Expect = fn(&ErrorKind) -> bool;
    let cases: [(&[&str], Expect); 3] = [
        (&["--error-rate", "1.0"], |k| {
            matches!(k, ErrorKind::Status(500))
        }),
        (&["--fault", "hang"], |k| *k == ErrorKind::Timeout),
        (&["--fault", "drop-mid-stream"], |k| {
            matches!(k, ErrorKind::Io | ErrorKind::MalformedStream)
        }),
    ];
    for (flags, expected) in cases {
        let handle = sim(flags).await;
        let out = run(
            http_client(2),
            target(handle.addrs()[0], Duration::from_millis(500)),
            spec.requests(1),
            closed(2, 4),
            false,
        )
        .await;
        assert_eq!(out.outcomes.len(), 4);
        for o in &out.outcomes {
            let (kind, msg) = o
                .error
                .as_ref()
                .unwrap_or_else(|| panic!("{flags:?}: no error"));
            assert!(expected(kind), "{flags:?}: {kind:?} {msg}");
        }
    }
}
