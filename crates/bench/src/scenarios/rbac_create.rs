//! `rbac-create`: the cost of authorization (issue #14's figure). ConfigMap creates/s over
//! HTTPS with 64 clients as an ordinary user under RBAC, against the same creates as the
//! admin (`system:masters`, which RBAC never evaluates) on the same server, in the same run.
//!
//! The user is a `--token-auth-file` identity (service-account tokens are not built yet).
//! Before measuring, the admin writes 200 roles and bindings that do not apply to the user
//! (100 ClusterRoles with a ClusterRoleBinding each, 100 RoleBindings in `default` to other
//! users); the user's own grant, `edit` in `default`, is the RoleBinding visited last, so each
//! of its requests walks every binding.

use std::sync::Arc;

use anyhow::{Context, bail};
use serde_json::json;

use crate::finale::{client_for, https_client, locate_binary};
use crate::report::{Goal, Report};
use crate::scenarios::http_create::ConfigMapCreator;
use crate::scenarios::{LoadFigures, Settings, Side, payload, progress_load};

const SCENARIO: &str = "rbac-create";
const CLIENTS: usize = 64;
const NOISE: usize = 100;
const USER_TOKEN: &str = "bench-user-token-0123456789abcdef";

async fn create(
    client: &reqwest::Client,
    url: &str,
    body: serde_json::Value,
) -> anyhow::Result<()> {
    let response = client.post(url).json(&body).send().await.context("POST")?;
    let status = response.status();
    if status != reqwest::StatusCode::CREATED {
        bail!(
            "{url} answered {status}: {}",
            response.text().await.unwrap_or_default()
        );
    }
    Ok(())
}

pub async fn run(settings: &Settings, report: &mut Report) -> anyhow::Result<()> {
    let binary = locate_binary(settings.finale_bin.as_deref())?;
    let dir = tempfile::tempdir().context("create a temporary data directory")?;
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, format!("{USER_TOKEN},bench-user,1000,\"bench\"\n"))
        .context("write the token file")?;
    let data_dir = dir.path().join("finale");
    let mut server = tokio::task::spawn_blocking(move || {
        let args = ["--token-auth-file", tokens.to_str().unwrap_or_default()];
        finale_e2e::FinaleServer::start_with(&binary, &data_dir, "127.0.0.1:0", &args)
    })
    .await
    .context("server start task")??;
    let admin = client_for(&server)?;
    let rbac = format!("{}/apis/rbac.authorization.k8s.io/v1", server.url);
    for i in 0..NOISE {
        create(&admin, &format!("{rbac}/clusterroles"), json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": format!("noise-{i:03}")},
            "rules": [{"apiGroups": ["example.com"], "resources": [format!("things{i}")], "verbs": ["get", "list"]}],
        }))
        .await?;
        create(&admin, &format!("{rbac}/clusterrolebindings"), json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": format!("noise-{i:03}")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": format!("noise-{i:03}")},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": format!("someone-{i}")}],
        }))
        .await?;
        create(&admin, &format!("{rbac}/namespaces/default/rolebindings"), json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": format!("noise-{i:03}")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": format!("someone-{i}")}],
        }))
        .await?;
    }
    create(&admin, &format!("{rbac}/namespaces/default/rolebindings"), json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "zz-bench-user-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bench-user"}],
    }))
    .await?;
    let ca = server.ca_pem()?;
    let user_clients = (0..CLIENTS)
        .map(|_| https_client(&ca, USER_TOKEN))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let admin_clients = (0..CLIENTS)
        .map(|_| client_for(&server))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let url: Arc<str> = format!("{}/api/v1/namespaces/default/configmaps", server.url).into();
    // The grant arrives through the authorizer's watch: wait for it, bounded.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let probe = user_clients[0]
            .get(&*url)
            .send()
            .await
            .context("probe the user's grant")?;
        if probe.status().is_success() {
            break;
        }
        if std::time::Instant::now() > deadline {
            bail!(
                "the user's RoleBinding never took effect: {}",
                probe.status()
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let data: Arc<str> = payload().into();
    let mut figures = LoadFigures::new(
        SCENARIO,
        &format!("HTTPS creates/s as a user under RBAC (200 roles+bindings), {CLIENTS} clients"),
        &format!("HTTPS create latency under RBAC, {CLIENTS} clients,"),
        &format!("the same creates as the admin (system:masters), {CLIENTS} clients"),
        Some(Goal::RatioAtLeast(0.95)),
    );
    for run in 0..settings.runs {
        let spec = settings.load_spec(CLIENTS);
        for side in Side::order(run) {
            let (clients, who) = match side {
                Side::Finale => (&user_clients, "user"),
                Side::Etcd => (&admin_clients, "admin"),
            };
            let result = crate::load::run(&spec, |worker| ConfigMapCreator {
                client: clients[worker].clone(),
                url: Arc::clone(&url),
                prefix: format!("rbac-r{run}-{who}-w{worker}-"),
                data: Arc::clone(&data),
            })
            .await?;
            progress_load(
                SCENARIO,
                run,
                settings.runs,
                &format!("{CLIENTS} clients"),
                who,
                &result,
            );
            figures.push(
                side,
                &result,
                report,
                &format!("{SCENARIO} run {}", run + 1),
            );
            report.raw.push(json!({
                "scenario": SCENARIO, "run": run, "clients": CLIENTS, "target": who,
                "result": result.summary(),
            }));
        }
    }
    report.figures.extend(figures.into_figures());
    if !server.is_running() {
        bail!(
            "finale server exited during the benchmark; its log ends:\n{}",
            server.log_tail(30)
        );
    }
    drop(server);
    Ok(())
}
