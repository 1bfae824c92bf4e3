//! The registry: the one place where the object lifecycle is written down.
//!
//! Every write, from HTTP handlers and in-process controllers alike, goes through here:
//! create, update, patch (via the same guarded update), delete and delete-collection, plus the
//! consistent reads (get, list with selectors and pagination) and watches. It knows nothing of
//! HTTP; it speaks JSON objects, [`ResourceType`]s and [`ApiError`]s.
//!
//! Rules carry the ids of `shared/spec/deletion-semantics.md` (D*, U*) and
//! `shared/spec/api-surface.md` sections where they implement one.
//!
//! One `impl Registry` per concern: `read.rs` (get, list, watch), `create.rs`, `update.rs`
//! (update, patch, apply), `delete.rs` (delete, delete-collection), `commit.rs` (the store
//! write of each, with its finalizer provenance record and the controllers' fence),
//! `convert.rs` (custom objects crossing versions through a CRD's conversion webhook); this
//! file holds the types, the object codec and the checks they share.

use std::sync::Arc;

use base64::Engine;
use finale_store::{
    Guard, KeyValue, Precondition, RangeRequest, Revision, Store, TxnOutcome, WriteOp,
    WriteOutcome, prefix_range,
};
use futures::StreamExt;
use rand::Rng;
use serde_json::{Value, json};

mod admit;
mod admitted_namespaces;
pub mod cloud_gc;
mod commit;
mod convert;
mod create;
mod delete;
pub mod fence;
mod pods;
pub mod provenance;
mod read;
mod streamed_list;
mod update;

use update::*;

pub use admit::{WritePermissions, manager_from_user_agent};
pub use pods::{Disruption, set_pod_condition};
pub use provenance::Actor;
pub use read::parse_selectors;
pub use streamed_list::ListChunks;

use crate::deletion::{self, Graceful};
use crate::field_validation::FieldValidation;
use crate::object::{self, metadata_mut};
use crate::patch;
use crate::resources::{Catalog, ResourceType, StatusWrites};
use crate::selectors::{FieldSelector, LabelSelector, object_field};
use crate::status::{ApiError, ApiResult, Details, Target, success_status};
use crate::validation::{self, FieldError};
use crate::watch_cache::{WatchCache, WatchItem, WatchRequest, WatchStream};

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

/// How many times a create re-checks its namespace after the namespace changed between the
/// check and the write (N5).
const NAMESPACE_CHECKS: usize = 4;

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
    /// The writer's permission checks on the written content; None for the server itself.
    pub permissions: Option<std::sync::Arc<dyn admit::WritePermissions>>,
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
    /// A Pod's `/binding`: `spec.nodeName` and the `PodScheduled` condition change in one
    /// write ([`Registry::bind_pod`] decides what).
    Binding,
    /// A CertificateSigningRequest's `/approval`: only `status.conditions` changes, and only
    /// here may Approved and Denied be added (the kind's update strategy).
    Approval,
}

impl Subresource {
    /// The name `managedFields` entries record (`status`), None for the main resource.
    pub fn name(self) -> Option<&'static str> {
        match self {
            Subresource::Main => None,
            Subresource::Status => Some("status"),
            Subresource::Finalize => Some("finalize"),
            Subresource::Scale => Some("scale"),
            Subresource::Binding => Some("binding"),
            Subresource::Approval => Some("approval"),
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

#[derive(Clone)]
pub struct Registry {
    store: Arc<dyn Store>,
    catalog: Arc<Catalog>,
    watch_cache: Arc<WatchCache>,
    /// Set on the in-process controllers' registry: every write also requires that this
    /// replica still holds their Lease ([`fence`]).
    fence: Option<Arc<fence::LeaseFence>>,
    /// Who writes through this registry when a write names no one: an in-process controller's
    /// own identity (`system:serviceaccount:kube-system:generic-garbage-collector`), so that
    /// finalizer provenance and the audit log name it. None: [`provenance::IN_PROCESS_USER`].
    default_actor: Option<Arc<Actor>>,
    /// The admission webhooks every write passes (shared by every clone of the registry).
    webhooks: Arc<crate::admission::Webhooks>,
    /// The CRD conversion webhooks objects cross versions through ([`convert`]).
    converter: Arc<crate::crd::conversion::Converter>,
    /// Namespaces creates were recently admitted into (shared by every clone).
    admitted_namespaces: Arc<admitted_namespaces::AdmittedNamespaces>,
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

/// A stored object as `resource` works on it ([`ResourceType::from_storage`]).
fn decode_as(resource: &ResourceType, kv: &KeyValue) -> ApiResult<Value> {
    Ok(resource.from_storage(decode(kv)?))
}

/// [`encode`] of the stored form of `object` ([`ResourceType::to_storage`]).
fn encode_as(resource: &ResourceType, object: &Value) -> ApiResult<Vec<u8>> {
    match resource.view {
        Some(_) => encode(&resource.to_storage(object.clone())),
        None => encode(object),
    }
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
        let webhooks = Arc::new(crate::admission::Webhooks::new(
            Arc::clone(&store),
            Arc::clone(&catalog),
        ));
        let converter = Arc::clone(webhooks.converter());
        Registry {
            store,
            catalog,
            watch_cache,
            fence: None,
            default_actor: None,
            webhooks,
            converter,
            admitted_namespaces: Arc::default(),
        }
    }

    /// The CRD conversion webhooks ([`crate::crd::conversion`]), for their metrics.
    pub fn converter(&self) -> &Arc<crate::crd::conversion::Converter> {
        &self.converter
    }

    /// The admission webhooks this registry's writes pass ([`crate::admission`]).
    pub fn webhooks(&self) -> &Arc<crate::admission::Webhooks> {
        &self.webhooks
    }

    /// The `userInfo` admission webhooks are told of for a write by `actor` (or, naming no
    /// one, by this registry's default actor).
    fn admission_user(&self, actor: Option<&Actor>) -> Value {
        crate::admission::user_info(actor.or(self.default_actor()))
    }

    /// The same registry, whose writes commit only while `fence`'s Lease is held by this
    /// replica ([`fence`]): the one the in-process controllers write through.
    pub fn fenced(&self, fence: Arc<fence::LeaseFence>) -> Registry {
        Registry {
            fence: Some(fence),
            ..self.clone()
        }
    }

    /// The same registry, whose writes that name no actor are made as `user` (an in-process
    /// controller's identity).
    pub fn acting_as(&self, user: &str) -> Registry {
        Registry {
            default_actor: Some(Arc::new(Actor {
                user: user.to_string(),
                ..Actor::default()
            })),
            ..self.clone()
        }
    }

    /// Who a write that names no actor is made as.
    pub fn default_actor(&self) -> Option<&Actor> {
        self.default_actor.as_deref()
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
}

/// `CreateOptions`/`UpdateOptions` as admission webhooks get them (type meta added there).
fn write_options_json(options: &WriteOptions) -> Value {
    let mut out = serde_json::Map::new();
    if options.dry_run {
        out.insert("dryRun".into(), json!(["All"]));
    }
    if let Some(manager) = options.field_manager.as_deref().filter(|m| !m.is_empty()) {
        out.insert("fieldManager".into(), json!(manager));
    }
    Value::Object(out)
}

/// `DeleteOptions` as admission webhooks get them.
fn delete_options_json(options: &DeleteOptions) -> Value {
    let mut out = serde_json::Map::new();
    if let Some(grace) = options.grace_period_seconds {
        out.insert("gracePeriodSeconds".into(), json!(grace));
    }
    if let Some(policy) = &options.propagation_policy {
        out.insert("propagationPolicy".into(), json!(policy));
    }
    if let Some(orphan) = options.orphan_dependents {
        out.insert("orphanDependents".into(), json!(orphan));
    }
    let preconditions = &options.preconditions;
    if preconditions.uid.is_some() || preconditions.resource_version.is_some() {
        let mut p = serde_json::Map::new();
        if let Some(uid) = &preconditions.uid {
            p.insert("uid".into(), json!(uid));
        }
        if let Some(rv) = &preconditions.resource_version {
            p.insert("resourceVersion".into(), json!(rv));
        }
        out.insert("preconditions".into(), Value::Object(p));
    }
    if options.dry_run {
        out.insert("dryRun".into(), json!(["All"]));
    }
    Value::Object(out)
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

/// The apiVersion a write works in: the storage version for custom resources converted with
/// `strategy: None` (versions differ in `apiVersion` alone), the request's version for those
/// with a conversion webhook (upstream's handler works in the request's version, and the
/// object goes to the storage version as it is stored: [`Registry::commit`]).
fn set_type_meta(resource: &ResourceType, object: &mut Value) {
    if let Some(map) = object.as_object_mut() {
        let api_version = match resource.conversion {
            Some(_) => resource.api_version(),
            None => resource.stored_api_version(),
        };
        map.insert("apiVersion".into(), json!(api_version));
        map.insert("kind".into(), json!(resource.kind));
    }
}

/// An object as served at `resource`'s version: with conversion `None`, versions of a custom
/// resource differ only in `apiVersion`. Objects of a CRD with a conversion webhook are left
/// as they are: the registry converted them already where a request needs them
/// ([`convert`]), and one in another form keeps the `apiVersion` of its content.
pub fn served(resource: &ResourceType, mut object: Value) -> Value {
    if resource.storage_version.is_some()
        && resource.conversion.is_none()
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

pub fn matches_selectors(
    object: &Value,
    labels: Option<&LabelSelector>,
    fields: Option<&FieldSelector>,
) -> bool {
    labels.is_none_or(|selector| selector.matches(object::labels(object)))
        && fields.is_none_or(|selector| selector.matches(&|path: &str| object_field(object, path)))
}
