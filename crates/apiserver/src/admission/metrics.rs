//! Upstream's webhook metrics, by upstream's names: registered into the server's registry
//! (prefix `apiserver_`) by [`crate::metrics::Metrics::register_admission`].
//!
//! - `apiserver_admission_webhook_admission_duration_seconds{name,type,operation,rejected}`;
//! - `apiserver_admission_webhook_rejection_count{name,type,operation,error_type,rejection_code}`;
//! - `apiserver_validating_admission_policy_check_total{policy,policy_binding,enforcement_action}`;
//! - `apiserver_validating_admission_policy_check_duration_seconds{…the same labels}`.
//!
//! The rejection count is exported as a gauge that only grows: prometheus-client would name
//! a counter `…_count_total`, and scrapers look for upstream's name.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

/// Upstream's buckets for webhook latency: 5 ms to 2.5 s.
const BUCKETS: [f64; 7] = [0.005, 0.025, 0.1, 0.5, 1.0, 2.5, 10.0];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DurationLabels {
    pub name: String,
    pub r#type: &'static str,
    pub operation: &'static str,
    pub rejected: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RejectionLabels {
    pub name: String,
    pub r#type: &'static str,
    pub operation: &'static str,
    pub error_type: &'static str,
    pub rejection_code: u16,
}

/// Why a webhook rejected a request, as upstream's `error_type` label says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RejectionKind {
    /// The webhook answered with a denial (`no_error`).
    Denied,
    /// The webhook could not be called (`calling_webhook_error`).
    CallFailed,
    /// Something in this server failed (`apiserver_internal_error`).
    Internal,
}

impl RejectionKind {
    fn label(self) -> &'static str {
        match self {
            RejectionKind::Denied => "no_error",
            RejectionKind::CallFailed => "calling_webhook_error",
            RejectionKind::Internal => "apiserver_internal_error",
        }
    }
}

/// Upstream's buckets for policy checks: 0.5 µs to 1 s.
const POLICY_BUCKETS: [f64; 5] = [0.000_000_5, 0.001, 0.01, 0.1, 1.0];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabels {
    pub policy: String,
    pub policy_binding: String,
    pub enforcement_action: &'static str,
}

/// What a policy check did with the request (upstream's `enforcement_action`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyOutcome {
    Allow,
    Deny,
    Warn,
    Audit,
}

impl PolicyOutcome {
    fn label(self) -> &'static str {
        match self {
            PolicyOutcome::Allow => "allow",
            PolicyOutcome::Deny => "deny",
            PolicyOutcome::Warn => "warn",
            PolicyOutcome::Audit => "audit",
        }
    }
}

#[derive(Clone)]
pub struct WebhookMetrics {
    pub(crate) duration: Family<DurationLabels, Histogram>,
    pub(crate) rejections: Family<RejectionLabels, Gauge>,
    pub(crate) policy_checks: Family<PolicyLabels, Counter>,
    pub(crate) policy_duration: Family<PolicyLabels, Histogram>,
}

impl Default for WebhookMetrics {
    fn default() -> Self {
        WebhookMetrics {
            duration: Family::new_with_constructor(|| Histogram::new(BUCKETS)),
            rejections: Family::default(),
            policy_checks: Family::default(),
            policy_duration: Family::new_with_constructor(|| Histogram::new(POLICY_BUCKETS)),
        }
    }
}

impl std::fmt::Debug for WebhookMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookMetrics").finish_non_exhaustive()
    }
}

impl WebhookMetrics {
    pub fn observe(
        &self,
        name: &str,
        hook_type: &'static str,
        operation: &'static str,
        rejected: bool,
        elapsed: Duration,
    ) {
        self.duration
            .get_or_create(&DurationLabels {
                name: name.to_string(),
                r#type: hook_type,
                operation,
                rejected: if rejected { "true" } else { "false" },
            })
            .observe(elapsed.as_secs_f64());
    }

    pub fn reject(
        &self,
        name: &str,
        hook_type: &'static str,
        operation: &'static str,
        kind: RejectionKind,
        code: u16,
    ) {
        self.rejections
            .get_or_create(&RejectionLabels {
                name: name.to_string(),
                r#type: hook_type,
                operation,
                error_type: kind.label(),
                rejection_code: code,
            })
            .inc();
    }

    /// One policy check's outcome and time (upstream `ObserveAdmission`/`ObserveRejection`/
    /// `ObserveWarn`/`ObserveAudit`; upstream classifies errors but labels none).
    pub fn observe_policy(
        &self,
        policy: &str,
        binding: &str,
        outcome: PolicyOutcome,
        elapsed: Duration,
    ) {
        let labels = PolicyLabels {
            policy: policy.to_string(),
            policy_binding: binding.to_string(),
            enforcement_action: outcome.label(),
        };
        self.policy_checks.get_or_create(&labels).inc();
        self.policy_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }
}
