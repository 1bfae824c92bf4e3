//! `FinalizerClaim`: which controller removes which finalizer, and whether it is alive.
//!
//! A claim is an ordinary stored, cluster-scoped object: every verb goes through the registry,
//! which checks it against [`schema`] (types, required fields, the `forcePolicy` enum and its
//! default) and [`validate`] (names and the finalizer pattern), answering 422 with field paths.
//! This module also decides which claim covers a finalizer on an object ([`matching`]) and
//! whether the claim's Lease is live ([`lease_state`]).
//!
//! # Guarantees
//! - A claim never covers the garbage collector's (`orphan`, `foregroundDeletion`) or the
//!   namespace controller's (`kubernetes`) finalizers: those names are refused on write.
//! - Liveness comes from the Lease alone: a holder, and `renewTime + leaseDurationSeconds`
//!   still in the future. Elapsed deletion time never makes a controller dead or alive.

use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};

use super::api::{FinalizerClaimSpec, GroupResource};
use crate::validation::{self, FieldError, STANDARD_FINALIZERS};

/// The structural schema of `FinalizerClaim` (an OpenAPI v3 schema, as a CRD would give it).
pub fn schema() -> Value {
    json!({
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {
                "type": "object",
                "required": ["finalizer", "resources", "controller", "lease"],
                "properties": {
                    "finalizer": {"type": "string", "minLength": 1},
                    "resources": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "required": ["resource"],
                            "properties": {
                                "group": {"type": "string"},
                                "resource": {"type": "string", "minLength": 1}
                            }
                        }
                    },
                    "controller": {"type": "string", "minLength": 1},
                    "lease": {
                        "type": "object",
                        "required": ["namespace", "name"],
                        "properties": {
                            "namespace": {"type": "string", "minLength": 1},
                            "name": {"type": "string", "minLength": 1}
                        }
                    },
                    "maxCleanupSeconds": {"type": "integer", "format": "int64", "minimum": 1},
                    "cleansUp": {"type": "array", "items": {"type": "string"}},
                    "inventoryPath": {"type": "string"},
                    "forcePolicy": {
                        "type": "string",
                        "enum": ["Never", "WhenOwnerDead", "Always"],
                        "default": "Never"
                    }
                }
            }
        }
    })
}

/// What the schema cannot say: the finalizer is a valid name or `domain/` prefix that is not
/// a system finalizer; resources, groups and the Lease have valid names.
pub fn validate(object: &Value, _old: Option<&Value>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let text = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
    if let Some(finalizer) = text("/spec/finalizer").filter(|f| !f.is_empty()) {
        errors.extend(finalizer_errors(finalizer));
    }
    if let Some(resources) = object.pointer("/spec/resources").and_then(Value::as_array) {
        for (index, entry) in resources.iter().enumerate() {
            let field = format!("spec.resources[{index}]");
            if let Some(group) = entry
                .get("group")
                .and_then(Value::as_str)
                .filter(|g| !g.is_empty())
            {
                for message in validation::is_dns1123_subdomain(group) {
                    errors.push(FieldError::invalid(
                        &format!("{field}.group"),
                        group,
                        &message,
                    ));
                }
            }
            if let Some(resource) = entry
                .get("resource")
                .and_then(Value::as_str)
                .filter(|r| !r.is_empty())
            {
                for message in validation::is_dns1123_label(resource) {
                    errors.push(FieldError::invalid(
                        &format!("{field}.resource"),
                        resource,
                        &format!("{message} (the plural resource name, e.g. configmaps)"),
                    ));
                }
            }
        }
    }
    if let Some(namespace) = text("/spec/lease/namespace").filter(|n| !n.is_empty()) {
        for message in validation::is_dns1123_label(namespace) {
            errors.push(FieldError::invalid(
                "spec.lease.namespace",
                namespace,
                &message,
            ));
        }
    }
    if let Some(name) = text("/spec/lease/name").filter(|n| !n.is_empty()) {
        for message in validation::is_dns1123_subdomain(name) {
            errors.push(FieldError::invalid("spec.lease.name", name, &message));
        }
    }
    if let Some(path) = text("/spec/inventoryPath").filter(|p| !p.starts_with('/')) {
        errors.push(FieldError::invalid(
            "spec.inventoryPath",
            path,
            "must be a JSON pointer into the claimed objects, starting with / (e.g. /status/inventory)",
        ));
    }
    errors
}

fn finalizer_errors(finalizer: &str) -> Vec<FieldError> {
    let field = "spec.finalizer";
    if STANDARD_FINALIZERS.contains(&finalizer) {
        return vec![FieldError::invalid(
            field,
            finalizer,
            "is a system finalizer (the garbage collector's or the namespace controller's) and cannot be claimed",
        )];
    }
    match finalizer.strip_suffix('/') {
        Some(domain) => validation::is_dns1123_subdomain(domain)
            .into_iter()
            .map(|message| {
                FieldError::invalid(
                    field,
                    finalizer,
                    &format!("a prefix must be a DNS subdomain followed by '/': {message}"),
                )
            })
            .collect(),
        None => validation::validate_finalizer_name(finalizer, field),
    }
}

/// Whether `spec` covers `finalizer` on an object of `group`/`resource`.
pub fn covers_finalizer(spec: &FinalizerClaimSpec, finalizer: &str) -> bool {
    if spec.finalizer.ends_with('/') {
        finalizer.starts_with(&spec.finalizer)
    } else {
        spec.finalizer == finalizer
    }
}

pub fn covers_resource(spec: &FinalizerClaimSpec, group: &str, resource: &str) -> bool {
    spec.resources
        .iter()
        .any(|r: &GroupResource| r.group == group && r.resource == resource)
}

/// One stored claim, decoded.
#[derive(Clone, Debug)]
pub struct Claim {
    pub name: String,
    pub spec: FinalizerClaimSpec,
}

/// The claims covering `finalizer` on `group`/`resource`, exact names before prefixes, then
/// by name; and the claims that name the finalizer but not this resource (a likely mistake
/// worth showing).
pub fn matching<'a>(
    claims: &'a [Claim],
    finalizer: &str,
    group: &str,
    resource: &str,
) -> (Vec<&'a Claim>, Vec<&'a Claim>) {
    let (mut covering, other): (Vec<&Claim>, Vec<&Claim>) = claims
        .iter()
        .filter(|c| covers_finalizer(&c.spec, finalizer))
        .partition(|c| covers_resource(&c.spec, group, resource));
    covering.sort_by_key(|c| (c.spec.finalizer.ends_with('/'), c.name.clone()));
    (covering, other)
}

/// Every stored claim at the store's latest revision; claims that do not decode are skipped
/// (and logged), so one bad claim never hides the others.
pub async fn load(
    store: std::sync::Arc<dyn finale_store::Store>,
    catalog: &crate::resources::Catalog,
) -> crate::status::ApiResult<Vec<Claim>> {
    let snapshot = super::snapshot::Snapshot::latest(store).await?;
    at(&snapshot, catalog).await
}

/// Every FinalizerClaim stored at `snapshot`'s revision (none when the kind is not served).
pub async fn at(
    snapshot: &super::snapshot::Snapshot,
    catalog: &crate::resources::Catalog,
) -> crate::status::ApiResult<Vec<Claim>> {
    let Some(claim_type) = catalog.lookup(super::GROUP, super::VERSION, "finalizerclaims") else {
        return Ok(Vec::new());
    };
    Ok(decode_all(snapshot.list(&claim_type, None).await?))
}

/// Decodes stored claim objects, skipping (and logging) those that do not decode.
pub fn decode_all(objects: Vec<Value>) -> Vec<Claim> {
    objects
        .into_iter()
        .filter_map(|object| {
            let name = crate::object::name(&object).to_string();
            let spec = object.get("spec").cloned()?;
            match serde_json::from_value(spec) {
                Ok(spec) => Some(Claim { name, spec }),
                Err(error) => {
                    tracing::warn!(claim = %name, %error, "ignoring a FinalizerClaim that does not decode");
                    None
                }
            }
        })
        .collect()
}

/// Finalizers that Kubernetes itself adds and removes, which no claim is expected for: the
/// garbage collector's and the namespace controller's ([`STANDARD_FINALIZERS`]), the
/// apiextensions server's `customresourcecleanup.apiextensions.k8s.io`, and the built-in
/// controllers' names under `kubernetes.io/` or a `*.kubernetes.io/` or `*.k8s.io/` domain
/// (`kubernetes.io/pv-protection`, `batch.kubernetes.io/job-tracking`).
pub fn is_system_finalizer(finalizer: &str) -> bool {
    if STANDARD_FINALIZERS.contains(&finalizer)
        || finalizer == "customresourcecleanup.apiextensions.k8s.io"
    {
        return true;
    }
    let Some((domain, _)) = finalizer.split_once('/') else {
        return false;
    };
    ["kubernetes.io", "k8s.io"]
        .iter()
        .any(|system| domain == *system || domain.ends_with(&format!(".{system}")))
}

/// The `Warning` texts for the finalizers a write adds (`added`) to an object of
/// `group`/`resource` that no claim covers, system finalizers aside.
pub fn unclaimed_warnings<'a>(
    claims: &[Claim],
    group: &str,
    resource: &str,
    added: impl IntoIterator<Item = &'a str>,
) -> Vec<String> {
    added
        .into_iter()
        .filter(|finalizer| !is_system_finalizer(finalizer))
        .filter(|finalizer| matching(claims, finalizer, group, resource).0.is_empty())
        .map(unclaimed_warning)
        .collect()
}

/// The warning a write gets for adding `finalizer` that no claim covers.
pub fn unclaimed_warning(finalizer: &str) -> String {
    format!("finalizer {finalizer} is not claimed by any controller; nothing may ever remove it")
}

/// A Lease as a claim's liveness evidence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseState {
    /// No such Lease.
    Missing,
    /// The Lease names no holder (released, or never acquired).
    NoHolder,
    /// Held, but not renewed within its duration.
    Expired {
        holder: String,
        renewed: DateTime<Utc>,
        expired: DateTime<Utc>,
    },
    /// Held and renewed within its duration.
    Live {
        holder: String,
        renewed: DateTime<Utc>,
        expires: DateTime<Utc>,
    },
    /// Held, but without a renew time or duration to judge by.
    Unknown { holder: String },
}

impl LeaseState {
    pub fn is_live(&self) -> bool {
        matches!(self, LeaseState::Live { .. })
    }
}

/// Judges `lease` (a `coordination.k8s.io/v1` Lease, or None when absent) at `now`.
pub fn lease_state(lease: Option<&Value>, now: DateTime<Utc>) -> LeaseState {
    let Some(lease) = lease else {
        return LeaseState::Missing;
    };
    let holder = lease
        .pointer("/spec/holderIdentity")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if holder.is_empty() {
        return LeaseState::NoHolder;
    }
    let renewed = lease
        .pointer("/spec/renewTime")
        .or_else(|| lease.pointer("/spec/acquireTime"))
        .and_then(Value::as_str)
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc));
    let duration = lease
        .pointer("/spec/leaseDurationSeconds")
        .and_then(Value::as_i64);
    match (renewed, duration) {
        (Some(renewed), Some(seconds)) => {
            let ends = renewed + Duration::seconds(seconds);
            if ends > now {
                LeaseState::Live {
                    holder,
                    renewed,
                    expires: ends,
                }
            } else {
                LeaseState::Expired {
                    holder,
                    renewed,
                    expired: ends,
                }
            }
        }
        _ => LeaseState::Unknown { holder },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(finalizer: &str) -> FinalizerClaimSpec {
        FinalizerClaimSpec {
            finalizer: finalizer.into(),
            resources: vec![GroupResource {
                group: "db.finale.dev".into(),
                resource: "databases".into(),
            }],
            ..FinalizerClaimSpec::default()
        }
    }

    #[test]
    fn exact_names_and_domain_prefixes_cover_finalizers() {
        assert!(covers_finalizer(
            &spec("db.finale.dev/cleanup"),
            "db.finale.dev/cleanup"
        ));
        assert!(!covers_finalizer(
            &spec("db.finale.dev/cleanup"),
            "db.finale.dev/other"
        ));
        assert!(covers_finalizer(&spec("db.finale.dev/"), "db.finale.dev/x"));
        assert!(!covers_finalizer(&spec("db.finale.dev/"), "other.dev/x"));
        assert!(covers_resource(&spec("x/y"), "db.finale.dev", "databases"));
        assert!(!covers_resource(&spec("x/y"), "", "databases"));
    }

    #[test]
    fn finalizer_names_prefixes_and_system_finalizers_are_checked() {
        assert!(finalizer_errors("example.com/cleanup").is_empty());
        assert!(finalizer_errors("example.com/").is_empty());
        assert_eq!(finalizer_errors("Bad_Domain/").len(), 1);
        assert_eq!(finalizer_errors("orphan").len(), 1);
        assert!(
            finalizer_errors("kubernetes")[0]
                .to_string()
                .contains("system finalizer")
        );
    }

    #[test]
    fn an_inventory_path_must_be_a_json_pointer() {
        let claim = |path: &str| json!({"spec": {"inventoryPath": path}});
        assert!(validate(&claim("/status/inventory"), None).is_empty());
        let errors = validate(&claim("status.inventory"), None);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            format!("{errors:?}").contains("spec.inventoryPath"),
            "{errors:?}"
        );
    }

    #[test]
    fn system_finalizers_are_never_reported_as_unclaimed() {
        for system in [
            "orphan",
            "foregroundDeletion",
            "kubernetes",
            "kubernetes.io/pv-protection",
            "batch.kubernetes.io/job-tracking",
            "customresourcecleanup.apiextensions.k8s.io",
        ] {
            assert!(is_system_finalizer(system), "{system}");
        }
        for other in [
            "example.com/x",
            "notkubernetes.io/x",
            "cleanup",
            "kubernetes.io.evil.com/x",
        ] {
            assert!(!is_system_finalizer(other), "{other}");
        }
    }

    #[test]
    fn only_added_finalizers_without_a_covering_claim_are_warned_about() {
        let claims = vec![Claim {
            name: "db".into(),
            spec: spec("db.finale.dev/"),
        }];
        let warnings = unclaimed_warnings(
            &claims,
            "db.finale.dev",
            "databases",
            ["db.finale.dev/cleanup", "example.com/x", "orphan"],
        );
        assert_eq!(
            warnings,
            [
                "finalizer example.com/x is not claimed by any controller; nothing may ever remove it"
            ]
        );
        // A claim for another resource does not cover the finalizer here.
        assert_eq!(
            unclaimed_warnings(&claims, "", "configmaps", ["db.finale.dev/cleanup"]).len(),
            1
        );
    }

    #[test]
    fn a_lease_is_live_only_while_held_and_renewed_within_its_duration() {
        let now = DateTime::parse_from_rfc3339("2026-01-01T00:01:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let lease = |holder: &str, renewed: &str, seconds: i64| json!({"spec": {"holderIdentity": holder, "renewTime": renewed, "leaseDurationSeconds": seconds}});
        assert_eq!(lease_state(None, now), LeaseState::Missing);
        assert_eq!(
            lease_state(Some(&lease("", "2026-01-01T00:00:50.000000Z", 15)), now),
            LeaseState::NoHolder
        );
        assert!(
            lease_state(Some(&lease("op-1", "2026-01-01T00:00:50.000000Z", 15)), now).is_live()
        );
        assert!(matches!(
            lease_state(Some(&lease("op-1", "2026-01-01T00:00:30.000000Z", 15)), now),
            LeaseState::Expired { .. }
        ));
        assert!(matches!(
            lease_state(Some(&json!({"spec": {"holderIdentity": "op-1"}})), now),
            LeaseState::Unknown { .. }
        ));
    }
}
