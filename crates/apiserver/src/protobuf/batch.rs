//! batch/v1: Job, CronJob.

use k8s_pb::api::batch::v1 as batch;

use super::core_v1::object_reference;
use super::json::{Converted, convert};
use super::meta::{label_selector, object_meta};
use super::pod::pod_template_spec;

pub(super) fn job(job: batch::Job) -> Converted {
    convert!(job, batch::Job {
        metadata => value_message("metadata", object_meta),
        spec => value_message("spec", job_spec),
        status => value_message("status", job_status),
    })
}

fn job_spec(spec: batch::JobSpec) -> Converted {
    convert!(spec, batch::JobSpec {
        parallelism => pointer("parallelism"),
        completions => pointer("completions"),
        active_deadline_seconds => pointer("activeDeadlineSeconds"),
        pod_failure_policy => pointer_message("podFailurePolicy", pod_failure_policy),
        success_policy => pointer_message("successPolicy", success_policy),
        backoff_limit => pointer("backoffLimit"),
        backoff_limit_per_index => pointer("backoffLimitPerIndex"),
        max_failed_indexes => pointer("maxFailedIndexes"),
        selector => pointer_message("selector", label_selector),
        manual_selector => pointer("manualSelector"),
        template => value_message("template", pod_template_spec),
        ttl_seconds_after_finished => pointer("ttlSecondsAfterFinished"),
        completion_mode => pointer("completionMode"),
        suspend => pointer("suspend"),
        pod_replacement_policy => pointer("podReplacementPolicy"),
        managed_by => pointer("managedBy"),
    })
}

fn pod_failure_policy(policy: batch::PodFailurePolicy) -> Converted {
    convert!(policy, batch::PodFailurePolicy {
        rules => always_list("rules", pod_failure_policy_rule),
    })
}

fn pod_failure_policy_rule(rule: batch::PodFailurePolicyRule) -> Converted {
    convert!(rule, batch::PodFailurePolicyRule {
        action => always("action"),
        on_exit_codes => pointer_message("onExitCodes", pod_failure_policy_on_exit_codes),
        on_pod_conditions => list("onPodConditions", pod_failure_policy_on_pod_conditions),
    })
}

fn pod_failure_policy_on_exit_codes(
    requirement: batch::PodFailurePolicyOnExitCodesRequirement,
) -> Converted {
    convert!(requirement, batch::PodFailurePolicyOnExitCodesRequirement {
        container_name => pointer("containerName"),
        operator => always("operator"),
        values => always_scalars("values"),
    })
}

fn pod_failure_policy_on_pod_conditions(
    pattern: batch::PodFailurePolicyOnPodConditionsPattern,
) -> Converted {
    convert!(pattern, batch::PodFailurePolicyOnPodConditionsPattern {
        r#type => always("type"),
        status => always("status"),
    })
}

fn success_policy(policy: batch::SuccessPolicy) -> Converted {
    convert!(policy, batch::SuccessPolicy {
        rules => always_list("rules", success_policy_rule),
    })
}

fn success_policy_rule(rule: batch::SuccessPolicyRule) -> Converted {
    convert!(rule, batch::SuccessPolicyRule {
        succeeded_indexes => pointer("succeededIndexes"),
        succeeded_count => pointer("succeededCount"),
    })
}

fn job_status(status: batch::JobStatus) -> Converted {
    convert!(status, batch::JobStatus {
        conditions => list("conditions", job_condition),
        start_time => time("startTime"),
        completion_time => time("completionTime"),
        active => non_zero("active"),
        succeeded => non_zero("succeeded"),
        failed => non_zero("failed"),
        terminating => pointer("terminating"),
        completed_indexes => non_zero("completedIndexes"),
        failed_indexes => pointer("failedIndexes"),
        uncounted_terminated_pods =>
            pointer_message("uncountedTerminatedPods", uncounted_terminated_pods),
        ready => pointer("ready"),
    })
}

fn job_condition(condition: batch::JobCondition) -> Converted {
    convert!(condition, batch::JobCondition {
        r#type => always("type"),
        status => always("status"),
        last_probe_time => time("lastProbeTime"),
        last_transition_time => time("lastTransitionTime"),
        reason => non_zero("reason"),
        message => non_zero("message"),
    })
}

fn uncounted_terminated_pods(pods: batch::UncountedTerminatedPods) -> Converted {
    convert!(pods, batch::UncountedTerminatedPods {
        succeeded => scalars("succeeded"),
        failed => scalars("failed"),
    })
}

pub(super) fn cron_job(cron_job: batch::CronJob) -> Converted {
    convert!(cron_job, batch::CronJob {
        metadata => value_message("metadata", object_meta),
        spec => value_message("spec", cron_job_spec),
        status => value_message("status", cron_job_status),
    })
}

fn cron_job_spec(spec: batch::CronJobSpec) -> Converted {
    convert!(spec, batch::CronJobSpec {
        schedule => always("schedule"),
        time_zone => pointer("timeZone"),
        starting_deadline_seconds => pointer("startingDeadlineSeconds"),
        concurrency_policy => non_zero("concurrencyPolicy"),
        suspend => pointer("suspend"),
        job_template => value_message("jobTemplate", job_template_spec),
        successful_jobs_history_limit => pointer("successfulJobsHistoryLimit"),
        failed_jobs_history_limit => pointer("failedJobsHistoryLimit"),
    })
}

fn job_template_spec(template: batch::JobTemplateSpec) -> Converted {
    convert!(template, batch::JobTemplateSpec {
        metadata => value_message("metadata", object_meta),
        spec => value_message("spec", job_spec),
    })
}

fn cron_job_status(status: batch::CronJobStatus) -> Converted {
    convert!(status, batch::CronJobStatus {
        active => list("active", object_reference),
        last_schedule_time => time("lastScheduleTime"),
        last_successful_time => time("lastSuccessfulTime"),
    })
}
