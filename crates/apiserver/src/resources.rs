//! The catalog of served resource types and their per-kind strategies.
//!
//! Built-in kinds and (later) custom resources share one generic lifecycle in the registry;
//! what differs per kind is data: names, scope, which subresources exist, which name rule
//! applies, which fields can be selected, whether DELETE returns the object, and a small
//! defaulting hook. That data lives here and nowhere else.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use serde_json::{Value, json};

use crate::validation::NameRule;

/// The storage prefix under which every API object is stored, and which the watch cache
/// follows; other keys (finalizer provenance, say) are the server's own.
pub const OBJECTS_PREFIX: &str = "/registry/";

/// How an object of this kind is filled in on create (the "PrepareForCreate" hook).
pub type DefaultingHook = fn(&mut Value);

/// The OpenAPI schema of a built-in kind: a reference to its k8s-openapi type's definition,
/// which the generator records (see [`crate::openapi`]).
pub type SchemaOf = fn(&mut schemars::SchemaGenerator) -> schemars::Schema;

/// [`SchemaOf`] for one k8s-openapi type.
fn schema_of<T: schemars::JsonSchema>(
    generator: &mut schemars::SchemaGenerator,
) -> schemars::Schema {
    generator.subschema_for::<T>()
}

/// The k8s-openapi type of a built-in kind, the Rust counterpart of the Go type upstream
/// decodes the kind into: the fields it lacks are a body's unknown fields
/// ([`crate::field_validation`]), and its schema is what OpenAPI publishes.
#[derive(Clone, Copy, Debug)]
pub struct KindType {
    pub schema: SchemaOf,
    pub unknown_fields: crate::field_validation::IgnoredPaths,
}

impl KindType {
    fn of<T: schemars::JsonSchema + serde::de::DeserializeOwned>() -> KindType {
        KindType {
            schema: schema_of::<T>,
            unknown_fields: crate::field_validation::ignored_paths::<T>,
        }
    }
}

/// A resource served as a view of another's objects: `events.k8s.io/v1` Events are the
/// `core/v1` Events (upstream stores both at `/registry/events`). The registry works on the
/// view's form throughout; objects are converted only where they meet the store.
#[derive(Clone, Copy, Debug)]
pub struct StorageView {
    /// The group and plural of the resource whose objects these are (its key prefix).
    pub group: &'static str,
    pub plural: &'static str,
    /// A stored object in this view's form.
    pub from_storage: fn(Value) -> Value,
    /// An object of this view in the stored form.
    pub to_storage: fn(Value) -> Value,
}

/// Kind-specific validation of a write: the new object and, on updates, the stored one.
pub type ValidationHook = fn(&Value, Option<&Value>) -> Vec<crate::validation::FieldError>;

/// Upstream's `PrepareForCreate` where it needs the requesting user (a
/// CertificateSigningRequest records who asked): fills in the object, or refuses it as an
/// admission plugin would.
pub type CreateStrategy =
    fn(&mut Value, Option<&crate::registry::Actor>) -> crate::status::ApiResult<()>;

/// Upstream's `PrepareForUpdate` per subresource, beyond the generic rules: makes the next
/// object from the stored one (`current`) and what the write asked for (`next`, changed in
/// place), and reports the changes this route may not make.
pub type UpdateStrategy =
    fn(crate::registry::Subresource, &Value, &mut Value) -> Vec<crate::validation::FieldError>;

/// Resources that are not stored objects but served by a handler of their own, as upstream
/// serves them by a REST storage of their own (`http/legacy.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServedBy {
    /// `componentstatuses`: get and list, each answered from the server's health checks.
    ComponentStatuses,
    /// `bindings`: create only, binding the Pod the Binding names (`pods/binding`'s path).
    PodBindings,
}

/// One served resource: a (group, version, plural) and everything the lifecycle needs to know
/// about its kind.
#[derive(Clone, Debug)]
pub struct ResourceType {
    /// API group; empty for the core group.
    pub group: String,
    pub version: String,
    pub kind: String,
    pub list_kind: String,
    /// The plural resource name used in URLs.
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    /// Has a `/status` subresource: the main endpoint ignores `.status` and vice versa.
    pub status_subresource: bool,
    /// What a `/status` write may change besides `.status`.
    pub status_writes: StatusWrites,
    /// Has a `/scale` subresource (served as `autoscaling/v1 Scale`), and where it reads.
    pub scale: Option<ScalePaths>,
    pub name_rule: NameRule,
    /// deletion-semantics D13: DELETE answers with the deleted object rather than a Status.
    pub returns_deleted_object: bool,
    /// Field-selector labels beyond `metadata.name` and `metadata.namespace`.
    pub selectable_fields: Vec<String>,
    /// Field-selector labels whose value is not at the JSON path they spell (core Events'
    /// `source` is `source.component`), with that path.
    pub field_paths: &'static [(&'static str, &'static str)],
    pub defaulting: Option<DefaultingHook>,
    /// Normalisation applied on every write, create and update alike (upstream applies
    /// these defaults when decoding any request body).
    pub write_defaults: Option<DefaultingHook>,
    /// Sets `metadata.generation` on create and bumps it on spec changes (workloads and
    /// custom resources); others, like ConfigMap, leave it unset.
    pub tracks_generation: bool,
    /// P7: the garbage-collection policy a DELETE without one gets.
    pub gc_policy: crate::deletion::GcPolicy,
    /// Deletion is graceful (Pods): a grace period runs before removal (deletion-semantics §6).
    pub graceful: bool,
    /// A kind compiled into the server (strategic merge patch applies), as opposed to a
    /// custom resource.
    pub builtin: bool,
    /// CRD `additionalPrinterColumns` (custom resources only; built-ins have fixed columns).
    pub printer_columns: Vec<PrinterColumn>,
    /// A built-in kind's k8s-openapi type (custom resources have `schema` instead).
    pub typed: Option<KindType>,
    /// The structural schema of a custom resource version: pruning, defaulting, validation.
    pub schema: Option<Arc<crate::crd::schema::StructuralSchema>>,
    /// Checks beyond names, labels and finalizers (CRDs validate their spec here).
    pub validation: Option<ValidationHook>,
    /// Custom resources: the version objects are stored in (they are served in every served
    /// version; with conversion `None` only `apiVersion` differs).
    pub storage_version: Option<String>,
    /// Custom resources whose CRD converts with a webhook (`strategy: Webhook`): objects
    /// cross between versions through it ([`crate::crd::conversion`]) rather than by their
    /// `apiVersion` alone.
    pub conversion: Option<Arc<crate::crd::conversion::ConversionWebhook>>,
    /// Custom resources whose definition is being deleted: creates are refused (405), as
    /// upstream refuses them while it removes the instances.
    pub definition_terminating: bool,
    /// A review (like `SubjectAccessReview`): only POST is served, the server answers in
    /// `status` and stores nothing (see [`crate::insight`]).
    pub create_only: bool,
    /// Has a `/token` subresource: TokenRequest (ServiceAccounts, see
    /// [`crate::authn::service_account`]).
    pub token_subresource: bool,
    /// Pods: `/binding`, `/eviction` and `/log` (served by `http/pod.rs`).
    pub runs_on_nodes: bool,
    /// Objects are another resource's, converted (see [`StorageView`]).
    pub view: Option<StorageView>,
    /// Not stored: served by a handler of its own (see [`ServedBy`]).
    pub served_by: Option<ServedBy>,
    /// Has an `/approval` subresource (CertificateSigningRequests): a write there changes
    /// only `status.conditions`, and only there may Approved and Denied be set.
    pub approval_subresource: bool,
    pub create_strategy: Option<CreateStrategy>,
    pub update_strategy: Option<UpdateStrategy>,
}

/// A subresource as discovery lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubresourceInfo {
    pub name: &'static str,
    /// The kind it serves, when not the parent's: (group, version, kind).
    pub kind: Option<(&'static str, &'static str, &'static str)>,
    pub verbs: &'static [&'static str],
}

/// What a `/status` write may change besides `.status` (deletion-semantics U8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusWrites {
    /// Only `.status` (custom resources, CRDs): everything else is kept as stored, so a
    /// `/status` write cannot remove finalizers.
    StatusOnly,
    /// The built-in status strategies: `.spec` is kept as stored and so are the listed
    /// metadata fields; other metadata (finalizers among it) comes from the request.
    KeepSpec {
        labels: bool,
        owner_references: bool,
    },
}

/// Where a `/scale` subresource finds its numbers: JSON paths in `.a.b` form, as CRD
/// `subresources.scale` writes them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScalePaths {
    pub spec_replicas_path: String,
    pub status_replicas_path: String,
    pub label_selector_path: Option<String>,
}

/// One CRD `additionalPrinterColumns` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrinterColumn {
    pub name: String,
    /// integer, number, boolean, string or date.
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    /// A simple JSONPath such as `.spec.replicas` or `.status.conditions[?(@.type=="Ready")].status`.
    pub json_path: String,
}

impl ResourceType {
    /// `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The storage key prefix of every object of this type (under [`OBJECTS_PREFIX`]). One prefix per group and
    /// resource (not per version), so that versions of one resource share storage.
    pub fn key_prefix(&self) -> String {
        let (group, plural) = match &self.view {
            Some(view) => (view.group, view.plural),
            None => (self.group.as_str(), self.plural.as_str()),
        };
        let group = if group.is_empty() { "core" } else { group };
        format!("{OBJECTS_PREFIX}{group}/{plural}/")
    }

    /// A stored object in the form this resource serves: converted for a [`StorageView`],
    /// as stored otherwise. `apiVersion` stays as stored for custom resources served in
    /// several versions; [`crate::registry::served`] sets it in responses.
    pub fn from_storage(&self, object: Value) -> Value {
        match &self.view {
            Some(view) => (view.from_storage)(object),
            None => object,
        }
    }

    /// An object in the form it is stored in (the inverse of [`ResourceType::from_storage`]).
    pub fn to_storage(&self, object: Value) -> Value {
        match &self.view {
            Some(view) => (view.to_storage)(object),
            None => object,
        }
    }

    /// The JSON path a field-selector label reads (see [`ResourceType::field_paths`]).
    pub fn field_path<'a>(&self, label: &'a str) -> &'a str {
        self.field_paths
            .iter()
            .find(|(name, _)| *name == label)
            .map_or(label, |(_, path)| path)
    }

    /// The prefix of the objects in one namespace, or of all objects when `namespace` is None.
    pub fn collection_prefix(&self, namespace: Option<&str>) -> String {
        match (self.namespaced, namespace) {
            (true, Some(ns)) => format!("{}{ns}/", self.key_prefix()),
            _ => self.key_prefix(),
        }
    }

    pub fn object_key(&self, namespace: Option<&str>, name: &str) -> String {
        format!("{}{name}", self.collection_prefix(namespace))
    }

    pub fn is_namespace(&self) -> bool {
        self.group.is_empty() && self.plural == "namespaces"
    }

    pub fn is_crd(&self) -> bool {
        self.group == CRD_GROUP && self.plural == "customresourcedefinitions"
    }

    /// Whether objects are stored in this type's version (always so for built-in kinds).
    pub fn is_storage_version(&self) -> bool {
        self.storage_version
            .as_ref()
            .is_none_or(|stored| *stored == self.version)
    }

    /// The apiVersion objects of this type are stored with.
    pub fn stored_api_version(&self) -> String {
        match &self.storage_version {
            Some(version) => format!("{}/{version}", self.group),
            None => self.api_version(),
        }
    }

    /// Every field label a field selector may use for this kind.
    pub fn supported_field_labels(&self) -> Vec<&str> {
        let mut labels = vec!["metadata.name"];
        if self.namespaced {
            labels.push("metadata.namespace");
        }
        labels.extend(self.selectable_fields.iter().map(String::as_str));
        labels
    }

    /// Subresources served for this type, in discovery order.
    pub fn subresources(&self) -> Vec<SubresourceInfo> {
        const READ_WRITE: &[&str] = &["get", "patch", "update"];
        let mut subs = Vec::new();
        // Discovery lists subresources by name, so `approval` precedes `status`.
        if self.approval_subresource {
            subs.push(SubresourceInfo {
                name: "approval",
                kind: None,
                verbs: READ_WRITE,
            });
        }
        if self.status_subresource {
            subs.push(SubresourceInfo {
                name: "status",
                kind: None,
                verbs: READ_WRITE,
            });
        }
        if self.scale.is_some() {
            subs.push(SubresourceInfo {
                name: "scale",
                kind: Some(("autoscaling", "v1", "Scale")),
                verbs: READ_WRITE,
            });
        }
        if self.token_subresource {
            subs.push(SubresourceInfo {
                name: "token",
                kind: Some(("authentication.k8s.io", "v1", "TokenRequest")),
                verbs: &["create"],
            });
        }
        if self.runs_on_nodes {
            subs.extend([
                SubresourceInfo {
                    name: "binding",
                    kind: Some(("", "v1", "Binding")),
                    verbs: &["create"],
                },
                SubresourceInfo {
                    name: "eviction",
                    kind: Some(("policy", "v1", "Eviction")),
                    verbs: &["create"],
                },
                SubresourceInfo {
                    name: "log",
                    kind: None,
                    verbs: &["get"],
                },
            ]);
        }
        subs
    }

    /// The verbs discovery lists for this type.
    pub fn served_verbs(&self) -> &'static [&'static str] {
        match self.served_by {
            Some(ServedBy::ComponentStatuses) => &["get", "list"],
            Some(ServedBy::PodBindings) => &["create"],
            None if self.create_only => &["create"],
            None => Self::verbs(),
        }
    }

    /// A built-in kind with the defaults of the table below, for modules that define their
    /// own kinds (see [`crate::insight`]).
    pub fn builtin(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> Self {
        Builtin::new(group, version, kind, plural, namespaced).0
    }

    pub fn verbs() -> &'static [&'static str] {
        &[
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ]
    }
}

pub const CRD_GROUP: &str = "apiextensions.k8s.io";

/// Builder for the built-in kinds, so the table below reads as data.
struct Builtin(ResourceType);

impl Builtin {
    fn new(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> Self {
        Builtin(ResourceType {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            list_kind: format!("{kind}List"),
            plural: plural.into(),
            singular: kind.to_lowercase(),
            namespaced,
            short_names: Vec::new(),
            categories: Vec::new(),
            status_subresource: false,
            status_writes: StatusWrites::StatusOnly,
            scale: None,
            name_rule: NameRule::Dns1123Subdomain,
            returns_deleted_object: false,
            selectable_fields: Vec::new(),
            field_paths: &[],
            defaulting: None,
            write_defaults: None,
            tracks_generation: false,
            gc_policy: crate::deletion::GcPolicy::DeleteDependents,
            graceful: false,
            builtin: true,
            printer_columns: Vec::new(),
            typed: None,
            schema: None,
            validation: None,
            storage_version: None,
            conversion: None,
            definition_terminating: false,
            create_only: false,
            token_subresource: false,
            runs_on_nodes: false,
            view: None,
            served_by: None,
            approval_subresource: false,
            create_strategy: None,
            update_strategy: None,
        })
    }
    /// The k8s-openapi type of the kind (see [`KindType`]).
    fn typed<T: schemars::JsonSchema + serde::de::DeserializeOwned>(mut self) -> Self {
        self.0.typed = Some(KindType::of::<T>());
        self
    }
    fn short(mut self, names: &[&str]) -> Self {
        self.0.short_names = names.iter().map(|s| s.to_string()).collect();
        self
    }
    fn in_all(mut self) -> Self {
        self.0.categories = vec!["all".into()];
        self
    }
    /// A review: POST answers with a computed `status`; nothing is stored.
    fn review(mut self) -> Self {
        self.0.create_only = true;
        self
    }
    /// A `/token` subresource (TokenRequest).
    fn issues_tokens(mut self) -> Self {
        self.0.token_subresource = true;
        self
    }
    /// Pods: scheduled to Nodes, evicted from them, logged by their agents.
    fn runs_on_nodes(mut self) -> Self {
        self.0.runs_on_nodes = true;
        self
    }
    /// A status subresource with the usual built-in strategy: spec kept, metadata free.
    fn status(mut self) -> Self {
        self.0.status_subresource = true;
        self.0.status_writes = StatusWrites::KeepSpec {
            labels: false,
            owner_references: false,
        };
        self
    }
    fn status_writes(mut self, writes: StatusWrites) -> Self {
        self.0.status_writes = writes;
        self
    }
    /// A `/scale` subresource over `spec.replicas` / `status.replicas`; the selector comes
    /// from `spec.selector` (see the scale module).
    fn scalable(mut self) -> Self {
        self.0.scale = Some(ScalePaths {
            spec_replicas_path: ".spec.replicas".into(),
            status_replicas_path: ".status.replicas".into(),
            label_selector_path: None,
        });
        self
    }
    fn generation(mut self) -> Self {
        self.0.tracks_generation = true;
        self
    }
    fn gc(mut self, policy: crate::deletion::GcPolicy) -> Self {
        self.0.gc_policy = policy;
        self
    }
    fn graceful(mut self) -> Self {
        self.0.graceful = true;
        self
    }
    fn names(mut self, rule: NameRule) -> Self {
        self.0.name_rule = rule;
        self
    }
    fn returns_deleted(mut self) -> Self {
        self.0.returns_deleted_object = true;
        self
    }
    fn fields(mut self, fields: &[&str]) -> Self {
        self.0.selectable_fields = fields.iter().map(|s| s.to_string()).collect();
        self
    }
    /// Labels read at another path than they spell (see [`ResourceType::field_paths`]).
    fn field_paths(mut self, paths: &'static [(&'static str, &'static str)]) -> Self {
        self.0.field_paths = paths;
        self
    }
    /// Served as a view of another resource's objects.
    fn view(mut self, view: StorageView) -> Self {
        self.0.view = Some(view);
        self
    }
    fn write_defaults(mut self, hook: DefaultingHook) -> Self {
        self.0.write_defaults = Some(hook);
        self
    }
    fn validation(mut self, hook: ValidationHook) -> Self {
        self.0.validation = Some(hook);
        self
    }
    fn categories(mut self, categories: &[&str]) -> Self {
        self.0.categories = categories.iter().map(|s| s.to_string()).collect();
        self
    }
    fn defaulting(mut self, hook: DefaultingHook) -> Self {
        self.0.defaulting = Some(hook);
        self
    }
    /// Served by a handler of its own, not stored.
    fn served_by(mut self, handler: ServedBy) -> Self {
        self.0.served_by = Some(handler);
        self
    }
    /// An `/approval` subresource (see [`ResourceType::approval_subresource`]).
    fn approval(mut self) -> Self {
        self.0.approval_subresource = true;
        self
    }
    fn strategies(mut self, create: CreateStrategy, update: UpdateStrategy) -> Self {
        self.0.create_strategy = Some(create);
        self.0.update_strategy = Some(update);
        self
    }
}

/// api-surface §11: a namespace is created Active, with the `kubernetes` finalizer and the
/// immutable name label.
fn default_namespace(object: &mut Value) {
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        let labels = metadata.entry("labels").or_insert_with(|| json!({}));
        if let Some(labels) = labels.as_object_mut() {
            labels.insert("kubernetes.io/metadata.name".into(), json!(name));
        }
    }
    if let Some(object) = object.as_object_mut() {
        let spec = object.entry("spec").or_insert_with(|| json!({}));
        if spec.get("finalizers").is_none() {
            spec["finalizers"] = json!(["kubernetes"]);
        }
        object.insert("status".into(), json!({"phase": "Active"}));
    }
}

/// Pods start Pending until a kubelet says otherwise; there is no kubelet here.
fn default_pod(object: &mut Value) {
    if let Some(object) = object.as_object_mut() {
        let status = object.entry("status").or_insert_with(|| json!({}));
        if status.get("phase").is_none() {
            status["phase"] = json!("Pending");
        }
        let spec = object.entry("spec").or_insert_with(|| json!({}));
        if spec.get("terminationGracePeriodSeconds").is_none() {
            spec["terminationGracePeriodSeconds"] = json!(30);
        }
    }
    crate::taints::add_default_tolerations(
        object,
        DEFAULT_TOLERATION_SECONDS,
        DEFAULT_TOLERATION_SECONDS,
    );
}

/// How long a Pod stays on a not-ready or unreachable Node unless it says otherwise
/// (kube-apiserver's `--default-not-ready-toleration-seconds` and
/// `--default-unreachable-toleration-seconds`, not configurable here).
pub const DEFAULT_TOLERATION_SECONDS: i64 = 300;

/// A Secret's `stringData` is write-only convenience: it is merged into `data` (base64) and
/// never stored; `type` defaults to Opaque.
fn default_secret(object: &mut Value) {
    use base64::Engine;
    let Some(map) = object.as_object_mut() else {
        return;
    };
    if !map.contains_key("type") {
        map.insert("type".into(), json!("Opaque"));
    }
    if let Some(Value::Object(string_data)) = map.remove("stringData") {
        let data = map.entry("data").or_insert_with(|| json!({}));
        if !data.is_object() {
            *data = json!({});
        }
        for (key, value) in string_data {
            let text = value
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| value.to_string());
            data[key.as_str()] = json!(base64::engine::general_purpose::STANDARD.encode(text));
        }
    }
}

/// Services default to ClusterIP; each port's protocol to TCP and its targetPort (absent, or
/// 0 as protobuf bodies carry an unset one) to the port itself.
fn default_service(object: &mut Value) {
    if let Some(object) = object.as_object_mut() {
        let spec = object.entry("spec").or_insert_with(|| json!({}));
        if spec.get("type").is_none() {
            spec["type"] = json!("ClusterIP");
        }
        if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
            for port in ports.iter_mut().filter(|p| p.is_object()) {
                if port.get("protocol").is_none() {
                    port["protocol"] = json!("TCP");
                }
                let unset = match port.get("targetPort") {
                    None | Some(Value::Null) => true,
                    Some(Value::Number(n)) => n.as_i64() == Some(0),
                    Some(Value::String(s)) => s.is_empty(),
                    _ => false,
                };
                if unset && let Some(number) = port.get("port").cloned() {
                    port["targetPort"] = number;
                }
            }
        }
    }
}

/// The built-in kinds Finale serves.
pub fn builtin_types() -> Vec<ResourceType> {
    use k8s_openapi::api::{
        admissionregistration, apps, authentication, authorization, autoscaling, batch,
        certificates, coordination, core, discovery, events, flowcontrol, networking, node, policy,
        rbac, scheduling, storage,
    };
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions;
    use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;

    let event_fields = [
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ];
    // Upstream's field label conversion for events.k8s.io/v1 names the same fields.
    let events_api_fields = [
        "regarding.kind",
        "regarding.namespace",
        "regarding.name",
        "regarding.uid",
        "regarding.apiVersion",
        "regarding.resourceVersion",
        "regarding.fieldPath",
        "reason",
        "reportingController",
        "type",
    ];
    let pod_fields = [
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ];
    vec![
        Builtin::new("", "v1", "Namespace", "namespaces", false)
            .typed::<core::v1::Namespace>()
            .short(&["ns"])
            .status()
            .names(NameRule::Dns1123Label)
            .returns_deleted()
            .fields(&["status.phase"])
            .defaulting(default_namespace)
            .0,
        Builtin::new("", "v1", "ConfigMap", "configmaps", true)
            .typed::<core::v1::ConfigMap>()
            .short(&["cm"])
            .0,
        Builtin::new("", "v1", "Secret", "secrets", true)
            .typed::<core::v1::Secret>()
            .fields(&["type"])
            .write_defaults(default_secret)
            .0,
        Builtin::new("", "v1", "ServiceAccount", "serviceaccounts", true)
            .typed::<core::v1::ServiceAccount>()
            .short(&["sa"])
            .returns_deleted()
            .issues_tokens()
            .0,
        Builtin::new("", "v1", "Service", "services", true)
            .typed::<core::v1::Service>()
            .short(&["svc"])
            .in_all()
            .status()
            .names(NameRule::Dns1035Label)
            .write_defaults(default_service)
            .0,
        Builtin::new("", "v1", "Pod", "pods", true)
            .typed::<core::v1::Pod>()
            .short(&["po"])
            .in_all()
            .status()
            .status_writes(StatusWrites::KeepSpec {
                labels: false,
                owner_references: true,
            })
            .returns_deleted()
            .fields(&pod_fields)
            .runs_on_nodes()
            .graceful()
            .defaulting(default_pod)
            .0,
        // Registered and kept current by node agents (`finale node`); its Lease in
        // kube-node-lease is the heartbeat the node lifecycle controller reads.
        Builtin::new("", "v1", "Node", "nodes", false)
            .typed::<core::v1::Node>()
            .short(&["no"])
            .status()
            .status_writes(StatusWrites::KeepSpec {
                labels: false,
                owner_references: false,
            })
            .fields(&["spec.unschedulable"])
            .0,
        Builtin::new("", "v1", "Event", "events", true)
            .typed::<core::v1::Event>()
            .short(&["ev"])
            .gc(crate::deletion::GcPolicy::Unsupported)
            .fields(&event_fields)
            .field_paths(&[("source", "source.component")])
            .validation(crate::kinds::event::validate_core_event)
            .0,
        // The same objects as core Events, fields renamed (kinds/event.rs).
        Builtin::new("events.k8s.io", "v1", "Event", "events", true)
            .typed::<events::v1::Event>()
            .short(&["ev"])
            .gc(crate::deletion::GcPolicy::Unsupported)
            .fields(&events_api_fields)
            .validation(crate::kinds::event::validate_events_event)
            .view(StorageView {
                group: "",
                plural: "events",
                from_storage: crate::kinds::event::core_to_events,
                to_storage: crate::kinds::event::events_to_core,
            })
            .0,
        Builtin::new("coordination.k8s.io", "v1", "Lease", "leases", true)
            .typed::<coordination::v1::Lease>()
            .0,
        // Who a token stands for, for services handed one (authn/token_review.rs).
        Builtin::new(
            "authentication.k8s.io",
            "v1",
            "TokenReview",
            "tokenreviews",
            false,
        )
        .typed::<authentication::v1::TokenReview>()
        .review()
        .0,
        // `kubectl auth whoami`: who the server takes the caller for.
        Builtin::new(
            "authentication.k8s.io",
            "v1",
            "SelfSubjectReview",
            "selfsubjectreviews",
            false,
        )
        .typed::<authentication::v1::SelfSubjectReview>()
        .review()
        .0,
        // `kubectl auth can-i`: answered by the authorizer (authz/review.rs).
        Builtin::new(
            "authorization.k8s.io",
            "v1",
            "SelfSubjectAccessReview",
            "selfsubjectaccessreviews",
            false,
        )
        .typed::<authorization::v1::SelfSubjectAccessReview>()
        .review()
        .0,
        Builtin::new(
            "authorization.k8s.io",
            "v1",
            "SelfSubjectRulesReview",
            "selfsubjectrulesreviews",
            false,
        )
        .typed::<authorization::v1::SelfSubjectRulesReview>()
        .review()
        .0,
        Builtin::new(
            "authorization.k8s.io",
            "v1",
            "SubjectAccessReview",
            "subjectaccessreviews",
            false,
        )
        .typed::<authorization::v1::SubjectAccessReview>()
        .review()
        .0,
        Builtin::new(
            "authorization.k8s.io",
            "v1",
            "LocalSubjectAccessReview",
            "localsubjectaccessreviews",
            true,
        )
        .typed::<authorization::v1::LocalSubjectAccessReview>()
        .review()
        .0,
        // What the authorizer decides by (authz/).
        Builtin::new("rbac.authorization.k8s.io", "v1", "Role", "roles", true)
            .typed::<rbac::v1::Role>()
            .names(NameRule::PathSegment)
            .0,
        Builtin::new(
            "rbac.authorization.k8s.io",
            "v1",
            "RoleBinding",
            "rolebindings",
            true,
        )
        .typed::<rbac::v1::RoleBinding>()
        .names(NameRule::PathSegment)
        .0,
        Builtin::new(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRole",
            "clusterroles",
            false,
        )
        .typed::<rbac::v1::ClusterRole>()
        .names(NameRule::PathSegment)
        .0,
        Builtin::new(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRoleBinding",
            "clusterrolebindings",
            false,
        )
        .typed::<rbac::v1::ClusterRoleBinding>()
        .names(NameRule::PathSegment)
        .0,
        Builtin::new("apps", "v1", "Deployment", "deployments", true)
            .typed::<apps::v1::Deployment>()
            .short(&["deploy"])
            .generation()
            .scalable()
            .in_all()
            .status()
            .status_writes(StatusWrites::KeepSpec {
                labels: true,
                owner_references: false,
            })
            .0,
        Builtin::new("apps", "v1", "ReplicaSet", "replicasets", true)
            .typed::<apps::v1::ReplicaSet>()
            .short(&["rs"])
            .generation()
            .scalable()
            .in_all()
            .status()
            .status_writes(StatusWrites::KeepSpec {
                labels: true,
                owner_references: false,
            })
            .fields(&["status.replicas"])
            .0,
        Builtin::new(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            false,
        )
        .typed::<apiextensions::v1::CustomResourceDefinition>()
        .short(&["crd", "crds"])
        .categories(&["api-extensions"])
        .status()
        .status_writes(StatusWrites::StatusOnly)
        .generation()
        .write_defaults(crate::crd::definition::default_crd)
        .validation(crate::crd::definition::validate_crd)
        .0,
        Builtin::new("batch", "v1", "Job", "jobs", true)
            .typed::<batch::v1::Job>()
            .generation()
            .gc(crate::deletion::GcPolicy::OrphanDependents)
            .defaulting(crate::kinds::job::default_job)
            .validation(crate::kinds::job::validate_job)
            .in_all()
            .status()
            .fields(&["status.successful"])
            .0,
        // Kinds stored and served as upstream serves them, whose controllers Finale does not
        // run (docs/compatibility.md lists which run): what envtest offers too.
        Builtin::new("", "v1", "PodTemplate", "podtemplates", true)
            .typed::<core::v1::PodTemplate>()
            .0,
        Builtin::new(
            "",
            "v1",
            "ReplicationController",
            "replicationcontrollers",
            true,
        )
        .typed::<core::v1::ReplicationController>()
        .short(&["rc"])
        .in_all()
        .status()
        .scalable()
        .generation()
        // P7: v1 ReplicationControllers orphan their Pods unless told otherwise, as upstream's
        // rcStrategy keeps for backward compatibility.
        .gc(crate::deletion::GcPolicy::OrphanDependents)
        .0,
        Builtin::new("", "v1", "Endpoints", "endpoints", true)
            .typed::<core::v1::Endpoints>()
            .short(&["ep"])
            .0,
        Builtin::new(
            "",
            "v1",
            "PersistentVolumeClaim",
            "persistentvolumeclaims",
            true,
        )
        .typed::<core::v1::PersistentVolumeClaim>()
        .short(&["pvc"])
        .status()
        .0,
        Builtin::new("", "v1", "PersistentVolume", "persistentvolumes", false)
            .typed::<core::v1::PersistentVolume>()
            .short(&["pv"])
            .status()
            .0,
        Builtin::new("", "v1", "LimitRange", "limitranges", true)
            .typed::<core::v1::LimitRange>()
            .short(&["limits"])
            .0,
        Builtin::new("", "v1", "ResourceQuota", "resourcequotas", true)
            .typed::<core::v1::ResourceQuota>()
            .short(&["quota"])
            .status()
            .0,
        Builtin::new("apps", "v1", "StatefulSet", "statefulsets", true)
            .typed::<apps::v1::StatefulSet>()
            .short(&["sts"])
            .in_all()
            .status()
            .scalable()
            .generation()
            .0,
        Builtin::new("apps", "v1", "DaemonSet", "daemonsets", true)
            .typed::<apps::v1::DaemonSet>()
            .short(&["ds"])
            .in_all()
            .status()
            .generation()
            .0,
        Builtin::new(
            "apps",
            "v1",
            "ControllerRevision",
            "controllerrevisions",
            true,
        )
        .typed::<apps::v1::ControllerRevision>()
        .0,
        // v2 is stored (and preferred, so listed first); v1 is a view (kinds/hpa.rs).
        Builtin::new(
            "autoscaling",
            "v2",
            "HorizontalPodAutoscaler",
            "horizontalpodautoscalers",
            true,
        )
        .typed::<autoscaling::v2::HorizontalPodAutoscaler>()
        .short(&["hpa"])
        .in_all()
        .status()
        .generation()
        .defaulting(crate::kinds::hpa::default_v2)
        .0,
        Builtin::new(
            "autoscaling",
            "v1",
            "HorizontalPodAutoscaler",
            "horizontalpodautoscalers",
            true,
        )
        .typed::<autoscaling::v1::HorizontalPodAutoscaler>()
        .short(&["hpa"])
        .in_all()
        .status()
        .generation()
        .defaulting(crate::kinds::hpa::default_v1)
        .view(StorageView {
            group: "autoscaling",
            plural: "horizontalpodautoscalers",
            from_storage: crate::kinds::hpa::v2_to_v1,
            to_storage: crate::kinds::hpa::v1_to_v2,
        })
        .0,
        Builtin::new("batch", "v1", "CronJob", "cronjobs", true)
            .typed::<batch::v1::CronJob>()
            .short(&["cj"])
            .in_all()
            .status()
            .generation()
            .0,
        Builtin::new(
            "policy",
            "v1",
            "PodDisruptionBudget",
            "poddisruptionbudgets",
            true,
        )
        .typed::<policy::v1::PodDisruptionBudget>()
        .short(&["pdb"])
        .status()
        .generation()
        .0,
        Builtin::new("networking.k8s.io", "v1", "Ingress", "ingresses", true)
            .typed::<networking::v1::Ingress>()
            .short(&["ing"])
            .status()
            .generation()
            .0,
        Builtin::new(
            "networking.k8s.io",
            "v1",
            "IngressClass",
            "ingressclasses",
            false,
        )
        .typed::<networking::v1::IngressClass>()
        .0,
        Builtin::new(
            "networking.k8s.io",
            "v1",
            "NetworkPolicy",
            "networkpolicies",
            true,
        )
        .typed::<networking::v1::NetworkPolicy>()
        .short(&["netpol"])
        .generation()
        .0,
        Builtin::new(
            "discovery.k8s.io",
            "v1",
            "EndpointSlice",
            "endpointslices",
            true,
        )
        .typed::<discovery::v1::EndpointSlice>()
        .0,
        Builtin::new(
            "storage.k8s.io",
            "v1",
            "StorageClass",
            "storageclasses",
            false,
        )
        .typed::<storage::v1::StorageClass>()
        .short(&["sc"])
        .0,
        Builtin::new("storage.k8s.io", "v1", "CSIDriver", "csidrivers", false)
            .typed::<storage::v1::CSIDriver>()
            .0,
        Builtin::new("storage.k8s.io", "v1", "CSINode", "csinodes", false)
            .typed::<storage::v1::CSINode>()
            .0,
        Builtin::new(
            "storage.k8s.io",
            "v1",
            "VolumeAttachment",
            "volumeattachments",
            false,
        )
        .typed::<storage::v1::VolumeAttachment>()
        .status()
        .0,
        Builtin::new(
            "scheduling.k8s.io",
            "v1",
            "PriorityClass",
            "priorityclasses",
            false,
        )
        .typed::<scheduling::v1::PriorityClass>()
        .short(&["pc"])
        .0,
        Builtin::new("node.k8s.io", "v1", "RuntimeClass", "runtimeclasses", false)
            .typed::<node::v1::RuntimeClass>()
            .0,
        Builtin::new(
            "storage.k8s.io",
            "v1",
            "CSIStorageCapacity",
            "csistoragecapacities",
            true,
        )
        .typed::<storage::v1::CSIStorageCapacity>()
        .0,
        // Stored for the clients that manage them; Service IPs are not allocated from them.
        Builtin::new("networking.k8s.io", "v1", "IPAddress", "ipaddresses", false)
            .typed::<networking::v1::IPAddress>()
            .short(&["ip"])
            .0,
        Builtin::new(
            "networking.k8s.io",
            "v1",
            "ServiceCIDR",
            "servicecidrs",
            false,
        )
        .typed::<networking::v1::ServiceCIDR>()
        .status()
        .0,
        // Webhook configurations are called for real and ValidatingAdmissionPolicies evaluated
        // with their bindings (crate::admission).
        Builtin::new(
            "admissionregistration.k8s.io",
            "v1",
            "MutatingWebhookConfiguration",
            "mutatingwebhookconfigurations",
            false,
        )
        .typed::<admissionregistration::v1::MutatingWebhookConfiguration>()
        .generation()
        .write_defaults(crate::admission::default_mutating)
        .validation(crate::admission::validate_mutating)
        .0,
        Builtin::new(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingWebhookConfiguration",
            "validatingwebhookconfigurations",
            false,
        )
        .typed::<admissionregistration::v1::ValidatingWebhookConfiguration>()
        .generation()
        .write_defaults(crate::admission::default_validating)
        .validation(crate::admission::validate_validating)
        .0,
        Builtin::new(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingAdmissionPolicy",
            "validatingadmissionpolicies",
            false,
        )
        .typed::<admissionregistration::v1::ValidatingAdmissionPolicy>()
        .status()
        .generation()
        .write_defaults(crate::admission::default_policy)
        .validation(crate::admission::validate_policy)
        .0,
        Builtin::new(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingAdmissionPolicyBinding",
            "validatingadmissionpolicybindings",
            false,
        )
        .typed::<admissionregistration::v1::ValidatingAdmissionPolicyBinding>()
        .generation()
        .write_defaults(crate::admission::default_binding)
        .validation(crate::admission::validate_binding)
        .0,
        // API priority and fairness configuration: stored; requests are bounded by
        // --max-requests-inflight instead.
        Builtin::new(
            "flowcontrol.apiserver.k8s.io",
            "v1",
            "FlowSchema",
            "flowschemas",
            false,
        )
        .typed::<flowcontrol::v1::FlowSchema>()
        .status()
        .generation()
        .0,
        Builtin::new(
            "flowcontrol.apiserver.k8s.io",
            "v1",
            "PriorityLevelConfiguration",
            "prioritylevelconfigurations",
            false,
        )
        .typed::<flowcontrol::v1::PriorityLevelConfiguration>()
        .status()
        .generation()
        .0,
        // Deprecated upstream since 1.19 and still served: built on each request from the
        // server's own health checks (http/legacy.rs).
        Builtin::new("", "v1", "ComponentStatus", "componentstatuses", false)
            .typed::<core::v1::ComponentStatus>()
            .short(&["cs"])
            .served_by(ServedBy::ComponentStatuses)
            .0,
        // The legacy route to a Pod's binding: the Binding's own name names the Pod.
        Builtin::new("", "v1", "Binding", "bindings", true)
            .typed::<core::v1::Binding>()
            .served_by(ServedBy::PodBindings)
            .0,
        // Approved or denied through `/approval`, issued through `/status`
        // (kinds/certificates.rs); `kubernetes.io/kube-apiserver-client` requests are signed
        // by the server's CA (controllers/csr_signer.rs).
        Builtin::new(
            "certificates.k8s.io",
            "v1",
            "CertificateSigningRequest",
            "certificatesigningrequests",
            false,
        )
        .typed::<certificates::v1::CertificateSigningRequest>()
        .short(&["csr"])
        .status()
        .approval()
        .names(NameRule::PathSegment)
        .fields(&["spec.signerName"])
        .strategies(
            crate::kinds::certificates::prepare_create,
            crate::kinds::certificates::prepare_update,
        )
        .validation(crate::kinds::certificates::validate)
        .0,
        // Stored; requests are not proxied to the services they name.
        Builtin::new(
            "apiregistration.k8s.io",
            "v1",
            "APIService",
            "apiservices",
            false,
        )
        .typed::<APIService>()
        .status()
        .0,
    ]
}

/// The live set of served resource types, looked up by URL coordinates.
///
/// Behind a lock because custom resource definitions add and remove types at run time.
#[derive(Default)]
pub struct Catalog {
    types: RwLock<Vec<Arc<ResourceType>>>,
    /// Bumped on every change, so what is derived from the catalog (OpenAPI documents) knows
    /// when to derive it again.
    generation: AtomicU64,
}

impl Catalog {
    pub fn with_builtins() -> Self {
        let catalog = Catalog::default();
        for resource in builtin_types()
            .into_iter()
            .chain(crate::insight::resource_types())
        {
            catalog.add(resource);
        }
        catalog
    }

    pub fn add(&self, resource: ResourceType) {
        let mut types = self
            .types
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        types.retain(|t| {
            !(t.group == resource.group
                && t.version == resource.version
                && t.plural == resource.plural)
        });
        types.push(Arc::new(resource));
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Changes with every change of the served types.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Replaces every served version of `group`/`plural` with `types` in one step, so that
    /// routes and discovery change together (a CRD accepted, changed or gone).
    pub fn replace_resource(&self, group: &str, plural: &str, types: Vec<ResourceType>) {
        let mut current = self
            .types
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        current.retain(|t| !(t.group == group && t.plural == plural));
        current.extend(types.into_iter().map(Arc::new));
        self.generation.fetch_add(1, Ordering::Release);
    }

    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.find(|t| t.group == group && t.version == version && t.plural == plural)
    }

    /// A served version of `group`/`plural` (they all share one storage prefix): the storage
    /// version where there is one, so that in-process callers (the garbage collector, the
    /// CRD controller's cleanup) work on objects as stored, needing no conversion webhook.
    pub fn lookup_resource(&self, group: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.find(|t| t.group == group && t.plural == plural && t.is_storage_version())
            .or_else(|| self.find(|t| t.group == group && t.plural == plural))
    }

    /// The type serving `kind` at `apiVersion` (`v1`, `apps/v1`).
    pub fn lookup_kind(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceType>> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        self.find(|t| t.group == group && t.version == version && t.kind == kind)
    }

    /// The first type matching `wanted`, read under the lock (no copy of the whole list:
    /// the garbage collector looks types up on every change).
    fn find(&self, wanted: impl Fn(&ResourceType) -> bool) -> Option<Arc<ResourceType>> {
        self.types
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
            .find(|t| wanted(t))
            .cloned()
    }

    pub fn all(&self) -> Vec<Arc<ResourceType>> {
        self.types
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Served groups with their versions in preference order, core group first.
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut order: Vec<String> = Vec::new();
        let mut versions: HashMap<String, Vec<String>> = HashMap::new();
        for t in self.all() {
            let entry = versions.entry(t.group.clone()).or_default();
            if entry.is_empty() {
                order.push(t.group.clone());
            }
            if !entry.contains(&t.version) {
                entry.push(t.version.clone());
            }
        }
        order
            .into_iter()
            .map(|group| {
                let v = versions.remove(&group).unwrap_or_default();
                (group, v)
            })
            .collect()
    }

    pub fn resources_in(&self, group: &str, version: &str) -> Vec<Arc<ResourceType>> {
        self.all()
            .into_iter()
            .filter(|t| t.group == group && t.version == version)
            .collect()
    }
}
