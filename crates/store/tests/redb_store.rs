//! Behaviour specific to the redb engine: its options (watch buffer, compaction chunks,
//! retention), reopening its file, closing. What every backend shares is tested once for
//! redb and etcd alike in `crates/store-etcd/tests/conformance`.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use finale_store::{Precondition, RangeRequest, RedbStore, RedbStoreOptions, Store, StoreError};

fn range_all(revision: i64) -> RangeRequest {
    RangeRequest {
        range: Vec::new()..Vec::new(),
        limit: 0,
        revision,
    }
}

#[tokio::test]
async fn slow_watcher_is_dropped_with_watch_lagged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_with(
        dir.path(),
        RedbStoreOptions {
            watch_buffer: 2,
            durable_commits: false,
            ..Default::default()
        },
    );
    let mut watch = store.watch(Vec::new()..Vec::new(), 0).await.expect("watch");
    set(&store, "a", "1").await;
    assert_eq!(next_event(&mut watch).await.revision(), 1);
    for i in 0..10 {
        set(&store, "a", &i.to_string()).await;
    }
    let mut last = 1;
    loop {
        match next_item(&mut watch).await {
            Some(Ok(event)) => last = event.revision(),
            Some(Err(StoreError::WatchLagged { revision })) => {
                assert_eq!(revision, last, "complete through the last event delivered");
                break;
            }
            other => panic!("expected WatchLagged, got {other:?}"),
        }
    }
    assert!(next_item(&mut watch).await.is_none());
    // Re-watching from there delivers the rest.
    let mut again = store
        .watch(Vec::new()..Vec::new(), last)
        .await
        .expect("watch");
    assert_eq!(next_event(&mut again).await.revision(), last + 1);
}

#[tokio::test]
async fn close_ends_watches_and_refuses_requests() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    set(&store, "a", "1").await;
    let mut watch = store.watch(Vec::new()..Vec::new(), 1).await.expect("watch");
    store.close().await;
    assert!(matches!(
        next_item(&mut watch).await,
        Some(Err(StoreError::Closed))
    ));
    assert!(next_item(&mut watch).await.is_none());
    assert!(matches!(
        store
            .write(
                finale_store::WriteOp::Put {
                    key: b"a".to_vec(),
                    value: b"2".to_vec()
                },
                Precondition::None
            )
            .await,
        Err(StoreError::Closed)
    ));
    assert!(matches!(store.get(b"a").await, Err(StoreError::Closed)));
    store.close().await; // idempotent
    drop(store);
    // The file is released: it can be opened again.
    let store = open(dir.path());
    assert_eq!(store.current_revision().await.expect("revision"), 1);
}

#[tokio::test]
async fn dropping_the_store_ends_watches_and_releases_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    set(&store, "a", "1").await;
    let mut watch = store.watch(Vec::new()..Vec::new(), 0).await.expect("watch");
    assert_eq!(next_event(&mut watch).await.revision(), 1);
    drop(store);
    assert!(matches!(
        next_item(&mut watch).await,
        Some(Err(StoreError::Closed))
    ));
    // The open watch does not keep the file open.
    let store = open(dir.path());
    assert_eq!(store.current_revision().await.expect("revision"), 1);
}

#[tokio::test]
async fn background_compactor_applies_retention() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store: Arc<RedbStore> = open_with(
        dir.path(),
        RedbStoreOptions {
            durable_commits: false,
            retention_period: Duration::from_millis(100),
            retention_revisions: 5,
            compaction_interval: Duration::from_millis(20),
            ..Default::default()
        },
    );
    for i in 0..20 {
        set(&store, "a", &i.to_string()).await;
    }
    let compactor = store.start_compactor();
    let deadline = Instant::now() + Duration::from_secs(5);
    // The 100 ms window would allow compacting to 20; the revision floor keeps the last 5.
    while store.compacted_revision().await.expect("compacted") != 15 {
        assert!(Instant::now() < deadline, "compactor did not reach 15");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        store.range(range_all(15)).await.expect("range").kvs,
        [kv("a", "14", 1, 15, 15)]
    );
    // The task stops with the store.
    drop(store);
    tokio::time::timeout(Duration::from_secs(5), compactor)
        .await
        .expect("compactor stops")
        .expect("compactor task");
}

#[tokio::test]
async fn compaction_in_chunks_survives_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_with(
        dir.path(),
        RedbStoreOptions {
            compaction_chunk: 2,
            ..Default::default()
        },
    );
    set(&store, "a", "1").await; // 1
    set(&store, "b", "1").await; // 2
    set(&store, "a", "2").await; // 3
    committed(delete(&store, "b", Precondition::None).await); // 4
    set(&store, "a", "3").await; // 5
    set(&store, "c", "1").await; // 6
    store.compact(4).await.expect("compact");
    store.compact(6).await.expect("compact");
    assert_eq!(
        store.range(range_all(6)).await.expect("range").kvs,
        [kv("a", "3", 1, 5, 3), kv("c", "1", 6, 6, 1)]
    );
    drop(store);
    let store = open(dir.path());
    assert_eq!(store.compacted_revision().await.expect("compacted"), 6);
    assert_eq!(store.current_revision().await.expect("revision"), 6);
    assert!(matches!(
        store.range(range_all(5)).await,
        Err(StoreError::Compacted {
            requested: 5,
            compacted: 6
        })
    ));
}

#[tokio::test]
async fn a_path_ending_in_redb_is_the_file_itself() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("other.redb");
    let store = open(&file);
    set(&store, "x", "1").await;
    drop(store);
    assert!(file.is_file());
    assert_eq!(open(&file).current_revision().await.expect("revision"), 1);
}

fn put_op(key: &str, value: &str) -> finale_store::WriteOp {
    finale_store::WriteOp::Put {
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
    }
}

#[tokio::test]
async fn write_all_commits_every_write_or_none_and_survives_reopen() {
    use finale_store::{TxnOutcome, WriteOp};
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let store = open(dir.path());
        set(&store, "object", "v1").await;
        let mut watch = store.watch(Vec::new()..Vec::new(), 1).await.expect("watch");

        // One precondition fails: nothing is written, and every key's state is reported.
        let refused = store
            .write_all(vec![
                (put_op("side", "s1"), Precondition::MustNotExist),
                (put_op("object", "v2"), Precondition::ModRevision(7)),
            ])
            .await
            .expect("write_all");
        assert_eq!(
            refused,
            TxnOutcome::PreconditionFailed {
                current: vec![None, Some(kv("object", "v1", 1, 1, 1))]
            }
        );
        assert_eq!(store.get(b"side").await.expect("get"), (None, 1));

        // Both hold: committed with consecutive revisions, the last one the store's.
        let TxnOutcome::Committed(results) = store
            .write_all(vec![
                (put_op("side", "s1"), Precondition::MustNotExist),
                (put_op("object", "v2"), Precondition::ModRevision(1)),
            ])
            .await
            .expect("write_all")
        else {
            panic!("expected the transaction to commit");
        };
        assert_eq!(
            results.iter().map(|r| r.revision).collect::<Vec<_>>(),
            [2, 3]
        );
        assert_eq!(store.current_revision().await.expect("revision"), 3);
        assert_eq!(next_event(&mut watch).await.revision(), 2);
        assert_eq!(next_event(&mut watch).await.revision(), 3);

        // A delete of a missing key fails the whole transaction, as a single delete would.
        let refused = store
            .write_all(vec![
                (
                    WriteOp::Delete {
                        key: b"missing".to_vec(),
                    },
                    Precondition::None,
                ),
                (put_op("object", "v3"), Precondition::None),
            ])
            .await
            .expect("write_all");
        assert!(matches!(refused, TxnOutcome::PreconditionFailed { .. }));

        // The same key twice is refused outright.
        let twice = store
            .write_all(vec![
                (put_op("object", "a"), Precondition::None),
                (put_op("object", "b"), Precondition::None),
            ])
            .await;
        assert!(matches!(twice, Err(StoreError::Backend(_))), "{twice:?}");
        assert_eq!(store.current_revision().await.expect("revision"), 3);
    }
    let store = open(dir.path());
    assert_eq!(store.current_revision().await.expect("revision"), 3);
    assert_eq!(
        store.get(b"side").await.expect("get").0,
        Some(kv("side", "s1", 2, 2, 1))
    );
    assert_eq!(
        store.get(b"object").await.expect("get").0,
        Some(kv("object", "v2", 1, 3, 2))
    );
}

/// `last_change_in` reads the change log backwards: the newest change in the range at or
/// below the revision asked about, deletes included, nothing above it; and "cannot tell"
/// once the answer would lie below the compacted revision.
#[tokio::test]
async fn last_change_in_names_the_newest_change_of_a_range_at_a_revision() {
    use finale_store::prefix_range;
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let objects = || prefix_range(b"/registry/");
    set(&store, "/registry/a", "1").await; // 1
    set(&store, "/finale/side", "1").await; // 2
    set(&store, "/registry/b", "1").await; // 3
    set(&store, "/finale/side", "2").await; // 4
    set(&store, "/finale/side", "3").await; // 5
    let last = |revision| {
        let store = Arc::clone(&store);
        async move {
            store
                .last_change_in(objects(), revision)
                .await
                .expect("last change")
        }
    };
    assert_eq!(
        last(5).await,
        Some(3),
        "side-key writes above it are not changes of the range"
    );
    assert_eq!(last(0).await, Some(3), "0 means the latest revision");
    assert_eq!(
        last(2).await,
        Some(1),
        "nothing above the revision asked about"
    );
    delete(&store, "/registry/a", Precondition::None).await; // 6
    assert_eq!(last(6).await, Some(6), "a delete is a change");
    assert_eq!(
        store
            .last_change_in(prefix_range(b"/nothing/"), 6)
            .await
            .expect("last change"),
        None,
        "a range that never changed"
    );
    assert!(matches!(
        store.last_change_in(objects(), 7).await,
        Err(StoreError::FutureRevision { .. })
    ));
    store.compact(5).await.expect("compact");
    set(&store, "/finale/side", "4").await; // 7
    assert_eq!(last(7).await, Some(6));
    set(&store, "/finale/side", "5").await; // 8
    assert_eq!(
        store
            .last_change_in(prefix_range(b"/registry/b"), 8)
            .await
            .expect("last change"),
        None,
        "its change (3) is below the compacted revision: unknown"
    );
}
