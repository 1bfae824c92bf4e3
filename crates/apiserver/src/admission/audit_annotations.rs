//! The audit annotations admission adds to its request's audit event, as upstream's
//! `Attributes.AddAnnotation`: a webhook's `auditAnnotations` (as `<webhook>/<key>`), a
//! ValidatingAdmissionPolicy's `auditAnnotations` (as `<policy>/<key>`) and the
//! `validation.policy.admission.k8s.io/validation_failure` of a binding with the `Audit`
//! action.
//!
//! The HTTP layer's audit runs each request within [`AuditAnnotations::scope`] and copies
//! what was added into the request's event; admission adds with [`AuditAnnotations::add`],
//! which does nothing outside a scope (in-process controllers, or no audit log).
//!
//! # Guarantees
//! - As upstream, a key keeps its first value within one request; a different later value
//!   is dropped (the audit layer logs it).
//! - A key that is not a qualified name (`prefix/name`, each part upstream's rules) is not
//!   recorded, with a warning in the server log, as upstream's `AddAnnotation` refuses it.

use std::sync::{Arc, Mutex};

use crate::validation;

tokio::task_local! {
    static AUDIT_ANNOTATIONS: AuditAnnotations;
}

/// The annotations added within one request, in the order added.
#[derive(Clone, Debug, Default)]
pub struct AuditAnnotations(Arc<Mutex<Vec<(String, String)>>>);

impl AuditAnnotations {
    /// Runs `work`; the admission it does adds its annotations here.
    pub async fn scope<F: std::future::Future>(&self, work: F) -> F::Output {
        AUDIT_ANNOTATIONS.scope(self.clone(), work).await
    }

    /// Everything added so far, in order.
    pub fn added(&self) -> Vec<(String, String)> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Adds `key: value` to the current request's audit event, if it is audited.
    pub fn add(key: String, value: String) {
        let _ = AUDIT_ANNOTATIONS.try_with(|annotations| {
            if !validation::is_qualified_name(&key).is_empty() {
                tracing::warn!(%key, %value, "audit annotation key has invalid format; not recorded");
                return;
            }
            annotations
                .0
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push((key, value));
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn annotations_are_kept_within_a_scope_only() {
        AuditAnnotations::add("outside/key".into(), "lost".into());
        let annotations = AuditAnnotations::default();
        annotations
            .scope(async {
                AuditAnnotations::add("policy.example.com/team".into(), "a".into());
                AuditAnnotations::add("not a key".into(), "refused".into());
            })
            .await;
        assert_eq!(
            annotations.added(),
            [("policy.example.com/team".to_string(), "a".to_string())]
        );
    }
}
