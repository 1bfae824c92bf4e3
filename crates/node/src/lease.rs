//! The node's heartbeat: the `coordination.k8s.io/v1` Lease `kube-node-lease/<node>`, renewed
//! every `renew_interval`, as the kubelet's `nodelease` controller keeps it.
//!
//! The Lease has `holderIdentity` = the node's name, `leaseDurationSeconds`, `renewTime`
//! (MicroTime) and an ownerReference to the Node (so it goes with the Node). A renewal reads the
//! Lease and replaces it (the resourceVersion guards against a concurrent writer); a failed
//! renewal is logged and tried again at the next tick, never fatal: the node lifecycle
//! controller, not the agent, decides what a stale Lease means.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::api::bounded;
use crate::time::rfc3339_micros;

/// The namespace of node Leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

fn owner(node: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "v1".to_string(),
        kind: "Node".to_string(),
        name: node.to_string(),
        uid: uid.to_string(),
        ..OwnerReference::default()
    }
}

/// Creates or renews the Lease once.
async fn renew(
    api: &Api<Lease>,
    node: &str,
    node_uid: &str,
    duration_seconds: i32,
) -> anyhow::Result<()> {
    let renew_time = rfc3339_micros(SystemTime::now());
    match bounded(api.get_opt(node)).await? {
        None => {
            let lease: Lease = serde_json::from_value(json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": node,
                    "namespace": NODE_LEASE_NAMESPACE,
                    "ownerReferences": [owner(node, node_uid)],
                },
                "spec": {
                    "holderIdentity": node,
                    "leaseDurationSeconds": duration_seconds,
                    "renewTime": renew_time,
                },
            }))?;
            bounded(api.create(&PostParams::default(), &lease)).await?;
        }
        Some(mut lease) => {
            let mut spec = lease.spec.take().unwrap_or_default();
            spec.holder_identity = Some(node.to_string());
            spec.lease_duration_seconds = Some(duration_seconds);
            spec.renew_time = serde_json::from_value(json!(renew_time))?;
            lease.spec = Some(spec);
            // The Node may have been registered again under a new uid.
            let owners = lease.metadata.owner_references.get_or_insert_with(Vec::new);
            owners.retain(|reference| reference.kind != "Node" || reference.uid == node_uid);
            if !owners.iter().any(|reference| reference.kind == "Node") {
                owners.push(owner(node, node_uid));
            }
            bounded(api.replace(node, &PostParams::default(), &lease)).await?;
        }
    }
    Ok(())
}

/// Renews the Lease now and every `every` until `shutdown`.
pub(crate) async fn renew_loop(
    client: kube::Client,
    node: String,
    node_uid: Arc<Mutex<String>>,
    duration_seconds: i32,
    every: Duration,
    shutdown: CancellationToken,
) {
    let api: Api<Lease> = Api::namespaced(client, NODE_LEASE_NAMESPACE);
    let mut ticks = tokio::time::interval(every.max(Duration::from_millis(100)));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let uid = node_uid.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Err(error) = renew(&api, &node, &uid, duration_seconds).await {
            tracing::warn!(%node, error = format!("{error:#}"), "cannot renew the node Lease");
        }
    }
}
