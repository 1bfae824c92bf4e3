//! Server-side `Table` output for `kubectl get` (api-surface §3).
//!
//! kubectl prints the cells it is given, so everything a person reads is computed here: ages,
//! `1/2` readiness, `80/TCP,443/TCP`. Three kinds of printer exist, as upstream has them:
//! - **built-in kinds** get the columns and cells of upstream's internal printers, always in
//!   their wide form (priority-1 columns included; kubectl hides them without `-o wide`);
//! - **custom resources** get Name plus their CRD `additionalPrinterColumns`, each evaluated
//!   with the JSONPath dialect of [`super::jsonpath`], or Name plus Age when they have none;
//! - **anything else** (CustomResourceDefinitions, Roles, LimitRanges among them) gets
//!   upstream's default convertor: Name and an RFC 3339 `Created At`.
//!
//! Each row carries the object as `PartialObjectMetadata`, which kubectl uses for `-A`,
//! `--show-labels` and `-L`.
//!
//! This module holds the rendering and the field readers every printer shares; [`custom`]
//! holds the custom-resource columns. The built-in printers live by area, and [`PRINTERS`]
//! maps each built-in (group, resource) to one, so adding a kind is adding a printer and a row:
//! - [`core`] has namespaces, config maps, secrets, service accounts, nodes, resource quotas;
//! - [`pods`] has pods;
//! - [`networking`] has services, endpoints, endpoint slices, ingresses, ingress classes,
//!   network policies;
//! - [`workloads`] has deployments, replica sets, stateful sets, daemon sets, controller
//!   revisions, replication controllers, pod templates and the `/scale` subresource;
//! - [`batch`] has jobs and cron jobs;
//! - [`events`] has core and `events.k8s.io` events;
//! - [`storage`] has persistent volumes and claims, storage classes, CSI drivers and nodes,
//!   volume attachments;
//! - [`cluster`] has RBAC bindings, priority and runtime classes, disruption budgets, leases and
//!   Finale's own kinds;
//! - [`control_plane`] has admission webhook configurations and policies, FlowSchemas,
//!   priority levels and APIServices.
//!
//! # Caveats
//! - Objects are printed as stored. Upstream prints defaulted objects, so the few defaults the
//!   printers depend on (a Deployment's or ReplicaSet's `spec.replicas` of 1, a service port's
//!   `TCP` protocol, a PersistentVolume's `Retain` reclaim policy, …) are applied here when
//!   absent; each printer names the ones it applies.
//! - Resource quantities (capacities, quota usage) are printed as stored; upstream prints them
//!   in canonical form (`1024Mi` as `1Gi`).
//! - A CRD column whose `jsonPath` does not parse ends the column list there, as upstream
//!   falls back to the columns it managed to build.
//! - `includeObject` is not honoured: rows always carry `PartialObjectMetadata`.

mod batch;
mod cluster;
mod control_plane;
mod core;
mod custom;
mod events;
mod networking;
mod pods;
mod storage;
#[cfg(test)]
mod testing;
mod workloads;

use std::borrow::Cow;

use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use http::{HeaderValue, StatusCode, header};
use serde_json::{Value, json};

use crate::object;
use crate::resources::ResourceType;
use custom::{CustomColumn, custom_cell, custom_columns};

pub const TABLE_CONTENT_TYPE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

/// The Table for a list or a single object. `with_definitions` is false for watch events
/// after the first, which kubectl accepts.
pub fn table(resource: &ResourceType, body: &Value, with_definitions: bool) -> Value {
    render(resource, body, with_definitions, &Clock { now: Utc::now() })
}

pub fn response(code: StatusCode, resource: &ResourceType, body: &Value) -> Response {
    let bytes = serde_json::to_vec(&table(resource, body, true)).unwrap_or_default();
    (
        code,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(TABLE_CONTENT_TYPE),
        )],
        bytes,
    )
        .into_response()
}

/// Upstream's `duration.HumanDuration` for a whole number of seconds (truncated towards
/// zero): two or three significant figures, finer units while they still matter.
pub fn human_duration(seconds: i64) -> String {
    // One second of clock skew between writer and reader still reads as "now".
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let with_remainder = |major: i64, major_unit: &str, minor: i64, minor_unit: &str| {
        if minor == 0 {
            format!("{major}{major_unit}")
        } else {
            format!("{major}{major_unit}{minor}{minor_unit}")
        }
    };
    let minutes = seconds / 60;
    if minutes < 10 {
        return with_remainder(minutes, "m", seconds % 60, "s");
    }
    if minutes < 3 * 60 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        return with_remainder(hours, "h", minutes % 60, "m");
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    let days = hours / 24;
    if hours < 24 * 8 {
        return with_remainder(days, "d", hours % 24, "h");
    }
    if hours < 24 * 365 * 2 {
        return format!("{days}d");
    }
    let years = days / 365;
    if hours < 24 * 365 * 8 {
        return with_remainder(years, "y", days % 365, "d");
    }
    format!("{years}y")
}

// =============================================================================================
// Tables and rows
// =============================================================================================

/// "Now", fixed for one Table so every row is aged against the same instant (and so tests can
/// pin it).
struct Clock {
    now: DateTime<Utc>,
}

impl Clock {
    fn parse(timestamp: Option<&str>) -> Option<DateTime<Utc>> {
        timestamp
            .filter(|t| !t.is_empty())
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&Utc))
    }

    /// Time elapsed since `timestamp`, humanised; `<unknown>` for a missing timestamp.
    fn since(&self, timestamp: Option<&str>) -> String {
        match Self::parse(timestamp) {
            Some(then) => human_duration((self.now - then).num_seconds()),
            None => "<unknown>".into(),
        }
    }
}

fn render(resource: &ResourceType, body: &Value, with_definitions: bool, clock: &Clock) -> Value {
    let printer = Printer::for_body(resource, body);
    let is_list = body.get("kind").and_then(Value::as_str) == Some(resource.list_kind.as_str());
    let rows: Vec<Value> = match body.get("items").and_then(Value::as_array) {
        Some(items) if is_list => printer
            .in_order(items)
            .into_iter()
            .map(|item| printer.row(item, clock))
            .collect(),
        _ => vec![printer.row(body, clock)],
    };
    let definitions: Vec<Value> = if with_definitions {
        printer.columns().iter().map(Column::to_json).collect()
    } else {
        Vec::new()
    };
    let mut metadata = json!({});
    for field in ["resourceVersion", "continue", "remainingItemCount"] {
        if let Some(value) = body.pointer(&format!("/metadata/{field}")) {
            metadata[field] = value.clone();
        }
    }
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": definitions,
        "rows": rows,
    })
}

/// One row: the cells, upstream's row conditions (completed pods), and the object's metadata.
fn row(cells: Vec<Value>, conditions: Option<Value>, item: &Value) -> Value {
    let mut metadata = object::metadata(item).cloned().unwrap_or_default();
    metadata.remove("managedFields");
    let mut row = json!({
        "cells": cells,
        "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": metadata},
    });
    if let Some(conditions) = conditions {
        row["conditions"] = conditions;
    }
    row
}

// =============================================================================================
// Columns and printers
// =============================================================================================

/// A `TableColumnDefinition`.
#[derive(Clone, Debug, PartialEq)]
struct Column {
    name: Cow<'static, str>,
    /// integer, number, string, boolean or date.
    kind: Cow<'static, str>,
    format: Cow<'static, str>,
    description: Cow<'static, str>,
    /// Columns above 0 appear only with `-o wide`.
    priority: i64,
}

impl Column {
    const fn new(name: &'static str, kind: &'static str, description: &'static str) -> Column {
        Column {
            name: Cow::Borrowed(name),
            kind: Cow::Borrowed(kind),
            format: Cow::Borrowed(""),
            description: Cow::Borrowed(description),
            priority: 0,
        }
    }

    const fn string(name: &'static str, description: &'static str) -> Column {
        Column::new(name, "string", description)
    }

    const fn wide(mut self) -> Column {
        self.priority = 1;
        self
    }

    /// A column holding the object's name (kubectl recognises the `name` format).
    const fn object_name(name: &'static str) -> Column {
        Column {
            name: Cow::Borrowed(name),
            kind: Cow::Borrowed("string"),
            format: Cow::Borrowed("name"),
            description: Cow::Borrowed(NAME_DESCRIPTION),
            priority: 0,
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "type": self.kind,
            "format": self.format,
            "description": self.description,
            "priority": self.priority,
        })
    }
}

const NAME_DESCRIPTION: &str =
    "Name of the object, unique among objects of its kind (within a namespace, if namespaced).";
const CREATED_DESCRIPTION: &str =
    "When the object was created (metadata.creationTimestamp), as time elapsed since then.";

const NAME: Column = Column::object_name("Name");
const AGE: Column = Column::string("Age", CREATED_DESCRIPTION);
const CONTAINERS: Column =
    Column::string("Containers", "Names of the containers in the pod template.").wide();
const IMAGES: Column =
    Column::string("Images", "Images of the containers in the pod template.").wide();

/// Upstream's default convertor, for kinds without a printer (CustomResourceDefinitions).
const DEFAULT_COLUMNS: &[Column] = &[NAME, Column::new("Created At", "date", CREATED_DESCRIPTION)];

type Cells = fn(&Value, &Clock) -> Vec<Value>;

/// A row's `conditions`, for the kinds that have them.
type RowConditions = fn(&Value) -> Option<Value>;
/// The order a printer lists rows in, when upstream sorts them (FlowSchemas by precedence).
type RowOrder = fn(&Value, &Value) -> std::cmp::Ordering;

/// How the objects of one built-in kind print: its columns, and the cells (one per column)
/// and row conditions of one object.
struct BuiltinPrinter {
    columns: &'static [Column],
    cells: Cells,
    conditions: RowConditions,
    /// None: rows in the list's own (key) order.
    order: Option<RowOrder>,
}

impl BuiltinPrinter {
    const fn new(columns: &'static [Column], cells: Cells) -> BuiltinPrinter {
        BuiltinPrinter {
            columns,
            cells,
            conditions: no_row_conditions,
            order: None,
        }
    }

    const fn with_order(mut self, order: RowOrder) -> BuiltinPrinter {
        self.order = Some(order);
        self
    }

    const fn with_conditions(mut self, conditions: RowConditions) -> BuiltinPrinter {
        self.conditions = conditions;
        self
    }
}

fn no_row_conditions(_: &Value) -> Option<Value> {
    None
}

/// One row of [`PRINTERS`]: the built-in resource and how it prints.
struct PrinterEntry {
    group: &'static str,
    plural: &'static str,
    printer: BuiltinPrinter,
}

const fn entry(
    group: &'static str,
    plural: &'static str,
    columns: &'static [Column],
    cells: Cells,
) -> PrinterEntry {
    PrinterEntry {
        group,
        plural,
        printer: BuiltinPrinter::new(columns, cells),
    }
}

/// Every built-in resource with a printer of its own. Anything not listed (Roles,
/// ClusterRoles, LimitRanges, CRDs, …) prints with [`DEFAULT_COLUMNS`], as upstream has no
/// printer for it either.
const PRINTERS: &[PrinterEntry] = &[
    // core/v1
    entry(
        "",
        "namespaces",
        core::NAMESPACE_COLUMNS,
        core::namespace_cells,
    ),
    entry(
        "",
        "configmaps",
        core::CONFIG_MAP_COLUMNS,
        core::config_map_cells,
    ),
    entry("", "secrets", core::SECRET_COLUMNS, core::secret_cells),
    entry(
        "",
        "serviceaccounts",
        core::SERVICE_ACCOUNT_COLUMNS,
        core::service_account_cells,
    ),
    entry("", "nodes", core::NODE_COLUMNS, core::node_cells),
    entry(
        "",
        "resourcequotas",
        core::RESOURCE_QUOTA_COLUMNS,
        core::resource_quota_cells,
    ),
    PrinterEntry {
        group: "",
        plural: "pods",
        printer: BuiltinPrinter::new(pods::POD_COLUMNS, pods::pod_cells)
            .with_conditions(pods::pod_row_conditions),
    },
    entry(
        "",
        "podtemplates",
        workloads::POD_TEMPLATE_COLUMNS,
        workloads::pod_template_cells,
    ),
    entry(
        "",
        "replicationcontrollers",
        workloads::REPLICATION_CONTROLLER_COLUMNS,
        workloads::replication_controller_cells,
    ),
    entry(
        "",
        "services",
        networking::SERVICE_COLUMNS,
        networking::service_cells,
    ),
    entry(
        "",
        "endpoints",
        networking::ENDPOINTS_COLUMNS,
        networking::endpoints_cells,
    ),
    entry(
        "",
        "persistentvolumeclaims",
        storage::PERSISTENT_VOLUME_CLAIM_COLUMNS,
        storage::persistent_volume_claim_cells,
    ),
    entry(
        "",
        "persistentvolumes",
        storage::PERSISTENT_VOLUME_COLUMNS,
        storage::persistent_volume_cells,
    ),
    entry(
        "",
        "events",
        events::EVENT_COLUMNS,
        events::core_event_cells,
    ),
    // apps/v1
    entry(
        "apps",
        "deployments",
        workloads::DEPLOYMENT_COLUMNS,
        workloads::deployment_cells,
    ),
    entry(
        "apps",
        "replicasets",
        workloads::REPLICA_SET_COLUMNS,
        workloads::replica_set_cells,
    ),
    entry(
        "apps",
        "statefulsets",
        workloads::STATEFUL_SET_COLUMNS,
        workloads::stateful_set_cells,
    ),
    entry(
        "apps",
        "daemonsets",
        workloads::DAEMON_SET_COLUMNS,
        workloads::daemon_set_cells,
    ),
    entry(
        "apps",
        "controllerrevisions",
        workloads::CONTROLLER_REVISION_COLUMNS,
        workloads::controller_revision_cells,
    ),
    // batch/v1
    entry("batch", "jobs", batch::JOB_COLUMNS, batch::job_cells),
    entry(
        "batch",
        "cronjobs",
        batch::CRON_JOB_COLUMNS,
        batch::cron_job_cells,
    ),
    // networking and discovery
    entry(
        "networking.k8s.io",
        "ingresses",
        networking::INGRESS_COLUMNS,
        networking::ingress_cells,
    ),
    entry(
        "networking.k8s.io",
        "ingressclasses",
        networking::INGRESS_CLASS_COLUMNS,
        networking::ingress_class_cells,
    ),
    entry(
        "networking.k8s.io",
        "networkpolicies",
        networking::NETWORK_POLICY_COLUMNS,
        networking::network_policy_cells,
    ),
    entry(
        "discovery.k8s.io",
        "endpointslices",
        networking::ENDPOINT_SLICE_COLUMNS,
        networking::endpoint_slice_cells,
    ),
    // storage
    entry(
        "storage.k8s.io",
        "storageclasses",
        storage::STORAGE_CLASS_COLUMNS,
        storage::storage_class_cells,
    ),
    entry(
        "storage.k8s.io",
        "csidrivers",
        storage::CSI_DRIVER_COLUMNS,
        storage::csi_driver_cells,
    ),
    entry(
        "storage.k8s.io",
        "csinodes",
        storage::CSI_NODE_COLUMNS,
        storage::csi_node_cells,
    ),
    entry(
        "storage.k8s.io",
        "volumeattachments",
        storage::VOLUME_ATTACHMENT_COLUMNS,
        storage::volume_attachment_cells,
    ),
    // events.k8s.io
    entry(
        "events.k8s.io",
        "events",
        events::EVENT_COLUMNS,
        events::events_api_event_cells,
    ),
    // cluster-wide policy and bookkeeping
    entry(
        "rbac.authorization.k8s.io",
        "rolebindings",
        cluster::ROLE_BINDING_COLUMNS,
        cluster::role_binding_cells,
    ),
    entry(
        "rbac.authorization.k8s.io",
        "clusterrolebindings",
        cluster::CLUSTER_ROLE_BINDING_COLUMNS,
        cluster::role_binding_cells,
    ),
    entry(
        "scheduling.k8s.io",
        "priorityclasses",
        cluster::PRIORITY_CLASS_COLUMNS,
        cluster::priority_class_cells,
    ),
    entry(
        "node.k8s.io",
        "runtimeclasses",
        cluster::RUNTIME_CLASS_COLUMNS,
        cluster::runtime_class_cells,
    ),
    entry(
        "policy",
        "poddisruptionbudgets",
        cluster::POD_DISRUPTION_BUDGET_COLUMNS,
        cluster::pod_disruption_budget_cells,
    ),
    entry(
        "certificates.k8s.io",
        "certificatesigningrequests",
        cluster::CERTIFICATE_SIGNING_REQUEST_COLUMNS,
        cluster::certificate_signing_request_cells,
    ),
    entry(
        "",
        "componentstatuses",
        cluster::COMPONENT_STATUS_COLUMNS,
        cluster::component_status_cells,
    ),
    entry(
        "coordination.k8s.io",
        "leases",
        cluster::LEASE_COLUMNS,
        cluster::lease_cells,
    ),
    entry(
        crate::insight::GROUP,
        "finalizerclaims",
        cluster::FINALIZER_CLAIM_COLUMNS,
        cluster::finalizer_claim_cells,
    ),
    entry(
        crate::insight::GROUP,
        crate::insight::removal::PLURAL,
        cluster::FINALIZER_REMOVAL_COLUMNS,
        cluster::finalizer_removal_cells,
    ),
    // admissionregistration.k8s.io/v1, flowcontrol.apiserver.k8s.io/v1
    entry(
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        control_plane::WEBHOOK_CONFIGURATION_COLUMNS,
        control_plane::webhook_configuration_cells,
    ),
    entry(
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
        control_plane::WEBHOOK_CONFIGURATION_COLUMNS,
        control_plane::webhook_configuration_cells,
    ),
    entry(
        "admissionregistration.k8s.io",
        "validatingadmissionpolicies",
        control_plane::VALIDATING_ADMISSION_POLICY_COLUMNS,
        control_plane::validating_admission_policy_cells,
    ),
    entry(
        "admissionregistration.k8s.io",
        "validatingadmissionpolicybindings",
        control_plane::VALIDATING_ADMISSION_POLICY_BINDING_COLUMNS,
        control_plane::validating_admission_policy_binding_cells,
    ),
    PrinterEntry {
        group: "flowcontrol.apiserver.k8s.io",
        plural: "flowschemas",
        printer: BuiltinPrinter::new(
            control_plane::FLOW_SCHEMA_COLUMNS,
            control_plane::flow_schema_cells,
        )
        .with_order(control_plane::flow_schema_order),
    },
    entry(
        "flowcontrol.apiserver.k8s.io",
        "prioritylevelconfigurations",
        control_plane::PRIORITY_LEVEL_COLUMNS,
        control_plane::priority_level_cells,
    ),
    entry(
        "apiregistration.k8s.io",
        "apiservices",
        control_plane::API_SERVICE_COLUMNS,
        control_plane::api_service_cells,
    ),
    // autoscaling
    entry(
        "autoscaling",
        "horizontalpodautoscalers",
        workloads::HORIZONTAL_POD_AUTOSCALER_COLUMNS,
        workloads::horizontal_pod_autoscaler_cells,
    ),
    // networking.k8s.io/v1 address management, storage.k8s.io/v1 capacities
    entry(
        "networking.k8s.io",
        "ipaddresses",
        networking::IP_ADDRESS_COLUMNS,
        networking::ip_address_cells,
    ),
    entry(
        "networking.k8s.io",
        "servicecidrs",
        networking::SERVICE_CIDR_COLUMNS,
        networking::service_cidr_cells,
    ),
    entry(
        "storage.k8s.io",
        "csistoragecapacities",
        storage::CSI_STORAGE_CAPACITY_COLUMNS,
        storage::csi_storage_capacity_cells,
    ),
];

/// Upstream's default convertor.
const DEFAULT_PRINTER: BuiltinPrinter = BuiltinPrinter::new(DEFAULT_COLUMNS, default_cells);

/// How the rows of one resource type are printed.
enum Printer {
    Builtin(&'static BuiltinPrinter),
    /// Name, then one cell per evaluated CRD printer column.
    Custom(Vec<CustomColumn>),
}

impl Printer {
    /// The printer for what the response carries: the resource's own objects, or the
    /// `autoscaling/v1 Scale` its `/scale` subresource answers with.
    fn for_body(resource: &ResourceType, body: &Value) -> Printer {
        let is_scale = body.get("kind").and_then(Value::as_str) == Some("Scale")
            && body.get("apiVersion").and_then(Value::as_str) == Some("autoscaling/v1");
        if is_scale {
            return Printer::Builtin(&workloads::SCALE_PRINTER);
        }
        Printer::for_resource(resource)
    }

    fn for_resource(resource: &ResourceType) -> Printer {
        if !resource.builtin {
            return Printer::Custom(custom_columns(&resource.printer_columns));
        }
        let printer = PRINTERS
            .iter()
            .find(|e| e.group == resource.group && e.plural == resource.plural)
            .map_or(&DEFAULT_PRINTER, |e| &e.printer);
        Printer::Builtin(printer)
    }

    fn columns(&self) -> Vec<Column> {
        match self {
            Printer::Builtin(printer) => printer.columns.to_vec(),
            Printer::Custom(custom) => std::iter::once(NAME)
                .chain(custom.iter().map(|c| c.column.clone()))
                .collect(),
        }
    }

    /// The items of a list in the order their rows are printed.
    fn in_order<'a>(&self, items: &'a [Value]) -> Vec<&'a Value> {
        let mut ordered: Vec<&Value> = items.iter().collect();
        if let Printer::Builtin(BuiltinPrinter {
            order: Some(order), ..
        }) = self
        {
            ordered.sort_by(|a, b| order(a, b));
        }
        ordered
    }

    fn row(&self, item: &Value, clock: &Clock) -> Value {
        match self {
            Printer::Builtin(printer) => row(
                (printer.cells)(item, clock),
                (printer.conditions)(item),
                item,
            ),
            Printer::Custom(custom) => {
                let cells = std::iter::once(json!(object::name(item)))
                    .chain(custom.iter().map(|c| custom_cell(c, item, clock)))
                    .collect();
                row(cells, None, item)
            }
        }
    }
}

// =============================================================================================
// Reading fields
// =============================================================================================

fn text<'a>(item: &'a Value, pointer: &str) -> &'a str {
    item.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn optional_text<'a>(item: &'a Value, pointer: &str) -> Option<&'a str> {
    item.pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn int(item: &Value, pointer: &str) -> i64 {
    item.pointer(pointer)
        .and_then(Value::as_i64)
        .unwrap_or_default()
}

fn list<'a>(item: &'a Value, pointer: &str) -> &'a [Value] {
    item.pointer(pointer)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// Entries of a map or a list; 0 when absent.
fn count(item: &Value, pointer: &str) -> i64 {
    match item.pointer(pointer) {
        Some(Value::Object(map)) => map.len() as i64,
        Some(Value::Array(items)) => items.len() as i64,
        _ => 0,
    }
}

fn present(item: &Value, pointer: &str) -> bool {
    item.pointer(pointer).is_some_and(|v| !v.is_null())
}

fn creation_age(item: &Value, clock: &Clock) -> Value {
    json!(clock.since(object::meta_str(item, "creationTimestamp")))
}

fn name_cell(item: &Value) -> Value {
    json!(object::name(item))
}

/// A label map as `a=1,b=2` (sorted), or `<none>`.
fn format_labels(labels: Option<&Value>) -> String {
    let pairs: Vec<String> = labels
        .and_then(Value::as_object)
        .map(|map| {
            map.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    if pairs.is_empty() {
        "<none>".into()
    } else {
        pairs.join(",")
    }
}

/// A `metav1.LabelSelector` in upstream's selector string form: requirements sorted by key,
/// `k=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`; empty for no or an empty selector. `None`
/// when an operator is unknown (upstream cannot convert such a selector).
fn selector_string(selector: Option<&Value>) -> Option<String> {
    let Some(selector) = selector.filter(|s| !s.is_null()) else {
        return Some(String::new());
    };
    let mut requirements: Vec<(String, String)> = Vec::new();
    if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
        for (key, value) in labels {
            let value = value.as_str().unwrap_or_default();
            requirements.push((key.clone(), format!("{key}={value}")));
        }
    }
    for expression in list(selector, "/matchExpressions") {
        let key = text(expression, "/key");
        let mut values: Vec<&str> = list(expression, "/values")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        values.sort_unstable();
        let values = values.join(",");
        let requirement = match text(expression, "/operator") {
            "In" => format!("{key} in ({values})"),
            "NotIn" => format!("{key} notin ({values})"),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            _ => return None,
        };
        requirements.push((key.to_string(), requirement));
    }
    requirements.sort_by(|a, b| a.0.cmp(&b.0));
    Some(
        requirements
            .into_iter()
            .map(|(_, r)| r)
            .collect::<Vec<_>>()
            .join(","),
    )
}

/// upstream's `FormatLabelSelector`: `<none>` for an empty selector, `<error>` for one it
/// cannot read.
fn format_label_selector(selector: Option<&Value>) -> String {
    match selector_string(selector) {
        Some(s) if s.is_empty() => "<none>".into(),
        Some(s) => s,
        None => "<error>".into(),
    }
}

/// The pod template's container names and images, comma-separated.
fn container_cells(item: &Value, template_pointer: &str) -> (Value, Value) {
    let containers = list(item, &format!("{template_pointer}/spec/containers"));
    let names: Vec<&str> = containers.iter().map(|c| text(c, "/name")).collect();
    let images: Vec<&str> = containers.iter().map(|c| text(c, "/image")).collect();
    (json!(names.join(",")), json!(images.join(",")))
}

/// A boolean field, `default` when absent.
fn flag(item: &Value, pointer: &str, default: bool) -> bool {
    item.pointer(pointer)
        .and_then(Value::as_bool)
        .unwrap_or(default)
}

/// A resource quantity as text. Quantities are strings, though a number is accepted too.
fn quantity(value: &Value) -> Option<String> {
    match value {
        Value::String(value) => Some(value.clone()),
        Value::Number(number) => Some(number.to_string()),
        _ => None,
    }
}

/// Whether the first condition of `kind` has status True.
fn condition_true(conditions: &[Value], kind: &str) -> bool {
    conditions
        .iter()
        .find(|c| text(c, "/type") == kind)
        .is_some_and(|c| text(c, "/status") == "True")
}

/// Up to `shown` entries joined by commas, then ` + N more...` for the rest, as upstream
/// abbreviates long lists (endpoints, hosts, ports).
fn first_few(entries: &[String], total: usize, shown: usize) -> String {
    let listed = entries[..entries.len().min(shown)].join(",");
    if total > shown {
        format!("{listed} + {} more...", total - shown)
    } else {
        listed
    }
}

fn default_cells(item: &Value, _: &Clock) -> Vec<Value> {
    // Go formats the zero time when there is no creation timestamp.
    let created = Clock::parse(object::meta_str(item, "creationTimestamp"))
        .map_or_else(|| "0001-01-01T00:00:00Z".to_string(), object::timestamp);
    vec![name_cell(item), json!(created)]
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    #[test]
    fn ages_follow_each_humanisation_rule_at_its_boundaries() {
        let cases = [
            (-5, "<invalid>"),
            (-2, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (5, "5s"),
            (119, "119s"),
            (120, "2m"),
            (192, "3m12s"),
            (599, "9m59s"),
            (600, "10m"),
            (3 * 3600 - 1, "179m"),
            (3 * 3600, "3h"),
            (5 * 3600 + 120, "5h2m"),
            (8 * 3600 - 1, "7h59m"),
            (8 * 3600, "8h"),
            (48 * 3600 - 1, "47h"),
            (48 * 3600, "2d"),
            (3 * 86_400 + 7200, "3d2h"),
            (8 * 86_400 - 1, "7d23h"),
            (8 * 86_400, "8d"),
            (730 * 86_400 - 1, "729d"),
            (730 * 86_400, "2y"),
            (730 * 86_400 + 5 * 86_400, "2y5d"),
            (8 * 365 * 86_400 - 1, "7y364d"),
            (8 * 365 * 86_400, "8y"),
            (20 * 365 * 86_400 + 100 * 86_400, "20y"),
        ];
        for (seconds, expected) in cases {
            assert_eq!(human_duration(seconds), expected, "{seconds}s");
        }
    }

    #[test]
    fn ages_of_timestamps() {
        let clock = clock();
        assert_eq!(clock.since(Some(&ago(192))), "3m12s");
        assert_eq!(clock.since(Some("2026-11-22T11:59:59.5Z")), "0s");
        assert_eq!(clock.since(Some("2026-11-22T14:00:00+02:00")), "0s");
        assert_eq!(clock.since(None), "<unknown>");
        assert_eq!(clock.since(Some("")), "<unknown>");
        assert_eq!(clock.since(Some("yesterday")), "<unknown>");
    }

    // --- table shape --------------------------------------------------------------------------

    #[test]
    fn a_list_becomes_one_row_per_item_with_partial_metadata() {
        let resource = builtin("", "configmaps");
        let mut first = meta("a", 30);
        first["managedFields"] = json!([{"manager": "kubectl"}]);
        let list = json!({
            "kind": "ConfigMapList", "apiVersion": "v1",
            "metadata": {"resourceVersion": "12", "continue": "next"},
            "items": [{"metadata": first, "data": {"k": "v"}}, {"metadata": meta("b", 60)}]
        });
        let table = rendered(&resource, &list);
        assert_eq!(table["kind"], "Table");
        assert_eq!(table["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(
            table["metadata"],
            json!({"resourceVersion": "12", "continue": "next"})
        );
        assert_eq!(table["rows"][0]["cells"], json!(["a", 1, "30s"]));
        assert_eq!(table["rows"][1]["cells"], json!(["b", 0, "60s"]));
        assert_eq!(
            table["rows"][0]["object"],
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                   "metadata": meta("a", 30)})
        );
        assert_eq!(
            table["columnDefinitions"][0],
            json!({"name": "Name", "type": "string", "format": "name",
                   "description": NAME_DESCRIPTION, "priority": 0})
        );
    }

    #[test]
    fn a_single_object_is_one_row_and_watch_events_may_omit_definitions() {
        let resource = builtin("", "configmaps");
        let object = json!({"metadata": meta("a", 30), "items": [1, 2]});
        let table = render(&resource, &object, false, &clock());
        assert_eq!(table["columnDefinitions"], json!([]));
        assert_eq!(table["rows"].as_array().map(Vec::len), Some(1));
        assert_eq!(table["metadata"], json!({"resourceVersion": "7"}));
    }

    // --- built-in kinds -----------------------------------------------------------------------

    // --- the printer table --------------------------------------------------------------------

    #[test]
    fn every_printer_row_names_a_served_resource_once() {
        let served = served_types();
        for (index, entry) in PRINTERS.iter().enumerate() {
            assert!(
                served
                    .iter()
                    .any(|t| t.builtin && t.group == entry.group && t.plural == entry.plural),
                "{}/{} is not a served built-in resource",
                entry.group,
                entry.plural
            );
            assert!(
                !PRINTERS[..index]
                    .iter()
                    .any(|e| e.group == entry.group && e.plural == entry.plural),
                "{}/{} has two rows",
                entry.group,
                entry.plural
            );
        }
    }

    #[test]
    fn every_printer_fills_each_column_even_for_a_bare_object() {
        for entry in PRINTERS {
            let resource = builtin(entry.group, entry.plural);
            let bare = json!({"metadata": {"name": "bare"}});
            let c = cells(&resource, &bare);
            assert!(
                c.iter().all(|cell| !cell.is_null()),
                "{}/{}: {c:?}",
                entry.group,
                entry.plural
            );
            let descriptions: Vec<Value> = rendered(&resource, &bare)["columnDefinitions"]
                .as_array()
                .expect("definitions")
                .iter()
                .map(|c| c["description"].clone())
                .collect();
            assert!(
                descriptions
                    .iter()
                    .all(|d| d.as_str().is_some_and(|d| !d.is_empty())),
                "{}/{} has a column without a description",
                entry.group,
                entry.plural
            );
        }
    }

    #[test]
    fn kinds_without_a_printer_use_the_default_convertor() {
        for (group, plural) in [
            ("rbac.authorization.k8s.io", "roles"),
            ("rbac.authorization.k8s.io", "clusterroles"),
            ("", "limitranges"),
        ] {
            let resource = builtin(group, plural);
            assert_eq!(
                headers(&resource),
                [("Name".into(), 0), ("Created At".into(), 0)],
                "{group}/{plural}"
            );
            let object = json!({"metadata": {"name": "x",
                "creationTimestamp": "2026-11-22T01:52:06Z"}});
            assert_eq!(
                cells(&resource, &object),
                [json!("x"), json!("2026-11-22T01:52:06Z")]
            );
        }
    }

    #[test]
    fn long_lists_name_the_first_few_and_count_the_rest() {
        let entries: Vec<String> = ["a", "b", "c", "d", "e"]
            .into_iter()
            .map(String::from)
            .collect();
        assert_eq!(first_few(&entries, 5, 3), "a,b,c + 2 more...");
        assert_eq!(first_few(&entries[..3], 3, 3), "a,b,c");
        assert_eq!(first_few(&entries[..1], 1, 3), "a");
        assert_eq!(first_few(&[], 0, 3), "");
    }

    #[test]
    fn custom_resource_definitions_use_the_default_convertor() {
        let mut resource = builtin("", "configmaps");
        resource.group = "apiextensions.k8s.io".into();
        resource.plural = "customresourcedefinitions".into();
        resource.kind = "CustomResourceDefinition".into();
        resource.list_kind = "CustomResourceDefinitionList".into();
        let crd = json!({"metadata": {"name": "widgets.example.com",
            "creationTimestamp": "2026-11-22T01:52:06Z"}});
        let table = rendered(&resource, &crd);
        assert_eq!(
            table["columnDefinitions"][1],
            json!({"name": "Created At", "type": "date", "format": "",
                   "description": CREATED_DESCRIPTION, "priority": 0})
        );
        assert_eq!(
            table["rows"][0]["cells"],
            json!(["widgets.example.com", "2026-11-22T01:52:06Z"])
        );
        let offset =
            json!({"metadata": {"name": "w", "creationTimestamp": "2026-11-22T03:52:06+02:00"}});
        assert_eq!(cells(&resource, &offset)[1], json!("2026-11-22T01:52:06Z"));
        let undated = json!({"metadata": {"name": "w"}});
        assert_eq!(cells(&resource, &undated)[1], json!("0001-01-01T00:00:00Z"));
    }
}
