//! `/openapi/v3/<group-version>`: one OpenAPI 3.0 document per served group/version.
//!
//! Each document has the definitions of the group/version's kinds and of the types they refer
//! to, in `components.schemas` (what `kubectl explain` reads), and one PATCH operation per
//! kind tagged with its group/version/kind and taking `fieldValidation`: kubectl (`create -f`,
//! `apply -f`, `edit`) looks for exactly that before it sends `fieldValidation=Strict` and
//! leaves validation to the server (api-surface §2.3–2.4).
//!
//! The PATCH operations declare no request body, so kubectl's `apply` does not compute its
//! patches from these schemas (see `v2.rs` for what it does instead).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::definitions::GVK_EXTENSION;
use crate::discovery::GIT_VERSION;
use crate::resources::ResourceType;

/// `api/v1` or `apis/apps/v1`: where a group/version's document is in the index.
pub fn index_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// One document as it is serialized: the definitions are borrowed from the set every document
/// shares, so rendering sixteen documents generates the schemas once and copies none.
#[derive(Serialize)]
struct Document<'a> {
    openapi: &'static str,
    info: Value,
    paths: Map<String, Value>,
    components: Components<'a>,
}

#[derive(Serialize)]
struct Components<'a> {
    schemas: BTreeMap<&'a str, &'a Value>,
}

/// The document of one group/version, whose served kinds are `types`, as JSON bytes.
/// `definitions` holds every served kind's definition and every type they refer to, with
/// OpenAPI 3 references; the document takes the ones its kinds reach.
pub fn document(
    group: &str,
    version: &str,
    types: &[Arc<ResourceType>],
    definitions: &Map<String, Value>,
) -> Vec<u8> {
    let prefix = format!("/{}", index_path(group, version));
    let mut paths = serde_json::Map::new();
    for resource in types {
        let path = if resource.namespaced {
            format!(
                "{prefix}/namespaces/{{namespace}}/{}/{{name}}",
                resource.plural
            )
        } else {
            format!("{prefix}/{}/{{name}}", resource.plural)
        };
        paths.insert(
            path,
            json!({"patch": {
                "operationId": format!("patch{}{}", resource.kind, version),
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": {"group": group, "version": version, "kind": resource.kind},
                "parameters": [
                    {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                    {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                    {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}}
                ],
                "responses": {"200": {"description": "OK"}}
            }}),
        );
    }
    let document = Document {
        openapi: "3.0.0",
        info: json!({"title": "Kubernetes", "version": GIT_VERSION}),
        paths,
        components: Components {
            schemas: reached(group, version, definitions),
        },
    };
    // Serializing borrowed `Value`s into a Vec cannot fail.
    serde_json::to_vec(&document).unwrap_or_default()
}

/// The definitions of the kinds served at `group`/`version` and of everything they refer to.
fn reached<'a>(
    group: &str,
    version: &str,
    definitions: &'a Map<String, Value>,
) -> BTreeMap<&'a str, &'a Value> {
    let served_here = |definition: &Value| {
        definition[GVK_EXTENSION].as_array().is_some_and(|gvks| {
            gvks.iter()
                .any(|gvk| gvk["group"] == group && gvk["version"] == version)
        })
    };
    let mut queue: Vec<&str> = definitions
        .iter()
        .filter(|(_, definition)| served_here(definition))
        .map(|(name, _)| name.as_str())
        .collect();
    let mut seen: BTreeSet<&str> = queue.iter().copied().collect();
    let mut reached = BTreeMap::new();
    while let Some(name) = queue.pop() {
        let Some((name, definition)) = definitions.get_key_value(name) else {
            continue;
        };
        reached.insert(name.as_str(), definition);
        let mut references = Vec::new();
        collect_references(definition, &mut references);
        for reference in references {
            if let Some(target) = reference.strip_prefix("#/components/schemas/")
                && seen.insert(target)
            {
                queue.push(target);
            }
        }
    }
    reached
}

fn collect_references<'a>(schema: &'a Value, out: &mut Vec<&'a str>) {
    match schema {
        Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("$ref", Value::String(target)) => out.push(target),
                    _ => collect_references(value, out),
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                collect_references(item, out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Catalog;
    use schemars::generate::SchemaSettings;

    #[test]
    fn a_document_holds_its_kinds_and_everything_they_reach_and_nothing_else() {
        let catalog = Catalog::with_builtins();
        let all =
            super::super::definitions::definitions(&catalog.all(), SchemaSettings::openapi3())
                .schemas;
        let apps = catalog.resources_in("apps", "v1");
        let document: Value =
            serde_json::from_slice(&document("apps", "v1", &apps, &all)).expect("JSON");
        let schemas = document["components"]["schemas"]
            .as_object()
            .expect("schemas");
        for reached in [
            "io.k8s.api.apps.v1.Deployment",
            "io.k8s.api.core.v1.PodSpec",
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
            "io.k8s.apimachinery.pkg.util.intstr.IntOrString",
        ] {
            assert!(schemas.contains_key(reached), "{reached} is reached");
        }
        for elsewhere in ["io.k8s.api.core.v1.ConfigMap", "io.k8s.api.batch.v1.Job"] {
            assert!(!schemas.contains_key(elsewhere), "{elsewhere} is not");
        }
        let text = document.to_string();
        for reference in text.split("\"$ref\":\"").skip(1) {
            let target = reference.split('"').next().unwrap_or_default();
            let name = target
                .strip_prefix("#/components/schemas/")
                .expect("a v3 reference");
            assert!(schemas.contains_key(name), "dangling reference {target}");
        }
        assert!(
            document["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"]
                .is_object()
        );
    }
}
