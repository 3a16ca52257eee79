//! The workspace's own binaries (router, controller, simulator) for tests that run them as
//! processes: built on first use with the same cargo and profile as the tests, and a guard that
//! kills a started process when the test ends, however it ends.

use crate::cluster::repo_root;
use crate::error::E2eError;
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::Mutex;

static BUILT: Mutex<Option<HashMap<String, PathBuf>>> = Mutex::new(None);

/// Path of the debug build of the workspace binary `name` (its package has the same name),
/// building it first when this test process has not already done so.
///
/// `cargo test --workspace` has built them already, so this is a quick check there; running
/// one test file alone (`cargo test -p warmpath-e2e --test X`) builds the workspace's tests
/// once.
pub fn workspace_bin(name: &str) -> Result<PathBuf, E2eError> {
    build(name, false)
}

/// The binaries a release ships in its images, built together by [`workspace_bin_release`]
/// (one build: building them one package at a time would unify features three ways and
/// compile the shared dependencies three times).
pub const SERVING_BINARIES: [&str; 3] = ["warmpath-router", "warmpath-controller", "warmpath-sim"];

/// [`workspace_bin`] built with `--release`: what the node cluster's images and the benchmarks
/// run. One of [`SERVING_BINARIES`] builds all three.
pub fn workspace_bin_release(name: &str) -> Result<PathBuf, E2eError> {
    build(name, true)
}

fn build(name: &str, release: bool) -> Result<PathBuf, E2eError> {
    let profile = if release { "release" } else { "debug" };
    let key = format!("{profile}/{name}");
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    let built = built.get_or_insert_with(HashMap::new);
    if let Some(path) = built.get(&key) {
        return Ok(path.clone());
    }
    let root = repo_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root);
    // `cargo test` gives its test processes CARGO_MANIFEST_DIR, CARGO_PKG_* and the like. ring's
    // build script declares `rerun-if-env-changed` on those, so a nested cargo that inherits
    // them finds ring dirty and rebuilds it and everything above it (3.5 minutes of a release
    // build here, then again in the next `cargo test`). It gets the environment a shell has.
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        if key.starts_with("CARGO_PKG_")
            || matches!(
                key,
                "CARGO_MANIFEST_DIR"
                    | "CARGO_MANIFEST_PATH"
                    | "CARGO_CRATE_NAME"
                    | "CARGO_BIN_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
                    | "CARGO_TARGET_TMPDIR"
                    | "CARGO_RUSTC_CURRENT_DIR"
            )
        {
            cmd.env_remove(key);
        }
    }
    if release && SERVING_BINARIES.contains(&name) {
        cmd.args(["build", "--quiet", "--release", "--bins"]);
        for b in SERVING_BINARIES {
            cmd.args(["-p", b]);
        }
    } else if release {
        cmd.args(["build", "--quiet", "--release", "-p", name, "--bin", name]);
    } else {
        // Exactly what `cargo test --workspace` builds (same packages, so the same feature
        // unification): after `make test` has built it this is a quick no-op, where building
        // one package alone would unify features differently and recompile half the tree.
        cmd.args(["test", "--quiet", "--workspace", "--no-run"]);
    }
    crate::cluster::run(&mut cmd, None)?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let path = target.join(profile).join(name);
    if !path.is_file() {
        return Err(E2eError::io(
            &path,
            std::io::Error::new(std::io::ErrorKind::NotFound, "built binary not found"),
        ));
    }
    built.insert(key, path.clone());
    Ok(path)
}

/// A child process that is killed (SIGKILL) and reaped when dropped.
#[derive(Debug)]
pub struct KillOnDrop(pub Child);

impl KillOnDrop {
    pub fn spawn(cmd: &mut Command) -> Result<KillOnDrop, E2eError> {
        cmd.spawn()
            .map(KillOnDrop)
            .map_err(|source| E2eError::Spawn {
                command: crate::cluster::describe(cmd),
                source,
            })
    }

    pub fn id(&self) -> u32 {
        self.0.id()
    }

    /// Send SIGTERM (a graceful stop) and wait for the process to exit.
    pub fn terminate(&mut self) -> std::io::Result<std::process::ExitStatus> {
        Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status()?;
        self.0.wait()
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The command that runs warmpath-controller `bin` against the cluster of `kubeconfig`,
/// watching only `ns` and leading (or standing by) through a Lease in `ns` under `identity`,
/// with short lease timings (3 s lease, 2 s renew deadline, 1 s retry) so handovers are quick.
pub fn controller_command(
    bin: &std::path::Path,
    kubeconfig: &std::path::Path,
    ns: &str,
    identity: &str,
) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env("KUBECONFIG", kubeconfig)
        .env("WARMPATH_WATCH_NAMESPACES", ns)
        .env("WARMPATH_SECRET_NAMESPACES", ns)
        .env("WARMPATH_LEASE_NAME", "warmpath-controller")
        .env("WARMPATH_LEASE_NAMESPACE", ns)
        .env("WARMPATH_LEASE_DURATION_SECONDS", "3")
        .env("WARMPATH_LEASE_RENEW_DEADLINE_SECONDS", "2")
        .env("WARMPATH_LEASE_RETRY_PERIOD_SECONDS", "1")
        .env("WARMPATH_ADMIN_LISTEN", "127.0.0.1:0")
        .env("POD_NAME", identity)
        .env("WARMPATH_REPLICA_NETWORKS", crate::LOOPBACK_NETWORKS)
        .env("WARMPATH_MAX_TENANT_PRIORITY", "1000")
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::null());
    cmd
}
