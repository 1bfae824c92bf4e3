//! The signers of the three `kubernetes.io/*` signers kube-controller-manager's `csrsigning`
//! controller runs: `kube-apiserver-client`, `kube-apiserver-client-kubelet` and
//! `kubelet-serving`. Once a request is approved (and neither denied nor failed), the
//! server's cluster CA signs it and the certificate is written to `status.certificate`
//! through `/status`. The holder of the key can then authenticate as the request's subject
//! (CN the user, O the groups) or, for `kubelet-serving`, serve TLS under the names it asked
//! for. It runs with the other controllers, under their Lease.
//!
//! What each signer accepts is upstream's (a request that fails gets `Failed=True`, reason
//! `SignerValidationFailure`, with upstream's message, and is not signed):
//! - `kube-apiserver-client`: usages include `client auth` and add only `digital signature`
//!   and `key encipherment`;
//! - `kube-apiserver-client-kubelet`: organization exactly `system:nodes`, common name
//!   `system:node:<name>`, no subject alternative names, usages exactly `client auth` and
//!   `digital signature`, with or without `key encipherment`;
//! - `kubelet-serving`: the same subject, at least one DNS or IP name and no e-mail or URI,
//!   usages exactly `server auth` and `digital signature`, with or without `key
//!   encipherment`.
//!
//! Validity: `spec.expirationSeconds` when set (at least 10 minutes, at most a year,
//! upstream's `--cluster-signing-duration` default), else a year; never past the CA.
//!
//! # Caveats
//! - Every signer signs with the one cluster CA (upstream's default, when no
//!   `--cluster-signing-{signer}-cert-file` splits them).
//! - Custom signers are left to whoever runs them; `kubernetes.io/legacy-unknown`, refused
//!   by `certificates.k8s.io/v1`, is never signed.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use x509_parser::prelude::FromDer as _;

use crate::kinds::certificates::{self, KUBE_APISERVER_CLIENT_SIGNER};
use crate::pki::Pki;
use crate::registry::{ListOptions, Registry, Subresource, WriteOptions};
use crate::resources::ResourceType;
use crate::status::{ApiError, ApiResult};
use crate::watch_cache::WatchItem;

/// The identity the signer writes as (upstream's controller-manager's).
pub const CSR_SIGNER_USER: &str = "system:kube-controller-manager";

/// Upstream's `--cluster-signing-duration` default: the longest validity granted.
const MAX_VALIDITY: Duration = Duration::from_secs(365 * 24 * 60 * 60);
/// The shortest validity granted, whatever a request asks.
const MIN_VALIDITY: Duration = Duration::from_secs(10 * 60);

pub fn spawn(
    registry: Arc<Registry>,
    pki: Arc<Pki>,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move { run(registry, pki, shutdown).await })
}

async fn run(registry: Arc<Registry>, pki: Arc<Pki>, shutdown: CancellationToken) {
    let Some(requests) = registry
        .catalog()
        .lookup(certificates::GROUP, "v1", certificates::PLURAL)
    else {
        tracing::error!("the CSR signer cannot start: certificatesigningrequests are not served");
        return;
    };
    loop {
        // Without a revision the watch starts with every request as ADDED, so requests
        // approved while no signer ran are signed now.
        match registry
            .watch(Arc::clone(&requests), None, &ListOptions::default(), false)
            .await
        {
            Ok(mut events) => loop {
                let item = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    item = events.next() => item,
                };
                match item {
                    Some(WatchItem::Change { event_type, object }) if event_type != "DELETED" => {
                        if let Err(error) = sign_if_due(&registry, &requests, &pki, &object).await {
                            tracing::warn!(
                                name = crate::object::name(&object),
                                error = %error.message,
                                "could not sign a CertificateSigningRequest"
                            );
                        }
                    }
                    Some(WatchItem::Error(_)) | None => break,
                    Some(_) => {}
                }
            },
            Err(error) => {
                tracing::warn!(error = %error.message, "the CSR signer cannot watch requests; retrying");
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
}

/// The signer of client certificates for kubelets (`system:node:<name>` in `system:nodes`).
pub const KUBE_APISERVER_CLIENT_KUBELET_SIGNER: &str =
    "kubernetes.io/kube-apiserver-client-kubelet";
/// The signer of kubelets' serving certificates.
pub const KUBELET_SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";

/// A signer this controller runs: its name, and upstream's check that a request is one it
/// may sign (an error is the `Failed` condition's message).
struct Signer {
    name: &'static str,
    accepts: fn(&RequestFacts, &[&str]) -> Result<(), String>,
}

const SIGNERS: [Signer; 3] = [
    Signer {
        name: KUBE_APISERVER_CLIENT_SIGNER,
        accepts: |_, usages| client_usages(usages),
    },
    Signer {
        name: KUBE_APISERVER_CLIENT_KUBELET_SIGNER,
        accepts: kubelet_client,
    },
    Signer {
        name: KUBELET_SERVING_SIGNER,
        accepts: kubelet_serving,
    },
];

/// Signs `request` when one of [`SIGNERS`] is its signer, it is approved and not yet
/// issued; marks it Failed when it is not what its signer signs.
async fn sign_if_due(
    registry: &Registry,
    requests: &ResourceType,
    pki: &Pki,
    request: &Value,
) -> ApiResult<()> {
    let issued = request
        .pointer("/status/certificate")
        .and_then(Value::as_str)
        .is_some_and(|c| !c.is_empty());
    let signer_name = certificates::signer_name(request);
    let Some(signer) = SIGNERS.iter().find(|s| s.name == signer_name) else {
        return Ok(());
    };
    if issued || !certificates::is_approved(request) {
        return Ok(());
    }
    let usages: Vec<&str> = request
        .pointer("/spec/usages")
        .and_then(Value::as_array)
        .map(|list| list.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let der = certificates::request_der(request)
        .map_err(|why| ApiError::internal(format!("the request does not parse: {why}")))?;
    let facts = RequestFacts::parse(&der)
        .map_err(|why| ApiError::internal(format!("the request does not parse: {why}")))?;
    let outcome = match (signer.accepts)(&facts, &usages) {
        Err(why) => Outcome::Failed(why),
        Ok(()) => {
            let pem = pki
                .sign_request(&der, &usages, validity(request))
                .map_err(|error| ApiError::internal(format!("signing failed: {error}")))?;
            Outcome::Issued(pem)
        }
    };
    let name = crate::object::name(request);
    let uid = crate::object::uid(request).to_string();
    registry
        .guarded_update(
            requests,
            None,
            name,
            None,
            Subresource::Status,
            &WriteOptions::default(),
            |current| {
                // Signed for this very request: one recreated under the name waits its turn.
                if crate::object::uid(current) != uid {
                    return Err(ApiError::conflict(
                        crate::status::Target {
                            group: certificates::GROUP,
                            resource: certificates::PLURAL,
                            name,
                        },
                        "the request was replaced while it was being signed",
                    ));
                }
                let mut next = current.clone();
                if !next["status"].is_object() {
                    next["status"] = json!({});
                }
                match &outcome {
                    Outcome::Issued(pem) => {
                        use base64::Engine as _;
                        next["status"]["certificate"] =
                            json!(base64::engine::general_purpose::STANDARD.encode(pem));
                    }
                    Outcome::Failed(why) => {
                        let mut conditions = next["status"]["conditions"]
                            .as_array()
                            .cloned()
                            .unwrap_or_default();
                        conditions.push(json!({
                            "type": "Failed",
                            "status": "True",
                            "reason": "SignerValidationFailure",
                            "message": why,
                        }));
                        next["status"]["conditions"] = json!(conditions);
                    }
                }
                Ok(next)
            },
        )
        .await?;
    Ok(())
}

enum Outcome {
    Issued(String),
    Failed(String),
}

/// Upstream's `validAPIServerClientUsages`.
fn client_usages(usages: &[&str]) -> Result<(), String> {
    let mut client_auth = false;
    for usage in usages {
        match *usage {
            "digital signature" | "key encipherment" => {}
            "client auth" => client_auth = true,
            other => return Err(format!("invalid usage for client certificate: {other}")),
        }
    }
    if client_auth {
        Ok(())
    } else {
        Err("missing required usage for client certificate: client auth".into())
    }
}

/// What the signers' checks read of a PKCS#10 request (upstream reads Go's
/// `x509.CertificateRequest`).
#[derive(Debug, Default, PartialEq)]
struct RequestFacts {
    common_name: String,
    organizations: Vec<String>,
    dns_names: usize,
    ip_addresses: usize,
    email_addresses: usize,
    uris: usize,
}

impl RequestFacts {
    fn parse(der: &[u8]) -> Result<RequestFacts, String> {
        use x509_parser::certification_request::X509CertificationRequest;
        use x509_parser::extensions::{GeneralName, ParsedExtension};
        let (_, csr) = X509CertificationRequest::from_der(der)
            .map_err(|error| format!("x509: malformed certificate request: {error}"))?;
        let subject = &csr.certification_request_info.subject;
        let text = |attribute: &x509_parser::x509::AttributeTypeAndValue<'_>| {
            attribute.as_str().unwrap_or_default().to_string()
        };
        let mut facts = RequestFacts {
            common_name: subject
                .iter_common_name()
                .next()
                .map(text)
                .unwrap_or_default(),
            organizations: subject.iter_organization().map(text).collect(),
            ..RequestFacts::default()
        };
        for extension in csr.requested_extensions().into_iter().flatten() {
            let ParsedExtension::SubjectAlternativeName(names) = extension else {
                continue;
            };
            for name in &names.general_names {
                match name {
                    GeneralName::DNSName(_) => facts.dns_names += 1,
                    GeneralName::IPAddress(_) => facts.ip_addresses += 1,
                    GeneralName::RFC822Name(_) => facts.email_addresses += 1,
                    GeneralName::URI(_) => facts.uris += 1,
                    _ => {}
                }
            }
        }
        Ok(facts)
    }

    /// Upstream's subject check for node certificates: organization exactly `system:nodes`;
    /// the common name is checked by the caller, at upstream's point in its order.
    fn is_node_organization(&self) -> Result<(), String> {
        if self.organizations != ["system:nodes"] {
            return Err("subject organization is not system:nodes".into());
        }
        Ok(())
    }

    fn is_node_common_name(&self) -> Result<(), String> {
        if !self.common_name.starts_with("system:node:") {
            return Err("subject common name does not begin with system:node:".into());
        }
        Ok(())
    }
}

/// Whether `usages`, as a set, is `required` with or without `key encipherment` (upstream
/// accepts non-RSA keys without it); upstream's message lists the RSA set, sorted.
fn exact_usages(usages: &[&str], required: &[&str]) -> Result<(), String> {
    let given: std::collections::BTreeSet<&str> = usages.iter().copied().collect();
    let with_rsa: std::collections::BTreeSet<&str> = required
        .iter()
        .copied()
        .chain(["key encipherment"])
        .collect();
    let without_rsa: std::collections::BTreeSet<&str> = required.iter().copied().collect();
    if given == with_rsa || given == without_rsa {
        return Ok(());
    }
    let listed: Vec<&str> = with_rsa.into_iter().collect();
    Err(format!("usages did not match [{}]", listed.join(" ")))
}

/// Upstream's `ValidateKubeletClientCSR`.
fn kubelet_client(facts: &RequestFacts, usages: &[&str]) -> Result<(), String> {
    facts.is_node_organization()?;
    for (count, what) in [
        (facts.dns_names, "DNS"),
        (facts.email_addresses, "Email"),
        (facts.ip_addresses, "IP"),
        (facts.uris, "URI"),
    ] {
        if count > 0 {
            return Err(format!("{what} subjectAltNames are not allowed"));
        }
    }
    facts.is_node_common_name()?;
    exact_usages(usages, &["client auth", "digital signature"])
}

/// Upstream's `ValidateKubeletServingCSR`.
fn kubelet_serving(facts: &RequestFacts, usages: &[&str]) -> Result<(), String> {
    facts.is_node_organization()?;
    if facts.dns_names == 0 && facts.ip_addresses == 0 {
        return Err("DNS or IP subjectAltName is required".into());
    }
    if facts.email_addresses > 0 {
        return Err("Email subjectAltNames are not allowed".into());
    }
    if facts.uris > 0 {
        return Err("URI subjectAltNames are not allowed".into());
    }
    exact_usages(usages, &["digital signature", "server auth"])?;
    facts.is_node_common_name()
}

/// The validity granted: what the request asks, within [10 minutes, a year].
fn validity(request: &Value) -> Duration {
    match request
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_u64)
    {
        Some(seconds) => Duration::from_secs(seconds).clamp(MIN_VALIDITY, MAX_VALIDITY),
        None => MAX_VALIDITY,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usages_must_be_a_client_certificates() {
        assert_eq!(client_usages(&["client auth", "digital signature"]), Ok(()));
        assert_eq!(
            client_usages(&["digital signature"]),
            Err("missing required usage for client certificate: client auth".into())
        );
        assert_eq!(
            client_usages(&["client auth", "server auth"]),
            Err("invalid usage for client certificate: server auth".into())
        );
    }

    fn node(common_name: &str) -> RequestFacts {
        RequestFacts {
            common_name: common_name.into(),
            organizations: vec!["system:nodes".into()],
            ..RequestFacts::default()
        }
    }

    #[test]
    fn kubelet_client_requests_are_a_nodes_without_names() {
        let usages = ["client auth", "digital signature", "key encipherment"];
        assert_eq!(kubelet_client(&node("system:node:a"), &usages), Ok(()));
        assert_eq!(
            kubelet_client(&node("system:node:a"), &usages[..2]),
            Ok(()),
            "an ECDSA key needs no key encipherment"
        );
        let cases = [
            (
                RequestFacts {
                    organizations: vec!["system:nodes".into(), "x".into()],
                    ..node("system:node:a")
                },
                "subject organization is not system:nodes",
            ),
            (
                RequestFacts {
                    ip_addresses: 1,
                    ..node("system:node:a")
                },
                "IP subjectAltNames are not allowed",
            ),
            (
                node("jane"),
                "subject common name does not begin with system:node:",
            ),
        ];
        for (facts, message) in cases {
            assert_eq!(kubelet_client(&facts, &usages), Err(message.into()));
        }
        assert_eq!(
            kubelet_client(&node("system:node:a"), &["client auth"]),
            Err("usages did not match [client auth digital signature key encipherment]".into())
        );
    }

    #[test]
    fn kubelet_serving_requests_name_a_host() {
        let usages = ["digital signature", "key encipherment", "server auth"];
        let named = RequestFacts {
            dns_names: 1,
            ..node("system:node:a")
        };
        assert_eq!(kubelet_serving(&named, &usages), Ok(()));
        assert_eq!(
            kubelet_serving(&node("system:node:a"), &usages),
            Err("DNS or IP subjectAltName is required".into())
        );
        assert_eq!(
            kubelet_serving(&named, &["server auth", "client auth"]),
            Err("usages did not match [digital signature key encipherment server auth]".into())
        );
        assert_eq!(
            kubelet_serving(&RequestFacts { uris: 1, ..named }, &usages),
            Err("URI subjectAltNames are not allowed".into())
        );
    }

    #[test]
    fn validity_honours_expiration_seconds_within_bounds() {
        let with = |seconds: Option<u64>| {
            let mut request = json!({"spec": {}});
            if let Some(seconds) = seconds {
                request["spec"]["expirationSeconds"] = json!(seconds);
            }
            validity(&request)
        };
        assert_eq!(with(Some(3600)), Duration::from_secs(3600));
        assert_eq!(with(None), MAX_VALIDITY);
        assert_eq!(with(Some(10 * MAX_VALIDITY.as_secs())), MAX_VALIDITY);
    }
}
