//! Resolving the TYPE a person types (`cm`, `configmap`, `configmaps`, `ConfigMap`,
//! `deployments.apps`, `Deployment.apps`, `deployments.v1.apps`) to one served resource, the
//! way kubectl does: from the server's aggregated discovery (`/api` and `/apis`), which lists
//! every resource with its kind, singular name and short names.
//!
//! # Rules (kubectl's RESTMapper, reduced to what a single lookup needs)
//! - A name is compared case-insensitively with the plural, the singular, each short name and
//!   the kind of every top-level resource (subresources are never candidates).
//! - `NAME.GROUP` and `NAME.VERSION.GROUP` restrict the group (and version); the whole TYPE is
//!   also tried as a plain name, so a TYPE without dots is simply a name.
//! - Groups are searched in discovery order (the core group first) and, within a group, versions
//!   in the server's preference order, so the preferred version of the first matching group wins.
//!
//! # Caveats
//! Ambiguous short names resolve to the first match, as in kubectl; no warning is given.

use kube::client::{APIGroupDiscovery, APIGroupDiscoveryList};

/// One served resource, as discovery describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub namespaced: bool,
}

impl Resolved {
    /// `v1` for the core group, `group/version` otherwise.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// The served groups: the core group (from `/api`) followed by the named groups (`/apis`).
#[derive(Clone, Debug, Default)]
pub struct Served {
    groups: Vec<APIGroupDiscovery>,
}

impl Served {
    pub fn new(core: APIGroupDiscoveryList, named: APIGroupDiscoveryList) -> Served {
        let mut groups = core.items;
        // /api describes the core group without a name; keep it first and name it "".
        for group in &mut groups {
            if let Some(metadata) = group.metadata.as_mut() {
                metadata.name.get_or_insert_with(String::new);
            }
        }
        groups.extend(named.items);
        Served { groups }
    }

    /// Whether any version of `group` is served.
    pub fn serves_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| group_name(g) == group)
    }

    /// The resource `type_` names, if any.
    pub fn resolve(&self, type_: &str) -> Option<Resolved> {
        // The whole TYPE as a name first, then NAME.GROUP, then NAME.VERSION.GROUP.
        let mut attempts = vec![(type_, None, None)];
        if let Some((name, rest)) = type_.split_once('.') {
            attempts.push((name, Some(rest), None));
            if let Some((version, group)) = rest.split_once('.') {
                attempts.push((name, Some(group), Some(version)));
            }
        }
        attempts
            .into_iter()
            .find_map(|(name, group, version)| self.find(name, group, version))
    }

    /// Every top-level resource that can be listed, each group's versions in preference
    /// order, with `preferred` set on the first version served of each group and resource
    /// (the one to list: all versions share one storage).
    pub fn listable(&self) -> Vec<(Resolved, bool)> {
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for served_group in &self.groups {
            let group_name = group_name(served_group);
            for served_version in &served_group.versions {
                let version_name = served_version.version.as_deref().unwrap_or_default();
                for resource in &served_version.resources {
                    let Some(plural) = resource.resource.as_deref() else {
                        continue;
                    };
                    if plural.contains('/') || !resource.verbs.iter().any(|v| v == "list") {
                        continue;
                    }
                    let kind = resource
                        .response_kind
                        .as_ref()
                        .and_then(|gvk| gvk.kind.clone())
                        .unwrap_or_default();
                    let preferred = seen.insert((group_name.to_string(), plural.to_string()));
                    out.push((
                        Resolved {
                            group: group_name.to_string(),
                            version: version_name.to_string(),
                            kind,
                            plural: plural.to_string(),
                            namespaced: resource.scope.as_deref() == Some("Namespaced"),
                        },
                        preferred,
                    ));
                }
            }
        }
        out
    }

    fn find(&self, name: &str, group: Option<&str>, version: Option<&str>) -> Option<Resolved> {
        let name = name.to_ascii_lowercase();
        for served_group in &self.groups {
            let group_name = group_name(served_group);
            if group.is_some_and(|wanted| !wanted.eq_ignore_ascii_case(group_name)) {
                continue;
            }
            for served_version in &served_group.versions {
                let version_name = served_version.version.as_deref().unwrap_or_default();
                if version.is_some_and(|wanted| wanted != version_name) {
                    continue;
                }
                for resource in &served_version.resources {
                    let Some(plural) = resource.resource.as_deref() else {
                        continue;
                    };
                    let kind = resource
                        .response_kind
                        .as_ref()
                        .and_then(|gvk| gvk.kind.clone())
                        .unwrap_or_default();
                    let matches = plural.eq_ignore_ascii_case(&name)
                        || resource
                            .singular_resource
                            .as_deref()
                            .is_some_and(|s| s.eq_ignore_ascii_case(&name))
                        || resource
                            .short_names
                            .iter()
                            .any(|s| s.eq_ignore_ascii_case(&name))
                        || (!kind.is_empty() && kind.eq_ignore_ascii_case(&name));
                    if matches && !plural.contains('/') {
                        return Some(Resolved {
                            group: group_name.to_string(),
                            version: version_name.to_string(),
                            kind,
                            plural: plural.to_string(),
                            namespaced: resource.scope.as_deref() == Some("Namespaced"),
                        });
                    }
                }
            }
        }
        None
    }
}

fn group_name(group: &APIGroupDiscovery) -> &str {
    group
        .metadata
        .as_ref()
        .and_then(|m| m.name.as_deref())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Discovery for a core ConfigMap, apps/v1 and apps/v1beta1 Deployments, and a custom
    /// `widgets` resource whose short name collides with nothing.
    fn served() -> Served {
        let core: APIGroupDiscoveryList = serde_json::from_value(serde_json::json!({
            "items": [{"metadata": {}, "versions": [{"version": "v1", "resources": [
                {"resource": "configmaps", "responseKind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                 "scope": "Namespaced", "singularResource": "configmap", "shortNames": ["cm"], "verbs": ["get"]},
                {"resource": "namespaces", "responseKind": {"group": "", "version": "v1", "kind": "Namespace"},
                 "scope": "Cluster", "singularResource": "namespace", "shortNames": ["ns"], "verbs": ["get"]}
            ]}]}]
        }))
        .expect("core discovery");
        let named: APIGroupDiscoveryList = serde_json::from_value(serde_json::json!({
            "items": [
              {"metadata": {"name": "apps"}, "versions": [
                {"version": "v1", "resources": [
                  {"resource": "deployments", "responseKind": {"group": "apps", "version": "v1", "kind": "Deployment"},
                   "scope": "Namespaced", "singularResource": "deployment", "shortNames": ["deploy"], "verbs": ["get"]}]},
                {"version": "v1beta1", "resources": [
                  {"resource": "deployments", "responseKind": {"group": "apps", "version": "v1beta1", "kind": "Deployment"},
                   "scope": "Namespaced", "singularResource": "deployment", "verbs": ["get"]}]}]},
              {"metadata": {"name": "example.com"}, "versions": [
                {"version": "v2", "resources": [
                  {"resource": "widgets", "responseKind": {"group": "example.com", "version": "v2", "kind": "Widget"},
                   "scope": "Cluster", "singularResource": "widget", "shortNames": ["wd"], "verbs": ["get"]}]}]}
            ]
        }))
        .expect("named discovery");
        Served::new(core, named)
    }

    #[test]
    fn every_form_kubectl_accepts_resolves() {
        let served = served();
        for type_ in [
            "cm",
            "configmap",
            "configmaps",
            "ConfigMap",
            "CONFIGMAPS",
            "configmaps.",
        ] {
            let resolved = served.resolve(type_);
            // "configmaps." names the core group explicitly (an empty group after the dot).
            let resolved = resolved.unwrap_or_else(|| panic!("{type_} should resolve"));
            assert_eq!(resolved.api_version(), "v1", "{type_}");
            assert_eq!(resolved.kind, "ConfigMap", "{type_}");
            assert!(resolved.namespaced, "{type_}");
        }
        for type_ in [
            "deploy",
            "deployments.apps",
            "Deployment.apps",
            "deployments.v1.apps",
        ] {
            let resolved = served.resolve(type_).expect(type_);
            assert_eq!(resolved.api_version(), "apps/v1", "{type_}");
        }
        let beta = served
            .resolve("deployments.v1beta1.apps")
            .expect("pinned version");
        assert_eq!(beta.api_version(), "apps/v1beta1");
        let widget = served.resolve("widget.example.com").expect("dotted group");
        assert_eq!(widget.api_version(), "example.com/v2");
        assert!(!widget.namespaced);
        assert_eq!(served.resolve("wd").expect("short name").kind, "Widget");
    }

    #[test]
    fn unknown_types_and_wrong_groups_do_not_resolve() {
        let served = served();
        assert_eq!(served.resolve("gadgets"), None);
        assert_eq!(served.resolve("configmaps.apps"), None);
        assert_eq!(served.resolve("deployments.v2.apps"), None);
        assert!(served.serves_group("apps"));
        assert!(served.serves_group(""));
        assert!(!served.serves_group("deletion.finale.dev"));
    }
}
