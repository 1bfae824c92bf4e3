//! The audit filter: each authenticated request is recorded in the audit log
//! (`--audit-log-path`) as the policy (`--audit-policy-file`) says, through the `finale-audit`
//! crate, at upstream's place in the chain: after authentication, before impersonation and
//! authorization, so refused requests are recorded too, with the authorizer's decision.
//!
//! Per request: `RequestReceived` when it arrives; the request body at level `Request` and
//! above; `ResponseStarted` when a watch's headers go out; `ResponseComplete` when the
//! response is complete (a watch's when its stream ends), with the response's `Status` and,
//! at `RequestResponse`, its body. Annotations: `authorization.k8s.io/decision` and
//! `authorization.k8s.io/reason`, and `finale.dev/finalizers-added` /
//! `finale.dev/finalizers-removed` when a write changed an object's finalizers, so a
//! `Metadata`-level log answers who removed a finalizer, when and from where; and what
//! admission added (webhooks' and ValidatingAdmissionPolicies' audit annotations, a policy's
//! `validation.policy.admission.k8s.io/validation_failure`; see
//! [`crate::admission::audit_annotations`]).
//!
//! # Caveats
//! - `impersonatedUser` is not filled; the event's `user` is who sent the request.
//! - The in-process controllers write without HTTP and are not in the audit log; their writes
//!   name them in finalizer provenance instead.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use finale_audit::{
    AuditLog, Level, RequestAttributes, RequestAudit, RequestMetadata, ResponseStatus, Stage,
    UserInfo,
};
use futures::StreamExt as _;
use http::header;
use serde_json::Value;

use super::AppState;
use crate::admission::audit_annotations::AuditAnnotations;
use crate::authn::Identity;
use crate::registry::provenance::FinalizerChanges;

/// The client's address, attached to every request by the accept loop.
#[derive(Clone, Copy, Debug)]
pub struct PeerAddress(pub SocketAddr);

/// What the authorizer decided, attached to the response for the audit filter.
#[derive(Clone, Debug)]
pub struct AuthorizationDecision {
    pub allowed: bool,
    pub reason: String,
}

/// Response bodies larger than this are not parsed for the audit log (a `Status` is small).
const MAX_AUDITED_RESPONSE_BYTES: usize = 3 * 1024 * 1024;

/// Middleware: records the request in the audit log, when one is configured.
pub async fn audit(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let Some(audit) = state.audit.clone() else {
        return next.run(request).await;
    };
    let Some(identity) = request.extensions().get::<Identity>().cloned() else {
        return next.run(request).await;
    };
    let attributes = crate::authz::Attributes::from_request(
        identity.clone(),
        request.method(),
        request.uri().path(),
        request.uri().query(),
    );
    let audit_attributes = RequestAttributes {
        user: Some(&identity.user),
        groups: &identity.groups,
        verb: &attributes.verb,
        resource_request: attributes.resource_request,
        api_group: &attributes.api_group,
        api_version: &attributes.api_version,
        resource: &attributes.resource,
        subresource: &attributes.subresource,
        namespace: &attributes.namespace,
        name: &attributes.name,
        path: &attributes.path,
    };
    let config = audit.policy.evaluate(&audit_attributes);
    let metadata = RequestMetadata {
        audit_id: request
            .headers()
            .get("Audit-ID")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        request_uri: request
            .uri()
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_default(),
        user: user_info(&identity),
        source_ips: source_ips(&request),
        user_agent: request
            .headers()
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string(),
        received_at: chrono::Utc::now(),
    };
    let Some(mut record) = RequestAudit::new(config, &audit_attributes, metadata) else {
        return next.run(request).await;
    };
    log_stage(&audit.log, &mut record, Stage::RequestReceived, None);
    let watch = super::limits::is_watch(&request);

    // The body is read here when the policy keeps it (or it names the object).
    let has_body = matches!(
        *request.method(),
        http::Method::POST | http::Method::PUT | http::Method::PATCH
    );
    let request = if has_body {
        let (parts, body) = request.into_parts();
        let bytes = match super::resource::read_body(body).await {
            Ok(bytes) => bytes,
            Err(error) => {
                let response = error.into_response();
                let status = ResponseStatus::failure(response.status().as_u16(), "", "");
                log_stage(
                    &audit.log,
                    &mut record,
                    Stage::ResponseComplete,
                    Some(status),
                );
                return response;
            }
        };
        // A patch is recorded as sent; any other body as the handler decodes it (JSON, YAML
        // or kubectl's protobuf). Below `Request` only the object's identity is kept, so a
        // JSON body is scanned for its metadata, not built into a tree.
        let identity_only = record.config().level < Level::Request;
        let decoded = if parts.method == http::Method::PATCH {
            (!identity_only)
                .then(|| serde_json::from_slice::<Value>(&bytes).ok())
                .flatten()
        } else if identity_only && super::resource::is_json(&parts.headers) {
            metadata_of(&bytes)
        } else {
            super::resource::decode_object(&parts.headers, &bytes).ok()
        };
        if let Some(object) = decoded {
            if parts.method == http::Method::PATCH {
                record.request_patch(&object);
            } else {
                record.request_object(&object);
            }
        }
        Request::from_parts(parts, Body::from(bytes))
    } else {
        request
    };

    let changes = FinalizerChanges::default();
    let admission_annotations = AuditAnnotations::default();
    let response = changes
        .scope(admission_annotations.scope(next.run(request)))
        .await;
    for (key, value) in admission_annotations.added() {
        record.annotate(key, value);
    }
    if let Some(decision) = response.extensions().get::<AuthorizationDecision>() {
        record.annotate(
            "authorization.k8s.io/decision",
            if decision.allowed { "allow" } else { "forbid" },
        );
        record.annotate("authorization.k8s.io/reason", decision.reason.clone());
    }
    let (added, removed) = changes.summary();
    if !added.is_empty() {
        record.annotate("finale.dev/finalizers-added", added.join(","));
    }
    if !removed.is_empty() {
        record.annotate("finale.dev/finalizers-removed", removed.join(","));
    }

    let code = response.status().as_u16();
    if watch && response.status().is_success() {
        log_stage(
            &audit.log,
            &mut record,
            Stage::ResponseStarted,
            Some(ResponseStatus::code(code)),
        );
        return complete_when_streamed(response, record, Arc::clone(&audit), code);
    }
    let wants_body = code >= 400 || record.config().level >= Level::RequestResponse;
    if !wants_body {
        log_stage(
            &audit.log,
            &mut record,
            Stage::ResponseComplete,
            Some(ResponseStatus::code(code)),
        );
        return response;
    }
    let (parts, body) = response.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_AUDITED_RESPONSE_BYTES).await {
        Ok(bytes) => bytes,
        Err(error) => {
            tracing::warn!(%error, "cannot read a response body for the audit log");
            log_stage(
                &audit.log,
                &mut record,
                Stage::ResponseComplete,
                Some(ResponseStatus::code(code)),
            );
            return Response::from_parts(parts, Body::empty());
        }
    };
    let status = match serde_json::from_slice::<Value>(&bytes) {
        Ok(object) => {
            record.response_object(&object);
            ResponseStatus::from_status_object(&object).unwrap_or(ResponseStatus::code(code))
        }
        Err(_) => ResponseStatus::code(code),
    };
    log_stage(
        &audit.log,
        &mut record,
        Stage::ResponseComplete,
        Some(status),
    );
    Response::from_parts(parts, Body::from(bytes))
}

fn log_stage(
    log: &AuditLog,
    record: &mut RequestAudit,
    stage: Stage,
    status: Option<ResponseStatus>,
) {
    if let Some(event) = record.stage(stage, status) {
        log.log(event);
    }
}

/// A watch's `ResponseComplete` is written when its stream ends (or the client goes away).
fn complete_when_streamed(
    response: Response,
    record: RequestAudit,
    audit: Arc<finale_audit::Audit>,
    code: u16,
) -> Response {
    struct CompleteOnDrop {
        record: RequestAudit,
        audit: Arc<finale_audit::Audit>,
        code: u16,
    }
    impl Drop for CompleteOnDrop {
        fn drop(&mut self) {
            log_stage(
                &self.audit.log,
                &mut self.record,
                Stage::ResponseComplete,
                Some(ResponseStatus::code(self.code)),
            );
        }
    }
    let guard = CompleteOnDrop {
        record,
        audit,
        code,
    };
    let (parts, body) = response.into_parts();
    let stream = body.into_data_stream().map(move |chunk| {
        let _held = &guard;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(stream))
}

fn user_info(identity: &Identity) -> UserInfo {
    UserInfo {
        username: identity.user.clone(),
        uid: identity.uid.clone(),
        groups: identity.groups.clone(),
        extra: identity.extra.clone(),
    }
}

/// Upstream's `SourceIPs`: `X-Forwarded-For`, then `X-Real-Ip`, then the peer.
fn source_ips(request: &Request) -> Vec<String> {
    let mut ips: Vec<String> = request
        .headers()
        .get("X-Forwarded-For")
        .and_then(|v| v.to_str().ok())
        .map(|list| {
            list.split(',')
                .map(str::trim)
                .filter(|ip| ip.parse::<std::net::IpAddr>().is_ok())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    if let Some(real) = request
        .headers()
        .get("X-Real-Ip")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|ip| ip.parse::<std::net::IpAddr>().is_ok())
        && !ips.iter().any(|ip| ip == real)
    {
        ips.push(real.to_string());
    }
    if let Some(PeerAddress(peer)) = request.extensions().get::<PeerAddress>() {
        let peer = peer.ip().to_string();
        if !ips.contains(&peer) {
            ips.push(peer);
        }
    }
    ips
}

/// `{"metadata": {namespace, name, uid, resourceVersion}}` of a JSON object, read without
/// building the rest of it: what a `Metadata`-level event keeps of a request body.
fn metadata_of(body: &[u8]) -> Option<Value> {
    #[derive(serde::Deserialize)]
    struct Partial {
        #[serde(default)]
        metadata: Option<Identity>,
    }
    #[derive(serde::Deserialize, serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Identity {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        uid: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resource_version: Option<String>,
    }
    let partial: Partial = serde_json::from_slice(body).ok()?;
    Some(serde_json::json!({ "metadata": partial.metadata? }))
}
