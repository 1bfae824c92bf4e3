//! Protobuf request bodies: what kubectl's typed clientset sends, turned into the JSON
//! objects the rest of the server handles (api-surface §10).
//!
//! kubectl's `create <generator>` commands (`create namespace`, `create deployment`, …)
//! POST `Content-Type: application/vnd.kubernetes.protobuf`, and a 415 does not make them
//! retry with JSON. The body is the 4 bytes `k8s\0` followed by a `runtime.Unknown`:
//! `typeMeta {apiVersion, kind}`, `raw` (the object in its `generated.proto` encoding),
//! `contentEncoding`, `contentType`. [`decode_object`] decodes `raw` with the `k8s-pb`
//! messages and writes the JSON Go's `encoding/json` would write for the same object,
//! without nulls — the k8s-openapi serde form (see `json.rs` for the rules per Go type).
//!
//! Kinds decoded (every kind a `kubectl create` generator sends, and `kubectl autoscale`'s):
//! core/v1 Namespace, ConfigMap, Secret, ServiceAccount, Service, Pod, ResourceQuota; apps/v1
//! Deployment, ReplicaSet; autoscaling/v1 HorizontalPodAutoscaler; batch/v1 Job, CronJob; networking.k8s.io/v1 Ingress; policy/v1
//! PodDisruptionBudget; scheduling.k8s.io/v1 PriorityClass; coordination.k8s.io/v1 Lease;
//! rbac.authorization.k8s.io/v1 Role, ClusterRole, RoleBinding, ClusterRoleBinding;
//! authorization.k8s.io/v1 SubjectAccessReview (and its self and local forms),
//! SelfSubjectRulesReview; authentication.k8s.io/v1 TokenRequest, TokenReview;
//! certificates.k8s.io/v1 CertificateSigningRequest.
//!
//! *Guarantees:* no data is lost silently. Every field of every decoded message is
//! converted (the `convert!` tables fail to compile otherwise); a few large subtrees are not
//! converted and a body that sets one is refused with 415 naming the field (pod
//! `affinity`, `ephemeralContainers`, a Pod's `status`, the in-tree cloud volume sources,
//! `ephemeral` volumes, clusterTrustBundle and podCertificate projections); a field number
//! `k8s-pb` does not know is refused with 415 too. Every 415 tells the user to send JSON.
//!
//! *Caveats:* quantities are passed through as the client wrote them (Go clients write
//! canonical ones); a field unknown to `k8s-pb` that holds a zero value is not detected.

mod apps;
mod authentication;
mod autoscaling;
mod batch;
mod certificates;
mod coordination;
mod core_v1;
mod json;
mod meta;
mod networking;
mod pod;
mod policy;
mod rbac;
mod scheduling;
mod volume;
mod wire;

#[cfg(test)]
mod tests;

use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use prost::Message;
use serde_json::Value;

use json::{Converted, FieldError, Problem};

/// The media type of Kubernetes protobuf bodies.
pub const PROTOBUF_MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The bytes every Kubernetes protobuf body starts with.
const MAGIC: &[u8; 4] = b"k8s\0";

/// What a user whose body is refused can do instead (verified: the client-side dry run
/// needs no server).
const JSON_WORKAROUND: &str = "send the object as JSON instead, e.g. `kubectl create … --dry-run=client -o yaml | kubectl apply -f -`";

/// Why a protobuf body was not turned into JSON.
#[derive(Debug, thiserror::Error)]
pub enum ProtobufError {
    /// The body does not start with `k8s\0`: 400.
    #[error("provided data does not appear to be a protobuf message, expected prefix \"k8s\\x00\"")]
    MissingPrefix,
    /// The `runtime.Unknown` envelope is not valid protobuf: 400.
    #[error("cannot decode the protobuf envelope: {0}")]
    Envelope(#[source] prost::DecodeError),
    /// The envelope names no kind: 400.
    #[error("Object 'Kind' is missing in the protobuf envelope")]
    MissingKind,
    /// The envelope's `raw` is compressed or in another serialization: 415.
    #[error(
        "protobuf envelope with contentEncoding {encoding:?} and contentType {content_type:?} is not supported; {JSON_WORKAROUND}"
    )]
    UnsupportedEncoding {
        encoding: String,
        content_type: String,
    },
    /// A kind this server does not decode from protobuf: 415.
    #[error(
        "protobuf request bodies of kind {kind} ({api_version}) are not supported; {JSON_WORKAROUND}"
    )]
    UnsupportedKind { api_version: String, kind: String },
    /// The object is not valid protobuf for its kind: 400.
    #[error("cannot decode {kind} ({api_version}) from protobuf: {source}")]
    Object {
        api_version: String,
        kind: String,
        #[source]
        source: prost::DecodeError,
    },
    /// The object sets a field this server does not convert from protobuf: 415.
    #[error("{kind} field {field} is not supported in protobuf request bodies; {JSON_WORKAROUND}")]
    UnsupportedField { kind: String, field: String },
    /// The object carries a field number unknown to this server: 415.
    #[error(
        "{kind} carries protobuf field {field_numbers} (field numbers from the object's top level), which this server does not know; {JSON_WORKAROUND}"
    )]
    UnknownField { kind: String, field_numbers: String },
    /// A field's value has no Kubernetes JSON form: 400.
    #[error("invalid {kind} field {field}: {reason}")]
    InvalidField {
        kind: String,
        field: String,
        reason: String,
    },
}

impl ProtobufError {
    /// The HTTP status code to answer with: 400 for a malformed body, 415 for what this
    /// server does not decode.
    pub fn status_code(&self) -> u16 {
        match self {
            ProtobufError::MissingPrefix
            | ProtobufError::Envelope(_)
            | ProtobufError::MissingKind
            | ProtobufError::Object { .. }
            | ProtobufError::InvalidField { .. } => 400,
            ProtobufError::UnsupportedEncoding { .. }
            | ProtobufError::UnsupportedKind { .. }
            | ProtobufError::UnsupportedField { .. }
            | ProtobufError::UnknownField { .. } => 415,
        }
    }
}

/// Decodes a protobuf request body into the JSON object it carries (apiVersion and kind set
/// from the envelope).
pub fn decode_object(body: &[u8]) -> Result<Value, ProtobufError> {
    let envelope = body
        .strip_prefix(MAGIC)
        .ok_or(ProtobufError::MissingPrefix)?;
    let Unknown {
        type_meta,
        raw,
        content_encoding,
        content_type,
    } = Unknown::decode(envelope).map_err(ProtobufError::Envelope)?;
    let TypeMeta { api_version, kind } = type_meta.unwrap_or_default();
    let (api_version, kind) = (api_version.unwrap_or_default(), kind.unwrap_or_default());
    if kind.is_empty() {
        return Err(ProtobufError::MissingKind);
    }
    let (encoding, content_type) = (
        content_encoding.unwrap_or_default(),
        content_type.unwrap_or_default(),
    );
    if !encoding.is_empty() || !(content_type.is_empty() || content_type == PROTOBUF_MEDIA_TYPE) {
        return Err(ProtobufError::UnsupportedEncoding {
            encoding,
            content_type,
        });
    }
    let object = ObjectBytes {
        api_version: &api_version,
        kind: &kind,
        raw: raw.as_deref().unwrap_or_default(),
    };
    let mut json = match (api_version.as_str(), kind.as_str()) {
        ("v1", "Namespace") => object.convert(core_v1::namespace),
        ("v1", "ConfigMap") => object.convert(core_v1::config_map),
        ("v1", "Secret") => object.convert(core_v1::secret),
        ("v1", "ServiceAccount") => object.convert(core_v1::service_account),
        ("v1", "Service") => object.convert(core_v1::service),
        ("v1", "Pod") => object.convert(pod::pod),
        ("v1", "Binding") => object.convert(core_v1::binding),
        ("v1", "ResourceQuota") => object.convert(core_v1::resource_quota),
        ("apps/v1", "Deployment") => object.convert(apps::deployment),
        ("apps/v1", "ReplicaSet") => object.convert(apps::replica_set),
        ("autoscaling/v1", "HorizontalPodAutoscaler") => {
            object.convert(autoscaling::horizontal_pod_autoscaler)
        }
        ("batch/v1", "Job") => object.convert(batch::job),
        ("batch/v1", "CronJob") => object.convert(batch::cron_job),
        ("networking.k8s.io/v1", "Ingress") => object.convert(networking::ingress),
        ("policy/v1", "PodDisruptionBudget") => object.convert(policy::pod_disruption_budget),
        ("scheduling.k8s.io/v1", "PriorityClass") => object.convert(scheduling::priority_class),
        ("coordination.k8s.io/v1", "Lease") => object.convert(coordination::lease),
        ("certificates.k8s.io/v1", "CertificateSigningRequest") => {
            object.convert(certificates::certificate_signing_request)
        }
        ("rbac.authorization.k8s.io/v1", "Role") => object.convert(rbac::role),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => object.convert(rbac::cluster_role),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => object.convert(rbac::role_binding),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            object.convert(rbac::cluster_role_binding)
        }
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview") => {
            object.convert(rbac::self_subject_access_review)
        }
        ("authorization.k8s.io/v1", "SubjectAccessReview") => {
            object.convert(rbac::subject_access_review)
        }
        ("authorization.k8s.io/v1", "LocalSubjectAccessReview") => {
            object.convert(rbac::local_subject_access_review)
        }
        ("authentication.k8s.io/v1", "TokenRequest") => {
            object.convert(authentication::token_request)
        }
        ("authentication.k8s.io/v1", "TokenReview") => object.convert(authentication::token_review),
        ("authorization.k8s.io/v1", "SelfSubjectRulesReview") => {
            object.convert(rbac::self_subject_rules_review)
        }
        _ => Err(ProtobufError::UnsupportedKind {
            api_version: api_version.clone(),
            kind: kind.clone(),
        }),
    }?;
    if let Value::Object(fields) = &mut json {
        fields.insert("apiVersion".to_string(), Value::String(api_version));
        fields.insert("kind".to_string(), Value::String(kind));
    }
    Ok(json)
}

/// The object inside an envelope, still in protobuf.
struct ObjectBytes<'a> {
    api_version: &'a str,
    kind: &'a str,
    raw: &'a [u8],
}

impl ObjectBytes<'_> {
    /// Decodes the object as message `M` and converts it, refusing fields prost skipped.
    fn convert<M: Message + Default>(
        &self,
        convert: fn(M) -> Converted,
    ) -> Result<Value, ProtobufError> {
        let message = M::decode(self.raw).map_err(|source| ProtobufError::Object {
            api_version: self.api_version.to_string(),
            kind: self.kind.to_string(),
            source,
        })?;
        if let Some(path) = wire::dropped_field(self.raw, &message.encode_to_vec()) {
            let numbers: Vec<String> = path.iter().map(u32::to_string).collect();
            return Err(ProtobufError::UnknownField {
                kind: self.kind.to_string(),
                field_numbers: numbers.join("."),
            });
        }
        convert(message).map_err(|error| self.field_error(error))
    }

    fn field_error(&self, error: FieldError) -> ProtobufError {
        let (kind, field) = (self.kind.to_string(), error.path());
        match error.problem {
            Problem::Unsupported => ProtobufError::UnsupportedField { kind, field },
            Problem::Invalid(reason) => ProtobufError::InvalidField {
                kind,
                field,
                reason,
            },
        }
    }
}
