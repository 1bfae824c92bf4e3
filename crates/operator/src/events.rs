//! Kubernetes Events about an operator's objects, as `kubectl describe` shows them.
//!
//! Events are written in the core/v1 form, the one `kubectl describe` reads on every
//! Kubernetes version. (kube-runtime's `Recorder` writes only events.k8s.io/v1, which Finale
//! and every API server since 1.19 also serve as core/v1.) Repeats of the same event on the same object
//! bump `count` and `lastTimestamp` instead of creating a new Event, as client-go's correlator
//! does, so a retry loop cannot flood the namespace.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use serde_json::json;

/// The type of an Event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// Repeats remembered per process; older entries are dropped beyond this many.
const REMEMBERED: usize = 4096;

/// What makes two Events the same: (object uid, type, reason, message).
type EventKey = (String, &'static str, String, String);
/// Where the Event for a key was written: (namespace, name, count).
type WrittenEvent = (String, String, i32);

/// Publishes Events as one reporting controller.
pub struct EventRecorder {
    client: Client,
    component: String,
    instance: String,
    /// (object uid, type, reason, message) → (Event namespace, Event name, count).
    seen: Mutex<HashMap<EventKey, WrittenEvent>>,
}

impl EventRecorder {
    pub fn new(client: Client, component: impl Into<String>, instance: impl Into<String>) -> Self {
        EventRecorder {
            client,
            component: component.into(),
            instance: instance.into(),
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// Records an Event about `object`. Failures are returned for the caller to log: an Event
    /// is never worth failing a reconcile for.
    pub async fn publish<K: Resource<DynamicType = ()>>(
        &self,
        object: &K,
        kind: EventType,
        reason: &str,
        action: &str,
        message: &str,
    ) -> Result<(), kube::Error> {
        let reference = object.object_ref(&());
        let namespace = reference
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_string());
        let key = (
            reference.uid.clone().unwrap_or_default(),
            kind.as_str(),
            reason.to_string(),
            message.to_string(),
        );
        let now = Timestamp::now();
        let events: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let repeat = self
            .seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .cloned();
        if let Some((event_namespace, name, count)) = repeat {
            let bumped = json!({"count": count + 1, "lastTimestamp": Time(now)});
            let events_there: Api<Event> = Api::namespaced(self.client.clone(), &event_namespace);
            if events_there
                .patch(&name, &PatchParams::default(), &Patch::Merge(&bumped))
                .await
                .is_ok()
            {
                self.remember(key, event_namespace, name, count + 1);
                return Ok(());
            }
            // Expired or deleted: write a new one.
        }
        let event = Event {
            metadata: ObjectMeta {
                // Named as client-go names them: unique per object and moment.
                name: Some(format!(
                    "{}.{:x}",
                    reference.name.clone().unwrap_or_default(),
                    now.as_nanosecond()
                )),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            involved_object: ObjectReference {
                field_path: None,
                ..reference
            },
            type_: Some(kind.as_str().to_string()),
            reason: Some(reason.to_string()),
            message: Some(message.to_string()),
            action: Some(action.to_string()),
            count: Some(1),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            event_time: Some(MicroTime(now)),
            source: Some(EventSource {
                component: Some(self.component.clone()),
                host: None,
            }),
            reporting_component: Some(self.component.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..Event::default()
        };
        let created = events.create(&PostParams::default(), &event).await?;
        if let Some(name) = created.metadata.name {
            self.remember(key, namespace, name, 1);
        }
        Ok(())
    }

    fn remember(&self, key: EventKey, namespace: String, name: String, count: i32) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.len() >= REMEMBERED && !seen.contains_key(&key) {
            seen.clear();
        }
        seen.insert(key, (namespace, name, count));
    }
}
