//! Authorization: may this identity do what its request asks? Kube-apiserver's chain with
//! `--authorization-mode=RBAC`: members of `system:masters` may do anything (the privileged
//! group authorizer), everyone else what RBAC's Roles, ClusterRoles and their bindings grant.
//!
//! - [`attributes`]: what a request asks, in RBAC's terms (upstream's `RequestInfo`).
//! - [`rules`]: what one `PolicyRule` allows, and rule coverage for escalation checks.
//! - [`rbac`]: the index of RBAC objects and upstream's evaluation order and reasons.
//! - [`bootstrap`]: the default roles and bindings, reconciled at every start.
//! - [`escalation`]: checks of a write's content made with the writer's permissions
//!   (no granting what you do not hold; `blockOwnerDeletion` needs the owner's finalizers).
//! - [`impersonation`]: `Impersonate-User` / `Impersonate-Group` / `Impersonate-Uid`.
//! - [`signers`]: who may approve and who may issue a CertificateSigningRequest (`approve`
//!   and `sign` on its signer).
//! - [`review`]: `SubjectAccessReview` and its self and local forms, `SelfSubjectRulesReview`.
//!
//! # Guarantees
//! - Every request the HTTP layer serves, but the health endpoints, is authorized here before
//!   a handler runs; a watch or list is authorized like the request it is (`watch`, `list`).
//! - A denial is a 403 `Status` worded exactly as kube-apiserver's.
//! - Each replica follows the RBAC objects with watches; a grant or revocation takes effect
//!   on a replica as soon as its watch delivers the change (milliseconds), as upstream's
//!   informers.
//!
//! # Caveats
//! - Like upstream, authorization is eventually consistent: a request right after a
//!   RoleBinding's create may still be refused, on any replica.
//! - The in-process controllers call the registry directly and are not authorized; they act
//!   with the server's own authority.

pub mod attributes;
pub mod bootstrap;
pub mod escalation;
pub mod impersonation;
pub mod rbac;
pub mod review;
pub mod rules;
pub mod signers;

use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub use attributes::Attributes;
pub use rbac::{Decision, RbacIndex, RbacKind};
pub use rules::PolicyRule;

use crate::authn::Identity;
use crate::pki::MASTERS_GROUP;
use crate::registry::{ListOptions, Registry};
use crate::resources::ResourceType;
use crate::status::{ApiError, ApiResult, Target};
use crate::watch_cache::WatchItem;

/// The API group of the RBAC kinds.
pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// Decides requests from the RBAC objects it follows.
#[derive(Debug, Default)]
pub struct Authorizer {
    index: RwLock<RbacIndex>,
}

/// True for members of `system:masters`, whom nothing restricts.
pub fn is_privileged(user: &Identity) -> bool {
    user.groups.iter().any(|g| g == MASTERS_GROUP)
}

impl Authorizer {
    pub fn new() -> Arc<Authorizer> {
        Arc::new(Authorizer::default())
    }

    /// Whether `request` is allowed, and why.
    pub fn authorize(&self, request: &Attributes) -> Decision {
        if is_privileged(&request.user) {
            return Decision {
                allowed: true,
                reason: String::new(),
            };
        }
        self.read_index().authorize(request)
    }

    /// The rules RBAC grants `user` in `namespace`, and the errors met finding them. As
    /// upstream, `system:masters` adds nothing here: its members see what RBAC grants them
    /// (`cluster-admin`, through the bootstrap binding of their group).
    pub fn rules_for(&self, user: &Identity, namespace: &str) -> (Vec<PolicyRule>, Vec<String>) {
        self.read_index().rules_for(user, namespace)
    }

    /// The rules of the Role `name` in `namespace`, or of the ClusterRole `name` when
    /// `namespace` is None; None when it does not exist.
    pub fn role_rules(&self, namespace: Option<&str>, name: &str) -> Option<Arc<Vec<PolicyRule>>> {
        let index = self.read_index();
        match namespace {
            Some(namespace) => index.role(namespace, name),
            None => index.cluster_role(name),
        }
    }

    fn read_index(&self) -> std::sync::RwLockReadGuard<'_, RbacIndex> {
        // A panic while holding the lock cannot leave the index half-updated in a way that
        // grants more than the objects say (each update is one insert or remove), so a
        // poisoned lock is still safe to read.
        self.index
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write_index(&self) -> std::sync::RwLockWriteGuard<'_, RbacIndex> {
        self.index
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Loads every RBAC object, then follows changes until `shutdown`. Returns once the
    /// first load is complete, so that the server never serves with an empty policy.
    pub async fn start(
        self: &Arc<Self>,
        registry: Arc<Registry>,
        shutdown: CancellationToken,
    ) -> ApiResult<()> {
        for kind in RbacKind::ALL {
            let resource = rbac_type(&registry, kind)?;
            let revision = self.reload(&registry, &resource, kind).await?;
            let authorizer = Arc::clone(self);
            let registry = Arc::clone(&registry);
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                authorizer
                    .follow(registry, resource, kind, revision, shutdown)
                    .await
            });
        }
        Ok(())
    }

    /// Replaces everything of `kind` with a fresh list; returns the list's revision.
    async fn reload(
        &self,
        registry: &Registry,
        resource: &ResourceType,
        kind: RbacKind,
    ) -> ApiResult<String> {
        let list = registry
            .list(resource, None, &ListOptions::default())
            .await?;
        let revision = list
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let items = list.get("items").and_then(Value::as_array);
        // One lock for clear and refill: no request sees the kind half loaded.
        let mut index = self.write_index();
        index.clear(kind);
        for item in items.into_iter().flatten() {
            index.put(kind, item);
        }
        Ok(revision)
    }

    async fn follow(
        &self,
        registry: Arc<Registry>,
        resource: Arc<ResourceType>,
        kind: RbacKind,
        mut revision: String,
        shutdown: CancellationToken,
    ) {
        loop {
            let options = ListOptions {
                resource_version: Some(revision.clone()),
                ..ListOptions::default()
            };
            let mut relist = true;
            if let Ok(mut stream) = registry
                .watch(Arc::clone(&resource), None, &options, false)
                .await
            {
                loop {
                    let item = tokio::select! {
                        _ = shutdown.cancelled() => return,
                        item = stream.next() => item,
                    };
                    match item {
                        Some(WatchItem::Change {
                            event_type, object, ..
                        }) => {
                            if let Some(rv) = object
                                .pointer("/metadata/resourceVersion")
                                .and_then(Value::as_str)
                            {
                                revision = rv.to_string();
                            }
                            if event_type == "DELETED" {
                                self.write_index().remove(kind, &object);
                            } else {
                                self.write_index().put(kind, &object);
                            }
                        }
                        Some(WatchItem::Bookmark { revision: at, .. }) => {
                            revision = at.to_string();
                        }
                        // The stream ended (the watch cache resynchronised): watch again
                        // from the last revision seen.
                        None => {
                            relist = false;
                            break;
                        }
                        // The revision is gone (compacted): list again, then watch.
                        Some(WatchItem::Error(_)) => break,
                    }
                }
            }
            while relist {
                match self.reload(&registry, &resource, kind).await {
                    Ok(at) => {
                        revision = at;
                        relist = false;
                    }
                    Err(error) => {
                        tracing::warn!(kind = kind.plural(), error = %error.message, "cannot re-list RBAC objects; retrying");
                        tokio::select! {
                            _ = shutdown.cancelled() => return,
                            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                        }
                    }
                }
            }
        }
    }
}

fn rbac_type(registry: &Registry, kind: RbacKind) -> ApiResult<Arc<ResourceType>> {
    registry
        .catalog()
        .lookup(RBAC_GROUP, "v1", kind.plural())
        .ok_or_else(|| ApiError::internal(format!("{} is not registered", kind.plural())))
}

/// Upstream's `forbiddenMessage`: `User "x" cannot list resource "configmaps" in API group ""
/// in the namespace "y"`.
pub fn forbidden_message(request: &Attributes) -> String {
    // Upstream escapes these three, as the message may be shown in a browser.
    let escaped = unescaped_forbidden_message(request);
    escaped
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn unescaped_forbidden_message(request: &Attributes) -> String {
    let user = &request.user.user;
    if !request.resource_request {
        return format!(
            "User {user:?} cannot {} path {:?}",
            request.verb, request.path
        );
    }
    let resource = request.combined_resource();
    if request.namespace.is_empty() {
        format!(
            "User {user:?} cannot {} resource {resource:?} in API group {:?} at the cluster scope",
            request.verb, request.api_group
        )
    } else {
        format!(
            "User {user:?} cannot {} resource {resource:?} in API group {:?} in the namespace {:?}",
            request.verb, request.api_group, request.namespace
        )
    }
}

/// The 403 for a refused request, as upstream's `ForbiddenStatusError`.
pub fn forbidden(request: &Attributes, reason: &str) -> ApiError {
    let mut why = forbidden_message(request);
    if !reason.is_empty() {
        why = format!("{why}: {reason}");
    }
    let target = if request.resource_request {
        Target {
            group: &request.api_group,
            resource: &request.resource,
            name: &request.name,
        }
    } else {
        Target {
            group: "",
            resource: "",
            name: "",
        }
    };
    ApiError::forbidden_on(target, &why)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str) -> Identity {
        Identity {
            user: name.into(),
            ..Identity::default()
        }
    }

    #[test]
    fn denials_are_worded_as_upstream() {
        let list = Attributes::resource(user("x"), "list", "", "configmaps", "", "y", "");
        let error = forbidden(&list, "");
        assert_eq!(error.code, 403);
        assert_eq!(
            error.message,
            r#"configmaps is forbidden: User "x" cannot list resource "configmaps" in API group "" in the namespace "y""#
        );
        let get = Attributes::resource(user("x"), "get", "apps", "deployments", "scale", "", "d");
        assert_eq!(
            forbidden(&get, "RBAC: boom").message,
            r#"deployments.apps "d" is forbidden: User "x" cannot get resource "deployments/scale" in API group "apps" at the cluster scope: RBAC: boom"#
        );
        let path = Attributes::non_resource(user("x"), "get", "/metrics");
        assert_eq!(
            forbidden(&path, "").message,
            r#"forbidden: User "x" cannot get path "/metrics""#
        );
    }

    #[test]
    fn system_masters_may_do_anything() {
        let authorizer = Authorizer::default();
        let admin = Identity::admin();
        assert!(
            authorizer
                .authorize(&Attributes::resource(
                    admin.clone(),
                    "delete",
                    "",
                    "namespaces",
                    "",
                    "",
                    "x"
                ))
                .allowed
        );
        assert!(
            !authorizer
                .authorize(&Attributes::resource(
                    user("x"),
                    "get",
                    "",
                    "pods",
                    "",
                    "a",
                    ""
                ))
                .allowed
        );
        assert!(
            authorizer.rules_for(&admin, "a").0.is_empty(),
            "only RBAC's rules are listed"
        );
    }
}
