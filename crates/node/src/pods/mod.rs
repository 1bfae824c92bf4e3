//! The pods bound to this node: a watch on `spec.nodeName=<node>` in all namespaces, one
//! [`worker::Worker`] task per pod uid, and the reconciliation with what an earlier agent left
//! on disk.
//!
//! # Adoption
//! At start the agent reads every `<root>/pods/<uid>/state.json` before it watches. Each pod
//! the first list returns gets its recorded state: live processes (same pid *and* start time)
//! are adopted, dead ones are reported as `ContainerStatusUnknown` and restarted per policy, and
//! a termination in progress resumes with its recorded deadline. Pods the list does not return
//! (deleted, even force-deleted, while the agent was down) have their processes killed and
//! their directories removed. A pod deleted while the agent runs is killed when the watch says
//! so. The agent never leaves processes of pods it no longer has.
//!
//! # Admission
//! As the kubelet, a pod beyond `max_pods` running ones is rejected: `Failed` with reason
//! `OutOfpods`, and never started.

pub(crate) mod env;
pub(crate) mod status;
pub(crate) mod worker;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use nix::sys::signal::Signal;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::backoff::CrashLoopBackoff;
use crate::events::Recorder;
use crate::logs::LogIndex;
use crate::probes::Prober;
use crate::runtime::{self, procfs};
use crate::state::{self, ContainerRecordState, PodState};
use worker::{PodUpdate, Worker};

/// What every pod worker shares.
pub(crate) struct Shared {
    pub client: kube::Client,
    pub node_name: String,
    pub root_dir: PathBuf,
    /// The node's IP, which is every pod's IP too (host network).
    pub host_ip: String,
    pub max_pods: u32,
    pub backoff: CrashLoopBackoff,
    pub recorder: Recorder,
    pub prober: Prober,
    pub logs: LogIndex,
}

/// How long the manager waits for its workers to record their state at shutdown.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(10);

struct Handle {
    updates: watch::Sender<PodUpdate>,
    /// Whether the pod has reached a terminal phase (it no longer counts against max_pods).
    terminal: Arc<AtomicBool>,
}

/// Watches this node's pods and runs a worker for each until `shutdown`.
pub(crate) async fn run(
    shared: Arc<Shared>,
    mut adoptable: BTreeMap<String, Option<PodState>>,
    shutdown: CancellationToken,
) {
    let api: Api<Pod> = Api::all(shared.client.clone());
    let config = watcher::Config::default().fields(&format!("spec.nodeName={}", shared.node_name));
    let mut stream = watcher(api, config).default_backoff().boxed();
    let mut workers: HashMap<String, Handle> = HashMap::new();
    // Pods whose worker finished (deleted with grace 0, or force-deleted): later events about
    // them (a pod kept by finalizers) start nothing.
    let mut finished: HashSet<String> = HashSet::new();
    let mut listing: Option<HashSet<String>> = None;
    let mut first_list_done = false;
    let mut tasks = tokio::task::JoinSet::new();
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<String>();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            Some(uid) = done_rx.recv() => {
                workers.remove(&uid);
                finished.insert(uid);
            }
            Some(Ok(())) = tasks.join_next(), if !tasks.is_empty() => {}
            event = stream.next() => {
                let Some(event) = event else { break };
                let event = match event {
                    Ok(event) => event,
                    Err(error) => {
                        tracing::warn!(%error, "pod watch failed; retrying");
                        continue;
                    }
                };
                match event {
                    watcher::Event::Init => listing = Some(HashSet::new()),
                    watcher::Event::InitApply(pod) => {
                        if let (Some(seen), Some(uid)) = (listing.as_mut(), pod.metadata.uid.clone()) {
                            seen.insert(uid);
                        }
                        dispatch(&shared, &mut workers, &finished, &mut adoptable, &mut tasks, &done_tx, &shutdown, pod);
                    }
                    watcher::Event::Apply(pod) => {
                        dispatch(&shared, &mut workers, &finished, &mut adoptable, &mut tasks, &done_tx, &shutdown, pod);
                    }
                    watcher::Event::Delete(pod) => {
                        if let Some(uid) = pod.metadata.uid.as_deref() {
                            if let Some(handle) = workers.get(uid) {
                                handle.updates.send_replace(PodUpdate::Gone);
                            }
                            finished.remove(uid);
                        }
                    }
                    watcher::Event::InitDone => {
                        let seen = listing.take().unwrap_or_default();
                        for (uid, handle) in &workers {
                            if !seen.contains(uid) {
                                handle.updates.send_replace(PodUpdate::Gone);
                            }
                        }
                        finished.retain(|uid| seen.contains(uid));
                        if !first_list_done {
                            first_list_done = true;
                            // What an earlier agent left for pods that no longer exist.
                            for (uid, state) in std::mem::take(&mut adoptable) {
                                if !seen.contains(&uid) {
                                    tasks.spawn(clean_orphan(shared.root_dir.clone(), uid, state));
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    // Workers see the same cancellation and record their state; their processes run on.
    drop(workers);
    if tokio::time::timeout(SHUTDOWN_WAIT, async {
        while tasks.join_next().await.is_some() {}
    })
    .await
    .is_err()
    {
        tracing::warn!("some pod workers did not stop within {SHUTDOWN_WAIT:?}");
    }
}

/// Hands a pod to its worker, starting one for a pod not seen before.
#[allow(clippy::too_many_arguments)]
fn dispatch(
    shared: &Arc<Shared>,
    workers: &mut HashMap<String, Handle>,
    finished: &HashSet<String>,
    adoptable: &mut BTreeMap<String, Option<PodState>>,
    tasks: &mut tokio::task::JoinSet<()>,
    done: &mpsc::UnboundedSender<String>,
    shutdown: &CancellationToken,
    pod: Pod,
) {
    let Some(uid) = pod.metadata.uid.clone() else {
        return;
    };
    if finished.contains(&uid) {
        return;
    }
    let pod = Arc::new(pod);
    if let Some(handle) = workers.get(&uid) {
        handle.updates.send_replace(PodUpdate::Present(pod));
        return;
    }
    let adopted = adoptable.remove(&uid).flatten();
    let phase = status::Phase::parse(pod.status.as_ref().and_then(|s| s.phase.as_deref()));
    let terminal = Arc::new(AtomicBool::new(
        phase.is_some_and(status::Phase::is_terminal),
    ));
    let running = workers
        .values()
        .filter(|handle| !handle.terminal.load(Ordering::Relaxed))
        .count();
    let rejected = (adopted.is_none()
        && !terminal.load(Ordering::Relaxed)
        && pod.metadata.deletion_timestamp.is_none()
        && running >= shared.max_pods as usize)
        .then(|| {
            (
                "OutOfpods".to_string(),
                format!(
                    "Pod was rejected: Node didn't have enough resource: pods, requested: 1, \
                     used: {running}, capacity: {}",
                    shared.max_pods
                ),
            )
        });
    if rejected.is_some() {
        terminal.store(true, Ordering::Relaxed);
    }
    let (updates, receiver) = watch::channel(PodUpdate::Present(Arc::clone(&pod)));
    let worker = Worker::new(
        Arc::clone(shared),
        pod,
        adopted,
        rejected,
        Arc::clone(&terminal),
        shutdown.clone(),
    );
    let done = done.clone();
    let finished_uid = uid.clone();
    let shutdown = shutdown.clone();
    tasks.spawn(async move {
        worker.run(receiver).await;
        // At shutdown the worker stopped early; nothing is finished.
        if !shutdown.is_cancelled() {
            let _ = done.send(finished_uid);
        }
    });
    workers.insert(uid, Handle { updates, terminal });
}

/// Kills what an earlier agent ran for a pod that no longer exists, and removes its
/// directory.
async fn clean_orphan(root: PathBuf, uid: String, state: Option<PodState>) {
    let dir = state::pod_dir(&root, &uid);
    if let Some(state) = &state
        && state.boot_id == procfs::boot_id()
    {
        let processes: Vec<(String, i32, u64)> = state
            .containers
            .iter()
            .filter_map(|(name, record)| match &record.current {
                Some(ContainerRecordState::Running(running)) => {
                    Some((name.clone(), running.pid, running.start_ticks))
                }
                _ => None,
            })
            .collect();
        for (name, pid, ticks) in &processes {
            if runtime::signal_container(*pid, *ticks, Signal::SIGKILL) {
                tracing::info!(pod = %format!("{}/{}", state.namespace, state.name), %uid,
                    container = %name, pid, "killed a container of a pod that no longer exists");
            }
        }
        // Not the agent's children: wait for them to be gone (bounded) before the directory.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while processes.iter().any(|(_, pid, ticks)| {
            procfs::is_alive(*pid, *ticks) || !procfs::group_members(*pid, *ticks).is_empty()
        }) && tokio::time::Instant::now() < deadline
        {
            for (_, pid, ticks) in &processes {
                runtime::signal_container(*pid, *ticks, Signal::SIGKILL);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    if let Err(error) = std::fs::remove_dir_all(&dir)
        && error.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(%uid, %error, "cannot remove {}", dir.display());
    } else {
        tracing::info!(%uid, "removed the directory of a pod that no longer exists");
    }
}
