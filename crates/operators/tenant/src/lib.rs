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
