//! Server-side `Table` output for `kubectl get` (api-surface §3).
//!
//! kubectl prints the cells it is given, so everything a person reads is computed here: ages,
//! `1/2` readiness, `80/TCP,443/TCP`. Three kinds of printer exist, as upstream has them:
//! - **built-in kinds** get the columns and cells of upstream's internal printers, always in
//!   their wide form (priority-1 columns included; kubectl hides them without `-o wide`);
//! - **custom resources** get Name plus their CRD `additionalPrinterColumns`, each evaluated
//!   with the JSONPath dialect of [`super::jsonpath`], or Name plus Age when they have none;
//! - **anything else** (CustomResourceDefinitions among them) gets upstream's default
//!   convertor: Name and an RFC 3339 `Created At`.
//!
//! Each row carries the object as `PartialObjectMetadata`, which kubectl uses for `-A`,
//! `--show-labels` and `-L`.
//!
//! # Caveats
//! - Objects are printed as stored. Upstream prints defaulted objects, so the few defaults the
//!   printers depend on (a Deployment's or ReplicaSet's `spec.replicas` of 1, a service port's
//!   `TCP` protocol) are applied here when absent.
//! - A CRD column whose `jsonPath` does not parse ends the column list there, as upstream
//!   falls back to the columns it managed to build.
//! - `includeObject` is not honoured: rows always carry `PartialObjectMetadata`.

use std::borrow::Cow;

use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use http::{HeaderValue, StatusCode, header};
use serde_json::{Value, json};

use super::jsonpath::{self, JsonPath};
use crate::object;
use crate::resources::{PrinterColumn, ResourceType};

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
        Some(items) if is_list => items.iter().map(|item| printer.row(item, clock)).collect(),
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

const NAMESPACE_COLUMNS: &[Column] = &[
    NAME,
    Column::string("Status", "The namespace's phase: Active or Terminating."),
    AGE,
];

const CONFIG_MAP_COLUMNS: &[Column] = &[
    NAME,
    Column::string("Data", "Number of keys in data and binaryData."),
    AGE,
];

const SECRET_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "Type",
        "The secret's type, which says how its data is used.",
    ),
    Column::string("Data", "Number of keys in data."),
    AGE,
];

const SERVICE_ACCOUNT_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "Secrets",
        "Number of secrets listed in the service account.",
    ),
    AGE,
];

const SERVICE_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "Type",
        "How the service is exposed: ClusterIP, NodePort, LoadBalancer or ExternalName.",
    ),
    Column::string("Cluster-IP", "The service's cluster-internal IP address."),
    Column::string(
        "External-IP",
        "Addresses the service is reachable at from outside the cluster.",
    ),
    Column::string(
        "Port(s)",
        "The service's ports, with node ports and protocols.",
    ),
    AGE,
    Column::string("Selector", "Labels of the pods the service routes to.").wide(),
];

const POD_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "Ready",
        "Ready containers out of all containers in the pod.",
    ),
    Column::string(
        "Status",
        "The pod's phase, or why its containers are not running.",
    ),
    Column::string(
        "Restarts",
        "Container restarts in the pod, and how long ago the last one was.",
    ),
    AGE,
    Column::string("IP", "The pod's IP address.").wide(),
    Column::string("Node", "The node the pod is bound to.").wide(),
    Column::string(
        "Nominated Node",
        "The node the scheduler nominated for a preempting pod.",
    )
    .wide(),
    Column::string(
        "Readiness Gates",
        "Readiness gates whose condition is True, out of all gates.",
    )
    .wide(),
];

const NODE_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "Status",
        "The status of the node (its Ready condition, and SchedulingDisabled when cordoned).",
    ),
    Column::string(
        "Roles",
        "The roles of the node (its node-role.kubernetes.io/ labels).",
    ),
    AGE,
    Column::string("Version", "Kubelet version reported by the node."),
    Column::string("Internal-IP", "The node's internal IP address.").wide(),
    Column::string("External-IP", "The node's external IP address.").wide(),
    Column::string(
        "OS-Image",
        "The operating system image reported by the node.",
    )
    .wide(),
    Column::string("Kernel-Version", "Kernel version reported by the node.").wide(),
    Column::string(
        "Container-Runtime",
        "Container runtime version reported by the node.",
    )
    .wide(),
];

const EVENT_COLUMNS: &[Column] = &[
    Column::string("Last Seen", "Time since the event was last observed."),
    Column::string("Type", "Normal or Warning."),
    Column::string("Reason", "Short machine-readable reason for the event."),
    Column::string("Object", "The object the event is about, as kind/name."),
    Column::string(
        "Subobject",
        "The part of the object the event is about (fieldPath).",
    )
    .wide(),
    Column::string(
        "Source",
        "The component, and host, that reported the event.",
    )
    .wide(),
    Column::string("Message", "Human-readable description of the event."),
    Column::string("First Seen", "Time since the event was first observed.").wide(),
    Column::string("Count", "How many times the event has occurred.").wide(),
    Column::object_name("Name").wide(),
];

const LEASE_COLUMNS: &[Column] = &[
    NAME,
    Column::string("Holder", "Identity of the current holder of the lease."),
    AGE,
];

const FINALIZER_CLAIM_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "Finalizer",
        "The claimed finalizer, or a prefix ending in '/'.",
    ),
    Column::string(
        "Live",
        "Whether the controller's Lease is held and renewed within its duration (computed on read).",
    ),
    Column::string("Holder", "Who holds the controller's Lease."),
    Column::new(
        "Pending",
        "integer",
        "Objects being deleted that carry a finalizer the claim covers.",
    ),
    AGE,
    Column::string("Lease", "The controller's Lease, as namespace/name.").wide(),
    Column::string(
        "Policy",
        "When a person may remove the finalizer in the controller's place.",
    )
    .wide(),
];

const FINALIZER_REMOVAL_COLUMNS: &[Column] = &[
    NAME,
    Column::string("Target", "The object the finalizer was removed from."),
    Column::string("Finalizer", "The finalizer that was forced off."),
    Column::string("Removed-By", "The user who asked for the removal."),
    AGE,
];

const DEPLOYMENT_COLUMNS: &[Column] = &[
    NAME,
    Column::string("Ready", "Ready pods out of desired pods."),
    Column::string("Up-to-date", "Pods running the latest pod template."),
    Column::string("Available", "Pods available to serve."),
    AGE,
    CONTAINERS,
    IMAGES,
    Column::string("Selector", "Label selector of the deployment's pods.").wide(),
];

const REPLICA_SET_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Desired",
        "integer",
        "Number of pods desired (spec.replicas).",
    ),
    Column::new(
        "Current",
        "integer",
        "Number of pods that exist (status.replicas).",
    ),
    Column::new(
        "Ready",
        "integer",
        "Number of ready pods (status.readyReplicas).",
    ),
    AGE,
    CONTAINERS,
    IMAGES,
    Column::string("Selector", "Label selector of the replica set's pods.").wide(),
];

const JOB_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "Status",
        "The job's state: Running, Complete, Failed, Suspended, …",
    ),
    Column::string(
        "Completions",
        "Succeeded pods out of the completions wanted.",
    ),
    Column::string("Duration", "How long the job ran, or has been running."),
    AGE,
    CONTAINERS,
    IMAGES,
    Column::string("Selector", "Label selector of the job's pods.").wide(),
];

/// The `/scale` subresource. Upstream gives this Name column no `name` format.
const SCALE_COLUMNS: &[Column] = &[
    Column::string("Name", NAME_DESCRIPTION),
    Column::new(
        "Desired",
        "integer",
        "Number of replicas desired (spec.replicas).",
    ),
    Column::new(
        "Available",
        "integer",
        "Number of replicas observed (status.replicas).",
    ),
    AGE,
];

/// Upstream's default convertor, for kinds without a printer (CustomResourceDefinitions).
const DEFAULT_COLUMNS: &[Column] = &[NAME, Column::new("Created At", "date", CREATED_DESCRIPTION)];

type Cells = fn(&Value, &Clock) -> Vec<Value>;

/// A row's `conditions`, for the kinds that have them.
type RowConditions = fn(&Value) -> Option<Value>;

/// How the rows of one resource type are printed.
enum Printer {
    Builtin {
        columns: &'static [Column],
        cells: Cells,
        conditions: RowConditions,
    },
    /// Name, then one cell per evaluated CRD printer column.
    Custom(Vec<CustomColumn>),
}

struct CustomColumn {
    column: Column,
    path: JsonPath,
}

impl Printer {
    /// The printer for what the response carries: the resource's own objects, or the
    /// `autoscaling/v1 Scale` its `/scale` subresource answers with.
    fn for_body(resource: &ResourceType, body: &Value) -> Printer {
        let is_scale = body.get("kind").and_then(Value::as_str) == Some("Scale")
            && body.get("apiVersion").and_then(Value::as_str) == Some("autoscaling/v1");
        if is_scale {
            return Printer::Builtin {
                columns: SCALE_COLUMNS,
                cells: scale_cells,
                conditions: |_| None,
            };
        }
        Printer::for_resource(resource)
    }

    fn for_resource(resource: &ResourceType) -> Printer {
        if !resource.builtin {
            return Printer::Custom(custom_columns(&resource.printer_columns));
        }
        let (columns, cells): (&'static [Column], Cells) =
            match (resource.group.as_str(), resource.plural.as_str()) {
                ("", "namespaces") => (NAMESPACE_COLUMNS, namespace_cells),
                ("", "configmaps") => (CONFIG_MAP_COLUMNS, config_map_cells),
                ("", "secrets") => (SECRET_COLUMNS, secret_cells),
                ("", "serviceaccounts") => (SERVICE_ACCOUNT_COLUMNS, service_account_cells),
                ("", "services") => (SERVICE_COLUMNS, service_cells),
                ("", "pods") => (POD_COLUMNS, pod_cells),
                ("", "nodes") => (NODE_COLUMNS, node_cells),
                ("", "events") => (EVENT_COLUMNS, core_event_cells),
                ("events.k8s.io", "events") => (EVENT_COLUMNS, events_api_event_cells),
                ("coordination.k8s.io", "leases") => (LEASE_COLUMNS, lease_cells),
                ("apps", "deployments") => (DEPLOYMENT_COLUMNS, deployment_cells),
                ("apps", "replicasets") => (REPLICA_SET_COLUMNS, replica_set_cells),
                ("batch", "jobs") => (JOB_COLUMNS, job_cells),
                (crate::insight::GROUP, "finalizerclaims") => {
                    (FINALIZER_CLAIM_COLUMNS, finalizer_claim_cells)
                }
                (crate::insight::GROUP, crate::insight::removal::PLURAL) => {
                    (FINALIZER_REMOVAL_COLUMNS, finalizer_removal_cells)
                }
                _ => (DEFAULT_COLUMNS, default_cells),
            };
        let conditions: RowConditions = match (resource.group.as_str(), resource.plural.as_str()) {
            ("", "pods") => pod_row_conditions,
            _ => |_| None,
        };
        Printer::Builtin {
            columns,
            cells,
            conditions,
        }
    }

    fn columns(&self) -> Vec<Column> {
        match self {
            Printer::Builtin { columns, .. } => columns.to_vec(),
            Printer::Custom(custom) => std::iter::once(NAME)
                .chain(custom.iter().map(|c| c.column.clone()))
                .collect(),
        }
    }

    fn row(&self, item: &Value, clock: &Clock) -> Value {
        match self {
            Printer::Builtin {
                cells, conditions, ..
            } => row(cells(item, clock), conditions(item), item),
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
// Custom resources
// =============================================================================================

fn custom_columns(printer_columns: &[PrinterColumn]) -> Vec<CustomColumn> {
    // A CRD without printer columns is served with one Age column, as upstream defaults it.
    let default_age;
    let printer_columns = if printer_columns.is_empty() {
        default_age = [PrinterColumn {
            name: "Age".into(),
            type_: "date".into(),
            format: String::new(),
            description: CREATED_DESCRIPTION.into(),
            priority: 0,
            json_path: ".metadata.creationTimestamp".into(),
        }];
        &default_age[..]
    } else {
        printer_columns
    };
    let mut columns = Vec::with_capacity(printer_columns.len());
    for printer_column in printer_columns {
        let path = match JsonPath::parse(&printer_column.json_path) {
            Ok(path) => path,
            Err(error) => {
                tracing::debug!(%error, "invalid printer column; printing the columns before it");
                break;
            }
        };
        let description = if printer_column.description.is_empty() {
            format!(
                "Custom resource definition column (in JSONPath format): {}",
                printer_column.json_path
            )
        } else {
            printer_column.description.clone()
        };
        columns.push(CustomColumn {
            column: Column {
                name: Cow::Owned(printer_column.name.clone()),
                kind: Cow::Owned(printer_column.type_.clone()),
                format: Cow::Owned(printer_column.format.clone()),
                description: Cow::Owned(description),
                priority: printer_column.priority,
            },
            path,
        });
    }
    columns
}

/// One CRD column's cell. Only the first match counts (upstream prints `[*]` paths' first
/// result); anything missing or of the wrong type is a `null` cell, which kubectl shows as
/// `<none>`.
fn custom_cell(custom: &CustomColumn, item: &Value, clock: &Clock) -> Value {
    let Ok(found) = custom.path.find(item) else {
        return Value::Null;
    };
    let Some(value) = found.first() else {
        return Value::Null;
    };
    let value: &Value = value;
    match (custom.column.kind.as_ref(), value) {
        ("string", value) => Value::String(jsonpath::print(value)),
        ("integer", Value::Number(n)) => match n.as_i64() {
            Some(i) => json!(i),
            // Upstream converts a float by truncation.
            None => n.as_f64().map_or(Value::Null, |f| json!(f.trunc() as i64)),
        },
        // Upstream converts to a float, which JSON writes without a fraction when integral.
        ("number", Value::Number(n)) => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => json!(f as i64),
            Some(f) => json!(f),
            None => Value::Null,
        },
        ("boolean", Value::Bool(b)) => json!(b),
        ("date", Value::String(text)) if text.is_empty() || text == "null" => json!("<unknown>"),
        ("date", Value::String(text)) => match Clock::parse(Some(text)) {
            Some(_) => json!(clock.since(Some(text))),
            None => json!("<invalid>"),
        },
        _ => Value::Null,
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

// =============================================================================================
// Built-in printers
// =============================================================================================

fn default_cells(item: &Value, _: &Clock) -> Vec<Value> {
    // Go formats the zero time when there is no creation timestamp.
    let created = Clock::parse(object::meta_str(item, "creationTimestamp"))
        .map_or_else(|| "0001-01-01T00:00:00Z".to_string(), object::timestamp);
    vec![name_cell(item), json!(created)]
}

fn namespace_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    vec![
        name_cell(item),
        json!(text(item, "/status/phase")),
        creation_age(item, clock),
    ]
}

fn config_map_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    vec![
        name_cell(item),
        json!(count(item, "/data") + count(item, "/binaryData")),
        creation_age(item, clock),
    ]
}

fn secret_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    vec![
        name_cell(item),
        json!(text(item, "/type")),
        json!(count(item, "/data")),
        creation_age(item, clock),
    ]
}

fn service_account_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    vec![
        name_cell(item),
        json!(count(item, "/secrets")),
        creation_age(item, clock),
    ]
}

/// Upstream's `printNode`: Ready or NotReady from the Ready condition (Unknown without
/// one), SchedulingDisabled when cordoned; roles from `node-role.kubernetes.io/<role>` labels
/// and the legacy `kubernetes.io/role` label.
fn node_cells(node: &Value, clock: &Clock) -> Vec<Value> {
    let mut status: Vec<&str> = Vec::new();
    if let Some(ready) = list(node, "/status/conditions")
        .iter()
        .find(|c| text(c, "/type") == "Ready")
    {
        status.push(if text(ready, "/status") == "True" {
            "Ready"
        } else {
            "NotReady"
        });
    }
    if status.is_empty() {
        status.push("Unknown");
    }
    if node.pointer("/spec/unschedulable") == Some(&Value::Bool(true)) {
        status.push("SchedulingDisabled");
    }
    let mut roles: Vec<String> = node
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(
            |(key, value)| match key.strip_prefix("node-role.kubernetes.io/") {
                Some(role) if !role.is_empty() => Some(role.to_string()),
                _ if key == "kubernetes.io/role" => value.as_str().map(str::to_string),
                _ => None,
            },
        )
        .filter(|role| !role.is_empty())
        .collect();
    roles.sort();
    roles.dedup();
    let address = |kind: &str| {
        list(node, "/status/addresses")
            .iter()
            .find(|a| text(a, "/type") == kind)
            .map(|a| text(a, "/address").to_string())
            .unwrap_or_else(|| "<none>".into())
    };
    let info = |field: &str| {
        optional_text(node, &format!("/status/nodeInfo/{field}"))
            .filter(|v| !v.is_empty())
            .unwrap_or("<unknown>")
            .to_string()
    };
    vec![
        name_cell(node),
        json!(status.join(",")),
        json!(if roles.is_empty() {
            "<none>".to_string()
        } else {
            roles.join(",")
        }),
        creation_age(node, clock),
        json!(text(node, "/status/nodeInfo/kubeletVersion")),
        json!(address("InternalIP")),
        json!(address("ExternalIP")),
        json!(info("osImage")),
        json!(info("kernelVersion")),
        json!(info("containerRuntimeVersion")),
    ]
}

fn lease_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    vec![
        name_cell(item),
        json!(text(item, "/spec/holderIdentity")),
        creation_age(item, clock),
    ]
}

fn finalizer_claim_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    let live = match item.pointer("/status/live").and_then(Value::as_bool) {
        Some(true) => "True",
        Some(false) => "False",
        None => "Unknown",
    };
    vec![
        name_cell(item),
        json!(text(item, "/spec/finalizer")),
        json!(live),
        json!(text(item, "/status/holder")),
        json!(
            item.pointer("/status/pending")
                .and_then(Value::as_i64)
                .unwrap_or(0)
        ),
        creation_age(item, clock),
        json!(format!(
            "{}/{}",
            text(item, "/spec/lease/namespace"),
            text(item, "/spec/lease/name")
        )),
        json!(text(item, "/spec/forcePolicy")),
    ]
}

/// TARGET reads `Kind/name` or `Kind/namespace/name`.
fn finalizer_removal_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    let kind = match text(item, "/spec/target/kind") {
        "" => text(item, "/spec/target/resource"),
        kind => kind,
    };
    let target = match text(item, "/spec/target/namespace") {
        "" => format!("{kind}/{}", text(item, "/spec/target/name")),
        namespace => format!("{kind}/{namespace}/{}", text(item, "/spec/target/name")),
    };
    vec![
        name_cell(item),
        json!(target),
        json!(text(item, "/spec/finalizer")),
        json!(text(item, "/status/removedBy")),
        creation_age(item, clock),
    ]
}

// ---------------------------------------------------------------------------------------------
// Services
// ---------------------------------------------------------------------------------------------

fn service_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    let cluster_ip = list(item, "/spec/clusterIPs")
        .first()
        .and_then(Value::as_str)
        .or_else(|| optional_text(item, "/spec/clusterIP"))
        .unwrap_or("<none>");
    let ports: Vec<String> = list(item, "/spec/ports")
        .iter()
        .map(|port| {
            let number = int(port, "/port");
            let protocol = optional_text(port, "/protocol").unwrap_or("TCP");
            match int(port, "/nodePort") {
                node_port if node_port > 0 => format!("{number}:{node_port}/{protocol}"),
                _ => format!("{number}/{protocol}"),
            }
        })
        .collect();
    let ports = if ports.is_empty() {
        "<none>".to_string()
    } else {
        ports.join(",")
    };
    vec![
        name_cell(item),
        json!(text(item, "/spec/type")),
        json!(cluster_ip),
        json!(service_external_ip(item)),
        json!(ports),
        creation_age(item, clock),
        json!(format_labels(item.pointer("/spec/selector"))),
    ]
}

fn service_external_ip(item: &Value) -> String {
    let external_ips: Vec<&str> = list(item, "/spec/externalIPs")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    match text(item, "/spec/type") {
        "ClusterIP" | "NodePort" if external_ips.is_empty() => "<none>".into(),
        "ClusterIP" | "NodePort" => external_ips.join(","),
        "LoadBalancer" => {
            let mut ingress: Vec<&str> = list(item, "/status/loadBalancer/ingress")
                .iter()
                .filter_map(|i| optional_text(i, "/ip").or_else(|| optional_text(i, "/hostname")))
                .collect();
            ingress.sort_unstable();
            ingress.dedup();
            ingress.extend(external_ips);
            if ingress.is_empty() {
                "<pending>".into()
            } else {
                ingress.join(",")
            }
        }
        "ExternalName" => text(item, "/spec/externalName").to_string(),
        _ => "<unknown>".into(),
    }
}

// ---------------------------------------------------------------------------------------------
// Pods
// ---------------------------------------------------------------------------------------------

/// Whether the first condition of `kind` has status True.
fn condition_true(conditions: &[Value], kind: &str) -> bool {
    conditions
        .iter()
        .find(|c| text(c, "/type") == kind)
        .is_some_and(|c| text(c, "/status") == "True")
}

/// Why a terminated container stopped: its reason, else its signal or exit code.
fn termination_reason(terminated: &Value, prefix: &str) -> String {
    match optional_text(terminated, "/reason") {
        Some(reason) => format!("{prefix}{reason}"),
        None => match int(terminated, "/signal") {
            0 => format!("{prefix}ExitCode:{}", int(terminated, "/exitCode")),
            signal => format!("{prefix}Signal:{signal}"),
        },
    }
}

/// Restart counting over container statuses: the total and the latest restart time.
#[derive(Default)]
struct Restarts {
    count: i64,
    last: Option<DateTime<Utc>>,
}

impl Restarts {
    fn add(&mut self, status: &Value) {
        self.count += int(status, "/restartCount");
        let finished = Clock::parse(optional_text(status, "/lastState/terminated/finishedAt"));
        if finished > self.last {
            self.last = finished;
        }
    }
}

fn pod_cells(pod: &Value, clock: &Clock) -> Vec<Value> {
    let init_specs = list(pod, "/spec/initContainers");
    // Sidecars: init containers that keep running alongside the main containers.
    let is_sidecar = |name: &str| {
        init_specs
            .iter()
            .any(|c| text(c, "/name") == name && text(c, "/restartPolicy") == "Always")
    };
    let sidecars = init_specs
        .iter()
        .filter(|c| text(c, "/restartPolicy") == "Always")
        .count();
    let total = list(pod, "/spec/containers").len() + sidecars;
    let mut ready = 0;

    let phase = text(pod, "/status/phase");
    let conditions = list(pod, "/status/conditions");
    let mut reason = optional_text(pod, "/status/reason")
        .unwrap_or(phase)
        .to_string();
    if conditions
        .iter()
        .any(|c| text(c, "/type") == "PodScheduled" && text(c, "/reason") == "SchedulingGated")
    {
        reason = "SchedulingGated".into();
    }

    let mut restarts = Restarts::default();
    let mut sidecar_restarts = Restarts::default();
    let mut initializing = false;
    for (index, status) in list(pod, "/status/initContainerStatuses")
        .iter()
        .enumerate()
    {
        restarts.add(status);
        let sidecar = is_sidecar(text(status, "/name"));
        if sidecar {
            sidecar_restarts.add(status);
        }
        let terminated = status.pointer("/state/terminated").filter(|t| !t.is_null());
        let waiting_reason = optional_text(status, "/state/waiting/reason");
        if terminated.is_some_and(|t| int(t, "/exitCode") == 0) {
            continue;
        }
        if sidecar && status.get("started") == Some(&Value::Bool(true)) {
            if status.get("ready") == Some(&Value::Bool(true)) {
                ready += 1;
            }
            continue;
        }
        reason = match (terminated, waiting_reason) {
            (Some(terminated), _) => termination_reason(terminated, "Init:"),
            (None, Some(waiting)) if waiting != "PodInitializing" => format!("Init:{waiting}"),
            _ => format!("Init:{index}/{}", init_specs.len()),
        };
        initializing = true;
        break;
    }

    if !initializing || condition_true(conditions, "Initialized") {
        restarts = sidecar_restarts;
        let mut running = false;
        // The first container's state wins, so walk them last to first.
        for status in list(pod, "/status/containerStatuses").iter().rev() {
            restarts.add(status);
            let terminated = status.pointer("/state/terminated").filter(|t| !t.is_null());
            if let Some(waiting) = optional_text(status, "/state/waiting/reason") {
                reason = waiting.to_string();
            } else if let Some(terminated) = terminated {
                reason = termination_reason(terminated, "");
            } else if status.get("ready") == Some(&Value::Bool(true))
                && present(status, "/state/running")
            {
                running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && running {
            reason = if condition_true_anywhere(conditions, "Ready") {
                "Running".into()
            } else {
                "NotReady".into()
            };
        }
    }

    if object::is_terminating(pod) {
        if text(pod, "/status/reason") == "NodeLost" {
            reason = "Unknown".into();
        } else if !matches!(phase, "Succeeded" | "Failed") {
            reason = "Terminating".into();
        }
    }

    let restarts_cell = match restarts.last {
        Some(last) if restarts.count != 0 => format!(
            "{} ({} ago)",
            restarts.count,
            human_duration((clock.now - last).num_seconds())
        ),
        _ => restarts.count.to_string(),
    };

    let ip = list(pod, "/status/podIPs")
        .first()
        .and_then(|ip| optional_text(ip, "/ip"))
        .or_else(|| optional_text(pod, "/status/podIP"))
        .unwrap_or("<none>");
    let gates = list(pod, "/spec/readinessGates");
    let readiness_gates = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let passing = gates
            .iter()
            .filter(|gate| condition_true(conditions, text(gate, "/conditionType")))
            .count();
        format!("{passing}/{}", gates.len())
    };

    vec![
        name_cell(pod),
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts_cell),
        creation_age(pod, clock),
        json!(ip),
        json!(optional_text(pod, "/spec/nodeName").unwrap_or("<none>")),
        json!(optional_text(pod, "/status/nominatedNodeName").unwrap_or("<none>")),
        json!(readiness_gates),
    ]
}

/// Whether any condition of `kind` has status True (upstream's ready check looks at all).
fn condition_true_anywhere(conditions: &[Value], kind: &str) -> bool {
    conditions
        .iter()
        .any(|c| text(c, "/type") == kind && text(c, "/status") == "True")
}

/// Completed pods carry a row condition, as upstream marks them.
fn pod_row_conditions(pod: &Value) -> Option<Value> {
    let (reason, message) = match text(pod, "/status/phase") {
        "Succeeded" => ("Succeeded", "The pod has completed successfully."),
        "Failed" => ("Failed", "The pod failed."),
        _ => return None,
    };
    Some(json!([{"type": "Completed", "status": "True", "reason": reason, "message": message}]))
}

// ---------------------------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------------------------

/// Where an Event's printed fields live: core/v1 and events.k8s.io/v1 name them differently.
struct EventFields {
    first_timestamp: &'static str,
    last_timestamp: &'static str,
    count: &'static str,
    regarding: &'static str,
    source: &'static str,
    reporting_controller: &'static str,
    message: &'static str,
}

const CORE_EVENT: EventFields = EventFields {
    first_timestamp: "/firstTimestamp",
    last_timestamp: "/lastTimestamp",
    count: "/count",
    regarding: "/involvedObject",
    source: "/source",
    reporting_controller: "/reportingComponent",
    message: "/message",
};

const EVENTS_API_EVENT: EventFields = EventFields {
    first_timestamp: "/deprecatedFirstTimestamp",
    last_timestamp: "/deprecatedLastTimestamp",
    count: "/deprecatedCount",
    regarding: "/regarding",
    source: "/deprecatedSource",
    reporting_controller: "/reportingController",
    message: "/note",
};

fn core_event_cells(event: &Value, clock: &Clock) -> Vec<Value> {
    event_cells(event, &CORE_EVENT, clock)
}

fn events_api_event_cells(event: &Value, clock: &Clock) -> Vec<Value> {
    event_cells(event, &EVENTS_API_EVENT, clock)
}

fn event_cells(event: &Value, fields: &EventFields, clock: &Clock) -> Vec<Value> {
    let first_seen = match optional_text(event, fields.first_timestamp) {
        Some(first) => clock.since(Some(first)),
        None => clock.since(optional_text(event, "/eventTime")),
    };
    let mut last_seen = match optional_text(event, fields.last_timestamp) {
        Some(last) => clock.since(Some(last)),
        None => first_seen.clone(),
    };
    let mut count = int(event, fields.count);
    if present(event, "/series") {
        last_seen = clock.since(optional_text(event, "/series/lastObservedTime"));
        count = int(event, "/series/count");
    } else if count == 0 {
        // Singleton events of the events.k8s.io API carry no count.
        count = 1;
    }

    let kind = text(event, &format!("{}/kind", fields.regarding)).to_lowercase();
    let target = match optional_text(event, &format!("{}/name", fields.regarding)) {
        Some(name) => format!("{kind}/{name}"),
        None => kind,
    };
    let component = optional_text(event, &format!("{}/component", fields.source))
        .or_else(|| optional_text(event, fields.reporting_controller))
        .unwrap_or_default();
    let source = match optional_text(event, &format!("{}/host", fields.source))
        .or_else(|| optional_text(event, "/reportingInstance"))
    {
        Some(instance) => format!("{component}, {instance}"),
        None => component.to_string(),
    };

    vec![
        json!(last_seen),
        json!(text(event, "/type")),
        json!(text(event, "/reason")),
        json!(target),
        json!(text(event, &format!("{}/fieldPath", fields.regarding))),
        json!(source),
        json!(text(event, fields.message).trim()),
        json!(first_seen),
        json!(count),
        name_cell(event),
    ]
}

// ---------------------------------------------------------------------------------------------
// Workloads
// ---------------------------------------------------------------------------------------------

/// `spec.replicas`, defaulted to 1 as upstream defaults it before anything prints it.
fn desired_replicas(item: &Value) -> i64 {
    item.pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1)
}

fn deployment_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    let (containers, images) = container_cells(item, "/spec/template");
    let selector =
        selector_string(item.pointer("/spec/selector")).unwrap_or_else(|| "<invalid>".into());
    vec![
        name_cell(item),
        json!(format!(
            "{}/{}",
            int(item, "/status/readyReplicas"),
            desired_replicas(item)
        )),
        json!(int(item, "/status/updatedReplicas")),
        json!(int(item, "/status/availableReplicas")),
        creation_age(item, clock),
        containers,
        images,
        json!(selector),
    ]
}

fn replica_set_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    let (containers, images) = container_cells(item, "/spec/template");
    vec![
        name_cell(item),
        json!(desired_replicas(item)),
        json!(int(item, "/status/replicas")),
        json!(int(item, "/status/readyReplicas")),
        creation_age(item, clock),
        containers,
        images,
        json!(format_label_selector(item.pointer("/spec/selector"))),
    ]
}

fn scale_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    vec![
        name_cell(item),
        json!(int(item, "/spec/replicas")),
        json!(int(item, "/status/replicas")),
        creation_age(item, clock),
    ]
}

fn job_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    let succeeded = int(item, "/status/succeeded");
    let completions = match item.pointer("/spec/completions").and_then(Value::as_i64) {
        Some(completions) => format!("{succeeded}/{completions}"),
        None => match int(item, "/spec/parallelism") {
            parallelism if parallelism > 1 => format!("{succeeded}/1 of {parallelism}"),
            _ => format!("{succeeded}/1"),
        },
    };
    let started = Clock::parse(optional_text(item, "/status/startTime"));
    let completed = Clock::parse(optional_text(item, "/status/completionTime"));
    let duration = match (started, completed) {
        (None, _) => String::new(),
        (Some(start), None) => human_duration((clock.now - start).num_seconds()),
        (Some(start), Some(end)) => human_duration((end - start).num_seconds()),
    };
    let conditions = list(item, "/status/conditions");
    let status = if condition_true(conditions, "Complete") {
        "Complete"
    } else if condition_true(conditions, "Failed") {
        "Failed"
    } else if object::is_terminating(item) {
        "Terminating"
    } else if condition_true(conditions, "Suspended") {
        "Suspended"
    } else if condition_true(conditions, "FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    };
    let (containers, images) = container_cells(item, "/spec/template");
    vec![
        name_cell(item),
        json!(status),
        json!(completions),
        json!(duration),
        creation_age(item, clock),
        containers,
        images,
        json!(format_label_selector(item.pointer("/spec/selector"))),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtin_types;

    /// The instant every test table is rendered at.
    const NOW: &str = "2026-11-22T12:00:00Z";

    fn clock() -> Clock {
        Clock {
            now: Clock::parse(Some(NOW)).expect("NOW parses"),
        }
    }

    /// A timestamp `seconds` before [`NOW`].
    fn ago(seconds: i64) -> String {
        object::timestamp(clock().now - chrono::Duration::seconds(seconds))
    }

    fn builtin(group: &str, plural: &str) -> ResourceType {
        builtin_types()
            .into_iter()
            .find(|t| t.group == group && t.plural == plural)
            .expect("built-in type exists")
    }

    fn custom(columns: Vec<PrinterColumn>) -> ResourceType {
        let mut resource = builtin("apps", "deployments");
        resource.group = "example.com".into();
        resource.kind = "Widget".into();
        resource.list_kind = "WidgetList".into();
        resource.plural = "widgets".into();
        resource.builtin = false;
        resource.printer_columns = columns;
        resource
    }

    fn printer_column(name: &str, type_: &str, json_path: &str) -> PrinterColumn {
        PrinterColumn {
            name: name.into(),
            type_: type_.into(),
            format: String::new(),
            description: String::new(),
            priority: 0,
            json_path: json_path.into(),
        }
    }

    fn rendered(resource: &ResourceType, object: &Value) -> Value {
        render(resource, object, true, &clock())
    }

    fn cells(resource: &ResourceType, object: &Value) -> Vec<Value> {
        let table = rendered(resource, object);
        let cells = table["rows"][0]["cells"]
            .as_array()
            .expect("one row with cells")
            .clone();
        let columns = table["columnDefinitions"].as_array().map_or(0, Vec::len);
        assert_eq!(cells.len(), columns, "one cell per column");
        cells
    }

    fn headers(resource: &ResourceType) -> Vec<(String, i64)> {
        let table = rendered(resource, &json!({"metadata": {"name": "x"}}));
        table["columnDefinitions"]
            .as_array()
            .expect("definitions")
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap_or_default().to_string(),
                    c["priority"].as_i64().unwrap_or(-1),
                )
            })
            .collect()
    }

    fn meta(name: &str, age_seconds: i64) -> Value {
        json!({"name": name, "namespace": "default", "uid": "u-1", "resourceVersion": "7",
               "creationTimestamp": ago(age_seconds)})
    }

    // --- ages ---------------------------------------------------------------------------------

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

    #[test]
    fn namespaces() {
        let resource = builtin("", "namespaces");
        assert_eq!(
            headers(&resource),
            [("Name".into(), 0), ("Status".into(), 0), ("Age".into(), 0)]
        );
        let ns = json!({"metadata": meta("dev", 3 * 86_400 + 7200), "status": {"phase": "Active"}});
        assert_eq!(
            cells(&resource, &ns),
            [json!("dev"), json!("Active"), json!("3d2h")]
        );
    }

    #[test]
    fn config_maps_count_data_and_binary_data() {
        let resource = builtin("", "configmaps");
        let cm = json!({"metadata": meta("cfg", 5), "data": {"a": "1", "b": "2"},
                        "binaryData": {"c": "AA=="}});
        assert_eq!(cells(&resource, &cm), [json!("cfg"), json!(3), json!("5s")]);
    }

    #[test]
    fn secrets() {
        let resource = builtin("", "secrets");
        let secret = json!({"metadata": meta("s", 600), "type": "kubernetes.io/tls",
                            "data": {"tls.crt": "", "tls.key": ""}});
        assert_eq!(
            cells(&resource, &secret),
            [
                json!("s"),
                json!("kubernetes.io/tls"),
                json!(2),
                json!("10m")
            ]
        );
    }

    #[test]
    fn service_accounts_count_their_secrets() {
        let resource = builtin("", "serviceaccounts");
        assert_eq!(
            headers(&resource),
            [("Name".into(), 0), ("Secrets".into(), 0), ("Age".into(), 0)]
        );
        let sa = json!({"metadata": meta("default", 60)});
        assert_eq!(
            cells(&resource, &sa),
            [json!("default"), json!(0), json!("60s")]
        );
        let sa = json!({"metadata": meta("bot", 60), "secrets": [{"name": "bot-token"}]});
        assert_eq!(cells(&resource, &sa)[1], json!(1));
    }

    #[test]
    fn cluster_ip_services() {
        let resource = builtin("", "services");
        assert_eq!(
            headers(&resource),
            [
                ("Name".into(), 0),
                ("Type".into(), 0),
                ("Cluster-IP".into(), 0),
                ("External-IP".into(), 0),
                ("Port(s)".into(), 0),
                ("Age".into(), 0),
                ("Selector".into(), 1)
            ]
        );
        let svc = json!({
            "metadata": meta("web", 7200),
            "spec": {"type": "ClusterIP", "clusterIP": "10.0.0.10", "clusterIPs": ["10.0.0.10"],
                     "ports": [{"port": 80, "protocol": "TCP"}, {"port": 443}],
                     "selector": {"tier": "front", "app": "web"}}
        });
        assert_eq!(
            cells(&resource, &svc),
            [
                json!("web"),
                json!("ClusterIP"),
                json!("10.0.0.10"),
                json!("<none>"),
                json!("80/TCP,443/TCP"),
                json!("120m"),
                json!("app=web,tier=front")
            ]
        );
    }

    #[test]
    fn services_of_other_types() {
        let resource = builtin("", "services");
        let node_port = json!({"metadata": meta("np", 1), "spec": {"type": "NodePort",
            "externalIPs": ["1.2.3.4"], "ports": [{"port": 80, "nodePort": 30080, "protocol": "UDP"}]}});
        let c = cells(&resource, &node_port);
        assert_eq!(
            (&c[2], &c[3], &c[4], &c[6]),
            (
                &json!("<none>"),
                &json!("1.2.3.4"),
                &json!("80:30080/UDP"),
                &json!("<none>")
            )
        );

        let pending = json!({"metadata": meta("lb", 1), "spec": {"type": "LoadBalancer"}});
        let c = cells(&resource, &pending);
        assert_eq!((&c[3], &c[4]), (&json!("<pending>"), &json!("<none>")));

        let balanced = json!({"metadata": meta("lb", 1),
            "spec": {"type": "LoadBalancer", "externalIPs": ["9.9.9.9"]},
            "status": {"loadBalancer": {"ingress": [{"ip": "5.5.5.5"}, {"hostname": "lb.example.com"}, {"ip": "5.5.5.5"}]}}});
        assert_eq!(
            cells(&resource, &balanced)[3],
            json!("5.5.5.5,lb.example.com,9.9.9.9")
        );

        let external = json!({"metadata": meta("ext", 1),
            "spec": {"type": "ExternalName", "externalName": "db.example.com"}});
        assert_eq!(cells(&resource, &external)[3], json!("db.example.com"));
    }

    #[test]
    fn pod_columns() {
        assert_eq!(
            headers(&builtin("", "pods")),
            [
                ("Name".into(), 0),
                ("Ready".into(), 0),
                ("Status".into(), 0),
                ("Restarts".into(), 0),
                ("Age".into(), 0),
                ("IP".into(), 1),
                ("Node".into(), 1),
                ("Nominated Node".into(), 1),
                ("Readiness Gates".into(), 1)
            ]
        );
    }

    #[test]
    fn a_pending_pod() {
        let pod = json!({"metadata": meta("p", 10),
            "spec": {"containers": [{"name": "app"}]}, "status": {"phase": "Pending"}});
        assert_eq!(
            cells(&builtin("", "pods"), &pod),
            [
                json!("p"),
                json!("0/1"),
                json!("Pending"),
                json!("0"),
                json!("10s"),
                json!("<none>"),
                json!("<none>"),
                json!("<none>"),
                json!("<none>")
            ]
        );
    }

    #[test]
    fn a_running_pod_with_one_of_two_containers_ready_and_three_restarts() {
        let pod = json!({
            "metadata": meta("web-1", 3600),
            "spec": {"nodeName": "node-a", "containers": [{"name": "app"}, {"name": "proxy"}],
                     "readinessGates": [{"conditionType": "example.com/lb"}]},
            "status": {
                "phase": "Running", "podIP": "10.1.0.5", "podIPs": [{"ip": "10.1.0.5"}],
                "conditions": [{"type": "Ready", "status": "False"},
                               {"type": "example.com/lb", "status": "True"}],
                "containerStatuses": [
                    {"name": "app", "ready": true, "restartCount": 3, "state": {"running": {}}},
                    {"name": "proxy", "ready": false, "restartCount": 0, "state": {"running": {}}}
                ]
            }
        });
        assert_eq!(
            cells(&builtin("", "pods"), &pod),
            [
                json!("web-1"),
                json!("1/2"),
                json!("Running"),
                json!("3"),
                json!("60m"),
                json!("10.1.0.5"),
                json!("node-a"),
                json!("<none>"),
                json!("1/1")
            ]
        );
    }

    #[test]
    fn restarts_show_how_long_ago_the_last_one_was() {
        let pod = json!({
            "metadata": meta("p", 3600),
            "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 2, "state": {"running": {}},
                 "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(300)}}},
                {"name": "b", "ready": true, "restartCount": 1, "state": {"running": {}},
                 "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(90)}}}
            ]}
        });
        let c = cells(&builtin("", "pods"), &pod);
        assert_eq!((&c[1], &c[3]), (&json!("2/2"), &json!("3 (90s ago)")));
    }

    #[test]
    fn the_first_waiting_container_names_the_status() {
        let pod = json!({
            "metadata": meta("p", 60),
            "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "a", "restartCount": 5, "state": {"waiting": {"reason": "CrashLoopBackOff"}}},
                {"name": "b", "state": {"waiting": {"reason": "ImagePullBackOff"}}}
            ]}
        });
        let c = cells(&builtin("", "pods"), &pod);
        assert_eq!(
            (&c[1], &c[2], &c[3]),
            (&json!("0/2"), &json!("CrashLoopBackOff"), &json!("5"))
        );
    }

    #[test]
    fn terminated_containers_report_reason_signal_or_exit_code() {
        let pod = |terminated: Value| {
            json!({"metadata": meta("p", 60), "spec": {"containers": [{"name": "a"}]},
                   "status": {"phase": "Running", "containerStatuses": [
                       {"name": "a", "state": {"terminated": terminated}}]}})
        };
        let status = |terminated| cells(&builtin("", "pods"), &pod(terminated))[2].clone();
        assert_eq!(
            status(json!({"exitCode": 137, "reason": "OOMKilled"})),
            json!("OOMKilled")
        );
        assert_eq!(
            status(json!({"exitCode": 0, "signal": 9})),
            json!("Signal:9")
        );
        assert_eq!(status(json!({"exitCode": 2})), json!("ExitCode:2"));
    }

    #[test]
    fn completed_with_a_container_still_running_reads_running_or_not_ready() {
        let pod = |ready: &str| {
            json!({"metadata": meta("p", 60),
                "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
                "status": {"phase": "Running",
                    "conditions": [{"type": "Ready", "status": ready}],
                    "containerStatuses": [
                        {"name": "a", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                        {"name": "b", "ready": true, "state": {"running": {}}}]}})
        };
        let resource = builtin("", "pods");
        assert_eq!(cells(&resource, &pod("True"))[2], json!("Running"));
        assert_eq!(cells(&resource, &pod("False"))[2], json!("NotReady"));
    }

    #[test]
    fn init_containers_show_progress() {
        let resource = builtin("", "pods");
        let pod = |statuses: Value, conditions: Value| {
            json!({"metadata": meta("p", 60),
                "spec": {"initContainers": [{"name": "i1"}, {"name": "i2"}],
                         "containers": [{"name": "app"}]},
                "status": {"phase": "Pending", "conditions": conditions,
                    "initContainerStatuses": statuses,
                    "containerStatuses": [{"name": "app", "restartCount": 4,
                        "state": {"waiting": {"reason": "PodInitializing"}}}]}})
        };
        let done = json!({"name": "i1", "state": {"terminated": {"exitCode": 0}}});
        let c = cells(
            &resource,
            &pod(
                json!([done, {"name": "i2", "restartCount": 1, "state": {"running": {}}}]),
                json!([]),
            ),
        );
        // Restarts while initialising count init containers only.
        assert_eq!(
            (&c[1], &c[2], &c[3]),
            (&json!("0/1"), &json!("Init:1/2"), &json!("1"))
        );

        let c = cells(
            &resource,
            &pod(
                json!([{"name": "i1", "state": {"waiting": {"reason": "ErrImagePull"}}}]),
                json!([]),
            ),
        );
        assert_eq!(c[2], json!("Init:ErrImagePull"));

        let c = cells(
            &resource,
            &pod(
                json!([{"name": "i1", "state": {"terminated": {"exitCode": 3}}}]),
                json!([]),
            ),
        );
        assert_eq!(c[2], json!("Init:ExitCode:3"));

        let c = cells(
            &resource,
            &pod(
                json!([done, {"name": "i2", "state": {"terminated": {"exitCode": 0}}}]),
                json!([{"type": "Initialized", "status": "True"}]),
            ),
        );
        assert_eq!((&c[2], &c[3]), (&json!("PodInitializing"), &json!("4")));
    }

    #[test]
    fn sidecars_count_towards_ready_and_total() {
        let pod = json!({"metadata": meta("p", 60),
            "spec": {"initContainers": [{"name": "mesh", "restartPolicy": "Always"}],
                     "containers": [{"name": "app"}]},
            "status": {"phase": "Running",
                "conditions": [{"type": "Initialized", "status": "True"}],
                "initContainerStatuses": [{"name": "mesh", "started": true, "ready": true,
                    "restartCount": 2, "state": {"running": {}}}],
                "containerStatuses": [{"name": "app", "ready": true, "state": {"running": {}}}]}});
        let c = cells(&builtin("", "pods"), &pod);
        assert_eq!(
            (&c[1], &c[2], &c[3]),
            (&json!("2/2"), &json!("Running"), &json!("2"))
        );
    }

    #[test]
    fn deleted_pods_read_terminating_unless_finished() {
        let resource = builtin("", "pods");
        let mut pod = json!({"metadata": meta("p", 60), "spec": {"containers": [{"name": "a"}]},
            "status": {"phase": "Running",
                "containerStatuses": [{"name": "a", "ready": true, "state": {"running": {}}}]}});
        pod["metadata"]["deletionTimestamp"] = json!(ago(1));
        assert_eq!(cells(&resource, &pod)[2], json!("Terminating"));

        pod["status"]["reason"] = json!("NodeLost");
        assert_eq!(cells(&resource, &pod)[2], json!("Unknown"));

        let mut done = json!({"metadata": meta("p", 60), "status": {"phase": "Succeeded"}});
        done["metadata"]["deletionTimestamp"] = json!(ago(1));
        assert_eq!(cells(&resource, &done)[2], json!("Succeeded"));
    }

    #[test]
    fn scheduling_gated_and_reasoned_pods() {
        let resource = builtin("", "pods");
        let gated = json!({"metadata": meta("p", 60), "status": {"phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}});
        assert_eq!(cells(&resource, &gated)[2], json!("SchedulingGated"));
        let evicted = json!({"metadata": meta("p", 60),
            "status": {"phase": "Failed", "reason": "Evicted"}});
        assert_eq!(cells(&resource, &evicted)[2], json!("Evicted"));
    }

    #[test]
    fn finished_pods_carry_a_completed_row_condition() {
        let resource = builtin("", "pods");
        let pod = json!({"metadata": meta("p", 60), "status": {"phase": "Succeeded"}});
        assert_eq!(
            rendered(&resource, &pod)["rows"][0]["conditions"],
            json!([{"type": "Completed", "status": "True", "reason": "Succeeded",
                    "message": "The pod has completed successfully."}])
        );
        let running = json!({"metadata": meta("p", 60), "status": {"phase": "Running"}});
        assert_eq!(
            rendered(&resource, &running)["rows"][0].get("conditions"),
            None
        );
    }

    #[test]
    fn core_events() {
        let resource = builtin("", "events");
        assert_eq!(
            headers(&resource),
            [
                ("Last Seen".into(), 0),
                ("Type".into(), 0),
                ("Reason".into(), 0),
                ("Object".into(), 0),
                ("Subobject".into(), 1),
                ("Source".into(), 1),
                ("Message".into(), 0),
                ("First Seen".into(), 1),
                ("Count".into(), 1),
                ("Name".into(), 1)
            ]
        );
        let event = json!({
            "metadata": meta("web.17a", 600),
            "involvedObject": {"kind": "Pod", "name": "web", "fieldPath": "spec.containers{app}"},
            "reason": "Pulled", "message": "  Image pulled \n", "type": "Normal",
            "source": {"component": "kubelet", "host": "node-a"},
            "firstTimestamp": ago(600), "lastTimestamp": ago(30), "count": 4
        });
        assert_eq!(
            cells(&resource, &event),
            [
                json!("30s"),
                json!("Normal"),
                json!("Pulled"),
                json!("pod/web"),
                json!("spec.containers{app}"),
                json!("kubelet, node-a"),
                json!("Image pulled"),
                json!("10m"),
                json!(4),
                json!("web.17a")
            ]
        );
    }

    #[test]
    fn events_without_legacy_timestamps_use_event_time_and_series() {
        let resource = builtin("", "events");
        let event = json!({
            "metadata": meta("e", 600),
            "involvedObject": {"kind": "Node"},
            "type": "Warning", "reason": "Rebooted",
            "eventTime": "2026-11-22T11:50:00.000000Z",
            "reportingComponent": "kubelet", "reportingInstance": "node-b"
        });
        let c = cells(&resource, &event);
        assert_eq!(
            (&c[0], &c[3], &c[5], &c[7], &c[8]),
            (
                &json!("10m"),
                &json!("node"),
                &json!("kubelet, node-b"),
                &json!("10m"),
                &json!(1)
            )
        );

        let mut series = event.clone();
        series["series"] = json!({"count": 7, "lastObservedTime": "2026-11-22T11:59:00.123456Z"});
        let c = cells(&resource, &series);
        assert_eq!(
            (&c[0], &c[7], &c[8]),
            (&json!("59s"), &json!("10m"), &json!(7))
        );
    }

    #[test]
    fn events_k8s_io_events_print_like_core_events() {
        let resource = builtin("events.k8s.io", "events");
        assert_eq!(headers(&resource), headers(&builtin("", "events")));
        let event = json!({
            "metadata": meta("e", 600),
            "regarding": {"kind": "Deployment", "name": "web"},
            "type": "Normal", "reason": "ScalingReplicaSet", "note": "Scaled up to 3",
            "eventTime": "2026-11-22T11:55:00.000000Z",
            "reportingController": "deployment-controller", "reportingInstance": "cm-1"
        });
        assert_eq!(
            cells(&resource, &event),
            [
                json!("5m"),
                json!("Normal"),
                json!("ScalingReplicaSet"),
                json!("deployment/web"),
                json!(""),
                json!("deployment-controller, cm-1"),
                json!("Scaled up to 3"),
                json!("5m"),
                json!(1),
                json!("e")
            ]
        );
        let mut legacy = event.clone();
        legacy["deprecatedFirstTimestamp"] = json!(ago(900));
        legacy["deprecatedLastTimestamp"] = json!(ago(45));
        legacy["deprecatedCount"] = json!(2);
        legacy["deprecatedSource"] = json!({"component": "old"});
        let c = cells(&resource, &legacy);
        assert_eq!(
            (&c[0], &c[5], &c[7], &c[8]),
            (&json!("45s"), &json!("old, cm-1"), &json!("15m"), &json!(2))
        );
    }

    #[test]
    fn leases_show_their_holder() {
        let resource = builtin("coordination.k8s.io", "leases");
        let lease = json!({"metadata": meta("leader", 90), "spec": {"holderIdentity": "op-1"}});
        assert_eq!(
            cells(&resource, &lease),
            [json!("leader"), json!("op-1"), json!("90s")]
        );
        let free = json!({"metadata": meta("leader", 90), "spec": {}});
        assert_eq!(cells(&resource, &free)[1], json!(""));
    }

    fn template() -> Value {
        json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [
            {"name": "app", "image": "nginx:1.27"}, {"name": "log", "image": "busybox"}]}})
    }

    #[test]
    fn deployments() {
        let resource = builtin("apps", "deployments");
        assert_eq!(
            headers(&resource),
            [
                ("Name".into(), 0),
                ("Ready".into(), 0),
                ("Up-to-date".into(), 0),
                ("Available".into(), 0),
                ("Age".into(), 0),
                ("Containers".into(), 1),
                ("Images".into(), 1),
                ("Selector".into(), 1)
            ]
        );
        let deployment = json!({
            "metadata": meta("web", 86_400),
            "spec": {"replicas": 3, "template": template(),
                     "selector": {"matchLabels": {"app": "web"},
                                  "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "dev"]},
                                                       {"key": "canary", "operator": "DoesNotExist"}]}},
            "status": {"replicas": 3, "readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}
        });
        assert_eq!(
            cells(&resource, &deployment),
            [
                json!("web"),
                json!("2/3"),
                json!(3),
                json!(2),
                json!("24h"),
                json!("app,log"),
                json!("nginx:1.27,busybox"),
                json!("app=web,!canary,env in (dev,prod)")
            ]
        );
        let fresh = json!({"metadata": meta("new", 1), "spec": {}});
        let c = cells(&resource, &fresh);
        assert_eq!(
            (&c[1], &c[2], &c[3], &c[5], &c[7]),
            (&json!("0/1"), &json!(0), &json!(0), &json!(""), &json!(""))
        );
    }

    #[test]
    fn replica_sets() {
        let resource = builtin("apps", "replicasets");
        assert_eq!(
            headers(&resource)
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>(),
            [
                "Name",
                "Desired",
                "Current",
                "Ready",
                "Age",
                "Containers",
                "Images",
                "Selector"
            ]
        );
        let rs = json!({
            "metadata": meta("web-5d8f", 300),
            "spec": {"replicas": 2, "template": template(),
                     "selector": {"matchLabels": {"pod-template-hash": "5d8f", "app": "web"}}},
            "status": {"replicas": 2, "readyReplicas": 1}
        });
        assert_eq!(
            cells(&resource, &rs),
            [
                json!("web-5d8f"),
                json!(2),
                json!(2),
                json!(1),
                json!("5m"),
                json!("app,log"),
                json!("nginx:1.27,busybox"),
                json!("app=web,pod-template-hash=5d8f")
            ]
        );
        let bare = json!({"metadata": meta("x", 1), "spec": {"selector": {}}});
        let c = cells(&resource, &bare);
        assert_eq!((&c[1], &c[7]), (&json!(1), &json!("<none>")));
        let odd = json!({"metadata": meta("x", 1),
            "spec": {"selector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}});
        assert_eq!(cells(&resource, &odd)[7], json!("<error>"));
    }

    #[test]
    fn running_jobs() {
        let resource = builtin("batch", "jobs");
        assert_eq!(
            headers(&resource)
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>(),
            [
                "Name",
                "Status",
                "Completions",
                "Duration",
                "Age",
                "Containers",
                "Images",
                "Selector"
            ]
        );
        let job = json!({
            "metadata": meta("backup", 600),
            "spec": {"completions": 3, "parallelism": 2, "template": template(),
                     "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}}},
            "status": {"succeeded": 1, "startTime": ago(590)}
        });
        assert_eq!(
            cells(&resource, &job),
            [
                json!("backup"),
                json!("Running"),
                json!("1/3"),
                json!("9m50s"),
                json!("10m"),
                json!("app,log"),
                json!("nginx:1.27,busybox"),
                json!("batch.kubernetes.io/controller-uid=u-1")
            ]
        );
    }

    #[test]
    fn job_completions_and_status() {
        let resource = builtin("batch", "jobs");
        let job = |spec: Value, status: Value| {
            cells(
                &resource,
                &json!({"metadata": meta("j", 600), "spec": spec, "status": status}),
            )
        };
        let c = job(json!({"parallelism": 4}), json!({"succeeded": 2}));
        assert_eq!(
            (&c[1], &c[2], &c[3], &c[7]),
            (
                &json!("Running"),
                &json!("2/1 of 4"),
                &json!(""),
                &json!("<none>")
            )
        );
        let c = job(json!({}), json!({}));
        assert_eq!(c[2], json!("0/1"));
        let c = job(
            json!({"completions": 1}),
            json!({"succeeded": 1, "startTime": ago(500), "completionTime": ago(200),
                   "conditions": [{"type": "Complete", "status": "True"}]}),
        );
        assert_eq!(
            (&c[1], &c[2], &c[3]),
            (&json!("Complete"), &json!("1/1"), &json!("5m"))
        );
        let c = job(
            json!({}),
            json!({"conditions": [{"type": "Failed", "status": "True"}]}),
        );
        assert_eq!(c[1], json!("Failed"));
        let c = job(
            json!({}),
            json!({"conditions": [{"type": "Suspended", "status": "True"}]}),
        );
        assert_eq!(c[1], json!("Suspended"));
        let c = job(
            json!({}),
            json!({"conditions": [{"type": "FailureTarget", "status": "True"}]}),
        );
        assert_eq!(c[1], json!("FailureTarget"));
        let c = job(
            json!({}),
            json!({"conditions": [{"type": "Complete", "status": "False"}]}),
        );
        assert_eq!(c[1], json!("Running"));

        let mut deleted = json!({"metadata": meta("j", 600), "spec": {},
            "status": {"conditions": [{"type": "Suspended", "status": "True"}]}});
        deleted["metadata"]["deletionTimestamp"] = json!(ago(1));
        assert_eq!(cells(&resource, &deleted)[1], json!("Terminating"));
    }

    #[test]
    fn scale_subresource_objects_print_as_scales() {
        let resource = builtin("apps", "deployments");
        let scale = json!({"kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": meta("web", 60), "spec": {"replicas": 3}, "status": {"replicas": 2}});
        assert_eq!(
            headers(&resource).len(),
            8,
            "deployments keep their own columns"
        );
        let table = rendered(&resource, &scale);
        assert_eq!(table["columnDefinitions"][0]["format"], "");
        assert_eq!(
            cells(&resource, &scale),
            [json!("web"), json!(3), json!(2), json!("60s")]
        );
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

    // --- custom resources ---------------------------------------------------------------------

    fn widget() -> Value {
        json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w1", "namespace": "default", "creationTimestamp": ago(7200),
                         "labels": {"app": "shop"}},
            "spec": {"replicas": 3, "ratio": 0.75, "paused": false, "since": ago(90),
                     "items": [{"name": "bolt"}, {"name": "nut"}],
                     "list": [{"name": "x"}, {"name": "y"}],
                     "tags": ["a", "b"], "owner": {"team": "core"}},
            "status": {"conditions": [{"type": "Synced", "status": "True"},
                                      {"type": "Ready", "status": "False"}]}
        })
    }

    #[test]
    fn custom_resources_without_printer_columns_show_name_and_age() {
        let resource = custom(Vec::new());
        assert_eq!(
            rendered(&resource, &widget())["columnDefinitions"][1],
            json!({"name": "Age", "type": "date", "format": "",
                   "description": CREATED_DESCRIPTION, "priority": 0})
        );
        assert_eq!(cells(&resource, &widget()), [json!("w1"), json!("120m")]);
    }

    #[test]
    fn custom_resource_columns_of_every_type() {
        let mut described = printer_column("Replicas", "integer", ".spec.replicas");
        described.description = "Desired widgets".into();
        described.priority = 1;
        let resource = custom(vec![
            described,
            printer_column("Ratio", "number", ".spec.ratio"),
            printer_column("Paused", "boolean", ".spec.paused"),
            printer_column("App", "string", ".metadata.labels.app"),
            printer_column("Since", "date", ".spec.since"),
            printer_column(
                "Ready",
                "string",
                r#".status.conditions[?(@.type=="Ready")].status"#,
            ),
            printer_column("First", "string", ".spec.items[0].name"),
            printer_column("Names", "string", ".spec.list[*].name"),
        ]);
        let table = rendered(&resource, &widget());
        assert_eq!(
            table["columnDefinitions"][1],
            json!({"name": "Replicas", "type": "integer", "format": "",
                   "description": "Desired widgets", "priority": 1})
        );
        assert_eq!(
            table["columnDefinitions"][2]["description"],
            "Custom resource definition column (in JSONPath format): .spec.ratio"
        );
        assert_eq!(
            table["rows"][0]["cells"],
            // Upstream prints only the first result of a path that selects several.
            json!(["w1", 3, 0.75, false, "shop", "90s", "False", "bolt", "x"])
        );
        assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    }

    #[test]
    fn missing_or_mistyped_custom_values_are_null_cells() {
        let resource = custom(vec![
            printer_column("Missing", "string", ".spec.nope"),
            printer_column(
                "Gone",
                "string",
                r#".status.conditions[?(@.type=="Gone")].status"#,
            ),
            printer_column("OutOfRange", "string", ".spec.items[5].name"),
            printer_column("NotANumber", "integer", ".metadata.name"),
            printer_column("NotABool", "boolean", ".spec.replicas"),
            printer_column("NotAString", "string", ".spec.owner.team.deeper"),
            printer_column("NotADate", "date", ".spec.replicas"),
        ]);
        let c = cells(&resource, &widget());
        assert_eq!(c[1..], vec![Value::Null; 7]);
    }

    #[test]
    fn custom_values_convert_like_upstream() {
        let mut object = widget();
        object["spec"]["big"] = json!(7.9);
        object["spec"]["whole"] = json!(2.0);
        object["spec"]["when"] = json!("soon");
        object["spec"]["blank"] = json!("");
        object["spec"]["future"] = json!("2026-11-22T12:00:05Z");
        object["spec"]["nothing"] = Value::Null;
        let resource = custom(vec![
            printer_column("Truncated", "integer", ".spec.big"),
            printer_column("AsFloat", "number", ".spec.replicas"),
            printer_column("Integral", "number", ".spec.whole"),
            printer_column("Count", "string", ".spec.replicas"),
            printer_column("Fraction", "string", ".spec.ratio"),
            printer_column("Flag", "string", ".spec.paused"),
            printer_column("Tags", "string", ".spec.tags"),
            printer_column("Owner", "string", ".spec.owner"),
            printer_column("BadDate", "date", ".spec.when"),
            printer_column("NoDate", "date", ".spec.blank"),
            printer_column("Future", "date", ".spec.future"),
            printer_column("NullString", "string", ".spec.nothing"),
            printer_column("NullNumber", "integer", ".spec.nothing"),
        ]);
        assert_eq!(
            cells(&resource, &object)[1..],
            [
                json!(7),
                json!(3),
                json!(2),
                json!("3"),
                json!("0.75"),
                json!("false"),
                json!(r#"["a","b"]"#),
                json!(r#"{"team":"core"}"#),
                json!("<invalid>"),
                json!("<unknown>"),
                json!("<invalid>"),
                json!("<no value>"),
                Value::Null
            ]
        );
    }

    #[test]
    fn an_unparsable_custom_column_ends_the_column_list() {
        let resource = custom(vec![
            printer_column("Replicas", "integer", ".spec.replicas"),
            printer_column("Broken", "string", ".spec.items[0"),
            printer_column("After", "string", ".metadata.name"),
        ]);
        assert_eq!(
            headers(&resource),
            [("Name".into(), 0), ("Replicas".into(), 0)]
        );
        assert_eq!(cells(&resource, &widget()), [json!("w1"), json!(3)]);
    }

    #[test]
    fn a_custom_resource_with_an_items_field_is_still_one_object() {
        let resource = custom(vec![printer_column(
            "Replicas",
            "integer",
            ".spec.replicas",
        )]);
        let mut object = widget();
        object["items"] = json!([{"metadata": {"name": "not-a-row"}}]);
        let table = rendered(&resource, &object);
        assert_eq!(table["rows"].as_array().map(Vec::len), Some(1));
        assert_eq!(table["rows"][0]["cells"], json!(["w1", 3]));
        let list = json!({"kind": "WidgetList", "apiVersion": "example.com/v1",
                          "metadata": {"resourceVersion": "3"}, "items": [widget(), widget()]});
        assert_eq!(
            rendered(&resource, &list)["rows"].as_array().map(Vec::len),
            Some(2)
        );
    }
}
