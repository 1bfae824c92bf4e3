//! CustomResourceDefinition objects: the defaults and checks upstream applies to a CRD on
//! create and update, and the [`ResourceType`]s an accepted CRD serves.
//!
//! Upstream validates the internal form of a CRD, into which the `v1` object is converted
//! first. One visible consequence is kept: when every version carries the same schema,
//! subresources, printer columns or selectable fields (always so with one version), upstream
//! moves them to the top level, and reports their errors at `spec.validation.openAPIV3Schema…`,
//! `spec.subresources…`, `spec.additionalPrinterColumns[i]…` and `spec.selectableFields[i]…`
//! instead of `spec.versions[i]…`.
//!
//! Caveats:
//! - Generic `metadata` checks (name syntax, labels, …) are the registry's; only the
//!   CRD-specific name rule is checked here.
//! - Conversion webhooks are accepted (`strategy: Webhook`); their configuration is checked
//!   by [`crate::crd::conversion::validate`], which lives with the code that calls them.
//! - Upstream prints some bad values as Go structs (`spec.versions`, a whole root schema);
//!   those are printed as compact JSON here.
//! - The update relaxations upstream grants CRDs stored by older servers (non-structural
//!   schemas, missing schemas) do not apply: every version needs a structural schema.

use std::cmp::Ordering;
use std::collections::HashSet;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::crd::schema::StructuralSchema;
use crate::deletion::GcPolicy;
use crate::object::string_list;
use crate::resources::{PrinterColumn, ResourceType, ScalePaths};
use crate::validation::{self, FieldError, NameRule};

/// The printer column types upstream accepts, sorted as its messages list them.
/// The finalizer that holds a CRD until its instances are gone: added by the registry on the
/// first DELETE (M7), removed by the CRD controller once every instance is gone.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

const COLUMN_TYPES: [&str; 5] = ["boolean", "date", "integer", "number", "string"];
/// The printer column formats upstream accepts, sorted as its messages list them.
const COLUMN_FORMATS: [&str; 8] = [
    "byte",
    "date",
    "date-time",
    "double",
    "float",
    "int32",
    "int64",
    "password",
];
/// Upstream's cap on distinct selectable fields per version.
const MAX_SELECTABLE_FIELDS: usize = 8;
const API_APPROVAL_ANNOTATION: &str = "api-approved.kubernetes.io";
/// The `JSONSchemaProps` fields a root schema may set when the status subresource is on, in
/// upstream's words (Go field names).
const ALLOWED_ROOT_FIELDS_TEXT: &str = "[Description Type Format Title Maximum ExclusiveMaximum Minimum ExclusiveMinimum MaxLength MinLength Pattern MaxItems MinItems UniqueItems MultipleOf Required Items Properties ExternalDocs Example XPreserveUnknownFields XValidations]";

/// Server-side defaults of a CRD, applied on create and update (upstream's v1 defaulting
/// plus the stored-version bookkeeping of its create and update strategies):
///
/// - `spec.names.singular`: the lowercased kind; `spec.names.listKind`: `<Kind>List`;
/// - `spec.conversion`: `{strategy: None}`; a webhook service's `port`: 443;
/// - `status.storedVersions` gains the storage version if it lacks it.
///
/// The caller clears a client-sent `status` on create and carries the stored one over on
/// update before calling this, as upstream's strategy does.
pub fn default_crd(crd: &mut Value) {
    let Some(object) = crd.as_object_mut() else {
        return;
    };
    let storage_version = {
        let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
            return;
        };
        if let Some(names) = spec.get_mut("names").and_then(Value::as_object_mut) {
            let kind = text(names.get("kind")).to_string();
            if text(names.get("singular")).is_empty() && !kind.is_empty() {
                names.insert("singular".into(), json!(kind.to_lowercase()));
            }
            if text(names.get("listKind")).is_empty() && !kind.is_empty() {
                names.insert("listKind".into(), json!(format!("{kind}List")));
            }
        }
        match spec.get_mut("conversion") {
            None | Some(Value::Null) => {
                spec.insert("conversion".into(), json!({"strategy": "None"}));
            }
            Some(conversion) => {
                if let Some(service) = conversion
                    .pointer_mut("/webhook/clientConfig/service")
                    .and_then(Value::as_object_mut)
                    && service.get("port").is_none_or(Value::is_null)
                {
                    service.insert("port".into(), json!(443));
                }
            }
        }
        spec.get("versions")
            .and_then(Value::as_array)
            .and_then(|versions| {
                versions
                    .iter()
                    .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
            })
            .map(|v| text(v.get("name")).to_string())
    };
    let Some(storage_version) = storage_version else {
        return;
    };
    let status = object.entry("status").or_insert_with(|| json!({}));
    if !status.is_object() {
        *status = json!({});
    }
    let stored = status
        .as_object_mut()
        .map(|s| s.entry("storedVersions").or_insert_with(|| json!([])));
    if let Some(stored) = stored {
        if !stored.is_array() {
            *stored = json!([]);
        }
        if let Some(list) = stored.as_array_mut()
            && !list
                .iter()
                .any(|v| v.as_str() == Some(storage_version.as_str()))
        {
            list.push(json!(storage_version));
        }
    }
}

/// Validates a defaulted CRD (422 causes), with upstream's fields and messages. `old` is the
/// stored CRD on update: `spec.group` and `spec.names.plural` never change, `spec.scope` and
/// `spec.names.kind` not once the CRD is Established, and stored versions must stay in
/// `spec.versions`.
pub fn validate_crd(crd: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let empty = Value::Object(Map::new());
    let spec = crd.get("spec").unwrap_or(&empty);
    let group = text(spec.get("group"));
    let names = spec.get("names").unwrap_or(&empty);
    if old.is_none() {
        let name = text(crd.pointer("/metadata/name"));
        let required = format!("{}.{group}", text(names.get("plural")));
        if !name.is_empty() && name != required {
            errors.push(FieldError::invalid(
                "metadata.name",
                name,
                r#"must be spec.names.plural+"."+spec.group"#,
            ));
        }
    }
    validate_spec(spec, &mut errors);
    if let Some(old) = old {
        let old_spec = old.get("spec").unwrap_or(&empty);
        let mut immutable = vec![
            ("spec.group", "/group"),
            ("spec.names.plural", "/names/plural"),
        ];
        if is_established(old) {
            immutable.insert(0, ("spec.names.kind", "/names/kind"));
            immutable.insert(0, ("spec.scope", "/scope"));
        }
        for (field, pointer) in immutable {
            let now = spec.pointer(pointer).unwrap_or(&Value::Null);
            if now != old_spec.pointer(pointer).unwrap_or(&Value::Null) {
                errors.push(invalid_json(field, now, "field is immutable"));
            }
        }
    }
    if let Some(accepted) = crd.pointer("/status/acceptedNames") {
        validate_names(accepted, "status.acceptedNames", &mut errors);
    }
    validate_stored_versions(crd, spec, &mut errors);
    validate_api_approval(crd, old, group, &mut errors);
    let preserves = |object: &Value| {
        object
            .pointer("/spec/preserveUnknownFields")
            .and_then(Value::as_bool)
            == Some(true)
    };
    if preserves(crd) && !old.is_some_and(preserves) {
        errors.push(FieldError::invalid_literal(
            "spec.preserveUnknownFields",
            "true",
            "cannot set to true, set x-kubernetes-preserve-unknown-fields to true in spec.versions[*].schema instead",
        ));
    }
    errors
}

/// Which per-version fields upstream moves to the top level because all versions agree.
struct Hoisted {
    schema: bool,
    subresources: bool,
    columns: bool,
    selectable_fields: bool,
}

impl Hoisted {
    fn of(versions: &[Value]) -> Self {
        let same = |field: &str, empty_is_absent: bool| {
            let normalized = |v: &Value| {
                let value = v.get(field).cloned().unwrap_or(Value::Null);
                match value {
                    Value::Array(ref items) if empty_is_absent && items.is_empty() => Value::Null,
                    other => other,
                }
            };
            match versions.first() {
                None => false,
                Some(first) => versions.iter().all(|v| normalized(v) == normalized(first)),
            }
        };
        Hoisted {
            schema: same("schema", false),
            subresources: same("subresources", false),
            columns: same("additionalPrinterColumns", true),
            selectable_fields: same("selectableFields", true),
        }
    }
}

fn validate_spec(spec: &Value, errors: &mut Vec<FieldError>) {
    let group = text(spec.get("group"));
    if group.is_empty() {
        errors.push(FieldError::required("spec.group", ""));
    } else {
        let problems = validation::is_dns1123_subdomain(group);
        if !problems.is_empty() {
            errors.push(FieldError::invalid(
                "spec.group",
                group,
                &problems.join(","),
            ));
        } else if group.split('.').count() < 2 {
            errors.push(FieldError::invalid(
                "spec.group",
                group,
                "should be a domain with at least one dot",
            ));
        }
    }
    let scope = text(spec.get("scope"));
    if scope.is_empty() {
        errors.push(FieldError::required("spec.scope", ""));
    } else if scope != "Cluster" && scope != "Namespaced" {
        errors.push(FieldError::not_supported(
            "spec.scope",
            scope,
            &["Cluster", "Namespaced"],
        ));
    }

    let versions = versions(spec);
    let hoisted = Hoisted::of(&versions);
    for (i, version) in versions.iter().enumerate() {
        if version
            .pointer("/schema/openAPIV3Schema")
            .is_none_or(Value::is_null)
        {
            errors.push(FieldError::required(
                &format!("spec.versions[{i}].schema.openAPIV3Schema"),
                "schemas are required",
            ));
        }
    }
    let preserve_unknown = spec.get("preserveUnknownFields").and_then(Value::as_bool) == Some(true);
    if preserve_unknown
        && versions
            .iter()
            .any(|v| schema_has_default(v.pointer("/schema/openAPIV3Schema")))
    {
        errors.push(FieldError::invalid_literal(
            "spec.preserveUnknownFields",
            "true",
            "must be false in order to use defaults in the schema",
        ));
    }

    let any_status = versions.iter().any(has_status_subresource);
    let mut storage_count = 0;
    let mut seen = HashSet::new();
    let mut unique = true;
    for (i, version) in versions.iter().enumerate() {
        let path = format!("spec.versions[{i}]");
        let name = text(version.get("name"));
        if version.get("storage").and_then(Value::as_bool) == Some(true) {
            storage_count += 1;
        }
        unique &= seen.insert(name.to_string());
        let problems = validation::is_dns1035_label(name);
        if !problems.is_empty() {
            errors.push(FieldError::invalid(
                &format!("{path}.name"),
                name,
                &problems.join(","),
            ));
        }
        validate_deprecation_warning(version, &path, errors);
        if !hoisted.schema {
            validate_schema(
                version.get("schema"),
                has_status_subresource(version),
                &format!("{path}.schema"),
                errors,
            );
        }
        if !hoisted.subresources {
            validate_subresources(
                version.get("subresources"),
                &format!("{path}.subresources"),
                errors,
            );
        }
        if !hoisted.columns {
            validate_columns(
                version.get("additionalPrinterColumns"),
                &format!("{path}.additionalPrinterColumns"),
                errors,
            );
        }
        if !hoisted.selectable_fields {
            validate_selectable_fields(
                version.get("selectableFields"),
                version.pointer("/schema/openAPIV3Schema"),
                &format!("{path}.selectableFields"),
                "selectableFields may only be set when version.schema.openAPIV3Schema is not included",
                errors,
            );
        }
    }
    let versions_value = spec.get("versions").cloned().unwrap_or(Value::Null);
    if !unique {
        errors.push(invalid_json(
            "spec.versions",
            &versions_value,
            "must contain unique version names",
        ));
    }
    if storage_count != 1 {
        errors.push(invalid_json(
            "spec.versions",
            &versions_value,
            "must have exactly one version marked as storage version",
        ));
    }

    let empty = Value::Object(Map::new());
    let names = spec.get("names").unwrap_or(&empty);
    for name in ["plural", "singular", "kind", "listKind"] {
        if text(names.get(name)).is_empty() {
            errors.push(FieldError::required(&format!("spec.names.{name}"), ""));
        }
    }
    validate_names(names, "spec.names", errors);

    let first = versions.first();
    if hoisted.schema {
        validate_schema(
            first.and_then(|v| v.get("schema")),
            any_status,
            "spec.validation",
            errors,
        );
    }
    if hoisted.subresources {
        validate_subresources(
            first.and_then(|v| v.get("subresources")),
            "spec.subresources",
            errors,
        );
    }
    if hoisted.columns {
        validate_columns(
            first.and_then(|v| v.get("additionalPrinterColumns")),
            "spec.additionalPrinterColumns",
            errors,
        );
    }
    if hoisted.selectable_fields {
        validate_selectable_fields(
            first.and_then(|v| v.get("selectableFields")),
            first.and_then(|v| v.pointer("/schema/openAPIV3Schema")),
            "spec.selectableFields",
            "selectableFields may only be set when validations.schema is included",
            errors,
        );
    }
    crate::crd::conversion::validate(spec.get("conversion"), preserve_unknown, errors);
}

/// Upstream `validateDeprecationWarning`.
fn validate_deprecation_warning(version: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let Some(warning) = version.get("deprecationWarning").and_then(Value::as_str) else {
        return;
    };
    let field = format!("{path}.deprecationWarning");
    let deprecated = version.get("deprecated").and_then(Value::as_bool) == Some(true);
    let mut problems = Vec::new();
    if !deprecated {
        problems.push("can only be set for deprecated versions".to_string());
    } else {
        if warning.len() > 256 {
            problems.push("must be <= 256 characters long".into());
        }
        if warning.is_empty() {
            problems.push("must not be an empty string".into());
        }
        if let Some((at, _)) = warning
            .char_indices()
            .find(|(_, c)| c.is_control() || (c.is_whitespace() && *c != ' '))
        {
            problems.push(format!(
                "must only contain printable UTF-8 characters; non-printable character found at index {at}"
            ));
        }
    }
    for problem in problems {
        errors.push(FieldError::invalid(&field, warning, &problem));
    }
}

/// Upstream `validateCustomResourceDefinitionValidation` at `path` (`spec.validation` or
/// `spec.versions[i].schema`).
fn validate_schema(
    validation: Option<&Value>,
    status_enabled: bool,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    let Some(schema) = validation
        .and_then(|v| v.get("openAPIV3Schema"))
        .filter(|s| !s.is_null())
    else {
        return;
    };
    let root = format!("{path}.openAPIV3Schema");
    if status_enabled && let Some(map) = schema.as_object() {
        errors.extend(status_root_errors(map, schema, &root));
    }
    if let Err(found) = StructuralSchema::compile(schema, &root) {
        errors.extend(found);
    }
}

/// With a status subresource, only keywords that survive extracting `properties.status` may
/// appear at the root, and the root must be an object. Upstream walks the Go struct in field
/// order and stops at the first offending field.
fn status_root_errors(map: &Map<String, Value>, schema: &Value, root: &str) -> Vec<FieldError> {
    const FIELD_ORDER: [&str; 44] = [
        "id",
        "$schema",
        "$ref",
        "description",
        "type",
        "nullable",
        "format",
        "title",
        "default",
        "maximum",
        "exclusiveMaximum",
        "minimum",
        "exclusiveMinimum",
        "maxLength",
        "minLength",
        "pattern",
        "maxItems",
        "minItems",
        "uniqueItems",
        "multipleOf",
        "enum",
        "maxProperties",
        "minProperties",
        "required",
        "items",
        "allOf",
        "oneOf",
        "anyOf",
        "not",
        "properties",
        "additionalProperties",
        "patternProperties",
        "dependencies",
        "additionalItems",
        "definitions",
        "externalDocs",
        "example",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-embedded-resource",
        "x-kubernetes-int-or-string",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-list-type",
        "x-kubernetes-map-type",
        "x-kubernetes-validations",
    ];
    const ALLOWED: [&str; 22] = [
        "description",
        "type",
        "format",
        "title",
        "maximum",
        "exclusiveMaximum",
        "minimum",
        "exclusiveMinimum",
        "maxLength",
        "minLength",
        "pattern",
        "maxItems",
        "minItems",
        "uniqueItems",
        "multipleOf",
        "required",
        "items",
        "properties",
        "externalDocs",
        "example",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-validations",
    ];
    for field in FIELD_ORDER {
        let Some(value) = map.get(field) else {
            continue;
        };
        if go_zero(field, value) {
            continue;
        }
        if field == "type" {
            let type_ = value.as_str().unwrap_or_default();
            if type_ != "object" {
                return vec![FieldError::invalid(
                    &format!("{root}.type"),
                    type_,
                    r#"only "object" is allowed as the type at the root of the schema if the status subresource is enabled"#,
                )];
            }
            continue;
        }
        if !ALLOWED.contains(&field) {
            return vec![invalid_json(
                root,
                schema,
                &format!(
                    "only {ALLOWED_ROOT_FIELDS_TEXT} fields are allowed at the root of the schema if the status subresource is enabled"
                ),
            )];
        }
    }
    Vec::new()
}

/// Whether a decoded keyword holds its Go zero value: strings when empty, booleans when
/// false; pointers (numbers, nested schemas, `default`), slices and maps only when absent or
/// null (an empty list decodes to a non-nil, so non-zero, slice).
fn go_zero(field: &str, value: &Value) -> bool {
    const STRING_FIELDS: [&str; 7] = [
        "id",
        "$schema",
        "description",
        "type",
        "format",
        "title",
        "pattern",
    ];
    const BOOL_FIELDS: [&str; 6] = [
        "nullable",
        "exclusiveMaximum",
        "exclusiveMinimum",
        "uniqueItems",
        "x-kubernetes-embedded-resource",
        "x-kubernetes-int-or-string",
    ];
    match value {
        Value::Null => true,
        Value::String(s) if STRING_FIELDS.contains(&field) => s.is_empty(),
        Value::Bool(b) if BOOL_FIELDS.contains(&field) => !b,
        _ => false,
    }
}

fn schema_has_default(schema: Option<&Value>) -> bool {
    match schema {
        Some(Value::Object(map)) => {
            map.contains_key("default")
                || map.iter().any(|(keyword, value)| match keyword.as_str() {
                    "properties" | "patternProperties" | "definitions" | "dependencies" => value
                        .as_object()
                        .is_some_and(|m| m.values().any(|s| schema_has_default(Some(s)))),
                    "allOf" | "anyOf" | "oneOf" => value
                        .as_array()
                        .is_some_and(|l| l.iter().any(|s| schema_has_default(Some(s)))),
                    "items" | "not" | "additionalProperties" | "additionalItems" => {
                        schema_has_default(Some(value))
                            || value
                                .as_array()
                                .is_some_and(|l| l.iter().any(|s| schema_has_default(Some(s))))
                    }
                    _ => false,
                })
        }
        _ => false,
    }
}

/// Upstream `ValidateCustomResourceDefinitionSubresources`.
fn validate_subresources(subresources: Option<&Value>, path: &str, errors: &mut Vec<FieldError>) {
    let Some(scale) = subresources
        .and_then(|s| s.get("scale"))
        .filter(|s| !s.is_null())
    else {
        return;
    };
    let rules = [
        (
            "specReplicasPath",
            &[".spec."][..],
            "should be a json path under .spec",
        ),
        (
            "statusReplicasPath",
            &[".status."][..],
            "should be a json path under .status",
        ),
    ];
    for (name, prefixes, message) in rules {
        let field = format!("{path}.scale.{name}");
        let value = text(scale.get(name));
        if value.is_empty() {
            errors.push(FieldError::required(&field, ""));
        } else if let Some(error) = simple_json_path_error(value, &field) {
            errors.push(error);
        } else if !prefixes.iter().any(|p| value.starts_with(p)) {
            errors.push(FieldError::invalid(&field, value, message));
        }
    }
    let selector = text(scale.get("labelSelectorPath"));
    if !selector.is_empty() {
        let field = format!("{path}.scale.labelSelectorPath");
        if let Some(error) = simple_json_path_error(selector, &field) {
            errors.push(error);
        } else if !selector.starts_with(".spec.") && !selector.starts_with(".status.") {
            errors.push(FieldError::invalid(
                &field,
                selector,
                "should be a json path under either .spec or .status",
            ));
        }
    }
}

/// Upstream `validateSimpleJSONPath` (the empty case is reported by callers).
fn simple_json_path_error(path: &str, field: &str) -> Option<FieldError> {
    if path.is_empty() {
        Some(FieldError::invalid(field, path, "must not be empty"))
    } else if !path.starts_with('.') {
        Some(FieldError::invalid(
            field,
            path,
            "must be a simple json path starting with .",
        ))
    } else {
        None
    }
}

/// Upstream `ValidateCustomResourceColumnDefinition` for each column. Note upstream's field
/// name `JSONPath` (the internal Go name), not `jsonPath`.
fn validate_columns(columns: Option<&Value>, path: &str, errors: &mut Vec<FieldError>) {
    let Some(columns) = columns.and_then(Value::as_array) else {
        return;
    };
    let types_message = format!("must be one of {}", COLUMN_TYPES.join(","));
    let formats_message = format!("must be one of {}", COLUMN_FORMATS.join(","));
    for (i, column) in columns.iter().enumerate() {
        let here = format!("{path}[{i}]");
        if text(column.get("name")).is_empty() {
            errors.push(FieldError::required(&format!("{here}.name"), ""));
        }
        let type_ = text(column.get("type"));
        if type_.is_empty() {
            errors.push(FieldError::required(
                &format!("{here}.type"),
                &types_message,
            ));
        } else if !COLUMN_TYPES.contains(&type_) {
            errors.push(FieldError::invalid(
                &format!("{here}.type"),
                type_,
                &types_message,
            ));
        }
        let format = text(column.get("format"));
        if !format.is_empty() && !COLUMN_FORMATS.contains(&format) {
            errors.push(FieldError::invalid(
                &format!("{here}.format"),
                format,
                &formats_message,
            ));
        }
        let json_path = text(column.get("jsonPath"));
        let field = format!("{here}.JSONPath");
        if json_path.is_empty() {
            errors.push(FieldError::required(&field, ""));
        } else if let Some(error) = simple_json_path_error(json_path, &field) {
            errors.push(error);
        }
    }
}

/// Upstream `ValidateCustomResourceSelectableFields`, resolving paths in the raw schema.
fn validate_selectable_fields(
    fields: Option<&Value>,
    schema: Option<&Value>,
    path: &str,
    no_schema_message: &str,
    errors: &mut Vec<FieldError>,
) {
    let Some(fields) = fields.and_then(Value::as_array).filter(|f| !f.is_empty()) else {
        return;
    };
    let Some(schema) = schema.filter(|s| !s.is_null()) else {
        errors.push(FieldError::invalid(path, "", no_schema_message));
        return;
    };
    let mut unique: Vec<String> = Vec::new();
    for (i, entry) in fields.iter().enumerate() {
        let field = format!("{path}[{i}].jsonPath");
        let json_path = text(entry.get("jsonPath"));
        if json_path.is_empty() {
            errors.push(FieldError::required(&field, ""));
            continue;
        }
        let (resolved, found) = match resolve_field_path(json_path, schema) {
            Ok(found) => found,
            Err(reason) => {
                errors.push(FieldError::invalid(
                    &field,
                    json_path,
                    &format!("is an invalid path: {reason}"),
                ));
                continue;
            }
        };
        if resolved.first().map(String::as_str) == Some("metadata") {
            errors.push(FieldError::invalid(
                &field,
                json_path,
                "must not point to fields in metadata",
            ));
        }
        let type_ = found
            .and_then(|s| s.get("type"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !matches!(type_, "string" | "boolean" | "integer") {
            errors.push(FieldError::invalid(
                &field,
                json_path,
                "must point to a field of type string, boolean or integer. Enum string fields and strings with formats are allowed.",
            ));
        }
        let key = resolved.join("\u{0}");
        if unique.contains(&key) {
            errors.push(FieldError::duplicate(&field, json_path));
        } else {
            unique.push(key);
        }
    }
    if unique.len() > MAX_SELECTABLE_FIELDS {
        errors.push(FieldError::too_many(
            path,
            Some(unique.len()),
            MAX_SELECTABLE_FIELDS,
        ));
    }
}

/// Upstream `cel.ValidFieldPath` without array notation: `.a.b` through `properties` (or
/// `additionalProperties`), returning the path segments and the schema found.
fn resolve_field_path<'a>(
    json_path: &str,
    schema: &'a Value,
) -> Result<(Vec<String>, Option<&'a Value>), String> {
    let mut segments = Vec::new();
    let mut current = Some(schema);
    let mut rest = json_path;
    while !rest.is_empty() {
        if rest.starts_with('[') {
            return Err("array notation is not allowed".into());
        }
        let Some(after_dot) = rest.strip_prefix('.') else {
            let token: String = rest
                .chars()
                .take_while(|c| !matches!(c, '.' | '[' | ']'))
                .collect();
            let token = if token.is_empty() {
                rest[..1].to_string()
            } else {
                token
            };
            return Err(format!("expected [ or . but got: {token}"));
        };
        let end = after_dot.find(['.', '[', ']']).unwrap_or(after_dot.len());
        let name = &after_dot[..end];
        if name.is_empty() {
            return match after_dot.chars().next() {
                None => Err("unexpected end of JSON path".into()),
                Some(_) => Err("does not refer to a valid field".into()),
            };
        }
        let node = current.ok_or("does not refer to a valid field")?;
        let properties = node
            .get("properties")
            .and_then(Value::as_object)
            .filter(|p| !p.is_empty());
        let additional = node.get("additionalProperties").filter(|a| !a.is_null());
        current = if let Some(properties) = properties {
            Some(
                properties
                    .get(name)
                    .ok_or("does not refer to a valid field")?,
            )
        } else if let Some(additional) = additional {
            additional.is_object().then_some(additional)
        } else {
            return Err("does not refer to a valid field".into());
        };
        segments.push(name.to_string());
        rest = &after_dot[end..];
    }
    Ok((segments, current))
}

/// Upstream `ValidateCustomResourceDefinitionNames`.
fn validate_names(names: &Value, path: &str, errors: &mut Vec<FieldError>) {
    for name in ["plural", "singular"] {
        let value = text(names.get(name));
        let problems = validation::is_dns1035_label(value);
        if !value.is_empty() && !problems.is_empty() {
            errors.push(FieldError::invalid(
                &format!("{path}.{name}"),
                value,
                &problems.join(","),
            ));
        }
    }
    for name in ["kind", "listKind"] {
        let value = text(names.get(name));
        let problems = validation::is_dns1035_label(&value.to_lowercase());
        if !value.is_empty() && !problems.is_empty() {
            errors.push(FieldError::invalid(
                &format!("{path}.{name}"),
                value,
                &format!(
                    "may have mixed case, but should otherwise match: {}",
                    problems.join(",")
                ),
            ));
        }
    }
    for (i, short_name) in string_list(names.get("shortNames")).iter().enumerate() {
        let problems = validation::is_dns1035_label(short_name);
        if !problems.is_empty() {
            errors.push(FieldError::invalid(
                &format!("{path}.shortNames[{i}]"),
                short_name.as_str(),
                &problems.join(","),
            ));
        }
    }
    let kind = text(names.get("kind"));
    let list_kind = text(names.get("listKind"));
    if !kind.is_empty() && kind == list_kind {
        errors.push(FieldError::invalid(
            &format!("{path}.listKind"),
            list_kind,
            "kind and listKind may not be the same",
        ));
    }
    for (i, category) in string_list(names.get("categories")).iter().enumerate() {
        let problems = validation::is_dns1035_label(category);
        if !problems.is_empty() {
            errors.push(FieldError::invalid(
                &format!("{path}.categories[{i}]"),
                category.as_str(),
                &problems.join(","),
            ));
        }
    }
}

/// Upstream `ValidateCustomResourceDefinitionStoredVersions`.
fn validate_stored_versions(crd: &Value, spec: &Value, errors: &mut Vec<FieldError>) {
    const FIELD: &str = "status.storedVersions";
    let stored_value = crd.pointer("/status/storedVersions");
    let stored = string_list(stored_value);
    let rendered = match stored_value {
        None | Some(Value::Null) => "[]string(nil)".to_string(),
        Some(_) => go_string_slice(&stored),
    };
    if stored.is_empty() {
        errors.push(FieldError::invalid_literal(
            FIELD,
            rendered,
            "must have at least one stored version",
        ));
        return;
    }
    let versions = versions(spec);
    let names: Vec<&str> = versions.iter().map(|v| text(v.get("name"))).collect();
    for version in &versions {
        let name = text(version.get("name"));
        if version.get("storage").and_then(Value::as_bool) == Some(true)
            && !stored.iter().any(|s| s == name)
        {
            errors.push(FieldError::invalid_literal(
                FIELD,
                rendered.clone(),
                &format!("must have the storage version {name}"),
            ));
        }
    }
    for (i, stored_version) in stored.iter().enumerate() {
        if !names.contains(&stored_version.as_str()) {
            errors.push(FieldError::invalid(
                &format!("{FIELD}[{i}]"),
                stored_version.as_str(),
                &format!(
                    "missing from spec.versions; {v} was previously a storage version, and must remain in spec.versions until a storage migration ensures no data remains persisted in {v} and removes {v} from status.storedVersions",
                    v = stored_version
                ),
            ));
        }
    }
}

/// Upstream `validateAPIApproval`: groups under `k8s.io` and `kubernetes.io` need the
/// `api-approved.kubernetes.io` annotation.
fn validate_api_approval(
    crd: &Value,
    old: Option<&Value>,
    group: &str,
    errors: &mut Vec<FieldError>,
) {
    let protected = group == "k8s.io"
        || group.ends_with(".k8s.io")
        || group == "kubernetes.io"
        || group.ends_with(".kubernetes.io");
    if !protected {
        return;
    }
    #[derive(PartialEq)]
    enum Approval {
        Missing,
        Bypassed,
        Approved,
        Invalid,
    }
    let state = |object: &Value| {
        let annotation = object
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(API_APPROVAL_ANNOTATION))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let approval = if annotation.is_empty() {
            Approval::Missing
        } else if annotation.starts_with("unapproved") {
            Approval::Bypassed
        } else if is_url_with_host(&annotation) {
            Approval::Approved
        } else {
            Approval::Invalid
        };
        (approval, annotation)
    };
    let (approval, annotation) = state(crd);
    if old.is_some_and(|old| state(old).0 == approval) {
        return;
    }
    let field = format!("metadata.annotations[{API_APPROVAL_ANNOTATION}]");
    match approval {
        Approval::Missing => errors.push(FieldError::required(
            &field,
            &format!(
                "protected groups must have approval annotation {}, see https://github.com/kubernetes/enhancements/pull/1111",
                validation::go_quote(API_APPROVAL_ANNOTATION)
            ),
        )),
        Approval::Invalid => errors.push(FieldError::invalid(
            &field,
            annotation,
            &format!(
                "protected groups must have approval annotation {} with either a URL or a reason starting with \"unapproved\", see https://github.com/kubernetes/enhancements/pull/1111",
                validation::go_quote(API_APPROVAL_ANNOTATION)
            ),
        )),
        Approval::Bypassed | Approval::Approved => {}
    }
}

fn is_url_with_host(s: &str) -> bool {
    let Some((scheme, rest)) = s.split_once("://") else {
        return false;
    };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        && rest
            .split(['/', '?', '#'])
            .next()
            .is_some_and(|host| !host.is_empty())
        && !s.bytes().any(|b| b < 0x20 || b == 0x7f || b == b' ')
}

fn is_established(crd: &Value) -> bool {
    crd.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| text(c.get("type")) == "Established" && text(c.get("status")) == "True")
        })
}

/// The resource types an accepted CRD serves: one per served version, sorted the way
/// Kubernetes orders versions (GA, then beta, then alpha, newest first), so the first is the
/// preferred version. Names come from `status.acceptedNames` when set, as upstream serves
/// the accepted names, else from `spec.names`.
///
/// # Errors
///
/// A message naming the version when a served version has no structural schema, or when
/// the CRD lacks a group or kind.
pub fn resource_types(crd: &Value) -> Result<Vec<ResourceType>, String> {
    let empty = Value::Object(Map::new());
    let spec = crd.get("spec").unwrap_or(&empty);
    let group = text(spec.get("group"));
    let names = accepted_names(crd);
    let kind = text(names.get("kind"));
    let plural = text(names.get("plural"));
    if group.is_empty() || kind.is_empty() || plural.is_empty() {
        return Err(format!(
            "CustomResourceDefinition {:?} needs spec.group, names.kind and names.plural to be served",
            text(crd.pointer("/metadata/name"))
        ));
    }
    let namespaced = text(spec.get("scope")) == "Namespaced";
    let mut types = Vec::new();
    for (i, version) in versions(spec).iter().enumerate() {
        if version.get("served").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        let name = text(version.get("name"));
        let schema_json = version
            .pointer("/schema/openAPIV3Schema")
            .filter(|s| !s.is_null())
            .ok_or_else(|| format!("version {name} of {plural}.{group} has no openAPIV3Schema"))?;
        let schema = StructuralSchema::compile(
            schema_json,
            &format!("spec.versions[{i}].schema.openAPIV3Schema"),
        )
        .map_err(|errors| {
            format!(
                "version {name} of {plural}.{group} has an invalid schema: {}",
                validation::aggregate_message(&errors)
            )
        })?;
        let scale = version
            .pointer("/subresources/scale")
            .filter(|s| s.is_object())
            .map(|scale| ScalePaths {
                spec_replicas_path: text(scale.get("specReplicasPath")).to_string(),
                status_replicas_path: text(scale.get("statusReplicasPath")).to_string(),
                label_selector_path: Some(text(scale.get("labelSelectorPath")))
                    .filter(|p| !p.is_empty())
                    .map(str::to_string),
            });
        let printer_columns = version
            .get("additionalPrinterColumns")
            .and_then(Value::as_array)
            .map(|columns| {
                columns
                    .iter()
                    .map(|column| PrinterColumn {
                        name: text(column.get("name")).to_string(),
                        type_: text(column.get("type")).to_string(),
                        format: text(column.get("format")).to_string(),
                        description: text(column.get("description")).to_string(),
                        priority: column.get("priority").and_then(Value::as_i64).unwrap_or(0),
                        json_path: text(column.get("jsonPath")).to_string(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let selectable_fields = version
            .get("selectableFields")
            .and_then(Value::as_array)
            .map(|fields| {
                fields
                    .iter()
                    .map(|f| text(f.get("jsonPath")).trim_start_matches('.').to_string())
                    .filter(|f| !f.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        types.push(ResourceType {
            group: group.to_string(),
            version: name.to_string(),
            kind: kind.to_string(),
            list_kind: text(names.get("listKind")).to_string(),
            plural: plural.to_string(),
            singular: text(names.get("singular")).to_string(),
            namespaced,
            short_names: string_list(names.get("shortNames")),
            categories: string_list(names.get("categories")),
            status_subresource: has_status_subresource(version),
            scale,
            name_rule: NameRule::Dns1123Subdomain,
            returns_deleted_object: false,
            selectable_fields,
            field_paths: &[],
            defaulting: None,
            write_defaults: None,
            tracks_generation: true,
            gc_policy: GcPolicy::DeleteDependents,
            graceful: false,
            builtin: false,
            printer_columns,
            typed: None,
            schema: Some(Arc::new(schema)),
            // The few kinds whose metadata the server checks itself.
            validation: crate::registry::cloud_gc::hook_for(group, kind),
            // Filled in by the CRD controller, which knows the whole definition's state.
            storage_version: None,
            conversion: None,
            definition_terminating: false,
            create_only: false,
            token_subresource: false,
            runs_on_nodes: false,
            view: None,
            status_writes: crate::resources::StatusWrites::StatusOnly,
            served_by: None,
            approval_subresource: false,
            create_strategy: None,
            update_strategy: None,
        });
    }
    types.sort_by(|a, b| compare_kube_versions(&a.version, &b.version));
    Ok(types)
}

/// `status.acceptedNames` for an accepted CRD: `kind`, `listKind`, `plural`, `singular`, and
/// `shortNames` and `categories` when non-empty, from `spec.names` with defaults applied.
/// When the CRD already carries accepted names, those are returned.
pub fn accepted_names(crd: &Value) -> Value {
    if let Some(accepted) = crd.pointer("/status/acceptedNames")
        && !text(accepted.get("plural")).is_empty()
    {
        return accepted.clone();
    }
    let empty = Value::Object(Map::new());
    let names = crd.pointer("/spec/names").unwrap_or(&empty);
    let kind = text(names.get("kind"));
    let mut accepted = Map::new();
    accepted.insert("kind".into(), json!(kind));
    let list_kind = match text(names.get("listKind")) {
        "" if !kind.is_empty() => format!("{kind}List"),
        other => other.to_string(),
    };
    accepted.insert("listKind".into(), json!(list_kind));
    accepted.insert("plural".into(), json!(text(names.get("plural"))));
    let singular = match text(names.get("singular")) {
        "" => kind.to_lowercase(),
        other => other.to_string(),
    };
    accepted.insert("singular".into(), json!(singular));
    for list in ["shortNames", "categories"] {
        let values = string_list(names.get(list));
        if !values.is_empty() {
            accepted.insert(list.into(), json!(values));
        }
    }
    Value::Object(accepted)
}

/// Kubernetes' version order: `v2`, `v1`, `v2beta1`, `v1beta2`, `v1beta1`, `v1alpha1`, then
/// anything else alphabetically.
fn compare_kube_versions(a: &str, b: &str) -> Ordering {
    fn parse(v: &str) -> Option<(u8, u64, u64)> {
        let rest = v.strip_prefix('v')?;
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 || rest.starts_with('0') {
            return None;
        }
        let major: u64 = rest[..digits].parse().ok()?;
        let tail = &rest[digits..];
        if tail.is_empty() {
            return Some((2, major, 0));
        }
        let (stability, number) = if let Some(n) = tail.strip_prefix("beta") {
            (1, n)
        } else if let Some(n) = tail.strip_prefix("alpha") {
            (0, n)
        } else {
            return None;
        };
        if number.is_empty()
            || number.starts_with('0')
            || !number.bytes().all(|b| b.is_ascii_digit())
        {
            return None;
        }
        Some((stability, major, number.parse().ok()?))
    }
    match (parse(a), parse(b)) {
        (Some(x), Some(y)) => y.cmp(&x),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

fn has_status_subresource(version: &Value) -> bool {
    version
        .pointer("/subresources/status")
        .is_some_and(|s| !s.is_null())
}

fn versions(spec: &Value) -> Vec<Value> {
    spec.get("versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn text(value: Option<&Value>) -> &str {
    value.and_then(Value::as_str).unwrap_or_default()
}

/// Go's `%#v` of a `[]string`.
fn go_string_slice(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| validation::go_quote(s)).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

/// `field: Invalid value: …` with a string value quoted and anything else as compact JSON.
fn invalid_json(field: &str, value: &Value, message: &str) -> FieldError {
    match value {
        Value::String(s) => FieldError::invalid(field, s.as_str(), message),
        other => FieldError::invalid_literal(field, other.to_string(), message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What kube-derive 5 emits for a namespaced `Foo` with status and scale subresources,
    /// printer columns and a selectable field.
    fn kube_derive_crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "foos.clux.dev"},
            "spec": {
                "group": "clux.dev",
                "names": {"categories": ["all"], "kind": "Foo", "plural": "foos", "shortNames": ["fo"], "singular": "foo"},
                "scope": "Namespaced",
                "versions": [{
                    "additionalPrinterColumns": [
                        {"jsonPath": ".spec.name", "name": "Team", "type": "string"},
                        {"jsonPath": ".status.replicas", "name": "Ready", "type": "integer", "priority": 1, "description": "ready replicas"}
                    ],
                    "name": "v1",
                    "schema": {"openAPIV3Schema": {
                        "description": "Auto-generated derived type for FooSpec via `CustomResource`",
                        "properties": {
                            "spec": {
                                "properties": {
                                    "name": {"type": "string"},
                                    "info": {"nullable": true, "type": "string"},
                                    "replicas": {"format": "int32", "type": "integer"},
                                    "selector": {"nullable": true, "type": "string"}
                                },
                                "required": ["name", "replicas"],
                                "type": "object"
                            },
                            "status": {
                                "nullable": true,
                                "properties": {
                                    "is_bad": {"type": "boolean"},
                                    "replicas": {"format": "int32", "nullable": true, "type": "integer"}
                                },
                                "required": ["is_bad"],
                                "type": "object"
                            }
                        },
                        "required": ["spec"],
                        "title": "Foo",
                        "type": "object"
                    }},
                    "selectableFields": [{"jsonPath": ".spec.name"}],
                    "served": true,
                    "storage": true,
                    "subresources": {
                        "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas", "labelSelectorPath": ".spec.selector"},
                        "status": {}
                    }
                }]
            }
        })
    }

    fn defaulted(mut crd: Value) -> Value {
        default_crd(&mut crd);
        crd
    }

    fn messages(crd: &Value, old: Option<&Value>) -> Vec<String> {
        validate_crd(crd, old)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    /// Applies a JSON merge patch to the fixture, for compact variations.
    fn with(patch: Value) -> Value {
        fn merge(target: &mut Value, patch: Value) {
            match (target, patch) {
                (Value::Object(target), Value::Object(patch)) => {
                    for (k, v) in patch {
                        if v.is_null() {
                            target.remove(&k);
                        } else {
                            merge(target.entry(k).or_insert(Value::Null), v);
                        }
                    }
                }
                (target, patch) => *target = patch,
            }
        }
        let mut crd = kube_derive_crd();
        merge(&mut crd, patch);
        defaulted(crd)
    }

    fn with_version(patch: Value) -> Value {
        let mut version = kube_derive_crd()["spec"]["versions"][0].clone();
        if let (Some(version), Value::Object(patch)) = (version.as_object_mut(), patch) {
            for (k, v) in patch {
                if v.is_null() {
                    version.remove(&k);
                } else {
                    version.insert(k, v);
                }
            }
        }
        with(json!({"spec": {"versions": [version]}}))
    }

    #[test]
    fn defaults_are_the_ones_upstream_stores() {
        let mut crd = json!({
            "metadata": {"name": "bars.example.com"},
            "spec": {
                "group": "example.com",
                "names": {"kind": "Bar", "plural": "bars"},
                "scope": "Cluster",
                "versions": [
                    {"name": "v1beta1", "served": true, "storage": false},
                    {"name": "v1", "served": true, "storage": true}
                ]
            }
        });
        default_crd(&mut crd);
        assert_eq!(
            crd["spec"]["names"],
            json!({"kind": "Bar", "plural": "bars", "singular": "bar", "listKind": "BarList"})
        );
        assert_eq!(crd["spec"]["conversion"], json!({"strategy": "None"}));
        assert_eq!(crd["status"], json!({"storedVersions": ["v1"]}));
        // Idempotent, and a kept status only gains a new storage version.
        crd["status"]["storedVersions"] = json!(["v1beta1"]);
        default_crd(&mut crd);
        assert_eq!(crd["status"]["storedVersions"], json!(["v1beta1", "v1"]));

        let mut webhook = json!({"spec": {"conversion": {"strategy": "Webhook", "webhook": {"clientConfig": {"service": {"name": "s", "namespace": "n"}}}}}});
        default_crd(&mut webhook);
        assert_eq!(
            webhook["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["port"],
            json!(443)
        );
    }

    #[test]
    fn a_kube_derive_crd_is_valid_and_serves_one_resource_type() {
        let crd = defaulted(kube_derive_crd());
        assert_eq!(messages(&crd, None), Vec::<String>::new());
        assert_eq!(
            accepted_names(&crd),
            json!({"kind": "Foo", "listKind": "FooList", "plural": "foos", "singular": "foo", "shortNames": ["fo"], "categories": ["all"]})
        );
        let types = resource_types(&crd).expect("serves");
        assert_eq!(types.len(), 1);
        let foo = &types[0];
        assert_eq!(
            (
                foo.group.as_str(),
                foo.version.as_str(),
                foo.kind.as_str(),
                foo.list_kind.as_str()
            ),
            ("clux.dev", "v1", "Foo", "FooList")
        );
        assert_eq!(
            (foo.plural.as_str(), foo.singular.as_str()),
            ("foos", "foo")
        );
        assert!(foo.namespaced && foo.status_subresource && foo.tracks_generation);
        assert!(!foo.builtin && !foo.returns_deleted_object && !foo.graceful);
        assert_eq!(foo.short_names, vec!["fo"]);
        assert_eq!(foo.categories, vec!["all"]);
        assert_eq!(foo.name_rule, NameRule::Dns1123Subdomain);
        assert!(matches!(foo.gc_policy, GcPolicy::DeleteDependents));
        assert_eq!(
            foo.scale,
            Some(ScalePaths {
                spec_replicas_path: ".spec.replicas".into(),
                status_replicas_path: ".status.replicas".into(),
                label_selector_path: Some(".spec.selector".into()),
            })
        );
        assert_eq!(
            foo.printer_columns,
            vec![
                PrinterColumn {
                    name: "Team".into(),
                    type_: "string".into(),
                    format: String::new(),
                    description: String::new(),
                    priority: 0,
                    json_path: ".spec.name".into(),
                },
                PrinterColumn {
                    name: "Ready".into(),
                    type_: "integer".into(),
                    format: String::new(),
                    description: "ready replicas".into(),
                    priority: 1,
                    json_path: ".status.replicas".into(),
                },
            ]
        );
        assert_eq!(foo.selectable_fields, vec!["spec.name"]);
        assert_eq!(
            foo.supported_field_labels(),
            vec!["metadata.name", "metadata.namespace", "spec.name"]
        );
        let schema = foo.schema.as_ref().expect("schema");
        let object = json!({"apiVersion": "clux.dev/v1", "kind": "Foo", "metadata": {"name": "f"}, "spec": {"name": "x", "replicas": 2, "info": null}, "status": null});
        assert!(schema.validate(&object).is_empty());
    }

    #[test]
    fn served_versions_only_in_kube_version_order() {
        let version = |name: &str, served: bool, storage: bool| {
            let mut v = kube_derive_crd()["spec"]["versions"][0].clone();
            v["name"] = json!(name);
            v["served"] = json!(served);
            v["storage"] = json!(storage);
            v
        };
        let crd = with(json!({"spec": {"versions": [
            version("v1alpha1", true, false),
            version("v1", true, true),
            version("v2beta1", true, false),
            version("v1beta1", false, false),
        ]}}));
        let served: Vec<String> = resource_types(&crd)
            .expect("serves")
            .into_iter()
            .map(|t| t.version)
            .collect();
        assert_eq!(served, vec!["v1", "v2beta1", "v1alpha1"]);
        let mut names = vec![
            "foo",
            "v1beta1",
            "v2",
            "v1",
            "v10alpha1",
            "v1beta2",
            "bar",
            "v11alpha2",
        ];
        names.sort_by(|a, b| compare_kube_versions(a, b));
        assert_eq!(
            names,
            vec![
                "v2",
                "v1",
                "v1beta2",
                "v1beta1",
                "v11alpha2",
                "v10alpha1",
                "bar",
                "foo"
            ]
        );
    }

    #[test]
    fn names_and_group() {
        assert_eq!(
            messages(&with(json!({"metadata": {"name": "foo.clux.dev"}})), None),
            vec![
                r#"metadata.name: Invalid value: "foo.clux.dev": must be spec.names.plural+"."+spec.group"#
            ]
        );
        assert_eq!(
            messages(
                &with(json!({"metadata": {"name": "foos.clux"}, "spec": {"group": "clux"}})),
                None
            ),
            vec![r#"spec.group: Invalid value: "clux": should be a domain with at least one dot"#]
        );
        assert_eq!(
            messages(
                &with(
                    json!({"metadata": {"name": "foos.Clux.dev"}, "spec": {"group": "Clux.dev"}})
                ),
                None
            ),
            vec![
                r#"spec.group: Invalid value: "Clux.dev": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"#
            ]
        );
        assert_eq!(
            messages(&with(json!({"spec": {"scope": "Global"}})), None),
            vec![
                r#"spec.scope: Unsupported value: "Global": supported values: "Cluster", "Namespaced""#
            ]
        );
        assert_eq!(
            messages(
                &with(json!({"spec": {"names": {"listKind": "Foo", "shortNames": ["f_o"]}}})),
                None
            ),
            vec![
                r#"spec.names.shortNames[0]: Invalid value: "f_o": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"#,
                r#"spec.names.listKind: Invalid value: "Foo": kind and listKind may not be the same"#,
            ]
        );
        let mut no_plural = kube_derive_crd();
        no_plural["spec"]["names"] = json!({"kind": "Foo"});
        no_plural["metadata"]["name"] = json!(".clux.dev");
        assert_eq!(
            messages(&defaulted(no_plural), None),
            vec!["spec.names.plural: Required value"]
        );
    }

    #[test]
    fn versions() {
        let two_storage = {
            let mut v2 = kube_derive_crd()["spec"]["versions"][0].clone();
            v2["name"] = json!("v2");
            let mut crd = kube_derive_crd();
            if let Some(list) = crd["spec"]["versions"].as_array_mut() {
                list.push(v2);
            }
            defaulted(crd)
        };
        let found = messages(&two_storage, None);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(
            found[0].starts_with("spec.versions: Invalid value: [{"),
            "{found:?}"
        );
        assert!(
            found[0].ends_with(": must have exactly one version marked as storage version"),
            "{found:?}"
        );
        assert_eq!(
            found[1],
            r#"status.storedVersions: Invalid value: []string{"v1"}: must have the storage version v2"#
        );

        let mut renamed = kube_derive_crd();
        renamed["spec"]["versions"][0]["name"] = json!("V1");
        assert_eq!(
            messages(&defaulted(renamed), None),
            vec![
                r#"spec.versions[0].name: Invalid value: "V1": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"#
            ]
        );

        assert_eq!(
            messages(&with_version(json!({"schema": null})), None),
            vec![
                "spec.versions[0].schema.openAPIV3Schema: Required value: schemas are required",
                r#"spec.selectableFields: Invalid value: "": selectableFields may only be set when validations.schema is included"#,
            ]
        );

        let mut none = kube_derive_crd();
        none["spec"]["versions"] = json!([]);
        assert_eq!(
            messages(&defaulted(none), None),
            vec![
                "spec.versions: Invalid value: []: must have exactly one version marked as storage version",
                "status.storedVersions: Invalid value: []string(nil): must have at least one stored version",
            ]
        );
    }

    #[test]
    fn schema_errors_are_reported_where_upstream_reports_them() {
        let bad_schema = json!({"openAPIV3Schema": {"type": "object", "properties": {"spec": {"properties": {}}}}});
        // One version: upstream hoists the schema to spec.validation.
        assert_eq!(
            messages(
                &with_version(
                    json!({"schema": bad_schema, "subresources": null, "selectableFields": null})
                ),
                None
            ),
            vec![
                "spec.validation.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields"
            ]
        );
        // Two versions with different schemas: each is reported in place.
        let mut v2 = kube_derive_crd()["spec"]["versions"][0].clone();
        v2["name"] = json!("v2");
        v2["storage"] = json!(false);
        v2["schema"] = bad_schema;
        let mut crd = kube_derive_crd();
        if let Some(list) = crd["spec"]["versions"].as_array_mut() {
            list.push(v2);
        }
        assert_eq!(
            messages(&defaulted(crd), None),
            vec![
                "spec.versions[1].schema.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields"
            ]
        );
    }

    #[test]
    fn status_subresource_restricts_the_root_schema() {
        let mut schema = kube_derive_crd()["spec"]["versions"][0]["schema"].clone();
        schema["openAPIV3Schema"]["minProperties"] = json!(1);
        let found = messages(&with_version(json!({"schema": schema.clone()})), None);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("spec.validation.openAPIV3Schema: Invalid value: {"),
            "{found:?}"
        );
        assert!(
            found[0].ends_with(": only [Description Type Format Title Maximum ExclusiveMaximum Minimum ExclusiveMinimum MaxLength MinLength Pattern MaxItems MinItems UniqueItems MultipleOf Required Items Properties ExternalDocs Example XPreserveUnknownFields XValidations] fields are allowed at the root of the schema if the status subresource is enabled"),
            "{found:?}"
        );
        // Without the status subresource the same schema is fine.
        assert_eq!(
            messages(
                &with_version(json!({"schema": schema, "subresources": null})),
                None
            ),
            Vec::<String>::new()
        );
    }

    #[test]
    fn scale_subresource_paths() {
        let scale =
            |scale: Value| with_version(json!({"subresources": {"status": {}, "scale": scale}}));
        assert_eq!(
            messages(
                &scale(
                    json!({"specReplicasPath": "spec.replicas", "statusReplicasPath": ".spec.replicas"})
                ),
                None
            ),
            vec![
                r#"spec.subresources.scale.specReplicasPath: Invalid value: "spec.replicas": must be a simple json path starting with ."#,
                r#"spec.subresources.scale.statusReplicasPath: Invalid value: ".spec.replicas": should be a json path under .status"#,
            ]
        );
        assert_eq!(
            messages(
                &scale(
                    json!({"specReplicasPath": ".status.replicas", "statusReplicasPath": ".status.replicas", "labelSelectorPath": ".metadata.labels"})
                ),
                None
            ),
            vec![
                r#"spec.subresources.scale.specReplicasPath: Invalid value: ".status.replicas": should be a json path under .spec"#,
                r#"spec.subresources.scale.labelSelectorPath: Invalid value: ".metadata.labels": should be a json path under either .spec or .status"#,
            ]
        );
        assert_eq!(
            messages(&scale(json!({})), None),
            vec![
                "spec.subresources.scale.specReplicasPath: Required value",
                "spec.subresources.scale.statusReplicasPath: Required value",
            ]
        );
    }

    #[test]
    fn printer_columns() {
        let columns = |columns: Value| with_version(json!({"additionalPrinterColumns": columns}));
        assert_eq!(
            messages(
                &columns(
                    json!([{"name": "", "type": "int", "format": "uuid", "jsonPath": "spec.x"}])
                ),
                None
            ),
            vec![
                "spec.additionalPrinterColumns[0].name: Required value",
                r#"spec.additionalPrinterColumns[0].type: Invalid value: "int": must be one of boolean,date,integer,number,string"#,
                r#"spec.additionalPrinterColumns[0].format: Invalid value: "uuid": must be one of byte,date,date-time,double,float,int32,int64,password"#,
                r#"spec.additionalPrinterColumns[0].JSONPath: Invalid value: "spec.x": must be a simple json path starting with ."#,
            ]
        );
        assert_eq!(
            messages(&columns(json!([{"name": "Age"}])), None),
            vec![
                "spec.additionalPrinterColumns[0].type: Required value: must be one of boolean,date,integer,number,string",
                "spec.additionalPrinterColumns[0].JSONPath: Required value",
            ]
        );
    }

    #[test]
    fn selectable_fields() {
        let fields = |fields: Value| with_version(json!({"selectableFields": fields}));
        assert_eq!(
            messages(
                &fields(json!([
                    {"jsonPath": ".spec.nope"},
                    {"jsonPath": ".metadata.name"},
                    {"jsonPath": ".status.is_bad"},
                    {"jsonPath": ".status.is_bad"},
                    {"jsonPath": ".spec"},
                    {"jsonPath": "spec.name"}
                ])),
                None
            ),
            vec![
                r#"spec.selectableFields[0].jsonPath: Invalid value: ".spec.nope": is an invalid path: does not refer to a valid field"#,
                r#"spec.selectableFields[1].jsonPath: Invalid value: ".metadata.name": is an invalid path: does not refer to a valid field"#,
                r#"spec.selectableFields[3].jsonPath: Duplicate value: ".status.is_bad""#,
                r#"spec.selectableFields[4].jsonPath: Invalid value: ".spec": must point to a field of type string, boolean or integer. Enum string fields and strings with formats are allowed."#,
                r#"spec.selectableFields[5].jsonPath: Invalid value: "spec.name": is an invalid path: expected [ or . but got: spec"#,
            ]
        );
    }

    #[test]
    fn conversion_webhooks_are_checked_as_upstream_checks_them() {
        let url = json!({"url": "https://conv.example.com/convert"});
        assert!(
            messages(
                &with(
                    json!({"spec": {"conversion": {"strategy": "Webhook", "webhook": {
                    "conversionReviewVersions": ["v1"], "clientConfig": url}}}})
                ),
                None
            )
            .is_empty()
        );
        assert_eq!(
            messages(
                &with(
                    json!({"spec": {"conversion": {"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"]}}}})
                ),
                None
            ),
            vec![
                "spec.conversion.webhookClientConfig: Required value: required when strategy is set to Webhook"
            ]
        );
        assert_eq!(
            messages(
                &with(
                    json!({"spec": {"conversion": {"strategy": "Webhook", "webhook": {
                    "conversionReviewVersions": ["v2", "v2"],
                    "clientConfig": {"url": "http://conv.example.com/"}}}}})
                ),
                None
            ),
            vec![
                r#"spec.conversion.webhookClientConfig.url: Invalid value: "http://conv.example.com/": 'https' is the only allowed URL scheme"#,
                r#"spec.conversion.conversionReviewVersions[1]: Invalid value: "v2": duplicate version"#,
                r#"spec.conversion.conversionReviewVersions: Invalid value: []string{"v2", "v2"}: must include at least one of v1, v1beta1"#,
            ]
        );
        assert_eq!(
            messages(
                &with(json!({"spec": {"conversion": {"strategy": "Other"}}})),
                None
            ),
            vec![
                r#"spec.conversion.strategy: Unsupported value: "Other": supported values: "None", "Webhook""#
            ]
        );
        assert_eq!(
            messages(
                &with(
                    json!({"spec": {"conversion": {"strategy": "None", "webhook": {"conversionReviewVersions": ["v1"]}}}})
                ),
                None
            ),
            vec![
                "spec.conversion.conversionReviewVersions: Forbidden: should not be set when strategy is not set to Webhook"
            ]
        );
    }

    #[test]
    fn preserve_unknown_fields_and_protected_groups() {
        assert_eq!(
            messages(
                &with(json!({"spec": {"preserveUnknownFields": true}})),
                None
            ),
            vec![
                r#"spec.preserveUnknownFields: Invalid value: true: cannot set to true, set x-kubernetes-preserve-unknown-fields to true in spec.versions[*].schema instead"#
            ]
        );
        let protected = with(
            json!({"metadata": {"name": "foos.widgets.k8s.io"}, "spec": {"group": "widgets.k8s.io"}}),
        );
        assert_eq!(
            messages(&protected, None),
            vec![
                r#"metadata.annotations[api-approved.kubernetes.io]: Required value: protected groups must have approval annotation "api-approved.kubernetes.io", see https://github.com/kubernetes/enhancements/pull/1111"#
            ]
        );
        let approved = |annotation: &str| {
            with(json!({
                "metadata": {"name": "foos.widgets.k8s.io", "annotations": {"api-approved.kubernetes.io": annotation}},
                "spec": {"group": "widgets.k8s.io"}
            }))
        };
        assert_eq!(
            messages(
                &approved("https://github.com/kubernetes/kubernetes/pull/1"),
                None
            ),
            Vec::<String>::new()
        );
        assert_eq!(
            messages(&approved("unapproved, experimental"), None),
            Vec::<String>::new()
        );
        assert_eq!(
            messages(&approved("yes"), None),
            vec![
                r#"metadata.annotations[api-approved.kubernetes.io]: Invalid value: "yes": protected groups must have approval annotation "api-approved.kubernetes.io" with either a URL or a reason starting with "unapproved", see https://github.com/kubernetes/enhancements/pull/1111"#
            ]
        );
        // An update that keeps an invalid approval state is not rejected for it.
        assert_eq!(
            messages(&approved("yes"), Some(&approved("no"))),
            Vec::<String>::new()
        );
    }

    #[test]
    fn updates() {
        let old = defaulted(kube_derive_crd());
        let changed = with(
            json!({"spec": {"group": "other.dev", "scope": "Cluster", "names": {"plural": "foes"}}}),
        );
        assert_eq!(
            messages(&changed, Some(&old)),
            vec![
                r#"spec.group: Invalid value: "other.dev": field is immutable"#,
                r#"spec.names.plural: Invalid value: "foes": field is immutable"#,
            ]
        );
        let mut established = old.clone();
        established["status"]["conditions"] = json!([{"type": "Established", "status": "True"}]);
        let rescoped = with(
            json!({"spec": {"scope": "Cluster", "names": {"kind": "Fooo", "listKind": "FoooList"}}}),
        );
        assert_eq!(
            messages(&rescoped, Some(&established)),
            vec![
                r#"spec.scope: Invalid value: "Cluster": field is immutable"#,
                r#"spec.names.kind: Invalid value: "Fooo": field is immutable"#,
            ]
        );
        // A version that was stored must stay in spec.versions.
        let mut moved = kube_derive_crd();
        moved["spec"]["versions"][0]["name"] = json!("v2");
        moved["status"] = json!({"storedVersions": ["v1"]});
        let moved = defaulted(moved);
        assert_eq!(moved["status"]["storedVersions"], json!(["v1", "v2"]));
        assert_eq!(
            messages(&moved, Some(&old)),
            vec![
                "status.storedVersions[0]: Invalid value: \"v1\": missing from spec.versions; v1 was previously a storage version, and must remain in spec.versions until a storage migration ensures no data remains persisted in v1 and removes v1 from status.storedVersions"
            ]
        );
    }
}
