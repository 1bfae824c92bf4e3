//! `moto_server` (PyPI `moto[server]`), an AWS-compatible API for EC2, ELB, ELBv2 and the
//! Resource Groups Tagging API, as a child process on a free loopback port.
//!
//! moto keeps its state in memory; [`Moto::reset`] clears it between tests. It accepts any
//! credentials and does not check signatures.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::free_port;

/// How long moto may take to answer after its start (it imports every backend on a loaded
/// 2-core machine).
const STARTUP: Duration = Duration::from_secs(60);

pub struct Moto {
    child: Option<Child>,
    pub port: u16,
    pub log_path: PathBuf,
}

impl Moto {
    /// Starts `moto_server -H 127.0.0.1 -p PORT` logging to `log_dir`, and waits (bounded)
    /// until it answers.
    pub fn start(log_dir: &Path) -> anyhow::Result<Moto> {
        let port = free_port()?;
        let log_path = log_dir.join("moto.log");
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("create {}", log_path.display()))?;
        let binary = std::env::var("MOTO_SERVER").unwrap_or_else(|_| "moto_server".into());
        let child = Command::new(&binary)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()
            .with_context(|| {
                format!("spawn {binary} (install it with: python3 -m pip install 'moto[server]')")
            })?;
        let mut moto = Moto {
            child: Some(child),
            port,
            log_path,
        };
        let deadline = Instant::now() + STARTUP;
        loop {
            if moto.request("GET", "/moto-api/data.json").is_ok() {
                return Ok(moto);
            }
            if let Some(child) = moto.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                moto.child = None;
                bail!(
                    "moto_server exited at start ({status}); its log:\n{}",
                    moto.log()
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "moto_server did not answer within {STARTUP:?}; its log:\n{}",
                    moto.log()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Forgets every resource.
    pub fn reset(&self) -> anyhow::Result<()> {
        let answer = self.request("POST", "/moto-api/reset")?;
        if !answer.starts_with("HTTP/1.1 200") && !answer.starts_with("HTTP/1.0 200") {
            bail!(
                "moto reset answered {}",
                answer.lines().next().unwrap_or_default()
            );
        }
        Ok(())
    }

    /// A bodiless request to moto's own API; the whole response.
    fn request(&self, method: &str, path: &str) -> anyhow::Result<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )?;
        let mut response = String::new();
        stream.read_to_string(&mut response)?;
        Ok(response)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
