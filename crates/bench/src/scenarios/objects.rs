//! Object operations over HTTPS shared by the deletion scenarios: namespaces, the custom
//! resource definition the harness installs, and collections of objects addressed by item
//! number (`cm-{i}`, `widget-{i}`), so that one phase can create a set of objects and a later
//! phase delete or patch exactly that set with any number of clients.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use reqwest::StatusCode;
use reqwest::header::CONTENT_TYPE;
use serde_json::{Value, json};

use crate::load::{self, LoadResult, LoadSpec, Tickets, Worker};

/// The finalizer `finalizer-removal` puts on its ConfigMaps; nothing in the server acts on it.
pub const FINALIZER: &str = "bench.finale.dev/hold";

/// The merge patch (RFC 7386) that clears every finalizer: what a controller sends when it has
/// finished its clean-up.
pub const REMOVE_FINALIZERS: &str = r#"{"metadata":{"finalizers":null}}"#;

/// The API group of the harness's custom resource type.
pub const WIDGET_GROUP: &str = "bench.finale.dev";
/// The name of the CRD that serves [`Kind::Widget`]: `<plural>.<group>`.
pub const WIDGET_CRD: &str = "widgets.bench.finale.dev";
/// Polling step while waiting for the CRD to be established.
const ESTABLISH_POLL: Duration = Duration::from_millis(10);

/// The kinds of object the scenarios create.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A core `v1` ConfigMap; the payload is its one `data` value.
    ConfigMap,
    /// A namespaced custom resource, `bench.finale.dev/v1` `Widget`, served once
    /// [`install_widget_crd`] has run; the payload is `spec.payload`.
    Widget,
}

impl Kind {
    /// How the figure names count these objects: "1000 ConfigMaps".
    pub fn counted(self) -> &'static str {
        match self {
            Kind::ConfigMap => "ConfigMaps",
            Kind::Widget => "custom resources",
        }
    }

    /// The resource, as error messages and the JSON dump name it.
    pub fn resource(self) -> &'static str {
        match self {
            Kind::ConfigMap => "configmaps",
            Kind::Widget => "widgets.bench.finale.dev",
        }
    }

    /// What the names of these objects start with, before the item number.
    pub fn name_prefix(self) -> &'static str {
        match self {
            Kind::ConfigMap => "cm-",
            Kind::Widget => "widget-",
        }
    }

    /// The name of object number `item`.
    pub fn object_name(self, item: u64) -> String {
        format!("{}{item}", self.name_prefix())
    }

    /// The collection in `namespace` on the server at `url`.
    pub fn collection_url(self, url: &str, namespace: &str) -> String {
        match self {
            Kind::ConfigMap => format!("{url}/api/v1/namespaces/{namespace}/configmaps"),
            Kind::Widget => format!("{url}/apis/{WIDGET_GROUP}/v1/namespaces/{namespace}/widgets"),
        }
    }

    /// The etcd keys of such objects in `namespace` as kube-apiserver lays them out, up to
    /// the item number: the etcd baseline writes and deletes the keys `{prefix}{i}`.
    pub fn etcd_key_prefix(self, namespace: &str) -> String {
        let resource = match self {
            Kind::ConfigMap => "configmaps".to_string(),
            Kind::Widget => format!("{WIDGET_GROUP}/widgets"),
        };
        format!("/registry/{resource}/{namespace}/{}", self.name_prefix())
    }

    /// The JSON body that creates object `name` holding `payload`, with `finalizers`.
    fn manifest(self, name: &str, finalizers: &[&str], payload: &str) -> String {
        let metadata = if finalizers.is_empty() {
            json!({"name": name})
        } else {
            json!({"name": name, "finalizers": finalizers})
        };
        let object = match self {
            Kind::ConfigMap => json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": metadata,
                "data": {"payload": payload},
            }),
            Kind::Widget => json!({
                "apiVersion": format!("{WIDGET_GROUP}/v1"),
                "kind": "Widget",
                "metadata": metadata,
                "spec": {"payload": payload},
            }),
        };
        object.to_string()
    }
}

/// A collection of numbered objects of one kind in one namespace.
#[derive(Clone, Debug)]
pub struct Collection {
    pub kind: Kind,
    /// `…/namespaces/<ns>/<plural>`.
    pub url: Arc<str>,
}

impl Collection {
    pub fn new(kind: Kind, server_url: &str, namespace: &str) -> Collection {
        Collection {
            kind,
            url: kind.collection_url(server_url, namespace).into(),
        }
    }
}

/// What an [`ObjectOps`] worker does to each object.
#[derive(Clone, Debug)]
pub enum Action {
    /// POST it with `data` as its payload, holding [`FINALIZER`] if `finalizer`; expects 201.
    Create { data: Arc<str>, finalizer: bool },
    /// DELETE it; expects 200 (the object, still there if a finalizer holds it).
    Delete,
    /// PATCH it with [`REMOVE_FINALIZERS`]; expects 200. On a terminating object this is the
    /// update that lets the server remove it.
    RemoveFinalizers,
}

/// One client working through the objects its [`Tickets`] hand out, one request at a time.
pub struct ObjectOps {
    pub client: reqwest::Client,
    pub collection: Collection,
    pub tickets: Tickets,
    pub action: Action,
}

impl Worker for ObjectOps {
    async fn op(&mut self, _seq: u64) -> anyhow::Result<()> {
        let kind = self.collection.kind;
        let name = kind.object_name(self.tickets.take()?);
        let collection = &*self.collection.url;
        let (request, expected, what) = match &self.action {
            Action::Create { data, finalizer } => {
                let finalizers: &[&str] = if *finalizer { &[FINALIZER] } else { &[] };
                let request = self
                    .client
                    .post(collection)
                    .header(CONTENT_TYPE, "application/json")
                    .body(kind.manifest(&name, finalizers, data));
                (request, StatusCode::CREATED, "create")
            }
            Action::Delete => {
                let request = self.client.delete(format!("{collection}/{name}"));
                (request, StatusCode::OK, "delete")
            }
            Action::RemoveFinalizers => {
                let request = self
                    .client
                    .patch(format!("{collection}/{name}"))
                    .header(CONTENT_TYPE, "application/merge-patch+json")
                    .body(REMOVE_FINALIZERS);
                (request, StatusCode::OK, "patch")
            }
        };
        send_expect(
            request,
            expected,
            &format!("{what} {} {name}", kind.resource()),
        )
        .await?;
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

/// Runs exactly `count` operations on `collection` with `clients` as untimed set-up, and fails
/// unless every one succeeded. Returns the run, for its rate.
pub async fn setup(
    clients: &[reqwest::Client],
    collection: &Collection,
    count: u64,
    action: Action,
    limit: Duration,
) -> anyhow::Result<LoadResult> {
    let tickets = Tickets::new(count);
    let result = timed(clients, collection, &tickets, action.clone(), limit).await?;
    if result.ops != count || result.errors > 0 {
        bail!(
            "set-up ({action:?}) completed {} of {count} operations on {}; first error: {}",
            result.ops,
            collection.kind.resource(),
            result.first_error.as_deref().unwrap_or("none")
        );
    }
    Ok(result)
}

/// Exactly as many operations as `tickets` holds, one client per worker.
pub async fn timed(
    clients: &[reqwest::Client],
    collection: &Collection,
    tickets: &Tickets,
    action: Action,
    limit: Duration,
) -> anyhow::Result<LoadResult> {
    anyhow::ensure!(!clients.is_empty(), "no clients");
    let spec = LoadSpec::exactly(clients.len(), tickets.count(), limit);
    load::run(&spec, |worker| ObjectOps {
        client: clients[worker].clone(),
        collection: collection.clone(),
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

/// How many objects a collection holds (terminating ones included).
pub async fn count_objects(
    client: &reqwest::Client,
    collection: &Collection,
) -> anyhow::Result<usize> {
    let resource = collection.kind.resource();
    let body = send_expect(
        client.get(&*collection.url),
        StatusCode::OK,
        &format!("list {resource}"),
    )
    .await?;
    let list: Value = serde_json::from_slice(body.as_ref())
        .with_context(|| format!("parse the {resource} list"))?;
    Ok(list
        .get("items")
        .and_then(Value::as_array)
        .map_or(0, Vec::len))
}

/// The CRD behind [`Kind::Widget`]: namespaced, one served and stored version, and a small
/// structural schema, so each create goes through the custom resource path's validation and
/// pruning as a real operator's objects would.
fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": WIDGET_CRD},
        "spec": {
            "group": WIDGET_GROUP,
            "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
            "versions": [{
                "name": "v1",
                "served": true,
                "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"spec": {
                        "type": "object",
                        "properties": {"payload": {"type": "string"}},
                    }},
                }},
            }],
        },
    })
}

/// Whether a CRD's status holds the condition `Established=True`.
fn established(crd: &Value) -> bool {
    crd.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|condition| condition["type"] == "Established" && condition["status"] == "True")
}

/// Creates the CRD that serves [`Kind::Widget`] on the server at `url` and waits, polling
/// `GET` for at most `limit`, until it is established; returns how long that took.
pub async fn install_widget_crd(
    client: &reqwest::Client,
    url: &str,
    limit: Duration,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let crds = format!("{url}/apis/apiextensions.k8s.io/v1/customresourcedefinitions");
    let request = client
        .post(&crds)
        .header(CONTENT_TYPE, "application/json")
        .body(widget_crd().to_string());
    send_expect(
        request,
        StatusCode::CREATED,
        &format!("create customresourcedefinition {WIDGET_CRD}"),
    )
    .await?;
    let crd_url = format!("{crds}/{WIDGET_CRD}");
    loop {
        let body = send_expect(
            client.get(&crd_url),
            StatusCode::OK,
            &format!("get customresourcedefinition {WIDGET_CRD}"),
        )
        .await?;
        let crd: Value = serde_json::from_slice(body.as_ref())
            .with_context(|| format!("parse customresourcedefinition {WIDGET_CRD}"))?;
        if established(&crd) {
            return Ok(started.elapsed());
        }
        if started.elapsed() >= limit {
            bail!(
                "customresourcedefinition {WIDGET_CRD} is not Established {limit:?} after its \
                 creation; its status: {}",
                crd["status"]
            );
        }
        tokio::time::sleep(ESTABLISH_POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_put_the_payload_where_each_kind_keeps_it() {
        let configmap: Value =
            serde_json::from_str(&Kind::ConfigMap.manifest("cm-7", &[FINALIZER], "abc")).unwrap();
        assert_eq!(
            configmap,
            json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "cm-7", "finalizers": ["bench.finale.dev/hold"]},
                "data": {"payload": "abc"},
            })
        );
        let widget: Value =
            serde_json::from_str(&Kind::Widget.manifest("widget-7", &[], "abc")).unwrap();
        assert_eq!(
            widget,
            json!({
                "apiVersion": "bench.finale.dev/v1",
                "kind": "Widget",
                "metadata": {"name": "widget-7"},
                "spec": {"payload": "abc"},
            })
        );
    }

    #[test]
    fn widgets_live_where_the_crd_serves_them() {
        let crd = widget_crd();
        let plural = crd["spec"]["names"]["plural"].as_str().unwrap();
        let group = crd["spec"]["group"].as_str().unwrap();
        assert_eq!(format!("{plural}.{group}"), WIDGET_CRD);
        assert_eq!(
            Collection::new(Kind::Widget, "https://h:1", "ns")
                .url
                .as_ref(),
            "https://h:1/apis/bench.finale.dev/v1/namespaces/ns/widgets"
        );
        assert_eq!(
            Collection::new(Kind::ConfigMap, "https://h:1", "ns")
                .url
                .as_ref(),
            "https://h:1/api/v1/namespaces/ns/configmaps"
        );
        assert_eq!(Kind::Widget.object_name(3), "widget-3");
        assert_eq!(Kind::ConfigMap.object_name(3), "cm-3");
        assert_eq!(
            Kind::Widget.etcd_key_prefix("ns"),
            "/registry/bench.finale.dev/widgets/ns/widget-"
        );
        assert_eq!(
            Kind::ConfigMap.etcd_key_prefix("ns"),
            "/registry/configmaps/ns/cm-"
        );
    }

    #[test]
    fn established_needs_the_true_condition() {
        let with = |conditions: Value| json!({"status": {"conditions": conditions}});
        assert!(established(&with(json!([
            {"type": "NamesAccepted", "status": "True"},
            {"type": "Established", "status": "True"},
        ]))));
        assert!(!established(&with(json!([
            {"type": "Established", "status": "False"}
        ]))));
        assert!(!established(&with(json!([
            {"type": "NamesAccepted", "status": "True"}
        ]))));
        assert!(!established(&json!({"metadata": {"name": WIDGET_CRD}})));
    }
}
