//! The backends the conformance suite runs against, behind one [`Fixture`], and helpers the
//! cases share.
//!
//! A fixture's store starts empty at revision `base` with history compacted to `base`: 0
//! for redb; for etcd, whatever revision the member (or the cases before, on a shared member)
//! reached. Cases express every revision as `base + n`.

use std::sync::Arc;
use std::time::Duration;

use finale_e2e::Etcd;
use finale_store::{
    KeyValue, Precondition, RedbStore, RedbStoreOptions, Revision, Store, StoreError, WatchEvent,
    WatchStream, WriteOp, WriteOutcome, WriteResult,
};
use finale_store_etcd::{EtcdStore, EtcdStoreOptions};
use futures::StreamExt;

enum Backend {
    Redb {
        dir: tempfile::TempDir,
        options: RedbStoreOptions,
    },
    Etcd {
        /// Keeps the member running as long as the fixture.
        _etcd: Arc<Etcd>,
        options: EtcdStoreOptions,
    },
}

pub struct Fixture {
    pub store: Arc<dyn Store>,
    pub base: Revision,
    backend: Backend,
}

impl Fixture {
    /// Revision `n` of this fixture's history.
    pub fn r(&self, n: i64) -> Revision {
        self.base + n
    }

    /// Closes the store and opens it again on the same data: redb reopens its file, etcd
    /// connects a new client.
    pub async fn reopen(&mut self) {
        let (store, _) = match &self.backend {
            Backend::Redb { dir, options } => {
                // The old store must let go of the file first.
                self.store = Arc::new(NoStore);
                open_redb(dir.path(), options.clone())
            }
            Backend::Etcd { options, .. } => (connect(options.clone()).await, 0),
        };
        self.store = store;
    }
}

fn open_redb(dir: &std::path::Path, options: RedbStoreOptions) -> (Arc<dyn Store>, Revision) {
    let store: Arc<dyn Store> = RedbStore::open(dir, options).expect("open redb store");
    (store, 0)
}

pub fn redb_with(options: RedbStoreOptions) -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, base) = open_redb(dir.path(), options.clone());
    Fixture {
        store,
        base,
        backend: Backend::Redb { dir, options },
    }
}

pub async fn redb() -> Fixture {
    redb_with(RedbStoreOptions::default())
}

/// A fresh single-member etcd (data on /dev/shm, own ports and cluster token).
pub async fn start_etcd() -> Arc<Etcd> {
    Arc::new(
        tokio::task::spawn_blocking(Etcd::start_in_memory)
            .await
            .expect("etcd start task")
            .expect("start etcd"),
    )
}

async fn connect(options: EtcdStoreOptions) -> Arc<dyn Store> {
    let store: Arc<dyn Store> = EtcdStore::connect(options).await.expect("connect to etcd");
    store
}

/// A fixture under `prefix` of an etcd that may have served other fixtures before.
pub async fn etcd_on(etcd: Arc<Etcd>, prefix: &str) -> Fixture {
    let mut options = EtcdStoreOptions::new(vec![etcd.endpoint.clone()]);
    options.prefix = prefix.as_bytes().to_vec();
    let store = connect(options.clone()).await;
    let base = store.current_revision().await.expect("current revision");
    // Compacted to `base`, as redb's fresh store is to 0 (a case before may have done it).
    match store.compact(base).await {
        Ok(()) | Err(StoreError::Compacted { .. }) => {}
        Err(other) => panic!("compact a fresh etcd fixture: {other}"),
    }
    assert_eq!(store.compacted_revision().await.expect("compacted"), base);
    Fixture {
        store,
        base,
        backend: Backend::Etcd {
            _etcd: etcd,
            options,
        },
    }
}

pub async fn etcd() -> Fixture {
    etcd_on(start_etcd().await, "/conformance").await
}

/// Stands in for a store while a redb file is reopened.
struct NoStore;

#[async_trait::async_trait]
impl Store for NoStore {
    async fn get(&self, _: &[u8]) -> finale_store::StoreResult<(Option<KeyValue>, Revision)> {
        Err(StoreError::Closed)
    }
    async fn range(
        &self,
        _: finale_store::RangeRequest,
    ) -> finale_store::StoreResult<finale_store::RangeResponse> {
        Err(StoreError::Closed)
    }
    async fn write(&self, _: WriteOp, _: Precondition) -> finale_store::StoreResult<WriteOutcome> {
        Err(StoreError::Closed)
    }
    async fn write_all_guarded(
        &self,
        _: Vec<(WriteOp, Precondition)>,
        _: Vec<finale_store::Guard>,
    ) -> finale_store::StoreResult<finale_store::TxnOutcome> {
        Err(StoreError::Closed)
    }
    async fn watch(
        &self,
        _: std::ops::Range<Vec<u8>>,
        _: Revision,
    ) -> finale_store::StoreResult<WatchStream> {
        Err(StoreError::Closed)
    }
    async fn current_revision(&self) -> finale_store::StoreResult<Revision> {
        Err(StoreError::Closed)
    }
    async fn compacted_revision(&self) -> finale_store::StoreResult<Revision> {
        Err(StoreError::Closed)
    }
    async fn compact(&self, _: Revision) -> finale_store::StoreResult<()> {
        Err(StoreError::Closed)
    }
}

pub async fn put(
    store: &dyn Store,
    key: &str,
    value: &str,
    precondition: Precondition,
) -> WriteOutcome {
    store
        .write(
            WriteOp::Put {
                key: key.as_bytes().to_vec(),
                value: value.as_bytes().to_vec(),
            },
            precondition,
        )
        .await
        .expect("put")
}

pub async fn delete(store: &dyn Store, key: &str, precondition: Precondition) -> WriteOutcome {
    store
        .write(
            WriteOp::Delete {
                key: key.as_bytes().to_vec(),
            },
            precondition,
        )
        .await
        .expect("delete")
}

/// Puts unconditionally and returns the result, which must be committed.
pub async fn set(store: &dyn Store, key: &str, value: &str) -> WriteResult {
    committed(put(store, key, value, Precondition::None).await)
}

pub fn committed(outcome: WriteOutcome) -> WriteResult {
    match outcome {
        WriteOutcome::Committed(result) => result,
        other => panic!("expected a committed write, got {other:?}"),
    }
}

pub fn kv(key: &str, value: &str, create: Revision, modified: Revision, version: i64) -> KeyValue {
    KeyValue {
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
        create_revision: create,
        mod_revision: modified,
        version,
    }
}

/// The next watch item, failing the test if none comes within a few seconds.
pub async fn next_item(stream: &mut WatchStream) -> Option<Result<WatchEvent, StoreError>> {
    tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("watch event within 10 s")
}

pub async fn next_event(stream: &mut WatchStream) -> WatchEvent {
    next_item(stream)
        .await
        .expect("watch stream ended")
        .expect("watch event")
}
