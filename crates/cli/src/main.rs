//! The `finale` binary: thin subcommands over the Finale crates.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::{Parser, Subcommand};
use finale_apiserver::server::{self, ServerConfig};
use tokio::signal::unix::{SignalKind, signal};
use tracing_subscriber::EnvFilter;

/// Finale: a Kubernetes-compatible control plane built for guaranteed teardown.
#[derive(Parser)]
#[command(name = "finale", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the control plane: a Kubernetes API server on embedded storage.
    Server(ServerArgs),
}

#[derive(clap::Args)]
struct ServerArgs {
    /// Where the store, certificates and the admin kubeconfig live.
    #[arg(long, env = "FINALE_DATA_DIR", default_value = "./finale-data")]
    data_dir: PathBuf,
    /// Address to serve HTTPS on. Port 0 picks a free port (printed at start).
    #[arg(long, env = "FINALE_LISTEN", default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Extra host names or IPs for the serving certificate (repeatable).
    #[arg(long = "tls-san", value_name = "NAME")]
    tls_sans: Vec<String>,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    match cli.command {
        Command::Server(args) => runtime.block_on(run_server(args)),
    }
}

async fn run_server(args: ServerArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut config = ServerConfig::new(&args.data_dir, args.listen);
    config.extra_sans = args.tls_sans;
    let running = server::start(config).await?;
    let kubeconfig =
        std::fs::canonicalize(&running.kubeconfig).unwrap_or_else(|_| running.kubeconfig.clone());
    println!(
        "finale is serving on https://{} (ready in {} ms)",
        running.local_addr,
        started.elapsed().as_millis()
    );
    println!("export KUBECONFIG={}", kubeconfig.display());

    let mut terminate = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
    tokio::select! {
        _ = terminate.recv() => tracing::info!("SIGTERM received; shutting down"),
        _ = interrupt.recv() => tracing::info!("SIGINT received; shutting down"),
    }
    running.shutdown().await;
    tracing::info!("stopped cleanly");
    Ok(())
}
