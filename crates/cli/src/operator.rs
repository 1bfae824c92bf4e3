//! `finale operator <name>`: run a bundled operator against any Kubernetes API (Finale's or a
//! real cluster's), found through a kubeconfig like kubectl finds it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use finale_operator::backoff::{Backoff, RateLimit, RateLimits};
use finale_operator::install::install_crd;
use finale_operator::leader::LeaseConfig;
use finale_operator::metrics::{self, Metrics};
use finale_operator::runtime::{self, Settings};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

#[derive(clap::Subcommand)]
pub enum Operator {
    /// Logical PostgreSQL databases (`databases.finale.dev`), dropped when their object is.
    Database(DatabaseArgs),
}

#[derive(clap::Args)]
pub struct CommonArgs {
    /// The kubeconfig to use. Default: $KUBECONFIG, then ~/.kube/config, then
    /// ./finale-data/kubeconfig (a local `finale server`), then the in-cluster account.
    #[arg(long, env = "KUBECONFIG", value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long)]
    context: Option<String>,
    /// Where to serve Prometheus metrics (`/metrics`) and `/healthz`.
    #[arg(long, env = "FINALE_METRICS_ADDR", default_value = "127.0.0.1:8080")]
    metrics_addr: SocketAddr,
    /// Elect a leader among replicas through a Lease, so that only one acts.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    leader_elect: bool,
    /// The namespace of the leader Lease.
    #[arg(long, default_value = "kube-system")]
    lease_namespace: String,
    /// How long a leader's Lease holds without renewal before another replica takes over.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    lease_duration: Duration,
    /// This replica's name in the Lease and in Events. Default: host name and a random suffix.
    #[arg(long)]
    identity: Option<String>,
    /// Reconciliations in flight at once.
    #[arg(long, default_value_t = 32)]
    concurrency: u16,
    /// The longest wait between retries of a failing object (full-jitter exponential backoff).
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    max_backoff: Duration,
    /// Do not install or update the operator's CustomResourceDefinition at start.
    #[arg(long)]
    skip_crd_install: bool,
}

#[derive(clap::Args)]
pub struct DatabaseArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// DDL statements per second allowed toward each PostgreSQL server.
    #[arg(long, default_value_t = 50)]
    ddl_rate: u32,
    /// DDL statements allowed in a burst above the rate.
    #[arg(long, default_value_t = 10)]
    ddl_burst: u32,
}

pub async fn run(operator: Operator) -> anyhow::Result<()> {
    // kube's rustls needs a process-wide provider when more than one is linked in.
    let _ = rustls::crypto::ring::default_provider().install_default();
    match operator {
        Operator::Database(args) => {
            let limit = RateLimit::new(args.ddl_rate, args.ddl_burst)
                .context("--ddl-rate and --ddl-burst must be at least 1")?;
            let common = args.common;
            let client = client(&common).await?;
            if !common.skip_crd_install {
                install_crd(
                    client.clone(),
                    &finale_operator_database::custom_resource_definition(),
                    "finale-database-operator",
                )
                .await?;
            }
            let metrics = Arc::new(Metrics::new());
            let shutdown = shutdown_on_signals()?;
            let bound =
                metrics::serve(common.metrics_addr, Arc::clone(&metrics), shutdown.clone()).await?;
            tracing::info!(metrics = %format!("http://{bound}/metrics"), "database operator starting");
            let settings = settings(&common, "database");
            runtime::run(
                client,
                finale_operator_database::DatabaseReconciler,
                settings,
                metrics,
                Arc::new(RateLimits::new(limit)),
                shutdown,
            )
            .await
        }
    }
}

fn settings(common: &CommonArgs, name: &str) -> Settings {
    let identity = common
        .identity
        .clone()
        .unwrap_or_else(LeaseConfig::default_identity);
    let mut settings = Settings::new(identity.clone());
    settings.concurrency = common.concurrency;
    settings.backoff = Backoff {
        cap: common.max_backoff,
        ..Backoff::default()
    };
    if common.leader_elect {
        let mut lease = LeaseConfig::new(
            common.lease_namespace.clone(),
            format!("finale-{name}-operator"),
            identity,
        );
        lease.lease_duration = common.lease_duration;
        lease.renew_deadline = common.lease_duration.mul_f64(2.0 / 3.0);
        lease.retry_period = common.lease_duration / 7;
        settings.leader_election = Some(lease);
    }
    settings
}

async fn client(common: &CommonArgs) -> anyhow::Result<Client> {
    let options = KubeConfigOptions {
        context: common.context.clone(),
        ..KubeConfigOptions::default()
    };
    let explicit = common.kubeconfig.clone().or_else(|| {
        let home = std::env::var_os("HOME").map(PathBuf::from)?;
        let local = PathBuf::from("finale-data/kubeconfig");
        (!home.join(".kube/config").exists() && local.exists()).then_some(local)
    });
    let config = match explicit {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(&path)
                .with_context(|| format!("cannot read the kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .with_context(|| format!("the kubeconfig {} is not usable", path.display()))?
        }
        None => Config::infer().await.context(
            "no Kubernetes API found: pass --kubeconfig (a local `finale server` writes finale-data/kubeconfig)",
        )?,
    };
    Client::try_from(config).context("cannot build a Kubernetes client")
}

/// A token cancelled on the first SIGTERM or SIGINT: operators then finish the reconciliations
/// in flight, give up their Lease and exit.
fn shutdown_on_signals() -> anyhow::Result<CancellationToken> {
    let token = CancellationToken::new();
    let mut terminate = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
    let trigger = token.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = terminate.recv() => tracing::info!("SIGTERM received; finishing in-flight work"),
            _ = interrupt.recv() => tracing::info!("SIGINT received; finishing in-flight work"),
        }
        trigger.cancel();
    });
    Ok(token)
}
