//! `idle-rss`: resident memory of an idle server after a little traffic, against an idle
//! etcd 3.4 that took the same writes.
//!
//! Each run starts both on fresh data directories, sends each a few requests (Finale: version,
//! discovery, ten ConfigMap creates and a list; etcd: ten puts and a range read), leaves both
//! idle for two seconds, then reads `VmRSS` (resident now) and `VmHWM` (peak resident) from
//! `/proc/PID/status`. Both idle at the same time, so the run costs one idle period.

use std::time::Duration;

use anyhow::{Context, bail};
use finale_etcd_rpc::etcdserverpb::{PutRequest, RangeRequest};
use finale_etcd_rpc::prefix_range_end;

use crate::etcd::{self, EtcdProcess};
use crate::finale::{Memory, client_for, locate_binary, memory_of, start_server};
use crate::report::{Figure, Goal, Report, Unit};
use crate::scenarios::{Settings, payload};

const SCENARIO: &str = "idle-rss";
const IDLE: Duration = Duration::from_secs(2);
const WRITES: usize = 10;
const GOAL_MB: f64 = 50.0;

/// A few requests of each kind a client makes at start-up.
async fn exercise_finale(client: &reqwest::Client, url: &str) -> anyhow::Result<()> {
    for path in ["/version", "/api", "/apis", "/api/v1/namespaces"] {
        let response = client.get(format!("{url}{path}")).send().await?;
        if !response.status().is_success() {
            bail!("GET {path} answered {}", response.status());
        }
        response.bytes().await?;
    }
    let data = payload();
    for i in 0..WRITES {
        let body = format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"idle-{i}"}},"data":{{"payload":"{data}"}}}}"#
        );
        let response = client
            .post(format!("{url}/api/v1/namespaces/default/configmaps"))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await?;
        if response.status() != reqwest::StatusCode::CREATED {
            bail!("create answered {}", response.status());
        }
        response.bytes().await?;
    }
    let response = client
        .get(format!("{url}/api/v1/namespaces/default/configmaps"))
        .send()
        .await?;
    if !response.status().is_success() {
        bail!("list answered {}", response.status());
    }
    response.bytes().await?;
    Ok(())
}

async fn exercise_etcd(endpoint: &str) -> anyhow::Result<()> {
    let mut kv = etcd::connect(endpoint).await?.kv();
    let data = payload();
    for i in 0..WRITES {
        kv.put(PutRequest {
            key: format!("/registry/configmaps/default/idle-{i}").into_bytes(),
            value: data.clone().into_bytes(),
            ..Default::default()
        })
        .await?;
    }
    let prefix = b"/registry/configmaps/default/";
    kv.range(RangeRequest {
        key: prefix.to_vec(),
        range_end: prefix_range_end(prefix),
        ..Default::default()
    })
    .await?;
    Ok(())
}

pub async fn run(settings: &Settings, report: &mut Report) -> anyhow::Result<()> {
    let binary = locate_binary(settings.finale_bin.as_deref())?;
    let baseline = "etcd 3.4, idle after the same writes";
    let mut rss = Figure::new(SCENARIO, "idle VmRSS (MB)", Unit::Megabytes, baseline)
        .with_goal(Goal::AtMost(GOAL_MB));
    let mut hwm = Figure::new(SCENARIO, "peak VmHWM (MB)", Unit::Megabytes, baseline);

    for run in 0..settings.runs {
        let dir = tempfile::tempdir().context("create a temporary directory")?;

        let server = start_server(&binary, &dir.path().join("finale")).await?;
        let client = client_for(&server)?;
        exercise_finale(&client, &server.url).await?;
        // Drop the client so its connection closes and the server frees it, as after a burst
        // of kubectl commands.
        drop(client);

        let etcd = EtcdProcess::start(&dir.path().join("etcd")).await?;
        exercise_etcd(&etcd.endpoint).await?;

        tokio::time::sleep(IDLE).await;
        let finale_memory = memory_of(server.pid().context("the server has exited")?)?;
        let etcd_memory = memory_of(etcd.pid().context("etcd has exited")?)?;
        drop(server);
        drop(etcd);

        let show = |m: Memory| format!("VmRSS {:.1} MB, VmHWM {:.1} MB", m.rss_mb, m.hwm_mb);
        eprintln!(
            "[{SCENARIO}] run {}/{}: finale {}; etcd {}",
            run + 1,
            settings.runs,
            show(finale_memory),
            show(etcd_memory)
        );
        rss.finale.push(finale_memory.rss_mb);
        rss.baseline.push(etcd_memory.rss_mb);
        hwm.finale.push(finale_memory.hwm_mb);
        hwm.baseline.push(etcd_memory.hwm_mb);
        report.raw.push(serde_json::json!({
            "scenario": SCENARIO,
            "run": run,
            "finale": {"vm_rss_mb": finale_memory.rss_mb, "vm_hwm_mb": finale_memory.hwm_mb},
            "etcd": {"vm_rss_mb": etcd_memory.rss_mb, "vm_hwm_mb": etcd_memory.hwm_mb},
        }));
    }
    report.figures.push(rss);
    report.figures.push(hwm);
    Ok(())
}
