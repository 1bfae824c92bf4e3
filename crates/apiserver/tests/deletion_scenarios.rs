//! Conformance scenarios of `shared/spec/deletion-semantics.md` §13 that hold without a garbage
//! collector, plus the watch-event rules W1–W3, against an in-process server over raw HTTPS:
//! exact status codes, exact response bodies, `Warning` headers, and the watch events each
//! request produces (or, for no-ops, does not produce).
//!
//! Each test is named after its §13 scenario (`s01_…`); the rule ids of §2–§8 are cited where
//! a test checks them. Everything is bounded: waits for events are at most [`WAIT`], and "no
//! event" means the next event is that of a sentinel written afterwards
//! ([`common::raw::Watch::expect_quiet`]): watches are served in revision order.
//!
//! Not here: 17–20, 23, 33–36 and the GC halves of 22 (they need the garbage collector, which
//! Finale does not have yet); 27's custom-resource half (no CRDs yet); 37–42 and 47 are in
//! `namespace_lifecycle.rs`, 48 in the `finale` package's `kubectl_deletion.rs`.

mod common;

use chrono::{DateTime, Utc};
use common::TestServer;
use common::raw::{Http, rv, uid};
use serde_json::{Value, json};

/// The namespace every scenario runs in.
const NS: &str = "t";
const CM: &str = "/api/v1/namespaces/t/configmaps";
const PODS: &str = "/api/v1/namespaces/t/pods";
const JOBS: &str = "/apis/batch/v1/namespaces/t/jobs";

/// P8, word for word, as the header value upstream sends.
const JOB_WARNING: &str = "299 - \"child pods are preserved by default when jobs are deleted; set propagationPolicy=Background to remove them or set propagationPolicy=Orphan to suppress this warning\"";

// ----- fixtures ----------------------------------------------------------------------------

/// A server with namespace `t`, and a raw client for it.
async fn setup() -> (TestServer, Http) {
    setup_with(true).await
}

/// The same with the garbage collector stopped: the API-side half of propagation alone.
async fn setup_without_gc() -> (TestServer, Http) {
    setup_with(false).await
}

async fn setup_with(garbage_collector: bool) -> (TestServer, Http) {
    // The API-side rules alone: a Job's Pods are placed by hand and its watch events are
    // asserted one by one, so no Job controller runs.
    let server = TestServer::start_with(|config| {
        config.garbage_collector = garbage_collector;
        config.job_controller = false;
    })
    .await;
    let http = Http::new(&server);
    http.post(
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
    )
    .await
    .expect(201);
    (server, http)
}

/// The object without `metadata.resourceVersion`.
fn without_rv(object: &Value) -> Value {
    let mut copy = object.clone();
    if let Some(metadata) = copy["metadata"].as_object_mut() {
        metadata.remove("resourceVersion");
    }
    copy
}

/// The object without the fields a DELETE may change (rv, deletion fields, finalizers,
/// generation), to check that nothing else moved.
fn without_deletion_fields(object: &Value) -> Value {
    let mut copy = without_rv(object);
    if let Some(metadata) = copy["metadata"].as_object_mut() {
        for field in [
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "finalizers",
            "generation",
        ] {
            metadata.remove(field);
        }
    }
    copy
}

fn finalizers(object: &Value) -> Vec<String> {
    object["metadata"]["finalizers"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|f| f.as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn time(object: &Value, field: &str) -> DateTime<Utc> {
    let text = object["metadata"][field]
        .as_str()
        .unwrap_or_else(|| panic!("no metadata.{field} in {object}"));
    DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|e| panic!("metadata.{field} {text:?} is not RFC 3339: {e}"))
        .with_timezone(&Utc)
}

/// Asserts `metadata.<field>` is within a few seconds of `now + offset` (second precision).
fn assert_time_near(object: &Value, field: &str, offset_seconds: i64) {
    let expected = Utc::now() + chrono::Duration::seconds(offset_seconds);
    let actual = time(object, field);
    let skew = (actual - expected).num_seconds().abs();
    assert!(
        skew <= 5,
        "metadata.{field} is {actual}, expected about {expected}: {object}"
    );
}

fn cm_path(name: &str) -> String {
    format!("{CM}/{name}")
}

fn pod_path(name: &str) -> String {
    format!("{PODS}/{name}")
}

/// Creates ConfigMap `name` in `t` with these finalizers and labels.
async fn create_cm(http: &Http, name: &str, finalizers: &[&str], labels: Value) -> Value {
    let mut metadata = json!({"name": name, "labels": labels});
    if !finalizers.is_empty() {
        metadata["finalizers"] = json!(finalizers);
    }
    http.post(
        CM,
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {"k": name}}),
    )
    .await
    .expect(201)
}

/// Scenario 3's state: ConfigMap `name` with `finalizers`, made terminating by a DELETE.
async fn terminating_cm(http: &Http, name: &str, finalizers: &[&str]) -> Value {
    create_cm(http, name, finalizers, json!({})).await;
    let body = http.delete(&cm_path(name)).await.expect(200);
    assert!(body["metadata"]["deletionTimestamp"].is_string(), "{body}");
    body
}

/// D12 / scenario 1: the success Status of a ConfigMap that left storage.
fn cm_deleted_status(name: &str, uid: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": name, "kind": "configmaps", "uid": uid},
    })
}

/// Creates Pod `name` in `t` with `terminationGracePeriodSeconds: 30`, bound to `node`
/// (unscheduled when empty, and left so), then sets `status.phase` through `/status` (when given).
async fn create_pod(
    http: &Http,
    name: &str,
    node: &str,
    phase: Option<&str>,
    finalizers: &[&str],
) -> Value {
    let mut metadata = json!({"name": name});
    if !finalizers.is_empty() {
        metadata["finalizers"] = json!(finalizers);
    }
    let mut spec = json!({
        "terminationGracePeriodSeconds": 30,
        "containers": [{"name": "c", "image": "busybox:1.36"}],
    });
    if node.is_empty() {
        // Left unscheduled: a scheduler that does not run, so the in-process one never
        // writes to it behind the scenario's back.
        spec["schedulerName"] = json!("unscheduled");
    } else {
        spec["nodeName"] = json!(node);
    }
    let mut pod = http
        .post(
            PODS,
            &json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}),
        )
        .await
        .expect(201);
    if let Some(phase) = phase {
        pod["status"]["phase"] = json!(phase);
        pod = http
            .put(&format!("{}/status", pod_path(name)), &pod)
            .await
            .expect(200);
        assert_eq!(pod["status"]["phase"], phase, "{pod}");
    }
    pod
}

/// A scheduled pod the (absent) kubelet would report as Running.
async fn running_pod(http: &Http, name: &str, finalizers: &[&str]) -> Value {
    create_pod(http, name, "node-1", Some("Running"), finalizers).await
}

/// The single field error cause of a 422, as (reason, field).
fn only_cause(status: &Value) -> (String, String) {
    let causes = status["details"]["causes"]
        .as_array()
        .unwrap_or_else(|| panic!("no causes: {status}"));
    assert_eq!(causes.len(), 1, "{status}");
    (
        causes[0]["reason"].as_str().unwrap_or_default().to_string(),
        causes[0]["field"].as_str().unwrap_or_default().to_string(),
    )
}

// ----- §13 scenarios -----------------------------------------------------------------------

/// 1. D5/D12: no finalizers → removed at once; the body is a success Status naming the plural
/// resource, without `code`; one DELETED event carrying the last state at a newer RV (W2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s01_plain_delete() {
    let (server, http) = setup().await;
    let created = create_cm(&http, "a", &[], json!({})).await;
    let mut watch = http.watch(CM, rv(&created)).await;

    let body = http.delete(&cm_path("a")).await.expect(200);
    assert_eq!(body, cm_deleted_status("a", &uid(&created)));

    let deleted = watch.expect("DELETED", "a").await;
    assert!(rv(&deleted) > rv(&created), "{deleted}");
    assert_eq!(without_rv(&deleted), without_rv(&created));
    watch.expect_quiet(&http).await;
    http.get(&cm_path("a"))
        .await
        .expect_failure(404, "NotFound");
    server.shutdown().await;
}

/// 2. D1: the exact NotFound Status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s02_not_found() {
    let (server, http) = setup().await;
    let body = http.delete(&cm_path("nope")).await.expect(404);
    assert_eq!(
        body,
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "configmaps \"nope\" not found",
            "reason": "NotFound",
            "details": {"name": "nope", "kind": "configmaps"},
            "code": 404,
        })
    );
    server.shutdown().await;
}

/// 3. D6/D7/G1: a finalizer keeps the object: it becomes terminating now with grace 0
/// (gracePeriodSeconds is ignored for a non-graceful kind); the body is the updated object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s03_finalizer_blocks() {
    let (server, http) = setup().await;
    let created = create_cm(&http, "f", &["example.com/x"], json!({})).await;
    let mut watch = http.watch(CM, rv(&created)).await;

    let body = http
        .delete_with(&cm_path("f"), &json!({"gracePeriodSeconds": 60}))
        .await
        .expect(200);
    assert_eq!(body["kind"], "ConfigMap", "{body}");
    assert_time_near(&body, "deletionTimestamp", 0);
    assert_eq!(body["metadata"]["deletionGracePeriodSeconds"], 0, "{body}");
    assert_eq!(finalizers(&body), ["example.com/x"]);
    assert!(rv(&body) > rv(&created), "{body}");
    // D14: ConfigMaps have no generation, so none appears.
    assert!(body["metadata"].get("generation").is_none(), "{body}");
    assert_eq!(
        without_deletion_fields(&body),
        without_deletion_fields(&created)
    );

    let modified = watch.expect("MODIFIED", "f").await;
    assert_eq!(modified, body);
    watch.expect_quiet(&http).await;
    assert_eq!(http.get(&cm_path("f")).await.expect(200), body);
    server.shutdown().await;
}

/// 4. D4 / summary table: a repeated DELETE changes nothing: same object, same RV, no event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s04_repeat_delete_is_a_noop() {
    let (server, http) = setup().await;
    let terminating = terminating_cm(&http, "f", &["example.com/x"]).await;
    let mut watch = http.watch(CM, rv(&terminating)).await;

    let again = http.delete(&cm_path("f")).await.expect(200);
    assert_eq!(again, terminating);
    let with_grace = http
        .delete_with(&cm_path("f"), &json!({"gracePeriodSeconds": 0}))
        .await
        .expect(200);
    assert_eq!(with_grace, terminating);
    // P5: Background names no GC finalizer, none is stored: the set is unchanged.
    let background = http
        .delete(&format!("{}?propagationPolicy=Background", cm_path("f")))
        .await
        .expect(200);
    assert_eq!(background, terminating);

    watch.expect_quiet(&http).await;
    assert_eq!(http.get(&cm_path("f")).await.expect(200), terminating);
    server.shutdown().await;
}

/// 5. U7: removing the last finalizer deletes instead of writing: 200 with the object as
/// computed (RV of the request), DELETED with the last stored state (old finalizers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s05_last_finalizer_removal_deletes() {
    let (server, http) = setup().await;
    let terminating = terminating_cm(&http, "f", &["example.com/x"]).await;
    let mut watch = http.watch(CM, rv(&terminating)).await;

    let mut request = terminating.clone();
    request["metadata"]["finalizers"] = json!([]);
    let body = http.put(&cm_path("f"), &request).await.expect(200);
    assert_eq!(body["kind"], "ConfigMap", "{body}");
    assert!(finalizers(&body).is_empty(), "{body}");
    assert_eq!(
        body["metadata"]["deletionTimestamp"],
        terminating["metadata"]["deletionTimestamp"]
    );
    assert_eq!(
        rv(&body),
        rv(&terminating),
        "nothing new was stored: {body}"
    );

    let deleted = watch.expect("DELETED", "f").await;
    assert_eq!(finalizers(&deleted), ["example.com/x"]);
    assert_eq!(without_rv(&deleted), without_rv(&terminating));
    assert!(rv(&deleted) > rv(&terminating), "{deleted}");
    watch.expect_quiet(&http).await;
    http.get(&cm_path("f"))
        .await
        .expect_failure(404, "NotFound");
    server.shutdown().await;
}

/// 6. U5/W3: removing one of two finalizers is an ordinary update: MODIFIED, still present.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s06_partial_removal() {
    let (server, http) = setup().await;
    let terminating = terminating_cm(&http, "f", &["example.com/x", "example.com/y"]).await;
    let mut watch = http.watch(CM, rv(&terminating)).await;

    let body = http
        .json_patch(
            &cm_path("f"),
            &json!([{"op": "remove", "path": "/metadata/finalizers/0"}]),
        )
        .await
        .expect(200);
    assert_eq!(finalizers(&body), ["example.com/y"]);
    assert_eq!(
        body["metadata"]["deletionTimestamp"],
        terminating["metadata"]["deletionTimestamp"]
    );
    assert!(rv(&body) > rv(&terminating));
    assert_eq!(watch.expect("MODIFIED", "f").await, body);
    watch.expect_quiet(&http).await;
    assert_eq!(http.get(&cm_path("f")).await.expect(200), body);
    server.shutdown().await;
}

/// 7. U5: a terminating object cannot gain a finalizer (422 Forbidden on metadata.finalizers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s07_no_new_finalizers() {
    let (server, http) = setup().await;
    let terminating = terminating_cm(&http, "f", &["example.com/x", "example.com/y"]).await;
    let mut watch = http.watch(CM, rv(&terminating)).await;

    let status = http
        .merge_patch(
            &cm_path("f"),
            &json!({"metadata": {"finalizers": ["example.com/x", "example.com/y", "example.com/z"]}}),
        )
        .await
        .expect_failure(422, "Invalid");
    assert_eq!(
        status["message"],
        "ConfigMap \"f\" is invalid: metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"example.com/z\"}"
    );
    assert_eq!(
        only_cause(&status),
        (
            "FieldValueForbidden".to_string(),
            "metadata.finalizers".to_string()
        )
    );
    watch.expect_quiet(&http).await;
    assert_eq!(http.get(&cm_path("f")).await.expect(200), terminating);

    // Reordering is allowed: the same set holds no new finalizer.
    let reordered = http
        .merge_patch(
            &cm_path("f"),
            &json!({"metadata": {"finalizers": ["example.com/y", "example.com/x"]}}),
        )
        .await
        .expect(200);
    assert_eq!(finalizers(&reordered), ["example.com/y", "example.com/x"]);
    assert_eq!(watch.expect("MODIFIED", "f").await, reordered);
    server.shutdown().await;
}

/// 8. U3/U4: a live object cannot be given deletion fields by an update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s08_deletion_timestamp_immutable() {
    let (server, http) = setup().await;
    let live = create_cm(&http, "a", &[], json!({})).await;

    let mut request = live.clone();
    request["metadata"]["deletionTimestamp"] = json!("2030-01-01T00:00:00Z");
    let status = http
        .put(&cm_path("a"), &request)
        .await
        .expect_failure(422, "Invalid");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message
            .starts_with("ConfigMap \"a\" is invalid: metadata.deletionTimestamp: Invalid value: ")
            && message.ends_with(": field is immutable"),
        "{status}"
    );
    assert_eq!(
        only_cause(&status),
        (
            "FieldValueInvalid".to_string(),
            "metadata.deletionTimestamp".to_string()
        )
    );

    let mut request = live.clone();
    request["metadata"]["deletionGracePeriodSeconds"] = json!(30);
    let status = http
        .put(&cm_path("a"), &request)
        .await
        .expect_failure(422, "Invalid");
    assert_eq!(
        status["message"],
        "ConfigMap \"a\" is invalid: metadata.deletionGracePeriodSeconds: Invalid value: 30: field is immutable"
    );

    assert_eq!(http.get(&cm_path("a")).await.expect(200), live);
    server.shutdown().await;
}

/// 9. U3/U4/U6: on a terminating object the deletion fields are kept whatever the update
/// says (omitted or changed), and other changes go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s09_deletion_timestamp_preserved() {
    let (server, http) = setup().await;
    let terminating = terminating_cm(&http, "f", &["example.com/x"]).await;
    let mut watch = http.watch(CM, rv(&terminating)).await;

    let mut request = terminating.clone();
    let metadata = request["metadata"].as_object_mut().expect("metadata");
    metadata.remove("deletionTimestamp");
    metadata.remove("deletionGracePeriodSeconds");
    metadata.insert("labels".into(), json!({"changed": "yes"}));
    let body = http.put(&cm_path("f"), &request).await.expect(200);
    assert_eq!(body["metadata"]["labels"], json!({"changed": "yes"}));
    assert_eq!(
        body["metadata"]["deletionTimestamp"],
        terminating["metadata"]["deletionTimestamp"]
    );
    assert_eq!(body["metadata"]["deletionGracePeriodSeconds"], 0);
    assert_eq!(watch.expect("MODIFIED", "f").await, body);

    // A different timestamp is silently replaced by the stored one (U3).
    let mut request = body.clone();
    request["metadata"]["deletionTimestamp"] = json!("2001-01-01T00:00:00Z");
    request["metadata"]["labels"] = json!({"changed": "again"});
    let again = http.put(&cm_path("f"), &request).await.expect(200);
    assert_eq!(
        again["metadata"]["deletionTimestamp"],
        terminating["metadata"]["deletionTimestamp"]
    );
    assert_eq!(watch.expect("MODIFIED", "f").await, again);
    watch.expect_quiet(&http).await;
    server.shutdown().await;
}

/// 10. U1: a create wipes client-supplied uid, timestamps and deletion fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s10_create_wipes_system_fields() {
    let (server, http) = setup().await;
    let forged = "00000000-0000-0000-0000-000000000001";
    let body = http
        .post(
            CM,
            &json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": "a",
                    "uid": forged,
                    "creationTimestamp": "2001-01-01T00:00:00Z",
                    "deletionTimestamp": "2001-01-01T00:00:00Z",
                    "deletionGracePeriodSeconds": 30,
                },
            }),
        )
        .await
        .expect(201);
    assert!(!uid(&body).is_empty() && uid(&body) != forged, "{body}");
    assert_time_near(&body, "creationTimestamp", 0);
    assert!(
        body["metadata"].get("deletionTimestamp").is_none(),
        "{body}"
    );
    assert!(
        body["metadata"].get("deletionGracePeriodSeconds").is_none(),
        "{body}"
    );
    assert_eq!(http.get(&cm_path("a")).await.expect(200), body);
    server.shutdown().await;
}

/// 11. D3.2: a wrong uid precondition is a 409 naming the Kind; nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s11_uid_precondition() {
    let (server, http) = setup().await;
    let created = create_cm(&http, "a", &[], json!({})).await;
    let mut watch = http.watch(CM, rv(&created)).await;

    let body = http
        .delete_with(&cm_path("a"), &json!({"preconditions": {"uid": "wrong"}}))
        .await
        .expect(409);
    assert_eq!(
        body,
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": format!(
                "Operation cannot be fulfilled on ConfigMap \"a\": the UID in the precondition (wrong) does not match the UID in record ({}). The object might have been deleted and then recreated",
                uid(&created)
            ),
            "reason": "Conflict",
            "details": {"name": "a", "kind": "ConfigMap"},
            "code": 409,
        })
    );
    watch.expect_quiet(&http).await;
    assert_eq!(http.get(&cm_path("a")).await.expect(200), created);

    // The right uid deletes.
    let body = http
        .delete_with(
            &cm_path("a"),
            &json!({"preconditions": {"uid": uid(&created)}}),
        )
        .await
        .expect(200);
    assert_eq!(body, cm_deleted_status("a", &uid(&created)));
    watch.expect("DELETED", "a").await;
    server.shutdown().await;
}

/// 12. D3.2: a stale resourceVersion precondition is a 409 "might have been modified".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s12_rv_precondition() {
    let (server, http) = setup().await;
    let created = create_cm(&http, "a", &[], json!({})).await;
    let updated = http
        .merge_patch(&cm_path("a"), &json!({"data": {"k": "v2"}}))
        .await
        .expect(200);
    let stale = rv(&created).to_string();
    let current = rv(&updated).to_string();

    let status = http
        .delete_with(
            &cm_path("a"),
            &json!({"preconditions": {"resourceVersion": stale}}),
        )
        .await
        .expect_failure(409, "Conflict");
    assert_eq!(
        status["message"],
        format!(
            "Operation cannot be fulfilled on ConfigMap \"a\": the ResourceVersion in the precondition ({stale}) does not match the ResourceVersion in record ({current}). The object might have been modified"
        )
    );
    assert_eq!(http.get(&cm_path("a")).await.expect(200), updated);

    http.delete_with(
        &cm_path("a"),
        &json!({"preconditions": {"resourceVersion": current}}),
    )
    .await
    .expect(200);
    http.get(&cm_path("a"))
        .await
        .expect_failure(404, "NotFound");
    server.shutdown().await;
}

/// 13. H3: an unknown propagationPolicy is a 422 about DeleteOptions.meta.k8s.io.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s13_bad_policy() {
    let (server, http) = setup_without_gc().await;
    let created = create_cm(&http, "a", &[], json!({})).await;
    let status = http
        .delete(&format!("{}?propagationPolicy=Sideways", cm_path("a")))
        .await
        .expect_failure(422, "Invalid");
    assert_eq!(
        status["message"],
        "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"Sideways\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
    );
    assert_eq!(status["details"]["kind"], "DeleteOptions");
    assert_eq!(status["details"]["group"], "meta.k8s.io");
    assert_eq!(
        only_cause(&status),
        (
            "FieldValueNotSupported".to_string(),
            "propagationPolicy".to_string()
        )
    );
    assert_eq!(http.get(&cm_path("a")).await.expect(200), created);
    server.shutdown().await;
}

/// 14. H3: orphanDependents and propagationPolicy together are a 422.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s14_both_legacy_and_new_policy() {
    let (server, http) = setup_without_gc().await;
    let created = create_cm(&http, "a", &[], json!({})).await;
    let status = http
        .delete_with(
            &cm_path("a"),
            &json!({"orphanDependents": true, "propagationPolicy": "Orphan"}),
        )
        .await
        .expect_failure(422, "Invalid");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: ")
            && message.ends_with("orphanDependents and deletionPropagation cannot be both set"),
        "{status}"
    );
    assert_eq!(status["details"]["kind"], "DeleteOptions");
    assert_eq!(
        only_cause(&status),
        (
            "FieldValueInvalid".to_string(),
            "propagationPolicy".to_string()
        )
    );
    assert_eq!(http.get(&cm_path("a")).await.expect(200), created);
    server.shutdown().await;
}

/// 15. H2: a non-empty body is the whole of the DeleteOptions; the query is ignored, so the
/// body's Background wins over the query's Orphan: no finalizer, the owner goes at once. (Its
/// dependent stays: deleting it is the garbage collector's job.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s15_body_beats_query() {
    let (server, http) = setup_without_gc().await;
    let owner = create_cm(&http, "o", &[], json!({})).await;
    http.post(
        "/api/v1/namespaces/t/secrets",
        &json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "d", "ownerReferences": [{
                "apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": uid(&owner),
            }]},
        }),
    )
    .await
    .expect(201);
    let mut watch = http.watch(CM, rv(&owner)).await;

    let body = http
        .delete_with(
            &format!("{}?propagationPolicy=Orphan", cm_path("o")),
            &json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}),
        )
        .await
        .expect(200);
    assert_eq!(body, cm_deleted_status("o", &uid(&owner)));
    let deleted = watch.expect("DELETED", "o").await;
    assert!(finalizers(&deleted).is_empty(), "{deleted}");
    watch.expect_quiet(&http).await;

    // A body without a policy still replaces the query entirely: no orphan either.
    let second = create_cm(&http, "o2", &[], json!({})).await;
    let body = http
        .delete_with(
            &format!("{}?propagationPolicy=Orphan", cm_path("o2")),
            &json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"}),
        )
        .await
        .expect(200);
    assert_eq!(body, cm_deleted_status("o2", &uid(&second)));
    http.get("/api/v1/namespaces/t/secrets/d").await.expect(200);
    server.shutdown().await;
}

/// 16. D9/W1: dryRun=All answers like the real request and changes nothing: a ConfigMap gets
/// scenario 1's Status, a running pod the pod with its would-be deletionTimestamp.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s16_dry_run() {
    let (server, http) = setup_without_gc().await;
    let created = create_cm(&http, "a", &[], json!({})).await;
    let pod = running_pod(&http, "p", &[]).await;
    let mut cm_watch = http.watch(CM, rv(&created)).await;
    let mut pod_watch = http.watch(PODS, rv(&pod)).await;

    let body = http
        .delete(&format!("{}?dryRun=All", cm_path("a")))
        .await
        .expect(200);
    assert_eq!(body, cm_deleted_status("a", &uid(&created)));
    // The body form (H2) too.
    let body = http
        .delete_with(&cm_path("a"), &json!({"dryRun": ["All"]}))
        .await
        .expect(200);
    assert_eq!(body, cm_deleted_status("a", &uid(&created)));
    assert_eq!(http.get(&cm_path("a")).await.expect(200), created);

    let body = http
        .delete(&format!("{}?dryRun=All", pod_path("p")))
        .await
        .expect(200);
    assert_eq!(body["kind"], "Pod", "{body}");
    assert_time_near(&body, "deletionTimestamp", 30);
    assert_eq!(body["metadata"]["deletionGracePeriodSeconds"], 30, "{body}");
    assert_eq!(http.get(&pod_path("p")).await.expect(200), pod);

    cm_watch.expect_quiet(&http).await;
    pod_watch.expect_quiet(&http).await;
    server.shutdown().await;
}

/// 21. H5/P6: the deprecated orphanDependents=false answers 202 when the object stays (and
/// adds no GC finalizer); 200 when it is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s21_orphan_dependents_false_is_202() {
    let (server, http) = setup_without_gc().await;
    let created = create_cm(&http, "f", &["example.com/x"], json!({})).await;
    let body = http
        .delete_with(&cm_path("f"), &json!({"orphanDependents": false}))
        .await
        .expect(202);
    assert_eq!(body["kind"], "ConfigMap", "{body}");
    assert_time_near(&body, "deletionTimestamp", 0);
    assert_eq!(finalizers(&body), ["example.com/x"]);
    assert!(rv(&body) > rv(&created));
    assert_eq!(http.get(&cm_path("f")).await.expect(200), body);

    let plain = create_cm(&http, "a", &[], json!({})).await;
    let body = http
        .delete_with(&cm_path("a"), &json!({"orphanDependents": false}))
        .await
        .expect(200);
    assert_eq!(body, cm_deleted_status("a", &uid(&plain)));
    server.shutdown().await;
}

fn job(name: &str) -> Value {
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox:1.36"}],
        }}},
    })
}

/// 22 (the parts that hold without a garbage collector). P7/P8: a Job DELETE without a policy
/// adds `orphan` and warns; Orphan adds it without the warning; Background neither warns nor
/// keeps the Job. D14: the Job's generation is bumped on entering terminating.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s22_job_default_orphans_with_warning() {
    let (server, http) = setup_without_gc().await;
    let created = http.post(JOBS, &job("j")).await.expect(201);
    assert_eq!(created["metadata"]["generation"], 1, "{created}");
    // A pod the Job owns; with no garbage collector it simply stays.
    http.post(
        PODS,
        &json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "j-pod", "ownerReferences": [{
                "apiVersion": "batch/v1", "kind": "Job", "name": "j",
                "uid": uid(&created), "controller": true, "blockOwnerDeletion": true,
            }]},
            "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
        }),
    )
    .await
    .expect(201);
    let mut watch = http.watch(JOBS, rv(&created)).await;

    let reply = http.delete(&format!("{JOBS}/j")).await;
    assert_eq!(reply.warnings, [JOB_WARNING]);
    let body = reply.expect(200);
    assert_eq!(body["kind"], "Job", "{body}");
    assert_eq!(finalizers(&body), ["orphan"]);
    assert_time_near(&body, "deletionTimestamp", 0);
    assert_eq!(body["metadata"]["deletionGracePeriodSeconds"], 0, "{body}");
    assert_eq!(body["metadata"]["generation"], 2, "{body}");
    assert_eq!(watch.expect("MODIFIED", "j").await, body);
    assert_eq!(http.get(&format!("{JOBS}/j")).await.expect(200), body);
    http.get(&pod_path("j-pod")).await.expect(200);

    // Orphan is an explicit policy: the same finalizer, no warning.
    http.post(JOBS, &job("j-orphan")).await.expect(201);
    let reply = http
        .delete(&format!("{JOBS}/j-orphan?propagationPolicy=Orphan"))
        .await;
    assert!(reply.warnings.is_empty(), "{:?}", reply.warnings);
    assert_eq!(finalizers(&reply.expect(200)), ["orphan"]);
    watch.expect("ADDED", "j-orphan").await;
    watch.expect("MODIFIED", "j-orphan").await;

    // Background: no warning, no finalizer, the Job is gone (a Status: Jobs have no R-flag).
    let background = http.post(JOBS, &job("j-bg")).await.expect(201);
    let reply = http
        .delete(&format!("{JOBS}/j-bg?propagationPolicy=Background"))
        .await;
    assert!(reply.warnings.is_empty(), "{:?}", reply.warnings);
    assert_eq!(
        reply.expect(200),
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {"name": "j-bg", "group": "batch", "kind": "jobs", "uid": uid(&background)},
        })
    );
    watch.expect("ADDED", "j-bg").await;
    watch.expect("DELETED", "j-bg").await;
    http.get(&format!("{JOBS}/j-bg"))
        .await
        .expect_failure(404, "NotFound");

    // P8 applies to DELETECOLLECTION as well.
    http.post(JOBS, &job("j-coll")).await.expect(201);
    let reply = http
        .delete(&format!("{JOBS}?fieldSelector=metadata.name%3Dj-coll"))
        .await;
    assert_eq!(reply.warnings, [JOB_WARNING]);
    reply.expect(200);
    server.shutdown().await;
}

/// 24. P6: a second DELETE may change the GC finalizers: Orphan → Foreground swaps them, and
/// Background removes the only one, deleting the object at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s24_policy_switch_on_second_delete() {
    let (server, http) = setup_without_gc().await;
    let created = create_cm(&http, "a", &[], json!({})).await;
    let mut watch = http.watch(CM, rv(&created)).await;

    let orphaned = http
        .delete(&format!("{}?propagationPolicy=Orphan", cm_path("a")))
        .await
        .expect(200);
    assert_eq!(finalizers(&orphaned), ["orphan"]);
    assert_time_near(&orphaned, "deletionTimestamp", 0);
    assert_eq!(watch.expect("MODIFIED", "a").await, orphaned);

    let foreground = http
        .delete(&format!("{}?propagationPolicy=Foreground", cm_path("a")))
        .await
        .expect(200);
    assert_eq!(finalizers(&foreground), ["foregroundDeletion"]);
    assert_eq!(
        foreground["metadata"]["deletionTimestamp"],
        orphaned["metadata"]["deletionTimestamp"]
    );
    assert_eq!(watch.expect("MODIFIED", "a").await, foreground);

    let orphaned = http
        .delete(&format!("{}?propagationPolicy=Orphan", cm_path("a")))
        .await
        .expect(200);
    assert_eq!(finalizers(&orphaned), ["orphan"]);
    assert_eq!(watch.expect("MODIFIED", "a").await, orphaned);

    let body = http
        .delete(&format!("{}?propagationPolicy=Background", cm_path("a")))
        .await
        .expect(200);
    assert_eq!(body, cm_deleted_status("a", &uid(&created)));
    let deleted = watch.expect("DELETED", "a").await;
    assert_eq!(finalizers(&deleted), ["orphan"]);
    assert_eq!(without_rv(&deleted), without_rv(&orphaned));
    watch.expect_quiet(&http).await;
    http.get(&cm_path("a"))
        .await
        .expect_failure(404, "NotFound");
    server.shutdown().await;
}

/// 25. P3/P4: with no options, a stored GC finalizer picks the policy (kept as is); H5: an
/// explicit Foreground answers 200, not 202.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s25_existing_finalizer_picks_policy() {
    let (server, http) = setup_without_gc().await;
    create_cm(&http, "fg", &["foregroundDeletion"], json!({})).await;
    let body = http.delete(&cm_path("fg")).await.expect(200);
    assert_eq!(finalizers(&body), ["foregroundDeletion"]);
    assert_time_near(&body, "deletionTimestamp", 0);

    create_cm(&http, "or", &["example.com/x", "orphan"], json!({})).await;
    let body = http.delete(&cm_path("or")).await.expect(200);
    assert_eq!(finalizers(&body), ["example.com/x", "orphan"]);

    // P5: the same set keeps the stored order.
    create_cm(&http, "kept", &["orphan", "example.com/x"], json!({})).await;
    let body = http
        .delete(&format!("{}?propagationPolicy=Orphan", cm_path("kept")))
        .await
        .expect(200);
    assert_eq!(finalizers(&body), ["orphan", "example.com/x"]);

    create_cm(&http, "explicit", &[], json!({})).await;
    let body = http
        .delete(&format!(
            "{}?propagationPolicy=Foreground",
            cm_path("explicit")
        ))
        .await
        .expect(200);
    assert_eq!(finalizers(&body), ["foregroundDeletion"]);
    server.shutdown().await;
}

/// 26. FN2: `orphan` and `foregroundDeletion` together are rejected, on create and update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s26_gc_finalizer_exclusivity() {
    let (server, http) = setup_without_gc().await;
    let body = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "both", "finalizers": ["orphan", "foregroundDeletion"]},
    });
    let status = http.post(CM, &body).await.expect_failure(422, "Invalid");
    assert_eq!(
        status["message"],
        "ConfigMap \"both\" is invalid: metadata.finalizers: Invalid value: []string{\"orphan\", \"foregroundDeletion\"}: finalizer orphan and foregroundDeletion cannot be both set"
    );
    assert_eq!(
        only_cause(&status),
        (
            "FieldValueInvalid".to_string(),
            "metadata.finalizers".to_string()
        )
    );
    http.get(&cm_path("both"))
        .await
        .expect_failure(404, "NotFound");

    let live = create_cm(&http, "a", &["orphan"], json!({})).await;
    http.merge_patch(
        &cm_path("a"),
        &json!({"metadata": {"finalizers": ["orphan", "foregroundDeletion"]}}),
    )
    .await
    .expect_failure(422, "Invalid");
    assert_eq!(http.get(&cm_path("a")).await.expect(200), live);
    server.shutdown().await;
}

/// 27 (built-in kinds). FN3: a finalizer without `/` must be a standard name, on create and
/// update; `kubernetes` is one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s27_finalizer_name_rules() {
    let (server, http) = setup().await;
    let status = http
        .post(
            CM,
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bad", "finalizers": ["foo"]}}),
        )
        .await
        .expect_failure(422, "Invalid");
    assert_eq!(
        status["message"],
        "ConfigMap \"bad\" is invalid: metadata.finalizers[0]: Invalid value: \"foo\": name is neither a standard finalizer name nor is it fully qualified"
    );
    assert_eq!(
        only_cause(&status),
        (
            "FieldValueInvalid".to_string(),
            "metadata.finalizers[0]".to_string()
        )
    );
    http.get(&cm_path("bad"))
        .await
        .expect_failure(404, "NotFound");

    let created = create_cm(&http, "k", &["kubernetes"], json!({})).await;
    assert_eq!(finalizers(&created), ["kubernetes"]);

    let status = http
        .merge_patch(
            &cm_path("k"),
            &json!({"metadata": {"finalizers": ["kubernetes", "foo"]}}),
        )
        .await
        .expect_failure(422, "Invalid");
    assert!(
        status["message"]
            .as_str()
            .unwrap_or_default()
            .ends_with("metadata.finalizers[1]: Invalid value: \"foo\": name is neither a standard finalizer name nor is it fully qualified"),
        "{status}"
    );
    server.shutdown().await;
}

/// 28. PG1/PG2: a scheduled running pod gets its grace period: 200 with the Pod, MODIFIED,
/// still readable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s28_pod_graceful() {
    let (server, http) = setup().await;
    let pod = running_pod(&http, "p", &[]).await;
    let mut watch = http.watch(PODS, rv(&pod)).await;

    let body = http.delete(&pod_path("p")).await.expect(200);
    assert_eq!(body["kind"], "Pod", "{body}");
    assert_eq!(body["metadata"]["deletionGracePeriodSeconds"], 30, "{body}");
    assert_time_near(&body, "deletionTimestamp", 30);
    assert_eq!(
        without_deletion_fields(&body),
        without_deletion_fields(&pod)
    );
    assert_eq!(watch.expect("MODIFIED", "p").await, body);
    watch.expect_quiet(&http).await;
    assert_eq!(http.get(&pod_path("p")).await.expect(200), body);
    server.shutdown().await;
}

/// 29. PG3/D3.5/D3.3: the grace period only shrinks; equal or longer requests are no-ops; a
/// negative request counts as 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s29_only_shrink() {
    let (server, http) = setup().await;
    running_pod(&http, "p", &[]).await;
    let graceful = http.delete(&pod_path("p")).await.expect(200);
    let mut watch = http.watch(PODS, rv(&graceful)).await;

    for query in ["?gracePeriodSeconds=60", "?gracePeriodSeconds=30", ""] {
        let body = http
            .delete(&format!("{}{query}", pod_path("p")))
            .await
            .expect(200);
        assert_eq!(body, graceful, "DELETE{query} must change nothing");
    }
    watch.expect_quiet(&http).await;

    let shorter = http
        .delete(&format!("{}?gracePeriodSeconds=10", pod_path("p")))
        .await
        .expect(200);
    assert_eq!(shorter["metadata"]["deletionGracePeriodSeconds"], 10);
    assert_eq!(
        time(&graceful, "deletionTimestamp") - time(&shorter, "deletionTimestamp"),
        chrono::Duration::seconds(20)
    );
    assert_eq!(watch.expect("MODIFIED", "p").await, shorter);

    let negative = http
        .delete(&format!("{}?gracePeriodSeconds=-5", pod_path("p")))
        .await
        .expect(200);
    assert_eq!(negative["metadata"]["deletionGracePeriodSeconds"], 1);
    assert_eq!(
        time(&shorter, "deletionTimestamp") - time(&negative, "deletionTimestamp"),
        chrono::Duration::seconds(9)
    );
    assert_eq!(watch.expect("MODIFIED", "p").await, negative);
    watch.expect_quiet(&http).await;
    assert_eq!(http.get(&pod_path("p")).await.expect(200), negative);
    server.shutdown().await;
}

/// 30. PG5/PG4/W2/W3: the kubelet's grace-0 DELETE with a uid precondition: MODIFIED (grace
/// 0, timestamp rewound) then DELETED; the body is the deleted pod, identical to the DELETED
/// event. A wrong uid is a 409 and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s30_kubelet_completion() {
    let (server, http) = setup().await;
    let pod = running_pod(&http, "p", &[]).await;
    let graceful = http.delete(&pod_path("p")).await.expect(200);
    let mut watch = http.watch(PODS, rv(&graceful)).await;

    let status = http
        .delete_with(
            &pod_path("p"),
            &json!({"gracePeriodSeconds": 0, "preconditions": {"uid": "wrong"}}),
        )
        .await
        .expect_failure(409, "Conflict");
    assert_eq!(
        status["message"],
        format!(
            "Operation cannot be fulfilled on Pod \"p\": the UID in the precondition (wrong) does not match the UID in record ({}). The object might have been deleted and then recreated",
            uid(&pod)
        )
    );
    watch.expect_quiet(&http).await;

    let body = http
        .delete_with(
            &pod_path("p"),
            &json!({"gracePeriodSeconds": 0, "preconditions": {"uid": uid(&pod)}}),
        )
        .await
        .expect(200);
    assert_eq!(body["kind"], "Pod", "{body}");
    let modified = watch.expect("MODIFIED", "p").await;
    assert_eq!(modified["metadata"]["deletionGracePeriodSeconds"], 0);
    assert_eq!(
        time(&graceful, "deletionTimestamp") - time(&modified, "deletionTimestamp"),
        chrono::Duration::seconds(30)
    );
    let deleted = watch.expect("DELETED", "p").await;
    assert_eq!(without_rv(&deleted), without_rv(&modified));
    assert!(rv(&deleted) > rv(&modified));
    assert_eq!(body, deleted, "W2: the R-flag body is the DELETED object");
    watch.expect_quiet(&http).await;
    http.get(&pod_path("p"))
        .await
        .expect_failure(404, "NotFound");
    server.shutdown().await;
}

/// 31. PG1/PG4: never-scheduled and finished pods are removed at once despite their 30 s
/// terminationGracePeriodSeconds: MODIFIED then DELETED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s31_unscheduled_and_terminal_pods() {
    let (server, http) = setup().await;
    let unscheduled = create_pod(&http, "u", "", None, &[]).await;
    let succeeded = create_pod(&http, "s", "node-1", Some("Succeeded"), &[]).await;
    let failed = create_pod(&http, "f", "node-1", Some("Failed"), &[]).await;
    let mut watch = http.watch(PODS, rv(&failed)).await;

    for pod in [&unscheduled, &succeeded, &failed] {
        let name = pod["metadata"]["name"].as_str().expect("a name");
        let body = http.delete(&pod_path(name)).await.expect(200);
        assert_eq!(body["metadata"]["deletionGracePeriodSeconds"], 0, "{body}");
        assert_time_near(&body, "deletionTimestamp", 0);
        let modified = watch.expect("MODIFIED", name).await;
        let deleted = watch.expect("DELETED", name).await;
        assert_eq!(without_rv(&modified), without_rv(&deleted));
        assert_eq!(body, deleted);
        http.get(&pod_path(name))
            .await
            .expect_failure(404, "NotFound");
    }
    watch.expect_quiet(&http).await;
    server.shutdown().await;
}

/// 32. PG6/U7: a pod's finalizer and its grace period both hold it. Finalizer first: the pod
/// waits for the grace-0 DELETE. Grace 0 first: the finalizer removal removes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s32_pod_finalizer_vs_grace() {
    let (server, http) = setup().await;
    let remove_finalizer = json!([{"op": "remove", "path": "/metadata/finalizers"}]);

    // Finalizer removed during the grace period: the pod stays.
    running_pod(&http, "a", &["example.com/hold"]).await;
    let graceful = http.delete(&pod_path("a")).await.expect(200);
    assert_eq!(graceful["metadata"]["deletionGracePeriodSeconds"], 30);
    let mut watch = http.watch(PODS, rv(&graceful)).await;
    let patched = http
        .json_patch(&pod_path("a"), &remove_finalizer)
        .await
        .expect(200);
    assert!(finalizers(&patched).is_empty(), "{patched}");
    assert_eq!(watch.expect("MODIFIED", "a").await, patched);
    assert_eq!(http.get(&pod_path("a")).await.expect(200), patched);
    let body = http
        .delete(&format!("{}?gracePeriodSeconds=0", pod_path("a")))
        .await
        .expect(200);
    watch.expect("MODIFIED", "a").await;
    assert_eq!(watch.expect("DELETED", "a").await, body);
    http.get(&pod_path("a"))
        .await
        .expect_failure(404, "NotFound");

    // Grace 0 first: the finalizer keeps the pod until the PATCH removes it.
    running_pod(&http, "b", &["example.com/hold"]).await;
    watch.expect("ADDED", "b").await;
    watch.expect("MODIFIED", "b").await; // its status
    let held = http
        .delete(&format!("{}?gracePeriodSeconds=0", pod_path("b")))
        .await
        .expect(200);
    assert_eq!(held["metadata"]["deletionGracePeriodSeconds"], 0);
    assert_eq!(finalizers(&held), ["example.com/hold"]);
    assert_eq!(watch.expect("MODIFIED", "b").await, held);
    watch.expect_quiet(&http).await;
    assert_eq!(http.get(&pod_path("b")).await.expect(200), held);
    let patched = http
        .json_patch(&pod_path("b"), &remove_finalizer)
        .await
        .expect(200);
    assert!(finalizers(&patched).is_empty(), "{patched}");
    assert_eq!(rv(&patched), rv(&held), "U7: nothing new was stored");
    let deleted = watch.expect("DELETED", "b").await;
    assert_eq!(without_rv(&deleted), without_rv(&held));
    watch.expect_quiet(&http).await;
    http.get(&pod_path("b"))
        .await
        .expect_failure(404, "NotFound");
    server.shutdown().await;
}

/// 43. C3/C5: DELETECOLLECTION deletes each match as a single DELETE would and answers with
/// the items as listed before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s43_delete_collection() {
    let (server, http) = setup().await;
    let a = create_cm(&http, "a", &[], json!({"x": "1"})).await;
    let b = create_cm(&http, "b", &["example.com/x"], json!({"x": "1"})).await;
    let c = create_cm(&http, "c", &[], json!({"x": "2"})).await;
    let mut watch = http.watch(CM, rv(&c)).await;

    let list = http
        .delete(&format!("{CM}?labelSelector=x%3D1"))
        .await
        .expect(200);
    assert_eq!(list["kind"], "ConfigMapList", "{list}");
    assert_eq!(list["apiVersion"], "v1", "{list}");
    let strip_type = |object: &Value| {
        let mut copy = object.clone();
        let map = copy.as_object_mut().expect("an object");
        map.remove("kind");
        map.remove("apiVersion");
        copy
    };
    assert_eq!(list["items"], json!([strip_type(&a), strip_type(&b)]));

    // The items are deleted concurrently: their events may come in either order.
    let mut events = vec![watch.next().await, watch.next().await];
    events.sort_by(|x, y| {
        x.1["metadata"]["name"]
            .as_str()
            .cmp(&y.1["metadata"]["name"].as_str())
    });
    let [(deleted_type, deleted), (modified_type, modified)] =
        <[(String, Value); 2]>::try_from(events).expect("two events");
    assert_eq!(
        (deleted_type.as_str(), modified_type.as_str()),
        ("DELETED", "MODIFIED")
    );
    assert_eq!(without_rv(&deleted), without_rv(&a));
    assert_time_near(&modified, "deletionTimestamp", 0);
    watch.expect_quiet(&http).await;
    http.get(&cm_path("a"))
        .await
        .expect_failure(404, "NotFound");
    assert_eq!(http.get(&cm_path("b")).await.expect(200), modified);
    assert_eq!(http.get(&cm_path("c")).await.expect(200), c);
    server.shutdown().await;
}

/// 44. C3: with `limit`, only one page is processed and the answer carries `continue`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s44_delete_collection_with_limit() {
    let (server, http) = setup().await;
    for name in ["a", "b", "c"] {
        create_cm(&http, name, &[], json!({"x": "1"})).await;
    }
    let list = http
        .delete(&format!("{CM}?labelSelector=x%3D1&limit=1"))
        .await
        .expect(200);
    let items = list["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{list}");
    assert_eq!(items[0]["metadata"]["name"], "a");
    assert!(
        list["metadata"]["continue"]
            .as_str()
            .is_some_and(|c| !c.is_empty()),
        "{list}"
    );
    let left = http.get(CM).await.expect(200);
    let names: Vec<&str> = left["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["b", "c"]);
    server.shutdown().await;
}

/// 45. U2: creating over a terminating object is AlreadyExists, "object is being deleted".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s45_recreate_while_terminating() {
    let (server, http) = setup().await;
    let terminating = terminating_cm(&http, "f", &["example.com/x"]).await;
    let body = http
        .post(
            CM,
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "f"}}),
        )
        .await
        .expect(409);
    assert_eq!(
        body,
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "object is being deleted: configmaps \"f\" already exists",
            "reason": "AlreadyExists",
            "details": {"name": "f", "kind": "configmaps"},
            "code": 409,
        })
    );
    assert_eq!(http.get(&cm_path("f")).await.expect(200), terminating);
    server.shutdown().await;
}

/// 46. W5/M2: a watch started after the deletion from an older RV replays the DELETED event
/// with the deletion's RV.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s46_watch_replay() {
    let (server, http) = setup().await;
    let created = create_cm(&http, "a", &[], json!({})).await;
    http.delete(&cm_path("a")).await.expect(200);
    let after = http.get(CM).await.expect(200);
    let deletion_rv = rv(&after);
    assert!(deletion_rv > rv(&created));

    let mut watch = http.watch(CM, rv(&created)).await;
    let deleted = watch.expect("DELETED", "a").await;
    assert_eq!(rv(&deleted), deletion_rv);
    assert_eq!(without_rv(&deleted), without_rv(&created));
    watch.expect_quiet(&http).await;
    server.shutdown().await;
}

// ----- §7 watch rules ----------------------------------------------------------------------

/// W1/W3: exactly one event per write, in order, with the RV each response reported; no
/// event for requests that write nothing (repeated DELETE, no-op patch, dry runs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn w1_w3_one_event_per_write_and_none_for_noops() {
    let (server, http) = setup().await;
    let created = create_cm(&http, "f", &["example.com/x", "example.com/y"], json!({})).await;
    let mut watch = http.watch(CM, rv(&created)).await;
    let path = cm_path("f");

    let terminating = http.delete(&path).await.expect(200);
    http.delete(&path).await.expect(200);
    http.delete(&format!("{path}?dryRun=All")).await.expect(200);
    let same = http
        .merge_patch(&path, &json!({"data": {"k": "f"}}))
        .await
        .expect(200);
    assert_eq!(same, terminating, "a no-op patch stores nothing");
    let mut dry = terminating.clone();
    dry["metadata"]["finalizers"] = json!([]);
    http.put(&format!("{path}?dryRun=All"), &dry)
        .await
        .expect(200);
    let one_left = http
        .merge_patch(
            &path,
            &json!({"metadata": {"finalizers": ["example.com/y"]}}),
        )
        .await
        .expect(200);
    let gone = http
        .merge_patch(&path, &json!({"metadata": {"finalizers": null}}))
        .await
        .expect(200);
    assert_eq!(rv(&gone), rv(&one_left));

    let events = watch.drain(&http).await;
    let expected_kinds = [("MODIFIED", rv(&terminating)), ("MODIFIED", rv(&one_left))];
    assert_eq!(events.len(), 3, "{events:?}");
    for ((kind, name, rv), (want_kind, want_rv)) in events.iter().zip(expected_kinds) {
        assert_eq!(
            (kind.as_str(), name.as_str(), *rv),
            (want_kind, "f", want_rv)
        );
    }
    assert_eq!(
        (events[2].0.as_str(), events[2].1.as_str()),
        ("DELETED", "f")
    );
    assert!(events[2].2 > rv(&one_left), "{events:?}");
    http.get(&path).await.expect_failure(404, "NotFound");
    server.shutdown().await;
}

/// H3: a dryRun value other than `All` is a 422 NotSupported on `dryRun`, from the body and
/// from the query alike; nothing is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h3_unsupported_dry_run_is_invalid() {
    let (server, http) = setup().await;
    let created = create_cm(&http, "a", &[], json!({})).await;
    let from_body = http
        .delete_with(&cm_path("a"), &json!({"dryRun": ["Sometimes"]}))
        .await
        .expect_failure(422, "Invalid");
    let from_query = http
        .delete(&format!("{}?dryRun=Sometimes", cm_path("a")))
        .await
        .expect_failure(422, "Invalid");
    for status in [&from_body, &from_query] {
        assert!(
            status["message"].as_str().unwrap_or_default().starts_with(
                "DeleteOptions.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: "
            ),
            "{status}"
        );
        assert_eq!(status["details"]["kind"], "DeleteOptions", "{status}");
        assert_eq!(
            only_cause(status),
            ("FieldValueNotSupported".to_string(), "dryRun".to_string())
        );
    }
    assert_eq!(http.get(&cm_path("a")).await.expect(200), created);
    server.shutdown().await;
}

/// H2: a body that does not decode to DeleteOptions is a 400 and deletes nothing (it must
/// not be read as "no options": a dropped uid precondition would delete the wrong object).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_malformed_delete_body_is_a_bad_request() {
    let (server, http) = setup_without_gc().await;
    let created = create_cm(&http, "a", &[], json!({})).await;
    for body in [
        json!([]),
        json!("Background"),
        json!({"kind": "ConfigMap", "apiVersion": "v1"}),
        json!({"gracePeriodSeconds": "ten"}),
        json!({"propagationPolicy": 1}),
        json!({"orphanDependents": "yes"}),
        json!({"preconditions": "uid"}),
        json!({"preconditions": {"uid": 42}}),
        json!({"preconditions": {"resourceVersion": 7}}),
    ] {
        let reply = http.delete_with(&cm_path("a"), &body).await;
        assert_eq!(reply.status, 400, "body {body}: {}", reply.body);
        assert_eq!(
            reply.body["reason"], "BadRequest",
            "body {body}: {}",
            reply.body
        );
    }
    assert_eq!(http.get(&cm_path("a")).await.expect(200), created);
    server.shutdown().await;
}

/// C1: there is no DELETECOLLECTION across namespaces for a namespaced kind: 405, and nothing
/// is deleted in any namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c1_no_cross_namespace_delete_collection() {
    let (server, http) = setup().await;
    http.post(
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "u"}}),
    )
    .await
    .expect(201);
    create_cm(&http, "a", &[], json!({})).await;
    http.post(
        "/api/v1/namespaces/u/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}),
    )
    .await
    .expect(201);
    let before = http.get("/api/v1/configmaps").await.expect(200);

    http.delete("/api/v1/configmaps")
        .await
        .expect_failure(405, "MethodNotAllowed");
    http.delete(&format!("{}?labelSelector=x%3D1", "/apis/batch/v1/jobs"))
        .await
        .expect_failure(405, "MethodNotAllowed");
    let after = http.get("/api/v1/configmaps").await.expect(200);
    assert_eq!(after["items"], before["items"]);
    server.shutdown().await;
}

/// P2: core Events never get GC finalizers, whatever the policy asks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p2_events_never_get_gc_finalizers() {
    let (server, http) = setup_without_gc().await;
    let event = |name: &str, finalizers: &[&str]| {
        json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "finalizers": finalizers},
            "involvedObject": {"kind": "ConfigMap", "namespace": NS, "name": "x"},
            "reason": "Testing",
            "message": "a test event",
            "type": "Normal",
        })
    };
    let events = "/api/v1/namespaces/t/events";
    let plain = http.post(events, &event("e", &[])).await.expect(201);
    let body = http
        .delete(&format!("{events}/e?propagationPolicy=Orphan"))
        .await
        .expect(200);
    assert_eq!(
        body,
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {"name": "e", "kind": "events", "uid": uid(&plain)},
        })
    );
    http.get(&format!("{events}/e"))
        .await
        .expect_failure(404, "NotFound");

    http.post(events, &event("held", &["example.com/x"]))
        .await
        .expect(201);
    let body = http
        .delete(&format!("{events}/held?propagationPolicy=Foreground"))
        .await
        .expect(200);
    assert_eq!(finalizers(&body), ["example.com/x"]);
    assert!(body["metadata"]["deletionTimestamp"].is_string(), "{body}");
    server.shutdown().await;
}

/// D14: the generation is bumped once, on entering terminating, for kinds that track it;
/// objects removed at once are not bumped (their DELETED event shows the stored generation).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d14_generation_bumps_once_on_entering_terminating() {
    let (server, http) = setup_without_gc().await;
    let deployments = "/apis/apps/v1/namespaces/t/deployments";
    let deployment = |name: &str, finalizers: &[&str]| {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "finalizers": finalizers},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
                },
            },
        })
    };
    let created = http
        .post(deployments, &deployment("held", &["example.com/x"]))
        .await
        .expect(201);
    assert_eq!(created["metadata"]["generation"], 1);
    let first = http
        .delete(&format!("{deployments}/held"))
        .await
        .expect(200);
    assert_eq!(first["metadata"]["generation"], 2, "{first}");
    let second = http
        .delete(&format!("{deployments}/held?propagationPolicy=Orphan"))
        .await
        .expect(200);
    assert_eq!(finalizers(&second), ["example.com/x", "orphan"]);
    assert_eq!(second["metadata"]["generation"], 2, "{second}");

    let plain = http
        .post(deployments, &deployment("plain", &[]))
        .await
        .expect(201);
    let mut watch = http.watch(deployments, rv(&plain)).await;
    http.delete(&format!("{deployments}/plain"))
        .await
        .expect(200);
    let deleted = watch.expect("DELETED", "plain").await;
    assert_eq!(deleted["metadata"]["generation"], 1, "{deleted}");
    server.shutdown().await;
}

/// D8: a resourceVersion precondition is checked against the object as read, and the final
/// removal after the request's own grace-0 update is rebased onto that update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d8_rv_precondition_is_rebased_after_the_grace_zero_update() {
    let (server, http) = setup().await;
    let unscheduled = create_pod(&http, "u", "", None, &[]).await;
    let body = http
        .delete_with(
            &pod_path("u"),
            &json!({"preconditions": {"resourceVersion": rv(&unscheduled).to_string()}}),
        )
        .await
        .expect(200);
    assert!(rv(&body) > rv(&unscheduled), "{body}");
    http.get(&pod_path("u"))
        .await
        .expect_failure(404, "NotFound");

    running_pod(&http, "r", &[]).await;
    let graceful = http.delete(&pod_path("r")).await.expect(200);
    http.delete_with(
        &pod_path("r"),
        &json!({"gracePeriodSeconds": 0, "preconditions": {"resourceVersion": rv(&graceful).to_string()}}),
    )
    .await
    .expect(200);
    http.get(&pod_path("r"))
        .await
        .expect_failure(404, "NotFound");
    server.shutdown().await;
}

/// U8: a pod's `/status` write keeps the stored spec (and ownerReferences) but takes the
/// request's other metadata, so it can remove the last finalizer and complete a deletion
/// (U7); labels changed through a Deployment's `/status` are ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn u8_status_writes_follow_the_kinds_strategy() {
    let (server, http) = setup().await;
    create_pod(&http, "p", "", None, &["example.com/hold"]).await;
    let terminating = http.delete(&pod_path("p")).await.expect(200);
    assert!(
        terminating["metadata"]["deletionTimestamp"].is_string(),
        "{terminating}"
    );
    let mut released = terminating.clone();
    released["metadata"]["finalizers"] = json!([]);
    released["spec"]["containers"][0]["image"] = json!("ignored:1");
    released["status"]["phase"] = json!("Failed");
    let answer = http
        .put(&format!("{}/status", pod_path("p")), &released)
        .await
        .expect(200);
    assert_eq!(
        answer["spec"]["containers"][0]["image"], "busybox:1.36",
        "the spec is the stored one: {answer}"
    );
    http.get(&pod_path("p"))
        .await
        .expect_failure(404, "NotFound");

    let deployments = "/apis/apps/v1/namespaces/t/deployments";
    let deployment = http
        .post(
            deployments,
            &json!({"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "d", "labels": {"app": "d"}},
                    "spec": {"selector": {"matchLabels": {"app": "d"}},
                             "template": {"metadata": {"labels": {"app": "d"}},
                                          "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}),
        )
        .await
        .expect(201);
    let mut changed = deployment.clone();
    changed["metadata"]["labels"] = json!({"app": "other"});
    changed["metadata"]["annotations"] = json!({"note": "kept"});
    changed["status"] = json!({"replicas": 1});
    let answer = http
        .put(&format!("{deployments}/d/status"), &changed)
        .await
        .expect(200);
    assert_eq!(
        answer["metadata"]["labels"],
        json!({"app": "d"}),
        "{answer}"
    );
    assert_eq!(
        answer["metadata"]["annotations"],
        json!({"note": "kept"}),
        "{answer}"
    );
    assert_eq!(answer["status"]["replicas"], 1, "{answer}");
    server.shutdown().await;
}
