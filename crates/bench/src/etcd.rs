//! The etcd 3.4 baseline: put and delete workers driven through Finale's etcd gRPC client
//! (`finale-etcd-rpc`), and an etcd child process the harness controls itself for the
//! start-time and memory baselines.
//!
//! Throughput runs use `finale_e2e::Etcd` (the fixture the test suites use). Start-time and
//! memory need two things that fixture does not give: the child's pid (to read `/proc`) and
//! readiness polling finer than its 50 ms step (a cold-start figure quantised to 50 ms would
//! be mostly quantisation), so [`EtcdProcess`] spawns etcd the same way with those added.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use finale_etcd_rpc::etcdserverpb::kv_client::KvClient;
use finale_etcd_rpc::etcdserverpb::{DeleteRangeRequest, PutRequest, RangeRequest};
use finale_etcd_rpc::tonic::transport::Channel;
use finale_etcd_rpc::{Client, ConnectOptions};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::load::{Tickets, Worker};

/// Connects an etcd client to a loopback endpoint with bounded connect and request times.
pub async fn connect(endpoint: &str) -> anyhow::Result<Client> {
    let options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(5))
        .with_request_timeout(Duration::from_secs(30));
    Ok(Client::connect(endpoint, &options).await?)
}

/// A plain put of `value` under `key`: no lease, no previous value asked back.
fn put_request(key: String, value: Vec<u8>) -> PutRequest {
    PutRequest {
        key: key.into_bytes(),
        value,
        ..Default::default()
    }
}

/// Sequential puts of distinct keys, one at a time: the same load shape as the store writers.
pub struct EtcdPutter {
    /// From one shared [`Client`] (`client.kv()`): like Kubernetes, every writer multiplexes
    /// over one gRPC (HTTP/2) connection.
    pub kv: KvClient<Channel>,
    /// Keys are `{prefix}{seq}`, so each worker writes distinct keys.
    pub prefix: String,
    pub value: Vec<u8>,
}

impl Worker for EtcdPutter {
    async fn op(&mut self, seq: u64) -> anyhow::Result<()> {
        let key = format!("{}{seq}", self.prefix);
        self.kv
            .put(put_request(key, self.value.clone()))
            .await
            .context("etcd put")?;
        Ok(())
    }
}

/// What an [`EtcdIndexed`] worker does to each key.
#[derive(Clone, Debug)]
pub enum EtcdAction {
    Put(Vec<u8>),
    /// Delete a key that must exist (a delete of nothing would be a cheaper, different thing).
    Delete,
}

/// Puts or deletes the keys `{prefix}{i}` for the items `i` its [`Tickets`] hand out, one at a
/// time: so one phase can write a known set of keys and a later phase delete exactly that set.
pub struct EtcdIndexed {
    /// From one shared [`Client`], as for [`EtcdPutter`].
    pub kv: KvClient<Channel>,
    pub prefix: String,
    pub tickets: Tickets,
    pub action: EtcdAction,
}

impl Worker for EtcdIndexed {
    async fn op(&mut self, _seq: u64) -> anyhow::Result<()> {
        let key = format!("{}{}", self.prefix, self.tickets.take()?);
        match &self.action {
            EtcdAction::Put(value) => {
                self.kv
                    .put(put_request(key, value.clone()))
                    .await
                    .context("etcd put")?;
            }
            EtcdAction::Delete => {
                let response = self
                    .kv
                    .delete_range(DeleteRangeRequest {
                        key: key.clone().into_bytes(),
                        ..Default::default()
                    })
                    .await
                    .context("etcd delete")?
                    .into_inner();
                if response.deleted != 1 {
                    bail!("etcd delete of {key} removed {} keys", response.deleted);
                }
            }
        }
        Ok(())
    }
}

/// A single-member etcd on loopback, as `finale_e2e::Etcd` starts it, killed and reaped on
/// drop. The data directory belongs to the caller, so a second process can restart on it.
pub struct EtcdProcess {
    child: Option<Child>,
    pub endpoint: String,
}

/// Free client and peer ports for one etcd, reused on restart so the member's recorded peer
/// URL stays valid.
#[derive(Clone, Copy, Debug)]
pub struct EtcdPorts {
    pub client: u16,
    pub peer: u16,
}

impl EtcdPorts {
    pub fn pick() -> anyhow::Result<EtcdPorts> {
        Ok(EtcdPorts {
            client: finale_e2e::free_port()?,
            peer: finale_e2e::free_port()?,
        })
    }
}

impl EtcdProcess {
    /// Spawns a single-member etcd on `data_dir` with free loopback ports and waits (up to
    /// 30 s) until it answers: what every scenario with an etcd baseline starts with.
    pub async fn start(data_dir: &Path) -> anyhow::Result<EtcdProcess> {
        let mut etcd = EtcdProcess::spawn(data_dir, EtcdPorts::pick()?)?;
        etcd.wait_until_serving(
            Instant::now(),
            Duration::from_millis(10),
            Duration::from_secs(30),
        )
        .await?;
        Ok(etcd)
    }

    /// Spawns etcd on `data_dir` (created by etcd if missing) without waiting for it.
    pub fn spawn(data_dir: &Path, ports: EtcdPorts) -> anyhow::Result<EtcdProcess> {
        let endpoint = format!("http://127.0.0.1:{}", ports.client);
        let peer_url = format!("http://127.0.0.1:{}", ports.peer);
        let log_path = data_dir.with_extension("log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("open {}", log_path.display()))?;
        let child = Command::new(std::env::var("ETCD").unwrap_or_else(|_| "etcd".into()))
            .args(["--name", "finale-bench", "--data-dir"])
            .arg(data_dir)
            .args(["--listen-client-urls", &endpoint])
            .args(["--advertise-client-urls", &endpoint])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("finale-bench={peer_url}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .context("spawn etcd (install Debian's etcd-server, or set ETCD)")?;
        Ok(EtcdProcess {
            child: Some(child),
            endpoint,
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Polls until a linearizable read succeeds (etcd has elected itself leader and serves
    /// clients), every `step`, for at most `limit`. Returns when it succeeded, measured from
    /// `since`.
    pub async fn wait_until_serving(
        &mut self,
        since: Instant,
        step: Duration,
        limit: Duration,
    ) -> anyhow::Result<Duration> {
        let deadline = Instant::now() + limit;
        let mut last_error = String::from("never tried");
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                bail!("etcd exited with {status} before it served a request");
            }
            match self.try_get(deadline).await {
                Ok(()) => return Ok(since.elapsed()),
                Err(error) => last_error = format!("{error:#}"),
            }
            tokio::time::sleep(step).await;
        }
        bail!("etcd did not serve a request within {limit:?}: {last_error}")
    }

    /// One attempt: connect (fails fast while nothing listens) and read a key.
    async fn try_get(&self, deadline: Instant) -> anyhow::Result<()> {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let attempt = async {
            let client = connect(&self.endpoint).await?;
            client
                .kv()
                .range(RangeRequest {
                    key: b"/bench/ready".to_vec(),
                    ..Default::default()
                })
                .await
                .context("etcd get")?;
            anyhow::Ok(())
        };
        tokio::time::timeout(remaining, attempt)
            .await
            .context("timed out")?
    }

    /// SIGTERM, then wait (bounded) for the exit, so a restart finds the data directory
    /// released; SIGKILL if it takes too long.
    pub fn stop(&mut self) -> anyhow::Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let pid = i32::try_from(child.id()).context("pid out of range")?;
        kill(Pid::from_raw(pid), Signal::SIGTERM).context("SIGTERM etcd")?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("etcd did not exit within 20 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }
}

impl Drop for EtcdProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenarios::namespace_teardown::etcd_batch;

    /// How many keys start with `prefix`, as etcd counts them.
    async fn count(client: &Client, prefix: &str) -> anyhow::Result<i64> {
        let response = client
            .kv()
            .range(RangeRequest {
                key: prefix.as_bytes().to_vec(),
                range_end: finale_etcd_rpc::prefix_range_end(prefix.as_bytes()),
                count_only: true,
                ..Default::default()
            })
            .await?
            .into_inner();
        Ok(response.count)
    }

    /// The baseline's workers against a real etcd, started and awaited the way the start-time
    /// scenarios do: indexed workers put, then delete, exactly their keys (a delete that finds
    /// nothing is an error, not a cheaper success), and a putter writes a new key per op.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn baseline_workers_write_and_delete_exactly_their_keys() -> anyhow::Result<()> {
        tokio::time::timeout(Duration::from_secs(60), async {
            let dir = tempfile::tempdir()?;
            let mut etcd = EtcdProcess::start(&dir.path().join("etcd")).await?;
            let client = connect(&etcd.endpoint).await?;

            let mut putter = EtcdPutter {
                kv: client.kv(),
                prefix: "/bench/test/put-".into(),
                value: b"v".to_vec(),
            };
            for seq in 0..3 {
                putter.op(seq).await?;
            }
            assert_eq!(count(&client, "/bench/test/put-").await?, 3);

            let prefix = "/bench/test/indexed-";
            etcd_batch(&client, prefix, 200, EtcdAction::Put(b"v".to_vec())).await?;
            assert_eq!(count(&client, prefix).await?, 200);
            etcd_batch(&client, prefix, 200, EtcdAction::Delete).await?;
            assert_eq!(count(&client, prefix).await?, 0);
            assert_eq!(
                count(&client, "/bench/test/put-").await?,
                3,
                "deleted too much"
            );

            let again = etcd_batch(&client, prefix, 10, EtcdAction::Delete).await;
            assert!(again.is_err(), "deleting missing keys counted as deletes");
            etcd.stop()
        })
        .await
        .context("test exceeded 60 s")?
    }
}
