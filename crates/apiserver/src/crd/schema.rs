//! Structural schemas (placeholder; being written).

/// A compiled `openAPIV3Schema`.
#[derive(Debug, Default)]
pub struct StructuralSchema;
