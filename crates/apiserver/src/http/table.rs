//! Server-side `Table` output for `kubectl get`.
//!
//! kubectl prints the cells it is given, so ages are humanised here. Every kind gets Name and
//! Age; a few kinds get the columns kubectl users expect first. Per-kind printers in full are
//! future work.

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use serde_json::{Value, json};

use crate::object;
use crate::resources::ResourceType;

pub const TABLE_CONTENT_TYPE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

/// A column: header, type and how to compute the cell.
struct Column {
    name: &'static str,
    kind: &'static str,
    cell: fn(&Value) -> Value,
}

fn columns(resource: &ResourceType) -> Vec<Column> {
    let name = Column {
        name: "Name",
        kind: "string",
        cell: |o| json!(object::name(o)),
    };
    let age = Column {
        name: "Age",
        kind: "string",
        cell: |o| json!(age(object::meta_str(o, "creationTimestamp"))),
    };
    match (resource.group.as_str(), resource.plural.as_str()) {
        ("", "namespaces") => vec![
            name,
            Column {
                name: "Status",
                kind: "string",
                cell: |o| {
                    json!(
                        o.pointer("/status/phase")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                    )
                },
            },
            age,
        ],
        ("", "configmaps") => vec![
            name,
            Column {
                name: "Data",
                kind: "integer",
                cell: |o| {
                    let count = |field: &str| {
                        o.get(field)
                            .and_then(Value::as_object)
                            .map_or(0, |m| m.len())
                    };
                    json!(count("data") + count("binaryData"))
                },
            },
            age,
        ],
        ("", "secrets") => vec![
            name,
            Column {
                name: "Type",
                kind: "string",
                cell: |o| json!(o.get("type").and_then(Value::as_str).unwrap_or_default()),
            },
            Column {
                name: "Data",
                kind: "integer",
                cell: |o| {
                    json!(
                        o.get("data")
                            .and_then(Value::as_object)
                            .map_or(0, |m| m.len())
                    )
                },
            },
            age,
        ],
        ("", "pods") => vec![
            name,
            Column {
                name: "Status",
                kind: "string",
                cell: |o| {
                    if object::is_terminating(o) {
                        json!("Terminating")
                    } else {
                        json!(
                            o.pointer("/status/phase")
                                .and_then(Value::as_str)
                                .unwrap_or("Unknown")
                        )
                    }
                },
            },
            age,
        ],
        _ => vec![name, age],
    }
}

/// Humanises a creation timestamp as kubectl shows ages: `45s`, `3m12s`, `5h`, `2d3h`.
pub fn age(timestamp: Option<&str>) -> String {
    let Some(created) = timestamp.and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok()) else {
        return "<unknown>".into();
    };
    let seconds = (chrono::Utc::now() - created.with_timezone(&chrono::Utc))
        .num_seconds()
        .max(0);
    human_duration(seconds)
}

pub fn human_duration(seconds: i64) -> String {
    let (minutes, hours, days) = (seconds / 60, seconds / 3600, seconds / 86_400);
    match seconds {
        s if s < 120 => format!("{s}s"),
        _ if minutes < 10 => format!("{minutes}m{}s", seconds % 60),
        _ if hours < 3 => format!("{minutes}m"),
        _ if hours < 8 => format!("{hours}h{}m", minutes % 60),
        _ if days < 2 => format!("{hours}h"),
        _ if days < 8 => format!("{days}d{}h", hours % 24),
        _ if days < 365 * 2 => format!("{days}d"),
        _ => format!("{}y{}d", days / 365, days % 365),
    }
}

fn row(resource: &ResourceType, columns: &[Column], item: &Value) -> Value {
    let cells: Vec<Value> = columns.iter().map(|c| (c.cell)(item)).collect();
    let mut metadata = object::metadata(item).cloned().unwrap_or_default();
    metadata.remove("managedFields");
    let _ = resource;
    json!({"cells": cells, "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": metadata}})
}

/// The Table for a list or a single object. `with_definitions` is false for watch events
/// after the first, which kubectl accepts.
pub fn table(resource: &ResourceType, body: &Value, with_definitions: bool) -> Value {
    let columns = columns(resource);
    let rows: Vec<Value> = match body.get("items").and_then(Value::as_array) {
        Some(items) => items
            .iter()
            .map(|item| row(resource, &columns, item))
            .collect(),
        None => vec![row(resource, &columns, body)],
    };
    let definitions: Vec<Value> = if with_definitions {
        columns
            .iter()
            .map(|c| json!({"name": c.name, "type": c.kind, "format": if c.name == "Name" { "name" } else { "" }, "description": "", "priority": 0}))
            .collect()
    } else {
        Vec::new()
    };
    let mut metadata = json!({});
    if let Some(rv) = body.pointer("/metadata/resourceVersion") {
        metadata["resourceVersion"] = rv.clone();
    }
    if let Some(token) = body.pointer("/metadata/continue") {
        metadata["continue"] = token.clone();
    }
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "columnDefinitions": definitions, "rows": rows})
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

#[cfg(test)]
mod tests {
    use super::human_duration;

    #[test]
    fn ages_read_like_kubectl() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(119), "119s");
        assert_eq!(human_duration(192), "3m12s");
        assert_eq!(human_duration(3600), "60m");
        assert_eq!(human_duration(5 * 3600 + 120), "5h2m");
        assert_eq!(human_duration(20 * 3600), "20h");
        assert_eq!(human_duration(3 * 86_400 + 7200), "3d2h");
        assert_eq!(human_duration(30 * 86_400), "30d");
    }
}
