//! `deletion-insight`: how fast `finale explain` and `finale plan` answer from the server's
//! indexes, against the same commands computing the answer in the client
//! (`--client-side`: list every resource through discovery, then run the same code over
//! the copy — what kubectl-tree and other client tools must do), in the same invocation.
//!
//! Set-up, not timed, on one `finale server`:
//! - namespace `insight`: 100 ConfigMaps holding the finalizer `bench.finale.dev/hold`,
//!   which no `FinalizerClaim` covers, deleted (so each is stuck), and 49 900 Widgets (a
//!   custom resource), 50 000 objects in all (`--insight-objects`);
//! - namespace `plan`: one owner ConfigMap and 10 000 ConfigMaps it owns
//!   (`--plan-dependents`).
//!
//! Timed, per run: each command is the real `finale` binary started as a user would start it
//! (kubeconfig, discovery, the answer, JSON on stdout), measured from spawn to exit:
//! - `finale explain configmap/cm-K -n insight -o json`, 20 times over different stuck
//!   objects (server side), and once with `--client-side`;
//! - `finale plan configmap/owner -n plan -o json`, 20 times (server side), and once with
//!   `--client-side`.
//!
//! The server side's figure per run is the p99 of its 20 invocations (the slowest, at 20), or
//! the median for the speed-up rows; the client side's is its one invocation. Every answer
//! is checked: explain must say `Stuck`, plan must count the 10 000 dependents as deleted.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;

use crate::finale::{client_for, locate_binary, start_server};
use crate::report::{Figure, Goal, Report, Unit};
use crate::scenarios::Settings;
use crate::scenarios::objects::{self, Action, Collection, Kind, OwnerRef, Owners};
use crate::stats::{median, percentile};

const SCENARIO: &str = "deletion-insight";
const CLIENTS: usize = 64;
/// Stuck objects among the namespace's objects.
const STUCK: u64 = 100;
/// Server-side invocations per run.
const SERVER_SAMPLES: usize = 20;
/// The goals: p99 within 100 ms, and at least 50× faster than the client-side walk.
const GOAL_P99_MS: f64 = 100.0;
const GOAL_RATIO: f64 = 1.0 / 50.0;
/// Bound on one CLI invocation (a client-side walk of 50 000 objects included).
const COMMAND_LIMIT: Duration = Duration::from_secs(300);

/// The bound on creating `count` objects.
fn limit_for(count: u64) -> Duration {
    Duration::from_secs(60) + Duration::from_millis(count.saturating_mul(5))
}

struct Rows {
    p99: Figure,
    median: Figure,
}

impl Rows {
    fn new(what: &str) -> Rows {
        Rows {
            p99: Figure::new(
                SCENARIO,
                &format!("{what}: p99 of {SERVER_SAMPLES} (ms)"),
                Unit::Millis,
                &format!("{what} --client-side (ms)"),
            )
            .with_goal(Goal::AtMost(GOAL_P99_MS)),
            median: Figure::new(
                SCENARIO,
                &format!("{what}: median (ms), against the client-side walk"),
                Unit::Millis,
                &format!("{what} --client-side (ms)"),
            )
            .with_goal(Goal::RatioAtMost(GOAL_RATIO)),
        }
    }

    fn push(&mut self, server: &[f64], client: f64) {
        if let Some(p99) = percentile(server, 0.99) {
            self.p99.finale.push(p99);
        }
        if let Some(median) = median(server) {
            self.median.finale.push(median);
        }
        self.p99.baseline.push(client);
        self.median.baseline.push(client);
    }
}

pub async fn run(settings: &Settings, report: &mut Report) -> anyhow::Result<()> {
    let objects = settings.insight_objects;
    let dependents = settings.plan_dependents;
    let binary = locate_binary(settings.finale_bin.as_deref())?;
    let dir = tempfile::tempdir().context("create a temporary data directory")?;
    let server = start_server(&binary, &dir.path().join("finale")).await?;
    let clients = (0..CLIENTS)
        .map(|_| client_for(&server))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let control = &clients[0];
    let data: std::sync::Arc<str> = crate::scenarios::payload().into();

    eprintln!("[{SCENARIO}] set-up: {objects} objects in namespace insight, {STUCK} of them stuck");
    objects::create_namespace(control, &server.url, "insight").await?;
    objects::install_widget_crd(control, &server.url, Duration::from_secs(30)).await?;
    let stuck = Collection::new(Kind::ConfigMap, &server.url, "insight");
    objects::setup(
        &clients,
        &stuck,
        STUCK,
        Action::Create {
            data: data.clone(),
            finalizer: true,
            owners: Owners::none(),
        },
        limit_for(STUCK),
    )
    .await?;
    objects::setup(&clients, &stuck, STUCK, Action::Delete, limit_for(STUCK)).await?;
    let widgets = Collection::new(Kind::Widget, &server.url, "insight");
    let others = objects.saturating_sub(STUCK);
    objects::setup(
        &clients,
        &widgets,
        others,
        Action::Create {
            data: data.clone(),
            finalizer: false,
            owners: Owners::none(),
        },
        limit_for(others),
    )
    .await?;

    eprintln!("[{SCENARIO}] set-up: one owner and {dependents} dependents in namespace plan");
    objects::create_namespace(control, &server.url, "plan").await?;
    let owned = Collection::new(Kind::ConfigMap, &server.url, "plan");
    let owner_uid = objects::create_object(control, &owned, "owner", None, &data).await?;
    objects::setup(
        &clients,
        &owned,
        dependents,
        Action::Create {
            data,
            finalizer: false,
            owners: Owners::round_robin(vec![OwnerRef {
                kind: Kind::ConfigMap,
                name: "owner".to_string(),
                uid: owner_uid,
                block_owner_deletion: false,
            }]),
        },
        limit_for(dependents),
    )
    .await?;

    let kubeconfig = server.kubeconfig.clone();
    let mut explain = Rows::new(&format!("explain a stuck object, namespace of {objects}"));
    let mut plan = Rows::new(&format!("plan an owner of {dependents} dependents"));
    for run in 0..settings.runs {
        let mut server_side = Vec::with_capacity(SERVER_SAMPLES);
        for sample in 0..SERVER_SAMPLES {
            let target = format!(
                "configmap/{}",
                Kind::ConfigMap.object_name(sample as u64 % STUCK)
            );
            let (ms, answer) =
                finale(&binary, &kubeconfig, &["explain", &target, "-n", "insight"]).await?;
            expect_verdict(&answer, "Stuck", "explain")?;
            server_side.push(ms);
        }
        let target = format!(
            "configmap/{}",
            Kind::ConfigMap.object_name(run as u64 % STUCK)
        );
        let (client_ms, answer) = finale(
            &binary,
            &kubeconfig,
            &["explain", &target, "-n", "insight", "--client-side"],
        )
        .await?;
        expect_verdict(&answer, "Stuck", "explain --client-side")?;
        explain.push(&server_side, client_ms);
        eprintln!(
            "[{SCENARIO}] run {}: explain median {:.1} ms, client-side {client_ms:.0} ms",
            run + 1,
            median(&server_side).unwrap_or(f64::NAN)
        );

        let mut server_side = Vec::with_capacity(SERVER_SAMPLES);
        for _ in 0..SERVER_SAMPLES {
            let (ms, answer) = finale(
                &binary,
                &kubeconfig,
                &["plan", "configmap/owner", "-n", "plan"],
            )
            .await?;
            expect_deleted(&answer, dependents + 1, "plan")?;
            server_side.push(ms);
        }
        let (client_ms, answer) = finale(
            &binary,
            &kubeconfig,
            &["plan", "configmap/owner", "-n", "plan", "--client-side"],
        )
        .await?;
        expect_deleted(&answer, dependents + 1, "plan --client-side")?;
        plan.push(&server_side, client_ms);
        eprintln!(
            "[{SCENARIO}] run {}: plan median {:.1} ms, client-side {client_ms:.0} ms",
            run + 1,
            median(&server_side).unwrap_or(f64::NAN)
        );
    }
    for figure in [explain.p99, explain.median, plan.p99, plan.median] {
        report.figures.push(figure);
    }
    drop(server);
    Ok(())
}

/// Runs `finale ARGS -o json --kubeconfig K`; the time from spawn to exit in ms, and the
/// parsed stdout. Exit codes 0, 2 and 3 are answers (not gone / progressing / stuck, or a
/// predicted hang); anything else fails the scenario with stderr.
async fn finale(binary: &Path, kubeconfig: &Path, args: &[&str]) -> anyhow::Result<(f64, Value)> {
    let started = Instant::now();
    let child = tokio::process::Command::new(binary)
        .args(args)
        .args(["-o", "json", "--kubeconfig"])
        .arg(kubeconfig)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot run {}", binary.display()))?;
    let output = tokio::time::timeout(COMMAND_LIMIT, child.wait_with_output())
        .await
        .with_context(|| format!("finale {} took over {COMMAND_LIMIT:?}", args.join(" ")))?
        .context("wait for finale")?;
    let elapsed = started.elapsed().as_secs_f64() * 1000.0;
    if !matches!(output.status.code(), Some(0 | 2 | 3)) {
        bail!(
            "finale {} exited with {}: {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let answer = serde_json::from_slice(&output.stdout).with_context(|| {
        format!(
            "finale {} printed no JSON: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout)
        )
    })?;
    Ok((elapsed, answer))
}

fn expect_verdict(answer: &Value, verdict: &str, what: &str) -> anyhow::Result<()> {
    if answer["verdict"] != verdict {
        bail!(
            "{what} answered {} instead of {verdict}: {answer}",
            answer["verdict"]
        );
    }
    Ok(())
}

/// The plan deletes the owner and every dependent.
fn expect_deleted(answer: &Value, count: u64, what: &str) -> anyhow::Result<()> {
    let deleted = answer["plan"]["deleted"].as_u64();
    if deleted != Some(count) {
        bail!(
            "{what} counted {deleted:?} objects to delete instead of {count}: {}",
            answer["plan"]
        );
    }
    Ok(())
}
