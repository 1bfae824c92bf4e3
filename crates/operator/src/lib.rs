//! The Finale operator toolkit: what an operator on kube-rs needs so that external resources
//! are cleaned up before their Kubernetes object goes, and so that a person can see why an
//! object is still there.
//!
//! An operator implements [`runtime::Reconciler`]: an *apply* callback for live objects and a
//! *cleanup* callback per finalizer. [`runtime::run`] does the rest:
//!
//! - adds every finalizer of the operator to each live object, before *apply* runs (an
//!   operator may opt a live object out of one: [`runtime::Reconciler::wants_finalizer`]);
//! - on deletion, runs the cleanup steps in their declared order, one finalizer at a time,
//!   and removes a finalizer only after its step reports [`runtime::Cleanup::Done`]; a step can
//!   report [`runtime::Cleanup::InProgress`] to be checked again later;
//! - honours the per-object deletion policy ([`policy`]): `Orphan` removes the finalizers
//!   without cleaning up;
//! - keeps a `Deleting` condition and `status.deletion` up to date with the waiting step, the
//!   last error, the attempt count and the next retry ([`condition`]);
//! - publishes Events on failures and on completion ([`events`]);
//! - retries failures with per-object exponential backoff and full jitter, and offers a rate
//!   limit per external system ([`backoff`]); errors a callback marks permanent ([`error`]) are
//!   reported as such (reason `PermanentError`) and retried at about the maximum backoff;
//! - exports Prometheus metrics ([`metrics`]);
//! - runs only while it holds a Lease ([`leader`]), and shuts down gracefully;
//! - declares who removes its finalizers: one `FinalizerClaim` per finalizer, tied to its
//!   leader Lease, so `finale explain` can name the controller and tell whether it is alive
//!   ([`claims`]);
//! - states the least privilege it runs with: the rules of its ClusterRole, the Role for its
//!   Lease, and the ServiceAccount they bind to ([`rbac`]).
//!
//! # Guarantees
//! - A finalizer is removed only after its cleanup step returned `Done` in this process, and
//!   the removal is a JSON Patch that `test`s the finalizer at its index: no concurrent edit is
//!   lost, and a stale view never removes the wrong entry.
//! - Steps run strictly in the declared order: step *n + 1* starts only after step *n*'s
//!   finalizer is gone from the stored object.
//! - Every object whose deletion was requested while the operator was down is cleaned up
//!   when it returns: the state lives in the object (its finalizers), not in the process.
//! - With leader election on, at most one replica reconciles at a time, provided clocks advance
//!   at similar rates (see Caveats). Precisely: a leader's term ends at most `renew_deadline`
//!   after the start of its last successful Lease renewal, even while its API calls hang
//!   ([`leader`]); at that moment every reconciliation in flight is cancelled (its future
//!   dropped, not awaited) and no new one starts ([`runtime`]). A standby cannot take the Lease
//!   until `lease_duration` after it saw that renewal, so the old leader has stopped at least
//!   `lease_duration - renew_deadline` (5 s with client-go's 15 s / 10 s) before a successor
//!   begins.
//! - Every call to the API server is bounded in time ([`client`]); shutdown is bounded by
//!   [`runtime::Settings::graceful_shutdown_timeout`] for in-flight work plus
//!   [`leader::RELEASE_TIMEOUT`] to release the Lease.
//! - A failing backend sees at most the configured rate of operations from this process, and
//!   retries of many objects are spread over the whole backoff window.
//!
//! # Assumptions
//! - Cleanup callbacks are idempotent and treat "already gone" as success; they may run again
//!   after a crash between the external deletion and the finalizer removal.
//! - Cleanup can run without *apply* ever having run (an object deleted right after creation).
//! - External resources are identified by something stored with them (a tag, a comment with
//!   the object's uid), so a step can tell its own resources from others'.
//! - The object's kind has a status subresource, for the `Deleting` condition.
//!
//! # Caveats
//! - Removing a finalizer by hand (`kubectl patch … finalizers: null`) skips its cleanup: the
//!   external resource is orphaned. Use the `Orphan` policy instead, which says so in an Event.
//! - Leader election relies on time: a leader that is paused longer than
//!   `lease_duration - renew_deadline` (a stopped VM) may act once more after a successor took
//!   over. Steps must therefore stay safe to run twice, which idempotency already demands.
//! - Cancelling a reconciliation stops what it would do next, not what it has already sent: a
//!   request or SQL statement on the wire when leadership ends still completes on its server.
//!   External calls need their own server-side bounds (PostgreSQL's `statement_timeout`).
//! - An object whose cleanup can never succeed stays Terminating; the `Deleting` condition,
//!   the `finalizer_execution_failures_total` metric and Warning Events say why.
//! - Backoff state lives in memory: a restarted operator retries every object at once, still
//!   bounded by the rate limit.
//! - Whether an error is permanent is the callback's judgement ([`error::permanent`]); an error
//!   not marked is treated as transient. A permanent error is still retried, slowly, since
//!   what a person fixes outside Kubernetes raises no event.

pub mod backoff;
pub mod claims;
pub mod client;
pub mod condition;
pub mod error;
pub mod events;
pub mod finalizers;
pub mod install;
pub mod leader;
pub mod metrics;
pub mod policy;
pub mod rbac;
pub mod runtime;
