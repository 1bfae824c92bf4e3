//! CRD conversion webhooks (`spec.conversion.strategy: Webhook`): custom objects converted
//! between the versions of their CRD by POSTing an `apiextensions.k8s.io/v1`
//! `ConversionReview` to the CRD's webhook, as upstream's `webhookConverter` does.
//!
//! The registry calls [`Converter::convert`] wherever an object crosses between the version
//! it is stored in and the version a request works in: reads (get, list, watch events) of
//! another version than the stored one, and writes in a non-storage version (the request's
//! object goes to the storage version before it is stored). A CRD with `strategy: None`
//! never comes here: its versions differ in `apiVersion` only.
//!
//! # Guarantees
//! - Only objects whose `apiVersion` differs from the desired one are sent; a list is
//!   converted in one review, its items put back in place.
//! - The answer is checked as upstream checks it, with upstream's messages: the review's
//!   kind and `uid`, `result.status`, the count of `convertedObjects`, each object's
//!   `apiVersion` (the desired one) and kind, and unchanged name, namespace and uid. Of the
//!   metadata only `labels` and `annotations` may change (and must then be valid); the rest
//!   is restored from the object sent.
//! - Every failure is upstream's 500 with its text as the message (upstream's error is not
//!   a `Status`, so its reason is empty): `conversion webhook for GROUP/VERSION, Kind=KIND
//!   failed: …`, naming the version converted from.
//! - `apiserver_crd_conversion_webhook_duration_seconds{crd_name,from_version,to_version,
//!   succeeded}` observes each call, as upstream's `converterMetric` does.
//!
//! # Assumptions
//! - The CRD passed validation ([`validate`], called by [`crate::crd::definition`]):
//!   `clientConfig` has a URL or a Service (its port defaulted to 443).
//!
//! # Caveats
//! - Only `ConversionReview` `v1` is spoken: a CRD whose `conversionReviewVersions` lists
//!   `v1beta1` alone fails every conversion (upstream would send `v1beta1`).
//! - Each call is bounded by [`TIMEOUT`]; upstream's conversion client sets no timeout of its
//!   own and is bounded by the request's.
//! - The converted object is not pruned or defaulted with the target version's schema, and a
//!   write answers with the object as validated in the request's version rather than the
//!   round trip of the stored object back through the webhook.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use finale_store::Store;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use serde_json::{Map, Value, json};

use crate::crd::schema::StructuralSchema;
use crate::resources::ResourceType;
use crate::status::{ApiError, ApiResult};
use crate::validation::FieldError;
use crate::webhook_client::{self, Clients, Endpoint, Review};

/// How long one conversion call may take.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// The `ConversionReview` versions upstream accepts in `conversionReviewVersions`.
pub const REVIEW_VERSIONS: [&str; 2] = ["v1", "v1beta1"];

/// Upstream's latency buckets for conversion webhooks (`latencyBuckets`).
const BUCKETS: [f64; 10] = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0];

/// The webhook of one CRD with `strategy: Webhook`, as its served types carry it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConversionWebhook {
    /// The CRD's name, for the metric.
    pub crd_name: String,
    pub endpoint: Endpoint,
    /// PEM certificates to trust; empty means the system roots.
    pub ca_bundle: Vec<u8>,
    pub review_versions: Vec<String>,
    /// Each version's structural schema: what a converted object is pruned with.
    pub schemas: VersionSchemas,
}

/// The structural schemas of a CRD's versions, by version name. Two are equal when they hold
/// the same compiled schemas.
#[derive(Clone, Debug, Default)]
pub struct VersionSchemas(BTreeMap<String, Arc<StructuralSchema>>);

impl PartialEq for VersionSchemas {
    fn eq(&self, other: &VersionSchemas) -> bool {
        self.0.len() == other.0.len()
            && self
                .0
                .iter()
                .zip(&other.0)
                .all(|((a, x), (b, y))| a == b && Arc::ptr_eq(x, y))
    }
}

impl Eq for VersionSchemas {}

impl VersionSchemas {
    /// What upstream's `unstructuredSchemaCoercer` does to an object a webhook converted to
    /// `version`: fields its schema does not know are pruned, and `null`s it does not allow
    /// (and would not default) dropped. Defaults are not applied here: upstream applies them
    /// when it decodes an object, not when it converts one.
    fn coerce(&self, version: &str, object: &mut Value) {
        if let Some(schema) = self.0.get(version) {
            schema.prune(object);
            schema.prune_nulls_without_defaults(object);
        }
    }
}

impl ConversionWebhook {
    /// The webhook of `crd`, None unless its `spec.conversion.strategy` is `Webhook`.
    pub fn from_crd(crd: &Value) -> Option<ConversionWebhook> {
        let conversion = crd.pointer("/spec/conversion")?;
        if conversion.get("strategy").and_then(Value::as_str) != Some("Webhook") {
            return None;
        }
        let webhook = conversion.get("webhook")?;
        let client = webhook.get("clientConfig")?;
        let text = |value: &Value, key: &str| {
            value
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let endpoint = match (
            client.get("url").and_then(Value::as_str),
            client.get("service").filter(|s| s.is_object()),
        ) {
            (Some(url), _) => Endpoint::Url(url.to_string()),
            (None, Some(service)) => Endpoint::Service {
                namespace: text(service, "namespace"),
                name: text(service, "name"),
                port: service
                    .get("port")
                    .and_then(Value::as_u64)
                    .and_then(|p| u16::try_from(p).ok())
                    .unwrap_or(443),
                path: text(service, "path"),
            },
            (None, None) => return None,
        };
        let ca_bundle = client
            .get("caBundle")
            .and_then(Value::as_str)
            .and_then(|b| {
                use base64::Engine;
                base64::engine::general_purpose::STANDARD.decode(b).ok()
            })
            .unwrap_or_default();
        Some(ConversionWebhook {
            crd_name: crate::object::name(crd).to_string(),
            endpoint,
            ca_bundle,
            review_versions: crate::object::string_list(webhook.get("conversionReviewVersions")),
            schemas: VersionSchemas::default(),
        })
    }

    /// The webhook with the schemas of `types`, the CRD's served versions.
    pub fn with_schemas(mut self, types: &[ResourceType]) -> ConversionWebhook {
        self.schemas = VersionSchemas(
            types
                .iter()
                .filter_map(|t| Some((t.version.clone(), Arc::clone(t.schema.as_ref()?))))
                .collect(),
        );
        self
    }
}

/// A CRD's `spec.conversion`, checked as upstream's `validateCustomResourceConversion`
/// checks it (on the internal form, hence its
/// `spec.conversion.webhookClientConfig` and `spec.conversion.conversionReviewVersions`
/// paths): a webhook needs a valid `clientConfig` and `conversionReviewVersions` naming a
/// version upstream speaks; `strategy: None` must set neither.
pub fn validate(conversion: Option<&Value>, preserve_unknown: bool, errors: &mut Vec<FieldError>) {
    let Some(conversion) = conversion.filter(|c| !c.is_null()) else {
        return;
    };
    let strategy = conversion
        .get("strategy")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if preserve_unknown && strategy != "None" {
        errors.push(FieldError::invalid(
            "spec.conversion.strategy",
            strategy,
            "must be None if spec.preserveUnknownFields is true",
        ));
    }
    if strategy.is_empty() {
        errors.push(FieldError::required("spec.conversion.strategy", ""));
        return;
    }
    if strategy != "None" && strategy != "Webhook" {
        errors.push(FieldError::not_supported(
            "spec.conversion.strategy",
            strategy,
            &["None", "Webhook"],
        ));
        return;
    }
    let webhook = conversion.get("webhook").filter(|w| !w.is_null());
    let client_config = webhook
        .and_then(|w| w.get("clientConfig"))
        .filter(|c| !c.is_null());
    let review_versions = webhook.and_then(|w| w.get("conversionReviewVersions"));
    if strategy == "Webhook" {
        const CLIENT_CONFIG: &str = "spec.conversion.webhookClientConfig";
        match client_config {
            None => errors.push(FieldError::required(
                CLIENT_CONFIG,
                "required when strategy is set to Webhook",
            )),
            Some(client) => errors.extend(crate::webhook_client::validate_client_config(
                Some(client),
                CLIENT_CONFIG,
            )),
        }
        validate_review_versions(review_versions, errors);
    } else {
        if client_config.is_some() {
            errors.push(FieldError::forbidden(
                "spec.conversion.webhookClientConfig",
                "should not be set when strategy is not set to Webhook",
            ));
        }
        if review_versions
            .and_then(Value::as_array)
            .is_some_and(|v| !v.is_empty())
        {
            errors.push(FieldError::forbidden(
                "spec.conversion.conversionReviewVersions",
                "should not be set when strategy is not set to Webhook",
            ));
        }
    }
}

/// Upstream's `validateConversionReviewVersions`: at least one, no duplicates, DNS-1035
/// labels, and one of the versions it speaks.
fn validate_review_versions(versions: Option<&Value>, errors: &mut Vec<FieldError>) {
    const PATH: &str = "spec.conversion.conversionReviewVersions";
    let versions = crate::object::string_list(versions);
    if versions.is_empty() {
        errors.push(FieldError::required(PATH, ""));
        return;
    }
    let mut seen = std::collections::HashSet::new();
    let mut known = false;
    for (i, version) in versions.iter().enumerate() {
        let at = format!("{PATH}[{i}]");
        if !seen.insert(version.as_str()) {
            errors.push(FieldError::invalid(&at, version, "duplicate version"));
            continue;
        }
        for problem in crate::validation::is_dns1035_label(version) {
            errors.push(FieldError::invalid(&at, version, &problem));
        }
        known |= REVIEW_VERSIONS.contains(&version.as_str());
    }
    if !known {
        errors.push(FieldError::invalid_literal(
            PATH,
            format!(
                "[]string{{{}}}",
                versions
                    .iter()
                    .map(|v| crate::validation::go_quote(v))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            &format!(
                "must include at least one of {}",
                REVIEW_VERSIONS.join(", ")
            ),
        ));
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DurationLabels {
    pub crd_name: String,
    pub from_version: String,
    pub to_version: String,
    pub succeeded: &'static str,
}

/// `apiserver_crd_conversion_webhook_duration_seconds`.
#[derive(Clone)]
pub struct ConversionMetrics {
    pub(crate) duration: Family<DurationLabels, Histogram>,
}

impl Default for ConversionMetrics {
    fn default() -> Self {
        ConversionMetrics {
            duration: Family::new_with_constructor(|| Histogram::new(BUCKETS)),
        }
    }
}

impl std::fmt::Debug for ConversionMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConversionMetrics").finish_non_exhaustive()
    }
}

/// Calls conversion webhooks; shared by every clone of the registry.
pub struct Converter {
    store: Arc<dyn Store>,
    clients: Arc<Clients>,
    metrics: Arc<ConversionMetrics>,
}

impl std::fmt::Debug for Converter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Converter").finish_non_exhaustive()
    }
}

/// How a conversion's failures are worded: upstream words a list's differently from one
/// object's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    Object,
    List,
}

impl Converter {
    pub fn new(store: Arc<dyn Store>, clients: Arc<Clients>) -> Self {
        Converter {
            store,
            clients,
            metrics: Arc::new(ConversionMetrics::default()),
        }
    }

    pub fn metrics(&self) -> &Arc<ConversionMetrics> {
        &self.metrics
    }

    /// `objects` in `desired` (`group/version`), those already in it untouched. `resource`
    /// must carry a webhook ([`ResourceType::conversion`]); without one, only `apiVersion`
    /// is set (strategy `None`).
    pub async fn convert(
        &self,
        resource: &ResourceType,
        mut objects: Vec<Value>,
        desired: &str,
        shape: Shape,
    ) -> ApiResult<Vec<Value>> {
        let pending: Vec<usize> = objects
            .iter()
            .enumerate()
            .filter(|(_, o)| api_version(o) != desired)
            .map(|(i, _)| i)
            .collect();
        if pending.is_empty() {
            return Ok(objects);
        }
        let Some(webhook) = resource.conversion.as_deref() else {
            for i in pending {
                if let Some(map) = objects[i].as_object_mut() {
                    map.insert("apiVersion".into(), json!(desired));
                }
            }
            return Ok(objects);
        };
        // Upstream names the kind the input is in: the first object's version.
        let from = api_version(&objects[pending[0]]).to_string();
        let gvk = gvk_text(&from, &resource.kind);
        let started = Instant::now();
        let sent: Vec<Value> = pending.iter().map(|&i| objects[i].clone()).collect();
        let from_version = from.rsplit('/').next().unwrap_or_default().to_string();
        let to_version = desired.rsplit('/').next().unwrap_or_default().to_string();
        let result = self.call(webhook, &gvk, sent, desired).await;
        let converted = result.and_then(|converted| {
            if converted.len() != pending.len() {
                return Err(format!(
                    "conversion webhook for {gvk} returned {} objects, expected {}",
                    converted.len(),
                    pending.len()
                ));
            }
            let mut checked = Vec::with_capacity(converted.len());
            for (n, (&i, answer)) in pending.iter().zip(converted).enumerate() {
                let mut object = check_converted(&objects[i], answer, desired, &gvk, n, shape)?;
                webhook.schemas.coerce(&to_version, &mut object);
                checked.push(object);
            }
            Ok(checked)
        });
        if from_version != to_version {
            self.metrics
                .duration
                .get_or_create(&DurationLabels {
                    crd_name: webhook.crd_name.clone(),
                    from_version,
                    to_version,
                    succeeded: if converted.is_ok() { "true" } else { "false" },
                })
                .observe(started.elapsed().as_secs_f64());
        }
        let converted = converted.map_err(conversion_error)?;
        for (i, object) in pending.into_iter().zip(converted) {
            objects[i] = object;
        }
        Ok(objects)
    }

    /// One object in `desired`.
    pub async fn convert_one(
        &self,
        resource: &ResourceType,
        object: Value,
        desired: &str,
    ) -> ApiResult<Value> {
        self.convert(resource, vec![object], desired, Shape::Object)
            .await?
            .pop()
            .ok_or_else(|| ApiError::internal("a conversion lost its object"))
    }

    /// The review exchange and upstream's checks of the answer's envelope; the converted
    /// objects as the webhook gave them.
    async fn call(
        &self,
        webhook: &ConversionWebhook,
        gvk: &str,
        objects: Vec<Value>,
        desired: &str,
    ) -> Result<Vec<Value>, String> {
        let failed = |why: String| format!("conversion webhook for {gvk} failed: {why}");
        if !webhook.review_versions.iter().any(|v| v == "v1") {
            return Err(failed(format!(
                "no supported conversion review versions: this server sends ConversionReview v1 only, and conversionReviewVersions is {:?}",
                webhook.review_versions
            )));
        }
        let uid = uuid::Uuid::new_v4().to_string();
        let review = json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "ConversionReview",
            "request": {"uid": uid, "desiredAPIVersion": desired, "objects": objects},
        });
        let target = webhook_client::target(
            self.store.as_ref(),
            &webhook.endpoint,
            TIMEOUT,
            Review::Conversion,
        )
        .await
        .map_err(|e| failed(e.0))?;
        let answer = self
            .clients
            .post(
                &webhook.ca_bundle,
                &target,
                TIMEOUT,
                &review,
                Review::Conversion,
            )
            .await
            .map_err(|e| failed(e.0))?;
        converted_objects(&uid, answer).map_err(failed)
    }
}

/// Upstream's `getConvertedObjectsFromResponse` for a `v1` review.
fn converted_objects(uid: &str, answer: Value) -> Result<Vec<Value>, String> {
    let answer_version = api_version(&answer);
    let answer_kind = answer
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if answer_version != "apiextensions.k8s.io/v1" || answer_kind != "ConversionReview" {
        return Err(format!(
            "expected webhook response of apiextensions.k8s.io/v1, Kind=ConversionReview, got {}",
            gvk_text(answer_version, answer_kind)
        ));
    }
    let Some(response) = answer.get("response").filter(|r| r.is_object()) else {
        return Err("no response provided".into());
    };
    let answered_uid = response
        .get("uid")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if answered_uid != uid {
        return Err(format!(
            "expected response.uid={uid:?}, got {answered_uid:?}"
        ));
    }
    let result = response.get("result");
    let status = result
        .and_then(|r| r.get("status"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    if status != "Success" {
        let message = result
            .and_then(|r| r.get("message"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !message.is_empty() {
            return Err(message.to_string());
        }
        return Err(format!(
            "response.result.status was '{status}', not 'Success'"
        ));
    }
    Ok(response
        .get("convertedObjects")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default())
}

/// Upstream's checks of one converted object against the one sent (`validateConvertedObject`
/// and `restoreObjectMeta`), worded for an object or for item `n` of a list; the object with
/// the sent metadata, and the answer's labels and annotations.
fn check_converted(
    original: &Value,
    converted: Value,
    desired: &str,
    gvk: &str,
    n: usize,
    shape: Shape,
) -> Result<Value, String> {
    // Upstream counts the item before its list checks: their index is one past it.
    let (invalid, invalid_object, invalid_metadata) = match shape {
        Shape::Object => (
            format!("conversion webhook for {gvk} returned invalid object at index 0"),
            format!("conversion webhook for {gvk} returned invalid object"),
            format!("conversion webhook for {gvk} returned invalid metadata"),
        ),
        Shape::List => (
            format!(
                "conversion webhook for {gvk} returned invalid converted object at index {}",
                n + 1
            ),
            format!(
                "conversion webhook for {gvk} returned invalid converted object at index {}",
                n + 1
            ),
            format!(
                "conversion webhook for {gvk} returned invalid metadata in object at index {}",
                n + 1
            ),
        ),
    };
    let Some(mut converted_map) = converted.as_object().cloned() else {
        return Err(format!(
            "conversion webhook for {gvk} returned invalid converted object at index {n}: invalid type, expected=Unstructured, got={}",
            go_type(&converted)
        ));
    };
    let got = api_version(&converted);
    if got != desired {
        return Err(format!(
            "{invalid}: invalid groupVersion (expected {desired}, received {got})"
        ));
    }
    let kind = |o: &Value| {
        o.get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let (expected_kind, got_kind) = (kind(original), kind(&converted));
    if expected_kind != got_kind {
        return Err(format!(
            "{invalid}: invalid kind (expected {expected_kind}, received {got_kind})"
        ));
    }
    for (field, what) in [("name", "name"), ("namespace", "namespace"), ("uid", "UID")] {
        let sent = crate::object::meta_str(original, field).unwrap_or_default();
        let answered = crate::object::meta_str(&converted, field).unwrap_or_default();
        if sent != answered {
            return Err(format!(
                "{invalid_object}: must have the same {what}: {sent} != {answered}"
            ));
        }
    }
    let metadata = restore_metadata(original, converted_map.get("metadata"))
        .map_err(|why| format!("{invalid_metadata}: {why}"))?;
    converted_map.insert("metadata".into(), Value::Object(metadata));
    Ok(Value::Object(converted_map))
}

/// The sent object's metadata with the answer's labels and annotations (`restoreObjectMeta`).
fn restore_metadata(
    original: &Value,
    answered: Option<&Value>,
) -> Result<Map<String, Value>, String> {
    let Some(answered) = answered else {
        return Err("missing metadata in converted object".into());
    };
    let Some(answered) = answered.as_object() else {
        return Err(format!(
            "invalid metadata of type {} in converted object",
            go_type(answered)
        ));
    };
    let mut metadata = original
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for field in ["labels", "annotations"] {
        let Some(values) = answered.get(field).filter(|v| !v.is_null()) else {
            metadata.remove(field);
            continue;
        };
        let Some(values) = values.as_object() else {
            return Err(format!(
                "invalid metadata.{field} of type {} in converted object",
                go_type(values)
            ));
        };
        for (key, value) in values {
            if !value.is_string() {
                return Err(format!(
                    "metadata.{field}[{key}] must be a string, but is {} in converted object",
                    go_type(value)
                ));
            }
        }
        let before = metadata.get(field).and_then(Value::as_object);
        if before != Some(values) && !(before.is_none() && values.is_empty()) {
            let errors: Vec<FieldError> = if field == "labels" {
                crate::validation::validate_labels(values)
            } else {
                crate::validation::validate_annotations(values)
            };
            if !errors.is_empty() {
                return Err(aggregate(&errors));
            }
        }
        metadata.insert(field.into(), Value::Object(values.clone()));
    }
    Ok(metadata)
}

/// Go's `ErrorList.ToAggregate()` text: one error as is, several in brackets.
fn aggregate(errors: &[FieldError]) -> String {
    let texts: Vec<String> = errors.iter().map(ToString::to_string).collect();
    match texts.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// A failed conversion as upstream answers it: its error is not a `Status`, so the client
/// sees a 500 with its text and no reason.
fn conversion_error(message: String) -> ApiError {
    ApiError::new(500, "", message)
}

/// Go's `%T` of a decoded JSON value, as upstream's messages print it.
fn go_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_i64() || n.is_u64() => "int64",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

fn api_version(object: &Value) -> &str {
    object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Go's `GroupVersionKind.String()`: `group/version, Kind=Kind` (`/v1, Kind=…` for the core
/// group).
fn gvk_text(api_version: &str, kind: &str) -> String {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    format!("{group}/{version}, Kind={kind}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(version: &str, name: &str) -> Value {
        json!({
            "apiVersion": format!("example.com/{version}"),
            "kind": "Widget",
            "metadata": {"name": name, "namespace": "ns", "uid": "u-1", "resourceVersion": "7",
                         "labels": {"a": "b"}},
            "spec": {"size": "3"},
        })
    }

    #[test]
    fn a_converted_object_keeps_the_sent_metadata_but_its_labels() {
        let mut answer = object("v2", "w");
        answer["metadata"]["resourceVersion"] = json!("99");
        answer["metadata"]["labels"] = json!({"c": "d"});
        let checked = check_converted(
            &object("v1", "w"),
            answer,
            "example.com/v2",
            "example.com/v1, Kind=Widget",
            0,
            Shape::Object,
        )
        .expect("a valid answer");
        assert_eq!(checked["metadata"]["resourceVersion"], json!("7"));
        assert_eq!(checked["metadata"]["labels"], json!({"c": "d"}));
        assert_eq!(checked["apiVersion"], json!("example.com/v2"));
    }

    #[test]
    fn answers_that_change_identity_or_version_are_refused_in_upstreams_words() {
        let gvk = "example.com/v1, Kind=Widget";
        let renamed = check_converted(
            &object("v1", "w"),
            object("v2", "other"),
            "example.com/v2",
            gvk,
            0,
            Shape::Object,
        );
        assert_eq!(
            renamed.unwrap_err(),
            "conversion webhook for example.com/v1, Kind=Widget returned invalid object: must have the same name: w != other"
        );
        let unconverted = check_converted(
            &object("v1", "w"),
            object("v1", "w"),
            "example.com/v2",
            gvk,
            0,
            Shape::List,
        );
        assert_eq!(
            unconverted.unwrap_err(),
            "conversion webhook for example.com/v1, Kind=Widget returned invalid converted object at index 1: invalid groupVersion (expected example.com/v2, received example.com/v1)"
        );
        let mut bad_label = object("v2", "w");
        bad_label["metadata"]["labels"] = json!({"a": 1});
        let refused = check_converted(
            &object("v1", "w"),
            bad_label,
            "example.com/v2",
            gvk,
            0,
            Shape::Object,
        );
        assert_eq!(
            refused.unwrap_err(),
            "conversion webhook for example.com/v1, Kind=Widget returned invalid metadata: metadata.labels[a] must be a string, but is int64 in converted object"
        );
    }

    #[test]
    fn the_review_envelope_is_checked() {
        let ok = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "response": {"uid": "u", "result": {"status": "Success"}, "convertedObjects": [{}]}});
        assert_eq!(converted_objects("u", ok.clone()).map(|o| o.len()), Ok(1));
        assert_eq!(
            converted_objects("other", ok).unwrap_err(),
            r#"expected response.uid="other", got "u""#
        );
        let failed = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "response": {"uid": "u", "result": {"status": "Failure", "message": "no way"}}});
        assert_eq!(converted_objects("u", failed).unwrap_err(), "no way");
        let wrong = json!({"apiVersion": "v1", "kind": "Status"});
        assert_eq!(
            converted_objects("u", wrong).unwrap_err(),
            "expected webhook response of apiextensions.k8s.io/v1, Kind=ConversionReview, got /v1, Kind=Status"
        );
    }

    #[test]
    fn a_crd_with_a_webhook_names_its_endpoint() {
        let crd = json!({"metadata": {"name": "widgets.example.com"}, "spec": {"conversion": {
            "strategy": "Webhook",
            "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": {
                "service": {"namespace": "ns", "name": "conv", "path": "/convert", "port": 8443}}}}}});
        let webhook = ConversionWebhook::from_crd(&crd).expect("a webhook");
        assert_eq!(
            webhook.endpoint,
            Endpoint::Service {
                namespace: "ns".into(),
                name: "conv".into(),
                port: 8443,
                path: "/convert".into()
            }
        );
        assert!(
            ConversionWebhook::from_crd(&json!({"spec": {"conversion": {"strategy": "None"}}}))
                .is_none()
        );
    }
}
