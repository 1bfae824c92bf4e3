//! Handlers for resource paths: parse the request, call the registry, shape the response.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use http_body_util::BodyExt;
use rand::Rng;
use serde_json::Value;

use super::path::{ApiPath, ResourcePath, parse};
use super::{AppState, json_response, metadata, table, watch};
use crate::discovery;
use crate::field_validation::{self, FieldValidation};
use crate::registry::{
    Actor, DeleteOptions, ListOptions, PatchFormat, Preconditions, Subresource, WriteOptions,
    Written, manager_from_user_agent,
};
use crate::resources::{ResourceType, ServedBy};
use crate::scale;
use crate::status::{ApiError, ApiResult};

/// The largest request body accepted, as upstream's default (3 MiB).
pub const MAX_REQUEST_BODY_BYTES: usize = 3 * 1024 * 1024;

/// Query parameters, parsed leniently: kube-rs sends `?&a=b` and bare `?`.
pub(super) struct Query(HashMap<String, String>);

impl Query {
    pub(super) fn parse(raw: Option<&str>) -> Self {
        let pairs = form_urlencoded::parse(raw.unwrap_or_default().as_bytes())
            .filter(|(k, _)| !k.is_empty())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        Query(pairs)
    }

    pub(super) fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    fn flag(&self, key: &str) -> bool {
        crate::query::flag(self.get(key))
    }

    fn number(&self, key: &str) -> ApiResult<Option<i64>> {
        self.get(key)
            .filter(|v| !v.is_empty())
            .map(|v| {
                v.parse::<i64>().map_err(|_| {
                    ApiError::bad_request(format!(
                        "invalid value {v:?} for {key}: expected an integer"
                    ))
                })
            })
            .transpose()
    }

    pub(super) fn dry_run(&self) -> ApiResult<bool> {
        match self.get("dryRun") {
            None | Some("") => Ok(false),
            Some("All") => Ok(true),
            Some(other) => Err(ApiError::bad_request(format!(
                "invalid dryRun value {other:?}: the only supported value is All"
            ))),
        }
    }

    /// `fieldManager` defaults to the client's User-Agent prefix, as upstream does for
    /// every write but apply.
    /// `options_kind` names the options type in errors (`CreateOptions`, `PatchOptions`…).
    pub(super) fn write_options(
        &self,
        headers: &HeaderMap,
        options_kind: &str,
    ) -> ApiResult<WriteOptions> {
        let user_agent = headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok());
        Ok(WriteOptions {
            dry_run: self.dry_run()?,
            field_manager: Some(
                self.get("fieldManager")
                    .filter(|m| !m.is_empty())
                    .map(str::to_string)
                    .unwrap_or_else(|| manager_from_user_agent(user_agent)),
            ),
            field_validation: FieldValidation::parse(self.get("fieldValidation")).map_err(
                |_| {
                    ApiError::invalid(
                        options_kind,
                        "meta.k8s.io",
                        "",
                        &[crate::validation::FieldError::not_supported(
                            "fieldValidation",
                            self.get("fieldValidation").unwrap_or_default(),
                            &["", "Ignore", "Strict", "Warn"],
                        )],
                    )
                },
            )?,
            duplicate_fields: Vec::new(),
            actor: None,
            permissions: None,
        })
    }

    pub(super) fn list_options(&self) -> ApiResult<ListOptions> {
        let limit = self.number("limit")?.unwrap_or(0);
        if limit < 0 {
            return Err(ApiError::bad_request("limit must not be negative"));
        }
        Ok(ListOptions {
            label_selector: self.get("labelSelector").map(str::to_string),
            field_selector: self.get("fieldSelector").map(str::to_string),
            limit: limit as usize,
            continue_token: self
                .get("continue")
                .filter(|c| !c.is_empty())
                .map(str::to_string),
            resource_version: self.get("resourceVersion").map(str::to_string),
            resource_version_match: self.get("resourceVersionMatch").map(str::to_string),
        })
    }
}

/// The single entry point for `/api/...` and `/apis/...`.
pub async fn dispatch(State(state): State<AppState>, request: Request) -> Response {
    match handle(state, request).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    }
}

async fn handle(state: AppState, request: Request) -> ApiResult<Response> {
    let (parts, body) = request.into_parts();
    let query = Query::parse(parts.uri.query());
    let catalog = state.registry.catalog();
    let path = parse(parts.uri.path()).ok_or_else(|| not_found_path(parts.uri.path()))?;
    let resource_path = match path {
        ApiPath::CoreVersions | ApiPath::Groups => return Err(not_found_path(parts.uri.path())),
        ApiPath::Group { group } => {
            return discovery::group(catalog, &group)
                .map(|doc| json_response(StatusCode::OK, &doc))
                .ok_or_else(|| not_found_path(parts.uri.path()));
        }
        ApiPath::ResourceList { group, version } => {
            return discovery::resource_list(catalog, &group, &version)
                .map(|doc| json_response(StatusCode::OK, &doc))
                .ok_or_else(|| not_found_path(parts.uri.path()));
        }
        ApiPath::Resource(resource_path) => resource_path,
    };
    let resource = catalog
        .lookup(
            &resource_path.group,
            &resource_path.version,
            &resource_path.resource,
        )
        .ok_or_else(|| not_found_path(parts.uri.path()))?;
    if resource_path.namespace.is_some() && !resource.namespaced {
        return Err(not_found_path(parts.uri.path()));
    }
    match resource.served_by {
        Some(ServedBy::PodBindings) => {
            return super::pod::legacy_binding(&state, &resource_path, &parts, body).await;
        }
        // Only get and list: answered below from health checks, not from the store.
        Some(ServedBy::ComponentStatuses) if parts.method != Method::GET || query.flag("watch") => {
            return Err(ApiError::method_not_allowed(
                "the server does not allow this method on the requested resource",
            )
            .with_details(crate::status::Details {
                kind: resource.plural.clone(),
                ..Default::default()
            }));
        }
        _ => {}
    }
    if resource.create_only {
        return review(&state, &resource, &resource_path, &parts, &query, body).await;
    }
    if resource.token_subresource && resource_path.subresource.as_deref() == Some("token") {
        return token_request(&state, &resource_path, &parts, body).await;
    }
    if resource.runs_on_nodes
        && resource_path
            .subresource
            .as_deref()
            .is_some_and(|sub| super::pod::POD_SUBRESOURCES.contains(&sub))
    {
        return super::pod::pod_subresource(&state, &resource_path, &parts, body).await;
    }
    if crate::insight::removal::is_removal(&resource) && parts.method != Method::GET {
        return finalizer_removal(&state, &resource, &resource_path, &parts, &query, body).await;
    }
    let subresource = match resource_path.subresource.as_deref() {
        None => Subresource::Main,
        Some("status") if resource.status_subresource => Subresource::Status,
        Some("scale") if resource.scale.is_some() => Subresource::Scale,
        Some("approval") if resource.approval_subresource => Subresource::Approval,
        Some("finalize") if resource.is_namespace() => {
            // N1: /finalize only takes a PUT.
            if parts.method != Method::PUT {
                return Err(ApiError::method_not_allowed(format!(
                    "{} is not supported on namespaces/finalize: use PUT",
                    parts.method
                )));
            }
            Subresource::Finalize
        }
        Some(other) => {
            return Err(ApiError::new(
                404,
                "NotFound",
                format!(
                    "the server could not find the requested resource ({} has no {other:?} subresource here)",
                    resource.plural
                ),
            ));
        }
    };
    let request = ResourceRequest {
        state: &state,
        resource: &resource,
        path: &resource_path,
        query: &query,
        headers: &parts.headers,
        method: &parts.method,
        identity: parts.extensions.get::<crate::authn::Identity>(),
        subresource,
    };
    match (&parts.method, resource_path.name.as_deref()) {
        (&Method::GET, None) if query.flag("watch") => request.watch().await,
        (&Method::GET, None) => request.list().await,
        (&Method::GET, Some(name)) => request.get(name).await,
        (&Method::POST, None) => request.create(read_body(body).await?).await,
        (&Method::PUT, Some(name)) => request.update(name, read_body(body).await?).await,
        (&Method::PATCH, Some(name)) => request.patch(name, read_body(body).await?).await,
        (&Method::DELETE, Some(name)) => request.delete(name, read_body(body).await?).await,
        (&Method::DELETE, None) => request.delete_collection(read_body(body).await?).await,
        (method, _) => Err(ApiError::method_not_allowed(format!(
            "{method} is not supported on {}{}",
            resource.plural,
            if resource_path.name.is_some() {
                "/<name>"
            } else {
                ""
            }
        ))),
    }
}

/// `kubectl auth whoami`: the caller as the server authenticated it, in the posted review's
/// `status.userInfo`.
fn self_subject_review(mut review: Value, identity: &crate::authn::Identity) -> Value {
    let user_info = identity.user_info();
    review["apiVersion"] = Value::from("authentication.k8s.io/v1");
    review["kind"] = Value::from("SelfSubjectReview");
    if !review["metadata"].is_object() {
        review["metadata"] = serde_json::json!({});
    }
    review["metadata"]["creationTimestamp"] = Value::Null;
    review["status"] = serde_json::json!({"userInfo": user_info});
    review
}

/// A create-only review (`DeletionReview`, `SelfSubjectReview`): POST to the collection is answered with the
/// object and its `status` (201, as upstream answers reviews); nothing is stored, and any
/// other request is 405, as for upstream's reviews, whose only route is create.
async fn review(
    state: &AppState,
    resource: &ResourceType,
    path: &ResourcePath,
    parts: &http::request::Parts,
    query: &Query,
    body: Body,
) -> ApiResult<Response> {
    if parts.method != Method::POST || path.name.is_some() || path.subresource.is_some() {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        )
        .with_details(crate::status::Details {
            group: resource.group.clone(),
            kind: resource.plural.clone(),
            ..Default::default()
        }));
    }
    let body = read_body(body).await?;
    let identity = parts
        .extensions
        .get::<crate::authn::Identity>()
        .ok_or_else(|| ApiError::internal("an authenticated request carries no identity"))?;
    if resource.group == "authorization.k8s.io" {
        let posted = decode_object(&parts.headers, &body)?;
        let answer = crate::authz::review::answer(
            &state.authorizer,
            identity,
            &resource.kind,
            path.namespace.as_deref(),
            posted,
        )?;
        return Ok(json_response(StatusCode::CREATED, &answer));
    }
    if resource.group == "authentication.k8s.io" && resource.plural == "tokenreviews" {
        let posted = decode_object(&parts.headers, &body)?;
        let answer = crate::authn::token_review::answer(&state.authenticator, posted).await?;
        return Ok(json_response(StatusCode::CREATED, &answer));
    }
    if resource.group == "authentication.k8s.io" && resource.plural == "selfsubjectreviews" {
        // kubectl posts an empty review, as protobuf; nothing in it is read but its metadata,
        // so a protobuf body is taken as empty rather than decoded.
        let posted = if content_type(&parts.headers) == crate::protobuf::PROTOBUF_MEDIA_TYPE {
            serde_json::json!({})
        } else {
            decode_object(&parts.headers, &body)?
        };
        return Ok(json_response(
            StatusCode::CREATED,
            &self_subject_review(posted, identity),
        ));
    }
    let object = decode_object(&parts.headers, &body)?;
    // Checked as for any create (dryRun, fieldValidation); a review stores nothing anyway.
    let options = query.write_options(&parts.headers, "CreateOptions")?;
    let viewer = crate::insight::visibility::Viewer {
        authorizer: Arc::clone(&state.authorizer),
        identity: identity.clone(),
    };
    let answer = state
        .insight
        .review(resource, object, options.field_validation, Some(&viewer))
        .await?;
    Ok(with_warnings(
        json_response(StatusCode::CREATED, &answer.object),
        &answer.warnings,
    ))
}

/// TokenRequest: `POST .../serviceaccounts/NAME/token` issues a token for the ServiceAccount
/// (`kubectl create token`); nothing is stored. Only create is served, as upstream.
async fn token_request(
    state: &AppState,
    path: &ResourcePath,
    parts: &http::request::Parts,
    body: Body,
) -> ApiResult<Response> {
    let (Some(namespace), Some(name)) = (path.namespace.as_deref(), path.name.as_deref()) else {
        return Err(not_found_path(parts.uri.path()));
    };
    if parts.method != Method::POST {
        return Err(ApiError::method_not_allowed(format!(
            "{} is not supported on serviceaccounts/token: use POST (`kubectl create token`)",
            parts.method
        )));
    }
    let tokens = state
        .authenticator
        .service_accounts
        .as_ref()
        .ok_or_else(|| {
            ApiError::new(
                503,
                "ServiceUnavailable",
                "this server issues no service-account tokens",
            )
        })?;
    let posted = decode_object(&parts.headers, &read_body(body).await?)?;
    let answer = tokens.request_token(namespace, name, posted).await?;
    Ok(json_response(StatusCode::CREATED, &answer))
}

/// `FinalizerRemoval` writes: POST to the collection forces the finalizer off (see
/// [`crate::insight::removal`]); records are immutable, so every other write is 405. Reads
/// are served by the registry like any kind.
async fn finalizer_removal(
    state: &AppState,
    resource: &ResourceType,
    path: &ResourcePath,
    parts: &http::request::Parts,
    query: &Query,
    body: Body,
) -> ApiResult<Response> {
    if parts.method != Method::POST || path.name.is_some() || path.subresource.is_some() {
        return Err(crate::insight::removal::immutable(resource));
    }
    let body = read_body(body).await?;
    let object = decode_object(&parts.headers, &body)?;
    let options = query.write_options(&parts.headers, "CreateOptions")?;
    let user_agent = parts
        .headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let user = parts
        .extensions
        .get::<crate::authn::Identity>()
        .map(|identity| identity.user.clone())
        .unwrap_or_else(|| manager_from_user_agent(Some(&user_agent)));
    let requester = crate::insight::removal::Requester { user, user_agent };
    let written = state
        .insight
        .remove_finalizer(resource, object, &options, requester)
        .await?;
    Ok(with_warnings(
        json_response(StatusCode::CREATED, &written.object),
        &written.warnings,
    ))
}

fn not_found_path(path: &str) -> ApiError {
    ApiError::new(
        404,
        "NotFound",
        format!("the server could not find the requested resource ({path})"),
    )
}

/// How much of an oversized body is read and thrown away before answering 413. Closing the
/// connection with the client still sending makes the kernel reset it, and the client then
/// sees a broken pipe instead of the 413; reading on (within a bound) lets it get the answer.
const OVERSIZED_DRAIN_BYTES: usize = 16 * 1024 * 1024;
const OVERSIZED_DRAIN_TIME: Duration = Duration::from_secs(10);

pub(super) async fn read_body(mut body: Body) -> ApiResult<Bytes> {
    let mut collected = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|error| {
            ApiError::bad_request(format!("cannot read the request body: {error}"))
        })?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if collected.len() + data.len() > MAX_REQUEST_BODY_BYTES {
            drain(body, data.len()).await;
            return Err(ApiError::request_entity_too_large(format!(
                "the request body is larger than {MAX_REQUEST_BODY_BYTES} bytes"
            )));
        }
        collected.extend_from_slice(&data);
    }
    Ok(collected.freeze())
}

/// Reads and discards the rest of a refused body, bounded in bytes and time.
async fn drain(mut body: Body, already: usize) {
    let discard = async {
        let mut discarded = already;
        while discarded < OVERSIZED_DRAIN_BYTES {
            match body.frame().await {
                Some(Ok(frame)) => {
                    discarded += frame.data_ref().map_or(0, |d| d.len());
                }
                _ => break,
            }
        }
    };
    let _ = tokio::time::timeout(OVERSIZED_DRAIN_TIME, discard).await;
}

fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default()
}

/// Decodes an object body: JSON (the default) or YAML.
/// Whether a body with these headers is decoded as JSON by [`decode_object`].
pub(super) fn is_json(headers: &HeaderMap) -> bool {
    matches!(
        content_type(headers).as_str(),
        "" | "application/json" | "*/*"
    )
}

pub(super) fn decode_object(headers: &HeaderMap, body: &[u8]) -> ApiResult<Value> {
    if body.is_empty() {
        return Err(ApiError::bad_request(
            "the request has no body: send the object as JSON",
        ));
    }
    match content_type(headers).as_str() {
        "" | "application/json" | "*/*" => parse_json(body),
        "application/yaml" | "application/x-yaml" | "text/yaml" => parse_yaml(body),
        // api-surface §10: kubectl's typed clientset sends protobuf for `create <generator>`.
        crate::protobuf::PROTOBUF_MEDIA_TYPE => {
            crate::protobuf::decode_object(body).map_err(|error| {
                let message = error.to_string();
                match error.status_code() {
                    415 => ApiError::unsupported_media_type(message),
                    _ => ApiError::bad_request(message),
                }
            })
        }
        other => Err(ApiError::unsupported_media_type(format!(
            "the body's content type {other:?} is not supported: use application/json or application/yaml"
        ))),
    }
}

pub(super) fn parse_json(body: &[u8]) -> ApiResult<Value> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "the request body is not valid JSON: {e} (line {}, column {})",
            e.line(),
            e.column()
        ))
    })
}

pub(super) fn parse_yaml(body: &[u8]) -> ApiResult<Value> {
    let text = std::str::from_utf8(body)
        .map_err(|_| ApiError::bad_request("the YAML body is not valid UTF-8"))?;
    super::yaml::decode(text)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid YAML: {e}")))
}

/// Whether the client asked for a server-side `Table` (kubectl get).
fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .and_then(|accept| accept.split(',').next())
        .is_some_and(|first| first.split(';').any(|p| p.trim() == "as=Table"))
}

struct ResourceRequest<'a> {
    state: &'a AppState,
    resource: &'a Arc<ResourceType>,
    path: &'a ResourcePath,
    query: &'a Query,
    headers: &'a HeaderMap,
    method: &'a Method,
    /// The authenticated user (absent only in tests that bypass authentication).
    identity: Option<&'a crate::authn::Identity>,
    subresource: Subresource,
}

impl ResourceRequest<'_> {
    fn namespace(&self) -> Option<&str> {
        self.path.namespace.as_deref()
    }

    fn respond(&self, code: StatusCode, object: &Value) -> ApiResult<Response> {
        if self.subresource == Subresource::Scale {
            return Ok(json_response(
                code,
                &scale::to_scale(self.resource, object)?,
            ));
        }
        // A `Status` (a DELETE that did not return the object) is sent as it is, whatever the
        // client asked the object to look like.
        if object.get("kind").and_then(Value::as_str) == Some("Status") {
            return Ok(json_response(code, object));
        }
        if wants_table(self.headers) {
            return Ok(table::response(code, self.resource, object));
        }
        if let Some(metadata_only) = metadata::requested(self.headers) {
            return Ok(json_response(code, &metadata_only.convert(object)?));
        }
        Ok(json_response(code, object))
    }

    fn respond_written(&self, code: StatusCode, written: &Written) -> ApiResult<Response> {
        let response = self.respond(code, &written.object)?;
        Ok(with_warnings(response, &written.warnings))
    }

    /// Who makes this request, for finalizer provenance: the authenticated user, else (no
    /// authentication in front) the User-Agent's product name.
    fn actor(&self) -> Actor {
        let user_agent = self
            .headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let user = match self.identity {
            Some(identity) => identity.user.clone(),
            None => manager_from_user_agent(Some(&user_agent)),
        };
        let identity = self.identity;
        Actor {
            user,
            user_agent,
            uid: identity.map(|i| i.uid.clone()).unwrap_or_default(),
            groups: identity.map(|i| i.groups.clone()).unwrap_or_default(),
            extra: identity.map(|i| i.extra.clone()).unwrap_or_default(),
        }
    }

    fn write_options(&self, body: &[u8]) -> ApiResult<WriteOptions> {
        let options_kind = match *self.method {
            Method::POST => "CreateOptions",
            Method::PATCH => "PatchOptions",
            _ => "UpdateOptions",
        };
        let mut options = self.query.write_options(self.headers, options_kind)?;
        options.actor = Some(self.actor());
        // The registry checks what is written with the writer's permissions (escalation
        // prevention, O5).
        options.permissions = self.identity.map(|identity| {
            Arc::new(crate::authz::escalation::RequestPermissions {
                authorizer: Arc::clone(&self.state.authorizer),
                user: identity.clone(),
            }) as Arc<dyn crate::registry::WritePermissions>
        });
        if options.field_validation != FieldValidation::Ignore
            && content_type(self.headers) != crate::protobuf::PROTOBUF_MEDIA_TYPE
        {
            options.duplicate_fields = field_validation::duplicate_fields(body);
        }
        Ok(options)
    }

    async fn get(&self, name: &str) -> ApiResult<Response> {
        if self.resource.served_by == Some(ServedBy::ComponentStatuses) {
            let object = super::component_status::get(&self.state.health, name).await?;
            let response = self.respond(StatusCode::OK, &object)?;
            return Ok(with_warnings(
                response,
                &[super::component_status::DEPRECATION.to_string()],
            ));
        }
        let mut object = self
            .state
            .registry
            .get(self.resource, self.namespace(), name)
            .await?;
        self.computed_status(&mut object).await?;
        self.respond(StatusCode::OK, &object)
    }

    async fn list(&self) -> ApiResult<Response> {
        if self.resource.served_by == Some(ServedBy::ComponentStatuses) {
            let (labels, fields) =
                crate::registry::parse_selectors(self.resource, &self.query.list_options()?)?;
            let list =
                super::component_status::list(&self.state.health, labels.as_ref(), fields.as_ref())
                    .await;
            let response = self.respond(StatusCode::OK, &list)?;
            return Ok(with_warnings(
                response,
                &[super::component_status::DEPRECATION.to_string()],
            ));
        }
        let options = self.query.list_options()?;
        if self.plain_json_list()
            && let Some(chunks) = self
                .state
                .registry
                .list_streamed(self.resource, self.namespace(), &options)
                .await?
        {
            return Ok((
                StatusCode::OK,
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                )],
                Body::from_stream(chunks),
            )
                .into_response());
        }
        let mut list = self
            .state
            .registry
            .list(self.resource, self.namespace(), &options)
            .await?;
        self.computed_status(&mut list).await?;
        self.respond(StatusCode::OK, &list)
    }

    /// A list answered as the registry reads it (a streamed list): plain JSON, no Table, no
    /// `PartialObjectMetadataList`, no status computed on read.
    fn plain_json_list(&self) -> bool {
        !wants_table(self.headers)
            && metadata::requested(self.headers).is_none()
            && !self.has_computed_status()
    }

    fn has_computed_status(&self) -> bool {
        self.resource.group == crate::insight::GROUP && self.resource.plural == "finalizerclaims"
    }

    /// A `FinalizerClaim`'s status is computed on read (see [`crate::insight::figures`]).
    async fn computed_status(&self, object: &mut Value) -> ApiResult<()> {
        if self.has_computed_status() {
            self.state.insight.with_claim_status(object).await?;
        }
        Ok(())
    }

    async fn watch(&self) -> ApiResult<Response> {
        let options = self.query.list_options()?;
        let send_initial_events = self.query.flag("sendInitialEvents");
        if send_initial_events && options.resource_version_match.as_deref() != Some("NotOlderThan")
        {
            return Err(ApiError::invalid(
                "ListOptions",
                "meta.k8s.io",
                "",
                &[crate::validation::FieldError::forbidden(
                    "sendInitialEvents",
                    "sendInitialEvents is forbidden for watch unless the resourceVersionMatch is \"NotOlderThan\"",
                )],
            ));
        }
        let timeout = match self.query.number("timeoutSeconds")? {
            Some(seconds) if seconds > 0 => Duration::from_secs(seconds as u64),
            // Without a timeout the stream is long-lived; upstream picks 30–60 minutes.
            _ => Duration::from_secs(rand::rng().random_range(1800..3600)),
        };
        let bookmarks = self.query.flag("allowWatchBookmarks");
        let metadata_only = metadata::requested(self.headers);
        if metadata_only.as_ref().is_some_and(|form| form.list) {
            return Err(ApiError::new(
                406,
                "NotAcceptable",
                "a watch sends objects one by one: ask for PartialObjectMetadata, not PartialObjectMetadataList",
            ));
        }
        let table = wants_table(self.headers);
        let registry = &self.state.registry;
        let (resource, namespace) = (Arc::clone(self.resource), self.namespace());
        let stream = if table || metadata_only.is_some() {
            registry
                .watch(resource, namespace, &options, send_initial_events)
                .await?
        } else {
            registry
                .watch_json_lines(resource, namespace, &options, send_initial_events)
                .await?
        };
        Ok(watch::response(
            stream,
            watch::Framing {
                resource: Arc::clone(self.resource),
                table,
                metadata_only,
                bookmarks: bookmarks || send_initial_events,
                timeout,
                shutdown: self.state.shutdown.clone(),
            },
        ))
    }

    async fn create(&self, body: Bytes) -> ApiResult<Response> {
        if self.subresource != Subresource::Main {
            return Err(ApiError::method_not_allowed(format!(
                "POST is not supported on {}/{{name}}/{}",
                self.resource.plural,
                self.subresource.name().unwrap_or_default()
            )));
        }
        let object = decode_object(self.headers, &body)?;
        let created = self
            .state
            .registry
            .create(
                self.resource,
                self.namespace(),
                object,
                &self.write_options(&body)?,
            )
            .await?;
        self.respond_written(StatusCode::CREATED, &created)
    }

    async fn update(&self, name: &str, body: Bytes) -> ApiResult<Response> {
        let object = decode_object(self.headers, &body)?;
        let options = self.write_options(&body)?;
        if self.subresource == Subresource::Scale {
            return self.update_scale(name, object, &options).await;
        }
        let updated = self
            .state
            .registry
            .update(
                self.resource,
                self.namespace(),
                name,
                object,
                self.subresource,
                &options,
            )
            .await?;
        self.respond_written(StatusCode::OK, &updated)
    }

    /// PUT `/scale`: the Scale's `spec.replicas` goes into the object; its
    /// `metadata.resourceVersion`, if set, is a precondition.
    async fn update_scale(
        &self,
        name: &str,
        requested: Value,
        options: &WriteOptions,
    ) -> ApiResult<Response> {
        let replicas = scale::requested_replicas(&requested)?;
        let pinned = crate::object::meta_str(&requested, "resourceVersion")
            .filter(|rv| !rv.is_empty())
            .map(|rv| crate::registry::parse_resource_version(rv, "metadata.resourceVersion"))
            .transpose()?;
        let resource = self.resource;
        let updated = self
            .state
            .registry
            .guarded_update(
                resource,
                self.namespace(),
                name,
                pinned,
                Subresource::Scale,
                options,
                |current| {
                    let mut next = current.clone();
                    scale::set_replicas(resource, &mut next, replicas)?;
                    Ok(next)
                },
            )
            .await?;
        self.respond_written(StatusCode::OK, &updated)
    }

    async fn patch(&self, name: &str, body: Bytes) -> ApiResult<Response> {
        let format = match content_type(self.headers).as_str() {
            "application/json-patch+json" => PatchFormat::Json,
            "application/merge-patch+json" => PatchFormat::Merge,
            "application/strategic-merge-patch+json" => PatchFormat::Strategic,
            "application/apply-patch+yaml" => return self.apply(name, &body).await,
            other => {
                return Err(ApiError::unsupported_media_type(format!(
                    "the patch content type {other:?} is not supported: use application/json-patch+json, application/merge-patch+json or application/strategic-merge-patch+json"
                )));
            }
        };
        if self.query.flag("force") {
            return Err(ApiError::invalid(
                "PatchOptions",
                "meta.k8s.io",
                "",
                &[crate::validation::FieldError::forbidden(
                    "force",
                    "may not be specified for non-apply patch",
                )],
            ));
        }
        let patch = parse_json(&body)?;
        let options = self.write_options(&body)?;
        let patched = if self.subresource == Subresource::Scale {
            self.patch_scale(name, format, &patch, &options).await?
        } else {
            self.state
                .registry
                .patch(
                    self.resource,
                    self.namespace(),
                    name,
                    format,
                    &patch,
                    self.subresource,
                    &options,
                )
                .await?
        };
        self.respond_written(StatusCode::OK, &patched)
    }

    /// PATCH `/scale`: the patch applies to the Scale view (kubectl scale sends a merge
    /// patch of `spec.replicas`), and the resulting replica count goes into the object.
    async fn patch_scale(
        &self,
        name: &str,
        format: PatchFormat,
        patch: &Value,
        options: &WriteOptions,
    ) -> ApiResult<Written> {
        let resource = self.resource;
        self.state
            .registry
            .guarded_update(
                resource,
                self.namespace(),
                name,
                None,
                Subresource::Scale,
                options,
                |current| {
                    let view = scale::to_scale(resource, current)?;
                    let patched = crate::registry::apply_patch_format(format, &view, patch)?;
                    let replicas = scale::requested_replicas(&patched)?;
                    let mut next = current.clone();
                    scale::set_replicas(resource, &mut next, replicas)?;
                    Ok(next)
                },
            )
            .await
    }

    /// `application/apply-patch+yaml`: server-side apply (api-surface §6.6).
    async fn apply(&self, name: &str, body: &[u8]) -> ApiResult<Response> {
        if self.subresource == Subresource::Scale {
            return Err(ApiError::unsupported_media_type(
                "server-side apply is not supported on the scale subresource: use a merge patch",
            ));
        }
        // Both clients send JSON; YAML is the declared format.
        let applied = parse_json(body).or_else(|_| parse_yaml(body))?;
        let mut options = self.write_options(body)?;
        // Apply has no default manager: a missing fieldManager is a 422.
        options.field_manager = self
            .query
            .get("fieldManager")
            .filter(|m| !m.is_empty())
            .map(str::to_string);
        let force = self.query.flag("force");
        let written = self
            .state
            .registry
            .apply(
                self.resource,
                self.namespace(),
                name,
                applied,
                self.subresource,
                force,
                &options,
            )
            .await?;
        let code = if written.created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        self.respond_written(code, &written)
    }

    /// H2: DeleteOptions come from a non-empty body, otherwise from the query.
    fn delete_options(&self, body: &[u8]) -> ApiResult<DeleteOptions> {
        delete_options(self.query, body, self.actor())
    }

    async fn delete(&self, name: &str, body: Bytes) -> ApiResult<Response> {
        let options = self.delete_options(&body)?;
        let orphan_false = options.orphan_dependents == Some(false);
        let result = self
            .state
            .registry
            .delete(self.resource, self.namespace(), name, &options)
            .await?;
        // H5: 202 only when the object stayed and the deprecated orphanDependents=false was sent.
        let code = if !result.removed && orphan_false {
            StatusCode::ACCEPTED
        } else {
            StatusCode::OK
        };
        Ok(with_warnings(
            self.respond(code, &result.body)?,
            &result.warnings,
        ))
    }

    async fn delete_collection(&self, body: Bytes) -> ApiResult<Response> {
        let options = self.delete_options(&body)?;
        let (list, warnings) = self
            .state
            .registry
            .delete_collection(
                self.resource,
                self.namespace(),
                &self.query.list_options()?,
                &options,
            )
            .await?;
        Ok(with_warnings(
            self.respond(StatusCode::OK, &list)?,
            &warnings,
        ))
    }
}

/// H2: DeleteOptions come from a non-empty body, otherwise from the query.
pub(super) fn delete_options(query: &Query, body: &[u8], actor: Actor) -> ApiResult<DeleteOptions> {
    if body.iter().any(|b| !b.is_ascii_whitespace()) {
        return delete_options_from_json(&parse_json(body)?, actor);
    }
    Ok(DeleteOptions {
        grace_period_seconds: query.number("gracePeriodSeconds")?,
        propagation_policy: query
            .get("propagationPolicy")
            .filter(|p| !p.is_empty())
            .map(str::to_string),
        orphan_dependents: match query.get("orphanDependents") {
            None | Some("") => None,
            Some(_) => Some(query.flag("orphanDependents")),
        },
        preconditions: Preconditions::default(),
        actor: Some(actor),
        // H3: any dryRun value but All is a 422 about DeleteOptions, as from the body.
        dry_run: match query.get("dryRun") {
            None | Some("") => false,
            Some("All") => true,
            Some(other) => {
                return Err(unsupported_dry_run(other));
            }
        },
    })
}

/// H2: DeleteOptions sent as JSON (a DELETE's body, an Eviction's `deleteOptions`).
pub(super) fn delete_options_from_json(value: &Value, actor: Actor) -> ApiResult<DeleteOptions> {
    check_delete_options_body(value)?;
    let text = |field: &str| value.get(field).and_then(Value::as_str).map(str::to_string);
    let dry_run = match value.get("dryRun") {
        None | Some(Value::Null) => false,
        Some(Value::Array(values)) if values.is_empty() => false,
        Some(Value::Array(values)) if values.iter().all(|v| v.as_str() == Some("All")) => true,
        Some(other) => {
            return Err(unsupported_dry_run(other.to_string()));
        }
    };
    Ok(DeleteOptions {
        grace_period_seconds: value.get("gracePeriodSeconds").and_then(Value::as_i64),
        propagation_policy: text("propagationPolicy"),
        orphan_dependents: value.get("orphanDependents").and_then(Value::as_bool),
        preconditions: Preconditions {
            uid: value
                .pointer("/preconditions/uid")
                .and_then(Value::as_str)
                .map(str::to_string),
            resource_version: value
                .pointer("/preconditions/resourceVersion")
                .and_then(Value::as_str)
                .map(str::to_string),
        },
        dry_run,
        actor: Some(actor),
    })
}

/// H2: a body that does not decode to DeleteOptions is a 400. Without this check a field of
/// the wrong type (say a numeric `preconditions.uid`) would be dropped and the DELETE would go
/// ahead with default options.
fn check_delete_options_body(value: &Value) -> ApiResult<()> {
    let bad = |why: String| {
        ApiError::bad_request(format!(
            "the request body is not a valid DeleteOptions: {why}"
        ))
    };
    let Some(map) = value.as_object() else {
        return Err(bad(format!("expected a JSON object, got {value}")));
    };
    if let Some(kind) = map.get("kind").and_then(Value::as_str)
        && !kind.is_empty()
        && kind != "DeleteOptions"
    {
        return Err(bad(format!("its kind is {kind:?}")));
    }
    for (field, what) in [
        ("gracePeriodSeconds", "an integer"),
        ("propagationPolicy", "a string"),
        ("orphanDependents", "a boolean"),
        ("preconditions", "an object"),
    ] {
        let Some(v) = map.get(field).filter(|v| !v.is_null()) else {
            continue;
        };
        let valid = match field {
            "gracePeriodSeconds" => v.is_i64(),
            "propagationPolicy" => v.is_string(),
            "orphanDependents" => v.is_boolean(),
            _ => v.is_object(),
        };
        if !valid {
            return Err(bad(format!("{field} must be {what}, not {v}")));
        }
    }
    if let Some(preconditions) = map.get("preconditions").and_then(Value::as_object) {
        for field in ["uid", "resourceVersion"] {
            if let Some(v) = preconditions.get(field)
                && !v.is_null()
                && !v.is_string()
            {
                return Err(bad(format!(
                    "preconditions.{field} must be a string, not {v}"
                )));
            }
        }
    }
    Ok(())
}

/// Adds `Warning: 299 - "…"` headers, as upstream sends them (kubectl prints each one).
fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for warning in warnings {
        let escaped = warning.replace('\\', "\\\\").replace('"', "\\\"");
        if let Ok(value) = http::HeaderValue::from_str(&format!("299 - \"{escaped}\"")) {
            response.headers_mut().append(http::header::WARNING, value);
        }
    }
    response
}

/// H3: a `dryRun` other than `All` is a 422 about DeleteOptions, from the body or the query.
fn unsupported_dry_run(value: impl Into<String>) -> ApiError {
    ApiError::invalid(
        "DeleteOptions",
        "meta.k8s.io",
        "",
        &[crate::validation::FieldError::not_supported(
            "dryRun",
            value,
            &["All"],
        )],
    )
}
