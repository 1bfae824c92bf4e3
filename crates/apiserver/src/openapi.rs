//! The `/openapi/v3` stub that lets kubectl delegate validation to the server.
//!
//! kubectl (`create -f`, `apply -f`, `edit`) checks, per group/version, for a PATCH operation
//! tagged with the kind's GVK that takes a `fieldValidation` parameter; if it finds one it sends
//! `fieldValidation=Strict` and does no client-side schema work (api-surface §2.3–2.4). Schemas
//! themselves are not served yet, so `kubectl explain` reports the kind as unknown.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use serde_json::{Value, json};

use crate::discovery::GIT_VERSION;
use crate::resources::Catalog;

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// The per-group/version document, keyed by its index path (`api/v1`, `apis/apps/v1`).
fn documents(catalog: &Catalog) -> BTreeMap<String, Value> {
    let mut docs = BTreeMap::new();
    for (group, versions) in catalog.groups() {
        for version in versions {
            let mut paths = serde_json::Map::new();
            for resource in catalog.resources_in(&group, &version) {
                let prefix = format!("/{}", gv_path(&group, &version));
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
            docs.insert(
                gv_path(&group, &version),
                json!({
                    "openapi": "3.0.0",
                    "info": {"title": "Kubernetes", "version": GIT_VERSION},
                    "paths": paths,
                    "components": {"schemas": {}},
                }),
            );
        }
    }
    docs
}

/// A content digest, so kubectl's per-hash disk cache refetches whenever a document changes.
fn digest(value: &Value) -> String {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    value.to_string().hash(&mut hasher);
    format!("{:016X}", hasher.finish())
}

/// `GET /openapi/v3`.
pub fn index(catalog: &Catalog) -> Value {
    let paths: serde_json::Map<String, Value> = documents(catalog)
        .into_iter()
        .map(|(path, doc)| {
            let url = format!("/openapi/v3/{path}?hash={}", digest(&doc));
            (path, json!({"serverRelativeURL": url}))
        })
        .collect();
    json!({"paths": paths})
}

/// `GET /openapi/v3/<path>`.
pub fn document(catalog: &Catalog, path: &str) -> Option<Value> {
    documents(catalog).remove(path.trim_matches('/'))
}
