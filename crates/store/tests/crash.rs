//! Crash recovery: a child process writes concurrently (puts, compare-and-swaps, deletes,
//! compactions, with frequent checkpoints) and reports each acknowledged operation; the parent
//! kills it with SIGKILL mid-flight, reopens the store, and checks that every acknowledged
//! operation is there, at its revision, and that the latest state agrees with the history.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use finale_store::{
    EventKind, Precondition, RedbStore, RedbStoreOptions, Store, WriteOp, WriteOutcome,
};

const CHILD_ENV: &str = "FINALE_STORE_CRASH_CHILD_DIR";
const TEST_NAME: &str = "kill_9_keeps_every_acknowledged_write";
const TASKS: usize = 16;
const KEYS_PER_TASK: usize = 8;

/// One acknowledged write, as the child reports it.
#[derive(Debug)]
struct Ack {
    revision: i64,
    kind: EventKind,
    key: String,
    value: String,
}

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

    // Let it get well into its writes (past a few checkpoints), then kill it without warning.
    let mut acks = Vec::new();
    let mut compacted = 0;
    let mut parse = |line: &str, acks: &mut Vec<Ack>| {
        let parts: Vec<&str> = line.splitn(5, ' ').collect();
        match parts.as_slice() {
            ["ACK", revision, kind, key, value] => acks.push(Ack {
                revision: revision.parse().expect("revision"),
                kind: if *kind == "P" {
                    EventKind::Put
                } else {
                    EventKind::Delete
                },
                key: key.to_string(),
                value: value.to_string(),
            }),
            ["COMPACTED", revision] => compacted = revision.parse().expect("revision"),
            _ => {}
        }
    };
    let started = Instant::now();
    while acks.len() < 1500 || started.elapsed() < Duration::from_millis(300) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "child made too little progress"
        );
        let line = lines
            .next()
            .expect("child exited early")
            .expect("read child");
        parse(&line, &mut acks);
    }
    child.kill().expect("kill child");
    // Lines already written were acknowledged before the kill.
    for line in lines.map_while(Result::ok) {
        parse(&line, &mut acks);
    }
    child.wait().expect("reap child");

    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let store = RedbStore::open(dir.path(), RedbStoreOptions::default()).expect("reopen");
        let current = store.current_revision().await.expect("revision");
        let last_acked = acks.iter().map(|a| a.revision).max().expect("acks");
        assert!(
            current >= last_acked,
            "revision {current} is older than acknowledged {last_acked}"
        );
        let store_compacted = store.compacted_revision().await.expect("compacted");
        assert!(
            store_compacted >= compacted,
            "compaction to {compacted} was acknowledged, the store says {store_compacted}"
        );

        // Every acknowledged write is in the history at its revision.
        let after = store_compacted;
        let mut watch = store
            .watch(Vec::new()..Vec::new(), after)
            .await
            .expect("watch");
        let mut events = BTreeMap::new();
        for revision in after + 1..=current {
            let event = common::next_event(&mut watch).await;
            assert_eq!(event.revision(), revision, "history has no gap");
            events.insert(revision, event);
        }
        for ack in acks.iter().filter(|a| a.revision > after) {
            let event = &events[&ack.revision];
            assert_eq!(event.kind, ack.kind, "{ack:?}");
            assert_eq!(event.kv.key, ack.key.as_bytes(), "{ack:?}");
            if ack.kind == EventKind::Put {
                assert_eq!(event.kv.value, ack.value.as_bytes(), "{ack:?}");
            }
        }

        // The latest state agrees with the last change of each key in the history.
        let mut last: HashMap<Vec<u8>, &finale_store::WatchEvent> = HashMap::new();
        for event in events.values() {
            last.insert(event.kv.key.clone(), event);
        }
        for (key, event) in last {
            let (kv, _) = store.get(&key).await.expect("get");
            match event.kind {
                EventKind::Put => assert_eq!(kv.as_ref(), Some(&event.kv)),
                EventKind::Delete => assert_eq!(kv, None),
            }
        }

        // And the store keeps working.
        common::set(&store, "after-crash", "ok").await;
    });
}

/// Writes from 16 tasks until killed, printing each acknowledged write and compaction.
fn child(dir: &std::path::Path) -> ! {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let options = RedbStoreOptions {
            // Checkpoints during the run, so a kill can land before, during or after one.
            checkpoint_interval: Duration::from_millis(20),
            ..Default::default()
        };
        let store = RedbStore::open(dir, options).expect("open");
        let tasks: Vec<_> = (0..TASKS)
            .map(|task| {
                let store = store.clone();
                tokio::spawn(async move {
                    // This task's keys and their mod_revision (0 = absent), as it last saw them.
                    let mut revisions = [0i64; KEYS_PER_TASK];
                    for i in 0u64.. {
                        let slot = (i as usize) % KEYS_PER_TASK;
                        let key = format!("/crash/{task}/{slot}");
                        let known = revisions[slot];
                        let value = format!("{task}-{i}");
                        let (op, kind) = if i % 5 == 4 && known != 0 {
                            (
                                WriteOp::Delete {
                                    key: key.clone().into_bytes(),
                                },
                                "D",
                            )
                        } else {
                            (
                                WriteOp::Put {
                                    key: key.clone().into_bytes(),
                                    value: value.clone().into_bytes(),
                                },
                                "P",
                            )
                        };
                        let outcome = store
                            .write(op, Precondition::ModRevision(known))
                            .await
                            .expect("write");
                        let WriteOutcome::Committed(result) = outcome else {
                            panic!("only this task writes {key}");
                        };
                        revisions[slot] = if kind == "D" { 0 } else { result.revision };
                        // Rust's stdout is line-buffered: the line is out once printed.
                        println!("ACK {} {kind} {key} {value}", result.revision);

                        if task == 0 && i % 50 == 49 {
                            let target = result.revision - 100;
                            if target > store.compacted_revision().await.expect("compacted")
                                && store.compact(target).await.is_ok()
                            {
                                println!("COMPACTED {target}");
                            }
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
