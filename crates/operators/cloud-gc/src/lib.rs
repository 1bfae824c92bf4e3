//! External-resource garbage collection: a `CloudCluster` object stands for a cluster's
//! footprint in one cloud account, and deleting it deletes every cloud resource tagged as owned
//! by the cluster (load balancers, target groups, security groups, ENIs, Elastic IPs and, on
//! request, EBS volumes), in dependency order, before the object goes.
//!
//! - [`annotations`]: the opt-out and tasks annotations and their validation;
//! - [`cloud`]: what the engine needs from a cloud, as a trait (the AWS SDK implementation is
//!   in `finale-cloud-aws`, so this crate builds and tests without the SDK);
//! - [`engine`]: discovery, ownership, the dependency graph and the deletion passes;
//! - [`crd`] and [`reconciler`]: the operator, on the Finale operator toolkit.

pub mod annotations;
pub mod cloud;
pub mod crd;
pub mod engine;
pub mod reconciler;

pub use crd::{CloudCluster, CloudClusterSpec, CloudClusterStatus};
pub use reconciler::{CloudGcReconciler, GC_FINALIZER, GcSettings};

use kube::CustomResourceExt;

/// The CustomResourceDefinition of `cloudclusters.cloud.finale.dev`.
pub fn custom_resource_definition()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    CloudCluster::crd()
}

/// What this operator's ClusterRole grants, beyond what every toolkit operator needs
/// (`finale_operator::rbac`).
pub const RBAC_RULES: &[finale_operator::rbac::Rule] = &[
    // The CloudCluster, its finalizers, annotations and status.
    finale_operator::rbac::Rule {
        groups: &["cloud.finale.dev"],
        resources: &["cloudclusters"],
        verbs: &["get", "list", "watch", "patch", "update"],
        names: &[],
    },
    finale_operator::rbac::Rule {
        groups: &["cloud.finale.dev"],
        resources: &["cloudclusters/status"],
        verbs: &["get", "patch", "update"],
        names: &[],
    },
    // The cloud credentials a CloudCluster names, held by a finalizer while in use.
    finale_operator::rbac::Rule {
        groups: &[""],
        resources: &["secrets"],
        verbs: &["get", "list", "watch", "patch"],
        names: &[],
    },
];

/// This operator's least privilege: `finale operator cloud-gc --print-rbac` prints it.
pub fn permissions() -> finale_operator::rbac::Permissions {
    finale_operator::rbac::Permissions {
        name: "cloud-gc",
        crds: vec![CloudCluster::crd_name().to_string()],
        rules: RBAC_RULES,
    }
}
