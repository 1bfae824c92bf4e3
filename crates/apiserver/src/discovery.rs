//! Discovery documents: `/version`, legacy discovery and aggregated discovery v2, all derived
//! from the live [`Catalog`] so that they change together with the served routes.

use serde_json::{Value, json};

use crate::resources::{Catalog, ResourceType};

/// The Kubernetes minor version Finale reports. It matches the k8s-openapi `v1_33` types of
/// kube 5, and the kubectl dispatcher on PATH then runs its kubectl 1.33 build.
pub const KUBERNETES_MINOR: &str = "33";
pub const GIT_VERSION: &str = "v1.33.0";

/// The exact media type clients ask for and require back for aggregated discovery.
pub const AGGREGATED_DISCOVERY_V2: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": KUBERNETES_MINOR,
        "gitVersion": GIT_VERSION,
        "gitCommit": concat!("finale-", env!("CARGO_PKG_VERSION")),
        "gitTreeState": "clean",
        "buildDate": "2026-11-22T00:00:00Z",
        "goVersion": "n/a (rust)",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, go_arch()),
    })
}

fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// `GET /api`.
pub fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn group_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

/// `GET /apis`.
pub fn group_list(catalog: &Catalog) -> Value {
    let groups: Vec<Value> = catalog
        .groups()
        .into_iter()
        .filter(|(group, _)| !group.is_empty())
        .map(|(group, versions)| api_group(&group, &versions))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

fn api_group(group: &str, versions: &[String]) -> Value {
    let entries: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": group_version(group, v), "version": v}))
        .collect();
    let preferred = entries.first().cloned().unwrap_or(Value::Null);
    json!({"name": group, "versions": entries, "preferredVersion": preferred})
}

/// `GET /apis/<group>`, or None if the group is not served.
pub fn group(catalog: &Catalog, name: &str) -> Option<Value> {
    catalog
        .groups()
        .into_iter()
        .find(|(group, _)| group == name)
        .map(|(group, versions)| {
            let mut doc = api_group(&group, &versions);
            doc["kind"] = json!("APIGroup");
            doc["apiVersion"] = json!("v1");
            doc
        })
}

/// `GET /api/v1` or `GET /apis/<group>/<version>`, or None if not served.
pub fn resource_list(catalog: &Catalog, group: &str, version: &str) -> Option<Value> {
    let resources = catalog.resources_in(group, version);
    if resources.is_empty() {
        return None;
    }
    let mut entries = Vec::new();
    for resource in &resources {
        let mut entry = json!({
            "name": resource.plural,
            "singularName": resource.singular,
            "namespaced": resource.namespaced,
            "kind": resource.kind,
            "verbs": resource.served_verbs(),
        });
        if !resource.short_names.is_empty() {
            entry["shortNames"] = json!(resource.short_names);
        }
        if !resource.categories.is_empty() {
            entry["categories"] = json!(resource.categories);
        }
        entries.push(entry);
        for sub in resource.subresources() {
            let mut entry = json!({
                "name": format!("{}/{}", resource.plural, sub.name),
                "singularName": "",
                "namespaced": resource.namespaced,
                "kind": resource.kind,
                "verbs": sub.verbs,
            });
            if let Some((group, version, kind)) = sub.kind {
                entry["group"] = json!(group);
                entry["version"] = json!(version);
                entry["kind"] = json!(kind);
            }
            entries.push(entry);
        }
    }
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version(group, version),
        "resources": entries,
    }))
}

fn aggregated_resource(resource: &ResourceType) -> Value {
    let response_kind =
        json!({"group": resource.group, "version": resource.version, "kind": resource.kind});
    let mut entry = json!({
        "resource": resource.plural,
        "responseKind": response_kind,
        "scope": if resource.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": resource.singular,
        "verbs": resource.served_verbs(),
    });
    if !resource.short_names.is_empty() {
        entry["shortNames"] = json!(resource.short_names);
    }
    if !resource.categories.is_empty() {
        entry["categories"] = json!(resource.categories);
    }
    let subresources: Vec<Value> = resource
        .subresources()
        .into_iter()
        .map(|sub| {
            let kind = match sub.kind {
                Some((group, version, kind)) => {
                    json!({"group": group, "version": version, "kind": kind})
                }
                None => response_kind.clone(),
            };
            json!({"subresource": sub.name, "responseKind": kind, "verbs": sub.verbs})
        })
        .collect();
    if !subresources.is_empty() {
        entry["subresources"] = Value::Array(subresources);
    }
    entry
}

fn aggregated_group(catalog: &Catalog, group: &str, versions: &[String]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|version| {
            let resources: Vec<Value> = catalog
                .resources_in(group, version)
                .iter()
                .map(|r| aggregated_resource(r))
                .collect();
            json!({"version": version, "freshness": "Current", "resources": resources})
        })
        .collect();
    let metadata = if group.is_empty() {
        json!({})
    } else {
        json!({"name": group})
    };
    json!({"metadata": metadata, "versions": versions})
}

/// Aggregated discovery for `/api` (`core == true`) or `/apis`.
pub fn aggregated(catalog: &Catalog, core: bool) -> Value {
    let items: Vec<Value> = catalog
        .groups()
        .into_iter()
        .filter(|(group, _)| group.is_empty() == core)
        .map(|(group, versions)| aggregated_group(catalog, &group, &versions))
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    })
}

/// True when the Accept header asks for aggregated discovery v2 before anything else it
/// accepts (clients list it first when they support it).
pub fn wants_aggregated(accept: Option<&str>) -> bool {
    accept.is_some_and(|accept| {
        accept.split(',').any(|media| {
            let params: Vec<&str> = media.split(';').map(str::trim).collect();
            params.contains(&"g=apidiscovery.k8s.io")
                && params.contains(&"v=v2")
                && params.contains(&"as=APIGroupDiscoveryList")
        })
    })
}
