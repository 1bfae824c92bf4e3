//! certificates.k8s.io/v1: CertificateSigningRequest, which `kubectl certificate approve`
//! and `deny` send back to `/approval` in protobuf.

use k8s_pb::api::certificates::v1 as certificates;
use serde_json::Value;

use super::json::{Converted, convert};
use super::meta::object_meta;

pub(super) fn certificate_signing_request(
    request: certificates::CertificateSigningRequest,
) -> Converted {
    convert!(request, certificates::CertificateSigningRequest {
        metadata => value_message("metadata", object_meta),
        spec => value_message("spec", spec),
        status => value_message("status", status),
    })
}

fn spec(spec: certificates::CertificateSigningRequestSpec) -> Converted {
    convert!(spec, certificates::CertificateSigningRequestSpec {
        request => bytes("request"),
        signer_name => non_zero("signerName"),
        expiration_seconds => pointer("expirationSeconds"),
        usages => scalars("usages"),
        username => non_zero("username"),
        uid => non_zero("uid"),
        groups => scalars("groups"),
        extra => value_map("extra", extra_value),
    })
}

/// An `ExtraValue` is a `[]string` in JSON.
fn extra_value(value: certificates::ExtraValue) -> Value {
    let certificates::ExtraValue { items } = value;
    Value::Array(items.into_iter().map(Value::String).collect())
}

fn status(status: certificates::CertificateSigningRequestStatus) -> Converted {
    convert!(status, certificates::CertificateSigningRequestStatus {
        conditions => list("conditions", condition),
        certificate => bytes("certificate"),
    })
}

fn condition(condition: certificates::CertificateSigningRequestCondition) -> Converted {
    convert!(condition, certificates::CertificateSigningRequestCondition {
        r#type => non_zero("type"),
        status => non_zero("status"),
        reason => non_zero("reason"),
        message => non_zero("message"),
        last_update_time => time("lastUpdateTime"),
        last_transition_time => time("lastTransitionTime"),
    })
}
