//! rbac.authorization.k8s.io/v1 (Role, ClusterRole and their bindings, which `kubectl create
//! role|clusterrole|rolebinding|clusterrolebinding` send as protobuf) and
//! authorization.k8s.io/v1 (the access reviews `kubectl auth can-i` sends).

use k8s_pb::api::authorization::v1 as authorization;
use k8s_pb::api::rbac::v1 as rbac;

use super::json::{Converted, convert};
use super::meta::{label_selector, object_meta};

pub(super) fn role(role: rbac::Role) -> Converted {
    convert!(role, rbac::Role {
        metadata => value_message("metadata", object_meta),
        rules => always_list("rules", policy_rule),
    })
}

pub(super) fn cluster_role(role: rbac::ClusterRole) -> Converted {
    convert!(role, rbac::ClusterRole {
        metadata => value_message("metadata", object_meta),
        rules => always_list("rules", policy_rule),
        aggregation_rule => pointer_message("aggregationRule", aggregation_rule),
    })
}

fn aggregation_rule(rule: rbac::AggregationRule) -> Converted {
    convert!(rule, rbac::AggregationRule {
        cluster_role_selectors => list("clusterRoleSelectors", label_selector),
    })
}

fn policy_rule(rule: rbac::PolicyRule) -> Converted {
    convert!(rule, rbac::PolicyRule {
        verbs => always_scalars("verbs"),
        api_groups => scalars("apiGroups"),
        resources => scalars("resources"),
        resource_names => scalars("resourceNames"),
        non_resource_ur_ls => scalars("nonResourceURLs"),
    })
}

pub(super) fn role_binding(binding: rbac::RoleBinding) -> Converted {
    convert!(binding, rbac::RoleBinding {
        metadata => value_message("metadata", object_meta),
        subjects => list("subjects", subject),
        role_ref => value_message("roleRef", role_ref),
    })
}

pub(super) fn cluster_role_binding(binding: rbac::ClusterRoleBinding) -> Converted {
    convert!(binding, rbac::ClusterRoleBinding {
        metadata => value_message("metadata", object_meta),
        subjects => list("subjects", subject),
        role_ref => value_message("roleRef", role_ref),
    })
}

fn subject(subject: rbac::Subject) -> Converted {
    convert!(subject, rbac::Subject {
        kind => always("kind"),
        api_group => non_zero("apiGroup"),
        name => always("name"),
        namespace => non_zero("namespace"),
    })
}

fn role_ref(role_ref: rbac::RoleRef) -> Converted {
    convert!(role_ref, rbac::RoleRef {
        api_group => always("apiGroup"),
        kind => always("kind"),
        name => always("name"),
    })
}

pub(super) fn self_subject_access_review(
    review: authorization::SelfSubjectAccessReview,
) -> Converted {
    convert!(review, authorization::SelfSubjectAccessReview {
        metadata => value_message("metadata", object_meta),
        spec => value_message("spec", self_subject_access_review_spec),
        status => value_message("status", access_review_status),
    })
}

fn self_subject_access_review_spec(spec: authorization::SelfSubjectAccessReviewSpec) -> Converted {
    convert!(spec, authorization::SelfSubjectAccessReviewSpec {
        resource_attributes => pointer_message("resourceAttributes", resource_attributes),
        non_resource_attributes => pointer_message("nonResourceAttributes", non_resource_attributes),
    })
}

pub(super) fn subject_access_review(review: authorization::SubjectAccessReview) -> Converted {
    convert!(review, authorization::SubjectAccessReview {
        metadata => value_message("metadata", object_meta),
        spec => value_message("spec", subject_access_review_spec),
        status => value_message("status", access_review_status),
    })
}

pub(super) fn local_subject_access_review(
    review: authorization::LocalSubjectAccessReview,
) -> Converted {
    convert!(review, authorization::LocalSubjectAccessReview {
        metadata => value_message("metadata", object_meta),
        spec => value_message("spec", subject_access_review_spec),
        status => value_message("status", access_review_status),
    })
}

fn subject_access_review_spec(spec: authorization::SubjectAccessReviewSpec) -> Converted {
    convert!(spec, authorization::SubjectAccessReviewSpec {
        resource_attributes => pointer_message("resourceAttributes", resource_attributes),
        non_resource_attributes => pointer_message("nonResourceAttributes", non_resource_attributes),
        user => non_zero("user"),
        groups => scalars("groups"),
        extra => reject("extra"),
        uid => non_zero("uid"),
    })
}

fn resource_attributes(attributes: authorization::ResourceAttributes) -> Converted {
    convert!(attributes, authorization::ResourceAttributes {
        namespace => non_zero("namespace"),
        verb => non_zero("verb"),
        group => non_zero("group"),
        version => non_zero("version"),
        resource => non_zero("resource"),
        subresource => non_zero("subresource"),
        name => non_zero("name"),
        field_selector => reject("fieldSelector"),
        label_selector => reject("labelSelector"),
    })
}

fn non_resource_attributes(attributes: authorization::NonResourceAttributes) -> Converted {
    convert!(attributes, authorization::NonResourceAttributes {
        path => non_zero("path"),
        verb => non_zero("verb"),
    })
}

pub(super) fn self_subject_rules_review(
    review: authorization::SelfSubjectRulesReview,
) -> Converted {
    convert!(review, authorization::SelfSubjectRulesReview {
        metadata => value_message("metadata", object_meta),
        spec => value_message("spec", self_subject_rules_review_spec),
        status => value_message("status", rules_review_status),
    })
}

fn self_subject_rules_review_spec(spec: authorization::SelfSubjectRulesReviewSpec) -> Converted {
    convert!(spec, authorization::SelfSubjectRulesReviewSpec {
        namespace => non_zero("namespace"),
    })
}

// Clients send a review's status as Go's zero value; the server replaces it with its answer.
fn access_review_status(status: authorization::SubjectAccessReviewStatus) -> Converted {
    convert!(status, authorization::SubjectAccessReviewStatus {
        allowed => always("allowed"),
        denied => non_zero("denied"),
        reason => non_zero("reason"),
        evaluation_error => non_zero("evaluationError"),
    })
}

fn rules_review_status(status: authorization::SubjectRulesReviewStatus) -> Converted {
    convert!(status, authorization::SubjectRulesReviewStatus {
        resource_rules => reject("resourceRules"),
        non_resource_rules => reject("nonResourceRules"),
        incomplete => always("incomplete"),
        evaluation_error => non_zero("evaluationError"),
    })
}
