//! Printers for cluster-wide policy and bookkeeping: RBAC bindings, priority and runtime
//! classes, pod disruption budgets, leases, certificate signing requests, component
//! statuses, and Finale's own FinalizerClaims and FinalizerRemovals. (Roles and ClusterRoles have no printer upstream and print with the
//! default columns.)

use serde_json::{Value, json};

use super::{
    AGE, Clock, Column, NAME, creation_age, flag, human_duration, int, list, name_cell,
    optional_text, text,
};

pub(super) const CERTIFICATE_SIGNING_REQUEST_COLUMNS: &[Column] = &[
    NAME,
    AGE,
    Column::string("SignerName", "The signer the request is addressed to."),
    Column::string("Requestor", "The user who created the request."),
    Column::string(
        "RequestedDuration",
        "The validity the request asks for (spec.expirationSeconds).",
    ),
    Column::string(
        "Condition",
        "Pending, Approved or Denied, then Failed and Issued when they apply.",
    ),
];

pub(super) const COMPONENT_STATUS_COLUMNS: &[Column] = &[
    NAME,
    Column::string("Status", "Healthy, Unhealthy or Unknown."),
    Column::string("Message", "The component's answer to its health check."),
    Column::string("Error", "Why the health check failed."),
];

pub(super) const LEASE_COLUMNS: &[Column] = &[
    NAME,
    Column::string("Holder", "Identity of the current holder of the lease."),
    AGE,
];

pub(super) const FINALIZER_CLAIM_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "Finalizer",
        "The claimed finalizer, or a prefix ending in '/'.",
    ),
    Column::string(
        "Live",
        "Whether the controller's Lease is held and renewed within its duration (computed on read).",
    ),
    Column::string("Holder", "Who holds the controller's Lease."),
    Column::new(
        "Pending",
        "integer",
        "Objects being deleted that carry a finalizer the claim covers.",
    ),
    AGE,
    Column::string("Lease", "The controller's Lease, as namespace/name.").wide(),
    Column::string(
        "Policy",
        "When a person may remove the finalizer in the controller's place.",
    )
    .wide(),
];

pub(super) const FINALIZER_REMOVAL_COLUMNS: &[Column] = &[
    NAME,
    Column::string("Target", "The object the finalizer was removed from."),
    Column::string("Finalizer", "The finalizer that was forced off."),
    Column::string("Removed-By", "The user who asked for the removal."),
    AGE,
];

pub(super) const ROLE_BINDING_COLUMNS: &[Column] = &[
    NAME,
    Column::string("Role", "The role granted, as Kind/name."),
    AGE,
    Column::string("Users", "Users the role binding grants the role to.").wide(),
    Column::string("Groups", "Groups the role binding grants the role to.").wide(),
    Column::string(
        "ServiceAccounts",
        "Service accounts the role binding grants the role to, as namespace/name.",
    )
    .wide(),
];

pub(super) const CLUSTER_ROLE_BINDING_COLUMNS: &[Column] = &[
    NAME,
    Column::string("Role", "The cluster role granted, as ClusterRole/name."),
    AGE,
    Column::string(
        "Users",
        "Users the cluster role binding grants the role to.",
    )
    .wide(),
    Column::string(
        "Groups",
        "Groups the cluster role binding grants the role to.",
    )
    .wide(),
    Column::string(
        "ServiceAccounts",
        "Service accounts the cluster role binding grants the role to, as namespace/name.",
    )
    .wide(),
];

pub(super) const PRIORITY_CLASS_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Value",
        "integer",
        "The priority given to pods of the class.",
    ),
    Column::new(
        "Global-Default",
        "boolean",
        "Whether pods naming no class get this one.",
    ),
    AGE,
    Column::string(
        "PreemptionPolicy",
        "Whether pods of the class may preempt lower-priority pods.",
    ),
];

pub(super) const RUNTIME_CLASS_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "Handler",
        "The container runtime handler that runs the pods.",
    ),
    AGE,
];

pub(super) const POD_DISRUPTION_BUDGET_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "Min Available",
        "Pods that must stay available, as a number or a percentage (N/A when unset).",
    ),
    Column::string(
        "Max Unavailable",
        "Pods that may be unavailable, as a number or a percentage (N/A when unset).",
    ),
    Column::new(
        "Allowed Disruptions",
        "integer",
        "Pods that may be disrupted now (status.disruptionsAllowed).",
    ),
    AGE,
];

pub(super) fn lease_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    vec![
        name_cell(item),
        json!(text(item, "/spec/holderIdentity")),
        creation_age(item, clock),
    ]
}

pub(super) fn finalizer_claim_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    let live = match item.pointer("/status/live").and_then(Value::as_bool) {
        Some(true) => "True",
        Some(false) => "False",
        None => "Unknown",
    };
    vec![
        name_cell(item),
        json!(text(item, "/spec/finalizer")),
        json!(live),
        json!(text(item, "/status/holder")),
        json!(
            item.pointer("/status/pending")
                .and_then(Value::as_i64)
                .unwrap_or(0)
        ),
        creation_age(item, clock),
        json!(format!(
            "{}/{}",
            text(item, "/spec/lease/namespace"),
            text(item, "/spec/lease/name")
        )),
        json!(text(item, "/spec/forcePolicy")),
    ]
}

/// TARGET reads `Kind/name` or `Kind/namespace/name`.
pub(super) fn finalizer_removal_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    let kind = match text(item, "/spec/target/kind") {
        "" => text(item, "/spec/target/resource"),
        kind => kind,
    };
    let target = match text(item, "/spec/target/namespace") {
        "" => format!("{kind}/{}", text(item, "/spec/target/name")),
        namespace => format!("{kind}/{namespace}/{}", text(item, "/spec/target/name")),
    };
    vec![
        name_cell(item),
        json!(target),
        json!(text(item, "/spec/finalizer")),
        json!(text(item, "/status/removedBy")),
        creation_age(item, clock),
    ]
}

/// Shared by RoleBindings and ClusterRoleBindings. Subjects of another kind are not shown.
pub(super) fn role_binding_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    let mut users: Vec<&str> = Vec::new();
    let mut groups: Vec<&str> = Vec::new();
    let mut service_accounts: Vec<String> = Vec::new();
    for subject in list(item, "/subjects") {
        let name = text(subject, "/name");
        match text(subject, "/kind") {
            "User" => users.push(name),
            "Group" => groups.push(name),
            "ServiceAccount" => {
                service_accounts.push(format!("{}/{name}", text(subject, "/namespace")));
            }
            _ => {}
        }
    }
    vec![
        name_cell(item),
        json!(format!(
            "{}/{}",
            text(item, "/roleRef/kind"),
            text(item, "/roleRef/name")
        )),
        creation_age(item, clock),
        json!(users.join(", ")),
        json!(groups.join(", ")),
        json!(service_accounts.join(", ")),
    ]
}

/// `preemptionPolicy` is defaulted to `PreemptLowerPriority`, as upstream defaults it.
pub(super) fn priority_class_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    vec![
        name_cell(item),
        json!(int(item, "/value")),
        json!(flag(item, "/globalDefault", false)),
        creation_age(item, clock),
        json!(optional_text(item, "/preemptionPolicy").unwrap_or("PreemptLowerPriority")),
    ]
}

/// Upstream's `printCertificateSigningRequest`: the decision (Denied outranks Approved),
/// then `,Failed` and `,Issued`.
pub(super) fn certificate_signing_request_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    let has = |kind: &str| {
        list(item, "/status/conditions")
            .iter()
            .any(|c| c.get("type").and_then(Value::as_str) == Some(kind))
    };
    let mut condition = String::from(if has("Denied") {
        "Denied"
    } else if has("Approved") {
        "Approved"
    } else {
        "Pending"
    });
    if has("Failed") {
        condition.push_str(",Failed");
    }
    if optional_text(item, "/status/certificate").is_some_and(|c| !c.is_empty()) {
        condition.push_str(",Issued");
    }
    let duration = item
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64)
        .map_or_else(|| "<none>".to_string(), human_duration);
    vec![
        name_cell(item),
        creation_age(item, clock),
        json!(optional_text(item, "/spec/signerName").unwrap_or("<none>")),
        json!(text(item, "/spec/username")),
        json!(duration),
        json!(condition),
    ]
}

/// Upstream's `printComponentStatus`: the `Healthy` condition decides the status.
pub(super) fn component_status_cells(item: &Value, _: &Clock) -> Vec<Value> {
    let healthy = list(item, "/conditions")
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Healthy"));
    let (status, message, error) = match healthy {
        Some(condition) => (
            if condition.get("status").and_then(Value::as_str) == Some("True") {
                "Healthy"
            } else {
                "Unhealthy"
            },
            text(condition, "/message"),
            text(condition, "/error"),
        ),
        None => ("Unknown", "", ""),
    };
    vec![name_cell(item), json!(status), json!(message), json!(error)]
}

pub(super) fn runtime_class_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    vec![
        name_cell(item),
        json!(text(item, "/handler")),
        creation_age(item, clock),
    ]
}

pub(super) fn pod_disruption_budget_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    vec![
        name_cell(item),
        json!(int_or_percent(item, "/spec/minAvailable")),
        json!(int_or_percent(item, "/spec/maxUnavailable")),
        json!(int(item, "/status/disruptionsAllowed")),
        creation_age(item, clock),
    ]
}

/// An `IntOrString` (`1`, `"50%"`) as text; N/A when unset.
fn int_or_percent(item: &Value, pointer: &str) -> String {
    match item.pointer(pointer) {
        Some(Value::Number(number)) => number.to_string(),
        Some(Value::String(value)) => value.clone(),
        _ => "N/A".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[test]
    fn leases_show_their_holder() {
        let resource = builtin("coordination.k8s.io", "leases");
        let lease = json!({"metadata": meta("leader", 90), "spec": {"holderIdentity": "op-1"}});
        assert_eq!(
            cells(&resource, &lease),
            [json!("leader"), json!("op-1"), json!("90s")]
        );
        let free = json!({"metadata": meta("leader", 90), "spec": {}});
        assert_eq!(cells(&resource, &free)[1], json!(""));
    }

    #[test]
    fn role_bindings() {
        for (plural, role_kind) in [
            ("rolebindings", "Role"),
            ("clusterrolebindings", "ClusterRole"),
        ] {
            let resource = builtin("rbac.authorization.k8s.io", plural);
            assert_eq!(
                header_line(&resource),
                [
                    "Name:string:0",
                    "Role:string:0",
                    "Age:string:0",
                    "Users:string:1",
                    "Groups:string:1",
                    "ServiceAccounts:string:1"
                ],
                "{plural}"
            );
            let binding = json!({"metadata": meta("readers", 300),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": "view"},
            "subjects": [
                {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"},
                {"kind": "ServiceAccount", "name": "ci", "namespace": "build"},
                {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "devs"},
                {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "bob"},
                {"kind": "ServiceAccount", "name": "default", "namespace": "kube-system"}
            ]});
            assert_eq!(
                cells(&resource, &binding),
                [
                    json!("readers"),
                    json!(format!("{role_kind}/view")),
                    json!("5m"),
                    json!("alice, bob"),
                    json!("devs"),
                    json!("build/ci, kube-system/default")
                ],
                "{plural}"
            );
            let nobody = json!({"metadata": meta("empty", 300),
                "roleRef": {"kind": role_kind, "name": "edit"}});
            assert_eq!(
                cells(&resource, &nobody)[3..],
                [json!(""), json!(""), json!("")],
                "{plural}"
            );
        }
    }

    #[test]
    fn priority_classes() {
        let resource = builtin("scheduling.k8s.io", "priorityclasses");
        assert_eq!(
            header_line(&resource),
            [
                "Name:string:0",
                "Value:integer:0",
                "Global-Default:boolean:0",
                "Age:string:0",
                "PreemptionPolicy:string:0"
            ]
        );
        let class = json!({"metadata": {"name": "high", "creationTimestamp": ago(60)},
            "value": 1_000_000, "globalDefault": true, "preemptionPolicy": "Never"});
        assert_eq!(
            cells(&resource, &class),
            [
                json!("high"),
                json!(1_000_000),
                json!(true),
                json!("60s"),
                json!("Never")
            ]
        );
        let plain = json!({"metadata": {"name": "low", "creationTimestamp": ago(60)},
            "value": -5});
        assert_eq!(
            cells(&resource, &plain),
            [
                json!("low"),
                json!(-5),
                json!(false),
                json!("60s"),
                json!("PreemptLowerPriority")
            ]
        );
    }

    #[test]
    fn certificate_signing_requests() {
        let resource = builtin("certificates.k8s.io", "certificatesigningrequests");
        assert_eq!(
            header_line(&resource),
            [
                "Name:string:0",
                "Age:string:0",
                "SignerName:string:0",
                "Requestor:string:0",
                "RequestedDuration:string:0",
                "Condition:string:0"
            ]
        );
        let csr = json!({"metadata": meta("jane", 60),
            "spec": {"signerName": "kubernetes.io/kube-apiserver-client", "username": "admin",
                "expirationSeconds": 86400},
            "status": {"certificate": "Zm9v", "conditions": [{"type": "Approved", "status": "True"}]}});
        assert_eq!(
            cells(&resource, &csr),
            [
                json!("jane"),
                json!("60s"),
                json!("kubernetes.io/kube-apiserver-client"),
                json!("admin"),
                json!("24h"),
                json!("Approved,Issued")
            ]
        );
        let pending = json!({"metadata": meta("new", 60), "spec": {}});
        assert_eq!(
            cells(&resource, &pending)[2..],
            [
                json!("<none>"),
                json!(""),
                json!("<none>"),
                json!("Pending")
            ]
        );
    }

    #[test]
    fn component_statuses() {
        let resource = builtin("", "componentstatuses");
        assert_eq!(
            header_line(&resource),
            [
                "Name:string:0",
                "Status:string:0",
                "Message:string:0",
                "Error:string:0"
            ]
        );
        let down = json!({"metadata": {"name": "store"}, "conditions": [
            {"type": "Healthy", "status": "False", "error": "the store is closed"}]});
        assert_eq!(
            cells(&resource, &down),
            [
                json!("store"),
                json!("Unhealthy"),
                json!(""),
                json!("the store is closed")
            ]
        );
    }

    #[test]
    fn runtime_classes() {
        let resource = builtin("node.k8s.io", "runtimeclasses");
        assert_eq!(
            header_line(&resource),
            ["Name:string:0", "Handler:string:0", "Age:string:0"]
        );
        let class = json!({"metadata": {"name": "gvisor", "creationTimestamp": ago(60)},
            "handler": "runsc"});
        assert_eq!(
            cells(&resource, &class),
            [json!("gvisor"), json!("runsc"), json!("60s")]
        );
    }

    #[test]
    fn pod_disruption_budgets() {
        let resource = builtin("policy", "poddisruptionbudgets");
        assert_eq!(
            header_line(&resource),
            [
                "Name:string:0",
                "Min Available:string:0",
                "Max Unavailable:string:0",
                "Allowed Disruptions:integer:0",
                "Age:string:0"
            ]
        );
        let budget = |spec: Value, status: Value| {
            cells(
                &resource,
                &json!({"metadata": meta("db", 60), "spec": spec, "status": status}),
            )
        };
        assert_eq!(
            budget(
                json!({"minAvailable": 2, "selector": {"matchLabels": {"app": "db"}}}),
                json!({"disruptionsAllowed": 1})
            ),
            [
                json!("db"),
                json!("2"),
                json!("N/A"),
                json!(1),
                json!("60s")
            ]
        );
        assert_eq!(
            budget(json!({"maxUnavailable": "25%"}), json!({}))[1..4],
            [json!("N/A"), json!("25%"), json!(0)]
        );
    }
}
