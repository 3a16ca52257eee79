//! The node cluster: a single-node Kubernetes of real components (kubelet over containerd and
//! runc, controller-manager, scheduler, kube-proxy, CNI bridge networking), started by
//! `e2e/cluster/node.sh` once per test binary, or a kind cluster named by
//! `WARMPATH_NODE_KUBECONFIG`. Tests here install the chart as a cluster runs it: pods from
//! images, probes, Services, rolling updates, garbage collection.
//!
//! Images are the workspace's binaries packed by `e2e/cluster/image.sh` and imported into the
//! node's containerd (`ctr images import`), or loaded with `kind load image-archive` on kind.

use crate::cluster::{build_tools, cache_dir, repo_root, run, tail, TestCluster};
use crate::error::E2eError;
use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

/// The node cluster and how images reach its container runtime.
#[derive(Debug)]
pub struct NodeCluster {
    cluster: &'static TestCluster,
    images: ImageSink,
    loaded: Mutex<HashSet<String>>,
}

#[derive(Debug, Clone)]
enum ImageSink {
    /// containerd's socket of the node that node.sh started.
    Containerd(PathBuf),
    /// A kind cluster (its name): `kind load image-archive`.
    Kind(String),
}

static NODE: OnceLock<Result<NodeCluster, String>> = OnceLock::new();
static CLUSTER: OnceLock<TestCluster> = OnceLock::new();

impl NodeCluster {
    /// The node cluster for this test binary, started on first use; `None` after a loud SKIP
    /// message when this machine cannot run one (not root, no containerd; see `node.sh
    /// check`), or a panic instead when `WARMPATH_NODE_REQUIRED=1` (CI). A cluster that can
    /// run here but does not start is a failure, not a skip.
    pub fn get_or_skip(test: &str) -> Option<&'static NodeCluster> {
        match NODE.get_or_init(Self::connect) {
            Ok(node) => Some(node),
            Err(why) if why.starts_with("unavailable: ") => {
                if std::env::var("WARMPATH_NODE_REQUIRED").is_ok_and(|v| v == "1") {
                    panic!(
                        "{test}: the node cluster is required (WARMPATH_NODE_REQUIRED=1) but {why}"
                    );
                }
                let _ = writeln!(
                    std::io::stderr(),
                    "\n*** SKIPPED {test}: no node cluster here ({why}).\n\
                     *** Run as root with containerd, runc, iptables and the CNI plugins \
                     installed, or set WARMPATH_NODE_KUBECONFIG to a kind cluster's kubeconfig.\n"
                );
                None
            }
            Err(why) => panic!("{test}: the node cluster did not start: {why}"),
        }
    }

    fn connect() -> Result<NodeCluster, String> {
        let cache_dir = cache_dir();
        let bin_dir = cache_dir.join("bin");
        if let Some(kubeconfig) = std::env::var_os("WARMPATH_NODE_KUBECONFIG") {
            let kind = std::env::var("WARMPATH_NODE_KIND").unwrap_or_else(|_| "warmpath".into());
            build_tools(&cache_dir).map_err(|e| format!("unavailable: {e}"))?;
            let cluster = CLUSTER.get_or_init(|| {
                TestCluster::at(PathBuf::from(kubeconfig), bin_dir, cache_dir.clone())
            });
            return Ok(NodeCluster {
                cluster,
                images: ImageSink::Kind(kind),
                loaded: Mutex::new(HashSet::new()),
            });
        }
        let script = repo_root().join("e2e/cluster/node.sh");
        let check = Command::new(&script)
            .arg("check")
            .env("WARMPATH_E2E_CACHE", &cache_dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("unavailable: running node.sh: {e}"))?;
        if !check.status.success() {
            return Err(format!("unavailable: {}", tail(&check.stderr)));
        }
        let _ = writeln!(
            std::io::stderr(),
            "warmpath-e2e: starting the node cluster with e2e/cluster/node.sh up \
             (the first run builds kubelet, kube-proxy, the controller-manager and the scheduler)"
        );
        let out = Command::new(&script)
            .arg("up")
            .env("WARMPATH_CLUSTER_OWNER_PID", std::process::id().to_string())
            .env("WARMPATH_E2E_CACHE", &cache_dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running node.sh up: {e}"))?;
        if out.status.code() == Some(3) {
            return Err(format!("unavailable: {}", tail(&out.stderr)));
        }
        if !out.status.success() {
            return Err(format!("node.sh up: {}\n{}", out.status, tail(&out.stderr)));
        }
        // The phases' times, where the test's output shows them (the harness captures only
        // `eprintln!`).
        for line in String::from_utf8_lossy(&out.stderr).lines() {
            if line.starts_with("phase: ") || line.starts_with("node.sh: node cluster up") {
                let _ = writeln!(std::io::stderr(), "warmpath-e2e: {line}");
            }
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let kubeconfig = stdout
            .lines()
            .last()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .ok_or_else(|| format!("node.sh up printed no kubeconfig\n{}", tail(&out.stderr)))?;
        let socket = cache_dir.join("node-run/containerd.sock");
        let cluster = CLUSTER
            .get_or_init(|| TestCluster::at(PathBuf::from(kubeconfig), bin_dir, cache_dir.clone()));
        Ok(NodeCluster {
            cluster,
            images: ImageSink::Containerd(socket),
            loaded: Mutex::new(HashSet::new()),
        })
    }

    /// The cluster's kubectl, helm and admin client, as for the API-server-only cluster.
    pub fn cluster(&self) -> &'static TestCluster {
        self.cluster
    }

    /// Makes `binary` available to the node as the image `reference` (packed by image.sh,
    /// imported once per test binary and reference). Pods name it with `imagePullPolicy:
    /// Never`, so nothing is pulled.
    pub fn load_image(&self, binary: &Path, reference: &str) -> Result<(), E2eError> {
        let mut loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        if loaded.contains(reference) {
            return Ok(());
        }
        let dir = std::env::temp_dir().join(format!("warmpath-e2e-images-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| E2eError::io(&dir, e))?;
        let archive = dir.join(format!("{}.tar", reference.replace(['/', ':'], "_")));
        run(
            Command::new(repo_root().join("e2e/cluster/image.sh"))
                .arg(binary)
                .arg(reference)
                .arg(&archive),
            None,
        )?;
        match &self.images {
            ImageSink::Containerd(socket) => {
                run(
                    Command::new("ctr")
                        .arg("--address")
                        .arg(socket)
                        .args(["-n", "k8s.io", "images", "import"])
                        .arg(&archive),
                    None,
                )?;
            }
            ImageSink::Kind(name) => {
                run(
                    Command::new("kind")
                        .args(["load", "image-archive", "--name", name])
                        .arg(&archive),
                    None,
                )?;
            }
        }
        let _ = std::fs::remove_file(&archive);
        loaded.insert(reference.to_owned());
        Ok(())
    }

    /// Forgets the connections to `node_ip:port` (a NodePort) that kube-proxy refused while the
    /// Service had no endpoints yet: their conntrack entries (never rewritten to a pod) outlive
    /// the refusal by up to two minutes, kube-proxy clears such entries for UDP only, and this
    /// host, the tests' only client, hands the same source ports out again for the same
    /// destination, so a later connection on one of them would be refused again though the
    /// Service has pods. Connections that reached a pod (their reply comes from its address)
    /// are untouched. Nothing to do on kind, whose clients' ports live in other namespaces.
    pub fn forget_refused_connections(&self, node_ip: &str, port: u16) -> Result<(), E2eError> {
        if !matches!(self.images, ImageSink::Containerd(_)) {
            return Ok(());
        }
        let out = Command::new("conntrack")
            .args(["-D", "-p", "tcp", "-d", node_ip, "--dport"])
            .arg(port.to_string())
            .args(["-r", node_ip])
            .stdin(Stdio::null())
            .output()
            .map_err(|source| E2eError::Spawn {
                command: "conntrack -D".into(),
                source,
            })?;
        // Exit status 1 with "0 flow entries have been deleted" is the usual answer.
        let said = String::from_utf8_lossy(&out.stderr);
        if out.status.success() || said.contains("0 flow entries") {
            Ok(())
        } else {
            Err(E2eError::Command {
                command: "conntrack -D".into(),
                status: out.status.to_string(),
                stderr: said.into_owned(),
            })
        }
    }

    /// The node's address (its `InternalIP`), where NodePort Services answer.
    pub fn node_ip(&self) -> Result<String, E2eError> {
        let out = run(
            self.cluster.kubectl().args([
                "get",
                "nodes",
                "-o",
                "jsonpath={.items[0].status.addresses[?(@.type==\"InternalIP\")].address}",
            ]),
            None,
        )?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }
}

/// Reports a phase's time where the run shows it: on stderr past the test harness's capture,
/// and in the file `WARMPATH_PHASES` names (`with-cluster.sh` prints it at the end), as
/// `e2e/cluster/lib.sh`'s `phase` does for the scripts.
pub fn report_phase(name: &str, took: std::time::Duration) {
    let line = format!("{name:<44} {:>5}s", took.as_secs());
    let _ = writeln!(std::io::stderr(), "warmpath-e2e: phase: {line}");
    if let Some(file) = std::env::var_os("WARMPATH_PHASES") {
        if let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(file) {
            let _ = writeln!(f, "{line}");
        }
    }
}
