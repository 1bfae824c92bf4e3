//! Update and patch (PUT, PATCH, server-side apply): the guarded read-modify-write and the
//! rules an update must keep (finalizers, deletion, immutable fields).

use super::*;

impl Registry {
    /// PUT: api-surface §6.3. A body `resourceVersion` is an optimistic-concurrency
    /// precondition; without one the update applies to whatever is stored.
    pub async fn update(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        object: Value,
        subresource: Subresource,
        options: &WriteOptions,
    ) -> ApiResult<Written> {
        check_type_meta(resource, &object)?;
        let body_name = object::name(&object);
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        effective_namespace(resource, namespace, &object)?;
        let pinned = object::meta_str(&object, "resourceVersion")
            .filter(|rv| !rv.is_empty())
            .map(|rv| parse_resource_version(rv, "metadata.resourceVersion"))
            .transpose()?;
        self.guarded_update(
            resource,
            namespace,
            name,
            pinned,
            subresource,
            options,
            move |_current| Ok(object.clone()),
        )
        .await
    }

    /// The optimistic-concurrency loop behind PUT and PATCH: read, compute the new object
    /// with `mutate`, apply the lifecycle rules, write conditioned on the revision read.
    #[allow(clippy::too_many_arguments)]
    pub async fn guarded_update<F>(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        pinned_revision: Option<Revision>,
        subresource: Subresource,
        options: &WriteOptions,
        mutate: F,
    ) -> ApiResult<Written>
    where
        F: Fn(&Value) -> ApiResult<Value>,
    {
        if let Some(manager) = &options.field_manager {
            validate_field_manager(manager)?;
        }
        let key = resource.object_key(namespace, name);
        // A Pod's binding is upstream's CREATE of a Binding object, which Finale does not
        // model: webhooks are not called for it (docs/compatibility.md).
        let has_webhooks =
            subresource != Subresource::Binding && self.webhooks.any_for(resource).await?;
        let (user, update_options) = if has_webhooks {
            (
                self.admission_user(options.actor.as_ref()),
                write_options_json(options),
            )
        } else {
            (Value::Null, Value::Null)
        };
        let admission = WebhookRequest {
            resource,
            subresource,
            // Upstream's attributes name a Namespace's own name as its namespace on updates.
            namespace: if resource.is_namespace() {
                Some(name)
            } else {
                namespace
            },
            name,
            dry_run: options.dry_run,
            options: &update_options,
            user: &user,
        };
        let mut attempts = 0;
        loop {
            attempts += 1;
            let (kv, _) = self.store.get(key.as_bytes()).await?;
            let kv = kv.ok_or_else(|| ApiError::not_found(target(resource, name)))?;
            if pinned_revision.is_some_and(|rv| rv != kv.mod_revision) {
                return Err(ApiError::stale_resource_version(target(resource, name)));
            }
            let current = self.decode_in_request_version(resource, &kv).await?;
            let mut requested = mutate(&current)?;
            if !requested.is_object() {
                return Err(ApiError::bad_request("the object must be a JSON object"));
            }
            check_type_meta(resource, &requested)?;
            // Mutating webhooks change the requested object before the update's rules apply,
            // as upstream's do, so that those rules restore what a webhook may not change.
            let webhook_warnings = if has_webhooks {
                self.mutate_update(&admission, &current, &mut requested)
                    .await?
            } else {
                Vec::new()
            };
            let mut candidate = prepare_update(resource, &current, requested, subresource)?;
            let content = admit::admit_content(resource, &mut candidate, Some(&current), options)?;
            admit::check_permissions(
                &self.catalog,
                resource,
                subresource,
                &candidate,
                Some(&current),
                options,
            )?;
            let mut warnings = webhook_warnings;
            warnings.extend(content.warnings);
            warnings.extend(
                admit::unclaimed_finalizer_warnings(
                    &self.store,
                    &self.catalog,
                    resource,
                    &candidate,
                    Some(&current),
                )
                .await,
            );
            let mut errors = content.errors;
            errors.extend(validate_object(resource, &candidate, namespace));
            if !errors.is_empty() {
                return Err(ApiError::invalid(
                    &resource.kind,
                    &resource.group,
                    name,
                    &errors,
                ));
            }
            // Validating webhooks see the object as it would be stored (upstream's
            // updateValidation), before a finalizer removal completes a deletion (U7): a
            // webhook can refuse that removal.
            if has_webhooks {
                warnings.extend(
                    self.validate_update(&admission, &current, &candidate)
                        .await?,
                );
            }

            // U7: the last finalizer of a terminating object is gone, so the update
            // completes the deletion instead of storing the object. Nothing new is stored,
            // so the answer keeps the revision it was read at.
            if update_finishes_deletion(resource, &current, &candidate) {
                let done = Written {
                    object: served(resource, candidate),
                    warnings,
                    created: false,
                };
                if options.dry_run {
                    return Ok(done);
                }
                match self
                    .commit(
                        resource,
                        &key,
                        Precondition::ModRevision(kv.mod_revision),
                        Some(&current),
                        None,
                        options.actor.as_ref(),
                    )
                    .await?
                {
                    // A concurrent remover winning is fine.
                    WriteOutcome::Committed(_)
                    | WriteOutcome::PreconditionFailed { current: None } => return Ok(done),
                    WriteOutcome::PreconditionFailed { current: Some(_) } => {
                        if pinned_revision.is_some() || attempts >= UPDATE_RETRIES {
                            return Err(ApiError::stale_resource_version(target(resource, name)));
                        }
                        continue;
                    }
                }
            }

            let unchanged = strip_resource_version(&candidate) == strip_resource_version(&current);
            if unchanged {
                return Ok(Written {
                    object: served(resource, current),
                    warnings,
                    created: false,
                });
            }
            if let Some(manager) = &options.field_manager {
                admit::record_manager(
                    resource,
                    Some(&current),
                    &mut candidate,
                    manager,
                    subresource.name(),
                );
            }
            if options.dry_run {
                return Ok(Written {
                    object: served(resource, candidate),
                    warnings,
                    created: false,
                });
            }
            match self
                .commit(
                    resource,
                    &key,
                    Precondition::ModRevision(kv.mod_revision),
                    Some(&current),
                    Some(&candidate),
                    options.actor.as_ref(),
                )
                .await?
            {
                WriteOutcome::Committed(result) => {
                    let mut stored = candidate;
                    set_resource_version(&mut stored, result.revision);
                    return Ok(Written {
                        object: served(resource, stored),
                        warnings,
                        created: false,
                    });
                }
                WriteOutcome::PreconditionFailed { current: None } => {
                    return Err(ApiError::not_found(target(resource, name)));
                }
                WriteOutcome::PreconditionFailed { current: Some(_) } => {
                    if pinned_revision.is_some() || attempts >= UPDATE_RETRIES {
                        return Err(ApiError::stale_resource_version(target(resource, name)));
                    }
                }
            }
        }
    }

    /// PATCH in any of the formats of api-surface §6.4, through the same guarded update as
    /// PUT. A `metadata.resourceVersion` the patch sets is a precondition (§6.1).
    #[allow(clippy::too_many_arguments)]
    pub async fn patch(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        format: PatchFormat,
        patch: &Value,
        subresource: Subresource,
        options: &WriteOptions,
    ) -> ApiResult<Written> {
        let format = match format {
            // Strategic merge patch is defined for built-in kinds only; other kinds are
            // patched as JSON merge patches, as upstream does for custom resources.
            PatchFormat::Strategic if !resource.builtin => PatchFormat::Merge,
            other => other,
        };
        let mutate = |current: &Value| -> ApiResult<Value> {
            let patched = apply_patch_format(format, current, patch)?;
            if object::meta_str(&patched, "resourceVersion")
                != object::meta_str(current, "resourceVersion")
            {
                return Err(ApiError::stale_resource_version(target(resource, name)));
            }
            let patched_name = object::name(&patched);
            if patched_name != name {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({patched_name}) does not match the name on the URL ({name}): a patch cannot rename an object"
                )));
            }
            Ok(patched)
        };
        self.guarded_update(
            resource,
            namespace,
            name,
            None,
            subresource,
            options,
            mutate,
        )
        .await
    }

    /// Server-side apply (api-surface §6.6): merges `applied` into the object under
    /// `fieldManager`'s ownership, creating the object when it does not exist (201).
    #[allow(clippy::too_many_arguments)]
    pub async fn apply(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        mut applied: Value,
        subresource: Subresource,
        force: bool,
        options: &WriteOptions,
    ) -> ApiResult<Written> {
        let manager = options
            .field_manager
            .clone()
            .filter(|m| !m.is_empty())
            .ok_or_else(|| {
                ApiError::invalid(
                    "PatchOptions",
                    "meta.k8s.io",
                    "",
                    &[FieldError::required(
                        "fieldManager",
                        "is required for apply patch",
                    )],
                )
            })?;
        validate_field_manager(&manager)?;
        check_applied_config(resource, name, &applied)?;
        if subresource == Subresource::Main
            && resource.status_subresource
            && let Some(map) = applied.as_object_mut()
        {
            // §6.6 rule 5: the main resource ignores .status where a status subresource exists.
            map.remove("status");
        }
        // The engine records ownership itself; the update path must not record it again.
        let inner = WriteOptions {
            field_manager: None,
            ..options.clone()
        };
        let merge_schema = admit::merge_schema(resource);
        let api_version = resource.api_version();
        for _ in 0..UPDATE_RETRIES {
            let now = object::now();
            let engine = |live: Option<&Value>| -> ApiResult<Value> {
                patch::server_side_apply(&patch::ApplyRequest {
                    live,
                    applied: &applied,
                    manager: &manager,
                    force,
                    subresource: subresource.name(),
                    api_version: &api_version,
                    now: &now,
                    schema: merge_schema.as_ref(),
                })
                .map_err(|error| apply_error(resource, name, error))
            };
            let exists = self
                .store
                .get(resource.object_key(namespace, name).as_bytes())
                .await?
                .0
                .is_some();
            if !exists {
                if subresource != Subresource::Main {
                    return Err(ApiError::not_found(target(resource, name)));
                }
                let mut object = engine(None)?;
                metadata_mut(&mut object).insert("name".into(), json!(name));
                match self.create(resource, namespace, object, &inner).await {
                    Err(e) if e.reason == "AlreadyExists" => continue,
                    other => return other,
                }
            }
            let result = self
                .guarded_update(
                    resource,
                    namespace,
                    name,
                    None,
                    subresource,
                    &inner,
                    |current| {
                        let merged = engine(Some(current))?;
                        if object::meta_str(&merged, "resourceVersion")
                            != object::meta_str(current, "resourceVersion")
                        {
                            return Err(ApiError::stale_resource_version(target(resource, name)));
                        }
                        Ok(merged)
                    },
                )
                .await;
            match result {
                // Deleted between the read and the update: apply creates it again.
                Err(e) if e.code == 404 => continue,
                other => return other,
            }
        }
        Err(ApiError::stale_resource_version(target(resource, name)))
    }
}

/// What admission webhooks are told of an update, the same for every attempt.
pub(super) struct WebhookRequest<'a> {
    resource: &'a ResourceType,
    subresource: Subresource,
    namespace: Option<&'a str>,
    name: &'a str,
    dry_run: bool,
    options: &'a Value,
    user: &'a Value,
}

impl WebhookRequest<'_> {
    fn attributes<'b>(
        &'b self,
        object: Option<&'b Value>,
        old_object: Option<&'b Value>,
    ) -> crate::admission::Attributes<'b> {
        crate::admission::Attributes {
            resource: self.resource,
            subresource: self.subresource.name(),
            operation: crate::admission::Operation::Update,
            namespace: self.namespace,
            name: self.name,
            object,
            old_object,
            dry_run: self.dry_run,
            options: self.options,
            user: self.user,
            // Upstream sends the scale subresource's objects as autoscaling/v1 Scales.
            kind_override: (self.subresource == Subresource::Scale).then_some((
                "autoscaling",
                "v1",
                "Scale",
            )),
        }
    }
}

impl Registry {
    /// Mutating webhooks on an update's requested object; for `/scale`, on its Scale view,
    /// whose replica count then goes back into the object.
    async fn mutate_update(
        &self,
        request: &WebhookRequest<'_>,
        current: &Value,
        requested: &mut Value,
    ) -> ApiResult<Vec<String>> {
        if request.subresource == Subresource::Scale {
            let old_view = crate::scale::to_scale(request.resource, current)?;
            let mut view = crate::scale::to_scale(request.resource, requested)?;
            let before = view.clone();
            let warnings = self
                .webhooks
                .mutate(request.attributes(None, Some(&old_view)), Some(&mut view))
                .await?;
            if view != before {
                let replicas = crate::scale::requested_replicas(&view)?;
                crate::scale::set_replicas(request.resource, requested, replicas)?;
            }
            return Ok(warnings);
        }
        self.webhooks
            .mutate(request.attributes(None, Some(current)), Some(requested))
            .await
    }

    /// Validating webhooks on the object an update would store.
    async fn validate_update(
        &self,
        request: &WebhookRequest<'_>,
        current: &Value,
        candidate: &Value,
    ) -> ApiResult<Vec<String>> {
        if request.subresource == Subresource::Scale {
            let old_view = crate::scale::to_scale(request.resource, current)?;
            let view = crate::scale::to_scale(request.resource, candidate)?;
            return self
                .webhooks
                .validate(request.attributes(Some(&view), Some(&old_view)))
                .await;
        }
        self.webhooks
            .validate(request.attributes(Some(candidate), Some(current)))
            .await
    }
}

/// §6.6: an applied configuration names the URL's type and, if it names an object, the URL's.
pub(super) fn check_applied_config(
    resource: &ResourceType,
    name: &str,
    applied: &Value,
) -> ApiResult<()> {
    check_type_meta(resource, applied)?;
    for field in ["apiVersion", "kind"] {
        if applied
            .get(field)
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(ApiError::bad_request(format!(
                "{field} must be set in an applied configuration (expected {:?})",
                if field == "kind" {
                    resource.kind.clone()
                } else {
                    resource.api_version()
                }
            )));
        }
    }
    let applied_name = object::name(applied);
    if !applied_name.is_empty() && applied_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({applied_name}) does not match the name on the URL ({name})"
        )));
    }
    Ok(())
}

/// A 409 with one `FieldManagerConflict` cause per conflicting field, as kubectl expects.
pub(super) fn apply_error(
    resource: &ResourceType,
    name: &str,
    error: patch::ApplyError,
) -> ApiError {
    match error {
        patch::ApplyError::Conflicts(conflicts) => {
            ApiError::new(409, "Conflict", patch::conflict_message(&conflicts)).with_details(
                Details {
                    name: name.to_string(),
                    group: resource.group.clone(),
                    kind: resource.plural.clone(),
                    causes: conflicts
                        .iter()
                        .map(|c| crate::status::Cause {
                            reason: "FieldManagerConflict".into(),
                            message: c.cause_message(),
                            field: c.field.clone(),
                        })
                        .collect(),
                    ..Details::default()
                },
            )
        }
        // Unreadable stored managedFields are the server's fault (upstream answers 500);
        // everything else is about the request.
        patch::ApplyError::Invalid(message)
            if message.starts_with("failed to decode managed fields") =>
        {
            ApiError::internal(message)
        }
        patch::ApplyError::Invalid(message) => ApiError::bad_request(message),
    }
}

pub(super) fn validate_field_manager(manager: &str) -> ApiResult<()> {
    if manager.chars().count() > 128 {
        return Err(ApiError::invalid(
            "PatchOptions",
            "meta.k8s.io",
            "",
            &[FieldError::too_long("fieldManager", manager, 128)],
        ));
    }
    Ok(())
}

/// Computes the object an update stores: server-owned metadata carried over from `current`,
/// status-subresource rules, the generation bump, and the terminating-object rules.
pub(super) fn prepare_update(
    resource: &ResourceType,
    current: &Value,
    mut requested: Value,
    subresource: Subresource,
) -> ApiResult<Value> {
    let name = object::name(current).to_string();
    let invalid =
        |errors: &[FieldError]| ApiError::invalid(&resource.kind, &resource.group, &name, errors);
    // U6: a uid in the body is a precondition.
    if let Some(uid) = object::meta_str(&requested, "uid").filter(|u| !u.is_empty())
        && uid != object::uid(current)
    {
        return Err(ApiError::conflict(
            target(resource, &name),
            &format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                object::uid(current)
            ),
        ));
    }
    // U3/U4: the deletion fields are the server's. A terminating object keeps its values
    // whatever the request says; setting them on a live object is an immutable-field error.
    let current_meta = object::metadata(current).cloned().unwrap_or_default();
    let requested_meta = object::metadata(&requested).cloned().unwrap_or_default();
    let mut errors = Vec::new();
    for field in ["deletionTimestamp", "deletionGracePeriodSeconds"] {
        let before = current_meta.get(field).filter(|v| !v.is_null());
        let after = requested_meta.get(field).filter(|v| !v.is_null());
        if let Some(after) = after
            && before != Some(after)
            && (before.is_none() || field == "deletionGracePeriodSeconds")
        {
            // U4: upstream prints an int64 bare (`Invalid value: 30`), a timestamp quoted.
            let field = format!("metadata.{field}");
            errors.push(if after.is_string() {
                FieldError::invalid(&field, value_text(after), "field is immutable")
            } else {
                FieldError::invalid_literal(&field, value_text(after), "field is immutable")
            });
        }
    }
    if !errors.is_empty() {
        return Err(invalid(&errors));
    }

    match subresource {
        Subresource::Status => {
            // U8: what else a /status write may change is the kind's status strategy.
            let mut next = match resource.status_writes {
                StatusWrites::StatusOnly => {
                    let mut next = current.clone();
                    // managedFields belong to the write itself, not to the stored object.
                    if let Some(managed) = object::metadata(&requested)
                        .and_then(|m| m.get("managedFields"))
                        .cloned()
                    {
                        metadata_mut(&mut next).insert("managedFields".into(), managed);
                    }
                    next
                }
                StatusWrites::KeepSpec {
                    labels,
                    owner_references,
                } => {
                    let mut next = requested.clone();
                    match current.get("spec") {
                        Some(spec) => next["spec"] = spec.clone(),
                        None => {
                            if let Some(map) = next.as_object_mut() {
                                map.remove("spec");
                            }
                        }
                    }
                    let kept = [("labels", labels), ("ownerReferences", owner_references)];
                    for (field, keep) in kept {
                        if keep {
                            match current_meta.get(field) {
                                Some(value) => {
                                    metadata_mut(&mut next).insert(field.into(), value.clone())
                                }
                                None => metadata_mut(&mut next).remove(field),
                            };
                        }
                    }
                    next
                }
            };
            match requested.get("status") {
                Some(status) => next["status"] = status.clone(),
                None => {
                    if let Some(map) = next.as_object_mut() {
                        map.remove("status");
                    }
                }
            }
            requested = next;
        }
        // The binding's own rules made the whole object (registry/pods.rs).
        Subresource::Binding => {}
        // `/approval` (CertificateSigningRequests): the kind's update strategy keeps all but
        // the conditions, below.
        Subresource::Approval => {}
        Subresource::Finalize => {
            // N1: /finalize changes only a namespace's spec.finalizers.
            let mut next = current.clone();
            let finalizers = requested
                .pointer("/spec/finalizers")
                .cloned()
                .unwrap_or(json!([]));
            next["spec"]["finalizers"] = finalizers;
            requested = next;
        }
        Subresource::Main | Subresource::Scale => {
            if resource.status_subresource {
                match current.get("status") {
                    Some(status) => requested["status"] = status.clone(),
                    None => {
                        if let Some(map) = requested.as_object_mut() {
                            map.remove("status");
                        }
                    }
                }
            }
            if resource.is_namespace() {
                // N1: ordinary updates cannot change spec.finalizers (silently restored).
                match current.pointer("/spec/finalizers") {
                    Some(finalizers) => requested["spec"]["finalizers"] = finalizers.clone(),
                    None => {
                        if let Some(spec) = requested.get_mut("spec").and_then(Value::as_object_mut)
                        {
                            spec.remove("finalizers");
                        }
                    }
                }
            }
        }
    }

    let metadata = metadata_mut(&mut requested);
    // F2 and api-surface §6.1: clients cannot change identity or deletion fields.
    for field in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "name",
        "namespace",
        "generation",
    ] {
        match current_meta.get(field) {
            Some(value) => metadata.insert(field.into(), value.clone()),
            None => metadata.remove(field),
        };
    }
    metadata.remove("selfLink");
    // A write that does not mention managedFields keeps the stored ones (upstream resets
    // them only when a request sets them explicitly).
    if !metadata.contains_key("managedFields")
        && let Some(managed) = current_meta.get("managedFields")
    {
        metadata.insert("managedFields".into(), managed.clone());
    }

    // U5: a terminating object may not gain finalizers (removing and reordering is fine).
    if object::is_terminating(current) {
        let before = object::finalizers(current);
        let added: Vec<String> = object::finalizers(&requested)
            .into_iter()
            .filter(|f| !before.contains(f))
            .collect();
        if !added.is_empty() {
            let quoted: Vec<String> = added.iter().map(|f| format!("{f:?}")).collect();
            return Err(invalid(&[FieldError::forbidden(
                "metadata.finalizers",
                &format!(
                    "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                    quoted.join(", ")
                ),
            )]));
        }
    }

    if let Some(prepare) = resource.update_strategy {
        let refused = prepare(subresource, current, &mut requested);
        if !refused.is_empty() {
            return Err(invalid(&refused));
        }
    }
    if let Some(hook) = resource.write_defaults {
        hook(&mut requested);
    }
    set_type_meta(resource, &mut requested);
    object::drop_empty_metadata_fields(&mut requested);
    if resource.tracks_generation && object::spec_part(&requested) != object::spec_part(current) {
        let generation = current_meta
            .get("generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        metadata_mut(&mut requested).insert("generation".into(), json!(generation + 1));
    }
    Ok(requested)
}

/// A value as upstream prints it in a field error: strings bare, others as JSON.
pub(super) fn value_text(value: &Value) -> String {
    value
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| value.to_string())
}

/// U7: an update that leaves a terminating object with no finalizers removes it instead,
/// unless a graceful period is still running; namespaces also need empty spec.finalizers.
pub(super) fn update_finishes_deletion(
    resource: &ResourceType,
    current: &Value,
    candidate: &Value,
) -> bool {
    let grace_running = object::metadata(current)
        .and_then(|m| m.get("deletionGracePeriodSeconds"))
        .and_then(Value::as_i64)
        .is_some_and(|g| g > 0);
    let namespace_held = resource.is_namespace()
        && candidate
            .pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|l| !l.is_empty());
    object::is_terminating(current)
        && object::finalizers(candidate).is_empty()
        && !grace_running
        && !namespace_held
}

/// FN3: built-in kinds require a domain-qualified finalizer unless it is a standard one.
pub(super) fn builtin_finalizer_errors(finalizer: &str, field: &str) -> Vec<FieldError> {
    let mut errors = validation::validate_finalizer_name(finalizer, field);
    if errors.is_empty()
        && !finalizer.contains('/')
        && !validation::STANDARD_FINALIZERS.contains(&finalizer)
    {
        errors.push(FieldError::invalid(
            field,
            finalizer,
            "name is neither a standard finalizer name nor is it fully qualified",
        ));
    }
    errors
}
