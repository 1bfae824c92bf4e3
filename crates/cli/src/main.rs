//! The `finale` binary: thin subcommands over the Finale crates.

mod cluster;
mod discovery_cache;
mod explain;
mod fallback;
mod finalize;
mod gc;
mod node;
mod operator;
mod plan;
mod tree;

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use finale_apiserver::authn::service_account::ServiceAccountTokenOptions;
use finale_apiserver::server::{self, ServerConfig};
use tokio::signal::unix::{SignalKind, signal};
use tracing_subscriber::EnvFilter;

/// The server allocates and frees many short-lived JSON values per request; mimalloc spends
/// less CPU on that than glibc's allocator and returns memory to the system sooner.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    Server(Box<ServerArgs>),
    /// Run a bundled operator against a Kubernetes API (a kubeconfig picks which).
    #[command(subcommand)]
    Operator(operator::Operator),
    /// Say why an object is not gone (asks the server for a DeletionReview). Exit code:
    /// 0 Gone or NotDeleting, 2 Progressing, 3 Stuck, 1 error.
    Explain(explain::ExplainArgs),
    /// Show the ownership tree of an object (its dependents, or its owners with --up) with
    /// what holds each one from deletion.
    Tree(tree::TreeArgs),
    /// Remove a finalizer whose owner cannot, with evidence: a dry run by default that prints
    /// the evidence and a confirmation digest; `--confirm DIGEST` does it and keeps a record
    /// (a FinalizerRemoval).
    Finalize(finalize::FinalizeArgs),
    /// Preview what deleting an object would do (a DeletionReview in Plan mode): what is
    /// deleted, orphaned, kept, and what will hang. Exit code: 0 it will complete, 2 it will
    /// hang, 1 error.
    Plan(plan::PlanArgs),
    /// External-resource GC of CloudClusters: enable, disable, configure, plan, status, and a
    /// one-shot sweep of an account (`run`).
    #[command(subcommand)]
    Gc(gc::Gc),
    /// Run a node agent: runs the Pods bound to this node as host processes (a process
    /// runtime) and terminates them as the kubelet does.
    Node(node::NodeArgs),
}

#[derive(clap::Args)]
struct ServerArgs {
    /// Where the store, certificates and the admin kubeconfig live.
    #[arg(long, env = "FINALE_DATA_DIR", default_value = "./finale-data")]
    data_dir: PathBuf,
    /// Where the CA, serving certificate and admin token live (default `<data-dir>/pki`).
    /// Several API servers on one etcd share one directory, so clients trust them all; the
    /// serving certificate must then name every replica (`--tls-san`).
    #[arg(long, value_name = "DIR")]
    pki_dir: Option<PathBuf>,
    /// Address to serve HTTPS on. Port 0 picks a free port (printed at start).
    #[arg(long, env = "FINALE_LISTEN", default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Extra host names or IPs for the serving certificate (repeatable).
    #[arg(long = "tls-san", value_name = "NAME")]
    tls_sans: Vec<String>,
    /// How long a terminating namespace waits before its content is deleted (e.g. `0s`,
    /// `500ms`, `5s`). Upstream always waits 5 s; Finale needs no wait by default.
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = humantime::parse_duration)]
    namespace_deletion_delay: std::time::Duration,
    /// Also run the bundled operators (database, tenant, cloud-gc) in this process, against this
    /// server's HTTPS endpoint.
    #[arg(long)]
    with_operators: bool,
    /// Where the in-process operators serve their metrics (with --with-operators). Taken:
    /// the server does not start. Port 0 picks a free port (printed at start).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    operator_metrics_addr: SocketAddr,
    /// Also run a node agent in this process (as `finale node` would run): a Node named
    /// after the host runs the Pods scheduled to it as host processes, under
    /// `<data-dir>/node`. A one-command cluster.
    #[arg(long)]
    with_node: bool,
    /// Read-only requests served at once; the next gets 429 (0: no limit). Watches and
    /// system:masters are exempt, as in kube-apiserver.
    #[arg(long, value_name = "N", default_value_t = finale_apiserver::http::limits::DEFAULT_MAX_REQUESTS_INFLIGHT)]
    max_requests_inflight: usize,
    /// Mutating requests served at once; the next gets 429 (0: no limit).
    #[arg(long, value_name = "N", default_value_t = finale_apiserver::http::limits::DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT)]
    max_mutating_requests_inflight: usize,
    /// Open client connections at once; further ones wait to be accepted (0: no limit).
    #[arg(long, value_name = "N", default_value_t = server::DEFAULT_MAX_CONNECTIONS)]
    max_connections: usize,
    /// How long the controllers' Lease (`kube-system/finale-controllers`) holds without
    /// renewal before another replica may take it.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = humantime::parse_duration)]
    leader_elect_lease_duration: std::time::Duration,
    /// How long the leading replica keeps its controllers running without a successful
    /// renewal; shorter than the lease duration.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    leader_elect_renew_deadline: std::time::Duration,
    /// The pause between attempts to take or renew the controllers' Lease.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = humantime::parse_duration)]
    leader_elect_retry_period: std::time::Duration,
    /// How often the node lifecycle controller checks the Nodes' heartbeats
    /// (kube-controller-manager's flag).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = humantime::parse_duration)]
    node_monitor_period: std::time::Duration,
    /// How long a Node whose agent stopped renewing its Lease stays Ready before it becomes
    /// Unknown and is tainted unreachable (kube-controller-manager's flag).
    #[arg(long, value_name = "DURATION", default_value = "40s", value_parser = humantime::parse_duration)]
    node_monitor_grace_period: std::time::Duration,
    /// More bearer tokens, in kube-apiserver's format: a CSV file of
    /// `token,user,uid[,"group1,group2"]` lines. What each may do is up to RBAC.
    #[arg(long, value_name = "FILE")]
    token_auth_file: Option<PathBuf>,
    /// The `iss` of the service-account tokens this server issues (`kubectl create token`),
    /// and the only issuer whose tokens it accepts.
    #[arg(long, value_name = "URL", default_value = finale_apiserver::authn::service_account::DEFAULT_ISSUER)]
    service_account_issuer: String,
    /// What a token must be meant for to authenticate here, comma separated (default: the
    /// issuer). Token requests without audiences get these.
    #[arg(long, value_name = "AUDIENCE[,AUDIENCE...]", value_delimiter = ',')]
    api_audiences: Vec<String>,
    /// More public keys (PEM, ECDSA P-256) that service-account tokens may be signed with,
    /// beside the signing key `<pki-dir>/sa.key`: keep the old key's here when you rotate it
    /// (repeatable).
    #[arg(long, value_name = "FILE")]
    service_account_key_file: Vec<PathBuf>,
    /// Longest lifetime of an issued token; longer requests are shortened to it (e.g. `24h`).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    service_account_max_token_expiration: Option<std::time::Duration>,
    /// Write the audit log here (`-`: standard output), as JSON lines of `audit.k8s.io/v1`
    /// Events. Without --audit-policy-file every request is recorded at `Metadata` level but
    /// reads of Events.
    #[arg(long, value_name = "FILE")]
    audit_log_path: Option<PathBuf>,
    /// The audit policy (`audit.k8s.io/v1` Policy, YAML or JSON): which requests to record,
    /// at which level. Needs --audit-log-path.
    #[arg(long, value_name = "FILE", requires = "audit_log_path")]
    audit_policy_file: Option<PathBuf>,
    /// Megabytes the audit log grows to before it is rotated (0: lumberjack's 100).
    #[arg(long, value_name = "MB", default_value_t = 0)]
    audit_log_maxsize: u64,
    /// Rotated audit logs to keep (0: all).
    #[arg(long, value_name = "N", default_value_t = 0)]
    audit_log_maxbackup: u32,
    /// Days to keep rotated audit logs (0: forever).
    #[arg(long, value_name = "DAYS", default_value_t = 0)]
    audit_log_maxage: u32,
    /// How many recent changes the watch cache keeps, for watchers to resume from without
    /// reading the store (kube-apiserver's flag; Finale keeps one history for all resources
    /// rather than one per resource). A watch from an older resourceVersion is served from
    /// the store, or gets 410 Expired once the store has compacted it.
    #[arg(long, value_name = "N", default_value_t = finale_apiserver::watch_cache::DEFAULT_HISTORY_CAPACITY,
          value_parser = clap::value_parser!(u32).range(1..))]
    default_watch_cache_size: u32,
    /// The most memory the watch cache's history may hold, in MiB of stored objects (each
    /// change counted as its object's stored JSON, and the previous object's). The oldest
    /// changes leave first, whichever of this and `--default-watch-cache-size` is reached; a
    /// watch from before the history is served from the store, as above.
    #[arg(long, value_name = "MIB", default_value_t = finale_apiserver::watch_cache::DEFAULT_HISTORY_MEGABYTES,
          value_parser = clap::value_parser!(u32).range(1..=65536))]
    watch_cache_max_mb: u32,
    /// Switch API group versions on or off, as kube-apiserver's flag: a comma-separated list
    /// of `group/version=bool`. Only `deletion.finale.dev/v1alpha1` can be switched
    /// (`--runtime-config=deletion.finale.dev/v1alpha1=false` serves a cluster without it).
    #[arg(long, value_name = "GROUP/VERSION=BOOL")]
    runtime_config: Vec<String>,
    /// The embedded store's page cache, in MiB: pages of the database file kept in the
    /// server's memory. Pages beyond it are read through the operating system's page cache,
    /// which the kernel can reclaim.
    #[arg(long, value_name = "MIB", default_value_t = default_storage_cache_mb(),
          value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    storage_cache_mb: u32,
    /// Verify the checksum of every page of the embedded store when it opens, so a file
    /// damaged on disk is refused at start with a message that says so. It reads the whole
    /// file once (about 3 s per 500 MB); `--storage-check-integrity=false` skips it.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    storage_check_integrity: bool,
    /// Keep objects in this etcd cluster instead of the embedded store: client URLs of its
    /// members, comma separated (kube-apiserver's flag). Without it, nothing changes.
    #[arg(long, value_name = "URL[,URL...]", value_delimiter = ',')]
    etcd_servers: Vec<String>,
    /// Root of Finale's keys in etcd. Several Finale servers with the same prefix form one
    /// cluster.
    #[arg(long, value_name = "PREFIX", default_value = finale_store_etcd::DEFAULT_PREFIX)]
    etcd_prefix: String,
    /// CA bundle that signs etcd's serving certificates (https endpoints).
    #[arg(long, value_name = "FILE")]
    etcd_cafile: Option<PathBuf>,
    /// Client certificate for etcd (with --etcd-keyfile).
    #[arg(long, value_name = "FILE")]
    etcd_certfile: Option<PathBuf>,
    /// Client key for etcd (with --etcd-certfile).
    #[arg(long, value_name = "FILE")]
    etcd_keyfile: Option<PathBuf>,
    /// How often to compact etcd's history, keeping at least this much of it (0: never).
    /// Several servers on one etcd compact once per interval between them.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = humantime::parse_duration)]
    etcd_compaction_interval: std::time::Duration,
}

impl ServerArgs {
    /// The etcd backend the flags ask for, if any.
    fn etcd(&self) -> anyhow::Result<Option<server::EtcdConfig>> {
        if self.etcd_servers.is_empty() {
            if self.etcd_cafile.is_some()
                || self.etcd_certfile.is_some()
                || self.etcd_keyfile.is_some()
            {
                anyhow::bail!(
                    "--etcd-cafile, --etcd-certfile and --etcd-keyfile need --etcd-servers"
                );
            }
            return Ok(None);
        }
        if !self.etcd_prefix.starts_with('/') {
            anyhow::bail!(
                "--etcd-prefix must start with '/' (got {:?})",
                self.etcd_prefix
            );
        }
        let mut options = finale_store_etcd::EtcdStoreOptions::new(self.etcd_servers.clone());
        options.prefix = self.etcd_prefix.trim_end_matches('/').as_bytes().to_vec();
        let tls_wanted = self.etcd_cafile.is_some()
            || self.etcd_certfile.is_some()
            || self.etcd_keyfile.is_some();
        if tls_wanted {
            options.tls = Some(
                finale_store_etcd::EtcdTls::from_files(
                    self.etcd_cafile.as_ref(),
                    self.etcd_certfile.as_ref(),
                    self.etcd_keyfile.as_ref(),
                )
                .map_err(anyhow::Error::msg)?,
            );
        }
        Ok(Some(server::EtcdConfig {
            options,
            compaction_interval: self.etcd_compaction_interval,
        }))
    }
}

/// `--storage-cache-mb`'s default: the store's own.
fn default_storage_cache_mb() -> u32 {
    u32::try_from(finale_store::RedbStoreOptions::default().cache_size >> 20).unwrap_or(u32::MAX)
}

/// The name kubectl runs a plugin by: `kubectl finale …` runs `kubectl-finale …`.
const KUBECTL_PLUGIN_NAME: &str = "kubectl-finale";

/// Turns transparent huge pages off for this process, unless `MIMALLOC_ALLOW_THP` says what
/// to do (mimalloc's own switch, read at its start). mimalloc backs its heap with 2 MiB huge
/// pages when the kernel allows: an idle server then holds 20 MiB of mostly untouched heap
/// (measured: 24.6 MB anonymous, 20 MB of it huge pages; 7.6 MB without), and HTTPS creates
/// measured no faster with them.
fn disable_transparent_huge_pages() {
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
        return;
    }
    if let Err(error) = nix::sys::prctl::set_thp_disable(true) {
        // Only an old kernel refuses; the server works the same with more idle memory.
        eprintln!("finale: cannot turn transparent huge pages off (prctl: {error}); continuing");
    }
}

fn main() -> std::process::ExitCode {
    disable_transparent_huge_pages();
    // Invoked as the kubectl plugin, the binary behaves the same; only its usage lines say
    // `kubectl finale`.
    let invoked_as = std::env::args_os()
        .next()
        .map(PathBuf::from)
        .and_then(|path| {
            path.file_name()
                .map(|name| name.to_string_lossy().into_owned())
        });
    let command = if invoked_as.as_deref() == Some(KUBECTL_PLUGIN_NAME) {
        Cli::command().bin_name("kubectl finale")
    } else {
        Cli::command()
    };
    let cli = match Cli::from_arg_matches(&command.get_matches()) {
        Ok(cli) => cli,
        Err(error) => error.exit(),
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Colour codes only for a terminal: redirected logs (files, journald) stay plain text.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    // A startup failure (port in use, store locked by another server, …) is an expected,
    // user-facing error: print its chain of causes on one line, never the Debug form, which
    // under RUST_BACKTRACE=1 buries the message under dozens of backtrace frames.
    match run(cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("Error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<std::process::ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    match cli.command {
        Command::Server(args) => runtime
            .block_on(run_server(*args))
            .map(|()| std::process::ExitCode::SUCCESS),
        Command::Operator(operator) => runtime
            .block_on(operator::run(operator))
            .map(|()| std::process::ExitCode::SUCCESS),
        Command::Explain(args) => runtime.block_on(explain::run(args)),
        Command::Tree(args) => runtime.block_on(tree::run(args)),
        Command::Finalize(args) => runtime.block_on(finalize::run(args)),
        Command::Plan(args) => runtime.block_on(plan::run(args)),
        Command::Gc(command) => runtime.block_on(gc::run(command)),
        Command::Node(args) => runtime
            .block_on(node::run(args))
            .map(|()| std::process::ExitCode::SUCCESS),
    }
}

async fn run_server(args: ServerArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let insight_api =
        finale_apiserver::insight::runtime_config::insight_api_enabled(&args.runtime_config)
            .map_err(|error| anyhow::anyhow!("--runtime-config: {error}"))?;
    // Before anything else, so a taken port fails the start with nothing half-done.
    let operator_metrics = if args.with_operators {
        Some(
            operator::bind_metrics(args.operator_metrics_addr, "--operator-metrics-addr")
                .await
                .context("cannot start the bundled operators")?,
        )
    } else {
        None
    };
    let mut config = ServerConfig::new(&args.data_dir, args.listen);
    config.insight_api = insight_api;
    config.etcd = args.etcd()?;
    config.extra_sans = args.tls_sans;
    config.pki_dir = args.pki_dir;
    config.namespace_controller.deletion_delay = args.namespace_deletion_delay;
    config.watch_cache.history_capacity = args.default_watch_cache_size as usize;
    config.watch_cache.history_max_bytes = (args.watch_cache_max_mb as usize) << 20;
    config.store.cache_size = (args.storage_cache_mb as usize) << 20;
    config.store.check_integrity_on_open = args.storage_check_integrity;
    config.token_auth_file = args.token_auth_file.clone();
    if let Some(max) = args.service_account_max_token_expiration
        && !(3600..=1 << 32).contains(&max.as_secs())
    {
        anyhow::bail!(
            "--service-account-max-token-expiration {}: must be between 1 hour and 2^32 \
             seconds, as kube-apiserver requires",
            humantime::format_duration(max)
        );
    }
    config.audit = args
        .audit_log_path
        .clone()
        .map(|path| finale_audit::AuditLogOptions {
            path,
            max_size_mb: args.audit_log_maxsize,
            max_backups: args.audit_log_maxbackup,
            max_age_days: args.audit_log_maxage,
            policy: args.audit_policy_file.clone(),
        });
    config.service_accounts = ServiceAccountTokenOptions {
        issuer: args.service_account_issuer.clone(),
        api_audiences: args.api_audiences.clone(),
        key_files: args.service_account_key_file.clone(),
        max_expiration_seconds: args
            .service_account_max_token_expiration
            .map(|max| max.as_secs() as i64),
    };
    config.limits.max_requests_inflight = args.max_requests_inflight;
    config.limits.max_mutating_requests_inflight = args.max_mutating_requests_inflight;
    config.limits.max_connections = args.max_connections;
    if args.node_monitor_period.is_zero() || args.node_monitor_grace_period.is_zero() {
        anyhow::bail!("--node-monitor-period and --node-monitor-grace-period must be positive");
    }
    config.node_lifecycle.monitor_period = args.node_monitor_period;
    config.node_lifecycle.grace_period = args.node_monitor_grace_period;
    config.leader_election = server::LeaderElectionOptions {
        lease_duration: args.leader_elect_lease_duration,
        renew_deadline: args.leader_elect_renew_deadline,
        retry_period: args.leader_elect_retry_period,
    };
    let running = server::start(config).await?;
    let kubeconfig =
        std::fs::canonicalize(&running.kubeconfig).unwrap_or_else(|_| running.kubeconfig.clone());
    println!(
        "finale is serving on https://{} (ready in {} ms)",
        running.local_addr,
        started.elapsed().as_millis()
    );
    println!("export KUBECONFIG={}", kubeconfig.display());
    let operators = match operator_metrics {
        Some(listener) => match operator::InProcess::start(&kubeconfig, listener).await {
            Ok(operators) => {
                println!(
                    "the bundled operators serve metrics on http://{}/metrics",
                    operators.metrics_addr
                );
                Some(operators)
            }
            Err(error) => {
                running.shutdown().await;
                return Err(error.context("cannot start the bundled operators"));
            }
        },
        None => None,
    };

    let node = if args.with_node {
        match node::InProcess::start(&kubeconfig, &args.data_dir).await {
            Ok(node) => {
                println!(
                    "node {} runs the Pods scheduled to it (try: kubectl run web --image=busybox --command -- sleep 3600)",
                    node.node_name()
                );
                Some(node)
            }
            Err(error) => {
                if let Some(operators) = operators {
                    operators.stop().await;
                }
                running.shutdown().await;
                return Err(error.context("cannot start the node agent (--with-node)"));
            }
        }
    } else {
        None
    };

    let mut terminate = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
    tokio::select! {
        _ = terminate.recv() => tracing::info!("SIGTERM received; shutting down"),
        _ = interrupt.recv() => tracing::info!("SIGINT received; shutting down"),
    }
    if let Some(node) = node {
        node.stop().await;
    }
    if let Some(operators) = operators {
        operators.stop().await;
    }
    running.shutdown().await;
    tracing::info!("stopped cleanly");
    Ok(())
}
