//! Damaged files are detected when the store opens, with a message that names the file and
//! says what to do, instead of a panic or a silent loss of acknowledged writes:
//!
//! - a flipped byte in a write-ahead log frame that later frames follow (damage in place:
//!   those frames were acknowledged) makes the open fail, naming the log and the offset;
//! - a damaged last frame is the torn tail a crash mid-append leaves, and is accepted;
//! - a flipped byte in the database file is found by redb's page checksums at open.
//!
//! The crash-time files are copies taken while a store with no checkpoint is running: the
//! state `kill -9` leaves (see `crash.rs`), reproducible byte for byte.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use finale_store::{RedbStore, RedbStoreOptions, Store, StoreError};

const KEYS: usize = 5;

fn options() -> RedbStoreOptions {
    RedbStoreOptions {
        // Every write stays in the write-ahead log: one frame per write.
        checkpoint_interval: Duration::from_secs(3600),
        cache_size: 8 << 20,
        ..RedbStoreOptions::default()
    }
}

fn key(i: usize) -> String {
    format!("/key/{i}")
}

/// A data directory as a crash leaves it after `KEYS` acknowledged writes, one log frame each.
async fn crashed_copy(into: &Path) -> PathBuf {
    let live = tempfile::tempdir().expect("tempdir");
    let store = RedbStore::open(live.path(), options()).expect("open");
    for i in 0..KEYS {
        common::set(&store, &key(i), &format!("value {i}")).await;
    }
    std::fs::create_dir_all(into).expect("mkdir");
    for name in ["store.redb", "store.redb.wal"] {
        std::fs::copy(live.path().join(name), into.join(name)).expect("copy a store file");
    }
    store.close().await;
    into.to_path_buf()
}

/// The byte offsets of the write-ahead log's frames, in order.
fn frame_offsets(wal: &[u8]) -> Vec<usize> {
    let mut offsets = Vec::new();
    let mut at = 0;
    while at + 8 <= wal.len() {
        let len = u32::from_le_bytes(wal[at..at + 4].try_into().expect("4 bytes")) as usize;
        if len == 0 {
            break;
        }
        offsets.push(at);
        at += 8 + len;
    }
    offsets
}

fn open_error(dir: &Path) -> String {
    match RedbStore::open(dir, options()) {
        Ok(_) => panic!("a damaged store at {} opened", dir.display()),
        Err(StoreError::Backend(message)) => message,
        Err(other) => panic!("unexpected error kind: {other:?}"),
    }
}

#[tokio::test]
async fn a_flipped_byte_in_the_middle_of_the_log_refuses_the_open_and_names_file_and_offset() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = crashed_copy(&root.path().join("damaged")).await;
    let wal_path = dir.join("store.redb.wal");
    let mut wal = std::fs::read(&wal_path).expect("read the log");
    let offsets = frame_offsets(&wal);
    assert_eq!(offsets.len(), KEYS, "one frame per acknowledged write");
    // A byte in the payload of the second frame: three acknowledged frames follow it.
    let damaged = offsets[1];
    wal[damaged + 8 + 12] ^= 0x40;
    std::fs::write(&wal_path, &wal).expect("write the damaged log");

    let message = open_error(&dir);
    assert!(
        message.contains(&format!(
            "the write-ahead log {} is damaged at byte offset {damaged}",
            wal_path.display()
        )) && message.contains("refuses to open rather than drop them silently")
            && message.contains("Restore the data directory from a backup")
            && message.contains(&format!("truncate -s {damaged} {}", wal_path.display())),
        "the error says what happened, where, and what to do: {message}"
    );
    // Nothing was changed by the refused open: the same error again.
    assert_eq!(open_error(&dir), message);

    // The way out it offers: cut the log at the damage, accepting the loss of what follows.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&wal_path)
        .and_then(|f| f.set_len(damaged as u64))
        .expect("truncate the log");
    let store = RedbStore::open(&dir, options()).expect("open the cut log");
    assert!(store.get(key(0).as_bytes()).await.expect("get").0.is_some());
    for i in 1..KEYS {
        assert_eq!(store.get(key(i).as_bytes()).await.expect("get").0, None);
    }
    store.close().await;
}

#[tokio::test]
async fn a_torn_last_frame_is_the_crash_case_and_opens_without_it() {
    let root = tempfile::tempdir().expect("tempdir");
    // The control: the copy itself opens with every write.
    let intact = crashed_copy(&root.path().join("intact")).await;
    let store = RedbStore::open(&intact, options()).expect("open the intact copy");
    for i in 0..KEYS {
        assert!(store.get(key(i).as_bytes()).await.expect("get").0.is_some());
    }
    store.close().await;

    let dir = crashed_copy(&root.path().join("torn")).await;
    let wal_path = dir.join("store.redb.wal");
    let mut wal = std::fs::read(&wal_path).expect("read the log");
    let last = *frame_offsets(&wal).last().expect("frames");
    // The append of the last frame stopped half way: its tail never reached the file.
    let len = u32::from_le_bytes(wal[last..last + 4].try_into().expect("4 bytes")) as usize;
    wal[last + 8 + len / 2..last + 8 + len].fill(0);
    std::fs::write(&wal_path, &wal).expect("write the torn log");

    let store = RedbStore::open(&dir, options()).expect("a torn tail opens");
    for i in 0..KEYS - 1 {
        assert!(store.get(key(i).as_bytes()).await.expect("get").0.is_some());
    }
    assert_eq!(
        store.get(key(KEYS - 1).as_bytes()).await.expect("get").0,
        None
    );
    store.close().await;
}

#[tokio::test]
async fn a_flipped_byte_in_the_database_file_refuses_the_open_with_what_to_do() {
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = "finale-corruption-marker-".repeat(40);
    let store = RedbStore::open(dir.path(), options()).expect("open");
    common::set(&store, "/marked", &marker).await;
    // A clean close checkpoints: the value is in the database file, and the log is empty.
    store.close().await;
    drop(store);

    let file = dir.path().join("store.redb");
    let mut bytes = std::fs::read(&file).expect("read the database");
    let at = bytes
        .windows(marker.len())
        .position(|w| w == marker.as_bytes())
        .expect("the value is in the database file");
    bytes[at + marker.len() / 2] ^= 0x01;
    std::fs::write(&file, &bytes).expect("write the damaged database");

    let message = open_error(dir.path());
    assert!(
        message.contains(&format!("the database file {} is damaged", file.display()))
            && message.contains("Restore the data directory from a backup"),
        "the error says what happened and what to do: {message}"
    );
}
