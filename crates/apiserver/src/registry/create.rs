//! Create (POST): admission, validation, generated names, and the namespace's consent (N5).

use super::*;

impl Registry {
    /// POST: api-surface §6.2.
    pub async fn create(
        &self,
        resource: &ResourceType,
        namespace: Option<&str>,
        mut object: Value,
        options: &WriteOptions,
    ) -> ApiResult<Written> {
        check_type_meta(resource, &object)?;
        if resource.definition_terminating {
            return Err(ApiError::method_not_allowed(
                "create not allowed while custom resource definition is terminating",
            ));
        }
        let namespace = effective_namespace(resource, namespace, &object)?;

        let metadata = metadata_mut(&mut object);
        let generate_name = metadata
            .get("generateName")
            .and_then(Value::as_str)
            .map(str::to_string);
        let mut name = metadata
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let mut errors = Vec::new();
        let name_was_generated =
            name.is_empty() && generate_name.as_deref().is_some_and(|g| !g.is_empty());
        if name.is_empty()
            && let Some(prefix) = generate_name.as_deref().filter(|g| !g.is_empty())
        {
            errors.extend(validation::validate_generate_name(
                prefix,
                resource.name_rule,
            ));
            name = generated_name(prefix);
        }
        if metadata
            .get("resourceVersion")
            .and_then(Value::as_str)
            .is_some_and(|rv| !rv.is_empty())
        {
            return Err(ApiError::bad_request(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        // Server-owned fields: anything the client sent is replaced (F2).
        metadata.insert("name".into(), json!(name));
        if let Some(ns) = &namespace {
            metadata.insert("namespace".into(), json!(ns));
        } else {
            metadata.remove("namespace");
        }
        metadata.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        metadata.insert("creationTimestamp".into(), json!(object::now()));
        if resource.tracks_generation {
            metadata.insert("generation".into(), json!(1));
        } else {
            metadata.remove("generation");
        }
        for field in [
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
        ] {
            metadata.remove(field);
        }
        if let Some(manager) = &options.field_manager {
            validate_field_manager(manager)?;
        }
        if resource.status_subresource && !resource.group.is_empty() {
            // api-surface §6.2: a create ignores .status where a status subresource exists
            // (built-in workloads start with an empty status).
            if let Some(map) = object.as_object_mut() {
                map.remove("status");
            }
        }
        if let Some(hook) = resource.defaulting {
            hook(&mut object);
        }
        if let Some(hook) = resource.write_defaults {
            hook(&mut object);
        }
        set_type_meta(resource, &mut object);
        object::drop_empty_metadata_fields(&mut object);

        // Admission webhooks (crate::admission). Mutating ones see the object as upstream's
        // do, before the server fills in its identity (and, for a generated name, without
        // one); what they change then passes the same defaulting and validation as the
        // client's content.
        let has_webhooks = self.webhooks.any_for(resource).await?;
        // Built only when a webhook may be called: creates without webhooks pay nothing.
        let (user, create_options) = if has_webhooks {
            (
                self.admission_user(options.actor.as_ref()),
                write_options_json(options),
            )
        } else {
            (Value::Null, Value::Null)
        };
        let admission_namespace = if resource.is_namespace() {
            None
        } else {
            namespace.as_deref()
        };
        let mut webhook_warnings = Vec::new();
        if has_webhooks {
            let mut seen = object.clone();
            let seen_metadata = metadata_mut(&mut seen);
            for field in ["uid", "creationTimestamp", "generation"] {
                seen_metadata.remove(field);
            }
            if name_was_generated {
                seen_metadata.remove("name");
            }
            let before = seen.clone();
            let attributes = crate::admission::Attributes {
                resource,
                subresource: None,
                operation: crate::admission::Operation::Create,
                namespace: admission_namespace,
                name: if name_was_generated { "" } else { &name },
                object: None,
                old_object: None,
                dry_run: options.dry_run,
                options: &create_options,
                user: &user,
                kind_override: None,
            };
            webhook_warnings = self.webhooks.mutate(attributes, Some(&mut seen)).await?;
            if seen != before {
                object = restore_create_metadata(resource, &object, seen);
            }
        }
        // The kind's own PrepareForCreate runs after mutating admission, as upstream's
        // strategy does: what it owns (a CSR's requester, its empty status) no webhook sets.
        if let Some(prepare) = resource.create_strategy {
            prepare(&mut object, options.actor.as_ref())?;
        }
        let admission = admit::admit_content(resource, &mut object, None, options)?;
        admit::check_permissions(
            &self.catalog,
            resource,
            Subresource::Main,
            &object,
            None,
            options,
        )?;
        errors.extend(admission.errors);
        if let Some(manager) = &options.field_manager {
            admit::record_manager(resource, None, &mut object, manager, None);
        }
        let mut warnings = webhook_warnings;
        warnings.extend(admission.warnings);
        warnings.extend(
            admit::unclaimed_finalizer_warnings(
                &self.store,
                &self.catalog,
                resource,
                &object,
                None,
            )
            .await,
        );

        errors.extend(validate_object(resource, &object, namespace.as_deref()));
        if !errors.is_empty() {
            return Err(ApiError::invalid(
                &resource.kind,
                &resource.group,
                &name,
                &errors,
            ));
        }
        // N5: admission runs before a name is generated, so it names the generateName.
        let shown = match (&generate_name, name_was_generated) {
            (Some(prefix), true) => prefix.clone(),
            _ => name.clone(),
        };
        // The namespace as a recent create saw it, if one did: the guard below makes a stale
        // entry cost a fresh check, never a create in a namespace that no longer accepts it.
        // A dry run writes nothing, so nothing would check a remembered guard: it reads.
        let remembered = namespace
            .as_deref()
            .filter(|_| !options.dry_run)
            .and_then(|ns| self.admitted_namespaces.get(ns));
        let mut guard_remembered = remembered.is_some();
        let mut namespace_guard = match &namespace {
            Some(ns) => Some(match remembered {
                Some(mod_revision) => Guard {
                    key: namespace_key(ns).into_bytes(),
                    mod_revision,
                },
                None => {
                    self.check_namespace_accepts_creates(ns, resource, &shown)
                        .await?
                }
            }),
            None => None,
        };
        // Validating webhooks see the object as it will be stored, generated name included
        // (upstream's createValidation runs after the strategy filled it in).
        if has_webhooks {
            let attributes = crate::admission::Attributes {
                resource,
                subresource: None,
                operation: crate::admission::Operation::Create,
                namespace: admission_namespace,
                name: &name,
                object: Some(&object),
                old_object: None,
                dry_run: options.dry_run,
                options: &create_options,
                user: &user,
                kind_override: None,
            };
            warnings.extend(self.webhooks.validate(attributes).await?);
        }

        let generated = name_was_generated;
        let mut attempts = 0;
        let mut namespace_checks = 1;
        loop {
            attempts += 1;
            let key = resource.object_key(namespace.as_deref(), &name);
            let clash = if options.dry_run {
                // The object size limit holds for a dry run too; a real write checks it as
                // it encodes the object.
                encode_as(resource, &object)?;
                match self.store.get(key.as_bytes()).await? {
                    (Some(existing), _) => Some(Some(existing)),
                    (None, _) => None,
                }
            } else {
                // The write commits only if the namespace is still as it was checked: a
                // create can never land once the namespace's deletion has begun, so the
                // namespace controller's last look at its content cannot miss it.
                let outcome = self
                    .commit_guarded(
                        resource,
                        &key,
                        Precondition::MustNotExist,
                        None,
                        Some(&object),
                        options.actor.as_ref(),
                        namespace_guard.clone().into_iter().collect(),
                    )
                    .await?;
                let Some(outcome) = outcome else {
                    // The namespace changed since it was checked: check it again. A
                    // remembered guard that went stale is not one of the allowed changes.
                    if !std::mem::replace(&mut guard_remembered, false) {
                        namespace_checks += 1;
                    }
                    let ns = namespace.as_deref().unwrap_or_default();
                    if namespace_checks > NAMESPACE_CHECKS {
                        return Err(ApiError::conflict(
                            target(resource, &name),
                            &format!(
                                "namespace {ns} kept changing while the object was created; try again"
                            ),
                        ));
                    }
                    namespace_guard = Some(
                        self.check_namespace_accepts_creates(ns, resource, &shown)
                            .await?,
                    );
                    attempts -= 1;
                    continue;
                };
                match outcome {
                    WriteOutcome::Committed(result) => {
                        set_resource_version(&mut object, result.revision);
                        return Ok(Written {
                            object: served(resource, object),
                            warnings,
                            created: true,
                        });
                    }
                    WriteOutcome::PreconditionFailed { current } => Some(current),
                }
            };
            let Some(existing) = clash else {
                return Ok(Written {
                    object: served(resource, object),
                    warnings,
                    created: true,
                });
            };
            // U1: a generated name that clashes is generated again, up to 8 tries.
            if generated && attempts < GENERATE_NAME_ATTEMPTS {
                name =
                    generated_name(object::meta_str(&object, "generateName").unwrap_or_default());
                metadata_mut(&mut object).insert("name".into(), json!(name));
                continue;
            }
            let mut error = ApiError::already_exists(target(resource, &name));
            if generated {
                error.message = format!(
                    "{}, the server was not able to generate a unique name for the object",
                    error.message
                );
                if let Some(details) = error.details.as_mut() {
                    details.retry_after_seconds = Some(1);
                }
            } else if existing
                .as_ref()
                .and_then(|kv| decode(kv).ok())
                .is_some_and(|o| object::is_terminating(&o))
            {
                // U2
                error.message = format!("object is being deleted: {}", error.message);
            }
            return Err(error);
        }
    }

    /// Namespaced creates need a namespace that exists and is not terminating (N5). Returns
    /// the guard that keeps the create's write to the namespace as checked.
    pub(super) async fn check_namespace_accepts_creates(
        &self,
        namespace: &str,
        resource: &ResourceType,
        name: &str,
    ) -> ApiResult<Guard> {
        let key = namespace_key(namespace);
        let (kv, _) = self.store.get(key.as_bytes()).await?;
        let Some(kv) = kv else {
            self.admitted_namespaces.forget(namespace);
            return Err(ApiError::namespace_not_found(namespace));
        };
        let ns = decode(&kv)?;
        if object::is_terminating(&ns) {
            self.admitted_namespaces.forget(namespace);
            return Err(ApiError::forbidden(format!(
                "{} \"{name}\" is forbidden: unable to create new content in namespace {namespace} because it is being terminated",
                target(resource, name).qualified_resource()
            ))
            .with_details(Details {
                name: name.to_string(),
                group: resource.group.clone(),
                kind: resource.plural.clone(),
                causes: vec![crate::status::Cause {
                    reason: "NamespaceTerminating".into(),
                    message: format!("namespace {namespace} is being terminated"),
                    field: "metadata.namespace".into(),
                }],
                ..Details::default()
            }));
        }
        self.admitted_namespaces
            .remember(namespace, kv.mod_revision);
        Ok(Guard {
            key: key.into_bytes(),
            mod_revision: kv.mod_revision,
        })
    }
}

/// Where a namespace is stored.
fn namespace_key(namespace: &str) -> String {
    format!("/registry/core/namespaces/{namespace}")
}

/// The object a create stores after mutating webhooks changed `mutated`: the server's
/// identity and deletion fields as the create set them (a webhook cannot change them, as
/// upstream's strategy sets them after admission), then the kind's create-time rules and
/// defaults again, as upstream decodes and defaults a patched object.
fn restore_create_metadata(resource: &ResourceType, original: &Value, mut mutated: Value) -> Value {
    let original_meta = object::metadata(original).cloned().unwrap_or_default();
    if !mutated.is_object() {
        return original.clone();
    }
    let metadata = metadata_mut(&mut mutated);
    for field in [
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "generation",
    ] {
        match original_meta.get(field) {
            Some(value) => metadata.insert(field.into(), value.clone()),
            None => metadata.remove(field),
        };
    }
    for field in [
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
        "resourceVersion",
    ] {
        metadata.remove(field);
    }
    if resource.status_subresource
        && !resource.group.is_empty()
        && let Some(map) = mutated.as_object_mut()
    {
        map.remove("status");
    }
    if let Some(hook) = resource.defaulting {
        hook(&mut mutated);
    }
    if let Some(hook) = resource.write_defaults {
        hook(&mut mutated);
    }
    set_type_meta(resource, &mut mutated);
    object::drop_empty_metadata_fields(&mut mutated);
    mutated
}

#[cfg(test)]
mod tests {
    //! The race N5 leaves open when the namespace is checked, then the object written: the
    //! namespace's deletion begins in between. A real store cannot be paused there, so a
    //! wrapper around a real `RedbStore` marks the namespace terminating just before it
    //! passes on the create's write.

    use std::ops::Range;
    use std::sync::atomic::{AtomicBool, Ordering};

    use async_trait::async_trait;
    use finale_store::{RangeResponse, RedbStore, RedbStoreOptions, StoreResult, WatchStream};
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::watch_cache::WatchCacheOptions;

    /// Delegates to a real store; while `armed`, the next write (of any kind) is preceded by
    /// a write that sets the namespace `doomed`'s deletionTimestamp, as a concurrent DELETE
    /// would.
    struct DeleteNamespaceFirst {
        inner: Arc<RedbStore>,
        armed: AtomicBool,
    }

    const DOOMED: &[u8] = b"/registry/core/namespaces/doomed";

    impl DeleteNamespaceFirst {
        async fn stage(&self) -> StoreResult<()> {
            if !self.armed.swap(false, Ordering::SeqCst) {
                return Ok(());
            }
            let (namespace, _) = self.inner.get(DOOMED).await?;
            let mut namespace: Value =
                serde_json::from_slice(&namespace.expect("the namespace exists").value)
                    .expect("JSON");
            namespace["metadata"]["deletionTimestamp"] = json!("2026-11-24T00:00:00Z");
            let value = serde_json::to_vec(&namespace).expect("JSON");
            self.inner
                .write(
                    WriteOp::Put {
                        key: DOOMED.to_vec(),
                        value,
                    },
                    Precondition::None,
                )
                .await
                .map(drop)
        }
    }

    #[async_trait]
    impl Store for DeleteNamespaceFirst {
        async fn get(&self, key: &[u8]) -> StoreResult<(Option<KeyValue>, Revision)> {
            self.inner.get(key).await
        }
        async fn range(&self, request: RangeRequest) -> StoreResult<RangeResponse> {
            self.inner.range(request).await
        }
        async fn write(
            &self,
            op: WriteOp,
            precondition: Precondition,
        ) -> StoreResult<WriteOutcome> {
            self.stage().await?;
            self.inner.write(op, precondition).await
        }
        async fn write_all_guarded(
            &self,
            writes: Vec<(WriteOp, Precondition)>,
            guards: Vec<Guard>,
        ) -> StoreResult<TxnOutcome> {
            self.stage().await?;
            self.inner.write_all_guarded(writes, guards).await
        }
        async fn watch(&self, range: Range<Vec<u8>>, after: Revision) -> StoreResult<WatchStream> {
            self.inner.watch(range, after).await
        }
        async fn current_revision(&self) -> StoreResult<Revision> {
            self.inner.current_revision().await
        }
        async fn compacted_revision(&self) -> StoreResult<Revision> {
            self.inner.compacted_revision().await
        }
        async fn compact(&self, revision: Revision) -> StoreResult<()> {
            self.inner.compact(revision).await
        }
    }

    #[tokio::test]
    async fn a_create_racing_its_namespaces_deletion_is_refused_and_stores_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Arc::new(DeleteNamespaceFirst {
            inner: RedbStore::open(dir.path(), RedbStoreOptions::default()).expect("open"),
            armed: AtomicBool::new(false),
        });
        let shutdown = CancellationToken::new();
        let cache = WatchCache::start(
            Arc::clone(&store) as Arc<dyn Store>,
            WatchCacheOptions::default(),
            shutdown.clone(),
        )
        .await
        .expect("start the cache");
        let catalog = Arc::new(Catalog::with_builtins());
        let registry = Registry::new(
            Arc::clone(&store) as Arc<dyn Store>,
            Arc::clone(&catalog),
            cache,
        );
        let namespaces = catalog.lookup("", "v1", "namespaces").expect("namespaces");
        let configmaps = catalog.lookup("", "v1", "configmaps").expect("configmaps");
        let options = WriteOptions::default();
        registry
            .create(
                &namespaces,
                None,
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "doomed"}}),
                &options,
            )
            .await
            .expect("create the namespace");
        let config_map = |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
        registry
            .create(&configmaps, Some("doomed"), config_map("before"), &options)
            .await
            .expect("a create in an active namespace");

        // The namespace's deletion begins between the create's check and its write.
        store.armed.store(true, Ordering::SeqCst);
        let refused = registry
            .create(&configmaps, Some("doomed"), config_map("racing"), &options)
            .await
            .expect_err("the namespace is terminating when the create would commit");
        assert!(
            !store.armed.load(Ordering::SeqCst),
            "the race was not staged"
        );
        assert_eq!(refused.code, 403, "{refused:?}");
        assert!(
            refused.message.contains("because it is being terminated"),
            "{}",
            refused.message
        );
        let (stored, _) = store
            .get(b"/registry/core/configmaps/doomed/racing")
            .await
            .expect("get");
        assert!(stored.is_none(), "the racing create was stored");
        shutdown.cancel();
    }
}
