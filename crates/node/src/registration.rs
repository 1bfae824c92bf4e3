//! The Node object: registration at start and the status the agent posts every
//! `status_update_frequency`, as the kubelet's `kubelet_node_status.go` does.
//!
//! Registration creates the cluster-scoped `v1` Node with the default labels
//! (`kubernetes.io/hostname`, `kubernetes.io/os`, `kubernetes.io/arch`, their beta twins), the
//! configured labels and the configured taints. If the Node exists (the agent restarted) it is
//! kept: its labels are brought up to date, its taints are left alone. In particular the
//! `node.kubernetes.io/unreachable` and `not-ready` taints are the node lifecycle
//! controller's to remove once the Lease is fresh and `Ready` is `True` again; the agent only
//! reports `Ready`.
//!
//! Status is written through the `/status` subresource as a strategic merge patch with field
//! manager `kubelet` (conditions and addresses merge by `type`). `lastHeartbeatTime` is
//! stamped on every update; `lastTransitionTime` moves only when a condition's status differs
//! from what the API holds (the lifecycle controller may have set `Unknown` meanwhile).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::Context;
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::api::bounded;
use crate::machine::{Machine, kibibytes};
use crate::time::rfc3339;

/// The version the Node reports, kubelet 1.33's with Finale's mark.
pub const KUBELET_VERSION: &str = "v1.33.0-finale";

/// The field manager of every write the agent makes, as the kubelet's.
pub(crate) const FIELD_MANAGER: &str = "kubelet";

/// What the Node object is built from.
pub(crate) struct NodeSpec {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub max_pods: u32,
    pub address: SocketAddr,
    pub machine: Machine,
}

impl NodeSpec {
    /// The default labels, then the configured ones (which may override them).
    fn labels(&self) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::from([
            ("kubernetes.io/hostname".to_string(), self.name.clone()),
            ("kubernetes.io/os".to_string(), "linux".to_string()),
            (
                "kubernetes.io/arch".to_string(),
                self.machine.architecture.clone(),
            ),
            ("beta.kubernetes.io/os".to_string(), "linux".to_string()),
            (
                "beta.kubernetes.io/arch".to_string(),
                self.machine.architecture.clone(),
            ),
        ]);
        labels.extend(self.labels.clone());
        labels
    }

    fn node(&self) -> anyhow::Result<Node> {
        let mut spec = json!({});
        if !self.taints.is_empty() {
            spec["taints"] = serde_json::to_value(&self.taints).context("encode the taints")?;
        }
        serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": { "name": self.name, "labels": self.labels() },
            "spec": spec,
        }))
        .context("build the Node")
    }

    /// The IP the Node reports as `InternalIP` (and pods as theirs).
    pub(crate) fn host_ip(&self) -> IpAddr {
        host_ip(self.address)
    }

    /// The `/status` patch, with `lastTransitionTime`s taken from `current` when unchanged.
    pub(crate) fn status_patch(&self, current: Option<&Node>, now: SystemTime) -> Value {
        let now = rfc3339(now);
        let machine = &self.machine;
        let mut capacity = json!({
            "cpu": machine.cpus.to_string(),
            "pods": self.max_pods.to_string(),
        });
        if let Some(bytes) = machine.memory_bytes {
            capacity["memory"] = json!(kibibytes(bytes));
        }
        if let Some(bytes) = machine.ephemeral_storage_bytes {
            capacity["ephemeral-storage"] = json!(kibibytes(bytes));
        }
        let previous = transition_times(current);
        let conditions: Vec<Value> = [
            (
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            (
                "DiskPressure",
                "False",
                "KubeletHasNoDiskPressure",
                "kubelet has no disk pressure",
            ),
            (
                "PIDPressure",
                "False",
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
            ),
            (
                "Ready",
                "True",
                "KubeletReady",
                "kubelet is posting ready status",
            ),
        ]
        .into_iter()
        .map(|(kind, status, reason, message)| {
            let transition = match previous.get(kind) {
                Some((was, at)) if was == status => at.clone(),
                _ => now.clone(),
            };
            json!({
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": now,
                "lastTransitionTime": transition,
            })
        })
        .collect();
        json!({
            "status": {
                "capacity": capacity,
                // Nothing is reserved for system daemons: all of it is the pods'.
                "allocatable": capacity,
                "conditions": conditions,
                "addresses": [
                    { "type": "InternalIP", "address": self.host_ip().to_string() },
                    { "type": "Hostname", "address": machine.hostname },
                ],
                "daemonEndpoints": { "kubeletEndpoint": { "Port": self.address.port() } },
                "nodeInfo": {
                    "machineID": machine.machine_id,
                    "systemUUID": machine.machine_id,
                    "bootID": machine.boot_id,
                    "kernelVersion": machine.kernel_version,
                    "osImage": machine.os_image,
                    "containerRuntimeVersion":
                        format!("finale-process://{}", env!("CARGO_PKG_VERSION")),
                    "kubeletVersion": KUBELET_VERSION,
                    "kubeProxyVersion": "",
                    "operatingSystem": "linux",
                    "architecture": machine.architecture,
                },
            }
        })
    }
}

/// The address the agent reports: the serve address's IP; an unspecified one (`0.0.0.0`)
/// says nothing about where the node is, so loopback stands in for it.
pub(crate) fn host_ip(address: SocketAddr) -> IpAddr {
    match address.ip() {
        ip if !ip.is_unspecified() => ip,
        IpAddr::V4(_) => IpAddr::from([127, 0, 0, 1]),
        IpAddr::V6(_) => IpAddr::from([0u16, 0, 0, 0, 0, 0, 0, 1]),
    }
}

/// Condition type → (status, lastTransitionTime) as the API holds them.
fn transition_times(node: Option<&Node>) -> BTreeMap<String, (String, String)> {
    let Some(conditions) = node
        .and_then(|node| node.status.as_ref())
        .and_then(|status| status.conditions.as_ref())
    else {
        return BTreeMap::new();
    };
    conditions
        .iter()
        .filter_map(|condition| {
            let at = condition.last_transition_time.as_ref()?;
            Some((
                condition.type_.clone(),
                (
                    condition.status.clone(),
                    rfc3339(crate::time::from_api(&at.0)),
                ),
            ))
        })
        .collect()
}

/// Creates the Node, or brings an existing one's labels up to date; returns its uid.
async fn register_once(api: &Api<Node>, spec: &NodeSpec) -> anyhow::Result<String> {
    let node = spec.node()?;
    match bounded(api.create(&PostParams::default(), &node)).await {
        Ok(created) => {
            tracing::info!(node = %spec.name, "registered the Node");
            created
                .metadata
                .uid
                .context("the created Node has no metadata.uid")
        }
        Err(error) if error.is_conflict() => {
            let patch = json!({ "metadata": { "labels": spec.labels() } });
            let existing = bounded(api.patch(
                &spec.name,
                &PatchParams {
                    field_manager: Some(FIELD_MANAGER.to_string()),
                    ..PatchParams::default()
                },
                &Patch::Merge(&patch),
            ))
            .await
            .with_context(|| format!("update the labels of the existing Node {}", spec.name))?;
            tracing::info!(node = %spec.name, "the Node exists; kept it and updated its labels");
            existing
                .metadata
                .uid
                .context("the existing Node has no metadata.uid")
        }
        Err(error) => {
            Err(anyhow::Error::new(error).context(format!("create the Node {}", spec.name)))
        }
    }
}

/// Registers the Node, retrying (1 s, doubling to 7 s, as the kubelet) until it works or
/// `shutdown` fires (`None`).
pub(crate) async fn register(
    client: &kube::Client,
    spec: &NodeSpec,
    shutdown: &CancellationToken,
) -> Option<String> {
    let api: Api<Node> = Api::all(client.clone());
    let mut delay = Duration::from_secs(1);
    loop {
        match register_once(&api, spec).await {
            Ok(uid) => return Some(uid),
            Err(error) => {
                tracing::warn!(node = %spec.name, error = format!("{error:#}"),
                    "cannot register the Node; retrying in {delay:?}");
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return None,
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(Duration::from_secs(7));
    }
}

/// Posts the Node's status once (reading the current object first for its transition times).
/// A Node that was deleted is registered again; `uid` is updated for the Lease.
async fn post_status(api: &Api<Node>, spec: &NodeSpec, uid: &Mutex<String>) -> anyhow::Result<()> {
    let current = match bounded(api.get_opt(&spec.name)).await? {
        Some(node) => node,
        None => {
            tracing::warn!(node = %spec.name, "the Node is gone; registering it again");
            let new_uid = register_once(api, spec).await?;
            *uid.lock().unwrap_or_else(|e| e.into_inner()) = new_uid;
            bounded(api.get(&spec.name)).await?
        }
    };
    if let Some(current_uid) = current.metadata.uid.clone() {
        *uid.lock().unwrap_or_else(|e| e.into_inner()) = current_uid;
    }
    let patch = spec.status_patch(Some(&current), SystemTime::now());
    bounded(api.patch_status(
        &spec.name,
        &PatchParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PatchParams::default()
        },
        &Patch::Strategic(&patch),
    ))
    .await
    .context("patch the Node status")?;
    Ok(())
}

/// Posts the Node's status now and then every `every` until `shutdown`; failures are logged
/// and retried at the next tick.
pub(crate) async fn status_loop(
    client: kube::Client,
    spec: Arc<NodeSpec>,
    uid: Arc<Mutex<String>>,
    every: Duration,
    shutdown: CancellationToken,
) {
    let api: Api<Node> = Api::all(client);
    let mut ticks = tokio::time::interval(every.max(Duration::from_millis(100)));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        if let Err(error) = post_status(&api, &spec, &uid).await {
            tracing::warn!(node = %spec.name, error = format!("{error:#}"),
                "cannot update the Node status");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> NodeSpec {
        NodeSpec {
            name: "node-1".into(),
            labels: BTreeMap::from([("tier".to_string(), "edge".to_string())]),
            taints: vec![Taint {
                key: "dedicated".into(),
                value: Some("x".into()),
                effect: "NoSchedule".into(),
                time_added: None,
            }],
            max_pods: 110,
            address: "127.0.0.1:10250".parse().expect("address"),
            machine: Machine {
                hostname: "host".into(),
                cpus: 2,
                memory_bytes: Some(4 * 1024 * 1024 * 1024),
                ephemeral_storage_bytes: None,
                machine_id: "m".into(),
                boot_id: "b".into(),
                kernel_version: "6.1".into(),
                os_image: "Debian".into(),
                architecture: "amd64".into(),
            },
        }
    }

    #[test]
    fn the_node_carries_default_and_configured_labels_and_taints() {
        let node = spec().node().expect("node");
        let labels = node.metadata.labels.expect("labels");
        assert_eq!(labels["kubernetes.io/hostname"], "node-1");
        assert_eq!(labels["kubernetes.io/os"], "linux");
        assert_eq!(labels["kubernetes.io/arch"], "amd64");
        assert_eq!(labels["tier"], "edge");
        let taints = node.spec.and_then(|spec| spec.taints).expect("taints");
        assert_eq!(taints[0].key, "dedicated");
    }

    #[test]
    fn status_reports_capacity_endpoint_and_ready() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let patch = spec().status_patch(None, now);
        let status = &patch["status"];
        assert_eq!(status["capacity"]["cpu"], "2");
        assert_eq!(status["capacity"]["pods"], "110");
        assert_eq!(status["capacity"]["memory"], "4194304Ki");
        assert_eq!(status["allocatable"], status["capacity"]);
        assert_eq!(status["daemonEndpoints"]["kubeletEndpoint"]["Port"], 10250);
        assert_eq!(status["addresses"][0]["address"], "127.0.0.1");
        assert_eq!(status["nodeInfo"]["kubeletVersion"], KUBELET_VERSION);
        let ready = status["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
            .expect("Ready");
        assert_eq!(ready["status"], "True");
        assert_eq!(ready["reason"], "KubeletReady");
        assert_eq!(ready["lastTransitionTime"], "2023-11-14T22:13:20Z");
    }

    #[test]
    fn transition_times_survive_unless_the_status_changed() {
        let earlier = SystemTime::UNIX_EPOCH + Duration::from_secs(1_600_000_000);
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "node-1"},
            "status": {"conditions": [
                {"type": "MemoryPressure", "status": "False",
                 "lastTransitionTime": rfc3339(earlier)},
                // The lifecycle controller marked it Unknown while the agent was away.
                {"type": "Ready", "status": "Unknown",
                 "lastTransitionTime": rfc3339(earlier)},
            ]}
        }))
        .expect("node");
        let patch = spec().status_patch(Some(&node), now);
        let conditions = patch["status"]["conditions"].as_array().expect("list");
        let time_of = |kind: &str| {
            conditions
                .iter()
                .find(|c| c["type"] == kind)
                .map(|c| c["lastTransitionTime"].clone())
        };
        assert_eq!(time_of("MemoryPressure"), Some(json!(rfc3339(earlier))));
        assert_eq!(time_of("Ready"), Some(json!(rfc3339(now))));
        assert_eq!(time_of("DiskPressure"), Some(json!(rfc3339(now))));
    }

    #[test]
    fn an_unspecified_address_reports_loopback() {
        assert_eq!(
            host_ip("0.0.0.0:10250".parse().expect("address")).to_string(),
            "127.0.0.1"
        );
        assert_eq!(
            host_ip("10.0.0.5:10250".parse().expect("address")).to_string(),
            "10.0.0.5"
        );
    }
}
