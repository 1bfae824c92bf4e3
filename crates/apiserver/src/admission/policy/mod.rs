//! ValidatingAdmissionPolicies (`admissionregistration.k8s.io/v1`), evaluated: each
//! `ValidatingAdmissionPolicyBinding` applies its policy's CEL validations to the requests
//! both match, as kube-apiserver 1.33 does (k8s.io/apiserver
//! `pkg/admission/plugin/policy/{validating,generic,matching}`).
//!
//! The registry's validating admission step ([`super::Webhooks::validate`]) calls
//! [`super::Webhooks::validate_policies`] before the validating webhooks (upstream's plugin
//! order), so HTTP requests and in-process controllers alike pass the policies. Policies and
//! bindings are read, compiled ([`compile`]) and cached with the webhook configurations,
//! invalidated by the same machinery; a policy is compiled once per stored version.
//!
//! # Guarantees
//! - A policy applies when its `matchConstraints` (resourceRules with resourceNames,
//!   excludeResourceRules, namespaceSelector, objectSelector, matchPolicy) and then a binding's
//!   `matchResources` (absent: everything) match the request; then, per param, its
//!   `matchConditions`, `validations` and `auditAnnotations` are evaluated ([`evaluate`]).
//! - Variables: `object`, `oldObject` (null on CREATE; `object` null on DELETE), `request` (the
//!   `AdmissionRequest` without objects, uid empty), `params`, `namespaceObject` (null for
//!   cluster-scoped requests), and `variables.NAME`, each evaluated once, on first use.
//! - A failed validation under the binding's `Deny` refuses the request with upstream's
//!   `Status`: `<resource> "<name>" is forbidden: ValidatingAdmissionPolicy '<policy>' with
//!   binding '<binding>' denied request: <message>`, the reason of the validation (default
//!   `Invalid`) and its code (Invalid 422, Forbidden 403, RequestEntityTooLarge 413,
//!   Unauthorized 401), the message repeated as the cause. The first denial, in policy-name
//!   then binding-name order, answers. `Warn` adds the `Warning` header
//!   `Validation failed for ValidatingAdmissionPolicy '<policy>' with binding '<binding>':
//!   <message>`; `Audit` adds the audit annotation
//!   `validation.policy.admission.k8s.io/validation_failure` (a JSON list of `message`,
//!   `policy`, `binding`, `expressionIndex`, `validationActions`) to the request's audit
//!   event, and each `auditAnnotations` value is added as `<policy>/<key>`, the distinct
//!   values of several bindings joined with `, ` ([`super::audit_annotations`]).
//! - Failures to evaluate follow `failurePolicy`: `Fail` (the default) makes them denials
//!   (reason Invalid); `Ignore` admits. Configuration errors deny under `Fail`: an unknown
//!   `paramKind` as `failed to configure policy: …`, a param that is missing under
//!   `parameterNotFoundAction: Deny` or a namespaced param for a cluster-scoped request as
//!   `failed to configure binding: …`.
//! - Policies never apply to the admission configuration kinds themselves.
//! - Writing a policy or binding refuses what upstream's validation refuses that can be
//!   checked without a type checker ([`compile::validate_policy`], [`compile::validate_binding`]).
//! - Metrics: `apiserver_validating_admission_policy_check_total` and
//!   `apiserver_validating_admission_policy_check_duration_seconds`, labelled `policy`,
//!   `policy_binding`, `enforcement_action` ([`super::metrics`]).
//!
//! # Assumptions
//! - Policies and bindings passed validation; a stored policy whose expression does not
//!   parse is a configuration error decided by its failure policy, not a server failure.
//! - Params are read from the store when a binding applies (no informer): a param written
//!   just before the request is seen by it.
//!
//! # Caveats
//! - No static type checking: expressions upstream refuses (or reports in
//!   `status.typeChecking`) for types fail when they run; `status.typeChecking` is never set.
//! - No CEL cost metering: upstream's per-expression and per-request cost limits are not
//!   enforced for policies.
//! - `authorizer` is not provided: an expression that reads it fails to evaluate.
//! - A variable is evaluated when an expression that names it runs, even where upstream's
//!   lazy evaluation would not reach it (`false && variables.x`): an error of such a
//!   variable fails the expression here.
//! - Objects are JSON maps to CEL: no per-kind types, so a field a kind does not have reads
//!   as `no such key` at run time rather than a compile error.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use finale_store::{RangeRequest, prefix_range};
use kube_cel::cel;
use serde_json::Value;

use super::audit_annotations::AuditAnnotations;
use super::dispatch::{NamespaceLabels, match_conditions_forbidden, review};
use super::matching::{self, Invocation};
use super::metrics::PolicyOutcome;
use super::{Attributes, Webhooks};
use crate::cel::plain_value;
use crate::resources::{Catalog, ResourceType};
use crate::status::{ApiError, ApiResult, Cause, Details};

pub mod compile;
pub mod evaluate;

use compile::{Binding, MatchResources, Policy};
pub use compile::{default_binding, default_policy, validate_binding, validate_policy};

/// Where the two kinds are stored.
pub(super) const POLICY_PREFIX: &str =
    "/registry/admissionregistration.k8s.io/validatingadmissionpolicies/";
pub(super) const BINDING_PREFIX: &str =
    "/registry/admissionregistration.k8s.io/validatingadmissionpolicybindings/";

/// A policy with the bindings that name it.
#[derive(Debug)]
pub(super) struct PolicyHook {
    pub policy: Arc<Policy>,
    pub bindings: Vec<Arc<Binding>>,
}

/// Compiled policies and bindings by store key, with the revision they were compiled from:
/// a reload recompiles only what changed.
#[derive(Debug, Default)]
pub(super) struct CompileCache {
    policies: HashMap<Vec<u8>, (finale_store::Revision, Arc<Policy>)>,
    bindings: HashMap<Vec<u8>, (finale_store::Revision, Arc<Binding>)>,
}

/// One denial: what the `Status` is built from.
struct Denial {
    policy: String,
    binding: Option<String>,
    message: String,
    reason: Option<String>,
}

impl Webhooks {
    /// Reads every policy and binding, compiling those that changed since the last read.
    pub(super) async fn load_policies(&self) -> ApiResult<Vec<PolicyHook>> {
        let read = |prefix: &'static str| async move {
            self.store
                .range(RangeRequest {
                    range: prefix_range(prefix.as_bytes()),
                    limit: 0,
                    revision: 0,
                })
                .await
        };
        let policies = read(POLICY_PREFIX).await?;
        let bindings = read(BINDING_PREFIX).await?;
        let decode = |kv: &finale_store::KeyValue| match serde_json::from_slice::<Value>(&kv.value)
        {
            Ok(object) => Some(object),
            Err(error) => {
                tracing::warn!(key = %String::from_utf8_lossy(&kv.key), %error, "skipping an admission policy object that is not valid JSON");
                None
            }
        };
        let mut cache = self
            .policy_cache
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut fresh = CompileCache::default();
        for kv in &policies.kvs {
            let compiled = match cache.policies.remove(&kv.key) {
                Some((revision, policy)) if revision == kv.mod_revision => policy,
                _ => match decode(kv) {
                    Some(object) => Arc::new(compile::compile_policy(&object)),
                    None => continue,
                },
            };
            fresh
                .policies
                .insert(kv.key.clone(), (kv.mod_revision, compiled));
        }
        for kv in &bindings.kvs {
            let compiled = match cache.bindings.remove(&kv.key) {
                Some((revision, binding)) if revision == kv.mod_revision => binding,
                _ => match decode(kv) {
                    Some(object) => Arc::new(compile::compile_binding(&object)),
                    None => continue,
                },
            };
            fresh
                .bindings
                .insert(kv.key.clone(), (kv.mod_revision, compiled));
        }
        let mut hooks: Vec<PolicyHook> = fresh
            .policies
            .values()
            .map(|(_, policy)| PolicyHook {
                policy: Arc::clone(policy),
                bindings: fresh
                    .bindings
                    .values()
                    .filter(|(_, b)| b.policy_name == policy.name)
                    .map(|(_, b)| Arc::clone(b))
                    .collect(),
            })
            .filter(|hook| !hook.bindings.is_empty())
            .collect();
        // Deterministic: the first denial in name order answers.
        hooks.sort_by(|a, b| a.policy.name.cmp(&b.policy.name));
        for hook in &mut hooks {
            hook.bindings.sort_by(|a, b| a.name.cmp(&b.name));
        }
        *cache = fresh;
        Ok(hooks)
    }

    /// Evaluates the policies that apply to the request; returns their warnings, or the
    /// first denial as upstream's `Status`.
    pub(super) async fn validate_policies(
        &self,
        policies: &[PolicyHook],
        attributes: &Attributes<'_>,
        namespace_labels: &mut NamespaceLabels,
    ) -> ApiResult<Vec<String>> {
        let mut warnings = Vec::new();
        let mut denials: Vec<Denial> = Vec::new();
        let mut namespace_object: Option<cel::Value> = None;
        for hook in policies {
            let policy = &hook.policy;
            let Some(constraints) = &policy.match_constraints else {
                continue;
            };
            let invocation = match self
                .policy_match(constraints, attributes, namespace_labels)
                .await
            {
                Ok(Some(invocation)) => invocation,
                Ok(None) => continue,
                Err(error) => {
                    configuration_error(policy, None, &error, &mut denials);
                    continue;
                }
            };
            if let Some(error) = &policy.configuration_error {
                configuration_error(policy, None, error, &mut denials);
                continue;
            }
            // A paramKind no served resource has (upstream resolves it when the policy is
            // loaded; Finale here, since CRDs come and go between reloads).
            if let Some((api_version, kind)) = &policy.param_kind
                && self.catalog.lookup_kind(api_version, kind).is_none()
            {
                let group_version = if api_version.contains('/') {
                    api_version.clone()
                } else {
                    format!("/{api_version}")
                };
                let error = format!(
                    "failed to find resource referenced by paramKind: '{group_version}, Kind={kind}'"
                );
                configuration_error(policy, None, &error, &mut denials);
                continue;
            }
            // The request as the policy sees it: converted to the matched resource (by the
            // CRD's conversion webhook where it has one).
            let (object, old_object) = self.invocation_objects(attributes, &invocation).await?;
            let request = review("", attributes, &invocation, object, old_object);
            let request = request.get("request").cloned().unwrap_or(Value::Null);
            let object = request
                .get("object")
                .map(plain_value)
                .unwrap_or(cel::Value::Null);
            let old_object = request
                .get("oldObject")
                .map(plain_value)
                .unwrap_or(cel::Value::Null);
            let mut request_only = request.clone();
            if let Some(map) = request_only.as_object_mut() {
                map.remove("object");
                map.remove("oldObject");
            }
            let request_value = plain_value(&request_only);
            // Upstream's `auditAnnotationCollector`, one per policy: a key several bindings
            // (or params) publish gets their distinct values, sorted and joined.
            let mut published: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
            for binding in &hook.bindings {
                if let Some(resources) = &binding.match_resources {
                    match self
                        .policy_match(resources, attributes, namespace_labels)
                        .await
                    {
                        Ok(Some(_)) => {}
                        Ok(None) => continue,
                        Err(error) => {
                            configuration_error(policy, Some(binding), &error, &mut denials);
                            continue;
                        }
                    }
                }
                let params = match self.collect_params(policy, binding, attributes).await {
                    Ok(params) => params,
                    Err(error) => {
                        configuration_error(policy, Some(binding), &error, &mut denials);
                        continue;
                    }
                };
                // Read once per request, and only for policies that read it.
                if namespace_object.is_none() && policy.uses_namespace_object {
                    namespace_object = Some(self.namespace_object(attributes).await?);
                }
                let namespace_value = namespace_object.clone().unwrap_or(cel::Value::Null);
                for param in params {
                    let started = Instant::now();
                    let inputs = evaluate::Inputs {
                        object: object.clone(),
                        old_object: old_object.clone(),
                        request: request_value.clone(),
                        params: param.as_ref().map_or(cel::Value::Null, plain_value),
                        namespace_object: namespace_value.clone(),
                    };
                    let Some(outcome) = evaluate::evaluate(policy, &inputs) else {
                        continue;
                    };
                    let elapsed = started.elapsed();
                    for decision in &outcome.decisions {
                        let observe = |action: PolicyOutcome| {
                            self.metrics.observe_policy(
                                &policy.name,
                                &binding.name,
                                action,
                                elapsed,
                            )
                        };
                        if !decision.deny {
                            if decision.error {
                                observe(PolicyOutcome::Allow);
                            }
                            continue;
                        }
                        if binding.actions.deny {
                            observe(PolicyOutcome::Deny);
                            denials.push(Denial {
                                policy: policy.name.clone(),
                                binding: Some(binding.name.clone()),
                                message: decision.message.clone(),
                                reason: decision.reason.clone(),
                            });
                        }
                        if binding.actions.audit {
                            observe(PolicyOutcome::Audit);
                            AuditAnnotations::add(
                                VALIDATION_FAILURE_ANNOTATION.to_string(),
                                validation_failure(binding, decision),
                            );
                        }
                        if binding.actions.warn {
                            observe(PolicyOutcome::Warn);
                            warnings.push(format!(
                                "Validation failed for ValidatingAdmissionPolicy '{}' with binding '{}': {}",
                                policy.name, binding.name, decision.message
                            ));
                        }
                    }
                    for annotation in outcome.annotations {
                        match annotation {
                            evaluate::Annotation::Publish { key, value } => {
                                published.entry(key).or_default().insert(value);
                            }
                            evaluate::Annotation::Error(message) => {
                                self.metrics.observe_policy(
                                    &policy.name,
                                    &binding.name,
                                    PolicyOutcome::Deny,
                                    elapsed,
                                );
                                denials.push(Denial {
                                    policy: policy.name.clone(),
                                    binding: Some(binding.name.clone()),
                                    message,
                                    reason: None,
                                });
                            }
                        }
                    }
                }
            }
            for (key, values) in published {
                let values: Vec<String> = values.into_iter().collect();
                AuditAnnotations::add(key, values.join(", "));
            }
        }
        match denials.into_iter().next() {
            Some(denial) => {
                let error = denied(attributes, &denial);
                super::refusals::note(
                    attributes,
                    &format!("ValidatingAdmissionPolicy '{}'", denial.policy),
                    &error.message,
                );
                Err(error)
            }
            None => Ok(warnings),
        }
    }

    /// Whether a match block applies to the request, and as which resource (upstream
    /// `matching.Matcher.Matches`): rules first, then the selectors, whose errors count only
    /// for a request the rules match. `Err` is a configuration error.
    async fn policy_match(
        &self,
        resources: &MatchResources,
        attributes: &Attributes<'_>,
        namespace_labels: &mut NamespaceLabels,
    ) -> Result<Option<Invocation>, String> {
        if named_rules_match(
            &resources.exclude_rules,
            resources.exact,
            attributes,
            &self.catalog,
        )
        .is_some()
        {
            return Ok(None);
        }
        let invocation = if resources.resource_rules.is_empty() {
            Invocation::Own
        } else {
            match named_rules_match(
                &resources.resource_rules,
                resources.exact,
                attributes,
                &self.catalog,
            ) {
                Some(invocation) => invocation,
                None => return Ok(None),
            }
        };
        if matching::selector_needs_namespace_labels(&resources.namespace_selector, attributes) {
            let selector = resources
                .namespace_selector
                .as_ref()
                .map_err(Clone::clone)?;
            let labels = match matching::own_namespace_labels(attributes) {
                Some(own) => own.unwrap_or_default(),
                None => {
                    if namespace_labels.is_none() {
                        let name = attributes.namespace.unwrap_or_default();
                        *namespace_labels = Some(
                            self.namespace_labels(name)
                                .await
                                .map_err(|error| error.message)?,
                        );
                    }
                    namespace_labels.clone().unwrap_or_default()
                }
            };
            if !selector.matches(Some(&labels)) {
                return Ok(None);
            }
        }
        if !matching::selector_matches_objects(&resources.object_selector, attributes)? {
            return Ok(None);
        }
        Ok(Some(invocation))
    }

    /// The params a binding evaluates its policy with (upstream `collectParams`): `[None]`
    /// without `paramKind` or `paramRef`; `Err` is a configuration error.
    async fn collect_params(
        &self,
        policy: &Policy,
        binding: &Binding,
        attributes: &Attributes<'_>,
    ) -> Result<Vec<Option<Value>>, String> {
        let (Some((api_version, kind)), Some(param_ref)) = (&policy.param_kind, &binding.param_ref)
        else {
            return Ok(vec![None]);
        };
        let resource = self
            .catalog
            .lookup_kind(api_version, kind)
            .ok_or_else(|| format!("paramKind kind `{api_version}, Kind={kind}` not known"))?;
        let namespace = if resource.namespaced {
            let request_namespace = attributes
                .namespace
                .filter(|n| !n.is_empty() && !attributes.resource.is_namespace());
            match (&param_ref.namespace, request_namespace) {
                (Some(namespace), _) => Some(namespace.clone()),
                (None, Some(namespace)) => Some(namespace.to_string()),
                (None, None) => {
                    return Err("cannot use namespaced paramRef in policy binding that matches cluster-scoped resources".into());
                }
            }
        } else {
            if param_ref.namespace.is_some() {
                return Err(
                    "paramRef.namespace must not be provided for a cluster-scoped `paramKind`"
                        .into(),
                );
            }
            None
        };
        let params: Vec<Value> = match (&param_ref.name, &param_ref.selector) {
            (Some(name), _) => self
                .read_param(&resource, namespace.as_deref(), name)
                .await?
                .into_iter()
                .collect(),
            (None, Some(selector)) => {
                let selector = selector.as_ref().map_err(Clone::clone)?;
                self.list_params(&resource, namespace.as_deref())
                    .await?
                    .into_iter()
                    .filter(|param| selector.matches(crate::object::labels(param)))
                    .collect()
            }
            (None, None) => return Err("one of name or selector must be provided".into()),
        };
        let params: Vec<Option<Value>> = params.into_iter().map(Some).collect();
        if params.is_empty() && param_ref.deny_if_missing {
            return Err(
                "no params found for policy binding with `Deny` parameterNotFoundAction".into(),
            );
        }
        Ok(params)
    }

    async fn read_param(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Value>, String> {
        let key = resource.object_key(namespace, name);
        let (kv, _) = self
            .store
            .get(key.as_bytes())
            .await
            .map_err(|e| format!("cannot read param {name:?}: {e}"))?;
        let Some(kv) = kv else { return Ok(None) };
        serde_json::from_slice::<Value>(&kv.value)
            .map(|object| Some(with_type_meta(resource, object)))
            .map_err(|e| format!("stored param {name:?} is not JSON: {e}"))
    }

    async fn list_params(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
    ) -> Result<Vec<Value>, String> {
        let prefix = resource.collection_prefix(namespace);
        let response = self
            .store
            .range(RangeRequest {
                range: prefix_range(prefix.as_bytes()),
                limit: 0,
                revision: 0,
            })
            .await
            .map_err(|e| format!("cannot list params: {e}"))?;
        Ok(response
            .kvs
            .iter()
            .filter_map(|kv| serde_json::from_slice::<Value>(&kv.value).ok())
            .map(|object| with_type_meta(resource, object))
            .collect())
    }

    /// `namespaceObject`: the request's Namespace, null for cluster-scoped requests (and for
    /// Namespaces themselves, as upstream).
    async fn namespace_object(&self, attributes: &Attributes<'_>) -> ApiResult<cel::Value> {
        let Some(name) = attributes
            .namespace
            .filter(|n| !n.is_empty() && !attributes.resource.is_namespace())
        else {
            return Ok(cel::Value::Null);
        };
        let key = format!("/registry/core/namespaces/{name}");
        let (kv, _) = self.store.get(key.as_bytes()).await?;
        let kv = kv.ok_or_else(|| ApiError::namespace_not_found(name))?;
        let namespace: Value = serde_json::from_slice(&kv.value)
            .map_err(|e| ApiError::internal(format!("stored namespace {name} is not JSON: {e}")))?;
        Ok(plain_value(&namespace))
    }
}

/// A param as served: in the resource's served form with its type meta.
fn with_type_meta(resource: &ResourceType, object: Value) -> Value {
    let mut object = resource.from_storage(object);
    if let Some(map) = object.as_object_mut() {
        map.insert("apiVersion".into(), Value::from(resource.api_version()));
        map.insert("kind".into(), Value::from(resource.kind.clone()));
    }
    object
}

/// The resource a list of named rules matches the request as (upstream
/// `matchesResourceRules`): the request's own resource when a rule (and its resourceNames)
/// names it, else under `Equivalent` an equivalent resource a rule names.
fn named_rules_match(
    rules: &[compile::NamedRule],
    exact: bool,
    attributes: &Attributes<'_>,
    catalog: &Catalog,
) -> Option<Invocation> {
    let own = attributes.resource;
    let names_match =
        |names: &[String]| names.is_empty() || names.iter().any(|n| n == attributes.name);
    if rules
        .iter()
        .any(|r| matching::rule_matches(&r.rule, attributes, own) && names_match(&r.names))
    {
        return Some(Invocation::Own);
    }
    if exact || rules.is_empty() {
        return None;
    }
    let equivalents = matching::equivalent_resources(own, catalog);
    for rule in rules {
        for equivalent in &equivalents {
            // Upstream does not check resourceNames against an equivalent match.
            if matching::rule_matches(&rule.rule, attributes, equivalent) {
                return Some(Invocation::Equivalent(Arc::clone(equivalent)));
            }
        }
    }
    None
}

/// The audit annotation upstream adds for each failure a binding with the `Audit` action
/// meets.
const VALIDATION_FAILURE_ANNOTATION: &str = "validation.policy.admission.k8s.io/validation_failure";

/// Its value: a one-element JSON list (upstream's `ValidationFailureValue`, fields in its
/// order), encoded as Go's `json.Marshal` does, HTML characters escaped.
fn validation_failure(binding: &compile::Binding, decision: &evaluate::Decision) -> String {
    let value = serde_json::json!([{
        "message": decision.message,
        "policy": binding.policy_name,
        "binding": binding.name,
        "expressionIndex": decision.index,
        "validationActions": binding.validation_actions,
    }]);
    go_json_escape(&value.to_string())
}

/// `json.Marshal` escapes `<`, `>` and `&` (and U+2028, U+2029) inside strings; serde_json
/// does not. They only occur inside strings, so a plain replacement is exact.
fn go_json_escape(json: &str) -> String {
    json.replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

/// Under `failurePolicy: Fail`, a configuration error is a denial (upstream `addConfigError`).
fn configuration_error(
    policy: &Policy,
    binding: Option<&Arc<Binding>>,
    error: &str,
    denials: &mut Vec<Denial>,
) {
    tracing::warn!(policy = %policy.name, binding = binding.map(|b| b.name.as_str()), %error, "admission policy configuration error");
    if policy.fail_open {
        return;
    }
    let what = if binding.is_some() {
        "binding"
    } else {
        "policy"
    };
    denials.push(Denial {
        policy: policy.name.clone(),
        binding: binding.map(|b| b.name.clone()),
        message: format!("failed to configure {what}: {error}"),
        reason: None,
    });
}

/// Upstream's `Status` for a denial: `admission.NewForbidden`'s message and details, the
/// reason and code of the denial, and the policy's message as a cause.
fn denied(attributes: &Attributes<'_>, denial: &Denial) -> ApiError {
    let message = match &denial.binding {
        Some(binding) => format!(
            "ValidatingAdmissionPolicy '{}' with binding '{binding}' denied request: {}",
            denial.policy, denial.message
        ),
        None => format!(
            "ValidatingAdmissionPolicy '{}' denied request: {}",
            denial.policy, denial.message
        ),
    };
    let forbidden = match_conditions_forbidden(attributes, &message);
    let (code, reason) = match denial.reason.as_deref() {
        Some("Forbidden") => (403, "Forbidden"),
        Some("Unauthorized") => (401, "Unauthorized"),
        Some("RequestEntityTooLarge") => (413, "RequestEntityTooLarge"),
        // Invalid, absent, and anything validation would have refused.
        _ => (422, "Invalid"),
    };
    let details = forbidden.details.map(|d| *d).unwrap_or_default();
    ApiError::new(code, reason, forbidden.message).with_details(Details {
        causes: vec![Cause {
            reason: String::new(),
            message,
            field: String::new(),
        }],
        ..details
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::admission::Operation;

    fn rules(value: Value) -> Vec<compile::NamedRule> {
        let policy = compile::compile_policy(&json!({
            "metadata": {"name": "p"},
            "spec": {"matchConstraints": {"resourceRules": value}, "validations": [{"expression": "true"}]},
        }));
        policy
            .match_constraints
            .map(|m| m.resource_rules)
            .unwrap_or_default()
    }

    fn attributes<'a>(resource: &'a ResourceType, name: &'a str) -> Attributes<'a> {
        Attributes {
            resource,
            subresource: None,
            operation: Operation::Create,
            namespace: Some("default"),
            name,
            object: None,
            old_object: None,
            dry_run: false,
            options: &Value::Null,
            user: &Value::Null,
            kind_override: None,
        }
    }

    #[test]
    fn named_rules_check_resource_names_and_equivalents() {
        let catalog = Catalog::with_builtins();
        let configmaps = catalog.lookup("", "v1", "configmaps").expect("configmaps");
        let named = rules(
            json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
            "resources": ["configmaps"], "resourceNames": ["checked"]}]),
        );
        assert!(
            named_rules_match(&named, false, &attributes(&configmaps, "checked"), &catalog)
                .is_some()
        );
        assert!(
            named_rules_match(&named, false, &attributes(&configmaps, "other"), &catalog).is_none()
        );
        let events = catalog.lookup("", "v1", "events").expect("core events");
        let new_events = rules(
            json!([{"apiGroups": ["events.k8s.io"], "apiVersions": ["v1"],
            "operations": ["*"], "resources": ["events"]}]),
        );
        assert!(matches!(
            named_rules_match(&new_events, false, &attributes(&events, "e"), &catalog),
            Some(Invocation::Equivalent(_))
        ));
        assert!(
            named_rules_match(&new_events, true, &attributes(&events, "e"), &catalog).is_none()
        );
    }

    #[test]
    fn a_denial_is_upstreams_status() {
        let catalog = Catalog::with_builtins();
        let deployments = catalog
            .lookup("apps", "v1", "deployments")
            .expect("deployments");
        let denial = |reason: Option<&str>| Denial {
            policy: "p".into(),
            binding: Some("b".into()),
            message: "too many".into(),
            reason: reason.map(str::to_string),
        };
        let error = denied(&attributes(&deployments, "web"), &denial(None));
        assert_eq!((error.code, error.reason), (422, "Invalid"));
        assert_eq!(
            error.message,
            "deployments.apps \"web\" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied request: too many"
        );
        let details = error.details.expect("details");
        assert_eq!(details.kind, "deployments");
        assert_eq!(details.group, "apps");
        assert_eq!(
            details.causes[0].message,
            "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: too many"
        );
        for (reason, code) in [
            ("Forbidden", 403),
            ("Unauthorized", 401),
            ("RequestEntityTooLarge", 413),
            ("Invalid", 422),
        ] {
            assert_eq!(
                denied(&attributes(&deployments, "web"), &denial(Some(reason))).code,
                code
            );
        }
    }
}
