//! What the printers' unit tests share: a pinned clock, timestamps relative to it, the served
//! resource types, and readers for a rendered Table's headers and cells.

use serde_json::{Value, json};

use super::{Clock, render};
use crate::object;
use crate::resources::{ResourceType, builtin_types};

/// The instant every test table is rendered at.
pub(super) const NOW: &str = "2026-11-22T12:00:00Z";

pub(super) fn clock() -> Clock {
    Clock {
        now: Clock::parse(Some(NOW)).expect("NOW parses"),
    }
}

/// A timestamp `seconds` before [`NOW`].
pub(super) fn ago(seconds: i64) -> String {
    object::timestamp(clock().now - chrono::Duration::seconds(seconds))
}

/// Every resource type the server starts with, Finale's own kinds included.
pub(super) fn served_types() -> Vec<ResourceType> {
    builtin_types()
        .into_iter()
        .chain(crate::insight::resource_types())
        .collect()
}

pub(super) fn builtin(group: &str, plural: &str) -> ResourceType {
    served_types()
        .into_iter()
        .find(|t| t.group == group && t.plural == plural)
        .expect("built-in type exists")
}

pub(super) fn rendered(resource: &ResourceType, object: &Value) -> Value {
    render(resource, object, true, &clock())
}

/// The cells of the one row `object` renders to, checked to be one per column.
pub(super) fn cells(resource: &ResourceType, object: &Value) -> Vec<Value> {
    let table = rendered(resource, object);
    let cells = table["rows"][0]["cells"]
        .as_array()
        .expect("one row with cells")
        .clone();
    let columns = table["columnDefinitions"].as_array().map_or(0, Vec::len);
    assert_eq!(cells.len(), columns, "one cell per column");
    cells
}

/// Column names and priorities.
pub(super) fn headers(resource: &ResourceType) -> Vec<(String, i64)> {
    column_definitions(resource)
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or_default().to_string(),
                c["priority"].as_i64().unwrap_or(-1),
            )
        })
        .collect()
}

/// Column names, types and priorities, e.g. `("Ready", "string", 0)`.
pub(super) fn typed_headers(resource: &ResourceType) -> Vec<(String, String, i64)> {
    column_definitions(resource)
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or_default().to_string(),
                c["type"].as_str().unwrap_or_default().to_string(),
                c["priority"].as_i64().unwrap_or(-1),
            )
        })
        .collect()
}

/// `typed_headers` written as `Name:string:0` for compact expectations.
pub(super) fn header_line(resource: &ResourceType) -> Vec<String> {
    typed_headers(resource)
        .into_iter()
        .map(|(name, kind, priority)| format!("{name}:{kind}:{priority}"))
        .collect()
}

fn column_definitions(resource: &ResourceType) -> Vec<Value> {
    let table = rendered(resource, &json!({"metadata": {"name": "x"}}));
    table["columnDefinitions"]
        .as_array()
        .expect("definitions")
        .clone()
}

pub(super) fn meta(name: &str, age_seconds: i64) -> Value {
    json!({"name": name, "namespace": "default", "uid": "u-1", "resourceVersion": "7",
           "creationTimestamp": ago(age_seconds)})
}

/// A pod template with two containers.
pub(super) fn template() -> Value {
    json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [
        {"name": "app", "image": "nginx:1.27"}, {"name": "log", "image": "busybox"}]}})
}
