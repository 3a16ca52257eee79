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
    assert_eq!(v["counts"]["ok"], 24);
    assert_eq!(v["config"]["workload"]["kind"], "shared-prefix");
    // Everything went to the first replica; the fleet figures still cover both.
    let cache = &v["cache"];
    assert_eq!(cache["replicas"].as_array().unwrap().len(), 2);
    assert_eq!(cache["replicas"][1]["queries"], 0.0);
    let hit = cache["hit_rate"].as_f64().unwrap();
    let oracle = v["oracle"]["belady"]["hit_rate"].as_f64().unwrap();
    assert!(
        hit > 0.0 && hit <= oracle + 1e-9,
        "hit {hit} oracle {oracle}"
    );
    // The oracle used the replicas' own cache shape (2 × 64 blocks).
    assert_eq!(v["oracle"]["fleet_blocks"], 128);

    if !std::path::Path::new(FONT).exists() {
        eprintln!("!!!!! SKIPPING the report half of this test: {FONT} is missing (apt-get install fonts-dejavu-core) !!!!!");
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
    assert!(text.contains("| direct | 24 | 0 |"), "{text}");
    assert!(text.contains("How the oracle is computed"));
    for png in [
        "sim-shared-prefix-ttft-cdf.png",
        "sim-shared-prefix-hit-rate.png",
    ] {
        let bytes = std::fs::read(dir.join(png)).unwrap();
        assert_eq!(&bytes[1..4], b"PNG", "{png}");
        assert!(text.contains(png));
    }
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
    let cases: [(&[&str], &str); 4] = [
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
    ];
    for (args, expected) in cases {
        let o = Command::new(bin).args(args).output().unwrap();
        assert!(!o.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(expected), "{args:?}: {err}");
    }
}
