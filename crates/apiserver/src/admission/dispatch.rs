//! Calling the matching webhooks of one request: mutating in order with reinvocation,
//! validating in parallel; the `AdmissionReview` each one gets, what its answer means, and
//! the `Status` a client sees when it refuses.
//!
//! Upstream: `admission/plugin/webhook/{mutating,validating}/dispatcher.go`,
//! `request/admissionreview.go` and `errors/statuserror.go`.

use std::collections::HashSet;
use std::time::Instant;

use base64::Engine;
use serde_json::{Map, Value, json};

use super::config::{Hook, HookType, SideEffects};
use super::match_conditions::Decision;
use super::matching::{self, Invocation};
use super::metrics::RejectionKind;
use super::{Attributes, Webhooks};
use crate::status::{ApiError, ApiResult, Cause, Details};
use crate::webhook_client::{CallError, Review};

/// Why one webhook call did not let the request through.
enum Failure {
    /// The webhook could not be called or gave no usable answer: its failure policy decides.
    Call { error: CallError, code: u16 },
    /// The webhook (or the dry-run rule) refused the request.
    Rejected(ApiError),
    /// Something in this server failed; the request fails whatever the policy.
    Internal(ApiError),
}

/// A webhook's usable answer.
struct Answer {
    allowed: bool,
    result: Option<Value>,
    /// The decoded JSON patch of a mutating webhook.
    patch: Option<Value>,
    warnings: Vec<String>,
    /// `response.auditAnnotations`, for the request's audit event.
    audit_annotations: Vec<(String, String)>,
    /// The object as the webhook was sent it (in its invocation's version), which a patch
    /// applies to.
    seen: Option<Value>,
}

/// The namespace's labels, read at most once per request.
pub(super) type NamespaceLabels = Option<Map<String, Value>>;

impl Webhooks {
    /// Runs the mutating webhooks that match the request on `object` (None on DELETE) and
    /// returns their warnings. `object` is changed in place by their patches.
    pub async fn mutate(
        &self,
        attributes: Attributes<'_>,
        mut object: Option<&mut Value>,
    ) -> ApiResult<Vec<String>> {
        if matching::is_exempt(attributes.resource) {
            return Ok(Vec::new());
        }
        let snapshot = self.snapshot().await?;
        if snapshot.mutating.is_empty() {
            return Ok(Vec::new());
        }
        let mut warnings = Vec::new();
        let mut namespace_labels: NamespaceLabels = None;
        // Upstream's reinvocation context: webhooks with `IfNeeded` called since the last
        // change, and those a later change requires to be called again.
        let mut invoked_since_change: Vec<(&str, usize)> = Vec::new();
        let mut reinvoke: HashSet<(&str, usize)> = HashSet::new();
        let mut changed_any = false;
        for round in 0..2 {
            if round == 1 && !changed_any {
                break;
            }
            for hook in &snapshot.mutating {
                let current = Attributes {
                    object: object.as_deref(),
                    ..attributes
                };
                let Some(invocation) = self
                    .should_call(hook, &current, &mut namespace_labels)
                    .await?
                else {
                    continue;
                };
                if round == 1 && !reinvoke.contains(&hook.key()) {
                    continue;
                }
                let started = Instant::now();
                let outcome = self.call(hook, &current, &invocation).await;
                let mut changed = false;
                let outcome = match outcome {
                    Ok(answer) => {
                        publish_audit_annotations(hook, &answer);
                        warnings.extend(answer.warnings);
                        if !answer.allowed {
                            Err(Failure::Rejected(denial(
                                &hook.name,
                                answer.result.as_ref(),
                            )))
                        } else {
                            match (answer.patch, object.as_deref_mut()) {
                                (None, _) => Ok(()),
                                (Some(patch), Some(target)) => {
                                    match apply_patch(hook, answer.seen.as_ref(), &patch) {
                                        Ok(Some(patched)) => self
                                            .back_from_invocation(&attributes, &invocation, patched)
                                            .await
                                            .map_err(Failure::Internal)
                                            .and_then(|patched| settle(hook, patched, target))
                                            .map(|c| changed = c),
                                        Ok(None) => Ok(()),
                                        Err(failure) => Err(failure),
                                    }
                                }
                                (Some(_), None) => Err(Failure::Internal(internal(format!(
                                    "admission webhook {:?} attempted to modify the object, which is not supported for this operation",
                                    hook.name
                                )))),
                            }
                        }
                    }
                    Err(failure) => Err(failure),
                };
                let after = Attributes {
                    object: object.as_deref(),
                    ..attributes
                };
                let outcome = self.account(hook, &after, started, outcome);
                if changed {
                    changed_any = true;
                    reinvoke.extend(invoked_since_change.drain(..));
                }
                if hook.reinvoke_if_needed {
                    invoked_since_change.push(hook.key());
                }
                outcome?;
            }
        }
        Ok(warnings)
    }

    /// Evaluates the ValidatingAdmissionPolicies that apply, then runs the validating webhooks
    /// that match the request, all at once, and returns their warnings; the first refusal
    /// (a policy's, else the first in webhook order) answers.
    pub async fn validate(&self, attributes: Attributes<'_>) -> ApiResult<Vec<String>> {
        if matching::is_exempt(attributes.resource) {
            return Ok(Vec::new());
        }
        let snapshot = self.snapshot().await?;
        let mut namespace_labels: NamespaceLabels = None;
        // Policies first: upstream's ValidatingAdmissionPolicy plugin runs before the
        // validating webhooks, and its denial ends admission.
        let mut warnings = if snapshot.policies.is_empty() {
            Vec::new()
        } else {
            self.validate_policies(&snapshot.policies, &attributes, &mut namespace_labels)
                .await?
        };
        if snapshot.validating.is_empty() {
            return Ok(warnings);
        }
        let mut relevant = Vec::new();
        for hook in &snapshot.validating {
            if let Some(invocation) = self
                .should_call(hook, &attributes, &mut namespace_labels)
                .await?
            {
                relevant.push((hook, invocation));
            }
        }
        let calls = relevant.iter().map(|(hook, invocation)| async move {
            let started = Instant::now();
            let answer = self.call(hook, &attributes, invocation).await;
            if let Ok(answer) = &answer {
                publish_audit_annotations(hook, answer);
            }
            let outcome = match answer {
                Ok(answer) if answer.allowed => Ok(answer.warnings),
                Ok(answer) => Err((
                    answer.warnings,
                    Failure::Rejected(denial(&hook.name, answer.result.as_ref())),
                )),
                Err(failure) => Err((Vec::new(), failure)),
            };
            match outcome {
                Ok(warnings) => self
                    .account(hook, &attributes, started, Ok(()))
                    .map(|()| warnings),
                Err((warnings, failure)) => self
                    .account(hook, &attributes, started, Err(failure))
                    .map(|()| warnings),
            }
        });
        let mut first_error = None;
        for result in futures::future::join_all(calls).await {
            match result {
                Ok(more) => warnings.extend(more),
                Err(error) if first_error.is_none() => first_error = Some(error),
                Err(error) => {
                    tracing::warn!(message = %error.message, "a further webhook refused the request")
                }
            }
        }
        match first_error {
            Some(error) => Err(error),
            None => Ok(warnings),
        }
    }

    /// Records a call's metrics and turns its outcome into the request's: a call failure
    /// under `failurePolicy: Ignore` lets the request through.
    fn account(
        &self,
        hook: &Hook,
        attributes: &Attributes<'_>,
        started: Instant,
        outcome: Result<(), Failure>,
    ) -> ApiResult<()> {
        let hook_type = hook.hook_type.metric_label();
        let operation = attributes.operation.as_str();
        let elapsed = started.elapsed();
        let metrics = &self.metrics;
        let refused = |error: ApiError| {
            // A refused finalizer removal is what a deletion explanation must name.
            super::refusals::note(attributes, &hook.name, &error.message);
            Err(error)
        };
        match outcome {
            Ok(()) => {
                metrics.observe(&hook.name, hook_type, operation, false, elapsed);
                Ok(())
            }
            Err(Failure::Call { error, .. }) if hook.fail_open => {
                metrics.observe(&hook.name, hook_type, operation, false, elapsed);
                tracing::warn!(webhook = %hook.name, error = %error.0, "failed calling webhook, failing open");
                Ok(())
            }
            Err(Failure::Call { error, code }) => {
                metrics.observe(&hook.name, hook_type, operation, true, elapsed);
                metrics.reject(
                    &hook.name,
                    hook_type,
                    operation,
                    RejectionKind::CallFailed,
                    code,
                );
                tracing::warn!(webhook = %hook.name, error = %error.0, "failed calling webhook, failing closed");
                refused(internal(format!(
                    "failed calling webhook {:?}: {}",
                    hook.name, error.0
                )))
            }
            Err(Failure::Rejected(error)) => {
                metrics.observe(&hook.name, hook_type, operation, true, elapsed);
                metrics.reject(
                    &hook.name,
                    hook_type,
                    operation,
                    RejectionKind::Denied,
                    error.code,
                );
                refused(error)
            }
            Err(Failure::Internal(error)) => {
                metrics.observe(&hook.name, hook_type, operation, true, elapsed);
                metrics.reject(&hook.name, hook_type, operation, RejectionKind::Internal, 0);
                refused(error)
            }
        }
    }

    /// Whether `hook` applies to the request, and as which resource: rules and match policy,
    /// then the namespace and object selectors, then the `matchConditions` (upstream's
    /// `ShouldCallHook`).
    async fn should_call(
        &self,
        hook: &Hook,
        attributes: &Attributes<'_>,
        namespace_labels: &mut NamespaceLabels,
    ) -> ApiResult<Option<Invocation>> {
        let Some(invocation) = matching::invocation_resource(hook, attributes, &self.catalog)
        else {
            return Ok(None);
        };
        if matching::needs_namespace_labels(hook, attributes) {
            let selector = hook
                .namespace_selector
                .as_ref()
                .map_err(|e| internal(e.clone()))?;
            let labels = match matching::own_namespace_labels(attributes) {
                Some(own) => own.unwrap_or_default(),
                None => {
                    if namespace_labels.is_none() {
                        let name = attributes.namespace.unwrap_or_default();
                        *namespace_labels = Some(self.namespace_labels(name).await?);
                    }
                    namespace_labels.clone().unwrap_or_default()
                }
            };
            if !selector.matches(Some(&labels)) {
                return Ok(None);
            }
        }
        if !matching::object_selector_matches(hook, attributes).map_err(internal)? {
            return Ok(None);
        }
        if let Some(conditions) = &hook.match_conditions {
            // The conditions see the request as this webhook would receive it.
            let (object, old_object) = self.invocation_objects(attributes, &invocation).await?;
            let review = review("", attributes, &invocation, object, old_object);
            let request = review.get("request").unwrap_or(&Value::Null);
            match conditions.decide(request, hook.fail_open) {
                Decision::Call => {}
                Decision::Skip => return Ok(None),
                Decision::Refuse(error) => {
                    tracing::warn!(webhook = %hook.name, %error, "failed evaluating match conditions, failing closed");
                    return Err(match_conditions_forbidden(attributes, &error));
                }
            }
        }
        Ok(Some(invocation))
    }

    /// One webhook call: the dry-run rule, the review, the HTTPS exchange and the checks of
    /// the answer (upstream's `callHook` / `callAttrMutatingHook`).
    async fn call(
        &self,
        hook: &Hook,
        attributes: &Attributes<'_>,
        invocation: &Invocation,
    ) -> Result<Answer, Failure> {
        // Upstream answers 400 with its own code for a failure to call (mutating) and 503
        // for one of validating webhooks; the metrics' rejection_code follows it.
        let call_code = match hook.hook_type {
            HookType::Mutating => 400,
            HookType::Validating => 503,
        };
        if attributes.dry_run && hook.side_effects == SideEffects::Unsafe {
            return Err(Failure::Rejected(ApiError::bad_request(format!(
                "admission webhook {:?} does not support dry run",
                hook.name
            ))));
        }
        if !hook.speaks_v1 {
            return Err(Failure::Call {
                error: CallError(
                    "could not create admission objects: webhook does not accept AdmissionReview v1, the only version this server sends".into(),
                ),
                code: 400,
            });
        }
        let uid = uuid::Uuid::new_v4().to_string();
        let (object, old_object) = self
            .invocation_objects(attributes, invocation)
            .await
            .map_err(Failure::Internal)?;
        let review = review(&uid, attributes, invocation, object.clone(), old_object);
        let target = self.target(hook).await.map_err(|error| Failure::Call {
            error,
            code: call_code,
        })?;
        let answer = self
            .clients
            .post(
                &hook.ca_bundle,
                &target,
                hook.timeout,
                &review,
                Review::Admission,
            )
            .await
            .map_err(|error| Failure::Call {
                error,
                code: call_code,
            })?;
        let mut answer = verify(&uid, hook, answer).map_err(|why| Failure::Call {
            error: CallError(format!("received invalid webhook response: {why}")),
            code: 503,
        })?;
        answer.seen = object;
        Ok(answer)
    }

    /// The request's object and old object in the invocation's version.
    pub(super) async fn invocation_objects(
        &self,
        attributes: &Attributes<'_>,
        invocation: &Invocation,
    ) -> ApiResult<(Option<Value>, Option<Value>)> {
        let object = match attributes.object {
            Some(object) => Some(self.to_invocation(attributes, invocation, object).await?),
            None => None,
        };
        let old_object = match attributes.old_object {
            Some(object) => Some(self.to_invocation(attributes, invocation, object).await?),
            None => None,
        };
        Ok((object, old_object))
    }

    /// `object` (in the request's version) as the hook's resource serves it: through the
    /// CRD's conversion webhook for the other versions of a custom resource that has one
    /// (upstream converts with the CRD's converter), else as [`matching::convert`] does.
    /// Upstream answers a failed conversion with an internal error, whatever the policy.
    async fn to_invocation(
        &self,
        attributes: &Attributes<'_>,
        invocation: &Invocation,
        object: &Value,
    ) -> ApiResult<Value> {
        match invocation {
            Invocation::Own => Ok(object.clone()),
            Invocation::Equivalent(equivalent) if equivalent.conversion.is_some() => self
                .converter
                .convert_one(equivalent, object.clone(), &equivalent.api_version())
                .await
                .map_err(|e| internal(e.message)),
            Invocation::Equivalent(equivalent) => {
                Ok(matching::convert(attributes.resource, equivalent, object))
            }
        }
    }

    /// The inverse of [`Webhooks::to_invocation`], for a patched object.
    async fn back_from_invocation(
        &self,
        attributes: &Attributes<'_>,
        invocation: &Invocation,
        object: Value,
    ) -> ApiResult<Value> {
        match invocation {
            Invocation::Own => Ok(object),
            Invocation::Equivalent(_) if attributes.resource.conversion.is_some() => self
                .converter
                .convert_one(
                    attributes.resource,
                    object,
                    &attributes.resource.api_version(),
                )
                .await
                .map_err(|e| internal(e.message)),
            Invocation::Equivalent(equivalent) => {
                Ok(matching::convert(equivalent, attributes.resource, &object))
            }
        }
    }
}

/// Upstream's 403 for match conditions that failed under `failurePolicy: Fail`:
/// `<resource>.<group> "<name>" is forbidden: <error>`.
pub(super) fn match_conditions_forbidden(attributes: &Attributes<'_>, error: &str) -> ApiError {
    let resource = attributes.resource;
    let group_resource = if resource.group.is_empty() {
        resource.plural.clone()
    } else {
        format!("{}.{}", resource.plural, resource.group)
    };
    let message = if attributes.name.is_empty() {
        format!("{group_resource} is forbidden: {error}")
    } else {
        let name = crate::validation::go_quote(attributes.name);
        format!("{group_resource} {name} is forbidden: {error}")
    };
    ApiError::forbidden(message).with_details(Details {
        name: attributes.name.to_string(),
        group: resource.group.clone(),
        kind: resource.plural.clone(),
        ..Details::default()
    })
}

/// The `AdmissionReview` a webhook gets (upstream's `CreateV1AdmissionReview`); policies
/// build their `request` variable from it. `object` and `old_object` are the request's,
/// already in the invocation's version.
pub(super) fn review(
    uid: &str,
    attributes: &Attributes<'_>,
    invocation: &Invocation,
    object: Option<Value>,
    old_object: Option<Value>,
) -> Value {
    let requested = attributes.resource;
    let resource = match invocation {
        Invocation::Own => requested,
        Invocation::Equivalent(equivalent) => equivalent.as_ref(),
    };
    let kind = |r: &crate::resources::ResourceType| match attributes.kind_override {
        Some((group, version, kind)) => json!({"group": group, "version": version, "kind": kind}),
        None => json!({"group": r.group, "version": r.version, "kind": r.kind}),
    };
    let gvr = |r: &crate::resources::ResourceType| json!({"group": r.group, "version": r.version, "resource": r.plural});
    let mut request = json!({
        "uid": uid,
        "kind": kind(resource),
        "resource": gvr(resource),
        "requestKind": kind(requested),
        "requestResource": gvr(requested),
        "name": attributes.name,
        "operation": attributes.operation.as_str(),
        "userInfo": attributes.user,
        "object": object.unwrap_or(Value::Null),
        "oldObject": old_object.unwrap_or(Value::Null),
        "dryRun": attributes.dry_run,
        "options": options_object(attributes),
    });
    if let Some(subresource) = attributes.subresource.filter(|s| !s.is_empty()) {
        request["subResource"] = json!(subresource);
        request["requestSubResource"] = json!(subresource);
    }
    if let Some(namespace) = attributes.namespace.filter(|n| !n.is_empty()) {
        request["namespace"] = json!(namespace);
    }
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": request,
    })
}

/// The request's options with their type meta, as upstream encodes them.
fn options_object(attributes: &Attributes<'_>) -> Value {
    let mut options = match attributes.options {
        Value::Object(map) => Value::Object(map.clone()),
        _ => json!({}),
    };
    options["apiVersion"] = json!("meta.k8s.io/v1");
    options["kind"] = json!(attributes.operation.options_kind());
    options
}

/// Checks an answer as upstream's `VerifyAdmissionResponse` does.
fn verify(uid: &str, hook: &Hook, review: Value) -> Result<Answer, String> {
    let api_version = review
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = review
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let response = review
        .get("response")
        .filter(|r| r.is_object())
        .ok_or("webhook response was absent")?;
    let answered_uid = response
        .get("uid")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if answered_uid != uid {
        return Err(format!(
            "expected response.uid={uid:?}, got {answered_uid:?}"
        ));
    }
    if api_version != "admission.k8s.io/v1" || kind != "AdmissionReview" {
        let found = if api_version.is_empty() && kind.is_empty() {
            ", Kind=".to_string()
        } else {
            format!("{api_version}, Kind={kind}")
        };
        return Err(format!(
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {found}"
        ));
    }
    let patch_text = response
        .get("patch")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let patch_type = response.get("patchType").and_then(Value::as_str);
    let patch = match hook.hook_type {
        HookType::Validating => {
            if !patch_text.is_empty() {
                return Err("validating webhook may not return response.patch".into());
            }
            if patch_type.is_some() {
                return Err("validating webhook may not return response.patchType".into());
            }
            None
        }
        HookType::Mutating => match (patch_text.is_empty(), patch_type) {
            (true, None) => None,
            (false, None) => {
                return Err("webhook returned response.patch but not response.patchType".into());
            }
            (true, Some(_)) => {
                return Err("webhook returned response.patchType but not response.patch".into());
            }
            (false, Some("JSONPatch")) => {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(patch_text)
                    .map_err(|e| format!("response.patch is not base64: {e}"))?;
                Some(
                    serde_json::from_slice::<Value>(&bytes)
                        .map_err(|e| format!("response.patch is not a JSON patch: {e}"))?,
                )
            }
            (false, Some(other)) => {
                return Err(format!("unsupported patch type {other:?}"));
            }
        },
    };
    let warnings = response
        .get("warnings")
        .and_then(Value::as_array)
        .map(|w| {
            w.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let audit_annotations = response
        .get("auditAnnotations")
        .and_then(Value::as_object)
        .map(|annotations| {
            annotations
                .iter()
                .filter_map(|(key, value)| Some((key.clone(), value.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default();
    Ok(Answer {
        allowed: response
            .get("allowed")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        result: response.get("status").filter(|s| s.is_object()).cloned(),
        patch,
        seen: None,
        warnings,
        audit_annotations,
    })
}

/// Upstream's dispatchers add each of a webhook's `auditAnnotations` as `<webhook>/<key>`.
fn publish_audit_annotations(hook: &Hook, answer: &Answer) {
    for (key, value) in &answer.audit_annotations {
        super::audit_annotations::AuditAnnotations::add(
            format!("{}/{key}", hook.name),
            value.clone(),
        );
    }
}

/// Applies a mutating webhook's JSON patch to the object it was sent (`seen`, in the
/// invocation's version): the patched object, None when the patch is empty.
fn apply_patch(hook: &Hook, seen: Option<&Value>, patch: &Value) -> Result<Option<Value>, Failure> {
    if patch.as_array().is_some_and(Vec::is_empty) {
        return Ok(None);
    }
    let seen = seen.ok_or_else(|| {
        Failure::Internal(internal(format!(
            "admission webhook {:?} returned a patch for a request without an object",
            hook.name
        )))
    })?;
    crate::patch::apply_json_patch(seen, patch)
        .map(Some)
        .map_err(|e| {
            Failure::Internal(internal(format!(
                "admission webhook {:?} returned a patch that cannot be applied: {e}",
                hook.name
            )))
        })
}

/// Puts a patched object (back in the request's version) in place of `object`; true when
/// it changed.
fn settle(hook: &Hook, patched: Value, object: &mut Value) -> Result<bool, Failure> {
    if !patched.is_object() {
        return Err(Failure::Internal(internal(format!(
            "admission webhook {:?} patched the object into something that is not an object",
            hook.name
        ))));
    }
    let changed = patched != *object;
    *object = patched;
    Ok(changed)
}

/// Upstream's `ToStatusErr`: the webhook's `Status` with its message prefixed, a code below
/// 400 raised to 400.
fn denial(webhook: &str, result: Option<&Value>) -> ApiError {
    let denied_by = format!("admission webhook {webhook:?} denied the request");
    let text = |key: &str| {
        result
            .and_then(|r| r.get(key))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let (message, reason) = (text("message"), text("reason"));
    let message = if !message.is_empty() {
        format!("{denied_by}: {message}")
    } else if !reason.is_empty() {
        format!("{denied_by}: {reason}")
    } else {
        format!("{denied_by} without explanation")
    };
    let code = result
        .and_then(|r| r.get("code"))
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| (400..600).contains(c))
        .unwrap_or(400);
    let mut error = ApiError::new(code, static_reason(&reason), message);
    if let Some(details) = result
        .and_then(|r| r.get("details"))
        .filter(|d| d.is_object())
    {
        let field = |key: &str| {
            details
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let causes = details
            .get("causes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| Cause {
                reason: c
                    .get("reason")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .into(),
                message: c
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .into(),
                field: c
                    .get("field")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .into(),
            })
            .collect();
        error = error.with_details(Details {
            name: field("name"),
            group: field("group"),
            kind: field("kind"),
            uid: field("uid"),
            causes,
            ..Details::default()
        });
    }
    error
}

/// A `StatusReason` as the error type keeps it: the reasons Kubernetes defines, and the
/// empty reason for any other (docs/compatibility.md).
fn static_reason(reason: &str) -> &'static str {
    const KNOWN: [&str; 19] = [
        "Unauthorized",
        "Forbidden",
        "NotFound",
        "AlreadyExists",
        "Conflict",
        "Gone",
        "Invalid",
        "ServerTimeout",
        "StoreReadError",
        "Timeout",
        "TooManyRequests",
        "BadRequest",
        "MethodNotAllowed",
        "NotAcceptable",
        "RequestEntityTooLarge",
        "UnsupportedMediaType",
        "InternalError",
        "Expired",
        "ServiceUnavailable",
    ];
    KNOWN.iter().find(|k| **k == reason).copied().unwrap_or("")
}

/// Upstream's `NewInternalError`: 500, `Internal error occurred: …`, the cause repeated.
fn internal(message: impl Into<String>) -> ApiError {
    let message = message.into();
    ApiError::internal(format!("Internal error occurred: {message}")).with_details(Details {
        causes: vec![Cause {
            reason: String::new(),
            message,
            field: String::new(),
        }],
        ..Details::default()
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::admission::Operation;
    use crate::admission::config::{Endpoint, Rule};
    use crate::resources::Catalog;
    use crate::selectors::LabelSelector;

    fn hook(hook_type: HookType) -> Hook {
        Hook {
            hook_type,
            configuration: "c".into(),
            index: 0,
            name: "h.example.com".into(),
            endpoint: Endpoint::Url("https://127.0.0.1:1/".into()),
            ca_bundle: Vec::new(),
            rules: vec![Rule {
                operations: vec!["*".into()],
                groups: vec!["*".into()],
                versions: vec!["*".into()],
                resources: vec![("*".into(), None)],
                scope: "*".into(),
            }],
            exact: false,
            namespace_selector: Ok(LabelSelector::default()),
            object_selector: Ok(LabelSelector::default()),
            fail_open: false,
            timeout: Duration::from_secs(1),
            side_effects: SideEffects::None,
            speaks_v1: true,
            reinvoke_if_needed: false,
            match_conditions: None,
        }
    }

    #[test]
    fn a_denial_reads_as_upstreams() {
        let error = denial(
            "deny.example.com",
            Some(&json!({"code": 403, "reason": "Forbidden", "message": "no ConfigMaps here"})),
        );
        assert_eq!(error.code, 403);
        assert_eq!(error.reason, "Forbidden");
        assert_eq!(
            error.message,
            "admission webhook \"deny.example.com\" denied the request: no ConfigMaps here"
        );
        let bare = denial("deny.example.com", None);
        assert_eq!(bare.code, 400);
        assert_eq!(
            bare.message,
            "admission webhook \"deny.example.com\" denied the request without explanation"
        );
    }

    #[test]
    fn answers_are_checked_as_upstream_checks_them() {
        let validating = hook(HookType::Validating);
        let ok = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": "u", "allowed": true, "warnings": ["w"]}});
        let answer = verify("u", &validating, ok).unwrap_or_else(|e| panic!("{e}"));
        assert!(answer.allowed);
        assert_eq!(answer.warnings, vec!["w".to_string()]);
        let wrong_uid = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": "x", "allowed": true}});
        assert!(verify("u", &validating, wrong_uid).is_err());
        let patching = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": "u", "allowed": true, "patch": "W10=", "patchType": "JSONPatch"}});
        assert!(verify("u", &validating, patching.clone()).is_err());
        let answer =
            verify("u", &hook(HookType::Mutating), patching).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(answer.patch, Some(json!([])));
    }

    #[tokio::test]
    async fn a_dry_run_never_calls_a_webhook_with_side_effects() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store: std::sync::Arc<dyn finale_store::Store> =
            finale_store::RedbStore::open(dir.path(), finale_store::RedbStoreOptions::default())
                .expect("open");
        let catalog = std::sync::Arc::new(Catalog::with_builtins());
        let webhooks = Webhooks::new(store, std::sync::Arc::clone(&catalog));
        let configmaps = catalog.lookup("", "v1", "configmaps").expect("configmaps");
        let mut unsafe_hook = hook(HookType::Validating);
        unsafe_hook.side_effects = SideEffects::Unsafe;
        let options = json!({});
        let user = json!({"username": "u"});
        let attributes = Attributes {
            resource: &configmaps,
            subresource: None,
            operation: Operation::Create,
            namespace: Some("default"),
            name: "x",
            object: None,
            old_object: None,
            dry_run: true,
            options: &options,
            user: &user,
            kind_override: None,
        };
        // The endpoint is a closed port: reaching it would be a call failure (500), not the
        // dry-run refusal (400).
        let Err(Failure::Rejected(error)) = webhooks
            .call(&unsafe_hook, &attributes, &Invocation::Own)
            .await
        else {
            panic!("a dry run called a webhook with side effects");
        };
        assert_eq!(error.code, 400);
        assert_eq!(
            error.message,
            "admission webhook \"h.example.com\" does not support dry run"
        );
    }
}
