//! The last built-in resources of a default kube-apiserver 1.33 (issue 16), served as
//! upstream serves them, through HTTPS with kubectl, kube-rs and raw requests:
//! - `componentstatuses`: get and list only, built from the server's health checks, with
//!   upstream's deprecation warning and `kubectl get cs` columns;
//! - `bindings`: the legacy route to a Pod's binding, with `pods/binding`'s errors;
//! - `certificatesigningrequests` with `/approval` and `/status`: the requester recorded,
//!   upstream's validation, `kubectl certificate approve|deny`, and the
//!   `kubernetes.io/kube-apiserver-client` signer issuing a certificate that authenticates;
//! - webhook configurations defaulted on every write, not only on create.

mod common;

use std::time::Duration;

use base64::Engine as _;
use common::raw::Http;
use common::{TestServer, WAIT, kubectl, within};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

const DEPRECATION: &str = "299 - \"v1 ComponentStatus is deprecated in v1.19+\"";

/// Columns of a kubectl table line, whitespace collapsed.
fn collapse(line: &str) -> String {
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[tokio::test]
async fn component_statuses_report_the_servers_own_health() {
    let server = TestServer::start().await;
    let http = Http::new(&server);

    let reply = http.get("/api/v1/componentstatuses").await;
    assert_eq!(reply.warnings, [DEPRECATION]);
    let list = reply.expect(200);
    assert_eq!(list["kind"], "ComponentStatusList");
    let names: Vec<&str> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|item| item["metadata"]["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(names, ["scheduler", "controller-manager", "store"]);
    for item in list["items"].as_array().expect("items") {
        assert_eq!(
            item["conditions"],
            json!([{"type": "Healthy", "status": "True", "message": "ok"}]),
            "{item}"
        );
    }

    let reply = http.get("/api/v1/componentstatuses/store").await;
    assert_eq!(reply.warnings, [DEPRECATION]);
    let store = reply.expect(200);
    assert_eq!(store["kind"], "ComponentStatus");
    assert_eq!(store["apiVersion"], "v1");

    // Upstream answers an unknown component with a plain error: a 500, not a NotFound.
    let unknown = http
        .get("/api/v1/componentstatuses/etcd-7")
        .await
        .expect_failure(500, "InternalError");
    assert_eq!(
        unknown["message"],
        "Internal error occurred: Component not found: etcd-7"
    );
    // Only get and list are served.
    http.post(
        "/api/v1/componentstatuses",
        &json!({"apiVersion": "v1", "kind": "ComponentStatus", "metadata": {"name": "x"}}),
    )
    .await
    .expect_failure(405, "MethodNotAllowed");
    http.get("/api/v1/componentstatuses?watch=true")
        .await
        .expect_failure(405, "MethodNotAllowed");

    let discovery = http.get("/api/v1").await.expect(200);
    let entry = discovery["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .find(|r| r["name"] == "componentstatuses")
        .cloned()
        .expect("componentstatuses in discovery");
    assert_eq!(entry["verbs"], json!(["get", "list"]));
    assert_eq!(entry["shortNames"], json!(["cs"]));
    assert_eq!(entry["namespaced"], false);

    let (ok, out, err) = kubectl(&server, &["get", "cs"]).await;
    assert!(ok, "{err}");
    let lines: Vec<String> = out.lines().map(collapse).collect();
    assert_eq!(lines[0], "NAME STATUS MESSAGE ERROR", "{out}");
    assert!(lines.contains(&"store Healthy ok".to_string()), "{out}");
    assert!(
        err.contains("v1 ComponentStatus is deprecated in v1.19+"),
        "kubectl prints the warning: {err}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_binding_posted_to_the_collection_binds_the_pod_it_names() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    http.post("/api/v1/namespaces/default/pods", &pod)
        .await
        .expect(201);
    let binding = |pod: &str, node: &str| {
        json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
    };

    let bound = http
        .post(
            "/api/v1/namespaces/default/bindings",
            &binding("web", "node-1"),
        )
        .await
        .expect(201);
    assert_eq!(bound["status"], "Success", "{bound}");
    let stored = http
        .get("/api/v1/namespaces/default/pods/web")
        .await
        .expect(200);
    assert_eq!(stored["spec"]["nodeName"], "node-1");

    // The same errors as pods/binding: it is the same path.
    let again = http
        .post(
            "/api/v1/namespaces/default/bindings",
            &binding("web", "node-2"),
        )
        .await
        .expect_failure(409, "Conflict");
    assert_eq!(
        again["message"],
        "Operation cannot be fulfilled on pods/binding \"web\": pod web is already assigned to node \"node-1\""
    );
    let ghost = http
        .post(
            "/api/v1/namespaces/default/bindings",
            &binding("ghost", "node-1"),
        )
        .await
        .expect_failure(404, "NotFound");
    assert_eq!(ghost["message"], "pods \"ghost\" not found");
    let unnamed = http
        .post(
            "/api/v1/namespaces/default/bindings",
            &binding("", "node-1"),
        )
        .await
        .expect_failure(400, "BadRequest");
    assert_eq!(unnamed["message"], "Name parameter required.");
    let no_target = http
        .post(
            "/api/v1/namespaces/default/bindings",
            &json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "web"}, "target": {}}),
        )
        .await
        .expect_failure(422, "Invalid");
    assert!(
        no_target["message"]
            .as_str()
            .unwrap_or_default()
            .contains("target.name: Required value"),
        "{no_target}"
    );
    // Create is the only verb.
    http.get("/api/v1/namespaces/default/bindings")
        .await
        .expect_failure(405, "MethodNotAllowed");
    let stored = http
        .get("/api/v1/namespaces/default/pods/web")
        .await
        .expect(200);
    assert_eq!(stored["spec"]["nodeName"], "node-1", "nothing else changed");
    server.shutdown().await;
}

/// A PKCS#10 request for `user` in `group` and its private key, both PEM.
fn client_request(user: &str, group: &str) -> (String, String) {
    let key = rcgen::KeyPair::generate().expect("a key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, user);
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, group);
    let request = params.serialize_request(&key).expect("a CSR");
    (request.pem().expect("PEM"), key.serialize_pem())
}

fn csr_body(name: &str, request_pem: &str, signer: &str, seconds: Option<i64>) -> Value {
    let mut body = json!({
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {
            "request": base64::engine::general_purpose::STANDARD.encode(request_pem),
            "signerName": signer,
            "usages": ["client auth", "digital signature"],
            // The server records who asked, whatever the body says.
            "username": "mallory",
            "groups": ["intruders"],
        },
        "status": {"conditions": [{"type": "Approved", "status": "True"}]},
    });
    if let Some(seconds) = seconds {
        body["spec"]["expirationSeconds"] = json!(seconds);
    }
    body
}

const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";

#[tokio::test]
async fn a_client_certificate_request_is_approved_signed_and_authenticates() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let api: Api<CertificateSigningRequest> = Api::all(server.client.clone());

    let (request, key) = client_request("jane", "dev");
    let body = csr_body(
        "jane",
        &request,
        "kubernetes.io/kube-apiserver-client",
        Some(3600),
    );
    let typed: CertificateSigningRequest =
        serde_json::from_value(body).expect("a CertificateSigningRequest");
    let created = within(WAIT, api.create(&PostParams::default(), &typed))
        .await
        .expect("create the request");
    assert_eq!(created.spec.username.as_deref(), Some("admin"));
    let groups = created.spec.groups.clone().unwrap_or_default();
    assert!(
        groups.iter().any(|g| g == "system:authenticated")
            && !groups.iter().any(|g| g == "intruders"),
        "the requester's own groups: {groups:?}"
    );
    assert!(
        created
            .status
            .as_ref()
            .is_none_or(|s| s.conditions.is_none() && s.certificate.is_none()),
        "a request starts undecided: {:?}",
        created.status
    );

    let (ok, out, err) = kubectl(&server, &["get", "csr"]).await;
    assert!(ok, "{err}");
    let lines: Vec<String> = out.lines().map(collapse).collect();
    assert_eq!(
        lines[0],
        "NAME AGE SIGNERNAME REQUESTOR REQUESTEDDURATION CONDITION"
    );
    assert!(
        lines[1].starts_with("jane ")
            && lines[1].ends_with("kubernetes.io/kube-apiserver-client admin 60m Pending"),
        "{out}"
    );

    let (ok, out, err) = kubectl(&server, &["certificate", "approve", "jane"]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains("certificatesigningrequest.certificates.k8s.io/jane approved"),
        "{out}"
    );

    // The signer issues the certificate shortly after the approval.
    let issued = within(Duration::from_secs(20), async {
        loop {
            let current = http.get(&format!("{CSRS}/jane")).await.expect(200);
            if current["status"]["certificate"].is_string() {
                return current;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let approved = &issued["status"]["conditions"][0];
    assert_eq!(approved["type"], "Approved");
    assert_eq!(approved["reason"], "KubectlApprove");
    assert!(approved["lastTransitionTime"].is_string(), "{issued}");
    let certificate = base64::engine::general_purpose::STANDARD
        .decode(issued["status"]["certificate"].as_str().unwrap_or_default())
        .expect("base64");
    let certificate_pem = String::from_utf8(certificate).expect("PEM text");
    let (_, pem) = x509_parser::pem::parse_x509_pem(certificate_pem.as_bytes()).expect("PEM");
    let parsed = pem.parse_x509().expect("a certificate");
    let validity = parsed.validity();
    assert_eq!(
        validity.not_after.timestamp() - validity.not_before.timestamp(),
        3600,
        "expirationSeconds is honoured"
    );

    let (ok, out, _) = kubectl(&server, &["get", "csr", "jane", "--no-headers"]).await;
    assert!(ok);
    assert!(collapse(&out).ends_with("60m Approved,Issued"), "{out}");

    // The certificate and its key authenticate as the request's subject.
    let kubeconfig = server.dir.path().join("jane.kubeconfig");
    let ca = std::fs::read(server.dir.path().join("data/pki/ca.crt")).expect("the CA");
    let encode = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: finale, cluster: {{server: 'https://{}', certificate-authority-data: {}}}}}]\nusers: [{{name: jane, user: {{client-certificate-data: {}, client-key-data: {}}}}}]\ncontexts: [{{name: jane, context: {{cluster: finale, user: jane}}}}]\ncurrent-context: jane\n",
            server.running.local_addr,
            encode(&ca),
            encode(certificate_pem.as_bytes()),
            encode(key.as_bytes()),
        ),
    )
    .expect("write jane's kubeconfig");
    let whoami = within(
        Duration::from_secs(30),
        tokio::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["auth", "whoami", "-o", "json"])
            .output(),
    )
    .await
    .expect("run kubectl");
    assert!(
        whoami.status.success(),
        "{}",
        String::from_utf8_lossy(&whoami.stderr)
    );
    let review: Value = serde_json::from_slice(&whoami.stdout).expect("a SelfSubjectReview");
    assert_eq!(review["status"]["userInfo"]["username"], "jane");
    assert!(
        review["status"]["userInfo"]["groups"]
            .as_array()
            .is_some_and(|g| g.contains(&json!("dev"))),
        "{review}"
    );

    // Once issued, the certificate never changes.
    let mut replaced = issued.clone();
    replaced["status"]["certificate"] = json!(
        base64::engine::general_purpose::STANDARD.encode(
            rcgen::CertificateParams::new(vec!["x".to_string()])
                .expect("params")
                .self_signed(&rcgen::KeyPair::generate().expect("a key"))
                .expect("a certificate")
                .pem()
        )
    );
    let refused = http
        .put(&format!("{CSRS}/jane/status"), &replaced)
        .await
        .expect_failure(422, "Invalid");
    assert!(
        refused["message"].as_str().unwrap_or_default().contains(
            "status.certificate: Forbidden: updates may not modify existing certificate content"
        ),
        "{refused}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn requests_are_validated_and_decisions_go_through_approval_only() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let (request, _) = client_request("joe", "dev");

    // Invalid requests: upstream's messages, nothing stored.
    let mut bad = csr_body("bad", "not a certificate request", "example", Some(599));
    bad["spec"]["usages"] = json!(["client auth", "client auth"]);
    let refused = http.post(CSRS, &bad).await.expect_failure(422, "Invalid");
    let message = refused["message"].as_str().unwrap_or_default();
    for expected in [
        "CertificateSigningRequest.certificates.k8s.io \"bad\" is invalid: ",
        "spec.request: Invalid value: []byte{0x6e, 0x6f, 0x74, ",
        "PEM block type must be CERTIFICATE REQUEST",
        "spec.usages[1]: Duplicate value: \"client auth\"",
        "spec.signerName: Invalid value: \"example\": must be a fully qualified domain and path of the form 'example.com/signer-name'",
        "spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 600 seconds (10 minutes)",
    ] {
        assert!(message.contains(expected), "{expected}\n{message}");
    }
    http.get(&format!("{CSRS}/bad"))
        .await
        .expect_failure(404, "NotFound");

    // A client certificate for system:masters is refused, as upstream's admission does.
    let (masters, _) = client_request("root", "system:masters");
    let forbidden = http
        .post(
            CSRS,
            &csr_body(
                "root",
                &masters,
                "kubernetes.io/kube-apiserver-client",
                None,
            ),
        )
        .await
        .expect_failure(403, "Forbidden");
    assert_eq!(
        forbidden["message"],
        "certificatesigningrequests.certificates.k8s.io \"root\" is forbidden: use of kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed"
    );

    // A request for another signer: nobody here signs it.
    http.post(
        CSRS,
        &csr_body("joe", &request, "example.com/custom", Some(600)),
    )
    .await
    .expect(201);
    // Adding a decision through /status is forbidden.
    let current = http.get(&format!("{CSRS}/joe")).await.expect(200);
    let mut through_status = current.clone();
    through_status["status"] = json!({"conditions": [{"type": "Approved", "status": "True"}]});
    let refused = http
        .put(&format!("{CSRS}/joe/status"), &through_status)
        .await
        .expect_failure(422, "Invalid");
    assert!(
        refused["message"].as_str().unwrap_or_default().contains(
            "status.conditions: Forbidden: updates may not add a condition of type \"Approved\""
        ),
        "{refused}"
    );
    // The main resource changes metadata only: spec and status stay.
    let mut relabelled = current.clone();
    relabelled["metadata"]["labels"] = json!({"team": "a"});
    relabelled["spec"]["signerName"] = json!("example.com/other");
    relabelled["status"] = through_status["status"].clone();
    let written = http
        .put(&format!("{CSRS}/joe"), &relabelled)
        .await
        .expect(200);
    assert_eq!(written["metadata"]["labels"]["team"], "a");
    assert_eq!(written["spec"]["signerName"], "example.com/custom");
    assert!(written["status"].get("conditions").is_none(), "{written}");

    let (ok, out, err) = kubectl(&server, &["certificate", "deny", "joe"]).await;
    assert!(ok, "{err}");
    assert!(out.contains("denied"), "{out}");
    let denied = http.get(&format!("{CSRS}/joe")).await.expect(200);
    assert_eq!(denied["status"]["conditions"][0]["type"], "Denied");
    assert_eq!(denied["status"]["conditions"][0]["reason"], "KubectlDeny");
    // Approving what was denied: the decisions exclude each other.
    let mut both = denied.clone();
    both["status"]["conditions"]
        .as_array_mut()
        .expect("conditions")
        .push(json!({"type": "Approved", "status": "True", "reason": "Late"}));
    let refused = http
        .put(&format!("{CSRS}/joe/approval"), &both)
        .await
        .expect_failure(422, "Invalid");
    assert!(
        refused["message"]
            .as_str()
            .unwrap_or_default()
            .contains("status.conditions[1].type: Invalid value: \"Approved\": Approved and Denied conditions are mutually exclusive"),
        "{refused}"
    );
    // And a decision is never taken back.
    let mut cleared = denied.clone();
    cleared["status"]["conditions"] = json!([]);
    let refused = http
        .put(&format!("{CSRS}/joe/approval"), &cleared)
        .await
        .expect_failure(422, "Invalid");
    assert!(
        refused["message"]
            .as_str()
            .unwrap_or_default()
            .contains("updates may not remove a condition of type \"Denied\""),
        "{refused}"
    );

    let discovery = http.get("/apis/certificates.k8s.io/v1").await.expect(200);
    let names: Vec<&str> = discovery["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "certificatesigningrequests",
            "certificatesigningrequests/approval",
            "certificatesigningrequests/status"
        ]
    );
    server.shutdown().await;
}

/// Upstream defaults webhook configurations when it decodes any write: a PUT that leaves the
/// defaults out stores them all the same.
#[tokio::test]
async fn webhook_configurations_are_defaulted_on_every_write() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    for (kind, plural) in [
        (
            "ValidatingWebhookConfiguration",
            "validatingwebhookconfigurations",
        ),
        (
            "MutatingWebhookConfiguration",
            "mutatingwebhookconfigurations",
        ),
    ] {
        let collection = format!("/apis/admissionregistration.k8s.io/v1/{plural}");
        let bare = json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
            "metadata": {"name": "policy.example.com"},
            "webhooks": [{
                "name": "policy.example.com",
                "clientConfig": {"service": {"namespace": "default", "name": "policy"}},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}],
                "admissionReviewVersions": ["v1"], "sideEffects": "None",
            }],
        });
        http.post(&collection, &bare).await.expect(201);
        // The update sends a second webhook without any of its defaults.
        let mut update = bare.clone();
        let mut second = bare["webhooks"][0].clone();
        second["name"] = json!("second.example.com");
        update["webhooks"]
            .as_array_mut()
            .expect("webhooks")
            .push(second);
        let stored = http
            .put(&format!("{collection}/policy.example.com"), &update)
            .await
            .expect(200);
        let webhook = &stored["webhooks"][1];
        assert_eq!(webhook["failurePolicy"], "Fail", "{kind}: {stored}");
        assert_eq!(webhook["matchPolicy"], "Equivalent", "{kind}");
        assert_eq!(webhook["timeoutSeconds"], 10, "{kind}");
        assert_eq!(webhook["namespaceSelector"], json!({}), "{kind}");
        assert_eq!(webhook["objectSelector"], json!({}), "{kind}");
        assert_eq!(webhook["rules"][0]["scope"], "*", "{kind}");
        assert_eq!(webhook["clientConfig"]["service"]["port"], 443, "{kind}");
        if kind.starts_with("Mutating") {
            assert_eq!(webhook["reinvocationPolicy"], "Never");
        }
    }
    server.shutdown().await;
}
