//! Leader election on a `coordination.k8s.io/v1` Lease, so that of several replicas of an
//! operator (or of the API server's in-process controllers) only one acts at a time.
//!
//! The algorithm is written once, over [`LeaseApi`]: the operator toolkit implements it with
//! the kube-rs client, the API server with its registry. Both therefore behave identically,
//! and `kubectl get lease` shows either holder.
//!
//! The algorithm is client-go's: a candidate takes the Lease when it is free, released or
//! expired, with an update conditioned on the resourceVersion it read (so of two racing
//! candidates one gets 409 Conflict); the leader renews it every retry period and considers
//! itself deposed when it has not renewed within the renew deadline or sees another holder.
//! Expiry is judged by the local clock from when *this* candidate last saw the record change,
//! never by comparing the other holder's timestamps with our clock, so clock skew between
//! machines does not matter, only clock rates.
//!
//! One difference from client-go, in when a standby looks: client-go reads the Lease once per
//! (jittered) retry period, so it sees each renewal up to a retry period late and tries to take
//! an expired Lease up to another retry period after it expired; with the defaults a takeover
//! comes 15–19 s after the holder died. A standby here reads the Lease
//! [`STANDBY_READS_PER_RETRY`] times per retry period and makes its attempt exactly when the
//! Lease it saw expires, so a takeover comes at most `lease_duration` plus a quarter retry
//! period after the holder's last renewal (13–15.5 s with the defaults). Seeing renewals
//! sooner only brings `seen_at` closer to the renewal it observes, never before it, so the
//! old leader's margin below is unchanged.
//!
//! # Guarantees
//! - The leader's term ends ([`Leadership::lost`] is cancelled) no later than `renew_deadline`
//!   after the *start* of its last successful renewal (or acquisition), whatever the API
//!   does: every Lease call is cut off at that deadline with `tokio::time::timeout`, and a timer
//!   fires at the deadline even while a call hangs. A standby counts the Lease's age from when
//!   it saw that renewal, which is later than its start, so it cannot take over earlier than
//!   `lease_duration` after it: the old leader has at least `lease_duration - renew_deadline`
//!   (5 s with the defaults) to stop its work before a successor can begin.
//! - Every write is a compare-and-swap on the resourceVersion last read or written, including
//!   the release: a Lease someone else wrote since our last renewal is never overwritten, so a
//!   release can only ever clear our own claim.
//! - Dropping a [`Leadership`] stops its renewals at once and cancels `lost`.
//! - Errors are typed ([`LeaderError`]); only those that retrying cannot fix (no permission, no
//!   such namespace, an invalid timing) end [`LeaderElector::acquire`].
//!
//! # Caveats
//! - Time is measured with the monotonic clock; a process (or VM) paused for longer than
//!   `lease_duration - renew_deadline` may still act after its successor has started, because
//!   it cannot notice its deadline while it is not running.
//! - A request cut off by the deadline may still reach the server later. That is harmless:
//!   it is conditioned on a resourceVersion a successor's takeover has changed.

use std::time::Duration;

use futures::future::BoxFuture;
pub use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long giving up the Lease at shutdown may take before we let it expire instead.
pub const RELEASE_TIMEOUT: Duration = Duration::from_secs(2);

/// How many times per retry period a standby reads the Lease (client-go: once). Each read is
/// one GET of one small object; four per retry period (two per second with the defaults) see
/// every renewal within a quarter of a retry period of its writing.
pub const STANDBY_READS_PER_RETRY: u32 = 4;

/// Where the Lease lives and how it is timed.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    /// How long a Lease holds without renewal before another candidate may take it.
    pub lease_duration: Duration,
    /// How long after the start of its last successful renewal the leader gives up leading.
    /// Must be shorter than `lease_duration`: the difference is the time the old leader has
    /// to stop its work before a successor may start.
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

    /// client-go's checks: the renew deadline inside the lease, the retry period inside the
    /// renew deadline, and a lease of at least one second (its unit in the Lease).
    pub fn validate(&self) -> Result<(), LeaderError> {
        let problem = if self.lease_duration < Duration::from_secs(1) {
            Some("the lease duration must be at least 1s")
        } else if self.renew_deadline >= self.lease_duration {
            Some("the renew deadline must be shorter than the lease duration")
        } else if self.retry_period.is_zero() || self.retry_period >= self.renew_deadline {
            Some("the retry period must be positive and shorter than the renew deadline")
        } else {
            None
        };
        match problem {
            Some(problem) => Err(LeaderError::InvalidConfig(format!(
                "{problem} (lease {:?}, renew deadline {:?}, retry period {:?})",
                self.lease_duration, self.renew_deadline, self.retry_period
            ))),
            None => Ok(()),
        }
    }

    fn lease(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// An error of a [`LeaseApi`] call, boxed so that the election does not depend on the
/// transport's error type.
pub type ApiError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The three calls the election makes on its Lease, in one namespace. `replace` must be a
/// compare-and-swap on `metadata.resourceVersion` (409 Conflict when it moved), as a
/// Kubernetes PUT is.
pub trait LeaseApi: Clone + Send + Sync + 'static {
    /// The Lease `name`, `None` when it does not exist.
    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Lease>, ApiError>>;
    /// Creates the Lease (409 when it already exists).
    fn create<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<Lease, ApiError>>;
    /// Replaces the Lease `name`, conditioned on the resourceVersion in `lease`.
    fn replace<'a>(
        &'a self,
        name: &'a str,
        lease: &'a Lease,
    ) -> BoxFuture<'a, Result<Lease, ApiError>>;
    /// The HTTP status code of a Kubernetes `Status` error (401, 403, 404, 409…), `None` for
    /// transport errors.
    fn status_code(error: &ApiError) -> Option<u16>;
}

/// What can go wrong with the Lease.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// Retrying cannot help: no permission, or no such namespace.
    #[error(
        "the leader Lease {lease} cannot be used: {source} (the namespace must exist and this identity needs get, create and update on leases.coordination.k8s.io there)"
    )]
    Unusable {
        lease: String,
        #[source]
        source: ApiError,
    },
    #[error("invalid leader election settings: {0}")]
    InvalidConfig(String),
    #[error("{action} the Lease {lease} failed: {source}")]
    Request {
        action: &'static str,
        lease: String,
        #[source]
        source: ApiError,
    },
    #[error("{action} the Lease {lease} got no answer within {after:?}")]
    TimedOut {
        action: &'static str,
        lease: String,
        after: Duration,
    },
}

impl LeaderError {
    /// True for errors that retrying cannot fix.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            LeaderError::Unusable { .. } | LeaderError::InvalidConfig(_)
        )
    }
}

/// Competes for one Lease.
pub struct LeaderElector<A: LeaseApi> {
    api: A,
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

/// What one renewal found.
enum Renewal {
    Renewed(Box<Lease>),
    /// Someone else holds the Lease (or it is gone).
    Lost {
        holder: Option<String>,
    },
}

fn now() -> MicroTime {
    MicroTime(Timestamp::now())
}

fn holder_of(lease: &Lease) -> Option<&str> {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .filter(|h| !h.is_empty())
}

fn is_code<A: LeaseApi>(error: &ApiError, code: u16) -> bool {
    A::status_code(error) == Some(code)
}

impl<A: LeaseApi> LeaderElector<A> {
    /// An elector for `config`'s Lease; `api` must address `config.namespace`.
    pub fn new(api: A, config: LeaseConfig) -> LeaderElector<A> {
        LeaderElector { api, config }
    }

    fn request_error(&self, action: &'static str, source: ApiError) -> LeaderError {
        // No permission, or (on create) no such namespace.
        if is_code::<A>(&source, 401) || is_code::<A>(&source, 403) || is_code::<A>(&source, 404) {
            return LeaderError::Unusable {
                lease: self.config.lease(),
                source,
            };
        }
        LeaderError::Request {
            action,
            lease: self.config.lease(),
            source,
        }
    }

    /// Waits until this identity holds the Lease. `None` when `shutdown` fires first. Each
    /// attempt is bounded by the renew deadline.
    pub async fn acquire(
        &self,
        shutdown: &CancellationToken,
    ) -> Result<Option<Leadership<A>>, LeaderError> {
        self.config.validate()?;
        let mut observed: Option<Observed> = None;
        let mut announced_wait = false;
        loop {
            let mut wait = self.config.retry_period;
            // The term is counted from before the write that wins it: the others count the
            // Lease's age from when they see that write, which can only be later.
            let started = Instant::now();
            let attempt = tokio::select! {
                _ = shutdown.cancelled() => return Ok(None),
                attempt = tokio::time::timeout(
                    self.config.renew_deadline,
                    self.try_acquire(&mut observed),
                ) => attempt.unwrap_or_else(|_| Err(LeaderError::TimedOut {
                    action: "acquiring",
                    lease: self.config.lease(),
                    after: self.config.renew_deadline,
                })),
            };
            match attempt {
                Ok(Attempt::Acquired(lease)) => {
                    tracing::info!(
                        lease = %self.config.lease(),
                        identity = %self.config.identity,
                        "became the leader"
                    );
                    return Ok(Some(self.lead(*lease, started)));
                }
                Ok(Attempt::HeldByOther) => {
                    wait = self.standby_wait(observed.as_ref());
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
                Err(error) if error.is_fatal() => return Err(error),
                Err(error) => {
                    tracing::debug!(%error, "leader election attempt failed; retrying");
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(None),
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// How long a standby waits before its next read of a Lease another holds: a fraction of
    /// the retry period, or less when the Lease it saw expires sooner, so that the attempt
    /// comes at expiry rather than up to a retry period after it.
    fn standby_wait(&self, observed: Option<&Observed>) -> Duration {
        let poll = self.config.retry_period / STANDBY_READS_PER_RETRY;
        let left = observed.map(|o| o.duration.saturating_sub(o.seen_at.elapsed()));
        match left {
            Some(left) if !left.is_zero() => poll.min(left),
            _ => poll,
        }
    }

    async fn try_acquire(&self, observed: &mut Option<Observed>) -> Result<Attempt, LeaderError> {
        let identity = &self.config.identity;
        let duration_seconds =
            i32::try_from(self.config.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX);
        let current = self
            .api
            .get(&self.config.name)
            .await
            .map_err(|e| self.request_error("reading", e))?;
        let Some(current) = current else {
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
            return match self.api.create(&lease).await {
                Ok(created) => Ok(Attempt::Acquired(Box::new(created))),
                Err(error) if is_code::<A>(&error, 409) => Ok(Attempt::HeldByOther),
                Err(error) => Err(self.request_error("creating", error)),
            };
        };
        let spec = current.spec.clone().unwrap_or_default();
        let holder = holder_of(&current).map(str::to_string);
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
        match self.api.replace(&self.config.name, &next).await {
            Ok(replaced) => Ok(Attempt::Acquired(Box::new(replaced))),
            Err(error) if is_code::<A>(&error, 409) => Ok(Attempt::HeldByOther),
            Err(error) => Err(self.request_error("taking", error)),
        }
    }

    fn lead(&self, lease: Lease, term_started: Instant) -> Leadership<A> {
        let lost = CancellationToken::new();
        let stop = CancellationToken::new();
        let renewer = Renewer {
            api: self.api.clone(),
            config: self.config.clone(),
            held: Held {
                lease,
                valid_until: term_started + self.config.renew_deadline,
            },
        };
        let task = tokio::spawn(renewer.run(lost.clone(), stop.clone()));
        Leadership {
            lost,
            stop,
            task: Some(task),
            api: self.api.clone(),
            config: self.config.clone(),
        }
    }
}

/// The Lease as last written by us, and until when we may act on it.
struct Held {
    lease: Lease,
    valid_until: Instant,
}

struct Renewer<A: LeaseApi> {
    api: A,
    config: LeaseConfig,
    held: Held,
}

impl<A: LeaseApi> Renewer<A> {
    /// Renews until `stop` (then returns what it holds, for the release) or until leadership
    /// is lost (then cancels `lost` and returns `None`).
    async fn run(mut self, lost: CancellationToken, stop: CancellationToken) -> Option<Held> {
        let lease = self.config.lease();
        loop {
            tokio::select! {
                biased;
                _ = stop.cancelled() => return Some(self.held),
                _ = tokio::time::sleep_until(self.held.valid_until) => {
                    tracing::warn!(%lease, "the renew deadline passed without a renewal; no longer leading");
                    lost.cancel();
                    return None;
                }
                _ = tokio::time::sleep(self.config.retry_period) => {}
            }
            let started = Instant::now();
            let renewal = tokio::select! {
                biased;
                // The renewal may land after all; the release is conditioned on the last
                // version we know, so it then fails safely and the Lease expires instead.
                _ = stop.cancelled() => return Some(self.held),
                renewal = tokio::time::timeout_at(self.held.valid_until, self.renew()) => renewal,
            };
            match renewal {
                Ok(Ok(Renewal::Renewed(renewed))) => {
                    self.held = Held {
                        lease: *renewed,
                        valid_until: started + self.config.renew_deadline,
                    };
                }
                Ok(Ok(Renewal::Lost { holder })) => {
                    tracing::warn!(
                        %lease,
                        holder = holder.as_deref().unwrap_or("none"),
                        "another replica holds the Lease now; no longer leading"
                    );
                    lost.cancel();
                    return None;
                }
                Ok(Err(error)) => {
                    tracing::warn!(%lease, %error, "renewing the Lease failed; retrying until the renew deadline");
                }
                Err(_) => {
                    tracing::warn!(
                        %lease,
                        "could not renew the Lease within the renew deadline ({:?}); no longer leading",
                        self.config.renew_deadline
                    );
                    lost.cancel();
                    return None;
                }
            }
        }
    }

    fn error(&self, action: &'static str, source: ApiError) -> LeaderError {
        LeaderError::Request {
            action,
            lease: self.config.lease(),
            source,
        }
    }

    async fn renew(&self) -> Result<Renewal, LeaderError> {
        let mut next = self.held.lease.clone();
        if let Some(spec) = next.spec.as_mut() {
            spec.renew_time = Some(now());
        }
        let name = &self.config.name;
        match self.api.replace(name, &next).await {
            Ok(renewed) => Ok(Renewal::Renewed(Box::new(renewed))),
            Err(error) if is_code::<A>(&error, 409) || is_code::<A>(&error, 404) => {
                // Someone wrote the Lease (perhaps our own earlier renewal that was cut off
                // but landed): it is still ours only if we are still the holder.
                let current = self
                    .api
                    .get(name)
                    .await
                    .map_err(|e| self.error("reading", e))?;
                match current {
                    Some(mut current) if holder_of(&current) == Some(&self.config.identity) => {
                        if let Some(spec) = current.spec.as_mut() {
                            spec.renew_time = Some(now());
                        }
                        match self.api.replace(name, &current).await {
                            Ok(renewed) => Ok(Renewal::Renewed(Box::new(renewed))),
                            Err(error) => Err(self.error("renewing", error)),
                        }
                    }
                    other => Ok(Renewal::Lost {
                        holder: other.as_ref().and_then(holder_of).map(str::to_string),
                    }),
                }
            }
            Err(error) => Err(self.error("renewing", error)),
        }
    }
}

/// How a release ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Released {
    /// The holder was cleared: a standby may take the Lease at once.
    Released,
    /// The Lease was no longer ours (lost, expired, or written by someone else since our last
    /// renewal); it was left alone.
    NotHeld,
}

/// Leadership held; a background task renews it. Dropping it stops the renewals and cancels
/// [`Leadership::lost`].
pub struct Leadership<A: LeaseApi> {
    lost: CancellationToken,
    stop: CancellationToken,
    task: Option<JoinHandle<Option<Held>>>,
    api: A,
    config: LeaseConfig,
}

impl<A: LeaseApi> Leadership<A> {
    /// Cancelled when leadership ends (lost, deadline passed, released or dropped): stop acting
    /// at once.
    pub fn lost(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// Stops renewing and gives the Lease up, so a successor takes over without waiting for it
    /// to expire; bounded by [`RELEASE_TIMEOUT`]. Clears the holder only if the Lease is
    /// still exactly as we last wrote it (a compare-and-swap on its resourceVersion) and our
    /// term has not run out.
    pub async fn release(mut self) -> Result<Released, LeaderError> {
        self.stop.cancel();
        let Some(task) = self.task.take() else {
            return Ok(Released::NotHeld);
        };
        let held = match tokio::time::timeout(RELEASE_TIMEOUT, task).await {
            Ok(Ok(Some(held))) => held,
            _ => return Ok(Released::NotHeld),
        };
        self.lost.cancel();
        if Instant::now() >= held.valid_until {
            return Ok(Released::NotHeld);
        }
        let mut lease = held.lease;
        if let Some(spec) = lease.spec.as_mut() {
            // client-go's release record: no holder, a one-second lease.
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.acquire_time = Some(now());
            spec.renew_time = Some(now());
        }
        let release = self.api.replace(&self.config.name, &lease);
        match tokio::time::timeout(RELEASE_TIMEOUT, release).await {
            Ok(Ok(_)) => Ok(Released::Released),
            Ok(Err(error)) if is_code::<A>(&error, 409) || is_code::<A>(&error, 404) => {
                Ok(Released::NotHeld)
            }
            Ok(Err(error)) => Err(LeaderError::Request {
                action: "releasing",
                lease: self.config.lease(),
                source: error,
            }),
            Err(_) => Err(LeaderError::TimedOut {
                action: "releasing",
                lease: self.config.lease(),
                after: RELEASE_TIMEOUT,
            }),
        }
    }
}

impl<A: LeaseApi> Drop for Leadership<A> {
    fn drop(&mut self) {
        self.stop.cancel();
        self.lost.cancel();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A Kubernetes-style error with a status code, for the fake.
    #[derive(Debug, thiserror::Error)]
    #[error("status {0}")]
    struct Status(u16);

    /// One Lease in memory, with resourceVersion compare-and-swap as a Kubernetes PUT has; the
    /// test plays the other holder by writing to it directly. Only the timing logic above the
    /// API is under test here; the real transports have their own tests.
    #[derive(Clone, Default)]
    struct MemoryLease {
        lease: Arc<Mutex<Option<Lease>>>,
        version: Arc<Mutex<u64>>,
    }

    impl MemoryLease {
        fn store(&self, mut lease: Lease) -> Lease {
            let mut version = self.version.lock().expect("lock");
            *version += 1;
            lease.metadata.resource_version = Some(version.to_string());
            *self.lease.lock().expect("lock") = Some(lease.clone());
            lease
        }

        fn holder(&self) -> Option<String> {
            let lease = self.lease.lock().expect("lock");
            lease.as_ref().and_then(holder_of).map(str::to_string)
        }

        /// The other replica renews its hold.
        fn renew_as(&self, holder: &str, seconds: i32) {
            let mut lease = self.lease.lock().expect("lock").clone().unwrap_or_default();
            lease.metadata.name = Some("l".into());
            lease.spec = Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                lease_duration_seconds: Some(seconds),
                renew_time: Some(now()),
                ..LeaseSpec::default()
            });
            self.store(lease);
        }
    }

    impl LeaseApi for MemoryLease {
        fn get<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<Option<Lease>, ApiError>> {
            let lease = self.lease.lock().expect("lock").clone();
            Box::pin(async move { Ok(lease) })
        }

        fn create<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<Lease, ApiError>> {
            let exists = self.lease.lock().expect("lock").is_some();
            let result = if exists {
                Err(Box::new(Status(409)) as ApiError)
            } else {
                Ok(self.store(lease.clone()))
            };
            Box::pin(async move { result })
        }

        fn replace<'a>(
            &'a self,
            _: &'a str,
            lease: &'a Lease,
        ) -> BoxFuture<'a, Result<Lease, ApiError>> {
            let current = self
                .lease
                .lock()
                .expect("lock")
                .as_ref()
                .and_then(|l| l.metadata.resource_version.clone());
            let result = if current == lease.metadata.resource_version {
                Ok(self.store(lease.clone()))
            } else {
                Err(Box::new(Status(409)) as ApiError)
            };
            Box::pin(async move { result })
        }

        fn status_code(error: &ApiError) -> Option<u16> {
            error.downcast_ref::<Status>().map(|status| status.0)
        }
    }

    /// The other holder renews every retry period for `renewals` periods, then dies; returns
    /// when it last renewed. A standby's takeover comes no sooner than `lease_duration` after
    /// that renewal and no later than a quarter retry period past it (client-go: up to two
    /// retry periods past it).
    #[tokio::test(start_paused = true)]
    async fn a_standby_takes_over_as_the_lease_it_saw_expires() {
        let api = MemoryLease::default();
        api.renew_as("other", 15);
        let config = LeaseConfig::new("ns".into(), "l".into(), "me".into());
        let retry = config.retry_period;
        let elector = LeaderElector::new(api.clone(), config.clone());
        let shutdown = CancellationToken::new();
        let candidate = tokio::spawn(async move { elector.acquire(&shutdown).await });
        // The holder renews five times, offset from the standby's reads, then dies.
        tokio::time::sleep(retry / 3).await;
        let mut last_renewal = Instant::now();
        for _ in 0..5 {
            tokio::time::sleep(retry).await;
            assert_eq!(api.holder().as_deref(), Some("other"));
            api.renew_as("other", 15);
            last_renewal = Instant::now();
        }
        let leadership = candidate
            .await
            .expect("candidate task")
            .expect("acquire")
            .expect("not shut down");
        let after = last_renewal.elapsed();
        assert_eq!(api.holder().as_deref(), Some("me"));
        assert!(
            after >= config.lease_duration,
            "took over {after:?} after the last renewal, before the Lease expired"
        );
        assert!(
            after <= config.lease_duration + retry / STANDBY_READS_PER_RETRY,
            "took over {after:?} after the last renewal"
        );
        drop(leadership);
    }

    /// A Lease nobody renews from the start is taken exactly as it expires on the standby's
    /// clock, not at the next retry tick.
    #[tokio::test(start_paused = true)]
    async fn a_lease_never_renewed_is_taken_at_its_expiry() {
        let api = MemoryLease::default();
        api.renew_as("gone", 15);
        let config = LeaseConfig::new("ns".into(), "l".into(), "me".into());
        let started = Instant::now();
        let elector = LeaderElector::new(api.clone(), config.clone());
        let leadership = elector
            .acquire(&CancellationToken::new())
            .await
            .expect("acquire")
            .expect("not shut down");
        let after = started.elapsed();
        assert!(
            after >= config.lease_duration
                && after < config.lease_duration + Duration::from_millis(10),
            "took over after {after:?}"
        );
        drop(leadership);
    }

    #[test]
    fn timings_must_leave_the_old_leader_time_to_stop() {
        let valid = LeaseConfig::new("ns".into(), "l".into(), "me".into());
        assert!(valid.validate().is_ok());
        let mut inverted = valid.clone();
        inverted.renew_deadline = inverted.lease_duration;
        let error = inverted.validate().expect_err("renew deadline = lease");
        assert!(error.is_fatal());
        assert!(error.to_string().contains("renew deadline"), "{error}");
        let mut slow_retry = valid.clone();
        slow_retry.retry_period = slow_retry.renew_deadline;
        assert!(slow_retry.validate().is_err());
        let mut tiny = valid;
        tiny.lease_duration = Duration::from_millis(500);
        tiny.renew_deadline = Duration::from_millis(300);
        tiny.retry_period = Duration::from_millis(100);
        assert!(tiny.validate().is_err());
    }
}
