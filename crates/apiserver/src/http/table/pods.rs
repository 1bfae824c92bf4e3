//! The pod printer: upstream's readiness, status and restart summaries, which walk init
//! containers (sidecars among them) and then the main containers, as `kubectl get pods` shows
//! them.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::{
    AGE, Clock, Column, NAME, condition_true, creation_age, human_duration, int, list, name_cell,
    optional_text, present, text,
};
use crate::object;

pub(super) const POD_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "Ready",
        "Ready containers out of all containers in the pod.",
    ),
    Column::string(
        "Status",
        "The pod's phase, or why its containers are not running.",
    ),
    Column::string(
        "Restarts",
        "Container restarts in the pod, and how long ago the last one was.",
    ),
    AGE,
    Column::string("IP", "The pod's IP address.").wide(),
    Column::string("Node", "The node the pod is bound to.").wide(),
    Column::string(
        "Nominated Node",
        "The node the scheduler nominated for a preempting pod.",
    )
    .wide(),
    Column::string(
        "Readiness Gates",
        "Readiness gates whose condition is True, out of all gates.",
    )
    .wide(),
];

/// Why a terminated container stopped: its reason, else its signal or exit code.
fn termination_reason(terminated: &Value, prefix: &str) -> String {
    match optional_text(terminated, "/reason") {
        Some(reason) => format!("{prefix}{reason}"),
        None => match int(terminated, "/signal") {
            0 => format!("{prefix}ExitCode:{}", int(terminated, "/exitCode")),
            signal => format!("{prefix}Signal:{signal}"),
        },
    }
}

/// Restart counting over container statuses: the total and the latest restart time.
#[derive(Default)]
struct Restarts {
    count: i64,
    last: Option<DateTime<Utc>>,
}

impl Restarts {
    fn add(&mut self, status: &Value) {
        self.count += int(status, "/restartCount");
        let finished = Clock::parse(optional_text(status, "/lastState/terminated/finishedAt"));
        if finished > self.last {
            self.last = finished;
        }
    }
}

pub(super) fn pod_cells(pod: &Value, clock: &Clock) -> Vec<Value> {
    let init_specs = list(pod, "/spec/initContainers");
    // Sidecars: init containers that keep running alongside the main containers.
    let is_sidecar = |name: &str| {
        init_specs
            .iter()
            .any(|c| text(c, "/name") == name && text(c, "/restartPolicy") == "Always")
    };
    let sidecars = init_specs
        .iter()
        .filter(|c| text(c, "/restartPolicy") == "Always")
        .count();
    let total = list(pod, "/spec/containers").len() + sidecars;
    let mut ready = 0;

    let phase = text(pod, "/status/phase");
    let conditions = list(pod, "/status/conditions");
    let mut reason = optional_text(pod, "/status/reason")
        .unwrap_or(phase)
        .to_string();
    if conditions
        .iter()
        .any(|c| text(c, "/type") == "PodScheduled" && text(c, "/reason") == "SchedulingGated")
    {
        reason = "SchedulingGated".into();
    }

    let mut restarts = Restarts::default();
    let mut sidecar_restarts = Restarts::default();
    let mut initializing = false;
    for (index, status) in list(pod, "/status/initContainerStatuses")
        .iter()
        .enumerate()
    {
        restarts.add(status);
        let sidecar = is_sidecar(text(status, "/name"));
        if sidecar {
            sidecar_restarts.add(status);
        }
        let terminated = status.pointer("/state/terminated").filter(|t| !t.is_null());
        let waiting_reason = optional_text(status, "/state/waiting/reason");
        if terminated.is_some_and(|t| int(t, "/exitCode") == 0) {
            continue;
        }
        if sidecar && status.get("started") == Some(&Value::Bool(true)) {
            if status.get("ready") == Some(&Value::Bool(true)) {
                ready += 1;
            }
            continue;
        }
        reason = match (terminated, waiting_reason) {
            (Some(terminated), _) => termination_reason(terminated, "Init:"),
            (None, Some(waiting)) if waiting != "PodInitializing" => format!("Init:{waiting}"),
            _ => format!("Init:{index}/{}", init_specs.len()),
        };
        initializing = true;
        break;
    }

    if !initializing || condition_true(conditions, "Initialized") {
        restarts = sidecar_restarts;
        let mut running = false;
        // The first container's state wins, so walk them last to first.
        for status in list(pod, "/status/containerStatuses").iter().rev() {
            restarts.add(status);
            let terminated = status.pointer("/state/terminated").filter(|t| !t.is_null());
            if let Some(waiting) = optional_text(status, "/state/waiting/reason") {
                reason = waiting.to_string();
            } else if let Some(terminated) = terminated {
                reason = termination_reason(terminated, "");
            } else if status.get("ready") == Some(&Value::Bool(true))
                && present(status, "/state/running")
            {
                running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && running {
            reason = if condition_true_anywhere(conditions, "Ready") {
                "Running".into()
            } else {
                "NotReady".into()
            };
        }
    }

    if object::is_terminating(pod) {
        if text(pod, "/status/reason") == "NodeLost" {
            reason = "Unknown".into();
        } else if !matches!(phase, "Succeeded" | "Failed") {
            reason = "Terminating".into();
        }
    }

    let restarts_cell = match restarts.last {
        Some(last) if restarts.count != 0 => format!(
            "{} ({} ago)",
            restarts.count,
            human_duration((clock.now - last).num_seconds())
        ),
        _ => restarts.count.to_string(),
    };

    let ip = list(pod, "/status/podIPs")
        .first()
        .and_then(|ip| optional_text(ip, "/ip"))
        .or_else(|| optional_text(pod, "/status/podIP"))
        .unwrap_or("<none>");
    let gates = list(pod, "/spec/readinessGates");
    let readiness_gates = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let passing = gates
            .iter()
            .filter(|gate| condition_true(conditions, text(gate, "/conditionType")))
            .count();
        format!("{passing}/{}", gates.len())
    };

    vec![
        name_cell(pod),
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts_cell),
        creation_age(pod, clock),
        json!(ip),
        json!(optional_text(pod, "/spec/nodeName").unwrap_or("<none>")),
        json!(optional_text(pod, "/status/nominatedNodeName").unwrap_or("<none>")),
        json!(readiness_gates),
    ]
}

/// Whether any condition of `kind` has status True (upstream's ready check looks at all).
fn condition_true_anywhere(conditions: &[Value], kind: &str) -> bool {
    conditions
        .iter()
        .any(|c| text(c, "/type") == kind && text(c, "/status") == "True")
}

/// Completed pods carry a row condition, as upstream marks them.
pub(super) fn pod_row_conditions(pod: &Value) -> Option<Value> {
    let (reason, message) = match text(pod, "/status/phase") {
        "Succeeded" => ("Succeeded", "The pod has completed successfully."),
        "Failed" => ("Failed", "The pod failed."),
        _ => return None,
    };
    Some(json!([{"type": "Completed", "status": "True", "reason": reason, "message": message}]))
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[test]
    fn pod_columns() {
        assert_eq!(
            headers(&builtin("", "pods")),
            [
                ("Name".into(), 0),
                ("Ready".into(), 0),
                ("Status".into(), 0),
                ("Restarts".into(), 0),
                ("Age".into(), 0),
                ("IP".into(), 1),
                ("Node".into(), 1),
                ("Nominated Node".into(), 1),
                ("Readiness Gates".into(), 1)
            ]
        );
    }

    #[test]
    fn a_pending_pod() {
        let pod = json!({"metadata": meta("p", 10),
            "spec": {"containers": [{"name": "app"}]}, "status": {"phase": "Pending"}});
        assert_eq!(
            cells(&builtin("", "pods"), &pod),
            [
                json!("p"),
                json!("0/1"),
                json!("Pending"),
                json!("0"),
                json!("10s"),
                json!("<none>"),
                json!("<none>"),
                json!("<none>"),
                json!("<none>")
            ]
        );
    }

    #[test]
    fn a_running_pod_with_one_of_two_containers_ready_and_three_restarts() {
        let pod = json!({
            "metadata": meta("web-1", 3600),
            "spec": {"nodeName": "node-a", "containers": [{"name": "app"}, {"name": "proxy"}],
                     "readinessGates": [{"conditionType": "example.com/lb"}]},
            "status": {
                "phase": "Running", "podIP": "10.1.0.5", "podIPs": [{"ip": "10.1.0.5"}],
                "conditions": [{"type": "Ready", "status": "False"},
                               {"type": "example.com/lb", "status": "True"}],
                "containerStatuses": [
                    {"name": "app", "ready": true, "restartCount": 3, "state": {"running": {}}},
                    {"name": "proxy", "ready": false, "restartCount": 0, "state": {"running": {}}}
                ]
            }
        });
        assert_eq!(
            cells(&builtin("", "pods"), &pod),
            [
                json!("web-1"),
                json!("1/2"),
                json!("Running"),
                json!("3"),
                json!("60m"),
                json!("10.1.0.5"),
                json!("node-a"),
                json!("<none>"),
                json!("1/1")
            ]
        );
    }

    #[test]
    fn restarts_show_how_long_ago_the_last_one_was() {
        let pod = json!({
            "metadata": meta("p", 3600),
            "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 2, "state": {"running": {}},
                 "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(300)}}},
                {"name": "b", "ready": true, "restartCount": 1, "state": {"running": {}},
                 "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(90)}}}
            ]}
        });
        let c = cells(&builtin("", "pods"), &pod);
        assert_eq!((&c[1], &c[3]), (&json!("2/2"), &json!("3 (90s ago)")));
    }

    #[test]
    fn the_first_waiting_container_names_the_status() {
        let pod = json!({
            "metadata": meta("p", 60),
            "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "a", "restartCount": 5, "state": {"waiting": {"reason": "CrashLoopBackOff"}}},
                {"name": "b", "state": {"waiting": {"reason": "ImagePullBackOff"}}}
            ]}
        });
        let c = cells(&builtin("", "pods"), &pod);
        assert_eq!(
            (&c[1], &c[2], &c[3]),
            (&json!("0/2"), &json!("CrashLoopBackOff"), &json!("5"))
        );
    }

    #[test]
    fn terminated_containers_report_reason_signal_or_exit_code() {
        let pod = |terminated: Value| {
            json!({"metadata": meta("p", 60), "spec": {"containers": [{"name": "a"}]},
                   "status": {"phase": "Running", "containerStatuses": [
                       {"name": "a", "state": {"terminated": terminated}}]}})
        };
        let status = |terminated| cells(&builtin("", "pods"), &pod(terminated))[2].clone();
        assert_eq!(
            status(json!({"exitCode": 137, "reason": "OOMKilled"})),
            json!("OOMKilled")
        );
        assert_eq!(
            status(json!({"exitCode": 0, "signal": 9})),
            json!("Signal:9")
        );
        assert_eq!(status(json!({"exitCode": 2})), json!("ExitCode:2"));
    }

    #[test]
    fn completed_with_a_container_still_running_reads_running_or_not_ready() {
        let pod = |ready: &str| {
            json!({"metadata": meta("p", 60),
                "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
                "status": {"phase": "Running",
                    "conditions": [{"type": "Ready", "status": ready}],
                    "containerStatuses": [
                        {"name": "a", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                        {"name": "b", "ready": true, "state": {"running": {}}}]}})
        };
        let resource = builtin("", "pods");
        assert_eq!(cells(&resource, &pod("True"))[2], json!("Running"));
        assert_eq!(cells(&resource, &pod("False"))[2], json!("NotReady"));
    }

    #[test]
    fn init_containers_show_progress() {
        let resource = builtin("", "pods");
        let pod = |statuses: Value, conditions: Value| {
            json!({"metadata": meta("p", 60),
                "spec": {"initContainers": [{"name": "i1"}, {"name": "i2"}],
                         "containers": [{"name": "app"}]},
                "status": {"phase": "Pending", "conditions": conditions,
                    "initContainerStatuses": statuses,
                    "containerStatuses": [{"name": "app", "restartCount": 4,
                        "state": {"waiting": {"reason": "PodInitializing"}}}]}})
        };
        let done = json!({"name": "i1", "state": {"terminated": {"exitCode": 0}}});
        let c = cells(
            &resource,
            &pod(
                json!([done, {"name": "i2", "restartCount": 1, "state": {"running": {}}}]),
                json!([]),
            ),
        );
        // Restarts while initialising count init containers only.
        assert_eq!(
            (&c[1], &c[2], &c[3]),
            (&json!("0/1"), &json!("Init:1/2"), &json!("1"))
        );

        let c = cells(
            &resource,
            &pod(
                json!([{"name": "i1", "state": {"waiting": {"reason": "ErrImagePull"}}}]),
                json!([]),
            ),
        );
        assert_eq!(c[2], json!("Init:ErrImagePull"));

        let c = cells(
            &resource,
            &pod(
                json!([{"name": "i1", "state": {"terminated": {"exitCode": 3}}}]),
                json!([]),
            ),
        );
        assert_eq!(c[2], json!("Init:ExitCode:3"));

        let c = cells(
            &resource,
            &pod(
                json!([done, {"name": "i2", "state": {"terminated": {"exitCode": 0}}}]),
                json!([{"type": "Initialized", "status": "True"}]),
            ),
        );
        assert_eq!((&c[2], &c[3]), (&json!("PodInitializing"), &json!("4")));
    }

    #[test]
    fn sidecars_count_towards_ready_and_total() {
        let pod = json!({"metadata": meta("p", 60),
            "spec": {"initContainers": [{"name": "mesh", "restartPolicy": "Always"}],
                     "containers": [{"name": "app"}]},
            "status": {"phase": "Running",
                "conditions": [{"type": "Initialized", "status": "True"}],
                "initContainerStatuses": [{"name": "mesh", "started": true, "ready": true,
                    "restartCount": 2, "state": {"running": {}}}],
                "containerStatuses": [{"name": "app", "ready": true, "state": {"running": {}}}]}});
        let c = cells(&builtin("", "pods"), &pod);
        assert_eq!(
            (&c[1], &c[2], &c[3]),
            (&json!("2/2"), &json!("Running"), &json!("2"))
        );
    }

    #[test]
    fn deleted_pods_read_terminating_unless_finished() {
        let resource = builtin("", "pods");
        let mut pod = json!({"metadata": meta("p", 60), "spec": {"containers": [{"name": "a"}]},
            "status": {"phase": "Running",
                "containerStatuses": [{"name": "a", "ready": true, "state": {"running": {}}}]}});
        pod["metadata"]["deletionTimestamp"] = json!(ago(1));
        assert_eq!(cells(&resource, &pod)[2], json!("Terminating"));

        pod["status"]["reason"] = json!("NodeLost");
        assert_eq!(cells(&resource, &pod)[2], json!("Unknown"));

        let mut done = json!({"metadata": meta("p", 60), "status": {"phase": "Succeeded"}});
        done["metadata"]["deletionTimestamp"] = json!(ago(1));
        assert_eq!(cells(&resource, &done)[2], json!("Succeeded"));
    }

    #[test]
    fn scheduling_gated_and_reasoned_pods() {
        let resource = builtin("", "pods");
        let gated = json!({"metadata": meta("p", 60), "status": {"phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}});
        assert_eq!(cells(&resource, &gated)[2], json!("SchedulingGated"));
        let evicted = json!({"metadata": meta("p", 60),
            "status": {"phase": "Failed", "reason": "Evicted"}});
        assert_eq!(cells(&resource, &evicted)[2], json!("Evicted"));
    }

    #[test]
    fn finished_pods_carry_a_completed_row_condition() {
        let resource = builtin("", "pods");
        let pod = json!({"metadata": meta("p", 60), "status": {"phase": "Succeeded"}});
        assert_eq!(
            rendered(&resource, &pod)["rows"][0]["conditions"],
            json!([{"type": "Completed", "status": "True", "reason": "Succeeded",
                    "message": "The pod has completed successfully."}])
        );
        let running = json!({"metadata": meta("p", 60), "status": {"phase": "Running"}});
        assert_eq!(
            rendered(&resource, &running)["rows"][0].get("conditions"),
            None
        );
    }
}
