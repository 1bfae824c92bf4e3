//! The audit event (`audit.k8s.io/v1` `Event`) and its life through a request's stages, as
//! upstream's `pkg/audit/request.go` and `pkg/endpoints/filters/audit.go` fill it.
//!
//! Serialized with upstream's field names, in upstream's field order, omitting what upstream
//! omits (`omitempty`); maps are sorted, as Go's encoder sorts map keys.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Serialize, Serializer};
use serde_json::Value;

use crate::policy::{Level, RequestAttributes, RequestAuditConfig, Stage};

#[cfg(test)]
mod tests;

/// Upstream truncates longer `User-Agent`s (`maxUserAgentLength`) …
const MAX_USER_AGENT_BYTES: usize = 1024;
/// … and marks them so.
const USER_AGENT_TRUNCATED: &str = "...TRUNCATED";

/// One audit event: one JSON line of the audit log.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    #[serde(serialize_with = "kind")]
    kind: (),
    #[serde(serialize_with = "api_version")]
    api_version: (),
    /// The level the policy chose; never `None` in a written event.
    pub level: Level,
    /// The request's id: its `Audit-ID` header, else a fresh UUID. The response carries it in
    /// `Audit-ID` too.
    #[serde(rename = "auditID")]
    pub audit_id: String,
    /// The stage this event was written at.
    pub stage: Stage,
    /// Path and query of the request.
    #[serde(rename = "requestURI")]
    pub request_uri: String,
    /// The authorizer's verb.
    pub verb: String,
    /// The authenticated user.
    pub user: UserInfo,
    /// The user the request impersonates, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub impersonated_user: Option<UserInfo>,
    /// The client and the proxies it came through, as upstream's `utilnet.SourceIPs`.
    #[serde(rename = "sourceIPs", skip_serializing_if = "Vec::is_empty")]
    pub source_ips: Vec<String>,
    /// The `User-Agent` header, truncated to 1024 bytes.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub user_agent: String,
    /// The object, for resource requests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_ref: Option<ObjectReference>,
    /// The outcome; absent at `RequestReceived`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_status: Option<ResponseStatus>,
    /// The request body, at levels `Request` and `RequestResponse`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_object: Option<Value>,
    /// The response body, at level `RequestResponse`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_object: Option<Value>,
    /// When the request arrived.
    #[serde(serialize_with = "micro_time")]
    pub request_received_timestamp: DateTime<Utc>,
    /// When this stage was reached.
    #[serde(serialize_with = "micro_time")]
    pub stage_timestamp: DateTime<Utc>,
    /// Annotations from the request's handlers (`authorization.k8s.io/decision`, …).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// `authentication.k8s.io/v1` `UserInfo`; every field omitted when empty.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct UserInfo {
    /// The user name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub username: String,
    /// The user's uid.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// The user's groups.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// Extra attributes from the authenticator.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

/// The object a resource request is about; every field omitted when empty.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    /// The resource (`pods`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource: String,
    /// The namespace.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The object's name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The object's uid, from the request body.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// The API group, `""` (omitted) for core.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    /// The API version.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// The object's resourceVersion, from the request body.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    /// The subresource (`status`, `log`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subresource: String,
}

/// The outcome of a request: a `meta/v1` `Status` with only the fields upstream copies.
/// Serialized as `{"metadata":{},"code":200}` for a success, with `status`, `message`,
/// `reason` (and `details`) for a failure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResponseStatus {
    /// Go's encoder writes the empty `ListMeta` struct, `omitempty` notwithstanding.
    metadata: EmptyObject,
    /// `Success` or `Failure`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub status: String,
    /// A human-readable description.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// A machine-readable reason (`NotFound`, `Forbidden`, …).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// The Status's `details`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    /// The HTTP status code; omitted when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub code: i32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
struct EmptyObject {}

impl ResponseStatus {
    /// Only the HTTP code: what upstream records for a response that is not a `Status`.
    pub fn code(code: u16) -> ResponseStatus {
        ResponseStatus {
            metadata: EmptyObject {},
            status: String::new(),
            message: String::new(),
            reason: String::new(),
            details: None,
            code: i32::from(code),
        }
    }

    /// A failure, as the `Status` body the server sent.
    pub fn failure(code: u16, reason: &str, message: &str) -> ResponseStatus {
        ResponseStatus {
            status: "Failure".to_owned(),
            message: message.to_owned(),
            reason: reason.to_owned(),
            ..ResponseStatus::code(code)
        }
    }

    /// What upstream records when the handler panicked.
    pub fn panic(what: &str) -> ResponseStatus {
        ResponseStatus::failure(500, "InternalError", &format!("APIServer panic'd: {what}"))
    }

    /// The bounded fields of a `v1` `Status` response body; `None` for any other object.
    pub fn from_status_object(object: &Value) -> Option<ResponseStatus> {
        if object.get("kind")?.as_str()? != "Status" || object.get("apiVersion")? != "v1" {
            return None;
        }
        let text = |field: &str| {
            object
                .get(field)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        Some(ResponseStatus {
            metadata: EmptyObject {},
            status: text("status"),
            message: text("message"),
            reason: text("reason"),
            details: object.get("details").filter(|d| !d.is_null()).cloned(),
            code: object
                .get("code")
                .and_then(Value::as_i64)
                .and_then(|code| i32::try_from(code).ok())
                .unwrap_or(0),
        })
    }

    /// Upstream's stand-in when a request ended without a status code being written.
    fn connection_closed_early() -> ResponseStatus {
        ResponseStatus {
            status: "Success".to_owned(),
            message: "Connection closed early".to_owned(),
            ..ResponseStatus::code(200)
        }
    }
}

/// What the HTTP layer knows about a request, beyond the authorizer's attributes.
#[derive(Debug, Clone, Default)]
pub struct RequestMetadata {
    /// The request's `Audit-ID` header, if it had one.
    pub audit_id: Option<String>,
    /// Path and query (`/api/v1/namespaces/default/pods?limit=500`).
    pub request_uri: String,
    /// The authenticated user (empty when authentication failed).
    pub user: UserInfo,
    /// The client and proxies: `X-Forwarded-For` entries, then `X-Real-Ip` if not among
    /// them, then the peer address unless it is the last one already (`utilnet.SourceIPs`).
    pub source_ips: Vec<String>,
    /// The `User-Agent` header.
    pub user_agent: String,
    /// When the request arrived.
    pub received_at: DateTime<Utc>,
}

/// One request's audit event, carried through its stages.
///
/// ```
/// # use finale_audit::*;
/// let policy = Policy::default_metadata();
/// let request = RequestAttributes { user: Some("alice"), verb: "create", resource_request: true,
///     resource: "pods", api_version: "v1", namespace: "default", ..Default::default() };
/// let config = policy.evaluate(&request);
/// if let Some(mut audit) = RequestAudit::new(config, &request, RequestMetadata::default()) {
///     // Each stage's event, unless the policy omits it, goes to `AuditLog::log`.
///     assert!(audit.stage(Stage::RequestReceived, None).is_none()); // omitted by this policy
///     audit.annotate("authorization.k8s.io/decision", "allow");
///     // … the request is handled …
///     let event = audit.stage(Stage::ResponseComplete, Some(ResponseStatus::code(201)));
///     assert!(event.is_some());
/// }
/// ```
#[derive(Debug, Clone)]
pub struct RequestAudit {
    config: RequestAuditConfig,
    event: Event,
}

impl RequestAudit {
    /// Starts the event at `RequestReceived`; `None` when the level is `None` (nothing is
    /// recorded for the request).
    pub fn new(
        config: RequestAuditConfig,
        request: &RequestAttributes<'_>,
        metadata: RequestMetadata,
    ) -> Option<RequestAudit> {
        if config.level == Level::None {
            return None;
        }
        let object_ref = request.resource_request.then(|| ObjectReference {
            resource: request.resource.to_owned(),
            namespace: request.namespace.to_owned(),
            name: request.name.to_owned(),
            api_group: request.api_group.to_owned(),
            api_version: request.api_version.to_owned(),
            subresource: request.subresource.to_owned(),
            ..ObjectReference::default()
        });
        let event = Event {
            kind: (),
            api_version: (),
            level: config.level,
            audit_id: metadata
                .audit_id
                .filter(|id| !id.is_empty())
                .unwrap_or_else(new_audit_id),
            stage: Stage::RequestReceived,
            request_uri: metadata.request_uri,
            verb: request.verb.to_owned(),
            user: metadata.user,
            impersonated_user: None,
            source_ips: metadata.source_ips,
            user_agent: truncate_user_agent(metadata.user_agent),
            object_ref,
            response_status: None,
            request_object: None,
            response_object: None,
            request_received_timestamp: metadata.received_at,
            stage_timestamp: metadata.received_at,
            annotations: BTreeMap::new(),
        };
        Some(RequestAudit { config, event })
    }

    /// What the policy decided for this request.
    pub fn config(&self) -> RequestAuditConfig {
        self.config
    }

    /// The event as it stands.
    pub fn event(&self) -> &Event {
        &self.event
    }

    /// The request's audit id, for the `Audit-ID` response header.
    pub fn audit_id(&self) -> &str {
        &self.event.audit_id
    }

    /// Records the user the request impersonates.
    pub fn impersonated_user(&mut self, user: UserInfo) {
        self.event.impersonated_user = Some(user);
    }

    /// Records the decoded request body: its namespace, name, uid and resourceVersion fill
    /// the empty fields of `objectRef` (at every level, as upstream), and the body itself is
    /// kept at `Request` and above, without managed fields if the policy says so. Cloned only
    /// when kept.
    pub fn request_object(&mut self, object: &Value) {
        let object_ref = self.event.object_ref.get_or_insert_with(Default::default);
        let meta = |field: &str| {
            object
                .pointer(&format!("/metadata/{field}"))
                .and_then(Value::as_str)
        };
        for (slot, field) in [
            (&mut object_ref.namespace, "namespace"),
            (&mut object_ref.name, "name"),
            (&mut object_ref.uid, "uid"),
            (&mut object_ref.resource_version, "resourceVersion"),
        ] {
            if slot.is_empty() {
                meta(field).unwrap_or_default().clone_into(slot);
            }
        }
        if self.config.level >= Level::Request {
            self.event.request_object = Some(self.body(object));
        }
    }

    /// Records a patch as the request body, as it was sent (upstream's `LogRequestPatch`:
    /// managed fields are not removed from patches). A YAML apply patch must be converted to
    /// JSON first.
    pub fn request_patch(&mut self, patch: &Value) {
        if self.config.level >= Level::Request {
            self.event.request_object = Some(patch.clone());
        }
    }

    /// Records the response body: a `Status` sets `responseStatus` (at every level), and the
    /// body is kept at `RequestResponse`, without managed fields if the policy says so.
    pub fn response_object(&mut self, object: &Value) {
        if let Some(status) = ResponseStatus::from_status_object(object) {
            self.event.response_status = Some(status);
        }
        if self.config.level >= Level::RequestResponse {
            self.event.response_object = Some(self.body(object));
        }
    }

    /// Adds an annotation. As upstream, a key keeps its first value: a different later value
    /// is dropped with a warning.
    pub fn annotate(&mut self, key: impl Into<String>, value: impl Into<String>) {
        let (key, value) = (key.into(), value.into());
        match self.event.annotations.get(&key) {
            Some(existing) if *existing != value => tracing::warn!(
                audit_id = %self.event.audit_id, %key, %existing, dropped = %value,
                "audit annotation already set; keeping the first value"
            ),
            Some(_) => {}
            None => {
                self.event.annotations.insert(key, value);
            }
        }
    }

    /// Moves the event to `stage`, now; see [`RequestAudit::stage_at`].
    pub fn stage(&mut self, stage: Stage, status: Option<ResponseStatus>) -> Option<&Event> {
        self.stage_at(stage, status, Utc::now())
    }

    /// Moves the event to `stage` at time `now` and returns it to be logged, or `None` when
    /// the policy omits that stage.
    ///
    /// `status` replaces the recorded status; `None` keeps what [`RequestAudit::response_object`]
    /// recorded. A `ResponseComplete` without any status gets upstream's stand-in (200,
    /// "Connection closed early"). `RequestReceived` is stamped with the arrival time, as
    /// upstream.
    pub fn stage_at(
        &mut self,
        stage: Stage,
        status: Option<ResponseStatus>,
        now: DateTime<Utc>,
    ) -> Option<&Event> {
        let event = &mut self.event;
        event.stage = stage;
        if let Some(status) = status {
            event.response_status = Some(status);
        }
        if stage == Stage::ResponseComplete && event.response_status.is_none() {
            event.response_status = Some(ResponseStatus::connection_closed_early());
        }
        event.stage_timestamp = match stage {
            Stage::RequestReceived => event.request_received_timestamp,
            _ => now,
        };
        (!self.config.omit_stages.contains(stage)).then_some(&self.event)
    }

    fn body(&self, object: &Value) -> Value {
        let mut object = object.clone();
        if self.config.omit_managed_fields {
            strip_managed_fields(&mut object);
        }
        object
    }
}

/// Removes `metadata.managedFields` from an object, from each item of a list, and from each
/// row's object of a `Table`, as upstream's `copyWithoutManagedFields`.
fn strip_managed_fields(object: &mut Value) {
    fn strip_one(object: &mut Value) {
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
    }
    strip_one(object);
    if let Some(items) = object.get_mut("items").and_then(Value::as_array_mut) {
        items.iter_mut().for_each(strip_one);
    }
    if object.get("kind").and_then(Value::as_str) == Some("Table")
        && let Some(rows) = object.get_mut("rows").and_then(Value::as_array_mut)
    {
        for row in rows {
            if let Some(row_object) = row.get_mut("object") {
                strip_one(row_object);
            }
        }
    }
}

fn truncate_user_agent(mut user_agent: String) -> String {
    if user_agent.len() > MAX_USER_AGENT_BYTES {
        // Upstream cuts at a byte; cutting at a character keeps the line valid UTF-8.
        let mut end = MAX_USER_AGENT_BYTES;
        while !user_agent.is_char_boundary(end) {
            end -= 1;
        }
        user_agent.truncate(end);
        user_agent.push_str(USER_AGENT_TRUNCATED);
    }
    user_agent
}

fn kind<S: Serializer>(_: &(), serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str("Event")
}

fn api_version<S: Serializer>(_: &(), serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str("audit.k8s.io/v1")
}

/// `metav1.MicroTime`: RFC 3339 in UTC with exactly six fractional digits. chrono's RFC 3339
/// writer rather than a `format` string, which would be parsed again for every event.
fn micro_time<S: Serializer>(time: &DateTime<Utc>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&time.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
}

/// A fresh random (version 4) UUID for a request without an `Audit-ID` header, from the
/// thread's seeded generator: `Uuid::new_v4` asks the kernel for every id, a system call on
/// every audited request.
fn new_audit_id() -> String {
    uuid::Builder::from_random_bytes(rand::random())
        .into_uuid()
        .to_string()
}

fn is_zero(code: &i32) -> bool {
    *code == 0
}
