//! `namespace-teardown`: time from `DELETE /api/v1/namespaces/<ns>` until the namespace is
//! gone, for namespaces holding 0, 1 000 and 10 000 ConfigMaps (`--sizes`) and for one holding
//! 1 000 custom resources (`--custom-resources`, 0 leaves that row out), against a
//! `finale server` process; raw etcd 3.4 deletes of as many keys with 64 concurrent writers,
//! measured in the same invocation, are the baseline.
//!
//! Before the first run, if there is a custom resource row, the harness creates one namespaced
//! CRD (`widgets.bench.finale.dev`, kind `Widget`, version `v1` with a small structural
//! schema) and polls it until `Established=True`.
//!
//! Each Finale measurement uses a fresh namespace. Set-up, not timed: create the namespace,
//! fill it with 512-byte ConfigMaps (the payload as their one `data` value) or Widgets (as
//! `spec.payload`) from 64 HTTPS clients, open a watch on namespaces with
//! `fieldSelector=metadata.name=<ns>` and wait for its initial `ADDED` event (so the watch is
//! known to be registered). Timed: from just before the `DELETE` is sent until the watch
//! delivers the namespace's `DELETED` event. In between, the server's namespace controller
//! deletes every object through the registry and removes the `kubernetes` finalizer, and the
//! registry removes the namespace. Should the watch end early, the harness falls back to
//! polling `GET` every 5 ms until 404 (and says so).
//!
//! The etcd side puts as many keys (64 writers, not timed), under the prefix kube-apiserver
//! would use for that kind, then times deleting them all with 64 writers over one shared gRPC
//! connection: the storage work alone, with no list, no per-object lifecycle rules and no
//! watch events. The ratio compares objects/s.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use reqwest::StatusCode;

use crate::disk::probe_fdatasync;
use crate::etcd::{self, EtcdAction, EtcdIndexed};
use crate::finale::{client_for, cpu_seconds, locate_binary, start_server};
use crate::load::{self, LoadSpec, Tickets};
use crate::report::{Figure, Goal, Report, Unit};
use crate::scenarios::objects::{self, Action, Collection, Kind, Owners, Watch, send_expect};
use crate::scenarios::{Settings, Side, payload};
use crate::stats::median;

const SCENARIO: &str = "namespace-teardown";
const CLIENTS: usize = 64;
/// The goals: a namespace of 10 000 objects, of either kind, is gone within 10 s (the
/// foundation's issue), and so is one of 100 000 ConfigMaps (issue 17, `--sizes 100000`).
const GOAL_SIZES: [u64; 2] = [10_000, 100_000];
const GOAL_MS: f64 = 10_000.0;
/// How long the initial `ADDED` event may take.
const WATCH_START: Duration = Duration::from_secs(10);
/// The raw-disk probe before each run: the controller deletes one object at a time, each a
/// durable write, so the disk's sync time is part of each object's cost.
const DISK_PROBE: Duration = Duration::from_millis(500);
/// How long the custom resource definition may take to become established.
const CRD_ESTABLISH: Duration = Duration::from_secs(30);

/// The bound on one fill, delete or teardown of `size` objects: generous (a healthy server
/// does 10 000 in a few seconds), but finite, so a stuck server cannot hang the harness.
pub fn limit_for(size: u64) -> Duration {
    Duration::from_secs(30) + Duration::from_millis(size.saturating_mul(5))
}

/// "1000 ConfigMaps", "1000 custom resources".
fn describe(kind: Kind, size: u64) -> String {
    format!("{size} {}", kind.counted())
}

/// The figures of one row: a namespace holding `size` objects of `kind`.
struct RowFigures {
    kind: Kind,
    size: u64,
    time: Figure,
    /// None for an empty namespace: there is no rate to compare.
    rate: Option<Figure>,
    server_cores: Vec<f64>,
}

impl RowFigures {
    fn new(kind: Kind, size: u64) -> RowFigures {
        let what = describe(kind, size);
        let mut time = Figure::new(
            SCENARIO,
            &format!("namespace teardown, {what} (ms)"),
            Unit::Millis,
            &format!("etcd 3.4 deletes of {size} keys, {CLIENTS} writers (ms)"),
        );
        if GOAL_SIZES.contains(&size) {
            time = time.with_goal(Goal::AtMost(GOAL_MS));
        }
        let rate = (size > 0).then(|| {
            Figure::new(
                SCENARIO,
                &format!("namespace teardown, {what}, objects/s"),
                Unit::PerSecond,
                &format!("etcd 3.4 deletes/s, {CLIENTS} writers"),
            )
        });
        RowFigures {
            kind,
            size,
            time,
            rate,
            server_cores: Vec::new(),
        }
    }

    /// "1000 ConfigMaps", as progress lines and notes name the row.
    fn what(&self) -> String {
        describe(self.kind, self.size)
    }

    /// The namespace (and etcd key prefix) of this row in run `run`.
    fn tag(&self, run: usize) -> String {
        format!("bench-td-r{run}-{}{}", self.kind.name_prefix(), self.size)
    }

    fn push(&mut self, side: Side, elapsed: Duration) {
        let ms = elapsed.as_secs_f64() * 1e3;
        let per_second = self.size as f64 / elapsed.as_secs_f64().max(1e-9);
        match side {
            Side::Finale => {
                self.time.finale.push(ms);
                if let Some(rate) = &mut self.rate {
                    rate.finale.push(per_second);
                }
            }
            Side::Etcd => {
                self.time.baseline.push(ms);
                if let Some(rate) = &mut self.rate {
                    rate.baseline.push(per_second);
                }
            }
        }
    }
}

/// One Finale teardown.
struct Teardown {
    elapsed: Duration,
    /// Creates/s while filling the namespace (set-up, for context).
    fill_per_second: f64,
    /// CPU cores the server used during the timed part.
    server_cores: f64,
    /// "watch", or "poll" if the watch ended before the `DELETED` event.
    observed_by: &'static str,
}

/// The clients one Finale measurement uses.
struct Clients {
    url: String,
    /// Namespace create and delete, and the fallback polls: one warm keep-alive connection.
    control: reqwest::Client,
    /// The watch, on its own connection.
    watcher: reqwest::Client,
    /// The 64 clients that fill the namespace.
    bulk: Vec<reqwest::Client>,
}

async fn teardown_finale(
    clients: &Clients,
    server_pid: u32,
    namespace: &str,
    kind: Kind,
    size: u64,
    data: &Arc<str>,
) -> anyhow::Result<Teardown> {
    let url = &clients.url;
    let limit = limit_for(size);
    objects::create_namespace(&clients.control, url, namespace).await?;
    let collection = Collection::new(kind, url, namespace);
    let fill_per_second = if size > 0 {
        let action = Action::Create {
            data: Arc::clone(data),
            finalizer: false,
            owners: Owners::none(),
        };
        objects::setup(&clients.bulk, &collection, size, action, limit)
            .await?
            .per_second()
    } else {
        0.0
    };

    let namespaces = format!("{url}/api/v1/namespaces");
    let mut watch =
        Watch::open_named(&clients.watcher, &namespaces, namespace, limit, WATCH_START).await?;

    let namespace_url = format!("{namespaces}/{namespace}");
    let cpu_before = cpu_seconds(server_pid)?;
    let started = Instant::now();
    send_expect(
        clients.control.delete(&namespace_url),
        StatusCode::OK,
        &format!("delete namespace {namespace}"),
    )
    .await?;
    let observed_by = objects::wait_until_deleted(
        &mut watch,
        &clients.control,
        &namespace_url,
        &format!("namespace {namespace}"),
        started,
        limit,
        SCENARIO,
    )
    .await?;
    let elapsed = started.elapsed();
    let server_cores = (cpu_seconds(server_pid)? - cpu_before) / elapsed.as_secs_f64();
    drop(watch);

    // Not timed: the event said so, and a GET must agree.
    let response = clients
        .control
        .get(&namespace_url)
        .send()
        .await
        .context("GET the deleted namespace")?;
    if response.status() != StatusCode::NOT_FOUND {
        bail!(
            "namespace {namespace} answered {} after its DELETED event",
            response.status()
        );
    }
    response.bytes().await.context("read the 404")?;
    Ok(Teardown {
        elapsed,
        fill_per_second,
        server_cores,
        observed_by,
    })
}

/// Exactly `size` puts or deletes of the keys `{prefix}{i}` with 64 writers; how long they took.
pub async fn etcd_batch(
    client: &finale_etcd_rpc::Client,
    prefix: &str,
    size: u64,
    action: EtcdAction,
) -> anyhow::Result<Duration> {
    let tickets = Tickets::new(size);
    let spec = LoadSpec::exactly(CLIENTS, size, limit_for(size));
    let started = Instant::now();
    let result = load::run(&spec, |_| EtcdIndexed {
        kv: client.kv(),
        prefix: prefix.to_string(),
        tickets: tickets.clone(),
        action: action.clone(),
    })
    .await?;
    let elapsed = started.elapsed();
    if result.ops != size || result.errors > 0 {
        let what = match action {
            EtcdAction::Put(_) => "puts",
            EtcdAction::Delete => "deletes",
        };
        bail!(
            "etcd {what}: {} of {size} done; first error: {}",
            result.ops,
            result.first_error.as_deref().unwrap_or("none")
        );
    }
    Ok(elapsed)
}

/// Puts `size` keys of `kind` (not timed), then times deleting them all with 64 writers.
async fn deletes_etcd(
    client: &finale_etcd_rpc::Client,
    kind: Kind,
    tag: &str,
    size: u64,
    value: &[u8],
) -> anyhow::Result<Duration> {
    let prefix = kind.etcd_key_prefix(tag);
    etcd_batch(client, &prefix, size, EtcdAction::Put(value.to_vec())).await?;
    etcd_batch(client, &prefix, size, EtcdAction::Delete).await
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

    let clients = Clients {
        url: server.url.clone(),
        control: client_for(&server)?,
        watcher: client_for(&server)?,
        bulk: (0..CLIENTS)
            .map(|_| client_for(&server))
            .collect::<anyhow::Result<Vec<_>>>()?,
    };
    let data: Arc<str> = payload().into();
    let value = payload().into_bytes();
    let server_pid = server.pid().context("the server has exited")?;

    let custom_resources = settings.teardown_custom_resources;
    let mut figures: Vec<RowFigures> = settings
        .teardown_sizes
        .iter()
        .map(|&size| RowFigures::new(Kind::ConfigMap, size))
        .chain((custom_resources > 0).then(|| RowFigures::new(Kind::Widget, custom_resources)))
        .collect();
    if custom_resources > 0 {
        let took =
            objects::install_widget_crd(&clients.control, &clients.url, CRD_ESTABLISH).await?;
        eprintln!(
            "[{SCENARIO}] customresourcedefinition {} established after {:.0} ms",
            objects::WIDGET_CRD,
            took.as_secs_f64() * 1e3
        );
    }
    let mut disk_rates = Vec::new();
    for run in 0..settings.runs {
        let probe_dir = dir.path().to_path_buf();
        let disk = tokio::task::spawn_blocking(move || probe_fdatasync(&probe_dir, DISK_PROBE))
            .await
            .context("disk probe task")??;
        eprintln!(
            "[{SCENARIO}] run {}/{}, disk: {:.0} fdatasync/s (4 KiB overwrite, one thread)",
            run + 1,
            settings.runs,
            disk.per_second
        );
        disk_rates.push(disk.per_second);
        report.raw.push(serde_json::json!({
            "scenario": SCENARIO,
            "run": run,
            "target": "disk",
            "fdatasync": disk,
        }));
        for figures in &mut figures {
            let (kind, size, what) = (figures.kind, figures.size, figures.what());
            for side in Side::order(run) {
                let tag = figures.tag(run);
                match side {
                    Side::Finale => {
                        let teardown =
                            teardown_finale(&clients, server_pid, &tag, kind, size, &data).await?;
                        let seconds = teardown.elapsed.as_secs_f64();
                        let rates = if size > 0 {
                            format!(
                                "{:.0} objects/s; filled at {:.0} creates/s; ",
                                size as f64 / seconds,
                                teardown.fill_per_second
                            )
                        } else {
                            String::new()
                        };
                        eprintln!(
                            "[{SCENARIO}] run {}/{}, {what}: finale {:.1} ms \
                             ({rates}seen by {}; server used {:.2} CPU cores)",
                            run + 1,
                            settings.runs,
                            seconds * 1e3,
                            teardown.observed_by,
                            teardown.server_cores,
                        );
                        figures.push(side, teardown.elapsed);
                        figures.server_cores.push(teardown.server_cores);
                        report.raw.push(serde_json::json!({
                            "scenario": SCENARIO,
                            "run": run,
                            "objects": size,
                            "resource": kind.resource(),
                            "target": side.name(),
                            "teardown_ms": seconds * 1e3,
                            "observed_by": teardown.observed_by,
                            "server_cpu_cores": teardown.server_cores,
                            "fill_creates_per_second": teardown.fill_per_second,
                        }));
                    }
                    // Deleting nothing is not a baseline.
                    Side::Etcd if size == 0 => {}
                    Side::Etcd => {
                        let elapsed = deletes_etcd(&etcd_client, kind, &tag, size, &value).await?;
                        let seconds = elapsed.as_secs_f64();
                        eprintln!(
                            "[{SCENARIO}] run {}/{}, {what}: etcd {:.1} ms for as many keys \
                             ({:.0} deletes/s, {CLIENTS} writers)",
                            run + 1,
                            settings.runs,
                            seconds * 1e3,
                            size as f64 / seconds,
                        );
                        figures.push(side, elapsed);
                        report.raw.push(serde_json::json!({
                            "scenario": SCENARIO,
                            "run": run,
                            "objects": size,
                            "resource": kind.resource(),
                            "target": side.name(),
                            "delete_ms": seconds * 1e3,
                        }));
                    }
                }
            }
        }
    }

    for figures in figures {
        // CPU time is counted in 10 ms ticks: meaningless for a teardown of a few ms.
        if figures.size >= 1000
            && let Some(cores) = median(&figures.server_cores)
        {
            report.notes.push(format!(
                "during the teardowns of {} the finale server used {cores:.2} CPU cores, of {} \
                 (median)",
                figures.what(),
                report.context.nproc
            ));
        }
        report.figures.push(figures.time);
        report.figures.extend(figures.rate);
    }
    if let Some(rate) = median(&disk_rates) {
        report.notes.push(format!(
            "disk under the teardown runs: {rate:.0} write+fdatasync/s (median; one thread, 4 KiB \
             overwrites in the server's temporary directory)"
        ));
    }
    if !server.is_running() {
        bail!(
            "finale server exited during the benchmark; its log ends:\n{}",
            server.log_tail(30)
        );
    }
    // Dropping the fixtures kills and reaps both processes; the temp dirs go after them.
    drop(server);
    drop(etcd);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_goal_is_on_the_ten_thousand_rows_only() {
        for kind in [Kind::ConfigMap, Kind::Widget] {
            assert_eq!(
                RowFigures::new(kind, 10_000).time.goal,
                Some(Goal::AtMost(GOAL_MS))
            );
            assert_eq!(RowFigures::new(kind, 1000).time.goal, None);
            assert!(RowFigures::new(kind, 0).rate.is_none());
        }
    }

    #[test]
    fn rows_name_their_kind_and_get_their_own_namespace() {
        let configmaps = RowFigures::new(Kind::ConfigMap, 1000);
        let widgets = RowFigures::new(Kind::Widget, 1000);
        assert_eq!(
            configmaps.time.name,
            "namespace teardown, 1000 ConfigMaps (ms)"
        );
        assert_eq!(
            widgets.time.name,
            "namespace teardown, 1000 custom resources (ms)"
        );
        assert_eq!(
            widgets.rate.as_ref().unwrap().name,
            "namespace teardown, 1000 custom resources, objects/s"
        );
        assert_eq!(
            widgets.time.baseline_name,
            "etcd 3.4 deletes of 1000 keys, 64 writers (ms)"
        );
        assert_eq!(configmaps.tag(2), "bench-td-r2-cm-1000");
        assert_eq!(widgets.tag(2), "bench-td-r2-widget-1000");
    }

    #[test]
    fn rates_are_objects_over_the_teardown_time() {
        let mut figures = RowFigures::new(Kind::Widget, 1000);
        figures.push(Side::Finale, Duration::from_millis(500));
        figures.push(Side::Etcd, Duration::from_millis(250));
        let rate = figures.rate.unwrap();
        assert_eq!(rate.finale, vec![2000.0]);
        assert_eq!(rate.ratio(), Some(0.5));
        assert_eq!(figures.time.finale, vec![500.0]);
    }
}
