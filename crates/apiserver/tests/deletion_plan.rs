//! `DeletionReview` in Plan mode (issue 11), against an in-process server over HTTPS: one
//! Given/When/Then per feature — deleted, orphaned, kept by another owner (named), the kind's
//! default policy, a namespace's content, hangs (dead claim, unclaimed finalizer), external
//! resources from a claim, `maxNodes` — each checked against what the real DELETE then does
//! where the outcome is observable.

mod common;

use common::raw::{Http, uid};
use common::{TestServer, WAIT, within};
use finale_apiserver::insight::api::{
    CauseType, DeletionReview, DeletionReviewSpec, ReviewMode, TargetRef, Verdict,
};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

const REVIEWS: &str = "/apis/deletion.finale.dev/v1alpha1/deletionreviews";

fn config_map(
    namespace: &str,
    name: &str,
    owners: &[(&Value, bool)],
    finalizers: &[&str],
) -> Value {
    let references: Vec<Value> = owners
        .iter()
        .map(|(owner, block)| {
            json!({"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                "blockOwnerDeletion": block})
        })
        .collect();
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "ownerReferences": references,
            "finalizers": finalizers}})
}

async fn create(http: &Http, object: Value) -> Value {
    let namespace = object["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default");
    let path = match object["kind"].as_str() {
        Some("ConfigMap") => format!("/api/v1/namespaces/{namespace}/configmaps"),
        Some("Secret") => format!("/api/v1/namespaces/{namespace}/secrets"),
        Some("Pod") => format!("/api/v1/namespaces/{namespace}/pods"),
        Some("Job") => format!("/apis/batch/v1/namespaces/{namespace}/jobs"),
        other => panic!("no path for {other:?}"),
    };
    http.post(&path, &object).await.expect(201)
}

async fn create_namespace(http: &Http, name: &str) -> Value {
    http.post(
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
    )
    .await
    .expect(201)
}

/// POSTs a Plan review and returns its `status`.
async fn plan(http: &Http, target: Value, policy: Option<&str>, max_nodes: u32) -> Value {
    // Plan follows the collector's ownership graph, which may be a moment behind the writes
    // just made: wait until it has seen them (a sentinel it collects comes after them).
    http.collector_caught_up("default").await;
    let mut spec = json!({"target": target, "mode": "Plan", "maxNodes": max_nodes});
    if let Some(policy) = policy {
        spec["propagationPolicy"] = json!(policy);
    }
    let body = json!({"apiVersion": "deletion.finale.dev/v1alpha1", "kind": "DeletionReview",
        "spec": spec});
    let answer = http.post(REVIEWS, &body).await.expect(201);
    answer["status"].clone()
}

fn target(api_version: &str, kind: &str, namespace: &str, name: &str) -> Value {
    let mut target = json!({"apiVersion": api_version, "kind": kind, "name": name});
    if !namespace.is_empty() {
        target["namespace"] = json!(namespace);
    }
    target
}

/// Every node of the tree, depth first.
fn nodes(status: &Value) -> Vec<&Value> {
    fn walk<'a>(node: &'a Value, out: &mut Vec<&'a Value>) {
        out.push(node);
        for child in node["children"].as_array().into_iter().flatten() {
            walk(child, out);
        }
    }
    let mut out = Vec::new();
    for root in status["causes"].as_array().into_iter().flatten() {
        walk(root, &mut out);
    }
    out
}

/// The node of the tree about the object named `name` with the given cause type.
fn node_of<'a>(status: &'a Value, type_: &str, name: &str) -> &'a Value {
    nodes(status)
        .into_iter()
        .find(|n| n["type"] == type_ && n["object"]["name"] == name)
        .unwrap_or_else(|| panic!("no {type_} node for {name} in {status:#}"))
}

/// Names of the ConfigMaps left in `namespace`.
async fn config_maps_left(http: &Http, namespace: &str) -> Vec<String> {
    let list = http
        .get(&format!("/api/v1/namespaces/{namespace}/configmaps"))
        .await
        .expect(200);
    let mut names: Vec<String> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_string))
        .filter(|n| n != "kube-root-ca.crt")
        .collect();
    names.sort();
    names
}

/// Polls until `done` holds for the ConfigMaps left, within [`WAIT`].
async fn wait_for_config_maps(http: &Http, namespace: &str, expected: &[&str]) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let left = config_maps_left(http, namespace).await;
        if left == expected {
            // And the collector has nothing more to do about them (the sentinel lives in
            // default: a terminating namespace takes no new content).
            http.collector_caught_up("default").await;
            assert_eq!(config_maps_left(http, namespace).await, expected);
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "ConfigMaps left in {namespace}: {left:?}, expected {expected:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A Lease in kube-system held by `holder`, renewed `age` ago, for `duration` seconds.
async fn lease(http: &Http, name: &str, age: chrono::Duration, duration: i64) {
    let renewed = chrono::Utc::now() - age;
    http.post(
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases",
        &json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": "kube-system"},
            "spec": {"holderIdentity": format!("{name}-0"), "leaseDurationSeconds": duration,
                "renewTime": renewed.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()}}),
    )
    .await
    .expect(201);
}

async fn claim(http: &Http, name: &str, finalizer: &str, lease: &str, cleans_up: &[&str]) {
    http.post(
        "/apis/deletion.finale.dev/v1alpha1/finalizerclaims",
        &json!({"apiVersion": "deletion.finale.dev/v1alpha1", "kind": "FinalizerClaim",
            "metadata": {"name": name},
            "spec": {"finalizer": finalizer, "resources": [{"group": "", "resource": "configmaps"}],
                "controller": format!("{name}-controller"),
                "lease": {"namespace": "kube-system", "name": lease},
                "cleansUp": cleans_up}}),
    )
    .await
    .expect(201);
}

#[tokio::test]
async fn background_deletes_the_dependents_and_names_the_owner_that_keeps_one() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let ns = "default";
    // Given a ConfigMap app with a dependent chain app → child → grandchild (a Secret), and
    // a ConfigMap shared owned by app and by other, which is not deleted,
    let app = create(&http, config_map(ns, "app", &[], &[])).await;
    let other = create(&http, config_map(ns, "other", &[], &[])).await;
    let child = create(&http, config_map(ns, "child", &[(&app, false)], &[])).await;
    create(
        &http,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "grandchild",
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "child",
                "uid": uid(&child)}]}}),
    )
    .await;
    create(
        &http,
        config_map(ns, "shared", &[(&app, false), (&other, false)], &[]),
    )
    .await;

    // when a DELETE of app with no policy is planned,
    let status = plan(&http, target("v1", "ConfigMap", ns, "app"), None, 100).await;

    // then it deletes app, child and grandchild, keeps shared naming other, and will complete;
    assert_eq!(status["verdict"], "WillComplete", "{status:#}");
    let counts = &status["plan"];
    assert_eq!(counts["propagationPolicy"], "Background");
    assert_eq!(counts["policySource"], "Default");
    assert_eq!(counts["deleted"], 3);
    assert_eq!(
        counts["deletedByKind"],
        json!({"ConfigMap": 2, "Secret": 1})
    );
    assert_eq!(counts["kept"], 1);
    assert_eq!(counts["orphaned"], 0);
    assert_eq!(counts["hangs"], 0);
    assert_eq!(
        status["summary"],
        "DELETE ConfigMap default/app (Background, the default) deletes 3 objects of 2 kinds; keeps 1 (another owner)"
    );
    let shared = node_of(&status, "Keeps", "shared");
    assert_eq!(shared["evidence"]["keptBy"], "ConfigMap default/other");
    assert_eq!(
        shared["message"],
        "kept: ConfigMap default/other also owns it and is not deleted"
    );
    assert_eq!(
        node_of(&status, "Deletes", "grandchild")["object"]["kind"],
        "Secret"
    );
    assert!(
        status["resourceVersion"]
            .as_str()
            .is_some_and(|rv| !rv.is_empty()),
        "{status:#}"
    );

    // and the real DELETE does exactly that.
    http.delete("/api/v1/namespaces/default/configmaps/app")
        .await
        .expect(200);
    wait_for_config_maps(&http, ns, &["other", "shared"]).await;
    let secret = http
        .get("/api/v1/namespaces/default/secrets/grandchild")
        .await;
    assert_eq!(secret.status, 404, "{}", secret.body);
    let shared = http
        .get("/api/v1/namespaces/default/configmaps/shared")
        .await
        .expect(200);
    assert_eq!(shared["metadata"]["ownerReferences"][0]["name"], "other");
    server.shutdown().await;
}

#[tokio::test]
async fn orphan_keeps_the_dependents_without_their_reference() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let ns = "default";
    // Given app with two dependents,
    let app = create(&http, config_map(ns, "app", &[], &[])).await;
    create(&http, config_map(ns, "a", &[(&app, true)], &[])).await;
    create(&http, config_map(ns, "b", &[(&app, false)], &[])).await;

    // when a DELETE with propagationPolicy Orphan is planned,
    let status = plan(
        &http,
        target("v1", "ConfigMap", ns, "app"),
        Some("Orphan"),
        100,
    )
    .await;

    // then only app is deleted and both dependents are orphaned from it.
    assert_eq!(status["verdict"], "WillComplete", "{status:#}");
    assert_eq!(status["plan"]["policySource"], "Request");
    assert_eq!(status["plan"]["deleted"], 1);
    assert_eq!(status["plan"]["orphaned"], 2);
    let a = node_of(&status, "Orphans", "a");
    assert_eq!(a["evidence"]["orphanedFrom"], "ConfigMap default/app");
    assert_eq!(
        status["summary"],
        "DELETE ConfigMap default/app (Orphan) deletes 1 object of 1 kind; orphans 2"
    );

    http.delete_with(
        "/api/v1/namespaces/default/configmaps/app",
        &json!({"propagationPolicy": "Orphan"}),
    )
    .await;
    wait_for_config_maps(&http, ns, &["a", "b"]).await;
    let a = http
        .get("/api/v1/namespaces/default/configmaps/a")
        .await
        .expect(200);
    assert!(a["metadata"]["ownerReferences"].is_null(), "{a:#}");
    server.shutdown().await;
}

#[tokio::test]
async fn a_job_orphans_its_pods_by_default_and_background_deletes_them() {
    // The Job's Pod is placed by hand, so no Job controller may add Pods of its own.
    let server = TestServer::start_with(|config| config.job_controller = false).await;
    let http = Http::new(&server);
    // Given a Job with a Pod it owns,
    let job = create(
        &http,
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "report"},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox"}]}}}}),
    )
    .await;
    create(
        &http,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "report-1",
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "report",
                "uid": uid(&job), "controller": true, "blockOwnerDeletion": true}]},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
    )
    .await;
    let job_target = target("batch/v1", "Job", "default", "report");

    // when a DELETE with no policy is planned, then the Job's default applies: Orphan;
    let status = plan(&http, job_target.clone(), None, 100).await;
    assert_eq!(status["plan"]["propagationPolicy"], "Orphan", "{status:#}");
    assert_eq!(status["plan"]["policySource"], "Default");
    assert_eq!(status["plan"]["deleted"], 1);
    assert_eq!(status["plan"]["orphaned"], 1);
    node_of(&status, "Orphans", "report-1");
    assert_eq!(
        node_of(&status, "Deletes", "report")["message"],
        "deleted by the request (propagationPolicy Orphan, the kind's default)"
    );

    // and with Background the Pod goes too.
    let status = plan(&http, job_target, Some("Background"), 100).await;
    assert_eq!(status["plan"]["deleted"], 2, "{status:#}");
    assert_eq!(
        status["plan"]["deletedByKind"],
        json!({"Job.batch": 1, "Pod": 1})
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_namespace_deletes_its_content_and_hangs_on_an_unclaimed_finalizer() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    // Given a namespace with a ConfigMap, a Secret, a Pod and a ConfigMap holding a finalizer
    // no controller claims,
    create_namespace(&http, "shop").await;
    create(&http, config_map("shop", "settings", &[], &[])).await;
    create(
        &http,
        config_map("shop", "held", &[], &["example.com/nobody"]),
    )
    .await;
    create(
        &http,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "token", "namespace": "shop"}}),
    )
    .await;
    create(
        &http,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]}}),
    )
    .await;

    // when deleting the namespace is planned,
    let status = plan(&http, target("v1", "Namespace", "", "shop"), None, 100).await;

    // then everything in it is deleted, and it will hang on held's finalizer;
    assert_eq!(status["verdict"], "WillHang", "{status:#}");
    let counts = &status["plan"];
    assert_eq!(counts["deleted"], 5);
    assert_eq!(
        counts["deletedByKind"],
        json!({"ConfigMap": 2, "Namespace": 1, "Pod": 1, "Secret": 1})
    );
    assert_eq!(counts["hangs"], 1);
    assert_eq!(counts["blocked"], 1, "the namespace waits for held");
    let hang = &counts["hangCauses"][0];
    assert_eq!(hang["type"], "Finalizer");
    assert_eq!(hang["state"], "Stuck");
    assert_eq!(hang["object"]["name"], "held");
    assert!(
        hang["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("no controller claims finalizer example.com/nobody")),
        "{hang:#}"
    );
    let held = node_of(&status, "Deletes", "held");
    assert_eq!(held["state"], "Stuck");
    assert_eq!(held["evidence"]["hangs"], "true");
    assert_eq!(
        node_of(&status, "Deletes", "settings")["message"],
        "deleted by the namespace controller (namespace content)"
    );
    assert_eq!(
        node_of(&status, "Deletes", "shop")["evidence"]["waitsForHang"],
        "terminating"
    );

    // and the real DELETE leaves exactly held (terminating) and the namespace.
    http.delete("/api/v1/namespaces/shop").await.expect(200);
    wait_for_config_maps(&http, "shop", &["held"]).await;
    let held = http
        .get("/api/v1/namespaces/shop/configmaps/held")
        .await
        .expect(200);
    assert!(held["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(
        http.get("/api/v1/namespaces/shop/secrets/token")
            .await
            .status,
        404
    );
    assert_eq!(http.get("/api/v1/namespaces/shop").await.status, 200);
    server.shutdown().await;
}

#[tokio::test]
async fn a_dead_claim_hangs_and_its_external_resources_are_listed() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    // Given a claim for db.example.com/drop whose Lease expired an hour ago, one for
    // cache.example.com/flush whose Lease is live, and an owner holding both finalizers via
    // two dependents,
    lease(&http, "db-operator", chrono::Duration::hours(1), 15).await;
    lease(&http, "cache-operator", chrono::Duration::seconds(1), 3600).await;
    claim(
        &http,
        "db",
        "db.example.com/drop",
        "db-operator",
        &["PostgreSQL database"],
    )
    .await;
    claim(
        &http,
        "cache",
        "cache.example.com/flush",
        "cache-operator",
        &["Redis keys"],
    )
    .await;
    let app = create(&http, config_map("default", "app", &[], &[])).await;
    create(
        &http,
        config_map("default", "db", &[(&app, true)], &["db.example.com/drop"]),
    )
    .await;
    create(
        &http,
        config_map(
            "default",
            "cache",
            &[(&app, true)],
            &["cache.example.com/flush"],
        ),
    )
    .await;

    // when a foreground DELETE of app is planned,
    let status = plan(
        &http,
        target("v1", "ConfigMap", "default", "app"),
        Some("Foreground"),
        100,
    )
    .await;

    // then db hangs (its controller is dead) and app waits for it, cache completes, and
    // both cleanups are listed with whether they will happen.
    assert_eq!(status["verdict"], "WillHang", "{status:#}");
    let counts = &status["plan"];
    assert_eq!(
        (
            counts["deleted"].as_u64(),
            counts["hangs"].as_u64(),
            counts["blocked"].as_u64()
        ),
        (Some(3), Some(1), Some(1))
    );
    let hang = &counts["hangCauses"][0];
    assert_eq!(hang["object"]["name"], "db");
    assert!(
        hang["message"]
            .as_str()
            .is_some_and(|m| m.contains("but its Lease kube-system/db-operator expired")),
        "{hang:#}"
    );
    let external = counts["externalResources"]
        .as_array()
        .expect("external resources");
    let by_name = |name: &str| {
        external
            .iter()
            .find(|e| e["object"]["name"] == name)
            .unwrap_or_else(|| panic!("no external resource for {name}: {external:?}"))
    };
    assert_eq!(
        by_name("db"),
        &json!({"object": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default",
            "name": "db", "uid": by_name("db")["object"]["uid"]},
            "finalizer": "db.example.com/drop", "claim": "db", "controller": "db-controller",
            "cleansUp": ["PostgreSQL database"], "willHang": true})
    );
    assert_eq!(by_name("cache")["willHang"], false);
    assert_eq!(by_name("cache")["cleansUp"], json!(["Redis keys"]));
    let app_node = node_of(&status, "Deletes", "app");
    assert_eq!(app_node["state"], "Stuck");
    assert_eq!(app_node["evidence"]["waitsForHang"], "terminating");
    let cache_finalizer = nodes(&status)
        .into_iter()
        .find(|n| n["type"] == "Finalizer" && n["object"]["name"] == "cache")
        .expect("cache's finalizer cause");
    assert_eq!(cache_finalizer["state"], "Progressing");
    assert_eq!(
        status["summary"],
        "DELETE ConfigMap default/app (Foreground) deletes 3 objects of 1 kind; 1 will hang (1 more waits behind them)"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn max_nodes_cuts_the_tree_but_not_the_counts() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    // Given an owner with 30 dependents,
    let app = create(&http, config_map("default", "app", &[], &[])).await;
    for i in 0..30 {
        create(
            &http,
            config_map("default", &format!("d{i:02}"), &[(&app, false)], &[]),
        )
        .await;
    }
    // when a plan is asked for with maxNodes 10,
    let status = plan(&http, target("v1", "ConfigMap", "default", "app"), None, 10).await;
    // then the counts are exact and the tree ends with a More marker counting the rest.
    assert_eq!(status["plan"]["deleted"], 31, "{status:#}");
    let root = &status["causes"][0];
    let children = root["children"].as_array().expect("children");
    assert_eq!(
        children.len(),
        10,
        "9 dependents and one More node: {root:#}"
    );
    let more = &children[9];
    assert_eq!(more["type"], "More");
    assert_eq!(more["message"], "…and 21 more");
    server.shutdown().await;
}

#[tokio::test]
async fn a_missing_target_is_gone_and_kube_rs_reads_plans() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let status = plan(
        &http,
        target("v1", "ConfigMap", "default", "nothing"),
        None,
        10,
    )
    .await;
    assert_eq!(status["verdict"], "Gone", "{status:#}");
    assert!(status["plan"].is_null());

    create(&http, config_map("default", "typed", &[], &[])).await;
    let reviews: Api<DeletionReview> = Api::all(server.client.clone());
    let answer = within(
        WAIT,
        reviews.create(
            &PostParams::default(),
            &DeletionReview::new(DeletionReviewSpec {
                target: TargetRef {
                    api_version: "v1".into(),
                    kind: "ConfigMap".into(),
                    namespace: "default".into(),
                    name: "typed".into(),
                    ..TargetRef::default()
                },
                mode: ReviewMode::Plan,
                propagation_policy: Some("Foreground".into()),
                ..DeletionReviewSpec::default()
            }),
        ),
    )
    .await
    .expect("create a Plan review with kube-rs");
    let status = answer.status.expect("a status");
    assert_eq!(status.verdict, Verdict::WillComplete);
    assert_eq!(status.causes[0].type_, CauseType::Deletes);
    let plan = status.plan.expect("a plan");
    assert_eq!(
        (plan.deleted, plan.propagation_policy.as_str()),
        (1, "Foreground")
    );
    server.shutdown().await;
}

/// An owner with many dependents of one type, planned once nothing has been written since
/// the collector caught up: their references and finalizers are taken from its graph, with
/// the same answer a read of the store gives (finalizers and other owners included).
/// `plans_during_writes_answer_at_the_revision_they_report` covers the store's side.
#[tokio::test]
async fn an_owner_of_many_dependents_is_planned_from_the_collectors_graph() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let ns = "default";
    let owner = create(&http, config_map(ns, "big", &[], &[])).await;
    let other = create(&http, config_map(ns, "other", &[], &[])).await;
    // Above the snapshot's threshold for a parallel decode (2 048).
    const DEPENDENTS: u64 = 2_100;
    for i in 0..DEPENDENTS {
        let mut dependent = config_map(ns, &format!("dep-{i}"), &[(&owner, false)], &[]);
        dependent["data"] = json!({"payload": "x".repeat(256)});
        create(&http, dependent).await;
    }
    // One held by a finalizer nobody claims, one also owned by `other`.
    create(
        &http,
        config_map(ns, "held", &[(&owner, false)], &["example.com/hold"]),
    )
    .await;
    create(
        &http,
        config_map(ns, "shared", &[(&owner, false), (&other, false)], &[]),
    )
    .await;

    let status = plan(&http, target("v1", "ConfigMap", ns, "big"), None, 20).await;
    assert_eq!(status["verdict"], "WillHang", "{status:#}");
    let counts = &status["plan"];
    // big, the dependents and held (which goes once its hang is resolved).
    assert_eq!(counts["deleted"], DEPENDENTS + 2, "{counts:#}");
    assert_eq!(counts["kept"], 1);
    assert_eq!(counts["hangs"], 1);
    assert_eq!(counts["hangCauses"][0]["object"]["name"], "held");
    // Nothing was written since the collector caught up: it answered from its graph.
    assert_eq!(
        http.metric("finale_deletion_plans_total{dependents=\"collector\"}")
            .await,
        Some(1.0),
        "the plan should have taken its dependents from the collector's graph"
    );
    server.shutdown().await;
}

/// The dependents a plan of one owner deletes: `deleted` minus the owner itself.
fn dependents_planned(status: &Value) -> u64 {
    status["plan"]["deleted"]
        .as_u64()
        .expect("a count of deletions")
        - 1
}

/// Plans answered while dependents of their target are being created: each one counts
/// exactly the dependents the store held at the `resourceVersion` it reports, whether it took
/// them from the collector's graph (exactly at that revision) or read the store. The count of
/// plans by source on `/metrics` adds up.
#[tokio::test]
async fn plans_during_writes_answer_at_the_revision_they_report() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let ns = "default";
    let owner = create(&http, config_map(ns, "owner", &[], &[])).await;
    let owner_uid = uid(&owner);
    // Above the planner's threshold for reading a collection whole (64).
    for i in 0..70 {
        create(
            &http,
            config_map(ns, &format!("early-{i}"), &[(&owner, false)], &[]),
        )
        .await;
    }
    const LATE: usize = 150;
    let writer = {
        let http = Http::new(&server);
        let owner = owner.clone();
        tokio::spawn(async move {
            for i in 0..LATE {
                create(
                    &http,
                    config_map(ns, &format!("late-{i}"), &[(&owner, false)], &[]),
                )
                .await;
            }
        })
    };
    let mut counts = Vec::new();
    // Bounded: at most 60 plans, however slow the writer.
    while counts.len() < 60 {
        let writing = !writer.is_finished();
        let spec = json!({"target": target("v1", "ConfigMap", ns, "owner"), "mode": "Plan",
            "maxNodes": 5});
        let body = json!({"apiVersion": "deletion.finale.dev/v1alpha1",
            "kind": "DeletionReview", "spec": spec});
        let status = http.post(REVIEWS, &body).await.expect(201)["status"].clone();
        let revision = status["resourceVersion"]
            .as_str()
            .expect("a resourceVersion");
        let listed = http
            .get(&format!(
                "/api/v1/namespaces/{ns}/configmaps?resourceVersion={revision}&resourceVersionMatch=Exact"
            ))
            .await
            .expect(200);
        let at_revision = listed["items"]
            .as_array()
            .expect("items")
            .iter()
            .filter(|item| {
                item["metadata"]["ownerReferences"]
                    .as_array()
                    .is_some_and(|refs| refs.iter().any(|r| r["uid"] == owner_uid.as_str()))
            })
            .count() as u64;
        assert_eq!(
            dependents_planned(&status),
            at_revision,
            "plan at resourceVersion {revision}: {status:#}"
        );
        counts.push(at_revision);
        if !writing {
            break;
        }
    }
    writer.await.expect("the writer");
    let plans = counts.len();
    // The precondition: plans ran while the dependents were being written.
    counts.dedup();
    assert!(
        counts.len() >= 3,
        "the plans should have seen the writes in progress: {counts:?}"
    );
    let by_source = |source: &str| {
        let http = &http;
        let name = format!("finale_deletion_plans_total{{dependents=\"{source}\"}}");
        async move { http.metric(&name).await.unwrap_or(0.0) }
    };
    let answered = by_source("collector").await + by_source("store").await;
    assert_eq!(answered, plans as f64, "plans counted by source");
    server.shutdown().await;
}
