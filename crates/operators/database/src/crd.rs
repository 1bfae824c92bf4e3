//! The `databases.finale.dev` custom resource.

use finale_operator::condition::DeletionProgress;
use finale_operator::policy::DeletionPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A logical database on an external PostgreSQL server, dropped when this object is deleted.
// kube-derive's repeated `printcolumn(...)` arguments look alike to clippy.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
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
    pub db_name: String,
    /// The role that owns the database; created if missing (and then dropped with it).
    pub owner: String,
    /// `Delete` (default) drops the database when this object is deleted; `Orphan` keeps it.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
    /// The Secret, in this namespace, holding the server's PostgreSQL connection URL.
    pub connection_secret_ref: SecretKeyRef,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
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
    /// The database this object created and will drop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub db_name: Option<String>,
    /// Where the teardown stands while the object is terminating.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion: Option<DeletionProgress>,
}
