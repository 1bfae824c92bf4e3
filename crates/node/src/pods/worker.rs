//! One pod's life on the node: a task per pod uid that starts its containers, restarts them
//! per `restartPolicy`, reports its status, and, when the pod is deleted, stops it the way the
//! kubelet does and confirms the deletion.
//!
//! # The termination (`metadata.deletionTimestamp` set)
//! 1. Every running container gets a `Killing` Event ("Stopping container X"); its
//!    `lifecycle.preStop` hook runs, bounded by what is left of the grace period.
//! 2. After its hook (at once without one), each container's process group gets `SIGTERM`.
//! 3. At the deadline (see [`crate::grace`]: the start plus `deletionGracePeriodSeconds`,
//!    earlier if a later DELETE shortened the grace, never less than 2 s after `SIGTERM`),
//!    whatever still runs gets `SIGKILL`.
//! 4. Once every process is gone the terminal status is written (`Succeeded` if every
//!    container exited 0, else `Failed`; containers whose end was not observed become
//!    `ContainerStatusUnknown`), then the Pod is deleted with `gracePeriodSeconds: 0` and
//!    `preconditions.uid` (a 404 or 409 means it is gone or is another pod: fine).
//!
//! If the Pod disappears from the API instead (`kubectl delete --force --grace-period=0`),
//! every process gets `SIGKILL` at once.
//!
//! # Guarantees
//! - No container is started for a pod that is being deleted, and none is restarted once its
//!   termination began.
//! - The worker ends only when none of the pod's processes runs (or the agent shuts down, when
//!   they are left running on purpose, and recorded).
//! - A status is written only when it differs from the last one written (or read).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Pod};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Shared;
use super::env::{self, ConfigError, PodFacts, Sources};
use super::status::{
    self, ContainerView, Phase, RestartPolicy, STATUS_UNKNOWN_MESSAGE, StateView, Terminated,
};
use crate::api::bounded;
use crate::backoff::Decision;
use crate::events::{Kind, PodRef};
use crate::grace::{self, GraceClock};
use crate::logs::{ContainerLogs, PodLogs, log_path};
use crate::probes::{ProbeReport, Target};
use crate::registration::FIELD_MANAGER;
use crate::runtime::{self, ExecOutcome, Exit, Launch, procfs};
use crate::state::{
    self, ContainerRecord, ContainerRecordState, PodState, RunningRecord, TerminationRecord,
};
use crate::time::{from_api, from_unix_millis, instant_at, rfc3339, to_unix_millis};

/// What the pod manager tells a worker.
#[derive(Clone, Debug)]
pub(crate) enum PodUpdate {
    /// The pod as the API holds it now.
    Present(Arc<Pod>),
    /// The pod is gone from the API (this is its last known state).
    Gone,
}

/// What a worker's own tasks tell it.
#[derive(Debug)]
enum Event {
    Exited {
        container: String,
        instance: u64,
        exit: Exit,
    },
    Probe {
        container: String,
        instance: u64,
        report: ProbeReport,
    },
    HookDone {
        container: String,
        instance: u64,
        failure: Option<String>,
    },
}

/// How often an adopted process (not the agent's child) is checked for life.
const ADOPTED_POLL: Duration = Duration::from_millis(500);

/// How long the worker waits for processes to die after `SIGKILL` before giving up on them
/// (a process in uninterruptible sleep cannot die; the pod stays Terminating, and says why in
/// the log).
const KILL_WAIT: Duration = Duration::from_secs(10);

/// How soon a failed status write or delete is retried.
const RETRY: Duration = Duration::from_secs(1);

/// Distinguishes the processes of one container over its restarts (and across containers).
static INSTANCES: AtomicU64 = AtomicU64::new(1);

/// Where a container is in its life, for the start/restart decisions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Progress {
    NotStarted,
    Running,
    Succeeded,
    Exited(i32),
}

/// A container being stopped (pod termination, liveness or startup failure).
#[derive(Debug)]
struct Stop {
    /// When `SIGKILL` is due (not before 2 s after `SIGTERM`).
    deadline: SystemTime,
    /// Part of the pod's termination (its deadline follows the pod's grace).
    pod_termination: bool,
    /// The preStop hook's task, while it runs.
    hook: Option<tokio::task::AbortHandle>,
    term_sent: Option<SystemTime>,
    killed: bool,
}

/// One container: what is recorded, plus what lives only in memory.
struct ContainerRt {
    name: String,
    init: bool,
    spec: Container,
    record: ContainerRecord,
    /// The current process's instance number (events from older ones are ignored).
    instance: u64,
    /// The current process was adopted after a restart: not the agent's child.
    adopted: bool,
    /// The environment and working directory it was (or would be) started with, for probes
    /// and hooks.
    env: Vec<(String, String)>,
    working_dir: PathBuf,
    ready: bool,
    started: bool,
    probes: Option<CancellationToken>,
    backoff: Option<crate::backoff::BackoffEntry>,
    /// When the last process ended (where the back-off counts from).
    finished: Option<Instant>,
    /// Waiting in back-off until then.
    restart_at: Option<Instant>,
    /// Why it is not running, when that is not the default (`CrashLoopBackOff`,
    /// `CreateContainerConfigError`).
    waiting: Option<(String, Option<String>)>,
    /// A configuration error that may go away (a ConfigMap created later): try again then.
    retry_at: Option<Instant>,
    /// A configuration error that cannot go away (no `command`).
    permanent_error: bool,
    /// The restart count whose back-off has been reported as an Event.
    backoff_reported: Option<u32>,
    stop: Option<Stop>,
}

impl ContainerRt {
    fn running(&self) -> Option<&RunningRecord> {
        match &self.record.current {
            Some(ContainerRecordState::Running(running)) => Some(running),
            _ => None,
        }
    }

    fn terminated(&self) -> Option<&Terminated> {
        match &self.record.current {
            Some(ContainerRecordState::Terminated(terminated)) => Some(terminated),
            _ => None,
        }
    }

    fn stop_probes(&mut self) {
        if let Some(probes) = self.probes.take() {
            probes.cancel();
        }
    }
}

/// The pod worker.
pub(crate) struct Worker {
    shared: Arc<Shared>,
    pod: Arc<Pod>,
    pod_ref: PodRef,
    dir: PathBuf,
    policy: RestartPolicy,
    containers: Vec<ContainerRt>,
    start_time: Option<String>,
    /// The pod had recorded state: it ran under an earlier agent.
    adopted: bool,
    /// It was adopted already being deleted: the deletion happened while no agent ran.
    deleted_while_away: bool,
    termination: Option<GraceClock>,
    gone: bool,
    /// Every container has run to an end its restart policy keeps (Succeeded or Failed).
    terminal: Arc<AtomicBool>,
    /// Refused at admission: (reason, message).
    rejected: Option<(String, String)>,
    /// The phase after termination (terminal).
    final_phase: Option<Phase>,
    sandbox_ready: bool,
    conditions: BTreeMap<String, (bool, String)>,
    last_status: Option<Value>,
    status_retry_at: Option<Instant>,
    delete_retry_at: Option<Instant>,
    saved: Option<PodState>,
    state_writer: state::StateWriter,
    done: bool,
    events: mpsc::UnboundedSender<Event>,
    inbox: mpsc::UnboundedReceiver<Event>,
    shutdown: CancellationToken,
}

fn uid_of(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

/// The grace the API asks for now: `deletionGracePeriodSeconds` (0 when absent).
fn deletion_grace(pod: &Pod) -> i64 {
    pod.metadata.deletion_grace_period_seconds.unwrap_or(0)
}

fn termination_grace(pod: &Pod) -> i64 {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.termination_grace_period_seconds)
        .unwrap_or(30)
}

/// The fields of a pod status the agent writes, for comparing what the API holds with what
/// would be written. Conditions are sorted by type.
fn projection(status: &Value) -> Value {
    let mut projected = serde_json::Map::new();
    for key in [
        "phase",
        "reason",
        "message",
        "hostIP",
        "hostIPs",
        "podIP",
        "podIPs",
        "startTime",
        "initContainerStatuses",
        "containerStatuses",
    ] {
        if let Some(value) = status.get(key) {
            projected.insert(key.to_string(), value.clone());
        }
    }
    let mut conditions: Vec<Value> = status
        .get("conditions")
        .and_then(Value::as_array)
        .map(|conditions| {
            conditions
                .iter()
                .filter(|c| {
                    c.get("type")
                        .and_then(Value::as_str)
                        .is_some_and(|kind| status::OWNED_CONDITIONS.contains(&kind))
                })
                .map(|c| {
                    let mut c = c.clone();
                    if let Some(map) = c.as_object_mut() {
                        map.remove("lastProbeTime");
                    }
                    c
                })
                .collect()
        })
        .unwrap_or_default();
    conditions.sort_by(|a, b| a["type"].as_str().cmp(&b["type"].as_str()));
    if !conditions.is_empty() {
        projected.insert("conditions".to_string(), Value::Array(conditions));
    }
    Value::Object(projected)
}

impl Worker {
    /// A worker for `pod`, resuming `adopted` state from an earlier agent if there is some.
    pub(crate) fn new(
        shared: Arc<Shared>,
        pod: Arc<Pod>,
        adopted: Option<PodState>,
        rejected: Option<(String, String)>,
        terminal: Arc<AtomicBool>,
        shutdown: CancellationToken,
    ) -> Worker {
        let uid = uid_of(&pod);
        let pod_ref = PodRef {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: uid.clone(),
        };
        let dir = state::pod_dir(&shared.root_dir, &uid);
        let spec = pod.spec.clone().unwrap_or_default();
        let policy = RestartPolicy::parse(spec.restart_policy.as_deref());
        let was_adopted = adopted.is_some();
        let same_boot = adopted
            .as_ref()
            .is_none_or(|state| state.boot_id == procfs::boot_id());
        let mut records = adopted
            .as_ref()
            .map(|state| state.containers.clone())
            .unwrap_or_default();
        let now = SystemTime::now();
        let containers = spec
            .init_containers
            .iter()
            .flatten()
            .map(|c| (c, true))
            .chain(spec.containers.iter().map(|c| (c, false)))
            .map(|(container, init)| {
                let mut record = records.remove(&container.name).unwrap_or_default();
                let mut adopted_process = false;
                let mut finished = None;
                if let Some(ContainerRecordState::Running(running)) = &record.current {
                    if same_boot && procfs::is_alive(running.pid, running.start_ticks) {
                        adopted_process = true;
                    } else {
                        // Gone while the agent was away: how it ended is unknown. Whatever it
                        // left in its group goes too.
                        if same_boot {
                            runtime::signal_container(
                                running.pid,
                                running.start_ticks,
                                Signal::SIGKILL,
                            );
                        }
                        record.current = Some(ContainerRecordState::Terminated(Terminated {
                            exit_code: 137,
                            signal: None,
                            reason: "ContainerStatusUnknown".to_string(),
                            message: Some(STATUS_UNKNOWN_MESSAGE.to_string()),
                            started_at: Some(running.started_at.clone()),
                            finished_at: rfc3339(now),
                            container_id: Some(container_id(running.pid)),
                        }));
                        finished = Some(Instant::now());
                    }
                }
                ContainerRt {
                    name: container.name.clone(),
                    init,
                    spec: container.clone(),
                    record,
                    instance: INSTANCES.fetch_add(1, Ordering::Relaxed),
                    adopted: adopted_process,
                    env: Vec::new(),
                    working_dir: dir.clone(),
                    ready: false,
                    started: false,
                    probes: None,
                    backoff: None,
                    finished,
                    restart_at: None,
                    waiting: None,
                    retry_at: None,
                    permanent_error: false,
                    backoff_reported: None,
                    stop: None,
                }
            })
            .collect();
        let termination = adopted
            .as_ref()
            .and_then(|state| state.termination)
            .map(|record| GraceClock {
                started: from_unix_millis(record.started_ms),
                deadline: from_unix_millis(record.deadline_ms),
                grace_seconds: record.grace_seconds,
            });
        let status = pod
            .status
            .as_ref()
            .and_then(|status| serde_json::to_value(status).ok())
            .unwrap_or_else(|| json!({}));
        let mut conditions = BTreeMap::new();
        for condition in pod
            .status
            .iter()
            .flat_map(|status| status.conditions.iter().flatten())
        {
            if let Some(at) = &condition.last_transition_time {
                conditions.insert(
                    condition.type_.clone(),
                    (condition.status == "True", rfc3339(from_api(&at.0))),
                );
            }
        }
        let (events, inbox) = mpsc::unbounded_channel();
        let saved = adopted.clone();
        let state_writer = state::StateWriter::spawn(dir.clone(), pod_ref.display().to_string());
        Worker {
            pod_ref,
            dir,
            policy,
            containers,
            start_time: adopted.and_then(|state| state.start_time),
            adopted: was_adopted,
            deleted_while_away: was_adopted && pod.metadata.deletion_timestamp.is_some(),
            termination,
            gone: false,
            terminal,
            rejected,
            final_phase: None,
            sandbox_ready: false,
            conditions,
            last_status: Some(projection(&status)),
            status_retry_at: None,
            delete_retry_at: None,
            saved,
            state_writer,
            done: false,
            events,
            inbox,
            shutdown,
            shared,
            pod,
        }
    }

    /// Runs the pod until it is gone or the agent shuts down.
    pub(crate) async fn run(mut self, mut updates: watch::Receiver<PodUpdate>) {
        self.resume_adopted().await;
        loop {
            if self.gone {
                self.kill_now().await;
                break;
            }
            self.sync().await;
            if self.done {
                break;
            }
            let wake = self.next_wake();
            tokio::select! {
                _ = self.shutdown.cancelled() => {
                    self.leave_running().await;
                    return;
                }
                changed = updates.changed() => {
                    if changed.is_err() {
                        // The manager is gone: the agent is stopping.
                        self.leave_running().await;
                        return;
                    }
                    let update = updates.borrow_and_update().clone();
                    match update {
                        PodUpdate::Present(pod) => self.observe(pod),
                        PodUpdate::Gone => self.gone = true,
                    }
                }
                Some(event) = self.inbox.recv() => self.handle(event),
                _ = sleep_until_opt(wake) => {}
            }
        }
        self.shared.logs.forget(
            &self.pod_ref.namespace,
            &self.pod_ref.name,
            &self.pod_ref.uid,
        );
        self.state_writer.close().await;
        if let Err(error) = std::fs::remove_dir_all(&self.dir)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(pod = %self.pod_ref.display(), %error, "cannot remove the pod directory");
        }
        tracing::info!(pod = %self.pod_ref.display(), "pod finished on this node");
    }

    /// Takes a newer version of the pod (by resourceVersion, the store's revision): the
    /// watch may still deliver a version older than a status write's answer.
    fn observe(&mut self, pod: Arc<Pod>) {
        if uid_of(&pod) != self.pod_ref.uid {
            return;
        }
        let version = |pod: &Pod| {
            pod.metadata
                .resource_version
                .as_deref()
                .and_then(|rv| rv.parse::<u64>().ok())
        };
        match (version(&pod), version(&self.pod)) {
            (Some(new), Some(old)) if new < old => {}
            _ => self.pod = pod,
        }
    }

    /// Adopted containers that still run: watch them, and probe them again.
    async fn resume_adopted(&mut self) {
        if !self.adopted {
            return;
        }
        self.sandbox_ready = self.dir.exists();
        for index in 0..self.containers.len() {
            let Some(running) = self.containers[index].running().cloned() else {
                continue;
            };
            tracing::info!(pod = %self.pod_ref.display(), container = %self.containers[index].name,
                pid = running.pid, "adopted a running container");
            let environment = self.environment_of(index).await.unwrap_or_default();
            let rt = &mut self.containers[index];
            rt.env = environment;
            rt.working_dir = working_dir(&rt.spec, &self.dir);
            self.watch_adopted(index, &running);
            self.start_probes(index, true);
        }
    }

    /// The container's environment (for probes and hooks of an adopted container); `None` if
    /// it cannot be resolved now.
    async fn environment_of(&self, index: usize) -> Option<Vec<(String, String)>> {
        let spec = &self.containers[index].spec;
        let host_ip = self.shared.host_ip.clone();
        let facts = PodFacts {
            pod: &self.pod,
            node_name: &self.shared.node_name,
            host_ip: &host_ip,
        };
        let mut sources = Sources::new(&self.shared.client, &self.pod_ref.namespace);
        env::environment(&facts, spec, &mut sources)
            .await
            .ok()
            .map(|environment| environment.pairs())
    }

    fn watch_adopted(&self, index: usize, running: &RunningRecord) {
        let rt = &self.containers[index];
        let events = self.events.clone();
        let (container, instance) = (rt.name.clone(), rt.instance);
        let (pid, ticks) = (running.pid, running.start_ticks);
        let shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(ADOPTED_POLL) => {}
                }
                if !procfs::is_alive(pid, ticks) {
                    runtime::signal_container(pid, ticks, Signal::SIGKILL);
                    let _ = events.send(Event::Exited {
                        container,
                        instance,
                        exit: Exit::Unknown,
                    });
                    return;
                }
            }
        });
    }

    /// At agent shutdown: the processes keep running (the kubelet's behaviour); only the
    /// agent's own helpers stop, and the state is on disk.
    async fn leave_running(&mut self) {
        for rt in &mut self.containers {
            rt.stop_probes();
            if let Some(stop) = &mut rt.stop
                && let Some(hook) = stop.hook.take()
            {
                hook.abort();
            }
        }
        self.persist();
        self.state_writer.close().await;
    }

    fn next_wake(&self) -> Option<Instant> {
        let mut wake: Option<Instant> = None;
        let mut consider = |at: Option<Instant>| {
            if let Some(at) = at {
                wake = Some(wake.map_or(at, |w| w.min(at)));
            }
        };
        for rt in &self.containers {
            consider(rt.restart_at);
            consider(rt.retry_at);
            if let Some(stop) = &rt.stop {
                match stop.term_sent {
                    Some(sent) if !stop.killed => {
                        consider(Some(instant_at(grace::kill_at(stop.deadline, sent))));
                    }
                    None if stop.hook.is_some() => consider(Some(instant_at(stop.deadline))),
                    _ => {}
                }
            }
        }
        consider(self.status_retry_at);
        consider(self.delete_retry_at);
        wake
    }

    async fn sync(&mut self) {
        let deleting = self.pod.metadata.deletion_timestamp.is_some();
        if deleting || self.termination.is_some() {
            self.sync_termination().await;
        } else if self.rejected.is_none() && !self.terminal.load(Ordering::Relaxed) {
            self.sync_containers().await;
        }
        if !self.done {
            self.publish().await;
        }
        self.persist();
    }

    // ---------------------------------------------------------------------------------
    // Running

    async fn sync_containers(&mut self) {
        if !self.ensure_sandbox() {
            return;
        }
        let now = Instant::now();
        let init: Vec<usize> = (0..self.containers.len())
            .filter(|&i| self.containers[i].init)
            .collect();
        for index in init {
            match self.progress(index) {
                Progress::Succeeded => continue,
                Progress::Running => return,
                Progress::Exited(_) => {
                    if self.policy == RestartPolicy::Never {
                        self.terminal.store(true, Ordering::Relaxed);
                    } else {
                        self.restart_if_due(index, now).await;
                    }
                    return;
                }
                Progress::NotStarted => {
                    self.start_if_due(index, now).await;
                    return;
                }
            }
        }
        let app: Vec<usize> = (0..self.containers.len())
            .filter(|&i| !self.containers[i].init)
            .collect();
        for index in app {
            match self.progress(index) {
                Progress::NotStarted => self.start_if_due(index, now).await,
                Progress::Running => {}
                Progress::Succeeded | Progress::Exited(_) => {
                    let code = self.containers[index]
                        .terminated()
                        .map_or(0, |t| t.exit_code);
                    if self.policy.restarts(code) && self.containers[index].stop.is_none() {
                        self.restart_if_due(index, now).await;
                    }
                }
            }
        }
        let (_, app_views) = self.views();
        if status::all_done(self.policy, &app_views) {
            self.terminal.store(true, Ordering::Relaxed);
        }
    }

    fn progress(&self, index: usize) -> Progress {
        match &self.containers[index].record.current {
            None => Progress::NotStarted,
            Some(ContainerRecordState::Running(_)) => Progress::Running,
            Some(ContainerRecordState::Terminated(t)) if t.exit_code == 0 => Progress::Succeeded,
            Some(ContainerRecordState::Terminated(t)) => Progress::Exited(t.exit_code),
        }
    }

    /// The pod's directory (its "sandbox"): working directory, logs and state.
    fn ensure_sandbox(&mut self) -> bool {
        if !self.sandbox_ready {
            if let Err(error) = std::fs::create_dir_all(&self.dir) {
                tracing::warn!(pod = %self.pod_ref.display(), %error,
                    "cannot create the pod directory {}", self.dir.display());
                return false;
            }
            self.sandbox_ready = true;
        }
        if self.start_time.is_none() {
            self.start_time = Some(rfc3339(SystemTime::now()));
        }
        true
    }

    async fn start_if_due(&mut self, index: usize, now: Instant) {
        let rt = &self.containers[index];
        if rt.permanent_error || rt.retry_at.is_some_and(|at| now < at) {
            return;
        }
        self.start(index).await;
    }

    async fn restart_if_due(&mut self, index: usize, now: Instant) {
        let backoff = self.shared.backoff;
        let pod = self.pod_ref.clone();
        let rt = &mut self.containers[index];
        if rt.permanent_error || rt.retry_at.is_some_and(|at| now < at) {
            return;
        }
        if rt.restart_at.is_some_and(|at| now < at) {
            return;
        }
        let finished = rt.finished.unwrap_or(now);
        match backoff.decide(&mut rt.backoff, finished, now) {
            Decision::Wait { until, delay } => {
                rt.restart_at = Some(until);
                let message = format!(
                    "back-off {} restarting failed container={} pod={}",
                    crate::time::go_duration(delay),
                    rt.name,
                    pod.display()
                );
                rt.waiting = Some(("CrashLoopBackOff".to_string(), Some(message)));
                if rt.backoff_reported != Some(rt.record.restart_count) {
                    rt.backoff_reported = Some(rt.record.restart_count);
                    self.shared.recorder.pod(
                        &pod,
                        Some((&rt.name, rt.init)),
                        Kind::Warning,
                        "BackOff",
                        &format!(
                            "Back-off restarting failed container {} in pod {}",
                            rt.name,
                            pod.display()
                        ),
                    );
                }
            }
            Decision::RestartNow => {
                rt.restart_at = None;
                self.start(index).await;
            }
        }
    }

    fn config_error(&mut self, index: usize, error: ConfigError, permanent: bool) {
        let retry = self.shared.backoff.base;
        let rt = &mut self.containers[index];
        let message = error.0;
        let repeated = rt
            .waiting
            .as_ref()
            .is_some_and(|(_, m)| m.as_deref() == Some(message.as_str()));
        rt.waiting = Some((
            "CreateContainerConfigError".to_string(),
            Some(message.clone()),
        ));
        if permanent {
            rt.permanent_error = true;
        } else {
            rt.retry_at = Some(Instant::now() + retry);
        }
        if !repeated {
            tracing::warn!(pod = %self.pod_ref.display(), container = %rt.name, %message,
                "cannot start a container");
            self.shared.recorder.pod(
                &self.pod_ref,
                Some((&rt.name, rt.init)),
                Kind::Warning,
                "Failed",
                &format!("Error: {message}"),
            );
        }
    }

    /// Starts (or restarts) a container's process.
    async fn start(&mut self, index: usize) {
        let spec = self.containers[index].spec.clone();
        let host_ip = self.shared.host_ip.clone();
        let environment = {
            let facts = PodFacts {
                pod: &self.pod,
                node_name: &self.shared.node_name,
                host_ip: &host_ip,
            };
            let mut sources = Sources::new(&self.shared.client, &self.pod_ref.namespace);
            env::environment(&facts, &spec, &mut sources).await
        };
        let environment = match environment {
            Ok(environment) => environment,
            Err(error) => return self.config_error(index, error, false),
        };
        let argv = match env::command_line(&spec, &environment) {
            Ok(argv) => argv,
            Err(error) => return self.config_error(index, error, true),
        };
        let working_dir = working_dir(&spec, &self.dir);
        if let Err(error) = std::fs::create_dir_all(&working_dir) {
            let message = format!(
                "cannot create workingDir {}: {error}",
                working_dir.display()
            );
            return self.config_error(index, ConfigError(message), false);
        }
        let rt = &mut self.containers[index];
        if let Some(previous) = rt.record.current.take() {
            if let ContainerRecordState::Terminated(terminated) = previous {
                rt.record.last_terminated = Some(terminated);
            }
            rt.record.restart_count += 1;
        }
        rt.instance = INSTANCES.fetch_add(1, Ordering::Relaxed);
        rt.waiting = None;
        rt.retry_at = None;
        rt.restart_at = None;
        rt.finished = None;
        rt.adopted = false;
        rt.ready = false;
        rt.started = false;
        rt.env = environment.pairs();
        rt.working_dir = working_dir.clone();
        let log = log_path(&self.dir, &rt.name, rt.record.restart_count);
        let launched = match log.parent().map(std::fs::create_dir_all) {
            Some(Err(error)) => Err(error),
            _ => runtime::start(
                &Launch {
                    argv: &argv,
                    env: &rt.env,
                    working_dir: &working_dir,
                },
                &log,
            ),
        };
        let now = SystemTime::now();
        match launched {
            Ok(started) => {
                let running = RunningRecord {
                    pid: started.pid,
                    start_ticks: started.start_ticks,
                    started_at: rfc3339(now),
                };
                rt.record.current = Some(ContainerRecordState::Running(running));
                let (name, init, instance, pid) =
                    (rt.name.clone(), rt.init, rt.instance, started.pid);
                // Recorded before anything else can happen: a crash from here on leaves a
                // process the next agent knows about.
                self.persist();
                let events = self.events.clone();
                let container = name.clone();
                tokio::spawn(async move {
                    let exit = runtime::wait(started.child, pid).await;
                    let _ = events.send(Event::Exited {
                        container,
                        instance,
                        exit,
                    });
                });
                tracing::info!(pod = %self.pod_ref.display(), container = %name, pid, "started a container");
                let recorder = &self.shared.recorder;
                recorder.pod(
                    &self.pod_ref,
                    Some((&name, init)),
                    Kind::Normal,
                    "Created",
                    &format!("Created container: {name}"),
                );
                recorder.pod(
                    &self.pod_ref,
                    Some((&name, init)),
                    Kind::Normal,
                    "Started",
                    &format!("Started container {name}"),
                );
                self.start_probes(index, false);
            }
            Err(error) => {
                let message = format!(
                    "failed to start container process: exec: {:?}: {error}",
                    argv.first().map(String::as_str).unwrap_or_default()
                );
                rt.record.current = Some(ContainerRecordState::Terminated(Terminated {
                    exit_code: 128,
                    signal: None,
                    reason: "StartError".to_string(),
                    message: Some(message.clone()),
                    started_at: None,
                    finished_at: rfc3339(now),
                    container_id: None,
                }));
                rt.finished = Some(Instant::now());
                let (name, init) = (rt.name.clone(), rt.init);
                tracing::warn!(pod = %self.pod_ref.display(), container = %name, %message, "cannot start a container");
                self.shared.recorder.pod(
                    &self.pod_ref,
                    Some((&name, init)),
                    Kind::Warning,
                    "Failed",
                    &format!("Error: {message}"),
                );
                self.persist();
            }
        }
    }

    /// Starts the probe task of a running container; without probes it is started and ready
    /// at once (readiness only after a startup probe passed).
    fn start_probes(&mut self, index: usize, adopted: bool) {
        let rt = &mut self.containers[index];
        let spec = &rt.spec;
        // Init containers are not probed (upstream rejects probes on them).
        let (startup, readiness, liveness) = if rt.init {
            (None, None, None)
        } else {
            (
                spec.startup_probe.clone(),
                spec.readiness_probe.clone(),
                spec.liveness_probe.clone(),
            )
        };
        rt.started = startup.is_none();
        rt.ready = rt.started && readiness.is_none();
        if startup.is_none() && readiness.is_none() && liveness.is_none() {
            return;
        }
        let cancel = CancellationToken::new();
        rt.probes = Some(cancel.clone());
        let events = self.events.clone();
        let (container, instance) = (rt.name.clone(), rt.instance);
        let report = Arc::new(move |report: ProbeReport| {
            let _ = events.send(Event::Probe {
                container: container.clone(),
                instance,
                report,
            });
        });
        let target = Target {
            pod: self.pod_ref.clone(),
            container: rt.name.clone(),
            init: rt.init,
            startup,
            readiness,
            liveness,
            ports: spec.ports.clone().unwrap_or_default(),
            env: rt.env.clone(),
            working_dir: rt.working_dir.clone(),
            pod_ip: self.shared.host_ip.clone(),
            // An adopted container's initial delays are long over.
            started: if adopted {
                Instant::now() - Duration::from_secs(3600)
            } else {
                Instant::now()
            },
        };
        self.shared.prober.spawn(target, report, cancel);
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Exited {
                container,
                instance,
                exit,
            } => self.exited(&container, instance, exit),
            Event::Probe {
                container,
                instance,
                report,
            } => self.probed(&container, instance, report),
            Event::HookDone {
                container,
                instance,
                failure,
            } => {
                let Some(rt) = self
                    .containers
                    .iter_mut()
                    .find(|rt| rt.name == container && rt.instance == instance)
                else {
                    return;
                };
                if let Some(stop) = &mut rt.stop {
                    stop.hook = None;
                }
                if let Some(failure) = failure {
                    tracing::warn!(pod = %self.pod_ref.display(), container = %rt.name, %failure, "PreStop hook failed");
                    // Upstream leaves the hook's output out of the Event (it may hold secrets).
                    self.shared.recorder.pod(
                        &self.pod_ref,
                        Some((&rt.name, rt.init)),
                        Kind::Warning,
                        "FailedPreStopHook",
                        "PreStopHook failed",
                    );
                }
            }
        }
    }

    fn exited(&mut self, container: &str, instance: u64, exit: Exit) {
        let Some(rt) = self
            .containers
            .iter_mut()
            .find(|rt| rt.name == container && rt.instance == instance)
        else {
            return;
        };
        let Some(running) = rt.running().cloned() else {
            return;
        };
        let terminated = match exit {
            Exit::Unknown => Terminated {
                exit_code: 137,
                signal: None,
                reason: "ContainerStatusUnknown".to_string(),
                message: Some(STATUS_UNKNOWN_MESSAGE.to_string()),
                started_at: Some(running.started_at.clone()),
                finished_at: rfc3339(SystemTime::now()),
                container_id: Some(container_id(running.pid)),
            },
            exit => Terminated {
                exit_code: exit.exit_code(),
                signal: match exit {
                    Exit::Signal(signal) => Some(signal),
                    _ => None,
                },
                reason: Terminated::reason_for(exit.exit_code()).to_string(),
                message: None,
                started_at: Some(running.started_at.clone()),
                finished_at: rfc3339(SystemTime::now()),
                container_id: Some(container_id(running.pid)),
            },
        };
        tracing::info!(pod = %self.pod_ref.display(), container, pid = running.pid,
            exit_code = terminated.exit_code, reason = %terminated.reason, "container exited");
        rt.record.current = Some(ContainerRecordState::Terminated(terminated));
        rt.finished = Some(Instant::now());
        rt.ready = false;
        rt.started = false;
        rt.adopted = false;
        rt.stop_probes();
        if let Some(stop) = rt.stop.take()
            && let Some(hook) = stop.hook
        {
            hook.abort();
        }
        self.persist();
    }

    fn probed(&mut self, container: &str, instance: u64, report: ProbeReport) {
        let terminating = self.termination.is_some();
        let Some(index) = self
            .containers
            .iter()
            .position(|rt| rt.name == container && rt.instance == instance)
        else {
            return;
        };
        let rt = &mut self.containers[index];
        if rt.running().is_none() {
            return;
        }
        let (which, message) = match report {
            ProbeReport::Started => {
                rt.started = true;
                if rt.spec.readiness_probe.is_none() {
                    rt.ready = true;
                }
                return;
            }
            ProbeReport::Ready(ready) => {
                rt.ready = ready && rt.started;
                return;
            }
            ProbeReport::LivenessFailed(message) => ("liveness", message),
            ProbeReport::StartupFailed(message) => ("startup", message),
        };
        if terminating || rt.stop.is_some() {
            return;
        }
        tracing::info!(pod = %self.pod_ref.display(), container, %message,
            "container failed its {which} probe; killing it");
        rt.stop_probes();
        rt.ready = false;
        let probe = if which == "liveness" {
            rt.spec.liveness_probe.as_ref()
        } else {
            rt.spec.startup_probe.as_ref()
        };
        // The probe's own grace, else the pod's (as `setTerminationGracePeriod`).
        let grace = probe
            .and_then(|probe| probe.termination_grace_period_seconds)
            .unwrap_or_else(|| termination_grace(&self.pod));
        let (name, init) = (rt.name.clone(), rt.init);
        self.shared.recorder.pod(
            &self.pod_ref,
            Some((&name, init)),
            Kind::Normal,
            "Killing",
            &format!("Container {name} failed {which} probe, will be restarted"),
        );
        let now = SystemTime::now();
        let deadline = now + Duration::from_secs(u64::try_from(grace.max(0)).unwrap_or(0));
        self.begin_stop(index, deadline, false, now);
        self.drive_stops(now);
    }

    // ---------------------------------------------------------------------------------
    // Stopping

    /// Starts stopping a running container: its preStop hook (if time is left), then
    /// `SIGTERM` (from [`Self::drive_stops`]).
    fn begin_stop(
        &mut self,
        index: usize,
        deadline: SystemTime,
        pod_termination: bool,
        now: SystemTime,
    ) {
        let hook = self.containers[index]
            .spec
            .lifecycle
            .as_ref()
            .and_then(|lifecycle| lifecycle.pre_stop.clone());
        let budget = deadline.duration_since(now).unwrap_or(Duration::ZERO);
        let hook = match hook {
            Some(handler) if !budget.is_zero() && !self.containers[index].init => {
                Some(self.spawn_hook(index, handler, budget))
            }
            _ => None,
        };
        self.containers[index].stop = Some(Stop {
            deadline,
            pod_termination,
            hook,
            term_sent: None,
            killed: false,
        });
    }

    fn spawn_hook(
        &self,
        index: usize,
        handler: LifecycleHandler,
        budget: Duration,
    ) -> tokio::task::AbortHandle {
        let rt = &self.containers[index];
        let events = self.events.clone();
        let (container, instance) = (rt.name.clone(), rt.instance);
        let env = rt.env.clone();
        let working_dir = rt.working_dir.clone();
        let ports = rt.spec.ports.clone().unwrap_or_default();
        let prober = self.shared.prober.clone();
        let pod_ip = self.shared.host_ip.clone();
        let task = tokio::spawn(async move {
            let failure = if let Some(exec) = &handler.exec {
                let argv = exec.command.clone().unwrap_or_default();
                let launch = Launch {
                    argv: &argv,
                    env: &env,
                    working_dir: &working_dir,
                };
                let result = runtime::exec(&launch, budget).await;
                match result.outcome {
                    ExecOutcome::Exited(0) => None,
                    ExecOutcome::Exited(code) => Some(format!(
                        "command {:?} exited with {code}: {}",
                        argv.join(" "),
                        result.output.trim_end()
                    )),
                    ExecOutcome::TimedOut => Some(format!(
                        "command {:?} did not finish in the grace period",
                        argv.join(" ")
                    )),
                    ExecOutcome::FailedToStart(error) => Some(error),
                }
            } else if let Some(http) = &handler.http_get {
                prober.http_get(http, &ports, &pod_ip, budget).await.err()
            } else if let Some(sleep) = &handler.sleep {
                let wanted = Duration::from_secs(u64::try_from(sleep.seconds.max(0)).unwrap_or(0));
                tokio::time::sleep(wanted.min(budget)).await;
                None
            } else {
                Some("the preStop hook has no handler the process runtime runs".to_string())
            };
            let _ = events.send(Event::HookDone {
                container,
                instance,
                failure,
            });
        });
        task.abort_handle()
    }

    /// Sends `SIGTERM` to containers whose hook is done and `SIGKILL` to those past their
    /// deadline.
    fn drive_stops(&mut self, now: SystemTime) {
        for rt in &mut self.containers {
            let Some(running) = rt.running().cloned() else {
                continue;
            };
            let Some(stop) = &mut rt.stop else {
                continue;
            };
            if stop.hook.is_some() {
                if now < stop.deadline {
                    continue;
                }
                // The hook ran out of grace: it is abandoned (its processes killed).
                if let Some(hook) = stop.hook.take() {
                    hook.abort();
                }
                tracing::info!(container = %rt.name, "the preStop hook did not finish within the grace period");
            }
            match stop.term_sent {
                None => {
                    tracing::info!(container = %rt.name, pid = running.pid, "SIGTERM");
                    runtime::signal_container(running.pid, running.start_ticks, Signal::SIGTERM);
                    stop.term_sent = Some(now);
                }
                Some(sent) if !stop.killed && now >= grace::kill_at(stop.deadline, sent) => {
                    tracing::info!(container = %rt.name, pid = running.pid, "SIGKILL: the grace period is over");
                    runtime::signal_container(running.pid, running.start_ticks, Signal::SIGKILL);
                    stop.killed = true;
                }
                _ => {}
            }
        }
    }

    // ---------------------------------------------------------------------------------
    // Termination

    async fn sync_termination(&mut self) {
        let now = SystemTime::now();
        let grace = deletion_grace(&self.pod);
        match &mut self.termination {
            Some(clock) => {
                if clock.shorten(now, grace) {
                    tracing::info!(pod = %self.pod_ref.display(), grace,
                        "the grace period was shortened");
                    let deadline = clock.deadline;
                    for rt in &mut self.containers {
                        if let Some(stop) = &mut rt.stop
                            && stop.pod_termination
                        {
                            stop.deadline = stop.deadline.min(deadline);
                        }
                    }
                }
            }
            None => self.begin_termination(now, grace),
        }
        // A container whose stop began under an earlier agent (or a liveness kill) is now
        // stopped as part of the pod, with the pod's deadline.
        let deadline = self.termination.map(|clock| clock.deadline);
        let mut fresh = Vec::new();
        for (index, rt) in self.containers.iter_mut().enumerate() {
            // Nothing is (re)started any more: a container waiting to restart reports how
            // its last run ended.
            rt.restart_at = None;
            rt.retry_at = None;
            if rt.terminated().is_some() {
                rt.waiting = None;
            }
            if rt.running().is_none() {
                continue;
            }
            match &mut rt.stop {
                Some(stop) => {
                    if let Some(deadline) = deadline {
                        stop.deadline = stop.deadline.min(deadline);
                        stop.pod_termination = true;
                    }
                }
                None => fresh.push(index),
            }
        }
        if let Some(deadline) = deadline {
            for index in fresh {
                let name = self.containers[index].name.clone();
                let init = self.containers[index].init;
                self.containers[index].stop_probes();
                self.shared.recorder.pod(
                    &self.pod_ref,
                    Some((&name, init)),
                    Kind::Normal,
                    "Killing",
                    &format!("Stopping container {name}"),
                );
                self.begin_stop(index, deadline, true, now);
            }
        }
        self.drive_stops(now);
        let busy = self
            .containers
            .iter()
            .any(|rt| rt.running().is_some() || rt.stop.as_ref().is_some_and(|s| s.hook.is_some()));
        if busy {
            return;
        }
        self.finish_termination().await;
    }

    fn begin_termination(&mut self, now: SystemTime, grace: i64) {
        let clock = if self.deleted_while_away {
            // Deleted while the agent was down (no termination was recorded): the API
            // server's deadline, not a fresh clock.
            match self.pod.metadata.deletion_timestamp.as_ref() {
                Some(timestamp) => GraceClock::resumed(from_api(&timestamp.0), grace),
                None => GraceClock::start(now, grace),
            }
        } else {
            GraceClock::start(now, grace)
        };
        tracing::info!(pod = %self.pod_ref.display(), grace,
            deadline_in = ?clock.deadline.duration_since(now).unwrap_or_default(),
            "terminating the pod");
        self.termination = Some(clock);
        self.persist();
    }

    /// Every process is gone: write the terminal status, then confirm the deletion.
    async fn finish_termination(&mut self) {
        if self.final_phase.is_none() {
            let (mut init, mut app) = self.views();
            status::terminate_unknown(&mut init, &mut app, &rfc3339(SystemTime::now()));
            let api_phase = self.api_phase();
            let phase = match api_phase {
                Some(phase) if phase.is_terminal() => phase,
                _ => match status::phase(self.policy, &init, &app, true) {
                    Phase::Pending | Phase::Running => Phase::Failed,
                    phase => phase,
                },
            };
            self.final_phase = Some(phase);
            self.sandbox_ready = false;
            self.terminal.store(true, Ordering::Relaxed);
        }
        if self.delete_retry_at.is_some_and(|at| Instant::now() < at) {
            return;
        }
        // The status first, as the kubelet's status manager: the pod's last word on the
        // node is in the API before it goes.
        if !self.publish().await {
            return;
        }
        let api: Api<Pod> = Api::namespaced(self.shared.client.clone(), &self.pod_ref.namespace);
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(self.pod_ref.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match bounded(api.delete(&self.pod_ref.name, &params)).await {
            Ok(_) => {
                tracing::info!(pod = %self.pod_ref.display(), "deleted the pod (grace 0)");
                self.done = true;
            }
            Err(error) if error.is_not_found() || error.is_conflict() => {
                tracing::info!(pod = %self.pod_ref.display(), %error, "the pod is already gone");
                self.done = true;
            }
            Err(error) => {
                tracing::warn!(pod = %self.pod_ref.display(), %error, "cannot delete the pod; retrying");
                self.delete_retry_at = Some(Instant::now() + RETRY);
            }
        }
    }

    /// The pod is gone from the API: `SIGKILL` everything now and wait for it to die.
    async fn kill_now(&mut self) {
        let mut running = false;
        for rt in &mut self.containers {
            rt.stop_probes();
            if let Some(stop) = &mut rt.stop
                && let Some(hook) = stop.hook.take()
            {
                hook.abort();
            }
            if let Some(process) = rt.running() {
                tracing::info!(pod = %self.pod_ref.display(), container = %rt.name, pid = process.pid,
                    "the pod is gone from the API: SIGKILL");
                runtime::signal_container(process.pid, process.start_ticks, Signal::SIGKILL);
                running = true;
            }
        }
        if running {
            let deadline = Instant::now() + KILL_WAIT;
            while self.containers.iter().any(|rt| rt.running().is_some()) {
                tokio::select! {
                    Some(event) = self.inbox.recv() => self.handle(event),
                    _ = tokio::time::sleep_until(deadline) => {
                        tracing::error!(pod = %self.pod_ref.display(),
                            "processes did not die within {KILL_WAIT:?} of SIGKILL");
                        break;
                    }
                }
            }
        }
        self.done = true;
    }

    // ---------------------------------------------------------------------------------
    // Status

    fn api_phase(&self) -> Option<Phase> {
        Phase::parse(
            self.pod
                .status
                .as_ref()
                .and_then(|status| status.phase.as_deref()),
        )
    }

    fn views(&self) -> (Vec<ContainerView>, Vec<ContainerView>) {
        let has_init = self.containers.iter().any(|rt| rt.init);
        let initialized = self
            .containers
            .iter()
            .filter(|rt| rt.init)
            .all(|rt| rt.terminated().is_some_and(|t| t.exit_code == 0));
        let default_waiting = if has_init && !initialized {
            "PodInitializing"
        } else {
            "ContainerCreating"
        };
        let mut init = Vec::new();
        let mut app = Vec::new();
        for rt in &self.containers {
            let waiting = |reason: &str| StateView::Waiting {
                reason: reason.to_string(),
                message: None,
            };
            let (state, last_terminated, container_id) = match &rt.record.current {
                None => {
                    let state = match &rt.waiting {
                        Some((reason, message)) => StateView::Waiting {
                            reason: reason.clone(),
                            message: message.clone(),
                        },
                        None => waiting(default_waiting),
                    };
                    (state, rt.record.last_terminated.clone(), None)
                }
                Some(ContainerRecordState::Running(running)) => (
                    StateView::Running {
                        started_at: running.started_at.clone(),
                    },
                    rt.record.last_terminated.clone(),
                    Some(container_id(running.pid)),
                ),
                Some(ContainerRecordState::Terminated(terminated)) => {
                    match (
                        &rt.waiting,
                        rt.restart_at.is_some() && self.termination.is_none(),
                    ) {
                        // Waiting to run again: the run that just ended is the last state.
                        (Some((reason, message)), _) => (
                            StateView::Waiting {
                                reason: reason.clone(),
                                message: message.clone(),
                            },
                            Some(terminated.clone()),
                            terminated.container_id.clone(),
                        ),
                        (None, true) => (
                            waiting("CrashLoopBackOff"),
                            Some(terminated.clone()),
                            terminated.container_id.clone(),
                        ),
                        (None, false) => (
                            StateView::Terminated(terminated.clone()),
                            rt.record.last_terminated.clone(),
                            terminated.container_id.clone(),
                        ),
                    }
                }
            };
            let running = matches!(state, StateView::Running { .. });
            let view = ContainerView {
                name: rt.name.clone(),
                image: rt.spec.image.clone().unwrap_or_default(),
                state,
                last_terminated,
                restart_count: rt.record.restart_count,
                ready: running && rt.ready,
                started: running && rt.started,
                container_id,
            };
            if rt.init {
                init.push(view);
            } else {
                app.push(view);
            }
        }
        (init, app)
    }

    fn compute_status(&mut self) -> Value {
        let now = rfc3339(SystemTime::now());
        let host_ip = self.shared.host_ip.clone();
        if let Some((reason, message)) = &self.rejected {
            return json!({
                "phase": "Failed",
                "reason": reason,
                "message": message,
                "startTime": self.start_time.clone().unwrap_or_else(|| now.clone()),
            });
        }
        let (mut init, mut app) = self.views();
        if self.final_phase.is_some() {
            status::terminate_unknown(&mut init, &mut app, &now);
        }
        let phase = match (self.final_phase, self.api_phase()) {
            (Some(phase), _) => phase,
            // A terminal phase is never left, as upstream.
            (None, Some(api)) if api.is_terminal() => api,
            (None, _) => status::phase(self.policy, &init, &app, false),
        };
        if phase.is_terminal() {
            self.terminal.store(true, Ordering::Relaxed);
        }
        let conditions = status::conditions(&init, &app, phase, self.sandbox_ready);
        let conditions = status::stamp_conditions(&conditions, &mut self.conditions, &now);
        let mut status = json!({
            "phase": phase.as_str(),
            "conditions": conditions,
            // Processes share the host's network: the pod's IP is the node's.
            "hostIP": host_ip,
            "hostIPs": [{ "ip": host_ip }],
            "podIP": host_ip,
            "podIPs": [{ "ip": host_ip }],
            "containerStatuses": app.iter().map(ContainerView::to_json).collect::<Vec<_>>(),
        });
        if let Some(start_time) = &self.start_time {
            status["startTime"] = json!(start_time);
        }
        if !init.is_empty() {
            status["initContainerStatuses"] =
                json!(init.iter().map(ContainerView::to_json).collect::<Vec<_>>());
        }
        status
    }

    /// Publishes what the log endpoint needs, and writes the status if it changed. Returns
    /// whether the API holds the current status.
    async fn publish(&mut self) -> bool {
        self.publish_logs();
        if self.status_retry_at.is_some_and(|at| Instant::now() < at) {
            return false;
        }
        let status = self.compute_status();
        let projected = projection(&status);
        if self.last_status.as_ref() == Some(&projected) {
            return true;
        }
        // What the API is told, the disk holds first: a process reported running is one a
        // restarted agent can adopt.
        self.state_writer.settled().await;
        let api: Api<Pod> = Api::namespaced(self.shared.client.clone(), &self.pod_ref.namespace);
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PatchParams::default()
        };
        let patch = json!({ "status": status });
        match bounded(api.patch_status(&self.pod_ref.name, &params, &Patch::Strategic(&patch)))
            .await
        {
            Ok(pod) => {
                // What the API now holds (it may merge in what others wrote).
                self.observe(Arc::new(pod));
                self.last_status = Some(projected);
                self.status_retry_at = None;
                true
            }
            Err(error) if error.is_not_found() => {
                // Gone: the watch will say so.
                self.status_retry_at = Some(Instant::now() + RETRY);
                false
            }
            Err(error) => {
                tracing::warn!(pod = %self.pod_ref.display(), %error, "cannot write the pod status; retrying");
                self.status_retry_at = Some(Instant::now() + RETRY);
                false
            }
        }
    }

    fn publish_logs(&self) {
        let containers = self
            .containers
            .iter()
            .map(|rt| ContainerLogs {
                name: rt.name.clone(),
                restart_count: rt.record.restart_count,
                started: rt.record.current.is_some()
                    && !matches!(
                        rt.terminated(),
                        Some(Terminated { reason, .. }) if reason == "StartError"
                    ),
                running: rt.running().is_some(),
                waiting_reason: rt.waiting.as_ref().map(|(reason, _)| reason.clone()),
            })
            .collect();
        self.shared.logs.publish(
            &self.pod_ref.namespace,
            &self.pod_ref.name,
            PodLogs {
                uid: self.pod_ref.uid.clone(),
                dir: self.dir.clone(),
                containers,
            },
        );
    }

    // ---------------------------------------------------------------------------------
    // Persistence

    fn persist(&mut self) {
        if !self.dir.exists() {
            return;
        }
        let mut state = PodState::new(
            &self.pod_ref.uid,
            &self.pod_ref.namespace,
            &self.pod_ref.name,
        );
        state.start_time = self.start_time.clone();
        state.containers = self
            .containers
            .iter()
            .map(|rt| (rt.name.clone(), rt.record.clone()))
            .collect();
        state.termination = self.termination.map(|clock| TerminationRecord {
            started_ms: to_unix_millis(clock.started),
            deadline_ms: to_unix_millis(clock.deadline),
            grace_seconds: clock.grace_seconds,
        });
        if self.saved.as_ref() == Some(&state) {
            return;
        }
        self.state_writer.save(state.clone());
        self.saved = Some(state);
    }
}

fn container_id(pid: i32) -> String {
    format!("process://{pid}")
}

/// `workingDir`, or the pod's directory.
fn working_dir(spec: &Container, pod_dir: &std::path::Path) -> PathBuf {
    spec.working_dir
        .as_deref()
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| pod_dir.to_path_buf())
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_projection_keeps_only_what_the_agent_writes() {
        let status = json!({
            "phase": "Running",
            "qosClass": "BestEffort",
            "conditions": [
                {"type": "Ready", "status": "True", "lastProbeTime": null,
                 "lastTransitionTime": "t"},
                {"type": "PodScheduled", "status": "True"},
                {"type": "Initialized", "status": "True", "lastTransitionTime": "t"},
            ],
            "hostIP": "127.0.0.1",
        });
        assert_eq!(
            projection(&status),
            json!({
                "phase": "Running",
                "hostIP": "127.0.0.1",
                "conditions": [
                    {"type": "Initialized", "status": "True", "lastTransitionTime": "t"},
                    {"type": "Ready", "status": "True", "lastTransitionTime": "t"},
                ],
            })
        );
    }
}
