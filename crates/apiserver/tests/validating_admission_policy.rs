//! ValidatingAdmissionPolicies evaluated by a real finale server over HTTPS, through kubectl,
//! kube-rs and raw HTTP (exact codes, bodies and `Warning` headers): upstream's replicas-limit
//! example, `messageExpression`, reasons, `Warn`, params from ConfigMaps, `variables`,
//! `matchConditions`, namespace selectors, DELETE, failure policies, and policy changes that
//! take effect on the very next request.

mod common;

use common::raw::Http;
use common::{TestServer, expect_api_error, kubectl};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

const POLICIES: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies";
const BINDINGS: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings";

fn deployment(name: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]},
            },
        },
    })
}

fn deployments(namespace: &str) -> String {
    format!("/apis/apps/v1/namespaces/{namespace}/deployments")
}

/// Upstream's documentation example: at most five replicas for Deployments.
fn replicas_policy(name: &str, extra: Value) -> Value {
    let mut spec = json!({
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [{
            "apiGroups": ["apps"], "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"], "resources": ["deployments"],
        }]},
        "validations": [{"expression": "object.spec.replicas <= 5"}],
    });
    if let (Some(spec), Value::Object(extra)) = (spec.as_object_mut(), extra) {
        spec.extend(extra);
    }
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name}, "spec": spec})
}

fn binding(name: &str, policy: &str, extra: Value) -> Value {
    let mut spec = json!({"policyName": policy, "validationActions": ["Deny"]});
    if let (Some(spec), Value::Object(extra)) = (spec.as_object_mut(), extra) {
        spec.extend(extra);
    }
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name}, "spec": spec})
}

async fn create_namespace(http: &Http, name: &str, labels: Value) {
    http.post(
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}),
    )
    .await
    .expect(201);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replicas_limit_denies_over_five_through_kubectl_kube_rs_and_http() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    create_namespace(&http, "test", json!({"environment": "test"})).await;
    create_namespace(&http, "prod", json!({"environment": "prod"})).await;
    http.post(
        POLICIES,
        &replicas_policy("demo-policy.example.com", json!({})),
    )
    .await
    .expect(201);
    let created = http
        .post(
            BINDINGS,
            &binding(
                "demo-binding-test.example.com",
                "demo-policy.example.com",
                json!({"matchResources": {"namespaceSelector": {"matchLabels": {"environment": "test"}}}}),
            ),
        )
        .await
        .expect(201);
    // Upstream's defaults are written into the stored object.
    assert_eq!(
        created["spec"]["matchResources"]["matchPolicy"],
        "Equivalent"
    );

    // kubectl: refused, with upstream's message.
    let (ok, _, stderr) = kubectl(
        &server,
        &[
            "create",
            "deployment",
            "nginx",
            "--image=nginx",
            "--replicas=6",
            "-n",
            "test",
        ],
    )
    .await;
    assert!(!ok, "kubectl created a Deployment over the limit");
    assert!(
        stderr.contains("ValidatingAdmissionPolicy 'demo-policy.example.com' with binding 'demo-binding-test.example.com' denied request: failed expression: object.spec.replicas <= 5"),
        "{stderr}"
    );
    let (ok, _, stderr) = kubectl(
        &server,
        &[
            "create",
            "deployment",
            "small",
            "--image=nginx",
            "--replicas=5",
            "-n",
            "test",
        ],
    )
    .await;
    assert!(ok, "{stderr}");

    // kube-rs: a 422 Invalid (no reason given), and the limit itself is accepted.
    let api: Api<Deployment> = Api::namespaced(server.client.clone(), "test");
    let over: Deployment = serde_json::from_value(deployment("over", 7)).expect("a Deployment");
    let status = expect_api_error(
        api.create(&PostParams::default(), &over).await,
        422,
        "Invalid",
    );
    assert_eq!(
        status.message,
        "deployments.apps \"over\" is forbidden: ValidatingAdmissionPolicy 'demo-policy.example.com' with binding 'demo-binding-test.example.com' denied request: failed expression: object.spec.replicas <= 5"
    );
    let under: Deployment = serde_json::from_value(deployment("under", 2)).expect("a Deployment");
    api.create(&PostParams::default(), &under)
        .await
        .expect("two replicas are accepted");

    // Raw HTTP: the whole Status, and an UPDATE is checked too.
    let body = http
        .post(&deployments("test"), &deployment("raw", 9))
        .await
        .expect_failure(422, "Invalid");
    assert_eq!(body["details"]["name"], "raw");
    assert_eq!(body["details"]["group"], "apps");
    assert_eq!(body["details"]["kind"], "deployments");
    assert_eq!(
        body["details"]["causes"][0]["message"],
        "ValidatingAdmissionPolicy 'demo-policy.example.com' with binding 'demo-binding-test.example.com' denied request: failed expression: object.spec.replicas <= 5"
    );
    http.merge_patch(
        &format!("{}/under", deployments("test")),
        &json!({"spec": {"replicas": 8}}),
    )
    .await
    .expect_failure(422, "Invalid");

    // The binding's namespaceSelector: another namespace is not bound.
    http.post(&deployments("prod"), &deployment("big", 9))
        .await
        .expect(201);

    // Removing the binding: the very next request passes.
    http.delete(&format!("{BINDINGS}/demo-binding-test.example.com"))
        .await
        .expect(200);
    http.post(&deployments("test"), &deployment("after", 9))
        .await
        .expect(201);

    // Metrics by upstream's names.
    let metrics = http.get("/metrics").await.body;
    let text = metrics.as_str().unwrap_or_default();
    assert!(
        text.contains("apiserver_validating_admission_policy_check_total{policy=\"demo-policy.example.com\",policy_binding=\"demo-binding-test.example.com\",enforcement_action=\"deny\"}"),
        "{text}"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_expressions_reasons_variables_and_warn() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    http.post(
        POLICIES,
        &replicas_policy(
            "limit.example.com",
            json!({
                "variables": [
                    {"name": "replicas", "expression": "object.spec.replicas"},
                    {"name": "limit", "expression": "3"},
                ],
                "validations": [{
                    "expression": "variables.replicas <= variables.limit",
                    "messageExpression": "'replicas ' + string(variables.replicas) + ' over ' + string(variables.limit)",
                    "reason": "Forbidden",
                }],
            }),
        ),
    )
    .await
    .expect(201);
    http.post(
        BINDINGS,
        &binding("limit-deny.example.com", "limit.example.com", json!({})),
    )
    .await
    .expect(201);
    let body = http
        .post(&deployments("default"), &deployment("four", 4))
        .await
        .expect_failure(403, "Forbidden");
    assert_eq!(
        body["message"],
        "deployments.apps \"four\" is forbidden: ValidatingAdmissionPolicy 'limit.example.com' with binding 'limit-deny.example.com' denied request: replicas 4 over 3"
    );

    // Warn (and Audit) instead of Deny: stored, with a Warning kubectl prints.
    http.put(
        &format!("{BINDINGS}/limit-deny.example.com"),
        &binding(
            "limit-deny.example.com",
            "limit.example.com",
            json!({"validationActions": ["Warn", "Audit"]}),
        ),
    )
    .await
    .expect(200);
    let (ok, _, stderr) = kubectl(
        &server,
        &[
            "create",
            "deployment",
            "warned",
            "--image=nginx",
            "--replicas=4",
        ],
    )
    .await;
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("Warning: Validation failed for ValidatingAdmissionPolicy 'limit.example.com' with binding 'limit-deny.example.com': replicas 4 over 3"),
        "{stderr}"
    );
    http.get(&format!("{}/warned", deployments("default")))
        .await
        .expect(200);
    let reply = http
        .post(&deployments("default"), &deployment("raw-warned", 5))
        .await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    assert_eq!(
        reply.warnings,
        vec!["299 - \"Validation failed for ValidatingAdmissionPolicy 'limit.example.com' with binding 'limit-deny.example.com': replicas 5 over 3\"".to_string()]
    );
    // Audit alone: stored, and nothing reaches the client (the two Warn+Audit requests
    // above and this one are counted as audited). The sentinel is the Warn
    // request above, answered by the same policy: this one differs only by the action.
    http.put(
        &format!("{BINDINGS}/limit-deny.example.com"),
        &binding(
            "limit-deny.example.com",
            "limit.example.com",
            json!({"validationActions": ["Audit"]}),
        ),
    )
    .await
    .expect(200);
    let reply = http
        .post(&deployments("default"), &deployment("audited", 5))
        .await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    assert!(reply.warnings.is_empty(), "{:?}", reply.warnings);
    let metrics = http.get("/metrics").await.body;
    let text = metrics.as_str().unwrap_or_default();
    assert!(
        text.contains("apiserver_validating_admission_policy_check_total{policy=\"limit.example.com\",policy_binding=\"limit-deny.example.com\",enforcement_action=\"audit\"} 3"),
        "{text}"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn params_come_from_a_config_map_and_a_missing_one_follows_the_binding() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    http.post(
        POLICIES,
        &replicas_policy(
            "param-limit.example.com",
            json!({
                "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
                "validations": [{
                    "expression": "object.spec.replicas <= int(params.data.maxReplicas)",
                    "messageExpression": "'at most ' + params.data.maxReplicas + ' replicas (' + params.metadata.name + ')'",
                }],
            }),
        ),
    )
    .await
    .expect(201);
    http.post(
        BINDINGS,
        &binding(
            "param-deny.example.com",
            "param-limit.example.com",
            json!({"paramRef": {"name": "limits", "parameterNotFoundAction": "Deny"}}),
        ),
    )
    .await
    .expect(201);
    // No ConfigMap yet: upstream's configuration error.
    let body = http
        .post(&deployments("default"), &deployment("early", 1))
        .await
        .expect_failure(422, "Invalid");
    assert_eq!(
        body["message"],
        "deployments.apps \"early\" is forbidden: ValidatingAdmissionPolicy 'param-limit.example.com' with binding 'param-deny.example.com' denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"
    );
    // The param, in the request's namespace, is read on the next request.
    http.post(
        "/api/v1/namespaces/default/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "limits"}, "data": {"maxReplicas": "2"}}),
    )
    .await
    .expect(201);
    http.post(&deployments("default"), &deployment("two", 2))
        .await
        .expect(201);
    let body = http
        .post(&deployments("default"), &deployment("three", 3))
        .await
        .expect_failure(422, "Invalid");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or_default()
            .ends_with("denied request: at most 2 replicas (limits)"),
        "{body}"
    );
    // parameterNotFoundAction: Allow with a param that does not exist: nothing to check.
    http.put(
        &format!("{BINDINGS}/param-deny.example.com"),
        &binding(
            "param-deny.example.com",
            "param-limit.example.com",
            json!({"paramRef": {"name": "absent", "parameterNotFoundAction": "Allow"}}),
        ),
    )
    .await
    .expect(200);
    http.post(&deployments("default"), &deployment("many", 50))
        .await
        .expect(201);
    // paramRef.selector: the policy is evaluated once per matching param; the strictest
    // one denies.
    for (name, max) in [("roomy", "10"), ("tight", "1")] {
        http.post(
            "/api/v1/namespaces/default/configmaps",
            &json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "labels": {"limits": "yes"}}, "data": {"maxReplicas": max}}),
        )
        .await
        .expect(201);
    }
    http.put(
        &format!("{BINDINGS}/param-deny.example.com"),
        &binding(
            "param-deny.example.com",
            "param-limit.example.com",
            json!({"paramRef": {"selector": {"matchLabels": {"limits": "yes"}}, "parameterNotFoundAction": "Deny"}}),
        ),
    )
    .await
    .expect(200);
    let body = http
        .post(&deployments("default"), &deployment("five", 5))
        .await
        .expect_failure(422, "Invalid");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or_default()
            .ends_with("denied request: at most 1 replicas (tight)"),
        "{body}"
    );
    http.post(&deployments("default"), &deployment("one", 1))
        .await
        .expect(201);
    server.shutdown().await;
}

/// A policy on ConfigMap DELETEs: `object` is null, `oldObject` the stored object, and a
/// matchCondition picks the protected ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_is_denied_by_a_policy_with_match_conditions() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let policy = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
    "metadata": {"name": "protect.example.com"},
    "spec": {
        "matchConstraints": {"resourceRules": [{
            "apiGroups": [""], "apiVersions": ["v1"], "operations": ["DELETE"], "resources": ["configmaps"],
        }]},
        "matchConditions": [{"name": "protected",
            "expression": "has(oldObject.metadata.labels) && oldObject.metadata.labels.protected == 'true'"}],
        "validations": [{
            "expression": "object != null || request.userInfo.username == 'nobody'",
            "messageExpression": "'ConfigMap ' + oldObject.metadata.name + ' is protected'",
        }],
    }});
    http.post(POLICIES, &policy).await.expect(201);
    http.post(
        BINDINGS,
        &binding("protect.example.com", "protect.example.com", json!({})),
    )
    .await
    .expect(201);
    for (name, protected) in [("kept", "true"), ("free", "false")] {
        http.post(
            "/api/v1/namespaces/default/configmaps",
            &json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "labels": {"protected": protected}}}),
        )
        .await
        .expect(201);
    }
    let body = http
        .delete("/api/v1/namespaces/default/configmaps/kept")
        .await
        .expect_failure(422, "Invalid");
    assert_eq!(
        body["message"],
        "configmaps \"kept\" is forbidden: ValidatingAdmissionPolicy 'protect.example.com' with binding 'protect.example.com' denied request: ConfigMap kept is protected"
    );
    http.get("/api/v1/namespaces/default/configmaps/kept")
        .await
        .expect(200);
    // The matchCondition is false for the unprotected one.
    http.delete("/api/v1/namespaces/default/configmaps/free")
        .await
        .expect(200);
    let (ok, _, stderr) = kubectl(&server, &["delete", "configmap", "kept"]).await;
    assert!(!ok);
    assert!(stderr.contains("ConfigMap kept is protected"), "{stderr}");
    server.shutdown().await;
}

/// An expression that fails at run time: refused under `failurePolicy: Fail`, admitted under
/// `Ignore` from the very next request after the policy changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_error_follows_the_failure_policy() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let policy = |failure_policy: &str| {
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "strict.example.com"},
        "spec": {
            "failurePolicy": failure_policy,
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"],
                "resourceNames": ["checked"],
            }]},
            "validations": [{"expression": "object.data.mode == 'safe'"}],
        }})
    };
    http.post(POLICIES, &policy("Fail")).await.expect(201);
    http.post(
        BINDINGS,
        &binding("strict.example.com", "strict.example.com", json!({})),
    )
    .await
    .expect(201);
    let config_map =
        |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
    // resourceNames: only "checked" is matched.
    http.post(
        "/api/v1/namespaces/default/configmaps",
        &config_map("other"),
    )
    .await
    .expect(201);
    let body = http
        .post(
            "/api/v1/namespaces/default/configmaps",
            &config_map("checked"),
        )
        .await
        .expect_failure(422, "Invalid");
    assert_eq!(
        body["message"],
        "configmaps \"checked\" is forbidden: ValidatingAdmissionPolicy 'strict.example.com' with binding 'strict.example.com' denied request: expression 'object.data.mode == 'safe'' resulted in error: no such key: data"
    );
    let mut ignore = policy("Ignore");
    let stored = http
        .get(&format!("{POLICIES}/strict.example.com"))
        .await
        .expect(200);
    ignore["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"].clone();
    http.put(&format!("{POLICIES}/strict.example.com"), &ignore)
        .await
        .expect(200);
    http.post(
        "/api/v1/namespaces/default/configmaps",
        &config_map("checked"),
    )
    .await
    .expect(201);
    // A paramKind no resource serves is a configuration error of the policy.
    let mut unknown = policy("Fail");
    unknown["metadata"]["name"] = json!("unknown-param.example.com");
    unknown["spec"]["paramKind"] = json!({"apiVersion": "example.com/v1", "kind": "BadParamKind"});
    unknown["spec"]["matchConstraints"]["resourceRules"][0]["resourceNames"] = json!(["params"]);
    http.post(POLICIES, &unknown).await.expect(201);
    http.post(
        BINDINGS,
        &binding(
            "unknown-param.example.com",
            "unknown-param.example.com",
            json!({"paramRef": {"name": "p", "parameterNotFoundAction": "Allow"}}),
        ),
    )
    .await
    .expect(201);
    let body = http
        .post(
            "/api/v1/namespaces/default/configmaps",
            &config_map("params"),
        )
        .await
        .expect_failure(422, "Invalid");
    assert_eq!(
        body["message"],
        "configmaps \"params\" is forbidden: ValidatingAdmissionPolicy 'unknown-param.example.com' denied request: failed to configure policy: failed to find resource referenced by paramKind: 'example.com/v1, Kind=BadParamKind'"
    );
    server.shutdown().await;
}

/// Writing a policy or binding refuses what upstream refuses, at upstream's field paths.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_policies_and_bindings_are_refused() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let body = http
        .post(
            POLICIES,
            &replicas_policy(
                "bad.example.com",
                json!({"validations": [{"expression": "object.spec.replicas <="}]}),
            ),
        )
        .await
        .expect_failure(422, "Invalid");
    assert_eq!(
        body["details"]["causes"][0]["field"], "spec.validations[0].expression",
        "{body}"
    );
    let body = http
        .post(
            BINDINGS,
            &binding(
                "bad.example.com",
                "p.example.com",
                json!({"validationActions": ["Deny", "Warn"]}),
            ),
        )
        .await
        .expect_failure(422, "Invalid");
    assert_eq!(
        body["details"]["causes"][0]["field"], "spec.validationActions",
        "{body}"
    );
    server.shutdown().await;
}
