use std::collections::BTreeMap;

use k8s_pb::api::apps::v1 as apps;
use k8s_pb::api::batch::v1 as batch;
use k8s_pb::api::coordination::v1 as coordination;
use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::api::resource::Quantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::json;

use super::*;

/// 2026-11-22T01:02:03Z.
const SECONDS: i64 = 1_795_309_323;

fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: s(api_version),
            kind: s(kind),
        }),
        raw: Some(raw),
        content_encoding: s(""),
        content_type: s(""),
    };
    let mut body = MAGIC.to_vec();
    body.extend(unknown.encode_to_vec());
    body
}

fn body<M: Message>(api_version: &str, kind: &str, message: &M) -> Vec<u8> {
    envelope(api_version, kind, message.encode_to_vec())
}

fn decode<M: Message>(api_version: &str, kind: &str, message: &M) -> Value {
    decode_object(&body(api_version, kind, message)).unwrap()
}

fn refuse<M: Message>(api_version: &str, kind: &str, message: &M) -> ProtobufError {
    decode_object(&body(api_version, kind, message)).unwrap_err()
}

fn s(value: &str) -> Option<String> {
    Some(value.to_string())
}

fn strings(values: &[&str]) -> Vec<String> {
    values.iter().map(|v| v.to_string()).collect()
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Quantity { string: s(v) }))
        .collect()
}

fn int(value: i32) -> Option<IntOrString> {
    Some(IntOrString {
        r#type: Some(0),
        int_val: Some(value),
        str_val: s(""),
    })
}

fn string(value: &str) -> Option<IntOrString> {
    Some(IntOrString {
        r#type: Some(1),
        int_val: Some(0),
        str_val: s(value),
    })
}

fn time(seconds: i64) -> Option<meta::Time> {
    Some(meta::Time {
        seconds: Some(seconds),
        nanos: Some(0),
    })
}

/// ObjectMeta as Go writes it: every non-pointer field on the wire, zero or not, and the
/// zero creationTimestamp as an empty message.
fn go_meta(name: &str, labels: &[(&str, &str)]) -> Option<meta::ObjectMeta> {
    Some(meta::ObjectMeta {
        name: s(name),
        generate_name: s(""),
        namespace: s(""),
        self_link: s(""),
        uid: s(""),
        resource_version: s(""),
        generation: Some(0),
        creation_timestamp: Some(meta::Time::default()),
        labels: map(labels),
        ..Default::default()
    })
}

/// A container as kubectl's generators write it (`--image`, `--port`, `-- command`).
fn go_container(name: &str, image: &str, command: &[&str], ports: &[i32]) -> core::Container {
    core::Container {
        name: s(name),
        image: s(image),
        command: strings(command),
        working_dir: s(""),
        ports: ports
            .iter()
            .map(|port| core::ContainerPort {
                name: s(""),
                host_port: Some(0),
                container_port: Some(*port),
                protocol: s(""),
                host_ip: s(""),
            })
            .collect(),
        resources: Some(core::ResourceRequirements::default()),
        termination_message_path: s(""),
        termination_message_policy: s(""),
        image_pull_policy: s(""),
        stdin: Some(false),
        stdin_once: Some(false),
        tty: Some(false),
        ..Default::default()
    }
}

/// A PodSpec's non-pointer fields as Go writes them when unset.
fn go_pod_spec(containers: Vec<core::Container>, restart_policy: &str) -> core::PodSpec {
    core::PodSpec {
        containers,
        restart_policy: s(restart_policy),
        dns_policy: s(""),
        service_account_name: s(""),
        service_account: s(""),
        node_name: s(""),
        host_network: Some(false),
        host_pid: Some(false),
        host_ipc: Some(false),
        hostname: s(""),
        subdomain: s(""),
        scheduler_name: s(""),
        priority_class_name: s(""),
        ..Default::default()
    }
}

fn go_template(labels: &[(&str, &str)], spec: core::PodSpec) -> Option<core::PodTemplateSpec> {
    Some(core::PodTemplateSpec {
        metadata: go_meta("", labels),
        spec: Some(spec),
    })
}

fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/src/protobuf/testdata/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    decode_object(&std::fs::read(path).unwrap()).unwrap()
}

// --- Bodies captured from kubectl 1.33 -------------------------------------------------

#[test]
fn kubectl_bodies_decode_to_what_kubectl_prints_for_a_client_dry_run() {
    assert_eq!(
        fixture("namespace.pb"),
        json!({"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": "team1"},
               "spec": {}, "status": {}})
    );
    assert_eq!(
        fixture("configmap.pb"),
        json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "files"},
               "data": {"greeting.txt": "hi\n"}, "binaryData": {"blob.bin": "AP/+"}})
    );
    assert_eq!(
        fixture("secret.pb"),
        json!({"kind": "Secret", "apiVersion": "v1", "metadata": {"name": "s"},
               "data": {"a": "Yg=="}})
    );
    assert_eq!(
        fixture("serviceaccount.pb"),
        json!({"kind": "ServiceAccount", "apiVersion": "v1", "metadata": {"name": "sa"}})
    );
    assert_eq!(
        fixture("service-clusterip.pb"),
        json!({"kind": "Service", "apiVersion": "v1",
               "metadata": {"name": "svc", "labels": {"app": "svc"}},
               "spec": {"ports": [{"name": "80-8080", "protocol": "TCP", "port": 80,
                                   "targetPort": 8080}],
                        "selector": {"app": "svc"}, "type": "ClusterIP"},
               "status": {"loadBalancer": {}}})
    );
    assert_eq!(
        fixture("service-externalname.pb"),
        json!({"kind": "Service", "apiVersion": "v1",
               "metadata": {"name": "en", "labels": {"app": "en"}},
               "spec": {"selector": {"app": "en"}, "type": "ExternalName",
                        "externalName": "example.com"},
               "status": {"loadBalancer": {}}})
    );
    assert_eq!(
        fixture("deployment.pb"),
        json!({"kind": "Deployment", "apiVersion": "apps/v1",
               "metadata": {"name": "web", "labels": {"app": "web"}},
               "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                        "template": {"metadata": {"labels": {"app": "web"}},
                                     "spec": {"containers": [{"name": "nginx", "image": "nginx",
                                                              "command": ["sleep", "10"],
                                                              "ports": [{"containerPort": 80}],
                                                              "resources": {}}]}},
                        "strategy": {}},
               "status": {}})
    );
    assert_eq!(
        fixture("job.pb"),
        json!({"kind": "Job", "apiVersion": "batch/v1", "metadata": {"name": "j"},
               "spec": {"template": {"metadata": {},
                                     "spec": {"containers": [{"name": "j", "image": "busybox",
                                                              "command": ["echo", "hi"],
                                                              "resources": {}}],
                                              "restartPolicy": "Never"}}},
               "status": {}})
    );
}

#[test]
fn a_kubectl_cronjob_body_decodes_to_what_kubectl_prints_for_a_client_dry_run() {
    assert_eq!(
        fixture("cronjob.pb"),
        json!({"kind": "CronJob", "apiVersion": "batch/v1", "metadata": {"name": "cj"},
               "spec": {"schedule": "*/1 * * * *",
                        "jobTemplate": {"metadata": {"name": "cj"},
                                        "spec": {"template": {"metadata": {},
                                            "spec": {"containers": [{"name": "cj", "image": "busybox",
                                                                     "command": ["echo", "hi"],
                                                                     "resources": {}}],
                                                     "restartPolicy": "OnFailure"}}}}},
               "status": {}})
    );
}

#[test]
fn a_kubectl_autoscale_body_decodes_to_the_autoscaling_v1_object() {
    assert_eq!(
        fixture("autoscale.pb"),
        json!({"kind": "HorizontalPodAutoscaler", "apiVersion": "autoscaling/v1",
               "metadata": {"name": "web"},
               "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web",
                                           "apiVersion": "apps/v1"},
                        "minReplicas": 2, "maxReplicas": 5,
                        "targetCPUUtilizationPercentage": 80},
               "status": {"currentReplicas": 0, "desiredReplicas": 0}})
    );
}

#[test]
fn an_autoscaler_status_keeps_its_times_and_pointers() {
    use k8s_pb::api::autoscaling::v1 as autoscaling;
    let autoscaler = autoscaling::HorizontalPodAutoscaler {
        metadata: go_meta("hpa", &[]),
        spec: Some(autoscaling::HorizontalPodAutoscalerSpec {
            scale_target_ref: Some(autoscaling::CrossVersionObjectReference {
                kind: s("Deployment"),
                name: s("web"),
                api_version: s(""),
            }),
            min_replicas: None,
            max_replicas: Some(3),
            target_cpu_utilization_percentage: None,
        }),
        status: Some(autoscaling::HorizontalPodAutoscalerStatus {
            observed_generation: Some(0),
            last_scale_time: time(SECONDS),
            current_replicas: Some(2),
            desired_replicas: Some(3),
            current_cpu_utilization_percentage: Some(0),
        }),
    };
    assert_eq!(
        decode("autoscaling/v1", "HorizontalPodAutoscaler", &autoscaler),
        json!({"kind": "HorizontalPodAutoscaler", "apiVersion": "autoscaling/v1",
               "metadata": {"name": "hpa"},
               "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"},
                        "maxReplicas": 3},
               "status": {"observedGeneration": 0, "lastScaleTime": "2026-11-22T01:02:03Z",
                          "currentReplicas": 2, "desiredReplicas": 3,
                          "currentCPUUtilizationPercentage": 0}})
    );
}

#[test]
fn create_poddisruptionbudget_with_its_status_times() {
    use k8s_pb::api::policy::v1 as policy;
    let budget = policy::PodDisruptionBudget {
        metadata: go_meta("pdb", &[]),
        spec: Some(policy::PodDisruptionBudgetSpec {
            min_available: string("50%"),
            selector: Some(meta::LabelSelector {
                match_labels: map(&[("app", "rails")]),
                match_expressions: vec![],
            }),
            ..Default::default()
        }),
        status: Some(policy::PodDisruptionBudgetStatus {
            observed_generation: Some(0),
            disrupted_pods: [("web-1".to_string(), time(SECONDS).unwrap_or_default())]
                .into_iter()
                .collect(),
            disruptions_allowed: Some(0),
            current_healthy: Some(0),
            desired_healthy: Some(0),
            expected_pods: Some(0),
            conditions: vec![],
        }),
    };
    assert_eq!(
        decode("policy/v1", "PodDisruptionBudget", &budget),
        json!({"kind": "PodDisruptionBudget", "apiVersion": "policy/v1",
               "metadata": {"name": "pdb"},
               "spec": {"minAvailable": "50%", "selector": {"matchLabels": {"app": "rails"}}},
               "status": {"disruptedPods": {"web-1": "2026-11-22T01:02:03Z"},
                          "disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0,
                          "expectedPods": 0}})
    );
}

#[test]
fn create_ingress_keeps_each_rules_inline_http_value() {
    use k8s_pb::api::networking::v1 as networking;
    let backend = |port: i32| networking::IngressBackend {
        service: Some(networking::IngressServiceBackend {
            name: s("svc1"),
            port: Some(networking::ServiceBackendPort {
                name: s(""),
                number: Some(port),
            }),
        }),
        resource: None,
    };
    let ingress = networking::Ingress {
        metadata: go_meta("simple", &[]),
        spec: Some(networking::IngressSpec {
            ingress_class_name: None,
            default_backend: None,
            tls: vec![networking::IngressTls {
                hosts: strings(&["foo.com"]),
                secret_name: s("my-cert"),
            }],
            rules: vec![networking::IngressRule {
                host: s("foo.com"),
                ingress_rule_value: Some(networking::IngressRuleValue {
                    http: Some(networking::HttpIngressRuleValue {
                        paths: vec![networking::HttpIngressPath {
                            path: s("/bar"),
                            path_type: s("Exact"),
                            backend: Some(backend(8080)),
                        }],
                    }),
                }),
            }],
        }),
        status: Some(networking::IngressStatus {
            load_balancer: Some(networking::IngressLoadBalancerStatus { ingress: vec![] }),
        }),
    };
    assert_eq!(
        decode("networking.k8s.io/v1", "Ingress", &ingress),
        json!({"kind": "Ingress", "apiVersion": "networking.k8s.io/v1",
               "metadata": {"name": "simple"},
               "spec": {"tls": [{"hosts": ["foo.com"], "secretName": "my-cert"}],
                        "rules": [{"host": "foo.com", "http": {"paths": [{
                            "path": "/bar", "pathType": "Exact",
                            "backend": {"service": {"name": "svc1", "port": {"number": 8080}}}}]}}]},
               "status": {"loadBalancer": {}}})
    );
}

// --- Each kind, built the way kubectl's generators fill it ------------------------------

#[test]
fn create_namespace() {
    let namespace = core::Namespace {
        metadata: go_meta("team1", &[]),
        spec: Some(core::NamespaceSpec::default()),
        status: Some(core::NamespaceStatus {
            phase: s(""),
            conditions: vec![],
        }),
    };
    assert_eq!(
        decode("v1", "Namespace", &namespace),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team1"},
               "spec": {}, "status": {}})
    );
}

#[test]
fn namespace_status_and_spec_finalizers() {
    let namespace = core::Namespace {
        metadata: go_meta("team1", &[]),
        spec: Some(core::NamespaceSpec {
            finalizers: strings(&["kubernetes"]),
        }),
        status: Some(core::NamespaceStatus {
            phase: s("Terminating"),
            conditions: vec![core::NamespaceCondition {
                r#type: s("NamespaceDeletionContentFailure"),
                status: s("False"),
                last_transition_time: time(SECONDS),
                reason: s("ContentDeleted"),
                message: s(""),
            }],
        }),
    };
    assert_eq!(
        decode("v1", "Namespace", &namespace),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team1"},
               "spec": {"finalizers": ["kubernetes"]},
               "status": {"phase": "Terminating",
                          "conditions": [{"type": "NamespaceDeletionContentFailure",
                                          "status": "False",
                                          "lastTransitionTime": "2026-11-22T01:02:03Z",
                                          "reason": "ContentDeleted"}]}})
    );
}

#[test]
fn create_secret_generic_from_literal() {
    let secret = core::Secret {
        metadata: go_meta("s", &[]),
        immutable: None,
        data: [("a".to_string(), b"b".to_vec())].into(),
        string_data: BTreeMap::new(),
        r#type: s(""),
    };
    assert_eq!(
        decode("v1", "Secret", &secret),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
               "data": {"a": "Yg=="}})
    );
}

#[test]
fn secret_type_string_data_and_immutable() {
    let secret = core::Secret {
        metadata: go_meta("tls", &[]),
        immutable: Some(false),
        data: [("tls.key".to_string(), vec![0, 255, 254, 253])].into(),
        string_data: map(&[("note", "plain")]),
        r#type: s("kubernetes.io/tls"),
    };
    assert_eq!(
        decode("v1", "Secret", &secret),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tls"},
               "immutable": false, "data": {"tls.key": "AP/+/Q=="},
               "stringData": {"note": "plain"}, "type": "kubernetes.io/tls"})
    );
}

#[test]
fn create_configmap_from_literals_and_a_binary_file() {
    let config_map = core::ConfigMap {
        metadata: go_meta("cm", &[]),
        immutable: Some(true),
        data: map(&[("a", "b"), ("c", "d")]),
        binary_data: [("blob".to_string(), vec![0xfb, 0xff])].into(),
    };
    assert_eq!(
        decode("v1", "ConfigMap", &config_map),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"},
               "immutable": true, "data": {"a": "b", "c": "d"}, "binaryData": {"blob": "+/8="}})
    );
}

#[test]
fn create_serviceaccount_and_its_references() {
    let account = core::ServiceAccount {
        metadata: go_meta("sa", &[]),
        secrets: vec![core::ObjectReference {
            kind: s(""),
            namespace: s(""),
            name: s("sa-token"),
            uid: s(""),
            api_version: s(""),
            resource_version: s(""),
            field_path: s(""),
        }],
        image_pull_secrets: vec![core::LocalObjectReference {
            name: s("registry"),
        }],
        automount_service_account_token: Some(false),
    };
    assert_eq!(
        decode("v1", "ServiceAccount", &account),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa"},
               "secrets": [{"name": "sa-token"}], "imagePullSecrets": [{"name": "registry"}],
               "automountServiceAccountToken": false})
    );
}

/// A ServiceSpec's non-pointer fields as Go writes them when unset.
fn go_service_spec(service_type: &str) -> core::ServiceSpec {
    core::ServiceSpec {
        cluster_ip: s(""),
        r#type: s(service_type),
        session_affinity: s(""),
        load_balancer_ip: s(""),
        external_name: s(""),
        external_traffic_policy: s(""),
        health_check_node_port: Some(0),
        publish_not_ready_addresses: Some(false),
        ..Default::default()
    }
}

#[test]
fn create_service_clusterip() {
    let service = core::Service {
        metadata: go_meta("svc", &[("app", "svc")]),
        spec: Some(core::ServiceSpec {
            ports: vec![core::ServicePort {
                name: s("80-8080"),
                protocol: s("TCP"),
                app_protocol: None,
                port: Some(80),
                target_port: int(8080),
                node_port: Some(0),
            }],
            selector: map(&[("app", "svc")]),
            ..go_service_spec("ClusterIP")
        }),
        status: Some(core::ServiceStatus {
            load_balancer: Some(core::LoadBalancerStatus::default()),
            conditions: vec![],
        }),
    };
    assert_eq!(
        decode("v1", "Service", &service),
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "svc", "labels": {"app": "svc"}},
               "spec": {"ports": [{"name": "80-8080", "protocol": "TCP", "port": 80,
                                   "targetPort": 8080}],
                        "selector": {"app": "svc"}, "type": "ClusterIP"},
               "status": {"loadBalancer": {}}})
    );
}

#[test]
fn service_with_every_spec_field_and_a_load_balancer_status() {
    let service = core::Service {
        metadata: go_meta("lb", &[]),
        spec: Some(core::ServiceSpec {
            ports: vec![core::ServicePort {
                name: s("https"),
                protocol: s("TCP"),
                app_protocol: s("kubernetes.io/h2c"),
                port: Some(443),
                target_port: string("https"),
                node_port: Some(30443),
            }],
            selector: map(&[("app", "web")]),
            cluster_ip: s("10.0.0.10"),
            cluster_ips: strings(&["10.0.0.10", "fd00::10"]),
            r#type: s("LoadBalancer"),
            external_ips: strings(&["192.0.2.1"]),
            session_affinity: s("ClientIP"),
            load_balancer_ip: s("192.0.2.2"),
            load_balancer_source_ranges: strings(&["192.0.2.0/24"]),
            external_name: s(""),
            external_traffic_policy: s("Local"),
            health_check_node_port: Some(32000),
            publish_not_ready_addresses: Some(true),
            session_affinity_config: Some(core::SessionAffinityConfig {
                client_ip: Some(core::ClientIpConfig {
                    timeout_seconds: Some(600),
                }),
            }),
            ip_families: strings(&["IPv4", "IPv6"]),
            ip_family_policy: s("PreferDualStack"),
            allocate_load_balancer_node_ports: Some(false),
            load_balancer_class: s("example.com/lb"),
            internal_traffic_policy: s("Cluster"),
            traffic_distribution: s("PreferClose"),
        }),
        status: Some(core::ServiceStatus {
            load_balancer: Some(core::LoadBalancerStatus {
                ingress: vec![core::LoadBalancerIngress {
                    ip: s("192.0.2.2"),
                    hostname: s(""),
                    ip_mode: s("VIP"),
                    ports: vec![core::PortStatus {
                        port: Some(443),
                        protocol: s("TCP"),
                        error: None,
                    }],
                }],
            }),
            conditions: vec![meta::Condition {
                r#type: s("Ready"),
                status: s("True"),
                observed_generation: Some(0),
                last_transition_time: time(SECONDS),
                reason: s(""),
                message: s(""),
            }],
        }),
    };
    assert_eq!(
        decode("v1", "Service", &service),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "lb"},
               "spec": {"ports": [{"name": "https", "protocol": "TCP",
                                   "appProtocol": "kubernetes.io/h2c", "port": 443,
                                   "targetPort": "https", "nodePort": 30443}],
                        "selector": {"app": "web"}, "clusterIP": "10.0.0.10",
                        "clusterIPs": ["10.0.0.10", "fd00::10"], "type": "LoadBalancer",
                        "externalIPs": ["192.0.2.1"], "sessionAffinity": "ClientIP",
                        "loadBalancerIP": "192.0.2.2",
                        "loadBalancerSourceRanges": ["192.0.2.0/24"],
                        "externalTrafficPolicy": "Local", "healthCheckNodePort": 32000,
                        "publishNotReadyAddresses": true,
                        "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 600}},
                        "ipFamilies": ["IPv4", "IPv6"], "ipFamilyPolicy": "PreferDualStack",
                        "allocateLoadBalancerNodePorts": false,
                        "loadBalancerClass": "example.com/lb",
                        "internalTrafficPolicy": "Cluster",
                        "trafficDistribution": "PreferClose"},
               "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.2", "ipMode": "VIP",
                                                        "ports": [{"port": 443,
                                                                   "protocol": "TCP"}]}]},
                          "conditions": [{"type": "Ready", "status": "True",
                                          "lastTransitionTime": "2026-11-22T01:02:03Z",
                                          "reason": "", "message": ""}]}})
    );
}

#[test]
fn create_deployment_with_image_port_replicas_and_command() {
    // kubectl create deployment web --image=nginx --port=80 --replicas=3 -- sleep 10
    let deployment = apps::Deployment {
        metadata: go_meta("web", &[("app", "web")]),
        spec: Some(apps::DeploymentSpec {
            replicas: Some(3),
            selector: Some(meta::LabelSelector {
                match_labels: map(&[("app", "web")]),
                match_expressions: vec![],
            }),
            template: go_template(
                &[("app", "web")],
                go_pod_spec(
                    vec![go_container("nginx", "nginx", &["sleep", "10"], &[80])],
                    "",
                ),
            ),
            strategy: Some(apps::DeploymentStrategy {
                r#type: s(""),
                rolling_update: None,
            }),
            min_ready_seconds: Some(0),
            revision_history_limit: None,
            paused: Some(false),
            progress_deadline_seconds: None,
        }),
        status: Some(apps::DeploymentStatus {
            observed_generation: Some(0),
            replicas: Some(0),
            updated_replicas: Some(0),
            ready_replicas: Some(0),
            available_replicas: Some(0),
            unavailable_replicas: Some(0),
            terminating_replicas: None,
            conditions: vec![],
            collision_count: None,
        }),
    };
    assert_eq!(
        decode("apps/v1", "Deployment", &deployment),
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "labels": {"app": "web"}},
               "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                        "template": {"metadata": {"labels": {"app": "web"}},
                                     "spec": {"containers": [{"name": "nginx", "image": "nginx",
                                                              "command": ["sleep", "10"],
                                                              "ports": [{"containerPort": 80}],
                                                              "resources": {}}]}},
                        "strategy": {}},
               "status": {}})
    );
}

#[test]
fn deployment_pointer_fields_keep_their_zero_values() {
    let deployment = apps::Deployment {
        metadata: go_meta("web", &[]),
        spec: Some(apps::DeploymentSpec {
            replicas: Some(0),
            selector: Some(meta::LabelSelector {
                match_labels: BTreeMap::new(),
                match_expressions: vec![meta::LabelSelectorRequirement {
                    key: s("tier"),
                    operator: s("Exists"),
                    values: vec![],
                }],
            }),
            template: go_template(&[], go_pod_spec(vec![], "")),
            strategy: Some(apps::DeploymentStrategy {
                r#type: s("RollingUpdate"),
                rolling_update: Some(apps::RollingUpdateDeployment {
                    max_unavailable: int(0),
                    max_surge: string("25%"),
                }),
            }),
            min_ready_seconds: Some(5),
            revision_history_limit: Some(0),
            paused: Some(true),
            progress_deadline_seconds: Some(600),
        }),
        status: Some(apps::DeploymentStatus {
            observed_generation: Some(2),
            replicas: Some(3),
            updated_replicas: Some(3),
            ready_replicas: Some(2),
            available_replicas: Some(2),
            unavailable_replicas: Some(1),
            terminating_replicas: Some(0),
            conditions: vec![apps::DeploymentCondition {
                r#type: s("Available"),
                status: s("True"),
                last_update_time: time(SECONDS),
                last_transition_time: Some(meta::Time::default()),
                reason: s("MinimumReplicasAvailable"),
                message: s(""),
            }],
            collision_count: Some(1),
        }),
    };
    assert_eq!(
        decode("apps/v1", "Deployment", &deployment),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
               "spec": {"replicas": 0,
                        "selector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]},
                        "template": {"metadata": {}, "spec": {"containers": []}},
                        "strategy": {"type": "RollingUpdate",
                                     "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "25%"}},
                        "minReadySeconds": 5, "revisionHistoryLimit": 0, "paused": true,
                        "progressDeadlineSeconds": 600},
               "status": {"observedGeneration": 2, "replicas": 3, "updatedReplicas": 3,
                          "readyReplicas": 2, "availableReplicas": 2, "unavailableReplicas": 1,
                          "terminatingReplicas": 0,
                          "conditions": [{"type": "Available", "status": "True",
                                          "lastUpdateTime": "2026-11-22T01:02:03Z",
                                          "reason": "MinimumReplicasAvailable"}],
                          "collisionCount": 1}})
    );
}

#[test]
fn replica_set_with_status() {
    let replica_set = apps::ReplicaSet {
        metadata: go_meta("web-5d4f", &[("app", "web")]),
        spec: Some(apps::ReplicaSetSpec {
            replicas: Some(2),
            min_ready_seconds: Some(0),
            selector: Some(meta::LabelSelector {
                match_labels: map(&[("app", "web")]),
                match_expressions: vec![],
            }),
            template: go_template(
                &[("app", "web")],
                go_pod_spec(vec![go_container("nginx", "nginx", &[], &[])], "Always"),
            ),
        }),
        status: Some(apps::ReplicaSetStatus {
            replicas: Some(0),
            fully_labeled_replicas: Some(0),
            ready_replicas: Some(0),
            available_replicas: Some(0),
            terminating_replicas: None,
            observed_generation: Some(1),
            conditions: vec![apps::ReplicaSetCondition {
                r#type: s("ReplicaFailure"),
                status: s("True"),
                last_transition_time: time(SECONDS),
                reason: s("FailedCreate"),
                message: s("quota exceeded"),
            }],
        }),
    };
    assert_eq!(
        decode("apps/v1", "ReplicaSet", &replica_set),
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
               "metadata": {"name": "web-5d4f", "labels": {"app": "web"}},
               "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                        "template": {"metadata": {"labels": {"app": "web"}},
                                     "spec": {"containers": [{"name": "nginx", "image": "nginx",
                                                              "resources": {}}],
                                              "restartPolicy": "Always"}}},
               "status": {"replicas": 0, "observedGeneration": 1,
                          "conditions": [{"type": "ReplicaFailure", "status": "True",
                                          "lastTransitionTime": "2026-11-22T01:02:03Z",
                                          "reason": "FailedCreate",
                                          "message": "quota exceeded"}]}})
    );
}

#[test]
fn create_job_with_command() {
    // kubectl create job j --image=busybox -- echo hi
    let job = batch::Job {
        metadata: go_meta("j", &[]),
        spec: Some(batch::JobSpec {
            template: go_template(
                &[],
                go_pod_spec(
                    vec![go_container("j", "busybox", &["echo", "hi"], &[])],
                    "Never",
                ),
            ),
            ..Default::default()
        }),
        status: Some(batch::JobStatus {
            active: Some(0),
            succeeded: Some(0),
            failed: Some(0),
            completed_indexes: s(""),
            ..Default::default()
        }),
    };
    assert_eq!(
        decode("batch/v1", "Job", &job),
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
               "spec": {"template": {"metadata": {},
                                     "spec": {"containers": [{"name": "j", "image": "busybox",
                                                              "command": ["echo", "hi"],
                                                              "resources": {}}],
                                              "restartPolicy": "Never"}}},
               "status": {}})
    );
}

#[test]
fn job_policies_and_status() {
    let job = batch::Job {
        metadata: go_meta("indexed", &[]),
        spec: Some(batch::JobSpec {
            parallelism: Some(2),
            completions: Some(4),
            active_deadline_seconds: Some(3600),
            pod_failure_policy: Some(batch::PodFailurePolicy {
                rules: vec![
                    batch::PodFailurePolicyRule {
                        action: s("FailJob"),
                        on_exit_codes: Some(batch::PodFailurePolicyOnExitCodesRequirement {
                            container_name: s("main"),
                            operator: s("In"),
                            values: vec![42],
                        }),
                        on_pod_conditions: vec![],
                    },
                    batch::PodFailurePolicyRule {
                        action: s("Ignore"),
                        on_exit_codes: None,
                        on_pod_conditions: vec![batch::PodFailurePolicyOnPodConditionsPattern {
                            r#type: s("DisruptionTarget"),
                            status: s("True"),
                        }],
                    },
                ],
            }),
            success_policy: Some(batch::SuccessPolicy {
                rules: vec![batch::SuccessPolicyRule {
                    succeeded_indexes: s("0-1"),
                    succeeded_count: Some(1),
                }],
            }),
            backoff_limit: Some(0),
            backoff_limit_per_index: Some(1),
            max_failed_indexes: Some(2),
            selector: None,
            manual_selector: Some(false),
            template: go_template(&[], go_pod_spec(vec![], "Never")),
            ttl_seconds_after_finished: Some(100),
            completion_mode: s("Indexed"),
            suspend: Some(true),
            pod_replacement_policy: s("Failed"),
            managed_by: s("kueue.x-k8s.io/multikueue"),
        }),
        status: Some(batch::JobStatus {
            conditions: vec![batch::JobCondition {
                r#type: s("Suspended"),
                status: s("True"),
                last_probe_time: Some(meta::Time::default()),
                last_transition_time: time(SECONDS),
                reason: s("JobSuspended"),
                message: s("Job suspended"),
            }],
            start_time: time(SECONDS - 60),
            completion_time: None,
            active: Some(1),
            succeeded: Some(2),
            failed: Some(0),
            terminating: Some(0),
            completed_indexes: s("0,2"),
            failed_indexes: s(""),
            uncounted_terminated_pods: Some(batch::UncountedTerminatedPods {
                succeeded: strings(&["uid-1"]),
                failed: vec![],
            }),
            ready: Some(1),
        }),
    };
    assert_eq!(
        decode("batch/v1", "Job", &job),
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "indexed"},
               "spec": {"parallelism": 2, "completions": 4, "activeDeadlineSeconds": 3600,
                        "podFailurePolicy": {"rules": [
                            {"action": "FailJob",
                             "onExitCodes": {"containerName": "main", "operator": "In",
                                             "values": [42]}},
                            {"action": "Ignore",
                             "onPodConditions": [{"type": "DisruptionTarget",
                                                  "status": "True"}]}]},
                        "successPolicy": {"rules": [{"succeededIndexes": "0-1",
                                                     "succeededCount": 1}]},
                        "backoffLimit": 0, "backoffLimitPerIndex": 1, "maxFailedIndexes": 2,
                        "manualSelector": false,
                        "template": {"metadata": {},
                                     "spec": {"containers": [], "restartPolicy": "Never"}},
                        "ttlSecondsAfterFinished": 100, "completionMode": "Indexed",
                        "suspend": true, "podReplacementPolicy": "Failed",
                        "managedBy": "kueue.x-k8s.io/multikueue"},
               "status": {"conditions": [{"type": "Suspended", "status": "True",
                                          "lastTransitionTime": "2026-11-22T01:02:03Z",
                                          "reason": "JobSuspended",
                                          "message": "Job suspended"}],
                          "startTime": "2026-11-22T01:01:03Z", "active": 1, "succeeded": 2,
                          "terminating": 0, "completedIndexes": "0,2", "failedIndexes": "",
                          "uncountedTerminatedPods": {"succeeded": ["uid-1"]}, "ready": 1}})
    );
}

#[test]
fn lease_times_are_rfc3339_with_microseconds() {
    let lease = coordination::Lease {
        metadata: Some(meta::ObjectMeta {
            namespace: s("kube-system"),
            ..go_meta("controller", &[]).unwrap()
        }),
        spec: Some(coordination::LeaseSpec {
            holder_identity: s("node-1_4f2c"),
            lease_duration_seconds: Some(15),
            acquire_time: Some(meta::MicroTime {
                seconds: Some(SECONDS),
                nanos: Some(123_456_789),
            }),
            renew_time: Some(meta::MicroTime {
                seconds: Some(SECONDS),
                nanos: Some(0),
            }),
            lease_transitions: Some(0),
            strategy: s("OldestEmulationVersion"),
            preferred_holder: s("node-2"),
        }),
    };
    assert_eq!(
        decode("coordination.k8s.io/v1", "Lease", &lease),
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": "controller", "namespace": "kube-system"},
               "spec": {"holderIdentity": "node-1_4f2c", "leaseDurationSeconds": 15,
                        "acquireTime": "2026-11-22T01:02:03.123456Z",
                        "renewTime": "2026-11-22T01:02:03.000000Z", "leaseTransitions": 0,
                        "strategy": "OldestEmulationVersion", "preferredHolder": "node-2"}})
    );
}

#[test]
fn object_meta_is_converted_completely() {
    let metadata = meta::ObjectMeta {
        name: s("cm"),
        generate_name: s("cm-"),
        namespace: s("team1"),
        self_link: s("/api/v1/namespaces/team1/configmaps/cm"),
        uid: s("6f1e1c8e-0000-4000-8000-000000000001"),
        resource_version: s("42"),
        generation: Some(3),
        creation_timestamp: Some(meta::Time {
            seconds: Some(SECONDS),
            nanos: Some(999_999_999),
        }),
        deletion_timestamp: time(SECONDS + 30),
        deletion_grace_period_seconds: Some(0),
        labels: map(&[("app", "web"), ("empty", "")]),
        annotations: map(&[("note", "hi")]),
        owner_references: vec![meta::OwnerReference {
            api_version: s("apps/v1"),
            kind: s("Deployment"),
            name: s("web"),
            uid: s("6f1e1c8e-0000-4000-8000-000000000002"),
            controller: Some(true),
            block_owner_deletion: None,
        }],
        finalizers: strings(&["example.com/cleanup"]),
        managed_fields: vec![meta::ManagedFieldsEntry {
            manager: s("kubectl-create"),
            operation: s("Update"),
            api_version: s("v1"),
            time: time(SECONDS),
            fields_type: s("FieldsV1"),
            fields_v1: Some(meta::FieldsV1 {
                raw: Some(br#"{"f:data":{".":{},"f:a":{}}}"#.to_vec()),
            }),
            subresource: s(""),
        }],
    };
    let config_map = core::ConfigMap {
        metadata: Some(metadata),
        ..Default::default()
    };
    assert_eq!(
        decode("v1", "ConfigMap", &config_map),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "cm", "generateName": "cm-", "namespace": "team1",
                            "selfLink": "/api/v1/namespaces/team1/configmaps/cm",
                            "uid": "6f1e1c8e-0000-4000-8000-000000000001",
                            "resourceVersion": "42", "generation": 3,
                            "creationTimestamp": "2026-11-22T01:02:03Z",
                            "deletionTimestamp": "2026-11-22T01:02:33Z",
                            "deletionGracePeriodSeconds": 0,
                            "labels": {"app": "web", "empty": ""},
                            "annotations": {"note": "hi"},
                            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                                 "name": "web",
                                                 "uid": "6f1e1c8e-0000-4000-8000-000000000002",
                                                 "controller": true}],
                            "finalizers": ["example.com/cleanup"],
                            "managedFields": [{"manager": "kubectl-create",
                                               "operation": "Update", "apiVersion": "v1",
                                               "time": "2026-11-22T01:02:03Z",
                                               "fieldsType": "FieldsV1",
                                               "fieldsV1": {"f:data": {".": {}, "f:a": {}}}}]}})
    );
}

#[test]
fn a_pod_with_most_of_its_spec() {
    let security_context = core::SecurityContext {
        capabilities: Some(core::Capabilities {
            add: strings(&["NET_BIND_SERVICE"]),
            drop: strings(&["ALL"]),
        }),
        privileged: Some(false),
        run_as_user: Some(0),
        run_as_non_root: Some(false),
        read_only_root_filesystem: Some(true),
        allow_privilege_escalation: Some(false),
        seccomp_profile: Some(core::SeccompProfile {
            r#type: s("RuntimeDefault"),
            localhost_profile: None,
        }),
        ..Default::default()
    };
    let container = core::Container {
        args: strings(&["--port=8080"]),
        working_dir: s("/srv"),
        env_from: vec![core::EnvFromSource {
            prefix: s("CFG_"),
            config_map_ref: Some(core::ConfigMapEnvSource {
                local_object_reference: Some(core::LocalObjectReference {
                    name: s("settings"),
                }),
                optional: Some(true),
            }),
            secret_ref: None,
        }],
        env: vec![
            core::EnvVar {
                name: s("MODE"),
                value: s("fast"),
                value_from: None,
            },
            core::EnvVar {
                name: s("EMPTY"),
                value: s(""),
                value_from: None,
            },
            core::EnvVar {
                name: s("NODE"),
                value: s(""),
                value_from: Some(core::EnvVarSource {
                    field_ref: Some(core::ObjectFieldSelector {
                        api_version: s("v1"),
                        field_path: s("spec.nodeName"),
                    }),
                    ..Default::default()
                }),
            },
            core::EnvVar {
                name: s("CPU"),
                value: s(""),
                value_from: Some(core::EnvVarSource {
                    resource_field_ref: Some(core::ResourceFieldSelector {
                        container_name: s(""),
                        resource: s("limits.cpu"),
                        divisor: Some(Quantity { string: s("1m") }),
                    }),
                    ..Default::default()
                }),
            },
            core::EnvVar {
                name: s("PASSWORD"),
                value: s(""),
                value_from: Some(core::EnvVarSource {
                    secret_key_ref: Some(core::SecretKeySelector {
                        local_object_reference: Some(core::LocalObjectReference { name: s("db") }),
                        key: s("password"),
                        optional: None,
                    }),
                    ..Default::default()
                }),
            },
        ],
        resources: Some(core::ResourceRequirements {
            limits: quantities(&[("cpu", "500m"), ("memory", "128Mi")]),
            requests: quantities(&[("cpu", "250m")]),
            claims: vec![core::ResourceClaim {
                name: s("gpu"),
                request: s(""),
            }],
        }),
        volume_mounts: vec![core::VolumeMount {
            name: s("data"),
            read_only: Some(true),
            recursive_read_only: None,
            mount_path: s("/data"),
            sub_path: s(""),
            mount_propagation: None,
            sub_path_expr: s(""),
        }],
        liveness_probe: Some(core::Probe {
            handler: Some(core::ProbeHandler {
                http_get: Some(core::HttpGetAction {
                    path: s("/healthz"),
                    port: string("http"),
                    host: s(""),
                    scheme: s("HTTP"),
                    http_headers: vec![core::HttpHeader {
                        name: s("X-Probe"),
                        value: s(""),
                    }],
                }),
                ..Default::default()
            }),
            initial_delay_seconds: Some(5),
            timeout_seconds: Some(0),
            period_seconds: Some(10),
            success_threshold: Some(0),
            failure_threshold: Some(3),
            termination_grace_period_seconds: None,
        }),
        readiness_probe: Some(core::Probe {
            handler: Some(core::ProbeHandler {
                tcp_socket: Some(core::TcpSocketAction {
                    port: int(8080),
                    host: s(""),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        lifecycle: Some(core::Lifecycle {
            post_start: None,
            pre_stop: Some(core::LifecycleHandler {
                sleep: Some(core::SleepAction { seconds: Some(5) }),
                ..Default::default()
            }),
            stop_signal: s("SIGTERM"),
        }),
        image_pull_policy: s("IfNotPresent"),
        security_context: Some(security_context),
        ..go_container("app", "example.com/app:1", &[], &[8080])
    };
    let volumes = vec![
        core::Volume {
            name: s("data"),
            volume_source: Some(core::VolumeSource {
                persistent_volume_claim: Some(core::PersistentVolumeClaimVolumeSource {
                    claim_name: s("data"),
                    read_only: Some(false),
                }),
                ..Default::default()
            }),
        },
        core::Volume {
            name: s("scratch"),
            volume_source: Some(core::VolumeSource {
                empty_dir: Some(core::EmptyDirVolumeSource {
                    medium: s("Memory"),
                    size_limit: Some(Quantity { string: s("1Gi") }),
                }),
                ..Default::default()
            }),
        },
        core::Volume {
            name: s("config"),
            volume_source: Some(core::VolumeSource {
                config_map: Some(core::ConfigMapVolumeSource {
                    local_object_reference: Some(core::LocalObjectReference {
                        name: s("settings"),
                    }),
                    items: vec![core::KeyToPath {
                        key: s("app.yaml"),
                        path: s("app.yaml"),
                        mode: Some(0o400),
                    }],
                    default_mode: Some(0o644),
                    optional: None,
                }),
                ..Default::default()
            }),
        },
        core::Volume {
            name: s("token"),
            volume_source: Some(core::VolumeSource {
                projected: Some(core::ProjectedVolumeSource {
                    sources: vec![
                        core::VolumeProjection {
                            service_account_token: Some(core::ServiceAccountTokenProjection {
                                audience: s(""),
                                expiration_seconds: Some(3600),
                                path: s("token"),
                            }),
                            ..Default::default()
                        },
                        core::VolumeProjection {
                            downward_api: Some(core::DownwardAPIProjection {
                                items: vec![core::DownwardAPIVolumeFile {
                                    path: s("labels"),
                                    field_ref: Some(core::ObjectFieldSelector {
                                        api_version: s(""),
                                        field_path: s("metadata.labels"),
                                    }),
                                    resource_field_ref: None,
                                    mode: None,
                                }],
                            }),
                            ..Default::default()
                        },
                    ],
                    default_mode: None,
                }),
                ..Default::default()
            }),
        },
    ];
    let spec = core::PodSpec {
        volumes,
        init_containers: vec![go_container("init", "busybox", &["true"], &[])],
        termination_grace_period_seconds: Some(0),
        node_selector: map(&[("disk", "ssd")]),
        service_account_name: s("app"),
        automount_service_account_token: Some(false),
        host_network: Some(true),
        security_context: Some(core::PodSecurityContext {
            run_as_group: Some(1000),
            supplemental_groups: vec![2000, 3000],
            fs_group: Some(0),
            sysctls: vec![core::Sysctl {
                name: s("net.ipv4.ip_local_port_range"),
                value: s("1024 65535"),
            }],
            ..Default::default()
        }),
        image_pull_secrets: vec![core::LocalObjectReference {
            name: s("registry"),
        }],
        tolerations: vec![core::Toleration {
            key: s("dedicated"),
            operator: s("Equal"),
            value: s("app"),
            effect: s("NoExecute"),
            toleration_seconds: Some(0),
        }],
        host_aliases: vec![core::HostAlias {
            ip: s("127.0.0.1"),
            hostnames: strings(&["app.local"]),
        }],
        priority: Some(0),
        dns_config: Some(core::PodDnsConfig {
            nameservers: strings(&["192.0.2.53"]),
            searches: vec![],
            options: vec![core::PodDnsConfigOption {
                name: s("ndots"),
                value: s("2"),
            }],
        }),
        readiness_gates: vec![core::PodReadinessGate {
            condition_type: s("example.com/ready"),
        }],
        enable_service_links: Some(false),
        overhead: quantities(&[("cpu", "10m")]),
        topology_spread_constraints: vec![core::TopologySpreadConstraint {
            max_skew: Some(1),
            topology_key: s("topology.kubernetes.io/zone"),
            when_unsatisfiable: s("DoNotSchedule"),
            label_selector: Some(meta::LabelSelector {
                match_labels: map(&[("app", "web")]),
                match_expressions: vec![],
            }),
            min_domains: None,
            node_affinity_policy: None,
            node_taints_policy: None,
            match_label_keys: strings(&["pod-template-hash"]),
        }],
        os: Some(core::PodOs { name: s("linux") }),
        scheduling_gates: vec![core::PodSchedulingGate {
            name: s("example.com/quota"),
        }],
        ..go_pod_spec(vec![container], "Always")
    };
    let pod = core::Pod {
        metadata: go_meta("app", &[("app", "web")]),
        spec: Some(spec),
        status: Some(core::PodStatus {
            observed_generation: Some(0),
            phase: s(""),
            message: s(""),
            reason: s(""),
            nominated_node_name: s(""),
            host_ip: s(""),
            pod_ip: s(""),
            qos_class: s(""),
            resize: s(""),
            ..Default::default()
        }),
    };
    assert_eq!(
        decode("v1", "Pod", &pod),
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "app", "labels": {"app": "web"}},
            "spec": {
                "volumes": [
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                    {"name": "scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
                    {"name": "config", "configMap": {"name": "settings",
                                                     "items": [{"key": "app.yaml",
                                                                "path": "app.yaml",
                                                                "mode": 256}],
                                                     "defaultMode": 420}},
                    {"name": "token", "projected": {"sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3600, "path": "token"}},
                        {"downwardAPI": {"items": [{"path": "labels",
                                                    "fieldRef": {"fieldPath": "metadata.labels"}}]}}
                    ]}}
                ],
                "initContainers": [{"name": "init", "image": "busybox", "command": ["true"],
                                    "resources": {}}],
                "containers": [{
                    "name": "app", "image": "example.com/app:1", "args": ["--port=8080"],
                    "workingDir": "/srv", "ports": [{"containerPort": 8080}],
                    "envFrom": [{"prefix": "CFG_",
                                 "configMapRef": {"name": "settings", "optional": true}}],
                    "env": [
                        {"name": "MODE", "value": "fast"},
                        {"name": "EMPTY"},
                        {"name": "NODE", "valueFrom": {"fieldRef": {"apiVersion": "v1",
                                                                    "fieldPath": "spec.nodeName"}}},
                        {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu",
                                                                           "divisor": "1m"}}},
                        {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db",
                                                                            "key": "password"}}}
                    ],
                    "resources": {"limits": {"cpu": "500m", "memory": "128Mi"},
                                  "requests": {"cpu": "250m"}, "claims": [{"name": "gpu"}]},
                    "volumeMounts": [{"name": "data", "readOnly": true, "mountPath": "/data"}],
                    "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http",
                                                  "scheme": "HTTP",
                                                  "httpHeaders": [{"name": "X-Probe",
                                                                   "value": ""}]},
                                      "initialDelaySeconds": 5, "periodSeconds": 10,
                                      "failureThreshold": 3},
                    "readinessProbe": {"tcpSocket": {"port": 8080}},
                    "lifecycle": {"preStop": {"sleep": {"seconds": 5}}, "stopSignal": "SIGTERM"},
                    "imagePullPolicy": "IfNotPresent",
                    "securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE"],
                                                         "drop": ["ALL"]},
                                        "privileged": false, "runAsUser": 0,
                                        "runAsNonRoot": false, "readOnlyRootFilesystem": true,
                                        "allowPrivilegeEscalation": false,
                                        "seccompProfile": {"type": "RuntimeDefault"}}
                }],
                "restartPolicy": "Always", "terminationGracePeriodSeconds": 0,
                "nodeSelector": {"disk": "ssd"}, "serviceAccountName": "app",
                "automountServiceAccountToken": false, "hostNetwork": true,
                "securityContext": {"runAsGroup": 1000, "supplementalGroups": [2000, 3000],
                                    "fsGroup": 0,
                                    "sysctls": [{"name": "net.ipv4.ip_local_port_range",
                                                 "value": "1024 65535"}]},
                "imagePullSecrets": [{"name": "registry"}],
                "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "app",
                                 "effect": "NoExecute", "tolerationSeconds": 0}],
                "hostAliases": [{"ip": "127.0.0.1", "hostnames": ["app.local"]}],
                "priority": 0,
                "dnsConfig": {"nameservers": ["192.0.2.53"],
                              "options": [{"name": "ndots", "value": "2"}]},
                "readinessGates": [{"conditionType": "example.com/ready"}],
                "enableServiceLinks": false, "overhead": {"cpu": "10m"},
                "topologySpreadConstraints": [{"maxSkew": 1,
                                               "topologyKey": "topology.kubernetes.io/zone",
                                               "whenUnsatisfiable": "DoNotSchedule",
                                               "labelSelector": {"matchLabels": {"app": "web"}},
                                               "matchLabelKeys": ["pod-template-hash"]}],
                "os": {"name": "linux"},
                "schedulingGates": [{"name": "example.com/quota"}]
            },
            "status": {}
        })
    );
}

// --- Refusals -----------------------------------------------------------------------------

#[test]
fn a_body_without_the_magic_prefix_is_a_400() {
    let error = decode_object(b"{\"kind\":\"Namespace\"}").unwrap_err();
    assert_eq!(error.status_code(), 400);
    assert_eq!(
        error.to_string(),
        "provided data does not appear to be a protobuf message, expected prefix \"k8s\\x00\""
    );
    assert_eq!(decode_object(b"").unwrap_err().status_code(), 400);
    assert_eq!(decode_object(b"k8s").unwrap_err().status_code(), 400);
}

#[test]
fn truncated_and_garbage_bodies_are_400s() {
    let namespace = core::Namespace {
        metadata: go_meta("team1", &[]),
        ..Default::default()
    };
    let body = body("v1", "Namespace", &namespace);
    // Cutting between two envelope fields leaves valid protobuf; cutting inside typeMeta or
    // raw does not. typeMeta {"v1", "Namespace"} is 2 + 15 bytes after the magic; the
    // empty contentEncoding and contentType are the last 4.
    let type_meta_end = 4 + 2 + 15;
    assert_eq!(&body[type_meta_end..type_meta_end + 1], &[0x12]);
    for length in (5..body.len() - 4).filter(|length| *length != type_meta_end) {
        let error = decode_object(&body[..length]).unwrap_err();
        assert_eq!(error.status_code(), 400, "truncated to {length}: {error}");
    }
    let garbage = [b"k8s\0".as_slice(), &[0xff; 16]].concat();
    assert!(matches!(
        decode_object(&garbage).unwrap_err(),
        ProtobufError::Envelope(_)
    ));
    // A well-formed envelope around a raw that is not a Namespace message.
    let error = decode_object(&envelope("v1", "Namespace", vec![0x0a, 0x05, 0x01])).unwrap_err();
    assert!(
        matches!(error, ProtobufError::Object { ref kind, .. } if kind == "Namespace"),
        "{error}"
    );
    assert_eq!(error.status_code(), 400);
}

#[test]
fn an_envelope_without_a_kind_is_a_400() {
    let error = decode_object(&envelope("v1", "", Vec::new())).unwrap_err();
    assert_eq!(error.status_code(), 400);
    assert_eq!(
        error.to_string(),
        "Object 'Kind' is missing in the protobuf envelope"
    );
}

#[test]
fn an_envelope_with_a_content_encoding_is_a_415() {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: s("v1"),
            kind: s("Namespace"),
        }),
        raw: Some(Vec::new()),
        content_encoding: s("gzip"),
        content_type: s(""),
    };
    let body = [MAGIC.as_slice(), &unknown.encode_to_vec()].concat();
    let error = decode_object(&body).unwrap_err();
    assert_eq!(error.status_code(), 415);
    assert!(
        error.to_string().contains("contentEncoding \"gzip\""),
        "{error}"
    );
}

#[test]
fn an_unsupported_kind_is_a_415_naming_the_kind_and_the_workaround() {
    let error = decode_object(&envelope("v1", "ReplicationController", Vec::new())).unwrap_err();
    assert_eq!(error.status_code(), 415);
    assert_eq!(
        error.to_string(),
        "protobuf request bodies of kind ReplicationController (v1) are not supported; \
         send the object as JSON instead, e.g. \
         `kubectl create … --dry-run=client -o yaml | kubectl apply -f -`"
    );
    // The kind is matched together with its version.
    let error = decode_object(&envelope("apps/v1beta1", "Deployment", Vec::new())).unwrap_err();
    assert_eq!(error.status_code(), 415);
}

#[test]
fn affinity_is_refused_with_its_path() {
    let deployment = apps::Deployment {
        metadata: go_meta("web", &[]),
        spec: Some(apps::DeploymentSpec {
            template: go_template(
                &[],
                core::PodSpec {
                    affinity: Some(core::Affinity::default()),
                    ..go_pod_spec(vec![], "")
                },
            ),
            ..Default::default()
        }),
        status: None,
    };
    let error = refuse("apps/v1", "Deployment", &deployment);
    assert_eq!(error.status_code(), 415);
    assert_eq!(
        error.to_string(),
        "Deployment field spec.template.spec.affinity is not supported in protobuf request \
         bodies; send the object as JSON instead, e.g. \
         `kubectl create … --dry-run=client -o yaml | kubectl apply -f -`"
    );
}

#[test]
fn unconverted_volume_sources_and_projections_are_refused_with_their_index() {
    let pod = |volume_source: core::VolumeSource| core::Pod {
        metadata: go_meta("p", &[]),
        spec: Some(core::PodSpec {
            volumes: vec![
                core::Volume {
                    name: s("ok"),
                    volume_source: Some(core::VolumeSource {
                        empty_dir: Some(core::EmptyDirVolumeSource::default()),
                        ..Default::default()
                    }),
                },
                core::Volume {
                    name: s("refused"),
                    volume_source: Some(volume_source),
                },
            ],
            ..go_pod_spec(vec![], "")
        }),
        status: None,
    };
    let error = refuse(
        "v1",
        "Pod",
        &pod(core::VolumeSource {
            gce_persistent_disk: Some(Default::default()),
            ..Default::default()
        }),
    );
    assert_eq!(error.status_code(), 415);
    assert!(
        matches!(&error, ProtobufError::UnsupportedField { kind, field }
            if kind == "Pod" && field == "spec.volumes[1].gcePersistentDisk"),
        "{error}"
    );
    let error = refuse(
        "v1",
        "Pod",
        &pod(core::VolumeSource {
            projected: Some(core::ProjectedVolumeSource {
                sources: vec![core::VolumeProjection {
                    cluster_trust_bundle: Some(Default::default()),
                    ..Default::default()
                }],
                default_mode: None,
            }),
            ..Default::default()
        }),
    );
    assert!(
        matches!(&error, ProtobufError::UnsupportedField { field, .. }
            if field == "spec.volumes[1].projected.sources[0].clusterTrustBundle"),
        "{error}"
    );
}

#[test]
fn ephemeral_containers_are_refused() {
    let pod = core::Pod {
        metadata: go_meta("p", &[]),
        spec: Some(core::PodSpec {
            ephemeral_containers: vec![core::EphemeralContainer::default()],
            ..go_pod_spec(vec![], "")
        }),
        status: None,
    };
    let error = refuse("v1", "Pod", &pod);
    assert!(
        matches!(&error, ProtobufError::UnsupportedField { field, .. }
            if field == "spec.ephemeralContainers"),
        "{error}"
    );
}

#[test]
fn a_pod_status_with_content_is_refused_and_a_zero_one_is_not() {
    let pod = |status: core::PodStatus| core::Pod {
        metadata: go_meta("p", &[]),
        spec: Some(go_pod_spec(vec![], "")),
        status: Some(status),
    };
    let zero = core::PodStatus {
        phase: s(""),
        observed_generation: Some(0),
        ..Default::default()
    };
    assert_eq!(
        decode("v1", "Pod", &pod(zero.clone())),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
               "spec": {"containers": []}, "status": {}})
    );
    for status in [
        core::PodStatus {
            phase: s("Running"),
            ..zero.clone()
        },
        core::PodStatus {
            start_time: Some(meta::Time::default()),
            ..zero.clone()
        },
        core::PodStatus {
            container_statuses: vec![Default::default()],
            ..zero.clone()
        },
    ] {
        let error = refuse("v1", "Pod", &pod(status));
        assert_eq!(error.status_code(), 415);
        assert!(
            matches!(&error, ProtobufError::UnsupportedField { field, .. } if field == "status"),
            "{error}"
        );
    }
}

#[test]
fn a_field_number_unknown_to_k8s_pb_is_refused() {
    let namespace = core::Namespace {
        metadata: go_meta("team1", &[]),
        ..Default::default()
    };
    // Field 99, varint 1, after the known fields.
    let mut raw = namespace.encode_to_vec();
    raw.extend([0x98, 0x06, 0x01]);
    let error = decode_object(&envelope("v1", "Namespace", raw)).unwrap_err();
    assert_eq!(error.status_code(), 415);
    let ProtobufError::UnknownField { field_numbers, .. } = &error else {
        panic!("{error}");
    };
    assert_eq!(field_numbers, "99");

    // spec (2) carrying field 7 next to its finalizers.
    let mut spec = core::NamespaceSpec {
        finalizers: strings(&["kubernetes"]),
    }
    .encode_to_vec();
    spec.extend([0x3a, 0x01, b'x']);
    let mut raw = namespace.encode_to_vec();
    raw.extend([0x12, spec.len() as u8]);
    raw.extend(spec);
    let error = decode_object(&envelope("v1", "Namespace", raw)).unwrap_err();
    let ProtobufError::UnknownField { field_numbers, .. } = &error else {
        panic!("{error}");
    };
    assert_eq!(field_numbers, "2.7");
}

#[test]
fn invalid_values_are_400s_naming_the_field() {
    let config_map = core::ConfigMap {
        metadata: Some(meta::ObjectMeta {
            managed_fields: vec![meta::ManagedFieldsEntry {
                fields_v1: Some(meta::FieldsV1 {
                    raw: Some(b"not json".to_vec()),
                }),
                ..Default::default()
            }],
            ..go_meta("cm", &[]).unwrap()
        }),
        ..Default::default()
    };
    let error = refuse("v1", "ConfigMap", &config_map);
    assert_eq!(error.status_code(), 400);
    assert!(
        matches!(&error, ProtobufError::InvalidField { field, .. }
            if field == "metadata.managedFields[0].fieldsV1"),
        "{error}"
    );

    let service = core::Service {
        metadata: go_meta("svc", &[]),
        spec: Some(core::ServiceSpec {
            ports: vec![core::ServicePort {
                port: Some(80),
                target_port: Some(IntOrString {
                    r#type: Some(7),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    };
    let error = refuse("v1", "Service", &service);
    assert_eq!(error.status_code(), 400);
    assert!(
        matches!(&error, ProtobufError::InvalidField { field, .. }
            if field == "spec.ports[0].targetPort"),
        "{error}"
    );

    let namespace = core::Namespace {
        metadata: Some(meta::ObjectMeta {
            creation_timestamp: Some(meta::Time {
                seconds: Some(SECONDS),
                nanos: Some(-1),
            }),
            ..go_meta("team1", &[]).unwrap()
        }),
        ..Default::default()
    };
    let error = refuse("v1", "Namespace", &namespace);
    assert_eq!(error.status_code(), 400);
    assert!(
        matches!(&error, ProtobufError::InvalidField { field, .. }
            if field == "metadata.creationTimestamp"),
        "{error}"
    );
}

#[test]
fn go_zero_times_are_left_out() {
    let namespace = core::Namespace {
        metadata: Some(meta::ObjectMeta {
            creation_timestamp: time(-62_135_596_800),
            deletion_timestamp: Some(meta::Time::default()),
            ..go_meta("team1", &[]).unwrap()
        }),
        ..Default::default()
    };
    assert_eq!(
        decode("v1", "Namespace", &namespace),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team1"},
               "spec": {}, "status": {}})
    );
}
