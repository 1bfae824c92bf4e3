//! Printers for the core/v1 kinds that describe the cluster and its configuration:
//! namespaces, config maps, secrets, service accounts, nodes and resource quotas. (LimitRanges
//! have no printer upstream and print with the default columns.)

use serde_json::{Value, json};

use super::{
    AGE, Clock, Column, NAME, count, creation_age, list, name_cell, optional_text, quantity, text,
};

pub(super) const NAMESPACE_COLUMNS: &[Column] = &[
    NAME,
    Column::string("Status", "The namespace's phase: Active or Terminating."),
    AGE,
];

pub(super) const CONFIG_MAP_COLUMNS: &[Column] = &[
    NAME,
    Column::string("Data", "Number of keys in data and binaryData."),
    AGE,
];

pub(super) const SECRET_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "Type",
        "The secret's type, which says how its data is used.",
    ),
    Column::string("Data", "Number of keys in data."),
    AGE,
];

pub(super) const SERVICE_ACCOUNT_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "Secrets",
        "Number of secrets listed in the service account.",
    ),
    AGE,
];

pub(super) const NODE_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "Status",
        "The status of the node (its Ready condition, and SchedulingDisabled when cordoned).",
    ),
    Column::string(
        "Roles",
        "The roles of the node (its node-role.kubernetes.io/ labels).",
    ),
    AGE,
    Column::string("Version", "Kubelet version reported by the node."),
    Column::string("Internal-IP", "The node's internal IP address.").wide(),
    Column::string("External-IP", "The node's external IP address.").wide(),
    Column::string(
        "OS-Image",
        "The operating system image reported by the node.",
    )
    .wide(),
    Column::string("Kernel-Version", "Kernel version reported by the node.").wide(),
    Column::string(
        "Container-Runtime",
        "Container runtime version reported by the node.",
    )
    .wide(),
];

pub(super) const RESOURCE_QUOTA_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "Request",
        "Usage out of the hard limit of each quota on requests and object counts (used/hard).",
    ),
    Column::string(
        "Limit",
        "Usage out of the hard limit of each quota on limits.* resources (used/hard).",
    ),
    AGE,
];

pub(super) fn namespace_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    vec![
        name_cell(item),
        json!(text(item, "/status/phase")),
        creation_age(item, clock),
    ]
}

pub(super) fn config_map_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    vec![
        name_cell(item),
        json!(count(item, "/data") + count(item, "/binaryData")),
        creation_age(item, clock),
    ]
}

pub(super) fn secret_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    vec![
        name_cell(item),
        json!(text(item, "/type")),
        json!(count(item, "/data")),
        creation_age(item, clock),
    ]
}

pub(super) fn service_account_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    vec![
        name_cell(item),
        json!(count(item, "/secrets")),
        creation_age(item, clock),
    ]
}

/// Upstream's `printNode`: Ready or NotReady from the Ready condition (Unknown without
/// one), SchedulingDisabled when cordoned; roles from `node-role.kubernetes.io/<role>` labels
/// and the legacy `kubernetes.io/role` label.
pub(super) fn node_cells(node: &Value, clock: &Clock) -> Vec<Value> {
    let mut status: Vec<&str> = Vec::new();
    if let Some(ready) = list(node, "/status/conditions")
        .iter()
        .find(|c| text(c, "/type") == "Ready")
    {
        status.push(if text(ready, "/status") == "True" {
            "Ready"
        } else {
            "NotReady"
        });
    }
    if status.is_empty() {
        status.push("Unknown");
    }
    if node.pointer("/spec/unschedulable") == Some(&Value::Bool(true)) {
        status.push("SchedulingDisabled");
    }
    let mut roles: Vec<String> = node
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(
            |(key, value)| match key.strip_prefix("node-role.kubernetes.io/") {
                Some(role) if !role.is_empty() => Some(role.to_string()),
                _ if key == "kubernetes.io/role" => value.as_str().map(str::to_string),
                _ => None,
            },
        )
        .filter(|role| !role.is_empty())
        .collect();
    roles.sort();
    roles.dedup();
    let address = |kind: &str| {
        list(node, "/status/addresses")
            .iter()
            .find(|a| text(a, "/type") == kind)
            .map(|a| text(a, "/address").to_string())
            .unwrap_or_else(|| "<none>".into())
    };
    let info = |field: &str| {
        optional_text(node, &format!("/status/nodeInfo/{field}"))
            .filter(|v| !v.is_empty())
            .unwrap_or("<unknown>")
            .to_string()
    };
    vec![
        name_cell(node),
        json!(status.join(",")),
        json!(if roles.is_empty() {
            "<none>".to_string()
        } else {
            roles.join(",")
        }),
        creation_age(node, clock),
        json!(text(node, "/status/nodeInfo/kubeletVersion")),
        json!(address("InternalIP")),
        json!(address("ExternalIP")),
        json!(info("osImage")),
        json!(info("kernelVersion")),
        json!(info("containerRuntimeVersion")),
    ]
}

/// Upstream's `printResourceQuota`: every resource of `status.hard` (sorted) as
/// `name: used/hard`, `limits.*` ones in the Limit column and the rest in Request. Status is
/// written by the quota controller, so a quota it has not counted yet shows two empty cells.
pub(super) fn resource_quota_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    let mut counted: Vec<(&String, &Value)> = item
        .pointer("/status/hard")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .collect();
    counted.sort_by_key(|(resource, _)| *resource);
    let mut requests: Vec<String> = Vec::new();
    let mut limits: Vec<String> = Vec::new();
    for (resource, hard) in counted {
        // A resource counted against the hard limit but not yet used prints as 0.
        let used = item
            .pointer("/status/used")
            .and_then(|used| used.get(resource.as_str()))
            .and_then(quantity)
            .unwrap_or_else(|| "0".into());
        let hard = quantity(hard).unwrap_or_else(|| "0".into());
        let entry = format!("{resource}: {used}/{hard}");
        let is_limit = matches!(resource.split_once('.'), Some(("limits", _)));
        if is_limit {
            limits.push(entry);
        } else {
            requests.push(entry);
        }
    }
    vec![
        name_cell(item),
        json!(requests.join(", ")),
        json!(limits.join(", ")),
        creation_age(item, clock),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[test]
    fn namespaces() {
        let resource = builtin("", "namespaces");
        assert_eq!(
            headers(&resource),
            [("Name".into(), 0), ("Status".into(), 0), ("Age".into(), 0)]
        );
        let ns = json!({"metadata": meta("dev", 3 * 86_400 + 7200), "status": {"phase": "Active"}});
        assert_eq!(
            cells(&resource, &ns),
            [json!("dev"), json!("Active"), json!("3d2h")]
        );
    }

    #[test]
    fn config_maps_count_data_and_binary_data() {
        let resource = builtin("", "configmaps");
        let cm = json!({"metadata": meta("cfg", 5), "data": {"a": "1", "b": "2"},
                        "binaryData": {"c": "AA=="}});
        assert_eq!(cells(&resource, &cm), [json!("cfg"), json!(3), json!("5s")]);
    }

    #[test]
    fn secrets() {
        let resource = builtin("", "secrets");
        let secret = json!({"metadata": meta("s", 600), "type": "kubernetes.io/tls",
                            "data": {"tls.crt": "", "tls.key": ""}});
        assert_eq!(
            cells(&resource, &secret),
            [
                json!("s"),
                json!("kubernetes.io/tls"),
                json!(2),
                json!("10m")
            ]
        );
    }

    #[test]
    fn service_accounts_count_their_secrets() {
        let resource = builtin("", "serviceaccounts");
        assert_eq!(
            headers(&resource),
            [("Name".into(), 0), ("Secrets".into(), 0), ("Age".into(), 0)]
        );
        let sa = json!({"metadata": meta("default", 60)});
        assert_eq!(
            cells(&resource, &sa),
            [json!("default"), json!(0), json!("60s")]
        );
        let sa = json!({"metadata": meta("bot", 60), "secrets": [{"name": "bot-token"}]});
        assert_eq!(cells(&resource, &sa)[1], json!(1));
    }

    #[test]
    fn nodes() {
        let resource = builtin("", "nodes");
        let node = json!({
            "metadata": {"name": "n1", "creationTimestamp": ago(600),
                         "labels": {"node-role.kubernetes.io/control-plane": "",
                                    "kubernetes.io/role": "edge"}},
            "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "False"}],
                       "addresses": [{"type": "InternalIP", "address": "10.0.0.5"}],
                       "nodeInfo": {"kubeletVersion": "v1.33.0", "osImage": "Debian"}}
        });
        assert_eq!(
            cells(&resource, &node),
            [
                json!("n1"),
                json!("NotReady,SchedulingDisabled"),
                json!("control-plane,edge"),
                json!("10m"),
                json!("v1.33.0"),
                json!("10.0.0.5"),
                json!("<none>"),
                json!("Debian"),
                json!("<unknown>"),
                json!("<unknown>")
            ]
        );
        let fresh = json!({"metadata": {"name": "n2", "creationTimestamp": ago(5)}});
        let c = cells(&resource, &fresh);
        assert_eq!((&c[1], &c[2]), (&json!("Unknown"), &json!("<none>")));
    }

    #[test]
    fn resource_quotas_split_usage_into_requests_and_limits() {
        let resource = builtin("", "resourcequotas");
        assert_eq!(
            header_line(&resource),
            [
                "Name:string:0",
                "Request:string:0",
                "Limit:string:0",
                "Age:string:0"
            ]
        );
        let quota = json!({
            "metadata": meta("compute", 3600),
            "spec": {"hard": {"pods": "10", "requests.cpu": "2", "limits.memory": "4Gi"}},
            "status": {"hard": {"pods": "10", "requests.cpu": "2", "limits.memory": "4Gi",
                                "limits.cpu": 4},
                       "used": {"pods": "3", "requests.cpu": "500m", "limits.memory": "1Gi"}}
        });
        assert_eq!(
            cells(&resource, &quota),
            [
                json!("compute"),
                json!("pods: 3/10, requests.cpu: 500m/2"),
                json!("limits.cpu: 0/4, limits.memory: 1Gi/4Gi"),
                json!("60m")
            ]
        );
        // Until the quota controller has counted, status is empty and so are the cells.
        let uncounted = json!({"metadata": meta("fresh", 5), "spec": {"hard": {"pods": "1"}}});
        assert_eq!(
            cells(&resource, &uncounted),
            [json!("fresh"), json!(""), json!(""), json!("5s")]
        );
    }
}
