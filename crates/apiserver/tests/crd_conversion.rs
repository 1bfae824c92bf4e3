//! CRD conversion webhooks for real: a CRD with two versions (`v1` says `spec.size: "3"`, a
//! string; `v2`, the storage version, says `spec.replicas: 3`) converted by a webhook server
//! on 127.0.0.1 with its own CA ([`common::webhook`]), read and written in both versions
//! through kube-rs, kubectl and raw HTTPS. The webhook records every `ConversionReview`, so
//! each test proves the webhook was (or was not) called by counting them.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::raw::Http;
use common::webhook::TlsWebhook;
use common::{TestServer, WAIT, apply_crd, kubectl, within};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams, WatchEvent, WatchParams,
};
use serde_json::{Value, json};

const GROUP: &str = "conv.example.com";
const CRD_NAME: &str = "widgets.conv.example.com";

/// The test converter: `spec.size` (a string) in v1, `spec.replicas` (an integer) in v2.
/// `/wrong-count` answers with no object, `/rename` renames every object: bad answers the
/// server must refuse. `/leaky` adds what no schema allows, which the server must prune.
async fn convert(path: String, review: Value) -> Value {
    let request = &review["request"];
    if path == "/admit" {
        // An admission webhook beside the converter: allows, and is recorded.
        return json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": request["uid"], "allowed": true}});
    }
    let desired = request["desiredAPIVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut objects: Vec<Value> = request["objects"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|object| convert_object(object, &desired))
        .collect();
    match path.as_str() {
        "/wrong-count" => objects.clear(),
        "/leaky" => {
            // Fields no version's schema has, and a null where none is allowed: the server
            // must prune both from what it stores and what it serves.
            for object in &mut objects {
                object["spec"]["leaked"] = json!("from the webhook");
                object["status"] = json!({"ready": null});
            }
        }
        "/rename" => {
            for object in &mut objects {
                let renamed = format!(
                    "{}-renamed",
                    object["metadata"]["name"].as_str().unwrap_or_default()
                );
                object["metadata"]["name"] = json!(renamed);
            }
        }
        _ => {}
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "response": {"uid": request["uid"], "convertedObjects": objects, "result": {"status": "Success"}},
    })
}

fn convert_object(mut object: Value, desired: &str) -> Value {
    if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
        if desired.ends_with("/v2") {
            if let Some(size) = spec.remove("size") {
                let replicas = size
                    .as_str()
                    .and_then(|s| s.parse::<i64>().ok())
                    .unwrap_or(0);
                spec.insert("replicas".into(), json!(replicas));
            }
        } else if let Some(replicas) = spec.remove("replicas") {
            spec.insert(
                "size".into(),
                json!(replicas.as_i64().unwrap_or(0).to_string()),
            );
        }
    }
    object["apiVersion"] = json!(desired);
    object
}

async fn start_converter() -> TlsWebhook {
    TlsWebhook::start(Arc::new(|path, review| Box::pin(convert(path, review)))).await
}

/// The reviews the converter got at `path`: (desiredAPIVersion, number of objects).
fn reviews_at(hooks: &TlsWebhook, path: &str) -> Vec<(String, usize)> {
    hooks
        .calls()
        .into_iter()
        .filter(|(p, _)| p == path)
        .map(|(_, review)| {
            (
                review["request"]["desiredAPIVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                review["request"]["objects"].as_array().map_or(0, Vec::len),
            )
        })
        .collect()
}

fn crd(url: &str, ca_bundle: &str) -> CustomResourceDefinition {
    crd_storing("v2", url, ca_bundle)
}

/// The CRD with `storage` as its storage version, its webhook at `url`.
fn crd_storing(storage: &str, url: &str, ca_bundle: &str) -> CustomResourceDefinition {
    crd_calling(storage, json!({"url": url, "caBundle": ca_bundle}))
}

/// The CRD with `storage` as its storage version, its webhook at `client_config`.
fn crd_calling(storage: &str, client_config: Value) -> CustomResourceDefinition {
    let version = |name: &str, storage: bool, spec: Value| {
        json!({
            "name": name, "served": true, "storage": storage,
            "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": spec},
                "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}},
            }}},
        })
    };
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "conversion": {"strategy": "Webhook", "webhook": {
                "conversionReviewVersions": ["v1"],
                "clientConfig": client_config,
            }},
            "versions": [
                version("v1", storage == "v1", json!({"size": {"type": "string"}})),
                version("v2", storage == "v2", json!({"replicas": {"type": "integer"}})),
            ],
        },
    }))
    .expect("a valid CRD")
}

fn widgets(server: &TestServer, version: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(GROUP, version, "Widget"),
        "widgets",
    );
    Api::namespaced_with(server.client.clone(), "default", &resource)
}

fn widget(version: &str, name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/{version}"), "kind": "Widget",
        "metadata": {"name": name}, "spec": spec,
    }))
    .expect("a valid Widget")
}

fn spec(object: &DynamicObject) -> Value {
    object.data["spec"].clone()
}

#[tokio::test]
async fn a_crd_with_two_versions_and_a_conversion_webhook_is_read_and_written_in_both() {
    let hooks = start_converter().await;
    let server = TestServer::start().await;
    let crds = apply_crd(
        &server.client,
        crd(&hooks.url("/convert"), &hooks.ca_bundle()),
        "test",
    )
    .await;
    let (v1, v2) = (widgets(&server, "v1"), widgets(&server, "v2"));
    assert!(hooks.calls().is_empty(), "nothing converted yet");

    // A create in v1 is validated in v1 and stored in v2: one review, to v2.
    let created = within(
        WAIT,
        v1.create(
            &PostParams::default(),
            &widget("v1", "w1", json!({"size": "3"})),
        ),
    )
    .await
    .expect("create in v1");
    assert_eq!(
        created.types.as_ref().map(|t| t.api_version.as_str()),
        Some("conv.example.com/v1")
    );
    assert_eq!(spec(&created), json!({"size": "3"}));
    assert_eq!(
        reviews_at(&hooks, "/convert"),
        vec![("conv.example.com/v2".to_string(), 1)]
    );

    // Read in the storage version: as stored, no review.
    let stored = within(WAIT, v2.get("w1")).await.expect("get in v2");
    assert_eq!(spec(&stored), json!({"replicas": 3}));
    assert_eq!(
        hooks.calls().len(),
        1,
        "a read in the storage version is not converted"
    );

    // Read in v1: converted.
    let read = within(WAIT, v1.get("w1")).await.expect("get in v1");
    assert_eq!(spec(&read), json!({"size": "3"}));
    assert_eq!(
        read.types.as_ref().map(|t| t.api_version.as_str()),
        Some("conv.example.com/v1")
    );
    assert_eq!(
        reviews_at(&hooks, "/convert").last(),
        Some(&("conv.example.com/v1".to_string(), 1))
    );

    // A list in v1: one review for the page.
    within(
        WAIT,
        v2.create(
            &PostParams::default(),
            &widget("v2", "w2", json!({"replicas": 4})),
        ),
    )
    .await
    .expect("create in v2");
    let calls_before_list = hooks.calls().len();
    let list = within(WAIT, v1.list(&ListParams::default()))
        .await
        .expect("list in v1");
    let sizes: Vec<Value> = list.items.iter().map(spec).collect();
    assert_eq!(sizes, vec![json!({"size": "3"}), json!({"size": "4"})]);
    assert_eq!(
        hooks.calls().len(),
        calls_before_list + 1,
        "one review for the list"
    );
    assert_eq!(
        reviews_at(&hooks, "/convert").last(),
        Some(&("conv.example.com/v1".to_string(), 2))
    );

    // A watch in v1 sees a change made in v2, converted.
    let resource_version = list.metadata.resource_version.clone().unwrap_or_default();
    let mut events = within(WAIT, v1.watch(&WatchParams::default(), &resource_version))
        .await
        .expect("watch in v1")
        .boxed();
    within(
        WAIT,
        v2.patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        ),
    )
    .await
    .expect("patch in v2");
    let event = within(WAIT, events.try_next())
        .await
        .expect("a watch event")
        .expect("not the end");
    match event {
        WatchEvent::Modified(object) => {
            assert_eq!(object.metadata.name.as_deref(), Some("w1"));
            assert_eq!(spec(&object), json!({"size": "5"}));
            assert_eq!(
                object.types.as_ref().map(|t| t.api_version.as_str()),
                Some("conv.example.com/v1")
            );
        }
        other => panic!("expected MODIFIED, got {other:?}"),
    }
    drop(events);

    // A patch in v1: the stored v1 object is patched and stored in v2.
    let patched = within(
        WAIT,
        v1.patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": "7"}})),
        ),
    )
    .await
    .expect("patch in v1");
    assert_eq!(spec(&patched), json!({"size": "7"}));
    let stored = within(WAIT, v2.get("w1")).await.expect("get in v2");
    assert_eq!(spec(&stored), json!({"replicas": 7}));

    // The status subresource in v1.
    within(
        WAIT,
        v1.patch_status(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": true}})),
        ),
    )
    .await
    .expect("status patch in v1");
    let stored = within(WAIT, v2.get("w1")).await.expect("get in v2");
    assert_eq!(stored.data["status"], json!({"ready": true}));
    assert_eq!(spec(&stored), json!({"replicas": 7}));

    // Server-side apply in v1, creating and then changing.
    let apply = PatchParams::apply("conversion-test").force();
    within(
        WAIT,
        v1.patch(
            "w3",
            &apply,
            &Patch::Apply(widget("v1", "w3", json!({"size": "9"}))),
        ),
    )
    .await
    .expect("apply in v1");
    within(
        WAIT,
        v1.patch(
            "w3",
            &apply,
            &Patch::Apply(widget("v1", "w3", json!({"size": "10"}))),
        ),
    )
    .await
    .expect("apply again in v1");
    let stored = within(WAIT, v2.get("w3")).await.expect("get in v2");
    assert_eq!(spec(&stored), json!({"replicas": 10}));

    // The storage version is recorded.
    let definition = within(WAIT, crds.get(CRD_NAME)).await.expect("get the CRD");
    let definition = serde_json::to_value(&definition).expect("the CRD as JSON");
    assert_eq!(definition["status"]["storedVersions"], json!(["v2"]));

    // kubectl, in both versions.
    let (ok, stdout, stderr) = kubectl(
        &server,
        &[
            "get",
            "widgets.v1.conv.example.com",
            "w1",
            "-n",
            "default",
            "-o",
            "json",
        ],
    )
    .await;
    assert!(ok, "{stderr}");
    let object: Value = serde_json::from_str(&stdout).expect("kubectl prints JSON");
    assert_eq!(object["spec"], json!({"size": "7"}));
    assert_eq!(object["apiVersion"], "conv.example.com/v1");
    let manifest = json!({"apiVersion": "conv.example.com/v1", "kind": "Widget",
        "metadata": {"name": "w4", "namespace": "default"}, "spec": {"size": "11"}});
    let file = server.dir.path().join("w4.json");
    std::fs::write(&file, manifest.to_string()).expect("write the manifest");
    let path = file.to_string_lossy().into_owned();
    let (ok, stdout, stderr) = kubectl(&server, &["apply", "-f", &path]).await;
    assert!(ok, "kubectl apply in v1: {stderr}");
    assert!(
        stdout.contains("widget.conv.example.com/w4 created"),
        "{stdout}"
    );
    let (ok, stdout, stderr) = kubectl(
        &server,
        &[
            "patch",
            "widgets.v1.conv.example.com",
            "w4",
            "-n",
            "default",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"size":"12"}}"#,
        ],
    )
    .await;
    assert!(ok, "kubectl patch in v1: {stderr} {stdout}");
    let (ok, stdout, stderr) = kubectl(
        &server,
        &[
            "get",
            "widgets.v2.conv.example.com",
            "w4",
            "-n",
            "default",
            "-o",
            "jsonpath={.spec.replicas}",
        ],
    )
    .await;
    assert!(ok, "{stderr}");
    assert_eq!(stdout.trim(), "12");
    let (ok, stdout, stderr) = kubectl(
        &server,
        &["get", "widgets.v1.conv.example.com", "-n", "default"],
    )
    .await;
    assert!(ok, "kubectl get (a table) in v1: {stderr}");
    for name in ["w1", "w2", "w3", "w4"] {
        assert!(stdout.contains(name), "{stdout}");
    }

    // An admission webhook for v2 only (matchPolicy Equivalent) is sent a v1 create in v2,
    // converted by the CRD's webhook, as upstream converts it.
    let http = Http::new(&server);
    http.post(
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
        &json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "widgets-v2"},
            "webhooks": [{"name": "v2.conv.example.com",
                "clientConfig": {"url": hooks.url("/admit"), "caBundle": hooks.ca_bundle()},
                "rules": [{"operations": ["CREATE"], "apiGroups": [GROUP], "apiVersions": ["v2"], "resources": ["widgets"]}],
                "sideEffects": "None", "admissionReviewVersions": ["v1"]}]}),
    )
    .await
    .expect(201);
    within(
        WAIT,
        v1.create(
            &PostParams::default(),
            &widget("v1", "w5", json!({"size": "13"})),
        ),
    )
    .await
    .expect("create in v1 past the admission webhook");
    let admitted: Vec<Value> = hooks
        .calls()
        .into_iter()
        .filter(|(p, _)| p == "/admit")
        .map(|(_, review)| review["request"].clone())
        .collect();
    assert_eq!(admitted.len(), 1, "{admitted:?}");
    assert_eq!(admitted[0]["requestKind"]["version"], "v1");
    assert_eq!(admitted[0]["kind"]["version"], "v2");
    assert_eq!(admitted[0]["object"]["apiVersion"], "conv.example.com/v2");
    assert_eq!(admitted[0]["object"]["spec"], json!({"replicas": 13}));

    // A DELETE in v1 answers in v1: an object a finalizer holds is answered as it stays.
    let held: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "conv.example.com/v2", "kind": "Widget",
        "metadata": {"name": "held", "finalizers": ["example.com/hold"]},
        "spec": {"replicas": 6},
    }))
    .expect("a valid Widget");
    within(WAIT, v2.create(&PostParams::default(), &held))
        .await
        .expect("create a held Widget");
    let reply = http
        .delete("/apis/conv.example.com/v1/namespaces/default/widgets/held")
        .await;
    assert!(matches!(reply.status, 200 | 202), "{}", reply.body);
    assert_eq!(reply.body["apiVersion"], "conv.example.com/v1");
    assert_eq!(reply.body["spec"], json!({"size": "6"}));
    assert!(
        reply.body["metadata"]["deletionTimestamp"].is_string(),
        "{}",
        reply.body
    );

    // Reviews went both ways; upstream's metric observed them.
    let reviews = reviews_at(&hooks, "/convert");
    assert!(
        reviews.iter().any(|(to, _)| to == "conv.example.com/v1"),
        "{reviews:?}"
    );
    assert!(
        reviews.iter().any(|(to, _)| to == "conv.example.com/v2"),
        "{reviews:?}"
    );
    let metrics = http.get("/metrics").await.expect(200);
    let text = metrics.as_str().unwrap_or_default();
    assert!(
        text.lines().any(|l| l
            .starts_with("apiserver_crd_conversion_webhook_duration_seconds_count{")
            && l.contains("crd_name=\"widgets.conv.example.com\"")
            && l.contains("from_version=\"v1\"")
            && l.contains("to_version=\"v2\"")
            && l.contains("succeeded=\"true\"")),
        "{text}"
    );
    server.shutdown().await;
}

/// Polls `path` until it fails with `message` (the CRD controller takes a moment to serve a
/// changed conversion).
async fn wait_for_failure(http: &Http, path: &str, message: &str) -> Value {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let reply = http.get(path).await;
        if reply.status == 500 && reply.body["message"] == message {
            return reply.expect_failure(500, "");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{path} never failed with {message:?}; last answer {} {}",
            reply.status,
            reply.body
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_webhook_that_is_down_or_answers_badly_fails_conversions_as_upstream() {
    let hooks = start_converter().await;
    let server = TestServer::start().await;
    apply_crd(
        &server.client,
        crd(&hooks.url("/convert"), &hooks.ca_bundle()),
        "test",
    )
    .await;
    let (v1, v2) = (widgets(&server, "v1"), widgets(&server, "v2"));
    let http = Http::new(&server);
    for name in ["w1", "w2", "w3"] {
        within(
            WAIT,
            v2.create(
                &PostParams::default(),
                &widget("v2", name, json!({"replicas": 3})),
            ),
        )
        .await
        .expect("create in v2");
    }
    assert!(
        hooks.calls().is_empty(),
        "writes in the storage version are not converted"
    );
    let read = within(WAIT, v1.get("w1")).await.expect("get in v1");
    assert_eq!(spec(&read), json!({"size": "3"}));
    assert_eq!(hooks.calls().len(), 1);

    // The webhook goes down (nothing listens on port 1).
    let down = "https://127.0.0.1:1/convert";
    apply_crd(&server.client, crd(down, &hooks.ca_bundle()), "test").await;
    let v1_path = "/apis/conv.example.com/v1/namespaces/default/widgets";
    let refused = format!(
        "conversion webhook for conv.example.com/v2, Kind=Widget failed: Post \"{down}\": dial tcp 127.0.0.1:1: connect: connection refused"
    );
    wait_for_failure(&http, &format!("{v1_path}/w1"), &refused).await;
    // A list fails the same way; a write in v1 too, and stores nothing.
    http.get(v1_path).await.expect_failure(500, "");
    let write = http
        .post(
            v1_path,
            &json!({"apiVersion": "conv.example.com/v1", "kind": "Widget",
            "metadata": {"name": "new"}, "spec": {"size": "1"}}),
        )
        .await
        .expect_failure(500, "");
    assert_eq!(
        write["message"],
        format!(
            "conversion webhook for conv.example.com/v1, Kind=Widget failed: Post \"{down}\": dial tcp 127.0.0.1:1: connect: connection refused"
        )
    );
    http.get("/apis/conv.example.com/v2/namespaces/default/widgets/new")
        .await
        .expect(404);
    // A DELETE in v1 converts first, as upstream does: it fails and the object stays.
    http.delete(&format!("{v1_path}/w3"))
        .await
        .expect_failure(500, "");
    http.get("/apis/conv.example.com/v2/namespaces/default/widgets/w3")
        .await
        .expect(200);
    // The storage version works without the webhook: reads, writes, deletes.
    let stored = within(WAIT, v2.get("w1"))
        .await
        .expect("get in v2 while the webhook is down");
    assert_eq!(spec(&stored), json!({"replicas": 3}));
    within(
        WAIT,
        v2.patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 6}})),
        ),
    )
    .await
    .expect("patch in v2 while the webhook is down");
    within(WAIT, v2.delete("w1", &DeleteParams::default()))
        .await
        .expect("delete in v2 while the webhook is down");
    // kubectl uses the preferred version (v2, the storage version).
    let (ok, stdout, stderr) =
        kubectl(&server, &["delete", "widgets", "w2", "-n", "default"]).await;
    assert!(ok, "kubectl delete while the webhook is down: {stderr}");
    assert!(stdout.contains("deleted"), "{stdout}");
    http.get("/apis/conv.example.com/v2/namespaces/default/widgets/w2")
        .await
        .expect(404);

    // A namespace is emptied of its custom objects while the webhook is down.
    http.post(
        "/api/v1/namespaces",
        &json!({"metadata": {"name": "doomed"}}),
    )
    .await
    .expect(201);
    http.post(
        "/apis/conv.example.com/v2/namespaces/doomed/widgets",
        &json!({"apiVersion": "conv.example.com/v2", "kind": "Widget", "metadata": {"name": "inside"}, "spec": {"replicas": 1}}),
    )
    .await
    .expect(201);
    http.delete("/api/v1/namespaces/doomed").await.expect(200);
    let deadline = std::time::Instant::now() + WAIT;
    while http.get("/api/v1/namespaces/doomed").await.status != 404 {
        assert!(
            std::time::Instant::now() < deadline,
            "the namespace was never emptied and removed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Bad answers are refused with upstream's messages, after the webhook was called.
    apply_crd(
        &server.client,
        crd(&hooks.url("/wrong-count"), &hooks.ca_bundle()),
        "test",
    )
    .await;
    wait_for_failure(
        &http,
        &format!("{v1_path}/w3"),
        "conversion webhook for conv.example.com/v2, Kind=Widget returned 0 objects, expected 1",
    )
    .await;
    assert!(
        !reviews_at(&hooks, "/wrong-count").is_empty(),
        "the webhook was called"
    );
    apply_crd(
        &server.client,
        crd(&hooks.url("/rename"), &hooks.ca_bundle()),
        "test",
    )
    .await;
    wait_for_failure(
        &http,
        &format!("{v1_path}/w3"),
        "conversion webhook for conv.example.com/v2, Kind=Widget returned invalid object: must have the same name: w3 != w3-renamed",
    )
    .await;
    assert!(
        !reviews_at(&hooks, "/rename").is_empty(),
        "the webhook was called"
    );
    let listed = http.get(v1_path).await.expect_failure(500, "");
    assert_eq!(
        listed["message"],
        "conversion webhook for conv.example.com/v2, Kind=Widget returned invalid converted object at index 1: must have the same name: w3 != w3-renamed"
    );
    // The storage version still reads.
    let stored = within(WAIT, v2.get("w3")).await.expect("get in v2");
    assert_eq!(spec(&stored), json!({"replicas": 3}));
    server.shutdown().await;
}

#[tokio::test]
async fn objects_stored_in_an_older_storage_version_are_converted_on_read() {
    let hooks = start_converter().await;
    let server = TestServer::start().await;
    let crds = apply_crd(
        &server.client,
        crd_storing("v1", &hooks.url("/convert"), &hooks.ca_bundle()),
        "test",
    )
    .await;
    let (v1, v2) = (widgets(&server, "v1"), widgets(&server, "v2"));
    within(
        WAIT,
        v1.create(
            &PostParams::default(),
            &widget("v1", "old", json!({"size": "2"})),
        ),
    )
    .await
    .expect("create in v1, the storage version");
    assert!(hooks.calls().is_empty(), "stored as sent");

    // The storage version moves to v2; v1 stays in storedVersions until a migration.
    apply_crd(
        &server.client,
        crd_storing("v2", &hooks.url("/convert"), &hooks.ca_bundle()),
        "test",
    )
    .await;
    let definition = within(WAIT, crds.get(CRD_NAME)).await.expect("get the CRD");
    let definition = serde_json::to_value(&definition).expect("the CRD as JSON");
    assert_eq!(definition["status"]["storedVersions"], json!(["v1", "v2"]));
    let deadline = std::time::Instant::now() + WAIT;
    while server
        .registry()
        .catalog()
        .lookup(GROUP, "v2", "widgets")
        .and_then(|t| t.storage_version.clone())
        .as_deref()
        != Some("v2")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "v2 never became the storage version"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Read in v2, the object still stored in v1 is converted.
    let read = within(WAIT, v2.get("old")).await.expect("get in v2");
    assert_eq!(spec(&read), json!({"replicas": 2}));
    assert_eq!(
        reviews_at(&hooks, "/convert"),
        vec![("conv.example.com/v2".to_string(), 1)]
    );
    // Read in v1, it is not.
    let read = within(WAIT, v1.get("old")).await.expect("get in v1");
    assert_eq!(spec(&read), json!({"size": "2"}));
    assert_eq!(
        hooks.calls().len(),
        1,
        "an object in the version read is not converted"
    );

    // A write in v2 stores it in v2 (one review, for the read of the v1 object): a v2 read
    // then needs no review.
    within(
        WAIT,
        v2.patch(
            "old",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"migrated": "yes"}}})),
        ),
    )
    .await
    .expect("patch in v2");
    assert_eq!(hooks.calls().len(), 2);
    let read = within(WAIT, v2.get("old")).await.expect("get in v2");
    assert_eq!(spec(&read), json!({"replicas": 2}));
    assert_eq!(
        read.metadata
            .labels
            .unwrap_or_default()
            .get("migrated")
            .map(String::as_str),
        Some("yes")
    );
    assert_eq!(hooks.calls().len(), 2, "the object is stored in v2 now");
    server.shutdown().await;
}

#[tokio::test]
async fn a_conversion_webhook_is_reached_by_service_reference() {
    let hooks = start_converter().await;
    let server = TestServer::start().await;
    let http = Http::new(&server);
    // The Service `webhook` in `hooks` (the name the test server's certificate carries), its
    // Endpoints on the loopback port.
    http.post(
        "/api/v1/namespaces",
        &json!({"metadata": {"name": "hooks"}}),
    )
    .await
    .expect(201);
    http.post(
        "/api/v1/namespaces/hooks/services",
        &json!({"metadata": {"name": "webhook"}, "spec": {"ports": [{"port": 443, "targetPort": 9443}]}}),
    )
    .await
    .expect(201);
    http.post(
        "/api/v1/namespaces/hooks/endpoints",
        &json!({"metadata": {"name": "webhook"}, "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"port": hooks.port}]}]}),
    )
    .await
    .expect(201);
    let service = json!({"service": {"namespace": "hooks", "name": "webhook", "path": "/convert"},
        "caBundle": hooks.ca_bundle()});
    let crds = apply_crd(&server.client, crd_calling("v2", service), "test").await;
    // Defaulted as upstream defaults it.
    let definition = within(WAIT, crds.get(CRD_NAME)).await.expect("get the CRD");
    let definition = serde_json::to_value(&definition).expect("the CRD as JSON");
    assert_eq!(
        definition["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["port"],
        443
    );
    let (v1, v2) = (widgets(&server, "v1"), widgets(&server, "v2"));
    within(
        WAIT,
        v1.create(
            &PostParams::default(),
            &widget("v1", "w", json!({"size": "8"})),
        ),
    )
    .await
    .expect("create in v1");
    let stored = within(WAIT, v2.get("w")).await.expect("get in v2");
    assert_eq!(spec(&stored), json!({"replicas": 8}));
    assert_eq!(
        reviews_at(&hooks, "/convert"),
        vec![("conv.example.com/v2".to_string(), 1)]
    );
    // Without endpoints the call fails with the Service's URL, as upstream names it.
    http.delete("/api/v1/namespaces/hooks/endpoints/webhook")
        .await
        .expect(200);
    let failed = http
        .get("/apis/conv.example.com/v1/namespaces/default/widgets/w")
        .await
        .expect_failure(500, "");
    assert_eq!(
        failed["message"],
        "conversion webhook for conv.example.com/v2, Kind=Widget failed: Post \"https://webhook.hooks.svc:443/convert\": no endpoints available for service \"webhook\""
    );
    server.shutdown().await;
}

/// Upstream prunes a converted object with its version's schema (`unstructuredSchemaCoercer`):
/// a field the webhook adds that the schema does not know, and a `null` the schema does not
/// allow, are neither stored (the write converted to the storage version) nor served (the
/// read converted back).
#[tokio::test]
async fn converted_objects_are_pruned_with_their_versions_schema() {
    let hooks = start_converter().await;
    let server = TestServer::start().await;
    apply_crd(
        &server.client,
        crd(&hooks.url("/leaky"), &hooks.ca_bundle()),
        "test",
    )
    .await;
    let (v1, v2) = (widgets(&server, "v1"), widgets(&server, "v2"));
    within(
        WAIT,
        v1.create(
            &PostParams::default(),
            &widget("v1", "w1", json!({"size": "3"})),
        ),
    )
    .await
    .expect("create in v1");
    assert_eq!(
        reviews_at(&hooks, "/leaky"),
        vec![("conv.example.com/v2".to_string(), 1)],
        "the write was converted by the leaky webhook"
    );

    // Stored (read in the storage version, no conversion): pruned.
    let stored = within(WAIT, v2.get("w1")).await.expect("get in v2");
    assert_eq!(spec(&stored), json!({"replicas": 3}));
    assert!(
        stored
            .data
            .get("status")
            .is_none_or(|s| s.get("ready").is_none()),
        "{:?}",
        stored.data
    );
    assert_eq!(
        hooks.calls().len(),
        1,
        "a read in the storage version is not converted"
    );

    // Served in v1 (converted again by the leaky webhook): pruned too.
    let read = within(WAIT, v1.get("w1")).await.expect("get in v1");
    assert_eq!(hooks.calls().len(), 2, "the read was converted");
    assert_eq!(spec(&read), json!({"size": "3"}));
    assert!(
        read.data
            .get("status")
            .is_none_or(|s| s.get("ready").is_none()),
        "{:?}",
        read.data
    );
    server.shutdown().await;
}
