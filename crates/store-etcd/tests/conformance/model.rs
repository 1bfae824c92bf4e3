//! Model test: random puts, deletes, compare-and-swaps, compactions and reopens against a
//! simple in-memory model of etcd's semantics, comparing every write outcome, then latest and
//! historical reads and watches; against redb and against etcd.
//!
//! The model starts at the fixture's `base` revision: 0 for a fresh redb file, the member's
//! current revision for etcd (one member serves every case, each under a prefix of its own).

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use finale_e2e::Etcd;
use finale_store::{
    EventKind, KeyValue, Precondition, RangeRequest, RangeResponse, RedbStoreOptions, Revision,
    Store, StoreError, WatchEvent, WriteOp, WriteOutcome, WriteResult, prefix_range,
    range_contains,
};
use proptest::prelude::*;

use crate::harness::{Fixture, etcd_on, next_event, redb_with, start_etcd};

/// Keys that are prefixes of each other, so `(key, revision)` ordering in history is exercised.
const KEYS: [&[u8]; 6] = [b"a", b"a\0", b"a\0\0", b"ab", b"b", b"\xff\xff"];

#[derive(Clone, Debug)]
enum Pre {
    None,
    MustNotExist,
    MustExist,
    /// `ModRevision` of the key's current state (0 if missing).
    Current,
    /// `ModRevision` of some arbitrary, probably wrong, revision.
    Stale(i64),
}

#[derive(Clone, Debug)]
enum Op {
    Put(usize, u8, Pre),
    Delete(usize, Pre),
    /// Compact to `current - back`.
    Compact(i64),
    Reopen,
}

fn pre_strategy() -> impl Strategy<Value = Pre> {
    prop_oneof![
        3 => Just(Pre::None),
        1 => Just(Pre::MustNotExist),
        1 => Just(Pre::MustExist),
        2 => Just(Pre::Current),
        1 => (1i64..20).prop_map(Pre::Stale),
    ]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    // Reopens are rare: each costs a few fsyncs.
    prop_oneof![
        24 => (0..KEYS.len(), any::<u8>(), pre_strategy()).prop_map(|(k, v, p)| Op::Put(k, v, p)),
        9 => (0..KEYS.len(), pre_strategy()).prop_map(|(k, p)| Op::Delete(k, p)),
        3 => (-1i64..6).prop_map(Op::Compact),
        1 => Just(Op::Reopen),
    ]
}

#[derive(Default)]
struct Model {
    /// The revision of the empty store.
    base: Revision,
    /// The keyspace at each revision from `base`; index 0 is the empty store.
    snapshots: Vec<BTreeMap<Vec<u8>, KeyValue>>,
    /// The event of revision `base + i + 1` at index `i`.
    events: Vec<WatchEvent>,
    compacted: Revision,
}

impl Model {
    fn new(base: Revision) -> Self {
        Model {
            base,
            snapshots: vec![BTreeMap::new()],
            events: Vec::new(),
            compacted: base,
        }
    }

    fn current(&self) -> Revision {
        self.base + (self.snapshots.len() - 1) as Revision
    }

    fn latest(&self) -> &BTreeMap<Vec<u8>, KeyValue> {
        self.snapshots.last().expect("snapshot")
    }

    fn precondition(&self, key: &[u8], pre: &Pre) -> Precondition {
        match pre {
            Pre::None => Precondition::None,
            Pre::MustNotExist => Precondition::MustNotExist,
            Pre::MustExist => Precondition::MustExist,
            Pre::Current => {
                Precondition::ModRevision(self.latest().get(key).map_or(0, |kv| kv.mod_revision))
            }
            Pre::Stale(r) => Precondition::ModRevision(self.base + *r),
        }
    }

    fn write(&mut self, op: &WriteOp, precondition: Precondition) -> WriteOutcome {
        let current = self.latest().get(op.key()).cloned();
        let holds = match precondition {
            Precondition::None => true,
            Precondition::MustNotExist | Precondition::ModRevision(0) => current.is_none(),
            Precondition::MustExist => current.is_some(),
            Precondition::ModRevision(r) => current.as_ref().is_some_and(|c| c.mod_revision == r),
        };
        if !holds || (matches!(op, WriteOp::Delete { .. }) && current.is_none()) {
            return WriteOutcome::PreconditionFailed { current };
        }
        let revision = self.current() + 1;
        let mut next = self.latest().clone();
        let (event, result) = match op {
            WriteOp::Put { key, value } => {
                let kv = KeyValue {
                    key: key.clone(),
                    value: value.clone(),
                    create_revision: current.as_ref().map_or(revision, |c| c.create_revision),
                    mod_revision: revision,
                    version: current.as_ref().map_or(1, |c| c.version + 1),
                };
                next.insert(key.clone(), kv.clone());
                (
                    WatchEvent {
                        kind: EventKind::Put,
                        kv: kv.clone(),
                        prev_kv: current.clone(),
                    },
                    WriteResult {
                        revision,
                        current: Some(kv),
                        previous: current,
                    },
                )
            }
            WriteOp::Delete { key } => {
                next.remove(key);
                (
                    WatchEvent {
                        kind: EventKind::Delete,
                        kv: KeyValue {
                            key: key.clone(),
                            value: Vec::new(),
                            create_revision: 0,
                            mod_revision: revision,
                            version: 0,
                        },
                        prev_kv: current.clone(),
                    },
                    WriteResult {
                        revision,
                        current: None,
                        previous: current,
                    },
                )
            }
        };
        self.snapshots.push(next);
        self.events.push(event);
        WriteOutcome::Committed(result)
    }

    fn compact(&mut self, revision: Revision) -> Result<(), (Revision, Revision, bool)> {
        if revision <= self.compacted {
            Err((revision, self.compacted, true))
        } else if revision > self.current() {
            Err((revision, self.current(), false))
        } else {
            self.compacted = revision;
            Ok(())
        }
    }

    fn range(&self, range: &Range<Vec<u8>>, limit: usize, revision: Revision) -> RangeResponse {
        let at = if revision == 0 {
            self.current()
        } else {
            revision
        };
        let matching: Vec<_> = self.snapshots[(at - self.base) as usize]
            .values()
            .filter(|kv| range_contains(range, &kv.key))
            .cloned()
            .collect();
        let limit = if limit == 0 { usize::MAX } else { limit };
        RangeResponse {
            more: matching.len() > limit,
            kvs: matching.into_iter().take(limit).collect(),
            revision: at,
        }
    }
}

fn redb_options() -> RedbStoreOptions {
    RedbStoreOptions {
        // fsync is not what this test is about, and would make it slow.
        durable_commits: false,
        // Tiny chunks, so compaction and replay run over many transactions.
        compaction_chunk: 2,
        replay_chunk: 3,
        cache_size: 4 << 20,
        // Fewer fsyncs at open and close; recovery speed is not under test here.
        quick_repair: false,
        ..Default::default()
    }
}

fn ranges() -> Vec<(Range<Vec<u8>>, usize)> {
    vec![
        (Vec::new()..Vec::new(), 0),
        (Vec::new()..Vec::new(), 2),
        (prefix_range(b"a"), 0),
        (prefix_range(b"a\0"), 1),
        (b"a\0".to_vec()..b"b".to_vec(), 0),
        (b"ab".to_vec()..Vec::new(), 0),
        (b"b".to_vec()..b"a".to_vec(), 0),
    ]
}

async fn check_reads(store: &dyn Store, model: &Model) {
    let current = model.current();
    assert_eq!(store.current_revision().await.expect("revision"), current);
    assert_eq!(
        store.compacted_revision().await.expect("compacted"),
        model.compacted
    );
    for key in KEYS {
        assert_eq!(
            store.get(key).await.expect("get"),
            (model.latest().get(key).cloned(), current),
            "get {key:?}"
        );
    }
    for revision in std::iter::once(0).chain(model.base.max(1)..=current + 1) {
        for (range, limit) in ranges() {
            let request = RangeRequest {
                range: range.clone(),
                limit,
                revision,
            };
            let got = store.range(request).await;
            if revision > current {
                assert!(
                    matches!(got, Err(StoreError::FutureRevision { requested, current: c }) if requested == revision && c == current),
                    "range at {revision}: {got:?}"
                );
            } else if revision > 0 && revision < model.compacted {
                assert!(
                    matches!(got, Err(StoreError::Compacted { requested, compacted }) if requested == revision && compacted == model.compacted),
                    "range at {revision}: {got:?}"
                );
            } else {
                let expected = model.range(&range, limit, revision);
                assert_eq!(
                    got.expect("range"),
                    expected,
                    "range {range:?} limit {limit} at {revision}"
                );
            }
        }
    }
}

async fn check_watches(store: &dyn Store, model: &Model) {
    let after = model.compacted;
    for (range, _) in ranges() {
        let expected: Vec<_> = model
            .events
            .iter()
            .filter(|e| e.revision() > after && range_contains(&range, &e.kv.key))
            .cloned()
            .collect();
        let mut watch = store.watch(range.clone(), after).await.expect("watch");
        for event in &expected {
            assert_eq!(
                &next_event(&mut watch).await,
                event,
                "watch {range:?} from {after}"
            );
        }
    }
    if model.compacted - model.base >= 1 {
        let got = store
            .watch(Vec::new()..Vec::new(), model.compacted - 1)
            .await;
        assert!(
            matches!(got, Err(StoreError::Compacted { .. })),
            "watch below compaction"
        );
    }
}

async fn run(mut fixture: Fixture, ops: Vec<Op>) {
    {
        let mut model = Model::new(fixture.base);
        for op in ops {
            match op {
                Op::Put(key, value, pre) => {
                    let key = KEYS[key];
                    let precondition = model.precondition(key, &pre);
                    let write = WriteOp::Put {
                        key: key.to_vec(),
                        value: vec![value; (value % 7) as usize],
                    };
                    let expected = model.write(&write, precondition);
                    let got = fixture
                        .store
                        .write(write, precondition)
                        .await
                        .expect("write");
                    assert_eq!(got, expected);
                }
                Op::Delete(key, pre) => {
                    let key = KEYS[key];
                    let precondition = model.precondition(key, &pre);
                    let write = WriteOp::Delete { key: key.to_vec() };
                    let expected = model.write(&write, precondition);
                    let got = fixture
                        .store
                        .write(write, precondition)
                        .await
                        .expect("write");
                    assert_eq!(got, expected);
                }
                Op::Compact(back) => {
                    let revision = model.current() - back;
                    let expected = model.compact(revision);
                    let got = fixture.store.compact(revision).await;
                    match (expected, got) {
                        (Ok(()), Ok(())) => {}
                        (
                            Err((r, c, true)),
                            Err(StoreError::Compacted {
                                requested,
                                compacted,
                            }),
                        ) if (r, c) == (requested, compacted) => {}
                        (
                            Err((r, c, false)),
                            Err(StoreError::FutureRevision { requested, current }),
                        ) if (r, c) == (requested, current) => {}
                        (expected, got) => {
                            panic!("compact {revision}: expected {expected:?}, got {got:?}")
                        }
                    }
                }
                Op::Reopen => fixture.reopen().await,
            }
        }
        check_reads(&*fixture.store, &model).await;
        check_watches(&*fixture.store, &model).await;
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

static CASE: AtomicUsize = AtomicUsize::new(0);

/// A few dozen cases by default, to keep the suite fast; PROPTEST_CASES=N for a deeper run.
fn config() -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(48),
        ..ProptestConfig::default()
    }
}

fn run_redb(ops: Vec<Op>) {
    runtime().block_on(run(redb_with(redb_options()), ops));
}

fn run_etcd(etcd: &Arc<Etcd>, ops: Vec<Op>) {
    let prefix = format!("/model-{}", CASE.fetch_add(1, Ordering::Relaxed));
    let etcd = Arc::clone(etcd);
    runtime().block_on(async move { run(etcd_on(etcd, &prefix).await, ops).await });
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn redb_matches_model(ops in prop::collection::vec(op_strategy(), 1..60)) {
        run_redb(ops);
    }
}

/// One etcd member for every case of the etcd run (a member per case would make the run
/// minutes long), each case under its own prefix. The member belongs to this test function,
/// not to a static, so that it is stopped when the run ends (a static is never dropped, and
/// its etcd would outlive the test process).
#[test]
fn etcd_matches_model() {
    let etcd = runtime().block_on(start_etcd());
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        source_file: Some(file!()),
        ..config()
    });
    let result = runner.run(&prop::collection::vec(op_strategy(), 1..60), |ops| {
        run_etcd(&etcd, ops);
        Ok(())
    });
    drop(etcd);
    if let Err(failure) = result {
        panic!("{failure}");
    }
}
