//! The reconcile loop that every Finale operator runs: finalizers first, then *apply* while the
//! object lives, then the ordered *cleanup* steps once it is terminating, with per-object
//! backoff, the `Deleting` condition, Events, metrics and leader election around it.
//!
//! An operator supplies a [`Reconciler`]; [`run`] drives it with kube-runtime's `Controller`
//! (watch, cache, per-object serialisation, requeues) for as long as this process is the leader.
//!
//! # Guarantees
//! - When leadership ends (the Lease is lost, or not renewed within the renew deadline), every
//!   reconciliation in flight is *cancelled*, not awaited: its future is dropped at its next
//!   `.await`, and no new one starts. [`crate::leader`] ends the term at most `renew_deadline`
//!   after the start of the last successful renewal, so this happens at least
//!   `lease_duration - renew_deadline` before a successor can take the Lease.
//! - The `leader` metric drops to 0 only once the cancelled reconciliations are gone.
//! - Shutdown is bounded: on `shutdown`, reconciliations in flight get
//!   [`Settings::graceful_shutdown_timeout`] to finish and are then cancelled; the Lease is then
//!   released within [`crate::leader::RELEASE_TIMEOUT`].
//! - The backoff state of objects that are gone from the cache is forgotten within a few
//!   seconds, so objects deleted while failing do not accumulate.
//!
//! # Caveats
//! - Cancelling a future stops what the callback would do next; it cannot recall what it has
//!   already sent. A request or SQL statement already on the wire still completes on the
//!   server; bound those with server-side timeouts (e.g. PostgreSQL's `statement_timeout`).
//! - A callback that blocks its thread instead of awaiting cannot be cancelled; the runtime
//!   logs an error if one outlives its cancellation by a second.

use std::collections::HashSet;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::backoff::{Attempts, Backoff, RateLimits};
use crate::claims::{self, ForcePolicy, OtherFinalizer};
use crate::client::Clients;
use crate::condition::{self, DELETING, DeletionProgress};
use crate::error;
use crate::events::{EventRecorder, EventType};
use crate::finalizers::{self, ScopedApi, api_of};
use crate::leader::{Leadership, LeaseConfig, Released};
use crate::metrics::Metrics;
use crate::policy::{self, DeletionPolicy};

/// What *apply* asks for next.
#[derive(Debug)]
pub enum Applied {
    /// Converged; look again after the resync period (to repair drift).
    Ready,
    /// Not converged yet (something is being created); look again after this long.
    RequeueAfter(Duration),
    /// Nothing to do until the object changes (for example an invalid spec, already reported).
    AwaitChange,
}

/// What one cleanup step reports.
#[derive(Debug)]
pub enum Cleanup {
    /// The external resource is gone (or was never there): the finalizer may go.
    Done,
    /// The step has started but is not finished; keep the finalizer and look again.
    InProgress {
        waiting_for: String,
        check_after: Duration,
    },
}

/// An operator's logic; the toolkit does the rest.
///
/// Both callbacks must be idempotent: either may run many times for the same state, after a
/// crash, a lost leadership or a conflict. `cleanup` must cope with `apply` never having run,
/// and must treat "already gone" as [`Cleanup::Done`].
pub trait Reconciler: Send + Sync + 'static {
    type Resource: Resource<DynamicType = ()>
        + Clone
        + Debug
        + DeserializeOwned
        + Serialize
        + Send
        + Sync
        + 'static;

    /// The controller's short name: the `controller` label of metrics, the Lease and Event
    /// reporter names.
    fn name(&self) -> &'static str;

    /// This controller's finalizers, in cleanup order: the first is cleaned up (and removed)
    /// first, the next only once it is gone.
    fn finalizers(&self) -> &'static [&'static str];

    /// Whether the live `object` should carry `finalizer` now. By default every finalizer is
    /// wanted. An operator whose cleanup a person can switch off per object (an opt-out
    /// annotation) answers `false` for it: the toolkit then takes that finalizer off the live
    /// object, and puts it back once this answers `true` again. Never consulted for terminating
    /// objects, whose finalizers only their cleanup removes.
    fn wants_finalizer(&self, _object: &Self::Resource, _finalizer: &str) -> bool {
        true
    }

    /// What cleaning up `finalizer` removes, for people ("PostgreSQL database"): the
    /// `cleansUp` of its `FinalizerClaim` ([`crate::claims`]).
    fn cleans_up(&self, _finalizer: &str) -> &'static [&'static str] {
        &[]
    }

    /// How long cleaning up `finalizer` is expected to take at most, if known: the claim's
    /// `maxCleanupSeconds`.
    fn max_cleanup(&self, _finalizer: &str) -> Option<Duration> {
        None
    }

    /// Whether a person may remove `finalizer` in this controller's place: the claim's
    /// `forcePolicy`. By default only while the controller is dead (its Lease expired).
    fn force_policy(&self, _finalizer: &str) -> ForcePolicy {
        ForcePolicy::WhenOwnerDead
    }

    /// Where the claimed objects list the external resources cleaning up `finalizer` removes
    /// (a JSON pointer, `/status/inventory`): the claim's `inventoryPath`, which
    /// `finale explain` and `finale plan` read to name them.
    fn inventory_path(&self, _finalizer: &str) -> Option<&'static str> {
        None
    }

    /// Finalizers this controller puts on objects of other kinds, so that they are claimed
    /// too.
    fn other_finalizers(&self) -> &'static [OtherFinalizer] {
        &[]
    }

    /// The deletion policy the object's spec asks for, if it has such a field.
    fn deletion_policy(&self, _object: &Self::Resource) -> Option<DeletionPolicy> {
        None
    }

    /// Converges the external world on the object's spec, and writes the object's status.
    fn apply(
        &self,
        object: Arc<Self::Resource>,
        context: &Context,
    ) -> impl Future<Output = anyhow::Result<Applied>> + Send;

    /// Removes the external resource `finalizer` stands for.
    fn cleanup(
        &self,
        finalizer: &str,
        object: Arc<Self::Resource>,
        context: &Context,
    ) -> impl Future<Output = anyhow::Result<Cleanup>> + Send;

    /// Adds the watches of related kinds (`owns`, `watches`) whose changes should reconcile
    /// an object.
    fn watches(
        &self,
        controller: Controller<Self::Resource>,
        _client: &Client,
    ) -> Controller<Self::Resource> {
        controller
    }
}

/// What the callbacks get besides the object.
pub struct Context {
    pub client: Client,
    pub metrics: Arc<Metrics>,
    pub rate_limits: Arc<RateLimits>,
    recorder: EventRecorder,
}

impl Context {
    /// Publishes a Kubernetes Event about `object`; failure to publish is logged, not fatal.
    pub async fn event<K: Resource<DynamicType = ()>>(
        &self,
        object: &K,
        kind: EventType,
        reason: &str,
        action: &str,
        note: impl Into<String>,
    ) {
        let mut note: String = note.into();
        // Event messages are limited to 1 kB.
        if note.len() > 1024 {
            let mut end = 1021;
            while !note.is_char_boundary(end) {
                end -= 1;
            }
            note.truncate(end);
            note.push_str("...");
        }
        if let Err(error) = self
            .recorder
            .publish(object, kind, reason, action, &note)
            .await
        {
            tracing::debug!(%error, reason, "could not publish an event");
        }
    }
}

/// How a controller runs.
#[derive(Clone, Debug)]
pub struct Settings {
    pub backoff: Backoff,
    /// Reconciliations in flight at once (each object is only ever reconciled by one).
    pub concurrency: u16,
    /// How often a converged object is looked at again to repair drift.
    pub resync: Duration,
    /// Leader election; `None` runs without it (a single replica).
    pub leader_election: Option<LeaseConfig>,
    /// This replica's name in Events and the Lease.
    pub identity: String,
    /// On shutdown, how long reconciliations in flight may take to finish before they are
    /// cancelled.
    pub graceful_shutdown_timeout: Duration,
}

impl Settings {
    pub fn new(identity: impl Into<String>) -> Settings {
        Settings {
            backoff: Backoff::default(),
            concurrency: 32,
            resync: Duration::from_secs(600),
            leader_election: None,
            identity: identity.into(),
            graceful_shutdown_timeout: Duration::from_secs(10),
        }
    }
}

struct Shared<R: Reconciler> {
    reconciler: R,
    context: Context,
    /// The client for watches (see [`crate::client`]).
    watch_client: Client,
    settings: Settings,
    attempts: Attempts,
    /// The current term's cache, for the terminating-objects gauge and backoff pruning.
    store: std::sync::RwLock<Option<Store<R::Resource>>>,
    in_flight: Arc<InFlight>,
}

impl<R: Reconciler> Shared<R> {
    fn controller(&self) -> Controller<R::Resource> {
        let api: Api<R::Resource> = Api::all(self.watch_client.clone());
        let controller = Controller::new(api, watcher::Config::default()).with_config(
            kube::runtime::controller::Config::default().concurrency(self.settings.concurrency),
        );
        let controller = self.reconciler.watches(controller, &self.watch_client);
        *self.store.write().unwrap_or_else(|e| e.into_inner()) = Some(controller.store());
        controller
    }
}

/// Counts the reconciliations whose futures are alive, so that a cancellation can be confirmed.
#[derive(Default)]
struct InFlight {
    count: AtomicUsize,
}

/// Held by a reconciliation's future; dropping the future drops it.
struct Running(Arc<InFlight>);

impl InFlight {
    fn enter(self: &Arc<Self>) -> Running {
        self.count.fetch_add(1, Ordering::SeqCst);
        Running(Arc::clone(self))
    }

    /// Waits up to `limit` until no reconciliation is alive; returns how many still are.
    async fn wait_idle(&self, limit: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let alive = self.count.load(Ordering::SeqCst);
            if alive == 0 || tokio::time::Instant::now() >= deadline {
                return alive;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.count.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How long cancelled reconciliations may take to be dropped before the runtime reports them.
/// Dropping happens at their next `.await`, at once unless a callback blocks its thread.
const CANCEL_WAIT: Duration = Duration::from_secs(1);

/// How often the backoff state is checked for objects that are gone.
const PRUNE_INTERVAL: Duration = Duration::from_secs(2);

/// Why a term of reconciling ended.
enum TermEnd {
    /// Leadership ended; whatever was in flight was cancelled.
    Lost,
    /// `shutdown` fired; `cancelled` tells whether reconciliations had to be cancelled after
    /// the grace period.
    Shutdown { cancelled: bool },
    /// The controller's stream ended on its own.
    Ended,
}

/// The toolkit's own failures (API calls it makes around the callbacks).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("updating the finalizers of {object}: {source}")]
    Finalizers {
        object: String,
        #[source]
        source: kube::Error,
    },
}

/// Runs `reconciler` until `shutdown` fires: waits for leadership (if configured), reconciles
/// while leading, and stands by again if leadership is lost, cancelling whatever was in flight.
/// On shutdown, in-flight reconciliations get [`Settings::graceful_shutdown_timeout`] to finish
/// before they are cancelled, then the Lease is released.
pub async fn run<R>(
    clients: Clients,
    reconciler: R,
    settings: Settings,
    metrics: Arc<Metrics>,
    rate_limits: Arc<RateLimits>,
    shutdown: CancellationToken,
) -> anyhow::Result<()>
where
    R: Reconciler,
    <R::Resource as Resource>::Scope: ScopedApi,
{
    let name = reconciler.name();
    let recorder = EventRecorder::new(
        clients.requests.clone(),
        controller_name(name),
        settings.identity.clone(),
    );
    let elector = settings
        .leader_election
        .clone()
        .map(|lease| crate::leader::elector(clients.requests.clone(), lease));
    write_claims(
        &clients.requests,
        &reconciler,
        &settings,
        &metrics,
        &shutdown,
    );
    let shared = Arc::new(Shared {
        reconciler,
        context: Context {
            client: clients.requests,
            metrics,
            rate_limits,
            recorder,
        },
        watch_client: clients.watches,
        settings,
        attempts: Attempts::default(),
        store: std::sync::RwLock::new(None),
        in_flight: Arc::default(),
    });
    shared.context.metrics.set_leader(name, false);
    loop {
        let leadership = match &elector {
            Some(elector) => match elector.acquire(&shutdown).await? {
                Some(leadership) => Some(leadership),
                None => return Ok(()),
            },
            None => None,
        };
        // Without election the term only ends with the shutdown.
        let lost = leadership
            .as_ref()
            .map_or_else(CancellationToken::new, Leadership::lost);
        shared.context.metrics.set_leader(name, true);
        tracing::info!(controller = name, "reconciling");
        let end = run_term(&shared, &lost, &shutdown).await;
        shared.context.metrics.set_leader(name, false);
        match end {
            TermEnd::Lost => tracing::warn!(
                controller = name,
                "leadership lost; in-flight reconciliations cancelled, standing by"
            ),
            TermEnd::Shutdown { cancelled: true } => tracing::warn!(
                controller = name,
                "reconciliations still running {:?} after the shutdown began were cancelled",
                shared.settings.graceful_shutdown_timeout
            ),
            TermEnd::Shutdown { cancelled: false } => {}
            TermEnd::Ended => tracing::warn!(
                controller = name,
                "the controller stopped unexpectedly; starting over"
            ),
        }
        if let Some(leadership) = leadership {
            release(name, leadership).await;
        }
        if shutdown.is_cancelled() {
            tracing::info!(controller = name, "stopped");
            return Ok(());
        }
    }
}

/// Starts writing the controller's `FinalizerClaim`s in the background ([`crate::claims`]),
/// tied to its leader Lease; without leader election there is no Lease, so none are written.
fn write_claims<R: Reconciler>(
    client: &Client,
    reconciler: &R,
    settings: &Settings,
    metrics: &Arc<Metrics>,
    shutdown: &CancellationToken,
) {
    let name = reconciler.name();
    let Some(lease) = &settings.leader_election else {
        tracing::info!(
            controller = name,
            "no leader election, so no Lease to prove this controller alive: FinalizerClaims are not written"
        );
        return;
    };
    let specs = claims::specs(
        &controller_name(name),
        lease,
        &R::Resource::group(&()),
        &R::Resource::plural(&()),
        reconciler.finalizers(),
        reconciler.other_finalizers(),
        |finalizer| {
            (
                reconciler
                    .cleans_up(finalizer)
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
                reconciler.max_cleanup(finalizer),
                reconciler.force_policy(finalizer),
                reconciler.inventory_path(finalizer).map(str::to_string),
            )
        },
    );
    tokio::spawn(claims::maintain(
        client.clone(),
        name,
        specs,
        Arc::clone(metrics),
        shutdown.clone(),
    ));
}

/// The operator's name in Events and `FinalizerClaim`s: `finale-<name>-operator`.
pub fn controller_name(name: &str) -> String {
    format!("finale-{name}-operator")
}

/// Gives the Lease up (a no-op when it is no longer ours), logging the outcome.
async fn release(controller: &str, leadership: Leadership) {
    match leadership.release().await {
        Ok(Released::Released) => tracing::info!(controller, "released the leader Lease"),
        Ok(Released::NotHeld) => {}
        Err(error) => {
            tracing::warn!(controller, %error, "could not release the leader Lease; it expires on its own")
        }
    }
}

/// One term of leadership: a fresh kube `Controller` (and cache) that runs until leadership
/// ends, the shutdown completes, or the grace period after the shutdown runs out.
async fn run_term<R>(
    shared: &Arc<Shared<R>>,
    lost: &CancellationToken,
    shutdown: &CancellationToken,
) -> TermEnd
where
    R: Reconciler,
    <R::Resource as Resource>::Scope: ScopedApi,
{
    let name = shared.reconciler.name();
    let graceful = {
        let shutdown = shutdown.clone();
        async move { shutdown.cancelled_owned().await }
    };
    // Boxed so it can be dropped below: dropping kube's stream aborts every reconciliation it
    // has in flight (they run as tasks whose handles abort on drop).
    let mut stream = Box::pin(
        shared
            .controller()
            .graceful_shutdown_on(graceful)
            .run(reconcile::<R>, error_policy::<R>, Arc::clone(shared))
            .for_each(|result| async move {
                if let Err(error) = result {
                    tracing::debug!(controller = name, %error, "controller stream");
                }
            }),
    );
    let grace = shared.settings.graceful_shutdown_timeout;
    let grace_over = async {
        shutdown.cancelled().await;
        tokio::time::sleep(grace).await;
    };
    tokio::pin!(grace_over);
    let mut prune = tokio::time::interval(PRUNE_INTERVAL);
    prune.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let end = loop {
        tokio::select! {
            biased;
            _ = lost.cancelled() => break TermEnd::Lost,
            _ = &mut stream => {
                break if shutdown.is_cancelled() {
                    TermEnd::Shutdown { cancelled: false }
                } else {
                    TermEnd::Ended
                };
            }
            _ = &mut grace_over => break TermEnd::Shutdown { cancelled: true },
            _ = prune.tick() => prune_backoff(shared),
        }
    };
    drop(stream);
    let alive = shared.in_flight.wait_idle(CANCEL_WAIT).await;
    if alive > 0 {
        tracing::error!(
            controller = name,
            alive,
            "reconciliations did not stop within {CANCEL_WAIT:?} of being cancelled: a callback blocks its thread instead of awaiting, and may still act"
        );
    }
    end
}

/// Forgets the backoff state of objects that are gone from the cache, and updates the gauge.
fn prune_backoff<R: Reconciler>(shared: &Shared<R>) {
    let name = shared.reconciler.name();
    if !shared.attempts.is_empty() {
        let store = shared
            .store
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        // Only a complete cache can tell that an object is gone.
        if let Some(store) = store
            && matches!(store.wait_until_ready().now_or_never(), Some(Ok(())))
        {
            let live: HashSet<String> = store.state().iter().map(|o| object_key(&**o)).collect();
            let pruned = shared.attempts.prune(|key| live.contains(key));
            if pruned > 0 {
                tracing::debug!(
                    controller = name,
                    pruned,
                    "forgot the backoff of objects that are gone"
                );
            }
        }
    }
    shared
        .context
        .metrics
        .set_backoff_objects(name, shared.attempts.len());
}

/// The key attempts are counted under: the uid, so a re-created object starts afresh.
fn object_key<K: Resource>(object: &K) -> String {
    object
        .meta()
        .uid
        .clone()
        .unwrap_or_else(|| object.meta().name.clone().unwrap_or_default())
}

/// What decides whether a failed object may be retried before its backoff ends: the state a
/// person or another controller changes, not the status the toolkit writes itself.
fn fingerprint<K: Resource>(object: &K) -> u64 {
    use std::hash::{Hash, Hasher};
    let meta = object.meta();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    meta.generation.hash(&mut hasher);
    meta.deletion_timestamp.is_some().hash(&mut hasher);
    meta.finalizers.hash(&mut hasher);
    meta.annotations.hash(&mut hasher);
    meta.labels.hash(&mut hasher);
    hasher.finish()
}

fn describe<K: Resource<DynamicType = ()>>(object: &K) -> String {
    let kind = K::kind(&());
    match object.meta().namespace.as_deref() {
        Some(namespace) => format!(
            "{kind} {namespace}/{}",
            object.meta().name.as_deref().unwrap_or_default()
        ),
        None => format!(
            "{kind} {}",
            object.meta().name.as_deref().unwrap_or_default()
        ),
    }
}

/// A pass through the loop: what to do next, and whether it counts as an error.
struct Pass {
    action: Action,
    failed: bool,
}

impl Pass {
    fn ok(action: Action) -> Pass {
        Pass {
            action,
            failed: false,
        }
    }
}

async fn reconcile<R>(object: Arc<R::Resource>, shared: Arc<Shared<R>>) -> Result<Action, Error>
where
    R: Reconciler,
    <R::Resource as Resource>::Scope: ScopedApi,
{
    let _running = shared.in_flight.enter();
    // Woken early by a change that does not matter (our own status write): keep the backoff.
    if let Some(left) = shared
        .attempts
        .held(&object_key(&*object), fingerprint(&*object))
    {
        return Ok(Action::requeue(left));
    }
    let started = Instant::now();
    let name = shared.reconciler.name();
    let result = if object.meta().deletion_timestamp.is_some() {
        finalize(&object, &shared).await
    } else {
        converge(object, &shared).await
    };
    let failed = result.as_ref().map_or(true, |pass| pass.failed);
    shared
        .context
        .metrics
        .reconciled(name, started.elapsed(), failed);
    update_terminating_gauge(&shared);
    shared
        .context
        .metrics
        .set_backoff_objects(name, shared.attempts.len());
    result.map(|pass| pass.action)
}

fn error_policy<R>(object: Arc<R::Resource>, error: &Error, shared: Arc<Shared<R>>) -> Action
where
    R: Reconciler,
{
    let (attempt, delay) = shared.attempts.failed(
        &object_key(&*object),
        fingerprint(&*object),
        &shared.settings.backoff,
        false,
    );
    tracing::warn!(
        controller = shared.reconciler.name(),
        object = %describe(&*object),
        %error,
        attempt,
        retry_in = ?delay,
        "reconcile failed"
    );
    shared
        .context
        .metrics
        .set_backoff_objects(shared.reconciler.name(), shared.attempts.len());
    Action::requeue(delay)
}

fn update_terminating_gauge<R: Reconciler>(shared: &Shared<R>) {
    let ours = shared.reconciler.finalizers();
    let count = shared
        .store
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map_or(0, |store| {
            store
                .state()
                .iter()
                .filter(|o| {
                    o.meta().deletion_timestamp.is_some()
                        && o.finalizers().iter().any(|f| ours.contains(&f.as_str()))
                })
                .count()
        });
    shared
        .context
        .metrics
        .set_terminating(shared.reconciler.name(), count);
}

/// A live object: make sure it carries every finalizer it should ([`Reconciler::wants_finalizer`]),
/// then let the operator converge.
async fn converge<R>(object: Arc<R::Resource>, shared: &Shared<R>) -> Result<Pass, Error>
where
    R: Reconciler,
    <R::Resource as Resource>::Scope: ScopedApi,
{
    let context = &shared.context;
    let key = object_key(&*object);
    let current = object.meta().finalizers.as_deref();
    let (wanted, unwanted): (Vec<&str>, Vec<&str>) = shared
        .reconciler
        .finalizers()
        .iter()
        .partition(|finalizer| shared.reconciler.wants_finalizer(&object, finalizer));
    let object = match finalizers::sync_patch(current, &wanted, &unwanted) {
        Some(patch) => {
            let api = api_of(context.client.clone(), &*object);
            match finalizers::send(&api, &*object, patch).await {
                Ok(updated) => Arc::new(updated),
                // Changed under us, or deleted meanwhile: the watch brings the new state.
                Err(error) if finalizers::is_conflict(&error) || is_not_found(&error) => {
                    return Ok(Pass::ok(Action::requeue(Duration::from_millis(200))));
                }
                Err(source) => {
                    return Err(Error::Finalizers {
                        object: describe(&*object),
                        source,
                    });
                }
            }
        }
        None => object,
    };
    match shared.reconciler.apply(Arc::clone(&object), context).await {
        Ok(applied) => {
            shared.attempts.succeeded(&key);
            Ok(Pass::ok(match applied {
                Applied::Ready => Action::requeue(shared.settings.resync),
                Applied::RequeueAfter(after) => Action::requeue(after),
                Applied::AwaitChange => Action::await_change(),
            }))
        }
        Err(error) => {
            let permanent = error::is_permanent(&error);
            let (attempt, delay) = shared.attempts.failed(
                &key,
                fingerprint(&*object),
                &shared.settings.backoff,
                permanent,
            );
            tracing::warn!(
                controller = shared.reconciler.name(),
                object = %describe(&*object),
                error = format!("{error:#}"),
                permanent,
                attempt,
                retry_in = ?delay,
                "apply failed"
            );
            let reason = if permanent {
                PERMANENT_ERROR
            } else {
                "ReconcileFailed"
            };
            context
                .event(
                    &*object,
                    EventType::Warning,
                    reason,
                    "Reconcile",
                    describe_error(&error),
                )
                .await;
            Ok(Pass {
                action: Action::requeue(delay),
                failed: true,
            })
        }
    }
}

fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// A terminating object: run the first remaining cleanup step (or orphan), and remove its
/// finalizer only once the step reports done.
async fn finalize<R>(object: &Arc<R::Resource>, shared: &Shared<R>) -> Result<Pass, Error>
where
    R: Reconciler,
    <R::Resource as Resource>::Scope: ScopedApi,
{
    let context = &shared.context;
    let declared = shared.reconciler.finalizers();
    let present = object.finalizers();
    let remaining: Vec<&str> = declared
        .iter()
        .copied()
        .filter(|f| present.iter().any(|p| p == f))
        .collect();
    let key = object_key(&**object);
    let Some(&step) = remaining.first() else {
        shared.attempts.succeeded(&key);
        return Ok(Pass::ok(Action::await_change()));
    };
    let api = api_of(context.client.clone(), &**object);
    let policy = match policy::effective(
        object.annotations(),
        shared.reconciler.deletion_policy(object),
    ) {
        Ok(policy) => policy,
        Err(message) => {
            let progress = DeletionProgress {
                step: step.to_string(),
                attempts: 0,
                last_error: Some(message.clone()),
                next_retry: None,
            };
            write_deleting(
                &api,
                &**object,
                "InvalidDeletionPolicy",
                &message,
                Some(progress),
            )
            .await;
            context
                .event(
                    &**object,
                    EventType::Warning,
                    "InvalidDeletionPolicy",
                    "Delete",
                    message,
                )
                .await;
            return Ok(Pass::ok(Action::await_change()));
        }
    };
    if policy == DeletionPolicy::Orphan {
        let Some(patch) = finalizers::remove_all_patch(present, declared) else {
            return Ok(Pass::ok(Action::await_change()));
        };
        return match finalizers::send(&api, &**object, patch).await {
            Ok(_) => {
                shared.attempts.succeeded(&key);
                context
                    .event(
                        &**object,
                        EventType::Normal,
                        "Orphaned",
                        "Delete",
                        format!(
                            "deletion policy Orphan: external resources left in place ({})",
                            remaining.join(", ")
                        ),
                    )
                    .await;
                Ok(Pass::ok(Action::await_change()))
            }
            Err(error) if finalizers::is_conflict(&error) || is_not_found(&error) => {
                Ok(Pass::ok(Action::requeue(Duration::from_millis(200))))
            }
            Err(source) => Err(Error::Finalizers {
                object: describe(&**object),
                source,
            }),
        };
    }
    let position = declared.iter().position(|f| *f == step).unwrap_or(0) + 1;
    let step_label = format!("step {position}/{} {step}", declared.len());
    let started = Instant::now();
    let outcome = shared
        .reconciler
        .cleanup(step, Arc::clone(object), context)
        .await;
    let name = shared.reconciler.name();
    context
        .metrics
        .cleanup_ran(name, step, started.elapsed(), outcome.is_err());
    match outcome {
        Ok(Cleanup::Done) => {
            shared.attempts.succeeded(&key);
            let Some(patch) = finalizers::remove_patch(present, step) else {
                return Ok(Pass::ok(Action::await_change()));
            };
            match finalizers::send(&api, &**object, patch).await {
                Ok(_) => {}
                Err(error) if finalizers::is_conflict(&error) => {
                    return Ok(Pass::ok(Action::requeue(Duration::from_millis(200))));
                }
                Err(error) if is_not_found(&error) => {
                    return Ok(Pass::ok(Action::await_change()));
                }
                Err(source) => {
                    return Err(Error::Finalizers {
                        object: describe(&**object),
                        source,
                    });
                }
            }
            tracing::info!(controller = name, object = %describe(&**object), step, "cleanup step done");
            let (reason, note) = if remaining.len() == 1 {
                (
                    "CleanupComplete",
                    "every cleanup step is done; the finalizers are removed".to_string(),
                )
            } else {
                ("CleanupStepDone", format!("{step_label} done"))
            };
            context
                .event(&**object, EventType::Normal, reason, "Delete", note)
                .await;
            // Removing the finalizer changes the object: the watch brings the next step.
            Ok(Pass::ok(Action::await_change()))
        }
        Ok(Cleanup::InProgress {
            waiting_for,
            check_after,
        }) => {
            shared.attempts.succeeded(&key);
            let next = retry_time(check_after);
            let message =
                format!("{step_label} in progress: {waiting_for}; checking again at {next}");
            let progress = DeletionProgress {
                step: step.to_string(),
                attempts: 0,
                last_error: None,
                next_retry: Some(next),
            };
            write_deleting(
                &api,
                &**object,
                "CleanupInProgress",
                &message,
                Some(progress),
            )
            .await;
            Ok(Pass::ok(Action::requeue(check_after)))
        }
        Err(error) => {
            let permanent = error::is_permanent(&error);
            let (attempt, delay) = shared.attempts.failed(
                &key,
                fingerprint(&**object),
                &shared.settings.backoff,
                permanent,
            );
            let next = retry_time(delay);
            let error_text = format!("{error:#}");
            let (reason, message) = if permanent {
                (
                    PERMANENT_ERROR,
                    format!(
                        "{step_label} failed with a permanent error (attempt {attempt}): {}; retrying only slowly, next at {next}",
                        describe_error(&error)
                    ),
                )
            } else {
                (
                    "CleanupFailed",
                    format!(
                        "{step_label} failed (attempt {attempt}): {error_text}; next retry at {next}"
                    ),
                )
            };
            tracing::warn!(
                controller = name,
                object = %describe(&**object),
                step,
                attempt,
                permanent,
                error = %error_text,
                retry_in = ?delay,
                "cleanup failed"
            );
            let progress = DeletionProgress {
                step: step.to_string(),
                attempts: attempt,
                last_error: Some(error_text.clone()),
                next_retry: Some(next),
            };
            write_deleting(&api, &**object, reason, &message, Some(progress)).await;
            context
                .event(
                    &**object,
                    EventType::Warning,
                    reason,
                    "Delete",
                    format!("{step}: {}", describe_error(&error)),
                )
                .await;
            Ok(Pass {
                action: Action::requeue(delay),
                failed: true,
            })
        }
    }
}

/// The reason of the `Deleting` condition and of the Warning Event when a callback failed with
/// an error marked permanent ([`crate::error::permanent`]).
pub const PERMANENT_ERROR: &str = "PermanentError";

/// The error's chain, followed by what to fix when a permanent error says so.
pub fn describe_error(error: &anyhow::Error) -> String {
    match error::remedy(error) {
        Some(remedy) => format!("{error:#} (to fix: {remedy})"),
        None => format!("{error:#}"),
    }
}

fn retry_time(after: Duration) -> String {
    let after = SignedDuration::try_from(after).unwrap_or(SignedDuration::MAX);
    Timestamp::now()
        .checked_add(after)
        .unwrap_or(Timestamp::MAX)
        .round(k8s_openapi::jiff::Unit::Second)
        .unwrap_or_else(|_| Timestamp::now())
        .to_string()
}

/// Sets the `Deleting` condition and `status.deletion`. Best effort: the cleanup itself matters
/// more than reporting it, so a failed status write is only logged.
async fn write_deleting<K>(
    api: &Api<K>,
    object: &K,
    reason: &str,
    message: &str,
    progress: Option<DeletionProgress>,
) where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Serialize,
{
    let mut conditions: Vec<Condition> = condition::of(object);
    let generation = object.meta().generation;
    condition::upsert(
        &mut conditions,
        condition::new(DELETING, true, reason, message, generation),
    );
    let patch = json!({"status": {"conditions": conditions, "deletion": progress}});
    if let Err(error) = api
        .patch_status(
            &object.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        tracing::debug!(object = %describe(object), %error, "could not write the Deleting condition");
    }
}
