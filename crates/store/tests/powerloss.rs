//! The store on a filesystem that loses power (`finale-faultfs`): what it acknowledged
//! survives the loss of everything it did not fsync, writes it never acknowledged are whole
//! or absent, and a failed fsync makes the writer refuse writes until it has recovered by
//! itself (in the same process) once the disk works again.
//!
//! Unlike `kill -9` (see `crash.rs`), a power cut here drops the page cache: these tests
//! fail if the store skips or misorders an fsync it relies on.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use finale_faultfs::{DiskImage, Fault, FaultFs, PowerCut};
use finale_store::{
    Precondition, RangeRequest, RedbStore, RedbStoreOptions, Store, StoreError, StoreHealth,
    WriteOp, WriteOutcome, prefix_range,
};

const WRITERS: usize = 8;
const LOAD: Duration = Duration::from_millis(600);

/// The value written to `key`: derived from the key alone, so any value found can be checked.
fn value_of(key: &str) -> Vec<u8> {
    format!("{key}:{}", key.repeat(1 + 300 / key.len())).into_bytes()
}

fn open(dir: &Path, options: RedbStoreOptions) -> Arc<RedbStore> {
    RedbStore::open(dir, options).unwrap_or_else(|e| panic!("open {}: {e}", dir.display()))
}

fn options() -> RedbStoreOptions {
    RedbStoreOptions {
        // Several checkpoints (durable redb commits) during the load, and log appends
        // between them: both paths to durability are cut through.
        checkpoint_interval: Duration::from_millis(150),
        cache_size: 16 << 20,
        ..RedbStoreOptions::default()
    }
}

/// What the writers saw before and around the cut.
#[derive(Default)]
struct Outcome {
    /// Key → revision of every acknowledged put.
    acked: BTreeMap<String, i64>,
    /// Puts that failed or never answered (in flight at the cut): may or may not be there.
    uncertain: Vec<String>,
}

/// Writes distinct keys from `WRITERS` tasks until `stop`.
async fn write_load(store: Arc<RedbStore>, round: usize, stop: Arc<AtomicBool>) -> Outcome {
    let tasks: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let (store, stop) = (store.clone(), stop.clone());
            tokio::spawn(async move {
                let mut outcome = Outcome::default();
                // Bounded even if `stop` never came.
                for seq in 0..100_000 {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let key = format!("/r{round}/w{writer}/{seq:06}");
                    let op = WriteOp::Put {
                        key: key.clone().into_bytes(),
                        value: value_of(&key),
                    };
                    match store.write(op, Precondition::MustNotExist).await {
                        Ok(WriteOutcome::Committed(result)) => {
                            outcome.acked.insert(key, result.revision);
                        }
                        Ok(other) => panic!("{key}: {other:?}"),
                        Err(_) => {
                            outcome.uncertain.push(key);
                            break;
                        }
                    }
                }
                outcome
            })
        })
        .collect();
    let mut all = Outcome::default();
    for task in tasks {
        let outcome = task.await.expect("writer task");
        all.acked.extend(outcome.acked);
        all.uncertain.extend(outcome.uncertain);
    }
    all
}

/// When a round cuts the power.
#[derive(Clone, Copy, Debug)]
enum Cut {
    /// After [`LOAD`], wherever the writers are.
    AfterLoad(PowerCut),
    /// As the store issues the fsync number `skip + 1` (counted from the start of the load)
    /// of `file`, tearing that file's unsynced writes: a log append or a checkpoint caught
    /// in the middle.
    AtFsync {
        file: &'static str,
        skip: u32,
        seed: u64,
    },
}

/// Runs the load on a store on `fs`, cuts the power in the middle of it, and returns the
/// disk image with what the writers saw.
async fn load_then_cut(fs: &FaultFs, data: &Path, round: usize, cut: Cut) -> (DiskImage, Outcome) {
    let store = open(data, options());
    if let Cut::AtFsync { file, skip, seed } = cut {
        fs.inject(
            Fault::fsync()
                .on_file(file)
                .skip(skip)
                .cut_power(PowerCut::Torn { seed }),
        );
    }
    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn(write_load(store.clone(), round, stop.clone()));
    let image = match cut {
        Cut::AfterLoad(cut) => {
            tokio::time::sleep(LOAD).await;
            // The cut comes while writes are in flight; everything after it fails with EIO.
            fs.cut_power(cut)
        }
        Cut::AtFsync { .. } => {
            let waited = Instant::now();
            let image =
                tokio::task::block_in_place(|| fs.wait_for_power_cut(Duration::from_secs(15)));
            image.unwrap_or_else(|| {
                panic!("{cut:?}: no power cut after {:?} of load", waited.elapsed())
            })
        }
    };
    stop.store(true, Ordering::SeqCst);
    let outcome = tokio::time::timeout(Duration::from_secs(20), load)
        .await
        .expect("the writers stop after the cut")
        .expect("load task");
    // The process "dies": drop the store (its final checkpoint fails with EIO, harmlessly).
    store.close().await;
    drop(store);
    fs.clear_faults();
    (image, outcome)
}

/// Checks the store reopened from an image: every acknowledged put is there at its
/// revision, everything else of this round is either complete or absent, and the store
/// accepts new writes above every revision it acknowledged.
async fn check_recovered(store: &RedbStore, round: usize, outcome: &Outcome, what: &str) {
    let listed = store
        .range(RangeRequest {
            range: prefix_range(format!("/r{round}/").as_bytes()),
            ..RangeRequest::default()
        })
        .await
        .expect("range after recovery");
    let found: BTreeMap<String, (i64, Vec<u8>)> = listed
        .kvs
        .into_iter()
        .map(|kv| {
            (
                String::from_utf8(kv.key).expect("utf-8 key"),
                (kv.mod_revision, kv.value),
            )
        })
        .collect();
    let lost: Vec<&String> = outcome
        .acked
        .keys()
        .filter(|k| !found.contains_key(*k))
        .collect();
    assert!(
        lost.is_empty(),
        "{what}: {} of {} acknowledged writes lost, e.g. {:?}",
        lost.len(),
        outcome.acked.len(),
        &lost[..lost.len().min(5)]
    );
    for (key, (revision, value)) in &found {
        assert_eq!(*value, value_of(key), "{what}: {key} holds a damaged value");
        match outcome.acked.get(key) {
            Some(acked) => assert_eq!(revision, acked, "{what}: {key} moved revision"),
            None => assert!(
                outcome.uncertain.contains(key),
                "{what}: {key} was never written"
            ),
        }
    }
    let max_acked = outcome.acked.values().copied().max().unwrap_or(0);
    let probe = common::set(store, &format!("/probe/{round}"), "after").await;
    assert!(
        probe.revision > max_acked && probe.revision > listed.revision,
        "{what}: a new write got revision {}, but {max_acked} was acknowledged",
        probe.revision
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_writes_survive_power_cuts_mid_load_mid_append_and_mid_checkpoint() {
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("tempdir");
    let mnt = dir.path();
    let data = mnt.join("data").join("store");
    let mut fs = FaultFs::mount(mnt).expect("mount faultfs");
    let cuts = [
        Cut::AfterLoad(PowerCut::DropUnsynced),
        Cut::AfterLoad(PowerCut::Torn { seed: 1 }),
        Cut::AtFsync {
            file: "store.redb.wal",
            skip: 40,
            seed: 2,
        },
        Cut::AtFsync {
            file: "store.redb.wal",
            skip: 400,
            seed: 3,
        },
        Cut::AtFsync {
            file: "store.redb",
            skip: 2,
            seed: 4,
        },
        Cut::AtFsync {
            file: "store.redb",
            skip: 7,
            seed: 5,
        },
    ];
    for (round, cut) in cuts.into_iter().enumerate() {
        let what = format!("round {round} ({cut:?})");
        let (image, outcome) = load_then_cut(&fs, &data, round, cut).await;
        fs.unmount().expect("unmount");
        assert!(!outcome.acked.is_empty(), "{what}: no write acknowledged");
        eprintln!(
            "{what}: {} acknowledged, {} in flight; the cut lost {:?}",
            outcome.acked.len(),
            outcome.uncertain.len(),
            image.lost
        );

        fs = FaultFs::mount_image(&image, mnt).expect("remount the image");
        let store = open(&data, options());
        check_recovered(&store, round, &outcome, &what).await;
        // Earlier rounds' acknowledged writes are all still there too.
        for earlier in 0..round {
            let listed = store
                .range(RangeRequest {
                    range: prefix_range(format!("/probe/{earlier}").as_bytes()),
                    ..RangeRequest::default()
                })
                .await
                .expect("range");
            assert_eq!(listed.kvs.len(), 1, "{what}: round {earlier}'s probe lost");
        }
        store.close().await;
    }
    fs.unmount().expect("unmount");
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_created_in_a_new_directory_survives_a_power_cut() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mnt = dir.path();
    // Neither directory exists: the store creates both, and must make them durable.
    let data = mnt.join("new").join("store");
    let fs = FaultFs::mount(mnt).expect("mount faultfs");
    let store = open(&data, options());
    let acked = common::set(&store, "/key", "value").await;
    let image = fs.cut_power(PowerCut::DropUnsynced);
    store.close().await;
    drop(store);
    fs.unmount().expect("unmount");

    let fs = FaultFs::mount_image(&image, mnt).expect("remount");
    assert!(
        image.read("new/store/store.redb").is_some(),
        "the database file is gone after the cut; the disk holds {:?} at the root",
        image.list("")
    );
    let store = open(&data, options());
    let (found, _) = store.get(b"/key").await.expect("get");
    let found = found.expect("the acknowledged write is gone after the power cut");
    assert_eq!(found.mod_revision, acked.revision);
    store.close().await;
    drop(store);
    fs.unmount().expect("unmount");
}

fn put(key: &str) -> WriteOp {
    WriteOp::Put {
        key: key.as_bytes().to_vec(),
        value: value_of(key),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_log_fsync_refuses_writes_until_the_disk_works_again_then_recovers_in_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mnt = dir.path();
    let data = mnt.join("store");
    let fs = FaultFs::mount(mnt).expect("mount faultfs");
    // No checkpoint during the test: every write goes through the log.
    let options = RedbStoreOptions {
        checkpoint_interval: Duration::from_secs(3600),
        ..options()
    };
    let store = open(&data, options.clone());
    let before = common::set(&store, "/before", "x").await;
    let mut watch = store
        .watch(prefix_range(b"/"), before.revision)
        .await
        .expect("watch");

    // The log's fsync fails until the fault is cleared: the append of `/failed` reaches the
    // file (complete, checksummed) but is never synced, so it was never acknowledged.
    fs.inject(Fault::fsync().on_file("store.redb.wal"));
    let failed = store.write(put("/failed"), Precondition::None).await;
    assert!(
        matches!(failed, Err(StoreError::Backend(_))),
        "a write whose log fsync failed must fail: {failed:?}"
    );
    // While the disk keeps failing, every write is refused with a message that says why and
    // what happens next, and the recovery attempts (which sync the log) keep failing too.
    let refused = store.write(put("/refused"), Precondition::None).await;
    match &refused {
        Err(StoreError::Backend(message)) => assert!(
            message.starts_with("writes are refused after a storage failure (reads still work)")
                && message.contains("retries by itself"),
            "the refusal says what happened and what to expect: {message}"
        ),
        other => panic!("a write while the log cannot be synced must be refused: {other:?}"),
    }
    assert!(matches!(store.health(), StoreHealth::RefusingWrites { .. }));
    // Reads keep working, and nothing unacknowledged is visible.
    let (found, _) = store.get(b"/before").await.expect("get while refusing");
    assert_eq!(found.map(|kv| kv.mod_revision), Some(before.revision));
    assert_eq!(store.get(b"/failed").await.expect("get").0, None);

    // The disk works again: the store recovers by itself, without a reopen by its owner.
    let errors_while_failing = fs.injected_errors();
    assert!(errors_while_failing >= 1);
    fs.clear_faults();
    common::wait_until_serving(&store).await;
    let after = common::set(&store, "/after", "y").await;
    assert_eq!(
        after.revision,
        before.revision + 1,
        "the failed write consumed no revision"
    );
    for key in ["/failed", "/refused"] {
        assert_eq!(
            store.get(key.as_bytes()).await.expect("get").0,
            None,
            "{key} was never acknowledged and must not appear"
        );
    }
    // Watchers saw exactly the acknowledged writes, once, in order, across the recovery.
    let event = common::next_event(&mut watch).await;
    assert_eq!(
        (event.kv.key.as_slice(), event.kv.mod_revision),
        (&b"/after"[..], after.revision)
    );

    // What was acknowledged since the recovery is durable, and the discarded frame of
    // `/failed` is not redone after a power cut.
    let image = fs.cut_power(PowerCut::DropUnsynced);
    store.close().await;
    drop((store, watch));
    fs.unmount().expect("unmount");
    let fs = FaultFs::mount_image(&image, mnt).expect("remount");
    let store = open(&data, options);
    for (key, revision) in [("/before", before.revision), ("/after", after.revision)] {
        let (found, _) = store.get(key.as_bytes()).await.expect("get");
        assert_eq!(
            found.map(|kv| kv.mod_revision),
            Some(revision),
            "{key} after the power cut"
        );
    }
    assert_eq!(store.get(b"/failed").await.expect("get").0, None);
    assert_eq!(store.get(b"/refused").await.expect("get").0, None);
    store.close().await;
    drop(store);
    fs.unmount().expect("unmount");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_checkpoint_fsync_refuses_writes_until_the_store_has_reopened_its_database() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mnt = dir.path();
    let data = mnt.join("store");
    let fs = FaultFs::mount(mnt).expect("mount faultfs");
    // A checkpoint at every batch: a durable redb commit, which fsyncs the database file.
    // After a failed one, redb refuses every write ("Previous I/O error") until reopened.
    let checkpointing = RedbStoreOptions {
        checkpoint_interval: Duration::ZERO,
        ..options()
    };
    let store = open(&data, checkpointing.clone());
    let before = common::set(&store, "/before", "x").await;

    fs.inject(Fault::fsync().on_file("store.redb").times(1));
    let failed = store.write(put("/failed"), Precondition::None).await;
    assert_eq!(fs.injected_errors(), 1, "the fault fired");
    assert!(
        matches!(failed, Err(StoreError::Backend(_))),
        "a write whose durable commit failed must not be acknowledged: {failed:?}"
    );
    // The refusal is in place before the caller hears of the failure.
    assert!(matches!(store.health(), StoreHealth::RefusingWrites { .. }));
    // The writer reopens redb and redoes its log by itself, then accepts writes.
    common::wait_until_serving(&store).await;
    let (found, _) = store.get(b"/before").await.expect("get after recovery");
    assert_eq!(found.map(|kv| kv.mod_revision), Some(before.revision));
    let after = common::set(&store, "/after", "y").await;
    assert!(after.revision > before.revision);
    if let (Some(kv), _) = store.get(b"/failed").await.expect("get") {
        // Its commit reported failure but may have reached the disk: whole, and at its own
        // revision.
        assert_eq!(kv.value, value_of("/failed"));
        assert!(kv.mod_revision > before.revision && kv.mod_revision < after.revision);
    }
    let image = fs.cut_power(PowerCut::DropUnsynced);
    store.close().await;
    drop(store);
    fs.unmount().expect("unmount");

    let fs = FaultFs::mount_image(&image, mnt).expect("remount");
    let store = open(&data, checkpointing);
    for (key, revision) in [("/before", before.revision), ("/after", after.revision)] {
        let (found, _) = store.get(key.as_bytes()).await.expect("get");
        assert_eq!(
            found.map(|kv| kv.mod_revision),
            Some(revision),
            "{key} after the power cut"
        );
    }
    store.close().await;
    drop(store);
    fs.unmount().expect("unmount");
}
