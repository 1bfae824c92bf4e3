//! `/openapi/v2`: one Swagger 2.0 document with the definitions of every served kind.
//!
//! kubectl reads v2 for client-side validation (the items of a `kind: List`, and any kind
//! whose v3 document does not offer `fieldValidation`) and for `explain` when told to use v2.
//!
//! The document has definitions and no operations. kubectl also reads v2's PATCH operations
//! to choose how `apply` computes its patch; with none published it computes strategic merge
//! patches from its compiled-in types for built-ins and JSON merge patches for custom
//! resources, as it did before v2 was served, and both agree with the server's own strategic
//! merge keys.
//!
//! Definitions that come from an `openAPIV3Schema` are converted the way
//! kube-apiextensions-apiserver publishes a CRD in v2: value validations are stripped, a
//! `nullable` value loses its type, a value that preserves unknown fields loses its
//! `properties` and `items`, and an array left without items loses its type, because
//! kubectl's v2 parser cannot represent those and would refuse the whole document. From every
//! definition, the keywords Swagger 2.0 lacks (`oneOf`, `anyOf`, `not`) are removed.

use std::sync::Arc;

use serde_json::{Value, json};

use super::definitions::{Definitions, definitions, swagger2};
use crate::discovery::GIT_VERSION;
use crate::resources::ResourceType;

/// The JSON schema keywords upstream's structural schemas call value validations.
const VALUE_VALIDATIONS: [&str; 17] = [
    "format",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "multipleOf",
    "enum",
    "maxProperties",
    "minProperties",
    "required",
    "allOf",
];

/// The Swagger 2.0 document of `types`, as JSON.
pub fn document(types: &[Arc<ResourceType>]) -> Value {
    let Definitions {
        mut schemas,
        from_structural_schemas,
    } = definitions(types, swagger2());
    for (name, schema) in schemas.iter_mut() {
        to_swagger2(schema, from_structural_schemas.contains(name));
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": GIT_VERSION},
        "paths": {},
        "definitions": schemas,
    })
}

/// One schema and its subschemas made fit for Swagger 2.0 (see the module doc).
fn to_swagger2(schema: &mut Value, from_structural_schema: bool) {
    let Some(map) = schema.as_object_mut() else {
        return;
    };
    for keyword in ["oneOf", "anyOf", "not"] {
        map.remove(keyword);
    }
    if from_structural_schema {
        for keyword in VALUE_VALIDATIONS {
            map.remove(keyword);
        }
        map.remove("x-kubernetes-validations");
    }
    if map.remove("nullable") == Some(Value::Bool(true)) {
        for keyword in ["type", "items", "properties"] {
            map.remove(keyword);
        }
    }
    if map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        map.remove("items");
        map.remove("properties");
    }
    if map.get("type").and_then(Value::as_str) == Some("array") && !map.contains_key("items") {
        map.remove("type");
    }
    if let Some(Value::Object(properties)) = map.get_mut("properties") {
        for property in properties.values_mut() {
            to_swagger2(property, from_structural_schema);
        }
    }
    match map.get_mut("items") {
        Some(Value::Array(tuple)) => {
            for item in tuple {
                to_swagger2(item, from_structural_schema);
            }
        }
        Some(item) => to_swagger2(item, from_structural_schema),
        None => {}
    }
    if let Some(additional) = map.get_mut("additionalProperties") {
        to_swagger2(additional, from_structural_schema);
    }
    if let Some(Value::Array(all_of)) = map.get_mut("allOf") {
        for part in all_of {
            to_swagger2(part, from_structural_schema);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structural_schemas_lose_what_kubectls_v2_parser_cannot_hold() {
        let mut schema = json!({
            "type": "object",
            "required": ["spec"],
            "properties": {
                "spec": {
                    "type": "object",
                    "x-kubernetes-validations": [{"rule": "self.replicas >= 0"}],
                    "properties": {
                        "replicas": {"type": "integer", "minimum": 0, "format": "int32", "default": 1},
                        "note": {"type": "string", "nullable": true, "maxLength": 10},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                                 "properties": {"a": {"type": "string"}}},
                        "anything": {"type": "array", "x-kubernetes-preserve-unknown-fields": true,
                                     "items": {"type": "string"}},
                        "port": {"x-kubernetes-int-or-string": true,
                                 "anyOf": [{"type": "integer"}, {"type": "string"}]}
                    }
                }
            }
        });
        to_swagger2(&mut schema, true);
        assert_eq!(
            schema,
            json!({
                "type": "object",
                "properties": {
                    "spec": {
                        "type": "object",
                        "properties": {
                            "replicas": {"type": "integer", "default": 1},
                            "note": {},
                            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                            "anything": {"x-kubernetes-preserve-unknown-fields": true},
                            "port": {"x-kubernetes-int-or-string": true}
                        }
                    }
                }
            })
        );
    }

    #[test]
    fn builtin_schemas_keep_their_validations_and_lose_only_what_swagger2_lacks() {
        let mut schema = json!({
            "description": "JSONSchemaPropsOrBool",
            "oneOf": [{"$ref": "#/definitions/x"}, {"type": "boolean"}],
            "properties": {"n": {"type": "integer", "format": "int32", "minimum": 1}},
            "required": ["n"]
        });
        to_swagger2(&mut schema, false);
        assert_eq!(
            schema,
            json!({
                "description": "JSONSchemaPropsOrBool",
                "properties": {"n": {"type": "integer", "format": "int32", "minimum": 1}},
                "required": ["n"]
            })
        );
    }

    #[test]
    fn every_served_kind_is_defined_once_with_its_gvk_and_every_reference_resolves() {
        let catalog = crate::resources::Catalog::with_builtins();
        let document = document(&catalog.all());
        let definitions = document["definitions"].as_object().expect("definitions");
        for resource in catalog.all() {
            let found = definitions.values().any(|definition| {
                definition[super::super::definitions::GVK_EXTENSION]
                    .as_array()
                    .is_some_and(|gvks| {
                        gvks.iter().any(|gvk| {
                            gvk["group"] == resource.group.as_str()
                                && gvk["version"] == resource.version.as_str()
                                && gvk["kind"] == resource.kind.as_str()
                        })
                    })
            });
            assert!(
                found,
                "no definition for {} {}",
                resource.api_version(),
                resource.kind
            );
        }
        let text = document.to_string();
        for reference in text.split("\"$ref\":\"").skip(1) {
            let target = reference.split('"').next().unwrap_or_default();
            let name = target
                .strip_prefix("#/definitions/")
                .expect("a v2 reference");
            assert!(
                definitions.contains_key(name),
                "dangling reference {target}"
            );
        }
    }
}
