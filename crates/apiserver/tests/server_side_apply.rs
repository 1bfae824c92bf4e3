//! Server-side apply over HTTP and through kube-rs (api-surface §6.6): upsert, ownership in
//! `managedFields`, removal of fields a manager stops applying, conflicts and `force`.

mod common;

use common::raw::{Http, Reply};
use common::{TestServer, api_status};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

const CM: &str = "/api/v1/namespaces/default/configmaps";

async fn apply(http: &Http, name: &str, query: &str, body: &Value) -> Reply {
    http.send(
        reqwest::Method::PATCH,
        &format!("{CM}/{name}?{query}"),
        "application/apply-patch+yaml",
        Some(body),
    )
    .await
}

fn config(data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm1"}, "data": data})
}

fn managers(object: &Value) -> Vec<(String, String)> {
    object["metadata"]["managedFields"]
        .as_array()
        .map(|entries| {
            entries
                .iter()
                .map(|e| {
                    (
                        e["manager"].as_str().unwrap_or_default().to_string(),
                        e["operation"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn apply_creates_then_updates_and_records_ownership() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let created = apply(
        &http,
        "cm1",
        "fieldManager=alice",
        &config(json!({"a": "1", "b": "2"})),
    )
    .await
    .expect(201);
    assert_eq!(created["data"], json!({"a": "1", "b": "2"}));
    let entry = &created["metadata"]["managedFields"][0];
    assert_eq!(entry["manager"], "alice");
    assert_eq!(entry["operation"], "Apply");
    assert_eq!(entry["apiVersion"], "v1");
    assert_eq!(entry["fieldsType"], "FieldsV1");
    assert_eq!(entry["fieldsV1"], json!({"f:data": {"f:a": {}, "f:b": {}}}));

    // Re-applying without `b` removes it: alice owned it alone.
    let updated = apply(
        &http,
        "cm1",
        "fieldManager=alice",
        &config(json!({"a": "1"})),
    )
    .await
    .expect(200);
    assert_eq!(updated["data"], json!({"a": "1"}));

    // Applying the same configuration again stores nothing new.
    let again = apply(
        &http,
        "cm1",
        "fieldManager=alice",
        &config(json!({"a": "1"})),
    )
    .await
    .expect(200);
    assert_eq!(
        again["metadata"]["resourceVersion"],
        updated["metadata"]["resourceVersion"]
    );
    server.shutdown().await;
}

#[tokio::test]
async fn conflicting_managers_get_409_until_force() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    apply(
        &http,
        "cm1",
        "fieldManager=alice",
        &config(json!({"a": "1"})),
    )
    .await
    .expect(201);
    // Same value: shared ownership, no conflict.
    let shared = apply(&http, "cm1", "fieldManager=bob", &config(json!({"a": "1"})))
        .await
        .expect(200);
    assert_eq!(
        managers(&shared),
        [
            ("alice".into(), "Apply".into()),
            ("bob".into(), "Apply".into())
        ]
    );

    let status = apply(
        &http,
        "cm1",
        "fieldManager=carol",
        &config(json!({"a": "2"})),
    )
    .await
    .expect_failure(409, "Conflict");
    assert_eq!(
        status["message"],
        "Apply failed with 2 conflicts: conflicts with \"alice\":\n- .data.a\nconflicts with \"bob\":\n- .data.a"
    );
    assert_eq!(status["details"]["name"], "cm1");
    assert_eq!(status["details"]["kind"], "configmaps");
    assert_eq!(
        status["details"]["causes"][0],
        json!({"reason": "FieldManagerConflict", "message": "conflict with \"alice\"", "field": ".data.a"})
    );
    let stored = http.get(&format!("{CM}/cm1")).await.expect(200);
    assert_eq!(stored["data"]["a"], "1", "a conflict changes nothing");

    let forced = apply(
        &http,
        "cm1",
        "fieldManager=carol&force=true",
        &config(json!({"a": "2"})),
    )
    .await
    .expect(200);
    assert_eq!(forced["data"]["a"], "2");
    assert_eq!(managers(&forced), [("carol".into(), "Apply".into())]);
    server.shutdown().await;
}

#[tokio::test]
async fn apply_request_errors_match_upstream() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let status = apply(&http, "cm1", "", &config(json!({"a": "1"})))
        .await
        .expect_failure(422, "Invalid");
    assert_eq!(
        status["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
    );
    assert_eq!(
        status["details"]["causes"][0]["reason"],
        "FieldValueRequired"
    );
    // The body must name the URL's kind, and any name it gives must be the URL's.
    apply(
        &http,
        "cm1",
        "fieldManager=a",
        &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "cm1"}}),
    )
    .await
    .expect_failure(400, "BadRequest");
    apply(&http, "other", "fieldManager=a", &config(json!({})))
        .await
        .expect_failure(400, "BadRequest");
    http.get(&format!("{CM}/cm1"))
        .await
        .expect_failure(404, "NotFound");

    // force belongs to apply alone.
    apply(&http, "cm1", "fieldManager=a", &config(json!({"a": "1"})))
        .await
        .expect(201);
    let status = http
        .send(
            reqwest::Method::PATCH,
            &format!("{CM}/cm1?force=true"),
            "application/merge-patch+json",
            Some(&json!({"data": {"a": "2"}})),
        )
        .await
        .expect_failure(422, "Invalid");
    assert!(
        status["message"].as_str().is_some_and(
            |m| m.contains("force: Forbidden: may not be specified for non-apply patch")
        ),
        "{status}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn kube_rs_apply_with_nulls_and_updates_by_other_writers() {
    let server = TestServer::start().await;
    let config_maps: Api<ConfigMap> = Api::namespaced(server.client.clone(), "default");
    let params = PatchParams::apply("controller");
    // kube-rs sends explicit nulls for unset Option fields: they are "unset", not stored.
    let applied = config_maps
        .patch(
            "cm1",
            &params,
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": "cm1", "labels": null},
                                 "data": {"a": "1"}, "binaryData": null})),
        )
        .await
        .expect("apply creates");
    assert!(applied.metadata.labels.is_none());
    assert!(applied.binary_data.is_none());

    // A merge patch by another writer takes the field it changed (an Update entry)…
    config_maps
        .patch(
            "cm1",
            &PatchParams {
                field_manager: Some("editor".into()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"data": {"a": "edited"}})),
        )
        .await
        .expect("merge patch");
    // …so the controller's next apply without force conflicts, and with force wins.
    let conflict = config_maps
        .patch(
            "cm1",
            &params,
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": "cm1"}, "data": {"a": "1"}})),
        )
        .await;
    let status = api_status(conflict);
    assert_eq!(status.code, 409);
    assert_eq!(
        status.message,
        "Apply failed with 1 conflict: conflict with \"editor\" using v1: .data.a"
    );
    let forced = config_maps
        .patch(
            "cm1",
            &params.clone().force(),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": "cm1"}, "data": {"a": "1"}})),
        )
        .await
        .expect("forced apply");
    assert_eq!(
        forced.data.and_then(|d| d.get("a").cloned()).as_deref(),
        Some("1")
    );
    server.shutdown().await;
}

/// `dryRun=All` answers as the real apply would and stores nothing; `fieldValidation=Strict`
/// applies to patches too, on the patched result.
#[tokio::test]
async fn dry_run_and_strict_validation_apply_to_patches() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let answer = apply(
        &http,
        "cm1",
        "fieldManager=alice&dryRun=All",
        &config(json!({"a": "1"})),
    )
    .await
    .expect(201);
    assert_eq!(answer["data"], json!({"a": "1"}));
    http.get(&format!("{CM}/cm1"))
        .await
        .expect_failure(404, "NotFound");

    apply(
        &http,
        "cm1",
        "fieldManager=alice",
        &config(json!({"a": "1"})),
    )
    .await
    .expect(201);
    let status = http
        .send(
            reqwest::Method::PATCH,
            &format!("{CM}/cm1?fieldValidation=Strict"),
            "application/merge-patch+json",
            Some(&json!({"bogus": {"x": 1}})),
        )
        .await
        .expect_failure(400, "BadRequest");
    assert!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.contains("unknown field \"bogus\"")),
        "{status}"
    );
    let stored = http.get(&format!("{CM}/cm1")).await.expect(200);
    assert!(stored.get("bogus").is_none(), "{stored}");
    server.shutdown().await;
}
