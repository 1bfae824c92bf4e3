//! The access reviews of `authorization.k8s.io/v1`, answered from the same authorizer that
//! decides requests (nothing is stored):
//!
//! - `SelfSubjectAccessReview` (`kubectl auth can-i VERB RESOURCE`): may I?
//! - `SubjectAccessReview`: may this user, with these groups?
//! - `LocalSubjectAccessReview`: the same, confined to the namespace it is posted in;
//! - `SelfSubjectRulesReview` (`kubectl auth can-i --list`): what may I do in a namespace?

use serde_json::{Value, json};

use super::{Attributes, Authorizer, PolicyRule};
use crate::authn::Identity;
use crate::status::{ApiError, ApiResult};
use crate::validation::FieldError;

const GROUP: &str = "authorization.k8s.io";

/// Answers a review of `kind` posted by `requester` (in `namespace`, for the local form).
pub fn answer(
    authorizer: &Authorizer,
    requester: &Identity,
    kind: &str,
    namespace: Option<&str>,
    mut review: Value,
) -> ApiResult<Value> {
    if !review.is_object() {
        return Err(ApiError::bad_request(format!(
            "a {kind} must be a JSON object"
        )));
    }
    let spec = review.get("spec").cloned().unwrap_or_else(|| json!({}));
    let status = match kind {
        "SelfSubjectRulesReview" => rules_review(authorizer, requester, &spec),
        "SelfSubjectAccessReview" => {
            access_review(authorizer, requester.clone(), &spec, kind, None)?
        }
        "SubjectAccessReview" | "LocalSubjectAccessReview" => {
            let text = |key: &str| spec.get(key).and_then(Value::as_str).unwrap_or_default();
            let groups: Vec<String> = spec
                .get("groups")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|g| g.as_str().map(str::to_string))
                .collect();
            if text("user").is_empty() && groups.is_empty() {
                return Err(invalid(
                    kind,
                    FieldError::invalid(
                        "spec.user",
                        "",
                        "at least one of user or group must be specified",
                    ),
                ));
            }
            let subject = Identity {
                user: text("user").to_string(),
                uid: text("uid").to_string(),
                groups,
                extra: Default::default(),
            };
            let local =
                (kind == "LocalSubjectAccessReview").then_some(namespace.unwrap_or_default());
            access_review(authorizer, subject, &spec, kind, local)?
        }
        other => {
            return Err(ApiError::internal(format!("no review named {other}")));
        }
    };
    review["apiVersion"] = json!("authorization.k8s.io/v1");
    review["kind"] = json!(kind);
    if !review["metadata"].is_object() {
        review["metadata"] = json!({});
    }
    review["metadata"]["creationTimestamp"] = Value::Null;
    review["spec"] = spec;
    review["status"] = status;
    Ok(review)
}

fn invalid(kind: &str, error: FieldError) -> ApiError {
    ApiError::invalid(kind, GROUP, "", &[error])
}

fn access_review(
    authorizer: &Authorizer,
    subject: Identity,
    spec: &Value,
    kind: &str,
    local_namespace: Option<&str>,
) -> ApiResult<Value> {
    let resource = spec.get("resourceAttributes").filter(|v| v.is_object());
    let non_resource = spec.get("nonResourceAttributes").filter(|v| v.is_object());
    let text = |attributes: &Value, key: &str| {
        attributes
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let request = match (resource, non_resource) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                kind,
                FieldError::invalid_literal(
                    "spec.nonResourceAttributes",
                    "{...}",
                    "cannot be specified in combination with resourceAttributes",
                ),
            ));
        }
        (None, None) => {
            return Err(invalid(
                kind,
                FieldError::invalid_literal(
                    "spec.resourceAttributes",
                    "nil",
                    "exactly one of nonResourceAttributes or resourceAttributes must be specified",
                ),
            ));
        }
        (None, Some(_)) if local_namespace.is_some() => {
            return Err(invalid(
                kind,
                FieldError::invalid_literal(
                    "spec.nonResourceAttributes",
                    "{...}",
                    "disallowed on this kind of request",
                ),
            ));
        }
        (Some(attributes), None) => {
            let namespace = text(attributes, "namespace");
            if let Some(local) = local_namespace
                && namespace != local
            {
                return Err(ApiError::bad_request(format!(
                    "spec.resourceAttributes.namespace must match namespace: {local}"
                )));
            }
            Attributes {
                api_version: text(attributes, "version"),
                ..Attributes::resource(
                    subject,
                    &text(attributes, "verb"),
                    &text(attributes, "group"),
                    &text(attributes, "resource"),
                    &text(attributes, "subresource"),
                    &namespace,
                    &text(attributes, "name"),
                )
            }
        }
        (None, Some(attributes)) => Attributes::non_resource(
            subject,
            &text(attributes, "verb"),
            &text(attributes, "path"),
        ),
    };
    let decision = authorizer.authorize(&request);
    let mut status = json!({"allowed": decision.allowed});
    if !decision.reason.is_empty() {
        status["reason"] = json!(decision.reason);
    }
    Ok(status)
}

fn rules_review(authorizer: &Authorizer, requester: &Identity, spec: &Value) -> Value {
    let namespace = spec
        .get("namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let (rules, errors) = authorizer.rules_for(requester, namespace);
    let (urls, resources): (Vec<PolicyRule>, Vec<PolicyRule>) = rules
        .into_iter()
        .partition(|rule| !rule.non_resource_urls.is_empty());
    // A rule's JSON leaves out its empty lists: resource rules carry no `nonResourceURLs`,
    // URL rules no groups or resources, as upstream's ResourceRule and NonResourceRule.
    let mut status = json!({
        "resourceRules": resources,
        "nonResourceRules": urls,
        "incomplete": !errors.is_empty(),
    });
    if !errors.is_empty() {
        status["evaluationError"] = json!(format!("[{}]", errors.join(", ")));
    }
    status
}
