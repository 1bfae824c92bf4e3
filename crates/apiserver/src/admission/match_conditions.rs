//! A webhook's `matchConditions`: CEL expressions over the request that decide whether the
//! webhook is called, checked when a configuration is written and evaluated per request after
//! its rules and selectors matched (upstream `admission/plugin/webhook/matchconditions`).
//!
//! # Guarantees
//! - Writing a configuration refuses what upstream's validation refuses: more than 64
//!   conditions, a missing or repeated name, a name that is not a qualified name, an empty
//!   expression, an expression that does not parse (`compilation failed: …`) or is a literal
//!   that is not a bool (`must evaluate to bool but got string`).
//! - Conditions are parsed once, when the configuration is read into the webhook cache.
//! - Per request, as upstream: any condition that is `false` skips the webhook (whatever the
//!   others did); otherwise a condition that failed to evaluate follows the webhook's
//!   `failurePolicy`: `Ignore` skips the webhook, `Fail` refuses the request with upstream's
//!   403 `<resource> "<name>" is forbidden: expression '<expr>' resulted in error: <error>`;
//!   otherwise the webhook is called.
//! - The variables are upstream's: `object` and `oldObject` (null when absent) as the webhook
//!   would receive them, and `request`, the `AdmissionRequest` without its objects and with
//!   an empty uid.
//!
//! # Assumptions
//! - Configurations passed [`validate`] before they were stored.
//!
//! # Caveats
//! - `authorizer` (and `authorizer.requestResource`) is not provided: a condition that uses
//!   it fails to evaluate, and the failure policy decides.
//! - No static type checking: an expression upstream refuses for its type (a field that does
//!   not exist on `request`, a result that is not a bool) is accepted and fails when it runs;
//!   a non-bool result counts as an evaluation error.
//! - No cost limit: a condition is one expression over one request's objects, bounded by the
//!   request size; upstream's per-expression cost limit is not metered.

use std::sync::Arc;

use kube_cel::cel::{self, Program};
use serde_json::Value;

use crate::cel::{error_text, literal_type_other_than, plain_value, with_base_context};
use crate::validation::{self, FieldError};

/// Upstream's limit on conditions per webhook.
const MAX_MATCH_CONDITIONS: usize = 64;

/// The parsed `matchConditions` of one webhook.
#[derive(Debug)]
pub struct MatchConditions {
    conditions: Vec<Condition>,
}

#[derive(Debug)]
struct Condition {
    expression: String,
    program: Program,
}

/// What the conditions decided for one request.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    Call,
    Skip,
    /// Evaluation failed under `failurePolicy: Fail`: the request is refused with this error.
    Refuse(String),
}

/// Upstream's checks of `matchConditions` at `path` (`webhooks[0].matchConditions`).
pub fn validate(conditions: Option<&Value>, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let Some(conditions) = conditions.and_then(Value::as_array) else {
        return errors;
    };
    if conditions.len() > MAX_MATCH_CONDITIONS {
        errors.push(FieldError::too_many(
            path,
            Some(conditions.len()),
            MAX_MATCH_CONDITIONS,
        ));
    }
    let mut names = std::collections::HashSet::new();
    for (i, condition) in conditions.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let expression = condition
            .get("expression")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .trim();
        if expression.is_empty() {
            errors.push(FieldError::required(&format!("{at}.expression"), ""));
        } else if let Err(detail) = parse(expression) {
            errors.push(FieldError::invalid(
                &format!("{at}.expression"),
                expression,
                &detail,
            ));
        }
        let name = condition
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if name.is_empty() {
            errors.push(FieldError::required(&format!("{at}.name"), ""));
        } else {
            for problem in validation::is_qualified_name(name) {
                errors.push(FieldError::invalid(&format!("{at}.name"), name, &problem));
            }
            if !names.insert(name) {
                errors.push(FieldError::duplicate(&format!("{at}.name"), name));
            }
        }
    }
    errors
}

/// Parses one expression, with upstream's detail when it cannot be a condition (also used for
/// the `matchConditions` of ValidatingAdmissionPolicies).
pub(crate) fn parse(expression: &str) -> Result<Program, String> {
    let program =
        Program::compile(expression).map_err(|errors| format!("compilation failed: {errors}"))?;
    // Without a type checker, only a literal's type is known before it runs.
    if let Some(type_name) = literal_type_other_than(program.expression(), "bool") {
        return Err(format!("must evaluate to bool but got {type_name}"));
    }
    Ok(program)
}

impl MatchConditions {
    /// Parses a webhook's `matchConditions`; `None` when it has none.
    ///
    /// # Errors
    ///
    /// The first condition that does not parse (validation keeps such configurations out
    /// of the store).
    pub fn compile(conditions: Option<&Value>) -> Result<Option<Arc<Self>>, String> {
        let Some(list) = conditions
            .and_then(Value::as_array)
            .filter(|l| !l.is_empty())
        else {
            return Ok(None);
        };
        let mut parsed = Vec::with_capacity(list.len());
        for condition in list {
            let expression = condition
                .get("expression")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .trim()
                .to_string();
            let program = parse(&expression)
                .map_err(|detail| format!("matchCondition {expression:?}: {detail}"))?;
            parsed.push(Condition {
                expression,
                program,
            });
        }
        Ok(Some(Arc::new(MatchConditions { conditions: parsed })))
    }

    /// Evaluates the conditions over `review_request` (the `request` of the AdmissionReview the
    /// webhook would receive); `fail_open` is `failurePolicy: Ignore`.
    pub fn decide(&self, review_request: &Value, fail_open: bool) -> Decision {
        let object = review_request.get("object").unwrap_or(&Value::Null);
        let old_object = review_request.get("oldObject").unwrap_or(&Value::Null);
        // Upstream leaves the objects out of `request` and its uid empty.
        let mut request = review_request.clone();
        if let Some(map) = request.as_object_mut() {
            map.remove("object");
            map.remove("oldObject");
            map.insert("uid".to_string(), Value::from(""));
        }
        let mut errors = Vec::new();
        let decision = with_base_context(|base| {
            let mut scope = base.new_inner_scope();
            scope.add_variable_from_value("object", plain_value(object));
            scope.add_variable_from_value("oldObject", plain_value(old_object));
            scope.add_variable_from_value("request", plain_value(&request));
            for condition in &self.conditions {
                match condition.program.execute(&scope) {
                    Ok(cel::Value::Bool(true)) => {}
                    // Any false condition skips the webhook, errors or not.
                    Ok(cel::Value::Bool(false)) => return Some(Decision::Skip),
                    Ok(other) => errors.push(format!(
                        "expression '{}' resulted in error: no such overload: expected a bool, got {}",
                        condition.expression,
                        other.type_of()
                    )),
                    Err(error) => errors.push(format!(
                        "expression '{}' resulted in error: {}",
                        condition.expression,
                        error_text(&error)
                    )),
                }
            }
            None
        });
        if let Some(decision) = decision {
            return decision;
        }
        match (errors.len(), fail_open) {
            (0, _) => Decision::Call,
            (_, true) => Decision::Skip,
            (1, false) => Decision::Refuse(errors.remove(0)),
            (_, false) => Decision::Refuse(format!("[{}]", errors.join(", "))),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn conditions(expressions: &[(&str, &str)]) -> Arc<MatchConditions> {
        let list: Vec<Value> = expressions
            .iter()
            .map(|(name, expression)| json!({"name": name, "expression": expression}))
            .collect();
        match MatchConditions::compile(Some(&Value::Array(list))) {
            Ok(Some(compiled)) => compiled,
            other => panic!("the conditions compile: {other:?}"),
        }
    }

    fn request(object: Value) -> Value {
        json!({
            "uid": "u1",
            "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": "c1",
            "namespace": "default",
            "operation": "CREATE",
            "userInfo": {"username": "alice", "groups": ["dev"]},
            "object": object,
            "oldObject": null,
            "dryRun": false
        })
    }

    #[test]
    fn conditions_see_object_old_object_and_request() {
        let matching = conditions(&[
            ("label", "object.metadata.labels.team == 'a'"),
            (
                "create",
                "request.operation == 'CREATE' && oldObject == null",
            ),
            ("user", "'dev' in request.userInfo.groups"),
            (
                "request",
                "request.uid == '' && !has(request.object) && request.name == 'c1'",
            ),
        ]);
        let object = json!({"metadata": {"name": "c1", "labels": {"team": "a"}}});
        assert_eq!(matching.decide(&request(object), false), Decision::Call);
        let other = json!({"metadata": {"name": "c1", "labels": {"team": "b"}}});
        assert_eq!(matching.decide(&request(other), false), Decision::Skip);
    }

    #[test]
    fn an_error_follows_the_failure_policy_unless_a_condition_is_false() {
        let failing = conditions(&[("missing", "object.spec.x == 1")]);
        let object = json!({"metadata": {"name": "c1"}});
        assert_eq!(
            failing.decide(&request(object.clone()), true),
            Decision::Skip
        );
        assert_eq!(
            failing.decide(&request(object.clone()), false),
            Decision::Refuse(
                "expression 'object.spec.x == 1' resulted in error: no such key: spec".into()
            )
        );
        let with_false = conditions(&[("missing", "object.spec.x == 1"), ("no", "false")]);
        assert_eq!(with_false.decide(&request(object), false), Decision::Skip);
    }

    #[test]
    fn validation_refuses_what_upstream_refuses() {
        let mut list: Vec<Value> = (0..65)
            .map(|i| json!({"name": format!("c{i}"), "expression": "true"}))
            .collect();
        list[1] = json!({"name": "c0", "expression": "object.x >"});
        list[2] = json!({"name": "bad name!", "expression": "'text'"});
        list[3] = json!({"name": "", "expression": " "});
        let errors: Vec<String> =
            validate(Some(&Value::Array(list)), "webhooks[0].matchConditions")
                .iter()
                .map(ToString::to_string)
                .collect();
        assert_eq!(
            errors[0],
            "webhooks[0].matchConditions: Too many: 65: must have at most 64 items"
        );
        assert!(
            errors[1].starts_with(
                "webhooks[0].matchConditions[1].expression: Invalid value: \"object.x >\": compilation failed: ERROR: <input>:1:"
            ),
            "{}",
            errors[1]
        );
        assert_eq!(
            errors[2],
            "webhooks[0].matchConditions[1].name: Duplicate value: \"c0\""
        );
        assert_eq!(
            errors[3],
            "webhooks[0].matchConditions[2].expression: Invalid value: \"'text'\": must evaluate to bool but got string"
        );
        assert!(
            errors[4]
                .starts_with("webhooks[0].matchConditions[2].name: Invalid value: \"bad name!\": "),
            "{}",
            errors[4]
        );
        assert_eq!(
            errors[5],
            "webhooks[0].matchConditions[3].expression: Required value"
        );
        assert_eq!(
            errors[6],
            "webhooks[0].matchConditions[3].name: Required value"
        );
        assert_eq!(errors.len(), 7, "{errors:?}");
    }
}
