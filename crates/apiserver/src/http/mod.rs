//! The HTTP surface: routes, authentication, content negotiation and `Status` responses.
//!
//! Handlers here translate requests into registry calls and registry results into responses;
//! no lifecycle rule lives in this module.

pub mod audit;
mod component_status;
pub mod health;
mod jsonpath;
pub mod limits;
mod metadata;
mod path;
mod pod;
mod resource;
mod table;
mod watch;
mod yaml;

#[cfg(test)]
mod fuzz;

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::authn::{Authenticator, ClientCertificate, Identity};
use crate::discovery::{self, AGGREGATED_DISCOVERY_V2};
use crate::metrics::Metrics;
use crate::openapi;
use crate::registry::Registry;
use crate::status::ApiError;

pub use path::{ApiPath, ResourcePath, parse as parse_path};

/// Everything a request handler needs, behind one `Arc`: every middleware and handler takes
/// the state by value, so a clone per layer must cost one reference count, not one per part
/// (a dozen contended atomics and a `String` per layer were 3% of the server's CPU).
#[derive(Clone)]
pub struct AppState(Arc<ServerState>);

impl AppState {
    pub fn new(state: ServerState) -> AppState {
        AppState(Arc::new(state))
    }
}

impl std::ops::Deref for AppState {
    type Target = ServerState;

    fn deref(&self) -> &ServerState {
        &self.0
    }
}

/// What [`AppState`] shares.
pub struct ServerState {
    pub registry: Arc<Registry>,
    pub authenticator: Arc<Authenticator>,
    /// Decides what each identity may do (RBAC).
    pub authorizer: Arc<crate::authz::Authorizer>,
    pub metrics: Arc<Metrics>,
    /// `host:port` clients reach the server at, for `/api`'s serverAddressByClientCIDRs.
    pub server_address: String,
    /// Cancelled at shutdown so long-lived watch streams end and connections can drain.
    pub shutdown: CancellationToken,
    /// What `/healthz`, `/livez` and `/readyz` check.
    pub health: Arc<health::Health>,
    /// `--max-requests-inflight` and `--max-mutating-requests-inflight`.
    pub inflight: Arc<limits::InflightLimits>,
    /// Answers `DeletionReview`s.
    pub insight: Arc<crate::insight::Insight>,
    /// The audit policy and log (`--audit-log-path`), if any.
    pub audit: Option<Arc<finale_audit::Audit>>,
    /// The OpenAPI documents, rendered once per catalog generation.
    pub openapi: Arc<openapi::OpenApi>,
    /// Reaches node agents for `pods/log`.
    pub node_client: Option<Arc<crate::node_client::NodeClient>>,
}

/// Builds the router for every endpoint the server offers.
pub fn router(state: AppState) -> Router {
    let authenticated = Router::new()
        .route("/version", get(version))
        .route("/api", get(api_root))
        .route("/apis", get(apis_root))
        .route("/api/{*rest}", any(resource::dispatch))
        .route("/apis/{*rest}", any(resource::dispatch))
        .route("/openapi/v3", get(openapi_index))
        .route("/openapi/v3/{*rest}", get(openapi_document))
        .route("/openapi/v2", get(openapi_v2))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        // Layers run outside-in: authentication first, then the audit log (refusals are
        // recorded too), then impersonation and authorization, then the in-flight limits,
        // which need the identity (system:masters is exempt).
        .route_layer(middleware::from_fn_with_state(state.clone(), limits::limit))
        .route_layer(middleware::from_fn_with_state(state.clone(), authorize))
        .route_layer(middleware::from_fn_with_state(state.clone(), audit::audit))
        .route_layer(middleware::from_fn_with_state(state.clone(), authenticate));
    Router::new()
        .route("/healthz", get(health::endpoint))
        .route("/livez", get(health::endpoint))
        .route("/readyz", get(health::endpoint))
        .route("/healthz/{check}", get(health::single))
        .route("/livez/{check}", get(health::single))
        .route("/readyz/{check}", get(health::single))
        .merge(authenticated)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            record_metrics,
        ))
        // Bodies are read with our own limit so that an oversized one gets a `Status`.
        .layer(DefaultBodyLimit::disable())
        .with_state(state)
}

/// Renders an error as a Kubernetes `Status` response.
impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        json_response(code, &self.to_status())
    }
}

pub(crate) fn json_response(code: StatusCode, body: &Value) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    (
        code,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        bytes,
    )
        .into_response()
}

/// Authenticates with the connection's client certificate (attached by the accept loop) or
/// the request's bearer token, and hands the identity on as a request extension.
async fn authenticate(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let certificate = request
        .extensions()
        .get::<ClientCertificate>()
        .cloned()
        .unwrap_or(ClientCertificate::Absent);
    match state
        .authenticator
        .authenticate(&certificate, request.headers())
        .await
    {
        Ok(identity) => {
            request.extensions_mut().insert(identity);
            next.run(request).await
        }
        Err(error) => {
            tracing::debug!(%error, path = %request.uri().path(), "unauthenticated request");
            ApiError::unauthorized(error.to_string()).into_response()
        }
    }
}

/// Replaces the authenticated identity with the impersonated one when the request asks for
/// it and may, then authorizes the request as that identity: a 403 `Status` worded as
/// kube-apiserver's when it may not.
async fn authorize(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let Some(sender) = request.extensions().get::<Identity>().cloned() else {
        return ApiError::internal("an authenticated request carries no identity").into_response();
    };
    let identity = match crate::authz::impersonation::acting_identity(
        &state.authorizer,
        &sender,
        request.headers(),
    ) {
        Ok(identity) => identity,
        Err(error) => return error.into_response(),
    };
    let attributes = crate::authz::Attributes::from_request(
        identity.clone(),
        request.method(),
        request.uri().path(),
        request.uri().query(),
    );
    let decision = state.authorizer.authorize(&attributes);
    let recorded = audit::AuthorizationDecision {
        allowed: decision.allowed,
        reason: decision.reason.clone(),
    };
    let mut response = if decision.allowed {
        request.extensions_mut().insert(identity);
        next.run(request).await
    } else {
        tracing::debug!(user = %identity.user, verb = %attributes.verb, resource = %attributes.combined_resource(), path = %attributes.path, "request forbidden");
        crate::authz::forbidden(&attributes, &decision.reason).into_response()
    };
    if state.audit.is_some() {
        response.extensions_mut().insert(recorded);
    }
    response
}

async fn record_metrics(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let apply = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/apply-patch+yaml"));
    let verb = crate::metrics::request_verb(request.method(), limits::is_watch(&request), apply);
    let response = next.run(request).await;
    state
        .metrics
        .observe_request(verb, response.status().as_u16(), started.elapsed());
    response
}

async fn version() -> Response {
    json_response(StatusCode::OK, &discovery::version())
}

fn discovery_response(
    headers: &HeaderMap,
    aggregated: impl FnOnce() -> Value,
    legacy: impl FnOnce() -> Value,
) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    if discovery::wants_aggregated(accept) {
        let body = serde_json::to_vec(&aggregated()).unwrap_or_default();
        return (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(AGGREGATED_DISCOVERY_V2),
            )],
            body,
        )
            .into_response();
    }
    json_response(StatusCode::OK, &legacy())
}

async fn api_root(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let catalog = state.registry.catalog();
    discovery_response(
        &headers,
        || discovery::aggregated(catalog, true),
        || discovery::core_versions(&state.server_address),
    )
}

async fn apis_root(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let catalog = state.registry.catalog();
    discovery_response(
        &headers,
        || discovery::aggregated(catalog, false),
        || discovery::group_list(catalog),
    )
}

async fn openapi_index(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let v3 = state.openapi.v3(state.registry.catalog());
    openapi_response(&headers, &v3.index, "application/json", false)
}

/// `/openapi/v3/<path>[?hash=]`: a stale hash is redirected to the current one, as upstream
/// does, so a client never caches one document under another's hash.
async fn openapi_document(
    State(state): State<AppState>,
    axum::extract::Path(rest): axum::extract::Path<String>,
    uri: http::Uri,
    headers: HeaderMap,
) -> Response {
    let v3 = state.openapi.v3(state.registry.catalog());
    let path = rest.trim_matches('/');
    let Some(document) = v3.documents.get(path) else {
        return ApiError::new(
            404,
            "NotFound",
            format!("no OpenAPI document for {path:?}; GET /openapi/v3 lists them"),
        )
        .into_response();
    };
    let asked_hash = form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
        .find(|(key, _)| key == "hash")
        .map(|(_, hash)| hash);
    match asked_hash {
        Some(hash) if *hash != document.hash => {
            let location = format!("/openapi/v3/{path}?hash={}", document.hash);
            match HeaderValue::from_str(&location) {
                Ok(location) => (
                    StatusCode::MOVED_PERMANENTLY,
                    [(header::LOCATION, location)],
                )
                    .into_response(),
                Err(_) => openapi_response(&headers, document, "application/json", false),
            }
        }
        Some(_) => openapi_response(&headers, document, "application/json", true),
        None => openapi_response(&headers, document, "application/json", false),
    }
}

/// `/openapi/v2`: protobuf when the client asks for it (client-go always does), else JSON.
async fn openapi_v2(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let v2 = state.openapi.v2(state.registry.catalog());
    let wants_protobuf = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|accept| accept.contains("protobuf"));
    if wants_protobuf {
        openapi_response(&headers, &v2.protobuf, openapi::V2_PROTOBUF, false)
    } else {
        openapi_response(&headers, &v2.json, "application/json", false)
    }
}

/// A rendered document with its ETag; 304 when the client already has it.
fn openapi_response(
    headers: &HeaderMap,
    document: &openapi::Rendered,
    content_type: &'static str,
    immutable: bool,
) -> Response {
    let etag = document.etag();
    let cached = headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|tag| {
            let tag = tag.trim();
            tag == "*" || tag.trim_start_matches("W/") == etag
        });
    let cache_control = if immutable {
        "public, immutable"
    } else {
        "no-cache, private"
    };
    let mut response = if cached {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (
            StatusCode::OK,
            [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
            document.body.clone(),
        )
            .into_response()
    };
    let response_headers = response.headers_mut();
    if let Ok(etag) = HeaderValue::from_str(&etag) {
        response_headers.insert(header::ETAG, etag);
    }
    response_headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(cache_control),
    );
    response_headers.insert(header::VARY, HeaderValue::from_static("Accept"));
    response
}

async fn metrics(State(state): State<AppState>) -> Response {
    state.metrics.set_store_health(&state.health.store.health());
    match state.insight.figures().await {
        Ok(figures) => state.metrics.set_deletion_figures(&figures),
        // The other metrics are still worth serving; the deletion gauges keep their values.
        Err(error) => tracing::warn!(%error, "cannot compute the deletion metrics"),
    }
    match state.metrics.encode() {
        Ok(text) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            )],
            text,
        )
            .into_response(),
        Err(error) => ApiError::internal(format!("cannot encode metrics: {error}")).into_response(),
    }
}

async fn not_found(request: Request<Body>) -> Response {
    ApiError::new(
        404,
        "NotFound",
        format!(
            "the server could not find the requested resource ({})",
            request.uri().path()
        ),
    )
    .into_response()
}
