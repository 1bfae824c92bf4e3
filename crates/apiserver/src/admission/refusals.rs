//! The last refusal of each finalizer removal by an admission webhook, so that the deletion
//! explanations ([`crate::insight`]) can name the webhook that keeps a finalizer on.
//!
//! A finalizer removal is an UPDATE, and a validating (or mutating) webhook can refuse it —
//! by denying it, or by being down under `failurePolicy: Fail`. The controller that owns the
//! finalizer then retries and fails again, and the object stays terminating; without this
//! record the explanation would blame the controller.
//!
//! # Guarantees
//! - Each refused UPDATE that removed finalizers from an object is recorded per finalizer,
//!   with the webhook's name, the refusal's message and its time.
//!
//! # Caveats
//! - The record is kept in this process's memory (at most [`MAX_RECORDS`] entries, oldest
//!   dropped first): a restart, or a review answered by another replica, does not see it.
//! - A refusal stays recorded until a newer one replaces it or it is evicted; the
//!   explanation shows its time, and only a recent one ([`FRESH`]) makes the cause Stuck.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use super::{Attributes, Operation};
use crate::object;

/// Records kept at once.
pub const MAX_RECORDS: usize = 4096;

/// How long a refusal counts as the current reason a finalizer stays.
pub const FRESH: Duration = Duration::from_secs(300);

/// One refused removal of `finalizer` from the object `uid`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub uid: String,
    pub finalizer: String,
    pub webhook: String,
    pub message: String,
    /// RFC 3339.
    pub at: String,
    pub at_time: chrono::DateTime<chrono::Utc>,
}

static RECORDS: Mutex<VecDeque<Refusal>> = Mutex::new(VecDeque::new());

/// Notes a refused request if it was an UPDATE removing finalizers.
pub fn note(attributes: &Attributes<'_>, webhook: &str, message: &str) {
    if attributes.operation != Operation::Update {
        return;
    }
    let (Some(new), Some(old)) = (attributes.object, attributes.old_object) else {
        return;
    };
    let kept = object::finalizers(new);
    let removed: Vec<String> = object::finalizers(old)
        .into_iter()
        .filter(|f| !kept.contains(f))
        .collect();
    if removed.is_empty() {
        return;
    }
    let uid = object::uid(old).to_string();
    let now = chrono::Utc::now();
    let mut records = RECORDS.lock().unwrap_or_else(|p| p.into_inner());
    for finalizer in removed {
        records.retain(|r| !(r.uid == uid && r.finalizer == finalizer));
        if records.len() >= MAX_RECORDS {
            records.pop_front();
        }
        records.push_back(Refusal {
            uid: uid.clone(),
            finalizer,
            webhook: webhook.to_string(),
            message: message.to_string(),
            at: object::timestamp(now),
            at_time: now,
        });
    }
}

/// The last refused removal of `finalizer` from the object `uid`, if any is recorded.
pub fn last(uid: &str, finalizer: &str) -> Option<Refusal> {
    RECORDS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .rev()
        .find(|r| r.uid == uid && r.finalizer == finalizer)
        .cloned()
}

/// [`note`] for a refused update of a ConfigMap from `old` to `new` (tests).
#[cfg(test)]
fn note_update(old: &serde_json::Value, new: &serde_json::Value, webhook: &str) {
    let catalog = crate::resources::Catalog::with_builtins();
    let Some(resource) = catalog.lookup("", "v1", "configmaps") else {
        return;
    };
    let null = serde_json::Value::Null;
    note(
        &Attributes {
            resource: &resource,
            subresource: None,
            operation: Operation::Update,
            namespace: Some("default"),
            name: "x",
            object: Some(new),
            old_object: Some(old),
            dry_run: false,
            options: &null,
            user: &null,
            kind_override: None,
        },
        webhook,
        "denied",
    );
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_removed_finalizers_are_recorded() {
        let old = json!({"metadata": {"uid": "refusals-test-uid", "finalizers": ["a.example.com/x", "b.example.com/y"]}});
        let new =
            json!({"metadata": {"uid": "refusals-test-uid", "finalizers": ["b.example.com/y"]}});
        note_update(&old, &new, "guard.example.com");
        let refusal = last("refusals-test-uid", "a.example.com/x").expect("recorded");
        assert_eq!(refusal.webhook, "guard.example.com");
        assert!(last("refusals-test-uid", "b.example.com/y").is_none());
    }
}
