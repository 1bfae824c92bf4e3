//! `http-create`: ConfigMap creates/s over HTTPS with 64 concurrent clients against a
//! `finale server` process, against raw etcd 3.4 puts with 64 concurrent writers measured in
//! the same invocation.
//!
//! Each client is its own `reqwest::Client` (so 64 HTTP/1.1 keep-alive connections, TLS
//! trusting only the server's CA, the admin bearer token) and creates ConfigMaps with unique
//! names and a 512-byte data value, awaiting each `201 Created` before sending the next.
//! The baseline is what Kubernetes' own API server could at best do on the same machine: the
//! storage writes alone, with no HTTP, TLS, JSON, validation or watch cache.
//!
//! The harness, the server and etcd share the machine's CPUs, so on a small machine the
//! client's TLS and JSON work competes with the server's; see docs/benchmarks.md.

use std::sync::Arc;

use anyhow::{Context, bail};

use crate::etcd;
use crate::finale::{client_for, cpu_seconds, locate_binary, memory_of, start_server};
use crate::load::{LoadResult, LoadSpec, Worker};
use crate::report::{Goal, Report};
use crate::scenarios::{LoadFigures, Settings, Side, payload, progress_load, store};
use crate::stats::median;

const SCENARIO: &str = "http-create";
const CLIENTS: usize = 64;

/// Creates ConfigMaps in `default`, one at a time, over its own connection.
pub(crate) struct ConfigMapCreator {
    pub client: reqwest::Client,
    /// The collection URL, `…/api/v1/namespaces/default/configmaps`.
    pub url: Arc<str>,
    /// Names are `{prefix}{seq}`: unique per run and worker.
    pub prefix: String,
    pub data: Arc<str>,
}

impl Worker for ConfigMapCreator {
    async fn op(&mut self, seq: u64) -> anyhow::Result<()> {
        // Name and data are plain ASCII letters, digits and dashes: no JSON escaping needed.
        let body = format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{}{seq}"}},"data":{{"payload":"{}"}}}}"#,
            self.prefix, self.data
        );
        let response = self
            .client
            .post(&*self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .context("POST configmap")?;
        let status = response.status();
        // Read the whole body so the connection can be reused for the next request.
        let body = response.bytes().await.context("read the create response")?;
        if status != reqwest::StatusCode::CREATED {
            let text = String::from_utf8_lossy(&body);
            bail!(
                "create answered {status}: {}",
                text.chars().take(300).collect::<String>()
            );
        }
        Ok(())
    }
}

/// One load of ConfigMap creates: worker `w` creates through `clients[w]` at `url`, naming
/// its objects `{prefix}-w{w}-{seq}` (unique per load, as `prefix` must be).
pub(crate) async fn create_configmaps(
    spec: &LoadSpec,
    clients: &[reqwest::Client],
    url: &Arc<str>,
    prefix: &str,
    data: &Arc<str>,
) -> anyhow::Result<LoadResult> {
    crate::load::run(spec, |worker| ConfigMapCreator {
        client: clients[worker].clone(),
        url: Arc::clone(url),
        prefix: format!("{prefix}-w{worker}-"),
        data: Arc::clone(data),
    })
    .await
}

pub async fn run(settings: &Settings, report: &mut Report) -> anyhow::Result<()> {
    let binary = locate_binary(settings.finale_bin.as_deref())?;
    let dir = tempfile::tempdir().context("create a temporary data directory")?;
    let mut server = start_server(&binary, &dir.path().join("finale")).await?;
    let etcd = tokio::task::spawn_blocking(finale_e2e::Etcd::start)
        .await
        .context("etcd start task")?
        .context("start etcd")?;
    let etcd_client = etcd::connect(&etcd.endpoint).await?;

    let clients = (0..CLIENTS)
        .map(|_| client_for(&server))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let url: Arc<str> = format!("{}/api/v1/namespaces/default/configmaps", server.url).into();
    let data: Arc<str> = payload().into();

    let mut figures = LoadFigures::new(
        SCENARIO,
        &format!("HTTPS creates/s, {CLIENTS} clients"),
        &format!("HTTPS create latency, {CLIENTS} clients,"),
        &format!("etcd 3.4 puts, {CLIENTS} writers"),
        Some(Goal::RatioAtLeast(0.5)),
    );
    let server_pid = server.pid().context("the server has exited")?;
    let mut server_cores = Vec::new();
    let mut harness_cores = Vec::new();
    for run in 0..settings.runs {
        let spec = settings.load_spec(CLIENTS);
        let what = format!("{CLIENTS} clients");
        for side in Side::order(run) {
            // Where the CPUs went during Finale's run: the server and this harness share them.
            let cpu_before = (
                cpu_seconds(server_pid)?,
                cpu_seconds(std::process::id())?,
                std::time::Instant::now(),
            );
            let result = match side {
                Side::Finale => {
                    create_configmaps(&spec, &clients, &url, &format!("bench-r{run}"), &data)
                        .await?
                }
                Side::Etcd => {
                    store::measure_etcd(&etcd_client, &spec, &format!("http-r{run}")).await?
                }
            };
            let wall = cpu_before.2.elapsed().as_secs_f64();
            let server_used = (cpu_seconds(server_pid)? - cpu_before.0) / wall;
            let harness_used = (cpu_seconds(std::process::id())? - cpu_before.1) / wall;
            progress_load(SCENARIO, run, settings.runs, &what, side.name(), &result);
            if side == Side::Finale {
                eprintln!(
                    "[{SCENARIO}] run {}/{}: CPU cores used: server {server_used:.2}, \
                     harness {harness_used:.2}",
                    run + 1,
                    settings.runs
                );
                server_cores.push(server_used);
                harness_cores.push(harness_used);
            }
            figures.push(
                side,
                &result,
                report,
                &format!("{SCENARIO} run {}", run + 1),
            );
            report.raw.push(serde_json::json!({
                "scenario": SCENARIO,
                "run": run,
                "clients": CLIENTS,
                "target": side.name(),
                "result": result.summary(),
                "cpu_cores_used": {"finale_server": server_used, "harness": harness_used},
            }));
        }
    }
    report.figures.extend(figures.into_figures());
    if let (Some(server), Some(harness)) = (median(&server_cores), median(&harness_cores)) {
        report.notes.push(format!(
            "during the HTTPS create runs the finale server used {server:.2} CPU cores and the \
             harness (64 TLS clients) {harness:.2}, of {} (medians)",
            report.context.nproc
        ));
    }
    // A server that died mid-run shows up as failed creates; say why.
    if !server.is_running() {
        bail!(
            "finale server exited during the benchmark; its log ends:\n{}",
            server.log_tail(30)
        );
    }
    // Not a figure (etcd's fixture does not expose its pid for a baseline), but worth knowing
    // next to the idle figure: memory once the store and watch cache hold every object created.
    if let Some(pid) = server.pid() {
        let memory = memory_of(pid)?;
        let created: f64 = created_in_windows(report);
        report.notes.push(format!(
            "finale server after the http-create runs (holding at least {created:.0} \
             ConfigMaps): VmRSS {:.1} MB, VmHWM {:.1} MB",
            memory.rss_mb, memory.hwm_mb
        ));
        report.raw.push(serde_json::json!({
            "scenario": SCENARIO,
            "target": "finale",
            "after_load": {"vm_rss_mb": memory.rss_mb, "vm_hwm_mb": memory.hwm_mb},
        }));
    }
    // Dropping the fixtures kills and reaps both processes; the temp dirs go after them.
    drop(server);
    drop(etcd);
    Ok(())
}

/// ConfigMaps created in this scenario's measured windows, from the raw runs.
fn created_in_windows(report: &Report) -> f64 {
    report
        .raw
        .iter()
        .filter(|r| r["scenario"] == SCENARIO && r["target"] == "finale")
        .filter_map(|r| r["result"]["ops"].as_f64())
        .sum()
}
