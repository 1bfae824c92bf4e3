//! A read-only view of what the garbage collector knows, for deletion insight: its ownership
//! index (owner → dependents), which items have work queued, running or waiting for a retry,
//! and how deep its queue is.
//!
//! The view shares the collector's state (the same locks the collector takes), so an answer
//! is current to the collector's own knowledge. It never changes that state.
//!
//! # Guarantees
//! - [`GcView::observed_dependents_at`] answers for a revision only when the graph has
//!   applied every change of the store's change stream up to it and none after, checked
//!   under the lock the collector changes it under. The graph is at no revision while a
//!   rebuild's lists are being caught up with, after it changed from a read ahead of the
//!   stream (until the stream passes that read), or once the collector stopped.
//! - [`GcView::work_for_orphan`] and [`GcView::work_for_attempt`] report an item as queued,
//!   in flight or retrying from the moment it is queued until its processing succeeded; an
//!   item moves from "queued" to "in flight" with no gap in between.
//!
//! # Caveats
//! - The graph follows the store's change stream, so it may lag the newest revision by the
//!   stream's latency. Callers that answer at one store revision either re-read what the
//!   graph names at that revision, or ask [`GcView::observed_dependents_at`], which answers
//!   only while the graph is exactly that revision's state.
//! - A view whose collector is not running (the server was started without it, or it has not
//!   built its first graph yet) answers [`GcView::running`] with false and knows nothing.
//! - A view built from a copy of a cluster's objects ([`GcView::of_objects`], for the CLI's
//!   client-side answers) knows the ownership index but not the collector's queues:
//!   [`GcView::sees_queues`] is false and every `work_for_*` answers None.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use compact_str::CompactString;

use super::graph::{Graph, Identity, Item, Node};
use crate::object::OwnerReference;

/// Why an item is being retried: how often it failed and the last error.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Failure {
    pub attempts: u32,
    pub last_error: String,
}

/// The collector's state the view shares.
#[derive(Clone, Default)]
pub struct GcView {
    pub(super) graph: Arc<Mutex<Graph>>,
    pub(super) queued: Arc<Mutex<HashSet<Item>>>,
    pub(super) in_flight: Arc<Mutex<HashMap<Item, usize>>>,
    pub(super) failures: Arc<Mutex<HashMap<Item, Failure>>>,
    pub(super) running: Arc<AtomicBool>,
    /// Built outside the server, from a copy of the objects: the queues are not visible.
    outside: bool,
    /// Built on a standby replica: the collector runs on this replica (the holder of the
    /// controllers' Lease), whose queues are not visible here.
    runs_on: Option<String>,
}

/// The collector's work for one item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GcWork {
    /// Waiting in the queue.
    Queued,
    /// A worker is on it now.
    InFlight,
    /// It failed and waits for its next attempt.
    Retrying { attempts: u32, last_error: String },
}

/// One dependent of an owner, as the graph knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dependent {
    pub uid: String,
    pub api_version: CompactString,
    pub kind: CompactString,
    pub namespace: Option<CompactString>,
    pub name: CompactString,
    /// Its reference to the owner has `blockOwnerDeletion: true`.
    pub block_owner_deletion: bool,
}

/// An owner's dependents of one type in one namespace, with what the graph knows of their
/// state: enough for a deletion plan to judge them without reading them from the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObservedGroup {
    pub api_version: CompactString,
    pub kind: CompactString,
    pub namespace: Option<CompactString>,
    /// Sorted by name.
    pub members: Vec<ObservedDependent>,
}

/// One member of an [`ObservedGroup`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObservedDependent {
    pub uid: String,
    pub name: CompactString,
    /// Its references with a uid (shared with the graph, not copied).
    pub owners: Arc<[OwnerReference]>,
    pub finalizers: Vec<String>,
    /// `metadata.deletionTimestamp` is set.
    pub terminating: bool,
    /// It owns something itself: a plan need not ask about the dependents of those that
    /// do not.
    pub has_dependents: bool,
}

/// An answer the graph can give only when it is exactly the store's state at a revision.
#[derive(Debug)]
pub enum AtRevision<T> {
    Answer(T),
    /// The graph has not applied every change up to the revision yet: ask again shortly.
    Behind,
    /// The graph is past the revision, between two revisions (catching up after a rebuild,
    /// or changed from a read ahead of the stream), or not following the store at all
    /// (a copy's view, a stopped collector): read the store instead.
    Elsewhere,
}

/// An owner's dependents of one type in one namespace, as the graph knows them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DependentGroup {
    pub api_version: CompactString,
    pub kind: CompactString,
    pub namespace: Option<CompactString>,
    /// How many dependents the group has.
    pub count: usize,
    /// Each of them, sorted by name; empty when `count` is above the caller's `list_up_to`
    /// (a caller that reads the whole collection does not need them one by one).
    pub members: Vec<Dependent>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl GcView {
    /// A view of the ownership index of `objects` (each with the apiVersion and kind it is
    /// served as), built the way the collector builds its graph from a fresh list; there are
    /// no queues. Used to answer reviews in a client from a copy of a cluster's objects.
    pub fn of_objects<'a>(objects: impl IntoIterator<Item = &'a serde_json::Value>) -> GcView {
        let mut graph = Graph::default();
        for object in objects {
            let text = |field: &str| {
                object
                    .get(field)
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or_default()
                    .into()
            };
            let identity = Identity {
                api_version: text("apiVersion"),
                kind: text("kind"),
                namespace: crate::object::meta_str(object, "namespace")
                    .filter(|n| !n.is_empty())
                    .map(CompactString::from),
                name: crate::object::name(object).into(),
            };
            // The work a fresh graph implies is the live collector's business, not a copy's.
            let _ = graph.put(identity, object);
        }
        let view = GcView {
            graph: Arc::new(Mutex::new(graph)),
            outside: true,
            ..GcView::default()
        };
        view.set_running(true);
        view
    }

    /// A standby replica's view: the ownership index of `objects` (read at one revision),
    /// the queues unknown, the collector running on `replica`, which holds the controllers'
    /// Lease. A standby runs no collector of its own, yet its reviews must follow dependents
    /// and must not call an object stuck for want of a collector that runs elsewhere.
    pub fn on_another_replica<'a>(
        objects: impl IntoIterator<Item = &'a serde_json::Value>,
        replica: String,
    ) -> GcView {
        GcView {
            runs_on: Some(replica),
            ..GcView::of_objects(objects)
        }
    }

    /// The replica whose collector does the work, for a standby's view.
    pub fn runs_on(&self) -> Option<&str> {
        self.runs_on.as_deref()
    }

    /// Whether the collector's queues are visible: false for a view built outside the
    /// server ([`GcView::of_objects`]) or on a standby replica
    /// ([`GcView::on_another_replica`]), where whether work is queued is unknown.
    pub fn sees_queues(&self) -> bool {
        !self.outside
    }

    /// Whether a collector is running and has built its graph.
    pub fn running(&self) -> bool {
        self.running.load(Ordering::Acquire)
    }

    pub(super) fn set_running(&self, running: bool) {
        self.running.store(running, Ordering::Release);
    }

    /// Forgets queued, running and failed work: a stopped collector (one whose replica lost
    /// the controllers' Lease) has none, and the next one starts from a fresh graph.
    pub(super) fn clear_work(&self) {
        lock(&self.graph).stop_following();
        lock(&self.queued).clear();
        lock(&self.in_flight).clear();
        lock(&self.failures).clear();
    }

    /// Items waiting in the attempt-to-delete and orphan queues.
    pub fn queue_depth(&self) -> usize {
        lock(&self.queued).len()
    }

    /// The orphan work (GC16) for the object `uid`, if any.
    pub fn work_for_orphan(&self, uid: &str) -> Option<GcWork> {
        self.work_for(&Item::Orphan(uid.to_string()))
    }

    /// The attempt-to-delete work (GC4–GC14) for the object `uid`, if any.
    pub fn work_for_attempt(&self, uid: &str) -> Option<GcWork> {
        self.work_for(&Item::AttemptToDelete(uid.to_string()))
    }

    fn work_for(&self, item: &Item) -> Option<GcWork> {
        // In the order process() moves an item through: in flight is marked before the item
        // leaves the queue, and the failure is recorded before it leaves "in flight".
        if lock(&self.queued).contains(item) {
            return Some(GcWork::Queued);
        }
        if lock(&self.in_flight).contains_key(item) {
            return Some(GcWork::InFlight);
        }
        lock(&self.failures)
            .get(item)
            .map(|failure| GcWork::Retrying {
                attempts: failure.attempts,
                last_error: failure.last_error.clone(),
            })
    }

    /// The dependents the graph knows for the owner `uid`; None when the owner is not in the
    /// graph. Owners referenced but never observed (virtual nodes) are not dependents.
    pub fn dependents(&self, uid: &str) -> Option<Vec<Dependent>> {
        let graph = lock(&self.graph);
        let node = graph.nodes.get(uid)?;
        let mut dependents: Vec<Dependent> = observed_dependents(&graph, node)
            .map(|(dependent_uid, dependent)| dependent_of(uid, dependent_uid, dependent))
            .collect();
        // Sorted for a stable answer, after the graph's lock is let go.
        drop(graph);
        dependents.sort_unstable_by(|a, b| {
            (&a.kind, &a.namespace, &a.name).cmp(&(&b.kind, &b.namespace, &b.name))
        });
        Some(dependents)
    }

    /// The observed dependents of each owner of `uids` (by position), with their owners,
    /// finalizers and whether they are terminating, if the graph is exactly the store's
    /// state at `revision`: the revision of the newest change the store had made to any
    /// object at the reader's snapshot ([`finale_store::Store::last_change_in`]), so that
    /// the answer is the snapshot's. Each owner's dependents are sorted by kind, namespace,
    /// apiVersion and name.
    ///
    /// One lock for every owner asked about, checked and read together: the collector
    /// cannot apply a change in between.
    pub fn observed_dependents_at(
        &self,
        uids: &[&str],
        revision: i64,
    ) -> AtRevision<Vec<Vec<ObservedGroup>>> {
        if !self.running() || self.outside {
            return AtRevision::Elsewhere;
        }
        let graph = lock(&self.graph);
        match graph.consistent_at() {
            Some(at) if at == revision => {}
            Some(at) if at < revision => return AtRevision::Behind,
            // Past it, or between revisions: a rebuild catching up is as good as behind
            // only if it will get there, which a graph ahead of the stream may not soon.
            _ => return AtRevision::Elsewhere,
        }
        let mut answers: Vec<Vec<ObservedGroup>> = uids
            .iter()
            .map(|uid| observed_groups_in(&graph, uid))
            .collect();
        drop(graph);
        sort_groups(
            &mut answers,
            |g| (&g.kind, &g.namespace, &g.api_version),
            |g| g.members.sort_unstable_by(|a, b| a.name.cmp(&b.name)),
        );
        AtRevision::Answer(answers)
    }

    /// The dependents the graph knows for each owner of `uids` (by position; empty for an
    /// owner the graph does not know), grouped by type and namespace, each group listed one
    /// by one only when it has at most `list_up_to` members. Groups are sorted by kind,
    /// namespace and apiVersion, members by name.
    ///
    /// One lock for every owner asked about: a plan asks about each of ten thousand
    /// dependents in turn (most have none). For an owner of ten thousand dependents of one
    /// type this copies no dependent: a caller that reads their whole collection anyway
    /// needs only the count.
    pub fn dependent_groups_of(
        &self,
        uids: &[&str],
        list_up_to: usize,
    ) -> Vec<Vec<DependentGroup>> {
        let graph = lock(&self.graph);
        let mut answers: Vec<Vec<DependentGroup>> = uids
            .iter()
            .map(|uid| groups_in(&graph, uid, list_up_to))
            .collect();
        drop(graph);
        sort_groups(
            &mut answers,
            |g| (&g.kind, &g.namespace, &g.api_version),
            |g| g.members.sort_unstable_by(|a, b| a.name.cmp(&b.name)),
        );
        answers
    }
}

/// The dependents of `uid` in `graph`, grouped (unsorted); see
/// [`GcView::dependent_groups_of`].
fn groups_in(graph: &Graph, uid: &str, list_up_to: usize) -> Vec<DependentGroup> {
    grouped_dependents(graph, uid)
        .into_iter()
        .map(|(identity, members)| DependentGroup {
            api_version: identity.api_version.clone(),
            kind: identity.kind.clone(),
            namespace: identity.namespace.clone(),
            count: members.len(),
            members: if members.len() > list_up_to {
                Vec::new()
            } else {
                members
                    .into_iter()
                    .map(|(dependent_uid, dependent)| dependent_of(uid, dependent_uid, dependent))
                    .collect()
            },
        })
        .collect()
}

/// The observed dependents of `uid` in `graph` with their state, grouped (unsorted); see
/// [`GcView::observed_dependents_at`].
fn observed_groups_in(graph: &Graph, uid: &str) -> Vec<ObservedGroup> {
    grouped_dependents(graph, uid)
        .into_iter()
        .map(|(identity, members)| ObservedGroup {
            api_version: identity.api_version.clone(),
            kind: identity.kind.clone(),
            namespace: identity.namespace.clone(),
            members: members
                .into_iter()
                .map(|(dependent_uid, dependent)| ObservedDependent {
                    uid: dependent_uid.clone(),
                    name: dependent.identity.name.clone(),
                    owners: if dependent.owners.iter().all(|o| !o.uid.is_empty()) {
                        Arc::clone(&dependent.owners)
                    } else {
                        dependent
                            .owners
                            .iter()
                            .filter(|o| !o.uid.is_empty())
                            .cloned()
                            .collect()
                    },
                    finalizers: dependent.finalizers.clone(),
                    terminating: dependent.being_deleted,
                    has_dependents: !dependent.dependents.is_empty(),
                })
                .collect(),
        })
        .collect()
}

/// The observed dependents of `uid` in `graph`, grouped by type and namespace (unsorted),
/// each group named by its first member's identity.
fn grouped_dependents<'g>(
    graph: &'g Graph,
    uid: &str,
) -> Vec<(&'g Identity, Vec<(&'g String, &'g Node)>)> {
    let Some(node) = graph.nodes.get(uid) else {
        return Vec::new();
    };
    // One lookup per dependent; an owner's dependents fall into a few groups (usually
    // one), so a group is found by a short scan rather than by hashing every identity.
    let mut groups: Vec<(&Identity, Vec<(&String, &Node)>)> = Vec::new();
    for (dependent_uid, dependent) in observed_dependents(graph, node) {
        let identity = &dependent.identity;
        let same_group = |(group, _): &&mut (&Identity, _)| {
            group.kind == identity.kind
                && group.namespace == identity.namespace
                && group.api_version == identity.api_version
        };
        match groups.iter_mut().find(same_group) {
            Some((_, members)) => members.push((dependent_uid, dependent)),
            None => groups.push((identity, vec![(dependent_uid, dependent)])),
        }
    }
    groups
}

/// Sorts each owner's groups by kind, namespace and apiVersion, and each group's members by
/// name (`sort_members`), for a stable answer; done after the graph's lock is let go.
fn sort_groups<G>(
    answers: &mut [Vec<G>],
    key: impl Fn(&G) -> (&CompactString, &Option<CompactString>, &CompactString),
    sort_members: impl Fn(&mut G),
) {
    for groups in answers {
        groups.iter_mut().for_each(&sort_members);
        groups.sort_unstable_by(|a, b| key(a).cmp(&key(b)));
    }
}

/// `node`'s dependents that the graph has observed: owners referenced but never observed
/// (virtual nodes) are not dependents.
fn observed_dependents<'g>(
    graph: &'g Graph,
    node: &'g Node,
) -> impl Iterator<Item = (&'g String, &'g Node)> {
    node.dependents.iter().filter_map(|dependent_uid| {
        let dependent = graph.nodes.get(dependent_uid)?;
        (!dependent.virtual_node).then_some((dependent_uid, dependent))
    })
}

/// One dependent of the owner `owner_uid`, as a [`Dependent`].
fn dependent_of(owner_uid: &str, dependent_uid: &str, dependent: &Node) -> Dependent {
    Dependent {
        uid: dependent_uid.to_string(),
        api_version: dependent.identity.api_version.clone(),
        kind: dependent.identity.kind.clone(),
        namespace: dependent.identity.namespace.clone(),
        name: dependent.identity.name.clone(),
        block_owner_deletion: dependent
            .owners
            .iter()
            .any(|o| o.uid == owner_uid && o.block_owner_deletion),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config_map(
        name: &str,
        uid: &str,
        rv: u64,
        owner: Option<&str>,
    ) -> (Identity, serde_json::Value) {
        let references: Vec<serde_json::Value> = owner
            .into_iter()
            .map(|owner| {
                json!({"apiVersion": "v1", "kind": "ConfigMap", "name": owner,
                "uid": owner, "blockOwnerDeletion": true})
            })
            .collect();
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": name, "namespace": "ns", "uid": uid, "resourceVersion": rv.to_string(),
            "finalizers": ["example.com/hold"], "deletionTimestamp": "2026-11-28T00:00:00Z",
            "ownerReferences": references}});
        let identity = Identity {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("ns".into()),
            name: name.into(),
        };
        (identity, object)
    }

    /// The graph answers for a revision only when it is exactly there: behind, it says so
    /// (the caller waits); past it, or in a copy's view, it sends the caller to the store.
    #[test]
    fn observed_dependents_are_answered_only_at_the_graphs_own_revision() {
        let view = GcView::default();
        {
            let mut graph = lock(&view.graph);
            for (identity, object) in [
                config_map("owner", "owner", 1, None),
                config_map("b", "b", 2, Some("owner")),
                config_map("a", "a", 3, Some("owner")),
            ] {
                graph.put(identity, &object);
            }
            graph.applied(3);
        }
        assert!(
            matches!(
                view.observed_dependents_at(&["owner"], 3),
                AtRevision::Elsewhere
            ),
            "a collector that is not running"
        );
        view.set_running(true);
        assert!(matches!(
            view.observed_dependents_at(&["owner"], 4),
            AtRevision::Behind
        ));
        assert!(matches!(
            view.observed_dependents_at(&["owner"], 2),
            AtRevision::Elsewhere
        ));
        let AtRevision::Answer(answers) = view.observed_dependents_at(&["owner", "a", "none"], 3)
        else {
            panic!("the graph is at revision 3");
        };
        assert_eq!(answers[0].len(), 1, "one group: ConfigMaps in ns");
        let group = &answers[0][0];
        assert_eq!(
            (group.kind.as_str(), group.namespace.as_deref()),
            ("ConfigMap", Some("ns"))
        );
        let names: Vec<&str> = group.members.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["a", "b"], "sorted by name");
        assert_eq!(group.members[0].finalizers, ["example.com/hold"]);
        assert!(group.members[0].terminating);
        assert!(group.members[0].owners[0].block_owner_deletion);
        assert!(answers[1].is_empty() && answers[2].is_empty());

        let copy = GcView::of_objects(std::iter::empty());
        assert!(matches!(
            copy.observed_dependents_at(&["owner"], 3),
            AtRevision::Elsewhere
        ));
    }
}
