//! The garbage collector: objects whose owners are gone go too (deletion-semantics §9).
//!
//! How it works, in one picture:
//!
//! ```text
//!  store changes ──▶ graph (uid → owners, dependents, flags) ──▶ attempt-to-delete queue ──▶ workers
//!   (every kind,      virtual nodes for owners not seen yet        orphan queue                │
//!    CRDs included)   absent-owner cache                                                        ▼
//!                                                              registry: GET, DELETE with uid
//!                                                              preconditions, finalizer removal
//! ```
//!
//! - The graph ([`graph`]) is built from one in-process list of every deletable resource and
//!   then kept current from the registry's change stream, which carries every committed write
//!   of every kind — a CRD created later is covered without any restart or re-discovery (GC1).
//!   A collector that falls behind the stream builds a new graph from a fresh list and swaps
//!   it in, as at start-up; owners deleted meanwhile are then verified absent and their
//!   dependents collected.
//! - Graph events queue work exactly where upstream does (GC3): a deleted owner queues its
//!   dependents; an owner referenced but never seen becomes a *virtual* node that is queued to
//!   be verified; an owner turning terminating with `foregroundDeletion` queues itself and its
//!   dependents, with `orphan` it goes to the orphan queue. The initial list counts as adds,
//!   so work left half-done by a crash or restart is found again.
//! - Workers decide per item as `attemptToDeleteItem` does (GC4–GC10): classify each owner
//!   reference as dangling, waiting (owner in foreground deletion) or solid, then strip stale
//!   references, delete in foreground, or delete with the item's own policy. Every read and
//!   write goes through the [`Registry`], so finalizers, graceful pods and preconditions apply
//!   as for any client — but without HTTP or client rate limits, which is what makes the
//!   cascade fast.
//!
//! Unlike upstream, the graph is never stale with respect to storage by more than the change
//! stream's latency, and workers read the store directly, so there is no informer warm-up:
//! cascading starts as soon as the initial list (milliseconds for thousands of objects) is in.

mod graph;
mod view;

pub use graph::UidMap;

pub use view::{
    AtRevision, Dependent, DependentGroup, GcView, GcWork, ObservedDependent, ObservedGroup,
};

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use compact_str::CompactString;
use futures::StreamExt;
use prometheus_client::metrics::gauge::Gauge;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use crate::deletion::{FOREGROUND_FINALIZER, ORPHAN_FINALIZER};
use crate::object;
use crate::object::OwnerReference;
use crate::registry::{
    DeleteOptions, ListOptions, Preconditions, Registry, Subresource, WriteOptions,
};
use crate::resources::ResourceType;
use crate::status::ApiResult;
use crate::watch_cache::CachedEvent;
use graph::{Graph, Identity, Item, has_finalizer, owner_refs};
use view::Failure;

/// How many items are worked on at once. Deletes are durable writes; running many lets
/// group commit share fsyncs among them.
const WORKERS: usize = 32;
/// Longest wait before an item that keeps failing is tried again.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Prometheus gauges the collector keeps current.
#[derive(Clone, Debug, Default)]
pub struct GcMetrics {
    /// Nodes in the ownership graph (virtual ones included).
    pub graph_nodes: Gauge,
    /// Items waiting in the attempt-to-delete and orphan queues.
    pub queue_depth: Gauge,
    /// Objects the collector deleted.
    pub deleted: prometheus_client::metrics::counter::Counter,
    /// Times the collector fell behind the change stream and rebuilt its graph from a list.
    pub graph_rebuilds: prometheus_client::metrics::counter::Counter,
}

struct Collector {
    registry: Arc<Registry>,
    /// The graph and work state are shared with the read-only [`GcView`].
    graph: Arc<Mutex<Graph>>,
    queued: Arc<Mutex<HashSet<Item>>>,
    /// Items workers are processing right now, with how many workers are on each (an item
    /// queued again while in flight may be picked up by a second worker).
    in_flight: Arc<Mutex<HashMap<Item, usize>>>,
    queue: mpsc::UnboundedSender<Item>,
    failures: Arc<Mutex<HashMap<Item, Failure>>>,
    view: GcView,
    metrics: GcMetrics,
    /// Ends the workers and any pending retry, which hold the registry (and so the store).
    shutdown: CancellationToken,
}

/// Starts the collector; `view` then shows what it knows (see [`GcView`]).
pub fn spawn(
    registry: Arc<Registry>,
    metrics: GcMetrics,
    view: GcView,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move { run(registry, metrics, view, shutdown).await })
}

async fn run(
    registry: Arc<Registry>,
    metrics: GcMetrics,
    view: GcView,
    shutdown: CancellationToken,
) {
    let (queue, work) = mpsc::unbounded_channel();
    let collector = Arc::new(Collector {
        registry,
        graph: Arc::clone(&view.graph),
        queued: Arc::clone(&view.queued),
        in_flight: Arc::clone(&view.in_flight),
        queue,
        failures: Arc::clone(&view.failures),
        view: view.clone(),
        metrics,
        shutdown: shutdown.clone(),
    });
    let work = Arc::new(tokio::sync::Mutex::new(work));
    let mut workers = Vec::with_capacity(WORKERS);
    for _ in 0..WORKERS {
        let collector = Arc::clone(&collector);
        let work = Arc::clone(&work);
        let shutdown = shutdown.clone();
        workers.push(tokio::spawn(async move {
            loop {
                let item = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    item = async { work.lock().await.recv().await } => item,
                };
                let Some(item) = item else { return };
                collector.process(item).await;
            }
        }));
    }
    follow_changes(&collector, &shutdown).await;
    collector.view.set_running(false);
    // Nothing may hold the registry once the server says it has stopped.
    drop(collector);
    for worker in workers {
        let _ = worker.await;
    }
    view.clear_work();
}

/// Builds the graph, then keeps it current until shutdown. A collector that falls behind the
/// change stream has lost events it cannot get back, so it builds a new graph from a fresh
/// list and replaces the old one, exactly as at start-up.
async fn follow_changes(collector: &Arc<Collector>, shutdown: &CancellationToken) {
    loop {
        // Subscribe before listing: nothing committed after the list can be missed, and
        // events the list already reflects are recognised by their resourceVersion.
        let mut changes = collector.registry.subscribe_changes();
        if let Err(error) = collector.rebuild_graph().await {
            tracing::warn!(%error, "garbage collector cannot list objects; retrying");
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
            }
        }
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                change = changes.recv() => match change {
                    Ok(event) => collector.observe(&event),
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::warn!(missed, "garbage collector fell behind the change stream; rebuilding its graph from a fresh list");
                        collector.metrics.graph_rebuilds.inc();
                        break;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
            }
        }
    }
}

/// The kinds the collector tracks: every served resource but events (GC1), one type per
/// storage prefix.
fn tracked_types(registry: &Registry) -> Vec<Arc<ResourceType>> {
    tracked_types_of(registry.catalog())
}

/// Every served type the collector tracks, one per storage prefix (core Events aside).
pub(crate) fn tracked_types_of(catalog: &crate::resources::Catalog) -> Vec<Arc<ResourceType>> {
    let mut seen = HashSet::new();
    catalog
        .all()
        .into_iter()
        .filter(|t| t.plural != "events")
        .filter(|t| seen.insert(t.key_prefix()))
        .collect()
}

/// `/registry/<group>/<plural>/…` → the served type storing it, if the collector tracks it.
fn type_of_key(registry: &Registry, key: &str) -> Option<Arc<ResourceType>> {
    let mut parts = key.strip_prefix("/registry/")?.splitn(3, '/');
    let group = parts.next()?;
    let plural = parts.next()?;
    let group = if group == "core" { "" } else { group };
    if plural == "events" {
        return None;
    }
    registry.catalog().lookup_resource(group, plural)
}

fn identity_of(resource: &ResourceType, object: &Value) -> Identity {
    Identity {
        api_version: object
            .get("apiVersion")
            .and_then(Value::as_str)
            .map(CompactString::from)
            .unwrap_or_else(|| resource.api_version().into()),
        kind: resource.kind.as_str().into(),
        namespace: object::meta_str(object, "namespace").map(CompactString::from),
        name: object::name(object).into(),
    }
}

/// How one owner reference stands (GC8).
#[derive(Debug, PartialEq, Eq)]
enum Reference {
    Solid,
    Dangling,
    Waiting,
}

impl Collector {
    fn enqueue(&self, item: Item) {
        let fresh = self
            .queued
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(item.clone());
        if fresh {
            self.metrics.queue_depth.inc();
            let _ = self.queue.send(item);
        }
    }

    fn enqueue_after(self: &Arc<Self>, item: Item, delay: Duration) {
        let collector = Arc::clone(self);
        tokio::spawn(async move {
            tokio::select! {
                _ = collector.shutdown.cancelled() => {}
                _ = tokio::time::sleep(delay) => collector.enqueue(item),
            }
        });
    }

    fn lock_graph(&self) -> std::sync::MutexGuard<'_, Graph> {
        self.graph.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Builds a graph from a fresh list of every tracked kind, each object applied as an add,
    /// and puts it in place of the current one; then queues the work the list implies.
    ///
    /// Built aside and swapped in whole, so workers never decide on a half-built graph (a
    /// foreground owner whose blocking dependents are not listed yet would look free to go).
    /// Nothing of the old graph is kept: an owner deleted while the collector was not
    /// looking is simply not listed, so it comes back as a virtual node, is verified absent,
    /// and its dependents are queued (GC3) — what upstream does for a vanished owner.
    async fn rebuild_graph(&self) -> ApiResult<()> {
        let mut lists = Vec::new();
        for resource in tracked_types(&self.registry) {
            let list = self
                .registry
                .list(&resource, None, &ListOptions::default())
                .await?;
            lists.push((resource, list));
        }
        let listed_at = lists
            .iter()
            .filter_map(|(_, list)| {
                object::meta_str(list, "resourceVersion").and_then(|rv| rv.parse::<i64>().ok())
            })
            .max()
            .unwrap_or(0);
        let mut graph = Graph::rebuilt_from(listed_at);
        let mut queue = Vec::new();
        for (resource, list) in lists {
            for item in list
                .get("items")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let mut object = item.clone();
                if let Some(map) = object.as_object_mut() {
                    map.entry("apiVersion")
                        .or_insert_with(|| json!(resource.api_version()));
                }
                queue.extend(graph.put(identity_of(&resource, &object), &object));
            }
        }
        let nodes = graph.nodes.len();
        *self.lock_graph() = graph;
        self.metrics.graph_nodes.set(nodes as i64);
        self.view.set_running(true);
        tracing::info!(nodes, "garbage collector graph built");
        for item in queue {
            self.enqueue(item);
        }
        Ok(())
    }

    /// GC2/GC3 for one change of the stream. The change and the revision it brings the graph
    /// to are applied under one lock, so deletion insight never sees one without the other.
    fn observe(&self, event: &CachedEvent) {
        let resource = type_of_key(&self.registry, &event.key);
        let queue = {
            let mut graph = self.lock_graph();
            let queue = match (resource, &event.object, &event.previous) {
                (Some(resource), Some(object), _) => {
                    graph.put(identity_of(&resource, object), object)
                }
                (Some(_), None, Some(previous)) => graph.remove(object::uid(previous)),
                _ => Vec::new(),
            };
            graph.applied(event.revision);
            self.metrics.graph_nodes.set(graph.nodes.len() as i64);
            queue
        };
        for item in queue {
            self.enqueue(item);
        }
    }

    /// A change the collector found by reading the store ahead of the change stream: an
    /// object it was about to act on is gone (`latest` None: GC3 for its removal), or an
    /// owner it knew only by reference exists (`latest`: its node made real).
    ///
    /// The graph is then ahead of the stream, so it is not at any one revision until the
    /// stream reaches the store's revision after the read; deletion insight does not answer
    /// from it meanwhile. Forgetting an owner known only by reference changes no observed
    /// object, so that alone leaves the graph where it is.
    async fn apply_read(
        &self,
        resource: &ResourceType,
        uid: &str,
        virtual_node: bool,
        latest: Option<&Value>,
    ) {
        let ahead = !(virtual_node && latest.is_none());
        let read_by = if ahead {
            // Unknown: then not at one revision until the next rebuild.
            self.registry
                .store()
                .current_revision()
                .await
                .unwrap_or(i64::MAX)
        } else {
            0
        };
        let queue = {
            let mut graph = self.lock_graph();
            let queue = match latest {
                Some(object) => graph.put(identity_of(resource, object), object),
                None => graph.remove(uid),
            };
            if ahead {
                graph.changed_ahead_of_stream(read_by);
            }
            self.metrics.graph_nodes.set(graph.nodes.len() as i64);
            queue
        };
        for item in queue {
            self.enqueue(item);
        }
    }

    async fn process(self: &Arc<Self>, item: Item) {
        // In flight before it leaves the queue, so the view never sees it in neither.
        *self
            .in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(item.clone())
            .or_default() += 1;
        self.queued
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&item);
        self.metrics.queue_depth.dec();
        let result = match &item {
            Item::AttemptToDelete(uid) => self.attempt_to_delete(uid).await,
            Item::Orphan(uid) => self.orphan_dependents(uid).await,
        };
        match result {
            Ok(()) => {
                self.failures
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&item);
            }
            Err(why) => {
                let attempts = {
                    let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
                    let failure = failures.entry(item.clone()).or_default();
                    failure.attempts += 1;
                    failure.last_error = why.clone();
                    failure.attempts
                };
                let delay = Duration::from_millis(100u64.saturating_mul(1 << attempts.min(9)))
                    .min(MAX_BACKOFF);
                tracing::debug!(?item, %why, ?delay, "garbage collection will retry");
                self.enqueue_after(item.clone(), delay);
            }
        }
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(workers) = in_flight.get_mut(&item) {
            *workers -= 1;
            if *workers == 0 {
                in_flight.remove(&item);
            }
        }
    }

    /// The served type of an identity, by apiVersion and kind.
    fn type_for(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceType>> {
        self.registry.catalog().lookup_kind(api_version, kind)
    }

    /// Reads the object an identity names; None when it is not there.
    async fn read(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Value>, String> {
        let namespace = if resource.namespaced { namespace } else { None };
        match self.registry.get(resource, namespace, name).await {
            Ok(object) => Ok(Some(object)),
            Err(e) if e.code == 404 => Ok(None),
            Err(e) => Err(e.message),
        }
    }

    /// GC4–GC10.
    async fn attempt_to_delete(self: &Arc<Self>, uid: &str) -> Result<(), String> {
        let (identity, virtual_node) = {
            let graph = self.lock_graph();
            let Some(node) = graph.nodes.get(uid) else {
                return Ok(());
            };
            // GC4: terminating without waiting on dependents: its removal will come.
            if node.being_deleted && !node.deleting_dependents {
                return Ok(());
            }
            (node.identity.clone(), node.virtual_node)
        };
        let Some(resource) = self.type_for(&identity.api_version, &identity.kind) else {
            if virtual_node {
                // An owner of a kind nobody serves may still appear (a CRD on its way):
                // its dependents are never collected while it cannot be checked (GC8).
                return Err(format!(
                    "no served resource for {}, Kind={}",
                    identity.api_version, identity.kind
                ));
            }
            return Ok(());
        };
        if virtual_node && resource.namespaced && identity.namespace.is_none() {
            // GC20: referenced by a cluster-scoped object, a namespaced owner has no
            // namespace to be looked up in; it stays unverified and its dependents stay.
            return Ok(());
        }
        // GC5: gone, or replaced by another object of the same name.
        let latest = self
            .read(&resource, identity.namespace.as_deref(), &identity.name)
            .await?;
        let Some(latest) = latest.filter(|o| object::uid(o) == uid) else {
            self.apply_read(&resource, uid, virtual_node, None).await;
            return Ok(());
        };
        if virtual_node {
            // Verified to exist: the real object's events take it from here.
            self.apply_read(&resource, uid, virtual_node, Some(&latest))
                .await;
            return Ok(());
        }
        // GC6
        if object::is_terminating(&latest) && has_finalizer(&latest, FOREGROUND_FINALIZER) {
            return self
                .process_deleting_dependents(&resource, uid, &latest)
                .await;
        }
        // GC7
        let owners = owner_refs(&latest);
        if owners.is_empty() {
            return Ok(());
        }
        let mut solid = Vec::new();
        let mut dangling = Vec::new();
        let mut waiting = Vec::new();
        for owner in &owners {
            match self.classify(&resource, &latest, owner).await? {
                Reference::Solid => solid.push(owner),
                Reference::Dangling => dangling.push(owner),
                Reference::Waiting => waiting.push(owner),
            }
        }
        // GC9
        if !solid.is_empty() {
            if dangling.is_empty() && waiting.is_empty() {
                return Ok(());
            }
            let stale: HashSet<String> = dangling
                .iter()
                .chain(waiting.iter())
                .map(|o| o.uid.clone())
                .collect();
            return self
                .rewrite_owner_refs(&resource, &latest, |refs| {
                    refs.retain(|r| {
                        r.get("uid")
                            .and_then(Value::as_str)
                            .is_none_or(|u| !stale.contains(u))
                    })
                })
                .await;
        }
        let has_dependents = self
            .lock_graph()
            .nodes
            .get(uid)
            .is_some_and(|n| !n.dependents.is_empty());
        let policy = if !waiting.is_empty() && has_dependents {
            // The cycle guard: a dependent already waiting on us must not wait on our
            // references in turn.
            let dependent_waiting = {
                let graph = self.lock_graph();
                graph.nodes.get(uid).is_some_and(|n| {
                    n.dependents
                        .iter()
                        .any(|d| graph.nodes.get(d).is_some_and(|dn| dn.deleting_dependents))
                })
            };
            if dependent_waiting {
                let waiting_uids: HashSet<String> = waiting.iter().map(|o| o.uid.clone()).collect();
                self.rewrite_owner_refs(&resource, &latest, |refs| {
                    for r in refs.iter_mut() {
                        if r.get("uid")
                            .and_then(Value::as_str)
                            .is_some_and(|u| waiting_uids.contains(u))
                        {
                            r["blockOwnerDeletion"] = json!(false);
                        }
                    }
                })
                .await?;
            }
            "Foreground"
        } else if has_finalizer(&latest, ORPHAN_FINALIZER) {
            "Orphan"
        } else if has_finalizer(&latest, FOREGROUND_FINALIZER) {
            "Foreground"
        } else {
            "Background"
        };
        self.delete(&resource, &latest, policy).await
    }

    /// GC8 for one reference of `dependent`.
    async fn classify(
        &self,
        dependent_type: &ResourceType,
        dependent: &Value,
        owner: &OwnerReference,
    ) -> Result<Reference, String> {
        let Some(owner_type) = self.type_for(&owner.api_version, &owner.kind) else {
            return Err(format!(
                "cannot look up owner {}/{}: no served resource for {}, Kind={}",
                owner.kind, owner.name, owner.api_version, owner.kind
            ));
        };
        if owner_type.namespaced && !dependent_type.namespaced {
            // GC20: a cluster-scoped object cannot have a namespaced owner; never collected.
            return Ok(Reference::Solid);
        }
        let namespace = object::meta_str(dependent, "namespace").filter(|_| owner_type.namespaced);
        let absent_key = (owner.uid.clone(), namespace.map(CompactString::from));
        if self.lock_graph().is_absent(&absent_key) {
            return Ok(Reference::Dangling);
        }
        let found = self.read(&owner_type, namespace, &owner.name).await?;
        match found {
            Some(owner_object) if object::uid(&owner_object) == owner.uid => {
                if object::is_terminating(&owner_object)
                    && has_finalizer(&owner_object, FOREGROUND_FINALIZER)
                {
                    Ok(Reference::Waiting)
                } else {
                    Ok(Reference::Solid)
                }
            }
            _ => {
                self.lock_graph().mark_absent(absent_key);
                if owner_type.namespaced {
                    self.report_invalid_namespace(dependent_type, dependent, owner)
                        .await;
                }
                Ok(Reference::Dangling)
            }
        }
    }

    /// GC19: the owner's uid is known in another namespace: say why the dependent goes.
    async fn report_invalid_namespace(
        &self,
        dependent_type: &ResourceType,
        dependent: &Value,
        owner: &OwnerReference,
    ) {
        let namespace = object::meta_str(dependent, "namespace").unwrap_or_default();
        let elsewhere =
            self.lock_graph().nodes.get(&owner.uid).is_some_and(|n| {
                !n.virtual_node && n.identity.namespace.as_deref() != Some(namespace)
            });
        if !elsewhere {
            return;
        }
        let message = format!(
            "ownerRef [{}/{}, namespace: {namespace}, name: {}, uid: {}] does not exist in namespace \"{namespace}\"",
            owner.api_version, owner.kind, owner.name, owner.uid
        );
        crate::controllers::events::record(
            &self.registry,
            dependent_type,
            dependent,
            "Warning",
            "OwnerRefInvalidNamespace",
            &message,
            "garbage-collector-controller",
        )
        .await;
    }

    /// GC10: a delete preconditioned on the uid (and resourceVersion) the decision saw.
    async fn delete(
        &self,
        resource: &ResourceType,
        object: &Value,
        policy: &str,
    ) -> Result<(), String> {
        let options = DeleteOptions {
            propagation_policy: Some(policy.to_string()),
            preconditions: Preconditions {
                uid: Some(object::uid(object).to_string()),
                resource_version: object::meta_str(object, "resourceVersion").map(str::to_string),
            },
            ..DeleteOptions::default()
        };
        let namespace = object::meta_str(object, "namespace");
        match self
            .registry
            .delete(resource, namespace, object::name(object), &options)
            .await
        {
            Ok(result) => {
                if result.removed {
                    self.metrics.deleted.inc();
                }
                Ok(())
            }
            Err(e) if e.code == 404 => Ok(()),
            // Changed since it was classified: look again.
            Err(e) if e.code == 409 => Err(format!("changed while being collected: {}", e.message)),
            Err(e) => Err(e.message),
        }
    }

    /// Rewrites `object`'s ownerReferences with `change`, conditioned on its uid.
    async fn rewrite_owner_refs<F>(
        &self,
        resource: &ResourceType,
        object: &Value,
        change: F,
    ) -> Result<(), String>
    where
        F: Fn(&mut Vec<Value>) + Send + Sync,
    {
        self.update_same_object(resource, object, Some("garbage-collector"), |next| {
            let mut refs: Vec<Value> = next
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            change(&mut refs);
            let metadata = object::metadata_mut(next);
            if refs.is_empty() {
                metadata.remove("ownerReferences");
            } else {
                metadata.insert("ownerReferences".into(), json!(refs));
            }
        })
        .await
    }

    /// Removes `finalizer` from an object, conditioned on its uid. Not recorded in
    /// managedFields: finishing a deletion is not owning a field.
    async fn remove_finalizer(
        &self,
        resource: &ResourceType,
        object: &Value,
        finalizer: &str,
    ) -> Result<(), String> {
        self.update_same_object(resource, object, None, |next| {
            let kept: Vec<String> = object::finalizers(next)
                .into_iter()
                .filter(|f| f != finalizer)
                .collect();
            object::metadata_mut(next).insert("finalizers".into(), json!(kept));
        })
        .await
    }

    /// Updates the object `object` names with `change` if it is still that object (same
    /// uid); an object that is gone or replaced needs nothing.
    async fn update_same_object<F>(
        &self,
        resource: &ResourceType,
        object: &Value,
        field_manager: Option<&str>,
        change: F,
    ) -> Result<(), String>
    where
        F: Fn(&mut Value) + Send + Sync,
    {
        let uid = object::uid(object).to_string();
        let options = WriteOptions {
            field_manager: field_manager.map(str::to_string),
            ..WriteOptions::default()
        };
        let result = self
            .registry
            .guarded_update(
                resource,
                object::meta_str(object, "namespace"),
                object::name(object),
                None,
                Subresource::Main,
                &options,
                |current| {
                    if object::uid(current) != uid {
                        return Err(crate::status::ApiError::new(404, "NotFound", "replaced"));
                    }
                    let mut next = current.clone();
                    change(&mut next);
                    Ok(next)
                },
            )
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) if e.code == 404 => Ok(()),
            Err(e) => Err(e.message),
        }
    }

    /// GC14: a foreground owner goes once no dependent blocks it.
    async fn process_deleting_dependents(
        self: &Arc<Self>,
        resource: &ResourceType,
        uid: &str,
        owner: &Value,
    ) -> Result<(), String> {
        let blocking: Vec<(String, bool)> = {
            let graph = self.lock_graph();
            let Some(node) = graph.nodes.get(uid) else {
                return Ok(());
            };
            node.dependents
                .iter()
                .filter_map(|d| {
                    let dependent = graph.nodes.get(d)?;
                    let blocks = dependent
                        .owners
                        .iter()
                        .any(|o| o.uid == uid && o.block_owner_deletion);
                    blocks.then(|| (d.clone(), dependent.deleting_dependents))
                })
                .collect()
        };
        if blocking.is_empty() {
            return self
                .remove_finalizer(resource, owner, FOREGROUND_FINALIZER)
                .await;
        }
        for (dependent, deleting_dependents) in blocking {
            if !deleting_dependents {
                self.enqueue(Item::AttemptToDelete(dependent));
            }
        }
        Ok(())
    }

    /// Removes the reference to `owner_uid` from `dependent`, if it is still there.
    async fn strip_owner_ref(&self, dependent: Identity, owner_uid: &str) -> Result<(), String> {
        let Some(dependent_type) = self.type_for(&dependent.api_version, &dependent.kind) else {
            return Ok(());
        };
        let Some(object) = self
            .read(
                &dependent_type,
                dependent.namespace.as_deref(),
                &dependent.name,
            )
            .await?
        else {
            return Ok(());
        };
        self.rewrite_owner_refs(&dependent_type, &object, |refs| {
            refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(owner_uid))
        })
        .await
    }

    /// GC16: every dependent loses its reference to the owner, then the owner loses `orphan`.
    async fn orphan_dependents(self: &Arc<Self>, uid: &str) -> Result<(), String> {
        let (identity, dependents) = {
            let graph = self.lock_graph();
            let Some(node) = graph.nodes.get(uid) else {
                return Ok(());
            };
            let dependents: Vec<Identity> = node
                .dependents
                .iter()
                .filter_map(|d| graph.nodes.get(d).map(|n| n.identity.clone()))
                .collect();
            (node.identity.clone(), dependents)
        };
        // Each dependent is its own durable write: many at once share the store's group
        // commits, as the cascade's workers do (upstream patches them all concurrently).
        let strips: Vec<_> = dependents
            .into_iter()
            .map(|dependent| self.strip_owner_ref(dependent, uid))
            .collect();
        let mut strips = futures::stream::iter(strips).buffer_unordered(WORKERS);
        while let Some(result) = strips.next().await {
            result?;
        }
        let Some(resource) = self.type_for(&identity.api_version, &identity.kind) else {
            return Ok(());
        };
        let Some(owner) = self
            .read(&resource, identity.namespace.as_deref(), &identity.name)
            .await?
            .filter(|o| object::uid(o) == uid)
        else {
            return Ok(());
        };
        self.remove_finalizer(&resource, &owner, ORPHAN_FINALIZER)
            .await
    }
}
