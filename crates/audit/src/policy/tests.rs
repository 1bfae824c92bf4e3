use super::*;

/// A policy in the spirit of upstream's documented example, written for these tests: bodies
/// of Deployments, metadata of their scale and of Pod logs, nothing for one noisy Lease, no
/// health probes, Secrets at Metadata, kube-system ConfigMaps at Request, the rest Metadata.
pub(super) const EXAMPLE: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
metadata:
  name: example
omitStages: ["RequestReceived"]
rules:
  - level: RequestResponse
    resources:
      - group: apps
        resources: ["deployments"]
  - level: Metadata
    resources:
      - group: apps
        resources: ["deployments/scale"]
      - group: ""
        resources: ["pods/log"]
  - level: None
    resources:
      - group: coordination.k8s.io
        resources: ["leases"]
        resourceNames: ["kube-scheduler"]
  - level: None
    users: ["system:kube-proxy"]
    verbs: ["watch"]
    resources:
      - group: ""
        resources: ["endpoints", "services"]
  - level: None
    userGroups: ["system:unauthenticated"]
    nonResourceURLs: ["/healthz*", "/version"]
  - level: Request
    namespaces: ["kube-system"]
    resources:
      - group: ""
        resources: ["configmaps"]
  - level: Metadata
    omitManagedFields: false
    resources:
      - group: ""
        resources: ["secrets", "configmaps"]
  - level: Metadata
    omitStages: ["ResponseStarted"]
"#;

fn groups(names: &[&str]) -> Vec<String> {
    names.iter().map(|name| (*name).to_owned()).collect()
}

/// A resource request by `alice` (group `system:authenticated`).
fn resource<'a>(
    verb: &'a str,
    api_group: &'a str,
    resource: &'a str,
    subresource: &'a str,
    namespace: &'a str,
    name: &'a str,
    user_groups: &'a [String],
) -> RequestAttributes<'a> {
    RequestAttributes {
        user: Some("alice"),
        groups: user_groups,
        verb,
        resource_request: true,
        api_group,
        api_version: "v1",
        resource,
        subresource,
        namespace,
        name,
        path: "/apis/…",
    }
}

fn non_resource<'a>(
    verb: &'a str,
    path: &'a str,
    user_groups: &'a [String],
) -> RequestAttributes<'a> {
    RequestAttributes {
        user: Some("alice"),
        groups: user_groups,
        verb,
        path,
        ..RequestAttributes::default()
    }
}

fn level(policy: &Policy, request: RequestAttributes<'_>) -> Level {
    policy.evaluate(&request).level
}

#[test]
fn example_policy_levels() {
    let policy = Policy::from_yaml_str(EXAMPLE).expect("valid policy");
    let authn = groups(&["system:authenticated"]);
    let anon = groups(&["system:unauthenticated"]);
    let deployments = resource(
        "update",
        "apps",
        "deployments",
        "",
        "default",
        "web",
        &authn,
    );
    assert_eq!(level(&policy, deployments), Level::RequestResponse);
    let scale = resource(
        "update",
        "apps",
        "deployments",
        "scale",
        "default",
        "web",
        &authn,
    );
    assert_eq!(level(&policy, scale), Level::Metadata);
    let lease = resource(
        "update",
        "coordination.k8s.io",
        "leases",
        "",
        "kube-system",
        "kube-scheduler",
        &authn,
    );
    assert_eq!(level(&policy, lease), Level::None);
    let other_lease = resource(
        "update",
        "coordination.k8s.io",
        "leases",
        "",
        "kube-system",
        "other",
        &authn,
    );
    assert_eq!(level(&policy, other_lease), Level::Metadata);
    let system_cm = resource("get", "", "configmaps", "", "kube-system", "x", &authn);
    assert_eq!(level(&policy, system_cm), Level::Request);
    let default_cm = resource("get", "", "configmaps", "", "default", "x", &authn);
    assert_eq!(level(&policy, default_cm), Level::Metadata);
    assert_eq!(
        level(&policy, non_resource("get", "/healthz/etcd", &anon)),
        Level::None
    );
    assert_eq!(
        level(&policy, non_resource("get", "/healthz", &authn)),
        Level::Metadata
    );
    assert_eq!(
        level(&policy, non_resource("get", "/version", &anon)),
        Level::None
    );
    assert_eq!(
        level(&policy, non_resource("get", "/versions", &anon)),
        Level::Metadata
    );
}

#[test]
fn first_matching_rule_wins() {
    let policy = Policy::new(vec![
        PolicyRule {
            verbs: groups(&["get"]),
            ..PolicyRule::new(Level::RequestResponse)
        },
        PolicyRule::new(Level::None),
        PolicyRule {
            verbs: groups(&["list"]),
            ..PolicyRule::new(Level::Request)
        },
    ]);
    let none: [String; 0] = [];
    assert_eq!(
        level(&policy, resource("get", "", "pods", "", "a", "p", &none)),
        Level::RequestResponse
    );
    // The catch-all second rule shadows the third.
    assert_eq!(
        level(&policy, resource("list", "", "pods", "", "a", "", &none)),
        Level::None
    );
}

#[test]
fn no_matching_rule_is_level_none_with_the_policy_defaults() {
    let mut policy = Policy::new(vec![PolicyRule {
        verbs: groups(&["delete"]),
        ..PolicyRule::new(Level::Metadata)
    }]);
    policy.omit_stages = vec![Stage::Panic];
    policy.omit_managed_fields = true;
    let none: [String; 0] = [];
    let config = policy.evaluate(&resource("get", "", "pods", "", "a", "p", &none));
    assert_eq!(
        config,
        RequestAuditConfig {
            level: Level::None,
            omit_stages: StageSet::EMPTY.with(Stage::Panic),
            omit_managed_fields: true,
        }
    );
}

/// The level of a one-rule policy (`Metadata`, else `None`) for core/apps requests.
fn matches_resources(
    specs: &[&str],
    api_group: &str,
    resource_name: &str,
    subresource: &str,
) -> bool {
    let policy = Policy::new(vec![PolicyRule {
        resources: vec![GroupResources {
            group: "apps".to_owned(),
            resources: groups(specs),
            resource_names: Vec::new(),
        }],
        ..PolicyRule::new(Level::Metadata)
    }]);
    let none: [String; 0] = [];
    let request = resource(
        "get",
        api_group,
        resource_name,
        subresource,
        "ns",
        "x",
        &none,
    );
    level(&policy, request) == Level::Metadata
}

#[test]
fn resource_and_subresource_matching() {
    // A plain resource matches only itself, not its subresources.
    assert!(matches_resources(
        &["deployments"],
        "apps",
        "deployments",
        ""
    ));
    assert!(!matches_resources(
        &["deployments"],
        "apps",
        "deployments",
        "scale"
    ));
    // resource/subresource matches only that subresource.
    assert!(matches_resources(
        &["deployments/scale"],
        "apps",
        "deployments",
        "scale"
    ));
    assert!(!matches_resources(
        &["deployments/scale"],
        "apps",
        "deployments",
        ""
    ));
    assert!(!matches_resources(
        &["deployments/scale"],
        "apps",
        "deployments",
        "status"
    ));
    // resource/* matches the resource and all its subresources.
    assert!(matches_resources(
        &["deployments/*"],
        "apps",
        "deployments",
        ""
    ));
    assert!(matches_resources(
        &["deployments/*"],
        "apps",
        "deployments",
        "status"
    ));
    assert!(!matches_resources(
        &["deployments/*"],
        "apps",
        "replicasets",
        ""
    ));
    // */subresource matches that subresource of anything, never a main resource.
    assert!(matches_resources(
        &["*/scale"],
        "apps",
        "replicasets",
        "scale"
    ));
    assert!(!matches_resources(&["*/scale"], "apps", "replicasets", ""));
    assert!(!matches_resources(
        &["*/scale"],
        "apps",
        "replicasets",
        "status"
    ));
    // * matches everything of the group, subresources included; never another group.
    assert!(matches_resources(&["*"], "apps", "statefulsets", "status"));
    assert!(!matches_resources(&["*"], "", "pods", ""));
    // An empty list matches every resource of the group.
    assert!(matches_resources(&[], "apps", "daemonsets", "status"));
    assert!(!matches_resources(&[], "batch", "jobs", ""));
}

#[test]
fn resource_names_restrict_to_those_objects() {
    let policy = Policy::new(vec![PolicyRule {
        resources: vec![GroupResources {
            group: String::new(),
            resources: groups(&["configmaps"]),
            resource_names: groups(&["cluster-info"]),
        }],
        ..PolicyRule::new(Level::Request)
    }]);
    let none: [String; 0] = [];
    assert_eq!(
        level(
            &policy,
            resource(
                "get",
                "",
                "configmaps",
                "",
                "kube-public",
                "cluster-info",
                &none
            )
        ),
        Level::Request
    );
    assert_eq!(
        level(
            &policy,
            resource("get", "", "configmaps", "", "kube-public", "other", &none)
        ),
        Level::None
    );
    // A list has no name.
    assert_eq!(
        level(
            &policy,
            resource("list", "", "configmaps", "", "kube-public", "", &none)
        ),
        Level::None
    );
}

#[test]
fn namespaces_match_resource_requests_and_empty_is_cluster_scoped() {
    let policy = Policy::new(vec![PolicyRule {
        namespaces: groups(&["", "prod"]),
        ..PolicyRule::new(Level::Metadata)
    }]);
    let none: [String; 0] = [];
    assert_eq!(
        level(&policy, resource("get", "", "pods", "", "prod", "p", &none)),
        Level::Metadata
    );
    assert_eq!(
        level(&policy, resource("get", "", "nodes", "", "", "n1", &none)),
        Level::Metadata
    );
    assert_eq!(
        level(&policy, resource("get", "", "pods", "", "dev", "p", &none)),
        Level::None
    );
    // Not a resource request: a namespaces rule never matches it.
    assert_eq!(
        level(&policy, non_resource("get", "/healthz", &none)),
        Level::None
    );
}

#[test]
fn non_resource_urls_match_paths_and_only_non_resource_requests() {
    let policy = Policy::new(vec![PolicyRule {
        non_resource_urls: groups(&["/metrics", "/logs/*", "/apis*"]),
        ..PolicyRule::new(Level::Request)
    }]);
    let none: [String; 0] = [];
    let at = |path| level(&policy, non_resource("get", path, &none));
    assert_eq!(at("/metrics"), Level::Request);
    assert_eq!(at("/metrics/extra"), Level::None);
    assert_eq!(at("/logs/kubelet.log"), Level::Request);
    assert_eq!(at("/logs"), Level::None);
    assert_eq!(at("/apis"), Level::Request);
    assert_eq!(at("/apis/apps/v1"), Level::Request);
    assert_eq!(at("/api"), Level::None);
    // A resource request under /apis is not matched by nonResourceURLs.
    let mut request = resource("get", "apps", "deployments", "", "a", "d", &none);
    request.path = "/apis/apps/v1/namespaces/a/deployments/d";
    assert_eq!(level(&policy, request), Level::None);

    let everything = Policy::new(vec![PolicyRule {
        non_resource_urls: groups(&["*"]),
        ..PolicyRule::new(Level::Metadata)
    }]);
    assert_eq!(
        level(&everything, non_resource("post", "/anything", &none)),
        Level::Metadata
    );
}

#[test]
fn users_and_groups_never_match_unauthenticated_requests() {
    let policy = Policy::new(vec![
        PolicyRule {
            users: groups(&["alice"]),
            ..PolicyRule::new(Level::RequestResponse)
        },
        PolicyRule {
            user_groups: groups(&["admins"]),
            ..PolicyRule::new(Level::Request)
        },
    ]);
    let admins = groups(&["admins"]);
    let none: [String; 0] = [];
    assert_eq!(
        level(&policy, non_resource("get", "/", &none)),
        Level::RequestResponse
    );
    let mut bob = non_resource("get", "/", &admins);
    bob.user = Some("bob");
    assert_eq!(level(&policy, bob), Level::Request);
    bob.user = None;
    assert_eq!(level(&policy, bob), Level::None);
}

#[test]
fn omit_stages_union_and_managed_fields_override() {
    let policy = Policy::from_yaml_str(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\n\
         omitManagedFields: true\nrules:\n\
         - level: Request\n  verbs: [create]\n  omitStages: [ResponseStarted]\n  omitManagedFields: false\n\
         - level: Metadata\n",
    )
    .expect("valid policy");
    let none: [String; 0] = [];
    let create = policy.evaluate(&resource("create", "", "pods", "", "a", "", &none));
    assert_eq!(create.level, Level::Request);
    assert!(create.omit_stages.contains(Stage::RequestReceived));
    assert!(create.omit_stages.contains(Stage::ResponseStarted));
    assert!(!create.omit_stages.contains(Stage::ResponseComplete));
    assert!(!create.omit_managed_fields);
    let get = policy.evaluate(&resource("get", "", "pods", "", "a", "p", &none));
    assert_eq!(
        get.omit_stages,
        StageSet::EMPTY.with(Stage::RequestReceived)
    );
    assert!(get.omit_managed_fields);
}

#[test]
fn default_metadata_policy_skips_event_reads_only() {
    let policy = Policy::default_metadata();
    policy.validate().expect("the default policy is valid");
    let none: [String; 0] = [];
    for (group, verb) in [("", "get"), ("", "list"), ("events.k8s.io", "watch")] {
        let config = policy.evaluate(&resource(verb, group, "events", "", "a", "", &none));
        assert_eq!(config.level, Level::None, "{verb} {group}/events");
    }
    let create = policy.evaluate(&resource("create", "", "events", "", "a", "", &none));
    assert_eq!(create.level, Level::Metadata);
    let pods = policy.evaluate(&resource("list", "", "pods", "", "a", "", &none));
    assert_eq!(pods.level, Level::Metadata);
    assert_eq!(
        pods.omit_stages,
        StageSet::EMPTY.with(Stage::RequestReceived)
    );
    assert_eq!(
        level(&policy, non_resource("get", "/healthz", &none)),
        Level::Metadata
    );
}
