//! CRD objects (stub; being written on a branch).
use std::sync::Arc;

use serde_json::{Value, json};

use crate::resources::{ResourceType, ScalePaths};
use crate::validation::{FieldError, NameRule};

pub fn default_crd(crd: &mut Value) {
    let kind = crd
        .pointer("/spec/names/kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if crd.pointer("/spec/names/listKind").is_none() {
        crd["spec"]["names"]["listKind"] = json!(format!("{kind}List"));
    }
    if crd.pointer("/spec/names/singular").is_none() {
        crd["spec"]["names"]["singular"] = json!(kind.to_lowercase());
    }
    if crd.pointer("/spec/conversion").is_none() {
        crd["spec"]["conversion"] = json!({"strategy": "None"});
    }
}

pub fn validate_crd(_crd: &Value, _old: Option<&Value>) -> Vec<FieldError> {
    Vec::new()
}

pub fn resource_types(crd: &Value) -> Result<Vec<ResourceType>, String> {
    let s = |p: &str| {
        crd.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let strings = |p: &str| -> Vec<String> {
        crd.pointer(p)
            .and_then(Value::as_array)
            .map(|l| {
                l.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut types = Vec::new();
    for version in crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
    {
        if version.get("served").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        let scale = version
            .pointer("/subresources/scale")
            .map(|scale| ScalePaths {
                spec_replicas_path: scale
                    .get("specReplicasPath")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .into(),
                status_replicas_path: scale
                    .get("statusReplicasPath")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .into(),
                label_selector_path: scale
                    .get("labelSelectorPath")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            });
        types.push(ResourceType {
            group: s("/spec/group"),
            version: version
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .into(),
            kind: s("/spec/names/kind"),
            list_kind: s("/spec/names/listKind"),
            plural: s("/spec/names/plural"),
            singular: s("/spec/names/singular"),
            namespaced: s("/spec/scope") == "Namespaced",
            short_names: strings("/spec/names/shortNames"),
            categories: strings("/spec/names/categories"),
            status_subresource: version.pointer("/subresources/status").is_some(),
            status_writes: crate::resources::StatusWrites::StatusOnly,
            scale,
            name_rule: NameRule::Dns1123Subdomain,
            returns_deleted_object: false,
            selectable_fields: Vec::new(),
            defaulting: None,
            write_defaults: None,
            tracks_generation: true,
            gc_policy: crate::deletion::GcPolicy::DeleteDependents,
            graceful: false,
            builtin: false,
            printer_columns: Vec::new(),
            schema: Some(Arc::new(crate::crd::schema::StructuralSchema)),
            validation: None,
            storage_version: None,
            definition_terminating: false,
        });
    }
    Ok(types)
}

pub fn accepted_names(crd: &Value) -> Value {
    crd.pointer("/spec/names").cloned().unwrap_or(json!({}))
}
