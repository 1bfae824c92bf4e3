//! kube-controller-manager's certificate controllers, run inside the server under the
//! controllers' Lease, each as its own task acting through the registry:
//! - [`signing`] (`csrsigning`): issues certificates for approved requests of the
//!   `kubernetes.io/*` signers, with the cluster CA;
//! - [`approving`] (`csrapproving`): approves kubelets' client-certificate requests when the
//!   requester may create `certificatesigningrequests/nodeclient` (or `/selfnodeclient`, for
//!   its own node), as a SubjectAccessReview would answer;
//! - [`cleaner`] (`csrcleaner`): deletes requests once they are done with: issued, denied or
//!   failed more than an hour ago, pending for a day, or whose certificate has expired.
//!
//! This module holds what they share: following every request, and reading a PKCS#10
//! request the way upstream's checks read it.

pub mod approving;
pub mod cleaner;
pub mod signing;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use x509_parser::prelude::FromDer as _;

use crate::kinds::certificates;
use crate::registry::{ListOptions, Registry, Subresource, WriteOptions};
use crate::resources::ResourceType;
use crate::status::{ApiError, ApiResult};
use crate::watch_cache::WatchItem;

/// The identity the certificate controllers write as (upstream's controller-manager's).
pub const CONTROLLER_MANAGER_USER: &str = "system:kube-controller-manager";

/// What a controller made of a request.
pub(super) enum Handled {
    /// Nothing more to do until the request changes.
    Done,
    /// Not yet (the reason is logged at debug level): look again after a backoff, as
    /// upstream's controllers requeue an "ignorable" error.
    Retry(String),
}

/// The first retry's delay; each next one doubles, up to [`RETRY_MAX`] (client-go's default
/// per-item rate limiter).
const RETRY_FIRST: Duration = Duration::from_millis(5);
const RETRY_MAX: Duration = Duration::from_secs(1000);

/// Per-request retries: each request's attempts so far, and the queue a due retry is sent to.
struct Backoff {
    attempts: HashMap<String, u32>,
    retries: mpsc::UnboundedSender<String>,
}

impl Backoff {
    /// Sends `name` to the queue after its next delay.
    fn later(&mut self, name: String) {
        let attempt = self.attempts.entry(name.clone()).or_insert(0);
        let delay = RETRY_FIRST
            .saturating_mul(1 << (*attempt).min(20))
            .min(RETRY_MAX);
        *attempt += 1;
        super::enqueue_after(&self.retries, name, delay);
    }

    /// The request is handled or gone: its next retry, if one comes, starts over.
    fn forget(&mut self, name: &str) {
        self.attempts.remove(name);
    }
}

/// The served `certificatesigningrequests` resource; None, logged as `controller` failing
/// to start, when it is not served.
pub(super) fn served_requests(registry: &Registry, controller: &str) -> Option<Arc<ResourceType>> {
    let requests = registry
        .catalog()
        .lookup(certificates::GROUP, "v1", certificates::PLURAL);
    if requests.is_none() {
        tracing::error!(
            controller,
            "a certificate controller cannot start: certificatesigningrequests are not served"
        );
    }
    requests
}

/// Calls `handle` with every CertificateSigningRequest that is created or changes, until
/// `shutdown`. The watch starts from a full list, so requests written while no controller
/// ran are handled at start; a watch that ends is opened again after half a second. A
/// request `handle` fails (logged at warning level with `controller`) or asks to retry is
/// read again and handled after a backoff that doubles with each attempt, as upstream's
/// work queues do, until it is handled, changes or is deleted.
pub(super) async fn follow_requests<F, Fut>(
    registry: &Registry,
    shutdown: &CancellationToken,
    controller: &str,
    handle: F,
) where
    F: Fn(Arc<ResourceType>, Arc<Value>) -> Fut,
    Fut: Future<Output = ApiResult<Handled>>,
{
    let Some(requests) = served_requests(registry, controller) else {
        return;
    };
    let (retries, mut due) = mpsc::unbounded_channel::<String>();
    let mut backoff = Backoff {
        attempts: HashMap::new(),
        retries,
    };
    loop {
        let mut events = match registry
            .watch(Arc::clone(&requests), None, &ListOptions::default(), false)
            .await
        {
            Ok(events) => events,
            Err(error) => {
                tracing::warn!(controller, error = %error.message, "cannot watch CertificateSigningRequests; retrying");
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_millis(500)) => continue,
                }
            }
        };
        loop {
            let request = tokio::select! {
                _ = shutdown.cancelled() => return,
                item = events.next() => match item {
                    Some(WatchItem::Change { event_type: "DELETED", object, .. }) => {
                        backoff.forget(crate::object::name(&object));
                        continue;
                    }
                    Some(WatchItem::Change { object, .. }) => object,
                    Some(WatchItem::Error(_)) | None => break,
                    Some(_) => continue,
                },
                Some(name) = due.recv() => match registry.get(&requests, None, &name).await {
                    Ok(object) => Arc::new(object),
                    Err(error) if error.code == 404 => {
                        backoff.forget(&name);
                        continue;
                    }
                    Err(error) => {
                        tracing::warn!(controller, name, error = %error.message, "cannot read a CertificateSigningRequest to retry it");
                        backoff.later(name);
                        continue;
                    }
                },
            };
            let name = crate::object::name(&request).to_string();
            match handle(Arc::clone(&requests), request).await {
                Ok(Handled::Done) => backoff.forget(&name),
                Ok(Handled::Retry(why)) => {
                    tracing::debug!(
                        controller,
                        name,
                        why,
                        "will look at a CertificateSigningRequest again"
                    );
                    backoff.later(name);
                }
                Err(error) => {
                    tracing::warn!(controller, name, error = %error.message, "could not handle a CertificateSigningRequest; will retry");
                    backoff.later(name);
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
}

/// Writes `change` to the stored request named as `request` is, through `subresource`, and
/// only to that very request: one deleted and re-created under its name meanwhile gets a 409
/// ("… while it was being `doing`") and waits its own turn.
pub(super) async fn update_request(
    registry: &Registry,
    requests: &ResourceType,
    request: &Value,
    subresource: Subresource,
    doing: &str,
    change: impl Fn(&mut Value),
) -> ApiResult<()> {
    let name = crate::object::name(request);
    let uid = crate::object::uid(request);
    registry
        .guarded_update(
            requests,
            None,
            name,
            None,
            subresource,
            &WriteOptions::default(),
            |current| {
                if crate::object::uid(current) != uid {
                    return Err(ApiError::conflict(
                        crate::status::Target {
                            group: certificates::GROUP,
                            resource: certificates::PLURAL,
                            name,
                        },
                        &format!("the request was replaced while it was being {doing}"),
                    ));
                }
                let mut next = current.clone();
                if !next["status"].is_object() {
                    next["status"] = json!({});
                }
                change(&mut next);
                Ok(next)
            },
        )
        .await?;
    Ok(())
}

/// Appends `condition` to the request's `status.conditions`.
pub(super) fn append_condition(request: &mut Value, condition: Value) {
    let mut conditions = request["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    conditions.push(condition);
    request["status"]["conditions"] = Value::Array(conditions);
}

/// The request's `spec.usages`.
pub(super) fn usages(request: &Value) -> Vec<&str> {
    request
        .pointer("/spec/usages")
        .and_then(Value::as_array)
        .map(|list| list.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Upstream's `validAPIServerClientUsages`.
pub(super) fn client_usages(usages: &[&str]) -> Result<(), String> {
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
pub(super) struct RequestFacts {
    pub(super) common_name: String,
    organizations: Vec<String>,
    dns_names: usize,
    ip_addresses: usize,
    email_addresses: usize,
    uris: usize,
}

impl RequestFacts {
    pub(super) fn parse(der: &[u8]) -> Result<RequestFacts, String> {
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

/// Upstream's `ValidateKubeletClientCSR` (`IsKubeletClientCSR` when it passes).
pub(super) fn kubelet_client(facts: &RequestFacts, usages: &[&str]) -> Result<(), String> {
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
pub(super) fn kubelet_serving(facts: &RequestFacts, usages: &[&str]) -> Result<(), String> {
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
}
