//! Quick durable-write throughput check for the redb engine (the real benchmark harness lives
//! in `crates/bench`).
//!
//! ```text
//! cargo run --release -p finale-store --example throughput -- [SECONDS] [VALUE_BYTES] [WRITERS...]
//! ```
//!
//! Defaults: 5 seconds, 512-byte values, 1 and 64 concurrent writers. Each writer puts distinct
//! keys (`/registry/bench/w{writer}/{seq}`), awaiting each write before the next, as the bench
//! harness's `store` scenario does, in a fresh store in a temporary directory under the current
//! directory (so on the project's disk). See `options_from_env` for experiment overrides.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use finale_store::{Precondition, RedbStore, RedbStoreOptions, Store, WriteOp};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let seconds: u64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(5);
    let value_bytes: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(512);
    let mut writer_counts: Vec<usize> =
        args.iter().skip(2).filter_map(|a| a.parse().ok()).collect();
    if writer_counts.is_empty() {
        writer_counts = vec![1, 64];
    }
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    for writers in writer_counts {
        let dir = tempfile::tempdir_in(".").expect("temporary directory");
        let rate = runtime.block_on(run(
            dir.path(),
            writers,
            Duration::from_secs(seconds),
            value_bytes,
        ));
        println!("{writers:>4} writers, {value_bytes} B values: {rate:>8.0} durable writes/s");
    }
}

async fn run(dir: &std::path::Path, writers: usize, duration: Duration, value_bytes: usize) -> f64 {
    let store = RedbStore::open(dir, options_from_env()).expect("open store");
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + duration;
    let tasks: Vec<_> = (0..writers)
        .map(|writer| {
            let store = store.clone();
            let done = done.clone();
            tokio::spawn(async move {
                let value = vec![b'v'; value_bytes];
                let mut i = 0u64;
                while Instant::now() < deadline {
                    let key = format!("/registry/bench/w{writer}/{i}").into_bytes();
                    store
                        .write(
                            WriteOp::Put {
                                key,
                                value: value.clone(),
                            },
                            Precondition::None,
                        )
                        .await
                        .expect("write");
                    done.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("writer task");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let rate = done.load(Ordering::Relaxed) as f64 / elapsed;
    store.close().await;
    rate
}

/// Default options, with overrides for experiments: `CHECKPOINT_MS`, `QUICK_REPAIR=0`,
/// `NO_FSYNC=1` (not durable: shows what the disk costs).
fn options_from_env() -> RedbStoreOptions {
    let var = |name: &str| std::env::var(name).ok();
    let mut options = RedbStoreOptions::default();
    if let Some(ms) = var("CHECKPOINT_MS").and_then(|v| v.parse().ok()) {
        options.checkpoint_interval = Duration::from_millis(ms);
    }
    if var("QUICK_REPAIR").as_deref() == Some("0") {
        options.quick_repair = false;
    }
    if var("NO_FSYNC").as_deref() == Some("1") {
        options.durable_commits = false;
    }
    options
}
