//! etcd as child processes on loopback, as Debian's `etcd-server` runs it: one member
//! ([`Etcd`]) or a cluster of several ([`EtcdCluster`]) for member-failure tests.
//!
//! Every member gets fresh ports and every cluster a token of its own, so that tests running
//! side by side never join each other. Members are killed and reaped on drop.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;

use crate::free_port;

/// How long a member (or a whole cluster) may take to listen and elect a leader.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// One etcd member on loopback with its own data directory.
///
/// [`Etcd::start`] keeps the data on disk (benchmarks compare against it);
/// [`Etcd::start_in_memory`] puts it on `/dev/shm` when there is one (etcd 3.4 has no
/// `--unsafe-no-fsync`; memory keeps fsync cheap), for tests. [`Etcd::stop`] and
/// [`Etcd::start_again`] take the member down and bring it back on the same ports and data,
/// for tests of an unavailable etcd.
pub struct Etcd {
    child: Option<Child>,
    /// `http://127.0.0.1:<client port>`.
    pub endpoint: String,
    /// The member's `--name`.
    pub name: String,
    client_port: u16,
    command: Vec<String>,
    log_path: PathBuf,
    /// The data directory of a single member; a cluster's members live in the cluster's.
    _dir: Option<tempfile::TempDir>,
}

/// What one member says of the cluster (`/v3/maintenance/status`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberStatus {
    /// This member's ID.
    pub member_id: String,
    /// The ID of the member it follows (its own when it leads), `0` without a leader.
    pub leader: String,
    /// The newest revision it has applied.
    pub revision: i64,
}

/// Where etcd data directories go: `/dev/shm` if asked and present, else the system temp
/// directory.
fn etcd_temp_dir(in_memory: bool) -> anyhow::Result<tempfile::TempDir> {
    let shm = Path::new("/dev/shm");
    if in_memory
        && shm.is_dir()
        && let Ok(dir) = tempfile::Builder::new()
            .prefix("finale-etcd-")
            .tempdir_in(shm)
    {
        return Ok(dir);
    }
    Ok(tempfile::Builder::new().prefix("finale-etcd-").tempdir()?)
}

/// A cluster token no other test's members share.
fn cluster_token(dir: &Path) -> String {
    format!(
        "finale-test-{}-{}",
        std::process::id(),
        dir.file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default()
    )
}

/// A member's address and command line, before it runs.
struct MemberPlan {
    name: String,
    client_port: u16,
    peer_url: String,
}

impl MemberPlan {
    fn new(name: String) -> anyhow::Result<MemberPlan> {
        Ok(MemberPlan {
            name,
            client_port: free_port()?,
            peer_url: format!("http://127.0.0.1:{}", free_port()?),
        })
    }

    /// The member, not started, with its data under `dir/<name>`.
    fn member(&self, dir: &Path, initial_cluster: &str, token: &str) -> Etcd {
        let endpoint = format!("http://127.0.0.1:{}", self.client_port);
        let command = vec![
            std::env::var("ETCD").unwrap_or_else(|_| "etcd".into()),
            "--name".into(),
            self.name.clone(),
            "--data-dir".into(),
            dir.join(&self.name).to_string_lossy().into_owned(),
            "--listen-client-urls".into(),
            endpoint.clone(),
            "--advertise-client-urls".into(),
            endpoint.clone(),
            "--listen-peer-urls".into(),
            self.peer_url.clone(),
            "--initial-advertise-peer-urls".into(),
            self.peer_url.clone(),
            "--initial-cluster".into(),
            initial_cluster.to_string(),
            "--initial-cluster-token".into(),
            token.to_string(),
        ];
        Etcd {
            child: None,
            endpoint,
            name: self.name.clone(),
            client_port: self.client_port,
            command,
            log_path: dir.join(format!("{}.log", self.name)),
            _dir: None,
        }
    }
}

impl Etcd {
    /// A member with its data on disk.
    pub fn start() -> anyhow::Result<Etcd> {
        Etcd::start_on(false)
    }

    /// A member with its data in memory (`/dev/shm`), for tests.
    pub fn start_in_memory() -> anyhow::Result<Etcd> {
        Etcd::start_on(true)
    }

    fn start_on(in_memory: bool) -> anyhow::Result<Etcd> {
        let dir = etcd_temp_dir(in_memory)?;
        let plan = MemberPlan::new("finale-test".into())?;
        let initial_cluster = format!("{}={}", plan.name, plan.peer_url);
        let mut etcd = plan.member(dir.path(), &initial_cluster, &cluster_token(dir.path()));
        etcd._dir = Some(dir);
        etcd.start_again()?;
        Ok(etcd)
    }

    /// Starts the member again after [`Etcd::stop`], on the same ports and data, and waits
    /// until it listens.
    pub fn start_again(&mut self) -> anyhow::Result<()> {
        self.spawn()?;
        self.wait_listening(Instant::now() + START_TIMEOUT)
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        if self.child.is_some() {
            bail!("etcd at {} is already running", self.endpoint);
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .with_context(|| format!("open {}", self.log_path.display()))?;
        let child = Command::new(&self.command[0])
            .args(&self.command[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .context("spawn etcd (install Debian's etcd-server)")?;
        self.child = Some(child);
        Ok(())
    }

    fn wait_listening(&mut self, deadline: Instant) -> anyhow::Result<()> {
        while TcpStream::connect(("127.0.0.1", self.client_port)).is_err() {
            let exited = match self.child.as_mut() {
                Some(child) => child.try_wait()?.is_some(),
                None => true,
            };
            if Instant::now() > deadline || exited {
                bail!(
                    "etcd at {} did not start listening; its log:\n{}",
                    self.endpoint,
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Kills the member with SIGKILL (its data stays) and waits until it is gone.
    pub fn stop(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill().context("kill etcd")?;
            child.wait().context("reap etcd")?;
        }
        Ok(())
    }

    /// Whether the member's process runs (it may still be without a leader).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// What the member says of the cluster, from its HTTP gateway.
    pub fn status(&self) -> anyhow::Result<MemberStatus> {
        let body = self.http("POST", "/v3/maintenance/status", "{}")?;
        let status: Value = serde_json::from_str(&body)
            .with_context(|| format!("status of etcd at {}: {body}", self.endpoint))?;
        // The gateway writes 64-bit integers as JSON strings.
        let text = |value: &Value| value.as_str().unwrap_or("0").to_string();
        Ok(MemberStatus {
            member_id: text(&status["header"]["member_id"]),
            leader: text(&status["leader"]),
            revision: text(&status["header"]["revision"]).parse().unwrap_or(0),
        })
    }

    /// Compacts the cluster's history up to `revision` (physically: the revisions are gone
    /// when this returns), as `etcdctl compaction --physical` does.
    pub fn compact(&self, revision: i64) -> anyhow::Result<()> {
        self.http(
            "POST",
            "/v3/kv/compaction",
            &format!(r#"{{"revision":"{revision}","physical":true}}"#),
        )
        .map(drop)
    }

    /// Whether the member answers `/health` with `true` (it has a leader and a quorum).
    pub fn is_healthy(&self) -> bool {
        self.http("GET", "/health", "")
            .ok()
            .and_then(|body| serde_json::from_str::<Value>(&body).ok())
            .is_some_and(|health| health["health"] == "true")
    }

    /// One HTTP/1.0 request to the member's client port. The fixture needs two small JSON
    /// calls, which do not justify an HTTP client in this crate.
    fn http(&self, method: &str, path: &str, body: &str) -> anyhow::Result<String> {
        let address = SocketAddr::from(([127, 0, 0, 1], self.client_port));
        let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(2))
            .with_context(|| format!("connect to etcd at {}", self.endpoint))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        stream.set_write_timeout(Some(Duration::from_secs(5)))?;
        write!(
            stream,
            "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        )?;
        let mut response = String::new();
        stream
            .read_to_string(&mut response)
            .with_context(|| format!("{method} {path} on etcd at {}", self.endpoint))?;
        let (head, body) = response
            .split_once("\r\n\r\n")
            .with_context(|| format!("a malformed answer from {}: {response}", self.endpoint))?;
        if !head
            .lines()
            .next()
            .is_some_and(|line| line.contains(" 200 "))
        {
            bail!("{method} {path} on etcd at {}: {head}", self.endpoint);
        }
        Ok(body.to_string())
    }

    /// The member's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// A cluster of etcd members on loopback, data in memory, for tests that kill members.
pub struct EtcdCluster {
    /// The members, in `--initial-cluster` order. Declared before the directory, so that
    /// they are killed before it is removed.
    pub members: Vec<Etcd>,
    _dir: tempfile::TempDir,
}

impl EtcdCluster {
    /// Starts `size` members and waits until every one is healthy (a leader is elected).
    pub fn start_in_memory(size: usize) -> anyhow::Result<EtcdCluster> {
        let dir = etcd_temp_dir(true)?;
        let plans = (0..size)
            .map(|index| MemberPlan::new(format!("member-{index}")))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let initial_cluster = plans
            .iter()
            .map(|plan| format!("{}={}", plan.name, plan.peer_url))
            .collect::<Vec<_>>()
            .join(",");
        let token = cluster_token(dir.path());
        let mut members: Vec<Etcd> = plans
            .iter()
            .map(|plan| plan.member(dir.path(), &initial_cluster, &token))
            .collect();
        // All members first: none is ready before a quorum has started.
        for member in &mut members {
            member.spawn()?;
        }
        let deadline = Instant::now() + START_TIMEOUT;
        for member in &mut members {
            member.wait_listening(deadline)?;
        }
        let cluster = EtcdCluster { members, _dir: dir };
        cluster.wait_healthy(deadline.saturating_duration_since(Instant::now()))?;
        Ok(cluster)
    }

    /// Every member's client URL, comma-separated (`--etcd-servers`).
    pub fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(|member| member.endpoint.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Waits until every running member is healthy.
    pub fn wait_healthy(&self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let running = self.members.iter().filter(|member| member.is_running());
            if running.clone().all(Etcd::is_healthy) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "the etcd cluster did not become healthy within {timeout:?}; logs:\n{}",
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The index of the member that leads, once the running members agree on one that
    /// runs (right after a leader dies, the others still name it for an election timeout).
    pub fn leader(&self) -> anyhow::Result<usize> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match self.agreed_leader_now() {
                Ok(index) => return Ok(index),
                Err(error) if Instant::now() > deadline => return Err(error),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// The index of the leader the running members agree on now, without waiting: an error
    /// while they have none, disagree, or name a member that is down.
    pub fn agreed_leader_now(&self) -> anyhow::Result<usize> {
        let mut statuses = Vec::new();
        for (index, member) in self.members.iter().enumerate() {
            if member.is_running() {
                statuses.push((index, member.status()?));
            }
        }
        let leader_id = statuses
            .first()
            .map(|(_, status)| status.leader.clone())
            .context("no etcd member runs")?;
        if statuses
            .iter()
            .any(|(_, status)| status.leader != leader_id)
        {
            bail!("the etcd members disagree on the leader: {statuses:?}");
        }
        statuses
            .iter()
            .find(|(_, status)| status.member_id == leader_id)
            .map(|(index, _)| *index)
            .with_context(|| format!("no running member is the leader: {statuses:?}"))
    }

    /// Every member's log, headed by its name.
    pub fn logs(&self) -> String {
        self.members
            .iter()
            .map(|member| format!("--- {} ---\n{}", member.name, member.log()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}
