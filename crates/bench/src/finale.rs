//! The `finale server` under test: finding the binary, starting it with the e2e fixture, HTTPS
//! clients that trust only its CA, and reading a process's memory from `/proc`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use finale_e2e::FinaleServer;

/// The `finale` binary to benchmark: `explicit` if given, else the one built next to this
/// executable (`target/release/finale` when run with `cargo run --release`).
pub fn locate_binary(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    let path = match explicit {
        Some(path) => path.to_path_buf(),
        None => std::env::current_exe()
            .context("cannot locate the running executable")?
            .with_file_name("finale"),
    };
    if !path.is_file() {
        bail!(
            "the finale binary is not at {}: build it first with \
             `cargo build --release -p finale`, or pass --finale-bin PATH",
            path.display()
        );
    }
    Ok(path)
}

/// Starts `finale server` on `data_dir` and an ephemeral loopback port. The fixture blocks
/// until the server prints its address, so it runs on the blocking pool.
pub async fn start_server(binary: &Path, data_dir: &Path) -> anyhow::Result<FinaleServer> {
    let binary = binary.to_path_buf();
    let data_dir = data_dir.to_path_buf();
    tokio::task::spawn_blocking(move || FinaleServer::start(&binary, &data_dir))
        .await
        .context("server start task")?
}

/// A client for one server: HTTP/1.1 (one connection per client, like most controllers),
/// rustls trusting only the server's CA, the admin bearer token on every request, and no
/// proxy (a proxy from the environment would put a third process in the measurement).
pub fn https_client(ca_pem: &str, token: &str) -> anyhow::Result<reqwest::Client> {
    let ca = reqwest::Certificate::from_pem(ca_pem.as_bytes()).context("parse the server CA")?;
    let mut headers = reqwest::header::HeaderMap::new();
    let mut authorization = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
        .context("the admin token is not a valid header value")?;
    authorization.set_sensitive(true);
    headers.insert(reqwest::header::AUTHORIZATION, authorization);
    reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(ca)
        .http1_only()
        .no_proxy()
        .default_headers(headers)
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(30))
        .build()
        .context("build the HTTPS client")
}

/// A client for a running server, from its data directory's CA and kubeconfig token.
pub fn client_for(server: &FinaleServer) -> anyhow::Result<reqwest::Client> {
    https_client(&server.ca_pem()?, &server.token()?)
}

/// Polls `GET {url}/version` until it answers 200, every `step`, for at most `limit`;
/// returns the time of the first success measured from `since`.
pub async fn wait_for_version(
    client: &reqwest::Client,
    url: &str,
    since: Instant,
    step: Duration,
    limit: Duration,
) -> anyhow::Result<Duration> {
    let deadline = Instant::now() + limit;
    let mut last_error = String::from("never tried");
    while Instant::now() < deadline {
        match client.get(format!("{url}/version")).send().await {
            Ok(response) if response.status().is_success() => {
                // Only a complete response counts as served.
                response.bytes().await.context("read /version")?;
                return Ok(since.elapsed());
            }
            Ok(response) => last_error = format!("status {}", response.status()),
            Err(error) => last_error = format!("{error:#}"),
        }
        tokio::time::sleep(step).await;
    }
    bail!("GET /version did not succeed within {limit:?}: {last_error}")
}

/// Resident and peak resident memory of a process, from `/proc/PID/status`, in decimal
/// megabytes (10^6 bytes; `/proc` says "kB" but means KiB), the unit the goal is stated in.
#[derive(Clone, Copy, Debug)]
pub struct Memory {
    pub rss_mb: f64,
    pub hwm_mb: f64,
}

pub fn memory_of(pid: u32) -> anyhow::Result<Memory> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).with_context(|| format!("read {path}"))?;
    Ok(Memory {
        rss_mb: status_field_kib(&status, "VmRSS")? * 1024.0 / 1e6,
        hwm_mb: status_field_kib(&status, "VmHWM")? * 1024.0 / 1e6,
    })
}

/// Resets a process's `VmHWM` to its current `VmRSS` (Linux: `5` written to
/// `/proc/PID/clear_refs`), so that the next [`memory_of`] reads the peak of what follows.
pub fn reset_peak_memory(pid: u32) -> anyhow::Result<()> {
    let path = format!("/proc/{pid}/clear_refs");
    std::fs::write(&path, "5").with_context(|| format!("write 5 to {path} (resets VmHWM)"))
}

/// CPU time (user + system) a process has used so far, in seconds, from `/proc/PID/stat`.
pub fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).with_context(|| format!("read {path}"))?;
    parse_cpu_seconds(&stat).with_context(|| format!("parse {path}"))
}

fn parse_cpu_seconds(stat: &str) -> anyhow::Result<f64> {
    // The command name (field 2) may hold spaces and parentheses; fields after the last ')'
    // start at field 3 (state), so utime (14) and stime (15) are the 12th and 13th.
    let (_, rest) = stat.rsplit_once(')').context("no ')' in stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> anyhow::Result<f64> {
        Ok(fields.get(i).context("stat too short")?.parse::<u64>()? as f64)
    };
    // /proc reports in USER_HZ, which Linux fixes at 100 for user space on every architecture
    // this project targets.
    Ok((ticks(11)? + ticks(12)?) / 100.0)
}

/// Parses a `Name:   1234 kB` line of `/proc/PID/status`.
fn status_field_kib(status: &str, name: &str) -> anyhow::Result<f64> {
    let line = status
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .with_context(|| format!("no {name} in /proc status"))?;
    let kib = line
        .split_whitespace()
        .next()
        .with_context(|| format!("empty {name}"))?;
    kib.parse::<f64>()
        .with_context(|| format!("bad {name} value {kib:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_kib_fields_from_proc_status() {
        let status = "Name:\tfinale\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\n";
        assert_eq!(status_field_kib(status, "VmRSS").unwrap(), 10240.0);
        assert_eq!(status_field_kib(status, "VmHWM").unwrap(), 20480.0);
        assert!(status_field_kib(status, "VmSwap").is_err());
    }

    #[test]
    fn reads_cpu_time_from_proc_stat() {
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0";
        assert_eq!(parse_cpu_seconds(stat).unwrap(), 3.0);
        assert!(cpu_seconds(std::process::id()).unwrap() >= 0.0);
    }

    #[test]
    fn reads_this_process_memory() {
        let memory = memory_of(std::process::id()).unwrap();
        assert!(memory.rss_mb > 0.0 && memory.hwm_mb >= memory.rss_mb);
    }
}
