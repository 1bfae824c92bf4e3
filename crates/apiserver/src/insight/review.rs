//! Explain mode: why an object that is being deleted is still there.
//!
//! An [`Explainer`] reads everything at one store revision (a [`Snapshot`]) and asks the
//! garbage collector's read-only [`GcView`] for what only the collector knows: who depends on
//! whom, and which work it has queued. From that it builds a tree of [`CauseNode`]s per
//! object:
//!
//! - `PodGracePeriod`: a Pod whose node agent is stopping it (progressing), or whose agent is
//!   gone or cannot confirm it stopped (stuck), with the remedy ([`super::pod_agent`]).
//! - `Finalizer`: a finalizer with the `FinalizerClaim` that covers it and its Lease:
//!   progressing while the Lease is live, stuck when it expired, is missing, or no claim
//!   covers the finalizer (owner unknown).
//! - `OrphanFinalizer` / `ForegroundFinalizer`: the collector's finalizers, progressing while
//!   the collector has work queued, running or retrying for the object, stuck otherwise.
//! - `ForegroundDependents`: foreground deletion waiting for `blockOwnerDeletion`
//!   dependents, each explained in turn down to its own leaf causes.
//! - `NamespaceContent`: a terminating namespace's remaining objects, counted per resource
//!   and grouped by what holds them.
//!
//! A finalizer's node (`Finalizer`, `OrphanFinalizer`, `ForegroundFinalizer`) carries who
//! added it and when, from the registry's provenance record, as evidence `addedBy`,
//! `addedAt` and `addedByUserAgent`.
//!
//! A node's state is the worst of its own and its children's; the review's verdict is
//! `Stuck` when any cause is stuck.
//!
//! # Guarantees
//! - Object reads happen at the snapshot's revision only. Dependents come from the
//!   collector's owner → dependents index and are re-read (and their reference re-checked) at
//!   that revision; no review lists the whole store. Only namespace content is read by
//!   range, one namespace prefix per resource.
//! - Nothing is written.
//!
//! # Caveats
//! - The collector's graph and queues are live state, not state at the snapshot's revision;
//!   a dependent created in the last milliseconds may not be in the graph yet.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Duration, Utc};
use futures::future::BoxFuture;
use serde_json::Value;

use super::api::{CauseNode, CauseState, CauseType, CompactString, INVENTORY_SHOWN, ObjectRef};
use super::claims::{self, Claim, LeaseState};
use super::snapshot::Snapshot;
use crate::controllers::gc::{GcView, GcWork};
use crate::deletion::{FOREGROUND_FINALIZER, NAMESPACE_FINALIZER, ORPHAN_FINALIZER};
use crate::object;
use crate::resources::{Catalog, ResourceType};
use crate::status::ApiResult;

/// How deep foreground chains are followed; deeper ones are cut with a `More` node.
const MAX_DEPTH: usize = 32;

pub struct Explainer<'a> {
    catalog: &'a Catalog,
    snapshot: &'a Snapshot,
    gc: &'a GcView,
    claims: Vec<Claim>,
    now: DateTime<Utc>,
    /// Leases read so far, by namespace and name.
    leases: HashMap<(String, String), LeaseState>,
    /// Objects on the current path, so an ownership cycle is not followed forever.
    on_path: HashSet<String>,
}

/// A node's state with its children's folded in.
pub(crate) fn worst(state: CauseState, children: &[CauseNode]) -> CauseState {
    children.iter().map(|c| c.state).fold(state, std::cmp::max)
}

/// "3s", "4m10s", "2h5m", "3d": for messages.
pub fn human(duration: Duration) -> String {
    let seconds = duration.num_seconds().max(0);
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 3600 => format!("{}m{}s", s / 60, s % 60),
        s if s < 48 * 3600 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        s => format!("{}d", s / 86_400),
    }
}

pub(crate) fn plural(count: usize, one: &str, many: &str) -> String {
    if count == 1 {
        format!("1 {one}")
    } else {
        format!("{count} {many}")
    }
}

/// `configmaps` or `widgets.example.com`.
fn qualified_resource(resource: &ResourceType) -> String {
    if resource.group.is_empty() {
        resource.plural.clone()
    } else {
        format!("{}.{}", resource.plural, resource.group)
    }
}

pub fn object_ref(resource: &ResourceType, object: &Value) -> ObjectRef {
    ObjectRef {
        api_version: object
            .get("apiVersion")
            .and_then(Value::as_str)
            .map(CompactString::from)
            .unwrap_or_else(|| resource.api_version().into()),
        kind: resource.kind.as_str().into(),
        namespace: object::meta_str(object, "namespace")
            .unwrap_or_default()
            .into(),
        name: object::name(object).into(),
        uid: object::uid(object).to_string(),
    }
}

pub(crate) fn node(
    object: Option<ObjectRef>,
    type_: CauseType,
    state: CauseState,
    message: String,
    since: Option<String>,
) -> CauseNode {
    CauseNode {
        object,
        type_,
        state,
        message,
        since,
        evidence: BTreeMap::new(),
        children: Vec::new(),
    }
}

/// What the controller itself reports about `finalizer`'s cleanup, when the object follows
/// the operator toolkit's convention (`status.deletion`: the step running, its failed attempts,
/// the last error and the next retry): a live controller that keeps failing shows why here.
fn reported_progress(cause: &mut CauseNode, object: &Value, finalizer: &str) {
    let Some(progress) = object
        .pointer("/status/deletion")
        .filter(|progress| progress["step"] == finalizer)
    else {
        return;
    };
    if let Some(error) = progress["lastError"].as_str() {
        evidence(cause, "lastError", error);
    }
    if let Some(attempts) = progress["attempts"].as_u64().filter(|a| *a > 0) {
        evidence(cause, "attempts", attempts.to_string());
    }
    if let Some(next) = progress["nextRetry"].as_str() {
        evidence(cause, "nextRetry", next);
    }
}

/// The evidence key naming where a claimed object lists its external resources.
pub(crate) const INVENTORY_PATH: &str = "inventoryPath";

/// The external resources `object` lists at `path` (a claim's `inventoryPath`): how many, and
/// the first [`INVENTORY_SHOWN`], each as `type id (state)`. None when nothing is listed there
/// (the path is missing, not an array, or the object was read without its status).
pub(crate) fn inventory_items(object: &Value, path: &str) -> Option<(usize, Vec<String>)> {
    let items = object.pointer(path)?.as_array()?;
    let text = |item: &Value, key: &str| item.get(key).and_then(Value::as_str).map(str::to_string);
    let shown = items
        .iter()
        .take(INVENTORY_SHOWN)
        .map(|item| match item {
            Value::String(entry) => entry.clone(),
            Value::Object(_) => {
                let what = [
                    text(item, "type"),
                    text(item, "id").or_else(|| text(item, "name")),
                ]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(" ");
                let what = if what.is_empty() {
                    item.to_string()
                } else {
                    what
                };
                match text(item, "state") {
                    Some(state) => format!("{what} ({state})"),
                    None => what,
                }
            }
            other => other.to_string(),
        })
        .collect();
    Some((items.len(), shown))
}

/// What the object lists at its finalizer's claimed `inventoryPath`: the external resources the
/// cleanup still has to remove, as evidence.
fn reported_inventory(cause: &mut CauseNode, object: &Value) {
    let Some(path) = cause.evidence.get(INVENTORY_PATH).cloned() else {
        return;
    };
    let Some((count, items)) = inventory_items(object, &path) else {
        return;
    };
    evidence(cause, "externalResourcesLeft", count.to_string());
    if !items.is_empty() {
        let more = count.saturating_sub(items.len());
        let tail = if more > 0 {
            format!("; and {more} more")
        } else {
            String::new()
        };
        evidence(
            cause,
            "externalResources",
            format!("{}{tail}", items.join("; ")),
        );
    }
}

pub(crate) fn evidence(node: &mut CauseNode, key: &str, value: impl Into<String>) {
    node.evidence.insert(key.to_string(), value.into());
}

impl<'a> Explainer<'a> {
    pub async fn new(
        catalog: &'a Catalog,
        snapshot: &'a Snapshot,
        gc: &'a GcView,
        now: DateTime<Utc>,
    ) -> ApiResult<Explainer<'a>> {
        let claims = claims::at(snapshot, catalog).await?;
        Ok(Explainer {
            catalog,
            snapshot,
            gc,
            claims,
            now,
            leases: HashMap::new(),
            on_path: HashSet::new(),
        })
    }

    /// The causes that keep `object` (being deleted) from going, each naming it.
    pub fn explain_object<'b>(
        &'b mut self,
        resource: &'b ResourceType,
        object: &'b Value,
        depth: usize,
    ) -> BoxFuture<'b, ApiResult<Vec<CauseNode>>> {
        Box::pin(async move {
            let uid = object::uid(object).to_string();
            let this = object_ref(resource, object);
            if depth > MAX_DEPTH || !self.on_path.insert(uid.clone()) {
                let mut cut = node(
                    Some(this),
                    CauseType::More,
                    CauseState::Progressing,
                    "explained further up this chain (or the chain is too deep to follow)".into(),
                    None,
                );
                evidence(&mut cut, "depth", depth.to_string());
                return Ok(vec![cut]);
            }
            let since = object::meta_str(object, "deletionTimestamp").map(str::to_string);
            let mut causes = Vec::new();
            if resource.graceful
                && let Some(grace) = self.pod_shutdown(&this, object).await?
            {
                causes.push(grace);
            }
            if resource.is_namespace() {
                for token in object::spec_finalizers(object) {
                    if token == NAMESPACE_FINALIZER {
                        causes.push(self.namespace_content(&this, object, depth).await?);
                    } else {
                        causes.push(
                            self.finalizer(resource, &this, &token, since.clone())
                                .await?,
                        );
                    }
                }
            }
            let origins = self.snapshot.finalizer_provenance(resource, object).await?;
            for finalizer in object::finalizers(object) {
                let mut cause = match finalizer.as_str() {
                    ORPHAN_FINALIZER => self.orphan(resource, &this, since.clone()),
                    FOREGROUND_FINALIZER => {
                        self.foreground(resource, &this, since.clone(), depth)
                            .await?
                    }
                    _ => {
                        self.finalizer(resource, &this, &finalizer, since.clone())
                            .await?
                    }
                };
                if let Some(origin) = origins.get(&finalizer) {
                    evidence(&mut cause, "addedBy", origin.user.clone());
                    evidence(&mut cause, "addedAt", origin.added_at.clone());
                    if !origin.user_agent.is_empty() {
                        evidence(&mut cause, "addedByUserAgent", origin.user_agent.clone());
                    }
                }
                reported_progress(&mut cause, object, &finalizer);
                reported_inventory(&mut cause, object);
                self.refused_removal(&mut cause, &uid, &finalizer);
                causes.push(cause);
            }
            self.on_path.remove(&uid);
            // Stuck causes first: they are what a reader has to act on.
            causes.sort_by_key(|c| std::cmp::Reverse(c.state));
            Ok(causes)
        })
    }

    /// An admission webhook refused this finalizer's last removal
    /// ([`crate::admission::refusals`]): the evidence names it, and a recent refusal makes
    /// it the blocker, whatever the finalizer's controller is doing.
    fn refused_removal(&self, cause: &mut CauseNode, uid: &str, finalizer: &str) {
        let Some(refusal) = crate::admission::refusals::last(uid, finalizer) else {
            return;
        };
        evidence(
            cause,
            "removalRefusedBy",
            format!("admission webhook {:?}", refusal.webhook),
        );
        evidence(cause, "removalRefusedAt", refusal.at.clone());
        evidence(cause, "removalRefusal", refusal.message.clone());
        let age = self.now - refusal.at_time;
        if age.to_std().unwrap_or_default() <= crate::admission::refusals::FRESH {
            cause.state = CauseState::Stuck;
            cause.message = format!(
                "admission webhook {:?} refused the removal of finalizer {finalizer} {} ago: {}",
                refusal.webhook,
                human(age),
                refusal.message
            );
        }
    }

    pub(crate) fn catalog(&self) -> &Catalog {
        self.catalog
    }

    pub(crate) fn snapshot(&self) -> &Snapshot {
        self.snapshot
    }

    pub(crate) fn now(&self) -> DateTime<Utc> {
        self.now
    }

    pub(crate) async fn lease(&mut self, namespace: &str, name: &str) -> ApiResult<LeaseState> {
        let key = (namespace.to_string(), name.to_string());
        if let Some(state) = self.leases.get(&key) {
            return Ok(state.clone());
        }
        let lease = match self.catalog.lookup("coordination.k8s.io", "v1", "leases") {
            Some(leases) => self.snapshot.get(&leases, Some(namespace), name).await?,
            None => None,
        };
        let state = claims::lease_state(lease.as_ref(), self.now);
        self.leases.insert(key, state.clone());
        Ok(state)
    }

    /// `Finalizer`: who claims `finalizer` on this object, and whether they are alive.
    pub(crate) async fn finalizer(
        &mut self,
        resource: &ResourceType,
        this: &ObjectRef,
        finalizer: &str,
        since: Option<String>,
    ) -> ApiResult<CauseNode> {
        let (covering, others) =
            claims::matching(&self.claims, finalizer, &resource.group, &resource.plural);
        let covering: Vec<Claim> = covering.into_iter().cloned().collect();
        let others: Vec<String> = others.iter().map(|c| c.name.clone()).collect();
        if covering.is_empty() {
            let mut message = format!(
                "no controller claims finalizer {finalizer} (owner unknown): nothing may ever remove it. Find the controller that added it and make sure it runs, or declare it with a FinalizerClaim; remove the finalizer by hand only once you know what it was meant to clean up"
            );
            if !others.is_empty() {
                message.push_str(&format!(
                    ". FinalizerClaim {} names this finalizer but not {}: add the resource to the claim if it is meant to cover it",
                    others.join(", "),
                    qualified_resource(resource)
                ));
            }
            let mut cause = node(
                Some(this.clone()),
                CauseType::Finalizer,
                CauseState::Stuck,
                message,
                since,
            );
            evidence(&mut cause, "finalizer", finalizer);
            evidence(&mut cause, "claim", "none");
            if !others.is_empty() {
                evidence(&mut cause, "claimsForOtherResources", others.join(","));
            }
            return Ok(cause);
        }
        // The first claim with a live Lease speaks for the finalizer; else the first one.
        let mut chosen = None;
        for claim in &covering {
            let state = self
                .lease(&claim.spec.lease.namespace, &claim.spec.lease.name)
                .await?;
            let live = state.is_live();
            if chosen.is_none() || live {
                chosen = Some((claim.clone(), state));
            }
            if live {
                break;
            }
        }
        let Some((claim, lease)) = chosen else {
            unreachable!("covering is not empty");
        };
        let spec = &claim.spec;
        let who = format!(
            "finalizer {finalizer} is claimed by {} (FinalizerClaim {})",
            spec.controller, claim.name
        );
        let lease_name = format!("{}/{}", spec.lease.namespace, spec.lease.name);
        let cleanup = if spec.cleans_up.is_empty() {
            String::new()
        } else {
            format!(" ({})", spec.cleans_up.join("; "))
        };
        let start_it = format!(
            "Start {} (or fix what keeps it from running); it removes the finalizer once it has cleaned up{cleanup}",
            spec.controller
        );
        let (state, message, since) = match &lease {
            LeaseState::Live {
                holder, renewed, ..
            } => {
                let mut message = format!(
                    "{who}; its Lease {lease_name} is held by {holder} and was renewed {} ago: the controller is alive and removes the finalizer once it has cleaned up{cleanup}",
                    human(self.now - *renewed)
                );
                let deleting_for = since
                    .as_deref()
                    .and_then(crate::object::parse_timestamp)
                    .map(|t| self.now - t);
                if let (Some(max), Some(deleting_for)) = (spec.max_cleanup_seconds, deleting_for)
                    && deleting_for > Duration::seconds(max)
                {
                    message.push_str(&format!(
                        ". It has been deleting for {}, longer than the {max}s the claim expects: look at the object's status and the controller's logs",
                        human(deleting_for)
                    ));
                }
                (CauseState::Progressing, message, since)
            }
            LeaseState::Expired {
                holder, expired, ..
            } => (
                CauseState::Stuck,
                format!(
                    "{who}, but its Lease {lease_name} expired {} ago (last held by {holder}): the controller is not running. {start_it}",
                    human(self.now - *expired)
                ),
                Some(object::timestamp(*expired)),
            ),
            LeaseState::Missing => (
                CauseState::Stuck,
                format!(
                    "{who}, but its Lease {lease_name} does not exist: the controller has not run here, or the claim names the wrong Lease. {start_it}"
                ),
                since,
            ),
            LeaseState::NoHolder => (
                CauseState::Stuck,
                format!(
                    "{who}, but nobody holds its Lease {lease_name}: the controller is not running. {start_it}"
                ),
                since,
            ),
            LeaseState::Unknown { holder } => (
                CauseState::Stuck,
                format!(
                    "{who}, but its Lease {lease_name} (held by {holder}) has no renew time or duration, so whether the controller is alive is unknown"
                ),
                since,
            ),
        };
        let mut cause = node(
            Some(this.clone()),
            CauseType::Finalizer,
            state,
            message,
            since,
        );
        evidence(&mut cause, "finalizer", finalizer);
        evidence(&mut cause, "claim", claim.name.clone());
        evidence(&mut cause, "controller", spec.controller.clone());
        evidence(&mut cause, "lease", lease_name);
        evidence(&mut cause, "forcePolicy", spec.force_policy.as_str());
        if !spec.cleans_up.is_empty() {
            evidence(&mut cause, "cleansUp", spec.cleans_up.join("; "));
        }
        if let Some(max) = spec.max_cleanup_seconds {
            evidence(&mut cause, "maxCleanupSeconds", max.to_string());
        }
        if let Some(path) = &spec.inventory_path {
            evidence(&mut cause, INVENTORY_PATH, path.clone());
        }
        match lease {
            LeaseState::Live {
                holder,
                renewed,
                expires,
            } => {
                evidence(&mut cause, "leaseLive", "true");
                evidence(&mut cause, "holder", holder);
                evidence(&mut cause, "renewTime", object::timestamp(renewed));
                evidence(&mut cause, "leaseExpires", object::timestamp(expires));
            }
            LeaseState::Expired {
                holder,
                renewed,
                expired,
            } => {
                evidence(&mut cause, "leaseLive", "false");
                evidence(&mut cause, "holder", holder);
                evidence(&mut cause, "renewTime", object::timestamp(renewed));
                evidence(&mut cause, "leaseExpired", object::timestamp(expired));
            }
            LeaseState::Missing => {
                evidence(&mut cause, "leaseLive", "false");
                evidence(&mut cause, "leaseMissing", "true");
            }
            LeaseState::NoHolder => {
                evidence(&mut cause, "leaseLive", "false");
                evidence(&mut cause, "holder", "");
            }
            LeaseState::Unknown { holder } => {
                evidence(&mut cause, "leaseLive", "unknown");
                evidence(&mut cause, "holder", holder);
            }
        }
        Ok(cause)
    }

    /// What the collector is doing about `work`, as a cause of `type_`.
    fn gc_work(
        &self,
        this: &ObjectRef,
        type_: CauseType,
        work: Option<GcWork>,
        doing: &str,
        since: Option<String>,
    ) -> CauseNode {
        let depth = self.gc.queue_depth();
        let (state, message) = if !self.gc.running() {
            (
                CauseState::Stuck,
                format!(
                    "the garbage collector is not running, so nobody will {doing}. Run the server with its garbage collector (the default)"
                ),
            )
        } else if let Some(replica) = self.gc.runs_on() {
            // A standby replica: the collector runs on the Lease holder.
            (
                CauseState::Progressing,
                format!(
                    "the garbage collector runs on replica {replica} (it holds the controllers' Lease) and is expected to {doing}; this replica is a standby and cannot see that collector's queues. If this stays, look at {replica}'s logs"
                ),
            )
        } else if !self.gc.sees_queues() {
            // A client-side answer: the ownership index is known, the queues are not.
            (
                CauseState::Progressing,
                format!(
                    "the garbage collector is expected to {doing}; whether it has this work queued cannot be seen from outside the server. If this stays, look at the cluster's garbage collector (kube-controller-manager's logs)"
                ),
            )
        } else {
            match &work {
                Some(GcWork::Queued) => (
                    CauseState::Progressing,
                    format!(
                        "the garbage collector has this work queued ({} in its queue) and will {doing}",
                        plural(depth, "item", "items")
                    ),
                ),
                Some(GcWork::InFlight) => (
                    CauseState::Progressing,
                    format!("the garbage collector is working on it now: it will {doing}"),
                ),
                Some(GcWork::Retrying {
                    attempts,
                    last_error,
                }) => (
                    CauseState::Progressing,
                    format!(
                        "the garbage collector failed {} to {doing} and keeps retrying; last error: {last_error}",
                        plural(*attempts as usize, "time", "times")
                    ),
                ),
                None => (
                    CauseState::Stuck,
                    format!(
                        "the garbage collector has no work queued for it, so nobody will {doing}. Restarting the server rebuilds the collector's graph and queues it again"
                    ),
                ),
            }
        };
        let mut cause = node(Some(this.clone()), type_, state, message, since);
        evidence(&mut cause, "gcRunning", self.gc.running().to_string());
        if let Some(replica) = self.gc.runs_on() {
            evidence(&mut cause, "gcReplica", replica.to_string());
        }
        if self.gc.sees_queues() {
            evidence(&mut cause, "gcQueueDepth", depth.to_string());
        }
        let work_text = match &work {
            _ if !self.gc.sees_queues() => "unknown".to_string(),
            Some(GcWork::Queued) => "queued".to_string(),
            Some(GcWork::InFlight) => "inFlight".to_string(),
            Some(GcWork::Retrying {
                attempts,
                last_error,
            }) => {
                evidence(&mut cause, "gcAttempts", attempts.to_string());
                evidence(&mut cause, "gcLastError", last_error.clone());
                "retrying".to_string()
            }
            None => "none".to_string(),
        };
        evidence(&mut cause, "gcWork", work_text);
        cause
    }

    /// `OrphanFinalizer`.
    fn orphan(
        &self,
        resource: &ResourceType,
        this: &ObjectRef,
        since: Option<String>,
    ) -> CauseNode {
        let work = self.gc.work_for_orphan(&this.uid);
        let mut cause = self.gc_work(
            this,
            CauseType::OrphanFinalizer,
            work,
            "remove the ownerReferences of its dependents and then the orphan finalizer",
            since,
        );
        if cause.state == CauseState::Stuck
            && self.gc.running()
            && resource.plural == "events"
            && resource.group.is_empty()
        {
            cause.message.push_str(
                ". The garbage collector does not track core Events at all: remove the finalizer yourself",
            );
        }
        cause
    }

    /// `ForegroundDependents` while blocking dependents remain, else `ForegroundFinalizer`.
    async fn foreground(
        &mut self,
        resource: &ResourceType,
        this: &ObjectRef,
        since: Option<String>,
        depth: usize,
    ) -> ApiResult<CauseNode> {
        let mut blocking = Vec::new();
        for dependent in self.gc.dependents(&this.uid).unwrap_or_default() {
            if !dependent.block_owner_deletion {
                continue;
            }
            let Some(dependent_type) = self
                .catalog
                .lookup_kind(&dependent.api_version, &dependent.kind)
            else {
                continue;
            };
            // The graph is live; the answer is at the snapshot: re-read and re-check.
            let Some(found) = self
                .snapshot
                .get(
                    &dependent_type,
                    dependent.namespace.as_deref(),
                    &dependent.name,
                )
                .await?
            else {
                continue;
            };
            if object::uid(&found) != dependent.uid || !blocks_owner(&found, &this.uid) {
                continue;
            }
            blocking.push((dependent_type, found));
        }
        if blocking.is_empty() {
            let work = self.gc.work_for_attempt(&this.uid);
            return Ok(self.gc_work(
                this,
                CauseType::ForegroundFinalizer,
                work,
                "remove the foregroundDeletion finalizer (no dependent blocks it any more)",
                since,
            ));
        }
        let mut children = Vec::new();
        let mut names = Vec::new();
        for (dependent_type, dependent) in &blocking {
            let dependent_ref = object_ref(dependent_type, dependent);
            names.push(dependent_ref.display());
            if object::is_terminating(dependent) {
                let causes = self
                    .explain_object(dependent_type, dependent, depth + 1)
                    .await?;
                if causes.is_empty() {
                    children.push(node(
                        Some(dependent_ref),
                        CauseType::PendingDeletion,
                        CauseState::Progressing,
                        "being deleted with nothing left to hold it: it is about to go".into(),
                        object::meta_str(dependent, "deletionTimestamp").map(str::to_string),
                    ));
                } else {
                    children.extend(causes);
                }
            } else {
                let work = self.gc.work_for_attempt(&dependent_ref.uid);
                let mut pending = self.gc_work(
                    &dependent_ref,
                    CauseType::PendingDeletion,
                    work,
                    "delete this dependent of an owner in foreground deletion",
                    None,
                );
                evidence(&mut pending, "owner", this.display());
                children.push(pending);
            }
        }
        children.sort_by_key(|c| std::cmp::Reverse(c.state));
        let shown: Vec<&str> = names.iter().take(3).map(String::as_str).collect();
        let more = if names.len() > 3 {
            format!(" and {} more", names.len() - 3)
        } else {
            String::new()
        };
        let mut cause = node(
            Some(this.clone()),
            CauseType::ForegroundDependents,
            worst(CauseState::Progressing, &children),
            format!(
                "foreground deletion waits for {} (blockOwnerDeletion): {}{more}",
                plural(
                    blocking.len(),
                    "dependent that blocks it",
                    "dependents that block it"
                ),
                shown.join(", ")
            ),
            since,
        );
        evidence(&mut cause, "blockingDependents", blocking.len().to_string());
        evidence(&mut cause, "kind", resource.kind.clone());
        cause.children = children;
        Ok(cause)
    }

    /// `NamespaceContent`: what is left in a terminating namespace, grouped by its blocker.
    async fn namespace_content(
        &mut self,
        this: &ObjectRef,
        namespace: &Value,
        depth: usize,
    ) -> ApiResult<CauseNode> {
        let since = object::meta_str(namespace, "deletionTimestamp").map(str::to_string);
        let mut seen_prefixes = HashSet::new();
        let mut types: Vec<_> = self
            .catalog
            .all()
            .into_iter()
            .filter(|t| t.namespaced && !t.create_only)
            .filter(|t| seen_prefixes.insert(t.key_prefix()))
            .collect();
        // Pods first, as the namespace controller deletes them.
        types.sort_by_key(|t| {
            (
                !(t.group.is_empty() && t.plural == "pods"),
                qualified_resource(t),
            )
        });
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        let mut pods_left = false;
        let mut remaining = Vec::new();
        for resource in types {
            let objects = self.snapshot.list(&resource, Some(&this.name)).await?;
            if objects.is_empty() {
                continue;
            }
            if resource.graceful {
                pods_left = true;
            }
            counts.insert(qualified_resource(&resource), objects.len());
            for object in objects {
                remaining.push((resource.clone(), object));
            }
        }
        // Group key: stuck first, then by cause type, finalizer and claim.
        type Key = (std::cmp::Reverse<CauseState>, CauseType, String, String);
        let mut groups: BTreeMap<Key, (CauseNode, Vec<CauseNode>, usize)> = BTreeMap::new();
        for (resource, object) in &remaining {
            let mut causes = if object::is_terminating(object) {
                self.explain_object(resource, object, depth + 1).await?
            } else {
                Vec::new()
            };
            if causes.is_empty() {
                let message = if object::is_terminating(object) {
                    "being deleted with nothing left to hold it: it is about to go"
                } else if pods_left && !resource.graceful {
                    "not deleted yet: the namespace controller deletes the rest of the content once no Pod is left"
                } else {
                    "not deleted yet: the namespace controller deletes it next"
                };
                causes.push(node(
                    Some(object_ref(resource, object)),
                    CauseType::PendingDeletion,
                    CauseState::Progressing,
                    message.into(),
                    None,
                ));
            }
            let primary = &causes[0];
            let text = |key: &str| primary.evidence.get(key).cloned().unwrap_or_default();
            let key = (
                std::cmp::Reverse(primary.state),
                primary.type_,
                text("finalizer"),
                text("claim"),
            );
            let entry = groups
                .entry(key)
                .or_insert_with(|| (primary.clone(), Vec::new(), 0));
            entry.2 += 1;
            entry.1.extend(causes);
        }
        let total = remaining.len();
        let mut children = Vec::new();
        for ((_, type_, _, _), (primary, members, count)) in groups {
            let message = match (type_, primary.state) {
                (CauseType::PodGracePeriod, CauseState::Progressing) if count == 1 => {
                    "1 Pod is in its grace period".to_string()
                }
                (CauseType::PodGracePeriod, CauseState::Progressing) => {
                    format!("{count} Pods are in their grace period")
                }
                (CauseType::PodGracePeriod, _) => format!(
                    "{} whose node agent is gone or cannot confirm that {} containers stopped",
                    plural(count, "Pod", "Pods"),
                    if count == 1 { "its" } else { "their" }
                ),
                _ => format!(
                    "{}: {}",
                    plural(count, "object", "objects"),
                    primary.message
                ),
            };
            let mut group = node(None, type_, primary.state, message, None);
            group.evidence = primary.evidence.clone();
            for object_specific in [
                "deletionTimestamp",
                "gracePeriodSeconds",
                "nodeLeaseRenewed",
                "agentGoneFor",
                "gcAttempts",
                "gcLastError",
                "gcWork",
                "owner",
                "addedBy",
                "addedAt",
                "addedByUserAgent",
            ] {
                group.evidence.remove(object_specific);
            }
            evidence(&mut group, "objects", count.to_string());
            group.state = worst(group.state, &members);
            group.children = members;
            children.push(group);
        }
        children.sort_by_key(|c| std::cmp::Reverse(c.state));
        let breakdown: Vec<String> = counts.iter().map(|(r, n)| format!("{r} {n}")).collect();
        let message = if total == 0 {
            "the namespace is empty: the namespace controller removes its kubernetes finalizer next"
                .to_string()
        } else {
            format!(
                "{} in the namespace ({}); it goes once they are gone",
                plural(total, "object remains", "objects remain"),
                breakdown.join(", ")
            )
        };
        let mut cause = node(
            Some(this.clone()),
            CauseType::NamespaceContent,
            worst(CauseState::Progressing, &children),
            message,
            since,
        );
        evidence(&mut cause, "remaining", total.to_string());
        for (resource, count) in counts {
            evidence(
                &mut cause,
                &format!("remaining.{resource}"),
                count.to_string(),
            );
        }
        cause.children = children;
        Ok(cause)
    }
}

/// Whether `dependent` references `owner_uid` with `blockOwnerDeletion: true`.
fn blocks_owner(dependent: &Value, owner_uid: &str) -> bool {
    dependent
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|r| {
            r.get("uid").and_then(Value::as_str) == Some(owner_uid)
                && r.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true)
        })
}

/// Keeps at most `max` nodes, breadth first (so the top of the tree survives), replacing
/// what is cut from each list of children with one `More` node that counts it. `More` nodes
/// themselves do not count against `max`. A `More` node already in a list (a builder that
/// summed a long tail itself, see [`more_node`]) counts for what it stands for.
pub fn limit_nodes(roots: &mut Vec<CauseNode>, max: usize) {
    let mut remaining = max;
    let mut level: Vec<&mut Vec<CauseNode>> = vec![roots];
    while !level.is_empty() {
        let mut next = Vec::new();
        for list in level {
            let keep = list.len().min(remaining);
            remaining -= keep;
            let cut: Vec<CauseNode> = list.split_off(keep);
            if !cut.is_empty() {
                let state = worst(CauseState::Progressing, &cut);
                let (count, omitted) =
                    cut.iter()
                        .fold((0, 0), |(count, omitted), node| match summed_tail(node) {
                            Some((more, nodes)) => (count + more, omitted + nodes),
                            None => (count + 1, omitted + 1 + count_nodes(node)),
                        });
                list.push(more_node(count, omitted, state));
            }
            for kept in list.iter_mut().take(keep) {
                next.push(&mut kept.children);
            }
        }
        level = next;
    }
}

/// The `More` node standing for `count` cut siblings and `omitted_nodes` nodes in all
/// (them and everything below them), the worst of them in `state`.
pub(crate) fn more_node(count: usize, omitted_nodes: usize, state: CauseState) -> CauseNode {
    let mut more = node(
        None,
        CauseType::More,
        state,
        format!("…and {count} more"),
        None,
    );
    evidence(&mut more, "omitted", count.to_string());
    evidence(&mut more, "omittedNodes", omitted_nodes.to_string());
    more
}

/// What a `More` node stands for: (siblings, nodes in all); None for other nodes.
fn summed_tail(node: &CauseNode) -> Option<(usize, usize)> {
    if node.type_ != CauseType::More {
        return None;
    }
    let number = |key: &str| node.evidence.get(key)?.parse::<usize>().ok();
    Some((number("omitted")?, number("omittedNodes")?))
}

/// Nodes below `node` (not counting itself).
pub(crate) fn count_nodes(node: &CauseNode) -> usize {
    node.children.len() + node.children.iter().map(count_nodes).sum::<usize>()
}

/// The first leaf reached by following children in `state`: the cause to name in a summary.
pub fn leading_leaf(causes: &[CauseNode], state: CauseState) -> Option<&CauseNode> {
    let mut current = causes.iter().find(|c| c.state == state)?;
    while let Some(child) = current
        .children
        .iter()
        .find(|c| c.state == state && c.type_ != CauseType::More)
    {
        current = child;
    }
    Some(current)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(name: &str, state: CauseState) -> CauseNode {
        node(
            Some(ObjectRef {
                name: name.into(),
                ..ObjectRef::default()
            }),
            CauseType::Finalizer,
            state,
            name.into(),
            None,
        )
    }

    #[test]
    fn limiting_keeps_the_top_of_the_tree_and_counts_what_it_cuts() {
        let mut parent = leaf("parent", CauseState::Stuck);
        parent.children = (0..10)
            .map(|i| {
                leaf(
                    &format!("child-{i}"),
                    if i == 9 {
                        CauseState::Stuck
                    } else {
                        CauseState::Progressing
                    },
                )
            })
            .collect();
        let mut roots = vec![parent];
        limit_nodes(&mut roots, 4);
        let children = &roots[0].children;
        assert_eq!(children.len(), 4, "3 kept and one More");
        assert_eq!(children[3].type_, CauseType::More);
        assert_eq!(children[3].message, "…and 7 more");
        assert_eq!(
            children[3].state,
            CauseState::Stuck,
            "a cut stuck child stays visible"
        );
    }

    #[test]
    fn a_tail_summed_in_advance_is_cut_exactly_as_the_whole_list_would_be() {
        let children = |count: usize| -> Vec<CauseNode> {
            (0..count)
                .map(|i| {
                    let mut child = leaf(&format!("child-{i}"), CauseState::Progressing);
                    if i == 7 {
                        child.state = CauseState::Stuck;
                        child.children = vec![leaf("grandchild", CauseState::Stuck)];
                    }
                    child
                })
                .collect()
        };
        let mut whole = leaf("parent", CauseState::Stuck);
        whole.children = children(12);
        let mut summed = leaf("parent", CauseState::Stuck);
        summed.children = children(5);
        // Children 5..12: seven siblings, eight nodes with child-7's grandchild, one stuck.
        summed.children.push(more_node(7, 8, CauseState::Stuck));
        let (mut whole, mut summed) = (vec![whole], vec![summed]);
        limit_nodes(&mut whole, 4);
        limit_nodes(&mut summed, 4);
        assert_eq!(whole, summed);
        let more = &whole[0].children[3];
        assert_eq!(more.message, "…and 9 more");
        assert_eq!(
            more.evidence.get("omittedNodes").map(String::as_str),
            Some("10")
        );
    }

    #[test]
    fn human_durations() {
        assert_eq!(human(Duration::seconds(5)), "5s");
        assert_eq!(human(Duration::seconds(250)), "4m10s");
        assert_eq!(human(Duration::seconds(7500)), "2h5m");
        assert_eq!(human(Duration::seconds(-3)), "0s");
    }
}
