//! autoscaling/v1: HorizontalPodAutoscaler, which `kubectl autoscale` sends.

use k8s_pb::api::autoscaling::v1 as autoscaling;

use super::json::{Converted, convert};
use super::meta::object_meta;

pub(super) fn horizontal_pod_autoscaler(
    autoscaler: autoscaling::HorizontalPodAutoscaler,
) -> Converted {
    convert!(autoscaler, autoscaling::HorizontalPodAutoscaler {
        metadata => value_message("metadata", object_meta),
        spec => value_message("spec", horizontal_pod_autoscaler_spec),
        status => value_message("status", horizontal_pod_autoscaler_status),
    })
}

fn horizontal_pod_autoscaler_spec(spec: autoscaling::HorizontalPodAutoscalerSpec) -> Converted {
    convert!(spec, autoscaling::HorizontalPodAutoscalerSpec {
        scale_target_ref => value_message("scaleTargetRef", cross_version_object_reference),
        min_replicas => pointer("minReplicas"),
        max_replicas => always("maxReplicas"),
        target_cpu_utilization_percentage => pointer("targetCPUUtilizationPercentage"),
    })
}

fn cross_version_object_reference(
    reference: autoscaling::CrossVersionObjectReference,
) -> Converted {
    convert!(reference, autoscaling::CrossVersionObjectReference {
        kind => always("kind"),
        name => always("name"),
        api_version => non_zero("apiVersion"),
    })
}

fn horizontal_pod_autoscaler_status(
    status: autoscaling::HorizontalPodAutoscalerStatus,
) -> Converted {
    convert!(status, autoscaling::HorizontalPodAutoscalerStatus {
        observed_generation => pointer("observedGeneration"),
        last_scale_time => time("lastScaleTime"),
        current_replicas => always("currentReplicas"),
        desired_replicas => always("desiredReplicas"),
        current_cpu_utilization_percentage => pointer("currentCPUUtilizationPercentage"),
    })
}
