//! Fencing: writes that commit only while this replica holds a Lease.
//!
//! The in-process controllers run under the Lease `kube-system/finale-controllers`. Leader
//! election alone (client-go's algorithm) stops a deposed leader's controllers in time only
//! if its process keeps running: one paused for longer than `lease duration - renew deadline`
//! (a stopped VM, a long GC pause, `SIGSTOP`) resumes with writes in flight after a successor
//! has started. Kubernetes accepts that; Finale refuses those writes. A registry made with
//! [`Registry::fenced`](super::Registry::fenced) adds to every write a store [`Guard`] on the
//! Lease's key at the revision of this replica's last write of it: once anyone else has
//! written the Lease, the write fails atomically, in the same store transaction as the
//! object's own precondition, on both backends.
//!
//! # Guarantees
//! - A fenced write commits only if, at its commit, the Lease is exactly as this replica last
//!   wrote it, or as this replica wrote it later still (a renewal that raced the write, seen in
//!   the failed guard's answer as a Lease that names this replica; the write is then retried
//!   at that revision, at most [`FENCE_RETRIES`] times).
//! - While this replica does not lead (before its first term, between terms, after its term
//!   ended) every fenced write is refused without touching the store, even if a renewal sent
//!   during the term is acknowledged after it.
//!
//! # Assumptions
//! - Only the elector writes the Lease as this replica's holder identity, and it records each
//!   such write with [`LeaseFence::hold`]; a term opens the fence ([`LeaseFence::open`])
//!   after the acquisition was recorded and before its controllers start, and closes it
//!   ([`LeaseFence::release`]) when it ends.
//!
//! # Caveats
//! - A renewal bumps the Lease's revision every retry period, so a write that races one costs
//!   a second store round trip; writes never fail for it.

use std::sync::Mutex;

use finale_store::{Guard, KeyValue, Revision};
use prometheus_client::metrics::counter::Counter;
use serde_json::Value;

/// How many times a fenced write is retried at a newer revision of the Lease that still
/// names this replica (each renewal can cost one).
pub const FENCE_RETRIES: usize = 3;

/// The Lease a fenced registry's writes depend on, and the revision at which this replica
/// last wrote it as the holder.
#[derive(Debug)]
pub struct LeaseFence {
    /// The Lease's store key.
    key: String,
    /// `namespace/name`, for messages.
    lease: String,
    /// This replica's holder identity.
    identity: String,
    held: Mutex<Held>,
    /// Writes refused, for `/metrics`.
    refused: Counter,
}

#[derive(Debug, Default)]
struct Held {
    /// The revision of this replica's last write of the Lease that named it.
    revision: Option<Revision>,
    /// A term runs: fenced writes may be made.
    open: bool,
}

/// Why a fenced write was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fenced {
    /// This replica does not lead now.
    NotLeading,
    /// Another replica (or nobody) holds the Lease now.
    TakenBy(String),
}

impl LeaseFence {
    pub fn new(key: String, lease: String, identity: String) -> LeaseFence {
        LeaseFence {
            key,
            lease,
            identity,
            held: Mutex::new(Held::default()),
            refused: Counter::default(),
        }
    }

    /// How many writes this fence refused.
    pub fn refused(&self) -> &Counter {
        &self.refused
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The holder identity this fence stands for.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Records a write of the Lease at `revision` that names this replica as the holder
    /// (its acquisition or a renewal). Revisions only move forward.
    pub fn hold(&self, revision: Revision) {
        let mut held = self.held();
        held.revision = Some(held.revision.map_or(revision, |r| r.max(revision)));
    }

    /// A term begins: fenced writes may be made, at the revision last held.
    pub fn open(&self) {
        self.held().open = true;
    }

    /// The term is over: refuse every fenced write until the next term opens the fence.
    pub fn release(&self) {
        self.held().open = false;
    }

    /// The guard a write must carry now, or why it may not be made.
    pub(super) fn guard(&self) -> Result<Guard, Fenced> {
        let held = self.held();
        match (held.open, held.revision) {
            (true, Some(revision)) => Ok(Guard {
                key: self.key.as_bytes().to_vec(),
                mod_revision: revision,
            }),
            _ => Err(Fenced::NotLeading),
        }
    }

    /// After a failed guard: `current` is the Lease as the store had it. If it still names
    /// this replica, this replica wrote it (a renewal racing the write) and the write may be
    /// retried at its revision; otherwise the write is refused.
    pub(super) fn recheck(&self, current: Option<&KeyValue>) -> Result<(), Fenced> {
        let holder = current
            .and_then(|kv| serde_json::from_slice::<Value>(&kv.value).ok())
            .and_then(|lease| {
                lease
                    .pointer("/spec/holderIdentity")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .unwrap_or_default();
        match current {
            Some(kv) if holder == self.identity => {
                let mut held = self.held();
                // Not leading any more (the term ended meanwhile): stay refused.
                if !held.open {
                    return Err(Fenced::NotLeading);
                }
                held.revision = Some(
                    held.revision
                        .map_or(kv.mod_revision, |r| r.max(kv.mod_revision)),
                );
                Ok(())
            }
            _ => Err(Fenced::TakenBy(holder)),
        }
    }

    /// The message of a refused write, which is counted.
    pub(super) fn refuse(&self, why: &Fenced) -> String {
        self.refused.inc();
        self.message(why)
    }

    /// The message of a refused write.
    pub(super) fn message(&self, why: &Fenced) -> String {
        match why {
            Fenced::NotLeading => format!(
                "this API server does not hold the controllers' Lease {} now, so its controllers may not write (fenced); the holder's controllers do the work",
                self.lease
            ),
            Fenced::TakenBy(holder) if holder.is_empty() => format!(
                "this API server lost the controllers' Lease {} (nobody holds it now), so its controllers may not write (fenced)",
                self.lease
            ),
            Fenced::TakenBy(holder) => format!(
                "this API server lost the controllers' Lease {} to {holder}, so its controllers may not write (fenced); {holder}'s controllers do the work now",
                self.lease
            ),
        }
    }

    /// Whether `guard`'s key and revision still match what `current` (the guarded key's
    /// state in a failed transaction) shows, i.e. the guard did not cause the failure.
    pub(super) fn guard_held(guard: &Guard, current: Option<&KeyValue>) -> bool {
        current.map_or(0, |kv| kv.mod_revision) == guard.mod_revision
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: &str, revision: Revision) -> KeyValue {
        KeyValue {
            key: b"/registry/coordination.k8s.io/leases/kube-system/l".to_vec(),
            value: serde_json::to_vec(&serde_json::json!({"spec": {"holderIdentity": holder}}))
                .expect("JSON"),
            create_revision: 1,
            mod_revision: revision,
            version: 1,
        }
    }

    #[test]
    fn refuses_until_held_follows_own_renewals_and_refuses_a_successor() {
        let fence = LeaseFence::new("k".into(), "kube-system/l".into(), "me".into());
        assert_eq!(fence.guard(), Err(Fenced::NotLeading));
        fence.hold(5);
        assert_eq!(
            fence.guard(),
            Err(Fenced::NotLeading),
            "held, but no term runs"
        );
        fence.open();
        assert_eq!(fence.guard().map(|g| g.mod_revision), Ok(5));
        // Our own renewal raced a write: retried at its revision.
        assert_eq!(fence.recheck(Some(&lease("me", 9))), Ok(()));
        assert_eq!(fence.guard().map(|g| g.mod_revision), Ok(9));
        // An older acknowledgement never moves the fence back.
        fence.hold(7);
        assert_eq!(fence.guard().map(|g| g.mod_revision), Ok(9));
        // A successor's write of the Lease refuses the write.
        let taken = fence.recheck(Some(&lease("other", 12)));
        assert_eq!(taken, Err(Fenced::TakenBy("other".into())));
        assert!(
            fence
                .message(&Fenced::TakenBy("other".into()))
                .contains("lost the controllers' Lease kube-system/l to other")
        );
        assert_eq!(fence.recheck(None), Err(Fenced::TakenBy(String::new())));
        fence.release();
        assert_eq!(fence.guard(), Err(Fenced::NotLeading));
        assert_eq!(
            fence.recheck(Some(&lease("me", 13))),
            Err(Fenced::NotLeading)
        );
        // A renewal acknowledged after the term ended does not reopen it.
        fence.hold(14);
        assert_eq!(fence.guard(), Err(Fenced::NotLeading));
    }
}
