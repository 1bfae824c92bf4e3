//! meta/v1 messages shared by every kind: ObjectMeta and what it holds, label selectors,
//! conditions.

use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use serde_json::Value;

use super::json::{Converted, FieldError, convert};

pub(super) fn object_meta(metadata: meta::ObjectMeta) -> Converted {
    convert!(metadata, meta::ObjectMeta {
        name => non_zero("name"),
        generate_name => non_zero("generateName"),
        namespace => non_zero("namespace"),
        self_link => non_zero("selfLink"),
        uid => non_zero("uid"),
        resource_version => non_zero("resourceVersion"),
        generation => non_zero("generation"),
        creation_timestamp => time("creationTimestamp"),
        deletion_timestamp => time("deletionTimestamp"),
        deletion_grace_period_seconds => pointer("deletionGracePeriodSeconds"),
        labels => string_map("labels"),
        annotations => string_map("annotations"),
        owner_references => list("ownerReferences", owner_reference),
        finalizers => scalars("finalizers"),
        managed_fields => list("managedFields", managed_fields_entry),
    })
}

fn owner_reference(reference: meta::OwnerReference) -> Converted {
    convert!(reference, meta::OwnerReference {
        api_version => always("apiVersion"),
        kind => always("kind"),
        name => always("name"),
        uid => always("uid"),
        controller => pointer("controller"),
        block_owner_deletion => pointer("blockOwnerDeletion"),
    })
}

fn managed_fields_entry(entry: meta::ManagedFieldsEntry) -> Converted {
    convert!(entry, meta::ManagedFieldsEntry {
        manager => non_zero("manager"),
        operation => non_zero("operation"),
        api_version => non_zero("apiVersion"),
        time => time("time"),
        fields_type => non_zero("fieldsType"),
        fields_v1 => pointer_message("fieldsV1", fields_v1),
        subresource => non_zero("subresource"),
    })
}

/// FieldsV1 is JSON already (Go writes its raw bytes as they are).
fn fields_v1(fields: meta::FieldsV1) -> Converted {
    let raw = fields.raw.unwrap_or_default();
    serde_json::from_slice::<Value>(&raw)
        .map_err(|e| FieldError::invalid(format!("fieldsV1 is not valid JSON: {e}")))
}

pub(super) fn label_selector(selector: meta::LabelSelector) -> Converted {
    convert!(selector, meta::LabelSelector {
        match_labels => string_map("matchLabels"),
        match_expressions => list("matchExpressions", label_selector_requirement),
    })
}

fn label_selector_requirement(requirement: meta::LabelSelectorRequirement) -> Converted {
    convert!(requirement, meta::LabelSelectorRequirement {
        key => always("key"),
        operator => always("operator"),
        values => scalars("values"),
    })
}

pub(super) fn condition(condition: meta::Condition) -> Converted {
    convert!(condition, meta::Condition {
        r#type => always("type"),
        status => always("status"),
        observed_generation => non_zero("observedGeneration"),
        last_transition_time => time("lastTransitionTime"),
        reason => always("reason"),
        message => always("message"),
    })
}
