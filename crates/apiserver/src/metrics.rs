//! Prometheus metrics of the API server, served on `/metrics`.

use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
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

pub struct Metrics {
    registry: Mutex<Registry>,
    requests: Family<RequestLabels, Counter>,
    latency: Family<VerbLabels, Histogram>,
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
        registry.register(
            "garbage_collector_graph_rebuilds",
            "Times the garbage collector fell behind the change stream and rebuilt its graph from a fresh list",
            gc.graph_rebuilds.clone(),
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
        Metrics {
            registry: Mutex::new(registry),
            requests,
            latency,
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
