//! kubectl against the OpenAPI documents (issue 16, item 2): `explain` for built-ins and custom
//! resources, client-side validation of a `kind: List` with kubectl's default `--validate`,
//! `apply` of a List still merging by the server's strategic-merge keys, and the documents'
//! ETags and hashes.

mod common;

use std::time::Duration;

use common::Env;
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, ETAG, IF_NONE_MATCH, LOCATION};

const GADGET_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {kind: Gadget, plural: gadgets}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            description: What the gadget should be.
            properties:
              replicas: {type: integer, minimum: 0, description: How many gadgets to run.}
              colour: {type: string, nullable: true, default: blue}
              extra: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

fn install_gadgets(env: &Env) {
    env.ok_with_stdin(&["apply", "-f", "-"], GADGET_CRD);
    env.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/gadgets.example.com",
        "--timeout=30s",
    ]);
}

/// A List as `kubectl get -o yaml` or a chart renders it: a custom resource whose values the
/// v2 conversion had to loosen (null, preserved unknown fields), a Deployment with quantities
/// and int-or-string values, and a Service.
fn list(env_value: &str, extra_field: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: List
items:
- apiVersion: example.com/v1
  kind: Gadget
  metadata: {{name: g1}}
  spec: {{replicas: 2, colour: null, extra: {{deep: {{x: 1}}}}}}
- apiVersion: apps/v1
  kind: Deployment
  metadata: {{name: web, labels: {{app: web}}}}
  spec:
    replicas: 1
    selector: {{matchLabels: {{app: web}}}}
    strategy: {{type: RollingUpdate, rollingUpdate: {{maxSurge: 25%, maxUnavailable: 1}}}}
    template:
      metadata: {{labels: {{app: web}}}}
      spec:
        containers:
        - name: web
          image: nginx
          ports: [{{containerPort: 80, name: http}}]
          resources: {{limits: {{cpu: 100m, memory: 128Mi}}, requests: {{cpu: 0.1}}}}
          livenessProbe: {{httpGet: {{path: /, port: http}}}}
          env: [{env_value}]
- apiVersion: v1
  kind: Service
  metadata: {{name: web}}
  spec: {{ports: [{{port: 80, targetPort: 8080}}], selector: {{app: web}}{extra_field}}}
"#
    )
}

#[test]
fn kubectl_explains_builtin_and_custom_kinds() {
    let env = Env::start();
    let data = env.ok(&["explain", "configmap.data"]);
    assert!(data.contains("FIELD: data <map[string]string>"), "{data}");
    assert!(
        data.contains("Data contains the configuration data"),
        "{data}"
    );
    let containers = env.ok(&["explain", "deployment.spec.template.spec.containers"]);
    assert!(containers.contains("<[]Container>"), "{containers}");

    install_gadgets(&env);
    let spec = env.ok(&["explain", "gadgets.spec"]);
    assert!(spec.contains("What the gadget should be."), "{spec}");
    assert!(spec.contains("replicas\t<integer>"), "{spec}");
    assert!(spec.contains("How many gadgets to run."), "{spec}");
    // The v2 document serves `explain` too, when asked for.
    let v2 = env.ok(&["explain", "--output=plaintext-openapiv2", "gadgets.spec"]);
    assert!(v2.contains("How many gadgets to run."), "{v2}");
}

#[test]
fn a_list_is_validated_on_the_client_against_the_served_schemas() {
    let env = Env::start();
    install_gadgets(&env);

    // An unknown field in one item fails the whole List before anything is sent.
    let bad = env.run_with_stdin(
        &["create", "-f", "-"],
        &list(r#"{name: A, value: "1"}"#, ", bogus: 1"),
    );
    assert_ne!(bad.code, Some(0), "{}", bad.describe());
    assert!(
        bad.stderr
            .contains(r#"unknown field "bogus" in io.k8s.api.core.v1.ServiceSpec"#),
        "{}",
        bad.describe()
    );
    let none = env.ok(&["get", "gadgets,deployments,services", "-o", "name"]);
    assert!(
        !none.contains("gadget.example.com/g1") && !none.contains("deployment.apps/web"),
        "a refused List created nothing: {none}"
    );

    // The same List without it: every item is created, default validation on.
    let created = env.ok_with_stdin(&["apply", "-f", "-"], &list(r#"{name: A, value: "1"}"#, ""));
    for name in [
        "gadget.example.com/g1",
        "deployment.apps/web",
        "service/web",
    ] {
        assert!(created.contains(&format!("{name} created")), "{created}");
    }

    // Applied again with the container's env changed: kubectl still computes a strategic
    // merge patch that replaces the entry (by its `name` key) rather than adding to it.
    let configured =
        env.ok_with_stdin(&["apply", "-f", "-"], &list(r#"{name: B, value: "2"}"#, ""));
    assert!(
        configured.contains("deployment.apps/web configured"),
        "{configured}"
    );
    let env_now = env.ok(&[
        "get",
        "deployment",
        "web",
        "-o",
        "jsonpath={.spec.template.spec.containers[0].env}",
    ]);
    assert_eq!(env_now, r#"[{"name":"B","value":"2"}]"#);
}

#[test]
fn documents_carry_etags_and_stale_hashes_are_redirected() {
    let env = Env::start();
    let server = &env.server;
    let ca = reqwest::Certificate::from_pem(server.ca_pem().expect("CA").as_bytes())
        .expect("CA certificate");
    let client = reqwest::blocking::Client::builder()
        .add_root_certificate(ca)
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(15))
        .build()
        .expect("client");
    let token = server.token().expect("token");
    let get = |path: &str, headers: &[(reqwest::header::HeaderName, &str)]| {
        let mut request = client
            .get(format!("{}{path}", server.url))
            .bearer_auth(&token);
        for (name, value) in headers {
            request = request.header(name, *value);
        }
        request.send().expect("request")
    };

    // v2: protobuf for client-go's Accept, JSON otherwise, and 304 for a known ETag.
    let protobuf = get(
        "/openapi/v2",
        &[(
            ACCEPT,
            "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
        )],
    );
    assert_eq!(protobuf.status(), StatusCode::OK);
    assert_eq!(
        protobuf.headers()["content-type"],
        "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
    );
    let json = get("/openapi/v2", &[]);
    assert_eq!(json.headers()["content-type"], "application/json");
    let etag = json.headers()[ETAG].to_str().expect("etag").to_string();
    let document: serde_json::Value = json.json().expect("v2 JSON");
    assert_eq!(document["swagger"], "2.0");
    assert!(document["definitions"]["io.k8s.api.core.v1.Pod"].is_object());
    assert_eq!(
        get("/openapi/v2", &[(IF_NONE_MATCH, &etag)]).status(),
        StatusCode::NOT_MODIFIED
    );

    // v3: the index links each document by hash; that hash is served immutable, a stale one
    // is redirected to it, and a new CRD changes the group's hash.
    let index: serde_json::Value = get("/openapi/v3", &[]).json().expect("index");
    let linked = index["paths"]["api/v1"]["serverRelativeURL"]
        .as_str()
        .expect("api/v1 is linked")
        .to_string();
    let current = get(&linked, &[]);
    assert_eq!(current.status(), StatusCode::OK);
    assert_eq!(current.headers()["cache-control"], "public, immutable");
    let stale = get("/openapi/v3/api/v1?hash=0123", &[]);
    assert_eq!(stale.status(), StatusCode::MOVED_PERMANENTLY);
    assert_eq!(stale.headers()[LOCATION], linked.as_str());
    assert!(
        index["paths"].get("apis/example.com/v1").is_none(),
        "{index}"
    );

    install_gadgets(&env);
    let index: serde_json::Value = get("/openapi/v3", &[]).json().expect("index");
    let gadgets = index["paths"]["apis/example.com/v1"]["serverRelativeURL"]
        .as_str()
        .expect("the new group/version is linked");
    let document: serde_json::Value = get(gadgets, &[]).json().expect("document");
    let gadget = &document["components"]["schemas"]["com.example.v1.Gadget"];
    assert_eq!(
        gadget["x-kubernetes-group-version-kind"][0]["kind"], "Gadget",
        "{document}"
    );
    assert_ne!(
        get("/openapi/v2", &[(IF_NONE_MATCH, &etag)]).status(),
        StatusCode::NOT_MODIFIED,
        "the v2 document changed with the catalog"
    );
}
