//! The wire types of `deletion.finale.dev/v1alpha1`: `DeletionReview` and `FinalizerClaim`.
//!
//! Plain serde types, meant to be shared with clients (the `finale` CLI, operators): they
//! implement `k8s_openapi::Resource` and `Metadata`, so kube-rs serves them through a typed
//! `Api<DeletionReview>` / `Api<FinalizerClaim>` like any built-in kind. The server itself
//! keeps objects as JSON and uses these types to read claims and to write review answers.
//!
//! # Guarantees
//! - Unknown enum values (a newer server's cause type or verdict) decode as `Other` rather
//!   than failing, so an older client can still print the rest of an answer.

use std::collections::BTreeMap;

/// An object's type and name strings: kept inline (no allocation) up to 24 bytes, which
/// covers nearly every apiVersion, kind, namespace and name; a plan copies them for each of
/// ten thousand dependents.
pub use compact_str::CompactString;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "deletion.finale.dev";
pub const VERSION: &str = "v1alpha1";
pub const API_VERSION: &str = "deletion.finale.dev/v1alpha1";

/// The node limit of a review that names none.
pub const DEFAULT_MAX_NODES: u32 = 500;

// ---------------------------------------------------------------------------------------------
// DeletionReview
// ---------------------------------------------------------------------------------------------

/// Asks the server why an object is not gone (`Explain`), or what deleting it would do
/// (`Plan`). Create-only: the answer comes back in `status` and nothing is stored.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeletionReview {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: DeletionReviewSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<DeletionReviewStatus>,
}

impl DeletionReview {
    /// A review of `spec`, with `apiVersion` and `kind` filled in.
    pub fn new(spec: DeletionReviewSpec) -> Self {
        DeletionReview {
            api_version: API_VERSION.into(),
            kind: "DeletionReview".into(),
            metadata: ObjectMeta::default(),
            spec,
            status: None,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeletionReviewSpec {
    /// The one object to review. Leave it out and give `scope` instead to list every stuck
    /// object.
    #[serde(default, skip_serializing_if = "TargetRef::is_unset")]
    pub target: TargetRef,
    /// Instead of a target: list every stuck object in a namespace (or, with no namespace,
    /// in the whole cluster) into `status.stuck`. Explain mode only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<ReviewScope>,
    #[serde(default)]
    pub mode: ReviewMode,
    /// The most cause nodes the answer holds; what does not fit is counted ("…and N more").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_nodes: Option<u32>,
    /// Plan: the DELETE's `propagationPolicy` (`Background`, `Foreground`, `Orphan`); none
    /// means the kind's default, as for a DELETE that names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub propagation_policy: Option<String>,
}

/// The object a review is about: `apiVersion` with `kind` or `resource`, and its name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TargetRef {
    pub api_version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// The plural resource name, as an alternative to `kind`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    pub name: String,
    /// The object the caller means; another object of the same name is a different object.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

impl TargetRef {
    /// True for the empty target of a review that gives a `scope` instead.
    pub fn is_unset(&self) -> bool {
        *self == TargetRef::default()
    }
}

/// Where a scoped review looks for stuck objects.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReviewScope {
    /// Only objects in this namespace; empty: every namespace and cluster-scoped objects.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReviewMode {
    /// Why is this object not gone yet?
    #[default]
    Explain,
    /// What would a DELETE of it do?
    Plan,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeletionReviewStatus {
    pub verdict: Verdict,
    /// The store revision every read of this answer was made at.
    pub resource_version: String,
    /// One line for a person: the verdict and its main reason.
    pub summary: String,
    /// Why the object is still there, root causes first; empty when it is gone or not
    /// being deleted.
    #[serde(default)]
    pub causes: Vec<CauseNode>,
    /// Plan mode: what the DELETE would do, counted exactly (the tree is in `causes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<PlanStatus>,
    /// A scoped review's answer: every stuck object in the scope, oldest deletion first,
    /// each with its root cause (at most `spec.maxNodes`; the summary counts the rest).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stuck: Vec<StuckObject>,
    /// How many objects were left out because the caller may not `get` them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hidden: Option<u32>,
}

/// Plan mode's counts, hangs and external resources. Counts are exact even when the tree
/// in `causes` is cut to `maxNodes`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanStatus {
    /// The policy the DELETE would apply: the request's, or the kind's default.
    pub propagation_policy: String,
    /// `Request` when the review named the policy, `Default` when it is the kind's default.
    pub policy_source: String,
    /// Objects the DELETE removes in the end, the target included (hanging ones too: they go
    /// once their finalizers are removed).
    pub deleted: u32,
    /// `deleted` per kind (`Kind.group`, or `Kind` for the core group).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub deleted_by_kind: BTreeMap<String, u32>,
    /// Dependents that stay, with their reference to a deleted owner removed.
    pub orphaned: u32,
    /// Dependents that stay because another owner that is not deleted keeps them.
    pub kept: u32,
    /// Objects that would be left terminating with a finalizer nobody will remove.
    pub hangs: u32,
    /// Objects that would wait behind a hang (their deletion is not reached, or waits for
    /// it, until the hang is resolved).
    pub blocked: u32,
    /// Why each hanging object hangs: one `Stuck` cause per finalizer (or grace period).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hang_causes: Vec<CauseNode>,
    /// What the controllers whose finalizers are on deleted objects declare they clean up.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub external_resources: Vec<ExternalResource>,
}

/// An external resource a controller cleans up before it removes its finalizer, as its
/// `FinalizerClaim` declares.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExternalResource {
    pub object: ObjectRef,
    pub finalizer: String,
    pub claim: String,
    pub controller: String,
    pub cleans_up: Vec<String>,
    /// The controller is not alive: the cleanup (and the deletion) waits for it.
    #[serde(default)]
    pub will_hang: bool,
    /// What the object itself lists at its claim's `inventoryPath`: the resources the cleanup
    /// will remove (at most [`INVENTORY_SHOWN`]; `inventoryCount` has them all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inventory: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory_count: Option<u64>,
}

/// How many inventory entries an answer names, per object.
pub const INVENTORY_SHOWN: usize = 50;

/// One stuck object of a scoped review.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StuckObject {
    pub object: ObjectRef,
    /// `Stuck` (the object's own review's verdict).
    pub verdict: Verdict,
    /// The root cause in one sentence: the deepest stuck cause of its first stuck branch,
    /// naming the object it is about when that is another one.
    pub root_cause: String,
    /// Its `deletionTimestamp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    /// The object does not exist (any more).
    Gone,
    /// The object exists and nobody asked to delete it.
    #[default]
    NotDeleting,
    /// Being deleted, and whatever holds it is alive and working.
    Progressing,
    /// Being deleted, and something that holds it is dead, unknown or has nobody to act.
    Stuck,
    /// Plan: the DELETE would run to its end (every finalizer has a live controller).
    WillComplete,
    /// Plan: some object would be left with a finalizer nobody will remove.
    WillHang,
    #[serde(other)]
    Other,
}

/// Whether one cause resolves by itself (`Progressing`) or needs a person (`Stuck`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum CauseState {
    #[default]
    Progressing,
    Stuck,
    #[serde(other)]
    Other,
}

/// What keeps an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum CauseType {
    /// A finalizer some controller has to remove.
    Finalizer,
    /// Foreground deletion waits for dependents with `blockOwnerDeletion`.
    ForegroundDependents,
    /// The garbage collector's `orphan` finalizer.
    OrphanFinalizer,
    /// The garbage collector's `foregroundDeletion` finalizer, with nothing left to wait for.
    ForegroundFinalizer,
    /// A terminating namespace's content.
    NamespaceContent,
    /// A Pod's grace period.
    PodGracePeriod,
    /// Not deleted yet: whoever deletes it (the namespace controller, the garbage collector)
    /// has not got to it.
    PendingDeletion,
    /// Nodes left out to keep the answer within `maxNodes`.
    More,
    /// Plan: the object is deleted.
    Deletes,
    /// Plan: the object stays, its reference to a deleted owner removed.
    Orphans,
    /// Plan: the object stays because another owner keeps it (`evidence.keptBy`).
    Keeps,
    /// Objects left out because the caller may not `get` them ("N hidden").
    Hidden,
    #[serde(other)]
    Other,
}

/// One cause in the tree. A node about one object names it in `object`; a node that groups
/// objects (under `NamespaceContent`) has no `object` and lists them as children.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CauseNode {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<ObjectRef>,
    #[serde(rename = "type")]
    pub type_: CauseType,
    pub state: CauseState,
    pub message: String,
    /// Since when this cause holds (RFC 3339), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub evidence: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<CauseNode>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    pub api_version: CompactString,
    pub kind: CompactString,
    #[serde(default, skip_serializing_if = "CompactString::is_empty")]
    pub namespace: CompactString,
    pub name: CompactString,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

impl ObjectRef {
    /// `Kind/name` or `Kind namespace/name`, for messages.
    pub fn display(&self) -> String {
        if self.namespace.is_empty() {
            format!("{}/{}", self.kind, self.name)
        } else {
            format!("{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// FinalizerClaim
// ---------------------------------------------------------------------------------------------

/// A controller's declaration that it removes a finalizer (or every finalizer under a
/// `domain/` prefix) from objects of some resources, and the Lease that shows it is alive.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FinalizerClaim {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: FinalizerClaimSpec,
}

impl FinalizerClaim {
    /// A claim named `name`, with `apiVersion` and `kind` filled in.
    pub fn new(name: &str, spec: FinalizerClaimSpec) -> Self {
        FinalizerClaim {
            api_version: API_VERSION.into(),
            kind: "FinalizerClaim".into(),
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            spec,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FinalizerClaimSpec {
    /// An exact finalizer name, or a prefix ending in `/` (`db.finale.dev/`).
    pub finalizer: String,
    /// The resources whose objects the claim covers.
    pub resources: Vec<GroupResource>,
    /// Who removes the finalizer: the controller's identity.
    pub controller: String,
    /// The Lease the controller keeps renewed while it runs.
    pub lease: LeaseRef,
    /// How long a cleanup is expected to take at most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cleanup_seconds: Option<i64>,
    /// What the cleanup removes (for people: "PostgreSQL database and role").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cleans_up: Vec<String>,
    #[serde(default)]
    pub force_policy: ForcePolicy,
    /// Where the claimed objects list the external resources the cleanup will remove or is
    /// waiting on: a JSON pointer (`/status/inventory`) to an array whose items are strings,
    /// or objects with `type`, `id` (or `name`) and optionally `state`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory_path: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupResource {
    /// Empty for the core group.
    #[serde(default)]
    pub group: String,
    pub resource: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseRef {
    pub namespace: String,
    pub name: String,
}

/// Whether a person may remove the claimed finalizer in the controller's place.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ForcePolicy {
    #[default]
    Never,
    WhenOwnerDead,
    Always,
}

impl ForcePolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            ForcePolicy::Never => "Never",
            ForcePolicy::WhenOwnerDead => "WhenOwnerDead",
            ForcePolicy::Always => "Always",
        }
    }
}

// ---------------------------------------------------------------------------------------------
// kube-rs: both kinds are cluster-scoped resources of this group
// ---------------------------------------------------------------------------------------------

impl k8s_openapi::Resource for DeletionReview {
    const API_VERSION: &'static str = API_VERSION;
    const GROUP: &'static str = GROUP;
    const KIND: &'static str = "DeletionReview";
    const VERSION: &'static str = VERSION;
    const URL_PATH_SEGMENT: &'static str = "deletionreviews";
    type Scope = k8s_openapi::ClusterResourceScope;
}

impl k8s_openapi::Metadata for DeletionReview {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl k8s_openapi::Resource for FinalizerClaim {
    const API_VERSION: &'static str = API_VERSION;
    const GROUP: &'static str = GROUP;
    const KIND: &'static str = "FinalizerClaim";
    const VERSION: &'static str = VERSION;
    const URL_PATH_SEGMENT: &'static str = "finalizerclaims";
    type Scope = k8s_openapi::ClusterResourceScope;
}

impl k8s_openapi::Metadata for FinalizerClaim {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
