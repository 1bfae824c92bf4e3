//! The `databases.finale.dev` custom resource.
//!
//! `spec.dbName`, `spec.owner` and `spec.connectionSecretRef` cannot change: they name what the
//! object creates and later drops. The schema says so with CEL transition rules
//! (`self == oldSelf`), which an API server that evaluates CEL enforces; the operator enforces
//! the same against what it recorded in `status` (see the reconciler), so it holds on servers
//! that do not evaluate CEL too (Finale's, for now).

use finale_operator::condition::DeletionProgress;
use finale_operator::policy::DeletionPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A logical database on an external PostgreSQL server, dropped when this object is deleted.
// kube-derive's repeated `printcolumn(...)` arguments look alike to clippy.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "finale.dev",
    version = "v1alpha1",
    kind = "Database",
    namespaced,
    shortname = "fdb",
    status = "DatabaseStatus",
    printcolumn(name = "DB", type_ = "string", json_path = ".spec.dbName"),
    printcolumn(name = "Owner", type_ = "string", json_path = ".spec.owner"),
    printcolumn(name = "State", type_ = "string", json_path = ".status.state"),
    printcolumn(name = "Policy", type_ = "string", json_path = ".spec.deletionPolicy"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct DatabaseSpec {
    /// The database's name on the server: 1 to 63 characters of `a-z`, `0-9` and `_`, not
    /// starting with a digit. It cannot change.
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "spec.dbName cannot change: create a new Database instead"
    ))]
    pub db_name: String,
    /// The role that owns the database; created if missing (and then dropped with it). It
    /// cannot change.
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "spec.owner cannot change: create a new Database instead"
    ))]
    pub owner: String,
    /// `Delete` (default) drops the database when this object is deleted; `Orphan` keeps it.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
    /// The Secret, in this namespace, holding the server's PostgreSQL connection URL (and,
    /// optionally, the server's CA under `ca.crt`). It cannot change; the Secret's content can.
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "spec.connectionSecretRef cannot change (the Secret's content can): create a new Database instead"
    ))]
    pub connection_secret_ref: SecretKeyRef,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    pub name: String,
    /// The key of the URL in the Secret's data.
    #[serde(default = "default_key")]
    pub key: String,
}

fn default_key() -> String {
    "url".to_string()
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DatabaseStatus {
    /// `Ready`, `Pending`, `Failed` (fix the spec) or `NotAdopted` (a database of that name
    /// exists that this object did not create; it is left alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The database this object manages and will drop. Recorded, with `owner` and
    /// `connectionSecretRef`, before anything is created; cleanup acts on these records, never
    /// on the spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub db_name: Option<String>,
    /// The role this object creates (or finds created by Finale) and will try to drop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The Secret this object connects with and keeps from going while it has cleanup to do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_secret_ref: Option<SecretKeyRef>,
    /// `host:port` of the PostgreSQL server the database is on (from the Secret's URL, without
    /// credentials): a Secret re-pointed at another server is refused rather than followed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// Where the teardown stands while the object is terminating.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion: Option<DeletionProgress>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

    #[test]
    fn the_schema_makes_the_identifying_fields_immutable() {
        let crd = serde_json::to_value(Database::crd()).expect("CRD as JSON");
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
        for field in ["dbName", "owner", "connectionSecretRef"] {
            let rules = &spec[field]["x-kubernetes-validations"];
            assert_eq!(rules[0]["rule"], "self == oldSelf", "{field}: {spec:#}");
            assert!(
                rules[0]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(field) && m.contains("cannot change")),
                "{field}: {rules}"
            );
        }
        assert!(
            spec["deletionPolicy"]
                .get("x-kubernetes-validations")
                .is_none()
        );
    }
}
