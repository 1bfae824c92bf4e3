//! authentication.k8s.io/v1: TokenRequest (what `kubectl create token` sends) and
//! TokenReview.

use k8s_pb::api::authentication::v1 as authentication;

use super::json::{Converted, convert};
use super::meta::object_meta;

pub(super) fn token_request(request: authentication::TokenRequest) -> Converted {
    convert!(request, authentication::TokenRequest {
        metadata => value_message("metadata", object_meta),
        spec => value_message("spec", token_request_spec),
        status => value_message("status", token_request_status),
    })
}

fn token_request_spec(spec: authentication::TokenRequestSpec) -> Converted {
    convert!(spec, authentication::TokenRequestSpec {
        audiences => always_scalars("audiences"),
        expiration_seconds => pointer("expirationSeconds"),
        bound_object_ref => pointer_message("boundObjectRef", bound_object_reference),
    })
}

fn bound_object_reference(reference: authentication::BoundObjectReference) -> Converted {
    convert!(reference, authentication::BoundObjectReference {
        kind => non_zero("kind"),
        api_version => non_zero("apiVersion"),
        name => non_zero("name"),
        u_id => non_zero("uid"),
    })
}

// Clients send the status as Go's zero value; the server replaces it with the token.
fn token_request_status(status: authentication::TokenRequestStatus) -> Converted {
    convert!(status, authentication::TokenRequestStatus {
        token => always("token"),
        expiration_timestamp => time("expirationTimestamp"),
    })
}

pub(super) fn token_review(review: authentication::TokenReview) -> Converted {
    convert!(review, authentication::TokenReview {
        metadata => value_message("metadata", object_meta),
        spec => value_message("spec", token_review_spec),
        status => value_message("status", token_review_status),
    })
}

fn token_review_spec(spec: authentication::TokenReviewSpec) -> Converted {
    convert!(spec, authentication::TokenReviewSpec {
        token => non_zero("token"),
        audiences => scalars("audiences"),
    })
}

fn token_review_status(status: authentication::TokenReviewStatus) -> Converted {
    convert!(status, authentication::TokenReviewStatus {
        authenticated => non_zero("authenticated"),
        user => reject("user"),
        audiences => scalars("audiences"),
        error => non_zero("error"),
    })
}
