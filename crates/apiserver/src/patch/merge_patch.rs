//! RFC 7386 JSON Merge Patch (`application/merge-patch+json`): objects merge recursively,
//! a `null` member deletes, anything else replaces. This is what kubectl sends for custom
//! resources and what kube-rs sends for `Patch::Merge` (including `kubectl scale`'s
//! `{"spec":{"replicas":N}}`).
//!
//! Choices for the API server, following `evanphx/json-patch` `MergePatch`, which upstream
//! uses:
//!
//! - A patch whose top level is not an object is [`PatchError::Malformed`]. RFC 7386 would
//!   let it replace the whole document, but an API object must stay an object; upstream
//!   answers 400 for `null` and scalars and fails to decode an array result.
//! - Values taken from the patch have the `null` members of their objects dropped at any
//!   depth, including objects inside arrays, since a merge patch uses null only to mean
//!   "absent". Null elements of arrays are kept.

use serde_json::{Map, Value};

use super::PatchError;

/// Applies an RFC 7386 merge patch to `target` and returns the merged document.
///
/// # Errors
///
/// [`PatchError::Malformed`] when the patch is not a JSON object; a merge patch object
/// always applies.
pub fn apply_merge_patch(target: &Value, patch: &Value) -> Result<Value, PatchError> {
    if !patch.is_object() {
        return Err(PatchError::Malformed(format!(
            "Invalid JSON Patch: a merge patch must be a JSON object, not {}",
            kind_name(patch)
        )));
    }
    Ok(merge(target, patch))
}

fn kind_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// RFC 7386 §2 `MergePatch(Target, Patch)`.
fn merge(target: &Value, patch: &Value) -> Value {
    let Value::Object(patch_map) = patch else {
        return without_nulls(patch);
    };
    // A non-object target is replaced by an empty object before merging (RFC 7386 §2).
    let mut result = match target {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    for (key, patch_value) in patch_map {
        if patch_value.is_null() {
            result.remove(key);
            continue;
        }
        let merged = match result.get(key) {
            Some(current) => merge(current, patch_value),
            None => without_nulls(patch_value),
        };
        result.insert(key.clone(), merged);
    }
    Value::Object(result)
}

/// A copy of `value` with null object members removed at every depth.
fn without_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn merged(target: Value, patch: Value) -> Value {
        apply_merge_patch(&target, &patch).unwrap()
    }

    /// RFC 7386 Appendix A, the cases whose patch is an object.
    #[test]
    fn rfc7386_appendix_a() {
        let cases = [
            (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
            (
                json!({"a": "b"}),
                json!({"b": "c"}),
                json!({"a": "b", "b": "c"}),
            ),
            (json!({"a": "b"}), json!({"a": null}), json!({})),
            (
                json!({"a": "b", "b": "c"}),
                json!({"a": null}),
                json!({"b": "c"}),
            ),
            (json!({"a": ["b"]}), json!({"a": "c"}), json!({"a": "c"})),
            (json!({"a": "c"}), json!({"a": ["b"]}), json!({"a": ["b"]})),
            (
                json!({"a": {"b": "c"}}),
                json!({"a": {"b": "d", "c": null}}),
                json!({"a": {"b": "d"}}),
            ),
            (
                json!({"a": [{"b": "c"}]}),
                json!({"a": [1]}),
                json!({"a": [1]}),
            ),
            (
                json!({"e": null}),
                json!({"a": 1}),
                json!({"e": null, "a": 1}),
            ),
            (
                json!([1, 2]),
                json!({"a": "b", "c": null}),
                json!({"a": "b"}),
            ),
            (
                json!({}),
                json!({"a": {"bb": {"ccc": null}}}),
                json!({"a": {"bb": {}}}),
            ),
        ];
        for (target, patch, expected) in cases {
            assert_eq!(
                merged(target.clone(), patch.clone()),
                expected,
                "{target} + {patch}"
            );
        }
    }

    /// RFC 7386 Appendix A cases whose patch is not an object: the API server rejects them.
    #[test]
    fn non_object_patches_are_malformed() {
        for patch in [
            json!(["c", "d"]),
            json!(["c"]),
            Value::Null,
            json!("bar"),
            json!(1),
        ] {
            assert!(
                matches!(
                    apply_merge_patch(&json!({"a": "foo"}), &patch),
                    Err(PatchError::Malformed(_))
                ),
                "{patch}"
            );
        }
    }

    #[test]
    fn kubernetes_shapes() {
        let deploy = json!({
            "metadata": {"name": "d", "labels": {"app": "x", "tier": "web"}},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "c"}, {"name": "side"}]}}}
        });
        // kubectl scale
        let scaled = merged(deploy.clone(), json!({"spec": {"replicas": 3}}));
        assert_eq!(scaled["spec"]["replicas"], 3);
        assert_eq!(scaled["spec"]["template"], deploy["spec"]["template"]);
        // label add/remove
        let relabeled = merged(
            deploy.clone(),
            json!({"metadata": {"labels": {"tier": null, "new": "1"}}}),
        );
        assert_eq!(
            relabeled["metadata"]["labels"],
            json!({"app": "x", "new": "1"})
        );
        // lists are replaced wholesale, with nulls inside their objects dropped
        let replaced = merged(
            deploy,
            json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": null}, null]}}}}),
        );
        assert_eq!(
            replaced["spec"]["template"]["spec"]["containers"],
            json!([{"name": "c"}, null])
        );
    }

    #[test]
    fn inputs_are_untouched_and_empty_patch_is_identity() {
        let target = json!({"a": {"b": 1}});
        let patch = json!({"a": {"b": null}});
        assert_eq!(merged(target.clone(), json!({})), target);
        let _ = apply_merge_patch(&target, &patch).unwrap();
        assert_eq!(target, json!({"a": {"b": 1}}));
    }
}
