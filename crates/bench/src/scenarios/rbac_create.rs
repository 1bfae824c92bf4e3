//! `rbac-create`: the cost of authorization and audit (issue #14's figures). ConfigMap
//! creates/s over HTTPS with 64 clients as a ServiceAccount under RBAC, against the same
//! creates as the admin (`system:masters`, which RBAC never evaluates), in the same run:
//!
//! - on the same server, without an audit log (goal ≥ 0.95×);
//! - on a second server that writes an audit log at the default `Metadata` level, against the
//!   admin on the first (goal ≥ 0.9×): the cost of RBAC and audit together.
//!
//! The ServiceAccount `bench/creator` authenticates with a bound token from the TokenRequest
//! API, so every request verifies an ES256 signature (cached) and looks up the account.
//! Before measuring, the admin writes 200 roles and bindings on each server that do not
//! apply to it (100 ClusterRoles with a ClusterRoleBinding each, 100 RoleBindings in
//! `default` to other users); its own grant, `edit` in `default`, is the RoleBinding visited
//! last, so each of its requests walks every binding.

use std::sync::Arc;

use anyhow::{Context, bail};
use serde_json::json;

use crate::finale::{client_for, https_client, locate_binary};
use crate::report::{Goal, Report};
use crate::scenarios::http_create::create_configmaps;
use crate::scenarios::{LoadFigures, Settings, Side, payload, progress_load};

const SCENARIO: &str = "rbac-create";
const CLIENTS: usize = 64;
const NOISE: usize = 100;

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

/// A server prepared for the benchmark: the noise roles, the ServiceAccount and its grant.
struct Prepared {
    server: finale_e2e::FinaleServer,
    user_clients: Vec<reqwest::Client>,
    admin_clients: Vec<reqwest::Client>,
    url: Arc<str>,
}

async fn prepare(
    binary: std::path::PathBuf,
    dir: &std::path::Path,
    extra_args: Vec<String>,
) -> anyhow::Result<Prepared> {
    let data_dir = dir.join("finale");
    let server = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = extra_args.iter().map(String::as_str).collect();
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
    let core = format!("{}/api/v1", server.url);
    create(
        &admin,
        &format!("{core}/namespaces"),
        json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"},
        }),
    )
    .await?;
    create(
        &admin,
        &format!("{core}/namespaces/bench/serviceaccounts"),
        json!({
            "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "creator"},
        }),
    )
    .await?;
    create(&admin, &format!("{rbac}/namespaces/default/rolebindings"), json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "zz-bench-creator-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "ServiceAccount", "name": "creator", "namespace": "bench"}],
    }))
    .await?;
    let issued: serde_json::Value = admin
        .post(format!(
            "{core}/namespaces/bench/serviceaccounts/creator/token"
        ))
        .json(&json!({
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": 7200},
        }))
        .send()
        .await
        .context("request the ServiceAccount's token")?
        .error_for_status()
        .context("request the ServiceAccount's token")?
        .json()
        .await
        .context("decode the TokenRequest")?;
    let token = issued["status"]["token"]
        .as_str()
        .context("the TokenRequest returned no token")?
        .to_string();
    let ca = server.ca_pem()?;
    let user_clients = (0..CLIENTS)
        .map(|_| https_client(&ca, &token))
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
            .context("probe the ServiceAccount's grant")?;
        if probe.status().is_success() {
            break;
        }
        if std::time::Instant::now() > deadline {
            bail!(
                "the ServiceAccount's RoleBinding never took effect: {}",
                probe.status()
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    Ok(Prepared {
        server,
        user_clients,
        admin_clients,
        url,
    })
}

/// Who creates, on which server.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Creator {
    Admin,
    ServiceAccount,
    AuditedServiceAccount,
}

impl Creator {
    fn label(self) -> &'static str {
        match self {
            Creator::Admin => "admin",
            Creator::ServiceAccount => "service-account",
            Creator::AuditedServiceAccount => "service-account+audit",
        }
    }

    /// The three, in the order to measure them in run `run` (rotated, so none always goes
    /// first on a warmer or quieter machine).
    fn order(run: usize) -> [Creator; 3] {
        let mut all = [
            Creator::ServiceAccount,
            Creator::Admin,
            Creator::AuditedServiceAccount,
        ];
        all.rotate_left(run % 3);
        all
    }
}

pub async fn run(settings: &Settings, report: &mut Report) -> anyhow::Result<()> {
    let binary = locate_binary(settings.finale_bin.as_deref())?;
    let dir = tempfile::tempdir().context("create a temporary data directory")?;
    let plain = prepare(binary.clone(), &dir.path().join("plain"), Vec::new()).await?;
    let log_dir = tempfile::tempdir_in(settings.audit_log_dir.as_deref().unwrap_or(dir.path()))
        .context("create the audit log's directory")?;
    let audit_log = log_dir.path().join("audit.log");
    let audited = prepare(
        binary,
        &dir.path().join("audited"),
        vec!["--audit-log-path".into(), audit_log.display().to_string()],
    )
    .await?;
    let data: Arc<str> = payload().into();
    let mut rbac_figures = LoadFigures::new(
        SCENARIO,
        &format!(
            "HTTPS creates/s as a ServiceAccount under RBAC (200 roles+bindings), {CLIENTS} clients"
        ),
        &format!("HTTPS create latency as a ServiceAccount under RBAC, {CLIENTS} clients,"),
        &format!("the same creates as the admin (system:masters), {CLIENTS} clients"),
        Some(Goal::RatioAtLeast(0.95)),
    );
    let mut audit_figures = LoadFigures::new(
        SCENARIO,
        &format!(
            "HTTPS creates/s as a ServiceAccount under RBAC with audit at Metadata, {CLIENTS} clients"
        ),
        &format!("HTTPS create latency under RBAC with audit at Metadata, {CLIENTS} clients,"),
        &format!("the same creates as the admin without audit, {CLIENTS} clients"),
        Some(Goal::RatioAtLeast(0.9)),
    );
    for run in 0..settings.runs {
        let spec = settings.load_spec(CLIENTS);
        for creator in Creator::order(run) {
            let (clients, url) = match creator {
                Creator::Admin => (&plain.admin_clients, &plain.url),
                Creator::ServiceAccount => (&plain.user_clients, &plain.url),
                Creator::AuditedServiceAccount => (&audited.user_clients, &audited.url),
            };
            let who = creator.label();
            let prefix = format!("rbac-r{run}-{}", who.replace('+', "-"));
            let result = create_configmaps(&spec, clients, url, &prefix, &data).await?;
            progress_load(
                SCENARIO,
                run,
                settings.runs,
                &format!("{CLIENTS} clients"),
                who,
                &result,
            );
            let label = format!("{SCENARIO} run {}", run + 1);
            match creator {
                Creator::Admin => {
                    rbac_figures.push(Side::Etcd, &result, report, &label);
                    audit_figures.push(Side::Etcd, &result, report, &label);
                }
                Creator::ServiceAccount => rbac_figures.push(Side::Finale, &result, report, &label),
                Creator::AuditedServiceAccount => {
                    audit_figures.push(Side::Finale, &result, report, &label)
                }
            }
            report.raw.push(json!({
                "scenario": SCENARIO, "run": run, "clients": CLIENTS, "target": who,
                "result": result.summary(),
            }));
        }
    }
    report.figures.extend(rbac_figures.into_figures());
    report.figures.extend(audit_figures.into_figures());
    let audited_bytes = std::fs::metadata(&audit_log).map(|m| m.len()).unwrap_or(0);
    if audited_bytes == 0 {
        bail!(
            "the audited server wrote no audit log at {}",
            audit_log.display()
        );
    }
    for (mut prepared, which) in [(plain, "plain"), (audited, "audited")] {
        if !prepared.server.is_running() {
            bail!(
                "the {which} finale server exited during the benchmark; its log ends:\n{}",
                prepared.server.log_tail(30)
            );
        }
    }
    Ok(())
}
