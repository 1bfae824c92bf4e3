//! The per-object deletion policy: clean up the external resources (`Delete`) or leave them
//! behind on purpose (`Orphan`).
//!
//! The annotation [`DELETION_POLICY_ANNOTATION`] wins over the object's spec, so a person can
//! switch external-resource cleanup off (or back on) for one object without editing its spec,
//! even while it is terminating.

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Overrides the spec's deletion policy of one object: `Delete` or `Orphan`.
pub const DELETION_POLICY_ANNOTATION: &str = "finale.dev/deletion-policy";

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DeletionPolicy {
    /// Remove the external resources before the object goes.
    #[default]
    Delete,
    /// Let the object go and keep the external resources.
    Orphan,
}

impl fmt::Display for DeletionPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DeletionPolicy::Delete => "Delete",
            DeletionPolicy::Orphan => "Orphan",
        })
    }
}

impl DeletionPolicy {
    pub fn parse(value: &str) -> Option<DeletionPolicy> {
        match value {
            "Delete" => Some(DeletionPolicy::Delete),
            "Orphan" => Some(DeletionPolicy::Orphan),
            _ => None,
        }
    }
}

/// The policy in force: the annotation if present, else the spec's, else `Delete`. An annotation
/// with another value is an error, so a typo never decides the fate of a database.
pub fn effective(
    annotations: &BTreeMap<String, String>,
    from_spec: Option<DeletionPolicy>,
) -> Result<DeletionPolicy, String> {
    match annotations.get(DELETION_POLICY_ANNOTATION) {
        Some(value) => DeletionPolicy::parse(value).ok_or_else(|| {
            format!(
                "annotation {DELETION_POLICY_ANNOTATION}={value:?} is not valid: use \"Delete\" or \"Orphan\""
            )
        }),
        None => Ok(from_spec.unwrap_or_default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotated(value: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(DELETION_POLICY_ANNOTATION.to_string(), value.to_string())])
    }

    #[test]
    fn the_annotation_wins_over_the_spec() {
        let none = BTreeMap::new();
        assert_eq!(effective(&none, None), Ok(DeletionPolicy::Delete));
        assert_eq!(
            effective(&none, Some(DeletionPolicy::Orphan)),
            Ok(DeletionPolicy::Orphan)
        );
        assert_eq!(
            effective(&annotated("Delete"), Some(DeletionPolicy::Orphan)),
            Ok(DeletionPolicy::Delete)
        );
        assert_eq!(
            effective(&annotated("Orphan"), None),
            Ok(DeletionPolicy::Orphan)
        );
    }

    #[test]
    fn a_misspelt_annotation_is_refused() {
        let error = effective(&annotated("orphan"), Some(DeletionPolicy::Delete))
            .expect_err("lower case is not a policy");
        assert!(error.contains("\"Delete\" or \"Orphan\""), "{error}");
    }
}
