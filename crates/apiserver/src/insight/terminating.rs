//! The terminating index: every object being deleted (`deletionTimestamp` set), by key and
//! by finalizer, kept in memory from the registry's change stream. It answers what would
//! otherwise need a scan of the whole store on every request: a `FinalizerClaim`'s pending
//! objects, the deletion metrics, and `DeletionReview`'s list of stuck objects.
//!
//! Fed like the garbage collector's graph: subscribe to the watch cache's decoded changes,
//! then build from one range read of `/registry/`, skipping events the read already
//! reflects; a subscriber that lags rebuilds the same way.
//!
//! # Guarantees
//! - After [`TerminatingIndex::build`] returns, the index holds every object that was
//!   terminating at the revision it read, and from then on follows every committed change
//!   (writes of other servers on the same store included, as they come through the store's
//!   event stream).
//! - "Last progress" of a finalizer is the last time the index saw it leave a terminating
//!   object (removed by an update, or the object went with it), per finalizer and resource.
//!
//! # Caveats
//! - Last progress is kept in memory only: it starts empty at every server start, so a claim
//!   shows no progress until a finalizer it covers is removed while this server runs.
//! - The index is a little behind the store (the watch cache's delivery, microseconds to
//!   milliseconds); answers built from it say which revision they reflect.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use finale_store::{RangeRequest, Revision, prefix_range};
use serde_json::Value;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::object;
use crate::registry::Registry;
use crate::status::{ApiError, ApiResult};
use crate::watch_cache::{CachedEvent, ChangeReceiver};

/// One object being deleted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Terminating {
    pub key: String,
    /// API group ("" for the core group) and plural resource, from the storage key.
    pub group: String,
    pub resource: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub api_version: String,
    pub kind: String,
    pub deletion_timestamp: String,
    pub finalizers: Vec<String>,
}

#[derive(Default)]
struct State {
    /// By storage key, so objects of one namespace and resource are adjacent.
    objects: BTreeMap<String, Terminating>,
    by_finalizer: HashMap<String, HashSet<String>>,
    /// (finalizer, group, resource) → the last time it was seen leaving a terminating object.
    last_progress: HashMap<(String, String, String), DateTime<Utc>>,
    /// The revision the index reflects.
    revision: Revision,
}

#[derive(Default)]
pub struct TerminatingIndex {
    state: Mutex<State>,
}

/// `/registry/<group>/<plural>/[<namespace>/]<name>` → (group, plural, namespace, name).
fn parse_key(key: &str) -> Option<(String, String, String, String)> {
    let rest = key.strip_prefix("/registry/")?;
    let parts: Vec<&str> = rest.split('/').collect();
    let (group, plural, namespace, name) = match parts.as_slice() {
        [group, plural, name] => (*group, *plural, "", *name),
        [group, plural, namespace, name] => (*group, *plural, *namespace, *name),
        _ => return None,
    };
    let group = if group == "core" { "" } else { group };
    Some((
        group.to_string(),
        plural.to_string(),
        namespace.to_string(),
        name.to_string(),
    ))
}

fn entry(key: &str, object: &Value) -> Option<Terminating> {
    let deletion_timestamp = object::meta_str(object, "deletionTimestamp")?.to_string();
    let (group, resource, namespace, name) = parse_key(key)?;
    let text = |field: &str| {
        object
            .get(field)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    Some(Terminating {
        key: key.to_string(),
        group,
        resource,
        namespace,
        name,
        uid: object::uid(object).to_string(),
        api_version: text("apiVersion"),
        kind: text("kind"),
        deletion_timestamp,
        finalizers: object::finalizers(object),
    })
}

impl State {
    fn insert(&mut self, entry: Terminating) {
        self.remove(&entry.key.clone());
        for finalizer in &entry.finalizers {
            self.by_finalizer
                .entry(finalizer.clone())
                .or_default()
                .insert(entry.key.clone());
        }
        self.objects.insert(entry.key.clone(), entry);
    }

    fn remove(&mut self, key: &str) -> Option<Terminating> {
        let old = self.objects.remove(key)?;
        for finalizer in &old.finalizers {
            if let Some(keys) = self.by_finalizer.get_mut(finalizer) {
                keys.remove(key);
                if keys.is_empty() {
                    self.by_finalizer.remove(finalizer);
                }
            }
        }
        Some(old)
    }

    fn observe(&mut self, event: &CachedEvent, now: DateTime<Utc>) {
        if event.revision <= self.revision {
            return;
        }
        self.revision = event.revision;
        if !event.key.starts_with("/registry/") {
            return;
        }
        let after = event.object.as_deref().and_then(|o| entry(&event.key, o));
        // Progress: a finalizer that a terminating object had and no longer has.
        if let Some(before) = event.previous.as_deref().and_then(|o| entry(&event.key, o)) {
            for finalizer in &before.finalizers {
                if !after
                    .as_ref()
                    .is_some_and(|a| a.finalizers.contains(finalizer))
                {
                    self.last_progress.insert(
                        (
                            finalizer.clone(),
                            before.group.clone(),
                            before.resource.clone(),
                        ),
                        now,
                    );
                }
            }
        }
        match after {
            Some(entry) => self.insert(entry),
            None => {
                self.remove(&event.key);
            }
        }
    }
}

impl TerminatingIndex {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Builds the index from one read of the store, keeping what it knows of progress.
    pub async fn build(&self, registry: &Registry) -> ApiResult<()> {
        let response = registry
            .store()
            .range(RangeRequest {
                range: prefix_range(b"/registry/"),
                limit: 0,
                revision: 0,
            })
            .await?;
        let mut fresh = State::default();
        for kv in &response.kvs {
            let key = String::from_utf8_lossy(&kv.key);
            // Cheap test first: most objects are not being deleted.
            if !contains(&kv.value, b"\"deletionTimestamp\"") {
                continue;
            }
            let object: Value = serde_json::from_slice(&kv.value).map_err(|e| {
                ApiError::internal(format!("stored object at {key} is not valid JSON: {e}"))
            })?;
            if let Some(entry) = entry(&key, &object) {
                fresh.insert(entry);
            }
        }
        fresh.revision = response.revision;
        let mut state = self.lock();
        fresh.last_progress = std::mem::take(&mut state.last_progress);
        *state = fresh;
        Ok(())
    }

    /// Applies one committed change.
    pub fn observe(&self, event: &CachedEvent) {
        self.lock().observe(event, Utc::now());
    }

    /// Builds the index, then follows the registry's changes until `shutdown`.
    pub fn spawn(
        self: &Arc<Self>,
        registry: Arc<Registry>,
        mut changes: ChangeReceiver,
        shutdown: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let index = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                loop {
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        change = changes.recv() => match change {
                            Ok(event) => index.observe(&event),
                            Err(broadcast::error::RecvError::Lagged(missed)) => {
                                tracing::warn!(missed, "the terminating index fell behind the change stream; rebuilding it");
                                break;
                            }
                            Err(broadcast::error::RecvError::Closed) => return,
                        },
                    }
                }
                changes = registry.subscribe_changes();
                while let Err(error) = index.build(&registry).await {
                    tracing::warn!(%error, "cannot rebuild the terminating index; retrying");
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                }
            }
        })
    }

    /// Every terminating object, in key order (by resource, then namespace and name).
    pub fn all(&self) -> Vec<Terminating> {
        self.lock().objects.values().cloned().collect()
    }

    /// The revision the index reflects.
    pub fn revision(&self) -> Revision {
        self.lock().revision
    }

    /// The terminating objects carrying a finalizer `covers` accepts, with the last progress
    /// of those finalizers on those objects' resources, for `resource_ok`.
    pub fn pending(
        &self,
        covers: impl Fn(&str) -> bool,
        resource_ok: impl Fn(&str, &str) -> bool,
    ) -> (Vec<Terminating>, Option<DateTime<Utc>>) {
        let state = self.lock();
        let mut keys = HashSet::new();
        for (finalizer, objects) in &state.by_finalizer {
            if covers(finalizer) {
                keys.extend(objects.iter().cloned());
            }
        }
        let pending = keys
            .iter()
            .filter_map(|key| state.objects.get(key))
            .filter(|o| resource_ok(&o.group, &o.resource))
            .cloned()
            .collect();
        let progress = state
            .last_progress
            .iter()
            .filter(|((finalizer, group, resource), _)| {
                covers(finalizer) && resource_ok(group, resource)
            })
            .map(|(_, at)| *at)
            .max();
        (pending, progress)
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(
        revision: Revision,
        key: &str,
        object: Option<Value>,
        previous: Option<Value>,
    ) -> CachedEvent {
        CachedEvent::new(
            revision,
            key.into(),
            object.map(Arc::new),
            previous.map(Arc::new),
            0,
        )
    }

    fn cm(finalizers: &[&str], terminating: bool) -> Value {
        let mut object = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "ns", "uid": "u", "finalizers": finalizers}});
        if terminating {
            object["metadata"]["deletionTimestamp"] = json!("2026-11-24T08:00:00Z");
        }
        object
    }

    #[test]
    fn objects_enter_when_deleted_and_progress_is_a_finalizer_leaving() {
        let index = TerminatingIndex::default();
        let key = "/registry/core/configmaps/ns/a";
        index.observe(&event(1, key, Some(cm(&["x.io/a", "x.io/b"], false)), None));
        assert!(index.all().is_empty());
        index.observe(&event(
            2,
            key,
            Some(cm(&["x.io/a", "x.io/b"], true)),
            Some(cm(&["x.io/a", "x.io/b"], false)),
        ));
        let all = index.all();
        assert_eq!(all.len(), 1);
        assert_eq!(
            (
                all[0].group.as_str(),
                all[0].resource.as_str(),
                all[0].namespace.as_str()
            ),
            ("", "configmaps", "ns")
        );
        let (pending, progress) = index.pending(|f| f == "x.io/a", |_, r| r == "configmaps");
        assert_eq!((pending.len(), progress), (1, None));

        index.observe(&event(
            3,
            key,
            Some(cm(&["x.io/b"], true)),
            Some(cm(&["x.io/a", "x.io/b"], true)),
        ));
        let (pending, progress) = index.pending(|f| f == "x.io/a", |_, _| true);
        assert!(pending.is_empty());
        assert!(progress.is_some());
        index.observe(&event(4, key, None, Some(cm(&["x.io/b"], true))));
        assert!(index.all().is_empty());
        assert!(index.pending(|f| f == "x.io/b", |_, _| true).1.is_some());
        // An event the index already reflects changes nothing.
        index.observe(&event(4, key, Some(cm(&["x.io/b"], true)), None));
        assert!(index.all().is_empty());
    }
}
