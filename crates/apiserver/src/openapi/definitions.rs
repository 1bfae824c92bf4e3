//! The schema of every served kind, under upstream's definition names.
//!
//! - Built-in kinds: the `JsonSchema` of the k8s-openapi type the catalog names for the kind
//!   (`ResourceType::typed`), the same type the server decodes the kind's bodies with for
//!   field validation. Definitions are named as upstream names them
//!   (`io.k8s.api.core.v1.ConfigMap`), because k8s-openapi does.
//! - Custom resources, and Finale's own kinds: the `openAPIV3Schema` they are validated with
//!   (`ResourceType::schema`), with `apiVersion`, `kind` and `metadata` filled in as
//!   kube-apiextensions-apiserver publishes them, named `com.example.v1.Widget` for group
//!   `example.com`.
//!
//! Each kind's definition carries `x-kubernetes-group-version-kind`, which is how kubectl finds
//! it.
//!
//! *Caveats:* k8s-openapi marks `metadata` required in every kind (its Rust field is not
//! optional); upstream does not, so it is taken out. List kinds (`ConfigMapList`) and the
//! shared meta kinds (`DeleteOptions`, `Status`) have no definitions of their own yet.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use crate::resources::ResourceType;

pub const GVK_EXTENSION: &str = "x-kubernetes-group-version-kind";

const API_VERSION_DESCRIPTION: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
const KIND_DESCRIPTION: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";
/// apiextensions' `JSON` holds any JSON value (a CRD schema's `default`, `example`, `enum`
/// entries). k8s-openapi types it `object`; upstream leaves it untyped, and so must we, or
/// kubectl's client-side validation would refuse `default: 1`.
const ANY_JSON_VALUE: &str = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON";
const METADATA_DESCRIPTION: &str = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// Settings for OpenAPI v2 (Swagger 2.0): references under `#/definitions/`, and a `$ref`
/// keeps its siblings (a field's description), as upstream's v2 document writes them.
pub fn swagger2() -> SchemaSettings {
    SchemaSettings::draft07().with(|settings| {
        settings.transforms.clear();
        settings.meta_schema = None;
    })
}

/// The definitions of some kinds and of every type they refer to.
pub struct Definitions {
    pub schemas: Map<String, Value>,
    /// The definitions that come from an `openAPIV3Schema` (custom resources, Finale's own
    /// kinds), which OpenAPI v2 publishes with their value validations stripped.
    pub from_structural_schemas: BTreeSet<String>,
}

/// The definitions of `types`, with references under `settings`' definitions path; the
/// settings' transforms are applied to every definition (OpenAPI 3 wraps a `$ref` that has
/// siblings in `allOf`, as upstream's v3 documents do).
pub fn definitions(types: &[Arc<ResourceType>], settings: SchemaSettings) -> Definitions {
    let prefix = format!("#{}/", settings.definitions_path.trim_end_matches('/'));
    let mut generator = settings.into_generator();
    let mut kinds: Vec<(String, &ResourceType)> = Vec::new();
    let mut from_structural_schemas = BTreeSet::new();
    for resource in types {
        if let Some(typed) = resource.typed {
            let reference = (typed.schema)(&mut generator);
            let name = reference
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|reference| reference.strip_prefix(&prefix));
            if let Some(name) = name {
                kinds.push((name.to_string(), resource));
            }
        } else if let Some(schema) = &resource.schema {
            let name = custom_definition_name(resource);
            let metadata = generator.subschema_for::<ObjectMeta>();
            let definition = custom_definition(schema.source(), metadata.to_value());
            generator.definitions_mut().insert(name.clone(), definition);
            from_structural_schemas.insert(name.clone());
            kinds.push((name, resource));
        }
    }
    let mut schemas = generator.take_definitions(true);
    if let Some(Value::Object(any_value)) = schemas.get_mut(ANY_JSON_VALUE) {
        any_value.remove("type");
    }
    for (name, resource) in kinds {
        let Some(definition) = schemas.get_mut(&name).and_then(Value::as_object_mut) else {
            continue;
        };
        if resource.typed.is_some() {
            drop_required(definition, "metadata");
        }
        let gvk =
            json!({"group": resource.group, "kind": resource.kind, "version": resource.version});
        let listed = definition.entry(GVK_EXTENSION).or_insert_with(|| json!([]));
        if let Some(listed) = listed.as_array_mut()
            && !listed.contains(&gvk)
        {
            listed.push(gvk);
        }
    }
    Definitions {
        schemas,
        from_structural_schemas,
    }
}

/// kube-openapi's REST-friendly name of a custom kind: the group's DNS labels reversed, then the
/// version and the kind (`com.example.v1.Widget`).
fn custom_definition_name(resource: &ResourceType) -> String {
    let group: Vec<&str> = resource.group.split('.').rev().collect();
    format!("{}.{}.{}", group.join("."), resource.version, resource.kind)
}

/// A custom kind's schema as published: the user's schema, an object, whose `apiVersion`,
/// `kind` and `metadata` are the standard ones.
fn custom_definition(source: &Map<String, Value>, metadata: Value) -> Value {
    let mut definition = source.clone();
    definition.entry("type").or_insert_with(|| json!("object"));
    let properties = definition.entry("properties").or_insert_with(|| json!({}));
    if let Some(properties) = properties.as_object_mut() {
        properties.insert(
            "apiVersion".into(),
            json!({"description": API_VERSION_DESCRIPTION, "type": "string"}),
        );
        properties.insert(
            "kind".into(),
            json!({"description": KIND_DESCRIPTION, "type": "string"}),
        );
        let mut metadata = metadata;
        if let Some(metadata) = metadata.as_object_mut() {
            metadata.insert("description".into(), json!(METADATA_DESCRIPTION));
        }
        properties.insert("metadata".into(), metadata);
    }
    Value::Object(definition)
}

fn drop_required(definition: &mut Map<String, Value>, field: &str) {
    let now_empty = match definition.get_mut("required").and_then(Value::as_array_mut) {
        Some(required) => {
            required.retain(|name| name != field);
            required.is_empty()
        }
        None => false,
    };
    if now_empty {
        definition.remove("required");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Catalog;

    fn openapi3() -> SchemaSettings {
        SchemaSettings::openapi3()
    }

    #[test]
    fn a_builtin_kind_is_its_k8s_openapi_schema_with_its_gvk() {
        let catalog = Catalog::with_builtins();
        let types = catalog.resources_in("", "v1");
        let definitions = definitions(&types, openapi3());
        let config_map = &definitions.schemas["io.k8s.api.core.v1.ConfigMap"];
        assert_eq!(
            config_map[GVK_EXTENSION],
            json!([{"group": "", "kind": "ConfigMap", "version": "v1"}])
        );
        assert!(
            config_map.get("required").is_none(),
            "metadata is not required upstream: {config_map}"
        );
        assert_eq!(
            config_map["properties"]["metadata"]["allOf"][0]["$ref"],
            "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
        );
        // Types reached through references are defined too.
        assert!(
            definitions
                .schemas
                .contains_key("io.k8s.api.core.v1.PodSpec")
        );
        assert!(
            definitions
                .schemas
                .contains_key("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")
        );
    }

    #[test]
    fn finales_own_kinds_come_from_their_structural_schemas() {
        let catalog = Catalog::with_builtins();
        let types = catalog.resources_in(crate::insight::GROUP, "v1alpha1");
        let definitions = definitions(&types, swagger2());
        let review = &definitions.schemas["dev.finale.deletion.v1alpha1.DeletionReview"];
        assert!(
            definitions
                .from_structural_schemas
                .contains("dev.finale.deletion.v1alpha1.DeletionReview")
        );
        assert_eq!(review[GVK_EXTENSION][0]["kind"], "DeletionReview");
        assert_eq!(review["properties"]["kind"]["type"], "string");
        assert_eq!(
            review["properties"]["metadata"]["$ref"],
            "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
        );
        assert!(review["properties"]["spec"]["properties"]["target"].is_object());
    }
}
