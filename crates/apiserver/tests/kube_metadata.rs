//! Metadata-only responses (issue 16): kube-rs's `get_metadata`, `list_metadata` and
//! `watch_metadata` get `PartialObjectMetadata` without the objects' bodies, every verb that
//! returns an object honours the same `Accept`, and a form that does not fit is 406.

mod common;

use common::{TestServer, WAIT, config_map, create_namespace, expect_api_error, within};
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ListParams, PostParams, WatchEvent, WatchParams};
use kube::{Api, ResourceExt};
use serde_json::Value;

const AS_OBJECT: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
const AS_LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";

fn with_data(name: &str) -> ConfigMap {
    let mut object = config_map(name, &[("app", "meta")]);
    object.data = Some([("payload".to_string(), "x".repeat(512))].into());
    object
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_reads_and_watches_metadata_only() {
    let server = TestServer::start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client.clone());
    within(
        WAIT,
        api.create(&PostParams::default(), &with_data("meta-a")),
    )
    .await
    .expect("create meta-a");

    let one = within(WAIT, api.get_metadata("meta-a"))
        .await
        .expect("get_metadata");
    let types = one.types.clone().expect("the response names its type");
    assert_eq!(
        (types.api_version.as_str(), types.kind.as_str()),
        ("meta.k8s.io/v1", "PartialObjectMetadata")
    );
    assert_eq!(one.labels().get("app").map(String::as_str), Some("meta"));

    let list = within(WAIT, api.list_metadata(&ListParams::default()))
        .await
        .expect("list_metadata");
    assert_eq!(list.types.kind, "PartialObjectMetadataList");
    let names: Vec<String> = list.items.iter().map(ResourceExt::name_any).collect();
    assert_eq!(names, ["meta-a"]);
    let version = list
        .metadata
        .resource_version
        .clone()
        .expect("the list's resourceVersion is kept");

    let events = within(
        WAIT,
        api.watch_metadata(&WatchParams::default().timeout(10), &version),
    )
    .await
    .expect("watch_metadata");
    let mut events = Box::pin(events);
    within(
        WAIT,
        api.create(&PostParams::default(), &with_data("meta-b")),
    )
    .await
    .expect("create meta-b");
    let added = within(WAIT, events.try_next())
        .await
        .expect("a watch event")
        .expect("the stream is open");
    match added {
        WatchEvent::Added(object) => {
            assert_eq!(object.name_any(), "meta-b");
            assert_eq!(
                object.types.map(|t| t.kind).as_deref(),
                Some("PartialObjectMetadata")
            );
        }
        other => panic!("expected meta-b added, got {other:?}"),
    }
}

/// A raw request through the kube client, answered as text (or the API's error).
async fn request(
    client: &kube::Client,
    method: http::Method,
    path: &str,
    accept: &str,
) -> Result<Value, kube::Error> {
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::ACCEPT, accept)
        .body(Vec::new())
        .expect("request");
    let text = within(WAIT, client.request_text(request)).await?;
    Ok(serde_json::from_str(&text).expect("a JSON body"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_and_deletes_answer_in_the_form_asked_for() {
    let server = TestServer::start().await;
    let client = server.client.clone();
    create_namespace(&client, "meta-ns").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "meta-ns");
    within(WAIT, api.create(&PostParams::default(), &with_data("kept")))
        .await
        .expect("create");

    // A ConfigMap's DELETE returns a Status, which is sent as it is.
    let status = request(
        &client,
        http::Method::DELETE,
        "/api/v1/namespaces/meta-ns/configmaps/kept",
        AS_OBJECT,
    )
    .await
    .expect("delete");
    assert_eq!(status["kind"], "Status", "{status}");

    // A Namespace's DELETE returns the object (now terminating): its metadata only.
    let deleted = request(
        &client,
        http::Method::DELETE,
        "/api/v1/namespaces/meta-ns",
        AS_OBJECT,
    )
    .await
    .expect("delete");
    assert_eq!(deleted["kind"], "PartialObjectMetadata", "{deleted}");
    assert!(
        deleted["metadata"]["deletionTimestamp"].is_string(),
        "{deleted}"
    );
    assert!(deleted.get("spec").is_none(), "{deleted}");

    // A list asked for as one object, and a watch asked for as a list, are not acceptable.
    for (path, accept) in [
        ("/api/v1/namespaces/default/configmaps", AS_OBJECT),
        ("/api/v1/namespaces/default/configmaps?watch=true", AS_LIST),
    ] {
        let answer = request(&client, http::Method::GET, path, accept).await;
        expect_api_error(answer, 406, "NotAcceptable");
    }
}
