//! The `/scale` subresource: an `autoscaling/v1 Scale` view of an object's replica count.
//!
//! A kind with [`ScalePaths`] stores its desired replicas at `spec_replicas_path`, its
//! observed replicas at `status_replicas_path`, and (custom resources) a label-selector string
//! at `label_selector_path`. Deployments, ReplicaSets and StatefulSets keep a structured
//! `spec.selector`, which the Scale shows in its string form (`app=web,tier in (a,b)`);
//! a ReplicationController's `spec.selector` is a plain label map (`app=web`).
//!
//! Only `spec.replicas` of a Scale can be written; the registry applies the change to the
//! object itself, so every lifecycle rule still applies.

use serde_json::{Map, Value, json};

use crate::object;
use crate::resources::{ResourceType, ScalePaths};
use crate::status::{ApiError, ApiResult};
use crate::validation::FieldError;

/// `.spec.replicas` → `/spec/replicas`.
fn pointer(path: &str) -> String {
    path.trim_start_matches('.')
        .split('.')
        .fold(String::new(), |mut p, part| {
            p.push('/');
            p.push_str(&part.replace('~', "~0").replace('/', "~1"));
            p
        })
}

fn paths(resource: &ResourceType) -> ApiResult<&ScalePaths> {
    resource.scale.as_ref().ok_or_else(|| {
        ApiError::new(
            404,
            "NotFound",
            format!(
                "the server could not find the requested resource ({} has no scale subresource)",
                resource.plural
            ),
        )
    })
}

/// `spec.selector` as a string: a `LabelSelector`, or a ReplicationController's label map.
fn selector_of_spec(selector: &Value) -> String {
    let structured =
        selector.get("matchLabels").is_some() || selector.get("matchExpressions").is_some();
    match selector.as_object() {
        Some(labels) if !structured => {
            let mut pairs: Vec<String> = labels
                .iter()
                .map(|(key, value)| format!("{key}={}", value.as_str().unwrap_or_default()))
                .collect();
            pairs.sort();
            pairs.join(",")
        }
        _ => crate::selectors::selector_string(selector),
    }
}

/// The Scale of `object`.
pub fn to_scale(resource: &ResourceType, object: &Value) -> ApiResult<Value> {
    let paths = paths(resource)?;
    let replicas = |path: &str| {
        object
            .pointer(&pointer(path))
            .and_then(Value::as_i64)
            .unwrap_or(0)
    };
    let selector = match &paths.label_selector_path {
        Some(path) => object
            .pointer(&pointer(path))
            .and_then(Value::as_str)
            .map(str::to_string),
        None => object.pointer("/spec/selector").map(selector_of_spec),
    };
    let mut metadata = Map::new();
    for field in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(value) = object::metadata(object).and_then(|m| m.get(field)) {
            metadata.insert(field.into(), value.clone());
        }
    }
    let mut status = json!({"replicas": replicas(&paths.status_replicas_path)});
    if let Some(selector) = selector.filter(|s| !s.is_empty()) {
        status["selector"] = json!(selector);
    }
    Ok(json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": metadata,
        "spec": {"replicas": replicas(&paths.spec_replicas_path)},
        "status": status,
    }))
}

/// The desired replica count a written Scale asks for (422 when it is missing or negative).
pub fn requested_replicas(scale: &Value) -> ApiResult<i64> {
    let name = object::name(scale).to_string();
    let invalid = |error: FieldError| ApiError::invalid("Scale", "autoscaling", &name, &[error]);
    if let Some(kind) = scale.get("kind").and_then(Value::as_str)
        && !kind.is_empty()
        && kind != "Scale"
    {
        return Err(ApiError::bad_request(format!(
            "the body of a scale request must be an autoscaling/v1 Scale, not a {kind}"
        )));
    }
    match scale.pointer("/spec/replicas") {
        None | Some(Value::Null) => Ok(0),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(replicas) if replicas >= 0 => {
                i32::try_from(replicas).map(i64::from).map_err(|_| {
                    invalid(FieldError::invalid_literal(
                        "spec.replicas",
                        replicas.to_string(),
                        "must be a 32-bit integer",
                    ))
                })
            }
            Some(replicas) => Err(invalid(FieldError::invalid_literal(
                "spec.replicas",
                replicas.to_string(),
                "must be greater than or equal to 0",
            ))),
            None => Err(invalid(FieldError::invalid_literal(
                "spec.replicas",
                n.to_string(),
                "must be an integer",
            ))),
        },
        Some(other) => Err(invalid(FieldError::invalid_literal(
            "spec.replicas",
            other.to_string(),
            "must be an integer",
        ))),
    }
}

/// Writes `replicas` into `object` at the kind's spec path, creating parents as needed.
pub fn set_replicas(resource: &ResourceType, object: &mut Value, replicas: i64) -> ApiResult<()> {
    let paths = paths(resource)?;
    let parts: Vec<&str> = paths
        .spec_replicas_path
        .trim_start_matches('.')
        .split('.')
        .collect();
    let Some((last, parents)) = parts.split_last() else {
        return Err(ApiError::internal("empty specReplicasPath"));
    };
    let mut node = object;
    for part in parents {
        if !node.get(*part).is_some_and(Value::is_object) {
            node[*part] = json!({});
        }
        node = &mut node[*part];
    }
    node[*last] = json!(replicas);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtin_types;

    fn deployments() -> ResourceType {
        builtin_types()
            .into_iter()
            .find(|t| t.plural == "deployments")
            .expect("deployments are built in")
    }

    #[test]
    fn deployment_scale_shows_replicas_and_selector() {
        let deployment = json!({
            "metadata": {"name": "web", "namespace": "t", "uid": "u1", "resourceVersion": "7",
                          "creationTimestamp": "2026-01-01T00:00:00Z", "labels": {"x": "y"}},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web", "a": "b"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe", "be"]},
                                     {"key": "canary", "operator": "DoesNotExist"}]}},
            "status": {"replicas": 2},
        });
        let scale = to_scale(&deployments(), &deployment).expect("scale");
        assert_eq!(
            scale,
            json!({
                "kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {"name": "web", "namespace": "t", "uid": "u1", "resourceVersion": "7",
                             "creationTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {"replicas": 3},
                "status": {"replicas": 2, "selector": "a=b,app=web,tier in (be,fe),!canary"},
            })
        );
    }

    #[test]
    fn a_replication_controllers_map_selector_is_shown_as_labels() {
        let controllers = builtin_types()
            .into_iter()
            .find(|t| t.plural == "replicationcontrollers")
            .expect("replication controllers are built in");
        let controller = json!({"metadata": {"name": "rc"},
            "spec": {"replicas": 2, "selector": {"tier": "fe", "app": "web"}},
            "status": {"replicas": 1}});
        let scale = to_scale(&controllers, &controller).expect("scale");
        assert_eq!(
            scale["status"],
            json!({"replicas": 1, "selector": "app=web,tier=fe"})
        );
    }

    #[test]
    fn custom_paths_are_followed() {
        let mut widgets = deployments();
        widgets.scale = Some(ScalePaths {
            spec_replicas_path: ".spec.size".into(),
            status_replicas_path: ".status.size".into(),
            label_selector_path: Some(".status.selector".into()),
        });
        let mut widget = json!({"metadata": {"name": "w"}, "spec": {"size": 4},
                                "status": {"size": 1, "selector": "app=w"}});
        let scale = to_scale(&widgets, &widget).expect("scale");
        assert_eq!(scale["spec"]["replicas"], 4);
        assert_eq!(scale["status"], json!({"replicas": 1, "selector": "app=w"}));

        set_replicas(&widgets, &mut widget, 9).expect("set");
        assert_eq!(widget["spec"]["size"], 9);
        let mut bare = json!({"metadata": {"name": "w"}});
        set_replicas(&widgets, &mut bare, 2).expect("set");
        assert_eq!(bare["spec"], json!({"size": 2}));
    }

    #[test]
    fn written_replicas_are_checked() {
        assert_eq!(requested_replicas(&json!({"spec": {"replicas": 5}})), Ok(5));
        let negative =
            requested_replicas(&json!({"metadata": {"name": "w"}, "spec": {"replicas": -1}}))
                .expect_err("negative");
        assert_eq!(negative.code, 422);
        assert!(
            negative
                .message
                .contains("spec.replicas: Invalid value: -1: must be greater than or equal to 0"),
            "{}",
            negative.message
        );
        let text = requested_replicas(&json!({"spec": {"replicas": "3"}})).expect_err("string");
        assert_eq!(text.code, 422);
        let wrong_kind = requested_replicas(&json!({"kind": "Deployment"})).expect_err("kind");
        assert_eq!(wrong_kind.code, 400);
    }
}
