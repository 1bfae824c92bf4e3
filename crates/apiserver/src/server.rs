//! Wiring: storage, PKI, registry, watch cache and the TLS listener, started and stopped as
//! one unit.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use finale_store::{RedbStore, RedbStoreOptions, Store};
use finale_store_etcd::{EtcdStore, EtcdStoreOptions};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

use crate::authn::{Authenticator, ClientCertAuthenticator};
use crate::controllers::certificates::{self, CONTROLLER_MANAGER_USER};
use crate::controllers::namespace::{self, NamespaceControllerOptions};
use crate::http::health::{Controllers, Health};
use crate::http::limits::InflightLimits;
use crate::http::{AppState, ServerState, router};
use crate::metrics::Metrics;
use crate::pki::{Pki, write_kubeconfig};
use crate::registry::Registry;
use crate::resources::Catalog;
use crate::watch_cache::{WatchCache, WatchCacheOptions};

/// How long a client may take to finish the TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long shutdown waits for in-flight requests before closing connections.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Bounds on what clients may hold of the server: connections, request slots, time.
#[derive(Clone, Debug)]
pub struct ServingLimits {
    /// `--max-requests-inflight`: read-only requests served at once (0: no limit).
    pub max_requests_inflight: usize,
    /// `--max-mutating-requests-inflight`: mutating requests served at once (0: no limit).
    pub max_mutating_requests_inflight: usize,
    /// `--max-connections`: open client connections (0: no limit). At the cap the server
    /// stops accepting; new connections wait in the kernel's backlog until one closes.
    pub max_connections: usize,
    /// How long an HTTP/1.1 client may take to send a request's headers, and how long an
    /// idle keep-alive connection waits for the next request: upstream's `ReadHeaderTimeout`.
    pub header_read_timeout: Duration,
}

impl Default for ServingLimits {
    fn default() -> Self {
        ServingLimits {
            max_requests_inflight: crate::http::limits::DEFAULT_MAX_REQUESTS_INFLIGHT,
            max_mutating_requests_inflight:
                crate::http::limits::DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_read_timeout: Duration::from_secs(32),
        }
    }
}

/// Default `--max-connections`: far above what the in-flight limits can serve at once (watches
/// hold connections too), well below the usual 64k file descriptors.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;

#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub data_dir: PathBuf,
    /// Where the CA, serving certificate and admin token live; `<data-dir>/pki` when None.
    /// Several API servers on one etcd share one.
    pub pki_dir: Option<PathBuf>,
    pub listen: SocketAddr,
    /// Extra names and IPs for the serving certificate, beyond 127.0.0.1, ::1 and localhost.
    pub extra_sans: Vec<String>,
    pub store: RedbStoreOptions,
    /// Keep the objects in etcd instead of the embedded store (`--etcd-servers`).
    pub etcd: Option<EtcdConfig>,
    pub watch_cache: WatchCacheOptions,
    pub namespace_controller: NamespaceControllerOptions,
    /// `--node-monitor-period` and `--node-monitor-grace-period`.
    pub node_lifecycle: crate::controllers::node_lifecycle::NodeLifecycleOptions,
    /// Run the garbage collector (on by default; tests of the API-side rules alone turn it
    /// off, as the spec's "GC stopped" scenarios do).
    pub garbage_collector: bool,
    /// Run the Job controller (on by default; tests that place a Job's Pods by hand turn it
    /// off, as envtest runs no controllers).
    pub job_controller: bool,
    /// Connections, requests in flight and header time a client may hold.
    pub limits: ServingLimits,
    /// Timing of the controllers' Lease (`kube-system/finale-controllers`).
    pub leader_election: LeaderElectionOptions,
    /// Serve `deletion.finale.dev/v1alpha1` (on by default; `--runtime-config
    /// deletion.finale.dev/v1alpha1=false` switches it off, see
    /// [`crate::insight::runtime_config`]). Off, the group is absent from discovery and its
    /// paths are 404, as on any other cluster.
    pub insight_api: bool,
    /// kube-apiserver's `--token-auth-file`: more bearer tokens, each with its user, uid and
    /// groups ([`crate::authn::load_token_file`]).
    pub token_auth_file: Option<PathBuf>,
    /// `--service-account-issuer`, `--api-audiences`, `--service-account-key-file`,
    /// `--service-account-max-token-expiration`.
    pub service_accounts: crate::authn::service_account::ServiceAccountTokenOptions,
    /// `--audit-log-path` and its companions; None: no audit log.
    pub audit: Option<finale_audit::AuditLogOptions>,
}

/// kube-controller-manager's `--leader-elect-*` timings, client-go's defaults.
#[derive(Clone, Debug)]
pub struct LeaderElectionOptions {
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl Default for LeaderElectionOptions {
    fn default() -> Self {
        LeaderElectionOptions {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl ServerConfig {
    pub fn new(data_dir: impl Into<PathBuf>, listen: SocketAddr) -> Self {
        ServerConfig {
            data_dir: data_dir.into(),
            pki_dir: None,
            listen,
            extra_sans: Vec::new(),
            store: RedbStoreOptions::default(),
            etcd: None,
            watch_cache: WatchCacheOptions::default(),
            namespace_controller: NamespaceControllerOptions::default(),
            node_lifecycle: Default::default(),
            garbage_collector: true,
            job_controller: true,
            limits: ServingLimits::default(),
            leader_election: LeaderElectionOptions::default(),
            insight_api: true,
            token_auth_file: None,
            service_accounts: Default::default(),
            audit: None,
        }
    }
}

/// The etcd backend: where, and how often to compact (kube-apiserver's flags).
#[derive(Clone, Debug)]
pub struct EtcdConfig {
    pub options: EtcdStoreOptions,
    /// `--etcd-compaction-interval`; zero turns the compactor off.
    pub compaction_interval: Duration,
}

/// The store a server runs on, for what differs between backends (closing, health).
enum Backend {
    Embedded(Arc<RedbStore>),
    Etcd(Arc<EtcdStore>),
}

impl Backend {
    async fn open(config: &ServerConfig) -> anyhow::Result<Backend> {
        match &config.etcd {
            None => {
                let store = RedbStore::open(&config.data_dir.join("store"), config.store.clone())
                    .with_context(|| {
                    format!("cannot open the store in {}", config.data_dir.display())
                })?;
                store.start_compactor();
                Ok(Backend::Embedded(store))
            }
            Some(etcd) => {
                let store = EtcdStore::connect(etcd.options.clone())
                    .await
                    .map_err(|e| anyhow::anyhow!("cannot reach etcd: {e}"))?;
                store.start_compactor(etcd.compaction_interval);
                Ok(Backend::Etcd(store))
            }
        }
    }

    fn shared(&self) -> Arc<dyn Store> {
        match self {
            Backend::Embedded(store) => store.clone(),
            Backend::Etcd(store) => store.clone(),
        }
    }

    fn etcd(&self) -> Option<Arc<EtcdStore>> {
        match self {
            Backend::Embedded(_) => None,
            Backend::Etcd(store) => Some(store.clone()),
        }
    }

    async fn close(&self) {
        match self {
            Backend::Embedded(store) => store.close().await,
            Backend::Etcd(store) => store.close(),
        }
    }
}

/// A started server. Dropping it does not stop it; call [`RunningServer::shutdown`].
pub struct RunningServer {
    pub local_addr: SocketAddr,
    pub kubeconfig: PathBuf,
    pub registry: Arc<Registry>,
    /// What decides each request (RBAC); its view follows the stored RBAC objects.
    pub authorizer: Arc<crate::authz::Authorizer>,
    shutdown: CancellationToken,
    serving: tokio::task::JoinHandle<()>,
    /// The in-process controllers; each ends when `shutdown` is cancelled.
    controllers: Arc<Controllers>,
    store: Backend,
    audit: Option<Arc<finale_audit::Audit>>,
}

impl RunningServer {
    /// Stops accepting, ends watches, drains requests (bounded), and closes the store.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        if let Err(error) = self.serving.await {
            tracing::warn!(%error, "the accept loop ended abnormally");
        }
        // Controllers hold the registry, and through it the store file: wait for them, so
        // that a stopped server has let go of its data directory.
        for (name, controller) in self.controllers.take() {
            if tokio::time::timeout(std::time::Duration::from_secs(10), controller)
                .await
                .is_err()
            {
                tracing::warn!(controller = name, "a controller did not stop within 10 s");
            }
        }
        self.store.close().await;
        // Everything queued for the audit log is written before the process may exit.
        if let Some(audit) = &self.audit {
            audit.log.close();
        }
    }

    /// A token that stops the server when cancelled (e.g. from a signal handler).
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }
}

/// The URL clients should use: a wildcard listen address is reached on loopback.
fn client_url(addr: SocketAddr) -> String {
    let host = match addr.ip() {
        ip if ip.is_unspecified() && addr.is_ipv4() => "127.0.0.1".to_string(),
        ip if ip.is_unspecified() => "[::1]".to_string(),
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        ip => ip.to_string(),
    };
    format!("https://{host}:{}", addr.port())
}

fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    // Durably: a data directory whose name a power cut can take away loses everything
    // acknowledged inside it.
    finale_store::durable_fs::create_dir_all_durably(dir)
        .with_context(|| format!("cannot create the data directory {}", dir.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("cannot restrict permissions of {}", dir.display()))?;
    }
    Ok(())
}

/// This replica's holder identity in the controllers' Lease: made once (host name and a
/// random suffix) and kept in the data directory. A restart after a crash then finds the
/// Lease still its own and resumes at once, instead of waiting out the lease duration as a
/// stranger would; two live processes never share a data directory (the store locks it).
fn controllers_identity(data_dir: &Path) -> anyhow::Result<String> {
    let path = data_dir.join("controllers-identity");
    match std::fs::read_to_string(&path) {
        Ok(identity) if !identity.trim().is_empty() => return Ok(identity.trim().to_string()),
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => {
            return Err(error).with_context(|| format!("cannot read {}", path.display()));
        }
    }
    let identity = finale_lease::LeaseConfig::default_identity();
    // Not synced: losing it to a power cut costs one lease duration of waiting, nothing more.
    std::fs::write(&path, identity.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(identity)
}

/// The in-process controllers' identities: kube-controller-manager's service accounts (with
/// `--use-service-account-credentials`), so that finalizer provenance and the audit log name
/// the controller that wrote. The CRD controller runs in kube-apiserver upstream.
pub const GARBAGE_COLLECTOR_USER: &str =
    "system:serviceaccount:kube-system:generic-garbage-collector";
pub const NAMESPACE_CONTROLLER_USER: &str =
    "system:serviceaccount:kube-system:namespace-controller";
pub const AGGREGATION_CONTROLLER_USER: &str =
    "system:serviceaccount:kube-system:clusterrole-aggregation-controller";
pub const CRD_CONTROLLER_USER: &str = crate::registry::provenance::IN_PROCESS_USER;

/// Opens storage, prepares the PKI, binds the listener and starts serving.
pub async fn start(config: ServerConfig) -> anyhow::Result<RunningServer> {
    // Both ring and (through other crates) aws-lc-rs may be linked; choose explicitly.
    let _ = rustls::crypto::ring::default_provider().install_default();
    // Bind first: a taken port then fails the start before anything is created on disk.
    let listener = TcpListener::bind(config.listen).await.with_context(|| {
        format!(
            "cannot listen on {}: is another server using the port? Pick another with --listen",
            config.listen
        )
    })?;
    let local_addr = listener
        .local_addr()
        .context("cannot read the bound address")?;
    create_private_dir(&config.data_dir)?;

    let store = Backend::open(&config).await?;
    let shared_store = store.shared();

    let pki_dir = config
        .pki_dir
        .clone()
        .unwrap_or_else(|| config.data_dir.join(crate::pki::PKI_DIR));
    // Shared with the CSR signer, which signs approved client requests with the CA.
    let pki = Arc::new(
        Pki::load_or_create_in(&pki_dir, &config.extra_sans)
            .with_context(|| format!("cannot prepare certificates in {}", pki_dir.display()))?,
    );
    let tls = TlsAcceptor::from(
        pki.server_tls_config()
            .context("cannot build the TLS configuration")?,
    );
    let client_certs = pki
        .client_cert_authenticator()
        .context("cannot build the client certificate verifier")?;
    let mut tokens = pki.token_authenticator();
    if let Some(file) = &config.token_auth_file {
        let added = crate::authn::load_token_file(file, &mut tokens)?;
        tracing::info!(file = %file.display(), tokens = added, "loaded the static token file");
    }

    // Opened before anything is served: a bad policy or an unwritable log stops the start.
    let audit = match &config.audit {
        Some(options) => {
            let audit = options.open()?;
            tracing::info!(log = %audit.log.target(), rules = audit.policy.rules.len(), "writing the audit log");
            Some(Arc::new(audit))
        }
        None => None,
    };

    let shutdown = CancellationToken::new();
    let catalog = Arc::new(Catalog::with_builtins());
    if !config.insight_api {
        for resource in crate::insight::resource_types() {
            catalog.replace_resource(&resource.group, &resource.plural, Vec::new());
        }
    }
    let watch_cache = WatchCache::start(
        Arc::clone(&shared_store),
        config.watch_cache.clone(),
        shutdown.clone(),
    )
    .await
    .context("cannot start the watch cache")?;
    let metrics = Arc::new(Metrics::new());
    metrics.register_watch_cache(&watch_cache);
    let registry = Arc::new(Registry::new(shared_store.clone(), catalog, watch_cache));
    // Webhook configurations written through other replicas reach this one's cache by the
    // change stream; this replica's own writes invalidate it as they commit.
    registry
        .webhooks()
        .spawn_invalidation(registry.subscribe_changes(), shutdown.clone());
    metrics.register_admission(registry.webhooks().metrics());
    metrics.register_conversion(registry.converter().metrics());
    registry
        .bootstrap()
        .await
        .map_err(|e| anyhow::anyhow!("cannot create the system namespaces: {e}"))?;
    crate::authz::bootstrap::reconcile(&registry)
        .await
        .map_err(|e| anyhow::anyhow!("cannot create the default RBAC roles and bindings: {e}"))?;
    // Loaded before the server listens: no request meets an empty policy.
    let authorizer = crate::authz::Authorizer::new();
    authorizer
        .start(Arc::clone(&registry), shutdown.clone())
        .await
        .map_err(|e| anyhow::anyhow!("cannot load the RBAC policy: {e}"))?;

    let established = crate::controllers::crd::load_established(&registry)
        .await
        .map_err(|e| anyhow::anyhow!("cannot load custom resource definitions: {e}"))?;
    if established > 0 {
        tracing::info!(
            count = established,
            "serving established custom resource definitions"
        );
    }
    // Every replica serves every established CRD, whichever replica runs the controllers.
    crate::controllers::crd::spawn_serving(Arc::clone(&registry), shutdown.clone());
    let controllers = Arc::new(Controllers::default());
    let gc_metrics = crate::controllers::gc::GcMetrics::default();
    metrics.register_garbage_collector(&gc_metrics);
    // Deletion reviews read what the collector knows; without one, the view says so.
    let gc_view = crate::controllers::gc::GcView::default();
    let leader = crate::controllers::leadership::LeaderFlag::default();
    metrics.register_leader(&leader);
    let lease = finale_lease::LeaseConfig {
        lease_duration: config.leader_election.lease_duration,
        renew_deadline: config.leader_election.renew_deadline,
        retry_period: config.leader_election.retry_period,
        ..finale_lease::LeaseConfig::new(
            crate::controllers::leadership::LEASE_NAMESPACE.to_string(),
            crate::controllers::leadership::LEASE_NAME.to_string(),
            controllers_identity(&config.data_dir)?,
        )
    };
    lease
        .validate()
        .context("invalid --leader-elect-* timings")?;
    // The controllers write through a registry fenced on their Lease: once another replica
    // has taken it, their writes are refused (registry/fence.rs).
    let fence = crate::controllers::leadership::controllers_fence(&registry, &lease.identity)
        .map_err(|e| anyhow::anyhow!("cannot fence the controllers: {e}"))?;
    metrics.register_fence(&fence);
    let start_controllers: crate::controllers::leadership::StartControllers = {
        let registry = Arc::new(registry.fenced(Arc::clone(&fence)));
        let gc_view = gc_view.clone();
        let run_gc = config.garbage_collector;
        let run_jobs = config.job_controller;
        let namespace_options = config.namespace_controller.clone();
        let node_lifecycle = config.node_lifecycle.clone();
        let pki = Arc::clone(&pki);
        let authorizer = Arc::clone(&authorizer);
        Box::new(move |term: CancellationToken| {
            let mut tasks = vec![
                (
                    "crd",
                    crate::controllers::crd::spawn(
                        Arc::new(registry.acting_as(CRD_CONTROLLER_USER)),
                        term.clone(),
                    ),
                ),
                (
                    "clusterrole-aggregation",
                    crate::controllers::clusterrole_aggregation::spawn(
                        Arc::new(registry.acting_as(AGGREGATION_CONTROLLER_USER)),
                        term.clone(),
                    ),
                ),
            ];
            if run_gc {
                tasks.push((
                    "garbage-collector",
                    crate::controllers::gc::spawn(
                        Arc::new(registry.acting_as(GARBAGE_COLLECTOR_USER)),
                        gc_metrics.clone(),
                        gc_view.clone(),
                        term.clone(),
                    ),
                ));
            }
            if run_jobs {
                tasks.push((
                    "job",
                    crate::controllers::job::spawn(
                        Arc::new(registry.acting_as(crate::controllers::job::JOB_CONTROLLER_USER)),
                        term.clone(),
                    ),
                ));
            }
            tasks.push((
                "scheduler",
                crate::controllers::scheduler::spawn(
                    Arc::new(registry.acting_as(crate::controllers::scheduler::SCHEDULER_USER)),
                    term.clone(),
                ),
            ));
            let controller_manager = Arc::new(registry.acting_as(CONTROLLER_MANAGER_USER));
            tasks.push((
                "csr-signing",
                certificates::signing::spawn(
                    Arc::clone(&controller_manager),
                    Arc::clone(&pki),
                    term.clone(),
                ),
            ));
            tasks.push((
                "csr-approving",
                certificates::approving::spawn(
                    Arc::clone(&controller_manager),
                    Arc::clone(&authorizer),
                    term.clone(),
                ),
            ));
            tasks.push((
                "csr-cleaner",
                certificates::cleaner::spawn(controller_manager, term.clone()),
            ));
            tasks.push((
                "node-lifecycle",
                crate::controllers::node_lifecycle::spawn(
                    Arc::new(
                        registry.acting_as(crate::controllers::node_lifecycle::NODE_LIFECYCLE_USER),
                    ),
                    node_lifecycle.clone(),
                    term.clone(),
                ),
            ));
            tasks.push((
                "namespace",
                namespace::spawn(
                    Arc::new(registry.acting_as(NAMESPACE_CONTROLLER_USER)),
                    namespace_options.clone(),
                    term,
                ),
            ));
            tasks
        })
    };
    controllers.add(
        "leader-election",
        crate::controllers::leadership::spawn(
            Arc::clone(&registry),
            lease,
            fence,
            leader.clone(),
            start_controllers,
            Arc::clone(&controllers),
            shutdown.clone(),
        )
        .map_err(|e| anyhow::anyhow!("cannot start leader election: {e}"))?,
    );

    // Subscribed before it is built, so no change between the two is missed.
    let terminating = Arc::new(crate::insight::terminating::TerminatingIndex::default());
    let changes = registry.subscribe_changes();
    terminating
        .build(&registry)
        .await
        .map_err(|e| anyhow::anyhow!("cannot build the index of objects being deleted: {e}"))?;
    controllers.add(
        "terminating-index",
        terminating.spawn(Arc::clone(&registry), changes, shutdown.clone()),
    );

    let token_keys = crate::authn::service_account::TokenKeys::new(
        pki.service_account_key_pem(),
        &config.service_accounts.key_files,
    )?;
    let service_account_tokens = crate::authn::service_account::ServiceAccountTokens::new(
        token_keys,
        &config.service_accounts,
        Arc::clone(&registry),
    );

    let url = client_url(local_addr);
    let kubeconfig = config.data_dir.join("kubeconfig");
    write_kubeconfig(&kubeconfig, &url, "finale", pki.ca_pem(), pki.admin_token())
        .with_context(|| format!("cannot write {}", kubeconfig.display()))?;

    let state = AppState::new(ServerState {
        registry: Arc::clone(&registry),
        openapi: Arc::default(),
        authenticator: Arc::new(Authenticator {
            tokens,
            service_accounts: Some(Arc::new(service_account_tokens)),
        }),
        authorizer: Arc::clone(&authorizer),
        metrics: Arc::clone(&metrics),
        server_address: local_addr.to_string(),
        shutdown: shutdown.clone(),
        health: Arc::new(Health {
            store: shared_store.clone(),
            etcd: store.etcd(),
            controllers: Arc::clone(&controllers),
            shutdown: shutdown.clone(),
        }),
        inflight: Arc::new(InflightLimits::new(
            config.limits.max_requests_inflight,
            config.limits.max_mutating_requests_inflight,
        )),
        insight: Arc::new(
            crate::insight::Insight::new(Arc::clone(&registry), gc_view, terminating)
                .with_leadership(leader.clone())
                .with_metrics(Arc::clone(&metrics)),
        ),
        audit: audit.clone(),
        node_client: Some(Arc::new(
            crate::node_client::NodeClient::new(&pki)
                .context("cannot prepare the client for node agents")?,
        )),
    });
    let app = router(state);
    let serving = tokio::spawn(accept_loop(
        listener,
        tls,
        client_certs,
        app,
        config.limits.clone(),
        shutdown.clone(),
    ));
    tracing::info!(%url, data_dir = %config.data_dir.display(), "finale API server is serving");
    Ok(RunningServer {
        local_addr,
        kubeconfig,
        registry,
        authorizer,
        shutdown,
        serving,
        controllers,
        store,
        audit,
    })
}

async fn accept_loop(
    listener: TcpListener,
    tls: TlsAcceptor,
    client_certs: ClientCertAuthenticator,
    app: axum::Router,
    limits: ServingLimits,
    shutdown: CancellationToken,
) {
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // A client that never finishes its headers (slowloris), or leaves a keep-alive
    // connection idle, is disconnected after the header read timeout.
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    // Every informer is one stream; allow many watches to share an HTTP/2 connection.
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(1000);
    let builder = Arc::new(builder);
    let connections =
        (limits.max_connections > 0).then(|| Arc::new(Semaphore::new(limits.max_connections)));
    loop {
        // At the cap, wait for a connection to close before accepting the next one.
        let slot = match &connections {
            Some(connections) => tokio::select! {
                _ = shutdown.cancelled() => break,
                slot = Arc::clone(connections).acquire_owned() => slot.ok(),
            },
            None => None,
        };
        let (tcp, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = tcp.set_nodelay(true);
        let tls = tls.clone();
        let client_certs = client_certs.clone();
        let app = app.clone();
        let builder = Arc::clone(&builder);
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            // Held until the connection ends.
            let _slot = slot;
            let stream = match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, tls.accept(tcp)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(error)) => {
                    tracing::debug!(%peer, %error, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            // Judged once per connection; every request on it carries the result.
            let certificate = client_certs.check(stream.get_ref().1.peer_certificates());
            let service = TowerToHyperService::new(app.map_request(
                move |mut request: http::Request<hyper::body::Incoming>| {
                    request.extensions_mut().insert(certificate.clone());
                    // The audit log's `sourceIPs` end with the peer.
                    request
                        .extensions_mut()
                        .insert(crate::http::audit::PeerAddress(peer));
                    request
                },
            ));
            let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
            if let Err(error) = watcher.watch(connection.into_owned()).await {
                tracing::debug!(%peer, %error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("some connections did not finish within {DRAIN_TIMEOUT:?}; closing them");
    }
}
