//! The `warmpath-bench` binary end to end: `run` against real simulator replicas (in-process,
//! ephemeral ports) with the fleet counters and the oracle, then `report` over the result.

use std::path::PathBuf;
use std::process::Command;

use clap::Parser;

const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("warmpath-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_then_report() {
    let cli = warmpath_sim::config::Cli::parse_from([
        "warmpath-sim",
        "--listen",
        "127.0.0.1:0",
        "--replicas",
        "2",
        "--kv-blocks",
        "64",
    ]);
    let handle = warmpath_sim::start(&cli).await.unwrap();
    let addrs = handle.addrs();
    let dir = scratch("cli");
    let out = dir.join("run.json");
    let bin = env!("CARGO_BIN_EXE_warmpath-bench");
    let args: Vec<String> = [
        "run",
        "--url",
        &format!("http://{}", addrs[0]),
        "--workload",
        "shared-prefix",
        "--fleet-replicas",
        "2",
        "--fleet-kv-blocks",
        "64",
        "--requests",
        "24",
        "--warmup",
        "4",
        "--concurrency",
        "4",
        "--metrics-url",
        &format!("http://{}/metrics", addrs[0]),
        "--metrics-url",
        &format!("http://{}/metrics", addrs[1]),
        "--label",
        "direct",
        "--suite",
        "sim",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let status = tokio::task::spawn_blocking(move || Command::new(bin).args(&args).status())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    // 24 sent, the first 4 to complete are warm-up: 20 counted.
    assert_eq!(v["counts"]["sent"], 24);
    assert_eq!(v["counts"]["warmup"], 4);
    assert_eq!(v["counts"]["ok"], 20);
    assert_eq!(v["latency_ms"]["ttft"]["count"], 20);
    let window = v["throughput"]["window_s"].as_f64().unwrap();
    assert!(
        window > 0.0 && window < v["wall_s"].as_f64().unwrap(),
        "{window}"
    );
    assert_eq!(v["config"]["workload"]["kind"], "shared-prefix");
    // Everything went to the first replica; the fleet figures still cover both.
    let cache = &v["cache"];
    assert_eq!(cache["replicas"].as_array().unwrap().len(), 2);
    assert_eq!(cache["replicas"][1]["queries"], 0.0);
    // The engines' own counts: every request (warm-up included) finished on the first replica,
    // and the engines' TTFT histogram saw each of them.
    assert_eq!(cache["replicas"][0]["requests"], 24.0);
    assert_eq!(cache["replicas"][1]["requests"], 0.0);
    let engine = &cache["engine_ttft_ms"];
    assert_eq!(engine["count"], 24.0);
    let (engine_p90, engine_mean) = (
        engine["p90"].as_f64().unwrap(),
        engine["mean"].as_f64().unwrap(),
    );
    assert!(engine_mean > 0.0 && engine_p90 > 0.0, "{engine}");
    let hit = cache["hit_rate"].as_f64().unwrap();
    let oracle = v["oracle"]["belady"]["hit_rate"].as_f64().unwrap();
    assert!(
        hit > 0.0 && hit <= oracle + 1e-9,
        "hit {hit} oracle {oracle}"
    );
    // The ceilings in order: LRU with perfect placement ≤ Belady ≤ an infinite cache.
    let lru = v["oracle"]["lru_perfect_placement"]["hit_rate"]
        .as_f64()
        .unwrap();
    let infinite = v["oracle"]["infinite"]["hit_rate"].as_f64().unwrap();
    assert!(
        lru <= oracle && oracle <= infinite,
        "{lru} {oracle} {infinite}"
    );
    // The oracle used the replicas' own cache shape (2 × 64 blocks).
    assert_eq!(v["oracle"]["fleet_blocks"], 128);
    // Provenance: the command line, the load average (Linux), and the commit of the tree the
    // test runs in (cargo runs it in bench/, inside the repository, when git is there).
    assert_eq!(v["schema"], 2);
    let prov = &v["provenance"];
    assert_eq!(prov["argv"][1], "run");
    assert!(prov["argv"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a == "--warmup"));
    if std::path::Path::new("/proc/loadavg").exists() {
        assert_eq!(prov["load_average"]["start"].as_array().unwrap().len(), 3);
        assert_eq!(prov["load_average"]["end"].as_array().unwrap().len(), 3);
    }
    let git = Command::new("git").args(["rev-parse", "HEAD"]).output();
    if let Some(o) = git.ok().filter(|o| o.status.success()) {
        let head = String::from_utf8_lossy(&o.stdout).trim().to_owned();
        assert_eq!(prov["commit"], head.as_str());
        assert!(prov["dirty"].is_boolean());
    }

    if !std::path::Path::new(FONT).exists() {
        warmpath_testkit::optional::skip(
            "the report half of this test",
            "WARMPATH_FONT_REQUIRED",
            &format!("{FONT} is missing (apt-get install fonts-dejavu-core)"),
        );
        return;
    }
    let md = dir.join("B.md");
    let status = Command::new(bin)
        .args([
            "report",
            "--results",
            dir.to_str().unwrap(),
            "--out",
            md.to_str().unwrap(),
        ])
        .status()
        .unwrap();
    assert!(status.success());
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(text.contains("| direct | 1 | 20 | 0 |"), "{text}");
    assert!(text.contains("1 seed per point, no intervals"), "{text}");
    assert!(text.contains("the first 4 completions left out as warm-up"));
    assert!(text.contains("How the oracles are computed"));
    assert!(text.contains("| hit rate | Belady | LRU, perfect placement | infinite |"));
    // The collapse onto one replica is plain: all of the load on one, none on the other.
    assert!(text.contains("| 1.00 | 0.00 | 1 of 2 |"), "{text}");
    assert!(text.contains("## Provenance"), "{text}");
    for png in [
        "sim-shared-prefix-ttft-cdf.png",
        "sim-shared-prefix-hit-rate.png",
    ] {
        let bytes = std::fs::read(dir.join(png)).unwrap();
        assert_eq!(&bytes[1..4], b"PNG", "{png}");
        assert!(text.contains(png));
    }
    // A result of another commit: refused, naming the file, unless mixing is asked for.
    let mut other = v.clone();
    other["provenance"]["commit"] = "0123456789abcdef0123456789abcdef01234567".into();
    std::fs::write(dir.join("other.json"), other.to_string()).unwrap();
    let report = |extra: &[&str]| {
        let mut args = vec![
            "report",
            "--results",
            dir.to_str().unwrap(),
            "--out",
            md.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        Command::new(bin).args(args).output().unwrap()
    };
    let o = report(&[]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("different commits") && err.contains("other.json"),
        "{err}"
    );
    let o = report(&["--allow-mixed-commits"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(text.contains("come from 2 commits"), "{text}");
    // Written into the results folder a second time, the report did not read its first self.
    assert_eq!(
        text.matches("# warmpath benchmarks\n").count(),
        1,
        "the report took itself for a fragment: {text}"
    );
    // A result file of a schema this build does not know: a clear error naming it.
    other["schema"] = 99.into();
    std::fs::write(dir.join("other.json"), other.to_string()).unwrap();
    let o = report(&["--allow-mixed-commits"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("other.json has result schema 99"),
        "{err}"
    );

    // Bad input: a results folder without results is a clear error, not an empty report.
    let empty = scratch("empty");
    let o = Command::new(bin)
        .args([
            "report",
            "--results",
            empty.to_str().unwrap(),
            "--out",
            md.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no run results"));
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&empty);
}

#[test]
fn bad_arguments_are_refused_with_a_reason() {
    let bin = env!("CARGO_BIN_EXE_warmpath-bench");
    let cases: [(&[&str], &str); 10] = [
        (
            &[
                "run",
                "--url",
                "http://127.0.0.1:9",
                "--requests",
                "1",
                "--burst",
                "3",
            ],
            "--burst shapes open-loop arrivals",
        ),
        (
            &[
                "run",
                "--url",
                "http://127.0.0.1:9",
                "--requests",
                "1",
                "--mode",
                "open",
            ],
            "--rate",
        ),
        (
            &["run", "--url", "http://127.0.0.1:9"],
            "--requests N or --duration",
        ),
        (
            &[
                "run",
                "--url",
                "http://127.0.0.1:9",
                "--requests",
                "5",
                "--warmup",
                "5",
            ],
            "--warmup must be smaller than --requests",
        ),
        (
            &["run", "--url", "ftp://x", "--requests", "1"],
            "not an http://host:port URL",
        ),
        (
            &[
                "run",
                "--url",
                "http://127.0.0.1:9",
                "--requests",
                "1",
                "--workload",
                "agent",
                "--groups",
                "3",
            ],
            "does not apply",
        ),
        (
            &[
                "run",
                "--url",
                "http://127.0.0.1:9",
                "--requests",
                "1",
                "--mode",
                "trace",
            ],
            "use it with --workload trace",
        ),
        (
            &[
                "run",
                "--url",
                "http://127.0.0.1:9",
                "--requests",
                "1",
                "--workload",
                "trace",
            ],
            "needs --trace FILE",
        ),
        (
            &[
                "run",
                "--url",
                "http://127.0.0.1:9",
                "--requests",
                "1",
                "--workload",
                "trace",
                "--trace",
                "/nonexistent/trace.jsonl",
            ],
            "reading trace /nonexistent/trace.jsonl",
        ),
        (
            &[
                "run",
                "--url",
                "http://127.0.0.1:9",
                "--requests",
                "1",
                "--time-scale",
                "4",
            ],
            "--time-scale does not apply to the shared-prefix workload",
        ),
    ];
    for (args, expected) in cases {
        let o = Command::new(bin).args(args).output().unwrap();
        assert!(!o.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(expected), "{args:?}: {err}");
    }
}

/// The README's benchmark block is what its committed results say: `headline --check`
/// regenerates it from the result folders its marker names and fails on any difference.
#[test]
fn readme_benchmark_block_matches_the_committed_results() {
    let readme = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
    let o = Command::new(env!("CARGO_BIN_EXE_warmpath-bench"))
        .args(["headline", "--check", "--readme", readme])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// `headline` rewrites only the block between its markers, and `--check` then passes; a block
/// edited by hand fails it.
#[test]
fn headline_regenerates_its_block_and_check_catches_hand_edits() {
    let dir = scratch("headline");
    let results = dir.join("results");
    std::fs::create_dir_all(&results).unwrap();
    let sample = include_str!("data/result.json");
    for (label, seed) in [
        ("warmpath-prefix", 1),
        ("warmpath-prefix", 2),
        ("smg-cache-aware", 1),
        ("smg-cache-aware", 2),
    ] {
        let mut v: serde_json::Value = serde_json::from_str(sample).unwrap();
        v["config"]["label"] = label.into();
        v["config"]["seed"] = seed.into();
        std::fs::write(results.join(format!("{label}-{seed}.json")), v.to_string()).unwrap();
    }
    let readme = dir.join("README.md");
    std::fs::write(
        &readme,
        "# x\n\nbefore\n\n<!-- warmpath-bench headline --results results -->\nstale\n<!-- end of warmpath-bench headline -->\n\nafter\n",
    )
    .unwrap();
    let bin = env!("CARGO_BIN_EXE_warmpath-bench");
    let run = |check: bool| {
        let mut c = Command::new(bin);
        c.args(["headline", "--readme"]).arg(&readme);
        if check {
            c.arg("--check");
        }
        c.output().unwrap()
    };
    assert!(
        !run(true).status.success(),
        "a stale block must fail --check"
    );
    assert!(run(false).status.success());
    let text = std::fs::read_to_string(&readme).unwrap();
    assert!(
        text.starts_with("# x\n\nbefore\n\n<!-- warmpath-bench headline --results results -->\n")
    );
    assert!(
        text.ends_with("<!-- end of warmpath-bench headline -->\n\nafter\n"),
        "{text}"
    );
    assert!(text.contains("| smg-cache-aware | 2 |"), "{text}");
    assert!(!text.contains("stale"));
    assert!(run(true).status.success());
    std::fs::write(
        &readme,
        text.replace("| smg-cache-aware | 2 |", "| smg-cache-aware | 3 |"),
    )
    .unwrap();
    assert!(!run(true).status.success(), "a hand edit must fail --check");
    let _ = std::fs::remove_dir_all(&dir);
}
