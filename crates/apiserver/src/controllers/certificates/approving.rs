//! kube-controller-manager's `csrapproving` controller: approves a kubelet's request for a
//! client certificate when its requester may have one, so that nodes bootstrapping with a
//! token get their certificates without a person approving each.
//!
//! A request is recognised, in upstream's order, as:
//! - `selfnodeclient`: a `kube-apiserver-client-kubelet` request that passes that signer's
//!   checks ([`super::kubelet_client`]) and whose common name is the requester's own user
//!   name (a node renewing its certificate);
//! - `nodeclient`: the same without the name match (a bootstrap token asking for a node's
//!   first certificate).
//!
//! For each kind it is recognised as, the requester (the request's `spec.username`, `uid`,
//! `groups` and `extra`, recorded by the server at creation) is authorised for `create` on
//! `certificatesigningrequests/<kind>` in `certificates.k8s.io`, as a SubjectAccessReview
//! would answer. The first allowed adds `Approved=True`, reason `AutoApproved`, with
//! upstream's message, through `/approval`; the signer then issues the certificate. The
//! bootstrap ClusterRoles `system:certificates.k8s.io:certificatesigningrequests:nodeclient`
//! and `…:selfnodeclient` grant those verbs, bound to nobody until an administrator binds
//! them (to `system:bootstrappers`, `system:nodes`), as upstream.
//!
//! Requests already approved, denied or issued, other signers' requests, and requests that
//! fail the checks are left alone: a person (or another approver) decides those.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{
    Handled, RequestFacts, append_condition, follow_requests, kubelet_client, update_request,
    usages,
};
use crate::authn::Identity;
use crate::authz::{Attributes, Authorizer};
use crate::kinds::certificates::{self, KUBE_APISERVER_CLIENT_KUBELET_SIGNER};
use crate::object::string_list;
use crate::registry::{Registry, Subresource};
use crate::resources::ResourceType;
use crate::status::{ApiError, ApiResult};

/// A kind of request the approver recognises: the subresource the requester needs `create`
/// on, and the approval's message.
struct Recognizer {
    subresource: &'static str,
    recognises: fn(&Value, &RequestFacts) -> bool,
    message: &'static str,
}

const RECOGNIZERS: [Recognizer; 2] = [
    Recognizer {
        subresource: "selfnodeclient",
        recognises: |request, facts| {
            spec_text(request, "username") == facts.common_name && is_node_client(request, facts)
        },
        message: "Auto approving self kubelet client certificate after SubjectAccessReview.",
    },
    Recognizer {
        subresource: "nodeclient",
        recognises: is_node_client,
        message: "Auto approving kubelet client certificate after SubjectAccessReview.",
    },
];

pub fn spawn(
    registry: Arc<Registry>,
    authorizer: Arc<Authorizer>,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        follow_requests(&registry, &shutdown, "csrapproving", |requests, request| {
            let (registry, authorizer) = (&registry, &authorizer);
            async move { approve_if_allowed(registry, authorizer, &requests, &request).await }
        })
        .await;
    })
}

/// Upstream's `isNodeClientCert`: the kubelet client signer, and its checks pass.
fn is_node_client(request: &Value, facts: &RequestFacts) -> bool {
    certificates::signer_name(request) == KUBE_APISERVER_CLIENT_KUBELET_SIGNER
        && kubelet_client(facts, &usages(request)).is_ok()
}

fn spec_text<'a>(request: &'a Value, field: &str) -> &'a str {
    request
        .pointer(&format!("/spec/{field}"))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The requester as the server recorded it in the request's spec.
fn requester(request: &Value) -> Identity {
    Identity {
        user: spec_text(request, "username").to_string(),
        uid: spec_text(request, "uid").to_string(),
        groups: string_list(request.pointer("/spec/groups")),
        extra: request["spec"]["extra"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(key, values)| (key.clone(), string_list(Some(values))))
            .collect(),
    }
}

/// The subresource and message of the first kind `request` is recognised as whose
/// permission its requester holds; `Err` with the kinds tried when it holds none.
fn decide(
    authorizer: &Authorizer,
    request: &Value,
    facts: &RequestFacts,
) -> Result<Option<&'static Recognizer>, Vec<&'static str>> {
    let requester = requester(request);
    let mut tried = Vec::new();
    for recognizer in &RECOGNIZERS {
        if !(recognizer.recognises)(request, facts) {
            continue;
        }
        tried.push(recognizer.subresource);
        let attributes = Attributes::resource(
            requester.clone(),
            "create",
            certificates::GROUP,
            certificates::PLURAL,
            recognizer.subresource,
            "",
            "",
        );
        if authorizer.authorize(&attributes).allowed {
            return Ok(Some(recognizer));
        }
    }
    if tried.is_empty() {
        Ok(None)
    } else {
        Err(tried)
    }
}

async fn approve_if_allowed(
    registry: &Registry,
    authorizer: &Authorizer,
    requests: &ResourceType,
    request: &Value,
) -> ApiResult<Handled> {
    if certificates::is_issued(request)
        || certificates::has_condition(request, "Approved")
        || certificates::has_condition(request, "Denied")
    {
        return Ok(Handled::Done);
    }
    // Only the kubelet client signer's requests can be recognised: spare the others a parse.
    if certificates::signer_name(request) != KUBE_APISERVER_CLIENT_KUBELET_SIGNER {
        return Ok(Handled::Done);
    }
    let name = crate::object::name(request);
    let der = certificates::request_der(request)
        .map_err(|why| ApiError::internal(format!("unable to parse csr {name:?}: {why}")))?;
    let facts = RequestFacts::parse(&der)
        .map_err(|why| ApiError::internal(format!("unable to parse csr {name:?}: {why}")))?;
    let recognizer = match decide(authorizer, request, &facts) {
        Ok(Some(recognizer)) => recognizer,
        Ok(None) => return Ok(Handled::Done),
        // Upstream's "ignorable error": retried with backoff, so that a request made before
        // its requester was granted the permission is approved once it is.
        Err(tried) => {
            return Ok(Handled::Retry(format!(
                "recognized csr {name:?} as {tried:?} but subject access review was not approved"
            )));
        }
    };
    update_request(
        registry,
        requests,
        request,
        Subresource::Approval,
        "approved",
        |next| {
            // Only if nobody decided meanwhile.
            if !certificates::has_condition(next, "Approved")
                && !certificates::has_condition(next, "Denied")
            {
                append_condition(
                    next,
                    json!({
                        "type": "Approved",
                        "status": "True",
                        "reason": "AutoApproved",
                        "message": recognizer.message,
                    }),
                );
            }
        },
    )
    .await?;
    tracing::info!(
        name,
        recognized_as = recognizer.subresource,
        "auto-approved a kubelet client certificate request"
    );
    Ok(Handled::Done)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kubelet_request(username: &str, common_name: &str) -> (Value, RequestFacts) {
        let request = json!({"spec": {
            "signerName": KUBE_APISERVER_CLIENT_KUBELET_SIGNER,
            "username": username,
            "uid": "u-1",
            "groups": ["system:bootstrappers", "system:authenticated"],
            "extra": {"authentication.kubernetes.io/credential-id": ["X509SHA256=ab"]},
            "usages": ["client auth", "digital signature"],
        }});
        let facts = RequestFacts {
            common_name: common_name.into(),
            organizations: vec!["system:nodes".into()],
            ..RequestFacts::default()
        };
        (request, facts)
    }

    #[test]
    fn the_requester_is_read_from_the_spec() {
        let (request, _) = kubelet_request("system:bootstrap:abc", "system:node:a");
        let who = requester(&request);
        assert_eq!(who.user, "system:bootstrap:abc");
        assert_eq!(who.uid, "u-1");
        assert_eq!(who.groups, ["system:bootstrappers", "system:authenticated"]);
        assert_eq!(
            who.extra["authentication.kubernetes.io/credential-id"],
            ["X509SHA256=ab"]
        );
    }

    /// Without RBAC objects nobody but `system:masters` holds the verbs: a recognised
    /// request is refused with the kinds tried, in upstream's order; another signer's, or
    /// one failing the checks, is not recognised at all.
    #[test]
    fn recognition_follows_upstreams_order() {
        let authorizer = Authorizer::new();
        let (own, facts) = kubelet_request("system:node:a", "system:node:a");
        assert_eq!(
            decide(&authorizer, &own, &facts).map(|r| r.map(|r| r.subresource)),
            Err(vec!["selfnodeclient", "nodeclient"])
        );
        let (bootstrap, facts) = kubelet_request("system:bootstrap:abc", "system:node:a");
        assert_eq!(
            decide(&authorizer, &bootstrap, &facts).map(|r| r.map(|r| r.subresource)),
            Err(vec!["nodeclient"])
        );
        let mut serving = bootstrap.clone();
        serving["spec"]["signerName"] = json!("kubernetes.io/kubelet-serving");
        assert!(matches!(decide(&authorizer, &serving, &facts), Ok(None)));
        let (_, not_a_node) = kubelet_request("system:bootstrap:abc", "jane");
        assert!(matches!(
            decide(&authorizer, &bootstrap, &not_a_node),
            Ok(None)
        ));

        let mut master = own.clone();
        master["spec"]["groups"] = json!(["system:masters"]);
        let (_, facts) = kubelet_request("system:node:a", "system:node:a");
        assert_eq!(
            decide(&authorizer, &master, &facts).map(|r| r.map(|r| r.message)),
            Ok(Some(
                "Auto approving self kubelet client certificate after SubjectAccessReview."
            ))
        );
    }
}
