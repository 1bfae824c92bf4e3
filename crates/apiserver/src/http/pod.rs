//! The Pod subresources that are not a view of the Pod itself: `binding` and `eviction`
//! (POST; the registry decides, `registry/pods.rs`) and `log` (GET; the node agent running
//! the Pod answers, [`crate::node_client`]); and the legacy `bindings` resource, upstream's
//! `LegacyBindingREST`: a Binding POSTed to the namespace's collection binds the Pod its own
//! name names, through the same path as `pods/NAME/binding`.

use axum::body::Body;
use axum::response::Response;
use http::{Method, StatusCode};
use serde_json::Value;

use super::AppState;
use super::json_response;
use super::path::ResourcePath;
use super::resource::{decode_object, delete_options_from_json, read_body};
use crate::registry::{Actor, DeleteOptions, WriteOptions, manager_from_user_agent};
use crate::status::{ApiError, ApiResult};

/// The subresources this module serves.
pub const POD_SUBRESOURCES: [&str; 3] = ["binding", "eviction", "log"];

pub(super) async fn pod_subresource(
    state: &AppState,
    path: &ResourcePath,
    parts: &http::request::Parts,
    body: Body,
) -> ApiResult<Response> {
    let (Some(namespace), Some(name), Some(subresource)) = (
        path.namespace.as_deref(),
        path.name.as_deref(),
        path.subresource.as_deref(),
    ) else {
        return Err(ApiError::not_found(crate::status::Target {
            group: "",
            resource: "pods",
            name: "",
        }));
    };
    let expected = if subresource == "log" {
        Method::GET
    } else {
        Method::POST
    };
    if parts.method != expected {
        return Err(ApiError::method_not_allowed(format!(
            "{} is not supported on pods/{subresource}: use {expected}",
            parts.method
        )));
    }
    let query = query_pairs(parts);
    let (actor, options) = write_options(parts, &query);
    let registry = &state.registry;
    match subresource {
        "binding" => {
            let binding = decode_object(&parts.headers, &read_body(body).await?)?;
            bind(state, namespace, name, &binding, &options).await
        }
        "eviction" => {
            let eviction = decode_object(&parts.headers, &read_body(body).await?)?;
            check_kind(&eviction, "Eviction")?;
            let delete = match eviction.get("deleteOptions").filter(|v| !v.is_null()) {
                Some(value) => delete_options_from_json(value, actor)?,
                None => DeleteOptions {
                    actor: Some(actor),
                    ..DeleteOptions::default()
                },
            };
            let answer = registry
                .evict_pod(namespace, name, &eviction, delete, &options)
                .await?;
            Ok(json_response(StatusCode::CREATED, &answer))
        }
        _ => container_logs(state, namespace, name, &query).await,
    }
}

/// `POST /api/v1/namespaces/NS/bindings`: the Binding's `metadata.name` is the Pod's.
pub(super) async fn legacy_binding(
    state: &AppState,
    path: &ResourcePath,
    parts: &http::request::Parts,
    body: Body,
) -> ApiResult<Response> {
    let Some(namespace) = path.namespace.as_deref() else {
        return Err(ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource: bindings are namespaced",
        ));
    };
    if parts.method != Method::POST || path.name.is_some() || path.subresource.is_some() {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        )
        .with_details(crate::status::Details {
            kind: "bindings".into(),
            ..Default::default()
        }));
    }
    let binding = decode_object(&parts.headers, &read_body(body).await?)?;
    let name = crate::object::name(&binding).to_string();
    if name.is_empty() {
        // Upstream's key function refuses an empty name before the Pod is looked up.
        return Err(ApiError::bad_request("Name parameter required."));
    }
    let (_, options) = write_options(parts, &query_pairs(parts));
    bind(state, namespace, &name, &binding, &options).await
}

/// Binds Pod `name` as `binding` says (the registry decides, `registry/pods.rs`), answering
/// with a success Status (201).
async fn bind(
    state: &AppState,
    namespace: &str,
    name: &str,
    binding: &Value,
    options: &WriteOptions,
) -> ApiResult<Response> {
    check_kind(binding, "Binding")?;
    let bound = state
        .registry
        .bind_pod(namespace, name, binding, options)
        .await?;
    let uid = crate::object::uid(&bound).to_string();
    let mut answer = crate::status::success_status(
        crate::status::Target {
            group: "",
            resource: "pods",
            name,
        },
        &uid,
    );
    answer["code"] = Value::from(201);
    Ok(json_response(StatusCode::CREATED, &answer))
}

fn query_pairs(parts: &http::request::Parts) -> Vec<(String, String)> {
    form_urlencoded::parse(parts.uri.query().unwrap_or_default().as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// Who writes (the authenticated identity, else the User-Agent's product) and the write's
/// options (`dryRun=All` only: these routes take no other).
fn write_options(
    parts: &http::request::Parts,
    query: &[(String, String)],
) -> (Actor, WriteOptions) {
    let dry_run = query.iter().any(|(k, v)| k == "dryRun" && v == "All");
    let user_agent = parts
        .headers
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let identity = parts.extensions.get::<crate::authn::Identity>();
    let actor = Actor {
        user: identity
            .map(|identity| identity.user.clone())
            .unwrap_or_else(|| manager_from_user_agent(Some(&user_agent))),
        user_agent,
        uid: identity.map(|i| i.uid.clone()).unwrap_or_default(),
        groups: identity.map(|i| i.groups.clone()).unwrap_or_default(),
        extra: identity.map(|i| i.extra.clone()).unwrap_or_default(),
    };
    let options = WriteOptions {
        dry_run,
        actor: Some(actor.clone()),
        ..WriteOptions::default()
    };
    (actor, options)
}

/// `pods/NAME/log`: asked of the node agent that runs the Pod.
async fn container_logs(
    state: &AppState,
    namespace: &str,
    name: &str,
    query: &[(String, String)],
) -> ApiResult<Response> {
    let registry = &state.registry;
    let pods = registry
        .catalog()
        .lookup("", "v1", "pods")
        .ok_or_else(|| ApiError::internal("the pods resource is not served"))?;
    let pod = registry.get(&pods, Some(namespace), name).await?;
    let node_name = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "pod {name} is not scheduled to a node yet: its logs are kept by the node that runs it"
            ))
        })?;
    let nodes = registry
        .catalog()
        .lookup("", "v1", "nodes")
        .ok_or_else(|| ApiError::internal("the nodes resource is not served"))?;
    let node = registry.get(&nodes, None, node_name).await?;
    state
        .node_client
        .as_ref()
        .ok_or_else(|| {
            ApiError::new(
                503,
                "ServiceUnavailable",
                "this server has no client for node agents",
            )
        })?
        .container_logs(&node, &pod, query)
        .await
}

/// A body of another kind is a 400, as upstream's decoder answers.
fn check_kind(body: &Value, kind: &str) -> ApiResult<()> {
    match body.get("kind").and_then(Value::as_str) {
        None | Some("") => Ok(()),
        Some(found) if found == kind => Ok(()),
        Some(found) => Err(ApiError::bad_request(format!(
            "the request body is a {found}, not a {kind}"
        ))),
    }
}
