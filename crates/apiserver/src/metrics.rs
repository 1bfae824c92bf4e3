//! Prometheus metrics of the API server, served on `/metrics`.

use std::sync::Mutex;
use std::time::Duration;

use finale_store::StoreHealth;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    verb: String,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerbLabels {
    verb: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

/// Every state [`StoreHealth::name`] can report, so each series exists from the start.
const STORE_STATES: [&str; 3] = ["serving", "refusing-writes", "closed"];

pub struct Metrics {
    registry: Mutex<Registry>,
    requests: Family<RequestLabels, Counter>,
    latency: Family<VerbLabels, Histogram>,
    store_state: Family<StateLabels, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Adds the garbage collector's gauges (`apiserver_garbage_collector_*`).
    pub fn register_garbage_collector(&self, gc: &crate::controllers::gc::GcMetrics) {
        let mut registry = self
            .registry
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        registry.register(
            "garbage_collector_graph_nodes",
            "Objects (and owners not yet seen) in the garbage collector's ownership graph",
            gc.graph_nodes.clone(),
        );
        registry.register(
            "garbage_collector_queue_depth",
            "Items waiting for the garbage collector's workers",
            gc.queue_depth.clone(),
        );
        registry.register(
            "garbage_collector_deleted_objects",
            "Objects the garbage collector has deleted since the server started",
            gc.deleted.clone(),
        );
    }

    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("apiserver");
        let requests = Family::<RequestLabels, Counter>::default();
        // prometheus-client appends `_total` to counters itself.
        registry.register(
            "request",
            "Requests served, by verb and HTTP code",
            requests.clone(),
        );
        let latency = Family::<VerbLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0005, 2.0, 16))
        });
        registry.register(
            "request_duration_seconds",
            "Time to the response headers, by verb",
            latency.clone(),
        );
        let store_state = Family::<StateLabels, Gauge>::default();
        registry.register(
            "store_state",
            "1 for the store's current state (serving, refusing-writes, closed), 0 for the others",
            store_state.clone(),
        );
        let metrics = Metrics {
            registry: Mutex::new(registry),
            requests,
            latency,
            store_state,
        };
        metrics.set_store_health(&StoreHealth::Serving);
        metrics
    }

    /// Records the store's state in `apiserver_store_state`.
    pub fn set_store_health(&self, health: &StoreHealth) {
        for state in STORE_STATES {
            self.store_state
                .get_or_create(&StateLabels { state })
                .set(i64::from(state == health.name()));
        }
    }

    pub fn observe_request(&self, verb: &str, code: u16, elapsed: Duration) {
        self.requests
            .get_or_create(&RequestLabels {
                verb: verb.to_string(),
                code: code.to_string(),
            })
            .inc();
        self.latency
            .get_or_create(&VerbLabels {
                verb: verb.to_string(),
            })
            .observe(elapsed.as_secs_f64());
    }

    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let registry = self
            .registry
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut out = String::new();
        encode(&mut out, &registry)?;
        Ok(out)
    }
}
