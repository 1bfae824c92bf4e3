//! Field sets: the sets of field paths that `metadata.managedFields` records per manager,
//! and their `FieldsV1` JSON form.
//!
//! A path is a sequence of [`PathElement`]s, as in structured-merge-diff's `fieldpath`:
//!
//! | Element | `FieldsV1` key | Rendered in messages | Addresses |
//! |---|---|---|---|
//! | [`PathElement::Field`] | `f:<name>` | `.name` | a key of a map |
//! | [`PathElement::Key`] | `k:{"name":"c"}` | `[name="c"]` | an item of an associative list, by its key fields |
//! | [`PathElement::Value`] | `v:"x"` | `[="x"]` | an item of a set list, by its value |
//! | [`PathElement::Index`] | `i:0` | `[0]` | a list item by position (read, never produced here) |
//!
//! A set holds *members* (paths owned as a whole) and *children* (paths with owned paths
//! below them). In `FieldsV1` every member is a key whose value is `{}`; a child is a key
//! whose value is the nested set, with `".": {}` inside when the child is also a member
//! itself (an associative-list item, for example, is owned as well as its fields).
//!
//! The JSON inside `k:` and `v:` keys is written the way Go's `encoding/json` writes it
//! (keys sorted, `<`, `>` and `&` escaped), so keys match upstream's byte for byte.
//! `serde_json` maps keep their keys sorted as strings, so the keys of a `FieldsV1` object
//! come out in string order rather than upstream's element order; only `k:` keys with
//! numeric values (`k:{"port":80}` after `k:{"port":443}`) can differ, and readers do not
//! depend on the order.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};

use serde_json::{Map, Number, Value};

/// One step of a field path.
#[derive(Clone, Debug)]
pub enum PathElement {
    /// A key of a map (`f:<name>`).
    Field(String),
    /// An associative-list item, by its key fields sorted by name (`k:{..}`).
    Key(Vec<(String, Value)>),
    /// A set-list item, by its value (`v:<json>`).
    Value(Value),
    /// A list item by position (`i:<n>`); only ever read from stored sets.
    Index(i64),
}

impl PathElement {
    fn rank(&self) -> u8 {
        match self {
            PathElement::Field(_) => 0,
            PathElement::Key(_) => 1,
            PathElement::Value(_) => 2,
            PathElement::Index(_) => 3,
        }
    }

    /// The `FieldsV1` key for this element.
    fn to_key(&self) -> String {
        match self {
            PathElement::Field(name) => format!("f:{name}"),
            PathElement::Key(fields) => {
                let mut out = String::from("k:{");
                for (i, (name, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_go_json_string(&mut out, name);
                    out.push(':');
                    write_go_json(&mut out, value);
                }
                out.push('}');
                out
            }
            PathElement::Value(value) => {
                let mut out = String::from("v:");
                write_go_json(&mut out, value);
                out
            }
            PathElement::Index(index) => format!("i:{index}"),
        }
    }

    /// Parses a `FieldsV1` key. `Ok(None)` is an element type this server does not know,
    /// which upstream skips rather than rejects.
    fn from_key(key: &str) -> Result<Option<PathElement>, String> {
        let bytes = key.as_bytes();
        if bytes.len() < 2 {
            return Err(format!("key must be 2 characters long: {key:?}"));
        }
        if bytes[1] != b':' {
            return Err(format!("missing colon: {key}"));
        }
        let rest = &key[2..];
        let element = match bytes[0] {
            b'f' => PathElement::Field(rest.to_string()),
            b'v' => PathElement::Value(
                serde_json::from_str(rest).map_err(|e| format!("invalid value in {key:?}: {e}"))?,
            ),
            b'k' => {
                let fields: Map<String, Value> = serde_json::from_str(rest)
                    .map_err(|e| format!("invalid key fields in {key:?}: {e}"))?;
                // A serde_json map iterates sorted by name, which is the order keys compare in.
                PathElement::Key(fields.into_iter().collect())
            }
            b'i' => PathElement::Index(
                rest.parse()
                    .map_err(|e| format!("invalid index in {key:?}: {e}"))?,
            ),
            _ => return Ok(None),
        };
        Ok(Some(element))
    }
}

/// Upstream's order (`PathElement.Compare`): fields, then keys, then values, then indexes.
impl Ord for PathElement {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (PathElement::Field(a), PathElement::Field(b)) => a.cmp(b),
            (PathElement::Key(a), PathElement::Key(b)) => {
                for ((name_a, value_a), (name_b, value_b)) in a.iter().zip(b) {
                    let order = name_a
                        .cmp(name_b)
                        .then_with(|| compare_json(value_a, value_b));
                    if order != Ordering::Equal {
                        return order;
                    }
                }
                a.len().cmp(&b.len())
            }
            (PathElement::Value(a), PathElement::Value(b)) => compare_json(a, b),
            (PathElement::Index(a), PathElement::Index(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

impl PartialOrd for PathElement {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for PathElement {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for PathElement {}

/// Upstream's rendering in conflict messages: `.name`, `[name="c"]`, `[="x"]`, `[0]`.
impl fmt::Display for PathElement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathElement::Field(name) => write!(f, ".{name}"),
            PathElement::Key(fields) => {
                f.write_str("[")?;
                for (i, (name, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{name}={}", GoDisplay(value))?;
                }
                f.write_str("]")
            }
            PathElement::Value(value) => write!(f, "[={}]", GoDisplay(value)),
            PathElement::Index(index) => write!(f, "[{index}]"),
        }
    }
}

/// A path rendered as upstream renders it, e.g. `.spec.containers[name="c"].image`.
pub fn path_string(path: &[PathElement]) -> String {
    path.iter().map(ToString::to_string).collect()
}

/// A set of field paths.
///
/// Invariant: no child set is empty, so derived equality is set equality.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSet {
    members: BTreeSet<PathElement>,
    children: BTreeMap<PathElement, FieldSet>,
}

impl FieldSet {
    /// The empty set.
    pub fn new() -> FieldSet {
        FieldSet::default()
    }

    /// Whether the set holds no path.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.values().all(FieldSet::is_empty)
    }

    /// Adds `path`; the empty path (the object itself) is never a member.
    pub fn insert(&mut self, path: &[PathElement]) {
        let Some((last, parents)) = path.split_last() else {
            return;
        };
        let mut node = self;
        for element in parents {
            node = node.children.entry(element.clone()).or_default();
        }
        node.members.insert(last.clone());
    }

    /// Whether `path` itself is in the set (not merely something below it).
    pub fn contains(&self, path: &[PathElement]) -> bool {
        let Some((last, parents)) = path.split_last() else {
            return false;
        };
        let mut node = self;
        for element in parents {
            match node.children.get(element) {
                Some(child) => node = child,
                None => return false,
            }
        }
        node.members.contains(last)
    }

    /// Whether the path made of this set's prefix and `element` is a member.
    pub(crate) fn has_member(&self, element: &PathElement) -> bool {
        self.members.contains(element)
    }

    /// The paths below `element`, with `element` taken off; `None` when there are none.
    pub(crate) fn child(&self, element: &PathElement) -> Option<&FieldSet> {
        self.children.get(element)
    }

    /// The paths in either set.
    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.members.extend(other.members.iter().cloned());
        for (element, theirs) in &other.children {
            let merged = match out.children.get(element) {
                Some(ours) => ours.union(theirs),
                None => theirs.clone(),
            };
            out.children.insert(element.clone(), merged);
        }
        out
    }

    /// The paths of this set that are not in `other` (exact paths: a member of `other`
    /// does not take away the paths below it).
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let members = self.members.difference(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (element, ours) in &self.children {
            let rest = match other.children.get(element) {
                Some(theirs) => ours.difference(theirs),
                None => ours.clone(),
            };
            if !rest.is_empty() {
                children.insert(element.clone(), rest);
            }
        }
        FieldSet { members, children }
    }

    /// The paths in both sets.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let members = self.members.intersection(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (element, ours) in &self.children {
            if let Some(theirs) = other.children.get(element) {
                let both = ours.intersection(theirs);
                if !both.is_empty() {
                    children.insert(element.clone(), both);
                }
            }
        }
        FieldSet { members, children }
    }

    /// This set without the members naming a map field inside which `owned` holds paths:
    /// a field stays while any manager owns something in it (upstream makes struct fields
    /// members of every set that reaches inside them before pruning).
    pub(crate) fn without_fields_owned_inside(&self, owned: &FieldSet) -> FieldSet {
        self.without_fields_owned_inside_node(Some(owned))
    }

    fn without_fields_owned_inside_node(&self, owned: Option<&FieldSet>) -> FieldSet {
        let owned_inside = |element: &PathElement| {
            owned
                .and_then(|owned| owned.children.get(element))
                .is_some_and(|inside| !inside.is_empty())
        };
        let members = self
            .members
            .iter()
            .filter(|element| !(matches!(element, PathElement::Field(_)) && owned_inside(element)))
            .cloned()
            .collect();
        let mut children = BTreeMap::new();
        for (element, child) in &self.children {
            let rest = child.without_fields_owned_inside_node(
                owned.and_then(|owned| owned.children.get(element)),
            );
            if !rest.is_empty() {
                children.insert(element.clone(), rest);
            }
        }
        FieldSet { members, children }
    }

    /// Every path, in upstream's iteration order: a node's members, then its children
    /// depth first, each in element order.
    pub fn paths(&self) -> Vec<Vec<PathElement>> {
        let mut out = Vec::new();
        self.collect_paths(&mut Vec::new(), &mut out);
        out
    }

    fn collect_paths(&self, prefix: &mut Vec<PathElement>, out: &mut Vec<Vec<PathElement>>) {
        for member in &self.members {
            let mut path = prefix.clone();
            path.push(member.clone());
            out.push(path);
        }
        for (element, child) in &self.children {
            prefix.push(element.clone());
            child.collect_paths(prefix, out);
            prefix.pop();
        }
    }

    /// Parses a `fieldsV1` value (upstream `FieldsToSet`).
    ///
    /// A key with `{}` as its value is a member; a key with children is a member only if
    /// it also has `"."`. Keys of unknown element types are skipped, as upstream does.
    pub fn from_fields_v1(fields: &Value) -> Result<FieldSet, String> {
        let Value::Object(map) = fields else {
            return Err(format!("expected a JSON object, found {fields}"));
        };
        Ok(parse_node(map)?.0.unwrap_or_default())
    }

    /// The `fieldsV1` form of the set.
    pub fn to_fields_v1(&self) -> Value {
        Value::Object(self.to_fields_map())
    }

    fn to_fields_map(&self) -> Map<String, Value> {
        let mut out = Map::new();
        for member in &self.members {
            if !self.children.contains_key(member) {
                out.insert(member.to_key(), Value::Object(Map::new()));
            }
        }
        for (element, child) in &self.children {
            if child.is_empty() {
                continue;
            }
            let mut nested = child.to_fields_map();
            if self.members.contains(element) {
                nested.insert(".".to_string(), Value::Object(Map::new()));
            }
            out.insert(element.to_key(), Value::Object(nested));
        }
        out
    }
}

/// One level of upstream's `readIterV1`: the set below this node (if any element was
/// read) and whether the node itself is a member.
fn parse_node(map: &Map<String, Value>) -> Result<(Option<FieldSet>, bool), String> {
    let mut is_member = false;
    let mut set: Option<FieldSet> = None;
    for (key, value) in map {
        if key == "." {
            is_member = true;
            continue;
        }
        let Some(element) = PathElement::from_key(key)? else {
            continue;
        };
        let Value::Object(nested) = value else {
            return Err(format!(
                "the value of {key:?} must be a JSON object, found {value}"
            ));
        };
        let (grandchildren, child_is_member) = parse_node(nested)?;
        let node = set.get_or_insert_with(FieldSet::default);
        if child_is_member {
            node.members.insert(element.clone());
        }
        if let Some(grandchildren) = grandchildren
            && !grandchildren.is_empty()
        {
            node.children.insert(element, grandchildren);
        }
    }
    // A node with nothing below it can only mean the node itself.
    if set.is_none() {
        is_member = true;
    }
    Ok((set, is_member))
}

/// Upstream's total order on values (`value.Compare`): numbers (integers and floats
/// compared numerically), then strings, booleans, lists and maps.
pub fn compare_json(a: &Value, b: &Value) -> Ordering {
    fn rank(value: &Value) -> u8 {
        match value {
            Value::Number(_) => 0,
            Value::String(_) => 1,
            Value::Bool(_) => 2,
            Value::Array(_) => 3,
            Value::Object(_) => 4,
            Value::Null => 5,
        }
    }
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => compare_numbers(x, y),
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => {
            for (item_x, item_y) in x.iter().zip(y) {
                let order = compare_json(item_x, item_y);
                if order != Ordering::Equal {
                    return order;
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Object(x), Value::Object(y)) => {
            for ((key_x, value_x), (key_y, value_y)) in x.iter().zip(y) {
                let order = key_x
                    .cmp(key_y)
                    .then_with(|| compare_json(value_x, value_y));
                if order != Ordering::Equal {
                    return order;
                }
            }
            x.len().cmp(&y.len())
        }
        _ => rank(a).cmp(&rank(b)),
    }
}

fn compare_numbers(x: &Number, y: &Number) -> Ordering {
    let as_integer = |n: &Number| {
        n.as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
    };
    match (as_integer(x), as_integer(y)) {
        (Some(a), Some(b)) => a.cmp(&b),
        _ => {
            let (a, b) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
            a.partial_cmp(&b).unwrap_or(Ordering::Equal)
        }
    }
}

/// Whether two values are equal the way upstream compares them (`1` equals `1.0`).
pub fn json_equal(a: &Value, b: &Value) -> bool {
    compare_json(a, b) == Ordering::Equal
}

/// Writes `value` as Go's `encoding/json` would: compact, map keys sorted, HTML-escaped.
fn write_go_json(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => write_go_json_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json_string(out, key);
                out.push(':');
                write_go_json(out, item);
            }
            out.push('}');
        }
    }
}

/// A JSON string as Go writes it: like `serde_json`, plus `\u003c`, `\u003e`, `\u0026`,
/// `\u2028` and `\u2029`.
pub(crate) fn write_go_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

pub(crate) use crate::validation::go_quote;

/// A value as upstream's `value.ToString` renders it inside paths.
struct GoDisplay<'v>(&'v Value);

impl fmt::Display for GoDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Value::Null => f.write_str("null"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
                (Some(i), _, _) => write!(f, "{i}"),
                (None, Some(u), _) => write!(f, "{u}"),
                (None, None, Some(x)) => write!(f, "{x}"),
                (None, None, None) => write!(f, "{n}"),
            },
            Value::String(s) => f.write_str(&go_quote(s)),
            Value::Array(items) => {
                f.write_str("[")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{}", GoDisplay(item))?;
                }
                f.write_str("]")
            }
            // Upstream joins map entries with no separator and no braces.
            Value::Object(map) => {
                for (key, item) in map {
                    write!(f, "{key}={}", GoDisplay(item))?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn field(name: &str) -> PathElement {
        PathElement::Field(name.to_string())
    }

    fn keyed(name: &str, value: Value) -> PathElement {
        PathElement::Key(vec![(name.to_string(), value)])
    }

    #[test]
    fn members_and_children_round_trip_through_fields_v1() {
        let mut set = FieldSet::new();
        set.insert(&[field("data"), field("a")]);
        set.insert(&[
            field("spec"),
            field("containers"),
            keyed("name", json!("c")),
        ]);
        set.insert(&[
            field("spec"),
            field("containers"),
            keyed("name", json!("c")),
            field("image"),
        ]);
        set.insert(&[
            field("metadata"),
            field("finalizers"),
            PathElement::Value(json!("x")),
        ]);
        let fields = set.to_fields_v1();
        assert_eq!(
            fields,
            json!({
                "f:data": {"f:a": {}},
                "f:metadata": {"f:finalizers": {"v:\"x\"": {}}},
                "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}}}},
            })
        );
        assert_eq!(FieldSet::from_fields_v1(&fields), Ok(set));
    }

    #[test]
    fn parsing_follows_upstream_membership_rules() {
        // `{}` is a member, children without "." are not, unknown element types are skipped.
        let set = FieldSet::from_fields_v1(&json!({
            "f:labels": {".": {}, "f:app": {}},
            "f:spec": {"f:replicas": {}},
            "x:unknown": {},
            "k:{\"port\":80,\"protocol\":\"TCP\"}": {},
            "i:3": {}
        }))
        .unwrap();
        assert!(set.contains(&[field("labels")]));
        assert!(set.contains(&[field("labels"), field("app")]));
        assert!(!set.contains(&[field("spec")]));
        assert!(set.contains(&[field("spec"), field("replicas")]));
        assert!(set.contains(&[PathElement::Index(3)]));
        assert!(set.contains(&[PathElement::Key(vec![
            ("port".to_string(), json!(80)),
            ("protocol".to_string(), json!("TCP")),
        ])]));
        assert_eq!(set.paths().len(), 5);
    }

    #[test]
    fn malformed_keys_are_errors() {
        assert_eq!(
            FieldSet::from_fields_v1(&json!({"fx": {}})),
            Err("missing colon: fx".to_string())
        );
        assert!(FieldSet::from_fields_v1(&json!({"k:{": {}})).is_err());
        assert!(FieldSet::from_fields_v1(&json!({"f:a": 1})).is_err());
        assert!(FieldSet::from_fields_v1(&json!([])).is_err());
    }

    #[test]
    fn key_json_is_written_like_go() {
        let element = keyed("name", json!("a<b&\"c\""));
        assert_eq!(element.to_key(), r#"k:{"name":"a\u003cb\u0026\"c\""}"#);
        assert_eq!(element.to_string(), r#"[name="a<b&\"c\""]"#);
        assert_eq!(PathElement::Value(json!(8080)).to_key(), "v:8080");
        assert_eq!(PathElement::Value(json!("x")).to_string(), r#"[="x"]"#);
    }

    #[test]
    fn paths_render_as_upstream() {
        let path = [
            field("spec"),
            field("containers"),
            keyed("name", json!("c")),
            field("image"),
        ];
        assert_eq!(path_string(&path), r#".spec.containers[name="c"].image"#);
    }

    #[test]
    fn set_algebra_is_by_exact_path() {
        let mut a = FieldSet::new();
        a.insert(&[field("data"), field("a")]);
        a.insert(&[field("data"), field("b")]);
        a.insert(&[field("spec")]);
        let mut b = FieldSet::new();
        b.insert(&[field("data"), field("b")]);
        b.insert(&[field("spec"), field("x")]);

        let mut only_a = FieldSet::new();
        only_a.insert(&[field("data"), field("a")]);
        only_a.insert(&[field("spec")]);
        assert_eq!(a.difference(&b), only_a);

        let mut both = FieldSet::new();
        both.insert(&[field("data"), field("b")]);
        assert_eq!(a.intersection(&b), both);

        let union = a.union(&b);
        assert!(union.contains(&[field("spec")]) && union.contains(&[field("spec"), field("x")]));
        assert!(a.difference(&a).is_empty());
    }

    #[test]
    fn paths_iterate_members_before_children() {
        let mut set = FieldSet::new();
        set.insert(&[field("spec"), field("template"), field("x")]);
        set.insert(&[field("spec"), field("replicas")]);
        set.insert(&[field("data"), field("b")]);
        let rendered: Vec<String> = set.paths().iter().map(|p| path_string(p)).collect();
        assert_eq!(rendered, [".data.b", ".spec.replicas", ".spec.template.x"]);
    }

    #[test]
    fn values_compare_numerically_across_number_kinds() {
        assert!(json_equal(&json!(1), &json!(1.0)));
        assert_eq!(compare_json(&json!(2), &json!(10)), Ordering::Less);
        assert_eq!(compare_json(&json!(10), &json!("a")), Ordering::Less);
        assert!(!json_equal(&json!({"a": 1}), &json!({"a": 1, "b": 2})));
    }
}
