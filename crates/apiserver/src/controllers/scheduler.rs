//! The scheduler: binds each pending Pod to a Node that can run it, through `pods/binding`
//! ([`Registry::bind_pod`]), as kube-scheduler's default profile does for the plugins listed
//! below. It runs with the other controllers, under their Lease.
//!
//! A Node is feasible for a Pod when (upstream plugin in brackets):
//! - `spec.nodeSelector` matches its labels [NodeAffinity];
//! - every NoSchedule and NoExecute taint is tolerated [TaintToleration]; a cordoned Node
//!   counts as tainted `node.kubernetes.io/unschedulable:NoSchedule` [NodeUnschedulable], and
//!   a Node whose Ready condition is not True as tainted not-ready or unreachable, as the node
//!   lifecycle controller would taint it;
//! - it runs fewer Pods than its `allocatable.pods` [NodeResourcesFit, pods only].
//!
//! Among feasible Nodes it picks the one running the fewest Pods (ties: by name), which
//! spreads Pods as the default scoring tends to. A Pod no Node fits gets
//! `PodScheduled=False`, reason `Unschedulable`, and upstream's message
//! (`0/3 nodes are available: 1 Too many pods, 2 node(s) didn't match Pod's node
//! affinity/selector.`); it is retried whenever a Node or a Pod changes.
//!
//! # Caveats
//! - Pods naming another `schedulerName` are left alone; Pods with `spec.nodeName` set never
//!   reach a scheduler, as upstream.
//! - Not implemented: node affinity expressions, pod (anti-)affinity, topology spread,
//!   CPU/memory requests, preemption, scheduling gates, volume binding. Such a Pod is
//!   scheduled on what is checked above.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::object;
use crate::registry::{ListOptions, Registry, Subresource, WriteOptions, set_pod_condition};
use crate::resources::ResourceType;
use crate::status::{ApiError, ApiResult};
use crate::taints::{self, NO_EXECUTE, NO_SCHEDULE};
use crate::watch_cache::WatchItem;

/// The scheduler's name, which Pods choose with `spec.schedulerName`.
pub const DEFAULT_SCHEDULER: &str = "default-scheduler";
/// The identity the scheduler writes as.
pub const SCHEDULER_USER: &str = "system:kube-scheduler";

pub fn spawn(registry: Arc<Registry>, shutdown: CancellationToken) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move { run(registry, shutdown).await })
}

async fn run(registry: Arc<Registry>, shutdown: CancellationToken) {
    let retry = || async {
        tokio::select! {
            _ = shutdown.cancelled() => false,
            _ = tokio::time::sleep(Duration::from_millis(500)) => true,
        }
    };
    loop {
        let (pods, nodes) = match (resource(&registry, "pods"), resource(&registry, "nodes")) {
            (Ok(pods), Ok(nodes)) => (pods, nodes),
            (Err(error), _) | (_, Err(error)) => {
                tracing::error!(error = %error.message, "the scheduler cannot start");
                return;
            }
        };
        let watches = futures::future::try_join(
            registry.watch(Arc::clone(&pods), None, &ListOptions::default(), false),
            registry.watch(Arc::clone(&nodes), None, &ListOptions::default(), false),
        )
        .await;
        let mut events = match watches {
            Ok((pod_events, node_events)) => futures::stream::select(pod_events, node_events),
            Err(error) => {
                tracing::warn!(error = %error.message, "the scheduler cannot watch Pods and Nodes; retrying");
                if !retry().await {
                    return;
                }
                continue;
            }
        };
        loop {
            let first = tokio::select! {
                _ = shutdown.cancelled() => return,
                item = events.next() => item,
            };
            let mut relevant = match &first {
                Some(WatchItem::Error(_)) | None => break,
                Some(item) => wakes_scheduler(item),
            };
            // A burst of changes (the initial events, a Deployment scaling up) is one pass.
            let mut broken = false;
            while let Some(Some(item)) = events.next().now_or_never() {
                if matches!(item, WatchItem::Error(_)) {
                    broken = true;
                    break;
                }
                relevant |= wakes_scheduler(&item);
            }
            if !relevant && !broken {
                continue;
            }
            if let Err(error) = schedule_pending(&registry, &pods, &nodes).await {
                tracing::warn!(error = %error.message, "a scheduling pass failed; retrying");
                if !retry().await {
                    return;
                }
                break;
            }
            if broken {
                break;
            }
        }
    }
}

/// A change that can make a pending Pod schedulable or need a decision: any Node change, a
/// new or changed unbound Pod, a Pod gone or finished (its Node has room again). The status
/// updates of running Pods, the bulk of all changes, wake nothing.
fn wakes_scheduler(item: &WatchItem) -> bool {
    let WatchItem::Change {
        event_type, object, ..
    } = item
    else {
        return false;
    };
    object.get("kind").and_then(Value::as_str) == Some("Node")
        || *event_type == "DELETED"
        || bound_node(object).is_none()
        || is_finished(object)
}

fn resource(registry: &Registry, plural: &str) -> ApiResult<Arc<ResourceType>> {
    registry
        .catalog()
        .lookup("", "v1", plural)
        .ok_or_else(|| ApiError::internal(format!("the {plural} resource is not served")))
}

fn items(list: &Value) -> &[Value] {
    list.get("items")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// One pass: every pending Pod of this scheduler, oldest first, bound or marked unschedulable.
async fn schedule_pending(
    registry: &Registry,
    pods: &ResourceType,
    nodes: &ResourceType,
) -> ApiResult<()> {
    let all_pods = registry.list(pods, None, &ListOptions::default()).await?;
    let mut pending: Vec<&Value> = items(&all_pods)
        .iter()
        .filter(|pod| is_pending(pod))
        .collect();
    if pending.is_empty() {
        return Ok(());
    }
    pending.sort_by(|a, b| {
        object::meta_str(a, "creationTimestamp")
            .cmp(&object::meta_str(b, "creationTimestamp"))
            .then_with(|| object::name(a).cmp(object::name(b)))
    });
    let node_list = registry.list(nodes, None, &ListOptions::default()).await?;
    let mut running: HashMap<String, i64> = HashMap::new();
    for pod in items(&all_pods) {
        if let Some(node) = bound_node(pod)
            && !is_finished(pod)
        {
            *running.entry(node.to_string()).or_default() += 1;
        }
    }
    for pod in pending {
        match pick_node(pod, items(&node_list), &running) {
            Ok(node) => {
                let binding = serde_json::json!({
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": object::name(pod), "uid": object::uid(pod)},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": node},
                });
                match registry
                    .bind_pod(
                        object::namespace(pod).unwrap_or_default(),
                        object::name(pod),
                        &binding,
                        &WriteOptions::default(),
                    )
                    .await
                {
                    Ok(_) => {
                        *running.entry(node).or_default() += 1;
                    }
                    // Deleted, bound or replaced meanwhile: the next pass sees what it is.
                    Err(error) if error.code == 404 || error.code == 409 => {}
                    Err(error) => return Err(error),
                }
            }
            Err(message) => mark_unschedulable(registry, pods, pod, &message).await?,
        }
    }
    Ok(())
}

fn bound_node(pod: &Value) -> Option<&str> {
    pod.pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
}

fn is_finished(pod: &Value) -> bool {
    matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    )
}

/// Unbound, not being deleted, not finished, and this scheduler's.
fn is_pending(pod: &Value) -> bool {
    let scheduler = pod
        .pointer("/spec/schedulerName")
        .and_then(Value::as_str)
        .unwrap_or_default();
    bound_node(pod).is_none()
        && !object::is_terminating(pod)
        && !is_finished(pod)
        && (scheduler.is_empty() || scheduler == DEFAULT_SCHEDULER)
}

/// The Node to bind `pod` to, or upstream's FitError message.
fn pick_node(
    pod: &Value,
    nodes: &[Value],
    running: &HashMap<String, i64>,
) -> Result<String, String> {
    if nodes.is_empty() {
        return Err("no nodes available to schedule pods".into());
    }
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let mut best: Option<(i64, &str)> = None;
    for node in nodes {
        let name = object::name(node);
        let count = running.get(name).copied().unwrap_or(0);
        match infeasible(pod, node, count) {
            Some(reason) => *reasons.entry(reason).or_default() += 1,
            None => {
                if best.is_none_or(|(fewest, _)| count < fewest) {
                    best = Some((count, name));
                }
            }
        }
    }
    if let Some((_, name)) = best {
        return Ok(name.to_string());
    }
    let mut histogram: Vec<String> = reasons
        .into_iter()
        .map(|(reason, count)| format!("{count} {reason}"))
        .collect();
    histogram.sort();
    Err(format!(
        "0/{} nodes are available: {}.",
        nodes.len(),
        histogram.join(", ")
    ))
}

/// Why `node` cannot run `pod`, in upstream's words, or None when it can.
fn infeasible(pod: &Value, node: &Value, running: i64) -> Option<String> {
    if let Some(selector) = pod.pointer("/spec/nodeSelector").and_then(Value::as_object) {
        let labels = node.pointer("/metadata/labels").and_then(Value::as_object);
        let matches = selector.iter().all(|(key, value)| {
            labels.and_then(|l| l.get(key)).and_then(Value::as_str) == value.as_str()
        });
        if !matches {
            return Some("node(s) didn't match Pod's node affinity/selector".into());
        }
    }
    if node.pointer("/spec/unschedulable") == Some(&Value::Bool(true)) {
        let cordon = taints::taint(taints::UNSCHEDULABLE, NO_SCHEDULE, None);
        if taints::untolerated(pod, std::slice::from_ref(&cordon), &[NO_SCHEDULE]).is_some() {
            return Some("node(s) were unschedulable".into());
        }
    }
    let mut node_taints = taints::taints(node).to_vec();
    if let Some(key) = readiness_taint(node)
        && !node_taints
            .iter()
            .any(|t| t.get("key").and_then(Value::as_str) == Some(key))
    {
        node_taints.push(taints::taint(key, NO_SCHEDULE, None));
    }
    if let Some(taint) = taints::untolerated(pod, &node_taints, &[NO_SCHEDULE, NO_EXECUTE]) {
        return Some(format!(
            "node(s) had untolerated taint {}",
            taints::describe(taint)
        ));
    }
    let capacity = node
        .pointer("/status/allocatable/pods")
        .and_then(|v| match v {
            Value::String(s) => s.parse::<i64>().ok(),
            other => other.as_i64(),
        })
        .unwrap_or(110);
    if running >= capacity {
        return Some("Too many pods".into());
    }
    None
}

/// The taint the node lifecycle controller puts (or is about to put) on a Node whose Ready
/// condition is False or Unknown. A Node without one is taken as it is, as upstream does.
fn readiness_taint(node: &Value) -> Option<&'static str> {
    match object::condition_status(node, "Ready") {
        Some("False") => Some(taints::NOT_READY),
        Some("Unknown") => Some(taints::UNREACHABLE),
        _ => None,
    }
}

/// `PodScheduled=False` with the reason, written only when the message changed (the write
/// itself wakes the scheduler, which then finds nothing new to say).
async fn mark_unschedulable(
    registry: &Registry,
    pods: &ResourceType,
    pod: &Value,
    message: &str,
) -> ApiResult<()> {
    let already = pod
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| {
            c.get("type").and_then(Value::as_str) == Some("PodScheduled")
                && c.get("status").and_then(Value::as_str) == Some("False")
                && c.get("message").and_then(Value::as_str) == Some(message)
        });
    if already {
        return Ok(());
    }
    let uid = object::uid(pod).to_string();
    let result = registry
        .guarded_update(
            pods,
            Some(object::namespace(pod).unwrap_or_default()),
            object::name(pod),
            None,
            Subresource::Status,
            &WriteOptions::default(),
            |current| {
                if object::uid(current) != uid || !is_pending(current) {
                    return Err(ApiError::new(409, "Conflict", "the pod changed"));
                }
                let mut next = current.clone();
                set_pod_condition(&mut next, "PodScheduled", "False", "Unschedulable", message);
                Ok(next)
            },
        )
        .await;
    match result {
        Ok(_) => {
            tracing::info!(pod = %format!("{}/{}", object::namespace(pod).unwrap_or_default(), object::name(pod)), %message, "unschedulable");
            Ok(())
        }
        Err(error) if error.code == 404 || error.code == 409 => Ok(()),
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, labels: Value, taints: Value, pods: &str) -> Value {
        json!({"metadata": {"name": name, "labels": labels},
               "spec": {"taints": taints},
               "status": {"allocatable": {"pods": pods},
                          "conditions": [{"type": "Ready", "status": "True"}]}})
    }

    #[test]
    fn the_least_busy_feasible_node_wins() {
        let nodes = [
            node("a", json!({"disk": "ssd"}), json!([]), "10"),
            node("b", json!({"disk": "ssd"}), json!([]), "10"),
            node("c", json!({}), json!([]), "10"),
        ];
        let pod = json!({"spec": {"nodeSelector": {"disk": "ssd"}}});
        let running = HashMap::from([("a".to_string(), 2), ("c".to_string(), 0)]);
        assert_eq!(pick_node(&pod, &nodes, &running), Ok("b".into()));
    }

    #[test]
    fn an_unschedulable_pod_gets_upstreams_message() {
        let nodes = [
            node(
                "a",
                json!({}),
                json!([{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]),
                "10",
            ),
            node("b", json!({}), json!([]), "1"),
            node("c", json!({}), json!([]), "1"),
        ];
        let running = HashMap::from([("b".to_string(), 1), ("c".to_string(), 1)]);
        assert_eq!(
            pick_node(&json!({"spec": {}}), &nodes, &running),
            Err("0/3 nodes are available: 1 node(s) had untolerated taint {gpu: yes}, 2 Too many pods.".into())
        );
        let tolerant = json!({"spec": {"tolerations": [{"key": "gpu", "operator": "Exists"}]}});
        assert_eq!(pick_node(&tolerant, &nodes, &running), Ok("a".into()));
        assert_eq!(
            pick_node(&json!({}), &[], &running),
            Err("no nodes available to schedule pods".into())
        );
    }

    #[test]
    fn cordoned_and_unready_nodes_are_skipped() {
        let mut cordoned = node("a", json!({}), json!([]), "10");
        cordoned["spec"]["unschedulable"] = json!(true);
        let mut lost = node("b", json!({}), json!([]), "10");
        lost["status"]["conditions"][0]["status"] = json!("Unknown");
        assert_eq!(
            pick_node(&json!({}), &[cordoned, lost], &HashMap::new()),
            Err("0/2 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }, 1 node(s) were unschedulable.".into())
        );
    }
}
