//! What a deletion plan reads of each object it reaches: identity, owner references,
//! finalizers and whether it is terminating, in a compact typed form.
//!
//! A plan over an owner of ten thousand dependents reads ten thousand objects. Decoding each
//! into a `serde_json::Value` (a map per object and per reference, a string per key) cost more
//! than everything else the plan does, so objects read in bulk are decoded straight from
//! their stored bytes into a [`Reached`]: unknown fields (`data`, `spec`, `status`,
//! `managedFields`) are skipped by the parser and never allocated.
//!
//! # Guarantees
//! - A [`Reached`] decoded from stored bytes equals one built from the same object decoded in
//!   full ([`Reached::from_object`]), except that it has no `body` (tested below).
//!
//! # Caveats
//! - Kinds whose body deletion reads (a Pod's grace period and node, a Namespace's
//!   `spec.finalizers`) must be read whole: the plan reads them with
//!   [`super::snapshot::Snapshot::list_trimmed`] and keeps their `body`.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use super::api::{CompactString, ObjectRef};
use super::review::object_ref;
use super::snapshot::undecodable;
use crate::object::{self, OwnerReference};
use crate::resources::ResourceType;
use crate::status::ApiResult;

/// One object as a plan reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct Reached {
    pub this: ObjectRef,
    pub finalizers: Vec<String>,
    /// `metadata.deletionTimestamp` is set.
    pub terminating: bool,
    /// Its references with a uid (the collector ignores the others); shared, as the
    /// collector's graph shares them.
    pub references: Arc<[OwnerReference]>,
    /// The object itself, for objects read one by one and kinds whose body deletion reads;
    /// None for objects decoded from bulk reads.
    pub body: Option<Value>,
}

impl Reached {
    /// From an object decoded in full (kept as `body`).
    pub fn from_object(resource: &ResourceType, object: Value) -> Reached {
        let references = object
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|r| OwnerReference::deserialize(r).ok())
            .filter(|r| !r.uid.is_empty())
            .collect();
        Reached {
            this: object_ref(resource, &object),
            finalizers: object::finalizers(&object),
            terminating: object::is_terminating(&object),
            references,
            body: Some(object),
        }
    }

    /// From a stored value of `resource` (no `body`). The apiVersion is the one the object
    /// is served at, as [`crate::registry::served`] sets it.
    pub fn from_stored(resource: &ResourceType, key: &[u8], value: &[u8]) -> ApiResult<Reached> {
        let stored: Stored = serde_json::from_slice(value).map_err(|e| undecodable(key, e))?;
        let api_version = match stored.api_version {
            Some(stored) if resource.storage_version.is_none() => stored,
            _ => resource.api_version().into(),
        };
        let metadata = stored.metadata;
        Ok(Reached {
            this: ObjectRef {
                api_version,
                kind: resource.kind.as_str().into(),
                namespace: metadata.namespace.unwrap_or_default(),
                name: metadata.name,
                uid: metadata.uid,
            },
            finalizers: metadata.finalizers.unwrap_or_default(),
            terminating: metadata.deletion_timestamp.is_some(),
            references: metadata
                .owner_references
                .unwrap_or_default()
                .into_iter()
                .filter(|r| !r.uid.is_empty())
                .collect(),
            body: None,
        })
    }

    /// Whether it names `uid` among its owners.
    pub fn references_owner(&self, uid: &str) -> bool {
        self.references.iter().any(|r| r.uid == uid)
    }
}

/// A stored object as a plan reads it; every other field is skipped unallocated.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Stored {
    #[serde(default)]
    api_version: Option<CompactString>,
    #[serde(default)]
    metadata: StoredMetadata,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StoredMetadata {
    #[serde(default)]
    name: CompactString,
    #[serde(default)]
    namespace: Option<CompactString>,
    #[serde(default)]
    uid: String,
    #[serde(default)]
    finalizers: Option<Vec<String>>,
    /// Present and not null: terminating. Its value does not matter here.
    #[serde(default)]
    deletion_timestamp: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    owner_references: Option<Vec<OwnerReference>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Catalog;
    use serde_json::json;

    fn config_maps() -> std::sync::Arc<ResourceType> {
        Catalog::with_builtins()
            .lookup_kind("v1", "ConfigMap")
            .expect("ConfigMaps are served")
    }

    #[test]
    fn decoding_stored_bytes_reads_what_a_full_decode_reads() {
        let resource = config_maps();
        let object = json!({
            "apiVersion": "v1",
            "data": {"big": "x".repeat(2_000)},
            "kind": "ConfigMap",
            "metadata": {
                "creationTimestamp": "2026-11-28T00:00:00Z",
                "deletionGracePeriodSeconds": 0,
                "deletionTimestamp": "2026-11-28T00:00:01Z",
                "finalizers": ["example.com/cleanup", "foregroundDeletion"],
                "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:data": {}}}],
                "name": "dependent",
                "namespace": "plan",
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "a", "uid": "uid-a",
                     "blockOwnerDeletion": true, "controller": true},
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "b", "uid": "uid-b",
                     "blockOwnerDeletion": null},
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": ""}
                ],
                "uid": "uid-dependent"
            }
        });
        let bytes = serde_json::to_vec(&object).expect("encodes");
        let stored =
            Reached::from_stored(&resource, b"/registry/configmaps/plan/dependent", &bytes)
                .expect("decodes");
        let mut full = Reached::from_object(&resource, object);
        full.body = None;
        assert_eq!(stored, full);
        assert!(stored.terminating);
        assert_eq!(
            stored.references.len(),
            2,
            "the reference without a uid is skipped"
        );
        assert!(stored.references[0].block_owner_deletion);
        assert!(!stored.references[1].block_owner_deletion);
        assert!(stored.references_owner("uid-b"));
        assert_eq!(stored.this.display(), "ConfigMap plan/dependent");
    }

    #[test]
    fn a_live_object_without_references_or_finalizers() {
        let resource = config_maps();
        let bytes = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"n","uid":"u","deletionTimestamp":null}}"#;
        let stored = Reached::from_stored(&resource, b"k", bytes).expect("decodes");
        assert!(
            !stored.terminating,
            "a null deletionTimestamp is not a deletion"
        );
        assert!(stored.finalizers.is_empty() && stored.references.is_empty());
    }

    #[test]
    fn a_value_that_is_not_json_names_its_key() {
        let error = Reached::from_stored(&config_maps(), b"/registry/configmaps/n/a", b"{")
            .expect_err("not JSON");
        assert!(
            error.to_string().contains("/registry/configmaps/n/a"),
            "{error}"
        );
    }
}
