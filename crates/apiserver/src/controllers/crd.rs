//! The CustomResourceDefinition controller: CRDs in, served resource types out.
//!
//! For every CRD it
//! - checks the names against what is already served, registers one resource type per served
//!   version in the [`Catalog`](crate::resources::Catalog) (routes and discovery change in
//!   the same step), and reports `NamesAccepted` and `Established` in the CRD's status
//!   (api-surface §8.2);
//! - once the CRD is being deleted, refuses new instances, deletes the existing ones through
//!   the registry (so their own finalizers hold them as usual), reports progress in the
//!   `Terminating` condition, and removes the `customresourcecleanup.apiextensions.k8s.io`
//!   finalizer when none is left (deletion-semantics M7); the registry then removes the CRD
//!   and the controller unregisters its types.
//!
//! [`load_established`] runs before the server listens, so a restart serves every
//! established CRD from the first request. The controller runs on the replica that holds the
//! controllers' Lease; [`spawn_serving`] runs on every replica and serves what the stored CRDs
//! say, so that all replicas serve every established CRD.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use super::enqueue_after;
use crate::crd::definition;
use crate::object;
use crate::registry::{DeleteOptions, ListOptions, Registry, Subresource, WriteOptions};
use crate::resources::{CRD_GROUP, ResourceType};
use crate::status::{ApiError, ApiResult};
use crate::watch_cache::WatchItem;

pub use crate::crd::definition::CLEANUP_FINALIZER;

/// How often a CRD whose instances are held by their own finalizers is looked at again
/// without an event.
const CLEANUP_RESYNC: Duration = Duration::from_secs(5);

fn crd_type(registry: &Registry) -> ApiResult<Arc<ResourceType>> {
    registry
        .catalog()
        .lookup(CRD_GROUP, "v1", "customresourcedefinitions")
        .ok_or_else(|| {
            ApiError::internal("the customresourcedefinitions resource is not registered")
        })
}

/// Registers the resource types of every stored CRD that is established. Run at start-up.
pub async fn load_established(registry: &Registry) -> ApiResult<usize> {
    let crds = crd_type(registry)?;
    let list = registry.list(&crds, None, &ListOptions::default()).await?;
    let mut loaded = 0;
    for crd in list
        .get("items")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if condition_true(crd, "Established") && register(registry, crd).is_ok() {
            loaded += 1;
        }
    }
    Ok(loaded)
}

/// Runs on every replica, leader or not: serves what the stored CRDs define. The controller
/// under the controllers' Lease ([`spawn`]) accepts names and writes the status; this task
/// follows the result, so a CRD established through one replica is served by all of them
/// (each kube-apiserver's CRD handler does the same), and a CRD being deleted refuses new
/// instances on every replica.
pub fn spawn_serving(
    registry: Arc<Registry>,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move { follow_established(registry, shutdown).await })
}

async fn follow_established(registry: Arc<Registry>, shutdown: CancellationToken) {
    let mut events = None;
    loop {
        let Some(stream) = events.as_mut() else {
            match watch_crds(&registry).await {
                Ok(stream) => events = Some(stream),
                Err(error) => {
                    tracing::warn!(%error, "cannot watch CRDs to serve them; retrying");
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                    }
                }
            }
            continue;
        };
        let item = tokio::select! {
            _ = shutdown.cancelled() => return,
            item = stream.next() => item,
        };
        match item {
            Some(WatchItem::Change {
                event_type: "DELETED",
                object,
                ..
            }) => unregister(&registry, &object),
            Some(WatchItem::Change { object, .. }) => {
                if condition_true(&object, "Established")
                    && name_conflict(&registry, &object).is_none()
                    && let Err(error) = register(&registry, &object)
                {
                    tracing::warn!(crd = object::name(&object), %error, "cannot serve a CRD");
                }
            }
            Some(_) => {}
            // The watch ended (the cache resynchronised): watch again, from a fresh list.
            None => events = None,
        }
    }
}

pub fn spawn(registry: Arc<Registry>, shutdown: CancellationToken) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move { run(registry, shutdown).await })
}

async fn run(registry: Arc<Registry>, shutdown: CancellationToken) {
    let (queue, mut work) = mpsc::unbounded_channel::<String>();
    let mut changes = registry.subscribe_changes();
    let mut events = match watch_crds(&registry).await {
        Ok(stream) => stream,
        Err(error) => {
            tracing::error!(%error, "CRD controller cannot watch CRDs; it is not running");
            return;
        }
    };
    // CRDs being deleted, by the storage prefix of their instances.
    let mut cleaning: std::collections::HashMap<String, String> = Default::default();
    loop {
        let mut due: HashSet<String> = HashSet::new();
        tokio::select! {
            _ = shutdown.cancelled() => return,
            item = events.next() => match item {
                Some(WatchItem::Change { event_type: "DELETED", object, .. }) => {
                    unregister(&registry, &object);
                    cleaning.retain(|_, name| name != object::name(&object));
                }
                Some(WatchItem::Change { object, .. }) => {
                    due.insert(object::name(&object).to_string());
                }
                Some(_) => {}
                None => match watch_crds(&registry).await {
                    Ok(stream) => events = stream,
                    Err(error) => {
                        tracing::warn!(%error, "CRD controller lost its watch; retrying");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                },
            },
            change = changes.recv() => match change {
                // An instance of a CRD being cleaned up went away: look again.
                Ok(event) if event.object.is_none() => {
                    if let Some(name) = cleaning
                        .iter()
                        .find(|(prefix, _)| event.key.starts_with(prefix.as_str()))
                        .map(|(_, name)| name.clone())
                    {
                        due.insert(name);
                    }
                }
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => due.extend(cleaning.values().cloned()),
                Err(broadcast::error::RecvError::Closed) => return,
            },
            Some(name) = work.recv() => { due.insert(name); }
        }
        while let Ok(name) = work.try_recv() {
            due.insert(name);
        }
        for name in due {
            match sync(&registry, &name).await {
                Ok(Outcome::Done) => {
                    cleaning.retain(|_, n| *n != name);
                }
                Ok(Outcome::Cleaning { prefix }) => {
                    cleaning.insert(prefix, name.clone());
                    enqueue_after(&queue, name, CLEANUP_RESYNC);
                }
                Err(error) => {
                    tracing::warn!(crd = %name, %error, "CRD sync failed; retrying");
                    enqueue_after(&queue, name, Duration::from_secs(1));
                }
            }
        }
    }
}

async fn watch_crds(registry: &Registry) -> ApiResult<crate::watch_cache::WatchStream> {
    registry
        .watch(crd_type(registry)?, None, &ListOptions::default(), false)
        .await
}

/// What a sync left to do.
enum Outcome {
    Done,
    /// Instances remain; their storage prefix is watched for deletions.
    Cleaning {
        prefix: String,
    },
}

async fn sync(registry: &Registry, name: &str) -> ApiResult<Outcome> {
    let crds = crd_type(registry)?;
    let crd = match registry.get(&crds, None, name).await {
        Ok(crd) => crd,
        Err(e) if e.code == 404 => return Ok(Outcome::Done),
        Err(e) => return Err(e),
    };
    let conflict = name_conflict(registry, &crd);
    if conflict.is_none() {
        register(registry, &crd).map_err(ApiError::internal)?;
    }
    write_status(registry, &crds, name, |status| {
        accepted_status(status, &crd, conflict.as_deref())
    })
    .await?;
    if object::is_terminating(&crd)
        && object::finalizers(&crd)
            .iter()
            .any(|f| f == CLEANUP_FINALIZER)
    {
        return clean_up(registry, &crds, &crd).await;
    }
    Ok(Outcome::Done)
}

/// The served types of `crd`, registered in place of whatever its name served before.
fn register(registry: &Registry, crd: &Value) -> Result<(), String> {
    let mut types = definition::resource_types(crd)?;
    let storage = storage_version(crd);
    let terminating = object::is_terminating(crd);
    let conversion = crate::crd::conversion::ConversionWebhook::from_crd(crd)
        .map(|webhook| Arc::new(webhook.with_schemas(&types)));
    for t in &mut types {
        t.storage_version = storage.clone();
        t.conversion = conversion.clone();
        t.definition_terminating = terminating;
    }
    let (group, plural) = group_and_plural(crd);
    registry.catalog().replace_resource(&group, &plural, types);
    Ok(())
}

fn unregister(registry: &Registry, crd: &Value) {
    let (group, plural) = group_and_plural(crd);
    if !group.is_empty() && !plural.is_empty() {
        registry
            .catalog()
            .replace_resource(&group, &plural, Vec::new());
        tracing::info!(
            crd = object::name(crd),
            "custom resource definition removed; its routes are gone"
        );
    }
}

fn group_and_plural(crd: &Value) -> (String, String) {
    let text = |p: &str| {
        crd.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    (text("/spec/group"), text("/spec/names/plural"))
}

fn storage_version(crd: &Value) -> Option<String> {
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)?
        .iter()
        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .and_then(|v| v.get("name").and_then(Value::as_str))
        .map(str::to_string)
}

/// Why `crd`'s names cannot be served, if they cannot: its group/plural is a built-in
/// resource, or another CRD of the group already uses its kind.
fn name_conflict(registry: &Registry, crd: &Value) -> Option<String> {
    let (group, plural) = group_and_plural(crd);
    let kind = crd
        .pointer("/spec/names/kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    for served in registry.catalog().all() {
        if served.group != group {
            continue;
        }
        if served.builtin && served.plural == plural {
            return Some(format!("{plural:?} is already in use"));
        }
        if !served.builtin && served.plural != plural && served.kind == kind {
            return Some(format!("{kind:?} is already in use"));
        }
    }
    None
}

fn condition_true(crd: &Value, kind: &str) -> bool {
    crd.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| {
            c.get("type").and_then(Value::as_str) == Some(kind)
                && c.get("status").and_then(Value::as_str) == Some("True")
        })
}

/// Sets one condition, keeping `lastTransitionTime` when the status does not flip.
fn set_condition(status: &mut Value, kind: &str, state: &str, reason: &str, message: &str) {
    if !status.is_object() {
        *status = json!({});
    }
    if !status.get("conditions").is_some_and(Value::is_array) {
        status["conditions"] = json!([]);
    }
    let Some(conditions) = status["conditions"].as_array_mut() else {
        return;
    };
    let now = object::now();
    match conditions
        .iter_mut()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
    {
        Some(existing) => {
            let flipped = existing.get("status").and_then(Value::as_str) != Some(state);
            existing["status"] = json!(state);
            existing["reason"] = json!(reason);
            existing["message"] = json!(message);
            if flipped {
                existing["lastTransitionTime"] = json!(now);
            }
        }
        None => conditions.push(json!({
            "type": kind, "status": state, "lastTransitionTime": now,
            "reason": reason, "message": message,
        })),
    }
}

/// §8.2: acceptedNames, storedVersions and the NamesAccepted/Established conditions.
fn accepted_status(status: &mut Value, crd: &Value, conflict: Option<&str>) {
    match conflict {
        Some(why) => {
            set_condition(status, "NamesAccepted", "False", "NameConflict", why);
            if !condition_true(crd, "Established") {
                set_condition(
                    status,
                    "Established",
                    "False",
                    "NotAccepted",
                    "not all names are accepted",
                );
            }
        }
        None => {
            status["acceptedNames"] = definition::accepted_names(crd);
            set_condition(
                status,
                "NamesAccepted",
                "True",
                "NoConflicts",
                "no conflicts found",
            );
            set_condition(
                status,
                "Established",
                "True",
                "InitialNamesAccepted",
                "the initial names have been accepted",
            );
            if let Some(version) = storage_version(crd) {
                let mut stored: Vec<Value> = status
                    .get("storedVersions")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                if !stored.iter().any(|v| v.as_str() == Some(version.as_str())) {
                    stored.push(json!(version));
                }
                status["storedVersions"] = json!(stored);
            }
        }
    }
}

/// Rewrites the CRD's status through `/status` when `change` alters it.
async fn write_status<F>(
    registry: &Registry,
    crds: &ResourceType,
    name: &str,
    change: F,
) -> ApiResult<()>
where
    F: Fn(&mut Value),
{
    let result = registry
        .guarded_update(
            crds,
            None,
            name,
            None,
            Subresource::Status,
            &WriteOptions::default(),
            |current| {
                let mut next = current.clone();
                let mut status = current.get("status").cloned().unwrap_or_else(|| json!({}));
                change(&mut status);
                next["status"] = status;
                Ok(next)
            },
        )
        .await;
    match result {
        Ok(_) => Ok(()),
        Err(e) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// M7: delete every instance; drop the finalizer once none is left.
async fn clean_up(registry: &Registry, crds: &ResourceType, crd: &Value) -> ApiResult<Outcome> {
    let name = object::name(crd).to_string();
    let (group, plural) = group_and_plural(crd);
    let Some(instances) = registry.catalog().lookup_resource(&group, &plural) else {
        // Never served (names not accepted): nothing can exist.
        return finish_cleanup(registry, crds, crd).await;
    };
    write_status(registry, crds, &name, |status| {
        set_condition(
            status,
            "Terminating",
            "True",
            "InstanceDeletionInProgress",
            "CustomResource deletion is in progress",
        )
    })
    .await?;
    let options = DeleteOptions {
        propagation_policy: Some("Background".into()),
        ..DeleteOptions::default()
    };
    let listed = registry
        .list(&instances, None, &ListOptions::default())
        .await?;
    let items = listed
        .get("items")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut failures = Vec::new();
    // Collected first: a closure inside the stream trips the compiler's Send inference.
    let mut deletions = Vec::with_capacity(items.len());
    for item in &items {
        let namespace = object::meta_str(item, "namespace").map(str::to_string);
        let item_name = object::name(item).to_string();
        let instances = Arc::clone(&instances);
        let options = options.clone();
        deletions.push(async move {
            registry
                .delete(&instances, namespace.as_deref(), &item_name, &options)
                .await
        });
    }
    let mut stream = futures::stream::iter(deletions).buffer_unordered(32);
    while let Some(result) = stream.next().await {
        if let Err(e) = result
            && e.code != 404
        {
            failures.push(e.message);
        }
    }
    let left = registry
        .list(
            &instances,
            None,
            &ListOptions {
                limit: 1,
                ..ListOptions::default()
            },
        )
        .await?;
    let remaining = left
        .get("items")
        .and_then(Value::as_array)
        .is_some_and(|items| !items.is_empty());
    if remaining || !failures.is_empty() {
        let message = if failures.is_empty() {
            "could not confirm zero CustomResources remaining: some instances are held by their finalizers".to_string()
        } else {
            format!(
                "could not delete all CustomResources: {}",
                failures.join("; ")
            )
        };
        write_status(registry, crds, &name, |status| {
            set_condition(
                status,
                "Terminating",
                "True",
                "InstanceDeletionCheck",
                &message,
            )
        })
        .await?;
        return Ok(Outcome::Cleaning {
            prefix: instances.key_prefix(),
        });
    }
    finish_cleanup(registry, crds, crd).await
}

async fn finish_cleanup(
    registry: &Registry,
    crds: &ResourceType,
    crd: &Value,
) -> ApiResult<Outcome> {
    let name = object::name(crd);
    write_status(registry, crds, name, |status| {
        set_condition(
            status,
            "Terminating",
            "True",
            "InstanceDeletionCompleted",
            "removed all instances",
        )
    })
    .await?;
    // When ours is the last finalizer, removing it deletes the CRD. The routes go first, so
    // that a client who sees the CRD gone never finds its instances still served; should the
    // removal fail, the retried sync registers them again.
    if object::finalizers(crd)
        .iter()
        .all(|f| f == CLEANUP_FINALIZER)
    {
        unregister(registry, crd);
    }
    let result = registry
        .guarded_update(
            crds,
            None,
            name,
            None,
            Subresource::Main,
            &WriteOptions::default(),
            |current| {
                let mut next = current.clone();
                let kept: Vec<String> = object::finalizers(current)
                    .into_iter()
                    .filter(|f| f != CLEANUP_FINALIZER)
                    .collect();
                object::metadata_mut(&mut next).insert("finalizers".into(), json!(kept));
                Ok(next)
            },
        )
        .await;
    match result {
        Ok(_) => {
            tracing::info!(
                crd = name,
                "custom resources deleted; cleanup finalizer removed"
            );
            Ok(Outcome::Done)
        }
        Err(e) if e.code == 404 => Ok(Outcome::Done),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_keep_their_transition_time_until_they_flip() {
        let mut status = json!({"conditions": [{"type": "Established", "status": "True",
            "lastTransitionTime": "2020-01-01T00:00:00Z", "reason": "InitialNamesAccepted", "message": "m"}]});
        set_condition(
            &mut status,
            "Established",
            "True",
            "InitialNamesAccepted",
            "the initial names have been accepted",
        );
        assert_eq!(
            status["conditions"][0]["lastTransitionTime"],
            "2020-01-01T00:00:00Z"
        );
        set_condition(&mut status, "Established", "False", "NotAccepted", "no");
        assert_ne!(
            status["conditions"][0]["lastTransitionTime"],
            "2020-01-01T00:00:00Z"
        );
        set_condition(
            &mut status,
            "Terminating",
            "True",
            "InstanceDeletionPending",
            "x",
        );
        assert_eq!(status["conditions"].as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn accepted_status_reports_names_and_storage() {
        let crd = json!({"spec": {"group": "example.com", "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": "v1beta1", "served": true, "storage": false},
                         {"name": "v1", "served": true, "storage": true}]},
            "status": {"storedVersions": ["v1beta1"]}});
        let mut status = crd["status"].clone();
        accepted_status(&mut status, &crd, None);
        assert_eq!(status["storedVersions"], json!(["v1beta1", "v1"]));
        assert!(condition_true(
            &json!({"status": status.clone()}),
            "Established"
        ));
        assert!(condition_true(&json!({"status": status}), "NamesAccepted"));

        let mut refused = json!({});
        accepted_status(&mut refused, &crd, Some("\"Widget\" is already in use"));
        assert_eq!(refused["conditions"][0]["status"], "False");
        assert_eq!(refused["conditions"][0]["reason"], "NameConflict");
        assert_eq!(refused["conditions"][1]["type"], "Established");
        assert_eq!(refused["conditions"][1]["status"], "False");
    }
}
