//! What a request asks to do, in the terms RBAC rules speak: kube-apiserver's `RequestInfo`
//! and `authorizer.Attributes`.
//!
//! A path below `/api/v1/` or `/apis/GROUP/VERSION/` is a *resource request*: its verb comes
//! from the HTTP method (`get` becomes `list` or `watch` without a name, `delete` becomes
//! `deletecollection`), and the path gives the namespace, resource, name and subresource.
//! Everything else (`/version`, `/api`, `/apis/GROUP`, `/openapi/v3`, `/metrics`) is a
//! *non-resource request* whose verb is the lowercased method.
//!
//! As upstream, `/api/v1/namespaces/NAME` is in the namespace `NAME`: a RoleBinding in a
//! namespace grants access to the Namespace object itself.

use http::Method;

use crate::authn::Identity;

/// A request's authorization attributes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attributes {
    pub user: Identity,
    pub verb: String,
    /// False for non-resource paths, which only `nonResourceURLs` rules match.
    pub resource_request: bool,
    pub api_group: String,
    pub api_version: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    /// The URL path, for non-resource requests.
    pub path: String,
}

impl Attributes {
    /// A resource request, as a `SubjectAccessReview`'s `resourceAttributes` state it.
    #[allow(clippy::too_many_arguments)]
    pub fn resource(
        user: Identity,
        verb: &str,
        api_group: &str,
        resource: &str,
        subresource: &str,
        namespace: &str,
        name: &str,
    ) -> Attributes {
        Attributes {
            user,
            verb: verb.to_string(),
            resource_request: true,
            api_group: api_group.to_string(),
            resource: resource.to_string(),
            subresource: subresource.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
            ..Attributes::default()
        }
    }

    /// A non-resource request (`/healthz`, `/version`, …).
    pub fn non_resource(user: Identity, verb: &str, path: &str) -> Attributes {
        Attributes {
            user,
            verb: verb.to_string(),
            path: path.to_string(),
            ..Attributes::default()
        }
    }

    /// `pods/status` for a subresource, else `pods`.
    pub fn combined_resource(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }

    /// The attributes of an HTTP request, as kube-apiserver's `RequestInfoFactory` derives
    /// them. `query` is the raw query string.
    pub fn from_request(user: Identity, method: &Method, path: &str, query: Option<&str>) -> Self {
        let non_resource =
            |user| Attributes::non_resource(user, &method.as_str().to_ascii_lowercase(), path);
        let parts: Vec<&str> = path
            .trim_matches('/')
            .split('/')
            .filter(|p| !p.is_empty())
            .collect();
        let (group, rest) = match parts.as_slice() {
            ["api", _, rest @ ..] if !rest.is_empty() => ("", &parts[1..]),
            ["apis", group, _, rest @ ..] if !rest.is_empty() => (*group, &parts[2..]),
            _ => return non_resource(user),
        };
        let (version, mut rest) = (rest[0], &rest[1..]);
        let mut verb = match *method {
            Method::POST => "create",
            Method::GET | Method::HEAD => "get",
            Method::PUT => "update",
            Method::PATCH => "patch",
            Method::DELETE => "delete",
            _ => "",
        }
        .to_string();
        // The legacy `/watch/` prefix names the verb itself.
        if rest.first() == Some(&"watch") && rest.len() > 1 {
            verb = "watch".to_string();
            rest = &rest[1..];
        }
        let mut namespace = "";
        if rest.first() == Some(&"namespaces")
            && let Some(ns) = rest.get(1)
        {
            namespace = ns;
            if rest.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&rest[2]) {
                rest = &rest[2..];
            }
        }
        let resource = rest.first().copied().unwrap_or_default();
        let mut name = rest.get(1).copied().unwrap_or_default().to_string();
        let subresource = rest.get(2).copied().unwrap_or_default();
        // Only a request without a name reads its query: a get becomes a list or a watch,
        // and a list or watch of one name (`fieldSelector=metadata.name=x`, what kubectl get
        // NAME -w and informers of one object send) is authorized for that name.
        if name.is_empty() && (verb == "get" || verb == "watch") {
            let query: Vec<_> =
                form_urlencoded::parse(query.unwrap_or_default().as_bytes()).collect();
            if verb == "get" {
                let watch = crate::query::flag(
                    query
                        .iter()
                        .find(|(k, _)| k == "watch")
                        .map(|(_, v)| v.as_ref()),
                );
                verb = if watch { "watch" } else { "list" }.to_string();
            }
            if let Some(selected) = query
                .iter()
                .find(|(k, _)| k == "fieldSelector")
                .and_then(|(_, v)| exact_name(v))
            {
                name = selected;
            }
        }
        if name.is_empty() && verb == "delete" {
            verb = "deletecollection".to_string();
        }
        Attributes {
            user,
            verb,
            resource_request: true,
            api_group: group.to_string(),
            api_version: version.to_string(),
            resource: resource.to_string(),
            subresource: subresource.to_string(),
            namespace: namespace.to_string(),
            name,
            path: path.to_string(),
        }
    }
}

/// Subresources of a namespace (`/api/v1/namespaces/NAME/status`), which would otherwise be
/// read as a resource inside the namespace.
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

/// The name a field selector requires exactly (`metadata.name=x` or `metadata.name==x`), if
/// that is all it says and the name is a valid path segment.
fn exact_name(selector: &str) -> Option<String> {
    let selector = selector.trim();
    if selector.contains(',') {
        return None;
    }
    let value = selector
        .strip_prefix("metadata.name==")
        .or_else(|| selector.strip_prefix("metadata.name="))?;
    let valid = !value.is_empty() && value != "." && value != ".." && !value.contains(['/', '%']);
    valid.then(|| value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(method: Method, uri: &str) -> Attributes {
        let (path, query) = uri
            .split_once('?')
            .map_or((uri, None), |(p, q)| (p, Some(q)));
        Attributes::from_request(Identity::default(), &method, path, query)
    }

    #[test]
    fn verbs_follow_the_method_and_the_name() {
        let cases = [
            (Method::GET, "/api/v1/namespaces/a/pods", "list", ""),
            (
                Method::GET,
                "/api/v1/namespaces/a/pods?watch=true",
                "watch",
                "",
            ),
            (
                Method::GET,
                "/api/v1/namespaces/a/pods?watch=1&fieldSelector=metadata.name%3Dp",
                "watch",
                "p",
            ),
            (Method::GET, "/api/v1/namespaces/a/pods/p", "get", "p"),
            (Method::POST, "/api/v1/namespaces/a/pods", "create", ""),
            (Method::PUT, "/api/v1/namespaces/a/pods/p", "update", "p"),
            (Method::PATCH, "/api/v1/namespaces/a/pods/p", "patch", "p"),
            (Method::DELETE, "/api/v1/namespaces/a/pods/p", "delete", "p"),
            (
                Method::DELETE,
                "/api/v1/namespaces/a/pods",
                "deletecollection",
                "",
            ),
            (Method::GET, "/api/v1/watch/namespaces/a/pods", "watch", ""),
        ];
        for (method, uri, verb, name) in cases {
            let a = attrs(method, uri);
            assert!(a.resource_request, "{uri}");
            assert_eq!((a.verb.as_str(), a.name.as_str()), (verb, name), "{uri}");
            assert_eq!(
                (a.namespace.as_str(), a.resource.as_str()),
                ("a", "pods"),
                "{uri}"
            );
        }
    }

    #[test]
    fn namespaces_groups_and_subresources() {
        let a = attrs(Method::GET, "/api/v1/namespaces/team");
        assert_eq!(
            (a.namespace.as_str(), a.resource.as_str(), a.name.as_str()),
            ("team", "namespaces", "team")
        );
        let a = attrs(Method::PUT, "/api/v1/namespaces/team/finalize");
        assert_eq!(
            (a.resource.as_str(), a.name.as_str(), a.subresource.as_str()),
            ("namespaces", "team", "finalize")
        );
        let a = attrs(Method::GET, "/api/v1/namespaces");
        assert_eq!((a.verb.as_str(), a.namespace.as_str()), ("list", ""));
        let a = attrs(
            Method::PATCH,
            "/apis/apps/v1/namespaces/x/deployments/d/scale",
        );
        assert_eq!(
            (
                a.api_group.as_str(),
                a.api_version.as_str(),
                a.combined_resource().as_str()
            ),
            ("apps", "v1", "deployments/scale")
        );
        let a = attrs(
            Method::GET,
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/admin",
        );
        assert_eq!((a.namespace.as_str(), a.name.as_str()), ("", "admin"));
    }

    #[test]
    fn discovery_and_other_paths_are_non_resource() {
        for uri in [
            "/api",
            "/api/v1",
            "/apis",
            "/apis/apps",
            "/apis/apps/v1",
            "/version",
            "/openapi/v3",
            "/metrics",
        ] {
            let a = attrs(Method::GET, uri);
            assert!(!a.resource_request, "{uri}");
            assert_eq!((a.verb.as_str(), a.path.as_str()), ("get", uri));
        }
    }
}
