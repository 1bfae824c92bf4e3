//! The node lifecycle controller: notices Nodes whose agent stopped reporting, and what
//! that means for their Pods. kube-controller-manager's `node-lifecycle` (with its taint
//! eviction) and the part of `pod-garbage-collector` that concerns lost Nodes, in one loop
//! that runs every `--node-monitor-period` under the controllers' Lease.
//!
//! Each pass, for each Node:
//! - **Heartbeat.** The agent renews its Lease `kube-node-lease/NODE` every 10 s and posts
//!   its Ready condition. When neither changed for `--node-monitor-grace-period` (40 s) of
//!   this controller's own clock, every condition becomes `Unknown` (reason
//!   `NodeStatusUnknown`, "Kubelet stopped posting node status."), the Node's Pods become not
//!   ready, and an Event `NodeNotReady` says so.
//! - **Taints.** Ready=Unknown taints the Node `node.kubernetes.io/unreachable` with
//!   NoSchedule and NoExecute, Ready=False `node.kubernetes.io/not-ready`; Ready=True removes
//!   both (an agent that comes back clears them).
//! - **Taint eviction.** A Pod on a Node with NoExecute taints it does not tolerate is
//!   evicted at once; one that tolerates them for `tolerationSeconds` (300 by default, added
//!   at creation) is evicted that long after the taint's `timeAdded`. Eviction is graceful:
//!   `DisruptionTarget=True` (reason `DeletionByTaintManager`), then a delete with the Pod's
//!   grace period. No agent answers on a lost Node, so the Pod then stays Terminating: seed
//!   001's stuck Pod, which `finale explain` names.
//! - **Out of service.** On a Node tainted `node.kubernetes.io/out-of-service` (non-graceful
//!   node shutdown: a person says it is down for good) that is not Ready, terminating Pods
//!   are marked Failed and force-deleted (grace 0), as the pod GC does.
//! - **Orphans.** Pods bound to a Node that no longer exists are marked Failed
//!   (`DeletionByPodGC`, "PodGC: node no longer exists") and force-deleted.
//!
//! # Guarantees
//! - Staleness is measured on this controller's clock from when it last saw the heartbeat
//!   change, never by comparing the agent's clock with ours, as upstream does. A new leader
//!   starts every Node's grace period afresh.
//!
//! # Caveats
//! - No rate limiting of evictions per zone (upstream's `--node-eviction-rate`), no zones.
//! - Passes are periodic, so an eviction is due up to one `--node-monitor-period` late.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::object;
use crate::registry::{
    DeleteOptions, Disruption, ListOptions, Registry, Subresource, WriteOptions, set_pod_condition,
};
use crate::resources::ResourceType;
use crate::status::{ApiError, ApiResult};
use crate::taints::{self, NO_EXECUTE, NO_SCHEDULE, NOT_READY, OUT_OF_SERVICE, UNREACHABLE};

/// The identity the controller writes as.
pub const NODE_LIFECYCLE_USER: &str = "system:serviceaccount:kube-system:node-controller";
const COMPONENT: &str = "node-controller";
/// The namespace of the agents' heartbeat Leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// kube-controller-manager's flags of the same names.
#[derive(Clone, Debug)]
pub struct NodeLifecycleOptions {
    /// `--node-monitor-period`: how often Nodes are checked.
    pub monitor_period: Duration,
    /// `--node-monitor-grace-period`: how long a silent Node stays Ready.
    pub grace_period: Duration,
}

impl Default for NodeLifecycleOptions {
    fn default() -> Self {
        NodeLifecycleOptions {
            monitor_period: Duration::from_secs(5),
            grace_period: Duration::from_secs(40),
        }
    }
}

pub fn spawn(
    registry: Arc<Registry>,
    options: NodeLifecycleOptions,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut controller = match NodeLifecycle::new(registry, options) {
            Ok(controller) => controller,
            Err(error) => {
                tracing::error!(error = %error.message, "the node lifecycle controller cannot start");
                return;
            }
        };
        loop {
            if let Err(error) = controller.pass().await {
                tracing::warn!(error = %error.message, "a node lifecycle pass failed; retrying");
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(controller.options.monitor_period) => {}
            }
        }
    })
}

/// The last heartbeat seen of a Node, and when this controller saw it change.
struct Heartbeat {
    probe: String,
    changed_at: Instant,
}

struct NodeLifecycle {
    registry: Arc<Registry>,
    options: NodeLifecycleOptions,
    nodes: Arc<ResourceType>,
    pods: Arc<ResourceType>,
    leases: Arc<ResourceType>,
    heartbeats: HashMap<String, Heartbeat>,
    /// When a Pod (by uid) was first seen bound to a Node that does not exist.
    orphans_seen: HashMap<String, Instant>,
}

fn items(list: Value) -> Vec<Value> {
    match list.get("items") {
        Some(Value::Array(items)) => items.clone(),
        _ => Vec::new(),
    }
}

fn ready_status(node: &Value) -> Option<&str> {
    object::status_conditions(node)
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
        .and_then(|c| c.get("status").and_then(Value::as_str))
}

impl NodeLifecycle {
    fn new(registry: Arc<Registry>, options: NodeLifecycleOptions) -> ApiResult<NodeLifecycle> {
        let lookup = |group: &str, plural: &str| {
            registry
                .catalog()
                .lookup(group, "v1", plural)
                .ok_or_else(|| ApiError::internal(format!("the {plural} resource is not served")))
        };
        Ok(NodeLifecycle {
            nodes: lookup("", "nodes")?,
            pods: lookup("", "pods")?,
            leases: lookup("coordination.k8s.io", "leases")?,
            registry,
            options,
            heartbeats: HashMap::new(),
            orphans_seen: HashMap::new(),
        })
    }

    async fn pass(&mut self) -> ApiResult<()> {
        let defaults = ListOptions::default();
        let nodes = items(self.registry.list(&self.nodes, None, &defaults).await?);
        let leases = items(
            self.registry
                .list(&self.leases, Some(NODE_LEASE_NAMESPACE), &defaults)
                .await?,
        );
        let renewals: HashMap<&str, &str> = leases
            .iter()
            .map(|lease| {
                let renewed = lease
                    .pointer("/spec/renewTime")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                (object::name(lease), renewed)
            })
            .collect();
        let mut pods_by_node: HashMap<String, Vec<Value>> = HashMap::new();
        for pod in items(self.registry.list(&self.pods, None, &defaults).await?) {
            if let Some(node) = pod
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
            {
                pods_by_node.entry(node.to_string()).or_default().push(pod);
            }
        }
        let now = Instant::now();
        self.heartbeats
            .retain(|name, _| nodes.iter().any(|n| object::name(n) == name));
        for node in &nodes {
            let name = object::name(node).to_string();
            let heartbeat = object::status_conditions(node)
                .iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
                .and_then(|c| c.get("lastHeartbeatTime").and_then(Value::as_str))
                .unwrap_or_default();
            let probe = format!(
                "{}|{heartbeat}",
                renewals.get(name.as_str()).copied().unwrap_or_default()
            );
            let entry = self.heartbeats.entry(name.clone()).or_insert(Heartbeat {
                probe: probe.clone(),
                changed_at: now,
            });
            if entry.probe != probe {
                entry.probe = probe;
                entry.changed_at = now;
            }
            let silent = now.duration_since(entry.changed_at) > self.options.grace_period;
            let pods = pods_by_node.remove(&name).unwrap_or_default();
            if let Err(error) = self.check_node(node, silent, &pods).await {
                tracing::warn!(node = %name, error = %error.message, "cannot update the node's lifecycle; retrying next pass");
            }
        }
        // What is left belongs to Nodes that do not exist.
        self.collect_orphans(pods_by_node, now).await;
        Ok(())
    }

    async fn check_node(&self, node: &Value, silent: bool, pods: &[Value]) -> ApiResult<()> {
        let mut node = node.clone();
        if silent && ready_status(&node) != Some("Unknown") {
            node = self.mark_unknown(&node).await?;
            for pod in pods {
                self.mark_pod_not_ready(pod).await;
            }
        }
        let node = self.reconcile_taints(&node).await?;
        let node_taints = taints::taints(&node);
        let out_of_service = node_taints
            .iter()
            .any(|t| t.get("key").and_then(Value::as_str) == Some(OUT_OF_SERVICE))
            && ready_status(&node) != Some("True");
        let wall_now = chrono::Utc::now();
        for pod in pods {
            if object::is_terminating(pod) {
                if out_of_service {
                    self.force_delete(
                        pod,
                        Disruption {
                            reason: "DeletionByPodGC",
                            message: "PodGC: node is out of service",
                            mark_failed: true,
                        },
                    )
                    .await;
                }
                continue;
            }
            let no_execute: Vec<Value> = node_taints
                .iter()
                .filter(|t| t.get("effect").and_then(Value::as_str) == Some(NO_EXECUTE))
                .cloned()
                .collect();
            let Some(seconds) = taints::toleration_time(pod, &no_execute) else {
                continue;
            };
            // The tolerations count from when the Node was tainted.
            let tainted_at = no_execute
                .iter()
                .filter_map(|t| t.get("timeAdded").and_then(Value::as_str))
                .filter_map(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map(|t| t.with_timezone(&chrono::Utc))
                .min()
                .unwrap_or(wall_now);
            if wall_now >= tainted_at + chrono::Duration::seconds(seconds) {
                self.evict(pod).await;
            }
        }
        Ok(())
    }

    /// Every condition Unknown, as upstream's `tryUpdateNodeHealth`.
    async fn mark_unknown(&self, node: &Value) -> ApiResult<Value> {
        let name = object::name(node).to_string();
        let now = object::now();
        let written = self
            .registry
            .guarded_update(
                &self.nodes,
                None,
                &name,
                None,
                Subresource::Status,
                &WriteOptions::default(),
                |current| {
                    let mut next = current.clone();
                    if !next.get("status").is_some_and(Value::is_object) {
                        next["status"] = json!({});
                    }
                    let mut list: Vec<Value> = object::status_conditions(current).to_vec();
                    for kind in ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"] {
                        match list
                            .iter_mut()
                            .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
                        {
                            Some(condition) => {
                                if condition.get("status").and_then(Value::as_str)
                                    != Some("Unknown")
                                {
                                    condition["status"] = json!("Unknown");
                                    condition["reason"] = json!("NodeStatusUnknown");
                                    condition["message"] =
                                        json!("Kubelet stopped posting node status.");
                                    condition["lastTransitionTime"] = json!(now);
                                }
                            }
                            None => list.push(json!({
                                "type": kind,
                                "status": "Unknown",
                                "reason": "NodeStatusNeverUpdated",
                                "message": "Kubelet never posted node status.",
                                "lastHeartbeatTime": now,
                                "lastTransitionTime": now,
                            })),
                        }
                    }
                    next["status"]["conditions"] = Value::Array(list);
                    Ok(next)
                },
            )
            .await?;
        tracing::warn!(node = %name, grace = ?self.options.grace_period, "node stopped posting status: Ready is now Unknown");
        crate::controllers::events::record(
            &self.registry,
            &self.nodes,
            &written.object,
            "Normal",
            "NodeNotReady",
            &format!("Node {name} status is now: NodeNotReady"),
            COMPONENT,
        )
        .await;
        Ok(written.object)
    }

    /// Upstream's `MarkPodsNotReady`: the Pod's Ready condition False.
    async fn mark_pod_not_ready(&self, pod: &Value) {
        let ready = object::status_conditions(pod).iter().any(|c| {
            c.get("type").and_then(Value::as_str) == Some("Ready")
                && c.get("status").and_then(Value::as_str) == Some("True")
        });
        if !ready || object::is_terminating(pod) {
            return;
        }
        let uid = object::uid(pod).to_string();
        let result = self
            .registry
            .guarded_update(
                &self.pods,
                Some(object::namespace(pod).unwrap_or_default()),
                object::name(pod),
                None,
                Subresource::Status,
                &WriteOptions::default(),
                |current| {
                    if object::uid(current) != uid {
                        return Err(ApiError::new(404, "NotFound", "the pod was replaced"));
                    }
                    let mut next = current.clone();
                    set_pod_condition(&mut next, "Ready", "False", "", "");
                    Ok(next)
                },
            )
            .await;
        if let Err(error) = result
            && error.code != 404
        {
            tracing::warn!(pod = %object::name(pod), error = %error.message, "cannot mark the pod not ready");
        }
    }

    /// The readiness taints the Node's Ready condition calls for, and no others of theirs.
    async fn reconcile_taints(&self, node: &Value) -> ApiResult<Value> {
        // A Node without a Ready condition gets none until its grace period ends and it is
        // marked Unknown, as upstream's tainting passes go by the condition.
        let wanted_key = match ready_status(node) {
            Some("False") => Some(NOT_READY),
            Some("Unknown") => Some(UNREACHABLE),
            _ => None,
        };
        let current = taints::taints(node);
        let is_readiness = |t: &Value| {
            matches!(
                t.get("key").and_then(Value::as_str),
                Some(NOT_READY | UNREACHABLE)
            )
        };
        let has = |key: &str, effect: &str| {
            current.iter().any(|t| {
                t.get("key").and_then(Value::as_str) == Some(key)
                    && t.get("effect").and_then(Value::as_str) == Some(effect)
            })
        };
        let stale = current
            .iter()
            .any(|t| is_readiness(t) && t.get("key").and_then(Value::as_str) != wanted_key);
        let missing = wanted_key.is_some_and(|key| !has(key, NO_SCHEDULE) || !has(key, NO_EXECUTE));
        if !stale && !missing {
            return Ok(node.clone());
        }
        let now = object::now();
        let name = object::name(node).to_string();
        let written = self
            .registry
            .guarded_update(
                &self.nodes,
                None,
                &name,
                None,
                Subresource::Main,
                &WriteOptions::default(),
                |current| {
                    let mut kept: Vec<Value> = taints::taints(current)
                        .iter()
                        .filter(|t| {
                            !is_readiness(t) || t.get("key").and_then(Value::as_str) == wanted_key
                        })
                        .cloned()
                        .collect();
                    if let Some(key) = wanted_key {
                        for effect in [NO_SCHEDULE, NO_EXECUTE] {
                            let present = kept.iter().any(|t| {
                                t.get("key").and_then(Value::as_str) == Some(key)
                                    && t.get("effect").and_then(Value::as_str) == Some(effect)
                            });
                            if !present {
                                let added = (effect == NO_EXECUTE).then_some(now.as_str());
                                kept.push(taints::taint(key, effect, added));
                            }
                        }
                    }
                    let mut next = current.clone();
                    if !next.get("spec").is_some_and(Value::is_object) {
                        next["spec"] = json!({});
                    }
                    if kept.is_empty() {
                        if let Some(spec) = next["spec"].as_object_mut() {
                            spec.remove("taints");
                        }
                    } else {
                        next["spec"]["taints"] = Value::Array(kept);
                    }
                    Ok(next)
                },
            )
            .await?;
        match wanted_key {
            Some(key) => tracing::info!(node = %name, taint = key, "tainted the node"),
            None => {
                tracing::info!(node = %name, "the node is Ready again: removed its readiness taints")
            }
        }
        Ok(written.object)
    }

    /// Taint eviction: graceful, so an agent (if any answers) still runs the shutdown.
    async fn evict(&self, pod: &Value) {
        let disruption = Disruption {
            reason: "DeletionByTaintManager",
            message: "Taint manager: deleting due to NoExecute taint",
            mark_failed: false,
        };
        match self
            .registry
            .delete_disrupted_pod(
                pod,
                &disruption,
                DeleteOptions::default(),
                &WriteOptions::default(),
            )
            .await
        {
            Ok(_) => {
                tracing::info!(pod = %format!("{}/{}", object::namespace(pod).unwrap_or_default(), object::name(pod)), "evicted the pod from a tainted node");
                crate::controllers::events::record(
                    &self.registry,
                    &self.pods,
                    pod,
                    "Normal",
                    "TaintManagerEviction",
                    &format!(
                        "Marking for deletion Pod {}/{}",
                        object::namespace(pod).unwrap_or_default(),
                        object::name(pod)
                    ),
                    "taint-eviction-controller",
                )
                .await;
            }
            Err(error) if error.code == 404 || error.code == 409 => {}
            Err(error) => {
                tracing::warn!(pod = %object::name(pod), error = %error.message, "cannot evict the pod; retrying next pass")
            }
        }
    }

    async fn force_delete(&self, pod: &Value, disruption: Disruption) {
        let delete = DeleteOptions {
            grace_period_seconds: Some(0),
            ..DeleteOptions::default()
        };
        match self
            .registry
            .delete_disrupted_pod(pod, &disruption, delete, &WriteOptions::default())
            .await
        {
            Ok(_) => tracing::info!(
                pod = %format!("{}/{}", object::namespace(pod).unwrap_or_default(), object::name(pod)),
                reason = disruption.message,
                "force-deleted the pod"
            ),
            Err(error) if error.code == 404 || error.code == 409 => {}
            Err(error) => {
                tracing::warn!(pod = %object::name(pod), error = %error.message, "cannot force-delete the pod; retrying next pass")
            }
        }
    }

    /// Pods bound to Nodes that do not exist, force-deleted once they have been so for a
    /// grace period (a Node being re-registered is not an orphaning).
    async fn collect_orphans(&mut self, orphans: HashMap<String, Vec<Value>>, now: Instant) {
        let pods: Vec<Value> = orphans.into_values().flatten().collect();
        self.orphans_seen
            .retain(|uid, _| pods.iter().any(|p| object::uid(p) == uid));
        for pod in pods {
            let seen = *self
                .orphans_seen
                .entry(object::uid(&pod).to_string())
                .or_insert(now);
            if now.duration_since(seen) < self.options.grace_period {
                continue;
            }
            self.force_delete(
                &pod,
                Disruption {
                    reason: "DeletionByPodGC",
                    message: "PodGC: node no longer exists",
                    mark_failed: true,
                },
            )
            .await;
        }
    }
}
