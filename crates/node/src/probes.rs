//! Container probes, as the kubelet's prober runs them: `startupProbe`, then `readinessProbe`
//! and `livenessProbe`, each with `initialDelaySeconds` (from the container's start),
//! `periodSeconds`, `timeoutSeconds`, `successThreshold` and `failureThreshold`.
//!
//! Handlers: `exec` (exit 0 succeeds; run like the container, in its own process group,
//! killed at the timeout), `httpGet` (a status in 200..400 succeeds; host defaults to the pod
//! IP, which is the node's; `https` skips certificate checks as the kubelet does), and
//! `tcpSocket` (a connection succeeds). `grpc` probes always fail with a message saying the
//! process runtime does not run them.
//!
//! One task per container instance runs its probes and reports transitions to the pod worker:
//! startup success or failure, readiness changes, and a liveness failure (after which the
//! task stops; the worker kills and maybe restarts the container). Every failed attempt is a
//! Warning Event `Unhealthy`, as upstream.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ContainerPort, HTTPGetAction, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::events::{Kind, PodRef, Recorder};
use crate::runtime::{self, ExecOutcome, Launch};

/// What a probe task tells its pod worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ProbeReport {
    /// The startup probe succeeded (or there is none): liveness and readiness probes start.
    Started,
    /// The startup probe failed `failureThreshold` times: the container is killed.
    StartupFailed(String),
    /// Readiness changed.
    Ready(bool),
    /// The liveness probe failed `failureThreshold` times: the container is killed.
    LivenessFailed(String),
}

/// Which probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Which {
    Startup,
    Readiness,
    Liveness,
}

impl Which {
    fn name(self) -> &'static str {
        match self {
            Which::Startup => "Startup",
            Which::Readiness => "Readiness",
            Which::Liveness => "Liveness",
        }
    }
}

/// A probe's settings with the API defaults applied.
#[derive(Clone, Debug)]
struct Settings {
    initial_delay: Duration,
    period: Duration,
    timeout: Duration,
    success_threshold: u32,
    failure_threshold: u32,
}

fn seconds(value: Option<i32>, default: i32, minimum: i32) -> Duration {
    let value = value.unwrap_or(default).max(minimum);
    Duration::from_secs(u64::try_from(value).unwrap_or(0))
}

fn count(value: Option<i32>, default: i32) -> u32 {
    u32::try_from(value.unwrap_or(default).max(1)).unwrap_or(1)
}

impl Settings {
    fn of(probe: &Probe, which: Which) -> Settings {
        Settings {
            initial_delay: seconds(probe.initial_delay_seconds, 0, 0),
            period: seconds(probe.period_seconds, 10, 1),
            timeout: seconds(probe.timeout_seconds, 1, 1),
            // Liveness and startup probes must use 1 (validation enforces it upstream).
            success_threshold: match which {
                Which::Readiness => count(probe.success_threshold, 1),
                _ => 1,
            },
            failure_threshold: count(probe.failure_threshold, 3),
        }
    }
}

/// Everything a probe of one container needs.
#[derive(Clone)]
pub(crate) struct Target {
    pub pod: PodRef,
    pub container: String,
    pub init: bool,
    pub startup: Option<Probe>,
    pub readiness: Option<Probe>,
    pub liveness: Option<Probe>,
    pub ports: Vec<ContainerPort>,
    pub env: Vec<(String, String)>,
    pub working_dir: PathBuf,
    /// The pod's IP (the node's): the default host of HTTP and TCP probes.
    pub pod_ip: String,
    /// When the container started: initial delays count from here.
    pub started: Instant,
}

/// Shared by every probe: the HTTP client and the Event recorder.
#[derive(Clone)]
pub(crate) struct Prober {
    http: reqwest::Client,
    recorder: Recorder,
}

impl Prober {
    pub(crate) fn new(recorder: Recorder) -> anyhow::Result<Prober> {
        let http = reqwest::Client::builder()
            .no_proxy()
            // The kubelet does not verify probe targets' certificates.
            .danger_accept_invalid_certs(true)
            .redirect(reqwest::redirect::Policy::limited(10))
            .user_agent(format!(
                "kube-probe/{}",
                crate::registration::KUBELET_VERSION
                    .trim_start_matches('v')
                    .split('.')
                    .take(2)
                    .collect::<Vec<_>>()
                    .join(".")
            ))
            .build()
            .map_err(|error| anyhow::anyhow!("cannot build the HTTP probe client: {error}"))?;
        Ok(Prober { http, recorder })
    }

    /// Runs the probes of one container instance until `cancel`, reporting through `report`.
    pub(crate) fn spawn(
        &self,
        target: Target,
        report: Arc<dyn Fn(ProbeReport) + Send + Sync>,
        cancel: CancellationToken,
    ) {
        let prober = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = prober.run(&target, report.as_ref()) => {}
            }
        });
    }

    async fn run(&self, target: &Target, report: &(dyn Fn(ProbeReport) + Send + Sync)) {
        if let Some(probe) = &target.startup {
            let settings = Settings::of(probe, Which::Startup);
            let mut next = target.started + settings.initial_delay;
            let mut failures = 0;
            loop {
                tokio::time::sleep_until(next).await;
                next += settings.period;
                match self
                    .probe_once(target, probe, Which::Startup, &settings)
                    .await
                {
                    Ok(()) => {
                        report(ProbeReport::Started);
                        break;
                    }
                    Err(message) => {
                        failures += 1;
                        if failures >= settings.failure_threshold {
                            report(ProbeReport::StartupFailed(message));
                            return;
                        }
                    }
                }
            }
        }
        let readiness = async {
            let Some(probe) = &target.readiness else {
                return std::future::pending::<()>().await;
            };
            let settings = Settings::of(probe, Which::Readiness);
            // After a startup probe the initial delay may be over already.
            let mut next = (target.started + settings.initial_delay).max(Instant::now());
            let (mut ready, mut successes, mut failures) = (false, 0, 0);
            loop {
                tokio::time::sleep_until(next).await;
                next += settings.period;
                match self
                    .probe_once(target, probe, Which::Readiness, &settings)
                    .await
                {
                    Ok(()) => {
                        failures = 0;
                        successes += 1;
                        if !ready && successes >= settings.success_threshold {
                            ready = true;
                            report(ProbeReport::Ready(true));
                        }
                    }
                    Err(_) => {
                        successes = 0;
                        failures += 1;
                        if ready && failures >= settings.failure_threshold {
                            ready = false;
                            report(ProbeReport::Ready(false));
                        }
                    }
                }
            }
        };
        let liveness = async {
            let Some(probe) = &target.liveness else {
                return std::future::pending::<()>().await;
            };
            let settings = Settings::of(probe, Which::Liveness);
            let mut next = (target.started + settings.initial_delay).max(Instant::now());
            let mut failures = 0;
            loop {
                tokio::time::sleep_until(next).await;
                next += settings.period;
                match self
                    .probe_once(target, probe, Which::Liveness, &settings)
                    .await
                {
                    Ok(()) => failures = 0,
                    Err(message) => {
                        failures += 1;
                        if failures >= settings.failure_threshold {
                            report(ProbeReport::LivenessFailed(message));
                            return;
                        }
                    }
                }
            }
        };
        // A liveness failure ends the task; readiness alone never does.
        tokio::select! {
            _ = readiness => {}
            _ = liveness => {}
        }
    }

    /// One attempt; a failure is recorded as an `Unhealthy` Event and returned as its message.
    async fn probe_once(
        &self,
        target: &Target,
        probe: &Probe,
        which: Which,
        settings: &Settings,
    ) -> Result<(), String> {
        let outcome = self.attempt(target, probe, settings).await;
        if let Err(message) = &outcome {
            self.recorder.pod(
                &target.pod,
                Some((&target.container, target.init)),
                Kind::Warning,
                "Unhealthy",
                &format!("{} probe failed: {message}", which.name()),
            );
        }
        outcome
    }

    async fn attempt(
        &self,
        target: &Target,
        probe: &Probe,
        settings: &Settings,
    ) -> Result<(), String> {
        if let Some(exec) = &probe.exec {
            let command = exec.command.clone().unwrap_or_default();
            if command.is_empty() {
                return Err("exec probe has no command".to_string());
            }
            let launch = Launch {
                argv: &command,
                env: &target.env,
                working_dir: &target.working_dir,
            };
            let result = runtime::exec(&launch, settings.timeout).await;
            return match result.outcome {
                ExecOutcome::Exited(0) => Ok(()),
                ExecOutcome::Exited(_) => Err(result.output),
                ExecOutcome::TimedOut => Err(format!("command {:?} timed out", command.join(" "))),
                ExecOutcome::FailedToStart(error) => Err(error),
            };
        }
        if let Some(http) = &probe.http_get {
            return self
                .http_get(http, &target.ports, &target.pod_ip, settings.timeout)
                .await;
        }
        if let Some(tcp) = &probe.tcp_socket {
            let port = resolve_port(&tcp.port, &target.ports)?;
            let host = tcp
                .host
                .clone()
                .filter(|host| !host.is_empty())
                .unwrap_or_else(|| target.pod_ip.clone());
            let address = format!("{host}:{port}");
            return match tokio::time::timeout(
                settings.timeout,
                tokio::net::TcpStream::connect(&address),
            )
            .await
            {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(error)) => Err(format!("dial tcp {address}: {error}")),
                Err(_) => Err(format!("dial tcp {address}: i/o timeout")),
            };
        }
        if probe.grpc.is_some() {
            return Err("gRPC probes are not supported by the process runtime".to_string());
        }
        Err("the probe has no handler".to_string())
    }
}

impl Prober {
    /// An `httpGet` handler (probe or hook): succeeds on a status in 200..400.
    pub(crate) async fn http_get(
        &self,
        http: &HTTPGetAction,
        ports: &[ContainerPort],
        pod_ip: &str,
        timeout: Duration,
    ) -> Result<(), String> {
        let port = resolve_port(&http.port, ports)?;
        let host = http
            .host
            .clone()
            .filter(|host| !host.is_empty())
            .unwrap_or_else(|| pod_ip.to_string());
        let scheme = http
            .scheme
            .as_deref()
            .unwrap_or("HTTP")
            .to_ascii_lowercase();
        let mut path = http.path.clone().unwrap_or_default();
        if !path.starts_with('/') {
            path.insert(0, '/');
        }
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host
        };
        let url = format!("{scheme}://{host}:{port}{path}");
        let mut request = self.http.get(&url).timeout(timeout);
        for header in http.http_headers.iter().flatten() {
            request = request.header(&header.name, &header.value);
        }
        match request.send().await {
            Ok(response) if (200..400).contains(&response.status().as_u16()) => Ok(()),
            Ok(response) => Err(format!(
                "HTTP probe failed with statuscode: {}",
                response.status().as_u16()
            )),
            Err(error) => Err(format!("Get {url:?}: {}", error_chain(&error))),
        }
    }
}

/// The error and its causes on one line (reqwest's own message is terse).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// A probe's port: a number, or the name of one of the container's ports.
fn resolve_port(port: &IntOrString, ports: &[ContainerPort]) -> Result<u16, String> {
    let number = match port {
        IntOrString::Int(number) => *number,
        IntOrString::String(name) => match name.parse::<i32>() {
            Ok(number) => number,
            Err(_) => ports
                .iter()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .map(|p| p.container_port)
                .ok_or_else(|| format!("cannot find port {name:?} in the container's ports"))?,
        },
    };
    u16::try_from(number)
        .ok()
        .filter(|port| *port > 0)
        .ok_or_else(|| format!("invalid port number: {number}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_take_the_api_defaults() {
        let settings = Settings::of(&Probe::default(), Which::Readiness);
        assert_eq!(settings.initial_delay, Duration::ZERO);
        assert_eq!(settings.period, Duration::from_secs(10));
        assert_eq!(settings.timeout, Duration::from_secs(1));
        assert_eq!(settings.success_threshold, 1);
        assert_eq!(settings.failure_threshold, 3);
        let probe = Probe {
            period_seconds: Some(1),
            success_threshold: Some(2),
            failure_threshold: Some(1),
            ..Probe::default()
        };
        assert_eq!(Settings::of(&probe, Which::Readiness).success_threshold, 2);
        assert_eq!(Settings::of(&probe, Which::Liveness).success_threshold, 1);
        assert_eq!(Settings::of(&probe, Which::Liveness).failure_threshold, 1);
    }

    #[test]
    fn ports_resolve_by_number_or_name() {
        let ports = vec![ContainerPort {
            name: Some("http".into()),
            container_port: 8080,
            ..ContainerPort::default()
        }];
        assert_eq!(resolve_port(&IntOrString::Int(80), &ports), Ok(80));
        assert_eq!(
            resolve_port(&IntOrString::String("http".into()), &ports),
            Ok(8080)
        );
        assert_eq!(
            resolve_port(&IntOrString::String("8081".into()), &ports),
            Ok(8081)
        );
        assert!(resolve_port(&IntOrString::String("grpc".into()), &ports).is_err());
        assert!(resolve_port(&IntOrString::Int(0), &ports).is_err());
    }
}
