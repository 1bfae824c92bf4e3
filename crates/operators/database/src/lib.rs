//! The Database operator: a `Database` object in Kubernetes stands for a logical database on
//! an external PostgreSQL server; deleting the object drops the database, then its role.
//!
//! Built on the Finale operator toolkit (`finale-operator`), so it gets ordered finalizers, the
//! `Deleting` condition, backoff with jitter, a DDL rate limit per PostgreSQL server, metrics
//! and leader election. It talks to the Kubernetes API only over HTTPS through kube-rs, so it
//! runs against Finale and against any real cluster alike.

pub mod connection;
pub mod crd;
pub mod postgres;
pub mod reconciler;

pub use connection::Timeouts;
pub use crd::{Database, DatabaseSpec, DatabaseStatus, SecretKeyRef};
pub use reconciler::DatabaseReconciler;

use kube::CustomResourceExt;

/// The CustomResourceDefinition of `databases.finale.dev`.
pub fn custom_resource_definition()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    Database::crd()
}

/// What this operator's ClusterRole grants, beyond what every toolkit operator needs
/// (`finale_operator::rbac`).
pub const RBAC_RULES: &[finale_operator::rbac::Rule] = &[
    // The Database itself, its finalizers and its status.
    finale_operator::rbac::Rule {
        groups: &["finale.dev"],
        resources: &["databases"],
        verbs: &["get", "list", "watch", "patch", "update"],
        names: &[],
    },
    finale_operator::rbac::Rule {
        groups: &["finale.dev"],
        resources: &["databases/status"],
        verbs: &["get", "patch", "update"],
        names: &[],
    },
    // The admin credentials a Database names, watched for rotation and held by a finalizer
    // while a Database uses them.
    finale_operator::rbac::Rule {
        groups: &[""],
        resources: &["secrets"],
        verbs: &["get", "list", "watch", "patch"],
        names: &[],
    },
];

/// This operator's least privilege: `finale operator database --print-rbac` prints it.
pub fn permissions() -> finale_operator::rbac::Permissions {
    finale_operator::rbac::Permissions {
        name: "database",
        crds: vec![Database::crd_name().to_string()],
        rules: RBAC_RULES,
    }
}
