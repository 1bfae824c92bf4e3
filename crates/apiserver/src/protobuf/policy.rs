//! policy/v1: PodDisruptionBudget.

use k8s_pb::api::policy::v1 as policy;

use super::json::{Converted, convert};
use super::meta::{condition, label_selector, object_meta};

pub(super) fn pod_disruption_budget(budget: policy::PodDisruptionBudget) -> Converted {
    convert!(budget, policy::PodDisruptionBudget {
        metadata => value_message("metadata", object_meta),
        spec => value_message("spec", pod_disruption_budget_spec),
        status => value_message("status", pod_disruption_budget_status),
    })
}

fn pod_disruption_budget_spec(spec: policy::PodDisruptionBudgetSpec) -> Converted {
    convert!(spec, policy::PodDisruptionBudgetSpec {
        min_available => pointer_int_or_string("minAvailable"),
        selector => pointer_message("selector", label_selector),
        max_unavailable => pointer_int_or_string("maxUnavailable"),
        unhealthy_pod_eviction_policy => pointer("unhealthyPodEvictionPolicy"),
    })
}

fn pod_disruption_budget_status(status: policy::PodDisruptionBudgetStatus) -> Converted {
    convert!(status, policy::PodDisruptionBudgetStatus {
        observed_generation => non_zero("observedGeneration"),
        disrupted_pods => time_map("disruptedPods"),
        disruptions_allowed => always("disruptionsAllowed"),
        current_healthy => always("currentHealthy"),
        desired_healthy => always("desiredHealthy"),
        expected_pods => always("expectedPods"),
        conditions => list("conditions", condition),
    })
}
