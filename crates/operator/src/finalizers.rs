//! Conflict-safe edits of `metadata.finalizers`.
//!
//! Every edit is a JSON Patch whose first operation `test`s what the edit was computed from, so
//! a concurrent change by anyone else (another controller's finalizer, a person's `kubectl
//! edit`) makes the patch fail with 422 instead of silently undoing that change. The caller then
//! reads the object again and recomputes. No resourceVersion is needed, so edits by others to
//! unrelated fields never conflict.

use std::fmt::Debug;

use json_patch::jsonptr::PointerBuf;
use json_patch::{
    AddOperation, Patch as JsonPatch, PatchOperation, RemoveOperation, ReplaceOperation,
    TestOperation,
};
use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Builds the `Api` an object lives in, for namespaced and cluster-scoped kinds alike.
pub trait ScopedApi {
    fn api_for<K>(client: Client, namespace: Option<&str>) -> Api<K>
    where
        K: Resource<Scope = Self, DynamicType = ()>;
}

impl ScopedApi for NamespaceResourceScope {
    fn api_for<K>(client: Client, namespace: Option<&str>) -> Api<K>
    where
        K: Resource<Scope = Self, DynamicType = ()>,
    {
        Api::namespaced(client, namespace.unwrap_or_default())
    }
}

impl ScopedApi for ClusterResourceScope {
    fn api_for<K>(client: Client, _namespace: Option<&str>) -> Api<K>
    where
        K: Resource<Scope = Self, DynamicType = ()>,
    {
        Api::all(client)
    }
}

/// The `Api` of `object`'s collection.
pub fn api_of<K>(client: Client, object: &K) -> Api<K>
where
    K: Resource<DynamicType = ()>,
    K::Scope: ScopedApi,
{
    K::Scope::api_for(client, object.meta().namespace.as_deref())
}

/// `/metadata/finalizers`, or one entry of it.
fn finalizers_pointer(index: Option<usize>) -> PointerBuf {
    match index {
        Some(index) => PointerBuf::from_tokens(["metadata", "finalizers", &index.to_string()]),
        None => PointerBuf::from_tokens(["metadata", "finalizers"]),
    }
}

/// The patch that appends the missing names of `wanted` to the finalizers of an object whose
/// finalizers are `current` (`None` when the field is absent). `None` when nothing is missing.
pub fn add_patch(current: Option<&[String]>, wanted: &[&str]) -> Option<JsonPatch> {
    let existing = current.unwrap_or_default();
    let missing: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|name| !existing.iter().any(|f| f == name))
        .collect();
    if missing.is_empty() {
        return None;
    }
    let mut next: Vec<String> = existing.to_vec();
    next.extend(missing.iter().map(|name| name.to_string()));
    let observed = current.map_or(Value::Null, |list| Value::from(list.to_vec()));
    let write = if current.is_some() {
        PatchOperation::Replace(ReplaceOperation {
            path: finalizers_pointer(None),
            value: Value::from(next),
        })
    } else {
        PatchOperation::Add(AddOperation {
            path: finalizers_pointer(None),
            value: Value::from(next),
        })
    };
    Some(JsonPatch(vec![
        PatchOperation::Test(TestOperation {
            path: finalizers_pointer(None),
            value: observed,
        }),
        write,
    ]))
}

/// The patch that removes `name` from `current`, pinned to its index. `None` when absent.
pub fn remove_patch(current: &[String], name: &str) -> Option<JsonPatch> {
    let index = current.iter().position(|f| f == name)?;
    Some(JsonPatch(vec![
        PatchOperation::Test(TestOperation {
            path: finalizers_pointer(Some(index)),
            value: Value::from(name),
        }),
        PatchOperation::Remove(RemoveOperation {
            path: finalizers_pointer(Some(index)),
        }),
    ]))
}

/// The patch that removes every one of `names` from `current` at once. `None` when none is there.
pub fn remove_all_patch(current: &[String], names: &[&str]) -> Option<JsonPatch> {
    if !current.iter().any(|f| names.contains(&f.as_str())) {
        return None;
    }
    let kept: Vec<String> = current
        .iter()
        .filter(|f| !names.contains(&f.as_str()))
        .cloned()
        .collect();
    Some(JsonPatch(vec![
        PatchOperation::Test(TestOperation {
            path: finalizers_pointer(None),
            value: Value::from(current.to_vec()),
        }),
        PatchOperation::Replace(ReplaceOperation {
            path: finalizers_pointer(None),
            value: Value::from(kept),
        }),
    ]))
}

/// The patch that makes a live object carry exactly the `wanted` ones of an operator's
/// finalizers: appends the missing names of `wanted` and drops every name of `unwanted`, in one
/// write guarded by a `test` of the whole list. `None` when the list is already right.
pub fn sync_patch(
    current: Option<&[String]>,
    wanted: &[&str],
    unwanted: &[&str],
) -> Option<JsonPatch> {
    let existing = current.unwrap_or_default();
    if !existing.iter().any(|f| unwanted.contains(&f.as_str())) {
        return add_patch(current, wanted);
    }
    let mut next: Vec<String> = existing
        .iter()
        .filter(|f| !unwanted.contains(&f.as_str()))
        .cloned()
        .collect();
    for name in wanted {
        if !next.iter().any(|f| f == name) {
            next.push(name.to_string());
        }
    }
    Some(JsonPatch(vec![
        PatchOperation::Test(TestOperation {
            path: finalizers_pointer(None),
            value: Value::from(existing.to_vec()),
        }),
        PatchOperation::Replace(ReplaceOperation {
            path: finalizers_pointer(None),
            value: Value::from(next),
        }),
    ]))
}

/// Sends `patch` to `object` and returns the object as stored afterwards.
pub async fn send<K>(api: &Api<K>, object: &K, patch: JsonPatch) -> Result<K, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    api.patch(
        &object.name_any(),
        &PatchParams::default(),
        &Patch::Json::<()>(patch),
    )
    .await
}

/// True for the error a failed `test` operation produces: the object changed under us.
pub fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 422 || status.code == 409)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn syncing_drops_the_unwanted_and_adds_the_wanted_in_one_guarded_write() {
        let current = names(&["other/x", "a/gc"]);
        let patch = sync_patch(Some(&current), &[], &["a/gc"]).expect("patch");
        assert_eq!(
            serde_json::to_value(&patch).expect("json"),
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": ["other/x", "a/gc"]},
                {"op": "replace", "path": "/metadata/finalizers", "value": ["other/x"]},
            ])
        );
        assert!(sync_patch(Some(&names(&["other/x"])), &[], &["a/gc"]).is_none());
        assert!(sync_patch(Some(&current), &["a/gc"], &[]).is_none());
        let added = sync_patch(None, &["a/gc"], &["a/other"]).expect("patch");
        assert_eq!(
            serde_json::to_value(&added).expect("json")[1],
            json!({"op": "add", "path": "/metadata/finalizers", "value": ["a/gc"]})
        );
    }

    #[test]
    fn adding_to_an_object_without_finalizers_tests_for_their_absence() {
        let patch = add_patch(None, &["a/db", "a/role"]).expect("patch");
        assert_eq!(
            serde_json::to_value(&patch).expect("json"),
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": ["a/db", "a/role"]},
            ])
        );
    }

    #[test]
    fn adding_keeps_other_finalizers_and_only_appends_the_missing() {
        let current = names(&["other/x", "a/db"]);
        let patch = add_patch(Some(&current), &["a/db", "a/role"]).expect("patch");
        assert_eq!(
            serde_json::to_value(&patch).expect("json"),
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": ["other/x", "a/db"]},
                {"op": "replace", "path": "/metadata/finalizers",
                 "value": ["other/x", "a/db", "a/role"]},
            ])
        );
        assert!(add_patch(Some(&names(&["a/db", "a/role"])), &["a/db", "a/role"]).is_none());
    }

    #[test]
    fn removing_one_pins_its_index() {
        let current = names(&["other/x", "a/db", "a/role"]);
        let patch = remove_patch(&current, "a/role").expect("patch");
        assert_eq!(
            serde_json::to_value(&patch).expect("json"),
            json!([
                {"op": "test", "path": "/metadata/finalizers/2", "value": "a/role"},
                {"op": "remove", "path": "/metadata/finalizers/2"},
            ])
        );
        assert!(remove_patch(&current, "a/missing").is_none());
    }

    #[test]
    fn removing_several_keeps_the_rest() {
        let current = names(&["a/db", "other/x", "a/role"]);
        let patch = remove_all_patch(&current, &["a/db", "a/role"]).expect("patch");
        assert_eq!(
            serde_json::to_value(&patch).expect("json"),
            json!([
                {"op": "test", "path": "/metadata/finalizers",
                 "value": ["a/db", "other/x", "a/role"]},
                {"op": "replace", "path": "/metadata/finalizers", "value": ["other/x"]},
            ])
        );
        assert!(remove_all_patch(&names(&["other/x"]), &["a/db"]).is_none());
    }
}
