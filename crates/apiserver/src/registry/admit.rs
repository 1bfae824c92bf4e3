//! Write-time checks of an object's content, shared by every create and update.
//!
//! What a write may contain depends on the kind: a custom resource follows its CRD version's
//! structural schema (unknown fields pruned, defaults applied, values validated); a built-in
//! kind has the fields of its Go type, and anything else is an unknown field. The request's
//! `fieldValidation` decides whether unknown (and duplicate) fields are dropped silently,
//! reported as `Warning`s, or rejected (api-surface §6.7). Custom resources also warn about
//! finalizer names without a domain (FN4), and run their CRD's CEL rules
//! (`x-kubernetes-validations`) last. Finally the write is recorded in
//! `metadata.managedFields` under its field manager (api-surface §6.6).
//!
//! Every kind also warns about a finalizer the write adds that no `FinalizerClaim` covers
//! ([`unclaimed_finalizer_warnings`]): nothing declared will ever remove it.

use std::sync::Arc;

use finale_store::Store;
use serde_json::Value;

use super::{Subresource, WriteOptions};
use crate::field_validation::{self, FieldValidation};
use crate::insight::claims;
use crate::object;
use crate::patch::{self, PatchSchema};
use crate::resources::{Catalog, ResourceType};
use crate::status::{ApiError, ApiResult};
use crate::validation::{self, FieldError};

/// What admission found in an acceptable object.
#[derive(Debug, Default)]
pub(super) struct Admission {
    /// `Warning` headers for the client.
    pub warnings: Vec<String>,
    /// Field errors; the caller joins them with its own checks into one 422.
    pub errors: Vec<FieldError>,
}

/// Prunes, defaults and validates `object` for a write of `resource`; `old` is the stored
/// object on updates. A strict-validation failure is returned as the 400 upstream sends.
pub(super) fn admit_content(
    resource: &ResourceType,
    object: &mut Value,
    old: Option<&Value>,
    options: &WriteOptions,
) -> ApiResult<Admission> {
    let mut admission = Admission::default();
    // `reported` is what fieldValidation speaks of; `removed` also holds what upstream's
    // decoding drops silently (unknown keys inside CRD schema sub-objects).
    let (reported, removed) = match &resource.schema {
        Some(schema) => {
            let pruned = schema.prune(object);
            schema.apply_defaults(object);
            (pruned, Vec::new())
        }
        None => match resource.typed {
            Some(typed) => {
                let found = field_validation::unknown_fields_of(
                    typed.unknown_fields,
                    resource.is_crd(),
                    object,
                );
                let all = found.all();
                (found.reported, all)
            }
            None => (Vec::new(), Vec::new()),
        },
    };
    let duplicates = &options.duplicate_fields;
    match options.field_validation {
        FieldValidation::Strict if !reported.is_empty() || !duplicates.is_empty() => {
            return Err(ApiError::bad_request(
                field_validation::bad_request_message(
                    &resource.kind,
                    &resource.version,
                    &reported,
                    duplicates,
                ),
            ));
        }
        FieldValidation::Warn => admission
            .warnings
            .extend(field_validation::warnings(&reported, duplicates)),
        _ => {}
    }
    if !removed.is_empty() {
        // Upstream decodes built-ins into their Go types, which drops what they lack.
        field_validation::remove_fields(object, &removed);
    }

    if let Some(schema) = &resource.schema {
        admission.errors.extend(schema.validate(object));
    }
    if let Some(validate) = resource.validation {
        admission.errors.extend(validate(object, old));
    }
    // CEL rules run last, and not at all when the object is already invalid in a way that
    // could mislead them (upstream `hasBlockingErr`).
    if let Some(rules) = resource.schema.as_ref().and_then(|schema| schema.rules()) {
        match crate::crd::cel::blocking_error(&admission.errors) {
            Some(blocked) => admission.errors.push(blocked),
            None => {
                let outcome = rules.validate(object, old);
                admission.errors.extend(outcome.errors);
                admission.warnings.extend(outcome.warnings);
            }
        }
    }
    if !resource.builtin {
        admission
            .warnings
            .extend(finalizer_warnings(object, old.map(object::finalizers)));
    }
    Ok(admission)
}

/// Checks of a write that depend on who makes it, run on the object as it would be stored:
/// RBAC's privilege-escalation prevention, O5 (`OwnerReferencesPermissionEnforcement`) and
/// the `signers` checks of CertificateSigningRequests (`CertificateApproval`,
/// `CertificateSigning`). The authorizer implements it (a layer above the registry) with
/// the requesting user and puts it in [`WriteOptions::permissions`]; writes without one (the
/// server's own controllers) are not checked.
pub trait WritePermissions: Send + Sync + std::fmt::Debug {
    /// `old` is the stored object on updates, `subresource` the route the write took
    /// ([`Subresource::Main`] on creates). An error refuses the write (a 403).
    fn check(
        &self,
        catalog: &Catalog,
        resource: &ResourceType,
        subresource: Subresource,
        object: &Value,
        old: Option<&Value>,
    ) -> ApiResult<()>;
}

/// Runs the writer's [`WritePermissions`], if the write has any.
pub(super) fn check_permissions(
    catalog: &Catalog,
    resource: &ResourceType,
    subresource: Subresource,
    object: &Value,
    old: Option<&Value>,
    options: &WriteOptions,
) -> ApiResult<()> {
    match &options.permissions {
        Some(permissions) => permissions.check(catalog, resource, subresource, object, old),
        None => Ok(()),
    }
}

/// FN4: each finalizer a custom resource gains (all of them on create) that is not
/// domain-qualified earns a warning.
fn finalizer_warnings(object: &Value, before: Option<Vec<String>>) -> Vec<String> {
    let before = before.unwrap_or_default();
    object::finalizers(object)
        .iter()
        .filter(|f| !before.contains(f))
        .filter_map(|f| validation::finalizer_warning(f))
        .collect()
}

/// `Warning`s for the finalizers `object` gains (all of them on create, `old` absent) that no
/// `FinalizerClaim` covers for its resource, system finalizers aside: "finalizer X is not
/// claimed by any controller; nothing may ever remove it".
///
/// Best effort: the claims are read only when a write adds a finalizer, and a failed read is
/// logged and answers no warning, since a warning must never fail or block the write.
pub(super) async fn unclaimed_finalizer_warnings(
    store: &Arc<dyn Store>,
    catalog: &Catalog,
    resource: &ResourceType,
    object: &Value,
    old: Option<&Value>,
) -> Vec<String> {
    let before = old.map(object::finalizers).unwrap_or_default();
    let added: Vec<String> = object::finalizers(object)
        .into_iter()
        .filter(|f| !before.contains(f) && !claims::is_system_finalizer(f))
        .collect();
    // Without the claim kind (the API switched off) there is nothing to warn against.
    if added.is_empty()
        || catalog
            .lookup(
                crate::insight::GROUP,
                crate::insight::VERSION,
                "finalizerclaims",
            )
            .is_none()
    {
        return Vec::new();
    }
    match claims::load(Arc::clone(store), catalog).await {
        Ok(claims) => claims::unclaimed_warnings(
            &claims,
            &resource.group,
            &resource.plural,
            added.iter().map(String::as_str),
        ),
        Err(error) => {
            tracing::warn!(
                error = %error.message,
                "could not read the FinalizerClaims; no unclaimed-finalizer warning for this write"
            );
            Vec::new()
        }
    }
}

/// The `managedFields` bookkeeping of a non-apply write: `manager` now owns what it changed.
pub(super) fn record_manager(
    resource: &ResourceType,
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    subresource: Option<&str>,
) {
    let now = object::now();
    let schema = merge_schema(resource);
    patch::record_update(
        old,
        new,
        manager,
        subresource,
        &resource.api_version(),
        &now,
        schema.as_ref(),
    );
}

/// The list semantics a kind's writes merge by: the built-in table for built-ins, the
/// structural schema for custom resources.
pub(super) fn merge_schema(resource: &ResourceType) -> Box<dyn PatchSchema + Send + Sync + '_> {
    match &resource.schema {
        Some(schema) => Box::new(SchemaRef(schema.as_ref())),
        None if resource.builtin => Box::new(patch::BuiltinSchema::for_kind(&resource.kind)),
        None => Box::new(patch::MergePatchSchema),
    }
}

/// Borrows a structural schema as a [`patch::PatchSchema`].
struct SchemaRef<'a>(&'a crate::crd::schema::StructuralSchema);

impl PatchSchema for SchemaRef<'_> {
    fn list_strategy(&self, path: &[&str]) -> patch::ListStrategy {
        self.0.list_strategy(path)
    }
}

/// The default field manager of a write without `fieldManager`: upstream takes the
/// client's User-Agent up to the first `/` (`kubectl`, `kube-rs`…).
pub fn manager_from_user_agent(user_agent: Option<&str>) -> String {
    let agent = user_agent.unwrap_or_default();
    let prefix = agent.split('/').next().unwrap_or_default().trim();
    let prefix: String = prefix.chars().take(128).collect();
    if prefix.is_empty() {
        "unknown".to_string()
    } else {
        prefix
    }
}
