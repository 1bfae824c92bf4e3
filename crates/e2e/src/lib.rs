//! Fixtures for end-to-end suites: the built `finale` binary, kubectl with a private cache, and
//! real etcd as child processes on loopback.
//!
//! Every child gets its own log file rather than the test's stdout (cargo-nextest reports a
//! child holding the test's output open as a leak) and is killed and reaped on drop.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// A `finale server` child process on 127.0.0.1 with an ephemeral port.
pub struct FinaleServer {
    child: Option<Child>,
    binary: PathBuf,
    pub data_dir: PathBuf,
    pub url: String,
    pub kubeconfig: PathBuf,
    /// How long the start took until the server printed its address.
    pub startup: Duration,
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
        std::fs::create_dir_all(data_dir)
            .with_context(|| format!("create {}", data_dir.display()))?;
        let log_path = data_dir.join("server.log");
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
            .args(extra_args)
            .env(
                "RUST_LOG",
                std::env::var("FINALE_TEST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .with_context(|| format!("spawn {}", binary.display()))?;
        let stdout = child.stdout.take().context("no stdout pipe")?;
        let mut lines = BufReader::new(stdout).lines();
        let mut url = None;
        let mut kubeconfig = None;
        for line in lines.by_ref() {
            let line = line.context("read server stdout")?;
            if let Some(rest) = line.strip_prefix("finale is serving on ") {
                url = rest.split_whitespace().next().map(str::to_string);
            } else if let Some(path) = line.strip_prefix("export KUBECONFIG=") {
                kubeconfig = Some(PathBuf::from(path));
                break;
            }
        }
        // Keep draining stdout so the child never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let startup = started.elapsed();
        let (Some(url), Some(kubeconfig)) = (url, kubeconfig) else {
            let _ = child.kill();
            let _ = child.wait();
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            bail!("finale server exited before it was ready; its log:\n{log}");
        };
        Ok(FinaleServer {
            child: Some(child),
            binary: binary.to_path_buf(),
            data_dir: data_dir.to_path_buf(),
            url,
            kubeconfig,
            startup,
        })
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
        std::fs::read_to_string(self.data_dir.join("pki").join("ca.crt")).context("read ca.crt")
    }

    /// `kill -9`: no chance to flush or clean up.
    pub fn kill9(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill().context("SIGKILL")?;
            child.wait().context("reap")?;
        }
        Ok(())
    }

    /// SIGTERM, then wait (bounded) for a clean exit; returns the exit status code.
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

    /// Starts the same binary again on the same data directory and address.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill9()?;
        let listen = self.url.trim_start_matches("https://").to_string();
        let again = FinaleServer::start_with(&self.binary, &self.data_dir, &listen, &[])?;
        *self = again;
        Ok(())
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.data_dir.join("server.log")).unwrap_or_default()
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

/// A free TCP port on 127.0.0.1 (bound then released).
pub fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A single-member etcd on loopback with its own data directory, as Debian packages it.
pub struct Etcd {
    child: Child,
    pub endpoint: String,
    _dir: tempfile::TempDir,
}

impl Etcd {
    pub fn start() -> anyhow::Result<Etcd> {
        let dir = tempfile::tempdir()?;
        let client = free_port()?;
        let peer = free_port()?;
        let endpoint = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let log = std::fs::File::create(dir.path().join("etcd.log"))?;
        let child = Command::new(std::env::var("ETCD").unwrap_or_else(|_| "etcd".into()))
            .args(["--name", "finale-test", "--data-dir"])
            .arg(dir.path().join("data"))
            .args([
                "--listen-client-urls",
                &endpoint,
                "--advertise-client-urls",
                &endpoint,
            ])
            .args([
                "--listen-peer-urls",
                &peer_url,
                "--initial-advertise-peer-urls",
                &peer_url,
            ])
            .args(["--initial-cluster", &format!("finale-test={peer_url}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .context("spawn etcd (install Debian's etcd-server)")?;
        let mut etcd = Etcd {
            child,
            endpoint,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", client)).is_err() {
            if Instant::now() > deadline || etcd.child.try_wait()?.is_some() {
                bail!("etcd did not start listening on {}", etcd.endpoint);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(etcd)
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
