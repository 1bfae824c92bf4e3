//! A real PostgreSQL server on loopback, in its own temporary data directory, for the
//! operator suites and benchmarks.
//!
//! PostgreSQL refuses to run as root, so under root (CI) the data directory is handed to the
//! `postgres` system user that Debian's package creates, and the server runs as that user.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::{Gid, Pid, Uid, User, chown, geteuid};

use crate::free_port;

/// How long PostgreSQL may take to accept connections (a loaded 2-core machine).
const READY_TIMEOUT: Duration = Duration::from_secs(60);

pub struct Postgres {
    child: Option<Child>,
    bindir: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    run_as: Option<(Uid, Gid)>,
}

/// The directory of `initdb` and `postgres`: `$FINALE_PG_BINDIR`, else the newest
/// `/usr/lib/postgresql/*/bin` (Debian's layout; they are not on PATH).
fn bindir() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("FINALE_PG_BINDIR") {
        return Ok(PathBuf::from(dir));
    }
    let mut candidates: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    candidates.sort();
    candidates.pop().map(|(_, bin)| bin).context(
        "PostgreSQL is not installed: install Debian's `postgresql` package, or set \
         FINALE_PG_BINDIR to the directory holding initdb and postgres",
    )
}

impl Postgres {
    /// Initialises a cluster and starts it on a free loopback port.
    pub fn start() -> anyhow::Result<Postgres> {
        let bindir = bindir()?;
        let dir = tempfile::Builder::new()
            .prefix("finale-pg-")
            .tempdir()
            .context("create PostgreSQL's directory")?;
        let run_as = if geteuid().is_root() {
            let user = User::from_name("postgres")
                .context("look up the postgres user")?
                .context("PostgreSQL will not run as root and there is no `postgres` user: install Debian's `postgresql` package")?;
            Some((user.uid, user.gid))
        } else {
            None
        };
        if let Some((uid, gid)) = run_as {
            chown(dir.path(), Some(uid), Some(gid)).context("hand the directory to postgres")?;
        }
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))?;
        let mut postgres = Postgres {
            child: None,
            bindir,
            dir,
            port: free_port()?,
            run_as,
        };
        let output = postgres
            .command("initdb")
            .arg("-D")
            .arg(postgres.data_dir())
            .args(["-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"])
            .stdin(Stdio::null())
            .output()
            .context("run initdb")?;
        if !output.status.success() {
            bail!(
                "initdb failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        postgres.start_again()?;
        Ok(postgres)
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("postgres.log")
    }

    fn command(&self, program: &str) -> Command {
        let mut command = Command::new(self.bindir.join(program));
        if let Some((uid, gid)) = self.run_as {
            command.uid(uid.as_raw()).gid(gid.as_raw());
        }
        command
    }

    /// Starts the server (again) on the same port and data: after [`Postgres::stop`], this is
    /// the backend coming back from an outage.
    pub fn start_again(&mut self) -> anyhow::Result<()> {
        if self.child.is_some() {
            return Ok(());
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .context("open the PostgreSQL log")?;
        if let Some((uid, gid)) = self.run_as {
            chown(&self.log_path(), Some(uid), Some(gid))?;
        }
        let socket_dir = self.dir.path().to_path_buf();
        let child = self
            .command("postgres")
            .arg("-D")
            .arg(self.data_dir())
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-p", &self.port.to_string()])
            .arg("-k")
            .arg(&socket_dir)
            .args(["-c", "fsync=off", "-c", "max_connections=300"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .context("start postgres")?;
        self.child = Some(child);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let ready = self
                .command("pg_isready")
                .args([
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &self.port.to_string(),
                    "-U",
                    "postgres",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|status| status.success());
            if ready {
                return Ok(());
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                bail!(
                    "postgres exited at start ({status}):\n{}",
                    self.log_tail(30)
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "postgres did not accept connections within {READY_TIMEOUT:?}:\n{}",
                    self.log_tail(30)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A fast shutdown (SIGINT: open sessions are cut), waited for: the outage begins.
    pub fn stop(&mut self) -> anyhow::Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).context("SIGINT postgres")?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.wait();
        Ok(())
    }

    /// The superuser's connection URL.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    pub fn directory(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGQUIT: immediate shutdown, nothing to keep.
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGQUIT);
            let deadline = Instant::now() + Duration::from_secs(5);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
