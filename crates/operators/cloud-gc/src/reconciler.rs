//! The CloudCluster operator: keeps [`GC_FINALIZER`] in step with the opt-out annotation while
//! the object lives, and on deletion runs the [`crate::engine`] until nothing owned is left.
//!
//! # Lifecycle
//! - Live object: the finalizer is present when GC is enabled (annotation `"true"`, or absent
//!   with `--external-resource-gc=true`) and absent when opted out. With the flag off, an
//!   object without the annotation is marked `"false"` (as CAPA's docs say: turning the
//!   feature off marks clusters as not needing GC), so switching the flag on later changes no
//!   existing object; `finale gc enable` does that.
//! - Deletion: each reconcile runs discovery and deletion passes for up to
//!   [`GcSettings::pass_budget`]. Complete (a discovery finds nothing owned) removes the
//!   finalizer. Only blocked resources left: the `Deleting` condition names each blocker, and
//!   the next attempt comes after a jittered backoff that grows while nothing moves. Failures
//!   (throttling, a cloud that does not answer, …) are returned to the toolkit, which retries
//!   with its own backoff and shows them in the `Deleting` condition and in Events.
//! - `status.inventory` lists what is left (type, id, state, last error, blockers), and
//!   `status.deleted` counts what went, by type. While the object lives with GC enabled, it
//!   lists what deleting it would remove (`Pending`, or `Kept` with the reason), discovered at
//!   the first reconcile and every [`GcSettings::inventory_interval`] after; a failed discovery
//!   is a Warning Event, never an error of the live object.
//!
//! # Caveats
//! - The blocked-retry backoff lives in memory: a restarted operator retries at once.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use finale_operator::backoff::{Backoff, RateLimit, RateLimits};
use finale_operator::claims::OtherFinalizer;
use finale_operator::condition::{self, READY};
use finale_operator::error::permanent_with_remedy;
use finale_operator::events::EventType;
use finale_operator::finalizers;
use finale_operator::runtime::{Applied, Cleanup, Context, Reconciler};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::annotations::{self, GC_ANNOTATION, TASKS_ANNOTATION, TaskSet};
use crate::cloud::{Connector, ErrorClass, StaticCredentials, Target};
use crate::crd::{CloudCluster, CloudClusterStatus, InventoryItem};
use crate::engine::{self, Discovery, Disposition, Outcome, Report, Scope};

/// Held by every CloudCluster whose cloud resources are deleted with it.
pub const GC_FINALIZER: &str = "cloud.finale.dev/external-resource-gc";

/// Put on a credentials Secret while a CloudCluster with GC enabled uses it: deleting the
/// namespace would otherwise remove the credentials before the cloud resources are deleted.
pub const SECRET_IN_USE_FINALIZER: &str = "cloud.finale.dev/in-use-by-cloudclusters";

/// The Secret keys of static credentials (CAPA's `AWSClusterStaticIdentity` keys).
pub const ACCESS_KEY_ID_KEY: &str = "AccessKeyID";
pub const SECRET_ACCESS_KEY_KEY: &str = "SecretAccessKey";
pub const SESSION_TOKEN_KEY: &str = "SessionToken";

/// How the operator runs GC.
#[derive(Clone, Debug)]
pub struct GcSettings {
    /// `--external-resource-gc`: whether objects without the annotation are collected.
    pub enabled: bool,
    pub discovery: Discovery,
    /// Deletes in flight at once per cluster.
    pub concurrency: usize,
    /// How long one reconcile may keep starting deletion passes.
    pub pass_budget: Duration,
    /// The retry backoff while only blocked resources are left.
    pub blocked_backoff: Backoff,
    /// API calls per second (and burst) toward one cloud account.
    pub account_rate: RateLimit,
    /// How often a live cluster's inventory (what deleting it would remove) is discovered.
    pub inventory_interval: Duration,
}

impl Default for GcSettings {
    fn default() -> Self {
        GcSettings {
            enabled: true,
            discovery: Discovery::Tagging,
            concurrency: 8,
            pass_budget: Duration::from_secs(20),
            blocked_backoff: Backoff {
                base: Duration::from_secs(1),
                cap: Duration::from_secs(60),
            },
            account_rate: RateLimit::new(20, 40).expect("non-zero"),
            inventory_interval: Duration::from_secs(600),
        }
    }
}

/// The CloudCluster operator.
pub struct CloudGcReconciler {
    connector: Arc<dyn Connector>,
    settings: GcSettings,
    limits: RateLimits,
    /// Per object (uid): blocked passes in a row, when to look again, and what it waits for.
    blocked: Mutex<HashMap<String, (u32, Instant, String)>>,
}

impl CloudGcReconciler {
    pub fn new(connector: Arc<dyn Connector>, settings: GcSettings) -> CloudGcReconciler {
        CloudGcReconciler {
            connector,
            limits: RateLimits::new(settings.account_rate),
            settings,
            blocked: Mutex::new(HashMap::new()),
        }
    }

    /// Whether GC runs for `cluster`: its annotation, else the flag. An unreadable annotation
    /// counts as enabled, so a typo never drops the protection.
    fn enabled(&self, cluster: &CloudCluster) -> bool {
        match annotations::gc_switch(annotation(cluster, GC_ANNOTATION)) {
            Ok(Some(on)) => on,
            Ok(None) => self.settings.enabled,
            Err(_) => true,
        }
    }

    fn blocked_state(&self) -> std::sync::MutexGuard<'_, HashMap<String, (u32, Instant, String)>> {
        self.blocked.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn annotation<'a>(cluster: &'a CloudCluster, key: &str) -> Option<&'a str> {
    cluster
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

fn api(client: &Client, cluster: &CloudCluster) -> Api<CloudCluster> {
    Api::namespaced(client.clone(), &cluster.namespace().unwrap_or_default())
}

/// The cluster name ownership is decided on: recorded, else the spec's, else the object's name.
pub fn cluster_name(cluster: &CloudCluster) -> String {
    cluster
        .status
        .as_ref()
        .and_then(|s| s.cluster_name.clone())
        .or_else(|| cluster.spec.cluster_name.clone())
        .unwrap_or_else(|| cluster.name_any())
}

/// The tasks the annotation asks for (the default when absent).
pub fn tasks(cluster: &CloudCluster) -> Result<TaskSet, String> {
    annotation(cluster, TASKS_ANNOTATION).map_or_else(|| Ok(TaskSet::default()), TaskSet::parse)
}

/// Where the cluster's resources are, with the credentials from its Secret.
pub async fn target(client: &Client, cluster: &CloudCluster) -> anyhow::Result<Target> {
    let credentials = match &cluster.spec.credentials_secret_ref {
        None => None,
        Some(reference) => {
            let namespace = cluster.namespace().unwrap_or_default();
            let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
            let secret = secrets
                .get_opt(&reference.name)
                .await
                .with_context(|| format!("reading Secret {namespace}/{}", reference.name))?
                .ok_or_else(|| {
                    permanent_with_remedy(
                        anyhow::anyhow!("Secret {namespace}/{} not found", reference.name),
                        format!(
                            "create it with the keys {ACCESS_KEY_ID_KEY} and {SECRET_ACCESS_KEY_KEY}"
                        ),
                    )
                })?;
            let value = |key: &str| -> Option<String> {
                secret
                    .data
                    .as_ref()
                    .and_then(|d| d.get(key))
                    .map(|b| String::from_utf8_lossy(&b.0).trim().to_string())
                    .or_else(|| {
                        secret
                            .string_data
                            .as_ref()
                            .and_then(|d| d.get(key))
                            .map(|s| s.trim().to_string())
                    })
                    .filter(|v| !v.is_empty())
            };
            let (Some(access_key_id), Some(secret_access_key)) =
                (value(ACCESS_KEY_ID_KEY), value(SECRET_ACCESS_KEY_KEY))
            else {
                return Err(permanent_with_remedy(
                    anyhow::anyhow!(
                        "Secret {namespace}/{} lacks {ACCESS_KEY_ID_KEY} or {SECRET_ACCESS_KEY_KEY}",
                        reference.name
                    ),
                    "put the access key id and secret access key under those keys",
                ));
            };
            Some(StaticCredentials {
                access_key_id,
                secret_access_key,
                session_token: value(SESSION_TOKEN_KEY),
            })
        }
    };
    Ok(Target {
        region: cluster.spec.region.clone(),
        endpoint: cluster.spec.endpoint.clone(),
        credentials,
    })
}

/// The engine's scope for `cluster` (its annotations must be valid).
pub fn scope(cluster: &CloudCluster, discovery: Discovery) -> Result<Scope, String> {
    Ok(Scope {
        cluster_name: cluster_name(cluster),
        tasks: tasks(cluster)?,
        load_balancer_controller_tag: cluster.spec.load_balancer_controller_tags,
        discovery,
    })
}

/// The status entries for what a teardown left.
pub fn inventory_items(report: &Report) -> Vec<InventoryItem> {
    report
        .inventory
        .items
        .iter()
        .filter(|i| !matches!(i.disposition, Disposition::Bystander(_)))
        .map(|item| {
            let resource = &item.resource;
            let (state, last_error, blocked_by) =
                match (&item.disposition, report.outcomes.get(&resource.id)) {
                    (Disposition::Keep(reason), _) => ("Kept", None, vec![reason.clone()]),
                    (_, Some(Outcome::Blocked { by, error })) => {
                        ("Blocked", error.clone(), by.clone())
                    }
                    (_, Some(Outcome::Failed(error))) => {
                        ("Failed", Some(error.to_string()), Vec::new())
                    }
                    (_, Some(Outcome::Skipped(reason))) => ("Kept", None, vec![reason.clone()]),
                    _ => ("Pending", None, Vec::new()),
                };
            InventoryItem {
                type_: resource.kind.name().to_string(),
                id: resource.id.clone(),
                name: resource.name.clone(),
                state: state.to_string(),
                last_error,
                blocked_by,
            }
        })
        .collect()
}

/// Keeps the credentials Secret of `cluster` from going while GC may still need it.
async fn protect_secret(client: &Client, cluster: &CloudCluster) -> anyhow::Result<()> {
    let Some(reference) = &cluster.spec.credentials_secret_ref else {
        return Ok(());
    };
    let namespace = cluster.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let Some(secret) = secrets
        .get_opt(&reference.name)
        .await
        .with_context(|| format!("reading Secret {namespace}/{}", reference.name))?
    else {
        return Ok(());
    };
    if let Some(patch) = finalizers::add_patch(
        secret.metadata.finalizers.as_deref(),
        &[SECRET_IN_USE_FINALIZER],
    ) {
        finalizers::send(&secrets, &secret, patch)
            .await
            .with_context(|| format!("protecting Secret {namespace}/{}", reference.name))?;
    }
    Ok(())
}

/// Takes [`SECRET_IN_USE_FINALIZER`] off the Secret `cluster` uses, unless another CloudCluster
/// with GC pending still uses it.
async fn release_secret(client: &Client, cluster: &CloudCluster) -> anyhow::Result<()> {
    let Some(reference) = &cluster.spec.credentials_secret_ref else {
        return Ok(());
    };
    let namespace = cluster.namespace().unwrap_or_default();
    let others = api(client, cluster)
        .list(&ListParams::default())
        .await
        .with_context(|| format!("listing CloudClusters in {namespace}"))?;
    let still_needed = others.items.iter().any(|other| {
        other.uid() != cluster.uid()
            && other.spec.credentials_secret_ref.as_ref() == Some(reference)
            && other.finalizers().iter().any(|f| f == GC_FINALIZER)
    });
    if still_needed {
        return Ok(());
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let Some(secret) = secrets
        .get_opt(&reference.name)
        .await
        .with_context(|| format!("reading Secret {namespace}/{}", reference.name))?
    else {
        return Ok(());
    };
    if let Some(patch) = finalizers::remove_patch(secret.finalizers(), SECRET_IN_USE_FINALIZER) {
        match finalizers::send(&secrets, &secret, patch).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => {
                return Err(error)
                    .with_context(|| format!("releasing Secret {namespace}/{}", reference.name));
            }
        }
    }
    Ok(())
}

/// `a, b, c (and N more)`.
fn some_of(labels: &[String], limit: usize) -> String {
    let mut text = labels
        .iter()
        .take(limit)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if labels.len() > limit {
        text.push_str(&format!(" (and {} more)", labels.len() - limit));
    }
    text
}

impl CloudGcReconciler {
    async fn write_status(
        client: &Client,
        cluster: &CloudCluster,
        patch: Value,
    ) -> anyhow::Result<()> {
        api(client, cluster)
            .patch_status(
                &cluster.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": patch })),
            )
            .await
            .context("writing the status")?;
        Ok(())
    }

    /// Discovers what deleting the live `cluster` would remove, when its last inventory is
    /// older than the interval; returns when to look again.
    async fn refresh_inventory(
        &self,
        context: &Context,
        cluster: &CloudCluster,
    ) -> anyhow::Result<Duration> {
        let interval = self.settings.inventory_interval;
        let age = cluster
            .status
            .as_ref()
            .and_then(|s| s.inventory_time.as_deref())
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .and_then(|t| {
                (chrono::Utc::now() - t.with_timezone(&chrono::Utc))
                    .to_std()
                    .ok()
            });
        if let Some(age) = age
            && age < interval
        {
            return Ok(interval - age);
        }
        let found = async {
            let scope = scope(cluster, self.settings.discovery).map_err(anyhow::Error::msg)?;
            let target = target(&context.client, cluster).await?;
            let cloud = self
                .connector
                .connect(&target)
                .await
                .with_context(|| format!("connecting to AWS in {}", target.region))?;
            engine::inventory(cloud.as_ref(), &scope, &self.limits, &target.account_key())
                .await
                .map_err(|error| anyhow::anyhow!("discovering the owned resources: {error}"))
        }
        .await;
        let inventory = match found {
            Ok(inventory) => inventory,
            Err(error) => {
                context
                    .event(
                        cluster,
                        EventType::Warning,
                        "InventoryFailed",
                        "Discover",
                        format!("{error:#}; `finale plan` shows the last inventory, if any"),
                    )
                    .await;
                return Ok(interval);
            }
        };
        let report = Report {
            inventory,
            ..Report::default()
        };
        let items = inventory_items(&report);
        Self::write_status(
            &context.client,
            cluster,
            json!({
                "inventory": if items.is_empty() { Value::Null } else { serde_json::to_value(&items)? },
                "inventoryTime": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            }),
        )
        .await?;
        Ok(interval)
    }

    async fn set_ready(
        context: &Context,
        cluster: &CloudCluster,
        ready: bool,
        reason: &str,
        message: &str,
        extra: Value,
    ) -> anyhow::Result<()> {
        let previous = cluster.status.clone().unwrap_or_default();
        let mut conditions = previous.conditions.clone();
        condition::upsert(
            &mut conditions,
            condition::new(READY, ready, reason, message, cluster.metadata.generation),
        );
        let mut patch = json!({
            "conditions": conditions,
            "observedGeneration": cluster.metadata.generation,
        });
        if let (Value::Object(patch), Value::Object(extra)) = (&mut patch, extra) {
            patch.extend(extra);
        }
        // Written only on change, so a resync costs no write.
        let mut next = serde_json::to_value(&previous).context("status as JSON")?;
        json_patch::merge(&mut next, &patch);
        let unchanged = serde_json::from_value::<CloudClusterStatus>(next)
            .map(|next| next == previous)
            .unwrap_or(false);
        if unchanged {
            return Ok(());
        }
        let newly_failing = !ready
            && condition::find(&previous.conditions, READY).is_none_or(|c| c.message != message);
        Self::write_status(&context.client, cluster, patch).await?;
        if newly_failing {
            context
                .event(
                    cluster,
                    EventType::Warning,
                    reason,
                    "Reconcile",
                    message.to_string(),
                )
                .await;
        }
        Ok(())
    }

    /// Records a teardown's result in the status, and an Event for what it deleted.
    async fn record(
        &self,
        context: &Context,
        cluster: &CloudCluster,
        report: &Report,
    ) -> anyhow::Result<()> {
        let previous = cluster.status.clone().unwrap_or_default();
        let mut deleted = previous.deleted.clone();
        for resource in &report.deleted {
            *deleted.entry(resource.kind.name().to_string()).or_default() += 1;
        }
        let total: u32 = deleted.values().sum();
        let items = if report.complete {
            Vec::new()
        } else {
            inventory_items(report)
        };
        let remaining = report.inventory.collectable().count() as u32;
        let changed = items != previous.inventory
            || Some(remaining) != previous.remaining
            || deleted != previous.deleted;
        if changed {
            Self::write_status(
                &context.client,
                cluster,
                json!({
                    "inventory": if items.is_empty() { Value::Null } else { serde_json::to_value(&items)? },
                    "remaining": remaining,
                    "deleted": deleted,
                    "deletedTotal": total,
                }),
            )
            .await?;
        }
        if !report.deleted.is_empty() {
            let labels: Vec<String> = report.deleted.iter().map(|r| r.label()).collect();
            context
                .event(
                    cluster,
                    EventType::Normal,
                    "ExternalResourcesDeleted",
                    "Delete",
                    format!("deleted {}: {}", labels.len(), some_of(&labels, 20)),
                )
                .await;
        }
        Ok(())
    }
}

impl Reconciler for CloudGcReconciler {
    type Resource = CloudCluster;

    fn name(&self) -> &'static str {
        "cloud-gc"
    }

    fn finalizers(&self) -> &'static [&'static str] {
        &[GC_FINALIZER]
    }

    fn wants_finalizer(&self, cluster: &CloudCluster, _finalizer: &str) -> bool {
        self.enabled(cluster)
    }

    fn other_finalizers(&self) -> &'static [OtherFinalizer] {
        &[OtherFinalizer {
            finalizer: SECRET_IN_USE_FINALIZER,
            group: "",
            resource: "secrets",
        }]
    }

    fn inventory_path(&self, finalizer: &str) -> Option<&'static str> {
        (finalizer == GC_FINALIZER).then_some("/status/inventory")
    }

    fn cleans_up(&self, finalizer: &str) -> &'static [&'static str] {
        if finalizer == SECRET_IN_USE_FINALIZER {
            return &[
                "nothing: it keeps cloud credentials until the CloudClusters using them have deleted their cloud resources",
            ];
        }
        &[
            "cloud resources tagged kubernetes.io/cluster/<name>=owned: load balancers, target groups, security groups, network interfaces, Elastic IPs (and EBS volumes when asked)",
        ]
    }

    async fn apply(
        &self,
        cluster: Arc<CloudCluster>,
        context: &Context,
    ) -> anyhow::Result<Applied> {
        if !self.settings.enabled && annotation(&cluster, GC_ANNOTATION).is_none() {
            // The flag off marks the cluster opted out, so turning it on later changes nothing.
            api(&context.client, &cluster)
                .patch(
                    &cluster.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"annotations": {GC_ANNOTATION: "false"}}})),
                )
                .await
                .context("marking the cluster opted out (--external-resource-gc=false)")?;
            return Ok(Applied::RequeueAfter(Duration::from_millis(200)));
        }
        let problems = annotations::problems(
            annotation(&cluster, GC_ANNOTATION),
            annotation(&cluster, TASKS_ANNOTATION),
        );
        if !problems.is_empty() {
            let message = problems
                .iter()
                .map(|(key, problem)| format!("annotation {key}: {problem}"))
                .collect::<Vec<_>>()
                .join("; ");
            Self::set_ready(
                context,
                &cluster,
                false,
                "InvalidAnnotation",
                &message,
                json!({}),
            )
            .await?;
            return Ok(Applied::AwaitChange);
        }
        let recorded = cluster.status.as_ref().and_then(|s| s.cluster_name.clone());
        let wanted = cluster
            .spec
            .cluster_name
            .clone()
            .unwrap_or_else(|| cluster.name_any());
        if let Some(recorded) = &recorded
            && *recorded != wanted
        {
            let message = format!(
                "spec.clusterName cannot change from {recorded:?} to {wanted:?}: this CloudCluster still deletes the resources of {recorded:?}; set it back, or create a new CloudCluster"
            );
            Self::set_ready(
                context,
                &cluster,
                false,
                "ImmutableField",
                &message,
                json!({}),
            )
            .await?;
            return Ok(Applied::AwaitChange);
        }
        let name = recorded.unwrap_or(wanted);
        let tasks = tasks(&cluster).map_err(anyhow::Error::msg)?;
        if self.enabled(&cluster) {
            protect_secret(&context.client, &cluster).await?;
        } else {
            release_secret(&context.client, &cluster).await?;
        }
        let (gc, reason, message) = if self.enabled(&cluster) {
            (
                "Enabled",
                "GCEnabled",
                format!(
                    "deleting this object deletes the cloud resources tagged kubernetes.io/cluster/{name}=owned in {} (tasks: {})",
                    cluster.spec.region,
                    tasks.to_annotation()
                ),
            )
        } else {
            (
                "Disabled",
                "GCDisabled",
                format!(
                    "external-resource GC is off ({GC_ANNOTATION}=\"false\"): the cloud resources of cluster {name} stay when this object is deleted"
                ),
            )
        };
        Self::set_ready(
            context,
            &cluster,
            true,
            reason,
            &message,
            json!({"clusterName": name, "gc": gc, "tasks": tasks.to_annotation()}),
        )
        .await?;
        if !self.enabled(&cluster) {
            return Ok(Applied::Ready);
        }
        let next = self.refresh_inventory(context, &cluster).await?;
        Ok(Applied::RequeueAfter(next))
    }

    async fn cleanup(
        &self,
        _finalizer: &str,
        cluster: Arc<CloudCluster>,
        context: &Context,
    ) -> anyhow::Result<Cleanup> {
        let uid = cluster.uid().unwrap_or_default();
        if annotations::gc_switch(annotation(&cluster, GC_ANNOTATION)) == Ok(Some(false)) {
            context
                .event(
                    &*cluster,
                    EventType::Normal,
                    "ExternalResourceGCSkipped",
                    "Delete",
                    format!("{GC_ANNOTATION} is \"false\": the cluster's cloud resources are left in place"),
                )
                .await;
            release_secret(&context.client, &cluster).await?;
            return Ok(Cleanup::Done);
        }
        let problems = annotations::problems(
            annotation(&cluster, GC_ANNOTATION),
            annotation(&cluster, TASKS_ANNOTATION),
        );
        if let Some((key, problem)) = problems.first() {
            return Err(permanent_with_remedy(
                anyhow::anyhow!("annotation {key}: {problem}"),
                format!("fix the annotation {key}; nothing is deleted while it is unreadable"),
            ));
        }
        // Woken before the blocked backoff ends (a status echo): report the same wait.
        if let Some((_, at, waiting)) = self.blocked_state().get(&uid).cloned()
            && let Some(left) = at.checked_duration_since(Instant::now())
        {
            return Ok(Cleanup::InProgress {
                waiting_for: waiting,
                check_after: left,
            });
        }
        let scope = scope(&cluster, self.settings.discovery).map_err(anyhow::Error::msg)?;
        let target = target(&context.client, &cluster).await?;
        let cloud = self
            .connector
            .connect(&target)
            .await
            .with_context(|| format!("connecting to AWS in {}", target.region))?;
        let options = engine::Options {
            concurrency: self.settings.concurrency,
            budget: self.settings.pass_budget,
            account: target.account_key(),
        };
        let report = match engine::teardown(cloud.as_ref(), &scope, &options, &self.limits).await {
            Ok(report) => report,
            Err((error, _)) => {
                let failure = anyhow::anyhow!(
                    "discovering the resources of cluster {} in {}: {error}",
                    scope.cluster_name,
                    target.region
                );
                return Err(if error.class == ErrorClass::Denied {
                    permanent_with_remedy(
                        failure,
                        "give the credentials tag:GetResources and the ec2/elasticloadbalancing Describe and Delete permissions",
                    )
                } else {
                    failure
                });
            }
        };
        self.record(context, &cluster, &report).await?;
        if report.complete {
            self.blocked_state().remove(&uid);
            release_secret(&context.client, &cluster).await?;
            return Ok(Cleanup::Done);
        }
        let failures = report.failures();
        if !failures.is_empty() {
            self.blocked_state().remove(&uid);
            let text: Vec<String> = failures
                .iter()
                .map(|(resource, error)| format!("{}: {error}", resource.label()))
                .collect();
            let failure = anyhow::anyhow!(
                "{} of {} owned resources could not be deleted: {}",
                failures.len(),
                report.inventory.collectable().count(),
                some_of(&text, 5)
            );
            return Err(
                if failures.iter().all(|(_, e)| e.class == ErrorClass::Denied) {
                    permanent_with_remedy(failure, "give the credentials the Delete permissions")
                } else {
                    failure
                },
            );
        }
        let blocked = report.blocked();
        if blocked.is_empty() || !report.deleted.is_empty() {
            // Progress, and the budget ran out: go on at once.
            self.blocked_state().remove(&uid);
            return Ok(Cleanup::InProgress {
                waiting_for: format!(
                    "{} owned resources left after {} passes",
                    report.inventory.collectable().count(),
                    report.passes
                ),
                check_after: Duration::from_millis(100),
            });
        }
        let text: Vec<String> = blocked
            .iter()
            .map(|(resource, by, error)| {
                let cause = error.map(|e| format!(" ({e})")).unwrap_or_default();
                format!("{} blocked by {}{cause}", resource.label(), by.join(", "))
            })
            .collect();
        let waiting = some_of(&text, 5);
        let mut state = self.blocked_state();
        let passes = state.get(&uid).map_or(0, |(n, _, _)| *n) + 1;
        let delay = self
            .settings
            .blocked_backoff
            .delay(passes)
            .max(Duration::from_millis(200));
        state.insert(uid, (passes, Instant::now() + delay, waiting.clone()));
        Ok(Cleanup::InProgress {
            waiting_for: waiting,
            check_after: delay,
        })
    }
}

/// Counts by type, for people (`3 load-balancer, 2 security-group`).
pub fn counts(deleted: &BTreeMap<String, u32>) -> String {
    deleted
        .iter()
        .map(|(kind, n)| format!("{n} {kind}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(annotations: &[(&str, &str)]) -> CloudCluster {
        let mut cluster = CloudCluster::new(
            "c1",
            crate::CloudClusterSpec {
                provider: crate::crd::Provider::Aws,
                region: "us-east-1".into(),
                endpoint: None,
                credentials_secret_ref: None,
                cluster_name: None,
                load_balancer_controller_tags: false,
            },
        );
        cluster.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        cluster
    }

    struct NoCloud;
    #[async_trait::async_trait]
    impl Connector for NoCloud {
        async fn connect(&self, _: &Target) -> anyhow::Result<Arc<dyn crate::cloud::CloudApi>> {
            anyhow::bail!("no cloud in this test")
        }
    }

    #[test]
    fn the_finalizer_follows_the_annotation_then_the_flag() {
        let on = CloudGcReconciler::new(Arc::new(NoCloud), GcSettings::default());
        let off = CloudGcReconciler::new(
            Arc::new(NoCloud),
            GcSettings {
                enabled: false,
                ..GcSettings::default()
            },
        );
        for (annotations, flag_on, flag_off) in [
            (vec![], true, false),
            (vec![(GC_ANNOTATION, "false")], false, false),
            (vec![(GC_ANNOTATION, "true")], true, true),
            // A typo keeps the protection.
            (vec![(GC_ANNOTATION, "flase")], true, true),
        ] {
            let c = cluster(&annotations);
            assert_eq!(
                on.wants_finalizer(&c, GC_FINALIZER),
                flag_on,
                "{annotations:?}"
            );
            assert_eq!(
                off.wants_finalizer(&c, GC_FINALIZER),
                flag_off,
                "{annotations:?}"
            );
        }
    }

    #[test]
    fn the_crd_has_printer_columns_and_an_immutable_cluster_name() {
        let crd = serde_json::to_value(crate::custom_resource_definition()).expect("json");
        let version = &crd["spec"]["versions"][0];
        let columns: Vec<&str> = version["additionalPrinterColumns"]
            .as_array()
            .expect("columns")
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(
            columns,
            [
                "Provider",
                "Region",
                "Cluster",
                "GC",
                "Remaining",
                "Deleted",
                "Age"
            ]
        );
        assert_eq!(
            version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["clusterName"]
                ["x-kubernetes-validations"][0]["rule"],
            "self == oldSelf"
        );
        assert_eq!(crd["spec"]["group"], "cloud.finale.dev");
    }
}
