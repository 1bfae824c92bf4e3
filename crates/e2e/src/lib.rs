//! Fixtures for end-to-end suites: the built `finale` binary, kubectl with a private cache, and
//! real etcd as child processes on loopback.
//!
//! Every child gets its own log file rather than the test's stdout (cargo-nextest reports a
//! child holding the test's output open as a leak) and is killed and reaped on drop.

use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
pub use nix::sys::signal::Signal;
use nix::sys::signal::kill;
use nix::unistd::Pid;

/// How long a `finale server` may take to print its address (a debug build on a loaded
/// 2-core machine, possibly recovering a store after `kill -9`).
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// A `finale server` child process on 127.0.0.1 with an ephemeral port.
pub struct FinaleServer {
    child: Option<Child>,
    binary: PathBuf,
    pub data_dir: PathBuf,
    /// The server's stderr, appended over restarts.
    pub log_path: PathBuf,
    pub url: String,
    pub kubeconfig: PathBuf,
    /// How long the start took until the server printed its address.
    pub startup: Duration,
    /// Every line the server has printed on stdout so far.
    stdout: Arc<Mutex<Vec<String>>>,
    /// The extra `finale server` arguments, used again by [`FinaleServer::restart`].
    args: Vec<String>,
    /// The etcd this server keeps its objects in, when the fixture started one for it
    /// (`FINALE_TEST_STORE=etcd`).
    pub etcd: Option<Arc<Mutex<Etcd>>>,
}

/// The environment variable that runs every suite's servers on etcd instead of the embedded
/// store: `FINALE_TEST_STORE=etcd` (a fresh in-memory etcd member per server).
pub const TEST_STORE_VAR: &str = "FINALE_TEST_STORE";

/// The suffix of a test binary's name that runs its servers on etcd: `tests/x_on_etcd.rs`
/// includes the suite `tests/x.rs`, so that one `cargo nextest run` runs it on both backends.
pub const ON_ETCD_SUFFIX: &str = "_on_etcd";

/// Whether the suites run on etcd: `FINALE_TEST_STORE=etcd`, or a test binary named
/// `…_on_etcd` (cargo names it `…_on_etcd-<hash>`).
pub fn test_store_is_etcd() -> bool {
    if std::env::var(TEST_STORE_VAR).is_ok_and(|store| store == "etcd") {
        return true;
    }
    std::env::current_exe().is_ok_and(|exe| {
        exe.file_name()
            .and_then(|name| name.to_str())
            .and_then(|name| name.rsplit_once('-'))
            .is_some_and(|(target, _hash)| target.ends_with(ON_ETCD_SUFFIX))
    })
}

impl FinaleServer {
    /// Starts `binary server` on `data_dir` and waits until it prints its address.
    pub fn start(binary: &Path, data_dir: &Path) -> anyhow::Result<FinaleServer> {
        Self::start_with(binary, data_dir, "127.0.0.1:0", &[])
    }

    pub fn start_with(
        binary: &Path,
        data_dir: &Path,
        listen: &str,
        extra_args: &[&str],
    ) -> anyhow::Result<FinaleServer> {
        let log_path = data_dir.join("server.log");
        Self::start_logging_to(binary, data_dir, listen, extra_args, &log_path)
    }

    /// As [`FinaleServer::start_with`], with the log at `log_path` instead of in the data
    /// directory (for a data directory on a filesystem that a test cuts the power of).
    ///
    /// With `FINALE_TEST_STORE=etcd` and no `--etcd-servers` among `extra_args`, the server
    /// runs on a fresh etcd member that this fixture starts and keeps.
    pub fn start_logging_to(
        binary: &Path,
        data_dir: &Path,
        listen: &str,
        extra_args: &[&str],
        log_path: &Path,
    ) -> anyhow::Result<FinaleServer> {
        let mut args: Vec<String> = extra_args.iter().map(|arg| arg.to_string()).collect();
        let mut etcd = None;
        if test_store_is_etcd() && !args.iter().any(|arg| arg.starts_with("--etcd-servers")) {
            let member = Etcd::start_in_memory().context("start etcd for the server")?;
            args.extend(["--etcd-servers".to_string(), member.endpoint.clone()]);
            etcd = Some(Arc::new(Mutex::new(member)));
        }
        Self::spawn(binary, data_dir, listen, args, log_path, etcd)
    }

    fn spawn(
        binary: &Path,
        data_dir: &Path,
        listen: &str,
        args: Vec<String>,
        log_path: &Path,
        etcd: Option<Arc<Mutex<Etcd>>>,
    ) -> anyhow::Result<FinaleServer> {
        // Only the log's directory: a data directory elsewhere is the server's to create.
        if let Some(log_dir) = log_path.parent() {
            std::fs::create_dir_all(log_dir)
                .with_context(|| format!("create {}", log_dir.display()))?;
        }
        let log_path = log_path.to_path_buf();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("open {}", log_path.display()))?;
        let started = Instant::now();
        let mut child = Command::new(binary)
            .arg("server")
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--listen")
            .arg(listen)
            .args(&args)
            .env(
                "RUST_LOG",
                std::env::var("FINALE_TEST_LOG").unwrap_or_else(|_| "info".into()),
            )
            // The log is a file that ends up in assertion messages: no colour codes.
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .with_context(|| format!("spawn {}", binary.display()))?;
        let stdout = child.stdout.take().context("no stdout pipe")?;
        // Read stdout on a thread so the wait for the address is bounded in time; the thread
        // keeps draining afterwards so the child never blocks on a full pipe.
        let (lines_tx, lines_rx) = mpsc::channel::<String>();
        let printed = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&printed);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                kept.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(line.clone());
                // The receiver is gone once the server is ready; keep draining anyway.
                let _ = lines_tx.send(line);
            }
        });
        let deadline = started + STARTUP_TIMEOUT;
        let mut url = None;
        let mut kubeconfig = None;
        let failure = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines_rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix("finale is serving on ") {
                        url = rest.split_whitespace().next().map(str::to_string);
                    } else if let Some(path) = line.strip_prefix("export KUBECONFIG=") {
                        kubeconfig = Some(PathBuf::from(path));
                    }
                    if url.is_some() && kubeconfig.is_some() {
                        break None;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    // stdout closed: the server exited (or closed it) before it was ready.
                    let status = wait_bounded(&mut child, Duration::from_secs(5));
                    break Some(format!(
                        "finale server exited before it was ready ({})",
                        status.map_or_else(|| "still running".to_string(), |s| s.to_string())
                    ));
                }
                Err(RecvTimeoutError::Timeout) => {
                    break Some(format!(
                        "finale server did not print its address within {STARTUP_TIMEOUT:?}"
                    ));
                }
            }
        };
        let startup = started.elapsed();
        let (None, Some(url), Some(kubeconfig)) = (&failure, url, kubeconfig) else {
            let _ = child.kill();
            let _ = child.wait();
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            bail!(
                "{}; its log ({}):\n{log}",
                failure.unwrap_or_else(|| "finale server printed an incomplete banner".into()),
                log_path.display()
            );
        };
        Ok(FinaleServer {
            child: Some(child),
            binary: binary.to_path_buf(),
            data_dir: data_dir.to_path_buf(),
            log_path,
            url,
            kubeconfig,
            startup,
            stdout: printed,
            args,
            etcd,
        })
    }

    /// The lines the server has printed on stdout so far (the banner and what follows it).
    pub fn stdout_lines(&self) -> Vec<String> {
        self.stdout
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// `host:port` the server listens on (from its printed URL).
    pub fn addr(&self) -> &str {
        self.url.trim_start_matches("https://")
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.addr()
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0)
    }

    /// Whether the child is still running (false once it exited, was killed or stopped).
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The admin bearer token from the kubeconfig.
    pub fn token(&self) -> anyhow::Result<String> {
        let text = std::fs::read_to_string(&self.kubeconfig)?;
        text.lines()
            .find_map(|l| {
                l.trim()
                    .strip_prefix("token:")
                    .map(|t| t.trim().trim_matches('"').to_string())
            })
            .context("no token in kubeconfig")
    }

    /// The CA certificate (PEM) clients must trust.
    pub fn ca_pem(&self) -> anyhow::Result<String> {
        // `--pki-dir DIR` (or `--pki-dir=DIR`) moves the PKI out of the data directory.
        let pki_dir = self
            .args
            .iter()
            .position(|arg| arg == "--pki-dir")
            .and_then(|at| self.args.get(at + 1).cloned())
            .or_else(|| {
                self.args
                    .iter()
                    .find_map(|arg| arg.strip_prefix("--pki-dir=").map(str::to_string))
            })
            .map(PathBuf::from)
            .unwrap_or_else(|| self.data_dir.join("pki"));
        let path = pki_dir.join("ca.crt");
        std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))
    }

    /// `kill -9`: no chance to flush or clean up.
    pub fn kill9(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill().context("SIGKILL")?;
            child.wait().context("reap")?;
        }
        Ok(())
    }

    /// Sends `signal` without waiting: `SIGSTOP` freezes the server (its Lease goes unrenewed,
    /// its controllers do nothing) until `SIGCONT`.
    pub fn signal(&self, signal: Signal) -> anyhow::Result<()> {
        let child = self.child.as_ref().context("the server is not running")?;
        kill(Pid::from_raw(child.id() as i32), signal).context("send signal")
    }

    /// Sends `signal` (e.g. SIGTERM), then waits (bounded, 20 s) for the exit; returns the exit
    /// status code (`None` if it died of a signal or was not running).
    pub fn terminate(&mut self, signal: Signal) -> anyhow::Result<Option<i32>> {
        let Some(mut child) = self.child.take() else {
            return Ok(None);
        };
        kill(Pid::from_raw(child.id() as i32), signal).context("send signal")?;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok(status.code());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("finale did not exit within 20 s of {signal}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts the same binary again on the same data directory, address, arguments and etcd.
    /// A server that is still running is killed first (`kill -9`); one stopped by
    /// [`FinaleServer::terminate`] is simply started again.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill9()?;
        let listen = self.addr().to_string();
        let again = FinaleServer::spawn(
            &self.binary,
            &self.data_dir,
            &listen,
            self.args.clone(),
            &self.log_path,
            self.etcd.clone(),
        )?;
        *self = again;
        Ok(())
    }

    /// The whole server log (stderr of every start on this data directory, appended).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// The last `lines` lines of the log, for assertion messages.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = self.log();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for FinaleServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// kubectl against one server, with its own discovery and HTTP cache directory.
pub struct Kubectl {
    kubeconfig: PathBuf,
    cache_dir: tempfile::TempDir,
}

impl Kubectl {
    pub fn new(kubeconfig: &Path) -> anyhow::Result<Kubectl> {
        Ok(Kubectl {
            kubeconfig: kubeconfig.to_path_buf(),
            cache_dir: tempfile::tempdir()?,
        })
    }

    /// The kubectl to run: `KUBECTL` if set, else the dispatcher on PATH.
    pub fn binary() -> String {
        std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into())
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(Self::binary());
        command
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.cache_dir.path())
            .args(args)
            .env("HOME", self.cache_dir.path())
            .stdin(Stdio::null());
        command
    }

    /// Starts kubectl in the background (e.g. `get -w`), collecting its output; see
    /// [`BackgroundKubectl`].
    pub fn spawn(&self, args: &[&str]) -> anyhow::Result<BackgroundKubectl> {
        let mut command = self.command(args);
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = command.spawn().context("spawn kubectl")?;
        let output = Arc::new(Mutex::new(String::new()));
        let mut readers = Vec::new();
        let pipes: [Box<dyn Read + Send>; 2] = [
            Box::new(child.stdout.take().context("kubectl stdout")?),
            Box::new(child.stderr.take().context("kubectl stderr")?),
        ];
        for pipe in pipes {
            let sink = Arc::clone(&output);
            readers.push(std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    if let Ok(mut out) = sink.lock() {
                        out.push_str(&line);
                        out.push('\n');
                    }
                }
            }));
        }
        Ok(BackgroundKubectl {
            child: Some(child),
            output,
            readers,
            args: args.join(" "),
        })
    }

    /// Runs kubectl with a deadline and returns its output, whatever the exit code.
    pub fn run(&self, args: &[&str]) -> anyhow::Result<Output> {
        self.run_with_stdin(args, None)
    }

    pub fn run_with_stdin(&self, args: &[&str], stdin: Option<&str>) -> anyhow::Result<Output> {
        let mut command = self.command(args);
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        if stdin.is_some() {
            command.stdin(Stdio::piped());
        }
        let mut child = command.spawn().context("spawn kubectl")?;
        if let Some(input) = stdin {
            use std::io::Write;
            let mut pipe = child.stdin.take().context("kubectl stdin")?;
            pipe.write_all(input.as_bytes())?;
        }
        let pid = child.id();
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&done);
        // A hung kubectl must not hang the suite.
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(120);
            while Instant::now() < deadline {
                if flag.load(std::sync::atomic::Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
        });
        let output = child.wait_with_output().context("wait for kubectl")?;
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(output)
    }

    /// Runs kubectl and fails with its stderr unless it exits 0; returns stdout.
    pub fn ok(&self, args: &[&str]) -> anyhow::Result<String> {
        self.ok_with_stdin(args, None)
    }

    pub fn ok_with_stdin(&self, args: &[&str], stdin: Option<&str>) -> anyhow::Result<String> {
        let output = self.run_with_stdin(args, stdin)?;
        if !output.status.success() {
            bail!(
                "kubectl {} failed ({}):\nstdout: {}\nstderr: {}",
                args.join(" "),
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }
}

/// Waits up to `timeout` for `child` to exit; `None` if it is still running.
fn wait_bounded(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => return None,
        }
    }
}

/// A long-running kubectl (e.g. `get -w`) whose combined stdout and stderr are collected as
/// they arrive. Killed and reaped on drop.
pub struct BackgroundKubectl {
    child: Option<Child>,
    output: Arc<Mutex<String>>,
    readers: Vec<std::thread::JoinHandle<()>>,
    args: String,
}

impl BackgroundKubectl {
    /// Everything printed so far (stdout and stderr, interleaved by arrival).
    pub fn output(&self) -> String {
        self.output.lock().map(|o| o.clone()).unwrap_or_default()
    }

    /// Waits until `done(output so far)` holds; fails with the output after `timeout`.
    pub fn wait_for(
        &self,
        timeout: Duration,
        what: &str,
        done: impl Fn(&str) -> bool,
    ) -> anyhow::Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let output = self.output();
            if done(&output) {
                return Ok(output);
            }
            if Instant::now() > deadline {
                bail!(
                    "kubectl {} did not print {what} within {timeout:?}; it printed:\n{output}",
                    self.args
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits up to `timeout` for kubectl to exit by itself; `None` if it is still running.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let status = wait_bounded(self.child.as_mut()?, timeout)?;
        self.child = None;
        self.join_readers();
        Some(status)
    }

    /// Kills kubectl (SIGKILL) and returns everything it printed.
    pub fn kill(&mut self) -> String {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.join_readers();
        self.output()
    }

    fn join_readers(&mut self) {
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
    }
}

impl Drop for BackgroundKubectl {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A free TCP port on 127.0.0.1 (bound then released).
pub fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

pub mod aws_proxy;
mod etcd;
pub mod moto;
pub mod operator;
pub mod postgres;
pub mod stall_proxy;
pub use etcd::{Etcd, EtcdCluster};
pub use postgres::{Postgres, PostgresOptions};
pub use stall_proxy::StallProxy;
