//! `warmpath-controller`: reads its settings from its command line, each flag falling back to
//! an environment variable (see the Helm chart's controller Deployment; `--help` lists them),
//! connects with the in-cluster configuration or `KUBECONFIG`, and runs
//! until SIGTERM (releasing its Lease) or until it loses leadership (exit code 1, so that it
//! restarts as a standby).
#![forbid(unsafe_code)]

use anyhow::Context as _;
use warmpath_controller::{run, Config};

fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "warmpath-controller".into());
    format!("{host}-{}", std::process::id())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let matches = warmpath_controller::config::cli().get_matches();
    let config = Config::from_matches(&matches, default_identity)?;
    let client = kube::Client::try_default()
        .await
        .context("connecting to Kubernetes (in-cluster configuration or KUBECONFIG)")?;
    if let Err(e) = run::run(config, client, run::shutdown_signal()).await {
        // Leadership lost (or a controller stopped): leave now. Returning would drop the
        // runtime, which waits for any blocking task still running; a standby may take the
        // lease the moment it expires, and this process must not still be acting then.
        tracing::error!("{e}");
        std::process::exit(1);
    }
    Ok(())
}
