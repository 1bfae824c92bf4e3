//! The registry: the one place where the object lifecycle is written down.
//!
//! Every write, from HTTP handlers and in-process controllers alike, goes through here:
//! create, update, patch (via the same guarded update), delete and delete-collection, plus the
//! consistent reads (get, list with selectors and pagination) and watches. It knows nothing of
//! HTTP; it speaks JSON objects, [`ResourceType`]s and [`ApiError`]s.
//!
//! Rules carry the ids of `shared/spec/deletion-semantics.md` (D*, U*) and
//! `shared/spec/api-surface.md` sections where they implement one.

use std::sync::Arc;

use base64::Engine;
use finale_store::{
    KeyValue, Precondition, RangeRequest, Revision, Store, TxnOutcome, WriteOp, WriteOutcome,
    prefix_range,
};
use futures::StreamExt;
use rand::Rng;
use serde_json::{Value, json};

mod admit;
pub mod cloud_gc;
pub mod provenance;

pub use admit::manager_from_user_agent;
pub use provenance::Actor;

use crate::deletion::{self, Graceful};
use crate::field_validation::FieldValidation;
use crate::object::{self, metadata_mut};
use crate::patch;
use crate::resources::{Catalog, ResourceType, StatusWrites};
use crate::selectors::{FieldSelector, LabelSelector, object_field};
use crate::status::{ApiError, ApiResult, Details, Target, success_status};
use crate::validation::{self, FieldError};
use crate::watch_cache::{WatchCache, WatchRequest, WatchStream};

/// Largest object the registry stores. etcd's default request limit is 1.5 MiB; keeping
/// objects below it means the etcd backend can hold anything the embedded one can.
pub const MAX_OBJECT_BYTES: usize = 1_500_000;

/// How many times a guarded update re-reads and retries after losing a race with another
/// writer, when the client did not pin a resourceVersion itself.
const UPDATE_RETRIES: usize = 8;

/// N3: namespaces that can never be deleted.
pub const IMMORTAL_NAMESPACES: [&str; 3] = ["default", "kube-system", "kube-public"];

/// P8, word for word.
pub const JOB_ORPHAN_WARNING: &str = "child pods are preserved by default when jobs are deleted; set propagationPolicy=Background to remove them or set propagationPolicy=Orphan to suppress this warning";

/// C3: how many items of a DELETECOLLECTION are deleted at once.
const DELETE_COLLECTION_WORKERS: usize = 32;

/// U1: how many generated names a create tries before giving up.
const GENERATE_NAME_ATTEMPTS: usize = 8;

/// Namespaces that must always exist (api-surface §6.1).
pub const SYSTEM_NAMESPACES: [&str; 4] =
    ["default", "kube-system", "kube-public", "kube-node-lease"];

#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub limit: usize,
    pub continue_token: Option<String>,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
}

#[derive(Clone, Debug, Default)]
pub struct WriteOptions {
    pub dry_run: bool,
    /// Who makes the write, for `managedFields`; None records nothing.
    pub field_manager: Option<String>,
    /// What to do with unknown and duplicate fields (api-surface §6.7).
    pub field_validation: FieldValidation,
    /// Duplicate keys the request body had (found by the decoder, which keeps one of each).
    pub duplicate_fields: Vec<String>,
    /// Who makes the write, for finalizer provenance; None is the server itself.
    pub actor: Option<Actor>,
}

/// A successful create or update.
#[derive(Clone, Debug, PartialEq)]
pub struct Written {
    /// The object as stored (or as it would be, under dry-run).
    pub object: Value,
    /// `Warning` headers for the client.
    pub warnings: Vec<String>,
    /// True when the write created the object (server-side apply upserts).
    pub created: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Preconditions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    pub grace_period_seconds: Option<i64>,
    pub propagation_policy: Option<String>,
    pub orphan_dependents: Option<bool>,
    pub preconditions: Preconditions,
    pub dry_run: bool,
    /// Who deletes, for the provenance of the `orphan`/`foregroundDeletion` finalizers a
    /// delete adds; None is the server itself.
    pub actor: Option<Actor>,
}

/// The body formats of PATCH (api-surface §6.4), server-side apply aside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchFormat {
    /// `application/json-patch+json` (RFC 6902).
    Json,
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/strategic-merge-patch+json`.
    Strategic,
}

/// Which part of an object a write may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subresource {
    /// The main resource: for kinds with a status subresource, `.status` is kept as stored.
    Main,
    /// `/status`: only `.status` changes.
    Status,
    /// A namespace's `/finalize`: only `spec.finalizers` changes (N1).
    Finalize,
    /// `/scale`: the replica count changes, through the object itself.
    Scale,
}

impl Subresource {
    /// The name `managedFields` entries record (`status`), None for the main resource.
    pub fn name(self) -> Option<&'static str> {
        match self {
            Subresource::Main => None,
            Subresource::Status => Some("status"),
            Subresource::Finalize => Some("finalize"),
            Subresource::Scale => Some("scale"),
        }
    }
}

/// The result of a DELETE.
#[derive(Clone, Debug, PartialEq)]
pub struct DeleteResult {
    /// The response body (the object or a success Status, per D12/D7).
    pub body: Value,
    /// True when the object left storage (or would have, under dry-run).
    pub removed: bool,
    /// `Warning` headers for the client (P8).
    pub warnings: Vec<String>,
}

pub struct Registry {
    store: Arc<dyn Store>,
    catalog: Arc<Catalog>,
    watch_cache: Arc<WatchCache>,
}

/// The stored form of an object: JSON without `resourceVersion`, which is the key's
/// `mod_revision` and is filled in on every read.
fn decode(kv: &KeyValue) -> ApiResult<Value> {
    let mut object: Value = serde_json::from_slice(&kv.value).map_err(|e| {
        ApiError::internal(format!(
            "stored object at {} is not valid JSON: {e}",
            String::from_utf8_lossy(&kv.key)
        ))
    })?;
    set_resource_version(&mut object, kv.mod_revision);
    Ok(object)
}

pub fn set_resource_version(object: &mut Value, revision: Revision) {
    metadata_mut(object).insert("resourceVersion".into(), json!(revision.to_string()));
}

fn encode(object: &Value) -> ApiResult<Vec<u8>> {
    let mut stored = object.clone();
    metadata_mut(&mut stored).remove("resourceVersion");
    let bytes = serde_json::to_vec(&stored)
        .map_err(|e| ApiError::internal(format!("cannot encode object: {e}")))?;
    if bytes.len() > MAX_OBJECT_BYTES {
        return Err(ApiError::request_entity_too_large(format!(
            "the object is {} bytes; the limit is {MAX_OBJECT_BYTES} bytes",
            bytes.len()
        )));
    }
    Ok(bytes)
}

pub(crate) fn parse_resource_version(value: &str, what: &str) -> ApiResult<Revision> {
    value.parse::<Revision>().ok().filter(|rv| *rv >= 0).ok_or_else(|| {
        ApiError::bad_request(format!(
            "invalid {what} {value:?}: a resourceVersion is a decimal number returned by the server"
        ))
    })
}

fn target<'a>(resource: &'a ResourceType, name: &'a str) -> Target<'a> {
    Target {
        group: &resource.group,
        resource: &resource.plural,
        name,
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct ContinueToken {
    /// The revision the first page was read at; every page is read there.
    rv: Revision,
    /// The key to resume from (inclusive).
    start: String,
}

fn encode_continue(token: &ContinueToken) -> String {
    let json = serde_json::to_vec(token).unwrap_or_default();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
}

fn decode_continue(token: &str) -> ApiResult<ContinueToken> {
    let bad = || {
        ApiError::bad_request(
            "continue key is not valid: pass back the continue token from the previous list response unchanged",
        )
    };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| bad())?;
    serde_json::from_slice(&bytes).map_err(|_| bad())
}

/// U1: `prefix` cut to 58 bytes (so the name stays within 63) plus 5 random characters from
/// the alphabet upstream uses (no vowels, no confusable characters).
fn generated_name(prefix: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    let suffix: String = (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect();
    let prefix: String = prefix.chars().take(58).collect();
    format!("{prefix}{suffix}")
}

impl Registry {
    pub fn new(store: Arc<dyn Store>, catalog: Arc<Catalog>, watch_cache: Arc<WatchCache>) -> Self {
        Registry {
            store,
            catalog,
            watch_cache,
        }
    }

    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    /// Every committed change, for in-process controllers (see
    /// [`WatchCache::subscribe_changes`]).
    pub fn subscribe_changes(&self) -> crate::watch_cache::ChangeReceiver {
        self.watch_cache.subscribe_changes()
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Creates the system namespaces if they are missing. Safe to run on every start.
    pub async fn bootstrap(&self) -> ApiResult<()> {
        let namespaces = self
            .catalog
            .lookup("", "v1", "namespaces")
            .ok_or_else(|| ApiError::internal("the namespaces resource is not registered"))?;
        for name in SYSTEM_NAMESPACES {
            let object =
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
            match self
                .create(&namespaces, None, object, &WriteOptions::default())
                .await
            {
                Ok(_) => tracing::info!(namespace = name, "created system namespace"),
                Err(e) if e.reason == "AlreadyExists" => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    // ----- finalizer provenance -------------------------------------------------------------

    /// Writes one object change, together with its finalizer provenance record when the
    /// change adds or removes a finalizer ([`provenance`]): both in one store transaction, or
    /// the plain write when the finalizers did not change. `before` and `after` are the object
    /// before and after (None: absent). The outcome is the object write's; a conflict on the
    /// record alone reports the object as it is, so the caller's retry re-reads both.
    #[allow(clippy::too_many_arguments)]
    async fn commit(
        &self,
        key: &str,
        op: WriteOp,
        precondition: Precondition,
        before: Option<&Value>,
        after: Option<&Value>,
        actor: Option<&Actor>,
    ) -> ApiResult<WriteOutcome> {
        if provenance::finalizer_set(before) == provenance::finalizer_set(after) {
            return Ok(self.store.write(op, precondition).await?);
        }
        let side_key = provenance::side_key(key);
        let (side, _) = self.store.get(side_key.as_bytes()).await?;
        let previous = side.as_ref().and_then(|kv| provenance::decode(&kv.value));
        let server = Actor {
            user: provenance::IN_PROCESS_USER.to_string(),
            user_agent: String::new(),
        };
        let record = provenance::next(
            previous.as_ref(),
            before,
            after,
            actor.unwrap_or(&server),
            &object::now(),
        );
        let side_precondition =
            Precondition::ModRevision(side.as_ref().map_or(0, |kv| kv.mod_revision));
        let side_op = match (record, &side) {
            (Some(record), _) => WriteOp::Put {
                key: side_key.into_bytes(),
                value: serde_json::to_vec(&record).map_err(|e| {
                    ApiError::internal(format!("cannot encode a finalizer provenance record: {e}"))
                })?,
            },
            (None, Some(_)) => WriteOp::Delete {
                key: side_key.into_bytes(),
            },
            (None, None) => return Ok(self.store.write(op, precondition).await?),
        };
        // The record first, so the object's revision is the transaction's last: a read at the
        // store's revision right after sees the object at exactly that revision.
        match self
            .store
            .write_all(vec![(side_op, side_precondition), (op, precondition)])
            .await?
        {
            TxnOutcome::Committed(mut results) => match results.pop() {
                Some(result) => Ok(WriteOutcome::Committed(result)),
                None => Err(ApiError::internal(
                    "the store committed a transaction without results",
                )),
            },
            TxnOutcome::PreconditionFailed { mut current } => {
                Ok(WriteOutcome::PreconditionFailed {
                    current: current.pop().flatten(),
                })
            }
        }
    }

    /// The finalizer provenance record of the object stored at `object_key`, at the latest
    /// revision; None when it has none (or the record is of another incarnation).
    pub async fn finalizer_provenance(
        &self,
        object_key: &str,
        uid: &str,
    ) -> ApiResult<Option<provenance::Provenance>> {
        let (side, _) = self
            .store
            .get(provenance::side_key(object_key).as_bytes())
            .await?;
        Ok(side
            .and_then(|kv| provenance::decode(&kv.value))
            .filter(|record| record.uid == uid))
    }

    // ----- reads -------------------------------------------------------------------------

    pub async fn get(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> ApiResult<Value> {
        let key = resource.object_key(namespace, name);
        let (kv, _) = self.store.get(key.as_bytes()).await?;
        let kv = kv.ok_or_else(|| ApiError::not_found(target(resource, name)))?;
        Ok(served(resource, decode(&kv)?))
    }

    /// api-surface §5: a consistent list at one revision, filtered by selectors, paginated
    /// with `limit`/`continue` so that every page is read at the first page's revision.
    pub async fn list(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        options: &ListOptions,
    ) -> ApiResult<Value> {
        let labels = parse_label_selector(options.label_selector.as_deref())?;
        let fields = parse_field_selector(resource, options.field_selector.as_deref())?;
        let collection = resource.collection_prefix(namespace);
        let full_range = prefix_range(collection.as_bytes());

        let (mut revision, mut start) =
            match options.continue_token.as_deref().filter(|t| !t.is_empty()) {
                Some(token) => {
                    let token = decode_continue(token)?;
                    if !token.start.starts_with(&collection) {
                        return Err(ApiError::bad_request(
                            "continue key does not belong to this collection",
                        ));
                    }
                    (token.rv, token.start.into_bytes())
                }
                None => (self.list_revision(options).await?, full_range.start.clone()),
            };

        // A selector on one name within one namespace (what `kubectl wait` and kube-rs
        // `await_condition` send) reads that key alone rather than scanning the collection.
        let mut end = full_range.end.clone();
        if let Some(name) = fields.as_ref().and_then(FieldSelector::single_name)
            && (namespace.is_some() || !resource.namespaced)
            && options.continue_token.is_none()
        {
            start = resource.object_key(namespace, name).into_bytes();
            end = start.clone();
            end.push(0);
        }

        let mut items = Vec::new();
        let mut next_start: Option<Vec<u8>> = None;
        let page = if options.limit == 0 {
            0
        } else {
            options.limit.max(1)
        };
        loop {
            let batch_limit = if page == 0 {
                0
            } else {
                (page - items.len()).max(page / 2).max(16)
            };
            let response = self
                .store
                .range(RangeRequest { range: start.clone()..end.clone(), limit: batch_limit, revision })
                .await
                .map_err(|e| match e {
                    finale_store::StoreError::Compacted { .. } if options.continue_token.is_some() => ApiError::expired(
                        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                    ),
                    other => other.into(),
                })?;
            revision = response.revision;
            let mut last_key = None;
            for kv in &response.kvs {
                last_key = Some(kv.key.clone());
                let object = decode(kv)?;
                if matches_selectors(&object, labels.as_ref(), fields.as_ref()) {
                    items.push(object);
                    if page != 0 && items.len() == page {
                        // Stop exactly at the limit; resume after this key.
                        let mut resume = kv.key.clone();
                        resume.push(0);
                        next_start = Some(resume);
                        break;
                    }
                }
            }
            if next_start.is_some() {
                // Only hand out a token if something may follow.
                let after = next_start.clone().unwrap_or_default();
                let probe = self
                    .store
                    .range(RangeRequest {
                        range: after.clone()..end.clone(),
                        limit: 1,
                        revision,
                    })
                    .await?;
                if probe.kvs.is_empty() {
                    next_start = None;
                }
                break;
            }
            match (response.more, last_key) {
                (true, Some(mut key)) => {
                    key.push(0);
                    start = key;
                }
                _ => break,
            }
        }

        for item in &mut items {
            strip_type_meta(item);
        }
        let mut metadata = json!({"resourceVersion": revision.to_string()});
        if let Some(next) = next_start {
            metadata["continue"] = json!(encode_continue(&ContinueToken {
                rv: revision,
                start: String::from_utf8_lossy(&next).into_owned(),
            }));
        }
        Ok(json!({
            "kind": resource.list_kind,
            "apiVersion": resource.api_version(),
            "metadata": metadata,
            "items": items,
        }))
    }

    /// Which revision a list (first page) reads at: api-surface §5 `resourceVersion` rules.
    async fn list_revision(&self, options: &ListOptions) -> ApiResult<Revision> {
        let requested = options
            .resource_version
            .as_deref()
            .filter(|rv| !rv.is_empty());
        match (
            options
                .resource_version_match
                .as_deref()
                .filter(|m| !m.is_empty()),
            requested,
        ) {
            (Some(_), None) => Err(ApiError::bad_request(
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            )),
            (Some("Exact"), Some(rv)) => {
                let rv = parse_resource_version(rv, "resourceVersion")?;
                if rv == 0 {
                    return Err(ApiError::bad_request(
                        "resourceVersionMatch \"Exact\" is forbidden for resourceVersion \"0\"",
                    ));
                }
                Ok(rv)
            }
            (Some("NotOlderThan") | None, Some(rv)) => {
                let rv = parse_resource_version(rv, "resourceVersion")?;
                let current = self.store.current_revision().await?;
                if rv > current {
                    return Err(finale_store::StoreError::FutureRevision {
                        requested: rv,
                        current,
                    }
                    .into());
                }
                Ok(0)
            }
            (Some(other), Some(_)) => Err(ApiError::bad_request(format!(
                "resourceVersionMatch {other:?} is not supported: use \"Exact\" or \"NotOlderThan\""
            ))),
            (None, None) => Ok(0),
        }
    }

    pub async fn watch(
        &self,
        resource: Arc<ResourceType>,
        namespace: Option<&str>,
        options: &ListOptions,
        send_initial_events: bool,
    ) -> ApiResult<WatchStream> {
        let labels = parse_label_selector(options.label_selector.as_deref())?;
        let fields = parse_field_selector(&resource, options.field_selector.as_deref())?;
        let after = match options
            .resource_version
            .as_deref()
            .filter(|rv| !rv.is_empty())
        {
            Some(rv) => Some(parse_resource_version(rv, "resourceVersion")?).filter(|rv| *rv > 0),
            None => None,
        };
        // Without a starting revision (or with sendInitialEvents) the watch begins with the
        // current state as ADDED events, read at one revision.
        let initial = if after.is_none() || send_initial_events {
            let snapshot = self
                .list(
                    &resource,
                    namespace,
                    &ListOptions {
                        label_selector: options.label_selector.clone(),
                        field_selector: options.field_selector.clone(),
                        ..ListOptions::default()
                    },
                )
                .await?;
            let revision = snapshot
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .and_then(|rv| rv.parse().ok())
                .unwrap_or(0);
            let items = snapshot
                .get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            Some((items, revision))
        } else {
            None
        };
        let (initial_objects, after_revision) = match initial {
            Some((items, revision)) => (Some(items), revision),
            None => (None, after.unwrap_or(0)),
        };
        Ok(self.watch_cache.watch(WatchRequest {
            resource,
            namespace: namespace.map(str::to_string),
            labels,
            fields,
            after_revision,
            initial_objects,
            send_initial_events_end: send_initial_events,
        }))
    }

    // ----- create ------------------------------------------------------------------------

    /// POST: api-surface §6.2.
    pub async fn create(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        mut object: Value,
        options: &WriteOptions,
    ) -> ApiResult<Written> {
        check_type_meta(resource, &object)?;
        if resource.definition_terminating {
            return Err(ApiError::method_not_allowed(
                "create not allowed while custom resource definition is terminating",
            ));
        }
        let namespace = effective_namespace(resource, namespace, &object)?;

        let metadata = metadata_mut(&mut object);
        let generate_name = metadata
            .get("generateName")
            .and_then(Value::as_str)
            .map(str::to_string);
        let mut name = metadata
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let mut errors = Vec::new();
        let name_was_generated =
            name.is_empty() && generate_name.as_deref().is_some_and(|g| !g.is_empty());
        if name.is_empty()
            && let Some(prefix) = generate_name.as_deref().filter(|g| !g.is_empty())
        {
            errors.extend(validation::validate_generate_name(
                prefix,
                resource.name_rule,
            ));
            name = generated_name(prefix);
        }
        if metadata
            .get("resourceVersion")
            .and_then(Value::as_str)
            .is_some_and(|rv| !rv.is_empty())
        {
            return Err(ApiError::bad_request(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        // Server-owned fields: anything the client sent is replaced (F2).
        metadata.insert("name".into(), json!(name));
        if let Some(ns) = &namespace {
            metadata.insert("namespace".into(), json!(ns));
        } else {
            metadata.remove("namespace");
        }
        metadata.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        metadata.insert("creationTimestamp".into(), json!(object::now()));
        if resource.tracks_generation {
            metadata.insert("generation".into(), json!(1));
        } else {
            metadata.remove("generation");
        }
        for field in [
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
        ] {
            metadata.remove(field);
        }
        if let Some(manager) = &options.field_manager {
            validate_field_manager(manager)?;
        }
        if resource.status_subresource && !resource.group.is_empty() {
            // api-surface §6.2: a create ignores .status where a status subresource exists
            // (built-in workloads start with an empty status).
            if let Some(map) = object.as_object_mut() {
                map.remove("status");
            }
        }
        if let Some(hook) = resource.defaulting {
            hook(&mut object);
        }
        if let Some(hook) = resource.write_defaults {
            hook(&mut object);
        }
        set_type_meta(resource, &mut object);
        object::drop_empty_metadata_fields(&mut object);
        let admission = admit::admit_content(resource, &mut object, None, options)?;
        errors.extend(admission.errors);
        if let Some(manager) = &options.field_manager {
            admit::record_manager(resource, None, &mut object, manager, None);
        }
        let mut warnings = admission.warnings;
        warnings.extend(
            admit::unclaimed_finalizer_warnings(
                &self.store,
                &self.catalog,
                resource,
                &object,
                None,
            )
            .await,
        );

        errors.extend(validate_object(resource, &object, namespace.as_deref()));
        if !errors.is_empty() {
            return Err(ApiError::invalid(
                &resource.kind,
                &resource.group,
                &name,
                &errors,
            ));
        }
        if let Some(ns) = &namespace {
            // N5: admission runs before a name is generated, so it names the generateName.
            let shown = match (&generate_name, name_was_generated) {
                (Some(prefix), true) => prefix.as_str(),
                _ => name.as_str(),
            };
            self.check_namespace_accepts_creates(ns, resource, shown)
                .await?;
        }

        let generated = name_was_generated;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let key = resource.object_key(namespace.as_deref(), &name);
            let bytes = encode(&object)?;
            let clash = if options.dry_run {
                match self.store.get(key.as_bytes()).await? {
                    (Some(existing), _) => Some(Some(existing)),
                    (None, _) => None,
                }
            } else {
                match self
                    .commit(
                        &key,
                        WriteOp::Put {
                            key: key.clone().into_bytes(),
                            value: bytes,
                        },
                        Precondition::MustNotExist,
                        None,
                        Some(&object),
                        options.actor.as_ref(),
                    )
                    .await?
                {
                    WriteOutcome::Committed(result) => {
                        set_resource_version(&mut object, result.revision);
                        return Ok(Written {
                            object: served(resource, object),
                            warnings,
                            created: true,
                        });
                    }
                    WriteOutcome::PreconditionFailed { current } => Some(current),
                }
            };
            let Some(existing) = clash else {
                return Ok(Written {
                    object: served(resource, object),
                    warnings,
                    created: true,
                });
            };
            // U1: a generated name that clashes is generated again, up to 8 tries.
            if generated && attempts < GENERATE_NAME_ATTEMPTS {
                name =
                    generated_name(object::meta_str(&object, "generateName").unwrap_or_default());
                metadata_mut(&mut object).insert("name".into(), json!(name));
                continue;
            }
            let mut error = ApiError::already_exists(target(resource, &name));
            if generated {
                error.message = format!(
                    "{}, the server was not able to generate a unique name for the object",
                    error.message
                );
                if let Some(details) = error.details.as_mut() {
                    details.retry_after_seconds = Some(1);
                }
            } else if existing
                .as_ref()
                .and_then(|kv| decode(kv).ok())
                .is_some_and(|o| object::is_terminating(&o))
            {
                // U2
                error.message = format!("object is being deleted: {}", error.message);
            }
            return Err(error);
        }
    }

    /// Namespaced creates need a namespace that exists and is not terminating (N5).
    async fn check_namespace_accepts_creates(
        &self,
        namespace: &str,
        resource: &ResourceType,
        name: &str,
    ) -> ApiResult<()> {
        let key = format!("/registry/core/namespaces/{namespace}");
        let (kv, _) = self.store.get(key.as_bytes()).await?;
        let kv = kv.ok_or_else(|| ApiError::namespace_not_found(namespace))?;
        let ns = decode(&kv)?;
        if object::is_terminating(&ns) {
            return Err(ApiError::forbidden(format!(
                "{} \"{name}\" is forbidden: unable to create new content in namespace {namespace} because it is being terminated",
                target(resource, name).qualified_resource()
            ))
            .with_details(Details {
                name: name.to_string(),
                group: resource.group.clone(),
                kind: resource.plural.clone(),
                causes: vec![crate::status::Cause {
                    reason: "NamespaceTerminating".into(),
                    message: format!("namespace {namespace} is being terminated"),
                    field: "metadata.namespace".into(),
                }],
                ..Details::default()
            }));
        }
        Ok(())
    }

    // ----- update ------------------------------------------------------------------------

    /// PUT: api-surface §6.3. A body `resourceVersion` is an optimistic-concurrency
    /// precondition; without one the update applies to whatever is stored.
    pub async fn update(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        object: Value,
        subresource: Subresource,
        options: &WriteOptions,
    ) -> ApiResult<Written> {
        check_type_meta(resource, &object)?;
        let body_name = object::name(&object);
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        effective_namespace(resource, namespace, &object)?;
        let pinned = object::meta_str(&object, "resourceVersion")
            .filter(|rv| !rv.is_empty())
            .map(|rv| parse_resource_version(rv, "metadata.resourceVersion"))
            .transpose()?;
        self.guarded_update(
            resource,
            namespace,
            name,
            pinned,
            subresource,
            options,
            move |_current| Ok(object.clone()),
        )
        .await
    }

    /// The optimistic-concurrency loop behind PUT and PATCH: read, compute the new object
    /// with `mutate`, apply the lifecycle rules, write conditioned on the revision read.
    #[allow(clippy::too_many_arguments)]
    pub async fn guarded_update<F>(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        pinned_revision: Option<Revision>,
        subresource: Subresource,
        options: &WriteOptions,
        mutate: F,
    ) -> ApiResult<Written>
    where
        F: Fn(&Value) -> ApiResult<Value>,
    {
        if let Some(manager) = &options.field_manager {
            validate_field_manager(manager)?;
        }
        let key = resource.object_key(namespace, name);
        let mut attempts = 0;
        loop {
            attempts += 1;
            let (kv, _) = self.store.get(key.as_bytes()).await?;
            let kv = kv.ok_or_else(|| ApiError::not_found(target(resource, name)))?;
            if pinned_revision.is_some_and(|rv| rv != kv.mod_revision) {
                return Err(ApiError::stale_resource_version(target(resource, name)));
            }
            let current = decode(&kv)?;
            let requested = mutate(&current)?;
            if !requested.is_object() {
                return Err(ApiError::bad_request("the object must be a JSON object"));
            }
            check_type_meta(resource, &requested)?;
            let mut candidate = prepare_update(resource, &current, requested, subresource)?;
            let admission =
                admit::admit_content(resource, &mut candidate, Some(&current), options)?;
            let mut warnings = admission.warnings;
            warnings.extend(
                admit::unclaimed_finalizer_warnings(
                    &self.store,
                    &self.catalog,
                    resource,
                    &candidate,
                    Some(&current),
                )
                .await,
            );
            let mut errors = admission.errors;
            errors.extend(validate_object(resource, &candidate, namespace));
            if !errors.is_empty() {
                return Err(ApiError::invalid(
                    &resource.kind,
                    &resource.group,
                    name,
                    &errors,
                ));
            }

            // U7: the last finalizer of a terminating object is gone, so the update
            // completes the deletion instead of storing the object. Nothing new is stored,
            // so the answer keeps the revision it was read at.
            if update_finishes_deletion(resource, &current, &candidate) {
                let done = Written {
                    object: served(resource, candidate),
                    warnings,
                    created: false,
                };
                if options.dry_run {
                    return Ok(done);
                }
                match self
                    .commit(
                        &key,
                        WriteOp::Delete {
                            key: key.clone().into_bytes(),
                        },
                        Precondition::ModRevision(kv.mod_revision),
                        Some(&current),
                        None,
                        options.actor.as_ref(),
                    )
                    .await?
                {
                    // A concurrent remover winning is fine.
                    WriteOutcome::Committed(_)
                    | WriteOutcome::PreconditionFailed { current: None } => return Ok(done),
                    WriteOutcome::PreconditionFailed { current: Some(_) } => {
                        if pinned_revision.is_some() || attempts >= UPDATE_RETRIES {
                            return Err(ApiError::stale_resource_version(target(resource, name)));
                        }
                        continue;
                    }
                }
            }

            let unchanged = strip_resource_version(&candidate) == strip_resource_version(&current);
            if unchanged {
                return Ok(Written {
                    object: served(resource, current),
                    warnings,
                    created: false,
                });
            }
            if let Some(manager) = &options.field_manager {
                admit::record_manager(
                    resource,
                    Some(&current),
                    &mut candidate,
                    manager,
                    subresource.name(),
                );
            }
            if options.dry_run {
                return Ok(Written {
                    object: served(resource, candidate),
                    warnings,
                    created: false,
                });
            }
            match self
                .commit(
                    &key,
                    WriteOp::Put {
                        key: key.clone().into_bytes(),
                        value: encode(&candidate)?,
                    },
                    Precondition::ModRevision(kv.mod_revision),
                    Some(&current),
                    Some(&candidate),
                    options.actor.as_ref(),
                )
                .await?
            {
                WriteOutcome::Committed(result) => {
                    let mut stored = candidate;
                    set_resource_version(&mut stored, result.revision);
                    return Ok(Written {
                        object: served(resource, stored),
                        warnings,
                        created: false,
                    });
                }
                WriteOutcome::PreconditionFailed { current: None } => {
                    return Err(ApiError::not_found(target(resource, name)));
                }
                WriteOutcome::PreconditionFailed { current: Some(_) } => {
                    if pinned_revision.is_some() || attempts >= UPDATE_RETRIES {
                        return Err(ApiError::stale_resource_version(target(resource, name)));
                    }
                }
            }
        }
    }

    /// PATCH in any of the formats of api-surface §6.4, through the same guarded update as
    /// PUT. A `metadata.resourceVersion` the patch sets is a precondition (§6.1).
    #[allow(clippy::too_many_arguments)]
    pub async fn patch(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        format: PatchFormat,
        patch: &Value,
        subresource: Subresource,
        options: &WriteOptions,
    ) -> ApiResult<Written> {
        let format = match format {
            // Strategic merge patch is defined for built-in kinds only; other kinds are
            // patched as JSON merge patches, as upstream does for custom resources.
            PatchFormat::Strategic if !resource.builtin => PatchFormat::Merge,
            other => other,
        };
        let mutate = |current: &Value| -> ApiResult<Value> {
            let patched = apply_patch_format(format, current, patch)?;
            if object::meta_str(&patched, "resourceVersion")
                != object::meta_str(current, "resourceVersion")
            {
                return Err(ApiError::stale_resource_version(target(resource, name)));
            }
            let patched_name = object::name(&patched);
            if patched_name != name {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({patched_name}) does not match the name on the URL ({name}): a patch cannot rename an object"
                )));
            }
            Ok(patched)
        };
        self.guarded_update(
            resource,
            namespace,
            name,
            None,
            subresource,
            options,
            mutate,
        )
        .await
    }

    /// Server-side apply (api-surface §6.6): merges `applied` into the object under
    /// `fieldManager`'s ownership, creating the object when it does not exist (201).
    #[allow(clippy::too_many_arguments)]
    pub async fn apply(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        mut applied: Value,
        subresource: Subresource,
        force: bool,
        options: &WriteOptions,
    ) -> ApiResult<Written> {
        let manager = options
            .field_manager
            .clone()
            .filter(|m| !m.is_empty())
            .ok_or_else(|| {
                ApiError::invalid(
                    "PatchOptions",
                    "meta.k8s.io",
                    "",
                    &[FieldError::required(
                        "fieldManager",
                        "is required for apply patch",
                    )],
                )
            })?;
        validate_field_manager(&manager)?;
        check_applied_config(resource, name, &applied)?;
        if subresource == Subresource::Main
            && resource.status_subresource
            && let Some(map) = applied.as_object_mut()
        {
            // §6.6 rule 5: the main resource ignores .status where a status subresource exists.
            map.remove("status");
        }
        // The engine records ownership itself; the update path must not record it again.
        let inner = WriteOptions {
            field_manager: None,
            ..options.clone()
        };
        let merge_schema = admit::merge_schema(resource);
        let api_version = resource.api_version();
        for _ in 0..UPDATE_RETRIES {
            let now = object::now();
            let engine = |live: Option<&Value>| -> ApiResult<Value> {
                patch::server_side_apply(&patch::ApplyRequest {
                    live,
                    applied: &applied,
                    manager: &manager,
                    force,
                    subresource: subresource.name(),
                    api_version: &api_version,
                    now: &now,
                    schema: merge_schema.as_ref(),
                })
                .map_err(|error| apply_error(resource, name, error))
            };
            let exists = self
                .store
                .get(resource.object_key(namespace, name).as_bytes())
                .await?
                .0
                .is_some();
            if !exists {
                if subresource != Subresource::Main {
                    return Err(ApiError::not_found(target(resource, name)));
                }
                let mut object = engine(None)?;
                metadata_mut(&mut object).insert("name".into(), json!(name));
                match self.create(resource, namespace, object, &inner).await {
                    Err(e) if e.reason == "AlreadyExists" => continue,
                    other => return other,
                }
            }
            let result = self
                .guarded_update(
                    resource,
                    namespace,
                    name,
                    None,
                    subresource,
                    &inner,
                    |current| {
                        let merged = engine(Some(current))?;
                        if object::meta_str(&merged, "resourceVersion")
                            != object::meta_str(current, "resourceVersion")
                        {
                            return Err(ApiError::stale_resource_version(target(resource, name)));
                        }
                        Ok(merged)
                    },
                )
                .await;
            match result {
                // Deleted between the read and the update: apply creates it again.
                Err(e) if e.code == 404 => continue,
                other => return other,
            }
        }
        Err(ApiError::stale_resource_version(target(resource, name)))
    }

    // ----- delete ------------------------------------------------------------------------

    /// DELETE of one object: deletion-semantics §3 (D1–D14), §4 (GC finalizers) and §6
    /// (graceful deletion), and §10 N3/N4 for namespaces.
    pub async fn delete(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
    ) -> ApiResult<DeleteResult> {
        validate_delete_options(options)?;
        let is_namespace = resource.is_namespace();
        // N3: the namespaces the system lives in cannot be deleted.
        if is_namespace && IMMORTAL_NAMESPACES.contains(&name) {
            return Err(ApiError::forbidden(format!(
                "namespaces \"{name}\" is forbidden: this namespace may not be deleted"
            ))
            .with_details(Details {
                name: name.to_string(),
                kind: "namespaces".into(),
                ..Details::default()
            }));
        }
        let warnings = job_orphan_warning(resource, options);
        let key = resource.object_key(namespace, name);
        let mut attempts = 0;
        loop {
            attempts += 1;
            // D1
            let (kv, _) = self.store.get(key.as_bytes()).await?;
            let kv = kv.ok_or_else(|| ApiError::not_found(target(resource, name)))?;
            let stored = decode(&kv)?;
            if is_namespace {
                // N4.1: a uid precondition is always in force, reported in storage's words.
                check_namespace_preconditions(name, &stored, &options.preconditions)?;
            } else {
                // D3.2: preconditions fail early, naming the Kind.
                check_delete_preconditions(resource, name, &stored, &options.preconditions)?;
            }

            let plan = if is_namespace {
                plan_namespace_delete(resource, &stored, options)
            } else if resource.is_crd() && !object::is_terminating(&stored) {
                plan_first_crd_delete(&stored)
            } else {
                plan_delete(resource, &stored, options)
            };
            let (next, remove_after) = match plan {
                // D4 / N4.3: nothing to write; answer with what is stored.
                DeletePlan::Pending => {
                    return Ok(DeleteResult {
                        body: stored,
                        removed: false,
                        warnings,
                    });
                }
                DeletePlan::RemoveNow => (None, true),
                DeletePlan::Update {
                    object,
                    then_remove,
                } => (Some(object), then_remove),
            };

            let mut last = stored.clone();
            let mut revision = kv.mod_revision;
            if let Some(mut updated) = next {
                // D6: the mark-terminating (or grace-shortening, or GC-finalizer) update.
                if !options.dry_run {
                    match self
                        .commit(
                            &key,
                            WriteOp::Put {
                                key: key.clone().into_bytes(),
                                value: encode(&updated)?,
                            },
                            Precondition::ModRevision(kv.mod_revision),
                            Some(&stored),
                            Some(&updated),
                            options.actor.as_ref(),
                        )
                        .await?
                    {
                        WriteOutcome::Committed(result) => {
                            set_resource_version(&mut updated, result.revision);
                            revision = result.revision;
                        }
                        WriteOutcome::PreconditionFailed { current: None } => {
                            return Err(ApiError::not_found(target(resource, name)));
                        }
                        WriteOutcome::PreconditionFailed { current: Some(_) }
                            if attempts < UPDATE_RETRIES =>
                        {
                            continue;
                        }
                        WriteOutcome::PreconditionFailed { current: Some(_) } => {
                            return Err(ApiError::stale_resource_version(target(resource, name)));
                        }
                    }
                }
                if !remove_after {
                    // D7: the object stays; the body is the updated object.
                    return Ok(DeleteResult {
                        body: updated,
                        removed: false,
                        warnings,
                    });
                }
                last = updated;
            }

            // D9: dry-run answers as the real delete would, touching nothing.
            if options.dry_run {
                return Ok(DeleteResult {
                    body: deleted_body(resource, name, last),
                    removed: true,
                    warnings,
                });
            }
            // D10: conditional on the revision observed (D8: rebased onto our own update);
            // the deleted object carries the revision of the delete.
            match self
                .commit(
                    &key,
                    WriteOp::Delete {
                        key: key.clone().into_bytes(),
                    },
                    Precondition::ModRevision(revision),
                    Some(&last),
                    None,
                    options.actor.as_ref(),
                )
                .await?
            {
                WriteOutcome::Committed(result) => {
                    set_resource_version(&mut last, result.revision);
                    return Ok(DeleteResult {
                        body: deleted_body(resource, name, last),
                        removed: true,
                        warnings,
                    });
                }
                // D7/D11: after our own grace-0 update, another remover winning is fine.
                WriteOutcome::PreconditionFailed { current: None }
                    if revision != kv.mod_revision =>
                {
                    return Ok(DeleteResult {
                        body: deleted_body(resource, name, last),
                        removed: true,
                        warnings,
                    });
                }
                WriteOutcome::PreconditionFailed { current: None } => {
                    return Err(ApiError::not_found(target(resource, name)));
                }
                WriteOutcome::PreconditionFailed { current: Some(_) }
                    if attempts < UPDATE_RETRIES =>
                {
                    continue;
                }
                WriteOutcome::PreconditionFailed { current: Some(_) } => {
                    return Err(ApiError::stale_resource_version(target(resource, name)));
                }
            }
        }
    }

    /// DELETECOLLECTION (C1–C5): every object the selectors match goes through the
    /// single-object [`Registry::delete`]; the answer lists the items as they were before.
    /// With `limit`, only that one page is processed and the answer carries `continue`.
    pub async fn delete_collection(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        list_options: &ListOptions,
        options: &DeleteOptions,
    ) -> ApiResult<(Value, Vec<String>)> {
        if resource.namespaced && namespace.is_none() {
            // C1: the all-namespaces path of a namespaced kind serves list and watch only.
            return Err(ApiError::method_not_allowed(
                "the server does not allow this method on the requested resource",
            ));
        }
        validate_delete_options(options)?;
        if resource.is_namespace() {
            // N2
            return Err(ApiError::method_not_allowed(
                "the namespaces resource does not support deletecollection",
            ));
        }
        let listed = self.list(resource, namespace, list_options).await?;
        let items = listed
            .get("items")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        // C3: every item goes through the single-object delete. Upstream runs
        // `--delete-collection-workers` (default 1) at a time; running several lets the
        // store's group commit share one fsync among them, which is what makes a namespace
        // of 10 000 objects go in seconds. Per-item NotFound is ignored; the first other
        // error is the answer (items already deleted stay deleted, as upstream).
        let mut pending = Vec::with_capacity(items.len());
        for item in &items {
            let name = object::name(item).to_string();
            let item_namespace = object::meta_str(item, "namespace").map(str::to_string);
            pending.push(async move {
                self.delete(
                    resource,
                    item_namespace.as_deref().or(namespace),
                    &name,
                    options,
                )
                .await
            });
        }
        // Collected first: a closure inside the stream trips the compiler's Send inference
        // for the spawned controllers that call this.
        let mut deletions =
            futures::stream::iter(pending).buffer_unordered(DELETE_COLLECTION_WORKERS);
        while let Some(result) = deletions.next().await {
            match result {
                Ok(_) => {}
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok((listed, job_orphan_warning(resource, options)))
    }
}

/// What one DELETE does to a stored object.
enum DeletePlan {
    /// D4: nothing to write.
    Pending,
    /// D5: no update needed; remove it.
    RemoveNow,
    /// D6: write `object`; then remove it too when `then_remove` (graceful with grace 0).
    Update { object: Value, then_remove: bool },
}

/// D3.3–D7 for every kind but namespaces.
fn plan_delete(resource: &ResourceType, stored: &Value, options: &DeleteOptions) -> DeletePlan {
    let graceful = if resource.graceful {
        deletion::check_graceful(stored, options, chrono::Utc::now())
    } else {
        Graceful::No
    };
    if graceful == Graceful::Pending {
        return DeletePlan::Pending;
    }
    let stored_finalizers = object::finalizers(stored);
    let gc_change = deletion::gc_finalizers(&stored_finalizers, resource.gc_policy, options);
    let finalizers = gc_change
        .clone()
        .unwrap_or_else(|| stored_finalizers.clone());
    let graceful_set = matches!(graceful, Graceful::Set { .. });
    if !graceful_set && stored_finalizers.is_empty() && gc_change.is_none() {
        return DeletePlan::RemoveNow;
    }
    if !graceful_set && finalizers.is_empty() {
        // D6: the GC finalizers went away and nothing else holds the object.
        return DeletePlan::RemoveNow;
    }
    let mut updated = stored.clone();
    let metadata = metadata_mut(&mut updated);
    if gc_change.is_some() {
        if finalizers.is_empty() {
            metadata.remove("finalizers");
        } else {
            metadata.insert("finalizers".into(), json!(finalizers));
        }
    }
    let first_time = !object::is_terminating(stored);
    match &graceful {
        Graceful::Set {
            deletion_timestamp,
            grace_seconds,
            ..
        } => {
            metadata.insert("deletionTimestamp".into(), json!(deletion_timestamp));
            metadata.insert("deletionGracePeriodSeconds".into(), json!(grace_seconds));
        }
        _ => {
            // markAsDeleting: now, unless already set to a time not after now; grace 0.
            let now = chrono::Utc::now();
            let keep = metadata
                .get("deletionTimestamp")
                .and_then(Value::as_str)
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .is_some_and(|t| t.with_timezone(&chrono::Utc) <= now);
            if !keep {
                metadata.insert("deletionTimestamp".into(), json!(object::timestamp(now)));
            }
            metadata.insert("deletionGracePeriodSeconds".into(), json!(0));
        }
    }
    // D14: generation bumps on first entry into terminating, for kinds that track it.
    if first_time
        && let Some(generation) = metadata
            .get("generation")
            .and_then(Value::as_i64)
            .filter(|g| *g > 0)
    {
        metadata.insert("generation".into(), json!(generation + 1));
    }
    // D7: finalizers keep the object; so does a grace period still running.
    let grace_zero = matches!(
        graceful,
        Graceful::Set {
            grace_seconds: 0,
            ..
        }
    );
    let then_remove = finalizers.is_empty() && grace_zero;
    if updated == *stored {
        // A repeated DELETE that changes nothing writes nothing (scenario 4).
        return if then_remove {
            DeletePlan::RemoveNow
        } else {
            DeletePlan::Pending
        };
    }
    DeletePlan::Update {
        object: updated,
        then_remove,
    }
}

/// N4.2–N4.4: a namespace is marked Terminating (no grace period) and stays until its
/// `spec.finalizers` and `metadata.finalizers` are empty.
fn plan_namespace_delete(
    resource: &ResourceType,
    stored: &Value,
    options: &DeleteOptions,
) -> DeletePlan {
    let spec_finalizers = stored
        .pointer("/spec/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|l| !l.is_empty());
    if object::is_terminating(stored) {
        if spec_finalizers {
            return DeletePlan::Pending;
        }
        // N4.4: finalized already: the generic delete, whose policy may drop the GC
        // finalizers that still hold the namespace (P6) and remove it at once.
        return plan_delete(resource, stored, options);
    }
    let mut updated = stored.clone();
    let stored_finalizers = object::finalizers(stored);
    let wanted = deletion::namespace_gc_finalizer(options);
    if let Some(wanted) = wanted {
        let mut finalizers: Vec<String> = stored_finalizers
            .into_iter()
            .filter(|f| f != deletion::ORPHAN_FINALIZER && f != deletion::FOREGROUND_FINALIZER)
            .collect();
        finalizers.push(wanted.to_string());
        metadata_mut(&mut updated).insert("finalizers".into(), json!(finalizers));
    }
    if !object::is_terminating(stored) {
        metadata_mut(&mut updated).insert("deletionTimestamp".into(), json!(object::now()));
    }
    updated["status"]["phase"] = json!("Terminating");
    if updated == *stored {
        return DeletePlan::Pending;
    }
    DeletePlan::Update {
        object: updated,
        then_remove: false,
    }
}

/// M7: the first DELETE of a CRD marks it terminating and adds the cleanup finalizer, which
/// the CRD controller removes once every instance is gone. (Upstream's CRD storage does this
/// in place of the generic delete; later DELETEs take the generic path.)
fn plan_first_crd_delete(stored: &Value) -> DeletePlan {
    let mut updated = stored.clone();
    let metadata = metadata_mut(&mut updated);
    metadata.insert("deletionTimestamp".into(), json!(object::now()));
    metadata.insert("deletionGracePeriodSeconds".into(), json!(0));
    let mut finalizers = object::finalizers(stored);
    if !finalizers
        .iter()
        .any(|f| f == crate::crd::definition::CLEANUP_FINALIZER)
    {
        finalizers.push(crate::crd::definition::CLEANUP_FINALIZER.to_string());
    }
    metadata.insert("finalizers".into(), json!(finalizers));
    let condition = json!({
        "type": "Terminating", "status": "True", "lastTransitionTime": object::now(),
        "reason": "InstanceDeletionPending",
        "message": "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
    });
    if !updated.get("status").is_some_and(Value::is_object) {
        updated["status"] = json!({});
    }
    let mut conditions: Vec<Value> = updated["status"]
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    conditions.retain(|c| c.get("type").and_then(Value::as_str) != Some("Terminating"));
    conditions.push(condition);
    updated["status"]["conditions"] = json!(conditions);
    DeletePlan::Update {
        object: updated,
        then_remove: false,
    }
}

/// P8: deleting Jobs without a policy orphans their pods; upstream says so in a warning.
fn job_orphan_warning(resource: &ResourceType, options: &DeleteOptions) -> Vec<String> {
    if resource.group == "batch"
        && resource.plural == "jobs"
        && options.propagation_policy.is_none()
        && options.orphan_dependents.is_none()
    {
        vec![JOB_ORPHAN_WARNING.to_string()]
    } else {
        Vec::new()
    }
}

/// N4.1: the namespace precondition failure, worded as the storage layer words it.
fn check_namespace_preconditions(
    name: &str,
    stored: &Value,
    preconditions: &Preconditions,
) -> ApiResult<()> {
    let conflict = |message: String| {
        ApiError::conflict(
            Target {
                group: "",
                resource: "namespaces",
                name,
            },
            &message,
        )
    };
    let actual_uid = object::uid(stored);
    if let Some(uid) = preconditions.uid.as_deref().filter(|u| !u.is_empty())
        && uid != actual_uid
    {
        return Err(conflict(format!(
            "Precondition failed: UID in precondition: {uid}, UID in object meta: {actual_uid}"
        )));
    }
    let actual_rv = object::meta_str(stored, "resourceVersion").unwrap_or_default();
    if let Some(rv) = preconditions
        .resource_version
        .as_deref()
        .filter(|r| !r.is_empty())
        && rv != actual_rv
    {
        return Err(conflict(format!(
            "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {actual_rv}"
        )));
    }
    Ok(())
}

/// D12: the deleted object for kinds with the return-deleted-object flag, else a success
/// Status naming the plural resource.
fn deleted_body(resource: &ResourceType, name: &str, last: Value) -> Value {
    if resource.returns_deleted_object {
        last
    } else {
        success_status(target(resource, name), object::uid(&last))
    }
}

fn check_delete_preconditions(
    resource: &ResourceType,
    name: &str,
    stored: &Value,
    preconditions: &Preconditions,
) -> ApiResult<()> {
    let kind = if resource.group.is_empty() {
        resource.kind.clone()
    } else {
        format!("{}.{}", resource.kind, resource.group)
    };
    let fail = |message: String| {
        ApiError::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {kind} \"{name}\": {message}"),
        )
        .with_details(Details {
            name: name.to_string(),
            group: resource.group.clone(),
            kind: resource.kind.clone(),
            ..Details::default()
        })
    };
    if let Some(uid) = preconditions.uid.as_deref().filter(|u| !u.is_empty()) {
        let actual = object::uid(stored);
        if uid != actual {
            return Err(fail(format!(
                "the UID in the precondition ({uid}) does not match the UID in record ({actual}). The object might have been deleted and then recreated"
            )));
        }
    }
    if let Some(rv) = preconditions
        .resource_version
        .as_deref()
        .filter(|r| !r.is_empty())
    {
        let actual = object::meta_str(stored, "resourceVersion").unwrap_or_default();
        if rv != actual {
            return Err(fail(format!(
                "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({actual}). The object might have been modified"
            )));
        }
    }
    Ok(())
}

/// H3: DeleteOptions validation, answered as a 422 about `DeleteOptions.meta.k8s.io`.
fn validate_delete_options(options: &DeleteOptions) -> ApiResult<()> {
    let mut errors = Vec::new();
    if options.orphan_dependents.is_some() && options.propagation_policy.is_some() {
        errors.push(FieldError::invalid(
            "propagationPolicy",
            options.propagation_policy.clone().unwrap_or_default(),
            "orphanDependents and deletionPropagation cannot be both set",
        ));
    }
    if let Some(policy) = options.propagation_policy.as_deref()
        && !matches!(policy, "Foreground" | "Background" | "Orphan")
    {
        errors.push(FieldError::not_supported(
            "propagationPolicy",
            policy,
            &["Foreground", "Background", "Orphan", "nil"],
        ));
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(
            "DeleteOptions",
            "meta.k8s.io",
            "",
            &errors,
        ))
    }
}

/// Applies a patch body of `format` to `target`: 400 for a malformed patch, 422 for one that
/// does not fit the object.
pub fn apply_patch_format(format: PatchFormat, target: &Value, patch: &Value) -> ApiResult<Value> {
    match format {
        PatchFormat::Json => patch::apply_json_patch(target, patch),
        PatchFormat::Merge => patch::apply_merge_patch(target, patch),
        PatchFormat::Strategic => {
            patch::apply_strategic_merge_patch(target, patch, &patch::BuiltinSchema)
        }
    }
    .map_err(|error| match error {
        patch::PatchError::Malformed(message) => {
            ApiError::bad_request(format!("invalid patch: {message}"))
        }
        patch::PatchError::CannotApply(message) => ApiError::new(
            422,
            "Invalid",
            format!("the patch cannot be applied: {message}"),
        ),
        // Upstream's NewRequestEntityTooLargeError wording.
        patch::PatchError::TooLarge(message) => {
            ApiError::request_entity_too_large(format!("Request entity too large: {message}"))
        }
    })
}

/// §6.6: an applied configuration names the URL's type and, if it names an object, the URL's.
fn check_applied_config(resource: &ResourceType, name: &str, applied: &Value) -> ApiResult<()> {
    check_type_meta(resource, applied)?;
    for field in ["apiVersion", "kind"] {
        if applied
            .get(field)
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(ApiError::bad_request(format!(
                "{field} must be set in an applied configuration (expected {:?})",
                if field == "kind" {
                    resource.kind.clone()
                } else {
                    resource.api_version()
                }
            )));
        }
    }
    let applied_name = object::name(applied);
    if !applied_name.is_empty() && applied_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({applied_name}) does not match the name on the URL ({name})"
        )));
    }
    Ok(())
}

/// A 409 with one `FieldManagerConflict` cause per conflicting field, as kubectl expects.
fn apply_error(resource: &ResourceType, name: &str, error: patch::ApplyError) -> ApiError {
    match error {
        patch::ApplyError::Conflicts(conflicts) => {
            ApiError::new(409, "Conflict", patch::conflict_message(&conflicts)).with_details(
                Details {
                    name: name.to_string(),
                    group: resource.group.clone(),
                    kind: resource.plural.clone(),
                    causes: conflicts
                        .iter()
                        .map(|c| crate::status::Cause {
                            reason: "FieldManagerConflict".into(),
                            message: c.cause_message(),
                            field: c.field.clone(),
                        })
                        .collect(),
                    ..Details::default()
                },
            )
        }
        // Unreadable stored managedFields are the server's fault (upstream answers 500);
        // everything else is about the request.
        patch::ApplyError::Invalid(message)
            if message.starts_with("failed to decode managed fields") =>
        {
            ApiError::internal(message)
        }
        patch::ApplyError::Invalid(message) => ApiError::bad_request(message),
    }
}

fn validate_field_manager(manager: &str) -> ApiResult<()> {
    if manager.chars().count() > 128 {
        return Err(ApiError::invalid(
            "PatchOptions",
            "meta.k8s.io",
            "",
            &[FieldError::too_long("fieldManager", manager, 128)],
        ));
    }
    Ok(())
}

/// Computes the object an update stores: server-owned metadata carried over from `current`,
/// status-subresource rules, the generation bump, and the terminating-object rules.
fn prepare_update(
    resource: &ResourceType,
    current: &Value,
    mut requested: Value,
    subresource: Subresource,
) -> ApiResult<Value> {
    let name = object::name(current).to_string();
    let invalid =
        |errors: &[FieldError]| ApiError::invalid(&resource.kind, &resource.group, &name, errors);
    // U6: a uid in the body is a precondition.
    if let Some(uid) = object::meta_str(&requested, "uid").filter(|u| !u.is_empty())
        && uid != object::uid(current)
    {
        return Err(ApiError::conflict(
            target(resource, &name),
            &format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                object::uid(current)
            ),
        ));
    }
    // U3/U4: the deletion fields are the server's. A terminating object keeps its values
    // whatever the request says; setting them on a live object is an immutable-field error.
    let current_meta = object::metadata(current).cloned().unwrap_or_default();
    let requested_meta = object::metadata(&requested).cloned().unwrap_or_default();
    let mut errors = Vec::new();
    for field in ["deletionTimestamp", "deletionGracePeriodSeconds"] {
        let before = current_meta.get(field).filter(|v| !v.is_null());
        let after = requested_meta.get(field).filter(|v| !v.is_null());
        if let Some(after) = after
            && before != Some(after)
            && (before.is_none() || field == "deletionGracePeriodSeconds")
        {
            // U4: upstream prints an int64 bare (`Invalid value: 30`), a timestamp quoted.
            let field = format!("metadata.{field}");
            errors.push(if after.is_string() {
                FieldError::invalid(&field, value_text(after), "field is immutable")
            } else {
                FieldError::invalid_literal(&field, value_text(after), "field is immutable")
            });
        }
    }
    if !errors.is_empty() {
        return Err(invalid(&errors));
    }

    match subresource {
        Subresource::Status => {
            // U8: what else a /status write may change is the kind's status strategy.
            let mut next = match resource.status_writes {
                StatusWrites::StatusOnly => {
                    let mut next = current.clone();
                    // managedFields belong to the write itself, not to the stored object.
                    if let Some(managed) = object::metadata(&requested)
                        .and_then(|m| m.get("managedFields"))
                        .cloned()
                    {
                        metadata_mut(&mut next).insert("managedFields".into(), managed);
                    }
                    next
                }
                StatusWrites::KeepSpec {
                    labels,
                    owner_references,
                } => {
                    let mut next = requested.clone();
                    match current.get("spec") {
                        Some(spec) => next["spec"] = spec.clone(),
                        None => {
                            if let Some(map) = next.as_object_mut() {
                                map.remove("spec");
                            }
                        }
                    }
                    let kept = [("labels", labels), ("ownerReferences", owner_references)];
                    for (field, keep) in kept {
                        if keep {
                            match current_meta.get(field) {
                                Some(value) => {
                                    metadata_mut(&mut next).insert(field.into(), value.clone())
                                }
                                None => metadata_mut(&mut next).remove(field),
                            };
                        }
                    }
                    next
                }
            };
            match requested.get("status") {
                Some(status) => next["status"] = status.clone(),
                None => {
                    if let Some(map) = next.as_object_mut() {
                        map.remove("status");
                    }
                }
            }
            requested = next;
        }
        Subresource::Finalize => {
            // N1: /finalize changes only a namespace's spec.finalizers.
            let mut next = current.clone();
            let finalizers = requested
                .pointer("/spec/finalizers")
                .cloned()
                .unwrap_or(json!([]));
            next["spec"]["finalizers"] = finalizers;
            requested = next;
        }
        Subresource::Main | Subresource::Scale => {
            if resource.status_subresource {
                match current.get("status") {
                    Some(status) => requested["status"] = status.clone(),
                    None => {
                        if let Some(map) = requested.as_object_mut() {
                            map.remove("status");
                        }
                    }
                }
            }
            if resource.is_namespace() {
                // N1: ordinary updates cannot change spec.finalizers (silently restored).
                match current.pointer("/spec/finalizers") {
                    Some(finalizers) => requested["spec"]["finalizers"] = finalizers.clone(),
                    None => {
                        if let Some(spec) = requested.get_mut("spec").and_then(Value::as_object_mut)
                        {
                            spec.remove("finalizers");
                        }
                    }
                }
            }
        }
    }

    let metadata = metadata_mut(&mut requested);
    // F2 and api-surface §6.1: clients cannot change identity or deletion fields.
    for field in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "name",
        "namespace",
        "generation",
    ] {
        match current_meta.get(field) {
            Some(value) => metadata.insert(field.into(), value.clone()),
            None => metadata.remove(field),
        };
    }
    metadata.remove("selfLink");
    // A write that does not mention managedFields keeps the stored ones (upstream resets
    // them only when a request sets them explicitly).
    if !metadata.contains_key("managedFields")
        && let Some(managed) = current_meta.get("managedFields")
    {
        metadata.insert("managedFields".into(), managed.clone());
    }

    // U5: a terminating object may not gain finalizers (removing and reordering is fine).
    if object::is_terminating(current) {
        let before = object::finalizers(current);
        let added: Vec<String> = object::finalizers(&requested)
            .into_iter()
            .filter(|f| !before.contains(f))
            .collect();
        if !added.is_empty() {
            let quoted: Vec<String> = added.iter().map(|f| format!("{f:?}")).collect();
            return Err(invalid(&[FieldError::forbidden(
                "metadata.finalizers",
                &format!(
                    "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                    quoted.join(", ")
                ),
            )]));
        }
    }

    if let Some(hook) = resource.write_defaults {
        hook(&mut requested);
    }
    set_type_meta(resource, &mut requested);
    object::drop_empty_metadata_fields(&mut requested);
    if resource.tracks_generation && object::spec_part(&requested) != object::spec_part(current) {
        let generation = current_meta
            .get("generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        metadata_mut(&mut requested).insert("generation".into(), json!(generation + 1));
    }
    Ok(requested)
}

/// A value as upstream prints it in a field error: strings bare, others as JSON.
fn value_text(value: &Value) -> String {
    value
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| value.to_string())
}

/// U7: an update that leaves a terminating object with no finalizers removes it instead,
/// unless a graceful period is still running; namespaces also need empty spec.finalizers.
fn update_finishes_deletion(resource: &ResourceType, current: &Value, candidate: &Value) -> bool {
    let grace_running = object::metadata(current)
        .and_then(|m| m.get("deletionGracePeriodSeconds"))
        .and_then(Value::as_i64)
        .is_some_and(|g| g > 0);
    let namespace_held = resource.is_namespace()
        && candidate
            .pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|l| !l.is_empty());
    object::is_terminating(current)
        && object::finalizers(candidate).is_empty()
        && !grace_running
        && !namespace_held
}

/// FN3: built-in kinds require a domain-qualified finalizer unless it is a standard one.
fn builtin_finalizer_errors(finalizer: &str, field: &str) -> Vec<FieldError> {
    let mut errors = validation::validate_finalizer_name(finalizer, field);
    if errors.is_empty()
        && !finalizer.contains('/')
        && !validation::STANDARD_FINALIZERS.contains(&finalizer)
    {
        errors.push(FieldError::invalid(
            field,
            finalizer,
            "name is neither a standard finalizer name nor is it fully qualified",
        ));
    }
    errors
}

fn strip_resource_version(object: &Value) -> Value {
    let mut copy = object.clone();
    metadata_mut(&mut copy).remove("resourceVersion");
    copy
}

/// List items, like upstream's, carry no apiVersion/kind of their own.
fn strip_type_meta(object: &mut Value) {
    if let Some(map) = object.as_object_mut() {
        map.remove("apiVersion");
        map.remove("kind");
    }
}

/// Objects are stored with the type's storage version (custom resources served in several
/// versions store one).
fn set_type_meta(resource: &ResourceType, object: &mut Value) {
    if let Some(map) = object.as_object_mut() {
        map.insert("apiVersion".into(), json!(resource.stored_api_version()));
        map.insert("kind".into(), json!(resource.kind));
    }
}

/// An object as served at `resource`'s version: with conversion `None`, versions of a custom
/// resource differ only in `apiVersion`.
pub fn served(resource: &ResourceType, mut object: Value) -> Value {
    if resource.storage_version.is_some()
        && let Some(map) = object.as_object_mut()
    {
        map.insert("apiVersion".into(), json!(resource.api_version()));
    }
    object
}

/// The body's kind and apiVersion, when given, must name the URL's type.
fn check_type_meta(resource: &ResourceType, object: &Value) -> ApiResult<()> {
    if !object.is_object() {
        return Err(ApiError::bad_request(format!(
            "the request body must be a JSON object (a {}), not {}",
            resource.kind,
            json_type_name(object)
        )));
    }
    if let Some(kind) = object
        .get("kind")
        .and_then(Value::as_str)
        .filter(|k| !k.is_empty())
        && kind != resource.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the body ({kind}) does not match the kind of the URL's resource ({}): send it to the {} endpoint, or fix the manifest",
            resource.kind, kind
        )));
    }
    if let Some(api_version) = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .filter(|v| !v.is_empty())
        && api_version != resource.api_version()
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({})",
            resource.api_version()
        )));
    }
    if let Some(metadata) = object.get("metadata")
        && !metadata.is_object()
        && !metadata.is_null()
    {
        return Err(ApiError::bad_request("metadata must be a JSON object"));
    }
    Ok(())
}

fn json_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The namespace an object is written to: from the URL for namespaced kinds (a different one in
/// the body is a 400), none for cluster-scoped kinds.
fn effective_namespace(
    resource: &ResourceType,
    url_namespace: Option<&str>,
    object: &Value,
) -> ApiResult<Option<String>> {
    let body_namespace = object::meta_str(object, "namespace").filter(|ns| !ns.is_empty());
    if !resource.namespaced {
        return Ok(None);
    }
    let namespace = match (url_namespace, body_namespace) {
        (Some(url), Some(body)) if url != body => {
            return Err(ApiError::bad_request(format!(
                "the namespace of the provided object does not match the namespace sent on the request ({body} vs {url})"
            )));
        }
        (Some(url), _) => url,
        (None, Some(body)) => body,
        (None, None) => {
            return Err(ApiError::bad_request(format!(
                "{} is namespaced: send it to /…/namespaces/<namespace>/{}",
                resource.kind, resource.plural
            )));
        }
    };
    Ok(Some(namespace.to_string()))
}

/// Validation shared by create and update: names, labels, annotations, finalizers.
fn validate_object(
    resource: &ResourceType,
    object: &Value,
    namespace: Option<&str>,
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let name = object::name(object);
    if !name.is_empty() || object::meta_str(object, "generateName").is_none() {
        errors.extend(validation::validate_object_name(name, resource.name_rule));
    }
    if let Some(ns) = namespace {
        errors.extend(validation::validate_namespace_name(ns));
    }
    if let Some(metadata) = object::metadata(object) {
        if let Some(labels) = metadata.get("labels") {
            match labels.as_object() {
                Some(map) => errors.extend(validation::validate_labels(map)),
                None => errors.push(FieldError::invalid(
                    "metadata.labels",
                    labels.to_string(),
                    "must be a map of string keys to string values",
                )),
            }
        }
        if let Some(annotations) = metadata.get("annotations") {
            match annotations.as_object() {
                Some(map) => errors.extend(validation::validate_annotations(map)),
                None => errors.push(FieldError::invalid(
                    "metadata.annotations",
                    annotations.to_string(),
                    "must be a map of string keys to string values",
                )),
            }
        }
        if let Some(finalizers) = metadata.get("finalizers") {
            // FN3 is core validation's rule; CRDs (apiextensions) use the generic one.
            errors.extend(validate_finalizer_list(
                finalizers,
                "metadata.finalizers",
                resource.builtin && !resource.is_crd(),
            ));
            // FN2
            let names = object::finalizers(object);
            if names.iter().any(|f| f == deletion::ORPHAN_FINALIZER)
                && names.iter().any(|f| f == deletion::FOREGROUND_FINALIZER)
            {
                // FN2: the list is printed as Go's %#v prints a []string.
                let quoted: Vec<String> = names.iter().map(|f| validation::go_quote(f)).collect();
                errors.push(FieldError::invalid_literal(
                    "metadata.finalizers",
                    format!("[]string{{{}}}", quoted.join(", ")),
                    "finalizer orphan and foregroundDeletion cannot be both set",
                ));
            }
        }
    }
    if let Some(references) = object.pointer("/metadata/ownerReferences") {
        errors.extend(validate_owner_references(references));
    }
    // N1/FN3: a namespace's spec.finalizers follow the built-in finalizer rules.
    if resource.is_namespace()
        && let Some(finalizers) = object.pointer("/spec/finalizers")
    {
        errors.extend(validate_finalizer_list(finalizers, "spec.finalizers", true));
    }
    errors
}

/// O1–O3: every owner reference names a version, kind, name and uid; core Events cannot own;
/// at most one reference is the controller. (O4: owners are not looked up.)
fn validate_owner_references(references: &Value) -> Vec<FieldError> {
    let field = "metadata.ownerReferences";
    let Some(list) = references.as_array() else {
        return vec![FieldError::invalid(
            field,
            references.to_string(),
            "must be a list of owner references",
        )];
    };
    let mut errors = Vec::new();
    let mut controllers = Vec::new();
    for (index, reference) in list.iter().enumerate() {
        let entry = format!("{field}[{index}]");
        let text = |key: &str| {
            reference
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        let api_version = text("apiVersion");
        let version = api_version.rsplit('/').next().unwrap_or_default();
        if version.is_empty() {
            errors.push(FieldError::invalid(
                &format!("{entry}.apiVersion"),
                api_version,
                "version must not be empty",
            ));
        }
        for key in ["kind", "name", "uid"] {
            if text(key).is_empty() {
                errors.push(FieldError::invalid(
                    &format!("{entry}.{key}"),
                    text(key),
                    &format!("{key} must not be empty"),
                ));
            }
        }
        if api_version == "v1" && text("kind") == "Event" {
            errors.push(FieldError::invalid(
                &entry,
                reference.to_string(),
                "/v1, Kind=Event is disallowed from being an owner",
            ));
        }
        if reference.get("controller").and_then(Value::as_bool) == Some(true) {
            controllers.push(format!("{}/{}", text("kind"), text("name")));
        }
    }
    if controllers.len() > 1 {
        errors.push(FieldError::invalid(
            field,
            references.to_string(),
            &format!(
                "Only one reference can have Controller set to true. Found \"true\" in references for {} and {}",
                controllers[0], controllers[1]
            ),
        ));
    }
    errors
}

/// FN1/FN3 for each entry of a finalizer list at `field`.
fn validate_finalizer_list(finalizers: &Value, field: &str, builtin: bool) -> Vec<FieldError> {
    let Some(list) = finalizers.as_array() else {
        return vec![FieldError::invalid(
            field,
            finalizers.to_string(),
            "must be a list of strings",
        )];
    };
    let mut errors = Vec::new();
    for (index, finalizer) in list.iter().enumerate() {
        let entry = format!("{field}[{index}]");
        match finalizer.as_str() {
            Some(f) if builtin => errors.extend(builtin_finalizer_errors(f, &entry)),
            Some(f) => errors.extend(validation::validate_finalizer_name(f, &entry)),
            None => errors.push(FieldError::invalid(
                &entry,
                finalizer.to_string(),
                "must be a string",
            )),
        }
    }
    errors
}

fn parse_label_selector(selector: Option<&str>) -> ApiResult<Option<LabelSelector>> {
    selector
        .filter(|s| !s.trim().is_empty())
        .map(|s| LabelSelector::parse(s).map_err(|e| ApiError::bad_request(e.to_string())))
        .transpose()
}

fn parse_field_selector(
    resource: &ResourceType,
    selector: Option<&str>,
) -> ApiResult<Option<FieldSelector>> {
    let Some(text) = selector.filter(|s| !s.trim().is_empty()) else {
        return Ok(None);
    };
    let parsed = FieldSelector::parse(text).map_err(|e| ApiError::bad_request(e.to_string()))?;
    parsed
        .validate_fields(&resource.supported_field_labels())
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(Some(parsed))
}

pub fn matches_selectors(
    object: &Value,
    labels: Option<&LabelSelector>,
    fields: Option<&FieldSelector>,
) -> bool {
    labels.is_none_or(|selector| selector.matches(object::labels(object)))
        && fields.is_none_or(|selector| selector.matches(&|path: &str| object_field(object, path)))
}
