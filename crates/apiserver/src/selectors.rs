//! Label and field selectors (`?labelSelector=` / `?fieldSelector=`), parsed and matched
//! exactly as the Kubernetes API server does.
//!
//! Label selectors follow apimachinery's `pkg/labels/selector.go`: a small lexer and a
//! recursive-descent parser over the grammar
//!
//! ```text
//! selector    := requirement ("," requirement)*        (empty string: everything)
//! requirement := ["!"] KEY [ ("in" | "notin") "(" values ")" | ("=" | "==" | "!=" | ">" | "<") VALUE ]
//! ```
//!
//! The parser is reproduced token for token (rather than written as a tidier grammar) because
//! clients see its error messages verbatim, e.g. `unable to parse requirement: found '',
//! expected: identifier after ','`, and because its corner cases are part of the contract:
//! `k=` and `k in ()` both select the empty value, `in`/`notin` are ordinary words in value
//! position, keys are validated as qualified names and values as label values.
//!
//! Field selectors follow `pkg/fields/selector.go`: comma-separated `field=value`,
//! `field==value` or `field!=value` terms with `\,` `\=` `\\` escapes in values, no whitespace
//! trimming. Which fields a kind supports is the registry's business: it checks a parsed
//! selector with [`FieldSelector::validate_fields`] and supplies field values when matching.

use std::fmt;

use serde_json::{Map, Value};

use crate::validation::{go_quote, is_qualified_name, is_valid_label_value};

/// A selector that could not be parsed or is not supported for the kind. `Display` gives
/// upstream's message, suitable for a 400 `BadRequest` `Status`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// The `labelSelector` parameter does not parse.
    #[error("{0}")]
    InvalidLabelSelector(String),
    /// The `fieldSelector` parameter does not parse.
    #[error("{0}")]
    InvalidFieldSelector(String),
    /// The field selector names a field the kind does not index.
    #[error("field label not supported: {0}")]
    UnsupportedField(String),
}

// =============================================================================================
// Label selectors
// =============================================================================================

/// How a label requirement relates its key to its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operator {
    /// `k=v`
    Equals,
    /// `k==v`
    DoubleEquals,
    /// `k!=v`: also true when the label is absent.
    NotEquals,
    /// `k in (a,b)`
    In,
    /// `k notin (a,b)`: also true when the label is absent.
    NotIn,
    /// `k`
    Exists,
    /// `!k`
    DoesNotExist,
    /// `k>5`: the label must be an integer greater than the value.
    GreaterThan,
    /// `k<5`: the label must be an integer less than the value.
    LessThan,
}

/// One comma-separated term of a label selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    key: String,
    operator: Operator,
    /// Sorted and de-duplicated, as upstream keeps them in a string set.
    values: Vec<String>,
}

impl Requirement {
    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn operator(&self) -> Operator {
        self.operator
    }

    /// The values, sorted and without duplicates; empty for `Exists`/`DoesNotExist`.
    pub fn values(&self) -> &[String] {
        &self.values
    }

    fn has_value(&self, value: &str) -> bool {
        self.values.iter().any(|v| v == value)
    }

    /// Whether a label set satisfies this requirement; `lookup` returns a label's value, or
    /// `None` when the object does not carry the label.
    pub fn matches_with<'a>(&self, lookup: impl Fn(&str) -> Option<&'a str>) -> bool {
        match self.operator {
            Operator::Equals | Operator::DoubleEquals | Operator::In => {
                lookup(&self.key).is_some_and(|v| self.has_value(v))
            }
            Operator::NotEquals | Operator::NotIn => {
                lookup(&self.key).is_none_or(|v| !self.has_value(v))
            }
            Operator::Exists => lookup(&self.key).is_some(),
            Operator::DoesNotExist => lookup(&self.key).is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                // A missing label, or one that is not an integer, never satisfies an
                // inequality (upstream logs and returns false).
                let Some(actual) = lookup(&self.key).and_then(|v| v.parse::<i64>().ok()) else {
                    return false;
                };
                let [bound] = self.values.as_slice() else {
                    return false;
                };
                let Ok(bound) = bound.parse::<i64>() else {
                    return false;
                };
                if self.operator == Operator::GreaterThan {
                    actual > bound
                } else {
                    actual < bound
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    /// Upstream's canonical form: `!k`, `k`, `k=v`, `k in (a,b)`, `k>5`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.operator == Operator::DoesNotExist {
            f.write_str("!")?;
        }
        f.write_str(&self.key)?;
        let op = match self.operator {
            Operator::Exists | Operator::DoesNotExist => return Ok(()),
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::In => " in ",
            Operator::NotIn => " notin ",
            Operator::GreaterThan => ">",
            Operator::LessThan => "<",
        };
        f.write_str(op)?;
        let joined = self.values.join(",");
        if matches!(self.operator, Operator::In | Operator::NotIn) {
            write!(f, "({joined})")
        } else {
            f.write_str(&joined)
        }
    }
}

/// A parsed label selector: the AND of its requirements. The default (and the parse of an
/// empty string) matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    /// Sorted by key, as upstream sorts them for a deterministic form.
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// Parses the `labelSelector` query parameter.
    pub fn parse(selector: &str) -> Result<LabelSelector, SelectorError> {
        let mut parser = Parser::new(selector);
        let mut requirements = parser
            .parse()
            .map_err(SelectorError::InvalidLabelSelector)?;
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector { requirements })
    }

    /// True when the selector does not restrict anything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// Whether an object with these `metadata.labels` is selected. `None` (no labels) is an
    /// empty label set. A label whose value is not a JSON string counts as present but equal
    /// to no value (typed clients cannot produce one).
    pub fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        self.matches_with(|key| {
            labels
                .and_then(|map| map.get(key))
                .map(|v| v.as_str().unwrap_or(NON_STRING_LABEL))
        })
    }

    /// Like [`LabelSelector::matches`] for labels held in any other shape.
    pub fn matches_with<'a>(&self, lookup: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.requirements.iter().all(|r| r.matches_with(&lookup))
    }

    /// If the selector pins `label` to one value (`=`, `==`, or `in` with a single value),
    /// that value — upstream's `RequiresExactMatch`, useful for index lookups.
    pub fn requires_exact_match(&self, label: &str) -> Option<&str> {
        let r = self.requirements.iter().find(|r| r.key == label)?;
        match (r.operator, r.values.as_slice()) {
            (Operator::Equals | Operator::DoubleEquals | Operator::In, [only]) => Some(only),
            _ => None,
        }
    }
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

/// Stands in for a label whose JSON value is not a string: present, yet equal to no selector
/// value, because a selector value can never contain the NUL byte (the lexer ends there).
const NON_STRING_LABEL: &str = "\u{0}<non-string>";

// ---------------------------------------------------------------------------------------------
// Lexer
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token {
    Error,
    EndOfString,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

/// The literal tokens; an identifier spelled `in` or `notin` lexes as the keyword.
fn literal_token(s: &[u8]) -> Option<Token> {
    Some(match s {
        b")" => Token::ClosedPar,
        b"," => Token::Comma,
        b"!" => Token::DoesNotExist,
        b"==" => Token::DoubleEquals,
        b"=" => Token::Equals,
        b">" => Token::GreaterThan,
        b"in" => Token::In,
        b"<" => Token::LessThan,
        b"!=" => Token::NotEquals,
        b"notin" => Token::NotIn,
        b"(" => Token::OpenPar,
        _ => return None,
    })
}

fn is_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special_symbol(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// Byte-oriented like upstream's: every delimiter is ASCII, so identifiers always cut the
/// input at character boundaries. A NUL byte reads as end of input, as upstream's does.
struct Lexer<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Lexer<'_> {
    fn read(&mut self) -> u8 {
        match self.s.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                b
            }
            None => 0,
        }
    }

    fn unread(&mut self) {
        self.pos = self.pos.saturating_sub(1);
    }

    fn text(bytes: &[u8]) -> String {
        String::from_utf8_lossy(bytes).into_owned()
    }

    fn scan_id_or_keyword(&mut self) -> (Token, String) {
        let mut buffer = Vec::new();
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if is_special_symbol(ch) || is_whitespace(ch) {
                self.unread();
                break;
            }
            buffer.push(ch);
        }
        match literal_token(&buffer) {
            Some(tok) => (tok, Self::text(&buffer)),
            None => (Token::Identifier, Self::text(&buffer)),
        }
    }

    /// Longest run of symbol characters that still spells an operator (`!=` over `!`).
    fn scan_special_symbol(&mut self) -> (Token, String) {
        let mut buffer = Vec::new();
        let mut last: Option<(Token, usize)> = None;
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if !is_special_symbol(ch) {
                self.unread();
                break;
            }
            buffer.push(ch);
            if let Some(tok) = literal_token(&buffer) {
                last = Some((tok, buffer.len()));
            } else if last.is_some() {
                self.unread();
                break;
            }
        }
        match last {
            Some((tok, len)) => (tok, Self::text(&buffer[..len])),
            None => (
                Token::Error,
                format!("error expected: keyword found '{}'", Self::text(&buffer)),
            ),
        }
    }

    fn lex(&mut self) -> (Token, String) {
        let mut ch = self.read();
        while is_whitespace(ch) {
            ch = self.read();
        }
        if ch == 0 {
            return (Token::EndOfString, String::new());
        }
        self.unread();
        if is_special_symbol(ch) {
            self.scan_special_symbol()
        } else {
            self.scan_id_or_keyword()
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Parser
// ---------------------------------------------------------------------------------------------

/// Where the parser is: in value position the keywords `in`/`notin` are plain identifiers,
/// so `in in (in)` is a valid selector.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    Values,
}

struct Parser {
    items: Vec<(Token, String)>,
    position: usize,
}

const BINARY_OPERATORS: &str = "in, notin, =, ==, !=, gt, lt";

impl Parser {
    fn new(selector: &str) -> Parser {
        let mut lexer = Lexer {
            s: selector.as_bytes(),
            pos: 0,
        };
        let mut items = Vec::new();
        loop {
            let (tok, lit) = lexer.lex();
            items.push((tok, lit));
            if tok == Token::EndOfString {
                break;
            }
        }
        Parser { items, position: 0 }
    }

    fn item(&self, index: usize, context: Context) -> (Token, String) {
        let (tok, lit) = self
            .items
            .get(index)
            .cloned()
            .unwrap_or((Token::EndOfString, String::new()));
        let tok = match (context, tok) {
            (Context::Values, Token::In | Token::NotIn) => Token::Identifier,
            _ => tok,
        };
        (tok, lit)
    }

    fn lookahead(&self, context: Context) -> (Token, String) {
        self.item(self.position, context)
    }

    fn consume(&mut self, context: Context) -> (Token, String) {
        let item = self.item(self.position, context);
        self.position += 1;
        item
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut requirements = Vec::new();
        loop {
            let (tok, lit) = self.lookahead(Context::Values);
            match tok {
                Token::Identifier | Token::DoesNotExist => {
                    let requirement = self
                        .parse_requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    requirements.push(requirement);
                    let (t, l) = self.consume(Context::Values);
                    match t {
                        Token::EndOfString => return Ok(requirements),
                        Token::Comma => {
                            let (t2, l2) = self.lookahead(Context::Values);
                            if t2 != Token::Identifier && t2 != Token::DoesNotExist {
                                return Err(format!(
                                    "found '{l2}', expected: identifier after ','"
                                ));
                            }
                        }
                        _ => return Err(format!("found '{l}', expected: ',' or 'end of string'")),
                    }
                }
                Token::EndOfString => return Ok(requirements),
                _ => {
                    return Err(format!(
                        "found '{lit}', expected: !, identifier, or 'end of string'"
                    ));
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, String> {
        let (key, operator) = self.parse_key_and_infer_operator()?;
        if let Some(op @ (Operator::Exists | Operator::DoesNotExist)) = operator {
            return new_requirement(key, op, Vec::new());
        }
        let operator = self.parse_operator()?;
        let values = match operator {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        new_requirement(key, operator, values)
    }

    /// Reads `[!]key`; the operator is known here only for `!key` and bare `key`.
    fn parse_key_and_infer_operator(&mut self) -> Result<(String, Option<Operator>), String> {
        let mut operator = None;
        let (mut tok, mut lit) = self.consume(Context::Values);
        if tok == Token::DoesNotExist {
            operator = Some(Operator::DoesNotExist);
            (tok, lit) = self.consume(Context::Values);
        }
        if tok != Token::Identifier {
            return Err(format!("found '{lit}', expected: identifier"));
        }
        validate_label_key(&lit)?;
        let (next, _) = self.lookahead(Context::Values);
        if matches!(next, Token::EndOfString | Token::Comma) && operator.is_none() {
            operator = Some(Operator::Exists);
        }
        Ok((lit, operator))
    }

    fn parse_operator(&mut self) -> Result<Operator, String> {
        let (tok, lit) = self.consume(Context::KeyAndOperator);
        Ok(match tok {
            Token::In => Operator::In,
            Token::Equals => Operator::Equals,
            Token::DoubleEquals => Operator::DoubleEquals,
            Token::GreaterThan => Operator::GreaterThan,
            Token::LessThan => Operator::LessThan,
            Token::NotIn => Operator::NotIn,
            Token::NotEquals => Operator::NotEquals,
            _ => return Err(format!("found '{lit}', expected: {BINARY_OPERATORS}")),
        })
    }

    /// `( values )`; `()` is the single empty value.
    fn parse_values(&mut self) -> Result<Vec<String>, String> {
        let (tok, lit) = self.consume(Context::Values);
        if tok != Token::OpenPar {
            return Err(format!("found '{lit}' expected: '('"));
        }
        let (tok, lit) = self.lookahead(Context::Values);
        match tok {
            Token::Identifier | Token::Comma => {
                let values = self.parse_identifiers_list()?;
                let (closing, _) = self.consume(Context::Values);
                if closing != Token::ClosedPar {
                    return Err(format!("found '{lit}', expected: ')'"));
                }
                Ok(values)
            }
            Token::ClosedPar => {
                self.consume(Context::Values);
                Ok(vec![String::new()])
            }
            _ => Err(format!("found '{lit}', expected: ',', ')' or identifier")),
        }
    }

    /// A comma-separated list in which empty entries (`(,a)`, `(a,)`, `(a,,b)`) stand for
    /// the empty value.
    fn parse_identifiers_list(&mut self) -> Result<Vec<String>, String> {
        let mut values: Vec<String> = Vec::new();
        loop {
            let (tok, lit) = self.consume(Context::Values);
            match tok {
                Token::Identifier => {
                    values.push(lit);
                    let (tok2, lit2) = self.lookahead(Context::Values);
                    match tok2 {
                        Token::Comma => continue,
                        Token::ClosedPar => return Ok(values),
                        _ => return Err(format!("found '{lit2}', expected: ',' or ')'")),
                    }
                }
                Token::Comma => {
                    if values.is_empty() {
                        values.push(String::new());
                    }
                    let (tok2, _) = self.lookahead(Context::Values);
                    if tok2 == Token::ClosedPar {
                        values.push(String::new());
                        return Ok(values);
                    }
                    if tok2 == Token::Comma {
                        values.push(String::new());
                    }
                }
                _ => return Err(format!("found '{lit}', expected: ',', or identifier")),
            }
        }
    }

    /// The single value after `=`, `==`, `!=`, `>` or `<`; nothing (`k=`) is the empty value.
    fn parse_exact_value(&mut self) -> Result<Vec<String>, String> {
        let (tok, _) = self.lookahead(Context::Values);
        if matches!(tok, Token::EndOfString | Token::Comma) {
            return Ok(vec![String::new()]);
        }
        let (tok, lit) = self.consume(Context::Values);
        if tok == Token::Identifier {
            Ok(vec![lit])
        } else {
            Err(format!("found '{lit}', expected: identifier"))
        }
    }
}

/// A parse-time key error. Upstream builds a `field.Error` with no path, which prints its
/// path as `<nil>`; clients really do see `<nil>: Invalid value: …`, so it is kept.
fn validate_label_key(key: &str) -> Result<(), String> {
    let errs = is_qualified_name(key);
    if errs.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "<nil>: Invalid value: {}: {}",
            go_quote(key),
            errs.join("; ")
        ))
    }
}

/// Upstream's `NewRequirement` checks once the pieces are parsed, with its aggregated
/// message (one error bare, several as `[a, b]`). Values are de-duplicated and sorted first,
/// as upstream passes them through a string set.
fn new_requirement(
    key: String,
    operator: Operator,
    mut values: Vec<String>,
) -> Result<Requirement, String> {
    values.sort();
    values.dedup();
    let mut errs: Vec<String> = Vec::new();
    if matches!(operator, Operator::GreaterThan | Operator::LessThan) {
        for (i, value) in values.iter().enumerate() {
            if value.parse::<i64>().is_err() {
                errs.push(format!(
                    "values[{i}]: Invalid value: {}: for 'Gt', 'Lt' operators, the value must be an integer",
                    go_quote(value)
                ));
            }
        }
    }
    for (i, value) in values.iter().enumerate() {
        let msgs = is_valid_label_value(value);
        if !msgs.is_empty() {
            errs.push(format!(
                "values[{i}][{key}]: Invalid value: {}: {}",
                go_quote(value),
                msgs.join("; ")
            ));
        }
    }
    errs.dedup();
    match errs.as_slice() {
        [] => Ok(Requirement {
            key,
            operator,
            values,
        }),
        [one] => Err(one.clone()),
        many => Err(format!("[{}]", many.join(", "))),
    }
}

// =============================================================================================
// Field selectors
// =============================================================================================

/// The field labels every kind supports (upstream's default field label conversion).
pub const DEFAULT_FIELDS: [&str; 2] = ["metadata.name", "metadata.namespace"];

/// One `field=value` or `field!=value` term. `==` parses to [`FieldOperator::Equals`], as
/// upstream makes no difference.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FieldOperator {
    Equals,
    NotEquals,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldRequirement {
    pub field: String,
    pub operator: FieldOperator,
    /// Unescaped value.
    pub value: String,
}

/// A parsed field selector: the AND of its terms. The default (and the parse of an empty
/// string) matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    /// In upstream's order: sorted by the raw term text.
    terms: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// Parses the `fieldSelector` query parameter.
    pub fn parse(selector: &str) -> Result<FieldSelector, SelectorError> {
        let mut parts = split_terms(selector);
        parts.sort_unstable();
        let mut terms = Vec::with_capacity(parts.len());
        for part in parts {
            if part.is_empty() {
                continue;
            }
            let Some((field, operator, raw_value)) = split_term(part) else {
                return Err(SelectorError::InvalidFieldSelector(format!(
                    "invalid selector: '{selector}'; can't understand '{part}'"
                )));
            };
            let value = unescape_value(raw_value)?;
            // Upstream's parse drops a term whose field and value are both empty (`=`).
            if field.is_empty() && value.is_empty() {
                continue;
            }
            terms.push(FieldRequirement {
                field: field.to_string(),
                operator,
                value,
            });
        }
        Ok(FieldSelector { terms })
    }

    /// True when the selector does not restrict anything.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    pub fn terms(&self) -> &[FieldRequirement] {
        &self.terms
    }

    /// The selector with each field label replaced by `path_of(label)`: the JSON path
    /// [`FieldSelector::matches_object`] reads it at, when a kind's label is not spelled as its
    /// path.
    pub fn with_paths(mut self, path_of: impl Fn(&str) -> &str) -> FieldSelector {
        for term in &mut self.terms {
            let path = path_of(&term.field);
            if path != term.field {
                term.field = path.to_string();
            }
        }
        self
    }

    /// Checks every field against the kind's supported field labels (which should include
    /// [`DEFAULT_FIELDS`] where the kind has them); the first one missing gives upstream's
    /// `field label not supported: X`.
    pub fn validate_fields(&self, supported: &[&str]) -> Result<(), SelectorError> {
        match self
            .terms
            .iter()
            .find(|t| !supported.contains(&t.field.as_str()))
        {
            Some(term) => Err(SelectorError::UnsupportedField(term.field.clone())),
            None => Ok(()),
        }
    }

    /// Whether an object is selected; `fields` returns the object's value for a field label.
    /// A field the object lacks reads as the empty string, as upstream's field sets do, so
    /// `f=` selects objects without `f` and `f!=x` selects them too.
    pub fn matches(&self, fields: &impl Fn(&str) -> Option<String>) -> bool {
        self.terms.iter().all(|term| {
            let actual = fields(&term.field).unwrap_or_default();
            match term.operator {
                FieldOperator::Equals => actual == term.value,
                FieldOperator::NotEquals => actual != term.value,
            }
        })
    }

    /// [`FieldSelector::matches`] reading fields straight out of the object by path
    /// (see [`object_field`]).
    pub fn matches_object(&self, object: &Value) -> bool {
        self.matches(&|path| object_field(object, path))
    }

    /// The value the selector requires of `field` (an `=`/`==` term), if any — upstream's
    /// `RequiresExactMatch`.
    pub fn requires_exact_match(&self, field: &str) -> Option<&str> {
        self.terms
            .iter()
            .find(|t| t.field == field && t.operator == FieldOperator::Equals)
            .map(|t| t.value.as_str())
    }

    /// The name when the selector is exactly `metadata.name=X` (or `==`), so that a list can
    /// read one key instead of scanning the collection.
    pub fn single_name(&self) -> Option<&str> {
        match self.terms.as_slice() {
            [term] if term.field == "metadata.name" && term.operator == FieldOperator::Equals => {
                Some(&term.value)
            }
            _ => None,
        }
    }
}

impl fmt::Display for FieldSelector {
    /// Upstream's canonical form, values re-escaped: `a=b,c!=d\,e`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, term) in self.terms.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let op = match term.operator {
                FieldOperator::Equals => "=",
                FieldOperator::NotEquals => "!=",
            };
            write!(f, "{}{op}{}", term.field, escape_value(&term.value))?;
        }
        Ok(())
    }
}

/// Escapes `\`, `,` and `=` so a literal value survives a field selector.
pub fn escape_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Splits on commas not preceded by a backslash, keeping escapes in place for the value
/// unescaping that follows.
fn split_terms(selector: &str) -> Vec<&str> {
    if selector.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in selector.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(&selector[start..i]);
            start = i + 1;
        }
    }
    terms.push(&selector[start..]);
    terms
}

/// Splits a term at the first operator; field names have no escapes, so the earliest `!=`,
/// `==` or `=` wins (`!=` and `==` checked first so `=` is not left on the value).
fn split_term(term: &str) -> Option<(&str, FieldOperator, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for (op, operator) in [
            ("!=", FieldOperator::NotEquals),
            ("==", FieldOperator::Equals),
            ("=", FieldOperator::Equals),
        ] {
            if let Some(value) = rest.strip_prefix(op) {
                return Some((&term[..i], operator, value));
            }
        }
    }
    None
}

/// Resolves `\\`, `\,` and `\=`; any other escape, a trailing `\`, or a bare `,`/`=` in the
/// value is an error with upstream's wording (which prints the bare character as its code
/// point number, e.g. `61` for `=`).
fn unescape_value(raw: &str) -> Result<String, SelectorError> {
    if !raw.contains(['\\', ',', '=']) {
        return Ok(raw.to_string());
    }
    let mut out = String::with_capacity(raw.len());
    let mut in_slash = false;
    for c in raw.chars() {
        if in_slash {
            if !matches!(c, '\\' | ',' | '=') {
                return Err(SelectorError::InvalidFieldSelector(format!(
                    "invalid field selector: invalid escape sequence: \\{c}"
                )));
            }
            out.push(c);
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            ',' | '=' => {
                return Err(SelectorError::InvalidFieldSelector(format!(
                    "invalid field selector: unescaped character in value: {}",
                    c as u32
                )));
            }
            _ => out.push(c),
        }
    }
    if in_slash {
        return Err(SelectorError::InvalidFieldSelector(
            "invalid field selector: invalid escape sequence: \\".to_string(),
        ));
    }
    Ok(out)
}

/// Selectable booleans that upstream's field sets print even when unset (a Node's
/// `spec.unschedulable`, a Pod's `spec.hostNetwork`), so `spec.unschedulable=false` matches
/// a Node that never had the field.
const FALSE_WHEN_ABSENT: [&str; 2] = ["spec.unschedulable", "spec.hostNetwork"];

/// Reads a dotted path (`metadata.name`, `spec.nodeName`, `involvedObject.kind`, `type`) out
/// of an object and renders it as a field selector compares it: strings as they are, numbers
/// in decimal, booleans as `true`/`false`. Absent fields, nulls, objects and arrays are
/// `None` (which matching treats as the empty string), except the booleans upstream's field
/// sets render with `strconv.FormatBool` ([`FALSE_WHEN_ABSENT`]), which read `false`.
pub fn object_field(obj: &Value, path: &str) -> Option<String> {
    let mut current = obj;
    for segment in path.split('.') {
        match current.as_object().and_then(|map| map.get(segment)) {
            Some(next) => current = next,
            None if FALSE_WHEN_ABSENT.contains(&path) => return Some("false".into()),
            None => return None,
        }
    }
    match current {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}

/// A structured `LabelSelector` as the one-line string form (`a=b,c in (d,e),!f`).
pub fn selector_string(selector: &Value) -> String {
    let mut parts = Vec::new();
    if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
        let mut labels: Vec<_> = labels.iter().collect();
        labels.sort_by(|a, b| a.0.cmp(b.0));
        for (key, value) in labels {
            parts.push(format!("{key}={}", value.as_str().unwrap_or_default()));
        }
    }
    for expression in selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = expression
            .get("key")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut values: Vec<&str> = expression
            .get("values")
            .and_then(Value::as_array)
            .map(|v| v.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        values.sort_unstable();
        let joined = values.join(",");
        match expression.get("operator").and_then(Value::as_str) {
            Some("In") => parts.push(format!("{key} in ({joined})")),
            Some("NotIn") => parts.push(format!("{key} notin ({joined})")),
            Some("Exists") => parts.push(key.to_string()),
            Some("DoesNotExist") => parts.push(format!("!{key}")),
            _ => {}
        }
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    fn sel(s: &str) -> LabelSelector {
        LabelSelector::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
    }

    fn err(s: &str) -> String {
        LabelSelector::parse(s).expect_err(s).to_string()
    }

    fn selects(s: &str, l: Value) -> bool {
        sel(s).matches(Some(&labels(l)))
    }

    #[test]
    fn empty_and_blank_select_everything() {
        for s in ["", "   ", "\t\n"] {
            let selector = sel(s);
            assert!(selector.is_empty());
            assert!(selector.matches(None));
            assert!(selector.matches(Some(&labels(json!({"a": "b"})))));
        }
    }

    #[test]
    fn equality_operators() {
        for s in ["app=web", "app==web", " app = web ", "app=  web"] {
            assert!(selects(s, json!({"app": "web"})), "{s}");
            assert!(!selects(s, json!({"app": "db"})), "{s}");
            assert!(!selects(s, json!({})), "{s}");
        }
        assert_eq!(
            sel("app==web").requirements()[0].operator(),
            Operator::DoubleEquals
        );
        assert!(selects("app!=web", json!({"app": "db"})));
        assert!(!selects("app!=web", json!({"app": "web"})));
        // != matches objects that lack the label.
        assert!(selects("app!=web", json!({})));
        assert!(sel("app!=web").matches(None));
    }

    #[test]
    fn empty_value() {
        for s in ["tier=", "tier==", "tier=,x"] {
            let selector = sel(s);
            assert_eq!(
                selector
                    .requirements()
                    .iter()
                    .find(|r| r.key() == "tier")
                    .unwrap()
                    .values(),
                [""]
            );
        }
        assert!(selects("tier=", json!({"tier": ""})));
        assert!(!selects("tier=", json!({"tier": "x"})));
        assert!(!selects("tier=", json!({})));
        assert!(selects("tier!=", json!({})));
        assert!(selects("tier!=", json!({"tier": "x"})));
    }

    #[test]
    fn existence() {
        assert!(selects("app", json!({"app": ""})));
        assert!(!selects("app", json!({"other": "x"})));
        assert!(selects("!app", json!({"other": "x"})));
        assert!(!selects("!app", json!({"app": "x"})));
        assert!(sel("!app").matches(None));
        assert!(!sel("app").matches(None));
        assert_eq!(
            sel(" ! app ").requirements()[0].operator(),
            Operator::DoesNotExist
        );
    }

    #[test]
    fn set_operators() {
        let s = "env in (prod, staging)";
        assert!(selects(s, json!({"env": "prod"})));
        assert!(selects(s, json!({"env": "staging"})));
        assert!(!selects(s, json!({"env": "dev"})));
        assert!(!selects(s, json!({})));
        let s = "env notin (prod,staging)";
        assert!(!selects(s, json!({"env": "prod"})));
        assert!(selects(s, json!({"env": "dev"})));
        // notin matches objects that lack the label.
        assert!(selects(s, json!({})));
        // Values are a sorted set.
        assert_eq!(sel("k in (b,a,b)").requirements()[0].values(), ["a", "b"]);
        assert_eq!(sel("k in (b,a)").to_string(), "k in (a,b)");
        assert_eq!(sel("k in(a)").to_string(), "k in (a)");
    }

    #[test]
    fn empty_set_entries_are_the_empty_value() {
        assert_eq!(sel("k in ()").requirements()[0].values(), [""]);
        assert!(selects("k in ()", json!({"k": ""})));
        assert!(!selects("k in ()", json!({"k": "a"})));
        assert!(selects("k notin ()", json!({"k": "a"})));
        assert_eq!(sel("k in (,a)").requirements()[0].values(), ["", "a"]);
        assert_eq!(sel("k in (a,)").requirements()[0].values(), ["", "a"]);
        assert_eq!(
            sel("k in (a,,b)").requirements()[0].values(),
            ["", "a", "b"]
        );
        assert_eq!(sel("k in (,)").requirements()[0].values(), [""]);
        assert_eq!(sel("k in (,,)").requirements()[0].values(), [""]);
    }

    #[test]
    fn keywords_are_identifiers_in_value_position() {
        let s = sel("in in (in, notin), notin=in");
        assert_eq!(s.requirements()[0].key(), "in");
        assert_eq!(s.requirements()[0].values(), ["in", "notin"]);
        assert_eq!(s.requirements()[1].key(), "notin");
        assert!(s.matches(Some(&labels(json!({"in": "notin", "notin": "in"})))));
    }

    #[test]
    fn comparisons() {
        assert!(selects("replicas>2", json!({"replicas": "3"})));
        assert!(!selects("replicas>2", json!({"replicas": "2"})));
        assert!(selects("replicas<2", json!({"replicas": "1"})));
        assert!(!selects("replicas<2", json!({"replicas": "x"})));
        assert!(!selects("replicas<2", json!({})));
        assert_eq!(
            err("k>a"),
            "unable to parse requirement: values[0]: Invalid value: \"a\": for 'Gt', 'Lt' operators, the value must be an integer"
        );
    }

    #[test]
    fn conjunction_and_prefixed_keys() {
        let s = "app.kubernetes.io/name=web,tier in (fe),!legacy";
        assert!(selects(
            s,
            json!({"app.kubernetes.io/name": "web", "tier": "fe"})
        ));
        assert!(!selects(
            s,
            json!({"app.kubernetes.io/name": "web", "tier": "fe", "legacy": "1"})
        ));
        assert!(!selects(s, json!({"app.kubernetes.io/name": "web"})));
        // Canonical form is sorted by key.
        assert_eq!(sel("b=1,a=2,!c").to_string(), "a=2,b=1,!c");
    }

    #[test]
    fn non_string_label_values_never_equal() {
        let l = labels(json!({"n": 5}));
        assert!(sel("n").matches(Some(&l)));
        assert!(!sel("n=5").matches(Some(&l)));
        assert!(sel("n!=5").matches(Some(&l)));
    }

    #[test]
    fn syntax_errors_use_upstream_messages() {
        assert_eq!(err("a,"), "found '', expected: identifier after ','");
        assert_eq!(err("a,,b"), "found ',', expected: identifier after ','");
        assert_eq!(
            err(",a"),
            "found ',', expected: !, identifier, or 'end of string'"
        );
        assert_eq!(
            err("a b"),
            "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"
        );
        assert_eq!(err("a=b c"), "found 'c', expected: ',' or 'end of string'");
        assert_eq!(err("!a=b"), "found '=', expected: ',' or 'end of string'");
        assert_eq!(
            err("a in b"),
            "unable to parse requirement: found 'b' expected: '('"
        );
        assert_eq!(
            err("a in (b"),
            "unable to parse requirement: found '', expected: ',' or ')'"
        );
        assert_eq!(
            err("a in (b c)"),
            "unable to parse requirement: found 'c', expected: ',' or ')'"
        );
        assert_eq!(
            err("a in (=)"),
            "unable to parse requirement: found '=', expected: ',', ')' or identifier"
        );
        assert_eq!(
            err("a in (b,=)"),
            "unable to parse requirement: found '=', expected: ',', or identifier"
        );
        assert_eq!(
            err("a=(b)"),
            "unable to parse requirement: found '(', expected: identifier"
        );
        assert_eq!(
            err("!"),
            "unable to parse requirement: found '', expected: identifier"
        );
        assert_eq!(
            err("!=a"),
            "found '!=', expected: !, identifier, or 'end of string'"
        );
        assert_eq!(
            err("a!b"),
            "unable to parse requirement: found '!', expected: in, notin, =, ==, !=, gt, lt"
        );
        assert_eq!(
            err("a in"),
            "unable to parse requirement: found '' expected: '('"
        );
        assert_eq!(err("a=b=c"), "found '=', expected: ',' or 'end of string'");
    }

    #[test]
    fn invalid_keys_and_values() {
        assert_eq!(
            err("Foo_=x"),
            "unable to parse requirement: <nil>: Invalid value: \"Foo_\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        );
        assert!(err("UPPER.example.com/x").contains("prefix part a lowercase RFC 1123 subdomain"));
        assert!(err(&"k".repeat(64)).contains("name part must be no more than 63 characters"));
        assert!(LabelSelector::parse(&"k".repeat(63)).is_ok());
        assert_eq!(
            err("k=-bad"),
            "unable to parse requirement: values[0][k]: Invalid value: \"-bad\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
        );
        let many = err("k in (-a, b_)");
        assert!(
            many.starts_with("unable to parse requirement: [values[0][k]: Invalid value: \"-a\""),
            "{many}"
        );
        assert!(
            many.contains(", values[1][k]: Invalid value: \"b_\""),
            "{many}"
        );
        assert!(many.ends_with(")]"), "{many}");
        assert!(
            err(&format!("k={}", "v".repeat(64))).contains("must be no more than 63 characters")
        );
        assert!(LabelSelector::parse(&format!("k={}", "v".repeat(63))).is_ok());
        // Labels may contain '/' only in keys.
        assert!(LabelSelector::parse("k=a/b").is_err());
        assert!(LabelSelector::parse("a/b/c").is_err());
    }

    #[test]
    fn exact_match_introspection() {
        let s = sel("app=web,env in (prod),tier in (a,b),x!=y");
        assert_eq!(s.requires_exact_match("app"), Some("web"));
        assert_eq!(s.requires_exact_match("env"), Some("prod"));
        assert_eq!(s.requires_exact_match("tier"), None);
        assert_eq!(s.requires_exact_match("x"), None);
        assert_eq!(s.requires_exact_match("nope"), None);
    }

    // ----- field selectors -----

    fn fsel(s: &str) -> FieldSelector {
        FieldSelector::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
    }

    fn pod() -> Value {
        json!({
            "metadata": {"name": "web-1", "namespace": "default"},
            "spec": {"nodeName": "node-a", "restartCount": 3, "unschedulable": true},
            "status": {"phase": "Running"},
        })
    }

    #[test]
    fn field_operators() {
        let p = pod();
        assert!(fsel("metadata.name=web-1").matches_object(&p));
        assert!(fsel("metadata.name==web-1").matches_object(&p));
        assert!(!fsel("metadata.name=web-2").matches_object(&p));
        assert!(fsel("metadata.name!=web-2").matches_object(&p));
        assert!(!fsel("metadata.name!=web-1").matches_object(&p));
        assert!(fsel("status.phase=Running,spec.nodeName=node-a").matches_object(&p));
        assert!(!fsel("status.phase=Running,spec.nodeName=node-b").matches_object(&p));
        // Missing fields read as "".
        assert!(fsel("spec.missing=").matches_object(&p));
        assert!(fsel("spec.missing!=x").matches_object(&p));
        assert!(!fsel("spec.missing=x").matches_object(&p));
        assert!(fsel("spec.nodeName!=").matches_object(&p));
        // The closure form.
        assert!(
            fsel("type=Opaque").matches(&|f: &str| (f == "type").then(|| "Opaque".to_string()))
        );
        let by_ref = |f: &str| object_field(&p, f);
        assert!(fsel("status.phase=Running").matches(&by_ref));
    }

    #[test]
    fn field_empty_and_structure() {
        assert!(fsel("").is_empty());
        assert!(fsel(",,").is_empty());
        // A term with neither field nor value is dropped, as upstream's parse does.
        assert!(fsel("=").is_empty());
        assert!(fsel("").matches_object(&pod()));
        let s = fsel("b=2,a!=1");
        assert_eq!(s.terms()[0].field, "a");
        assert_eq!(s.to_string(), "a!=1,b=2");
        // No whitespace trimming: the field name keeps its space.
        assert_eq!(fsel("metadata.name = x").terms()[0].field, "metadata.name ");
        assert_eq!(fsel("metadata.name = x").terms()[0].value, " x");
        // The first operator splits; the value may contain '!' freely.
        let s = fsel("a=!b");
        assert_eq!(
            (s.terms()[0].operator, s.terms()[0].value.as_str()),
            (FieldOperator::Equals, "!b")
        );
        let s = fsel("a==b");
        assert_eq!(s.terms()[0].value, "b");
        // `!=` wins at the first position, leaving a bare `=` in the value.
        assert_eq!(
            FieldSelector::parse("a!==b").unwrap_err().to_string(),
            "invalid field selector: unescaped character in value: 61"
        );
    }

    #[test]
    fn field_escaping() {
        let s = fsel(r"metadata.name=a\,b\=c\\d");
        assert_eq!(s.terms()[0].value, r"a,b=c\d");
        assert_eq!(s.to_string(), r"metadata.name=a\,b\=c\\d");
        assert_eq!(escape_value(r"x,y=z\"), r"x\,y\=z\\");
        // An escaped comma does not split terms.
        let s = fsel(r"a=1\,2,b=3");
        assert_eq!(s.terms().len(), 2);
        assert_eq!(s.terms()[0].value, "1,2");
        assert!(s.matches(&|f: &str| Some(if f == "a" { "1,2" } else { "3" }.to_string())));
    }

    #[test]
    fn field_errors() {
        let e = FieldSelector::parse("metadata.name").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid selector: 'metadata.name'; can't understand 'metadata.name'"
        );
        let e = FieldSelector::parse("a=b,c").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid selector: 'a=b,c'; can't understand 'c'"
        );
        let e = FieldSelector::parse(r"a=b\x").unwrap_err();
        assert_eq!(
            e.to_string(),
            r"invalid field selector: invalid escape sequence: \x"
        );
        let e = FieldSelector::parse(r"a=b\").unwrap_err();
        assert_eq!(
            e.to_string(),
            r"invalid field selector: invalid escape sequence: \"
        );
        let e = FieldSelector::parse("a=b=c").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid field selector: unescaped character in value: 61"
        );
        assert!(matches!(e, SelectorError::InvalidFieldSelector(_)));
    }

    #[test]
    fn field_support_checks() {
        let s = fsel("metadata.name=x,spec.nodeName=n");
        assert!(
            s.validate_fields(&["metadata.name", "metadata.namespace", "spec.nodeName"])
                .is_ok()
        );
        let e = s.validate_fields(&DEFAULT_FIELDS).unwrap_err();
        assert_eq!(e, SelectorError::UnsupportedField("spec.nodeName".into()));
        assert_eq!(e.to_string(), "field label not supported: spec.nodeName");
        assert!(fsel("").validate_fields(&[]).is_ok());
        let owned: Vec<&str> = vec!["metadata.name"];
        assert!(fsel("metadata.name=a").validate_fields(&owned).is_ok());
    }

    #[test]
    fn single_name_and_exact_match() {
        assert_eq!(fsel("metadata.name=web-1").single_name(), Some("web-1"));
        assert_eq!(fsel("metadata.name==web-1").single_name(), Some("web-1"));
        assert_eq!(fsel("metadata.name!=web-1").single_name(), None);
        assert_eq!(
            fsel("metadata.name=a,status.phase=Running").single_name(),
            None
        );
        assert_eq!(fsel("status.phase=Running").single_name(), None);
        assert_eq!(fsel("").single_name(), None);
        let s = fsel("metadata.name=a,metadata.namespace=ns");
        assert_eq!(s.requires_exact_match("metadata.namespace"), Some("ns"));
        assert_eq!(s.requires_exact_match("status.phase"), None);
    }

    #[test]
    fn object_fields_render_like_upstream() {
        let p = pod();
        assert_eq!(object_field(&p, "metadata.name").as_deref(), Some("web-1"));
        assert_eq!(object_field(&p, "spec.nodeName").as_deref(), Some("node-a"));
        assert_eq!(object_field(&p, "spec.restartCount").as_deref(), Some("3"));
        assert_eq!(
            object_field(&p, "spec.unschedulable").as_deref(),
            Some("true")
        );
        assert_eq!(object_field(&p, "status.phase").as_deref(), Some("Running"));
        assert_eq!(object_field(&p, "spec").as_deref(), None);
        assert_eq!(object_field(&p, "spec.nodeName.x").as_deref(), None);
        assert_eq!(
            object_field(&p, "spec.hostNetwork").as_deref(),
            Some("false")
        );
        assert!(fsel("spec.unschedulable=false").matches_object(&json!({"spec": {}})));
        assert!(
            fsel("spec.unschedulable=true")
                .matches_object(&json!({"spec": {"unschedulable": true}}))
        );
        assert_eq!(object_field(&p, "nope").as_deref(), None);
        assert_eq!(
            object_field(&json!({"type": "Opaque"}), "type").as_deref(),
            Some("Opaque")
        );
        assert_eq!(object_field(&json!({"a": null}), "a"), None);
        let event = json!({"involvedObject": {"kind": "Pod"}});
        assert_eq!(
            object_field(&event, "involvedObject.kind").as_deref(),
            Some("Pod")
        );
    }
}
