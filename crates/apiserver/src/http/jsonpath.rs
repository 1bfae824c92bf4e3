//! The JSONPath dialect of CRD `additionalPrinterColumns` (kubectl's `-o jsonpath`), evaluated
//! over objects held as `serde_json::Value`.
//!
//! Upstream wraps a column's `jsonPath` in `{…}` and runs it through client-go's template
//! JSONPath with missing keys allowed. This module accepts the same syntax inside one action:
//! `.field` (a backslash escapes `.` and other terminators:
//! `.metadata.labels.app\.kubernetes\.io/name`), `..field` (recursive descent), `.*`, `[n]`
//! (negative counts from the end; `[]` is `[0]`), `[a:b:c]`, `[*]`,
//! unions `[0,2]`, dictionary keys `['key']`, filters `[?(@.type=="Ready")]` with `==`, `!=`,
//! `<`, `>`, `<=`, `>=` or bare existence, a leading `$` or `@`, and quoted, numeric and boolean
//! literals.
//!
//! # Why not a crate
//! `jsonpath-rust` (already in `Cargo.lock` through kube) implements RFC 9535, a different
//! dialect: paths must start at `$` (CRD paths start with `.`), a member name cannot carry a
//! backslash-escaped dot, and a missing member, an out-of-range index or a comparison of a
//! number with a string quietly selects nothing. In kubectl's dialect the last two are errors
//! that empty the whole cell, and `[]` means `[0]`. Rewriting paths into RFC 9535 would still
//! need a parser of this dialect and could not reproduce its errors, so the small evaluator is
//! written here.
//!
//! # Caveats
//! - Wildcards over a string select nothing (client-go would select its bytes).
//! - A key's JSON `null` is selected like any value (as client-go does); later steps skip it.

use std::borrow::Cow;
use std::fmt;

use serde_json::Value;

/// A parsed path. Parse once per column, evaluate per object.
#[derive(Clone, Debug, PartialEq)]
pub struct JsonPath {
    steps: Vec<Step>,
}

/// Why a path does not parse; the message follows client-go's parser.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unrecognized column definition {path:?}: {reason}")]
pub struct ParseError {
    pub path: String,
    pub reason: String,
}

/// Why evaluation failed on one object (upstream then shows an empty cell).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EvalError(String);

#[derive(Clone, Debug, PartialEq)]
enum Step {
    Field(String),
    Wildcard,
    Recursive,
    Slice(Slice),
    Union(Vec<Vec<Step>>),
    Filter(Box<Filter>),
    Literal(Literal),
    /// A bare word such as `range`: parses, but cannot be evaluated in a column.
    Identifier(String),
}

#[derive(Clone, Debug, PartialEq)]
enum Literal {
    Text(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

/// `[start:end:step]`; `[n]` is `start = n` with `end` one past it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slice {
    start: Option<i64>,
    end: Option<i64>,
    step: Option<i64>,
    single: bool,
}

#[derive(Clone, Debug, PartialEq)]
struct Filter {
    left: Vec<Step>,
    /// `None` is the existence test `[?(@.field)]`.
    operator: Option<String>,
    right: Vec<Step>,
}

impl JsonPath {
    /// Parses a CRD column path such as `.status.conditions[?(@.type=="Ready")].status`.
    pub fn parse(path: &str) -> Result<JsonPath, ParseError> {
        let mut parser = Parser {
            input: path,
            pos: 0,
        };
        parser
            .action()
            .map(|steps| JsonPath { steps })
            .map_err(|reason| ParseError {
                path: path.to_string(),
                reason,
            })
    }

    /// Every value the path selects, in document order (object keys in sorted order).
    pub fn find<'a>(&self, root: &'a Value) -> Result<Vec<Cow<'a, Value>>, EvalError> {
        evaluate(&self.steps, vec![Cow::Borrowed(root)])
    }
}

// ---------------------------------------------------------------------------------------------
// Parser
// ---------------------------------------------------------------------------------------------

struct Parser<'a> {
    input: &'a str,
    pos: usize,
}

/// Characters that end a field name or a bare word.
fn is_terminator(c: char) -> bool {
    matches!(
        c,
        ' ' | '\t' | '\r' | '\n' | '.' | ',' | '[' | ']' | '$' | '@' | '{' | '}'
    )
}

impl Parser<'_> {
    fn rest(&self) -> &str {
        &self.input[self.pos..]
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    /// The body of one `{…}` action, up to the end of input or a closing brace (client-go
    /// treats whatever follows the brace as literal text, which a column never prints).
    fn action(&mut self) -> Result<Vec<Step>, String> {
        let mut steps = Vec::new();
        loop {
            if self.rest().starts_with("[?(") {
                steps.push(self.filter()?);
                continue;
            }
            if self.rest().starts_with("..") {
                if steps.last() == Some(&Step::Recursive) {
                    return Err("invalid multiple recursive descent".into());
                }
                self.pos += 2;
                steps.push(Step::Recursive);
                if self.peek().is_some_and(|c| c == '_' || c.is_alphanumeric()) {
                    steps.push(self.field());
                }
                continue;
            }
            let Some(c) = self.bump() else {
                return Ok(steps);
            };
            match c {
                '}' => return Ok(steps),
                '\r' | '\n' => return Err("unclosed action".into()),
                ' ' | '@' | '$' => {}
                '[' => steps.push(self.bracket()?),
                '"' | '\'' => steps.push(Step::Literal(Literal::Text(self.quoted(c)?))),
                '.' => steps.push(self.field()),
                '+' | '-' => steps.push(self.number(c)?),
                c if c.is_ascii_digit() => steps.push(self.number(c)?),
                c if c == '_' || c.is_alphanumeric() => steps.push(self.word(c)),
                other => {
                    return Err(format!(
                        "unrecognized character in action: U+{:04X} '{other}'",
                        u32::from(other)
                    ));
                }
            }
        }
    }

    /// A field name after `.`, up to the next unescaped terminator.
    fn field(&mut self) -> Step {
        let start = self.pos;
        while let Some(c) = self.peek() {
            if c == '\\' {
                self.bump();
                self.bump();
            } else if is_terminator(c) {
                break;
            } else {
                self.bump();
            }
        }
        let raw = &self.input[start..self.pos];
        if raw == "*" {
            Step::Wildcard
        } else {
            Step::Field(raw.replace('\\', ""))
        }
    }

    fn word(&mut self, first: char) -> Step {
        let start = self.pos - first.len_utf8();
        while self.peek().is_some_and(|c| !is_terminator(c)) {
            self.bump();
        }
        match &self.input[start..self.pos] {
            "true" => Step::Literal(Literal::Bool(true)),
            "false" => Step::Literal(Literal::Bool(false)),
            word => Step::Identifier(word.to_string()),
        }
    }

    fn number(&mut self, first: char) -> Result<Step, String> {
        let start = self.pos - first.len_utf8();
        while self.peek().is_some_and(|c| c == '.' || c.is_ascii_digit()) {
            self.bump();
        }
        let text = &self.input[start..self.pos];
        if let Ok(int) = text.parse::<i64>() {
            return Ok(Step::Literal(Literal::Int(int)));
        }
        text.parse::<f64>()
            .map(|float| Step::Literal(Literal::Float(float)))
            .map_err(|_| format!("cannot parse number {text}"))
    }

    /// A quoted literal; the opening quote is consumed. Escapes follow Go's string syntax for
    /// the common cases (`\"`, `\'`, `\\`, `\n`, `\t`).
    fn quoted(&mut self, quote: char) -> Result<String, String> {
        let mut text = String::new();
        loop {
            match self.bump() {
                None | Some('\n') => return Err("unterminated quoted string".into()),
                Some('\\') => match self.bump() {
                    Some('n') => text.push('\n'),
                    Some('t') => text.push('\t'),
                    Some('r') => text.push('\r'),
                    Some(c @ ('\\' | '"' | '\'')) => text.push(c),
                    Some(c) => return Err(format!("invalid escape \\{c} in quoted string")),
                    None => return Err("unterminated quoted string".into()),
                },
                Some(c) if c == quote => return Ok(text),
                Some(c) => text.push(c),
            }
        }
    }

    /// `[…]` after the opening bracket: wildcard, union, dictionary key or slice.
    fn bracket(&mut self) -> Result<Step, String> {
        let start = self.pos;
        loop {
            match self.bump() {
                None | Some('\n') => return Err("unterminated array".into()),
                Some(']') => break,
                Some(_) => {}
            }
        }
        let inner = &self.input[start..self.pos - 1];
        parse_bracket(inner)
    }

    /// `[?(left op right)]` or `[?(path)]`.
    fn filter(&mut self) -> Result<Step, String> {
        self.pos += "[?(".len();
        let start = self.pos;
        let (mut opened, mut closed) = (false, false);
        let mut pair = '"';
        loop {
            let at = self.pos;
            match self.bump() {
                None | Some('\n') => return Err("unterminated filter".into()),
                Some(c @ ('"' | '\'')) => {
                    if !opened {
                        opened = true;
                        pair = c;
                    } else if c == pair && !self.input[..at].ends_with('\\') {
                        closed = true;
                    }
                }
                Some(')') if opened == closed => break,
                Some(_) => {}
            }
        }
        let body = &self.input[start..self.pos - 1];
        if self.bump() != Some(']') {
            return Err("unclosed array expect ]".into());
        }
        let filter = match split_comparison(body) {
            None => Filter {
                left: sub_action(body)?,
                operator: None,
                right: Vec::new(),
            },
            Some((left, operator, right)) => Filter {
                left: sub_action(left)?,
                operator: Some(operator.to_string()),
                right: sub_action(right)?,
            },
        };
        Ok(Step::Filter(Box::new(filter)))
    }
}

fn sub_action(text: &str) -> Result<Vec<Step>, String> {
    Parser {
        input: text,
        pos: 0,
    }
    .action()
}

fn is_comparison_char(c: char) -> bool {
    matches!(c, '!' | '<' | '>' | '=')
}

/// Splits `left op right` where `left` has no comparison characters, `op` is the run of them
/// that follows, and `right` is the non-empty rest (client-go's filter pattern).
fn split_comparison(body: &str) -> Option<(&str, &str, &str)> {
    let op_start = body.find(is_comparison_char)?;
    if op_start == 0 {
        return None;
    }
    let op_len = body[op_start..]
        .find(|c: char| !is_comparison_char(c))
        .unwrap_or(body.len() - op_start);
    let right = &body[op_start + op_len..];
    if right.is_empty() {
        return None;
    }
    Some((&body[..op_start], &body[op_start..op_start + op_len], right))
}

fn parse_bracket(inner: &str) -> Result<Step, String> {
    let inner = if inner == "*" { ":" } else { inner };
    if inner.contains(',') {
        let alternatives = inner
            .split(',')
            .map(|part| sub_action(&format!("[{}]", part.trim_matches(' '))))
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(Step::Union(alternatives));
    }
    if let Some(key) = inner
        .strip_prefix('\'')
        .and_then(|k| k.strip_suffix('\''))
        .filter(|k| !k.contains('\''))
    {
        // client-go re-parses a dictionary key as `.key`, so dots inside it still split.
        let steps = sub_action(&format!(".{key}"))?;
        return match <[Step; 1]>::try_from(steps) {
            Ok([step]) => Ok(step),
            Err(steps) => Ok(Step::Union(vec![steps])),
        };
    }
    parse_slice(inner)
}

fn parse_slice(inner: &str) -> Result<Step, String> {
    let invalid = || format!("invalid array index {inner}");
    let parts: Vec<&str> = inner.split(':').collect();
    if parts.len() > 3 {
        return Err(invalid());
    }
    let number = |text: &str| -> Result<Option<i64>, String> {
        if text.is_empty() {
            return Ok(None);
        }
        let digits = text.strip_prefix('-').unwrap_or(text);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(invalid());
        }
        text.parse::<i64>()
            .map(Some)
            .map_err(|_| format!("array index {text} is not a number"))
    };
    let start = number(parts[0])?;
    let end = parts.get(1).map(|p| number(p)).transpose()?.flatten();
    let step = parts.get(2).map(|p| number(p)).transpose()?.flatten();
    Ok(Step::Slice(Slice {
        start,
        end,
        step,
        single: parts.len() == 1,
    }))
}

// ---------------------------------------------------------------------------------------------
// Evaluation
// ---------------------------------------------------------------------------------------------

type Found<'a> = Vec<Cow<'a, Value>>;

fn evaluate<'a>(steps: &[Step], mut current: Found<'a>) -> Result<Found<'a>, EvalError> {
    for step in steps {
        current = apply(step, current)?;
    }
    Ok(current)
}

/// The children of a container, or nothing for scalars and `null`.
fn children<'a>(value: &Cow<'a, Value>) -> Found<'a> {
    match value {
        Cow::Borrowed(Value::Object(map)) => map.values().map(Cow::Borrowed).collect(),
        Cow::Borrowed(Value::Array(items)) => items.iter().map(Cow::Borrowed).collect(),
        Cow::Owned(Value::Object(map)) => map.values().cloned().map(Cow::Owned).collect(),
        Cow::Owned(Value::Array(items)) => items.iter().cloned().map(Cow::Owned).collect(),
        _ => Vec::new(),
    }
}

fn member<'a>(value: &Cow<'a, Value>, key: &str) -> Option<Cow<'a, Value>> {
    match value {
        Cow::Borrowed(Value::Object(map)) => map.get(key).map(Cow::Borrowed),
        Cow::Owned(Value::Object(map)) => map.get(key).cloned().map(Cow::Owned),
        _ => None,
    }
}

fn apply<'a>(step: &Step, input: Found<'a>) -> Result<Found<'a>, EvalError> {
    match step {
        Step::Field(key) => Ok(input.iter().filter_map(|v| member(v, key)).collect()),
        Step::Wildcard => Ok(input.iter().flat_map(children).collect()),
        Step::Recursive => {
            let mut out = Vec::new();
            descend(input, &mut out);
            Ok(out)
        }
        Step::Slice(slice) => {
            let mut out = Vec::new();
            for value in input {
                if value.is_null() {
                    continue;
                }
                let items = children(&value);
                if !value.is_array() {
                    return Err(EvalError(format!(
                        "{} is not array or slice",
                        crate::object::json_kind(&value)
                    )));
                }
                out.extend(select(slice, items)?);
            }
            Ok(out)
        }
        Step::Union(alternatives) => {
            let mut out = Vec::new();
            for steps in alternatives {
                out.extend(evaluate(steps, input.clone())?);
            }
            Ok(out)
        }
        Step::Filter(filter) => {
            let mut out = Vec::new();
            for value in input {
                if !value.is_array() {
                    return Err(EvalError(format!(
                        "{} is not array or slice and cannot be filtered",
                        crate::object::json_kind(&value)
                    )));
                }
                for item in children(&value) {
                    if passes(filter, &item)? {
                        out.push(item);
                    }
                }
            }
            Ok(out)
        }
        // A quoted literal stands alone; numbers and booleans repeat once per input.
        Step::Literal(Literal::Text(text)) => Ok(vec![Cow::Owned(Value::String(text.clone()))]),
        Step::Literal(literal) => {
            let value = match literal {
                Literal::Int(i) => Value::from(*i),
                Literal::Float(f) => Value::from(*f),
                Literal::Bool(b) => Value::Bool(*b),
                Literal::Text(_) => Value::Null,
            };
            Ok(input.iter().map(|_| Cow::Owned(value.clone())).collect())
        }
        Step::Identifier(word) => Err(EvalError(format!("unrecognized identifier {word}"))),
    }
}

/// Recursive descent: every container at or below each input, in pre-order. Scalars are not
/// selected themselves; the next step looks inside the containers.
fn descend<'a>(input: Found<'a>, out: &mut Found<'a>) {
    for value in input {
        let below = children(&value);
        if !below.is_empty() {
            out.push(value);
            descend(below, out);
        }
    }
}

fn select<'a>(slice: &Slice, items: Found<'a>) -> Result<Found<'a>, EvalError> {
    let len = items.len() as i64;
    let resolve = |index: i64| if index < 0 { index + len } else { index };
    let start = resolve(slice.start.unwrap_or(0));
    let end = if slice.single {
        start + 1
    } else {
        slice.end.map_or(len, resolve)
    };
    // Asking for zero elements is allowed anywhere; anything else must lie inside the array.
    if end != start {
        if start >= len || start < 0 {
            return Err(EvalError(format!(
                "array index out of bounds: index {start}, length {len}"
            )));
        }
        if end > len {
            return Err(EvalError(format!(
                "array index out of bounds: index {}, length {len}",
                end - 1
            )));
        }
    }
    if end < start {
        return Err(EvalError(format!("invalid slice index {start} > {end}")));
    }
    let step = slice.step.unwrap_or(1);
    if step <= 0 {
        return Err(EvalError(format!("invalid slice step {step}")));
    }
    Ok(items
        .into_iter()
        .skip(start as usize)
        .take((end - start) as usize)
        .step_by(step as usize)
        .collect())
}

fn passes(filter: &Filter, item: &Value) -> Result<bool, EvalError> {
    let lefts = evaluate(&filter.left, vec![Cow::Borrowed(item)]);
    let Some(operator) = &filter.operator else {
        // client-go hands back the failing step's (non-empty) input on an error, so a failed
        // existence test counts as a match.
        return Ok(lefts.map_or(true, |found| !found.is_empty()));
    };
    let left = single(lefts?)?;
    let right = single(evaluate(&filter.right, vec![Cow::Borrowed(item)])?)?;
    compare(&left, operator, &right)
}

fn single<'a>(mut found: Found<'a>) -> Result<Cow<'a, Value>, EvalError> {
    match (found.pop(), found.is_empty()) {
        (Some(value), true) => Ok(value),
        _ => Err(EvalError("can only compare one element at a time".into())),
    }
}

/// A comparable scalar, typed as Go's template comparison sees values decoded from JSON.
#[derive(Debug, PartialEq, PartialOrd)]
enum Scalar<'v> {
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Text(&'v str),
}

fn scalar(value: &Value) -> Result<Scalar<'_>, EvalError> {
    match value {
        Value::Bool(b) => Ok(Scalar::Bool(*b)),
        Value::String(s) => Ok(Scalar::Text(s)),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Ok(Scalar::Int(i))
            } else if let Some(u) = n.as_u64() {
                Ok(Scalar::Uint(u))
            } else {
                Ok(Scalar::Float(n.as_f64().unwrap_or(f64::NAN)))
            }
        }
        other => Err(EvalError(format!(
            "invalid type for comparison: {}",
            crate::object::json_kind(other)
        ))),
    }
}

fn compare(left: &Value, operator: &str, right: &Value) -> Result<bool, EvalError> {
    use std::cmp::Ordering;
    let (left, right) = (scalar(left)?, scalar(right)?);
    let ordering = match (&left, &right) {
        (Scalar::Int(a), Scalar::Uint(b)) => i128::from(*a).partial_cmp(&i128::from(*b)),
        (Scalar::Uint(a), Scalar::Int(b)) => i128::from(*a).partial_cmp(&i128::from(*b)),
        (Scalar::Bool(a), Scalar::Bool(b)) if matches!(operator, "==" | "!=") => a.partial_cmp(b),
        (Scalar::Bool(_), Scalar::Bool(_)) => {
            return Err(EvalError("invalid kind for ordering: bool".into()));
        }
        (a, b) if std::mem::discriminant(a) == std::mem::discriminant(b) => a.partial_cmp(b),
        _ => return Err(EvalError("incompatible types for comparison".into())),
    };
    Ok(match operator {
        "==" => ordering == Some(Ordering::Equal),
        "!=" => ordering != Some(Ordering::Equal),
        "<" => ordering == Some(Ordering::Less),
        ">" => ordering == Some(Ordering::Greater),
        "<=" => matches!(ordering, Some(Ordering::Less | Ordering::Equal)),
        ">=" => matches!(ordering, Some(Ordering::Greater | Ordering::Equal)),
        other => {
            return Err(EvalError(format!("unrecognized filter operator {other}")));
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Printing
// ---------------------------------------------------------------------------------------------

/// One selected value as client-go's `PrintResults` writes it: strings raw, numbers and
/// booleans in Go's `%v` form, arrays and objects as compact JSON, `null` as `<no value>`.
pub fn print(value: &Value) -> String {
    match value {
        Value::Null => "<no value>".into(),
        Value::Bool(b) => b.to_string(),
        Value::String(s) => s.clone(),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (None, Some(u), _) => u.to_string(),
            (None, None, Some(f)) => GoFloat(f).to_string(),
            _ => n.to_string(),
        },
        Value::Array(_) | Value::Object(_) => go_json(value),
    }
}

/// Compact JSON as Go's `encoding/json` writes it: keys sorted (serde_json's map already is),
/// and `<`, `>`, `&`, U+2028, U+2029 escaped. Those characters only occur inside strings.
fn go_json(value: &Value) -> String {
    let text = serde_json::to_string(value).unwrap_or_default();
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

/// A float in Go's `%v` form: the shortest digits that round-trip, in exponent form (`1e+08`)
/// when the decimal exponent is below -4 or at least 6.
struct GoFloat(f64);

impl fmt::Display for GoFloat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let value = self.0;
        if value.is_nan() {
            return f.write_str("NaN");
        }
        if value.is_infinite() {
            return f.write_str(if value > 0.0 { "+Inf" } else { "-Inf" });
        }
        if value == 0.0 {
            return f.write_str(if value.is_sign_negative() { "-0" } else { "0" });
        }
        // Rust's `{:e}` gives the shortest round-trip digits: "1.2345e6", "-5e-7".
        let scientific = format!("{:e}", value.abs());
        let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
        let exponent: i32 = exponent.parse().unwrap_or(0);
        let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
        let digit_count = digits.len() as i32;
        let sign = if value < 0.0 { "-" } else { "" };
        let point = exponent + 1;
        if !(-4..6).contains(&exponent) {
            let (head, tail) = digits.split_at(1);
            let tail = if tail.is_empty() {
                String::new()
            } else {
                format!(".{tail}")
            };
            let exp_sign = if exponent < 0 { '-' } else { '+' };
            write!(f, "{sign}{head}{tail}e{exp_sign}{:02}", exponent.abs())
        } else if point <= 0 {
            let zeros = "0".repeat((-point) as usize);
            write!(f, "{sign}0.{zeros}{digits}")
        } else if point >= digit_count {
            let zeros = "0".repeat((point - digit_count) as usize);
            write!(f, "{sign}{digits}{zeros}")
        } else {
            let (int, frac) = digits.split_at(point as usize);
            write!(f, "{sign}{int}.{frac}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn find(path: &str, object: &Value) -> Result<Vec<Value>, EvalError> {
        let parsed = JsonPath::parse(path).expect("path parses");
        parsed
            .find(object)
            .map(|found| found.into_iter().map(Cow::into_owned).collect())
    }

    fn widget() -> Value {
        json!({
            "metadata": {"name": "w", "labels": {"app": "shop", "app.kubernetes.io/name": "cart"}},
            "spec": {
                "replicas": 3,
                "ratio": 0.5,
                "enabled": true,
                "items": [{"name": "a", "size": 1}, {"name": "b", "size": 2}, {"name": "c"}],
                "sizes": [1, 2, 3],
                "empty": [],
                "nothing": null
            },
            "status": {"conditions": [
                {"type": "Synced", "status": "False"},
                {"type": "Ready", "status": "True", "reason": "Up"}
            ]}
        })
    }

    #[test]
    fn fields_select_nested_values() {
        let w = widget();
        assert_eq!(find(".spec.replicas", &w), Ok(vec![json!(3)]));
        assert_eq!(find(".metadata.labels.app", &w), Ok(vec![json!("shop")]));
        assert_eq!(find("$.spec.enabled", &w), Ok(vec![json!(true)]));
    }

    #[test]
    fn missing_keys_select_nothing_rather_than_failing() {
        let w = widget();
        assert_eq!(find(".spec.missing", &w), Ok(vec![]));
        assert_eq!(find(".nope.deeper.still", &w), Ok(vec![]));
        // A field of a scalar is missing too.
        assert_eq!(find(".spec.replicas.value", &w), Ok(vec![]));
    }

    #[test]
    fn a_null_value_is_selected_but_not_descended() {
        let w = widget();
        assert_eq!(find(".spec.nothing", &w), Ok(vec![Value::Null]));
        assert_eq!(find(".spec.nothing.inner", &w), Ok(vec![]));
        assert_eq!(find(".spec.nothing[0]", &w), Ok(vec![]));
    }

    #[test]
    fn escaped_dots_stay_inside_a_key() {
        let w = widget();
        assert_eq!(
            find(r".metadata.labels.app\.kubernetes\.io/name", &w),
            Ok(vec![json!("cart")])
        );
    }

    #[test]
    fn indexes_count_from_either_end() {
        let w = widget();
        assert_eq!(find(".spec.items[0].name", &w), Ok(vec![json!("a")]));
        assert_eq!(find(".spec.items[-1].name", &w), Ok(vec![json!("c")]));
        assert_eq!(find(".spec.items[2].size", &w), Ok(vec![]));
        assert_eq!(find(".spec.items[].name", &w), Ok(vec![json!("a")]));
    }

    #[test]
    fn an_index_past_the_end_is_an_error() {
        let w = widget();
        assert!(find(".spec.items[3].name", &w).is_err());
        assert!(find(".spec.empty[0]", &w).is_err());
        assert!(find(".spec.replicas[0]", &w).is_err());
    }

    #[test]
    fn wildcards_and_slices_select_many() {
        let w = widget();
        assert_eq!(
            find(".spec.items[*].name", &w),
            Ok(vec![json!("a"), json!("b"), json!("c")])
        );
        assert_eq!(
            find(".spec.items[*].size", &w),
            Ok(vec![json!(1), json!(2)])
        );
        assert_eq!(
            find(".spec.items[1:].name", &w),
            Ok(vec![json!("b"), json!("c")])
        );
        assert_eq!(
            find(".spec.items[0:3:2].name", &w),
            Ok(vec![json!("a"), json!("c")])
        );
        assert_eq!(find(".spec.empty[*]", &w), Ok(vec![]));
        assert_eq!(
            find(".metadata.labels.*", &w),
            Ok(vec![json!("shop"), json!("cart")])
        );
    }

    #[test]
    fn unions_and_dictionary_keys() {
        let w = widget();
        assert_eq!(
            find(".spec.items[0,2].name", &w),
            Ok(vec![json!("a"), json!("c")])
        );
        assert_eq!(find(".metadata.labels['app']", &w), Ok(vec![json!("shop")]));
    }

    #[test]
    fn filters_compare_fields_with_literals() {
        let w = widget();
        assert_eq!(
            find(r#".status.conditions[?(@.type=="Ready")].status"#, &w),
            Ok(vec![json!("True")])
        );
        assert_eq!(
            find(".status.conditions[?(@.type=='Ready')].reason", &w),
            Ok(vec![json!("Up")])
        );
        assert_eq!(
            find(r#".status.conditions[?(@.type!="Ready")].type"#, &w),
            Ok(vec![json!("Synced")])
        );
        assert_eq!(
            find(r#".status.conditions[?(@.type=="Gone")].status"#, &w),
            Ok(vec![])
        );
        assert_eq!(
            find(".spec.sizes[?(@>=2)]", &w),
            Ok(vec![json!(2), json!(3)])
        );
        assert_eq!(
            find(".spec.items[?(@.size)].name", &w),
            Ok(vec![json!("a"), json!("b")])
        );
    }

    #[test]
    fn a_filter_that_cannot_compare_fails_like_upstream() {
        let w = widget();
        // Item "c" has no size: one side of the comparison is empty.
        assert!(find(".spec.items[?(@.size<2)].name", &w).is_err());
        // A number against a string.
        assert!(find(r#".spec.items[?(@.size=="1")].name"#, &w).is_err());
        // Only arrays can be filtered.
        assert!(find(r#".spec[?(@.a=="b")]"#, &w).is_err());
    }

    #[test]
    fn recursive_descent_finds_keys_at_any_depth() {
        let w = widget();
        assert_eq!(
            find("..reason", &w),
            Ok(vec![json!("Up")]),
            "only the Ready condition has a reason"
        );
        assert_eq!(
            find(".spec..name", &w),
            Ok(vec![json!("a"), json!("b"), json!("c")])
        );
    }

    #[test]
    fn malformed_paths_do_not_parse() {
        for path in [
            ".spec.items[0",
            ".a[x]",
            ".a[?(@.b==\"c\"]",
            ".a....",
            "#x",
            ".a[?(@.b=='c')",
        ] {
            assert!(JsonPath::parse(path).is_err(), "{path} should not parse");
        }
        assert!(JsonPath::parse("..name").is_ok());
    }

    #[test]
    fn text_after_a_closing_brace_is_ignored() {
        let w = widget();
        assert_eq!(find(".spec.replicas}{.spec.ratio", &w), Ok(vec![json!(3)]));
    }

    #[test]
    fn bare_words_parse_but_do_not_evaluate() {
        assert!(find("range", &widget()).is_err());
    }

    #[test]
    fn printing_follows_client_go() {
        assert_eq!(print(&json!("x")), "x");
        assert_eq!(print(&json!(42)), "42");
        assert_eq!(print(&json!(true)), "true");
        assert_eq!(print(&Value::Null), "<no value>");
        assert_eq!(print(&json!(["a", "b"])), r#"["a","b"]"#);
        assert_eq!(
            print(&json!({"b": 1, "a": "<&>"})),
            r#"{"a":"\u003c\u0026\u003e","b":1}"#
        );
    }

    #[test]
    fn floats_print_like_go_percent_v() {
        let cases = [
            (0.5, "0.5"),
            (1.0, "1"),
            (3.25, "3.25"),
            (123456.0, "123456"),
            (1234567.0, "1.234567e+06"),
            (1e8, "1e+08"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-2.5, "-2.5"),
            (1e21, "1e+21"),
            (123.456, "123.456"),
        ];
        for (value, expected) in cases {
            assert_eq!(GoFloat(value).to_string(), expected, "{value}");
        }
    }
}
