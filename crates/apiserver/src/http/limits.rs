//! kube-apiserver's `--max-requests-inflight` and `--max-mutating-requests-inflight`: at most
//! so many requests of each kind are served at once, and the next gets 429 with
//! `Retry-After: 1` instead of queueing.
//!
//! As upstream (`WithMaxInFlightLimit`), the limit applies after authentication and skips
//! long-running requests (watches) and members of `system:masters`; like upstream's
//! priority-and-fairness defaults, health probes (`/livez`, `/readyz`, `/healthz`, outside
//! the authenticated routes) are never limited. Read-only means GET and HEAD (upstream: the
//! verbs get, list, watch); every other method counts as mutating. A limit of 0 means none.
//!
//! Upstream answers with the plain-text line `Too many requests, please try again later.`;
//! this server sends the same sentence in a `Status` (reason `TooManyRequests`,
//! `details.retryAfterSeconds: 1`), which client-go and kube-rs decode as such.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, Method, header};
use tokio::sync::Semaphore;

use super::AppState;
use crate::authn::Identity;
use crate::pki::MASTERS_GROUP;
use crate::status::{ApiError, Details};

/// Upstream's default `--max-requests-inflight`.
pub const DEFAULT_MAX_REQUESTS_INFLIGHT: usize = 400;
/// Upstream's default `--max-mutating-requests-inflight`.
pub const DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT: usize = 200;

/// Seconds a refused client is told to wait (upstream's constant).
const RETRY_AFTER_SECONDS: u64 = 1;

/// Whether a request counts against the read-only or the mutating limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestKind {
    ReadOnly,
    Mutating,
}

impl RequestKind {
    /// The `request_kind` label upstream's `apiserver_dropped_requests_total` uses.
    pub fn label(self) -> &'static str {
        match self {
            RequestKind::ReadOnly => "readOnly",
            RequestKind::Mutating => "mutating",
        }
    }
}

/// The two pools of in-flight slots.
pub struct InflightLimits {
    read_only: Option<Arc<Semaphore>>,
    mutating: Option<Arc<Semaphore>>,
}

impl InflightLimits {
    /// `0` leaves that kind unlimited, as upstream.
    pub fn new(max_read_only: usize, max_mutating: usize) -> InflightLimits {
        let pool = |limit: usize| (limit > 0).then(|| Arc::new(Semaphore::new(limit)));
        InflightLimits {
            read_only: pool(max_read_only),
            mutating: pool(max_mutating),
        }
    }

    fn pool(&self, kind: RequestKind) -> Option<&Arc<Semaphore>> {
        match kind {
            RequestKind::ReadOnly => self.read_only.as_ref(),
            RequestKind::Mutating => self.mutating.as_ref(),
        }
    }
}

/// What a request is for the limits: `None` for those never limited.
fn classify(request: &Request) -> Option<RequestKind> {
    let exempt_user = request
        .extensions()
        .get::<Identity>()
        .is_some_and(|identity| identity.groups.iter().any(|g| g == MASTERS_GROUP));
    if exempt_user || is_watch(request) {
        return None;
    }
    Some(match *request.method() {
        Method::GET | Method::HEAD => RequestKind::ReadOnly,
        _ => RequestKind::Mutating,
    })
}

/// A `watch=true`/`watch=1` request: long-running, like upstream's `watch` verb.
pub(super) fn is_watch(request: &Request) -> bool {
    request.method() == Method::GET
        && request
            .uri()
            .query()
            .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"))
}

/// Middleware (after authentication): holds a slot of the request's kind while its handler
/// runs, or answers 429 when none is free.
pub async fn limit(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let Some(kind) = classify(&request) else {
        return next.run(request).await;
    };
    let Some(pool) = state.inflight.pool(kind) else {
        return next.run(request).await;
    };
    match Arc::clone(pool).try_acquire_owned() {
        Ok(_slot) => next.run(request).await,
        Err(_) => {
            state.metrics.observe_dropped(kind.label());
            too_many_requests()
        }
    }
}

fn too_many_requests() -> Response {
    let mut response = ApiError::new(
        429,
        "TooManyRequests",
        "Too many requests, please try again later.",
    )
    .with_details(Details {
        retry_after_seconds: Some(RETRY_AFTER_SECONDS),
        ..Details::default()
    })
    .into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;

    fn request(method: Method, uri: &str, groups: &[&str]) -> Request {
        let mut request = Request::builder()
            .method(method)
            .uri(uri)
            .body(Body::empty())
            .unwrap();
        request.extensions_mut().insert(Identity {
            user: "alice".into(),
            uid: String::new(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            extra: Default::default(),
        });
        request
    }

    #[test]
    fn requests_are_classified_as_upstream_does() {
        let plain = ["system:authenticated"];
        assert_eq!(
            classify(&request(Method::GET, "/api/v1/pods", &plain)),
            Some(RequestKind::ReadOnly)
        );
        assert_eq!(
            classify(&request(Method::HEAD, "/version", &plain)),
            Some(RequestKind::ReadOnly)
        );
        for method in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            assert_eq!(
                classify(&request(method.clone(), "/api/v1/pods", &plain)),
                Some(RequestKind::Mutating),
                "{method}"
            );
        }
        let junk = Method::from_bytes(b"FOO123").unwrap();
        assert_eq!(
            classify(&request(junk, "/api", &plain)),
            Some(RequestKind::Mutating)
        );
        // Watches are long-running; system:masters is never limited.
        assert_eq!(
            classify(&request(Method::GET, "/api/v1/pods?watch=true", &plain)),
            None
        );
        assert_eq!(
            classify(&request(Method::GET, "/api/v1/pods?a=b&watch=1", &plain)),
            None
        );
        assert_eq!(
            classify(&request(
                Method::POST,
                "/api/v1/pods",
                &["system:masters", "system:authenticated"]
            )),
            None
        );
    }

    #[tokio::test]
    async fn a_full_pool_refuses_with_upstreams_429() {
        let limits = InflightLimits::new(1, 0);
        assert!(
            limits.pool(RequestKind::Mutating).is_none(),
            "0 is unlimited"
        );
        let pool = limits.pool(RequestKind::ReadOnly).unwrap();
        let held = Arc::clone(pool).try_acquire_owned().unwrap();
        assert!(Arc::clone(pool).try_acquire_owned().is_err());
        drop(held);
        assert!(Arc::clone(pool).try_acquire_owned().is_ok());

        let response = too_many_requests();
        assert_eq!(response.status(), 429);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        let status: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(status["reason"], "TooManyRequests");
        assert_eq!(status["code"], 429);
        assert_eq!(
            status["message"],
            "Too many requests, please try again later."
        );
        assert_eq!(status["details"]["retryAfterSeconds"], 1);
    }
}
