//! ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding objects as data: their
//! defaults as upstream's `SetDefaults_*` write them, upstream's
//! `ValidateValidatingAdmissionPolicy` / `ValidateValidatingAdmissionPolicyBinding` (the
//! cheap part: shapes, enums, names and that every expression parses), and their compiled
//! forms ([`Policy`], [`Binding`]) with each CEL expression parsed once per stored version.

use std::collections::HashSet;

use kube_cel::cel::Program;
use kube_cel::cel::common::ast::{EntryExpr, Expr, IdedExpr};
use serde_json::{Value, json};

use super::super::config::{Rule, validate_rule};
use super::super::match_conditions;
use crate::cel::literal_type_other_than;
use crate::cel::values::RESERVED_WORDS;
use crate::object::string_list;
use crate::selectors::{LabelSelector, selector_string};
use crate::validation::{self, FieldError};

/// The reasons a validation may give (upstream `supportedValidationPolicyReason`).
const SUPPORTED_REASONS: [&str; 4] = [
    "Forbidden",
    "Invalid",
    "RequestEntityTooLarge",
    "Unauthorized",
];
/// Upstream's limits on audit annotations.
const MAX_AUDIT_ANNOTATIONS: usize = 20;
const MAX_AUDIT_ANNOTATION_EXPRESSION_BYTES: usize = 5 * 1024;

/// One parsed CEL expression, with the `variables.NAME` it reads (evaluated before it runs).
#[derive(Debug)]
pub struct Expression {
    pub text: String,
    pub program: Program,
    pub variables: Vec<String>,
}

impl Expression {
    fn parse(text: &str) -> Result<Expression, String> {
        let program =
            Program::compile(text).map_err(|errors| format!("compilation failed: {errors}"))?;
        let mut variables = Vec::new();
        referenced_variables(program.expression(), &mut variables);
        Ok(Expression {
            text: text.to_string(),
            program,
            variables,
        })
    }
}

/// The names `expression` reads as `variables.NAME` (or `variables['NAME']`).
fn referenced_variables(expression: &IdedExpr, found: &mut Vec<String>) {
    let mut push = |name: &str| {
        if !found.iter().any(|f| f == name) {
            found.push(name.to_string());
        }
    };
    match &expression.expr {
        Expr::Select(select) => {
            if matches!(&select.operand.expr, Expr::Ident(name) if name == "variables") {
                push(&select.field);
            } else {
                referenced_variables(&select.operand, found);
            }
        }
        Expr::Call(call) => {
            if call.func_name == "_[_]"
                && let [target, index] = call.args.as_slice()
                && matches!(&target.expr, Expr::Ident(name) if name == "variables")
                && let Expr::Literal(kube_cel::cel::common::ast::LiteralValue::String(name)) =
                    &index.expr
            {
                push(name.inner());
                return;
            }
            for inner in call.target.iter().map(|t| &**t).chain(call.args.iter()) {
                referenced_variables(inner, found);
            }
        }
        Expr::Comprehension(comprehension) => {
            for inner in [
                &comprehension.iter_range,
                &comprehension.accu_init,
                &comprehension.loop_cond,
                &comprehension.loop_step,
                &comprehension.result,
            ] {
                referenced_variables(inner, found);
            }
        }
        Expr::List(list) => {
            for inner in &list.elements {
                referenced_variables(inner, found);
            }
        }
        Expr::Map(map) => {
            for entry in &map.entries {
                entry_exprs(&entry.expr, found);
            }
        }
        Expr::Struct(structure) => {
            for entry in &structure.entries {
                entry_exprs(&entry.expr, found);
            }
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn entry_exprs(entry: &EntryExpr, found: &mut Vec<String>) {
    match entry {
        EntryExpr::StructField(field) => referenced_variables(&field.value, found),
        EntryExpr::MapEntry(map_entry) => {
            referenced_variables(&map_entry.key, found);
            referenced_variables(&map_entry.value, found);
        }
    }
}

/// `resourceRules`/`excludeResourceRules` entry: a webhook rule plus `resourceNames`.
#[derive(Clone, Debug, Default)]
pub struct NamedRule {
    pub rule: Rule,
    pub names: Vec<String>,
}

/// `matchConstraints` of a policy, `matchResources` of a binding.
#[derive(Clone, Debug)]
pub struct MatchResources {
    pub namespace_selector: Result<LabelSelector, String>,
    pub object_selector: Result<LabelSelector, String>,
    pub resource_rules: Vec<NamedRule>,
    pub exclude_rules: Vec<NamedRule>,
    /// `matchPolicy: Exact` (else Equivalent).
    pub exact: bool,
}

/// One `validations` entry.
#[derive(Debug)]
pub struct Validation {
    pub expression: Expression,
    pub message: String,
    pub message_expression: Option<Expression>,
    /// `reason` as written; upstream's default is `Invalid`.
    pub reason: Option<String>,
}

/// A compiled ValidatingAdmissionPolicy.
#[derive(Debug)]
pub struct Policy {
    pub name: String,
    /// `failurePolicy: Ignore`.
    pub fail_open: bool,
    /// `paramKind` as (apiVersion, kind).
    pub param_kind: Option<(String, String)>,
    pub match_constraints: Option<MatchResources>,
    /// (name, expression) of each `matchConditions` entry.
    pub match_conditions: Vec<Expression>,
    pub variables: Vec<(String, Expression)>,
    pub validations: Vec<Validation>,
    /// (key, valueExpression) of each `auditAnnotations` entry.
    pub audit_annotations: Vec<(String, Expression)>,
    /// Why the policy cannot be used (an expression that does not parse, which validation
    /// keeps out of the store): upstream's configuration error, which its failure policy
    /// decides.
    pub configuration_error: Option<String>,
    /// Some expression reads `namespaceObject`: only then is the namespace read per request.
    pub uses_namespace_object: bool,
}

/// `paramRef` of a binding.
#[derive(Debug, Clone)]
pub struct ParamRef {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub selector: Option<Result<LabelSelector, String>>,
    /// `parameterNotFoundAction: Deny`.
    pub deny_if_missing: bool,
}

/// What a binding does with a failed validation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Actions {
    pub deny: bool,
    pub warn: bool,
    pub audit: bool,
}

/// A compiled ValidatingAdmissionPolicyBinding.
#[derive(Debug, Clone)]
pub struct Binding {
    pub name: String,
    pub policy_name: String,
    /// `spec.validationActions` as written, for the audit annotation of a failure.
    pub validation_actions: Vec<String>,
    pub param_ref: Option<ParamRef>,
    pub match_resources: Option<MatchResources>,
    pub actions: Actions,
}

fn text<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn selector(value: Option<&Value>) -> Result<LabelSelector, String> {
    match value {
        None | Some(Value::Null) => Ok(LabelSelector::default()),
        Some(selector) => {
            let line = selector_string(selector);
            LabelSelector::parse(&line).map_err(|e| format!("invalid label selector {line:?}: {e}"))
        }
    }
}

fn named_rules(value: Option<&Value>) -> Vec<NamedRule> {
    value
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|rule| NamedRule {
            rule: Rule::from_json(rule),
            names: string_list(rule.get("resourceNames")),
        })
        .collect()
}

fn match_resources(value: Option<&Value>) -> Option<MatchResources> {
    let value = value.filter(|v| v.is_object())?;
    Some(MatchResources {
        namespace_selector: selector(value.get("namespaceSelector")),
        object_selector: selector(value.get("objectSelector")),
        resource_rules: named_rules(value.get("resourceRules")),
        exclude_rules: named_rules(value.get("excludeResourceRules")),
        exact: text(value, "matchPolicy") == "Exact",
    })
}

/// Compiles a stored policy. Never fails: what cannot be compiled is kept as the policy's
/// configuration error.
pub fn compile_policy(object: &Value) -> Policy {
    let name = crate::object::name(object).to_string();
    let spec = object.get("spec").unwrap_or(&Value::Null);
    let mut errors = Vec::new();
    let mut parse = |what: String, text: &str| match Expression::parse(text.trim()) {
        Ok(expression) => Some(expression),
        Err(error) => {
            errors.push(format!("{what}: {error}"));
            None
        }
    };
    let list = |key: &str| {
        spec.get(key)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let match_conditions: Vec<Expression> = list("matchConditions")
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            parse(
                format!("spec.matchConditions[{i}].expression"),
                text(c, "expression"),
            )
        })
        .collect();
    let variables: Vec<(String, Expression)> = list("variables")
        .iter()
        .enumerate()
        .filter_map(|(i, v)| {
            parse(
                format!("spec.variables[{i}].expression"),
                text(v, "expression"),
            )
            .map(|e| (text(v, "name").to_string(), e))
        })
        .collect();
    let mut validations = Vec::new();
    for (i, v) in list("validations").iter().enumerate() {
        let Some(expression) = parse(
            format!("spec.validations[{i}].expression"),
            text(v, "expression"),
        ) else {
            continue;
        };
        let message_expression = match text(v, "messageExpression").trim() {
            "" => None,
            source => parse(format!("spec.validations[{i}].messageExpression"), source),
        };
        validations.push(Validation {
            expression,
            message: text(v, "message").trim().to_string(),
            message_expression,
            reason: v.get("reason").and_then(Value::as_str).map(str::to_string),
        });
    }
    let audit_annotations: Vec<(String, Expression)> = list("auditAnnotations")
        .iter()
        .enumerate()
        .filter_map(|(i, a)| {
            parse(
                format!("spec.auditAnnotations[{i}].valueExpression"),
                text(a, "valueExpression"),
            )
            .map(|e| (text(a, "key").to_string(), e))
        })
        .collect();
    let param_kind = spec.get("paramKind").filter(|p| p.is_object()).map(|p| {
        (
            text(p, "apiVersion").to_string(),
            text(p, "kind").to_string(),
        )
    });
    let uses_namespace_object = {
        let mut all = match_conditions
            .iter()
            .chain(variables.iter().map(|(_, e)| e))
            .chain(audit_annotations.iter().map(|(_, e)| e))
            .chain(validations.iter().flat_map(|v: &Validation| {
                std::iter::once(&v.expression).chain(v.message_expression.as_ref())
            }));
        all.any(|e: &Expression| e.program.references().has_variable("namespaceObject"))
    };
    Policy {
        name,
        fail_open: text(spec, "failurePolicy") == "Ignore",
        param_kind,
        match_constraints: match_resources(spec.get("matchConstraints")),
        match_conditions,
        variables,
        validations,
        audit_annotations,
        configuration_error: (!errors.is_empty()).then(|| errors.join("; ")),
        uses_namespace_object,
    }
}

/// Compiles a stored binding.
pub fn compile_binding(object: &Value) -> Binding {
    let spec = object.get("spec").unwrap_or(&Value::Null);
    let actions = string_list(spec.get("validationActions"));
    let has = |action: &str| actions.iter().any(|a| a == action);
    Binding {
        name: crate::object::name(object).to_string(),
        policy_name: text(spec, "policyName").to_string(),
        param_ref: spec
            .get("paramRef")
            .filter(|p| p.is_object())
            .map(|p| ParamRef {
                name: Some(text(p, "name").to_string()).filter(|n| !n.is_empty()),
                namespace: Some(text(p, "namespace").to_string()).filter(|n| !n.is_empty()),
                selector: p
                    .get("selector")
                    .filter(|s| !s.is_null())
                    .map(|s| selector(Some(s))),
                deny_if_missing: text(p, "parameterNotFoundAction") == "Deny",
            }),
        match_resources: match_resources(spec.get("matchResources")),
        actions: Actions {
            deny: has("Deny"),
            warn: has("Warn"),
            audit: has("Audit"),
        },
        validation_actions: actions,
    }
}

// ---------------------------------------------------------------------------------------------
// Defaults
// ---------------------------------------------------------------------------------------------

/// Upstream `SetDefaults_MatchResources` and `SetDefaults_Rule` on one match block.
fn default_match_resources(block: Option<&mut Value>) {
    let Some(block) = block.and_then(Value::as_object_mut) else {
        return;
    };
    for (key, value) in [
        ("matchPolicy", json!("Equivalent")),
        ("namespaceSelector", json!({})),
        ("objectSelector", json!({})),
    ] {
        if block.get(key).is_none_or(Value::is_null) {
            block.insert(key.to_string(), value);
        }
    }
    for rules in ["resourceRules", "excludeResourceRules"] {
        for rule in block
            .get_mut(rules)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
            .filter_map(Value::as_object_mut)
        {
            if rule.get("scope").is_none_or(Value::is_null) {
                rule.insert("scope".into(), json!("*"));
            }
        }
    }
}

/// Defaulting hook of `ValidatingAdmissionPolicy`: `failurePolicy: Fail` and the match
/// defaults.
pub fn default_policy(object: &mut Value) {
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if spec.get("failurePolicy").is_none_or(Value::is_null) {
        spec.insert("failurePolicy".into(), json!("Fail"));
    }
    default_match_resources(spec.get_mut("matchConstraints"));
}

/// Defaulting hook of `ValidatingAdmissionPolicyBinding`: the match defaults of its
/// `matchResources`, when it has them.
pub fn default_binding(object: &mut Value) {
    if let Some(spec) = object.get_mut("spec") {
        default_match_resources(spec.get_mut("matchResources"));
    }
}

// ---------------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------------

fn has_newlines(s: &str) -> bool {
    s.contains(['\n', '\r'])
}

/// An expression's parse error, and upstream's result-type error for a literal of the wrong
/// type (the only type error found without a type checker). `wanted` is `None` for any type.
fn expression_errors(source: &str, path: &str, wanted: Option<&str>) -> Option<FieldError> {
    let program = match Program::compile(source) {
        Ok(program) => program,
        Err(errors) => {
            return Some(FieldError::invalid(
                path,
                source,
                &format!("compilation failed: {errors}"),
            ));
        }
    };
    let wanted = wanted?;
    let found = literal_type_other_than(program.expression(), wanted)?;
    Some(FieldError::invalid(
        path,
        source,
        &format!("must evaluate to {wanted} but got {found}"),
    ))
}

fn validate_label_selector(value: Option<&Value>, path: &str, errors: &mut Vec<FieldError>) {
    if let Err(why) = selector(value) {
        errors.push(FieldError::invalid(
            path,
            value.map(Value::to_string).unwrap_or_default(),
            &why,
        ));
    }
}

/// Upstream `validateMatchResources`.
fn validate_match_resources(block: &Value, path: &str, errors: &mut Vec<FieldError>) {
    match block.get("matchPolicy").and_then(Value::as_str) {
        None => errors.push(FieldError::required(&format!("{path}.matchPolicy"), "")),
        Some("Equivalent" | "Exact") => {}
        Some(other) => errors.push(FieldError::not_supported(
            &format!("{path}.matchPolicy"),
            other,
            &["Equivalent", "Exact"],
        )),
    }
    for field in ["namespaceSelector", "objectSelector"] {
        match block.get(field).filter(|s| !s.is_null()) {
            None => errors.push(FieldError::required(&format!("{path}.{field}"), "")),
            Some(selector) => {
                validate_label_selector(Some(selector), &format!("{path}.{field}"), errors)
            }
        }
    }
    for field in ["resourceRules", "excludeResourceRules"] {
        for (i, rule) in block
            .get(field)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let at = format!("{path}.{field}[{i}]");
            let mut seen = HashSet::new();
            for (n, name) in string_list(rule.get("resourceNames")).iter().enumerate() {
                let here = format!("{at}.resourceNames[{n}]");
                for message in validation::is_valid_path_segment_name(name) {
                    errors.push(FieldError::invalid(&here, name.as_str(), &message));
                }
                if !seen.insert(name.clone()) {
                    errors.push(FieldError::duplicate(&here, name.as_str()));
                }
            }
            errors.extend(validate_rule(rule, &at));
        }
    }
}

/// Upstream `isCELIdentifier`.
fn is_cel_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !RESERVED_WORDS.contains(&name)
}

/// Upstream `validateParamKind`.
fn validate_param_kind(kind: &Value, errors: &mut Vec<FieldError>) {
    let path = "spec.paramKind";
    let api_version = text(kind, "apiVersion");
    if api_version.is_empty() {
        errors.push(FieldError::required(&format!("{path}.apiVersion"), ""));
    } else if api_version.matches('/').count() > 1 {
        errors.push(FieldError::invalid(
            &format!("{path}.apiVersion"),
            api_version,
            &format!("unexpected GroupVersion string: {api_version}"),
        ));
    } else {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        if !group.is_empty() {
            let problems = validation::is_dns1123_subdomain(group);
            if !problems.is_empty() {
                errors.push(FieldError::invalid(
                    &format!("{path}.apiVersion"),
                    group,
                    &problems.join(","),
                ));
            }
        }
        if version.is_empty() {
            errors.push(FieldError::invalid(
                &format!("{path}.apiVersion"),
                api_version,
                "version must be specified",
            ));
        } else {
            let problems = validation::is_dns1035_label(version);
            if !problems.is_empty() {
                errors.push(FieldError::invalid(
                    &format!("{path}.apiVersion"),
                    version,
                    &problems.join(","),
                ));
            }
        }
    }
    let kind_name = text(kind, "kind");
    if kind_name.is_empty() {
        errors.push(FieldError::required(&format!("{path}.kind"), ""));
    } else {
        let problems = validation::is_dns1035_label(&kind_name.to_lowercase());
        if !problems.is_empty() {
            errors.push(FieldError::invalid(
                &format!("{path}.kind"),
                kind_name,
                &format!(
                    "may have mixed case, but should otherwise match: {}",
                    problems.join(",")
                ),
            ));
        }
    }
}

/// Validation hook of `ValidatingAdmissionPolicy` (upstream
/// `validateValidatingAdmissionPolicySpec`; object metadata is checked by the registry).
pub fn validate_policy(object: &Value, _old: Option<&Value>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let spec = object.get("spec").unwrap_or(&Value::Null);
    match spec.get("failurePolicy").and_then(Value::as_str) {
        None => errors.push(FieldError::required("spec.failurePolicy", "")),
        Some("Fail" | "Ignore") => {}
        Some(other) => errors.push(FieldError::not_supported(
            "spec.failurePolicy",
            other,
            &["Fail", "Ignore"],
        )),
    }
    if let Some(kind) = spec.get("paramKind").filter(|k| !k.is_null()) {
        validate_param_kind(kind, &mut errors);
    }
    match spec.get("matchConstraints").filter(|m| !m.is_null()) {
        None => errors.push(FieldError::required("spec.matchConstraints", "")),
        Some(constraints) => {
            validate_match_resources(constraints, "spec.matchConstraints", &mut errors);
            if string_list_len(constraints.get("resourceRules")) == 0 {
                errors.push(FieldError::required(
                    "spec.matchConstraints.resourceRules",
                    "",
                ));
            }
        }
    }
    errors.extend(match_conditions::validate(
        spec.get("matchConditions"),
        "spec.matchConditions",
    ));
    let list = |key: &str| {
        spec.get(key)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    for (i, variable) in list("variables").iter().enumerate() {
        let at = format!("spec.variables[{i}]");
        let name = text(variable, "name");
        if name.trim().is_empty() {
            errors.push(FieldError::required(
                &format!("{at}.name"),
                "name is not specified",
            ));
        } else if !is_cel_identifier(name) {
            errors.push(FieldError::invalid(
                &format!("{at}.name"),
                name,
                "name is not a valid CEL identifier",
            ));
        }
        let expression = text(variable, "expression");
        if expression.trim().is_empty() {
            errors.push(FieldError::required(
                &format!("{at}.expression"),
                "expression is not specified",
            ));
        } else if let Some(error) = expression_errors(expression, &format!("{at}.expression"), None)
        {
            errors.push(error);
        }
    }
    let validations = list("validations");
    let annotations = list("auditAnnotations");
    if validations.is_empty() && annotations.is_empty() {
        let why = "validations or auditAnnotations must contain at least one item";
        errors.push(FieldError::required("spec.validations", why));
        errors.push(FieldError::required("spec.auditAnnotations", why));
        return errors;
    }
    for (i, v) in validations.iter().enumerate() {
        let at = format!("spec.validations[{i}]");
        let expression = text(v, "expression");
        if expression.trim().is_empty() {
            errors.push(FieldError::required(
                &format!("{at}.expression"),
                "expression is not specified",
            ));
        } else if let Some(error) =
            expression_errors(expression, &format!("{at}.expression"), Some("bool"))
        {
            errors.push(error);
        }
        let message_expression = text(v, "messageExpression");
        if !message_expression.is_empty() && message_expression.trim().is_empty() {
            errors.push(FieldError::invalid(
                &format!("{at}.messageExpression"),
                message_expression,
                "must be non-empty if specified",
            ));
        } else if !message_expression.trim().is_empty()
            && let Some(error) = expression_errors(
                message_expression,
                &format!("{at}.messageExpression"),
                Some("string"),
            )
        {
            errors.push(error);
        }
        let message = text(v, "message");
        if !message.is_empty() && message.trim().is_empty() {
            errors.push(FieldError::invalid(
                &format!("{at}.message"),
                message,
                "message must be non-empty if specified",
            ));
        } else if has_newlines(message.trim()) {
            errors.push(FieldError::invalid(
                &format!("{at}.message"),
                message,
                "message must not contain line breaks",
            ));
        }
        if let Some(reason) = v.get("reason").and_then(Value::as_str)
            && !SUPPORTED_REASONS.contains(&reason)
        {
            errors.push(FieldError::not_supported(
                &format!("{at}.reason"),
                reason,
                &SUPPORTED_REASONS,
            ));
        }
    }
    if annotations.len() > MAX_AUDIT_ANNOTATIONS {
        errors.push(FieldError::invalid_literal(
            "spec.auditAnnotations",
            format!("{} items", annotations.len()),
            &format!("must not have more than {MAX_AUDIT_ANNOTATIONS} auditAnnotations"),
        ));
    }
    let policy_name = crate::object::name(object);
    let mut keys = HashSet::new();
    for (i, annotation) in annotations.iter().enumerate() {
        let at = format!("spec.auditAnnotations[{i}]");
        let key = text(annotation, "key");
        if policy_name.is_empty() {
            errors.push(FieldError::invalid(
                &format!("{at}.key"),
                key,
                "requires metadata.name be non-empty",
            ));
        } else {
            let qualified = format!("{policy_name}/{key}");
            for problem in validation::is_qualified_name(&qualified) {
                errors.push(FieldError::invalid(
                    &format!("{at}.key"),
                    qualified.as_str(),
                    &problem,
                ));
            }
        }
        let value = text(annotation, "valueExpression");
        if value.trim().is_empty() {
            errors.push(FieldError::required(
                &format!("{at}.valueExpression"),
                "valueExpression is not specified",
            ));
        } else if value.trim().len() > MAX_AUDIT_ANNOTATION_EXPRESSION_BYTES {
            errors.push(FieldError::required(
                &format!("{at}.valueExpression"),
                &format!("must not exceed {MAX_AUDIT_ANNOTATION_EXPRESSION_BYTES} bytes in length"),
            ));
        } else if let Some(error) =
            expression_errors(value.trim(), &format!("{at}.valueExpression"), None)
        {
            errors.push(error);
        }
        if !keys.insert(key) {
            errors.push(FieldError::duplicate(&format!("{at}.key"), key));
        }
    }
    errors
}

fn string_list_len(value: Option<&Value>) -> usize {
    value.and_then(Value::as_array).map_or(0, Vec::len)
}

/// Validation hook of `ValidatingAdmissionPolicyBinding` (upstream
/// `validateValidatingAdmissionPolicyBindingSpec`).
pub fn validate_binding(object: &Value, _old: Option<&Value>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let spec = object.get("spec").unwrap_or(&Value::Null);
    let policy_name = text(spec, "policyName");
    if policy_name.is_empty() {
        errors.push(FieldError::required("spec.policyName", ""));
    } else {
        for problem in validation::is_dns1123_subdomain(policy_name) {
            errors.push(FieldError::invalid(
                "spec.policyName",
                policy_name,
                &problem,
            ));
        }
    }
    if let Some(param_ref) = spec.get("paramRef").filter(|p| !p.is_null()) {
        let path = "spec.paramRef";
        let name = text(param_ref, "name");
        let has_selector = param_ref.get("selector").is_some_and(|s| !s.is_null());
        if !name.is_empty() {
            for problem in validation::is_valid_path_segment_name(name) {
                errors.push(FieldError::invalid(&format!("{path}.name"), name, &problem));
            }
            if has_selector {
                errors.push(FieldError::forbidden(
                    &format!("{path}.name"),
                    "name and selector are mutually exclusive",
                ));
            }
        }
        if has_selector {
            validate_label_selector(
                param_ref.get("selector"),
                &format!("{path}.selector"),
                &mut errors,
            );
            if !name.is_empty() {
                errors.push(FieldError::forbidden(
                    &format!("{path}.selector"),
                    "name and selector are mutually exclusive",
                ));
            }
        }
        let namespace = text(param_ref, "namespace");
        if !namespace.is_empty() {
            for problem in validation::is_valid_path_segment_name(namespace) {
                errors.push(FieldError::invalid(
                    &format!("{path}.namespace"),
                    namespace,
                    &problem,
                ));
            }
        }
        if name.is_empty() && !has_selector {
            errors.push(FieldError::required(
                path,
                "one of name or selector must be specified",
            ));
        }
        match text(param_ref, "parameterNotFoundAction") {
            "" => errors.push(FieldError::required(
                &format!("{path}.parameterNotFoundAction"),
                "",
            )),
            "Deny" | "Allow" => {}
            other => errors.push(FieldError::not_supported(
                &format!("{path}.parameterNotFoundAction"),
                other,
                &["Deny", "Allow"],
            )),
        }
    }
    if let Some(block) = spec.get("matchResources").filter(|m| !m.is_null()) {
        validate_match_resources(block, "spec.matchResources", &mut errors);
    }
    let actions = string_list(spec.get("validationActions"));
    let mut seen = HashSet::new();
    for (i, action) in actions.iter().enumerate() {
        let at = format!("spec.validationActions[{i}]");
        if !["Audit", "Deny", "Warn"].contains(&action.as_str()) {
            errors.push(FieldError::not_supported(
                &at,
                action.as_str(),
                &["Audit", "Deny", "Warn"],
            ));
        }
        if !seen.insert(action.as_str()) {
            errors.push(FieldError::duplicate(&at, action.as_str()));
        }
    }
    if seen.contains("Deny") && seen.contains("Warn") {
        errors.push(FieldError::invalid_literal(
            "spec.validationActions",
            format!("{actions:?}"),
            "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
        ));
    }
    if seen.is_empty() {
        errors.push(FieldError::required(
            "spec.validationActions",
            "at least one validation action is required",
        ));
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(spec: Value) -> Value {
        let mut object = json!({"metadata": {"name": "p.example.com"}, "spec": spec});
        default_policy(&mut object);
        object
    }

    fn rules() -> Value {
        json!({"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]})
    }

    fn messages(errors: &[FieldError]) -> Vec<String> {
        errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_well_formed_policy_is_defaulted_valid_and_compiled() {
        let object = policy(json!({
            "matchConstraints": rules(),
            "variables": [{"name": "replicas", "expression": "object.spec.replicas"}],
            "validations": [{"expression": "variables.replicas <= 5", "messageExpression": "'too many: ' + string(variables.replicas)", "reason": "Invalid"}],
        }));
        assert_eq!(object["spec"]["failurePolicy"], "Fail");
        assert_eq!(
            object["spec"]["matchConstraints"]["matchPolicy"],
            "Equivalent"
        );
        assert_eq!(
            object["spec"]["matchConstraints"]["resourceRules"][0]["scope"],
            "*"
        );
        assert!(validate_policy(&object, None).is_empty());
        let compiled = compile_policy(&object);
        assert!(compiled.configuration_error.is_none());
        assert_eq!(
            compiled.validations[0].expression.variables,
            vec!["replicas".to_string()]
        );
        assert!(compiled.validations[0].message_expression.is_some());
        assert!(!compiled.uses_namespace_object);
        let reading = compile_policy(&policy(json!({
            "matchConstraints": rules(),
            "validations": [{"expression": "true", "messageExpression": "namespaceObject.metadata.name"}],
        })));
        assert!(reading.uses_namespace_object);
    }

    #[test]
    fn policy_validation_refuses_what_upstream_refuses() {
        let object = policy(json!({
            "validations": [
                {"expression": "object.spec.replicas <="},
                {"expression": "'text'", "reason": "Teapot", "message": " "},
                {"expression": "true", "messageExpression": "1"},
            ],
            "variables": [{"name": "1bad", "expression": "1"}],
            "paramKind": {"apiVersion": "v1"},
        }));
        let found = messages(&validate_policy(&object, None));
        let expected = [
            "spec.paramKind.kind: Required value",
            "spec.matchConstraints: Required value",
            "spec.variables[0].name: Invalid value: \"1bad\": name is not a valid CEL identifier",
            "spec.validations[1].expression: Invalid value: \"'text'\": must evaluate to bool but got string",
            "spec.validations[1].message: Invalid value: \" \": message must be non-empty if specified",
            "spec.validations[1].reason: Unsupported value: \"Teapot\": supported values: \"Forbidden\", \"Invalid\", \"RequestEntityTooLarge\", \"Unauthorized\"",
            "spec.validations[2].messageExpression: Invalid value: \"1\": must evaluate to string but got int",
        ];
        for wanted in expected {
            assert!(found.iter().any(|f| f == wanted), "{wanted} in {found:#?}");
        }
        assert!(
            found.iter().any(|f| f.starts_with(
                "spec.validations[0].expression: Invalid value: \"object.spec.replicas <=\": compilation failed: ERROR: <input>:1:"
            )),
            "{found:#?}"
        );
        let empty = policy(json!({"matchConstraints": rules()}));
        assert_eq!(
            messages(&validate_policy(&empty, None)),
            vec![
                "spec.validations: Required value: validations or auditAnnotations must contain at least one item",
                "spec.auditAnnotations: Required value: validations or auditAnnotations must contain at least one item",
            ]
        );
    }

    #[test]
    fn binding_validation_refuses_what_upstream_refuses() {
        let cases = [
            (
                json!({"validationActions": ["Deny"]}),
                "spec.policyName: Required value",
            ),
            (
                json!({"policyName": "p"}),
                "spec.validationActions: Required value: at least one validation action is required",
            ),
            (
                json!({"policyName": "p", "validationActions": ["Deny", "Warn"]}),
                "must not contain both Deny and Warn",
            ),
            (
                json!({"policyName": "p", "validationActions": ["Audit", "Audit"]}),
                "spec.validationActions[1]: Duplicate value: \"Audit\"",
            ),
            (
                json!({"policyName": "p", "validationActions": ["Deny"], "paramRef": {"parameterNotFoundAction": "Deny"}}),
                "spec.paramRef: Required value: one of name or selector must be specified",
            ),
            (
                json!({"policyName": "p", "validationActions": ["Deny"], "paramRef": {"name": "x"}}),
                "spec.paramRef.parameterNotFoundAction: Required value",
            ),
            (
                json!({"policyName": "p", "validationActions": ["Deny"], "paramRef": {"name": "x", "selector": {}, "parameterNotFoundAction": "Allow"}}),
                "spec.paramRef.name: Forbidden: name and selector are mutually exclusive",
            ),
        ];
        for (spec, wanted) in cases {
            let object = json!({"metadata": {"name": "b"}, "spec": spec});
            let found = messages(&validate_binding(&object, None));
            assert!(
                found.iter().any(|f| f.contains(wanted)),
                "{wanted} in {found:#?}"
            );
        }
        let good = json!({"metadata": {"name": "b"}, "spec": {"policyName": "p", "validationActions": ["Warn", "Audit"]}});
        assert!(validate_binding(&good, None).is_empty());
    }

    #[test]
    fn variable_references_are_found_in_selects_indexes_and_macros() {
        let parsed = Expression::parse(
            "variables.a > 1 && variables['b'] == 'x' && [1].all(i, i < variables.c) && variables.a < 9",
        )
        .expect("parses");
        assert_eq!(parsed.variables, vec!["a", "b", "c"]);
    }
}
