//! Name and metadata validation with the Kubernetes API server's exact wording.
//!
//! Clients show these messages to people verbatim (`kubectl apply` prints the 422 `Status`
//! message, kube-rs surfaces `details.causes[]`), and scripts grep them, so every message and
//! every rule here follows apimachinery as shipped with Kubernetes 1.33
//! (`pkg/util/validation`, `pkg/api/validation`, `pkg/util/validation/field`).
//!
//! There is no regex crate in this workspace: each upstream regex is a tiny character-class
//! grammar, so the checks are written by hand over bytes. Lengths are byte lengths, as Go's
//! `len()` counts them.

use std::fmt;

use serde_json::{Map, Value};

/// Maximum length of a DNS-1123 label (and of a DNS-1035 label).
pub const DNS1123_LABEL_MAX_LENGTH: usize = 63;
/// Maximum length of a DNS-1123 subdomain.
pub const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;
/// Maximum length of the name part of a qualified name (label keys, annotation keys, finalizers).
pub const QUALIFIED_NAME_MAX_LENGTH: usize = 63;
/// Maximum length of a label value.
pub const LABEL_VALUE_MAX_LENGTH: usize = 63;
/// Upper bound on the summed byte length of all annotation keys and values (256 KiB).
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

/// The finalizers Kubernetes itself defines without a domain prefix; only these escape the
/// "prefer a domain-qualified finalizer name" warning on custom resources.
pub const STANDARD_FINALIZERS: [&str; 3] = ["orphan", "foregroundDeletion", "kubernetes"];

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_ERR: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const DNS1035_LABEL_ERR: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

// ---------------------------------------------------------------------------------------------
// Field errors
// ---------------------------------------------------------------------------------------------

/// Why a field was rejected; one-to-one with upstream's `field.ErrorType` / `metav1.CauseType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FieldErrorReason {
    Required,
    Invalid,
    TooLong,
    NotSupported,
    Forbidden,
    Duplicate,
    /// A list or map with more entries than allowed (`field.TooMany`).
    TooMany,
    /// A value of the wrong JSON type for its schema (`field.TypeInvalid`); printed like
    /// `Invalid value`, but with its own cause reason.
    TypeInvalid,
}

impl FieldErrorReason {
    /// The `details.causes[].reason` string of a 422 `Status`.
    pub fn cause_reason(&self) -> &'static str {
        match self {
            FieldErrorReason::Required => "FieldValueRequired",
            FieldErrorReason::Invalid => "FieldValueInvalid",
            FieldErrorReason::TooLong => "FieldValueTooLong",
            FieldErrorReason::NotSupported => "FieldValueNotSupported",
            FieldErrorReason::Forbidden => "FieldValueForbidden",
            FieldErrorReason::Duplicate => "FieldValueDuplicate",
            FieldErrorReason::TooMany => "FieldValueTooMany",
            FieldErrorReason::TypeInvalid => "FieldValueTypeInvalid",
        }
    }

    /// The human phrase upstream prints for the type (`ErrorType.String()`).
    pub fn label(&self) -> &'static str {
        match self {
            FieldErrorReason::Required => "Required value",
            FieldErrorReason::Invalid => "Invalid value",
            FieldErrorReason::TooLong => "Too long",
            FieldErrorReason::NotSupported => "Unsupported value",
            FieldErrorReason::Forbidden => "Forbidden",
            FieldErrorReason::Duplicate => "Duplicate value",
            FieldErrorReason::TooMany => "Too many",
            FieldErrorReason::TypeInvalid => "Invalid value",
        }
    }

    /// Upstream never prints the offending value for these types, whatever was recorded.
    fn omits_value(&self) -> bool {
        matches!(
            self,
            FieldErrorReason::Required | FieldErrorReason::Forbidden | FieldErrorReason::TooLong
        )
    }
}

/// One rejected field, like upstream's `field.Error`.
///
/// `Display` renders upstream's `Error()` (`metadata.name: Invalid value: "x": detail`);
/// [`FieldError::body`] renders `ErrorBody()` (the same without the field path), which is what
/// upstream puts in `details.causes[].message`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Path of the field, e.g. `metadata.name` or `metadata.labels`.
    pub field: String,
    pub reason: FieldErrorReason,
    /// Detail text after the value; may be empty.
    pub message: String,
    /// The offending value. Strings are printed Go-quoted (`"Foo_bar"`) unless `literal`.
    pub value: Option<String>,
    /// `value` is already rendered (a number, a Go-syntax list) and is printed unquoted, as
    /// upstream prints non-string bad values with `%v`.
    pub literal: bool,
}

impl FieldError {
    // Paths and messages are taken as `&str` and values as `impl Into<String>`: call sites
    // pass literals or `&format!(…)` for the former and owned strings for the latter.
    fn new(field: &str, reason: FieldErrorReason, value: Option<String>, message: &str) -> Self {
        FieldError {
            field: field.to_string(),
            reason,
            message: message.to_string(),
            value,
            literal: false,
        }
    }

    /// `field: Required value: message` (upstream `field.Required`; message may be empty).
    pub fn required(field: &str, message: &str) -> Self {
        FieldError::new(field, FieldErrorReason::Required, None, message)
    }

    /// `field: Invalid value: "value": message` (upstream `field.Invalid` with a string).
    pub fn invalid(field: &str, value: impl Into<String>, message: &str) -> Self {
        FieldError::new(
            field,
            FieldErrorReason::Invalid,
            Some(value.into()),
            message,
        )
    }

    /// Like [`FieldError::invalid`] for a value that is not a string: `rendered` is printed as
    /// is (`metadata.generation: Invalid value: -1: …`).
    pub fn invalid_literal(field: &str, rendered: impl Into<String>, message: &str) -> Self {
        FieldError {
            literal: true,
            ..FieldError::invalid(field, rendered, message)
        }
    }

    /// `field: Unsupported value: "value": supported values: "a", "b"`.
    pub fn not_supported(field: &str, value: impl Into<String>, supported: &[&str]) -> Self {
        let message = if supported.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
            format!("supported values: {}", quoted.join(", "))
        };
        FieldError::new(
            field,
            FieldErrorReason::NotSupported,
            Some(value.into()),
            &message,
        )
    }

    /// `field: Too long: may not be more than N bytes`. The value is accepted for symmetry with
    /// upstream's signature but never printed (it may be huge).
    pub fn too_long(field: &str, _value: &str, max_bytes: usize) -> Self {
        let message = format!("may not be more than {max_bytes} bytes");
        FieldError::new(field, FieldErrorReason::TooLong, None, &message)
    }

    /// `field: Forbidden: message`.
    pub fn forbidden(field: &str, message: &str) -> Self {
        FieldError::new(field, FieldErrorReason::Forbidden, None, message)
    }

    /// `field: Duplicate value: "value"`.
    pub fn duplicate(field: &str, value: impl Into<String>) -> Self {
        FieldError::new(field, FieldErrorReason::Duplicate, Some(value.into()), "")
    }

    /// `field: Too many: 4: must have at most 3 items` (upstream `field.TooMany`); without
    /// `actual` the count is omitted. Upstream words maps with too many properties the same way.
    pub fn too_many(field: &str, actual: Option<usize>, max: usize) -> Self {
        FieldError {
            field: field.to_string(),
            reason: FieldErrorReason::TooMany,
            message: format!("must have at most {max} items"),
            value: actual.map(|n| n.to_string()),
            literal: true,
        }
    }

    /// `field: Invalid value: "string": message` with the `FieldValueTypeInvalid` cause reason
    /// (upstream `field.TypeInvalid`, used for schema type mismatches).
    pub fn type_invalid(field: &str, value: impl Into<String>, message: &str) -> Self {
        FieldError::new(
            field,
            FieldErrorReason::TypeInvalid,
            Some(value.into()),
            message,
        )
    }

    /// Upstream's `ErrorBody()`: the message without the field path, as used for
    /// `details.causes[].message`.
    pub fn body(&self) -> String {
        let mut out = String::from(self.reason.label());
        if !self.reason.omits_value()
            && let Some(value) = &self.value
        {
            out.push_str(": ");
            if self.literal {
                out.push_str(value);
            } else {
                out.push_str(&go_quote(value));
            }
        }
        if !self.message.is_empty() {
            out.push_str(": ");
            out.push_str(&self.message);
        }
        out
    }

    /// The `details.causes[]` entry upstream builds for this error (`reason`, `message` as
    /// [`FieldError::body`], `field`).
    pub fn to_status_cause(&self) -> Value {
        let mut cause = Map::new();
        cause.insert("reason".into(), Value::from(self.reason.cause_reason()));
        cause.insert("message".into(), Value::from(self.body()));
        if !self.field.is_empty() {
            cause.insert("field".into(), Value::from(self.field.clone()));
        }
        Value::Object(cause)
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

impl std::error::Error for FieldError {}

/// Joins errors the way upstream's `utilerrors.Aggregate` prints them inside a 422 message:
/// one error bare, several as `[a, b]`, identical messages only once.
pub fn aggregate_message(errors: &[FieldError]) -> String {
    let mut seen: Vec<String> = Vec::with_capacity(errors.len());
    for error in errors {
        let text = error.to_string();
        if !seen.contains(&text) {
            seen.push(text);
        }
    }
    match seen.as_slice() {
        [] => String::new(),
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// The `message` of a 422 `Status`: `ConfigMap "x" is invalid: …` (kind qualified by group
/// as `Kind.group` when the group is not core), as upstream's `errors.NewInvalid` words it.
pub fn invalid_message(kind: &str, group: &str, name: &str, errors: &[FieldError]) -> String {
    let qualified = if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    };
    if errors.is_empty() {
        format!("{qualified} {} is invalid", go_quote(name))
    } else {
        format!(
            "{qualified} {} is invalid: {}",
            go_quote(name),
            aggregate_message(errors)
        )
    }
}

/// Quotes a string as Go's `%q` / `strconv.Quote` does, since upstream renders bad values that
/// way: printable characters stay, `"` and `\` are escaped, control characters become escapes.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if is_go_printable(c) => out.push(c),
            c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push('"');
    out
}

/// Approximates Go's `strconv.IsPrint`: the ASCII space counts, other spacing and control
/// characters and the common invisible format characters do not.
fn is_go_printable(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    !matches!(
        c,
        '\u{ad}'
            | '\u{600}'..='\u{605}'
            | '\u{61c}'
            | '\u{6dd}'
            | '\u{70f}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206f}'
            | '\u{feff}'
            | '\u{fff9}'..='\u{fffb}'
            | '\u{e000}'..='\u{f8ff}'
    )
}

// ---------------------------------------------------------------------------------------------
// Message helpers (upstream's MaxLenError / RegexError / EmptyError)
// ---------------------------------------------------------------------------------------------

fn max_len_error(length: usize) -> String {
    format!("must be no more than {length} characters")
}

/// `msg (e.g. 'a',  or 'b', regex used for validation is 'fmt')` — including upstream's
/// double space before each "or", which people and tests match on.
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let mut out = format!("{msg} (e.g. ");
    for (i, example) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push('\'');
        out.push_str(example);
        out.push_str("', ");
    }
    out.push_str("regex used for validation is '");
    out.push_str(fmt);
    out.push_str("')");
    out
}

const EMPTY_ERROR: &str = "must be non-empty";

// ---------------------------------------------------------------------------------------------
// Character grammars
// ---------------------------------------------------------------------------------------------

fn is_lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`
fn dns1123_label_syntax(b: &[u8]) -> bool {
    match (b.first(), b.last()) {
        (Some(&first), Some(&last)) => {
            is_lower_alnum(first)
                && is_lower_alnum(last)
                && b.iter().all(|&c| is_lower_alnum(c) || c == b'-')
        }
        _ => false,
    }
}

/// `label(\.label)*`: every dot-separated piece must itself be a label.
fn dns1123_subdomain_syntax(b: &[u8]) -> bool {
    b.split(|&c| c == b'.').all(dns1123_label_syntax)
}

/// `[a-z]([-a-z0-9]*[a-z0-9])?`
fn dns1035_label_syntax(b: &[u8]) -> bool {
    match (b.first(), b.last()) {
        (Some(&first), Some(&last)) => {
            first.is_ascii_lowercase()
                && is_lower_alnum(last)
                && b.iter().all(|&c| is_lower_alnum(c) || c == b'-')
        }
        _ => false,
    }
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn qualified_name_syntax(b: &[u8]) -> bool {
    match (b.first(), b.last()) {
        (Some(&first), Some(&last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && b.iter()
                    .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

// ---------------------------------------------------------------------------------------------
// String checks returning upstream's message lists
// ---------------------------------------------------------------------------------------------

fn dns1123_label_errors(b: &[u8]) -> Vec<String> {
    let mut errs = Vec::new();
    if b.len() > DNS1123_LABEL_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_LABEL_MAX_LENGTH));
    }
    if !dns1123_label_syntax(b) {
        if dns1123_subdomain_syntax(b) {
            // A valid subdomain that is not a valid label can only be failing on its dots.
            errs.push("must not contain dots".to_string());
        } else {
            errs.push(regex_error(
                DNS1123_LABEL_ERR,
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

fn dns1123_subdomain_errors(b: &[u8]) -> Vec<String> {
    let mut errs = Vec::new();
    if b.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    if !dns1123_subdomain_syntax(b) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_ERR,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

fn dns1035_label_errors(b: &[u8]) -> Vec<String> {
    let mut errs = Vec::new();
    if b.len() > DNS1123_LABEL_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_LABEL_MAX_LENGTH));
    }
    if !dns1035_label_syntax(b) {
        errs.push(regex_error(
            DNS1035_LABEL_ERR,
            DNS1035_LABEL_FMT,
            &["my-name", "abc-123"],
        ));
    }
    errs
}

/// RFC 1123 label (max 63): namespace names, most `generateName`-free DNS-ish names.
pub fn is_dns1123_label(value: &str) -> Vec<String> {
    dns1123_label_errors(value.as_bytes())
}

/// RFC 1123 subdomain (max 253): the default rule for object names.
pub fn is_dns1123_subdomain(value: &str) -> Vec<String> {
    dns1123_subdomain_errors(value.as_bytes())
}

/// RFC 1035 label (max 63, starts with a letter): Service names.
pub fn is_dns1035_label(value: &str) -> Vec<String> {
    dns1035_label_errors(value.as_bytes())
}

/// What Kubernetes calls a qualified name: `[prefix/]name`, the prefix a DNS subdomain and the
/// name at most 63 of `[-A-Za-z0-9_.]` starting and ending alphanumeric. Label keys,
/// annotation keys (lower-cased first) and finalizer names use it.
pub fn is_qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push(format!("prefix part {EMPTY_ERROR}"));
            } else {
                errs.extend(
                    is_dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|msg| format!("prefix part {msg}")),
                );
            }
            *name
        }
        _ => {
            return vec![format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    QUALIFIED_NAME_ERR,
                    QUALIFIED_NAME_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            )];
        }
    };
    if name.is_empty() {
        errs.push(format!("name part {EMPTY_ERROR}"));
    } else if name.len() > QUALIFIED_NAME_MAX_LENGTH {
        errs.push(format!(
            "name part {}",
            max_len_error(QUALIFIED_NAME_MAX_LENGTH)
        ));
    }
    if !qualified_name_syntax(name.as_bytes()) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_ERR,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// A label value: empty, or at most 63 of `[-A-Za-z0-9_.]` starting and ending alphanumeric.
pub fn is_valid_label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > LABEL_VALUE_MAX_LENGTH {
        errs.push(max_len_error(LABEL_VALUE_MAX_LENGTH));
    }
    if !value.is_empty() && !qualified_name_syntax(value.as_bytes()) {
        errs.push(regex_error(
            LABEL_VALUE_ERR,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// Names that end up as one segment of a REST path or storage key: not `.`/`..`, and without
/// `/` or `%`.
pub fn is_valid_path_segment_name(name: &str) -> Vec<String> {
    for illegal in [".", ".."] {
        if name == illegal {
            return vec![format!("may not be '{illegal}'")];
        }
    }
    is_valid_path_segment_prefix(name)
}

/// The prefix form of [`is_valid_path_segment_name`]: a suffix will follow, so `.` and `..`
/// alone are fine.
pub fn is_valid_path_segment_prefix(name: &str) -> Vec<String> {
    ["/", "%"]
        .iter()
        .filter(|illegal| name.contains(*illegal))
        .map(|illegal| format!("may not contain '{illegal}'"))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Object names
// ---------------------------------------------------------------------------------------------

/// Which syntax a kind's `metadata.name` must follow (upstream's per-kind `ValidateNameFunc`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum NameRule {
    /// RFC 1123 subdomain, max 253: ConfigMaps, Secrets, Pods, Deployments, custom resources…
    #[default]
    Dns1123Subdomain,
    /// RFC 1123 label, max 63: Namespaces.
    Dns1123Label,
    /// RFC 1035 label, max 63, must start with a letter: Services.
    Dns1035Label,
    /// Only safe as a path segment (not `.`/`..`, no `/` or `%`): kinds such as RBAC roles.
    PathSegment,
}

impl NameRule {
    /// Messages for `name`; with `prefix`, `name` is a `generateName` that a random suffix
    /// will complete, so a trailing dash is allowed.
    pub fn check(self, name: &str, prefix: bool) -> Vec<String> {
        match self {
            NameRule::PathSegment => {
                if prefix {
                    is_valid_path_segment_prefix(name)
                } else {
                    is_valid_path_segment_name(name)
                }
            }
            NameRule::Dns1123Subdomain | NameRule::Dns1123Label | NameRule::Dns1035Label => {
                let masked;
                let bytes = if prefix {
                    masked = mask_trailing_dash(name.as_bytes());
                    masked.as_slice()
                } else {
                    name.as_bytes()
                };
                match self {
                    NameRule::Dns1123Subdomain => dns1123_subdomain_errors(bytes),
                    NameRule::Dns1123Label => dns1123_label_errors(bytes),
                    _ => dns1035_label_errors(bytes),
                }
            }
        }
    }
}

/// Upstream's `maskTrailingDash`: when a prefix longer than one byte ends in `-`, its last two
/// bytes are replaced by a single `a` before checking. (Upstream drops the byte before the
/// dash too; reproduced so that the same prefixes pass and fail.)
fn mask_trailing_dash(name: &[u8]) -> Vec<u8> {
    if name.len() > 1 && name.ends_with(b"-") {
        let mut masked = name[..name.len() - 2].to_vec();
        masked.push(b'a');
        masked
    } else {
        name.to_vec()
    }
}

/// Validates `metadata.name`; empty means neither name nor generateName was given.
pub fn validate_object_name(name: &str, rule: NameRule) -> Vec<FieldError> {
    if name.is_empty() {
        return vec![FieldError::required(
            "metadata.name",
            "name or generateName is required",
        )];
    }
    rule.check(name, false)
        .into_iter()
        .map(|msg| FieldError::invalid("metadata.name", name, &msg))
        .collect()
}

/// Validates a non-empty `metadata.generateName` prefix (empty yields nothing: the field is
/// optional).
pub fn validate_generate_name(prefix: &str, rule: NameRule) -> Vec<FieldError> {
    if prefix.is_empty() {
        return Vec::new();
    }
    rule.check(prefix, true)
        .into_iter()
        .map(|msg| FieldError::invalid("metadata.generateName", prefix, &msg))
        .collect()
}

/// Validates `metadata.namespace` of a namespaced object: required, and a DNS-1123 label.
pub fn validate_namespace_name(namespace: &str) -> Vec<FieldError> {
    if namespace.is_empty() {
        return vec![FieldError::required("metadata.namespace", "")];
    }
    is_dns1123_label(namespace)
        .into_iter()
        .map(|msg| FieldError::invalid("metadata.namespace", namespace, &msg))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Labels, annotations, finalizers
// ---------------------------------------------------------------------------------------------

/// Validates `metadata.labels`: qualified-name keys and label values, all reported against the
/// path `metadata.labels` as upstream does. A non-string value cannot come from a typed
/// client; it is reported as invalid rather than silently coerced.
pub fn validate_labels(labels: &Map<String, Value>) -> Vec<FieldError> {
    const FIELD: &str = "metadata.labels";
    let mut errs = Vec::new();
    for (key, value) in labels {
        errs.extend(
            is_qualified_name(key)
                .into_iter()
                .map(|msg| FieldError::invalid(FIELD, key.as_str(), &msg)),
        );
        match value {
            Value::String(v) => errs.extend(
                is_valid_label_value(v)
                    .into_iter()
                    .map(|msg| FieldError::invalid(FIELD, v.as_str(), &msg)),
            ),
            other => errs.push(FieldError::invalid_literal(
                FIELD,
                other.to_string(),
                "label values must be strings",
            )),
        }
    }
    errs
}

/// Validates `metadata.annotations`: keys are qualified names compared case-insensitively
/// (upstream lower-cases before checking), and keys plus values total at most 256 KiB.
pub fn validate_annotations(annotations: &Map<String, Value>) -> Vec<FieldError> {
    const FIELD: &str = "metadata.annotations";
    let mut errs = Vec::new();
    let mut total = 0usize;
    for (key, value) in annotations {
        errs.extend(
            is_qualified_name(&key.to_lowercase())
                .into_iter()
                .map(|msg| FieldError::invalid(FIELD, key.as_str(), &msg)),
        );
        total += key.len();
        match value {
            Value::String(v) => total += v.len(),
            other => errs.push(FieldError::invalid_literal(
                FIELD,
                other.to_string(),
                "annotation values must be strings",
            )),
        }
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        errs.push(FieldError::too_long(FIELD, "", TOTAL_ANNOTATION_SIZE_LIMIT));
    }
    errs
}

/// Validates one finalizer name (a qualified name). Upstream reports every finalizer against
/// the path `metadata.finalizers`, without an index; pass the path to report against.
pub fn validate_finalizer_name(name: &str, field: &str) -> Vec<FieldError> {
    is_qualified_name(name)
        .into_iter()
        .map(|msg| FieldError::invalid(field, name, &msg))
        .collect()
}

/// Validates a whole `metadata.finalizers` list as upstream's `ValidateFinalizers` does: each
/// name, plus the rule that `orphan` and `foregroundDeletion` exclude each other.
pub fn validate_finalizers(finalizers: &[&str]) -> Vec<FieldError> {
    const FIELD: &str = "metadata.finalizers";
    let mut errs: Vec<FieldError> = finalizers
        .iter()
        .flat_map(|name| validate_finalizer_name(name, FIELD))
        .collect();
    if finalizers.contains(&"orphan") && finalizers.contains(&"foregroundDeletion") {
        let listed: Vec<String> = finalizers.iter().map(|f| go_quote(f)).collect();
        errs.push(FieldError::invalid_literal(
            FIELD,
            format!("[]string{{{}}}", listed.join(", ")),
            "finalizer orphan and foregroundDeletion cannot be both set",
        ));
    }
    errs
}

/// The warning upstream returns (HTTP `Warning` header) when a custom resource gains a
/// finalizer without a `/` that is not one of Kubernetes' own ([`STANDARD_FINALIZERS`]).
/// The text includes the `metadata.finalizers: "name": ` prefix, exactly as sent.
pub fn finalizer_warning(name: &str) -> Option<String> {
    if name.contains('/') || STANDARD_FINALIZERS.contains(&name) {
        return None;
    }
    // A dotted name already looks like a domain; what it lacks is the path part.
    let advice = if name.contains('.') {
        "prefer a domain-qualified finalizer name including a path (/) to avoid accidental conflicts with other finalizer writers"
    } else {
        "prefer a domain-qualified finalizer name to avoid accidental conflicts with other finalizer writers"
    };
    Some(format!("metadata.finalizers: {}: {advice}", go_quote(name)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
    const QNAME_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn subdomain_accepts_and_rejects() {
        for ok in [
            "a",
            "0",
            "abc",
            "a-b",
            "a.b",
            "a--b",
            "1.2.3",
            "example.com",
        ] {
            assert!(is_dns1123_subdomain(ok).is_empty(), "{ok}");
        }
        for bad in [
            "", "A", "Foo", "a_b", "-a", "a-", ".a", "a.", "a..b", "a.-b", "a b", "é",
        ] {
            assert_eq!(
                is_dns1123_subdomain(bad),
                vec![SUBDOMAIN_MSG.to_string()],
                "{bad:?}"
            );
        }
    }

    #[test]
    fn subdomain_length_boundary() {
        // 4 labels of 63 = 255 with dots; build exactly 253 and 254.
        let label = "a".repeat(63);
        let s253 = format!("{label}.{label}.{label}.{}", "a".repeat(61));
        assert_eq!(s253.len(), 253);
        assert!(is_dns1123_subdomain(&s253).is_empty());
        let s254 = format!("{s253}a");
        assert_eq!(
            is_dns1123_subdomain(&s254),
            vec!["must be no more than 253 characters".to_string()]
        );
        let long_bad = format!("{s254}_");
        assert_eq!(is_dns1123_subdomain(&long_bad).len(), 2);
    }

    #[test]
    fn label_rules_and_boundaries() {
        assert!(is_dns1123_label(&"a".repeat(63)).is_empty());
        assert_eq!(
            is_dns1123_label(&"a".repeat(64)),
            vec!["must be no more than 63 characters".to_string()]
        );
        assert_eq!(
            is_dns1123_label("a.b"),
            vec!["must not contain dots".to_string()]
        );
        assert_eq!(is_dns1123_label("A"), vec![LABEL_MSG.to_string()]);
        assert_eq!(is_dns1123_label("-a"), vec![LABEL_MSG.to_string()]);
        assert_eq!(is_dns1123_label("a-"), vec![LABEL_MSG.to_string()]);
        assert_eq!(is_dns1123_label(""), vec![LABEL_MSG.to_string()]);
        assert!(is_dns1123_label("123").is_empty());
        // Too long and dotted: both messages, length first.
        let long_dotted = format!("{}.b", "a".repeat(63));
        assert_eq!(
            is_dns1123_label(&long_dotted),
            vec![
                "must be no more than 63 characters".to_string(),
                "must not contain dots".to_string()
            ]
        );
    }

    #[test]
    fn dns1035_label() {
        assert!(is_dns1035_label("my-svc").is_empty());
        assert!(is_dns1035_label("a").is_empty());
        let msg = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
        assert_eq!(is_dns1035_label("1abc"), vec![msg.to_string()]);
        assert_eq!(is_dns1035_label("a.b"), vec![msg.to_string()]);
        assert_eq!(is_dns1035_label(&"a".repeat(64)).len(), 1);
    }

    #[test]
    fn qualified_names() {
        for ok in [
            "a",
            "A",
            "a_b",
            "a.b",
            "Foo.Bar-baz_1",
            "example.com/name",
            "app.kubernetes.io/name",
            &"a".repeat(63),
        ] {
            assert!(is_qualified_name(ok).is_empty(), "{ok}");
        }
        assert_eq!(is_qualified_name("_a"), vec![QNAME_MSG.to_string()]);
        assert_eq!(is_qualified_name("a-"), vec![QNAME_MSG.to_string()]);
        assert_eq!(
            is_qualified_name(""),
            vec![
                "name part must be non-empty".to_string(),
                QNAME_MSG.to_string()
            ]
        );
        assert_eq!(
            is_qualified_name(&"a".repeat(64)),
            vec!["name part must be no more than 63 characters".to_string()]
        );
        assert_eq!(
            is_qualified_name("/a"),
            vec!["prefix part must be non-empty".to_string()]
        );
        assert_eq!(
            is_qualified_name("Example.com/a"),
            vec![format!("prefix part {SUBDOMAIN_MSG}")]
        );
        assert_eq!(
            is_qualified_name("example.com/"),
            vec![
                "name part must be non-empty".to_string(),
                QNAME_MSG.to_string()
            ]
        );
        assert_eq!(
            is_qualified_name("a/b/c"),
            vec!["a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')".to_string()]
        );
        // The prefix may be up to 253 bytes.
        let prefix = format!(
            "{}.{}.{}.{}",
            "a".repeat(63),
            "a".repeat(63),
            "a".repeat(63),
            "a".repeat(61)
        );
        assert!(is_qualified_name(&format!("{prefix}/x")).is_empty());
        assert_eq!(is_qualified_name(&format!("{prefix}a/x")).len(), 1);
    }

    #[test]
    fn label_values() {
        assert!(is_valid_label_value("").is_empty());
        assert!(is_valid_label_value("My_Value.1").is_empty());
        assert!(is_valid_label_value(&"a".repeat(63)).is_empty());
        assert_eq!(
            is_valid_label_value(&"a".repeat(64)),
            vec!["must be no more than 63 characters".to_string()]
        );
        let msg = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
        assert_eq!(is_valid_label_value("-x"), vec![msg.to_string()]);
        assert_eq!(is_valid_label_value("a b"), vec![msg.to_string()]);
        assert_eq!(is_valid_label_value("a/b"), vec![msg.to_string()]);
    }

    #[test]
    fn object_name_messages() {
        let errs = validate_object_name("Foo_bar", NameRule::Dns1123Subdomain);
        assert_eq!(errs.len(), 1);
        assert_eq!(
            errs[0].to_string(),
            format!("metadata.name: Invalid value: \"Foo_bar\": {SUBDOMAIN_MSG}")
        );
        assert_eq!(errs[0].reason.cause_reason(), "FieldValueInvalid");
        assert_eq!(errs[0].value.as_deref(), Some("Foo_bar"));

        let errs = validate_object_name("", NameRule::Dns1123Label);
        assert_eq!(
            errs[0].to_string(),
            "metadata.name: Required value: name or generateName is required"
        );
        assert_eq!(errs[0].reason.cause_reason(), "FieldValueRequired");
        assert_eq!(
            errs[0].body(),
            "Required value: name or generateName is required"
        );

        assert!(validate_object_name("my.config", NameRule::Dns1123Subdomain).is_empty());
        assert_eq!(
            validate_object_name("my.ns", NameRule::Dns1123Label)[0].to_string(),
            "metadata.name: Invalid value: \"my.ns\": must not contain dots"
        );
        assert_eq!(
            validate_object_name("1svc", NameRule::Dns1035Label).len(),
            1
        );
    }

    #[test]
    fn path_segment_names() {
        assert!(validate_object_name("system:controller:foo", NameRule::PathSegment).is_empty());
        assert!(validate_object_name("Upper_Case", NameRule::PathSegment).is_empty());
        assert_eq!(
            validate_object_name(".", NameRule::PathSegment)[0].to_string(),
            "metadata.name: Invalid value: \".\": may not be '.'"
        );
        assert_eq!(
            validate_object_name("..", NameRule::PathSegment)[0].message,
            "may not be '..'"
        );
        let errs = validate_object_name("a/b%c", NameRule::PathSegment);
        let msgs: Vec<&str> = errs.iter().map(|e| e.message.as_str()).collect();
        assert_eq!(msgs, vec!["may not contain '/'", "may not contain '%'"]);
        // As a prefix, '.' is fine (a suffix follows), '/' is not.
        assert!(validate_generate_name(".", NameRule::PathSegment).is_empty());
        assert_eq!(validate_generate_name("a/", NameRule::PathSegment).len(), 1);
    }

    #[test]
    fn generate_name_allows_trailing_dash() {
        assert!(validate_generate_name("web-", NameRule::Dns1123Subdomain).is_empty());
        assert!(validate_generate_name("a-", NameRule::Dns1123Label).is_empty());
        assert!(validate_generate_name("x-", NameRule::Dns1035Label).is_empty());
        assert!(validate_generate_name("", NameRule::Dns1123Subdomain).is_empty());
        // A lone dash is not masked (length 1).
        let errs = validate_generate_name("-", NameRule::Dns1123Subdomain);
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "metadata.generateName");
        assert_eq!(
            errs[0].to_string(),
            format!("metadata.generateName: Invalid value: \"-\": {SUBDOMAIN_MSG}")
        );
        // Only one trailing dash is forgiven.
        assert_eq!(
            validate_generate_name("web--", NameRule::Dns1123Subdomain).len(),
            0
        );
        assert_eq!(
            validate_generate_name("web.-", NameRule::Dns1123Subdomain).len(),
            0
        );
        assert_eq!(
            validate_generate_name("Web-", NameRule::Dns1123Subdomain).len(),
            1
        );
        assert_eq!(
            validate_generate_name("-web-", NameRule::Dns1123Subdomain).len(),
            1
        );
    }

    #[test]
    fn namespace_names() {
        assert!(validate_namespace_name("kube-system").is_empty());
        assert_eq!(
            validate_namespace_name("")[0].to_string(),
            "metadata.namespace: Required value"
        );
        assert_eq!(
            validate_namespace_name("a.b")[0].to_string(),
            "metadata.namespace: Invalid value: \"a.b\": must not contain dots"
        );
        assert_eq!(validate_namespace_name(&"n".repeat(64)).len(), 1);
    }

    #[test]
    fn labels_are_validated() {
        assert!(
            validate_labels(&map(
                json!({"app": "web", "app.kubernetes.io/name": "x", "empty": ""})
            ))
            .is_empty()
        );
        let errs = validate_labels(&map(json!({"bad key": "ok"})));
        assert_eq!(errs.len(), 1);
        assert_eq!(
            errs[0].to_string(),
            format!("metadata.labels: Invalid value: \"bad key\": {QNAME_MSG}")
        );
        let errs = validate_labels(&map(json!({"k": "-bad"})));
        assert_eq!(errs[0].field, "metadata.labels");
        assert_eq!(errs[0].value.as_deref(), Some("-bad"));
        let errs = validate_labels(&map(json!({"k": 5})));
        assert_eq!(
            errs[0].to_string(),
            "metadata.labels: Invalid value: 5: label values must be strings"
        );
    }

    #[test]
    fn annotations_are_validated() {
        // Case is ignored for annotation keys.
        assert!(
            validate_annotations(&map(json!({"Example.COM/Key": "anything at all: {}"})))
                .is_empty()
        );
        let errs = validate_annotations(&map(json!({"a/b/c": "v"})));
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "metadata.annotations");

        let at_limit = "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT - 1);
        assert!(validate_annotations(&map(json!({"k": at_limit}))).is_empty());
        let over = "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT);
        let errs = validate_annotations(&map(json!({"k": over})));
        assert_eq!(errs.len(), 1);
        assert_eq!(
            errs[0].to_string(),
            "metadata.annotations: Too long: may not be more than 262144 bytes"
        );
        assert_eq!(errs[0].reason.cause_reason(), "FieldValueTooLong");
    }

    #[test]
    fn finalizers() {
        assert!(validate_finalizer_name("example.com/cleanup", "metadata.finalizers").is_empty());
        assert!(validate_finalizer_name("kubernetes", "metadata.finalizers").is_empty());
        let errs = validate_finalizer_name("bad name", "metadata.finalizers");
        assert_eq!(
            errs[0].to_string(),
            format!("metadata.finalizers: Invalid value: \"bad name\": {QNAME_MSG}")
        );
        let errs = validate_finalizers(&["orphan", "foregroundDeletion"]);
        assert_eq!(errs.len(), 1);
        assert_eq!(
            errs[0].to_string(),
            "metadata.finalizers: Invalid value: []string{\"orphan\", \"foregroundDeletion\"}: finalizer orphan and foregroundDeletion cannot be both set"
        );
    }

    #[test]
    fn finalizer_warnings() {
        for quiet in [
            "kubernetes",
            "orphan",
            "foregroundDeletion",
            "example.com/x",
            "kubernetes.io/pv-protection",
        ] {
            assert_eq!(finalizer_warning(quiet), None, "{quiet}");
        }
        assert_eq!(
            finalizer_warning("cleanup").as_deref(),
            Some(
                "metadata.finalizers: \"cleanup\": prefer a domain-qualified finalizer name to avoid accidental conflicts with other finalizer writers"
            )
        );
        assert_eq!(
            finalizer_warning("resources-finalizer.argocd.argoproj.io").as_deref(),
            Some(
                "metadata.finalizers: \"resources-finalizer.argocd.argoproj.io\": prefer a domain-qualified finalizer name including a path (/) to avoid accidental conflicts with other finalizer writers"
            )
        );
    }

    #[test]
    fn rendering_and_aggregation() {
        let e = FieldError::not_supported(
            "propagationPolicy",
            "Sideways",
            &["Foreground", "Background"],
        );
        assert_eq!(
            e.to_string(),
            "propagationPolicy: Unsupported value: \"Sideways\": supported values: \"Foreground\", \"Background\""
        );
        assert_eq!(e.reason.cause_reason(), "FieldValueNotSupported");
        let e = FieldError::forbidden("metadata.namespace", "not allowed on this type");
        assert_eq!(
            e.to_string(),
            "metadata.namespace: Forbidden: not allowed on this type"
        );
        let e = FieldError::duplicate("spec.ports[1]", "80");
        assert_eq!(e.to_string(), "spec.ports[1]: Duplicate value: \"80\"");
        assert_eq!(e.reason.cause_reason(), "FieldValueDuplicate");
        let e = FieldError::too_long("fieldManager", "m", 128);
        assert_eq!(
            e.to_string(),
            "fieldManager: Too long: may not be more than 128 bytes"
        );
        let e = FieldError::invalid_literal(
            "metadata.generation",
            "-1",
            "must be greater than or equal to 0",
        );
        assert_eq!(
            e.body(),
            "Invalid value: -1: must be greater than or equal to 0"
        );
        assert_eq!(
            e.to_status_cause(),
            json!({"reason": "FieldValueInvalid", "message": "Invalid value: -1: must be greater than or equal to 0", "field": "metadata.generation"})
        );

        let a = FieldError::required("metadata.name", "name or generateName is required");
        let b = FieldError::invalid("metadata.labels", "x y", "bad");
        assert_eq!(aggregate_message(std::slice::from_ref(&a)), a.to_string());
        assert_eq!(
            aggregate_message(&[a.clone(), b.clone(), a.clone()]),
            format!("[{a}, {b}]")
        );
        assert_eq!(
            invalid_message("Widget", "example.com", "w1", std::slice::from_ref(&a)),
            format!("Widget.example.com \"w1\" is invalid: {a}")
        );
        assert_eq!(
            invalid_message("ConfigMap", "", "c", &[]),
            "ConfigMap \"c\" is invalid"
        );
    }

    #[test]
    fn too_many_and_type_invalid_render_like_upstream() {
        let too_many = FieldError::too_many("spec.tags", Some(4), 3);
        assert_eq!(
            too_many.to_string(),
            "spec.tags: Too many: 4: must have at most 3 items"
        );
        assert_eq!(
            too_many.to_status_cause(),
            json!({"reason": "FieldValueTooMany", "message": "Too many: 4: must have at most 3 items", "field": "spec.tags"})
        );
        assert_eq!(
            FieldError::too_many("spec.tags", None, 3).to_string(),
            "spec.tags: Too many: must have at most 3 items"
        );
        let type_invalid = FieldError::type_invalid(
            "spec.replicas",
            "string",
            "spec.replicas in body must be of type integer: \"string\"",
        );
        assert_eq!(
            type_invalid.to_string(),
            "spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\""
        );
        assert_eq!(
            type_invalid.to_status_cause()["reason"],
            json!("FieldValueTypeInvalid")
        );
    }

    #[test]
    fn go_quoting() {
        assert_eq!(go_quote("plain"), "\"plain\"");
        assert_eq!(go_quote("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(go_quote("tab\there\n"), "\"tab\\there\\n\"");
        assert_eq!(go_quote("\u{1}\u{7f}"), "\"\\x01\\x7f\"");
        assert_eq!(go_quote("héllo 日本"), "\"héllo 日本\"");
        assert_eq!(go_quote("\u{a0}\u{200b}"), "\"\\u00a0\\u200b\"");
    }
}
