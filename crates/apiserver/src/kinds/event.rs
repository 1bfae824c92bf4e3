//! Events: `core/v1` and `events.k8s.io/v1` are two views of one store, as upstream keeps
//! both at `/registry/events`. Objects are stored in the core form; the `events.k8s.io` view
//! renames fields on the way out ([`core_to_events`]) and back on the way in
//! ([`events_to_core`]), as upstream's `Convert_core_Event_To_v1_Event` and its inverse do.
//! An Event written through either API is listed, watched and printed by both, so what
//! kube-runtime's `Recorder` publishes shows in `kubectl describe`.
//!
//! Validation is upstream's `ValidateEventCreate` / `ValidateEventUpdate`: the legacy checks
//! for every write, and the strict ones for writes through `events.k8s.io`. Field paths in
//! the messages are the core names (`count`, `source`), as upstream validates the internal
//! type whatever the request's version.
//!
//! # Caveats
//! - The conversion renames fields and leaves the rest alone. Upstream's typed round trip
//!   also writes the zero values Go cannot omit (`"source": {}`, `"reportingComponent": ""`,
//!   `"firstTimestamp": null`); Finale leaves absent fields absent.

use serde_json::{Map, Value};

use crate::validation::FieldError;

/// Core names and their `events.k8s.io/v1` counterparts, field by field.
const RENAMES: [(&str, &str); 7] = [
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
    ("reportingComponent", "reportingController"),
];

/// The `apiVersion` of the core view, which objects are stored in.
pub const CORE_API_VERSION: &str = "v1";
/// The `apiVersion` of the events view.
pub const EVENTS_API_VERSION: &str = "events.k8s.io/v1";

/// Upstream's limits on an event's strings (`pkg/apis/core/validation/events.go`).
const REPORTING_INSTANCE_LIMIT: usize = 128;
const ACTION_LIMIT: usize = 128;
const REASON_LIMIT: usize = 128;
const NOTE_LIMIT: usize = 1024;

fn rename(object: Value, api_version: &str, from_core: bool) -> Value {
    let Value::Object(fields) = object else {
        return object;
    };
    let mut renamed = Map::with_capacity(fields.len());
    for (key, value) in fields {
        let key = RENAMES
            .iter()
            .find_map(|(core, events)| {
                let (from, to) = if from_core {
                    (core, events)
                } else {
                    (events, core)
                };
                (key == *from).then(|| (*to).to_string())
            })
            .unwrap_or(key);
        renamed.insert(key, value);
    }
    renamed.insert("apiVersion".into(), Value::from(api_version));
    Value::Object(renamed)
}

/// A stored (core) Event as `events.k8s.io/v1` serves it.
pub fn core_to_events(object: Value) -> Value {
    rename(object, EVENTS_API_VERSION, true)
}

/// An `events.k8s.io/v1` Event in the core form it is stored in.
pub fn events_to_core(object: Value) -> Value {
    rename(object, CORE_API_VERSION, false)
}

fn text<'a>(object: &'a Value, field: &str) -> &'a str {
    object
        .get(field)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn is_set(object: &Value, field: &str) -> bool {
    object.get(field).is_some_and(|value| !value.is_null())
}

/// Upstream's `legacyValidateEvent`, for every write through either API: the namespaces
/// agree, and an event with an `eventTime` (a "new" event) names its reporter, action and
/// reason within their limits.
fn legacy_errors(event: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let namespace = crate::object::namespace(event).unwrap_or_default();
    let involved_namespace = event
        .pointer("/involvedObject/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mismatch = || {
        FieldError::invalid(
            "involvedObject.namespace",
            involved_namespace,
            "does not match event.namespace",
        )
    };
    if !is_set(event, "eventTime") {
        let agrees = if involved_namespace.is_empty() {
            namespace.is_empty() || namespace == "default"
        } else {
            namespace == involved_namespace
        };
        if !agrees {
            errors.push(mismatch());
        }
        return errors;
    }
    if involved_namespace.is_empty() && namespace != "default" && namespace != "kube-system" {
        errors.push(mismatch());
    }
    let controller = text(event, "reportingComponent");
    if controller.is_empty() {
        errors.push(FieldError::required("reportingController", ""));
    }
    for message in crate::validation::is_qualified_name(controller) {
        errors.push(FieldError::invalid(
            "reportingController",
            controller,
            &message,
        ));
    }
    let limited = [
        ("reportingInstance", REPORTING_INSTANCE_LIMIT, true),
        ("action", ACTION_LIMIT, true),
        ("reason", REASON_LIMIT, true),
        ("message", NOTE_LIMIT, false),
    ];
    for (field, limit, required) in limited {
        let value = text(event, field);
        if required && value.is_empty() {
            errors.push(FieldError::required(field, ""));
        }
        if value.len() > limit {
            errors.push(FieldError::invalid(
                field,
                "",
                &format!("can have at most {limit} characters"),
            ));
        }
    }
    errors
}

/// Upstream's `validateV1EventSeries`.
fn series_errors(event: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let Some(series) = event.get("series").filter(|s| !s.is_null()) else {
        return errors;
    };
    if series.get("count").and_then(Value::as_i64).unwrap_or(0) < 2 {
        errors.push(FieldError::invalid(
            "series.count",
            "",
            "should be at least 2",
        ));
    }
    if !is_set(series, "lastObservedTime") {
        errors.push(FieldError::required("series.lastObservedTime", ""));
    }
    errors
}

/// Validation of a write through `core/v1`: upstream checks no more than the legacy rules.
pub fn validate_core_event(event: &Value, _old: Option<&Value>) -> Vec<FieldError> {
    legacy_errors(event)
}

/// Fields an update through `events.k8s.io/v1` may not change (upstream's
/// `ValidateEventUpdate`), by their core names.
const IMMUTABLE: [&str; 13] = [
    "involvedObject",
    "reason",
    "message",
    "source",
    "firstTimestamp",
    "lastTimestamp",
    "count",
    "type",
    "eventTime",
    "action",
    "related",
    "reportingComponent",
    "reportingInstance",
];

/// Validation of a write through `events.k8s.io/v1` (the object in that view): the legacy
/// rules, and upstream's strict ones for this API.
pub fn validate_events_event(event: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let event = events_to_core(event.clone());
    let mut errors = legacy_errors(&event);
    match old {
        None => {
            errors.extend(series_errors(&event));
            if !is_set(&event, "eventTime") {
                errors.push(FieldError::required("eventTime", ""));
            }
            let kind = text(&event, "type");
            if kind != "Normal" && kind != "Warning" {
                errors.push(FieldError::invalid(
                    "type",
                    "",
                    &format!("has invalid value: {kind}"),
                ));
            }
            for field in ["firstTimestamp", "lastTimestamp"] {
                if is_set(&event, field) {
                    errors.push(FieldError::invalid(field, "", "needs to be unset"));
                }
            }
            if event.get("count").and_then(Value::as_i64).unwrap_or(0) != 0 {
                errors.push(FieldError::invalid("count", "", "needs to be unset"));
            }
            let source_set = ["component", "host"].iter().any(|field| {
                event
                    .pointer(&format!("/source/{field}"))
                    .and_then(Value::as_str)
                    .is_some_and(|value| !value.is_empty())
            });
            if source_set {
                errors.push(FieldError::invalid("source", "", "needs to be unset"));
            }
        }
        Some(old) => {
            let old = events_to_core(old.clone());
            if event.get("series") != old.get("series") {
                errors.extend(series_errors(&event));
            }
            for field in IMMUTABLE {
                let now = event.get(field).filter(|value| !value.is_null());
                if now != old.get(field).filter(|value| !value.is_null()) {
                    errors.push(match now {
                        Some(Value::String(text)) => {
                            FieldError::invalid(field, text.as_str(), "field is immutable")
                        }
                        other => FieldError::invalid_literal(
                            field,
                            other.map(Value::to_string).unwrap_or_else(|| "null".into()),
                            "field is immutable",
                        ),
                    });
                }
            }
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn recorded() -> Value {
        // What kube-runtime's Recorder sends.
        json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "web.1", "namespace": "team"},
            "eventTime": "2026-11-28T10:00:00.000000Z",
            "regarding": {"kind": "ConfigMap", "name": "web", "namespace": "team", "uid": "u-1"},
            "note": "synced", "reason": "Synced", "action": "Reconcile", "type": "Normal",
            "reportingController": "example.com/operator", "reportingInstance": "operator-0",
        })
    }

    #[test]
    fn the_two_views_convert_field_by_field_and_back() {
        let core = events_to_core(recorded());
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "web");
        assert_eq!(core["message"], "synced");
        assert_eq!(core["reportingComponent"], "example.com/operator");
        assert!(core.get("regarding").is_none() && core.get("note").is_none());
        assert_eq!(core_to_events(core), recorded());

        let legacy = json!({
            "apiVersion": "v1", "kind": "Event", "metadata": {"name": "e", "namespace": "team"},
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": "team"},
            "source": {"component": "kubelet"}, "count": 3,
            "firstTimestamp": "2026-11-28T10:00:00Z", "lastTimestamp": "2026-11-28T10:05:00Z",
        });
        let served = core_to_events(legacy.clone());
        assert_eq!(served["deprecatedSource"]["component"], "kubelet");
        assert_eq!(served["deprecatedCount"], 3);
        assert_eq!(served["deprecatedLastTimestamp"], "2026-11-28T10:05:00Z");
        assert_eq!(events_to_core(served), legacy);
    }

    fn fields(errors: &[FieldError]) -> Vec<String> {
        errors.iter().map(FieldError::to_string).collect()
    }

    #[test]
    fn creates_through_events_k8s_io_meet_the_strict_rules() {
        assert!(validate_events_event(&recorded(), None).is_empty());

        let mut bare = recorded();
        for field in ["eventTime", "action", "reportingController"] {
            bare.as_object_mut().map(|m| m.remove(field));
        }
        bare["type"] = json!("Fatal");
        bare["deprecatedCount"] = json!(2);
        let errors = fields(&validate_events_event(&bare, None));
        assert_eq!(
            errors,
            [
                "eventTime: Required value",
                "type: Invalid value: \"\": has invalid value: Fatal",
                "count: Invalid value: \"\": needs to be unset",
            ],
            "without an eventTime the legacy rules ask for nothing more"
        );

        let mut elsewhere = recorded();
        elsewhere["regarding"]["namespace"] = json!("other");
        elsewhere.as_object_mut().map(|m| m.remove("reason"));
        let errors = fields(&validate_events_event(&elsewhere, None));
        assert_eq!(
            errors,
            ["reason: Required value",],
            "an eventTime event may regard an object in another namespace"
        );
    }

    #[test]
    fn core_writes_keep_the_legacy_rules_only() {
        let event = json!({
            "metadata": {"name": "e", "namespace": "team"},
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": "other"},
        });
        assert_eq!(
            fields(&validate_core_event(&event, None)),
            ["involvedObject.namespace: Invalid value: \"other\": does not match event.namespace"]
        );
        let cluster_scoped = json!({
            "metadata": {"name": "e", "namespace": "default"},
            "involvedObject": {"kind": "Node", "name": "n"},
        });
        assert!(validate_core_event(&cluster_scoped, None).is_empty());
    }

    #[test]
    fn updates_through_events_k8s_io_may_add_a_series_but_not_change_the_event() {
        let old = recorded();
        let mut counted = old.clone();
        counted["series"] = json!({"count": 2, "lastObservedTime": "2026-11-28T10:01:00.000000Z"});
        assert!(validate_events_event(&counted, Some(&old)).is_empty());

        let mut bad_series = old.clone();
        bad_series["series"] = json!({"count": 1});
        assert_eq!(
            fields(&validate_events_event(&bad_series, Some(&old))),
            [
                "series.count: Invalid value: \"\": should be at least 2",
                "series.lastObservedTime: Required value",
            ]
        );

        let mut renamed = old.clone();
        renamed["note"] = json!("something else");
        assert_eq!(
            fields(&validate_events_event(&renamed, Some(&old))),
            ["message: Invalid value: \"something else\": field is immutable"]
        );
    }
}
