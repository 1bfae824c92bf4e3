//! The event printer, shared by core/v1 Events and `events.k8s.io/v1` Events, whose fields
//! differ only in name.

use serde_json::{Value, json};

use super::{Clock, Column, int, name_cell, optional_text, present, text};

pub(super) const EVENT_COLUMNS: &[Column] = &[
    Column::string("Last Seen", "Time since the event was last observed."),
    Column::string("Type", "Normal or Warning."),
    Column::string("Reason", "Short machine-readable reason for the event."),
    Column::string("Object", "The object the event is about, as kind/name."),
    Column::string(
        "Subobject",
        "The part of the object the event is about (fieldPath).",
    )
    .wide(),
    Column::string(
        "Source",
        "The component, and host, that reported the event.",
    )
    .wide(),
    Column::string("Message", "Human-readable description of the event."),
    Column::string("First Seen", "Time since the event was first observed.").wide(),
    Column::string("Count", "How many times the event has occurred.").wide(),
    Column::object_name("Name").wide(),
];

/// Where an Event's printed fields live: core/v1 and events.k8s.io/v1 name them differently.
struct EventFields {
    first_timestamp: &'static str,
    last_timestamp: &'static str,
    count: &'static str,
    regarding: &'static str,
    source: &'static str,
    reporting_controller: &'static str,
    message: &'static str,
}

const CORE_EVENT: EventFields = EventFields {
    first_timestamp: "/firstTimestamp",
    last_timestamp: "/lastTimestamp",
    count: "/count",
    regarding: "/involvedObject",
    source: "/source",
    reporting_controller: "/reportingComponent",
    message: "/message",
};

const EVENTS_API_EVENT: EventFields = EventFields {
    first_timestamp: "/deprecatedFirstTimestamp",
    last_timestamp: "/deprecatedLastTimestamp",
    count: "/deprecatedCount",
    regarding: "/regarding",
    source: "/deprecatedSource",
    reporting_controller: "/reportingController",
    message: "/note",
};

pub(super) fn core_event_cells(event: &Value, clock: &Clock) -> Vec<Value> {
    event_cells(event, &CORE_EVENT, clock)
}

pub(super) fn events_api_event_cells(event: &Value, clock: &Clock) -> Vec<Value> {
    event_cells(event, &EVENTS_API_EVENT, clock)
}

fn event_cells(event: &Value, fields: &EventFields, clock: &Clock) -> Vec<Value> {
    let first_seen = match optional_text(event, fields.first_timestamp) {
        Some(first) => clock.since(Some(first)),
        None => clock.since(optional_text(event, "/eventTime")),
    };
    let mut last_seen = match optional_text(event, fields.last_timestamp) {
        Some(last) => clock.since(Some(last)),
        None => first_seen.clone(),
    };
    let mut count = int(event, fields.count);
    if present(event, "/series") {
        last_seen = clock.since(optional_text(event, "/series/lastObservedTime"));
        count = int(event, "/series/count");
    } else if count == 0 {
        // Singleton events of the events.k8s.io API carry no count.
        count = 1;
    }

    let kind = text(event, &format!("{}/kind", fields.regarding)).to_lowercase();
    let target = match optional_text(event, &format!("{}/name", fields.regarding)) {
        Some(name) => format!("{kind}/{name}"),
        None => kind,
    };
    let component = optional_text(event, &format!("{}/component", fields.source))
        .or_else(|| optional_text(event, fields.reporting_controller))
        .unwrap_or_default();
    let source = match optional_text(event, &format!("{}/host", fields.source))
        .or_else(|| optional_text(event, "/reportingInstance"))
    {
        Some(instance) => format!("{component}, {instance}"),
        None => component.to_string(),
    };

    vec![
        json!(last_seen),
        json!(text(event, "/type")),
        json!(text(event, "/reason")),
        json!(target),
        json!(text(event, &format!("{}/fieldPath", fields.regarding))),
        json!(source),
        json!(text(event, fields.message).trim()),
        json!(first_seen),
        json!(count),
        name_cell(event),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[test]
    fn core_events() {
        let resource = builtin("", "events");
        assert_eq!(
            headers(&resource),
            [
                ("Last Seen".into(), 0),
                ("Type".into(), 0),
                ("Reason".into(), 0),
                ("Object".into(), 0),
                ("Subobject".into(), 1),
                ("Source".into(), 1),
                ("Message".into(), 0),
                ("First Seen".into(), 1),
                ("Count".into(), 1),
                ("Name".into(), 1)
            ]
        );
        let event = json!({
            "metadata": meta("web.17a", 600),
            "involvedObject": {"kind": "Pod", "name": "web", "fieldPath": "spec.containers{app}"},
            "reason": "Pulled", "message": "  Image pulled \n", "type": "Normal",
            "source": {"component": "kubelet", "host": "node-a"},
            "firstTimestamp": ago(600), "lastTimestamp": ago(30), "count": 4
        });
        assert_eq!(
            cells(&resource, &event),
            [
                json!("30s"),
                json!("Normal"),
                json!("Pulled"),
                json!("pod/web"),
                json!("spec.containers{app}"),
                json!("kubelet, node-a"),
                json!("Image pulled"),
                json!("10m"),
                json!(4),
                json!("web.17a")
            ]
        );
    }

    #[test]
    fn events_without_legacy_timestamps_use_event_time_and_series() {
        let resource = builtin("", "events");
        let event = json!({
            "metadata": meta("e", 600),
            "involvedObject": {"kind": "Node"},
            "type": "Warning", "reason": "Rebooted",
            "eventTime": "2026-11-22T11:50:00.000000Z",
            "reportingComponent": "kubelet", "reportingInstance": "node-b"
        });
        let c = cells(&resource, &event);
        assert_eq!(
            (&c[0], &c[3], &c[5], &c[7], &c[8]),
            (
                &json!("10m"),
                &json!("node"),
                &json!("kubelet, node-b"),
                &json!("10m"),
                &json!(1)
            )
        );

        let mut series = event.clone();
        series["series"] = json!({"count": 7, "lastObservedTime": "2026-11-22T11:59:00.123456Z"});
        let c = cells(&resource, &series);
        assert_eq!(
            (&c[0], &c[7], &c[8]),
            (&json!("59s"), &json!("10m"), &json!(7))
        );
    }

    #[test]
    fn events_k8s_io_events_print_like_core_events() {
        let resource = builtin("events.k8s.io", "events");
        assert_eq!(headers(&resource), headers(&builtin("", "events")));
        let event = json!({
            "metadata": meta("e", 600),
            "regarding": {"kind": "Deployment", "name": "web"},
            "type": "Normal", "reason": "ScalingReplicaSet", "note": "Scaled up to 3",
            "eventTime": "2026-11-22T11:55:00.000000Z",
            "reportingController": "deployment-controller", "reportingInstance": "cm-1"
        });
        assert_eq!(
            cells(&resource, &event),
            [
                json!("5m"),
                json!("Normal"),
                json!("ScalingReplicaSet"),
                json!("deployment/web"),
                json!(""),
                json!("deployment-controller, cm-1"),
                json!("Scaled up to 3"),
                json!("5m"),
                json!(1),
                json!("e")
            ]
        );
        let mut legacy = event.clone();
        legacy["deprecatedFirstTimestamp"] = json!(ago(900));
        legacy["deprecatedLastTimestamp"] = json!(ago(45));
        legacy["deprecatedCount"] = json!(2);
        legacy["deprecatedSource"] = json!({"component": "old"});
        let c = cells(&resource, &legacy);
        assert_eq!(
            (&c[0], &c[5], &c[7], &c[8]),
            (&json!("45s"), &json!("old, cm-1"), &json!("15m"), &json!(2))
        );
    }
}
