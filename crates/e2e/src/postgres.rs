//! A real PostgreSQL server on loopback, in its own temporary data directory, for the
//! operator suites and benchmarks.
//!
//! PostgreSQL refuses to run as root, so under root (CI) the data directory is handed to the
//! `postgres` system user that Debian's package creates, and the server runs as that user.
//!
//! [`PostgresOptions`] turns on TLS (a certificate the test made), password authentication and
//! the `pg_hba.conf` rules for TCP clients. Local (Unix socket) connections are always trusted,
//! so [`Postgres::socket_url`] reaches the server whatever the TCP rules demand.

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
    options: PostgresOptions,
}

/// How a [`Postgres`] is set up; the default is a plain server that trusts loopback.
#[derive(Clone, Debug, Default)]
pub struct PostgresOptions {
    /// A PEM certificate (chain) and its PEM private key: the server runs with `ssl=on`.
    pub tls: Option<(String, String)>,
    /// The `pg_hba.conf` lines for TCP clients, e.g. `hostssl all all 127.0.0.1/32 trust`.
    /// Default: `host all all 127.0.0.1/32 trust`.
    pub tcp_hba: Vec<String>,
    /// The superuser's password, set by initdb; [`Postgres::url`] then carries it.
    pub password: Option<String>,
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
        Self::start_with(PostgresOptions::default())
    }

    /// Initialises a cluster set up as `options` say and starts it on a free loopback port.
    pub fn start_with(options: PostgresOptions) -> anyhow::Result<Postgres> {
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
            options,
        };
        let mut initdb = postgres.command("initdb");
        initdb.arg("-D").arg(postgres.data_dir()).args([
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
        ]);
        if let Some(password) = &postgres.options.password {
            let file = postgres.dir.path().join("password");
            postgres.write_private(&file, password)?;
            initdb.arg(format!("--pwfile={}", file.display()));
        }
        let output = initdb.stdin(Stdio::null()).output().context("run initdb")?;
        if !output.status.success() {
            bail!(
                "initdb failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        postgres.write_configuration()?;
        postgres.start_again()?;
        Ok(postgres)
    }

    /// Writes `pg_hba.conf` and the TLS files into the data directory.
    fn write_configuration(&self) -> anyhow::Result<()> {
        let mut hba = String::from("local all all trust\n");
        if self.options.tcp_hba.is_empty() {
            hba.push_str("host all all 127.0.0.1/32 trust\n");
        }
        for line in &self.options.tcp_hba {
            hba.push_str(line);
            hba.push('\n');
        }
        self.write_private(&self.data_dir().join("pg_hba.conf"), &hba)?;
        if let Some((cert, key)) = &self.options.tls {
            self.write_private(&self.data_dir().join("server.crt"), cert)?;
            // PostgreSQL refuses a key that others may read.
            self.write_private(&self.data_dir().join("server.key"), key)?;
        }
        Ok(())
    }

    /// Writes a file readable by the server's user only.
    fn write_private(&self, path: &Path, content: &str) -> anyhow::Result<()> {
        std::fs::write(path, content).with_context(|| format!("write {}", path.display()))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        if let Some((uid, gid)) = self.run_as {
            chown(path, Some(uid), Some(gid))
                .with_context(|| format!("hand {} to postgres", path.display()))?;
        }
        Ok(())
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
        let mut command = self.command("postgres");
        command
            .arg("-D")
            .arg(self.data_dir())
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-p", &self.port.to_string()])
            .arg("-k")
            .arg(&socket_dir)
            .args(["-c", "fsync=off", "-c", "max_connections=300"]);
        if self.options.tls.is_some() {
            command.args(["-c", "ssl=on", "-c", "ssl_cert_file=server.crt"]);
            command.args(["-c", "ssl_key_file=server.key"]);
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .context("start postgres")?;
        self.child = Some(child);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            // Through the socket: the TCP rules may demand TLS or a password.
            let ready = self
                .command("pg_isready")
                .arg("-h")
                .arg(self.dir.path())
                .args(["-p", &self.port.to_string(), "-U", "postgres"])
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

    /// The superuser's connection URL over TCP (with the password, if one is set).
    pub fn url(&self) -> String {
        let password = self
            .options
            .password
            .as_ref()
            .map(|p| format!(":{p}"))
            .unwrap_or_default();
        format!(
            "postgres://postgres{password}@127.0.0.1:{}/postgres",
            self.port
        )
    }

    /// The superuser's connection string through the Unix socket, which is always trusted
    /// (key-value form, since a socket path is not a URL host).
    pub fn socket_url(&self) -> String {
        format!(
            "host={} port={} user=postgres dbname=postgres",
            self.dir.path().display(),
            self.port
        )
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
