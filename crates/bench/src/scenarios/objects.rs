//! Object operations over HTTPS shared by the deletion scenarios: namespaces, the custom
//! resource definition the harness installs, collections of objects addressed by item number
//! (`cm-{i}`, `widget-{i}`), so that one phase can create a set of objects (optionally owned by
//! other objects) and a later phase delete or patch exactly that set with any number of
//! clients, and watches that tell when an object is gone.

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

    /// The `apiVersion` of such objects.
    pub fn api_version(self) -> String {
        match self {
            Kind::ConfigMap => "v1".to_string(),
            Kind::Widget => format!("{WIDGET_GROUP}/v1"),
        }
    }

    /// The `kind` of such objects.
    pub fn kind_name(self) -> &'static str {
        match self {
            Kind::ConfigMap => "ConfigMap",
            Kind::Widget => "Widget",
        }
    }

    /// The JSON body that creates object `name` holding `payload`, with `finalizers` and, if
    /// given, one owner reference.
    fn manifest(
        self,
        name: &str,
        finalizers: &[&str],
        owner: Option<&OwnerRef>,
        payload: &str,
    ) -> String {
        let mut metadata = json!({"name": name});
        if !finalizers.is_empty() {
            metadata["finalizers"] = json!(finalizers);
        }
        if let Some(owner) = owner {
            metadata["ownerReferences"] = json!([owner.to_json()]);
        }
        let mut object = json!({
            "apiVersion": self.api_version(),
            "kind": self.kind_name(),
            "metadata": metadata,
        });
        match self {
            Kind::ConfigMap => object["data"] = json!({"payload": payload}),
            Kind::Widget => object["spec"] = json!({"payload": payload}),
        }
        object.to_string()
    }
}

/// One `metadata.ownerReferences` entry: the object it names owns the object that carries it,
/// so the garbage collector deletes (or orphans) the latter when the former goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerRef {
    pub kind: Kind,
    pub name: String,
    pub uid: String,
    /// Whether a foreground deletion of the owner waits for this dependent to go first.
    pub block_owner_deletion: bool,
}

impl OwnerRef {
    fn to_json(&self) -> Value {
        let mut reference = json!({
            "apiVersion": self.kind.api_version(),
            "kind": self.kind.kind_name(),
            "name": self.name,
            "uid": self.uid,
        });
        if self.block_owner_deletion {
            reference["blockOwnerDeletion"] = json!(true);
        }
        reference
    }
}

/// Who owns the objects an [`Action::Create`] makes: nobody, or item `i` is owned by the
/// `i % n`-th of `n` owners, so the items spread evenly over them.
#[derive(Clone, Debug, Default)]
pub struct Owners(Arc<[OwnerRef]>);

impl Owners {
    pub fn none() -> Owners {
        Owners::default()
    }

    pub fn round_robin(owners: Vec<OwnerRef>) -> Owners {
        Owners(owners.into())
    }

    /// The owner of item `item`, if the items have owners.
    pub fn of(&self, item: u64) -> Option<&OwnerRef> {
        let count = self.0.len() as u64;
        (count > 0).then(|| &self.0[(item % count) as usize])
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
    /// POST it with `data` as its payload, holding [`FINALIZER`] if `finalizer` and a
    /// reference to its owner among `owners`, if any; expects 201.
    Create {
        data: Arc<str>,
        finalizer: bool,
        owners: Owners,
    },
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
        let item = self.tickets.take()?;
        let name = kind.object_name(item);
        let collection = &*self.collection.url;
        let (request, expected, what) = match &self.action {
            Action::Create {
                data,
                finalizer,
                owners,
            } => {
                let finalizers: &[&str] = if *finalizer { &[FINALIZER] } else { &[] };
                let request = self
                    .client
                    .post(collection)
                    .header(CONTENT_TYPE, "application/json")
                    .body(kind.manifest(&name, finalizers, owners.of(item), data));
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

/// DELETEs a namespace and waits, polling `GET`, until it is gone, for at most `limit`: the
/// clean-up between runs, so that one run's teardown does not overlap the next's timing.
pub async fn delete_namespace(
    client: &reqwest::Client,
    url: &str,
    name: &str,
    limit: Duration,
) -> anyhow::Result<()> {
    let namespace_url = format!("{url}/api/v1/namespaces/{name}");
    let deadline = Instant::now() + limit;
    send_expect(
        client.delete(&namespace_url),
        StatusCode::OK,
        &format!("delete namespace {name}"),
    )
    .await?;
    poll_until_gone(
        client,
        &namespace_url,
        &format!("namespace {name}"),
        deadline,
    )
    .await
}

/// POSTs one object `name` of the collection's kind holding `payload`, owned by `owner` if
/// given; expects 201 and returns the uid the server gave it.
pub async fn create_object(
    client: &reqwest::Client,
    collection: &Collection,
    name: &str,
    owner: Option<&OwnerRef>,
    payload: &str,
) -> anyhow::Result<String> {
    let kind = collection.kind;
    let what = format!("create {} {name}", kind.resource());
    let request = client
        .post(&*collection.url)
        .header(CONTENT_TYPE, "application/json")
        .body(kind.manifest(name, &[], owner, payload));
    let body = send_expect(request, StatusCode::CREATED, &what).await?;
    let created: Value = serde_json::from_slice(body.as_ref())
        .with_context(|| format!("{what}: parse the response"))?;
    created
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .map(str::to_string)
        .with_context(|| format!("{what}: the created object has no metadata.uid"))
}

/// GETs the whole collection: a list with `items` and `metadata.resourceVersion`.
pub async fn list(client: &reqwest::Client, collection: &Collection) -> anyhow::Result<Value> {
    let resource = collection.kind.resource();
    let body = send_expect(
        client.get(&*collection.url),
        StatusCode::OK,
        &format!("list {resource}"),
    )
    .await?;
    serde_json::from_slice(body.as_ref()).with_context(|| format!("parse the {resource} list"))
}

/// The objects of a list.
pub fn items(list: &Value) -> &[Value] {
    list.get("items")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// How many objects a collection holds (terminating ones included).
pub async fn count_objects(
    client: &reqwest::Client,
    collection: &Collection,
) -> anyhow::Result<usize> {
    Ok(items(&list(client, collection).await?).len())
}

/// Where a [`Watch`] starts.
#[derive(Clone, Copy, Debug)]
pub enum WatchFrom<'a> {
    /// Only the object of this name, beginning with an `ADDED` event for it if it exists.
    Named(&'a str),
    /// Every object of the collection, changes after this resourceVersion only (that of a
    /// list: no events for what the list already showed, and none missed in between).
    After(&'a str),
}

/// The URL of a watch on the collection at `list_url`, which the server ends after
/// `timeout_seconds`.
fn watch_url(list_url: &str, from: WatchFrom<'_>, timeout_seconds: u64) -> String {
    let start = match from {
        WatchFrom::Named(name) => format!("fieldSelector=metadata.name%3D{name}"),
        WatchFrom::After(resource_version) => format!("resourceVersion={resource_version}"),
    };
    format!("{list_url}?watch=true&{start}&timeoutSeconds={timeout_seconds}")
}

/// A watch on a collection, read one newline-delimited JSON event at a time.
pub struct Watch {
    response: reqwest::Response,
    buffer: Vec<u8>,
}

impl Watch {
    /// Opens a watch on the collection at `list_url` (`…/namespaces` or
    /// `…/namespaces/<ns>/configmaps`) that lasts at least `limit`.
    pub async fn open(
        client: &reqwest::Client,
        list_url: &str,
        from: WatchFrom<'_>,
        limit: Duration,
    ) -> anyhow::Result<Watch> {
        // The server ends the watch at timeoutSeconds; the client gives it a little longer
        // than that (the client's default 30 s cap would otherwise cut long waits short).
        let request = client
            .get(watch_url(list_url, from, limit.as_secs().max(1)))
            .timeout(limit + Duration::from_secs(10));
        let response = request
            .send()
            .await
            .with_context(|| format!("open a watch on {list_url}"))?;
        if response.status() != StatusCode::OK {
            bail!("the watch on {list_url} answered {}", response.status());
        }
        Ok(Watch {
            response,
            buffer: Vec::new(),
        })
    }

    /// Opens a watch on the one object `name` and waits, for at most `within`, for its
    /// initial `ADDED` event: once that arrived the watch is known to be registered, so no
    /// later change can be missed.
    pub async fn open_named(
        client: &reqwest::Client,
        list_url: &str,
        name: &str,
        limit: Duration,
        within: Duration,
    ) -> anyhow::Result<Watch> {
        let mut watch = Watch::open(client, list_url, WatchFrom::Named(name), limit).await?;
        match tokio::time::timeout(within, watch.next()).await {
            Ok(Ok(Some((kind, _)))) if kind == "ADDED" => Ok(watch),
            Ok(Ok(Some((kind, object)))) => {
                bail!("the watch on {name} began with {kind} instead of ADDED: {object}")
            }
            Ok(Ok(None)) => bail!("the watch on {name} ended before its first event"),
            Ok(Err(error)) => Err(error),
            Err(_) => bail!("no initial event on the watch on {name} within {within:?}"),
        }
    }

    /// The next event's type and object; None when the stream ends.
    pub async fn next(&mut self) -> anyhow::Result<Option<(String, Value)>> {
        loop {
            if let Some(end) = self.buffer.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=end).collect();
                let mut event: Value =
                    serde_json::from_slice(&line).context("parse a watch event")?;
                let kind = event["type"].as_str().unwrap_or_default().to_string();
                return Ok(Some((kind, event["object"].take())));
            }
            match self.response.chunk().await.context("read the watch")? {
                Some(chunk) => self.buffer.extend_from_slice(&chunk),
                None => return Ok(None),
            }
        }
    }
}

/// Polling step of [`poll_until_gone`].
const POLL: Duration = Duration::from_millis(5);

/// Polls `GET object_url` every 5 ms until it answers 404 or `deadline` passes; `what` names
/// the object in errors.
pub async fn poll_until_gone(
    client: &reqwest::Client,
    object_url: &str,
    what: &str,
    deadline: Instant,
) -> anyhow::Result<()> {
    loop {
        let response = client
            .get(object_url)
            .send()
            .await
            .with_context(|| format!("GET {what}"))?;
        let status = response.status();
        response
            .bytes()
            .await
            .with_context(|| format!("read {what}"))?;
        match status {
            StatusCode::NOT_FOUND => return Ok(()),
            StatusCode::OK => {}
            other => bail!("GET {what} answered {other}"),
        }
        if Instant::now() >= deadline {
            bail!("{what} still exists at the time limit");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until `watch`, a [`WatchFrom::Named`] watch on the object at `object_url`, delivers
/// its `DELETED` event, for at most `limit` after `started`. Should the watch end or fail
/// first, polls `GET` until 404 instead, and says so on stderr under `scenario`. Returns how
/// the deletion was seen: "watch" or "poll".
pub async fn wait_until_deleted(
    watch: &mut Watch,
    client: &reqwest::Client,
    object_url: &str,
    what: &str,
    started: Instant,
    limit: Duration,
    scenario: &str,
) -> anyhow::Result<&'static str> {
    let deadline = started + limit;
    loop {
        let event = match tokio::time::timeout_at(deadline.into(), watch.next()).await {
            Ok(event) => event,
            Err(_) => bail!("{what} still exists {limit:?} after its DELETE"),
        };
        match event {
            Ok(Some((kind, _))) if kind == "DELETED" => return Ok("watch"),
            Ok(Some((kind, object))) if kind == "ERROR" => {
                eprintln!(
                    "[{scenario}] the watch on {what} failed ({object}); polling GET instead"
                );
            }
            Ok(Some(_)) => continue,
            Ok(None) => eprintln!("[{scenario}] the watch on {what} ended; polling GET instead"),
            Err(error) => {
                eprintln!(
                    "[{scenario}] the watch on {what} failed ({error:#}); polling GET instead"
                )
            }
        }
        poll_until_gone(client, object_url, what, deadline).await?;
        return Ok("poll");
    }
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
            serde_json::from_str(&Kind::ConfigMap.manifest("cm-7", &[FINALIZER], None, "abc"))
                .unwrap();
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
            serde_json::from_str(&Kind::Widget.manifest("widget-7", &[], None, "abc")).unwrap();
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

    fn owner(name: &str, uid: &str, block_owner_deletion: bool) -> OwnerRef {
        OwnerRef {
            kind: Kind::ConfigMap,
            name: name.into(),
            uid: uid.into(),
            block_owner_deletion,
        }
    }

    #[test]
    fn owned_objects_carry_one_owner_reference() {
        let blocking = owner("middle-3", "u-3", true);
        let leaf: Value =
            serde_json::from_str(&Kind::ConfigMap.manifest("cm-13", &[], Some(&blocking), "x"))
                .unwrap();
        assert_eq!(
            leaf,
            json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": "cm-13",
                    "ownerReferences": [{
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "name": "middle-3",
                        "uid": "u-3",
                        "blockOwnerDeletion": true,
                    }],
                },
                "data": {"payload": "x"},
            })
        );
        let widget_owner = OwnerRef {
            kind: Kind::Widget,
            ..owner("w", "u-w", false)
        };
        assert_eq!(
            widget_owner.to_json(),
            json!({"apiVersion": "bench.finale.dev/v1", "kind": "Widget", "name": "w", "uid": "u-w"})
        );
    }

    #[test]
    fn owners_are_dealt_round_robin() {
        assert_eq!(Owners::none().of(0), None);
        let one = Owners::round_robin(vec![owner("owner", "u", false)]);
        assert_eq!(one.of(0).unwrap().name, "owner");
        assert_eq!(one.of(9_999).unwrap().name, "owner");
        let three = Owners::round_robin(vec![
            owner("m-0", "u0", true),
            owner("m-1", "u1", true),
            owner("m-2", "u2", true),
        ]);
        let names: Vec<_> = (0..7).map(|i| three.of(i).unwrap().name.as_str()).collect();
        assert_eq!(names, ["m-0", "m-1", "m-2", "m-0", "m-1", "m-2", "m-0"]);
    }

    #[test]
    fn watches_select_one_name_or_start_after_a_list() {
        let configmaps = "https://h:1/api/v1/namespaces/ns/configmaps";
        assert_eq!(
            watch_url(configmaps, WatchFrom::Named("root"), 70),
            "https://h:1/api/v1/namespaces/ns/configmaps?watch=true\
             &fieldSelector=metadata.name%3Droot&timeoutSeconds=70"
        );
        assert_eq!(
            watch_url(configmaps, WatchFrom::After("1234"), 80),
            "https://h:1/api/v1/namespaces/ns/configmaps?watch=true&resourceVersion=1234\
             &timeoutSeconds=80"
        );
        let list = json!({"metadata": {"resourceVersion": "5"}, "items": [{}, {}]});
        assert_eq!(items(&list).len(), 2);
        assert!(items(&json!({"metadata": {}})).is_empty());
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
