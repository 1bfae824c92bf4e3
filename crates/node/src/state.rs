//! What the agent remembers about each pod across its own restarts:
//! `<root>/pods/<uid>/state.json`.
//!
//! It holds what the API cannot tell a restarted agent: which processes are the pod's
//! containers (pid and start time, so a reused pid is never mistaken for a container), how
//! many times each was restarted, how the finished ones ended (an init container that
//! succeeded is never run again), and when a termination began and must end.
//!
//! # Guarantees
//! - A state file is replaced atomically (temporary file, `fsync`, `rename`, `fsync` of the
//!   directory): after a crash it holds either the previous or the new state, never a mix.
//! - A container's state is written right after its process starts, and before the pod's
//!   status says anything more to the API ([`StateWriter::settled`]), so a crash leaves at
//!   most the process started in that instant unrecorded.
//! - Writes happen on tokio's blocking pool ([`StateWriter`]), one pod's in order, so the
//!   `fsync`s of many pods proceed together and never stall the agent's other pods.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::pods::status::Terminated;

/// The file name inside a pod's directory.
pub(crate) const STATE_FILE: &str = "state.json";

/// The format version written; a newer one is refused rather than misread.
const VERSION: u32 = 1;

/// The pods directory under the agent's root (`<root>/pods`).
pub(crate) fn pods_dir(root: &Path) -> PathBuf {
    root.join("pods")
}

/// One pod's directory: its working directory, logs and state (`<root>/pods/<uid>`).
pub(crate) fn pod_dir(root: &Path, uid: &str) -> PathBuf {
    pods_dir(root).join(uid)
}

/// A container's current process, as recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RunningRecord {
    pub pid: i32,
    /// `/proc/<pid>/stat` field 22 at start: tells this process from a later one with the
    /// same pid.
    pub start_ticks: u64,
    /// RFC 3339.
    pub started_at: String,
}

/// A container's current state, as recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum ContainerRecordState {
    Running(RunningRecord),
    Terminated(Terminated),
}

/// One container, as recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ContainerRecord {
    /// Starts after the first; its log is `<restart_count>.log`.
    pub restart_count: u32,
    /// `None` until its first start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<ContainerRecordState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_terminated: Option<Terminated>,
}

/// A termination in progress (milliseconds since the epoch).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TerminationRecord {
    pub started_ms: u64,
    pub deadline_ms: u64,
    pub grace_seconds: i64,
}

/// Everything recorded about one pod.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PodState {
    pub version: u32,
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// The boot the pids belong to; after a reboot every recorded process is gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// `status.startTime`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    /// Init and app containers by name (names are unique across both).
    #[serde(default)]
    pub containers: BTreeMap<String, ContainerRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination: Option<TerminationRecord>,
}

impl PodState {
    pub(crate) fn new(uid: &str, namespace: &str, name: &str) -> PodState {
        PodState {
            version: VERSION,
            uid: uid.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
            boot_id: crate::runtime::procfs::boot_id(),
            start_time: None,
            containers: BTreeMap::new(),
            termination: None,
        }
    }
}

/// Writes `state` to `<dir>/state.json` atomically.
pub(crate) fn save(dir: &Path, state: &PodState) -> anyhow::Result<()> {
    let path = dir.join(STATE_FILE);
    let temporary = dir.join(format!(".{STATE_FILE}.tmp"));
    let bytes = serde_json::to_vec_pretty(state).context("encode the pod state")?;
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(&bytes)?;
        file.sync_all()?;
        std::fs::rename(&temporary, &path)?;
        // The rename is durable once the directory is.
        std::fs::File::open(dir)?.sync_all()
    };
    write().with_context(|| format!("write {}", path.display()))
}

/// Writes one pod's state file off the async runtime: [`StateWriter::save`] queues the newest
/// state (replacing one not yet written) and returns at once; a task writes it with [`save`]
/// on the blocking pool.
pub(crate) struct StateWriter {
    pending: Option<tokio::sync::watch::Sender<Option<(u64, PodState)>>>,
    written: tokio::sync::watch::Receiver<u64>,
    queued: u64,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl StateWriter {
    /// A writer for the pod directory `dir`; `pod` names it in error logs.
    pub(crate) fn spawn(dir: PathBuf, pod: String) -> StateWriter {
        let (pending, mut next) = tokio::sync::watch::channel::<Option<(u64, PodState)>>(None);
        let (done, written) = tokio::sync::watch::channel(0u64);
        let task = tokio::spawn(async move {
            while next.changed().await.is_ok() {
                let Some((version, state)) = next.borrow_and_update().clone() else {
                    continue;
                };
                let target = dir.clone();
                let result = tokio::task::spawn_blocking(move || save(&target, &state)).await;
                match result {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => {
                        tracing::error!(%pod, error = format!("{error:#}"), "cannot record the pod state");
                    }
                    Err(error) => {
                        tracing::error!(%pod, %error, "the pod state writer failed");
                    }
                }
                // Also after a failure: waiting for it would wait forever; it is logged.
                done.send_replace(version);
            }
        });
        StateWriter {
            pending: Some(pending),
            written,
            queued: 0,
            task: Some(task),
        }
    }

    /// Queues `state` to be written.
    pub(crate) fn save(&mut self, state: PodState) {
        if let Some(pending) = &self.pending {
            self.queued += 1;
            pending.send_replace(Some((self.queued, state)));
        }
    }

    /// Returns once everything queued so far is written (or its failure logged).
    pub(crate) async fn settled(&mut self) {
        let queued = self.queued;
        let _ = self.written.wait_for(|written| *written >= queued).await;
    }

    /// Writes what is queued, then stops.
    pub(crate) async fn close(&mut self) {
        self.pending = None;
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

/// Reads one pod's state; `None` when it has none (never started anything).
pub(crate) fn load(dir: &Path) -> anyhow::Result<Option<PodState>> {
    let path = dir.join(STATE_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error).with_context(|| format!("read {}", path.display())),
    };
    let state: PodState =
        serde_json::from_slice(&bytes).with_context(|| format!("parse {}", path.display()))?;
    if state.version > VERSION {
        anyhow::bail!(
            "{} has format version {}, newer than this agent's {VERSION}",
            path.display(),
            state.version
        );
    }
    Ok(Some(state))
}

/// What `<root>/pods` holds at start: each directory by uid, with its state if it has one.
pub(crate) fn load_all(root: &Path) -> anyhow::Result<BTreeMap<String, Option<PodState>>> {
    let dir = pods_dir(root);
    let mut found = BTreeMap::new();
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(found),
        Err(error) => return Err(error).with_context(|| format!("list {}", dir.display())),
    };
    for entry in entries {
        let entry = entry.with_context(|| format!("list {}", dir.display()))?;
        if !entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            continue;
        }
        let Some(uid) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        let state = match load(&entry.path()) {
            Ok(state) => state,
            Err(error) => {
                // Kept, not deleted: a person may want to see it. The pod, if it still
                // exists, starts afresh.
                tracing::warn!(%uid, error = format!("{error:#}"), "unreadable pod state");
                None
            }
        };
        found.insert(uid, state);
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_writer_keeps_the_newest_state_and_settles_before_answering() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pod = pod_dir(dir.path(), "uid-2");
        std::fs::create_dir_all(&pod).expect("mkdir");
        let mut writer = StateWriter::spawn(pod.clone(), "default/web".into());
        for restarts in 0..50u32 {
            let mut state = PodState::new("uid-2", "default", "web");
            state.containers.insert(
                "app".into(),
                ContainerRecord {
                    restart_count: restarts,
                    current: None,
                    last_terminated: None,
                },
            );
            writer.save(state);
        }
        writer.settled().await;
        let written = load(&pod).expect("load").expect("a state");
        assert_eq!(
            written.containers["app"].restart_count, 49,
            "the newest state wins"
        );
        writer.close().await;
        // Closed: nothing more is written, and saving is harmless.
        writer.save(PodState::new("uid-2", "default", "later"));
        writer.settled().await;
        assert_eq!(
            load(&pod).expect("load").map(|s| s.name),
            Some("web".to_string())
        );
    }

    #[test]
    fn state_round_trips_and_replaces_atomically() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        let pod = pod_dir(root, "uid-1");
        std::fs::create_dir_all(&pod).expect("mkdir");
        let mut state = PodState::new("uid-1", "default", "web");
        state.containers.insert(
            "app".into(),
            ContainerRecord {
                restart_count: 2,
                current: Some(ContainerRecordState::Running(RunningRecord {
                    pid: 42,
                    start_ticks: 7,
                    started_at: "2025-01-01T00:00:00Z".into(),
                })),
                last_terminated: Some(Terminated {
                    exit_code: 1,
                    signal: None,
                    reason: "Error".into(),
                    message: None,
                    started_at: None,
                    finished_at: "2025-01-01T00:00:00Z".into(),
                    container_id: Some("process://41".into()),
                }),
            },
        );
        state.termination = Some(TerminationRecord {
            started_ms: 1,
            deadline_ms: 2,
            grace_seconds: 30,
        });
        save(&pod, &state).expect("save");
        assert_eq!(load(&pod).expect("load"), Some(state.clone()));
        state.containers.clear();
        save(&pod, &state).expect("save again");
        let all = load_all(root).expect("load all");
        assert_eq!(all.get("uid-1"), Some(&Some(state)));
        // No temporary file is left behind.
        let names: Vec<String> = std::fs::read_dir(&pod)
            .expect("list")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect();
        assert_eq!(names, [STATE_FILE]);
    }

    #[test]
    fn a_directory_without_state_is_listed_and_garbage_is_not_fatal() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(pod_dir(dir.path(), "empty")).expect("mkdir");
        let broken = pod_dir(dir.path(), "broken");
        std::fs::create_dir_all(&broken).expect("mkdir");
        std::fs::write(broken.join(STATE_FILE), b"{not json").expect("write");
        let all = load_all(dir.path()).expect("load all");
        assert_eq!(all.get("empty"), Some(&None));
        assert_eq!(all.get("broken"), Some(&None));
        assert!(load(&broken).is_err());
        assert_eq!(
            load_all(&dir.path().join("nothing")).expect("empty").len(),
            0
        );
    }
}
