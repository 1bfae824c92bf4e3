//! Namespace deletion (`shared/spec/deletion-semantics.md` §10 and §13 scenarios 37–42, 47)
//! against an in-process server with its namespace controller: the DELETE answer, blocked
//! creates, the five status conditions, pods-first ordering, `/finalize`, the immortal
//! namespaces, preconditions, and how fast an empty namespace goes. Plus a kube-rs `watcher`
//! following a ConfigMap through its finalizer.
//!
//! Raw HTTPS gives exact codes and bodies; every wait is bounded ([`WAIT`]); "no event" means
//! nothing arrived before a sentinel write (and, where the namespace controller could act,
//! after it has handled a sentinel namespace).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::raw::{Http, QUIET, Watch, rv};
use common::{TestServer, WAIT, within};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

const NAMESPACES: &str = "/api/v1/namespaces";

// ----- raw HTTPS (as in deletion_scenarios.rs) ---------------------------------------------
impl Watch {
    /// Events until the first of `kind`: those before it, and its object.
    async fn until(&mut self, kind: &str) -> (Vec<(String, Value)>, Value) {
        let mut before = Vec::new();
        loop {
            let (got, object) = self.next().await;
            if got == kind {
                return (before, object);
            }
            before.push((got, object));
        }
    }
}

impl Http {
    /// Creates namespace `name`.
    async fn create_namespace(&self, name: &str) -> Value {
        self.post(
            NAMESPACES,
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
        )
        .await
        .expect(201)
    }

    /// Creates ConfigMap `name` in `namespace` with these finalizers.
    async fn create_cm(&self, namespace: &str, name: &str, finalizers: &[&str]) -> Value {
        let mut metadata = json!({"name": name});
        if !finalizers.is_empty() {
            metadata["finalizers"] = json!(finalizers);
        }
        self.post(
            &format!("{NAMESPACES}/{namespace}/configmaps"),
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata}),
        )
        .await
        .expect(201)
    }

    /// Polls GET `path` every 20 ms until `done(body)` holds (a 404 body is a Status), for at
    /// most [`WAIT`]; returns the last body.
    async fn poll(&self, path: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            let body = self.get(path).await.body;
            if done(&body) {
                return body;
            }
            assert!(
                Instant::now() < deadline,
                "{path} did not become {what} within {WAIT:?}: {body}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until GET `path` is a 404.
    async fn gone(&self, path: &str) {
        self.poll(path, "gone", |body| body["code"] == 404).await;
    }

    /// Waits until the namespace controller has handled every event before this call: a
    /// sentinel namespace is created, deleted, and must be removed. The controller is one
    /// task that takes namespace events in revision order and works through the namespaces
    /// due at once in name order, so once the sentinel (named to sort last) is removed, every
    /// pass due before it is complete. This proves "the controller did nothing" without a
    /// fixed sleep.
    async fn namespace_controller_caught_up(&self) {
        static SENTINELS: AtomicUsize = AtomicUsize::new(0);
        let name = format!("zz-sentinel-{}", SENTINELS.fetch_add(1, Ordering::SeqCst));
        self.create_namespace(&name).await;
        self.delete(&ns_path(&name)).await.expect(200);
        self.gone(&ns_path(&name)).await;
    }
}

fn ns_path(name: &str) -> String {
    format!("{NAMESPACES}/{name}")
}

fn cm_path(namespace: &str, name: &str) -> String {
    format!("{NAMESPACES}/{namespace}/configmaps/{name}")
}

/// The condition of `kind` in a namespace's status, if written.
fn condition<'a>(namespace: &'a Value, kind: &str) -> Option<&'a Value> {
    namespace["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// Whether the controller's conditions say content with finalizers remains.
fn finalizers_remain(namespace: &Value) -> bool {
    condition(namespace, "NamespaceFinalizersRemaining").is_some_and(|c| c["status"] == "True")
}

/// Asserts the five N7 conditions as (type, status, reason, message), in any order, each with
/// a lastTransitionTime.
fn assert_conditions(namespace: &Value, expected: &[(&str, &str, &str, &str)]) {
    let conditions = namespace["status"]["conditions"]
        .as_array()
        .unwrap_or_else(|| panic!("no conditions: {namespace}"));
    assert_eq!(conditions.len(), 5, "{namespace}");
    for (kind, status, reason, message) in expected {
        let found = condition(namespace, kind)
            .unwrap_or_else(|| panic!("no {kind} condition: {namespace}"));
        assert_eq!(
            (
                found["status"].as_str(),
                found["reason"].as_str(),
                found["message"].as_str()
            ),
            (Some(*status), Some(*reason), Some(*message)),
            "condition {kind}"
        );
        assert!(found["lastTransitionTime"].is_string(), "{found}");
    }
}

const DISCOVERY_OK: (&str, &str, &str, &str) = (
    "NamespaceDeletionDiscoveryFailure",
    "False",
    "ResourcesDiscovered",
    "All resources successfully discovered",
);
const PARSING_OK: (&str, &str, &str, &str) = (
    "NamespaceDeletionGroupVersionParsingFailure",
    "False",
    "ParsedGroupVersions",
    "All legacy kube types successfully parsed",
);
const CONTENT_DELETED: (&str, &str, &str, &str) = (
    "NamespaceDeletionContentFailure",
    "False",
    "ContentDeleted",
    "All content successfully deleted, may be waiting on finalization",
);

// ----- scenarios ---------------------------------------------------------------------------

/// 37. N4.2/N4.3/N5: DELETE answers 200 with the Terminating Namespace (no grace period even
/// when asked for one); a second DELETE is a no-op; creates are refused with
/// NamespaceTerminating, updates are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s37_namespace_delete() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let created = http.create_namespace("t").await;
    // Content with a finalizer holds the namespace while the controller runs.
    http.create_cm("t", "held", &["example.com/x"]).await;

    let body = http
        .delete(&format!("{}?gracePeriodSeconds=30", ns_path("t")))
        .await
        .expect(200);
    assert_eq!(body["kind"], "Namespace", "{body}");
    assert_eq!(body["apiVersion"], "v1", "{body}");
    assert_eq!(body["status"]["phase"], "Terminating", "{body}");
    assert!(body["metadata"]["deletionTimestamp"].is_string(), "{body}");
    assert!(
        body["metadata"].get("deletionGracePeriodSeconds").is_none(),
        "{body}"
    );
    assert!(body["metadata"].get("generation").is_none(), "{body}");
    assert_eq!(body["spec"]["finalizers"], json!(["kubernetes"]), "{body}");
    assert_eq!(body["metadata"]["uid"], created["metadata"]["uid"]);
    assert!(rv(&body) > rv(&created));

    // Let the controller finish its pass (conditions written, content marked terminating).
    let settled = http
        .poll(&ns_path("t"), "reported", finalizers_remain)
        .await;
    let mut watch = http
        .watch(
            &format!("{NAMESPACES}?fieldSelector=metadata.name%3Dt"),
            rv(&settled),
        )
        .await;
    http.namespace_controller_caught_up().await;
    watch.expect_quiet(&http).await;
    let current = http.get(&ns_path("t")).await.expect(200);
    let again = http.delete(&ns_path("t")).await.expect(200);
    assert_eq!(
        again, current,
        "a second DELETE answers the stored namespace"
    );
    assert_eq!(
        again["metadata"]["deletionTimestamp"],
        body["metadata"]["deletionTimestamp"]
    );
    http.namespace_controller_caught_up().await;
    watch.expect_quiet(&http).await;

    // N5: no new content…
    let status = http
        .post(
            "/api/v1/namespaces/t/configmaps",
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "new"}}),
        )
        .await
        .expect(403);
    assert_eq!(
        status,
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "configmaps \"new\" is forbidden: unable to create new content in namespace t because it is being terminated",
            "reason": "Forbidden",
            "details": {
                "name": "new",
                "kind": "configmaps",
                "causes": [{
                    "reason": "NamespaceTerminating",
                    "message": "namespace t is being terminated",
                    "field": "metadata.namespace",
                }],
            },
            "code": 403,
        })
    );
    // …named by generateName when the name is still to be generated.
    let status = http
        .post(
            "/api/v1/namespaces/t/configmaps",
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "gen-"}}),
        )
        .await
        .expect_failure(403, "Forbidden");
    assert_eq!(
        status["message"],
        "configmaps \"gen-\" is forbidden: unable to create new content in namespace t because it is being terminated"
    );
    assert_eq!(status["details"]["name"], "gen-");
    let listed = http
        .get("/api/v1/namespaces/t/configmaps")
        .await
        .expect(200);
    assert_eq!(
        listed["items"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );

    // …but updates are allowed.
    let updated = http
        .merge_patch(
            &cm_path("t", "held"),
            &json!({"metadata": {"labels": {"updated": "yes"}}}),
        )
        .await
        .expect(200);
    assert_eq!(updated["metadata"]["labels"], json!({"updated": "yes"}));

    // Releasing the content lets the namespace go.
    http.merge_patch(
        &cm_path("t", "held"),
        &json!({"metadata": {"finalizers": null}}),
    )
    .await
    .expect(200);
    http.gone(&ns_path("t")).await;
    server.shutdown().await;
}

/// 38. N6/N7/N8: content with a finalizer keeps the namespace Terminating with the five
/// conditions saying why; removing the finalizer lets it go (DELETED).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s38_namespace_blocked_by_finalizer() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    http.create_namespace("t").await;
    http.create_cm("t", "held", &["example.com/x"]).await;
    http.create_cm("t", "plain", &[]).await;

    http.delete(&ns_path("t")).await.expect(200);
    let namespace = http
        .poll(&ns_path("t"), "reported", finalizers_remain)
        .await;
    assert_eq!(namespace["status"]["phase"], "Terminating");
    assert_conditions(
        &namespace,
        &[
            DISCOVERY_OK,
            PARSING_OK,
            CONTENT_DELETED,
            (
                "NamespaceContentRemaining",
                "True",
                "SomeResourcesRemain",
                "Some resources are remaining: configmaps. has 1 resource instances",
            ),
            (
                "NamespaceFinalizersRemaining",
                "True",
                "SomeFinalizersRemain",
                "Some content in the namespace has finalizers remaining: example.com/x in 1 resource instances",
            ),
        ],
    );
    // The content without finalizers is gone; the held one is terminating.
    http.get(&cm_path("t", "plain"))
        .await
        .expect_failure(404, "NotFound");
    let held = http.get(&cm_path("t", "held")).await.expect(200);
    assert!(held["metadata"]["deletionTimestamp"].is_string(), "{held}");

    // Still there a little later: nothing but the finalizer removal will release it.
    let mut watch = http
        .watch(
            &format!("{NAMESPACES}?fieldSelector=metadata.name%3Dt"),
            rv(&namespace),
        )
        .await;
    http.namespace_controller_caught_up().await;
    watch.expect_quiet(&http).await;
    assert_eq!(
        http.get(&ns_path("t")).await.expect(200)["status"]["phase"],
        "Terminating"
    );

    http.merge_patch(
        &cm_path("t", "held"),
        &json!({"metadata": {"finalizers": null}}),
    )
    .await
    .expect(200);
    let (before, deleted) = watch.until("DELETED").await;
    assert!(
        before.iter().all(|(kind, _)| kind == "MODIFIED"),
        "{before:?}"
    );
    assert_eq!(deleted["metadata"]["name"], "t");
    assert_eq!(deleted["status"]["phase"], "Terminating");
    http.get(&ns_path("t"))
        .await
        .expect_failure(404, "NotFound");
    server.shutdown().await;
}

/// 39. N6.3: pods go first: while a pod (held by a finalizer) remains, other content is not
/// touched; once it is gone the rest follows and the namespace goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s39_pods_first() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    http.create_namespace("t").await;
    http.post(
        "/api/v1/namespaces/t/pods",
        &json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "finalizers": ["example.com/hold"]},
            "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
        }),
    )
    .await
    .expect(201);
    let cm = http.create_cm("t", "c", &[]).await;

    http.delete(&ns_path("t")).await.expect(200);
    let namespace = http
        .poll(&ns_path("t"), "reported", finalizers_remain)
        .await;
    let content = condition(&namespace, "NamespaceContentRemaining").expect("a condition");
    assert_eq!(
        content["message"],
        "Some resources are remaining: pods. has 1 resource instances"
    );
    let pod = http.get("/api/v1/namespaces/t/pods/p").await.expect(200);
    assert!(pod["metadata"]["deletionTimestamp"].is_string(), "{pod}");
    // Never scheduled: grace 0, held only by its finalizer (PG1/PG6).
    assert_eq!(pod["metadata"]["deletionGracePeriodSeconds"], 0, "{pod}");

    // The ConfigMap is untouched while the pod remains.
    http.namespace_controller_caught_up().await;
    assert_eq!(http.get(&cm_path("t", "c")).await.expect(200), cm);

    http.merge_patch(
        "/api/v1/namespaces/t/pods/p",
        &json!({"metadata": {"finalizers": null}}),
    )
    .await
    .expect(200);
    http.gone(&ns_path("t")).await;
    http.get(&cm_path("t", "c"))
        .await
        .expect_failure(404, "NotFound");
    server.shutdown().await;
}

/// 40. N3: the system namespaces may not be deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s40_immortal_namespaces() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    for name in ["default", "kube-system", "kube-public"] {
        let body = http.delete(&ns_path(name)).await.expect(403);
        assert_eq!(
            body,
            json!({
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": format!("namespaces \"{name}\" is forbidden: this namespace may not be deleted"),
                "reason": "Forbidden",
                "details": {"name": name, "kind": "namespaces"},
                "code": 403,
            })
        );
        let namespace = http.get(&ns_path(name)).await.expect(200);
        assert_eq!(namespace["status"]["phase"], "Active", "{namespace}");
        assert!(namespace["metadata"].get("deletionTimestamp").is_none());
    }
    server.shutdown().await;
}

/// 41. N1/N8: with the controller held back, a plain PUT cannot change spec.finalizers;
/// `PUT …/finalize` with none left removes the terminating namespace (200 + Namespace,
/// DELETED). `/finalize` checks names (FN3) and does not remove a live namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s41_finalize_subresource() {
    // The controller only acts on a namespace an hour after it starts terminating
    // (`--namespace-deletion-delay`), which stands for "controller stopped".
    let server = TestServer::start_with(|config| {
        config.namespace_controller.deletion_delay = Duration::from_secs(3600);
    })
    .await;
    let http = Http::new(&server);
    http.create_namespace("t").await;
    let live = http.create_namespace("live").await;

    // /finalize on a live namespace changes spec.finalizers but removes nothing.
    let mut request = live.clone();
    request["spec"]["finalizers"] = json!([]);
    let body = http
        .put(&format!("{}/finalize", ns_path("live")), &request)
        .await
        .expect(200);
    assert!(
        body["spec"]["finalizers"]
            .as_array()
            .is_none_or(Vec::is_empty),
        "{body}"
    );
    http.get(&ns_path("live")).await.expect(200);

    let terminating = http.delete(&ns_path("t")).await.expect(200);
    // The one fixed wait left: the delay holds every namespace back alike, so no sentinel
    // namespace could be handled first to prove the controller got past `t`.
    tokio::time::sleep(QUIET).await;
    let stored = http.get(&ns_path("t")).await.expect(200);
    assert_eq!(stored, terminating, "the controller is held back");

    // A plain PUT cannot change spec.finalizers: the stored value is restored.
    let mut request = stored.clone();
    request["spec"]["finalizers"] = json!([]);
    request["metadata"]["labels"]["touched"] = json!("yes");
    let body = http.put(&ns_path("t"), &request).await.expect(200);
    assert_eq!(body["spec"]["finalizers"], json!(["kubernetes"]), "{body}");
    assert_eq!(body["metadata"]["labels"]["touched"], "yes", "{body}");
    assert_eq!(body["status"]["phase"], "Terminating", "{body}");
    // That write does not bring the held-back controller forward (its delay holds for every
    // event): no conditions, nothing finalized.
    tokio::time::sleep(QUIET).await;
    assert_eq!(http.get(&ns_path("t")).await.expect(200), body);

    // FN3 on spec.finalizers.
    let mut request = body.clone();
    request["spec"]["finalizers"] = json!(["kubernetes", "foo"]);
    let status = http
        .put(&format!("{}/finalize", ns_path("t")), &request)
        .await
        .expect_failure(422, "Invalid");
    assert!(
        status["message"]
            .as_str()
            .unwrap_or_default()
            .ends_with("spec.finalizers[1]: Invalid value: \"foo\": name is neither a standard finalizer name nor is it fully qualified"),
        "{status}"
    );

    let mut watch = http
        .watch(
            &format!("{NAMESPACES}?fieldSelector=metadata.name%3Dt"),
            rv(&body),
        )
        .await;
    let mut request = body.clone();
    request["spec"]["finalizers"] = json!([]);
    let finalized = http
        .put(&format!("{}/finalize", ns_path("t")), &request)
        .await
        .expect(200);
    assert_eq!(finalized["kind"], "Namespace", "{finalized}");
    assert!(
        finalized["spec"]["finalizers"]
            .as_array()
            .is_none_or(Vec::is_empty),
        "{finalized}"
    );
    let (kind, deleted) = watch.next().await;
    assert_eq!(kind, "DELETED", "{deleted}");
    assert_eq!(deleted["metadata"]["name"], "t");
    http.get(&ns_path("t"))
        .await
        .expect_failure(404, "NotFound");
    // Nothing after the DELETED (the sentinel re-creates `t`, the one name this watch sees).
    watch.expect_quiet(&http).await;
    server.shutdown().await;
}

/// 42. N4.1: a wrong uid precondition is a 409 in the storage layer's words; nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s42_namespace_uid_precondition() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let created = http.create_namespace("t").await;
    let uid = created["metadata"]["uid"].as_str().expect("a uid");

    let body = http
        .delete_with(&ns_path("t"), &json!({"preconditions": {"uid": "wrong"}}))
        .await
        .expect(409);
    assert_eq!(
        body,
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": format!("Operation cannot be fulfilled on namespaces \"t\": Precondition failed: UID in precondition: wrong, UID in object meta: {uid}"),
            "reason": "Conflict",
            "details": {"name": "t", "kind": "namespaces"},
            "code": 409,
        })
    );
    assert_eq!(http.get(&ns_path("t")).await.expect(200), created);

    // N4.2: dryRun answers as the real request would, and changes nothing.
    let body = http
        .delete(&format!("{}?dryRun=All", ns_path("t")))
        .await
        .expect(200);
    assert_eq!(body["status"]["phase"], "Terminating", "{body}");
    assert!(body["metadata"]["deletionTimestamp"].is_string(), "{body}");
    assert_eq!(http.get(&ns_path("t")).await.expect(200), created);

    let body = http
        .delete_with(&ns_path("t"), &json!({"preconditions": {"uid": uid}}))
        .await
        .expect(200);
    assert_eq!(body["status"]["phase"], "Terminating", "{body}");
    server.shutdown().await;
}

/// 47. N2: namespaces have no DELETECOLLECTION.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s47_namespaces_have_no_deletecollection() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    http.create_namespace("t").await;
    let before = http.get(NAMESPACES).await.expect(200);
    http.delete(NAMESPACES)
        .await
        .expect_failure(405, "MethodNotAllowed");
    let after = http.get(NAMESPACES).await.expect(200);
    assert_eq!(after["items"], before["items"]);
    server.shutdown().await;
}

/// W3 for namespaces, and the controller's speed: an empty namespace goes well within 2 s of
/// its DELETE: MODIFIED (Terminating) → MODIFIED (conditions) … → DELETED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_namespace_is_gone_within_two_seconds() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let created = http.create_namespace("t").await;
    let mut watch = http
        .watch(
            &format!("{NAMESPACES}?fieldSelector=metadata.name%3Dt"),
            rv(&created),
        )
        .await;

    let started = Instant::now();
    let body = http.delete(&ns_path("t")).await.expect(200);
    let (before, deleted) = watch.until("DELETED").await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "took {took:?}");

    let kinds: Vec<&str> = before.iter().map(|(kind, _)| kind.as_str()).collect();
    assert!(
        kinds.len() >= 2 && kinds.iter().all(|k| *k == "MODIFIED"),
        "{kinds:?}"
    );
    assert_eq!(
        before[0].1, body,
        "the first MODIFIED is the DELETE's write"
    );
    assert_conditions(
        &before[before.len() - 1].1,
        &[
            DISCOVERY_OK,
            PARSING_OK,
            CONTENT_DELETED,
            (
                "NamespaceContentRemaining",
                "False",
                "ContentRemoved",
                "All content successfully removed",
            ),
            (
                "NamespaceFinalizersRemaining",
                "False",
                "ContentHasNoFinalizers",
                "All content-preserving finalizers finished",
            ),
        ],
    );
    assert_eq!(deleted["metadata"]["name"], "t");
    assert!(rv(&deleted) > rv(&before[before.len() - 1].1));
    http.get(&ns_path("t"))
        .await
        .expect_failure(404, "NotFound");
    // Nothing after the DELETED (the sentinel re-creates `t`, the one name this watch sees).
    watch.expect_quiet(&http).await;
    server.shutdown().await;
}

/// N4.2/N4.4/N8: GC finalizers from the DELETE options land in metadata.finalizers (202 for
/// orphanDependents=false) and hold the namespace after the controller has finalized it. It
/// goes when they are removed by an update, or by a DELETE whose policy drops them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n8_metadata_finalizers_hold_a_finalized_namespace() {
    // The garbage collector would remove the GC finalizers this scenario is about.
    let server = TestServer::start_with(|config| config.garbage_collector = false).await;
    let http = Http::new(&server);
    http.create_namespace("orphaned").await;
    http.create_namespace("foreground").await;

    let body = http
        .delete(&format!("{}?propagationPolicy=Orphan", ns_path("orphaned")))
        .await
        .expect(200);
    assert_eq!(body["metadata"]["finalizers"], json!(["orphan"]), "{body}");
    let body = http
        .delete_with(&ns_path("foreground"), &json!({"orphanDependents": false}))
        .await
        .expect(202);
    assert_eq!(
        body["metadata"]["finalizers"],
        json!(["foregroundDeletion"]),
        "{body}"
    );

    let finalized = |ns: &Value| {
        ns["spec"]["finalizers"]
            .as_array()
            .is_none_or(Vec::is_empty)
    };
    for name in ["orphaned", "foreground"] {
        http.poll(&ns_path(name), "finalized", finalized).await;
    }
    // Nothing removes them while their metadata finalizers remain.
    http.namespace_controller_caught_up().await;

    // An update removing the last metadata finalizer removes the namespace (U7 + N8).
    let namespace = http.get(&ns_path("orphaned")).await.expect(200);
    assert_eq!(namespace["status"]["phase"], "Terminating");
    let body = http
        .merge_patch(
            &ns_path("orphaned"),
            &json!({"metadata": {"finalizers": null}}),
        )
        .await
        .expect(200);
    assert_eq!(body["kind"], "Namespace", "{body}");
    http.get(&ns_path("orphaned"))
        .await
        .expect_failure(404, "NotFound");

    // N4.4: once spec.finalizers is empty a DELETE is the generic one: Background drops
    // foregroundDeletion (P6) and the namespace is removed, answered with the Namespace.
    let namespace = http.get(&ns_path("foreground")).await.expect(200);
    let body = http
        .delete(&format!(
            "{}?propagationPolicy=Background",
            ns_path("foreground")
        ))
        .await
        .expect(200);
    assert_eq!(body["kind"], "Namespace", "{body}");
    assert_eq!(body["metadata"]["uid"], namespace["metadata"]["uid"]);
    http.get(&ns_path("foreground"))
        .await
        .expect_failure(404, "NotFound");
    server.shutdown().await;
}

/// The next watcher event, within [`WAIT`], failing on a watcher error.
async fn next_event<S>(events: &mut S) -> Event<ConfigMap>
where
    S: futures::Stream<Item = Result<Event<ConfigMap>, watcher::Error>> + Unpin,
{
    within(WAIT, events.next())
        .await
        .expect("the watcher stream does not end")
        .unwrap_or_else(|e| panic!("watcher error: {e}"))
}

/// A kube-rs `watcher` sees a ConfigMap with a finalizer turn terminating (Apply, finalizer
/// and deletionTimestamp present) and then, when the finalizer is removed, Delete with the
/// last stored state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_watcher_sees_terminating_then_deleted() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    http.create_namespace("t").await;
    let api: Api<ConfigMap> = Api::namespaced(server.client.clone(), "t");
    let mut events = watcher::watcher(api.clone(), watcher::Config::default()).boxed();
    assert!(matches!(next_event(&mut events).await, Event::Init));
    assert!(matches!(next_event(&mut events).await, Event::InitDone));

    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "w", "finalizers": ["example.com/x"]},
        "data": {"k": "v"},
    }))
    .expect("a ConfigMap");
    within(WAIT, api.create(&PostParams::default(), &cm))
        .await
        .expect("create");
    let Event::Apply(added) = next_event(&mut events).await else {
        panic!("expected Apply for the create")
    };
    assert_eq!(added.name_any(), "w");

    within(WAIT, api.delete("w", &Default::default()))
        .await
        .expect("delete");
    let Event::Apply(terminating) = next_event(&mut events).await else {
        panic!("expected Apply for the terminating ConfigMap")
    };
    assert!(terminating.meta().deletion_timestamp.is_some());
    assert_eq!(terminating.finalizers(), ["example.com/x"]);

    let remove: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/finalizers", "value": ["example.com/x"]},
        {"op": "remove", "path": "/metadata/finalizers"},
    ]))
    .expect("a JSON patch");
    within(
        WAIT,
        api.patch("w", &PatchParams::default(), &Patch::Json::<()>(remove)),
    )
    .await
    .expect("remove the finalizer");
    let Event::Delete(deleted) = next_event(&mut events).await else {
        panic!("expected Delete after the finalizer removal")
    };
    assert_eq!(deleted.name_any(), "w");
    assert_eq!(deleted.finalizers(), ["example.com/x"]);
    assert_eq!(
        deleted.meta().deletion_timestamp,
        terminating.meta().deletion_timestamp
    );
    assert_eq!(deleted.data, terminating.data);
    assert!(
        deleted
            .resource_version()
            .and_then(|v| v.parse::<i64>().ok())
            > terminating
                .resource_version()
                .and_then(|v| v.parse::<i64>().ok())
    );
    server.shutdown().await;
}
