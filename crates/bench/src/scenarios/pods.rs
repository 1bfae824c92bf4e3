//! `pods`: the node agent (issue 15's figures). A `finale server` (with
//! `--node-monitor-grace-period 4s --node-monitor-period 500ms`) and a separate `finale node`
//! child process per run, against the same processes started and stopped by the harness
//! itself, in the same run:
//!
//! 1. **N Pods created → all Running.** N Pods bound to the agent's Node (`spec.nodeName`
//!    set, no scheduler), created by 16 concurrent clients; each Pod's clock runs from its
//!    create call to the first watch event that shows it `phase: Running`, and the batch's
//!    from the first create to the last such event. A second batch leaves `nodeName` empty,
//!    so the in-process scheduler binds it (same clocks). Baseline: the same command spawned
//!    N times by the harness (`tokio::process`, environment cleared but `PATH`, stdout and
//!    stderr to a log file, each in its own process group), one after another; each
//!    process's clock runs from its spawn call until the spawn returned (the `exec`
//!    succeeded) and `kill(pid, 0)` finds it alive — exactly what the agent knows when it
//!    reports Running.
//! 2. **N Pods deleted → all gone.** The first batch deleted by 16 concurrent clients with
//!    the default grace period (30 s); the container exits at once on `SIGTERM`. Each Pod's
//!    clock runs from its delete call to its `DELETED` watch event, after the agent's
//!    `SIGTERM` to the process group, the process's exit, the terminal status and the agent's
//!    `DELETE` with grace 0. Baseline: `SIGTERM` to each directly spawned process group, each
//!    clock from its `killpg` until the harness reaped the process.
//! 3. **Node failure → Pods not ready.** With the second batch Running and Ready, the harness
//!    `SIGKILL`s the agent just after a watch shows it renewed its Lease (it renews every
//!    second, `--node-lease-duration-seconds 4`), then times each Pod's watch event with
//!    `Ready=False` and the Node's `Ready=Unknown`. Baseline: a shell loop that touches a
//!    heartbeat file every second, killed (`SIGKILL`) just after a touch, and a watcher in
//!    the harness that polls the file's mtime every 500 ms and declares it dead when it saw
//!    no change for 4 s of its own clock — the node lifecycle controller's algorithm with
//!    its timings (the watcher's phase against the loop is spread over the poll period from
//!    run to run, see [`watcher_phase`]). Both sides contain the grace period, so the ratio
//!    compares the machinery.
//!
//! Every wait is bounded; every child (server, agents, direct processes) is killed and
//! reaped on drop; the agent's pods are killed by their working directory (under the
//! agent's `--root-dir`) when the agent is dropped, and after the node-failure figure, whose
//! pods the dead agent can no longer stop.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use finale_operator::client::{Clients, Environment, load_config};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use kube::{Resource, ResourceExt};
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde::de::DeserializeOwned;
use serde_json::json;
use tokio::io::AsyncBufReadExt;
use tokio::sync::mpsc;

use crate::disk::probe_fdatasync;
use crate::finale::{cpu_seconds, locate_binary};
use crate::report::{Figure, Goal, Report, Unit};
use crate::scenarios::Settings;
use crate::stats::{median, percentile};

const SCENARIO: &str = "pods";
const NAMESPACE: &str = "bench-pods";
/// Create and delete calls in flight at once.
const CONCURRENCY: usize = 16;
/// The node lifecycle controller's timing, and the baseline watcher's.
const GRACE: Duration = Duration::from_secs(4);
const MONITOR_PERIOD: Duration = Duration::from_millis(500);
/// The agent's Lease duration: it renews every quarter of it, i.e. every second, as the
/// baseline's heartbeat loop touches its file.
const LEASE_SECONDS: u32 = 4;
/// Each container, on both sides: exits 0 at once on `SIGTERM` (the group's `sleep` dies of
/// it too), and forks one `sleep` a second while it runs. It creates [`STARTED`] in its
/// working directory once its trap is set: before that, `SIGTERM` would kill the shell rather
/// than run the trap, so the baseline waits for it (untimed) before it sends any.
const SCRIPT: &str = "trap 'exit 0' TERM; : > started; while :; do sleep 1; done";
const STARTED: &str = "started";
const SHELL: &str = "/bin/sh";
/// The containers' whole environment, on both sides.
const PATH_ENV: &str = "/usr/local/bin:/usr/bin:/bin";
/// How long an agent may take to print its banner, and its Node to become Ready.
const AGENT_START: Duration = Duration::from_secs(60);
/// How often a watch may be re-opened after its stream ended, per watch.
const MAX_REOPENS: usize = 10;
/// Beats the baseline heartbeat loop makes before it is killed.
const BEATS_BEFORE_KILL: usize = 3;

/// The bound on one batch of `pods` Pods: generous (a healthy agent runs 100 in a few
/// seconds), but finite, so a stuck agent or server cannot hang the harness.
fn limit_for(pods: u64) -> Duration {
    Duration::from_secs(60) + Duration::from_millis(pods.saturating_mul(100))
}

/// One batch: the time from the first call to the last completion, and each item's latency.
#[derive(Clone, Debug, Default)]
struct Batch {
    total: Duration,
    per_item_ms: Vec<f64>,
    /// From the first call until every create or delete call was answered (Finale only).
    calls: Option<Duration>,
}

impl Batch {
    /// From the start instants and completion instants of the same keys.
    fn from_instants(
        started: Instant,
        starts: &HashMap<String, Instant>,
        done: &HashMap<String, Instant>,
    ) -> anyhow::Result<Batch> {
        let mut per_item_ms = Vec::with_capacity(done.len());
        let mut last = started;
        for (name, at) in done {
            let start = starts
                .get(name)
                .with_context(|| format!("{name} completed but was never started"))?;
            per_item_ms.push(at.saturating_duration_since(*start).as_secs_f64() * 1e3);
            last = last.max(*at);
        }
        Ok(Batch {
            total: last.saturating_duration_since(started),
            per_item_ms,
            calls: None,
        })
    }

    fn total_ms(&self) -> f64 {
        self.total.as_secs_f64() * 1e3
    }

    fn quantile(&self, q: f64) -> Option<f64> {
        percentile(&self.per_item_ms, q)
    }

    fn summary(&self) -> String {
        let ms = |v: Option<f64>| v.map_or_else(|| "-".into(), |v| format!("{v:.1} ms"));
        let calls = self.calls.map_or_else(String::new, |calls| {
            format!(
                " (calls all answered at {:.1} ms)",
                calls.as_secs_f64() * 1e3
            )
        });
        format!(
            "all {:.1} ms{calls}, per item p50 {}, p99 {}, max {}",
            self.total_ms(),
            ms(self.quantile(0.5)),
            ms(self.quantile(0.99)),
            ms(self.quantile(1.0)),
        )
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "total_ms": self.total_ms(),
            "p50_ms": self.quantile(0.5),
            "p99_ms": self.quantile(0.99),
            "max_ms": self.quantile(1.0),
            "calls_answered_ms": self.calls.map(|calls| calls.as_secs_f64() * 1e3),
            "items": self.per_item_ms.len(),
        })
    }
}

/// The rows of one batch figure: total, per-item p50 and p99.
struct BatchFigures {
    total: Figure,
    p50: Figure,
    p99: Figure,
}

impl BatchFigures {
    fn new(what: &str, item: &str, baseline: &str, goal: bool) -> BatchFigures {
        let figure = |name: String| Figure::new(SCENARIO, &name, Unit::Millis, baseline);
        let mut total = figure(format!("{what}, all (ms)"));
        let mut p50 = figure(format!("{what}, {item} p50 (ms)"));
        if goal {
            total = total.with_goal(Goal::RatioAtMost(2.0));
            p50 = p50.with_goal(Goal::RatioAtMost(2.0));
        }
        BatchFigures {
            total,
            p50,
            p99: figure(format!("{what}, {item} p99 (ms)")),
        }
    }

    fn push(&mut self, finale: bool, batch: &Batch) {
        let values = [
            Some(batch.total_ms()),
            batch.quantile(0.5),
            batch.quantile(0.99),
        ];
        for (figure, value) in [&mut self.total, &mut self.p50, &mut self.p99]
            .into_iter()
            .zip(values)
        {
            let target = if finale {
                &mut figure.finale
            } else {
                &mut figure.baseline
            };
            target.extend(value);
        }
    }

    fn into_figures(self) -> [Figure; 3] {
        [self.total, self.p50, self.p99]
    }
}

/// What a watch event said, and when the harness received it.
#[derive(Debug)]
struct Seen<T> {
    at: Instant,
    kind: EventKind,
    name: String,
    value: T,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EventKind {
    Added,
    Modified,
    Deleted,
}

/// A watch read by its own task, which stamps each event when it arrives, so a busy harness
/// does not delay the clock. The stream is re-opened from the last resourceVersion if it ends
/// (at most [`MAX_REOPENS`] times). Dropping it stops the task.
struct Watch<T> {
    events: mpsc::UnboundedReceiver<anyhow::Result<Seen<T>>>,
    task: tokio::task::JoinHandle<()>,
}

impl<T> Drop for Watch<T> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl<T: Send + 'static> Watch<T> {
    /// Lists (to learn the resourceVersion), then watches from there: every change after the
    /// list is seen, and nothing before it.
    async fn open<K>(
        api: Api<K>,
        labels: Option<&str>,
        fields: Option<&str>,
        summarize: fn(&K) -> T,
    ) -> anyhow::Result<Watch<T>>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    {
        let mut list = ListParams::default();
        let mut params = WatchParams::default().timeout(290);
        params.bookmarks = true;
        if let Some(labels) = labels {
            list = list.labels(labels);
            params = params.labels(labels);
        }
        if let Some(fields) = fields {
            list = list.fields(fields);
            params = params.fields(fields);
        }
        let mut version = api
            .list_metadata(&list)
            .await
            .context("list before the watch")?
            .metadata
            .resource_version
            .context("the list has no resourceVersion")?;
        let mut stream = Box::pin(api.watch(&params, &version).await.context("open a watch")?);
        let (sender, events) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            let mut reopened = 0;
            loop {
                while let Some(item) = stream.next().await {
                    let at = Instant::now();
                    let (kind, object) = match item {
                        Ok(WatchEvent::Added(object)) => (EventKind::Added, object),
                        Ok(WatchEvent::Modified(object)) => (EventKind::Modified, object),
                        Ok(WatchEvent::Deleted(object)) => (EventKind::Deleted, object),
                        Ok(WatchEvent::Bookmark(bookmark)) => {
                            version = bookmark.metadata.resource_version;
                            continue;
                        }
                        Ok(WatchEvent::Error(status)) => {
                            let _ = sender.send(Err(anyhow::anyhow!(
                                "the watch failed: {} {}",
                                status.code,
                                status.message
                            )));
                            return;
                        }
                        Err(error) => {
                            let _ = sender.send(Err(
                                anyhow::Error::new(error).context("read the watch stream")
                            ));
                            return;
                        }
                    };
                    if let Some(seen) = object.meta().resource_version.clone() {
                        version = seen;
                    }
                    let seen = Seen {
                        at,
                        kind,
                        name: object.name_any(),
                        value: summarize(&object),
                    };
                    if sender.send(Ok(seen)).is_err() {
                        return;
                    }
                }
                reopened += 1;
                if reopened > MAX_REOPENS {
                    let _ = sender.send(Err(anyhow::anyhow!(
                        "the watch ended {MAX_REOPENS} times; giving up"
                    )));
                    return;
                }
                match api.watch(&params, &version).await {
                    Ok(next) => stream = Box::pin(next),
                    Err(error) => {
                        let _ = sender
                            .send(Err(anyhow::Error::new(error).context("re-open the watch")));
                        return;
                    }
                }
            }
        });
        Ok(Watch { events, task })
    }

    /// The next event, or an error at `deadline`.
    async fn next(&mut self, deadline: Instant, what: &str) -> anyhow::Result<Seen<T>> {
        match tokio::time::timeout_at(deadline.into(), self.events.recv()).await {
            Err(_) => bail!("timed out waiting for {what}"),
            Ok(None) => bail!("the watch task ended while waiting for {what}"),
            Ok(Some(event)) => event,
        }
    }

    /// Discards what has arrived so far (failing on a watch error).
    fn drain(&mut self) -> anyhow::Result<()> {
        while let Ok(event) = self.events.try_recv() {
            event?;
        }
        Ok(())
    }
}

/// What the harness reads of a Pod.
#[derive(Clone, Debug, Default)]
struct PodView {
    phase: Option<String>,
    ready: Option<bool>,
}

fn pod_view(pod: &Pod) -> PodView {
    let status = pod.status.as_ref();
    PodView {
        phase: status.and_then(|s| s.phase.clone()),
        ready: status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|conditions| conditions.iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.status == "True"),
    }
}

fn node_ready(node: &Node) -> Option<String> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.clone())
}

fn lease_renewed(lease: &Lease) -> Option<String> {
    lease
        .spec
        .as_ref()?
        .renew_time
        .as_ref()
        .map(|t| t.0.to_string())
}

/// Reads pod events until every name in `names` has had one for which `done` holds; returns
/// when each first did. Events of other names are ignored.
async fn await_all(
    watch: &mut Watch<PodView>,
    names: &HashSet<String>,
    deadline: Instant,
    what: &str,
    done: impl Fn(&Seen<PodView>) -> bool,
) -> anyhow::Result<HashMap<String, Instant>> {
    let mut reached = HashMap::with_capacity(names.len());
    let mut last: HashMap<String, (EventKind, PodView)> = HashMap::new();
    while reached.len() < names.len() {
        let seen = match watch.next(deadline, what).await {
            Ok(seen) => seen,
            Err(error) => {
                let missing: Vec<String> = names
                    .iter()
                    .filter(|n| !reached.contains_key(*n))
                    .take(3)
                    .map(|n| match last.get(n) {
                        Some((kind, view)) => format!("{n} (last {kind:?}: {view:?})"),
                        None => format!("{n} (no event)"),
                    })
                    .collect();
                return Err(error.context(format!(
                    "{} of {} pods reached {what}; e.g. not: {}",
                    reached.len(),
                    names.len(),
                    missing.join(", ")
                )));
            }
        };
        if !names.contains(&seen.name) {
            continue;
        }
        if done(&seen) {
            reached.entry(seen.name.clone()).or_insert(seen.at);
        }
        last.insert(seen.name, (seen.kind, seen.value));
    }
    Ok(reached)
}

/// The Pod every figure creates: `SCRIPT` under `sh`, bound to `node` if given.
fn pod_manifest(name: &str, batch: &str, node: Option<&str>) -> anyhow::Result<Pod> {
    let mut spec = json!({
        "containers": [{
            "name": "main",
            "image": "busybox",
            "command": [SHELL, "-c", SCRIPT],
            "env": [{"name": "PATH", "value": PATH_ENV}],
        }],
    });
    if let Some(node) = node {
        spec["nodeName"] = json!(node);
    }
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"bench.finale.dev/batch": batch}},
        "spec": spec,
    }))
    .context("build the Pod manifest")
}

/// When each call of a batch started, and when the last was answered.
struct Calls {
    starts: HashMap<String, Instant>,
    answered: Instant,
}

impl Calls {
    fn collect(calls: Vec<(String, Instant, Instant)>) -> Calls {
        let answered = calls
            .iter()
            .map(|(_, _, answered)| *answered)
            .max()
            .unwrap_or_else(Instant::now);
        Calls {
            starts: calls
                .into_iter()
                .map(|(name, started, _)| (name, started))
                .collect(),
            answered,
        }
    }

    /// The batch from `started`, each item from its call to `done`.
    fn batch(&self, started: Instant, done: &HashMap<String, Instant>) -> anyhow::Result<Batch> {
        let mut batch = Batch::from_instants(started, &self.starts, done)?;
        batch.calls = Some(self.answered.saturating_duration_since(started));
        Ok(batch)
    }
}

/// Creates the Pods `names` from [`CONCURRENCY`] clients.
async fn create_pods(
    api: &Api<Pod>,
    names: &[String],
    batch: &str,
    node: Option<&str>,
) -> anyhow::Result<Calls> {
    let manifests = names
        .iter()
        .map(|name| Ok((name.clone(), pod_manifest(name, batch, node)?)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    futures::stream::iter(manifests)
        .map(|(name, pod)| async move {
            let started = Instant::now();
            api.create(&PostParams::default(), &pod)
                .await
                .with_context(|| format!("create pod {name}"))?;
            Ok::<_, anyhow::Error>((name, started, Instant::now()))
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect()
        .await
        .map(Calls::collect)
}

/// Deletes the Pods `names` with `params` from [`CONCURRENCY`] clients (a Pod already gone is
/// fine).
async fn delete_pods(
    api: &Api<Pod>,
    names: &[String],
    params: &DeleteParams,
) -> anyhow::Result<Calls> {
    futures::stream::iter(names.iter().cloned())
        .map(|name| async move {
            let started = Instant::now();
            match api.delete(&name, params).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => {
                    return Err(anyhow::Error::new(error).context(format!("delete pod {name}")));
                }
            }
            Ok((name, started, Instant::now()))
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect()
        .await
        .map(Calls::collect)
}

/// Processes whose working directory is under `root` (the agent's pods and their children),
/// with their process group ids.
fn processes_under(root: &Path) -> Vec<(i32, i32)> {
    let own = std::process::id() as i32;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<i32>().ok())
        else {
            continue;
        };
        if pid == own {
            continue;
        }
        // A zombie or a process gone meanwhile has no readable cwd: nothing to kill.
        let Ok(cwd) = std::fs::read_link(format!("/proc/{pid}/cwd")) else {
            continue;
        };
        if !cwd.starts_with(root) {
            continue;
        }
        let pgid = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                // Fields after the command's closing ')': state, ppid, pgrp.
                let (_, rest) = stat.rsplit_once(')')?;
                rest.split_whitespace().nth(2)?.parse::<i32>().ok()
            })
            .unwrap_or(pid);
        found.push((pid, pgid));
    }
    found
}

/// `SIGKILL`s every process (and its group) under `root` until none is left, for at most
/// `limit`; returns how many were found at first.
fn kill_processes_under(root: &Path, limit: Duration) -> anyhow::Result<usize> {
    let deadline = Instant::now() + limit;
    let first = processes_under(root).len();
    loop {
        let found = processes_under(root);
        if found.is_empty() {
            return Ok(first);
        }
        if Instant::now() > deadline {
            bail!(
                "{} processes under {} survived SIGKILL for {limit:?}: pids {:?}",
                found.len(),
                root.display(),
                found.iter().map(|(pid, _)| pid).collect::<Vec<_>>()
            );
        }
        for (pid, pgid) in found {
            // Only groups other than ours: a pod's group is its own session's.
            if pgid > 1 && pgid != nix::unistd::getpgrp().as_raw() {
                let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
            }
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A `finale node` child process. Dropping it kills it (`SIGKILL`) and then every process
/// left under its root directory: the agent's pods outlive the agent by design.
struct Agent {
    child: Option<Child>,
    root: PathBuf,
    log_path: PathBuf,
}

impl Agent {
    /// Starts `binary node` for Node `name` with pods under `root`, and waits for its banner.
    fn start(
        binary: &Path,
        kubeconfig: &Path,
        name: &str,
        root: &Path,
        max_pods: u64,
        log_path: &Path,
    ) -> anyhow::Result<Agent> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_path)
            .with_context(|| format!("open {}", log_path.display()))?;
        let mut child = Command::new(binary)
            .arg("node")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--hostname-override", name])
            .arg("--root-dir")
            .arg(root)
            .args(["--address", "127.0.0.1", "--port", "0"])
            .args(["--max-pods", &max_pods.to_string()])
            .args(["--node-lease-duration-seconds", &LEASE_SECONDS.to_string()])
            .env(
                "RUST_LOG",
                std::env::var("FINALE_BENCH_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .with_context(|| format!("spawn {} node", binary.display()))?;
        let mut agent = Agent {
            root: root.to_path_buf(),
            log_path: log_path.to_path_buf(),
            child: None,
        };
        let stdout = child.stdout.take().context("no stdout pipe")?;
        agent.child = Some(child);
        // Read stdout on a thread, so the wait for the banner is bounded; it drains on after.
        let (lines_tx, lines_rx) = std_mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = lines_tx.send(line);
            }
        });
        let deadline = Instant::now() + AGENT_START;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines_rx.recv_timeout(left) {
                Ok(line) if line.contains("is running") => return Ok(agent),
                Ok(_) => {}
                Err(error) => bail!(
                    "finale node did not print its banner within {AGENT_START:?} ({error}); \
                     its log ends:\n{}",
                    agent.log_tail(30)
                ),
            }
        }
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `SIGKILL`, no chance to clean up; returns the instant just before the signal. The
    /// agent's pods keep running.
    async fn kill9(&mut self) -> anyhow::Result<Instant> {
        let mut child = self.child.take().context("the agent is not running")?;
        let pid = i32::try_from(child.id()).context("agent pid")?;
        let at = Instant::now();
        kill(Pid::from_raw(pid), Signal::SIGKILL).context("SIGKILL the agent")?;
        tokio::task::spawn_blocking(move || child.wait())
            .await
            .context("agent reap task")?
            .context("reap the agent")?;
        Ok(at)
    }

    fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    fn log_tail(&self, lines: usize) -> String {
        let log = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Err(error) = kill_processes_under(&self.root, Duration::from_secs(5)) {
            eprintln!("[{SCENARIO}] warning: {error:#}");
        }
    }
}

/// Processes the harness spawned itself, each the leader of its own group. Dropping it
/// `SIGKILL`s every group not yet seen to exit.
struct DirectProcesses {
    /// Each process's group (= pid), and its reaper: the instant it was reaped.
    groups: Vec<(i32, Option<Reaper>)>,
    /// Each process's working directory.
    dirs: Vec<PathBuf>,
}

/// The task that reaps a direct process: the instant it was reaped.
type Reaper = tokio::task::JoinHandle<anyhow::Result<Instant>>;

impl DirectProcesses {
    /// Waits (polling, not timed) until every process has set its trap.
    async fn wait_started(&self, limit: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + limit;
        for dir in &self.dirs {
            while !dir.join(STARTED).exists() {
                if Instant::now() > deadline {
                    bail!(
                        "{} did not appear within {limit:?}",
                        dir.join(STARTED).display()
                    );
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        Ok(())
    }
}

impl Drop for DirectProcesses {
    fn drop(&mut self) {
        for (pgid, reaper) in &mut self.groups {
            if let Some(reaper) = reaper.take() {
                let _ = killpg(Pid::from_raw(*pgid), Signal::SIGKILL);
                // The aborted task drops its Child (kill_on_drop); tokio reaps it.
                reaper.abort();
            }
        }
    }
}

/// Baseline of figure 1: spawns `count` processes one after another; each one's latency is
/// from its spawn call until it is spawned and alive.
fn spawn_direct(dir: &Path, count: u64) -> anyhow::Result<(Batch, DirectProcesses)> {
    let mut processes = DirectProcesses {
        groups: Vec::new(),
        dirs: Vec::new(),
    };
    let mut starts = HashMap::new();
    let mut alive = HashMap::new();
    let started = Instant::now();
    for i in 0..count {
        let name = format!("direct-{i:04}");
        let work = dir.join(&name);
        let begin = Instant::now();
        std::fs::create_dir_all(&work).with_context(|| format!("create {}", work.display()))?;
        let log_path = work.join("main.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("open {}", log_path.display()))?;
        let stderr = log.try_clone().context("duplicate the log descriptor")?;
        let mut child = tokio::process::Command::new(SHELL)
            .args(["-c", SCRIPT])
            .env_clear()
            .env("PATH", PATH_ENV)
            .current_dir(&work)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(stderr))
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("spawn {SHELL} directly"))?;
        let pid = child
            .id()
            .and_then(|pid| i32::try_from(pid).ok())
            .context("the direct process exited before its pid was read")?;
        kill(Pid::from_raw(pid), None).context("the direct process is not alive")?;
        let at = Instant::now();
        starts.insert(name.clone(), begin);
        alive.insert(name, at);
        let reaper = tokio::spawn(async move {
            let status = child.wait().await.context("wait for a direct process")?;
            let at = Instant::now();
            if !status.success() {
                bail!("a direct process ended with {status}, not 0 on SIGTERM");
            }
            Ok(at)
        });
        processes.groups.push((pid, Some(reaper)));
        processes.dirs.push(work);
    }
    Ok((Batch::from_instants(started, &starts, &alive)?, processes))
}

/// Baseline of figure 2: `SIGTERM` to each group, then the instant each was reaped.
async fn terminate_direct(
    mut processes: DirectProcesses,
    limit: Duration,
) -> anyhow::Result<Batch> {
    processes.wait_started(limit).await?;
    let mut starts = HashMap::new();
    let started = Instant::now();
    for (i, (pgid, _)) in processes.groups.iter().enumerate() {
        starts.insert(i.to_string(), Instant::now());
        killpg(Pid::from_raw(*pgid), Signal::SIGTERM).context("SIGTERM a direct process")?;
    }
    let deadline = tokio::time::Instant::now() + limit;
    let mut exited = HashMap::new();
    for (i, (_, reaper)) in processes.groups.iter_mut().enumerate() {
        let Some(handle) = reaper.as_mut() else {
            continue;
        };
        let at = tokio::time::timeout_at(deadline, handle)
            .await
            .with_context(|| format!("direct process {i} did not exit within {limit:?}"))?
            .context("direct process reaper")??;
        *reaper = None;
        exited.insert(i.to_string(), at);
    }
    Batch::from_instants(started, &starts, &exited)
}

/// Baseline of figure 3: a heartbeat loop touching a file every second, killed just after a
/// touch, and a watcher polling the file every [`MONITOR_PERIOD`] that declares it dead after
/// [`GRACE`] without a change seen. Returns kill → detection.
///
/// The watcher starts `phase` before the loop. Started together, the two would lock into the
/// same phase every run, while the controller's passes fall anywhere between two Lease
/// renewals: spreading `phase` over the poll period from run to run samples that instead.
async fn heartbeat_direct(dir: &Path, phase: Duration) -> anyhow::Result<Duration> {
    let file = dir.join("heartbeat");

    // The watcher: the controller's loop (check, then sleep a period), its staleness measured
    // on its own clock from when it last saw the heartbeat change.
    let watched = file.clone();
    let limit = GRACE + Duration::from_secs(30);
    let watcher = tokio::spawn(async move {
        let deadline = Instant::now() + limit;
        let mut probe = None;
        let mut changed_at = Instant::now();
        loop {
            let now = Instant::now();
            let current = std::fs::metadata(&watched).and_then(|m| m.modified()).ok();
            if current != probe {
                probe = current;
                changed_at = now;
            }
            if now.duration_since(changed_at) > GRACE {
                return Ok(now);
            }
            if now > deadline {
                bail!("the watcher saw no failure within {limit:?}");
            }
            tokio::time::sleep(MONITOR_PERIOD).await;
        }
    });
    let mut watcher = AbortOnDrop(watcher);
    tokio::time::sleep(phase).await;

    let mut child = tokio::process::Command::new(SHELL)
        .args([
            "-c",
            "while :; do touch \"$1\" && echo beat; sleep 1; done",
            "sh",
        ])
        .arg(&file)
        .env_clear()
        .env("PATH", PATH_ENV)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .context("spawn the heartbeat loop")?;
    let pid = child
        .id()
        .and_then(|pid| i32::try_from(pid).ok())
        .context("the heartbeat loop exited at once")?;
    // Kills the loop's group (its `sleep` too) however this function ends.
    struct Group(i32);
    impl Drop for Group {
        fn drop(&mut self) {
            let _ = killpg(Pid::from_raw(self.0), Signal::SIGKILL);
        }
    }
    let group = Group(pid);
    let stdout = child.stdout.take().context("no heartbeat stdout")?;
    let mut beats = tokio::io::BufReader::new(stdout).lines();

    let deadline = tokio::time::Instant::now() + Duration::from_secs(BEATS_BEFORE_KILL as u64 * 5);
    for _ in 0..=BEATS_BEFORE_KILL {
        tokio::time::timeout_at(deadline, beats.next_line())
            .await
            .context("the heartbeat loop stopped beating")?
            .context("read the heartbeat loop")?
            .context("the heartbeat loop exited")?;
    }
    // The last line arrived just after a touch: kill now.
    let killed = Instant::now();
    killpg(Pid::from_raw(group.0), Signal::SIGKILL).context("SIGKILL the heartbeat loop")?;
    let detected = (&mut watcher.0).await.context("watcher task")??;
    let _ = child.wait().await;
    drop(group);
    Ok(detected.saturating_duration_since(killed))
}

/// The baseline watcher's head start in run `run`: 0, 350, 200, 50, 400, 250, 100, 450, 300,
/// 150 ms, then again — every tenth of the poll period once in ten runs, spread early on.
fn watcher_phase(run: usize) -> Duration {
    let tenth = MONITOR_PERIOD / 10;
    tenth * u32::try_from((run * 7) % 10).unwrap_or(0)
}

/// Aborts a task when dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// CPU time used so far by the server and the agent, in seconds.
#[derive(Clone, Copy)]
struct CpuMark {
    server: f64,
    agent: f64,
}

impl CpuMark {
    fn read(server: u32, agent: u32) -> anyhow::Result<CpuMark> {
        Ok(CpuMark {
            server: cpu_seconds(server)?,
            agent: cpu_seconds(agent)?,
        })
    }

    /// CPU milliseconds per Pod of each process since `earlier`.
    fn per_pod_ms(&self, earlier: CpuMark, count: u64) -> CpuPerPod {
        let per = |now: f64, then: f64| (now - then) * 1e3 / count.max(1) as f64;
        CpuPerPod {
            server: per(self.server, earlier.server),
            agent: per(self.agent, earlier.agent),
        }
    }
}

/// CPU time per Pod over a batch (10 ms ticks: coarse for a small batch).
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
struct CpuPerPod {
    server: f64,
    agent: f64,
}

impl std::fmt::Display for CpuPerPod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CPU per Pod: server {:.2} ms, agent {:.2} ms",
            self.server, self.agent
        )
    }
}

/// One Finale run's measurements.
struct FinaleRun {
    create: Batch,
    scheduled: Batch,
    delete: Batch,
    unknown: Duration,
    not_ready: Batch,
    /// Pod processes the agent left behind after figure 2 (must be 0).
    leftovers: usize,
    create_cpu: CpuPerPod,
    delete_cpu: CpuPerPod,
}

/// One baseline run's measurements.
struct DirectRun {
    spawn: Batch,
    terminate: Batch,
    detect: Duration,
}

struct Cluster<'a> {
    binary: &'a Path,
    kubeconfig: &'a Path,
    server_pid: u32,
    pods: Api<Pod>,
    /// For the watches: a read timeout longer than a watch lives.
    watch_pods: Api<Pod>,
    nodes: Api<Node>,
    watch_nodes: Api<Node>,
    watch_leases: Api<Lease>,
}

/// Polls (set-up only) until Node `name` is Ready.
async fn wait_node_ready(nodes: &Api<Node>, name: &str, agent: &mut Agent) -> anyhow::Result<()> {
    let deadline = Instant::now() + AGENT_START;
    loop {
        if let Some(node) = nodes.get_opt(name).await.context("get the Node")?
            && node_ready(&node).as_deref() == Some("True")
        {
            return Ok(());
        }
        if !agent.is_running() {
            bail!(
                "finale node exited before its Node was Ready; its log ends:\n{}",
                agent.log_tail(30)
            );
        }
        if Instant::now() > deadline {
            bail!(
                "Node {name} was not Ready within {AGENT_START:?}; the agent's log ends:\n{}",
                agent.log_tail(30)
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn finale_run(
    cluster: &Cluster<'_>,
    dir: &Path,
    run: usize,
    count: u64,
) -> anyhow::Result<FinaleRun> {
    let limit = limit_for(count);
    let node = format!("bench-r{run}");
    let root = dir.join(format!("node-r{run}"));
    std::fs::create_dir_all(&root).with_context(|| format!("create {}", root.display()))?;
    // Pods' working directories are matched against the canonical path.
    let root = std::fs::canonicalize(&root).context("canonicalize the agent's root")?;
    let (binary, kubeconfig, agent_root) = (
        cluster.binary.to_path_buf(),
        cluster.kubeconfig.to_path_buf(),
        root.clone(),
    );
    let (agent_node, log_path) = (node.clone(), dir.join(format!("agent-r{run}.log")));
    let max_pods = count.saturating_add(10).max(110);
    let mut agent = tokio::task::spawn_blocking(move || {
        Agent::start(
            &binary,
            &kubeconfig,
            &agent_node,
            &agent_root,
            max_pods,
            &log_path,
        )
    })
    .await
    .context("agent start task")??;
    wait_node_ready(&cluster.nodes, &node, &mut agent).await?;
    let agent_pid = agent.pid().context("the agent has exited")?;
    let cpu = || CpuMark::read(cluster.server_pid, agent_pid);

    // Figure 1: bound Pods, created until Running.
    let batch = format!("r{run}-bound");
    let names: Vec<String> = (0..count).map(|i| format!("{batch}-{i:04}")).collect();
    let expected: HashSet<String> = names.iter().cloned().collect();
    let selector = format!("bench.finale.dev/batch={batch}");
    let mut watch =
        Watch::open(cluster.watch_pods.clone(), Some(&selector), None, pod_view).await?;
    let cpu_before = cpu()?;
    let started = Instant::now();
    let calls = create_pods(&cluster.pods, &names, &batch, Some(&node)).await?;
    let running = await_all(
        &mut watch,
        &expected,
        started + limit,
        "phase Running",
        |seen| seen.value.phase.as_deref() == Some("Running"),
    )
    .await?;
    let create_cpu = cpu()?.per_pod_ms(cpu_before, count);
    let create = calls.batch(started, &running)?;

    // Figure 2: the same Pods deleted (default grace) until their DELETED events.
    let cpu_before = cpu()?;
    let started = Instant::now();
    let calls = delete_pods(&cluster.pods, &names, &DeleteParams::default()).await?;
    let deleted = await_all(&mut watch, &expected, started + limit, "DELETED", |seen| {
        seen.kind == EventKind::Deleted
    })
    .await?;
    let delete_cpu = cpu()?.per_pod_ms(cpu_before, count);
    let delete = calls.batch(started, &deleted)?;
    drop(watch);
    // The agent confirmed every deletion after its processes were gone: none may be left.
    let leftovers = processes_under(&root).len();

    // Figure 1 again through the scheduler; these Pods then serve figure 3.
    let batch = format!("r{run}-scheduled");
    let names: Vec<String> = (0..count).map(|i| format!("{batch}-{i:04}")).collect();
    let expected: HashSet<String> = names.iter().cloned().collect();
    let selector = format!("bench.finale.dev/batch={batch}");
    let mut watch =
        Watch::open(cluster.watch_pods.clone(), Some(&selector), None, pod_view).await?;
    let node_field = format!("metadata.name={node}");
    let mut node_watch = Watch::open(
        cluster.watch_nodes.clone(),
        None,
        Some(&node_field),
        node_ready,
    )
    .await?;
    let mut lease_watch = Watch::open(
        cluster.watch_leases.clone(),
        None,
        Some(&node_field),
        lease_renewed,
    )
    .await?;
    let started = Instant::now();
    let calls = create_pods(&cluster.pods, &names, &batch, None).await?;
    // Running and Ready are read from the same events: collect both in one pass.
    let ready_seen = std::cell::RefCell::new(HashSet::new());
    let running = await_all(
        &mut watch,
        &expected,
        started + limit,
        "phase Running",
        |seen| {
            if seen.value.ready == Some(true) {
                ready_seen.borrow_mut().insert(seen.name.clone());
            }
            seen.value.phase.as_deref() == Some("Running")
        },
    )
    .await?;
    let scheduled = calls.batch(started, &running)?;
    let not_yet: HashSet<String> = expected.difference(&ready_seen.borrow()).cloned().collect();
    if !not_yet.is_empty() {
        await_all(
            &mut watch,
            &not_yet,
            Instant::now() + limit,
            "Ready",
            |seen| seen.value.ready == Some(true),
        )
        .await?;
    }

    // Figure 3: SIGKILL the agent just after it renewed its Lease.
    watch.drain()?;
    node_watch.drain()?;
    lease_watch.drain()?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let seen = lease_watch.next(deadline, "a Lease renewal").await?;
        if seen.kind == EventKind::Modified && seen.value.is_some() {
            break;
        }
    }
    let killed = agent.kill9().await?;
    let deadline = killed + GRACE + limit;
    let not_ready = await_all(
        &mut watch,
        &expected,
        deadline,
        "Ready=False after the agent's death",
        |seen| seen.at >= killed && seen.value.ready == Some(false),
    )
    .await?;
    let unknown_at = loop {
        let seen = node_watch
            .next(deadline, "the Node's Ready=Unknown")
            .await?;
        if seen.value.as_deref() == Some("Unknown") {
            break seen.at;
        }
    };
    let kill_starts: HashMap<String, Instant> =
        expected.iter().map(|name| (name.clone(), killed)).collect();
    let not_ready = Batch::from_instants(killed, &kill_starts, &not_ready)?;

    // Clean-up (not timed): the dead agent cannot stop its pods. Remove them from the API
    // at once, kill their processes by working directory, and remove the Node.
    let force = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    delete_pods(&cluster.pods, &names, &force).await?;
    let killed_root = root.clone();
    tokio::task::spawn_blocking(move || {
        kill_processes_under(&killed_root, Duration::from_secs(10))
    })
    .await
    .context("kill task")??;
    await_all(
        &mut watch,
        &expected,
        Instant::now() + limit,
        "DELETED after a forced delete",
        |seen| seen.kind == EventKind::Deleted,
    )
    .await?;
    match cluster.nodes.delete(&node, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(error) => return Err(anyhow::Error::new(error).context(format!("delete Node {node}"))),
    }
    drop(agent);
    Ok(FinaleRun {
        create,
        scheduled,
        delete,
        unknown: unknown_at.saturating_duration_since(killed),
        not_ready,
        leftovers,
        create_cpu,
        delete_cpu,
    })
}

async fn direct_run(dir: &Path, run: usize, count: u64) -> anyhow::Result<DirectRun> {
    let work = dir.join(format!("direct-r{run}"));
    std::fs::create_dir_all(&work).with_context(|| format!("create {}", work.display()))?;
    let (spawn, processes) = spawn_direct(&work, count)?;
    let terminate = terminate_direct(processes, limit_for(count)).await?;
    let detect = heartbeat_direct(&work, watcher_phase(run)).await?;
    Ok(DirectRun {
        spawn,
        terminate,
        detect,
    })
}

pub async fn run(settings: &Settings, report: &mut Report) -> anyhow::Result<()> {
    let binary = locate_binary(settings.finale_bin.as_deref())?;
    let count = settings.pods;
    let dir = tempfile::tempdir().context("create a temporary directory")?;
    let data_dir = dir.path().join("finale");
    let server_binary = binary.clone();
    let grace = format!("{}ms", GRACE.as_millis());
    let period = format!("{}ms", MONITOR_PERIOD.as_millis());
    let mut server = tokio::task::spawn_blocking(move || {
        finale_e2e::FinaleServer::start_with(
            &server_binary,
            &data_dir,
            "127.0.0.1:0",
            &[
                "--node-monitor-grace-period",
                &grace,
                "--node-monitor-period",
                &period,
            ],
        )
    })
    .await
    .context("server start task")??;

    let _ = rustls::crypto::ring::default_provider().install_default();
    let (config, _) = load_config(
        Some(&server.kubeconfig),
        None,
        &Environment {
            kubeconfig: None,
            home: None,
            in_cluster: false,
        },
    )
    .await
    .context("load the server's kubeconfig")?;
    let clients = Clients::new(config).context("build the Kubernetes clients")?;
    let namespaces: Api<Namespace> = Api::all(clients.requests.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE},
            }))
            .context("build the Namespace")?,
        )
        .await
        .with_context(|| format!("create namespace {NAMESPACE}"))?;
    let cluster = Cluster {
        binary: &binary,
        kubeconfig: &server.kubeconfig,
        server_pid: server.pid().context("the server has exited")?,
        pods: Api::namespaced(clients.requests.clone(), NAMESPACE),
        watch_pods: Api::namespaced(clients.watches.clone(), NAMESPACE),
        nodes: Api::all(clients.requests.clone()),
        watch_nodes: Api::all(clients.watches.clone()),
        watch_leases: Api::namespaced(clients.watches.clone(), "kube-node-lease"),
    };

    let direct = format!(
        "{count} `sh` processes spawned directly, one after another, until spawned and alive"
    );
    let mut create = BatchFigures::new(
        &format!("{count} Pods (nodeName set) create -> Running"),
        "per Pod",
        &direct,
        true,
    );
    let mut scheduled = BatchFigures::new(
        &format!("{count} Pods via the scheduler create -> Running"),
        "per Pod",
        &direct,
        false,
    );
    let mut delete = BatchFigures::new(
        &format!("{count} Pods delete (grace 30 s) -> DELETED"),
        "per Pod",
        &format!("SIGTERM to {count} directly spawned process groups until each is reaped"),
        true,
    );
    let heartbeat = format!(
        "a heartbeat file touched every 1 s, polled every {} ms, {} s grace: SIGKILL -> detected",
        MONITOR_PERIOD.as_millis(),
        GRACE.as_secs()
    );
    let failure = |name: String, goal: bool| {
        let figure = Figure::new(SCENARIO, &name, Unit::Millis, &heartbeat);
        if goal {
            figure.with_goal(Goal::RatioAtMost(2.0))
        } else {
            figure
        }
    };
    let mut unknown = failure("agent SIGKILL -> Node Ready=Unknown (ms)".into(), false);
    let mut not_ready_p50 = failure("agent SIGKILL -> Pod Ready=False, p50 (ms)".into(), true);
    let mut not_ready_p99 = failure("agent SIGKILL -> Pod Ready=False, p99 (ms)".into(), false);
    let mut not_ready_all = failure(
        format!("agent SIGKILL -> all {count} Pods Ready=False (ms)"),
        true,
    );

    let mut leftovers = 0;
    let (mut create_cpu, mut delete_cpu) = (Vec::new(), Vec::new());
    let mut disk_rates = Vec::new();
    for run in 0..settings.runs {
        // The agent writes each pod's state file durably (fsync, rename, fsync of the
        // directory): the disk's sync time is part of each Pod's cost, and not the baseline's.
        let probe_dir = dir.path().to_path_buf();
        let disk = tokio::task::spawn_blocking(move || {
            probe_fdatasync(&probe_dir, Duration::from_millis(500))
        })
        .await
        .context("disk probe task")??;
        eprintln!(
            "[{SCENARIO}] run {}/{}, disk: {:.0} fdatasync/s (4 KiB overwrite, one thread)",
            run + 1,
            settings.runs,
            disk.per_second
        );
        disk_rates.push(disk.per_second);
        let finale_first = run.is_multiple_of(2);
        for finale in [finale_first, !finale_first] {
            let progress = |what: &str, line: String| {
                eprintln!(
                    "[{SCENARIO}] run {}/{}, {what}: {line}",
                    run + 1,
                    settings.runs
                );
            };
            if finale {
                let measured = finale_run(&cluster, dir.path(), run, count).await?;
                progress(
                    "finale create",
                    format!("{}; {}", measured.create.summary(), measured.create_cpu),
                );
                progress("finale via scheduler", measured.scheduled.summary());
                progress(
                    "finale delete",
                    format!("{}; {}", measured.delete.summary(), measured.delete_cpu),
                );
                progress(
                    "finale node failure",
                    format!(
                        "Node Unknown after {:.0} ms; Pods not ready: {}",
                        measured.unknown.as_secs_f64() * 1e3,
                        measured.not_ready.summary()
                    ),
                );
                create.push(true, &measured.create);
                scheduled.push(true, &measured.scheduled);
                delete.push(true, &measured.delete);
                unknown.finale.push(measured.unknown.as_secs_f64() * 1e3);
                not_ready_p50
                    .finale
                    .extend(measured.not_ready.quantile(0.5));
                not_ready_p99
                    .finale
                    .extend(measured.not_ready.quantile(0.99));
                not_ready_all.finale.push(measured.not_ready.total_ms());
                leftovers += measured.leftovers;
                create_cpu.push(measured.create_cpu);
                delete_cpu.push(measured.delete_cpu);
                report.raw.push(json!({
                    "scenario": SCENARIO, "run": run, "target": "finale", "pods": count,
                    "create": measured.create.json(),
                    "scheduled": measured.scheduled.json(),
                    "delete": measured.delete.json(),
                    "node_unknown_ms": measured.unknown.as_secs_f64() * 1e3,
                    "not_ready": measured.not_ready.json(),
                    "processes_left_after_delete": measured.leftovers,
                    "create_cpu_ms_per_pod": measured.create_cpu,
                    "delete_cpu_ms_per_pod": measured.delete_cpu,
                }));
            } else {
                let measured = direct_run(dir.path(), run, count).await?;
                progress("direct spawn", measured.spawn.summary());
                progress("direct SIGTERM", measured.terminate.summary());
                progress(
                    "heartbeat file",
                    format!(
                        "SIGKILL -> detected {:.0} ms",
                        measured.detect.as_secs_f64() * 1e3
                    ),
                );
                create.push(false, &measured.spawn);
                scheduled.push(false, &measured.spawn);
                delete.push(false, &measured.terminate);
                let detect_ms = measured.detect.as_secs_f64() * 1e3;
                for figure in [
                    &mut unknown,
                    &mut not_ready_p50,
                    &mut not_ready_p99,
                    &mut not_ready_all,
                ] {
                    figure.baseline.push(detect_ms);
                }
                report.raw.push(json!({
                    "scenario": SCENARIO, "run": run, "target": "direct", "processes": count,
                    "spawn": measured.spawn.json(),
                    "terminate": measured.terminate.json(),
                    "detect_ms": detect_ms,
                }));
            }
        }
    }
    report.figures.extend(create.into_figures());
    report.figures.extend(scheduled.into_figures());
    report.figures.extend(delete.into_figures());
    report
        .figures
        .extend([unknown, not_ready_p50, not_ready_p99, not_ready_all]);
    report.notes.push(format!(
        "pods: the server ran with --node-monitor-grace-period {}s --node-monitor-period {}ms; \
         the agent renewed its Lease every 1 s; both sides of the node-failure rows include the \
         {}s grace",
        GRACE.as_secs(),
        MONITOR_PERIOD.as_millis(),
        GRACE.as_secs()
    ));
    for (what, samples) in [("create", &create_cpu), ("delete", &delete_cpu)] {
        let server: Vec<f64> = samples.iter().map(|cpu| cpu.server).collect();
        let agent: Vec<f64> = samples.iter().map(|cpu| cpu.agent).collect();
        if let (Some(server), Some(agent)) = (median(&server), median(&agent)) {
            report.notes.push(format!(
                "pods: CPU per Pod over the {what} batches (medians): server {server:.2} ms, \
                 agent {agent:.2} ms"
            ));
        }
    }
    if let Some(rate) = median(&disk_rates) {
        report.notes.push(format!(
            "pods: disk under the runs: {rate:.0} write+fdatasync/s (median; one thread, 4 KiB \
             overwrites in the agents' temporary directory)"
        ));
    }
    if leftovers > 0 {
        report.warnings.push(format!(
            "pods: {leftovers} pod processes were still alive after their Pods' DELETED events"
        ));
    }
    if !server.is_running() {
        bail!(
            "finale server exited during the benchmark; its log ends:\n{}",
            server.log_tail(30)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_time_each_item_from_its_own_start() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let starts: HashMap<String, Instant> =
            [("a".to_string(), at(0)), ("b".to_string(), at(10))].into();
        let done: HashMap<String, Instant> =
            [("a".to_string(), at(30)), ("b".to_string(), at(50))].into();
        let batch = Batch::from_instants(t0, &starts, &done).unwrap();
        assert_eq!(batch.total, Duration::from_millis(50));
        assert_eq!(batch.quantile(0.5), Some(30.0));
        assert_eq!(batch.quantile(1.0), Some(40.0));
        let unknown: HashMap<String, Instant> = [("c".to_string(), at(5))].into();
        assert!(Batch::from_instants(t0, &starts, &unknown).is_err());
    }

    #[test]
    fn pods_run_the_script_under_sh_and_bind_only_when_asked() {
        let bound = pod_manifest("p-1", "r0-bound", Some("bench-r0")).unwrap();
        let spec = bound.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("bench-r0"));
        assert_eq!(
            spec.containers[0].command.as_deref(),
            Some(&[SHELL.to_string(), "-c".into(), SCRIPT.into()][..])
        );
        assert_eq!(
            bound.metadata.labels.as_ref().unwrap()["bench.finale.dev/batch"],
            "r0-bound"
        );
        let free = pod_manifest("p-2", "r0-scheduled", None).unwrap();
        assert_eq!(free.spec.unwrap().node_name, None);
    }

    #[test]
    fn watcher_phases_cover_the_poll_period() {
        let phases: HashSet<Duration> = (0..10).map(watcher_phase).collect();
        assert_eq!(phases.len(), 10);
        assert!(phases.iter().all(|phase| *phase < MONITOR_PERIOD));
        assert_eq!(watcher_phase(1), Duration::from_millis(350));
    }

    #[test]
    fn pod_views_read_phase_and_ready() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "status": {"phase": "Running", "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "False"},
            ]},
        }))
        .unwrap();
        let view = pod_view(&pod);
        assert_eq!(view.phase.as_deref(), Some("Running"));
        assert_eq!(view.ready, Some(false));
        assert_eq!(pod_view(&Pod::default()).ready, None);
    }

    #[tokio::test]
    async fn direct_processes_start_and_exit_on_sigterm() {
        let dir = tempfile::tempdir().unwrap();
        let (spawned, processes) = spawn_direct(dir.path(), 3).unwrap();
        assert_eq!(spawned.per_item_ms.len(), 3);
        let terminated = terminate_direct(processes, Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(terminated.per_item_ms.len(), 3);
        assert!(terminated.total < Duration::from_secs(5));
    }

    #[test]
    fn processes_under_a_directory_are_found_and_killed() {
        use std::os::unix::process::CommandExt;
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let mut child = Command::new(SHELL)
            .args(["-c", "sleep 30 & wait"])
            .current_dir(&root)
            .process_group(0)
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while processes_under(&root).len() < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(processes_under(&root).len(), 2);
        // The leader stays a zombie until reaped: it has no cwd then, so it is not counted.
        assert_eq!(
            kill_processes_under(&root, Duration::from_secs(5)).unwrap(),
            2
        );
        child.wait().unwrap();
        assert!(processes_under(&root).is_empty());
    }
}
