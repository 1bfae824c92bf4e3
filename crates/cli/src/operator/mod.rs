//! `finale operator <name>`: run a bundled operator against any Kubernetes API (Finale's or a
//! real cluster's), found through a kubeconfig like kubectl finds it
//! ([`finale_operator::client`]), and the same operators inside `finale server
//! --with-operators` ([`InProcess`]), each as its own ServiceAccount ([`identities`]).

mod identities;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use finale_operator::backoff::{Backoff, RateLimit, RateLimits};
use finale_operator::client::{Clients, Environment, load_config};
use finale_operator::install::install_crd;
use finale_operator::leader::{LeaseConfig, RELEASE_TIMEOUT};
use finale_operator::metrics::{self, Metrics};
use finale_operator::rbac::{self, Permissions};
use finale_operator::runtime::{self, Settings};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

#[derive(clap::Subcommand)]
pub enum Operator {
    /// Logical PostgreSQL databases (`databases.finale.dev`), dropped when their object is.
    Database(DatabaseArgs),
    /// Tenants (`tenants.finale.dev`): namespaces, and a database in each, that go with them.
    Tenant(TenantArgs),
    /// External-resource GC (`cloudclusters.cloud.finale.dev`): a cluster's cloud resources
    /// (load balancers, target groups, security groups, ENIs, Elastic IPs) go with its object.
    CloudGc(CloudGcArgs),
    /// Every bundled operator in one process.
    All(AllArgs),
}

#[derive(clap::Args)]
pub struct CommonArgs {
    /// The kubeconfig to use. Default, as kubectl: $KUBECONFIG (a `:`-separated list,
    /// merged), else ~/.kube/config, else the in-cluster service account.
    #[arg(long, value_name = "PATH")]
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
    /// On SIGTERM/SIGINT, how long reconciliations in flight may take to finish before they are
    /// cancelled (the Lease is then released, within 2 s more).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    graceful_shutdown_timeout: Duration,
    /// Print the ServiceAccount, ClusterRole, Role and bindings the operator needs (least
    /// privilege) as YAML for `kubectl apply -f -`, and exit.
    #[arg(long)]
    print_rbac: bool,
    /// The namespace of the ServiceAccount that --print-rbac prints.
    #[arg(long, default_value = "finale-system")]
    service_account_namespace: String,
}

#[derive(clap::Args)]
pub struct DatabaseArgs {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    ddl: DdlArgs,
}

#[derive(clap::Args)]
pub struct CloudGcArgs {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    gc: GcArgs,
}

#[derive(clap::Args)]
pub struct AllArgs {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    ddl: DdlArgs,
    #[command(flatten)]
    gc: GcArgs,
}

#[derive(clap::Args, Clone)]
pub struct GcArgs {
    /// Collect the cloud resources of CloudClusters that carry no
    /// `cloud.finale.dev/external-resource-gc` annotation. `false` marks such clusters opted out
    /// (the annotation set to "false"), so turning it on later changes no existing cluster;
    /// `finale gc enable` does.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    external_resource_gc: bool,
    /// How owned resources are found: `tagging` (the Resource Groups Tagging API, plus
    /// Describe calls for what it misses) or `describe` (Describe calls only, for accounts that
    /// cannot reach the tagging API).
    #[arg(long, default_value = "tagging")]
    discovery: finale_operator_cloud_gc::engine::Discovery,
    /// Cloud API calls per second allowed toward each account.
    #[arg(long, default_value_t = 20)]
    cloud_api_rate: u32,
    /// Cloud API calls allowed in a burst above the rate.
    #[arg(long, default_value_t = 40)]
    cloud_api_burst: u32,
    /// Cloud deletes in flight at once per cluster.
    #[arg(long, default_value_t = 8)]
    gc_concurrency: u16,
    /// How often a live CloudCluster's owned resources are discovered into
    /// `status.inventory` (what deleting it would remove; `finale plan` shows it).
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    inventory_interval: Duration,
}

impl Default for GcArgs {
    fn default() -> Self {
        GcArgs {
            external_resource_gc: true,
            discovery: finale_operator_cloud_gc::engine::Discovery::Tagging,
            cloud_api_rate: 20,
            cloud_api_burst: 40,
            gc_concurrency: 8,
            inventory_interval: Duration::from_secs(600),
        }
    }
}

impl GcArgs {
    fn settings(&self) -> anyhow::Result<finale_operator_cloud_gc::GcSettings> {
        Ok(finale_operator_cloud_gc::GcSettings {
            enabled: self.external_resource_gc,
            discovery: self.discovery,
            concurrency: usize::from(self.gc_concurrency.max(1)),
            account_rate: RateLimit::new(self.cloud_api_rate, self.cloud_api_burst)
                .context("--cloud-api-rate and --cloud-api-burst must be at least 1")?,
            inventory_interval: self.inventory_interval.max(Duration::from_secs(1)),
            ..finale_operator_cloud_gc::GcSettings::default()
        })
    }
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
    CloudGc,
}

impl Bundled {
    pub const ALL: [Bundled; 3] = [Bundled::Database, Bundled::Tenant, Bundled::CloudGc];

    /// The short name: in its Lease, its ServiceAccount and its metrics' labels.
    fn name(self) -> &'static str {
        self.permissions().name
    }

    /// Its least privilege.
    fn permissions(self) -> Permissions {
        match self {
            Bundled::Database => finale_operator_database::permissions(),
            Bundled::Tenant => finale_operator_tenant::permissions(),
            Bundled::CloudGc => finale_operator_cloud_gc::permissions(),
        }
    }

    /// The CRDs it installs at start: its own, and those of the kinds it creates.
    fn crds(self) -> Vec<CustomResourceDefinition> {
        match self {
            Bundled::Database => vec![finale_operator_database::custom_resource_definition()],
            // The tenant operator creates Databases and CloudClusters.
            Bundled::Tenant => vec![
                finale_operator_tenant::custom_resource_definition(),
                finale_operator_database::custom_resource_definition(),
                finale_operator_cloud_gc::custom_resource_definition(),
            ],
            Bundled::CloudGc => vec![finale_operator_cloud_gc::custom_resource_definition()],
        }
    }
}

/// Prints the RBAC objects `which` need as one YAML stream: one ServiceAccount
/// (`finale-<name>-operator`, or `finale-operators` for several) bound to each one's
/// ClusterRole and Lease Role.
fn print_rbac(which: &[Bundled], common: &CommonArgs) -> anyhow::Result<()> {
    let service_account = match which {
        [one] => rbac::object_name(one.name()),
        _ => "finale-operators".to_string(),
    };
    let placement = rbac::Placement {
        namespace: common.service_account_namespace.clone(),
        lease_namespace: common.lease_namespace.clone(),
    };
    let permissions: Vec<Permissions> = which.iter().map(|b| b.permissions()).collect();
    let mut out = String::new();
    for object in rbac::manifests(&service_account, &permissions, &placement)? {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&object).context("encode YAML")?);
    }
    print!("{out}");
    Ok(())
}

pub async fn run(operator: Operator) -> anyhow::Result<()> {
    // kube's rustls needs a process-wide provider when more than one is linked in.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (which, common, ddl, gc) = match operator {
        Operator::Database(args) => (
            vec![Bundled::Database],
            args.common,
            args.ddl,
            GcArgs::default(),
        ),
        Operator::Tenant(args) => (
            vec![Bundled::Tenant],
            args.common,
            DdlArgs::default(),
            GcArgs::default(),
        ),
        Operator::CloudGc(args) => (
            vec![Bundled::CloudGc],
            args.common,
            DdlArgs::default(),
            args.gc,
        ),
        Operator::All(args) => (
            vec![Bundled::Database, Bundled::Tenant, Bundled::CloudGc],
            args.common,
            args.ddl,
            args.gc,
        ),
    };
    if common.print_rbac {
        return print_rbac(&which, &common);
    }
    let clients = clients(&common).await?;
    let metrics_listener = bind_metrics(common.metrics_addr, "--metrics-addr").await?;
    let shutdown = shutdown_on_signals()?;
    // Run outside a cluster, one kubeconfig serves every operator of the process.
    let operators = which.iter().map(|&b| (b, clients.clone())).collect();
    run_operators(operators, &common, ddl, &gc, metrics_listener, shutdown).await
}

/// Binds the metrics address now, so that a taken port fails the start with a message that
/// names the flag to change.
pub async fn bind_metrics(addr: SocketAddr, flag: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr).await.with_context(|| {
        format!(
            "cannot listen for the operators' metrics on {addr}; choose another address with {flag} (port 0 picks a free one)"
        )
    })
}

/// Runs `operators`, each with its own clients (its identity), until `shutdown`: their CRDs
/// installed first, one metrics endpoint for all (on `metrics_listener`), each with its own
/// leader Lease.
async fn run_operators(
    operators: Vec<(Bundled, Clients)>,
    common: &CommonArgs,
    ddl: DdlArgs,
    gc: &GcArgs,
    metrics_listener: TcpListener,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let limit = RateLimit::new(ddl.ddl_rate, ddl.ddl_burst)
        .context("--ddl-rate and --ddl-burst must be at least 1")?;
    let pg_timeouts = ddl.timeouts()?;
    let gc_settings = gc.settings()?;
    if !common.skip_crd_install {
        // Each with the operator's own identity, which may install only its CRDs.
        for (operator, clients) in &operators {
            for crd in operator.crds() {
                install_crd(clients.requests.clone(), &crd, "finale-operators").await?;
            }
        }
    }
    let metrics = Arc::new(Metrics::new());
    let bound = metrics::serve(metrics_listener, Arc::clone(&metrics), shutdown.clone())?;
    let names: Vec<&str> = operators.iter().map(|(b, _)| b.name()).collect();
    tracing::info!(metrics = %format!("http://{bound}/metrics"), operators = ?names, "operators starting");
    let rate_limits = Arc::new(RateLimits::new(limit));
    let mut running = tokio::task::JoinSet::new();
    let shared = Shared {
        metrics,
        rate_limits,
        shutdown: shutdown.clone(),
    };
    for (operator, clients) in operators {
        match operator {
            Bundled::Database => shared.spawn(
                &mut running,
                clients,
                finale_operator_database::DatabaseReconciler::new(pg_timeouts),
                settings(common, operator.name()),
            ),
            Bundled::Tenant => shared.spawn(
                &mut running,
                clients,
                finale_operator_tenant::TenantReconciler,
                settings(common, operator.name()),
            ),
            Bundled::CloudGc => shared.spawn(
                &mut running,
                clients,
                finale_operator_cloud_gc::CloudGcReconciler::new(
                    Arc::new(finale_cloud_aws::AwsConnector),
                    gc_settings.clone(),
                ),
                settings(common, operator.name()),
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
    metrics: Arc<Metrics>,
    rate_limits: Arc<RateLimits>,
    shutdown: CancellationToken,
}

impl Shared {
    fn spawn<R>(
        &self,
        running: &mut tokio::task::JoinSet<anyhow::Result<()>>,
        clients: Clients,
        reconciler: R,
        settings: Settings,
    ) where
        R: runtime::Reconciler,
        <R::Resource as kube::Resource>::Scope: finale_operator::finalizers::ScopedApi,
    {
        running.spawn(runtime::run(
            clients,
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
    settings.graceful_shutdown_timeout = common.graceful_shutdown_timeout;
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

/// The operators' clients, from the configuration kubectl would use.
async fn clients(common: &CommonArgs) -> anyhow::Result<Clients> {
    let (config, source) = load_config(
        common.kubeconfig.as_deref(),
        common.context.as_deref(),
        &Environment::of_process(),
    )
    .await?;
    tracing::info!(kubeconfig = %source, server = %config.cluster_url, "Kubernetes API");
    Ok(Clients::new(config)?)
}

/// A token cancelled on the first SIGTERM or SIGINT: operators then finish the reconciliations
/// in flight (within `--graceful-shutdown-timeout`), give up their Lease and exit.
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

/// How long the in-process operators' reconciliations may run on after the server is asked to
/// stop, before they are cancelled.
pub const IN_PROCESS_GRACE: Duration = Duration::from_secs(5);

/// The bound on [`InProcess::stop`]: the grace period, a second to confirm cancellations, the
/// Lease release, and a second of slack. Past it the operators' task is aborted.
pub const IN_PROCESS_STOP_LIMIT: Duration =
    Duration::from_secs(IN_PROCESS_GRACE.as_secs() + 1 + RELEASE_TIMEOUT.as_secs() + 1);

/// The bundled operators running inside `finale server --with-operators`.
pub struct InProcess {
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    /// Where they serve their metrics.
    pub metrics_addr: SocketAddr,
}

impl InProcess {
    /// Starts every bundled operator against the server's own HTTPS endpoint, as an external
    /// operator would talk to it: the same code path, only in the same process. Each runs as
    /// its own ServiceAccount with the least privilege `--print-rbac` prints: the server's
    /// admin (from `kubeconfig`) applies those objects and issues the tokens
    /// ([`identities`]). The metrics listener is bound by the caller, before the server
    /// starts, so a taken port fails fast.
    pub async fn start(
        kubeconfig: &std::path::Path,
        metrics_listener: TcpListener,
    ) -> anyhow::Result<InProcess> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let metrics_addr = metrics_listener
            .local_addr()
            .context("the operators' metrics address")?;
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
            graceful_shutdown_timeout: IN_PROCESS_GRACE,
            print_rbac: false,
            service_account_namespace: "finale-system".into(),
        };
        let (admin, _) = load_config(Some(kubeconfig), None, &Environment::of_process()).await?;
        let token_dir = kubeconfig
            .parent()
            .unwrap_or(std::path::Path::new("."))
            .join("operators");
        let shutdown = CancellationToken::new();
        let placement = rbac::Placement {
            namespace: common.service_account_namespace.clone(),
            lease_namespace: common.lease_namespace.clone(),
        };
        let operators = identities::provision(
            admin,
            &Bundled::ALL,
            &placement,
            &token_dir,
            shutdown.clone(),
        )
        .await
        .context("cannot give the bundled operators their identities")?;
        let stop = shutdown.clone();
        let task = tokio::spawn(async move {
            run_operators(
                operators,
                &common,
                DdlArgs::default(),
                &GcArgs::default(),
                metrics_listener,
                stop,
            )
            .await
        });
        Ok(InProcess {
            shutdown,
            task,
            metrics_addr,
        })
    }

    /// Lets in-flight reconciliations finish (for up to [`IN_PROCESS_GRACE`]), cancels the
    /// rest and releases the Leases; never takes longer than [`IN_PROCESS_STOP_LIMIT`].
    pub async fn stop(self) {
        self.shutdown.cancel();
        let mut task = self.task;
        match tokio::time::timeout(IN_PROCESS_STOP_LIMIT, &mut task).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(error))) => {
                tracing::warn!(error = format!("{error:#}"), "the operators failed")
            }
            Ok(Err(error)) => tracing::warn!(%error, "the operators' task failed"),
            Err(_) => {
                task.abort();
                tracing::warn!(
                    "the operators did not stop within {IN_PROCESS_STOP_LIMIT:?}; abandoned them"
                );
            }
        }
    }
}
