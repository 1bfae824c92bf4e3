//! Printers for the API server's own configuration: admission webhook configurations,
//! ValidatingAdmissionPolicies and their bindings, API Priority and Fairness (FlowSchemas,
//! PriorityLevelConfigurations), as upstream's internal printers show them, and APIServices,
//! as kube-aggregator's table convertor does.

use std::cmp::Ordering;

use serde_json::{Value, json};

use super::{AGE, Clock, Column, NAME, count, creation_age, int, name_cell, optional_text, text};

pub(super) const WEBHOOK_CONFIGURATION_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Webhooks",
        "integer",
        "Webhooks indicates the number of webhooks registered in this configuration",
    ),
    AGE,
];

pub(super) const VALIDATING_ADMISSION_POLICY_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Validations",
        "integer",
        "Validations indicates the number of validation rules defined in this configuration",
    ),
    Column::string(
        "ParamKind",
        "ParamKind specifies the kind of resources used to parameterize this policy",
    ),
    AGE,
];

pub(super) const VALIDATING_ADMISSION_POLICY_BINDING_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "PolicyName",
        "PolicyName indicates the policy definition which the policy binding binded to",
    ),
    Column::string(
        "ParamRef",
        "ParamRef indicates the param resource which sets the configration param",
    ),
    AGE,
];

pub(super) const FLOW_SCHEMA_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "PriorityLevel",
        "The PriorityLevelConfiguration the matching requests are assigned to.",
    ),
    Column::string(
        "MatchingPrecedence",
        "The order of this schema among the others: the lowest matching one applies.",
    ),
    Column::string(
        "DistinguisherMethod",
        "How matching requests are split into flows: ByUser, ByNamespace, or none.",
    ),
    AGE,
    Column::string(
        "MissingPL",
        "references a broken or non-existent PriorityLevelConfiguration",
    ),
];

pub(super) const PRIORITY_LEVEL_COLUMNS: &[Column] = &[
    NAME,
    Column::string("Type", "Exempt or Limited."),
    Column::string(
        "NominalConcurrencyShares",
        "The share of the server's concurrency this level is entitled to.",
    ),
    Column::string("Queues", "The number of queues of this level."),
    Column::string("HandSize", "The queues each flow is shuffle-sharded over."),
    Column::string(
        "QueueLengthLimit",
        "The requests a queue may hold before further ones are rejected.",
    ),
    AGE,
];

pub(super) const API_SERVICE_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "Service",
        "The reference to the service that hosts this API endpoint.",
    ),
    Column::string("Available", "Whether this service is available."),
    AGE,
];

/// `Local` for an API the server serves itself, else the backing Service; the `Available`
/// condition's status, with its reason when not True.
pub(super) fn api_service_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    let service = match item.pointer("/spec/service").filter(|v| !v.is_null()) {
        Some(service) => format!("{}/{}", text(service, "/namespace"), text(service, "/name")),
        None => "Local".to_string(),
    };
    let available = super::list(item, "/status/conditions")
        .iter()
        .find(|condition| text(condition, "/type") == "Available")
        .map_or_else(
            || "Unknown".to_string(),
            |condition| match (
                text(condition, "/status"),
                optional_text(condition, "/reason"),
            ) {
                ("True", _) => "True".to_string(),
                (status, Some(reason)) => format!("{status} ({reason})"),
                (status, None) => status.to_string(),
            },
        );
    vec![
        name_cell(item),
        json!(service),
        json!(available),
        creation_age(item, clock),
    ]
}

/// Mutating and validating webhook configurations: how many webhooks each holds.
pub(super) fn webhook_configuration_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    vec![
        name_cell(item),
        json!(count(item, "/webhooks")),
        creation_age(item, clock),
    ]
}

pub(super) fn validating_admission_policy_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    let param_kind = match item.pointer("/spec/paramKind").filter(|v| !v.is_null()) {
        Some(kind) => format!("{}/{}", text(kind, "/apiVersion"), text(kind, "/kind")),
        None => "<unset>".to_string(),
    };
    vec![
        name_cell(item),
        json!(count(item, "/spec/validations")),
        json!(param_kind),
        creation_age(item, clock),
    ]
}

/// The binding's param as upstream names it: `namespace/name`, `*/name` when no namespace
/// is given (the param may be cluster-scoped), the selector, or `<unset>`.
pub(super) fn validating_admission_policy_binding_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    let param = match item.pointer("/spec/paramRef").filter(|v| !v.is_null()) {
        Some(reference) => match optional_text(reference, "/name") {
            Some(name) => match optional_text(reference, "/namespace") {
                Some(namespace) => format!("{namespace}/{name}"),
                None => format!("*/{name}"),
            },
            None => match reference.get("selector").filter(|v| !v.is_null()) {
                Some(selector) => super::format_label_selector(Some(selector)),
                None => "<unset>".to_string(),
            },
        },
        None => "<unset>".to_string(),
    };
    vec![
        name_cell(item),
        json!(text(item, "/spec/policyName")),
        json!(param),
        creation_age(item, clock),
    ]
}

/// `MissingPL` is the status of the `Dangling` condition, `?` before the controller set it.
pub(super) fn flow_schema_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    let dangling = super::list(item, "/status/conditions")
        .iter()
        .find(|condition| text(condition, "/type") == "Dangling")
        .map_or("?", |condition| text(condition, "/status"));
    vec![
        name_cell(item),
        json!(text(item, "/spec/priorityLevelConfiguration/name")),
        json!(int(item, "/spec/matchingPrecedence")),
        json!(optional_text(item, "/spec/distinguisherMethod/type").unwrap_or("<none>")),
        creation_age(item, clock),
        json!(dangling),
    ]
}

/// Upstream lists FlowSchemas in the order they are matched: by precedence, then name.
pub(super) fn flow_schema_order(a: &Value, b: &Value) -> Ordering {
    int(a, "/spec/matchingPrecedence")
        .cmp(&int(b, "/spec/matchingPrecedence"))
        .then_with(|| crate::object::name(a).cmp(crate::object::name(b)))
}

/// Limited levels show their shares and queuing; the rest `<none>`.
pub(super) fn priority_level_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    let none = || json!("<none>");
    let (mut shares, mut queues, mut hand_size, mut queue_length) =
        (none(), none(), none(), none());
    if let Some(limited) = item.pointer("/spec/limited").filter(|v| !v.is_null()) {
        shares = json!(int(limited, "/nominalConcurrencyShares"));
        if let Some(queuing) = limited
            .pointer("/limitResponse/queuing")
            .filter(|v| !v.is_null())
        {
            queues = json!(int(queuing, "/queues"));
            hand_size = json!(int(queuing, "/handSize"));
            queue_length = json!(int(queuing, "/queueLengthLimit"));
        }
    }
    vec![
        name_cell(item),
        json!(text(item, "/spec/type")),
        shares,
        queues,
        hand_size,
        queue_length,
        creation_age(item, clock),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use serde_json::json;

    #[test]
    fn api_services_name_their_backend_and_availability() {
        let resource = builtin("apiregistration.k8s.io", "apiservices");
        let local = json!({"metadata": meta("v1.apps", 60), "spec": {"group": "apps", "version": "v1"},
            "status": {"conditions": [{"type": "Available", "status": "True", "reason": "Local"}]}});
        assert_eq!(
            cells(&resource, &local),
            [
                json!("v1.apps"),
                json!("Local"),
                json!("True"),
                json!("60s")
            ]
        );
        let remote = json!({"metadata": meta("v1beta1.metrics.k8s.io", 60), "spec": {
            "service": {"namespace": "kube-system", "name": "metrics-server"}},
            "status": {"conditions": [{"type": "Available", "status": "False", "reason": "MissingEndpoints"}]}});
        assert_eq!(
            cells(&resource, &remote)[1..3],
            [
                json!("kube-system/metrics-server"),
                json!("False (MissingEndpoints)")
            ]
        );
        let unknown = json!({"metadata": meta("v1.x", 60), "spec": {}});
        assert_eq!(cells(&resource, &unknown)[2], json!("Unknown"));
    }

    #[test]
    fn webhook_configurations_count_their_webhooks() {
        for plural in [
            "mutatingwebhookconfigurations",
            "validatingwebhookconfigurations",
        ] {
            let resource = builtin("admissionregistration.k8s.io", plural);
            assert_eq!(
                header_line(&resource),
                ["Name:string:0", "Webhooks:integer:0", "Age:string:0"]
            );
            let configuration = json!({"metadata": meta("hooks", 120),
                "webhooks": [{"name": "a.example.com"}, {"name": "b.example.com"}]});
            assert_eq!(
                cells(&resource, &configuration),
                [json!("hooks"), json!(2), json!("2m")]
            );
            let empty = json!({"metadata": meta("none", 5)});
            assert_eq!(cells(&resource, &empty)[1], json!(0));
        }
    }

    #[test]
    fn validating_admission_policies_and_bindings() {
        let policies = builtin(
            "admissionregistration.k8s.io",
            "validatingadmissionpolicies",
        );
        assert_eq!(
            header_line(&policies),
            [
                "Name:string:0",
                "Validations:integer:0",
                "ParamKind:string:0",
                "Age:string:0"
            ]
        );
        let policy = json!({"metadata": meta("replicas", 60), "spec": {
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "validations": [{"expression": "true"}, {"expression": "1 < 2"}]}});
        assert_eq!(
            cells(&policies, &policy),
            [
                json!("replicas"),
                json!(2),
                json!("v1/ConfigMap"),
                json!("60s")
            ]
        );
        let plain = json!({"metadata": meta("plain", 60), "spec": {}});
        assert_eq!(cells(&policies, &plain)[2], json!("<unset>"));

        let bindings = builtin(
            "admissionregistration.k8s.io",
            "validatingadmissionpolicybindings",
        );
        assert_eq!(
            header_line(&bindings),
            [
                "Name:string:0",
                "PolicyName:string:0",
                "ParamRef:string:0",
                "Age:string:0"
            ]
        );
        let param = |param_ref: serde_json::Value| {
            let binding = json!({"metadata": meta("b", 60),
                "spec": {"policyName": "replicas", "paramRef": param_ref}});
            cells(&bindings, &binding)
        };
        assert_eq!(
            param(json!({"name": "limits", "namespace": "team"}))[1..3],
            [json!("replicas"), json!("team/limits")]
        );
        assert_eq!(param(json!({"name": "limits"}))[2], json!("*/limits"));
        assert_eq!(
            param(json!({"selector": {"matchLabels": {"tier": "web"}}}))[2],
            json!("tier=web")
        );
        assert_eq!(param(json!(null))[2], json!("<unset>"));
    }

    #[test]
    fn flow_schemas_in_matching_order_and_priority_levels() {
        let schemas = builtin("flowcontrol.apiserver.k8s.io", "flowschemas");
        let schema = |name: &str, precedence: i64, dangling: Option<&str>| {
            let mut schema = json!({"metadata": meta(name, 30), "spec": {
                "priorityLevelConfiguration": {"name": "workload-low"},
                "matchingPrecedence": precedence,
                "distinguisherMethod": {"type": "ByUser"}}});
            if let Some(status) = dangling {
                schema["status"] = json!({"conditions": [{"type": "Dangling", "status": status}]});
            }
            schema
        };
        assert_eq!(
            cells(&schemas, &schema("service-accounts", 9000, Some("False"))),
            [
                json!("service-accounts"),
                json!("workload-low"),
                json!(9000),
                json!("ByUser"),
                json!("30s"),
                json!("False")
            ]
        );
        assert_eq!(cells(&schemas, &schema("fresh", 10, None))[5], json!("?"));
        let list = json!({"kind": "FlowSchemaList", "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "metadata": {}, "items": [schema("b", 500, None), schema("z", 100, None), schema("a", 500, None)]});
        let table = rendered(&schemas, &list);
        let names: Vec<&serde_json::Value> = table["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .map(|row| &row["cells"][0])
            .collect();
        assert_eq!(names, [&json!("z"), &json!("a"), &json!("b")]);

        let levels = builtin(
            "flowcontrol.apiserver.k8s.io",
            "prioritylevelconfigurations",
        );
        let limited = json!({"metadata": meta("workload-low", 30), "spec": {"type": "Limited",
            "limited": {"nominalConcurrencyShares": 100, "limitResponse": {"type": "Queue",
                "queuing": {"queues": 128, "handSize": 6, "queueLengthLimit": 50}}}}});
        assert_eq!(
            cells(&levels, &limited)[1..6],
            [
                json!("Limited"),
                json!(100),
                json!(128),
                json!(6),
                json!(50)
            ]
        );
        let exempt = json!({"metadata": meta("exempt", 30), "spec": {"type": "Exempt"}});
        assert_eq!(
            cells(&levels, &exempt)[1..6],
            [
                json!("Exempt"),
                json!("<none>"),
                json!("<none>"),
                json!("<none>"),
                json!("<none>")
            ]
        );
    }
}
