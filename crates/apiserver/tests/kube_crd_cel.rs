//! CRD validation rules (`x-kubernetes-validations`, CEL) through kube-rs: a CRD derived with
//! kube-derive's `#[x_kube(validation = …)]` rules, objects that pass and fail them on create,
//! replace, patch and the status subresource, a transition rule, `messageExpression`, `reason`
//! with `fieldPath`, and a CRD whose rule does not compile refused at create.

mod common;

use common::{TestServer, api_status, apply_crd, create_namespace, kubectl};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// A Gadget: `min <= max`, an immutable `name` (a transition rule), a `size` whose message is
/// computed, and a `tier` rule reported as Forbidden at `spec.tier`.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default)]
#[kube(
    group = "cel.example.com",
    version = "v1",
    kind = "Gadget",
    namespaced,
    status = "GadgetStatus"
)]
#[x_kube(validation = Rule::new("self.min <= self.max").message("min must not exceed max"))]
#[x_kube(validation = Rule::new("self.name == oldSelf.name").message("name is immutable"))]
#[x_kube(
    validation = Rule::new("self.tier != 'gold' || self.max <= 5")
        .message("gold gadgets have at most 5")
        .reason(Reason::FieldValueForbidden)
        .field_path(".tier")
)]
pub struct GadgetSpec {
    pub name: String,
    pub min: i32,
    pub max: i32,
    #[x_kube(validation = Rule::new("self <= 10").message(Message::Expression("'size ' + string(self) + ' exceeds 10'".into())))]
    pub size: i32,
    pub tier: String,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default)]
#[x_kube(validation = Rule::new("self.ready <= self.total").message("ready exceeds total"))]
pub struct GadgetStatus {
    pub ready: i32,
    pub total: i32,
}

const CRD_NAME: &str = "gadgets.cel.example.com";
const NAMESPACE: &str = "cel";

async fn install(server: &TestServer) {
    apply_crd(&server.client, Gadget::crd(), "gadget-operator").await;
    create_namespace(&server.client, NAMESPACE).await;
}

fn gadget(object_name: &str, min: i32, max: i32, size: i32) -> Gadget {
    Gadget::new(
        object_name,
        GadgetSpec {
            name: "first".into(),
            min,
            max,
            size,
            tier: "basic".into(),
        },
    )
}

#[tokio::test]
async fn rules_accept_good_objects_and_refuse_bad_ones_with_upstreams_422() {
    let server = TestServer::start().await;
    install(&server).await;
    let gadgets: Api<Gadget> = Api::namespaced(server.client.clone(), NAMESPACE);
    let post = PostParams::default();

    gadgets
        .create(&post, &gadget("good", 1, 2, 3))
        .await
        .expect("a Gadget within its rules is created");

    let status = api_status(gadgets.create(&post, &gadget("bad", 3, 2, 3)).await);
    assert_eq!(status.code, 422);
    assert_eq!(status.reason, "Invalid");
    assert_eq!(
        status.message,
        "Gadget.cel.example.com \"bad\" is invalid: spec: Invalid value: \"object\": min must not exceed max"
    );
    let causes = status
        .details
        .as_ref()
        .map(|d| d.causes.clone())
        .unwrap_or_default();
    assert_eq!(causes.len(), 1);
    assert_eq!(causes[0].reason, "FieldValueInvalid");
    assert_eq!(causes[0].field, "spec");
    assert_eq!(
        causes[0].message,
        "Invalid value: \"object\": min must not exceed max"
    );

    // messageExpression on a property: the computed message, at the property, with its type.
    let status = api_status(gadgets.create(&post, &gadget("big", 1, 2, 12)).await);
    assert_eq!(
        status.message,
        "Gadget.cel.example.com \"big\" is invalid: spec.size: Invalid value: \"integer\": size 12 exceeds 10"
    );

    // reason and fieldPath: a Forbidden cause at spec.tier.
    let mut gold = gadget("gold", 1, 9, 1);
    gold.spec.tier = "gold".into();
    let status = api_status(gadgets.create(&post, &gold).await);
    assert_eq!(
        status.message,
        "Gadget.cel.example.com \"gold\" is invalid: spec.tier: Forbidden: gold gadgets have at most 5"
    );
    let causes = status.details.map(|d| d.causes).unwrap_or_default();
    assert_eq!(causes[0].reason, "FieldValueForbidden");
    assert_eq!(causes[0].field, "spec.tier");

    // A merge patch ends in the same write path.
    let status = api_status(
        gadgets
            .patch(
                "good",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"min": 5}})),
            )
            .await,
    );
    assert_eq!(status.code, 422);
    assert!(
        status
            .message
            .ends_with("spec: Invalid value: \"object\": min must not exceed max"),
        "{}",
        status.message
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_transition_rule_allows_create_and_refuses_a_change_on_update() {
    let server = TestServer::start().await;
    install(&server).await;
    let gadgets: Api<Gadget> = Api::namespaced(server.client.clone(), NAMESPACE);

    let created = gadgets
        .create(&PostParams::default(), &gadget("g1", 1, 2, 3))
        .await
        .expect("create: the transition rule does not run");

    // Changing another field keeps the name: allowed.
    let mut wider = created.clone();
    wider.spec.max = 4;
    let replaced = gadgets
        .replace("g1", &PostParams::default(), &wider)
        .await
        .expect("an update that keeps the name");

    let mut renamed = replaced.clone();
    renamed.spec.name = "second".into();
    let status = api_status(
        gadgets
            .replace("g1", &PostParams::default(), &renamed)
            .await,
    );
    assert_eq!(status.code, 422);
    assert_eq!(
        status.message,
        "Gadget.cel.example.com \"g1\" is invalid: spec: Invalid value: \"object\": name is immutable"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn status_rules_run_on_the_status_subresource() {
    let server = TestServer::start().await;
    install(&server).await;
    let gadgets: Api<Gadget> = Api::namespaced(server.client.clone(), NAMESPACE);
    gadgets
        .create(&PostParams::default(), &gadget("s1", 1, 2, 3))
        .await
        .expect("create");
    gadgets
        .patch_status(
            "s1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": 1, "total": 2}})),
        )
        .await
        .expect("a status within its rule");
    let status = api_status(
        gadgets
            .patch_status(
                "s1",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"ready": 3}})),
            )
            .await,
    );
    assert_eq!(status.code, 422);
    assert_eq!(
        status.message,
        "Gadget.cel.example.com \"s1\" is invalid: status: Invalid value: \"object\": ready exceeds total"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_crd_whose_rule_does_not_compile_is_refused() {
    let server = TestServer::start().await;
    let crds: Api<CustomResourceDefinition> = Api::all(server.client.clone());
    let mut crd = serde_json::to_value(Gadget::crd()).expect("the CRD as JSON");
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"] =
        json!([{"rule": "self.min <"}]);
    let crd: CustomResourceDefinition = serde_json::from_value(crd).expect("still a CRD");
    let status = api_status(crds.create(&PostParams::default(), &crd).await);
    assert_eq!(status.code, 422);
    let expected = "CustomResourceDefinition.apiextensions.k8s.io \"gadgets.cel.example.com\" is invalid: \
        spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: Invalid value: \
        apiextensions.ValidationRule{Rule:\"self.min <\", Message:\"\", MessageExpression:\"\", \
        Reason:(*apiextensions.FieldValueErrorReason)(nil), FieldPath:\"\", OptionalOldSelf:(*bool)(nil)}: \
        compilation failed: ERROR: <input>:1:";
    assert!(status.message.starts_with(expected), "{}", status.message);
    assert!(
        crds.get_opt(CRD_NAME).await.expect("get").is_none(),
        "nothing was stored"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn kubectl_apply_shows_the_rules_message() {
    let server = TestServer::start().await;
    install(&server).await;
    let manifest = |max: i32| {
        format!(
            "apiVersion: cel.example.com/v1\nkind: Gadget\nmetadata:\n  name: k1\n  namespace: {NAMESPACE}\n\
             spec:\n  name: first\n  min: 3\n  max: {max}\n  size: 1\n  tier: basic\n"
        )
    };
    let file = server.dir.path().join("gadget.yaml");
    std::fs::write(&file, manifest(2)).expect("write the manifest");
    let path = file.to_string_lossy().into_owned();
    let (applied, stdout, stderr) = kubectl(&server, &["apply", "-f", &path]).await;
    assert!(!applied, "the rule refuses it: {stdout}");
    assert!(
        stderr.contains(
            "The Gadget \"k1\" is invalid: spec: Invalid value: \"object\": min must not exceed max"
        ),
        "{stderr}"
    );
    std::fs::write(&file, manifest(4)).expect("write the manifest");
    let (applied, stdout, stderr) = kubectl(&server, &["apply", "-f", &path]).await;
    assert!(applied, "a Gadget within its rules applies: {stderr}");
    assert!(
        stdout.contains("gadget.cel.example.com/k1 created"),
        "{stdout}"
    );
    server.shutdown().await;
}
