//! The kubelet's crash-loop back-off: how long a container that exited waits before it is
//! started again.
//!
//! It is client-go's `flowcontrol.Backoff` as `kuberuntime`'s `doBackOff` uses it, keyed by
//! container: the first restart is immediate; each later one waits, from when the container
//! finished, for the current delay, which starts at `base` and doubles up to `max`. A container
//! that finishes more than `2 × max` after its previous restart (it ran for 10 minutes with the
//! defaults) starts over at `base`. Upstream adds up to 10 % jitter; this does not, so that
//! tests can measure the waits.

use std::time::Duration;

use tokio::time::Instant;

/// The delays of the crash-loop back-off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CrashLoopBackoff {
    /// The first wait (the kubelet's 10 s).
    pub base: Duration,
    /// The longest wait (the kubelet's 300 s); a container that ran twice this long starts
    /// over at `base`.
    pub max: Duration,
}

impl Default for CrashLoopBackoff {
    fn default() -> Self {
        CrashLoopBackoff {
            base: Duration::from_secs(10),
            max: Duration::from_secs(300),
        }
    }
}

/// One container's back-off, kept in memory (a restarted agent starts every container's
/// back-off afresh, as a restarted kubelet does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BackoffEntry {
    /// The current wait.
    pub delay: Duration,
    /// When the last restart was let through.
    pub last_update: Instant,
}

/// What to do with a container that exited and must be restarted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Start it now.
    RestartNow,
    /// Wait until `until`; `delay` is the current back-off (for the `CrashLoopBackOff`
    /// message).
    Wait { until: Instant, delay: Duration },
}

impl CrashLoopBackoff {
    /// Decides for a container that finished at `finished`, at `now`; records a restart in
    /// `entry` when it lets one through.
    pub(crate) fn decide(
        &self,
        entry: &mut Option<BackoffEntry>,
        finished: Instant,
        now: Instant,
    ) -> Decision {
        if let Some(current) = entry
            && !self.expired(current, finished)
            && now.saturating_duration_since(finished) < current.delay
        {
            return Decision::Wait {
                until: finished + current.delay,
                delay: current.delay,
            };
        }
        self.next(entry, finished, now);
        Decision::RestartNow
    }

    /// `Backoff.Next`: `base` for a new or expired entry, else the delay doubled (capped).
    fn next(&self, entry: &mut Option<BackoffEntry>, finished: Instant, now: Instant) {
        let delay = match entry {
            Some(current) if !self.expired(current, finished) => {
                current.delay.saturating_mul(2).min(self.max)
            }
            _ => self.base.min(self.max),
        };
        *entry = Some(BackoffEntry {
            delay,
            last_update: now,
        });
    }

    /// `hasExpired`: the container finished more than `2 × max` after the last restart.
    fn expired(&self, entry: &BackoffEntry, finished: Instant) -> bool {
        finished.saturating_duration_since(entry.last_update) > self.max.saturating_mul(2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backoff() -> CrashLoopBackoff {
        CrashLoopBackoff {
            base: Duration::from_secs(10),
            max: Duration::from_secs(300),
        }
    }

    /// Crashes right after each restart: 0 s, then 10, 20, 40, … capped at 300 s.
    #[test]
    fn waits_double_from_the_second_restart_up_to_the_maximum() {
        let backoff = backoff();
        let mut entry = None;
        let mut now = Instant::now();
        let mut waits = Vec::new();
        for _ in 0..8 {
            let finished = now;
            match backoff.decide(&mut entry, finished, now) {
                Decision::RestartNow => waits.push(0),
                Decision::Wait { until, delay } => {
                    assert_eq!(until, finished + delay);
                    waits.push(delay.as_secs());
                    now = until;
                    assert_eq!(
                        backoff.decide(&mut entry, finished, now),
                        Decision::RestartNow
                    );
                }
            }
        }
        assert_eq!(waits, [0, 10, 20, 40, 80, 160, 300, 300]);
    }

    #[test]
    fn a_container_that_ran_ten_minutes_starts_over() {
        let backoff = backoff();
        let start = Instant::now();
        let mut entry = Some(BackoffEntry {
            delay: Duration::from_secs(160),
            last_update: start,
        });
        // Ran 10 min + 1 s since its last restart: restarted at once, delay back to base.
        let finished = start + Duration::from_secs(601);
        assert_eq!(
            backoff.decide(&mut entry, finished, finished),
            Decision::RestartNow
        );
        assert_eq!(entry.map(|e| e.delay), Some(Duration::from_secs(10)));
        // Ran 5 min only: still backing off, from the finish.
        let mut entry = Some(BackoffEntry {
            delay: Duration::from_secs(160),
            last_update: start,
        });
        let finished = start + Duration::from_secs(300);
        assert_eq!(
            backoff.decide(&mut entry, finished, finished + Duration::from_secs(1)),
            Decision::Wait {
                until: finished + Duration::from_secs(160),
                delay: Duration::from_secs(160)
            }
        );
    }

    #[test]
    fn a_lowered_base_scales_every_wait() {
        let backoff = CrashLoopBackoff {
            base: Duration::from_millis(100),
            max: Duration::from_millis(400),
        };
        let mut entry = None;
        let now = Instant::now();
        assert_eq!(backoff.decide(&mut entry, now, now), Decision::RestartNow);
        assert_eq!(
            backoff.decide(&mut entry, now, now),
            Decision::Wait {
                until: now + Duration::from_millis(100),
                delay: Duration::from_millis(100)
            }
        );
    }
}
