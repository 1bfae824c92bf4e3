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
    /// Tenants (`tenants.finale.dev`): namespaces, and a database in each, that go with them.
    Tenant(TenantArgs),
    /// Every bundled operator in one process.
    All(DatabaseArgs),
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
    #[command(flatten)]
    ddl: DdlArgs,
}

#[derive(clap::Args, Clone, Copy)]
pub struct DdlArgs {
    /// DDL statements per second allowed toward each PostgreSQL server.
    #[arg(long, default_value_t = 50)]
    ddl_rate: u32,
    /// DDL statements allowed in a burst above the rate.
    #[arg(long, default_value_t = 10)]
    ddl_burst: u32,
    /// How long connecting to PostgreSQL (TCP, TLS and authentication) may take.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pg_connect_timeout: Duration,
    /// PostgreSQL's `statement_timeout` for the operator's sessions. Each call is also bounded
    /// on the client side, at this plus 5 s, for networks that stop answering.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pg_statement_timeout: Duration,
    /// PostgreSQL's `lock_timeout` for the operator's sessions: how long DDL waits for a lock
    /// another session holds.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pg_lock_timeout: Duration,
}

impl Default for DdlArgs {
    fn default() -> Self {
        let timeouts = finale_operator_database::Timeouts::default();
        DdlArgs {
            ddl_rate: 50,
            ddl_burst: 10,
            pg_connect_timeout: timeouts.connect,
            pg_statement_timeout: timeouts.statement,
            pg_lock_timeout: timeouts.lock,
        }
    }
}

impl DdlArgs {
    /// The PostgreSQL bounds; zero is refused, since PostgreSQL reads a zero timeout as none.
    fn timeouts(&self) -> anyhow::Result<finale_operator_database::Timeouts> {
        for (flag, value) in [
            ("--pg-connect-timeout", self.pg_connect_timeout),
            ("--pg-statement-timeout", self.pg_statement_timeout),
            ("--pg-lock-timeout", self.pg_lock_timeout),
        ] {
            if value.as_millis() == 0 {
                anyhow::bail!("{flag} must be at least 1ms (PostgreSQL reads 0 as no timeout)");
            }
        }
        Ok(finale_operator_database::Timeouts {
            connect: self.pg_connect_timeout,
            statement: self.pg_statement_timeout,
            lock: self.pg_lock_timeout,
        })
    }
}

#[derive(clap::Args)]
pub struct TenantArgs {
    #[command(flatten)]
    common: CommonArgs,
}

/// The operators bundled in the binary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bundled {
    Database,
    Tenant,
}

pub async fn run(operator: Operator) -> anyhow::Result<()> {
    // kube's rustls needs a process-wide provider when more than one is linked in.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (which, common, ddl) = match operator {
        Operator::Database(args) => (vec![Bundled::Database], args.common, args.ddl),
        Operator::Tenant(args) => (vec![Bundled::Tenant], args.common, DdlArgs::default()),
        Operator::All(args) => (
            vec![Bundled::Database, Bundled::Tenant],
            args.common,
            args.ddl,
        ),
    };
    let client = client(&common).await?;
    let shutdown = shutdown_on_signals()?;
    run_operators(client, &which, &common, ddl, shutdown).await
}

/// Runs `which` operators against `client` until `shutdown`: their CRDs installed first, one
/// metrics endpoint for all, each with its own leader Lease.
async fn run_operators(
    client: Client,
    which: &[Bundled],
    common: &CommonArgs,
    ddl: DdlArgs,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let limit = RateLimit::new(ddl.ddl_rate, ddl.ddl_burst)
        .context("--ddl-rate and --ddl-burst must be at least 1")?;
    let pg_timeouts = ddl.timeouts()?;
    if !common.skip_crd_install {
        // The tenant operator creates Databases, so their CRD goes in with it too.
        install_crd(
            client.clone(),
            &finale_operator_database::custom_resource_definition(),
            "finale-operators",
        )
        .await?;
        if which.contains(&Bundled::Tenant) {
            install_crd(
                client.clone(),
                &finale_operator_tenant::custom_resource_definition(),
                "finale-operators",
            )
            .await?;
        }
    }
    let metrics = Arc::new(Metrics::new());
    let bound = metrics::serve(common.metrics_addr, Arc::clone(&metrics), shutdown.clone()).await?;
    tracing::info!(metrics = %format!("http://{bound}/metrics"), operators = ?which, "operators starting");
    let rate_limits = Arc::new(RateLimits::new(limit));
    let mut running = tokio::task::JoinSet::new();
    let shared = Shared {
        client,
        metrics,
        rate_limits,
        shutdown: shutdown.clone(),
    };
    for operator in which {
        match operator {
            Bundled::Database => shared.spawn(
                &mut running,
                finale_operator_database::DatabaseReconciler::new(pg_timeouts),
                settings(common, "database"),
            ),
            Bundled::Tenant => shared.spawn(
                &mut running,
                finale_operator_tenant::TenantReconciler,
                settings(common, "tenant"),
            ),
        }
    }
    let mut outcome = Ok(());
    while let Some(finished) = running.join_next().await {
        let result = finished
            .map_err(|e| anyhow::anyhow!("an operator task failed: {e}"))
            .and_then(|r| r);
        if let Err(error) = result {
            // One operator failing (say, no permission on its Lease) stops them all: a half-
            // running set would look healthy while teardown silently stalls.
            shutdown.cancel();
            if outcome.is_ok() {
                outcome = Err(error);
            }
        }
    }
    outcome
}

/// What every operator of one process shares.
struct Shared {
    client: Client,
    metrics: Arc<Metrics>,
    rate_limits: Arc<RateLimits>,
    shutdown: CancellationToken,
}

impl Shared {
    fn spawn<R>(
        &self,
        running: &mut tokio::task::JoinSet<anyhow::Result<()>>,
        reconciler: R,
        settings: Settings,
    ) where
        R: runtime::Reconciler,
        <R::Resource as kube::Resource>::Scope: finale_operator::finalizers::ScopedApi,
    {
        running.spawn(runtime::run(
            self.client.clone(),
            reconciler,
            settings,
            Arc::clone(&self.metrics),
            Arc::clone(&self.rate_limits),
            self.shutdown.clone(),
        ));
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

/// The bundled operators running inside `finale server --with-operators`.
pub struct InProcess {
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl InProcess {
    /// Starts every bundled operator against the server's own HTTPS endpoint, as an external
    /// operator would talk to it: the same code path, only in the same process.
    pub async fn start(
        kubeconfig: &std::path::Path,
        metrics_addr: SocketAddr,
    ) -> anyhow::Result<InProcess> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let common = CommonArgs {
            kubeconfig: Some(kubeconfig.to_path_buf()),
            context: None,
            metrics_addr,
            leader_elect: true,
            lease_namespace: "kube-system".into(),
            lease_duration: Duration::from_secs(15),
            identity: None,
            concurrency: 32,
            max_backoff: Duration::from_secs(60),
            skip_crd_install: false,
        };
        let client = client(&common).await?;
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let task = tokio::spawn(async move {
            run_operators(
                client,
                &[Bundled::Database, Bundled::Tenant],
                &common,
                DdlArgs::default(),
                stop,
            )
            .await
        });
        Ok(InProcess { shutdown, task })
    }

    /// Finishes in-flight reconciliations and releases the Leases.
    pub async fn stop(self) {
        self.shutdown.cancel();
        match self.task.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(error = format!("{error:#}"), "the operators failed"),
            Err(error) => tracing::warn!(%error, "the operators' task failed"),
        }
    }
}
