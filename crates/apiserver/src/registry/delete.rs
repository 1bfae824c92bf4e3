//! Delete and delete-collection: deletion-semantics §3 (D1–D14), the GC finalizers of §4,
//! namespace and CRD deletion, DeleteOptions and their preconditions.

use super::*;

impl Registry {
    /// DELETE of one object: deletion-semantics §3 (D1–D14), §4 (GC finalizers) and §6
    /// (graceful deletion), and §10 N3/N4 for namespaces.
    pub async fn delete(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
    ) -> ApiResult<DeleteResult> {
        self.delete_one(resource, namespace, name, options, false)
            .await
    }

    /// [`Registry::delete`]; `in_collection` for the items of a DELETECOLLECTION, whose
    /// admission requests name no object, as upstream's do.
    async fn delete_one(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
        in_collection: bool,
    ) -> ApiResult<DeleteResult> {
        validate_delete_options(options)?;
        let is_namespace = resource.is_namespace();
        // N3: the namespaces the system lives in cannot be deleted.
        if is_namespace && IMMORTAL_NAMESPACES.contains(&name) {
            return Err(ApiError::forbidden(format!(
                "namespaces \"{name}\" is forbidden: this namespace may not be deleted"
            ))
            .with_details(Details {
                name: name.to_string(),
                kind: "namespaces".into(),
                ..Details::default()
            }));
        }
        let orphan_warnings = job_orphan_warning(resource, options);
        let key = resource.object_key(namespace, name);
        let has_webhooks = self.webhooks.any_for(resource).await?;
        let (user, delete_options) = if has_webhooks {
            (
                self.admission_user(options.actor.as_ref()),
                delete_options_json(options),
            )
        } else {
            (Value::Null, Value::Null)
        };
        let mut attempts = 0;
        loop {
            attempts += 1;
            let mut warnings = orphan_warnings.clone();
            // D1
            let (kv, _) = self.store.get(key.as_bytes()).await?;
            let kv = kv.ok_or_else(|| ApiError::not_found(target(resource, name)))?;
            let stored = decode_as(resource, &kv)?;
            // A custom object stored in another version than the request's is converted
            // first, as upstream decodes it into the request's version: the answer and
            // admission see it in that version, and without its webhook the delete fails
            // before it changes anything. The delete itself works on the stored form.
            let shown = self.shown_for_delete(resource, &stored).await?;
            if is_namespace {
                // N4.1: a uid precondition is always in force, reported in storage's words.
                check_namespace_preconditions(name, &stored, &options.preconditions)?;
            } else {
                // D3.2: preconditions fail early, naming the Kind.
                check_delete_preconditions(resource, name, &stored, &options.preconditions)?;
            }

            let plan = if is_namespace {
                plan_namespace_delete(resource, &stored, options)
            } else if resource.is_crd() && !object::is_terminating(&stored) {
                plan_first_crd_delete(&stored)
            } else {
                plan_delete(resource, &stored, options)
            };
            let (next, remove_after) = match plan {
                // D4 / N4.3: nothing to write; answer with what is stored.
                DeletePlan::Pending => {
                    return Ok(DeleteResult {
                        body: in_request_version(shown.as_ref(), stored),
                        removed: false,
                        warnings,
                    });
                }
                DeletePlan::RemoveNow => (None, true),
                DeletePlan::Update {
                    object,
                    then_remove,
                } => (Some(object), then_remove),
            };
            // Admission webhooks on DELETE see the stored object as oldObject, once per
            // attempt that may write, as upstream's deleteValidation is called.
            if has_webhooks {
                let attributes = crate::admission::Attributes {
                    resource,
                    subresource: None,
                    operation: crate::admission::Operation::Delete,
                    namespace: if is_namespace { Some(name) } else { namespace },
                    name: if in_collection { "" } else { name },
                    object: None,
                    old_object: Some(shown.as_ref().unwrap_or(&stored)),
                    dry_run: options.dry_run,
                    options: &delete_options,
                    user: &user,
                    kind_override: None,
                };
                warnings.extend(self.webhooks.mutate(attributes, None).await?);
                warnings.extend(self.webhooks.validate(attributes).await?);
            }

            let mut last = stored.clone();
            let mut revision = kv.mod_revision;
            if let Some(mut updated) = next {
                // D6: the mark-terminating (or grace-shortening, or GC-finalizer) update.
                if !options.dry_run {
                    match self
                        .commit(
                            resource,
                            &key,
                            Precondition::ModRevision(kv.mod_revision),
                            Some(&stored),
                            Some(&updated),
                            options.actor.as_ref(),
                        )
                        .await?
                    {
                        WriteOutcome::Committed(result) => {
                            set_resource_version(&mut updated, result.revision);
                            revision = result.revision;
                        }
                        WriteOutcome::PreconditionFailed { current: None } => {
                            return Err(ApiError::not_found(target(resource, name)));
                        }
                        WriteOutcome::PreconditionFailed { current: Some(_) }
                            if attempts < UPDATE_RETRIES =>
                        {
                            continue;
                        }
                        WriteOutcome::PreconditionFailed { current: Some(_) } => {
                            return Err(ApiError::stale_resource_version(target(resource, name)));
                        }
                    }
                }
                if !remove_after {
                    // D7: the object stays; the body is the updated object.
                    return Ok(DeleteResult {
                        body: in_request_version(shown.as_ref(), updated),
                        removed: false,
                        warnings,
                    });
                }
                last = updated;
            }

            // D9: dry-run answers as the real delete would, touching nothing.
            if options.dry_run {
                return Ok(DeleteResult {
                    body: in_request_version(shown.as_ref(), deleted_body(resource, name, last)),
                    removed: true,
                    warnings,
                });
            }
            // D10: conditional on the revision observed (D8: rebased onto our own update);
            // the deleted object carries the revision of the delete.
            match self
                .commit(
                    resource,
                    &key,
                    Precondition::ModRevision(revision),
                    Some(&last),
                    None,
                    options.actor.as_ref(),
                )
                .await?
            {
                WriteOutcome::Committed(result) => {
                    set_resource_version(&mut last, result.revision);
                    return Ok(DeleteResult {
                        body: in_request_version(
                            shown.as_ref(),
                            deleted_body(resource, name, last),
                        ),
                        removed: true,
                        warnings,
                    });
                }
                // D7/D11: after our own grace-0 update, another remover winning is fine.
                WriteOutcome::PreconditionFailed { current: None }
                    if revision != kv.mod_revision =>
                {
                    return Ok(DeleteResult {
                        body: in_request_version(
                            shown.as_ref(),
                            deleted_body(resource, name, last),
                        ),
                        removed: true,
                        warnings,
                    });
                }
                WriteOutcome::PreconditionFailed { current: None } => {
                    return Err(ApiError::not_found(target(resource, name)));
                }
                WriteOutcome::PreconditionFailed { current: Some(_) }
                    if attempts < UPDATE_RETRIES =>
                {
                    continue;
                }
                WriteOutcome::PreconditionFailed { current: Some(_) } => {
                    return Err(ApiError::stale_resource_version(target(resource, name)));
                }
            }
        }
    }

    /// DELETECOLLECTION (C1–C5): every object the selectors match goes through the
    /// single-object [`Registry::delete`]; the answer lists the items as they were before.
    /// With `limit`, only that one page is processed and the answer carries `continue`.
    pub async fn delete_collection(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        list_options: &ListOptions,
        options: &DeleteOptions,
    ) -> ApiResult<(Value, Vec<String>)> {
        if resource.namespaced && namespace.is_none() {
            // C1: the all-namespaces path of a namespaced kind serves list and watch only.
            return Err(ApiError::method_not_allowed(
                "the server does not allow this method on the requested resource",
            ));
        }
        validate_delete_options(options)?;
        if resource.is_namespace() {
            // N2
            return Err(ApiError::method_not_allowed(
                "the namespaces resource does not support deletecollection",
            ));
        }
        let listed = self.list(resource, namespace, list_options).await?;
        let items = listed
            .get("items")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        // C3: every item goes through the single-object delete. Upstream runs
        // `--delete-collection-workers` (default 1) at a time; running several lets the
        // store's group commit share one fsync among them, which is what makes a namespace
        // of 10 000 objects go in seconds. Per-item NotFound is ignored; the first other
        // error is the answer (items already deleted stay deleted, as upstream).
        let mut pending = Vec::with_capacity(items.len());
        for item in &items {
            let name = object::name(item).to_string();
            let item_namespace = object::meta_str(item, "namespace").map(str::to_string);
            pending.push(async move {
                self.delete_one(
                    resource,
                    item_namespace.as_deref().or(namespace),
                    &name,
                    options,
                    true,
                )
                .await
            });
        }
        // Collected first: a closure inside the stream trips the compiler's Send inference
        // for the spawned controllers that call this.
        let mut deletions =
            futures::stream::iter(pending).buffer_unordered(DELETE_COLLECTION_WORKERS);
        while let Some(result) = deletions.next().await {
            match result {
                Ok(_) => {}
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok((listed, job_orphan_warning(resource, options)))
    }
}

/// What one DELETE does to a stored object.
pub(super) enum DeletePlan {
    /// D4: nothing to write.
    Pending,
    /// D5: no update needed; remove it.
    RemoveNow,
    /// D6: write `object`; then remove it too when `then_remove` (graceful with grace 0).
    Update { object: Value, then_remove: bool },
}

/// D3.3–D7 for every kind but namespaces.
pub(super) fn plan_delete(
    resource: &ResourceType,
    stored: &Value,
    options: &DeleteOptions,
) -> DeletePlan {
    let graceful = if resource.graceful {
        deletion::check_graceful(stored, options, chrono::Utc::now())
    } else {
        Graceful::No
    };
    if graceful == Graceful::Pending {
        return DeletePlan::Pending;
    }
    let stored_finalizers = object::finalizers(stored);
    let gc_change = deletion::gc_finalizers(&stored_finalizers, resource.gc_policy, options);
    let finalizers = gc_change
        .clone()
        .unwrap_or_else(|| stored_finalizers.clone());
    let graceful_set = matches!(graceful, Graceful::Set { .. });
    if !graceful_set && stored_finalizers.is_empty() && gc_change.is_none() {
        return DeletePlan::RemoveNow;
    }
    if !graceful_set && finalizers.is_empty() {
        // D6: the GC finalizers went away and nothing else holds the object.
        return DeletePlan::RemoveNow;
    }
    let mut updated = stored.clone();
    let metadata = metadata_mut(&mut updated);
    if gc_change.is_some() {
        if finalizers.is_empty() {
            metadata.remove("finalizers");
        } else {
            metadata.insert("finalizers".into(), json!(finalizers));
        }
    }
    let first_time = !object::is_terminating(stored);
    match &graceful {
        Graceful::Set {
            deletion_timestamp,
            grace_seconds,
            ..
        } => {
            metadata.insert("deletionTimestamp".into(), json!(deletion_timestamp));
            metadata.insert("deletionGracePeriodSeconds".into(), json!(grace_seconds));
        }
        _ => {
            // markAsDeleting: now, unless already set to a time not after now; grace 0.
            let now = chrono::Utc::now();
            let keep = metadata
                .get("deletionTimestamp")
                .and_then(Value::as_str)
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .is_some_and(|t| t.with_timezone(&chrono::Utc) <= now);
            if !keep {
                metadata.insert("deletionTimestamp".into(), json!(object::timestamp(now)));
            }
            metadata.insert("deletionGracePeriodSeconds".into(), json!(0));
        }
    }
    // D14: generation bumps on first entry into terminating, for kinds that track it.
    if first_time
        && let Some(generation) = metadata
            .get("generation")
            .and_then(Value::as_i64)
            .filter(|g| *g > 0)
    {
        metadata.insert("generation".into(), json!(generation + 1));
    }
    // D7: finalizers keep the object; so does a grace period still running.
    let grace_zero = matches!(
        graceful,
        Graceful::Set {
            grace_seconds: 0,
            ..
        }
    );
    let then_remove = finalizers.is_empty() && grace_zero;
    if updated == *stored {
        // A repeated DELETE that changes nothing writes nothing (scenario 4).
        return if then_remove {
            DeletePlan::RemoveNow
        } else {
            DeletePlan::Pending
        };
    }
    DeletePlan::Update {
        object: updated,
        then_remove,
    }
}

/// N4.2–N4.4: a namespace is marked Terminating (no grace period) and stays until its
/// `spec.finalizers` and `metadata.finalizers` are empty.
pub(super) fn plan_namespace_delete(
    resource: &ResourceType,
    stored: &Value,
    options: &DeleteOptions,
) -> DeletePlan {
    let spec_finalizers = stored
        .pointer("/spec/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|l| !l.is_empty());
    if object::is_terminating(stored) {
        if spec_finalizers {
            return DeletePlan::Pending;
        }
        // N4.4: finalized already: the generic delete, whose policy may drop the GC
        // finalizers that still hold the namespace (P6) and remove it at once.
        return plan_delete(resource, stored, options);
    }
    let mut updated = stored.clone();
    let stored_finalizers = object::finalizers(stored);
    let wanted = deletion::namespace_gc_finalizer(options);
    if let Some(wanted) = wanted {
        let mut finalizers: Vec<String> = stored_finalizers
            .into_iter()
            .filter(|f| f != deletion::ORPHAN_FINALIZER && f != deletion::FOREGROUND_FINALIZER)
            .collect();
        finalizers.push(wanted.to_string());
        metadata_mut(&mut updated).insert("finalizers".into(), json!(finalizers));
    }
    if !object::is_terminating(stored) {
        metadata_mut(&mut updated).insert("deletionTimestamp".into(), json!(object::now()));
    }
    updated["status"]["phase"] = json!("Terminating");
    if updated == *stored {
        return DeletePlan::Pending;
    }
    DeletePlan::Update {
        object: updated,
        then_remove: false,
    }
}

/// M7: the first DELETE of a CRD marks it terminating and adds the cleanup finalizer, which
/// the CRD controller removes once every instance is gone. (Upstream's CRD storage does this
/// in place of the generic delete; later DELETEs take the generic path.)
pub(super) fn plan_first_crd_delete(stored: &Value) -> DeletePlan {
    let mut updated = stored.clone();
    let metadata = metadata_mut(&mut updated);
    metadata.insert("deletionTimestamp".into(), json!(object::now()));
    metadata.insert("deletionGracePeriodSeconds".into(), json!(0));
    let mut finalizers = object::finalizers(stored);
    if !finalizers
        .iter()
        .any(|f| f == crate::crd::definition::CLEANUP_FINALIZER)
    {
        finalizers.push(crate::crd::definition::CLEANUP_FINALIZER.to_string());
    }
    metadata.insert("finalizers".into(), json!(finalizers));
    let condition = json!({
        "type": "Terminating", "status": "True", "lastTransitionTime": object::now(),
        "reason": "InstanceDeletionPending",
        "message": "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
    });
    if !updated.get("status").is_some_and(Value::is_object) {
        updated["status"] = json!({});
    }
    let mut conditions: Vec<Value> = updated["status"]
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    conditions.retain(|c| c.get("type").and_then(Value::as_str) != Some("Terminating"));
    conditions.push(condition);
    updated["status"]["conditions"] = json!(conditions);
    DeletePlan::Update {
        object: updated,
        then_remove: false,
    }
}

/// P8: deleting Jobs without a policy orphans their pods; upstream says so in a warning.
pub(super) fn job_orphan_warning(resource: &ResourceType, options: &DeleteOptions) -> Vec<String> {
    if resource.group == "batch"
        && resource.plural == "jobs"
        && options.propagation_policy.is_none()
        && options.orphan_dependents.is_none()
    {
        vec![JOB_ORPHAN_WARNING.to_string()]
    } else {
        Vec::new()
    }
}

/// N4.1: the namespace precondition failure, worded as the storage layer words it.
pub(super) fn check_namespace_preconditions(
    name: &str,
    stored: &Value,
    preconditions: &Preconditions,
) -> ApiResult<()> {
    let conflict = |message: String| {
        ApiError::conflict(
            Target {
                group: "",
                resource: "namespaces",
                name,
            },
            &message,
        )
    };
    let actual_uid = object::uid(stored);
    if let Some(uid) = preconditions.uid.as_deref().filter(|u| !u.is_empty())
        && uid != actual_uid
    {
        return Err(conflict(format!(
            "Precondition failed: UID in precondition: {uid}, UID in object meta: {actual_uid}"
        )));
    }
    let actual_rv = object::meta_str(stored, "resourceVersion").unwrap_or_default();
    if let Some(rv) = preconditions
        .resource_version
        .as_deref()
        .filter(|r| !r.is_empty())
        && rv != actual_rv
    {
        return Err(conflict(format!(
            "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {actual_rv}"
        )));
    }
    Ok(())
}

/// D12: the deleted object for kinds with the return-deleted-object flag, else a success
/// Status naming the plural resource.
/// The answer of a DELETE in the request's version: the stored object's content as converted
/// once (`shown`), with the metadata the delete left it with (a conversion webhook may change
/// no other metadata). A `Status` answer, or an object that needed no conversion, is kept.
fn in_request_version(shown: Option<&Value>, body: Value) -> Value {
    match shown {
        Some(shown) if body.get("kind") == shown.get("kind") => {
            let mut answer = shown.clone();
            if let (Some(map), Some(metadata)) = (answer.as_object_mut(), body.get("metadata")) {
                map.insert("metadata".into(), metadata.clone());
            }
            answer
        }
        _ => body,
    }
}

pub(super) fn deleted_body(resource: &ResourceType, name: &str, last: Value) -> Value {
    if resource.returns_deleted_object {
        last
    } else {
        success_status(target(resource, name), object::uid(&last))
    }
}

pub(super) fn check_delete_preconditions(
    resource: &ResourceType,
    name: &str,
    stored: &Value,
    preconditions: &Preconditions,
) -> ApiResult<()> {
    let kind = if resource.group.is_empty() {
        resource.kind.clone()
    } else {
        format!("{}.{}", resource.kind, resource.group)
    };
    let fail = |message: String| {
        ApiError::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {kind} \"{name}\": {message}"),
        )
        .with_details(Details {
            name: name.to_string(),
            group: resource.group.clone(),
            kind: resource.kind.clone(),
            ..Details::default()
        })
    };
    if let Some(uid) = preconditions.uid.as_deref().filter(|u| !u.is_empty()) {
        let actual = object::uid(stored);
        if uid != actual {
            return Err(fail(format!(
                "the UID in the precondition ({uid}) does not match the UID in record ({actual}). The object might have been deleted and then recreated"
            )));
        }
    }
    if let Some(rv) = preconditions
        .resource_version
        .as_deref()
        .filter(|r| !r.is_empty())
    {
        let actual = object::meta_str(stored, "resourceVersion").unwrap_or_default();
        if rv != actual {
            return Err(fail(format!(
                "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({actual}). The object might have been modified"
            )));
        }
    }
    Ok(())
}

/// H3: DeleteOptions validation, answered as a 422 about `DeleteOptions.meta.k8s.io`.
pub(super) fn validate_delete_options(options: &DeleteOptions) -> ApiResult<()> {
    let mut errors = Vec::new();
    if options.orphan_dependents.is_some() && options.propagation_policy.is_some() {
        errors.push(FieldError::invalid(
            "propagationPolicy",
            options.propagation_policy.clone().unwrap_or_default(),
            "orphanDependents and deletionPropagation cannot be both set",
        ));
    }
    if let Some(policy) = options.propagation_policy.as_deref()
        && !matches!(policy, "Foreground" | "Background" | "Orphan")
    {
        errors.push(FieldError::not_supported(
            "propagationPolicy",
            policy,
            &["Foreground", "Background", "Orphan", "nil"],
        ));
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(
            "DeleteOptions",
            "meta.k8s.io",
            "",
            &errors,
        ))
    }
}
