//! A closed-loop load generator: `workers` tasks, each issuing one operation, awaiting it, and
//! issuing the next, for a warm-up period and then a measured window.
//!
//! Closed loop is the shape the figures ask for ("each writer awaits its write before issuing
//! the next"): throughput is what the system sustains at that concurrency, and latency is what
//! each caller sees. Every run is bounded three ways: by time (warm-up + window), by a total
//! operation count, and by a per-operation timeout, so a stuck target cannot hang the harness.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::stats::{latency_histogram, quantile_ms};

/// One worker's operation. The worker is owned by its task, so it may keep a connection or
/// buffers in `self`.
pub trait Worker: Send + 'static {
    /// Performs operation number `seq` (0, 1, 2… per worker) and resolves when it is done.
    fn op(&mut self, seq: u64) -> impl Future<Output = anyhow::Result<()>> + Send;
}

/// How long and how hard to drive a target.
#[derive(Clone, Debug)]
pub struct LoadSpec {
    /// Concurrent workers, each with at most one operation in flight.
    pub workers: usize,
    /// Operations completing in this initial period are not counted: it absorbs connection
    /// set-up, TLS handshakes and cold caches.
    pub warmup: Duration,
    /// The measured window after the warm-up.
    pub window: Duration,
    /// Hard cap on operations issued in one run (warm-up included).
    pub max_ops: u64,
    /// An operation taking longer than this fails the worker.
    pub op_timeout: Duration,
}

impl LoadSpec {
    /// Exactly `ops` operations shared by `workers`, all counted (no warm-up), bounded by
    /// `limit` in time: the shape of a fixed batch of work (fill a namespace, delete N
    /// objects) rather than of a sustained load. With [`Tickets`] each operation gets its own
    /// item.
    pub fn exactly(workers: usize, ops: u64, limit: Duration) -> LoadSpec {
        LoadSpec {
            workers: workers.max(1),
            warmup: Duration::ZERO,
            window: limit,
            max_ops: ops,
            op_timeout: Duration::from_secs(30),
        }
    }
}

/// Item numbers `0..count`, handed out once each across all workers of a run. With
/// [`LoadSpec::exactly`] (`max_ops` = `count`) every item is taken exactly once, whichever
/// worker takes it, as long as no operation fails.
#[derive(Clone, Debug)]
pub struct Tickets {
    next: Arc<AtomicU64>,
    count: u64,
}

impl Tickets {
    pub fn new(count: u64) -> Tickets {
        Tickets {
            next: Arc::new(AtomicU64::new(0)),
            count,
        }
    }

    /// How many items there are to hand out.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The next item number, or an error once all `count` are taken.
    pub fn take(&self) -> anyhow::Result<u64> {
        let ticket = self.next.fetch_add(1, Ordering::Relaxed);
        anyhow::ensure!(
            ticket < self.count,
            "all {} items were already handed out",
            self.count
        );
        Ok(ticket)
    }
}

/// The outcome of one run.
#[derive(Debug)]
pub struct LoadResult {
    /// Operations that completed successfully inside the measured window.
    pub ops: u64,
    /// Failed or timed-out operations (each stops its worker).
    pub errors: u64,
    pub first_error: Option<String>,
    /// The length of the measured window actually covered.
    pub elapsed: Duration,
    /// Latency of every counted operation, in microseconds.
    pub latency: Histogram<u64>,
}

/// The per-run numbers worth keeping in the JSON dump.
#[derive(Clone, Debug, Serialize)]
pub struct RunSummary {
    pub ops: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub seconds: f64,
    pub per_second: f64,
    pub mean_ms: Option<f64>,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub max_ms: Option<f64>,
}

impl LoadResult {
    /// Successful operations per second over the measured window.
    pub fn per_second(&self) -> f64 {
        let seconds = self.elapsed.as_secs_f64();
        if seconds > 0.0 {
            self.ops as f64 / seconds
        } else {
            0.0
        }
    }

    pub fn summary(&self) -> RunSummary {
        RunSummary {
            ops: self.ops,
            errors: self.errors,
            first_error: self.first_error.clone(),
            seconds: self.elapsed.as_secs_f64(),
            per_second: self.per_second(),
            mean_ms: (!self.latency.is_empty()).then(|| self.latency.mean() / 1000.0),
            p50_ms: quantile_ms(&self.latency, 0.50),
            p99_ms: quantile_ms(&self.latency, 0.99),
            max_ms: quantile_ms(&self.latency, 1.0),
        }
    }
}

/// What one worker task reports back.
struct WorkerReport {
    ops: u64,
    latency: Histogram<u64>,
    error: Option<String>,
    /// Completion time of the worker's last counted operation.
    last_done: Option<Instant>,
    /// True if the worker stopped before the window ended (error or operation cap).
    stopped_early: bool,
}

/// Drives `workers` (one per task, `spec.workers` of them built by `make_worker`) and returns
/// the merged result.
///
/// An operation counts if it *completes* inside the measured window, whenever it started: for
/// a steady closed loop that is an unbiased count, whereas counting by start time would drop
/// about one operation per worker at each edge of the window.
pub async fn run<W, M>(spec: &LoadSpec, mut make_worker: M) -> anyhow::Result<LoadResult>
where
    W: Worker,
    M: FnMut(usize) -> W,
{
    anyhow::ensure!(spec.workers > 0, "a load run needs at least one worker");
    let issued = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let window_start = start + spec.warmup;
    let window_end = window_start + spec.window;

    let mut tasks = Vec::with_capacity(spec.workers);
    for index in 0..spec.workers {
        let mut worker = make_worker(index);
        let issued = Arc::clone(&issued);
        let spec = spec.clone();
        let mut latency = latency_histogram()?;
        tasks.push(tokio::spawn(async move {
            let mut ops = 0u64;
            let mut error = None;
            let mut last_done = None;
            let mut stopped_early = false;
            let mut seq = 0u64;
            loop {
                let began = Instant::now();
                if began >= window_end {
                    break;
                }
                if issued.fetch_add(1, Ordering::Relaxed) >= spec.max_ops {
                    stopped_early = true;
                    break;
                }
                let outcome = tokio::time::timeout(spec.op_timeout, worker.op(seq)).await;
                let done = Instant::now();
                match outcome {
                    Ok(Ok(())) => {
                        if done >= window_start && done < window_end {
                            let micros = u64::try_from(done.duration_since(began).as_micros())
                                .unwrap_or(u64::MAX);
                            latency.saturating_record(micros.max(1));
                            ops += 1;
                            last_done = Some(done);
                        }
                    }
                    Ok(Err(failure)) => {
                        error = Some(format!("{failure:#}"));
                        stopped_early = true;
                        break;
                    }
                    Err(_) => {
                        error = Some(format!("operation timed out after {:?}", spec.op_timeout));
                        stopped_early = true;
                        break;
                    }
                }
                seq += 1;
            }
            WorkerReport {
                ops,
                latency,
                error,
                last_done,
                stopped_early,
            }
        }));
    }

    let mut result = LoadResult {
        ops: 0,
        errors: 0,
        first_error: None,
        elapsed: spec.window,
        latency: latency_histogram()?,
    };
    let mut all_stopped_early = true;
    let mut last_done: Option<Instant> = None;
    for task in tasks {
        let report = task.await?;
        result.ops += report.ops;
        result.latency.add(&report.latency)?;
        if let Some(error) = report.error {
            result.errors += 1;
            result.first_error.get_or_insert(error);
        }
        all_stopped_early &= report.stopped_early;
        last_done = last_done.max(report.last_done);
    }
    // If every worker gave up before the window closed, the window effectively ended at the
    // last completion; dividing by the full window would understate the rate.
    if all_stopped_early {
        result.elapsed = last_done
            .map(|t| t.saturating_duration_since(window_start))
            .unwrap_or_default();
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Sleeper(Duration);

    impl Worker for Sleeper {
        async fn op(&mut self, _seq: u64) -> anyhow::Result<()> {
            tokio::time::sleep(self.0).await;
            Ok(())
        }
    }

    struct FailsAt(u64);

    impl Worker for FailsAt {
        async fn op(&mut self, seq: u64) -> anyhow::Result<()> {
            anyhow::ensure!(seq < self.0, "failed at {seq}");
            Ok(())
        }
    }

    fn spec(workers: usize, max_ops: u64) -> LoadSpec {
        LoadSpec {
            workers,
            warmup: Duration::from_millis(20),
            window: Duration::from_millis(200),
            max_ops,
            op_timeout: Duration::from_secs(5),
        }
    }

    #[tokio::test]
    async fn counts_operations_and_records_latency() {
        let result = run(&spec(4, u64::MAX), |_| Sleeper(Duration::from_millis(2)))
            .await
            .unwrap();
        assert!(result.ops > 0);
        assert_eq!(result.errors, 0);
        assert_eq!(result.latency.len(), result.ops);
        // Not a timing assertion: just that the histogram holds sleeps of at least 2 ms.
        assert!(result.latency.min() >= 1900);
    }

    #[tokio::test]
    async fn the_operation_cap_bounds_a_run() {
        let result = run(&spec(2, 10), |_| Sleeper(Duration::ZERO))
            .await
            .unwrap();
        assert!(result.ops <= 10);
    }

    struct Taker {
        tickets: Tickets,
        seen: Arc<std::sync::Mutex<Vec<u64>>>,
    }

    impl Worker for Taker {
        async fn op(&mut self, _seq: u64) -> anyhow::Result<()> {
            let ticket = self.tickets.take()?;
            tokio::task::yield_now().await;
            self.seen.lock().unwrap().push(ticket);
            Ok(())
        }
    }

    #[tokio::test]
    async fn an_exact_run_hands_out_every_ticket_once() {
        let tickets = Tickets::new(500);
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let spec = LoadSpec::exactly(7, 500, Duration::from_secs(10));
        let result = run(&spec, |_| Taker {
            tickets: tickets.clone(),
            seen: Arc::clone(&seen),
        })
        .await
        .unwrap();
        assert_eq!(result.ops, 500);
        assert_eq!(result.errors, 0);
        // Every worker stopped at the cap, so the rate is over the time actually taken.
        assert!(result.elapsed < Duration::from_secs(10));
        let mut seen = seen.lock().unwrap().clone();
        seen.sort_unstable();
        assert_eq!(seen, (0..500).collect::<Vec<_>>());
        assert!(tickets.take().is_err());
    }

    #[tokio::test]
    async fn an_error_stops_its_worker_and_is_reported() {
        let result = run(&spec(3, u64::MAX), |_| FailsAt(5)).await.unwrap();
        assert_eq!(result.errors, 3);
        assert_eq!(result.first_error.as_deref(), Some("failed at 5"));
    }
}
