//! The shared test API server: found through `WARMPATH_KUBECONFIG` or started by
//! `e2e/cluster/up.sh`, once per test binary, and the binaries (kubectl, helm) built with it.

use crate::error::E2eError;
use kube::config::{KubeConfigOptions, Kubeconfig};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

/// The running test cluster and the tools that talk to it.
#[derive(Debug, Clone)]
pub struct TestCluster {
    kubeconfig: PathBuf,
    bin_dir: PathBuf,
    cache_dir: PathBuf,
}

/// Why the cluster could not be had, kept so that every test of the binary gets the same answer.
#[derive(Debug, Clone)]
enum Failure {
    Unavailable(String),
    Start { status: String, stderr: String },
}

static CLUSTER: OnceLock<Result<TestCluster, Failure>> = OnceLock::new();

/// The repository's root (this crate lives in `<root>/e2e`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e has a parent folder")
        .to_path_buf()
}

impl TestCluster {
    /// The cluster for this test binary, started on first use.
    ///
    /// Blocks while `up.sh` builds (first run only: many minutes) and starts the cluster.
    pub fn get() -> Result<&'static TestCluster, E2eError> {
        match CLUSTER.get_or_init(Self::connect) {
            Ok(cluster) => Ok(cluster),
            Err(Failure::Unavailable(why)) => Err(E2eError::Unavailable(why.clone())),
            Err(Failure::Start { status, stderr }) => Err(E2eError::ClusterStart {
                status: status.clone(),
                stderr: stderr.clone(),
            }),
        }
    }

    /// [`TestCluster::get`], except that when the binaries cannot be built it prints a loud
    /// SKIP message and returns `None` (or panics when `WARMPATH_E2E_REQUIRED=1`). Any other
    /// failure panics: a cluster that builds but does not start is a bug to see.
    pub fn get_or_skip(test: &str) -> Option<&'static TestCluster> {
        match Self::get() {
            Ok(cluster) => Some(cluster),
            Err(E2eError::Unavailable(why)) => {
                if std::env::var("WARMPATH_E2E_REQUIRED").is_ok_and(|v| v == "1") {
                    panic!(
                        "{test}: the test cluster is required (WARMPATH_E2E_REQUIRED=1) but {why}"
                    );
                }
                // Written to the process's stderr, not through eprintln!, which the test harness
                // captures and hides for tests that pass.
                let _ = writeln!(
                    std::io::stderr(),
                    "\n*** SKIPPED {test}: the test API server cannot be built here: {why}\n\
                     *** Install Go >= 1.26 with access to the Go module proxy, or run \
                     e2e/cluster/up.sh and set WARMPATH_KUBECONFIG.\n"
                );
                None
            }
            Err(other) => panic!("{test}: {other}"),
        }
    }

    fn connect() -> Result<TestCluster, Failure> {
        let root = repo_root();
        let cache_dir = cache_dir();
        let bin_dir = cache_dir.join("bin");
        if let Some(kubeconfig) = std::env::var_os("WARMPATH_KUBECONFIG") {
            // The cluster runs already; kubectl and helm may still need building.
            build_tools(&cache_dir).map_err(Failure::Unavailable)?;
            return Ok(TestCluster {
                kubeconfig: PathBuf::from(kubeconfig),
                bin_dir,
                cache_dir,
            });
        }
        let _ = writeln!(
            std::io::stderr(),
            "warmpath-e2e: starting the test cluster with e2e/cluster/up.sh \
             (the first run builds kube-apiserver, etcd, kubectl and helm: many minutes)"
        );
        let out = Command::new(root.join("e2e/cluster/up.sh"))
            .env("WARMPATH_CLUSTER_OWNER_PID", std::process::id().to_string())
            .env("WARMPATH_E2E_CACHE", &cache_dir)
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .stdout(Stdio::piped())
            .output()
            .map_err(|e| Failure::Unavailable(format!("running e2e/cluster/up.sh: {e}")))?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.code() == Some(3) {
            return Err(Failure::Unavailable(tail(stderr.as_bytes())));
        }
        if !out.status.success() {
            return Err(Failure::Start {
                status: out.status.to_string(),
                stderr: tail(stderr.as_bytes()),
            });
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let Some(last) = stdout
            .lines()
            .last()
            .map(str::trim)
            .filter(|l| !l.is_empty())
        else {
            return Err(Failure::Start {
                status: "no kubeconfig path printed".into(),
                stderr: tail(stderr.as_bytes()),
            });
        };
        Ok(TestCluster {
            kubeconfig: PathBuf::from(last),
            bin_dir,
            cache_dir,
        })
    }

    /// A cluster whose admin kubeconfig is `kubeconfig`, with the tools built in `bin_dir`
    /// (the node cluster's, see [`crate::NodeCluster`]).
    pub(crate) fn at(kubeconfig: PathBuf, bin_dir: PathBuf, cache_dir: PathBuf) -> TestCluster {
        TestCluster {
            kubeconfig,
            bin_dir,
            cache_dir,
        }
    }

    /// The admin kubeconfig (user in group system:masters).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Stops kube-apiserver (etcd keeps the state), waits `down`, starts it again with the
    /// same flags and returns once it is ready. Every client of the cluster sees the outage,
    /// so only a test binary with a single test may call this (cargo runs test binaries one
    /// after another, tests within one binary in parallel).
    pub fn restart_apiserver(&self, down: std::time::Duration) -> Result<(), E2eError> {
        let mut cmd = Command::new(repo_root().join("e2e/cluster/restart-apiserver.sh"));
        cmd.arg(format!("{:.1}", down.as_secs_f64()))
            .env("WARMPATH_E2E_CACHE", &self.cache_dir);
        run(&mut cmd, None).map(|_| ())
    }

    /// `kubectl` built by up.sh, pointed at the admin kubeconfig.
    pub fn kubectl(&self) -> Command {
        let mut cmd = Command::new(self.bin_dir.join("kubectl"));
        cmd.arg("--kubeconfig").arg(&self.kubeconfig);
        cmd.stdin(Stdio::null());
        cmd
    }

    /// `helm` built by up.sh, pointed at the admin kubeconfig, with its caches under
    /// e2e/.cache so tests never touch the user's helm configuration.
    pub fn helm(&self) -> Command {
        let mut cmd = Command::new(self.bin_dir.join("helm"));
        let home = self.cache_dir.join("helm-home");
        cmd.env("KUBECONFIG", &self.kubeconfig)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .stdin(Stdio::null());
        cmd
    }

    /// Applies every CRD file (`*.yaml`) in `dir` with server-side apply under one field manager
    /// (so that concurrent tests agree on who owns these cluster-scoped objects) and waits until
    /// each is established, by the name in its `metadata.name` (so that other projects' files keep
    /// their own names). Returns the files.
    pub fn apply_crds(&self, dir: &Path) -> Result<Vec<PathBuf>, E2eError> {
        let files = crate::chart::list_yaml_files(dir)?;
        for file in &files {
            run(
                self.kubectl()
                    .args([
                        "apply",
                        "--server-side",
                        "--field-manager=warmpath-e2e",
                        "-f",
                    ])
                    .arg(file),
                None,
            )?;
        }
        for file in &files {
            let text = std::fs::read_to_string(file).map_err(|e| E2eError::io(file, e))?;
            let crd: serde_yaml::Value = serde_yaml::from_str(&text)?;
            let name = crd["metadata"]["name"].as_str().unwrap_or_default();
            run(
                self.kubectl()
                    .args(["wait", "--for=condition=Established", "--timeout=30s"])
                    .arg(format!("crd/{name}")),
                None,
            )?;
        }
        Ok(files)
    }

    /// An admin client.
    pub async fn client(&self) -> Result<kube::Client, E2eError> {
        client_from_kubeconfig(&self.kubeconfig).await
    }

    /// A kubeconfig file (written under `dir`) for the same server that authenticates with a
    /// bearer token, such as a ServiceAccount's from the TokenRequest API.
    pub fn kubeconfig_for_token(
        &self,
        dir: &Path,
        name: &str,
        token: &str,
    ) -> Result<PathBuf, E2eError> {
        let text = std::fs::read_to_string(&self.kubeconfig)
            .map_err(|e| E2eError::io(&self.kubeconfig, e))?;
        let mut config: serde_yaml::Value = serde_yaml::from_str(&text)?;
        let users = serde_yaml::to_value(vec![serde_yaml::to_value(serde_json::json!({
            "name": "warmpath-e2e-admin",
            "user": { "token": token },
        }))?])?;
        config["users"] = users;
        let path = dir.join(format!("{name}.kubeconfig"));
        std::fs::write(&path, serde_yaml::to_string(&config)?)
            .map_err(|e| E2eError::io(&path, e))?;
        Ok(path)
    }
}

impl TestCluster {
    /// The API server's address (host and port of the kubeconfig's server URL).
    pub fn apiserver_addr(&self) -> Result<std::net::SocketAddr, E2eError> {
        let config = self.kubeconfig_yaml()?;
        let server = config["clusters"][0]["cluster"]["server"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let hostport = server
            .split("://")
            .nth(1)
            .unwrap_or(&server)
            .trim_end_matches('/');
        std::net::ToSocketAddrs::to_socket_addrs(hostport)
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| E2eError::Kubeconfig {
                path: self.kubeconfig.clone(),
                message: format!("server {server:?} is not host:port"),
            })
    }

    /// A kubeconfig file (written under `dir`) like the cluster's, whose server is `addr`
    /// instead (a proxy in front of the API server; its certificate names the IP, not a port).
    pub fn kubeconfig_via(
        &self,
        dir: &Path,
        name: &str,
        addr: std::net::SocketAddr,
    ) -> Result<PathBuf, E2eError> {
        let mut config = self.kubeconfig_yaml()?;
        config["clusters"][0]["cluster"]["server"] = format!("https://{addr}").into();
        let path = dir.join(format!("{name}.kubeconfig"));
        std::fs::write(&path, serde_yaml::to_string(&config)?)
            .map_err(|e| E2eError::io(&path, e))?;
        Ok(path)
    }

    fn kubeconfig_yaml(&self) -> Result<serde_yaml::Value, E2eError> {
        let text = std::fs::read_to_string(&self.kubeconfig)
            .map_err(|e| E2eError::io(&self.kubeconfig, e))?;
        Ok(serde_yaml::from_str(&text)?)
    }
}

/// A client from a kubeconfig file (its current context).
pub async fn client_from_kubeconfig(path: &Path) -> Result<kube::Client, E2eError> {
    let kubeconfig = Kubeconfig::read_from(path).map_err(|e| E2eError::Kubeconfig {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| E2eError::Kubeconfig {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    Ok(kube::Client::try_from(config)?)
}

/// Runs a command to completion, feeding it `stdin`; a non-zero exit is an error carrying its
/// standard error.
pub fn run(cmd: &mut Command, stdin: Option<&[u8]>) -> Result<Output, E2eError> {
    let name = describe(cmd);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    if stdin.is_some() {
        cmd.stdin(Stdio::piped());
    }
    let mut child = cmd.spawn().map_err(|source| E2eError::Spawn {
        command: name.clone(),
        source,
    })?;
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("stdin is piped");
        // A child that exits early closes the pipe; its exit status then tells what happened.
        let _ = pipe.write_all(input);
    }
    let out = child.wait_with_output().map_err(|source| E2eError::Spawn {
        command: name.clone(),
        source,
    })?;
    if !out.status.success() {
        return Err(E2eError::Command {
            command: name,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(out)
}

/// `program arg arg…`, for error messages.
pub fn describe(cmd: &Command) -> String {
    let program = Path::new(cmd.get_program())
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    std::iter::once(program)
        .chain(cmd.get_args().map(|a| a.to_string_lossy().into_owned()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The cache folder of the cluster binaries and state: `WARMPATH_E2E_CACHE`, else `e2e/.cache`.
pub(crate) fn cache_dir() -> PathBuf {
    std::env::var_os("WARMPATH_E2E_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("e2e/.cache"))
}

/// Builds kubectl and helm into `cache_dir`'s bin/ (a no-op when they are current), for a
/// cluster someone else started; the error is build.sh's stderr.
pub(crate) fn build_tools(cache_dir: &Path) -> Result<(), String> {
    let out = Command::new(repo_root().join("e2e/cluster/build.sh"))
        .arg("kubectl")
        .arg("helm")
        .env("WARMPATH_E2E_CACHE", cache_dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running build.sh: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(tail(&out.stderr))
    }
}

/// The last 30 lines of a command's output.
pub(crate) fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
