//! HorizontalPodAutoscaler: `autoscaling/v2` is stored and `autoscaling/v1` is a view of the
//! same objects, as upstream serves both from one store. v1 knows one metric, the CPU
//! utilization target; what v2 holds beyond it travels in annotations on the v1 form, as
//! upstream's conversion keeps it, so an update through v1 loses nothing.
//!
//! Finale runs no autoscaler: HPAs are stored and served, and their status is whatever
//! clients write.
//!
//! # Caveats
//! - The annotations carry the v2 form of the metrics, conditions and behaviour; upstream
//!   writes its metrics annotation in the older v2beta1 shape. Only Finale reads them back.

use serde_json::{Map, Value, json};

/// Metrics of v2 besides the CPU utilization target (upstream's `MetricSpecsAnnotation`).
const METRICS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/metrics";
/// The v2 status's current metrics besides CPU utilization.
const CURRENT_METRICS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/current-metrics";
/// The v2 status conditions.
const CONDITIONS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/conditions";
/// The v2 scaling behaviour.
const BEHAVIOR_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/behavior";

/// The `apiVersion` of the stored form.
pub const STORED_API_VERSION: &str = "autoscaling/v2";
/// The `apiVersion` of the v1 view.
pub const V1_API_VERSION: &str = "autoscaling/v1";

/// Upstream's default target when an HPA names no metric.
const DEFAULT_CPU_UTILIZATION: i64 = 80;

fn is_cpu_utilization(metric: &Value) -> bool {
    metric.get("type").and_then(Value::as_str) == Some("Resource")
        && metric.pointer("/resource/name").and_then(Value::as_str) == Some("cpu")
        && metric
            .pointer("/resource/target/type")
            .and_then(Value::as_str)
            == Some("Utilization")
}

fn is_cpu_current(metric: &Value) -> bool {
    metric.get("type").and_then(Value::as_str) == Some("Resource")
        && metric.pointer("/resource/name").and_then(Value::as_str) == Some("cpu")
        && metric
            .pointer("/resource/current/averageUtilization")
            .is_some()
}

/// The spec fields v1 and v2 share, and the status fields.
const SHARED_SPEC_FIELDS: [&str; 3] = ["scaleTargetRef", "minReplicas", "maxReplicas"];
const SHARED_STATUS_FIELDS: [&str; 4] = [
    "observedGeneration",
    "lastScaleTime",
    "currentReplicas",
    "desiredReplicas",
];

/// The `fields` of `from` that are present, copied.
fn copied(from: &Value, fields: &[&str]) -> Map<String, Value> {
    fields
        .iter()
        .filter_map(|field| Some(((*field).to_string(), from.get(*field)?.clone())))
        .collect()
}

/// Splits a v2 metric list (`spec.metrics` or `status.currentMetrics`) into the CPU
/// utilization v1 shows, read at `value` in the matching metric, and the rest.
fn split_cpu(
    metrics: Option<&Value>,
    is_cpu: fn(&Value) -> bool,
    value: &str,
) -> (Option<Value>, Vec<Value>) {
    let metrics = metrics
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let (cpu, others): (Vec<Value>, Vec<Value>) = metrics.into_iter().partition(is_cpu);
    let utilization = cpu
        .first()
        .and_then(|metric| metric.pointer(value))
        .cloned();
    (utilization, others)
}

fn set_annotation(object: &mut Value, key: &str, value: &Value) {
    let Some(map) = object.as_object_mut() else {
        return;
    };
    let metadata = map.entry("metadata").or_insert_with(|| json!({}));
    if let Some(metadata) = metadata.as_object_mut()
        && let Some(annotations) = metadata
            .entry("annotations")
            .or_insert_with(|| json!({}))
            .as_object_mut()
    {
        annotations.insert(key.into(), Value::String(value.to_string()));
    }
}

fn drop_empty_annotations(object: &mut Value) {
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut)
        && metadata
            .get("annotations")
            .and_then(Value::as_object)
            .is_some_and(Map::is_empty)
    {
        metadata.remove("annotations");
    }
}

fn decode(text: Option<Value>) -> Option<Value> {
    text.as_ref()
        .and_then(Value::as_str)
        .and_then(|text| serde_json::from_str(text).ok())
}

/// A stored (v2) HorizontalPodAutoscaler as `autoscaling/v1` serves it.
pub fn v2_to_v1(mut object: Value) -> Value {
    let spec = object.get_mut("spec").map(Value::take).unwrap_or(json!({}));
    let status = object.get_mut("status").map(Value::take);
    let mut v1_spec = copied(&spec, &SHARED_SPEC_FIELDS);
    let (target, others) = split_cpu(
        spec.get("metrics"),
        is_cpu_utilization,
        "/resource/target/averageUtilization",
    );
    if let Some(target) = target {
        v1_spec.insert("targetCPUUtilizationPercentage".into(), target);
    }
    if !others.is_empty() {
        set_annotation(&mut object, METRICS_ANNOTATION, &json!(others));
    }
    if let Some(behavior) = spec.get("behavior").filter(|b| !b.is_null()) {
        set_annotation(&mut object, BEHAVIOR_ANNOTATION, behavior);
    }

    let mut v1_status = Map::new();
    if let Some(status) = &status {
        v1_status = copied(status, &SHARED_STATUS_FIELDS);
        let (current, others) = split_cpu(
            status.get("currentMetrics"),
            is_cpu_current,
            "/resource/current/averageUtilization",
        );
        if let Some(value) = current {
            v1_status.insert("currentCPUUtilizationPercentage".into(), value);
        }
        if !others.is_empty() {
            set_annotation(&mut object, CURRENT_METRICS_ANNOTATION, &json!(others));
        }
        if let Some(conditions) = status
            .get("conditions")
            .filter(|c| c.as_array().is_some_and(|list| !list.is_empty()))
        {
            set_annotation(&mut object, CONDITIONS_ANNOTATION, conditions);
        }
    }
    if let Some(map) = object.as_object_mut() {
        map.insert("spec".into(), Value::Object(v1_spec));
        if status.is_some() {
            map.insert("status".into(), Value::Object(v1_status));
        }
        map.insert("apiVersion".into(), json!(V1_API_VERSION));
    }
    object
}

/// An `autoscaling/v1` HorizontalPodAutoscaler in the v2 form it is stored in.
pub fn v1_to_v2(mut object: Value) -> Value {
    let taken = |object: &mut Value, key: &str| {
        object
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut)
            .and_then(|map| map.remove(key))
    };
    let other_metrics = decode(taken(&mut object, METRICS_ANNOTATION));
    let current_metrics = decode(taken(&mut object, CURRENT_METRICS_ANNOTATION));
    let conditions = decode(taken(&mut object, CONDITIONS_ANNOTATION));
    let behavior = decode(taken(&mut object, BEHAVIOR_ANNOTATION));
    drop_empty_annotations(&mut object);

    let spec = object.get_mut("spec").map(Value::take).unwrap_or(json!({}));
    let mut v2_spec = copied(&spec, &SHARED_SPEC_FIELDS);
    let mut metrics = Vec::new();
    if let Some(target) = spec
        .get("targetCPUUtilizationPercentage")
        .filter(|t| !t.is_null())
    {
        metrics.push(json!({
            "type": "Resource",
            "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": target}},
        }));
    }
    if let Some(Value::Array(others)) = other_metrics {
        metrics.extend(others);
    }
    if !metrics.is_empty() {
        v2_spec.insert("metrics".into(), Value::Array(metrics));
    }
    if let Some(behavior) = behavior {
        v2_spec.insert("behavior".into(), behavior);
    }

    let status = object.get_mut("status").map(Value::take);
    if let Some(map) = object.as_object_mut() {
        map.insert("spec".into(), Value::Object(v2_spec));
        if let Some(status) = status {
            let mut v2_status = copied(&status, &SHARED_STATUS_FIELDS);
            let mut current = Vec::new();
            if let Some(value) = status
                .get("currentCPUUtilizationPercentage")
                .filter(|v| !v.is_null())
            {
                current.push(json!({
                    "type": "Resource",
                    "resource": {"name": "cpu", "current": {"averageUtilization": value}},
                }));
            }
            if let Some(Value::Array(others)) = current_metrics {
                current.extend(others);
            }
            if !current.is_empty() {
                v2_status.insert("currentMetrics".into(), Value::Array(current));
            }
            if let Some(conditions) = conditions {
                v2_status.insert("conditions".into(), conditions);
            }
            map.insert("status".into(), Value::Object(v2_status));
        }
        map.insert("apiVersion".into(), json!(STORED_API_VERSION));
    }
    object
}

/// Create-time defaults of `autoscaling/v2` (`SetDefaults_HorizontalPodAutoscaler`): one
/// replica at least, and an 80% CPU utilization target when no metric is named.
pub fn default_v2(object: &mut Value) {
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    spec.entry("minReplicas").or_insert(json!(1));
    let has_metrics = spec
        .get("metrics")
        .and_then(Value::as_array)
        .is_some_and(|metrics| !metrics.is_empty());
    if !has_metrics {
        spec.insert(
            "metrics".into(),
            json!([{
                "type": "Resource",
                "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": DEFAULT_CPU_UTILIZATION}},
            }]),
        );
    }
}

/// Create-time defaults of `autoscaling/v1`: one replica at least.
pub fn default_v1(object: &mut Value) {
    if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
        spec.entry("minReplicas").or_insert(json!(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored() -> Value {
        json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "minReplicas": 2, "maxReplicas": 10,
                "metrics": [
                    {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}},
                    {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "500Mi"}}},
                ],
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}},
            },
            "status": {
                "currentReplicas": 3, "desiredReplicas": 4,
                "currentMetrics": [
                    {"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 85}}},
                    {"type": "Resource", "resource": {"name": "memory", "current": {"averageValue": "400Mi"}}},
                ],
                "conditions": [{"type": "AbleToScale", "status": "True", "reason": "ReadyForNewScale"}],
            },
        })
    }

    #[test]
    fn v1_shows_the_cpu_target_and_keeps_the_rest_in_annotations() {
        let v1 = v2_to_v1(stored());
        assert_eq!(v1["apiVersion"], "autoscaling/v1");
        assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 70);
        assert_eq!(v1["spec"]["minReplicas"], 2);
        assert!(v1["spec"].get("metrics").is_none());
        assert_eq!(v1["status"]["currentCPUUtilizationPercentage"], 85);
        assert_eq!(v1["status"]["desiredReplicas"], 4);
        let annotations = &v1["metadata"]["annotations"];
        assert!(
            annotations[METRICS_ANNOTATION]
                .as_str()
                .unwrap()
                .contains("500Mi")
        );
        assert!(
            annotations[CONDITIONS_ANNOTATION]
                .as_str()
                .unwrap()
                .contains("AbleToScale")
        );
        assert_eq!(v1["metadata"]["labels"]["app"], "web");
    }

    #[test]
    fn a_round_trip_through_v1_loses_nothing() {
        assert_eq!(v1_to_v2(v2_to_v1(stored())), stored());
        let mut bare = stored();
        bare["spec"].as_object_mut().unwrap().remove("behavior");
        bare["spec"]["metrics"] = json!([bare["spec"]["metrics"][0].clone()]);
        bare.as_object_mut().unwrap().remove("status");
        let v1 = v2_to_v1(bare.clone());
        assert!(v1["metadata"].get("annotations").is_none(), "{v1}");
        assert_eq!(v1_to_v2(v1), bare);
    }

    #[test]
    fn defaults_follow_upstream() {
        let mut v2 = json!({"spec": {"maxReplicas": 3}});
        default_v2(&mut v2);
        assert_eq!(v2["spec"]["minReplicas"], 1);
        assert_eq!(
            v2["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
            80
        );
        let mut v1 = json!({"spec": {"maxReplicas": 3}});
        default_v1(&mut v1);
        assert_eq!(v1["spec"], json!({"maxReplicas": 3, "minReplicas": 1}));
    }
}
