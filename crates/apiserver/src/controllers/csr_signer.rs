//! The signer of `kubernetes.io/kube-apiserver-client` CertificateSigningRequests, as
//! kube-controller-manager's `csrsigning` controller runs it: once a request is approved (and
//! neither denied nor failed), the server's cluster CA signs it and the certificate is
//! written to `status.certificate` through `/status`. The holder of the key can then
//! authenticate as the request's subject (CN the user, O the groups). It runs with the other
//! controllers, under their Lease.
//!
//! - Usages must include `client auth` and may add only `digital signature` and
//!   `key encipherment`; otherwise the request gets `Failed=True`, reason
//!   `SignerValidationFailure`, with upstream's message, and is not signed.
//! - Validity: `spec.expirationSeconds` when set (at least 10 minutes, at most a year,
//!   upstream's `--cluster-signing-duration` default), else a year; never past the CA.
//!
//! # Caveats
//! - Other signers (`kubernetes.io/kube-apiserver-client-kubelet`,
//!   `kubernetes.io/kubelet-serving`, custom ones) are left to whoever runs them.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

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

/// Signs `request` when it is this signer's, approved and not yet issued; marks it Failed
/// when its usages are not a client certificate's.
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
    if issued
        || certificates::signer_name(request) != KUBE_APISERVER_CLIENT_SIGNER
        || !certificates::is_approved(request)
    {
        return Ok(());
    }
    let usages: Vec<&str> = request
        .pointer("/spec/usages")
        .and_then(Value::as_array)
        .map(|list| list.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let outcome = match client_usages(&usages) {
        Err(why) => Outcome::Failed(why),
        Ok(()) => {
            let der = certificates::request_der(request)
                .map_err(|why| ApiError::internal(format!("the request does not parse: {why}")))?;
            let pem = pki
                .sign_client_request(&der, &usages, validity(request))
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
