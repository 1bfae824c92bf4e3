//! Logging in with a client certificate signed by the cluster CA, as kubectl and kube-rs do
//! with a kubeconfig that holds `client-certificate-data` and no token (issue #18, item 6).

mod common;

use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use common::{Env, Response};
use finale_apiserver::pki::Pki;
use finale_e2e::Kubectl;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::ListParams;

/// A kubeconfig for `env`'s server whose user presents `cert_pem`/`key_pem` and nothing else.
fn certificate_kubeconfig(env: &Env, dir: &Path, cert_pem: &str, key_pem: &str) -> PathBuf {
    let ca = env.server.ca_pem().expect("read the CA");
    let text = format!(
        "apiVersion: v1
kind: Config
clusters:
- name: finale
  cluster:
    server: {server}
    certificate-authority-data: {ca}
users:
- name: by-certificate
  user:
    client-certificate-data: {cert}
    client-key-data: {key}
contexts:
- name: finale
  context:
    cluster: finale
    user: by-certificate
    namespace: default
current-context: finale
",
        server = env.server.url,
        ca = STANDARD.encode(ca),
        cert = STANDARD.encode(cert_pem),
        key = STANDARD.encode(key_pem),
    );
    assert!(!text.contains("token"), "the kubeconfig holds no token");
    let path = dir.join("kubeconfig");
    std::fs::write(&path, text).expect("write the kubeconfig");
    path
}

async fn kube_list_namespaces(kubeconfig: &Path) -> Result<Vec<String>, kube::Error> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig).expect("read kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .expect("client configuration");
    let client = kube::Client::try_from(config).expect("kube client");
    let api: kube::Api<Namespace> = kube::Api::all(client);
    let list = tokio::time::timeout(
        std::time::Duration::from_secs(15),
        api.list(&ListParams::default()),
    )
    .await
    .expect("answered in time")?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|ns| ns.metadata.name)
        .collect())
}

/// Raw HTTPS with a client certificate and no token.
fn get_with_certificate(env: &Env, cert_pem: &str, key_pem: &str, path: &str) -> Response {
    let ca = reqwest::Certificate::from_pem(env.server.ca_pem().unwrap().as_bytes()).unwrap();
    let identity =
        reqwest::Identity::from_pem(format!("{cert_pem}\n{key_pem}").as_bytes()).unwrap();
    let client = reqwest::blocking::Client::builder()
        .add_root_certificate(ca)
        .identity(identity)
        .timeout(std::time::Duration::from_secs(15))
        .build()
        .unwrap();
    let response = client
        .get(format!("{}{path}", env.server.url))
        .send()
        .unwrap_or_else(|e| panic!("GET {path} with a client certificate: {e:#}{}", env.log()));
    Response {
        status: response.status().as_u16(),
        content_type: response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string(),
        body: response.text().unwrap(),
    }
}

#[test]
fn kubectl_and_kube_rs_log_in_with_the_admin_client_certificate() {
    let env = Env::start();
    let pki_dir = env.server.data_dir.join("pki");
    let cert = std::fs::read_to_string(pki_dir.join("admin.crt")).unwrap();
    let key = std::fs::read_to_string(pki_dir.join("admin.key")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = certificate_kubeconfig(&env, dir.path(), &cert, &key);

    let kubectl = Kubectl::new(&kubeconfig).unwrap();
    let out = kubectl
        .ok(&["get", "namespaces", "-o", "name"])
        .unwrap_or_else(|e| panic!("{e:#}{}", env.log()));
    assert!(out.contains("namespace/default"), "{out}");
    kubectl
        .ok(&["create", "configmap", "by-cert", "--from-literal=k=v"])
        .unwrap_or_else(|e| panic!("{e:#}{}", env.log()));
    assert_eq!(env.api().configmap_names("default"), ["by-cert"]);

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let names = runtime
        .block_on(kube_list_namespaces(&kubeconfig))
        .unwrap_or_else(|e| panic!("kube-rs with the admin certificate: {e}{}", env.log()));
    assert!(names.contains(&"kube-system".to_string()), "{names:?}");
}

#[test]
fn a_certificate_issued_by_the_cluster_ca_for_another_user_logs_in_as_its_cn_and_groups() {
    let env = Env::start();
    let pki = Pki::load_or_create(&env.server.data_dir, &[]).unwrap();
    let (cert, key) = pki.issue_client_certificate("alice", &["team-b"]).unwrap();
    // rcgen writes one O per subject: more groups are refused, not silently dropped.
    assert!(pki.issue_client_certificate("alice", &["a", "b"]).is_err());
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = certificate_kubeconfig(&env, dir.path(), &cert, &key);
    let kubectl = Kubectl::new(&kubeconfig).unwrap();
    // CN is the user, O the groups (issue #14).
    let whoami: serde_json::Value = serde_json::from_str(
        &kubectl
            .ok(&["auth", "whoami", "-o", "json"])
            .unwrap_or_else(|e| panic!("{e:#}{}", env.log())),
    )
    .unwrap();
    assert_eq!(
        whoami["status"]["userInfo"],
        serde_json::json!({"username": "alice", "groups": ["team-b", "system:authenticated"]})
    );
    // Logged in, but RBAC grants her nothing yet: a 403, not a 401.
    let response = get_with_certificate(&env, &cert, &key, "/api/v1/namespaces/default/configmaps");
    let status = response.expect_status(403, "Forbidden");
    assert_eq!(
        status["message"],
        r#"configmaps is forbidden: User "alice" cannot list resource "configmaps" in API group "" in the namespace "default""#
    );
    // A binding to one of her certificate's groups lets her in.
    env.ok(&[
        "create",
        "rolebinding",
        "team-b-view",
        "--clusterrole=view",
        "--group=team-b",
    ]);
    let listed = common::eventually(std::time::Duration::from_secs(10), || {
        let run = kubectl.run(&["get", "configmaps", "-o", "name"]).ok()?;
        run.status
            .success()
            .then(|| String::from_utf8_lossy(&run.stdout).into_owned())
    })
    .unwrap_or_else(|| panic!("the binding never let alice list{}", env.log()));
    assert_eq!(listed.trim(), "", "no ConfigMaps yet, and no error");
}

#[test]
fn a_certificate_from_another_ca_is_refused_with_401() {
    let env = Env::start();
    let elsewhere = tempfile::tempdir().unwrap();
    let stranger = Pki::load_or_create(elsewhere.path(), &[]).unwrap();
    let (cert, key) = (
        stranger.admin_client_cert_pem().to_string(),
        stranger.admin_client_key_pem().to_string(),
    );

    // The TLS handshake succeeds; the request is refused with upstream's Status.
    let response = get_with_certificate(&env, &cert, &key, "/api/v1/namespaces");
    let status = response.expect_status(401, "Unauthorized");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.starts_with("invalid client certificate:") && message.contains("CA"),
        "the message says why and what to present: {status}"
    );

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = certificate_kubeconfig(&env, dir.path(), &cert, &key);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    match runtime.block_on(kube_list_namespaces(&kubeconfig)) {
        Err(kube::Error::Api(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (401, "Unauthorized"));
        }
        other => panic!("kube-rs with a foreign certificate: expected a 401 Status, got {other:?}"),
    }
    // kubectl (Go) sends no certificate the server's CA hint does not cover: still 401.
    let kubectl = Kubectl::new(&kubeconfig).unwrap();
    let run = kubectl.run(&["get", "namespaces"]).unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("You must be logged in to the server"),
        "kubectl reports the 401: {stderr}"
    );
    assert_eq!(env.api().configmap_names("default"), Vec::<String>::new());
}
