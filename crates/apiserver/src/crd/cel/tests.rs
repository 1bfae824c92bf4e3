use serde_json::{Value, json};

use super::*;
use crate::cel::values::parse_go_duration;

const ROOT: &str = "spec.versions[0].schema.openAPIV3Schema";

/// A Widget schema whose `spec` carries `rules`, with a few typed properties.
fn widget_schema(rules: Value) -> Value {
    json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "x-kubernetes-validations": rules,
                "properties": {
                    "replicas": {"type": "integer"},
                    "name": {"type": "string"},
                    "min": {"type": "integer"},
                    "max": {"type": "integer"},
                    "x-y": {"type": "string"},
                    "timeout": {"type": "string", "format": "duration"},
                    "quantity": {"type": "string"},
                    "items": {"type": "array", "items": {"type": "integer"}}
                }
            }
        }
    })
}

fn compiled(schema: &Value) -> CelValidator {
    match CelValidator::compile(schema, ROOT) {
        Ok(Some(validator)) => validator,
        Ok(None) => panic!("the schema has rules"),
        Err(errors) => panic!("the rules should compile: {errors:?}"),
    }
}

fn compile_errors(schema: &Value) -> Vec<String> {
    match CelValidator::compile(schema, ROOT) {
        Ok(_) => panic!("the rules should not compile"),
        Err(errors) => errors.iter().map(ToString::to_string).collect(),
    }
}

fn object(spec: Value) -> Value {
    json!({
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w1", "labels": {"a": "b"}},
        "spec": spec
    })
}

fn errors_of(validator: &CelValidator, new: &Value, old: Option<&Value>) -> Vec<String> {
    validator
        .validate(new, old)
        .errors
        .iter()
        .map(ToString::to_string)
        .collect()
}

// ---- compilation ----

#[test]
fn a_schema_without_rules_compiles_to_nothing() {
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object"}}});
    assert!(matches!(CelValidator::compile(&schema, ROOT), Ok(None)));
}

#[test]
fn a_rule_that_does_not_parse_is_refused_with_upstreams_path_and_value() {
    let errors = compile_errors(&widget_schema(json!([{"rule": "self.replicas >"}])));
    assert_eq!(errors.len(), 1, "{errors:?}");
    let expected_prefix = format!(
        "{ROOT}.properties[spec].x-kubernetes-validations[0].rule: Invalid value: \
         apiextensions.ValidationRule{{Rule:\"self.replicas >\", Message:\"\", MessageExpression:\"\", \
         Reason:(*apiextensions.FieldValueErrorReason)(nil), FieldPath:\"\", OptionalOldSelf:(*bool)(nil)}}: \
         compilation failed: ERROR: <input>:1:"
    );
    assert!(errors[0].starts_with(&expected_prefix), "{}", errors[0]);
}

#[test]
fn a_message_expression_that_does_not_parse_is_refused() {
    let errors = compile_errors(&widget_schema(
        json!([{"rule": "true", "messageExpression": "'a' +"}]),
    ));
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with(&format!(
            "{ROOT}.properties[spec].x-kubernetes-validations[0].messageExpression: Invalid value: apiextensions.ValidationRule{{"
        )),
        "{}",
        errors[0]
    );
    assert!(
        errors[0].contains(": messageExpression compilation failed: ERROR: <input>:1:"),
        "{}",
        errors[0]
    );
}

#[test]
fn literal_results_of_the_wrong_type_are_refused() {
    let errors = compile_errors(&widget_schema(json!([{"rule": "1"}])));
    assert!(
        errors[0].ends_with(": cel expression must evaluate to a bool"),
        "{errors:?}"
    );
}

#[test]
fn rule_fields_are_checked_as_upstream_does() {
    let errors = compile_errors(&widget_schema(json!([
        {"rule": " "},
        {"rule": "true", "reason": "FieldValueTooLong"},
        {"rule": "true", "fieldPath": ".nope"},
        {"rule": "true", "message": "two\nlines"},
        {"rule": "true", "messageExpression": "  "},
    ])));
    let at = |i: usize, rest: &str| {
        format!("{ROOT}.properties[spec].x-kubernetes-validations[{i}].{rest}")
    };
    assert_eq!(
        errors,
        vec![
            at(0, "rule: Required value: rule is not specified"),
            at(
                1,
                "reason: Unsupported value: \"FieldValueTooLong\": supported values: \
                 \"FieldValueDuplicate\", \"FieldValueForbidden\", \"FieldValueInvalid\", \"FieldValueRequired\""
            ),
            at(
                2,
                "fieldPath: Invalid value: \".nope\": fieldPath must be a valid path"
            ),
            at(
                3,
                "message: Invalid value: \"two\\nlines\": message must not contain line breaks"
            ),
            at(
                4,
                "messageExpression: Required value: messageExpression must be non-empty if specified"
            ),
        ]
    );
}

#[test]
fn old_self_below_a_list_that_is_not_a_map_list_is_refused() {
    let schema = json!({
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {
            "tags": {"type": "array", "items": {
                "type": "string",
                "x-kubernetes-validations": [{"rule": "self == oldSelf"}]
            }}
        }}}
    });
    let errors = compile_errors(&schema);
    assert_eq!(
        errors,
        vec![format!(
            "{ROOT}.properties[spec].properties[tags].items.x-kubernetes-validations[0].rule: \
             Invalid value: \"self == oldSelf\": oldSelf cannot be used on the uncorrelatable \
             portion of the schema within {ROOT}.properties[spec].properties[tags].items"
        )]
    );
}

#[test]
fn optional_old_self_needs_a_rule_that_uses_old_self() {
    let errors = compile_errors(&widget_schema(
        json!([{"rule": "self.replicas > 0", "optionalOldSelf": true}]),
    ));
    assert_eq!(
        errors,
        vec![format!(
            "{ROOT}.properties[spec].x-kubernetes-validations[0].optionalOldSelf: Invalid value: \
             true: may not be set if oldSelf is not used in rule"
        )]
    );
}

#[test]
fn comprehension_depth_counts_nesting() {
    let depth = |source: &str| match Program::compile(source) {
        Ok(program) => comprehension_depth(program.expression()),
        Err(error) => panic!("{source}: {error}"),
    };
    assert_eq!(depth("self.a > 1"), 0);
    assert_eq!(depth("self.items.all(i, i > 0)"), 1);
    assert_eq!(depth("self.a.all(x, self.b.exists(y, x == y))"), 2);
}

// ---- evaluation ----

#[test]
fn a_passing_rule_accepts_and_a_failing_rule_reports_upstreams_message() {
    let validator = compiled(&widget_schema(json!([
        {"rule": "self.min <= self.max", "message": "min must not exceed max"},
        {"rule": "self.replicas >= 0"},
    ])));
    assert!(
        errors_of(
            &validator,
            &object(json!({"min": 1, "max": 2, "replicas": 1})),
            None
        )
        .is_empty()
    );
    assert_eq!(
        errors_of(
            &validator,
            &object(json!({"min": 3, "max": 2, "replicas": -1})),
            None
        ),
        vec![
            "spec: Invalid value: \"object\": min must not exceed max".to_string(),
            "spec: Invalid value: \"object\": failed rule: self.replicas >= 0".to_string(),
        ]
    );
}

#[test]
fn rules_at_the_root_report_at_nil_and_see_only_name_and_generate_name() {
    let schema = json!({
        "type": "object",
        "x-kubernetes-validations": [
            {"rule": "self.metadata.name.startsWith('w')"},
            {"rule": "!has(self.metadata.labels)"},
            {"rule": "self.kind == 'Widget'"},
            {"rule": "self.metadata.name == 'other'", "message": "wrong name"},
        ],
        "properties": {"spec": {"type": "object"}}
    });
    let validator = compiled(&schema);
    assert_eq!(
        errors_of(&validator, &object(json!({})), None),
        vec!["<nil>: Invalid value: \"object\": wrong name".to_string()]
    );
}

#[test]
fn message_expression_gives_the_message_and_falls_back_when_it_fails() {
    let validator = compiled(&widget_schema(json!([
        {"rule": "self.replicas < 10", "messageExpression": "'replicas is ' + string(self.replicas) + ', more than 9'"},
        {"rule": "self.min < 10", "message": "static", "messageExpression": "self.nope"},
    ])));
    assert_eq!(
        errors_of(
            &validator,
            &object(json!({"replicas": 12, "min": 11})),
            None
        ),
        vec![
            "spec: Invalid value: \"object\": replicas is 12, more than 9".to_string(),
            "spec: Invalid value: \"object\": static".to_string(),
        ]
    );
}

#[test]
fn reason_and_field_path_shape_the_error() {
    let validator = compiled(&widget_schema(json!([
        {"rule": "self.replicas < 10", "message": "too many", "reason": "FieldValueForbidden", "fieldPath": ".replicas"},
        {"rule": "has(self.name)", "message": "name is needed", "reason": "FieldValueRequired", "fieldPath": "['name']"},
        {"rule": "self.min < 10", "reason": "FieldValueDuplicate"},
    ])));
    let outcome = validator.validate(&object(json!({"replicas": 12, "min": 11})), None);
    let shown: Vec<String> = outcome.errors.iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        vec![
            "spec.replicas: Forbidden: too many".to_string(),
            "spec.name: Required value: name is needed".to_string(),
            "spec: Duplicate value: \"object\"".to_string(),
        ]
    );
    assert_eq!(
        outcome.errors[0].reason.cause_reason(),
        "FieldValueForbidden"
    );
}

#[test]
fn transition_rules_run_on_updates_only_and_compare_with_the_old_value() {
    let validator = compiled(&widget_schema(json!([
        {"rule": "self.name == oldSelf.name", "message": "name is immutable"},
    ])));
    let first = object(json!({"name": "a"}));
    assert!(errors_of(&validator, &first, None).is_empty());
    assert!(errors_of(&validator, &first, Some(&first)).is_empty());
    assert_eq!(
        errors_of(&validator, &object(json!({"name": "b"})), Some(&first)),
        vec!["spec: Invalid value: \"object\": name is immutable".to_string()]
    );
}

#[test]
fn a_transition_rule_is_skipped_where_the_old_object_has_no_value() {
    let schema = json!({
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {
            "size": {"type": "integer", "x-kubernetes-validations": [{"rule": "self >= oldSelf", "message": "may not shrink"}]}
        }}}
    });
    let validator = compiled(&schema);
    let without = object(json!({}));
    let small = object(json!({"size": 1}));
    assert!(errors_of(&validator, &small, Some(&without)).is_empty());
    assert_eq!(
        errors_of(&validator, &small, Some(&object(json!({"size": 2})))),
        vec!["spec.size: Invalid value: \"integer\": may not shrink".to_string()]
    );
}

#[test]
fn optional_old_self_runs_on_create_with_an_empty_optional() {
    let validator = compiled(&widget_schema(json!([{
        "rule": "!oldSelf.hasValue() || self.name == oldSelf.value().name",
        "optionalOldSelf": true,
        "message": "immutable"
    }])));
    let created = object(json!({"name": "a"}));
    assert!(errors_of(&validator, &created, None).is_empty());
    assert_eq!(
        errors_of(&validator, &object(json!({"name": "b"})), Some(&created)).len(),
        1
    );
}

#[test]
fn map_list_items_correlate_by_key_with_old_items() {
    let schema = json!({
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {
            "ports": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {"name": {"type": "string"}, "port": {"type": "integer"}},
                    "x-kubernetes-validations": [{"rule": "self.port == oldSelf.port", "message": "port is immutable"}]
                }
            }
        }}}
    });
    let validator = compiled(&schema);
    let old = object(json!({"ports": [{"name": "a", "port": 1}, {"name": "b", "port": 2}]}));
    // Reordered and extended: each item meets its own old item, the new one none.
    let reordered = object(
        json!({"ports": [{"name": "c", "port": 9}, {"name": "b", "port": 2}, {"name": "a", "port": 1}]}),
    );
    assert!(errors_of(&validator, &reordered, Some(&old)).is_empty());
    let changed = object(json!({"ports": [{"name": "b", "port": 3}]}));
    assert_eq!(
        errors_of(&validator, &changed, Some(&old)),
        vec!["spec.ports[0]: Invalid value: \"object\": port is immutable".to_string()]
    );
}

#[test]
fn an_unchanged_invalid_value_is_ratcheted_to_a_warning() {
    let validator = compiled(&widget_schema(
        json!([{"rule": "self.replicas < 10", "message": "too many"}]),
    ));
    let stored = object(json!({"replicas": 12}));
    let mut relabelled = stored.clone();
    relabelled["metadata"]["labels"]["c"] = json!("d");
    let outcome = validator.validate(&relabelled, Some(&stored));
    assert!(outcome.errors.is_empty(), "{:?}", outcome.errors);
    assert_eq!(
        outcome.warnings,
        vec!["spec: Invalid value: \"object\": too many".to_string()]
    );
    // A changed value is not ratcheted.
    assert_eq!(
        errors_of(&validator, &object(json!({"replicas": 13})), Some(&stored)).len(),
        1
    );
}

#[test]
fn runtime_errors_name_the_rule() {
    let validator = compiled(&widget_schema(json!([{"rule": "self.name == 'a'"}])));
    assert_eq!(
        errors_of(&validator, &object(json!({"replicas": 1})), None),
        vec![
            "spec: Invalid value: \"object\": no such key: name evaluating rule: self.name == 'a'"
                .to_string()
        ]
    );
}

#[test]
fn names_are_escaped_and_formats_converted() {
    let validator = compiled(&widget_schema(json!([
        {"rule": "self.x__dash__y == 'v'"},
        {"rule": "self.timeout > duration('1m')", "message": "timeout too short"},
    ])));
    assert!(
        errors_of(
            &validator,
            &object(json!({"x-y": "v", "timeout": "90s"})),
            None
        )
        .is_empty()
    );
    assert_eq!(
        errors_of(
            &validator,
            &object(json!({"x-y": "v", "timeout": "30s"})),
            None
        ),
        vec!["spec: Invalid value: \"object\": timeout too short".to_string()]
    );
}

#[test]
fn the_kubernetes_libraries_are_available() {
    let validator = compiled(&widget_schema(json!([
        {"rule": "quantity(self.quantity).isLessThan(quantity('2Gi'))", "message": "quantity"},
        {"rule": "self.name.matches('^[a-z]+$')", "message": "regex"},
        {"rule": "self.items.isSorted()", "message": "lists"},
    ])));
    let good = object(json!({"quantity": "1Gi", "name": "abc", "items": [1, 2]}));
    assert!(errors_of(&validator, &good, None).is_empty());
    let bad = object(json!({"quantity": "3Gi", "name": "A1", "items": [2, 1]}));
    assert_eq!(errors_of(&validator, &bad, None).len(), 3);
}

#[test]
fn an_evaluation_estimated_over_the_per_call_limit_is_refused() {
    let validator = compiled(&widget_schema(json!([
        {"rule": "self.items.all(x, self.items.all(y, x <= y || x > y))"},
    ])));
    let small = object(json!({"items": (0..100).collect::<Vec<i64>>()}));
    assert!(errors_of(&validator, &small, None).is_empty());
    let large = object(json!({"items": (0..1001).collect::<Vec<i64>>()}));
    assert_eq!(
        errors_of(&validator, &large, None),
        vec![
            "spec: Invalid value: \"object\": 'operation cancelled: actual cost limit exceeded': \
             no further validation rules will be run due to call cost exceeds limit for rule: \
             self.items.all(x, self.items.all(y, x <= y || x > y))"
                .to_string()
        ]
    );
}

#[test]
fn the_per_write_budget_stops_validation() {
    let schema = json!({
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {
            "items": {"type": "array", "items": {
                "type": "array",
                "items": {"type": "integer"},
                "x-kubernetes-validations": [{"rule": "self.exists(x, self.exists(y, x == y))"}]
            }}
        }}}
    });
    let validator = compiled(&schema);
    // Each row of 999 items is estimated at 999² = 998 001 (nested comprehensions), so ten
    // rows fit in the 10 000 000 budget and the eleventh does not. `exists` stops early, so
    // the real work stays small.
    let row: Vec<i64> = vec![1; 999];
    let rows: Vec<Vec<i64>> = vec![row; 11];
    let errors = errors_of(&validator, &object(json!({"items": rows})), None);
    assert_eq!(
        errors.last().map(String::as_str),
        Some(
            "spec.items[10]: Invalid value: \"array\": validation failed due to running out of \
             cost budget, no further validation rules will be run"
        )
    );
    assert_eq!(errors.len(), 1);
}

#[test]
fn null_values_are_not_validated() {
    let validator = compiled(&widget_schema(json!([{"rule": "false"}])));
    assert!(errors_of(&validator, &object(Value::Null), None).is_empty());
}

#[test]
fn blocking_errors_stop_the_rules() {
    let wrong_type = FieldError::type_invalid("spec.replicas", "string", "must be integer");
    let blocked = blocking_error(&[wrong_type]).map(|e| e.to_string());
    assert_eq!(
        blocked.as_deref(),
        Some(
            "<nil>: Invalid value: \"null\": some validation rules were not checked because the \
             object was invalid; correct the existing errors to complete validation"
        )
    );
    let plain = FieldError::invalid("spec.name", "x", "bad");
    assert!(blocking_error(&[plain]).is_none());
}

#[test]
fn go_durations_parse() {
    assert_eq!(
        parse_go_duration("1h30m"),
        Some(chrono::Duration::minutes(90))
    );
    assert_eq!(
        parse_go_duration("-1.5s"),
        Some(-chrono::Duration::milliseconds(1500))
    );
    assert_eq!(parse_go_duration("0"), Some(chrono::Duration::zero()));
    assert_eq!(parse_go_duration("5x"), None);
    assert_eq!(parse_go_duration(""), None);
}

#[test]
fn maps_bind_self_to_the_map_and_to_each_value_by_key() {
    let schema = json!({
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {
            "limits": {
                "type": "object",
                "x-kubernetes-validations": [{"rule": "self.all(k, k.startsWith('a'))", "message": "keys start with a"}],
                "additionalProperties": {
                    "type": "integer",
                    "x-kubernetes-validations": [
                        {"rule": "self <= 3", "message": "at most 3"},
                        {"rule": "self >= oldSelf", "message": "may not shrink"}
                    ]
                }
            },
            "frozen": {
                "type": "object",
                "x-kubernetes-map-type": "atomic",
                "additionalProperties": {
                    "type": "integer",
                    "x-kubernetes-validations": [{"rule": "self >= oldSelf", "message": "never seen"}]
                }
            }
        }}}
    });
    let validator = compiled(&schema);
    let old = object(json!({"limits": {"a1": 2}, "frozen": {"x": 5}}));
    let new = object(json!({"limits": {"a1": 1, "b-2": 4}, "frozen": {"x": 1}}));
    assert_eq!(
        errors_of(&validator, &new, Some(&old)),
        vec![
            "spec.limits: Invalid value: \"object\": keys start with a".to_string(),
            "spec.limits[a1]: Invalid value: \"integer\": may not shrink".to_string(),
            "spec.limits[b-2]: Invalid value: \"integer\": at most 3".to_string(),
        ],
        "an atomic map's values do not correlate, so its transition rule never runs"
    );
}

#[test]
fn an_embedded_resource_sees_only_its_name_and_generate_name() {
    let schema = json!({
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {
            "template": {
                "type": "object",
                "x-kubernetes-embedded-resource": true,
                "x-kubernetes-preserve-unknown-fields": true,
                "x-kubernetes-validations": [
                    {"rule": "self.kind == 'Pod' && self.metadata.name == 'p'"},
                    {"rule": "!has(self.metadata.labels)"}
                ]
            }
        }}}
    });
    let validator = compiled(&schema);
    let template =
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}}});
    assert!(errors_of(&validator, &object(json!({"template": template})), None).is_empty());
}
