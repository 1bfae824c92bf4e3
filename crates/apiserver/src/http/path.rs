//! Parsing of Kubernetes resource paths.
//!
//! Resource routes are dynamic (custom resources appear at run time), so instead of an axum
//! route per resource, `/api/...` and `/apis/...` go to one handler that parses the path
//! grammar here: `[/namespaces/{ns}]/{resource}[/{name}[/{subresource}]]` below a group version.

/// A parsed request path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApiPath {
    /// `/api`
    CoreVersions,
    /// `/apis`
    Groups,
    /// `/apis/{group}`
    Group { group: String },
    /// `/api/v1`, `/apis/{group}/{version}`
    ResourceList { group: String, version: String },
    /// Anything naming a resource.
    Resource(ResourcePath),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourcePath {
    pub group: String,
    pub version: String,
    pub namespace: Option<String>,
    pub resource: String,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

/// Subresources of namespaces, which would otherwise parse as a namespaced resource
/// (`/api/v1/namespaces/{name}/status`).
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

/// Parses a URL path; None when it is not an API path.
pub fn parse(path: &str) -> Option<ApiPath> {
    let segments: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, version, rest) = match segments.as_slice() {
        ["api"] => return Some(ApiPath::CoreVersions),
        ["apis"] => return Some(ApiPath::Groups),
        ["apis", group] => {
            return Some(ApiPath::Group {
                group: group.to_string(),
            });
        }
        ["api", version, rest @ ..] => (String::new(), version.to_string(), rest),
        ["apis", group, version, rest @ ..] => (group.to_string(), version.to_string(), rest),
        _ => return None,
    };
    if rest.is_empty() {
        return Some(ApiPath::ResourceList { group, version });
    }
    let (namespace, rest): (Option<String>, &[&str]) = match rest {
        ["namespaces", ns, sub] if NAMESPACE_SUBRESOURCES.contains(sub) => {
            return Some(ApiPath::Resource(ResourcePath {
                group,
                version,
                namespace: None,
                resource: "namespaces".into(),
                name: Some(ns.to_string()),
                subresource: Some(sub.to_string()),
            }));
        }
        ["namespaces", ns, more @ ..] if !more.is_empty() => (Some(ns.to_string()), more),
        other => (None, other),
    };
    let (resource, name, subresource) = match rest {
        [resource] => (resource, None, None),
        [resource, name] => (resource, Some(name.to_string()), None),
        [resource, name, sub] => (resource, Some(name.to_string()), Some(sub.to_string())),
        _ => return None,
    };
    Some(ApiPath::Resource(ResourcePath {
        group,
        version,
        namespace,
        resource: resource.to_string(),
        name,
        subresource,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(path: &str) -> ResourcePath {
        match parse(path) {
            Some(ApiPath::Resource(r)) => r,
            other => panic!("{path} parsed as {other:?}"),
        }
    }

    #[test]
    fn discovery_paths() {
        assert_eq!(parse("/api"), Some(ApiPath::CoreVersions));
        assert_eq!(parse("/apis"), Some(ApiPath::Groups));
        assert_eq!(
            parse("/apis/apps"),
            Some(ApiPath::Group {
                group: "apps".into()
            })
        );
        assert_eq!(
            parse("/api/v1"),
            Some(ApiPath::ResourceList {
                group: "".into(),
                version: "v1".into()
            })
        );
        assert_eq!(
            parse("/apis/apps/v1/"),
            Some(ApiPath::ResourceList {
                group: "apps".into(),
                version: "v1".into()
            })
        );
        assert_eq!(parse("/healthz"), None);
    }

    #[test]
    fn namespaced_and_cluster_scoped_resources() {
        let r = resource("/api/v1/namespaces/default/configmaps/cm1");
        assert_eq!(
            (
                r.namespace.as_deref(),
                r.resource.as_str(),
                r.name.as_deref()
            ),
            (Some("default"), "configmaps", Some("cm1"))
        );
        let r = resource("/api/v1/configmaps");
        assert_eq!((r.namespace, r.name), (None, None));
        let r = resource("/api/v1/namespaces/kube-system");
        assert_eq!(
            (
                r.namespace.as_deref(),
                r.resource.as_str(),
                r.name.as_deref()
            ),
            (None, "namespaces", Some("kube-system"))
        );
        let r = resource("/api/v1/namespaces");
        assert_eq!((r.resource.as_str(), r.name), ("namespaces", None));
        let r = resource("/apis/apps/v1/namespaces/ns/deployments/web/scale");
        assert_eq!(
            (r.group.as_str(), r.subresource.as_deref()),
            ("apps", Some("scale"))
        );
    }

    #[test]
    fn namespace_subresources_are_not_namespaced_collections() {
        let r = resource("/api/v1/namespaces/team/finalize");
        assert_eq!(
            (
                r.namespace,
                r.resource.as_str(),
                r.name.as_deref(),
                r.subresource.as_deref()
            ),
            (None, "namespaces", Some("team"), Some("finalize"))
        );
        let r = resource("/api/v1/namespaces/team/pods");
        assert_eq!(
            (r.namespace.as_deref(), r.resource.as_str(), r.name),
            (Some("team"), "pods", None)
        );
    }
}
