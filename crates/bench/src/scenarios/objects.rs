//! Object operations over HTTPS shared by the deletion scenarios: namespaces, and ConfigMaps
//! addressed by item number (`cm-{i}`), so that one phase can create a set of ConfigMaps and a
//! later phase delete or patch exactly that set with any number of clients.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use reqwest::StatusCode;
use reqwest::header::CONTENT_TYPE;
use serde_json::Value;

use crate::load::{self, LoadResult, LoadSpec, Tickets, Worker};

/// The finalizer `finalizer-removal` puts on its ConfigMaps; nothing in the server acts on it.
pub const FINALIZER: &str = "bench.finale.dev/hold";

/// The merge patch (RFC 7386) that clears every finalizer: what a controller sends when it has
/// finished its clean-up.
pub const REMOVE_FINALIZERS: &str = r#"{"metadata":{"finalizers":null}}"#;

/// The name of ConfigMap number `item`.
pub fn configmap_name(item: u64) -> String {
    format!("cm-{item}")
}

/// What a [`ConfigMapOps`] worker does to each ConfigMap.
#[derive(Clone, Debug)]
pub enum Action {
    /// POST it with `data` as its one value, holding [`FINALIZER`] if `finalizer`; expects 201.
    Create { data: Arc<str>, finalizer: bool },
    /// DELETE it; expects 200 (the object, still there if a finalizer holds it).
    Delete,
    /// PATCH it with [`REMOVE_FINALIZERS`]; expects 200. On a terminating object this is the
    /// update that lets the server remove it.
    RemoveFinalizers,
}

/// One client working through the ConfigMaps its [`Tickets`] hand out, one request at a time.
pub struct ConfigMapOps {
    pub client: reqwest::Client,
    /// `…/api/v1/namespaces/<ns>/configmaps`.
    pub collection: Arc<str>,
    pub tickets: Tickets,
    pub action: Action,
}

impl Worker for ConfigMapOps {
    async fn op(&mut self, _seq: u64) -> anyhow::Result<()> {
        let name = configmap_name(self.tickets.take()?);
        let (request, expected, what) = match &self.action {
            Action::Create { data, finalizer } => {
                let finalizers = if *finalizer {
                    format!(r#","finalizers":["{FINALIZER}"]"#)
                } else {
                    String::new()
                };
                // Name, finalizer and data are plain ASCII: no JSON escaping needed.
                let body = format!(
                    r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}"{finalizers}}},"data":{{"payload":"{data}"}}}}"#
                );
                let request = self
                    .client
                    .post(&*self.collection)
                    .header(CONTENT_TYPE, "application/json")
                    .body(body);
                (request, StatusCode::CREATED, "create")
            }
            Action::Delete => {
                let request = self.client.delete(format!("{}/{name}", self.collection));
                (request, StatusCode::OK, "delete")
            }
            Action::RemoveFinalizers => {
                let request = self
                    .client
                    .patch(format!("{}/{name}", self.collection))
                    .header(CONTENT_TYPE, "application/merge-patch+json")
                    .body(REMOVE_FINALIZERS);
                (request, StatusCode::OK, "patch")
            }
        };
        send_expect(request, expected, &format!("{what} configmap {name}")).await?;
        Ok(())
    }
}

/// Sends `request`, reads the whole body (so the connection can be reused) and fails unless
/// the status is `expected`.
pub async fn send_expect(
    request: reqwest::RequestBuilder,
    expected: StatusCode,
    what: &str,
) -> anyhow::Result<impl AsRef<[u8]> + use<>> {
    let response = request.send().await.with_context(|| what.to_string())?;
    let status = response.status();
    let body = response
        .bytes()
        .await
        .with_context(|| format!("{what}: read the response"))?;
    if status != expected {
        let text = String::from_utf8_lossy(&body);
        bail!(
            "{what} answered {status}: {}",
            text.chars().take(300).collect::<String>()
        );
    }
    Ok(body)
}

/// Runs exactly `count` ConfigMap operations with `clients` as untimed set-up, and fails
/// unless every one succeeded. Returns the run, for its rate.
pub async fn setup(
    clients: &[reqwest::Client],
    collection: &Arc<str>,
    count: u64,
    action: Action,
    limit: Duration,
) -> anyhow::Result<LoadResult> {
    let tickets = Tickets::new(count);
    let result = timed(clients, collection, &tickets, action.clone(), limit).await?;
    if result.ops != count || result.errors > 0 {
        bail!(
            "set-up ({action:?}) completed {} of {count} ConfigMap operations; first error: {}",
            result.ops,
            result.first_error.as_deref().unwrap_or("none")
        );
    }
    Ok(result)
}

/// Exactly as many operations as `tickets` holds, one client per worker.
pub async fn timed(
    clients: &[reqwest::Client],
    collection: &Arc<str>,
    tickets: &Tickets,
    action: Action,
    limit: Duration,
) -> anyhow::Result<LoadResult> {
    anyhow::ensure!(!clients.is_empty(), "no clients");
    let spec = LoadSpec::exactly(clients.len(), tickets.count(), limit);
    load::run(&spec, |worker| ConfigMapOps {
        client: clients[worker].clone(),
        collection: Arc::clone(collection),
        tickets: tickets.clone(),
        action: action.clone(),
    })
    .await
}

/// POST a namespace; expects 201.
pub async fn create_namespace(
    client: &reqwest::Client,
    url: &str,
    name: &str,
) -> anyhow::Result<()> {
    let body =
        format!(r#"{{"apiVersion":"v1","kind":"Namespace","metadata":{{"name":"{name}"}}}}"#);
    let request = client
        .post(format!("{url}/api/v1/namespaces"))
        .header(CONTENT_TYPE, "application/json")
        .body(body);
    send_expect(
        request,
        StatusCode::CREATED,
        &format!("create namespace {name}"),
    )
    .await?;
    Ok(())
}

/// How many ConfigMaps a namespace holds (terminating ones included).
pub async fn count_configmaps(client: &reqwest::Client, collection: &str) -> anyhow::Result<usize> {
    let body = send_expect(client.get(collection), StatusCode::OK, "list configmaps").await?;
    let list: Value = serde_json::from_slice(body.as_ref()).context("parse the configmap list")?;
    Ok(list
        .get("items")
        .and_then(Value::as_array)
        .map_or(0, Vec::len))
}
