//! Prometheus metrics of the API server, served on `/metrics`.
//!
//! Label values come from fixed sets (see [`request_verb`]), so no request can make the
//! server keep a new series. The deletion figures (`finale_*`, see
//! [`crate::insight::figures`]) are set on each scrape from the terminating index; their
//! label values are served resources and at most
//! [`crate::insight::figures::MAX_FINALIZER_SERIES`] finalizer names plus `other`, and the
//! families are cleared before each update so no stale series lingers.

use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use finale_store::StoreHealth;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

// Every label value is `&'static str` or a number: series are created from a fixed set, never
// from what a client sends.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    verb: &'static str,
    code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerbLabels {
    verb: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseLabels {
    name: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FinalizerLabels {
    finalizer: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PlanLabels {
    dependents: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    request_kind: &'static str,
}

/// The `verb` label of a request, from a fixed set as upstream's `CleanVerb`: the HTTP
/// method, `WATCH` for a watch, `APPLY` for a server-side apply, and `other` (upstream's
/// `OtherRequestMethod`) for any method outside the set, so junk methods add no series.
pub fn request_verb(method: &http::Method, watch: bool, apply: bool) -> &'static str {
    use http::Method;
    match *method {
        Method::GET if watch => "WATCH",
        Method::PATCH if apply => "APPLY",
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        Method::CONNECT => "CONNECT",
        _ => "other",
    }
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
    dropped: Family<KindLabels, Counter>,
    /// The `finale_*` deletion figures, without the `apiserver_` prefix.
    deletion_registry: Mutex<Registry>,
    terminating: Family<ResourceLabels, Gauge>,
    pending: Family<FinalizerLabels, Gauge>,
    unclaimed: Gauge,
    oldest_stuck: Gauge<f64, AtomicU64>,
    plans: Family<PlanLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Counts one deletion plan whose dependents were found in `dependents` (`collector`
    /// or `store`).
    pub fn count_plan(&self, dependents: &'static str) {
        self.plans.get_or_create(&PlanLabels { dependents }).inc();
    }

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

    /// client-go's `leader_election_master_status{name}` (with this registry's prefix): 1 while
    /// this replica runs the in-process controllers, 0 while it stands by.
    pub fn register_leader(&self, leader: &crate::controllers::leadership::LeaderFlag) {
        let mut registry = self
            .registry
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // The family's only series is the flag's own gauge, so the export follows the flag.
        let gauge = leader.0.clone();
        let family = Family::<LeaseLabels, Gauge, _>::new_with_constructor(move || gauge.clone());
        let _ = family.get_or_create(&LeaseLabels {
            name: crate::controllers::leadership::LEASE_NAME,
        });
        registry.register(
            "leader_election_master_status",
            "Whether this replica holds the controllers' Lease (1) or stands by (0)",
            family,
        );
    }

    /// `apiserver_controllers_fenced_writes_total`: controller writes refused because this
    /// replica no longer held the controllers' Lease ([`crate::registry::fence`]).
    pub fn register_fence(&self, fence: &crate::registry::fence::LeaseFence) {
        let mut registry = self
            .registry
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        registry.register(
            "controllers_fenced_writes",
            "Writes of the in-process controllers refused because this replica no longer held their Lease",
            fence.refused().clone(),
        );
    }

    /// `apiserver_terminated_watchers_total{group,resource}`: API watchers the watch cache
    /// closed because their client stopped reading.
    pub fn register_watch_cache(&self, cache: &crate::watch_cache::WatchCache) {
        let mut registry = self
            .registry
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        registry.register(
            "terminated_watchers",
            "Counter of watchers closed due to unresponsiveness broken by resource type.",
            cache.terminated_watchers().clone(),
        );
    }

    /// Upstream's CRD conversion webhook metric ([`crate::crd::conversion`]).
    pub fn register_conversion(&self, conversion: &crate::crd::conversion::ConversionMetrics) {
        let mut registry = self
            .registry
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        registry.register(
            "crd_conversion_webhook_duration_seconds",
            "CRD webhook conversion duration in seconds",
            conversion.duration.clone(),
        );
    }

    /// Upstream's admission webhook metrics ([`crate::admission::metrics`]).
    pub fn register_admission(&self, webhooks: &crate::admission::WebhookMetrics) {
        let mut registry = self
            .registry
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        registry.register(
            "admission_webhook_admission_duration_seconds",
            "Admission webhook latency in seconds, identified by name and broken out for each operation and API resource and type (validate or admit).",
            webhooks.duration.clone(),
        );
        registry.register(
            "admission_webhook_rejection_count",
            "Admission webhook rejection count, identified by name and broken out for each admission type (validating or admit) and operation. Additional labels specify an error type (calling_webhook_error or apiserver_internal_error if an error occurred; no_error otherwise) and optionally a non-zero rejection code if the webhook rejects the request with an HTTP status code (honored by the apiserver when the code is greater or equal to 400). Codes greater than 600 are truncated to 600, to keep the metrics cardinality bounded.",
            webhooks.rejections.clone(),
        );
        // prometheus-client appends `_total` to counters itself.
        registry.register(
            "validating_admission_policy_check",
            "Validation admission policy check total, labeled by policy and further identified by binding and enforcement action taken",
            webhooks.policy_checks.clone(),
        );
        registry.register(
            "validating_admission_policy_check_duration_seconds",
            "Validation admission latency for individual validation expressions in seconds, labeled by policy and further including binding and enforcement action taken",
            webhooks.policy_duration.clone(),
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
        let dropped = Family::<KindLabels, Counter>::default();
        registry.register(
            "dropped_requests",
            "Requests refused with 429 by --max-requests-inflight or \
             --max-mutating-requests-inflight, by request_kind (readOnly, mutating)",
            dropped.clone(),
        );
        let mut deletion_registry = Registry::default();
        let terminating = Family::<ResourceLabels, Gauge>::default();
        deletion_registry.register(
            "finale_terminating_objects",
            "Objects being deleted (deletionTimestamp set), by group/resource",
            terminating.clone(),
        );
        let pending = Family::<FinalizerLabels, Gauge>::default();
        deletion_registry.register(
            "finale_finalizer_pending_objects",
            "Objects being deleted that carry the finalizer (the 50 most common; the rest as finalizer=\"other\")",
            pending.clone(),
        );
        let unclaimed = Gauge::default();
        deletion_registry.register(
            "finale_unclaimed_finalizers",
            "Distinct finalizers on objects being deleted that no FinalizerClaim covers",
            unclaimed.clone(),
        );
        let oldest_stuck = Gauge::<f64, AtomicU64>::default();
        deletion_registry.register(
            "finale_oldest_stuck_object_age_seconds",
            "How long the oldest object held by an unclaimed finalizer or a dead claimed controller has been deleting; 0 when none",
            oldest_stuck.clone(),
        );
        let plans = Family::<PlanLabels, Counter>::default();
        deletion_registry.register(
            "finale_deletion_plans",
            "Deletion plans answered, by where their dependents were found: dependents=\"collector\" \
             (the garbage collector's graph, exactly at the plan's revision) or \"store\" (read \
             from the store: the graph was not at that revision)",
            plans.clone(),
        );
        let metrics = Metrics {
            registry: Mutex::new(registry),
            requests,
            latency,
            store_state,
            dropped,
            deletion_registry: Mutex::new(deletion_registry),
            terminating,
            pending,
            unclaimed,
            oldest_stuck,
            plans,
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

    /// Counts a request; `verb` comes from [`request_verb`].
    pub fn observe_request(&self, verb: &'static str, code: u16, elapsed: Duration) {
        self.requests
            .get_or_create(&RequestLabels { verb, code })
            .inc();
        self.latency
            .get_or_create(&VerbLabels { verb })
            .observe(elapsed.as_secs_f64());
    }

    /// Counts a request refused by an in-flight limit.
    pub fn observe_dropped(&self, request_kind: &'static str) {
        self.dropped
            .get_or_create(&KindLabels { request_kind })
            .inc();
    }

    /// Sets the `finale_*` deletion gauges, replacing every series they had.
    pub fn set_deletion_figures(&self, figures: &crate::insight::figures::Figures) {
        self.terminating.clear();
        for (resource, count) in &figures.terminating_by_resource {
            self.terminating
                .get_or_create(&ResourceLabels {
                    resource: resource.clone(),
                })
                .set(*count);
        }
        self.pending.clear();
        for (finalizer, count) in &figures.pending_by_finalizer {
            self.pending
                .get_or_create(&FinalizerLabels {
                    finalizer: finalizer.clone(),
                })
                .set(*count);
        }
        self.unclaimed.set(figures.unclaimed_finalizers);
        self.oldest_stuck.set(figures.oldest_stuck_age_seconds);
    }

    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        {
            let registry = self
                .registry
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            encode(&mut out, &registry)?;
        }
        // One exposition: the first registry's end marker goes, the second one's ends it.
        if let Some(stripped) = out.strip_suffix("# EOF\n") {
            out.truncate(stripped.len());
        }
        let deletion = self
            .deletion_registry
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        encode(&mut out, &deletion)?;
        Ok(out)
    }
}
