//! Nodes in the API, the scheduler and the node lifecycle controller, driven with kubectl
//! against a real server. The Nodes here are written by the test as an agent would write
//! them (status, heartbeat Lease), so every timing is the test's to choose; the suites with
//! a real agent are `node_agent.rs` and `node_e2e.rs`.

mod common;

use std::time::Duration;

use common::{Env, eventually, finale};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);

fn apply(env: &Env, object: &Value) {
    env.ok_with_stdin(&["apply", "-f", "-"], &object.to_string());
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// A Node as its agent registers it, with `labels`, `taints` and room for `pods` Pods, and
/// (through /status) its Ready condition.
fn register_node(env: &Env, name: &str, labels: Value, taints: Value, pods: u32, ready: &str) {
    apply(
        env,
        &json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": labels},
                "spec": {"taints": taints}}),
    );
    post_status(env, name, ready);
    env.ok(&[
        "patch",
        "node",
        name,
        "--subresource=status",
        "--type=merge",
        "-p",
        &json!({"status": {"allocatable": {"pods": pods.to_string()},
                           "capacity": {"pods": pods.to_string()},
                           "nodeInfo": {"kubeletVersion": "v1.33.0-finale"},
                           "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]}})
        .to_string(),
    ]);
}

/// The Ready condition an agent posts, with a fresh heartbeat.
fn post_status(env: &Env, node: &str, ready: &str) {
    let time = now();
    env.ok(&[
        "patch",
        "node",
        node,
        "--subresource=status",
        "--type=merge",
        "-p",
        &json!({"status": {"conditions": [{"type": "Ready", "status": ready,
            "reason": "KubeletReady", "message": "kubelet is posting ready status",
            "lastHeartbeatTime": time, "lastTransitionTime": time}]}})
        .to_string(),
    ]);
}

/// The agent's heartbeat: its Lease in kube-node-lease, renewed now.
fn renew_lease(env: &Env, node: &str) {
    apply(
        env,
        &json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": node, "namespace": "kube-node-lease"},
                "spec": {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": now()}}),
    );
}

fn pod(name: &str, spec: Value) -> Value {
    let mut spec = spec;
    spec["containers"] =
        json!([{"name": "c", "image": "busybox:1.36", "command": ["sleep", "3600"]}]);
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec})
}

fn node_of(env: &Env, pod: &str) -> Option<String> {
    let pod = env.get_json(&["pod", pod]);
    pod["spec"]["nodeName"].as_str().map(str::to_string)
}

fn scheduled_condition(pod: &Value) -> Option<Value> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "PodScheduled")
        .cloned()
}

#[test]
fn nodes_are_served_as_kubectl_expects() {
    let env = Env::start();
    register_node(
        &env,
        "worker-1",
        json!({"node-role.kubernetes.io/worker": ""}),
        json!([]),
        10,
        "True",
    );
    let table = env.ok(&["get", "nodes"]);
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "STATUS", "ROLES", "AGE", "VERSION"],
        "{table}"
    );
    let row: Vec<&str> = table
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(row[..3], ["worker-1", "Ready", "worker"], "{table}");
    assert_eq!(row[4], "v1.33.0-finale", "{table}");
    let wide = env.ok(&["get", "nodes", "-o", "wide"]);
    assert!(
        wide.contains("INTERNAL-IP") && wide.contains("127.0.0.1"),
        "{wide}"
    );

    // kubectl cordon: SchedulingDisabled, and the field selector sees it.
    env.ok(&["cordon", "worker-1"]);
    let table = env.ok(&["get", "nodes"]);
    assert!(table.contains("Ready,SchedulingDisabled"), "{table}");
    let cordoned = env.ok(&[
        "get",
        "nodes",
        "--field-selector",
        "spec.unschedulable=true",
        "-o",
        "name",
    ]);
    assert_eq!(cordoned.trim(), "node/worker-1");
    env.ok(&["uncordon", "worker-1"]);
    let schedulable = env.ok(&[
        "get",
        "nodes",
        "--field-selector",
        "spec.unschedulable=false",
        "-o",
        "name",
    ]);
    assert_eq!(
        schedulable.trim(),
        "node/worker-1",
        "an absent spec.unschedulable reads false"
    );

    // Discovery lists the Pod subresources kubectl drain and kube-scheduler look for.
    let discovery: Value =
        serde_json::from_str(&env.ok(&["get", "--raw", "/api/v1"])).unwrap_or_default();
    let names: Vec<&str> = discovery["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str())
        .collect();
    for wanted in [
        "nodes",
        "nodes/status",
        "pods/binding",
        "pods/eviction",
        "pods/log",
    ] {
        assert!(names.contains(&wanted), "{wanted} missing from {names:?}");
    }

    // A binding is refused once the Pod has a node, with upstream's message.
    apply(&env, &pod("bound", json!({"nodeName": "worker-1"})));
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "bound"},
                         "target": {"apiVersion": "v1", "kind": "Node", "name": "worker-2"}});
    let answer = env
        .api()
        .post_json("/api/v1/namespaces/default/pods/bound/binding", &binding)
        .expect("POST binding");
    let status = answer.expect_status(409, "Conflict");
    assert_eq!(
        status["message"],
        "Operation cannot be fulfilled on pods/binding \"bound\": pod bound is already assigned to node \"worker-1\""
    );
}

#[test]
fn the_scheduler_honours_selectors_taints_and_capacity() {
    let env = Env::start();
    register_node(&env, "ssd", json!({"disk": "ssd"}), json!([]), 1, "True");
    register_node(
        &env,
        "gpu",
        json!({}),
        json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]),
        10,
        "True",
    );
    register_node(&env, "down", json!({}), json!([]), 10, "False");

    // A selector picks the one matching Node.
    apply(
        &env,
        &pod("first", json!({"nodeSelector": {"disk": "ssd"}})),
    );
    let node = eventually(WAIT, || node_of(&env, "first"));
    assert_eq!(node.as_deref(), Some("ssd"), "{}", env.log());
    let first = env.get_json(&["pod", "first"]);
    assert_eq!(
        scheduled_condition(&first).map(|c| c["status"].clone()),
        Some(json!("True")),
        "{first:#}"
    );

    // That Node is full now (capacity 1): the next one waits, saying why as upstream does.
    apply(
        &env,
        &pod("second", json!({"nodeSelector": {"disk": "ssd"}})),
    );
    let condition = eventually(WAIT, || {
        scheduled_condition(&env.get_json(&["pod", "second"])).filter(|c| c["status"] == "False")
    })
    .unwrap_or_else(|| panic!("second never marked unschedulable{}", env.log()));
    assert_eq!(condition["reason"], "Unschedulable");
    assert_eq!(
        condition["message"],
        "0/3 nodes are available: 1 Too many pods, 2 node(s) didn't match Pod's node affinity/selector."
    );

    // Taints keep Pods off unless tolerated; a not-ready Node counts as tainted not-ready.
    apply(&env, &pod("plain", json!({})));
    let condition = eventually(WAIT, || {
        scheduled_condition(&env.get_json(&["pod", "plain"])).filter(|c| c["status"] == "False")
    })
    .unwrap_or_else(|| panic!("plain never marked unschedulable{}", env.log()));
    assert_eq!(
        condition["message"],
        "0/3 nodes are available: 1 Too many pods, 1 node(s) had untolerated taint {dedicated: gpu}, 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }."
    );
    apply(
        &env,
        &pod(
            "tolerant",
            json!({"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]}),
        ),
    );
    assert_eq!(
        eventually(WAIT, || node_of(&env, "tolerant")).as_deref(),
        Some("gpu")
    );

    // A Node that joins is used for the Pods that were waiting.
    register_node(&env, "ssd-2", json!({"disk": "ssd"}), json!([]), 10, "True");
    assert_eq!(
        eventually(WAIT, || node_of(&env, "second")).as_deref(),
        Some("ssd-2"),
        "{}",
        env.log()
    );
    let table = env.ok(&["get", "pods", "-o", "wide"]);
    assert!(table.contains("ssd-2"), "{table}");
}

#[test]
fn a_silent_node_becomes_unknown_its_pods_are_evicted_and_out_of_service_releases_them() {
    let env = Env::start_with(&[
        "--node-monitor-grace-period=2s",
        "--node-monitor-period=200ms",
    ]);
    register_node(&env, "lost", json!({}), json!([]), 10, "True");
    renew_lease(&env, "lost");
    // A Running, Ready Pod that tolerates an unreachable Node for 1 s.
    apply(
        &env,
        &pod(
            "web",
            json!({"nodeName": "lost", "terminationGracePeriodSeconds": 30,
            "tolerations": [{"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                             "effect": "NoExecute", "tolerationSeconds": 1}]}),
        ),
    );
    env.ok(&[
        "patch", "pod", "web", "--subresource=status", "--type=merge", "-p",
        &json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}).to_string(),
    ]);

    // The agent goes silent: after the grace period the Node is Unknown and tainted.
    let node = eventually(WAIT, || {
        let node = env.get_json(&["node", "lost"]);
        let ready = node["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Ready")?
            .clone();
        (ready["status"] == "Unknown").then_some(node)
    })
    .unwrap_or_else(|| panic!("the node never became Unknown{}", env.log()));
    let ready = node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .cloned()
        .unwrap_or_default();
    assert_eq!(ready["reason"], "NodeStatusUnknown");
    assert_eq!(ready["message"], "Kubelet stopped posting node status.");
    let taints = eventually(WAIT, || {
        let taints = env.get_json(&["node", "lost"])["spec"]["taints"].clone();
        (taints.as_array().map(Vec::len) == Some(2)).then_some(taints)
    })
    .unwrap_or_else(|| panic!("the node was never tainted{}", env.log()));
    let effects: Vec<(&str, &str)> = taints
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            (
                t["key"].as_str().unwrap_or(""),
                t["effect"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert!(
        effects.contains(&("node.kubernetes.io/unreachable", "NoExecute")),
        "{taints}"
    );
    assert!(
        effects.contains(&("node.kubernetes.io/unreachable", "NoSchedule")),
        "{taints}"
    );
    let table = env.ok(&["get", "node", "lost"]);
    assert!(table.contains("NotReady"), "{table}");

    // Its Pod is marked not ready, then evicted after its 1 s toleration: gracefully, so it
    // stays Terminating, because no agent answers.
    let web = eventually(WAIT, || {
        let pod = env.get_json(&["pod", "web"]);
        pod["metadata"]["deletionTimestamp"]
            .is_string()
            .then_some(pod)
    })
    .unwrap_or_else(|| panic!("the pod was never evicted{}", env.log()));
    let conditions = web["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let condition = |kind: &str| {
        conditions
            .iter()
            .find(|c| c["type"] == kind)
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(condition("Ready")["status"], "False", "{web:#}");
    assert_eq!(
        condition("DisruptionTarget")["reason"],
        "DeletionByTaintManager",
        "{web:#}"
    );
    assert_eq!(web["metadata"]["deletionGracePeriodSeconds"], 30, "{web:#}");
    let events = env.ok(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.kind=Node",
    ]);
    assert!(events.contains("NodeNotReady"), "{events}");

    // `finale explain` says the agent is gone and what to do.
    let explained = finale(&env, &["explain", "pod/web"]);
    assert_eq!(explained.code, Some(3), "{}", explained.describe());
    assert!(
        explained.stdout.contains("no agent runs node lost")
            && explained
                .stdout
                .contains("node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"),
        "{}",
        explained.describe()
    );

    // The out-of-service taint (non-graceful node shutdown) force-deletes it.
    env.ok(&[
        "taint",
        "node",
        "lost",
        "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute",
    ]);
    let gone = eventually(WAIT, || {
        let run = env.run(&["get", "pod", "web"]);
        run.stderr.contains("NotFound").then_some(())
    });
    assert!(gone.is_some(), "the pod was not force-deleted{}", env.log());

    // The agent comes back: Ready again, and the readiness taints go (the person's stays).
    renew_lease(&env, "lost");
    post_status(&env, "lost", "True");
    let taints = eventually(WAIT, || {
        let taints = env.get_json(&["node", "lost"])["spec"]["taints"].clone();
        let keys: Vec<String> = taints
            .as_array()?
            .iter()
            .filter_map(|t| t["key"].as_str().map(str::to_string))
            .collect();
        (keys == ["node.kubernetes.io/out-of-service"]).then_some(keys)
    });
    assert!(
        taints.is_some(),
        "the readiness taints were not removed: {}{}",
        env.get_json(&["node", "lost"]),
        env.log()
    );
}

/// `kubectl drain` cordons the Node and evicts its Pods through `pods/eviction`: each gets
/// `DisruptionTarget=True` (reason `EvictionByEvictionAPI`) and is deleted with the grace
/// period drain asks for.
#[test]
fn kubectl_drain_evicts_through_the_eviction_api() {
    let env = Env::start();
    register_node(&env, "old", json!({}), json!([]), 10, "True");
    apply(&env, &pod("a", json!({"nodeName": "old"})));
    apply(&env, &pod("b", json!({"nodeName": "old"})));
    let drained = env.run(&[
        "drain",
        "old",
        "--force",
        "--grace-period=0",
        "--timeout=20s",
    ]);
    assert_eq!(drained.code, Some(0), "{}{}", drained.describe(), env.log());
    let out = format!("{}{}", drained.stdout, drained.stderr);
    assert!(out.contains("node/old cordoned"), "{out}");
    assert!(
        out.contains("evicting pod default/a") && out.contains("pod/a evicted"),
        "{out}"
    );
    assert!(out.contains("node/old drained"), "{out}");
    let pods = env.ok(&["get", "pods", "-o", "name"]);
    assert!(pods.trim().is_empty(), "{pods}");
    let table = env.ok(&["get", "node", "old"]);
    assert!(table.contains("SchedulingDisabled"), "{table}");

    // An eviction of a Pod that is not there is the delete's 404.
    let eviction =
        json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "a"}});
    let answer = env
        .api()
        .post_json("/api/v1/namespaces/default/pods/a/eviction", &eviction)
        .expect("POST eviction");
    answer.expect_status(404, "NotFound");
}

/// kube-rs reads Nodes as the typed `k8s_openapi` Node, status and all, and its watcher sees
/// a cordon.
#[tokio::test(flavor = "multi_thread")]
async fn kube_rs_reads_and_watches_typed_nodes() {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::Node;
    use kube::api::{Api, Patch, PatchParams};
    use kube::runtime::{WatchStreamExt, watcher};

    let env = tokio::task::spawn_blocking(|| {
        let env = Env::start();
        register_node(&env, "typed", json!({"tier": "edge"}), json!([]), 7, "True");
        env
    })
    .await
    .expect("setup");
    let client = common::kube_client(&env.server).await;
    let nodes: Api<Node> = Api::all(client);
    let node = nodes.get("typed").await.expect("get node");
    let status = node.status.clone().unwrap_or_default();
    let ready = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status);
    assert_eq!(ready.as_deref(), Some("True"));
    assert_eq!(
        status
            .allocatable
            .unwrap_or_default()
            .get("pods")
            .map(|q| q.0.clone()),
        Some("7".to_string())
    );
    let listed = nodes
        .list(&kube::api::ListParams::default().labels("tier=edge"))
        .await
        .expect("list nodes");
    assert_eq!(listed.items.len(), 1);

    let mut cordons = watcher(nodes.clone(), watcher::Config::default())
        .applied_objects()
        .boxed();
    nodes
        .patch(
            "typed",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .expect("cordon");
    let seen = tokio::time::timeout(WAIT, async {
        while let Some(Ok(node)) = cordons.next().await {
            if node.spec.and_then(|s| s.unschedulable) == Some(true) {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(seen.ok(), Some(true), "the watcher never saw the cordon");
    drop(cordons);
    tokio::task::spawn_blocking(move || drop(env))
        .await
        .expect("teardown");
}
