//! The default RBAC policy ([`bootstrap.yaml`](bootstrap.yaml), as data): the ClusterRoles
//! and ClusterRoleBindings kube-apiserver creates (`cluster-admin`, `admin`, `edit`, `view`
//! and their aggregation sources, `system:discovery`, `system:basic-user`,
//! `system:public-info-viewer`), reconciled at every start as upstream's RBAC post-start hook:
//!
//! - a missing object is created;
//! - an object annotated `rbac.authorization.kubernetes.io/autoupdate: "true"` gets back
//!   what is missing (rules, aggregation selectors, subjects, labels); what users added
//!   stays;
//! - an object whose annotation is anything else is left as the user made it.
//!
//! Also here: [`aggregate`], the rules of a ClusterRole with an `aggregationRule`, which the
//! aggregation controller writes.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::RBAC_GROUP;
use super::rules::{PolicyRule, parse_rules, uncovered};
use crate::object;
use crate::registry::{Registry, Subresource, WriteOptions};
use crate::selectors::{LabelSelector, selector_string};
use crate::status::{ApiError, ApiResult};

/// Upstream's label on every bootstrap object.
pub const BOOTSTRAP_LABEL: (&str, &str) = ("kubernetes.io/bootstrapping", "rbac-defaults");
/// With "true", a start restores what the bootstrap policy says and the object lacks.
pub const AUTOUPDATE_ANNOTATION: &str = "rbac.authorization.kubernetes.io/autoupdate";
/// The field manager of the server's own RBAC writes.
const MANAGER: &str = "finale-rbac-bootstrap";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Policy {
    cluster_roles: Vec<BootstrapRole>,
    cluster_role_bindings: Vec<BootstrapBinding>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct BootstrapRole {
    name: String,
    #[serde(default)]
    labels: Map<String, Value>,
    #[serde(default)]
    rules: Vec<PolicyRule>,
    /// The label whose "true" value aggregates a ClusterRole into this one.
    aggregate_from: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BootstrapBinding {
    name: String,
    groups: Vec<String>,
}

fn policy() -> ApiResult<Policy> {
    serde_saphyr::from_str(include_str!("bootstrap.yaml"))
        .map_err(|e| ApiError::internal(format!("the built-in RBAC policy does not parse: {e}")))
}

fn metadata(name: &str, labels: &Map<String, Value>) -> Value {
    let mut labels = labels.clone();
    labels.insert(BOOTSTRAP_LABEL.0.into(), json!(BOOTSTRAP_LABEL.1));
    json!({
        "name": name,
        "labels": labels,
        "annotations": {AUTOUPDATE_ANNOTATION: "true"},
    })
}

/// The bootstrap ClusterRoles, as objects.
pub fn cluster_roles() -> ApiResult<Vec<Value>> {
    Ok(policy()?
        .cluster_roles
        .into_iter()
        .map(|role| {
            let mut object = json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": metadata(&role.name, &role.labels),
                "rules": role.rules,
            });
            if let Some(label) = role.aggregate_from {
                object["aggregationRule"] =
                    json!({"clusterRoleSelectors": [{"matchLabels": {label: "true"}}]});
            }
            object
        })
        .collect())
}

/// The bootstrap ClusterRoleBindings, as objects: each binds the ClusterRole of its name.
pub fn cluster_role_bindings() -> ApiResult<Vec<Value>> {
    Ok(policy()?
        .cluster_role_bindings
        .into_iter()
        .map(|binding| {
            let subjects: Vec<Value> = binding
                .groups
                .iter()
                .map(|g| json!({"apiGroup": RBAC_GROUP, "kind": "Group", "name": g}))
                .collect();
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": metadata(&binding.name, &Map::new()),
                "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": binding.name},
                "subjects": subjects,
            })
        })
        .collect())
}

/// What `existing` lacks of `wanted`, merged in: the reconciled object, or None when
/// nothing is missing or the object is not to be updated automatically.
fn reconciled(existing: &Value, wanted: &Value) -> Option<Value> {
    let autoupdate = object::metadata(existing)
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.get(AUTOUPDATE_ANNOTATION))
        .and_then(Value::as_str);
    if autoupdate != Some("true") {
        return None;
    }
    let mut merged = existing.clone();
    let mut changed = false;
    let wanted_labels = object::labels(wanted).cloned().unwrap_or_default();
    let labels = object::metadata_mut(&mut merged)
        .entry("labels")
        .or_insert_with(|| json!({}));
    if let Some(labels) = labels.as_object_mut() {
        for (key, value) in wanted_labels {
            if labels.get(&key) != Some(&value) {
                labels.insert(key, value);
                changed = true;
            }
        }
    }
    if let Some(subjects) = wanted.get("subjects").and_then(Value::as_array) {
        changed |= append_missing(&mut merged["subjects"], subjects);
    }
    if let Some(selectors) = wanted
        .pointer("/aggregationRule/clusterRoleSelectors")
        .and_then(Value::as_array)
    {
        if !merged["aggregationRule"].is_object() {
            merged["aggregationRule"] = json!({});
        }
        changed |= append_missing(
            &mut merged["aggregationRule"]["clusterRoleSelectors"],
            selectors,
        );
    } else if wanted.get("rules").is_some() {
        let mut rules = parse_rules(existing).unwrap_or_default();
        let held = rules.len();
        for rule in parse_rules(wanted).unwrap_or_default() {
            if !uncovered(&rules, std::slice::from_ref(&rule)).is_empty() {
                rules.push(rule);
            }
        }
        if rules.len() > held {
            merged["rules"] = json!(rules);
            changed = true;
        }
    }
    changed.then_some(merged)
}

/// Makes `list` an array if it is not one, and appends each of `wanted` it lacks; true when
/// any was appended.
fn append_missing(list: &mut Value, wanted: &[Value]) -> bool {
    if !list.is_array() {
        *list = json!([]);
    }
    let Value::Array(items) = list else {
        return false;
    };
    let before = items.len();
    for item in wanted {
        if !items.contains(item) {
            items.push(item.clone());
        }
    }
    items.len() > before
}

/// Creates or completes the bootstrap roles and bindings. Several replicas may run this at
/// once: a create that finds the object made by another is fine, and an update that meets
/// a conflict reads again.
pub async fn reconcile(registry: &Registry) -> ApiResult<()> {
    let options = WriteOptions {
        field_manager: Some(MANAGER.to_string()),
        ..WriteOptions::default()
    };
    for (plural, objects) in [
        ("clusterroles", cluster_roles()?),
        ("clusterrolebindings", cluster_role_bindings()?),
    ] {
        let resource = registry
            .catalog()
            .lookup(RBAC_GROUP, "v1", plural)
            .ok_or_else(|| ApiError::internal(format!("{plural} are not registered")))?;
        for wanted in objects {
            let name = object::name(&wanted).to_string();
            for _attempt in 0..5 {
                let existing = match registry.get(&resource, None, &name).await {
                    Ok(existing) => existing,
                    Err(error) if error.code == 404 => {
                        match registry
                            .create(&resource, None, wanted.clone(), &options)
                            .await
                        {
                            Ok(_) => {
                                tracing::info!(kind = plural, %name, "created a bootstrap RBAC object");
                                break;
                            }
                            Err(error) if error.reason == "AlreadyExists" => continue,
                            Err(error) => return Err(error),
                        }
                    }
                    Err(error) => return Err(error),
                };
                let Some(merged) = reconciled(&existing, &wanted) else {
                    break;
                };
                match registry
                    .update(&resource, None, &name, merged, Subresource::Main, &options)
                    .await
                {
                    Ok(_) => {
                        tracing::info!(kind = plural, %name, "restored a bootstrap RBAC object");
                        break;
                    }
                    Err(error) if error.code == 409 => continue,
                    Err(error) => return Err(error),
                }
            }
        }
    }
    // Aggregate now, so that `admin`, `edit` and `view` grant from the first request (the
    // controller keeps them so afterwards). Chains (view into edit into admin) settle in as
    // many passes as they are long.
    for _pass in 0..8 {
        if aggregate_all(registry, MANAGER).await? == 0 {
            break;
        }
    }
    Ok(())
}

/// The ClusterRoles resource type.
pub fn cluster_role_type(
    registry: &Registry,
) -> ApiResult<std::sync::Arc<crate::resources::ResourceType>> {
    registry
        .catalog()
        .lookup(RBAC_GROUP, "v1", "clusterroles")
        .ok_or_else(|| ApiError::internal("clusterroles are not registered"))
}

/// One aggregation pass: writes every aggregated ClusterRole whose rules differ from what its
/// selectors pick. Returns how many it wrote (0 once settled).
pub async fn aggregate_all(registry: &Registry, manager: &str) -> ApiResult<usize> {
    let resource = cluster_role_type(registry)?;
    let list = registry
        .list(&resource, None, &crate::registry::ListOptions::default())
        .await?;
    let roles: Vec<Value> = list
        .get("items")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let options = WriteOptions {
        field_manager: Some(manager.to_string()),
        ..WriteOptions::default()
    };
    let mut written = 0;
    for role in &roles {
        let Some(rules) = aggregate(role, &roles) else {
            continue;
        };
        if parse_rules(role).unwrap_or_default() == rules {
            continue;
        }
        let mut updated = role.clone();
        updated["rules"] = json!(rules);
        match registry
            .update(
                &resource,
                None,
                object::name(role),
                updated,
                Subresource::Main,
                &options,
            )
            .await
        {
            Ok(_) => written += 1,
            // Changed or deleted under us: the change's own event starts another pass.
            Err(error) if error.code == 409 || error.code == 404 => written += 1,
            Err(error) => return Err(error),
        }
    }
    Ok(written)
}

/// The rules an aggregated ClusterRole should hold: those of every other ClusterRole that one
/// of its `clusterRoleSelectors` selects, in name order, each rule once. None for a role
/// without an `aggregationRule`.
pub fn aggregate(role: &Value, cluster_roles: &[Value]) -> Option<Vec<PolicyRule>> {
    let selectors: Vec<LabelSelector> = role
        .pointer("/aggregationRule/clusterRoleSelectors")?
        .as_array()?
        .iter()
        .filter_map(|s| LabelSelector::parse(&selector_string(s)).ok())
        .collect();
    let mut sources: Vec<&Value> = cluster_roles
        .iter()
        .filter(|other| object::name(other) != object::name(role))
        .filter(|other| {
            selectors
                .iter()
                .any(|s| !s.is_empty() && s.matches(object::labels(other)))
        })
        .collect();
    sources.sort_by(|a, b| object::name(a).cmp(object::name(b)));
    let mut rules: Vec<PolicyRule> = Vec::new();
    for source in sources {
        for rule in parse_rules(source).unwrap_or_default() {
            if !rules.contains(&rule) {
                rules.push(rule);
            }
        }
    }
    Some(rules)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_parses_and_aggregates_view_into_edit_into_admin() {
        let mut roles = cluster_roles().unwrap();
        assert!(cluster_role_bindings().unwrap().len() >= 4);
        // Run aggregation to a fixed point, as the controller does one write at a time.
        for _ in 0..3 {
            let snapshot = roles.clone();
            for role in roles.iter_mut() {
                if let Some(rules) = aggregate(role, &snapshot) {
                    role["rules"] = json!(rules);
                }
            }
        }
        let rules_of = |name: &str| {
            parse_rules(roles.iter().find(|r| object::name(r) == name).unwrap()).unwrap()
        };
        let grants = |name: &str, verb: &str, resource: &str| {
            let request = super::super::Attributes::resource(
                Default::default(),
                verb,
                "",
                resource,
                "",
                "ns",
                "",
            );
            rules_of(name).iter().any(|r| r.allows(&request))
        };
        assert!(grants("view", "list", "configmaps"));
        assert!(!grants("view", "list", "secrets"));
        assert!(grants("edit", "list", "configmaps") && grants("edit", "create", "secrets"));
        assert!(!grants("edit", "create", "roles"));
        assert!(grants("admin", "get", "secrets"));
        assert!(uncovered(&rules_of("admin"), &rules_of("edit")).is_empty());
    }

    #[test]
    fn reconciling_adds_what_is_missing_and_keeps_what_users_added() {
        let wanted = cluster_roles()
            .unwrap()
            .into_iter()
            .find(|r| object::name(r) == "system:basic-user")
            .unwrap();
        let mut existing = wanted.clone();
        existing["rules"] = json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]);
        let merged = reconciled(&existing, &wanted).expect("rules were missing");
        let rules = parse_rules(&merged).unwrap();
        assert_eq!(rules.len(), 3, "{rules:?}");
        assert!(
            reconciled(&merged, &wanted).is_none(),
            "nothing left to add"
        );
        existing["metadata"]["annotations"][AUTOUPDATE_ANNOTATION] = json!("false");
        assert!(
            reconciled(&existing, &wanted).is_none(),
            "opted out of updates"
        );
    }
}
