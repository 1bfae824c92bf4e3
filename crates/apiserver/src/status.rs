//! Kubernetes `Status` errors: the one error type every API path returns.
//!
//! Clients key on the exact `reason` strings and codes (kube-rs `is_already_exists()` matches
//! the reason only), so each constructor here pins one upstream shape.

use serde_json::{Value, json};

use crate::validation::FieldError;

/// One entry of `details.causes`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    pub reason: String,
    pub message: String,
    pub field: String,
}

/// A failed API request, rendered as a `Status` object with its HTTP code.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    /// Boxed: most errors carry none, and `Result<_, ApiError>` stays small.
    pub details: Option<Box<Details>>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Details {
    pub name: String,
    pub group: String,
    /// Upstream puts the plural resource here for NotFound/AlreadyExists and the Kind for
    /// some precondition failures; callers choose.
    pub kind: String,
    pub uid: String,
    pub causes: Vec<Cause>,
    pub retry_after_seconds: Option<u64>,
}

/// Identifies the object an error is about: `group` (empty for core), plural `resource`, name.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    pub group: &'a str,
    pub resource: &'a str,
    pub name: &'a str,
}

impl Target<'_> {
    /// `configmaps` or `widgets.example.com`, as upstream qualifies resources in messages.
    pub fn qualified_resource(&self) -> String {
        if self.group.is_empty() {
            self.resource.to_string()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }

    fn details(&self) -> Details {
        Details {
            name: self.name.to_string(),
            group: self.group.to_string(),
            kind: self.resource.to_string(),
            ..Details::default()
        }
    }
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    pub fn with_details(mut self, details: Details) -> Self {
        self.details = Some(Box::new(details));
        self
    }

    pub fn not_found(target: Target<'_>) -> Self {
        ApiError::new(
            404,
            "NotFound",
            format!(
                "{} \"{}\" not found",
                target.qualified_resource(),
                target.name
            ),
        )
        .with_details(target.details())
    }

    pub fn namespace_not_found(namespace: &str) -> Self {
        ApiError::not_found(Target {
            group: "",
            resource: "namespaces",
            name: namespace,
        })
    }

    pub fn already_exists(target: Target<'_>) -> Self {
        ApiError::new(
            409,
            "AlreadyExists",
            format!(
                "{} \"{}\" already exists",
                target.qualified_resource(),
                target.name
            ),
        )
        .with_details(target.details())
    }

    /// Optimistic-concurrency failure on a stale `resourceVersion`.
    pub fn conflict(target: Target<'_>, why: &str) -> Self {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{}\": {}",
                target.qualified_resource(),
                target.name,
                why
            ),
        )
        .with_details(target.details())
    }

    pub fn stale_resource_version(target: Target<'_>) -> Self {
        ApiError::conflict(
            target,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 with field causes, worded like upstream:
    /// `ConfigMap "x" is invalid: [metadata.name: Invalid value: …, …]`.
    pub fn invalid(kind: &str, group: &str, name: &str, errors: &[FieldError]) -> Self {
        ApiError::new(
            422,
            "Invalid",
            crate::validation::invalid_message(kind, group, name, errors),
        )
        .with_details(Details {
            name: name.to_string(),
            group: group.to_string(),
            kind: kind.to_string(),
            causes: errors
                .iter()
                .map(|e| Cause {
                    reason: e.reason.cause_reason().to_string(),
                    message: e.body(),
                    field: e.field.clone(),
                })
                .collect(),
            ..Details::default()
        })
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(400, "BadRequest", message)
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        ApiError::new(401, "Unauthorized", message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        ApiError::new(403, "Forbidden", message)
    }

    /// Upstream's `NewForbidden`: `configmaps "x" is forbidden: <why>`, or without a name
    /// `configmaps is forbidden: <why>`, or for no resource at all `forbidden: <why>`.
    pub fn forbidden_on(target: Target<'_>, why: &str) -> Self {
        let message = match (target.resource.is_empty(), target.name.is_empty()) {
            (true, _) => format!("forbidden: {why}"),
            (false, true) => format!("{} is forbidden: {why}", target.qualified_resource()),
            (false, false) => format!(
                "{} {:?} is forbidden: {why}",
                target.qualified_resource(),
                target.name
            ),
        };
        ApiError::forbidden(message).with_details(target.details())
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        ApiError::new(405, "MethodNotAllowed", message)
    }

    pub fn not_acceptable(message: impl Into<String>) -> Self {
        ApiError::new(406, "NotAcceptable", message)
    }

    /// 410 for a list `continue` token or a resourceVersion older than the retained history.
    pub fn expired(message: impl Into<String>) -> Self {
        ApiError::new(410, "Expired", message)
    }

    pub fn request_entity_too_large(message: impl Into<String>) -> Self {
        ApiError::new(413, "RequestEntityTooLarge", message)
    }

    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        ApiError::new(415, "UnsupportedMediaType", message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        ApiError::new(500, "InternalError", message)
    }

    pub fn service_unavailable(message: impl Into<String>) -> Self {
        ApiError::new(503, "ServiceUnavailable", message)
    }

    /// The `Status` object clients decode.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "code": self.code,
        });
        // Upstream's `Status.reason` is `omitempty`: a Status without one (a conversion
        // webhook's failure, say) leaves the field out rather than sending "".
        if !self.reason.is_empty() {
            status["reason"] = json!(self.reason);
        }
        if let Some(details) = &self.details {
            status["details"] = details_json(details);
        }
        status
    }
}

fn details_json(details: &Details) -> Value {
    let mut out = serde_json::Map::new();
    if !details.name.is_empty() {
        out.insert("name".into(), json!(details.name));
    }
    if !details.group.is_empty() {
        out.insert("group".into(), json!(details.group));
    }
    if !details.kind.is_empty() {
        out.insert("kind".into(), json!(details.kind));
    }
    if !details.uid.is_empty() {
        out.insert("uid".into(), json!(details.uid));
    }
    if !details.causes.is_empty() {
        let causes: Vec<Value> = details
            .causes
            .iter()
            .map(|c| {
                // Every field of upstream's `StatusCause` is `omitempty` too.
                let mut cause = serde_json::Map::new();
                for (key, value) in [
                    ("reason", &c.reason),
                    ("message", &c.message),
                    ("field", &c.field),
                ] {
                    if !value.is_empty() {
                        cause.insert(key.into(), json!(value));
                    }
                }
                Value::Object(cause)
            })
            .collect();
        out.insert("causes".into(), Value::Array(causes));
    }
    if let Some(seconds) = details.retry_after_seconds {
        out.insert("retryAfterSeconds".into(), json!(seconds));
    }
    Value::Object(out)
}

/// A success `Status`, as upstream returns for deletions of kinds that do not return the
/// deleted object (deletion-semantics D12: no `code`, plural resource in `details.kind`).
pub fn success_status(target: Target<'_>, uid: &str) -> Value {
    let mut details = serde_json::Map::new();
    details.insert("name".into(), json!(target.name));
    if !target.group.is_empty() {
        details.insert("group".into(), json!(target.group));
    }
    details.insert("kind".into(), json!(target.resource));
    details.insert("uid".into(), json!(uid));
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
}

impl From<finale_store::StoreError> for ApiError {
    fn from(error: finale_store::StoreError) -> Self {
        use finale_store::StoreError;
        match error {
            StoreError::Compacted {
                requested,
                compacted,
            } => ApiError::expired(format!(
                "too old resource version: {requested} ({compacted})"
            )),
            StoreError::FutureRevision { requested, current } => ApiError::new(
                504,
                "Timeout",
                format!("Too large resource version: {requested}, current: {current}"),
            )
            .with_details(Details {
                retry_after_seconds: Some(1),
                ..Details::default()
            }),
            StoreError::Closed => ApiError::service_unavailable("the server is shutting down"),
            // Storage down: a retryable 503 naming the cause (kube-apiserver answers 500
            // with the raw etcd error; a 503 tells clients and load balancers to retry).
            StoreError::Unavailable { reason } => {
                ApiError::service_unavailable(format!("storage is unavailable: {reason}"))
                    .with_details(Details {
                        retry_after_seconds: Some(1),
                        ..Details::default()
                    })
            }
            StoreError::Timeout { reason } => ApiError::new(
                504,
                "Timeout",
                format!("storage did not answer in time: {reason}"),
            )
            .with_details(Details {
                retry_after_seconds: Some(1),
                ..Details::default()
            }),
            other => ApiError::internal(format!("storage error: {other}")),
        }
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use super::*;

    /// Upstream leaves an empty `reason` out of a `Status` (and of its causes) rather than
    /// sending `"reason": ""`: clients that test for the field's presence see none.
    #[test]
    fn an_empty_reason_is_left_out_of_the_status() {
        let status = ApiError::new(500, "", "conversion webhook failed").to_status();
        assert!(status.get("reason").is_none(), "{status}");
        assert_eq!(status["code"], 500);

        let mut cause_only = ApiError::new(422, "Invalid", "invalid");
        cause_only.details = Some(Box::new(Details {
            causes: vec![Cause {
                reason: String::new(),
                message: "bad".into(),
                field: String::new(),
            }],
            ..Details::default()
        }));
        let status = cause_only.to_status();
        assert_eq!(status["reason"], "Invalid");
        assert_eq!(status["details"]["causes"][0], json!({"message": "bad"}));
    }
}
