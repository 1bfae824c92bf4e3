//! JSON values as CEL values, the way upstream's `UnstructuredToVal` presents them to
//! expressions: with a schema ([`ValueSchema`], a CRD's structural schema) field names are
//! escaped and formatted strings become timestamps, durations and bytes; without one
//! ([`plain_value`]) objects are maps with their keys as they are.

use std::collections::HashMap;
use std::sync::Arc;

use base64::Engine as _;
use kube_cel::cel;
use kube_cel::cel::objects::{Key, Map as CelMap};
use serde_json::{Map, Value};

/// How a string of a schema node is presented: as upstream's `format`s decide.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ValueFormat {
    #[default]
    Plain,
    DateTime,
    Duration,
    Bytes,
}

/// What value conversion needs to know of a schema node (the CRD rule tree implements it).
pub trait ValueSchema {
    /// `type:` as written (`number` makes integers doubles).
    fn type_name(&self) -> &str;
    fn format(&self) -> ValueFormat;
    /// The root of a resource: `metadata` is trimmed to `name` and `generateName`.
    fn resource_root(&self) -> bool;
    fn items(&self) -> Option<&Self>;
    fn property(&self, name: &str) -> Option<&Self>;
    fn additional(&self) -> Option<&Self>;
    /// A map (`additionalProperties`) without declared properties: keys are data.
    fn is_plain_map(&self) -> bool;
}

/// The schema of values converted without one.
#[derive(Debug)]
pub enum NoSchema {}

impl ValueSchema for NoSchema {
    fn type_name(&self) -> &str {
        match *self {}
    }
    fn format(&self) -> ValueFormat {
        match *self {}
    }
    fn resource_root(&self) -> bool {
        match *self {}
    }
    fn items(&self) -> Option<&Self> {
        match *self {}
    }
    fn property(&self, _: &str) -> Option<&Self> {
        match *self {}
    }
    fn additional(&self) -> Option<&Self> {
        match *self {}
    }
    fn is_plain_map(&self) -> bool {
        match *self {}
    }
}

/// A JSON value as a CEL value without a schema: objects are maps with their keys as they are.
pub fn plain_value(value: &Value) -> cel::Value {
    to_cel::<NoSchema>(value, None, false)
}

/// CEL's reserved words, which upstream escapes as `__word__` in field names and refuses
/// as variable names.
pub(crate) const RESERVED_WORDS: [&str; 21] = [
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// Upstream `cel.Escape`: a property name as a CEL field name, `None` when it has none.
fn escape_field_name(name: &str) -> Option<String> {
    let first = name.chars().next()?;
    if first.is_ascii_digit() {
        return None;
    }
    if RESERVED_WORDS.contains(&name) {
        return Some(format!("__{name}__"));
    }
    let mut escaped = String::with_capacity(name.len());
    let mut chars = name.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '_' if chars.peek() == Some(&'_') => {
                chars.next();
                escaped.push_str("__underscores__");
            }
            '.' => escaped.push_str("__dot__"),
            '-' => escaped.push_str("__dash__"),
            '/' => escaped.push_str("__slash__"),
            c if c.is_ascii_alphanumeric() || c == '_' => escaped.push(c),
            _ => return None,
        }
    }
    Some(escaped)
}

fn cel_string(text: &str) -> cel::Value {
    cel::Value::String(Arc::new(text.to_string()))
}

fn cel_map(entries: HashMap<Key, cel::Value>) -> cel::Value {
    cel::Value::Map(CelMap {
        map: Arc::new(entries),
    })
}

/// Converts a JSON value as upstream's `UnstructuredToVal` presents it to rules: declared
/// properties under escaped names, map keys as they are, numbers of `type: number` as doubles,
/// `date-time`/`duration`/`byte` strings as timestamps, durations and bytes, and at a
/// resource root only `apiVersion`, `kind`, `metadata.name` and `metadata.generateName`.
pub fn to_cel<S: ValueSchema>(value: &Value, node: Option<&S>, resource_root: bool) -> cel::Value {
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(number) => {
            let is_number_type = node.is_some_and(|n| n.type_name() == "number");
            match (number.as_i64(), is_number_type) {
                (Some(i), false) => cel::Value::Int(i),
                _ => match number.as_u64() {
                    Some(u) if !is_number_type => cel::Value::UInt(u),
                    _ => cel::Value::Float(number.as_f64().unwrap_or(f64::NAN)),
                },
            }
        }
        Value::String(text) => string_value(text, node.map_or(ValueFormat::Plain, |n| n.format())),
        Value::Array(items) => {
            let item_node = node.and_then(|n| n.items());
            let converted = items
                .iter()
                .map(|item| {
                    to_cel(
                        item,
                        item_node,
                        item_node.is_some_and(|n| n.resource_root()),
                    )
                })
                .collect();
            cel::Value::List(Arc::new(converted))
        }
        Value::Object(map) => object_value(map, node, resource_root),
    }
}

fn string_value(text: &str, format: ValueFormat) -> cel::Value {
    match format {
        ValueFormat::DateTime => chrono::DateTime::parse_from_rfc3339(text)
            .or_else(|_| {
                chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d").map(|date| {
                    date.and_time(chrono::NaiveTime::MIN)
                        .and_utc()
                        .fixed_offset()
                })
            })
            .map(cel::Value::Timestamp)
            .unwrap_or_else(|_| cel_string(text)),
        ValueFormat::Duration => {
            parse_go_duration(text).map_or_else(|| cel_string(text), cel::Value::Duration)
        }
        ValueFormat::Bytes => base64::engine::general_purpose::STANDARD
            .decode(text)
            .map(|bytes| cel::Value::Bytes(Arc::new(bytes)))
            .unwrap_or_else(|_| cel_string(text)),
        ValueFormat::Plain => cel_string(text),
    }
}

fn object_value<S: ValueSchema>(
    map: &Map<String, Value>,
    node: Option<&S>,
    resource_root: bool,
) -> cel::Value {
    let mut entries = HashMap::with_capacity(map.len());
    for (name, child) in map {
        if resource_root && name == "metadata" {
            entries.insert(
                Key::String(Arc::new(name.clone())),
                resource_metadata(child),
            );
            continue;
        }
        let property = node.and_then(|n| n.property(name));
        let additional = node.and_then(|n| n.additional());
        let is_map = node.is_none_or(|n| n.is_plain_map());
        let key = if property.is_none() && is_map {
            name.clone()
        } else {
            match escape_field_name(name) {
                Some(escaped) => escaped,
                // Upstream leaves fields without a CEL name out.
                None => continue,
            }
        };
        let child_node = property.or(additional);
        let converted = to_cel(
            child,
            child_node,
            child_node.is_some_and(|n| n.resource_root()),
        );
        entries.insert(Key::String(Arc::new(key)), converted);
    }
    cel_map(entries)
}

/// A resource root's `metadata` as rules see it: `name` and `generateName` only.
fn resource_metadata(metadata: &Value) -> cel::Value {
    let mut entries = HashMap::new();
    for name in ["name", "generateName"] {
        if let Some(Value::String(text)) = metadata.get(name) {
            entries.insert(Key::String(Arc::new(name.to_string())), cel_string(text));
        }
    }
    cel_map(entries)
}

/// Go's `time.ParseDuration` (`1h30m`, `-1.5s`, `300ms`, `0`).
pub fn parse_go_duration(text: &str) -> Option<chrono::Duration> {
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest == "0" {
        return Some(chrono::Duration::zero());
    }
    if rest.is_empty() {
        return None;
    }
    let mut nanos: f64 = 0.0;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if number_end == 0 {
            return None;
        }
        let amount: f64 = rest[..number_end].parse().ok()?;
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        rest = &rest[unit_end..];
        nanos += amount * scale;
    }
    if nanos > i64::MAX as f64 {
        return None;
    }
    let duration = chrono::Duration::nanoseconds(nanos as i64);
    Some(if negative { -duration } else { duration })
}
