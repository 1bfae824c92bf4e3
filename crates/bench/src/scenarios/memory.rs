//! `memory`: resident memory as the data grows, against etcd 3.4 holding the same keys (issue
//! 17: "memory proportional to the data").
//!
//! Each run starts a `finale server` and a single-member etcd on fresh data directories, then
//! grows both through the sizes of `--memory-sizes` (default 0, 10 000, 100 000, 300 000
//! objects). Each step adds the missing objects to both: ConfigMaps of a 1 KiB payload (two
//! copies of the harness's 512-byte payload as their one `data` value) created over HTTPS by 64
//! clients in a namespace of the step's own (`mem-<step>`); for etcd, values of the same 1 KiB
//! put by 64 writers under the keys kube-apiserver would use. Then both are left idle for two
//! seconds and `VmRSS` of each is read from `/proc/PID/status`. Creating is not timed.
//!
//! Figures, one row per size: each side's resident memory (MB) at that size; and, for every size
//! above 0, the memory each side added per object since its size-0 reading (KB per object). The
//! goal (≤ 2× etcd) is on the row of 100 000 objects.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::etcd::{self, EtcdAction, EtcdProcess};
use crate::finale::{Memory, client_for, locate_binary, memory_of, start_server};
use crate::report::{Figure, Goal, Report, Unit};
use crate::scenarios::namespace_teardown::{etcd_batch, limit_for};
use crate::scenarios::objects::{self, Action, Collection, Kind, Owners};
use crate::scenarios::{Settings, payload};

const SCENARIO: &str = "memory";
const CLIENTS: usize = 64;
/// How long both sides idle before each reading: long enough for write bursts to settle.
const IDLE: Duration = Duration::from_secs(2);
/// The size whose row carries the goal, and the goal: at most twice etcd's memory.
const GOAL_SIZE: u64 = 100_000;
const GOAL_RATIO: f64 = 2.0;

/// One size's readings across runs.
struct SizeFigures {
    size: u64,
    rss: Figure,
    /// Memory added per object since size 0; None for size 0.
    per_object: Option<Figure>,
}

fn size_figures(size: u64) -> SizeFigures {
    let baseline = "etcd 3.4 holding the same keys";
    let mut rss = Figure::new(
        SCENARIO,
        &format!("VmRSS holding {size} ConfigMaps of 1 KiB (MB)"),
        Unit::Megabytes,
        baseline,
    );
    if size == GOAL_SIZE {
        rss = rss.with_goal(Goal::RatioAtMost(GOAL_RATIO));
    }
    let per_object = (size > 0).then(|| {
        Figure::new(
            SCENARIO,
            &format!("memory added per object, 0 → {size} (KB)"),
            Unit::Kilobytes,
            baseline,
        )
    });
    SizeFigures {
        size,
        rss,
        per_object,
    }
}

pub async fn run(settings: &Settings, report: &mut Report) -> anyhow::Result<()> {
    let binary = locate_binary(settings.finale_bin.as_deref())?;
    let mut sizes = settings.memory_sizes.clone();
    sizes.sort_unstable();
    sizes.dedup();
    let mut figures: Vec<SizeFigures> = sizes.iter().map(|&size| size_figures(size)).collect();
    let data: Arc<str> = format!("{0}{0}", payload()).into();
    let value = data.as_bytes().to_vec();

    for run in 0..settings.runs {
        let dir = tempfile::tempdir().context("create a temporary directory")?;
        let server = start_server(&binary, &dir.path().join("finale")).await?;
        let clients: Vec<reqwest::Client> = (0..CLIENTS)
            .map(|_| client_for(&server))
            .collect::<anyhow::Result<_>>()?;
        let etcd_process = EtcdProcess::start(&dir.path().join("etcd")).await?;
        let etcd_client = etcd::connect(&etcd_process.endpoint).await?;
        let server_pid = server.pid().context("the server has exited")?;
        let etcd_pid = etcd_process.pid().context("etcd has exited")?;

        let mut held = 0;
        let mut at_zero: Option<(Memory, Memory)> = None;
        for (step, figures) in figures.iter_mut().enumerate() {
            let count = figures.size - held;
            if count > 0 {
                let namespace = format!("mem-{step}");
                objects::create_namespace(&clients[0], &server.url, &namespace).await?;
                let collection = Collection::new(Kind::ConfigMap, &server.url, &namespace);
                let action = Action::Create {
                    data: Arc::clone(&data),
                    finalizer: false,
                    owners: Owners::none(),
                };
                let created = Instant::now();
                objects::setup(&clients, &collection, count, action, limit_for(count)).await?;
                let finale_took = created.elapsed();
                let prefix = Kind::ConfigMap.etcd_key_prefix(&namespace);
                let put = Instant::now();
                etcd_batch(&etcd_client, &prefix, count, EtcdAction::Put(value.clone())).await?;
                eprintln!(
                    "[{SCENARIO}] run {}/{}: {count} more objects (now {}): finale {:.1} s, etcd {:.1} s",
                    run + 1,
                    settings.runs,
                    figures.size,
                    finale_took.as_secs_f64(),
                    put.elapsed().as_secs_f64()
                );
                held = figures.size;
            }
            tokio::time::sleep(IDLE).await;
            let finale = memory_of(server_pid)?;
            let etcd = memory_of(etcd_pid)?;
            eprintln!(
                "[{SCENARIO}] run {}/{}, {} objects: finale VmRSS {:.1} MB, etcd VmRSS {:.1} MB",
                run + 1,
                settings.runs,
                figures.size,
                finale.rss_mb,
                etcd.rss_mb
            );
            figures.rss.finale.push(finale.rss_mb);
            figures.rss.baseline.push(etcd.rss_mb);
            let (finale_zero, etcd_zero) = *at_zero.get_or_insert((finale, etcd));
            if let Some(per_object) = &mut figures.per_object {
                // MB to KB per object: × 1000 / size.
                let per = |now: Memory, zero: Memory| {
                    (now.rss_mb - zero.rss_mb) * 1000.0 / figures.size as f64
                };
                per_object.finale.push(per(finale, finale_zero));
                per_object.baseline.push(per(etcd, etcd_zero));
            }
            report.raw.push(serde_json::json!({
                "scenario": SCENARIO,
                "run": run,
                "objects": figures.size,
                "finale": {"vm_rss_mb": finale.rss_mb, "vm_hwm_mb": finale.hwm_mb},
                "etcd": {"vm_rss_mb": etcd.rss_mb, "vm_hwm_mb": etcd.hwm_mb},
            }));
        }
        drop(clients);
        drop(server);
        drop(etcd_process);
    }
    for figures in figures {
        report.figures.push(figures.rss);
        if let Some(per_object) = figures.per_object {
            report.figures.push(per_object);
        }
    }
    Ok(())
}
