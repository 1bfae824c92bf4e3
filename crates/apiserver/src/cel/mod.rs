//! The CEL plumbing every CEL user in the server shares: CRD validation rules
//! ([`crate::crd::cel`]), webhook `matchConditions` ([`crate::admission::match_conditions`]) and
//! ValidatingAdmissionPolicies ([`crate::admission::policy`]).
//!
//! It sits below both `crd` and `admission` so that neither imports the other for CEL. What
//! is here: the base context (the standard library plus Kubernetes' libraries of
//! [`kube_cel`]), JSON to CEL value conversion ([`values`]), cel-go's wording of evaluation
//! errors, the literal result-type checks that stand in for a type checker, upstream's cost
//! limits, and the rules for using a `messageExpression`'s result.
//!
//! # Caveats
//! - The `cel` crate parses but does not type-check: only a whole expression that is a
//!   literal of the wrong type ([`literal_type_other_than`]) is known to be wrong before it runs.

use kube_cel::KubeCelExt as _;
use kube_cel::cel::common::ast::{Expr, IdedExpr, LiteralValue};
use kube_cel::cel::{self, Context, ExecutionError};

pub mod values;

pub use values::plain_value;

/// Upstream `celconfig.PerCallLimit`: the most one evaluation may cost.
pub const PER_CALL_LIMIT: u64 = 1_000_000;
/// Upstream `celconfig.RuntimeCELCostBudget`: the most all evaluations of one request may cost.
pub const RUNTIME_COST_BUDGET: u64 = 10_000_000;
/// Upstream `celconfig.MaxEvaluatedMessageExpressionSizeBytes`.
pub const MAX_MESSAGE_EXPRESSION_BYTES: usize = 5 * 1024;

thread_local! {
    /// The CEL standard library plus Kubernetes' libraries, registered once per thread; each
    /// evaluation opens an inner scope over it for its variables.
    static BASE_CONTEXT: Context<'static> = Context::default().with_all();
}

/// Runs `f` with the shared base context of this thread; callers open an inner scope for
/// their variables.
pub fn with_base_context<R>(f: impl FnOnce(&Context<'static>) -> R) -> R {
    BASE_CONTEXT.with(f)
}

/// An evaluation error as cel-go words it where the two share the error (`no such key: k`,
/// `no such overload`, `division by zero`), else the `cel` crate's text.
pub fn error_text(error: &ExecutionError) -> String {
    match error {
        ExecutionError::NoSuchKey(key) => format!("no such key: {key}"),
        ExecutionError::NoSuchOverload => "no such overload".to_string(),
        ExecutionError::DivisionByZero(_) => "division by zero".to_string(),
        other => other.to_string(),
    }
}

/// The CEL type name of a whole expression that is a scalar literal other than `wanted`
/// (`bool`, `string`…): the only result-type error found without a type checker. Lists and
/// maps are `list` and `map`.
pub fn literal_type_other_than(expression: &IdedExpr, wanted: &str) -> Option<&'static str> {
    let found = match &expression.expr {
        Expr::Literal(literal) => match literal {
            LiteralValue::Boolean(_) => "bool",
            LiteralValue::Int(_) => "int",
            LiteralValue::UInt(_) => "uint",
            LiteralValue::Double(_) => "double",
            LiteralValue::String(_) => "string",
            LiteralValue::Bytes(_) => "bytes",
            LiteralValue::Null => "null_type",
        },
        Expr::List(_) => "list",
        Expr::Map(_) => "map",
        _ => return None,
    };
    (found != wanted).then_some(found)
}

/// A `messageExpression`'s result as upstream uses it: a string that is non-empty,
/// single-line and at most 5 KiB once trimmed; anything else falls back to the static message.
pub fn usable_message(result: &cel::Value) -> Option<String> {
    match result {
        cel::Value::String(text) => {
            let trimmed = text.trim();
            let usable = !trimmed.is_empty()
                && !trimmed.contains('\n')
                && trimmed.len() <= MAX_MESSAGE_EXPRESSION_BYTES;
            usable.then(|| trimmed.to_string())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_types_are_named_as_cel_names_them() {
        let program = |text: &str| cel::Program::compile(text).expect("parses");
        assert_eq!(
            literal_type_other_than(program("'x'").expression(), "bool"),
            Some("string")
        );
        assert_eq!(
            literal_type_other_than(program("true").expression(), "bool"),
            None
        );
        assert_eq!(
            literal_type_other_than(program("[1]").expression(), "string"),
            Some("list")
        );
        assert_eq!(
            literal_type_other_than(program("a.b").expression(), "bool"),
            None
        );
    }

    #[test]
    fn only_short_single_line_strings_are_usable_messages() {
        let text = |s: &str| cel::Value::String(std::sync::Arc::new(s.to_string()));
        assert_eq!(
            usable_message(&text("  too many ")),
            Some("too many".into())
        );
        assert_eq!(usable_message(&text("  ")), None);
        assert_eq!(usable_message(&text("a\nb")), None);
        assert_eq!(usable_message(&cel::Value::Int(1)), None);
    }
}
