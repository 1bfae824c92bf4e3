//! Kubernetes Events about pods, as the kubelet records them (core/v1 Events with
//! `source.component: kubelet`, `reportingComponent: kubelet`,
//! `reportingInstance: <node>`): `Created`, `Started`, `Killing`, `Unhealthy`, `BackOff`,
//! `Failed`, `FailedPreStopHook`.
//!
//! # Caveats
//! Events are best effort, as upstream's: they are queued (up to [`QUEUE`]) and written by one
//! task; when the queue is full, or the API server refuses one, it is dropped and logged. No
//! aggregation into `count`/series: each occurrence is its own Event.

use std::time::SystemTime;

use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::time::rfc3339;

/// Events waiting to be written at most.
const QUEUE: usize = 1024;

/// `Normal` or `Warning`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Normal,
    Warning,
}

/// The pod an Event is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PodRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl PodRef {
    /// `format.Pod`: `name_namespace(uid)`, as the kubelet's messages name a pod.
    pub(crate) fn display(&self) -> String {
        format!("{}_{}({})", self.name, self.namespace, self.uid)
    }
}

/// Queues Events for the writer task.
#[derive(Clone)]
pub(crate) struct Recorder {
    node: String,
    queue: mpsc::Sender<Event>,
}

impl Recorder {
    /// A recorder and the task that writes its Events until `shutdown`.
    pub(crate) fn start(
        client: kube::Client,
        node: &str,
        shutdown: CancellationToken,
    ) -> (Recorder, tokio::task::JoinHandle<()>) {
        let (queue, receiver) = mpsc::channel(QUEUE);
        let task = tokio::spawn(write_events(client, receiver, shutdown));
        (
            Recorder {
                node: node.to_string(),
                queue,
            },
            task,
        )
    }

    /// Records an Event about `pod`, or about one of its containers (`container`, which makes
    /// `involvedObject.fieldPath` `spec.containers{name}` or `spec.initContainers{name}`).
    pub(crate) fn pod(
        &self,
        pod: &PodRef,
        container: Option<(&str, bool)>,
        kind: Kind,
        reason: &str,
        message: &str,
    ) {
        let now = SystemTime::now();
        let nanos = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|since| since.as_nanos())
            .unwrap_or(0);
        let mut involved = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": pod.namespace,
            "name": pod.name,
            "uid": pod.uid,
        });
        if let Some((name, init)) = container {
            let list = if init {
                "spec.initContainers"
            } else {
                "spec.containers"
            };
            involved["fieldPath"] = json!(format!("{list}{{{name}}}"));
        }
        let time = rfc3339(now);
        let event = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                // client-go's naming: the object's name and the time in hex nanoseconds.
                "name": format!("{}.{nanos:x}", pod.name),
                "namespace": pod.namespace,
            },
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": match kind { Kind::Normal => "Normal", Kind::Warning => "Warning" },
            "source": { "component": "kubelet", "host": self.node },
            "firstTimestamp": time,
            "lastTimestamp": time,
            "count": 1,
            "reportingComponent": "kubelet",
            "reportingInstance": self.node,
        });
        let event: Event = match serde_json::from_value(event) {
            Ok(event) => event,
            Err(error) => {
                tracing::warn!(%error, reason, "cannot build an Event");
                return;
            }
        };
        if self.queue.try_send(event).is_err() {
            tracing::warn!(reason, pod = %pod.display(), "Event queue full; Event dropped");
        }
    }
}

async fn write_events(
    client: kube::Client,
    mut receiver: mpsc::Receiver<Event>,
    shutdown: CancellationToken,
) {
    loop {
        let event = tokio::select! {
            _ = shutdown.cancelled() => return,
            event = receiver.recv() => match event {
                Some(event) => event,
                None => return,
            },
        };
        let namespace = event.metadata.namespace.clone().unwrap_or_default();
        let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
        if let Err(error) = crate::api::bounded(api.create(&PostParams::default(), &event)).await {
            tracing::debug!(%error, reason = ?event.reason, "cannot record an Event");
        }
    }
}
