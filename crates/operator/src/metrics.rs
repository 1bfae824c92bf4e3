//! Prometheus metrics of the operators, and the small HTTP endpoint that serves them.
//!
//! Every series carries a `controller` label, so several operators in one process (`finale
//! operator all`) share one registry and one `/metrics` endpoint.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use tokio_util::sync::CancellationToken;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FinalizerLabels {
    pub controller: String,
    pub finalizer: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn duration_histogram() -> Histogram {
    // 1 ms to about 65 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// The operators' metrics; one instance per process.
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ControllerLabels, Counter>,
    reconcile_errors: Family<ControllerLabels, Counter>,
    finalizer_failures: Family<FinalizerLabels, Counter>,
    claim_write_failures: Family<ControllerLabels, Counter>,
    terminating: Family<ControllerLabels, Gauge>,
    leader: Family<ControllerLabels, Gauge>,
    backoff_objects: Family<ControllerLabels, Gauge>,
    reconcile_duration: HistogramFamily<ControllerLabels>,
    cleanup_duration: HistogramFamily<FinalizerLabels>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let metrics = Metrics {
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            finalizer_failures: Family::default(),
            claim_write_failures: Family::default(),
            terminating: Family::default(),
            leader: Family::default(),
            backoff_objects: Family::default(),
            reconcile_duration: Family::new_with_constructor(duration_histogram),
            cleanup_duration: Family::new_with_constructor(duration_histogram),
            registry: Registry::default(),
        };
        // prometheus-client appends `_total` to counters and the unit to histograms.
        registry.register(
            "reconcile",
            "Reconciliations run",
            metrics.reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Reconciliations that failed and will be retried",
            metrics.reconcile_errors.clone(),
        );
        registry.register(
            "finalizer_execution_failures",
            "Cleanup steps that failed, by finalizer",
            metrics.finalizer_failures.clone(),
        );
        registry.register(
            "finalizer_claim_write_failures",
            "Attempts to write the controller's FinalizerClaims that failed (they are retried)",
            metrics.claim_write_failures.clone(),
        );
        registry.register(
            "terminating_objects",
            "Objects with a deletionTimestamp that still carry one of the controller's finalizers",
            metrics.terminating.clone(),
        );
        registry.register(
            "leader",
            "1 while this process holds the controller's leader Lease",
            metrics.leader.clone(),
        );
        registry.register(
            "backoff_objects",
            "Objects whose last reconcile failed and whose retry is being paced by the backoff",
            metrics.backoff_objects.clone(),
        );
        registry.register_with_unit(
            "reconcile_duration",
            "Time spent in one reconciliation",
            Unit::Seconds,
            metrics.reconcile_duration.clone(),
        );
        registry.register_with_unit(
            "cleanup_duration",
            "Time spent in one cleanup step, by finalizer",
            Unit::Seconds,
            metrics.cleanup_duration.clone(),
        );
        Metrics {
            registry,
            ..metrics
        }
    }

    fn controller(name: &str) -> ControllerLabels {
        ControllerLabels {
            controller: name.to_string(),
        }
    }

    fn finalizer(controller: &str, finalizer: &str) -> FinalizerLabels {
        FinalizerLabels {
            controller: controller.to_string(),
            finalizer: finalizer.to_string(),
        }
    }

    /// One failed attempt to write the controller's `FinalizerClaim`s.
    pub fn claim_write_failed(&self, controller: &str) {
        self.claim_write_failures
            .get_or_create(&Self::controller(controller))
            .inc();
    }

    pub fn reconciled(&self, controller: &str, elapsed: Duration, failed: bool) {
        let labels = Self::controller(controller);
        self.reconciles.get_or_create(&labels).inc();
        if failed {
            self.reconcile_errors.get_or_create(&labels).inc();
        }
        self.reconcile_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    pub fn cleanup_ran(&self, controller: &str, finalizer: &str, elapsed: Duration, failed: bool) {
        let labels = Self::finalizer(controller, finalizer);
        if failed {
            self.finalizer_failures.get_or_create(&labels).inc();
        }
        self.cleanup_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    pub fn set_terminating(&self, controller: &str, count: usize) {
        self.terminating
            .get_or_create(&Self::controller(controller))
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    pub fn set_leader(&self, controller: &str, leading: bool) {
        self.leader
            .get_or_create(&Self::controller(controller))
            .set(i64::from(leading));
    }

    pub fn set_backoff_objects(&self, controller: &str, count: usize) {
        self.backoff_objects
            .get_or_create(&Self::controller(controller))
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut text = String::new();
        encode(&mut text, &self.registry)?;
        Ok(text)
    }
}

async fn metrics_page(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    match metrics.encode() {
        Ok(text) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(error) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding the metrics failed: {error}"),
        )
            .into_response(),
    }
}

/// Serves `/metrics` and `/healthz` on `listener` until `shutdown` fires, in a spawned task.
/// The caller binds the listener, so that it can name its own flag when the address is taken.
pub fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> std::io::Result<SocketAddr> {
    let bound = listener.local_addr()?;
    let app = Router::new()
        .route("/metrics", get(metrics_page))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(metrics);
    tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await;
        if let Err(error) = served {
            tracing::warn!(%error, "the metrics endpoint stopped");
        }
    });
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exposition_uses_the_documented_names() {
        let metrics = Metrics::new();
        metrics.reconciled("database", Duration::from_millis(3), true);
        metrics.cleanup_ran(
            "database",
            "finale.dev/database",
            Duration::from_millis(2),
            true,
        );
        metrics.set_terminating("database", 4);
        metrics.set_backoff_objects("database", 2);
        let text = metrics.encode().expect("encode");
        for line in [
            "reconcile_total{controller=\"database\"} 1",
            "reconcile_errors_total{controller=\"database\"} 1",
            "finalizer_execution_failures_total{controller=\"database\",finalizer=\"finale.dev/database\"} 1",
            "terminating_objects{controller=\"database\"} 4",
            "backoff_objects{controller=\"database\"} 2",
            "reconcile_duration_seconds_count{controller=\"database\"} 1",
            "cleanup_duration_seconds_count{controller=\"database\",finalizer=\"finale.dev/database\"} 1",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }
}
