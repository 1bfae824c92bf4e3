//! fieldValidation for built-in kinds (stub; being written on a branch).
use serde_json::Value;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FieldValidation {
    Ignore,
    #[default]
    Warn,
    Strict,
}

impl FieldValidation {
    pub fn parse(query_value: Option<&str>) -> Result<Self, String> {
        match query_value {
            None | Some("") | Some("Warn") => Ok(FieldValidation::Warn),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some(other) => Err(format!("invalid fieldValidation {other:?}")),
        }
    }
}

pub fn unknown_fields(_group: &str, _version: &str, _kind: &str, _object: &Value) -> Option<Vec<String>> {
    None
}
pub fn remove_fields(_object: &mut Value, _paths: &[String]) {}
pub fn duplicate_fields(_body: &[u8]) -> Vec<String> {
    Vec::new()
}
pub fn strict_error_message(unknown: &[String], duplicates: &[String]) -> String {
    let mut parts: Vec<String> = unknown.iter().map(|f| format!("unknown field {f:?}")).collect();
    parts.extend(duplicates.iter().map(|f| format!("duplicate field {f:?}")));
    format!("strict decoding error: {}", parts.join(", "))
}
pub fn warnings(unknown: &[String], duplicates: &[String]) -> Vec<String> {
    let mut parts: Vec<String> = unknown.iter().map(|f| format!("unknown field {f:?}")).collect();
    parts.extend(duplicates.iter().map(|f| format!("duplicate field {f:?}")));
    parts
}
