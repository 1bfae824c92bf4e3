//! Kubernetes Events recorded by in-process controllers, so that `kubectl describe` and
//! `kubectl events` show users why something happened to their objects.

use serde_json::json;

use crate::object;
use crate::registry::{Registry, WriteOptions};
use crate::resources::ResourceType;

/// Records a core/v1 Event about `involved` in its namespace (`default` for cluster-scoped
/// objects). Failures are logged, never returned: an event is an explanation, not a step of
/// the work.
pub async fn record(
    registry: &Registry,
    involved_type: &ResourceType,
    involved: &serde_json::Value,
    event_type: &str,
    reason: &str,
    message: &str,
    component: &str,
) {
    let Some(events) = registry.catalog().lookup("", "v1", "events") else {
        return;
    };
    let namespace = object::meta_str(involved, "namespace")
        .unwrap_or("default")
        .to_string();
    let now = object::now();
    let event = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": format!("{}.{:016x}", object::name(involved), rand::random::<u64>()),
            "namespace": namespace,
        },
        "involvedObject": {
            "apiVersion": involved_type.api_version(),
            "kind": involved_type.kind,
            "name": object::name(involved),
            "namespace": object::meta_str(involved, "namespace"),
            "uid": object::uid(involved),
            "resourceVersion": object::meta_str(involved, "resourceVersion"),
        },
        "reason": reason,
        "message": message,
        "type": event_type,
        "source": {"component": component},
        "reportingComponent": component,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    });
    if let Err(error) = registry
        .create(&events, Some(&namespace), event, &WriteOptions::default())
        .await
    {
        tracing::warn!(%error, reason, "cannot record an event");
    }
}
