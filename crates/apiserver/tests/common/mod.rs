//! Shared fixtures for the kube-rs integration suites (`tests/kube_*.rs`): an in-process
//! server on an ephemeral loopback port with its own temporary data directory, and a kube-rs
//! client built from the kubeconfig the server writes.

#![allow(dead_code)]

pub mod raw;
pub mod webhook;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use finale_apiserver::registry::Registry;
use finale_apiserver::server::{RunningServer, ServerConfig, start};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::Status;
use kube::{Client, Config};
use serde_json::json;
use tempfile::TempDir;

/// The default bound for any single wait in these suites.
pub const WAIT: Duration = Duration::from_secs(10);

pub struct TestServer {
    pub running: RunningServer,
    pub client: Client,
    /// Kept alive for the server's lifetime; removed on drop.
    pub dir: TempDir,
    /// The etcd member the server runs on, with `FINALE_TEST_STORE=etcd`.
    pub etcd: Option<finale_e2e::Etcd>,
}

impl TestServer {
    pub async fn start() -> TestServer {
        Self::start_with(|_| {}).await
    }

    /// Starts a server after `adjust` has changed its configuration.
    pub async fn start_with(adjust: impl FnOnce(&mut ServerConfig)) -> TestServer {
        install_crypto_provider();
        let dir = tempfile::tempdir().expect("create a temporary data directory");
        // `FINALE_TEST_STORE=etcd`: the same suites on a fresh etcd member.
        let etcd = if finale_e2e::test_store_is_etcd() {
            let member = tokio::task::spawn_blocking(finale_e2e::Etcd::start_in_memory)
                .await
                .expect("etcd start task")
                .expect("start etcd");
            Some(member)
        } else {
            None
        };
        Self::launch(dir, etcd, adjust).await
    }

    /// A server on `dir`'s data (and on `etcd`, when given), loopback on an ephemeral port,
    /// after `adjust` has changed its configuration, with a kube client for it.
    async fn launch(
        dir: TempDir,
        etcd: Option<finale_e2e::Etcd>,
        adjust: impl FnOnce(&mut ServerConfig),
    ) -> TestServer {
        let mut config = ServerConfig::new(
            dir.path().join("data"),
            "127.0.0.1:0".parse().expect("loopback address"),
        );
        // Tests do not need fsync; a clean close still makes everything durable.
        config.store.durable_commits = false;
        if let Some(member) = &etcd {
            config.etcd = Some(finale_apiserver::server::EtcdConfig {
                options: finale_store_etcd::EtcdStoreOptions::new(vec![member.endpoint.clone()]),
                compaction_interval: Duration::from_secs(300),
            });
        }
        adjust(&mut config);
        let running = within(WAIT, start(config))
            .await
            .expect("the server starts");
        let client = Client::try_from(within(WAIT, client_config(&running)).await)
            .expect("build a kube client");
        TestServer {
            running,
            client,
            dir,
            etcd,
        }
    }

    pub fn registry(&self) -> &Arc<Registry> {
        &self.running.registry
    }

    /// A client configuration from the server's kubeconfig, to be altered by a test.
    pub async fn config(&self) -> Config {
        client_config(&self.running).await
    }

    pub async fn shutdown(self) {
        within(Duration::from_secs(20), self.running.shutdown()).await;
    }

    /// Stops the server and starts a new one on the same data (and etcd member), after
    /// `adjust` has changed its configuration.
    pub async fn restart_with(self, adjust: impl FnOnce(&mut ServerConfig)) -> TestServer {
        let TestServer {
            running, dir, etcd, ..
        } = self;
        within(Duration::from_secs(20), running.shutdown()).await;
        Self::launch(dir, etcd, adjust).await
    }
}

pub fn install_crypto_provider() {
    // Both ring and aws-lc-rs may be linked; the server also installs ring. Ignore "already
    // installed".
    let _ = rustls::crypto::ring::default_provider().install_default();
}

pub async fn client_config(running: &RunningServer) -> Config {
    let kubeconfig = Kubeconfig::read_from(&running.kubeconfig).expect("read the kubeconfig");
    Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("a client configuration from the kubeconfig")
}

/// Awaits `future`, failing the test if it takes longer than `limit`.
pub async fn within<T>(limit: Duration, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, future).await {
        Ok(value) => value,
        Err(_) => panic!("timed out after {limit:?}"),
    }
}

/// The `Status` of an API error; panics on any other outcome.
pub fn api_status<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> Box<Status> {
    match result {
        Err(kube::Error::Api(status)) => status,
        Err(other) => panic!("expected an API error (Status), got another error: {other:?}"),
        Ok(value) => panic!("expected an API error, the request succeeded: {value:?}"),
    }
}

/// Asserts an API error with this code and reason and returns its `Status`.
pub fn expect_api_error<T: std::fmt::Debug>(
    result: Result<T, kube::Error>,
    code: u16,
    reason: &str,
) -> Box<Status> {
    let status = api_status(result);
    assert_eq!(
        (status.code, status.reason.as_str()),
        (code, reason),
        "unexpected error status: {status:?}"
    );
    status
}

/// A ConfigMap with one data entry and the given labels.
pub fn config_map(name: &str, labels: &[(&str, &str)]) -> k8s_openapi::api::core::v1::ConfigMap {
    let labels: serde_json::Map<String, serde_json::Value> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "data": {"key": name},
    }))
    .expect("a valid ConfigMap")
}

/// Creates a namespace (and waits for nothing: creation is synchronous).
/// Applies `crd` (server-side, as `manager`) and waits until it is Established; the CRD API.
pub async fn apply_crd(
    client: &Client,
    crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    manager: &str,
) -> kube::Api<
    k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
> {
    use kube::runtime::wait::{await_condition, conditions};
    let crds = kube::Api::all(client.clone());
    let name = crd.metadata.name.clone().expect("a CRD has a name");
    crds.patch(
        &name,
        &kube::api::PatchParams::apply(manager).force(),
        &kube::api::Patch::Apply(crd),
    )
    .await
    .expect("apply the CRD");
    within(
        WAIT,
        await_condition(crds.clone(), &name, conditions::is_crd_established()),
    )
    .await
    .expect("the CRD becomes Established");
    crds
}

/// Runs kubectl against `server`, bounded: success, stdout, stderr.
pub async fn kubectl(server: &TestServer, args: &[&str]) -> (bool, String, String) {
    let output = within(
        Duration::from_secs(30),
        tokio::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&server.running.kubeconfig)
            .args(args)
            .output(),
    )
    .await
    .expect("run kubectl");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

pub async fn create_namespace(client: &Client, name: &str) {
    use k8s_openapi::api::core::v1::Namespace;
    let api: kube::Api<Namespace> = kube::Api::all(client.clone());
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": name}})).expect("a valid Namespace");
    within(WAIT, api.create(&Default::default(), &namespace))
        .await
        .expect("create the namespace");
}

/// Binds the ClusterRole `role` to `group` in `namespace` (a RoleBinding written through the
/// registry, as the admin would) and waits, bounded, until the server's authorizer has seen
/// it: a non-admin identity of the group may then act there.
pub async fn grant_in_namespace(running: &RunningServer, namespace: &str, group: &str, role: &str) {
    use finale_apiserver::authn::Identity;
    let bindings = running
        .registry
        .catalog()
        .lookup("rbac.authorization.k8s.io", "v1", "rolebindings")
        .expect("rolebindings are served");
    let binding = serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": format!("{group}-{role}"), "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}],
    });
    running
        .registry
        .create(&bindings, Some(namespace), binding, &Default::default())
        .await
        .expect("create the RoleBinding");
    let member = Identity {
        user: "probe".into(),
        uid: String::new(),
        groups: vec![group.to_string()],
        extra: Default::default(),
    };
    // The group holds nothing else, so any rule in the namespace is this binding's.
    let deadline = std::time::Instant::now() + WAIT;
    while running
        .authorizer
        .rules_for(&member, namespace)
        .0
        .is_empty()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the RoleBinding never reached the authorizer"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
