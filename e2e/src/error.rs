//! The error type of the test helpers.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum E2eError {
    /// The cluster binaries cannot be built here (no Go toolchain or no module proxy): the
    /// only condition under which tests skip instead of failing.
    #[error("the test cluster's binaries cannot be built: {0}")]
    Unavailable(String),
    #[error("e2e/cluster/up.sh failed ({status}): {stderr}")]
    ClusterStart { status: String, stderr: String },
    #[error("running {command}: {source}")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{command} failed ({status}): {stderr}")]
    Command {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("reading kubeconfig {path}: {message}")]
    Kubeconfig { path: PathBuf, message: String },
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("I/O on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("YAML: {0}")]
    Yaml(#[from] serde_yaml::Error),
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
}

impl E2eError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        E2eError::Io {
            path: path.into(),
            source,
        }
    }
}
