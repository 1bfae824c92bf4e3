//! What a review may show its caller: only objects they may `get`.
//!
//! A `DeletionReview` reads everything at one revision as the server, then [`Viewer::hide`]
//! takes out every node about an object the caller may not `get`, with its subtree (what is
//! below it is about that object), and says how many it took out: a `Hidden` node "N hidden"
//! and `status.hidden`. The scoped list (`status.stuck`) is filtered the same way, and an
//! `OwnershipReview`'s tree too (each node counts its hidden children in `hidden`).
//!
//! # Guarantees
//! - No name, namespace, uid or message of a hidden object reaches the caller: its node and
//!   everything under it go, and a root cause that names one (a scoped list's) is hidden with
//!   its object.
//! - Reviewing a target the caller may not `get` is refused with the 403 a `get` would have.
//!
//! # Caveats
//! - Plan mode's counts (`status.plan`) stay exact: they count hidden objects too, without
//!   naming them, so the caller learns what the DELETE would do, as its effects are theirs.
//! - A grouping node with no object (a namespace's content, `More`) is kept; it shows counts
//!   per resource, not names.

use std::sync::Arc;

use super::api::{CauseNode, CauseState, CauseType, DeletionReviewStatus, ObjectRef};
use super::tree::OwnershipNode;
use crate::authn::Identity;
use crate::authz::{Attributes, Authorizer};
use crate::resources::{Catalog, ResourceType};
use crate::status::ApiResult;

/// The caller of a review, and what decides what they may see.
#[derive(Clone)]
pub struct Viewer {
    pub authorizer: Arc<Authorizer>,
    pub identity: Identity,
}

impl Viewer {
    /// A `get` of `name` in `namespace` by the caller, as the authorizer sees requests.
    fn get(&self, group: &str, plural: &str, namespace: &str, name: &str) -> Attributes {
        Attributes::resource(
            self.identity.clone(),
            "get",
            group,
            plural,
            "",
            namespace,
            name,
        )
    }

    /// Whether the caller may `get` `object`. A kind the server does not serve any more is
    /// shown only to those who may get everything.
    pub fn may_get(&self, catalog: &Catalog, object: &ObjectRef) -> bool {
        let (group, plural) = match catalog.lookup_kind(&object.api_version, &object.kind) {
            Some(resource) => (resource.group.clone(), resource.plural.clone()),
            None => ("*".to_string(), "*".to_string()),
        };
        let attributes = self.get(&group, &plural, &object.namespace, &object.name);
        self.authorizer.authorize(&attributes).allowed
    }

    /// Refuses a review of `name` in `namespace` of `resource` unless the caller may `get`
    /// it, with the 403 that get would have had.
    pub fn check_target(
        &self,
        resource: &ResourceType,
        namespace: &str,
        name: &str,
    ) -> ApiResult<()> {
        let attributes = self.get(&resource.group, &resource.plural, namespace, name);
        let decision = self.authorizer.authorize(&attributes);
        if decision.allowed {
            Ok(())
        } else {
            Err(crate::authz::forbidden(&attributes, &decision.reason))
        }
    }

    /// Takes out of `status` what the caller may not see; returns how many objects that was.
    pub fn hide(&self, catalog: &Catalog, status: &mut DeletionReviewStatus) -> usize {
        let mut removed = Vec::new();
        prune(&mut status.causes, &mut removed, &|object| {
            self.may_get(catalog, object)
        });
        let mut hidden_stuck = Vec::new();
        status.stuck.retain(|stuck| {
            let keep = self.may_get(catalog, &stuck.object);
            if !keep {
                hidden_stuck.push(stuck.object.clone());
            }
            keep
        });
        if !hidden_stuck.is_empty() {
            status.causes.push(hidden_node(hidden_stuck.len()));
        }
        removed.extend(hidden_stuck);
        if removed.is_empty() {
            return 0;
        }
        // What is left may still name them in its words: a parent's message lists its
        // dependents, a summary its leading cause.
        let names = Names::of(&removed);
        names.scrub_nodes(&mut status.causes);
        for stuck in &mut status.stuck {
            stuck.root_cause = names.scrub(&stuck.root_cause);
        }
        let count = removed.len();
        status.summary = format!("{} ({count} hidden)", names.scrub(&status.summary));
        status.hidden = Some(count as u32);
        count
    }

    /// Takes out of an `OwnershipReview`'s tree the nodes the caller may not see, with what
    /// is below them, counted in their parent's `hidden`; returns how many objects that was.
    pub fn hide_tree(&self, catalog: &Catalog, node: &mut OwnershipNode) -> usize {
        let mut hidden = 0;
        node.children.retain(|child| {
            let keep = self.may_get(catalog, &child.object);
            if !keep {
                node_hidden_count(child, &mut hidden);
            }
            keep
        });
        node.hidden += hidden as u32;
        let below: usize = node
            .children
            .iter_mut()
            .map(|child| self.hide_tree(catalog, child))
            .sum();
        hidden + below
    }
}

/// How hidden objects may be named in a message, to be replaced by [`HIDDEN_NAME`].
struct Names(Vec<String>);

/// What stands in a message for an object the caller may not get.
const HIDDEN_NAME: &str = "a hidden object";

impl Names {
    fn of(objects: &[ObjectRef]) -> Names {
        let mut names: Vec<String> = objects
            .iter()
            .flat_map(|o| {
                let mut forms = vec![o.display()];
                if !o.namespace.is_empty() {
                    forms.push(format!("{}/{}", o.namespace, o.name));
                }
                if !o.uid.is_empty() {
                    forms.push(o.uid.clone());
                }
                forms
            })
            .collect();
        // Longest first, so "Kind ns/name" is replaced before "ns/name" inside it.
        names.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        names.dedup();
        Names(names)
    }

    fn scrub(&self, text: &str) -> String {
        let mut text = text.to_string();
        for name in &self.0 {
            if text.contains(name.as_str()) {
                text = text.replace(name.as_str(), HIDDEN_NAME);
            }
        }
        text
    }

    fn scrub_nodes(&self, nodes: &mut [CauseNode]) {
        for node in nodes {
            node.message = self.scrub(&node.message);
            for value in node.evidence.values_mut() {
                *value = self.scrub(value);
            }
            self.scrub_nodes(&mut node.children);
        }
    }
}

fn node_hidden_count(node: &OwnershipNode, count: &mut usize) {
    *count += 1;
    for child in &node.children {
        node_hidden_count(child, count);
    }
}

/// Removes every node whose object `visible` refuses, with its subtree, adding each object
/// removed to `removed`; where nodes went, a `Hidden` node counts them.
fn prune(
    nodes: &mut Vec<CauseNode>,
    removed: &mut Vec<ObjectRef>,
    visible: &dyn Fn(&ObjectRef) -> bool,
) {
    let before = removed.len();
    nodes.retain(|node| match &node.object {
        Some(object) if !visible(object) => {
            collect_objects(node, removed);
            false
        }
        _ => true,
    });
    let here = removed.len() - before;
    for node in nodes.iter_mut() {
        prune(&mut node.children, removed, visible);
    }
    if here > 0 {
        nodes.push(hidden_node(here));
    }
}

fn collect_objects(node: &CauseNode, into: &mut Vec<ObjectRef>) {
    if let Some(object) = &node.object {
        into.push(object.clone());
    }
    for child in &node.children {
        collect_objects(child, into);
    }
}

/// "N hidden": objects left out because the caller may not get them.
fn hidden_node(count: usize) -> CauseNode {
    CauseNode {
        object: None,
        type_: CauseType::Hidden,
        state: CauseState::Progressing,
        message: format!(
            "{count} hidden: {} you may not get",
            if count == 1 { "an object" } else { "objects" }
        ),
        since: None,
        evidence: Default::default(),
        children: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object_node(name: &str, children: Vec<CauseNode>) -> CauseNode {
        CauseNode {
            object: Some(ObjectRef {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: "ns".into(),
                name: name.into(),
                uid: String::new(),
            }),
            type_: CauseType::Finalizer,
            state: CauseState::Stuck,
            message: format!("{name} waits"),
            since: None,
            evidence: Default::default(),
            children,
        }
    }

    #[test]
    fn a_hidden_node_takes_its_subtree_and_leaves_a_count_in_its_place() {
        let mut nodes = vec![object_node(
            "visible",
            vec![
                object_node("secret", vec![object_node("visible-below-secret", vec![])]),
                object_node("visible-child", vec![]),
            ],
        )];
        let mut removed = Vec::new();
        prune(&mut nodes, &mut removed, &|o| !o.name.starts_with("secret"));
        assert_eq!(removed.len(), 2, "the hidden node and the one below it");
        let children = &nodes[0].children;
        let names: Vec<_> = children
            .iter()
            .map(|c| c.object.as_ref().map(|o| o.name.as_str()))
            .collect();
        assert_eq!(names, [Some("visible-child"), None]);
        assert_eq!(children[1].type_, CauseType::Hidden);
        assert_eq!(children[1].message, "2 hidden: objects you may not get");
        let text = serde_json::to_string(&nodes).unwrap();
        assert!(!text.contains("secret"), "{text}");
    }

    #[test]
    fn messages_name_no_hidden_object() {
        let hidden = ObjectRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: "team-b".into(),
            name: "concealed".into(),
            uid: "u-1".into(),
        };
        let names = Names::of(&[hidden]);
        assert_eq!(
            names.scrub("waits for ConfigMap team-a/shown, ConfigMap team-b/concealed (uid u-1)"),
            "waits for ConfigMap team-a/shown, a hidden object (uid a hidden object)"
        );
        assert_eq!(
            names.scrub("team-b/concealed holds it"),
            "a hidden object holds it"
        );
    }
}
