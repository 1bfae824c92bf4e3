//! The last built-in resources of a default kube-apiserver 1.33 (issue 16), served as
//! upstream serves them, through HTTPS with kubectl, kube-rs and raw requests:
//! - `componentstatuses`: get and list only, built from the server's health checks, with
//!   upstream's deprecation warning, selectors and `kubectl get cs` columns;
//! - `bindings`: the legacy route to a Pod's binding, with `pods/binding`'s errors;
//! - `certificatesigningrequests` with `/approval` and `/status`: the requester recorded,
//!   upstream's validation, `kubectl certificate approve|deny`, and the
//!   `kubernetes.io/kube-apiserver-client` signer issuing a certificate that authenticates;
//!   approving and issuing only with `approve` and `sign` on the signer; the two kubelet
//!   signers;
//! - webhook configurations defaulted on every write, not only on create.

mod common;

use std::time::Duration;

use base64::Engine as _;
use common::raw::{Http, item_names};
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
    assert_eq!(
        item_names(&list),
        ["scheduler", "controller-manager", "store"]
    );
    for item in list["items"].as_array().expect("items") {
        assert_eq!(
            item["conditions"],
            json!([{"type": "Healthy", "status": "True", "message": "ok"}]),
            "{item}"
        );
    }

    // Selectors filter the list as upstream's: by name, and labels (which the objects have
    // none of) match only selectors that require none; other field labels are refused.
    let by_name = http
        .get("/api/v1/componentstatuses?fieldSelector=metadata.name%3Dstore")
        .await
        .expect(200);
    assert_eq!(item_names(&by_name), ["store"]);
    let not_scheduler = http
        .get("/api/v1/componentstatuses?fieldSelector=metadata.name!%3Dscheduler")
        .await
        .expect(200);
    assert_eq!(item_names(&not_scheduler), ["controller-manager", "store"]);
    let labelled = http
        .get("/api/v1/componentstatuses?labelSelector=tier%3Dcontrol-plane")
        .await
        .expect(200);
    assert!(item_names(&labelled).is_empty());
    let unlabelled = http
        .get("/api/v1/componentstatuses?labelSelector=!tier")
        .await
        .expect(200);
    assert_eq!(item_names(&unlabelled).len(), 3);
    let refused = http
        .get("/api/v1/componentstatuses?fieldSelector=status.phase%3DHealthy")
        .await
        .expect_failure(400, "BadRequest");
    assert!(
        refused["message"]
            .as_str()
            .unwrap_or_default()
            .contains("status.phase"),
        "{refused}"
    );

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
const KUBE_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";

/// Waits (bounded) until a signer has answered the request `name`: a certificate or a
/// `Failed` condition.
async fn signed_or_failed(http: &Http, name: &str) -> Value {
    within(Duration::from_secs(20), async {
        loop {
            let current = http.get(&format!("{CSRS}/{name}")).await.expect(200);
            let failed = current["status"]["conditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["type"] == "Failed"));
            if current["status"]["certificate"].is_string() || failed {
                return current;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
}

/// The issued certificate of a request, as PEM text.
fn issued_pem(request: &Value) -> String {
    let certificate = base64::engine::general_purpose::STANDARD
        .decode(
            request["status"]["certificate"]
                .as_str()
                .unwrap_or_default(),
        )
        .expect("base64");
    String::from_utf8(certificate).expect("PEM text")
}

/// `kubectl auth whoami` with a kubeconfig holding only `certificate_pem` and `key_pem`.
async fn whoami(server: &TestServer, user: &str, certificate_pem: &str, key_pem: &str) -> Value {
    let kubeconfig = server.dir.path().join(format!("{user}.kubeconfig"));
    let ca = std::fs::read(server.dir.path().join("data/pki/ca.crt")).expect("the CA");
    let encode = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: finale, cluster: {{server: 'https://{}', certificate-authority-data: {}}}}}]\nusers: [{{name: u, user: {{client-certificate-data: {}, client-key-data: {}}}}}]\ncontexts: [{{name: u, context: {{cluster: finale, user: u}}}}]\ncurrent-context: u\n",
            server.running.local_addr,
            encode(&ca),
            encode(certificate_pem.as_bytes()),
            encode(key_pem.as_bytes()),
        ),
    )
    .expect("write the kubeconfig");
    let output = within(
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
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("a SelfSubjectReview")
}

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
    let issued = signed_or_failed(&http, "jane").await;
    let approved = &issued["status"]["conditions"][0];
    assert_eq!(approved["type"], "Approved");
    assert_eq!(approved["reason"], "KubectlApprove");
    assert!(approved["lastTransitionTime"].is_string(), "{issued}");
    let certificate_pem = issued_pem(&issued);
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
    let review = whoami(&server, "jane", &certificate_pem, &key).await;
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

/// A PKCS#10 request for a node (`system:node:<node>` in `system:nodes`) with the subject
/// alternative names `names` (DNS names or IP addresses), and its private key, both PEM.
fn node_request(node: &str, names: &[&str]) -> (String, String) {
    let key = rcgen::KeyPair::generate().expect("a key");
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let mut params = rcgen::CertificateParams::new(names).expect("params");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    let request = params.serialize_request(&key).expect("a CSR");
    (request.pem().expect("PEM"), key.serialize_pem())
}

/// A ClusterRole `name` with `rules`, bound to the user `user`.
async fn grant(http: &Http, name: &str, user: &str, rules: Value) {
    http.post(
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name}, "rules": rules}),
    )
    .await
    .expect(201);
    bind(http, name, user).await;
}

/// Binds the ClusterRole `role` to the user `user`.
async fn bind(http: &Http, role: &str, user: &str) {
    http.post(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": format!("{role}-{user}").replace(':', "-")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}),
    )
    .await
    .expect(201);
}

/// Runs kubectl until it succeeds (a grant reaches the authorizer through a watch, so the
/// first tries after it may still be refused), within 20 s.
async fn kubectl_once_granted(server: &TestServer, args: &[&str]) -> String {
    within(Duration::from_secs(20), async {
        loop {
            let (ok, out, err) = kubectl(server, args).await;
            if ok {
                return out;
            }
            // Refused (`forbidden`), or `auth can-i` answering no (exit 1, "no").
            assert!(
                err.contains("forbidden") || out.trim() == "no",
                "{out}{err}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
}

fn conditions(request: &Value) -> Vec<String> {
    request["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["type"].as_str().map(str::to_string))
        .collect()
}

/// Upstream's `CertificateApproval` and `CertificateSigning` admission: writing `/approval`
/// or `/status` is not enough; approving or denying needs `approve` on the request's signer,
/// issuing its certificate `sign`, by the signer's name or its domain's `<domain>/*`.
#[tokio::test]
async fn approving_and_issuing_need_a_verb_on_the_signer() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    // ann may read requests and write their /approval and /status: all an approver needs
    // before signers were checked.
    grant(
        &http,
        "csr-writer",
        "ann",
        json!([
            {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"],
             "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["certificates.k8s.io"],
             "resources": ["certificatesigningrequests/approval", "certificatesigningrequests/status"],
             "verbs": ["get", "update", "patch"]},
        ]),
    )
    .await;
    for (name, signer) in [
        ("custom", "example.com/custom"),
        ("jane", KUBE_APISERVER_CLIENT),
        ("other", "other.org/x"),
    ] {
        let (request, _) = client_request(name, "dev");
        let mut body = csr_body(name, &request, signer, None);
        body["status"] = json!({});
        http.post(CSRS, &body).await.expect(201);
    }
    // The precondition: ann's role lets her reach /approval (a refusal below is the
    // signer's check, not RBAC's on the subresource). The grant reaches the authorizer
    // through a watch: asked until it says yes, within 20 s.
    let out = kubectl_once_granted(
        &server,
        &[
            "auth",
            "can-i",
            "update",
            "certificatesigningrequests",
            "--subresource=approval",
            "--as",
            "ann",
        ],
    )
    .await;
    assert_eq!(out.trim(), "yes");

    // Neither approving nor denying without `approve` on the signer; nothing is stored.
    for (verb, name, signer) in [
        ("approve", "custom", "example.com/custom"),
        ("deny", "other", "other.org/x"),
    ] {
        let (ok, _, err) = kubectl(&server, &["certificate", verb, name, "--as", "ann"]).await;
        assert!(!ok, "{verb} {name} without approve on its signer");
        assert!(
            err.contains(&format!(
                "certificatesigningrequests.certificates.k8s.io \"{name}\" is forbidden: user not permitted to approve requests with signerName \"{signer}\""
            )),
            "{err}"
        );
        let stored = http.get(&format!("{CSRS}/{name}")).await.expect(200);
        assert!(conditions(&stored).is_empty(), "{stored}");
    }

    // `approve` on the domain's wildcard grants every signer of that domain, and no other.
    grant(
        &http,
        "example-approver",
        "ann",
        json!([{"apiGroups": ["certificates.k8s.io"], "resources": ["signers"],
                "resourceNames": ["example.com/*"], "verbs": ["approve"]}]),
    )
    .await;
    let out = kubectl_once_granted(
        &server,
        &["certificate", "approve", "custom", "--as", "ann"],
    )
    .await;
    assert!(out.contains("approved"), "{out}");
    let stored = http.get(&format!("{CSRS}/custom")).await.expect(200);
    assert_eq!(conditions(&stored), ["Approved"]);
    let (ok, _, err) = kubectl(&server, &["certificate", "approve", "jane", "--as", "ann"]).await;
    assert!(!ok);
    assert!(
        err.contains(
            "user not permitted to approve requests with signerName \"kubernetes.io/kube-apiserver-client\""
        ),
        "{err}"
    );

    // The bootstrap approver role of a built-in signer grants exactly it; the server's own
    // signer then issues the certificate.
    bind(
        &http,
        "system:certificates.k8s.io:kube-apiserver-client-approver",
        "ann",
    )
    .await;
    kubectl_once_granted(&server, &["certificate", "approve", "jane", "--as", "ann"]).await;
    let issued = signed_or_failed(&http, "jane").await;
    assert!(issued["status"]["certificate"].is_string(), "{issued}");

    // Issuing a certificate through /status needs `sign`; a status write that leaves the
    // certificate alone does not (kube-apiserver 1.33).
    let certificate = base64::engine::general_purpose::STANDARD.encode(
        rcgen::CertificateParams::new(vec!["custom.example.com".to_string()])
            .expect("params")
            .self_signed(&rcgen::KeyPair::generate().expect("a key"))
            .expect("a certificate")
            .pem(),
    );
    let issue_patch = json!({"status": {"certificate": certificate}}).to_string();
    let issue = [
        "patch",
        "csr",
        "custom",
        "--subresource=status",
        "--type=merge",
        "-p",
        &issue_patch,
        "--as",
        "ann",
    ];
    let (ok, _, err) = kubectl(&server, &issue).await;
    assert!(!ok);
    assert!(
        err.contains(
            "certificatesigningrequests.certificates.k8s.io \"custom\" is forbidden: user not permitted to sign requests with signerName \"example.com/custom\""
        ),
        "{err}"
    );
    let (ok, _, err) = kubectl(
        &server,
        &[
            "patch",
            "csr",
            "custom",
            "--subresource=status",
            "--type=json",
            "-p",
            r#"[{"op": "add", "path": "/status/conditions/-", "value": {"type": "Queued", "status": "True"}}]"#,
            "--as",
            "ann",
        ],
    )
    .await;
    assert!(ok, "{err}");
    let stored = http.get(&format!("{CSRS}/custom")).await.expect(200);
    assert_eq!(conditions(&stored), ["Approved", "Queued"]);
    assert!(stored["status"].get("certificate").is_none(), "{stored}");

    grant(
        &http,
        "custom-signer",
        "ann",
        json!([{"apiGroups": ["certificates.k8s.io"], "resources": ["signers"],
                "resourceNames": ["example.com/custom"], "verbs": ["sign"]}]),
    )
    .await;
    kubectl_once_granted(&server, &issue).await;
    let stored = http.get(&format!("{CSRS}/custom")).await.expect(200);
    assert_eq!(stored["status"]["certificate"], json!(certificate));
    server.shutdown().await;
}

/// kube-controller-manager's two kubelet signers: `kubelet-serving` issues a serving
/// certificate for the names a node asked for, `kube-apiserver-client-kubelet` a client
/// certificate that authenticates as the node; a request that is not a node's fails with
/// upstream's reason and gets no certificate.
#[tokio::test]
async fn the_kubelet_signers_issue_node_certificates() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let post = |name: &str, request: &str, signer: &str, usages: Value| {
        let mut body = csr_body(name, request, signer, None);
        body["spec"]["usages"] = usages;
        body["status"] = json!({});
        let http = &http;
        async move { http.post(CSRS, &body).await.expect(201) }
    };
    let (serving, _) = node_request("n1", &["n1.example", "127.0.0.1"]);
    post(
        "serving",
        &serving,
        "kubernetes.io/kubelet-serving",
        json!(["digital signature", "key encipherment", "server auth"]),
    )
    .await;
    let (client, client_key) = node_request("n1", &[]);
    post(
        "client",
        &client,
        "kubernetes.io/kube-apiserver-client-kubelet",
        json!(["client auth", "digital signature"]),
    )
    .await;
    let (wrong, _) = node_request("n2", &[]);
    post(
        "wrong-usages",
        &wrong,
        "kubernetes.io/kube-apiserver-client-kubelet",
        json!(["client auth", "server auth"]),
    )
    .await;
    let (ok, _, err) = kubectl(
        &server,
        &[
            "certificate",
            "approve",
            "serving",
            "client",
            "wrong-usages",
        ],
    )
    .await;
    assert!(ok, "{err}");

    let issued = signed_or_failed(&http, "serving").await;
    let pem_text = issued_pem(&issued);
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem_text.as_bytes()).expect("PEM");
    let certificate = pem.parse_x509().expect("a certificate");
    let usage = certificate
        .extended_key_usage()
        .expect("one extended key usage")
        .expect("an extended key usage")
        .value;
    assert!(usage.server_auth && !usage.client_auth, "{usage:?}");
    let names: Vec<String> = certificate
        .subject_alternative_name()
        .expect("one SAN extension")
        .expect("SANs")
        .value
        .general_names
        .iter()
        .map(|name| match name {
            x509_parser::extensions::GeneralName::DNSName(dns) => format!("DNS:{dns}"),
            x509_parser::extensions::GeneralName::IPAddress(ip) => format!("IP:{ip:?}"),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(names, ["DNS:n1.example", "IP:[127, 0, 0, 1]"]);
    let ca_pem = std::fs::read(server.dir.path().join("data/pki/ca.crt")).expect("the CA");
    let (_, ca) = x509_parser::pem::parse_x509_pem(&ca_pem).expect("the CA's PEM");
    assert_eq!(
        certificate.issuer().to_string(),
        ca.parse_x509().expect("the CA").subject().to_string()
    );

    let issued = signed_or_failed(&http, "client").await;
    let review = whoami(&server, "n1", &issued_pem(&issued), &client_key).await;
    assert_eq!(review["status"]["userInfo"]["username"], "system:node:n1");
    assert!(
        review["status"]["userInfo"]["groups"]
            .as_array()
            .is_some_and(|g| g.contains(&json!("system:nodes"))),
        "{review}"
    );

    let failed = signed_or_failed(&http, "wrong-usages").await;
    assert!(failed["status"].get("certificate").is_none(), "{failed}");
    let condition = failed["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Failed"))
        .cloned()
        .expect("a Failed condition");
    assert_eq!(condition["reason"], "SignerValidationFailure");
    assert_eq!(
        condition["message"],
        "usages did not match [client auth digital signature key encipherment]"
    );
    server.shutdown().await;
}

/// Binds the ClusterRole `role` to the group `group`.
async fn bind_group(http: &Http, role: &str, group: &str) {
    http.post(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": format!("{role}-{group}").replace(':', "-")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}]}),
    )
    .await
    .expect(201);
}

/// Creates a kubelet client-certificate request for `node` with kubectl, impersonating
/// `user` in `group` (the request records them as its requester).
async fn request_as(server: &TestServer, name: &str, node: &str, user: &str, group: &str) {
    let (request, _) = node_request(node, &[]);
    let mut body = csr_body(
        name,
        &request,
        "kubernetes.io/kube-apiserver-client-kubelet",
        None,
    );
    body["status"] = json!({});
    let file = server.dir.path().join(format!("{name}.json"));
    std::fs::write(&file, body.to_string()).expect("write the request");
    let file = file.to_string_lossy().to_string();
    kubectl_once_granted(
        server,
        &["create", "-f", &file, "--as", user, "--as-group", group],
    )
    .await;
}

/// The request `name` once it carries a condition of type `kind`, within 30 s.
async fn with_condition(http: &Http, name: &str, kind: &str) -> Value {
    within(Duration::from_secs(30), async {
        loop {
            let current = http.get(&format!("{CSRS}/{name}")).await.expect(200);
            if conditions(&current).iter().any(|c| c == kind) {
                return current;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
}

/// kube-controller-manager's `csrapproving`: a kubelet's client-certificate request is
/// approved when its requester may create `certificatesigningrequests/nodeclient` (or
/// `/selfnodeclient` for its own node), with upstream's reason and message, and then
/// issued; one made before the permission was granted is approved once it is.
#[tokio::test]
async fn kubelet_client_requests_are_approved_for_requesters_allowed_to() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    // Bootstrap tokens may ask for certificates (kubeadm's binding), not yet be approved.
    bind_group(&http, "system:node-bootstrapper", "system:bootstrappers").await;
    request_as(
        &server,
        "early",
        "n1",
        "system:bootstrap:abc",
        "system:bootstrappers",
    )
    .await;
    // Sentinel: the approver handles requests in order; once the administrator's request,
    // created after `early`, is approved, `early` has been looked at too.
    let (sentinel, _) = node_request("sentinel", &[]);
    let mut body = csr_body(
        "sentinel",
        &sentinel,
        "kubernetes.io/kube-apiserver-client-kubelet",
        None,
    );
    body["status"] = json!({});
    http.post(CSRS, &body).await.expect(201);
    let approved = with_condition(&http, "sentinel", "Approved").await;
    assert_eq!(
        approved["status"]["conditions"][0]["message"],
        "Auto approving kubelet client certificate after SubjectAccessReview."
    );
    let early = http.get(&format!("{CSRS}/early")).await.expect(200);
    assert_eq!(early["spec"]["username"], "system:bootstrap:abc");
    assert!(
        conditions(&early).is_empty(),
        "not approved without the permission: {early}"
    );

    bind_group(
        &http,
        "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
        "system:bootstrappers",
    )
    .await;
    let approved = with_condition(&http, "early", "Approved").await;
    let condition = &approved["status"]["conditions"][0];
    assert_eq!(condition["type"], "Approved");
    assert_eq!(condition["status"], "True");
    assert_eq!(condition["reason"], "AutoApproved");
    assert_eq!(
        condition["message"],
        "Auto approving kubelet client certificate after SubjectAccessReview."
    );
    let issued = signed_or_failed(&http, "early").await;
    assert!(issued["status"]["certificate"].is_string(), "{issued}");

    // A node renewing its own certificate: selfnodeclient, checked first.
    bind_group(&http, "system:node-bootstrapper", "system:nodes").await;
    bind_group(
        &http,
        "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
        "system:nodes",
    )
    .await;
    request_as(&server, "renewal", "n2", "system:node:n2", "system:nodes").await;
    let approved = with_condition(&http, "renewal", "Approved").await;
    assert_eq!(
        approved["status"]["conditions"][0]["message"],
        "Auto approving self kubelet client certificate after SubjectAccessReview."
    );
    server.shutdown().await;
}

/// kube-controller-manager's `csrcleaner`: when the controllers start (and hourly), requests
/// denied, failed or issued more than an hour ago are deleted; newer and pending ones stay.
#[tokio::test]
async fn the_cleaner_deletes_requests_past_their_deadline() {
    let server = TestServer::start().await;
    let http = Http::new(&server);
    let long_ago = (chrono::Utc::now() - chrono::TimeDelta::hours(2))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let custom = "example.com/custom";
    // Named so that the list (sorted by name) reaches every request that must stay before
    // the last one that must go.
    for name in [
        "a-pending",
        "a-denied-now",
        "z-denied",
        "z-failed",
        "z-issued",
    ] {
        let (request, _) = client_request(name, "dev");
        let mut body = csr_body(name, &request, custom, None);
        body["status"] = json!({});
        http.post(CSRS, &body).await.expect(201);
    }
    let decide = |name: &'static str, subresource: &'static str, condition: Value| {
        let http = &http;
        async move {
            let mut current = http.get(&format!("{CSRS}/{name}")).await.expect(200);
            current["status"]["conditions"] = json!([condition]);
            http.put(&format!("{CSRS}/{name}/{subresource}"), &current)
                .await
                .expect(200)
        }
    };
    decide(
        "a-denied-now",
        "approval",
        json!({"type": "Denied", "status": "True"}),
    )
    .await;
    decide(
        "z-denied",
        "approval",
        json!({"type": "Denied", "status": "True", "lastUpdateTime": long_ago}),
    )
    .await;
    decide(
        "z-failed",
        "status",
        json!({"type": "Failed", "status": "True", "lastUpdateTime": long_ago}),
    )
    .await;
    decide(
        "z-issued",
        "approval",
        json!({"type": "Approved", "status": "True", "lastUpdateTime": long_ago}),
    )
    .await;
    let mut issued = http.get(&format!("{CSRS}/z-issued")).await.expect(200);
    let ca = std::fs::read(server.dir.path().join("data/pki/ca.crt")).expect("the CA");
    issued["status"]["certificate"] = json!(base64::engine::general_purpose::STANDARD.encode(&ca));
    http.put(&format!("{CSRS}/z-issued/status"), &issued)
        .await
        .expect(200);
    let stored = http.get(&format!("{CSRS}/z-denied")).await.expect(200);
    assert_eq!(
        stored["status"]["conditions"][0]["lastUpdateTime"],
        json!(long_ago),
        "precondition: the old decision is stored as written"
    );

    // The controllers' first pass on this server ran before the requests existed; a restart
    // runs another.
    let server = server.restart_with(|_| {}).await;
    let http = Http::new(&server);
    within(Duration::from_secs(30), async {
        loop {
            let left = item_names(&http.get(CSRS).await.expect(200));
            if left == ["a-denied-now", "a-pending"] {
                return;
            }
            assert!(
                left.iter().any(|n| n == "a-denied-now") && left.iter().any(|n| n == "a-pending"),
                "{left:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
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
