//! `cold-start`: time from spawning the server until its first successful authenticated
//! request, on a fresh data directory (store creation and PKI generation included) and on
//! restart with an existing one; etcd 3.4's time to its first successful read is the baseline.
//!
//! Finale is started through the e2e fixture, which returns once the server has printed its
//! address and kubeconfig; the client (trusting the CA just generated, with the token just
//! written) then polls `GET /version` every 2 ms until it answers 200. The clock starts just
//! before the spawn and stops when the first 200 response has been read in full, so it covers
//! everything a user waits for. etcd is polled the same way with a linearizable `Get`.

use std::time::{Duration, Instant};

use anyhow::Context;
use nix::sys::signal::Signal;

use crate::etcd::{EtcdPorts, EtcdProcess};
use crate::finale::{client_for, locate_binary, start_server, wait_for_version};
use crate::report::{Figure, Goal, Report, Unit};
use crate::scenarios::{Settings, Side};

const SCENARIO: &str = "cold-start";
const POLL: Duration = Duration::from_millis(2);
const LIMIT: Duration = Duration::from_secs(30);
const GOAL_MS: f64 = 250.0;

/// Fresh start then restart of one side, in milliseconds.
struct Starts {
    fresh_ms: f64,
    restart_ms: f64,
    /// Finale only: spawn until the server printed that it is serving.
    printed_ms: Option<(f64, f64)>,
}

async fn measure_finale(binary: &std::path::Path) -> anyhow::Result<Starts> {
    let dir = tempfile::tempdir().context("create a temporary data directory")?;
    let data_dir = dir.path().join("finale");
    let mut printed = Vec::new();
    let mut times = Vec::new();
    for _ in 0..2 {
        let started = Instant::now();
        let server = start_server(binary, &data_dir).await?;
        printed.push(server.startup.as_secs_f64() * 1e3);
        let client = client_for(&server)?;
        let first = wait_for_version(&client, &server.url, started, POLL, LIMIT).await?;
        times.push(first.as_secs_f64() * 1e3);
        // A clean stop, so the restart measures a normal restart rather than crash recovery.
        tokio::task::spawn_blocking(move || {
            let mut server = server;
            server.terminate(Signal::SIGTERM)
        })
        .await
        .context("server stop task")??;
    }
    Ok(Starts {
        fresh_ms: times[0],
        restart_ms: times[1],
        printed_ms: Some((printed[0], printed[1])),
    })
}

async fn measure_etcd() -> anyhow::Result<Starts> {
    let dir = tempfile::tempdir().context("create a temporary data directory")?;
    let data_dir = dir.path().join("etcd");
    let ports = EtcdPorts::pick()?;
    let mut times = Vec::new();
    for _ in 0..2 {
        let started = Instant::now();
        let mut etcd = EtcdProcess::spawn(&data_dir, ports)?;
        let first = etcd.wait_until_serving(started, POLL, LIMIT).await?;
        times.push(first.as_secs_f64() * 1e3);
        tokio::task::spawn_blocking(move || etcd.stop())
            .await
            .context("etcd stop task")??;
    }
    Ok(Starts {
        fresh_ms: times[0],
        restart_ms: times[1],
        printed_ms: None,
    })
}

pub async fn run(settings: &Settings, report: &mut Report) -> anyhow::Result<()> {
    let binary = locate_binary(settings.finale_bin.as_deref())?;
    let baseline = "etcd 3.4 start to first read";
    let mut fresh = Figure::new(
        SCENARIO,
        "cold start to first request (ms), fresh data dir",
        Unit::Millis,
        baseline,
    )
    .with_goal(Goal::AtMost(GOAL_MS));
    let mut restart = Figure::new(
        SCENARIO,
        "restart to first request (ms), existing data dir",
        Unit::Millis,
        baseline,
    )
    .with_goal(Goal::AtMost(GOAL_MS));

    for run in 0..settings.runs {
        for side in Side::order(run) {
            let starts = match side {
                Side::Finale => measure_finale(&binary).await?,
                Side::Etcd => measure_etcd().await?,
            };
            let printed = starts.printed_ms.map_or_else(String::new, |(f, r)| {
                format!(" (printed ready after {f:.1} / {r:.1} ms)")
            });
            eprintln!(
                "[{SCENARIO}] run {}/{}: {} fresh {:.1} ms, restart {:.1} ms{printed}",
                run + 1,
                settings.runs,
                side.name(),
                starts.fresh_ms,
                starts.restart_ms,
            );
            let (fresh_values, restart_values) = match side {
                Side::Finale => (&mut fresh.finale, &mut restart.finale),
                Side::Etcd => (&mut fresh.baseline, &mut restart.baseline),
            };
            fresh_values.push(starts.fresh_ms);
            restart_values.push(starts.restart_ms);
            report.raw.push(serde_json::json!({
                "scenario": SCENARIO,
                "run": run,
                "target": side.name(),
                "fresh_ms": starts.fresh_ms,
                "restart_ms": starts.restart_ms,
                "printed_ready_ms": starts.printed_ms,
            }));
        }
    }
    report.figures.push(fresh);
    report.figures.push(restart);
    Ok(())
}
