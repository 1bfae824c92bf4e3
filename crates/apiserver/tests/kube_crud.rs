//! kube-rs CRUD against an in-process server (api-surface §6, §7): create/get/replace with
//! optimistic concurrency, the error shapes kube-rs keys on, generateName, the three patch
//! formats, delete bodies, delete-collection, and rejected input leaving nothing behind.

mod common;

use std::collections::BTreeSet;
use std::fmt::Debug;

use common::{TestServer, WAIT, config_map, expect_api_error, within};
use http_body_util::BodyExt;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Event as CoreEvent, Namespace, Pod, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::events::v1::Event as EventsEvent;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::core::TypeMeta;
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

fn from_json<T: DeserializeOwned>(value: serde_json::Value) -> T {
    serde_json::from_value(value).expect("a valid object")
}

fn names<K: ResourceExt>(items: &[K]) -> BTreeSet<String> {
    items.iter().map(ResourceExt::name_any).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_get_replace_with_optimistic_concurrency() {
    let server = TestServer::start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client.clone());

    // POST answers 201 Created with the stored object (checked on the raw response).
    let body = serde_json::to_vec(&config_map("raw", &[])).unwrap();
    let request = http::Request::post("/api/v1/namespaces/default/configmaps")
        .header("content-type", "application/json")
        .body(kube::client::Body::from(body))
        .unwrap();
    let response = within(WAIT, server.client.send(request)).await.unwrap();
    assert_eq!(response.status(), http::StatusCode::CREATED);
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let raw: ConfigMap = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(raw.name_any(), "raw");

    let created = within(
        WAIT,
        api.create(&PostParams::default(), &config_map("cm1", &[("a", "b")])),
    )
    .await
    .expect("create");
    let uid = created.metadata.uid.clone().expect("uid set by the server");
    assert!(!uid.is_empty());
    let rv1 = created.resource_version().expect("resourceVersion set");
    assert!(rv1.parse::<i64>().is_ok(), "resourceVersion {rv1:?}");
    assert!(created.metadata.creation_timestamp.is_some());
    assert_eq!(created.metadata.namespace.as_deref(), Some("default"));

    let read = within(WAIT, api.get("cm1")).await.expect("get");
    assert_eq!(read.metadata.uid.as_deref(), Some(uid.as_str()));
    assert_eq!(read.resource_version().as_deref(), Some(rv1.as_str()));
    assert_eq!(read.data, created.data);

    // Replace with the resourceVersion just read: accepted, with a new resourceVersion.
    let mut changed = read.clone();
    changed
        .data
        .get_or_insert_default()
        .insert("extra".into(), "1".into());
    let replaced = within(WAIT, api.replace("cm1", &PostParams::default(), &changed))
        .await
        .expect("replace with the current resourceVersion");
    let rv2 = replaced.resource_version().unwrap();
    assert_ne!(rv2, rv1);
    assert_eq!(replaced.metadata.uid.as_deref(), Some(uid.as_str()));
    assert_eq!(
        replaced
            .data
            .as_ref()
            .unwrap()
            .get("extra")
            .map(String::as_str),
        Some("1")
    );

    // Replace with the stale resourceVersion: 409 Conflict, nothing changes.
    let mut stale = read.clone();
    stale
        .data
        .get_or_insert_default()
        .insert("stale".into(), "yes".into());
    let status = expect_api_error(
        within(WAIT, api.replace("cm1", &PostParams::default(), &stale)).await,
        409,
        "Conflict",
    );
    assert!(
        status.message.contains("the object has been modified"),
        "{status:?}"
    );
    let after = within(WAIT, api.get("cm1")).await.unwrap();
    assert_eq!(after.resource_version(), Some(rv2));
    assert!(!after.data.unwrap().contains_key("stale"));

    // Create of an existing name: 409 AlreadyExists (kube-rs keys on the reason).
    let status = expect_api_error(
        within(
            WAIT,
            api.create(&PostParams::default(), &config_map("cm1", &[])),
        )
        .await,
        409,
        "AlreadyExists",
    );
    let details = status.details.expect("details");
    assert_eq!(
        (details.name.as_str(), details.kind.as_str()),
        ("cm1", "configmaps")
    );

    // Get of a missing name: 404 NotFound.
    let status = expect_api_error(within(WAIT, api.get("missing")).await, 404, "NotFound");
    assert_eq!(status.details.unwrap().name, "missing");
    assert!(
        within(WAIT, api.get_opt("missing"))
            .await
            .unwrap()
            .is_none()
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generate_name_creates_unique_names_with_the_prefix() {
    let server = TestServer::start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client.clone());
    let template: ConfigMap = from_json(json!({"metadata": {"generateName": "gen-"}}));
    let mut seen = BTreeSet::new();
    for _ in 0..5 {
        let created = within(WAIT, api.create(&PostParams::default(), &template))
            .await
            .expect("create with generateName");
        let name = created.name_any();
        assert!(name.starts_with("gen-"), "{name}");
        assert_eq!(name.len(), "gen-".len() + 5, "{name}");
        assert!(seen.insert(name), "generated names repeat");
    }
    let listed = within(WAIT, api.list(&ListParams::default()))
        .await
        .unwrap();
    assert_eq!(names(&listed.items), seen);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_and_json_patches_apply_to_a_config_map() {
    let server = TestServer::start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client.clone());
    let mut cm = config_map("patched", &[("keep", "me")]);
    cm.data = Some([("a".into(), "1".into()), ("b".into(), "2".into())].into());
    within(WAIT, api.create(&PostParams::default(), &cm))
        .await
        .unwrap();

    // Merge patch: add a key, delete one with null, add a label.
    let merged = within(
        WAIT,
        api.patch(
            "patched",
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"labels": {"new": "label"}},
                "data": {"b": null, "c": "3"},
            })),
        ),
    )
    .await
    .expect("merge patch");
    let data = merged.data.clone().unwrap();
    assert_eq!(
        data.into_iter().collect::<Vec<_>>(),
        vec![("a".to_string(), "1".to_string()), ("c".into(), "3".into())]
    );
    let labels = merged.labels();
    assert_eq!(labels.get("keep").map(String::as_str), Some("me"));
    assert_eq!(labels.get("new").map(String::as_str), Some("label"));

    // JSON patch (RFC 6902), including a passing `test`.
    let ops: json_patch::Patch = from_json(json!([
        {"op": "test", "path": "/data/a", "value": "1"},
        {"op": "replace", "path": "/data/a", "value": "one"},
        {"op": "add", "path": "/data/d", "value": "4"},
        {"op": "remove", "path": "/data/c"},
    ]));
    let patched = within(
        WAIT,
        api.patch("patched", &PatchParams::default(), &Patch::Json::<()>(ops)),
    )
    .await
    .expect("json patch");
    assert_eq!(
        patched
            .data
            .clone()
            .unwrap()
            .into_iter()
            .collect::<Vec<_>>(),
        vec![
            ("a".to_string(), "one".to_string()),
            ("d".into(), "4".into())
        ]
    );
    assert_ne!(patched.resource_version(), merged.resource_version());

    // A failing `test` is a 422 and changes nothing.
    let failing: json_patch::Patch = from_json(json!([
        {"op": "test", "path": "/data/a", "value": "wrong"},
        {"op": "replace", "path": "/data/a", "value": "never"},
    ]));
    expect_api_error(
        within(
            WAIT,
            api.patch(
                "patched",
                &PatchParams::default(),
                &Patch::Json::<()>(failing),
            ),
        )
        .await,
        422,
        "Invalid",
    );
    let current = within(WAIT, api.get("patched")).await.unwrap();
    assert_eq!(current.resource_version(), patched.resource_version());
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strategic_merge_patch_merges_containers_by_name() {
    let server = TestServer::start().await;
    let api: Api<Deployment> = Api::default_namespaced(server.client.clone());
    let deployment: Deployment = from_json(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [
                    {"name": "c", "image": "nginx:1", "ports": [{"containerPort": 80}]},
                    {"name": "side", "image": "busybox:1"},
                ]},
            },
        },
    }));
    let created = within(WAIT, api.create(&PostParams::default(), &deployment))
        .await
        .expect("create deployment");
    assert_eq!(created.metadata.generation, Some(1));

    let patched = within(
        WAIT,
        api.patch(
            "web",
            &PatchParams::default(),
            &Patch::Strategic(json!({
                "spec": {"template": {"spec": {"containers": [
                    {"name": "c", "image": "nginx:2"},
                ]}}},
            })),
        ),
    )
    .await
    .expect("strategic merge patch");
    let containers = patched
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers
        .clone();
    let summary: Vec<(String, Option<String>)> = containers
        .iter()
        .map(|c| (c.name.clone(), c.image.clone()))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("c".to_string(), Some("nginx:2".to_string())),
            ("side".to_string(), Some("busybox:1".to_string())),
        ]
    );
    // Fields of the patched container the patch did not mention are kept.
    assert_eq!(
        containers[0].ports.as_ref().map(|p| p[0].container_port),
        Some(80)
    );
    assert_eq!(patched.metadata.generation, Some(2));
    let stored = within(WAIT, api.get("web")).await.unwrap();
    assert_eq!(stored.spec, patched.spec);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_returns_status_or_the_object_per_kind() {
    let server = TestServer::start().await;
    let client = server.client.clone();

    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let cm = within(
        WAIT,
        cms.create(&PostParams::default(), &config_map("gone", &[])),
    )
    .await
    .unwrap();
    let deleted = within(WAIT, cms.delete("gone", &DeleteParams::default()))
        .await
        .expect("delete configmap");
    assert!(
        deleted.is_right(),
        "a ConfigMap delete answers with a Status"
    );
    let status = deleted.right().unwrap();
    let details = status.details.expect("details");
    assert_eq!(details.name, "gone");
    assert_eq!(details.kind, "configmaps");
    assert_eq!(Some(details.uid), cm.metadata.uid);
    expect_api_error(within(WAIT, cms.get("gone")).await, 404, "NotFound");
    expect_api_error(
        within(WAIT, cms.delete("gone", &DeleteParams::default())).await,
        404,
        "NotFound",
    );

    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let pod: Pod = from_json(json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }));
    let pod = within(WAIT, pods.create(&PostParams::default(), &pod))
        .await
        .unwrap();
    let deleted = within(WAIT, pods.delete("p", &DeleteParams::default()))
        .await
        .expect("delete pod");
    let last = deleted
        .left()
        .expect("a Pod delete answers with the object");
    assert_eq!(last.name_any(), "p");
    assert_eq!(last.metadata.uid, pod.metadata.uid);
    expect_api_error(within(WAIT, pods.get("p")).await, 404, "NotFound");

    let sas: Api<ServiceAccount> = Api::default_namespaced(client.clone());
    within(
        WAIT,
        sas.create(
            &PostParams::default(),
            &from_json(json!({"metadata": {"name": "robot"}})),
        ),
    )
    .await
    .unwrap();
    let deleted = within(WAIT, sas.delete("robot", &DeleteParams::default()))
        .await
        .expect("delete serviceaccount");
    assert_eq!(
        deleted
            .left()
            .expect("a ServiceAccount delete answers with the object")
            .name_any(),
        "robot"
    );

    let namespaces: Api<Namespace> = Api::all(client.clone());
    within(
        WAIT,
        namespaces.create(
            &PostParams::default(),
            &from_json(json!({"metadata": {"name": "doomed"}})),
        ),
    )
    .await
    .unwrap();
    let deleted = within(WAIT, namespaces.delete("doomed", &DeleteParams::default()))
        .await
        .expect("delete namespace");
    assert_eq!(
        deleted
            .left()
            .expect("a Namespace delete answers with the object")
            .name_any(),
        "doomed"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_collection_deletes_only_matching_objects() {
    let server = TestServer::start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client.clone());
    for (name, tier) in [("a1", "a"), ("a2", "a"), ("b1", "b"), ("n1", "")] {
        let labels: &[(&str, &str)] = if tier.is_empty() {
            &[]
        } else {
            &[("tier", tier)]
        };
        within(
            WAIT,
            api.create(&PostParams::default(), &config_map(name, labels)),
        )
        .await
        .unwrap();
    }
    let result = within(
        WAIT,
        api.delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("tier=a"),
        ),
    )
    .await
    .expect("delete collection");
    if let Some(list) = result.left() {
        assert_eq!(
            names(&list.items),
            BTreeSet::from(["a1".to_string(), "a2".to_string()])
        );
    }
    let remaining = within(WAIT, api.list(&ListParams::default()))
        .await
        .unwrap();
    assert_eq!(
        names(&remaining.items),
        BTreeSet::from(["b1".to_string(), "n1".to_string()])
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_in_a_missing_namespace_is_not_found() {
    let server = TestServer::start().await;
    let api: Api<ConfigMap> = Api::namespaced(server.client.clone(), "no-such-namespace");
    let status = expect_api_error(
        within(
            WAIT,
            api.create(&PostParams::default(), &config_map("x", &[])),
        )
        .await,
        404,
        "NotFound",
    );
    assert!(status.message.contains("no-such-namespace"), "{status:?}");
    let everywhere: Api<ConfigMap> = Api::all(server.client.clone());
    let all = within(WAIT, everywhere.list(&ListParams::default()))
        .await
        .unwrap();
    assert!(!names(&all.items).contains("x"));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_name_is_rejected_with_field_causes_and_nothing_stored() {
    let server = TestServer::start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client.clone());
    let status = expect_api_error(
        within(
            WAIT,
            api.create(&PostParams::default(), &config_map("Foo_Bar", &[])),
        )
        .await,
        422,
        "Invalid",
    );
    let details = status.details.expect("details with causes");
    assert!(
        details
            .causes
            .iter()
            .any(|c| c.field == "metadata.name" && c.reason == "FieldValueInvalid"),
        "{details:?}"
    );
    assert_eq!(details.kind, "ConfigMap");
    expect_api_error(within(WAIT, api.get("Foo_Bar")).await, 404, "NotFound");
    let listed = within(WAIT, api.list(&ListParams::default()))
        .await
        .unwrap();
    assert!(listed.items.is_empty(), "{:?}", names(&listed.items));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_kind_for_the_url_is_a_bad_request() {
    let server = TestServer::start().await;
    let resource = ApiResource::erase::<ConfigMap>(&());
    let api: Api<DynamicObject> = Api::default_namespaced_with(server.client.clone(), &resource);
    let mut object = DynamicObject::new("mismatch", &resource);
    object.types = Some(TypeMeta {
        api_version: "v1".into(),
        kind: "Secret".into(),
    });
    expect_api_error(
        within(WAIT, api.create(&PostParams::default(), &object)).await,
        400,
        "BadRequest",
    );
    // A wrong apiVersion for the URL is rejected the same way.
    object.types = Some(TypeMeta {
        api_version: "apps/v1".into(),
        kind: "ConfigMap".into(),
    });
    expect_api_error(
        within(WAIT, api.create(&PostParams::default(), &object)).await,
        400,
        "BadRequest",
    );
    expect_api_error(within(WAIT, api.get("mismatch")).await, 404, "NotFound");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_object_is_rejected_and_nothing_stored() {
    let server = TestServer::start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client.clone());
    let mut big = config_map("big", &[]);
    big.data = Some([("blob".to_string(), "x".repeat(1_600_000))].into());
    let status = common::api_status(within(WAIT, api.create(&PostParams::default(), &big)).await);
    assert!(
        matches!(
            (status.code, status.reason.as_str()),
            (413, "RequestEntityTooLarge") | (422, "Invalid")
        ),
        "{status:?}"
    );
    expect_api_error(within(WAIT, api.get("big")).await, 404, "NotFound");

    // An update that would grow a stored object past the limit is rejected too.
    within(
        WAIT,
        api.create(&PostParams::default(), &config_map("small", &[])),
    )
    .await
    .unwrap();
    let status = common::api_status(
        within(
            WAIT,
            api.patch(
                "small",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"blob": "y".repeat(1_600_000)}})),
            ),
        )
        .await,
    );
    assert!(matches!(status.code, 413 | 422), "{status:?}");
    let small = within(WAIT, api.get("small")).await.unwrap();
    assert!(!small.data.unwrap_or_default().contains_key("blob"));

    // A body over the request limit (3 MiB) is refused before it is parsed.
    let mut huge = config_map("huge", &[]);
    huge.data = Some([("blob".to_string(), "z".repeat(3_500_000))].into());
    expect_api_error(
        within(WAIT, api.create(&PostParams::default(), &huge)).await,
        413,
        "RequestEntityTooLarge",
    );
    expect_api_error(within(WAIT, api.get("huge")).await, 404, "NotFound");
    server.shutdown().await;
}

/// Creates `object`, reads it back and finds it in a list; returns the created object.
async fn create_get_list<K>(api: &Api<K>, object: K) -> K
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
        + ResourceExt,
{
    let name = object.name_any();
    let kind = K::kind(&()).to_string();
    let created = within(WAIT, api.create(&PostParams::default(), &object))
        .await
        .unwrap_or_else(|e| panic!("create {kind} {name}: {e}"));
    assert!(created.uid().is_some(), "{kind} has a uid");
    assert!(
        created.resource_version().is_some(),
        "{kind} has a resourceVersion"
    );
    let read = within(WAIT, api.get(&name))
        .await
        .unwrap_or_else(|e| panic!("get {kind} {name}: {e}"));
    assert_eq!(read.uid(), created.uid(), "{kind}");
    assert_eq!(
        read.resource_version(),
        created.resource_version(),
        "{kind}"
    );
    let listed = within(WAIT, api.list(&ListParams::default()))
        .await
        .unwrap_or_else(|e| panic!("list {kind}: {e}"));
    assert!(
        names(&listed.items).contains(&name),
        "{kind} {name} is listed"
    );
    assert!(
        listed.metadata.resource_version.is_some(),
        "{kind} list has a resourceVersion"
    );
    created
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_builtin_kind_supports_create_get_and_list() {
    // Without the Job controller, whose status write would move the Job's resourceVersion
    // between the create and the get this compares (a real cluster's would too).
    let server = TestServer::start_with(|config| config.job_controller = false).await;
    let client = server.client.clone();

    let secret = create_get_list(
        &Api::<Secret>::default_namespaced(client.clone()),
        from_json(json!({"metadata": {"name": "s"}, "data": {"b": "Ynl0ZXM="}})),
    )
    .await;
    assert_eq!(secret.type_.as_deref(), Some("Opaque"));

    create_get_list(
        &Api::<ServiceAccount>::default_namespaced(client.clone()),
        from_json(json!({"metadata": {"name": "sa"}})),
    )
    .await;

    let service = create_get_list(
        &Api::<Service>::default_namespaced(client.clone()),
        from_json(json!({
            "metadata": {"name": "svc"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]},
        })),
    )
    .await;
    assert_eq!(
        service.spec.and_then(|s| s.type_).as_deref(),
        Some("ClusterIP")
    );

    let pod = create_get_list(
        &Api::<Pod>::default_namespaced(client.clone()),
        from_json(json!({
            "metadata": {"name": "pod"},
            // Another scheduler's Pod: the in-process scheduler would otherwise mark it
            // unschedulable (no Nodes here) between the create and the get this compares.
            "spec": {"schedulerName": "elsewhere",
                     "containers": [{"name": "c", "image": "busybox"}]},
        })),
    )
    .await;
    assert_eq!(pod.status.and_then(|s| s.phase).as_deref(), Some("Pending"));

    create_get_list(
        &Api::<CoreEvent>::default_namespaced(client.clone()),
        from_json(json!({
            "metadata": {"name": "pod.1"},
            "involvedObject": {"kind": "Pod", "name": "pod", "namespace": "default"},
            "reason": "Testing",
            "message": "a core/v1 event",
            "type": "Normal",
        })),
    )
    .await;

    create_get_list(
        &Api::<EventsEvent>::default_namespaced(client.clone()),
        from_json(json!({
            "metadata": {"name": "pod.2"},
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "reportingController": "finale.test/controller",
            "reportingInstance": "test-1",
            "action": "Testing",
            "reason": "Testing",
            "regarding": {"kind": "Pod", "name": "pod", "namespace": "default"},
            "note": "an events.k8s.io/v1 event",
            "type": "Normal",
        })),
    )
    .await;

    create_get_list(
        &Api::<Lease>::default_namespaced(client.clone()),
        from_json(json!({
            "metadata": {"name": "leader"},
            "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15},
        })),
    )
    .await;

    let pod_template = json!({
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    });
    let deployment = create_get_list(
        &Api::<Deployment>::default_namespaced(client.clone()),
        from_json(json!({
            "metadata": {"name": "deploy"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": pod_template},
        })),
    )
    .await;
    assert_eq!(deployment.metadata.generation, Some(1));

    create_get_list(
        &Api::<ReplicaSet>::default_namespaced(client.clone()),
        from_json(json!({
            "metadata": {"name": "rs"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": pod_template},
        })),
    )
    .await;

    create_get_list(
        &Api::<Job>::default_namespaced(client.clone()),
        from_json(json!({
            "metadata": {"name": "job"},
            "spec": {"template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]},
            }},
        })),
    )
    .await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizer_json_patches_as_kube_runtime_sends_them() {
    // kube-runtime's finalizer helper: `test /metadata/finalizers == null` on an object without
    // finalizers, then `add`; on cleanup `test /metadata/finalizers/0 == name` and `remove`.
    let server = TestServer::start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client.clone());
    within(
        WAIT,
        api.create(&PostParams::default(), &config_map("guarded", &[])),
    )
    .await
    .unwrap();
    let add: json_patch::Patch = from_json(json!([
        {"op": "test", "path": "/metadata/finalizers", "value": null},
        {"op": "add", "path": "/metadata/finalizers", "value": ["finale.test/cleanup"]},
    ]));
    let guarded = within(
        WAIT,
        api.patch("guarded", &PatchParams::default(), &Patch::Json::<()>(add)),
    )
    .await
    .expect("add the first finalizer");
    assert_eq!(guarded.finalizers(), ["finale.test/cleanup".to_string()]);

    // Delete keeps the object, now terminating, and answers with it.
    let deleted = within(WAIT, api.delete("guarded", &DeleteParams::default()))
        .await
        .expect("delete");
    let terminating = deleted
        .left()
        .expect("a pending deletion answers with the object");
    assert!(terminating.metadata.deletion_timestamp.is_some());
    let still = within(WAIT, api.get("guarded"))
        .await
        .expect("still stored");
    assert!(still.metadata.deletion_timestamp.is_some());

    let remove: json_patch::Patch = from_json(json!([
        {"op": "test", "path": "/metadata/finalizers/0", "value": "finale.test/cleanup"},
        {"op": "remove", "path": "/metadata/finalizers/0"},
    ]));
    within(
        WAIT,
        api.patch(
            "guarded",
            &PatchParams::default(),
            &Patch::Json::<()>(remove),
        ),
    )
    .await
    .expect("remove the last finalizer");
    expect_api_error(within(WAIT, api.get("guarded")).await, 404, "NotFound");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_and_delete_preconditions() {
    let server = TestServer::start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(server.client.clone());
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let would_be = within(WAIT, api.create(&dry, &config_map("dry", &[])))
        .await
        .expect("dry-run create");
    assert_eq!(would_be.name_any(), "dry");
    expect_api_error(within(WAIT, api.get("dry")).await, 404, "NotFound");

    let created = within(
        WAIT,
        api.create(&PostParams::default(), &config_map("pre", &[])),
    )
    .await
    .unwrap();
    within(
        WAIT,
        api.patch(
            "pre",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"key": "moved on"}})),
        ),
    )
    .await
    .unwrap();
    let stale = DeleteParams::default().preconditions(kube::api::Preconditions {
        resource_version: created.resource_version(),
        uid: None,
    });
    expect_api_error(
        within(WAIT, api.delete("pre", &stale)).await,
        409,
        "Conflict",
    );
    let wrong_uid = DeleteParams::default().preconditions(kube::api::Preconditions {
        resource_version: None,
        uid: Some("00000000-0000-0000-0000-000000000000".into()),
    });
    expect_api_error(
        within(WAIT, api.delete("pre", &wrong_uid)).await,
        409,
        "Conflict",
    );
    within(WAIT, api.get("pre")).await.expect("still there");
    let right_uid = DeleteParams::default().preconditions(kube::api::Preconditions {
        resource_version: None,
        uid: created.metadata.uid.clone(),
    });
    within(WAIT, api.delete("pre", &right_uid))
        .await
        .expect("delete with a matching uid precondition");
    expect_api_error(within(WAIT, api.get("pre")).await, 404, "NotFound");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_subresource_writes_only_status_and_main_writes_ignore_it() {
    let server = TestServer::start().await;
    let api: Api<Deployment> = Api::default_namespaced(server.client.clone());
    let deployment: Deployment = from_json(json!({
        "metadata": {"name": "st"},
        "spec": {
            "selector": {"matchLabels": {"app": "st"}},
            "template": {
                "metadata": {"labels": {"app": "st"}},
                "spec": {"containers": [{"name": "c", "image": "nginx:1"}]},
            },
        },
        "status": {"replicas": 7},
    }));
    let created = within(WAIT, api.create(&PostParams::default(), &deployment))
        .await
        .unwrap();
    // A create ignores .status where a status subresource exists.
    assert!(
        created.status.as_ref().is_none_or(|s| s.replicas.is_none()),
        "{:?}",
        created.status
    );

    let patched = within(
        WAIT,
        api.patch_status(
            "st",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 3}, "spec": {"replicas": 9}})),
        ),
    )
    .await
    .expect("patch status");
    assert_eq!(patched.status.as_ref().and_then(|s| s.replicas), Some(3));
    // /status changes nothing but status: no spec change, no generation bump.
    assert_eq!(patched.spec, created.spec);
    assert_eq!(patched.metadata.generation, Some(1));

    // The main endpoint keeps the stored status.
    let mut replacement = within(WAIT, api.get("st")).await.unwrap();
    replacement.status.get_or_insert_default().replicas = Some(100);
    replacement.spec.as_mut().unwrap().replicas = Some(2);
    let replaced = within(
        WAIT,
        api.replace("st", &PostParams::default(), &replacement),
    )
    .await
    .expect("replace");
    assert_eq!(replaced.status.as_ref().and_then(|s| s.replicas), Some(3));
    assert_eq!(replaced.spec.as_ref().and_then(|s| s.replicas), Some(2));
    assert_eq!(replaced.metadata.generation, Some(2));
    server.shutdown().await;
}
