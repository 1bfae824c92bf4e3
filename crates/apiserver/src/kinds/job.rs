//! `batch/v1` Job: what kube-apiserver does to a Job on the way in — the defaults of
//! `SetDefaults_Job`, the selector and Pod labels of the Job strategy's `generateSelector`, and
//! the validation clients run into — and the names the Job controller and the API share
//! (labels, the tracking finalizer).

use serde_json::{Map, Value, json};

use crate::validation::FieldError;

/// On every Pod a Job creates until the controller has counted it (upstream's
/// `batch.kubernetes.io/job-tracking`): a Pod cannot disappear uncounted.
pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
/// The label that selects a Job's Pods, set to the Job's uid.
pub const CONTROLLER_UID_LABEL: &str = "batch.kubernetes.io/controller-uid";
/// The label that names a Pod's Job.
pub const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";
/// The older, unprefixed twins of the two labels, still set by 1.33.
const LEGACY_CONTROLLER_UID_LABEL: &str = "controller-uid";
const LEGACY_JOB_NAME_LABEL: &str = "job-name";

/// Restart policies a Job's Pod template may have.
const RESTART_POLICIES: [&str; 2] = ["OnFailure", "Never"];

/// Create-time defaults (`SetDefaults_Job`) and the generated selector (the strategy's
/// `generateSelector`, unless `spec.manualSelector` is true). Runs after the name and uid are
/// assigned.
pub fn default_job(object: &mut Value) {
    let name = crate::object::name(object).to_string();
    let uid = crate::object::uid(object).to_string();
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if spec.get("completions").is_none_or(Value::is_null)
        && spec.get("parallelism").is_none_or(Value::is_null)
    {
        spec.insert("completions".into(), json!(1));
        spec.insert("parallelism".into(), json!(1));
    }
    set_default(spec, "parallelism", json!(1));
    set_default(spec, "backoffLimit", json!(6));
    set_default(spec, "completionMode", json!("NonIndexed"));
    set_default(spec, "suspend", json!(false));
    set_default(spec, "podReplacementPolicy", json!("TerminatingOrFailed"));
    let manual = spec.get("manualSelector") == Some(&Value::Bool(true));
    if !manual {
        let template = spec.entry("template").or_insert_with(|| json!({}));
        if let Some(template) = template.as_object_mut() {
            let metadata = template.entry("metadata").or_insert_with(|| json!({}));
            if let Some(metadata) = metadata.as_object_mut() {
                let labels = metadata.entry("labels").or_insert_with(|| json!({}));
                if let Some(labels) = labels.as_object_mut() {
                    labels.insert(CONTROLLER_UID_LABEL.into(), json!(uid));
                    labels.insert(JOB_NAME_LABEL.into(), json!(name));
                    labels.insert(LEGACY_CONTROLLER_UID_LABEL.into(), json!(uid));
                    labels.insert(LEGACY_JOB_NAME_LABEL.into(), json!(name));
                }
            }
        }
        spec.insert(
            "selector".into(),
            json!({"matchLabels": {CONTROLLER_UID_LABEL: uid}}),
        );
    }
    // A Job without labels of its own takes its Pods' (upstream defaults them on every
    // decode, so a stored Job shows the generated ones).
    let template_labels = object.pointer("/spec/template/metadata/labels").cloned();
    let metadata = crate::object::metadata_mut(object);
    let has_labels = metadata
        .get("labels")
        .and_then(Value::as_object)
        .is_some_and(|labels| !labels.is_empty());
    if !has_labels && let Some(labels) = template_labels {
        metadata.insert("labels".into(), labels);
    }
}

fn set_default(spec: &mut Map<String, Value>, field: &str, value: Value) {
    if spec.get(field).is_none_or(Value::is_null) {
        spec.insert(field.into(), value);
    }
}

/// The checks of upstream's `ValidateJob` that clients meet: the restart policy, counts that
/// are not negative, a selector that selects the template's labels.
pub fn validate_job(object: &Value, _old: Option<&Value>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for field in [
        "parallelism",
        "completions",
        "backoffLimit",
        "activeDeadlineSeconds",
        "ttlSecondsAfterFinished",
    ] {
        if let Some(value) = object
            .pointer(&format!("/spec/{field}"))
            .and_then(Value::as_i64)
        {
            let minimum = if field == "activeDeadlineSeconds" {
                1
            } else {
                0
            };
            if value < minimum {
                let message = if minimum == 0 {
                    "must be greater than or equal to 0"
                } else {
                    "must be greater than 0"
                };
                errors.push(FieldError::invalid_literal(
                    &format!("spec.{field}"),
                    value.to_string(),
                    message,
                ));
            }
        }
    }
    let restart = object
        .pointer("/spec/template/spec/restartPolicy")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if restart.is_empty() {
        errors.push(FieldError::required(
            "spec.template.spec.restartPolicy",
            "valid values: \"OnFailure\", \"Never\"",
        ));
    } else if !RESTART_POLICIES.contains(&restart) {
        errors.push(FieldError::not_supported(
            "spec.template.spec.restartPolicy",
            restart,
            &RESTART_POLICIES,
        ));
    }
    if let Some(selector) = object.pointer("/spec/selector").and_then(Value::as_object) {
        let labels = object
            .pointer("/spec/template/metadata/labels")
            .and_then(Value::as_object);
        let selected = selector
            .get("matchLabels")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .all(|(key, value)| labels.and_then(|l| l.get(key)) == Some(value));
        if !selected {
            errors.push(FieldError::invalid_literal(
                "spec.template.metadata.labels",
                go_string_map(labels),
                "`selector` does not match template `labels`",
            ));
        }
    } else if object.pointer("/spec/manualSelector") == Some(&Value::Bool(true)) {
        errors.push(FieldError::required("spec.selector", ""));
    }
    errors
}

/// A label map as Go's `%v` prints a `map[string]string`: keys sorted.
fn go_string_map(labels: Option<&Map<String, Value>>) -> String {
    let mut pairs: Vec<String> = labels
        .into_iter()
        .flatten()
        .map(|(key, value)| format!("{key}:{}", value.as_str().unwrap_or_default()))
        .collect();
    pairs.sort();
    format!("map[{}]", pairs.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn created(spec: Value) -> Value {
        let mut job = json!({"metadata": {"name": "pi", "uid": "u-1"}, "spec": spec});
        default_job(&mut job);
        job
    }

    #[test]
    fn a_job_gets_upstreams_defaults_and_a_generated_selector() {
        let job = created(json!({"template": {"spec": {"restartPolicy": "Never"}}}));
        assert_eq!(job["spec"]["completions"], 1);
        assert_eq!(job["spec"]["parallelism"], 1);
        assert_eq!(job["spec"]["backoffLimit"], 6);
        assert_eq!(job["spec"]["completionMode"], "NonIndexed");
        assert_eq!(job["spec"]["suspend"], false);
        assert_eq!(job["spec"]["podReplacementPolicy"], "TerminatingOrFailed");
        assert_eq!(
            job["spec"]["selector"],
            json!({"matchLabels": {CONTROLLER_UID_LABEL: "u-1"}})
        );
        let labels = &job["spec"]["template"]["metadata"]["labels"];
        assert_eq!(labels[JOB_NAME_LABEL], "pi");
        assert_eq!(labels["controller-uid"], "u-1");
        assert_eq!(&job["metadata"]["labels"], labels);
        assert!(validate_job(&job, None).is_empty());
    }

    #[test]
    fn a_work_queue_job_keeps_completions_unset() {
        let job = created(json!({"parallelism": 3, "template": {"spec": {}}}));
        assert!(job["spec"].get("completions").is_none());
        assert_eq!(job["spec"]["parallelism"], 3);
    }

    #[test]
    fn bad_jobs_get_upstreams_messages() {
        let mut job = created(json!({"parallelism": -1,
            "template": {"spec": {"restartPolicy": "Always"}}}));
        job["spec"]["selector"] = json!({"matchLabels": {"app": "x"}});
        let messages: Vec<String> = validate_job(&job, None)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert!(
            messages.contains(
                &"spec.parallelism: Invalid value: -1: must be greater than or equal to 0"
                    .to_string()
            ),
            "{messages:?}"
        );
        assert!(
            messages.contains(&"spec.template.spec.restartPolicy: Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\"".to_string()),
            "{messages:?}"
        );
        assert!(
            messages
                .iter()
                .any(|m| m.ends_with("`selector` does not match template `labels`")),
            "{messages:?}"
        );
    }
}
