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
//!
//! Creates as the store grows (issue 17: "creates/s as the store grows from 0 to 300 000
//! objects: flat within 10%"): objects are added in chunks of 10 000, each in a namespace of
//! its own (`mem-<objects before it>`), and each chunk is timed (and etcd's puts of the same
//! keys). Rows: each step's creates/s beside etcd's; and the creates/s of the last 30 000
//! objects beside that of the first 30 000, on the same server (the goal: at least 0.9×; one
//! chunk takes under a second here, too short to judge alone). etcd's own ratio is in the
//! progress line and the JSON.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::etcd::EtcdAction;
use crate::finale::{Memory, locate_binary, memory_of};
use crate::report::{Figure, Goal, Report, Unit};
use crate::scenarios::namespace_teardown::{etcd_batch, limit_for};
use crate::scenarios::objects::{self, Action, Collection, Kind, Owners};
use crate::scenarios::{Settings, SideBySide, payload};

const SCENARIO: &str = "memory";
const CLIENTS: usize = 64;
/// How long both sides idle before each reading: long enough for write bursts to settle.
const IDLE: Duration = Duration::from_secs(2);
/// The size whose row carries the goal, and the goal: at most twice etcd's memory.
const GOAL_SIZE: u64 = 100_000;
const GOAL_RATIO: f64 = 2.0;
/// Objects per timed chunk of creates.
const CHUNK: u64 = 10_000;
/// Chunks at each end compared for "flat": the first and the last 30 000 objects.
const FLAT_CHUNKS: usize = 3;
/// The goal for creates as the store grows: the last at least 0.9× the first.
const FLAT_RATIO: f64 = 0.9;

/// One size's readings across runs.
struct SizeFigures {
    size: u64,
    rss: Figure,
    /// Memory added per object since size 0; None for size 0.
    per_object: Option<Figure>,
    /// Creates/s from the previous size to this one; None for size 0.
    creates: Option<Figure>,
}

fn size_figures(previous: u64, size: u64) -> SizeFigures {
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
    let creates = (size > previous).then(|| {
        Figure::new(
            SCENARIO,
            &format!("creates/s, {previous} → {size} objects"),
            Unit::PerSecond,
            &format!("etcd 3.4 puts/s of the same keys, {CLIENTS} writers"),
        )
    });
    SizeFigures {
        size,
        rss,
        per_object,
        creates,
    }
}

/// Objects/s of `count` objects in `elapsed`.
fn rate(count: u64, elapsed: Duration) -> f64 {
    count as f64 / elapsed.as_secs_f64().max(1e-9)
}

pub async fn run(settings: &Settings, report: &mut Report) -> anyhow::Result<()> {
    let binary = locate_binary(settings.finale_bin.as_deref())?;
    let mut sizes = settings.memory_sizes.clone();
    sizes.sort_unstable();
    sizes.dedup();
    let mut figures: Vec<SizeFigures> = sizes
        .iter()
        .scan(0, |previous, &size| {
            let figures = size_figures(*previous, size);
            *previous = size;
            Some(figures)
        })
        .collect();
    let largest = sizes.last().copied().unwrap_or(0);
    let span = CHUNK * FLAT_CHUNKS as u64;
    let mut flat = (largest >= 2 * span).then(|| {
        Figure::new(
            SCENARIO,
            &format!("creates/s of the last {span} to {largest} objects"),
            Unit::PerSecond,
            &format!("creates/s of the first {span}, same server"),
        )
        .with_goal(Goal::RatioAtLeast(FLAT_RATIO))
    });
    let data: Arc<str> = format!("{0}{0}", payload()).into();
    let value = data.as_bytes().to_vec();

    for run in 0..settings.runs {
        let dir = tempfile::tempdir().context("create a temporary directory")?;
        let both = SideBySide::start(&binary, dir.path(), CLIENTS).await?;
        let (server, clients, etcd_client) = (&both.server, &both.clients, &both.etcd_client);
        let (server_pid, etcd_pid) = (both.server_pid, both.etcd_pid);

        let mut held = 0;
        let mut at_zero: Option<(Memory, Memory)> = None;
        // How long each whole chunk took, Finale's and etcd's, in order.
        let mut chunk_times: Vec<(Duration, Duration)> = Vec::new();
        for figures in figures.iter_mut() {
            let (mut finale_took, mut etcd_took) = (Duration::ZERO, Duration::ZERO);
            let step_count = figures.size - held;
            while held < figures.size {
                let count = CHUNK.min(figures.size - held);
                let namespace = format!("mem-{held}");
                objects::create_namespace(&clients[0], &server.url, &namespace).await?;
                let collection = Collection::new(Kind::ConfigMap, &server.url, &namespace);
                let action = Action::Create {
                    data: Arc::clone(&data),
                    finalizer: false,
                    owners: Owners::none(),
                };
                let created = Instant::now();
                objects::setup(clients, &collection, count, action, limit_for(count)).await?;
                let finale_chunk = created.elapsed();
                let prefix = Kind::ConfigMap.etcd_key_prefix(&namespace);
                let put = Instant::now();
                etcd_batch(etcd_client, &prefix, count, EtcdAction::Put(value.clone())).await?;
                let etcd_chunk = put.elapsed();
                if count == CHUNK {
                    chunk_times.push((finale_chunk, etcd_chunk));
                }
                finale_took += finale_chunk;
                etcd_took += etcd_chunk;
                held += count;
            }
            if let Some(creates) = &mut figures.creates {
                creates.finale.push(rate(step_count, finale_took));
                creates.baseline.push(rate(step_count, etcd_took));
                eprintln!(
                    "[{SCENARIO}] run {}/{}: {step_count} more objects (now {}): finale {:.1} s ({:.0}/s), etcd {:.1} s ({:.0}/s)",
                    run + 1,
                    settings.runs,
                    figures.size,
                    finale_took.as_secs_f64(),
                    rate(step_count, finale_took),
                    etcd_took.as_secs_f64(),
                    rate(step_count, etcd_took)
                );
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
        if let Some(flat) = &mut flat
            && chunk_times.len() >= 2 * FLAT_CHUNKS
        {
            // Objects/s over a run of chunks, Finale's and etcd's.
            let rates = |chunks: &[(Duration, Duration)]| {
                let finale = chunks.iter().map(|times| times.0).sum();
                let etcd = chunks.iter().map(|times| times.1).sum();
                (rate(span, finale), rate(span, etcd))
            };
            let first = rates(&chunk_times[..FLAT_CHUNKS]);
            let last = rates(&chunk_times[chunk_times.len() - FLAT_CHUNKS..]);
            flat.finale.push(last.0);
            flat.baseline.push(first.0);
            eprintln!(
                "[{SCENARIO}] run {}/{}: creates/s of the last {span} over the first {span}: finale {:.2}x, etcd {:.2}x",
                run + 1,
                settings.runs,
                last.0 / first.0,
                last.1 / first.1
            );
        }
        let chunk_rates = |side: fn(&(Duration, Duration)) -> Duration| {
            chunk_times
                .iter()
                .map(|times| rate(CHUNK, side(times)))
                .collect::<Vec<_>>()
        };
        report.raw.push(serde_json::json!({
            "scenario": SCENARIO,
            "run": run,
            "chunk": CHUNK,
            "creates_per_second": chunk_rates(|times| times.0),
            "etcd_puts_per_second": chunk_rates(|times| times.1),
        }));
        drop(both);
    }
    for figures in figures {
        report.figures.push(figures.rss);
        if let Some(per_object) = figures.per_object {
            report.figures.push(per_object);
        }
        if let Some(creates) = figures.creates {
            report.figures.push(creates);
        }
    }
    report.figures.extend(flat);
    Ok(())
}
