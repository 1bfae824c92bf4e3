//! Admission webhooks for real: a test webhook server on 127.0.0.1 with its own CA
//! ([`common::webhook`]), reached by URL and by Service reference (a Service and its
//! Endpoints pointing at the loopback port). The server records every `AdmissionReview` it
//! gets, so "not called" is proved by the record after a later request that is called.
//! Their audit annotations, and ValidatingAdmissionPolicies', are read back from a real
//! audit log.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use common::raw::Http;
use common::webhook::TlsWebhook;
use common::{TestServer, WAIT, config_map, expect_api_error, within};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};
use tokio::net::TcpListener;

/// The test webhook server ([`common::webhook::TlsWebhook`]) answering as [`answer`] does.
struct WebhookServer(TlsWebhook);

impl WebhookServer {
    /// The base64 `caBundle` of this server's CA.
    fn ca_bundle(&self) -> String {
        self.0.ca_bundle()
    }

    fn url(&self, path: &str) -> String {
        self.0.url(path)
    }

    /// The path and the review's `request` of every call, in call order.
    fn calls(&self) -> Vec<(String, Value)> {
        self.0
            .calls()
            .into_iter()
            .map(|(path, review)| (path, review["request"].clone()))
            .collect()
    }

    /// The names in the requests sent to `path`, in order.
    fn names_at(&self, path: &str) -> Vec<String> {
        self.calls()
            .into_iter()
            .filter(|(p, _)| p == path)
            .map(|(_, request)| {
                let name = request["name"].as_str().unwrap_or_default();
                if name.is_empty() {
                    request["object"]["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string()
                } else {
                    name.to_string()
                }
            })
            .collect()
    }

    async fn start() -> WebhookServer {
        WebhookServer(
            TlsWebhook::start(Arc::new(|path, review| Box::pin(answer(path, review)))).await,
        )
    }
}

/// The test webhook's behaviour, by path.
async fn answer(path: String, review: Value) -> Value {
    let request = review["request"].clone();
    let uid = request["uid"].clone();
    let labels = request["object"]["metadata"]["labels"].clone();
    let patch = |ops: Vec<Value>| {
        base64::engine::general_purpose::STANDARD
            .encode(serde_json::to_vec(&ops).unwrap_or_default())
    };
    let add_label = |key: &str, value: &str| {
        if labels.is_object() {
            json!({"op": "add", "path": format!("/metadata/labels/{key}"), "value": value})
        } else {
            json!({"op": "add", "path": "/metadata/labels", "value": {key: value}})
        }
    };
    let response = match path.as_str() {
        "/deny" => json!({"uid": uid, "allowed": false,
            "status": {"code": 403, "reason": "Forbidden", "message": "no thanks"}}),
        "/warn" => json!({"uid": uid, "allowed": true, "warnings": ["webhook says hi"]}),
        // Allows, with audit annotations (one whose key is not a qualified name).
        "/annotate" => json!({"uid": uid, "allowed": true,
            "auditAnnotations": {"checked": "yes", "bad key!": "dropped"}}),
        "/sleep" => {
            tokio::time::sleep(Duration::from_secs(5)).await;
            json!({"uid": uid, "allowed": true})
        }
        // Mutating, reinvocable: adds `a`; once `b` is there too, records that it saw it.
        "/add-a" => {
            let op = if labels.get("a").is_none() {
                add_label("a", "1")
            } else if labels.get("b").is_some() {
                add_label("a-saw-b", "true")
            } else {
                return respond(json!({"uid": uid, "allowed": true}));
            };
            json!({"uid": uid, "allowed": true, "patchType": "JSONPatch", "patch": patch(vec![op])})
        }
        "/add-b" => {
            json!({"uid": uid, "allowed": true, "patchType": "JSONPatch",
                "patch": patch(vec![add_label("b", "1")])})
        }
        // Allows and is recorded: the selector tests' witness.
        _ => json!({"uid": uid, "allowed": true}),
    };
    respond(response)
}

fn respond(response: Value) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

/// One webhook entry.
fn webhook(name: &str, client_config: Value, rules: Value) -> Value {
    json!({
        "name": name,
        "clientConfig": client_config,
        "rules": rules,
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    })
}

fn configmap_rules(operations: &[&str]) -> Value {
    json!([{"operations": operations, "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}])
}

async fn create_configuration(http: &Http, kind: &str, name: &str, webhooks: Vec<Value>) {
    let plural = match kind {
        "MutatingWebhookConfiguration" => "mutatingwebhookconfigurations",
        _ => "validatingwebhookconfigurations",
    };
    http.post(
        &format!("/apis/admissionregistration.k8s.io/v1/{plural}"),
        &json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
            "metadata": {"name": name}, "webhooks": webhooks}),
    )
    .await
    .expect(201);
}

fn cm_body(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_validating_webhook_denies_a_create_and_nothing_is_stored() {
    let hooks = WebhookServer::start().await;
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let client_config = json!({"url": hooks.url("/deny"), "caBundle": hooks.ca_bundle()});
    create_configuration(
        &http,
        "ValidatingWebhookConfiguration",
        "deny",
        vec![webhook(
            "deny.example.com",
            client_config,
            configmap_rules(&["CREATE"]),
        )],
    )
    .await;

    // kube-rs sees upstream's Status: the webhook's code and reason, the prefixed message.
    let api: Api<ConfigMap> = Api::default_namespaced(server.client.clone());
    let status = expect_api_error(
        within(
            WAIT,
            api.create(&PostParams::default(), &config_map("refused", &[])),
        )
        .await,
        403,
        "Forbidden",
    );
    assert_eq!(
        status.message,
        "admission webhook \"deny.example.com\" denied the request: no thanks"
    );
    http.get("/api/v1/namespaces/default/configmaps/refused")
        .await
        .expect_failure(404, "NotFound");

    // The review as upstream builds it.
    let calls = hooks.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    let (path, request) = &calls[0];
    assert_eq!(path, "/deny");
    assert_eq!(request["operation"], "CREATE");
    assert_eq!(
        request["kind"],
        json!({"group": "", "version": "v1", "kind": "ConfigMap"})
    );
    assert_eq!(
        request["resource"],
        json!({"group": "", "version": "v1", "resource": "configmaps"})
    );
    assert_eq!(request["namespace"], "default");
    assert_eq!(request["name"], "refused");
    assert_eq!(request["dryRun"], false);
    assert_eq!(request["options"]["kind"], "CreateOptions");
    assert_eq!(request["object"]["metadata"]["name"], "refused");
    assert!(request["oldObject"].is_null(), "{request}");
    assert!(
        request["userInfo"]["username"]
            .as_str()
            .is_some_and(|u| !u.is_empty()),
        "{request}"
    );

    // Other operations and kinds are not the webhook's.
    http.post(
        "/api/v1/namespaces/default/secrets",
        &json!({"metadata": {"name": "s"}}),
    )
    .await
    .expect(201);
    assert_eq!(hooks.calls().len(), 1);

    // Upstream's metrics count the rejection.
    let metrics = http.get("/metrics").await.expect(200);
    let text = metrics.as_str().unwrap_or_default();
    assert!(
        text.lines().any(
            |l| l.starts_with("apiserver_admission_webhook_rejection_count{")
                && l.contains("name=\"deny.example.com\"")
                && l.contains("error_type=\"no_error\"")
                && l.contains("rejection_code=\"403\"")
        ),
        "{text}"
    );
    assert!(
        text.contains("apiserver_admission_webhook_admission_duration_seconds_bucket{"),
        "{text}"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutating_webhook_adds_labels_and_is_reinvoked_if_needed() {
    let hooks = WebhookServer::start().await;
    let server = TestServer::start().await;
    let http = Http::new(&server);
    // `a` is reached by Service reference: a Service in `hooks` whose Endpoints name the
    // loopback port; TLS verifies `webhook.hooks.svc`.
    http.post(
        "/api/v1/namespaces",
        &json!({"metadata": {"name": "hooks"}}),
    )
    .await
    .expect(201);
    http.post(
        "/api/v1/namespaces/hooks/services",
        &json!({"metadata": {"name": "webhook"}, "spec": {"ports": [{"port": 443, "targetPort": 9443}]}}),
    )
    .await
    .expect(201);
    http.post(
        "/api/v1/namespaces/hooks/endpoints",
        &json!({"metadata": {"name": "webhook"}, "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"port": hooks.0.port}]}]}),
    )
    .await
    .expect(201);
    let mut first = webhook(
        "add-a.example.com",
        json!({"service": {"namespace": "hooks", "name": "webhook", "path": "/add-a"}, "caBundle": hooks.ca_bundle()}),
        configmap_rules(&["CREATE"]),
    );
    first["reinvocationPolicy"] = json!("IfNeeded");
    create_configuration(
        &http,
        "MutatingWebhookConfiguration",
        "a-first",
        vec![first],
    )
    .await;
    let second = webhook(
        "add-b.example.com",
        json!({"url": hooks.url("/add-b"), "caBundle": hooks.ca_bundle()}),
        configmap_rules(&["CREATE"]),
    );
    create_configuration(
        &http,
        "MutatingWebhookConfiguration",
        "b-second",
        vec![second],
    )
    .await;

    let created = http
        .post(
            "/api/v1/namespaces/default/configmaps",
            &cm_body("mutated", json!({"own": "x"})),
        )
        .await
        .expect(201);
    let stored = http
        .get("/api/v1/namespaces/default/configmaps/mutated")
        .await
        .expect(200);
    for object in [&created, &stored] {
        let labels = &object["metadata"]["labels"];
        assert_eq!(labels["own"], "x", "{object}");
        assert_eq!(labels["a"], "1", "{object}");
        assert_eq!(labels["b"], "1", "{object}");
        // `a` ran again after `b` changed the object, and saw `b`'s label.
        assert_eq!(labels["a-saw-b"], "true", "{object}");
    }
    let order: Vec<String> = hooks.calls().into_iter().map(|(p, _)| p).collect();
    assert_eq!(order, vec!["/add-a", "/add-b", "/add-a"]);
    // The server kept its own identity fields whatever the webhooks saw.
    assert!(
        stored["metadata"]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty())
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_is_sent_to_a_webhook_that_denies_it_and_the_object_stays() {
    let hooks = WebhookServer::start().await;
    let server = TestServer::start().await;
    let http = Http::new(&server);
    http.post(
        "/api/v1/namespaces/default/configmaps",
        &cm_body("kept", json!({})),
    )
    .await
    .expect(201);
    create_configuration(
        &http,
        "ValidatingWebhookConfiguration",
        "no-deletes",
        vec![webhook(
            "no-deletes.example.com",
            json!({"url": hooks.url("/deny"), "caBundle": hooks.ca_bundle()}),
            configmap_rules(&["DELETE"]),
        )],
    )
    .await;
    let refused = http
        .delete("/api/v1/namespaces/default/configmaps/kept")
        .await
        .expect_failure(403, "Forbidden");
    assert_eq!(
        refused["message"],
        "admission webhook \"no-deletes.example.com\" denied the request: no thanks"
    );
    http.get("/api/v1/namespaces/default/configmaps/kept")
        .await
        .expect(200);
    let (_, request) = hooks.calls().pop().expect("the webhook was called");
    assert_eq!(request["operation"], "DELETE");
    assert_eq!(request["name"], "kept");
    assert!(request["object"].is_null(), "{request}");
    assert_eq!(request["oldObject"]["metadata"]["name"], "kept");
    assert_eq!(request["options"]["kind"], "DeleteOptions");

    // DELETECOLLECTION asks per item, naming none (as upstream), and keeps them too.
    http.delete("/api/v1/namespaces/default/configmaps")
        .await
        .expect_failure(403, "Forbidden");
    http.get("/api/v1/namespaces/default/configmaps/kept")
        .await
        .expect(200);
    let (_, request) = hooks.calls().pop().expect("called for the collection");
    assert_eq!(request["name"], "");
    assert_eq!(request["oldObject"]["metadata"]["name"], "kept");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_validating_webhook_can_refuse_a_finalizer_removal() {
    let hooks = WebhookServer::start().await;
    let server = TestServer::start().await;
    let http = Http::new(&server);
    http.post(
        "/api/v1/namespaces/default/configmaps",
        &json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}),
    )
    .await
    .expect(201);
    http.delete("/api/v1/namespaces/default/configmaps/held")
        .await
        .expect(200);
    create_configuration(
        &http,
        "ValidatingWebhookConfiguration",
        "guard",
        vec![webhook(
            "guard.example.com",
            json!({"url": hooks.url("/deny"), "caBundle": hooks.ca_bundle()}),
            configmap_rules(&["UPDATE"]),
        )],
    )
    .await;
    http.merge_patch(
        "/api/v1/namespaces/default/configmaps/held",
        &json!({"metadata": {"finalizers": null}}),
    )
    .await
    .expect_failure(403, "Forbidden");
    let still = http
        .get("/api/v1/namespaces/default/configmaps/held")
        .await
        .expect(200);
    assert_eq!(still["metadata"]["finalizers"], json!(["example.com/hold"]));
    let (_, request) = hooks.calls().pop().expect("called for the update");
    assert_eq!(request["operation"], "UPDATE");
    assert_eq!(
        request["oldObject"]["metadata"]["finalizers"],
        json!(["example.com/hold"])
    );

    // The deletion explanation names the webhook as what keeps the finalizer.
    let review = http
        .post(
            "/apis/deletion.finale.dev/v1alpha1/deletionreviews",
            &json!({"apiVersion": "deletion.finale.dev/v1alpha1", "kind": "DeletionReview",
                "spec": {"target": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default", "name": "held"}}}),
        )
        .await
        .expect(201);
    let status = &review["status"];
    assert_eq!(status["verdict"], "Stuck", "{status:#}");
    let cause = &status["causes"][0];
    assert_eq!(cause["state"], "Stuck", "{status:#}");
    assert_eq!(
        cause["evidence"]["removalRefusedBy"], "admission webhook \"guard.example.com\"",
        "{status:#}"
    );
    assert!(
        cause["message"].as_str().is_some_and(|m| m.starts_with(
            "admission webhook \"guard.example.com\" refused the removal of finalizer example.com/hold"
        )),
        "{status:#}"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_that_is_down_fails_closed_or_open_by_its_failure_policy() {
    // A port nothing listens on.
    let closed = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = closed.local_addr().expect("address").port();
    drop(closed);
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let url = format!("https://127.0.0.1:{port}/down");
    create_configuration(
        &http,
        "ValidatingWebhookConfiguration",
        "down",
        vec![webhook(
            "down.example.com",
            json!({"url": url}),
            configmap_rules(&["CREATE"]),
        )],
    )
    .await;
    let refused = http
        .post(
            "/api/v1/namespaces/default/configmaps",
            &cm_body("blocked", json!({})),
        )
        .await
        .expect_failure(500, "InternalError");
    assert_eq!(
        refused["message"],
        format!(
            "Internal error occurred: failed calling webhook \"down.example.com\": failed to call webhook: Post \"{url}?timeout=10s\": dial tcp 127.0.0.1:{port}: connect: connection refused"
        )
    );
    http.get("/api/v1/namespaces/default/configmaps/blocked")
        .await
        .expect_failure(404, "NotFound");

    // The same webhook with failurePolicy Ignore: the write goes through, at once.
    let path = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/down";
    http.json_patch(
        path,
        &json!([{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}]),
    )
    .await
    .expect(200);
    http.post(
        "/api/v1/namespaces/default/configmaps",
        &cm_body("through", json!({})),
    )
    .await
    .expect(201);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_seconds_is_honoured() {
    let hooks = WebhookServer::start().await;
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let mut slow = webhook(
        "slow.example.com",
        json!({"url": hooks.url("/sleep"), "caBundle": hooks.ca_bundle()}),
        configmap_rules(&["CREATE"]),
    );
    slow["timeoutSeconds"] = json!(1);
    create_configuration(&http, "ValidatingWebhookConfiguration", "slow", vec![slow]).await;
    let started = Instant::now();
    let refused = http
        .post(
            "/api/v1/namespaces/default/configmaps",
            &cm_body("late", json!({})),
        )
        .await
        .expect_failure(500, "InternalError");
    let elapsed = started.elapsed();
    // The webhook sleeps 5 s; the call is abandoned after 1 s.
    assert!(elapsed < Duration::from_secs(4), "took {elapsed:?}");
    assert_eq!(
        refused["message"],
        format!(
            "Internal error occurred: failed calling webhook \"slow.example.com\": failed to call webhook: Post \"{}?timeout=1s\": context deadline exceeded",
            hooks.url("/sleep")
        )
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_and_object_selectors_decide_which_requests_are_sent() {
    let hooks = WebhookServer::start().await;
    let server = TestServer::start().await;
    let http = Http::new(&server);
    for (name, labels) in [("team-a", json!({"team": "a"})), ("team-b", json!({}))] {
        http.post(
            "/api/v1/namespaces",
            &json!({"metadata": {"name": name, "labels": labels}}),
        )
        .await
        .expect(201);
    }
    let mut by_namespace = webhook(
        "by-namespace.example.com",
        json!({"url": hooks.url("/by-namespace"), "caBundle": hooks.ca_bundle()}),
        configmap_rules(&["CREATE"]),
    );
    by_namespace["namespaceSelector"] = json!({"matchLabels": {"team": "a"}});
    let mut by_object = webhook(
        "by-object.example.com",
        json!({"url": hooks.url("/by-object"), "caBundle": hooks.ca_bundle()}),
        configmap_rules(&["CREATE", "UPDATE"]),
    );
    by_object["objectSelector"] =
        json!({"matchExpressions": [{"key": "watched", "operator": "In", "values": ["yes"]}]});
    create_configuration(
        &http,
        "ValidatingWebhookConfiguration",
        "selectors",
        vec![by_namespace, by_object],
    )
    .await;

    // Not matched first, then the sentinel that is: the record then proves the first
    // request was never sent.
    http.post(
        "/api/v1/namespaces/team-b/configmaps",
        &cm_body("in-b", json!({})),
    )
    .await
    .expect(201);
    http.post(
        "/api/v1/namespaces/team-a/configmaps",
        &cm_body("in-a", json!({})),
    )
    .await
    .expect(201);
    assert_eq!(hooks.names_at("/by-namespace"), vec!["in-a"]);

    http.post(
        "/api/v1/namespaces/team-b/configmaps",
        &cm_body("plain", json!({"watched": "no"})),
    )
    .await
    .expect(201);
    http.post(
        "/api/v1/namespaces/team-b/configmaps",
        &cm_body("watched", json!({"watched": "yes"})),
    )
    .await
    .expect(201);
    assert_eq!(hooks.names_at("/by-object"), vec!["watched"]);

    // An update matches when the old object's labels do, even if the new one's do not.
    http.merge_patch(
        "/api/v1/namespaces/team-b/configmaps/watched",
        &json!({"metadata": {"labels": {"watched": "no"}}}),
    )
    .await
    .expect(200);
    assert_eq!(hooks.names_at("/by-object"), vec!["watched", "watched"]);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_is_sent_only_to_webhooks_without_side_effects() {
    let hooks = WebhookServer::start().await;
    let server = TestServer::start().await;
    let http = Http::new(&server);
    // v1 refuses webhooks with side effects, as upstream does since v1beta1 went.
    let mut unsafe_hook = webhook(
        "unsafe.example.com",
        json!({"url": hooks.url("/unsafe"), "caBundle": hooks.ca_bundle()}),
        configmap_rules(&["CREATE"]),
    );
    unsafe_hook["sideEffects"] = json!("Unknown");
    let refused = http
        .post(
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
            &json!({"metadata": {"name": "unsafe"}, "webhooks": [unsafe_hook]}),
        )
        .await
        .expect_failure(422, "Invalid");
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.contains("webhooks[0].sideEffects")),
        "{refused}"
    );

    create_configuration(
        &http,
        "ValidatingWebhookConfiguration",
        "safe",
        vec![webhook(
            "safe.example.com",
            json!({"url": hooks.url("/safe"), "caBundle": hooks.ca_bundle()}),
            configmap_rules(&["CREATE"]),
        )],
    )
    .await;
    http.post(
        "/api/v1/namespaces/default/configmaps?dryRun=All",
        &cm_body("dry", json!({})),
    )
    .await
    .expect(201);
    http.get("/api/v1/namespaces/default/configmaps/dry")
        .await
        .expect_failure(404, "NotFound");
    let (path, request) = hooks.calls().pop().expect("the safe webhook was called");
    assert_eq!(path, "/safe");
    assert_eq!(request["dryRun"], true);
    assert_eq!(request["options"]["dryRun"], json!(["All"]));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warnings_from_webhooks_reach_the_client() {
    let hooks = WebhookServer::start().await;
    let server = TestServer::start().await;
    let http = Http::new(&server);
    create_configuration(
        &http,
        "ValidatingWebhookConfiguration",
        "warn",
        vec![webhook(
            "warn.example.com",
            json!({"url": hooks.url("/warn"), "caBundle": hooks.ca_bundle()}),
            configmap_rules(&["CREATE"]),
        )],
    )
    .await;
    let reply = http
        .post(
            "/api/v1/namespaces/default/configmaps",
            &cm_body("warned", json!({})),
        )
        .await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    assert_eq!(
        reply.warnings,
        vec!["299 - \"webhook says hi\"".to_string()]
    );

    // A configuration's deletion takes effect on the next request.
    http.delete("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/warn")
        .await
        .expect(200);
    let reply = http
        .post(
            "/api/v1/namespaces/default/configmaps",
            &cm_body("quiet", json!({})),
        )
        .await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    assert!(reply.warnings.is_empty(), "{:?}", reply.warnings);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subresource_rules_see_the_scale_subresource_as_a_scale() {
    let hooks = WebhookServer::start().await;
    let server = TestServer::start().await;
    let http = Http::new(&server);
    http.post(
        "/apis/apps/v1/namespaces/default/deployments",
        &json!({"metadata": {"name": "web"}, "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}}),
    )
    .await
    .expect(201);
    create_configuration(
        &http,
        "ValidatingWebhookConfiguration",
        "scale",
        vec![webhook(
            "scale.example.com",
            json!({"url": hooks.url("/scale"), "caBundle": hooks.ca_bundle()}),
            json!([{"operations": ["UPDATE"], "apiGroups": ["apps"], "apiVersions": ["v1"],
                "resources": ["deployments/scale"]}]),
        )],
    )
    .await;
    // The main resource is not `deployments/scale`: not sent (proved by the scale that is).
    http.merge_patch(
        "/apis/apps/v1/namespaces/default/deployments/web",
        &json!({"metadata": {"labels": {"touched": "yes"}}}),
    )
    .await
    .expect(200);
    http.merge_patch(
        "/apis/apps/v1/namespaces/default/deployments/web/scale",
        &json!({"spec": {"replicas": 3}}),
    )
    .await
    .expect(200);
    let calls = hooks.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    let (_, request) = &calls[0];
    assert_eq!(request["operation"], "UPDATE");
    assert_eq!(request["subResource"], "scale");
    assert_eq!(
        request["kind"],
        json!({"group": "autoscaling", "version": "v1", "kind": "Scale"})
    );
    assert_eq!(
        request["resource"],
        json!({"group": "apps", "version": "v1", "resource": "deployments"})
    );
    assert_eq!(request["object"]["spec"]["replicas"], 3, "{request}");
    assert_eq!(request["oldObject"]["spec"]["replicas"], 1, "{request}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn match_conditions_decide_calls_and_errors_follow_the_failure_policy() {
    let hooks = WebhookServer::start().await;
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let client_config = |path: &str| json!({"url": hooks.url(path), "caBundle": hooks.ca_bundle()});

    // A condition that does not parse is refused when the configuration is written.
    let mut broken = webhook(
        "broken.example.com",
        client_config("/broken"),
        configmap_rules(&["CREATE"]),
    );
    broken["matchConditions"] = json!([{"name": "bad", "expression": "object.metadata >"}]);
    let refused = http
        .post(
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
            &json!({"apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": "broken"}, "webhooks": [broken]}),
        )
        .await
        .expect_failure(422, "Invalid");
    let message = refused["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(
            "webhooks[0].matchConditions[0].expression: Invalid value: \"object.metadata >\": compilation failed: ERROR: <input>:1:"
        ),
        "{message}"
    );

    // Called only for ConfigMaps labelled team=a, created by the admin.
    let mut by_condition = webhook(
        "by-condition.example.com",
        client_config("/by-condition"),
        configmap_rules(&["CREATE"]),
    );
    by_condition["matchConditions"] = json!([
        {"name": "team-a", "expression": "has(object.metadata.labels) && has(object.metadata.labels.team) && object.metadata.labels.team == 'a'"},
        {"name": "create", "expression": "request.operation == 'CREATE' && oldObject == null"},
    ]);
    // Conditions that fail to evaluate (no `spec` in a ConfigMap): Ignore skips the webhook,
    // Fail refuses the request.
    let mut failing_open = webhook(
        "failing-open.example.com",
        client_config("/failing-open"),
        configmap_rules(&["CREATE"]),
    );
    failing_open["matchConditions"] = json!([{"name": "spec", "expression": "object.spec.x == 1"}]);
    failing_open["failurePolicy"] = json!("Ignore");
    let mut failing_closed = webhook(
        "failing-closed.example.com",
        client_config("/failing-closed"),
        configmap_rules(&["CREATE"]),
    );
    failing_closed["matchConditions"] = json!([
        {"name": "strict", "expression": "!has(object.metadata.labels) || !has(object.metadata.labels.strict) || object.spec.x == 1"}
    ]);
    create_configuration(
        &http,
        "ValidatingWebhookConfiguration",
        "conditions",
        vec![by_condition, failing_open, failing_closed],
    )
    .await;

    http.post(
        "/api/v1/namespaces/default/configmaps",
        &cm_body("team-b", json!({"team": "b"})),
    )
    .await
    .expect(201);
    http.post(
        "/api/v1/namespaces/default/configmaps",
        &cm_body("team-a", json!({"team": "a"})),
    )
    .await
    .expect(201);
    assert_eq!(hooks.names_at("/by-condition"), vec!["team-a"]);
    assert!(hooks.names_at("/failing-open").is_empty());
    assert_eq!(hooks.names_at("/failing-closed"), vec!["team-b", "team-a"]);

    let forbidden = http
        .post(
            "/api/v1/namespaces/default/configmaps",
            &cm_body("strict", json!({"strict": "yes"})),
        )
        .await
        .expect_failure(403, "Forbidden");
    assert_eq!(
        forbidden["message"],
        "configmaps \"strict\" is forbidden: expression '!has(object.metadata.labels) || !has(object.metadata.labels.strict) || object.spec.x == 1' resulted in error: no such key: spec"
    );
    assert_eq!(forbidden["details"]["kind"], "configmaps");
    assert_eq!(forbidden["details"]["name"], "strict");
    server.shutdown().await;
}

/// Admission's audit annotations reach the request's audit event, as upstream's: a webhook's
/// `auditAnnotations` as `<webhook>/<key>`; a ValidatingAdmissionPolicy's `auditAnnotations`
/// as `<policy>/<key>`, and, for a binding with the `Audit` action, the failure as
/// `validation.policy.admission.k8s.io/validation_failure`, encoded as Go's JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_audit_annotations_reach_the_audit_log() {
    let hooks = WebhookServer::start().await;
    let logs = tempfile::tempdir().expect("a temporary directory");
    let log = logs.path().join("audit.log");
    let server = TestServer::start_with(|config| {
        config.audit = Some(finale_audit::AuditLogOptions {
            path: log.clone(),
            max_size_mb: 0,
            max_backups: 0,
            max_age_days: 0,
            policy: None,
        });
    })
    .await;
    let http = Http::new(&server);
    create_configuration(
        &http,
        "ValidatingWebhookConfiguration",
        "annotating",
        vec![webhook(
            "annotate.hooks.example.com",
            json!({"url": hooks.url("/annotate"), "caBundle": hooks.ca_bundle()}),
            configmap_rules(&["CREATE"]),
        )],
    )
    .await;
    http.post(
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
        &json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "keys.example.com"},
            "spec": {
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["CREATE"], "resources": ["configmaps"]}]},
                "validations": [{"expression": "!has(object.data) || size(object.data) < 2",
                                 "message": "at most one key, < 2"}],
                "auditAnnotations": [{"key": "keys",
                    "valueExpression": "has(object.data) ? 'keys: ' + string(size(object.data)) : null"}],
            }}),
    )
    .await
    .expect(201);
    // Two bindings audit the same failure: the first (by name) is recorded, and their equal
    // annotation values are one.
    for (name, actions) in [
        ("keys-audit", json!(["Audit", "Warn"])),
        ("keys-audit-2", json!(["Audit"])),
    ] {
        http.post(
            "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
            &json!({"apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
                "spec": {"policyName": "keys.example.com", "validationActions": actions}}),
        )
        .await
        .expect(201);
    }

    let mut big = cm_body("big", json!({}));
    big["data"] = json!({"a": "1", "b": "2"});
    let reply = http
        .post("/api/v1/namespaces/default/configmaps", &big)
        .await;
    assert_eq!(
        reply.warnings,
        [
            "299 - \"Validation failed for ValidatingAdmissionPolicy 'keys.example.com' with binding 'keys-audit': at most one key, < 2\""
        ]
    );
    reply.expect(201);
    let mut small = cm_body("small", json!({}));
    small["data"] = json!({"a": "1"});
    http.post("/api/v1/namespaces/default/configmaps", &small)
        .await
        .expect(201);

    // Events are written by a background thread: wait (bounded) for the second create's.
    let created = |events: &[Value], name: &str| {
        events
            .iter()
            .find(|e| {
                e["verb"] == "create"
                    && e["objectRef"]["resource"] == "configmaps"
                    && e["objectRef"]["name"] == name
                    && e["stage"] == "ResponseComplete"
            })
            .cloned()
    };
    let events = within(WAIT, async {
        loop {
            let events: Vec<Value> = std::fs::read_to_string(&log)
                .unwrap_or_default()
                .lines()
                .map(|line| serde_json::from_str(line).expect("an audit line is JSON"))
                .collect();
            if created(&events, "small").is_some() {
                return events;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let big = created(&events, "big").expect("the audit event of the first create");
    let annotations = &big["annotations"];
    assert_eq!(
        annotations["annotate.hooks.example.com/checked"], "yes",
        "{big}"
    );
    assert!(
        annotations
            .get("annotate.hooks.example.com/bad key!")
            .is_none(),
        "{big}"
    );
    assert_eq!(annotations["keys.example.com/keys"], "keys: 2", "{big}");
    let failure = annotations["validation.policy.admission.k8s.io/validation_failure"]
        .as_str()
        .expect("a validation failure annotation");
    assert!(failure.contains("\\u003c 2"), "Go escapes '<': {failure}");
    let failure: Value = serde_json::from_str(failure).expect("a JSON list");
    assert_eq!(
        failure,
        json!([{"message": "at most one key, < 2", "policy": "keys.example.com",
                "binding": "keys-audit", "expressionIndex": 0,
                "validationActions": ["Audit", "Warn"]}])
    );
    let small = created(&events, "small").expect("the audit event of the second create");
    assert_eq!(
        small["annotations"]["keys.example.com/keys"], "keys: 1",
        "{small}"
    );
    assert!(
        small["annotations"]
            .get("validation.policy.admission.k8s.io/validation_failure")
            .is_none(),
        "{small}"
    );
    server.shutdown().await;
}
