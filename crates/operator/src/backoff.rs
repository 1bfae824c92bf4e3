//! Retry pacing: per-object exponential backoff with full jitter, and rate limits toward each
//! external system.
//!
//! Full jitter (a uniformly random delay between zero and the capped exponential bound) is what
//! spreads hundreds of objects that failed together: when a backend comes back after an outage
//! their retries arrive spread over the whole window instead of in one wave. The rate limit is
//! the second line of defence: whatever the retries do, no more than the configured number of
//! operations per second reach one external system.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use rand::Rng;

/// Exponential backoff bounds: attempt `n` (from 1) waits a random time in
/// `[0, min(cap, base · 2^(n-1))]`.
#[derive(Clone, Copy, Debug)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_millis(500),
            cap: Duration::from_secs(60),
        }
    }
}

impl Backoff {
    /// The upper bound of the delay before retry `attempt` (1 = first retry).
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(30);
        self.base
            .checked_mul(1u32 << doublings)
            .map_or(self.cap, |bound| bound.min(self.cap))
    }

    /// A full-jitter delay before retry `attempt`.
    pub fn delay(&self, attempt: u32) -> Duration {
        let ceiling = self.ceiling(attempt);
        if ceiling.is_zero() {
            return ceiling;
        }
        rand::rng().random_range(Duration::ZERO..=ceiling)
    }

    /// The delay before retrying an error marked permanent ([`crate::error`]): between half
    /// the cap and the cap, whatever the attempt. Waiting cannot fix it, so there is no point
    /// starting fast; the jitter still spreads the objects that failed together.
    pub fn permanent_delay(&self) -> Duration {
        let low = self.cap / 2;
        if self.cap.is_zero() {
            return self.cap;
        }
        rand::rng().random_range(low..=self.cap)
    }

    /// The delay before retry `attempt` of an error that is `permanent` or not.
    pub fn delay_for(&self, attempt: u32, permanent: bool) -> Duration {
        if permanent {
            self.permanent_delay()
        } else {
            self.delay(attempt)
        }
    }
}

/// Failed attempts per object, so that each object backs off on its own.
///
/// A failure also *holds* the object until its retry time: a reconcile that arrives earlier
/// because of a change that does not matter (the toolkit's own status write, say) is put off
/// instead of retrying at once, which would defeat the backoff. A change of the object's
/// fingerprint (its spec generation, deletion, finalizers or annotations) lifts the hold.
#[derive(Debug, Default)]
pub struct Attempts {
    failures: Mutex<HashMap<String, Failure>>,
}

#[derive(Debug, Clone, Copy)]
struct Failure {
    count: u32,
    not_before: Instant,
    fingerprint: u64,
}

impl Attempts {
    /// Records one more failure of `key` in state `fingerprint`; returns how many there have
    /// been in a row and the delay before the next attempt (see [`Backoff::delay_for`]).
    pub fn failed(
        &self,
        key: &str,
        fingerprint: u64,
        backoff: &Backoff,
        permanent: bool,
    ) -> (u32, Duration) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let count = failures.get(key).map_or(0, |f| f.count).saturating_add(1);
        let delay = backoff.delay_for(count, permanent);
        failures.insert(
            key.to_string(),
            Failure {
                count,
                not_before: Instant::now() + delay,
                fingerprint,
            },
        );
        (count, delay)
    }

    /// How many failures in a row `key` has had.
    pub fn current(&self, key: &str) -> u32 {
        let failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        failures.get(key).map_or(0, |f| f.count)
    }

    /// How much longer `key` waits for its retry, if it failed in the same state.
    pub fn held(&self, key: &str, fingerprint: u64) -> Option<Duration> {
        let failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let failure = failures.get(key)?;
        (failure.fingerprint == fingerprint)
            .then(|| failure.not_before.saturating_duration_since(Instant::now()))
            .filter(|left| !left.is_zero())
    }

    /// Forgets `key`'s failures after a success (or once the object is gone).
    pub fn succeeded(&self, key: &str) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        failures.remove(key);
    }

    /// How many objects have failures recorded.
    pub fn len(&self) -> usize {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets the failures of every key for which `exists` is false: objects deleted while
    /// failing are never reconciled again, so nothing else would ever remove their entry.
    /// Returns how many were forgotten.
    pub fn prune(&self, exists: impl Fn(&str) -> bool) -> usize {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let before = failures.len();
        failures.retain(|key, _| exists(key));
        before - failures.len()
    }
}

/// Operations per second toward one external system, with a burst allowance.
#[derive(Clone, Copy, Debug)]
pub struct RateLimit {
    pub per_second: NonZeroU32,
    pub burst: NonZeroU32,
}

impl RateLimit {
    pub fn new(per_second: u32, burst: u32) -> Option<RateLimit> {
        Some(RateLimit {
            per_second: NonZeroU32::new(per_second)?,
            burst: NonZeroU32::new(burst)?,
        })
    }
}

/// One token bucket per external system (a PostgreSQL server, a cloud account), shared by every
/// reconcile of the process.
#[derive(Debug)]
pub struct RateLimits {
    limit: RateLimit,
    buckets: Mutex<HashMap<String, Arc<DefaultDirectRateLimiter>>>,
}

impl RateLimits {
    pub fn new(limit: RateLimit) -> RateLimits {
        RateLimits {
            limit,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    pub fn limit(&self) -> RateLimit {
        self.limit
    }

    /// Waits until one more operation toward `system` is allowed.
    pub async fn acquire(&self, system: &str) {
        let bucket = {
            let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
            Arc::clone(buckets.entry(system.to_string()).or_insert_with(|| {
                Arc::new(RateLimiter::direct(
                    Quota::per_second(self.limit.per_second).allow_burst(self.limit.burst),
                ))
            }))
        };
        bucket.until_ready().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn the_ceiling_doubles_up_to_the_cap() {
        let backoff = Backoff {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(1),
        };
        let ceilings: Vec<u128> = (1..=6).map(|n| backoff.ceiling(n).as_millis()).collect();
        assert_eq!(ceilings, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(backoff.ceiling(u32::MAX), Duration::from_secs(1));
    }

    #[test]
    fn delays_are_spread_over_the_whole_window() {
        let backoff = Backoff {
            base: Duration::from_secs(8),
            cap: Duration::from_secs(8),
        };
        let delays: Vec<Duration> = (0..400).map(|_| backoff.delay(1)).collect();
        assert!(delays.iter().all(|d| *d <= Duration::from_secs(8)));
        // Full jitter: a quarter of the draws in each quarter of the window, give or take.
        for quarter in 0..4u32 {
            let low = Duration::from_secs(2 * u64::from(quarter));
            let high = low + Duration::from_secs(2);
            let count = delays.iter().filter(|d| **d >= low && **d < high).count();
            assert!((50..=150).contains(&count), "quarter {quarter}: {count}");
        }
    }

    #[test]
    fn attempts_count_per_object_and_reset_on_success() {
        let attempts = Attempts::default();
        let backoff = Backoff::default();
        assert_eq!(attempts.failed("a", 1, &backoff, false).0, 1);
        assert_eq!(attempts.failed("a", 1, &backoff, false).0, 2);
        assert_eq!(attempts.failed("b", 1, &backoff, false).0, 1);
        attempts.succeeded("a");
        assert_eq!(attempts.current("a"), 0);
        assert_eq!(attempts.current("b"), 1);
    }

    #[test]
    fn a_failure_holds_the_object_until_its_retry_unless_it_changed() {
        let attempts = Attempts::default();
        let slow = Backoff {
            base: Duration::from_secs(60),
            cap: Duration::from_secs(60),
        };
        // Full jitter may draw zero: fail until the draw holds (bounded).
        let held = (0..100).find_map(|_| {
            attempts.failed("a", 7, &slow, false);
            attempts.held("a", 7)
        });
        assert!(held.is_some_and(|left| left <= Duration::from_secs(60)));
        assert_eq!(attempts.held("a", 8), None, "a changed object is not held");
        assert_eq!(attempts.held("b", 7), None);
        attempts.succeeded("a");
        assert_eq!(attempts.held("a", 7), None);
    }

    #[test]
    fn pruning_forgets_the_objects_that_are_gone() {
        let attempts = Attempts::default();
        let backoff = Backoff::default();
        for key in ["kept", "deleted-while-failing", "also-gone"] {
            attempts.failed(key, 1, &backoff, false);
        }
        assert_eq!(attempts.len(), 3);
        let live = ["kept", "never-failed"];
        assert_eq!(attempts.prune(|key| live.contains(&key)), 2);
        assert_eq!(attempts.len(), 1);
        assert_eq!(
            attempts.current("kept"),
            1,
            "a live object keeps its backoff"
        );
        assert_eq!(attempts.current("deleted-while-failing"), 0);
        assert_eq!(attempts.prune(|key| live.contains(&key)), 0);
    }

    #[test]
    fn a_permanent_error_waits_near_the_cap_from_the_first_attempt() {
        let backoff = Backoff {
            base: Duration::from_millis(500),
            cap: Duration::from_secs(60),
        };
        for _ in 0..200 {
            let delay = backoff.delay_for(1, true);
            assert!(
                delay >= Duration::from_secs(30) && delay <= Duration::from_secs(60),
                "{delay:?}"
            );
            // A transient error's first retry stays within the base.
            assert!(backoff.delay_for(1, false) <= Duration::from_millis(500));
        }
        let attempts = Attempts::default();
        let (count, delay) = attempts.failed("a", 1, &backoff, true);
        assert_eq!(count, 1);
        assert!(delay >= Duration::from_secs(30), "{delay:?}");
    }

    #[tokio::test]
    async fn a_rate_limit_holds_each_system_to_its_quota() {
        let limits = RateLimits::new(RateLimit::new(20, 1).expect("non-zero"));
        let started = Instant::now();
        for _ in 0..11 {
            limits.acquire("pg-a").await;
        }
        // Ten waits of 50 ms after the first token.
        assert!(
            started.elapsed() >= Duration::from_millis(450),
            "{:?}",
            started.elapsed()
        );
        // Another system has its own bucket.
        let other = Instant::now();
        limits.acquire("pg-b").await;
        assert!(other.elapsed() < Duration::from_millis(40));
    }
}
