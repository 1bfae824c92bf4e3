//! Accessors for the `metadata` of objects held as JSON values.
//!
//! Objects of every kind are `serde_json::Value`s (design decision 3); these helpers keep the
//! registry free of pointer strings and `Option` plumbing.

use compact_str::CompactString;
use serde_json::{Map, Value, json};

pub fn metadata(object: &Value) -> Option<&Map<String, Value>> {
    object.get("metadata").and_then(Value::as_object)
}

/// The `metadata` map, created if absent. Callers must have checked `object` is a JSON object.
pub fn metadata_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object.get("metadata").is_some_and(Value::is_object) {
        object["metadata"] = json!({});
    }
    match object.get_mut("metadata") {
        Some(Value::Object(map)) => map,
        _ => unreachable!("metadata was just made an object"),
    }
}

pub fn meta_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    metadata(object)
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
}

pub fn name(object: &Value) -> &str {
    meta_str(object, "name").unwrap_or_default()
}

/// `metadata.namespace`, absent for cluster-scoped objects.
pub fn namespace(object: &Value) -> Option<&str> {
    meta_str(object, "namespace").filter(|ns| !ns.is_empty())
}

pub fn uid(object: &Value) -> &str {
    meta_str(object, "uid").unwrap_or_default()
}

pub fn finalizers(object: &Value) -> Vec<String> {
    string_list(metadata(object).and_then(|m| m.get("finalizers")))
}

/// `status.conditions`, empty when absent or not a list.
pub fn status_conditions(object: &Value) -> &[Value] {
    object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// One `metadata.ownerReferences` entry, as the garbage collector and deletion insight read
/// it. Its short strings are kept inline ([`CompactString`]): a plan of ten thousand
/// dependents reads every one's reference, and heap strings scattered over memory made
/// those reads cache misses.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReference {
    #[serde(default)]
    pub api_version: CompactString,
    #[serde(default)]
    pub kind: CompactString,
    #[serde(default)]
    pub name: CompactString,
    #[serde(default)]
    pub uid: String,
    #[serde(default, deserialize_with = "null_is_false")]
    pub block_owner_deletion: bool,
}

/// `blockOwnerDeletion: null` reads as false, as an absent one does.
fn null_is_false<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    Ok(<Option<bool> as serde::Deserialize>::deserialize(deserializer)?.unwrap_or(false))
}

/// A Namespace's `spec.finalizers` tokens (the namespace controller's `kubernetes`, say).
pub fn spec_finalizers(namespace: &Value) -> Vec<String> {
    string_list(namespace.pointer("/spec/finalizers"))
}

/// The strings of a JSON list (others skipped); empty when `value` is not a list.
pub fn string_list(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

pub fn is_terminating(object: &Value) -> bool {
    metadata(object)
        .and_then(|m| m.get("deletionTimestamp"))
        .is_some_and(|t| !t.is_null())
}

/// The `status` of condition `kind` in the object's `status.conditions` (`True`, `False`,
/// `Unknown`), if it has one.
pub fn condition_status<'a>(object: &'a Value, kind: &str) -> Option<&'a str> {
    condition(object, kind)
        .and_then(|c| c.get("status"))
        .and_then(Value::as_str)
}

/// Condition `kind` of the object's `status.conditions`, if it has one.
pub fn condition<'a>(object: &'a Value, kind: &str) -> Option<&'a Value> {
    object
        .pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
}

pub fn labels(object: &Value) -> Option<&Map<String, Value>> {
    metadata(object)
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
}

/// Kubernetes omits empty lists and maps in metadata; kube-rs's finalizer helper relies on a
/// missing `finalizers` key (its JSON Patch tests `finalizers == null`).
pub fn drop_empty_metadata_fields(object: &mut Value) {
    let metadata = metadata_mut(object);
    metadata.retain(|_, value| match value {
        Value::Null => false,
        Value::Array(list) => !list.is_empty(),
        Value::Object(map) => !map.is_empty(),
        Value::String(s) => !s.is_empty(),
        _ => true,
    });
}

/// The object without `metadata` and `status`: what `generation` tracks.
pub fn spec_part(object: &Value) -> Value {
    match object {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| {
                    !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind")
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// RFC 3339 UTC with second precision, as Kubernetes writes timestamps.
pub fn timestamp(time: chrono::DateTime<chrono::Utc>) -> String {
    time.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A Kubernetes timestamp (RFC 3339) as UTC; None when it does not parse.
pub fn parse_timestamp(text: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.with_timezone(&chrono::Utc))
}

pub fn now() -> String {
    timestamp(chrono::Utc::now())
}

/// A JSON value's type as Go's `encoding/json` and upstream messages name it (`string`,
/// `number`, `bool`, `array`, `object`, `null`).
pub fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}
