//! The three PATCH body formats the API server accepts, as pure functions over
//! `serde_json::Value`: no HTTP, no storage, no defaulting or validation.
//!
//! | Content-Type | Function | Module |
//! |---|---|---|
//! | `application/json-patch+json` | [`apply_json_patch`] (RFC 6902) | `json_patch.rs` |
//! | `application/merge-patch+json` | [`apply_merge_patch`] (RFC 7386) | `merge_patch.rs` |
//! | `application/strategic-merge-patch+json` | [`apply_strategic_merge_patch`] | `strategic.rs` |
//!
//! Server-side apply (`application/apply-patch+yaml`) is [`apply`] in `apply.rs`, which also
//! has [`record_update`], the managed-fields bookkeeping of every other write; the field
//! sets they record in `metadata.managedFields` are [`FieldSet`]s (`fieldset.rs`).
//!
//! Every function returns a new document and leaves its inputs untouched, so a caller that
//! retries on a resourceVersion conflict can re-run the same patch against a fresh object.
//!
//! Errors split the way the real API server splits them: a patch that cannot be understood
//! is [`PatchError::Malformed`] (400 `BadRequest`); a well-formed patch that does not fit
//! the object (a failed JSON-patch `test`, a path that does not exist) is
//! [`PatchError::CannotApply`] (422 `Invalid`).
//!
//! Two things are left to the caller because they depend on the Go types upstream decodes
//! the result into: dropping empty lists and maps (`finalizers: []` must not be stored,
//! or kube-rs's `test /metadata/finalizers == null` fails later), and rejecting a result
//! whose shape no longer matches the kind.

mod apply;
mod fieldset;
mod json_patch;
mod merge_patch;
mod strategic;

pub use apply::{
    ApplyError, ApplyRequest, Conflict, ManagedFieldsOperation, apply as server_side_apply,
    conflict_message, record_update,
};
pub use fieldset::{FieldSet, PathElement};
pub use json_patch::{MAX_JSON_PATCH_OPERATIONS, apply_json_patch};
pub use merge_patch::apply_merge_patch;
pub use strategic::{
    BuiltinKindSchema, BuiltinSchema, ListStrategy, MapStrategy, MergePatchSchema, PatchSchema,
    apply_strategic_merge_patch,
};

/// Why a patch could not be applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// The patch itself is not valid for its format: 400 `BadRequest`.
    #[error("{0}")]
    Malformed(String),
    /// The patch is well formed but does not apply to this object: 422 `Invalid`.
    #[error("{0}")]
    CannotApply(String),
}

impl PatchError {
    /// The human-readable message, in upstream's wording where one exists.
    pub fn message(&self) -> &str {
        match self {
            PatchError::Malformed(m) | PatchError::CannotApply(m) => m,
        }
    }

    /// The HTTP status code upstream answers with.
    pub fn status_code(&self) -> u16 {
        match self {
            PatchError::Malformed(_) => 400,
            PatchError::CannotApply(_) => 422,
        }
    }

    /// The `Status.reason` upstream answers with.
    pub fn reason(&self) -> &'static str {
        match self {
            PatchError::Malformed(_) => "BadRequest",
            PatchError::CannotApply(_) => "Invalid",
        }
    }
}

/// The PATCH content types, parsed from a `Content-Type` header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    /// `application/json-patch+json`
    Json,
    /// `application/merge-patch+json`
    Merge,
    /// `application/strategic-merge-patch+json`
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply: [`apply`])
    Apply,
}

impl PatchType {
    /// Parses a `Content-Type` header value; parameters such as `; charset=utf-8` are
    /// ignored, as upstream strips everything after the first `;`. `None` means 415.
    pub fn from_content_type(content_type: &str) -> Option<PatchType> {
        let media = content_type.split(';').next().unwrap_or("").trim();
        match media.to_ascii_lowercase().as_str() {
            "application/json-patch+json" => Some(PatchType::Json),
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            "application/apply-patch+yaml" => Some(PatchType::Apply),
            _ => None,
        }
    }

    /// The canonical media type, e.g. for a 415 response listing the accepted types.
    pub fn content_type(self) -> &'static str {
        match self {
            PatchType::Json => "application/json-patch+json",
            PatchType::Merge => "application/merge-patch+json",
            PatchType::Strategic => "application/strategic-merge-patch+json",
            PatchType::Apply => "application/apply-patch+yaml",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_parse_with_parameters() {
        assert_eq!(
            PatchType::from_content_type("application/merge-patch+json; charset=utf-8"),
            Some(PatchType::Merge)
        );
        assert_eq!(
            PatchType::from_content_type("application/strategic-merge-patch+json"),
            Some(PatchType::Strategic)
        );
        assert_eq!(
            PatchType::from_content_type("application/json-patch+json"),
            Some(PatchType::Json)
        );
        assert_eq!(
            PatchType::from_content_type("application/apply-patch+yaml"),
            Some(PatchType::Apply)
        );
        assert_eq!(PatchType::from_content_type("application/json"), None);
        assert_eq!(
            PatchType::Strategic.content_type(),
            "application/strategic-merge-patch+json"
        );
    }

    #[test]
    fn errors_map_to_upstream_codes() {
        let bad = PatchError::Malformed("x".into());
        let unfit = PatchError::CannotApply("y".into());
        assert_eq!((bad.status_code(), bad.reason()), (400, "BadRequest"));
        assert_eq!((unfit.status_code(), unfit.reason()), (422, "Invalid"));
        assert_eq!(unfit.message(), "y");
        assert_eq!(unfit.to_string(), "y");
    }
}
