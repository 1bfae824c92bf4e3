//! Evaluating one policy for one request and one param (upstream `validating/validator.go`):
//! its `matchConditions`, then every validation and audit annotation, with `variables`
//! evaluated on first use and at most once.

use std::collections::HashMap;
use std::sync::Arc;

use kube_cel::cel;
use kube_cel::cel::objects::{Key, Map as CelMap};

use super::compile::{Expression, Policy};
use crate::cel::{error_text, usable_message, with_base_context};

/// Upstream's limit on an audit annotation's value (`maxAuditAnnotationValueLength`).
const MAX_AUDIT_ANNOTATION_VALUE_BYTES: usize = 10 * 1024;

/// The variables every expression of a policy sees, besides `variables`.
#[derive(Clone, Debug)]
pub struct Inputs {
    pub object: cel::Value,
    pub old_object: cel::Value,
    pub request: cel::Value,
    pub params: cel::Value,
    pub namespace_object: cel::Value,
}

/// What one validation (or the match conditions) decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The request is refused (subject to the binding's actions); false: admitted.
    pub deny: bool,
    /// An expression failed to evaluate (the failure policy chose `deny`).
    pub error: bool,
    pub message: String,
    /// `reason` of the validation; `None` is upstream's `Invalid`.
    pub reason: Option<String>,
    /// Position of the validation, for the audit record.
    pub index: usize,
}

/// An audit annotation's outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Annotation {
    /// `<policy>/<key>` = value.
    Publish { key: String, value: String },
    /// Evaluation failed under `failurePolicy: Fail`: the request is refused.
    Error(String),
}

/// What a policy decided for one request and param.
#[derive(Debug, Default)]
pub struct Outcome {
    pub decisions: Vec<Decision>,
    pub annotations: Vec<Annotation>,
}

/// One evaluation's state: the inputs and the variables computed so far.
struct Scope<'p> {
    policy: &'p Policy,
    inputs: &'p Inputs,
    /// Each variable's value or error, once computed.
    computed: HashMap<String, Result<cel::Value, String>>,
}

impl Scope<'_> {
    /// The value of variable `name`, evaluated now if it was not yet; `None` when the
    /// policy declares no such variable (the expression's own lookup then fails).
    fn variable(&mut self, name: &str, depth: usize) -> Option<Result<cel::Value, String>> {
        if let Some(done) = self.computed.get(name) {
            return Some(done.clone());
        }
        let policy = self.policy;
        let expression = policy
            .variables
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, e)| e)?;
        // A variable may only read variables declared before it; the depth bound keeps a
        // (refused by upstream, possible here) cycle from recursing forever.
        let result = if depth > policy.variables.len() {
            Err(format!("composited variable {name:?} refers to itself"))
        } else {
            self.run_at(expression, depth + 1)
        };
        self.computed.insert(name.to_string(), result.clone());
        Some(result)
    }

    fn run(&mut self, expression: &Expression) -> Result<cel::Value, String> {
        self.run_at(expression, 0)
    }

    /// Runs `expression` with the variables it reads; an error of one of them is its error,
    /// as upstream's lazily evaluated variables fail the expression that reads them.
    fn run_at(&mut self, expression: &Expression, depth: usize) -> Result<cel::Value, String> {
        let mut variables = HashMap::new();
        for name in &expression.variables {
            match self.variable(name, depth) {
                Some(Ok(value)) => {
                    variables.insert(Key::String(Arc::new(name.clone())), value);
                }
                Some(Err(error)) => return Err(error),
                None => {}
            }
        }
        let inputs = self.inputs;
        with_base_context(|base| {
            let mut scope = base.new_inner_scope();
            scope.add_variable_from_value("object", inputs.object.clone());
            scope.add_variable_from_value("oldObject", inputs.old_object.clone());
            scope.add_variable_from_value("request", inputs.request.clone());
            scope.add_variable_from_value("params", inputs.params.clone());
            scope.add_variable_from_value("namespaceObject", inputs.namespace_object.clone());
            scope.add_variable_from_value(
                "variables",
                cel::Value::Map(CelMap {
                    map: Arc::new(variables),
                }),
            );
            expression.program.execute(&scope)
        })
        .map_err(|error| error_text(&error))
    }
}

/// Upstream's wording of an expression that failed to evaluate.
fn resulted_in_error(expression: &Expression, error: &str) -> String {
    format!(
        "expression '{}' resulted in error: {error}",
        expression.text
    )
}

/// Evaluates `policy` for one request and param: `None` when its `matchConditions` skip it.
pub fn evaluate(policy: &Policy, inputs: &Inputs) -> Option<Outcome> {
    let mut scope = Scope {
        policy,
        inputs,
        computed: HashMap::new(),
    };
    // Match conditions: any false skips the policy; otherwise errors follow the failure
    // policy (upstream `matchconditions.Matcher`).
    let mut errors = Vec::new();
    for condition in &policy.match_conditions {
        match scope.run(condition) {
            Ok(cel::Value::Bool(true)) => {}
            Ok(_) => return None,
            Err(error) => errors.push(resulted_in_error(condition, &error)),
        }
    }
    if !errors.is_empty() {
        if policy.fail_open {
            return None;
        }
        let message = if errors.len() == 1 {
            errors.remove(0)
        } else {
            format!("[{}]", errors.join(", "))
        };
        return Some(Outcome {
            decisions: vec![Decision {
                deny: true,
                error: true,
                message,
                reason: None,
                index: 0,
            }],
            annotations: Vec::new(),
        });
    }
    let mut outcome = Outcome::default();
    for (index, validation) in policy.validations.iter().enumerate() {
        let decision = match scope.run(&validation.expression) {
            Ok(cel::Value::Bool(true)) => Decision {
                deny: false,
                error: false,
                message: String::new(),
                reason: None,
                index,
            },
            Err(error) => Decision {
                deny: !policy.fail_open,
                error: true,
                message: resulted_in_error(&validation.expression, &error),
                reason: None,
                index,
            },
            // Upstream refuses a non-bool validation at write time (type checking); here it
            // fails as a false one would.
            Ok(_) => {
                // messageExpression first; a result that is not a usable string, or an
                // error, falls back to `message`, then to the expression.
                let evaluated = validation
                    .message_expression
                    .as_ref()
                    .and_then(|m| scope.run(m).ok())
                    .and_then(|v| usable_message(&v));
                let message = evaluated
                    .or_else(|| Some(validation.message.clone()).filter(|m| !m.is_empty()))
                    .unwrap_or_else(|| {
                        format!("failed expression: {}", validation.expression.text.trim())
                    });
                Decision {
                    deny: true,
                    error: false,
                    message,
                    reason: Some(
                        validation
                            .reason
                            .clone()
                            .unwrap_or_else(|| "Invalid".to_string()),
                    ),
                    index,
                }
            }
        };
        outcome.decisions.push(decision);
    }
    for (key, expression) in &policy.audit_annotations {
        let error = match scope.run(expression) {
            Ok(cel::Value::String(value)) => {
                let mut value = value.to_string();
                if value.len() > MAX_AUDIT_ANNOTATION_VALUE_BYTES {
                    let mut end = MAX_AUDIT_ANNOTATION_VALUE_BYTES;
                    while !value.is_char_boundary(end) {
                        end -= 1;
                    }
                    value.truncate(end);
                }
                outcome.annotations.push(Annotation::Publish {
                    key: format!("{}/{key}", policy.name),
                    value,
                });
                continue;
            }
            Ok(cel::Value::Null) => continue,
            Ok(other) => format!(
                "valueExpression '{}' resulted in unsupported return type: {}. Return type must be either string or null.",
                expression.text,
                other.type_of()
            ),
            Err(error) => resulted_in_error(expression, &error),
        };
        if !policy.fail_open {
            outcome.annotations.push(Annotation::Error(error));
        }
    }
    Some(outcome)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::admission::policy::compile::compile_policy;
    use crate::cel::plain_value;

    fn inputs(object: serde_json::Value, params: serde_json::Value) -> Inputs {
        Inputs {
            object: plain_value(&object),
            old_object: cel::Value::Null,
            request: plain_value(&json!({"operation": "CREATE", "userInfo": {"username": "u"}})),
            params: plain_value(&params),
            namespace_object: plain_value(
                &json!({"metadata": {"name": "default", "labels": {"env": "prod"}}}),
            ),
        }
    }

    fn policy(spec: serde_json::Value) -> Policy {
        let compiled = compile_policy(&json!({"metadata": {"name": "p"}, "spec": spec}));
        assert!(compiled.configuration_error.is_none(), "{compiled:?}");
        compiled
    }

    fn deployment(replicas: i64) -> serde_json::Value {
        json!({"metadata": {"name": "d", "labels": {}}, "spec": {"replicas": replicas}})
    }

    #[test]
    fn a_false_validation_denies_with_the_message_upstream_picks() {
        let p = policy(json!({"validations": [
            {"expression": "object.spec.replicas <= 5"},
            {"expression": "object.spec.replicas <= 4", "message": " at most four "},
            {"expression": "object.spec.replicas <= 3", "messageExpression": "'got ' + string(object.spec.replicas)", "reason": "Forbidden"},
            {"expression": "object.spec.replicas <= 2", "messageExpression": "1", "message": "fallback"},
        ]}));
        let outcome = evaluate(&p, &inputs(deployment(6), json!(null))).expect("matches");
        let found: Vec<(bool, &str, Option<&str>)> = outcome
            .decisions
            .iter()
            .map(|d| (d.deny, d.message.as_str(), d.reason.as_deref()))
            .collect();
        assert_eq!(
            found,
            vec![
                (
                    true,
                    "failed expression: object.spec.replicas <= 5",
                    Some("Invalid")
                ),
                (true, "at most four", Some("Invalid")),
                (true, "got 6", Some("Forbidden")),
                (true, "fallback", Some("Invalid")),
            ]
        );
        let allowed = evaluate(&p, &inputs(deployment(1), json!(null))).expect("matches");
        assert!(allowed.decisions.iter().all(|d| !d.deny));
    }

    #[test]
    fn variables_are_computed_once_and_their_errors_reach_their_readers() {
        let p = policy(json!({
            "variables": [
                {"name": "limit", "expression": "int(params.data.max)"},
                {"name": "over", "expression": "object.spec.replicas > variables.limit"},
                {"name": "broken", "expression": "object.spec.missing"},
            ],
            "validations": [
                {"expression": "!variables.over", "messageExpression": "'limit is ' + string(variables.limit)"},
                {"expression": "variables.broken == 1"},
            ],
        }));
        let outcome =
            evaluate(&p, &inputs(deployment(6), json!({"data": {"max": "5"}}))).expect("matches");
        assert_eq!(outcome.decisions[0].message, "limit is 5");
        assert_eq!(
            outcome.decisions[1].message,
            "expression 'variables.broken == 1' resulted in error: no such key: missing"
        );
        assert!(outcome.decisions[1].error && outcome.decisions[1].deny);
    }

    #[test]
    fn match_conditions_skip_or_fail_by_the_failure_policy() {
        let spec = |policy: &str| {
            json!({"failurePolicy": policy,
                "matchConditions": [
                    {"name": "prod", "expression": "namespaceObject.metadata.labels.env == 'prod'"},
                    {"name": "broken", "expression": "object.nope == 1"},
                ],
                "validations": [{"expression": "false"}]})
        };
        let failing = evaluate(&policy(spec("Fail")), &inputs(deployment(1), json!(null)))
            .expect("an error under Fail decides");
        assert_eq!(
            failing.decisions[0].message,
            "expression 'object.nope == 1' resulted in error: no such key: nope"
        );
        assert!(evaluate(&policy(spec("Ignore")), &inputs(deployment(1), json!(null))).is_none());
        let skipped = policy(json!({
            "matchConditions": [{"name": "dev", "expression": "namespaceObject.metadata.labels.env == 'dev'"}],
            "validations": [{"expression": "false"}]}));
        assert!(evaluate(&skipped, &inputs(deployment(1), json!(null))).is_none());
    }

    #[test]
    fn runtime_errors_follow_the_failure_policy_and_annotations_are_published() {
        let mut p = policy(json!({
            "validations": [{"expression": "object.spec.nope > 1"}],
            "auditAnnotations": [
                {"key": "replicas", "valueExpression": "string(object.spec.replicas)"},
                {"key": "none", "valueExpression": "null"},
                {"key": "bad", "valueExpression": "1"},
            ],
        }));
        let outcome = evaluate(&p, &inputs(deployment(2), json!(null))).expect("matches");
        assert!(outcome.decisions[0].deny && outcome.decisions[0].error);
        assert_eq!(
            outcome.annotations,
            vec![
                Annotation::Publish {
                    key: "p/replicas".into(),
                    value: "2".into()
                },
                Annotation::Error("valueExpression '1' resulted in unsupported return type: int. Return type must be either string or null.".into()),
            ]
        );
        p.fail_open = true;
        let outcome = evaluate(&p, &inputs(deployment(2), json!(null))).expect("matches");
        assert!(!outcome.decisions[0].deny && outcome.decisions[0].error);
        assert_eq!(outcome.annotations.len(), 1);
    }
}
