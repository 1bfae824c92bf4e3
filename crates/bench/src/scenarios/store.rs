//! `store`: durable writes/s and write latency of the embedded `RedbStore` with 1 and 64
//! concurrent writers, against etcd 3.4 driven over gRPC (`finale-etcd-rpc`) with the same load
//! shape.
//!
//! Load shape on both sides: each writer puts distinct keys with 512-byte values, with no
//! precondition, and awaits each write before issuing the next. Both sides are durable per
//! acknowledged write (redb `Durability::Immediate` behind group commit; etcd fsyncs its WAL
//! before answering), and both keep their files in a temporary directory under the same
//! `std::env::temp_dir()`, so they share one filesystem and disk.
//!
//! What differs by design: Finale's store is in-process, while etcd is reached over gRPC on
//! loopback. That is the comparison the figure is about (the embedded store replaces etcd),
//! and the gRPC hop is part of what using etcd costs.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use finale_store::{Precondition, RedbStore, RedbStoreOptions, Store, WriteOp, WriteOutcome};

use crate::disk::{SyncRate, probe_fdatasync};
use crate::etcd::{self, EtcdPutter};
use crate::load::{self, LoadResult, LoadSpec, Worker};
use crate::report::{Goal, Report};
use crate::scenarios::{LoadFigures, Settings, Side, payload, progress_load};

const SCENARIO: &str = "store";

/// Writer counts with their goals (finale / etcd writes/s).
const WRITERS: [(usize, f64); 2] = [(1, 1.0), (64, 1.2)];

/// Sequential puts into the embedded store.
struct StoreWriter {
    store: Arc<RedbStore>,
    prefix: String,
    value: Arc<[u8]>,
}

impl Worker for StoreWriter {
    async fn op(&mut self, seq: u64) -> anyhow::Result<()> {
        let op = WriteOp::Put {
            key: format!("{}{seq}", self.prefix).into_bytes(),
            value: self.value.to_vec(),
        };
        match self.store.write(op, Precondition::None).await? {
            WriteOutcome::Committed(_) => Ok(()),
            WriteOutcome::PreconditionFailed { .. } => {
                bail!("a put without precondition was refused")
            }
        }
    }
}

/// One load run against the embedded store; `tag` keeps keys distinct across runs.
pub async fn measure_finale(
    store: &Arc<RedbStore>,
    spec: &LoadSpec,
    tag: &str,
) -> anyhow::Result<LoadResult> {
    let value: Arc<[u8]> = payload().into_bytes().into();
    load::run(spec, |worker| StoreWriter {
        store: Arc::clone(store),
        prefix: format!("/registry/bench/{tag}/w{worker}/"),
        value: Arc::clone(&value),
    })
    .await
}

/// One load run of etcd puts through one shared client connection; `tag` keeps keys distinct.
pub async fn measure_etcd(
    client: &finale_etcd_rpc::Client,
    spec: &LoadSpec,
    tag: &str,
) -> anyhow::Result<LoadResult> {
    let value = payload().into_bytes();
    load::run(spec, |worker| EtcdPutter {
        kv: client.kv(),
        prefix: format!("/registry/bench/{tag}/w{worker}/"),
        value: value.clone(),
    })
    .await
}

/// Runs the scenario and adds its figures to `report`. Without `with_etcd`, only Finale is
/// measured (the smoke test, which must not need etcd).
pub async fn run(settings: &Settings, report: &mut Report, with_etcd: bool) -> anyhow::Result<()> {
    let dir = tempfile::tempdir().context("create a temporary directory for the store")?;
    let store_dir = dir.path().join("store");
    let store = tokio::task::spawn_blocking(move || {
        RedbStore::open(&store_dir, RedbStoreOptions::default())
    })
    .await
    .context("store open task")?
    .context("open the store")?;

    let etcd = if with_etcd {
        let etcd = tokio::task::spawn_blocking(finale_e2e::Etcd::start)
            .await
            .context("etcd start task")?
            .context("start etcd")?;
        let client = etcd::connect(&etcd.endpoint).await?;
        Some((etcd, client))
    } else {
        None
    };

    let mut figures: Vec<LoadFigures> = WRITERS
        .iter()
        .map(|&(writers, goal)| {
            let noun = if writers == 1 { "writer" } else { "writers" };
            LoadFigures::new(
                SCENARIO,
                &format!("store durable writes/s, {writers} {noun}"),
                &format!("store write latency, {writers} {noun},"),
                &format!("etcd 3.4 puts, {writers} {noun}"),
                Some(Goal::RatioAtLeast(goal)),
            )
        })
        .collect();

    let mut disk_rates = Vec::new();
    for run in 0..settings.runs {
        let probe_dir = dir.path().to_path_buf();
        let probe_time = settings.window.min(Duration::from_secs(1));
        let disk = tokio::task::spawn_blocking(move || probe_fdatasync(&probe_dir, probe_time))
            .await
            .context("disk probe task")??;
        let ms = |v: Option<f64>| v.map_or_else(|| "-".into(), |v| format!("{v:.2} ms"));
        eprintln!(
            "[{SCENARIO}] run {}/{}, disk: {:.0} fdatasync/s (4 KiB overwrite, one thread; \
             p50 {}, p99 {})",
            run + 1,
            settings.runs,
            disk.per_second,
            ms(disk.p50_ms),
            ms(disk.p99_ms),
        );
        disk_rates.push(disk);
        report.raw.push(serde_json::json!({
            "scenario": SCENARIO,
            "run": run,
            "target": "disk",
            "fdatasync": disk,
        }));
        for (&(writers, _), figures) in WRITERS.iter().zip(&mut figures) {
            let spec = settings.load_spec(writers);
            let what = format!("{writers} writer(s)");
            let tag = format!("r{run}-n{writers}");
            for side in Side::order(run) {
                let result = match (side, &etcd) {
                    (Side::Finale, _) => measure_finale(&store, &spec, &tag).await?,
                    (Side::Etcd, Some((_, client))) => measure_etcd(client, &spec, &tag).await?,
                    (Side::Etcd, None) => continue,
                };
                progress_load(SCENARIO, run, settings.runs, &what, side.name(), &result);
                figures.push(
                    side,
                    &result,
                    report,
                    &format!("{SCENARIO} run {}, {what}", run + 1),
                );
                report.raw.push(serde_json::json!({
                    "scenario": SCENARIO,
                    "run": run,
                    "writers": writers,
                    "target": side.name(),
                    "result": result.summary(),
                }));
            }
        }
    }

    for figures in figures {
        report.figures.extend(figures.into_figures());
    }
    let disk_median = |f: fn(&SyncRate) -> Option<f64>| {
        crate::stats::median(&disk_rates.iter().filter_map(f).collect::<Vec<_>>())
    };
    if let (Some(rate), Some(p50), Some(p99)) = (
        disk_median(|d| Some(d.per_second)),
        disk_median(|d| d.p50_ms),
        disk_median(|d| d.p99_ms),
    ) {
        report.notes.push(format!(
            "disk under the store runs: {rate:.0} write+fdatasync/s, p50 {p50:.2} ms, p99 \
             {p99:.2} ms (medians; one thread, 4 KiB overwrites in a preallocated file in the \
             stores' directory)"
        ));
    }
    store.close().await;
    drop(etcd);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::report::Context;

    /// The harness still builds and runs end to end on the embedded store (no etcd, no timing
    /// assertions: CI machines are too noisy for those).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn smoke_store_scenario_runs_on_redb_alone() {
        let settings = Settings {
            runs: 1,
            window: Duration::from_millis(300),
            warmup: Duration::from_millis(50),
            max_ops: 100_000,
            finale_bin: None,
            teardown_sizes: Vec::new(),
            teardown_custom_resources: 0,
            finalizer_objects: 0,
            gc_dependents: 0,
            gc_leaves: 0,
            databases: 0,
            ddl_rate: 1,
            ddl_burst: 1,
            outage: Duration::ZERO,
            tenant_namespaces: 0,
            tenant_configmaps: 0,
            insight_objects: 100,
            plan_dependents: 1,
            pods: 1,
            memory_sizes: vec![0],
            list_objects: 1,
            ha_parts: Vec::new(),
            watchers: 1,
            watch_rate: 1,
            audit_log_dir: None,
        };
        let mut report = Report::new(Context::capture(1, 0.3));
        run(&settings, &mut report, false).await.unwrap();

        assert_eq!(report.figures.len(), 6);
        let rates: Vec<_> = report
            .figures
            .iter()
            .filter(|f| f.name.contains("writes/s"))
            .collect();
        assert_eq!(rates.len(), 2);
        for rate in rates {
            assert_eq!(rate.finale.len(), 1);
            assert!(rate.finale[0] > 0.0, "{}: no writes completed", rate.name);
            assert!(rate.baseline.is_empty());
        }
        assert!(report.warnings.is_empty(), "{:?}", report.warnings);
        assert!(
            report
                .table()
                .contains("store durable writes/s, 64 writers")
        );
    }
}
