//! Impersonation (`kubectl --as`, `--as-group`, `--as-uid`): a request may act as another
//! user when its sender may `impersonate` that user, each group, the uid and each extra
//! value, as kube-apiserver's impersonation filter decides.
//!
//! - `Impersonate-User: NAME` is checked as `impersonate` on `users` named NAME, or for
//!   `system:serviceaccount:NS:SA` on `serviceaccounts` named SA in NS;
//! - each `Impersonate-Group` on `groups`; `Impersonate-Uid` on `uids` and each
//!   `Impersonate-Extra-KEY` on `userextras/KEY` in `authentication.k8s.io`.
//!
//! The impersonated user is in the requested groups plus `system:authenticated` (and a
//! service account in `system:serviceaccounts` and `system:serviceaccounts:NS`).

use http::HeaderMap;

use super::rbac::SERVICE_ACCOUNT_PREFIX;
use super::{Attributes, Authorizer, forbidden};
use crate::authn::Identity;
use crate::pki::AUTHENTICATED_GROUP;
use crate::status::ApiError;

pub const USER_HEADER: &str = "impersonate-user";
pub const GROUP_HEADER: &str = "impersonate-group";
pub const UID_HEADER: &str = "impersonate-uid";
pub const EXTRA_HEADER_PREFIX: &str = "impersonate-extra-";

/// The identity a request acts as: `sender` itself without impersonation headers, else the
/// impersonated user once every part of the impersonation is allowed.
pub fn acting_identity(
    authorizer: &Authorizer,
    sender: &Identity,
    headers: &HeaderMap,
) -> Result<Identity, ApiError> {
    let values = |name: &str| -> Result<Vec<String>, ApiError> {
        headers
            .get_all(name)
            .iter()
            .map(|v| {
                v.to_str().map(str::to_string).map_err(|_| {
                    ApiError::bad_request(format!("the {name} header is not valid text"))
                })
            })
            .collect()
    };
    let users = values(USER_HEADER)?;
    let groups = values(GROUP_HEADER)?;
    let uids = values(UID_HEADER)?;
    let mut extras: Vec<(String, String)> = Vec::new();
    for name in headers.keys() {
        if let Some(key) = name.as_str().strip_prefix(EXTRA_HEADER_PREFIX) {
            for value in values(name.as_str())? {
                extras.push((key.to_string(), value));
            }
        }
    }
    if users.is_empty() {
        if groups.is_empty() && uids.is_empty() && extras.is_empty() {
            return Ok(sender.clone());
        }
        // Upstream answers this with an internal error; the message is the same.
        return Err(ApiError::internal(format!(
            "requested {} without impersonating a user",
            describe(&groups, &uids, &extras)
        )));
    }
    if users.len() > 1 || uids.len() > 1 {
        return Err(ApiError::bad_request(
            "only one Impersonate-User and one Impersonate-Uid header may be sent",
        ));
    }
    let user = users[0].clone();
    let mut checks = Vec::new();
    let mut impersonated = Identity {
        user: user.clone(),
        uid: uids.first().cloned().unwrap_or_default(),
        groups: groups.clone(),
        extra: Default::default(),
    };
    match user
        .strip_prefix(SERVICE_ACCOUNT_PREFIX)
        .and_then(|rest| rest.split_once(':'))
    {
        Some((namespace, name)) => {
            checks.push(Attributes::resource(
                sender.clone(),
                "impersonate",
                "",
                "serviceaccounts",
                "",
                namespace,
                name,
            ));
            for group in [
                crate::authn::service_account::SERVICE_ACCOUNTS_GROUP.to_string(),
                format!("system:serviceaccounts:{namespace}"),
            ] {
                if !impersonated.groups.contains(&group) {
                    impersonated.groups.push(group);
                }
            }
        }
        None => checks.push(Attributes::resource(
            sender.clone(),
            "impersonate",
            "",
            "users",
            "",
            "",
            &user,
        )),
    }
    for group in &groups {
        checks.push(Attributes::resource(
            sender.clone(),
            "impersonate",
            "",
            "groups",
            "",
            "",
            group,
        ));
    }
    for uid in &uids {
        checks.push(Attributes::resource(
            sender.clone(),
            "impersonate",
            "authentication.k8s.io",
            "uids",
            "",
            "",
            uid,
        ));
    }
    for (key, value) in &extras {
        checks.push(Attributes::resource(
            sender.clone(),
            "impersonate",
            "authentication.k8s.io",
            "userextras",
            key,
            "",
            value,
        ));
    }
    for check in checks {
        let decision = authorizer.authorize(&check);
        if !decision.allowed {
            return Err(forbidden(&check, &decision.reason));
        }
    }
    if user != "system:anonymous" && !impersonated.groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
        impersonated.groups.push(AUTHENTICATED_GROUP.to_string());
    }
    Ok(impersonated)
}

fn describe(groups: &[String], uids: &[String], extras: &[(String, String)]) -> String {
    let mut parts: Vec<String> = groups.iter().map(|g| format!("Group={g}")).collect();
    parts.extend(uids.iter().map(|u| format!("UID={u}")));
    parts.extend(extras.iter().map(|(k, v)| format!("Extra[{k}]={v}")));
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::authz::RbacKind;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        map
    }

    #[test]
    fn impersonation_needs_the_impersonate_verb_on_each_part() {
        let authorizer = Authorizer::default();
        let alice = Identity {
            user: "alice".into(),
            ..Identity::default()
        };
        let none = acting_identity(&authorizer, &alice, &HeaderMap::new()).unwrap();
        assert_eq!(none, alice);
        let error = acting_identity(
            &authorizer,
            &alice,
            &headers(&[("Impersonate-User", "bob")]),
        )
        .unwrap_err();
        assert_eq!(error.code, 403);
        assert_eq!(
            error.message,
            r#"users "bob" is forbidden: User "alice" cannot impersonate resource "users" in API group "" at the cluster scope"#
        );
        {
            let mut index = authorizer.index.write().unwrap();
            index.put(RbacKind::ClusterRole, &json!({"metadata": {"name": "imp"}, "rules": [{"verbs": ["impersonate"], "apiGroups": [""], "resources": ["users"], "resourceNames": ["bob"]}]}));
            index.put(RbacKind::ClusterRoleBinding, &json!({"metadata": {"name": "imp"}, "roleRef": {"kind": "ClusterRole", "name": "imp"}, "subjects": [{"kind": "User", "name": "alice"}]}));
        }
        let bob = acting_identity(
            &authorizer,
            &alice,
            &headers(&[("Impersonate-User", "bob")]),
        )
        .unwrap();
        assert_eq!(bob.user, "bob");
        assert_eq!(bob.groups, vec![AUTHENTICATED_GROUP.to_string()]);
        let error = acting_identity(
            &authorizer,
            &alice,
            &headers(&[("Impersonate-User", "bob"), ("Impersonate-Group", "ops")]),
        )
        .unwrap_err();
        assert!(
            error.message.starts_with(r#"groups "ops" is forbidden"#),
            "{}",
            error.message
        );
        let error = acting_identity(
            &authorizer,
            &alice,
            &headers(&[("Impersonate-Group", "ops")]),
        )
        .unwrap_err();
        assert_eq!(
            error.message,
            "requested Group=ops without impersonating a user"
        );
    }

    #[test]
    fn a_service_account_is_checked_in_its_namespace_and_gets_its_groups() {
        let authorizer = Authorizer::default();
        let admin = Identity::admin();
        let sa = acting_identity(
            &authorizer,
            &admin,
            &headers(&[("Impersonate-User", "system:serviceaccount:t:x")]),
        )
        .unwrap();
        assert_eq!(
            sa.groups,
            vec![
                "system:serviceaccounts",
                "system:serviceaccounts:t",
                AUTHENTICATED_GROUP
            ]
        );
    }
}
