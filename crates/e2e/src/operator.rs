//! A `finale operator <name>` child process, for suites that stop, kill and restart operators
//! around deletes.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::free_port;

/// How an operator finds its API server when it is not given `--kubeconfig`: the environment
/// and working directory it starts in.
#[derive(Clone, Debug, Default)]
pub struct Environment {
    /// `$KUBECONFIG`; unset when `None`.
    pub kubeconfig: Option<String>,
    /// `$HOME` (where `~/.kube/config` is looked up); inherited when `None`.
    pub home: Option<PathBuf>,
    /// The working directory; inherited when `None`.
    pub current_dir: Option<PathBuf>,
}

/// A running operator with its own log file and metrics port on loopback.
pub struct OperatorProcess {
    child: Option<Child>,
    binary: PathBuf,
    name: String,
    /// Passed as `--kubeconfig` when set.
    kubeconfig: Option<PathBuf>,
    environment: Environment,
    extra_args: Vec<String>,
    pub log_path: PathBuf,
    pub identity: String,
    pub metrics_port: u16,
}

impl OperatorProcess {
    /// Starts `binary operator <name>` against `kubeconfig`, logging to `log_dir`, and waits
    /// (bounded) until its metrics endpoint answers.
    pub fn start(
        binary: &Path,
        name: &str,
        kubeconfig: &Path,
        log_dir: &Path,
        identity: &str,
        extra_args: &[&str],
    ) -> anyhow::Result<OperatorProcess> {
        Self::start_in(
            binary,
            name,
            Some(kubeconfig),
            Environment::default(),
            log_dir,
            identity,
            extra_args,
        )
    }

    /// Like [`OperatorProcess::start`], with `--kubeconfig` only if `kubeconfig` is given and
    /// in `environment`, to test how the operator finds its API server.
    pub fn start_in(
        binary: &Path,
        name: &str,
        kubeconfig: Option<&Path>,
        environment: Environment,
        log_dir: &Path,
        identity: &str,
        extra_args: &[&str],
    ) -> anyhow::Result<OperatorProcess> {
        let mut operator = OperatorProcess {
            child: None,
            binary: binary.to_path_buf(),
            name: name.to_string(),
            kubeconfig: kubeconfig.map(Path::to_path_buf),
            environment,
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            log_path: log_dir.join(format!("operator-{identity}.log")),
            identity: identity.to_string(),
            metrics_port: 0,
        };
        operator.spawn()?;
        Ok(operator)
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        self.metrics_port = free_port()?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .with_context(|| format!("open {}", self.log_path.display()))?;
        let mut command = Command::new(&self.binary);
        command.args(["operator", &self.name]);
        if let Some(kubeconfig) = &self.kubeconfig {
            command.arg("--kubeconfig").arg(kubeconfig);
        }
        // Tests never run in a cluster; an inherited KUBECONFIG must not leak in.
        command
            .env_remove("KUBECONFIG")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBERNETES_SERVICE_PORT");
        if let Some(list) = &self.environment.kubeconfig {
            command.env("KUBECONFIG", list);
        }
        if let Some(home) = &self.environment.home {
            command.env("HOME", home);
        }
        if let Some(dir) = &self.environment.current_dir {
            command.current_dir(dir);
        }
        let child = command
            .args(["--identity", &self.identity])
            .args([
                "--metrics-addr",
                &format!("127.0.0.1:{}", self.metrics_port),
            ])
            .args(&self.extra_args)
            .env(
                "RUST_LOG",
                std::env::var("FINALE_TEST_LOG").unwrap_or_else(|_| "info,kube=warn".into()),
            )
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .with_context(|| format!("spawn {} operator {}", self.binary.display(), self.name))?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if self.metrics().is_ok() {
                return Ok(());
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                bail!(
                    "finale operator {} exited at start ({status}); its log:\n{}",
                    self.name,
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        bail!(
            "finale operator {} did not serve metrics within 60 s; its log:\n{}",
            self.name,
            self.log()
        )
    }

    /// The text of `GET /metrics`.
    pub fn metrics(&self) -> anyhow::Result<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.metrics_port))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")?;
        let mut response = String::new();
        stream.read_to_string(&mut response)?;
        let Some((head, body)) = response.split_once("\r\n\r\n") else {
            bail!("malformed metrics response");
        };
        if !head.starts_with("HTTP/1.1 200") {
            bail!("metrics answered {head}");
        }
        Ok(body.to_string())
    }

    /// The value of one sample line of the metrics, e.g. `leader{controller="database"}`.
    pub fn metric(&self, series: &str) -> Option<f64> {
        let text = self.metrics().ok()?;
        text.lines().find_map(|line| {
            line.strip_prefix(series)
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|value| value.parse().ok())
        })
    }

    /// SIGTERM and a bounded wait: the operator finishes in-flight work and gives up its Lease.
    pub fn stop(&mut self) -> anyhow::Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).context("SIGTERM")?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if child.try_wait()?.is_some() {
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("the operator did not exit within 30 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `kill -9`: no chance to release the Lease.
    pub fn kill9(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill().context("SIGKILL")?;
            child.wait().context("reap")?;
        }
        Ok(())
    }

    /// Starts it again with the same arguments (a new metrics port).
    pub fn start_again(&mut self) -> anyhow::Result<()> {
        self.kill9()?;
        self.spawn()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A kubeconfig in `dir` that runs `finale operator <operator>` (`database`, `tenant`,
/// `cloud-gc` or `all`) with least privilege, as a user would set it up on a real cluster:
/// `finale operator <operator> --print-rbac` applied by the admin of `admin_kubeconfig` with
/// `kubectl apply`, and a token of the printed ServiceAccount from `kubectl create token`.
pub fn least_privilege_kubeconfig(
    binary: &Path,
    operator: &str,
    admin_kubeconfig: &Path,
    dir: &Path,
) -> anyhow::Result<PathBuf> {
    let printed = Command::new(binary)
        .args(["operator", operator, "--print-rbac"])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("run {} operator {operator} --print-rbac", binary.display()))?;
    if !printed.status.success() {
        bail!(
            "finale operator {operator} --print-rbac failed: {}",
            String::from_utf8_lossy(&printed.stderr)
        );
    }
    let manifests = String::from_utf8(printed.stdout).context("--print-rbac printed non-UTF-8")?;
    let admin = crate::Kubectl::new(admin_kubeconfig)?;
    // The ServiceAccount is the one the operator printed, as `apply -o name` reports it.
    let applied = admin.ok_with_stdin(&["apply", "-f", "-", "-o", "name"], Some(&manifests))?;
    let service_account = applied
        .lines()
        .find_map(|line| line.trim().strip_prefix("serviceaccount/"))
        .with_context(|| format!("--print-rbac printed no ServiceAccount: {applied}"))?
        .to_string();
    let token = admin.ok(&[
        "create",
        "token",
        &service_account,
        "-n",
        "finale-system",
        "--duration",
        "2h",
    ])?;
    let kubeconfig = dir.join(format!("{service_account}.kubeconfig"));
    std::fs::copy(admin_kubeconfig, &kubeconfig)
        .with_context(|| format!("copy {}", admin_kubeconfig.display()))?;
    // A user of its own: the admin's entry may carry a client certificate, which would win.
    let own = crate::Kubectl::new(&kubeconfig)?;
    own.ok(&[
        "config",
        "set-credentials",
        &service_account,
        &format!("--token={}", token.trim()),
    ])?;
    own.ok(&[
        "config",
        "set-context",
        "--current",
        "--user",
        &service_account,
    ])?;
    Ok(kubeconfig)
}
