//! Printers for the kinds that run pods from a template: deployments, replica sets, stateful
//! sets, daemon sets and replication controllers, with the pod templates and controller
//! revisions they keep, and the `/scale` subresource several of them serve.

use serde_json::{Value, json};

use super::{
    AGE, BuiltinPrinter, CONTAINERS, Clock, Column, IMAGES, NAME, NAME_DESCRIPTION,
    container_cells, creation_age, format_label_selector, format_labels, int, list, name_cell,
    optional_text, selector_string, text,
};

pub(super) const DEPLOYMENT_COLUMNS: &[Column] = &[
    NAME,
    Column::string("Ready", "Ready pods out of desired pods."),
    Column::string("Up-to-date", "Pods running the latest pod template."),
    Column::string("Available", "Pods available to serve."),
    AGE,
    CONTAINERS,
    IMAGES,
    Column::string("Selector", "Label selector of the deployment's pods.").wide(),
];

/// The counts ReplicaSets and ReplicationControllers both print.
const DESIRED_PODS: Column = Column::new(
    "Desired",
    "integer",
    "Number of pods desired (spec.replicas).",
);
const CURRENT_PODS: Column = Column::new(
    "Current",
    "integer",
    "Number of pods that exist (status.replicas).",
);
const READY_PODS: Column = Column::new(
    "Ready",
    "integer",
    "Number of ready pods (status.readyReplicas).",
);

pub(super) const REPLICA_SET_COLUMNS: &[Column] = &[
    NAME,
    DESIRED_PODS,
    CURRENT_PODS,
    READY_PODS,
    AGE,
    CONTAINERS,
    IMAGES,
    Column::string("Selector", "Label selector of the replica set's pods.").wide(),
];

pub(super) const STATEFUL_SET_COLUMNS: &[Column] = &[
    NAME,
    Column::string("Ready", "Ready pods out of desired pods."),
    AGE,
    CONTAINERS,
    IMAGES,
];

pub(super) const DAEMON_SET_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Desired",
        "integer",
        "Nodes that should run the daemon pod (status.desiredNumberScheduled).",
    ),
    Column::new(
        "Current",
        "integer",
        "Nodes running the daemon pod (status.currentNumberScheduled).",
    ),
    Column::new(
        "Ready",
        "integer",
        "Nodes whose daemon pod is ready (status.numberReady).",
    ),
    Column::new(
        "Up-to-date",
        "integer",
        "Nodes running the latest pod template (status.updatedNumberScheduled).",
    ),
    Column::new(
        "Available",
        "integer",
        "Nodes whose daemon pod is available (status.numberAvailable).",
    ),
    Column::string(
        "Node Selector",
        "Labels a node needs to run the daemon pod (the template's nodeSelector).",
    ),
    AGE,
    CONTAINERS,
    IMAGES,
    Column::string("Selector", "Label selector of the daemon set's pods.").wide(),
];

pub(super) const REPLICATION_CONTROLLER_COLUMNS: &[Column] = &[
    NAME,
    DESIRED_PODS,
    CURRENT_PODS,
    READY_PODS,
    AGE,
    CONTAINERS,
    IMAGES,
    Column::string("Selector", "Labels of the controller's pods.").wide(),
];

/// Unlike the controllers' columns, a pod template's containers show without `-o wide`.
pub(super) const POD_TEMPLATE_COLUMNS: &[Column] = &[
    NAME,
    Column::string("Containers", "Names of the containers in the template."),
    Column::string("Images", "Images of the containers in the template."),
    Column::string("Pod Labels", "Labels of the pods made from the template."),
];

pub(super) const CONTROLLER_REVISION_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "Controller",
        "The controller owning the revision, as kind.group/name.",
    ),
    // Upstream declares the column a string though its cells are integers.
    Column::string("Revision", "The revision number (revision)."),
    AGE,
];

/// The `/scale` subresource. Upstream gives this Name column no `name` format.
const SCALE_COLUMNS: &[Column] = &[
    Column::string("Name", NAME_DESCRIPTION),
    Column::new(
        "Desired",
        "integer",
        "Number of replicas desired (spec.replicas).",
    ),
    Column::new(
        "Available",
        "integer",
        "Number of replicas observed (status.replicas).",
    ),
    AGE,
];

/// `spec.replicas`, defaulted to 1 as upstream defaults it before anything prints it.
fn desired_replicas(item: &Value) -> i64 {
    item.pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1)
}

pub(super) fn deployment_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    let (containers, images) = container_cells(item, "/spec/template");
    let selector =
        selector_string(item.pointer("/spec/selector")).unwrap_or_else(|| "<invalid>".into());
    vec![
        name_cell(item),
        json!(format!(
            "{}/{}",
            int(item, "/status/readyReplicas"),
            desired_replicas(item)
        )),
        json!(int(item, "/status/updatedReplicas")),
        json!(int(item, "/status/availableReplicas")),
        creation_age(item, clock),
        containers,
        images,
        json!(selector),
    ]
}

pub(super) fn replica_set_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    let (containers, images) = container_cells(item, "/spec/template");
    vec![
        name_cell(item),
        json!(desired_replicas(item)),
        json!(int(item, "/status/replicas")),
        json!(int(item, "/status/readyReplicas")),
        creation_age(item, clock),
        containers,
        images,
        json!(format_label_selector(item.pointer("/spec/selector"))),
    ]
}

fn scale_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    vec![
        name_cell(item),
        json!(int(item, "/spec/replicas")),
        json!(int(item, "/status/replicas")),
        creation_age(item, clock),
    ]
}

/// The `/scale` subresource's `autoscaling/v1 Scale`.
pub(super) const SCALE_PRINTER: BuiltinPrinter = BuiltinPrinter::new(SCALE_COLUMNS, scale_cells);

/// READY reads `ready/desired`, `spec.replicas` defaulted to 1 as for deployments.
pub(super) fn stateful_set_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    let (containers, images) = container_cells(item, "/spec/template");
    vec![
        name_cell(item),
        json!(format!(
            "{}/{}",
            int(item, "/status/readyReplicas"),
            desired_replicas(item)
        )),
        creation_age(item, clock),
        containers,
        images,
    ]
}

/// Every count comes from status, which the daemon set controller writes: until it has, they
/// read 0.
pub(super) fn daemon_set_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    let (containers, images) = container_cells(item, "/spec/template");
    vec![
        name_cell(item),
        json!(int(item, "/status/desiredNumberScheduled")),
        json!(int(item, "/status/currentNumberScheduled")),
        json!(int(item, "/status/numberReady")),
        json!(int(item, "/status/updatedNumberScheduled")),
        json!(int(item, "/status/numberAvailable")),
        json!(format_labels(
            item.pointer("/spec/template/spec/nodeSelector")
        )),
        creation_age(item, clock),
        containers,
        images,
        json!(format_label_selector(item.pointer("/spec/selector"))),
    ]
}

/// Defaults as upstream's: `spec.replicas` of 1, and a selector copied from the template's
/// labels when the controller names none.
pub(super) fn replication_controller_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    let (containers, images) = container_cells(item, "/spec/template");
    let selector = item
        .pointer("/spec/selector")
        .filter(|s| s.as_object().is_some_and(|s| !s.is_empty()))
        .or_else(|| item.pointer("/spec/template/metadata/labels"));
    vec![
        name_cell(item),
        json!(desired_replicas(item)),
        json!(int(item, "/status/replicas")),
        json!(int(item, "/status/readyReplicas")),
        creation_age(item, clock),
        containers,
        images,
        json!(format_labels(selector)),
    ]
}

pub(super) fn pod_template_cells(item: &Value, _: &Clock) -> Vec<Value> {
    let (containers, images) = container_cells(item, "/template");
    vec![
        name_cell(item),
        containers,
        images,
        json!(format_labels(item.pointer("/template/metadata/labels"))),
    ]
}

pub(super) fn controller_revision_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    vec![
        name_cell(item),
        json!(controller_of(item).unwrap_or_else(|| "<none>".into())),
        json!(int(item, "/revision")),
        creation_age(item, clock),
    ]
}

/// The owner reference marked `controller`, as upstream names a resource with its kind:
/// `kind.group/name`, lowercased, the group left out for the core group (`daemonset.apps/agent`,
/// `statefulset.apps/db`).
fn controller_of(item: &Value) -> Option<String> {
    let owner = list(item, "/metadata/ownerReferences")
        .iter()
        .find(|owner| owner.get("controller") == Some(&Value::Bool(true)))?;
    let name = text(owner, "/name");
    let kind = text(owner, "/kind");
    // `group/version`, or a bare version for the core group.
    let group = optional_text(owner, "/apiVersion")
        .and_then(|api_version| api_version.split_once('/'))
        .map_or("", |(group, _)| group);
    let kind = match (kind, group) {
        ("", "") => return Some(name.to_string()),
        (kind, "") => kind.to_string(),
        (kind, group) => format!("{kind}.{group}"),
    };
    Some(format!("{}/{name}", kind.to_lowercase()))
}

pub(super) const HORIZONTAL_POD_AUTOSCALER_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "Reference",
        "The object whose replicas the autoscaler sets.",
    ),
    Column::string("Targets", "Each metric's current value against its target."),
    Column::string("MinPods", "The fewest replicas the autoscaler sets."),
    Column::string("MaxPods", "The most replicas the autoscaler sets."),
    Column::string("Replicas", "The replicas the target has now."),
    AGE,
];

/// Upstream's `printHorizontalPodAutoscaler`, on the `autoscaling/v2` form (a v1 object is
/// read in that form first, as upstream prints its internal version).
pub(super) fn horizontal_pod_autoscaler_cells(item: &Value, clock: &Clock) -> Vec<Value> {
    let converted;
    let item = if item.pointer("/spec/metrics").is_some() {
        item
    } else {
        converted = crate::kinds::hpa::v1_to_v2(item.clone());
        &converted
    };
    let min_pods = item
        .pointer("/spec/minReplicas")
        .and_then(Value::as_i64)
        .map_or_else(|| "<unset>".to_string(), |min| min.to_string());
    vec![
        name_cell(item),
        json!(format!(
            "{}/{}",
            text(item, "/spec/scaleTargetRef/kind"),
            text(item, "/spec/scaleTargetRef/name")
        )),
        json!(hpa_targets(
            list(item, "/spec/metrics"),
            list(item, "/status/currentMetrics")
        )),
        json!(min_pods),
        json!(int(item, "/spec/maxReplicas")),
        json!(int(item, "/status/currentReplicas")),
        creation_age(item, clock),
    ]
}

/// Upstream's `formatHPAMetrics`: each metric as `current/target` (`<unknown>` before the
/// autoscaler measured it), resource metrics prefixed with their name, the first two shown
/// and the rest counted.
fn hpa_targets(specs: &[Value], statuses: &[Value]) -> String {
    const SHOWN: usize = 2;
    if specs.is_empty() {
        return "<none>".into();
    }
    let quantity_at = |value: &Value, pointer: &str| {
        value
            .pointer(pointer)
            .filter(|v| !v.is_null())
            .and_then(super::quantity)
    };
    let shown: Vec<String> = specs
        .iter()
        .enumerate()
        .take(SHOWN)
        .map(|(i, spec)| {
            let status = statuses.get(i);
            // The status entry for this metric's source, if the autoscaler wrote one.
            let current = |source: &str, pointer: &str| {
                status
                    .and_then(|s| s.get(source))
                    .filter(|s| !s.is_null())
                    .and_then(|s| quantity_at(s, pointer))
            };
            let unknown = || "<unknown>".to_string();
            match text(spec, "/type") {
                source @ ("External" | "Object") => {
                    let field = if source == "External" {
                        "external"
                    } else {
                        "object"
                    };
                    match quantity_at(spec, &format!("/{field}/target/averageValue")) {
                        Some(target) => format!(
                            "{}/{target} (avg)",
                            current(field, "/current/averageValue").unwrap_or_else(unknown)
                        ),
                        None => format!(
                            "{}/{}",
                            current(field, "/current/value").unwrap_or_else(unknown),
                            quantity_at(spec, &format!("/{field}/target/value"))
                                .unwrap_or_default()
                        ),
                    }
                }
                "Pods" => format!(
                    "{}/{}",
                    current("pods", "/current/averageValue").unwrap_or_else(unknown),
                    quantity_at(spec, "/pods/target/averageValue").unwrap_or_default()
                ),
                source @ ("Resource" | "ContainerResource") => {
                    let field = if source == "Resource" {
                        "resource"
                    } else {
                        "containerResource"
                    };
                    let name = text(spec, &format!("/{field}/name"));
                    match quantity_at(spec, &format!("/{field}/target/averageValue")) {
                        Some(target) => format!(
                            "{name}: {}/{target}",
                            current(field, "/current/averageValue").unwrap_or_else(unknown)
                        ),
                        None => {
                            let percent = |value: Option<i64>| value.map(|v| format!("{v}%"));
                            let now = percent(status.and_then(|s| {
                                s.pointer(&format!("/{field}/current/averageUtilization"))
                                    .and_then(Value::as_i64)
                            }));
                            let target = percent(
                                spec.pointer(&format!("/{field}/target/averageUtilization"))
                                    .and_then(Value::as_i64),
                            );
                            format!(
                                "{name}: {}/{}",
                                now.unwrap_or_else(unknown),
                                target.unwrap_or_else(|| "<auto>".into())
                            )
                        }
                    }
                }
                _ => "<unknown type>".into(),
            }
        })
        .collect();
    let joined = shown.join(", ");
    if specs.len() > SHOWN {
        format!("{joined} + {} more...", specs.len() - SHOWN)
    } else {
        joined
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[test]
    fn deployments() {
        let resource = builtin("apps", "deployments");
        assert_eq!(
            headers(&resource),
            [
                ("Name".into(), 0),
                ("Ready".into(), 0),
                ("Up-to-date".into(), 0),
                ("Available".into(), 0),
                ("Age".into(), 0),
                ("Containers".into(), 1),
                ("Images".into(), 1),
                ("Selector".into(), 1)
            ]
        );
        let deployment = json!({
            "metadata": meta("web", 86_400),
            "spec": {"replicas": 3, "template": template(),
                     "selector": {"matchLabels": {"app": "web"},
                                  "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "dev"]},
                                                       {"key": "canary", "operator": "DoesNotExist"}]}},
            "status": {"replicas": 3, "readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}
        });
        assert_eq!(
            cells(&resource, &deployment),
            [
                json!("web"),
                json!("2/3"),
                json!(3),
                json!(2),
                json!("24h"),
                json!("app,log"),
                json!("nginx:1.27,busybox"),
                json!("app=web,!canary,env in (dev,prod)")
            ]
        );
        let fresh = json!({"metadata": meta("new", 1), "spec": {}});
        let c = cells(&resource, &fresh);
        assert_eq!(
            (&c[1], &c[2], &c[3], &c[5], &c[7]),
            (&json!("0/1"), &json!(0), &json!(0), &json!(""), &json!(""))
        );
    }

    #[test]
    fn replica_sets() {
        let resource = builtin("apps", "replicasets");
        assert_eq!(
            headers(&resource)
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>(),
            [
                "Name",
                "Desired",
                "Current",
                "Ready",
                "Age",
                "Containers",
                "Images",
                "Selector"
            ]
        );
        let rs = json!({
            "metadata": meta("web-5d8f", 300),
            "spec": {"replicas": 2, "template": template(),
                     "selector": {"matchLabels": {"pod-template-hash": "5d8f", "app": "web"}}},
            "status": {"replicas": 2, "readyReplicas": 1}
        });
        assert_eq!(
            cells(&resource, &rs),
            [
                json!("web-5d8f"),
                json!(2),
                json!(2),
                json!(1),
                json!("5m"),
                json!("app,log"),
                json!("nginx:1.27,busybox"),
                json!("app=web,pod-template-hash=5d8f")
            ]
        );
        let bare = json!({"metadata": meta("x", 1), "spec": {"selector": {}}});
        let c = cells(&resource, &bare);
        assert_eq!((&c[1], &c[7]), (&json!(1), &json!("<none>")));
        let odd = json!({"metadata": meta("x", 1),
            "spec": {"selector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}});
        assert_eq!(cells(&resource, &odd)[7], json!("<error>"));
    }

    #[test]
    fn scale_subresource_objects_print_as_scales() {
        let resource = builtin("apps", "deployments");
        let scale = json!({"kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": meta("web", 60), "spec": {"replicas": 3}, "status": {"replicas": 2}});
        assert_eq!(
            headers(&resource).len(),
            8,
            "deployments keep their own columns"
        );
        let table = rendered(&resource, &scale);
        assert_eq!(table["columnDefinitions"][0]["format"], "");
        assert_eq!(
            cells(&resource, &scale),
            [json!("web"), json!(3), json!(2), json!("60s")]
        );
    }

    #[test]
    fn stateful_sets() {
        let resource = builtin("apps", "statefulsets");
        assert_eq!(
            header_line(&resource),
            [
                "Name:string:0",
                "Ready:string:0",
                "Age:string:0",
                "Containers:string:1",
                "Images:string:1"
            ]
        );
        let sts = json!({"metadata": meta("db", 7200),
            "spec": {"replicas": 3, "serviceName": "db", "template": template()},
            "status": {"replicas": 3, "readyReplicas": 2}});
        assert_eq!(
            cells(&resource, &sts),
            [
                json!("db"),
                json!("2/3"),
                json!("120m"),
                json!("app,log"),
                json!("nginx:1.27,busybox")
            ]
        );
        // Upstream defaults spec.replicas to 1; no status yet reads 0 ready.
        let fresh = json!({"metadata": meta("new", 1), "spec": {}});
        assert_eq!(
            cells(&resource, &fresh),
            [
                json!("new"),
                json!("0/1"),
                json!("1s"),
                json!(""),
                json!("")
            ]
        );
    }

    #[test]
    fn daemon_sets() {
        let resource = builtin("apps", "daemonsets");
        assert_eq!(
            header_line(&resource),
            [
                "Name:string:0",
                "Desired:integer:0",
                "Current:integer:0",
                "Ready:integer:0",
                "Up-to-date:integer:0",
                "Available:integer:0",
                "Node Selector:string:0",
                "Age:string:0",
                "Containers:string:1",
                "Images:string:1",
                "Selector:string:1"
            ]
        );
        let mut pod_template = template();
        pod_template["spec"]["nodeSelector"] = json!({"kubernetes.io/os": "linux", "disk": "ssd"});
        let ds = json!({"metadata": meta("agent", 3 * 86_400),
            "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": pod_template},
            "status": {"desiredNumberScheduled": 3, "currentNumberScheduled": 3, "numberReady": 2,
                       "updatedNumberScheduled": 3, "numberAvailable": 2}});
        assert_eq!(
            cells(&resource, &ds),
            [
                json!("agent"),
                json!(3),
                json!(3),
                json!(2),
                json!(3),
                json!(2),
                json!("disk=ssd,kubernetes.io/os=linux"),
                json!("3d"),
                json!("app,log"),
                json!("nginx:1.27,busybox"),
                json!("app=agent")
            ]
        );
        let unscheduled = json!({"metadata": meta("new", 1),
            "spec": {"selector": {"matchLabels": {"app": "new"}}, "template": template()}});
        let c = cells(&resource, &unscheduled);
        assert_eq!(c[1..6], [json!(0), json!(0), json!(0), json!(0), json!(0)]);
        assert_eq!(c[6], json!("<none>"));
    }

    #[test]
    fn replication_controllers() {
        let resource = builtin("", "replicationcontrollers");
        assert_eq!(
            header_line(&resource),
            [
                "Name:string:0",
                "Desired:integer:0",
                "Current:integer:0",
                "Ready:integer:0",
                "Age:string:0",
                "Containers:string:1",
                "Images:string:1",
                "Selector:string:1"
            ]
        );
        let rc = json!({"metadata": meta("rc", 60),
            "spec": {"replicas": 2, "selector": {"app": "rc", "tier": "a"}, "template": template()},
            "status": {"replicas": 2, "readyReplicas": 1}});
        assert_eq!(
            cells(&resource, &rc),
            [
                json!("rc"),
                json!(2),
                json!(2),
                json!(1),
                json!("60s"),
                json!("app,log"),
                json!("nginx:1.27,busybox"),
                json!("app=rc,tier=a")
            ]
        );
        // Upstream defaults replicas to 1 and the selector to the template's labels.
        let defaulted = json!({"metadata": meta("rc", 60), "spec": {"template": template()}});
        let c = cells(&resource, &defaulted);
        assert_eq!((&c[1], &c[7]), (&json!(1), &json!("app=web")));
        let bare = json!({"metadata": meta("rc", 60)});
        let c = cells(&resource, &bare);
        assert_eq!(
            (&c[1], &c[2], &c[5], &c[7]),
            (&json!(1), &json!(0), &json!(""), &json!("<none>"))
        );
    }

    #[test]
    fn pod_templates_show_their_containers_without_wide() {
        let resource = builtin("", "podtemplates");
        assert_eq!(
            header_line(&resource),
            [
                "Name:string:0",
                "Containers:string:0",
                "Images:string:0",
                "Pod Labels:string:0"
            ]
        );
        let tpl = json!({"metadata": meta("tpl", 60), "template": template()});
        assert_eq!(
            cells(&resource, &tpl),
            [
                json!("tpl"),
                json!("app,log"),
                json!("nginx:1.27,busybox"),
                json!("app=web")
            ]
        );
        let bare = json!({"metadata": meta("tpl", 60)});
        assert_eq!(
            cells(&resource, &bare),
            [json!("tpl"), json!(""), json!(""), json!("<none>")]
        );
    }

    #[test]
    fn controller_revisions_name_their_controller() {
        let resource = builtin("apps", "controllerrevisions");
        assert_eq!(
            header_line(&resource),
            [
                "Name:string:0",
                "Controller:string:0",
                "Revision:string:0",
                "Age:string:0"
            ]
        );
        let owned = |owners: Value| {
            let mut metadata = meta("agent-7d9f", 300);
            metadata["ownerReferences"] = owners;
            cells(
                &resource,
                &json!({"metadata": metadata, "revision": 2, "data": {}}),
            )
        };
        let owner = |api_version: &str, kind: &str, name: &str, controller: bool| {
            json!({"apiVersion": api_version, "kind": kind, "name": name, "uid": "u-2",
                   "controller": controller})
        };
        assert_eq!(
            owned(json!([owner("apps/v1", "DaemonSet", "agent", true)])),
            [
                json!("agent-7d9f"),
                json!("daemonset.apps/agent"),
                json!(2),
                json!("5m")
            ]
        );
        assert_eq!(
            owned(json!([
                owner("apps/v1", "StatefulSet", "not-me", false),
                owner("v1", "ReplicationController", "rc", true)
            ]))[1],
            json!("replicationcontroller/rc")
        );
        assert_eq!(
            owned(json!([owner("Example.COM/v1", "Widget", "w", true)]))[1],
            json!("widget.example.com/w")
        );
        assert_eq!(
            owned(json!([owner("apps/v1", "StatefulSet", "db", false)]))[1],
            json!("<none>")
        );
        let bare = json!({"metadata": meta("r", 1)});
        let c = cells(&resource, &bare);
        assert_eq!((&c[1], &c[2]), (&json!("<none>"), &json!(0)));
    }

    #[test]
    fn horizontal_pod_autoscalers_show_each_target() {
        let resource = builtin("autoscaling", "horizontalpodautoscalers");
        assert_eq!(
            header_line(&resource),
            [
                "Name:string:0",
                "Reference:string:0",
                "Targets:string:0",
                "MinPods:string:0",
                "MaxPods:string:0",
                "Replicas:string:0",
                "Age:string:0"
            ]
        );
        let v2 = json!({"metadata": meta("web", 90), "spec": {
            "scaleTargetRef": {"kind": "Deployment", "name": "web", "apiVersion": "apps/v1"},
            "minReplicas": 2, "maxReplicas": 10,
            "metrics": [
                {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}},
                {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "500Mi"}}},
                {"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "1k"}}}]},
            "status": {"currentReplicas": 3, "desiredReplicas": 3, "currentMetrics": [
                {"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 42, "averageValue": "120m"}}}]}});
        assert_eq!(
            cells(&resource, &v2),
            [
                json!("web"),
                json!("Deployment/web"),
                json!("cpu: 42%/80%, memory: <unknown>/500Mi + 1 more..."),
                json!("2"),
                json!(10),
                json!(3),
                json!("90s")
            ]
        );
        // A v1 object (what a v1 list carries) prints the same as its v2 form.
        let v1 = json!({"metadata": meta("old", 90), "spec": {
            "scaleTargetRef": {"kind": "Deployment", "name": "old"},
            "maxReplicas": 4, "targetCPUUtilizationPercentage": 50},
            "status": {"currentReplicas": 1, "desiredReplicas": 1}});
        assert_eq!(
            cells(&resource, &v1)[1..6],
            [
                json!("Deployment/old"),
                json!("cpu: <unknown>/50%"),
                json!("<unset>"),
                json!(4),
                json!(1)
            ]
        );
        let none = json!({"metadata": meta("none", 90), "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "x"}, "maxReplicas": 1, "metrics": []}});
        assert_eq!(cells(&resource, &none)[2], json!("<none>"));
    }
}
