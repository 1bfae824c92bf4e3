//! A raw-disk probe: how many 4 KiB overwrite + `fdatasync` cycles one thread gets per second
//! in the directory the stores use.
//!
//! Durable writes with one writer are bounded by this (each acknowledged write needs at least
//! one sync), and on a shared virtual disk it swings from run to run, so the store scenario
//! measures it next to each run: it tells a slow disk apart from a slow store.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::stats::{latency_histogram, quantile_ms};

/// Blocks covered by the probe file: overwriting inside a preallocated file, as etcd's WAL
/// (preallocated segments) and redb (pages rewritten in place) mostly do, so the figure is
/// not dominated by file-size metadata updates.
const BLOCKS: u64 = 1024;
const BLOCK: usize = 4096;

#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct SyncRate {
    pub per_second: f64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

/// Runs the probe in `dir` for `duration` (blocking; call it on the blocking pool).
pub fn probe_fdatasync(dir: &Path, duration: Duration) -> anyhow::Result<SyncRate> {
    let path = dir.join("fdatasync-probe");
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .with_context(|| format!("create {}", path.display()))?;
    let block = [0x5au8; BLOCK];
    for i in 0..BLOCKS {
        file.write_all_at(&block, i * BLOCK as u64)?;
    }
    file.sync_all()?;

    let mut latency = latency_histogram()?;
    let start = Instant::now();
    let mut count = 0u64;
    while start.elapsed() < duration {
        let began = Instant::now();
        file.write_all_at(&block, (count % BLOCKS) * BLOCK as u64)?;
        file.sync_data()?;
        let micros = u64::try_from(began.elapsed().as_micros()).unwrap_or(u64::MAX);
        latency.saturating_record(micros.max(1));
        count += 1;
    }
    let elapsed = start.elapsed().as_secs_f64();
    drop(file);
    std::fs::remove_file(&path).with_context(|| format!("remove {}", path.display()))?;
    Ok(SyncRate {
        per_second: count as f64 / elapsed,
        p50_ms: quantile_ms(&latency, 0.5),
        p99_ms: quantile_ms(&latency, 0.99),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_syncs_and_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let rate = probe_fdatasync(dir.path(), Duration::from_millis(50)).unwrap();
        assert!(rate.per_second > 0.0);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
