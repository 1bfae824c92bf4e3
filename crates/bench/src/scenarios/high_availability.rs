//! `high-availability`: Finale in front of etcd (issue 13's figures), each beside a baseline
//! measured in the same invocation:
//!
//! - ConfigMap creates/s over HTTPS with 64 clients through one replica on etcd, against raw
//!   etcd puts with 64 writers on the same etcd (the storage writes alone);
//! - the same 64 clients split over two replicas on that etcd, against the one replica;
//! - controller failover: from SIGKILL of the replica holding the controllers' Lease to the
//!   first garbage-collector deletion made by the other, against the moment the other is seen
//!   holding the Lease (what the leader-election algorithm alone costs), with the default
//!   timings (15 s lease) and with short ones (3 s);
//! - the longest gap between acknowledged creates (16 clients, one replica, a 3-member etcd
//!   with data in memory) when the etcd leader is killed, against the time etcd itself is
//!   without an agreed leader.
//!
//! `--ha-parts` picks the parts (`creates`, `failover`, `write-gap`; default all).
//!
//! Every replica, etcd member and client runs on this machine and shares its CPUs: on a small
//! machine, two replicas compete with each other, etcd and the harness for the same cores.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use finale_e2e::{Etcd, EtcdCluster, FinaleServer};

use crate::etcd;
use crate::finale::{client_for, locate_binary};
use crate::report::{Figure, Goal, Report, Unit};
use crate::scenarios::http_create::ConfigMapCreator;
use crate::scenarios::{LoadFigures, Settings, Side, payload, progress_load, store};

const SCENARIO: &str = "high-availability";
const CLIENTS: usize = 64;
/// Clients writing while the etcd leader is killed.
const GAP_CLIENTS: usize = 16;
const LEASE_PATH: &str =
    "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/finale-controllers";
/// The bound on every wait of this scenario.
const WAIT_LIMIT: Duration = Duration::from_secs(90);

pub async fn run(settings: &Settings, report: &mut Report) -> anyhow::Result<()> {
    let binary = locate_binary(settings.finale_bin.as_deref())?;
    let part = |name: &str| settings.ha_parts.iter().any(|p| p == name);
    if part("creates") {
        create_rates(settings, report, &binary).await?;
    }
    if part("failover") {
        controller_failover(settings, report, &binary, LeaseTimings::Default).await?;
        controller_failover(settings, report, &binary, LeaseTimings::Short).await?;
    }
    if part("write-gap") {
        write_gap(settings, report, &binary).await?;
    }
    Ok(())
}

/// Starts `finale server` on etcd at `endpoints`, sharing `pki` with the other replicas.
async fn start_replica(
    binary: &Path,
    data_dir: &Path,
    endpoints: &str,
    pki: &Path,
    extra: &[&'static str],
) -> anyhow::Result<FinaleServer> {
    let (binary, data_dir) = (binary.to_path_buf(), data_dir.to_path_buf());
    let mut args = vec![
        "--etcd-servers".to_string(),
        endpoints.to_string(),
        "--pki-dir".to_string(),
        pki.to_string_lossy().into_owned(),
    ];
    args.extend(extra.iter().map(|arg| arg.to_string()));
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        FinaleServer::start_with(&binary, &data_dir, "127.0.0.1:0", &args)
    })
    .await
    .context("replica start task")?
}

/// Which of the three create loads a measurement is.
#[derive(Clone, Copy)]
enum CreateTarget {
    EtcdPuts,
    OneReplica,
    TwoReplicas,
}

async fn create_rates(
    settings: &Settings,
    report: &mut Report,
    binary: &Path,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir().context("create a temporary directory")?;
    let etcd = tokio::task::spawn_blocking(Etcd::start)
        .await
        .context("etcd start task")?
        .context("start etcd")?;
    let etcd_client = etcd::connect(&etcd.endpoint).await?;
    let pki = dir.path().join("pki");
    let a = start_replica(binary, &dir.path().join("a"), &etcd.endpoint, &pki, &[]).await?;
    let b = start_replica(binary, &dir.path().join("b"), &etcd.endpoint, &pki, &[]).await?;
    let to_a = (0..CLIENTS)
        .map(|_| client_for(&a))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let to_b = (0..CLIENTS)
        .map(|_| client_for(&b))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let url_a: Arc<str> = format!("{}/api/v1/namespaces/default/configmaps", a.url).into();
    let url_b: Arc<str> = format!("{}/api/v1/namespaces/default/configmaps", b.url).into();
    let data: Arc<str> = payload().into();
    // Worker `worker` of a load, on replica b or a; `tag` keeps names unique per load.
    let creator = |worker: usize, on_b: bool, tag: &str| ConfigMapCreator {
        client: if on_b { &to_b } else { &to_a }[worker].clone(),
        url: Arc::clone(if on_b { &url_b } else { &url_a }),
        prefix: format!("{tag}-w{worker}-"),
        data: Arc::clone(&data),
    };

    let mut one = LoadFigures::new(
        SCENARIO,
        &format!("HTTPS creates/s, {CLIENTS} clients, one replica on etcd"),
        &format!("HTTPS create latency, {CLIENTS} clients, one replica on etcd,"),
        &format!("etcd 3.4 puts, {CLIENTS} writers"),
        Some(Goal::RatioAtLeast(0.5)),
    );
    let mut two = Figure::new(
        SCENARIO,
        &format!("HTTPS creates/s, {CLIENTS} clients over two replicas on one etcd"),
        Unit::PerSecond,
        "one replica (row above)",
    )
    .with_goal(Goal::RatioAtLeast(1.0));
    let targets = [
        CreateTarget::EtcdPuts,
        CreateTarget::OneReplica,
        CreateTarget::TwoReplicas,
    ];
    for run in 0..settings.runs {
        let spec = settings.load_spec(CLIENTS);
        let (mut one_rate, mut two_rate) = (None, None);
        // Each run starts with another target, so none always runs on the warmest machine.
        for step in 0..targets.len() {
            let target = targets[(run + step) % targets.len()];
            let what = format!("run {}", run + 1);
            match target {
                CreateTarget::EtcdPuts => {
                    let result =
                        store::measure_etcd(&etcd_client, &spec, &format!("ha-r{run}")).await?;
                    progress_load(SCENARIO, run, settings.runs, "64 writers", "etcd", &result);
                    one.push(Side::Etcd, &result, report, &format!("{SCENARIO} {what}"));
                }
                CreateTarget::OneReplica => {
                    let tag = format!("one-r{run}");
                    let result =
                        crate::load::run(&spec, |worker| creator(worker, false, &tag)).await?;
                    progress_load(
                        SCENARIO,
                        run,
                        settings.runs,
                        "64 clients",
                        "1 replica",
                        &result,
                    );
                    one.push(Side::Finale, &result, report, &format!("{SCENARIO} {what}"));
                    one_rate = Some(result.per_second());
                }
                CreateTarget::TwoReplicas => {
                    // Even workers on replica a, odd ones on b: 32 clients each.
                    let tag = format!("two-r{run}");
                    let result =
                        crate::load::run(&spec, |worker| creator(worker, worker % 2 == 1, &tag))
                            .await?;
                    progress_load(
                        SCENARIO,
                        run,
                        settings.runs,
                        "64 clients",
                        "2 replicas",
                        &result,
                    );
                    if let Some(error) = &result.first_error {
                        report.warnings.push(format!(
                            "{SCENARIO} {what}, two replicas: {} worker(s) failed (rate \
                             understated); first error: {error}",
                            result.errors
                        ));
                    }
                    two_rate = Some(result.per_second());
                }
            }
        }
        if let (Some(one_rate), Some(two_rate)) = (one_rate, two_rate) {
            two.finale.push(two_rate);
            two.baseline.push(one_rate);
        }
    }
    report.figures.extend(one.into_figures());
    report.figures.push(two);
    for (name, mut replica) in [("a", a), ("b", b)] {
        if !replica.is_running() {
            bail!(
                "replica {name} exited during the benchmark; its log ends:\n{}",
                replica.log_tail(30)
            );
        }
    }
    Ok(())
}

/// The controllers' Lease timings a failover is measured with.
#[derive(Clone, Copy, PartialEq)]
enum LeaseTimings {
    /// client-go's defaults: 15 s lease, 10 s renew deadline, 2 s retry.
    Default,
    /// 3 s lease, 2 s renew deadline, 500 ms retry.
    Short,
}

impl LeaseTimings {
    fn args(self) -> &'static [&'static str] {
        match self {
            LeaseTimings::Default => &[],
            LeaseTimings::Short => &[
                "--leader-elect-lease-duration=3s",
                "--leader-elect-renew-deadline=2s",
                "--leader-elect-retry-period=500ms",
            ],
        }
    }

    /// The holder renews the Lease once per retry period.
    fn retry_period(self) -> Duration {
        match self {
            LeaseTimings::Default => Duration::from_secs(2),
            LeaseTimings::Short => Duration::from_millis(500),
        }
    }

    fn label(self) -> &'static str {
        match self {
            LeaseTimings::Default => "default Lease timings (15 s)",
            LeaseTimings::Short => "short Lease timings (3 s)",
        }
    }
}

/// The identity a replica writes into the Lease.
fn identity(server: &FinaleServer) -> anyhow::Result<String> {
    let path = server.data_dir.join("controllers-identity");
    Ok(std::fs::read_to_string(&path)
        .with_context(|| format!("read {}", path.display()))?
        .trim()
        .to_string())
}

/// The Lease's last renewal, on the holder's clock (the same machine's).
async fn renew_time(client: &reqwest::Client, url: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    let response = client.get(format!("{url}{LEASE_PATH}")).send().await.ok()?;
    let lease: serde_json::Value = response.json().await.ok()?;
    let renewed = lease["spec"]["renewTime"].as_str()?;
    chrono::DateTime::parse_from_rfc3339(renewed)
        .ok()
        .map(|time| time.with_timezone(&chrono::Utc))
}

/// Waits until `phase` after the holder's latest renewal (renewals come every
/// `retry_period`). A failover's length depends on when, between two renewals, the holder
/// dies; the runs kill at phases spread evenly over the retry period instead of wherever the
/// harness happens to be, which correlates with the renewals (a restart takes about one).
async fn wait_for_renewal_phase(
    client: &reqwest::Client,
    url: &str,
    retry_period: Duration,
    phase: Duration,
) -> anyhow::Result<()> {
    let renewed = renew_time(client, url)
        .await
        .context("read the Lease's renewTime")?;
    let since = (chrono::Utc::now() - renewed)
        .to_std()
        .unwrap_or(Duration::ZERO);
    let period = retry_period.as_nanos().max(1);
    let into_period = Duration::from_nanos((since.as_nanos() % period) as u64);
    let wait = if phase >= into_period {
        phase - into_period
    } else {
        retry_period - into_period + phase
    };
    tokio::time::sleep(wait).await;
    Ok(())
}

/// The Lease's holder as `client` sees it, if it can answer.
async fn lease_holder(client: &reqwest::Client, url: &str) -> Option<String> {
    let response = client.get(format!("{url}{LEASE_PATH}")).send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    let lease: serde_json::Value = response.json().await.ok()?;
    lease["spec"]["holderIdentity"].as_str().map(str::to_string)
}

/// POST `body` to `path` and expect `201 Created`; returns the created object.
async fn create(
    client: &reqwest::Client,
    url: &str,
    path: &str,
    body: serde_json::Value,
) -> anyhow::Result<serde_json::Value> {
    let response = client
        .post(format!("{url}{path}"))
        .json(&body)
        .send()
        .await
        .with_context(|| format!("POST {path}"))?;
    let status = response.status();
    let text = response.text().await.context("read the create response")?;
    if status != reqwest::StatusCode::CREATED {
        bail!("POST {path} answered {status}: {text}");
    }
    serde_json::from_str(&text).context("the created object is not JSON")
}

async fn controller_failover(
    settings: &Settings,
    report: &mut Report,
    binary: &Path,
    timings: LeaseTimings,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir().context("create a temporary directory")?;
    let etcd = tokio::task::spawn_blocking(Etcd::start)
        .await
        .context("etcd start task")?
        .context("start etcd")?;
    let pki = dir.path().join("pki");
    let mut replicas = Vec::new();
    for name in ["a", "b"] {
        let server = start_replica(
            binary,
            &dir.path().join(name),
            &etcd.endpoint,
            &pki,
            timings.args(),
        )
        .await?;
        replicas.push(server);
    }
    let mut figure = Figure::new(
        SCENARIO,
        &format!(
            "controller failover, {}: SIGKILL of the Lease holder to the next one's first GC \
             deletion (ms)",
            timings.label()
        ),
        Unit::Millis,
        "the next replica seen holding the Lease",
    );
    if timings == LeaseTimings::Default {
        figure = figure.with_goal(Goal::AtMost(15_000.0));
    }
    let cms = "/api/v1/namespaces/default/configmaps";
    for run in 0..settings.runs {
        let identities = replicas
            .iter()
            .map(identity)
            .collect::<anyhow::Result<Vec<_>>>()?;
        let clients = replicas
            .iter()
            .map(client_for)
            .collect::<anyhow::Result<Vec<_>>>()?;
        // Wait until one of the two holds the Lease (after a restart, the Lease may still
        // name the replica killed in the previous run).
        let deadline = Instant::now() + WAIT_LIMIT;
        let holder = loop {
            if let Some(holder) = lease_holder(&clients[0], &replicas[0].url).await
                && let Some(index) = identities.iter().position(|id| *id == holder)
            {
                break index;
            }
            if Instant::now() > deadline {
                bail!("no replica took the controllers' Lease within {WAIT_LIMIT:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let next = 1 - holder;
        let (client, url) = (&clients[next], replicas[next].url.clone());
        let owner = create(
            client,
            &url,
            cms,
            serde_json::json!({"metadata": {"name": format!("failover-owner-{run}")}}),
        )
        .await?;
        let dependent = format!("failover-dependent-{run}");
        create(
            client,
            &url,
            cms,
            serde_json::json!({"metadata": {"name": dependent, "ownerReferences": [{
                "apiVersion": "v1", "kind": "ConfigMap", "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
            }]}}),
        )
        .await?;

        // Run k of n kills at (k + ½)/n of a retry period after a renewal.
        let phase = timings
            .retry_period()
            .mul_f64((run as f64 + 0.5) / settings.runs.max(1) as f64);
        wait_for_renewal_phase(client, &url, timings.retry_period(), phase).await?;
        let killed = replicas.remove(holder);
        let killed_at = Instant::now();
        let killed = tokio::task::spawn_blocking(move || {
            let mut killed = killed;
            killed.kill9().map(|()| killed)
        })
        .await
        .context("kill task")??;
        // The owner goes at once; only a running garbage collector deletes the dependent.
        let response = client
            .delete(format!(
                "{url}{cms}/failover-owner-{run}?propagationPolicy=Background"
            ))
            .send()
            .await
            .context("DELETE the owner")?;
        if !response.status().is_success() {
            bail!("DELETE the owner answered {}", response.status());
        }
        let (mut taken, mut collected) = (None, None);
        while collected.is_none() {
            if Instant::now() > killed_at + WAIT_LIMIT {
                bail!("the dependent was not collected within {WAIT_LIMIT:?} of the kill");
            }
            if taken.is_none()
                && lease_holder(client, &url).await.as_deref() == Some(identities[next].as_str())
            {
                taken = Some(killed_at.elapsed());
            }
            let answer = client
                .get(format!("{url}{cms}/{dependent}"))
                .send()
                .await
                .context("GET the dependent")?;
            if answer.status() == reqwest::StatusCode::NOT_FOUND {
                collected = Some(killed_at.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let collected = collected.unwrap_or_default();
        let taken = taken.unwrap_or(collected);
        eprintln!(
            "[{SCENARIO}] run {}/{}, {}: killed {:.0} ms after a renewal; Lease taken over \
             after {:.0} ms, dependent collected after {:.0} ms",
            run + 1,
            settings.runs,
            timings.label(),
            phase.as_secs_f64() * 1e3,
            taken.as_secs_f64() * 1e3,
            collected.as_secs_f64() * 1e3
        );
        figure.finale.push(collected.as_secs_f64() * 1e3);
        figure.baseline.push(taken.as_secs_f64() * 1e3);
        // Back to two replicas: the killed one restarts on its data and identity.
        let killed = tokio::task::spawn_blocking(move || {
            let mut killed = killed;
            killed.restart().map(|()| killed)
        })
        .await
        .context("restart task")??;
        replicas.insert(holder, killed);
    }
    report.figures.push(figure);
    drop(replicas);
    drop(etcd);
    Ok(())
}

/// Acknowledgement times of the write-gap load, and its failures.
#[derive(Default)]
struct Acknowledged {
    times: Vec<Instant>,
    failures: u64,
    first_failure: Option<String>,
}

async fn write_gap(settings: &Settings, report: &mut Report, binary: &Path) -> anyhow::Result<()> {
    let dir = tempfile::tempdir().context("create a temporary directory")?;
    let mut cluster = tokio::task::spawn_blocking(|| EtcdCluster::start_in_memory(3))
        .await
        .context("etcd cluster start task")?
        .context("start a 3-member etcd")?;
    let server = start_replica(
        binary,
        &dir.path().join("finale"),
        &cluster.endpoints(),
        &dir.path().join("pki"),
        &[],
    )
    .await?;
    let clients = (0..GAP_CLIENTS)
        .map(|_| client_for(&server))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let url: Arc<str> = format!("{}/api/v1/namespaces/default/configmaps", server.url).into();
    let mut figure = Figure::new(
        SCENARIO,
        &format!(
            "longest write gap, {GAP_CLIENTS} clients, one replica, when the etcd leader is \
             killed (ms)"
        ),
        Unit::Millis,
        "etcd without an agreed leader",
    )
    .with_goal(Goal::AtMost(2_000.0));
    for run in 0..settings.runs {
        let acknowledged = Arc::new(Mutex::new(Acknowledged::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let sequence = Arc::new(AtomicU64::new(0));
        let writers: Vec<_> = clients
            .iter()
            .map(|client| {
                let (client, url) = (client.clone(), Arc::clone(&url));
                let (acknowledged, stop, sequence) = (
                    Arc::clone(&acknowledged),
                    Arc::clone(&stop),
                    Arc::clone(&sequence),
                );
                tokio::spawn(async move {
                    // Bounded in count as well as by the stop flag.
                    for _ in 0..200_000 {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let seq = sequence.fetch_add(1, Ordering::Relaxed);
                        let body = serde_json::json!({
                            "metadata": {"name": format!("gap-r{run}-{seq}")},
                        });
                        let answer = client.post(&*url).json(&body).send().await;
                        let mut acknowledged =
                            acknowledged.lock().unwrap_or_else(|e| e.into_inner());
                        match answer {
                            Ok(response) if response.status() == reqwest::StatusCode::CREATED => {
                                acknowledged.times.push(Instant::now());
                            }
                            Ok(response) => {
                                acknowledged.failures += 1;
                                acknowledged
                                    .first_failure
                                    .get_or_insert_with(|| format!("{}", response.status()));
                            }
                            Err(error) => {
                                acknowledged.failures += 1;
                                acknowledged
                                    .first_failure
                                    .get_or_insert_with(|| format!("{error:#}"));
                            }
                        }
                    }
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let leader = tokio::task::block_in_place(|| cluster.leader())?;
        let killed_at = Instant::now();
        tokio::task::block_in_place(|| cluster.members[leader].stop())?;
        // etcd's own outage: until the surviving members agree on a new, running leader.
        let leaderless = loop {
            if tokio::task::block_in_place(|| cluster.agreed_leader_now()).is_ok() {
                break killed_at.elapsed();
            }
            if killed_at.elapsed() > WAIT_LIMIT {
                bail!("etcd elected no new leader within {WAIT_LIMIT:?}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        tokio::time::sleep(Duration::from_secs(4)).await;
        stop.store(true, Ordering::Relaxed);
        for writer in writers {
            writer.await.context("writer task")?;
        }
        let acknowledged =
            std::mem::take(&mut *acknowledged.lock().unwrap_or_else(|e| e.into_inner()));
        let mut times = acknowledged.times;
        times.sort_unstable();
        let gap = times
            .windows(2)
            .filter(|pair| pair[1] > killed_at)
            .map(|pair| pair[1].duration_since(pair[0]))
            .max()
            .context("no write was acknowledged after the leader was killed")?;
        eprintln!(
            "[{SCENARIO}] run {}/{}: etcd leader killed: {} writes acknowledged, {} failed, \
             longest gap {:.0} ms, etcd without a leader for {:.0} ms",
            run + 1,
            settings.runs,
            times.len(),
            acknowledged.failures,
            gap.as_secs_f64() * 1e3,
            leaderless.as_secs_f64() * 1e3
        );
        if let Some(failure) = acknowledged.first_failure {
            report.warnings.push(format!(
                "{SCENARIO} run {}: {} create(s) failed while the etcd leader was killed; \
                 first: {failure}",
                run + 1,
                acknowledged.failures
            ));
        }
        figure.finale.push(gap.as_secs_f64() * 1e3);
        figure.baseline.push(leaderless.as_secs_f64() * 1e3);
        // Three members again before the next run kills the next leader.
        tokio::task::block_in_place(|| {
            cluster.members[leader].start_again()?;
            cluster.wait_healthy(WAIT_LIMIT)
        })?;
    }
    report.figures.push(figure);
    drop(server);
    drop(cluster);
    Ok(())
}
