//! networking.k8s.io/v1: Ingress.

use k8s_pb::api::networking::v1 as networking;

use super::core_v1::typed_local_object_reference;
use super::json::{Converted, convert};
use super::meta::object_meta;

pub(super) fn ingress(ingress: networking::Ingress) -> Converted {
    convert!(ingress, networking::Ingress {
        metadata => value_message("metadata", object_meta),
        spec => value_message("spec", ingress_spec),
        status => value_message("status", ingress_status),
    })
}

fn ingress_spec(spec: networking::IngressSpec) -> Converted {
    convert!(spec, networking::IngressSpec {
        ingress_class_name => pointer("ingressClassName"),
        default_backend => pointer_message("defaultBackend", ingress_backend),
        tls => list("tls", ingress_tls),
        rules => list("rules", ingress_rule),
    })
}

fn ingress_backend(backend: networking::IngressBackend) -> Converted {
    convert!(backend, networking::IngressBackend {
        service => pointer_message("service", ingress_service_backend),
        resource => pointer_message("resource", typed_local_object_reference),
    })
}

fn ingress_service_backend(backend: networking::IngressServiceBackend) -> Converted {
    convert!(backend, networking::IngressServiceBackend {
        name => always("name"),
        port => value_message("port", service_backend_port),
    })
}

fn service_backend_port(port: networking::ServiceBackendPort) -> Converted {
    convert!(port, networking::ServiceBackendPort {
        name => non_zero("name"),
        number => non_zero("number"),
    })
}

fn ingress_tls(tls: networking::IngressTls) -> Converted {
    convert!(tls, networking::IngressTls {
        hosts => scalars("hosts"),
        secret_name => non_zero("secretName"),
    })
}

fn ingress_rule(rule: networking::IngressRule) -> Converted {
    convert!(rule, networking::IngressRule {
        host => non_zero("host"),
        // Embedded in Go with `json:",inline,omitempty"`.
        ingress_rule_value => inline(ingress_rule_value),
    })
}

fn ingress_rule_value(value: networking::IngressRuleValue) -> Converted {
    convert!(value, networking::IngressRuleValue {
        http => pointer_message("http", http_ingress_rule_value),
    })
}

fn http_ingress_rule_value(value: networking::HttpIngressRuleValue) -> Converted {
    convert!(value, networking::HttpIngressRuleValue {
        paths => always_list("paths", http_ingress_path),
    })
}

fn http_ingress_path(path: networking::HttpIngressPath) -> Converted {
    convert!(path, networking::HttpIngressPath {
        path => non_zero("path"),
        path_type => pointer("pathType"),
        backend => value_message("backend", ingress_backend),
    })
}

fn ingress_status(status: networking::IngressStatus) -> Converted {
    convert!(status, networking::IngressStatus {
        load_balancer => value_message("loadBalancer", ingress_load_balancer_status),
    })
}

fn ingress_load_balancer_status(status: networking::IngressLoadBalancerStatus) -> Converted {
    convert!(status, networking::IngressLoadBalancerStatus {
        ingress => list("ingress", ingress_load_balancer_ingress),
    })
}

fn ingress_load_balancer_ingress(ingress: networking::IngressLoadBalancerIngress) -> Converted {
    convert!(ingress, networking::IngressLoadBalancerIngress {
        ip => non_zero("ip"),
        hostname => non_zero("hostname"),
        ports => list("ports", ingress_port_status),
    })
}

fn ingress_port_status(status: networking::IngressPortStatus) -> Converted {
    convert!(status, networking::IngressPortStatus {
        port => always("port"),
        protocol => always("protocol"),
        error => pointer("error"),
    })
}
