//! The scenarios, each measuring Finale and its etcd 3.4 baseline in the same invocation, and
//! what they share: run settings, the payload, and progress lines on stderr.

use std::path::PathBuf;
use std::time::Duration;

use crate::load::{LoadResult, LoadSpec};
use crate::report::{Figure, Goal, Report, Unit};

pub mod cloud_gc;
pub mod cold_start;
pub mod deletion_insight;
pub mod finalizer_removal;
pub mod garbage_collection;
pub mod high_availability;
pub mod http_create;
pub mod idle_rss;
pub mod lists;
pub mod memory;
pub mod namespace_teardown;
pub mod objects;
pub mod operators;
pub mod pods;
pub mod rbac_create;
pub mod store;
pub mod watch_fanout;
pub mod webhook_create;

/// How much to measure, from the command line.
#[derive(Clone, Debug)]
pub struct Settings {
    pub runs: usize,
    /// The measured window of each load run.
    pub window: Duration,
    /// The uncounted warm-up before each window.
    pub warmup: Duration,
    /// Hard cap on operations per load run.
    pub max_ops: u64,
    /// The `finale` binary (`None`: next to this executable).
    pub finale_bin: Option<PathBuf>,
    /// ConfigMaps in the namespace, one figure each, for `namespace-teardown`.
    pub teardown_sizes: Vec<u64>,
    /// Custom resources in the namespace of one more `namespace-teardown` figure; 0: none.
    pub teardown_custom_resources: u64,
    /// Terminating ConfigMaps per `finalizer-removal` run.
    pub finalizer_objects: u64,
    /// Dependents of the one owner in the background and orphan cascades of
    /// `garbage-collection`.
    pub gc_dependents: u64,
    /// Leaves of the foreground tree of `garbage-collection`.
    pub gc_leaves: u64,
    /// Databases per `database-operator` run.
    pub databases: u64,
    /// The operator's DDL rate limit and burst in `database-operator`.
    pub ddl_rate: u32,
    pub ddl_burst: u32,
    /// How long PostgreSQL stays down in the thundering-herd figure.
    pub outage: Duration,
    /// Namespaces of the tenant, and ConfigMaps in each, in `tenant-teardown`.
    pub tenant_namespaces: u64,
    pub tenant_configmaps: u64,
    /// Objects in the explained namespace, and dependents of the planned owner, in
    /// `deletion-insight`.
    pub insight_objects: u64,
    pub plan_dependents: u64,
    /// Pods per batch in `pods`.
    pub pods: u64,
    /// Watchers, and writes per second, of `watch-fanout`.
    pub watchers: u64,
    pub watch_rate: u64,
    /// The sizes `memory` grows both sides through, ascending.
    pub memory_sizes: Vec<u64>,
    /// ConfigMaps in the collection `lists` reads.
    pub list_objects: u64,
    /// The parts of `high-availability` to run (`creates`, `failover`, `write-gap`).
    pub ha_parts: Vec<String>,
    /// Where `rbac-create`'s audited server writes its log; None: beside its store.
    pub audit_log_dir: Option<PathBuf>,
}

impl Settings {
    pub fn load_spec(&self, workers: usize) -> LoadSpec {
        LoadSpec {
            workers,
            warmup: self.warmup,
            window: self.window,
            max_ops: self.max_ops,
            // Generous: a healthy write takes milliseconds, but a shared disk can stall.
            op_timeout: Duration::from_secs(30),
        }
    }
}

/// A `finale server` and a single-member etcd on fresh data directories under one directory,
/// with HTTPS clients of the server and one etcd client: what the scenarios that hold data on
/// both sides (`memory`, `lists`) start each run with. Dropped in field order: the clients,
/// then the server, then etcd.
pub struct SideBySide {
    pub clients: Vec<reqwest::Client>,
    pub server: finale_e2e::FinaleServer,
    pub etcd_client: finale_etcd_rpc::Client,
    /// Held so that dropping the pair stops etcd.
    _etcd: crate::etcd::EtcdProcess,
    pub server_pid: u32,
    pub etcd_pid: u32,
}

impl SideBySide {
    pub async fn start(
        binary: &std::path::Path,
        dir: &std::path::Path,
        clients: usize,
    ) -> anyhow::Result<SideBySide> {
        use anyhow::Context;
        let server = crate::finale::start_server(binary, &dir.join("finale")).await?;
        let clients = (0..clients)
            .map(|_| crate::finale::client_for(&server))
            .collect::<anyhow::Result<_>>()?;
        let etcd = crate::etcd::EtcdProcess::start(&dir.join("etcd")).await?;
        let etcd_client = crate::etcd::connect(&etcd.endpoint).await?;
        let server_pid = server.pid().context("the server has exited")?;
        let etcd_pid = etcd.pid().context("etcd has exited")?;
        Ok(SideBySide {
            clients,
            server,
            etcd_client,
            _etcd: etcd,
            server_pid,
            etcd_pid,
        })
    }
}

/// Bytes per stored value, the size the figures are defined for.
pub const VALUE_BYTES: usize = 512;

/// A `VALUE_BYTES` payload of printable, incompressible-looking ASCII, usable as a raw value
/// and inside a JSON string without escaping. Deterministic, so runs are comparable.
pub fn payload() -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    // xorshift64: enough variety that no layer could profit from compressing it.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..VALUE_BYTES)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            char::from(ALPHABET[(state % ALPHABET.len() as u64) as usize])
        })
        .collect()
}

/// One progress line for a load run: `[scenario] run i/N, what: target 1234/s (p50 …, p99 …)`.
pub fn progress_load(
    scenario: &str,
    run: usize,
    runs: usize,
    what: &str,
    target: &str,
    result: &LoadResult,
) {
    let summary = result.summary();
    let ms = |v: Option<f64>| v.map_or_else(|| "-".into(), |v| format!("{v:.2} ms"));
    let mut line = format!(
        "[{scenario}] run {}/{runs}, {what}: {target} {:.0}/s ({} ops, mean {}, p50 {}, p99 {})",
        run + 1,
        summary.per_second,
        summary.ops,
        ms(summary.mean_ms),
        ms(summary.p50_ms),
        ms(summary.p99_ms),
    );
    if let Some(error) = &summary.first_error {
        line.push_str(&format!(
            "; {} worker(s) failed, first: {error}",
            summary.errors
        ));
    }
    eprintln!("{line}");
}

/// Which side of a comparison a result belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Finale,
    Etcd,
}

impl Side {
    pub fn name(self) -> &'static str {
        match self {
            Side::Finale => "finale",
            Side::Etcd => "etcd",
        }
    }

    /// Both sides, in the order to measure them in run `run`: alternating which goes first
    /// cancels a systematic advantage for whichever runs on a quieter or warmer machine.
    pub fn order(run: usize) -> [Side; 2] {
        if run.is_multiple_of(2) {
            [Side::Finale, Side::Etcd]
        } else {
            [Side::Etcd, Side::Finale]
        }
    }
}

/// The three figures of a load comparison: rate, p50 and p99 latency, one value per run.
pub struct LoadFigures {
    pub rate: Figure,
    pub p50: Figure,
    pub p99: Figure,
}

impl LoadFigures {
    /// `rate_name` names the rate row; the latency rows are named after `latency_name`.
    pub fn new(
        scenario: &str,
        rate_name: &str,
        latency_name: &str,
        baseline_name: &str,
        goal: Option<Goal>,
    ) -> LoadFigures {
        let latency = |q: &str| {
            Figure::new(
                scenario,
                &format!("{latency_name} {q} (ms)"),
                Unit::Millis,
                baseline_name,
            )
        };
        let mut rate = Figure::new(scenario, rate_name, Unit::PerSecond, baseline_name);
        rate.goal = goal;
        LoadFigures {
            rate,
            p50: latency("p50"),
            p99: latency("p99"),
        }
    }

    /// Adds one run's result for `side`, and a warning to `report` if operations failed
    /// (the rate of such a run is understated).
    pub fn push(&mut self, side: Side, result: &LoadResult, report: &mut Report, what: &str) {
        let summary = result.summary();
        fn pick(figure: &mut Figure, side: Side) -> &mut Vec<f64> {
            match side {
                Side::Finale => &mut figure.finale,
                Side::Etcd => &mut figure.baseline,
            }
        }
        pick(&mut self.rate, side).push(summary.per_second);
        if let Some(p50) = summary.p50_ms {
            pick(&mut self.p50, side).push(p50);
        }
        if let Some(p99) = summary.p99_ms {
            pick(&mut self.p99, side).push(p99);
        }
        if let Some(error) = summary.first_error {
            report.warnings.push(format!(
                "{what}, {}: {} worker(s) failed (rate understated); first error: {error}",
                side.name(),
                summary.errors
            ));
        }
    }

    pub fn into_figures(self) -> [Figure; 3] {
        [self.rate, self.p50, self.p99]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_is_value_bytes_of_json_safe_ascii() {
        let payload = payload();
        assert_eq!(payload.len(), VALUE_BYTES);
        assert!(payload.bytes().all(|b| b.is_ascii_alphanumeric()));
    }
}
