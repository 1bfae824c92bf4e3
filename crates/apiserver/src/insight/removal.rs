//! `FinalizerRemoval`: the one supported way to remove a finalizer whose owner cannot, and
//! the permanent record that it was done.
//!
//! Creating a `FinalizerRemoval` asks the server to remove `spec.finalizer` from
//! `spec.target`, as the requester saw it at `spec.resourceVersion`, for `spec.reason`. The
//! server re-checks the evidence at one store revision ([`Snapshot`]), and only then removes
//! the finalizer through the registry and keeps the record with the evidence in `status`.
//!
//! # Rules (checked in this order; every refusal is a `Status` and changes nothing)
//! 1. The target exists with `spec.target.uid`, is being deleted (`deletionTimestamp` set),
//!    carries the finalizer, and is still at `spec.resourceVersion`: otherwise 409 Conflict.
//! 2. The garbage collector's and namespace controller's finalizers (`orphan`,
//!    `foregroundDeletion`, `kubernetes`) are refused with 422: their controllers run inside
//!    this server.
//! 3. Every `FinalizerClaim` covering the finalizer on the target's resource is judged by its
//!    Lease: a live Lease refuses (409, "it is alive and may still clean up"), whatever the
//!    policy; `forcePolicy: Never` refuses; `WhenOwnerDead` allows only a Lease that expired,
//!    has no holder or does not exist (a held Lease without renew time or duration cannot be
//!    judged, and refuses); `Always` allows whenever the Lease is not live.
//! 4. An unclaimed finalizer is allowed (nothing else may ever remove it), and the record
//!    says the owner is unknown (`status.evidence.ownerUnknown: true`).
//!
//! Elapsed time alone never unlocks a removal: only the Lease and the policy do.
//!
//! # Guarantees
//! - Record first: the `FinalizerRemoval` is stored (`status.phase: Pending`, with the
//!   evidence) BEFORE the finalizer is removed, so a removal never happens without a record.
//!   The store has no multi-key transaction, so the three writes are ordered instead:
//!   record (Pending) → target (finalizer removed, resourceVersion precondition) → record
//!   (`Removed`, `removedAt`).
//! - The target is written with a resourceVersion precondition equal to
//!   `spec.resourceVersion`: if it changed, the answer is 409 Conflict, the pending record is
//!   deleted again, and nothing is removed.
//! - Records are immutable through the API: update, patch, delete and deletecollection are
//!   405 MethodNotAllowed, and a record may not have `ownerReferences` (the garbage
//!   collector would delete it with its owner). They are the audit trail of forced removals (an orphan ledger:
//!   `status.orphanedResources` lists what the claim said its controller cleans up).
//!
//! # Caveats
//! - If the server stops between the writes, or the last record write fails, the record
//!   stays `Pending`: the finalizer may or may not be gone, and the target tells which. A
//!   failure of the last write is answered 201 with a `Warning`, since the removal happened.
//! - If deleting the pending record after a refused target write fails, that record stays
//!   `Pending` although nothing was removed; the error says so.
//! - `removedBy` is the authenticated user, the client's User-Agent beside it. Creating a
//!   record needs `create` on `finalizerremovals.deletion.finale.dev`, which no bootstrap
//!   role but `cluster-admin` grants: editing an object does not let one skip its cleanup.
//! - Records are kept forever; there is no retention yet.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::api::{ForcePolicy, TargetRef};
use super::claims::{self, Claim, LeaseState};
use super::review::human;
use super::snapshot::Snapshot;
use super::{API_VERSION, GROUP, Insight, admit_body};
use crate::controllers::events;
use crate::object;
use crate::registry::{DeleteOptions, Subresource, WriteOptions, Written};
use crate::resources::ResourceType;
use crate::status::{ApiError, ApiResult};
use crate::validation::{FieldError, STANDARD_FINALIZERS};

pub const KIND: &str = "FinalizerRemoval";
pub const PLURAL: &str = "finalizerremovals";

/// The Event reason recorded on the target.
pub const EVENT_REASON: &str = "FinalizerForciblyRemoved";

/// Whether `resource` is `FinalizerRemoval` (served by [`Insight::remove_finalizer`] for
/// writes, by the registry for reads).
pub fn is_removal(resource: &ResourceType) -> bool {
    resource.group == GROUP && resource.plural == PLURAL
}

/// The structural schema of `FinalizerRemoval`.
pub fn schema() -> Value {
    json!({
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {
                "type": "object",
                "required": ["target", "resourceVersion", "finalizer", "reason"],
                "properties": {
                    "target": {
                        "type": "object",
                        "required": ["apiVersion", "name", "uid"],
                        "properties": {
                            "apiVersion": {"type": "string", "minLength": 1},
                            "kind": {"type": "string"},
                            "resource": {"type": "string"},
                            "namespace": {"type": "string"},
                            "name": {"type": "string", "minLength": 1},
                            "uid": {"type": "string", "minLength": 1}
                        }
                    },
                    "resourceVersion": {"type": "string", "minLength": 1},
                    "finalizer": {"type": "string", "minLength": 1},
                    "reason": {"type": "string", "minLength": 1}
                }
            },
            // Written by the server only; whatever a client sends here is replaced.
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
        }
    })
}

/// A `FinalizerRemoval`, for clients (kube-rs) and for the server's own status writes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FinalizerRemoval {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    pub spec: FinalizerRemovalSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<FinalizerRemovalStatus>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FinalizerRemovalSpec {
    /// The object to remove the finalizer from; `uid` is required.
    pub target: TargetRef,
    /// The target's `resourceVersion` the requester looked at.
    pub resource_version: String,
    pub finalizer: String,
    /// Why: for the people who read the record later.
    pub reason: String,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum RemovalPhase {
    /// Recorded, finalizer not (yet, or not known to be) removed.
    #[default]
    Pending,
    /// The finalizer was removed at `removedAt`.
    Removed,
    #[serde(other)]
    Other,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FinalizerRemovalStatus {
    pub phase: RemovalPhase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removed_at: Option<String>,
    /// The authenticated user who asked.
    pub removed_by: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub user_agent: String,
    /// The store revision the evidence was read at.
    pub evidence_resource_version: String,
    pub evidence: RemovalEvidence,
    /// What the claiming controller said it cleans up: it may now be left behind.
    #[serde(default)]
    pub orphaned_resources: Vec<String>,
}

/// Why the server allowed the removal, as it stood at `evidenceResourceVersion`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RemovalEvidence {
    /// True when no FinalizerClaim covers the finalizer on the target's resource.
    #[serde(default)]
    pub owner_unknown: bool,
    /// The FinalizerClaim that decided, empty when the owner is unknown.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub claim: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub controller: String,
    /// The claim's Lease, `namespace/name`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub lease: String,
    /// `Expired`, `Missing`, `NoHolder` or `Unknown` (a live Lease never gets this far).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub lease_state: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub lease_holder: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_time: Option<String>,
    pub live: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force_policy: Option<ForcePolicy>,
    /// Other claims that name the finalizer but not the target's resource.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims_for_other_resources: Vec<String>,
    /// One sentence for people.
    pub message: String,
}

impl k8s_openapi::Resource for FinalizerRemoval {
    const API_VERSION: &'static str = API_VERSION;
    const GROUP: &'static str = GROUP;
    const KIND: &'static str = KIND;
    const VERSION: &'static str = super::VERSION;
    const URL_PATH_SEGMENT: &'static str = PLURAL;
    type Scope = k8s_openapi::ClusterResourceScope;
}

impl k8s_openapi::Metadata for FinalizerRemoval {
    type Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    fn metadata(&self) -> &Self::Ty {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut Self::Ty {
        &mut self.metadata
    }
}

/// Who asks, from the request.
pub struct Requester {
    pub user: String,
    pub user_agent: String,
}

/// The 405 every write but create gets.
pub fn immutable(resource: &ResourceType) -> ApiError {
    ApiError::method_not_allowed(
        "FinalizerRemovals are immutable records of forced finalizer removals: they cannot be updated, patched or deleted",
    )
    .with_details(crate::status::Details {
        group: resource.group.clone(),
        kind: resource.plural.clone(),
        ..Default::default()
    })
}

fn conflict(name: &str, why: impl std::fmt::Display) -> ApiError {
    ApiError::new(
        409,
        "Conflict",
        format!("FinalizerRemoval {name:?} refused: {why}"),
    )
    .with_details(crate::status::Details {
        name: name.to_string(),
        group: GROUP.to_string(),
        kind: PLURAL.to_string(),
        ..Default::default()
    })
}

impl Insight {
    /// POST of a `FinalizerRemoval`: checks the evidence, records, removes, completes the
    /// record (see the module documentation).
    pub async fn remove_finalizer(
        &self,
        resource: &ResourceType,
        mut object: Value,
        options: &WriteOptions,
        requester: Requester,
    ) -> ApiResult<Written> {
        let (schema, mut warnings) = admit_body(resource, &mut object, options.field_validation)?;
        let name = object::name(&object).to_string();
        let mut errors = schema.validate(&object);
        let target_type = if errors.is_empty() {
            self.check_target(&object, &mut errors)
        } else {
            None
        };
        let spec: Option<FinalizerRemovalSpec> = if errors.is_empty() {
            object
                .get("spec")
                .cloned()
                .map(serde_json::from_value)
                .transpose()
                .map_err(|e| ApiError::bad_request(format!("spec does not decode: {e}")))?
        } else {
            None
        };
        if let Some(spec) = &spec {
            errors.extend(spec_errors(spec));
        }
        if object
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .is_some_and(|owners| !owners.is_empty())
        {
            // The garbage collector deletes through the registry: an owned record could
            // vanish with its owner, and records are kept.
            errors.push(FieldError::invalid(
                "metadata.ownerReferences",
                "[...]",
                "a FinalizerRemoval is a permanent record and cannot have owners (the garbage collector would delete it with them)",
            ));
        }
        if !errors.is_empty() {
            return Err(ApiError::invalid(&resource.kind, GROUP, &name, &errors));
        }
        let (Some(target_type), Some(spec)) = (target_type, spec) else {
            return Err(ApiError::internal("the removal's target was not resolved"));
        };
        let shown = name_or_generated(&object);

        // 1. The evidence, at one revision.
        let snapshot = Snapshot::latest(Arc::clone(self.registry.store())).await?;
        self.check_target_state(&snapshot, &target_type, &spec, &shown)
            .await?;
        let evidence = self
            .judge_claims(&snapshot, &target_type, &spec, &shown)
            .await?;
        let orphaned_resources = evidence.1;
        let evidence = evidence.0;

        let status = FinalizerRemovalStatus {
            phase: RemovalPhase::Pending,
            removed_at: None,
            removed_by: requester.user.clone(),
            user_agent: requester.user_agent.clone(),
            evidence_resource_version: snapshot.revision().to_string(),
            evidence,
            orphaned_resources,
        };
        object["status"] = encode(&status)?;

        // 2. Record first (Pending).
        let recorded = self
            .registry
            .create(resource, None, object, options)
            .await?;
        warnings.extend(recorded.warnings);
        if options.dry_run {
            return Ok(Written {
                object: recorded.object,
                warnings,
                created: true,
            });
        }
        let record_name = object::name(&recorded.object).to_string();

        // 3. The target, at the resourceVersion the requester saw.
        let pinned = spec
            .resource_version
            .parse()
            .map_err(|_| ApiError::internal("spec.resourceVersion was checked to be a number"))?;
        let namespace = target_namespace(&target_type, &spec);
        let finalizer = spec.finalizer.clone();
        let target_options = WriteOptions {
            field_manager: options.field_manager.clone(),
            ..WriteOptions::default()
        };
        let removed = self
            .registry
            .guarded_update(
                &target_type,
                namespace,
                &spec.target.name,
                Some(pinned),
                Subresource::Main,
                &target_options,
                |current| Ok(without_finalizer(current, &finalizer)),
            )
            .await;
        let removed = match removed {
            Ok(removed) => removed,
            Err(error) => {
                let undone = self
                    .registry
                    .delete(resource, None, &record_name, &DeleteOptions::default())
                    .await;
                let mut message = format!(
                    "FinalizerRemoval {record_name:?} refused: the finalizer could not be removed from {}: {}. Nothing was removed",
                    display(&target_type, &spec),
                    error.message
                );
                match undone {
                    Ok(_) => message.push_str(" and nothing was recorded"),
                    Err(undo) => {
                        tracing::error!(record = %record_name, error = %undo.message, "cannot delete a pending FinalizerRemoval after the target write failed");
                        message.push_str(&format!(
                            "; the pending record {record_name} could not be deleted ({}) and stays Pending",
                            undo.message
                        ));
                    }
                }
                return Err(ApiError::new(error.code, error.reason, message));
            }
        };

        // 4. The event, where its namespace takes one.
        // The target as written (or, when that was its last finalizer, as it went).
        self.record_event(&target_type, &removed.object, &spec, &status.evidence)
            .await;

        // 5. Complete the record.
        let removed_at = object::now();
        let completed = self
            .registry
            .guarded_update(
                resource,
                None,
                &record_name,
                None,
                Subresource::Main,
                &target_options,
                |current| {
                    let mut next = current.clone();
                    next["status"]["phase"] = json!("Removed");
                    next["status"]["removedAt"] = json!(removed_at);
                    Ok(next)
                },
            )
            .await;
        match completed {
            Ok(done) => Ok(Written {
                object: done.object,
                warnings,
                created: true,
            }),
            Err(error) => {
                tracing::error!(record = %record_name, error = %error.message, "the finalizer was removed but its record could not be completed");
                warnings.push(format!(
                    "the finalizer was removed (target now at resourceVersion {}), but the record could not be marked Removed ({}); it stays Pending",
                    object::meta_str(&removed.object, "resourceVersion").unwrap_or_default(),
                    error.message
                ));
                Ok(Written {
                    object: recorded.object,
                    warnings,
                    created: true,
                })
            }
        }
    }

    /// Rule 1: the target exists with the uid, is being deleted, carries the finalizer and
    /// is at the requested resourceVersion.
    async fn check_target_state(
        &self,
        snapshot: &Snapshot,
        target_type: &ResourceType,
        spec: &FinalizerRemovalSpec,
        shown: &str,
    ) -> ApiResult<()> {
        let what = display(target_type, spec);
        let namespace = target_namespace(target_type, spec);
        let Some(target) = snapshot
            .get(target_type, namespace, &spec.target.name)
            .await?
        else {
            return Err(conflict(shown, format!("{what} does not exist")));
        };
        let uid = object::uid(&target);
        if uid != spec.target.uid {
            return Err(conflict(
                shown,
                format!(
                    "{what} has uid {uid}, not {}: it is another object of the same name",
                    spec.target.uid
                ),
            ));
        }
        if !object::is_terminating(&target) {
            return Err(conflict(
                shown,
                format!(
                    "{what} is not being deleted (no deletionTimestamp): a finalizer is only forced off an object that is stuck deleting; delete it first, and explain it with a DeletionReview"
                ),
            ));
        }
        if !object::finalizers(&target).contains(&spec.finalizer) {
            return Err(conflict(
                shown,
                format!(
                    "{what} does not carry finalizer {} (it has [{}])",
                    spec.finalizer,
                    object::finalizers(&target).join(", ")
                ),
            ));
        }
        let current = object::meta_str(&target, "resourceVersion").unwrap_or_default();
        if current != spec.resource_version {
            return Err(conflict(
                shown,
                format!(
                    "{what} has changed since you looked: it is at resourceVersion {current}, not {}. Look at it again (explain it) and ask with the new resourceVersion",
                    spec.resource_version
                ),
            ));
        }
        Ok(())
    }

    /// Rules 3 and 4: the claims covering the finalizer and their Leases. Returns the
    /// evidence and what may now be orphaned, or the 409 that refuses.
    async fn judge_claims(
        &self,
        snapshot: &Snapshot,
        target_type: &ResourceType,
        spec: &FinalizerRemovalSpec,
        shown: &str,
    ) -> ApiResult<(RemovalEvidence, Vec<String>)> {
        let catalog = self.registry.catalog();
        let all_claims = match catalog.lookup(GROUP, super::VERSION, "finalizerclaims") {
            Some(claim_type) => snapshot
                .list(&claim_type, None)
                .await?
                .into_iter()
                .map(|object| {
                    let name = object::name(&object).to_string();
                    let spec = object.get("spec").cloned().unwrap_or(Value::Null);
                    serde_json::from_value(spec)
                        .map(|spec| Claim { name: name.clone(), spec })
                        .map_err(|e| {
                            // A claim that does not decode might be the one that forbids:
                            // refuse rather than guess.
                            conflict(
                                shown,
                                format!("FinalizerClaim {name} does not decode ({e}), so the evidence cannot be judged"),
                            )
                        })
                })
                .collect::<ApiResult<Vec<Claim>>>()?,
            None => Vec::new(),
        };
        let (covering, others) = claims::matching(
            &all_claims,
            &spec.finalizer,
            &target_type.group,
            &target_type.plural,
        );
        let others: Vec<String> = others.iter().map(|c| c.name.clone()).collect();
        let Some(first) = covering.first() else {
            let message = format!(
                "no FinalizerClaim covers finalizer {} on {}: the owner is unknown, and nothing else may ever remove it",
                spec.finalizer,
                qualified(target_type)
            );
            return Ok((
                RemovalEvidence {
                    owner_unknown: true,
                    claims_for_other_resources: others,
                    message,
                    ..RemovalEvidence::default()
                },
                Vec::new(),
            ));
        };
        let leases = catalog.lookup("coordination.k8s.io", "v1", "leases");
        let now = chrono::Utc::now();
        let mut chosen = None;
        for claim in &covering {
            let lease_ref = &claim.spec.lease;
            let lease = match &leases {
                Some(leases) => {
                    snapshot
                        .get(leases, Some(&lease_ref.namespace), &lease_ref.name)
                        .await?
                }
                None => None,
            };
            let state = claims::lease_state(lease.as_ref(), now);
            let lease_name = format!("{}/{}", lease_ref.namespace, lease_ref.name);
            let controller = &claim.spec.controller;
            if let LeaseState::Live {
                holder, renewed, ..
            } = &state
            {
                return Err(conflict(
                    shown,
                    format!(
                        "finalizer {} is claimed by {controller} (FinalizerClaim {}); {holder} holds Lease {lease_name}, renewed {} ago: it is alive and may still clean up. Stop it or wait",
                        spec.finalizer,
                        claim.name,
                        human(now - *renewed)
                    ),
                ));
            }
            let allowed = match (claim.spec.force_policy, &state) {
                (ForcePolicy::Never, _) => Err(format!(
                    "FinalizerClaim {} of {controller} has forcePolicy Never: its policy forbids removing finalizer {} by hand, even while the controller is not running ({}). Start {controller} so that it cleans up",
                    claim.name,
                    spec.finalizer,
                    describe(&state, &lease_name, now)
                )),
                (ForcePolicy::WhenOwnerDead, LeaseState::Unknown { holder }) => Err(format!(
                    "FinalizerClaim {} of {controller} has forcePolicy WhenOwnerDead, and whether the owner is dead is unknown: Lease {lease_name} is held by {holder} but has no renew time or duration",
                    claim.name
                )),
                _ => Ok(()),
            };
            if let Err(why) = allowed {
                return Err(conflict(shown, why));
            }
            if chosen.is_none() {
                chosen = Some((claim, state, lease_name));
            }
        }
        let Some((claim, state, lease_name)) = chosen else {
            return Err(ApiError::internal(format!(
                "claim {} was covering but not judged",
                first.name
            )));
        };
        let (holder, renew_time) = match &state {
            LeaseState::Expired {
                holder, renewed, ..
            } => (holder.clone(), Some(object::timestamp(*renewed))),
            LeaseState::Unknown { holder } => (holder.clone(), None),
            _ => (String::new(), None),
        };
        let message = format!(
            "finalizer {} is claimed by {} (FinalizerClaim {}, forcePolicy {}); {}",
            spec.finalizer,
            claim.spec.controller,
            claim.name,
            claim.spec.force_policy.as_str(),
            describe(&state, &lease_name, now)
        );
        Ok((
            RemovalEvidence {
                owner_unknown: false,
                claim: claim.name.clone(),
                controller: claim.spec.controller.clone(),
                lease: lease_name,
                lease_state: lease_state_name(&state).to_string(),
                lease_holder: holder,
                renew_time,
                live: false,
                force_policy: Some(claim.spec.force_policy),
                claims_for_other_resources: others,
                message,
            },
            claim.spec.cleans_up.clone(),
        ))
    }

    /// A Warning Event on the target, unless its namespace is terminating (events there
    /// are refused, and go with the namespace anyway).
    async fn record_event(
        &self,
        target_type: &ResourceType,
        target: &Value,
        spec: &FinalizerRemovalSpec,
        evidence: &RemovalEvidence,
    ) {
        let event_namespace = object::meta_str(target, "namespace").unwrap_or("default");
        if let Some(namespaces) = self.registry.catalog().lookup("", "v1", "namespaces") {
            match self.registry.get(&namespaces, None, event_namespace).await {
                Ok(ns) if object::is_terminating(&ns) => return,
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(namespace = event_namespace, error = %error.message, "no event for a forced finalizer removal");
                    return;
                }
            }
        }
        let owner = if evidence.owner_unknown {
            "owner unknown".to_string()
        } else {
            format!("claimed by {}", evidence.controller)
        };
        let message = format!(
            "finalizer {} ({owner}) was forcibly removed: {}",
            spec.finalizer, spec.reason
        );
        events::record(
            &self.registry,
            target_type,
            target,
            "Warning",
            EVENT_REASON,
            &message,
            "finale-apiserver",
        )
        .await;
    }
}

/// What the schema cannot say.
fn spec_errors(spec: &FinalizerRemovalSpec) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if spec.reason.trim().is_empty() {
        errors.push(FieldError::required(
            "spec.reason",
            "say why the finalizer must be forced off: the record keeps it for the people who find the leftovers",
        ));
    }
    if spec.resource_version.parse::<i64>().is_err() {
        errors.push(FieldError::invalid(
            "spec.resourceVersion",
            &spec.resource_version,
            "must be the target's metadata.resourceVersion as you read it",
        ));
    }
    if STANDARD_FINALIZERS.contains(&spec.finalizer.as_str()) {
        errors.push(FieldError::invalid(
            "spec.finalizer",
            &spec.finalizer,
            "is a system finalizer: the garbage collector or the namespace controller in this server removes it; explain the object to see what it waits for",
        ));
    }
    errors
}

fn without_finalizer(current: &Value, finalizer: &str) -> Value {
    let mut next = current.clone();
    if let Some(list) = next
        .pointer_mut("/metadata/finalizers")
        .and_then(Value::as_array_mut)
    {
        list.retain(|f| f.as_str() != Some(finalizer));
    }
    next
}

fn target_namespace<'a>(
    target_type: &ResourceType,
    spec: &'a FinalizerRemovalSpec,
) -> Option<&'a str> {
    Some(spec.target.namespace.as_str()).filter(|n| target_type.namespaced && !n.is_empty())
}

fn display(target_type: &ResourceType, spec: &FinalizerRemovalSpec) -> String {
    match target_namespace(target_type, spec) {
        Some(ns) => format!("{} {ns}/{}", target_type.kind, spec.target.name),
        None => format!("{} {}", target_type.kind, spec.target.name),
    }
}

fn qualified(resource: &ResourceType) -> String {
    if resource.group.is_empty() {
        resource.plural.clone()
    } else {
        format!("{}.{}", resource.plural, resource.group)
    }
}

fn name_or_generated(object: &Value) -> String {
    let name = object::name(object);
    if name.is_empty() {
        object::meta_str(object, "generateName")
            .unwrap_or_default()
            .to_string()
    } else {
        name.to_string()
    }
}

fn lease_state_name(state: &LeaseState) -> &'static str {
    match state {
        LeaseState::Missing => "Missing",
        LeaseState::NoHolder => "NoHolder",
        LeaseState::Expired { .. } => "Expired",
        LeaseState::Live { .. } => "Live",
        LeaseState::Unknown { .. } => "Unknown",
    }
}

/// The Lease's state in words, for messages and the record.
fn describe(state: &LeaseState, lease_name: &str, now: chrono::DateTime<chrono::Utc>) -> String {
    match state {
        LeaseState::Missing => format!("Lease {lease_name} does not exist"),
        LeaseState::NoHolder => format!("nobody holds Lease {lease_name}"),
        LeaseState::Expired {
            holder, expired, ..
        } => format!(
            "Lease {lease_name} expired {} ago (last held by {holder})",
            human(now - *expired)
        ),
        LeaseState::Live {
            holder, renewed, ..
        } => format!(
            "{holder} holds Lease {lease_name}, renewed {} ago",
            human(now - *renewed)
        ),
        LeaseState::Unknown { holder } => {
            format!("Lease {lease_name} is held by {holder} without a renew time or duration")
        }
    }
}

fn encode(status: &FinalizerRemovalStatus) -> ApiResult<Value> {
    serde_json::to_value(status)
        .map_err(|e| ApiError::internal(format!("cannot encode a FinalizerRemoval status: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(finalizer: &str, reason: &str, rv: &str) -> FinalizerRemovalSpec {
        FinalizerRemovalSpec {
            finalizer: finalizer.into(),
            reason: reason.into(),
            resource_version: rv.into(),
            ..FinalizerRemovalSpec::default()
        }
    }

    #[test]
    fn reasons_resource_versions_and_system_finalizers_are_checked() {
        assert!(spec_errors(&spec("example.com/x", "db host gone", "12")).is_empty());
        assert_eq!(spec_errors(&spec("example.com/x", "  ", "12")).len(), 1);
        assert_eq!(spec_errors(&spec("example.com/x", "r", "latest")).len(), 1);
        assert_eq!(spec_errors(&spec("orphan", "r", "1")).len(), 1);
    }

    #[test]
    fn only_the_named_finalizer_goes() {
        let object = json!({"metadata": {"finalizers": ["a.dev/x", "b.dev/y"]}});
        assert_eq!(
            without_finalizer(&object, "a.dev/x")["metadata"]["finalizers"],
            json!(["b.dev/y"])
        );
    }
}
