//! kube-apiserver 1.33's audit log, for Finale's API server: which requests to record and how
//! much of them ([`policy`]), the `audit.k8s.io/v1` `Event` each stage of a request writes
//! ([`event`]), and the log file it is written to, rotated as kube-apiserver rotates it
//! ([`sink`]). The crate knows nothing of HTTP or of the rest of the workspace: the server
//! hands it plain attributes and JSON bodies.
//!
//! Per request, the server:
//! 1. evaluates the policy: [`Policy::evaluate`] with the authorizer's [`RequestAttributes`];
//! 2. starts the event: [`RequestAudit::new`] (`None`: level `None`, nothing to record), and
//!    logs [`RequestAudit::stage`]`(RequestReceived)`;
//! 3. adds what the handler learns: [`RequestAudit::request_object`],
//!    [`RequestAudit::response_object`], [`RequestAudit::annotate`] (the authorizer's
//!    `authorization.k8s.io/decision` and `…/reason`);
//! 4. logs [`RequestAudit::stage`]`(ResponseComplete, status)` (and `ResponseStarted` for
//!    watches, `Panic` if the handler panicked) with [`AuditLog::log`].
//!
//! [`AuditLogOptions`] carries the `--audit-log-*` and `--audit-policy-file` flags and opens
//! both.
//!
//! # Guarantees
//! - Policy matching is upstream's `checker.go`, rule for rule: the first matching rule wins,
//!   `resources`/`namespaces` match only resource requests and `nonResourceURLs` only the
//!   others, `pods/*`, `*/scale` and `*` as upstream; no match is level `None`. A rule's
//!   `omitStages` add to the policy's; its `omitManagedFields` overrides the policy's.
//! - A policy loads only if upstream 1.33 would load it, bar the caveats below: apiVersion
//!   `audit.k8s.io/v1`, kind `Policy`, at least one rule, known levels and stages, and
//!   upstream's validation. A refusal names the file and, for syntax or type errors, the line
//!   and column.
//! - Events serialize as upstream's: the same field names, order and omissions, timestamps
//!   in UTC with microseconds. `Metadata` events carry no body, `Request` the request body,
//!   `RequestResponse` both; omitted stages are not written.
//! - The log file is created 0600 (directories 0700) when the log is opened, and rotated as
//!   lumberjack rotates kube-apiserver's: `NAME-2006-01-02T15-04-05.000.EXT` in UTC, then
//!   `--audit-log-maxbackup` / `--audit-log-maxage` pruning.
//! - Logging never fails a request and never panics; failures are counted
//!   ([`AuditLog::errors_total`]) and logged with `tracing`.
//!
//! # Assumptions
//! - The caller supplies upstream's attributes: the authorizer's verb (`list` vs `get`,
//!   `watch`), the resource and subresource split, the namespace (`""` when cluster-scoped),
//!   the source IPs in `utilnet.SourceIPs` order, the request's `Audit-ID` header.
//! - Request and response bodies are handed over as JSON values; a YAML apply patch is
//!   converted first.
//! - One [`AuditLog`] per file: two logs (or processes) rotating one file would race, as two
//!   lumberjack loggers would.
//!
//! # Caveats
//! - Upstream decodes a policy strictly and, on unknown or repeated keys, warns and decodes
//!   leniently. So does this crate: unknown keys are logged and listed by
//!   [`Policy::unknown_fields`] (a caller wanting strictness refuses a policy with any), and
//!   a repeated key keeps its last value, without a warning.
//! - `--audit-log-maxsize 0` is lumberjack's 100 MB, not "never rotate", as upstream.
//! - [`AuditLog::log`] returns once the event is queued, not written (upstream's blocking
//!   mode writes before it returns); when the queue is full it blocks, as blocking mode does.
//!   A crash loses what is queued. See [`AuditLog`].
//! - Not implemented: `--audit-log-compress`, `--audit-log-format=legacy`, the webhook
//!   backend, batch and blocking-strict modes, event truncation, and the
//!   `apiserver.latency.k8s.io/*` annotations of slow requests.

pub mod event;
pub mod policy;
pub mod sink;

pub use event::{Event, ObjectReference, RequestAudit, RequestMetadata, ResponseStatus, UserInfo};
pub use policy::{
    GroupResources, Level, Policy, PolicyError, PolicyRule, RequestAttributes, RequestAuditConfig,
    Stage, StageSet,
};
pub use sink::{Audit, AuditLog, AuditLogError, AuditLogOptions};
