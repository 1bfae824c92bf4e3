//! core/v1 kinds other than Pod: Namespace, ConfigMap, Secret, ServiceAccount, Service,
//! ResourceQuota.

use k8s_pb::api::core::v1 as core;

use super::json::{Converted, convert};
use super::meta::{condition, object_meta};

pub(super) fn namespace(namespace: core::Namespace) -> Converted {
    convert!(namespace, core::Namespace {
        metadata => value_message("metadata", object_meta),
        spec => value_message("spec", namespace_spec),
        status => value_message("status", namespace_status),
    })
}

fn namespace_spec(spec: core::NamespaceSpec) -> Converted {
    convert!(spec, core::NamespaceSpec {
        finalizers => scalars("finalizers"),
    })
}

fn namespace_status(status: core::NamespaceStatus) -> Converted {
    convert!(status, core::NamespaceStatus {
        phase => non_zero("phase"),
        conditions => list("conditions", namespace_condition),
    })
}

fn namespace_condition(condition: core::NamespaceCondition) -> Converted {
    convert!(condition, core::NamespaceCondition {
        r#type => always("type"),
        status => always("status"),
        last_transition_time => time("lastTransitionTime"),
        reason => non_zero("reason"),
        message => non_zero("message"),
    })
}

pub(super) fn config_map(config_map: core::ConfigMap) -> Converted {
    convert!(config_map, core::ConfigMap {
        metadata => value_message("metadata", object_meta),
        immutable => pointer("immutable"),
        data => string_map("data"),
        binary_data => bytes_map("binaryData"),
    })
}

pub(super) fn secret(secret: core::Secret) -> Converted {
    convert!(secret, core::Secret {
        metadata => value_message("metadata", object_meta),
        immutable => pointer("immutable"),
        data => bytes_map("data"),
        string_data => string_map("stringData"),
        r#type => non_zero("type"),
    })
}

pub(super) fn service_account(account: core::ServiceAccount) -> Converted {
    convert!(account, core::ServiceAccount {
        metadata => value_message("metadata", object_meta),
        secrets => list("secrets", object_reference),
        image_pull_secrets => list("imagePullSecrets", local_object_reference),
        automount_service_account_token => pointer("automountServiceAccountToken"),
    })
}

/// `pods/binding`'s body, as kube-scheduler sends it.
pub(super) fn binding(binding: core::Binding) -> Converted {
    convert!(binding, core::Binding {
        metadata => value_message("metadata", object_meta),
        target => value_message("target", object_reference),
    })
}

pub(super) fn object_reference(reference: core::ObjectReference) -> Converted {
    convert!(reference, core::ObjectReference {
        kind => non_zero("kind"),
        namespace => non_zero("namespace"),
        name => non_zero("name"),
        uid => non_zero("uid"),
        api_version => non_zero("apiVersion"),
        resource_version => non_zero("resourceVersion"),
        field_path => non_zero("fieldPath"),
    })
}

pub(super) fn local_object_reference(reference: core::LocalObjectReference) -> Converted {
    convert!(reference, core::LocalObjectReference {
        name => non_zero("name"),
    })
}

pub(super) fn service(service: core::Service) -> Converted {
    convert!(service, core::Service {
        metadata => value_message("metadata", object_meta),
        spec => value_message("spec", service_spec),
        status => value_message("status", service_status),
    })
}

fn service_spec(spec: core::ServiceSpec) -> Converted {
    convert!(spec, core::ServiceSpec {
        ports => list("ports", service_port),
        selector => string_map("selector"),
        cluster_ip => non_zero("clusterIP"),
        cluster_ips => scalars("clusterIPs"),
        r#type => non_zero("type"),
        external_ips => scalars("externalIPs"),
        session_affinity => non_zero("sessionAffinity"),
        load_balancer_ip => non_zero("loadBalancerIP"),
        load_balancer_source_ranges => scalars("loadBalancerSourceRanges"),
        external_name => non_zero("externalName"),
        external_traffic_policy => non_zero("externalTrafficPolicy"),
        health_check_node_port => non_zero("healthCheckNodePort"),
        publish_not_ready_addresses => non_zero("publishNotReadyAddresses"),
        session_affinity_config =>
            pointer_message("sessionAffinityConfig", session_affinity_config),
        ip_families => scalars("ipFamilies"),
        ip_family_policy => pointer("ipFamilyPolicy"),
        allocate_load_balancer_node_ports => pointer("allocateLoadBalancerNodePorts"),
        load_balancer_class => pointer("loadBalancerClass"),
        internal_traffic_policy => pointer("internalTrafficPolicy"),
        traffic_distribution => pointer("trafficDistribution"),
    })
}

fn service_port(port: core::ServicePort) -> Converted {
    convert!(port, core::ServicePort {
        name => non_zero("name"),
        protocol => non_zero("protocol"),
        app_protocol => pointer("appProtocol"),
        port => always("port"),
        target_port => value_int_or_string("targetPort"),
        node_port => non_zero("nodePort"),
    })
}

fn session_affinity_config(config: core::SessionAffinityConfig) -> Converted {
    convert!(config, core::SessionAffinityConfig {
        client_ip => pointer_message("clientIP", client_ip_config),
    })
}

fn client_ip_config(config: core::ClientIpConfig) -> Converted {
    convert!(config, core::ClientIpConfig {
        timeout_seconds => pointer("timeoutSeconds"),
    })
}

fn service_status(status: core::ServiceStatus) -> Converted {
    convert!(status, core::ServiceStatus {
        load_balancer => value_message("loadBalancer", load_balancer_status),
        conditions => list("conditions", condition),
    })
}

fn load_balancer_status(status: core::LoadBalancerStatus) -> Converted {
    convert!(status, core::LoadBalancerStatus {
        ingress => list("ingress", load_balancer_ingress),
    })
}

fn load_balancer_ingress(ingress: core::LoadBalancerIngress) -> Converted {
    convert!(ingress, core::LoadBalancerIngress {
        ip => non_zero("ip"),
        hostname => non_zero("hostname"),
        ip_mode => pointer("ipMode"),
        ports => list("ports", port_status),
    })
}

fn port_status(status: core::PortStatus) -> Converted {
    convert!(status, core::PortStatus {
        port => always("port"),
        protocol => always("protocol"),
        error => pointer("error"),
    })
}

pub(super) fn resource_quota(quota: core::ResourceQuota) -> Converted {
    convert!(quota, core::ResourceQuota {
        metadata => value_message("metadata", object_meta),
        spec => value_message("spec", resource_quota_spec),
        status => value_message("status", resource_quota_status),
    })
}

fn resource_quota_spec(spec: core::ResourceQuotaSpec) -> Converted {
    convert!(spec, core::ResourceQuotaSpec {
        hard => quantity_map("hard"),
        scopes => scalars("scopes"),
        scope_selector => pointer_message("scopeSelector", scope_selector),
    })
}

fn scope_selector(selector: core::ScopeSelector) -> Converted {
    convert!(selector, core::ScopeSelector {
        match_expressions => list("matchExpressions", scoped_resource_selector_requirement),
    })
}

fn scoped_resource_selector_requirement(
    requirement: core::ScopedResourceSelectorRequirement,
) -> Converted {
    convert!(requirement, core::ScopedResourceSelectorRequirement {
        scope_name => always("scopeName"),
        operator => always("operator"),
        values => scalars("values"),
    })
}

fn resource_quota_status(status: core::ResourceQuotaStatus) -> Converted {
    convert!(status, core::ResourceQuotaStatus {
        hard => quantity_map("hard"),
        used => quantity_map("used"),
    })
}

pub(super) fn typed_local_object_reference(
    reference: core::TypedLocalObjectReference,
) -> Converted {
    convert!(reference, core::TypedLocalObjectReference {
        api_group => pointer("apiGroup"),
        kind => always("kind"),
        name => always("name"),
    })
}
