//! `OwnershipReview`: the ownership tree of one object, for `finale tree`.
//!
//! A create-only review like `DeletionReview`: POST a target and a direction and get it back
//! with `status.root` filled in, nothing stored.
//!
//! - `Dependents` (the default): the objects whose `ownerReferences` name the target, and
//!   theirs, down the tree. They come from the garbage collector's owner → dependents index
//!   ([`GcView::dependents`]), so no review lists the store.
//! - `Owners`: the objects the target's `ownerReferences` name, and theirs, up the tree,
//!   followed reference by reference. An owner that does not exist (or exists with another
//!   uid) is a node with `missing: true`.
//!
//! Every node carries what `finale tree` shows in its deletion column: `deletionTimestamp`
//! and the finalizers.
//!
//! # Guarantees
//! - Objects are read at one revision ([`Snapshot`]), reported as `status.resourceVersion`;
//!   a dependent the (live) index names is re-read at that revision and kept only if it still
//!   references its owner by uid.
//! - An object already on the path (an ownership cycle) is shown once more with
//!   `cycle: true` and not followed again.
//! - At most `spec.maxNodes` nodes are returned; a node whose children were cut counts them
//!   in `omitted`.
//!
//! # Caveats
//! - The index is the collector's live graph: a dependent created in the last milliseconds
//!   may not be in it yet. A server whose collector is not running answers 503.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::api::{CompactString, ObjectRef, TargetRef};
use super::review::object_ref;
use super::snapshot::Snapshot;
use super::{API_VERSION, GROUP, VERSION};
use crate::controllers::gc::GcView;
use crate::object;
use crate::resources::{Catalog, ResourceType};
use crate::status::{ApiError, ApiResult};

pub const KIND: &str = "OwnershipReview";
pub const PLURAL: &str = "ownershipreviews";

/// The node limit of a review that names none.
pub const DEFAULT_MAX_NODES: u32 = 10_000;
/// The largest `spec.maxNodes` a review may ask for.
pub const MAX_NODES_LIMIT: u32 = 100_000;

/// How deep the tree is followed; deeper levels are cut (counted in `omitted`).
const MAX_DEPTH: usize = 64;

/// The structural schema of `OwnershipReview`'s request part.
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
                "required": ["target"],
                "properties": {
                    "target": {
                        "type": "object",
                        "required": ["apiVersion", "name"],
                        "properties": {
                            "apiVersion": {"type": "string", "minLength": 1},
                            "kind": {"type": "string"},
                            "resource": {"type": "string"},
                            "namespace": {"type": "string"},
                            "name": {"type": "string", "minLength": 1},
                            "uid": {"type": "string"}
                        }
                    },
                    "direction": {"type": "string", "enum": ["Dependents", "Owners"], "default": "Dependents"},
                    "maxNodes": {
                        "type": "integer",
                        "format": "int32",
                        "minimum": 1,
                        "maximum": MAX_NODES_LIMIT,
                        "default": DEFAULT_MAX_NODES
                    }
                }
            },
            // Answers only; whatever a client sends here is replaced.
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
        }
    })
}

/// Asks for the ownership tree of one object.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnershipReview {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    pub spec: OwnershipReviewSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<OwnershipReviewStatus>,
}

impl OwnershipReview {
    /// A review of `spec`, with `apiVersion` and `kind` filled in.
    pub fn new(spec: OwnershipReviewSpec) -> Self {
        OwnershipReview {
            api_version: API_VERSION.into(),
            kind: KIND.into(),
            metadata: Default::default(),
            spec,
            status: None,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnershipReviewSpec {
    pub target: TargetRef,
    #[serde(default)]
    pub direction: Direction,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_nodes: Option<u32>,
}

/// Which way the tree grows from the target.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Direction {
    /// Down: who the target owns.
    #[default]
    Dependents,
    /// Up: who owns the target.
    Owners,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnershipReviewStatus {
    /// The store revision every read of this answer was made at.
    pub resource_version: String,
    /// The target and its tree; absent when the target does not exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<OwnershipNode>,
}

fn is_false(value: &bool) -> bool {
    !*value
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}

/// One object in the tree, with what its deletion column shows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnershipNode {
    pub object: ObjectRef,
    /// The owner reference between this node and its parent has `controller: true`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub controller: bool,
    /// The owner reference between this node and its parent has `blockOwnerDeletion: true`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub block_owner_deletion: bool,
    /// Set when the object is being deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub finalizers: Vec<String>,
    /// An owner that is referenced but does not exist (with that uid).
    #[serde(default, skip_serializing_if = "is_false")]
    pub missing: bool,
    /// Already on the path from the root: an ownership cycle, not followed again.
    #[serde(default, skip_serializing_if = "is_false")]
    pub cycle: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<OwnershipNode>,
    /// Children left out to keep the answer within `maxNodes` (or too deep to follow).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omitted: u32,
    /// Children left out, with what is below them, because the caller may not `get` them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub hidden: u32,
}

impl k8s_openapi::Resource for OwnershipReview {
    const API_VERSION: &'static str = API_VERSION;
    const GROUP: &'static str = GROUP;
    const KIND: &'static str = KIND;
    const VERSION: &'static str = VERSION;
    const URL_PATH_SEGMENT: &'static str = PLURAL;
    type Scope = k8s_openapi::ClusterResourceScope;
}

impl k8s_openapi::Metadata for OwnershipReview {
    type Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    fn metadata(&self) -> &Self::Ty {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut Self::Ty {
        &mut self.metadata
    }
}

/// Whether `resource` is `OwnershipReview`.
pub fn is_tree(resource: &ResourceType) -> bool {
    resource.group == GROUP && resource.plural == PLURAL
}

/// The tree of `spec.target` (of type `target_type`) at `snapshot`, over any collector view:
/// the server's live one or a copy the CLI built (its client-side fallback).
pub async fn tree_at(
    catalog: &Catalog,
    snapshot: &Snapshot,
    gc: &GcView,
    target_type: &ResourceType,
    spec: &OwnershipReviewSpec,
) -> ApiResult<OwnershipReviewStatus> {
    let mut status = OwnershipReviewStatus {
        resource_version: snapshot.revision().to_string(),
        root: None,
    };
    let target = &spec.target;
    let namespace = Some(target.namespace.as_str()).filter(|n| !n.is_empty());
    let Some(object) = snapshot.get(target_type, namespace, &target.name).await? else {
        return Ok(status);
    };
    if !target.uid.is_empty() && object::uid(&object) != target.uid {
        return Ok(status);
    }
    if spec.direction == Direction::Dependents && !gc.running() {
        return Err(ApiError::service_unavailable(
            "the garbage collector is not running, so its ownership index (owner → dependents) is not available; ask again once the server has started its garbage collector",
        ));
    }
    let mut walk = Walk {
        catalog,
        snapshot,
        gc,
        budget: spec.max_nodes.unwrap_or(DEFAULT_MAX_NODES).max(1) as usize - 1,
        on_path: Vec::new(),
    };
    let mut root = node_of(target_type, &object);
    match spec.direction {
        Direction::Dependents => walk.dependents(&mut root, 0).await?,
        Direction::Owners => walk.owners(&mut root, &object, 0).await?,
    }
    status.root = Some(root);
    Ok(status)
}

fn node_of(resource: &ResourceType, object: &Value) -> OwnershipNode {
    OwnershipNode {
        object: object_ref(resource, object),
        deletion_timestamp: object::meta_str(object, "deletionTimestamp").map(str::to_string),
        finalizers: object::finalizers(object),
        ..OwnershipNode::default()
    }
}

/// The owner reference of `object` to `owner_uid`, if it has one.
fn reference_to<'a>(object: &'a Value, owner_uid: &str) -> Option<&'a Value> {
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|r| r.get("uid").and_then(Value::as_str) == Some(owner_uid))
}

fn flag(reference: &Value, field: &str) -> bool {
    reference.get(field).and_then(Value::as_bool) == Some(true)
}

struct Walk<'a> {
    catalog: &'a Catalog,
    snapshot: &'a Snapshot,
    gc: &'a GcView,
    /// Nodes that may still be added.
    budget: usize,
    /// uids from the root to the node being expanded.
    on_path: Vec<String>,
}

impl Walk<'_> {
    /// Takes one node from the budget, or counts it as omitted on `parent`.
    fn take(&mut self, parent: &mut OwnershipNode) -> bool {
        if self.budget == 0 {
            parent.omitted += 1;
            return false;
        }
        self.budget -= 1;
        true
    }

    fn dependents<'b>(
        &'b mut self,
        parent: &'b mut OwnershipNode,
        depth: usize,
    ) -> futures::future::BoxFuture<'b, ApiResult<()>> {
        Box::pin(async move {
            let dependents = self.gc.dependents(&parent.object.uid).unwrap_or_default();
            if depth >= MAX_DEPTH {
                parent.omitted += dependents.len() as u32;
                return Ok(());
            }
            self.on_path.push(parent.object.uid.clone());
            for dependent in dependents {
                let Some(dependent_type) = self
                    .catalog
                    .lookup_kind(&dependent.api_version, &dependent.kind)
                else {
                    continue;
                };
                // The index is live; the answer is at the snapshot: re-read and re-check.
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
                if object::uid(&found) != dependent.uid {
                    continue;
                }
                let Some(reference) = reference_to(&found, &parent.object.uid) else {
                    continue;
                };
                if !self.take(parent) {
                    continue;
                }
                let mut child = node_of(&dependent_type, &found);
                child.controller = flag(reference, "controller");
                child.block_owner_deletion = flag(reference, "blockOwnerDeletion");
                if self.on_path.contains(&child.object.uid) {
                    child.cycle = true;
                } else {
                    self.dependents(&mut child, depth + 1).await?;
                }
                parent.children.push(child);
            }
            self.on_path.pop();
            Ok(())
        })
    }

    fn owners<'b>(
        &'b mut self,
        parent: &'b mut OwnershipNode,
        object: &'b Value,
        depth: usize,
    ) -> futures::future::BoxFuture<'b, ApiResult<()>> {
        Box::pin(async move {
            let references: Vec<Value> = object
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if depth >= MAX_DEPTH {
                parent.omitted += references.len() as u32;
                return Ok(());
            }
            self.on_path.push(parent.object.uid.clone());
            for reference in references {
                if !self.take(parent) {
                    continue;
                }
                let text = |field: &str| {
                    reference
                        .get(field)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string()
                };
                let (api_version, kind, name, uid) =
                    (text("apiVersion"), text("kind"), text("name"), text("uid"));
                let owner_type = self.catalog.lookup_kind(&api_version, &kind);
                // An owner is in the dependent's namespace, or cluster-scoped.
                let namespace = match &owner_type {
                    Some(t) if !t.namespaced => CompactString::default(),
                    _ => parent.object.namespace.clone(),
                };
                let found = match &owner_type {
                    // A namespaced owner of a cluster-scoped object cannot exist.
                    Some(t) if t.namespaced && namespace.is_empty() => None,
                    Some(t) => self
                        .snapshot
                        .get(t, Some(namespace.as_str()).filter(|n| !n.is_empty()), &name)
                        .await?
                        .filter(|o| object::uid(o) == uid),
                    None => None,
                };
                let mut owner = match (&owner_type, &found) {
                    (Some(t), Some(found)) => node_of(t, found),
                    _ => OwnershipNode {
                        object: ObjectRef {
                            api_version: api_version.into(),
                            kind: kind.into(),
                            namespace,
                            name: name.into(),
                            uid: uid.clone(),
                        },
                        missing: true,
                        ..OwnershipNode::default()
                    },
                };
                owner.controller = flag(&reference, "controller");
                owner.block_owner_deletion = flag(&reference, "blockOwnerDeletion");
                if let Some(found) = &found {
                    if self.on_path.contains(&uid) {
                        owner.cycle = true;
                    } else {
                        self.owners(&mut owner, found, depth + 1).await?;
                    }
                }
                parent.children.push(owner);
            }
            self.on_path.pop();
            Ok(())
        })
    }
}
