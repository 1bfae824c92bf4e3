//! Crash recovery: a child process writes concurrently and reports each acknowledged write,
//! the parent kills it with SIGKILL mid-flight, reopens the store, and checks that every
//! acknowledged write is there.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use finale_store::{Precondition, RedbStore, RedbStoreOptions, Store, WriteOp, WriteOutcome};

const CHILD_ENV: &str = "FINALE_STORE_CRASH_CHILD_DIR";
const TEST_NAME: &str = "kill_9_keeps_every_acknowledged_write";

#[test]
fn kill_9_keeps_every_acknowledged_write() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(dir.as_ref());
    }

    let dir = tempfile::tempdir().expect("tempdir");
    let exe = std::env::current_exe().expect("test binary");
    let mut child = Command::new(exe)
        .args([TEST_NAME, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().expect("child stdout");
    let mut lines = BufReader::new(stdout).lines();

    // Let it get well into its writes, then kill it without warning.
    let mut acked = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while acked.len() < 300 {
        assert!(Instant::now() < deadline, "child made too little progress");
        let line = lines
            .next()
            .expect("child exited early")
            .expect("read child");
        if let Some(ack) = parse_ack(&line) {
            acked.push(ack);
        }
    }
    child.kill().expect("kill child");
    // Lines already written were acknowledged before the kill.
    for line in lines.map_while(Result::ok) {
        if let Some(ack) = parse_ack(&line) {
            acked.push(ack);
        }
    }
    child.wait().expect("reap child");

    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let store = RedbStore::open(dir.path(), RedbStoreOptions::default()).expect("reopen");
        let current = store.current_revision().await.expect("revision");
        let last_acked = acked.iter().map(|(r, _)| *r).max().expect("acks");
        assert!(
            current >= last_acked,
            "revision {current} is older than acknowledged {last_acked}"
        );
        for (revision, key) in &acked {
            let (kv, _) = store.get(key.as_bytes()).await.expect("get");
            // Every key is written once (create-only), so it must still hold that write.
            let kv = kv.unwrap_or_else(|| panic!("acknowledged {key} at {revision} is missing"));
            assert_eq!(kv.mod_revision, *revision);
        }
        // History and the log are consistent up to the recovered revision.
        let mut watch = store.watch(Vec::new()..Vec::new(), 0).await.expect("watch");
        for revision in 1..=current {
            assert_eq!(common::next_event(&mut watch).await.revision(), revision);
        }
        // And the store keeps working.
        common::set(&store, "after-crash", "ok").await;
    });
}

fn parse_ack(line: &str) -> Option<(i64, String)> {
    let rest = line.strip_prefix("ACK ")?;
    let (revision, key) = rest.split_once(' ')?;
    Some((revision.parse().ok()?, key.to_string()))
}

/// Writes create-only keys from 16 tasks until killed, printing each acknowledged write.
fn child(dir: &std::path::Path) -> ! {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let store = RedbStore::open(dir, RedbStoreOptions::default()).expect("open");
        let tasks: Vec<_> = (0..16)
            .map(|task| {
                let store = store.clone();
                tokio::spawn(async move {
                    for i in 0.. {
                        let key = format!("/crash/{task}/{i}");
                        let outcome = store
                            .write(
                                WriteOp::Put {
                                    key: key.clone().into_bytes(),
                                    value: vec![b'x'; 512],
                                },
                                Precondition::MustNotExist,
                            )
                            .await
                            .expect("write");
                        if let WriteOutcome::Committed(result) = outcome {
                            // Rust's stdout is line-buffered: the line is out once printed.
                            println!("ACK {} {key}", result.revision);
                        }
                    }
                })
            })
            .collect();
        for task in tasks {
            let _ = task.await;
        }
    });
    std::process::exit(0)
}
