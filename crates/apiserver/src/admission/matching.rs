//! Which webhooks a request calls: rules (operation, group, version, resource and
//! subresource, scope), `matchPolicy`, and the object selector. The namespace selector needs
//! the namespace's labels, which the dispatcher reads ([`super::Webhooks`]).
//!
//! Upstream: `admission/plugin/webhook/predicates/{rules,object,namespace}` and
//! `generic.Webhook.ShouldCallHook`.

use std::sync::Arc;

use serde_json::Value;

use super::config::{Hook, Rule};
use super::{Attributes, Operation};
use crate::object;
use crate::resources::{Catalog, ResourceType};
use crate::selectors::LabelSelector;

/// The kinds no webhook is ever called for, so that a broken webhook cannot lock its own
/// configuration away (upstream's `IsExemptAdmissionConfigurationResource`).
pub fn is_exempt(resource: &ResourceType) -> bool {
    resource.group == "admissionregistration.k8s.io"
        && matches!(
            resource.kind.as_str(),
            "ValidatingWebhookConfiguration"
                | "MutatingWebhookConfiguration"
                | "ValidatingAdmissionPolicy"
                | "ValidatingAdmissionPolicyBinding"
                | "MutatingAdmissionPolicy"
                | "MutatingAdmissionPolicyBinding"
        )
}

fn exact_or_wildcard(items: &[String], requested: &str) -> bool {
    items.iter().any(|item| item == "*" || item == requested)
}

/// One rule against the request, as if it were made to `resource` (the request's own
/// resource, or an equivalent one under `matchPolicy: Equivalent`).
pub(crate) fn rule_matches(
    rule: &Rule,
    attributes: &Attributes<'_>,
    resource: &ResourceType,
) -> bool {
    let is_namespace = resource.is_namespace();
    let scope = match rule.scope.as_str() {
        "Namespaced" => !is_namespace && attributes.namespace.is_some_and(|n| !n.is_empty()),
        "Cluster" => is_namespace || attributes.namespace.is_none_or(str::is_empty),
        _ => true,
    };
    let operation = rule
        .operations
        .iter()
        .any(|op| op == "*" || op == attributes.operation.as_str());
    let subresource = attributes.subresource.unwrap_or_default();
    let resources = rule.resources.iter().any(|(res, sub)| {
        (res == "*" || *res == resource.plural)
            && match sub {
                Some(sub) => sub == "*" || sub == subresource,
                None => subresource.is_empty(),
            }
    });
    scope
        && operation
        && exact_or_wildcard(&rule.groups, &resource.group)
        && exact_or_wildcard(&rule.versions, &resource.version)
        && resources
}

/// The resource a matching hook is called as.
#[derive(Clone, Debug)]
pub enum Invocation {
    /// The request's own resource.
    Own,
    /// An equivalent resource (`matchPolicy: Equivalent`): the objects are converted to it.
    Equivalent(Arc<ResourceType>),
}

/// The resource a hook is called as: the request's own when a rule names it, else (with
/// `matchPolicy: Equivalent`) the first served resource of the same stored objects that a
/// rule names, earlier rules first. None: the hook does not apply.
pub fn invocation_resource(
    hook: &Hook,
    attributes: &Attributes<'_>,
    catalog: &Catalog,
) -> Option<Invocation> {
    let own = attributes.resource;
    if hook.rules.iter().any(|r| rule_matches(r, attributes, own)) {
        return Some(Invocation::Own);
    }
    if hook.exact {
        return None;
    }
    let equivalents = equivalent_resources(own, catalog);
    for rule in &hook.rules {
        for equivalent in &equivalents {
            if rule_matches(rule, attributes, equivalent) {
                return Some(Invocation::Equivalent(Arc::clone(equivalent)));
            }
        }
    }
    None
}

/// Other served resources whose objects are the same stored objects: the other versions of a
/// custom resource, and Finale's storage views (`events.k8s.io/v1` Events and core Events,
/// `autoscaling/v1` and `autoscaling/v2` HPAs).
pub(crate) fn equivalent_resources(
    resource: &ResourceType,
    catalog: &Catalog,
) -> Vec<Arc<ResourceType>> {
    let prefix = resource.key_prefix();
    let mut equivalents: Vec<Arc<ResourceType>> = catalog
        .all()
        .into_iter()
        .filter(|other| {
            other.key_prefix() == prefix
                && (other.group != resource.group
                    || other.version != resource.version
                    || other.plural != resource.plural)
        })
        .collect();
    // Deterministic: upstream's mapper lists by group and version.
    equivalents.sort_by(|a, b| (&a.group, &a.version).cmp(&(&b.group, &b.version)));
    equivalents
}

/// An object as `to` serves it, from its form at `from` (both views of one store).
pub fn convert(from: &ResourceType, to: &ResourceType, object: &Value) -> Value {
    if from.group == to.group && from.version == to.version && from.plural == to.plural {
        return object.clone();
    }
    let mut converted = to.from_storage(from.to_storage(object.clone()));
    if let Some(map) = converted.as_object_mut() {
        map.insert("apiVersion".into(), Value::from(to.api_version()));
    }
    converted
}

/// `objectSelector`: matches when either the new or the old object's labels match (an absent
/// object never does); an empty selector matches everything.
pub fn object_selector_matches(hook: &Hook, attributes: &Attributes<'_>) -> Result<bool, String> {
    selector_matches_objects(&hook.object_selector, attributes)
}

/// [`object_selector_matches`] for any parsed selector (policies have them too).
pub fn selector_matches_objects(
    selector: &Result<LabelSelector, String>,
    attributes: &Attributes<'_>,
) -> Result<bool, String> {
    let selector = selector.as_ref().map_err(Clone::clone)?;
    if selector.is_empty() {
        return Ok(true);
    }
    let matches = |o: Option<&Value>| o.is_some_and(|o| selector.matches(object::labels(o)));
    Ok(matches(attributes.object) || matches(attributes.old_object))
}

/// Whether the hook's namespace selector needs the namespace's labels for this request:
/// cluster-scoped requests (but Namespaces themselves) and empty selectors always match.
pub fn needs_namespace_labels(hook: &Hook, attributes: &Attributes<'_>) -> bool {
    selector_needs_namespace_labels(&hook.namespace_selector, attributes)
}

/// [`needs_namespace_labels`] for any parsed namespace selector.
pub fn selector_needs_namespace_labels(
    selector: &Result<LabelSelector, String>,
    attributes: &Attributes<'_>,
) -> bool {
    let namespaced = attributes.namespace.is_some_and(|n| !n.is_empty());
    (namespaced || attributes.resource.is_namespace())
        && selector.as_ref().map_or(true, |s| !s.is_empty())
}

/// The labels a Namespace request is matched by: the object's own on CREATE and UPDATE of the
/// namespace itself, as upstream does; None when they must be read from the store.
pub fn own_namespace_labels(
    attributes: &Attributes<'_>,
) -> Option<Option<serde_json::Map<String, Value>>> {
    if attributes.resource.is_namespace()
        && attributes.subresource.is_none()
        && matches!(attributes.operation, Operation::Create | Operation::Update)
    {
        return Some(attributes.object.and_then(object::labels).cloned());
    }
    None
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::admission::config::{Endpoint, HookType, SideEffects};

    fn hook(rules: Vec<Rule>) -> Hook {
        Hook {
            hook_type: HookType::Validating,
            configuration: "c".into(),
            index: 0,
            name: "h.example.com".into(),
            endpoint: Endpoint::Url("https://127.0.0.1/".into()),
            ca_bundle: Vec::new(),
            rules,
            exact: false,
            namespace_selector: Ok(LabelSelector::default()),
            object_selector: Ok(LabelSelector::default()),
            fail_open: false,
            timeout: Duration::from_secs(10),
            side_effects: SideEffects::None,
            speaks_v1: true,
            reinvoke_if_needed: false,
            match_conditions: None,
        }
    }

    fn rule(operations: &[&str], groups: &[&str], resources: &[&str], scope: &str) -> Rule {
        let owned = |items: &[&str]| items.iter().map(|s| s.to_string()).collect();
        Rule {
            operations: owned(operations),
            groups: owned(groups),
            versions: vec!["*".into()],
            resources: resources
                .iter()
                .map(|r| match r.split_once('/') {
                    Some((a, b)) => (a.to_string(), Some(b.to_string())),
                    None => (r.to_string(), None),
                })
                .collect(),
            scope: scope.into(),
        }
    }

    fn attributes<'a>(
        resource: &'a ResourceType,
        operation: Operation,
        subresource: Option<&'a str>,
        namespace: Option<&'a str>,
    ) -> Attributes<'a> {
        Attributes {
            resource,
            subresource,
            operation,
            namespace,
            name: "x",
            object: None,
            old_object: None,
            dry_run: false,
            options: &Value::Null,
            user: &Value::Null,
            kind_override: None,
        }
    }

    #[test]
    fn rules_match_operation_resource_subresource_and_scope() {
        let catalog = Catalog::with_builtins();
        let pods = catalog.lookup("", "v1", "pods").expect("pods");
        let namespaces = catalog.lookup("", "v1", "namespaces").expect("namespaces");
        let create = attributes(&pods, Operation::Create, None, Some("ns"));
        let status = attributes(&pods, Operation::Update, Some("status"), Some("ns"));
        let cases = [
            (rule(&["CREATE"], &[""], &["pods"], "*"), &create, true),
            (rule(&["UPDATE"], &[""], &["pods"], "*"), &create, false),
            (rule(&["*"], &["*"], &["*"], "*"), &create, true),
            (rule(&["*"], &["apps"], &["pods"], "*"), &create, false),
            (rule(&["*"], &[""], &["pods"], "Cluster"), &create, false),
            (rule(&["*"], &[""], &["pods"], "Namespaced"), &create, true),
            (rule(&["*"], &[""], &["pods"], "*"), &status, false),
            (rule(&["*"], &[""], &["pods/status"], "*"), &status, true),
            (rule(&["*"], &[""], &["*/*"], "*"), &status, true),
            // `*/*` names every subresource and, as upstream's `*` subresource does, the
            // main resource too.
            (rule(&["*"], &[""], &["*/*"], "*"), &create, true),
            (rule(&["*"], &[""], &["*"], "*"), &status, false),
        ];
        for (i, (rule, attributes, expected)) in cases.iter().enumerate() {
            let found = invocation_resource(&hook(vec![rule.clone()]), attributes, &catalog);
            assert_eq!(found.is_some(), *expected, "case {i}: {rule:?}");
        }
        let namespace = attributes(&namespaces, Operation::Delete, None, Some("ns"));
        let cluster = hook(vec![rule(&["*"], &[""], &["namespaces"], "Cluster")]);
        assert!(invocation_resource(&cluster, &namespace, &catalog).is_some());
    }

    #[test]
    fn equivalent_match_policy_finds_the_other_view_of_events() {
        let catalog = Catalog::with_builtins();
        let core = catalog.lookup("", "v1", "events").expect("core events");
        let attributes = attributes(&core, Operation::Create, None, Some("ns"));
        let mut events_k8s = hook(vec![rule(
            &["CREATE"],
            &["events.k8s.io"],
            &["events"],
            "*",
        )]);
        let found = invocation_resource(&events_k8s, &attributes, &catalog).expect("equivalent");
        let Invocation::Equivalent(found) = found else {
            panic!("the request's own resource does not match the rule")
        };
        assert_eq!(found.group, "events.k8s.io");
        events_k8s.exact = true;
        assert!(invocation_resource(&events_k8s, &attributes, &catalog).is_none());
    }

    #[test]
    fn object_selector_matches_old_or_new_labels() {
        let catalog = Catalog::with_builtins();
        let pods = catalog.lookup("", "v1", "pods").expect("pods");
        let mut h = hook(Vec::new());
        h.object_selector = Ok(LabelSelector::parse("team=a").expect("selector"));
        let new = json!({"metadata": {"labels": {"team": "b"}}});
        let old = json!({"metadata": {"labels": {"team": "a"}}});
        let mut a = attributes(&pods, Operation::Update, None, Some("ns"));
        a.object = Some(&new);
        assert_eq!(object_selector_matches(&h, &a), Ok(false));
        a.old_object = Some(&old);
        assert_eq!(object_selector_matches(&h, &a), Ok(true));
    }
}
