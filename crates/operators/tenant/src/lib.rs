//! The Tenant operator: a cluster-scoped `Tenant` owns namespaces (through controller owner
//! references) and, optionally, a `Database` in each. Deleting the tenant deletes them, and
//! the tenant's finalizer holds it until every namespace, and so every database, is gone.
//!
//! This is where Finale's parts compose: the garbage collector and the tenant's finalizer
//! delete the namespaces, the namespace controller deletes what is in them, the Database
//! operator drops the real databases, and only then do the namespaces and the tenant go.

pub mod crd;
pub mod reconciler;

pub use crd::{Tenant, TenantSpec, TenantStatus};
pub use reconciler::TenantReconciler;

use kube::CustomResourceExt;

/// The CustomResourceDefinition of `tenants.finale.dev`.
pub fn custom_resource_definition()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    Tenant::crd()
}

/// What this operator's ClusterRole grants, beyond what every toolkit operator needs
/// (`finale_operator::rbac`).
pub const RBAC_RULES: &[finale_operator::rbac::Rule] = &[
    // The Tenant, its finalizers and status; `tenants/finalizers` lets it set
    // blockOwnerDeletion on the objects it owns.
    finale_operator::rbac::Rule {
        groups: &["finale.dev"],
        resources: &["tenants"],
        verbs: &["get", "list", "watch", "patch", "update"],
        names: &[],
    },
    finale_operator::rbac::Rule {
        groups: &["finale.dev"],
        resources: &["tenants/status", "tenants/finalizers"],
        verbs: &["get", "patch", "update"],
        names: &[],
    },
    // Its namespaces, and in them a Database, a CloudCluster, copies of their Secrets and
    // the RoleBinding of its admin group.
    finale_operator::rbac::Rule {
        groups: &[""],
        resources: &["namespaces"],
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
        names: &[],
    },
    finale_operator::rbac::Rule {
        groups: &["finale.dev"],
        resources: &["databases"],
        verbs: &["get", "list", "watch", "create", "delete"],
        names: &[],
    },
    finale_operator::rbac::Rule {
        groups: &["cloud.finale.dev"],
        resources: &["cloudclusters"],
        verbs: &["get", "list", "watch", "create", "delete"],
        names: &[],
    },
    finale_operator::rbac::Rule {
        groups: &[""],
        resources: &["secrets"],
        verbs: &["get", "create"],
        names: &[],
    },
    finale_operator::rbac::Rule {
        groups: &["rbac.authorization.k8s.io"],
        resources: &["rolebindings"],
        verbs: &["get", "create"],
        names: &[],
    },
    // Binding `admin` without holding all of it (RBAC's escalation check).
    finale_operator::rbac::Rule {
        groups: &["rbac.authorization.k8s.io"],
        resources: &["clusterroles"],
        verbs: &["bind"],
        names: &["admin"],
    },
];

/// This operator's least privilege: `finale operator tenant --print-rbac` prints it.
pub fn permissions() -> finale_operator::rbac::Permissions {
    finale_operator::rbac::Permissions {
        name: "tenant",
        crds: vec![
            Tenant::crd_name().to_string(),
            finale_operator_database::Database::crd_name().to_string(),
            finale_operator_cloud_gc::CloudCluster::crd_name().to_string(),
        ],
        rules: RBAC_RULES,
    }
}
