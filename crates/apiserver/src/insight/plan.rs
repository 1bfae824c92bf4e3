//! Plan mode: what a DELETE with a given `propagationPolicy` would do, without doing it.
//!
//! A [`Planner`] reads the same inputs as the [`Explainer`]: one store revision (a
//! [`Snapshot`]), the garbage collector's read-only [`GcView`] for the owner → dependents
//! index, and the `FinalizerClaim`s (through the Explainer, which also judges each finalizer).
//! It works in two steps:
//!
//! 1. **Reach.** The target, its dependents followed transitively through the collector's
//!    graph, a namespace's content (one range read per resource in that namespace), and every
//!    owner those objects name outside that set (one read each), so a dependent's other
//!    owners can be judged. Dependents come from one of two places:
//!    - **the collector's graph, with no read at all**, when it is exactly the snapshot: it
//!      has applied every change up to the newest object change at the snapshot's revision
//!      and none after ([`Snapshot::last_object_change`], [`GcView::observed_dependents_at`];
//!      the plan waits up to [`GRAPH_CATCH_UP`] for it to get there). The graph holds each
//!      object's references, finalizers and whether it is terminating, which is all a plan
//!      reads of most kinds; kinds whose body deletion reads (Pods, Namespaces) are still
//!      read from the store;
//!    - **the store**, otherwise (a write landed between the snapshot and the look, the graph
//!      is rebuilding, the store cannot tell its newest change, or the answer is computed
//!      from a copy): each dependent the live index names is re-read at the snapshot and its
//!      reference re-checked; when an owner has more than 64 dependents of one type in one
//!      namespace, their collection is read once, whole, and every object in it that
//!      references the owner is taken; objects read in bulk are decoded into a compact
//!      [`Reached`], without their bodies.
//!
//!    `finale_deletion_plans_total{dependents}` counts plans by where they found them.
//!
//!    Dependents taken from the graph that hold nothing, own nothing and name the same
//!    owners are reached as one node per class of *identical leaves* (see [`Leaf`]).
//! 2. **Replay.** The collector's and the namespace controller's rules run over that small
//!    graph in memory, as the real DELETE would set them off: the registry's own decision
//!    rules for which finalizers a DELETE leaves ([`deletion::gc_finalizers`],
//!    [`deletion::namespace_gc_finalizer`], [`deletion::pod_grace_period`]), then GC4–GC16
//!    (dangling, waiting and solid references; foreground's `blockOwnerDeletion`; orphaning)
//!    and N6 (pods first, then the rest). It runs twice: once with only the finalizers whose
//!    controller is alive being removed — what happens while hangs last — and once with every
//!    finalizer removed — where the DELETE ends once the hangs are resolved.
//!
//! Each reached object gets an outcome: `Deletes`, `Orphans` (stays, its reference to a
//! deleted owner removed) or `Keeps` (stays because an owner that is not deleted keeps it,
//! named in `evidence.keptBy`). An object deleted in the end that carries a finalizer nobody
//! will remove (unclaimed, or claimed by a controller whose Lease expired or is missing), or a
//! Pod whose grace period no node agent will end (its Node's Lease is not renewed), *hangs*; objects whose deletion waits behind
//! a hang are *blocked*. The verdict is `WillHang` when anything hangs, else `WillComplete`.
//!
//! # Guarantees
//! - Reads are by key or by index only: the collector's dependents index and one namespace
//!   prefix per resource for a namespace's content; no plan lists the whole store.
//! - Every read is at the snapshot's revision, reported as `status.resourceVersion`; what is
//!   taken from the collector's graph is taken only while the graph is exactly that
//!   revision's state, checked under the graph's lock.
//! - A plan sees every write acknowledged before it was asked: the snapshot is the store's
//!   latest revision, and the graph is used only once it has caught up with it.
//! - Counts in `status.plan` are exact; only the tree in `causes` is cut to `maxNodes`.
//! - Nothing is written.
//!
//! # Assumptions
//! - Controllers whose Lease is live remove their finalizers; nobody removes the others.
//! - Owners outside the DELETE's reach stay as they are (one that is itself being deleted by
//!   an earlier request still counts as keeping its dependents).
//!
//! # Caveats
//! - When the store is read, the collector's index is live state: a dependent created in the
//!   last milliseconds may not be in it yet (unless its collection is read whole, when the
//!   snapshot decides). With the collector stopped, no dependent is known (the summary says
//!   so).
//! - Only the embedded store can tell its newest object change cheaply; on etcd every plan
//!   reads the store.
//! - Where the collector's outcome depends on timing, the replay takes the usual order: the
//!   items queued together are decided at once, each on the state before the others' writes
//!   land (reads take microseconds, writes a durable commit). This matters only while a hang
//!   lasts — e.g. in foreground deletion, whether a dependent of two owners that are both
//!   being deleted still blocks the first when it is reached — never for what is deleted in
//!   the end.
//! - Deleting a CustomResourceDefinition also deletes its instances; Plan does not follow
//!   that yet.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use serde_json::Value;

use super::api::{CauseNode, CauseState, CauseType, ExternalResource, ObjectRef, PlanStatus};
use super::pod_agent::{Agent, agent_evidence};
use super::reached::Reached;
use super::review::{self, Explainer, evidence, node, object_ref, plural};
use super::snapshot::{Snapshot, deletion_reads_body};
use crate::controllers::gc::{
    AtRevision, Dependent, DependentGroup, GcView, ObservedDependent, ObservedGroup, UidMap,
};
use crate::deletion::{self, FOREGROUND_FINALIZER, NAMESPACE_FINALIZER, ORPHAN_FINALIZER};
use crate::object::{self, OwnerReference};
use crate::registry::DeleteOptions;
use crate::resources::{Catalog, ResourceType};
use crate::status::ApiResult;
use compact_str::CompactString;

/// A bound on replay steps, far above what any reachable graph needs (each step removes a
/// finalizer, a reference or an object, or sets a deletion); a guard against a rule bug.
const MAX_STEPS_PER_OBJECT: usize = 64;

/// Where one owner reference points.
#[derive(Clone, Debug, PartialEq)]
enum RefTarget {
    /// An object in the plan's graph.
    Node(usize),
    /// An owner that does not exist (or another object of the same name): dangling (GC5,
    /// GC17, GC19).
    Dangling,
    /// An owner the collector can never verify, so it never collects the dependent (GC20,
    /// or an owner kind nobody serves): the text says which.
    Unverifiable(String),
}

#[derive(Clone, Debug)]
struct OwnerLink {
    target: RefTarget,
    block: bool,
}

/// What holds an object once it is terminating, besides the collector's finalizers.
#[derive(Clone, Debug)]
struct Hold {
    /// The finalizer (or `spec.finalizers` token of a namespace); empty for a grace period.
    finalizer: String,
    in_spec: bool,
    /// The Explainer's judgement: `Progressing` when a live controller removes it.
    cause: CauseNode,
}

impl Hold {
    fn removed_by_a_controller(&self) -> bool {
        self.cause.state == CauseState::Progressing
    }
}

/// One object of the plan's graph.
struct Node {
    resource: Arc<ResourceType>,
    this: ObjectRef,
    finalizers: Vec<String>,
    terminating: bool,
    /// Its `ownerReferences`, taken when they are resolved into `owners`.
    references: Arc<[OwnerReference]>,
    /// The object itself where it was read whole (see [`Reached::body`]).
    body: Option<Value>,
    /// In the DELETE's reach: the target, its dependents, a namespace's content.
    in_scope: bool,
    /// Reached as a namespace's content (deleted by the namespace controller).
    content: bool,
    /// The object it was reached from, for the tree.
    parent: Option<usize>,
    /// Shared with both replays' starting states, which copy no reference.
    owners: Arc<Vec<OwnerLink>>,
    /// Its `ownerReferences`' count of targets in the graph; in-scope dependents by index.
    dependents: Vec<usize>,
    holds: Vec<Hold>,
    /// A Pod's grace period if deleted now (PG1), when no node agent will end it.
    grace_seconds: i64,
    /// Set when this node stands for a class of leaves that share one fate (see
    /// [`Leaf`]): every member, in name order, the first being `this`. None for a node that
    /// is one object.
    members: Option<Vec<Leaf>>,
}

/// One member of a class of *identical leaves*: dependents of one type in one namespace,
/// reached from the collector's graph, that hold no finalizer, are not terminating, own
/// nothing, and name exactly the same owner references. Every rule of the replay (a DELETE's
/// D5–D6, GC4–GC10 for a dependent, GC14 and GC16 for its owners) reads of such an object
/// only those, so the members of a class are decided alike, in the same rounds: the plan
/// replays one node for the class, counts its members, and lists them one by one only in the
/// tree. An owner of ten thousand plain dependents replays one node, not ten thousand.
struct Leaf {
    name: CompactString,
    uid: String,
}

impl Node {
    /// How many objects the node stands for.
    fn count(&self) -> usize {
        self.members.as_ref().map_or(1, Vec::len)
    }
}

/// The replayed state of one object.
#[derive(Clone, Debug)]
struct Sim {
    exists: bool,
    terminating: bool,
    /// `metadata.finalizers`, collector's included.
    finalizers: Vec<String>,
    /// A namespace's `spec.finalizers`.
    spec_tokens: Vec<String>,
    grace_pending: bool,
    /// Shared until changed: every round copies the whole state (see [`Replay::seen`]), and
    /// most objects' references never change.
    owners: Arc<Vec<OwnerLink>>,
    /// In-scope owners whose reference the orphan worker removed.
    orphaned_from: Vec<usize>,
}

/// What a round's decisions read of an object as the round found it: copied for every
/// object at each round's start, so it holds only that (a whole [`Sim`] is three lists).
#[derive(Clone, Debug)]
struct Seen {
    exists: bool,
    /// Terminating with `foregroundDeletion`: waiting for its blocking dependents.
    waiting: bool,
    owners: Arc<Vec<OwnerLink>>,
}

impl Seen {
    fn of(sim: &Sim) -> Seen {
        Seen {
            exists: sim.exists,
            waiting: Replay::is_sim_waiting(sim),
            owners: Arc::clone(&sim.owners),
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Work {
    Progress(usize),
    Attempt(usize),
}

/// The replay of a DELETE over the graph.
struct Replay<'n> {
    nodes: &'n [Node],
    state: Vec<Sim>,
    /// The state at the start of the current round: what every decision of the round reads.
    /// The collector's workers take the items queued together at once, and each reads the
    /// store before the others' writes land; deciding on the round's starting state is how
    /// the replay matches that.
    seen: Vec<Seen>,
    queue: VecDeque<Work>,
    /// Every finalizer is removed in the end (the hangs resolved), or only live ones.
    resolve_hangs: bool,
}

fn has(list: &[String], finalizer: &str) -> bool {
    list.iter().any(|f| f == finalizer)
}

impl<'n> Replay<'n> {
    fn new(nodes: &'n [Node], resolve_hangs: bool) -> Self {
        let state = nodes
            .iter()
            .map(|n| Sim {
                exists: true,
                terminating: n.terminating,
                finalizers: n.finalizers.clone(),
                spec_tokens: n.spec_tokens(),
                grace_pending: false,
                owners: Arc::clone(&n.owners),
                orphaned_from: Vec::new(),
            })
            .collect();
        Replay {
            nodes,
            seen: Vec::new(),
            state,
            queue: VecDeque::new(),
            resolve_hangs,
        }
    }

    fn run(&mut self, target: usize, policy: Option<&str>) {
        self.delete(target, policy);
        // Objects already terminating have their own work pending.
        for (index, node) in self.nodes.iter().enumerate() {
            if node.in_scope && self.state[index].terminating {
                self.queue.push_back(Work::Progress(index));
            }
        }
        let mut budget = self.nodes.len().saturating_mul(MAX_STEPS_PER_OBJECT) + 64;
        while !self.queue.is_empty() {
            let round: Vec<Work> = self.queue.drain(..).collect();
            self.seen.clear();
            self.seen.extend(self.state.iter().map(Seen::of));
            for work in round {
                if budget == 0 {
                    tracing::warn!(
                        "deletion plan replay ran out of steps; the answer may be partial"
                    );
                    return;
                }
                budget -= 1;
                match work {
                    Work::Progress(index) => self.progress(index),
                    Work::Attempt(index) => self.attempt(index),
                }
            }
        }
    }

    fn is_sim_waiting(s: &Sim) -> bool {
        s.exists && s.terminating && has(&s.finalizers, FOREGROUND_FINALIZER)
    }

    fn is_waiting(&self, index: usize) -> bool {
        Self::is_sim_waiting(&self.state[index])
    }

    /// Whether `index` was waiting at the start of the round.
    fn was_seen_waiting(&self, index: usize) -> bool {
        self.seen[index].waiting
    }

    /// `owner`'s dependents that exist and reference it, by `exists_with_owners`.
    fn dependents_by<'s>(
        &self,
        owner: usize,
        exists_with_owners: impl Fn(usize) -> Option<&'s [OwnerLink]>,
    ) -> Vec<usize> {
        self.nodes[owner]
            .dependents
            .iter()
            .copied()
            .filter(|&d| {
                exists_with_owners(d)
                    .is_some_and(|owners| owners.iter().any(|o| o.target == RefTarget::Node(owner)))
            })
            .collect()
    }

    /// In-scope dependents still referencing `owner`.
    fn live_dependents(&self, owner: usize) -> Vec<usize> {
        let state = &self.state;
        self.dependents_by(owner, |d| state[d].exists.then_some(&state[d].owners[..]))
    }

    /// In-scope dependents that referenced `owner` at the start of the round.
    fn seen_dependents(&self, owner: usize) -> Vec<usize> {
        let seen = &self.seen;
        self.dependents_by(owner, |d| seen[d].exists.then_some(&seen[d].owners[..]))
    }

    /// A DELETE of one object with `policy`, as the registry would apply it.
    fn delete(&mut self, index: usize, policy: Option<&str>) {
        let nodes = self.nodes;
        let node = &nodes[index];
        if !node.in_scope || !self.state[index].exists {
            return;
        }
        let options = DeleteOptions {
            propagation_policy: policy.map(str::to_string),
            ..DeleteOptions::default()
        };
        let was_waiting = self.is_waiting(index);
        let state = &mut self.state[index];
        if node.resource.is_namespace() && (!state.terminating || !state.spec_tokens.is_empty()) {
            if state.terminating {
                return;
            }
            // N4.2: terminating, with the request's GC finalizer only.
            if let Some(wanted) = deletion::namespace_gc_finalizer(&options) {
                state
                    .finalizers
                    .retain(|f| f != ORPHAN_FINALIZER && f != FOREGROUND_FINALIZER);
                state.finalizers.push(wanted.to_string());
            }
            state.terminating = true;
        } else {
            if node.resource.graceful && state.terminating {
                // D4: a graceful deletion under way is not restarted.
                return;
            }
            let grace = node.resource.graceful && node.grace_seconds > 0;
            let finalizers =
                deletion::gc_finalizers(&state.finalizers, node.resource.gc_policy, &options)
                    .unwrap_or_else(|| state.finalizers.clone());
            if finalizers.is_empty() && !grace {
                self.remove(index);
                return;
            }
            let changed = !state.terminating || finalizers != state.finalizers || grace;
            state.finalizers = finalizers;
            state.terminating = true;
            state.grace_pending = grace;
            if !changed {
                return;
            }
        }
        self.queue.push_back(Work::Progress(index));
        if !was_waiting && self.is_waiting(index) {
            // GC3: an owner turning foreground queues its dependents.
            for dependent in self.live_dependents(index) {
                self.queue.push_back(Work::Attempt(dependent));
            }
        }
    }

    /// The object is gone: its dependents are looked at again (GC3), and so are owners
    /// waiting for it and a namespace waiting for its content.
    fn remove(&mut self, index: usize) {
        let dependents = self.live_dependents(index);
        let state = &mut self.state[index];
        state.exists = false;
        state.terminating = false;
        for dependent in dependents {
            self.queue.push_back(Work::Attempt(dependent));
        }
        for owner in self.state[index].owners.iter() {
            if let RefTarget::Node(owner) = owner.target {
                self.queue.push_back(Work::Progress(owner));
            }
        }
        if self.nodes[index].content
            && let Some(namespace) = self.nodes[index].parent
        {
            self.queue.push_back(Work::Progress(namespace));
        }
    }

    fn removable(&self, hold: &Hold) -> bool {
        self.resolve_hangs || hold.removed_by_a_controller()
    }

    /// A terminating object: controllers remove their finalizers; the collector orphans or
    /// waits for blocking dependents (GC14, GC16); the namespace controller deletes content
    /// (N6); with nothing left, it goes.
    fn progress(&mut self, index: usize) {
        let nodes = self.nodes;
        let node = &nodes[index];
        if !node.in_scope || !self.state[index].exists || !self.state[index].terminating {
            return;
        }
        let removable: Vec<(String, bool)> = node
            .holds
            .iter()
            .filter(|h| !h.finalizer.is_empty() && self.removable(h))
            .map(|h| (h.finalizer.clone(), h.in_spec))
            .collect();
        let resolve = self.resolve_hangs;
        let state = &mut self.state[index];
        state
            .finalizers
            .retain(|f| !removable.iter().any(|(r, in_spec)| !in_spec && r == f));
        state
            .spec_tokens
            .retain(|f| !removable.iter().any(|(r, in_spec)| *in_spec && r == f));
        if resolve {
            state.grace_pending = false;
        }
        if has(&state.finalizers, ORPHAN_FINALIZER) {
            // GC16: every dependent loses its reference, then the owner its finalizer.
            for dependent in self.live_dependents(index) {
                let sim = &mut self.state[dependent];
                Arc::make_mut(&mut sim.owners).retain(|o| o.target != RefTarget::Node(index));
                sim.orphaned_from.push(index);
            }
            self.state[index]
                .finalizers
                .retain(|f| f != ORPHAN_FINALIZER);
        }
        if has(&self.state[index].finalizers, FOREGROUND_FINALIZER) {
            // GC14, on the graph as the round found it.
            let blocking: Vec<usize> = self
                .seen_dependents(index)
                .into_iter()
                .filter(|&d| {
                    self.seen[d]
                        .owners
                        .iter()
                        .any(|o| o.target == RefTarget::Node(index) && o.block)
                })
                .collect();
            if blocking.is_empty() {
                self.state[index]
                    .finalizers
                    .retain(|f| f != FOREGROUND_FINALIZER);
            } else {
                for dependent in blocking {
                    if !self.was_seen_waiting(dependent) {
                        self.queue.push_back(Work::Attempt(dependent));
                    }
                }
            }
        }
        if has(&self.state[index].spec_tokens, NAMESPACE_FINALIZER) {
            self.delete_content(index);
        }
        let state = &self.state[index];
        if state.finalizers.is_empty() && state.spec_tokens.is_empty() && !state.grace_pending {
            self.remove(index);
        }
    }

    /// N6.3–N6.6: pods first, the rest once no pod is left, each with `Background`; the
    /// `kubernetes` token goes once the namespace is empty.
    fn delete_content(&mut self, namespace: usize) {
        let content: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| {
                self.nodes[i].content
                    && self.nodes[i].parent == Some(namespace)
                    && self.state[i].exists
            })
            .collect();
        if content.is_empty() {
            self.state[namespace]
                .spec_tokens
                .retain(|f| f != NAMESPACE_FINALIZER);
            return;
        }
        let is_pod = |i: &usize| {
            let r = &self.nodes[*i].resource;
            r.group.is_empty() && r.plural == "pods"
        };
        let (pods, others): (Vec<usize>, Vec<usize>) = content.into_iter().partition(is_pod);
        for &pod in &pods {
            self.delete(pod, Some("Background"));
        }
        if pods.iter().any(|&p| self.state[p].exists) {
            return;
        }
        for other in others {
            self.delete(other, Some("Background"));
        }
    }

    /// GC4–GC10 for one dependent.
    fn attempt(&mut self, index: usize) {
        if !self.nodes[index].in_scope || !self.state[index].exists {
            return;
        }
        if self.state[index].terminating {
            if self.is_waiting(index) {
                // GC6
                self.progress(index);
            }
            // GC4
            return;
        }
        let owners = self.state[index].owners.clone();
        if owners.is_empty() {
            return;
        }
        // GC8, on the owners as the round found them.
        let (mut solid, mut stale, mut waiting) = (0, Vec::new(), Vec::new());
        for owner in owners.iter() {
            match owner.target {
                RefTarget::Dangling => stale.push(owner.target.clone()),
                RefTarget::Unverifiable(_) => solid += 1,
                RefTarget::Node(o) if !self.seen[o].exists => stale.push(owner.target.clone()),
                RefTarget::Node(o) if self.was_seen_waiting(o) => {
                    stale.push(owner.target.clone());
                    waiting.push(o);
                }
                RefTarget::Node(_) => solid += 1,
            }
        }
        if solid > 0 {
            // GC9: references to owners that go are removed; the object stays.
            if !stale.is_empty() {
                Arc::make_mut(&mut self.state[index].owners).retain(|o| !stale.contains(&o.target));
                for owner in waiting {
                    self.queue.push_back(Work::Progress(owner));
                }
            }
            return;
        }
        let own_dependents = self.seen_dependents(index);
        let policy = if !waiting.is_empty() && !own_dependents.is_empty() {
            // The cycle guard: a dependent already waiting on this object must not wait on
            // this object's owners in turn.
            if own_dependents.iter().any(|&d| self.was_seen_waiting(d)) {
                for link in Arc::make_mut(&mut self.state[index].owners).iter_mut() {
                    if matches!(link.target, RefTarget::Node(o) if waiting.contains(&o)) {
                        link.block = false;
                    }
                }
                for owner in &waiting {
                    self.queue.push_back(Work::Progress(*owner));
                }
            }
            "Foreground"
        } else if has(&self.state[index].finalizers, ORPHAN_FINALIZER) {
            "Orphan"
        } else if has(&self.state[index].finalizers, FOREGROUND_FINALIZER) {
            "Foreground"
        } else {
            "Background"
        };
        self.delete(index, Some(policy));
    }
}

impl Node {
    /// A namespace's `spec.finalizers` tokens; none for other kinds.
    fn spec_tokens(&self) -> Vec<String> {
        match &self.body {
            Some(body) if self.resource.is_namespace() => object::spec_finalizers(body),
            _ => Vec::new(),
        }
    }
}

/// One line of the tree under its parent: a reached object (`member` 0), or one member of
/// a class of identical leaves.
#[derive(Clone, Copy, Debug)]
struct Line {
    node: usize,
    member: usize,
}

/// A class member's line: the class's, naming the member.
fn member_line(template: &CauseNode, leaf: &Leaf) -> CauseNode {
    let mut line = template.clone();
    if let Some(object) = &mut line.object {
        object.name = leaf.name.clone();
        object.uid = leaf.uid.clone();
    }
    line
}

/// Takes the identical leaves out of one group of observed dependents (see [`Leaf`]),
/// grouped by their owner references; the others stay in `members`, in order. Members come
/// sorted by name, so each class's members are too.
fn take_leaf_classes(
    members: &mut Vec<ObservedDependent>,
) -> Vec<(Arc<[OwnerReference]>, Vec<Leaf>)> {
    let mut classes: Vec<(Arc<[OwnerReference]>, Vec<Leaf>)> = Vec::new();
    let mut others = Vec::new();
    for member in std::mem::take(members) {
        if member.has_dependents || member.terminating || !member.finalizers.is_empty() {
            others.push(member);
            continue;
        }
        let leaf = Leaf {
            name: member.name,
            uid: member.uid,
        };
        // Usually one class per group: the last one is tried first.
        let same = |(references, _): &&mut (Arc<[OwnerReference]>, Vec<Leaf>)| {
            Arc::ptr_eq(references, &member.owners) || references[..] == member.owners[..]
        };
        match classes.iter_mut().rev().find(same) {
            Some((_, leaves)) => leaves.push(leaf),
            None => classes.push((member.owners, vec![leaf])),
        }
    }
    *members = others;
    classes
}

/// `Kind` for the core group, `Kind.group` otherwise: the per-kind count's key.
fn kind_key(resource: &ResourceType) -> String {
    if resource.group.is_empty() {
        resource.kind.clone()
    } else {
        format!("{}.{}", resource.kind, resource.group)
    }
}

/// What the DELETE does to one reached object.
#[derive(Clone, Debug, PartialEq)]
enum Outcome {
    Deleted,
    Orphaned(Vec<usize>),
    Kept(Vec<String>),
}

/// While hangs last, a deleted object is gone, hangs itself, or waits.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Meanwhile {
    Gone,
    Hangs,
    /// Terminating, waiting for something that hangs.
    WaitsTerminating,
    /// Not reached yet: an owner it waits for hangs.
    WaitsNotStarted,
}

/// The answer of Plan mode.
pub struct Plan {
    pub plan: PlanStatus,
    pub causes: Vec<CauseNode>,
    pub summary: String,
    /// Where the dependents were found.
    pub dependents_read_from: DependentsSource,
}

/// Where a plan found the target's dependents (for `finale_deletion_plans_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DependentsSource {
    /// The collector's graph, exactly at the snapshot's revision, for every one of them (a
    /// kind whose body deletion reads is still read from the store).
    Collector,
    /// The store, at the snapshot, for some or all of them: the graph was not at the
    /// snapshot's revision (a write landed meanwhile, it was rebuilding, the store cannot
    /// tell its newest change, or the answer is computed from a copy).
    Store,
}

impl DependentsSource {
    pub fn label(self) -> &'static str {
        match self {
            DependentsSource::Collector => "collector",
            DependentsSource::Store => "store",
        }
    }
}

/// How long a plan waits for the collector's graph to apply the changes up to its snapshot
/// (the change stream's latency, microseconds when idle) before reading the store instead.
const GRAPH_CATCH_UP: std::time::Duration = std::time::Duration::from_millis(50);

pub struct Planner<'a> {
    catalog: &'a Catalog,
    snapshot: &'a Snapshot,
    gc: &'a GcView,
    explainer: Explainer<'a>,
    nodes: Vec<Node>,
    index: UidMap<usize>,
    /// Collections read whole at the snapshot (storage prefix, namespace) → their objects not
    /// reached yet: an owner with many dependents of one type in one namespace costs one
    /// range read instead of one read per dependent.
    listed: HashMap<(String, String), Vec<Option<Reached>>>,
    /// Types looked up by (apiVersion, kind): a plan looks up the same few kinds once per
    /// dependent and reference, and the catalog's lookup scans every served type.
    kinds: Vec<(String, String, Option<Arc<ResourceType>>)>,
    /// Whether any dependents were read from the store rather than the collector's graph.
    read_store: bool,
    /// The nodes that stand for classes of identical leaves, whose members are not in
    /// `index` one by one (see [`Planner::index_class_members`]).
    classes: Vec<usize>,
    /// Whether leaves may be taken as classes: not under a namespace, whose content is
    /// reached object by object before any dependent.
    form_classes: bool,
}

/// Dependents of one owner, of one type in one namespace, above which their collection is
/// read whole rather than one object at a time.
const LIST_THRESHOLD: usize = 64;

impl<'a> Planner<'a> {
    pub async fn new(
        catalog: &'a Catalog,
        snapshot: &'a Snapshot,
        gc: &'a GcView,
        now: chrono::DateTime<chrono::Utc>,
    ) -> ApiResult<Planner<'a>> {
        Ok(Planner {
            catalog,
            snapshot,
            gc,
            explainer: Explainer::new(catalog, snapshot, gc, now).await?,
            nodes: Vec::new(),
            index: UidMap::default(),
            listed: HashMap::new(),
            kinds: Vec::new(),
            read_store: false,
            classes: Vec::new(),
            form_classes: true,
        })
    }

    /// The served type of (apiVersion, kind), through the plan's small cache.
    fn lookup_kind(&mut self, api_version: &str, kind: &str) -> Option<Arc<ResourceType>> {
        if let Some((_, _, found)) = self
            .kinds
            .iter()
            .find(|(v, k, _)| v == api_version && k == kind)
        {
            return found.clone();
        }
        let found = self.catalog.lookup_kind(api_version, kind);
        self.kinds
            .push((api_version.to_string(), kind.to_string(), found.clone()));
        found
    }

    /// Every object of `resource` in `namespace` at the snapshot: decoded compactly, or
    /// whole (trimmed) for kinds whose body deletion reads.
    async fn read_collection(
        &self,
        resource: &Arc<ResourceType>,
        namespace: Option<&str>,
    ) -> ApiResult<Vec<Reached>> {
        if deletion_reads_body(resource) {
            let objects = self.snapshot.list_trimmed(resource, namespace).await?;
            return Ok(objects
                .into_iter()
                .map(|object| Reached::from_object(resource, object))
                .collect());
        }
        self.snapshot
            .list_as(
                resource,
                namespace,
                |kv| Reached::from_stored(resource, &kv.key, &kv.value),
                |object| Reached::from_object(resource, object),
            )
            .await
    }

    /// The objects of one collection that reference `owner_uid` and are not reached yet,
    /// taken from the collection, which is read whole once per plan.
    async fn take_listed(
        &mut self,
        resource: &Arc<ResourceType>,
        namespace: Option<&str>,
        owner_uid: &str,
    ) -> ApiResult<Vec<Reached>> {
        let namespace = namespace.filter(|_| resource.namespaced);
        let key = (
            resource.key_prefix(),
            namespace.unwrap_or_default().to_string(),
        );
        if !self.listed.contains_key(&key) {
            let objects = self.read_collection(resource, namespace).await?;
            self.listed
                .insert(key.clone(), objects.into_iter().map(Some).collect());
        }
        let reached = &self.index;
        let Some(objects) = self.listed.get_mut(&key) else {
            return Ok(Vec::new());
        };
        Ok(objects
            .iter_mut()
            .filter(|slot| {
                slot.as_ref().is_some_and(|object| {
                    object.references_owner(owner_uid) && !reached.contains_key(&object.this.uid)
                })
            })
            .filter_map(Option::take)
            .collect())
    }

    fn add(
        &mut self,
        resource: Arc<ResourceType>,
        object: Reached,
        in_scope: bool,
        content: bool,
        parent: Option<usize>,
    ) -> usize {
        let index = self.nodes.len();
        self.index.insert(object.this.uid.clone(), index);
        self.push_node(resource, object, in_scope, content, parent);
        index
    }

    /// As [`Planner::add`], for an object that may have been reached already (then None):
    /// one hash of its uid instead of a lookup and an insert.
    fn add_if_new(
        &mut self,
        resource: Arc<ResourceType>,
        object: Reached,
        parent: usize,
    ) -> Option<usize> {
        let index = self.nodes.len();
        match self.index.entry(object.this.uid.clone()) {
            std::collections::hash_map::Entry::Occupied(_) => return None,
            std::collections::hash_map::Entry::Vacant(slot) => slot.insert(index),
        };
        self.push_node(resource, object, true, false, Some(parent));
        Some(index)
    }

    fn push_node(
        &mut self,
        resource: Arc<ResourceType>,
        object: Reached,
        in_scope: bool,
        content: bool,
        parent: Option<usize>,
    ) -> &mut Node {
        let index = self.nodes.len();
        self.nodes.push(Node {
            resource,
            this: object.this,
            finalizers: object.finalizers,
            terminating: object.terminating,
            references: object.references,
            body: object.body,
            in_scope,
            content,
            parent,
            owners: Arc::default(),
            dependents: Vec::new(),
            holds: Vec::new(),
            grace_seconds: 0,
            members: None,
        });
        &mut self.nodes[index]
    }

    /// Step 1: the target, its dependents (transitively), a namespace's content, and the
    /// owners outside that set.
    async fn reach(&mut self, target_type: Arc<ResourceType>, target: Value) -> ApiResult<()> {
        let namespace = target_type
            .is_namespace()
            .then(|| object::name(&target).to_string());
        let target = Reached::from_object(&target_type, target);
        let root = self.add(Arc::clone(&target_type), target, true, false, None);
        let mut queue = VecDeque::from([root]);
        if let Some(namespace) = namespace {
            self.form_classes = false;
            let mut seen_prefixes = std::collections::HashSet::new();
            let mut types: Vec<_> = self
                .catalog
                .all()
                .into_iter()
                .filter(|t| t.namespaced && !t.create_only)
                .filter(|t| seen_prefixes.insert(t.key_prefix()))
                .collect();
            types.sort_by_key(|t| (t.group.clone(), t.plural.clone()));
            for resource in types {
                for object in self.read_collection(&resource, Some(&namespace)).await? {
                    if self.index.contains_key(&object.this.uid) {
                        continue;
                    }
                    let index = self.add(Arc::clone(&resource), object, true, true, Some(root));
                    queue.push_back(index);
                }
            }
        }
        // The collector's graph is the snapshot when it has applied exactly the changes up
        // to the snapshot's newest object change: then dependents are taken from it, with
        // no read at all. Otherwise (and from the first wave it is not) the store is read.
        let mut graph_at = self.snapshot.last_object_change().await?;
        while !queue.is_empty() {
            // The collector's index is read once per wave of owners, under one lock: ten
            // thousand dependents, most of them owning nothing, cost one lock, not ten
            // thousand.
            let wave: Vec<usize> = queue.drain(..).collect();
            if let Some(at) = graph_at {
                if let Some(answers) = self.observed_dependents(&wave, at).await {
                    for (owner, groups) in wave.into_iter().zip(answers) {
                        self.reach_observed(owner, groups, &mut queue).await?;
                    }
                    continue;
                }
                graph_at = None;
                // From here on dependents come from the store one by one: a member of a
                // class reached again must be recognised by its uid.
                self.index_class_members();
            }
            self.read_store = true;
            let uids: Vec<&str> = wave
                .iter()
                .map(|&owner| self.nodes[owner].this.uid.as_str())
                .collect();
            let groups_of_wave = self.gc.dependent_groups_of(&uids, LIST_THRESHOLD);
            for (owner, groups) in wave.into_iter().zip(groups_of_wave) {
                self.reach_dependents(owner, groups, &mut queue).await?;
            }
        }
        // Every in-scope object's owners, resolved; owners outside the set read once each.
        let reached = self.nodes.len();
        for index in 0..reached {
            let references = std::mem::take(&mut self.nodes[index].references);
            let mut links = Vec::with_capacity(references.len());
            for reference in references.iter() {
                let target = self.resolve_owner(index, reference).await?;
                if let RefTarget::Node(owner) = target {
                    self.nodes[owner].dependents.push(index);
                }
                links.push(OwnerLink {
                    target,
                    block: reference.block_owner_deletion,
                });
            }
            self.nodes[index].owners = Arc::new(links);
        }
        Ok(())
    }

    /// The dependents of each owner of `wave` from the collector's graph, if it is exactly
    /// the store's state at `at` (waiting up to [`GRAPH_CATCH_UP`] for it to get there).
    async fn observed_dependents(
        &self,
        wave: &[usize],
        at: finale_store::Revision,
    ) -> Option<Vec<Vec<ObservedGroup>>> {
        let uids: Vec<&str> = wave
            .iter()
            .map(|&owner| self.nodes[owner].this.uid.as_str())
            .collect();
        let deadline = std::time::Instant::now() + GRAPH_CATCH_UP;
        loop {
            match self.gc.observed_dependents_at(&uids, at) {
                AtRevision::Answer(answers) => return Some(answers),
                AtRevision::Behind if std::time::Instant::now() < deadline => {
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
                AtRevision::Behind | AtRevision::Elsewhere => return None,
            }
        }
    }

    /// The dependents of `owner` as the collector's graph holds them at the snapshot: each
    /// added to the plan and queued. Kinds whose body deletion reads are read from the
    /// store, as [`Planner::reach_dependents`] does.
    async fn reach_observed(
        &mut self,
        owner: usize,
        groups: Vec<ObservedGroup>,
        queue: &mut VecDeque<usize>,
    ) -> ApiResult<()> {
        let owner_uid = self.nodes[owner].this.uid.clone();
        for group in groups {
            let Some(dependent_type) = self.lookup_kind(&group.api_version, &group.kind) else {
                continue;
            };
            let from_graph = !deletion_reads_body(&dependent_type);
            let found = if !from_graph {
                let as_group = DependentGroup {
                    count: group.members.len(),
                    members: group
                        .members
                        .into_iter()
                        .map(|d| Dependent {
                            block_owner_deletion: d
                                .owners
                                .iter()
                                .any(|o| o.uid == owner_uid && o.block_owner_deletion),
                            uid: d.uid,
                            api_version: group.api_version.clone(),
                            kind: group.kind.clone(),
                            namespace: group.namespace.clone(),
                            name: d.name,
                        })
                        .collect(),
                    api_version: group.api_version,
                    kind: group.kind,
                    namespace: group.namespace,
                };
                let read = self
                    .read_group(&dependent_type, &owner_uid, &as_group)
                    .await?;
                read.into_iter().map(|object| (object, true)).collect()
            } else {
                let namespace = group.namespace.unwrap_or_default();
                // As `Reached::from_stored` names them: a custom resource by its served type.
                let api_version = match dependent_type.storage_version {
                    None => group.api_version,
                    Some(_) => dependent_type.api_version().into(),
                };
                let mut members = group.members;
                if self.form_classes {
                    let classes = take_leaf_classes(&mut members);
                    for (references, leaves) in classes {
                        self.add_class(
                            owner,
                            &dependent_type,
                            (&api_version, &group.kind, &namespace),
                            references,
                            leaves,
                        );
                    }
                }
                // Only those that own something are asked about in the next wave: ten
                // thousand leaves cost no lookup.
                members
                    .into_iter()
                    .map(|d| {
                        let owns = d.has_dependents;
                        let object = Reached {
                            this: ObjectRef {
                                api_version: api_version.clone(),
                                kind: group.kind.clone(),
                                namespace: namespace.clone(),
                                name: d.name,
                                uid: d.uid,
                            },
                            finalizers: d.finalizers,
                            terminating: d.terminating,
                            references: d.owners,
                            body: None,
                        };
                        (object, owns)
                    })
                    .collect()
            };
            self.add_dependents(owner, &owner_uid, &dependent_type, found, from_graph, queue);
        }
        Ok(())
    }

    /// The dependents of `owner` at the snapshot, from its groups in the collector's index:
    /// each added to the graph and queued, so that their own dependents are reached in turn.
    async fn reach_dependents(
        &mut self,
        owner: usize,
        groups: Vec<DependentGroup>,
        queue: &mut VecDeque<usize>,
    ) -> ApiResult<()> {
        let owner_uid = self.nodes[owner].this.uid.clone();
        for group in groups {
            let Some(dependent_type) = self.lookup_kind(&group.api_version, &group.kind) else {
                continue;
            };
            let found = self.read_group(&dependent_type, &owner_uid, &group).await?;
            // Each is asked about in the next wave: the live index decides.
            let found = found.into_iter().map(|object| (object, true)).collect();
            self.add_dependents(owner, &owner_uid, &dependent_type, found, false, queue);
        }
        Ok(())
    }

    /// One group of an owner's dependents read from the store at the snapshot. The index is
    /// live; the answer is at the snapshot: what it names is re-read and its reference
    /// re-checked (by the caller).
    async fn read_group(
        &mut self,
        dependent_type: &Arc<ResourceType>,
        owner_uid: &str,
        group: &DependentGroup,
    ) -> ApiResult<Vec<Reached>> {
        if group.count > LIST_THRESHOLD {
            return self
                .take_listed(dependent_type, group.namespace.as_deref(), owner_uid)
                .await;
        }
        let mut found = Vec::with_capacity(group.members.len());
        for member in &group.members {
            if self.index.contains_key(&member.uid) {
                continue;
            }
            let read = self
                .snapshot
                .get(dependent_type, member.namespace.as_deref(), &member.name)
                .await?;
            if let Some(object) = read {
                let object = Reached::from_object(dependent_type, object);
                if object.this.uid == member.uid {
                    found.push(object);
                }
            }
        }
        Ok(found)
    }

    /// Adds `found`, dependents of `owner` of one type, to the plan (those not reached yet
    /// that still reference it), and queues those that may own something in turn (the
    /// `bool`) so that their own dependents are reached. `from_graph`: they are the
    /// collector's graph at the snapshot, whose dependents reference their owner by
    /// construction, so their references need no second look.
    fn add_dependents(
        &mut self,
        owner: usize,
        owner_uid: &str,
        dependent_type: &Arc<ResourceType>,
        found: Vec<(Reached, bool)>,
        from_graph: bool,
        queue: &mut VecDeque<usize>,
    ) {
        self.nodes.reserve(found.len());
        self.index.reserve(found.len());
        for (object, may_own) in found {
            if !(from_graph || object.references_owner(owner_uid)) {
                continue;
            }
            let Some(index) = self.add_if_new(Arc::clone(dependent_type), object, owner) else {
                continue;
            };
            if may_own {
                queue.push_back(index);
            }
        }
    }

    /// A class of identical leaves of `owner` (see [`Leaf`]), as one node, unless it was
    /// reached already: members that name several owners are reached from each of them,
    /// and always as the same class, since what makes a class is the objects' own state.
    fn add_class(
        &mut self,
        owner: usize,
        resource: &Arc<ResourceType>,
        (api_version, kind, namespace): (&CompactString, &CompactString, &CompactString),
        references: Arc<[OwnerReference]>,
        leaves: Vec<Leaf>,
    ) {
        if references.len() > 1 {
            let reached = self.classes.iter().any(|&class| {
                let node = &self.nodes[class];
                Arc::ptr_eq(&node.resource, resource)
                    && node.this.namespace == *namespace
                    && node.references[..] == references[..]
            });
            if reached {
                return;
            }
        }
        let Some(first) = leaves.first() else {
            return;
        };
        let this = ObjectRef {
            api_version: api_version.clone(),
            kind: kind.clone(),
            namespace: namespace.clone(),
            name: first.name.clone(),
            uid: first.uid.clone(),
        };
        let object = Reached {
            this,
            finalizers: Vec::new(),
            terminating: false,
            references,
            body: None,
        };
        self.classes.push(self.nodes.len());
        self.push_node(Arc::clone(resource), object, true, false, Some(owner))
            .members = Some(leaves);
    }

    /// Puts every class member's uid in `index`, for when dependents are read one by one
    /// from the store: one reached again there is then known as reached.
    fn index_class_members(&mut self) {
        for &class in &self.classes {
            for leaf in self.nodes[class].members.iter().flatten() {
                self.index.entry(leaf.uid.clone()).or_insert(class);
            }
        }
    }

    /// Where one reference of the in-scope object `index` points (GC8, GC17, GC19, GC20).
    async fn resolve_owner(
        &mut self,
        index: usize,
        reference: &OwnerReference,
    ) -> ApiResult<RefTarget> {
        let OwnerReference {
            api_version,
            kind,
            name,
            uid,
            ..
        } = reference;
        let dependent_namespaced = self.nodes[index].resource.namespaced;
        let Some(owner_type) = self.lookup_kind(api_version, kind) else {
            return Ok(RefTarget::Unverifiable(format!(
                "{kind}/{name} (no served resource for {api_version}, Kind={kind}: the garbage collector cannot check it, so it never collects this object)"
            )));
        };
        if owner_type.namespaced && !dependent_namespaced {
            return Ok(RefTarget::Unverifiable(format!(
                "{kind}/{name} (a namespaced owner of a cluster-scoped object, which the garbage collector never collects)"
            )));
        }
        let dependent_namespace = &self.nodes[index].this.namespace;
        if let Some(&owner) = self.index.get(uid) {
            let owner_namespace = &self.nodes[owner].this.namespace;
            if owner_type.namespaced && owner_namespace != dependent_namespace {
                // GC19: looked up in the dependent's namespace, it is not there.
                return Ok(RefTarget::Dangling);
            }
            return Ok(RefTarget::Node(owner));
        }
        let namespace = owner_type.namespaced.then(|| dependent_namespace.clone());
        match self
            .snapshot
            .get(&owner_type, namespace.as_deref(), name)
            .await?
        {
            Some(owner) if object::uid(&owner) == uid => {
                let owner = Reached::from_object(&owner_type, owner);
                Ok(RefTarget::Node(
                    self.add(owner_type, owner, false, false, None),
                ))
            }
            _ => Ok(RefTarget::Dangling),
        }
    }

    /// Each in-scope object's finalizers (and a namespace's tokens), judged by the
    /// Explainer; a Pod's grace period.
    async fn judge_holds(&mut self) -> ApiResult<()> {
        for index in 0..self.nodes.len() {
            if !self.nodes[index].in_scope {
                continue;
            }
            let resource = Arc::clone(&self.nodes[index].resource);
            let may_wait_for_grace = resource.graceful && !self.nodes[index].terminating;
            let spec_tokens = self.nodes[index].spec_tokens();
            // Most reached objects hold nothing: their identity is not copied for nothing.
            if spec_tokens.is_empty()
                && self.nodes[index].finalizers.is_empty()
                && !may_wait_for_grace
            {
                continue;
            }
            let this = self.nodes[index].this.clone();
            let mut holds = Vec::new();
            for token in spec_tokens {
                if token == NAMESPACE_FINALIZER {
                    continue;
                }
                let cause = self
                    .explainer
                    .finalizer(&resource, &this, &token, None)
                    .await?;
                holds.push(Hold {
                    finalizer: token,
                    in_spec: true,
                    cause,
                });
            }
            for finalizer in self.nodes[index].finalizers.clone() {
                if finalizer == ORPHAN_FINALIZER || finalizer == FOREGROUND_FINALIZER {
                    continue;
                }
                let cause = self
                    .explainer
                    .finalizer(&resource, &this, &finalizer, None)
                    .await?;
                holds.push(Hold {
                    finalizer,
                    in_spec: false,
                    cause,
                });
            }
            // Graceful kinds are always read whole (see `read_collection`).
            let pod = self.nodes[index]
                .body
                .as_ref()
                .filter(|_| may_wait_for_grace);
            if let Some(pod) = pod {
                let grace = deletion::pod_grace_period(pod, None);
                if grace > 0 {
                    let agent = self.explainer.pod_agent(pod).await?;
                    let (state, message) = pod_grace_hold(&agent, grace);
                    let mut cause = node(
                        Some(this.clone()),
                        CauseType::PodGracePeriod,
                        state,
                        message,
                        None,
                    );
                    evidence(&mut cause, "gracePeriodSeconds", grace.to_string());
                    agent_evidence(&mut cause, &agent, self.explainer.now());
                    // Only a grace period no agent will end keeps the Pod.
                    if state == CauseState::Stuck {
                        self.nodes[index].grace_seconds = grace;
                    }
                    holds.push(Hold {
                        finalizer: String::new(),
                        in_spec: false,
                        cause,
                    });
                }
            }
            self.nodes[index].holds = holds;
        }
        Ok(())
    }

    /// Plans a DELETE of `target` with `policy` (None: the kind's default).
    pub async fn plan(
        mut self,
        target_type: Arc<ResourceType>,
        target: Value,
        policy: Option<&str>,
        max_nodes: usize,
    ) -> ApiResult<Plan> {
        let shown = object_ref(&target_type, &target).display();
        let effective = effective_policy(&target_type, &target, policy);
        let started = std::time::Instant::now();
        self.reach(Arc::clone(&target_type), target).await?;
        let reached = started.elapsed();
        self.judge_holds().await?;
        let judged = started.elapsed();

        let mut meanwhile_replay = Replay::new(&self.nodes, false);
        meanwhile_replay.run(0, policy);
        let mut end_replay = Replay::new(&self.nodes, true);
        end_replay.run(0, policy);
        let replayed = started.elapsed();

        let mut outcomes = Vec::with_capacity(self.nodes.len());
        let mut meanwhile = Vec::with_capacity(self.nodes.len());
        for (index, node) in self.nodes.iter().enumerate() {
            if !node.in_scope {
                outcomes.push(None);
                meanwhile.push(None);
                continue;
            }
            let end = &end_replay.state[index];
            let outcome = if !end.exists || end.terminating {
                Outcome::Deleted
            } else if !end.orphaned_from.is_empty() {
                Outcome::Orphaned(end.orphaned_from.clone())
            } else {
                Outcome::Kept(
                    end.owners
                        .iter()
                        .filter_map(|o| match &o.target {
                            RefTarget::Node(owner) => Some(self.nodes[*owner].this.display()),
                            RefTarget::Unverifiable(why) => Some(why.clone()),
                            RefTarget::Dangling => None,
                        })
                        .collect(),
                )
            };
            let now = &meanwhile_replay.state[index];
            let stuck_hold = node.holds.iter().any(|h| !h.removed_by_a_controller());
            let while_hangs = match (&outcome, now.exists, now.terminating) {
                (Outcome::Deleted, false, _) => Some(Meanwhile::Gone),
                (Outcome::Deleted, true, true) if stuck_hold => Some(Meanwhile::Hangs),
                (Outcome::Deleted, true, true) => Some(Meanwhile::WaitsTerminating),
                (Outcome::Deleted, true, false) => Some(Meanwhile::WaitsNotStarted),
                _ => None,
            };
            outcomes.push(Some(outcome));
            meanwhile.push(while_hangs);
        }

        // Counts, hangs and external resources over every reached object.
        let mut plan = PlanStatus {
            propagation_policy: effective.clone(),
            policy_source: if policy.is_some() {
                "Request"
            } else {
                "Default"
            }
            .into(),
            ..PlanStatus::default()
        };
        let mut deleted_by_type: Vec<(Arc<ResourceType>, u32)> = Vec::new();
        for (index, node) in self.nodes.iter().enumerate() {
            let Some(outcome) = &outcomes[index] else {
                continue;
            };
            // A class of identical leaves counts each member (they hold nothing, so none
            // hangs or names an external resource).
            let objects = node.count() as u32;
            match outcome {
                Outcome::Deleted => {
                    plan.deleted += objects;
                    // Counted per type first: a key per object would be ten thousand strings.
                    match deleted_by_type
                        .iter_mut()
                        .find(|(t, _)| Arc::ptr_eq(t, &node.resource))
                    {
                        Some((_, count)) => *count += objects,
                        None => deleted_by_type.push((Arc::clone(&node.resource), objects)),
                    }
                    let stuck: Vec<&Hold> = node
                        .holds
                        .iter()
                        .filter(|h| !h.removed_by_a_controller())
                        .collect();
                    if !stuck.is_empty() {
                        plan.hangs += 1;
                        if plan.hang_causes.len() < max_nodes {
                            plan.hang_causes
                                .extend(stuck.iter().map(|h| h.cause.clone()));
                        }
                    } else if matches!(
                        meanwhile[index],
                        Some(Meanwhile::WaitsTerminating | Meanwhile::WaitsNotStarted)
                    ) {
                        plan.blocked += objects;
                    }
                    for hold in &node.holds {
                        if let Some(resource) = external_resource(node, hold) {
                            plan.external_resources.push(resource);
                        }
                    }
                }
                Outcome::Orphaned(_) => plan.orphaned += objects,
                Outcome::Kept(_) => plan.kept += objects,
            }
        }

        for (resource, count) in deleted_by_type {
            *plan.deleted_by_kind.entry(kind_key(&resource)).or_default() += count;
        }
        let mut causes = self.tree(
            &outcomes,
            &meanwhile,
            &effective,
            policy.is_none(),
            max_nodes,
        );
        review::limit_nodes(&mut causes, max_nodes);
        let summary = summarize(&shown, &plan, self.gc.running());
        // Where a slow plan spends its time, for `RUST_LOG=finale_apiserver::insight=debug`.
        tracing::debug!(
            target = %shown,
            objects = self.nodes.iter().map(Node::count).sum::<usize>(),
            nodes = self.nodes.len(),
            reach_ms = reached.as_secs_f64() * 1e3,
            judge_ms = (judged - reached).as_secs_f64() * 1e3,
            replay_ms = (replayed - judged).as_secs_f64() * 1e3,
            tree_ms = (started.elapsed() - replayed).as_secs_f64() * 1e3,
            dependents_from_store = self.read_store,
            "deletion plan computed"
        );
        // Ten thousand reached objects take milliseconds to free: not on the request's path.
        let read_store = self.read_store;
        let reached = (
            std::mem::take(&mut self.nodes),
            std::mem::take(&mut self.index),
            std::mem::take(&mut self.listed),
        );
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn_blocking(move || drop(reached));
        }
        Ok(Plan {
            plan,
            causes,
            summary,
            dependents_read_from: if read_store {
                DependentsSource::Store
            } else {
                DependentsSource::Collector
            },
        })
    }

    /// The tree: each reached object under the object it was reached from, with its
    /// finalizers' causes first, dependents in order (the worst first), cut as
    /// [`review::limit_nodes`] cuts it to `max_nodes`.
    ///
    /// Dependents past the first `max_nodes` of one object are always cut by that limit, so
    /// they are not built: they are summed into the `More` node the limit would make. An
    /// owner of ten thousand dependents builds 500 nodes, not ten thousand.
    fn tree(
        &self,
        outcomes: &[Option<Outcome>],
        meanwhile: &[Option<Meanwhile>],
        policy: &str,
        default_policy: bool,
        max_nodes: usize,
    ) -> Vec<CauseNode> {
        let count = self.nodes.len();
        // Each node's lines: its dependents reached from it, a class of identical leaves
        // as one line per member.
        let mut children: Vec<Vec<Line>> = vec![Vec::new(); count];
        for (index, node) in self.nodes.iter().enumerate() {
            if let (true, Some(parent), Some(_)) = (node.in_scope, node.parent, &outcomes[index]) {
                children[parent].extend((0..node.count()).map(|member| Line {
                    node: index,
                    member,
                }));
            }
        }
        let holds_shown = |index: usize| -> &[Hold] {
            match outcomes[index] {
                Some(Outcome::Deleted) => &self.nodes[index].holds,
                _ => &[],
            }
        };
        // Leaves first (a node's index is always above its parent's): each node's state (the
        // worst below it, as the built node would have it) and how many nodes are below it.
        // A class's members hold nothing and own nothing: each is its own line alone.
        let mut state = vec![CauseState::Progressing; count];
        let mut below = vec![0usize; count];
        for index in (0..count).rev() {
            if outcomes[index].is_none() {
                continue;
            }
            let (mut worst_below, mut nodes) = (own_state(meanwhile[index]), 0);
            for hold in holds_shown(index) {
                worst_below = worst_below.max(hold.cause.state);
                nodes += 1 + review::count_nodes(&hold.cause);
            }
            for child in &children[index] {
                worst_below = worst_below.max(state[child.node]);
                nodes += 1 + below[child.node];
            }
            (state[index], below[index]) = (worst_below, nodes);
        }
        // Parents first: each node's dependents in order, and the tail past `max_nodes`
        // summed (with everything below it) instead of built. The order is the one
        // `ObjectRef` sorts by, with a class member's own name and uid.
        let key = |line: &Line| {
            let node = &self.nodes[line.node];
            let (name, uid) = match &node.members {
                Some(members) => (
                    &members[line.member].name,
                    members[line.member].uid.as_str(),
                ),
                None => (&node.this.name, node.this.uid.as_str()),
            };
            (
                std::cmp::Reverse(state[line.node]),
                outcome_type(outcomes[line.node].as_ref()),
                (
                    &node.this.api_version,
                    &node.this.kind,
                    &node.this.namespace,
                ),
                name,
                uid,
            )
        };
        let mut tails: Vec<Option<CauseNode>> = vec![None; count];
        let mut cut = vec![false; count];
        for index in 0..count {
            if cut[index] {
                for child in &children[index] {
                    cut[child.node] = true;
                }
                continue;
            }
            // Only the first `max_nodes` are shown, so only they need an order: an owner of
            // ten thousand dependents selects its first 500 (linear) and sorts those, rather
            // than sorting ten thousand by their identities' strings.
            let shown = &mut children[index];
            if shown.len() > max_nodes && max_nodes > 0 {
                shown.select_nth_unstable_by(max_nodes - 1, |a, b| key(a).cmp(&key(b)));
            }
            let sorted = shown.len().min(max_nodes);
            shown[..sorted].sort_by(|a, b| key(a).cmp(&key(b)));
            if children[index].len() > max_nodes {
                let tail = children[index].split_off(max_nodes);
                let worst_cut = tail
                    .iter()
                    .map(|c| state[c.node])
                    .fold(CauseState::Progressing, std::cmp::max);
                let nodes = tail.iter().map(|c| 1 + below[c.node]).sum();
                tails[index] = Some(review::more_node(tail.len(), nodes, worst_cut));
                // A class is built once as a template for its members shown (if any).
                for child in tail {
                    if self.nodes[child.node].members.is_none() {
                        cut[child.node] = true;
                    }
                }
            }
        }
        // Leaves first again: the nodes that can be shown, built.
        let mut built: Vec<Option<CauseNode>> = (0..count).map(|_| None).collect();
        for index in (0..count).rev() {
            let Some(outcome) = &outcomes[index] else {
                continue;
            };
            if cut[index] {
                continue;
            }
            let mut cause = self.describe(index, outcome, meanwhile[index], policy, default_policy);
            cause.state = state[index];
            if self.nodes[index].members.is_some() {
                built[index] = Some(cause);
                continue;
            }
            let mut shown: Vec<CauseNode> =
                holds_shown(index).iter().map(|h| h.cause.clone()).collect();
            for child in &children[index] {
                let line = match &self.nodes[child.node].members {
                    None => built[child.node].take(),
                    Some(members) => built[child.node]
                        .as_ref()
                        .map(|template| member_line(template, &members[child.member])),
                };
                shown.extend(line);
            }
            shown.extend(tails[index].take());
            cause.children = shown;
            built[index] = Some(cause);
        }
        built
            .first_mut()
            .and_then(Option::take)
            .into_iter()
            .collect()
    }

    fn describe(
        &self,
        index: usize,
        outcome: &Outcome,
        meanwhile: Option<Meanwhile>,
        policy: &str,
        default_policy: bool,
    ) -> CauseNode {
        let node = &self.nodes[index];
        let this = Some(node.this.clone());
        match outcome {
            Outcome::Deleted => {
                let how = if index == 0 {
                    let source = if default_policy {
                        ", the kind's default"
                    } else {
                        ""
                    };
                    format!("deleted by the request (propagationPolicy {policy}{source})")
                } else if node.content {
                    "deleted by the namespace controller (namespace content)".to_string()
                } else {
                    "deleted by the garbage collector: none of its owners stays".to_string()
                };
                let (state, message) = match meanwhile {
                    Some(Meanwhile::Hangs) => (
                        CauseState::Stuck,
                        format!("{how}, but it will hang: nobody will remove what holds it"),
                    ),
                    Some(Meanwhile::WaitsTerminating) => (
                        CauseState::Stuck,
                        format!("{how}; it will wait, terminating, for objects that hang"),
                    ),
                    Some(Meanwhile::WaitsNotStarted) => (
                        CauseState::Stuck,
                        format!("{how}, once what hangs above it is resolved"),
                    ),
                    _ => (CauseState::Progressing, how),
                };
                let mut cause = review::node(this, CauseType::Deletes, state, message, None);
                evidence(&mut cause, "outcome", "Deleted");
                match meanwhile {
                    Some(Meanwhile::Hangs) => evidence(&mut cause, "hangs", "true"),
                    Some(Meanwhile::WaitsTerminating) => {
                        evidence(&mut cause, "waitsForHang", "terminating")
                    }
                    Some(Meanwhile::WaitsNotStarted) => {
                        evidence(&mut cause, "waitsForHang", "notStarted")
                    }
                    _ => {}
                }
                cause
            }
            Outcome::Orphaned(owners) => {
                let names: Vec<String> = owners
                    .iter()
                    .map(|&o| self.nodes[o].this.display())
                    .collect();
                let mut cause = review::node(
                    this,
                    CauseType::Orphans,
                    CauseState::Progressing,
                    format!(
                        "orphaned: it stays, and its ownerReference to {} is removed",
                        names.join(", ")
                    ),
                    None,
                );
                evidence(&mut cause, "outcome", "Orphaned");
                evidence(&mut cause, "orphanedFrom", names.join(", "));
                cause
            }
            Outcome::Kept(keepers) => {
                let message = if keepers.is_empty() {
                    "stays: the garbage collector does not collect it".to_string()
                } else {
                    format!(
                        "kept: {} also owns it and is not deleted",
                        keepers.join(", ")
                    )
                };
                let mut cause = review::node(
                    this,
                    CauseType::Keeps,
                    CauseState::Progressing,
                    message,
                    None,
                );
                evidence(&mut cause, "outcome", "Kept");
                evidence(&mut cause, "keptBy", keepers.join(", "));
                cause
            }
        }
    }
}

/// The state an object's own line has, before what is below it: stuck while a hang lasts.
fn own_state(meanwhile: Option<Meanwhile>) -> CauseState {
    match meanwhile {
        Some(Meanwhile::Hangs | Meanwhile::WaitsTerminating | Meanwhile::WaitsNotStarted) => {
            CauseState::Stuck
        }
        _ => CauseState::Progressing,
    }
}

/// The cause type an object's line has for its outcome.
fn outcome_type(outcome: Option<&Outcome>) -> CauseType {
    match outcome {
        Some(Outcome::Orphaned(_)) => CauseType::Orphans,
        Some(Outcome::Kept(_)) => CauseType::Keeps,
        _ => CauseType::Deletes,
    }
}

/// The claim's declared cleanup for a finalizer on a deleted object.
fn external_resource(node: &Node, hold: &Hold) -> Option<ExternalResource> {
    let text = |key: &str| hold.cause.evidence.get(key).cloned().unwrap_or_default();
    let cleans_up = text("cleansUp");
    if hold.finalizer.is_empty() || cleans_up.is_empty() {
        return None;
    }
    // What the object itself lists (a CloudCluster's cloud inventory, say); objects read in
    // bulk without their status list nothing here.
    let listed = hold
        .cause
        .evidence
        .get(review::INVENTORY_PATH)
        .zip(node.body.as_ref())
        .and_then(|(path, body)| review::inventory_items(body, path));
    let (inventory_count, inventory) = match listed {
        Some((count, items)) => (Some(count as u64), items),
        None => (None, Vec::new()),
    };
    Some(ExternalResource {
        object: node.this.clone(),
        finalizer: hold.finalizer.clone(),
        claim: text("claim"),
        controller: text("controller"),
        cleans_up: cleans_up.split("; ").map(str::to_string).collect(),
        will_hang: !hold.removed_by_a_controller(),
        inventory,
        inventory_count,
    })
}

/// The policy a DELETE applies: the request's; else the one a stored GC finalizer implies
/// (P3/P4); else the kind's default (P7).
pub fn effective_policy(resource: &ResourceType, object: &Value, policy: Option<&str>) -> String {
    if let Some(policy) = policy {
        return policy.to_string();
    }
    if resource.is_namespace() {
        return "Background".into();
    }
    let stored = object::finalizers(object);
    let options = DeleteOptions::default();
    let after = deletion::gc_finalizers(&stored, resource.gc_policy, &options).unwrap_or(stored);
    if has(&after, ORPHAN_FINALIZER) {
        "Orphan".into()
    } else if has(&after, FOREGROUND_FINALIZER) {
        "Foreground".into()
    } else {
        "Background".into()
    }
}

fn summarize(shown: &str, plan: &PlanStatus, gc_running: bool) -> String {
    let source = if plan.policy_source == "Default" {
        ", the default"
    } else {
        ""
    };
    let mut parts = vec![format!(
        "deletes {} of {}",
        plural(plan.deleted as usize, "object", "objects"),
        plural(plan.deleted_by_kind.len(), "kind", "kinds")
    )];
    if plan.orphaned > 0 {
        parts.push(format!("orphans {}", plan.orphaned));
    }
    if plan.kept > 0 {
        parts.push(format!("keeps {} (another owner)", plan.kept));
    }
    if plan.hangs > 0 {
        let mut hangs = format!("{} will hang", plan.hangs);
        if plan.blocked > 0 {
            hangs.push_str(&format!(
                " ({} more {} behind them)",
                plan.blocked,
                if plan.blocked == 1 { "waits" } else { "wait" }
            ));
        }
        parts.push(hangs);
    }
    let mut summary = format!(
        "DELETE {shown} ({}{source}) {}",
        plan.propagation_policy,
        parts.join("; ")
    );
    if !gc_running {
        summary.push_str(
            ". The garbage collector is not running: its dependents are not known, and nothing would collect them",
        );
    }
    summary
}

/// What a Pod's grace period means for the plan: its agent ends it (progressing), or nobody
/// will (stuck), with the remedy.
fn pod_grace_hold(agent: &Agent, grace: i64) -> (CauseState, String) {
    match agent {
        Agent::Live { node, .. } => (
            CauseState::Progressing,
            format!(
                "the Pod gets a grace period of {grace}s: the agent on node {node} stops its containers within it and confirms the deletion"
            ),
        ),
        Agent::NodeMissing { node } => (
            CauseState::Progressing,
            format!(
                "the Pod is bound to node {node}, which does not exist: the pod garbage collector force-deletes it"
            ),
        ),
        Agent::Gone {
            node,
            out_of_service: true,
            ..
        } => (
            CauseState::Progressing,
            format!(
                "node {node} is tainted out of service: the pod garbage collector force-deletes the Pod"
            ),
        ),
        Agent::Gone { node, .. } => (
            CauseState::Stuck,
            format!(
                "the Pod gets a grace period of {grace}s, and no agent runs node {node} (its Lease is not renewed), so nothing will confirm that its containers stopped. Restore the node, or taint it out of service (`kubectl taint node {node} node.kubernetes.io/out-of-service=nodeshutdown:NoExecute`)"
            ),
        ),
        Agent::Unbound => (
            CauseState::Progressing,
            "the Pod is on no node: it is deleted at once".to_string(),
        ),
    }
}
