//! The store on a real filesystem that fills up: a small tmpfs (mounting it needs root, as CI
//! runs). Writes are refused with a message naming the full disk, reads keep working, nothing
//! acknowledged is lost, nothing refused appears, and once space is freed the store accepts
//! writes again by itself, in the same process, with watches continuing across the gap.

mod common;

use std::time::Duration;

use finale_faultfs::tmpfs::Tmpfs;
use finale_store::{
    Precondition, RangeRequest, RedbStore, RedbStoreOptions, Store, StoreError, StoreHealth,
    WriteOp, WriteOutcome, prefix_range,
};

fn put(key: &str, value: &[u8]) -> WriteOp {
    WriteOp::Put {
        key: key.as_bytes().to_vec(),
        value: value.to_vec(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_writes_keeps_reads_and_writes_resume_in_process_once_space_is_freed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tmpfs = Tmpfs::mount(&dir.path().join("mnt"), "12m");
    let data = tmpfs.dir().join("store");
    let options = RedbStoreOptions {
        cache_size: 8 << 20,
        // Checkpoints during the test too: both the log and redb meet the full disk.
        checkpoint_interval: Duration::from_millis(100),
        ..RedbStoreOptions::default()
    };
    let store = RedbStore::open(&data, options.clone()).expect("open");
    let first = common::set(&store, "/before", "x").await;
    let mut watch = store
        .watch(prefix_range(b"/"), first.revision)
        .await
        .expect("watch");

    let filler = tmpfs.fill();
    // Writes of 64 KiB until one fails: the log or the database needs a block it cannot get.
    let value = vec![b'v'; 64 << 10];
    let mut acked = vec![("/before".to_string(), first.revision)];
    let mut failure = None;
    for i in 0..500 {
        let key = format!("/big/{i:04}");
        match store.write(put(&key, &value), Precondition::None).await {
            Ok(WriteOutcome::Committed(result)) => acked.push((key, result.revision)),
            Ok(other) => panic!("{key}: {other:?}"),
            Err(e) => {
                failure = Some((key, e));
                break;
            }
        }
    }
    let (failed_key, error) = failure.expect("no write failed with the store's disk full");
    let message = match &error {
        StoreError::Backend(message) => message.clone(),
        other => panic!("a write on a full disk fails with a backend error: {other:?}"),
    };
    assert!(
        message.starts_with("the store's disk is full, so writes are refused (reads still work)")
            && message.contains("No space left on device")
            && message.contains("writes resume by themselves once there is room"),
        "the refusal names the cause and what to do: {message}"
    );
    // While the disk stays full, writes keep being refused, each with the same clear cause.
    let refused = store.write(put("/refused", b"r"), Precondition::None).await;
    match refused {
        Err(StoreError::Backend(m)) => assert!(m.contains("disk is full"), "{m}"),
        other => panic!("a write while the disk is full must be refused: {other:?}"),
    }
    match store.health() {
        StoreHealth::RefusingWrites { reason } => assert!(reason.contains("disk is full")),
        other => panic!("health while the disk is full: {other:?}"),
    }
    // Reads keep working: every acknowledged write is there.
    let listed = store
        .range(RangeRequest {
            range: prefix_range(b"/"),
            ..RangeRequest::default()
        })
        .await
        .expect("a range read while the disk is full");
    for (key, revision) in &acked {
        let kv = listed
            .kvs
            .iter()
            .find(|kv| kv.key == key.as_bytes())
            .unwrap_or_else(|| panic!("{key} was acknowledged but is not listed"));
        assert_eq!(kv.mod_revision, *revision);
    }
    assert!(
        !listed.kvs.iter().any(|kv| kv.key == b"/refused"),
        "a refused write is visible"
    );

    // Free the space: the store notices by itself (it retries with backoff) and serves writes.
    std::fs::remove_file(&filler).expect("remove the filler");
    common::wait_until_serving(&store).await;
    let after = common::set(&store, "/after", "y").await;
    acked.push(("/after".to_string(), after.revision));

    // The watch saw every acknowledged write once, in order; the write whose batch failed
    // may be there only if it reached the disk whole (then once, at its own revision).
    let mut seen = Vec::new();
    while seen.last().map(|(_, r)| *r) != Some(after.revision) {
        let event = common::next_event(&mut watch).await;
        seen.push((
            String::from_utf8(event.kv.key).expect("utf-8"),
            event.kv.mod_revision,
        ));
    }
    let expected: Vec<_> = acked[1..].to_vec();
    let without_failed: Vec<_> = seen
        .iter()
        .filter(|(key, _)| *key != failed_key)
        .cloned()
        .collect();
    assert_eq!(
        without_failed, expected,
        "watch events across the full disk"
    );
    assert!(seen.iter().filter(|(key, _)| *key == failed_key).count() <= 1);

    // And everything acknowledged survives a reopen; the refused write never existed.
    store.close().await;
    drop((store, watch));
    let store = RedbStore::open(&data, options).expect("reopen");
    for (key, revision) in &acked {
        let (found, _) = store.get(key.as_bytes()).await.expect("get after reopen");
        assert_eq!(
            found.map(|kv| kv.mod_revision),
            Some(*revision),
            "{key} after reopen"
        );
    }
    assert_eq!(store.get(b"/refused").await.expect("get").0, None);
    if let (Some(kv), _) = store.get(failed_key.as_bytes()).await.expect("get") {
        assert_eq!(kv.value, value, "a failed write is whole or absent");
    }
    store.close().await;
    drop(store);
    drop(tmpfs);
}
