//! `?fieldValidation=Ignore|Warn|Strict` for built-in kinds: the fields of a request body that the
//! kind does not have (unknown fields), the keys a body repeats (duplicate fields), and the
//! messages Kubernetes gives for both.
//!
//! Upstream decodes a built-in object into its Go type, so an unknown field never reaches
//! storage: `Ignore` drops it silently, `Warn` (the default when the parameter is absent or
//! empty) drops it and adds one `Warning` per field, `Strict` rejects the request with 400
//! `BadRequest`, `<Kind> in version "<v>" cannot be handled as a <Kind>: strict decoding error:
//! unknown field "spec.foo", duplicate field "metadata.name"`. kubectl sends `Strict` unless run
//! with `--validate=false` (then `Ignore`).
//!
//! Finale keeps objects as JSON values, so [`unknown_fields_of`] asks the k8s-openapi type of
//! the kind (the catalog's [`crate::resources::KindType`]) which keys it would skip
//! (`serde_ignored` reports every key the typed deserialization ignores), and
//! [`remove_fields`] then does what the Go decoding does to them.
//! [`duplicate_fields`] walks the raw body, since a parsed `Value` has already kept only the last
//! of two equal keys.
//!
//! # Guarantees
//! - Paths are rendered as upstream renders them: keys joined by `.`, list positions as `[i]`,
//!   nothing escaped (`spec.template.spec.containers[0].bogus`, `metadata.labels.app.kubernetes.io/x`).
//! - Free-form values are never unknown: label and annotation values, `data`, resource
//!   quantities (strings or numbers), int-or-string ports, times, `fieldsV1`, and a CRD schema's
//!   `default`, `example` and `enum` values and `x-kubernetes-*` keywords.
//! - Nothing is reported beneath an unknown field: like upstream, its whole value is skipped.
//! - `apiVersion` and `kind` are never unknown, whatever their values (checking them is the
//!   handler's job).
//!
//! # Caveats (where this differs from upstream)
//! - A value of the wrong type (`"replicas": "three"`, a `null` list item, bad base64 in a
//!   Secret) makes the typed deserialization fail. Upstream then fails the whole decode with
//!   400; here [`unknown_fields_of`] reports no unknown fields at all (rather than a list from
//!   a partial parse) and leaves the error to the registry's validation.
//! - Unknown fields are listed in the order of the parsed object, whose keys are sorted; upstream
//!   lists strict errors in document order, interleaving unknown and duplicate fields. The
//!   messages here give all unknown fields first, then the duplicates.
//! - [`duplicate_fields`] knows no types, so it also reports duplicate keys inside free-form
//!   values (a CRD schema's `default`/`example`/`enum`, `fieldsV1`) and inside CRD sub-schemas
//!   that upstream decodes leniently (see [`UnknownFields::unreported`]); upstream's typed
//!   decoder does not look inside those. Duplicates at or beneath an unknown field are left out
//!   of the messages, as upstream never sees them. It reads JSON only; for YAML bodies upstream
//!   reports duplicates with the YAML parser's own wording.
//! - Go merges two occurrences of the same object-valued key (`metadata` twice keeps the fields
//!   of both); a parsed `Value` keeps only the last one.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

use serde::de::value::MapDeserializer;
use serde::de::{DeserializeOwned, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::validation::go_quote;

/// Upstream stops collecting strict decoding errors after this many (unknown and duplicate
/// fields together).
const MAX_STRICT_ERRORS: usize = 100;

/// The `fieldValidation` query parameter of create, update and patch requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FieldValidation {
    /// Drop unknown fields silently; duplicate fields are not looked for.
    Ignore,
    /// Drop unknown fields and answer with one `Warning` per unknown or duplicate field.
    /// Upstream's choice when the parameter is absent or empty.
    #[default]
    Warn,
    /// Reject the request with 400 `BadRequest` if any field is unknown or duplicated.
    Strict,
}

impl FieldValidation {
    /// Reads the parameter's value (the first one if it is repeated, as upstream's parameter
    /// codec does). An absent or empty value means [`FieldValidation::Warn`]; the names are
    /// case-sensitive.
    ///
    /// The error is upstream's field error, e.g. `fieldValidation: Unsupported value: "strict":
    /// supported values: "", "Ignore", "Strict", "Warn"`. Upstream answers it with a 422
    /// `Invalid` `Status` for group `meta.k8s.io`, kind `CreateOptions` (`UpdateOptions`,
    /// `PatchOptions`) and an empty name, message `CreateOptions.meta.k8s.io "" is invalid:
    /// <this error>`, one cause of type `FieldValueNotSupported` on field `fieldValidation`.
    pub fn parse(query_value: Option<&str>) -> Result<Self, String> {
        match query_value.unwrap_or("") {
            "" | "Warn" => Ok(Self::Warn),
            "Ignore" => Ok(Self::Ignore),
            "Strict" => Ok(Self::Strict),
            other => Err(format!(
                "fieldValidation: Unsupported value: {}: supported values: \"\", \"Ignore\", \"Strict\", \"Warn\"",
                go_quote(other)
            )),
        }
    }

    /// The parameter value naming this directive.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ignore => "Ignore",
            Self::Warn => "Warn",
            Self::Strict => "Strict",
        }
    }
}

impl fmt::Display for FieldValidation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The fields of an object that its built-in kind does not have.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnknownFields {
    /// Fields upstream reports: warnings under `Warn`, the 400 under `Strict`.
    pub reported: Vec<String>,
    /// Fields upstream drops without a word because they sit in a CRD sub-schema it decodes
    /// leniently: the schemas under `items`, `additionalProperties`, `additionalItems` and
    /// `dependencies` (apiextensions' own `UnmarshalJSON` decodes those non-strictly). They must
    /// still be removed, whatever the directive, to store what upstream stores.
    pub unreported: Vec<String>,
}

impl UnknownFields {
    /// Every field the stored object must not keep: pass this to [`remove_fields`].
    pub fn all(&self) -> Vec<String> {
        self.reported
            .iter()
            .chain(&self.unreported)
            .cloned()
            .collect()
    }
}

/// The fields the built-in kind does not have, split into those upstream reports and those it
/// drops silently, given the kind's [`IgnoredPaths`] (the catalog's `KindType` holds them).
///
/// An object that does not deserialize into the kind's type (a value of the wrong type, or not
/// an object at all) yields empty lists: the registry's validation reports the type error.
pub fn unknown_fields_of(ignored: IgnoredPaths, is_crd: bool, object: &Value) -> UnknownFields {
    let mut fields = UnknownFields::default();
    for path in ignored(object) {
        let rendered = render(&path);
        if is_crd && in_leniently_decoded_schema(&path) {
            fields.unreported.push(rendered);
        } else {
            fields.reported.push(rendered);
        }
    }
    fields
}

/// The keys a typed deserialization of a kind skips, as paths: see [`ignored_paths`].
pub type IgnoredPaths = fn(&Value) -> Vec<Vec<Segment>>;

/// One step of a field path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    Key(String),
    Index(usize),
}

/// Deserializes `object` as `T` (minus `apiVersion` and `kind`, whose values k8s-openapi would
/// insist on) and returns the path of every key `T` skipped; nothing if `T` rejects the object.
pub fn ignored_paths<T: DeserializeOwned>(object: &Value) -> Vec<Vec<Segment>> {
    let Value::Object(fields) = object else {
        return Vec::new();
    };
    let without_type_meta = fields
        .iter()
        .filter(|(key, _)| !matches!(key.as_str(), "apiVersion" | "kind"))
        .map(|(key, value)| (key.as_str(), value));
    let deserializer = MapDeserializer::<_, serde_json::Error>::new(without_type_meta);
    let mut paths = Vec::new();
    let typed: Result<T, _> =
        serde_ignored::deserialize(deserializer, |path| paths.push(segments(&path)));
    match typed {
        Ok(_) => paths,
        Err(_) => Vec::new(),
    }
}

fn segments(path: &serde_ignored::Path<'_>) -> Vec<Segment> {
    fn collect(path: &serde_ignored::Path<'_>, out: &mut Vec<Segment>) {
        use serde_ignored::Path;
        match path {
            Path::Root => {}
            Path::Seq { parent, index } => {
                collect(parent, out);
                out.push(Segment::Index(*index));
            }
            Path::Map { parent, key } => {
                collect(parent, out);
                out.push(Segment::Key(key.clone()));
            }
            Path::Some { parent }
            | Path::NewtypeStruct { parent }
            | Path::NewtypeVariant { parent } => collect(parent, out),
        }
    }
    let mut out = Vec::new();
    collect(path, &mut out);
    out
}

fn render(path: &[Segment]) -> String {
    let mut out = String::new();
    for segment in path {
        match segment {
            Segment::Key(key) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Index(index) => {
                out.push('[');
                out.push_str(&index.to_string());
                out.push(']');
            }
        }
    }
    out
}

/// Whether a CRD path lies in a schema upstream decodes without strictness: below one of the
/// keywords whose Go types (`JSONSchemaPropsOrBool`, `…OrArray`, `…OrStringArray`) unmarshal
/// their content with the lenient decoder.
fn in_leniently_decoded_schema(path: &[Segment]) -> bool {
    use Segment::{Index, Key};
    let [
        Key(spec),
        Key(versions),
        Index(_),
        Key(schema),
        Key(root),
        schema_node @ ..,
    ] = path
    else {
        return false;
    };
    if spec != "spec" || versions != "versions" || schema != "schema" || root != "openAPIV3Schema" {
        return false;
    }
    // `rest` starts at a schema node; the last segment is the unknown key itself.
    let mut rest = schema_node;
    loop {
        let [Key(keyword), below @ ..] = rest else {
            return false;
        };
        if below.is_empty() {
            return false;
        }
        rest = match keyword.as_str() {
            "properties" | "patternProperties" | "definitions" => match below {
                [Key(_), next @ ..] => next,
                _ => return false,
            },
            "allOf" | "anyOf" | "oneOf" => match below {
                [Index(_), next @ ..] => next,
                _ => return false,
            },
            "not" => below,
            "items" | "additionalProperties" | "additionalItems" | "dependencies" => return true,
            _ => return false,
        };
    }
}

/// Removes the fields at `paths` (as rendered by [`unknown_fields_of`]) from `object`, leaving
/// everything else untouched. A path that names nothing is skipped.
///
/// Keys may themselves contain `.` or `[`, so a rendered path can be ambiguous; the longest key
/// that fits is tried first (`data.x` removes a top-level `"data.x"` rather than key `x` of
/// `data`), then shorter ones, and only the first field found is removed.
pub fn remove_fields(object: &mut Value, paths: &[String]) {
    for path in paths {
        remove_path(object, path);
    }
}

fn remove_path(value: &mut Value, path: &str) -> bool {
    match value {
        Value::Object(map) => {
            let mut key_lengths: Vec<usize> = map
                .keys()
                .filter(|key| {
                    path.starts_with(key.as_str())
                        && matches!(path.as_bytes().get(key.len()), None | Some(b'.' | b'['))
                })
                .map(String::len)
                .collect();
            key_lengths.sort_unstable_by(|a, b| b.cmp(a));
            for length in key_lengths {
                let key = &path[..length];
                if length == path.len() {
                    map.remove(key);
                    return true;
                }
                let below = &path[length..];
                let below = below.strip_prefix('.').unwrap_or(below);
                if let Some(child) = map.get_mut(key)
                    && remove_path(child, below)
                {
                    return true;
                }
            }
            false
        }
        Value::Array(items) => {
            let Some((index, below)) = path.strip_prefix('[').and_then(|rest| rest.split_once(']'))
            else {
                return false;
            };
            let Ok(index) = index.parse::<usize>() else {
                return false;
            };
            let below = below.strip_prefix('.').unwrap_or(below);
            match items.get_mut(index) {
                Some(child) if !below.is_empty() => remove_path(child, below),
                _ => false,
            }
        }
        _ => false,
    }
}

/// Keys a JSON body repeats within one object, as upstream names them (`kind`,
/// `metadata.name`, `spec.containers[0].name`, `metadata.labels.app`), in document order, each
/// once, at most 100. Keys are compared after unescaping (`"a"` and `"\u0061"` are the same).
///
/// A body that is not valid JSON yields an empty list: the decoding error is reported elsewhere,
/// and upstream reports no strict errors for a body it cannot decode.
pub fn duplicate_fields(body: &[u8]) -> Vec<String> {
    let mut finder = DuplicateFinder::default();
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let walked = Walk {
        finder: &mut finder,
    }
    .deserialize(&mut deserializer)
    .and_then(|()| deserializer.end());
    match walked {
        Ok(()) => finder.found,
        Err(_) => Vec::new(),
    }
}

#[derive(Default)]
struct DuplicateFinder {
    /// The rendered path of the value being walked.
    path: String,
    found: Vec<String>,
}

impl DuplicateFinder {
    fn record_duplicate(&mut self) {
        if self.found.len() < MAX_STRICT_ERRORS && !self.found.contains(&self.path) {
            self.found.push(self.path.clone());
        }
    }
}

/// Walks one JSON value, noting repeated keys in every object it contains.
struct Walk<'a> {
    finder: &'a mut DuplicateFinder,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let parent_length = self.finder.path.len();
        for index in 0usize.. {
            self.finder.path.push('[');
            self.finder.path.push_str(&index.to_string());
            self.finder.path.push(']');
            let element = seq.next_element_seed(Walk {
                finder: &mut *self.finder,
            })?;
            self.finder.path.truncate(parent_length);
            if element.is_none() {
                break;
            }
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let parent_length = self.finder.path.len();
        let mut keys = KeySet::default();
        while let Some(key) = map.next_key_seed(KeySeed)? {
            if parent_length > 0 {
                self.finder.path.push('.');
            }
            self.finder.path.push_str(&key);
            if !keys.insert(key) {
                self.finder.record_duplicate();
            }
            map.next_value_seed(Walk {
                finder: &mut *self.finder,
            })?;
            self.finder.path.truncate(parent_length);
        }
        Ok(())
    }
}

/// An object key, borrowed from the body unless it had to be unescaped.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Cow<'de, str>, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_borrowed_str<E: serde::de::Error>(self, key: &'de str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Borrowed(key))
    }

    fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(key.to_owned()))
    }

    fn visit_string<E: serde::de::Error>(self, key: String) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(key))
    }
}

/// The keys seen so far in one object: a short list while the object is small (most are), a
/// hash set once it is not, so huge maps stay linear.
#[derive(Default)]
struct KeySet<'de> {
    few: Vec<Cow<'de, str>>,
    many: Option<HashSet<Cow<'de, str>>>,
}

impl<'de> KeySet<'de> {
    const LIST_LIMIT: usize = 32;

    /// Adds `key`; false if it was already there.
    fn insert(&mut self, key: Cow<'de, str>) -> bool {
        if let Some(many) = &mut self.many {
            return many.insert(key);
        }
        if self.few.contains(&key) {
            return false;
        }
        self.few.push(key);
        if self.few.len() > Self::LIST_LIMIT {
            self.many = Some(self.few.drain(..).collect());
        }
        true
    }
}

/// The 400 message under `Strict`: `strict decoding error: unknown field "spec.foo", duplicate
/// field "metadata.name"`, the errors joined by `, ` as upstream joins them (at most 100).
/// Duplicates at or beneath an unknown field are left out, as upstream never sees them.
pub fn strict_error_message(unknown: &[String], duplicates: &[String]) -> String {
    format!(
        "strict decoding error: {}",
        strict_errors(unknown, duplicates).join(", ")
    )
}

/// The whole 400 `BadRequest` message upstream gives under `Strict`, e.g. `Deployment in
/// version "v1" cannot be handled as a Deployment: strict decoding error: unknown field
/// "spec.foo"`. `version` is the version alone (`v1`, not `apps/v1`).
pub fn bad_request_message(
    kind: &str,
    version: &str,
    unknown: &[String],
    duplicates: &[String],
) -> String {
    format!(
        "{kind} in version {} cannot be handled as a {kind}: {}",
        go_quote(version),
        strict_error_message(unknown, duplicates)
    )
}

/// The `Warning` texts under `Warn`, one per field: `unknown field "spec.foo"`, `duplicate field
/// "x"` (at most 100, duplicates beneath unknown fields left out). Each goes out as `Warning:
/// 299 - "<text>"`.
pub fn warnings(unknown: &[String], duplicates: &[String]) -> Vec<String> {
    strict_errors(unknown, duplicates)
}

fn strict_errors(unknown: &[String], duplicates: &[String]) -> Vec<String> {
    let unknown_errors = unknown
        .iter()
        .map(|path| format!("unknown field {}", go_quote(path)));
    let duplicate_errors = duplicates
        .iter()
        .filter(|path| !unknown.iter().any(|field| is_at_or_below(path, field)))
        .map(|path| format!("duplicate field {}", go_quote(path)));
    unknown_errors
        .chain(duplicate_errors)
        .take(MAX_STRICT_ERRORS)
        .collect()
}

fn is_at_or_below(path: &str, ancestor: &str) -> bool {
    path.strip_prefix(ancestor)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.') || rest.starts_with('['))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The reported unknown fields of a body of the built-in kind at `group`/`version`, or
    /// `None` when no such kind is built in.
    fn unknown_fields(
        group: &str,
        version: &str,
        kind: &str,
        object: &Value,
    ) -> Option<Vec<String>> {
        find_unknown_fields(group, version, kind, object).map(|fields| fields.reported)
    }

    /// [`unknown_fields_of`] for the built-in kind at `group`/`version` (or the body of a PUT
    /// to a `scale` subresource), or `None` when no such kind is built in.
    fn find_unknown_fields(
        group: &str,
        version: &str,
        kind: &str,
        object: &Value,
    ) -> Option<UnknownFields> {
        let ignored = if (group, version, kind) == ("autoscaling", "v1", "Scale") {
            ignored_paths::<k8s_openapi::api::autoscaling::v1::Scale>
        } else {
            crate::resources::builtin_types()
                .into_iter()
                .find(|t| t.group == group && t.version == version && t.kind == kind)?
                .typed?
                .unknown_fields
        };
        let is_crd = group == crate::resources::CRD_GROUP && kind == "CustomResourceDefinition";
        Some(unknown_fields_of(ignored, is_crd, object))
    }

    fn strings(paths: &[&str]) -> Vec<String> {
        paths.iter().map(|path| path.to_string()).collect()
    }

    fn unknown(group: &str, version: &str, kind: &str, object: &Value) -> Vec<String> {
        unknown_fields(group, version, kind, object)
            .unwrap_or_else(|| panic!("{group}/{version} {kind} is a known kind"))
    }

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "web",
                "namespace": "default",
                "labels": {"app": "web", "app.kubernetes.io/name": "web"},
                "annotations": {"deployment.kubernetes.io/revision": "3", "note": ""},
                "creationTimestamp": null,
            },
            "spec": {
                "replicas": 3,
                "revisionHistoryLimit": 10,
                "selector": {"matchLabels": {"app": "web"}},
                "strategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1},
                },
                "template": {
                    "metadata": {"labels": {"app": "web"}, "creationTimestamp": null},
                    "spec": {
                        "containers": [{
                            "name": "web",
                            "image": "nginx:1.27",
                            "ports": [{"containerPort": 80, "protocol": "TCP"}],
                            "env": [
                                {"name": "MODE", "value": "prod"},
                                {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                            ],
                            "resources": {
                                "limits": {"cpu": "500m", "memory": "128Mi"},
                                "requests": {"cpu": 0.25, "memory": 67108864},
                            },
                            "readinessProbe": {
                                "httpGet": {"path": "/healthz", "port": "http"},
                                "periodSeconds": 5,
                            },
                            "livenessProbe": {"tcpSocket": {"port": 80}},
                        }],
                        "terminationGracePeriodSeconds": 30,
                    },
                },
            },
            "status": {},
        })
    }

    // --- the parameter ---------------------------------------------------------------------

    #[test]
    fn absent_or_empty_parameter_means_warn() {
        assert_eq!(FieldValidation::parse(None), Ok(FieldValidation::Warn));
        assert_eq!(FieldValidation::parse(Some("")), Ok(FieldValidation::Warn));
        assert_eq!(FieldValidation::default(), FieldValidation::Warn);
    }

    #[test]
    fn the_three_directives_parse() {
        assert_eq!(
            FieldValidation::parse(Some("Ignore")),
            Ok(FieldValidation::Ignore)
        );
        assert_eq!(
            FieldValidation::parse(Some("Warn")),
            Ok(FieldValidation::Warn)
        );
        assert_eq!(
            FieldValidation::parse(Some("Strict")),
            Ok(FieldValidation::Strict)
        );
        assert_eq!(FieldValidation::Strict.to_string(), "Strict");
    }

    #[test]
    fn other_values_are_unsupported_with_upstreams_message() {
        assert_eq!(
            FieldValidation::parse(Some("strict")),
            Err("fieldValidation: Unsupported value: \"strict\": supported values: \"\", \"Ignore\", \"Strict\", \"Warn\"".to_string())
        );
        assert_eq!(
            FieldValidation::parse(Some("a\"b")),
            Err("fieldValidation: Unsupported value: \"a\\\"b\": supported values: \"\", \"Ignore\", \"Strict\", \"Warn\"".to_string())
        );
    }

    // --- unknown fields ----------------------------------------------------------------------

    #[test]
    fn a_valid_deployment_has_no_unknown_fields() {
        assert_eq!(
            unknown("apps", "v1", "Deployment", &deployment()),
            Vec::<String>::new()
        );
    }

    #[test]
    fn unknown_fields_are_found_at_every_depth_with_upstreams_paths() {
        let mut object = deployment();
        object["x"] = json!(1);
        object["metadata"]["bogus"] = json!("b");
        object["spec"]["foo"] = json!({"nested": {"deeper": true}});
        object["spec"]["template"]["spec"]["containers"][0]["bogus"] = json!([1, 2]);
        object["spec"]["template"]["spec"]["containers"][0]["env"][1]["valueFrom"]["fieldRef"]["extra"] =
            json!(null);
        object["spec"]["strategy"]["rollingUpdate"]["maxSurgeTypo"] = json!(1);
        // Sorted key order of the parsed object: metadata < spec < x; inside spec, foo < strategy
        // < template. Nothing is reported beneath the unknown `spec.foo`.
        assert_eq!(
            unknown("apps", "v1", "Deployment", &object),
            strings(&[
                "metadata.bogus",
                "spec.foo",
                "spec.strategy.rollingUpdate.maxSurgeTypo",
                "spec.template.spec.containers[0].bogus",
                "spec.template.spec.containers[0].env[1].valueFrom.fieldRef.extra",
                "x",
            ])
        );
    }

    #[test]
    fn second_list_item_and_keys_with_dots_render_unescaped() {
        let mut object = deployment();
        let containers = &mut object["spec"]["template"]["spec"]["containers"];
        containers
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "side", "image": "busybox", "a.b[c]": 1}));
        assert_eq!(
            unknown("apps", "v1", "Deployment", &object),
            strings(&["spec.template.spec.containers[1].a.b[c]"])
        );
    }

    #[test]
    fn map_values_are_free_form() {
        let object = json!({
            "metadata": {
                "name": "c",
                "labels": {"spec": "x", "bogus": "y"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"a\":1}"},
            },
            "data": {"bogus": "1", "spec.foo": "2"},
            "binaryData": {"blob": "AAEC"},
            "immutable": false,
        });
        assert_eq!(
            unknown("", "v1", "ConfigMap", &object),
            Vec::<String>::new()
        );
    }

    #[test]
    fn api_version_and_kind_are_never_unknown_whatever_their_values() {
        let object = json!({"apiVersion": "not/this", "kind": "Other", "metadata": {"name": "n"}});
        assert_eq!(
            unknown("", "v1", "Namespace", &object),
            Vec::<String>::new()
        );
        let object = json!({"apiVersion": 7, "kind": ["x"], "bogus": 1});
        assert_eq!(unknown("", "v1", "Namespace", &object), strings(&["bogus"]));
    }

    #[test]
    fn field_names_are_case_sensitive() {
        let object = json!({"metadata": {"Name": "n"}, "Spec": {}});
        assert_eq!(
            unknown("", "v1", "Namespace", &object),
            strings(&["Spec", "metadata.Name"])
        );
    }

    #[test]
    fn every_served_built_in_kind_is_known() {
        let kinds = [
            ("", "v1", "Namespace"),
            ("", "v1", "ConfigMap"),
            ("", "v1", "Secret"),
            ("", "v1", "ServiceAccount"),
            ("", "v1", "Service"),
            ("", "v1", "Pod"),
            ("", "v1", "Event"),
            ("events.k8s.io", "v1", "Event"),
            ("coordination.k8s.io", "v1", "Lease"),
            ("apps", "v1", "Deployment"),
            ("apps", "v1", "ReplicaSet"),
            ("batch", "v1", "Job"),
            ("autoscaling", "v1", "Scale"),
            ("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        ];
        for (group, version, kind) in kinds {
            let object = json!({"metadata": {"name": "n", "bogus": 1}, "zzz": true});
            assert_eq!(
                unknown(group, version, kind, &object),
                strings(&["metadata.bogus", "zzz"]),
                "{group}/{version} {kind}"
            );
        }
    }

    #[test]
    fn other_kinds_and_versions_are_not_known() {
        let object = json!({"spec": {"foo": 1}});
        assert_eq!(
            unknown_fields("stable.example.com", "v1", "CronTab", &object),
            None
        );
        assert_eq!(
            unknown_fields("apps", "v1beta1", "Deployment", &object),
            None
        );
        assert_eq!(unknown_fields("", "v1", "Deployment", &object), None);
        // Served by upstream until 1.22, not by 1.33.
        assert_eq!(
            find_unknown_fields(
                "certificates.k8s.io",
                "v1beta1",
                "CertificateSigningRequest",
                &object
            ),
            None
        );
    }

    #[test]
    fn a_value_of_the_wrong_type_reports_nothing() {
        let mut object = deployment();
        object["spec"]["foo"] = json!(1);
        object["spec"]["replicas"] = json!("three");
        assert_eq!(
            unknown("apps", "v1", "Deployment", &object),
            Vec::<String>::new()
        );
        assert_eq!(
            unknown("apps", "v1", "Deployment", &json!([1])),
            Vec::<String>::new()
        );
        assert_eq!(
            unknown("apps", "v1", "Deployment", &json!("x")),
            Vec::<String>::new()
        );
    }

    #[test]
    fn service_ports_take_int_or_string_target_ports() {
        let object = json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web"},
            "spec": {
                "type": "ClusterIP",
                "selector": {"app": "web"},
                "ports": [
                    {"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"},
                    {"name": "https", "port": 443, "targetPort": "https", "bogus": 1},
                ],
                "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10800}},
            },
        });
        assert_eq!(
            unknown("", "v1", "Service", &object),
            strings(&["spec.ports[1].bogus"])
        );
    }

    #[test]
    fn pods_take_quantities_as_strings_or_numbers() {
        let object = json!({
            "metadata": {"name": "p", "creationTimestamp": "2024-05-01T10:00:00Z"},
            "spec": {
                "containers": [{
                    "name": "c",
                    "image": "busybox",
                    "resources": {
                        "limits": {"cpu": 1, "memory": "1Gi", "nvidia.com/gpu": "1"},
                        "requests": {"cpu": 0.5, "memory": "512Mi", "ephemeral-storage": 1e9},
                    },
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }],
                "overhead": {"cpu": "250m"},
                "volumes": [{"name": "data", "emptyDir": {"sizeLimit": "1Gi", "medium": ""}}],
            },
            "status": {
                "phase": "Running",
                "startTime": "2024-05-01T10:00:01Z",
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": null}],
                "bogusStatus": 1,
            },
        });
        assert_eq!(
            unknown("", "v1", "Pod", &object),
            strings(&["status.bogusStatus"])
        );
    }

    #[test]
    fn secrets_events_leases_and_jobs() {
        let secret = json!({
            "metadata": {"name": "s"},
            "type": "Opaque",
            "data": {"password": "aHVudGVyMg=="},
            "stringData": {"user": "admin"},
            "immutable": true,
            "bogus": {},
        });
        assert_eq!(unknown("", "v1", "Secret", &secret), strings(&["bogus"]));

        let core_event = json!({
            "metadata": {"name": "e.1", "namespace": "default"},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": "p", "fieldPath": "spec.containers{c}"},
            "reason": "Started",
            "message": "Started container",
            "source": {"component": "kubelet", "host": "node-1", "bogus": 1},
            "firstTimestamp": "2024-05-01T10:00:00Z",
            "lastTimestamp": "2024-05-01T10:00:00Z",
            "eventTime": null,
            "count": 1,
            "type": "Normal",
        });
        assert_eq!(
            unknown("", "v1", "Event", &core_event),
            strings(&["source.bogus"])
        );

        let events_event = json!({
            "metadata": {"name": "e.2"},
            "eventTime": "2024-05-01T10:00:00.123456Z",
            "reportingController": "example.com/controller",
            "reportingInstance": "controller-1",
            "action": "Reconcile",
            "reason": "Synced",
            "regarding": {"kind": "Deployment", "name": "web", "namespace": "default"},
            "note": "synced",
            "type": "Normal",
            "series": {"count": 2, "lastObservedTime": "2024-05-01T10:01:00.000000Z"},
            "involvedObject": {},
        });
        assert_eq!(
            unknown("events.k8s.io", "v1", "Event", &events_event),
            strings(&["involvedObject"])
        );

        let lease = json!({
            "metadata": {"name": "leader"},
            "spec": {
                "holderIdentity": "a",
                "leaseDurationSeconds": 15,
                "acquireTime": "2024-05-01T10:00:00.000000Z",
                "renewTime": "2024-05-01T10:00:10.000000Z",
                "leaseTransitions": 2,
                "renewDeadline": 10,
            },
        });
        assert_eq!(
            unknown("coordination.k8s.io", "v1", "Lease", &lease),
            strings(&["spec.renewDeadline"])
        );

        let job = json!({
            "metadata": {"name": "j"},
            "spec": {
                "backoffLimit": 4,
                "completions": 1,
                "ttlSecondsAfterFinished": 100,
                "podFailurePolicy": {"rules": [{
                    "action": "FailJob",
                    "onExitCodes": {"operator": "In", "values": [42]},
                }]},
                "template": {"spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox", "command": ["true"]}],
                }},
                "retries": 3,
            },
        });
        assert_eq!(
            unknown("batch", "v1", "Job", &job),
            strings(&["spec.retries"])
        );
    }

    fn crd_with_schema(schema: Value) -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "crontabs.stable.example.com"},
            "spec": {
                "group": "stable.example.com",
                "scope": "Namespaced",
                "names": {"plural": "crontabs", "singular": "crontab", "kind": "CronTab", "shortNames": ["ct"]},
                "versions": [{
                    "name": "v1",
                    "served": true,
                    "storage": true,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}},
                    "additionalPrinterColumns": [{"name": "Spec", "type": "string", "jsonPath": ".spec.cronSpec"}],
                }],
            },
        })
    }

    #[test]
    fn crd_schemas_with_extensions_and_free_form_values_are_clean() {
        let schema = json!({
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": false,
            "properties": {
                "spec": {
                    "type": "object",
                    "default": {"anything": {"goes": [1, "two", null]}, "bogus": true},
                    "example": [{"x": 1}],
                    "required": ["cronSpec"],
                    "x-kubernetes-validations": [{
                        "rule": "self.replicas <= 10",
                        "message": "too many",
                        "messageExpression": "'max 10'",
                        "reason": "FieldValueInvalid",
                        "fieldPath": ".replicas",
                        "optionalOldSelf": false,
                    }],
                    "properties": {
                        "cronSpec": {"type": "string", "pattern": "^(\\d+|\\*)(/\\d+)?(\\s+(\\d+|\\*)(/\\d+)?){4}$", "maxLength": 64},
                        "replicas": {"type": "integer", "minimum": 1, "maximum": 10, "default": 1, "format": "int32"},
                        "port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                        "mode": {"type": "string", "enum": ["a", 1, null, {"k": "v"}], "nullable": true},
                        "ports": {
                            "type": "array",
                            "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["name"],
                            "items": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
                        },
                        "labels": {"type": "object", "x-kubernetes-map-type": "granular", "additionalProperties": {"type": "string"}},
                        "template": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true},
                        "allowed": {"type": "object", "additionalProperties": true},
                        "not": {"not": {"type": "string"}, "externalDocs": {"url": "https://example.com", "description": "d"}},
                    },
                },
                "status": {"type": "object", "properties": {"replicas": {"type": "integer"}}},
            },
        });
        let crd = crd_with_schema(schema);
        let found = find_unknown_fields(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            &crd,
        );
        assert_eq!(found, Some(UnknownFields::default()));
    }

    #[test]
    fn crd_schema_keywords_are_reported_except_where_upstream_decodes_leniently() {
        let schema = json!({
            "type": "object",
            "bogusRoot": 1,
            "properties": {
                "spec": {
                    "type": "object",
                    "properties": {
                        "replicas": {"type": "integer", "minimun": 1},
                        // a property named like a keyword is still a property
                        "items": {"type": "string", "typo": true},
                        "list": {"type": "array", "items": {"type": "string", "bogusInItems": 1}},
                        "map": {"type": "object", "additionalProperties": {"type": "string", "bogusInAP": 1}},
                        "either": {"oneOf": [{"type": "string"}, {"type": "integer", "bogusInOneOf": 1}]},
                        "negated": {"not": {"type": "string", "bogusInNot": 1}},
                        "deps": {"type": "object", "dependencies": {"a": {"type": "object", "bogusInDeps": 1}}},
                    },
                    "x-kubernetes-validations": [{"rule": "true", "bogusInRule": 1}],
                },
            },
        });
        let crd = crd_with_schema(schema);
        let root = "spec.versions[0].schema.openAPIV3Schema";
        let at = |rest: &str| format!("{root}.{rest}");
        let found = find_unknown_fields(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            &crd,
        )
        .unwrap();
        assert_eq!(
            found.reported,
            vec![
                at("bogusRoot"),
                at("properties.spec.properties.either.oneOf[1].bogusInOneOf"),
                at("properties.spec.properties.items.typo"),
                at("properties.spec.properties.negated.not.bogusInNot"),
                at("properties.spec.properties.replicas.minimun"),
                at("properties.spec.x-kubernetes-validations[0].bogusInRule"),
            ]
        );
        assert_eq!(
            found.unreported,
            vec![
                at("properties.spec.properties.deps.dependencies.a.bogusInDeps"),
                at("properties.spec.properties.list.items.bogusInItems"),
                at("properties.spec.properties.map.additionalProperties.bogusInAP"),
            ]
        );
        assert_eq!(
            unknown_fields(
                "apiextensions.k8s.io",
                "v1",
                "CustomResourceDefinition",
                &crd
            ),
            Some(found.reported.clone())
        );
        assert_eq!(found.all().len(), 9);
    }

    #[test]
    fn crd_spec_outside_schemas_is_strict() {
        let mut crd = crd_with_schema(json!({"type": "object"}));
        crd["spec"]["versions"][0]["additionalPrinterColumns"][0]["bogus"] = json!(1);
        crd["spec"]["names"]["items"] = json!("x");
        assert_eq!(
            unknown(
                "apiextensions.k8s.io",
                "v1",
                "CustomResourceDefinition",
                &crd
            ),
            strings(&[
                "spec.names.items",
                "spec.versions[0].additionalPrinterColumns[0].bogus",
            ])
        );
    }

    // --- removing ----------------------------------------------------------------------------

    #[test]
    fn remove_fields_drops_exactly_the_unknown_fields() {
        let clean = deployment();
        let mut object = clean.clone();
        object["x"] = json!(1);
        object["metadata"]["bogus"] = json!("b");
        object["spec"]["foo"] = json!({"nested": 1});
        object["spec"]["template"]["spec"]["containers"][0]["bogus"] = json!([1]);
        let paths = unknown("apps", "v1", "Deployment", &object);
        assert_eq!(paths.len(), 4);
        remove_fields(&mut object, &paths);
        assert_eq!(object, clean);
        assert_eq!(
            unknown("apps", "v1", "Deployment", &object),
            Vec::<String>::new()
        );
    }

    #[test]
    fn remove_fields_prefers_the_longest_key_and_skips_missing_paths() {
        let mut object = json!({
            "data": {"x": "keep"},
            "data.x": 5,
            "spec": {"a.b[c]": 1, "a": {"b[c]": "keep"}},
            "list": [{"k": 1}, {"k": 2, "drop": 3}],
        });
        remove_fields(
            &mut object,
            &strings(&[
                "data.x",
                "spec.a.b[c]",
                "list[1].drop",
                "nothing.here",
                "list[7].k",
                "list[x]",
            ]),
        );
        assert_eq!(
            object,
            json!({
                "data": {"x": "keep"},
                "spec": {"a": {"b[c]": "keep"}},
                "list": [{"k": 1}, {"k": 2}],
            })
        );
    }

    #[test]
    fn remove_fields_falls_back_to_shorter_keys() {
        // Key `a.b` exists but holds no `c`, so the path resolves through `a`, then `b`.
        let mut object = json!({"a.b": {"x": 1}, "a": {"b": {"c": 1, "d": 2}}});
        remove_fields(&mut object, &strings(&["a.b.c"]));
        assert_eq!(object, json!({"a.b": {"x": 1}, "a": {"b": {"d": 2}}}));
    }

    // --- duplicates --------------------------------------------------------------------------

    #[test]
    fn duplicates_at_the_top_level() {
        let body = br#"{"apiVersion":"v1","kind":"ConfigMap","kind":"ConfigMap","data":{}}"#;
        assert_eq!(duplicate_fields(body), strings(&["kind"]));
    }

    #[test]
    fn nested_duplicates_in_objects_lists_and_maps() {
        let body = br#"{
            "metadata": {"name": "a", "labels": {"app": "x", "app": "y"}, "name": "b"},
            "spec": {"containers": [
                {"name": "c1", "image": "i"},
                {"name": "c2", "image": "i", "name": "c3"}
            ]}
        }"#;
        assert_eq!(
            duplicate_fields(body),
            strings(&[
                "metadata.labels.app",
                "metadata.name",
                "spec.containers[1].name"
            ])
        );
    }

    #[test]
    fn a_key_repeated_many_times_is_reported_once() {
        assert_eq!(duplicate_fields(br#"{"a":1,"a":2,"a":3}"#), strings(&["a"]));
        assert_eq!(
            duplicate_fields(br#"[{"a":1,"a":2},{"a":1,"a":2}]"#),
            strings(&["[0].a", "[1].a"])
        );
    }

    #[test]
    fn keys_are_compared_unescaped() {
        assert_eq!(duplicate_fields(br#"{"a":1,"\u0061":2}"#), strings(&["a"]));
        assert_eq!(
            duplicate_fields(br#"{"a\"b":1,"a\"b":2}"#),
            strings(&["a\"b"])
        );
    }

    #[test]
    fn equal_keys_in_different_objects_are_not_duplicates() {
        let body = br#"{"metadata":{"name":"a"},"spec":{"name":"a","x":{"name":1}},"name":"z"}"#;
        assert_eq!(duplicate_fields(body), Vec::<String>::new());
    }

    #[test]
    fn large_objects_still_find_duplicates() {
        let mut body = String::from("{");
        for i in 0..100 {
            body.push_str(&format!("\"k{i}\":{i},"));
        }
        body.push_str("\"k5\":0,\"k99\":0}");
        assert_eq!(duplicate_fields(body.as_bytes()), strings(&["k5", "k99"]));
    }

    #[test]
    fn at_most_a_hundred_duplicates() {
        let mut body = String::from("{");
        for i in 0..150 {
            body.push_str(&format!("\"k{i}\":1,\"k{i}\":2,"));
        }
        body.push_str("\"end\":0}");
        let found = duplicate_fields(body.as_bytes());
        assert_eq!(found.len(), 100);
        assert_eq!(found[99], "k99");
    }

    #[test]
    fn invalid_json_has_no_duplicates() {
        assert_eq!(duplicate_fields(br#"{"a":1,"a":2"#), Vec::<String>::new());
        assert_eq!(
            duplicate_fields(br#"{"a":1,"a":2} x"#),
            Vec::<String>::new()
        );
        assert_eq!(duplicate_fields(b"a: 1\na: 2\n"), Vec::<String>::new());
    }

    // --- messages ----------------------------------------------------------------------------

    #[test]
    fn strict_message_joins_unknown_then_duplicate_fields() {
        let unknown = strings(&["spec.foo", "x"]);
        let duplicates = strings(&["metadata.name"]);
        assert_eq!(
            strict_error_message(&unknown, &duplicates),
            r#"strict decoding error: unknown field "spec.foo", unknown field "x", duplicate field "metadata.name""#
        );
        assert_eq!(
            strict_error_message(&[], &strings(&["a"])),
            r#"strict decoding error: duplicate field "a""#
        );
    }

    #[test]
    fn bad_request_message_names_kind_and_version() {
        assert_eq!(
            bad_request_message("Deployment", "v1", &strings(&["spec.foo"]), &[]),
            r#"Deployment in version "v1" cannot be handled as a Deployment: strict decoding error: unknown field "spec.foo""#
        );
    }

    #[test]
    fn warnings_are_one_per_field() {
        assert_eq!(
            warnings(&strings(&["spec.foo"]), &strings(&["x"])),
            strings(&[r#"unknown field "spec.foo""#, r#"duplicate field "x""#])
        );
        assert_eq!(warnings(&[], &[]), Vec::<String>::new());
    }

    #[test]
    fn paths_are_quoted_as_go_quotes_them() {
        assert_eq!(
            warnings(&strings(&["metadata.a\"b", "spec.tab\there"]), &[]),
            strings(&[
                r#"unknown field "metadata.a\"b""#,
                r#"unknown field "spec.tab\there""#
            ])
        );
    }

    #[test]
    fn duplicates_at_or_beneath_unknown_fields_are_not_reported() {
        let unknown = strings(&["spec.foo", "list[0].bogus"]);
        let duplicates = strings(&[
            "spec.foo",
            "spec.foo.a",
            "list[0].bogus[1].x",
            "spec.foobar",
        ]);
        assert_eq!(
            warnings(&unknown, &duplicates),
            strings(&[
                r#"unknown field "spec.foo""#,
                r#"unknown field "list[0].bogus""#,
                r#"duplicate field "spec.foobar""#,
            ])
        );
    }

    #[test]
    fn at_most_a_hundred_errors() {
        let unknown: Vec<String> = (0..80).map(|i| format!("u{i}")).collect();
        let duplicates: Vec<String> = (0..80).map(|i| format!("d{i}")).collect();
        let all = warnings(&unknown, &duplicates);
        assert_eq!(all.len(), 100);
        assert_eq!(all[99], r#"duplicate field "d19""#);
    }

    #[test]
    fn end_to_end_unknown_and_duplicate_fields_of_a_body() {
        let body = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","name":"c","bogus":{"z":1,"z":2}},"data":{"a":"1"},"extra":true}"#;
        let mut object: Value = serde_json::from_slice(body).unwrap();
        let found = find_unknown_fields("", "v1", "ConfigMap", &object).unwrap();
        let duplicates = duplicate_fields(body);
        assert_eq!(duplicates, strings(&["metadata.name", "metadata.bogus.z"]));
        assert_eq!(
            bad_request_message("ConfigMap", "v1", &found.reported, &duplicates),
            r#"ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: unknown field "extra", unknown field "metadata.bogus", duplicate field "metadata.name""#
        );
        remove_fields(&mut object, &found.all());
        assert_eq!(
            object,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}})
        );
    }
}
