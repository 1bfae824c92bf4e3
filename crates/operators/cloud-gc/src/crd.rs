//! The `cloudclusters.cloud.finale.dev` custom resource: one cluster's footprint in one cloud
//! account.
//!
//! Its two annotations ([`crate::annotations`]) switch GC off and pick the tasks. `clusterName`
//! is recorded in `status` at the first reconcile and cleanup uses the record, so editing the
//! spec later cannot redirect a teardown at another cluster's resources.

use finale_operator::condition::DeletionProgress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A cluster's footprint in one cloud account; deleting it deletes the cloud resources the
/// cluster owns.
// kube-derive's repeated `printcolumn(...)` arguments look alike to clippy.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "cloud.finale.dev",
    version = "v1alpha1",
    kind = "CloudCluster",
    namespaced,
    shortname = "ccl",
    status = "CloudClusterStatus",
    printcolumn(name = "Provider", type_ = "string", json_path = ".spec.provider"),
    printcolumn(name = "Region", type_ = "string", json_path = ".spec.region"),
    printcolumn(name = "Cluster", type_ = "string", json_path = ".status.clusterName"),
    printcolumn(name = "GC", type_ = "string", json_path = ".status.gc"),
    printcolumn(name = "Remaining", type_ = "integer", json_path = ".status.remaining"),
    printcolumn(
        name = "Deleted",
        type_ = "integer",
        json_path = ".status.deletedTotal"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct CloudClusterSpec {
    /// The cloud; only `aws` for now.
    pub provider: Provider,
    /// The region the cluster's resources are in, e.g. `us-east-1`.
    pub region: String,
    /// A URL that replaces every service endpoint (an emulator, a private endpoint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// A Secret in this namespace with `AccessKeyID`, `SecretAccessKey` and optionally
    /// `SessionToken` (CAPA's keys). Absent: the SDK's default credential chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret_ref: Option<SecretRef>,
    /// The cluster whose `kubernetes.io/cluster/<clusterName>=owned` tag marks ownership.
    /// Default: the object's name. Recorded at the first reconcile; it cannot change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "spec.clusterName cannot change: create a new CloudCluster instead"
    ))]
    pub cluster_name: Option<String>,
    /// Also own what the AWS Load Balancer Controller tags `elbv2.k8s.aws/cluster: <clusterName>`.
    #[serde(default)]
    pub load_balancer_controller_tags: bool,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    Aws,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretRef {
    pub name: String,
}

/// One owned resource still there during a deletion.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InventoryItem {
    /// `load-balancer`, `classic-load-balancer`, `target-group`, `security-group`,
    /// `network-interface`, `elastic-ip` or `volume`.
    #[serde(rename = "type")]
    pub type_: String,
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `Pending` (next pass), `Blocked`, `Failed` or `Kept` (owned but not collected).
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// What must go first (or, for `Kept`, why it stays).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked_by: Vec<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloudClusterStatus {
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The cluster name ownership is decided on, recorded at the first reconcile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_name: Option<String>,
    /// `Enabled` or `Disabled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gc: Option<String>,
    /// The tasks GC runs, comma-separated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<String>,
    /// Owned resources: while the object lives (GC enabled), what deleting it will remove,
    /// refreshed every `--inventory-interval`; during deletion, what is still there. Its
    /// `FinalizerClaim` points `finale plan` and `finale explain` here (`inventoryPath`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inventory: Vec<InventoryItem>,
    /// When the live inventory was last discovered (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory_time: Option<String>,
    /// During deletion: how many resources are left to delete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining: Option<u32>,
    /// Resources deleted so far, by type.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub deleted: std::collections::BTreeMap<String, u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted_total: Option<u32>,
    /// Consecutive deletion passes that were blocked, for the retry backoff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_passes: Option<u32>,
    /// Where the teardown stands while the object is terminating (the toolkit's record).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion: Option<DeletionProgress>,
}
