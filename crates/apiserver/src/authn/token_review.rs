//! `TokenReview` (`authentication.k8s.io/v1`): who a bearer token stands for, asked by a
//! service that was handed one (a webhook, an aggregated server). Answered with the chain of
//! token authenticators requests go through, for the audiences the review names (the API
//! server's own when it names none).
//!
//! As upstream, the static tokens (`--token-auth-file`, the admin token) are not tied to an
//! audience: they are valid for the API server's audiences only, so a review for another
//! audience does not authenticate them.

use serde_json::{Value, json};

use super::{Authenticator, Identity};
use crate::status::{ApiError, ApiResult};

/// Answers a posted `TokenReview` in its `status`.
pub async fn answer(authenticator: &Authenticator, mut review: Value) -> ApiResult<Value> {
    if let Some(namespace) = review
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .filter(|ns| !ns.is_empty())
    {
        return Err(ApiError::bad_request(format!(
            "namespace is not allowed on this type: {namespace}"
        )));
    }
    let token = review
        .pointer("/spec/token")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if token.is_empty() {
        return Err(ApiError::bad_request(
            "token is required for TokenReview in authentication",
        ));
    }
    let requested = crate::object::string_list(review.pointer("/spec/audiences"));
    let api_audiences: Vec<String> = authenticator
        .service_accounts
        .as_ref()
        .map(|sa| sa.api_audiences().to_vec())
        .unwrap_or_default();
    let audiences = if requested.is_empty() {
        api_audiences.clone()
    } else {
        requested.clone()
    };
    let outcome = authenticate(authenticator, &token, &audiences, &api_audiences).await;
    let status = match outcome {
        Ok((identity, shared)) => {
            let mut status = json!({
                "authenticated": true,
                "user": identity.user_info(),
            });
            // Upstream reports audiences only when the review asked for some.
            if !requested.is_empty() {
                status["audiences"] = json!(shared);
            }
            status
        }
        Err(error) => json!({"user": {}, "error": error}),
    };
    review["apiVersion"] = json!("authentication.k8s.io/v1");
    review["kind"] = json!("TokenReview");
    if !review["metadata"].is_object() {
        review["metadata"] = json!({});
    }
    review["metadata"]["creationTimestamp"] = Value::Null;
    review["status"] = status;
    Ok(review)
}

async fn authenticate(
    authenticator: &Authenticator,
    token: &str,
    audiences: &[String],
    api_audiences: &[String],
) -> Result<(Identity, Vec<String>), String> {
    if let Ok(identity) = authenticator.tokens.lookup(token) {
        let shared: Vec<String> = audiences
            .iter()
            .filter(|a| api_audiences.contains(a))
            .cloned()
            .collect();
        if shared.is_empty() {
            return Err(format!(
                "token audiences {api_audiences:?} is invalid for the target audiences \
                 {audiences:?}"
            ));
        }
        return Ok((identity, shared));
    }
    let Some(service_accounts) = &authenticator.service_accounts else {
        return Err(super::AuthError::InvalidToken.to_string());
    };
    match service_accounts.authenticate(token, audiences).await {
        Ok(Some(found)) => Ok(found),
        Ok(None) => Err(
            "invalid bearer token: it is neither a token of this server's token \
                         file nor a service-account token it issued"
                .to_string(),
        ),
        Err(error) => Err(error.to_string()),
    }
}
