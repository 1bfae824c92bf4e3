//! The decision rules of deletion, as pure functions the registry applies.
//!
//! `shared/spec/deletion-semantics.md` §3–§4 and §6: which garbage-collector finalizers a
//! DELETE adds or removes (P3–P7) and how graceful deletion moves a pod's deletion timestamp
//! (D3.3–D3.6, PG1). Kept free of storage so each rule is unit-tested against the spec.

use chrono::{DateTime, Duration, Utc};
use serde_json::Value;

use crate::object;
use crate::registry::DeleteOptions;

pub const ORPHAN_FINALIZER: &str = "orphan";
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";
/// The namespace controller's token in a namespace's `spec.finalizers`.
pub const NAMESPACE_FINALIZER: &str = "kubernetes";

/// P7: what a kind's dependents get when a DELETE names no policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GcPolicy {
    /// Background deletion of dependents (no finalizer): most kinds.
    DeleteDependents,
    /// `orphan` is added when no policy is given (batch/v1 Job).
    OrphanDependents,
    /// GC finalizers are never added or removed (core Event).
    Unsupported,
}

fn first_gc_finalizer(finalizers: &[String]) -> Option<&str> {
    finalizers
        .iter()
        .map(String::as_str)
        .find(|f| *f == ORPHAN_FINALIZER || *f == FOREGROUND_FINALIZER)
}

/// P3–P5: the finalizer list a DELETE leaves on the object, or None when it changes nothing
/// (same set as stored; the stored order is then kept).
pub fn gc_finalizers(
    stored: &[String],
    default: GcPolicy,
    options: &DeleteOptions,
) -> Option<Vec<String>> {
    if default == GcPolicy::Unsupported {
        return None;
    }
    let policy = options.propagation_policy.as_deref();
    let from_stored = first_gc_finalizer(stored);
    // P3
    let want_orphan = options
        .orphan_dependents
        .or(match policy {
            Some("Orphan") => Some(true),
            Some("Background") | Some("Foreground") => Some(false),
            _ => None,
        })
        .or(from_stored.map(|f| f == ORPHAN_FINALIZER))
        .unwrap_or(default == GcPolicy::OrphanDependents);
    // P4
    let want_foreground = if options.orphan_dependents.is_some() {
        false
    } else {
        match policy {
            Some("Foreground") => true,
            Some(_) => false,
            None => from_stored == Some(FOREGROUND_FINALIZER),
        }
    };
    // P5
    let mut next: Vec<String> = stored
        .iter()
        .filter(|f| *f != ORPHAN_FINALIZER && *f != FOREGROUND_FINALIZER)
        .cloned()
        .collect();
    if want_orphan {
        next.push(ORPHAN_FINALIZER.into());
    }
    if want_foreground {
        next.push(FOREGROUND_FINALIZER.into());
    }
    let mut stored_set: Vec<&String> = stored.iter().collect();
    let mut next_set: Vec<&String> = next.iter().collect();
    stored_set.sort();
    stored_set.dedup();
    next_set.sort();
    next_set.dedup();
    (stored_set != next_set).then_some(next)
}

/// N4.2: the garbage-collector finalizer the first DELETE of a namespace adds: only the
/// request's own policy counts (a namespace has no default that adds one).
pub fn namespace_gc_finalizer(options: &DeleteOptions) -> Option<&'static str> {
    match (
        options.orphan_dependents,
        options.propagation_policy.as_deref(),
    ) {
        (Some(true), _) | (None, Some("Orphan")) => Some(ORPHAN_FINALIZER),
        (Some(false), _) | (None, Some("Foreground")) => Some(FOREGROUND_FINALIZER),
        _ => None,
    }
}

/// What graceful deletion decides for one DELETE (D3.3–D3.6).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Graceful {
    /// Not a graceful kind, or a graceful object whose grace already ran out: the finalizer
    /// and immediate-delete rules decide.
    No,
    /// D4: a graceful deletion is already under way and this request does not shorten it.
    Pending,
    /// Set (or shorten to) this deletion timestamp and grace period.
    Set {
        deletion_timestamp: String,
        grace_seconds: i64,
    },
}

/// PG1: the grace period a pod gets: the request's, else its spec's, else 0; and 0 for a pod
/// that was never scheduled or has finished.
pub fn pod_grace_period(pod: &Value, requested: Option<i64>) -> i64 {
    let mut period = requested
        .or_else(|| {
            pod.pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
        })
        .unwrap_or(0);
    let node = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let phase = pod
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if node.is_empty() || phase == "Succeeded" || phase == "Failed" {
        period = 0;
    }
    period
}

/// D3.3–D3.6 for a graceful kind. `now` is injected for tests.
pub fn check_graceful(stored: &Value, options: &DeleteOptions, now: DateTime<Utc>) -> Graceful {
    // D3.3: negative grace periods count as 1.
    let requested = options
        .grace_period_seconds
        .map(|g| if g < 0 { 1 } else { g });
    if object::is_terminating(stored) {
        let stored_grace = object::metadata(stored)
            .and_then(|m| m.get("deletionGracePeriodSeconds"))
            .and_then(Value::as_i64)
            .map(|g| if g < 0 { 1 } else { g });
        let Some(current) = stored_grace.filter(|g| *g > 0) else {
            return Graceful::No;
        };
        return match requested {
            Some(g) if g < current => {
                let stamp = object::meta_str(stored, "deletionTimestamp")
                    .and_then(crate::object::parse_timestamp)
                    .unwrap_or(now);
                Graceful::Set {
                    deletion_timestamp: object::timestamp(
                        stamp - Duration::seconds(current) + Duration::seconds(g),
                    ),
                    grace_seconds: g,
                }
            }
            _ => Graceful::Pending,
        };
    }
    let grace = pod_grace_period(stored, requested);
    Graceful::Set {
        deletion_timestamp: object::timestamp(now + Duration::seconds(grace)),
        grace_seconds: grace,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn options(policy: Option<&str>, orphan: Option<bool>) -> DeleteOptions {
        DeleteOptions {
            propagation_policy: policy.map(str::to_string),
            orphan_dependents: orphan,
            ..DeleteOptions::default()
        }
    }

    fn list(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn p3_p5_background_default_adds_nothing() {
        assert_eq!(
            gc_finalizers(
                &list(&["a/b"]),
                GcPolicy::DeleteDependents,
                &options(None, None)
            ),
            None
        );
        assert_eq!(
            gc_finalizers(
                &[],
                GcPolicy::DeleteDependents,
                &options(Some("Background"), None)
            ),
            None
        );
    }

    #[test]
    fn p3_orphan_policy_appends_orphan_last() {
        assert_eq!(
            gc_finalizers(
                &list(&["a/b"]),
                GcPolicy::DeleteDependents,
                &options(Some("Orphan"), None)
            ),
            Some(list(&["a/b", "orphan"]))
        );
        assert_eq!(
            gc_finalizers(&[], GcPolicy::DeleteDependents, &options(None, Some(true))),
            Some(list(&["orphan"]))
        );
    }

    #[test]
    fn p4_foreground_policy_appends_foreground() {
        assert_eq!(
            gc_finalizers(
                &[],
                GcPolicy::DeleteDependents,
                &options(Some("Foreground"), None)
            ),
            Some(list(&["foregroundDeletion"]))
        );
    }

    #[test]
    fn p6_background_removes_existing_gc_finalizer() {
        assert_eq!(
            gc_finalizers(
                &list(&["orphan", "x/y"]),
                GcPolicy::DeleteDependents,
                &options(Some("Background"), None)
            ),
            Some(list(&["x/y"]))
        );
        // orphanDependents=false behaves like Background.
        assert_eq!(
            gc_finalizers(
                &list(&["orphan"]),
                GcPolicy::DeleteDependents,
                &options(None, Some(false))
            ),
            Some(vec![])
        );
    }

    #[test]
    fn p3_p4_existing_finalizer_picks_policy_when_none_given() {
        assert_eq!(
            gc_finalizers(
                &list(&["foregroundDeletion"]),
                GcPolicy::DeleteDependents,
                &options(None, None)
            ),
            None
        );
        assert_eq!(
            gc_finalizers(
                &list(&["orphan"]),
                GcPolicy::OrphanDependents,
                &options(None, None)
            ),
            None
        );
    }

    #[test]
    fn p7_job_default_orphans_and_events_are_unsupported() {
        assert_eq!(
            gc_finalizers(&[], GcPolicy::OrphanDependents, &options(None, None)),
            Some(list(&["orphan"]))
        );
        assert_eq!(
            gc_finalizers(&[], GcPolicy::Unsupported, &options(Some("Orphan"), None)),
            None
        );
    }

    fn pod(node: &str, phase: &str) -> Value {
        json!({"metadata": {"name": "p"}, "spec": {"nodeName": node, "terminationGracePeriodSeconds": 30}, "status": {"phase": phase}})
    }

    #[test]
    fn pg1_grace_comes_from_request_then_spec_and_is_zero_when_unscheduled_or_finished() {
        assert_eq!(pod_grace_period(&pod("n1", "Running"), None), 30);
        assert_eq!(pod_grace_period(&pod("n1", "Running"), Some(5)), 5);
        assert_eq!(pod_grace_period(&pod("", "Pending"), None), 0);
        assert_eq!(pod_grace_period(&pod("n1", "Succeeded"), None), 0);
        assert_eq!(pod_grace_period(&pod("n1", "Failed"), Some(10)), 0);
    }

    #[test]
    fn pg2_pg3_grace_only_shrinks() {
        let now = Utc::now();
        let first = check_graceful(&pod("n1", "Running"), &DeleteOptions::default(), now);
        let Graceful::Set {
            deletion_timestamp,
            grace_seconds: 30,
        } = first
        else {
            panic!("unexpected {first:?}")
        };
        let mut terminating = pod("n1", "Running");
        terminating["metadata"]["deletionTimestamp"] = json!(deletion_timestamp);
        terminating["metadata"]["deletionGracePeriodSeconds"] = json!(30);
        let longer = DeleteOptions {
            grace_period_seconds: Some(60),
            ..DeleteOptions::default()
        };
        assert_eq!(
            check_graceful(&terminating, &longer, now),
            Graceful::Pending
        );
        assert_eq!(
            check_graceful(&terminating, &DeleteOptions::default(), now),
            Graceful::Pending
        );
        let shorter = DeleteOptions {
            grace_period_seconds: Some(10),
            ..DeleteOptions::default()
        };
        match check_graceful(&terminating, &shorter, now) {
            Graceful::Set {
                deletion_timestamp: moved,
                grace_seconds: 10,
            } => {
                let before = crate::object::parse_timestamp(&deletion_timestamp).unwrap();
                assert_eq!(
                    before - crate::object::parse_timestamp(&moved).unwrap(),
                    Duration::seconds(20)
                );
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn d3_5_grace_already_zero_falls_through() {
        let mut terminating = pod("n1", "Running");
        terminating["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        terminating["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        assert_eq!(
            check_graceful(&terminating, &DeleteOptions::default(), Utc::now()),
            Graceful::No
        );
    }
}
