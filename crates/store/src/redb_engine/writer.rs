//! The writer thread: batches requests, applies them in one redb transaction with the
//! write-ahead log, and answers once durable; after a failed write, it refuses writes until it
//! has recovered (see [`Writer::recover`]).

use super::*;

/// The first wait before a recovery is tried again after a failed write, doubled after every
/// failed attempt up to [`RETRY_MAX`]. Short, so that a transient failure costs little; the
/// cap bounds how long writes stay refused after the cause (a full disk) is gone.
pub(super) const RETRY_FIRST: Duration = Duration::from_millis(50);
pub(super) const RETRY_MAX: Duration = Duration::from_secs(2);
/// How long the idle writer sleeps between looks at its queue while writes are refused.
const REFUSING_POLL: Duration = Duration::from_millis(20);
/// The scratch file a recovery writes first, beside the database, to see whether the disk
/// takes writes again before it gives up the open database.
const PROBE_SUFFIX: &str = ".probe";
/// The least a recovery's probe writes: room for the reopen's durable commit, on top of twice
/// the write-ahead log it redoes (a copy-on-write commit of the redone pages).
const PROBE_MIN_BYTES: u64 = 4 << 20;

/// When the writer next tries to recover, and how long it waits after that.
pub(super) struct Retry {
    pub(super) at: Instant,
    pub(super) delay: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            at: Instant::now(),
            delay: RETRY_FIRST,
        }
    }
}

impl Retry {
    fn due(&self) -> bool {
        Instant::now() >= self.at
    }

    /// After a failure: wait `delay` before the next try, and longer after the one after.
    fn back_off(&mut self) {
        self.at = Instant::now() + self.delay;
        self.delay = (self.delay * 2).min(RETRY_MAX);
    }
}

/// What a refused write answers and `/readyz` shows: the cause, and what happens next. A
/// full disk is named as such, because it is the one cause an operator can fix at once.
pub(super) fn refusal_message(cause: &str, dir: &Path) -> String {
    if is_disk_full(cause) {
        format!(
            "the store's disk is full, so writes are refused (reads still work): {cause}; free \
             space on the filesystem holding {}: writes resume by themselves once there is room",
            dir.display()
        )
    } else {
        format!(
            "writes are refused after a storage failure (reads still work): {cause}; the store \
             retries by itself and resumes writes once its files accept writes again; if this \
             lasts, check the disk and the server log"
        )
    }
}

/// A failure's cause as a refusal names it: a backend error's own message, without the
/// "backend error" prefix its display adds.
fn failure_cause(error: &StoreError) -> String {
    match error {
        StoreError::Backend(message) => message.clone(),
        other => other.to_string(),
    }
}

/// Whether an error's text is ENOSPC or EDQUOT (what `std::io::Error` prints for them).
pub(super) fn is_disk_full(text: &str) -> bool {
    text.contains("No space left on device")
        || text.contains("os error 28")
        || text.contains("Disk quota exceeded")
        || text.contains("os error 122")
}

pub(super) struct Writer {
    pub(super) shared: Arc<Shared>,
    pub(super) requests: mpsc::Receiver<Request>,
    pub(super) events: broadcast::Sender<EventBatch>,
    /// The last committed revision and compacted revision, as this thread committed them.
    pub(super) current: Revision,
    pub(super) compacted: Revision,
    /// `Some` while history below `compacted` is still being deleted: the `compact` calls to
    /// answer when that is done.
    pub(super) cleanup: Option<Vec<oneshot::Sender<StoreResult<()>>>>,
    pub(super) wal: Wal,
    pub(super) last_checkpoint: Instant,
    /// Something was committed to redb without fsync since the last checkpoint.
    pub(super) dirty: bool,
    /// Set when a write batch failed: the write-ahead log and the database may disagree (a
    /// failed append or sync, or a commit that failed after its batch was logged), or redb
    /// refuses writes after an I/O error. Every later write is refused with this message
    /// until [`Writer::recover`] succeeds.
    pub(super) failed: Option<String>,
    /// When to try recovering again while `failed`.
    pub(super) retry: Retry,
    /// The database file, to reopen it when recovering.
    pub(super) file: PathBuf,
    pub(super) options: RedbStoreOptions,
    /// Reused encoding buffer for table records.
    pub(super) buf: Vec<u8>,
    /// Reused encoding buffer for the batch's write-ahead log frame.
    pub(super) record: BatchRecord,
}

/// A request's reply channel, kept apart from its operation while the batch is applied.
pub(super) enum Reply {
    Write(oneshot::Sender<StoreResult<WriteOutcome>>),
    Txn(oneshot::Sender<StoreResult<TxnOutcome>>),
    Compact(oneshot::Sender<StoreResult<()>>),
}

pub(super) enum Op {
    Write(WriteOp, Precondition),
    Txn(Vec<(WriteOp, Precondition)>, Vec<Guard>),
    Compact(Revision),
}

pub(super) enum Outcome {
    Write(WriteOutcome),
    Txn(StoreResult<TxnOutcome>),
    Compact(StoreResult<()>),
}

pub(super) struct Applied {
    pub(super) outcomes: Vec<Outcome>,
    pub(super) events: Vec<WatchEvent>,
    pub(super) current: Revision,
    pub(super) compacted: Revision,
}

impl Writer {
    pub(super) fn run(mut self) {
        let max_batch = self.options.max_batch.max(1);
        let mut batch: Vec<Request> = Vec::with_capacity(max_batch.min(1024));
        loop {
            // Wait for work; while writes are refused, try to recover on schedule; while
            // history cleanup is pending, do it whenever no write waits.
            let first = if self.failed.is_some() {
                match self.requests.try_recv() {
                    Ok(request) => request,
                    Err(mpsc::error::TryRecvError::Empty) => {
                        if self.closing() {
                            break;
                        }
                        if self.retry.due() {
                            self.try_recover();
                        } else {
                            std::thread::sleep(REFUSING_POLL);
                        }
                        continue;
                    }
                    Err(mpsc::error::TryRecvError::Disconnected) => break,
                }
            } else if self.cleanup.is_some() {
                match self.requests.try_recv() {
                    Ok(request) => request,
                    Err(mpsc::error::TryRecvError::Empty) => {
                        if self.closing() {
                            break;
                        }
                        self.cleanup_step();
                        continue;
                    }
                    Err(mpsc::error::TryRecvError::Disconnected) => break,
                }
            } else {
                match self.requests.blocking_recv() {
                    Some(request) => request,
                    None => break,
                }
            };
            batch.push(first);
            while batch.len() < max_batch {
                match self.requests.try_recv() {
                    Ok(request) => batch.push(request),
                    Err(_) => break,
                }
            }
            if self.closing() {
                // Not started: dropping the requests answers their callers with `Closed`.
                batch.clear();
                break;
            }
            self.process(&mut batch);
            if self.cleanup.is_some() {
                self.cleanup_step();
            }
        }
        self.shutdown();
    }

    pub(super) fn closing(&self) -> bool {
        self.shared.closing.load(Ordering::SeqCst)
    }

    pub(super) fn shutdown(&mut self) {
        // Refuse new requests; dropping the queued ones answers them with `Closed`.
        self.requests.close();
        while self.requests.try_recv().is_ok() {}
        if self.failed.is_none() {
            // A final checkpoint, and an empty log, so the next open has nothing to redo.
            let checkpoint = if self.dirty {
                self.commit_empty_durably()
            } else {
                Ok(())
            };
            match checkpoint.and_then(|()| self.wal.clear(true)) {
                Ok(()) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "final checkpoint failed; the write-ahead log will be redone on open")
                }
            }
        }
        tracing::debug!(revision = self.current, "store writer stopped");
    }

    /// Applies one batch, then publishes its events and answers its callers.
    pub(super) fn process(&mut self, batch: &mut Vec<Request>) {
        let mut ops = Vec::with_capacity(batch.len());
        let mut replies = Vec::with_capacity(batch.len());
        for request in batch.drain(..) {
            match request {
                Request::Write {
                    op,
                    precondition,
                    reply,
                } => {
                    ops.push(Op::Write(op, precondition));
                    replies.push(Reply::Write(reply));
                }
                Request::Txn {
                    writes,
                    guards,
                    reply,
                } => {
                    ops.push(Op::Txn(writes, guards));
                    replies.push(Reply::Txn(reply));
                }
                Request::Compact { revision, reply } => {
                    ops.push(Op::Compact(revision));
                    replies.push(Reply::Compact(reply));
                }
            }
        }

        if self.failed.is_some() && self.retry.due() {
            self.try_recover();
        }
        let result = match &self.failed {
            Some(failure) => Err(StoreError::Backend(failure.clone())),
            None => self.apply(ops),
        };
        let applied = match result {
            Ok(applied) => applied,
            Err(e) => {
                if self.failed.is_none() {
                    tracing::error!(error = %e, requests = replies.len(), "write batch failed; refusing writes until the store recovers");
                    // Whatever failed (the log, redb, the disk), only a recovery re-establishes
                    // a state the log and the database agree on.
                    let cause = failure_cause(&e);
                    self.failed = Some(refusal_message(&cause, self.dir()));
                    self.retry = Retry::default();
                    self.retry.back_off();
                }
                let message = self.failed.clone().unwrap_or_else(|| e.to_string());
                self.shared.set_write_refusal(Some(message.clone()));
                for reply in replies {
                    let error = StoreError::Backend(message.clone());
                    match reply {
                        Reply::Write(reply) => drop(reply.send(Err(error))),
                        Reply::Txn(reply) => drop(reply.send(Err(error))),
                        Reply::Compact(reply) => drop(reply.send(Err(error))),
                    }
                }
                return;
            }
        };

        self.shared.set_write_refusal(None);
        // Durable and committed: make it visible, then tell watchers before callers, so that a
        // caller who reads its revision back from a watch-fed cache finds it there.
        self.current = applied.current;
        self.shared.current.store(applied.current, Ordering::SeqCst);
        if applied.compacted != self.compacted {
            self.compacted = applied.compacted;
            self.shared
                .compacted
                .store(applied.compacted, Ordering::SeqCst);
            self.cleanup.get_or_insert_with(Vec::new);
        }
        if !applied.events.is_empty() {
            // An error only means nobody is watching.
            let _ = self.events.send(Arc::new(applied.events));
        }
        for (reply, outcome) in replies.into_iter().zip(applied.outcomes) {
            match (reply, outcome) {
                (Reply::Write(reply), Outcome::Write(outcome)) => drop(reply.send(Ok(outcome))),
                (Reply::Txn(reply), Outcome::Txn(outcome)) => drop(reply.send(outcome)),
                (Reply::Compact(reply), Outcome::Compact(Ok(()))) => {
                    // Answered when the history below it is gone.
                    self.cleanup.get_or_insert_with(Vec::new).push(reply);
                }
                (Reply::Compact(reply), Outcome::Compact(Err(e))) => drop(reply.send(Err(e))),
                // `apply` returns one outcome of the same kind per op, in order, so this is
                // not reached; were it, the dropped reply would answer `Closed`.
                _ => tracing::error!("write batch outcome does not match its request"),
            }
        }
    }

    /// Whether this batch's redb commit should be durable itself (a checkpoint) rather than
    /// through the write-ahead log.
    pub(super) fn checkpoint_due(&self) -> bool {
        self.last_checkpoint.elapsed() >= self.options.checkpoint_interval
            || self.wal.len() >= self.options.wal_limit
    }

    /// Applies `ops` in one transaction, makes it durable (write-ahead log, or a durable
    /// commit at a checkpoint) and commits it.
    pub(super) fn apply(&mut self, ops: Vec<Op>) -> StoreResult<Applied> {
        let checkpoint = self.checkpoint_due();
        let shared = self.shared.clone();
        let db = shared.database()?;
        let mut txn = db
            .begin_write()
            .map_err(context("begin write transaction"))?;
        txn.set_durability(if checkpoint {
            Durability::Immediate
        } else {
            Durability::None
        })
        .map_err(context("set commit durability"))?;
        txn.set_quick_repair(self.options.quick_repair);

        let mut outcomes = Vec::with_capacity(ops.len());
        let mut events = Vec::new();
        let mut current = self.current;
        let mut compacted = self.compacted;
        self.record.start(current + 1);
        {
            let mut tables = WriteTables {
                kv: txn.open_table(KV).map_err(context("open kv table"))?,
                hist: txn.open_table(HIST).map_err(context("open hist table"))?,
                log: txn.open_table(LOG).map_err(context("open log table"))?,
            };
            for op in ops {
                match op {
                    Op::Write(op, precondition) => {
                        let outcome = tables.apply_write(
                            op,
                            precondition,
                            current + 1,
                            &mut self.buf,
                            &mut self.record,
                            &mut events,
                        )?;
                        if let WriteOutcome::Committed(result) = &outcome {
                            current = result.revision;
                        }
                        outcomes.push(Outcome::Write(outcome));
                    }
                    Op::Txn(writes, guards) => {
                        let outcome = tables.apply_txn(
                            writes,
                            guards,
                            current + 1,
                            &mut self.buf,
                            &mut self.record,
                            &mut events,
                        )?;
                        if let Ok(TxnOutcome::Committed(results)) = &outcome
                            && let Some(last) = results.last()
                        {
                            current = last.revision;
                        }
                        outcomes.push(Outcome::Txn(outcome));
                    }
                    Op::Compact(revision) => {
                        let result = if revision <= compacted {
                            Err(StoreError::Compacted {
                                requested: revision,
                                compacted,
                            })
                        } else if revision > current {
                            Err(StoreError::FutureRevision {
                                requested: revision,
                                current,
                            })
                        } else {
                            compacted = revision;
                            Ok(())
                        };
                        outcomes.push(Outcome::Compact(result));
                    }
                }
            }
            let mut meta = txn.open_table(META).map_err(context("open meta table"))?;
            if current != self.current {
                meta.insert(META_REVISION, current as u64)
                    .map_err(context("write the revision"))?;
            }
            if compacted != self.compacted {
                meta.insert(META_COMPACTED, compacted as u64)
                    .map_err(context("write the compacted revision"))?;
            }
        }

        let changed = current != self.current || compacted != self.compacted;
        // Where this batch's frame starts: on a failure, it and whatever follows it are
        // unacknowledged, and the recovery discards them from here.
        let frame_at = self.wal.len();
        if changed && !checkpoint {
            // Durable before anyone can see it: log first, commit (in memory) second. A failed
            // append may leave a partial frame in the file; `process` then refuses writes until
            // a recovery has discarded it.
            self.record.finish(compacted);
            self.wal
                .append(self.record.frame(), self.options.durable_commits)?;
        }
        if let Err(e) = txn.commit() {
            // The batch is logged but not committed: the recovery drops the frame, so what the
            // callers were told (failed) stays true. After a failed checkpoint redb itself
            // refuses every write ("Previous I/O error") until it is reopened, which the
            // recovery does too.
            self.wal.rewind_to(frame_at);
            return Err(StoreError::Backend(format!("commit write batch: {e}")));
        }
        if checkpoint {
            self.checkpointed();
        } else {
            self.dirty = true;
        }
        Ok(Applied {
            outcomes,
            events,
            current,
            compacted,
        })
    }

    /// The directory holding the database file.
    pub(super) fn dir(&self) -> &Path {
        self.file
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
    }

    /// One recovery attempt; on success writes are accepted again, on failure the next one is
    /// scheduled with backoff and the refusal names the latest cause.
    pub(super) fn try_recover(&mut self) {
        match self.recover() {
            Ok(()) => {
                tracing::info!(
                    revision = self.current,
                    "the store recovered from a failed write and accepts writes again"
                );
                self.failed = None;
                self.retry = Retry::default();
                self.shared.set_write_refusal(None);
            }
            Err(e) => {
                let cause = failure_cause(&e);
                tracing::warn!(error = %cause, retry_in = ?self.retry.delay, "the store could not recover yet");
                let message = refusal_message(&cause, self.dir());
                self.shared.set_write_refusal(Some(message.clone()));
                self.failed = Some(message);
                self.retry.back_off();
            }
        }
    }

    /// Re-establishes a state the write-ahead log and the database agree on, after a failed
    /// write batch, without restarting the process:
    ///
    /// 1. Probes the disk: a scratch file of a few MiB (more for a longer log) is written,
    ///    synced and removed. While that fails (the disk is still full), nothing else is
    ///    touched and the open database keeps serving reads.
    /// 2. Discards the log from the failed batch's frame on (zeroes that frame's header and
    ///    syncs): everything before it was acknowledged, nothing from it on was.
    /// 3. Reopens redb and redoes the log exactly as [`RedbStore::open`] does: redb recovers
    ///    to its last durable commit, the log's acknowledged batches are redone and committed
    ///    durably. Readers wait for the swap (the database's write lock), which lasts one
    ///    open and redo.
    /// 4. Checks that the reopened store holds every acknowledged revision. A batch whose
    ///    durable commit (a checkpoint) reported failure may still have reached the disk; it
    ///    is then kept, its events are published to watchers now, and its callers, who were
    ///    told it failed, find it there (as after a crash: unacknowledged writes are whole or
    ///    absent).
    pub(super) fn recover(&mut self) -> StoreResult<()> {
        self.probe_disk()?;
        self.wal.discard_tail()?;

        let shared = self.shared.clone();
        let mut slot = shared
            .db
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // redb holds a lock on its file: the old handle must be gone before the new one opens.
        drop(slot.take());
        // Without the integrity check of a first open: readers wait for this reopen, and the
        // file was checked when the process opened it.
        let reopen = RedbStoreOptions {
            check_integrity_on_open: false,
            ..self.options.clone()
        };
        let (db, wal, state) = open_and_redo(&self.file, &reopen)?;
        if state.current < self.current {
            // Reads would go back in time: stay closed and say so.
            return Err(StoreError::Backend(format!(
                "after reopening, {} holds revision {} but revision {} was acknowledged: the \
                 write-ahead log {} lost acknowledged writes; restart the server, and if this \
                 persists restore the data directory from a backup",
                self.file.display(),
                state.current,
                self.current,
                wal_path(&self.file).display()
            )));
        }
        *slot = Some(db);
        drop(slot);

        let before = self.current;
        self.wal = wal;
        self.dirty = false;
        self.last_checkpoint = Instant::now();
        if state.current > before {
            // A batch reported failed made it to disk after all: tell watchers, once.
            let everything = Vec::new()..Vec::new();
            let chunk = read_log_chunk(&shared, &everything, before, usize::MAX)?;
            self.current = state.current;
            shared.current.store(state.current, Ordering::SeqCst);
            if !chunk.events.is_empty() {
                let _ = self.events.send(Arc::new(chunk.events));
            }
        }
        if state.compacted != self.compacted {
            self.compacted = state.compacted;
            shared.compacted.store(state.compacted, Ordering::SeqCst);
        }
        if state.cleanup_pending {
            self.cleanup.get_or_insert_with(Vec::new);
        }
        Ok(())
    }

    /// Writes, syncs and removes a scratch file beside the database: whether the disk takes
    /// writes again, with room for a reopen to redo the log.
    fn probe_disk(&self) -> StoreResult<()> {
        use std::io::Write;
        let mut name = self.file.as_os_str().to_owned();
        name.push(PROBE_SUFFIX);
        let path = PathBuf::from(name);
        let bytes = PROBE_MIN_BYTES.saturating_add(self.wal.len().saturating_mul(2));
        let result = (|| {
            let mut file = std::fs::File::create(&path)?;
            let chunk = vec![0u8; 1 << 20];
            let mut written = 0u64;
            while written < bytes {
                let n = (bytes - written).min(chunk.len() as u64) as usize;
                file.write_all(&chunk[..n])?;
                written += n as u64;
            }
            file.sync_data()
        })();
        // Removed whatever happened: it only ever takes space.
        let removed = std::fs::remove_file(&path);
        result.map_err(context(format!(
            "write {} bytes to {} to see whether the disk has room again",
            bytes,
            path.display()
        )))?;
        removed.map_err(context(format!("remove {}", path.display())))
    }

    /// After a durable commit: the write-ahead log is no longer needed.
    pub(super) fn checkpointed(&mut self) {
        self.last_checkpoint = Instant::now();
        self.dirty = false;
        self.wal.rewind();
    }

    /// Deletes one chunk of history below `compacted`, answering the `compact` calls when
    /// none is left. On failure it gives up until the next `compact` or open, which resume.
    pub(super) fn cleanup_step(&mut self) {
        match self.delete_history_chunk() {
            Ok(false) => {}
            Ok(true) => {
                tracing::debug!(compacted = self.compacted, "compaction finished");
                for reply in self.cleanup.take().unwrap_or_default() {
                    let _ = reply.send(Ok(()));
                }
            }
            Err(e) => {
                tracing::error!(error = %e, compacted = self.compacted, "compaction failed");
                let message = e.to_string();
                for reply in self.cleanup.take().unwrap_or_default() {
                    let _ = reply.send(Err(StoreError::Backend(message.clone())));
                }
            }
        }
    }

    /// One compaction transaction; returns whether history below `compacted` is all gone.
    ///
    /// Commits without fsync: the deletions become durable at the next checkpoint, and a
    /// crash before that merely loses progress, which the next open resumes (the compacted
    /// revision itself is durable from the batch that set it).
    pub(super) fn delete_history_chunk(&mut self) -> StoreResult<bool> {
        let below = self.compacted as u64;
        let db = self.shared.database()?;
        let mut txn = db
            .begin_write()
            .map_err(context("begin compaction transaction"))?;
        txn.set_quick_repair(self.options.quick_repair);
        txn.set_durability(Durability::None)
            .map_err(context("set commit durability"))?;
        let done = {
            let mut log = txn.open_table(LOG).map_err(context("open log table"))?;
            let mut hist = txn.open_table(HIST).map_err(context("open hist table"))?;
            let mut entries = Vec::new();
            for entry in log
                .range(..below)
                .map_err(context("read the log"))?
                .take(self.options.compaction_chunk.max(1))
            {
                let (rev, record) = entry.map_err(context("read the log"))?;
                entries.push((rev.value(), record.value().to_vec()));
            }
            for (rev, record) in &entries {
                let record = decode_log(*rev, record)?;
                // The version this change replaced is superseded below `compacted`.
                if record.prev_mod_revision != 0 {
                    hist.remove((record.key, record.prev_mod_revision))
                        .map_err(context("delete superseded history"))?;
                }
                // A tombstone below `compacted` reads the same as no entry at all.
                if record.kind == EventKind::Delete {
                    hist.remove((record.key, *rev))
                        .map_err(context("delete a tombstone"))?;
                }
                log.remove(*rev).map_err(context("delete a log entry"))?;
            }
            let first = log.first().map_err(context("read the log"))?;
            first.is_none_or(|(rev, _)| rev.value() >= below)
        };
        txn.commit().map_err(context("commit compaction step"))?;
        self.dirty = true;
        Ok(done)
    }

    /// A durable empty commit: makes everything committed so far durable in the database.
    pub(super) fn commit_empty_durably(&self) -> StoreResult<()> {
        let db = self.shared.database()?;
        let mut txn = db
            .begin_write()
            .map_err(context("begin checkpoint transaction"))?;
        txn.set_quick_repair(self.options.quick_repair);
        txn.set_durability(Durability::Immediate)
            .map_err(context("set commit durability"))?;
        txn.commit().map_err(context("commit checkpoint"))
    }
}

/// The write-ahead log frame of one batch: the effects of its committed writes (not the
/// requests: preconditions are already decided), so redoing it is deterministic.
///
/// `[frame header][RECORD_V1][first_rev u64][count u32][compacted u64]` then `count` entries
/// `[WAL_PUT|WAL_DELETE][key_len u32][key][prev_mod_rev u64]`, a put followed by
/// `[create_rev u64][version u64][value_len u32][value]`. Entry `i` has revision
/// `first_rev + i`.
#[derive(Default)]
pub(super) struct BatchRecord {
    pub(super) buf: Vec<u8>,
    pub(super) count: u32,
}

pub(super) const WAL_PUT: u8 = 0;
pub(super) const WAL_DELETE: u8 = 1;
/// Offset of `count` in a frame; `compacted` follows it.
pub(super) const BATCH_COUNT_AT: usize = wal::FRAME_HEADER + 1 + 8;

impl BatchRecord {
    pub(super) fn start(&mut self, first_revision: Revision) {
        self.buf.clear();
        self.buf.resize(wal::FRAME_HEADER, 0);
        self.buf.push(RECORD_V1);
        self.buf
            .extend_from_slice(&(first_revision as u64).to_be_bytes());
        self.buf.extend_from_slice(&0u32.to_be_bytes());
        self.buf.extend_from_slice(&0u64.to_be_bytes());
        self.count = 0;
    }

    pub(super) fn put(
        &mut self,
        key: &[u8],
        value: &[u8],
        create: Revision,
        version: i64,
        prev_mod: u64,
    ) {
        self.entry(WAL_PUT, key, prev_mod);
        self.buf.extend_from_slice(&(create as u64).to_be_bytes());
        self.buf.extend_from_slice(&(version as u64).to_be_bytes());
        self.buf
            .extend_from_slice(&(value.len() as u32).to_be_bytes());
        self.buf.extend_from_slice(value);
    }

    pub(super) fn delete(&mut self, key: &[u8], prev_mod: u64) {
        self.entry(WAL_DELETE, key, prev_mod);
    }

    pub(super) fn entry(&mut self, kind: u8, key: &[u8], prev_mod: u64) {
        self.count += 1;
        self.buf.push(kind);
        self.buf
            .extend_from_slice(&(key.len() as u32).to_be_bytes());
        self.buf.extend_from_slice(key);
        self.buf.extend_from_slice(&prev_mod.to_be_bytes());
    }

    pub(super) fn finish(&mut self, compacted: Revision) {
        self.buf[BATCH_COUNT_AT..BATCH_COUNT_AT + 4].copy_from_slice(&self.count.to_be_bytes());
        self.buf[BATCH_COUNT_AT + 4..BATCH_COUNT_AT + 12]
            .copy_from_slice(&(compacted as u64).to_be_bytes());
    }

    pub(super) fn frame(&mut self) -> &mut [u8] {
        &mut self.buf
    }
}

/// Reads a write-ahead log payload (a frame without its header).
pub(super) struct BatchReader<'a> {
    pub(super) rest: &'a [u8],
}

/// What a write-ahead log batch starts with (see [`BatchRecord`]).
pub(super) struct BatchHeader {
    /// The revision of its first write.
    pub(super) first: Revision,
    /// How many writes it holds (revisions `first..first + count`).
    pub(super) count: Revision,
    /// The compacted revision after it.
    pub(super) compacted: Revision,
}

impl<'a> BatchReader<'a> {
    /// The batch's header; the reader is then at its first entry.
    pub(super) fn header(&mut self) -> StoreResult<BatchHeader> {
        if self.u8()? != RECORD_V1 {
            return Err(StoreError::Backend(
                "write-ahead log batch has an unknown format".into(),
            ));
        }
        Ok(BatchHeader {
            first: self.u64()? as Revision,
            count: self.u32()? as Revision,
            compacted: self.u64()? as Revision,
        })
    }

    pub(super) fn take(&mut self, n: usize) -> StoreResult<&'a [u8]> {
        if self.rest.len() < n {
            return Err(StoreError::Backend(
                "corrupt write-ahead log batch (truncated entry)".into(),
            ));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    pub(super) fn u8(&mut self) -> StoreResult<u8> {
        Ok(self.take(1)?[0])
    }

    pub(super) fn u32(&mut self) -> StoreResult<u32> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(super) fn u64(&mut self) -> StoreResult<u64> {
        Ok(be_u64(self.take(8)?))
    }

    pub(super) fn bytes(&mut self) -> StoreResult<&'a [u8]> {
        let len = self.u32()? as usize;
        self.take(len)
    }
}

/// What [`WriteTables::redo_batch`] did with a batch.
pub(super) enum Redo {
    /// Redone, or skipped as already in the database.
    Done,
    /// Not redone, and neither are the batches after it.
    Stop,
    /// Starts at this revision, above the database's next one.
    Gap(Revision),
}

pub(super) struct WriteTables<'txn> {
    pub(super) kv: Table<'txn, &'static [u8], &'static [u8]>,
    pub(super) hist: Table<'txn, (&'static [u8], u64), &'static [u8]>,
    pub(super) log: Table<'txn, u64, &'static [u8]>,
}

impl WriteTables<'_> {
    /// Applies one write at `revision` if its precondition holds against the transaction's
    /// current state (which includes the batch's earlier writes).
    pub(super) fn apply_write(
        &mut self,
        op: WriteOp,
        precondition: Precondition,
        revision: Revision,
        buf: &mut Vec<u8>,
        record: &mut BatchRecord,
        events: &mut Vec<WatchEvent>,
    ) -> StoreResult<WriteOutcome> {
        let current = match self.kv.get(op.key()).map_err(context("read kv"))? {
            Some(value) => Some(decode_kv(op.key(), value.value())?),
            None => None,
        };
        let holds = precondition_holds(precondition, current.as_ref());
        let deletes_nothing = matches!(op, WriteOp::Delete { .. }) && current.is_none();
        if !holds || deletes_nothing {
            return Ok(WriteOutcome::PreconditionFailed { current });
        }

        let prev_mod = current.as_ref().map_or(0, |c| c.mod_revision as u64);
        match op {
            WriteOp::Put { key, value } => {
                let (create_revision, version) = match &current {
                    Some(c) => (c.create_revision, c.version + 1),
                    None => (revision, 1),
                };
                self.store_put(
                    &key,
                    &value,
                    revision,
                    create_revision,
                    version,
                    prev_mod,
                    buf,
                )?;
                record.put(&key, &value, create_revision, version, prev_mod);
                let kv = KeyValue {
                    key,
                    value,
                    create_revision,
                    mod_revision: revision,
                    version,
                };
                events.push(WatchEvent {
                    kind: EventKind::Put,
                    kv: kv.clone(),
                    prev_kv: current.clone(),
                });
                Ok(WriteOutcome::Committed(WriteResult {
                    revision,
                    current: Some(kv),
                    previous: current,
                }))
            }
            WriteOp::Delete { key } => {
                self.store_delete(&key, revision, prev_mod, buf)?;
                record.delete(&key, prev_mod);
                events.push(WatchEvent {
                    kind: EventKind::Delete,
                    kv: tombstone_kv(key, revision),
                    prev_kv: current.clone(),
                });
                Ok(WriteOutcome::Committed(WriteResult {
                    revision,
                    current: None,
                    previous: current,
                }))
            }
        }
    }

    /// Applies writes all or none, from `first_revision` on: every precondition is checked
    /// against the transaction's current state before anything is written.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn apply_txn(
        &mut self,
        writes: Vec<(WriteOp, Precondition)>,
        guards: Vec<Guard>,
        first_revision: Revision,
        buf: &mut Vec<u8>,
        record: &mut BatchRecord,
        events: &mut Vec<WatchEvent>,
    ) -> StoreResult<StoreResult<TxnOutcome>> {
        let mut keys = std::collections::HashSet::with_capacity(writes.len());
        if !writes.iter().all(|(op, _)| keys.insert(op.key())) {
            return Ok(Err(StoreError::Backend(
                "a transaction writes the same key twice".into(),
            )));
        }
        if guards
            .iter()
            .any(|guard| keys.contains(guard.key.as_slice()))
        {
            return Ok(Err(StoreError::Backend(
                "a transaction guards a key it writes".into(),
            )));
        }
        let mut current = Vec::with_capacity(writes.len() + guards.len());
        let mut all_hold = true;
        for (op, precondition) in &writes {
            let found = match self.kv.get(op.key()).map_err(context("read kv"))? {
                Some(value) => Some(decode_kv(op.key(), value.value())?),
                None => None,
            };
            let holds = precondition_holds(*precondition, found.as_ref())
                && !(matches!(op, WriteOp::Delete { .. }) && found.is_none());
            all_hold &= holds;
            current.push(found);
        }
        for guard in &guards {
            let found = match self
                .kv
                .get(guard.key.as_slice())
                .map_err(context("read kv"))?
            {
                Some(value) => Some(decode_kv(&guard.key, value.value())?),
                None => None,
            };
            all_hold &= found.as_ref().map_or(0, |kv| kv.mod_revision) == guard.mod_revision;
            current.push(found);
        }
        if !all_hold {
            return Ok(Ok(TxnOutcome::PreconditionFailed { current }));
        }
        let mut results = Vec::with_capacity(writes.len());
        for (revision, (op, precondition)) in (first_revision..).zip(writes) {
            match self.apply_write(op, precondition, revision, buf, record, events)? {
                WriteOutcome::Committed(result) => results.push(result),
                // Checked above on the same transaction state, with distinct keys.
                WriteOutcome::PreconditionFailed { .. } => {
                    return Err(StoreError::Backend(
                        "a transaction's precondition changed while it was applied".into(),
                    ));
                }
            }
        }
        Ok(Ok(TxnOutcome::Committed(results)))
    }

    /// Records a put at `revision` in `kv`, `hist` and `log`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn store_put(
        &mut self,
        key: &[u8],
        value: &[u8],
        revision: Revision,
        create_revision: Revision,
        version: i64,
        prev_mod: u64,
        buf: &mut Vec<u8>,
    ) -> StoreResult<()> {
        let rev = revision as u64;
        encode_kv(buf, create_revision, revision, version, value);
        self.kv
            .insert(key, buf.as_slice())
            .map_err(context("write kv"))?;
        encode_hist_put(buf, create_revision, version, value);
        self.hist
            .insert((key, rev), buf.as_slice())
            .map_err(context("write history"))?;
        encode_log(buf, EventKind::Put, prev_mod, key);
        self.log
            .insert(rev, buf.as_slice())
            .map_err(context("write the log"))?;
        Ok(())
    }

    /// Records a delete at `revision` in `kv`, `hist` and `log`.
    pub(super) fn store_delete(
        &mut self,
        key: &[u8],
        revision: Revision,
        prev_mod: u64,
        buf: &mut Vec<u8>,
    ) -> StoreResult<()> {
        let rev = revision as u64;
        self.kv.remove(key).map_err(context("delete kv"))?;
        encode_hist_tombstone(buf);
        self.hist
            .insert((key, rev), buf.as_slice())
            .map_err(context("write history"))?;
        encode_log(buf, EventKind::Delete, prev_mod, key);
        self.log
            .insert(rev, buf.as_slice())
            .map_err(context("write the log"))?;
        Ok(())
    }

    /// Redoes one write-ahead log batch on open if the database does not have it yet.
    /// A batch starting above `current + 1` is a [`Redo::Gap`]: the database lacks revisions
    /// the log was written after, which the caller refuses. A batch that overlaps `current`
    /// without following it cannot be redone either; the replay stops there ([`Redo::Stop`]).
    pub(super) fn redo_batch(
        &mut self,
        payload: &[u8],
        current: &mut Revision,
        compacted: &mut Revision,
        buf: &mut Vec<u8>,
    ) -> StoreResult<Redo> {
        let mut reader = BatchReader { rest: payload };
        let BatchHeader {
            first,
            count,
            compacted: batch_compacted,
        } = reader.header()?;
        if count > 0 && first != *current + 1 {
            if first + count - 1 <= *current {
                // Already in the database (committed durably before the crash).
                *compacted = (*compacted).max(batch_compacted);
                return Ok(Redo::Done);
            }
            if first > *current + 1 {
                return Ok(Redo::Gap(first));
            }
            tracing::warn!(
                first,
                current = *current,
                "write-ahead log batch overlaps the database's revision; ignoring the log from here"
            );
            return Ok(Redo::Stop);
        }
        for revision in first..first + count {
            let kind = reader.u8()?;
            let key = reader.bytes()?;
            let prev_mod = reader.u64()?;
            match kind {
                WAL_PUT => {
                    let create = reader.u64()? as Revision;
                    let version = reader.u64()? as i64;
                    let value = reader.bytes()?;
                    self.store_put(key, value, revision, create, version, prev_mod, buf)?;
                }
                WAL_DELETE => self.store_delete(key, revision, prev_mod, buf)?,
                other => {
                    return Err(StoreError::Backend(format!(
                        "corrupt write-ahead log entry kind {other} at revision {revision}"
                    )));
                }
            }
            *current = revision;
        }
        *compacted = (*compacted).max(batch_compacted);
        Ok(Redo::Done)
    }
}

/// Whether `precondition` holds for a key whose current state is `current`.
pub(super) fn precondition_holds(precondition: Precondition, current: Option<&KeyValue>) -> bool {
    match precondition {
        Precondition::None => true,
        Precondition::MustNotExist | Precondition::ModRevision(0) => current.is_none(),
        Precondition::MustExist => current.is_some(),
        Precondition::ModRevision(r) => current.is_some_and(|c| c.mod_revision == r),
    }
}

/// A delete event's `kv`, as etcd reports it: the key and the deletion's revision.
pub(super) fn tombstone_kv(key: Vec<u8>, revision: Revision) -> KeyValue {
    KeyValue {
        key,
        value: Vec::new(),
        create_revision: 0,
        mod_revision: revision,
        version: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_a_full_disk_and_what_to_do() {
        let dir = Path::new("/data/store");
        let full = refusal_message(
            "append to /data/store/store.redb.wal: No space left on device (os error 28)",
            dir,
        );
        assert!(
            full.starts_with("the store's disk is full, so writes are refused (reads still work)")
                && full.contains("No space left on device")
                && full.contains("free space on the filesystem holding /data/store"),
            "{full}"
        );
        assert!(
            refusal_message("write: Disk quota exceeded (os error 122)", dir)
                .contains("disk is full")
        );
        let other = refusal_message("sync: Input/output error (os error 5)", dir);
        assert!(
            other.starts_with("writes are refused after a storage failure (reads still work)")
                && other.contains("Input/output error"),
            "{other}"
        );
    }

    #[test]
    fn retries_back_off_to_a_bound() {
        let mut retry = Retry::default();
        assert!(retry.due());
        let mut delays = Vec::new();
        for _ in 0..10 {
            retry.back_off();
            delays.push(retry.delay);
        }
        assert!(!retry.due());
        assert_eq!(delays[0], RETRY_FIRST * 2);
        assert!(delays.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(*delays.last().expect("delays"), RETRY_MAX);
    }
}
