//! `watch-fanout`: how fast one change reaches many watchers (issue 17, item 2). `--watchers`
//! watchers (default 1 000) watch ConfigMaps, once of the whole type and once of one namespace,
//! while a writer creates `--watch-rate` ConfigMaps a second (default 200) for `--seconds`
//! seconds; against etcd 3.4 watches of the same keys and puts of the same values, in the same
//! run, sides alternating which goes first.
//!
//! Finale: each watcher is its own HTTPS connection (HTTP/1.1, as a kubectl watch) on
//! `…/configmaps?watch=true&resourceVersion=<list RV>`, read by searching each event's line
//! for the name and the send time (see [`added_write`]). etcd: each watcher is its own gRPC
//! watch stream (over one connection, as clients multiplex) from the next revision. Before the
//! measured writes a sentinel write must reach every watcher (so every watch is registered).
//! Each written object carries the wall-clock time it was sent at (an annotation; for etcd, the
//! value's first 8 bytes), stamped just before the request; a watcher records now − sent for
//! each delivery. Figures: the p50 and p99 of all deliveries (watchers × writes), and each
//! server's CPU during the writes in cores. Every watcher must see every write exactly once;
//! a missing or repeated delivery is reported as a warning under the table. A Finale watch
//! the server closes (a watcher that falls too far behind is closed, as kube-apiserver does)
//! is opened again from the last resourceVersion read, as clients do; the log counts these.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use finale_etcd_rpc::etcdserverpb::watch_request::RequestUnion;
use finale_etcd_rpc::etcdserverpb::{PutRequest, RangeRequest, WatchCreateRequest, WatchRequest};
use finale_etcd_rpc::prefix_range_end;
use reqwest::StatusCode;
use reqwest::header::CONTENT_TYPE;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::etcd::{self, EtcdProcess};
use crate::finale::{client_for, cpu_seconds, locate_binary, start_server};
use crate::report::{Figure, Goal, Report, Unit};
use crate::scenarios::objects::{self, send_expect};
use crate::scenarios::{Settings, Side, payload};
use crate::stats::percentile;

const SCENARIO: &str = "watch-fanout";
/// The annotation that carries the send time, in nanoseconds since the Unix epoch.
const SENT_AT: &str = "bench.finale.dev/sent-at-ns";
/// The goal for the delivery p99.
const GOAL_P99_MS: f64 = 10.0;
/// Writes in flight at once: pacing, not throughput, is the point.
const WRITERS: usize = 64;
/// Watches opened at once while setting up.
const OPENING: usize = 64;
/// How long every watcher may take to see the sentinel, and the writes after the last one.
const SETTLE: Duration = Duration::from_secs(30);

/// What the watchers watch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// Every ConfigMap (`/api/v1/configmaps`; etcd: the `configmaps/` prefix).
    Type,
    /// The ConfigMaps of the one namespace written to.
    Namespace,
}

impl Target {
    fn describe(self) -> &'static str {
        match self {
            Target::Type => "all ConfigMaps",
            Target::Namespace => "one namespace",
        }
    }
}

/// The deliveries of one measurement.
struct Deliveries {
    /// now − sent, one per delivery, in milliseconds.
    latencies_ms: Vec<f64>,
    /// Watchers × writes that were not delivered within the settle time.
    missing: u64,
    /// Deliveries of a write a watcher had already seen.
    repeated: u64,
    /// Watches the server closed and the watcher opened again (Finale only).
    rewatches: u64,
    /// CPU the server used during the writes, in cores.
    cores: f64,
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or_default()
}

/// Per watcher: which writes it saw (index = write number; the sentinel is write 0), and
/// the latencies of writes 1.. .
struct Seen {
    seen: Vec<bool>,
    /// Writes not seen yet.
    unseen: usize,
    latencies_ms: Vec<f64>,
    repeated: u64,
    /// Watches opened again after the server closed one.
    rewatches: u64,
}

impl Seen {
    fn new(writes: u64) -> Seen {
        Seen {
            seen: vec![false; writes as usize + 1],
            unseen: writes as usize + 1,
            latencies_ms: Vec::with_capacity(writes as usize),
            repeated: 0,
            rewatches: 0,
        }
    }

    /// Records write `number`, sent at `sent_ns`; true once every write was seen.
    fn record(&mut self, number: usize, sent_ns: u64, sentinel_seen: &AtomicU64) -> bool {
        let Some(slot) = self.seen.get_mut(number) else {
            return false;
        };
        if *slot {
            self.repeated += 1;
        } else {
            *slot = true;
            self.unseen -= 1;
            if number == 0 {
                sentinel_seen.fetch_add(1, Ordering::SeqCst);
            } else {
                let late = now_ns().saturating_sub(sent_ns);
                self.latencies_ms.push(late as f64 / 1e6);
            }
        }
        self.unseen == 0
    }
}

/// The write number, send time and resourceVersion of an `ADDED` event of a written
/// ConfigMap, found by searching the event's line rather than parsing it: with a thousand
/// watchers the harness reads 200 000 events a second on the same two cores as the server,
/// and a full JSON parse of each would make the harness, not the server, the bottleneck.
fn added_write(line: &[u8]) -> Option<(usize, u64, u64)> {
    let text = std::str::from_utf8(line).ok()?;
    if !text.contains("\"type\":\"ADDED\"") {
        return None;
    }
    let digits_after = |marker: &str| -> Option<&str> {
        let start = text.find(marker)? + marker.len();
        let rest = &text[start..];
        let end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        Some(&rest[..end])
    };
    let number = digits_after("\"name\":\"fan-")?.parse().ok()?;
    let sent = digits_after(&format!("\"{SENT_AT}\":\""))?.parse().ok()?;
    let revision = digits_after("\"resourceVersion\":\"")?.parse().ok()?;
    Some((number, sent, revision))
}

/// Waits (bounded) until `count` watchers saw the sentinel.
async fn wait_for_sentinel(seen: &AtomicU64, count: u64, side: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + SETTLE;
    while seen.load(Ordering::SeqCst) < count {
        if Instant::now() > deadline {
            bail!(
                "{side}: only {} of {count} watchers saw the sentinel within {SETTLE:?}",
                seen.load(Ordering::SeqCst)
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// Runs `write(number)` for numbers 1..=writes, started at `rate` a second, at most
/// [`WRITERS`] at once; returns how long the writes took.
async fn paced_writes<F, Fut>(writes: u64, rate: u64, write: F) -> anyhow::Result<Duration>
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let started = Instant::now();
    let limit = Arc::new(Semaphore::new(WRITERS));
    let mut running = JoinSet::new();
    for number in 1..=writes {
        let due = started + Duration::from_secs_f64((number - 1) as f64 / rate as f64);
        tokio::time::sleep_until(due.into()).await;
        let permit = Arc::clone(&limit).acquire_owned().await?;
        let future = write(number);
        running.spawn(async move {
            let result = future.await;
            drop(permit);
            result
        });
    }
    while let Some(result) = running.join_next().await {
        result.context("a write task")??;
    }
    Ok(started.elapsed())
}

/// The ConfigMap of write `number`, stamped with the time just before it is sent.
fn configmap(number: u64, data: &str) -> String {
    serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("fan-{number}"),
                     "annotations": {SENT_AT: now_ns().to_string()}},
        "data": {"payload": data},
    })
    .to_string()
}

async fn measure_finale(
    settings: &Settings,
    server: &finale_e2e::FinaleServer,
    target: Target,
    tag: &str,
) -> anyhow::Result<Deliveries> {
    let control = client_for(server)?;
    let namespace = format!("fan-{tag}");
    objects::create_namespace(&control, &server.url, &namespace).await?;
    let collection = format!("{}/api/v1/namespaces/{namespace}/configmaps", server.url);
    let watched = match target {
        Target::Type => format!("{}/api/v1/configmaps", server.url),
        Target::Namespace => collection.clone(),
    };
    let list = send_expect(
        control.get(format!("{watched}?limit=1")),
        StatusCode::OK,
        "list before watching",
    )
    .await?;
    let list: serde_json::Value = serde_json::from_slice(list.as_ref())?;
    let revision = list["metadata"]["resourceVersion"]
        .as_str()
        .context("the list has no resourceVersion")?
        .to_string();

    let writes = settings.watch_rate * settings.window.as_secs().max(1);
    let lifetime = settings.window + 2 * SETTLE;
    let sentinel_seen = Arc::new(AtomicU64::new(0));
    let opening = Arc::new(Semaphore::new(OPENING));
    let mut watchers = JoinSet::new();
    for _ in 0..settings.watchers {
        let client = client_for(server)?;
        let watched = watched.clone();
        let revision = revision.clone();
        let opening = Arc::clone(&opening);
        let sentinel_seen = Arc::clone(&sentinel_seen);
        watchers.spawn(async move {
            let mut permit = Some(opening.acquire_owned().await?);
            let mut seen = Seen::new(writes);
            let mut from = revision;
            let ends = Instant::now() + lifetime;
            // As a client does when the server closes its watch (kube-apiserver and Finale
            // close a watcher that stops reading): watch again from the last resourceVersion
            // read, so that every write is still seen exactly once.
            'watch: while Instant::now() < ends {
                let url = format!("{watched}?watch=true&resourceVersion={from}");
                let mut response = client
                    .get(&url)
                    .timeout(ends.saturating_duration_since(Instant::now()))
                    .send()
                    .await?;
                if response.status() != StatusCode::OK {
                    bail!("the watch on {watched} answered {}", response.status());
                }
                if permit.take().is_none() {
                    seen.rewatches += 1;
                }
                let mut buffer: Vec<u8> = Vec::new();
                while let Some(chunk) = response.chunk().await? {
                    buffer.extend_from_slice(&chunk);
                    while let Some(end) = buffer.iter().position(|&b| b == b'\n') {
                        let line: Vec<u8> = buffer.drain(..=end).collect();
                        let Some((number, sent, revision)) = added_write(&line) else {
                            continue;
                        };
                        from = revision.to_string();
                        if seen.record(number, sent, &sentinel_seen) {
                            break 'watch;
                        }
                    }
                }
            }
            anyhow::Ok(seen)
        });
    }
    let data = payload();
    send_expect(
        control
            .post(&collection)
            .header(CONTENT_TYPE, "application/json")
            .body(configmap(0, &data)),
        StatusCode::CREATED,
        "create the sentinel",
    )
    .await?;
    wait_for_sentinel(&sentinel_seen, settings.watchers, "finale").await?;

    let pid = server.pid().context("the server has exited")?;
    let cpu_before = cpu_seconds(pid)?;
    let took = paced_writes(writes, settings.watch_rate, |number| {
        let request = control
            .post(&collection)
            .header(CONTENT_TYPE, "application/json")
            .body(configmap(number, &data));
        async move {
            send_expect(request, StatusCode::CREATED, "create").await?;
            Ok(())
        }
    })
    .await?;
    let cores = (cpu_seconds(pid)? - cpu_before) / took.as_secs_f64();
    collect(watchers, settings.watchers, writes, cores).await
}

/// Gathers the watchers' deliveries, within the settle time.
async fn collect(
    mut watchers: JoinSet<anyhow::Result<Seen>>,
    watcher_count: u64,
    writes: u64,
    cores: f64,
) -> anyhow::Result<Deliveries> {
    let mut deliveries = Deliveries {
        latencies_ms: Vec::with_capacity((watcher_count * writes) as usize),
        missing: 0,
        repeated: 0,
        rewatches: 0,
        cores,
    };
    let deadline = Instant::now() + SETTLE;
    let mut finished = 0;
    while finished < watcher_count {
        let remaining = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(remaining, watchers.join_next()).await {
            Ok(Some(result)) => {
                let seen = result.context("a watcher task")??;
                deliveries.missing += writes - seen.latencies_ms.len() as u64;
                deliveries.repeated += seen.repeated;
                deliveries.rewatches += seen.rewatches;
                deliveries.latencies_ms.extend(seen.latencies_ms);
                finished += 1;
            }
            Ok(None) => break,
            Err(_) => {
                // Watchers still waiting at the deadline missed what they have not seen.
                deliveries.missing += (watcher_count - finished) * writes;
                watchers.abort_all();
                break;
            }
        }
    }
    Ok(deliveries)
}

async fn measure_etcd(
    settings: &Settings,
    etcd_process: &EtcdProcess,
    target: Target,
    tag: &str,
) -> anyhow::Result<Deliveries> {
    let client = etcd::connect(&etcd_process.endpoint).await?;
    let namespace_prefix = format!("/registry/configmaps/fan-{tag}/");
    let watched_prefix = match target {
        Target::Type => "/registry/configmaps/".to_string(),
        Target::Namespace => namespace_prefix.clone(),
    };
    let head = client
        .kv()
        .range(RangeRequest {
            key: b"/".to_vec(),
            count_only: true,
            ..Default::default()
        })
        .await?
        .into_inner()
        .header
        .map(|h| h.revision)
        .unwrap_or_default();

    let writes = settings.watch_rate * settings.window.as_secs().max(1);
    let sentinel_seen = Arc::new(AtomicU64::new(0));
    let mut watchers = JoinSet::new();
    for _ in 0..settings.watchers {
        let mut watch_client = client.watch();
        let key = watched_prefix.clone().into_bytes();
        let range_end = prefix_range_end(&key);
        let sentinel_seen = Arc::clone(&sentinel_seen);
        let key_prefix = namespace_prefix.clone();
        watchers.spawn(async move {
            let (requests, receiver) = futures::channel::mpsc::unbounded();
            requests
                .unbounded_send(WatchRequest {
                    request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
                        key,
                        range_end,
                        start_revision: head + 1,
                        ..Default::default()
                    })),
                })
                .map_err(|_| anyhow::anyhow!("the watch request channel closed"))?;
            let mut responses = watch_client.watch(receiver).await?.into_inner();
            let mut seen = Seen::new(writes);
            'stream: while let Some(response) = responses.message().await? {
                for event in response.events {
                    let Some(kv) = event.kv else { continue };
                    let key = String::from_utf8_lossy(&kv.key);
                    let Some(number) = key
                        .strip_prefix(&format!("{key_prefix}fan-"))
                        .and_then(|n| n.parse().ok())
                    else {
                        continue;
                    };
                    let sent = kv
                        .value
                        .get(..8)
                        .and_then(|b| b.try_into().ok())
                        .map(u64::from_be_bytes)
                        .unwrap_or_default();
                    if seen.record(number, sent, &sentinel_seen) {
                        break 'stream;
                    }
                }
            }
            // Keep the request side open until here: dropping it ends the watch.
            drop(requests);
            anyhow::Ok(seen)
        });
    }
    let data = payload().into_bytes();
    let put = |number: u64| {
        let mut value = now_ns().to_be_bytes().to_vec();
        value.extend_from_slice(&data);
        PutRequest {
            key: format!("{namespace_prefix}fan-{number}").into_bytes(),
            value,
            ..Default::default()
        }
    };
    client.kv().put(put(0)).await?;
    wait_for_sentinel(&sentinel_seen, settings.watchers, "etcd").await?;

    let pid = etcd_process.pid().context("etcd has exited")?;
    let cpu_before = cpu_seconds(pid)?;
    let took = paced_writes(writes, settings.watch_rate, |number| {
        let mut kv = client.kv();
        let request = put(number);
        async move {
            kv.put(request).await.context("etcd put")?;
            Ok(())
        }
    })
    .await?;
    let cores = (cpu_seconds(pid)? - cpu_before) / took.as_secs_f64();
    collect(watchers, settings.watchers, writes, cores).await
}

/// The figures of one target.
struct TargetFigures {
    target: Target,
    p50: Figure,
    p99: Figure,
    cores: Figure,
}

impl TargetFigures {
    fn new(settings: &Settings, target: Target) -> TargetFigures {
        let what = format!(
            "{} watchers of {}, {} writes/s",
            settings.watchers,
            target.describe(),
            settings.watch_rate
        );
        let baseline = "etcd 3.4 watches of the same keys";
        TargetFigures {
            target,
            p50: Figure::new(
                SCENARIO,
                &format!("delivery p50, {what} (ms)"),
                Unit::Millis,
                baseline,
            ),
            p99: Figure::new(
                SCENARIO,
                &format!("delivery p99, {what} (ms)"),
                Unit::Millis,
                baseline,
            )
            .with_goal(Goal::AtMost(GOAL_P99_MS)),
            cores: Figure::new(
                SCENARIO,
                &format!("server CPU during the writes, {what} (cores)"),
                Unit::Cores,
                baseline,
            ),
        }
    }

    fn push(&mut self, side: Side, deliveries: &Deliveries) {
        let (p50, p99) = (
            percentile(&deliveries.latencies_ms, 0.5).unwrap_or(f64::NAN),
            percentile(&deliveries.latencies_ms, 0.99).unwrap_or(f64::NAN),
        );
        let (p50s, p99s, cores) = match side {
            Side::Finale => (
                &mut self.p50.finale,
                &mut self.p99.finale,
                &mut self.cores.finale,
            ),
            Side::Etcd => (
                &mut self.p50.baseline,
                &mut self.p99.baseline,
                &mut self.cores.baseline,
            ),
        };
        p50s.push(p50);
        p99s.push(p99);
        cores.push(deliveries.cores);
    }
}

pub async fn run(settings: &Settings, report: &mut Report) -> anyhow::Result<()> {
    let binary = locate_binary(settings.finale_bin.as_deref())?;
    let dir = tempfile::tempdir().context("create a temporary directory")?;
    let server = start_server(&binary, &dir.path().join("finale")).await?;
    let etcd_process = EtcdProcess::start(&dir.path().join("etcd")).await?;
    let mut figures: Vec<TargetFigures> = [Target::Type, Target::Namespace]
        .into_iter()
        .map(|target| TargetFigures::new(settings, target))
        .collect();
    for run in 0..settings.runs {
        for figures in &mut figures {
            let target = figures.target;
            for side in Side::order(run) {
                let tag = format!(
                    "{run}-{}",
                    target.describe().replace(' ', "-").to_lowercase()
                );
                let deliveries = match side {
                    Side::Finale => measure_finale(settings, &server, target, &tag).await?,
                    Side::Etcd => measure_etcd(settings, &etcd_process, target, &tag).await?,
                };
                eprintln!(
                    "[{SCENARIO}] run {}/{}, {} watchers of {}: {} p50 {:.2} ms, p99 {:.2} ms, {:.2} cores, {} missing, {} repeated, {} re-watches",
                    run + 1,
                    settings.runs,
                    settings.watchers,
                    target.describe(),
                    side.name(),
                    percentile(&deliveries.latencies_ms, 0.5).unwrap_or(f64::NAN),
                    percentile(&deliveries.latencies_ms, 0.99).unwrap_or(f64::NAN),
                    deliveries.cores,
                    deliveries.missing,
                    deliveries.repeated,
                    deliveries.rewatches
                );
                if deliveries.missing > 0 || deliveries.repeated > 0 {
                    report.warnings.push(format!(
                        "{SCENARIO} run {}, {}: {} deliveries missing and {} repeated ({} watchers of {})",
                        run + 1,
                        side.name(),
                        deliveries.missing,
                        deliveries.repeated,
                        settings.watchers,
                        target.describe()
                    ));
                }
                report.raw.push(serde_json::json!({
                    "scenario": SCENARIO,
                    "run": run,
                    "target": target.describe(),
                    "side": side.name(),
                    "deliveries": deliveries.latencies_ms.len(),
                    "missing": deliveries.missing,
                    "repeated": deliveries.repeated,
                    "rewatches": deliveries.rewatches,
                    "p50_ms": percentile(&deliveries.latencies_ms, 0.5),
                    "p99_ms": percentile(&deliveries.latencies_ms, 0.99),
                    "cores": deliveries.cores,
                }));
                figures.push(side, &deliveries);
            }
        }
    }
    drop(server);
    drop(etcd_process);
    for figures in figures {
        report.figures.push(figures.p50);
        report.figures.push(figures.p99);
        report.figures.push(figures.cores);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_added_event_yields_its_write_number_send_time_and_revision() {
        let event = serde_json::json!({"type": "ADDED", "object": {"metadata": {
            "name": "fan-42", "resourceVersion": "981",
            "annotations": {SENT_AT: "1700000000123456789"}}}});
        let line = format!("{event}\n");
        assert_eq!(
            added_write(line.as_bytes()),
            Some((42, 1_700_000_000_123_456_789, 981))
        );
        let modified = line.replace("ADDED", "MODIFIED");
        assert_eq!(added_write(modified.as_bytes()), None);
        let other = line.replace("fan-42", "other");
        assert_eq!(added_write(other.as_bytes()), None);
    }
}
