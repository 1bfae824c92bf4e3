//! A loopback HTTP proxy in front of an AWS-compatible API (moto) that can refuse chosen calls
//! the way AWS does, and go down: the failures moto cannot show. moto lets a security group
//! be deleted while a load balancer or an ENI still uses it; AWS answers
//! `DependencyViolation`. Rules here make the proxy answer that (or any error code) for
//! matching calls, so a test can prove that the client orders its calls and retries.
//!
//! One request per connection: the proxy reads a request (head and `Content-Length` body),
//! answers it itself or forwards it to the target with `Connection: close`, relays the answer
//! and closes. Every request is logged as `Action body` (the EC2/ELB Query protocol's form
//! body, or the JSON protocol's `X-Amz-Target`). Plain threads, so it works under any runtime.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context;

const POLL: Duration = Duration::from_millis(20);

/// A call to refuse.
#[derive(Clone, Debug)]
pub struct Refusal {
    /// The API action (`DeleteSecurityGroup`).
    pub action: String,
    /// A string the request body must contain (a resource id), or empty for any.
    pub contains: String,
    /// The AWS error code and message to answer with (HTTP 400).
    pub code: String,
    pub message: String,
    /// Refuse at most this many times (`None`: while the rule stands).
    pub times: Option<u32>,
    /// Refuse only until a request with this action containing this string has been seen
    /// (the dependency is gone), then forward.
    pub until_seen: Option<(String, String)>,
}

#[derive(Default)]
struct State {
    rules: Vec<Refusal>,
    /// `Action body` of every request, in arrival order.
    log: Vec<String>,
    /// `Action body` of every refused request.
    refused: Vec<String>,
}

pub struct AwsProxy {
    port: u16,
    target: SocketAddr,
    state: Arc<Mutex<State>>,
    stopping: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl AwsProxy {
    /// Listens on a free loopback port and forwards to `target`.
    pub fn start(target: SocketAddr) -> anyhow::Result<AwsProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").context("bind the proxy")?;
        let port = listener.local_addr()?.port();
        let mut proxy = AwsProxy {
            port,
            target,
            state: Arc::default(),
            stopping: Arc::new(AtomicBool::new(false)),
            acceptor: None,
        };
        proxy.serve(listener)?;
        Ok(proxy)
    }

    fn serve(&mut self, listener: TcpListener) -> anyhow::Result<()> {
        listener.set_nonblocking(true)?;
        self.stopping.store(false, Ordering::SeqCst);
        let (state, stopping, target) = (
            Arc::clone(&self.state),
            Arc::clone(&self.stopping),
            self.target,
        );
        self.acceptor = Some(
            std::thread::Builder::new()
                .name("aws-proxy".into())
                .spawn(move || accept_loop(listener, target, state, stopping))
                .context("spawn the proxy thread")?,
        );
        Ok(())
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn refuse(&self, refusal: Refusal) {
        self.lock().rules.push(refusal);
    }

    pub fn clear_rules(&self) {
        self.lock().rules.clear();
    }

    pub fn log(&self) -> Vec<String> {
        self.lock().log.clone()
    }

    pub fn refused(&self) -> Vec<String> {
        self.lock().refused.clone()
    }

    pub fn clear_log(&self) {
        let mut state = self.lock();
        state.log.clear();
        state.refused.clear();
    }

    /// Stops listening: new connections are refused, as by a server that is down.
    pub fn go_down(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }

    /// Listens again on the same port.
    pub fn come_back(&mut self) -> anyhow::Result<()> {
        let listener = TcpListener::bind(("127.0.0.1", self.port))
            .with_context(|| format!("rebind the proxy on port {}", self.port))?;
        self.serve(listener)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for AwsProxy {
    fn drop(&mut self) {
        self.go_down();
    }
}

fn accept_loop(
    listener: TcpListener,
    target: SocketAddr,
    state: Arc<Mutex<State>>,
    stopping: Arc<AtomicBool>,
) {
    let mut workers: Vec<JoinHandle<()>> = Vec::new();
    while !stopping.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, _)) => {
                let state = Arc::clone(&state);
                workers.push(std::thread::spawn(move || {
                    let _ = handle(client, target, &state);
                }));
            }
            Err(error) if error.kind() == ErrorKind::WouldBlock => std::thread::sleep(POLL),
            Err(_) => std::thread::sleep(POLL),
        }
        workers.retain(|w| !w.is_finished());
    }
    drop(listener);
    for worker in workers {
        let _ = worker.join();
    }
}

/// Reads one request: the head (up to the blank line) and its `Content-Length` body.
fn read_request(client: &mut TcpStream) -> anyhow::Result<(String, Vec<u8>)> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = client.read(&mut chunk)?;
        if n == 0 {
            anyhow::bail!("closed before a whole request head");
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).to_string();
    let length: usize = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut body = buffer[head_end..].to_vec();
    while body.len() < length {
        let n = client.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Ok((head, body))
}

/// `Action` of a Query-protocol form body, else the JSON protocol's `X-Amz-Target` operation.
fn action_of(head: &str, body: &str) -> String {
    body.split('&')
        .find_map(|pair| pair.strip_prefix("Action="))
        .map(str::to_string)
        .or_else(|| {
            head.lines().find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("x-amz-target").then(|| {
                    value
                        .trim()
                        .rsplit('.')
                        .next()
                        .unwrap_or_default()
                        .to_string()
                })
            })
        })
        .unwrap_or_default()
}

fn handle(mut client: TcpStream, target: SocketAddr, state: &Mutex<State>) -> anyhow::Result<()> {
    client.set_nonblocking(false)?;
    client.set_read_timeout(Some(Duration::from_secs(30)))?;
    let (head, body) = read_request(&mut client)?;
    let body_text = String::from_utf8_lossy(&body).to_string();
    let action = action_of(&head, &body_text);
    let refusal = {
        let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
        let entry = format!("{action} {body_text}");
        state.log.push(entry.clone());
        let log = state.log.clone();
        let matched = state.rules.iter_mut().find(|rule| {
            rule.action == action
                && body_text.contains(&rule.contains)
                && rule.times != Some(0)
                && rule.until_seen.as_ref().is_none_or(|(action, contains)| {
                    !log.iter().any(|l| {
                        l.starts_with(&format!("{action} ")) && l.contains(contains.as_str())
                    })
                })
        });
        let refusal = matched.map(|rule| {
            if let Some(times) = rule.times.as_mut() {
                *times -= 1;
            }
            (rule.code.clone(), rule.message.clone())
        });
        if refusal.is_some() {
            state.refused.push(entry);
        }
        refusal
    };
    if let Some((code, message)) = refusal {
        // The EC2 Query protocol's error document (ELB's differs, but the SDK reads this one
        // for EC2, where moto lacks the check).
        let document = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors><RequestID>finale-aws-proxy</RequestID></Response>"
        );
        write!(
            client,
            "HTTP/1.1 400 Bad Request\r\nContent-Type: text/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{document}",
            document.len()
        )?;
        client.flush()?;
        let _ = client.shutdown(Shutdown::Both);
        return Ok(());
    }
    let mut upstream = TcpStream::connect(target).context("connect to the target")?;
    upstream.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut forwarded: String = head
        .trim_end_matches("\r\n")
        .lines()
        .filter(|line| {
            !line
                .split_once(':')
                .is_some_and(|(name, _)| name.trim().eq_ignore_ascii_case("connection"))
        })
        .map(|line| format!("{line}\r\n"))
        .collect();
    forwarded.push_str("Connection: close\r\n\r\n");
    upstream.write_all(forwarded.as_bytes())?;
    upstream.write_all(&body)?;
    upstream.flush()?;
    std::io::copy(&mut upstream, &mut client)?;
    client.flush()?;
    let _ = client.shutdown(Shutdown::Both);
    Ok(())
}
