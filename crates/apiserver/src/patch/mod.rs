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
//! [`PatchError::CannotApply`] (422 `Invalid`); a JSON patch with more operations than
//! upstream allows is [`PatchError::TooLarge`] (413 `RequestEntityTooLarge`).
//!
//! # Guarantees
//!
//! Applying a patch costs memory and time in proportion to the patch and the object, never
//! more: a JSON patch's `copy` operations may add at most [`MAX_JSON_PATCH_COPY_BYTES`]
//! (upstream's `AccumulatedCopySizeLimit`), and no patch produces a document nested deeper
//! than [`MAX_NESTING_DEPTH`], so the recursive walks that follow (serializing, dropping,
//! validating) cannot overflow the stack. Strategic merge patch directives are matched with
//! indexes, not nested scans.
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

use serde_json::Value;

pub use apply::{
    ApplyError, ApplyRequest, Conflict, ManagedFieldsOperation, apply as server_side_apply,
    conflict_message, record_update,
};
pub use fieldset::{FieldSet, PathElement};
pub use json_patch::{MAX_JSON_PATCH_COPY_BYTES, MAX_JSON_PATCH_OPERATIONS, apply_json_patch};
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
    /// The patch is larger than the server accepts: 413 `RequestEntityTooLarge`.
    #[error("{0}")]
    TooLarge(String),
}

/// The deepest nesting of objects and arrays a patch may produce: `serde_json`'s default
/// parse limit (128 levels, of which the parser itself uses the last), so that every stored
/// object can be read back. Request bodies are held to the same limit by the parser.
pub const MAX_NESTING_DEPTH: usize = 127;

/// How many objects and arrays are nested at the deepest point of `value` (0 for a scalar,
/// 1 for `{}` or `[1]`). Iterative, so it is safe on any document.
pub fn nesting_depth(value: &Value) -> usize {
    let mut unlimited = usize::MAX;
    nesting_depth_within(value, &mut unlimited).unwrap_or(usize::MAX)
}

/// [`nesting_depth`], visiting at most `budget` values (`None` once it is spent).
pub fn nesting_depth_within(value: &Value, budget: &mut usize) -> Option<usize> {
    let mut deepest = 0;
    let mut pending = vec![(value, 0)];
    while let Some((value, above)) = pending.pop() {
        *budget = budget.checked_sub(1)?;
        let level = above + 1;
        match value {
            Value::Object(map) => pending.extend(map.values().map(|child| (child, level))),
            Value::Array(items) => pending.extend(items.iter().map(|child| (child, level))),
            _ => continue,
        }
        deepest = deepest.max(level);
    }
    Some(deepest)
}

impl PatchError {
    /// The human-readable message, in upstream's wording where one exists.
    pub fn message(&self) -> &str {
        match self {
            PatchError::Malformed(m) | PatchError::CannotApply(m) | PatchError::TooLarge(m) => m,
        }
    }

    /// The HTTP status code upstream answers with.
    pub fn status_code(&self) -> u16 {
        match self {
            PatchError::Malformed(_) => 400,
            PatchError::CannotApply(_) => 422,
            PatchError::TooLarge(_) => 413,
        }
    }

    /// The `Status.reason` upstream answers with.
    pub fn reason(&self) -> &'static str {
        match self {
            PatchError::Malformed(_) => "BadRequest",
            PatchError::CannotApply(_) => "Invalid",
            PatchError::TooLarge(_) => "RequestEntityTooLarge",
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
        let large = PatchError::TooLarge("z".into());
        assert_eq!(
            (large.status_code(), large.reason()),
            (413, "RequestEntityTooLarge")
        );
    }

    #[test]
    fn nesting_depth_counts_containers() {
        use serde_json::json;
        assert_eq!(nesting_depth(&json!("x")), 0);
        assert_eq!(nesting_depth(&json!({})), 1);
        assert_eq!(nesting_depth(&json!([1, [2, {"a": [3]}], {}])), 4);
        let mut deep = json!(1);
        for _ in 0..100_000 {
            deep = Value::Array(vec![deep]);
        }
        assert_eq!(nesting_depth(&deep), 100_000);
        // Dropping it recursively would overflow the stack; leak it instead.
        std::mem::forget(deep);
    }

    #[test]
    fn the_nesting_limit_is_what_serde_json_parses() {
        let at_limit = format!(
            "{}{}",
            "[".repeat(MAX_NESTING_DEPTH),
            "]".repeat(MAX_NESTING_DEPTH)
        );
        let parsed: Value = serde_json::from_str(&at_limit).expect("parses at the limit");
        assert_eq!(nesting_depth(&parsed), MAX_NESTING_DEPTH);
        let over = format!("[{at_limit}]");
        assert!(serde_json::from_str::<Value>(&over).is_err());
    }
}
