//! Leader election on a `coordination.k8s.io/v1` Lease, so that of several replicas of an
//! operator only one acts at a time.
//!
//! The algorithm is client-go's: a candidate takes the Lease when it is free, released or
//! expired, with an update conditioned on the resourceVersion it read (so of two racing
//! candidates one gets 409 Conflict); the leader renews it every retry period and considers
//! itself deposed when it has not renewed within the renew deadline or sees another holder.
//! Expiry is judged by the local clock from when *this* candidate last saw the record change,
//! never by comparing the other holder's timestamps with our clock, so clock skew between
//! machines does not matter, only clock rates.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Where the Lease lives and how it is timed.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    /// How long a Lease holds without renewal before another candidate may take it.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up leading.
    pub renew_deadline: Duration,
    /// The pause between attempts to acquire or renew.
    pub retry_period: Duration,
}

impl LeaseConfig {
    /// client-go's defaults: 15 s lease, 10 s renew deadline, 2 s retry period.
    pub fn new(namespace: String, name: String, identity: String) -> LeaseConfig {
        LeaseConfig {
            namespace,
            name,
            identity,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    /// The host name plus a random suffix: unique per process, readable in the Lease.
    pub fn default_identity() -> String {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "finale".to_string());
        let suffix = uuid::Uuid::new_v4().simple().to_string();
        format!("{host}_{}", &suffix[..8])
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error(
        "the leader Lease {namespace}/{name} cannot be used: {source} (the namespace must exist and the operator needs get, create and update on leases.coordination.k8s.io there)"
    )]
    Forbidden {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// Competes for one Lease.
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaseConfig,
}

/// What a candidate last saw of the Lease, and when (on its own clock).
struct Observed {
    resource_version: Option<String>,
    holder: Option<String>,
    duration: Duration,
    seen_at: Instant,
}

enum Attempt {
    Acquired(Box<Lease>),
    HeldByOther,
}

fn now() -> MicroTime {
    MicroTime(Timestamp::now())
}

fn is_code(error: &kube::Error, code: u16) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == code)
}

impl LeaderElector {
    pub fn new(client: Client, config: LeaseConfig) -> LeaderElector {
        LeaderElector {
            api: Api::namespaced(client, &config.namespace),
            config,
        }
    }

    /// Errors that retrying cannot fix: no permission, or (on create) no such namespace.
    fn fatal(&self, error: &kube::Error) -> bool {
        is_code(error, 401) || is_code(error, 403) || is_code(error, 404)
    }

    fn fail(&self, source: kube::Error) -> LeaderError {
        LeaderError::Forbidden {
            namespace: self.config.namespace.clone(),
            name: self.config.name.clone(),
            source,
        }
    }

    /// Waits until this identity holds the Lease. `None` when `shutdown` fires first.
    pub async fn acquire(
        &self,
        shutdown: &CancellationToken,
    ) -> Result<Option<Leadership>, LeaderError> {
        let mut observed: Option<Observed> = None;
        let mut announced_wait = false;
        loop {
            match self.try_acquire(&mut observed).await {
                Ok(Attempt::Acquired(lease)) => {
                    tracing::info!(
                        lease = %format!("{}/{}", self.config.namespace, self.config.name),
                        identity = %self.config.identity,
                        "became the leader"
                    );
                    return Ok(Some(self.lead(*lease)));
                }
                Ok(Attempt::HeldByOther) => {
                    if !announced_wait {
                        announced_wait = true;
                        tracing::info!(
                            holder = observed
                                .as_ref()
                                .and_then(|o| o.holder.as_deref())
                                .unwrap_or("?"),
                            "another replica leads; standing by"
                        );
                    }
                }
                Err(error) if self.fatal(&error) => return Err(self.fail(error)),
                Err(error) => {
                    tracing::debug!(%error, "leader election attempt failed; retrying");
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(None),
                _ = tokio::time::sleep(self.config.retry_period) => {}
            }
        }
    }

    async fn try_acquire(&self, observed: &mut Option<Observed>) -> Result<Attempt, kube::Error> {
        let identity = &self.config.identity;
        let duration_seconds =
            i32::try_from(self.config.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX);
        let Some(current) = self.api.get_opt(&self.config.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(identity.clone()),
                    lease_duration_seconds: Some(duration_seconds),
                    acquire_time: Some(now()),
                    renew_time: Some(now()),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => Ok(Attempt::Acquired(Box::new(created))),
                Err(error) if is_code(&error, 409) => Ok(Attempt::HeldByOther),
                Err(error) => Err(error),
            };
        };
        let spec = current.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let duration = Duration::from_secs(
            u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0),
        );
        let version = current.metadata.resource_version.clone();
        // The record's age counts from when we first saw this version of it.
        let changed = observed
            .as_ref()
            .is_none_or(|o| o.resource_version != version);
        if changed {
            *observed = Some(Observed {
                resource_version: version,
                holder: holder.clone(),
                duration,
                seen_at: Instant::now(),
            });
        }
        let expired = observed
            .as_ref()
            .is_some_and(|o| o.seen_at.elapsed() >= o.duration);
        let ours = holder.as_deref() == Some(identity.as_str());
        let free = holder.is_none();
        if !(ours || free || expired) {
            return Ok(Attempt::HeldByOther);
        }
        let mut next = current.clone();
        let transitions = spec.lease_transitions.unwrap_or(0);
        next.spec = Some(LeaseSpec {
            holder_identity: Some(identity.clone()),
            lease_duration_seconds: Some(duration_seconds),
            acquire_time: if ours { spec.acquire_time } else { Some(now()) },
            renew_time: Some(now()),
            lease_transitions: Some(if ours { transitions } else { transitions + 1 }),
            ..spec
        });
        // The resourceVersion in `next` makes this a compare-and-swap: 409 if anyone wrote.
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &next)
            .await
        {
            Ok(replaced) => Ok(Attempt::Acquired(Box::new(replaced))),
            Err(error) if is_code(&error, 409) => Ok(Attempt::HeldByOther),
            Err(error) => Err(error),
        }
    }

    fn lead(&self, lease: Lease) -> Leadership {
        let lost = CancellationToken::new();
        let stop = CancellationToken::new();
        let renewer = Renewer {
            api: self.api.clone(),
            config: self.config.clone(),
            lease,
        };
        let task = tokio::spawn(renewer.run(lost.clone(), stop.clone()));
        Leadership {
            lost,
            stop,
            task,
            api: self.api.clone(),
        }
    }
}

struct Renewer {
    api: Api<Lease>,
    config: LeaseConfig,
    lease: Lease,
}

impl Renewer {
    /// Renews until `stop` (then returns the last Lease for release) or until leadership is
    /// lost (then cancels `lost`).
    async fn run(mut self, lost: CancellationToken, stop: CancellationToken) -> Option<Lease> {
        let mut last_renewal = Instant::now();
        loop {
            tokio::select! {
                _ = stop.cancelled() => return Some(self.lease),
                _ = tokio::time::sleep(self.config.retry_period) => {}
            }
            match self.renew().await {
                Ok(Some(renewed)) => {
                    self.lease = renewed;
                    last_renewal = Instant::now();
                }
                Ok(None) => {
                    tracing::warn!(lease = %self.config.name, "another replica holds the Lease now; no longer leading");
                    lost.cancel();
                    return None;
                }
                Err(error) => {
                    tracing::warn!(lease = %self.config.name, %error, "renewing the Lease failed");
                    if last_renewal.elapsed() >= self.config.renew_deadline {
                        tracing::warn!(
                            lease = %self.config.name,
                            "could not renew the Lease within {:?}; no longer leading",
                            self.config.renew_deadline
                        );
                        lost.cancel();
                        return None;
                    }
                }
            }
        }
    }

    /// `Ok(None)` when someone else holds the Lease.
    async fn renew(&self) -> Result<Option<Lease>, kube::Error> {
        let mut next = self.lease.clone();
        if let Some(spec) = next.spec.as_mut() {
            spec.renew_time = Some(now());
        }
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &next)
            .await
        {
            Ok(renewed) => Ok(Some(renewed)),
            Err(error) if is_code(&error, 409) || is_code(&error, 404) => {
                // Someone wrote the Lease: it is still ours only if we are still the holder.
                let current = self.api.get_opt(&self.config.name).await?;
                let holder = current
                    .as_ref()
                    .and_then(|l| l.spec.as_ref())
                    .and_then(|s| s.holder_identity.as_deref());
                match current {
                    Some(current) if holder == Some(self.config.identity.as_str()) => {
                        let mut retry = current;
                        if let Some(spec) = retry.spec.as_mut() {
                            spec.renew_time = Some(now());
                        }
                        self.api
                            .replace(&self.config.name, &PostParams::default(), &retry)
                            .await
                            .map(Some)
                    }
                    _ => Ok(None),
                }
            }
            Err(error) => Err(error),
        }
    }
}

/// Leadership held; a background task renews it.
pub struct Leadership {
    lost: CancellationToken,
    stop: CancellationToken,
    task: JoinHandle<Option<Lease>>,
    api: Api<Lease>,
}

impl Leadership {
    /// Cancelled when leadership is lost: stop acting at once.
    pub fn lost(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// Stops renewing and gives the Lease up, so a successor takes over without waiting for it
    /// to expire. Best effort and bounded in time.
    pub async fn release(self) {
        self.stop.cancel();
        let Ok(Some(lease)) = self.task.await else {
            return;
        };
        let mut lease = lease;
        let Some(name) = lease.metadata.name.clone() else {
            return;
        };
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(now());
        }
        let params = PostParams::default();
        let released = self.api.replace(&name, &params, &lease);
        match tokio::time::timeout(Duration::from_secs(5), released).await {
            Ok(Ok(_)) => tracing::info!(lease = %name, "released the leader Lease"),
            Ok(Err(error)) => {
                tracing::warn!(lease = %name, %error, "could not release the Lease; it expires on its own")
            }
            Err(_) => {
                tracing::warn!(lease = %name, "releasing the Lease timed out; it expires on its own")
            }
        }
    }

    /// Stops renewing without releasing: what a crash looks like to the others (for tests).
    pub fn abandon(self) {
        self.task.abort();
    }
}
