//! The Tenant operator's reconciler.
//!
//! A tenant's namespaces carry its controller owner reference (with `blockOwnerDeletion`, as
//! controller-runtime's `SetControllerReference` sets it) and the label [`TENANT_LABEL`]. On
//! deletion the tenant's one finalizer deletes them and waits until they are really gone:
//! the namespace controller empties each one, the Database operator drops the databases in
//! them, and only then does the tenant go. With `--cascade=orphan` the garbage collector
//! first takes the owner references off, and the finalizer then finds nothing to delete.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use anyhow::Context as _;
use std::time::Duration;

use finale_operator::condition::{self, READY};
use finale_operator::events::EventType;
use finale_operator::runtime::{Applied, Cleanup, Context, Reconciler};
use finale_operator_cloud_gc::{CloudCluster, CloudClusterSpec};
use finale_operator_database::connection::CA_KEY;
use finale_operator_database::{Database, DatabaseSpec, SecretKeyRef};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::Controller;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use crate::crd::{Tenant, TenantStatus};

pub const NAMESPACES_FINALIZER: &str = "finale.dev/tenant-namespaces";
/// On every namespace (and Database) a tenant made: the tenant's name.
pub const TENANT_LABEL: &str = "finale.dev/tenant";
/// The copy of the connection Secret in each namespace.
pub const CONNECTION_SECRET: &str = "tenant-database-connection";
/// The Database in each namespace.
pub const DATABASE_NAME: &str = "database";
const ADMIN_BINDING: &str = "tenant-admins";
/// The CloudCluster in the first namespace (with a `cloud` template).
pub const CLOUD_CLUSTER_NAME: &str = "cloud";
/// The copy of the cloud credentials Secret next to it.
pub const CLOUD_SECRET: &str = "tenant-cloud-credentials";
const FINALIZERS: &[&str] = &[NAMESPACES_FINALIZER];
/// How often a tenant whose namespaces are still going is looked at, besides the watches.
const TEARDOWN_RECHECK: Duration = Duration::from_secs(10);

pub struct TenantReconciler;

/// The namespace names the spec asks for, or why the spec is invalid.
pub fn desired_namespaces(tenant: &Tenant) -> Result<Vec<String>, String> {
    let set = &tenant.spec.namespaces;
    let names: Vec<String> = match (set.names.is_empty(), set.count) {
        (false, None) => set.names.clone(),
        (true, Some(count)) => {
            if count > 1000 {
                return Err(format!(
                    "spec.namespaces.count {count} is more than 1000: split the tenant"
                ));
            }
            let prefix = set
                .prefix
                .clone()
                .unwrap_or_else(|| format!("{}-", tenant.name_any()));
            (0..count).map(|i| format!("{prefix}{i}")).collect()
        }
        (true, None) => {
            return Err(
                "spec.namespaces needs either `names` or `count` (with an optional `prefix`)"
                    .into(),
            );
        }
        (false, Some(_)) => {
            return Err("spec.namespaces takes `names` or `count`, not both".into());
        }
    };
    let mut seen = BTreeSet::new();
    for name in &names {
        if !is_dns_label(name) {
            return Err(format!(
                "namespace name {name:?} is not valid: use at most 63 characters of a-z, 0-9 and -, starting and ending with a letter or digit"
            ));
        }
        if !seen.insert(name) {
            return Err(format!("namespace {name:?} is listed twice"));
        }
    }
    Ok(names)
}

fn is_dns_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
}

/// `<tenant>_<namespace>` as a PostgreSQL name: `-` becomes `_`, at most 63 characters.
pub fn database_name(tenant: &str, namespace: &str) -> String {
    let mut name: String = format!("{tenant}_{namespace}").replace('-', "_");
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert(0, '_');
    }
    name.truncate(63);
    name
}

fn owner_reference(tenant: &Tenant) -> Option<OwnerReference> {
    let mut reference = tenant.controller_owner_ref(&())?;
    reference.block_owner_deletion = Some(true);
    Some(reference)
}

fn controlled_by(object: &impl Resource, uid: &str) -> bool {
    object
        .meta()
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true) && r.uid == uid)
}

impl TenantReconciler {
    /// Namespaces whose controller is this tenant.
    async fn owned_namespaces(client: &Client, tenant: &Tenant) -> anyhow::Result<Vec<Namespace>> {
        let uid = tenant.uid().unwrap_or_default();
        let namespaces: Api<Namespace> = Api::all(client.clone());
        // Every namespace, not only labelled ones: a person may have removed the label.
        let all = namespaces
            .list(&ListParams::default())
            .await
            .context("listing namespaces")?;
        Ok(all
            .items
            .into_iter()
            .filter(|ns| controlled_by(ns, &uid))
            .collect())
    }

    async fn ensure_namespace(
        client: &Client,
        tenant: &Tenant,
        name: &str,
    ) -> anyhow::Result<NamespaceState> {
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let uid = tenant.uid().unwrap_or_default();
        let mut labels = tenant.spec.labels.clone();
        labels.insert(TENANT_LABEL.to_string(), tenant.name_any());
        let annotations = tenant.spec.annotations.clone();
        let existing = namespaces
            .get_opt(name)
            .await
            .with_context(|| format!("reading namespace {name}"))?;
        let Some(namespace) = existing else {
            let namespace = Namespace {
                metadata: ObjectMeta {
                    name: Some(name.to_string()),
                    labels: Some(labels),
                    annotations: (!annotations.is_empty()).then_some(annotations),
                    owner_references: owner_reference(tenant).map(|r| vec![r]),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            };
            return match namespaces.create(&PostParams::default(), &namespace).await {
                Ok(_) => Ok(NamespaceState::Created),
                // Created by someone else meanwhile: look again on the next pass.
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    Ok(NamespaceState::Waiting("being created".into()))
                }
                Err(e) => Err(anyhow::anyhow!("creating namespace {name}: {e}")),
            };
        };
        if !controlled_by(&namespace, &uid) {
            return Ok(NamespaceState::Foreign);
        }
        if namespace.metadata.deletion_timestamp.is_some() {
            return Ok(NamespaceState::Waiting(
                "still terminating from an earlier delete".into(),
            ));
        }
        let current_labels = namespace.labels();
        let current_annotations = namespace.annotations();
        let stale = labels.iter().any(|(k, v)| current_labels.get(k) != Some(v))
            || annotations
                .iter()
                .any(|(k, v)| current_annotations.get(k) != Some(v));
        if stale {
            let patch = json!({"metadata": {"labels": labels, "annotations": annotations}});
            namespaces
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .with_context(|| format!("updating namespace {name}"))?;
        }
        Ok(NamespaceState::Ready)
    }

    /// The tenant's CloudCluster in its first namespace, owned by the tenant (controller,
    /// `blockOwnerDeletion`), with a copy of the credentials Secret.
    async fn ensure_cloud(client: &Client, tenant: &Tenant, namespace: &str) -> anyhow::Result<()> {
        let Some(template) = &tenant.spec.cloud else {
            return Ok(());
        };
        let tenant_name = tenant.name_any();
        let labels = BTreeMap::from([(TENANT_LABEL.to_string(), tenant_name.clone())]);
        let mut credentials = None;
        if let Some(source) = &template.credentials_secret_ref {
            let sources: Api<Secret> = Api::namespaced(client.clone(), &source.namespace);
            let secret = sources
                .get_opt(&source.name)
                .await
                .map_err(|e| {
                    anyhow::anyhow!("reading Secret {}/{}: {e}", source.namespace, source.name)
                })?
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "Secret {}/{} not found: it holds the cloud credentials of the tenant",
                        source.namespace,
                        source.name
                    )
                })?;
            let copy = Secret {
                metadata: ObjectMeta {
                    name: Some(CLOUD_SECRET.to_string()),
                    labels: Some(labels.clone()),
                    ..ObjectMeta::default()
                },
                data: secret.data.clone(),
                string_data: secret.string_data.clone(),
                ..Secret::default()
            };
            let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
            create_if_missing(&secrets, &copy, CLOUD_SECRET).await?;
            credentials = Some(finale_operator_cloud_gc::crd::SecretRef {
                name: CLOUD_SECRET.to_string(),
            });
        }
        let mut cluster = CloudCluster::new(
            CLOUD_CLUSTER_NAME,
            CloudClusterSpec {
                provider: template.provider,
                region: template.region.clone(),
                endpoint: template.endpoint.clone(),
                credentials_secret_ref: credentials,
                cluster_name: Some(template.cluster_name.clone().unwrap_or(tenant_name)),
                load_balancer_controller_tags: false,
            },
        );
        cluster.metadata.labels = Some(labels);
        cluster.metadata.owner_references = owner_reference(tenant).map(|r| vec![r]);
        let clusters: Api<CloudCluster> = Api::namespaced(client.clone(), namespace);
        create_if_missing(&clusters, &cluster, CLOUD_CLUSTER_NAME).await
    }

    async fn ensure_contents(
        client: &Client,
        tenant: &Tenant,
        namespace: &str,
    ) -> anyhow::Result<()> {
        let tenant_name = tenant.name_any();
        let labels = BTreeMap::from([(TENANT_LABEL.to_string(), tenant_name.clone())]);
        if let Some(template) = &tenant.spec.database {
            let source = &template.connection_secret_ref;
            let sources: Api<Secret> = Api::namespaced(client.clone(), &source.namespace);
            let secret = sources.get_opt(&source.name).await.map_err(|e| {
                anyhow::anyhow!("reading Secret {}/{}: {e}", source.namespace, source.name)
            })?;
            let source_data = secret.as_ref().and_then(|s| s.data.as_ref());
            let url = source_data
                .and_then(|d| d.get(&source.key))
                .cloned()
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "Secret {}/{} with key {:?} not found: it holds the PostgreSQL URL the tenant's databases use",
                        source.namespace,
                        source.name,
                        source.key
                    )
                })?;
            let mut data = BTreeMap::from([("url".to_string(), ByteString(url.0))]);
            // The server's CA travels with the URL, for `sslmode=verify-*`.
            if let Some(ca) = source_data.and_then(|d| d.get(CA_KEY)) {
                data.insert(CA_KEY.to_string(), ca.clone());
            }
            let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
            let copy = Secret {
                metadata: ObjectMeta {
                    name: Some(CONNECTION_SECRET.to_string()),
                    labels: Some(labels.clone()),
                    ..ObjectMeta::default()
                },
                data: Some(data),
                ..Secret::default()
            };
            create_if_missing(&secrets, &copy, CONNECTION_SECRET).await?;
            let databases: Api<Database> = Api::namespaced(client.clone(), namespace);
            let owner = template
                .owner
                .clone()
                .unwrap_or_else(|| format!("{}_owner", tenant_name.replace('-', "_")));
            let mut database = Database::new(
                DATABASE_NAME,
                DatabaseSpec {
                    db_name: database_name(&tenant_name, namespace),
                    owner,
                    deletion_policy: template.deletion_policy,
                    connection_secret_ref: SecretKeyRef {
                        name: CONNECTION_SECRET.to_string(),
                        key: "url".to_string(),
                    },
                },
            );
            database.metadata.labels = Some(labels.clone());
            create_if_missing(&databases, &database, DATABASE_NAME).await?;
        }
        if let Some(group) = &tenant.spec.admin_group {
            let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), namespace);
            let binding = RoleBinding {
                metadata: ObjectMeta {
                    name: Some(ADMIN_BINDING.to_string()),
                    labels: Some(labels),
                    ..ObjectMeta::default()
                },
                role_ref: RoleRef {
                    api_group: "rbac.authorization.k8s.io".into(),
                    kind: "ClusterRole".into(),
                    name: "admin".into(),
                },
                subjects: Some(vec![Subject {
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    kind: "Group".into(),
                    name: group.clone(),
                    namespace: None,
                }]),
            };
            create_if_missing(&bindings, &binding, ADMIN_BINDING).await?;
        }
        Ok(())
    }

    async fn write_status(
        client: &Client,
        tenant: &Tenant,
        ready: u32,
        state: &str,
        ready_condition: bool,
        reason: &str,
        message: &str,
    ) -> anyhow::Result<()> {
        let previous = tenant.status.clone().unwrap_or_default();
        let mut conditions = previous.conditions.clone();
        condition::upsert(
            &mut conditions,
            condition::new(
                READY,
                ready_condition,
                reason,
                message,
                tenant.metadata.generation,
            ),
        );
        let next = TenantStatus {
            state: Some(state.to_string()),
            message: Some(message.to_string()),
            namespaces_ready: ready,
            conditions,
            observed_generation: tenant.metadata.generation,
            deletion: previous.deletion.clone(),
        };
        if next == previous {
            return Ok(());
        }
        let tenants: Api<Tenant> = Api::all(client.clone());
        tenants
            .patch_status(
                &tenant.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": next })),
            )
            .await
            .context("writing the status")?;
        Ok(())
    }

    /// Why a namespace is still there, for the `Deleting` condition: the Databases still
    /// dropping in it, else its own conditions.
    async fn why_remaining(client: &Client, namespace: &Namespace) -> String {
        let name = namespace.name_any();
        let databases: Api<Database> = Api::namespaced(client.clone(), &name);
        if let Ok(list) = databases.list(&ListParams::default()).await
            && !list.items.is_empty()
        {
            let details: Vec<String> = list
                .items
                .iter()
                .map(|db| {
                    let why = db
                        .status
                        .as_ref()
                        .and_then(|s| condition::find(&s.conditions, condition::DELETING))
                        .map(|c| c.message.clone())
                        .unwrap_or_else(|| "waiting for the Database operator".into());
                    format!("Database {} ({why})", db.name_any())
                })
                .collect();
            return format!("{name}: {}", details.join("; "));
        }
        let conditions: Vec<String> = namespace
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .filter(|c| c.status == "True")
            .filter_map(|c| c.message.clone())
            .collect();
        if conditions.is_empty() {
            format!("{name}: terminating")
        } else {
            format!("{name}: {}", conditions.join("; "))
        }
    }
}

async fn create_if_missing<K>(api: &Api<K>, object: &K, name: &str) -> anyhow::Result<()>
where
    K: Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    match api.create(&PostParams::default(), object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(e) => Err(anyhow::anyhow!("creating {name}: {e}")),
    }
}

enum NamespaceState {
    Created,
    Ready,
    Foreign,
    Waiting(String),
}

impl Reconciler for TenantReconciler {
    type Resource = Tenant;

    fn name(&self) -> &'static str {
        "tenant"
    }

    fn finalizers(&self) -> &'static [&'static str] {
        FINALIZERS
    }

    fn cleans_up(&self, _finalizer: &str) -> &'static [&'static str] {
        &["the tenant's namespaces and everything in them (their Databases included)"]
    }

    fn watches(&self, controller: Controller<Tenant>, client: &Client) -> Controller<Tenant> {
        // Namespaces by their controller reference; Databases by the tenant label, so a
        // Database finishing its teardown wakes the tenant waiting for it.
        controller
            .owns(
                Api::<Namespace>::all(client.clone()),
                watcher::Config::default(),
            )
            .watches(
                Api::<Database>::all(client.clone()),
                watcher::Config::default().labels(TENANT_LABEL),
                |database: Database| {
                    database
                        .labels()
                        .get(TENANT_LABEL)
                        .map(|tenant| ObjectRef::<Tenant>::new(tenant))
                },
            )
    }

    async fn apply(&self, tenant: Arc<Tenant>, context: &Context) -> anyhow::Result<Applied> {
        let client = &context.client;
        let desired = match desired_namespaces(&tenant) {
            Ok(desired) => desired,
            Err(message) => {
                Self::write_status(client, &tenant, 0, "Failed", false, "InvalidSpec", &message)
                    .await?;
                context
                    .event(
                        &*tenant,
                        EventType::Warning,
                        "InvalidSpec",
                        "Reconcile",
                        message,
                    )
                    .await;
                return Ok(Applied::AwaitChange);
            }
        };
        let mut ready = 0u32;
        let mut foreign = Vec::new();
        let mut waiting = Vec::new();
        for name in &desired {
            match Self::ensure_namespace(client, &tenant, name).await? {
                NamespaceState::Foreign => foreign.push(name.clone()),
                NamespaceState::Waiting(why) => waiting.push(format!("{name}: {why}")),
                state @ (NamespaceState::Created | NamespaceState::Ready) => {
                    Self::ensure_contents(client, &tenant, name).await?;
                    if Some(name) == desired.first() {
                        Self::ensure_cloud(client, &tenant, name).await?;
                    }
                    if matches!(state, NamespaceState::Created) {
                        context
                            .event(
                                &*tenant,
                                EventType::Normal,
                                "NamespaceCreated",
                                "Reconcile",
                                format!("created namespace {name}"),
                            )
                            .await;
                    }
                    ready += 1;
                }
            }
        }
        // Namespaces dropped from the spec go.
        let wanted: BTreeSet<&String> = desired.iter().collect();
        for namespace in Self::owned_namespaces(client, &tenant).await? {
            let name = namespace.name_any();
            if wanted.contains(&name) || namespace.metadata.deletion_timestamp.is_some() {
                continue;
            }
            Api::<Namespace>::all(client.clone())
                .delete(&name, &DeleteParams::background())
                .await
                .with_context(|| format!("deleting namespace {name}"))?;
            context
                .event(
                    &*tenant,
                    EventType::Normal,
                    "NamespaceDeleted",
                    "Reconcile",
                    format!("deleted namespace {name}: no longer in the spec"),
                )
                .await;
        }
        if !foreign.is_empty() {
            let message = format!(
                "namespaces {} exist and do not belong to this tenant; they are not adopted: delete them or remove them from the spec",
                foreign.join(", ")
            );
            Self::write_status(
                client,
                &tenant,
                ready,
                "Conflict",
                false,
                "NamespaceConflict",
                &message,
            )
            .await?;
            return Ok(Applied::RequeueAfter(Duration::from_secs(30)));
        }
        if !waiting.is_empty() {
            let message = format!("waiting for namespaces: {}", waiting.join("; "));
            Self::write_status(
                client,
                &tenant,
                ready,
                "Pending",
                false,
                "NamespacesPending",
                &message,
            )
            .await?;
            return Ok(Applied::RequeueAfter(Duration::from_secs(2)));
        }
        let message = format!("{ready} namespaces ready");
        Self::write_status(client, &tenant, ready, "Ready", true, "Ready", &message).await?;
        Ok(Applied::Ready)
    }

    async fn cleanup(
        &self,
        _finalizer: &str,
        tenant: Arc<Tenant>,
        context: &Context,
    ) -> anyhow::Result<Cleanup> {
        let client = &context.client;
        // `--cascade=orphan`: the garbage collector takes our owner references off first;
        // deleting now would destroy what the user asked to keep.
        if tenant.finalizers().iter().any(|f| f == "orphan") {
            return Ok(Cleanup::InProgress {
                waiting_for: "the garbage collector to orphan the namespaces (--cascade=orphan)"
                    .into(),
                check_after: Duration::from_secs(1),
            });
        }
        let owned = Self::owned_namespaces(client, &tenant).await?;
        if owned.is_empty() {
            return Ok(Cleanup::Done);
        }
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let mut remaining = Vec::new();
        for namespace in &owned {
            if namespace.metadata.deletion_timestamp.is_none() {
                match namespaces
                    .delete(&namespace.name_any(), &DeleteParams::background())
                    .await
                {
                    Ok(_) => {}
                    Err(kube::Error::Api(status)) if status.code == 404 => continue,
                    Err(e) => {
                        anyhow::bail!("deleting namespace {}: {e}", namespace.name_any())
                    }
                }
            }
            remaining.push(Self::why_remaining(client, namespace).await);
        }
        if remaining.is_empty() {
            return Ok(Cleanup::Done);
        }
        Ok(Cleanup::InProgress {
            waiting_for: format!(
                "{} namespaces still terminating: {}",
                remaining.len(),
                remaining.join(" | ")
            ),
            check_after: TEARDOWN_RECHECK,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{NamespaceSet, TenantSpec};

    fn tenant(namespaces: NamespaceSet) -> Tenant {
        Tenant::new(
            "acme",
            TenantSpec {
                namespaces,
                labels: BTreeMap::new(),
                annotations: BTreeMap::new(),
                database: None,
                admin_group: None,
                cloud: None,
            },
        )
    }

    #[test]
    fn namespaces_come_from_names_or_a_count() {
        let named = tenant(NamespaceSet {
            names: vec!["acme-web".into(), "acme-db".into()],
            ..NamespaceSet::default()
        });
        assert_eq!(
            desired_namespaces(&named),
            Ok(vec!["acme-web".into(), "acme-db".into()])
        );
        let counted = tenant(NamespaceSet {
            count: Some(3),
            ..NamespaceSet::default()
        });
        assert_eq!(
            desired_namespaces(&counted),
            Ok(vec!["acme-0".into(), "acme-1".into(), "acme-2".into()])
        );
        let prefixed = tenant(NamespaceSet {
            count: Some(1),
            prefix: Some("team-".into()),
            ..NamespaceSet::default()
        });
        assert_eq!(desired_namespaces(&prefixed), Ok(vec!["team-0".into()]));
    }

    #[test]
    fn invalid_namespace_sets_are_explained() {
        for (set, expected) in [
            (NamespaceSet::default(), "either `names` or `count`"),
            (
                NamespaceSet {
                    names: vec!["a".into()],
                    count: Some(1),
                    prefix: None,
                },
                "not both",
            ),
            (
                NamespaceSet {
                    names: vec!["Bad_Name".into()],
                    ..NamespaceSet::default()
                },
                "not valid",
            ),
            (
                NamespaceSet {
                    names: vec!["a".into(), "a".into()],
                    ..NamespaceSet::default()
                },
                "listed twice",
            ),
        ] {
            let error = desired_namespaces(&tenant(set)).expect_err(expected);
            assert!(error.contains(expected), "{error}");
        }
    }

    #[test]
    fn database_names_are_postgres_identifiers() {
        assert_eq!(database_name("acme", "acme-web"), "acme_acme_web");
        assert_eq!(database_name("9lives", "x"), "_9lives_x");
        assert_eq!(database_name(&"t".repeat(40), &"n".repeat(40)).len(), 63);
    }
}
