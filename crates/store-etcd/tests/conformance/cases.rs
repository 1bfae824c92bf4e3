//! The behaviour every `Store` backend shares, one async function per case, each taking a
//! fresh [`Fixture`]. Revisions are `f.r(n)`: the n-th write of the case.

use std::collections::HashSet;
use std::time::Instant;

use finale_store::{
    EventKind, Precondition, RangeRequest, RangeResponse, StoreError, WriteOutcome, prefix_range,
};

use crate::harness::*;

fn range_all(revision: i64) -> RangeRequest {
    RangeRequest {
        range: Vec::new()..Vec::new(),
        limit: 0,
        revision,
    }
}

fn keys(response: &RangeResponse) -> Vec<String> {
    response
        .kvs
        .iter()
        .map(|kv| String::from_utf8(kv.key.clone()).expect("utf-8 key"))
        .collect()
}

pub async fn put_get_and_per_key_revisions(f: Fixture) {
    let store = &*f.store;
    assert_eq!(store.current_revision().await.expect("revision"), f.r(0));
    assert_eq!(store.get(b"a").await.expect("get"), (None, f.r(0)));

    let first = set(store, "a", "1").await;
    assert_eq!(first.revision, f.r(1));
    assert_eq!(first.current, Some(kv("a", "1", f.r(1), f.r(1), 1)));
    assert_eq!(first.previous, None);

    set(store, "b", "x").await;
    let second = set(store, "a", "2").await;
    assert_eq!(second.revision, f.r(3));
    assert_eq!(second.current, Some(kv("a", "2", f.r(1), f.r(3), 2)));
    assert_eq!(second.previous, Some(kv("a", "1", f.r(1), f.r(1), 1)));

    assert_eq!(
        store.get(b"a").await.expect("get"),
        (Some(kv("a", "2", f.r(1), f.r(3), 2)), f.r(3))
    );
    assert_eq!(store.get(b"zzz").await.expect("get"), (None, f.r(3)));
    assert_eq!(store.current_revision().await.expect("revision"), f.r(3));
}

pub async fn create_only_conflicts(f: Fixture) {
    let store = &*f.store;
    let created = committed(put(store, "a", "1", Precondition::MustNotExist).await);
    assert_eq!(created.revision, f.r(1));
    let a1 = Some(kv("a", "1", f.r(1), f.r(1), 1));

    let again = put(store, "a", "2", Precondition::MustNotExist).await;
    assert_eq!(
        again,
        WriteOutcome::PreconditionFailed {
            current: a1.clone()
        }
    );
    // `ModRevision(0)` is etcd's spelling of "must not exist".
    assert_eq!(
        put(store, "a", "2", Precondition::ModRevision(0)).await,
        WriteOutcome::PreconditionFailed { current: a1 }
    );
    assert_eq!(
        committed(put(store, "b", "1", Precondition::ModRevision(0)).await).revision,
        f.r(2)
    );
    // MustExist on a missing key.
    assert_eq!(
        put(store, "c", "1", Precondition::MustExist).await,
        WriteOutcome::PreconditionFailed { current: None }
    );
    // Failed preconditions consume no revision.
    assert_eq!(store.current_revision().await.expect("revision"), f.r(2));
    assert_eq!(
        committed(put(store, "a", "3", Precondition::MustExist).await).revision,
        f.r(3)
    );
}

pub async fn compare_and_swap_on_mod_revision(f: Fixture) {
    let store = &*f.store;
    set(store, "a", "1").await;
    set(store, "a", "2").await;

    let stale = put(store, "a", "3", Precondition::ModRevision(f.r(1))).await;
    assert_eq!(
        stale,
        WriteOutcome::PreconditionFailed {
            current: Some(kv("a", "2", f.r(1), f.r(2), 2))
        }
    );
    let swapped = committed(put(store, "a", "3", Precondition::ModRevision(f.r(2))).await);
    assert_eq!(swapped.revision, f.r(3));
    assert_eq!(swapped.current, Some(kv("a", "3", f.r(1), f.r(3), 3)));
    // CAS on a missing key fails with `current: None`.
    assert_eq!(
        put(store, "missing", "1", Precondition::ModRevision(f.r(3))).await,
        WriteOutcome::PreconditionFailed { current: None }
    );
}

pub async fn delete_then_recreate(f: Fixture) {
    let store = &*f.store;
    set(store, "a", "1").await; // 1
    set(store, "a", "2").await; // 2
    let a2 = kv("a", "2", f.r(1), f.r(2), 2);

    assert_eq!(
        delete(store, "a", Precondition::ModRevision(f.r(1))).await,
        WriteOutcome::PreconditionFailed {
            current: Some(a2.clone())
        }
    );
    let deleted = committed(delete(store, "a", Precondition::ModRevision(f.r(2))).await);
    assert_eq!(deleted.revision, f.r(3));
    assert_eq!(deleted.current, None);
    assert_eq!(deleted.previous, Some(a2));
    assert_eq!(store.get(b"a").await.expect("get"), (None, f.r(3)));

    // Deleting what is not there writes nothing, whatever the precondition.
    assert_eq!(
        delete(store, "a", Precondition::None).await,
        WriteOutcome::PreconditionFailed { current: None }
    );
    assert_eq!(store.current_revision().await.expect("revision"), f.r(3));

    // A new incarnation: fresh create_revision and version.
    let recreated = committed(put(store, "a", "new", Precondition::MustNotExist).await);
    assert_eq!(recreated.current, Some(kv("a", "new", f.r(4), f.r(4), 1)));
    assert_eq!(recreated.previous, None);
    let updated = set(store, "a", "newer").await;
    assert_eq!(updated.current, Some(kv("a", "newer", f.r(4), f.r(5), 2)));
}

pub async fn range_with_limit_and_more(f: Fixture) {
    let store = &*f.store;
    for i in 0..10 {
        set(store, &format!("/pods/{i}"), "v").await;
    }
    set(store, "/pods", "not in the prefix").await;
    set(store, "/podsx", "not in the prefix").await;
    set(store, "/services/a", "v").await;

    let request = |limit| RangeRequest {
        range: prefix_range(b"/pods/"),
        limit,
        revision: 0,
    };
    let limited = store.range(request(3)).await.expect("range");
    assert_eq!(keys(&limited), ["/pods/0", "/pods/1", "/pods/2"]);
    assert!(limited.more);
    assert_eq!(limited.revision, f.r(13));

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

pub async fn range_at_older_revisions(f: Fixture) {
    let store = &*f.store;
    let r = |n| f.r(n);
    set(store, "a", "1").await; // 1
    set(store, "b", "1").await; // 2
    set(store, "a", "2").await; // 3
    committed(delete(store, "b", Precondition::None).await); // 4
    set(store, "c", "1").await; // 5
    set(store, "b", "again").await; // 6

    let at = |n| store.range(range_all(r(n)));
    assert_eq!(
        at(1).await.expect("range").kvs,
        [kv("a", "1", r(1), r(1), 1)]
    );
    assert_eq!(
        at(2).await.expect("range").kvs,
        [kv("a", "1", r(1), r(1), 1), kv("b", "1", r(2), r(2), 1)]
    );
    assert_eq!(
        at(3).await.expect("range").kvs,
        [kv("a", "2", r(1), r(3), 2), kv("b", "1", r(2), r(2), 1)]
    );
    assert_eq!(
        at(4).await.expect("range").kvs,
        [kv("a", "2", r(1), r(3), 2)]
    );
    let at5 = at(5).await.expect("range");
    assert_eq!(at5.revision, r(5));
    assert_eq!(
        at5.kvs,
        [kv("a", "2", r(1), r(3), 2), kv("c", "1", r(5), r(5), 1)]
    );
    assert_eq!(
        at(6).await.expect("range").kvs,
        [
            kv("a", "2", r(1), r(3), 2),
            kv("b", "again", r(6), r(6), 1),
            kv("c", "1", r(5), r(5), 1)
        ]
    );

    let limited = store
        .range(RangeRequest {
            range: Vec::new()..Vec::new(),
            limit: 1,
            revision: r(3),
        })
        .await
        .expect("range");
    assert_eq!(limited.kvs, [kv("a", "2", r(1), r(3), 2)]);
    assert!(limited.more);

    match at(7).await {
        Err(StoreError::FutureRevision { requested, current })
            if requested == r(7) && current == r(6) => {}
        other => panic!("expected FutureRevision, got {other:?}"),
    }
}

pub async fn compaction_bounds_reads_and_watches(f: Fixture) {
    let store = &*f.store;
    let r = |n| f.r(n);
    set(store, "a", "1").await; // 1
    set(store, "b", "1").await; // 2
    set(store, "a", "2").await; // 3
    committed(delete(store, "b", Precondition::None).await); // 4
    set(store, "a", "3").await; // 5
    set(store, "c", "1").await; // 6
    let before: Vec<_> = futures::future::join_all((4..=6).map(|n| store.range(range_all(r(n)))))
        .await
        .into_iter()
        .map(|result| result.expect("range"))
        .collect();

    store.compact(r(4)).await.expect("compact");
    assert_eq!(store.compacted_revision().await.expect("compacted"), r(4));

    match store.range(range_all(r(3))).await {
        Err(StoreError::Compacted {
            requested,
            compacted,
        }) if requested == r(3) && compacted == r(4) => {}
        other => panic!("expected Compacted, got {other:?}"),
    }
    for (i, n) in (4..=6).enumerate() {
        assert_eq!(
            store.range(range_all(r(n))).await.expect("range"),
            before[i]
        );
    }

    // after_revision 4 still works (the first event is 5, whose prev_kv predates compaction).
    let mut watch = store
        .watch(Vec::new()..Vec::new(), r(4))
        .await
        .expect("watch");
    let event = next_event(&mut watch).await;
    assert_eq!(event.kv, kv("a", "3", r(1), r(5), 3));
    assert_eq!(event.prev_kv, Some(kv("a", "2", r(1), r(3), 2)));
    // From 3 it does not: etcd has dropped the tombstone that compaction at 4 reached (the
    // deletion of "b" at 4), so the history is not complete.
    match store.watch(Vec::new()..Vec::new(), r(3)).await {
        Err(StoreError::Compacted {
            requested,
            compacted,
        }) if requested == r(4) && compacted == r(4) => {}
        Err(other) => panic!("expected Compacted, got {other:?}"),
        Ok(_) => panic!("expected Compacted, got a stream"),
    }

    // As etcd: compacting at or below the compacted revision, or in the future, fails.
    assert!(matches!(
        store.compact(r(4)).await,
        Err(StoreError::Compacted { .. })
    ));
    assert!(matches!(
        store.compact(r(7)).await,
        Err(StoreError::FutureRevision { .. })
    ));
    // Compacting everything keeps the latest values.
    store.compact(r(6)).await.expect("compact");
    let latest = [kv("a", "3", r(1), r(5), 3), kv("c", "1", r(6), r(6), 1)];
    assert_eq!(store.range(range_all(0)).await.expect("range").kvs, latest);
    assert_eq!(
        store.range(range_all(r(6))).await.expect("range").kvs,
        latest
    );
    // A watcher that had caught up is not affected by the compaction.
    let event = next_event(&mut watch).await;
    assert_eq!(event.revision(), r(6));
    set(store, "d", "1").await;
    assert_eq!(next_event(&mut watch).await.revision(), r(7));
}

pub async fn watch_prev_kv_deletes_and_range_filter(f: Fixture) {
    let store = &*f.store;
    let r = |n| f.r(n);
    let mut live = store
        .watch(prefix_range(b"/a/"), r(0))
        .await
        .expect("watch");

    set(store, "/a/1", "v1").await; // 1
    set(store, "/b/1", "other").await; // 2
    set(store, "/a/1", "v2").await; // 3
    committed(delete(store, "/a/1", Precondition::None).await); // 4
    set(store, "/a/2", "x").await; // 5

    // The same events, live and replayed from history.
    let mut replayed = store
        .watch(prefix_range(b"/a/"), r(0))
        .await
        .expect("watch");
    for stream in [&mut live, &mut replayed] {
        let e = next_event(stream).await;
        assert_eq!(
            (e.kind, e.kv.clone(), e.prev_kv),
            (EventKind::Put, kv("/a/1", "v1", r(1), r(1), 1), None)
        );
        let e = next_event(stream).await;
        assert_eq!(e.kind, EventKind::Put);
        assert_eq!(e.kv, kv("/a/1", "v2", r(1), r(3), 2));
        assert_eq!(e.prev_kv, Some(kv("/a/1", "v1", r(1), r(1), 1)));
        let e = next_event(stream).await;
        assert_eq!(e.kind, EventKind::Delete);
        assert_eq!(e.kv, kv("/a/1", "", 0, r(4), 0));
        assert_eq!(e.prev_kv, Some(kv("/a/1", "v2", r(1), r(3), 2)));
        let e = next_event(stream).await;
        assert_eq!(e.kv, kv("/a/2", "x", r(5), r(5), 1));
    }

    // Watching from a later revision skips what came before.
    let mut later = store
        .watch(prefix_range(b"/a/"), r(3))
        .await
        .expect("watch");
    assert_eq!(next_event(&mut later).await.revision(), r(4));
    // Watching from the future waits for it.
    let mut future = store
        .watch(Vec::new()..Vec::new(), r(6))
        .await
        .expect("watch");
    set(store, "/c", "6").await;
    set(store, "/c", "7").await;
    assert_eq!(next_event(&mut future).await.revision(), r(7));
}

pub async fn watch_replays_then_goes_live_without_gap_or_duplicate(f: Fixture) {
    const TASKS: usize = 8;
    const WRITES: usize = 200;
    const TOTAL: i64 = (TASKS * WRITES) as i64;
    let store = f.store.clone();
    let writers: Vec<_> = (0..TASKS)
        .map(|task| {
            let store = store.clone();
            tokio::spawn(async move {
                for i in 0..WRITES {
                    // Half the keys are rewritten, so prev_kv is exercised too.
                    let key = format!("/k/{task}/{}", i % 20);
                    set(&*store, &key, &format!("{task}-{i}")).await;
                }
            })
        })
        .collect();

    // Start watchers midway, from old revisions.
    while store.current_revision().await.expect("revision") < f.r(TOTAL / 4) {
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    let from = f.r(10);
    let last = f.r(TOTAL);
    let mut midway = store
        .watch(Vec::new()..Vec::new(), from)
        .await
        .expect("watch");
    let mut filtered = store
        .watch(prefix_range(b"/k/3/"), f.r(0))
        .await
        .expect("watch");

    let collect_all = tokio::spawn(async move {
        let mut seen = Vec::new();
        while seen.last().copied().unwrap_or(from) < last {
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
    let expected: Vec<i64> = (from + 1..=last).collect();
    assert_eq!(seen, expected);
    let seen = collect_filtered.await.expect("filtered watcher");
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "in order, no duplicate"
    );
    assert_eq!(seen.len(), WRITES);
}

pub async fn concurrent_writers_get_distinct_revisions(f: Fixture) {
    let started = Instant::now();
    let writes = (0..64).map(|i| {
        let store = f.store.clone();
        tokio::spawn(async move { set(&*store, &format!("/w/{i}"), "v").await.revision })
    });
    let mut revisions: Vec<i64> = futures::future::join_all(writes)
        .await
        .into_iter()
        .map(|r| r.expect("writer"))
        .collect();
    let elapsed = started.elapsed();
    revisions.sort_unstable();
    assert_eq!(revisions, (f.r(1)..=f.r(64)).collect::<Vec<_>>());
    assert_eq!(f.store.current_revision().await.expect("revision"), f.r(64));
    assert_eq!(
        f.store
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
    eprintln!("64 concurrent durable writes took {elapsed:?}");
}

pub async fn concurrent_creates_have_one_winner(f: Fixture) {
    // Many concurrent create-only writes of one key: exactly one wins, the rest see its
    // write, and no revision is consumed by the losers.
    let attempts = (0..32).map(|i| {
        let store = f.store.clone();
        tokio::spawn(async move {
            put(&*store, "/lock", &i.to_string(), Precondition::MustNotExist).await
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
    assert_eq!(f.store.current_revision().await.expect("revision"), f.r(1));
    let distinct: HashSet<_> = outcomes.iter().map(|o| format!("{o:?}")).collect();
    assert_eq!(distinct.len(), 2);
}

pub async fn data_survives_reopen(mut f: Fixture) {
    let base = f.base;
    let r = move |n| base + n;
    {
        let store = &*f.store;
        set(store, "a", "1").await;
        set(store, "b", "2").await;
        set(store, "a", "3").await;
        committed(delete(store, "b", Precondition::None).await);
    }
    f.reopen().await;
    let store = &*f.store;
    assert_eq!(store.current_revision().await.expect("revision"), r(4));
    assert_eq!(
        store.get(b"a").await.expect("get"),
        (Some(kv("a", "3", r(1), r(3), 2)), r(4))
    );
    assert_eq!(store.get(b"b").await.expect("get").0, None);
    assert_eq!(
        store.range(range_all(r(2))).await.expect("range").kvs,
        [kv("a", "1", r(1), r(1), 1), kv("b", "2", r(2), r(2), 1)]
    );
    let mut watch = store
        .watch(Vec::new()..Vec::new(), r(0))
        .await
        .expect("watch");
    for n in 1..=4 {
        assert_eq!(next_event(&mut watch).await.revision(), r(n));
    }
    assert_eq!(set(store, "c", "5").await.revision, r(5));
    assert_eq!(next_event(&mut watch).await.revision(), r(5));
}

/// Values near etcd's request limit, and a range and a watch replay far over tonic's 4 MiB
/// default message size.
pub async fn large_values_and_responses(f: Fixture) {
    let store = &*f.store;
    let value = "x".repeat(1_400_000);
    for i in 0..8 {
        set(store, &format!("/big/{i}"), &value).await;
    }
    let all = store
        .range(RangeRequest {
            range: prefix_range(b"/big/"),
            ..Default::default()
        })
        .await
        .expect("a range of 11 MB");
    assert_eq!(all.kvs.len(), 8);
    assert!(all.kvs.iter().all(|kv| kv.value.len() == value.len()));
    let mut watch = store
        .watch(prefix_range(b"/big/"), f.r(0))
        .await
        .expect("watch");
    for n in 1..=8 {
        let event = next_event(&mut watch).await;
        assert_eq!(event.revision(), f.r(n));
        assert_eq!(event.kv.value.len(), value.len());
    }
}

/// `write_all`: several keys, all or none. The embedded engine gives each write its own
/// revision and etcd one shared revision; both keep the order and end at the store's
/// revision.
pub async fn write_all_commits_every_write_or_none(f: Fixture) {
    use finale_store::{TxnOutcome, WriteOp};
    let store = &*f.store;
    let put = |key: &str, value: &str| WriteOp::Put {
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
    };
    let object = set(store, "object", "v1").await;

    let refused = store
        .write_all(vec![
            (put("side", "s1"), Precondition::MustNotExist),
            (
                put("object", "v2"),
                Precondition::ModRevision(object.revision + 100),
            ),
        ])
        .await
        .expect("write_all");
    let TxnOutcome::PreconditionFailed { current } = refused else {
        panic!("a failed precondition must refuse the whole transaction");
    };
    assert_eq!(current.len(), 2);
    assert_eq!(current[0], None);
    assert_eq!(
        current[1].as_ref().map(|kv| kv.value.clone()),
        Some(b"v1".to_vec())
    );
    assert_eq!(store.get(b"side").await.expect("get").0, None);

    let TxnOutcome::Committed(results) = store
        .write_all(vec![
            (put("side", "s1"), Precondition::MustNotExist),
            (
                put("object", "v2"),
                Precondition::ModRevision(object.revision),
            ),
        ])
        .await
        .expect("write_all")
    else {
        panic!("both preconditions hold: the transaction commits");
    };
    assert_eq!(results.len(), 2);
    assert!(results[0].revision > object.revision);
    assert!(results[1].revision >= results[0].revision);
    assert_eq!(
        store.current_revision().await.expect("revision"),
        results[1].revision
    );
    assert_eq!(
        results[1].previous.as_ref().map(|kv| kv.value.clone()),
        Some(b"v1".to_vec())
    );
    let (side, _) = store.get(b"side").await.expect("get");
    assert_eq!(side.map(|kv| kv.value), Some(b"s1".to_vec()));

    // A delete of a missing key fails the whole transaction, as a single delete would.
    let before = store.current_revision().await.expect("revision");
    let refused = store
        .write_all(vec![
            (
                WriteOp::Delete {
                    key: b"missing".to_vec(),
                },
                Precondition::None,
            ),
            (put("object", "v3"), Precondition::None),
        ])
        .await
        .expect("write_all");
    assert!(matches!(refused, TxnOutcome::PreconditionFailed { .. }));
    assert_eq!(store.current_revision().await.expect("revision"), before);

    // One key twice is refused outright, and nothing is written.
    let twice = store
        .write_all(vec![
            (put("object", "a"), Precondition::None),
            (put("object", "b"), Precondition::None),
        ])
        .await;
    assert!(matches!(twice, Err(StoreError::Backend(_))), "{twice:?}");
    assert_eq!(store.current_revision().await.expect("revision"), before);
}

/// `write_all_guarded`: a guard is a compare on a key the transaction does not write. It
/// commits only while the guarded key is at the guard's revision; a failed guard writes
/// nothing and reports the guarded key's state after the writes' keys.
pub async fn guards_fence_a_transaction_on_another_key(f: Fixture) {
    use finale_store::{Guard, TxnOutcome, WriteOp};
    let store = &*f.store;
    let put = |key: &str, value: &str| WriteOp::Put {
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
    };
    let lease = set(store, "lease", "mine").await;
    let guard = |revision| Guard {
        key: b"lease".to_vec(),
        mod_revision: revision,
    };

    let TxnOutcome::Committed(results) = store
        .write_all_guarded(
            vec![(put("object", "v1"), Precondition::MustNotExist)],
            vec![guard(lease.revision)],
        )
        .await
        .expect("guarded write")
    else {
        panic!("the guard holds: the transaction commits");
    };
    assert_eq!(results.len(), 1);
    let (guarded, _) = store.get(b"lease").await.expect("get");
    assert_eq!(
        guarded.map(|kv| kv.mod_revision),
        Some(lease.revision),
        "a guard writes nothing"
    );

    // Someone else writes the guarded key: the same guard now refuses, and nothing is written.
    let taken = set(store, "lease", "theirs").await;
    let before = store.current_revision().await.expect("revision");
    let TxnOutcome::PreconditionFailed { current } = store
        .write_all_guarded(
            vec![(put("object", "v2"), Precondition::None)],
            vec![guard(lease.revision)],
        )
        .await
        .expect("guarded write")
    else {
        panic!("a failed guard must refuse the transaction");
    };
    assert_eq!(current.len(), 2, "the write's key, then the guard's");
    assert_eq!(
        current[0].as_ref().map(|kv| kv.value.clone()),
        Some(b"v1".to_vec())
    );
    assert_eq!(
        current[1]
            .as_ref()
            .map(|kv| (kv.value.clone(), kv.mod_revision)),
        Some((b"theirs".to_vec(), taken.revision))
    );
    assert_eq!(store.current_revision().await.expect("revision"), before);

    // A guard of revision 0 requires the key to be absent.
    let absent = Guard {
        key: b"nobody".to_vec(),
        mod_revision: 0,
    };
    assert!(matches!(
        store
            .write_all_guarded(
                vec![(put("object", "v3"), Precondition::None)],
                vec![absent]
            )
            .await
            .expect("guarded write"),
        TxnOutcome::Committed(_)
    ));

    // Guarding a key the transaction writes is refused outright.
    let refused = store
        .write_all_guarded(
            vec![(put("lease", "x"), Precondition::None)],
            vec![guard(taken.revision)],
        )
        .await;
    assert!(
        matches!(refused, Err(StoreError::Backend(_))),
        "{refused:?}"
    );
}
