//! Structural schemas (stub; being written on a branch).
use serde_json::Value;

use crate::validation::FieldError;

#[derive(Debug, Default)]
pub struct StructuralSchema;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListType {
    Atomic,
    Set,
    Map(Vec<String>),
}

impl StructuralSchema {
    pub fn compile(_schema: &Value, _field_root: &str) -> Result<Self, Vec<FieldError>> {
        Ok(StructuralSchema)
    }
    pub fn prune(&self, _object: &mut Value) -> Vec<String> {
        Vec::new()
    }
    pub fn apply_defaults(&self, _object: &mut Value) {}
    pub fn validate(&self, _object: &Value) -> Vec<FieldError> {
        Vec::new()
    }
    pub fn list_type(&self, _path: &[&str]) -> ListType {
        ListType::Atomic
    }
}

impl crate::patch::PatchSchema for StructuralSchema {
    fn list_strategy(&self, _path: &[&str]) -> crate::patch::ListStrategy {
        crate::patch::ListStrategy::Replace
    }
}
