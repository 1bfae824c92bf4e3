//! Pods and pod templates: the Pod kind, PodSpec and containers.
//!
//! Not converted (a request that sets them is refused with 415): `spec.affinity`,
//! `spec.ephemeralContainers` (upstream only accepts them through the
//! `ephemeralcontainers` subresource) and a Pod's `status` (written by kubelets, not by
//! kubectl). Volumes are in [`super::volume`].

use k8s_pb::api::core::v1 as core;

use super::core_v1::local_object_reference;
use super::json::{Converted, GoZero, Presence, convert};
use super::meta::{label_selector, object_meta};
use super::volume::{object_field_selector, resource_field_selector, volume};

pub(super) fn pod(pod: core::Pod) -> Converted {
    convert!(pod, core::Pod {
        metadata => value_message("metadata", object_meta),
        spec => value_message("spec", pod_spec),
        status => reject_unless_zero("status", pod_status_is_set),
    })
}

/// Whether a Pod's status holds anything: Go writes the status struct even when it is zero.
fn pod_status_is_set(status: &Option<core::PodStatus>) -> bool {
    let Some(status) = status else {
        return false;
    };
    let core::PodStatus {
        observed_generation,
        phase,
        conditions,
        message,
        reason,
        nominated_node_name,
        host_ip,
        host_ips,
        pod_ip,
        pod_ips,
        start_time,
        init_container_statuses,
        container_statuses,
        qos_class,
        ephemeral_container_statuses,
        resize,
        resource_claim_statuses,
        extended_resource_claim_status,
        allocated_resources,
        resources,
    } = status;
    let non_zero = |value: &Option<String>| value.as_ref().is_some_and(|v| !v.is_go_zero());
    observed_generation.is_some_and(|generation| generation != 0)
        || [
            phase,
            message,
            reason,
            nominated_node_name,
            host_ip,
            pod_ip,
            qos_class,
            resize,
        ]
        .into_iter()
        .any(non_zero)
        || conditions.is_present()
        || host_ips.is_present()
        || pod_ips.is_present()
        || start_time.is_present()
        || init_container_statuses.is_present()
        || container_statuses.is_present()
        || ephemeral_container_statuses.is_present()
        || resource_claim_statuses.is_present()
        || extended_resource_claim_status.is_present()
        || !allocated_resources.is_empty()
        || resources.is_present()
}

pub(super) fn pod_template_spec(template: core::PodTemplateSpec) -> Converted {
    convert!(template, core::PodTemplateSpec {
        metadata => value_message("metadata", object_meta),
        spec => value_message("spec", pod_spec),
    })
}

fn pod_spec(spec: core::PodSpec) -> Converted {
    convert!(spec, core::PodSpec {
        volumes => list("volumes", volume),
        init_containers => list("initContainers", container),
        containers => always_list("containers", container),
        ephemeral_containers => reject("ephemeralContainers"),
        restart_policy => non_zero("restartPolicy"),
        termination_grace_period_seconds => pointer("terminationGracePeriodSeconds"),
        active_deadline_seconds => pointer("activeDeadlineSeconds"),
        dns_policy => non_zero("dnsPolicy"),
        node_selector => string_map("nodeSelector"),
        service_account_name => non_zero("serviceAccountName"),
        service_account => non_zero("serviceAccount"),
        automount_service_account_token => pointer("automountServiceAccountToken"),
        node_name => non_zero("nodeName"),
        host_network => non_zero("hostNetwork"),
        host_pid => non_zero("hostPID"),
        host_ipc => non_zero("hostIPC"),
        share_process_namespace => pointer("shareProcessNamespace"),
        security_context => pointer_message("securityContext", pod_security_context),
        image_pull_secrets => list("imagePullSecrets", local_object_reference),
        hostname => non_zero("hostname"),
        subdomain => non_zero("subdomain"),
        affinity => reject("affinity"),
        scheduler_name => non_zero("schedulerName"),
        tolerations => list("tolerations", toleration),
        host_aliases => list("hostAliases", host_alias),
        priority_class_name => non_zero("priorityClassName"),
        priority => pointer("priority"),
        dns_config => pointer_message("dnsConfig", pod_dns_config),
        readiness_gates => list("readinessGates", pod_readiness_gate),
        runtime_class_name => pointer("runtimeClassName"),
        enable_service_links => pointer("enableServiceLinks"),
        preemption_policy => pointer("preemptionPolicy"),
        overhead => quantity_map("overhead"),
        topology_spread_constraints =>
            list("topologySpreadConstraints", topology_spread_constraint),
        set_hostname_as_fqdn => pointer("setHostnameAsFQDN"),
        os => pointer_message("os", pod_os),
        host_users => pointer("hostUsers"),
        scheduling_gates => list("schedulingGates", pod_scheduling_gate),
        resource_claims => list("resourceClaims", pod_resource_claim),
        resources => pointer_message("resources", resource_requirements),
        hostname_override => pointer("hostnameOverride"),
        workload_ref => pointer_message("workloadRef", workload_reference),
    })
}

fn container(container: core::Container) -> Converted {
    convert!(container, core::Container {
        name => always("name"),
        image => non_zero("image"),
        command => scalars("command"),
        args => scalars("args"),
        working_dir => non_zero("workingDir"),
        ports => list("ports", container_port),
        env_from => list("envFrom", env_from_source),
        env => list("env", env_var),
        resources => value_message("resources", resource_requirements),
        resize_policy => list("resizePolicy", container_resize_policy),
        restart_policy => pointer("restartPolicy"),
        restart_policy_rules => list("restartPolicyRules", container_restart_rule),
        volume_mounts => list("volumeMounts", volume_mount),
        volume_devices => list("volumeDevices", volume_device),
        liveness_probe => pointer_message("livenessProbe", probe),
        readiness_probe => pointer_message("readinessProbe", probe),
        startup_probe => pointer_message("startupProbe", probe),
        lifecycle => pointer_message("lifecycle", lifecycle),
        termination_message_path => non_zero("terminationMessagePath"),
        termination_message_policy => non_zero("terminationMessagePolicy"),
        image_pull_policy => non_zero("imagePullPolicy"),
        security_context => pointer_message("securityContext", security_context),
        stdin => non_zero("stdin"),
        stdin_once => non_zero("stdinOnce"),
        tty => non_zero("tty"),
    })
}

fn container_port(port: core::ContainerPort) -> Converted {
    convert!(port, core::ContainerPort {
        name => non_zero("name"),
        host_port => non_zero("hostPort"),
        container_port => always("containerPort"),
        protocol => non_zero("protocol"),
        host_ip => non_zero("hostIP"),
    })
}

fn env_from_source(source: core::EnvFromSource) -> Converted {
    convert!(source, core::EnvFromSource {
        prefix => non_zero("prefix"),
        config_map_ref => pointer_message("configMapRef", config_map_env_source),
        secret_ref => pointer_message("secretRef", secret_env_source),
    })
}

fn config_map_env_source(source: core::ConfigMapEnvSource) -> Converted {
    convert!(source, core::ConfigMapEnvSource {
        local_object_reference => inline(local_object_reference),
        optional => pointer("optional"),
    })
}

fn secret_env_source(source: core::SecretEnvSource) -> Converted {
    convert!(source, core::SecretEnvSource {
        local_object_reference => inline(local_object_reference),
        optional => pointer("optional"),
    })
}

fn env_var(variable: core::EnvVar) -> Converted {
    convert!(variable, core::EnvVar {
        name => always("name"),
        value => non_zero("value"),
        value_from => pointer_message("valueFrom", env_var_source),
    })
}

fn env_var_source(source: core::EnvVarSource) -> Converted {
    convert!(source, core::EnvVarSource {
        field_ref => pointer_message("fieldRef", object_field_selector),
        resource_field_ref => pointer_message("resourceFieldRef", resource_field_selector),
        config_map_key_ref => pointer_message("configMapKeyRef", config_map_key_selector),
        secret_key_ref => pointer_message("secretKeyRef", secret_key_selector),
        file_key_ref => pointer_message("fileKeyRef", file_key_selector),
    })
}

fn config_map_key_selector(selector: core::ConfigMapKeySelector) -> Converted {
    convert!(selector, core::ConfigMapKeySelector {
        local_object_reference => inline(local_object_reference),
        key => always("key"),
        optional => pointer("optional"),
    })
}

fn secret_key_selector(selector: core::SecretKeySelector) -> Converted {
    convert!(selector, core::SecretKeySelector {
        local_object_reference => inline(local_object_reference),
        key => always("key"),
        optional => pointer("optional"),
    })
}

fn file_key_selector(selector: core::FileKeySelector) -> Converted {
    convert!(selector, core::FileKeySelector {
        volume_name => always("volumeName"),
        path => always("path"),
        key => always("key"),
        optional => pointer("optional"),
    })
}

fn resource_requirements(requirements: core::ResourceRequirements) -> Converted {
    convert!(requirements, core::ResourceRequirements {
        limits => quantity_map("limits"),
        requests => quantity_map("requests"),
        claims => list("claims", resource_claim),
    })
}

fn resource_claim(claim: core::ResourceClaim) -> Converted {
    convert!(claim, core::ResourceClaim {
        name => always("name"),
        request => non_zero("request"),
    })
}

fn container_resize_policy(policy: core::ContainerResizePolicy) -> Converted {
    convert!(policy, core::ContainerResizePolicy {
        resource_name => always("resourceName"),
        restart_policy => always("restartPolicy"),
    })
}

fn container_restart_rule(rule: core::ContainerRestartRule) -> Converted {
    convert!(rule, core::ContainerRestartRule {
        action => non_zero("action"),
        exit_codes => pointer_message("exitCodes", container_restart_rule_on_exit_codes),
    })
}

fn container_restart_rule_on_exit_codes(rule: core::ContainerRestartRuleOnExitCodes) -> Converted {
    convert!(rule, core::ContainerRestartRuleOnExitCodes {
        operator => non_zero("operator"),
        values => scalars("values"),
    })
}

fn volume_mount(mount: core::VolumeMount) -> Converted {
    convert!(mount, core::VolumeMount {
        name => always("name"),
        read_only => non_zero("readOnly"),
        recursive_read_only => pointer("recursiveReadOnly"),
        mount_path => always("mountPath"),
        sub_path => non_zero("subPath"),
        mount_propagation => pointer("mountPropagation"),
        sub_path_expr => non_zero("subPathExpr"),
    })
}

fn volume_device(device: core::VolumeDevice) -> Converted {
    convert!(device, core::VolumeDevice {
        name => always("name"),
        device_path => always("devicePath"),
    })
}

fn probe(probe: core::Probe) -> Converted {
    convert!(probe, core::Probe {
        handler => inline(probe_handler),
        initial_delay_seconds => non_zero("initialDelaySeconds"),
        timeout_seconds => non_zero("timeoutSeconds"),
        period_seconds => non_zero("periodSeconds"),
        success_threshold => non_zero("successThreshold"),
        failure_threshold => non_zero("failureThreshold"),
        termination_grace_period_seconds => pointer("terminationGracePeriodSeconds"),
    })
}

fn probe_handler(handler: core::ProbeHandler) -> Converted {
    convert!(handler, core::ProbeHandler {
        exec => pointer_message("exec", exec_action),
        http_get => pointer_message("httpGet", http_get_action),
        tcp_socket => pointer_message("tcpSocket", tcp_socket_action),
        grpc => pointer_message("grpc", grpc_action),
    })
}

fn lifecycle(lifecycle: core::Lifecycle) -> Converted {
    convert!(lifecycle, core::Lifecycle {
        post_start => pointer_message("postStart", lifecycle_handler),
        pre_stop => pointer_message("preStop", lifecycle_handler),
        stop_signal => pointer("stopSignal"),
    })
}

fn lifecycle_handler(handler: core::LifecycleHandler) -> Converted {
    convert!(handler, core::LifecycleHandler {
        exec => pointer_message("exec", exec_action),
        http_get => pointer_message("httpGet", http_get_action),
        tcp_socket => pointer_message("tcpSocket", tcp_socket_action),
        sleep => pointer_message("sleep", sleep_action),
    })
}

fn exec_action(action: core::ExecAction) -> Converted {
    convert!(action, core::ExecAction {
        command => scalars("command"),
    })
}

fn http_get_action(action: core::HttpGetAction) -> Converted {
    convert!(action, core::HttpGetAction {
        path => non_zero("path"),
        port => value_int_or_string("port"),
        host => non_zero("host"),
        scheme => non_zero("scheme"),
        http_headers => list("httpHeaders", http_header),
    })
}

fn http_header(header: core::HttpHeader) -> Converted {
    convert!(header, core::HttpHeader {
        name => always("name"),
        value => always("value"),
    })
}

fn tcp_socket_action(action: core::TcpSocketAction) -> Converted {
    convert!(action, core::TcpSocketAction {
        port => value_int_or_string("port"),
        host => non_zero("host"),
    })
}

fn grpc_action(action: core::GrpcAction) -> Converted {
    convert!(action, core::GrpcAction {
        port => always("port"),
        service => pointer("service"),
    })
}

fn sleep_action(action: core::SleepAction) -> Converted {
    convert!(action, core::SleepAction {
        seconds => always("seconds"),
    })
}

fn security_context(context: core::SecurityContext) -> Converted {
    convert!(context, core::SecurityContext {
        capabilities => pointer_message("capabilities", capabilities),
        privileged => pointer("privileged"),
        se_linux_options => pointer_message("seLinuxOptions", se_linux_options),
        windows_options => pointer_message("windowsOptions", windows_security_context_options),
        run_as_user => pointer("runAsUser"),
        run_as_group => pointer("runAsGroup"),
        run_as_non_root => pointer("runAsNonRoot"),
        read_only_root_filesystem => pointer("readOnlyRootFilesystem"),
        allow_privilege_escalation => pointer("allowPrivilegeEscalation"),
        proc_mount => pointer("procMount"),
        seccomp_profile => pointer_message("seccompProfile", seccomp_profile),
        app_armor_profile => pointer_message("appArmorProfile", app_armor_profile),
    })
}

fn capabilities(capabilities: core::Capabilities) -> Converted {
    convert!(capabilities, core::Capabilities {
        add => scalars("add"),
        drop => scalars("drop"),
    })
}

fn pod_security_context(context: core::PodSecurityContext) -> Converted {
    convert!(context, core::PodSecurityContext {
        se_linux_options => pointer_message("seLinuxOptions", se_linux_options),
        windows_options => pointer_message("windowsOptions", windows_security_context_options),
        run_as_user => pointer("runAsUser"),
        run_as_group => pointer("runAsGroup"),
        run_as_non_root => pointer("runAsNonRoot"),
        supplemental_groups => scalars("supplementalGroups"),
        supplemental_groups_policy => pointer("supplementalGroupsPolicy"),
        fs_group => pointer("fsGroup"),
        sysctls => list("sysctls", sysctl),
        fs_group_change_policy => pointer("fsGroupChangePolicy"),
        seccomp_profile => pointer_message("seccompProfile", seccomp_profile),
        app_armor_profile => pointer_message("appArmorProfile", app_armor_profile),
        se_linux_change_policy => pointer("seLinuxChangePolicy"),
    })
}

fn se_linux_options(options: core::SeLinuxOptions) -> Converted {
    convert!(options, core::SeLinuxOptions {
        user => non_zero("user"),
        role => non_zero("role"),
        r#type => non_zero("type"),
        level => non_zero("level"),
    })
}

fn windows_security_context_options(options: core::WindowsSecurityContextOptions) -> Converted {
    convert!(options, core::WindowsSecurityContextOptions {
        gmsa_credential_spec_name => pointer("gmsaCredentialSpecName"),
        gmsa_credential_spec => pointer("gmsaCredentialSpec"),
        run_as_user_name => pointer("runAsUserName"),
        host_process => pointer("hostProcess"),
    })
}

fn seccomp_profile(profile: core::SeccompProfile) -> Converted {
    convert!(profile, core::SeccompProfile {
        r#type => always("type"),
        localhost_profile => pointer("localhostProfile"),
    })
}

fn app_armor_profile(profile: core::AppArmorProfile) -> Converted {
    convert!(profile, core::AppArmorProfile {
        r#type => always("type"),
        localhost_profile => pointer("localhostProfile"),
    })
}

fn sysctl(sysctl: core::Sysctl) -> Converted {
    convert!(sysctl, core::Sysctl {
        name => always("name"),
        value => always("value"),
    })
}

fn toleration(toleration: core::Toleration) -> Converted {
    convert!(toleration, core::Toleration {
        key => non_zero("key"),
        operator => non_zero("operator"),
        value => non_zero("value"),
        effect => non_zero("effect"),
        toleration_seconds => pointer("tolerationSeconds"),
    })
}

fn host_alias(alias: core::HostAlias) -> Converted {
    convert!(alias, core::HostAlias {
        ip => always("ip"),
        hostnames => scalars("hostnames"),
    })
}

fn pod_dns_config(config: core::PodDnsConfig) -> Converted {
    convert!(config, core::PodDnsConfig {
        nameservers => scalars("nameservers"),
        searches => scalars("searches"),
        options => list("options", pod_dns_config_option),
    })
}

fn pod_dns_config_option(option: core::PodDnsConfigOption) -> Converted {
    convert!(option, core::PodDnsConfigOption {
        name => non_zero("name"),
        value => pointer("value"),
    })
}

fn pod_readiness_gate(gate: core::PodReadinessGate) -> Converted {
    convert!(gate, core::PodReadinessGate {
        condition_type => always("conditionType"),
    })
}

fn topology_spread_constraint(constraint: core::TopologySpreadConstraint) -> Converted {
    convert!(constraint, core::TopologySpreadConstraint {
        max_skew => always("maxSkew"),
        topology_key => always("topologyKey"),
        when_unsatisfiable => always("whenUnsatisfiable"),
        label_selector => pointer_message("labelSelector", label_selector),
        min_domains => pointer("minDomains"),
        node_affinity_policy => pointer("nodeAffinityPolicy"),
        node_taints_policy => pointer("nodeTaintsPolicy"),
        match_label_keys => scalars("matchLabelKeys"),
    })
}

fn pod_os(os: core::PodOs) -> Converted {
    convert!(os, core::PodOs {
        name => always("name"),
    })
}

fn pod_scheduling_gate(gate: core::PodSchedulingGate) -> Converted {
    convert!(gate, core::PodSchedulingGate {
        name => always("name"),
    })
}

fn pod_resource_claim(claim: core::PodResourceClaim) -> Converted {
    convert!(claim, core::PodResourceClaim {
        name => always("name"),
        resource_claim_name => pointer("resourceClaimName"),
        resource_claim_template_name => pointer("resourceClaimTemplateName"),
    })
}

fn workload_reference(reference: core::WorkloadReference) -> Converted {
    convert!(reference, core::WorkloadReference {
        name => always("name"),
        pod_group => always("podGroup"),
        pod_group_replica_key => non_zero("podGroupReplicaKey"),
    })
}
