//! The embedded storage engine: etcd's revisioned key-value model on one [redb] file, with
//! group commit and a write-ahead log.
//!
//! # Files
//!
//! `DIR/store.redb`, the database, and `DIR/store.redb.wal`, its write-ahead log (see
//! [`RedbStore::open`] for how the path is chosen).
//!
//! # Layout
//!
//! Four redb tables. Every record value starts with a format byte (`RECORD_V1`) so the
//! encoding can evolve; the `meta` table also carries a whole-file format version.
//!
//! | table  | key                       | value                                                     |
//! |--------|---------------------------|-----------------------------------------------------------|
//! | `kv`   | key                       | `create_rev, mod_rev, version, value`: the latest state   |
//! | `hist` | `(key, rev)`              | `put(create_rev, version, value)` or `tombstone`          |
//! | `log`  | `rev`                     | `kind, prev_mod_rev, key`: one entry per revision         |
//! | `meta` | name                      | `format`, `revision` (current), `compacted`               |
//!
//! `kv` serves latest reads. `hist` holds every version of every key that history still needs,
//! including the latest, so a read at revision `R` is "the last `hist` entry `<= R`" per key.
//! `log` is the change feed watches replay from; it stores no values, because the new and the
//! previous value of each change are both in `hist` (`(key, rev)` and `(key, prev_mod_rev)`).
//!
//! # Writes: group commit
//!
//! A single writer thread owns every write transaction. It takes all queued requests (up to
//! [`RedbStoreOptions::max_batch`]), applies them in order in one redb transaction (each
//! successful write gets the next revision; a failed precondition consumes none and sees the
//! earlier writes of the same batch), makes the batch durable, commits it, and only then
//! publishes the batch's events to watchers and answers the callers. While one batch is being
//! synced the next one queues up, so throughput grows with concurrency while a lone writer
//! pays one sync per write. It is a plain thread because syncing blocks.
//!
//! # Durability: write-ahead log and checkpoints
//!
//! A durable redb commit rewrites and fsyncs a dozen or more scattered pages even for one
//! small write, and more for every distinct leaf a batch touches; measured on the development
//! machine that made single-writer throughput a quarter of etcd's. So a batch is made durable
//! by appending its effects (the writes that passed their preconditions, with their revisions,
//! and any new compacted revision) to the write-ahead log and syncing that (one sequential
//! `fdatasync`), and then committed to redb with `Durability::None`, which makes it visible
//! to readers without I/O. Nothing is visible before it is durable. Every
//! [`checkpoint_interval`](RedbStoreOptions::checkpoint_interval) (or
//! [`wal_limit`](RedbStoreOptions::wal_limit) bytes of log), one batch is instead committed
//! with `Durability::Immediate`, which makes everything before it durable in the database, and
//! the log starts over.
//!
//! On open, redb recovers to its last durable commit and the engine redoes the log's batches
//! that follow it (batches are redone by revision, so redoing is idempotent), then checkpoints.
//! So after a crash, `kill -9` included, the store reopens at the revision of the last
//! acknowledged write or later (a batch whose sync finished but whose callers had not been
//! answered yet is also there).
//!
//! # Failed writes and recovery
//!
//! A failed append, sync or commit leaves the log and the database possibly disagreeing, and
//! after an I/O error redb refuses everything by itself ("Previous I/O error") until it is
//! reopened. So after any failed batch the writer refuses every write, with a message naming
//! the cause (a full disk is called that, with what to do), and recovers in the same process
//! ([`Writer::recover`]): on the next write, and on a timer with backoff from 50 ms to 2 s
//! while idle, it probes the disk with a scratch write, discards the log from the failed
//! batch's frame on, reopens redb and redoes the log exactly as an open does, and only then
//! accepts writes. [`Store::health`] reports the refusal meanwhile.
//!
//! Guarantees: a refused write is never acknowledged and, if it never reached the log, never
//! appears; nothing acknowledged is lost; a batch whose commit reported failure but reached
//! the disk (a checkpoint whose header was written) is kept whole, published to watchers
//! once, at its own revision, as after a crash. Reads keep working while the disk is full:
//! the open database is given up only after the probe has succeeded.
//! Caveat: if the reopen itself then fails (the disk fails again in between), reads fail
//! with a message saying so until a later attempt reopens the file.
//!
//! # Reads
//!
//! `get` and `range` each run in one redb read transaction: an MVCC snapshot, so a range is
//! consistent at the revision it reports and never waits for writers. A `get` (one lookup,
//! nearly always in redb's page cache) runs on the caller's thread; a `range`, which may read
//! many pages, on tokio's blocking pool.
//!
//! # Watches
//!
//! A watch subscribes to the live event broadcast first, then replays `log` (in chunks, each its
//! own snapshot) until it has caught up with the snapshot's revision, then streams live events,
//! skipping those at or below the last revision it replayed: no gap, no duplicate. A watcher
//! that falls more than [`RedbStoreOptions::watch_buffer`] batches behind ends with
//! [`StoreError::WatchLagged`] carrying the revision it is complete through.
//!
//! # Compaction
//!
//! `compact(C)` records `compacted = C` with the next write batch (durably, and atomically
//! with the snapshots readers see), then the writer thread deletes, in small transactions
//! between write batches, every `log` entry below `C` and the `hist` entries those entries
//! make obsolete: a version superseded by a change below `C`, and every tombstone below `C`.
//! For each key this keeps the last version below `C` (needed to read at `C` and as the
//! `prev_kv` of its next change) unless that is a tombstone. `compact` resolves once all of
//! that is done; if the process stops in between, the cleanup resumes on open. See
//! [`RedbStore::start_compactor`] for the retention policy.
//!
//! # Layout
//! This file: the handle, recovery at open, reads, watches and the compactor;
//! `writer.rs`: the writer thread and its transactions; `codec.rs`: the table records;
//! `wal.rs`: the write-ahead log.

use std::collections::VecDeque;
use std::fmt::Display;
use std::ops::{Bound, Range};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::StreamExt;
use redb::{
    Database, Durability, ReadTransaction, ReadableDatabase, ReadableTable, Table, TableDefinition,
};
use tokio::sync::{broadcast, mpsc, oneshot};

mod codec;
mod wal;
mod writer;

use codec::*;
use writer::*;

use wal::Wal;

use crate::durable_fs::{create_dir_all_durably, sync_dir};
use crate::{
    EventKind, Guard, KeyValue, Precondition, RangeRequest, RangeResponse, Revision, Store,
    StoreError, StoreHealth, StoreResult, TxnOutcome, WatchEvent, WatchStream, WriteOp,
    WriteOutcome, WriteResult, range_contains,
};

/// Latest state per key.
const KV: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv");
/// Every version history still needs, by `(key, mod_revision)`.
const HIST: TableDefinition<(&[u8], u64), &[u8]> = TableDefinition::new("hist");
/// One entry per revision: what changed.
const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
/// Store-wide counters.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

const META_FORMAT: &str = "format";
const META_REVISION: &str = "revision";
const META_COMPACTED: &str = "compacted";

/// The file format this code writes and understands (the `meta` table's `format`).
const FORMAT_VERSION: u64 = 1;
/// The leading byte of every `kv`, `hist` and `log` record.
const RECORD_V1: u8 = 1;

/// The file name inside a data directory.
pub const STORE_FILE_NAME: &str = "store.redb";

/// Tuning and retention for a [`RedbStore`]. Build with struct update syntax from
/// `RedbStoreOptions::default()`, since fields may be added.
#[derive(Clone, Debug)]
pub struct RedbStoreOptions {
    /// At most this many requests in one write transaction, bounding the latency a write can
    /// add to the others in its batch. Default 1024.
    pub max_batch: usize,
    /// Requests that may wait for the writer before `write` itself waits for room (backpressure).
    /// Default 8192.
    pub queue_depth: usize,
    /// How many committed batches the live event broadcast retains for slow watchers before they
    /// are dropped with [`StoreError::WatchLagged`]. Default 1024.
    pub watch_buffer: usize,
    /// redb's page cache, in bytes. Default 64 MiB: pages beyond it are read through the
    /// kernel's page cache, which the kernel can reclaim. With 256 MiB a server holding
    /// 100 000 objects of 1 KiB was 3.2× etcd's resident memory; with 64 MiB, 0.77×, and
    /// creates measured the same (docs/benchmarks.md, "Memory as the data grows").
    pub cache_size: usize,
    /// redb quick-repair: each durable commit also saves the allocator state, so reopening
    /// after a crash is instant instead of a walk over the whole file. It doubles the fsyncs of
    /// a durable commit, but those happen only at checkpoints. Default true.
    pub quick_repair: bool,
    /// `false` skips the write-ahead log's fsync: writes are acknowledged once committed but
    /// a crash may lose those since the last checkpoint (a clean close loses nothing). For
    /// tests and benchmarks only. Default true.
    pub durable_commits: bool,
    /// How often a write batch is committed durably to the database itself (a checkpoint),
    /// after which the write-ahead log is emptied. Longer means fewer, larger checkpoint
    /// stalls and more log to redo after a crash. Checked when a batch arrives; an idle store
    /// has nothing to checkpoint until it closes. Default 1 second.
    pub checkpoint_interval: Duration,
    /// A checkpoint is also taken once the write-ahead log reaches this many bytes, bounding
    /// its size and the work of redoing it on open. Default 64 MiB.
    pub wal_limit: u64,
    /// Retention (for [`RedbStore::start_compactor`]): keep at least this much wall-clock
    /// history. Default 5 minutes, etcd and Kubernetes' usual compaction horizon.
    pub retention_period: Duration,
    /// Retention (for [`RedbStore::start_compactor`]): keep at least this many of the latest
    /// revisions, whatever their age. Default 100 000.
    pub retention_revisions: i64,
    /// How often the background compactor compacts. Default 1 minute.
    pub compaction_interval: Duration,
    /// `log` entries deleted per compaction transaction, bounding how long one compaction step
    /// delays writes. Default 1000.
    pub compaction_chunk: usize,
    /// Events a watch replays from history per read transaction. Default 1000.
    pub replay_chunk: usize,
    /// Verify the checksum of every page of the database file when it is opened (redb's
    /// integrity check), so that a file damaged on disk is refused at open with a message
    /// saying so, instead of failing a read much later or, for a plain redb open, panicking.
    /// It reads the whole file once per open. Default true.
    pub check_integrity_on_open: bool,
}

impl Default for RedbStoreOptions {
    fn default() -> Self {
        RedbStoreOptions {
            max_batch: 1024,
            queue_depth: 8192,
            watch_buffer: 1024,
            cache_size: 64 << 20,
            quick_repair: true,
            durable_commits: true,
            checkpoint_interval: Duration::from_secs(1),
            wal_limit: 64 << 20,
            retention_period: Duration::from_secs(5 * 60),
            retention_revisions: 100_000,
            compaction_interval: Duration::from_secs(60),
            compaction_chunk: 1000,
            replay_chunk: 1000,
            check_integrity_on_open: true,
        }
    }
}

/// A [`Store`] on one redb file. See the module docs for the design.
///
/// Open with [`RedbStore::open`]. Dropping the last handle (or [`RedbStore::close`]) stops the
/// writer: requests it has not started get [`StoreError::Closed`], watches end with
/// [`StoreError::Closed`], and the file is closed once in-flight reads finish.
pub struct RedbStore {
    shared: Arc<Shared>,
    /// `None` once closed. Held under a lock only to clone or drop the senders: dropping them is
    /// what lets the writer thread and the watch streams notice the close.
    channels: RwLock<Option<Channels>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    options: RedbStoreOptions,
    path: PathBuf,
}

struct Channels {
    requests: mpsc::Sender<Request>,
    events: broadcast::Sender<EventBatch>,
}

/// The events of one committed transaction, in revision order, shared by all watchers.
type EventBatch = Arc<Vec<WatchEvent>>;

/// State shared by the handle, the writer thread and the blocking read tasks.
struct Shared {
    /// The database. Readers and the writer hold the read lock for as long as they use it;
    /// the writer takes the write lock only to swap in a reopened database while it recovers
    /// from a failed write ([`Writer::recover`]), which needs every transaction on the old one
    /// gone. `None` only while a recovery could not reopen the file.
    db: RwLock<Option<Database>>,
    /// The latest committed revision (updated by the writer after each commit).
    current: AtomicI64,
    /// The compacted revision (updated by the writer after the commit that records it).
    compacted: AtomicI64,
    closing: AtomicBool,
    /// Why writes fail, set by the writer when a batch fails and cleared when one commits;
    /// after a failure that needs a reopen, every batch fails, so it stays set. Read by
    /// [`Store::health`].
    write_refusal: Mutex<Option<String>>,
}

enum Request {
    Write {
        op: WriteOp,
        precondition: Precondition,
        reply: oneshot::Sender<StoreResult<WriteOutcome>>,
    },
    Txn {
        writes: Vec<(WriteOp, Precondition)>,
        guards: Vec<Guard>,
        reply: oneshot::Sender<StoreResult<TxnOutcome>>,
    },
    Compact {
        revision: Revision,
        reply: oneshot::Sender<StoreResult<()>>,
    },
}

impl RedbStore {
    /// Opens (creating if needed) the store at `path`, recovering from a crash if the last
    /// process did not close it.
    ///
    /// `path` is a data directory, created if missing, holding [`STORE_FILE_NAME`]; or, if it
    /// names an existing file or ends in `.redb`, the database file itself. Only one `RedbStore`
    /// can have a file open at a time (redb locks it).
    ///
    /// This does blocking file I/O (and, after a crash, redb's repair); from async code, call it
    /// in `spawn_blocking` if that matters. It starts the writer thread; it does not need a tokio
    /// runtime.
    pub fn open(path: &Path, options: RedbStoreOptions) -> StoreResult<Arc<RedbStore>> {
        let file = resolve_file(path)?;
        create_atomically(&file, &options)?;
        let (db, wal, state) = open_and_redo(&file, &options)?;
        tracing::info!(
            path = %file.display(),
            revision = state.current,
            compacted = state.compacted,
            replayed_batches = state.replayed_batches,
            "opened store"
        );

        let shared = Arc::new(Shared {
            db: RwLock::new(Some(db)),
            current: AtomicI64::new(state.current),
            compacted: AtomicI64::new(state.compacted),
            closing: AtomicBool::new(false),
            write_refusal: Mutex::new(None),
        });
        let (requests, requests_rx) = mpsc::channel(options.queue_depth.max(1));
        let (events, _) = broadcast::channel(options.watch_buffer.max(1));
        let writer = Writer {
            shared: shared.clone(),
            requests: requests_rx,
            events: events.clone(),
            current: state.current,
            compacted: state.compacted,
            cleanup: state.cleanup_pending.then(Vec::new),
            wal,
            last_checkpoint: Instant::now(),
            dirty: !options.durable_commits,
            failed: None,
            retry: Retry::default(),
            file: file.clone(),
            options: options.clone(),
            buf: Vec::new(),
            record: BatchRecord::default(),
        };
        let handle = std::thread::Builder::new()
            .name("finale-store-writer".into())
            .spawn(move || writer.run())
            .map_err(context("start the store writer thread"))?;

        Ok(Arc::new(RedbStore {
            shared,
            channels: RwLock::new(Some(Channels { requests, events })),
            writer: Mutex::new(Some(handle)),
            options,
            path: file,
        }))
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn options(&self) -> &RedbStoreOptions {
        &self.options
    }

    /// Stops the writer and waits for it: a batch being committed finishes and is acknowledged,
    /// queued requests get [`StoreError::Closed`], watches end with [`StoreError::Closed`].
    /// Reads and writes after this fail with `Closed`. Idempotent; dropping the store does the
    /// same.
    pub async fn close(&self) {
        if let Some(handle) = self.begin_close() {
            // Joining blocks for at most one commit, but not on a runtime thread.
            if let Ok(Err(_)) | Err(_) = tokio::task::spawn_blocking(move || handle.join()).await {
                tracing::error!("the store writer thread panicked");
            }
        }
    }

    /// Signals the writer to stop and returns its thread handle (once).
    fn begin_close(&self) -> Option<JoinHandle<()>> {
        self.shared.closing.store(true, Ordering::SeqCst);
        // Dropping our senders closes the request channel once in-flight `write` calls are done
        // with their clones, which wakes the writer; it also ends idle watch streams.
        drop(
            self.channels
                .write()
                .expect("store channel lock poisoned")
                .take(),
        );
        self.writer
            .lock()
            .expect("store writer lock poisoned")
            .take()
    }

    /// Runs the retention policy in the background (a tokio task; call within a runtime).
    ///
    /// Every [`compaction_interval`](RedbStoreOptions::compaction_interval), it compacts to the
    /// newest revision that is both at least [`retention_period`] old (it samples the current
    /// revision every `min(compaction_interval, retention_period / 8)`, so this is accurate to
    /// that step) and at least [`retention_revisions`] behind the current revision: history
    /// is kept for whichever of the two keeps more. The task holds only a weak reference and
    /// stops when the store is closed or dropped; abort the handle to stop it sooner.
    ///
    /// [`retention_period`]: RedbStoreOptions::retention_period
    /// [`retention_revisions`]: RedbStoreOptions::retention_revisions
    pub fn start_compactor(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let store = Arc::downgrade(self);
        let options = self.options.clone();
        tokio::spawn(run_compactor(store, options))
    }

    fn request_sender(&self) -> StoreResult<mpsc::Sender<Request>> {
        self.channels
            .read()
            .expect("store channel lock poisoned")
            .as_ref()
            .map(|c| c.requests.clone())
            .ok_or(StoreError::Closed)
    }

    fn check_open(&self) -> StoreResult<()> {
        if self.shared.closing.load(Ordering::SeqCst) {
            Err(StoreError::Closed)
        } else {
            Ok(())
        }
    }

    /// Runs a read on the blocking pool.
    async fn read<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Shared) -> StoreResult<T> + Send + 'static,
    {
        self.check_open()?;
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || f(&shared))
            .await
            .map_err(context("store read task"))?
    }
}

impl Drop for RedbStore {
    fn drop(&mut self) {
        if let Some(handle) = self.begin_close()
            && handle.join().is_err()
        {
            tracing::error!("the store writer thread panicked");
        }
    }
}

#[async_trait]
impl Store for RedbStore {
    /// A point read runs on the caller's thread, not the blocking pool: it is one lookup,
    /// almost always in redb's page cache, and handing it to another thread and back cost
    /// more than the read (two thread wake-ups; about 8% of the server's CPU under a create
    /// load, whose namespace check is a get). A page missing from the cache blocks the
    /// runtime worker for one disk read. Ranges, which may read many pages, stay on the
    /// blocking pool.
    async fn get(&self, key: &[u8]) -> StoreResult<(Option<KeyValue>, Revision)> {
        self.check_open()?;
        let shared = &self.shared;
        let txn = shared.begin_read()?;
        let current = read_meta(&txn)?.current;
        let kv = txn.open_table(KV).map_err(context("open kv table"))?;
        let found = kv.get(key).map_err(context("read kv"))?;
        let found = match found {
            Some(value) => Some(decode_kv(key, value.value())?),
            None => None,
        };
        Ok((found, current))
    }

    async fn range(&self, request: RangeRequest) -> StoreResult<RangeResponse> {
        self.read(move |shared| read_range(shared, &request)).await
    }

    async fn write(&self, op: WriteOp, precondition: Precondition) -> StoreResult<WriteOutcome> {
        let requests = self.request_sender()?;
        let (reply, answer) = oneshot::channel();
        requests
            .send(Request::Write {
                op,
                precondition,
                reply,
            })
            .await
            .map_err(|_| StoreError::Closed)?;
        drop(requests);
        // A dropped reply means the writer stopped before committing this request.
        answer.await.map_err(|_| StoreError::Closed)?
    }

    async fn write_all_guarded(
        &self,
        writes: Vec<(WriteOp, Precondition)>,
        guards: Vec<Guard>,
    ) -> StoreResult<TxnOutcome> {
        let requests = self.request_sender()?;
        let (reply, answer) = oneshot::channel();
        requests
            .send(Request::Txn {
                writes,
                guards,
                reply,
            })
            .await
            .map_err(|_| StoreError::Closed)?;
        drop(requests);
        answer.await.map_err(|_| StoreError::Closed)?
    }

    async fn watch(
        &self,
        range: Range<Vec<u8>>,
        after_revision: Revision,
    ) -> StoreResult<WatchStream> {
        self.check_open()?;
        // Subscribe before reading history: every commit not in the history snapshot is then
        // published after this point, so the replay and the live feed overlap rather than gap.
        let live = self
            .channels
            .read()
            .expect("store channel lock poisoned")
            .as_ref()
            .map(|c| c.events.subscribe())
            .ok_or(StoreError::Closed)?;
        let mut watch = Watch {
            shared: Arc::downgrade(&self.shared),
            range: Arc::new(range),
            live,
            progress: after_revision.max(0),
            replaying: true,
            pending: VecDeque::new(),
            finished: false,
            replay_chunk: self.options.replay_chunk.max(1),
        };
        // Read the first chunk now, so a compacted start revision fails the call itself.
        watch.replay_step().await?;
        Ok(futures::stream::unfold(watch, |mut watch| async move {
            let item = watch.next_event().await?;
            Some((item, watch))
        })
        .boxed())
    }

    async fn last_change_in(
        &self,
        range: Range<Vec<u8>>,
        revision: Revision,
    ) -> StoreResult<Option<Revision>> {
        self.read(move |shared| last_change_in(shared, &range, revision))
            .await
    }

    async fn current_revision(&self) -> StoreResult<Revision> {
        self.check_open()?;
        Ok(self.shared.current.load(Ordering::SeqCst))
    }

    async fn compacted_revision(&self) -> StoreResult<Revision> {
        self.check_open()?;
        Ok(self.shared.compacted.load(Ordering::SeqCst))
    }

    /// `Closed` once closing; `RefusingWrites` from a failed write batch until the writer
    /// has recovered (see the module docs), with the cause and what to do.
    fn health(&self) -> StoreHealth {
        if self.shared.closing.load(Ordering::SeqCst) {
            return StoreHealth::Closed;
        }
        match self.shared.write_refusal() {
            Some(reason) => StoreHealth::RefusingWrites { reason },
            None => StoreHealth::Serving,
        }
    }

    /// As etcd: fails with [`StoreError::Compacted`] if `revision` is not above the current
    /// compacted revision, and with [`StoreError::FutureRevision`] if it is above the current
    /// revision. Resolves once the history below `revision` is deleted and that is durable.
    async fn compact(&self, revision: Revision) -> StoreResult<()> {
        let requests = self.request_sender()?;
        let (reply, answer) = oneshot::channel();
        requests
            .send(Request::Compact { revision, reply })
            .await
            .map_err(|_| StoreError::Closed)?;
        drop(requests);
        answer.await.map_err(|_| StoreError::Closed)?
    }
}

// ---------------------------------------------------------------------------------------------
// Opening

/// Where the database file is for a `path` given to [`RedbStore::open`].
fn resolve_file(path: &Path) -> StoreResult<PathBuf> {
    if path.is_file() || path.extension().is_some_and(|e| e == "redb") {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            create_dir_all_durably(parent)
                .map_err(context(format!("create directory {}", parent.display())))?;
        }
        return Ok(path.to_path_buf());
    }
    // Durably: the directory's name is what makes every synced write inside it reachable.
    create_dir_all_durably(path)
        .map_err(context(format!("create data directory {}", path.display())))?;
    Ok(path.join(STORE_FILE_NAME))
}

/// The write-ahead log beside the database file: `store.redb` → `store.redb.wal`.
fn wal_path(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".wal");
    PathBuf::from(name)
}

struct InitialState {
    current: Revision,
    compacted: Revision,
    /// `log` holds entries below `compacted`: a compaction was interrupted.
    cleanup_pending: bool,
    /// Write-ahead log batches read at open (redone, or skipped as already durable).
    replayed_batches: usize,
}

/// redb's page cache while it checks a file's integrity at open.
const INTEGRITY_CHECK_CACHE: usize = 16 << 20;

/// An error opening the database file, saying what to do when the file is damaged.
fn open_error(file: &Path, error: redb::DatabaseError) -> StoreError {
    match error {
        redb::DatabaseError::Storage(redb::StorageError::Corrupted(what)) => {
            StoreError::Backend(format!(
                "the database file {} is damaged ({what}): its pages fail their checksums, so \
                 the store refuses to open rather than serve wrong or missing data. Restore the \
                 data directory from a backup (the file was changed outside the store, or the \
                 disk returned bad data)",
                file.display()
            ))
        }
        other => StoreError::Backend(format!("open {}: {other}", file.display())),
    }
}

/// Opens the database file and brings it up to date from the write-ahead log: redb recovers
/// to its last durable commit, the log's batches after it are redone and committed durably,
/// and the log is emptied. Used at open and, the same way, by a recovery after a failed write.
fn open_and_redo(
    file: &Path,
    options: &RedbStoreOptions,
) -> StoreResult<(Database, Wal, InitialState)> {
    if options.check_integrity_on_open {
        // A separate open with a small cache: the check reads every page, and through the
        // full-size cache it would leave the process holding up to `cache_size` of pages it
        // will likely never read again. Closed cleanly, the file then reopens at once.
        let checked = Database::builder()
            .set_cache_size(INTEGRITY_CHECK_CACHE.min(options.cache_size))
            .set_check_integrity_on_open(true)
            .create(file)
            .map_err(|e| open_error(file, e))?;
        drop(checked);
    }
    let db = Database::builder()
        .set_cache_size(options.cache_size)
        .create(file)
        .map_err(|e| open_error(file, e))?;
    let wal::Opened {
        mut wal,
        payloads: wal_batches,
        damage,
    } = Wal::open(&wal_path(file))?;
    let mut state = initialize(&db, options, &wal_batches, damage.as_ref(), file)?;
    state.replayed_batches = wal_batches.len();
    if !wal_batches.is_empty() {
        // Everything the log held is now durable in the database.
        wal.clear(options.durable_commits)?;
    }
    Ok((db, wal, state))
}

/// Creates the tables of a new file or checks the format of an existing one, then redoes the
/// write-ahead log's batches that the database's last durable commit does not have, and
/// commits durably.
///
/// Refuses (and commits nothing) when the log shows that acknowledged writes would be lost:
/// a damaged frame followed by a frame newer than the database, or a log whose batches do not
/// follow the database's revision. See [`check_damage`].
fn initialize(
    db: &Database,
    options: &RedbStoreOptions,
    wal_batches: &[Vec<u8>],
    damage: Option<&wal::Damage>,
    file: &Path,
) -> StoreResult<InitialState> {
    let mut txn = db
        .begin_write()
        .map_err(context("begin the opening transaction"))?;
    txn.set_quick_repair(options.quick_repair);
    // Without `durable_commits`, the first checkpoint or the close makes this durable.
    txn.set_durability(if options.durable_commits {
        Durability::Immediate
    } else {
        Durability::None
    })
    .map_err(context("set commit durability"))?;
    // Whether this transaction changes anything: reopening a cleanly closed store need not
    // pay for a durable commit.
    let mut changed = false;
    let state = {
        let mut meta = txn.open_table(META).map_err(context("open meta table"))?;
        let format = meta
            .get(META_FORMAT)
            .map_err(context("read the file format"))?
            .map(|v| v.value());
        match format {
            None => {
                changed = true;
                meta.insert(META_FORMAT, FORMAT_VERSION)
                    .map_err(context("write the file format"))?;
                meta.insert(META_REVISION, 0)
                    .map_err(context("write the revision"))?;
                meta.insert(META_COMPACTED, 0)
                    .map_err(context("write the compacted revision"))?;
            }
            Some(FORMAT_VERSION) => {}
            Some(other) => {
                return Err(StoreError::Backend(format!(
                    "store file format {other} is not supported (this build reads format {FORMAT_VERSION})"
                )));
            }
        }
        let mut current = meta_value(&meta, META_REVISION)?;
        let mut compacted = meta_value(&meta, META_COMPACTED)?;

        // Creating every table now also lets read transactions assume they exist.
        let mut tables = WriteTables {
            kv: txn.open_table(KV).map_err(context("open kv table"))?,
            hist: txn.open_table(HIST).map_err(context("open hist table"))?,
            log: txn.open_table(LOG).map_err(context("open log table"))?,
        };
        let mut buf = Vec::new();
        for (index, payload) in wal_batches.iter().enumerate() {
            changed = true;
            match tables.redo_batch(payload, &mut current, &mut compacted, &mut buf)? {
                Redo::Done => continue,
                Redo::Stop => break,
                Redo::Gap(gap) => {
                    return Err(StoreError::Backend(format!(
                        "the write-ahead log {} holds revisions from {} on (batch {index}), but the \
                     database {} ends at revision {current}: the revisions between, which were \
                     acknowledged, are in neither file (the database file was damaged, rolled \
                     back or replaced). The store refuses to open rather than serve without \
                     them: restore the data directory from a backup",
                        wal_path(file).display(),
                        gap,
                        file.display(),
                    )));
                }
            }
        }
        check_damage(damage, current, file)?;
        if changed {
            meta.insert(META_REVISION, current as u64)
                .map_err(context("write the revision"))?;
            meta.insert(META_COMPACTED, compacted as u64)
                .map_err(context("write the compacted revision"))?;
        }

        let first = tables.log.first().map_err(context("read the log"))?;
        let cleanup_pending = first.is_some_and(|(rev, _)| (rev.value() as Revision) < compacted);
        InitialState {
            current,
            compacted,
            cleanup_pending,
            replayed_batches: 0,
        }
    };
    if changed {
        txn.commit()
            .map_err(context("commit the opening transaction"))?;
    } else {
        txn.abort()
            .map_err(context("end the opening transaction"))?;
    }
    Ok(state)
}

/// Tells a torn tail from damage in the middle of the write-ahead log. A crash mid-append
/// tears only the frame being written, the last one: what follows it is zeroes or an older
/// frame left from before a rewind, with revisions the database already has. A valid frame
/// after the damaged one that carries revisions above `current` (what the database holds with
/// the valid frames redone) proves the damaged frame was once complete and acknowledged, and
/// the frames after it too: dropping them silently would lose acknowledged writes.
///
/// Caveat: only the frame right after the damaged one is looked at, where the damaged frame's
/// length says it is; damage to that length itself reads as a torn tail.
fn check_damage(damage: Option<&wal::Damage>, current: Revision, file: &Path) -> StoreResult<()> {
    let Some(wal::Damage {
        offset,
        next: Some((next_at, next)),
    }) = damage
    else {
        return Ok(());
    };
    let Ok(BatchHeader { first, count, .. }) = (BatchReader { rest: next }).header() else {
        return Ok(());
    };
    // A later batch with writes, or with only a compaction, beyond the database.
    let newer = first > current + 1 || (first == current + 1 && count > 0);
    if !newer {
        return Ok(());
    }
    let log = wal_path(file);
    Err(StoreError::Backend(format!(
        "the write-ahead log {} is damaged at byte offset {offset}: the frame there fails its \
         checksum, yet the frame after it (offset {next_at}) holds revision {first} and later, \
         beyond the database's revision {current}; so acknowledged writes from revision {} on \
         would be lost. The store refuses to open rather than drop them silently. Restore the \
         data directory from a backup; or, to accept losing every write from revision {} on, \
         cut the log at the damage (`truncate -s {offset} {}`) and start again",
        log.display(),
        current + 1,
        current + 1,
        log.display(),
    )))
}

fn meta_value<T: redb::ReadableTable<&'static str, u64>>(
    meta: &T,
    name: &str,
) -> StoreResult<Revision> {
    let value = meta
        .get(name)
        .map_err(context(format!("read meta {name}")))?
        .ok_or_else(|| StoreError::Backend(format!("meta table has no {name}")))?
        .value();
    Revision::try_from(value)
        .map_err(|_| StoreError::Backend(format!("meta {name} out of range: {value}")))
}

// ---------------------------------------------------------------------------------------------
// Reads

impl Shared {
    fn write_refusal(&self) -> Option<String> {
        self.write_refusal
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    fn set_write_refusal(&self, refusal: Option<String>) {
        *self
            .write_refusal
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = refusal;
    }
}

struct MetaState {
    current: Revision,
    compacted: Revision,
}

/// The database, held so that a recovery cannot swap it out while it is in use.
struct DbGuard<'a>(RwLockReadGuard<'a, Option<Database>>);

impl std::ops::Deref for DbGuard<'_> {
    type Target = Database;

    fn deref(&self) -> &Database {
        // `Shared::database` only hands out a guard over `Some`.
        self.0.as_ref().expect("DbGuard over an open database")
    }
}

/// A read transaction with the guard that keeps its database in place. The transaction is
/// declared first, so it ends before the guard is released.
struct Snapshot<'a> {
    txn: ReadTransaction,
    _db: DbGuard<'a>,
}

impl std::ops::Deref for Snapshot<'_> {
    type Target = ReadTransaction;

    fn deref(&self) -> &ReadTransaction {
        &self.txn
    }
}

impl Shared {
    /// The database, or an error while a recovery has not managed to reopen it.
    fn database(&self) -> StoreResult<DbGuard<'_>> {
        let guard = self
            .db
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if guard.is_none() {
            return Err(StoreError::Backend(format!(
                "the store is reopening its database after a failed write and cannot serve \
                 reads until that succeeds (it retries by itself); the failure: {}",
                self.write_refusal()
                    .unwrap_or_else(|| "unknown".to_string())
            )));
        }
        Ok(DbGuard(guard))
    }

    fn begin_read(&self) -> StoreResult<Snapshot<'_>> {
        let db = self.database()?;
        let txn = db.begin_read().map_err(context("begin read transaction"))?;
        Ok(Snapshot { txn, _db: db })
    }
}

fn read_meta(txn: &ReadTransaction) -> StoreResult<MetaState> {
    let meta = txn.open_table(META).map_err(context("open meta table"))?;
    Ok(MetaState {
        current: meta_value(&meta, META_REVISION)?,
        compacted: meta_value(&meta, META_COMPACTED)?,
    })
}

/// [`Store::last_change_in`]: the change log read backwards from `revision`, keys only.
fn last_change_in(
    shared: &Shared,
    range: &Range<Vec<u8>>,
    revision: Revision,
) -> StoreResult<Option<Revision>> {
    let txn = shared.begin_read()?;
    let meta = read_meta(&txn)?;
    if revision > meta.current {
        return Err(StoreError::FutureRevision {
            requested: revision,
            current: meta.current,
        });
    }
    let revision = if revision <= 0 {
        meta.current
    } else {
        revision
    };
    if revision < meta.compacted {
        return Err(StoreError::Compacted {
            requested: revision,
            compacted: meta.compacted,
        });
    }
    let log = txn.open_table(LOG).map_err(context("open log table"))?;
    let entries = log
        .range(..=revision as u64)
        .map_err(context("read the log"))?;
    for entry in entries.rev().take(crate::LAST_CHANGE_SCAN_LIMIT) {
        let (rev, record) = entry.map_err(context("read the log"))?;
        let rev = rev.value();
        if (rev as Revision) < meta.compacted {
            // Entries below the compacted revision may be gone: an older change is unknown.
            return Ok(None);
        }
        if range_contains(range, decode_log(rev, record.value())?.key) {
            return Ok(Some(rev as Revision));
        }
    }
    Ok(None)
}

fn read_range(shared: &Shared, request: &RangeRequest) -> StoreResult<RangeResponse> {
    let txn = shared.begin_read()?;
    let meta = read_meta(&txn)?;
    let revision = request.revision;
    if revision > meta.current {
        return Err(StoreError::FutureRevision {
            requested: revision,
            current: meta.current,
        });
    }
    if revision > 0 && revision < meta.compacted {
        return Err(StoreError::Compacted {
            requested: revision,
            compacted: meta.compacted,
        });
    }
    let (start, end) = (&request.range.start, &request.range.end);
    let mut response = RangeResponse {
        kvs: Vec::new(),
        more: false,
        revision: meta.current,
    };
    if !end.is_empty() && start >= end {
        response.revision = if revision > 0 { revision } else { meta.current };
        return Ok(response);
    }
    let limit = if request.limit == 0 {
        usize::MAX
    } else {
        request.limit
    };

    if revision <= 0 || revision == meta.current {
        // Latest: straight from `kv`.
        let kv = txn.open_table(KV).map_err(context("open kv table"))?;
        let entries = if end.is_empty() {
            kv.range::<&[u8]>(start.as_slice()..)
        } else {
            kv.range::<&[u8]>(start.as_slice()..end.as_slice())
        }
        .map_err(context("read kv"))?;
        for entry in entries {
            let (key, value) = entry.map_err(context("read kv"))?;
            if response.kvs.len() == limit {
                response.more = true;
                break;
            }
            response.kvs.push(decode_kv(key.value(), value.value())?);
        }
        return Ok(response);
    }

    // An older revision: for each key in range, its last version at or below `revision`. Two
    // seeks per key (the key's first entry, then its last one <= revision), however long its
    // history.
    response.revision = revision;
    let rev = revision as u64;
    let hist = txn.open_table(HIST).map_err(context("open hist table"))?;
    let upper: Bound<(&[u8], u64)> = if end.is_empty() {
        Bound::Unbounded
    } else {
        Bound::Excluded((end.as_slice(), 0))
    };
    let mut previous_key: Option<Vec<u8>> = None;
    loop {
        let lower = match &previous_key {
            None => Bound::Included((start.as_slice(), 0)),
            Some(key) => Bound::Excluded((key.as_slice(), u64::MAX)),
        };
        let Some(first) = hist
            .range::<(&[u8], u64)>((lower, upper))
            .map_err(context("read history"))?
            .next()
        else {
            break;
        };
        let (first_key, _) = first.map_err(context("read history"))?;
        let (key, first_rev) = first_key.value();
        let key = key.to_vec();
        if first_rev <= rev {
            let last = hist
                .range::<(&[u8], u64)>((key.as_slice(), 0)..=(key.as_slice(), rev))
                .map_err(context("read history"))?
                .next_back();
            if let Some(last) = last {
                let (last_key, value) = last.map_err(context("read history"))?;
                let mod_rev = last_key.value().1;
                if let HistRecord::Put {
                    create_revision,
                    version,
                    value,
                } = decode_hist(&key, mod_rev, value.value())?
                {
                    if response.kvs.len() == limit {
                        response.more = true;
                        break;
                    }
                    response.kvs.push(KeyValue {
                        key: key.clone(),
                        value: value.to_vec(),
                        create_revision,
                        mod_revision: mod_rev as Revision,
                        version,
                    });
                }
            }
        }
        previous_key = Some(key);
    }
    Ok(response)
}

/// Events with revision above `after` (up to `max_events` of them), from one snapshot.
struct LogChunk {
    events: Vec<WatchEvent>,
    /// Every change up to this revision has been looked at.
    scanned_to: Revision,
    /// `scanned_to` is the snapshot's current revision: replay is done.
    caught_up: bool,
}

fn read_log_chunk(
    shared: &Shared,
    range: &Range<Vec<u8>>,
    after: Revision,
    max_events: usize,
) -> StoreResult<LogChunk> {
    let txn = shared.begin_read()?;
    let meta = read_meta(&txn)?;
    // Strictly after the compaction point, as on etcd: compacting at C drops a tombstone
    // written at C, so a watch from C itself could miss that delete.
    if after < meta.compacted {
        return Err(StoreError::Compacted {
            requested: after + 1,
            compacted: meta.compacted,
        });
    }
    let mut chunk = LogChunk {
        events: Vec::new(),
        scanned_to: after.max(meta.current),
        caught_up: true,
    };
    if after >= meta.current {
        return Ok(chunk);
    }
    let log = txn.open_table(LOG).map_err(context("open log table"))?;
    let hist = txn.open_table(HIST).map_err(context("open hist table"))?;
    // Scanning is bounded too, so a narrow watch over a long log still yields regularly.
    let max_scanned = max_events.saturating_mul(16);
    let mut scanned = 0;
    for entry in log
        .range((after + 1) as u64..=meta.current as u64)
        .map_err(context("read the log"))?
    {
        let (rev, record) = entry.map_err(context("read the log"))?;
        let rev = rev.value();
        let record = decode_log(rev, record.value())?;
        if range_contains(range, record.key) {
            chunk.events.push(event_from_history(&hist, rev, &record)?);
        }
        scanned += 1;
        if chunk.events.len() >= max_events || scanned >= max_scanned {
            if (rev as Revision) < meta.current {
                chunk.scanned_to = rev as Revision;
                chunk.caught_up = false;
            }
            break;
        }
    }
    Ok(chunk)
}

/// Rebuilds the watch event of the change at `rev` from the versions in `hist`.
fn event_from_history(
    hist: &redb::ReadOnlyTable<(&'static [u8], u64), &'static [u8]>,
    rev: u64,
    record: &LogRecord<'_>,
) -> StoreResult<WatchEvent> {
    let load = |mod_rev: u64| -> StoreResult<KeyValue> {
        let value = hist
            .get((record.key, mod_rev))
            .map_err(context("read history"))?
            .ok_or_else(|| {
                StoreError::Backend(format!(
                    "history of key {:?} has no version {mod_rev} (needed by revision {rev})",
                    String::from_utf8_lossy(record.key)
                ))
            })?;
        match decode_hist(record.key, mod_rev, value.value())? {
            HistRecord::Put {
                create_revision,
                version,
                value,
            } => Ok(KeyValue {
                key: record.key.to_vec(),
                value: value.to_vec(),
                create_revision,
                mod_revision: mod_rev as Revision,
                version,
            }),
            HistRecord::Tombstone => Err(StoreError::Backend(format!(
                "history of key {:?} has a tombstone at {mod_rev} where revision {rev} expects a value",
                String::from_utf8_lossy(record.key)
            ))),
        }
    };
    let prev_kv = match record.prev_mod_revision {
        0 => None,
        prev => Some(load(prev)?),
    };
    let kv = match record.kind {
        EventKind::Put => load(rev)?,
        EventKind::Delete => tombstone_kv(record.key.to_vec(), rev as Revision),
    };
    Ok(WatchEvent {
        kind: record.kind,
        kv,
        prev_kv,
    })
}

// ---------------------------------------------------------------------------------------------
// Watches

struct Watch {
    /// Weak, so an open watch does not keep the database file open after the store is dropped.
    shared: Weak<Shared>,
    range: Arc<Range<Vec<u8>>>,
    live: broadcast::Receiver<EventBatch>,
    /// Every matching change up to this revision has been queued (or delivered).
    progress: Revision,
    replaying: bool,
    pending: VecDeque<WatchEvent>,
    finished: bool,
    replay_chunk: usize,
}

impl Watch {
    async fn next_event(&mut self) -> Option<StoreResult<WatchEvent>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(Ok(event));
            }
            if self.finished {
                return None;
            }
            if self.replaying {
                if let Err(e) = self.replay_step().await {
                    self.finished = true;
                    return Some(Err(e));
                }
                continue;
            }
            match self.live.recv().await {
                Ok(batch) => {
                    for event in batch.iter() {
                        if event.revision() > self.progress
                            && range_contains(&self.range, &event.kv.key)
                        {
                            self.pending.push_back(event.clone());
                        }
                    }
                    if let Some(last) = batch.last() {
                        self.progress = self.progress.max(last.revision());
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    // Everything through `progress` was delivered (`pending` is empty here).
                    self.finished = true;
                    return Some(Err(StoreError::WatchLagged {
                        revision: self.progress,
                    }));
                }
                Err(broadcast::error::RecvError::Closed) => {
                    self.finished = true;
                    return Some(Err(StoreError::Closed));
                }
            }
        }
    }

    /// Reads the next chunk of history into `pending`.
    async fn replay_step(&mut self) -> StoreResult<()> {
        let shared = self.shared.upgrade().ok_or(StoreError::Closed)?;
        let range = self.range.clone();
        let after = self.progress;
        let max_events = self.replay_chunk;
        let chunk =
            tokio::task::spawn_blocking(move || read_log_chunk(&shared, &range, after, max_events))
                .await
                .map_err(context("watch replay task"))??;
        self.pending.extend(chunk.events);
        self.progress = chunk.scanned_to;
        self.replaying = !chunk.caught_up;
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Retention

async fn run_compactor(store: Weak<RedbStore>, options: RedbStoreOptions) {
    let interval = options.compaction_interval.max(Duration::from_millis(10));
    let step = interval
        .min(options.retention_period / 8)
        .max(Duration::from_millis(10));
    let mut ticker = tokio::time::interval(step);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut samples = VecDeque::new();
    let mut last_compaction = Instant::now();
    loop {
        ticker.tick().await;
        let Some(store) = store.upgrade() else {
            return;
        };
        if store.check_open().is_err() {
            return;
        }
        let now = Instant::now();
        let current = store.shared.current.load(Ordering::SeqCst);
        samples.push_back((now, current));
        if now.duration_since(last_compaction) < interval {
            continue;
        }
        last_compaction = now;
        let target = retention_target(
            &mut samples,
            now,
            current,
            options.retention_period,
            options.retention_revisions,
        );
        let compacted = store.shared.compacted.load(Ordering::SeqCst);
        if let Some(target) = target.filter(|t| *t > compacted) {
            match store.compact(target).await {
                Ok(()) => tracing::debug!(revision = target, "retention compaction done"),
                // Someone else compacted further in the meantime.
                Err(StoreError::Compacted { .. }) => {}
                Err(StoreError::Closed) => return,
                Err(e) => {
                    tracing::warn!(error = %e, revision = target, "retention compaction failed")
                }
            }
        }
    }
}

/// The revision to compact to under the retention policy, from `(time, current revision)`
/// samples in time order: the newest sample at least `period` old, but no more than
/// `current - keep_revisions`. Drops the samples it will never need again.
fn retention_target(
    samples: &mut VecDeque<(Instant, Revision)>,
    now: Instant,
    current: Revision,
    period: Duration,
    keep_revisions: i64,
) -> Option<Revision> {
    let mut by_time = None;
    while let Some(&(at, revision)) = samples.front() {
        if now.duration_since(at) < period {
            break;
        }
        by_time = Some(revision);
        samples.pop_front();
    }
    let by_count = current.saturating_sub(keep_revisions.max(0));
    by_time.map(|t| t.min(by_count)).filter(|t| *t > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let mut buf = Vec::new();
        encode_kv(&mut buf, 3, 7, 2, b"value");
        let kv = decode_kv(b"k", &buf).expect("decode kv");
        assert_eq!(
            kv,
            KeyValue {
                key: b"k".to_vec(),
                value: b"value".to_vec(),
                create_revision: 3,
                mod_revision: 7,
                version: 2
            }
        );

        encode_hist_put(&mut buf, 3, 2, b"v");
        match decode_hist(b"k", 7, &buf).expect("decode hist") {
            HistRecord::Put {
                create_revision,
                version,
                value,
            } => assert_eq!((create_revision, version, value), (3, 2, &b"v"[..])),
            HistRecord::Tombstone => panic!("expected a put"),
        }
        encode_hist_tombstone(&mut buf);
        assert!(matches!(
            decode_hist(b"k", 8, &buf).expect("decode tombstone"),
            HistRecord::Tombstone
        ));

        encode_log(&mut buf, EventKind::Delete, 7, b"key");
        let log = decode_log(8, &buf).expect("decode log");
        assert_eq!(log.kind, EventKind::Delete);
        assert_eq!(log.prev_mod_revision, 7);
        assert_eq!(log.key, b"key");

        assert!(decode_kv(b"k", &[2, 0]).is_err());
        assert!(decode_hist(b"k", 1, &[RECORD_V1, HIST_PUT, 0]).is_err());
        assert!(decode_log(1, &[RECORD_V1, 9]).is_err());
    }

    /// A damaged frame followed by an older frame (left from before a rewind: the crash case)
    /// is a torn tail; followed by a newer one, it is damage that would lose acknowledged
    /// writes.
    #[test]
    fn only_a_newer_frame_after_a_damaged_one_is_damage() {
        let payload = |first: Revision, writes: u32| {
            let mut record = BatchRecord::default();
            record.start(first);
            for i in 0..writes {
                record.delete(format!("/k{i}").as_bytes(), 1);
            }
            record.finish(0);
            record.frame()[wal::FRAME_HEADER..].to_vec()
        };
        let file = Path::new("/data/store.redb");
        let damage = |next: Option<Vec<u8>>| wal::Damage {
            offset: 100,
            next: next.map(|p| (200, p)),
        };
        // Nothing after it, or an older frame: accepted.
        assert!(check_damage(Some(&damage(None)), 10, file).is_ok());
        assert!(check_damage(Some(&damage(Some(payload(4, 3)))), 10, file).is_ok());
        assert!(check_damage(Some(&damage(Some(payload(11, 0)))), 10, file).is_ok());
        assert!(check_damage(None, 10, file).is_ok());
        // Newer than the database: refused, naming the log and the offset.
        for newer in [payload(11, 2), payload(15, 1), payload(12, 0)] {
            let error = check_damage(Some(&damage(Some(newer))), 10, file)
                .expect_err("a newer frame after a damaged one");
            assert!(
                error.to_string().contains(
                    "the write-ahead log /data/store.redb.wal is damaged at byte offset 100"
                ),
                "{error}"
            );
        }
    }

    #[test]
    fn retention_keeps_whichever_is_more() {
        let start = Instant::now();
        let at = |secs| start + Duration::from_secs(secs);
        let period = Duration::from_secs(300);
        let mut samples: VecDeque<_> = [(at(0), 100), (at(100), 200), (at(200), 300)].into();

        // Nothing is old enough yet: keep everything.
        assert_eq!(
            retention_target(&mut samples, at(250), 1_000, period, 10),
            None
        );
        // At 320 s, the sample from 0 s is old enough; the later ones are not.
        assert_eq!(
            retention_target(&mut samples, at(320), 1_000, period, 10),
            Some(100)
        );
        assert_eq!(samples.len(), 2);
        // The revision floor keeps more than the time window here.
        assert_eq!(
            retention_target(&mut samples, at(450), 1_000, period, 900),
            Some(100)
        );
        // Nothing to compact below revision 1.
        let mut samples: VecDeque<_> = [(at(0), 0)].into();
        assert_eq!(retention_target(&mut samples, at(400), 0, period, 0), None);
    }
}
