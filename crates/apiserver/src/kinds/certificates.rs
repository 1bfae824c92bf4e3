//! `certificates.k8s.io/v1` CertificateSigningRequest: upstream's strategy and validation
//! (`pkg/registry/certificates/certificates/strategy.go`,
//! `pkg/apis/certificates/validation`), as the hooks `resources.rs` names for the kind.
//!
//! - Create: the requester (`spec.username`, `uid`, `groups`, `extra`) is the authenticated
//!   user, whatever the body says, and `status` starts empty, so nobody creates a request
//!   already approved. A `kubernetes.io/kube-apiserver-client` request for the
//!   `system:masters` group is refused, as the default `CertificateSubjectRestriction`
//!   admission plugin refuses it.
//! - Updates never change `spec`. The main resource changes metadata only; `/status` changes
//!   the status but keeps the Approved and Denied conditions as stored (adding one there is
//!   forbidden); `/approval` changes `status.conditions` only. Conditions get their
//!   timestamps filled in on every route.
//! - Validation: `spec.request` is a PEM `CERTIFICATE REQUEST` whose signature checks,
//!   `signerName` is qualified, `usages` known and unique, `expirationSeconds` ≥ 600;
//!   conditions have a type and status (Approved, Denied and Failed only `True`), Approved
//!   and Denied exclude each other, none is removed once set; `status.certificate` holds
//!   only CERTIFICATE PEM blocks and, once set, never changes.

use base64::Engine as _;
use serde_json::{Value, json};
use x509_parser::prelude::FromDer as _;

use crate::registry::{Actor, Subresource};
use crate::status::{ApiError, ApiResult, Target};
use crate::validation::{self, FieldError};

pub const GROUP: &str = "certificates.k8s.io";
pub const PLURAL: &str = "certificatesigningrequests";

/// The signer whose certificates the API server itself accepts from clients; the server
/// signs its approved requests with the cluster CA (`controllers/certificates/signing.rs`).
pub const KUBE_APISERVER_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client";
/// The signer of client certificates for kubelets (`system:node:<name>` in `system:nodes`).
pub const KUBE_APISERVER_CLIENT_KUBELET_SIGNER: &str =
    "kubernetes.io/kube-apiserver-client-kubelet";
/// The signer of kubelets' serving certificates.
pub const KUBELET_SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";

/// The signer name v1 refuses (kept by v1beta1 for objects created before signers existed).
const LEGACY_UNKNOWN_SIGNER: &str = "kubernetes.io/legacy-unknown";

/// Condition types that may only be `True` when present.
const TRUE_ONLY_CONDITIONS: [&str; 3] = ["Approved", "Denied", "Failed"];

/// Upstream's key usages, in the sorted order its `Unsupported value` messages list them.
const KEY_USAGES: [&str; 23] = [
    "any",
    "cert sign",
    "client auth",
    "code signing",
    "content commitment",
    "crl sign",
    "data encipherment",
    "decipher only",
    "digital signature",
    "email protection",
    "encipher only",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "key agreement",
    "key encipherment",
    "microsoft sgc",
    "netscape sgc",
    "ocsp signing",
    "s/mime",
    "server auth",
    "signing",
    "timestamping",
];

/// The shortest validity a request may ask for.
const MIN_EXPIRATION_SECONDS: i64 = 600;

/// PrepareForCreate: the requester from the request's identity, an empty status.
pub fn prepare_create(object: &mut Value, actor: Option<&Actor>) -> ApiResult<()> {
    let Some(map) = object.as_object_mut() else {
        return Ok(());
    };
    let spec = map.entry("spec").or_insert_with(|| json!({}));
    if let Some(spec) = spec.as_object_mut() {
        for field in ["username", "uid", "groups", "extra"] {
            spec.remove(field);
        }
        if let Some(actor) = actor {
            if !actor.user.is_empty() {
                spec.insert("username".into(), json!(actor.user));
            }
            if !actor.uid.is_empty() {
                spec.insert("uid".into(), json!(actor.uid));
            }
            if !actor.groups.is_empty() {
                spec.insert("groups".into(), json!(actor.groups));
            }
            if !actor.extra.is_empty() {
                spec.insert("extra".into(), json!(actor.extra));
            }
        }
    }
    map.insert("status".into(), json!({}));
    refuse_masters_client_certificate(object)
}

/// `CertificateSubjectRestriction`: a client certificate for `system:masters` would make
/// its holder an unrestricted admin that RBAC cannot take back.
fn refuse_masters_client_certificate(object: &Value) -> ApiResult<()> {
    if signer_name(object) != KUBE_APISERVER_CLIENT_SIGNER {
        return Ok(());
    }
    // A request that does not parse is refused by validation, with its reason.
    let Ok(der) = request_der(object) else {
        return Ok(());
    };
    let Ok((_, csr)) = x509_parser::certification_request::X509CertificationRequest::from_der(&der)
    else {
        return Ok(());
    };
    let masters = csr
        .certification_request_info
        .subject
        .iter_organization()
        .any(|o| o.as_str().is_ok_and(|o| o == "system:masters"));
    if masters {
        return Err(ApiError::forbidden_on(
            Target {
                group: GROUP,
                resource: PLURAL,
                name: crate::object::name(object),
            },
            &format!(
                "use of {KUBE_APISERVER_CLIENT_SIGNER} signer with system:masters group is not allowed"
            ),
        ));
    }
    Ok(())
}

/// PrepareForUpdate of the main resource, `/status` and `/approval` (see the module doc).
pub fn prepare_update(
    subresource: Subresource,
    current: &Value,
    next: &mut Value,
) -> Vec<FieldError> {
    let mut refused = Vec::new();
    match current.get("spec") {
        Some(spec) => next["spec"] = spec.clone(),
        None => {
            if let Some(map) = next.as_object_mut() {
                map.remove("spec");
            }
        }
    }
    let stored_status = current.get("status").cloned().unwrap_or_else(|| json!({}));
    match subresource {
        Subresource::Approval => {
            let conditions = next.pointer("/status/conditions").cloned();
            let mut status = stored_status;
            match (conditions, status.as_object_mut()) {
                (Some(conditions), Some(map)) => {
                    map.insert("conditions".into(), conditions);
                }
                (None, Some(map)) => {
                    map.remove("conditions");
                }
                _ => {}
            }
            next["status"] = status;
        }
        Subresource::Status => {
            for kind in ["Approved", "Denied"] {
                let stored = conditions_of(current, kind);
                let indices: Vec<usize> = crate::object::status_conditions(next)
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| condition_type(c) == kind)
                    .map(|(i, _)| i)
                    .collect();
                if indices.len() == stored.len() {
                    // What was decided stays as it was decided, timestamps included.
                    if let Some(list) = next
                        .pointer_mut("/status/conditions")
                        .and_then(Value::as_array_mut)
                    {
                        for (index, old) in indices.into_iter().zip(stored) {
                            list[index] = old;
                        }
                    }
                } else if indices.len() > stored.len() {
                    refused.push(FieldError::forbidden(
                        "status.conditions",
                        &format!("updates may not add a condition of type {kind:?}"),
                    ));
                }
            }
        }
        // The main resource: the generic rules kept the stored status already.
        _ => {}
    }
    fill_condition_timestamps(next, current);
    refused
}

/// Conditions without `lastUpdateTime` get the time of this write; without
/// `lastTransitionTime`, the stored one of a condition of the same type and status, or now.
fn fill_condition_timestamps(next: &mut Value, current: &Value) {
    let stored = crate::object::status_conditions(current).to_vec();
    let now = crate::object::now();
    let Some(list) = next
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for condition in list.iter_mut().filter_map(Value::as_object_mut) {
        if condition
            .get("lastUpdateTime")
            .is_none_or(|t| t.is_null() || t.as_str() == Some(""))
        {
            condition.insert("lastUpdateTime".into(), json!(now));
        }
        if condition
            .get("lastTransitionTime")
            .is_none_or(|t| t.is_null() || t.as_str() == Some(""))
        {
            let kind = condition.get("type").and_then(Value::as_str);
            let status = condition.get("status").and_then(Value::as_str);
            let kept = stored
                .iter()
                .find(|old| {
                    old.get("type").and_then(Value::as_str) == kind
                        && old.get("status").and_then(Value::as_str) == status
                        && old
                            .get("lastTransitionTime")
                            .and_then(Value::as_str)
                            .is_some_and(|t| !t.is_empty())
                })
                .and_then(|old| old.get("lastTransitionTime").cloned());
            condition.insert(
                "lastTransitionTime".into(),
                kept.unwrap_or_else(|| json!(now)),
            );
        }
    }
}

/// Validation of a create (`old` None) or of an update through any route.
pub fn validate(object: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if let Err(why) = request_der(object).and_then(|der| check_request(&der)) {
        errors.push(FieldError::invalid_literal(
            "spec.request",
            go_bytes(request_bytes(object).as_deref()),
            &why,
        ));
    }
    let usages: Vec<&str> = object
        .pointer("/spec/usages")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .map(|u| u.as_str().unwrap_or_default())
                .collect()
        })
        .unwrap_or_default();
    // Requests stored before a rule existed keep what they have (upstream's compatibility
    // options): only a request whose stored form passed is held to the rule.
    let old_usages: Vec<&str> = old
        .and_then(|o| o.pointer("/spec/usages"))
        .and_then(Value::as_array)
        .map(|list| list.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if usages.is_empty() {
        errors.push(FieldError::required("spec.usages", ""));
    }
    let allow_unknown = old_usages.iter().any(|u| !KEY_USAGES.contains(u));
    let mut seen = std::collections::HashSet::new();
    for (index, usage) in usages.iter().enumerate() {
        let field = format!("spec.usages[{index}]");
        if !allow_unknown && !KEY_USAGES.contains(usage) {
            errors.push(FieldError::not_supported(&field, *usage, &KEY_USAGES));
        }
        if !seen.insert(*usage) {
            errors.push(FieldError::duplicate(&field, *usage));
        }
    }
    let signer = signer_name(object);
    if signer == LEGACY_UNKNOWN_SIGNER && old.is_none_or(|o| signer_name(o) != signer) {
        errors.push(FieldError::invalid(
            "spec.signerName",
            signer,
            "the legacy signerName is not allowed via this API version",
        ));
    } else if signer != LEGACY_UNKNOWN_SIGNER {
        errors.extend(validate_signer_name("spec.signerName", signer));
    }
    if let Some(seconds) = object
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64)
        && seconds < MIN_EXPIRATION_SECONDS
    {
        errors.push(FieldError::invalid_literal(
            "spec.expirationSeconds",
            seconds.to_string(),
            "may not specify a duration less than 600 seconds (10 minutes)",
        ));
    }
    errors.extend(validate_conditions(object));
    let certificate = object
        .pointer("/status/certificate")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let old_certificate = old
        .and_then(|o| o.pointer("/status/certificate"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    if old.is_none() || certificate != old_certificate {
        if let Err(why) = check_certificate(certificate) {
            errors.push(FieldError::invalid(
                "status.certificate",
                "<certificate data>",
                &why,
            ));
        }
        if !old_certificate.is_empty() {
            errors.push(FieldError::forbidden(
                "status.certificate",
                "updates may not modify existing certificate content",
            ));
        }
    }
    if let Some(old) = old {
        for kind in TRUE_ONLY_CONDITIONS {
            if conditions_of(object, kind).len() < conditions_of(old, kind).len() {
                errors.push(FieldError::forbidden(
                    "status.conditions",
                    &format!("updates may not remove a condition of type {kind:?}"),
                ));
            }
        }
    }
    errors
}

fn validate_conditions(object: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let (mut approved, mut denied) = (false, false);
    for (index, condition) in crate::object::status_conditions(object).iter().enumerate() {
        let kind = condition_type(condition);
        if kind.is_empty() {
            errors.push(FieldError::required(
                &format!("status.conditions[{index}].type"),
                "",
            ));
        }
        let status = condition
            .get("status")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let allowed: &[&str] = if TRUE_ONLY_CONDITIONS.contains(&kind) {
            &["True"]
        } else {
            &["False", "True", "Unknown"]
        };
        let status_field = format!("status.conditions[{index}].status");
        if status.is_empty() {
            errors.push(FieldError::required(&status_field, ""));
        } else if !allowed.contains(&status) {
            errors.push(FieldError::not_supported(&status_field, status, allowed));
        }
        let type_field = format!("status.conditions[{index}].type");
        let exclusive = match kind {
            "Approved" => {
                approved = true;
                denied
            }
            "Denied" => {
                denied = true;
                approved
            }
            _ => false,
        };
        if exclusive {
            errors.push(FieldError::invalid(
                &type_field,
                kind,
                "Approved and Denied conditions are mutually exclusive",
            ));
        }
        if !seen.insert(kind) {
            errors.push(FieldError::duplicate(&type_field, kind));
        }
    }
    errors
}

/// Upstream's `ValidateSignerName`: `<domain>/<path>`, the domain at least two DNS labels.
fn validate_signer_name(field: &str, signer: &str) -> Vec<FieldError> {
    if signer.is_empty() {
        return vec![FieldError::required(field, "")];
    }
    let Some((domain, path)) = signer.split_once('/').filter(|(_, p)| !p.contains('/')) else {
        return vec![FieldError::invalid(
            field,
            signer,
            "must be a fully qualified domain and path of the form 'example.com/signer-name'",
        )];
    };
    let mut errors = Vec::new();
    if domain.len() > 253 {
        errors.push(FieldError::too_long(field, domain, 253));
    }
    let labels: Vec<&str> = domain.split('.').collect();
    if let Some((label, problems)) = labels
        .iter()
        .map(|label| (label, validation::is_dns1123_label(label)))
        .find(|(_, problems)| !problems.is_empty())
    {
        for problem in problems {
            errors.push(FieldError::invalid(
                field,
                domain,
                &format!("validating label {label:?}: {problem}"),
            ));
        }
    }
    if labels.len() < 2 {
        errors.push(FieldError::invalid(
            field,
            domain,
            "should be a domain with at least two segments separated by dots",
        ));
    }
    for problem in validation::is_dns1123_subdomain(path) {
        errors.push(FieldError::invalid(
            field,
            path,
            &format!("validating component {path:?}: {problem}"),
        ));
    }
    errors
}

pub fn signer_name(object: &Value) -> &str {
    object
        .pointer("/spec/signerName")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn condition_type(condition: &Value) -> &str {
    condition
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The conditions of one type, in order.
pub fn conditions_of(object: &Value, kind: &str) -> Vec<Value> {
    crate::object::status_conditions(object)
        .iter()
        .filter(|c| condition_type(c) == kind)
        .cloned()
        .collect()
}

/// Whether the request carries a condition of type `kind` (`Approved`, `Denied`, `Failed`).
pub fn has_condition(object: &Value, kind: &str) -> bool {
    crate::object::status_conditions(object)
        .iter()
        .any(|c| condition_type(c) == kind)
}

/// Whether the request carries an Approved condition and no Denied or Failed one.
pub fn is_approved(object: &Value) -> bool {
    has_condition(object, "Approved")
        && !has_condition(object, "Denied")
        && !has_condition(object, "Failed")
}

/// Whether a certificate has been issued (`status.certificate` is set).
pub fn is_issued(object: &Value) -> bool {
    object
        .pointer("/status/certificate")
        .and_then(Value::as_str)
        .is_some_and(|c| !c.is_empty())
}

/// `spec.request` as the bytes JSON carries in base64; None when absent or not base64.
fn request_bytes(object: &Value) -> Option<Vec<u8>> {
    let text = object.pointer("/spec/request").and_then(Value::as_str)?;
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

/// The DER of the request's first PEM block, which must be a `CERTIFICATE REQUEST`.
pub fn request_der(object: &Value) -> Result<Vec<u8>, String> {
    let Some(text) = object.pointer("/spec/request").and_then(Value::as_str) else {
        return Err("PEM block type must be CERTIFICATE REQUEST".into());
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|error| format!("spec.request is not base64: {error}"))?;
    match first_pem_block(&bytes) {
        Some((label, der)) if label == "CERTIFICATE REQUEST" => Ok(der),
        _ => Err("PEM block type must be CERTIFICATE REQUEST".into()),
    }
}

/// The request parses as PKCS#10 and is signed by the key it carries.
fn check_request(der: &[u8]) -> Result<(), String> {
    let (_, csr) = x509_parser::certification_request::X509CertificationRequest::from_der(der)
        .map_err(|error| format!("x509: malformed certificate request: {error}"))?;
    csr.verify_signature()
        .map_err(|error| format!("x509: the request's signature does not verify: {error}"))
}

/// `status.certificate`: empty, or only CERTIFICATE blocks without headers, each parsing.
fn check_certificate(certificate: &str) -> Result<(), String> {
    if certificate.is_empty() {
        return Ok(());
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(certificate)
        .map_err(|error| format!("status.certificate is not base64: {error}"))?;
    let mut rest: &[u8] = &bytes;
    let mut blocks = 0;
    while let Some((label, der, remaining, headers)) = pem_block(rest) {
        if label != "CERTIFICATE" {
            return Err(format!(
                "only CERTIFICATE PEM blocks are allowed, found {label:?}"
            ));
        }
        if headers {
            return Err("no PEM block headers are permitted".into());
        }
        x509_parser::certificate::X509Certificate::from_der(&der)
            .map_err(|error| format!("x509: malformed certificate: {error}"))?;
        blocks += 1;
        rest = remaining;
    }
    if blocks == 0 {
        return Err("must contain at least one CERTIFICATE PEM block".into());
    }
    Ok(())
}

fn first_pem_block(bytes: &[u8]) -> Option<(String, Vec<u8>)> {
    pem_block(bytes).map(|(label, der, _, _)| (label, der))
}

/// The first PEM block of `bytes`: its label, its decoded body, what follows it, and
/// whether it has headers (`Key: value` lines). None when there is no complete block.
fn pem_block(bytes: &[u8]) -> Option<(String, Vec<u8>, &[u8], bool)> {
    const BEGIN: &[u8] = b"-----BEGIN ";
    let start = bytes.windows(BEGIN.len()).position(|w| w == BEGIN)?;
    let after = &bytes[start + BEGIN.len()..];
    let label_end = after.windows(5).position(|w| w == b"-----")?;
    let label = String::from_utf8(after[..label_end].to_vec()).ok()?;
    let body_start = &after[label_end + 5..];
    let end_marker = format!("-----END {label}-----");
    let end = body_start
        .windows(end_marker.len())
        .position(|w| w == end_marker.as_bytes())?;
    let body = std::str::from_utf8(&body_start[..end]).ok()?;
    let headers = body.lines().any(|line| line.contains(':'));
    let base64_text: String = body
        .lines()
        .filter(|line| !line.contains(':'))
        .flat_map(|line| line.chars())
        .filter(|c| !c.is_whitespace())
        .collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(base64_text)
        .ok()?;
    Some((label, der, &body_start[end + end_marker.len()..], headers))
}

/// Go's `%#v` of a `[]byte`, as upstream prints the request in its field error.
fn go_bytes(bytes: Option<&[u8]>) -> String {
    match bytes {
        None => "[]byte(nil)".into(),
        Some(bytes) => {
            let hex: Vec<String> = bytes.iter().map(|b| format!("0x{b:x}")).collect();
            format!("[]byte{{{}}}", hex.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csr_pem(organization: &str) -> String {
        let key = rcgen::KeyPair::generate().expect("a key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "jane");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, organization);
        params
            .serialize_request(&key)
            .expect("a CSR")
            .pem()
            .expect("PEM")
    }

    fn csr(pem: &str, signer: &str) -> Value {
        json!({
            "apiVersion": "certificates.k8s.io/v1",
            "kind": "CertificateSigningRequest",
            "metadata": {"name": "jane"},
            "spec": {
                "request": base64::engine::general_purpose::STANDARD.encode(pem),
                "signerName": signer,
                "usages": ["client auth"],
            },
        })
    }

    fn messages(errors: &[FieldError]) -> Vec<String> {
        errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_well_formed_request_passes_and_a_bad_one_names_each_problem() {
        let good = csr(&csr_pem("dev"), KUBE_APISERVER_CLIENT_SIGNER);
        assert_eq!(messages(&validate(&good, None)), Vec::<String>::new());

        let mut bad = csr("not a PEM", "example");
        bad["spec"]["usages"] = json!(["client auth", "flying", "client auth"]);
        bad["spec"]["expirationSeconds"] = json!(60);
        let found = messages(&validate(&bad, None));
        let expected = [
            "spec.request: Invalid value: []byte{0x6e, 0x6f, 0x74, 0x20, 0x61, 0x20, 0x50, 0x45, 0x4d}: PEM block type must be CERTIFICATE REQUEST",
            "spec.usages[1]: Unsupported value: \"flying\"",
            "spec.usages[2]: Duplicate value: \"client auth\"",
            "spec.signerName: Invalid value: \"example\": must be a fully qualified domain and path of the form 'example.com/signer-name'",
            "spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 600 seconds (10 minutes)",
        ];
        for (found, expected) in found.iter().zip(expected) {
            assert!(found.starts_with(expected), "{found}\n{expected}");
        }
        assert_eq!(found.len(), expected.len(), "{found:?}");
    }

    #[test]
    fn a_tampered_request_fails_its_signature_check() {
        let pem = csr_pem("dev");
        let der = first_pem_block(pem.as_bytes()).expect("a block").1;
        let mut tampered = der.clone();
        // The last byte is the signature's: flipping it keeps the structure.
        let last = tampered.len() - 1;
        tampered[last] ^= 0x01;
        assert!(check_request(&der).is_ok());
        let why = check_request(&tampered).expect_err("the signature no longer verifies");
        assert!(why.contains("signature"), "{why}");
    }

    #[test]
    fn the_requester_is_the_caller_and_status_starts_empty() {
        let mut object = csr(&csr_pem("dev"), KUBE_APISERVER_CLIENT_SIGNER);
        object["spec"]["username"] = json!("someone-else");
        object["status"] = json!({"conditions": [{"type": "Approved", "status": "True"}]});
        let actor = Actor {
            user: "jane".into(),
            user_agent: String::new(),
            uid: "42".into(),
            groups: vec!["dev".into(), "system:authenticated".into()],
            extra: Default::default(),
        };
        prepare_create(&mut object, Some(&actor)).expect("accepted");
        assert_eq!(object["spec"]["username"], "jane");
        assert_eq!(object["spec"]["uid"], "42");
        assert_eq!(object["spec"]["groups"][1], "system:authenticated");
        assert_eq!(object["status"], json!({}));

        let mut masters = csr(&csr_pem("system:masters"), KUBE_APISERVER_CLIENT_SIGNER);
        let refused = prepare_create(&mut masters, Some(&actor)).expect_err("refused");
        assert_eq!(refused.code, 403);
        assert_eq!(
            refused.message,
            "certificatesigningrequests.certificates.k8s.io \"jane\" is forbidden: use of kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed"
        );
    }

    #[test]
    fn approval_changes_only_conditions_and_status_keeps_decisions() {
        let stored = json!({
            "spec": {"signerName": "example.com/x", "usages": ["client auth"]},
            "status": {},
        });
        let mut next = stored.clone();
        next["spec"]["signerName"] = json!("example.com/y");
        next["status"] = json!({"certificate": "Zm9v", "conditions": [
            {"type": "Approved", "status": "True", "reason": "KubectlApprove"}
        ]});
        assert!(prepare_update(Subresource::Approval, &stored, &mut next).is_empty());
        assert_eq!(next["spec"]["signerName"], "example.com/x");
        assert!(next["status"].get("certificate").is_none(), "{next}");
        let approved = &next["status"]["conditions"][0];
        assert!(approved["lastUpdateTime"].is_string());
        assert!(approved["lastTransitionTime"].is_string());

        // Through /status, adding a decision is refused; changing one is undone.
        let mut through_status = stored.clone();
        through_status["status"] = json!({"conditions": [{"type": "Denied", "status": "True"}]});
        let refused = prepare_update(Subresource::Status, &stored, &mut through_status);
        assert_eq!(
            messages(&refused),
            ["status.conditions: Forbidden: updates may not add a condition of type \"Denied\""]
        );
        let mut changed = next.clone();
        changed["status"]["conditions"][0]["reason"] = json!("Other");
        assert!(prepare_update(Subresource::Status, &next, &mut changed).is_empty());
        assert_eq!(
            changed["status"]["conditions"][0]["reason"],
            "KubectlApprove"
        );
    }

    #[test]
    fn decisions_exclude_each_other_and_stay() {
        let mut both = csr(&csr_pem("dev"), "example.com/x");
        both["status"] = json!({"conditions": [
            {"type": "Approved", "status": "True"},
            {"type": "Denied", "status": "False"},
        ]});
        let found = messages(&validate(&both, None));
        assert!(
            found.contains(
                &"status.conditions[1].status: Unsupported value: \"False\": supported values: \"True\"".to_string()
            ),
            "{found:?}"
        );
        assert!(
            found.contains(
                &"status.conditions[1].type: Invalid value: \"Denied\": Approved and Denied conditions are mutually exclusive".to_string()
            ),
            "{found:?}"
        );
        let mut approved = csr(&csr_pem("dev"), "example.com/x");
        approved["status"] = json!({"conditions": [{"type": "Approved", "status": "True"}]});
        let cleared = csr(&csr_pem("dev"), "example.com/x");
        let found = messages(&validate(&cleared, Some(&approved)));
        assert!(
            found.contains(
                &"status.conditions: Forbidden: updates may not remove a condition of type \"Approved\"".to_string()
            ),
            "{found:?}"
        );
    }
}
