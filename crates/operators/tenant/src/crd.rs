//! The `tenants.finale.dev` custom resource.

use std::collections::BTreeMap;

use finale_operator::condition::DeletionProgress;
use finale_operator::policy::DeletionPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A tenant: namespaces it owns (and optionally a database in each), all deleted with it.
// kube-derive's repeated `printcolumn(...)` arguments look alike to clippy.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "finale.dev",
    version = "v1alpha1",
    kind = "Tenant",
    shortname = "tn",
    status = "TenantStatus",
    printcolumn(
        name = "Namespaces",
        type_ = "integer",
        json_path = ".status.namespacesReady"
    ),
    printcolumn(name = "State", type_ = "string", json_path = ".status.state"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct TenantSpec {
    /// The namespaces to create: `names`, or `count` namespaces named `<prefix><i>`.
    pub namespaces: NamespaceSet,
    /// Labels stamped on every namespace.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations stamped on every namespace.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// A Database to create in every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database: Option<DatabaseTemplate>,
    /// A `CloudCluster` (the tenant's cloud footprint) to create in the first namespace, owned
    /// by the tenant: deleting the tenant waits until its cloud resources are gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud: Option<CloudTemplate>,
    /// A group bound to the `admin` ClusterRole in every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_group: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceSet {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    /// The prefix of counted namespaces; default `<tenant>-`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
}

/// The Database made in each namespace. Its `dbName` is `<tenant>_<namespace>` (with `-` as
/// `_`); the connection Secret (its URL and, if present, `ca.crt`) is copied into the
/// namespace. The template applies when a namespace's Database is created: a later edit
/// reaches namespaces created after it, never existing Databases, whose database, owner and
/// Secret cannot change.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DatabaseTemplate {
    /// The owner role; default `<tenant>_owner`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
    /// The Secret holding the PostgreSQL connection URL, in any namespace.
    pub connection_secret_ref: NamespacedSecretKeyRef,
}

/// The CloudCluster made in the tenant's first namespace, named `cloud`. Its credentials
/// Secret (if any) is copied there as `tenant-cloud-credentials`. Applied when the CloudCluster
/// is created; later edits do not change an existing one.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloudTemplate {
    pub provider: finale_operator_cloud_gc::crd::Provider,
    pub region: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// A Secret with `AccessKeyID` and `SecretAccessKey`, in any namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret_ref: Option<NamespacedSecretRef>,
    /// Default: the tenant's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_name: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespacedSecretRef {
    pub namespace: String,
    pub name: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespacedSecretKeyRef {
    pub namespace: String,
    pub name: String,
    #[serde(default = "default_key")]
    pub key: String,
}

fn default_key() -> String {
    "url".to_string()
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Namespaces of the spec that exist, are Active and belong to this tenant.
    #[serde(default)]
    pub namespaces_ready: u32,
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion: Option<DeletionProgress>,
}
