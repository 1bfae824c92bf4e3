//! Printers for how traffic reaches pods: services, endpoints and endpoint slices, ingresses
//! and ingress classes, and network policies.

use serde_json::{Value, json};

use super::{
    AGE, Clock, Column, NAME, creation_age, first_few, format_label_selector, format_labels, int,
    list, name_cell, optional_text, present, text,
};

/// How many endpoints, ports or hosts a cell names before it counts the rest.
const SHOWN: usize = 3;

pub(super) const SERVICE_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "Type",
        "How the service is exposed: ClusterIP, NodePort, LoadBalancer or ExternalName.",
    ),
    Column::string("Cluster-IP", "The service's cluster-internal IP address."),
    Column::string(
        "External-IP",
        "Addresses the service is reachable at from outside the cluster.",
    ),
    Column::string(
        "Port(s)",
        "The service's ports, with node ports and protocols.",
    ),
    AGE,
    Column::string("Selector", "Labels of the pods the service routes to.").wide(),
];

pub(super) const ENDPOINTS_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "Endpoints",
        "The first few ready addresses, with their ports, and how many more there are.",
    ),
    AGE,
];

pub(super) const ENDPOINT_SLICE_COLUMNS: &[Column] = &[
    NAME,
    Column::string("AddressType", "The kind of addresses: IPv4, IPv6 or FQDN."),
    Column::string("Ports", "The first few ports (by number, else name)."),
    Column::string("Endpoints", "The first few endpoint addresses."),
    AGE,
];

pub(super) const INGRESS_COLUMNS: &[Column] = &[
    NAME,
    Column::string("Class", "The IngressClass that serves the ingress."),
    Column::string(
        "Hosts",
        "The first few hosts the rules match (* for any host).",
    ),
    Column::string(
        "Address",
        "Addresses of the load balancer serving the ingress.",
    ),
    Column::string("Ports", "Ports served: 80, and 443 when TLS is configured."),
    AGE,
];

pub(super) const INGRESS_CLASS_COLUMNS: &[Column] = &[
    NAME,
    Column::string("Controller", "The controller that implements the class."),
    Column::string(
        "Parameters",
        "The object holding the class's parameters, as kind.group/name.",
    ),
    AGE,
];

pub(super) const NETWORK_POLICY_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "Pod-Selector",
        "Label selector of the pods the policy applies to.",
    ),
    AGE,
];

// ---------------------------------------------------------------------------------------------
// Services
// ---------------------------------------------------------------------------------------------

pub(super) fn service_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    let cluster_ip = list(item, "/spec/clusterIPs")
        .first()
        .and_then(Value::as_str)
        .or_else(|| optional_text(item, "/spec/clusterIP"))
        .unwrap_or("<none>");
    let ports: Vec<String> = list(item, "/spec/ports")
        .iter()
        .map(|port| {
            let number = int(port, "/port");
            let protocol = optional_text(port, "/protocol").unwrap_or("TCP");
            match int(port, "/nodePort") {
                node_port if node_port > 0 => format!("{number}:{node_port}/{protocol}"),
                _ => format!("{number}/{protocol}"),
            }
        })
        .collect();
    let ports = if ports.is_empty() {
        "<none>".to_string()
    } else {
        ports.join(",")
    };
    vec![
        name_cell(item),
        json!(text(item, "/spec/type")),
        json!(cluster_ip),
        json!(service_external_ip(item)),
        json!(ports),
        creation_age(item, clock),
        json!(format_labels(item.pointer("/spec/selector"))),
    ]
}

fn service_external_ip(item: &Value) -> String {
    let external_ips: Vec<&str> = list(item, "/spec/externalIPs")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    match text(item, "/spec/type") {
        "ClusterIP" | "NodePort" if external_ips.is_empty() => "<none>".into(),
        "ClusterIP" | "NodePort" => external_ips.join(","),
        "LoadBalancer" => {
            let mut ingress: Vec<&str> = list(item, "/status/loadBalancer/ingress")
                .iter()
                .filter_map(|i| optional_text(i, "/ip").or_else(|| optional_text(i, "/hostname")))
                .collect();
            ingress.sort_unstable();
            ingress.dedup();
            ingress.extend(external_ips);
            if ingress.is_empty() {
                "<pending>".into()
            } else {
                ingress.join(",")
            }
        }
        "ExternalName" => text(item, "/spec/externalName").to_string(),
        _ => "<unknown>".into(),
    }
}

// ---------------------------------------------------------------------------------------------
// Endpoints
// ---------------------------------------------------------------------------------------------

pub(super) fn endpoints_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    vec![
        name_cell(item),
        json!(endpoint_addresses(item)),
        creation_age(item, clock),
    ]
}

/// Upstream's `formatEndpoints`: `ip:port` for each port and ready address of each subset
/// (bare IPs for a subset without ports), `<none>` without subsets, and an empty cell when
/// no address is ready.
fn endpoint_addresses(item: &Value) -> String {
    let subsets = list(item, "/subsets");
    if subsets.is_empty() {
        return "<none>".into();
    }
    let mut shown: Vec<String> = Vec::new();
    let mut total = 0;
    for subset in subsets {
        let addresses = list(subset, "/addresses");
        let ports = list(subset, "/ports");
        if ports.is_empty() {
            total += addresses.len();
            for address in addresses.iter().take(SHOWN.saturating_sub(shown.len())) {
                shown.push(text(address, "/ip").to_string());
            }
            continue;
        }
        for port in ports {
            total += addresses.len();
            for address in addresses.iter().take(SHOWN.saturating_sub(shown.len())) {
                shown.push(host_port(text(address, "/ip"), int(port, "/port")));
            }
        }
    }
    first_few(&shown, total, SHOWN)
}

/// `host:port`, with an IPv6 host in brackets.
fn host_port(host: &str, port: i64) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

pub(super) fn endpoint_slice_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    let ports: Vec<String> = list(item, "/ports")
        .iter()
        .map(|port| match port.get("port").and_then(Value::as_i64) {
            Some(number) => number.to_string(),
            None => match port.get("name").and_then(Value::as_str) {
                Some(name) => name.to_string(),
                // A port with neither number nor name means all ports.
                None => "*".into(),
            },
        })
        .collect();
    let addresses: Vec<String> = list(item, "/endpoints")
        .iter()
        .flat_map(|endpoint| list(endpoint, "/addresses"))
        .map(|address| address.as_str().unwrap_or_default().to_string())
        .collect();
    vec![
        name_cell(item),
        json!(text(item, "/addressType")),
        json!(few_or_unset(&ports)),
        json!(few_or_unset(&addresses)),
        creation_age(item, clock),
    ]
}

/// The first few entries, or `<unset>` for none (as upstream prints empty slices).
fn few_or_unset(entries: &[String]) -> String {
    if entries.is_empty() {
        "<unset>".into()
    } else {
        first_few(entries, entries.len(), SHOWN)
    }
}

// ---------------------------------------------------------------------------------------------
// Ingresses and network policies
// ---------------------------------------------------------------------------------------------

pub(super) fn ingress_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    let class = item
        .pointer("/spec/ingressClassName")
        .and_then(Value::as_str)
        .unwrap_or("<none>");
    let mut addresses: Vec<&str> = list(item, "/status/loadBalancer/ingress")
        .iter()
        .filter_map(|i| optional_text(i, "/ip").or_else(|| optional_text(i, "/hostname")))
        .collect();
    addresses.sort_unstable();
    addresses.dedup();
    let ports = if list(item, "/spec/tls").is_empty() {
        "80"
    } else {
        "80, 443"
    };
    vec![
        name_cell(item),
        json!(class),
        json!(ingress_hosts(list(item, "/spec/rules"))),
        json!(addresses.join(",")),
        json!(ports),
        creation_age(item, clock),
    ]
}

/// Upstream's `formatHosts`: the hosts of the first rules, up to three, `*` when none names a
/// host. When rules remain after the third host, the rest is counted as all rules but three,
/// hostless ones included, as upstream counts it.
fn ingress_hosts(rules: &[Value]) -> String {
    let mut hosts: Vec<String> = Vec::new();
    for rule in rules {
        if hosts.len() == SHOWN {
            return first_few(&hosts, rules.len(), SHOWN);
        }
        if let Some(host) = optional_text(rule, "/host") {
            hosts.push(host.to_string());
        }
    }
    if hosts.is_empty() {
        "*".into()
    } else {
        hosts.join(",")
    }
}

pub(super) fn ingress_class_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    let parameters = match item.pointer("/spec/parameters").filter(|p| p.is_object()) {
        None => "<none>".to_string(),
        Some(parameters) => {
            let kind = text(parameters, "/kind");
            let name = text(parameters, "/name");
            if present(parameters, "/apiGroup") {
                format!("{kind}.{}/{name}", text(parameters, "/apiGroup"))
            } else {
                format!("{kind}/{name}")
            }
        }
    };
    vec![
        name_cell(item),
        json!(text(item, "/spec/controller")),
        json!(parameters),
        creation_age(item, clock),
    ]
}

/// An empty pod selector (all pods of the namespace) prints as `<none>`, as upstream's does.
pub(super) fn network_policy_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    vec![
        name_cell(item),
        json!(format_label_selector(item.pointer("/spec/podSelector"))),
        creation_age(item, clock),
    ]
}

pub(super) const SERVICE_CIDR_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "CIDRs",
        "The ranges Service cluster IPs are allocated from.",
    ),
    AGE,
];

/// Upstream defines two columns (its printer also sends the age, which kubectl drops).
pub(super) const IP_ADDRESS_COLUMNS: &[Column] = &[
    NAME,
    Column::string("ParentRef", "The object the address is allocated to."),
];

pub(super) fn service_cidr_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    let cidrs: Vec<&str> = list(item, "/spec/cidrs")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    vec![
        name_cell(item),
        json!(cidrs.join(",")),
        creation_age(item, clock),
    ]
}

/// `services/default/kubernetes`: the parent's lower-cased group resource, its namespace if
/// any, and its name; `<none>` without one.
pub(super) fn ip_address_cells(item: &Value, _: &Clock) -> Vec<Value> {
    let parent = match item.pointer("/spec/parentRef").filter(|v| !v.is_null()) {
        Some(parent) => {
            let resource = text(parent, "/resource");
            let mut name = match optional_text(parent, "/group") {
                Some(group) => format!("{resource}.{group}"),
                None => resource.to_string(),
            }
            .to_lowercase();
            if let Some(namespace) = optional_text(parent, "/namespace") {
                name = format!("{name}/{namespace}");
            }
            format!("{name}/{}", text(parent, "/name"))
        }
        None => "<none>".to_string(),
    };
    vec![name_cell(item), json!(parent)]
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[test]
    fn cluster_ip_services() {
        let resource = builtin("", "services");
        assert_eq!(
            headers(&resource),
            [
                ("Name".into(), 0),
                ("Type".into(), 0),
                ("Cluster-IP".into(), 0),
                ("External-IP".into(), 0),
                ("Port(s)".into(), 0),
                ("Age".into(), 0),
                ("Selector".into(), 1)
            ]
        );
        let svc = json!({
            "metadata": meta("web", 7200),
            "spec": {"type": "ClusterIP", "clusterIP": "10.0.0.10", "clusterIPs": ["10.0.0.10"],
                     "ports": [{"port": 80, "protocol": "TCP"}, {"port": 443}],
                     "selector": {"tier": "front", "app": "web"}}
        });
        assert_eq!(
            cells(&resource, &svc),
            [
                json!("web"),
                json!("ClusterIP"),
                json!("10.0.0.10"),
                json!("<none>"),
                json!("80/TCP,443/TCP"),
                json!("120m"),
                json!("app=web,tier=front")
            ]
        );
    }

    #[test]
    fn services_of_other_types() {
        let resource = builtin("", "services");
        let node_port = json!({"metadata": meta("np", 1), "spec": {"type": "NodePort",
            "externalIPs": ["1.2.3.4"], "ports": [{"port": 80, "nodePort": 30080, "protocol": "UDP"}]}});
        let c = cells(&resource, &node_port);
        assert_eq!(
            (&c[2], &c[3], &c[4], &c[6]),
            (
                &json!("<none>"),
                &json!("1.2.3.4"),
                &json!("80:30080/UDP"),
                &json!("<none>")
            )
        );

        let pending = json!({"metadata": meta("lb", 1), "spec": {"type": "LoadBalancer"}});
        let c = cells(&resource, &pending);
        assert_eq!((&c[3], &c[4]), (&json!("<pending>"), &json!("<none>")));

        let balanced = json!({"metadata": meta("lb", 1),
            "spec": {"type": "LoadBalancer", "externalIPs": ["9.9.9.9"]},
            "status": {"loadBalancer": {"ingress": [{"ip": "5.5.5.5"}, {"hostname": "lb.example.com"}, {"ip": "5.5.5.5"}]}}});
        assert_eq!(
            cells(&resource, &balanced)[3],
            json!("5.5.5.5,lb.example.com,9.9.9.9")
        );

        let external = json!({"metadata": meta("ext", 1),
            "spec": {"type": "ExternalName", "externalName": "db.example.com"}});
        assert_eq!(cells(&resource, &external)[3], json!("db.example.com"));
    }

    #[test]
    fn endpoints_name_the_first_three_addresses_with_their_ports() {
        let resource = builtin("", "endpoints");
        assert_eq!(
            header_line(&resource),
            ["Name:string:0", "Endpoints:string:0", "Age:string:0"]
        );
        let endpoints = |subsets: Value| {
            cells(
                &resource,
                &json!({"metadata": meta("web", 60), "subsets": subsets}),
            )
        };
        assert_eq!(
            endpoints(json!([
                {"addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}],
                 "ports": [{"port": 80}, {"port": 443}]},
                {"addresses": [{"ip": "fd00::5"}], "ports": [{"port": 8080}]}
            ])),
            [
                json!("web"),
                json!("10.0.0.1:80,10.0.0.2:80,10.0.0.1:443 + 2 more..."),
                json!("60s")
            ]
        );
        assert_eq!(
            endpoints(json!([
                {"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80}]},
                {"addresses": [{"ip": "fd00::5"}], "ports": [{"port": 53}]}
            ]))[1],
            json!("10.0.0.1:80,[fd00::5]:53")
        );
        // A headless service's endpoints may have no ports.
        assert_eq!(
            endpoints(json!([{"addresses": [{"ip": "10.0.0.9"}]}]))[1],
            json!("10.0.0.9")
        );
        assert_eq!(
            endpoints(json!([{"notReadyAddresses": [{"ip": "10.0.0.3"}],
                              "ports": [{"port": 80}]}]))[1],
            json!("")
        );
        let bare = json!({"metadata": meta("web", 60)});
        assert_eq!(cells(&resource, &bare)[1], json!("<none>"));
    }

    #[test]
    fn endpoint_slices() {
        let resource = builtin("discovery.k8s.io", "endpointslices");
        assert_eq!(
            header_line(&resource),
            [
                "Name:string:0",
                "AddressType:string:0",
                "Ports:string:0",
                "Endpoints:string:0",
                "Age:string:0"
            ]
        );
        let slice = json!({"metadata": meta("web-abc", 60), "addressType": "IPv4",
            "ports": [{"name": "http", "port": 80}, {"name": "metrics"}, {}, {"port": 9000}],
            "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2", "10.0.0.3"]},
                          {"addresses": ["10.0.0.4"]}]});
        assert_eq!(
            cells(&resource, &slice),
            [
                json!("web-abc"),
                json!("IPv4"),
                json!("80,metrics,* + 1 more..."),
                json!("10.0.0.1,10.0.0.2,10.0.0.3 + 1 more..."),
                json!("60s")
            ]
        );
        let empty = json!({"metadata": meta("web-def", 60), "addressType": "IPv6",
            "ports": [{"port": 443}], "endpoints": []});
        assert_eq!(
            cells(&resource, &empty)[2..4],
            [json!("443"), json!("<unset>")]
        );
        let bare = json!({"metadata": meta("x", 60)});
        assert_eq!(
            cells(&resource, &bare)[1..4],
            [json!(""), json!("<unset>"), json!("<unset>")]
        );
    }

    #[test]
    fn ingresses() {
        let resource = builtin("networking.k8s.io", "ingresses");
        assert_eq!(
            header_line(&resource),
            [
                "Name:string:0",
                "Class:string:0",
                "Hosts:string:0",
                "Address:string:0",
                "Ports:string:0",
                "Age:string:0"
            ]
        );
        let ingress = json!({"metadata": meta("web", 120),
            "spec": {"ingressClassName": "nginx",
                     "rules": [{"host": "a.example.com"}, {"host": "b.example.com"}],
                     "tls": [{"hosts": ["a.example.com"], "secretName": "tls"}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "5.5.5.5"},
                {"hostname": "lb.example.com"}, {"ip": "1.1.1.1"}, {"ip": "5.5.5.5"}]}}});
        assert_eq!(
            cells(&resource, &ingress),
            [
                json!("web"),
                json!("nginx"),
                json!("a.example.com,b.example.com"),
                json!("1.1.1.1,5.5.5.5,lb.example.com"),
                json!("80, 443"),
                json!("2m")
            ]
        );
        let hosts = |rules: Value| {
            cells(
                &resource,
                &json!({"metadata": meta("web", 1), "spec": {"rules": rules}}),
            )[2]
            .clone()
        };
        // After three hosts, the rest counts every rule but three, hostless ones included.
        assert_eq!(
            hosts(json!([{"host": "a"}, {}, {"host": "b"}, {"host": "c"}, {"host": "d"}])),
            json!("a,b,c + 2 more...")
        );
        assert_eq!(
            hosts(json!([{"host": "a"}, {"host": "b"}, {"host": "c"}])),
            json!("a,b,c")
        );
        assert_eq!(hosts(json!([{"http": {}}])), json!("*"));
        let bare = json!({"metadata": meta("x", 1)});
        assert_eq!(
            cells(&resource, &bare)[1..5],
            [json!("<none>"), json!("*"), json!(""), json!("80")]
        );
    }

    #[test]
    fn ingress_classes() {
        let resource = builtin("networking.k8s.io", "ingressclasses");
        assert_eq!(
            header_line(&resource),
            [
                "Name:string:0",
                "Controller:string:0",
                "Parameters:string:0",
                "Age:string:0"
            ]
        );
        let class = |spec: Value| {
            cells(
                &resource,
                &json!({"metadata": meta("nginx", 60), "spec": spec}),
            )
        };
        assert_eq!(
            class(json!({"controller": "k8s.io/ingress-nginx",
                "parameters": {"apiGroup": "k8s.example.com", "kind": "IngressParameters",
                               "name": "external-lb"}})),
            [
                json!("nginx"),
                json!("k8s.io/ingress-nginx"),
                json!("IngressParameters.k8s.example.com/external-lb"),
                json!("60s")
            ]
        );
        assert_eq!(
            class(
                json!({"controller": "c", "parameters": {"kind": "ConfigMap", "name": "cfg",
                "scope": "Namespace", "namespace": "ops"}})
            )[2],
            json!("ConfigMap/cfg")
        );
        assert_eq!(
            class(json!({"controller": "c"}))[1..3],
            [json!("c"), json!("<none>")]
        );
    }

    #[test]
    fn network_policies() {
        let resource = builtin("networking.k8s.io", "networkpolicies");
        assert_eq!(
            header_line(&resource),
            ["Name:string:0", "Pod-Selector:string:0", "Age:string:0"]
        );
        let policy = |pod_selector: Value| {
            cells(
                &resource,
                &json!({"metadata": meta("p", 60), "spec": {"podSelector": pod_selector}}),
            )
        };
        assert_eq!(
            policy(json!({"matchLabels": {"role": "db"}})),
            [json!("p"), json!("role=db"), json!("60s")]
        );
        // An empty selector picks every pod of the namespace.
        assert_eq!(policy(json!({}))[1], json!("<none>"));
    }

    #[test]
    fn service_cidrs_and_ip_addresses() {
        let cidrs = builtin("networking.k8s.io", "servicecidrs");
        let cidr = json!({"metadata": meta("kubernetes", 60),
            "spec": {"cidrs": ["10.96.0.0/12", "fd00::/108"]}});
        assert_eq!(
            cells(&cidrs, &cidr),
            [
                json!("kubernetes"),
                json!("10.96.0.0/12,fd00::/108"),
                json!("60s")
            ]
        );
        let addresses = builtin("networking.k8s.io", "ipaddresses");
        assert_eq!(
            header_line(&addresses),
            ["Name:string:0", "ParentRef:string:0"]
        );
        let address = json!({"metadata": meta("10.96.0.1", 60), "spec": {"parentRef": {
            "group": "", "resource": "services", "namespace": "default", "name": "kubernetes"}}});
        assert_eq!(
            cells(&addresses, &address),
            [json!("10.96.0.1"), json!("services/default/kubernetes")]
        );
        let grouped = json!({"metadata": meta("10.0.0.9", 60), "spec": {"parentRef": {
            "group": "Gateway.Networking.k8s.io", "resource": "Gateways", "name": "edge"}}});
        assert_eq!(
            cells(&addresses, &grouped)[1],
            json!("gateways.gateway.networking.k8s.io/edge")
        );
        let orphan = json!({"metadata": meta("10.0.0.8", 60), "spec": {}});
        assert_eq!(cells(&addresses, &orphan)[1], json!("<none>"));
    }
}
