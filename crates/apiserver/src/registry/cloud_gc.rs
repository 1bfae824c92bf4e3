//! Write-time checks of the external-resource GC annotations on `CloudCluster`s
//! (`cloudclusters.cloud.finale.dev`), the one custom resource whose metadata the server
//! validates itself.
//!
//! A CRD's schema cannot reach `metadata.annotations` (Kubernetes lets root CEL rules read
//! only `metadata.name` and `generateName`), and an unknown GC task must be refused before it
//! is stored, never ignored at deletion time. On a real Kubernetes cluster this is a
//! validating webhook's or a `ValidatingAdmissionPolicy`'s job; Finale evaluates both, but a
//! check the product depends on must not hinge on an object a cluster admin can delete, so
//! the registry runs this hook for that one kind, next to the schema validation. The operator
//! checks the same rules again and reports them in the `Ready` condition, for servers without
//! this hook.
//!
//! Assumption: the task names here match `finale_operator_cloud_gc::annotations::Task`; the
//! end-to-end suite writes every task the operator knows through this server, which fails if
//! they drift apart.

use serde_json::Value;

use crate::resources::ValidationHook;
use crate::validation::FieldError;

pub const GROUP: &str = "cloud.finale.dev";
pub const KIND: &str = "CloudCluster";
const GC_ANNOTATION: &str = "cloud.finale.dev/external-resource-gc";
const TASKS_ANNOTATION: &str = "cloud.finale.dev/external-resource-gc-tasks";
const TASKS: [&str; 6] = [
    "load-balancer",
    "target-group",
    "security-group",
    "network-interface",
    "elastic-ip",
    "volume",
];

/// The extra validation for custom resources of `group`/`kind`, if any.
pub fn hook_for(group: &str, kind: &str) -> Option<ValidationHook> {
    (group == GROUP && kind == KIND).then_some(validate as ValidationHook)
}

fn field(annotation: &str) -> String {
    format!("metadata.annotations[{annotation}]")
}

/// The GC annotations of a CloudCluster: the switch is `"true"` or `"false"`; the tasks are a
/// comma-separated list of known tasks.
pub fn validate(object: &Value, _old: Option<&Value>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let annotation = |key: &str| {
        object
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(key))
            .and_then(Value::as_str)
    };
    if let Some(switch) = annotation(GC_ANNOTATION)
        && !matches!(switch.trim(), "true" | "false")
    {
        errors.push(FieldError::not_supported(
            &field(GC_ANNOTATION),
            switch,
            &["false", "true"],
        ));
    }
    if let Some(tasks) = annotation(TASKS_ANNOTATION) {
        let unknown: Vec<String> = tasks
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty() && !TASKS.contains(t))
            .map(|t| format!("{t:?}"))
            .collect();
        if !unknown.is_empty() {
            errors.push(FieldError::invalid(
                &field(TASKS_ANNOTATION),
                tasks,
                &format!(
                    "unknown external-resource GC task{} {}: the tasks are {} (none means every task but volume)",
                    if unknown.len() == 1 { "" } else { "s" },
                    unknown.join(", "),
                    TASKS.join(", ")
                ),
            ));
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn with(annotations: Value) -> Value {
        json!({"metadata": {"name": "c1", "annotations": annotations}})
    }

    #[test]
    fn unknown_tasks_and_non_boolean_switches_are_refused() {
        assert!(validate(&with(json!({})), None).is_empty());
        assert!(
            validate(
                &with(json!({TASKS_ANNOTATION: "load-balancer, volume", GC_ANNOTATION: "false"})),
                None
            )
            .is_empty()
        );
        let errors = validate(
            &with(json!({TASKS_ANNOTATION: "load-balancer,volumes"})),
            None,
        );
        assert_eq!(errors.len(), 1);
        let body = errors[0].body();
        assert!(
            body.contains("unknown external-resource GC task \"volumes\""),
            "{body}"
        );
        let cause = errors[0].to_status_cause();
        assert_eq!(cause["field"], field(TASKS_ANNOTATION), "{cause}");
        let errors = validate(&with(json!({GC_ANNOTATION: "off"})), None);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(hook_for("cloud.finale.dev", "CloudCluster").is_some());
        assert!(hook_for("finale.dev", "Database").is_none());
    }
}
