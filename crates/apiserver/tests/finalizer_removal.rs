//! `FinalizerRemoval` (issue 11), against an in-process server over HTTPS: a finalizer is
//! forced off only with evidence — refused (409, with the evidence) while the claiming
//! controller's Lease is live or its claim forbids it, accepted once the Lease expired —
//! and the record it leaves is complete, single and immutable.

mod common;

use std::time::Duration;

use common::raw::{Http, uid};
use common::{TestServer, kubectl};
use finale_apiserver::insight::api::ForcePolicy;
use finale_apiserver::insight::removal::{FinalizerRemoval, RemovalPhase};
use serde_json::{Value, json};

const REMOVALS: &str = "/apis/deletion.finale.dev/v1alpha1/finalizerremovals";
const CLAIMS: &str = "/apis/deletion.finale.dev/v1alpha1/finalizerclaims";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases";
const CONFIG_MAPS: &str = "/api/v1/namespaces/default/configmaps";
const CLAIMED: &str = "db.example.com/cleanup";
const UNCLAIMED: &str = "keep.example.com/audit";

/// A Lease held by `holder`, renewed `age` ago, for 15 seconds.
fn lease(holder: &str, age: chrono::Duration) -> Value {
    let renewed = chrono::Utc::now() - age;
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "db-operator", "namespace": "kube-system"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
            "renewTime": renewed.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()}})
}

fn claim(force_policy: &str) -> Value {
    json!({"apiVersion": "deletion.finale.dev/v1alpha1", "kind": "FinalizerClaim",
        "metadata": {"name": "db-example"},
        "spec": {"finalizer": CLAIMED, "resources": [{"group": "", "resource": "configmaps"}],
            "controller": "db-operator",
            "lease": {"namespace": "kube-system", "name": "db-operator"},
            "cleansUp": ["the PostgreSQL database", "its role"],
            "forcePolicy": force_policy}})
}

/// Creates ConfigMap default/`name` with both finalizers and deletes it: it stays
/// Terminating. Returns it as the DELETE left it.
async fn stuck_config_map(http: &Http, name: &str) -> Value {
    http.post(
        CONFIG_MAPS,
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "finalizers": [CLAIMED, UNCLAIMED]}}),
    )
    .await
    .expect(201);
    http.delete(&format!("{CONFIG_MAPS}/{name}"))
        .await
        .expect(200);
    let object = http.get(&format!("{CONFIG_MAPS}/{name}")).await.expect(200);
    assert!(
        object["metadata"]["deletionTimestamp"].is_string(),
        "precondition: the ConfigMap is terminating: {object}"
    );
    object
}

fn removal(name: &str, target: &Value, finalizer: &str) -> Value {
    json!({"apiVersion": "deletion.finale.dev/v1alpha1", "kind": "FinalizerRemoval",
        "metadata": {"name": name},
        "spec": {
            "target": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default",
                "name": target["metadata"]["name"], "uid": uid(target)},
            "resourceVersion": target["metadata"]["resourceVersion"],
            "finalizer": finalizer,
            "reason": "the database host was decommissioned; the database is gone with it"}})
}

async fn finalizers(http: &Http, name: &str) -> Value {
    http.get(&format!("{CONFIG_MAPS}/{name}")).await.expect(200)["metadata"]["finalizers"].clone()
}

async fn removal_names(http: &Http) -> Vec<String> {
    let list = http.get(REMOVALS).await.expect(200);
    list["items"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|item| item["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect()
}

fn message(status: &Value) -> &str {
    status["message"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn refused_while_the_lease_is_live_then_removed_with_a_record_once_it_expired() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    http.post(CLAIMS, &claim("WhenOwnerDead")).await.expect(201);
    http.post(
        LEASES,
        &lease("db-operator-7d9f", chrono::Duration::seconds(3)),
    )
    .await
    .expect(201);
    let orders = stuck_config_map(&http, "orders").await;

    // Given the claim's Lease renewed 3s ago: refused, with the evidence.
    let refused = http
        .post(REMOVALS, &removal("force-orders", &orders, CLAIMED))
        .await
        .expect_failure(409, "Conflict");
    let text = message(&refused);
    assert!(
        text.contains("db-operator-7d9f holds Lease kube-system/db-operator, renewed")
            && text.contains("it is alive and may still clean up. Stop it or wait")
            && text.contains("FinalizerClaim db-example"),
        "{refused:#}"
    );
    assert_eq!(
        finalizers(&http, "orders").await,
        json!([CLAIMED, UNCLAIMED])
    );
    assert!(removal_names(&http).await.is_empty(), "nothing recorded");

    // When the controller stops and its Lease expires (renewed a minute ago, 15s duration),
    // then the same request is accepted. The Lease write does not touch the target, so the
    // resourceVersion the requester saw still holds.
    let mut expired = http.get(&format!("{LEASES}/db-operator")).await.expect(200);
    expired["spec"] = lease("db-operator-7d9f", chrono::Duration::seconds(60))["spec"].clone();
    http.put(&format!("{LEASES}/db-operator"), &expired)
        .await
        .expect(200);
    let record = http
        .post(REMOVALS, &removal("force-orders", &orders, CLAIMED))
        .await
        .expect(201);

    // The finalizer is gone from the target, the other one is kept.
    assert_eq!(finalizers(&http, "orders").await, json!([UNCLAIMED]));
    // Exactly one record, with the evidence as it stood.
    assert_eq!(removal_names(&http).await, ["force-orders"]);
    let stored = http
        .get(&format!("{REMOVALS}/force-orders"))
        .await
        .expect(200);
    assert_eq!(
        stored["status"], record["status"],
        "the answer is the record"
    );
    let status = &stored["status"];
    assert_eq!(status["phase"], "Removed", "{status:#}");
    assert!(status["removedAt"].is_string(), "{status:#}");
    assert_eq!(status["removedBy"], "admin");
    let evidence = &status["evidence"];
    assert_eq!(evidence["ownerUnknown"], false);
    assert_eq!(evidence["claim"], "db-example");
    assert_eq!(evidence["controller"], "db-operator");
    assert_eq!(evidence["lease"], "kube-system/db-operator");
    assert_eq!(evidence["leaseState"], "Expired");
    assert_eq!(evidence["leaseHolder"], "db-operator-7d9f");
    assert!(evidence["renewTime"].is_string(), "{evidence:#}");
    assert_eq!(evidence["live"], false);
    assert_eq!(evidence["forcePolicy"], "WhenOwnerDead");
    assert_eq!(
        status["orphanedResources"],
        json!(["the PostgreSQL database", "its role"])
    );
    assert_eq!(
        stored["spec"]["reason"],
        "the database host was decommissioned; the database is gone with it"
    );

    // kube-rs reads it through the typed API.
    let typed = kube::Api::<FinalizerRemoval>::all(server.client.clone())
        .get("force-orders")
        .await
        .expect("get the FinalizerRemoval with kube-rs");
    let typed_status = typed.status.expect("a status");
    assert_eq!(typed_status.phase, RemovalPhase::Removed);
    assert_eq!(
        typed_status.evidence.force_policy,
        Some(ForcePolicy::WhenOwnerDead)
    );

    // A Warning event on the target says what happened.
    let events = http
        .get("/api/v1/namespaces/default/events")
        .await
        .expect(200);
    let forced: Vec<&Value> = events["items"]
        .as_array()
        .expect("a list")
        .iter()
        .filter(|e| e["reason"] == "FinalizerForciblyRemoved")
        .collect();
    assert_eq!(forced.len(), 1, "{events:#}");
    assert_eq!(forced[0]["type"], "Warning");
    assert_eq!(forced[0]["involvedObject"]["uid"], uid(&orders).as_str());
    assert!(
        message(forced[0]).contains(&format!("finalizer {CLAIMED} (claimed by db-operator)")),
        "{:#}",
        forced[0]
    );

    // kubectl get columns: TARGET, FINALIZER, REMOVED-BY, AGE.
    let table = http
        .client
        .get(format!("{}{REMOVALS}", http.base))
        .bearer_auth(&http.token)
        .header(
            "Accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .send()
        .await
        .expect("GET the table")
        .json::<Value>()
        .await
        .expect("a JSON table");
    let columns: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .expect("columns")
        .iter()
        .map(|c| c["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        columns,
        ["Name", "Target", "Finalizer", "Removed-By", "Age"]
    );
    let cells = &table["rows"][0]["cells"];
    assert_eq!(cells[1], "ConfigMap/default/orders");
    assert_eq!(cells[2], CLAIMED);
    assert_eq!(cells[3], "admin");
    server.shutdown().await;
}

#[tokio::test]
async fn refused_when_the_claims_force_policy_is_never_even_with_the_owner_dead() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    http.post(CLAIMS, &claim("Never")).await.expect(201);
    http.post(
        LEASES,
        &lease("db-operator-7d9f", chrono::Duration::seconds(600)),
    )
    .await
    .expect(201);
    let orders = stuck_config_map(&http, "orders").await;
    let refused = http
        .post(REMOVALS, &removal("force-orders", &orders, CLAIMED))
        .await
        .expect_failure(409, "Conflict");
    assert!(
        message(&refused).contains("has forcePolicy Never: its policy forbids removing finalizer")
            && message(&refused).contains("Lease kube-system/db-operator expired"),
        "{refused:#}"
    );
    assert_eq!(
        finalizers(&http, "orders").await,
        json!([CLAIMED, UNCLAIMED])
    );
    assert!(removal_names(&http).await.is_empty(), "nothing recorded");
    server.shutdown().await;
}

#[tokio::test]
async fn an_unclaimed_finalizer_is_removed_and_recorded_as_owner_unknown() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let orders = stuck_config_map(&http, "orders").await;
    // dryRun=All: every check runs, nothing is written.
    let preview = http
        .post(
            &format!("{REMOVALS}?dryRun=All"),
            &removal("force-audit", &orders, UNCLAIMED),
        )
        .await
        .expect(201);
    assert_eq!(preview["status"]["phase"], "Pending", "{preview:#}");
    assert_eq!(preview["status"]["evidence"]["ownerUnknown"], true);
    assert!(removal_names(&http).await.is_empty(), "nothing recorded");
    assert_eq!(
        finalizers(&http, "orders").await,
        json!([CLAIMED, UNCLAIMED])
    );

    let record = http
        .post(REMOVALS, &removal("force-audit", &orders, UNCLAIMED))
        .await
        .expect(201);
    assert_eq!(record["status"]["phase"], "Removed");
    assert_eq!(record["status"]["evidence"]["ownerUnknown"], true);
    assert!(
        message(&record["status"]["evidence"]).contains("the owner is unknown"),
        "{record:#}"
    );
    assert_eq!(record["status"]["orphanedResources"], json!([]));
    assert_eq!(finalizers(&http, "orders").await, json!([CLAIMED]));

    // kubectl: create from a file, the table, and no delete.
    let file = server.dir.path().join("removal.yaml");
    let document = format!(
        "apiVersion: deletion.finale.dev/v1alpha1\nkind: FinalizerRemoval\nmetadata:\n  name: force-cleanup\nspec:\n  target:\n    apiVersion: v1\n    resource: configmaps\n    namespace: default\n    name: orders\n    uid: {}\n  resourceVersion: \"{}\"\n  finalizer: {CLAIMED}\n  reason: decommissioned\n",
        uid(&orders),
        http.get(&format!("{CONFIG_MAPS}/orders")).await.expect(200)["metadata"]["resourceVersion"]
            .as_str()
            .expect("a resourceVersion")
    );
    std::fs::write(&file, document).expect("write removal.yaml");
    let file = file.to_string_lossy().into_owned();
    let (created, stdout, stderr) = kubectl(&server, &["create", "-f", &file]).await;
    assert!(created, "kubectl create failed: {stderr}{stdout}");
    // That was the last finalizer: the ConfigMap is gone.
    http.get(&format!("{CONFIG_MAPS}/orders"))
        .await
        .expect_failure(404, "NotFound");
    let (listed, stdout, stderr) = kubectl(&server, &["get", "finalizerremovals"]).await;
    assert!(listed, "kubectl get failed: {stderr}");
    let header: Vec<&str> = stdout
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(header, ["NAME", "TARGET", "FINALIZER", "REMOVED-BY", "AGE"]);
    assert!(
        stdout.lines().any(|line| line.starts_with("force-cleanup")
            && line.contains("configmaps/default/orders")
            && line.contains(CLAIMED)),
        "{stdout}"
    );
    let (deleted, _, stderr) =
        kubectl(&server, &["delete", "finalizerremoval", "force-audit"]).await;
    assert!(!deleted, "kubectl delete must fail");
    assert!(stderr.contains("immutable"), "{stderr}");
    server.shutdown().await;
}

#[tokio::test]
async fn a_changed_target_is_refused_and_nothing_is_removed_or_stored() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let seen = stuck_config_map(&http, "orders").await;
    // Someone changes the target after the requester looked at it.
    http.merge_patch(
        &format!("{CONFIG_MAPS}/orders"),
        &json!({"metadata": {"labels": {"touched": "yes"}}}),
    )
    .await
    .expect(200);
    let refused = http
        .post(REMOVALS, &removal("force-audit", &seen, UNCLAIMED))
        .await
        .expect_failure(409, "Conflict");
    assert!(
        message(&refused).contains("has changed since you looked"),
        "{refused:#}"
    );
    assert_eq!(
        finalizers(&http, "orders").await,
        json!([CLAIMED, UNCLAIMED])
    );
    assert!(removal_names(&http).await.is_empty(), "nothing recorded");
    server.shutdown().await;
}

#[tokio::test]
async fn a_target_that_is_not_being_deleted_is_refused() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let live = http
        .post(
            CONFIG_MAPS,
            &json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "orders", "finalizers": [UNCLAIMED]}}),
        )
        .await
        .expect(201);
    let refused = http
        .post(REMOVALS, &removal("force-audit", &live, UNCLAIMED))
        .await
        .expect_failure(409, "Conflict");
    assert!(
        message(&refused).contains("ConfigMap default/orders is not being deleted"),
        "{refused:#}"
    );
    assert_eq!(finalizers(&http, "orders").await, json!([UNCLAIMED]));
    assert!(removal_names(&http).await.is_empty(), "nothing recorded");
    server.shutdown().await;
}

#[tokio::test]
async fn records_are_immutable_and_bad_requests_are_invalid() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let orders = stuck_config_map(&http, "orders").await;

    // Bad input: 422 naming the field, nothing stored.
    let mut no_reason = removal("force-audit", &orders, UNCLAIMED);
    no_reason["spec"]["reason"] = json!("   ");
    let invalid = http
        .post(REMOVALS, &no_reason)
        .await
        .expect_failure(422, "Invalid");
    assert_eq!(invalid["details"]["causes"][0]["field"], "spec.reason");
    let mut no_version = removal("force-audit", &orders, UNCLAIMED);
    no_version["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("resourceVersion");
    let invalid = http
        .post(REMOVALS, &no_version)
        .await
        .expect_failure(422, "Invalid");
    assert_eq!(
        invalid["details"]["causes"][0]["field"],
        "spec.resourceVersion"
    );
    let mut owned = removal("force-audit", &orders, UNCLAIMED);
    owned["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap",
        "name": "orders", "uid": uid(&orders)}]);
    let invalid = http
        .post(REMOVALS, &owned)
        .await
        .expect_failure(422, "Invalid");
    assert_eq!(
        invalid["details"]["causes"][0]["field"],
        "metadata.ownerReferences"
    );
    let system = http
        .post(REMOVALS, &removal("force-gc", &orders, "orphan"))
        .await
        .expect_failure(422, "Invalid");
    assert!(message(&system).contains("system finalizer"), "{system:#}");
    assert!(removal_names(&http).await.is_empty(), "nothing recorded");

    // A record, then every way of changing or deleting it: 405, and it stays as it was.
    let record = http
        .post(REMOVALS, &removal("force-audit", &orders, UNCLAIMED))
        .await
        .expect(201);
    let path = format!("{REMOVALS}/force-audit");
    let mut edited = record.clone();
    edited["spec"]["reason"] = json!("rewritten history");
    http.put(&path, &edited)
        .await
        .expect_failure(405, "MethodNotAllowed");
    http.merge_patch(&path, &json!({"spec": {"reason": "rewritten history"}}))
        .await
        .expect_failure(405, "MethodNotAllowed");
    http.merge_patch(&path, &json!({"status": {"phase": "Pending"}}))
        .await
        .expect_failure(405, "MethodNotAllowed");
    let refused = http
        .delete(&path)
        .await
        .expect_failure(405, "MethodNotAllowed");
    assert!(message(&refused).contains("immutable"), "{refused:#}");
    http.delete(REMOVALS)
        .await
        .expect_failure(405, "MethodNotAllowed");
    let kept = http.get(&path).await.expect(200);
    assert_eq!(kept, record);
    server.shutdown().await;
}

const WIDGETS_CRD: &str =
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com";
const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";

fn widget_crd(required: &[&str]) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "required": required, "properties": {
                        "size": {"type": "integer"}}}}}}}]}})
}

/// Polls POST `path` with `body` until it answers `status`, within [`common::WAIT`].
async fn until_post_answers(http: &Http, path: &str, body: &Value, status: u16) {
    let deadline = tokio::time::Instant::now() + common::WAIT;
    loop {
        let reply = http.post(path, body).await;
        if reply.status == status {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "POST {path} never answered {status}; last: {} {}",
            reply.status,
            reply.body
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The record is written before the target; when the target write then fails, the pending
/// record is deleted again. A target write that fails after every check passed: a custom
/// resource stored under a looser schema, which the tightened schema refuses on any update
/// (there is no validation ratcheting yet; the test asserts that precondition).
#[tokio::test]
async fn a_failed_target_write_removes_nothing_and_leaves_no_record() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    http.post(crds, &widget_crd(&[])).await.expect(201);
    let widget = json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w", "finalizers": [UNCLAIMED]}, "spec": {}});
    until_post_answers(&http, WIDGETS, &widget, 201).await;
    http.delete(&format!("{WIDGETS}/w")).await.expect(200);
    let stuck = http.get(&format!("{WIDGETS}/w")).await.expect(200);
    assert!(
        stuck["metadata"]["deletionTimestamp"].is_string(),
        "{stuck}"
    );

    // The schema now requires spec.size; a new widget without it is refused once it applies.
    let mut crd = http.get(WIDGETS_CRD).await.expect(200);
    crd["spec"]["versions"] = widget_crd(&["size"])["spec"]["versions"].clone();
    http.put(WIDGETS_CRD, &crd).await.expect(200);
    let mut sentinel = widget.clone();
    sentinel["metadata"] = json!({"name": "sentinel"});
    until_post_answers(&http, WIDGETS, &sentinel, 422).await;
    // Precondition: any update of the stuck widget is refused now.
    http.merge_patch(
        &format!("{WIDGETS}/w"),
        &json!({"metadata": {"labels": {"a": "b"}}}),
    )
    .await
    .expect_failure(422, "Invalid");

    let mut request = json!({"apiVersion": "deletion.finale.dev/v1alpha1", "kind": "FinalizerRemoval",
        "metadata": {"name": "force-widget"},
        "spec": {"target": {"apiVersion": "example.com/v1", "kind": "Widget",
                "namespace": "default", "name": "w", "uid": uid(&stuck)},
            "finalizer": UNCLAIMED, "reason": "test"}});
    request["spec"]["resourceVersion"] = stuck["metadata"]["resourceVersion"].clone();
    let refused = http
        .post(REMOVALS, &request)
        .await
        .expect_failure(422, "Invalid");
    assert!(
        message(&refused).contains("Nothing was removed and nothing was recorded"),
        "{refused:#}"
    );
    let still = http.get(&format!("{WIDGETS}/w")).await.expect(200);
    assert_eq!(still["metadata"]["finalizers"], json!([UNCLAIMED]));
    assert_eq!(
        still["metadata"]["resourceVersion"],
        stuck["metadata"]["resourceVersion"]
    );
    assert!(removal_names(&http).await.is_empty(), "nothing recorded");
    server.shutdown().await;
}
