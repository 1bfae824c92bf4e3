//! The Pod subresources that move a Pod through its life: `pods/binding` (the scheduler puts
//! a Pod on a Node) and `pods/eviction` (a graceful delete asked for politely, by a drain or
//! the node lifecycle controller).
//!
//! Both are upstream's `BindingREST` and `EvictionREST` in `pkg/registry/core/pod/storage`:
//! - a binding sets `spec.nodeName` once, and only on a Pod that is not being deleted; it
//!   adds `PodScheduled=True` in the same write;
//! - an eviction marks the Pod `DisruptionTarget=True` (reason `EvictionByEvictionAPI`) and
//!   deletes it with the eviction's DeleteOptions, so the agent still gets its grace period.
//!
//! # Caveats
//! - PodDisruptionBudgets are not served, so no eviction is ever refused with 429.

use super::*;

/// The condition a binding sets, as the scheduler's `PodScheduled=True`.
const POD_SCHEDULED: &str = "PodScheduled";

impl Registry {
    /// POST `pods/NAME/binding`: binds `name` to `binding.target.name`.
    pub async fn bind_pod(
        &self,
        namespace: &str,
        name: &str,
        binding: &Value,
        options: &WriteOptions,
    ) -> ApiResult<Value> {
        let pods = self.pods()?;
        let body_name = object::name(binding);
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(
                "name in URL does not match name in Binding object",
            ));
        }
        let node = binding
            .pointer("/target/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let target_kind = binding
            .pointer("/target/kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut errors = Vec::new();
        if node.is_empty() {
            errors.push(FieldError::required("target.name", ""));
        }
        if !target_kind.is_empty() && target_kind != "Node" {
            errors.push(FieldError::not_supported(
                "target.kind",
                target_kind,
                &["Node", "<empty>"],
            ));
        }
        if !errors.is_empty() {
            return Err(ApiError::invalid("Binding", "", name, &errors));
        }
        let uid_precondition = object::meta_str(binding, "uid")
            .filter(|uid| !uid.is_empty())
            .map(str::to_string);
        let annotations = object::metadata(binding)
            .and_then(|meta| meta.get("annotations"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let conflict = |why: String| {
            ApiError::conflict(
                Target {
                    group: "",
                    resource: "pods/binding",
                    name,
                },
                &why,
            )
        };
        let written = self
            .guarded_update(
                &pods,
                Some(namespace),
                name,
                None,
                Subresource::Binding,
                options,
                |current| {
                    if let Some(uid) = &uid_precondition
                        && uid != object::uid(current)
                    {
                        return Err(conflict(format!(
                            "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                            object::uid(current)
                        )));
                    }
                    if object::is_terminating(current) {
                        return Err(conflict(format!(
                            "pod {name} is being deleted, cannot be assigned to a host"
                        )));
                    }
                    let assigned = current
                        .pointer("/spec/nodeName")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    if !assigned.is_empty() {
                        return Err(conflict(format!(
                            "pod {name} is already assigned to node \"{assigned}\""
                        )));
                    }
                    let mut next = current.clone();
                    next["spec"]["nodeName"] = json!(node);
                    for (key, value) in &annotations {
                        metadata_mut(&mut next)
                            .entry("annotations")
                            .or_insert_with(|| json!({}))[key.as_str()] = value.clone();
                    }
                    set_pod_condition(&mut next, POD_SCHEDULED, "True", "", "");
                    Ok(next)
                },
            )
            .await?;
        Ok(written.object)
    }

    /// POST `pods/NAME/eviction`: a delete with the eviction's DeleteOptions, after marking
    /// the Pod as a disruption target. Answers with upstream's bare success Status.
    pub async fn evict_pod(
        &self,
        namespace: &str,
        name: &str,
        eviction: &Value,
        delete: DeleteOptions,
        options: &WriteOptions,
    ) -> ApiResult<Value> {
        let pods = self.pods()?;
        let body_name = object::name(eviction);
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(
                "name in URL does not match name in Eviction object",
            ));
        }
        let current = self.get(&pods, Some(namespace), name).await?;
        if delete.dry_run || options.dry_run {
            let delete = DeleteOptions {
                dry_run: true,
                ..delete
            };
            self.delete(&pods, Some(namespace), name, &delete).await?;
        } else {
            let disruption = Disruption {
                reason: "EvictionByEvictionAPI",
                message: "Eviction API: evicting",
                mark_failed: false,
            };
            self.delete_disrupted_pod(&current, &disruption, delete, options)
                .await?;
        }
        Ok(json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }))
    }

    /// Deletes `pod` (as read) for a disruption: `DisruptionTarget=True` with the reason
    /// first, unless it is already being deleted, then the delete, both pinned on its uid so
    /// a new Pod of the same name is never touched. Upstream's `addConditionAndDeletePod`
    /// (eviction, taint eviction); `mark_failed` is the pod GC's phase Failed before a force
    /// delete.
    pub async fn delete_disrupted_pod(
        &self,
        pod: &Value,
        disruption: &Disruption,
        mut delete: DeleteOptions,
        options: &WriteOptions,
    ) -> ApiResult<DeleteResult> {
        let pods = self.pods()?;
        let (namespace, name) = (
            object::namespace(pod).unwrap_or_default(),
            object::name(pod),
        );
        let uid = object::uid(pod).to_string();
        if !object::is_terminating(pod) || disruption.mark_failed {
            self.guarded_update(
                &pods,
                Some(namespace),
                name,
                None,
                Subresource::Status,
                options,
                |stored| {
                    if object::uid(stored) != uid {
                        return Err(ApiError::not_found(target(&pods, name)));
                    }
                    let mut next = stored.clone();
                    set_pod_condition(
                        &mut next,
                        "DisruptionTarget",
                        "True",
                        disruption.reason,
                        disruption.message,
                    );
                    let phase = next.pointer("/status/phase").and_then(Value::as_str);
                    if disruption.mark_failed && !matches!(phase, Some("Succeeded" | "Failed")) {
                        next["status"]["phase"] = json!("Failed");
                    }
                    Ok(next)
                },
            )
            .await?;
        }
        if delete.preconditions.uid.is_none() {
            delete.preconditions.uid = Some(uid);
        }
        self.delete(&pods, Some(namespace), name, &delete).await
    }

    fn pods(&self) -> ApiResult<Arc<ResourceType>> {
        self.catalog
            .lookup("", "v1", "pods")
            .ok_or_else(|| ApiError::internal("the pods resource is not served"))
    }
}

/// Why a Pod is deleted against its will, for its `DisruptionTarget` condition.
pub struct Disruption {
    pub reason: &'static str,
    pub message: &'static str,
    /// Set phase Failed first (the pod GC's force deletes).
    pub mark_failed: bool,
}

/// Sets condition `kind` of a Pod's status, keeping `lastTransitionTime` unless the status
/// changes, as upstream's `podutil.UpdatePodCondition`.
pub fn set_pod_condition(pod: &mut Value, kind: &str, status: &str, reason: &str, message: &str) {
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    if !pod.get("status").is_some_and(Value::is_object) {
        pod["status"] = json!({});
    }
    let conditions = pod["status"]
        .as_object_mut()
        .map(|status| status.entry("conditions").or_insert_with(|| json!([])));
    let Some(Value::Array(conditions)) = conditions else {
        return;
    };
    let mut condition = json!({
        "type": kind,
        "status": status,
        "lastProbeTime": null,
        "lastTransitionTime": now,
    });
    if !reason.is_empty() {
        condition["reason"] = json!(reason);
    }
    if !message.is_empty() {
        condition["message"] = json!(message);
    }
    match conditions
        .iter_mut()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
    {
        Some(existing) => {
            if existing.get("status").and_then(Value::as_str) == Some(status)
                && let Some(since) = existing.get("lastTransitionTime").cloned()
            {
                condition["lastTransitionTime"] = since;
            }
            *existing = condition;
        }
        None => conditions.push(condition),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_keeps_its_transition_time_while_its_status_holds() {
        let mut pod = json!({"status": {"conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2020-01-01T00:00:00Z"}
        ]}});
        set_pod_condition(&mut pod, "PodScheduled", "True", "", "");
        assert_eq!(
            pod.pointer("/status/conditions/0/lastTransitionTime"),
            Some(&json!("2020-01-01T00:00:00Z"))
        );
        set_pod_condition(
            &mut pod,
            "PodScheduled",
            "False",
            "Unschedulable",
            "no nodes",
        );
        let condition = &pod["status"]["conditions"][0];
        assert_ne!(
            condition["lastTransitionTime"],
            json!("2020-01-01T00:00:00Z")
        );
        assert_eq!(condition["reason"], json!("Unschedulable"));
        set_pod_condition(&mut pod, "Ready", "False", "", "");
        assert_eq!(
            pod["status"]["conditions"].as_array().map(Vec::len),
            Some(2)
        );
    }
}
