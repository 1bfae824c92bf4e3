//! Fenced controller writes (issue #13: "fence controller writes on the Lease's revision"):
//! the in-process controllers write through a registry whose every write requires, in the
//! same store transaction, that the controllers' Lease is as this replica last wrote it. Once
//! another replica has written the Lease, their writes are refused and nothing is stored,
//! even before this replica's elector notices.
//!
//! Run on the embedded store here and on etcd in `controllers_fence_on_etcd.rs`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::raw::Http;
use common::{TestServer, WAIT};
use finale_apiserver::registry::fence::LeaseFence;
use finale_apiserver::registry::{DeleteOptions, Subresource, WriteOptions};
use serde_json::{Value, json};

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases";
const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

fn lease(name: &str, holder: &str) -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
            "renewTime": chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()}})
}

fn config_map(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})
}

/// Rewrites the Lease `name` as held by `holder` (a renewal, or a takeover); returns its
/// resourceVersion.
async fn write_lease(http: &Http, name: &str, holder: &str) -> i64 {
    let mut current = http.get(&format!("{LEASES}/{name}")).await.expect(200);
    current["spec"]["holderIdentity"] = json!(holder);
    current["spec"]["renewTime"] = json!(
        chrono::Utc::now()
            .format("%Y-%m-%dT%H:%M:%S%.6fZ")
            .to_string()
    );
    let written = http
        .put(&format!("{LEASES}/{name}"), &current)
        .await
        .expect(200);
    common::raw::rv(&written)
}

/// ConfigMaps `owner-N` and `dependent-N`, the second owned by the first.
async fn owner_and_dependent(http: &Http, n: usize) {
    let owner = http
        .post(CONFIGMAPS, &config_map(&format!("owner-{n}")))
        .await
        .expect(201);
    let mut dependent = config_map(&format!("dependent-{n}"));
    dependent["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap",
        "name": format!("owner-{n}"), "uid": owner["metadata"]["uid"]}]);
    http.post(CONFIGMAPS, &dependent).await.expect(201);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_write_commits_only_while_the_lease_is_as_this_replica_wrote_it() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let registry = server.registry();
    let catalog = registry.catalog();
    let configmaps = catalog.lookup("", "v1", "configmaps").expect("configmaps");
    let leases = catalog
        .lookup("coordination.k8s.io", "v1", "leases")
        .expect("leases");
    let held = http
        .post(LEASES, &lease("fence-test", "replica-x"))
        .await
        .expect(201);
    let fence = Arc::new(LeaseFence::new(
        leases.object_key(Some("kube-system"), "fence-test"),
        "kube-system/fence-test".into(),
        "replica-x".into(),
    ));
    let fenced = registry.fenced(Arc::clone(&fence));
    let options = WriteOptions::default();
    let create = |name: &'static str| {
        fenced.create(&configmaps, Some("default"), config_map(name), &options)
    };

    // Before a term opens the fence, nothing is written.
    fence.hold(common::raw::rv(&held));
    let refused = create("before-the-term").await.expect_err("no term yet");
    assert_eq!(refused.code, 503, "{refused:?}");
    assert!(
        refused
            .message
            .contains("does not hold the controllers' Lease kube-system/fence-test"),
        "{}",
        refused.message
    );
    fence.open();
    create("in-the-term")
        .await
        .expect("the Lease is as we wrote it");

    // Our own renewal (written by the elector, which records it a moment later) races a
    // write: the write is retried at the renewal's revision and commits.
    write_lease(&http, "fence-test", "replica-x").await;
    create("after-a-renewal")
        .await
        .expect("a renewal by this replica keeps the fence");

    // Another replica takes the Lease: creates, updates, finalizer edits and deletes are all
    // refused, and nothing is stored.
    write_lease(&http, "fence-test", "replica-y").await;
    let refused_before = fence.refused().get();
    let taken = create("after-the-takeover")
        .await
        .expect_err("another replica holds the Lease");
    assert_eq!(taken.code, 503, "{taken:?}");
    assert!(
        taken
            .message
            .contains("lost the controllers' Lease kube-system/fence-test to replica-y"),
        "{}",
        taken.message
    );
    http.get(&format!("{CONFIGMAPS}/after-the-takeover"))
        .await
        .expect(404);
    let mut edited = http
        .get(&format!("{CONFIGMAPS}/in-the-term"))
        .await
        .expect(200);
    edited["metadata"]["finalizers"] = json!(["example.com/hold"]);
    let update = fenced
        .update(
            &configmaps,
            Some("default"),
            "in-the-term",
            edited,
            Subresource::Main,
            &options,
        )
        .await
        .expect_err("fenced update");
    assert_eq!(update.code, 503);
    let delete = fenced
        .delete(
            &configmaps,
            Some("default"),
            "in-the-term",
            &DeleteOptions::default(),
        )
        .await
        .expect_err("fenced delete");
    assert_eq!(delete.code, 503);
    let kept = http
        .get(&format!("{CONFIGMAPS}/in-the-term"))
        .await
        .expect(200);
    assert!(kept["metadata"]["finalizers"].is_null(), "{kept}");
    assert!(kept["metadata"]["deletionTimestamp"].is_null(), "{kept}");
    assert_eq!(fence.refused().get(), refused_before + 3);

    // The unfenced registry (the API) is not affected.
    registry
        .create(
            &configmaps,
            Some("default"),
            config_map("through-the-api"),
            &options,
        )
        .await
        .expect("unfenced writes go on");
    server.shutdown().await;
}

/// The real garbage collector, after another replica has written the controllers' Lease
/// (with timings under which this server's elector would not notice for 40 s): its deletion
/// of an orphaned dependent is refused and counted, and the dependent stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_garbage_collector_cannot_write_once_another_replica_took_the_lease() {
    let server = TestServer::start_with(|config| {
        config.leader_election.lease_duration = Duration::from_secs(60);
        config.leader_election.renew_deadline = Duration::from_secs(50);
        config.leader_election.retry_period = Duration::from_secs(40);
    })
    .await;
    let http = Http::new(&server);
    let lease_path = format!("{LEASES}/finale-controllers");
    let deadline = tokio::time::Instant::now() + WAIT;
    let identity = loop {
        let reply = http.get(&lease_path).await;
        if reply.status == 200
            && let Some(holder) = reply.body["spec"]["holderIdentity"].as_str()
            && !holder.is_empty()
        {
            break holder.to_string();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the server never took its controllers' Lease"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };

    // Precondition: the collector works while the Lease is ours.
    owner_and_dependent(&http, 1).await;
    http.delete(&format!("{CONFIGMAPS}/owner-1"))
        .await
        .expect(200);
    let deadline = tokio::time::Instant::now() + WAIT;
    while http.get(&format!("{CONFIGMAPS}/dependent-1")).await.status != 404 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the collector did not collect the dependent while it led"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Another replica takes the Lease; this server's elector will not look for 40 s.
    owner_and_dependent(&http, 2).await;
    write_lease(&http, "finale-controllers", "another-replica").await;
    assert_ne!(identity, "another-replica");
    http.delete(&format!("{CONFIGMAPS}/owner-2"))
        .await
        .expect(200);

    // Sentinel: the collector's deletion was attempted and refused.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let metrics = http.get("/metrics").await.body;
        let text = metrics.as_str().unwrap_or_default();
        let refused = text
            .lines()
            .find(|line| line.starts_with("apiserver_controllers_fenced_writes_total "))
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|value| value.parse::<f64>().ok())
            .unwrap_or(0.0);
        if refused >= 1.0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no refused controller write was counted:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let kept = http
        .get(&format!("{CONFIGMAPS}/dependent-2"))
        .await
        .expect(200);
    assert!(kept["metadata"]["deletionTimestamp"].is_null(), "{kept}");
    server.shutdown().await;
}
