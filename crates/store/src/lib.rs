//! Revisioned key-value storage with etcd's data model.
//!
//! Everything Finale persists goes through the [`Store`] trait. The model is etcd's, so that an
//! etcd backend can be a thin adapter rather than a second implementation:
//!
//! - one global, monotonically increasing [`Revision`]; every successful write gets its own;
//! - per key: `create_revision`, `mod_revision` and `version` ([`KeyValue`]);
//! - single-key writes guarded by a [`Precondition`] on `mod_revision` (an etcd `Txn` compare),
//!   and [`Store::write_all`]: several such writes committed all or none (an etcd `Txn` with
//!   several compares and operations), optionally fenced by [`Guard`]s on other keys
//!   ([`Store::write_all_guarded`]: compares without writes);
//! - ordered range reads with a limit, at the latest or an older revision;
//! - watches from a revision, carrying the previous value of each key;
//! - compaction: history below the compacted revision is gone, and reading or watching there
//!   fails with [`StoreError::Compacted`].
//!
//! The crate knows nothing about Kubernetes: keys and values are bytes.
//!
//! # Guarantees
//! - A write is acknowledged (its future resolves `Ok`) only after it is durable on disk.
//! - Every acknowledged write appears exactly once in every watch that covers its key and
//!   revision, in revision order.
//! - A range read sees one consistent snapshot at the revision it reports.

use std::ops::Range;

use async_trait::async_trait;
use futures::stream::BoxStream;

pub mod durable_fs;
pub mod redb_engine;

pub use redb_engine::{RedbStore, RedbStoreOptions};

/// A store revision. Revision 0 means "no revision": nothing has been written yet, or (in a
/// precondition) "the key must not exist".
pub type Revision = i64;

/// One key at one revision, as etcd's `mvccpb.KeyValue`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyValue {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    /// Revision of the write that created this incarnation of the key.
    pub create_revision: Revision,
    /// Revision of the last write to the key.
    pub mod_revision: Revision,
    /// Number of writes since the key was (re)created; 1 after creation.
    pub version: i64,
}

/// What a single-key write requires of the key's current state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precondition {
    /// Write whatever the current state.
    None,
    /// The key must not exist (etcd: `mod_revision == 0`).
    MustNotExist,
    /// The key must exist with exactly this `mod_revision`. As in etcd, `ModRevision(0)` is the
    /// same as [`Precondition::MustNotExist`] (a missing key's `mod_revision` is 0).
    ModRevision(Revision),
    /// The key must exist, at any revision.
    MustExist,
}

/// A single-key write.
///
/// A put always gets a new revision, even if the value is unchanged (as in etcd). Deleting a key
/// that does not exist writes nothing and consumes no revision (as in etcd); it is reported as
/// [`WriteOutcome::PreconditionFailed`] with `current: None`, whatever the precondition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteOp {
    Put { key: Vec<u8>, value: Vec<u8> },
    Delete { key: Vec<u8> },
}

impl WriteOp {
    pub fn key(&self) -> &[u8] {
        match self {
            WriteOp::Put { key, .. } | WriteOp::Delete { key } => key,
        }
    }
}

/// A compare without a write: the transaction commits only if `key`'s `mod_revision` is
/// exactly `mod_revision` (0: the key is absent), as an etcd `Txn` compare on a key it does
/// not write. Used to fence writes on another key's state (a leader's Lease).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Guard {
    pub key: Vec<u8>,
    pub mod_revision: Revision,
}

/// The result of a write whose precondition held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteResult {
    /// The revision the write was committed at.
    pub revision: Revision,
    /// The key's state after a put. `None` after a delete.
    pub current: Option<KeyValue>,
    /// The key's state before the write, if it existed.
    pub previous: Option<KeyValue>,
}

/// The result of a write: either committed, or refused because the precondition failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    Committed(WriteResult),
    /// Nothing was written. `current` is the key's state when the precondition was checked,
    /// so the caller can tell "not found" from "conflict" without another read.
    PreconditionFailed {
        current: Option<KeyValue>,
    },
}

/// The result of [`Store::write_all`]: every write committed, or none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnOutcome {
    /// Every write was committed, in order; one result per write.
    Committed(Vec<WriteResult>),
    /// Nothing was written because at least one precondition or guard failed (a delete of a
    /// missing key counts as failed, as in [`Store::write`]). `current` holds every key's
    /// state when the preconditions were checked: the writes' keys in order, then the guards'
    /// keys in order.
    PreconditionFailed { current: Vec<Option<KeyValue>> },
}

/// An ordered range read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeRequest {
    /// Keys in `[start, end)`; see [`prefix_range`].
    pub range: Range<Vec<u8>>,
    /// At most this many keys; 0 means no limit.
    pub limit: usize,
    /// Read at this revision; 0 means the latest.
    pub revision: Revision,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeResponse {
    pub kvs: Vec<KeyValue>,
    /// True when the limit cut the result short.
    pub more: bool,
    /// The revision the read was served at (the store's current revision for latest reads).
    pub revision: Revision,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Put,
    Delete,
}

/// One change, as delivered by [`Store::watch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchEvent {
    pub kind: EventKind,
    /// After a put: the new state. After a delete: the key, an empty value, and
    /// `mod_revision` set to the deletion's revision (as etcd reports it).
    pub kv: KeyValue,
    /// The state before the change, if the key existed.
    pub prev_kv: Option<KeyValue>,
}

impl WatchEvent {
    pub fn revision(&self) -> Revision {
        self.kv.mod_revision
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("required revision {requested} has been compacted (oldest available is {compacted})")]
    Compacted {
        requested: Revision,
        compacted: Revision,
    },
    #[error("revision {requested} is in the future (current revision is {current})")]
    FutureRevision {
        requested: Revision,
        current: Revision,
    },
    #[error("the store is shutting down")]
    Closed,
    #[error("a watch fell too far behind the store and was dropped at revision {revision}")]
    WatchLagged { revision: Revision },
    /// The backend cannot be reached (a remote store such as etcd is down or has no
    /// quorum) and retrying within the call's deadline did not help. Nothing was written,
    /// or a write's outcome could not be established (see the backend's docs).
    #[error("the storage backend is unavailable: {reason}")]
    Unavailable { reason: String },
    /// The backend did not answer within the call's deadline.
    #[error("the storage backend did not answer in time: {reason}")]
    Timeout { reason: String },
    #[error("storage backend error: {0}")]
    Backend(String),
}

pub type StoreResult<T> = Result<T, StoreError>;

/// Whether a store can serve, as health checks and metrics report it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreHealth {
    /// Reads and writes are served.
    Serving,
    /// Reads are served but writes fail, for `reason`: the last write batch failed and the
    /// engine refuses writes until it has recovered (the embedded engine retries by itself
    /// with backoff; `reason` names the cause, e.g. a full disk, and what to do).
    RefusingWrites { reason: String },
    /// Closed (the server is shutting down): nothing is served.
    Closed,
}

impl StoreHealth {
    /// A short, stable name for metrics: `serving`, `refusing-writes` or `closed`.
    pub fn name(&self) -> &'static str {
        match self {
            StoreHealth::Serving => "serving",
            StoreHealth::RefusingWrites { .. } => "refusing-writes",
            StoreHealth::Closed => "closed",
        }
    }
}

/// A stream of watch events in revision order. It ends with `Err` if the store closes or the
/// watcher cannot keep up; the caller re-watches from the last revision it saw.
pub type WatchStream = BoxStream<'static, StoreResult<WatchEvent>>;

/// How many revisions [`Store::last_change_in`] looks back at most: a range that has not
/// changed for longer is answered "cannot tell" rather than by an unbounded scan.
pub const LAST_CHANGE_SCAN_LIMIT: usize = 10_000;

/// A revisioned key-value store. See the crate docs for the model and guarantees.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Reads one key at the latest revision, with the store's current revision.
    async fn get(&self, key: &[u8]) -> StoreResult<(Option<KeyValue>, Revision)>;

    /// Reads an ordered range of keys at one revision.
    async fn range(&self, request: RangeRequest) -> StoreResult<RangeResponse>;

    /// Applies one write if its precondition holds. Resolves only once the write is durable.
    async fn write(&self, op: WriteOp, precondition: Precondition) -> StoreResult<WriteOutcome>;

    /// Applies several writes to distinct keys atomically, as one etcd `Txn` with a compare
    /// per key: if every precondition holds, all are committed in one durable commit and
    /// appear in watches in the order given; otherwise nothing is written. The embedded engine
    /// gives each write its own consecutive revision, so the last write's revision is the
    /// store's revision afterwards; an etcd backend would give them one shared revision.
    /// Callers must only rely on "each write's revision is at least the first one's, and the
    /// last one's is the highest". Writing one key twice is refused with
    /// [`StoreError::Backend`] and writes nothing.
    async fn write_all(&self, writes: Vec<(WriteOp, Precondition)>) -> StoreResult<TxnOutcome> {
        self.write_all_guarded(writes, Vec::new()).await
    }

    /// [`Store::write_all`], committed only if every guard holds as well, in the same atomic
    /// check. A guard on a key the transaction writes is refused with [`StoreError::Backend`]
    /// (use that write's precondition instead).
    async fn write_all_guarded(
        &self,
        writes: Vec<(WriteOp, Precondition)>,
        guards: Vec<Guard>,
    ) -> StoreResult<TxnOutcome>;

    /// Streams every change to keys in `range` with revision strictly greater than
    /// `after_revision`, first from history, then live. Fails with
    /// [`StoreError::Compacted`] if `after_revision` is below the compacted revision: as in
    /// etcd, compacting at `C` may drop the event of revision `C` itself (a deletion's
    /// tombstone), so history is complete only for watches from `C` on.
    async fn watch(
        &self,
        range: Range<Vec<u8>>,
        after_revision: Revision,
    ) -> StoreResult<WatchStream>;

    /// The latest committed revision.
    async fn current_revision(&self) -> StoreResult<Revision>;

    /// The revision of the newest change to a key in `range` at or below `revision`, when
    /// the backend can tell without reading values; `Ok(None)` when it cannot (the default:
    /// etcd could answer only by reading every key in the range), when the answer lies
    /// below the compacted revision, or when `range` has not changed within the last
    /// [`LAST_CHANGE_SCAN_LIMIT`] revisions.
    ///
    /// A reader that keeps a copy of `range` current from a watch uses it to tell whether
    /// its copy is the store's state at `revision`: it is when the copy has applied exactly
    /// the changes up to this one.
    async fn last_change_in(
        &self,
        range: Range<Vec<u8>>,
        revision: Revision,
    ) -> StoreResult<Option<Revision>> {
        let _ = (range, revision);
        Ok(None)
    }

    /// The oldest revision that can still be read or watched from (everything below it is
    /// compacted away).
    async fn compacted_revision(&self) -> StoreResult<Revision>;

    /// Discards history below `revision`. Latest values are never discarded.
    async fn compact(&self, revision: Revision) -> StoreResult<()>;

    /// What the store knows about its own ability to serve, without doing any I/O. A
    /// backend without such state answers [`StoreHealth::Serving`] and reports failures as
    /// errors of the calls that hit them; callers probe reads themselves.
    fn health(&self) -> StoreHealth {
        StoreHealth::Serving
    }
}

/// The `[start, end)` range that holds every key beginning with `prefix`.
pub fn prefix_range(prefix: &[u8]) -> Range<Vec<u8>> {
    let start = prefix.to_vec();
    let mut end = prefix.to_vec();
    while let Some(last) = end.last_mut() {
        if *last < 0xff {
            *last += 1;
            return start..end;
        }
        end.pop();
    }
    // An all-0xff (or empty) prefix: everything from `start` on. etcd spells this "\0".
    start..Vec::new()
}

/// True if `key` lies in `range`, where an empty `end` means "no upper bound".
pub fn range_contains(range: &Range<Vec<u8>>, key: &[u8]) -> bool {
    key >= range.start.as_slice() && (range.end.is_empty() || key < range.end.as_slice())
}
