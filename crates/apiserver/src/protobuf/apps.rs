//! apps/v1: Deployment and ReplicaSet.

use k8s_pb::api::apps::v1 as apps;

use super::json::{Converted, convert};
use super::meta::{label_selector, object_meta};
use super::pod::pod_template_spec;

pub(super) fn deployment(deployment: apps::Deployment) -> Converted {
    convert!(deployment, apps::Deployment {
        metadata => value_message("metadata", object_meta),
        spec => value_message("spec", deployment_spec),
        status => value_message("status", deployment_status),
    })
}

fn deployment_spec(spec: apps::DeploymentSpec) -> Converted {
    convert!(spec, apps::DeploymentSpec {
        replicas => pointer("replicas"),
        selector => pointer_message("selector", label_selector),
        template => value_message("template", pod_template_spec),
        strategy => value_message("strategy", deployment_strategy),
        min_ready_seconds => non_zero("minReadySeconds"),
        revision_history_limit => pointer("revisionHistoryLimit"),
        paused => non_zero("paused"),
        progress_deadline_seconds => pointer("progressDeadlineSeconds"),
    })
}

fn deployment_strategy(strategy: apps::DeploymentStrategy) -> Converted {
    convert!(strategy, apps::DeploymentStrategy {
        r#type => non_zero("type"),
        rolling_update => pointer_message("rollingUpdate", rolling_update_deployment),
    })
}

fn rolling_update_deployment(update: apps::RollingUpdateDeployment) -> Converted {
    convert!(update, apps::RollingUpdateDeployment {
        max_unavailable => pointer_int_or_string("maxUnavailable"),
        max_surge => pointer_int_or_string("maxSurge"),
    })
}

fn deployment_status(status: apps::DeploymentStatus) -> Converted {
    convert!(status, apps::DeploymentStatus {
        observed_generation => non_zero("observedGeneration"),
        replicas => non_zero("replicas"),
        updated_replicas => non_zero("updatedReplicas"),
        ready_replicas => non_zero("readyReplicas"),
        available_replicas => non_zero("availableReplicas"),
        unavailable_replicas => non_zero("unavailableReplicas"),
        terminating_replicas => pointer("terminatingReplicas"),
        conditions => list("conditions", deployment_condition),
        collision_count => pointer("collisionCount"),
    })
}

fn deployment_condition(condition: apps::DeploymentCondition) -> Converted {
    convert!(condition, apps::DeploymentCondition {
        r#type => always("type"),
        status => always("status"),
        last_update_time => time("lastUpdateTime"),
        last_transition_time => time("lastTransitionTime"),
        reason => non_zero("reason"),
        message => non_zero("message"),
    })
}

pub(super) fn replica_set(replica_set: apps::ReplicaSet) -> Converted {
    convert!(replica_set, apps::ReplicaSet {
        metadata => value_message("metadata", object_meta),
        spec => value_message("spec", replica_set_spec),
        status => value_message("status", replica_set_status),
    })
}

fn replica_set_spec(spec: apps::ReplicaSetSpec) -> Converted {
    convert!(spec, apps::ReplicaSetSpec {
        replicas => pointer("replicas"),
        min_ready_seconds => non_zero("minReadySeconds"),
        selector => pointer_message("selector", label_selector),
        template => value_message("template", pod_template_spec),
    })
}

fn replica_set_status(status: apps::ReplicaSetStatus) -> Converted {
    convert!(status, apps::ReplicaSetStatus {
        replicas => always("replicas"),
        fully_labeled_replicas => non_zero("fullyLabeledReplicas"),
        ready_replicas => non_zero("readyReplicas"),
        available_replicas => non_zero("availableReplicas"),
        terminating_replicas => pointer("terminatingReplicas"),
        observed_generation => non_zero("observedGeneration"),
        conditions => list("conditions", replica_set_condition),
    })
}

fn replica_set_condition(condition: apps::ReplicaSetCondition) -> Converted {
    convert!(condition, apps::ReplicaSetCondition {
        r#type => always("type"),
        status => always("status"),
        last_transition_time => time("lastTransitionTime"),
        reason => non_zero("reason"),
        message => non_zero("message"),
    })
}
