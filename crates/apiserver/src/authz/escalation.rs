//! Checks of a write's content made with the writer's own permissions, on the object as it
//! would be stored ([`WritePermissions`]):
//!
//! - **Privilege-escalation prevention** (upstream's RBAC `policybased` storage): a Role or
//!   ClusterRole may only grant what its writer holds in that scope, unless the writer may
//!   `escalate` it; a binding may only be made to a role whose rules the writer holds, unless
//!   the writer may `bind` it. An `aggregationRule` needs full authority.
//! - **O5** (`OwnerReferencesPermissionEnforcement`): changing an object's `ownerReferences`
//!   on update needs `delete` on the object, and setting `blockOwnerDeletion: true` needs
//!   `update` on the owner's `finalizers` subresource.
//!
//! - **Signers** ([`super::signers`]): approving a CertificateSigningRequest needs `approve`
//!   on its signer, issuing its certificate `sign`.
//!
//! Members of `system:masters` pass all of them, as upstream's `EscalationAllowed` (and, for
//! signers, the privileged-group authorizer).

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::Value;

use super::rules::{PolicyRule, parse_rules, uncovered};
use super::{Attributes, Authorizer, RBAC_GROUP, RbacKind, is_privileged};
use crate::authn::Identity;
use crate::kinds::certificates;
use crate::object;
use crate::registry::{Subresource, WritePermissions};
use crate::resources::{Catalog, ResourceType};
use crate::status::{ApiError, ApiResult, Target};

/// One user's [`WritePermissions`].
#[derive(Debug)]
pub struct RequestPermissions {
    pub authorizer: Arc<Authorizer>,
    pub user: Identity,
}

impl WritePermissions for RequestPermissions {
    fn check(
        &self,
        catalog: &Catalog,
        resource: &ResourceType,
        subresource: Subresource,
        object: &Value,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        if is_privileged(&self.user) {
            return Ok(());
        }
        self.owner_references(catalog, resource, object, old)?;
        if resource.group == certificates::GROUP && resource.plural == certificates::PLURAL {
            return super::signers::check(&self.authorizer, &self.user, subresource, object, old);
        }
        if resource.group != RBAC_GROUP {
            return Ok(());
        }
        match RbacKind::from_plural(&resource.plural) {
            Some(RbacKind::Role | RbacKind::ClusterRole) => self.role(resource, object, old),
            Some(RbacKind::RoleBinding | RbacKind::ClusterRoleBinding) => {
                self.binding(resource, object, old)
            }
            None => Ok(()),
        }
    }
}

fn target<'a>(resource: &'a ResourceType, object: &'a Value) -> Target<'a> {
    Target {
        group: &resource.group,
        resource: &resource.plural,
        name: object::name(object),
    }
}

/// Everything but what the garbage collector and the server change: a write that touches
/// only `finalizers` and `ownerReferences` is never an escalation (upstream's
/// `IsOnlyMutatingGCFields`).
fn without_gc_fields(object: &Value) -> Value {
    let mut copy = object.clone();
    if let Some(metadata) = copy.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in [
            "finalizers",
            "ownerReferences",
            "resourceVersion",
            "managedFields",
            "generation",
        ] {
            metadata.remove(field);
        }
    }
    copy
}

impl RequestPermissions {
    fn allowed(&self, request: Attributes) -> (bool, String) {
        let decision = self.authorizer.authorize(&request);
        (decision.allowed, decision.reason)
    }

    /// Upstream's `ConfirmNoEscalation`: every rule of `granted` must be covered by what the
    /// user holds in `namespace`.
    fn confirm_no_escalation(&self, namespace: &str, granted: &[PolicyRule]) -> Result<(), String> {
        let (held, errors) = self.authorizer.rules_for(&self.user, namespace);
        let missing = uncovered(&held, granted);
        if missing.is_empty() {
            return Ok(());
        }
        let descriptions: BTreeSet<String> =
            compact(missing).iter().map(PolicyRule::compact).collect();
        let groups: Vec<String> = self.user.groups.iter().map(|g| format!("{g:?}")).collect();
        let mut message = format!(
            "user {:?} (groups=[{}]) is attempting to grant RBAC permissions not currently held:\n{}",
            self.user.user,
            groups.join(" "),
            descriptions.into_iter().collect::<Vec<_>>().join("\n")
        );
        if !errors.is_empty() {
            message.push_str(&format!("; resolution errors: [{}]", errors.join(" ")));
        }
        Err(message)
    }

    fn role(&self, resource: &ResourceType, object: &Value, old: Option<&Value>) -> ApiResult<()> {
        if old.is_some_and(|old| without_gc_fields(old) == without_gc_fields(object)) {
            return Ok(());
        }
        let namespace = object::namespace(object).unwrap_or_default();
        let (may_escalate, _) = self.allowed(Attributes::resource(
            self.user.clone(),
            "escalate",
            RBAC_GROUP,
            &resource.plural,
            "",
            namespace,
            object::name(object),
        ));
        if may_escalate {
            return Ok(());
        }
        let rules = parse_rules(object).map_err(ApiError::bad_request)?;
        self.confirm_no_escalation(namespace, &rules)
            .map_err(|why| ApiError::forbidden_on(target(resource, object), &why))?;
        let aggregates = object.get("aggregationRule").is_some_and(|r| !r.is_null());
        let changed_aggregation =
            old.is_none_or(|old| old.get("aggregationRule") != object.get("aggregationRule"));
        if aggregates && changed_aggregation {
            self.confirm_no_escalation(
                namespace,
                &[PolicyRule::everything(), PolicyRule::every_url()],
            )
            .map_err(|_| {
                ApiError::forbidden_on(
                    target(resource, object),
                    "must have cluster-admin privileges to use the aggregationRule",
                )
            })?;
        }
        Ok(())
    }

    fn binding(
        &self,
        resource: &ResourceType,
        object: &Value,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        if old.is_some_and(|old| without_gc_fields(old) == without_gc_fields(object)) {
            return Ok(());
        }
        let namespace = object::namespace(object).unwrap_or_default();
        let role_kind = object
            .pointer("/roleRef/kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let role_name = object
            .pointer("/roleRef/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let role_plural = if role_kind == "Role" {
            "roles"
        } else {
            "clusterroles"
        };
        // Upstream's `BindingAuthorized`: `bind` on the role, in the binding's namespace.
        let (may_bind, _) = self.allowed(Attributes::resource(
            self.user.clone(),
            "bind",
            RBAC_GROUP,
            role_plural,
            "",
            namespace,
            role_name,
        ));
        if may_bind {
            return Ok(());
        }
        let rules = self
            .authorizer
            .role_rules((role_kind == "Role").then_some(namespace), role_name);
        let rules = rules.ok_or_else(|| {
            let kind = if role_kind == "Role" {
                "role"
            } else {
                "clusterrole"
            };
            ApiError::forbidden_on(
                target(resource, object),
                &format!("{kind}.rbac.authorization.k8s.io {role_name:?} not found"),
            )
        })?;
        self.confirm_no_escalation(namespace, &rules)
            .map_err(|why| ApiError::forbidden_on(target(resource, object), &why))
    }

    /// O5.
    fn owner_references(
        &self,
        catalog: &Catalog,
        resource: &ResourceType,
        object: &Value,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        let refs = |o: &Value| o.pointer("/metadata/ownerReferences").cloned();
        let new_refs = refs(object);
        let changing = match old {
            None => new_refs
                .as_ref()
                .and_then(Value::as_array)
                .is_some_and(|r| !r.is_empty()),
            Some(old) => refs(old) != new_refs,
        };
        if !changing {
            return Ok(());
        }
        let namespace = object::namespace(object).unwrap_or_default();
        if old.is_some() {
            let (allowed, reason) = self.allowed(Attributes::resource(
                self.user.clone(),
                "delete",
                &resource.group,
                &resource.plural,
                "",
                namespace,
                object::name(object),
            ));
            if !allowed {
                return Err(ApiError::forbidden_on(
                    target(resource, object),
                    &format!(
                        "cannot set an ownerRef on a resource you can't delete: {reason}, <nil>"
                    ),
                ));
            }
        }
        let blocking = |o: Option<&Value>| -> Vec<Value> {
            o.and_then(|o| o.pointer("/metadata/ownerReferences"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|r| r.get("blockOwnerDeletion") == Some(&Value::Bool(true)))
                .cloned()
                .collect()
        };
        let before = blocking(old);
        for owner in blocking(Some(object)) {
            let uid = owner.get("uid");
            if before.iter().any(|b| b.get("uid") == uid) {
                continue;
            }
            let text = |key: &str| owner.get(key).and_then(Value::as_str).unwrap_or_default();
            let Some(owner_type) = catalog.lookup_kind(text("apiVersion"), text("kind")) else {
                return Err(ApiError::forbidden_on(
                    target(resource, object),
                    &format!(
                        "cannot set blockOwnerDeletion in this case because cannot find RESTMapping for APIVersion {} Kind {}: no matches for kind {:?} in version {:?}",
                        text("apiVersion"),
                        text("kind"),
                        text("kind"),
                        text("apiVersion")
                    ),
                ));
            };
            let (allowed, reason) = self.allowed(Attributes::resource(
                self.user.clone(),
                "update",
                &owner_type.group,
                &owner_type.plural,
                "finalizers",
                namespace,
                text("name"),
            ));
            if !allowed {
                return Err(ApiError::forbidden_on(
                    target(resource, object),
                    &format!(
                        "cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on: {reason}, <nil>"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Upstream's `CompactRules`: rules for one group and one resource (no names, no URLs) that
/// differ only in their verb become one rule with all the verbs.
fn compact(rules: Vec<PolicyRule>) -> Vec<PolicyRule> {
    let mut out: Vec<PolicyRule> = Vec::new();
    for rule in rules {
        let simple = rule.api_groups.len() == 1
            && rule.resources.len() == 1
            && rule.resource_names.is_empty()
            && rule.non_resource_urls.is_empty();
        if simple
            && let Some(existing) = out.iter_mut().find(|r| {
                r.api_groups == rule.api_groups
                    && r.resources == rule.resources
                    && r.resource_names.is_empty()
                    && r.non_resource_urls.is_empty()
            })
        {
            for verb in rule.verbs {
                if !existing.verbs.contains(&verb) {
                    existing.verbs.push(verb);
                }
            }
            continue;
        }
        out.push(rule);
    }
    out
}
