//! The whole path with a real agent: the scheduler binds, the agent runs, `kubectl logs`
//! reads through the API server's proxy, a delete shuts the process down gracefully; and
//! when the agent dies, the node lifecycle controller marks its Node Unknown, taints it and
//! evicts its Pods, which stay Terminating until the agent returns or the Node is tainted
//! out of service. Every wait is bounded.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::agent::{Agent, alive, kill_processes_under};
use common::{Env, eventually, finale, run_bounded};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);

/// Kills what the test's Pods left running when the test ends, pass or fail (an agent's
/// Pods outlive it, as the kubelet's do).
struct Reaper(PathBuf);

impl Drop for Reaper {
    fn drop(&mut self) {
        kill_processes_under(&self.0);
    }
}

fn pod(env: &Env, name: &str) -> Option<Value> {
    let out = env.ok(&["get", "pod", name, "--ignore-not-found", "-o", "json"]);
    if out.trim().is_empty() {
        return None;
    }
    serde_json::from_str(&out).ok()
}

fn wait_pod(env: &Env, name: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    eventually(WAIT, || pod(env, name).filter(|p| done(p))).unwrap_or_else(|| {
        panic!(
            "pod {name} never became {what}: {:?}{}",
            pod(env, name),
            env.log()
        )
    })
}

fn running(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
        && pod["status"]["containerStatuses"][0]["state"]["running"].is_object()
}

fn pid_of(pod: &Value) -> i32 {
    pod["status"]["containerStatuses"][0]["containerID"]
        .as_str()
        .and_then(|id| id.strip_prefix("process://"))
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no process:// containerID: {pod:#}"))
}

fn wait_gone(env: &Env, name: &str) {
    let gone = eventually(WAIT, || pod(env, name).is_none().then_some(()));
    assert!(
        gone.is_some(),
        "pod {name} is still there: {:?}{}",
        pod(env, name),
        env.log()
    );
}

#[test]
fn with_node_a_newcomer_runs_a_pod_reads_its_logs_and_deletes_it_gracefully() {
    let env = Env::start_with(&["--with-node"]);
    let _reaper = Reaper(env.dir.path().to_path_buf());
    let marker = env.dir.path().join("stopped");
    let script = format!(
        "trap 'echo stopping; echo done > {}; exit 0' TERM; echo hello from web; while :; do sleep 0.1; done",
        marker.display()
    );
    env.ok(&[
        "run",
        "web",
        "--image=busybox",
        "--command",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let web = wait_pod(&env, "web", "Running", running);
    let node = web["spec"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(!node.is_empty(), "the scheduler bound it: {web:#}");
    let nodes = env.ok(&["get", "nodes"]);
    assert!(nodes.contains(&node) && nodes.contains("Ready"), "{nodes}");
    let table = env.ok(&["get", "pod", "web"]);
    assert!(
        table.contains("1/1") && table.contains("Running"),
        "{table}"
    );

    // kubectl logs goes through the API server to the agent.
    let logs = eventually(WAIT, || {
        let run = env.run(&["logs", "web"]);
        run.stdout.contains("hello from web").then_some(run.stdout)
    });
    assert!(
        logs.is_some(),
        "kubectl logs never showed the output: {}{}",
        env.run(&["logs", "web"]).describe(),
        env.log()
    );
    let tail = env.ok(&["logs", "web", "--tail=1"]);
    assert_eq!(tail.trim(), "hello from web");

    // A graceful delete: the process gets SIGTERM, exits, and the Pod is gone.
    let pid = pid_of(&web);
    env.ok(&["delete", "pod", "web", "--grace-period=5", "--wait=false"]);
    wait_gone(&env, "web");
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap_or_default().trim(),
        "done",
        "the process saw SIGTERM"
    );
    let dead = eventually(Duration::from_secs(5), || (!alive(pid)).then_some(()));
    assert!(dead.is_some(), "process {pid} outlived its Pod");
}

#[test]
fn a_killed_agent_leaves_its_pods_terminating_until_it_returns_or_the_node_is_out_of_service() {
    let env = Env::start_with(&[
        "--node-monitor-grace-period=3s",
        "--node-monitor-period=200ms",
    ]);
    let _reaper = Reaper(env.dir.path().to_path_buf());
    let args: Vec<String> = [
        "--kubeconfig",
        &env.server.kubeconfig.display().to_string(),
        "--hostname-override",
        "n1",
        "--root-dir",
        &env.dir.path().join("node").display().to_string(),
        "--port",
        "0",
        "--node-lease-duration-seconds",
        "4",
        "--node-status-update-frequency",
        "1s",
    ]
    .iter()
    .map(|arg| arg.to_string())
    .collect();
    let mut agent = Agent::spawn(args, env.dir.path().join("agent.log"));
    let create = |name: &str| {
        let object = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 30,
                "tolerations": [{"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                                 "effect": "NoExecute", "tolerationSeconds": 1}],
                "containers": [{"name": "c", "image": "busybox",
                    "command": ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 0.1; done"]}]}});
        env.ok_with_stdin(&["create", "-f", "-"], &object.to_string());
        pid_of(&wait_pod(&env, name, "Running", running))
    };
    let node_ready = |status: &'static str| {
        move |env: &Env| {
            let node = env.get_json(&["node", "n1"]);
            node["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == status)
        }
    };

    // The agent dies (kill -9): the Node becomes Unknown and tainted, its Pod is evicted
    // and stays Terminating with its process still running, since no agent answers.
    let first = create("first");
    agent.kill9();
    let unknown = node_ready("Unknown");
    assert!(
        eventually(WAIT, || unknown(&env).then_some(())).is_some(),
        "n1 never became Unknown{}",
        env.log()
    );
    let evicted = wait_pod(&env, "first", "evicted", |p| {
        p["metadata"]["deletionTimestamp"].is_string()
    });
    assert_eq!(evicted["metadata"]["deletionGracePeriodSeconds"], 30);
    let taints = env.get_json(&["node", "n1"])["spec"]["taints"].to_string();
    assert!(
        taints.contains("node.kubernetes.io/unreachable"),
        "{taints}"
    );
    assert!(
        alive(first),
        "nothing can stop the process while the agent is down"
    );
    let explained = finale(&env, &["explain", "pod/first"]);
    assert_eq!(explained.code, Some(3), "{}", explained.describe());
    assert!(
        explained.stdout.contains("no agent runs node n1"),
        "{}",
        explained.describe()
    );

    // The agent comes back: it finishes the termination it missed, and the Node's
    // readiness taints go.
    agent.restart();
    wait_gone(&env, "first");
    assert!(
        eventually(WAIT, || (!alive(first)).then_some(())).is_some(),
        "process {first} survived its Pod"
    );
    let cleared = eventually(WAIT, || {
        let node = env.get_json(&["node", "n1"]);
        node["spec"]["taints"]
            .as_array()
            .is_none_or(Vec::is_empty)
            .then_some(())
    });
    assert!(
        cleared.is_some(),
        "the taints stayed: {}{}",
        env.get_json(&["node", "n1"]),
        env.log()
    );

    // Again, but the Node is down for good: the out-of-service taint force-deletes the
    // Terminating Pod. Its process runs on (the taint asserts the node is off); the next
    // agent on that root kills what has no Pod.
    let second = create("second");
    agent.kill9();
    assert!(
        eventually(WAIT, || unknown(&env).then_some(())).is_some(),
        "n1 never became Unknown{}",
        env.log()
    );
    env.ok(&["delete", "pod", "second", "--wait=false"]);
    wait_pod(&env, "second", "Terminating", |p| {
        p["metadata"]["deletionTimestamp"].is_string()
    });
    env.ok(&[
        "taint",
        "node",
        "n1",
        "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute",
    ]);
    wait_gone(&env, "second");
    assert!(alive(second), "no agent ran to stop it");
    agent.restart();
    assert!(
        eventually(WAIT, || (!alive(second)).then_some(())).is_some(),
        "the returning agent left {second} running"
    );
}

/// The official Python client (`kubernetes` 33, the 1.33 line) against a Node a real agent
/// registered: typed list, read of `/status`, patches, a field selector and a watch. Its
/// models refuse objects that lack required fields, so this also checks the agent's writes.
const PYTHON_NODE_CLIENT: &str = r#"
import json, sys
from kubernetes import client, config, watch
config.load_kube_config(config_file=sys.argv[1])
core = client.CoreV1Api()
nodes = core.list_node().items
node = nodes[0]
name = node.metadata.name
status = core.read_node_status(name).status
lease = client.CoordinationV1Api().read_namespaced_lease(name, "kube-node-lease")
core.patch_node(name, {"metadata": {"labels": {"finale.test/python": "yes"}}})
core.patch_node(name, {"spec": {"unschedulable": True}})
cordoned = [n.metadata.name for n in core.list_node(field_selector="spec.unschedulable=true").items]
seen = []
stream = watch.Watch()
for event in stream.stream(core.list_node, label_selector="finale.test/python=yes", timeout_seconds=10):
    seen.append([event["type"], event["object"].metadata.name, event["object"].spec.unschedulable])
    stream.stop()
core.patch_node(name, {"spec": {"unschedulable": False}})
print(json.dumps({
    "names": [n.metadata.name for n in nodes],
    "ready": [c.status for c in status.conditions if c.type == "Ready"],
    "addresses": [a.type for a in status.addresses],
    "pods": status.capacity.get("pods"),
    "runtime": status.node_info.container_runtime_version,
    "port": status.daemon_endpoints.kubelet_endpoint.port,
    "holder": lease.spec.holder_identity,
    "cordoned": cordoned,
    "watched": seen,
}))
"#;

#[test]
fn the_python_client_reads_patches_and_watches_nodes() {
    let env = Env::start_with(&["--with-node"]);
    let _reaper = Reaper(env.dir.path().to_path_buf());
    let ready = eventually(WAIT, || {
        let nodes = env.ok(&["get", "nodes", "--no-headers"]);
        nodes.contains(" Ready ").then_some(nodes)
    });
    assert!(ready.is_some(), "no Ready Node{}", env.log());
    let mut command = std::process::Command::new("python3");
    command
        .arg("-c")
        .arg(PYTHON_NODE_CLIENT)
        .arg(&env.server.kubeconfig);
    let run = run_bounded(command, "python3 (kubernetes client)".into());
    assert!(
        run.code == Some(0),
        "the Python client failed (scripts/test installs it: python3 -m pip install 'kubernetes==33.1.0'): {}{}",
        run.describe(),
        env.log()
    );
    let answer: Value = run
        .stdout
        .lines()
        .last()
        .and_then(|line| serde_json::from_str(line).ok())
        .unwrap_or_else(|| panic!("no JSON answer: {}", run.describe()));
    let names = answer["names"].as_array().cloned().unwrap_or_default();
    assert_eq!(names.len(), 1, "{answer:#}");
    let name = names[0].clone();
    assert_eq!(answer["ready"], json!(["True"]), "{answer:#}");
    assert!(
        answer["addresses"]
            .as_array()
            .is_some_and(|a| a.contains(&json!("InternalIP")) && a.contains(&json!("Hostname"))),
        "{answer:#}"
    );
    assert_eq!(answer["pods"], "110", "{answer:#}");
    assert!(
        answer["runtime"]
            .as_str()
            .is_some_and(|r| r.starts_with("finale-process://")),
        "{answer:#}"
    );
    assert!(answer["port"].as_i64().is_some_and(|p| p > 0), "{answer:#}");
    assert_eq!(answer["holder"], name, "{answer:#}");
    assert_eq!(answer["cordoned"], json!([name.clone()]), "{answer:#}");
    assert_eq!(
        answer["watched"],
        json!([["ADDED", name, true]]),
        "{answer:#}"
    );
    let node = env.get_json(&["node", name.as_str().unwrap_or_default()]);
    assert_eq!(node["metadata"]["labels"]["finale.test/python"], "yes");
    assert_ne!(
        node["spec"]["unschedulable"], true,
        "uncordoned again: {node:#}"
    );
}
