//! Taints and tolerations, as upstream's `v1helper.TolerationsTolerateTaint`: shared by the
//! scheduler (which keeps Pods off tainted Nodes) and the node lifecycle controller (which
//! taints unreachable Nodes and evicts the Pods that do not tolerate it).

use serde_json::{Value, json};

/// Added by the node lifecycle controller while a Node's Ready condition is Unknown.
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// Added while a Node's Ready condition is False.
pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
/// Added by a person (non-graceful node shutdown): the Node is down for good, so its Pods may
/// be force-deleted.
pub const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";
/// What a cordoned Node (`spec.unschedulable`) counts as for the scheduler.
pub const UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

pub const NO_SCHEDULE: &str = "NoSchedule";
pub const NO_EXECUTE: &str = "NoExecute";

/// A Node's `spec.taints`.
pub fn taints(node: &Value) -> &[Value] {
    node.pointer("/spec/taints")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// A Pod's `spec.tolerations`.
pub fn tolerations(pod: &Value) -> &[Value] {
    pod.pointer("/spec/tolerations")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn field<'a>(object: &'a Value, name: &str) -> &'a str {
    object.get(name).and_then(Value::as_str).unwrap_or_default()
}

/// Whether `toleration` tolerates `taint` (upstream's `Toleration.ToleratesTaint`): an empty
/// effect matches every effect, `Exists` with an empty key every key, `Equal` (the default)
/// needs the same key and value.
pub fn tolerates(toleration: &Value, taint: &Value) -> bool {
    let effect = field(toleration, "effect");
    if !effect.is_empty() && effect != field(taint, "effect") {
        return false;
    }
    let key = field(toleration, "key");
    if !key.is_empty() && key != field(taint, "key") {
        return false;
    }
    match field(toleration, "operator") {
        "Exists" => true,
        "" | "Equal" => field(toleration, "value") == field(taint, "value"),
        _ => false,
    }
}

/// The first of `taints` with one of `effects` that no toleration of the Pod tolerates.
pub fn untolerated<'a>(pod: &Value, taints: &'a [Value], effects: &[&str]) -> Option<&'a Value> {
    taints.iter().find(|taint| {
        effects.contains(&field(taint, "effect"))
            && !tolerations(pod).iter().any(|t| tolerates(t, taint))
    })
}

/// How long a Pod may stay on a Node with these NoExecute `taints` (upstream's
/// `getMinTolerationTime`): `Some(0)` when one is not tolerated, the smallest
/// `tolerationSeconds` of the tolerations that match otherwise, `None` for ever.
pub fn toleration_time(pod: &Value, taints: &[Value]) -> Option<i64> {
    let mut shortest: Option<i64> = None;
    for taint in taints.iter().filter(|t| field(t, "effect") == NO_EXECUTE) {
        let matching: Vec<&Value> = tolerations(pod)
            .iter()
            .filter(|t| tolerates(t, taint))
            .collect();
        if matching.is_empty() {
            return Some(0);
        }
        for toleration in matching {
            if let Some(seconds) = toleration.get("tolerationSeconds").and_then(Value::as_i64) {
                let seconds = seconds.max(0);
                shortest = Some(shortest.map_or(seconds, |s| s.min(seconds)));
            }
        }
    }
    shortest
}

/// How upstream's scheduler names a taint in "had untolerated taint {key: value}".
pub fn describe(taint: &Value) -> String {
    format!("{{{}: {}}}", field(taint, "key"), field(taint, "value"))
}

/// A taint as the node lifecycle controller writes it.
pub fn taint(key: &str, effect: &str, time_added: Option<&str>) -> Value {
    let mut taint = json!({"key": key, "effect": effect});
    if let Some(time) = time_added {
        taint["timeAdded"] = json!(time);
    }
    taint
}

/// Upstream's DefaultTolerationSeconds admission: every Pod tolerates a not-ready or an
/// unreachable Node for `seconds` unless it says otherwise.
pub fn add_default_tolerations(pod: &mut Value, not_ready_seconds: i64, unreachable_seconds: i64) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let list = spec.entry("tolerations").or_insert_with(|| json!([]));
    let Some(list) = list.as_array_mut() else {
        return;
    };
    for (key, seconds) in [
        (NOT_READY, not_ready_seconds),
        (UNREACHABLE, unreachable_seconds),
    ] {
        let has = list.iter().any(|t| {
            let effect = field(t, "effect");
            let key_matches = field(t, "key") == key
                || (field(t, "key").is_empty() && field(t, "operator") == "Exists");
            key_matches && (effect.is_empty() || effect == NO_EXECUTE)
        });
        if !has {
            list.push(json!({
                "key": key,
                "operator": "Exists",
                "effect": NO_EXECUTE,
                "tolerationSeconds": seconds,
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tolerations_match_as_upstream() {
        let taint = json!({"key": "dedicated", "value": "gpu", "effect": "NoSchedule"});
        assert!(tolerates(
            &json!({"key": "dedicated", "value": "gpu"}),
            &taint
        ));
        assert!(!tolerates(
            &json!({"key": "dedicated", "value": "cpu"}),
            &taint
        ));
        assert!(tolerates(
            &json!({"key": "dedicated", "operator": "Exists"}),
            &taint
        ));
        assert!(tolerates(&json!({"operator": "Exists"}), &taint));
        assert!(!tolerates(
            &json!({"operator": "Exists", "effect": "NoExecute"}),
            &taint
        ));
        assert!(!tolerates(
            &json!({"key": "other", "operator": "Exists"}),
            &taint
        ));
    }

    #[test]
    fn toleration_time_is_the_shortest_matching() {
        let taints = [taint(UNREACHABLE, NO_EXECUTE, None)];
        let pod = |tolerations: Value| json!({"spec": {"tolerations": tolerations}});
        assert_eq!(toleration_time(&pod(json!([])), &taints), Some(0));
        assert_eq!(
            toleration_time(
                &pod(
                    json!([{"key": UNREACHABLE, "operator": "Exists", "tolerationSeconds": 5},
                             {"operator": "Exists", "tolerationSeconds": 3}])
                ),
                &taints
            ),
            Some(3)
        );
        assert_eq!(
            toleration_time(&pod(json!([{"operator": "Exists"}])), &taints),
            None
        );
        assert_eq!(
            toleration_time(&pod(json!([])), &[taint("x", NO_SCHEDULE, None)]),
            None
        );
    }

    #[test]
    fn default_tolerations_are_added_once() {
        let mut pod = json!({"spec": {"tolerations": [
            {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 2}
        ]}});
        add_default_tolerations(&mut pod, 300, 300);
        add_default_tolerations(&mut pod, 300, 300);
        let list = pod["spec"]["tolerations"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(list.len(), 2);
        assert_eq!(list[0]["tolerationSeconds"], json!(2));
        assert_eq!(list[1]["key"], json!(NOT_READY));
    }
}
