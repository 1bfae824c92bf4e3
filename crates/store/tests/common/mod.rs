//! Helpers shared by the store's integration tests.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use finale_store::{
    KeyValue, Precondition, RedbStore, RedbStoreOptions, Revision, Store, StoreError, StoreHealth,
    WatchEvent, WatchStream, WriteOp, WriteOutcome, WriteResult,
};
use futures::StreamExt;

pub fn open(dir: &Path) -> Arc<RedbStore> {
    RedbStore::open(dir, RedbStoreOptions::default()).expect("open store")
}

pub fn open_with(dir: &Path, options: RedbStoreOptions) -> Arc<RedbStore> {
    RedbStore::open(dir, options).expect("open store")
}

pub async fn put(
    store: &RedbStore,
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

pub async fn delete(store: &RedbStore, key: &str, precondition: Precondition) -> WriteOutcome {
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
pub async fn set(store: &RedbStore, key: &str, value: &str) -> WriteResult {
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

/// Waits (bounded: 20 s) until the store accepts writes again after a failure, which it
/// notices by itself (it retries with backoff).
pub async fn wait_until_serving(store: &RedbStore) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while store.health() != StoreHealth::Serving {
        assert!(
            Instant::now() < deadline,
            "the store did not recover within 20 s: {:?}",
            store.health()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
