//! Authentication, TLS trust, `/version`, discovery (legacy and aggregated) and the system
//! namespaces, as kube-rs sees them (api-surface §1, §6.1, §9).

mod common;

use std::collections::BTreeSet;

use common::{TestServer, WAIT, expect_api_error, within};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::ListParams;
use kube::core::GroupVersionKind;
use kube::discovery::Discovery;
use kube::{Api, Client, ResourceExt};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_or_missing_token_is_unauthorized() {
    let server = TestServer::start().await;

    let mut wrong = server.config().await;
    wrong.auth_info.token = Some("not-the-admin-token".to_string().into());
    wrong.auth_info.token_file = None;
    let client = Client::try_from(wrong).expect("build a client");
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let status = expect_api_error(
        within(WAIT, api.list(&ListParams::default())).await,
        401,
        "Unauthorized",
    );
    assert_eq!(status.code, 401);

    let mut anonymous = server.config().await;
    anonymous.auth_info.token = None;
    anonymous.auth_info.token_file = None;
    let client = Client::try_from(anonymous).expect("build a client");
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    expect_api_error(
        within(WAIT, api.list(&ListParams::default())).await,
        401,
        "Unauthorized",
    );
    // Discovery and /version need credentials too.
    let result = within(WAIT, client.apiserver_version()).await;
    assert!(
        matches!(&result, Err(kube::Error::Api(status)) if status.code == 401),
        "{result:?}"
    );

    // The right token still works.
    let api: Api<ConfigMap> = Api::default_namespaced(server.client.clone());
    within(WAIT, api.list(&ListParams::default()))
        .await
        .expect("the admin token is accepted");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_does_not_trust_the_ca_fails_tls() {
    let server = TestServer::start().await;
    let stranger = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])
        .expect("generate an unrelated CA");
    let mut config = server.config().await;
    config.root_cert = Some(vec![stranger.cert.der().to_vec()]);
    config.root_cert_file = None;
    config.accept_invalid_certs = false;
    match Client::try_from(config) {
        // Building may already fail; otherwise the first request must.
        Err(_) => {}
        Ok(client) => {
            let api: Api<ConfigMap> = Api::default_namespaced(client);
            let result = within(WAIT, api.list(&ListParams::default())).await;
            match result {
                Ok(_) => panic!("a client that does not trust the server's CA got an answer"),
                Err(kube::Error::Api(status)) => {
                    panic!("the TLS handshake should fail before any HTTP answer: {status:?}")
                }
                Err(_) => {}
            }
        }
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_reports_kubernetes_1_33() {
    let server = TestServer::start().await;
    let info = within(WAIT, server.client.apiserver_version())
        .await
        .expect("/version");
    assert_eq!(info.major, "1");
    assert_eq!(info.minor, "33");
    assert!(
        info.git_version.starts_with("v1.33."),
        "{}",
        info.git_version
    );
    server.shutdown().await;
}

/// The Accept header kubectl and kube-rs `run_aggregated` send to `/api` and `/apis`.
const AGGREGATED_ACCEPT: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

fn expected_kinds() -> Vec<(GroupVersionKind, &'static str)> {
    vec![
        (GroupVersionKind::gvk("", "v1", "ConfigMap"), "configmaps"),
        (
            GroupVersionKind::gvk("apps", "v1", "Deployment"),
            "deployments",
        ),
        (
            GroupVersionKind::gvk("coordination.k8s.io", "v1", "Lease"),
            "leases",
        ),
        (
            GroupVersionKind::gvk("events.k8s.io", "v1", "Event"),
            "events",
        ),
        (GroupVersionKind::gvk("", "v1", "Event"), "events"),
        (GroupVersionKind::gvk("", "v1", "Namespace"), "namespaces"),
    ]
}

fn check_discovery(discovery: &Discovery, how: &str) {
    for group in ["", "apps", "coordination.k8s.io", "events.k8s.io", "batch"] {
        assert!(discovery.has_group(group), "{how}: group {group:?} missing");
    }
    for (gvk, plural) in expected_kinds() {
        let (resource, capabilities) = discovery
            .resolve_gvk(&gvk)
            .unwrap_or_else(|| panic!("{how}: {gvk:?} not discovered"));
        assert_eq!(resource.plural, plural, "{how}: {gvk:?}");
        assert!(
            capabilities.supports_operation("watch") && capabilities.supports_operation("list"),
            "{how}: {gvk:?} verbs {:?}",
            capabilities.operations
        );
    }
    let (_, namespace) = discovery
        .resolve_gvk(&GroupVersionKind::gvk("", "v1", "Namespace"))
        .unwrap();
    assert_eq!(namespace.scope, kube::discovery::Scope::Cluster, "{how}");
    let (_, deployment) = discovery
        .resolve_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment"))
        .unwrap();
    assert_eq!(
        deployment.scope,
        kube::discovery::Scope::Namespaced,
        "{how}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_and_aggregated_discovery_find_the_served_kinds() {
    let server = TestServer::start().await;
    let legacy = within(WAIT, Discovery::new(server.client.clone()).run())
        .await
        .expect("legacy discovery");
    check_discovery(&legacy, "legacy discovery");
    // run_aggregated silently finds nothing if the server answers with the wrong content type.
    let aggregated = within(WAIT, Discovery::new(server.client.clone()).run_aggregated())
        .await
        .expect("aggregated discovery");
    check_discovery(&aggregated, "aggregated discovery");
    let groups =
        |d: &Discovery| -> BTreeSet<String> { d.groups().map(|g| g.name().to_string()).collect() };
    assert_eq!(groups(&legacy), groups(&aggregated));

    // kubectl reads the body as aggregated discovery only with the exact media type
    // (api-surface §1.2).
    for path in ["/api", "/apis"] {
        let request = http::Request::get(path)
            .header("accept", AGGREGATED_ACCEPT)
            .body(kube::client::Body::from(Vec::new()))
            .unwrap();
        let response = within(WAIT, server.client.send(request)).await.unwrap();
        assert_eq!(response.status(), http::StatusCode::OK, "{path}");
        assert_eq!(
            response
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok()),
            Some("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"),
            "{path}"
        );
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_system_namespaces_exist() {
    let server = TestServer::start().await;
    let api: Api<Namespace> = Api::all(server.client.clone());
    let list = within(WAIT, api.list(&ListParams::default()))
        .await
        .unwrap();
    let names: BTreeSet<String> = list.items.iter().map(ResourceExt::name_any).collect();
    for expected in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert!(names.contains(expected), "{expected} in {names:?}");
    }
    let default = within(WAIT, api.get("default")).await.unwrap();
    assert_eq!(
        default.status.and_then(|s| s.phase).as_deref(),
        Some("Active")
    );
    server.shutdown().await;
}
