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

use std::sync::Arc;

use schemars::generate::SchemaSettings;
use serde_json::{Value, json};

use super::definitions::definitions;
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

/// The document of one group/version, whose served kinds are `types`.
pub fn document(group: &str, version: &str, types: &[Arc<ResourceType>]) -> Value {
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
    let schemas = definitions(types, SchemaSettings::openapi3()).schemas;
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": GIT_VERSION},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}
