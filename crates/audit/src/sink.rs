//! The audit log backend: events as JSON lines to a file with lumberjack's rotation
//! ([`rotate`]), or to standard output, written by a dedicated thread.
//!
//! Request handlers call [`AuditLog::log`], which encodes the event and queues the line. One
//! `std::thread` owns the file and writes the lines in order, so no request waits for the disk
//! unless the queue is full. A thread rather than a tokio task: file writes block, and a task
//! doing them would hold a runtime worker (or need `spawn_blocking` per event).

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use chrono::Utc;

use crate::event::Event;
use crate::policy::{Policy, PolicyError};

mod rotate;
#[cfg(test)]
mod tests;

use rotate::{Clock, RotatingFile, Rotation};

/// Events queued and not yet written, at most. Upstream's batch buffer holds as many
/// (`defaultBatchBufferSize`); beyond it, [`AuditLog::log`] blocks.
pub const QUEUE_CAPACITY: usize = 10_000;

/// The most bytes of queued lines the writer joins into one `write`.
pub const BATCH_BYTES: usize = 256 * 1024;

/// How long the writer rests after writing a batch before it looks at the queue again.
/// While it rests, requests queue their lines without waking it: a busy server wakes the
/// writer at most a few hundred times a second rather than once per event, and the woken
/// thread does not preempt request work on every event (on two cores that cost a quarter of
/// the audited throughput). A line waits at most this long longer before it is written.
pub const BATCH_WAIT: std::time::Duration = std::time::Duration::from_millis(2);

/// Bytes reserved for an encoded event: a `Metadata`-level event is 600–900 bytes.
const LINE_CAPACITY: usize = 1024;

/// Lumberjack's size when `--audit-log-maxsize` is 0 (`defaultMaxSize`): 0 does not turn
/// rotation off.
pub const DEFAULT_MAX_SIZE_MB: u64 = 100;

const MEGABYTE: u64 = 1024 * 1024;

/// kube-apiserver's audit log flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditLogOptions {
    /// `--audit-log-path`: the file, or `-` for standard output.
    pub path: PathBuf,
    /// `--audit-log-maxsize`: megabytes before the file is rotated; 0 means lumberjack's
    /// default, [`DEFAULT_MAX_SIZE_MB`].
    pub max_size_mb: u64,
    /// `--audit-log-maxbackup`: rotated files kept; 0 keeps all.
    pub max_backups: u32,
    /// `--audit-log-maxage`: days a rotated file is kept, by the time in its name; 0 keeps all.
    pub max_age_days: u32,
    /// `--audit-policy-file`; without it, [`Policy::default_metadata`].
    pub policy: Option<PathBuf>,
}

/// A loaded policy and an open log: what the server needs to audit requests.
#[derive(Debug)]
pub struct Audit {
    /// The policy, to evaluate per request.
    pub policy: Policy,
    /// The log, to write events to.
    pub log: AuditLog,
}

/// Why auditing could not start.
#[derive(Debug, thiserror::Error)]
pub enum AuditLogError {
    /// `--audit-log-path` is empty.
    #[error("--audit-log-path is empty: give a file path, or - for standard output")]
    EmptyPath,
    /// `--audit-log-maxsize` does not fit in bytes.
    #[error("--audit-log-maxsize {0}: too large (the size is in megabytes)")]
    MaxSizeTooLarge(u64),
    /// The log's directory could not be created.
    #[error(
        "--audit-log-path {}: cannot create directory {}: {source}; create it, or choose a \
         path this user can write",
        path.display(), dir.display()
    )]
    CreateDir {
        /// The log file.
        path: PathBuf,
        /// The directory.
        dir: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The log file could not be opened for appending.
    #[error(
        "--audit-log-path {}: cannot open it for writing: {source}; make it writable by this \
         user, or choose another path",
        path.display()
    )]
    Open {
        /// The log file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The policy file could not be loaded.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// The writer thread could not be started.
    #[error("audit log: cannot start the writer thread: {0}")]
    Spawn(io::Error),
    /// The log was closed, or its writer is gone.
    #[error("audit log {0} is closed")]
    Closed(String),
}

impl AuditLogOptions {
    /// Options for `path` with kube-apiserver's defaults: no flags but `--audit-log-path`.
    pub fn new(path: impl Into<PathBuf>) -> AuditLogOptions {
        AuditLogOptions {
            path: path.into(),
            max_size_mb: 0,
            max_backups: 0,
            max_age_days: 0,
            policy: None,
        }
    }

    /// Loads the policy and opens the log.
    pub fn open(&self) -> Result<Audit, AuditLogError> {
        let policy = match &self.policy {
            Some(path) => Policy::load(path)?,
            None => Policy::default_metadata(),
        };
        Ok(Audit {
            policy,
            log: self.open_log()?,
        })
    }

    /// Opens the log alone. A file is created now, mode 0600, with its directories (0700), as
    /// kube-apiserver's `ensureLogFile`: a path that cannot be written fails here, at start,
    /// rather than at the first request.
    pub fn open_log(&self) -> Result<AuditLog, AuditLogError> {
        let max_bytes = self.max_bytes()?;
        self.open_log_with(max_bytes, Arc::new(Utc::now))
    }

    fn max_bytes(&self) -> Result<u64, AuditLogError> {
        let mb = match self.max_size_mb {
            0 => DEFAULT_MAX_SIZE_MB,
            mb => mb,
        };
        mb.checked_mul(MEGABYTE)
            .ok_or(AuditLogError::MaxSizeTooLarge(self.max_size_mb))
    }

    /// [`AuditLogOptions::open_log`] with the size limit in bytes and the clock given (tests).
    pub(crate) fn open_log_with(
        &self,
        max_bytes: u64,
        clock: Clock,
    ) -> Result<AuditLog, AuditLogError> {
        if self.path.as_os_str().is_empty() {
            return Err(AuditLogError::EmptyPath);
        }
        if self.path == Path::new("-") {
            return AuditLog::start(Output::Stdout, "-".to_owned());
        }
        ensure_log_file(&self.path)?;
        let rotation = Rotation {
            max_bytes,
            max_backups: self.max_backups,
            max_age_days: self.max_age_days,
            clock,
        };
        AuditLog::start(
            Output::File(RotatingFile::new(self.path.clone(), rotation)),
            self.path.display().to_string(),
        )
    }
}

fn ensure_log_file(path: &Path) -> Result<(), AuditLogError> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|source| AuditLogError::CreateDir {
                path: path.to_path_buf(),
                dir: dir.to_path_buf(),
                source,
            })?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map(drop)
        .map_err(|source| AuditLogError::Open {
            path: path.to_path_buf(),
            source,
        })
}

/// The audit log: [`AuditLog::log`] queues, a writer thread writes.
///
/// # Guarantees
/// - Events are written in the order `log` was called (from one thread; calls racing from
///   several threads are written in the order they reached the queue), one JSON object per
///   line. The lines waiting in the queue when the writer looks are written together, with
///   one `write` call (at most [`BATCH_BYTES`], whole lines only), so a busy server makes
///   few system calls; a batch that would cross the rotation size is written line by line.
/// - When [`AuditLog::flush`] returns, every event logged before it is in the file (in the
///   OS, not necessarily on disk: upstream does not `fsync` either).
/// - [`AuditLog::close`] (and dropping the log) writes everything queued, then stops.
/// - A write that fails is logged with `tracing::error!` and counted in
///   [`AuditLog::errors_total`]; it never fails or panics the caller.
///
/// # Caveats
/// - Backpressure, as kube-apiserver's default `--audit-log-mode=blocking`: when
///   [`QUEUE_CAPACITY`] events are waiting, `log` blocks the calling thread until the writer
///   catches up, so a stalled disk stalls the requests that are audited rather than dropping
///   their events. On a tokio runtime that parks a worker thread.
/// - Unlike upstream's blocking mode, `log` returns once the line is queued, not written: a
///   crash (not an orderly close) loses the queued events.
#[derive(Debug)]
pub struct AuditLog {
    queue: SyncSender<Message>,
    counters: Arc<Counters>,
    writer: Mutex<Option<JoinHandle<()>>>,
    target: String,
}

#[derive(Debug, Default)]
struct Counters {
    events: AtomicU64,
    errors: AtomicU64,
}

enum Message {
    Line {
        audit_id: String,
        line: Vec<u8>,
    },
    Flush(SyncSender<()>),
    Close(SyncSender<()>),
    /// Tests: holds the writer until the other end sends or hangs up.
    #[cfg(test)]
    Pause(Receiver<()>),
}

enum Output {
    Stdout,
    File(RotatingFile),
}

impl AuditLog {
    fn start(output: Output, target: String) -> Result<AuditLog, AuditLogError> {
        let (queue, receiver) = mpsc::sync_channel(QUEUE_CAPACITY);
        let counters = Arc::new(Counters::default());
        let writer = {
            let (counters, target) = (Arc::clone(&counters), target.clone());
            std::thread::Builder::new()
                .name("audit-log-writer".to_owned())
                .spawn(move || write_loop(output, &receiver, &counters, &target))
                .map_err(AuditLogError::Spawn)?
        };
        Ok(AuditLog {
            queue,
            counters,
            writer: Mutex::new(Some(writer)),
            target,
        })
    }

    /// Queues an event. Blocks only while the queue is full (see the type's Caveats).
    pub fn log(&self, event: &Event) {
        self.counters.events.fetch_add(1, Ordering::Relaxed);
        // Encoded here, on the caller's thread: the event is borrowed, and encoding it costs
        // no more than the copy the writer thread would otherwise need.
        // Sized for a typical `Metadata` event, so encoding it does not grow the buffer.
        let mut line = Vec::with_capacity(LINE_CAPACITY);
        if let Err(error) = serde_json::to_writer(&mut line, event) {
            return self.failed(&event.audit_id, &error);
        }
        line.push(b'\n');
        let message = Message::Line {
            audit_id: event.audit_id.clone(),
            line,
        };
        let sent = match self.queue.try_send(message) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(message)) => self.queue.send(message).map_err(drop),
            Err(TrySendError::Disconnected(_)) => Err(()),
        };
        if sent.is_err() {
            self.failed(
                &event.audit_id,
                &format!("audit log {} is closed", self.target),
            );
        }
    }

    /// Waits until every event logged before this call is written.
    pub fn flush(&self) -> Result<(), AuditLogError> {
        let (done, wait) = mpsc::sync_channel(1);
        self.queue
            .send(Message::Flush(done))
            .map_err(|_| self.closed())?;
        wait.recv().map_err(|_| self.closed())
    }

    /// Writes everything queued, closes the file and stops the writer. Later events are
    /// counted as errors. Idempotent.
    pub fn close(&self) {
        let writer = self
            .writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(writer) = writer else { return };
        let (done, wait) = mpsc::sync_channel(1);
        if self.queue.send(Message::Close(done)).is_ok() {
            let _ = wait.recv();
        }
        if writer.join().is_err() {
            tracing::error!(target_file = %self.target, "audit log writer panicked");
        }
    }

    /// Events handed to the log (`apiserver_audit_event_total`: "generated and sent to the
    /// audit backend"), including those that then failed.
    pub fn events_total(&self) -> u64 {
        self.counters.events.load(Ordering::Relaxed)
    }

    /// Events that could not be written (`apiserver_audit_error_total{plugin="log"}`).
    pub fn errors_total(&self) -> u64 {
        self.counters.errors.load(Ordering::Relaxed)
    }

    /// The file written, or `-`.
    pub fn target(&self) -> &str {
        &self.target
    }

    fn failed(&self, audit_id: &str, error: &dyn std::fmt::Display) {
        self.counters.errors.fetch_add(1, Ordering::Relaxed);
        tracing::error!(target_file = %self.target, %audit_id, %error, "audit event not written");
    }

    /// Tests: stops the writer until the returned sender is dropped.
    #[cfg(test)]
    fn pause(&self) -> SyncSender<()> {
        let (release, gate) = mpsc::sync_channel(1);
        let _ = self.queue.send(Message::Pause(gate));
        release
    }

    fn closed(&self) -> AuditLogError {
        AuditLogError::Closed(self.target.clone())
    }
}

impl Drop for AuditLog {
    fn drop(&mut self) {
        self.close();
    }
}

fn write_loop(mut output: Output, queue: &Receiver<Message>, counters: &Counters, target: &str) {
    let fail = |audit_id: &str, error: &dyn std::fmt::Display| {
        counters.errors.fetch_add(1, Ordering::Relaxed);
        tracing::error!(target_file = %target, %audit_id, %error, "audit event not written");
    };
    // Reused for every batch: the lines joined, and whose they are.
    let mut joined: Vec<u8> = Vec::new();
    let mut batch: Vec<(String, Vec<u8>)> = Vec::new();
    let mut held: Option<Message> = None;
    while let Some(message) = held.take().or_else(|| queue.recv().ok()) {
        match message {
            Message::Line { audit_id, line } => {
                let mut bytes = line.len();
                batch.push((audit_id, line));
                while bytes < BATCH_BYTES {
                    match queue.try_recv() {
                        Ok(Message::Line { audit_id, line }) => {
                            bytes += line.len();
                            batch.push((audit_id, line));
                        }
                        // A flush or close waits for the lines before it: keep it for after.
                        Ok(other) => {
                            held = Some(other);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                output.write_batch(&mut batch, &mut joined, &fail);
                if held.is_none() {
                    std::thread::sleep(BATCH_WAIT);
                }
            }
            Message::Flush(done) => {
                output.flush();
                let _ = done.send(());
            }
            #[cfg(test)]
            Message::Pause(gate) => {
                let _ = gate.recv();
            }
            Message::Close(done) => {
                output.flush();
                drop(output);
                // Whatever raced in behind the close is not written: count it.
                while let Ok(message) = queue.try_recv() {
                    match message {
                        Message::Line { audit_id, .. } => fail(&audit_id, &"audit log is closed"),
                        Message::Flush(done) | Message::Close(done) => {
                            let _ = done.send(());
                        }
                        #[cfg(test)]
                        Message::Pause(_) => {}
                    }
                }
                let _ = done.send(());
                return;
            }
        }
    }
}

impl Output {
    /// Writes `batch` (emptied) with one `write` where it fits, else line by line; a failure
    /// is reported for every line it concerns.
    fn write_batch(
        &mut self,
        batch: &mut Vec<(String, Vec<u8>)>,
        joined: &mut Vec<u8>,
        fail: &dyn Fn(&str, &dyn std::fmt::Display),
    ) {
        let total: usize = batch.iter().map(|(_, line)| line.len()).sum();
        let together = batch.len() > 1
            && match self {
                Output::Stdout => true,
                Output::File(file) => file.fits(total as u64),
            };
        if together {
            joined.clear();
            for (_, line) in batch.iter() {
                joined.extend_from_slice(line);
            }
            if let Err(error) = self.write(joined) {
                for (audit_id, _) in batch.iter() {
                    fail(audit_id, &error);
                }
            }
        } else {
            for (audit_id, line) in batch.iter() {
                if let Err(error) = self.write(line) {
                    fail(audit_id, &error);
                }
            }
        }
        batch.clear();
    }

    fn write(&mut self, line: &[u8]) -> io::Result<()> {
        match self {
            Output::Stdout => io::stdout().lock().write_all(line),
            Output::File(file) => file.write(line),
        }
    }

    /// File writes are unbuffered; standard output is line-buffered, flushed for good measure.
    fn flush(&mut self) {
        if let Output::Stdout = self
            && let Err(error) = io::stdout().flush()
        {
            tracing::error!(%error, "audit log: cannot flush standard output");
        }
    }
}
