//! The process runtime: each container is a host process started from its `command` + `args`.
//!
//! # The shape of a container
//! Each container's process starts a new session (`setsid` before `exec`), so it leads its own
//! process group: the group stands for the container, the way a PID namespace does in a real
//! runtime. Signals go to the whole group, so they reach the children a container starts
//! (`sh -c 'sleep 100 & wait'`), and when the main process exits, whatever it left in its group
//! is killed, as everything in a container dies with its PID 1. Being in its own session also
//! detaches it from the agent's terminal: a Ctrl-C or a hang-up aimed at the agent never
//! reaches the pods.
//!
//! A container's stdout and stderr are its log file, opened `O_APPEND` and handed to the
//! process directly: no pipe runs through the agent, so a container keeps running, and keeps
//! logging, when the agent stops or dies. Nothing ties a container's life to the agent's
//! (no `PR_SET_PDEATHSIG`).
//!
//! # Guarantees
//! - A signal is only ever sent to a group the runtime can prove is the container's: its
//!   leader is the recorded pid with the recorded start time, or, once the leader is gone, the
//!   processes still in its group that started after it (a group id cannot be reused while any
//!   member lives).
//! - Every process the runtime starts is waited for (`tokio::process::Child::wait`): no
//!   zombies.
//!
//! # Caveats
//! - A process that calls `setsid`/`setpgid` itself leaves its container's group and is not
//!   signalled with it (a daemon that double-forks escapes, as it would escape nothing in a
//!   real container).
//! - Processes run as the agent's user, in the host's namespaces, with no resource limits.

pub(crate) mod procfs;

use std::io;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;

/// What to run.
pub(crate) struct Launch<'a> {
    /// The program and its arguments.
    pub argv: &'a [String],
    pub env: &'a [(String, String)],
    pub working_dir: &'a Path,
}

/// A process the runtime started.
pub(crate) struct Started {
    pub child: tokio::process::Child,
    pub pid: i32,
    pub start_ticks: u64,
}

/// How a process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exit {
    Code(i32),
    Signal(i32),
    /// The process was not the agent's child (adopted after a restart): it is gone, but how it
    /// ended cannot be known.
    Unknown,
}

impl Exit {
    pub(crate) fn from_status(status: ExitStatus) -> Exit {
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(code), _) => Exit::Code(code),
            (None, Some(signal)) => Exit::Signal(signal),
            (None, None) => Exit::Unknown,
        }
    }

    /// The exit code a container runtime reports: the code, or 128 + the signal.
    pub(crate) fn exit_code(self) -> i32 {
        match self {
            Exit::Code(code) => code,
            Exit::Signal(signal) => 128 + signal,
            Exit::Unknown => 137,
        }
    }
}

fn command(launch: &Launch<'_>) -> io::Result<tokio::process::Command> {
    let Some((program, args)) = launch.argv.split_first() else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty command"));
    };
    let mut command = tokio::process::Command::new(program);
    // `env_clear` then the container's own environment; with PATH set here, the program is
    // looked up in the container's PATH, not the agent's.
    command
        .args(args)
        .env_clear()
        .envs(launch.env.iter().map(|(name, value)| (name, value)))
        .current_dir(launch.working_dir)
        .stdin(Stdio::null())
        .kill_on_drop(false);
    // SAFETY: the closure runs in the child between fork and exec and only calls setsid(2)
    // and prctl(2), both async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            nix::unistd::setsid().map_err(io::Error::from)?;
            // `finale` turns transparent huge pages off for itself (crates/cli/src/main.rs),
            // and exec keeps that; a Pod's process gets the host's default back (a kernel
            // that refuses has no such setting to undo).
            let _ = nix::sys::prctl::set_thp_disable(false);
            Ok(())
        });
    }
    Ok(command)
}

/// Starts a container's process with stdout and stderr appended to `log`.
pub(crate) fn start(launch: &Launch<'_>, log: &Path) -> io::Result<Started> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let stderr = file.try_clone()?;
    let mut command = command(launch)?;
    command
        .stdout(Stdio::from(file))
        .stderr(Stdio::from(stderr));
    let child = command.spawn()?;
    // The command holds the parent's copies of the log descriptors: close them now.
    drop(command);
    let pid = child
        .id()
        .and_then(|pid| i32::try_from(pid).ok())
        .ok_or_else(|| io::Error::other("the process exited before its pid was read"))?;
    // The start time is read once, right away: it is what later tells this process from
    // another that reuses its pid. A process that already exited is still a zombie here.
    let start_ticks = procfs::stat(pid)
        .map(|stat| stat.start_ticks)
        .ok_or_else(|| io::Error::other(format!("no /proc entry for the new process {pid}")))?;
    Ok(Started {
        child,
        pid,
        start_ticks,
    })
}

/// Waits for a started process to exit, then kills what it left in its group (a container
/// ends with its main process).
pub(crate) async fn wait(mut child: tokio::process::Child, pid: i32) -> Exit {
    let exit = match child.wait().await {
        Ok(status) => Exit::from_status(status),
        Err(error) => {
            tracing::warn!(pid, %error, "cannot wait for a container process");
            Exit::Unknown
        }
    };
    // Reaped a moment ago: any member left in the group keeps the group id from being
    // reused, so this reaches only the container's leftovers (or nothing: ESRCH).
    let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    exit
}

/// Sends `signal` to a container's process group: the recorded leader `pid` (started at
/// `start_ticks`) and everything in its group. Returns whether any process got it.
pub(crate) fn signal_container(pid: i32, start_ticks: u64, signal: Signal) -> bool {
    if procfs::exists(pid, start_ticks) {
        return killpg(Pid::from_raw(pid), signal).is_ok();
    }
    // The leader is gone; its group lives on in its remaining members, if any.
    let mut any = false;
    for member in procfs::group_members(pid, start_ticks) {
        any |= kill(Pid::from_raw(member), signal).is_ok();
    }
    any
}

/// How an exec probe or hook ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ExecOutcome {
    Exited(i32),
    TimedOut,
    FailedToStart(String),
}

/// An exec probe's or hook's outcome and its combined output (at most [`MAX_EXEC_OUTPUT`]
/// bytes, as the kubelet keeps).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ExecResult {
    pub outcome: ExecOutcome,
    pub output: String,
}

/// The kubelet's `maxReadLength` for exec probe output (10 KiB).
pub(crate) const MAX_EXEC_OUTPUT: usize = 10 * 1024;

/// Runs an exec probe or hook in its own process group, bounded by `timeout`; whatever it
/// leaves behind is killed when it ends.
pub(crate) async fn exec(launch: &Launch<'_>, timeout: Duration) -> ExecResult {
    let failed = |error: io::Error| ExecResult {
        outcome: ExecOutcome::FailedToStart(error.to_string()),
        output: String::new(),
    };
    let (reader, writer) = match io::pipe() {
        Ok(pipe) => pipe,
        Err(error) => return failed(error),
    };
    let mut command = match command(launch) {
        Ok(command) => command,
        Err(error) => return failed(error),
    };
    let stderr = match writer.try_clone() {
        Ok(stderr) => stderr,
        Err(error) => return failed(error),
    };
    command.stdout(writer).stderr(stderr);
    let spawned = command.spawn();
    drop(command);
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) => return failed(error),
    };
    let pid = child.id().and_then(|pid| i32::try_from(pid).ok());
    // A probe or hook abandoned half-way (its task cancelled) takes its processes with it.
    let mut guard = KillGroupOnDrop(pid);
    let output = tokio::spawn(read_limited(reader));
    let outcome = match tokio::time::timeout(timeout, child.wait()).await {
        Ok(Ok(status)) => ExecOutcome::Exited(Exit::from_status(status).exit_code()),
        Ok(Err(error)) => ExecOutcome::FailedToStart(error.to_string()),
        Err(_) => {
            if let Some(pid) = pid {
                let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
            }
            let _ = child.wait().await;
            ExecOutcome::TimedOut
        }
    };
    // Leftovers would hold the pipe open; the group id is still theirs (see `wait`).
    if let Some(pid) = guard.0.take() {
        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    }
    let output = match tokio::time::timeout(Duration::from_secs(1), output).await {
        Ok(Ok(output)) => output,
        _ => String::new(),
    };
    ExecResult { outcome, output }
}

/// Kills a process group when dropped, unless disarmed (`.0 = None`).
struct KillGroupOnDrop(Option<i32>);

impl Drop for KillGroupOnDrop {
    fn drop(&mut self) {
        if let Some(pid) = self.0.take() {
            // The leader is not reaped yet (its `Child` is dropped with this), so the group
            // id is still this group's.
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// Reads up to [`MAX_EXEC_OUTPUT`] bytes, then drains the rest so the writer never blocks.
async fn read_limited(reader: io::PipeReader) -> String {
    let fd: std::os::fd::OwnedFd = reader.into();
    let Ok(mut receiver) = tokio::net::unix::pipe::Receiver::from_owned_fd(fd) else {
        return String::new();
    };
    let mut kept = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        match receiver.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => {
                let room = MAX_EXEC_OUTPUT.saturating_sub(kept.len());
                kept.extend_from_slice(&buffer[..read.min(room)]);
            }
        }
    }
    String::from_utf8_lossy(&kept).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Vec<String> {
        vec!["/bin/sh".into(), "-c".into(), script.into()]
    }

    fn env() -> Vec<(String, String)> {
        vec![("PATH".into(), "/usr/bin:/bin".into())]
    }

    #[tokio::test]
    async fn a_container_logs_to_its_file_and_leads_its_own_group() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("0.log");
        let argv = sh("echo out; echo err >&2; echo $$ > pid; exit 3");
        let env = env();
        let launch = Launch {
            argv: &argv,
            env: &env,
            working_dir: dir.path(),
        };
        let started = start(&launch, &log).expect("start");
        let pid = started.pid;
        assert_eq!(wait(started.child, pid).await, Exit::Code(3));
        let text = std::fs::read_to_string(&log).expect("log");
        assert!(text.contains("out") && text.contains("err"), "{text:?}");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("pid"))
                .expect("pid file")
                .trim(),
            pid.to_string()
        );
    }

    #[tokio::test]
    async fn a_signal_reaches_the_whole_group_and_leftovers_die_with_the_leader() {
        let dir = tempfile::tempdir().expect("tempdir");
        let argv = sh("sleep 30 & echo $! > child; wait");
        let env = env();
        let launch = Launch {
            argv: &argv,
            env: &env,
            working_dir: dir.path(),
        };
        let started = start(&launch, &dir.path().join("0.log")).expect("start");
        let (pid, ticks) = (started.pid, started.start_ticks);
        let child_file = dir.path().join("child");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let grandchild: i32 = loop {
            if let Some(pid) = std::fs::read_to_string(&child_file)
                .ok()
                .and_then(|text| text.trim().parse().ok())
            {
                break pid;
            }
            assert!(std::time::Instant::now() < deadline, "no child pid");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(procfs::stat(grandchild).map(|s| s.pgrp), Some(pid));
        assert!(signal_container(pid, ticks, Signal::SIGTERM));
        assert_eq!(wait(started.child, pid).await, Exit::Signal(15));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while procfs::stat(grandchild).is_some_and(|s| !s.is_zombie() && s.pgrp == pid) {
            assert!(std::time::Instant::now() < deadline, "the sleep survived");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Nothing is left to signal, and a stale record signals nothing.
        assert!(!signal_container(pid, ticks, Signal::SIGKILL));
    }

    #[tokio::test]
    async fn a_missing_program_fails_to_start() {
        let dir = tempfile::tempdir().expect("tempdir");
        let argv = vec!["no-such-program-anywhere".to_string()];
        let env = env();
        let launch = Launch {
            argv: &argv,
            env: &env,
            working_dir: dir.path(),
        };
        let error = start(&launch, &dir.path().join("0.log"))
            .err()
            .expect("no such program");
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
    }

    #[tokio::test]
    async fn exec_captures_output_and_is_bounded_in_time() {
        let dir = tempfile::tempdir().expect("tempdir");
        let env = env();
        let argv = sh("echo hello; echo oops >&2; exit 1");
        let launch = Launch {
            argv: &argv,
            env: &env,
            working_dir: dir.path(),
        };
        let result = exec(&launch, Duration::from_secs(10)).await;
        assert_eq!(result.outcome, ExecOutcome::Exited(1));
        assert_eq!(result.output, "hello\noops\n");

        let argv = sh("sleep 30");
        let launch = Launch {
            argv: &argv,
            env: &env,
            working_dir: dir.path(),
        };
        let started = std::time::Instant::now();
        let result = exec(&launch, Duration::from_millis(300)).await;
        assert_eq!(result.outcome, ExecOutcome::TimedOut);
        assert!(started.elapsed() < Duration::from_secs(5));

        // A background child holding the output pipe does not hold the probe.
        let argv = sh("sleep 30 & echo done");
        let launch = Launch {
            argv: &argv,
            env: &env,
            working_dir: dir.path(),
        };
        let started = std::time::Instant::now();
        let result = exec(&launch, Duration::from_secs(10)).await;
        assert_eq!(result.outcome, ExecOutcome::Exited(0));
        assert_eq!(result.output, "done\n");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
