//! Who may decide and who may issue a CertificateSigningRequest: kube-apiserver's
//! `CertificateApproval` and `CertificateSigning` admission plugins. Updating `/approval` or
//! `/status` is not enough; the writer also needs a verb on the request's signer, which RBAC
//! names as the `signers` resource of `certificates.k8s.io`:
//!
//! - a write to `/approval` (approving or denying) needs `approve` on the signer;
//! - a write to `/status` that changes `status.certificate` needs `sign` on the signer.
//!
//! The signer is the one the stored request names (a write cannot move a request to a signer
//! its writer may act for). Either the exact name (`example.com/my-signer`) or the domain's
//! wildcard (`example.com/*`) grants it, as a resource name in a rule:
//!
//! ```yaml
//! - apiGroups: [certificates.k8s.io]
//!   resources: [signers]
//!   resourceNames: [kubernetes.io/kube-apiserver-client]
//!   verbs: [approve]
//! ```
//!
//! The bootstrap policy has one such ClusterRole per built-in signer
//! (`system:certificates.k8s.io:kube-apiserver-client-approver` and its siblings), bound to
//! nobody, as upstream's; `cluster-admin` holds every verb on every signer.
//!
//! # Caveats
//! - As kube-apiserver 1.33, changing only the conditions through `/status` (a `Failed`
//!   condition, say) needs no `sign`; later releases ask for it there too.

use serde_json::Value;

use super::{Attributes, Authorizer};
use crate::authn::Identity;
use crate::kinds::certificates;
use crate::registry::Subresource;
use crate::status::{ApiError, ApiResult, Target};

/// The resource RBAC rules name signers by.
pub const SIGNERS_RESOURCE: &str = "signers";

/// Refuses a CertificateSigningRequest write that needs a verb on its signer the writer
/// lacks. `stored` is the request before the write; creates (no `stored`) need nothing here.
pub fn check(
    authorizer: &Authorizer,
    user: &Identity,
    subresource: Subresource,
    object: &Value,
    stored: Option<&Value>,
) -> ApiResult<()> {
    let Some(stored) = stored else {
        return Ok(());
    };
    // Upstream's message names the verb itself ("not permitted to approve requests …").
    let verb = match subresource {
        Subresource::Approval => "approve",
        Subresource::Status if certificate(stored) != certificate(object) => "sign",
        _ => return Ok(()),
    };
    let signer = certificates::signer_name(stored);
    if authorized_for_signer(authorizer, user, verb, signer) {
        return Ok(());
    }
    Err(ApiError::forbidden_on(
        Target {
            group: certificates::GROUP,
            resource: certificates::PLURAL,
            name: crate::object::name(stored),
        },
        &format!("user not permitted to {verb} requests with signerName {signer:?}"),
    ))
}

/// Upstream's `IsAuthorizedForSignerName`: `verb` on the signer by its name, or on every
/// signer of its domain (`<domain>/*`).
pub fn authorized_for_signer(
    authorizer: &Authorizer,
    user: &Identity,
    verb: &str,
    signer: &str,
) -> bool {
    let domain = signer.split('/').next().unwrap_or_default();
    [signer.to_string(), format!("{domain}/*")]
        .iter()
        .any(|name| {
            authorizer
                .authorize(&Attributes::resource(
                    user.clone(),
                    verb,
                    certificates::GROUP,
                    SIGNERS_RESOURCE,
                    "",
                    "",
                    name,
                ))
                .allowed
        })
}

fn certificate(request: &Value) -> Option<&Value> {
    request.pointer("/status/certificate")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::authz::RbacKind;

    fn user(name: &str) -> Identity {
        Identity {
            user: name.into(),
            groups: vec!["system:authenticated".into()],
            ..Identity::default()
        }
    }

    fn request(signer: &str, certificate: Option<&str>) -> Value {
        let mut object = json!({
            "metadata": {"name": "jane"},
            "spec": {"signerName": signer},
            "status": {},
        });
        if let Some(certificate) = certificate {
            object["status"]["certificate"] = json!(certificate);
        }
        object
    }

    /// An authorizer whose only rule grants `verb` on the signers named `names` to `who`.
    fn granting(who: &str, verb: &str, names: &[&str]) -> Authorizer {
        let authorizer = Authorizer::default();
        let role = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "signer-role"},
            "rules": [{"apiGroups": ["certificates.k8s.io"], "resources": ["signers"],
                       "resourceNames": names, "verbs": [verb]}],
        });
        let binding = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "signer-binding"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "signer-role"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": who}],
        });
        let mut index = authorizer.write_index();
        index.put(RbacKind::ClusterRole, &role);
        index.put(RbacKind::ClusterRoleBinding, &binding);
        drop(index);
        authorizer
    }

    #[test]
    fn approval_needs_approve_on_the_stored_signer_or_its_domain() {
        let stored = request("example.com/a", None);
        let exact = granting("ann", "approve", &["example.com/a"]);
        assert!(
            check(
                &exact,
                &user("ann"),
                Subresource::Approval,
                &stored,
                Some(&stored)
            )
            .is_ok()
        );
        let domain = granting("ann", "approve", &["example.com/*"]);
        assert!(
            check(
                &domain,
                &user("ann"),
                Subresource::Approval,
                &stored,
                Some(&stored)
            )
            .is_ok()
        );
        // Another signer, another verb, another user: refused with upstream's words.
        for (authorizer, who) in [
            (granting("ann", "approve", &["example.com/b"]), "ann"),
            (granting("ann", "sign", &["example.com/a"]), "ann"),
            (granting("ann", "approve", &["example.com/a"]), "bob"),
        ] {
            let error = check(
                &authorizer,
                &user(who),
                Subresource::Approval,
                &stored,
                Some(&stored),
            )
            .expect_err("refused");
            assert_eq!(error.code, 403);
            assert_eq!(
                error.message,
                "certificatesigningrequests.certificates.k8s.io \"jane\" is forbidden: user not permitted to approve requests with signerName \"example.com/a\""
            );
        }
        // The signer checked is the stored one, whatever the write says.
        let moved = request("example.com/b", None);
        let only_b = granting("ann", "approve", &["example.com/b"]);
        assert!(
            check(
                &only_b,
                &user("ann"),
                Subresource::Approval,
                &moved,
                Some(&stored)
            )
            .is_err()
        );
    }

    #[test]
    fn status_needs_sign_only_when_the_certificate_changes() {
        let stored = request("example.com/a", None);
        let issued = request("example.com/a", Some("Y2VydA=="));
        let nobody = granting("someone-else", "sign", &["example.com/a"]);
        // A status write that leaves the certificate alone needs nothing.
        assert!(
            check(
                &nobody,
                &user("ann"),
                Subresource::Status,
                &stored,
                Some(&stored)
            )
            .is_ok()
        );
        let error = check(
            &nobody,
            &user("ann"),
            Subresource::Status,
            &issued,
            Some(&stored),
        )
        .expect_err("refused");
        assert!(
            error.message.ends_with(
                "is forbidden: user not permitted to sign requests with signerName \"example.com/a\""
            ),
            "{}",
            error.message
        );
        let signer = granting("ann", "sign", &["example.com/*"]);
        assert!(
            check(
                &signer,
                &user("ann"),
                Subresource::Status,
                &issued,
                Some(&stored)
            )
            .is_ok()
        );
        // The main resource and creates are not this check's.
        assert!(
            check(
                &nobody,
                &user("ann"),
                Subresource::Main,
                &issued,
                Some(&stored)
            )
            .is_ok()
        );
        assert!(check(&nobody, &user("ann"), Subresource::Approval, &stored, None).is_ok());
    }
}
