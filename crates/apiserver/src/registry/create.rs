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
        let admission = admit::admit_content(resource, &mut object, None, options)?;
        errors.extend(admission.errors);
        if let Some(manager) = &options.field_manager {
            admit::record_manager(resource, None, &mut object, manager, None);
        }
        let mut warnings = admission.warnings;
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
        if let Some(ns) = &namespace {
            // N5: admission runs before a name is generated, so it names the generateName.
            let shown = match (&generate_name, name_was_generated) {
                (Some(prefix), true) => prefix.as_str(),
                _ => name.as_str(),
            };
            self.check_namespace_accepts_creates(ns, resource, shown)
                .await?;
        }

        let generated = name_was_generated;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let key = resource.object_key(namespace.as_deref(), &name);
            let bytes = encode(&object)?;
            let clash = if options.dry_run {
                match self.store.get(key.as_bytes()).await? {
                    (Some(existing), _) => Some(Some(existing)),
                    (None, _) => None,
                }
            } else {
                match self
                    .commit(
                        &key,
                        WriteOp::Put {
                            key: key.clone().into_bytes(),
                            value: bytes,
                        },
                        Precondition::MustNotExist,
                        None,
                        Some(&object),
                        options.actor.as_ref(),
                    )
                    .await?
                {
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

    /// Namespaced creates need a namespace that exists and is not terminating (N5).
    pub(super) async fn check_namespace_accepts_creates(
        &self,
        namespace: &str,
        resource: &ResourceType,
        name: &str,
    ) -> ApiResult<()> {
        let key = format!("/registry/core/namespaces/{namespace}");
        let (kv, _) = self.store.get(key.as_bytes()).await?;
        let kv = kv.ok_or_else(|| ApiError::namespace_not_found(namespace))?;
        let ns = decode(&kv)?;
        if object::is_terminating(&ns) {
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
        Ok(())
    }
}
