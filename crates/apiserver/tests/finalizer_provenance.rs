//! Finalizer provenance (issue 11): the server records who added each finalizer, and when,
//! beside the object — no extra watch event, kept across a restart, gone with the finalizer —
//! and a `DeletionReview` shows it. Against an in-process server over HTTPS, with kube-rs
//! logged in as a named user by a client certificate signed by the cluster CA.

mod common;

use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use common::raw::{Http, rv};
use common::{TestServer, WAIT, within};
use finale_apiserver::pki::Pki;
use finale_apiserver::registry::provenance;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const REVIEWS: &str = "/apis/deletion.finale.dev/v1alpha1/deletionreviews";
const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

/// A kube-rs client that logs in as `user` with a client certificate from the cluster CA.
async fn client_as(data_dir: &Path, server: &TestServer, user: &str) -> kube::Client {
    let pki = Pki::load_or_create(data_dir, &[]).expect("load the PKI");
    let (cert, key) = pki
        .issue_client_certificate(user, &["team-a"])
        .expect("issue a client certificate");
    let ca = std::fs::read(data_dir.join("pki").join("ca.crt")).expect("read the CA");
    let kubeconfig = format!(
        "apiVersion: v1
kind: Config
clusters:
- name: finale
  cluster:
    server: https://{addr}
    certificate-authority-data: {ca}
users:
- name: {user}
  user:
    client-certificate-data: {cert}
    client-key-data: {key}
contexts:
- name: finale
  context: {{cluster: finale, user: {user}}}
current-context: finale
",
        addr = server.running.local_addr,
        ca = STANDARD.encode(ca),
        cert = STANDARD.encode(cert),
        key = STANDARD.encode(key),
    );
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&kubeconfig).expect("a kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("a client configuration");
    kube::Client::try_from(config).expect("a kube client")
}

/// The `Finalizer` causes of a review of ConfigMap default/`name`, by finalizer.
async fn finalizer_evidence(http: &Http, name: &str) -> Vec<(String, Value)> {
    let review = json!({"apiVersion": "deletion.finale.dev/v1alpha1", "kind": "DeletionReview",
        "spec": {"target": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default",
            "name": name}}});
    let status = http.post(REVIEWS, &review).await.expect(201)["status"].clone();
    let mut found: Vec<(String, Value)> = status["causes"]
        .as_array()
        .unwrap_or_else(|| panic!("the review has causes: {status:#}"))
        .iter()
        .map(|cause| {
            (
                cause["evidence"]["finalizer"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                cause["evidence"].clone(),
            )
        })
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

fn added_at_is_recent(evidence: &Value) {
    let added = evidence["addedAt"]
        .as_str()
        .unwrap_or_else(|| panic!("addedAt is recorded: {evidence}"));
    let added = chrono::DateTime::parse_from_rfc3339(added).expect("addedAt is RFC 3339");
    let age = chrono::Utc::now() - added.with_timezone(&chrono::Utc);
    assert!(
        age >= chrono::Duration::seconds(-1) && age < chrono::Duration::seconds(60),
        "addedAt is when the finalizer was added: {evidence}"
    );
}

#[tokio::test]
async fn who_added_each_finalizer_is_recorded_beside_the_object_and_explained() {
    let server = TestServer::start().await;
    let data_dir = server.dir.path().join("data");
    let http = Http::new(&server);
    // alice and bob (group team-a) edit in default.
    common::grant_in_namespace(&server.running, "default", "team-a", "edit").await;
    let alice = client_as(&data_dir, &server, "alice").await;
    let bob = client_as(&data_dir, &server, "bob").await;
    let start_rv = rv(&http.get(CONFIGMAPS).await.expect(200));
    let mut watch = http.watch(CONFIGMAPS, start_rv).await;

    // Given alice creates a ConfigMap with a finalizer, and bob adds a second one by a patch,
    let alices: Api<ConfigMap> = Api::namespaced(alice, "default");
    let mut held = ConfigMap::default();
    held.metadata.name = Some("held".into());
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    let created = within(WAIT, alices.create(&PostParams::default(), &held))
        .await
        .expect("alice creates the ConfigMap");
    let bobs: Api<ConfigMap> = Api::namespaced(bob, "default");
    let patched = within(
        WAIT,
        bobs.patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"finalizers": ["example.com/hold", "example.com/audit"]}}),
            ),
        ),
    )
    .await
    .expect("bob adds a finalizer");

    // then a watcher sees exactly the two writes of the object: the records beside it make
    // no event of their own (the sentinel comes right after them).
    let events = watch.drain(&http).await;
    let rv_of = |cm: &ConfigMap| {
        cm.metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<i64>().ok())
            .expect("a resourceVersion")
    };
    assert_eq!(
        events,
        [
            ("ADDED".to_string(), "held".to_string(), rv_of(&created)),
            ("MODIFIED".to_string(), "held".to_string(), rv_of(&patched)),
        ]
    );
    // The object itself carries nothing new.
    let stored = http.get(&format!("{CONFIGMAPS}/held")).await.expect(200);
    assert!(
        !stored.to_string().contains("alice"),
        "provenance is not written into the object: {stored}"
    );

    // When the ConfigMap is deleted, then its review says who added each finalizer, and when.
    http.delete(&format!("{CONFIGMAPS}/held")).await.expect(200);
    let check = |found: &[(String, Value)]| {
        assert_eq!(found.len(), 2, "{found:#?}");
        let (audit, hold) = (&found[0], &found[1]);
        assert_eq!(audit.0, "example.com/audit");
        assert_eq!(audit.1["addedBy"], "bob", "{:#}", audit.1);
        added_at_is_recent(&audit.1);
        assert_eq!(hold.0, "example.com/hold");
        assert_eq!(hold.1["addedBy"], "alice", "{:#}", hold.1);
        added_at_is_recent(&hold.1);
        // kube-rs sends no User-Agent, so none is recorded (kubectl's is: see the CLI tests).
        assert!(hold.1.get("addedByUserAgent").is_none(), "{:#}", hold.1);
    };
    let before = finalizer_evidence(&http, "held").await;
    check(&before);

    // And after a restart the record is still there, unchanged.
    let server = server.restart_with(|_| {}).await;
    let http = Http::new(&server);
    let after = finalizer_evidence(&http, "held").await;
    check(&after);
    assert_eq!(before, after);

    // When the finalizers go, their entries go with them, and the record with the last one.
    let side_key = provenance::side_key("/registry/core/configmaps/default/held");
    let record = |server: &TestServer| {
        let store = std::sync::Arc::clone(server.registry().store());
        let key = side_key.clone();
        async move {
            store
                .get(key.as_bytes())
                .await
                .expect("read the record")
                .0
                .map(|kv| serde_json::from_slice::<Value>(&kv.value).expect("a JSON record"))
        }
    };
    let present = record(&server).await.expect("a record exists");
    assert_eq!(
        present["finalizers"].as_object().map(|m| m.len()),
        Some(2),
        "{present}"
    );
    http.merge_patch(
        &format!("{CONFIGMAPS}/held"),
        &json!({"metadata": {"finalizers": ["example.com/audit"]}}),
    )
    .await
    .expect(200);
    let left = record(&server).await.expect("a record remains");
    let names: Vec<&String> = left["finalizers"].as_object().unwrap().keys().collect();
    assert_eq!(names, ["example.com/audit"], "{left}");
    http.merge_patch(
        &format!("{CONFIGMAPS}/held"),
        &json!({"metadata": {"finalizers": []}}),
    )
    .await
    .expect(200);
    http.get(&format!("{CONFIGMAPS}/held")).await.expect(404);
    assert_eq!(
        record(&server).await,
        None,
        "the record goes with the object"
    );
    server.shutdown().await;
}
