//! `warmpath-extproc-gateway`: an ext_proc gateway in front of an Envoy-protocol endpoint
//! picker (llm-d's EPP), for the benchmark. See the library's docs for the protocol.

#![forbid(unsafe_code)]

use anyhow::Context as _;
use clap::Parser;
use std::sync::Arc;
use warmpath_extproc_gateway::{serve, Gateway, Mode};

/// Command-line flags.
#[derive(Debug, Parser)]
#[command(
    version,
    about = "An ext_proc gateway in front of an endpoint picker, for benchmarks"
)]
struct Args {
    /// Address to serve clients on.
    #[arg(long, default_value = "127.0.0.1:8090")]
    listen: String,
    /// The picker's ext_proc gRPC address (host:port).
    #[arg(
        long,
        conflicts_with = "fixed_endpoint",
        required_unless_present = "fixed_endpoint"
    )]
    epp: Option<String>,
    /// Skip the picker: forward every request to this host:port (measures the gateway's own
    /// overhead).
    #[arg(long)]
    fixed_endpoint: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let mode = match (args.epp, args.fixed_endpoint) {
        (Some(epp), None) => Mode::Picker(epp),
        (None, Some(endpoint)) => Mode::Fixed(endpoint),
        _ => anyhow::bail!("give exactly one of --epp and --fixed-endpoint"),
    };
    let gateway = Arc::new(Gateway::new(mode.clone()).context("building the gateway")?);
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    tracing::info!(listen = %args.listen, ?mode, "gateway serving");
    tokio::select! {
        result = serve(listener, gateway) => result.context("accepting connections")?,
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupted"),
    }
    Ok(())
}
