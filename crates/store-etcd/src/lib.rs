//! The [`Store`] trait over an etcd v3 cluster: Finale's storage when it runs in front of an
//! existing etcd, as kube-apiserver does (`finale server --etcd-servers`).
//!
//! The trait follows etcd's data model, so this is a thin adapter over `finale-etcd-rpc`:
//!
//! | `Store` | etcd |
//! |---|---|
//! | `get`, `range` | a linearizable `Range` (with `limit` and `revision`) |
//! | `write` | one `Txn`: compare `mod_revision` (`MustNotExist` is `mod_revision == 0`, `MustExist` is `create_revision > 0`), then `Put`/`DeleteRange` with `prev_kv` (not for a `MustNotExist` put, which has none), else `Range` of the key |
//! | `watch` | `Watch` from `after + 1` with `prev_kv`, progress notifications and fragments, resumed inside the adapter |
//! | `compact` | `Compact` |
//! | `current_revision` | the header revision of a linearizable `Range` |
//! | `compacted_revision` | the lowest revision a `Range` can still read (etcd 3.4 reports it nowhere else) |
//!
//! Every key is stored under a root prefix (`--etcd-prefix`, default `/finale`), which the
//! adapter adds to keys, ranges, compares and watches and strips from results. The background
//! [`EtcdStore::start_compactor`] is kube-apiserver's compactor (see `compactor.rs`).
//!
//! # Guarantees
//! - Every call is retried on another member with jittered backoff while etcd is unavailable
//!   (`Unavailable`, a broken connection, no answer), until the call deadline; then it fails
//!   with [`StoreError::Unavailable`] or [`StoreError::Timeout`]. A member that failed leaves
//!   the rotation until it answers a probe.
//! - A write whose outcome is unknown (sent, then the connection broke) is resolved by
//!   re-reading the key: unchanged means it did not happen and it is retried (the compare
//!   makes that safe); changed to our value means it happened.
//! - A watch survives member failures: the adapter re-watches from the revision after the
//!   last complete response it delivered, so every event reaches the caller exactly once, in
//!   order. It reports [`StoreError::Compacted`] only when etcd says so (a cancel carrying
//!   `compact_revision`, or an update whose previous value is gone).
//! - Responses of any size up to 2 GiB are accepted (tonic's 4 MiB default would break large
//!   lists and watch replays).
//!
//! # Assumptions
//! - One Finale cluster per prefix; nothing else writes under it. etcd's compaction is global:
//!   give each Finale cluster its own etcd, or compaction of one affects the other's history.
//! - Values stay under etcd's request limit (`--max-request-bytes`, 1.5 MiB by default); the
//!   registry refuses larger objects with 413 before they get here.
//!
//! # Caveats
//! - An ambiguous write can be misreported in two corner cases: if another client changed
//!   the key right after our write landed, we report a conflict (kube-apiserver has the same
//!   ambiguity); an unconditional put that did not land, over an identical value, is
//!   reported as committed at the existing value's revision.
//! - Progress notifications keep idle watch streams alive but do not move the resume point:
//!   etcd 3.4 can send them ahead of events (etcd #15220).

mod compactor;
mod members;
mod watch;
mod write;

use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use finale_etcd_rpc::etcdserverpb::{CompactionRequest, RangeRequest as EtcdRange};
use finale_etcd_rpc::tonic::Status;
use finale_etcd_rpc::{is_compacted, mvccpb, prefix_range_end};
use finale_store::{
    KeyValue, Precondition, RangeRequest, RangeResponse, Revision, Store, StoreError, StoreResult,
    WatchStream, WriteOp, WriteOutcome,
};
use tokio_util::sync::CancellationToken;

use members::Members;

/// What etcd answers (with `OutOfRange`) when asked for a revision it has not reached.
const FUTURE_REVISION_MESSAGE: &str = "etcdserver: mvcc: required revision is a future revision";

/// PEM material for TLS to etcd.
#[derive(Clone, Debug, Default)]
pub struct EtcdTls {
    /// CA bundle that signs etcd's serving certificates (`--etcd-cafile`).
    pub ca_pem: Option<Vec<u8>>,
    /// Client certificate and key (`--etcd-certfile`, `--etcd-keyfile`).
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl EtcdTls {
    /// Reads the files named by kube-apiserver's flags.
    pub fn from_files(
        ca: Option<&PathBuf>,
        cert: Option<&PathBuf>,
        key: Option<&PathBuf>,
    ) -> Result<EtcdTls, String> {
        let read = |path: &PathBuf, flag: &str| {
            std::fs::read(path).map_err(|e| format!("cannot read {flag} {}: {e}", path.display()))
        };
        let identity = match (cert, key) {
            (Some(cert), Some(key)) => {
                Some((read(cert, "--etcd-certfile")?, read(key, "--etcd-keyfile")?))
            }
            (None, None) => None,
            _ => {
                return Err("--etcd-certfile and --etcd-keyfile must be given together".to_string());
            }
        };
        Ok(EtcdTls {
            ca_pem: ca.map(|ca| read(ca, "--etcd-cafile")).transpose()?,
            identity,
        })
    }
}

/// How to reach etcd and how long to keep trying.
#[derive(Clone, Debug)]
pub struct EtcdStoreOptions {
    /// Client URLs of the members (`--etcd-servers`).
    pub endpoints: Vec<String>,
    /// Root of Finale's keys (`--etcd-prefix`).
    pub prefix: Vec<u8>,
    pub tls: Option<EtcdTls>,
    /// How long one call keeps retrying while etcd is unavailable.
    pub call_deadline: Duration,
    /// How long one attempt may wait for an answer.
    pub attempt_timeout: Duration,
    pub connect_timeout: Duration,
    /// How often failed members are probed.
    pub probe_interval: Duration,
}

/// The default root prefix: `/finale`, not kube's `/registry`, so that a Finale never reads
/// or writes a kube-apiserver's objects by accident.
pub const DEFAULT_PREFIX: &str = "/finale";

impl EtcdStoreOptions {
    pub fn new(endpoints: Vec<String>) -> EtcdStoreOptions {
        EtcdStoreOptions {
            endpoints,
            prefix: DEFAULT_PREFIX.as_bytes().to_vec(),
            tls: None,
            call_deadline: Duration::from_secs(10),
            attempt_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            probe_interval: Duration::from_secs(1),
        }
    }
}

/// A [`Store`] kept in etcd. See the crate docs.
pub struct EtcdStore {
    members: Arc<Members>,
    prefix: Vec<u8>,
    /// The highest compaction point seen (our compactions, or etcd's watch cancels).
    compacted: AtomicI64,
    closed: CancellationToken,
}

impl Drop for EtcdStore {
    fn drop(&mut self) {
        self.closed.cancel();
    }
}

impl EtcdStore {
    /// Sets up the channels and checks that etcd answers, within the call deadline. A member
    /// that is down is not an error as long as one answers.
    pub async fn connect(options: EtcdStoreOptions) -> Result<Arc<EtcdStore>, String> {
        let closed = CancellationToken::new();
        let members = Members::new(&options, closed.clone())?;
        let store = Arc::new(EtcdStore {
            members,
            prefix: options.prefix.clone(),
            compacted: AtomicI64::new(0),
            closed,
        });
        store
            .current_revision()
            .await
            .map_err(|e| format!("etcd at {}: {e}", options.endpoints.join(",")))?;
        Ok(store)
    }

    /// Ends watches and refuses further calls.
    pub fn close(&self) {
        self.closed.cancel();
    }

    /// The readiness check: one linearizable read of `<prefix>/health` within `timeout`
    /// (kube-apiserver's `etcd` check reads `<prefix>/health` too).
    pub async fn check_health(&self, timeout: Duration) -> Result<(), String> {
        match tokio::time::timeout(timeout, self.get(b"/health")).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(error)) => Err(error.to_string()),
            Err(_) => Err(format!("etcd did not answer a read within {timeout:?}")),
        }
    }

    fn full_key(&self, key: &[u8]) -> Vec<u8> {
        let mut full = Vec::with_capacity(self.prefix.len() + key.len());
        full.extend_from_slice(&self.prefix);
        full.extend_from_slice(key);
        full
    }

    /// etcd's `(key, range_end)` for a `[start, end)` range of Finale keys (an empty end
    /// meaning "to the end").
    fn etcd_range(&self, range: &Range<Vec<u8>>) -> (Vec<u8>, Vec<u8>) {
        let mut start = self.full_key(&range.start);
        if start.is_empty() {
            // etcd refuses an empty key; "\0" is the smallest one.
            start = vec![0];
        }
        let end = if range.end.is_empty() {
            prefix_range_end(&self.prefix)
        } else {
            self.full_key(&range.end)
        };
        (start, end)
    }

    /// A key read from etcd, with the prefix taken off.
    fn finale_kv(&self, kv: mvccpb::KeyValue) -> KeyValue {
        watch::strip(&self.prefix, kv)
    }

    fn closed_check(&self) -> StoreResult<()> {
        if self.closed.is_cancelled() {
            Err(StoreError::Closed)
        } else {
            Ok(())
        }
    }

    async fn range_raw(
        &self,
        what: &str,
        request: EtcdRange,
    ) -> StoreResult<Result<finale_etcd_rpc::etcdserverpb::RangeResponse, Status>> {
        self.members
            .call(what, |client| {
                let request = request.clone();
                async move { Ok(client.kv().range(request).await?.into_inner()) }
            })
            .await
    }

    /// Whether history at `revision` can still be read (`Ok(false)`: compacted).
    async fn readable_at(&self, revision: Revision) -> StoreResult<bool> {
        let (key, range_end) = self.etcd_range(&(Vec::new()..Vec::new()));
        let request = EtcdRange {
            key,
            range_end,
            revision,
            count_only: true,
            ..Default::default()
        };
        match self.range_raw("a read at an old revision", request).await? {
            Ok(_) => Ok(true),
            Err(status) if is_compacted(&status) => Ok(false),
            Err(status) if is_future(&status) => Ok(true),
            Err(status) => Err(unexpected("a read at an old revision", &status)),
        }
    }

    /// Notes a compaction point learnt from etcd.
    fn saw_compaction(&self, revision: Revision) {
        self.compacted.fetch_max(revision, Ordering::Relaxed);
    }

    /// The error for a read at `requested`, which etcd refused as compacted.
    async fn compacted_error(&self, requested: Revision) -> StoreError {
        match self.compacted_revision().await {
            Ok(compacted) => StoreError::Compacted {
                requested,
                compacted,
            },
            Err(error) => error,
        }
    }

    async fn future_error(&self, requested: Revision) -> StoreError {
        match self.current_revision().await {
            Ok(current) => StoreError::FutureRevision { requested, current },
            Err(error) => error,
        }
    }
}

fn is_future(status: &Status) -> bool {
    status.code() == finale_etcd_rpc::tonic::Code::OutOfRange
        && status.message() == FUTURE_REVISION_MESSAGE
}

/// An answer from etcd this adapter does not expect (a bug, or a misconfigured etcd).
fn unexpected(what: &str, status: &Status) -> StoreError {
    StoreError::Backend(format!(
        "etcd refused {what}: {}",
        members::describe(status)
    ))
}

fn header_revision(
    header: Option<finale_etcd_rpc::etcdserverpb::ResponseHeader>,
) -> StoreResult<Revision> {
    header
        .map(|header| header.revision)
        .ok_or_else(|| StoreError::Backend("etcd answered without a response header".into()))
}

#[async_trait]
impl Store for EtcdStore {
    async fn get(&self, key: &[u8]) -> StoreResult<(Option<KeyValue>, Revision)> {
        self.closed_check()?;
        let request = EtcdRange {
            key: self.full_key(key),
            ..Default::default()
        };
        let response = self
            .range_raw("a read", request)
            .await?
            .map_err(|status| unexpected("a read", &status))?;
        let revision = header_revision(response.header)?;
        let kv = response.kvs.into_iter().next().map(|kv| self.finale_kv(kv));
        Ok((kv, revision))
    }

    async fn range(&self, request: RangeRequest) -> StoreResult<RangeResponse> {
        self.closed_check()?;
        let (key, range_end) = self.etcd_range(&request.range);
        let etcd_request = EtcdRange {
            key,
            range_end,
            limit: request.limit as i64,
            revision: request.revision,
            ..Default::default()
        };
        match self.range_raw("a range read", etcd_request).await? {
            Ok(response) => {
                let header = header_revision(response.header)?;
                Ok(RangeResponse {
                    kvs: response
                        .kvs
                        .into_iter()
                        .map(|kv| self.finale_kv(kv))
                        .collect(),
                    more: response.more,
                    revision: if request.revision > 0 {
                        request.revision
                    } else {
                        header
                    },
                })
            }
            Err(status) if is_compacted(&status) => {
                Err(self.compacted_error(request.revision).await)
            }
            Err(status) if is_future(&status) => Err(self.future_error(request.revision).await),
            Err(status) => Err(unexpected("a range read", &status)),
        }
    }

    async fn write(&self, op: WriteOp, precondition: Precondition) -> StoreResult<WriteOutcome> {
        self.closed_check()?;
        write::write(self, op, precondition).await
    }

    async fn write_all_guarded(
        &self,
        writes: Vec<(WriteOp, Precondition)>,
        guards: Vec<finale_store::Guard>,
    ) -> StoreResult<finale_store::TxnOutcome> {
        self.closed_check()?;
        write::write_all(self, writes, guards).await
    }

    async fn watch(
        &self,
        range: Range<Vec<u8>>,
        after_revision: Revision,
    ) -> StoreResult<WatchStream> {
        self.closed_check()?;
        watch::watch(self, range, after_revision).await
    }

    async fn current_revision(&self) -> StoreResult<Revision> {
        self.closed_check()?;
        let request = EtcdRange {
            key: self.full_key(b""),
            count_only: true,
            ..Default::default()
        };
        let mut request = request;
        if request.key.is_empty() {
            request.key = vec![0];
        }
        let response = self
            .range_raw("a read of the current revision", request)
            .await?
            .map_err(|status| unexpected("a read of the current revision", &status))?;
        header_revision(response.header)
    }

    async fn compacted_revision(&self) -> StoreResult<Revision> {
        self.closed_check()?;
        // etcd 3.4 reports its compaction point only in a watch cancel; find the lowest
        // revision a read still succeeds at, starting from the last one we know of (usually
        // still right: one read).
        let known = self.compacted.load(Ordering::Relaxed);
        if self.readable_at(known.max(1)).await? {
            return Ok(known);
        }
        let mut unreadable = known.max(1);
        let mut readable = self.current_revision().await?;
        while readable - unreadable > 1 {
            let middle = unreadable + (readable - unreadable) / 2;
            if self.readable_at(middle).await? {
                readable = middle;
            } else {
                unreadable = middle;
            }
        }
        self.saw_compaction(readable);
        Ok(self.compacted.load(Ordering::Relaxed))
    }

    async fn compact(&self, revision: Revision) -> StoreResult<()> {
        self.closed_check()?;
        let answer = self
            .members
            .call("a compaction", |client| async move {
                client
                    .kv()
                    .compact(CompactionRequest {
                        revision,
                        physical: false,
                    })
                    .await
                    .map(|_| ())
            })
            .await?;
        match answer {
            Ok(()) => {
                self.saw_compaction(revision);
                Ok(())
            }
            Err(status) if is_compacted(&status) => Err(self.compacted_error(revision).await),
            Err(status) if is_future(&status) => Err(self.future_error(revision).await),
            Err(status) => Err(unexpected("a compaction", &status)),
        }
    }
}

pub use compactor::COMPACT_REV_KEY;
