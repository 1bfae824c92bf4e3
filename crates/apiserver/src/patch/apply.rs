//! Server-side apply (stub; being written on a branch).
use serde_json::Value;

use super::PatchSchema;

pub struct ApplyRequest<'a> {
    pub live: Option<&'a Value>,
    pub applied: &'a Value,
    pub manager: &'a str,
    pub force: bool,
    pub subresource: Option<&'a str>,
    pub api_version: &'a str,
    pub now: &'a str,
    pub schema: &'a dyn PatchSchema,
}
#[derive(Debug)]
pub enum ApplyError {
    Conflicts(Vec<Conflict>),
    Invalid(String),
}
#[derive(Debug)]
pub struct Conflict {
    pub manager: String,
    pub api_version: String,
    pub field: String,
}
pub fn apply(request: &ApplyRequest) -> Result<Value, ApplyError> {
    let mut merged = match request.live {
        Some(live) => super::apply_merge_patch(live, request.applied)
            .map_err(|e| ApplyError::Invalid(e.to_string()))?,
        None => request.applied.clone(),
    };
    let _ = &mut merged;
    Ok(merged)
}
pub fn conflict_message(conflicts: &[Conflict]) -> String {
    format!("Apply failed with {} conflicts", conflicts.len())
}
#[allow(clippy::too_many_arguments)]
pub fn record_update(
    _old: Option<&Value>,
    _new: &mut Value,
    _manager: &str,
    _subresource: Option<&str>,
    _api_version: &str,
    _now: &str,
    _schema: &dyn PatchSchema,
) {
}
