//! Drawing an ownership tree: as a table with the tree in its NAME column, or as a Graphviz
//! digraph.
//!
//! # Grouping
//! Siblings that are leaves (no children, nothing omitted, not missing, not a cycle) of the
//! same kind and in the same deletion state (terminating or not, the same finalizers) are
//! drawn as one line, `ConfigMap x12 (a, b, …, l)`, where the first of them would be. A group
//! that is terminating shows its oldest deletion time.
//!
//! # Guarantees
//! - Without colour the text is plain: no escape codes (safe to pipe and to compare). The
//!   DELETION column is last and unpadded, so ages never shift the other columns.

use std::fmt::Write as _;

use anstyle::{AnsiColor, Style};
use chrono::{DateTime, Utc};
use finale_apiserver::insight::tree::OwnershipNode;

use crate::explain::render::age;

/// One line of the tree: a node, or a group of identical leaf siblings.
enum Entry<'a> {
    Single(&'a OwnershipNode),
    Group(Vec<&'a OwnershipNode>),
}

fn is_leaf(node: &OwnershipNode) -> bool {
    node.children.is_empty()
        && node.omitted == 0
        && node.hidden == 0
        && !node.missing
        && !node.cycle
}

/// Siblings in order, identical leaves folded into groups at the first one's place.
fn entries<'a>(children: &'a [OwnershipNode]) -> Vec<Entry<'a>> {
    type Key<'k> = (&'k str, &'k str, bool, &'k [String]);
    let key = |node: &'a OwnershipNode| -> Key<'a> {
        (
            &node.object.api_version,
            &node.object.kind,
            node.deletion_timestamp.is_some(),
            &node.finalizers,
        )
    };
    let mut out: Vec<Entry<'a>> = Vec::new();
    let mut group_of: Vec<(Key<'a>, usize)> = Vec::new();
    for child in children {
        if !is_leaf(child) {
            out.push(Entry::Single(child));
            continue;
        }
        let k = key(child);
        match group_of.iter().find(|(existing, _)| *existing == k) {
            Some((_, index)) => {
                let index = *index;
                match &mut out[index] {
                    Entry::Group(members) => members.push(child),
                    entry @ Entry::Single(_) => {
                        if let Entry::Single(first) = entry {
                            *entry = Entry::Group(vec![*first, child]);
                        }
                    }
                }
            }
            None => {
                group_of.push((k, out.len()));
                out.push(Entry::Single(child));
            }
        }
    }
    out
}

/// The deletion column of one node or of a group (the group's oldest deletion time), and
/// its colour.
fn deletion(nodes: &[&OwnershipNode], now: Option<DateTime<Utc>>) -> (String, Option<AnsiColor>) {
    let first = nodes[0];
    if first.missing {
        return (
            "not found: the owner this reference names does not exist (with this uid)".into(),
            Some(AnsiColor::Red),
        );
    }
    let oldest = nodes
        .iter()
        .filter_map(|n| n.deletion_timestamp.as_deref())
        .min();
    let mut parts = Vec::new();
    if let Some(since) = oldest {
        parts.push(match now {
            Some(now) => format!("Terminating (since {})", age(since, now)),
            None => "Terminating".to_string(),
        });
    }
    if !first.finalizers.is_empty() {
        parts.push(format!("finalizers: {}", first.finalizers.join(", ")));
    }
    if first.cycle {
        parts.push("ownership cycle: shown above".into());
    }
    let colour = oldest.map(|_| AnsiColor::Yellow);
    if parts.is_empty() {
        ("-".into(), None)
    } else {
        (parts.join("; "), colour)
    }
}

fn label(nodes: &[&OwnershipNode]) -> String {
    let first = &nodes[0].object;
    if nodes.len() == 1 {
        return format!("{}/{}", first.kind, first.name);
    }
    let names: Vec<&str> = nodes.iter().map(|n| n.object.name.as_str()).collect();
    let shown = if names.len() <= 3 {
        names.join(", ")
    } else {
        format!("{}, {}, …, {}", names[0], names[1], names[names.len() - 1])
    };
    format!("{} x{} ({shown})", first.kind, nodes.len())
}

struct Row {
    namespace: String,
    name: String,
    deletion: String,
    colour: Option<AnsiColor>,
}

fn rows(node: &OwnershipNode, first: &str, rest: &str, now: DateTime<Utc>, out: &mut Vec<Row>) {
    let (deletion_text, colour) = deletion(&[node], Some(now));
    out.push(Row {
        namespace: node.object.namespace.to_string(),
        name: format!("{first}{}", label(&[node])),
        deletion: deletion_text,
        colour,
    });
    let mut lines = entries(&node.children);
    let more = node.omitted;
    let hidden = node.hidden;
    let count = lines.len() + usize::from(more > 0) + usize::from(hidden > 0);
    for (index, entry) in lines.drain(..).enumerate() {
        let last = index + 1 == count;
        let (branch, below) = if last {
            ("└─ ", "   ")
        } else {
            ("├─ ", "│  ")
        };
        match entry {
            Entry::Single(child) => rows(
                child,
                &format!("{rest}{branch}"),
                &format!("{rest}{below}"),
                now,
                out,
            ),
            Entry::Group(members) => {
                let (deletion_text, colour) = deletion(&members, Some(now));
                let namespace = &members[0].object.namespace;
                out.push(Row {
                    namespace: if members.iter().all(|m| m.object.namespace == namespace) {
                        namespace.to_string()
                    } else {
                        "(several)".into()
                    },
                    name: format!("{rest}{branch}{}", label(&members)),
                    deletion: deletion_text,
                    colour,
                });
            }
        }
    }
    if hidden > 0 {
        let branch = if more > 0 { "├─" } else { "└─" };
        out.push(Row {
            namespace: String::new(),
            name: format!("{rest}{branch} {hidden} hidden"),
            deletion: "not shown (objects you may not get)".into(),
            colour: None,
        });
    }
    if more > 0 {
        out.push(Row {
            namespace: String::new(),
            name: format!("{rest}└─ … {more} more"),
            deletion: "not shown (the answer's node limit)".into(),
            colour: None,
        });
    }
}

/// The tree as a table: `NAMESPACE NAME DELETION`, `now` being the time ages count to.
pub fn table(root: &OwnershipNode, now: DateTime<Utc>, colour: bool) -> String {
    let mut all = vec![Row {
        namespace: "NAMESPACE".into(),
        name: "NAME".into(),
        deletion: "DELETION".into(),
        colour: None,
    }];
    rows(root, "", "", now, &mut all);
    let width = |text: &str| text.chars().count();
    let namespace_width = all.iter().map(|r| width(&r.namespace)).max().unwrap_or(0);
    let name_width = all.iter().map(|r| width(&r.name)).max().unwrap_or(0);
    let mut out = String::new();
    for row in &all {
        let deletion = match (row.colour, colour) {
            (Some(c), true) => {
                let style = Style::new().fg_color(Some(c.into()));
                format!("{style}{}{style:#}", row.deletion)
            }
            _ => row.deletion.clone(),
        };
        let _ = writeln!(
            out,
            "{}{}  {}{}  {deletion}",
            row.namespace,
            " ".repeat(namespace_width - width(&row.namespace)),
            row.name,
            " ".repeat(name_width - width(&row.name)),
        );
    }
    out
}

/// A DOT string literal.
fn quoted(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The tree as a Graphviz digraph, edges from owner to dependent (so `--up` trees point
/// at their root), grouped as the table is; no ages, so the graph is stable.
pub fn dot(root: &OwnershipNode, up: bool) -> String {
    let mut out = String::from("digraph ownership {\n  node [shape=box];\n");
    let mut next_id = 0usize;
    dot_node(root, &[root], up, &mut next_id, &mut out);
    out.push_str("}\n");
    out
}

/// Writes `nodes` (one node or a group) as one graph node and, for a single node, its
/// children with their edges; returns its id.
fn dot_node(
    node: &OwnershipNode,
    nodes: &[&OwnershipNode],
    up: bool,
    next_id: &mut usize,
    out: &mut String,
) -> String {
    let id = format!("n{next_id}");
    *next_id += 1;
    let object = &node.object;
    let mut text = label(nodes);
    if nodes.len() == 1 && !object.namespace.is_empty() {
        text = format!("{}/{} -n {}", object.kind, object.name, object.namespace);
    }
    let (deletion_text, _) = deletion(nodes, None);
    let _ = writeln!(
        out,
        "  {id} [label={}];",
        quoted(&format!("{text}\n{deletion_text}"))
    );
    if nodes.len() > 1 {
        return id;
    }
    let edge = |out: &mut String, child: &str| {
        let (from, to) = if up {
            (child, id.as_str())
        } else {
            (id.as_str(), child)
        };
        let _ = writeln!(out, "  {from} -> {to};");
    };
    for entry in entries(&node.children) {
        let child = match entry {
            Entry::Single(child) => dot_node(child, &[child], up, next_id, out),
            Entry::Group(members) => dot_node(members[0], &members, up, next_id, out),
        };
        edge(out, &child);
    }
    if node.hidden > 0 {
        let hidden = format!("n{next_id}");
        *next_id += 1;
        let _ = writeln!(
            out,
            "  {hidden} [label={}, shape=plaintext];",
            quoted(&format!("{} hidden", node.hidden))
        );
        edge(out, &hidden);
    }
    if node.omitted > 0 {
        let more = format!("n{next_id}");
        *next_id += 1;
        let _ = writeln!(
            out,
            "  {more} [label={}, shape=plaintext];",
            quoted(&format!("… {} more", node.omitted))
        );
        edge(out, &more);
    }
    id
}

#[cfg(test)]
mod tests {
    use finale_apiserver::insight::api::ObjectRef;

    use super::*;

    fn node(kind: &str, name: &str) -> OwnershipNode {
        OwnershipNode {
            object: ObjectRef {
                api_version: "v1".into(),
                kind: kind.into(),
                namespace: "default".into(),
                name: name.into(),
                uid: format!("uid-{name}"),
            },
            ..OwnershipNode::default()
        }
    }

    #[test]
    fn identical_leaf_siblings_are_grouped_and_others_are_not() {
        let mut root = node("ConfigMap", "app");
        root.deletion_timestamp = Some("2026-11-24T08:00:00Z".into());
        root.finalizers = vec!["foregroundDeletion".into()];
        let mut parent = node("ConfigMap", "mid");
        parent.children = vec![node("Secret", "s")];
        let mut held = node("ConfigMap", "held");
        held.finalizers = vec!["example.com/hold".into()];
        root.children = vec![
            node("ConfigMap", "a-1"),
            parent,
            node("ConfigMap", "a-2"),
            held,
            node("ConfigMap", "a-3"),
            node("ConfigMap", "a-4"),
        ];
        let now = DateTime::parse_from_rfc3339("2026-11-24T08:03:10Z")
            .expect("time")
            .with_timezone(&Utc);
        assert_eq!(
            table(&root, now, false),
            "NAMESPACE  NAME                                DELETION\n\
             default    ConfigMap/app                       Terminating (since 3m ago); finalizers: foregroundDeletion\n\
             default    ├─ ConfigMap x4 (a-1, a-2, …, a-4)  -\n\
             default    ├─ ConfigMap/mid                    -\n\
             default    │  └─ Secret/s                      -\n\
             default    └─ ConfigMap/held                   finalizers: example.com/hold\n"
        );
        let dot = dot(&root, false);
        assert!(dot.starts_with("digraph ownership {\n"), "{dot}");
        assert!(dot.contains("n0 -> n1;"), "{dot}");
        assert!(dot.contains("ConfigMap x4"), "{dot}");
    }
}
