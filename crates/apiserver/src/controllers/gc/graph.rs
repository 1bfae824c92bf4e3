//! The collector's ownership graph: who owns whom, who is terminating how, and which owners
//! are known to be absent — plus the rules (GC2, GC3) that turn a change of one object into
//! work for the attempt-to-delete and orphan queues.
//!
//! The graph is plain data with no I/O: [`Graph::put`] and [`Graph::remove`] apply one
//! observed change and return the [`Item`]s it makes due, and the collector enqueues them.
//!
//! # Guarantees
//! - Applying the objects of a fresh list to an empty graph queues every piece of work those
//!   objects imply: a terminating owner in `foregroundDeletion` or `orphan` mode, and an owner
//!   that is referenced but was not listed (a *virtual* node, queued to be verified; once it
//!   is found absent, its dependents are queued). This is what lets a rebuilt graph find
//!   owners that went while the collector was not looking (at start-up, after a lag).
//! - The absent-owner cache holds at most [`ABSENT_OWNER_CACHE_SIZE`] entries, the least
//!   recently used going first, as upstream's `absentOwnerCache`.
//!
//! # Assumptions
//! - uids are never reused, so an owner once found absent stays absent. The cache is only
//!   an optimisation: a forgotten entry costs one more GET of the owner.
//! - No two API objects change at one store revision (the registry writes one object per
//!   transaction; its side keys live outside the objects' prefix), so a graph that applied
//!   the change at revision R applied all of R ([`Graph::consistent_at`]).

use std::collections::{HashMap, HashSet};
use std::num::NonZeroUsize;
use std::sync::Arc;

use compact_str::CompactString;
use lru::LruCache;
use serde_json::Value;

use crate::deletion::{FOREGROUND_FINALIZER, ORPHAN_FINALIZER};
use crate::object::{self, OwnerReference};

/// How many owners known to be absent are remembered; upstream's garbage collector keeps
/// the same number (`NewReferenceCache(500)`).
pub const ABSENT_OWNER_CACHE_SIZE: NonZeroUsize = match NonZeroUsize::new(500) {
    Some(size) => size,
    None => unreachable!(),
};

/// A map keyed by object uid. Uids are UUIDs, mostly the server's own; foldhash (seeded per
/// process) hashes them several times faster than the standard SipHash, which a deletion
/// plan feels: it looks up each of ten thousand dependents.
pub type UidMap<V> = HashMap<String, V, foldhash::fast::RandomState>;
/// A set of object uids; see [`UidMap`].
pub type UidSet = HashSet<String, foldhash::fast::RandomState>;

/// Who an object is: enough to GET it again. Its strings are kept inline up to 24 bytes
/// (nearly every apiVersion, kind, namespace and name): the graph holds one per object, and a
/// deletion plan copies and compares them for each of ten thousand dependents.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Identity {
    pub api_version: CompactString,
    pub kind: CompactString,
    pub namespace: Option<CompactString>,
    pub name: CompactString,
}

#[derive(Debug)]
pub struct Node {
    pub identity: Identity,
    /// Shared with deletion insight's copies: a plan of ten thousand dependents takes their
    /// references without copying them.
    pub owners: Arc<[OwnerReference]>,
    pub dependents: UidSet,
    /// Its `metadata.finalizers`, for deletion insight (the collector itself reads only
    /// whether `foregroundDeletion` or `orphan` is among them).
    pub finalizers: Vec<String>,
    /// Terminating (deletionTimestamp set).
    pub being_deleted: bool,
    /// Terminating with `foregroundDeletion`: waits for its blocking dependents.
    pub deleting_dependents: bool,
    /// Referenced as an owner but not observed (yet).
    pub virtual_node: bool,
    /// The resourceVersion last applied, so that a replayed older event is ignored.
    pub revision: i64,
}

/// An owner looked up and not found: its uid and the namespace it was looked up in (GC8).
/// An owner absent from one namespace may well exist in another.
pub type AbsentOwner = (String, Option<CompactString>);

/// Work for the queues.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Item {
    AttemptToDelete(String),
    Orphan(String),
}

pub struct Graph {
    pub nodes: UidMap<Node>,
    absent: LruCache<AbsentOwner, ()>,
    /// The store revision whose state of every tracked object the observed nodes are
    /// exactly; None while that is not known (see [`Graph::applied`]).
    consistent_at: Option<i64>,
    /// Set by a rebuild: the newest revision its lists were read at. Until a change at or
    /// above it is applied, replayed older changes may briefly put back objects that the
    /// lists no longer had, so the graph is not at any one revision.
    consistent_from: i64,
}

impl Default for Graph {
    fn default() -> Self {
        Graph {
            nodes: UidMap::default(),
            absent: LruCache::new(ABSENT_OWNER_CACHE_SIZE),
            consistent_at: None,
            consistent_from: 0,
        }
    }
}

pub fn owner_refs(object: &Value) -> Vec<OwnerReference> {
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| {
            Some(OwnerReference {
                api_version: r.get("apiVersion")?.as_str()?.into(),
                kind: r.get("kind")?.as_str()?.into(),
                name: r.get("name")?.as_str()?.into(),
                uid: r.get("uid")?.as_str()?.to_string(),
                block_owner_deletion: r
                    .get("blockOwnerDeletion")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
            })
        })
        .collect()
}

pub fn has_finalizer(object: &Value, name: &str) -> bool {
    object::finalizers(object).iter().any(|f| f == name)
}

fn revision_of(object: &Value) -> i64 {
    object::meta_str(object, "resourceVersion")
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0)
}

impl Graph {
    /// A graph to be filled from lists read at revisions up to `listed_at`.
    pub fn rebuilt_from(listed_at: i64) -> Graph {
        Graph {
            consistent_from: listed_at,
            ..Graph::default()
        }
    }

    /// Records that every change of the store's change stream up to `revision` has been
    /// applied (changes to kinds the collector does not track included: they change no
    /// node). Called under the same lock as the change itself, so a reader never sees one
    /// without the other.
    pub fn applied(&mut self, revision: i64) {
        if revision >= self.consistent_from {
            self.consistent_at = Some(revision);
        }
    }

    /// Records a change applied from a read of the store rather than from the change
    /// stream, with the store's revision after that read: the graph is then ahead of the
    /// stream, at no one revision, until a change at or above `read_by` is applied.
    pub fn changed_ahead_of_stream(&mut self, read_by: i64) {
        self.consistent_at = None;
        self.consistent_from = self.consistent_from.max(read_by);
    }

    /// The collector stopped following the stream: the graph is at no revision any more.
    pub fn stop_following(&mut self) {
        self.changed_ahead_of_stream(i64::MAX);
    }

    /// The revision whose state the observed nodes are exactly, if known: the last change
    /// applied, once a rebuild's lists have been caught up with.
    pub fn consistent_at(&self) -> Option<i64> {
        self.consistent_at
    }

    /// Whether `owner` was found absent; a hit counts as a use for the LRU order.
    pub fn is_absent(&mut self, owner: &AbsentOwner) -> bool {
        self.absent.get(owner).is_some()
    }

    /// Remembers that `owner` was looked up and not found.
    pub fn mark_absent(&mut self, owner: AbsentOwner) {
        self.absent.put(owner, ());
    }

    /// How many absent owners are remembered.
    #[cfg(test)]
    pub fn absent_len(&self) -> usize {
        self.absent.len()
    }

    /// GC2/GC3 for an added or updated object, known as `identity`.
    pub fn put(&mut self, identity: Identity, object: &Value) -> Vec<Item> {
        let uid = object::uid(object).to_string();
        if uid.is_empty() {
            return Vec::new();
        }
        let revision = revision_of(object);
        let owners: Arc<[OwnerReference]> = owner_refs(object).into();
        let finalizers = object::finalizers(object);
        let being_deleted = object::is_terminating(object);
        let foreground = being_deleted && finalizers.iter().any(|f| f == FOREGROUND_FINALIZER);
        let orphan = being_deleted && finalizers.iter().any(|f| f == ORPHAN_FINALIZER);
        let mut queue = Vec::new();
        let previous_owners = match self.nodes.get_mut(&uid) {
            Some(node) if !node.virtual_node && node.revision >= revision => return queue,
            Some(node) => {
                let before = std::mem::replace(&mut node.owners, Arc::clone(&owners));
                node.identity = identity.clone();
                node.virtual_node = false;
                node.revision = revision;
                if foreground && !node.deleting_dependents {
                    node.deleting_dependents = true;
                    queue.push(Item::AttemptToDelete(uid.clone()));
                    queue.extend(node.dependents.iter().cloned().map(Item::AttemptToDelete));
                }
                node.deleting_dependents = foreground;
                node.being_deleted = being_deleted;
                node.finalizers = finalizers;
                before
            }
            None => {
                self.nodes.insert(
                    uid.clone(),
                    Node {
                        identity: identity.clone(),
                        owners: Arc::clone(&owners),
                        dependents: UidSet::default(),
                        finalizers,
                        being_deleted,
                        deleting_dependents: foreground,
                        virtual_node: false,
                        revision,
                    },
                );
                if foreground {
                    queue.push(Item::AttemptToDelete(uid.clone()));
                }
                Arc::default()
            }
        };
        self.absent.pop(&(uid.clone(), identity.namespace.clone()));
        if orphan {
            queue.push(Item::Orphan(uid.clone()));
        }
        // Re-link owners: drop links that went, add the new ones (virtual if unseen).
        for gone in previous_owners
            .iter()
            .filter(|old| !owners.iter().any(|o| o.uid == old.uid))
        {
            if let Some(owner) = self.nodes.get_mut(&gone.uid) {
                owner.dependents.remove(&uid);
                if owner.deleting_dependents {
                    queue.push(Item::AttemptToDelete(gone.uid.clone()));
                }
            }
        }
        for unblocked in previous_owners.iter().filter(|old| {
            old.block_owner_deletion
                && owners
                    .iter()
                    .any(|o| o.uid == old.uid && !o.block_owner_deletion)
        }) {
            queue.push(Item::AttemptToDelete(unblocked.uid.clone()));
        }
        for owner in owners.iter() {
            match self.nodes.get_mut(&owner.uid) {
                Some(node) => {
                    node.dependents.insert(uid.clone());
                    // GC19: a namespaced owner in another namespace cannot be this
                    // object's owner; let the worker find the reference dangling.
                    if !node.virtual_node
                        && node.identity.namespace.is_some()
                        && identity.namespace.is_some()
                        && node.identity.namespace != identity.namespace
                    {
                        queue.push(Item::AttemptToDelete(uid.clone()));
                    }
                }
                None => {
                    self.nodes.insert(
                        owner.uid.clone(),
                        Node {
                            identity: Identity {
                                api_version: owner.api_version.as_str().into(),
                                kind: owner.kind.as_str().into(),
                                namespace: identity.namespace.clone(),
                                name: owner.name.as_str().into(),
                            },
                            owners: Arc::default(),
                            dependents: UidSet::from_iter([uid.clone()]),
                            finalizers: Vec::new(),
                            being_deleted: false,
                            deleting_dependents: false,
                            virtual_node: true,
                            revision: 0,
                        },
                    );
                    queue.push(Item::AttemptToDelete(owner.uid.clone()));
                }
            }
        }
        queue
    }

    /// GC3 for a removal (observed, or found by verifying a virtual node).
    pub fn remove(&mut self, uid: &str) -> Vec<Item> {
        let mut queue = Vec::new();
        let Some(node) = self.nodes.remove(uid) else {
            return queue;
        };
        if !node.dependents.is_empty() {
            self.absent
                .put((uid.to_string(), node.identity.namespace.clone()), ());
        }
        queue.extend(node.dependents.iter().cloned().map(Item::AttemptToDelete));
        for owner in node.owners.iter() {
            if let Some(owner_node) = self.nodes.get_mut(&owner.uid) {
                owner_node.dependents.remove(uid);
                if owner_node.deleting_dependents {
                    queue.push(Item::AttemptToDelete(owner.uid.clone()));
                }
                if owner_node.virtual_node && owner_node.dependents.is_empty() {
                    self.nodes.remove(&owner.uid);
                }
            }
        }
        queue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config_map(name: &str, uid: &str, rv: u64, owners: &[(&str, &str)]) -> (Identity, Value) {
        let references: Vec<Value> = owners
            .iter()
            .map(|(name, uid)| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": uid}))
            .collect();
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": name, "namespace": "ns", "uid": uid, "resourceVersion": rv.to_string(),
            "ownerReferences": references}});
        let identity = Identity {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("ns".into()),
            name: name.into(),
        };
        (identity, object)
    }

    fn absent(uid: String) -> AbsentOwner {
        (uid, Some("ns".into()))
    }

    #[test]
    fn owner_references_are_read_with_their_blocking_flag() {
        let object = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "a", "uid": "u1", "blockOwnerDeletion": true},
            {"apiVersion": "example.com/v1", "kind": "Widget", "name": "b", "uid": "u2"},
            {"kind": "Broken"}
        ]}});
        let refs = owner_refs(&object);
        assert_eq!(refs.len(), 2);
        assert!(refs[0].block_owner_deletion);
        assert!(!refs[1].block_owner_deletion);
        assert_eq!(refs[1].api_version, "example.com/v1");
    }

    #[test]
    fn the_absent_owner_cache_keeps_the_500_most_recently_used() {
        let mut graph = Graph::default();
        for i in 0..ABSENT_OWNER_CACHE_SIZE.get() {
            graph.mark_absent(absent(format!("owner-{i}")));
        }
        // A lookup counts as a use: owner-0 is now the most recently used.
        assert!(graph.is_absent(&absent("owner-0".into())));
        for i in 0..100 {
            graph.mark_absent(absent(format!("later-{i}")));
        }
        assert_eq!(graph.absent_len(), 500);
        assert!(graph.is_absent(&absent("owner-0".into())), "recently used");
        assert!(!graph.is_absent(&absent("owner-1".into())), "evicted");
        assert!(!graph.is_absent(&absent("owner-100".into())), "evicted");
        assert!(graph.is_absent(&absent("owner-101".into())));
        assert!(graph.is_absent(&absent("later-99".into())));
    }

    /// The slow leak of issue 18: every owner removed with dependents used to stay in the
    /// cache for the life of the process.
    #[test]
    fn removing_many_owners_leaves_a_bounded_absent_cache() {
        let mut graph = Graph::default();
        for i in 0..5_000 {
            let (identity, owner) = config_map(&format!("o{i}"), &format!("owner-{i}"), 1, &[]);
            graph.put(identity, &owner);
            let (identity, dependent) = config_map(
                &format!("d{i}"),
                &format!("dependent-{i}"),
                2,
                &[(&format!("o{i}"), &format!("owner-{i}"))],
            );
            graph.put(identity, &dependent);
            let queued = graph.remove(&format!("owner-{i}"));
            assert_eq!(queued, [Item::AttemptToDelete(format!("dependent-{i}"))]);
            graph.remove(&format!("dependent-{i}"));
        }
        assert!(graph.nodes.is_empty());
        assert_eq!(graph.absent_len(), ABSENT_OWNER_CACHE_SIZE.get());
        assert!(graph.is_absent(&absent("owner-4999".into())));
        assert!(!graph.is_absent(&absent("owner-0".into())));
    }

    /// What a rebuild relies on: an owner that is not in the fresh list becomes a virtual
    /// node queued for verification, and removing it (verified absent) queues its dependent.
    #[test]
    fn a_graph_built_without_an_owner_verifies_it_and_then_queues_its_dependents() {
        let mut graph = Graph::default();
        let (identity, dependent) = config_map("d", "dependent", 7, &[("o", "owner")]);
        let queued = graph.put(identity, &dependent);
        assert_eq!(queued, [Item::AttemptToDelete("owner".into())]);
        assert!(graph.nodes["owner"].virtual_node);
        let queued = graph.remove("owner");
        assert_eq!(queued, [Item::AttemptToDelete("dependent".into())]);
        assert!(graph.is_absent(&absent("owner".into())));
    }

    #[test]
    fn a_replayed_older_event_changes_nothing() {
        let mut graph = Graph::default();
        let (identity, owner) = config_map("o", "owner", 5, &[]);
        graph.put(identity.clone(), &owner);
        let (_, older) = config_map("o", "owner", 4, &[("x", "someone-else")]);
        assert!(graph.put(identity, &older).is_empty());
        assert!(graph.nodes["owner"].owners.is_empty());
        assert!(!graph.nodes.contains_key("someone-else"));
    }

    /// What deletion insight relies on to answer from the graph: it is at a revision only
    /// once a rebuild's lists are caught up with, not while it is ahead of the stream, and
    /// not after the collector stopped following.
    #[test]
    fn the_graph_is_at_one_revision_only_when_every_change_up_to_it_is_applied() {
        let mut graph = Graph::rebuilt_from(10);
        assert_eq!(graph.consistent_at(), None, "just rebuilt");
        graph.applied(7);
        assert_eq!(
            graph.consistent_at(),
            None,
            "replaying changes older than the lists"
        );
        graph.applied(10);
        assert_eq!(graph.consistent_at(), Some(10));
        graph.applied(12);
        assert_eq!(graph.consistent_at(), Some(12));
        graph.changed_ahead_of_stream(20);
        assert_eq!(graph.consistent_at(), None, "ahead of the stream");
        graph.applied(15);
        assert_eq!(graph.consistent_at(), None, "still ahead");
        graph.applied(20);
        assert_eq!(graph.consistent_at(), Some(20), "the stream caught up");
        graph.stop_following();
        graph.applied(21);
        assert_eq!(graph.consistent_at(), None, "not following any more");
    }

    #[test]
    fn a_node_keeps_the_finalizers_of_its_latest_state() {
        let mut graph = Graph::default();
        let (identity, mut object) = config_map("o", "owner", 1, &[]);
        object["metadata"]["finalizers"] = json!(["example.com/a"]);
        graph.put(identity.clone(), &object);
        assert_eq!(graph.nodes["owner"].finalizers, ["example.com/a"]);
        object["metadata"]["finalizers"] = json!([]);
        object["metadata"]["resourceVersion"] = json!("2");
        graph.put(identity, &object);
        assert!(graph.nodes["owner"].finalizers.is_empty());
    }
}
