//! CRD validation rules (`x-kubernetes-validations`, CEL): compiled once per CRD version next to
//! its structural schema, evaluated on every create and update of a custom object.
//!
//! [`CelValidator::compile`] runs upstream's CRD-time checks of each rule (`rule` present,
//! `message`/`messageExpression`/`reason`/`fieldPath` well formed, the expressions parse, no
//! `oldSelf` below a list that is not `x-kubernetes-list-type: map`) and keeps the parsed
//! programs in a tree that parallels the schema. [`CelValidator::validate`] walks an object (and
//! the stored object on updates) along that tree and evaluates each node's rules with `self`
//! bound to the value at the node, as kube-apiserver 1.33 does after pruning, defaulting and
//! OpenAPI validation. Expressions are parsed and run by the `cel` crate with the Kubernetes
//! libraries of [`kube_cel`] (lists, sets, regex, URLs, quantity, IP/CIDR, semver, format).
//!
//! Values reach rules through [`crate::cel::values`] (JSON to CEL, as upstream's
//! `UnstructuredToVal`), with the rule tree as their schema.
//!
//! Facts follow Kubernetes 1.33: apiextensions-apiserver `pkg/apiserver/schema/cel`
//! (`validation.go`, `compilation.go`) and `pkg/apis/apiextensions/validation`.
//!
//! Guarantees:
//! - A failed rule yields upstream's field error: `spec: Invalid value: "object": <message>`,
//!   `failed rule: <rule>` without a message, `messageExpression`'s result when it evaluates to
//!   a non-empty single-line string, the error type of `reason`, at `fieldPath` when given.
//! - Transition rules (those that mention `oldSelf`) run on updates only, and only where the
//!   old object has a value that correlates with the new one: object properties, map entries
//!   (unless `x-kubernetes-map-type: atomic`) and items of `x-kubernetes-list-type: map` lists
//!   matched by their keys. `optionalOldSelf: true` rules also run without an old value, with
//!   `oldSelf` an optional.
//! - Ratcheting as upstream's (default on in 1.33): on updates, a failure of a rule without
//!   `oldSelf` whose value (or nearest correlated ancestor) is unchanged is a `Warning`, not an
//!   error.
//! - The programs are built once per CRD version; a request only converts values and runs them.
//! - Work per request is bounded (see Caveats for how the bound is computed).
//!
//! Assumptions:
//! - The schema has passed [`crate::crd::schema::StructuralSchema::compile`]'s structural checks,
//!   so `x-kubernetes-validations` only appear on the structural spine (never in `allOf` & co.).
//! - The object was pruned, defaulted and found valid against the OpenAPI schema first; when
//!   that found a blocking error the caller reports upstream's "some validation rules were not
//!   checked" error instead of calling [`CelValidator::validate`] (see [`blocking_error`]).
//!
//! Caveats (differences from upstream):
//! - No static type checking: the `cel` crate parses expressions but does not check them
//!   against the schema's types. A rule upstream refuses at CRD time for a type error (an
//!   unknown field, `self.replicas + 'x'`, a rule that does not return a bool) is accepted here
//!   and fails when it runs, as `<error> evaluating rule: <rule>` on the object. Only a literal
//!   that is not a bool (a rule) or not a string (a messageExpression) is refused at CRD time.
//! - Runtime error wording comes from the `cel` crate; `no such key: <k>` and
//!   `no such overload` are reworded as cel-go prints them, other errors keep the crate's text.
//!   Compile errors use the crate's `ERROR: <input>:line:col: …` rendering, whose message
//!   wording differs from cel-go's ANTLR messages.
//! - Cost. Upstream estimates each rule's worst-case cost at CRD time (refusing rules over
//!   `StaticEstimatedCostLimit`) and meters the actual cost of every evaluation (a per-call
//!   limit of 1 000 000 and a per-request budget of 10 000 000). The `cel` crate meters
//!   nothing, so Finale estimates each evaluation's cost before running it from the value it
//!   runs on: `n`, the number of JSON nodes of `self` (and `oldSelf`), and for a rule with
//!   comprehensions nested `d ≥ 2` deep, `max(n, m^d)` where `m` is the longest list or map
//!   in the value. An evaluation estimated above 1 000 000 is refused with upstream's per-call
//!   message; estimates add up against the 10 000 000 budget, after which upstream's "running
//!   out of cost budget" error stops validation. No rule is refused at CRD time for its cost.
//! - `self` of a `set` or `map` list is a plain CEL list: equality is order-sensitive where
//!   upstream's list types compare sets and map lists regardless of order.
//! - The value printed for a rule in a CRD-time error is Go's `%#v` of upstream's
//!   `ValidationRule`; where Go prints a pointer address (`reason` or `optionalOldSelf` set),
//!   Finale prints `0xc000000000`.
//! - Rules inside `allOf`, `anyOf`, `oneOf` and `not` are refused by the structural checks, as
//!   in 1.33; nothing here evaluates them.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube_cel::cel::common::ast::{EntryExpr, Expr, IdedExpr};
use kube_cel::cel::objects::OptionalValue;
use kube_cel::cel::{self, ExecutionError, Program};
use serde_json::Value;

use crate::cel::values::{ValueFormat, ValueSchema, to_cel};
pub use crate::cel::{PER_CALL_LIMIT, RUNTIME_COST_BUDGET};
use crate::cel::{error_text, usable_message, with_base_context};
use crate::validation::{FieldError, FieldErrorReason, go_quote};

/// The `reason`s a rule may give, sorted as upstream lists them.
const SUPPORTED_REASONS: [&str; 4] = [
    "FieldValueDuplicate",
    "FieldValueForbidden",
    "FieldValueInvalid",
    "FieldValueRequired",
];

/// The error upstream adds instead of running the rules when OpenAPI validation already found
/// a blocking error (a wrong type, a missing required field, an unsupported enum value, a value
/// too long or with too many items): `<nil>: Invalid value: "null": some validation rules…`.
/// `None` when no error in `errors` blocks the rules.
pub fn blocking_error(errors: &[FieldError]) -> Option<FieldError> {
    let blocks = errors.iter().any(|error| {
        matches!(
            error.reason,
            FieldErrorReason::NotSupported
                | FieldErrorReason::Required
                | FieldErrorReason::TooLong
                | FieldErrorReason::TooMany
                | FieldErrorReason::TypeInvalid
        )
    });
    blocks.then(|| {
        FieldError::invalid(
            "<nil>",
            "null",
            "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
        )
    })
}

// ---------------------------------------------------------------------------------------------
// The compiled tree
// ---------------------------------------------------------------------------------------------

/// The compiled `x-kubernetes-validations` of one CRD version's schema.
#[derive(Debug)]
pub struct CelValidator {
    root: RuleNode,
}

/// One schema node: what value conversion needs to know, its rules, and its children.
#[derive(Debug, Default)]
struct RuleNode {
    /// `type:` as written (`object`, `array`…); upstream's bad value in rule errors.
    type_name: String,
    format: ValueFormat,
    /// The root of a resource (the custom object, or an embedded resource): `self` sees
    /// `apiVersion`, `kind` and only `metadata.name` and `metadata.generateName`.
    resource_root: bool,
    rules: Vec<CompiledRule>,
    properties: BTreeMap<String, RuleNode>,
    additional: Option<Box<RuleNode>>,
    /// `additionalProperties` present (a schema or `true`): keys are data, not field names.
    is_map: bool,
    items: Option<Box<RuleNode>>,
    /// `x-kubernetes-list-type: map` keys: the items that correlate with old items.
    list_map_keys: Option<Vec<String>>,
    /// `x-kubernetes-map-type: atomic`: entries do not correlate with old entries.
    atomic_map: bool,
    /// Rules on this node or below: the walk skips subtrees without any.
    has_rules: bool,
}

impl ValueSchema for RuleNode {
    fn type_name(&self) -> &str {
        &self.type_name
    }
    fn format(&self) -> ValueFormat {
        self.format
    }
    fn resource_root(&self) -> bool {
        self.resource_root
    }
    fn items(&self) -> Option<&Self> {
        self.items.as_deref()
    }
    fn property(&self, name: &str) -> Option<&Self> {
        self.properties.get(name)
    }
    fn additional(&self) -> Option<&Self> {
        self.additional.as_deref()
    }
    fn is_plain_map(&self) -> bool {
        self.is_map && self.properties.is_empty()
    }
}

/// One rule as written.
#[derive(Debug, Default, Clone)]
struct RuleSource {
    rule: String,
    message: String,
    message_expression: String,
    reason: Option<String>,
    field_path: String,
    optional_old_self: Option<bool>,
}

impl RuleSource {
    fn parse(value: &Value) -> RuleSource {
        let text = |name: &str| {
            value
                .get(name)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        RuleSource {
            rule: text("rule"),
            message: text("message"),
            message_expression: text("messageExpression"),
            reason: value
                .get("reason")
                .and_then(Value::as_str)
                .map(str::to_string),
            field_path: text("fieldPath"),
            optional_old_self: value.get("optionalOldSelf").and_then(Value::as_bool),
        }
    }

    /// Go's `%#v` of upstream's internal `apiextensions.ValidationRule`, the bad value of
    /// CRD-time compile errors.
    fn go_syntax(&self) -> String {
        const ADDRESS: &str = "0xc000000000";
        let reason = match &self.reason {
            Some(_) => format!("(*apiextensions.FieldValueErrorReason)({ADDRESS})"),
            None => "(*apiextensions.FieldValueErrorReason)(nil)".to_string(),
        };
        let optional_old_self = match self.optional_old_self {
            Some(_) => format!("(*bool)({ADDRESS})"),
            None => "(*bool)(nil)".to_string(),
        };
        format!(
            "apiextensions.ValidationRule{{Rule:{}, Message:{}, MessageExpression:{}, Reason:{reason}, FieldPath:{}, OptionalOldSelf:{optional_old_self}}}",
            go_quote(&self.rule),
            go_quote(&self.message),
            go_quote(&self.message_expression),
            go_quote(&self.field_path),
        )
    }

    /// Upstream `ruleErrorString`: the message, else the rule.
    fn error_string(&self) -> &str {
        let message = self.message.trim();
        if message.is_empty() {
            self.rule.trim()
        } else {
            message
        }
    }

    /// Upstream `ruleMessageOrDefault`.
    fn message_or_default(&self) -> String {
        let message = self.message.trim();
        if message.is_empty() {
            format!("failed rule: {}", self.rule.trim())
        } else {
            message.to_string()
        }
    }
}

/// A rule with its programs.
#[derive(Debug)]
struct CompiledRule {
    source: RuleSource,
    program: Program,
    message_program: Option<Program>,
    /// Mentions `oldSelf`: a transition rule.
    uses_old_self: bool,
    /// How deep comprehensions (`all`, `exists`, `map`, `filter`…) nest, for the cost estimate.
    comprehension_depth: u32,
    /// `fieldPath` as a field path below the node (`spec.x` style), when given.
    field_path: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// Compilation (CRD create and update)
// ---------------------------------------------------------------------------------------------

impl CelValidator {
    /// Compiles the rules of `schema` (an `openAPIV3Schema` that passed the structural checks).
    /// `None` when the schema has no rules.
    ///
    /// # Errors
    ///
    /// Upstream's CRD validation errors for the rules, rooted at `field_root` (for example
    /// `spec.versions[0].schema.openAPIV3Schema`), e.g.
    /// `….x-kubernetes-validations[0].rule: Invalid value: apiextensions.ValidationRule{…}:
    /// compilation failed: ERROR: <input>:1:8: …`.
    pub fn compile(schema: &Value, field_root: &str) -> Result<Option<Self>, Vec<FieldError>> {
        let mut errors = Vec::new();
        let root = compile_node(schema, field_root, true, None, &mut errors);
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(root.has_rules.then_some(CelValidator { root }))
    }
}

fn compile_node(
    schema: &Value,
    path: &str,
    is_root: bool,
    uncorrelatable_within: Option<&str>,
    errors: &mut Vec<FieldError>,
) -> RuleNode {
    let text = |name: &str| schema.get(name).and_then(Value::as_str).unwrap_or_default();
    let flag = |name: &str| schema.get(name).and_then(Value::as_bool) == Some(true);
    // The schema's root and every embedded resource are resource roots (`metadata` trimmed).
    let resource_root = is_root || flag("x-kubernetes-embedded-resource");
    let int_or_string = flag("x-kubernetes-int-or-string");
    let mut node = RuleNode {
        type_name: text("type").to_string(),
        format: if int_or_string {
            ValueFormat::Plain
        } else {
            match (text("type"), text("format")) {
                ("string", "date-time" | "datetime" | "date") => ValueFormat::DateTime,
                ("string", "duration") => ValueFormat::Duration,
                ("string", "byte") => ValueFormat::Bytes,
                _ => ValueFormat::Plain,
            }
        },
        resource_root,
        atomic_map: text("x-kubernetes-map-type") == "atomic",
        list_map_keys: (text("x-kubernetes-list-type") == "map")
            .then(|| crate::object::string_list(schema.get("x-kubernetes-list-map-keys"))),
        ..RuleNode::default()
    };
    if let Some(Value::Object(properties)) = schema.get("properties") {
        for (name, property) in properties {
            let here = format!("{path}.properties[{name}]");
            let child = compile_node(property, &here, false, uncorrelatable_within, errors);
            node.properties.insert(name.clone(), child);
        }
    }
    match schema.get("additionalProperties") {
        Some(additional @ Value::Object(_)) => {
            node.is_map = true;
            let here = format!("{path}.additionalProperties");
            node.additional = Some(Box::new(compile_node(
                additional,
                &here,
                false,
                uncorrelatable_within,
                errors,
            )));
        }
        Some(Value::Bool(true)) => node.is_map = true,
        _ => {}
    }
    if let Some(items @ Value::Object(_)) = schema.get("items") {
        let here = format!("{path}.items");
        // Items of any list but a map list cannot be matched with old items (upstream
        // `forbidOldSelfValidations` names the first such list's items).
        let within = match uncorrelatable_within {
            Some(outer) => Some(outer.to_string()),
            None if node.list_map_keys.is_none() => Some(here.clone()),
            None => None,
        };
        node.items = Some(Box::new(compile_node(
            items,
            &here,
            false,
            within.as_deref(),
            errors,
        )));
    }
    if let Some(Value::Array(rules)) = schema.get("x-kubernetes-validations") {
        let before = errors.len();
        let sources: Vec<RuleSource> = rules.iter().map(RuleSource::parse).collect();
        for (i, source) in sources.iter().enumerate() {
            rule_shape_errors(source, schema, &rule_path(path, i), errors);
        }
        // Upstream compiles only when the schema at this level and below is otherwise valid.
        if errors.len() == before {
            for (i, source) in sources.into_iter().enumerate() {
                if let Some(rule) = compile_rule(
                    source,
                    schema,
                    &rule_path(path, i),
                    uncorrelatable_within,
                    errors,
                ) {
                    node.rules.push(rule);
                }
            }
        }
    }
    node.has_rules = !node.rules.is_empty()
        || node.properties.values().any(|p| p.has_rules)
        || node.additional.as_ref().is_some_and(|a| a.has_rules)
        || node.items.as_ref().is_some_and(|i| i.has_rules);
    node
}

fn rule_path(path: &str, i: usize) -> String {
    format!("{path}.x-kubernetes-validations[{i}]")
}

fn has_newlines(s: &str) -> bool {
    s.contains(['\n', '\r'])
}

/// Upstream's checks of a rule's fields, before anything is compiled.
fn rule_shape_errors(
    source: &RuleSource,
    schema: &Value,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    let at = |name: &str| format!("{path}.{name}");
    let rule = source.rule.trim();
    let message = source.message.trim();
    if rule.is_empty() {
        errors.push(FieldError::required(&at("rule"), "rule is not specified"));
    } else if !source.message.is_empty() && message.is_empty() {
        errors.push(FieldError::invalid(
            &at("message"),
            source.message.as_str(),
            "message must be non-empty if specified",
        ));
    } else if has_newlines(message) {
        errors.push(FieldError::invalid(
            &at("message"),
            source.message.as_str(),
            "message must not contain line breaks",
        ));
    } else if has_newlines(rule) && message.is_empty() {
        errors.push(FieldError::required(
            &at("message"),
            "message must be specified if rule contains line breaks",
        ));
    }
    if !source.message_expression.is_empty() && source.message_expression.trim().is_empty() {
        errors.push(FieldError::required(
            &at("messageExpression"),
            "messageExpression must be non-empty if specified",
        ));
    }
    if let Some(reason) = &source.reason
        && !SUPPORTED_REASONS.contains(&reason.as_str())
    {
        errors.push(FieldError::not_supported(
            &at("reason"),
            reason.as_str(),
            &SUPPORTED_REASONS,
        ));
    }
    let field_path = source.field_path.as_str();
    if !field_path.is_empty() && field_path.trim().is_empty() {
        errors.push(FieldError::invalid(
            &at("fieldPath"),
            field_path,
            "fieldPath must be non-empty if specified",
        ));
    }
    if has_newlines(field_path) {
        errors.push(FieldError::invalid(
            &at("fieldPath"),
            field_path,
            "fieldPath must not contain line breaks",
        ));
    }
    if !field_path.is_empty() && normalize_field_path(field_path, schema).is_err() {
        errors.push(FieldError::invalid(
            &at("fieldPath"),
            field_path,
            "fieldPath must be a valid path",
        ));
    }
}

/// Parses one rule (and its messageExpression), reporting upstream's CRD-time errors.
fn compile_rule(
    source: RuleSource,
    schema: &Value,
    path: &str,
    uncorrelatable_within: Option<&str>,
    errors: &mut Vec<FieldError>,
) -> Option<CompiledRule> {
    let rule_field = format!("{path}.rule");
    let program = match Program::compile(&source.rule) {
        Ok(program) => program,
        Err(parse_errors) => {
            errors.push(FieldError::invalid_literal(
                &rule_field,
                source.go_syntax(),
                &format!("compilation failed: {parse_errors}"),
            ));
            return None;
        }
    };
    if is_literal_other_than(program.expression(), LiteralKind::Bool) {
        errors.push(FieldError::invalid_literal(
            &rule_field,
            source.go_syntax(),
            "cel expression must evaluate to a bool",
        ));
        return None;
    }
    let mut failed = false;
    let message_program = if source.message_expression.trim().is_empty() {
        None
    } else {
        let field = format!("{path}.messageExpression");
        match Program::compile(&source.message_expression) {
            Ok(program) if is_literal_other_than(program.expression(), LiteralKind::String) => {
                errors.push(FieldError::invalid_literal(
                    &field,
                    source.go_syntax(),
                    "messageExpression must evaluate to a string",
                ));
                failed = true;
                None
            }
            Ok(program) => Some(program),
            Err(parse_errors) => {
                errors.push(FieldError::invalid_literal(
                    &field,
                    source.go_syntax(),
                    &format!("messageExpression compilation failed: {parse_errors}"),
                ));
                failed = true;
                None
            }
        }
    };
    let uses_old_self = program.references().has_variable("oldSelf");
    if uses_old_self {
        if let Some(within) = uncorrelatable_within {
            errors.push(FieldError::invalid(
                &rule_field,
                source.rule.as_str(),
                &format!(
                    "oldSelf cannot be used on the uncorrelatable portion of the schema within {within}"
                ),
            ));
            failed = true;
        }
    } else if let Some(optional) = source.optional_old_self {
        errors.push(FieldError::invalid_literal(
            &format!("{path}.optionalOldSelf"),
            optional.to_string(),
            "may not be set if oldSelf is not used in rule",
        ));
        failed = true;
    }
    if failed {
        return None;
    }
    // The shape checks accepted the path, so it resolves here too.
    let field_path = Some(source.field_path.trim())
        .filter(|p| !p.is_empty())
        .and_then(|p| normalize_field_path(p, schema).ok());
    Some(CompiledRule {
        comprehension_depth: comprehension_depth(program.expression()),
        field_path,
        message_program,
        uses_old_self,
        program,
        source,
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum LiteralKind {
    Bool,
    String,
}

/// A whole expression that is a literal of another kind than `wanted` (`1`, `'text'`): the
/// only result-type errors found without a type checker.
fn is_literal_other_than(expression: &IdedExpr, wanted: LiteralKind) -> bool {
    use kube_cel::cel::common::ast::LiteralValue;
    match &expression.expr {
        Expr::Literal(literal) => {
            let kind = match literal {
                LiteralValue::Boolean(_) => Some(LiteralKind::Bool),
                LiteralValue::String(_) => Some(LiteralKind::String),
                _ => None,
            };
            kind != Some(wanted)
        }
        Expr::List(_) | Expr::Map(_) => true,
        _ => false,
    }
}

/// The deepest nesting of comprehensions in an expression.
fn comprehension_depth(expression: &IdedExpr) -> u32 {
    let deepest = |exprs: &mut dyn Iterator<Item = &IdedExpr>| {
        exprs.map(comprehension_depth).max().unwrap_or(0)
    };
    match &expression.expr {
        Expr::Comprehension(comprehension) => {
            let range = comprehension_depth(&comprehension.iter_range);
            let body = deepest(
                &mut [
                    &comprehension.accu_init,
                    &comprehension.loop_cond,
                    &comprehension.loop_step,
                    &comprehension.result,
                ]
                .into_iter(),
            );
            range.max(body + 1)
        }
        Expr::Call(call) => deepest(&mut call.target.iter().map(|t| &**t).chain(call.args.iter())),
        Expr::List(list) => deepest(&mut list.elements.iter()),
        Expr::Map(map) => deepest(
            &mut map
                .entries
                .iter()
                .flat_map(|entry| entry_exprs(&entry.expr)),
        ),
        Expr::Struct(structure) => deepest(
            &mut structure
                .entries
                .iter()
                .flat_map(|entry| entry_exprs(&entry.expr)),
        ),
        Expr::Select(select) => comprehension_depth(&select.operand),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => 0,
    }
}

fn entry_exprs(entry: &EntryExpr) -> Vec<&IdedExpr> {
    match entry {
        EntryExpr::StructField(field) => vec![&field.value],
        EntryExpr::MapEntry(entry) => vec![&entry.key, &entry.value],
    }
}

// ---------------------------------------------------------------------------------------------
// fieldPath
// ---------------------------------------------------------------------------------------------

/// One step of a rule's `fieldPath`: `.name` or `['name']`.
fn field_path_steps(path: &str) -> Result<Vec<String>, String> {
    let mut steps = Vec::new();
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            if end == 0 {
                return Err("unexpected end of JSON path".into());
            }
            steps.push(after[..end].to_string());
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix("['") {
            let mut name = String::new();
            let mut chars = after.char_indices();
            let mut closed = None;
            while let Some((at, c)) = chars.next() {
                match c {
                    '\\' => match chars.next() {
                        Some((_, escaped)) => name.push(match escaped {
                            'n' => '\n',
                            't' => '\t',
                            'r' => '\r',
                            other => other,
                        }),
                        None => return Err("invalid string literal".into()),
                    },
                    '\'' => {
                        closed = Some(at);
                        break;
                    }
                    other => name.push(other),
                }
            }
            let end = closed.ok_or("unexpected end of JSON path")?;
            rest = after[end + 1..]
                .strip_prefix(']')
                .ok_or("expected ] after the quoted name")?;
            steps.push(name);
        } else {
            return Err(format!("expected [ or . but got: {rest}"));
        }
    }
    Ok(steps)
}

/// Upstream `ValidFieldPath`: `fieldPath` resolved against the schema, as a field path.
fn normalize_field_path(path: &str, schema: &Value) -> Result<String, String> {
    let mut node = schema;
    let mut out = String::new();
    for step in field_path_steps(path)? {
        if let Some(property) = node.get("properties").and_then(|p| p.get(&step)) {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&step);
            node = property;
        } else if node.get("properties").is_none()
            && let Some(additional @ Value::Object(_)) = node.get("additionalProperties")
        {
            out.push_str(&format!("[{step}]"));
            node = additional;
        } else {
            return Err("does not refer to a valid field".into());
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Evaluation (every write of a custom object)
// ---------------------------------------------------------------------------------------------

/// What the rules found in one write.
#[derive(Debug, Default)]
pub struct CelOutcome {
    /// Field errors, in upstream's wording; any makes the write a 422.
    pub errors: Vec<FieldError>,
    /// Failures ratcheted on an unchanged value, as `Warning` header texts.
    pub warnings: Vec<String>,
}

/// Per-write state: the cost budget left and what was found.
struct Evaluation {
    remaining: u64,
    exhausted: bool,
    outcome: CelOutcome,
}

impl CelValidator {
    /// Runs every rule on `object` (pruned, defaulted and OpenAPI-valid); `old` is the stored
    /// object on updates.
    pub fn validate(&self, object: &Value, old: Option<&Value>) -> CelOutcome {
        let mut evaluation = Evaluation {
            remaining: RUNTIME_COST_BUDGET,
            exhausted: false,
            outcome: CelOutcome::default(),
        };
        let ratchet = old.map(|old| (object, old));
        walk(&self.root, object, old, "", ratchet, &mut evaluation);
        evaluation.outcome
    }
}

/// Validates `value` at `node` and below. `old` is the correlated old value; `ratchet` the
/// nearest correlated (new, old) pair at or above the node, whose equality ratchets failures.
fn walk<'v>(
    node: &RuleNode,
    value: &'v Value,
    old: Option<&'v Value>,
    path: &str,
    ratchet: Option<(&'v Value, &'v Value)>,
    evaluation: &mut Evaluation,
) {
    if !node.has_rules || value.is_null() || evaluation.exhausted {
        return;
    }
    let old = old.filter(|old| !old.is_null());
    let ratchet = match old {
        Some(old) => Some((value, old)),
        None => ratchet,
    };
    if !node.rules.is_empty() {
        evaluate_rules(node, value, old, path, ratchet, evaluation);
    }
    match value {
        Value::Object(map) => {
            let correlates = !node.atomic_map;
            for (name, child) in map {
                if evaluation.exhausted {
                    return;
                }
                let old_child = old
                    .filter(|_| correlates)
                    .and_then(|old| old.get(name.as_str()));
                if let Some(property) = node.properties.get(name) {
                    let here = if path.is_empty() {
                        name.clone()
                    } else {
                        format!("{path}.{name}")
                    };
                    walk(property, child, old_child, &here, ratchet, evaluation);
                } else if let Some(additional) = &node.additional {
                    let here = format!("{path}[{name}]");
                    walk(additional, child, old_child, &here, ratchet, evaluation);
                }
            }
        }
        Value::Array(items) => {
            let Some(item_node) = &node.items else {
                return;
            };
            for (i, item) in items.iter().enumerate() {
                if evaluation.exhausted {
                    return;
                }
                let old_item = match (&node.list_map_keys, old) {
                    (Some(keys), Some(Value::Array(old_items))) => old_items
                        .iter()
                        .find(|candidate| same_map_keys(keys, item, candidate)),
                    _ => None,
                };
                walk(
                    item_node,
                    item,
                    old_item,
                    &format!("{path}[{i}]"),
                    ratchet,
                    evaluation,
                );
            }
        }
        _ => {}
    }
}

/// Two items of a map list are the same entry when all key fields are equal.
fn same_map_keys(keys: &[String], item: &Value, candidate: &Value) -> bool {
    keys.iter()
        .all(|key| item.get(key.as_str()) == candidate.get(key.as_str()))
}

/// The size of a value for the cost estimate: JSON nodes, and the longest list or map.
fn measure(value: &Value) -> (u64, u64) {
    match value {
        Value::Array(items) => items.iter().fold((1, items.len() as u64), |acc, item| {
            let (nodes, longest) = measure(item);
            (acc.0 + nodes, acc.1.max(longest))
        }),
        Value::Object(map) => map.values().fold((1, map.len() as u64), |acc, item| {
            let (nodes, longest) = measure(item);
            (acc.0 + nodes, acc.1.max(longest))
        }),
        _ => (1, 0),
    }
}

/// The estimated cost of one evaluation (see the module's Caveats).
fn estimated_cost(depth: u32, nodes: u64, longest: u64) -> u64 {
    if depth >= 2 {
        nodes.max(longest.saturating_pow(depth))
    } else {
        nodes
    }
}

fn evaluate_rules(
    node: &RuleNode,
    value: &Value,
    old: Option<&Value>,
    path: &str,
    ratchet: Option<(&Value, &Value)>,
    evaluation: &mut Evaluation,
) {
    let field = if path.is_empty() { "<nil>" } else { path };
    let self_value = to_cel(value, Some(node), node.resource_root);
    let old_value = old.map(|old| to_cel(old, Some(node), node.resource_root));
    let (mut nodes, mut longest) = measure(value);
    if let Some(old) = old {
        let (old_nodes, old_longest) = measure(old);
        nodes += old_nodes;
        longest = longest.max(old_longest);
    }
    // Upstream ratchets a failure when the value (or its nearest correlated ancestor) equals
    // its old value; the comparison runs at most once per node.
    let mut unchanged: Option<bool> = None;
    for rule in &node.rules {
        let optional_old_self = rule.source.optional_old_self == Some(true);
        if rule.uses_old_self && old.is_none() && !optional_old_self {
            continue;
        }
        let cost = estimated_cost(rule.comprehension_depth, nodes, longest);
        if !charge(evaluation, cost, field, &node.type_name, &rule.source) {
            return;
        }
        let result = with_base_context(|base| {
            let mut scope = base.new_inner_scope();
            scope.add_variable_from_value("self", self_value.clone());
            if optional_old_self {
                let optional = match &old_value {
                    Some(old) => OptionalValue::of(old.clone()),
                    None => OptionalValue::none(),
                };
                scope.add_variable_from_value("oldSelf", cel::Value::Opaque(Arc::new(optional)));
            } else if let Some(old) = &old_value {
                scope.add_variable_from_value("oldSelf", old.clone());
            }
            let result = rule.program.execute(&scope);
            let failed = matches!(result, Ok(ref v) if *v != cel::Value::Bool(true));
            // The message is computed in the same scope, and only for a failure. Upstream
            // evaluates it with the non-optional oldSelf; Finale uses the rule's own scope.
            let message = match (&rule.message_program, failed) {
                (Some(program), true) => Some(program.execute(&scope)),
                _ => None,
            };
            (result, message)
        });
        let (result, message) = result;
        let detail = match result {
            Ok(cel::Value::Bool(true)) => continue,
            Err(error) => {
                evaluation.outcome.errors.push(FieldError::invalid(
                    field,
                    node.type_name.as_str(),
                    &runtime_error_message(&error, &rule.source),
                ));
                continue;
            }
            Ok(_) => {
                if message.is_some()
                    && !charge(evaluation, nodes, field, &node.type_name, &rule.source)
                {
                    return;
                }
                message
                    .and_then(evaluated_message)
                    .unwrap_or_else(|| rule.source.message_or_default())
            }
        };
        let error_field = match &rule.field_path {
            Some(relative) if path.is_empty() => relative.clone(),
            Some(relative) => format!("{path}.{relative}"),
            None => field.to_string(),
        };
        let error = error_for_reason(
            &error_field,
            &node.type_name,
            &detail,
            rule.source.reason.as_deref(),
        );
        let ratcheted = !rule.uses_old_self
            && *unchanged.get_or_insert_with(|| ratchet.is_some_and(|(new, old)| new == old));
        if ratcheted {
            evaluation.outcome.warnings.push(error.to_string());
        } else {
            evaluation.outcome.errors.push(error);
        }
    }
}

/// Takes `cost` from the budget, or records upstream's error and stops validation.
fn charge(
    evaluation: &mut Evaluation,
    cost: u64,
    field: &str,
    type_name: &str,
    source: &RuleSource,
) -> bool {
    let message = if cost > PER_CALL_LIMIT {
        format!(
            "'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: {}",
            source.error_string()
        )
    } else if cost > evaluation.remaining {
        "validation failed due to running out of cost budget, no further validation rules will be run".to_string()
    } else {
        evaluation.remaining -= cost;
        return true;
    };
    evaluation
        .outcome
        .errors
        .push(FieldError::invalid(field, type_name, &message));
    evaluation.exhausted = true;
    false
}

/// A messageExpression's result, when upstream would use it: a string that is non-empty,
/// single-line and at most 5 KiB once trimmed.
fn evaluated_message(result: cel::ResolveResult) -> Option<String> {
    match result {
        Ok(value) => usable_message(&value),
        Err(error) => {
            tracing::debug!(%error, "messageExpression evaluation failed");
            None
        }
    }
}

/// Upstream `fieldErrorForReason`.
fn error_for_reason(
    field: &str,
    type_name: &str,
    detail: &str,
    reason: Option<&str>,
) -> FieldError {
    match reason {
        Some("FieldValueForbidden") => FieldError::forbidden(field, detail),
        Some("FieldValueRequired") => FieldError::required(field, detail),
        Some("FieldValueDuplicate") => FieldError::duplicate(field, type_name),
        _ => FieldError::invalid(field, type_name, detail),
    }
}

/// Upstream's wording of an evaluation error, with cel-go's texts for the errors both share.
fn runtime_error_message(error: &ExecutionError, source: &RuleSource) -> String {
    let rule = source.error_string();
    match error {
        ExecutionError::NoSuchOverload => format!(
            "'no such overload': call arguments did not match a supported operator, function or macro signature for rule: {rule}"
        ),
        other => format!("{} evaluating rule: {rule}", error_text(other)),
    }
}

#[cfg(test)]
mod tests;
