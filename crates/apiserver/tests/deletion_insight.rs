//! Deletion insight (issue 11), against an in-process server over HTTPS: the
//! `deletion.finale.dev/v1alpha1` group in discovery, `FinalizerClaim` as a stored and
//! validated kind, and `DeletionReview` in Explain mode — one Given/When/Then per cause,
//! asserting the verdict, the chain of causes and their messages — through raw HTTP,
//! kube-rs (typed and dynamic) and kubectl.

mod common;

use std::time::Duration;

use common::raw::{Http, uid};
use common::{TestServer, WAIT, within};
use finale_apiserver::insight::api::{
    CauseState, CauseType, DeletionReview, DeletionReviewSpec, FinalizerClaim, FinalizerClaimSpec,
    ForcePolicy, GroupResource, LeaseRef, TargetRef, Verdict,
};
use kube::api::{Api, DynamicObject, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};

const REVIEWS: &str = "/apis/deletion.finale.dev/v1alpha1/deletionreviews";
const CLAIMS: &str = "/apis/deletion.finale.dev/v1alpha1/finalizerclaims";

fn target(api_version: &str, kind: &str, namespace: &str, name: &str) -> Value {
    let mut target = json!({"apiVersion": api_version, "kind": kind, "name": name});
    if !namespace.is_empty() {
        target["namespace"] = json!(namespace);
    }
    target
}

fn review_body(target: Value) -> Value {
    json!({"apiVersion": "deletion.finale.dev/v1alpha1", "kind": "DeletionReview",
        "spec": {"target": target}})
}

/// POSTs a review of `target` and returns its `status`.
async fn explain(http: &Http, target: Value) -> Value {
    let reply = http.post(REVIEWS, &review_body(target)).await;
    let body = reply.expect(201);
    assert_eq!(body["kind"], "DeletionReview", "{body}");
    body["status"].clone()
}

/// Polls `explain` until `done` holds for the status, within [`WAIT`].
async fn explain_until(http: &Http, target: Value, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let status = explain(http, target.clone()).await;
        if done(&status) {
            return status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the review never reached the expected answer; last: {status:#}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Polls GET `path` until `done` holds for the object, within [`WAIT`].
async fn wait_for(http: &Http, path: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let reply = http.get(path).await;
        if done(&reply.body) {
            return reply.body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{path} never reached the expected state; last: {}",
            reply.body
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn terminating(object: &Value) -> bool {
    object["metadata"]["deletionTimestamp"].is_string()
}

fn config_map(name: &str, finalizers: &[&str]) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "finalizers": finalizers}})
}

/// A Lease held by `holder`, renewed `age` ago, for `duration` seconds.
fn lease(name: &str, holder: &str, age: chrono::Duration, duration: i64) -> Value {
    let renewed = chrono::Utc::now() - age;
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration,
            "renewTime": renewed.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()}})
}

fn claim(name: &str, finalizer: &str, resources: Value, lease: &str) -> Value {
    json!({"apiVersion": "deletion.finale.dev/v1alpha1", "kind": "FinalizerClaim",
        "metadata": {"name": name},
        "spec": {"finalizer": finalizer, "resources": resources, "controller": "db-operator",
            "lease": {"namespace": "kube-system", "name": lease},
            "cleansUp": ["the PostgreSQL database"]}})
}

fn cause(status: &Value, index: usize) -> &Value {
    &status["causes"][index]
}

fn message(node: &Value) -> &str {
    node["message"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn the_group_is_served_in_both_discovery_forms() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let legacy = http
        .get("/apis/deletion.finale.dev/v1alpha1")
        .await
        .expect(200);
    let resources = legacy["resources"].as_array().unwrap();
    let find = |name: &str| {
        resources
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {legacy}"))
    };
    assert_eq!(find("finalizerclaims")["kind"], "FinalizerClaim");
    assert_eq!(find("finalizerclaims")["namespaced"], false);
    assert_eq!(
        find("finalizerclaims")["verbs"].as_array().unwrap().len(),
        8
    );
    assert_eq!(find("deletionreviews")["kind"], "DeletionReview");
    assert_eq!(find("deletionreviews")["verbs"], json!(["create"]));

    let groups = http.get("/apis").await.expect(200);
    assert!(
        groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "deletion.finale.dev"
                && g["preferredVersion"]["version"] == "v1alpha1"),
        "{groups}"
    );
    let aggregated = http
        .client
        .get(format!("{}/apis", http.base))
        .bearer_auth(&http.token)
        .header(
            "accept",
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
        )
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    let group = aggregated["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["metadata"]["name"] == "deletion.finale.dev")
        .unwrap_or_else(|| panic!("the group in {aggregated}"));
    let resources = group["versions"][0]["resources"].as_array().unwrap();
    let review = resources
        .iter()
        .find(|r| r["resource"] == "deletionreviews")
        .unwrap();
    assert_eq!(review["scope"], "Cluster");
    assert_eq!(review["verbs"], json!(["create"]));
    assert_eq!(review["responseKind"]["kind"], "DeletionReview");

    // kube-rs discovery finds both kinds.
    let discovery = within(WAIT, kube::Discovery::new(server.client.clone()).run())
        .await
        .expect("kube-rs discovery");
    let kinds: Vec<String> = discovery
        .get("deletion.finale.dev")
        .expect("the group in kube-rs discovery")
        .recommended_resources()
        .into_iter()
        .map(|(resource, _)| resource.kind)
        .collect();
    assert!(
        kinds.contains(&"FinalizerClaim".to_string())
            && kinds.contains(&"DeletionReview".to_string()),
        "{kinds:?}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn finalizer_claims_are_stored_validated_and_printed() {
    let server = TestServer::start().await;
    let http = Http::new(&server);

    // Given a valid claim created through kube-rs' typed API, it is stored with the default
    // forcePolicy.
    let claims: Api<FinalizerClaim> = Api::all(server.client.clone());
    let created = within(
        WAIT,
        claims.create(
            &PostParams::default(),
            &FinalizerClaim::new(
                "databases",
                FinalizerClaimSpec {
                    finalizer: "db.finale.dev/".into(),
                    resources: vec![GroupResource {
                        group: "db.finale.dev".into(),
                        resource: "databases".into(),
                    }],
                    controller: "database-operator".into(),
                    lease: LeaseRef {
                        namespace: "finale-system".into(),
                        name: "database-operator".into(),
                    },
                    max_cleanup_seconds: Some(300),
                    cleans_up: vec!["PostgreSQL database and role".into()],
                    ..FinalizerClaimSpec::default()
                },
            ),
        ),
    )
    .await
    .expect("create a FinalizerClaim");
    assert_eq!(created.spec.force_policy, ForcePolicy::Never);
    assert!(created.metadata.uid.is_some());
    let read = within(WAIT, claims.get("databases")).await.unwrap();
    assert_eq!(read.spec, created.spec);

    // When invalid claims are written, then each gets a 422 naming every bad field, and
    // nothing is stored.
    let cases = [
        (
            json!({"finalizer": "orphan", "resources": [{"resource": "configmaps"}],
                "controller": "x", "lease": {"namespace": "kube-system", "name": "x"}}),
            vec!["spec.finalizer"],
            "system finalizer",
        ),
        (
            json!({"finalizer": "Not_A_Domain/", "resources": [{"resource": "configmaps"}],
                "controller": "x", "lease": {"namespace": "kube-system", "name": "x"}}),
            vec!["spec.finalizer"],
            "a prefix must be a DNS subdomain followed by '/'",
        ),
        (
            json!({"finalizer": "example.com/x", "resources": [],
                "controller": "x", "lease": {"namespace": "kube-system"},
                "forcePolicy": "Sometimes"}),
            vec!["spec.forcePolicy", "spec.lease.name", "spec.resources"],
            "Unsupported value: \"Sometimes\"",
        ),
        (
            json!({"finalizer": "example.com/x", "resources": [{"group": "Bad Group", "resource": "Pods"}],
                "controller": "x", "lease": {"namespace": "Kube_System", "name": "x"}}),
            vec![
                "spec.lease.namespace",
                "spec.resources[0].group",
                "spec.resources[0].resource",
            ],
            "",
        ),
    ];
    for (index, (spec, fields, text)) in cases.into_iter().enumerate() {
        let name = format!("bad-{index}");
        let body = json!({"apiVersion": "deletion.finale.dev/v1alpha1", "kind": "FinalizerClaim",
            "metadata": {"name": name}, "spec": spec});
        let status = http
            .post(CLAIMS, &body)
            .await
            .expect_failure(422, "Invalid");
        let mut reported: Vec<String> = status["details"]["causes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["field"].as_str().unwrap().to_string())
            .collect();
        reported.sort();
        reported.dedup();
        assert_eq!(reported, fields, "{status:#}");
        assert!(
            status["message"].as_str().unwrap().contains(text),
            "{status:#}"
        );
        http.get(&format!("{CLAIMS}/{name}")).await.expect(404);
    }

    // kubectl get: FINALIZER, LEASE, POLICY, AGE.
    let table = http
        .client
        .get(format!("{}{CLAIMS}", http.base))
        .bearer_auth(&http.token)
        .header("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    let columns: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        columns,
        [
            "Name",
            "Finalizer",
            "Live",
            "Holder",
            "Pending",
            "Age",
            "Lease",
            "Policy"
        ]
    );
    let cells = table["rows"][0]["cells"].as_array().unwrap();
    // No Lease finale-system/database-operator exists: not live, no holder, nothing pending.
    assert_eq!(
        cells[..5],
        [
            json!("databases"),
            json!("db.finale.dev/"),
            json!("False"),
            json!(""),
            json!(0)
        ]
    );
    assert_eq!(
        cells[6..],
        [json!("finale-system/database-operator"), json!("Never")]
    );
    server.shutdown().await;
}

#[tokio::test]
async fn reviews_are_create_only_and_check_their_input() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    http.post(
        "/api/v1/namespaces/default/configmaps",
        &config_map("plain", &[]),
    )
    .await
    .expect(201);

    // Other verbs are 405, as for upstream's reviews.
    for reply in [
        http.get(REVIEWS).await,
        http.get(&format!("{REVIEWS}/x")).await,
        http.delete(&format!("{REVIEWS}/x")).await,
        http.put(&format!("{REVIEWS}/x"), &review_body(json!({})))
            .await,
    ] {
        let status = reply.expect_failure(405, "MethodNotAllowed");
        assert_eq!(
            status["message"],
            "the server does not allow this method on the requested resource"
        );
    }

    // A review is answered and not stored.
    let body = http
        .post(
            REVIEWS,
            &review_body(target("v1", "ConfigMap", "default", "plain")),
        )
        .await
        .expect(201);
    assert_eq!(body["spec"]["mode"], "Explain", "defaulted: {body}");
    assert_eq!(body["spec"]["maxNodes"], 500, "defaulted: {body}");
    let stored = within(
        WAIT,
        server.registry().store().range(finale_store::RangeRequest {
            range: finale_store::prefix_range(b"/registry/deletion.finale.dev/deletionreviews"),
            limit: 0,
            revision: 0,
        }),
    )
    .await
    .unwrap();
    assert!(stored.kvs.is_empty(), "a review was stored");

    // Answering writes nothing: the store's revision does not move.
    let store = server.registry().store();
    let before = store.current_revision().await.unwrap();
    explain(&http, target("v1", "ConfigMap", "default", "plain")).await;
    explain(&http, target("v1", "Namespace", "", "default")).await;
    assert_eq!(store.current_revision().await.unwrap(), before);

    // Unknown fields are dropped with a warning, or refused under Strict (what kubectl sends).
    let mut unknown = review_body(target("v1", "ConfigMap", "default", "plain"));
    unknown["spec"]["bogus"] = json!(true);
    let reply = http.post(REVIEWS, &unknown).await;
    assert_eq!(
        reply.warnings,
        ["299 - \"unknown field \\\"spec.bogus\\\"\""]
    );
    reply.expect(201);
    let status = http
        .post(&format!("{REVIEWS}?fieldValidation=Strict"), &unknown)
        .await
        .expect_failure(400, "BadRequest");
    assert!(
        message(&status).contains("unknown field \"spec.bogus\""),
        "{status}"
    );

    // A propagationPolicy belongs to Plan mode; an unknown one is refused with the values.
    let mut explain_with_policy = review_body(target("v1", "ConfigMap", "default", "plain"));
    explain_with_policy["spec"]["propagationPolicy"] = json!("Orphan");
    let status = http
        .post(REVIEWS, &explain_with_policy)
        .await
        .expect_failure(422, "Invalid");
    assert_eq!(
        status["details"]["causes"][0]["field"],
        "spec.propagationPolicy"
    );
    assert!(
        message(&status).contains("applies to mode Plan only"),
        "{status}"
    );
    let mut sideways = review_body(target("v1", "ConfigMap", "default", "plain"));
    sideways["spec"]["mode"] = json!("Plan");
    sideways["spec"]["propagationPolicy"] = json!("Sideways");
    let status = http
        .post(REVIEWS, &sideways)
        .await
        .expect_failure(422, "Invalid");
    assert_eq!(
        status["details"]["causes"][0]["field"],
        "spec.propagationPolicy"
    );
    assert!(
        message(&status).contains("\"Background\", \"Foreground\", \"Orphan\""),
        "{status}"
    );

    // Bad targets are 422s naming the field.
    let cases = [
        (
            target("v1", "Gizmo", "default", "x"),
            "spec.target.kind",
            "no resource of kind Gizmo is served at v1",
        ),
        (
            target("v1", "ConfigMap", "", "x"),
            "spec.target.namespace",
            "ConfigMap is namespaced",
        ),
        (
            target("v1", "Namespace", "default", "x"),
            "spec.target.namespace",
            "cluster-scoped",
        ),
        (
            json!({"apiVersion": "v1", "name": "x"}),
            "spec.target.kind",
            "give the target's kind",
        ),
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default"}),
            "spec.target.name",
            "Required value",
        ),
    ];
    for (bad, field, text) in cases {
        let status = http
            .post(REVIEWS, &review_body(bad.clone()))
            .await
            .expect_failure(422, "Invalid");
        assert_eq!(
            status["details"]["causes"][0]["field"], field,
            "{bad}: {status:#}"
        );
        assert!(message(&status).contains(text), "{bad}: {status:#}");
    }
    let mut too_many = review_body(target("v1", "ConfigMap", "default", "plain"));
    too_many["spec"]["maxNodes"] = json!(0);
    let status = http
        .post(REVIEWS, &too_many)
        .await
        .expect_failure(422, "Invalid");
    assert_eq!(status["details"]["causes"][0]["field"], "spec.maxNodes");

    // The target may be named by its plural resource instead of its kind.
    let by_resource = explain(
        &http,
        json!({"apiVersion": "v1", "resource": "configmaps", "namespace": "default", "name": "plain"}),
    )
    .await;
    assert_eq!(by_resource["verdict"], "NotDeleting");
    server.shutdown().await;
}

#[tokio::test]
async fn gone_and_not_deleting() {
    let server = TestServer::start().await;
    let http = Http::new(&server);

    // Given nothing by that name, the verdict is Gone.
    let status = explain(&http, target("v1", "ConfigMap", "default", "missing")).await;
    assert_eq!(status["verdict"], "Gone");
    assert_eq!(
        status["summary"],
        "ConfigMap default/missing does not exist: it is gone (or never existed)"
    );
    assert!(status["causes"].as_array().unwrap().is_empty());

    // Given an object nobody deletes, the verdict is NotDeleting, at a revision no older than
    // the object.
    let created = http
        .post(
            "/api/v1/namespaces/default/configmaps",
            &config_map("kept", &[]),
        )
        .await
        .expect(201);
    let status = explain(&http, target("v1", "ConfigMap", "default", "kept")).await;
    assert_eq!(status["verdict"], "NotDeleting");
    assert_eq!(
        status["summary"],
        "ConfigMap default/kept exists and is not being deleted"
    );
    let answered_at: i64 = status["resourceVersion"].as_str().unwrap().parse().unwrap();
    assert!(answered_at >= common::raw::rv(&created));

    // When it is replaced by another object of the same name, a review of the old uid says
    // the old one is gone.
    http.delete("/api/v1/namespaces/default/configmaps/kept")
        .await
        .expect(200);
    let replacement = http
        .post(
            "/api/v1/namespaces/default/configmaps",
            &config_map("kept", &[]),
        )
        .await
        .expect(201);
    let mut old = target("v1", "ConfigMap", "default", "kept");
    old["uid"] = json!(uid(&created));
    let status = explain(&http, old).await;
    assert_eq!(status["verdict"], "Gone");
    assert_eq!(
        status["summary"],
        format!(
            "ConfigMap default/kept with uid {} is gone; another object of the same name (uid {}) exists now",
            uid(&created),
            uid(&replacement)
        )
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_finalizer_is_explained_by_its_claim_and_lease() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let configmaps = "/api/v1/namespaces/default/configmaps";
    let leases = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases";

    // Given a ConfigMap held by a finalizer no controller claims,
    http.post(
        configmaps,
        &config_map("orders", &["db.example.com/cleanup"]),
    )
    .await
    .expect(201);
    // when it is deleted,
    http.delete(&format!("{configmaps}/orders"))
        .await
        .expect(200);
    let orders = target("v1", "ConfigMap", "default", "orders");
    // then it is Stuck: nothing may ever remove the finalizer.
    let status = explain(&http, orders.clone()).await;
    assert_eq!(status["verdict"], "Stuck", "{status:#}");
    let finalizer = cause(&status, 0);
    assert_eq!(finalizer["type"], "Finalizer");
    assert_eq!(finalizer["state"], "Stuck");
    assert_eq!(finalizer["object"]["name"], "orders");
    assert_eq!(finalizer["evidence"]["finalizer"], "db.example.com/cleanup");
    assert_eq!(finalizer["evidence"]["claim"], "none");
    assert!(
        message(finalizer).starts_with(
            "no controller claims finalizer db.example.com/cleanup (owner unknown): nothing may ever remove it."
        ),
        "{finalizer:#}"
    );
    assert!(finalizer["since"].is_string());
    assert_eq!(
        status["summary"],
        "ConfigMap default/orders is stuck: no controller claims finalizer db.example.com/cleanup (owner unknown)"
    );

    // Given a claim for the finalizer, but for another resource, the answer says so.
    http.post(
        CLAIMS,
        &claim(
            "secrets-only",
            "db.example.com/cleanup",
            json!([{"resource": "secrets"}]),
            "db-operator",
        ),
    )
    .await
    .expect(201);
    let status = explain(&http, orders.clone()).await;
    assert_eq!(status["verdict"], "Stuck");
    assert!(
        message(cause(&status, 0))
            .contains("FinalizerClaim secrets-only names this finalizer but not configmaps"),
        "{status:#}"
    );

    // Given a domain claim covering ConfigMaps whose Lease does not exist: Stuck.
    http.post(
        CLAIMS,
        &claim(
            "db-example",
            "db.example.com/",
            json!([{"group": "", "resource": "configmaps"}]),
            "db-operator",
        ),
    )
    .await
    .expect(201);
    let status = explain(&http, orders.clone()).await;
    assert_eq!(status["verdict"], "Stuck");
    let finalizer = cause(&status, 0);
    assert_eq!(finalizer["evidence"]["claim"], "db-example");
    assert_eq!(finalizer["evidence"]["controller"], "db-operator");
    assert_eq!(finalizer["evidence"]["leaseMissing"], "true");
    assert!(
        message(finalizer).starts_with(
            "finalizer db.example.com/cleanup is claimed by db-operator (FinalizerClaim db-example), but its Lease kube-system/db-operator does not exist"
        ),
        "{finalizer:#}"
    );

    // When the controller holds its Lease and renews it, then the deletion is Progressing.
    http.post(
        leases,
        &lease(
            "db-operator",
            "db-operator-7d9f",
            chrono::Duration::seconds(2),
            15,
        ),
    )
    .await
    .expect(201);
    let status = explain(&http, orders.clone()).await;
    assert_eq!(status["verdict"], "Progressing", "{status:#}");
    let finalizer = cause(&status, 0);
    assert_eq!(finalizer["state"], "Progressing");
    assert_eq!(finalizer["evidence"]["leaseLive"], "true");
    assert_eq!(finalizer["evidence"]["holder"], "db-operator-7d9f");
    assert_eq!(finalizer["evidence"]["forcePolicy"], "Never");
    assert_eq!(finalizer["evidence"]["cleansUp"], "the PostgreSQL database");
    assert!(
        message(finalizer).contains(
            "its Lease kube-system/db-operator is held by db-operator-7d9f and was renewed"
        ) && message(finalizer).contains(
            "the controller is alive and removes the finalizer once it has cleaned up (the PostgreSQL database)"
        ),
        "{finalizer:#}"
    );

    // When the controller stops renewing and the Lease expires, then it is Stuck, and the
    // answer says to start the controller.
    let expired = lease(
        "db-operator",
        "db-operator-7d9f",
        chrono::Duration::seconds(120),
        15,
    );
    http.merge_patch(
        &format!("{leases}/db-operator"),
        &json!({"spec": expired["spec"]}),
    )
    .await
    .expect(200);
    let status = explain(&http, orders.clone()).await;
    assert_eq!(status["verdict"], "Stuck");
    let finalizer = cause(&status, 0);
    assert_eq!(finalizer["evidence"]["leaseLive"], "false");
    assert!(
        message(finalizer).contains("but its Lease kube-system/db-operator expired")
            && message(finalizer).contains(
                "(last held by db-operator-7d9f): the controller is not running. Start db-operator"
            ),
        "{finalizer:#}"
    );

    // When the finalizer is removed, the object is Gone.
    http.merge_patch(
        &format!("{configmaps}/orders"),
        &json!({"metadata": {"finalizers": null}}),
    )
    .await
    .expect(200);
    assert_eq!(explain(&http, orders).await["verdict"], "Gone");
    server.shutdown().await;
}

#[tokio::test]
async fn foreground_deletion_is_followed_down_to_the_leaf_cause() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let configmaps = "/api/v1/namespaces/default/configmaps";

    // Given app ← mid ← leaf, each blocking its owner's deletion, and leaf held by an
    // unclaimed finalizer,
    let app = http
        .post(configmaps, &config_map("app", &[]))
        .await
        .expect(201);
    let owned_by = |owner: &Value, name: &str, finalizers: &[&str]| {
        let mut object = config_map(name, finalizers);
        object["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap",
            "name": owner["metadata"]["name"], "uid": uid(owner), "blockOwnerDeletion": true}]);
        object
    };
    let mid = http
        .post(configmaps, &owned_by(&app, "mid", &[]))
        .await
        .expect(201);
    http.post(configmaps, &owned_by(&mid, "leaf", &["example.com/hold"]))
        .await
        .expect(201);

    // when app is deleted in the foreground,
    http.delete_with(
        &format!("{configmaps}/app"),
        &json!({"propagationPolicy": "Foreground"}),
    )
    .await
    .expect(200);
    wait_for(&http, &format!("{configmaps}/leaf"), terminating).await;

    // then app is Stuck, and the chain leads from app through mid to leaf's finalizer.
    let status = explain_until(&http, target("v1", "ConfigMap", "default", "app"), |s| {
        s["causes"][0]["children"][0]["children"][0]["type"] == "Finalizer"
    })
    .await;
    assert_eq!(status["verdict"], "Stuck", "{status:#}");
    let top = cause(&status, 0);
    assert_eq!(top["type"], "ForegroundDependents");
    assert_eq!(top["object"]["name"], "app");
    assert_eq!(top["state"], "Stuck");
    assert_eq!(
        message(top),
        "foreground deletion waits for 1 dependent that blocks it (blockOwnerDeletion): ConfigMap default/mid"
    );
    let middle = &top["children"][0];
    assert_eq!(middle["type"], "ForegroundDependents");
    assert_eq!(middle["object"]["name"], "mid");
    let bottom = &middle["children"][0];
    assert_eq!(bottom["type"], "Finalizer");
    assert_eq!(bottom["object"]["name"], "leaf");
    assert_eq!(bottom["state"], "Stuck");
    assert!(message(bottom).starts_with("no controller claims finalizer example.com/hold"));
    assert_eq!(
        status["summary"],
        "ConfigMap default/app is stuck: ConfigMap default/leaf: no controller claims finalizer example.com/hold (owner unknown)"
    );

    // When leaf's finalizer goes, the whole chain goes.
    http.merge_patch(
        &format!("{configmaps}/leaf"),
        &json!({"metadata": {"finalizers": null}}),
    )
    .await
    .expect(200);
    explain_until(&http, target("v1", "ConfigMap", "default", "app"), |s| {
        s["verdict"] == "Gone"
    })
    .await;
    server.shutdown().await;
}

#[tokio::test]
async fn gc_finalizers_without_queued_work_are_stuck() {
    // Given a server whose garbage collector is off (the spec's "GC stopped" scenarios),
    let server = TestServer::start_with(|config| config.garbage_collector = false).await;
    let http = Http::new(&server);
    let configmaps = "/api/v1/namespaces/default/configmaps";
    http.post(configmaps, &config_map("owner", &[]))
        .await
        .expect(201);
    // when an object is deleted with the orphan policy,
    http.delete_with(
        &format!("{configmaps}/owner"),
        &json!({"propagationPolicy": "Orphan"}),
    )
    .await
    .expect(200);
    // then nothing will remove its orphan finalizer: Stuck.
    let status = explain(&http, target("v1", "ConfigMap", "default", "owner")).await;
    assert_eq!(status["verdict"], "Stuck");
    let orphan = cause(&status, 0);
    assert_eq!(orphan["type"], "OrphanFinalizer");
    assert_eq!(orphan["evidence"]["gcRunning"], "false");
    assert!(
        message(orphan).starts_with("the garbage collector is not running, so nobody will remove the ownerReferences of its dependents and then the orphan finalizer"),
        "{orphan:#}"
    );
    // And the same for foregroundDeletion.
    http.post(configmaps, &config_map("fg", &[]))
        .await
        .expect(201);
    http.delete_with(
        &format!("{configmaps}/fg"),
        &json!({"propagationPolicy": "Foreground"}),
    )
    .await
    .expect(200);
    let status = explain(&http, target("v1", "ConfigMap", "default", "fg")).await;
    assert_eq!(status["verdict"], "Stuck");
    assert_eq!(cause(&status, 0)["type"], "ForegroundFinalizer");
    server.shutdown().await;

    // Given a running collector, an orphan finalizer on a kind it does not track (a core
    // Event) has no work queued once the collector has caught up: Stuck.
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let events = "/api/v1/namespaces/default/events";
    http.post(
        events,
        &json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "e", "finalizers": ["orphan"]},
            "involvedObject": {"kind": "ConfigMap", "name": "x", "namespace": "default"},
            "reason": "Test", "message": "m"}),
    )
    .await
    .expect(201);
    http.delete(&format!("{events}/e")).await.expect(200);
    http.collector_caught_up("default").await;
    let status = explain(&http, target("v1", "Event", "default", "e")).await;
    assert_eq!(status["verdict"], "Stuck", "{status:#}");
    let orphan = cause(&status, 0);
    assert_eq!(orphan["type"], "OrphanFinalizer");
    assert_eq!(orphan["evidence"]["gcRunning"], "true");
    assert_eq!(orphan["evidence"]["gcWork"], "none");
    assert!(
        message(orphan).starts_with("the garbage collector has no work queued for it")
            && message(orphan).ends_with("The garbage collector does not track core Events at all: remove the finalizer yourself"),
        "{orphan:#}"
    );
    server.shutdown().await;
}

const WIDGETS_CRD: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

fn widget_crd(required: &[&str]) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "required": required, "properties": {
                        "size": {"type": "integer"}, "color": {"type": "string"}}}}}}}]}})
}

#[tokio::test]
async fn gc_finalizers_with_work_retrying_are_progressing() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let widgets = "/apis/example.com/v1/namespaces/default/widgets";
    let configmaps = "/api/v1/namespaces/default/configmaps";
    http.post(WIDGETS_CRD, &widget_crd(&[])).await.expect(201);
    wait_for(
        &http,
        &format!("{WIDGETS_CRD}/widgets.example.com"),
        |crd| {
            crd["status"]["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Established" && c["status"] == "True")
            })
        },
    )
    .await;
    wait_for(&http, widgets, |list| list["kind"] == "WidgetList").await;

    // Given an owner with a Widget dependent, and a Widget of its own, both written before
    // the CRD's schema made `color` required (so neither can be updated any more),
    let owner = http
        .post(configmaps, &config_map("owner", &[]))
        .await
        .expect(201);
    http.post(
        widgets,
        &json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "dependent", "ownerReferences": [{"apiVersion": "v1",
                "kind": "ConfigMap", "name": "owner", "uid": uid(&owner)}]},
            "spec": {"size": 1}}),
    )
    .await
    .expect(201);
    http.post(
        widgets,
        &json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "lonely"}, "spec": {"size": 2}}),
    )
    .await
    .expect(201);
    let mut tightened = widget_crd(&["color"]);
    tightened["metadata"]["resourceVersion"] = http
        .get(&format!("{WIDGETS_CRD}/widgets.example.com"))
        .await
        .expect(200)["metadata"]["resourceVersion"]
        .clone();
    http.put(&format!("{WIDGETS_CRD}/widgets.example.com"), &tightened)
        .await
        .expect(200);

    // when the owner is deleted with the orphan policy and the Widget in the foreground,
    http.delete_with(
        &format!("{configmaps}/owner"),
        &json!({"propagationPolicy": "Orphan"}),
    )
    .await
    .expect(200);
    let deleted = http
        .delete_with(
            &format!("{widgets}/lonely"),
            &json!({"propagationPolicy": "Foreground"}),
        )
        .await;
    assert_eq!(deleted.status, 200, "{}", deleted.body);

    // then both are Progressing: the collector is alive and retrying, and the answer carries
    // its last error and queue depth.
    for (object, type_) in [
        (
            target("v1", "ConfigMap", "default", "owner"),
            "OrphanFinalizer",
        ),
        (
            target("example.com/v1", "Widget", "default", "lonely"),
            "ForegroundFinalizer",
        ),
    ] {
        let status = explain_until(&http, object, |s| {
            s["causes"][0]["evidence"]["gcWork"] == "retrying"
        })
        .await;
        assert_eq!(status["verdict"], "Progressing", "{status:#}");
        let gc = cause(&status, 0);
        assert_eq!(gc["type"], type_);
        assert_eq!(gc["state"], "Progressing");
        assert!(gc["evidence"]["gcQueueDepth"].is_string());
        assert!(
            gc["evidence"]["gcLastError"]
                .as_str()
                .unwrap()
                .contains("spec.color: Required value"),
            "{gc:#}"
        );
        assert!(
            message(gc).starts_with("the garbage collector failed ")
                && message(gc).contains("and keeps retrying; last error:"),
            "{gc:#}"
        );
    }

    // When the schema is relaxed again, the collector's retries succeed and both go.
    let mut relaxed = widget_crd(&[]);
    relaxed["metadata"]["resourceVersion"] = http
        .get(&format!("{WIDGETS_CRD}/widgets.example.com"))
        .await
        .expect(200)["metadata"]["resourceVersion"]
        .clone();
    http.put(&format!("{WIDGETS_CRD}/widgets.example.com"), &relaxed)
        .await
        .expect(200);
    for object in [
        target("v1", "ConfigMap", "default", "owner"),
        target("example.com/v1", "Widget", "default", "lonely"),
    ] {
        within(Duration::from_secs(40), explain_until_gone(&http, object)).await;
    }
    server.shutdown().await;
}

/// The collector backs off up to 30 s between retries; waits that long, and no longer.
async fn explain_until_gone(http: &Http, object: Value) {
    loop {
        if explain(http, object.clone()).await["verdict"] == "Gone" {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A Node's heartbeat Lease as its agent writes it, renewed `age` ago.
fn node_lease(node: &str, age: chrono::Duration, resource_version: Option<&Value>) -> Value {
    let renewed = (chrono::Utc::now() - age).to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let mut lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": node, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": renewed}});
    if let Some(rv) = resource_version {
        lease["metadata"]["resourceVersion"] = rv.clone();
    }
    lease
}

#[tokio::test]
async fn a_pods_shutdown_is_explained_by_its_nodes_agent() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let pods = "/api/v1/namespaces/default/pods";
    let leases = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
    // Given a Node whose agent renews its Lease, and a Pod on it with a long grace period,
    http.post(
        "/api/v1/nodes",
        &json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}}),
    )
    .await
    .expect(201);
    let lease = http
        .post(
            leases,
            &node_lease("node-1", chrono::Duration::zero(), None),
        )
        .await
        .expect(201);
    http.post(
        pods,
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
            "spec": {"nodeName": "node-1", "terminationGracePeriodSeconds": 300,
                "containers": [{"name": "c", "image": "nginx"}]}}),
    )
    .await
    .expect(201);
    // when it is deleted,
    http.delete(&format!("{pods}/web")).await.expect(200);
    // then the agent is stopping it: Progressing, with the time left.
    let web = target("v1", "Pod", "default", "web");
    let status = explain(&http, web.clone()).await;
    assert_eq!(status["verdict"], "Progressing", "{status:#}");
    let grace = cause(&status, 0);
    assert_eq!(grace["type"], "PodGracePeriod");
    assert_eq!(grace["evidence"]["gracePeriodSeconds"], "300");
    assert_eq!(grace["evidence"]["agent"], "Live", "{grace:#}");
    assert!(
        message(grace).starts_with("the Pod's grace period of 300s runs until ")
            && message(grace)
                .contains("left): the agent on node node-1 is stopping its containers"),
        "{grace:#}"
    );

    // When the agent stops renewing (its Lease last renewed ten minutes ago), nothing will
    // stop the containers: Stuck, naming how long it has been gone and both remedies.
    http.put(
        &format!("{leases}/node-1"),
        &node_lease(
            "node-1",
            chrono::Duration::minutes(10),
            lease.pointer("/metadata/resourceVersion"),
        ),
    )
    .await
    .expect(200);
    let status = explain_until(&http, web.clone(), |s| s["verdict"] == "Stuck").await;
    let grace = cause(&status, 0);
    assert_eq!(grace["type"], "PodGracePeriod");
    assert_eq!(grace["state"], "Stuck");
    assert_eq!(grace["evidence"]["agent"], "Gone", "{grace:#}");
    assert_eq!(grace["evidence"]["agentGoneFor"], "10m0s", "{grace:#}");
    assert!(
        message(grace).starts_with("no agent runs node node-1: its Lease was last renewed 10m0s ago")
            && message(grace).contains("restore the node (start `finale node` on it)")
            && message(grace).contains(
                "`kubectl taint node node-1 node.kubernetes.io/out-of-service=nodeshutdown:NoExecute`"
            ),
        "{grace:#}"
    );

    // When the Node is tainted out of service, the Pod is force-deleted without its agent.
    http.merge_patch(
        "/api/v1/nodes/node-1",
        &json!({"spec": {"taints": [{"key": "node.kubernetes.io/out-of-service",
            "value": "nodeshutdown", "effect": "NoExecute"}]}}),
    )
    .await
    .expect(200);
    within(Duration::from_secs(20), explain_until_gone(&http, web)).await;
    server.shutdown().await;
}

#[tokio::test]
async fn namespace_content_is_counted_and_grouped_by_blocker() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    common::create_namespace(&server.client, "team").await;
    let configmaps = "/api/v1/namespaces/team/configmaps";
    let leases = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases";

    // Given a namespace with two objects held by an unclaimed finalizer, one held by a
    // claimed finalizer whose controller is alive, and one object nothing holds,
    http.post(
        leases,
        &lease(
            "db-operator",
            "db-operator-1",
            chrono::Duration::seconds(1),
            300,
        ),
    )
    .await
    .expect(201);
    http.post(
        CLAIMS,
        &claim(
            "db",
            "db.example.com/cleanup",
            json!([{"resource": "configmaps"}]),
            "db-operator",
        ),
    )
    .await
    .expect(201);
    for name in ["a", "b"] {
        http.post(configmaps, &config_map(name, &["example.com/hold"]))
            .await
            .expect(201);
    }
    http.post(configmaps, &config_map("db", &["db.example.com/cleanup"]))
        .await
        .expect(201);
    http.post(configmaps, &config_map("free", &[]))
        .await
        .expect(201);

    // when the namespace is deleted and its controller has deleted the content,
    http.delete("/api/v1/namespaces/team").await.expect(200);
    for name in ["a", "b", "db"] {
        wait_for(&http, &format!("{configmaps}/{name}"), terminating).await;
    }
    wait_for(&http, &format!("{configmaps}/free"), |o| o["code"] == 404).await;

    // then the namespace is Stuck on the unclaimed finalizer; the live one is Progressing.
    let team = target("v1", "Namespace", "", "team");
    let status = explain(&http, team.clone()).await;
    assert_eq!(status["verdict"], "Stuck", "{status:#}");
    let content = cause(&status, 0);
    assert_eq!(content["type"], "NamespaceContent");
    assert_eq!(
        message(content),
        "3 objects remain in the namespace (configmaps 3); it goes once they are gone"
    );
    assert_eq!(content["evidence"]["remaining"], "3");
    assert_eq!(content["evidence"]["remaining.configmaps"], "3");
    let groups = content["children"].as_array().unwrap();
    assert_eq!(groups.len(), 2, "{content:#}");
    assert_eq!(groups[0]["type"], "Finalizer");
    assert_eq!(groups[0]["state"], "Stuck");
    assert!(groups[0]["object"].is_null());
    assert_eq!(groups[0]["evidence"]["objects"], "2");
    assert_eq!(groups[0]["evidence"]["finalizer"], "example.com/hold");
    assert!(
        message(&groups[0])
            .starts_with("2 objects: no controller claims finalizer example.com/hold")
    );
    let members: Vec<&str> = groups[0]["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["object"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(members, ["a", "b"]);
    assert_eq!(groups[1]["state"], "Progressing");
    assert_eq!(groups[1]["evidence"]["claim"], "db");
    assert_eq!(groups[1]["evidence"]["objects"], "1");
    assert_eq!(groups[1]["children"][0]["object"]["name"], "db");
    assert_eq!(
        status["summary"],
        "Namespace team is stuck: ConfigMap team/a: no controller claims finalizer example.com/hold (owner unknown)"
    );

    // A node limit keeps the top of the tree and counts the rest.
    let mut limited = review_body(team.clone());
    limited["spec"]["maxNodes"] = json!(3);
    let body = http.post(REVIEWS, &limited).await.expect(201);
    let content = &body["status"]["causes"][0];
    let first_group = &content["children"][0];
    assert_eq!(first_group["children"][0]["type"], "More", "{body:#}");
    assert_eq!(first_group["children"][0]["message"], "…and 2 more");
    assert_eq!(first_group["children"][0]["state"], "Stuck");

    // When the unclaimed finalizers go, the namespace is Progressing on the live controller.
    for name in ["a", "b"] {
        http.merge_patch(
            &format!("{configmaps}/{name}"),
            &json!({"metadata": {"finalizers": null}}),
        )
        .await
        .expect(200);
    }
    let status = explain_until(&http, team, |s| s["verdict"] == "Progressing").await;
    assert!(
        status["summary"]
            .as_str()
            .unwrap()
            .starts_with("Namespace team is being deleted: ConfigMap team/db: finalizer db.example.com/cleanup is claimed by db-operator"),
        "{status:#}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn kube_rs_and_kubectl_read_reviews() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    http.post(
        "/api/v1/namespaces/default/configmaps",
        &config_map("held", &["example.com/hold"]),
    )
    .await
    .expect(201);
    http.delete("/api/v1/namespaces/default/configmaps/held")
        .await
        .expect(200);

    // Typed.
    let reviews: Api<DeletionReview> = Api::all(server.client.clone());
    let answered = within(
        WAIT,
        reviews.create(
            &PostParams::default(),
            &DeletionReview::new(DeletionReviewSpec {
                target: TargetRef {
                    api_version: "v1".into(),
                    kind: "ConfigMap".into(),
                    namespace: "default".into(),
                    name: "held".into(),
                    ..TargetRef::default()
                },
                ..DeletionReviewSpec::default()
            }),
        ),
    )
    .await
    .expect("create a DeletionReview with kube-rs");
    let status = answered.status.expect("a status");
    assert_eq!(status.verdict, Verdict::Stuck);
    assert_eq!(status.causes[0].type_, CauseType::Finalizer);
    assert_eq!(status.causes[0].state, CauseState::Stuck);

    // Dynamic.
    let resource = ApiResource {
        group: "deletion.finale.dev".into(),
        version: "v1alpha1".into(),
        api_version: "deletion.finale.dev/v1alpha1".into(),
        kind: "DeletionReview".into(),
        plural: "deletionreviews".into(),
    };
    let dynamic: Api<DynamicObject> = Api::all_with(server.client.clone(), &resource);
    let request: DynamicObject =
        serde_json::from_value(review_body(target("v1", "ConfigMap", "default", "held"))).unwrap();
    let answered = within(WAIT, dynamic.create(&PostParams::default(), &request))
        .await
        .expect("create a DeletionReview as a DynamicObject");
    assert_eq!(answered.data["status"]["verdict"], "Stuck");

    // kubectl create -f review.yaml -o yaml
    let review_file = server.dir.path().join("review.yaml");
    std::fs::write(
        &review_file,
        "apiVersion: deletion.finale.dev/v1alpha1\nkind: DeletionReview\nspec:\n  target:\n    apiVersion: v1\n    kind: ConfigMap\n    namespace: default\n    name: held\n",
    )
    .unwrap();
    let output = within(
        Duration::from_secs(30),
        tokio::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&server.running.kubeconfig)
            .args(["create", "-f"])
            .arg(&review_file)
            .args(["-o", "yaml"])
            .output(),
    )
    .await
    .expect("run kubectl");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "kubectl failed: {}{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let printed: Value = serde_saphyr_value(&stdout);
    assert_eq!(printed["kind"], "DeletionReview");
    assert_eq!(printed["status"]["verdict"], "Stuck");
    assert_eq!(printed["status"]["causes"][0]["type"], "Finalizer");
    assert!(
        printed["status"]["summary"]
            .as_str()
            .unwrap()
            .contains("no controller claims finalizer example.com/hold"),
        "{stdout}"
    );

    // kubectl get finalizerclaims prints the columns.
    http.post(
        CLAIMS,
        &claim(
            "hold",
            "example.com/hold",
            json!([{"resource": "configmaps"}]),
            "holder",
        ),
    )
    .await
    .expect(201);
    let output = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&server.running.kubeconfig)
        .args(["get", "finalizerclaims"])
        .output()
        .await
        .expect("run kubectl");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let header: Vec<&str> = stdout.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "FINALIZER", "LIVE", "HOLDER", "PENDING", "AGE"]
    );
    assert!(stdout.contains("example.com/hold"), "{stdout}");
    let wide = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&server.running.kubeconfig)
        .args(["get", "finalizerclaims", "-o", "wide"])
        .output()
        .await
        .expect("run kubectl");
    let wide = String::from_utf8_lossy(&wide.stdout);
    assert!(
        wide.contains("kube-system/holder"),
        "-o wide shows the Lease: {wide}"
    );
    server.shutdown().await;
}

/// YAML as kubectl prints it, read into JSON.
fn serde_saphyr_value(text: &str) -> Value {
    serde_saphyr::from_str(text).expect("kubectl prints YAML")
}

const UNCLAIMED_WARNING: &str = "299 - \"finalizer example.com/hold is not claimed by any controller; nothing may ever remove it\"";

/// Given no claim for `example.com/hold`, when a create, a patch or an update adds it, then
/// the response carries a `Warning` saying nothing may ever remove it; finalizers already
/// there, system finalizers, and finalizers a claim covers earn none.
#[tokio::test]
async fn adding_an_unclaimed_finalizer_warns() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    const CONFIG_MAPS: &str = "/api/v1/namespaces/default/configmaps";

    // Create with an unclaimed and a system finalizer: one warning, about the unclaimed one.
    let reply = http
        .post(
            CONFIG_MAPS,
            &config_map("held", &["example.com/hold", "kubernetes.io/pv-protection"]),
        )
        .await;
    assert_eq!(reply.warnings, [UNCLAIMED_WARNING]);
    reply.expect(201);
    // A write that keeps the finalizer adds nothing: no warning.
    let reply = http
        .merge_patch(
            &format!("{CONFIG_MAPS}/held"),
            &json!({"metadata": {"labels": {"a": "b"}}}),
        )
        .await;
    assert!(reply.warnings.is_empty(), "{:?}", reply.warnings);
    reply.expect(200);

    // A patch that adds it warns too.
    http.post(CONFIG_MAPS, &config_map("later", &[]))
        .await
        .expect(201);
    let reply = http
        .merge_patch(
            &format!("{CONFIG_MAPS}/later"),
            &json!({"metadata": {"finalizers": ["example.com/hold", "orphan"]}}),
        )
        .await;
    assert_eq!(reply.warnings, [UNCLAIMED_WARNING]);
    reply.expect(200);

    // kube-rs, on the raw response of a create.
    let body = serde_json::to_vec(&config_map("by-kube-rs", &["example.com/hold"])).unwrap();
    let request = http::Request::post(CONFIG_MAPS)
        .header("content-type", "application/json")
        .body(kube::client::Body::from(body))
        .unwrap();
    let response = within(WAIT, server.client.send(request))
        .await
        .expect("create through kube-rs");
    assert_eq!(response.status(), http::StatusCode::CREATED);
    let warnings: Vec<&str> = response
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(warnings, [UNCLAIMED_WARNING]);

    // kubectl prints it on stderr.
    let manifest = server.dir.path().join("held.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: by-kubectl\n  namespace: default\n  finalizers: [example.com/hold]\n",
    )
    .unwrap();
    let output = within(
        Duration::from_secs(30),
        tokio::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&server.running.kubeconfig)
            .args(["create", "-f"])
            .arg(&manifest)
            .output(),
    )
    .await
    .expect("run kubectl");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "kubectl failed: {stderr}");
    assert!(
        stderr.contains(
            "Warning: finalizer example.com/hold is not claimed by any controller; nothing may ever remove it"
        ),
        "{stderr}"
    );

    // Once a claim covers it (a domain prefix here), adding it is quiet.
    http.post(
        CLAIMS,
        &claim(
            "example",
            "example.com/",
            json!([{"resource": "configmaps"}]),
            "holder",
        ),
    )
    .await
    .expect(201);
    let reply = http
        .post(CONFIG_MAPS, &config_map("claimed", &["example.com/hold"]))
        .await;
    assert!(reply.warnings.is_empty(), "{:?}", reply.warnings);
    reply.expect(201);
    // A claim for other resources does not cover Secrets.
    let reply = http
        .post(
            "/api/v1/namespaces/default/secrets",
            &json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "s", "finalizers": ["example.com/hold"]}}),
        )
        .await;
    assert_eq!(reply.warnings, [UNCLAIMED_WARNING]);
    reply.expect(201);
    server.shutdown().await;
}

/// A live controller that keeps failing says why in its object's `status.deletion` (the
/// operator toolkit's convention); explain carries that as the finalizer's evidence, so
/// "Progressing" comes with the reason it has not finished yet.
#[tokio::test]
async fn a_live_controllers_reported_error_is_evidence() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let mut crd = widget_crd(&[]);
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"] =
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    http.post(WIDGETS_CRD, &crd).await.expect(201);
    wait_for(
        &http,
        &format!("{WIDGETS_CRD}/widgets.example.com"),
        |crd| {
            crd["status"]["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Established" && c["status"] == "True")
            })
        },
    )
    .await;
    let widgets = "/apis/example.com/v1/namespaces/default/widgets";
    // Given a Widget whose controller reports a failing cleanup step,
    http.post(
        widgets,
        &json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "finalizers": ["example.com/cleanup", "example.com/other"]},
            "spec": {},
            "status": {"deletion": {"step": "example.com/cleanup", "attempts": 3,
                "lastError": "connection refused", "nextRetry": "2026-11-24T12:00:00Z"}}}),
    )
    .await
    .expect(201);
    // when it is deleted and explained,
    http.delete(&format!("{widgets}/w")).await.expect(200);
    let status = explain(&http, target("example.com/v1", "Widget", "default", "w")).await;
    // then the step's finalizer carries the report, and only that one.
    let causes = status["causes"].as_array().expect("causes");
    let of = |finalizer: &str| {
        causes
            .iter()
            .find(|c| c["evidence"]["finalizer"] == finalizer)
            .unwrap_or_else(|| panic!("no cause for {finalizer}: {status:#}"))
    };
    let failing = &of("example.com/cleanup")["evidence"];
    assert_eq!(failing["lastError"], "connection refused", "{status:#}");
    assert_eq!(failing["attempts"], "3");
    assert_eq!(failing["nextRetry"], "2026-11-24T12:00:00Z");
    assert!(of("example.com/other")["evidence"]["lastError"].is_null());
    server.shutdown().await;
}
