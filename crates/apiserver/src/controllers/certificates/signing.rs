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

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{
    Handled, RequestFacts, append_condition, client_usages, follow_requests, kubelet_client,
    kubelet_serving, update_request, usages,
};
use crate::kinds::certificates::{
    self, KUBE_APISERVER_CLIENT_KUBELET_SIGNER, KUBE_APISERVER_CLIENT_SIGNER,
    KUBELET_SERVING_SIGNER,
};
use crate::pki::Pki;
use crate::registry::{Registry, Subresource};
use crate::resources::ResourceType;
use crate::status::{ApiError, ApiResult};

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
    follow_requests(&registry, &shutdown, "csrsigning", |requests, request| {
        let (registry, pki) = (&registry, &pki);
        async move {
            sign_if_due(registry, &requests, pki, &request).await?;
            Ok(Handled::Done)
        }
    })
    .await;
}

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
    let issued = certificates::is_issued(request);
    let signer_name = certificates::signer_name(request);
    let Some(signer) = SIGNERS.iter().find(|s| s.name == signer_name) else {
        return Ok(());
    };
    if issued || !certificates::is_approved(request) {
        return Ok(());
    }
    let usages = usages(request);
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
    update_request(
        registry,
        requests,
        request,
        Subresource::Status,
        "signed",
        |next| match &outcome {
            Outcome::Issued(pem) => {
                use base64::Engine as _;
                next["status"]["certificate"] =
                    json!(base64::engine::general_purpose::STANDARD.encode(pem));
            }
            Outcome::Failed(why) => append_condition(
                next,
                json!({
                    "type": "Failed",
                    "status": "True",
                    "reason": "SignerValidationFailure",
                    "message": why,
                }),
            ),
        },
    )
    .await
}

enum Outcome {
    Issued(String),
    Failed(String),
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
