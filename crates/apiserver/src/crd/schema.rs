//! The structural schema of one custom resource version: what upstream's apiextensions
//! server does with `spec.versions[*].schema.openAPIV3Schema` once a CRD is accepted.
//!
//! [`StructuralSchema::compile`] checks the schema the way CRD validation does (structural
//! rules, defaults, list and map extensions) and keeps a compiled tree with its `pattern`
//! regexes. The tree then serves four jobs on every write of a custom object, in this order:
//!
//! 1. [`StructuralSchema::prune`] drops fields the schema does not declare and reports them
//!    as `fieldValidation` needs them (`metadata.foo`, `spec.bar`, `spec.items[0].baz`);
//! 2. [`StructuralSchema::apply_defaults`] drops nulls the schema does not allow and fills in
//!    `default:` values;
//! 3. [`StructuralSchema::validate`] checks values as kube-openapi's validator does, with its
//!    exact messages (`spec.replicas in body must be of type integer: "string"`), plus the
//!    `x-kubernetes-list-type` and embedded-resource checks;
//! 4. [`StructuralSchema::list_type`] (and the [`PatchSchema`] impl) tells merging code which
//!    lists are sets or maps.
//!
//! Facts follow Kubernetes 1.33 (apiextensions-apiserver `pkg/apiserver/schema` and
//! `pkg/apis/apiextensions/validation`, kube-openapi `pkg/validation`).
//!
//! `x-kubernetes-validations` (CEL rules) are compiled with the schema by
//! [`crate::crd::cel::CelValidator`], and [`StructuralSchema::rules`] hands them to the write
//! path, which runs them after step 3.
//!
//! Caveats:
//! - CEL rules follow [`crate::crd::cel`], whose Caveats list how they differ from upstream
//!   (no static type checking of expressions, an estimated rather than metered cost).
//! - Upstream iterates Go maps, so the order of errors among sibling properties is random
//!   there; here it is the sorted order of the names.
//! - `pattern` uses the `regex` crate. Perl classes (`\d`, `\w`, `\s`, `\b`) are rewritten to
//!   their ASCII meaning as in Go's RE2, but compile-error wording differs from Go's.
//! - Validation ratcheting (unchanged invalid fields pass on update) is not done.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::{Mutex, OnceLock};

use regex::Regex;
use serde_json::{Map, Value};

use crate::crd::cel::CelValidator;
use crate::patch::{ListStrategy, MapStrategy, PatchSchema};
use crate::validation::{self, FieldError, go_quote};

/// `apiVersion`, `kind` and `metadata`: kept out of pruning at a resource root.
const META_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// The types CRD validation accepts in `type:`, sorted as upstream lists them.
const OPENAPI_V3_TYPES: [&str; 6] = ["array", "boolean", "integer", "number", "object", "string"];

/// String formats a CRD may use in 1.33 (upstream compares them with dashes removed); any
/// other format is ignored by validation.
const SUPPORTED_STRING_FORMATS: [&str; 25] = [
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
    "quantity",
];

/// A compiled `openAPIV3Schema`.
#[derive(Debug)]
pub struct StructuralSchema {
    root: Node,
    /// Its `x-kubernetes-validations`, compiled with it (`None` without rules).
    rules: Option<CelValidator>,
}

impl StructuralSchema {
    /// The `openAPIV3Schema` as written, which OpenAPI publishes (see [`crate::openapi`]).
    pub fn source(&self) -> &Map<String, Value> {
        &self.root.raw
    }

    /// The compiled CEL validation rules, which every write runs after [`Self::validate`].
    pub fn rules(&self) -> Option<&CelValidator> {
        self.rules.as_ref()
    }
}

/// How a list is merged (`x-kubernetes-list-type`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListType {
    /// Replaced as a whole (the default).
    Atomic,
    /// Scalars (or atomic values) merged as a set.
    Set,
    /// Objects merged by the values of these keys (`x-kubernetes-list-map-keys`).
    Map(Vec<String>),
}

// ---------------------------------------------------------------------------------------------
// Field paths
// ---------------------------------------------------------------------------------------------

/// `parent.name`, as upstream's `field.Path.Child` prints it.
fn child(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_string()
    } else {
        format!("{parent}.{name}")
    }
}

/// `parent[key]`, as upstream's `field.Path.Key` prints it (no quotes).
fn key(parent: &str, key: &str) -> String {
    format!("{parent}[{key}]")
}

/// `parent[i]`.
fn index(parent: &str, i: usize) -> String {
    format!("{parent}[{i}]")
}

// ---------------------------------------------------------------------------------------------
// The compiled schema tree
// ---------------------------------------------------------------------------------------------

/// One JSON schema node (upstream's `JSONSchemaProps`), structural parts and value
/// validations alike; `allOf`/`anyOf`/`oneOf`/`not` branches are nodes too.
#[derive(Debug, Default)]
struct Node {
    /// The node as written, for the few checks that compare shapes.
    raw: Map<String, Value>,
    type_: String,
    format: String,
    title: String,
    description: String,
    nullable: bool,
    /// `default:` with a non-null value.
    default: Option<Value>,
    /// `default:` written at all (even as `null`), which some checks look at.
    default_written: bool,
    maximum: Option<f64>,
    exclusive_maximum: bool,
    minimum: Option<f64>,
    exclusive_minimum: bool,
    multiple_of: Option<f64>,
    max_length: Option<i64>,
    min_length: Option<i64>,
    pattern: Option<Pattern>,
    max_items: Option<i64>,
    min_items: Option<i64>,
    unique_items: bool,
    max_properties: Option<i64>,
    min_properties: Option<i64>,
    required: Vec<String>,
    enum_values: Option<Vec<Value>>,
    all_of: Vec<Node>,
    any_of: Vec<Node>,
    one_of: Vec<Node>,
    not: Option<Box<Node>>,
    properties: BTreeMap<String, Node>,
    additional_properties: Option<Additional>,
    items: Option<Box<Node>>,
    /// `items:` given as a list of schemas, which CRDs forbid.
    items_is_list: bool,
    preserve_unknown_fields: Option<bool>,
    embedded_resource: bool,
    int_or_string: bool,
    list_type: Option<String>,
    list_map_keys: Vec<String>,
    map_type: Option<String>,
    has_cel_rules: bool,
    id: String,
    schema_uri: String,
    has_ref: bool,
    has_additional_items: bool,
    has_pattern_properties: bool,
    has_definitions: bool,
    has_dependencies: bool,
    /// kube-openapi's view: `type` as a list (`[integer, string]` for int-or-string).
    types: Vec<&'static str>,
    /// kube-openapi's view: the format after unsupported ones are blanked.
    effective_format: String,
}

#[derive(Debug)]
enum Additional {
    /// `additionalProperties: true|false`.
    Allows(bool),
    Schema(Box<Node>),
}

impl Additional {
    fn schema(&self) -> Option<&Node> {
        match self {
            Additional::Schema(node) => Some(node),
            Additional::Allows(_) => None,
        }
    }
}

#[derive(Debug)]
struct Pattern {
    source: String,
    compiled: Result<Regex, String>,
}

impl Node {
    fn preserves_unknown(&self) -> bool {
        self.preserve_unknown_fields == Some(true)
    }

    /// The schema of a field of this object: a declared property, else the
    /// `additionalProperties` schema.
    fn field(&self, name: &str) -> Option<&Node> {
        self.properties.get(name).or_else(|| {
            self.additional_properties
                .as_ref()
                .and_then(Additional::schema)
        })
    }

    fn only_type(&self, wanted: &str) -> bool {
        self.raw.len() == 1 && self.type_ == wanted
    }
}

/// Reads one schema node, reporting keywords of the wrong JSON type.
fn parse_node(value: &Value, path: &str, errors: &mut Vec<FieldError>) -> Node {
    let Value::Object(map) = value else {
        errors.push(invalid_value(path, value, "must be a JSON schema object"));
        return Node::default();
    };
    let mut node = Node {
        raw: map.clone(),
        ..Node::default()
    };
    for (keyword, v) in map {
        let here = child(path, keyword);
        match keyword.as_str() {
            "type" => node.type_ = string_of(v, &here, errors),
            "format" => node.format = string_of(v, &here, errors),
            "title" => node.title = string_of(v, &here, errors),
            "description" => node.description = string_of(v, &here, errors),
            "id" => node.id = string_of(v, &here, errors),
            "$schema" => node.schema_uri = string_of(v, &here, errors),
            "$ref" => node.has_ref = true,
            "nullable" => node.nullable = bool_of(v, &here, errors),
            "exclusiveMaximum" => node.exclusive_maximum = bool_of(v, &here, errors),
            "exclusiveMinimum" => node.exclusive_minimum = bool_of(v, &here, errors),
            "uniqueItems" => node.unique_items = bool_of(v, &here, errors),
            "x-kubernetes-embedded-resource" => node.embedded_resource = bool_of(v, &here, errors),
            "x-kubernetes-int-or-string" => node.int_or_string = bool_of(v, &here, errors),
            "x-kubernetes-preserve-unknown-fields" if !v.is_null() => {
                node.preserve_unknown_fields = Some(bool_of(v, &here, errors));
            }
            "default" => {
                node.default_written = true;
                if !v.is_null() {
                    node.default = Some(v.clone());
                }
            }
            "maximum" => node.maximum = number_of(v, &here, errors),
            "minimum" => node.minimum = number_of(v, &here, errors),
            "multipleOf" => node.multiple_of = number_of(v, &here, errors),
            "maxLength" => node.max_length = integer_of(v, &here, errors),
            "minLength" => node.min_length = integer_of(v, &here, errors),
            "maxItems" => node.max_items = integer_of(v, &here, errors),
            "minItems" => node.min_items = integer_of(v, &here, errors),
            "maxProperties" => node.max_properties = integer_of(v, &here, errors),
            "minProperties" => node.min_properties = integer_of(v, &here, errors),
            "pattern" => {
                let source = string_of(v, &here, errors);
                if !source.is_empty() {
                    node.pattern = Some(Pattern {
                        compiled: compile_go_regex(&source),
                        source,
                    });
                }
            }
            "required" => node.required = strings_of(v, &here, errors),
            "x-kubernetes-list-map-keys" => node.list_map_keys = strings_of(v, &here, errors),
            "x-kubernetes-list-type" if !v.is_null() => {
                node.list_type = Some(string_of(v, &here, errors))
            }
            "x-kubernetes-map-type" if !v.is_null() => {
                node.map_type = Some(string_of(v, &here, errors))
            }
            "x-kubernetes-validations" => {
                node.has_cel_rules = matches!(v, Value::Array(rules) if !rules.is_empty())
            }
            "enum" => match v {
                Value::Array(values) => node.enum_values = Some(values.clone()),
                Value::Null => {}
                other => errors.push(invalid_value(&here, other, "must be a list")),
            },
            "allOf" => node.all_of = nodes_of(v, &here, errors),
            "anyOf" => node.any_of = nodes_of(v, &here, errors),
            "oneOf" => node.one_of = nodes_of(v, &here, errors),
            "not" if !v.is_null() => node.not = Some(Box::new(parse_node(v, &here, errors))),
            "items" => match v {
                Value::Object(_) => node.items = Some(Box::new(parse_node(v, &here, errors))),
                Value::Array(list) => node.items_is_list = !list.is_empty(),
                Value::Null => {}
                other => errors.push(invalid_value(&here, other, "must be a JSON schema object")),
            },
            "properties" => match v {
                Value::Object(properties) => {
                    for (name, schema) in properties {
                        let node_path = key(&here, name);
                        node.properties
                            .insert(name.clone(), parse_node(schema, &node_path, errors));
                    }
                }
                Value::Null => {}
                other => errors.push(invalid_value(&here, other, "must be an object")),
            },
            "additionalProperties" => match v {
                Value::Bool(allows) => {
                    node.additional_properties = Some(Additional::Allows(*allows))
                }
                Value::Object(_) => {
                    node.additional_properties =
                        Some(Additional::Schema(Box::new(parse_node(v, &here, errors))))
                }
                Value::Null => {}
                other => errors.push(invalid_value(
                    &here,
                    other,
                    "must be a boolean or a JSON schema object",
                )),
            },
            "additionalItems" => node.has_additional_items = !v.is_null(),
            "patternProperties" => {
                node.has_pattern_properties = matches!(v, Value::Object(m) if !m.is_empty())
            }
            "definitions" => node.has_definitions = matches!(v, Value::Object(m) if !m.is_empty()),
            "dependencies" => node.has_dependencies = !v.is_null(),
            // example, externalDocs and unknown keywords carry no semantics here.
            _ => {}
        }
    }
    // An unknown type name is rejected by CRD validation; it never reaches the validator.
    node.types = if node.int_or_string {
        vec!["integer", "string"]
    } else {
        OPENAPI_V3_TYPES
            .iter()
            .find(|t| **t == node.type_)
            .map(|t| vec![*t])
            .unwrap_or_default()
    };
    node.effective_format = effective_format(&node);
    node
}

/// kube-openapi only checks formats supported at the CRD's compatibility version; others are
/// blanked before validation (upstream `StripUnsupportedFormatsPostProcess`).
fn effective_format(node: &Node) -> String {
    if node.format.is_empty() {
        return String::new();
    }
    let single_type = if node.types.len() == 1 {
        node.types[0]
    } else {
        ""
    };
    let keep = match single_type {
        "" | "string" => SUPPORTED_STRING_FORMATS.contains(&node.format.replace('-', "").as_str()),
        "integer" => node.format == "int32" || node.format == "int64",
        "number" => node.format == "float" || node.format == "double",
        _ => false,
    };
    if keep {
        node.format.clone()
    } else {
        String::new()
    }
}

fn string_of(v: &Value, path: &str, errors: &mut Vec<FieldError>) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => {
            errors.push(invalid_value(path, other, "must be a string"));
            String::new()
        }
    }
}

fn bool_of(v: &Value, path: &str, errors: &mut Vec<FieldError>) -> bool {
    match v {
        Value::Bool(b) => *b,
        Value::Null => false,
        other => {
            errors.push(invalid_value(path, other, "must be a boolean"));
            false
        }
    }
}

fn number_of(v: &Value, path: &str, errors: &mut Vec<FieldError>) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::Null => None,
        other => {
            errors.push(invalid_value(path, other, "must be a number"));
            None
        }
    }
}

fn integer_of(v: &Value, path: &str, errors: &mut Vec<FieldError>) -> Option<i64> {
    match v {
        Value::Number(n) if n.as_i64().is_some() => n.as_i64(),
        Value::Null => None,
        other => {
            errors.push(invalid_value(path, other, "must be an integer"));
            None
        }
    }
}

fn strings_of(v: &Value, path: &str, errors: &mut Vec<FieldError>) -> Vec<String> {
    match v {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .filter_map(|(i, item)| match item {
                Value::String(s) => Some(s.clone()),
                other => {
                    errors.push(invalid_value(&index(path, i), other, "must be a string"));
                    None
                }
            })
            .collect(),
        Value::Null => Vec::new(),
        other => {
            errors.push(invalid_value(path, other, "must be a list of strings"));
            Vec::new()
        }
    }
}

fn nodes_of(v: &Value, path: &str, errors: &mut Vec<FieldError>) -> Vec<Node> {
    match v {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| parse_node(item, &index(path, i), errors))
            .collect(),
        Value::Null => Vec::new(),
        other => {
            errors.push(invalid_value(
                path,
                other,
                "must be a list of JSON schema objects",
            ));
            Vec::new()
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Compilation and the CRD-time checks of a schema
// ---------------------------------------------------------------------------------------------

impl StructuralSchema {
    /// Compiles `spec.versions[i].schema.openAPIV3Schema`.
    ///
    /// # Errors
    ///
    /// The field errors CRD validation reports for this schema, rooted at `field_root` (for
    /// example `spec.versions[0].schema.openAPIV3Schema`; upstream reports a schema shared by
    /// all versions at `spec.validation.openAPIV3Schema`): non-structural schemas (a missing
    /// `type`, metadata constraints, forbidden keywords in `allOf`…), invalid defaults,
    /// unsupported keywords and inconsistent list or map extensions.
    pub fn compile(schema: &Value, field_root: &str) -> Result<Self, Vec<FieldError>> {
        let mut errors = Vec::new();
        let root = parse_node(schema, field_root, &mut errors);
        if !errors.is_empty() {
            return Err(errors);
        }
        let errors = schema_errors(&root, field_root);
        if !errors.is_empty() {
            return Err(errors);
        }
        // Rules are compiled against a schema known to be structural, as upstream does.
        let rules = CelValidator::compile(schema, field_root)?;
        Ok(StructuralSchema { root, rules })
    }
}

/// Upstream `validateCustomResourceDefinitionValidation` for one schema, minus the checks that
/// depend on the rest of the CRD (the status subresource's root restrictions).
fn schema_errors(root: &Node, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if root.nullable {
        errors.push(FieldError::forbidden(
            &child(path, "nullable"),
            "nullable cannot be true at the root",
        ));
    }
    // A schema upstream cannot even convert is only reported when nothing else is wrong.
    let conversion_error = conversion_error(root);
    if conversion_error.is_none() {
        let mut structural = structural_invariants(root, Level::Root, path);
        structural.extend(structural_completeness(root, path));
        structural.sort_by_key(|e| e.to_string());
        if structural.is_empty() {
            default_errors(root, path, true, false, &mut errors);
        } else {
            errors.extend(structural);
        }
    }
    openapi_schema_errors(root, path, &SchemaContext::default(), true, &mut errors);
    if errors.is_empty()
        && let Some(message) = conversion_error
    {
        errors.push(FieldError::invalid(path, "", &message));
    }
    errors
}

/// Upstream `NewStructural` failures, the first one found.
fn conversion_error(node: &Node) -> Option<String> {
    let unsupported = [
        (!node.id.is_empty(), "id"),
        (!node.schema_uri.is_empty(), "schema"),
        (node.has_ref, "$ref"),
        (node.has_pattern_properties, "patternProperties"),
        (node.has_dependencies, "dependencies"),
        (node.has_additional_items, "additionalItems"),
        (node.has_definitions, "definitions"),
    ];
    if let Some((_, name)) = unsupported.iter().find(|(present, _)| *present) {
        return Some(format!("OpenAPIV3Schema '{name}' is not supported"));
    }
    let nested = node
        .not
        .iter()
        .map(|n| &**n)
        .chain(&node.all_of)
        .chain(&node.any_of)
        .chain(&node.one_of);
    for branch in nested {
        if let Some(message) = conversion_error(branch) {
            return Some(message);
        }
    }
    if node.preserve_unknown_fields == Some(false) {
        return Some(
            "internal error: 'x-kubernetes-preserve-unknown-fields' must be true or undefined"
                .into(),
        );
    }
    if node.items_is_list {
        return Some("OpenAPIV3Schema 'items' must be a schema, but is an array".into());
    }
    let children = node
        .items
        .iter()
        .map(|n| &**n)
        .chain(node.properties.values())
        .chain(
            node.additional_properties
                .as_ref()
                .and_then(Additional::schema),
        );
    for child_node in children {
        if let Some(message) = conversion_error(child_node) {
            return Some(message);
        }
    }
    None
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Item,
    Field,
}

/// Upstream `validateStructuralInvariants`.
fn structural_invariants(node: &Node, level: Level, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if node.type_ == "array" && node.items.is_none() {
        errors.push(FieldError::required(
            &child(path, "items"),
            "must be specified",
        ));
    }
    if let Some(items) = &node.items {
        errors.extend(structural_invariants(
            items,
            Level::Item,
            &child(path, "items"),
        ));
    }
    for (name, property) in &node.properties {
        let here = key(&child(path, "properties"), name);
        errors.extend(structural_invariants(property, Level::Field, &here));
    }
    if let Some(additional) = &node.additional_properties {
        let here = child(path, "additionalProperties");
        if level == Level::Root {
            errors.push(FieldError::forbidden(&here, "must not be used at the root"));
        }
        if let Some(schema) = additional.schema() {
            errors.extend(structural_invariants(schema, Level::Field, &here));
        }
    }
    if node.int_or_string && node.preserves_unknown() {
        errors.push(FieldError::invalid_literal(
            &child(path, "x-kubernetes-preserve-unknown-fields"),
            "true",
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    if node.int_or_string && node.embedded_resource {
        errors.push(FieldError::invalid_literal(
            &child(path, "x-kubernetes-embedded-resource"),
            "true",
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    let skip_any_of = is_int_or_string_any_of(&node.any_of);
    let skip_first_all_of_any_of = node
        .all_of
        .first()
        .is_some_and(|first| is_int_or_string_any_of(&first.any_of));
    errors.extend(nested_validations(
        node,
        skip_any_of,
        skip_first_all_of_any_of,
        level,
        path,
    ));

    let check_metadata = level == Level::Root || node.embedded_resource;
    if node.embedded_resource && node.type_ != "object" {
        let message = "must be object if x-kubernetes-embedded-resource is true";
        errors.push(required_or_invalid_type(path, &node.type_, message));
    } else if node.type_.is_empty() && !node.int_or_string && !node.preserves_unknown() {
        let message = match level {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            Level::Field => "must not be empty for specified object fields",
        };
        errors.push(FieldError::required(&child(path, "type"), message));
    }
    if node.embedded_resource && node.additional_properties.is_some() {
        errors.push(FieldError::forbidden(
            &child(path, "additionalProperties"),
            "must not be used if x-kubernetes-embedded-resource is set",
        ));
    }
    if level == Level::Root && !node.type_.is_empty() && node.type_ != "object" {
        errors.push(FieldError::invalid(
            &child(path, "type"),
            node.type_.as_str(),
            "must be object at the root",
        ));
    }
    if check_metadata {
        for name in ["kind", "apiVersion"] {
            if let Some(property) = node.properties.get(name)
                && property.type_ != "string"
            {
                errors.push(FieldError::invalid(
                    &child(&key(&child(path, "properties"), name), "type"),
                    property.type_.as_str(),
                    "must be string",
                ));
            }
        }
    }
    if let Some(metadata) = node.properties.get("metadata") {
        let here = key(&child(path, "properties"), "metadata");
        if check_metadata && metadata.type_ != "object" {
            errors.push(FieldError::invalid(
                &child(&here, "type"),
                metadata.type_.as_str(),
                "must be object",
            ));
        }
        if level == Level::Root && !root_metadata_is_implicit(metadata) {
            errors.push(FieldError::forbidden(
                &here,
                "must not specify anything other than name and generateName, but metadata is implicitly specified",
            ));
        }
    }
    if node.embedded_resource && !node.preserves_unknown() && node.properties.is_empty() {
        errors.push(FieldError::required(
            &child(path, "properties"),
            "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
        ));
    }
    errors
}

fn required_or_invalid_type(path: &str, type_: &str, message: &str) -> FieldError {
    if type_.is_empty() {
        FieldError::required(&child(path, "type"), message)
    } else {
        FieldError::invalid(&child(path, "type"), type_, message)
    }
}

/// `anyOf: [{type: integer}, {type: string}]`, the one `anyOf` with types that is structural.
fn is_int_or_string_any_of(any_of: &[Node]) -> bool {
    matches!(any_of, [first, second] if first.only_type("integer") && second.only_type("string"))
}

/// The root `metadata` schema may only restrict `name` and `generateName` (and name a type
/// or default, which are checked elsewhere).
fn root_metadata_is_implicit(metadata: &Node) -> bool {
    metadata
        .raw
        .iter()
        .all(|(keyword, value)| match keyword.as_str() {
            "type" | "default" => true,
            "properties" => {
                let names: BTreeSet<&str> =
                    metadata.properties.keys().map(String::as_str).collect();
                names.is_empty() || names.iter().all(|n| *n == "name" || *n == "generateName")
            }
            _ => is_zero(value),
        })
}

/// Go's zero value test on a decoded JSON keyword.
fn is_zero(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
        Value::Number(n) => n.as_f64() == Some(0.0),
    }
}

/// Upstream `validateValueValidation`: the `allOf`/`anyOf`/`oneOf`/`not` of a node and its
/// `pattern`.
fn nested_validations(
    node: &Node,
    skip_any_of: bool,
    skip_first_all_of_any_of: bool,
    level: Level,
    path: &str,
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if !skip_any_of {
        for (i, branch) in node.any_of.iter().enumerate() {
            errors.extend(nested_branch(
                branch,
                false,
                level,
                &index(&child(path, "anyOf"), i),
            ));
        }
    }
    for (i, branch) in node.all_of.iter().enumerate() {
        let skip = skip_first_all_of_any_of && i == 0;
        errors.extend(nested_branch(
            branch,
            skip,
            level,
            &index(&child(path, "allOf"), i),
        ));
    }
    for (i, branch) in node.one_of.iter().enumerate() {
        errors.extend(nested_branch(
            branch,
            false,
            level,
            &index(&child(path, "oneOf"), i),
        ));
    }
    if let Some(not) = &node.not {
        errors.extend(nested_branch(not, false, level, &child(path, "not")));
    }
    if let Some(pattern) = &node.pattern
        && let Err(reason) = &pattern.compiled
    {
        errors.push(FieldError::invalid(
            &child(path, "pattern"),
            pattern.source.as_str(),
            &format!("must be a valid regular expression, but isn't: {reason}"),
        ));
    }
    errors
}

/// Upstream `validateNestedValueValidation`: inside `allOf` & co. only value validations are
/// structural.
fn nested_branch(node: &Node, skip_any_of: bool, level: Level, path: &str) -> Vec<FieldError> {
    let mut errors = nested_validations(node, skip_any_of, false, level, path);
    if let Some(items) = &node.items {
        errors.extend(nested_branch(items, false, level, &child(path, "items")));
    }
    for (name, property) in &node.properties {
        let here = key(&child(path, "properties"), name);
        errors.extend(nested_branch(property, false, Level::Field, &here));
    }
    let forbidden =
        |keyword: &str, message: &str| FieldError::forbidden(&child(path, keyword), message);
    if !node.type_.is_empty() {
        errors.push(forbidden("type", "must be empty to be structural"));
    }
    if node.additional_properties.is_some() {
        errors.push(forbidden(
            "additionalProperties",
            "must be undefined to be structural",
        ));
    }
    if node.default.is_some() {
        errors.push(forbidden("default", "must be undefined to be structural"));
    }
    if !node.title.is_empty() {
        errors.push(forbidden("title", "must be empty to be structural"));
    }
    if !node.description.is_empty() {
        errors.push(forbidden("description", "must be empty to be structural"));
    }
    if node.nullable {
        errors.push(forbidden("nullable", "must be false to be structural"));
    }
    if node.preserves_unknown() {
        errors.push(forbidden(
            "x-kubernetes-preserve-unknown-fields",
            "must be false to be structural",
        ));
    }
    if node.embedded_resource {
        errors.push(forbidden(
            "x-kubernetes-embedded-resource",
            "must be false to be structural",
        ));
    }
    if node.int_or_string {
        errors.push(forbidden(
            "x-kubernetes-int-or-string",
            "must be false to be structural",
        ));
    }
    if !node.list_map_keys.is_empty() {
        errors.push(forbidden(
            "x-kubernetes-list-map-keys",
            "must be empty to be structural",
        ));
    }
    if node.list_type.is_some() {
        errors.push(forbidden(
            "x-kubernetes-list-type",
            "must be undefined to be structural",
        ));
    }
    if node.map_type.is_some() {
        errors.push(forbidden(
            "x-kubernetes-map-type",
            "must be undefined to be structural",
        ));
    }
    if node.has_cel_rules {
        errors.push(forbidden(
            "x-kubernetes-validations",
            "must be empty to be structural",
        ));
    }
    if node.properties.contains_key("metadata") {
        errors.push(FieldError::forbidden(
            &key(&child(path, "properties"), "metadata"),
            "must not be specified in a nested context",
        ));
    }
    errors
}

/// Upstream `validateStructuralCompleteness`: whatever the root's `allOf` & co. constrain
/// must also be declared structurally.
fn structural_completeness(root: &Node, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    branches_complete(root, Some(root), path, path, &mut errors);
    errors
}

fn branches_complete(
    validations: &Node,
    structural: Option<&Node>,
    s_path: &str,
    v_path: &str,
    errors: &mut Vec<FieldError>,
) {
    if let Some(not) = &validations.not {
        branch_complete(not, structural, s_path, &child(v_path, "not"), errors);
    }
    let lists = [
        ("allOf", &validations.all_of),
        ("anyOf", &validations.any_of),
        ("oneOf", &validations.one_of),
    ];
    for (keyword, branches) in lists {
        for (i, branch) in branches.iter().enumerate() {
            branch_complete(
                branch,
                structural,
                s_path,
                &index(&child(v_path, keyword), i),
                errors,
            );
        }
    }
}

fn branch_complete(
    branch: &Node,
    structural: Option<&Node>,
    s_path: &str,
    v_path: &str,
    errors: &mut Vec<FieldError>,
) {
    let Some(structural) = structural else {
        errors.push(FieldError::required(
            s_path,
            &format!("because it is defined in {v_path}"),
        ));
        return;
    };
    branches_complete(branch, Some(structural), s_path, v_path, errors);
    if let Some(items) = &branch.items {
        branch_complete(
            items,
            structural.items.as_deref(),
            &child(s_path, "items"),
            &child(v_path, "items"),
            errors,
        );
    }
    for (name, property) in &branch.properties {
        let s_here = key(&child(s_path, "properties"), name);
        let v_here = key(&child(v_path, "properties"), name);
        match structural.properties.get(name) {
            Some(declared) => branch_complete(property, Some(declared), &s_here, &v_here, errors),
            None => errors.push(FieldError::required(
                &s_here,
                &format!("because it is defined in {v_here}"),
            )),
        }
    }
}

/// Upstream `defaulting.ValidateDefaults`: every default must be pruned already and valid
/// against its own schema. Defaults inside resource metadata are only value-checked.
fn default_errors(
    node: &Node,
    path: &str,
    resource_root: bool,
    inside_meta: bool,
    errors: &mut Vec<FieldError>,
) {
    let embedded = resource_root || node.embedded_resource;
    let inside_meta = inside_meta && !embedded;
    if let Some(default) = &node.default {
        let here = child(path, "default");
        if !inside_meta {
            let mut pruned = default.clone();
            let mut ignored = Vec::new();
            prune_value(
                &mut pruned,
                Some(node),
                embedded,
                &mut PrunePath::default(),
                &mut ignored,
            );
            if &pruned != default {
                errors.push(invalid_value(
                    &here,
                    default,
                    "must not have unknown fields",
                ));
            }
        }
        errors.extend(validate_value(node, default, Some(&here)));
    }
    if let Some(items) = &node.items {
        default_errors(items, &child(path, "items"), false, inside_meta, errors);
    }
    for (name, property) in &node.properties {
        let sub_inside_meta = inside_meta || (embedded && META_FIELDS.contains(&name.as_str()));
        let here = key(&child(path, "properties"), name);
        default_errors(property, &here, false, sub_inside_meta, errors);
    }
}

/// Where a schema node sits, for the keyword checks that depend on it.
#[derive(Clone, Default)]
struct SchemaContext {
    /// Why defaults are forbidden here, when they are.
    defaults_forbidden: Option<String>,
    inside_resource_meta: bool,
}

impl SchemaContext {
    fn forbid_defaults(&self, reason: String) -> Self {
        SchemaContext {
            defaults_forbidden: Some(reason),
            ..self.clone()
        }
    }
}

/// Upstream `ValidateCustomResourceDefinitionOpenAPISchema`, without its CEL part (which is
/// [`CelValidator::compile`]).
fn openapi_schema_errors(
    node: &Node,
    path: &str,
    context: &SchemaContext,
    is_root: bool,
    errors: &mut Vec<FieldError>,
) {
    keyword_errors(node, path, context, errors);
    if node.unique_items {
        errors.push(FieldError::forbidden(
            &child(path, "uniqueItems"),
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }
    if let Some(additional) = &node.additional_properties {
        let excludes = !matches!(additional, Additional::Allows(true));
        if !node.properties.is_empty() && excludes {
            errors.push(FieldError::forbidden(
                &child(path, "additionalProperties"),
                "additionalProperties and properties are mutual exclusive",
            ));
        }
        let sub = if context.inside_resource_meta {
            context
                .forbid_defaults("inside additionalProperties applying to object metadata".into())
        } else {
            context.clone()
        };
        if let Some(schema) = additional.schema() {
            openapi_schema_errors(
                schema,
                &child(path, "additionalProperties"),
                &sub,
                false,
                errors,
            );
        }
    }
    for (name, property) in &node.properties {
        let mut sub = context.clone();
        if (is_root || node.embedded_resource) && META_FIELDS.contains(&name.as_str()) {
            sub.inside_resource_meta = true;
            if is_root {
                sub = sub.forbid_defaults(format!("in top-level {name}"));
            }
        }
        let here = key(&child(path, "properties"), name);
        openapi_schema_errors(property, &here, &sub, false, errors);
    }
    if let Some(not) = &node.not {
        openapi_schema_errors(not, &child(path, "not"), context, false, errors);
    }
    let lists = [
        ("allOf", &node.all_of),
        ("oneOf", &node.one_of),
        ("anyOf", &node.any_of),
    ];
    for (keyword, branches) in lists {
        for (i, branch) in branches.iter().enumerate() {
            openapi_schema_errors(
                branch,
                &index(&child(path, keyword), i),
                context,
                false,
                errors,
            );
        }
    }
    if let Some(items) = &node.items {
        openapi_schema_errors(items, &child(path, "items"), context, false, errors);
    }
    if node.preserve_unknown_fields == Some(false) {
        errors.push(FieldError::invalid_literal(
            &child(path, "x-kubernetes-preserve-unknown-fields"),
            "false",
            "must be true or undefined",
        ));
    }
    extension_errors(node, path, errors);
}

/// Upstream `specStandardValidatorV3.validate`.
fn keyword_errors(node: &Node, path: &str, context: &SchemaContext, errors: &mut Vec<FieldError>) {
    if !node.type_.is_empty() && !OPENAPI_V3_TYPES.contains(&node.type_.as_str()) {
        errors.push(FieldError::not_supported(
            &child(path, "type"),
            node.type_.as_str(),
            &OPENAPI_V3_TYPES,
        ));
    }
    if node.default_written
        && let Some(reason) = &context.defaults_forbidden
    {
        errors.push(FieldError::forbidden(
            &child(path, "default"),
            &format!("must not be set {reason}"),
        ));
    }
    let unsupported = [
        (!node.id.is_empty(), "id", "id is not supported"),
        (
            node.has_additional_items,
            "additionalItems",
            "additionalItems is not supported",
        ),
        (
            node.has_pattern_properties,
            "patternProperties",
            "patternProperties is not supported",
        ),
        (
            node.has_definitions,
            "definitions",
            "definitions is not supported",
        ),
        (
            node.has_dependencies,
            "dependencies",
            "dependencies is not supported",
        ),
        (node.has_ref, "$ref", "$ref is not supported"),
        (
            node.type_ == "null",
            "type",
            "type cannot be set to null, use nullable as an alternative",
        ),
        (
            node.items_is_list,
            "items",
            "items must be a schema object and not an array",
        ),
        (
            context.inside_resource_meta && node.embedded_resource,
            "x-kubernetes-embedded-resource",
            "must not be used inside of resource meta",
        ),
    ];
    for (present, keyword, message) in unsupported {
        if present {
            errors.push(FieldError::forbidden(&child(path, keyword), message));
        }
    }
}

/// The `x-kubernetes-map-type`, `x-kubernetes-list-type` and `x-kubernetes-list-map-keys`
/// rules of upstream `ValidateCustomResourceDefinitionOpenAPISchema`.
fn extension_errors(node: &Node, path: &str, errors: &mut Vec<FieldError>) {
    if let Some(map_type) = &node.map_type {
        if node.type_ != "object" {
            errors.push(required_or_invalid_type(
                path,
                &node.type_,
                "must be object if x-kubernetes-map-type is specified",
            ));
        }
        if map_type != "atomic" && map_type != "granular" {
            errors.push(FieldError::not_supported(
                &child(path, "x-kubernetes-map-type"),
                map_type.as_str(),
                &["atomic", "granular"],
            ));
        }
    }
    if let Some(list_type) = &node.list_type {
        if node.type_ != "array" {
            errors.push(required_or_invalid_type(
                path,
                &node.type_,
                "must be array if x-kubernetes-list-type is specified",
            ));
        } else if list_type == "set"
            && let Some(items) = &node.items
        {
            let message = "must be atomic as item of a list with x-kubernetes-list-type=set";
            let items_path = child(path, "items");
            match items.type_.as_str() {
                "array" => {
                    if let Some(inner) = &items.list_type
                        && inner != "atomic"
                    {
                        errors.push(FieldError::invalid(
                            &child(&items_path, "x-kubernetes-list-type"),
                            inner.as_str(),
                            message,
                        ));
                    }
                }
                "object" if items.map_type.as_deref() != Some("atomic") => {
                    // Upstream reports the item's list type here, usually unset.
                    let reported = items.list_type.clone().unwrap_or_else(|| "null".into());
                    errors.push(FieldError::invalid(
                        &child(&items_path, "x-kubernetes-map-type"),
                        reported,
                        message,
                    ));
                }
                _ => {}
            }
        }
        if !["atomic", "set", "map"].contains(&list_type.as_str()) {
            errors.push(FieldError::not_supported(
                &child(path, "x-kubernetes-list-type"),
                list_type.as_str(),
                &["atomic", "set", "map"],
            ));
        }
    }
    if !node.list_map_keys.is_empty() {
        let message = "must be map if x-kubernetes-list-map-keys is non-empty";
        match &node.list_type {
            None => errors.push(FieldError::required(
                &child(path, "x-kubernetes-list-type"),
                message,
            )),
            Some(list_type) if list_type != "map" => errors.push(FieldError::invalid(
                &child(path, "x-kubernetes-list-type"),
                list_type.as_str(),
                message,
            )),
            Some(_) => {}
        }
    }
    if node.list_type.as_deref() == Some("map") {
        map_list_errors(node, path, errors);
    }
    map_list_key_rules(node, path, errors);
}

fn map_list_errors(node: &Node, path: &str, errors: &mut Vec<FieldError>) {
    let keys_path = child(path, "x-kubernetes-list-map-keys");
    if node.list_map_keys.is_empty() {
        errors.push(FieldError::required(
            &keys_path,
            "must not be empty if x-kubernetes-list-type is map",
        ));
    }
    let items_path = child(path, "items");
    if node.items.is_none() && !node.items_is_list {
        errors.push(FieldError::required(
            &items_path,
            "must have a schema if x-kubernetes-list-type is map",
        ));
    }
    if node.items_is_list {
        let items = node.raw.get("items").cloned().unwrap_or(Value::Null);
        errors.push(invalid_value(
            &items_path,
            &items,
            "must only have a single schema if x-kubernetes-list-type is map",
        ));
    }
    let Some(items) = &node.items else {
        return;
    };
    if items.type_ != "object" {
        errors.push(FieldError::invalid(
            &child(&items_path, "type"),
            items.type_.as_str(),
            "must be object if parent array's x-kubernetes-list-type is map",
        ));
        return;
    }
    let keys_rendered = go_string_slice(&node.list_map_keys);
    let mut seen = HashSet::new();
    for name in &node.list_map_keys {
        match items.properties.get(name) {
            Some(property) => {
                if property.type_ == "array" || property.type_ == "object" {
                    // Upstream reports the item type ("object") as the bad value.
                    errors.push(FieldError::invalid(
                        &child(&key(&child(&items_path, "properties"), name), "type"),
                        items.type_.as_str(),
                        "must be a scalar type if parent array's x-kubernetes-list-type is map",
                    ));
                }
            }
            None => errors.push(FieldError::invalid_literal(
                &keys_path,
                keys_rendered.clone(),
                "entries must all be names of item properties",
            )),
        }
        if !seen.insert(name.as_str()) {
            errors.push(FieldError::invalid_literal(
                &keys_path,
                keys_rendered.clone(),
                "must not contain duplicate entries",
            ));
        }
    }
}

/// Upstream `validateMapListKeysMapSet`.
fn map_list_key_rules(node: &Node, path: &str, errors: &mut Vec<FieldError>) {
    let (Some(items), Some(list_type)) = (&node.items, &node.list_type) else {
        return;
    };
    if list_type != "set" && list_type != "map" {
        return;
    }
    let items_path = child(path, "items");
    if items.nullable {
        errors.push(FieldError::forbidden(
            &child(&items_path, "nullable"),
            &format!("cannot be nullable when x-kubernetes-list-type is {list_type}"),
        ));
    }
    if list_type != "map" {
        return;
    }
    for name in &node.list_map_keys {
        let Some(property) = items.properties.get(name) else {
            continue;
        };
        let here = key(&child(&items_path, "properties"), name);
        if !items.required.contains(name) && !property.default_written {
            errors.push(FieldError::required(
                &child(&here, "default"),
                "this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property",
            ));
        }
        if property.nullable {
            errors.push(FieldError::forbidden(
                &child(&here, "nullable"),
                "this property is in x-kubernetes-list-map-keys, so it cannot be nullable",
            ));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Pruning
// ---------------------------------------------------------------------------------------------

/// The `ObjectMeta` fields upstream decodes; anything else in `metadata` is unknown.
const OBJECT_META_FIELDS: [&str; 15] = [
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];
const OWNER_REFERENCE_FIELDS: [&str; 6] = [
    "apiVersion",
    "kind",
    "name",
    "uid",
    "controller",
    "blockOwnerDeletion",
];
const MANAGED_FIELDS_ENTRY_FIELDS: [&str; 7] = [
    "manager",
    "operation",
    "apiVersion",
    "time",
    "fieldsType",
    "fieldsV1",
    "subresource",
];

/// The path of the value being pruned, printed as upstream's pruning prints it: keys joined
/// with `.`, indices as `[i]`, and `additionalProperties` keys like any other key.
#[derive(Default)]
struct PrunePath {
    text: String,
}

impl PrunePath {
    fn with_key<T>(&mut self, name: &str, f: impl FnOnce(&mut Self) -> T) -> T {
        let len = self.text.len();
        if !self.text.is_empty() {
            self.text.push('.');
        }
        self.text.push_str(name);
        let result = f(self);
        self.text.truncate(len);
        result
    }

    fn with_index<T>(&mut self, i: usize, f: impl FnOnce(&mut Self) -> T) -> T {
        let len = self.text.len();
        self.text.push_str(&format!("[{i}]"));
        let result = f(self);
        self.text.truncate(len);
        result
    }

    fn record(&mut self, name: &str, out: &mut Vec<String>) {
        self.with_key(name, |path| out.push(path.text.clone()));
    }
}

impl StructuralSchema {
    /// Removes fields the schema does not declare and returns their paths, as upstream's
    /// decoder does for a custom object:
    ///
    /// 1. `metadata` keeps only `ObjectMeta` fields (`metadata.foo` is reported);
    /// 2. everything else is pruned against the schema, except below
    ///    `x-kubernetes-preserve-unknown-fields`, and except `apiVersion`, `kind` and
    ///    `metadata` at the root and in `x-kubernetes-embedded-resource` objects (reported
    ///    sorted, like upstream);
    /// 3. the `metadata` of embedded resources keeps only `ObjectMeta` fields too
    ///    (`spec.template.metadata.foo`), and loses empty values as a typed round trip would.
    ///
    /// The paths are what `fieldValidation=Strict|Warn` report as `unknown field "…"`.
    pub fn prune(&self, object: &mut Value) -> Vec<String> {
        let mut unknown = Vec::new();
        if let Some(metadata) = object.get_mut("metadata") {
            let mut found = Vec::new();
            coerce_object_meta(metadata, "metadata", false, &mut found);
            found.sort();
            unknown.extend(found);
        }
        let mut pruned = Vec::new();
        prune_value(
            object,
            Some(&self.root),
            true,
            &mut PrunePath::default(),
            &mut pruned,
        );
        pruned.sort();
        unknown.extend(pruned);
        let mut coerced = Vec::new();
        coerce_embedded(object, &self.root, "", &mut coerced);
        coerced.sort();
        unknown.extend(coerced);
        unknown
    }
}

/// Upstream `pruning.prune`. `resource_root` treats `node` as an embedded resource (its
/// `apiVersion`, `kind` and `metadata` are left alone).
fn prune_value(
    value: &mut Value,
    node: Option<&Node>,
    resource_root: bool,
    path: &mut PrunePath,
    out: &mut Vec<String>,
) {
    if let Some(node) = node
        && node.preserves_unknown()
    {
        skip_prune(value, node, resource_root, path, out);
        return;
    }
    match value {
        Value::Object(map) => {
            let Some(node) = node else {
                for name in map.keys() {
                    path.record(name, out);
                }
                map.clear();
                return;
            };
            let embedded = resource_root || node.embedded_resource;
            let names: Vec<String> = map.keys().cloned().collect();
            for name in names {
                if embedded && META_FIELDS.contains(&name.as_str()) {
                    continue;
                }
                let declared = node.properties.get(&name);
                if declared.is_some() || node.additional_properties.is_some() {
                    let schema = declared.or_else(|| {
                        node.additional_properties
                            .as_ref()
                            .and_then(Additional::schema)
                    });
                    if let Some(field) = map.get_mut(&name) {
                        path.with_key(&name, |path| prune_value(field, schema, false, path, out));
                    }
                } else {
                    // A root that is not a resource (a default value) still keeps quiet about
                    // dropping `apiVersion`, `kind` and `metadata` at its top level.
                    if !META_FIELDS.contains(&name.as_str()) || !path.text.is_empty() {
                        path.record(&name, out);
                    }
                    map.remove(&name);
                }
            }
        }
        Value::Array(items) => {
            let items_schema = node.and_then(|n| n.items.as_deref());
            for (i, item) in items.iter_mut().enumerate() {
                path.with_index(i, |path| prune_value(item, items_schema, false, path, out));
            }
        }
        _ => {}
    }
}

/// Upstream `pruning.skipPrune`: below `x-kubernetes-preserve-unknown-fields` unknown fields
/// stay, but declared ones are still pruned inside.
fn skip_prune(
    value: &mut Value,
    node: &Node,
    resource_root: bool,
    path: &mut PrunePath,
    out: &mut Vec<String>,
) {
    match value {
        Value::Object(map) => {
            let embedded = resource_root || node.embedded_resource;
            for (name, field) in map.iter_mut() {
                if embedded && META_FIELDS.contains(&name.as_str()) {
                    continue;
                }
                let declared = node.properties.get(name);
                if declared.is_some() || node.additional_properties.is_some() {
                    let schema = declared.or_else(|| {
                        node.additional_properties
                            .as_ref()
                            .and_then(Additional::schema)
                    });
                    path.with_key(name, |path| prune_value(field, schema, false, path, out));
                }
            }
        }
        Value::Array(items) => {
            if let Some(items_schema) = node.items.as_deref() {
                for (i, item) in items.iter_mut().enumerate() {
                    path.with_index(i, |path| skip_prune(item, items_schema, false, path, out));
                }
            }
        }
        _ => {}
    }
}

/// Keeps only `ObjectMeta` fields in a `metadata` value, reporting the others as
/// `<prefix>.<field>` (nested ones as `<prefix>.ownerReferences[0].<field>`). With
/// `normalize`, empty values disappear as they do when upstream round-trips an embedded
/// object's metadata through the typed `ObjectMeta`.
fn coerce_object_meta(metadata: &mut Value, prefix: &str, normalize: bool, out: &mut Vec<String>) {
    let Value::Object(map) = metadata else {
        return;
    };
    map.retain(|name, _| {
        let known = OBJECT_META_FIELDS.contains(&name.as_str());
        if !known {
            out.push(format!("{prefix}.{name}"));
        }
        known
    });
    let nested = [
        ("ownerReferences", &OWNER_REFERENCE_FIELDS[..]),
        ("managedFields", &MANAGED_FIELDS_ENTRY_FIELDS[..]),
    ];
    for (list_name, fields) in nested {
        if let Some(Value::Array(entries)) = map.get_mut(list_name) {
            for (i, entry) in entries.iter_mut().enumerate() {
                if let Value::Object(entry) = entry {
                    entry.retain(|name, _| {
                        let known = fields.contains(&name.as_str());
                        if !known {
                            out.push(format!("{prefix}.{list_name}[{i}].{name}"));
                        }
                        known
                    });
                }
            }
        }
    }
    if normalize {
        map.retain(|name, value| match name.as_str() {
            "deletionGracePeriodSeconds" => !value.is_null(),
            "generation" => value.as_i64() != Some(0) && !value.is_null(),
            _ => !is_zero(value),
        });
    }
}

/// Upstream `objectmeta.Coerce` with unknown-field tracking: the metadata of every embedded
/// resource the schema reaches. Paths are printed as `field.Path` prints them.
fn coerce_embedded(value: &mut Value, node: &Node, path: &str, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if node.embedded_resource
                && let Some(metadata) = map.get_mut("metadata")
            {
                coerce_object_meta(metadata, &child(path, "metadata"), true, out);
            }
            for (name, field) in map.iter_mut() {
                if let Some(property) = node.properties.get(name) {
                    coerce_embedded(field, property, &child(path, name), out);
                } else if let Some(schema) = node
                    .additional_properties
                    .as_ref()
                    .and_then(Additional::schema)
                {
                    coerce_embedded(field, schema, &key(path, name), out);
                }
            }
        }
        Value::Array(items) => {
            if let Some(items_schema) = &node.items {
                for (i, item) in items.iter_mut().enumerate() {
                    coerce_embedded(item, items_schema, &index(path, i), out);
                }
            }
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------------
// Defaulting
// ---------------------------------------------------------------------------------------------

impl StructuralSchema {
    /// Drops `null`s the schema does not allow (unless a default will replace them), then
    /// applies `default:` values: missing fields, and `null`s of non-nullable fields, get a
    /// copy of their default, and defaults are themselves defaulted inside (so a defaulted
    /// `spec: {}` gets its fields' defaults too). Upstream `PruneNonNullableNullsWithoutDefaults`
    /// followed by `Default`.
    pub fn apply_defaults(&self, object: &mut Value) {
        prune_disallowed_nulls(object, Some(&self.root));
        apply_node_defaults(object, &self.root);
    }

    /// The first half of [`StructuralSchema::apply_defaults`] alone: `null`s the schema does
    /// not allow are dropped unless a default would replace them (upstream
    /// `PruneNonNullableNullsWithoutDefaults`, which a converted object gets).
    pub fn prune_nulls_without_defaults(&self, object: &mut Value) {
        prune_disallowed_nulls(object, Some(&self.root));
    }
}

fn prune_disallowed_nulls(value: &mut Value, node: Option<&Node>) {
    match value {
        Value::Object(map) => {
            map.retain(|name, field| {
                let schema = node.and_then(|n| n.field(name));
                !(field.is_null() && schema.is_some_and(|s| !s.nullable && s.default.is_none()))
            });
            for (name, field) in map.iter_mut() {
                prune_disallowed_nulls(field, node.and_then(|n| n.field(name)));
            }
        }
        Value::Array(items) => {
            let items_schema = node.and_then(|n| n.items.as_deref());
            for item in items {
                prune_disallowed_nulls(item, items_schema);
            }
        }
        _ => {}
    }
}

fn apply_node_defaults(value: &mut Value, node: &Node) {
    match value {
        Value::Object(map) => {
            for (name, property) in &node.properties {
                let Some(default) = &property.default else {
                    continue;
                };
                let replace = match map.get(name) {
                    None => true,
                    Some(current) => current.is_null() && !property.nullable,
                };
                if replace {
                    map.insert(name.clone(), default.clone());
                }
            }
            let additional = node
                .additional_properties
                .as_ref()
                .and_then(Additional::schema);
            for (name, field) in map.iter_mut() {
                if let Some(property) = node.properties.get(name) {
                    apply_node_defaults(field, property);
                } else if let Some(schema) = additional {
                    if field.is_null() && !schema.nullable {
                        *field = schema.default.clone().unwrap_or(Value::Null);
                    }
                    apply_node_defaults(field, schema);
                }
            }
        }
        Value::Array(items) => {
            if let Some(items_schema) = &node.items {
                for item in items {
                    if item.is_null() && !items_schema.nullable {
                        *item = items_schema.default.clone().unwrap_or(Value::Null);
                    }
                    apply_node_defaults(item, items_schema);
                }
            }
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------------
// Value validation, as kube-openapi's SchemaValidator does it
// ---------------------------------------------------------------------------------------------

impl StructuralSchema {
    /// Validates a custom object against the schema, as upstream's create validation does:
    ///
    /// - kube-openapi value validation: `type` (with `nullable`, `x-kubernetes-int-or-string`,
    ///   integers vs numbers), `format`, `enum`, `required`, `minimum`/`maximum` (and
    ///   exclusive), `multipleOf`, `minLength`/`maxLength`, `pattern`, `minItems`/`maxItems`,
    ///   `uniqueItems`, `minProperties`/`maxProperties`, `items`, `additionalProperties`,
    ///   `allOf`/`anyOf`/`oneOf`/`not`;
    /// - the `apiVersion`, `kind` and `metadata` of embedded resources;
    /// - uniqueness in `x-kubernetes-list-type: set` and `map` lists.
    ///
    /// Fields and messages are upstream's, e.g.
    /// `spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string"`.
    /// Errors that concern the whole object are reported at the field `<nil>`, as upstream
    /// prints its nil path.
    pub fn validate(&self, object: &Value) -> Vec<FieldError> {
        let mut errors = validate_value(&self.root, object, None);
        embedded_resource_errors(object, &self.root, "", &mut errors);
        if let Value::Object(map) = object {
            list_errors_in_object(map, &self.root, "", &mut errors);
        }
        errors
    }

    /// Validates only `status` against `properties.status`, as the `/status` subresource
    /// does upstream: fields are prefixed with `status.`, while messages name the path below
    /// it (`status.replicas: Invalid value: "string": replicas in body must be of type integer: "string"`).
    pub fn validate_status(&self, status: &Value) -> Vec<FieldError> {
        let Some(schema) = self.root.properties.get("status") else {
            return Vec::new();
        };
        let mut errors = validate_value(schema, status, Some("status"));
        embedded_resource_errors(status, schema, "status", &mut errors);
        if let Value::Array(items) = status {
            list_errors_in_array(items, schema, "status", &mut errors);
        } else if let Value::Object(map) = status {
            list_errors_in_object(map, schema, "status", &mut errors);
        }
        errors
    }
}

/// Runs kube-openapi validation of `value` against `node` and converts the result as
/// upstream's `kubeOpenAPIResultToFieldErrors` does, below the field path `prefix`.
fn validate_value(node: &Node, value: &Value, prefix: Option<&str>) -> Vec<FieldError> {
    check(node, value, "")
        .failures
        .into_iter()
        .map(|failure| failure.into_field_error(prefix))
        .collect()
}

/// One failed check: `name` is kube-openapi's path of the value (`spec.replicas`,
/// `spec.items[2]`, `.key` for an additional property at the root) and `message` its
/// `Error()` text.
#[derive(Debug)]
struct Failure {
    name: String,
    message: String,
    kind: FailureKind,
}

#[derive(Debug)]
enum FailureKind {
    Required,
    Enum {
        value: Value,
        allowed: Vec<Value>,
    },
    TooLong {
        max: i64,
    },
    TooMany {
        actual: i64,
        max: i64,
    },
    /// A type or format mismatch; `value` is the type name or string upstream records.
    InvalidType {
        value: String,
    },
    /// Any other check; `None` prints as `""`.
    Invalid {
        value: Option<Value>,
    },
    /// `anyOf`/`oneOf`/`allOf`/`not` summaries, which are not per-field errors upstream.
    Composite,
}

impl Failure {
    fn new(name: &str, message: String, kind: FailureKind) -> Self {
        Failure {
            name: name.to_string(),
            message,
            kind,
        }
    }

    fn into_field_error(self, prefix: Option<&str>) -> FieldError {
        let whole = prefix.unwrap_or("<nil>").to_string();
        let trimmed = self.name.strip_prefix('.').unwrap_or(&self.name);
        let field = if self.name.is_empty() || self.name == "." {
            whole.clone()
        } else {
            match prefix {
                Some(prefix) => child(prefix, trimmed),
                None => trimmed.to_string(),
            }
        };
        match self.kind {
            FailureKind::Required => FieldError::required(&field, ""),
            FailureKind::Enum { value, allowed } => {
                let allowed: Vec<String> = allowed
                    .iter()
                    .map(|v| match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    })
                    .collect();
                let allowed: Vec<&str> = allowed.iter().map(String::as_str).collect();
                let (rendered, literal) = render_bad_value(&value);
                FieldError {
                    literal,
                    ..FieldError::not_supported(&field, rendered, &allowed)
                }
            }
            FailureKind::TooLong { max } => {
                FieldError::too_long(&field, "", usize::try_from(max).unwrap_or_default())
            }
            FailureKind::TooMany { actual, max } => FieldError::too_many(
                &field,
                usize::try_from(actual).ok(),
                usize::try_from(max).unwrap_or_default(),
            ),
            FailureKind::InvalidType { value } => {
                FieldError::type_invalid(&field, value, &self.message)
            }
            FailureKind::Invalid { value: None } => FieldError::invalid(&field, "", &self.message),
            FailureKind::Invalid { value: Some(value) } => {
                invalid_value(&field, &value, &self.message)
            }
            FailureKind::Composite => FieldError::invalid(&whole, "", &self.message),
        }
    }
}

/// A validation result: failures (deduplicated by message, as upstream's `Result` does) and
/// upstream's `MatchCount`, which picks the `anyOf`/`oneOf` branch whose errors are shown.
#[derive(Debug, Default)]
struct Outcome {
    failures: Vec<Failure>,
    matches: usize,
}

impl Outcome {
    fn failed(failure: Failure) -> Self {
        Outcome {
            failures: vec![failure],
            matches: 0,
        }
    }

    fn add(&mut self, failure: Failure) {
        if !self.failures.iter().any(|f| f.message == failure.message) {
            self.failures.push(failure);
        }
    }

    fn merge(&mut self, other: Outcome) {
        for failure in other.failures {
            self.add(failure);
        }
        self.matches += other.matches;
    }

    fn is_valid(&self) -> bool {
        self.failures.is_empty()
    }
}

/// The JSON value kinds upstream's unstructured decoding produces (`int64` for integral
/// literals, `float64` for the rest).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Null,
    Bool,
    String,
    Int,
    Float,
    Array,
    Object,
}

fn kind_of(value: &Value) -> Kind {
    match value {
        Value::Null => Kind::Null,
        Value::Bool(_) => Kind::Bool,
        Value::String(_) => Kind::String,
        Value::Number(n) if n.as_i64().is_some() => Kind::Int,
        Value::Number(_) => Kind::Float,
        Value::Array(_) => Kind::Array,
        Value::Object(_) => Kind::Object,
    }
}

fn as_f64(value: &Value) -> f64 {
    value.as_f64().unwrap_or_default()
}

/// kube-openapi's path of a property: the bare name at the root.
fn property_path(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

/// `SchemaValidator.Validate`: the type, composition, string, format, number, array, enum
/// and object validators in upstream's order, each only for the values it applies to.
fn check(node: &Node, value: &Value, path: &str) -> Outcome {
    let mut out = Outcome::default();
    let kind = kind_of(value);
    if kind == Kind::Null {
        out.merge(check_type(node, value, kind, path));
        out.merge(check_enum(node, value, path));
        return out;
    }
    if !node.types.is_empty() || !node.effective_format.is_empty() {
        out.merge(check_type(node, value, kind, path));
        out.matches += 1;
    }
    out.merge(check_composition(node, value, path));
    out.matches += 1;
    if let Value::String(s) = value {
        out.merge(check_string(node, s, path));
        out.matches += 1;
        if is_registered_format(&node.effective_format) {
            out.merge(check_format(node, s, path));
            out.matches += 1;
        }
    }
    if matches!(kind, Kind::Int | Kind::Float) {
        out.merge(check_number(node, value, kind, path));
        out.matches += 1;
    }
    if let Value::Array(items) = value {
        out.merge(check_array(node, items, path));
        out.matches += 1;
    }
    out.merge(check_enum(node, value, path));
    out.matches += 1;
    if let Value::Object(map) = value {
        out.merge(check_object(node, map, path));
        out.matches += 1;
    }
    out.matches += 1;
    out
}

fn type_failure(path: &str, type_name: &str, found: &str) -> Failure {
    Failure::new(
        path,
        format!(
            "{path} in body must be of type {type_name}: {}",
            go_quote(found)
        ),
        FailureKind::InvalidType {
            value: found.to_string(),
        },
    )
}

/// Upstream `typeValidator`.
fn check_type(node: &Node, value: &Value, kind: Kind, path: &str) -> Outcome {
    let types = &node.types;
    let format = node.effective_format.as_str();
    let ok = Outcome {
        failures: Vec::new(),
        matches: 1,
    };
    let (found_type, found_format) = match kind {
        Kind::Null => {
            if !types.is_empty() && !node.nullable {
                return Outcome::failed(type_failure(path, &types.join(","), "null"));
            }
            return ok;
        }
        Kind::Bool => ("boolean", ""),
        Kind::String => ("string", ""),
        Kind::Int => ("integer", "int64"),
        Kind::Float => ("number", "float64"),
        Kind::Array => ("array", ""),
        Kind::Object => ("object", ""),
    };
    let float_as_int =
        kind == Kind::Float && is_json_integer(as_f64(value)) && types.contains(&"integer");
    let int_as_float = kind == Kind::Int && types.contains(&"number");
    let accepted = types.contains(&found_type) || float_as_int || int_as_float;
    let textual = matches!(kind, Kind::String | Kind::Array);
    if !(textual || format.is_empty() || accepted || found_format == format) {
        return Outcome::failed(type_failure(path, format, found_format));
    }
    let numeric = types.contains(&"number") || types.contains(&"integer");
    if !numeric && !format.is_empty() && textual {
        return ok;
    }
    if !accepted {
        return Outcome::failed(type_failure(path, &types.join(","), found_type));
    }
    ok
}

/// Upstream `schemaPropsValidator`: `anyOf`, `oneOf`, `allOf`, `not`.
fn check_composition(node: &Node, value: &Value, path: &str) -> Outcome {
    let mut main = Outcome::default();
    if !node.any_of.is_empty() {
        let mut best: Option<Outcome> = None;
        let mut first_success: Option<Outcome> = None;
        for branch in &node.any_of {
            let result = check(branch, value, path);
            if result.is_valid() {
                best = None;
                first_success = Some(result);
                break;
            }
            if best.as_ref().is_none_or(|b| result.matches > b.matches) {
                best = Some(result);
            }
        }
        if first_success.is_none() {
            main.add(Failure::new(
                path,
                format!(
                    "{} must validate at least one schema (anyOf)",
                    go_quote(path)
                ),
                FailureKind::Composite,
            ));
        }
        if let Some(result) = best.or(first_success) {
            main.merge(result);
        }
    }
    if !node.one_of.is_empty() {
        let mut best: Option<Outcome> = None;
        let mut first_success: Option<Outcome> = None;
        let mut validated = 0;
        for branch in &node.one_of {
            let result = check(branch, value, path);
            if result.is_valid() {
                validated += 1;
                best = None;
                if first_success.is_none() {
                    first_success = Some(result);
                }
                continue;
            }
            if validated == 0 && best.as_ref().is_none_or(|b| result.matches > b.matches) {
                best = Some(result);
            }
        }
        if validated != 1 {
            let detail = if validated == 0 {
                "Found none valid".to_string()
            } else {
                format!("Found {validated} valid alternatives")
            };
            main.add(Failure::new(
                path,
                format!(
                    "{} must validate one and only one schema (oneOf). {detail}",
                    go_quote(path)
                ),
                FailureKind::Composite,
            ));
            if let Some(result) = best {
                main.merge(result);
            }
        } else if let Some(result) = first_success {
            main.merge(result);
        }
    }
    if !node.all_of.is_empty() {
        let mut validated = 0;
        for branch in &node.all_of {
            let result = check(branch, value, path);
            if result.is_valid() {
                validated += 1;
            }
            main.merge(result);
        }
        if validated != node.all_of.len() {
            let detail = if validated == 0 {
                ". None validated"
            } else {
                ""
            };
            main.add(Failure::new(
                path,
                format!(
                    "{} must validate all the schemas (allOf){detail}",
                    go_quote(path)
                ),
                FailureKind::Composite,
            ));
        }
    }
    if let Some(not) = &node.not
        && check(not, value, path).is_valid()
    {
        main.add(Failure::new(
            path,
            format!("{} must not validate the schema (not)", go_quote(path)),
            FailureKind::Composite,
        ));
    }
    main.matches += 1;
    main
}

/// Upstream `stringValidator`: only the first failing check is reported.
fn check_string(node: &Node, s: &str, path: &str) -> Outcome {
    let length = i64::try_from(s.chars().count()).unwrap_or(i64::MAX);
    if let Some(max) = node.max_length
        && length > max
    {
        return Outcome::failed(Failure::new(
            path,
            format!("{path} in body should be at most {max} chars long"),
            FailureKind::TooLong { max },
        ));
    }
    if let Some(min) = node.min_length
        && length < min
    {
        return Outcome::failed(Failure::new(
            path,
            format!("{path} in body should be at least {min} chars long"),
            FailureKind::Invalid {
                value: Some(Value::from(s)),
            },
        ));
    }
    if let Some(pattern) = &node.pattern {
        let shown = match &pattern.compiled {
            Ok(regex) if regex.is_match(s) => return Outcome::default(),
            Ok(_) => pattern.source.clone(),
            Err(reason) => format!("{}, but pattern is invalid: {reason}", pattern.source),
        };
        return Outcome::failed(Failure::new(
            path,
            format!("{path} in body should match '{shown}'"),
            FailureKind::Invalid {
                value: Some(Value::from(s)),
            },
        ));
    }
    Outcome::default()
}

/// Upstream `formatValidator`.
fn check_format(node: &Node, s: &str, path: &str) -> Outcome {
    if format_matches(&node.effective_format, s) {
        return Outcome::default();
    }
    Outcome::failed(Failure::new(
        path,
        format!(
            "{path} in body must be of type {}: {}",
            node.effective_format,
            go_quote(s)
        ),
        FailureKind::InvalidType {
            value: s.to_string(),
        },
    ))
}

/// Upstream `numberValidator` (1.33: no range check for `int32`/`float` formats). Integers
/// compare against bounds truncated to integers, as kube-openapi does.
fn check_number(node: &Node, value: &Value, kind: Kind, path: &str) -> Outcome {
    let mut out = Outcome::default();
    let integer = if kind == Kind::Int {
        value.as_i64()
    } else {
        None
    };
    let data = as_f64(value);
    if let Some(factor) = node.multiple_of {
        let failure = match integer {
            Some(i) => {
                // Go's float-to-int conversion truncates toward zero.
                let factor = factor as i64;
                if factor <= 0 {
                    Some(must_be_positive(
                        path,
                        Value::from(factor),
                        factor.to_string(),
                    ))
                } else if i % factor != 0 {
                    Some(Failure::new(
                        path,
                        format!("{path} in body should be a multiple of {factor}"),
                        FailureKind::Invalid {
                            value: Some(value.clone()),
                        },
                    ))
                } else {
                    None
                }
            }
            None => {
                if factor <= 0.0 {
                    Some(must_be_positive(
                        path,
                        Value::from(factor),
                        go_float(factor),
                    ))
                } else {
                    let quotient = if factor < 1.0 {
                        1.0 / factor * data
                    } else {
                        data / factor
                    };
                    (!is_json_integer(quotient)).then(|| {
                        Failure::new(
                            path,
                            format!(
                                "{path} in body should be a multiple of {}",
                                go_float(factor)
                            ),
                            FailureKind::Invalid {
                                value: Some(value.clone()),
                            },
                        )
                    })
                }
            }
        };
        if let Some(failure) = failure {
            out.add(failure);
        }
    }
    let bound = |limit: f64, exclusive: bool, is_max: bool| -> Option<Failure> {
        let (violated, shown) = match integer {
            Some(i) => {
                let limit = limit as i64;
                let violated = match (is_max, exclusive) {
                    (true, false) => i > limit,
                    (true, true) => i >= limit,
                    (false, false) => i < limit,
                    (false, true) => i <= limit,
                };
                (violated, limit.to_string())
            }
            None => {
                let violated = match (is_max, exclusive) {
                    (true, false) => data > limit,
                    (true, true) => data >= limit,
                    (false, false) => data < limit,
                    (false, true) => data <= limit,
                };
                (violated, go_float(limit))
            }
        };
        let relation = match (is_max, exclusive) {
            (true, false) => "less than or equal to",
            (true, true) => "less than",
            (false, false) => "greater than or equal to",
            (false, true) => "greater than",
        };
        violated.then(|| {
            Failure::new(
                path,
                format!("{path} in body should be {relation} {shown}"),
                FailureKind::Invalid {
                    value: Some(value.clone()),
                },
            )
        })
    };
    if let Some(minimum) = node.minimum
        && let Some(failure) = bound(minimum, node.exclusive_minimum, false)
    {
        out.add(failure);
    }
    if let Some(maximum) = node.maximum
        && let Some(failure) = bound(maximum, node.exclusive_maximum, true)
    {
        out.add(failure);
    }
    out.matches += 1;
    out
}

fn must_be_positive(path: &str, factor: Value, shown: String) -> Failure {
    Failure::new(
        path,
        format!("factor MultipleOf declared for {path} must be positive: {shown}"),
        FailureKind::Invalid {
            value: Some(factor),
        },
    )
}

/// Upstream `schemaSliceValidator`.
fn check_array(node: &Node, items: &[Value], path: &str) -> Outcome {
    let mut out = Outcome::default();
    if let Some(items_schema) = &node.items {
        for (i, item) in items.iter().enumerate() {
            out.merge(check(items_schema, item, &index(path, i)));
        }
    }
    let size = i64::try_from(items.len()).unwrap_or(i64::MAX);
    if let Some(min) = node.min_items
        && size < min
    {
        out.add(Failure::new(
            path,
            format!("{path} in body should have at least {min} items"),
            FailureKind::Invalid {
                value: Some(Value::from(size)),
            },
        ));
    }
    if let Some(max) = node.max_items
        && size > max
    {
        out.add(Failure::new(
            path,
            format!("{path} in body should have at most {max} items"),
            FailureKind::TooMany { actual: size, max },
        ));
    }
    if node.unique_items
        && items
            .iter()
            .enumerate()
            .any(|(i, item)| items[..i].contains(item))
    {
        out.add(Failure::new(
            path,
            format!("{path} in body shouldn't contain duplicates"),
            FailureKind::Invalid { value: None },
        ));
    }
    out.matches += 1;
    out
}

/// Upstream `basicCommonValidator`: `enum`.
fn check_enum(node: &Node, value: &Value, path: &str) -> Outcome {
    let Some(allowed) = &node.enum_values else {
        return Outcome::default();
    };
    if allowed.is_empty()
        || allowed
            .iter()
            .any(|candidate| enum_matches(value, candidate))
    {
        return Outcome::default();
    }
    let listed: Vec<String> = allowed.iter().map(Value::to_string).collect();
    Outcome::failed(Failure::new(
        path,
        format!("{path} in body should be one of [{}]", listed.join(" ")),
        FailureKind::Enum {
            value: value.clone(),
            allowed: allowed.clone(),
        },
    ))
}

/// Go's `reflect` comparison upstream uses for `enum`: the value is converted to the enum
/// entry's type when Go allows it (an `int64` converts to a `float64`, a `float64` is
/// truncated to an `int64`, an `int64` becomes a one-rune string), then compared deeply.
fn enum_matches(value: &Value, candidate: &Value) -> bool {
    match (kind_of(candidate), kind_of(value)) {
        (Kind::Null, _) | (_, Kind::Null) => false,
        (Kind::String, Kind::String) => candidate == value,
        (Kind::String, Kind::Int) => {
            let rune = value
                .as_i64()
                .and_then(|i| u32::try_from(i).ok())
                .and_then(char::from_u32)
                .unwrap_or('\u{FFFD}');
            candidate.as_str() == Some(rune.to_string().as_str())
        }
        (Kind::Int, Kind::Int) => candidate.as_i64() == value.as_i64(),
        (Kind::Int, Kind::Float) => candidate.as_i64() == Some(as_f64(value) as i64),
        (Kind::Float, Kind::Int | Kind::Float) => as_f64(candidate) == as_f64(value),
        (Kind::Bool, Kind::Bool) | (Kind::Array, Kind::Array) | (Kind::Object, Kind::Object) => {
            candidate == value
        }
        _ => false,
    }
}

/// Upstream `objectValidator`.
fn check_object(node: &Node, map: &Map<String, Value>, path: &str) -> Outcome {
    let mut out = Outcome::default();
    let count = i64::try_from(map.len()).unwrap_or(i64::MAX);
    if let Some(min) = node.min_properties
        && count < min
    {
        out.add(Failure::new(
            path,
            format!("{path} in body should have at least {min} properties"),
            FailureKind::Invalid {
                value: Some(Value::from(count)),
            },
        ));
    }
    if let Some(max) = node.max_properties
        && count > max
    {
        out.add(Failure::new(
            path,
            format!("{path} in body should have at most {max} properties"),
            FailureKind::TooMany { actual: count, max },
        ));
    }
    match &node.additional_properties {
        Some(Additional::Allows(false)) => {
            for name in map
                .keys()
                .filter(|name| !node.properties.contains_key(*name))
            {
                out.add(Failure::new(
                    path,
                    format!("{path}.{name} in body is a forbidden property"),
                    FailureKind::Invalid {
                        value: Some(Value::from(name.as_str())),
                    },
                ));
            }
        }
        Some(Additional::Schema(schema)) => {
            for (name, field) in map {
                if !node.properties.contains_key(name) {
                    out.merge(check(schema, field, &format!("{path}.{name}")));
                }
            }
        }
        _ => {}
    }
    for (name, property) in &node.properties {
        if let Some(field) = map.get(name) {
            out.merge(check(property, field, &property_path(path, name)));
        }
    }
    for name in &node.required {
        if !map.contains_key(name) {
            let here = format!("{path}.{name}");
            out.add(Failure::new(
                &here,
                format!("{here} in body is required"),
                FailureKind::Required,
            ));
        }
    }
    out
}

/// Go's `swag.IsFloat64AJSONInteger`: integral within JSON's safe range, up to a relative
/// error of 1e-9.
fn is_json_integer(f: f64) -> bool {
    const MAX_SAFE: f64 = 9_007_199_254_740_991.0;
    if !f.is_finite() || !(-MAX_SAFE..=MAX_SAFE).contains(&f) {
        return false;
    }
    let truncated = f.trunc();
    if f == truncated {
        return true;
    }
    let diff = (f - truncated).abs();
    if truncated == 0.0 {
        return false;
    }
    diff / (f.abs() + truncated.abs()) < 1e-9
}

// ---------------------------------------------------------------------------------------------
// Embedded resources and list types
// ---------------------------------------------------------------------------------------------

/// Upstream `objectmeta.Validate` (not at the root): every `x-kubernetes-embedded-resource`
/// object needs a valid `apiVersion`, `kind` and `metadata`.
fn embedded_resource_errors(value: &Value, node: &Node, path: &str, errors: &mut Vec<FieldError>) {
    match value {
        Value::Object(map) => {
            if node.embedded_resource {
                errors.extend(embedded_resource_checks(map, path));
            }
            for (name, field) in map {
                if let Some(property) = node.properties.get(name) {
                    embedded_resource_errors(field, property, &child(path, name), errors);
                } else if let Some(schema) = node
                    .additional_properties
                    .as_ref()
                    .and_then(Additional::schema)
                {
                    embedded_resource_errors(field, schema, &key(path, name), errors);
                }
            }
        }
        Value::Array(items) => {
            if let Some(items_schema) = &node.items {
                for (i, item) in items.iter().enumerate() {
                    embedded_resource_errors(item, items_schema, &index(path, i), errors);
                }
            }
        }
        _ => {}
    }
}

fn embedded_resource_checks(map: &Map<String, Value>, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for name in ["apiVersion", "kind"] {
        if !map.contains_key(name) {
            errors.push(FieldError::required(
                &child(path, name),
                "must not be empty",
            ));
        }
    }
    for (name, value) in map {
        let here = child(path, name);
        match (name.as_str(), value) {
            ("apiVersion" | "kind", Value::String(s)) if s.is_empty() => {
                errors.push(FieldError::invalid(&here, "", "must not be empty"));
            }
            ("apiVersion", Value::String(api_version)) if api_version.matches('/').count() > 1 => {
                errors.push(FieldError::invalid(
                    &here,
                    api_version.as_str(),
                    &format!("unexpected GroupVersion string: {api_version}"),
                ));
            }
            ("apiVersion", Value::String(_)) => {}
            ("kind", Value::String(kind)) => {
                let problems = validation::is_dns1035_label(&kind.to_lowercase());
                if !problems.is_empty() {
                    errors.push(FieldError::invalid(
                        &here,
                        kind.as_str(),
                        &format!(
                            "may have mixed case, but should otherwise match: {}",
                            problems.join(",")
                        ),
                    ));
                }
            }
            ("apiVersion" | "kind", other) => {
                errors.push(invalid_value(&here, other, "must be a string"));
            }
            ("metadata", metadata) => errors.extend(embedded_metadata_errors(metadata, &here)),
            _ => {}
        }
    }
    errors
}

/// The `ObjectMeta` checks upstream runs on embedded metadata: names are only checked as path
/// segments, a namespace must be a DNS label, labels, annotations and finalizers as usual.
fn embedded_metadata_errors(metadata: &Value, path: &str) -> Vec<FieldError> {
    let map = match metadata {
        Value::Null => return Vec::new(),
        Value::Object(map) => map,
        other => {
            return vec![invalid_value(
                path,
                other,
                &format!(
                    "json: cannot unmarshal {} into Go value of type v1.ObjectMeta",
                    crate::object::json_kind(other)
                ),
            )];
        }
    };
    let mut errors = Vec::new();
    let text = |name: &str| map.get(name).and_then(Value::as_str).unwrap_or_default();
    let generate_name = text("generateName");
    if !generate_name.is_empty() {
        for message in validation::is_valid_path_segment_prefix(generate_name) {
            errors.push(FieldError::invalid(
                &child(path, "generateName"),
                generate_name,
                &message,
            ));
        }
    }
    let name = match text("name") {
        "" => "fakename",
        name => name,
    };
    for message in validation::is_valid_path_segment_name(name) {
        errors.push(FieldError::invalid(&child(path, "name"), name, &message));
    }
    let namespace = text("namespace");
    if !namespace.is_empty() {
        for message in validation::is_dns1123_label(namespace) {
            errors.push(FieldError::invalid(
                &child(path, "namespace"),
                namespace,
                &message,
            ));
        }
    }
    if let Some(generation) = map.get("generation").and_then(Value::as_i64)
        && generation < 0
    {
        errors.push(FieldError::invalid_literal(
            &child(path, "generation"),
            generation.to_string(),
            "must be greater than or equal to 0",
        ));
    }
    let rerooted = |found: Vec<FieldError>| {
        found.into_iter().map(|mut error| {
            if let Some(rest) = error.field.strip_prefix("metadata") {
                error.field = format!("{path}{rest}");
            }
            error
        })
    };
    if let Some(Value::Object(labels)) = map.get("labels") {
        errors.extend(rerooted(validation::validate_labels(labels)));
    }
    if let Some(Value::Object(annotations)) = map.get("annotations") {
        errors.extend(rerooted(validation::validate_annotations(annotations)));
    }
    if let Some(Value::Array(finalizers)) = map.get("finalizers") {
        let names: Vec<&str> = finalizers.iter().filter_map(Value::as_str).collect();
        errors.extend(rerooted(validation::validate_finalizers(&names)));
    }
    errors
}

/// Upstream `listtype.ValidateListSetsAndMaps` over the fields of an object.
fn list_errors_in_object(
    map: &Map<String, Value>,
    node: &Node,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    if let Some(schema) = node
        .additional_properties
        .as_ref()
        .and_then(Additional::schema)
    {
        for (name, field) in map {
            list_errors_in_value(field, schema, &key(path, name), errors);
        }
    }
    for (name, field) in map {
        if let Some(property) = node.properties.get(name) {
            list_errors_in_value(field, property, &child(path, name), errors);
        }
    }
}

fn list_errors_in_value(value: &Value, node: &Node, path: &str, errors: &mut Vec<FieldError>) {
    match value {
        Value::Array(items) => list_errors_in_array(items, node, path, errors),
        Value::Object(map) => list_errors_in_object(map, node, path, errors),
        _ => {}
    }
}

fn list_errors_in_array(items: &[Value], node: &Node, path: &str, errors: &mut Vec<FieldError>) {
    match node.list_type.as_deref() {
        Some("set") => {
            let identities: Vec<String> = items.iter().map(value_identity).collect();
            for i in repeated_indices(&identities) {
                errors.push(duplicate(&index(path, i), &items[i]));
            }
        }
        Some("map") => errors.extend(list_map_errors(items, node, path)),
        _ => {}
    }
    if let Some(items_schema) = &node.items {
        for (i, item) in items.iter().enumerate() {
            list_errors_in_value(item, items_schema, &index(path, i), errors);
        }
    }
}

fn list_map_errors(items: &[Value], node: &Node, path: &str) -> Vec<FieldError> {
    for (i, item) in items.iter().enumerate() {
        if !item.is_null() && !item.is_object() {
            return vec![invalid_value(
                &index(path, i),
                item,
                "must be an object for an array of list-type map",
            )];
        }
    }
    if items.len() <= 1 {
        return Vec::new();
    }
    let keys: Vec<Value> = items
        .iter()
        .map(|item| {
            let mut identity = Map::new();
            for name in &node.list_map_keys {
                if let Some(v) = item.get(name) {
                    identity.insert(name.clone(), v.clone());
                }
            }
            Value::Object(identity)
        })
        .collect();
    let identities: Vec<String> = if let [single] = node.list_map_keys.as_slice() {
        // One key: compared as a scalar; a missing key is a value of its own.
        keys.iter()
            .map(|identity| match identity.get(single) {
                Some(value) => value_identity(value),
                None => "unspecified".to_string(),
            })
            .collect()
    } else {
        keys.iter().map(value_identity).collect()
    };
    repeated_indices(&identities)
        .into_iter()
        .map(|i| duplicate(&index(path, i), &keys[i]))
        .collect()
}

/// Upstream `validateListSet`: the index of the second occurrence of each repeated value
/// (later repeats are not reported).
fn repeated_indices(identities: &[String]) -> Vec<usize> {
    if identities.len() <= 1 {
        return Vec::new();
    }
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    let mut repeated = Vec::new();
    for (i, identity) in identities.iter().enumerate() {
        let times = seen.entry(identity.as_str()).or_insert(0);
        *times += 1;
        if *times == 2 {
            repeated.push(i);
        }
    }
    repeated
}

/// How upstream tells set elements apart: scalars by Go type and value, compounds by their
/// JSON encoding.
fn value_identity(value: &Value) -> String {
    match value {
        Value::Null => "null".to_string(),
        Value::Bool(b) => format!("bool:{b}"),
        Value::String(s) => format!("string:{s}"),
        Value::Number(_) if kind_of(value) == Kind::Int => format!("int:{value}"),
        Value::Number(_) => format!("float:{}", as_f64(value).to_bits()),
        compound => format!("json:{compound}"),
    }
}

fn duplicate(field: &str, value: &Value) -> FieldError {
    let (rendered, literal) = render_bad_value(value);
    FieldError {
        literal,
        ..FieldError::duplicate(field, rendered)
    }
}

// ---------------------------------------------------------------------------------------------
// Rendering values as upstream's field errors print them
// ---------------------------------------------------------------------------------------------

/// Go's `%v` of a `float64` (`strconv.FormatFloat(f, 'g', -1, 64)`): the shortest digits
/// that round-trip, in `%e` form when the decimal exponent is below -4 or at least 6
/// (`1e+06`, `1.5e-07`, `123456.7` stays as is only below a million).
fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if f == 0.0 {
        return if f.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    let sign = if f < 0.0 { "-" } else { "" };
    let scientific = format!("{:e}", f.abs());
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or_default();
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    if !(-4..6).contains(&exponent) {
        let (first, rest) = digits.split_at(1);
        let fraction = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let exponent_sign = if exponent < 0 { '-' } else { '+' };
        return format!(
            "{sign}{first}{fraction}e{exponent_sign}{:02}",
            exponent.unsigned_abs()
        );
    }
    let point = exponent + 1;
    let count = i32::try_from(digits.len()).unwrap_or(i32::MAX);
    let text = if point <= 0 {
        let zeros = "0".repeat(point.unsigned_abs() as usize);
        format!("0.{zeros}{digits}")
    } else if point >= count {
        let zeros = "0".repeat((point - count) as usize);
        format!("{digits}{zeros}")
    } else {
        let (whole, fraction) = digits.split_at(point as usize);
        format!("{whole}.{fraction}")
    };
    format!("{sign}{text}")
}

fn go_number(value: &Value) -> String {
    match value.as_i64() {
        Some(i) => i.to_string(),
        None => go_float(as_f64(value)),
    }
}

/// Go's `%#v` of a decoded JSON value held in an `interface{}`.
fn go_syntax(value: &Value) -> String {
    match value {
        Value::Null => "interface {}(nil)".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(_) => go_number(value),
        Value::String(s) => go_quote(s),
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(go_syntax).collect();
            format!("[]interface {{}}{{{}}}", inner.join(", "))
        }
        Value::Object(map) => {
            let inner: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{}:{}", go_quote(k), go_syntax(v)))
                .collect();
            format!("map[string]interface {{}}{{{}}}", inner.join(", "))
        }
    }
}

/// A bad value as `field.Error` prints it: strings (and `null`, printed as `"null"`) quoted,
/// numbers and booleans bare, lists and maps in Go syntax. The flag says "print as is".
fn render_bad_value(value: &Value) -> (String, bool) {
    match value {
        Value::Null => ("null".into(), false),
        Value::String(s) => (s.clone(), false),
        Value::Bool(b) => (b.to_string(), true),
        Value::Number(_) => (go_number(value), true),
        compound => (go_syntax(compound), true),
    }
}

/// `field: Invalid value: <value>: message` for any JSON value.
fn invalid_value(field: &str, value: &Value, message: &str) -> FieldError {
    let (rendered, literal) = render_bad_value(value);
    FieldError {
        literal,
        ..FieldError::invalid(field, rendered, message)
    }
}

/// Go's `%#v` of a `[]string`.
fn go_string_slice(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| go_quote(s)).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

// ---------------------------------------------------------------------------------------------
// Patterns: Go RE2 syntax on the regex crate
// ---------------------------------------------------------------------------------------------

/// Compiles a `pattern:`. Go's RE2 and the regex crate share their syntax, except that
/// Perl classes are ASCII in Go and Unicode here; they are rewritten to Go's meaning.
fn compile_go_regex(pattern: &str) -> Result<Regex, String> {
    Regex::new(&ascii_perl_classes(pattern)).map_err(|e| {
        let text = e.to_string();
        let reason = text
            .lines()
            .rev()
            .find_map(|line| line.strip_prefix("error: "))
            .unwrap_or(text.as_str())
            .trim()
            .to_string();
        format!("error parsing regexp: {reason}: `{pattern}`")
    })
}

fn ascii_perl_classes(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars().peekable();
    let mut in_class = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let Some(escaped) = chars.next() else {
                    out.push('\\');
                    break;
                };
                let replacement = match (escaped, in_class) {
                    ('d', false) => "[0-9]",
                    ('D', false) => "[^0-9]",
                    ('w', false) => "[0-9A-Za-z_]",
                    ('W', false) => "[^0-9A-Za-z_]",
                    ('s', false) => r"[\t\n\x0C\r ]",
                    ('S', false) => r"[^\t\n\x0C\r ]",
                    ('b', false) => r"(?-u:\b)",
                    ('B', false) => r"(?-u:\B)",
                    ('d', true) => "0-9",
                    ('w', true) => "0-9A-Za-z_",
                    ('s', true) => r"\t\n\x0C\r ",
                    ('D', true) => "[:^digit:]",
                    ('W', true) => "[:^word:]",
                    ('S', true) => "[:^space:]",
                    _ => {
                        out.push('\\');
                        out.push(escaped);
                        continue;
                    }
                };
                out.push_str(replacement);
            }
            '[' if !in_class => {
                in_class = true;
                out.push('[');
                if chars.peek() == Some(&'^') {
                    out.push('^');
                    chars.next();
                }
                // A `]` right after the opening bracket is a literal.
                if chars.peek() == Some(&']') {
                    out.push(']');
                    chars.next();
                }
            }
            '[' if chars.peek() == Some(&':') => {
                // A POSIX class such as [:alpha:] inside a bracket expression.
                out.push('[');
                for inner in chars.by_ref() {
                    out.push(inner);
                    if inner == ']' {
                        break;
                    }
                }
            }
            ']' if in_class => {
                in_class = false;
                out.push(']');
            }
            other => out.push(other),
        }
    }
    out
}

fn static_regex(cell: &'static OnceLock<Option<Regex>>, pattern: &str) -> Option<&'static Regex> {
    cell.get_or_init(|| Regex::new(pattern).ok()).as_ref()
}

// ---------------------------------------------------------------------------------------------
// Formats (kube-openapi strfmt)
// ---------------------------------------------------------------------------------------------

/// Formats kube-openapi's registry knows (names compared without dashes); others are not
/// checked even when a CRD may declare them (`quantity`).
fn is_registered_format(format: &str) -> bool {
    const REGISTERED: [&str; 24] = [
        "bsonobjectid",
        "uri",
        "email",
        "hostname",
        "ipv4",
        "ipv6",
        "cidr",
        "mac",
        "uuid",
        "uuid3",
        "uuid4",
        "uuid5",
        "isbn",
        "isbn10",
        "isbn13",
        "creditcard",
        "ssn",
        "hexcolor",
        "rgbcolor",
        "byte",
        "password",
        "datetime",
        "date",
        "duration",
    ];
    !format.is_empty() && REGISTERED.contains(&format.replace('-', "").as_str())
}

fn format_matches(format: &str, s: &str) -> bool {
    static UUID: OnceLock<Option<Regex>> = OnceLock::new();
    static UUID3: OnceLock<Option<Regex>> = OnceLock::new();
    static UUID4: OnceLock<Option<Regex>> = OnceLock::new();
    static UUID5: OnceLock<Option<Regex>> = OnceLock::new();
    static SSN: OnceLock<Option<Regex>> = OnceLock::new();
    static HEXCOLOR: OnceLock<Option<Regex>> = OnceLock::new();
    static RGBCOLOR: OnceLock<Option<Regex>> = OnceLock::new();
    static BASE64: OnceLock<Option<Regex>> = OnceLock::new();
    let matches = |cell: &'static OnceLock<Option<Regex>>, pattern: &str| {
        static_regex(cell, pattern).is_some_and(|re| re.is_match(s))
    };
    match format.replace('-', "").as_str() {
        "bsonobjectid" => s.len() == 24 && s.bytes().all(|b| b.is_ascii_hexdigit()),
        "uri" => is_request_uri(s),
        "email" => is_email(s),
        "hostname" => is_hostname(s),
        "ipv4" => {
            s.contains('.') && (parse_ipv4_sloppy(s).is_some() || s.parse::<Ipv6Addr>().is_ok())
        }
        "ipv6" => s.contains(':') && s.parse::<Ipv6Addr>().is_ok(),
        "cidr" => is_cidr(s),
        "mac" => is_mac(s),
        "uuid" => matches(
            &UUID,
            "(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$",
        ),
        "uuid3" => matches(
            &UUID3,
            "(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$",
        ),
        "uuid4" => matches(
            &UUID4,
            "(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$",
        ),
        "uuid5" => matches(
            &UUID5,
            "(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$",
        ),
        "isbn" => is_isbn10(s) || is_isbn13(s),
        "isbn10" => is_isbn10(s),
        "isbn13" => is_isbn13(s),
        "creditcard" => is_credit_card(s),
        "ssn" => s.len() == 11 && matches(&SSN, "^[0-9]{3}[- ]?[0-9]{2}[- ]?[0-9]{4}$"),
        "hexcolor" => matches(&HEXCOLOR, "^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$"),
        "rgbcolor" => matches(
            &RGBCOLOR,
            r"^rgb\(\s*(0|[1-9][0-9]?|1[0-9][0-9]?|2[0-4][0-9]|25[0-5])\s*,\s*(0|[1-9][0-9]?|1[0-9][0-9]?|2[0-4][0-9]|25[0-5])\s*,\s*(0|[1-9][0-9]?|1[0-9][0-9]?|2[0-4][0-9]|25[0-5])\s*\)$",
        ),
        "byte" => matches(
            &BASE64,
            "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})$",
        ),
        "datetime" => is_date_time(s),
        "date" => is_date(s),
        "duration" => is_duration(s),
        _ => true,
    }
}

/// Go's `time.Parse("2006-01-02", s)` succeeding.
fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let number = |range: std::ops::Range<usize>| -> Option<u32> {
        let part = &s[range];
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    let (Some(year), Some(month), Some(day)) = (number(0..4), number(5..7), number(8..10)) else {
        return false;
    };
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&day)
}

/// kube-openapi's `IsDateTime`: a full date, `T`, and a time with an optional fraction and
/// a `Z` or numeric offset (case-insensitive).
fn is_date_time(s: &str) -> bool {
    static TIME: OnceLock<Option<Regex>> = OnceLock::new();
    if s.len() < 4 {
        return false;
    }
    let lower = s.to_lowercase();
    let parts: Vec<&str> = lower.split('t').collect();
    if parts.len() < 2 || !is_date(parts[0]) {
        return false;
    }
    let Some(regex) = static_regex(
        &TIME,
        r"^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$",
    ) else {
        return false;
    };
    let Some(captures) = regex.captures(parts[1]) else {
        return false;
    };
    let part = |i: usize| captures.get(i).map_or("", |m| m.as_str());
    part(1) <= "23" && part(2) <= "59" && part(3) <= "59"
}

/// Go's `time.ParseDuration`, or kube-openapi's lenient fallback that accepts any
/// `<digits> <unit word>` inside the string (`3 days`, `5 minutes`).
fn is_duration(s: &str) -> bool {
    static LENIENT: OnceLock<Option<Regex>> = OnceLock::new();
    if go_duration_syntax(s) {
        return true;
    }
    const UNITS: [&[&str]; 8] = [
        &["ns", "nano"],
        &["us", "µs", "micro"],
        &["ms", "milli"],
        &["s", "sec"],
        &["m", "min"],
        &["h", "hr", "hour"],
        &["d", "day"],
        &["w", "wk", "week"],
    ];
    let Some(regex) = static_regex(&LENIENT, r"(([0-9]+)\s*([A-Za-zµ]+))") else {
        return false;
    };
    regex.captures_iter(s).any(|captures| {
        let unit = captures
            .get(3)
            .map_or(String::new(), |m| m.as_str().trim().to_lowercase());
        UNITS.iter().any(|variants| {
            variants.iter().enumerate().any(|(i, variant)| {
                (i == variants.len() - 1 && unit.starts_with(variant))
                    || unit.eq_ignore_ascii_case(variant)
            })
        })
    })
}

fn go_duration_syntax(s: &str) -> bool {
    let mut rest = s.strip_prefix(['-', '+']).unwrap_or(s);
    if rest == "0" {
        return true;
    }
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let mut has_number = digits > 0;
        rest = &rest[digits..];
        if let Some(after_point) = rest.strip_prefix('.') {
            let fraction = after_point.len()
                - after_point
                    .trim_start_matches(|c: char| c.is_ascii_digit())
                    .len();
            has_number |= fraction > 0;
            rest = &after_point[fraction..];
        }
        if !has_number {
            return false;
        }
        let unit_len = rest.len()
            - rest
                .trim_start_matches(|c: char| c != '.' && !c.is_ascii_digit())
                .len();
        let unit = &rest[..unit_len];
        if !["ns", "us", "µs", "μs", "ms", "s", "m", "h"].contains(&unit) {
            return false;
        }
        rest = &rest[unit_len..];
    }
    true
}

/// Go's `url.ParseRequestURI` succeeding: an absolute URI or an absolute path, without
/// control characters, with a well-formed authority when one is given.
fn is_request_uri(s: &str) -> bool {
    if s.is_empty() || s.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return false;
    }
    if s.starts_with('/') {
        return true;
    }
    let Some((scheme, rest)) = s.split_once(':') else {
        return false;
    };
    let mut scheme_chars = scheme.chars();
    let valid_scheme = scheme_chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && scheme_chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !valid_scheme {
        return false;
    }
    let Some(after_slashes) = rest.strip_prefix("//") else {
        // `mailto:x`: an opaque URI.
        return true;
    };
    let authority = after_slashes.split(['/', '?']).next().unwrap_or_default();
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    if let Some(bracketed) = host.strip_prefix('[') {
        let Some((address, port)) = bracketed.split_once(']') else {
            return false;
        };
        let address = address.split('%').next().unwrap_or_default();
        return address.parse::<Ipv6Addr>().is_ok() && (port.is_empty() || valid_port_suffix(port));
    }
    match host.rsplit_once(':') {
        Some((_, port)) => valid_port_suffix(&format!(":{port}")),
        None => true,
    }
}

fn valid_port_suffix(suffix: &str) -> bool {
    suffix
        .strip_prefix(':')
        .is_some_and(|port| port.bytes().all(|b| b.is_ascii_digit()))
}

/// An approximation of Go's `mail.ParseAddress`: `local@domain`, optionally as
/// `Display Name <local@domain>`.
fn is_email(s: &str) -> bool {
    let address = match (s.rfind('<'), s.ends_with('>')) {
        (Some(open), true) => &s[open + 1..s.len() - 1],
        (None, false) => s.trim(),
        _ => return false,
    };
    let Some((local, domain)) = address.rsplit_once('@') else {
        return false;
    };
    let atom_char = |c: char| {
        c.is_alphanumeric()
            || "!#$%&'*+-/=?^_`{|}~".contains(c)
            || (!c.is_ascii() && !c.is_whitespace())
    };
    let dot_atom = |text: &str| {
        !text.is_empty()
            && text
                .split('.')
                .all(|atom| !atom.is_empty() && atom.chars().all(atom_char))
    };
    let local_ok =
        dot_atom(local) || (local.len() >= 2 && local.starts_with('"') && local.ends_with('"'));
    let domain_ok = dot_atom(domain) || (domain.starts_with('[') && domain.ends_with(']'));
    local_ok && domain_ok
}

/// kube-openapi's `IsHostname`.
fn is_hostname(s: &str) -> bool {
    static HOSTNAME: OnceLock<Option<Regex>> = OnceLock::new();
    let pattern = r"^([a-zA-Z0-9\p{S}\p{L}]((-?[a-zA-Z0-9\p{S}\p{L}]{0,62})?)|([a-zA-Z0-9\p{S}\p{L}](([a-zA-Z0-9\-\p{S}\p{L}]{0,61}[a-zA-Z0-9\p{S}\p{L}])?)(\.)){1,}([a-zA-Z\p{L}]){2,63})$";
    static_regex(&HOSTNAME, pattern).is_some_and(|re| re.is_match(s))
        && s.len() <= 255
        && s.split('.').all(|label| label.len() <= 63)
}

/// `k8s.io/utils/net.ParseIPSloppy` for IPv4: leading zeros allowed.
fn parse_ipv4_sloppy(s: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = s.split('.').collect();
    if parts.len() != 4 {
        return None;
    }
    let mut octets = [0u8; 4];
    for (octet, part) in octets.iter_mut().zip(&parts) {
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        *octet = part
            .trim_start_matches('0')
            .parse::<u8>()
            .ok()
            .or_else(|| part.bytes().all(|b| b == b'0').then_some(0))?;
    }
    Some(Ipv4Addr::from(octets))
}

/// `k8s.io/utils/net.ParseCIDRSloppy`.
fn is_cidr(s: &str) -> bool {
    let Some((address, bits)) = s.split_once('/') else {
        return false;
    };
    let max_bits = if parse_ipv4_sloppy(address).is_some() {
        32
    } else if address.parse::<Ipv6Addr>().is_ok() {
        128
    } else {
        return false;
    };
    !bits.is_empty()
        && bits.bytes().all(|b| b.is_ascii_digit())
        && bits
            .trim_start_matches('0')
            .parse::<u32>()
            .map_or(bits.bytes().all(|b| b == b'0'), |n| n <= max_bits)
}

/// Go's `net.ParseMAC`: 6, 8 or 20 octets as `xx:xx…`, `xx-xx…` or `xxxx.xxxx…`.
fn is_mac(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() < 14 {
        return false;
    }
    let hex = |part: &[u8]| part.iter().all(u8::is_ascii_hexdigit);
    let (group, separator) = if b[2] == b':' || b[2] == b'-' {
        (2, b[2])
    } else if b[4] == b'.' {
        (4, b'.')
    } else {
        return false;
    };
    if !(b.len() + 1).is_multiple_of(group + 1) {
        return false;
    }
    let groups = (b.len() + 1) / (group + 1);
    let octets = groups * group / 2;
    if ![6, 8, 20].contains(&octets) {
        return false;
    }
    b.chunks(group + 1).enumerate().all(|(i, chunk)| {
        let last = i == groups - 1;
        let (digits, sep) = chunk.split_at(group);
        hex(digits)
            && (if last {
                sep.is_empty()
            } else {
                sep == [separator]
            })
    })
}

fn is_isbn10(s: &str) -> bool {
    let clean: Vec<u8> = s
        .bytes()
        .filter(|b| !b.is_ascii_whitespace() && *b != b'-')
        .collect();
    if clean.len() != 10
        || !clean[..9].iter().all(u8::is_ascii_digit)
        || !(clean[9].is_ascii_digit() || clean[9] == b'X')
    {
        return false;
    }
    let mut checksum: u32 = clean[..9]
        .iter()
        .enumerate()
        .map(|(i, d)| (i as u32 + 1) * u32::from(d - b'0'))
        .sum();
    checksum += 10
        * if clean[9] == b'X' {
            10
        } else {
            u32::from(clean[9] - b'0')
        };
    checksum.is_multiple_of(11)
}

fn is_isbn13(s: &str) -> bool {
    let clean: Vec<u8> = s
        .bytes()
        .filter(|b| !b.is_ascii_whitespace() && *b != b'-')
        .collect();
    if clean.len() != 13 || !clean.iter().all(u8::is_ascii_digit) {
        return false;
    }
    let checksum: u32 = clean[..12]
        .iter()
        .enumerate()
        .map(|(i, d)| if i % 2 == 0 { 1 } else { 3 } * u32::from(d - b'0'))
        .sum();
    u32::from(clean[12] - b'0') == (10 - checksum % 10) % 10
}

/// govalidator's `IsCreditCard`: a known card number shape and a valid Luhn checksum.
fn is_credit_card(s: &str) -> bool {
    static CARD: OnceLock<Option<Regex>> = OnceLock::new();
    let digits: String = s.chars().filter(char::is_ascii_digit).collect();
    let shape = r"^(?:4[0-9]{12}(?:[0-9]{3})?|5[1-5][0-9]{14}|6(?:011|5[0-9][0-9])[0-9]{12}|3[47][0-9]{13}|3(?:0[0-5]|[68][0-9])[0-9]{11}|(?:2131|1800|35[0-9]{3})[0-9]{11})$";
    if !static_regex(&CARD, shape).is_some_and(|re| re.is_match(&digits)) {
        return false;
    }
    let sum: u32 = digits
        .bytes()
        .rev()
        .enumerate()
        .map(|(i, d)| {
            let n = u32::from(d - b'0');
            if i % 2 == 1 {
                let doubled = n * 2;
                if doubled >= 10 {
                    doubled % 10 + 1
                } else {
                    doubled
                }
            } else {
                n
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

// ---------------------------------------------------------------------------------------------
// List semantics for merging
// ---------------------------------------------------------------------------------------------

impl StructuralSchema {
    /// The list semantics at a path of field names (list indices omitted, as
    /// [`PatchSchema`] paths are): `Atomic` unless the schema says `set` or `map`.
    pub fn list_type(&self, path: &[&str]) -> ListType {
        match self
            .node_at(path)
            .and_then(|node| node.list_type.as_deref())
        {
            Some("set") => ListType::Set,
            Some("map") => self.node_at(path).map_or(ListType::Atomic, |node| {
                ListType::Map(node.list_map_keys.clone())
            }),
            _ => ListType::Atomic,
        }
    }

    /// The schema of the field at `path`, stepping into list items where the path (which
    /// has no indices) goes through a list.
    fn node_at(&self, path: &[&str]) -> Option<&Node> {
        let mut node = &self.root;
        for name in path {
            while let Some(items) = node.items.as_deref() {
                node = items;
            }
            node = node.field(name)?;
        }
        Some(node)
    }
}

/// Server-side apply and strategic merge use the CRD's list and map types: sets merge as
/// primitives, maps with one key merge by it; maps with several keys and everything else
/// are replaced, since the merge code knows only single merge keys.
impl PatchSchema for StructuralSchema {
    fn list_strategy(&self, path: &[&str]) -> ListStrategy {
        match self.list_type(path) {
            ListType::Set => ListStrategy::MergePrimitives,
            ListType::Map(keys) => match keys.as_slice() {
                [single] => ListStrategy::MergeByKey(intern(single)),
                _ => ListStrategy::Replace,
            },
            ListType::Atomic => ListStrategy::Replace,
        }
    }

    fn map_strategy(&self, path: &[&str]) -> MapStrategy {
        match self.node_at(path).and_then(|node| node.map_type.as_deref()) {
            Some("atomic") => MapStrategy::Replace,
            _ => MapStrategy::Merge,
        }
    }
}

/// [`ListStrategy::MergeByKey`] wants a `'static` key; each distinct key name is leaked once
/// (a handful per cluster), however often CRDs are recompiled.
fn intern(name: &str) -> &'static str {
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut names = NAMES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(existing) = names.get(name) {
        return existing;
    }
    let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(leaked);
    leaked
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ROOT: &str = "spec.validation.openAPIV3Schema";

    /// A schema shaped like kube-derive's output (nullable options, required lists, nullable
    /// status) plus the extensions the tests exercise.
    fn foo_schema() -> StructuralSchema {
        let schema = json!({
            "type": "object",
            "title": "Foo",
            "description": "Auto-generated derived type for FooSpec via `CustomResource`",
            "required": ["spec"],
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["name", "replicas"],
                    "properties": {
                        "name": {"type": "string", "minLength": 3, "maxLength": 10, "pattern": "^[a-z]+$"},
                        "replicas": {"type": "integer", "format": "int32", "minimum": 0, "maximum": 10},
                        "info": {"type": "string", "nullable": true},
                        "ratio": {"type": "number", "nullable": true},
                        "port": {"x-kubernetes-int-or-string": true},
                        "color": {"type": "string", "enum": ["red", "green"]},
                        "when": {"type": "string", "format": "date-time"},
                        "size": {"type": "string", "format": "quantity"},
                        "tags": {
                            "type": "array", "maxItems": 3, "minItems": 1,
                            "items": {"type": "string"},
                            "x-kubernetes-list-type": "set"
                        },
                        "items": {
                            "type": "array",
                            "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["name"],
                            "items": {
                                "type": "object",
                                "required": ["name"],
                                "properties": {
                                    "name": {"type": "string"},
                                    "value": {"type": "integer", "default": 1},
                                    "ports": {
                                        "type": "array",
                                        "items": {"type": "integer"},
                                        "x-kubernetes-list-type": "set"
                                    }
                                }
                            }
                        },
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "selectors": {
                            "type": "object",
                            "maxProperties": 2,
                            "additionalProperties": {
                                "type": "object",
                                "properties": {"x": {"type": "string"}}
                            }
                        },
                        "config": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": true,
                            "properties": {
                                "known": {"type": "object", "properties": {"a": {"type": "string"}}}
                            }
                        },
                        "template": {
                            "type": "object",
                            "x-kubernetes-embedded-resource": true,
                            "x-kubernetes-preserve-unknown-fields": true
                        },
                        "atomic": {
                            "type": "object",
                            "x-kubernetes-map-type": "atomic",
                            "properties": {"a": {"type": "string"}}
                        }
                    }
                },
                "status": {
                    "type": "object",
                    "nullable": true,
                    "properties": {
                        "replicas": {"type": "integer", "format": "int32"},
                        "phase": {"type": "string"}
                    }
                }
            }
        });
        match StructuralSchema::compile(&schema, ROOT) {
            Ok(compiled) => compiled,
            Err(errors) => panic!(
                "fixture must compile: {}",
                validation::aggregate_message(&errors)
            ),
        }
    }

    fn compile(schema: Value) -> StructuralSchema {
        match StructuralSchema::compile(&schema, ROOT) {
            Ok(compiled) => compiled,
            Err(errors) => panic!(
                "schema must compile: {}",
                validation::aggregate_message(&errors)
            ),
        }
    }

    fn compile_errors(schema: Value) -> Vec<String> {
        match StructuralSchema::compile(&schema, ROOT) {
            Ok(_) => Vec::new(),
            Err(errors) => errors.iter().map(ToString::to_string).collect(),
        }
    }

    fn spec(fields: Value) -> Value {
        let mut spec = json!({"name": "abc", "replicas": 1});
        if let (Some(spec), Value::Object(fields)) = (spec.as_object_mut(), fields) {
            spec.extend(fields);
        }
        json!({"apiVersion": "example.com/v1", "kind": "Foo", "metadata": {"name": "x"}, "spec": spec})
    }

    fn messages(schema: &StructuralSchema, object: &Value) -> Vec<String> {
        schema
            .validate(object)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    // --- compilation -------------------------------------------------------------------------

    #[test]
    fn kube_derive_style_schema_compiles_and_validates_a_good_object() {
        let schema = foo_schema();
        let object = spec(json!({
            "info": null, "ratio": 1, "port": "http", "color": "red",
            "when": "2024-02-29T10:00:00Z", "size": "not checked",
            "tags": ["a", "b"], "items": [{"name": "a", "ports": [1, 2]}, {"name": "b"}],
            "labels": {"a": "b"}, "config": {"anything": [1]}
        }));
        assert_eq!(messages(&schema, &object), Vec::<String>::new());
        let mut with_null_status = object.clone();
        with_null_status["status"] = Value::Null;
        assert_eq!(messages(&schema, &with_null_status), Vec::<String>::new());
    }

    #[test]
    fn missing_types_are_not_structural() {
        assert_eq!(
            compile_errors(
                json!({"type": "object", "properties": {"spec": {"properties": {"a": {"type": "string"}}}}})
            ),
            vec![format!(
                "{ROOT}.properties[spec].type: Required value: must not be empty for specified object fields"
            )]
        );
        assert_eq!(
            compile_errors(json!({"properties": {"a": {"type": "array", "items": {}}}})),
            vec![
                format!(
                    "{ROOT}.properties[a].items.type: Required value: must not be empty for specified array items"
                ),
                format!("{ROOT}.type: Required value: must not be empty at the root"),
            ]
        );
        assert_eq!(
            compile_errors(json!({"type": "object", "properties": {"l": {"type": "array"}}})),
            vec![format!(
                "{ROOT}.properties[l].items: Required value: must be specified"
            )]
        );
        assert_eq!(
            compile_errors(json!({"type": "string"})),
            vec![format!(
                r#"{ROOT}.type: Invalid value: "string": must be object at the root"#
            )]
        );
    }

    #[test]
    fn root_rules() {
        assert_eq!(
            compile_errors(json!({"type": "object", "nullable": true})),
            vec![format!(
                "{ROOT}.nullable: Forbidden: nullable cannot be true at the root"
            )]
        );
        assert_eq!(
            compile_errors(json!({"type": "object", "additionalProperties": {"type": "string"}})),
            vec![format!(
                "{ROOT}.additionalProperties: Forbidden: must not be used at the root"
            )]
        );
        assert_eq!(
            compile_errors(json!({"type": "object", "properties": {
                "metadata": {"type": "object", "properties": {"labels": {"type": "object"}}}
            }})),
            vec![format!(
                "{ROOT}.properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified"
            )]
        );
        // Restricting name and generateName is allowed.
        compile(json!({"type": "object", "properties": {
            "metadata": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}}}
        }}));
        assert_eq!(
            compile_errors(json!({"type": "object", "properties": {"kind": {"type": "integer"}}})),
            vec![format!(
                r#"{ROOT}.properties[kind].type: Invalid value: "integer": must be string"#
            )]
        );
        assert_eq!(
            compile_errors(
                json!({"type": "object", "properties": {"metadata": {"type": "object", "default": {}}}})
            ),
            vec![format!(
                "{ROOT}.properties[metadata].default: Forbidden: must not be set in top-level metadata"
            )]
        );
    }

    #[test]
    fn value_validations_in_allof_and_co_must_stay_value_validations() {
        assert_eq!(
            compile_errors(json!({"type": "object", "properties": {
                "a": {"type": "string", "allOf": [{"type": "string", "nullable": true, "description": "d"}]}
            }})),
            vec![
                format!(
                    "{ROOT}.properties[a].allOf[0].description: Forbidden: must be empty to be structural"
                ),
                format!(
                    "{ROOT}.properties[a].allOf[0].nullable: Forbidden: must be false to be structural"
                ),
                format!(
                    "{ROOT}.properties[a].allOf[0].type: Forbidden: must be empty to be structural"
                ),
            ]
        );
        // The int-or-string anyOf is the structural exception.
        compile(json!({"type": "object", "properties": {"p": {
            "x-kubernetes-int-or-string": true,
            "anyOf": [{"type": "integer"}, {"type": "string"}]
        }}}));
        assert_eq!(
            compile_errors(json!({
                "type": "object",
                "properties": {"a": {"type": "string"}},
                "allOf": [{"properties": {"b": {"minLength": 1}}}]
            })),
            vec![format!(
                "{ROOT}.properties[b]: Required value: because it is defined in {ROOT}.allOf[0].properties[b]"
            )]
        );
    }

    #[test]
    fn keyword_rules() {
        assert_eq!(
            compile_errors(json!({"type": "object", "properties": {
                "l": {"type": "array", "items": {"type": "string"}, "uniqueItems": true}
            }})),
            vec![format!(
                "{ROOT}.properties[l].uniqueItems: Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic"
            )]
        );
        assert_eq!(
            compile_errors(json!({"type": "object", "properties": {"a": {"type": "str"}}})),
            vec![format!(
                r#"{ROOT}.properties[a].type: Unsupported value: "str": supported values: "array", "boolean", "integer", "number", "object", "string""#
            )]
        );
        assert_eq!(
            compile_errors(json!({"type": "object", "properties": {
                "o": {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}}
            }})),
            vec![format!(
                "{ROOT}.properties[o].additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive"
            )]
        );
        assert_eq!(
            compile_errors(
                json!({"type": "object", "properties": {"a": {"type": "string", "$ref": "#/x"}}})
            ),
            vec![format!(
                "{ROOT}.properties[a].$ref: Forbidden: $ref is not supported"
            )]
        );
        assert_eq!(
            compile_errors(
                json!({"type": "object", "properties": {"a": {"type": "object", "x-kubernetes-preserve-unknown-fields": false}}})
            ),
            vec![format!(
                "{ROOT}.properties[a].x-kubernetes-preserve-unknown-fields: Invalid value: false: must be true or undefined"
            )]
        );
        let bad_pattern = compile_errors(
            json!({"type": "object", "properties": {"s": {"type": "string", "pattern": "("}}}),
        );
        assert_eq!(bad_pattern.len(), 1);
        assert!(
            bad_pattern[0].starts_with(&format!(
                r#"{ROOT}.properties[s].pattern: Invalid value: "(": must be a valid regular expression, but isn't: error parsing regexp: "#
            )),
            "{bad_pattern:?}"
        );
    }

    #[test]
    fn list_and_map_extension_rules() {
        assert_eq!(
            compile_errors(
                json!({"type": "object", "properties": {"s": {"type": "string", "x-kubernetes-list-type": "set"}}})
            ),
            vec![format!(
                r#"{ROOT}.properties[s].type: Invalid value: "string": must be array if x-kubernetes-list-type is specified"#
            )]
        );
        assert_eq!(
            compile_errors(json!({"type": "object", "properties": {
                "l": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "bag"}
            }})),
            vec![format!(
                r#"{ROOT}.properties[l].x-kubernetes-list-type: Unsupported value: "bag": supported values: "atomic", "set", "map""#
            )]
        );
        assert_eq!(
            compile_errors(json!({"type": "object", "properties": {"l": {
                "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["k"],
                "items": {"type": "object", "properties": {"k": {"type": "string", "nullable": true}}}
            }}})),
            vec![
                format!(
                    "{ROOT}.properties[l].items.properties[k].default: Required value: this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property"
                ),
                format!(
                    "{ROOT}.properties[l].items.properties[k].nullable: Forbidden: this property is in x-kubernetes-list-map-keys, so it cannot be nullable"
                ),
            ]
        );
        assert_eq!(
            compile_errors(json!({"type": "object", "properties": {"l": {
                "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["missing"],
                "items": {"type": "object", "properties": {"k": {"type": "string"}}}
            }}})),
            vec![format!(
                r#"{ROOT}.properties[l].x-kubernetes-list-map-keys: Invalid value: []string{{"missing"}}: entries must all be names of item properties"#
            )]
        );
        assert_eq!(
            compile_errors(
                json!({"type": "object", "properties": {"o": {"type": "string", "x-kubernetes-map-type": "atomic"}}})
            ),
            vec![format!(
                r#"{ROOT}.properties[o].type: Invalid value: "string": must be object if x-kubernetes-map-type is specified"#
            )]
        );
        assert_eq!(
            compile_errors(
                json!({"type": "object", "properties": {"e": {"type": "string", "x-kubernetes-embedded-resource": true}}})
            ),
            vec![
                format!(
                    "{ROOT}.properties[e].properties: Required value: must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields"
                ),
                format!(
                    r#"{ROOT}.properties[e].type: Invalid value: "string": must be object if x-kubernetes-embedded-resource is true"#
                ),
            ]
        );
        assert_eq!(
            compile_errors(
                json!({"type": "object", "properties": {"e": {"type": "object", "x-kubernetes-embedded-resource": true}}})
            ),
            vec![format!(
                "{ROOT}.properties[e].properties: Required value: must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields"
            )]
        );
    }

    #[test]
    fn defaults_must_be_pruned_and_valid() {
        assert_eq!(
            compile_errors(
                json!({"type": "object", "properties": {"n": {"type": "integer", "default": "x"}}})
            ),
            vec![format!(
                r#"{ROOT}.properties[n].default: Invalid value: "string":  in body must be of type integer: "string""#
            )]
        );
        assert_eq!(
            compile_errors(json!({"type": "object", "properties": {"o": {
                "type": "object", "properties": {"a": {"type": "string"}}, "default": {"a": "x", "b": 1}
            }}})),
            vec![format!(
                r#"{ROOT}.properties[o].default: Invalid value: map[string]interface {{}}{{"a":"x", "b":1}}: must not have unknown fields"#
            )]
        );
        assert_eq!(
            compile_errors(json!({"type": "object", "properties": {"o": {
                "type": "object", "properties": {"a": {"type": "string", "maxLength": 1}}, "default": {"a": "xy"}
            }}})),
            vec![format!(
                "{ROOT}.properties[o].default.a: Too long: may not be more than 1 bytes"
            )]
        );
    }

    #[test]
    fn cel_rules_are_accepted_and_ignored() {
        let schema = compile(json!({"type": "object", "properties": {"spec": {
            "type": "object",
            "x-kubernetes-validations": [{"rule": "self.a > 1"}],
            "properties": {"a": {"type": "integer"}}
        }}}));
        assert_eq!(
            messages(&schema, &json!({"spec": {"a": 0}})),
            Vec::<String>::new()
        );
    }

    // --- pruning ------------------------------------------------------------------------------

    #[test]
    fn prune_drops_unknown_fields_and_reports_them_like_upstream() {
        let schema = foo_schema();
        let mut object = json!({
            "apiVersion": "example.com/v1",
            "kind": "Foo",
            "metadata": {
                "name": "a", "foo": 1,
                "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "n", "uid": "u", "bogus": true}]
            },
            "spec": {
                "name": "abc", "replicas": 1, "extra": true,
                "items": [{"name": "a", "junk": 1}],
                "labels": {"a": "b"},
                "selectors": {"s1": {"x": "1", "y": 2}},
                "config": {"anything": 1, "known": {"a": "x", "b": 2}},
                "template": {
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "p", "zzz": 1, "labels": {}, "creationTimestamp": null},
                    "spec": {"x": 1}
                }
            },
            "status": {"replicas": 1, "bogus": "x"},
            "top": 1
        });
        let unknown = schema.prune(&mut object);
        assert_eq!(
            unknown,
            vec![
                "metadata.foo",
                "metadata.ownerReferences[0].bogus",
                "spec.config.known.b",
                "spec.extra",
                "spec.items[0].junk",
                "spec.selectors.s1.y",
                "status.bogus",
                "top",
                "spec.template.metadata.zzz",
            ]
        );
        assert_eq!(
            object,
            json!({
                "apiVersion": "example.com/v1",
                "kind": "Foo",
                "metadata": {
                    "name": "a",
                    "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "n", "uid": "u"}]
                },
                "spec": {
                    "name": "abc", "replicas": 1,
                    "items": [{"name": "a"}],
                    "labels": {"a": "b"},
                    "selectors": {"s1": {"x": "1"}},
                    "config": {"anything": 1, "known": {"a": "x"}},
                    "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"x": 1}}
                },
                "status": {"replicas": 1}
            })
        );
    }

    #[test]
    fn prune_inside_lists_of_lists_and_without_schema() {
        let schema = compile(json!({"type": "object", "properties": {
            "matrix": {"type": "array", "items": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "integer"}}}}},
            "free": {"type": "object", "additionalProperties": true}
        }}));
        let mut object = json!({"matrix": [[{"a": 1, "b": 2}], [{"c": 3}]], "free": {"k": {"nested": 1}, "s": "v"}});
        assert_eq!(
            schema.prune(&mut object),
            vec!["free.k.nested", "matrix[0][0].b", "matrix[1][0].c"]
        );
        assert_eq!(
            object,
            json!({"matrix": [[{"a": 1}], [{}]], "free": {"k": {}, "s": "v"}})
        );
    }

    #[test]
    fn root_preserve_unknown_fields_keeps_everything_undeclared() {
        let schema = compile(json!({
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": true,
            "properties": {"spec": {"type": "object", "properties": {"a": {"type": "string"}}}}
        }));
        let mut object = json!({"anything": {"x": 1}, "spec": {"a": "x", "b": 1}});
        assert_eq!(schema.prune(&mut object), vec!["spec.b"]);
        assert_eq!(object, json!({"anything": {"x": 1}, "spec": {"a": "x"}}));
    }

    // --- defaulting ---------------------------------------------------------------------------

    fn defaulting_schema() -> StructuralSchema {
        compile(json!({"type": "object", "properties": {"spec": {
            "type": "object",
            "default": {},
            "properties": {
                "replicas": {"type": "integer", "default": 1},
                "mode": {"type": "string", "default": "auto"},
                "optional": {"type": "string", "nullable": true, "default": "x"},
                "plain": {"type": "string"},
                "nullablePlain": {"type": "string", "nullable": true},
                "nested": {
                    "type": "object",
                    "default": {"inner": "set"},
                    "properties": {"inner": {"type": "string"}, "deep": {"type": "integer", "default": 7}}
                },
                "list": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "integer", "default": 5}}}},
                "map": {"type": "object", "additionalProperties": {"type": "object", "properties": {"b": {"type": "boolean", "default": true}}}}
            }
        }}}))
    }

    #[test]
    fn defaults_fill_missing_fields_and_the_fields_of_defaulted_parents() {
        let schema = defaulting_schema();
        let mut object = json!({"apiVersion": "example.com/v1", "kind": "Foo"});
        schema.apply_defaults(&mut object);
        assert_eq!(
            object,
            json!({
                "apiVersion": "example.com/v1", "kind": "Foo",
                "spec": {"replicas": 1, "mode": "auto", "optional": "x", "nested": {"inner": "set", "deep": 7}}
            })
        );
    }

    #[test]
    fn defaults_and_nulls() {
        let schema = defaulting_schema();
        let mut object = json!({"spec": {
            "replicas": null, "optional": null, "plain": null, "nullablePlain": null, "mode": "manual",
            "list": [{}, {"a": 2}], "map": {"k": {}, "n": null}
        }});
        schema.apply_defaults(&mut object);
        assert_eq!(
            object,
            json!({"spec": {
                "replicas": 1, "optional": null, "nullablePlain": null, "mode": "manual",
                "nested": {"inner": "set", "deep": 7},
                "list": [{"a": 5}, {"a": 2}],
                "map": {"k": {"b": true}}
            }})
        );
    }

    // --- validation ---------------------------------------------------------------------------

    #[test]
    fn type_errors() {
        let schema = foo_schema();
        assert_eq!(
            messages(&schema, &spec(json!({"replicas": "string"}))),
            vec![
                r#"spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string""#
            ]
        );
        let errors = schema.validate(&spec(json!({"replicas": "string"})));
        assert_eq!(
            errors[0].to_status_cause()["reason"],
            json!("FieldValueTypeInvalid")
        );
        // A fractional number against an int32 integer fails on the format first, as upstream.
        assert_eq!(
            messages(&schema, &spec(json!({"replicas": 1.5}))),
            vec![
                r#"spec.replicas: Invalid value: "float64": spec.replicas in body must be of type int32: "float64""#
            ]
        );
        // An integral float is an integer; an integer is a number.
        assert_eq!(
            messages(&schema, &spec(json!({"replicas": 2.0, "ratio": 3}))),
            Vec::<String>::new()
        );
        assert_eq!(
            messages(&schema, &spec(json!({"port": true}))),
            vec![
                r#"spec.port: Invalid value: "boolean": spec.port in body must be of type integer,string: "boolean""#
            ]
        );
        assert_eq!(
            messages(&schema, &spec(json!({"port": 8080}))),
            Vec::<String>::new()
        );
        assert_eq!(
            messages(&schema, &json!({"spec": null})),
            vec![r#"spec: Invalid value: "null": spec in body must be of type object: "null""#]
        );
        assert_eq!(
            messages(&schema, &spec(json!({"labels": {"a": 1}}))),
            vec![
                r#"spec.labels.a: Invalid value: "integer": spec.labels.a in body must be of type string: "integer""#
            ]
        );
        assert_eq!(
            messages(&schema, &spec(json!({"items": [{"name": 5}]}))),
            vec![
                r#"spec.items[0].name: Invalid value: "integer": spec.items[0].name in body must be of type string: "integer""#
            ]
        );
    }

    #[test]
    fn required_and_enum() {
        let schema = foo_schema();
        assert_eq!(
            messages(&schema, &json!({"kind": "Foo"})),
            vec!["spec: Required value"]
        );
        assert_eq!(
            messages(&schema, &json!({"spec": {"replicas": 1}})),
            vec!["spec.name: Required value"]
        );
        assert_eq!(
            messages(&schema, &spec(json!({"color": "blue"}))),
            vec![r#"spec.color: Unsupported value: "blue": supported values: "red", "green""#]
        );
        assert_eq!(
            messages(&schema, &spec(json!({"color": 1}))),
            vec![
                r#"spec.color: Invalid value: "integer": spec.color in body must be of type string: "integer""#,
                r#"spec.color: Unsupported value: 1: supported values: "red", "green""#,
            ]
        );
    }

    #[test]
    fn string_checks_report_only_the_first_failure() {
        let schema = foo_schema();
        assert_eq!(
            messages(&schema, &spec(json!({"name": "ab"}))),
            vec![
                r#"spec.name: Invalid value: "ab": spec.name in body should be at least 3 chars long"#
            ]
        );
        assert_eq!(
            messages(&schema, &spec(json!({"name": "abcdefghijk"}))),
            vec!["spec.name: Too long: may not be more than 10 bytes"]
        );
        assert_eq!(
            messages(&schema, &spec(json!({"name": "AB"}))),
            vec![
                r#"spec.name: Invalid value: "AB": spec.name in body should be at least 3 chars long"#
            ]
        );
        assert_eq!(
            messages(&schema, &spec(json!({"name": "ABC"}))),
            vec![r#"spec.name: Invalid value: "ABC": spec.name in body should match '^[a-z]+$'"#]
        );
    }

    #[test]
    fn number_checks() {
        let schema = foo_schema();
        assert_eq!(
            messages(&schema, &spec(json!({"replicas": 11}))),
            vec![
                "spec.replicas: Invalid value: 11: spec.replicas in body should be less than or equal to 10"
            ]
        );
        assert_eq!(
            messages(&schema, &spec(json!({"replicas": -1}))),
            vec![
                "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0"
            ]
        );
        let schema = compile(json!({"type": "object", "properties": {
            "n": {"type": "integer", "multipleOf": 5, "exclusiveMaximum": true, "maximum": 20},
            "f": {"type": "number", "multipleOf": 0.1, "exclusiveMinimum": true, "minimum": 0, "maximum": 1000000}
        }}));
        assert_eq!(
            messages(&schema, &json!({"n": 7})),
            vec!["n: Invalid value: 7: n in body should be a multiple of 5"]
        );
        assert_eq!(
            messages(&schema, &json!({"n": 20})),
            vec!["n: Invalid value: 20: n in body should be less than 20"]
        );
        // 0.3 / 0.1 is 3 up to a relative error of 1e-9, which upstream accepts.
        assert_eq!(messages(&schema, &json!({"f": 0.3})), Vec::<String>::new());
        assert_eq!(
            messages(&schema, &json!({"f": 0.35})),
            vec!["f: Invalid value: 0.35: f in body should be a multiple of 0.1"]
        );
        // An integer meets multipleOf truncated to an integer: 0.1 becomes 0, as upstream.
        assert_eq!(
            messages(&schema, &json!({"f": 0})),
            vec![
                "f: Invalid value: 0: factor MultipleOf declared for f must be positive: 0",
                "f: Invalid value: 0: f in body should be greater than 0",
            ]
        );
        assert_eq!(
            messages(&schema, &json!({"f": 0.0})),
            vec!["f: Invalid value: 0: f in body should be greater than 0"]
        );
        assert_eq!(
            messages(&schema, &json!({"f": 2000000.55})),
            vec![
                "f: Invalid value: 2.00000055e+06: f in body should be a multiple of 0.1",
                "f: Invalid value: 2.00000055e+06: f in body should be less than or equal to 1e+06",
            ]
        );
    }

    #[test]
    fn array_and_object_size_checks() {
        let schema = foo_schema();
        assert_eq!(
            messages(&schema, &spec(json!({"tags": ["a", "b", "c", "d"]}))),
            vec!["spec.tags: Too many: 4: must have at most 3 items"]
        );
        assert_eq!(
            messages(&schema, &spec(json!({"tags": []}))),
            vec!["spec.tags: Invalid value: 0: spec.tags in body should have at least 1 items"]
        );
        assert_eq!(
            messages(
                &schema,
                &spec(json!({"selectors": {"a": {}, "b": {}, "c": {}}}))
            ),
            vec!["spec.selectors: Too many: 3: must have at most 2 items"]
        );
        let schema = compile(
            json!({"type": "object", "properties": {"m": {"type": "object", "minProperties": 2, "additionalProperties": {"type": "string"}}}}),
        );
        assert_eq!(
            messages(&schema, &json!({"m": {"a": "b"}})),
            vec!["m: Invalid value: 1: m in body should have at least 2 properties"]
        );
    }

    #[test]
    fn unique_items_is_checked_when_present() {
        // CRD validation forbids uniqueItems, so the node is built directly.
        let mut errors = Vec::new();
        let node = parse_node(
            &json!({"type": "array", "uniqueItems": true}),
            "",
            &mut errors,
        );
        let found: Vec<String> = validate_value(&node, &json!([1, 2, 1]), Some("spec.l"))
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            found,
            vec![r#"spec.l: Invalid value: "":  in body shouldn't contain duplicates"#]
        );
    }

    #[test]
    fn formats() {
        let schema = foo_schema();
        assert_eq!(
            messages(&schema, &spec(json!({"when": "yesterday"}))),
            vec![
                r#"spec.when: Invalid value: "yesterday": spec.when in body must be of type date-time: "yesterday""#
            ]
        );
        assert_eq!(
            messages(&schema, &spec(json!({"when": "2023-02-29T10:00:00Z"}))).len(),
            1
        );
        let cases = [
            ("date-time", "2024-01-01T10:00:00.5+01:00", true),
            ("date", "2024-12-31", true),
            ("date", "2024-13-01", false),
            ("duration", "1h30m", true),
            ("duration", "3 days", true),
            ("duration", "soon", false),
            ("ipv4", "10.0.0.1", true),
            ("ipv4", "010.0.0.1", true),
            ("ipv4", "10.0.0", false),
            ("ipv6", "fe80::1", true),
            ("ipv6", "10.0.0.1", false),
            ("cidr", "10.0.0.0/8", true),
            ("cidr", "10.0.0.0/33", false),
            ("mac", "00:1a:2b:3c:4d:5e", true),
            ("mac", "001a.2b3c.4d5e", true),
            ("mac", "00:1a:2b", false),
            ("uuid", "123e4567-e89b-12d3-a456-426614174000", true),
            ("uuid4", "123e4567-e89b-12d3-a456-426614174000", false),
            ("hostname", "example.com", true),
            ("hostname", "-bad-", false),
            ("email", "someone@example.com", true),
            ("email", "Some One <someone@example.com>", true),
            ("email", "nobody", false),
            ("uri", "https://example.com:8443/x?y", true),
            ("uri", "relative/path", false),
            ("byte", "aGVsbG8=", true),
            ("byte", "not base64!", false),
            ("bsonobjectid", "507f1f77bcf86cd799439011", true),
            ("hexcolor", "#ffF", true),
            ("rgbcolor", "rgb(255, 0, 10)", true),
            ("isbn10", "0321751043", true),
            ("isbn13", "978-0321751041", true),
            ("creditcard", "4111 1111 1111 1111", true),
            ("creditcard", "4111 1111 1111 1112", false),
            ("ssn", "123-45-6789", true),
            ("password", "anything", true),
        ];
        for (format, value, valid) in cases {
            assert_eq!(format_matches(format, value), valid, "{format} {value:?}");
        }
        assert!(is_registered_format("date-time"));
        assert!(!is_registered_format("quantity"));
    }

    #[test]
    fn patterns_use_go_ascii_classes() {
        let digits = compile_go_regex(r"^\d+$").expect("compiles");
        assert!(digits.is_match("123"));
        assert!(!digits.is_match("١٢٣"));
        let words = compile_go_regex(r"^[\w-]+\b").expect("compiles");
        assert!(words.is_match("my-name"));
        assert!(!words.is_match("é"));
        let negated = compile_go_regex(r"^[^\s]+$").expect("compiles");
        assert!(negated.is_match("a\u{a0}b"));
        assert!(!negated.is_match("a b"));
    }

    #[test]
    fn composition_keywords() {
        let schema = compile(json!({"type": "object", "properties": {
            "one": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                    "oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
            "any": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                    "anyOf": [{"required": ["a"]}, {"required": ["b"]}]},
            "all": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                    "allOf": [{"required": ["a"]}, {"required": ["b"]}]},
            "not": {"type": "object", "properties": {"c": {"type": "integer"}}, "not": {"required": ["c"]}}
        }}));
        assert_eq!(
            messages(&schema, &json!({"one": {}})),
            vec![
                r#"<nil>: Invalid value: "": "one" must validate one and only one schema (oneOf). Found none valid"#,
                "one.a: Required value",
            ]
        );
        assert_eq!(
            messages(&schema, &json!({"one": {"a": 1, "b": 2}})),
            vec![
                r#"<nil>: Invalid value: "": "one" must validate one and only one schema (oneOf). Found 2 valid alternatives"#
            ]
        );
        assert_eq!(
            messages(&schema, &json!({"one": {"b": 2}})),
            Vec::<String>::new()
        );
        assert_eq!(
            messages(&schema, &json!({"any": {}})),
            vec![
                r#"<nil>: Invalid value: "": "any" must validate at least one schema (anyOf)"#,
                "any.a: Required value",
            ]
        );
        assert_eq!(
            messages(&schema, &json!({"all": {"a": 1}})),
            vec![
                "all.b: Required value",
                r#"<nil>: Invalid value: "": "all" must validate all the schemas (allOf)"#,
            ]
        );
        assert_eq!(
            messages(&schema, &json!({"all": {}})),
            vec![
                "all.a: Required value",
                "all.b: Required value",
                r#"<nil>: Invalid value: "": "all" must validate all the schemas (allOf). None validated"#,
            ]
        );
        assert_eq!(
            messages(&schema, &json!({"not": {"c": 1}})),
            vec![r#"<nil>: Invalid value: "": "not" must not validate the schema (not)"#]
        );
    }

    #[test]
    fn nullable_enum_rejects_null_like_upstream() {
        let schema = compile(json!({"type": "object", "properties": {
            "c": {"type": "string", "nullable": true, "enum": ["a"]}
        }}));
        assert_eq!(
            messages(&schema, &json!({"c": null})),
            vec![r#"c: Unsupported value: "null": supported values: "a""#]
        );
    }

    #[test]
    fn list_type_uniqueness() {
        let schema = foo_schema();
        assert_eq!(
            messages(&schema, &spec(json!({"tags": ["a", "b", "a"]}))),
            vec![r#"spec.tags[2]: Duplicate value: "a""#]
        );
        assert_eq!(
            messages(
                &schema,
                &spec(json!({"items": [{"name": "a"}, {"name": "a", "value": 2}, {"name": "a"}]}))
            ),
            vec![r#"spec.items[1]: Duplicate value: map[string]interface {}{"name":"a"}"#]
        );
        assert_eq!(
            messages(
                &schema,
                &spec(json!({"items": [{"name": "a", "ports": [1, 1]}]}))
            ),
            vec!["spec.items[0].ports[1]: Duplicate value: 1"]
        );
    }

    #[test]
    fn embedded_resources_need_type_and_object_meta() {
        let schema = foo_schema();
        assert_eq!(
            messages(
                &schema,
                &spec(
                    json!({"template": {"kind": "pod_x", "metadata": {"name": "a/b", "namespace": "Bad"}}})
                )
            ),
            vec![
                "spec.template.apiVersion: Required value: must not be empty",
                r#"spec.template.kind: Invalid value: "pod_x": may have mixed case, but should otherwise match: a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"#,
                r#"spec.template.metadata.name: Invalid value: "a/b": may not contain '/'"#,
                r#"spec.template.metadata.namespace: Invalid value: "Bad": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"#,
            ]
        );
    }

    #[test]
    fn status_validation_prefixes_fields_but_not_messages() {
        let schema = foo_schema();
        let found: Vec<String> = schema
            .validate_status(&json!({"replicas": "x"}))
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            found,
            vec![
                r#"status.replicas: Invalid value: "string": replicas in body must be of type integer: "string""#
            ]
        );
    }

    #[test]
    fn go_rendering() {
        assert_eq!(go_float(1e6), "1e+06");
        assert_eq!(go_float(100000.0), "100000");
        assert_eq!(go_float(123456.7), "123456.7");
        assert_eq!(go_float(0.0001), "0.0001");
        assert_eq!(go_float(0.00001), "1e-05");
        assert_eq!(go_float(-3.0), "-3");
        assert_eq!(go_float(1.5e-7), "1.5e-07");
        assert_eq!(
            go_syntax(&json!({"b": [1, "x", null, 1.5], "a": true})),
            r#"map[string]interface {}{"a":true, "b":[]interface {}{1, "x", interface {}(nil), 1.5}}"#
        );
    }

    // --- list semantics -----------------------------------------------------------------------

    #[test]
    fn list_types_and_patch_strategies() {
        let schema = foo_schema();
        assert_eq!(schema.list_type(&["spec", "tags"]), ListType::Set);
        assert_eq!(
            schema.list_type(&["spec", "items"]),
            ListType::Map(vec!["name".into()])
        );
        assert_eq!(schema.list_type(&["spec", "items", "ports"]), ListType::Set);
        assert_eq!(schema.list_type(&["spec", "labels"]), ListType::Atomic);
        assert_eq!(schema.list_type(&["spec", "nope"]), ListType::Atomic);
        assert_eq!(
            schema.list_strategy(&["spec", "tags"]),
            ListStrategy::MergePrimitives
        );
        assert_eq!(
            schema.list_strategy(&["spec", "items"]),
            ListStrategy::MergeByKey("name")
        );
        assert_eq!(
            schema.list_strategy(&["spec", "name"]),
            ListStrategy::Replace
        );
        assert_eq!(
            schema.map_strategy(&["spec", "atomic"]),
            MapStrategy::Replace
        );
        assert_eq!(schema.map_strategy(&["spec", "labels"]), MapStrategy::Merge);

        let two_keys = compile(json!({"type": "object", "properties": {"l": {
            "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["a", "b"],
            "items": {"type": "object", "required": ["a", "b"], "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}
        }}}));
        assert_eq!(
            two_keys.list_type(&["l"]),
            ListType::Map(vec!["a".into(), "b".into()])
        );
        assert_eq!(two_keys.list_strategy(&["l"]), ListStrategy::Replace);
    }
}
