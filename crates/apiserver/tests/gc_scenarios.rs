//! The garbage collector against the scenarios of deletion-semantics §13 that need it
//! (17–20, 22, 23, 33–36), named by scenario id, plus a restart in the middle of a cascade
//! and kube-rs deletes with each propagation policy.

mod common;

use std::time::Duration;

use common::raw::{Http, rv, uid};
use common::{TestServer, WAIT};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, PostParams, PropagationPolicy};
use serde_json::{Value, json};

const NS: &str = "t";
const CM: &str = "/api/v1/namespaces/t/configmaps";
const SECRETS: &str = "/api/v1/namespaces/t/secrets";

async fn setup() -> (TestServer, Http) {
    // The collector's scenarios place every dependent by hand: a Job controller would add
    // Pods of its own to a Job and delete the hand-placed one as surplus.
    let server = TestServer::start_with(|config| config.job_controller = false).await;
    let http = Http::new(&server);
    http.post(
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
    )
    .await
    .expect(201);
    (server, http)
}

fn owner_ref(kind: &str, owner: &Value, block: bool) -> Value {
    json!({"apiVersion": owner["apiVersion"], "kind": kind,
           "name": owner["metadata"]["name"], "uid": uid(owner),
           "blockOwnerDeletion": block})
}

async fn config_map(http: &Http, name: &str, owners: Vec<Value>, finalizers: &[&str]) -> Value {
    let mut metadata = json!({"name": name});
    if !owners.is_empty() {
        metadata["ownerReferences"] = json!(owners);
    }
    if !finalizers.is_empty() {
        metadata["finalizers"] = json!(finalizers);
    }
    http.post(
        CM,
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata}),
    )
    .await
    .expect(201)
}

async fn secret(http: &Http, name: &str, owners: Vec<Value>) -> Value {
    http.post(
        SECRETS,
        &json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": name, "ownerReferences": owners}}),
    )
    .await
    .expect(201)
}

/// Polls until `path` answers 404.
async fn gone(http: &Http, path: &str) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let reply = http.get(path).await;
        if reply.status == 404 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{path} is still there: {}",
            reply.body
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls until `check(object at path)` holds.
async fn until(http: &Http, path: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let object = http.get(path).await.expect(200);
        if check(&object) {
            return object;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{path}: never {what}: {object}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Still present once the collector has worked through everything before this call (a
/// sentinel, see [`Http::collector_caught_up`]): it had every chance to act, and did not.
async fn stays(http: &Http, path: &str) -> Value {
    http.collector_caught_up(NS).await;
    http.get(path).await.expect(200)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s17_orphan() {
    let (server, http) = setup().await;
    let owner = config_map(&http, "o", vec![], &[]).await;
    secret(&http, "d", vec![owner_ref("ConfigMap", &owner, false)]).await;
    let body = http
        .delete(&format!("{CM}/o?propagationPolicy=Orphan"))
        .await
        .expect(200);
    assert_eq!(body["metadata"]["finalizers"], json!(["orphan"]), "{body}");
    assert!(body["metadata"]["deletionTimestamp"].is_string());
    gone(&http, &format!("{CM}/o")).await;
    let dependent = http.get(&format!("{SECRETS}/d")).await.expect(200);
    assert!(
        dependent["metadata"].get("ownerReferences").is_none(),
        "{dependent}"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s18_foreground_with_blocking_dependent() {
    let (server, http) = setup().await;
    let owner = config_map(&http, "o", vec![], &[]).await;
    config_map(
        &http,
        "d",
        vec![owner_ref("ConfigMap", &owner, true)],
        &["example.com/hold"],
    )
    .await;
    let mut watch = http.watch(CM, rv(&owner) + 1).await;
    let body = http
        .delete(&format!("{CM}/o?propagationPolicy=Foreground"))
        .await
        .expect(200);
    assert_eq!(
        body["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );
    until(&http, &format!("{CM}/d"), "terminating", |d| {
        d["metadata"]["deletionTimestamp"].is_string()
    })
    .await;
    let owner_now = stays(&http, &format!("{CM}/o")).await;
    assert_eq!(
        owner_now["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );

    http.json_patch(
        &format!("{CM}/d"),
        &json!([{"op": "remove", "path": "/metadata/finalizers"}]),
    )
    .await
    .expect(200);
    gone(&http, &format!("{CM}/o")).await;
    // d DELETED strictly before o DELETED.
    let mut deletions = Vec::new();
    while deletions.last().map(String::as_str) != Some("o") {
        let (kind, object) = watch.next().await;
        if kind == "DELETED" {
            deletions.push(
                object["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            );
        }
    }
    assert_eq!(deletions, ["d", "o"]);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s19_foreground_non_blocking_dependent() {
    let (server, http) = setup().await;
    let owner = config_map(&http, "o", vec![], &[]).await;
    config_map(
        &http,
        "d",
        vec![owner_ref("ConfigMap", &owner, false)],
        &["example.com/hold"],
    )
    .await;
    http.delete(&format!("{CM}/o?propagationPolicy=Foreground"))
        .await
        .expect(200);
    gone(&http, &format!("{CM}/o")).await;
    let dependent = until(&http, &format!("{CM}/d"), "terminating", |d| {
        d["metadata"]["deletionTimestamp"].is_string()
    })
    .await;
    assert_eq!(
        dependent["metadata"]["finalizers"],
        json!(["example.com/hold"])
    );
    http.json_patch(
        &format!("{CM}/d"),
        &json!([{"op": "remove", "path": "/metadata/finalizers"}]),
    )
    .await
    .expect(200);
    gone(&http, &format!("{CM}/d")).await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s20_background_cascades_down_a_tree() {
    let (server, http) = setup().await;
    let owner = config_map(&http, "o", vec![], &[]).await;
    let middle = config_map(&http, "m", vec![owner_ref("ConfigMap", &owner, false)], &[]).await;
    secret(&http, "leaf", vec![owner_ref("ConfigMap", &middle, false)]).await;
    let body = http.delete(&format!("{CM}/o")).await.expect(200);
    assert_eq!(body["kind"], "Status", "owner gone at once: {body}");
    gone(&http, &format!("{CM}/m")).await;
    gone(&http, &format!("{SECRETS}/leaf")).await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s22_job_default_orphans_its_pods() {
    let (server, http) = setup().await;
    let jobs = "/apis/batch/v1/namespaces/t/jobs";
    let pods = "/api/v1/namespaces/t/pods";
    let job_body = |name: &str| {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
               "spec": {"template": {"spec": {"restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "busybox:1.36"}]}}}})
    };
    let pod_of = |name: &str, job: &Value| {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "ownerReferences": [{
                   "apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"],
                   "uid": uid(job), "controller": true, "blockOwnerDeletion": true}]},
               "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}})
    };
    let job = http.post(jobs, &job_body("j")).await.expect(201);
    http.post(pods, &pod_of("j-pod", &job)).await.expect(201);
    let reply = http.delete(&format!("{jobs}/j")).await;
    assert_eq!(reply.warnings.len(), 1, "the orphan warning");
    gone(&http, &format!("{jobs}/j")).await;
    let pod = http.get(&format!("{pods}/j-pod")).await.expect(200);
    assert!(pod["metadata"].get("ownerReferences").is_none(), "{pod}");

    let job = http.post(jobs, &job_body("k")).await.expect(201);
    http.post(pods, &pod_of("k-pod", &job)).await.expect(201);
    let reply = http
        .delete(&format!("{jobs}/k?propagationPolicy=Background"))
        .await;
    assert!(reply.warnings.is_empty());
    gone(&http, &format!("{pods}/k-pod")).await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s23_apps_default_is_background() {
    let (server, http) = setup().await;
    let replicasets = "/apis/apps/v1/namespaces/t/replicasets";
    let rs = http
        .post(
            replicasets,
            &json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "rs"},
                    "spec": {"selector": {"matchLabels": {"app": "x"}},
                             "template": {"metadata": {"labels": {"app": "x"}},
                                          "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}),
        )
        .await
        .expect(201);
    for name in ["p1", "p2"] {
        http.post(
            "/api/v1/namespaces/t/pods",
            &json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": name, "ownerReferences": [owner_ref("ReplicaSet", &rs, true)]},
                    "spec": {"containers": [{"name": "c", "image": "nginx"}]}}),
        )
        .await
        .expect(201);
    }
    let body = http.delete(&format!("{replicasets}/rs")).await.expect(200);
    assert_eq!(
        body["kind"], "Status",
        "no GC finalizer, gone at once: {body}"
    );
    gone(&http, "/api/v1/namespaces/t/pods/p1").await;
    gone(&http, "/api/v1/namespaces/t/pods/p2").await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s33_owner_uid_mismatch() {
    let (server, http) = setup().await;
    let owner = config_map(&http, "o", vec![], &[]).await;
    let mut stale = owner_ref("ConfigMap", &owner, false);
    stale["uid"] = json!("00000000-0000-0000-0000-000000000000");
    secret(&http, "d", vec![stale]).await;
    gone(&http, &format!("{SECRETS}/d")).await;
    let untouched = http.get(&format!("{CM}/o")).await.expect(200);
    assert_eq!(untouched, owner);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s34_two_owners() {
    let (server, http) = setup().await;
    let first = config_map(&http, "o1", vec![], &[]).await;
    let second = config_map(&http, "o2", vec![], &[]).await;
    secret(
        &http,
        "d",
        vec![
            owner_ref("ConfigMap", &first, false),
            owner_ref("ConfigMap", &second, false),
        ],
    )
    .await;
    http.delete(&format!("{CM}/o1")).await.expect(200);
    let survivor = until(&http, &format!("{SECRETS}/d"), "left with one owner", |d| {
        d["metadata"]["ownerReferences"]
            .as_array()
            .is_some_and(|refs| refs.len() == 1)
    })
    .await;
    assert_eq!(survivor["metadata"]["ownerReferences"][0]["name"], "o2");
    http.delete(&format!("{CM}/o2")).await.expect(200);
    gone(&http, &format!("{SECRETS}/d")).await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s35_cross_namespace_owner() {
    let (server, http) = setup().await;
    http.post(
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "b"}}),
    )
    .await
    .expect(201);
    let owner = config_map(&http, "o", vec![], &[]).await;
    let dependent = http
        .post(
            "/api/v1/namespaces/b/secrets",
            &json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "d", "ownerReferences": [owner_ref("ConfigMap", &owner, false)]}}),
        )
        .await
        .expect(201);
    gone(&http, "/api/v1/namespaces/b/secrets/d").await;
    let events = http.get("/api/v1/namespaces/b/events").await.expect(200);
    let warning = events["items"]
        .as_array()
        .and_then(|items| {
            items
                .iter()
                .find(|e| e["reason"] == "OwnerRefInvalidNamespace")
        })
        .unwrap_or_else(|| panic!("no OwnerRefInvalidNamespace event: {events}"));
    assert_eq!(warning["type"], "Warning");
    assert_eq!(warning["involvedObject"]["uid"], json!(uid(&dependent)));
    assert_eq!(
        warning["message"],
        format!(
            "ownerRef [v1/ConfigMap, namespace: b, name: o, uid: {}] does not exist in namespace \"b\"",
            uid(&owner)
        )
    );
    http.get(&format!("{CM}/o")).await.expect(200);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s36_cluster_scoped_dependent_of_a_namespaced_owner_is_never_collected() {
    let (server, http) = setup().await;
    http.post(
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": "kept", "ownerReferences": [{
                    "apiVersion": "v1", "kind": "ConfigMap", "name": "missing",
                    "uid": "00000000-0000-0000-0000-000000000001"}]}}),
    )
    .await
    .expect(201);
    let namespace = stays(&http, "/api/v1/namespaces/kept").await;
    assert!(namespace["metadata"].get("deletionTimestamp").is_none());
    server.shutdown().await;
}

/// Work half done when the server stops is found again after the restart: the graph is
/// rebuilt from storage, and dependents of owners that went while it was down are collected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cascade_completes_after_a_restart() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let data = dir.path().join("data");
    let start = |gc: bool| {
        let data = data.clone();
        async move {
            common::install_crypto_provider();
            let mut config = finale_apiserver::server::ServerConfig::new(
                &data,
                "127.0.0.1:0".parse().expect("address"),
            );
            config.store.durable_commits = false;
            config.garbage_collector = gc;
            finale_apiserver::server::start(config)
                .await
                .expect("server starts")
        }
    };
    // First life, collector off: an owner with dependents is deleted (the dependents stay).
    let running = start(false).await;
    let registry = std::sync::Arc::clone(&running.registry);
    let catalog = registry.catalog();
    let config_maps = catalog.lookup("", "v1", "configmaps").expect("configmaps");
    let namespaces = catalog.lookup("", "v1", "namespaces").expect("namespaces");
    let options = finale_apiserver::registry::WriteOptions::default();
    registry
        .create(
            &namespaces,
            None,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
            &options,
        )
        .await
        .expect("namespace");
    let owner = registry
        .create(
            &config_maps,
            Some(NS),
            json!({"metadata": {"name": "o"}}),
            &options,
        )
        .await
        .expect("owner")
        .object;
    for i in 0..20 {
        registry
            .create(
                &config_maps,
                Some(NS),
                json!({"metadata": {"name": format!("d{i}"),
                        "ownerReferences": [owner_ref("ConfigMap", &owner, false)]}}),
                &options,
            )
            .await
            .expect("dependent");
    }
    registry
        .delete(&config_maps, Some(NS), "o", &Default::default())
        .await
        .expect("delete the owner");
    drop(registry);
    tokio::time::timeout(Duration::from_secs(20), running.shutdown())
        .await
        .expect("clean stop");

    // Second life, collector on: the dependents go.
    let running = start(true).await;
    let registry = std::sync::Arc::clone(&running.registry);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let list = registry
            .list(&config_maps, Some(NS), &Default::default())
            .await
            .expect("list");
        let left = list["items"].as_array().map_or(0, Vec::len);
        if left == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{left} dependents left"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(registry);
    tokio::time::timeout(Duration::from_secs(20), running.shutdown())
        .await
        .expect("clean stop");
}

/// The collector's graph after it fell behind its change stream (issue 18, item 4). With a
/// change stream that holds a single event, a burst of owner deletions overruns the collector;
/// it must rebuild its graph from a fresh list, find the owners gone, and collect every
/// dependent, as a restart would. Rebuilding by re-adding the listed objects to the old graph
/// would keep the deleted owners in it and their dependents forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owners_deleted_while_the_collector_lags_still_take_their_dependents() {
    const OWNERS: usize = 40;
    const REBUILDS: &str = "apiserver_garbage_collector_graph_rebuilds_total";
    let server =
        TestServer::start_with(|config| config.watch_cache.change_stream_capacity = 1).await;
    let http = Http::new(&server);
    http.post(
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
    )
    .await
    .expect(201);
    let mut owners = Vec::new();
    for i in 0..OWNERS {
        owners.push(config_map(&http, &format!("owner-{i}"), vec![], &[]).await);
    }
    for (i, owner) in owners.iter().enumerate() {
        secret(
            &http,
            &format!("dependent-{i}"),
            vec![owner_ref("ConfigMap", owner, false)],
        )
        .await;
    }
    // The collector knows every owner and dependent before they are deleted.
    http.collector_caught_up(NS).await;
    let rebuilds_before = http.metric(REBUILDS).await.expect("the rebuild counter");

    let deletes = owners.iter().enumerate().map(|(i, _)| {
        let http = &http;
        async move { http.delete(&format!("{CM}/owner-{i}")).await.expect(200) }
    });
    futures::future::join_all(deletes).await;
    http.collector_caught_up(NS).await;
    let rebuilds_after = http.metric(REBUILDS).await.expect("the rebuild counter");
    assert!(
        rebuilds_after > rebuilds_before,
        "precondition: the collector fell behind while the owners were deleted \
         ({rebuilds_before} rebuilds before, {rebuilds_after} after)"
    );

    for i in 0..OWNERS {
        gone(&http, &format!("{SECRETS}/dependent-{i}")).await;
    }
    server.shutdown().await;
}

/// kube-rs `delete` with each `PropagationPolicy`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_deletes_with_each_propagation_policy() {
    let (server, _http) = setup().await;
    let config_maps: Api<ConfigMap> = Api::namespaced(server.client.clone(), NS);
    let make = |name: &str, owner: Option<&ConfigMap>| {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        if let Some(owner) = owner {
            cm.metadata.owner_references = Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                    api_version: "v1".into(),
                    kind: "ConfigMap".into(),
                    name: owner.metadata.name.clone().unwrap_or_default(),
                    uid: owner.metadata.uid.clone().unwrap_or_default(),
                    block_owner_deletion: Some(true),
                    ..Default::default()
                },
            ]);
        }
        cm
    };
    let exists = |name: &'static str| {
        let config_maps = config_maps.clone();
        async move { config_maps.get_opt(name).await.expect("get").is_some() }
    };
    let wait_gone = |name: &'static str| async move {
        let deadline = tokio::time::Instant::now() + WAIT;
        while exists(name).await {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{name} still exists"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    for (policy, owner, child) in [
        (PropagationPolicy::Background, "bg", "bg-child"),
        (PropagationPolicy::Foreground, "fg", "fg-child"),
        (PropagationPolicy::Orphan, "or", "or-child"),
    ] {
        let parent = config_maps
            .create(&PostParams::default(), &make(owner, None))
            .await
            .expect("owner");
        config_maps
            .create(&PostParams::default(), &make(child, Some(&parent)))
            .await
            .expect("child");
        let params = DeleteParams {
            propagation_policy: Some(policy.clone()),
            ..DeleteParams::default()
        };
        config_maps.delete(owner, &params).await.expect("delete");
        wait_gone(owner).await;
        match policy {
            PropagationPolicy::Orphan => {
                let kept = config_maps.get(child).await.expect("orphan kept");
                assert!(kept.metadata.owner_references.is_none());
            }
            _ => wait_gone(child).await,
        }
    }
    server.shutdown().await;
}

/// O1–O3: owner references are checked on every write; the object is not stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_references_are_validated() {
    let (server, http) = setup().await;
    let invalid = |refs: Value| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "bad", "ownerReferences": refs}})
    };
    let status = http
        .post(
            CM,
            &invalid(json!([{"apiVersion": "", "kind": "", "name": "", "uid": ""}])),
        )
        .await
        .expect_failure(422, "Invalid");
    let message = status["message"].as_str().unwrap_or_default();
    for expected in [
        "metadata.ownerReferences[0].apiVersion: Invalid value: \"\": version must not be empty",
        "metadata.ownerReferences[0].kind: Invalid value: \"\": kind must not be empty",
        "metadata.ownerReferences[0].name: Invalid value: \"\": name must not be empty",
        "metadata.ownerReferences[0].uid: Invalid value: \"\": uid must not be empty",
    ] {
        assert!(
            message.contains(expected),
            "missing {expected:?} in {message}"
        );
    }
    let status = http
        .post(
            CM,
            &invalid(json!([{"apiVersion": "v1", "kind": "Event", "name": "e", "uid": "u"}])),
        )
        .await
        .expect_failure(422, "Invalid");
    assert!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.contains("/v1, Kind=Event is disallowed from being an owner")),
        "{status}"
    );
    let two_controllers = json!([
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "a", "uid": "u1", "controller": true},
        {"apiVersion": "v1", "kind": "Secret", "name": "b", "uid": "u2", "controller": true}
    ]);
    let status = http
        .post(CM, &invalid(two_controllers))
        .await
        .expect_failure(422, "Invalid");
    assert!(
        status["message"].as_str().is_some_and(|m| m.contains(
            "Only one reference can have Controller set to true. Found \"true\" in references for ConfigMap/a and Secret/b"
        )),
        "{status}"
    );
    http.get(&format!("{CM}/bad"))
        .await
        .expect_failure(404, "NotFound");
    server.shutdown().await;
}
