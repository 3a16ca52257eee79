//! Reloading the configuration file on change, without a restart and without dropping requests.
//!
//! The file is polled (portable, no inotify dependency, and a 1 s delay is fine for a config):
//! when its bytes change it is parsed and validated; a good file is applied (the table swap is
//! atomic; in-flight requests keep the table they started with), a bad one is logged with its
//! line and field, counted, and the running configuration stays.

use crate::config::Config;
use crate::metrics::{Metrics, ResultLabels};
use crate::state::publish::{Update, Updates};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Poll `path` every `interval` and send each good new version to the publisher. `bound` is
/// what the router took at start and keeps until a restart (its listeners, TLS, auth).
pub async fn watch(
    path: PathBuf,
    interval: Duration,
    bound: crate::config::StartOnly,
    updates: Updates,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut last = std::fs::read(&path).ok();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shutdown.changed() => return,
        }
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) => {
                // An editor replacing the file can leave a short gap; try again next round.
                tracing::debug!(path = %path.display(), error = %e, "config not readable");
                continue;
            }
        };
        if last.as_deref() == Some(bytes.as_slice()) {
            continue;
        }
        last = Some(bytes.clone());
        let parsed = std::str::from_utf8(&bytes)
            .map_err(|e| crate::errors::ConfigError {
                file: String::new(),
                line: None,
                field: String::new(),
                message: format!("not UTF-8: {e}"),
            })
            .and_then(Config::parse);
        match parsed {
            Ok(config) => {
                let changed = bound.changed(&config.start_only());
                if !changed.is_empty() {
                    tracing::warn!(
                        settings = changed.join(", "),
                        "these settings are read at start: their changes take effect on restart; other changes applied"
                    );
                }
                if updates.send(Update::File(Box::new(config))).is_err() {
                    return;
                }
                metrics
                    .config
                    .reloads
                    .get_or_create(&ResultLabels { result: "ok" })
                    .inc();
                tracing::info!(path = %path.display(), "configuration reloaded");
            }
            Err(mut e) => {
                e.file = path.display().to_string();
                metrics
                    .config
                    .reloads
                    .get_or_create(&ResultLabels { result: "error" })
                    .inc();
                tracing::error!("configuration not reloaded, keeping the running one: {e}");
            }
        }
    }
}
