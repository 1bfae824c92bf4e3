//! Status conditions, and the `Deleting` condition that explains why an object is still there.
//!
//! Conditions follow the Kubernetes convention (`type`, `status`, `reason`, `message`,
//! `lastTransitionTime`, `observedGeneration`); `lastTransitionTime` changes only when
//! `status` flips, so `kubectl describe` shows how long an object has been stuck.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Set while an object is terminating and its cleanup has not finished.
pub const DELETING: &str = "Deleting";
/// The usual readiness condition of an operator's objects.
pub const READY: &str = "Ready";

/// Where the cleanup of a terminating object stands, in `status.deletion`: the machine-readable
/// twin of the `Deleting` condition's message.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeletionProgress {
    /// The finalizer whose cleanup is running or waiting.
    pub step: String,
    /// Failed attempts of this step in a row.
    pub attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// When the step runs again (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_retry: Option<String>,
}

/// A condition stamped now.
pub fn new(
    kind: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
) -> Condition {
    Condition {
        type_: kind.to_string(),
        status: if status { "True" } else { "False" }.to_string(),
        reason: reason.to_string(),
        message: message.into(),
        last_transition_time: Time(Timestamp::now()),
        observed_generation: generation,
    }
}

/// Puts `next` in place of the condition of its type, keeping the old transition time when the
/// status did not change. Returns whether anything but the transition time changed.
pub fn upsert(conditions: &mut Vec<Condition>, mut next: Condition) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == next.type_) {
        Some(existing) => {
            if existing.status == next.status {
                next.last_transition_time = existing.last_transition_time.clone();
            }
            let changed = *existing != next;
            *existing = next;
            changed
        }
        None => {
            conditions.push(next);
            true
        }
    }
}

/// Removes the condition of type `kind`; returns whether there was one.
pub fn remove(conditions: &mut Vec<Condition>, kind: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != kind);
    conditions.len() != before
}

/// The conditions in an object's `status.conditions`, whatever its Rust type.
pub fn of(object: &impl Serialize) -> Vec<Condition> {
    serde_json::to_value(object)
        .ok()
        .and_then(|mut value| value.pointer_mut("/status/conditions").map(Value::take))
        .and_then(|conditions| serde_json::from_value(conditions).ok())
        .unwrap_or_default()
}

/// The condition of type `kind`, if set.
pub fn find<'a>(conditions: &'a [Condition], kind: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == kind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_transition_time_moves_only_when_the_status_flips() {
        let mut conditions = vec![];
        let first = new(DELETING, true, "CleanupFailed", "attempt 1", Some(1));
        let stamped = first.last_transition_time.clone();
        assert!(upsert(&mut conditions, first));
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert!(upsert(
            &mut conditions,
            new(DELETING, true, "CleanupFailed", "attempt 2", Some(1))
        ));
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].message, "attempt 2");
        assert_eq!(conditions[0].last_transition_time, stamped);
        assert!(!upsert(
            &mut conditions,
            new(DELETING, true, "CleanupFailed", "attempt 2", Some(1))
        ));
        assert!(upsert(
            &mut conditions,
            new(DELETING, false, "Done", "", Some(1))
        ));
        assert_ne!(conditions[0].last_transition_time, stamped);
    }

    #[test]
    fn conditions_are_read_from_any_object() {
        let object = json!({"status": {"conditions": [{
            "type": "Ready", "status": "True", "reason": "Created", "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
        let conditions = of(&object);
        assert_eq!(
            find(&conditions, READY).map(|c| c.reason.as_str()),
            Some("Created")
        );
        assert!(of(&json!({"spec": {}})).is_empty());
    }
}
