//! Least-privilege RBAC for operators: each operator's ServiceAccount, ClusterRole and
//! bindings, built from its rules (data each operator crate declares) plus what the toolkit
//! itself needs (its CRDs, Events, FinalizerClaims and the leader Lease).
//!
//! `finale operator NAME --print-rbac` prints [`manifests`] as YAML for a real cluster;
//! `finale server --with-operators` applies the same objects and runs each operator with a
//! token of its own ServiceAccount.
//!
//! # Guarantees
//! - The leader Lease is granted by a Role in the Lease's namespace only, and `get`/`update`
//!   name the operator's own Lease. Its CRDs likewise: `get`/`patch`/`update` name them.
//!
//! # Caveats
//! - `create` cannot be limited by name in RBAC (the name is not known when it is checked), so
//!   an operator that may create a kind may create any object of it.

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

/// One rule of an operator's ClusterRole, as a constant: API groups, resources (with
/// `/subresource`), verbs, and the resource names it is limited to (empty: all).
#[derive(Clone, Copy, Debug)]
pub struct Rule {
    pub groups: &'static [&'static str],
    pub resources: &'static [&'static str],
    pub verbs: &'static [&'static str],
    pub names: &'static [&'static str],
}

impl Rule {
    fn policy_rule(&self) -> PolicyRule {
        self.for_names((!self.names.is_empty()).then(|| strings(self.names)))
    }

    /// The rule limited to `names`, known only at run time (its CRDs, its Lease).
    fn for_names(&self, names: Option<Vec<String>>) -> PolicyRule {
        PolicyRule {
            api_groups: Some(strings(self.groups)),
            resources: Some(strings(self.resources)),
            verbs: strings(self.verbs),
            resource_names: names,
            non_resource_urls: None,
        }
    }
}

/// What one operator needs from the API.
#[derive(Clone, Debug)]
pub struct Permissions {
    /// The operator's short name (`database`): its objects are `finale-<name>-operator`.
    pub name: &'static str,
    /// The CRDs it installs at start (`databases.finale.dev`).
    pub crds: Vec<String>,
    /// What its reconciler reads and writes, beyond what every operator needs.
    pub rules: &'static [Rule],
}

impl Permissions {
    /// `finale-<name>-operator`: its ServiceAccount, ClusterRole and leader Lease.
    pub fn object_name(&self) -> String {
        object_name(self.name)
    }
}

/// `finale-<name>-operator`.
pub fn object_name(operator: &str) -> String {
    format!("finale-{operator}-operator")
}

/// What every operator built on the toolkit needs, for `operator`.
fn toolkit_rules(operator: &Permissions) -> Vec<PolicyRule> {
    let crd_names = operator.crds.clone();
    vec![
        // install::install_crd: a server-side apply of its own CRDs, then a watch (by
        // `metadata.name`, which RBAC matches against resourceNames) until Established.
        Rule {
            groups: &["apiextensions.k8s.io"],
            resources: &["customresourcedefinitions"],
            verbs: &["get", "list", "watch", "patch", "update"],
            names: &[],
        }
        .for_names(Some(crd_names)),
        Rule {
            groups: &["apiextensions.k8s.io"],
            resources: &["customresourcedefinitions"],
            verbs: &["create"],
            names: &[],
        }
        .policy_rule(),
        // events::EventRecorder: Events beside the objects, their count bumped on repeats.
        Rule {
            groups: &[""],
            resources: &["events"],
            verbs: &["create", "patch"],
            names: &[],
        }
        .policy_rule(),
        // claims: its FinalizerClaims, written by apply and watched to keep them as written.
        Rule {
            groups: &["deletion.finale.dev"],
            resources: &["finalizerclaims"],
            verbs: &["get", "list", "watch", "create", "patch", "update"],
            names: &[],
        }
        .policy_rule(),
    ]
}

/// Where the objects go: the ServiceAccounts' namespace and the leader Leases' namespace.
#[derive(Clone, Debug)]
pub struct Placement {
    pub namespace: String,
    pub lease_namespace: String,
}

/// The objects that let `operators` run with least privilege as the ServiceAccount
/// `service_account` in `placement.namespace`: that Namespace, the ServiceAccount, and per
/// operator a ClusterRole with a ClusterRoleBinding, and a Role with a RoleBinding for its
/// Lease. In apply order.
pub fn manifests(
    service_account: &str,
    operators: &[Permissions],
    placement: &Placement,
) -> anyhow::Result<Vec<Value>> {
    let subject = Subject {
        kind: "ServiceAccount".into(),
        name: service_account.into(),
        namespace: Some(placement.namespace.clone()),
        api_group: None,
    };
    let mut objects = vec![
        typed(
            "v1",
            "Namespace",
            &Namespace {
                metadata: meta(&placement.namespace, None),
                ..Namespace::default()
            },
        )?,
        typed(
            "v1",
            "ServiceAccount",
            &ServiceAccount {
                metadata: meta(service_account, Some(&placement.namespace)),
                ..ServiceAccount::default()
            },
        )?,
    ];
    const RBAC: &str = "rbac.authorization.k8s.io/v1";
    for operator in operators {
        let name = operator.object_name();
        let mut rules = toolkit_rules(operator);
        rules.extend(operator.rules.iter().map(Rule::policy_rule));
        objects.push(typed(
            RBAC,
            "ClusterRole",
            &ClusterRole {
                metadata: meta(&name, None),
                rules: Some(rules),
                aggregation_rule: None,
            },
        )?);
        objects.push(typed(
            RBAC,
            "ClusterRoleBinding",
            &ClusterRoleBinding {
                metadata: meta(&name, None),
                role_ref: role_ref("ClusterRole", &name),
                subjects: Some(vec![subject.clone()]),
            },
        )?);
        let lease_role = format!("{name}-leader-election");
        objects.push(typed(
            RBAC,
            "Role",
            &Role {
                metadata: meta(&lease_role, Some(&placement.lease_namespace)),
                rules: Some(vec![
                    Rule {
                        groups: &["coordination.k8s.io"],
                        resources: &["leases"],
                        verbs: &["get", "update"],
                        names: &[],
                    }
                    .for_names(Some(vec![name.clone()])),
                    Rule {
                        groups: &["coordination.k8s.io"],
                        resources: &["leases"],
                        verbs: &["create"],
                        names: &[],
                    }
                    .policy_rule(),
                ]),
            },
        )?);
        objects.push(typed(
            RBAC,
            "RoleBinding",
            &RoleBinding {
                metadata: meta(&lease_role, Some(&placement.lease_namespace)),
                role_ref: role_ref("Role", &lease_role),
                subjects: Some(vec![subject.clone()]),
            },
        )?);
    }
    Ok(objects)
}

/// The label every object of [`manifests`] carries, so they can be found and removed together.
pub const PART_OF_LABEL: (&str, &str) = ("app.kubernetes.io/part-of", "finale-operators");

fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: namespace.map(str::to_string),
        labels: Some([(PART_OF_LABEL.0.to_string(), PART_OF_LABEL.1.to_string())].into()),
        ..ObjectMeta::default()
    }
}

fn role_ref(kind: &str, name: &str) -> RoleRef {
    RoleRef {
        api_group: "rbac.authorization.k8s.io".into(),
        kind: kind.into(),
        name: name.into(),
    }
}

/// `object` as JSON with its `apiVersion` and `kind` first, as `kubectl apply` wants them.
fn typed<T: serde::Serialize>(api_version: &str, kind: &str, object: &T) -> anyhow::Result<Value> {
    let mut fields = serde_json::Map::new();
    fields.insert("apiVersion".into(), api_version.into());
    fields.insert("kind".into(), kind.into());
    match serde_json::to_value(object)? {
        Value::Object(rest) => fields.extend(rest),
        other => anyhow::bail!("{kind} did not encode as an object: {other}"),
    }
    Ok(Value::Object(fields))
}

fn strings(values: &[&str]) -> Vec<String> {
    values.iter().map(|v| v.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: &[Rule] = &[Rule {
        groups: &["finale.dev"],
        resources: &["databases"],
        verbs: &["get", "list", "watch"],
        names: &[],
    }];

    #[test]
    fn the_lease_is_granted_by_name_in_its_namespace_only() {
        let operator = Permissions {
            name: "database",
            crds: vec!["databases.finale.dev".into()],
            rules: RULES,
        };
        let placement = Placement {
            namespace: "finale-system".into(),
            lease_namespace: "kube-system".into(),
        };
        let objects = manifests("finale-database-operator", &[operator], &placement).unwrap();
        let kinds: Vec<&str> = objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "Namespace",
                "ServiceAccount",
                "ClusterRole",
                "ClusterRoleBinding",
                "Role",
                "RoleBinding"
            ]
        );
        let role = &objects[4];
        assert_eq!(role["metadata"]["namespace"], "kube-system");
        assert_eq!(
            role["rules"][0]["resourceNames"],
            serde_json::json!(["finale-database-operator"])
        );
        let cluster_role = &objects[2];
        let rules = cluster_role["rules"].as_array().unwrap();
        assert!(
            rules
                .iter()
                .all(|r| r["resources"] != serde_json::json!(["leases"])),
            "no cluster-wide Lease access: {rules:?}"
        );
        assert_eq!(
            rules[0]["resourceNames"],
            serde_json::json!(["databases.finale.dev"])
        );
        assert_eq!(
            objects[3]["subjects"][0],
            serde_json::json!({"kind": "ServiceAccount", "name": "finale-database-operator", "namespace": "finale-system"})
        );
    }
}
