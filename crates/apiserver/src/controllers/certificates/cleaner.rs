//! kube-controller-manager's `csrcleaner` controller: deletes CertificateSigningRequests once
//! they are done with, so that requests made automatically (kubelets renew their
//! certificates) do not pile up.
//!
//! Once an hour, and once when the controllers start, every request is read and deleted when
//! one of upstream's rules holds:
//! - issued (`Approved` and a certificate) more than an hour after the approval's
//!   `lastUpdateTime`;
//! - `Denied` or `Failed` more than an hour after that condition's `lastUpdateTime`;
//! - pending (no condition at all) for more than a day since its creation;
//! - issued with a certificate whose `notAfter` has passed.
//!
//! A condition without `lastUpdateTime` never counts (upstream's zero time); the server
//! stamps one on every condition written through the API. Each delete is conditional on the
//! request's uid and resourceVersion as read, so a request that changed since (or was
//! re-created under its name) is looked at again on the next pass instead.
//!
//! # Caveats
//! - A certificate that does not parse leaves its request to the other rules (upstream logs
//!   the error and skips the request).

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use chrono::{DateTime, TimeDelta, Utc};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::kinds::certificates;
use crate::registry::{DeleteOptions, ListOptions, Preconditions, Registry};
use crate::resources::ResourceType;
use crate::status::ApiResult;

/// How often every request is looked at (upstream's `pollingInterval`).
pub const POLLING_INTERVAL: Duration = Duration::from_secs(60 * 60);
/// How long an issued, denied or failed request is kept after its condition's last update.
const DECIDED_EXPIRATION: TimeDelta = TimeDelta::hours(1);
/// How long a request nobody decided is kept after its creation.
const PENDING_EXPIRATION: TimeDelta = TimeDelta::hours(24);

pub fn spawn(registry: Arc<Registry>, shutdown: CancellationToken) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let Some(requests) = super::served_requests(&registry, "csrcleaner") else {
            return;
        };
        loop {
            match clean(&registry, &requests, Utc::now()).await {
                Ok(deleted) if deleted > 0 => {
                    tracing::info!(deleted, "CSR cleaner: deleted requests past their deadline")
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(error = %error.message, "CSR cleaner: cannot list requests; next pass in an hour")
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(POLLING_INTERVAL) => {}
            }
        }
    })
}

/// One pass: deletes every request [`why_clean`] names a reason for; the number deleted.
async fn clean(
    registry: &Registry,
    requests: &ResourceType,
    now: DateTime<Utc>,
) -> ApiResult<usize> {
    let list = registry
        .list(requests, None, &ListOptions::default())
        .await?;
    let mut deleted = 0;
    for request in list["items"].as_array().into_iter().flatten() {
        let Some(reason) = why_clean(request, now) else {
            continue;
        };
        let name = crate::object::name(request);
        let options = DeleteOptions {
            preconditions: Preconditions {
                uid: Some(crate::object::uid(request).to_string()),
                resource_version: crate::object::meta_str(request, "resourceVersion")
                    .map(str::to_string),
            },
            ..DeleteOptions::default()
        };
        match registry.delete(requests, None, name, &options).await {
            Ok(_) => {
                tracing::info!(name, reason, "CSR cleaner: deleted a request");
                deleted += 1;
            }
            // Gone already, or changed since it was read: the next pass decides again.
            Err(error) if error.code == 404 || error.code == 409 => {}
            Err(error) => {
                tracing::warn!(name, error = %error.message, "CSR cleaner: cannot delete a request")
            }
        }
    }
    Ok(deleted)
}

/// Why `request` is due for deletion at `now`, in upstream's words; None when it is not.
fn why_clean(request: &Value, now: DateTime<Utc>) -> Option<&'static str> {
    let issued = certificates::is_issued(request);
    let updated_before = |kind: &str, limit: TimeDelta| {
        certificates::conditions_of(request, kind).iter().any(|c| {
            c.get("lastUpdateTime")
                .and_then(Value::as_str)
                .and_then(crate::object::parse_timestamp)
                .is_some_and(|at| now - at > limit)
        })
    };
    let approved = certificates::has_condition(request, "Approved");
    if approved && issued && updated_before("Approved", DECIDED_EXPIRATION) {
        return Some("more than 1h0m0s old and approved");
    }
    if updated_before("Denied", DECIDED_EXPIRATION) {
        return Some("more than 1h0m0s old and denied");
    }
    if updated_before("Failed", DECIDED_EXPIRATION) {
        return Some("more than 1h0m0s old and failed");
    }
    let created = request
        .pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str)
        .and_then(crate::object::parse_timestamp);
    if crate::object::status_conditions(request).is_empty()
        && created.is_some_and(|at| now - at > PENDING_EXPIRATION)
    {
        return Some("more than 24h0m0s old and unhandled");
    }
    if approved && issued && certificate_not_after(request).is_some_and(|end| now > end) {
        return Some("the associated certificate is expired");
    }
    None
}

/// The `notAfter` of the request's issued certificate (its first PEM block).
fn certificate_not_after(request: &Value) -> Option<DateTime<Utc>> {
    let text = request.pointer("/status/certificate")?.as_str()?;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(text)
        .ok()?;
    let (_, block) = x509_parser::pem::parse_x509_pem(&pem).ok()?;
    let certificate = block.parse_x509().ok()?;
    DateTime::from_timestamp(certificate.validity().not_after.timestamp(), 0)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        crate::object::parse_timestamp(text).expect("a time")
    }

    fn request(conditions: Value, certificate: Option<&str>) -> Value {
        let mut request = json!({
            "metadata": {"name": "r", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"conditions": conditions},
        });
        if let Some(certificate) = certificate {
            request["status"]["certificate"] = json!(certificate);
        }
        request
    }

    /// A self-signed certificate valid until `not_after`, base64 of its PEM as the status
    /// carries it.
    fn certificate_until(not_after: (i32, u8, u8)) -> String {
        let key = rcgen::KeyPair::generate().expect("a key");
        let mut params = rcgen::CertificateParams::new(vec!["x".to_string()]).expect("params");
        params.not_before = rcgen::date_time_ymd(2025, 1, 1);
        params.not_after = rcgen::date_time_ymd(not_after.0, not_after.1, not_after.2);
        let certificate = params.self_signed(&key).expect("a certificate");
        base64::engine::general_purpose::STANDARD.encode(certificate.pem())
    }

    #[test]
    fn requests_are_cleaned_by_upstreams_rules() {
        let now = at("2026-01-02T12:00:00Z");
        let condition = |kind: &str, updated: &str| json!([{"type": kind, "status": "True", "lastUpdateTime": updated}]);
        let valid = certificate_until((2030, 1, 1));
        let expired = certificate_until((2026, 1, 2));
        let cases = [
            // Issued an hour and a second ago; issued a minute ago; approved long ago but
            // never issued.
            (
                request(condition("Approved", "2026-01-02T10:59:59Z"), Some(&valid)),
                Some("more than 1h0m0s old and approved"),
            ),
            (
                request(condition("Approved", "2026-01-02T11:59:00Z"), Some(&valid)),
                None,
            ),
            (
                request(condition("Approved", "2026-01-01T00:00:00Z"), None),
                None,
            ),
            (
                request(condition("Denied", "2026-01-02T10:00:00Z"), None),
                Some("more than 1h0m0s old and denied"),
            ),
            (
                request(condition("Denied", "2026-01-02T11:30:00Z"), None),
                None,
            ),
            (
                request(condition("Failed", "2026-01-02T10:00:00Z"), None),
                Some("more than 1h0m0s old and failed"),
            ),
            // Pending since the 1st: more than a day.
            (
                request(json!([]), None),
                Some("more than 24h0m0s old and unhandled"),
            ),
            // Issued a minute ago, but the certificate ended yesterday.
            (
                request(
                    condition("Approved", "2026-01-02T11:59:00Z"),
                    Some(&expired),
                ),
                Some("the associated certificate is expired"),
            ),
            // No lastUpdateTime: upstream's zero time never counts.
            (
                request(json!([{"type": "Denied", "status": "True"}]), None),
                None,
            ),
        ];
        for (index, (request, expected)) in cases.iter().enumerate() {
            assert_eq!(
                why_clean(request, now),
                *expected,
                "case {index}: {request}"
            );
        }
        let mut young = request(json!([]), None);
        young["metadata"]["creationTimestamp"] = json!("2026-01-02T00:00:00Z");
        assert_eq!(why_clean(&young, now), None, "pending for 12 hours");
    }
}
