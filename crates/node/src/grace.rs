//! Grace-period arithmetic of a Pod's termination: when its containers get `SIGKILL`.
//!
//! The rules, from the kubelet (`pod_workers.go`, `kuberuntime_container.go`) and the API
//! server (`shared/spec/deletion-semantics.md` PG1–PG5):
//!
//! - The clock starts when the agent first acts on the deletion: the deadline is that moment
//!   plus `metadata.deletionGracePeriodSeconds`. PreStop hooks run inside the grace period;
//!   `SIGTERM` follows each container's hook, and `SIGKILL` comes at the deadline.
//! - A later DELETE may only *shorten* the grace (the API server keeps the smaller value and
//!   moves `deletionTimestamp` to `first deletion + new grace`). The kubelet then restarts its
//!   kill with the new grace, so the deadline becomes `now + new grace` when that is earlier;
//!   a longer grace is ignored.
//! - After `SIGTERM` a container always gets at least [`MINIMUM_GRACE`] before `SIGKILL`
//!   (the kubelet's `minimumGracePeriodInSeconds`), even when the hook used up the grace.
//! - An agent that restarts does not restart the clock: it keeps the deadline it recorded, or,
//!   if the deletion happened while it was down, takes `metadata.deletionTimestamp`, which the
//!   API server set to `time of the DELETE + grace`.

use std::time::{Duration, SystemTime};

/// The shortest time between `SIGTERM` and `SIGKILL` (the kubelet's 2 s).
pub(crate) const MINIMUM_GRACE: Duration = Duration::from_secs(2);

/// The termination clock of one Pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GraceClock {
    /// When the termination began (for the record; the deadline is what counts).
    pub started: SystemTime,
    /// When `SIGKILL` is due (before the minimum window after `SIGTERM`).
    pub deadline: SystemTime,
    /// The grace the deadline was computed from, in seconds; only a smaller one changes it.
    pub grace_seconds: i64,
}

impl GraceClock {
    /// A termination this agent starts at `now` with `grace_seconds`.
    pub(crate) fn start(now: SystemTime, grace_seconds: i64) -> GraceClock {
        let grace_seconds = grace_seconds.max(0);
        GraceClock {
            started: now,
            deadline: now + seconds(grace_seconds),
            grace_seconds,
        }
    }

    /// A termination requested while the agent was down: the API server's deadline,
    /// `deletionTimestamp` (= time of the DELETE + grace).
    pub(crate) fn resumed(deletion_timestamp: SystemTime, grace_seconds: i64) -> GraceClock {
        let grace_seconds = grace_seconds.max(0);
        GraceClock {
            started: deletion_timestamp
                .checked_sub(seconds(grace_seconds))
                .unwrap_or(deletion_timestamp),
            deadline: deletion_timestamp,
            grace_seconds,
        }
    }

    /// Applies a grace seen at `now`: a smaller one moves the deadline to
    /// `now + max(grace, MINIMUM_GRACE)` if that is earlier. Returns whether anything changed.
    pub(crate) fn shorten(&mut self, now: SystemTime, grace_seconds: i64) -> bool {
        let grace_seconds = grace_seconds.max(0);
        if grace_seconds >= self.grace_seconds {
            return false;
        }
        self.grace_seconds = grace_seconds;
        let restarted = now + seconds(grace_seconds).max(MINIMUM_GRACE);
        if restarted < self.deadline {
            self.deadline = restarted;
        }
        true
    }
}

/// `SIGKILL` time for a container with kill deadline `deadline` that got `SIGTERM` at
/// `term_sent`: the deadline, but never less than [`MINIMUM_GRACE`] after the `SIGTERM`.
pub(crate) fn kill_at(deadline: SystemTime, term_sent: SystemTime) -> SystemTime {
    deadline.max(term_sent + MINIMUM_GRACE)
}

fn seconds(grace_seconds: i64) -> Duration {
    Duration::from_secs(u64::try_from(grace_seconds).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    /// How long a preStop hook starting at `now` may run.
    fn budget(clock: &GraceClock, now: SystemTime) -> Duration {
        clock.deadline.duration_since(now).unwrap_or(Duration::ZERO)
    }

    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_000_000 + seconds)
    }

    #[test]
    fn the_deadline_is_the_start_plus_the_grace() {
        let clock = GraceClock::start(at(0), 30);
        assert_eq!(clock.deadline, at(30));
        // SIGTERM right away: SIGKILL at the deadline.
        assert_eq!(kill_at(clock.deadline, at(0)), at(30));
        // A preStop hook may use the whole grace.
        assert_eq!(budget(&clock, at(10)), Duration::from_secs(20));
        assert_eq!(budget(&clock, at(31)), Duration::ZERO);
    }

    #[test]
    fn sigterm_is_always_followed_by_two_seconds_before_sigkill() {
        let clock = GraceClock::start(at(0), 5);
        // The hook used up the grace: SIGTERM at 5 s, SIGKILL at 7 s.
        assert_eq!(kill_at(clock.deadline, at(5)), at(7));
        // Grace 1 (`kubectl delete --now`): 2 s anyway.
        assert_eq!(kill_at(GraceClock::start(at(0), 1).deadline, at(0)), at(2));
        // Grace 0 while the pod is still in the API (it has finalizers): 2 s too.
        assert_eq!(kill_at(GraceClock::start(at(0), 0).deadline, at(0)), at(2));
    }

    #[test]
    fn only_a_shorter_grace_moves_the_deadline_and_it_counts_from_now() {
        let mut clock = GraceClock::start(at(0), 30);
        // A longer grace is ignored, as upstream.
        assert!(!clock.shorten(at(1), 60));
        assert_eq!(clock.deadline, at(30));
        // `kubectl delete --grace-period=2` one second later: SIGKILL at 3 s.
        assert!(clock.shorten(at(1), 2));
        assert_eq!(clock.deadline, at(3));
        assert_eq!(clock.grace_seconds, 2);
        // The same grace again changes nothing.
        assert!(!clock.shorten(at(2), 2));
        assert_eq!(clock.deadline, at(3));
        // A shorter grace that would end later than the current deadline keeps it.
        let mut clock = GraceClock::start(at(0), 10);
        assert!(clock.shorten(at(9), 5));
        assert_eq!(clock.deadline, at(10));
        // Grace 1 still leaves the minimum window.
        let mut clock = GraceClock::start(at(0), 30);
        assert!(clock.shorten(at(4), 1));
        assert_eq!(clock.deadline, at(6));
    }

    #[test]
    fn a_restarted_agent_keeps_the_api_servers_deadline() {
        // Deleted with grace 10 at t=0 while the agent was down; it is back at t=4.
        let clock = GraceClock::resumed(at(10), 10);
        assert_eq!(clock.started, at(0));
        assert_eq!(clock.deadline, at(10));
        assert_eq!(budget(&clock, at(4)), Duration::from_secs(6));
        // Back after the deadline: SIGTERM now, SIGKILL after the minimum window only.
        assert_eq!(budget(&clock, at(12)), Duration::ZERO);
        assert_eq!(kill_at(clock.deadline, at(12)), at(14));
    }
}
