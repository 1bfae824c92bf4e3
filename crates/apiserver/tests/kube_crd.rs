//! Custom resources through kube-rs, the way operators use them: a derived CRD installed with
//! server-side apply, `await_condition` until Established, then CRUD, status, scale, schema
//! pruning/defaulting/validation, discovery, and CRD deletion taking its instances with it.

mod common;

use common::{TestServer, WAIT, api_status, apply_crd, create_namespace, within};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{CustomResource, CustomResourceExt, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
#[kube(
    group = "example.com",
    version = "v1",
    kind = "Widget",
    namespaced,
    shortname = "wd",
    status = "WidgetStatus",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".spec.replicas")
)]
pub struct WidgetSpec {
    pub replicas: i32,
    pub color: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
pub struct WidgetStatus {
    pub replicas: i32,
    pub selector: Option<String>,
}

const CRD_NAME: &str = "widgets.example.com";

async fn install(server: &TestServer) -> Api<CustomResourceDefinition> {
    apply_crd(&server.client, Widget::crd(), "widget-operator").await
}

fn widget(name: &str, replicas: i32) -> Widget {
    Widget::new(
        name,
        WidgetSpec {
            replicas,
            color: None,
        },
    )
}

#[tokio::test]
async fn derived_crd_installs_with_apply_and_becomes_established() {
    let server = TestServer::start().await;
    let crds = install(&server).await;
    let crd = crds.get(CRD_NAME).await.expect("get the CRD");
    let status = crd.status.expect("status is set");
    let names = status.accepted_names.expect("acceptedNames");
    assert_eq!(names.kind, "Widget");
    assert_eq!(names.list_kind.as_deref(), Some("WidgetList"));
    assert_eq!(names.short_names, Some(vec!["wd".to_string()]));
    assert_eq!(status.stored_versions, Some(vec!["v1".to_string()]));
    let conditions = status.conditions.unwrap_or_default();
    let by_type = |t: &str| {
        conditions
            .iter()
            .find(|c| c.type_ == t)
            .unwrap_or_else(|| panic!("condition {t}"))
    };
    assert_eq!(by_type("NamesAccepted").status, "True");
    assert_eq!(
        by_type("NamesAccepted").reason.as_deref(),
        Some("NoConflicts")
    );
    assert_eq!(by_type("Established").status, "True");
    assert_eq!(
        by_type("Established").reason.as_deref(),
        Some("InitialNamesAccepted")
    );
    // Server defaults (§8.2).
    assert_eq!(
        crd.spec.conversion.map(|c| c.strategy),
        Some("None".to_string())
    );
    assert_eq!(crd.spec.names.singular.as_deref(), Some("widget"));

    // Operators apply their CRD on every start: the second apply changes nothing.
    let before = crds.get(CRD_NAME).await.expect("get").resource_version();
    let again = crds
        .patch(
            CRD_NAME,
            &PatchParams::apply("widget-operator").force(),
            &Patch::Apply(Widget::crd()),
        )
        .await
        .expect("re-apply");
    assert_eq!(again.resource_version(), before);
    server.shutdown().await;
}

#[tokio::test]
async fn discovery_tracks_the_crd_both_ways() {
    let server = TestServer::start().await;
    let crds = install(&server).await;
    let discovery = kube::Discovery::new(server.client.clone())
        .run()
        .await
        .expect("legacy discovery");
    let group = discovery
        .get("example.com")
        .expect("example.com is discovered");
    let (resource, caps) = group.recommended_kind("Widget").expect("Widget kind");
    assert_eq!(resource.plural, "widgets");
    assert!(
        caps.subresources
            .iter()
            .any(|(r, _)| r.plural == "widgets/status" || r.plural == "status")
    );
    let aggregated = kube::Discovery::new(server.client.clone())
        .run_aggregated()
        .await
        .expect("aggregated discovery");
    assert!(aggregated.has_group("example.com"));

    crds.delete(CRD_NAME, &DeleteParams::default())
        .await
        .expect("delete the CRD");
    within(WAIT, async {
        loop {
            // A discovery racing the removal may see the group listed and its version
            // gone (404); that is the moment in between, so look again.
            let discovery = kube::Discovery::new(server.client.clone()).run().await;
            if discovery.is_ok_and(|d| !d.has_group("example.com")) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
    server.shutdown().await;
}

#[tokio::test]
async fn custom_resources_support_crud_status_and_generation() {
    let server = TestServer::start().await;
    install(&server).await;
    create_namespace(&server.client, "team").await;
    let widgets: Api<Widget> = Api::namespaced(server.client.clone(), "team");

    let created = widgets
        .create(&PostParams::default(), &widget("w1", 2))
        .await
        .expect("create");
    assert_eq!(created.metadata.generation, Some(1));
    assert!(created.status.is_none(), "status is not settable on create");

    let listed = widgets.list(&ListParams::default()).await.expect("list");
    assert_eq!(listed.items.len(), 1);

    // Status through SSA on /status, as kube-rs controllers do: no generation bump.
    let status = json!({"apiVersion": "example.com/v1", "kind": "Widget",
                        "status": {"replicas": 2, "selector": "app=w1"}});
    let patched = widgets
        .patch_status(
            "w1",
            &PatchParams::apply("widget-operator"),
            &Patch::Apply(&status),
        )
        .await
        .expect("apply status");
    assert_eq!(patched.status.as_ref().map(|s| s.replicas), Some(2));
    assert_eq!(patched.metadata.generation, Some(1));

    // The main endpoint ignores .status and bumps generation on spec changes only.
    let mut changed = patched.clone();
    changed.spec.replicas = 3;
    changed.status = Some(WidgetStatus {
        replicas: 99,
        selector: None,
    });
    let replaced = widgets
        .replace("w1", &PostParams::default(), &changed)
        .await
        .expect("replace");
    assert_eq!(replaced.metadata.generation, Some(2));
    assert_eq!(replaced.status.as_ref().map(|s| s.replicas), Some(2));
    let labelled = widgets
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .expect("label");
    assert_eq!(labelled.metadata.generation, Some(2));

    widgets
        .delete("w1", &DeleteParams::default())
        .await
        .expect("delete");
    api_status(widgets.get("w1").await);
    server.shutdown().await;
}

#[tokio::test]
async fn scale_subresource_reads_and_writes_the_spec_path() {
    let server = TestServer::start().await;
    install(&server).await;
    create_namespace(&server.client, "team").await;
    let widgets: Api<Widget> = Api::namespaced(server.client.clone(), "team");
    widgets
        .create(&PostParams::default(), &widget("w1", 2))
        .await
        .expect("create");
    widgets
        .patch_status(
            "w1",
            &PatchParams::apply("widget-operator"),
            &Patch::Apply(json!({"apiVersion": "example.com/v1", "kind": "Widget",
                                 "status": {"replicas": 1, "selector": "app=w1"}})),
        )
        .await
        .expect("status");

    let scale = widgets.get_scale("w1").await.expect("get scale");
    assert_eq!(scale.spec.as_ref().and_then(|s| s.replicas), Some(2));
    let status = scale.status.expect("scale status");
    assert_eq!(status.replicas, 1);
    assert_eq!(status.selector.as_deref(), Some("app=w1"));

    let scaled = widgets
        .patch_scale(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .expect("patch scale");
    assert_eq!(scaled.spec.and_then(|s| s.replicas), Some(5));
    assert_eq!(widgets.get("w1").await.expect("get").spec.replicas, 5);

    let mut scale = widgets.get_scale("w1").await.expect("get scale");
    scale.spec = Some(k8s_openapi::api::autoscaling::v1::ScaleSpec { replicas: Some(7) });
    widgets
        .replace_scale("w1", &PostParams::default(), &scale)
        .await
        .expect("replace scale");
    let stored = widgets.get("w1").await.expect("get");
    assert_eq!(stored.spec.replicas, 7);
    assert_eq!(stored.metadata.generation, Some(3));

    let negative = widgets
        .patch_scale(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": -1}})),
        )
        .await;
    assert_eq!(api_status(negative).code, 422);
    server.shutdown().await;
}

#[tokio::test]
async fn deleting_the_crd_deletes_its_instances_then_itself() {
    let server = TestServer::start().await;
    let crds = install(&server).await;
    create_namespace(&server.client, "team").await;
    let widgets: Api<Widget> = Api::namespaced(server.client.clone(), "team");
    for i in 0..5 {
        widgets
            .create(&PostParams::default(), &widget(&format!("w{i}"), 1))
            .await
            .expect("create");
    }
    // One instance is held by a finalizer of its own.
    widgets
        .patch(
            "w0",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/hold"]}})),
        )
        .await
        .expect("add finalizer");

    let deleted = crds
        .delete(CRD_NAME, &DeleteParams::default())
        .await
        .expect("delete the CRD");
    let terminating = deleted
        .left()
        .expect("the CRD stays while instances remain");
    assert!(terminating.metadata.deletion_timestamp.is_some());
    assert!(
        terminating
            .finalizers()
            .iter()
            .any(|f| f == "customresourcecleanup.apiextensions.k8s.io")
    );

    // Instances without finalizers go; w0 waits for its finalizer; new instances are refused.
    within(WAIT, async {
        loop {
            let names: Vec<String> = widgets
                .list(&ListParams::default())
                .await
                .expect("list")
                .items
                .iter()
                .map(ResourceExt::name_any)
                .collect();
            if names == ["w0"] {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
    let refused = widgets
        .create(&PostParams::default(), &widget("late", 1))
        .await;
    let status = api_status(refused);
    assert_eq!(status.code, 405);
    assert!(status.message.contains("terminating"), "{}", status.message);
    let crd = crds.get(CRD_NAME).await.expect("CRD still there");
    let terminating_condition = crd
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Terminating")
        .expect("Terminating condition");
    assert_eq!(terminating_condition.status, "True");

    // Releasing the last instance lets the CRD go, and its routes with it.
    widgets
        .patch(
            "w0",
            &PatchParams::default(),
            &Patch::Json::<()>(json_patch::Patch(vec![json_patch::PatchOperation::Remove(
                json_patch::RemoveOperation {
                    path: "/metadata/finalizers".parse().expect("pointer"),
                },
            )])),
        )
        .await
        .expect("release w0");
    within(WAIT, async {
        loop {
            if crds.get_opt(CRD_NAME).await.expect("get").is_none() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
    let gone = widgets.list(&ListParams::default()).await;
    assert_eq!(api_status(gone).code, 404);
    server.shutdown().await;
}

#[tokio::test]
async fn unknown_fields_are_pruned_or_rejected_under_strict_validation() {
    let server = TestServer::start().await;
    install(&server).await;
    create_namespace(&server.client, "team").await;
    let raw = common::raw::Http::new(&server);
    let body = json!({"apiVersion": "example.com/v1", "kind": "Widget",
                      "metadata": {"name": "w1"},
                      "spec": {"replicas": 1, "bogus": true}});
    let strict = raw
        .post(
            "/apis/example.com/v1/namespaces/team/widgets?fieldValidation=Strict",
            &body,
        )
        .await
        .expect_failure(400, "BadRequest");
    assert!(
        strict["message"]
            .as_str()
            .is_some_and(|m| m.contains("unknown field \"spec.bogus\"")),
        "{strict}"
    );
    let created = raw
        .post("/apis/example.com/v1/namespaces/team/widgets", &body)
        .await
        .expect(201);
    assert_eq!(created["spec"], json!({"replicas": 1}));

    // A value of the wrong type is a 422 naming the field.
    let wrong = json!({"apiVersion": "example.com/v1", "kind": "Widget",
                       "metadata": {"name": "w2"}, "spec": {"replicas": "many"}});
    let invalid = raw
        .post("/apis/example.com/v1/namespaces/team/widgets", &wrong)
        .await
        .expect_failure(422, "Invalid");
    assert!(
        invalid["message"]
            .as_str()
            .is_some_and(|m| m.contains("spec.replicas")),
        "{invalid}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn custom_resource_finalizers_without_a_domain_draw_a_warning() {
    let server = TestServer::start().await;
    install(&server).await;
    create_namespace(&server.client, "team").await;
    let raw = common::raw::Http::new(&server);
    let reply = raw
        .post(
            "/apis/example.com/v1/namespaces/team/widgets",
            &json!({"apiVersion": "example.com/v1", "kind": "Widget",
                    "metadata": {"name": "w1", "finalizers": ["cleanup", "example.com/ok"]},
                    "spec": {"replicas": 1}}),
        )
        .await;
    let warnings = reply.warnings.clone();
    reply.expect(201);
    assert_eq!(
        warnings,
        vec![
            r#"299 - "metadata.finalizers: \"cleanup\": prefer a domain-qualified finalizer name to avoid accidental conflicts with other finalizer writers""#.to_string(),
            // Finale's own: no FinalizerClaim covers either finalizer.
            r#"299 - "finalizer cleanup is not claimed by any controller; nothing may ever remove it""#.to_string(),
            r#"299 - "finalizer example.com/ok is not claimed by any controller; nothing may ever remove it""#.to_string(),
        ]
    );
    server.shutdown().await;
}

/// U8: a custom resource's `/status` takes only `.status`, so it cannot remove finalizers.
#[tokio::test]
async fn custom_resource_status_writes_cannot_remove_finalizers() {
    let server = TestServer::start().await;
    install(&server).await;
    create_namespace(&server.client, "team").await;
    let widgets: Api<Widget> = Api::namespaced(server.client.clone(), "team");
    let mut held = widget("w1", 1);
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    widgets
        .create(&PostParams::default(), &held)
        .await
        .expect("create");
    widgets
        .delete("w1", &DeleteParams::default())
        .await
        .expect("delete");
    let mut current = widgets.get("w1").await.expect("get");
    current.metadata.finalizers = None;
    current.metadata.labels = Some([("a".to_string(), "b".to_string())].into());
    current.status = Some(WidgetStatus {
        replicas: 1,
        selector: None,
    });
    let written = widgets
        .replace_status("w1", &PostParams::default(), &current)
        .await
        .expect("replace status");
    assert_eq!(written.finalizers(), ["example.com/hold".to_string()]);
    assert!(written.metadata.labels.is_none());
    assert_eq!(written.status.map(|s| s.replicas), Some(1));
    server.shutdown().await;
}

/// A CRD with two served versions (conversion `None`): objects are stored in the storage
/// version and served in whichever version is asked for, in reads, lists and watches; a
/// cluster-scoped CRD is served without namespaces.
#[tokio::test]
async fn versions_share_objects_and_cluster_scope_works() {
    let server = TestServer::start().await;
    let raw = common::raw::Http::new(&server);
    let schema = json!({"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}}});
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gears.example.com"},
        "spec": {"group": "example.com", "scope": "Cluster",
                 "names": {"kind": "Gear", "plural": "gears"},
                 "versions": [
                     {"name": "v1beta1", "served": true, "storage": false, "schema": schema},
                     {"name": "v1", "served": true, "storage": true, "schema": schema}]}});
    raw.post(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &crd,
    )
    .await
    .expect(201);
    let crds: Api<CustomResourceDefinition> = Api::all(server.client.clone());
    within(
        WAIT,
        await_condition(
            crds.clone(),
            "gears.example.com",
            conditions::is_crd_established(),
        ),
    )
    .await
    .expect("established");
    let stored = crds.get("gears.example.com").await.expect("get");
    assert_eq!(
        stored.status.and_then(|s| s.stored_versions),
        Some(vec!["v1".to_string()])
    );

    let mut watch = raw.watch("/apis/example.com/v1beta1/gears", 0).await;
    let created = raw
        .post(
            "/apis/example.com/v1beta1/gears",
            &json!({"apiVersion": "example.com/v1beta1", "kind": "Gear",
                    "metadata": {"name": "g1"}, "spec": {"size": 2}}),
        )
        .await
        .expect(201);
    assert_eq!(created["apiVersion"], "example.com/v1beta1");
    assert!(created["metadata"].get("namespace").is_none(), "{created}");
    let (kind, event) = watch.next().await;
    assert_eq!(
        (kind.as_str(), &event["apiVersion"]),
        ("ADDED", &json!("example.com/v1beta1"))
    );

    let as_v1 = raw.get("/apis/example.com/v1/gears/g1").await.expect(200);
    assert_eq!(as_v1["apiVersion"], "example.com/v1");
    assert_eq!(as_v1["spec"], json!({"size": 2}));
    let list = raw.get("/apis/example.com/v1beta1/gears").await.expect(200);
    assert_eq!(list["apiVersion"], "example.com/v1beta1");
    assert_eq!(list["items"].as_array().map(Vec::len), Some(1));

    // An update through v1 is seen by the v1beta1 watcher in its own version.
    let mut changed = as_v1.clone();
    changed["spec"]["size"] = json!(3);
    raw.put("/apis/example.com/v1/gears/g1", &changed)
        .await
        .expect(200);
    let (kind, event) = watch.next().await;
    assert_eq!(kind, "MODIFIED");
    assert_eq!(event["apiVersion"], "example.com/v1beta1");
    assert_eq!(event["spec"]["size"], 3);
    // Namespaced paths do not exist for a cluster-scoped kind.
    raw.get("/apis/example.com/v1/namespaces/default/gears")
        .await
        .expect_failure(404, "NotFound");
    server.shutdown().await;
}
