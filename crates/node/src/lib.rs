//! Finale's node agent: a kubelet for a *process runtime*. It registers a Node, keeps its
//! Lease and status fresh, runs the Pods bound to it as host processes, serves their logs, and
//! terminates them as the kubelet does, so that a Pod's deletion flows from the API to its
//! processes and back.
//!
//! What it does, module by module:
//! - `registration`: creates (or keeps) the `v1` Node with labels, taints, capacity,
//!   addresses, `nodeInfo`, the log endpoint's port, and posts `Ready` and the pressure
//!   conditions every `status_update_frequency`;
//! - `lease`: renews `kube-node-lease/<node>` every `renew_interval`;
//! - `pods`: watches the Pods with `spec.nodeName=<node>`, one worker per pod uid: init
//!   containers in order, then the app containers; `restartPolicy` with the kubelet's
//!   crash-loop back-off (`backoff`); probes (`probes`); status as the kubelet writes it;
//!   and the termination: preStop → `SIGTERM` → grace (`grace`) → `SIGKILL` → terminal
//!   status → `DELETE` with grace 0 and the uid as precondition;
//! - `runtime`: each container is a process group led by its `command` + `args`, logging
//!   straight to `<root>/pods/<uid>/<container>/<restartCount>.log`;
//! - `state`: what survives the agent's restarts, `<root>/pods/<uid>/state.json`;
//! - `logs`: `GET /containerLogs/{namespace}/{pod}/{container}` over HTTPS, for the API
//!   server's `pods/log`.
//!
//! # Guarantees
//! - A Pod's processes get `SIGKILL` no earlier than the end of its grace period (unless the
//!   Pod is removed from the API, e.g. `kubectl delete --force --grace-period=0`, when they
//!   get it at once), and no later than that plus the time to notice: a shorter grace set by a
//!   later DELETE is honoured, a longer one ignored, as upstream.
//! - The agent confirms a deletion (`DELETE`, `gracePeriodSeconds: 0`, `preconditions.uid`)
//!   only after every process of the pod is gone and its terminal status is written; a
//!   re-created pod of the same name is never deleted by mistake.
//! - The agent's death or shutdown does not stop the pods: their processes run on, log on, and
//!   a restarted agent adopts them (same pid and start time) without restarting them.
//! - A termination interrupted by the agent's death resumes on restart with the deadline it
//!   had (the clock is not restarted); a pod deleted from the API while the agent was down has
//!   its processes killed on restart. The agent never leaves processes of a pod it no longer
//!   has, and never signals a process that merely reuses a recorded pid.
//! - The Lease is renewed every `renew_interval` while the API answers; failures are logged
//!   and retried, never fatal.
//!
//! # Assumptions
//! - One agent per root directory (the state files are not locked against a second one).
//! - Pod processes run as the agent's user, in the host's namespaces: the host network, so a
//!   pod's IP is the node's, and ports are shared among all pods.
//! - The `kube::Client` passed to [`run`] has no read timeout shorter than a watch lives (the
//!   agent bounds its other calls itself, to 30 s each).
//!
//! # Caveats
//! - This is a process runtime, not a container runtime: no images (the `image` is recorded,
//!   never pulled; `command` is required), no namespaces, cgroups, resource limits, volumes,
//!   users or seccomp. It isolates nothing; run only what you would run as the agent's user.
//! - The exit code of a process adopted after an agent restart cannot be known (it is not the
//!   agent's child): when it ends it is reported as `ContainerStatusUnknown` with exit code
//!   137, as the kubelet reports a container it could not find.
//! - See `docs/nodes.md` for every difference from kubelet 1.33.

mod api;
mod backoff;
mod events;
mod grace;
mod lease;
mod logs;
mod machine;
mod pods;
mod probes;
mod registration;
mod runtime;
mod state;
mod time;
mod tls;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
pub use backoff::CrashLoopBackoff;
pub use k8s_openapi::api::core::v1::Taint;
pub use lease::NODE_LEASE_NAMESPACE;
pub use machine::hostname;
pub use registration::KUBELET_VERSION;
pub use tls::{AUTHORIZED_GROUP, pem_from_der};
use tokio_util::sync::CancellationToken;

/// How a node agent runs.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// The Node's name (the kubelet's `--hostname-override`).
    pub node_name: String,
    /// Where pods live: `<root_dir>/pods/<uid>/` (working directory, logs, state).
    pub root_dir: PathBuf,
    /// Pods that may run at once; more are rejected (`OutOfpods`). Kubelet default 110.
    pub max_pods: u32,
    /// The Lease's `leaseDurationSeconds` (kubelet default 40).
    pub lease_duration_seconds: i32,
    /// How often the Lease is renewed (kubelet: a quarter of the duration, 10 s).
    pub renew_interval: Duration,
    /// How often the Node's status is posted (kubelet default 10 s).
    pub status_update_frequency: Duration,
    /// Where the log endpoint listens (kubelet default `127.0.0.1:10250` here, loopback by
    /// default as everything in Finale); port 0 picks a free port, reported in the Node's
    /// `daemonEndpoints`. Its IP is the Node's `InternalIP` and every pod's IP.
    pub serve_address: SocketAddr,
    /// Labels beside the default ones (`kubernetes.io/hostname`, `/os`, `/arch`).
    pub labels: BTreeMap<String, String>,
    /// Taints the Node is registered with (kept as they are when it already exists).
    pub taints: Vec<Taint>,
    /// The crash-loop back-off (10 s doubling to 300 s); lower it for tests.
    pub crash_loop_backoff: CrashLoopBackoff,
}

impl AgentConfig {
    /// The kubelet's defaults for a node named `node_name`, rooted at `./finale-node`.
    pub fn new(node_name: impl Into<String>) -> AgentConfig {
        AgentConfig {
            node_name: node_name.into(),
            root_dir: PathBuf::from("./finale-node"),
            max_pods: 110,
            lease_duration_seconds: 40,
            renew_interval: Duration::from_secs(10),
            status_update_frequency: Duration::from_secs(10),
            serve_address: SocketAddr::from(([127, 0, 0, 1], 10250)),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            crash_loop_backoff: CrashLoopBackoff::default(),
        }
    }
}

/// A started agent; see [`start`].
pub struct RunningAgent {
    /// Where the log endpoint listens (the real port when port 0 was asked for).
    pub serve_address: SocketAddr,
    pub node_name: String,
    tasks: tokio::task::JoinSet<()>,
    shutdown: CancellationToken,
}

impl RunningAgent {
    /// Runs until the shutdown token fires, then waits for the agent's tasks to stop. The
    /// pods' processes keep running.
    pub async fn wait(mut self) -> anyhow::Result<()> {
        self.shutdown.cancelled().await;
        let stop = async { while self.tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(Duration::from_secs(15), stop)
            .await
            .is_err()
        {
            tracing::warn!("some node agent tasks did not stop within 15 s");
        }
        tracing::info!(node = %self.node_name, "node agent stopped; its pods keep running");
        Ok(())
    }
}

/// Runs a node agent until `shutdown` fires: [`start`], then [`RunningAgent::wait`].
///
/// `cluster_ca_pem` is the cluster CA (from the kubeconfig): the log endpoint accepts only
/// client certificates that chain to it and name `O=system:masters`; `None` refuses every
/// request (403).
pub async fn run(
    client: kube::Client,
    cluster_ca_pem: Option<String>,
    config: AgentConfig,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    start(client, cluster_ca_pem, config, shutdown)
        .await?
        .wait()
        .await
}

/// Starts a node agent: reads what an earlier agent left in `root_dir`, listens on
/// `serve_address`, registers the Node (retrying until the API server accepts it, or until
/// `shutdown`), then starts the Lease, the status updates, the log endpoint and the pods.
/// Returns once all of that runs.
pub async fn start(
    client: kube::Client,
    cluster_ca_pem: Option<String>,
    config: AgentConfig,
    shutdown: CancellationToken,
) -> anyhow::Result<RunningAgent> {
    if config.node_name.is_empty() {
        anyhow::bail!("the node name is empty");
    }
    if config.node_name.len() > 253
        || !config
            .node_name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
    {
        anyhow::bail!(
            "the node name {:?} is not a DNS subdomain (lower-case letters, digits, '-' and '.')",
            config.node_name
        );
    }
    let pods_dir = state::pods_dir(&config.root_dir);
    std::fs::create_dir_all(&pods_dir).with_context(|| format!("create {}", pods_dir.display()))?;
    let root_dir = std::fs::canonicalize(&config.root_dir)
        .with_context(|| format!("resolve {}", config.root_dir.display()))?;
    // Before anything is served: what an earlier agent left running.
    let adoptable = state::load_all(&root_dir)?;
    if !adoptable.is_empty() {
        tracing::info!(
            pods = adoptable.len(),
            "found state of pods run by an earlier agent"
        );
    }
    let machine = machine::Machine::discover(&root_dir);
    let listener = tokio::net::TcpListener::bind(config.serve_address)
        .await
        .with_context(|| format!("listen on {}", config.serve_address))?;
    let serve_address = listener
        .local_addr()
        .context("the log endpoint's address")?;
    let host_ip = registration::host_ip(serve_address);
    if cluster_ca_pem.is_none() {
        tracing::warn!(
            "no cluster CA: the log endpoint cannot authenticate the API server and refuses \
             every request (403)"
        );
    }
    let auth = tls::ClientAuth::new(cluster_ca_pem.as_deref())?;
    let tls_config = auth.server_config(host_ip, &machine.hostname)?;

    let mut tasks = tokio::task::JoinSet::new();
    let (recorder, recorder_task) =
        events::Recorder::start(client.clone(), &config.node_name, shutdown.clone());
    let logs = logs::LogIndex::default();
    tasks.spawn(logs::serve(
        listener,
        tls_config,
        auth,
        logs.clone(),
        shutdown.clone(),
    ));
    tasks.spawn(async move {
        let _ = recorder_task.await;
    });

    let spec = Arc::new(registration::NodeSpec {
        name: config.node_name.clone(),
        labels: config.labels.clone(),
        taints: config.taints.clone(),
        max_pods: config.max_pods,
        address: serve_address,
        machine,
    });
    let Some(node_uid) = registration::register(&client, &spec, &shutdown).await else {
        return Ok(RunningAgent {
            serve_address,
            node_name: config.node_name,
            tasks,
            shutdown,
        });
    };
    let node_uid = Arc::new(Mutex::new(node_uid));
    tasks.spawn(registration::status_loop(
        client.clone(),
        Arc::clone(&spec),
        Arc::clone(&node_uid),
        config.status_update_frequency,
        shutdown.clone(),
    ));
    tasks.spawn(lease::renew_loop(
        client.clone(),
        config.node_name.clone(),
        node_uid,
        config.lease_duration_seconds,
        config.renew_interval,
        shutdown.clone(),
    ));
    let shared = Arc::new(pods::Shared {
        client,
        node_name: config.node_name.clone(),
        root_dir,
        host_ip: host_ip.to_string(),
        max_pods: config.max_pods,
        backoff: config.crash_loop_backoff,
        prober: probes::Prober::new(recorder.clone())?,
        recorder,
        logs,
    });
    tasks.spawn(pods::run(shared, adoptable, shutdown.clone()));
    tracing::info!(node = %config.node_name, %serve_address, "node agent running");
    Ok(RunningAgent {
        serve_address,
        node_name: config.node_name,
        tasks,
        shutdown,
    })
}
