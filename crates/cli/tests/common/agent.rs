//! A `finale node` child process for the node suites, and the processes its Pods leave.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A running `finale node` child process.
pub struct Agent {
    child: Option<Child>,
    pub args: Vec<String>,
    pub log_path: PathBuf,
    /// `https://ADDR` of its log endpoint, from its banner.
    pub endpoint: String,
}

impl Agent {
    pub fn spawn(args: Vec<String>, log_path: PathBuf) -> Agent {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .expect("agent log");
        let mut child = Command::new(super::binary())
            .arg("node")
            .args(&args)
            .env(
                "RUST_LOG",
                std::env::var("FINALE_TEST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn finale node");
        let stdout = child.stdout.take().expect("agent stdout");
        let (lines_tx, lines_rx) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = lines_tx.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        let endpoint = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines_rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some((_, url)) = line.split_once("its log endpoint is ") {
                        break url.trim().to_string();
                    }
                }
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "finale node did not start; its log:\n{}",
                        std::fs::read_to_string(&log_path).unwrap_or_default()
                    );
                }
            }
        };
        Agent {
            child: Some(child),
            args,
            log_path,
            endpoint,
        }
    }

    /// `kill -9`: no chance to clean up anything.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the same agent again (same root directory and flags).
    pub fn restart(&mut self) {
        self.kill9();
        *self = Agent::spawn(self.args.clone(), self.log_path.clone());
    }

    pub fn port(&self) -> u16 {
        self.endpoint
            .rsplit(':')
            .next()
            .and_then(|port| port.parse().ok())
            .expect("endpoint port")
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Live processes whose working directory is under `dir`.
pub fn processes_under(dir: &Path) -> Vec<i32> {
    let Ok(dir) = std::fs::canonicalize(dir) else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| alive(*pid))
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(&dir))
        })
        .collect()
}

/// Whether `pid` runs (exists and is not a zombie).
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

/// SIGKILLs every process whose working directory is under `dir`: what a test's Pods left.
pub fn kill_processes_under(dir: &Path) {
    for pid in processes_under(dir) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}
