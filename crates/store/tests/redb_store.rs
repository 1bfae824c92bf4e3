//! Behaviour of the redb engine through the `Store` trait.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use finale_store::{
    EventKind, Precondition, RangeRequest, RedbStore, RedbStoreOptions, Store, StoreError,
    WriteOutcome, prefix_range,
};

fn range_all(revision: i64) -> RangeRequest {
    RangeRequest {
        range: Vec::new()..Vec::new(),
        limit: 0,
        revision,
    }
}

fn keys(response: &finale_store::RangeResponse) -> Vec<String> {
    response
        .kvs
        .iter()
        .map(|kv| String::from_utf8(kv.key.clone()).expect("utf-8 key"))
        .collect()
}

#[tokio::test]
async fn put_get_and_per_key_revisions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    assert_eq!(store.current_revision().await.expect("revision"), 0);
    assert_eq!(store.get(b"a").await.expect("get"), (None, 0));

    let first = set(&store, "a", "1").await;
    assert_eq!(first.revision, 1);
    assert_eq!(first.current, Some(kv("a", "1", 1, 1, 1)));
    assert_eq!(first.previous, None);

    set(&store, "b", "x").await;
    let second = set(&store, "a", "2").await;
    assert_eq!(second.revision, 3);
    assert_eq!(second.current, Some(kv("a", "2", 1, 3, 2)));
    assert_eq!(second.previous, Some(kv("a", "1", 1, 1, 1)));

    assert_eq!(
        store.get(b"a").await.expect("get"),
        (Some(kv("a", "2", 1, 3, 2)), 3)
    );
    assert_eq!(store.get(b"zzz").await.expect("get"), (None, 3));
    assert_eq!(store.current_revision().await.expect("revision"), 3);
}

#[tokio::test]
async fn create_only_conflicts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let created = committed(put(&store, "a", "1", Precondition::MustNotExist).await);
    assert_eq!(created.revision, 1);

    let again = put(&store, "a", "2", Precondition::MustNotExist).await;
    assert_eq!(
        again,
        WriteOutcome::PreconditionFailed {
            current: Some(kv("a", "1", 1, 1, 1))
        }
    );
    // `ModRevision(0)` is etcd's spelling of "must not exist".
    assert_eq!(
        put(&store, "a", "2", Precondition::ModRevision(0)).await,
        WriteOutcome::PreconditionFailed {
            current: Some(kv("a", "1", 1, 1, 1))
        }
    );
    assert_eq!(
        committed(put(&store, "b", "1", Precondition::ModRevision(0)).await).revision,
        2
    );
    // MustExist on a missing key.
    assert_eq!(
        put(&store, "c", "1", Precondition::MustExist).await,
        WriteOutcome::PreconditionFailed { current: None }
    );
    // Failed preconditions consume no revision.
    assert_eq!(store.current_revision().await.expect("revision"), 2);
    assert_eq!(
        committed(put(&store, "a", "3", Precondition::MustExist).await).revision,
        3
    );
}

#[tokio::test]
async fn compare_and_swap_on_mod_revision() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    set(&store, "a", "1").await;
    set(&store, "a", "2").await;

    let stale = put(&store, "a", "3", Precondition::ModRevision(1)).await;
    assert_eq!(
        stale,
        WriteOutcome::PreconditionFailed {
            current: Some(kv("a", "2", 1, 2, 2))
        }
    );
    let swapped = committed(put(&store, "a", "3", Precondition::ModRevision(2)).await);
    assert_eq!(swapped.revision, 3);
    assert_eq!(swapped.current, Some(kv("a", "3", 1, 3, 3)));
    // CAS on a missing key fails with `current: None`.
    assert_eq!(
        put(&store, "missing", "1", Precondition::ModRevision(3)).await,
        WriteOutcome::PreconditionFailed { current: None }
    );
}

#[tokio::test]
async fn delete_then_recreate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    set(&store, "a", "1").await; // 1
    set(&store, "a", "2").await; // 2

    assert_eq!(
        delete(&store, "a", Precondition::ModRevision(1)).await,
        WriteOutcome::PreconditionFailed {
            current: Some(kv("a", "2", 1, 2, 2))
        }
    );
    let deleted = committed(delete(&store, "a", Precondition::ModRevision(2)).await);
    assert_eq!(deleted.revision, 3);
    assert_eq!(deleted.current, None);
    assert_eq!(deleted.previous, Some(kv("a", "2", 1, 2, 2)));
    assert_eq!(store.get(b"a").await.expect("get"), (None, 3));

    // Deleting what is not there writes nothing, whatever the precondition.
    assert_eq!(
        delete(&store, "a", Precondition::None).await,
        WriteOutcome::PreconditionFailed { current: None }
    );
    assert_eq!(store.current_revision().await.expect("revision"), 3);

    // A new incarnation: fresh create_revision and version.
    let recreated = committed(put(&store, "a", "new", Precondition::MustNotExist).await);
    assert_eq!(recreated.current, Some(kv("a", "new", 4, 4, 1)));
    assert_eq!(recreated.previous, None);
    let updated = set(&store, "a", "newer").await;
    assert_eq!(updated.current, Some(kv("a", "newer", 4, 5, 2)));
}

#[tokio::test]
async fn range_with_limit_and_more() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_with(
        dir.path(),
        RedbStoreOptions {
            durable_commits: false,
            ..Default::default()
        },
    );
    for i in 0..10 {
        set(&store, &format!("/pods/{i}"), "v").await;
    }
    set(&store, "/pods", "not in the prefix").await;
    set(&store, "/podsx", "not in the prefix").await;
    set(&store, "/services/a", "v").await;

    let request = |limit| RangeRequest {
        range: prefix_range(b"/pods/"),
        limit,
        revision: 0,
    };
    let limited = store.range(request(3)).await.expect("range");
    assert_eq!(keys(&limited), ["/pods/0", "/pods/1", "/pods/2"]);
    assert!(limited.more);
    assert_eq!(limited.revision, 13);

    let exact = store.range(request(10)).await.expect("range");
    assert_eq!(exact.kvs.len(), 10);
    assert!(!exact.more);
    let all = store.range(request(0)).await.expect("range");
    assert_eq!(all.kvs.len(), 10);
    assert!(!all.more);

    // An empty end means "to the end of the keyspace".
    let tail = store
        .range(RangeRequest {
            range: b"/podsx".to_vec()..Vec::new(),
            limit: 0,
            revision: 0,
        })
        .await
        .expect("range");
    assert_eq!(keys(&tail), ["/podsx", "/services/a"]);
    // An empty (or inverted) range.
    let empty = store
        .range(RangeRequest {
            range: b"/b".to_vec()..b"/a".to_vec(),
            limit: 0,
            revision: 0,
        })
        .await
        .expect("range");
    assert!(empty.kvs.is_empty());
    assert_eq!(
        store.range(range_all(0)).await.expect("range").kvs.len(),
        13
    );
}

#[tokio::test]
async fn range_at_older_revisions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    set(&store, "a", "1").await; // 1
    set(&store, "b", "1").await; // 2
    set(&store, "a", "2").await; // 3
    committed(delete(&store, "b", Precondition::None).await); // 4
    set(&store, "c", "1").await; // 5
    set(&store, "b", "again").await; // 6

    let at = |revision| store.range(range_all(revision));
    assert_eq!(at(1).await.expect("range").kvs, [kv("a", "1", 1, 1, 1)]);
    assert_eq!(
        at(2).await.expect("range").kvs,
        [kv("a", "1", 1, 1, 1), kv("b", "1", 2, 2, 1)]
    );
    assert_eq!(
        at(3).await.expect("range").kvs,
        [kv("a", "2", 1, 3, 2), kv("b", "1", 2, 2, 1)]
    );
    assert_eq!(at(4).await.expect("range").kvs, [kv("a", "2", 1, 3, 2)]);
    let at5 = at(5).await.expect("range");
    assert_eq!(at5.revision, 5);
    assert_eq!(at5.kvs, [kv("a", "2", 1, 3, 2), kv("c", "1", 5, 5, 1)]);
    assert_eq!(
        at(6).await.expect("range").kvs,
        [
            kv("a", "2", 1, 3, 2),
            kv("b", "again", 6, 6, 1),
            kv("c", "1", 5, 5, 1)
        ]
    );

    let limited = store
        .range(RangeRequest {
            range: Vec::new()..Vec::new(),
            limit: 1,
            revision: 3,
        })
        .await
        .expect("range");
    assert_eq!(limited.kvs, [kv("a", "2", 1, 3, 2)]);
    assert!(limited.more);

    match at(7).await {
        Err(StoreError::FutureRevision {
            requested: 7,
            current: 6,
        }) => {}
        other => panic!("expected FutureRevision, got {other:?}"),
    }
}

#[tokio::test]
async fn compaction_bounds_reads_and_watches() {
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
    let before: Vec<_> = futures::future::join_all((4..=6).map(|r| store.range(range_all(r))))
        .await
        .into_iter()
        .map(|r| r.expect("range"))
        .collect();

    store.compact(4).await.expect("compact");
    assert_eq!(store.compacted_revision().await.expect("compacted"), 4);

    match store.range(range_all(3)).await {
        Err(StoreError::Compacted {
            requested: 3,
            compacted: 4,
        }) => {}
        other => panic!("expected Compacted, got {other:?}"),
    }
    for (i, revision) in (4..=6).enumerate() {
        assert_eq!(
            store.range(range_all(revision)).await.expect("range"),
            before[i]
        );
    }

    // after_revision 3 still works (the first event is 4, whose prev_kv predates compaction).
    let mut watch = store.watch(Vec::new()..Vec::new(), 3).await.expect("watch");
    let event = next_event(&mut watch).await;
    assert_eq!(event.kind, EventKind::Delete);
    assert_eq!(event.revision(), 4);
    assert_eq!(event.prev_kv, Some(kv("b", "1", 2, 2, 1)));
    let event = next_event(&mut watch).await;
    assert_eq!(event.kv, kv("a", "3", 1, 5, 3));
    assert_eq!(event.prev_kv, Some(kv("a", "2", 1, 3, 2)));
    match store.watch(Vec::new()..Vec::new(), 2).await {
        Err(StoreError::Compacted {
            requested: 3,
            compacted: 4,
        }) => {}
        Err(other) => panic!("expected Compacted, got {other:?}"),
        Ok(_) => panic!("expected Compacted, got a stream"),
    }

    // As etcd: compacting at or below the compacted revision, or in the future, fails.
    assert!(matches!(
        store.compact(4).await,
        Err(StoreError::Compacted { .. })
    ));
    assert!(matches!(
        store.compact(7).await,
        Err(StoreError::FutureRevision { .. })
    ));
    // Compacting everything keeps the latest values.
    store.compact(6).await.expect("compact");
    assert_eq!(
        store.range(range_all(0)).await.expect("range").kvs,
        [kv("a", "3", 1, 5, 3), kv("c", "1", 6, 6, 1)]
    );
    assert_eq!(
        store.range(range_all(6)).await.expect("range").kvs,
        [kv("a", "3", 1, 5, 3), kv("c", "1", 6, 6, 1)]
    );
    let event = next_event(&mut watch).await;
    assert_eq!(event.revision(), 6);

    // The compacted revision survives a reopen.
    drop(watch);
    drop(store);
    let store = open(dir.path());
    assert_eq!(store.compacted_revision().await.expect("compacted"), 6);
    assert_eq!(store.current_revision().await.expect("revision"), 6);
}

#[tokio::test]
async fn watch_prev_kv_deletes_and_range_filter() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let mut live = store.watch(prefix_range(b"/a/"), 0).await.expect("watch");

    set(&store, "/a/1", "v1").await; // 1
    set(&store, "/b/1", "other").await; // 2
    set(&store, "/a/1", "v2").await; // 3
    committed(delete(&store, "/a/1", Precondition::None).await); // 4
    set(&store, "/a/2", "x").await; // 5

    // The same events, live and replayed from history.
    let mut replayed = store.watch(prefix_range(b"/a/"), 0).await.expect("watch");
    for stream in [&mut live, &mut replayed] {
        let e = next_event(stream).await;
        assert_eq!(
            (e.kind, e.kv.clone(), e.prev_kv),
            (EventKind::Put, kv("/a/1", "v1", 1, 1, 1), None)
        );
        let e = next_event(stream).await;
        assert_eq!(e.kind, EventKind::Put);
        assert_eq!(e.kv, kv("/a/1", "v2", 1, 3, 2));
        assert_eq!(e.prev_kv, Some(kv("/a/1", "v1", 1, 1, 1)));
        let e = next_event(stream).await;
        assert_eq!(e.kind, EventKind::Delete);
        assert_eq!(e.kv, kv("/a/1", "", 0, 4, 0));
        assert_eq!(e.prev_kv, Some(kv("/a/1", "v2", 1, 3, 2)));
        let e = next_event(stream).await;
        assert_eq!(e.kv, kv("/a/2", "x", 5, 5, 1));
    }

    // Watching from a later revision skips what came before.
    let mut later = store.watch(prefix_range(b"/a/"), 3).await.expect("watch");
    assert_eq!(next_event(&mut later).await.revision(), 4);
    // Watching from the future waits for it.
    let mut future = store.watch(Vec::new()..Vec::new(), 6).await.expect("watch");
    set(&store, "/c", "6").await;
    set(&store, "/c", "7").await;
    assert_eq!(next_event(&mut future).await.revision(), 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watch_replays_then_goes_live_without_gap_or_duplicate() {
    const TASKS: usize = 8;
    const WRITES: usize = 200;
    const TOTAL: i64 = (TASKS * WRITES) as i64;
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_with(
        dir.path(),
        RedbStoreOptions {
            // Small chunks, so the replay takes several snapshots while writers run.
            replay_chunk: 16,
            ..Default::default()
        },
    );

    let writers: Vec<_> = (0..TASKS)
        .map(|task| {
            let store = store.clone();
            tokio::spawn(async move {
                for i in 0..WRITES {
                    // Half the keys are rewritten, so prev_kv is exercised too.
                    let key = format!("/k/{task}/{}", i % 20);
                    set(&store, &key, &format!("{task}-{i}")).await;
                }
            })
        })
        .collect();

    // Start watchers midway, from old revisions.
    while store.current_revision().await.expect("revision") < TOTAL / 4 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let from = 10;
    let mut midway = store
        .watch(Vec::new()..Vec::new(), from)
        .await
        .expect("watch");
    let mut filtered = store.watch(prefix_range(b"/k/3/"), 0).await.expect("watch");

    let collect_all = tokio::spawn(async move {
        let mut seen = Vec::new();
        while seen.last().copied().unwrap_or(from) < TOTAL {
            let event = next_event(&mut midway).await;
            seen.push(event.revision());
        }
        seen
    });
    let collect_filtered = tokio::spawn(async move {
        let mut seen = Vec::new();
        while seen.len() < WRITES {
            let event = next_event(&mut filtered).await;
            assert!(event.kv.key.starts_with(b"/k/3/"));
            if let Some(prev) = &event.prev_kv {
                assert_eq!(prev.key, event.kv.key);
                assert!(prev.mod_revision < event.revision());
            }
            seen.push(event.revision());
        }
        seen
    });
    for writer in writers {
        writer.await.expect("writer");
    }
    let seen = collect_all.await.expect("watcher");
    let expected: Vec<i64> = (from + 1..=TOTAL).collect();
    assert_eq!(seen, expected);
    let seen = collect_filtered.await.expect("filtered watcher");
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "in order, no duplicate"
    );
    assert_eq!(seen.len(), WRITES);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn group_commit_acknowledges_concurrent_writers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let started = Instant::now();
    let writes = (0..64).map(|i| {
        let store = store.clone();
        tokio::spawn(async move { set(&store, &format!("/w/{i}"), "v").await.revision })
    });
    let mut revisions: Vec<i64> = futures::future::join_all(writes)
        .await
        .into_iter()
        .map(|r| r.expect("writer"))
        .collect();
    let elapsed = started.elapsed();
    revisions.sort_unstable();
    assert_eq!(revisions, (1..=64).collect::<Vec<_>>());
    assert_eq!(store.current_revision().await.expect("revision"), 64);
    assert_eq!(
        store
            .range(RangeRequest {
                range: prefix_range(b"/w/"),
                ..Default::default()
            })
            .await
            .expect("range")
            .kvs
            .len(),
        64
    );
    // 64 sequential fsyncs would take far longer; batching needs only a few.
    eprintln!("64 concurrent durable writes took {elapsed:?}");
}

#[tokio::test]
async fn data_survives_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let store = open(dir.path());
        set(&store, "a", "1").await;
        set(&store, "b", "2").await;
        set(&store, "a", "3").await;
        committed(delete(&store, "b", Precondition::None).await);
    }
    let store = open(dir.path());
    assert_eq!(store.current_revision().await.expect("revision"), 4);
    assert_eq!(
        store.get(b"a").await.expect("get"),
        (Some(kv("a", "3", 1, 3, 2)), 4)
    );
    assert_eq!(store.get(b"b").await.expect("get").0, None);
    assert_eq!(
        store.range(range_all(2)).await.expect("range").kvs,
        [kv("a", "1", 1, 1, 1), kv("b", "2", 2, 2, 1)]
    );
    let mut watch = store.watch(Vec::new()..Vec::new(), 0).await.expect("watch");
    for revision in 1..=4 {
        assert_eq!(next_event(&mut watch).await.revision(), revision);
    }
    assert_eq!(set(&store, "c", "5").await.revision, 5);
    assert_eq!(next_event(&mut watch).await.revision(), 5);

    // A path ending in .redb is the file itself.
    let file = dir.path().join("other.redb");
    let store = open(&file);
    set(&store, "x", "1").await;
    drop(store);
    assert!(file.is_file());
    assert_eq!(open(&file).current_revision().await.expect("revision"), 1);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_preconditions_see_earlier_writes_of_the_batch() {
    // Many concurrent create-only writes of one key land in few batches: exactly one wins,
    // the rest see its write, and no revision is consumed by the losers.
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let attempts = (0..32).map(|i| {
        let store = store.clone();
        tokio::spawn(async move {
            put(&store, "/lock", &i.to_string(), Precondition::MustNotExist).await
        })
    });
    let outcomes: Vec<_> = futures::future::join_all(attempts)
        .await
        .into_iter()
        .map(|r| r.expect("writer"))
        .collect();
    let winners: Vec<_> = outcomes
        .iter()
        .filter(|o| matches!(o, WriteOutcome::Committed(_)))
        .collect();
    assert_eq!(winners.len(), 1);
    let winner = committed(winners[0].clone()).current.expect("value");
    for outcome in &outcomes {
        if let WriteOutcome::PreconditionFailed { current } = outcome {
            assert_eq!(current.as_ref(), Some(&winner));
        }
    }
    assert_eq!(store.current_revision().await.expect("revision"), 1);
    let distinct: HashSet<_> = outcomes.iter().map(|o| format!("{o:?}")).collect();
    assert_eq!(distinct.len(), 2);
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
