//! The namespace lifecycle controller (deletion-semantics §10, N6–N8).
//!
//! For every terminating namespace that still carries the `kubernetes` finalizer it deletes
//! the content — pods first, then every other namespaced resource, built-in or custom —
//! keeps the five status conditions that explain what is left, and finally removes its
//! finalizer through `/finalize`, which lets the registry remove the namespace.
//!
//! It runs in process and goes through the [`Registry`] like any client, so every lifecycle
//! rule (finalizers, graceful pods, GC finalizers) applies to what it deletes. It reacts to
//! events rather than polling: a namespace is re-examined when it changes and whenever
//! something inside it is deleted; a slow fallback timer covers anything missed.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use super::enqueue_after;
use crate::deletion::NAMESPACE_FINALIZER;
use crate::object;
use crate::registry::{DeleteOptions, ListOptions, Registry, Subresource, WriteOptions};
use crate::resources::ResourceType;
use crate::status::ApiResult;
use crate::watch_cache::WatchItem;

#[derive(Clone, Debug)]
pub struct NamespaceControllerOptions {
    /// How long after a namespace starts terminating before its content is deleted.
    /// Upstream always waits 5 s (to let informer caches catch up); Finale reads its own
    /// store, so the default is no delay and an empty namespace goes in milliseconds.
    pub deletion_delay: Duration,
    /// Re-examine a namespace with content left after this long even without an event.
    pub resync: Duration,
}

impl Default for NamespaceControllerOptions {
    fn default() -> Self {
        NamespaceControllerOptions {
            deletion_delay: Duration::ZERO,
            resync: Duration::from_secs(15),
        }
    }
}

/// What one pass over a namespace found.
#[derive(Default)]
struct Progress {
    /// `resource.group` → instances left.
    remaining: BTreeMap<String, usize>,
    /// finalizer → instances holding it.
    finalizers: BTreeMap<String, usize>,
    /// Deletion errors, per resource.
    failures: Vec<String>,
    /// The soonest a graceful pod's period ends, if any is running.
    grace_left: Option<Duration>,
}

pub fn spawn(
    registry: Arc<Registry>,
    options: NamespaceControllerOptions,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move { run(registry, options, shutdown).await })
}

async fn run(
    registry: Arc<Registry>,
    options: NamespaceControllerOptions,
    shutdown: CancellationToken,
) {
    let (queue, mut work) = mpsc::unbounded_channel::<String>();
    let mut changes = registry.subscribe_changes();
    // Terminating namespaces, each with the time its deletion delay ends.
    let mut terminating: HashMap<String, tokio::time::Instant> = HashMap::new();
    let mut namespace_events = match watch_namespaces(&registry).await {
        Ok(stream) => stream,
        Err(error) => {
            tracing::error!(%error, "namespace controller cannot watch namespaces; it is not running");
            return;
        }
    };
    let mut pending: BTreeSet<String> = BTreeSet::new();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            item = namespace_events.next() => match item {
                Some(WatchItem::Change { event_type, object, .. }) => {
                    let name = object::name(&object).to_string();
                    if event_type == "DELETED" {
                        terminating.remove(&name);
                    } else if object::is_terminating(&object) && !terminating.contains_key(&name) {
                        let ready = tokio::time::Instant::now() + options.deletion_delay;
                        terminating.insert(name.clone(), ready);
                        enqueue_after(&queue, name, options.deletion_delay);
                    } else if object::is_terminating(&object) {
                        pending.insert(name);
                    }
                }
                Some(_) => {}
                None => {
                    // The watch ended (timeout or lag): start over from a fresh list.
                    match watch_namespaces(&registry).await {
                        Ok(stream) => namespace_events = stream,
                        Err(error) => {
                            tracing::warn!(%error, "namespace controller lost its watch; retrying");
                            tokio::time::sleep(Duration::from_millis(500)).await;
                        }
                    }
                }
            },
            change = changes.recv() => match change {
                Ok(event) if event.object.is_none() => {
                    // Something was deleted: if it lived in a terminating namespace, look again.
                    if let Some(namespace) = namespace_of_key(&event.key)
                        && terminating.contains_key(namespace)
                    {
                        pending.insert(namespace.to_string());
                    }
                }
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => pending.extend(terminating.keys().cloned()),
                Err(broadcast::error::RecvError::Closed) => return,
            },
            Some(name) = work.recv() => { pending.insert(name); }
        }
        // Handle everything queued before listening again, so a burst of deletions in one
        // namespace costs one pass, not one per object.
        while let Ok(name) = work.try_recv() {
            pending.insert(name);
        }
        while let Some(name) = pending.pop_first() {
            // N6: the deletion delay holds whatever event brings a namespace up early (a
            // label change, a deletion inside it); the delayed enqueue brings it back.
            if terminating
                .get(&name)
                .is_some_and(|ready| tokio::time::Instant::now() < *ready)
            {
                continue;
            }
            match sync(&registry, &name).await {
                Ok(None) => {}
                Ok(Some(after)) => enqueue_after(&queue, name, after.min(options.resync)),
                Err(error) => {
                    tracing::warn!(namespace = %name, %error, "namespace deletion pass failed; retrying");
                    enqueue_after(&queue, name, Duration::from_secs(1));
                }
            }
        }
    }
}

async fn watch_namespaces(registry: &Registry) -> ApiResult<crate::watch_cache::WatchStream> {
    let namespaces = namespaces_type(registry)?;
    registry
        .watch(namespaces, None, &ListOptions::default(), false)
        .await
}

fn namespaces_type(registry: &Registry) -> ApiResult<Arc<ResourceType>> {
    registry
        .catalog()
        .lookup("", "v1", "namespaces")
        .ok_or_else(|| {
            crate::status::ApiError::internal("the namespaces resource is not registered")
        })
}

/// `/registry/<group>/<plural>/<namespace>/<name>` → the namespace; cluster-scoped keys have
/// one segment fewer and yield None.
fn namespace_of_key(key: &str) -> Option<&str> {
    let parts: Vec<&str> = key.trim_start_matches("/registry/").split('/').collect();
    (parts.len() == 4).then(|| parts[2])
}

/// One pass over a terminating namespace. Returns when to look again, or None when done.
async fn sync(registry: &Registry, name: &str) -> ApiResult<Option<Duration>> {
    let namespaces = namespaces_type(registry)?;
    let namespace = match registry.get(&namespaces, None, name).await {
        Ok(ns) => ns,
        Err(e) if e.code == 404 => return Ok(None),
        Err(e) => return Err(e),
    };
    if !object::is_terminating(&namespace) {
        return Ok(None);
    }
    let ours = namespace
        .pointer("/spec/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|list| list.iter().any(|f| f.as_str() == Some(NAMESPACE_FINALIZER)));
    if !ours {
        return Ok(None);
    }

    let progress = delete_content(registry, name).await;
    write_conditions(registry, &namespaces, name, &progress).await?;
    if !progress.remaining.is_empty() || !progress.failures.is_empty() {
        return Ok(Some(progress.grace_left.unwrap_or(Duration::from_secs(15))));
    }
    // N6.6: everything is gone; hand the namespace back without our finalizer.
    let result = registry
        .guarded_update(
            &namespaces,
            None,
            name,
            None,
            Subresource::Finalize,
            &WriteOptions::default(),
            |current| {
                let mut next = current.clone();
                let kept: Vec<Value> = current
                    .pointer("/spec/finalizers")
                    .and_then(Value::as_array)
                    .map(|list| {
                        list.iter()
                            .filter(|f| f.as_str() != Some(NAMESPACE_FINALIZER))
                            .cloned()
                            .collect()
                    })
                    .unwrap_or_default();
                next["spec"]["finalizers"] = json!(kept);
                Ok(next)
            },
        )
        .await;
    match result {
        Ok(_) => {
            tracing::info!(
                namespace = name,
                "namespace content deleted; finalizer removed"
            );
            Ok(None)
        }
        Err(e) if e.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

/// N6.3–N6.4: pods first; other kinds only once no pod is left.
async fn delete_content(registry: &Registry, namespace: &str) -> Progress {
    let mut progress = Progress::default();
    let mut seen_prefixes = HashSet::new();
    let mut types = registry.catalog().all();
    // One storage prefix may be served under several versions; delete it once, through the
    // storage version when it is served, so that no conversion webhook is needed to empty a
    // namespace of objects stored in it.
    types.sort_by_key(|t| !t.is_storage_version());
    let (pods, others): (Vec<_>, Vec<_>) = types
        .into_iter()
        .filter(|t| t.namespaced)
        .filter(|t| seen_prefixes.insert(t.key_prefix()))
        .partition(|t| t.group.is_empty() && t.plural == "pods");
    for resource in &pods {
        delete_all_of(registry, resource, namespace, &mut progress).await;
    }
    if !progress.remaining.is_empty() {
        return progress;
    }
    for resource in &others {
        delete_all_of(registry, resource, namespace, &mut progress).await;
    }
    progress
}

async fn delete_all_of(
    registry: &Registry,
    resource: &ResourceType,
    namespace: &str,
    progress: &mut Progress,
) {
    let options = DeleteOptions {
        propagation_policy: Some("Background".into()),
        ..DeleteOptions::default()
    };
    let qualified = format!("{}.{}", resource.plural, resource.group);
    if let Err(error) = registry
        .delete_collection(resource, Some(namespace), &ListOptions::default(), &options)
        .await
    {
        progress
            .failures
            .push(format!("{qualified}: {}", error.message));
    }
    let left = match registry
        .list(resource, Some(namespace), &ListOptions::default())
        .await
    {
        Ok(list) => list
            .get("items")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
        Err(error) => {
            progress
                .failures
                .push(format!("{qualified}: {}", error.message));
            return;
        }
    };
    if left.is_empty() {
        return;
    }
    progress.remaining.insert(qualified, left.len());
    let now = chrono::Utc::now();
    for item in &left {
        for finalizer in object::finalizers(item) {
            *progress.finalizers.entry(finalizer).or_default() += 1;
        }
        let ends = object::meta_str(item, "deletionTimestamp")
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok());
        if let Some(ends) = ends
            && let Ok(left) = (ends.with_timezone(&chrono::Utc) - now).to_std()
        {
            let soonest = progress.grace_left.map_or(left, |g| g.min(left));
            progress.grace_left = Some(soonest.max(Duration::from_millis(100)));
        }
    }
}

/// N7: the five conditions, False when fine, with upstream's reasons and messages.
fn conditions(progress: &Progress) -> Vec<(&'static str, bool, &'static str, String)> {
    let remaining: Vec<String> = progress
        .remaining
        .iter()
        .map(|(r, n)| format!("{r} has {n} resource instances"))
        .collect();
    let finalizers: Vec<String> = progress
        .finalizers
        .iter()
        .map(|(f, n)| format!("{f} in {n} resource instances"))
        .collect();
    vec![
        (
            "NamespaceDeletionDiscoveryFailure",
            false,
            "ResourcesDiscovered",
            "All resources successfully discovered".into(),
        ),
        (
            "NamespaceDeletionGroupVersionParsingFailure",
            false,
            "ParsedGroupVersions",
            "All legacy kube types successfully parsed".into(),
        ),
        if progress.failures.is_empty() {
            (
                "NamespaceDeletionContentFailure",
                false,
                "ContentDeleted",
                "All content successfully deleted, may be waiting on finalization".into(),
            )
        } else {
            (
                "NamespaceDeletionContentFailure",
                true,
                "ContentDeletionFailed",
                format!(
                    "Failed to delete all resource types, {} remaining: {}",
                    progress.failures.len(),
                    progress.failures.join(", ")
                ),
            )
        },
        if remaining.is_empty() {
            (
                "NamespaceContentRemaining",
                false,
                "ContentRemoved",
                "All content successfully removed".into(),
            )
        } else {
            (
                "NamespaceContentRemaining",
                true,
                "SomeResourcesRemain",
                format!("Some resources are remaining: {}", remaining.join(", ")),
            )
        },
        if finalizers.is_empty() {
            (
                "NamespaceFinalizersRemaining",
                false,
                "ContentHasNoFinalizers",
                "All content-preserving finalizers finished".into(),
            )
        } else {
            (
                "NamespaceFinalizersRemaining",
                true,
                "SomeFinalizersRemain",
                format!(
                    "Some content in the namespace has finalizers remaining: {}",
                    finalizers.join(", ")
                ),
            )
        },
    ]
}

async fn write_conditions(
    registry: &Registry,
    namespaces: &ResourceType,
    name: &str,
    progress: &Progress,
) -> ApiResult<()> {
    let wanted = conditions(progress);
    registry
        .guarded_update(namespaces, None, name, None, Subresource::Status, &WriteOptions::default(), |current| {
            let previous: HashMap<String, Value> = current
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .map(|list| {
                    list.iter()
                        .filter_map(|c| Some((c.get("type")?.as_str()?.to_string(), c.clone())))
                        .collect()
                })
                .unwrap_or_default();
            let now = object::now();
            let conditions: Vec<Value> = wanted
                .iter()
                .map(|(kind, failing, reason, message)| {
                    let status = if *failing { "True" } else { "False" };
                    // lastTransitionTime changes only when the status flips.
                    let since = previous
                        .get(*kind)
                        .filter(|c| c.get("status").and_then(Value::as_str) == Some(status))
                        .and_then(|c| c.get("lastTransitionTime").cloned())
                        .unwrap_or_else(|| json!(now));
                    json!({"type": kind, "status": status, "lastTransitionTime": since, "reason": reason, "message": message})
                })
                .collect();
            let mut next = current.clone();
            next["status"]["phase"] = json!("Terminating");
            next["status"]["conditions"] = json!(conditions);
            Ok(next)
        })
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_their_namespace() {
        assert_eq!(
            namespace_of_key("/registry/core/configmaps/team/a"),
            Some("team")
        );
        assert_eq!(namespace_of_key("/registry/core/namespaces/team"), None);
    }

    #[test]
    fn n7_messages_list_what_remains_sorted() {
        let mut progress = Progress::default();
        progress.remaining.insert("pods.".into(), 2);
        progress.remaining.insert("configmaps.".into(), 1);
        progress.finalizers.insert("example.com/x".into(), 1);
        let conditions = conditions(&progress);
        let remaining = conditions
            .iter()
            .find(|c| c.0 == "NamespaceContentRemaining")
            .unwrap();
        assert!(remaining.1);
        assert_eq!(
            remaining.3,
            "Some resources are remaining: configmaps. has 1 resource instances, pods. has 2 resource instances"
        );
        let finalizers = conditions
            .iter()
            .find(|c| c.0 == "NamespaceFinalizersRemaining")
            .unwrap();
        assert_eq!(
            finalizers.3,
            "Some content in the namespace has finalizers remaining: example.com/x in 1 resource instances"
        );
        assert_eq!(conditions.len(), 5);
    }
}
