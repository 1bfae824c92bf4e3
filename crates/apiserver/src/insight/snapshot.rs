//! Reads at one store revision, so that every part of a review describes the same moment.
//!
//! A snapshot reads either the server's store ([`Snapshot::latest`]) or a copy of a cluster's
//! objects held in memory ([`Snapshot::of_objects`]): the `finale` CLI builds the latter from
//! its own LIST calls when a cluster does not serve `deletion.finale.dev`, so that the same
//! review code answers on both sides.
//!
//! # Guarantees
//! - Every read of a store snapshot is served at [`Snapshot::revision`]; objects carry the
//!   `resourceVersion` they had at that revision.
//! - An in-memory snapshot answers from the objects it was given, under the same keys the
//!   store uses ([`ResourceType::object_key`]).
//!
//! # Caveats
//! - A review is short, but if compaction overtakes its revision mid-way the read fails with
//!   410 Expired; the caller may simply ask again.
//! - An in-memory copy is only as consistent as the LISTs that filled it: each resource was
//!   listed at its own resourceVersion, and [`Snapshot::revision`] is the newest of them.

use std::collections::BTreeMap;
use std::sync::Arc;

use finale_store::{RangeRequest, Revision, Store, prefix_range};
use serde_json::Value;

use crate::registry::provenance::{self, FinalizerOrigin};
use crate::registry::{served, set_resource_version};
use crate::resources::ResourceType;
use crate::status::{ApiError, ApiResult};

pub struct Snapshot {
    source: Source,
    revision: Revision,
}

enum Source {
    Store(Arc<dyn Store>),
    /// Objects by storage key, each with its `resourceVersion` set.
    Objects(BTreeMap<String, Value>),
}

impl Snapshot {
    /// A snapshot at the store's latest revision.
    pub async fn latest(store: Arc<dyn Store>) -> ApiResult<Snapshot> {
        let revision = store.current_revision().await?;
        Ok(Snapshot {
            source: Source::Store(store),
            revision,
        })
    }

    /// A snapshot of objects held in memory, keyed by [`ResourceType::object_key`] (objects
    /// are served as given); `revision` is what answers report as their resourceVersion.
    pub fn of_objects(objects: BTreeMap<String, Value>, revision: Revision) -> Snapshot {
        Snapshot {
            source: Source::Objects(objects),
            revision,
        }
    }

    /// Whether this snapshot is a copy held in memory rather than the server's store.
    pub fn is_copy(&self) -> bool {
        matches!(self.source, Source::Objects(_))
    }

    pub fn revision(&self) -> Revision {
        self.revision
    }

    /// The revision of the newest change to any API object at or below the snapshot's
    /// revision, when the store can tell cheaply (see [`Store::last_change_in`]); None for a
    /// copy held in memory. A copy of the objects kept current from the watch cache that
    /// has applied exactly the changes up to it is this snapshot.
    pub async fn last_object_change(&self) -> ApiResult<Option<Revision>> {
        match &self.source {
            Source::Objects(_) => Ok(None),
            Source::Store(store) => Ok(store
                .last_change_in(
                    prefix_range(crate::resources::OBJECTS_PREFIX.as_bytes()),
                    self.revision,
                )
                .await?),
        }
    }

    /// The object `namespace/name` of `resource`, None when it does not exist.
    pub async fn get(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> ApiResult<Option<Value>> {
        let namespace = namespace.filter(|_| resource.namespaced);
        let key = resource.object_key(namespace, name);
        let store = match &self.source {
            Source::Objects(objects) => {
                return Ok(objects
                    .get(&key)
                    .cloned()
                    .map(|o| stored_as_served(resource, o)));
            }
            Source::Store(store) => store,
        };
        let key = key.into_bytes();
        let mut end = key.clone();
        end.push(0);
        let response = store
            .range(RangeRequest {
                range: key..end,
                limit: 1,
                revision: self.revision,
            })
            .await?;
        match response.kvs.first() {
            Some(kv) => Ok(Some(stored_as_served(
                resource,
                decode(&kv.key, &kv.value, kv.mod_revision)?,
            ))),
            None => Ok(None),
        }
    }

    /// Who added `object`'s finalizers, and when, as recorded at this revision (see
    /// [`crate::registry::provenance`]); empty when nothing is recorded.
    pub async fn finalizer_provenance(
        &self,
        resource: &ResourceType,
        object: &Value,
    ) -> ApiResult<BTreeMap<String, FinalizerOrigin>> {
        let namespace =
            crate::object::meta_str(object, "namespace").filter(|_| resource.namespaced);
        let object_key = resource.object_key(namespace, crate::object::name(object));
        let key = provenance::side_key(&object_key).into_bytes();
        let mut end = key.clone();
        end.push(0);
        // A client-side copy has no side keys: the server keeps them out of the API.
        let Source::Store(store) = &self.source else {
            return Ok(BTreeMap::new());
        };
        let response = store
            .range(RangeRequest {
                range: key..end,
                limit: 1,
                revision: self.revision,
            })
            .await?;
        Ok(response
            .kvs
            .first()
            .and_then(|kv| provenance::decode(&kv.value))
            .filter(|record| record.uid == crate::object::uid(object))
            .map(|record| record.finalizers)
            .unwrap_or_default())
    }

    /// As [`Snapshot::list`], with each object trimmed to what deletion decisions read (type
    /// meta, the metadata of [`KEPT_METADATA`], and a Namespace's or Pod's `spec` and
    /// `status`): for reading many objects whose bodies do not matter.
    pub async fn list_trimmed(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
    ) -> ApiResult<Vec<Value>> {
        let Source::Store(store) = &self.source else {
            return self.list(resource, namespace).await;
        };
        let keep_body = deletion_reads_body(resource);
        self.range_decoded(store, resource, namespace, |kv| {
            decode_trimmed(&kv.key, &kv.value, kv.mod_revision, keep_body)
                .map(|object| stored_as_served(resource, object))
        })
        .await
    }

    /// Every object of `resource` under `namespace` at this revision, in the caller's own
    /// form: `from_stored` decodes one stored value (its key, bytes and revision; the
    /// stored `apiVersion` is the storage version, see [`served`]), `from_object` converts
    /// one object of an in-memory copy (already served). For callers that read many objects
    /// and keep a few fields of each, without a `serde_json::Value` per object.
    pub async fn list_as<T: Send>(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        from_stored: impl Fn(&finale_store::KeyValue) -> ApiResult<T> + Sync,
        from_object: impl Fn(Value) -> T,
    ) -> ApiResult<Vec<T>> {
        let Source::Store(store) = &self.source else {
            let objects = self.list(resource, namespace).await?;
            return Ok(objects.into_iter().map(from_object).collect());
        };
        self.range_decoded(store, resource, namespace, from_stored)
            .await
    }

    /// Every stored object of `resource` under `namespace` at this revision, each decoded by
    /// `decode`.
    async fn range_decoded<T: Send>(
        &self,
        store: &Arc<dyn Store>,
        resource: &ResourceType,
        namespace: Option<&str>,
        decode: impl Fn(&finale_store::KeyValue) -> ApiResult<T> + Sync,
    ) -> ApiResult<Vec<T>> {
        let prefix = resource.collection_prefix(namespace);
        let response = store
            .range(RangeRequest {
                range: prefix_range(prefix.as_bytes()),
                limit: 0,
                revision: self.revision,
            })
            .await?;
        let decode_one = &decode;
        let threads = std::thread::available_parallelism().map_or(1, usize::from);
        if response.kvs.len() < PARALLEL_DECODE_MIN || threads < 2 {
            return response.kvs.iter().map(decode_one).collect();
        }
        // Decoding is pure CPU work on bytes already read: a plan over ten thousand objects
        // spends most of its time here, so large ranges are decoded on every core at once.
        let chunk = response.kvs.len().div_ceil(threads);
        let decoded: Vec<ApiResult<Vec<T>>> = std::thread::scope(|scope| {
            let workers: Vec<_> = response
                .kvs
                .chunks(chunk)
                .map(|kvs| scope.spawn(move || kvs.iter().map(decode_one).collect()))
                .collect();
            workers
                .into_iter()
                .map(|worker| {
                    worker
                        .join()
                        .unwrap_or_else(|_| Err(ApiError::internal("a decoding thread panicked")))
                })
                .collect()
        });
        let mut objects = Vec::with_capacity(response.kvs.len());
        for part in decoded {
            objects.extend(part?);
        }
        Ok(objects)
    }

    /// Every object of `resource` (in `namespace`, when given and the kind is namespaced).
    pub async fn list(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
    ) -> ApiResult<Vec<Value>> {
        let prefix = resource.collection_prefix(namespace);
        let store = match &self.source {
            Source::Objects(objects) => {
                return Ok(objects
                    .range(prefix.clone()..)
                    .take_while(|(key, _)| key.starts_with(&prefix))
                    .map(|(_, object)| stored_as_served(resource, object.clone()))
                    .collect());
            }
            Source::Store(store) => store,
        };
        self.range_decoded(store, resource, namespace, |kv| {
            decode(&kv.key, &kv.value, kv.mod_revision)
                .map(|object| stored_as_served(resource, object))
        })
        .await
    }
}

/// Whether deletion decisions read the body of `resource`'s objects (a Namespace's
/// `spec.finalizers`, a Pod's grace period, node and phase), not only their metadata.
pub(crate) fn deletion_reads_body(resource: &ResourceType) -> bool {
    resource.is_namespace() || resource.graceful
}

/// Ranges at least this long are decoded on several threads.
const PARALLEL_DECODE_MIN: usize = 2_048;

/// What deletion decisions read of an object: `apiVersion`, `kind`, the metadata fields of
/// [`KEPT_METADATA`], and (for kinds whose body matters to deletion: Namespaces, Pods)
/// `spec` and `status`. Everything else (a ConfigMap's data, other kinds' specs and statuses,
/// `managedFields`) is skipped while parsing, never allocated: a plan over ten thousand objects costs their
/// identity, references and finalizers, not their bodies.
struct Trimmed {
    /// Keep `spec` and `status` (a Pod's grace period reads its phase).
    keep_body: bool,
}

/// The top-level fields [`Trimmed`] tells apart, read without allocating the key.
#[derive(serde::Deserialize)]
#[serde(field_identifier, rename_all = "camelCase")]
enum TopField {
    ApiVersion,
    Kind,
    Metadata,
    Spec,
    Status,
    #[serde(other)]
    Other,
}

/// The metadata deletion decisions read: identity, labels and annotations (selectors and
/// claims), references, finalizers and the deletion fields.
const KEPT_METADATA: [&str; 10] = [
    "name",
    "namespace",
    "uid",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "creationTimestamp",
];

/// A map key as the parser has it: borrowed from the input when it holds no escapes.
struct Key<'de>(std::borrow::Cow<'de, str>);

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> serde::de::Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;

            fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
                formatter.write_str("a field name")
            }

            fn visit_borrowed_str<E>(self, key: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Borrowed(key)))
            }

            fn visit_str<E>(self, key: &str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Owned(key.to_string())))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for Trimmed {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Trimmed {
    type Value = Value;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("an object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(field) = map.next_key::<TopField>()? {
            match field {
                TopField::ApiVersion => {
                    object.insert("apiVersion".into(), map.next_value()?);
                }
                TopField::Kind => {
                    object.insert("kind".into(), map.next_value()?);
                }
                TopField::Spec if self.keep_body => {
                    object.insert("spec".into(), map.next_value()?);
                }
                TopField::Status if self.keep_body => {
                    object.insert("status".into(), map.next_value()?);
                }
                TopField::Metadata => {
                    object.insert("metadata".into(), map.next_value_seed(KeptMetadata)?);
                }
                // Data, and the specs and statuses deletion does not read.
                TopField::Spec | TopField::Status | TopField::Other => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok(Value::Object(object))
    }
}

/// `metadata` as stored, only its [`KEPT_METADATA`] fields (`managedFields`, the bulk, is not).
struct KeptMetadata;

impl<'de> serde::de::DeserializeSeed<'de> for KeptMetadata {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for KeptMetadata {
    type Value = Value;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("object metadata")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut metadata = serde_json::Map::new();
        while let Some(Key(key)) = map.next_key::<Key>()? {
            if KEPT_METADATA.contains(&key.as_ref()) {
                metadata.insert(key.into_owned(), map.next_value()?);
            } else {
                map.next_value::<serde::de::IgnoredAny>()?;
            }
        }
        Ok(Value::Object(metadata))
    }
}

fn decode_trimmed(
    key: &[u8],
    value: &[u8],
    revision: Revision,
    keep_body: bool,
) -> ApiResult<Value> {
    use serde::de::DeserializeSeed;
    let mut deserializer = serde_json::Deserializer::from_slice(value);
    let mut object = Trimmed { keep_body }
        .deserialize(&mut deserializer)
        .map_err(|e| undecodable(key, e))?;
    set_resource_version(&mut object, revision);
    Ok(object)
}

/// The error for a stored value that does not decode: the store holds only what the
/// registry wrote, so this is a server fault, named by its key.
pub(crate) fn undecodable(key: &[u8], error: impl std::fmt::Display) -> ApiError {
    ApiError::internal(format!(
        "stored object at {} is not valid JSON: {error}",
        String::from_utf8_lossy(key)
    ))
}

fn decode(key: &[u8], value: &[u8], revision: Revision) -> ApiResult<Value> {
    let mut object: Value = serde_json::from_slice(value).map_err(|e| undecodable(key, e))?;
    set_resource_version(&mut object, revision);
    Ok(object)
}

/// A stored object as `resource` serves it: converted for a view
/// ([`ResourceType::from_storage`]), with the served `apiVersion`.
fn stored_as_served(resource: &ResourceType, object: Value) -> Value {
    served(resource, resource.from_storage(object))
}
