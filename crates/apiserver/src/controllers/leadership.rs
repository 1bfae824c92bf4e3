//! The in-process controllers (garbage collector, namespace controller, CRD controller) run
//! on one replica at a time, under the `coordination.k8s.io/v1` Lease
//! `kube-system/finale-controllers`, as kube-controller-manager runs under its own.
//!
//! The election is [`finale_lease`]'s (client-go's algorithm and defaults: 15 s lease, 10 s
//! renew deadline, 2 s retry period), here over the registry instead of HTTP: the Lease is an
//! ordinary object, written with the same lifecycle rules, so `kubectl get lease -n
//! kube-system` shows the holder. With the embedded store there is one replica and it always
//! wins; the Lease is still taken, so behaviour is the same everywhere.
//!
//! # Guarantees
//! - Controllers start only after this replica holds the Lease, and are told to stop the
//!   moment leadership ends (renew deadline passed, or another holder seen).
//! - A deposed replica waits for its controllers to stop, at most [`STOP_TIMEOUT`], before it
//!   competes again; the successor cannot take the Lease earlier than `lease_duration` after
//!   the last renewal, which leaves `lease_duration - renew_deadline` (5 s with the defaults)
//!   for the old controllers to stop.
//! - At shutdown the Lease is released (holder cleared), so a standby takes over at once.
//!
//! - Controller writes are fenced on the Lease ([`crate::registry::fence`]): the controllers
//!   write through a registry whose every write requires, in the same store transaction, that
//!   the Lease is as this replica last wrote it. A replica paused for longer than
//!   `lease_duration - renew_deadline` (where Kubernetes' controllers may still write after
//!   their successor started) has its writes refused once another replica took the Lease.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use finale_lease::{ApiError as LeaseApiError, Lease, LeaseConfig};

use crate::http::health::Controllers;
use crate::registry::fence::LeaseFence;
use crate::registry::{Registry, Subresource, WriteOptions};
use crate::resources::ResourceType;
use crate::status::ApiError;

/// Where the controllers' Lease lives.
pub const LEASE_NAMESPACE: &str = "kube-system";
pub const LEASE_NAME: &str = "finale-controllers";

/// The field manager of the controllers' Lease writes.
const FIELD_MANAGER: &str = "finale-controllers";

/// How long a deposed replica waits for its controllers to stop before it competes again.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(4);

/// The controllers' Lease, read and written through the registry.
#[derive(Clone)]
pub struct RegistryLeases {
    registry: Arc<Registry>,
    leases: Arc<ResourceType>,
    /// Told of every write of the Lease that names this replica, so that the controllers'
    /// fenced writes carry its revision.
    fence: Arc<LeaseFence>,
}

/// The fence of the controllers' writes on their Lease, for holder `identity`
/// ([`crate::registry::fence`]).
pub fn controllers_fence(registry: &Registry, identity: &str) -> Result<Arc<LeaseFence>, ApiError> {
    let leases = lease_type(registry)?;
    Ok(Arc::new(LeaseFence::new(
        leases.object_key(Some(LEASE_NAMESPACE), LEASE_NAME),
        format!("{LEASE_NAMESPACE}/{LEASE_NAME}"),
        identity.to_string(),
    )))
}

fn lease_type(registry: &Registry) -> Result<Arc<ResourceType>, ApiError> {
    registry
        .catalog()
        .lookup("coordination.k8s.io", "v1", "leases")
        .ok_or_else(|| ApiError::internal("the leases resource is not registered"))
}

impl RegistryLeases {
    pub fn new(
        registry: Arc<Registry>,
        fence: Arc<LeaseFence>,
    ) -> Result<RegistryLeases, ApiError> {
        let leases = lease_type(&registry)?;
        Ok(RegistryLeases {
            registry,
            leases,
            fence,
        })
    }

    /// A Lease this replica wrote: if it names this replica, the controllers' writes are
    /// fenced at its revision from now on.
    fn written(&self, object: Value) -> Result<Lease, LeaseApiError> {
        let lease = to_lease(object)?;
        let ours = lease
            .spec
            .as_ref()
            .and_then(|spec| spec.holder_identity.as_deref())
            == Some(self.fence.identity());
        let revision = lease
            .metadata
            .resource_version
            .as_deref()
            .and_then(|rv| rv.parse().ok());
        if ours && let Some(revision) = revision {
            self.fence.hold(revision);
        }
        Ok(lease)
    }

    fn options() -> WriteOptions {
        WriteOptions {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..WriteOptions::default()
        }
    }
}

fn to_lease(object: Value) -> Result<Lease, LeaseApiError> {
    serde_json::from_value(object)
        .map_err(|e| format!("the stored Lease does not decode: {e}").into())
}

fn to_object(lease: &Lease) -> Result<Value, LeaseApiError> {
    let mut object = serde_json::to_value(lease)?;
    object["apiVersion"] = Value::from("coordination.k8s.io/v1");
    object["kind"] = Value::from("Lease");
    Ok(object)
}

impl finale_lease::LeaseApi for RegistryLeases {
    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Lease>, LeaseApiError>> {
        async move {
            match self
                .registry
                .get(&self.leases, Some(LEASE_NAMESPACE), name)
                .await
            {
                Ok(object) => to_lease(object).map(Some),
                Err(error) if error.code == 404 => Ok(None),
                Err(error) => Err(error.into()),
            }
        }
        .boxed()
    }

    fn create<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<Lease, LeaseApiError>> {
        async move {
            let written = self
                .registry
                .create(
                    &self.leases,
                    Some(LEASE_NAMESPACE),
                    to_object(lease)?,
                    &Self::options(),
                )
                .await?;
            self.written(written.object)
        }
        .boxed()
    }

    fn replace<'a>(
        &'a self,
        name: &'a str,
        lease: &'a Lease,
    ) -> BoxFuture<'a, Result<Lease, LeaseApiError>> {
        async move {
            let written = self
                .registry
                .update(
                    &self.leases,
                    Some(LEASE_NAMESPACE),
                    name,
                    to_object(lease)?,
                    Subresource::Main,
                    &Self::options(),
                )
                .await?;
            self.written(written.object)
        }
        .boxed()
    }

    fn status_code(error: &LeaseApiError) -> Option<u16> {
        error.downcast_ref::<ApiError>().map(|e| e.code)
    }
}

/// Whether this replica leads the controllers now: 1 or 0, exported as client-go's
/// `leader_election_master_status` gauge.
#[derive(Clone, Debug, Default)]
pub struct LeaderFlag(pub prometheus_client::metrics::gauge::Gauge);

impl LeaderFlag {
    pub fn is_leader(&self) -> bool {
        self.0.get() == 1
    }

    fn set(&self, leading: bool) {
        self.0.set(i64::from(leading));
    }
}

/// Starts the controllers of one term: called each time this replica becomes the leader,
/// with a token cancelled when the term ends. Returns the tasks to wait for.
pub type StartControllers =
    Box<dyn Fn(CancellationToken) -> Vec<(&'static str, JoinHandle<()>)> + Send + Sync>;

/// Competes for the controllers' Lease until `shutdown`, running the controllers while it
/// leads. The returned task ends after shutdown, with the Lease released.
/// `fence` must be [`controllers_fence`] for `config.identity`; the controllers `start` runs
/// should write through `registry.fenced(fence)`.
pub fn spawn(
    registry: Arc<Registry>,
    config: LeaseConfig,
    fence: Arc<LeaseFence>,
    flag: LeaderFlag,
    start: StartControllers,
    health: Arc<Controllers>,
    shutdown: CancellationToken,
) -> Result<JoinHandle<()>, ApiError> {
    if fence.identity() != config.identity {
        return Err(ApiError::internal(
            "the controllers' fence names another identity than their Lease",
        ));
    }
    let leases = RegistryLeases::new(registry, Arc::clone(&fence))?;
    config
        .validate()
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let elector = finale_lease::LeaderElector::new(leases, config);
    Ok(tokio::spawn(async move {
        run(elector, fence, flag, start, health, shutdown).await;
    }))
}

async fn run(
    elector: finale_lease::LeaderElector<RegistryLeases>,
    fence: Arc<LeaseFence>,
    flag: LeaderFlag,
    start: StartControllers,
    health: Arc<Controllers>,
    shutdown: CancellationToken,
) {
    loop {
        let leadership = match elector.acquire(&shutdown).await {
            Ok(Some(leadership)) => leadership,
            Ok(None) => return,
            Err(error) => {
                // Only misconfiguration ends acquire(); the registry never answers 403.
                tracing::error!(%error, "the controllers cannot compete for their Lease; retrying");
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(2)) => continue,
                }
            }
        };
        let term = leadership.lost();
        // The acquisition was recorded by `RegistryLeases::written`.
        fence.open();
        flag.set(true);
        let tasks = start(term.clone());
        health.set_term(
            tasks
                .iter()
                .map(|(name, task)| (*name, task.abort_handle()))
                .collect(),
        );
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = term.cancelled() => {}
        }
        flag.set(false);
        // From here the term's controllers' writes are refused, even before they stop.
        fence.release();
        health.set_term(Vec::new());
        // Stop this term's controllers before anything else: a successor may start soon.
        term.cancel();
        stop_all(tasks).await;
        if shutdown.is_cancelled() {
            match leadership.release().await {
                Ok(released) => tracing::info!(?released, "released the controllers' Lease"),
                Err(error) => {
                    tracing::warn!(%error, "could not release the controllers' Lease; it will expire")
                }
            }
            return;
        }
        tracing::warn!("lost the controllers' Lease; controllers stopped, standing by");
        drop(leadership);
    }
}

/// Waits for the term's controllers, at most [`STOP_TIMEOUT`]; stragglers are aborted.
async fn stop_all(tasks: Vec<(&'static str, JoinHandle<()>)>) {
    let deadline = tokio::time::Instant::now() + STOP_TIMEOUT;
    for (name, mut task) in tasks {
        if tokio::time::timeout_at(deadline, &mut task).await.is_err() {
            tracing::warn!(
                controller = name,
                "controller did not stop in time; aborting it"
            );
            task.abort();
            let _ = task.await;
        }
    }
}
