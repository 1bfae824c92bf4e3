//! The etcd members a store talks to: one HTTP/2 channel per endpoint, a round-robin choice
//! among the members that answer, a prober that brings failed members back, and the retry
//! loop every call goes through.
//!
//! # Guarantees
//! - A member whose call failed at the transport level (refused, reset, no answer in time)
//!   leaves the rotation until a probe (`Maintenance.Status`) succeeds again, so with one of
//!   three members down calls do not keep failing on it. If no member is in rotation, calls
//!   still try them all in turn.
//! - [`Members::call`] retries `Unavailable`, transport `Unknown` and attempts that timed out,
//!   on the next member, with jittered exponential backoff, until the call's deadline. Any
//!   other answer from etcd is returned to the caller as it came.
//!
//! # Caveats
//! - A retried call may have reached etcd before it failed. Reads are safe to repeat; a
//!   write's caller must resolve that ambiguity itself (see `write.rs`).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use finale_etcd_rpc::etcdserverpb::StatusRequest;
use finale_etcd_rpc::tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};
use finale_etcd_rpc::tonic::{Code, Status};
use finale_etcd_rpc::{Client, ConnectOptions};
use finale_store::StoreError;
use rand::Rng;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::{EtcdStoreOptions, EtcdTls};

/// One etcd member: its URL, a lazily connected channel, and whether it is in rotation.
pub(crate) struct Member {
    pub url: String,
    pub client: Client,
    healthy: AtomicBool,
}

/// Why an attempt failed, for the retry loop and the final error.
enum AttemptFailure {
    /// etcd (or the transport) answered with this status.
    Status(Status),
    /// No answer within the attempt timeout.
    TimedOut,
}

pub(crate) struct Members {
    members: Vec<Arc<Member>>,
    next: AtomicUsize,
    failed: Notify,
    attempt_timeout: Duration,
    call_deadline: Duration,
    closed: CancellationToken,
}

/// Builds the channel for one endpoint: lazily connected (a member that is down at start is
/// not an error), with kube-apiserver's keepalive (30 s ping, 10 s to answer).
fn channel(
    url: &str,
    options: &EtcdStoreOptions,
) -> Result<finale_etcd_rpc::tonic::transport::Channel, String> {
    let mut endpoint = Endpoint::from_shared(url.to_string())
        .map_err(|e| format!("invalid etcd endpoint {url:?}: {e}"))?
        .connect_timeout(options.connect_timeout)
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(10))
        .keep_alive_while_idle(true)
        .tcp_nodelay(true);
    if let Some(tls) = &options.tls {
        endpoint = endpoint
            .tls_config(tls_config(tls))
            .map_err(|e| format!("TLS configuration for etcd endpoint {url}: {e}"))?;
    } else if url.starts_with("https://") {
        return Err(format!(
            "etcd endpoint {url} uses https, but no --etcd-cafile was given"
        ));
    }
    Ok(endpoint.connect_lazy())
}

fn tls_config(tls: &EtcdTls) -> ClientTlsConfig {
    let mut config = ClientTlsConfig::new();
    if let Some(ca) = &tls.ca_pem {
        config = config.ca_certificate(Certificate::from_pem(ca));
    }
    if let Some((cert, key)) = &tls.identity {
        config = config.identity(Identity::from_pem(cert, key));
    }
    config
}

impl Members {
    pub fn new(
        options: &EtcdStoreOptions,
        closed: CancellationToken,
    ) -> Result<Arc<Members>, String> {
        if options.endpoints.is_empty() {
            return Err("no etcd endpoint given".into());
        }
        let connect = ConnectOptions::default();
        let members = options
            .endpoints
            .iter()
            .map(|url| {
                Ok(Arc::new(Member {
                    url: url.clone(),
                    client: Client::from_channel(channel(url, options)?, &connect),
                    healthy: AtomicBool::new(true),
                }))
            })
            .collect::<Result<Vec<_>, String>>()?;
        let members = Arc::new(Members {
            members,
            next: AtomicUsize::new(0),
            failed: Notify::new(),
            attempt_timeout: options.attempt_timeout,
            call_deadline: options.call_deadline,
            closed,
        });
        tokio::spawn(probe_failed_members(
            Arc::downgrade(&members),
            options.probe_interval,
        ));
        Ok(members)
    }

    /// The next member in rotation (round robin); if none is, the next member at all.
    pub fn pick(&self) -> Arc<Member> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let count = self.members.len();
        (0..count)
            .map(|i| &self.members[(start + i) % count])
            .find(|member| member.healthy.load(Ordering::Relaxed))
            .unwrap_or(&self.members[start % count])
            .clone()
    }

    /// Takes `member` out of rotation until a probe succeeds.
    pub fn mark_failed(&self, member: &Member, why: &str) {
        if member.healthy.swap(false, Ordering::Relaxed) && self.members.len() > 1 {
            tracing::warn!(endpoint = %member.url, reason = why, "etcd member left the rotation");
        }
        self.failed.notify_one();
    }

    pub fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    pub fn closed(&self) -> &CancellationToken {
        &self.closed
    }

    pub fn call_deadline(&self) -> Duration {
        self.call_deadline
    }

    pub fn attempt_timeout(&self) -> Duration {
        self.attempt_timeout
    }

    /// Runs `attempt` against members until etcd gives an answer that is not a transport
    /// failure, or the call deadline passes. `Ok(Err(status))` is etcd's own refusal (e.g.
    /// "compacted"); `Err` means no member answered in time.
    pub async fn call<T, F, Fut>(
        &self,
        what: &str,
        mut attempt: F,
    ) -> Result<Result<T, Status>, StoreError>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        let deadline = Instant::now() + self.call_deadline;
        let mut backoff = Backoff::default();
        loop {
            if self.is_closed() {
                return Err(StoreError::Closed);
            }
            let member = self.pick();
            let failure =
                match tokio::time::timeout(self.attempt_timeout, attempt(member.client.clone()))
                    .await
                {
                    Ok(Ok(value)) => return Ok(Ok(value)),
                    Ok(Err(status)) if is_retryable(&status) => AttemptFailure::Status(status),
                    Ok(Err(status)) => return Ok(Err(status)),
                    Err(_) => AttemptFailure::TimedOut,
                };
            let reason = match &failure {
                AttemptFailure::Status(status) => describe(status),
                AttemptFailure::TimedOut => format!("no answer within {:?}", self.attempt_timeout),
            };
            self.mark_failed(&member, &reason);
            let pause = backoff.next_pause();
            if Instant::now() + pause >= deadline {
                return Err(exhausted(what, &member.url, failure, reason));
            }
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = self.closed.cancelled() => return Err(StoreError::Closed),
            }
        }
    }

    /// Whether any member answers `Status` within `timeout`.
    async fn probe(member: &Member, timeout: Duration) -> bool {
        matches!(
            tokio::time::timeout(
                timeout,
                member.client.maintenance().status(StatusRequest {})
            )
            .await,
            Ok(Ok(_))
        )
    }
}

fn exhausted(what: &str, url: &str, failure: AttemptFailure, reason: String) -> StoreError {
    match failure {
        AttemptFailure::TimedOut => StoreError::Timeout {
            reason: format!("etcd did not answer {what} (last tried {url}): {reason}"),
        },
        AttemptFailure::Status(_) => StoreError::Unavailable {
            reason: format!("etcd cannot serve {what} (last tried {url}): {reason}"),
        },
    }
}

/// Failures worth retrying on another member: etcd or the connection is unavailable
/// ("leader changed", "no leader", connection refused), or the transport broke (`Unknown`
/// or `Cancelled` with a transport cause, such as a reset connection or a broken pipe:
/// hyper reports a connection that closed under an in-flight request as `Cancelled`, seen
/// when an etcd leader is killed under load).
pub(crate) fn is_retryable(status: &Status) -> bool {
    match status.code() {
        Code::Unavailable => true,
        Code::Unknown | Code::Cancelled => {
            let message = status.message();
            message.contains("transport")
                || message.contains("connection")
                || message.contains("h2 protocol")
                || message.contains("broken pipe")
                || std::error::Error::source(status).is_some()
        }
        _ => false,
    }
}

/// Whether the failure happened before the request could leave this process: the connection
/// could not be established. Such a write certainly did not happen.
pub(crate) fn never_sent(status: &Status) -> bool {
    let message = status.message();
    status.code() == Code::Unavailable
        && (message.contains("tcp connect error")
            || message.contains("error trying to connect")
            || message.contains("Connection refused"))
}

/// A one-line description of a gRPC failure, with its transport cause if any.
pub(crate) fn describe(status: &Status) -> String {
    let mut text = format!("{:?}: {}", status.code(), status.message());
    let mut source = std::error::Error::source(status);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Jittered exponential backoff: 25 ms doubling to 250 ms, each pause between half and all of
/// the step (client-go's jitter keeps several replicas from retrying in lockstep).
///
/// The cap is short because the usual wait is an etcd leader election (one to two election
/// timeouts, 1–2 s with etcd's defaults): a 1 s cap left writes waiting up to a second after
/// the new leader was ready. etcd's own Go client retries every 25 ms; this is gentler.
const MAX_BACKOFF_STEP: Duration = Duration::from_millis(250);

#[derive(Debug)]
pub(crate) struct Backoff {
    step: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            step: Duration::from_millis(25),
        }
    }
}

impl Backoff {
    pub fn next_pause(&mut self) -> Duration {
        let step = self.step;
        self.step = (self.step * 2).min(MAX_BACKOFF_STEP);
        step.mul_f64(rand::rng().random_range(0.5..=1.0))
    }

    pub fn reset(&mut self) {
        *self = Backoff::default();
    }
}

/// Brings failed members back into rotation once they answer a probe. Ends with the store.
async fn probe_failed_members(members: std::sync::Weak<Members>, interval: Duration) {
    loop {
        let Some(strong) = members.upgrade() else {
            return;
        };
        let failed: Vec<_> = strong
            .members
            .iter()
            .filter(|member| !member.healthy.load(Ordering::Relaxed))
            .cloned()
            .collect();
        for member in failed {
            if Members::probe(&member, strong.attempt_timeout.min(Duration::from_secs(2))).await {
                member.healthy.store(true, Ordering::Relaxed);
                if strong.members.len() > 1 {
                    tracing::info!(endpoint = %member.url, "etcd member is back in the rotation");
                }
            }
        }
        let closed = strong.closed.clone();
        let wait = async {
            // Woken early by a new failure; never more often than the interval.
            let _ = tokio::time::timeout(interval, strong.failed.notified()).await;
            tokio::time::sleep(interval / 4).await;
        };
        tokio::select! {
            _ = wait => {}
            _ = closed.cancelled() => return,
        }
        drop(strong);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_failures_are_retried_and_etcd_refusals_are_not() {
        for retried in [
            Status::unavailable("etcdserver: leader changed"),
            Status::unknown("transport error: connection reset"),
            // What tonic reports when etcd's connection closes under an in-flight call.
            Status::cancelled("operation was canceled: transport error: connection closed"),
        ] {
            assert!(is_retryable(&retried), "{retried:?}");
        }
        for returned in [
            Status::out_of_range("etcdserver: mvcc: required revision has been compacted"),
            Status::invalid_argument("etcdserver: request is too large"),
            Status::cancelled("context canceled"),
        ] {
            assert!(!is_retryable(&returned), "{returned:?}");
        }
    }

    #[test]
    fn backoff_grows_to_its_cap_with_jitter() {
        let mut backoff = Backoff::default();
        let pauses: Vec<Duration> = (0..10).map(|_| backoff.next_pause()).collect();
        assert!(pauses[0] <= Duration::from_millis(25));
        assert!(pauses.iter().all(|pause| *pause <= MAX_BACKOFF_STEP));
        assert!(pauses[9] >= MAX_BACKOFF_STEP / 2);
    }
}
