//! Durability under power loss: the real `finale server` runs with its data directory on
//! `finale-faultfs`, a FUSE filesystem that loses everything not fsynced when the power is
//! cut. Concurrent clients create ConfigMaps; the power is cut in the middle of the load
//! and the server killed; the disk image is mounted again and the server restarted on it.
//! Every acknowledged create must be there, complete, at its resourceVersion; nothing
//! unacknowledged may be half there; the server must start cleanly and go on.
//!
//! `kill -9` alone (`crash.rs`) leaves the page cache intact, so it cannot tell a server
//! that syncs from one that does not. The negative control below runs the same scenario on
//! a filesystem told to treat fsync as a no-op and asserts that acknowledged creates are
//! lost: the harness can see a missing fsync.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Api, resource_version};
use finale_e2e::FinaleServer;
use finale_faultfs::{FaultFs, LostAtCut, PowerCut};
use serde_json::{Value, json};

const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";
const WRITERS: usize = 8;
const LOAD: Duration = Duration::from_secs(2);
/// Each scenario (start, load, cut, restart, verify) must fit in this.
const BUDGET: Duration = Duration::from_secs(50);

/// The data of the ConfigMap `name`: derived from the name alone, so that any object found
/// after recovery can be checked, acknowledged or not.
fn expected_data(name: &str) -> Value {
    json!({
        "name": name,
        "payload": name.repeat(1 + 600 / name.len()),
        "tail": format!("end-of-{name}"),
    })
}

fn manifest(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"suite": "powerloss"}},
        "data": expected_data(name),
    })
}

#[derive(Default)]
struct Writes {
    /// Name → resourceVersion of every create answered 201 (before or after the cut: a
    /// 201 after it was synced before it).
    acked: BTreeMap<String, i64>,
    /// Creates without an answer, or failed once the cut had begun.
    uncertain: BTreeSet<String>,
    /// Creates refused before the cut: a server bug.
    refused: Vec<String>,
}

/// One writer: creates ConfigMaps until `stop`, classifying every answer.
fn writer(api: Api, id: usize, stop: Arc<AtomicBool>, cutting: Arc<AtomicBool>) -> Writes {
    let mut writes = Writes::default();
    // Bounded even if `stop` never came.
    for seq in 0..100_000 {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let name = format!("w{id:02}-{seq:05}");
        // Read before the request: an error seen after it may stem from the cut only if the
        // cut had begun by the time the answer came.
        let answer = api.post_json(CONFIGMAPS, &manifest(&name));
        let after_cut = cutting.load(Ordering::SeqCst);
        match answer {
            Ok(response) if response.status == 201 => {
                writes
                    .acked
                    .insert(name, resource_version(&response.json()));
            }
            Ok(response) if !after_cut => writes.refused.push(format!(
                "{name}: HTTP {} {}",
                response.status, response.body
            )),
            Ok(_) | Err(_) => {
                writes.uncertain.insert(name);
                if after_cut {
                    break;
                }
            }
        }
    }
    writes
}

/// What one run saw, after the restart on the power-cut disk.
struct Recovery {
    writes: Writes,
    /// Acknowledged creates missing after the restart.
    lost: Vec<String>,
    /// Every ConfigMap of the test found after the restart.
    stored: BTreeMap<String, Value>,
    lost_at_cut: LostAtCut,
    /// fsyncs of files the server made during the load (ignored or not).
    syncs_during_load: u64,
    api: Api,
    server: FinaleServer,
    /// Kept mounted until the checks are done (unmounted on drop, after the server).
    _fs: FaultFs,
    _dir: tempfile::TempDir,
}

impl Recovery {
    fn log(&self) -> String {
        format!(
            "\n--- server log (last 60 lines) ---\n{}",
            self.server.log_tail(60)
        )
    }
}

/// Starts the server on a fresh faultfs, runs the write load, cuts the power in the middle
/// of it (with fsync ignored from the start of the load if `fsync_ignored`), kills the
/// server, mounts the disk image and restarts the server on it.
fn load_cut_restart(fsync_ignored: bool) -> Recovery {
    let dir = tempfile::tempdir().expect("tempdir");
    let mnt = dir.path().join("disk");
    std::fs::create_dir(&mnt).expect("mountpoint");
    let fs = FaultFs::mount(&mnt).expect("mount faultfs (needs /dev/fuse and root)");
    // The server creates its data directory itself, on the faultfs; its log goes elsewhere
    // (a log on the cut disk would lose its last lines exactly when they matter).
    let data_dir = mnt.join("finale");
    let log = dir.path().join("server.log");
    let mut server =
        FinaleServer::start_logging_to(common::binary(), &data_dir, "127.0.0.1:0", &[], &log)
            .expect("start finale server on faultfs");
    if fsync_ignored {
        fs.ignore_fsync(true);
    }
    let syncs_before = fs.file_syncs();

    let stop = Arc::new(AtomicBool::new(false));
    let cutting = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..WRITERS)
        .map(|id| {
            let api = Api::new(&server).expect("client");
            let (stop, cutting) = (stop.clone(), cutting.clone());
            std::thread::spawn(move || writer(api, id, stop, cutting))
        })
        .collect();
    std::thread::sleep(LOAD);
    cutting.store(true, Ordering::SeqCst);
    let image = fs.cut_power(PowerCut::DropUnsynced);
    server.kill9().expect("kill -9 the server");
    stop.store(true, Ordering::SeqCst);
    let mut writes = Writes::default();
    for handle in writers {
        let w = handle.join().expect("writer thread panicked");
        writes.acked.extend(w.acked);
        writes.uncertain.extend(w.uncertain);
        writes.refused.extend(w.refused);
    }
    let syncs_during_load = fs.file_syncs() - syncs_before;
    fs.unmount().expect("unmount the cut disk");

    // The machine comes back: the disk holds what was durable at the cut.
    let fs = FaultFs::mount_image(&image, &mnt).expect("mount the disk image");
    if let Err(e) = server.restart() {
        panic!(
            "the server did not start on the power-cut disk: {e:#}\n--- log ---\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }
    let api = Api::new(&server).expect("client after restart");
    let list = api.get(CONFIGMAPS).expect("list after restart");
    assert_eq!(list.status, 200, "{}", list.body);
    let stored: BTreeMap<String, Value> = list.json()["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|item| {
            let name = item["metadata"]["name"].as_str().unwrap_or_default();
            (name.to_string(), item.clone())
        })
        .collect();
    let lost = writes
        .acked
        .keys()
        .filter(|n| !stored.contains_key(*n))
        .cloned()
        .collect();
    Recovery {
        writes,
        lost,
        stored,
        lost_at_cut: image.lost,
        syncs_during_load,
        api,
        server,
        _fs: fs,
        _dir: dir,
    }
}

#[test]
fn acknowledged_creates_survive_a_power_cut_mid_load() {
    let started = Instant::now();
    let run = load_cut_restart(false);
    let log = run.log();
    assert!(
        run.writes.refused.is_empty(),
        "creates refused before the cut:\n{}{log}",
        run.writes.refused.join("\n")
    );
    assert!(
        !run.writes.acked.is_empty() && run.syncs_during_load > 0,
        "precondition: creates were acknowledged and synced during the load{log}"
    );
    eprintln!(
        "{} creates acknowledged, {} in flight at the cut, {} file fsyncs during the load; \
         the cut dropped {:?}",
        run.writes.acked.len(),
        run.writes.uncertain.len(),
        run.syncs_during_load,
        run.lost_at_cut
    );

    // Every acknowledged create survived, at the resourceVersion it was acknowledged with.
    assert!(
        run.lost.is_empty(),
        "{} of {} acknowledged creates lost in the power cut, e.g. {:?}{log}",
        run.lost.len(),
        run.writes.acked.len(),
        &run.lost[..run.lost.len().min(10)]
    );
    let mut list_rv = 0;
    for (name, object) in &run.stored {
        if let Some(rv) = run.writes.acked.get(name) {
            assert_eq!(resource_version(object), *rv, "{name} moved revision");
        } else {
            assert!(
                run.writes.uncertain.contains(name),
                "{name} is stored but was never written{log}"
            );
        }
        // Whole or absent: every stored object is exactly what its writer sent.
        assert_eq!(object["data"], expected_data(name), "{name}: damaged data");
        assert_eq!(object["metadata"]["labels"]["suite"], "powerloss", "{name}");
        for field in ["uid", "creationTimestamp", "resourceVersion"] {
            assert!(
                object["metadata"][field]
                    .as_str()
                    .is_some_and(|v| !v.is_empty()),
                "{name}: metadata.{field} missing: {object}"
            );
        }
        list_rv = list_rv.max(resource_version(object));
    }

    // The store opened cleanly and goes on: a new write gets a revision above everything
    // acknowledged before the cut, and the system namespaces are intact.
    let max_acked = *run.writes.acked.values().max().expect("acks");
    let probe = run
        .api
        .post_json(CONFIGMAPS, &common::configmap("probe", &[]))
        .expect("probe create");
    assert_eq!(probe.status, 201, "{}{log}", probe.body);
    let probe_rv = resource_version(&probe.json());
    assert!(
        probe_rv > max_acked && probe_rv > list_rv,
        "a new write got resourceVersion {probe_rv}; {max_acked} was acknowledged before the cut"
    );
    let namespaces = run
        .api
        .get("/api/v1/namespaces")
        .expect("namespaces")
        .json();
    assert_eq!(
        namespaces["items"].as_array().map(Vec::len),
        Some(4),
        "{namespaces}"
    );
    assert!(
        started.elapsed() < BUDGET,
        "took {:?}; budget {BUDGET:?}",
        started.elapsed()
    );
}

/// The same scenario with every fsync turned into a no-op from the start of the load: the
/// harness must see acknowledged creates vanish, or the test above proves nothing.
#[test]
fn negative_control_with_fsync_ignored_acknowledged_creates_are_lost() {
    let started = Instant::now();
    let run = load_cut_restart(true);
    let log = run.log();
    assert!(
        !run.writes.acked.is_empty() && run.syncs_during_load > 0,
        "precondition: creates were acknowledged, and the server called fsync (ignored) \
         during the load{log}"
    );
    eprintln!(
        "fsync ignored: {} of {} acknowledged creates lost; the cut dropped {:?}",
        run.lost.len(),
        run.writes.acked.len(),
        run.lost_at_cut
    );
    assert!(
        !run.lost.is_empty(),
        "with fsync ignored, all {} acknowledged creates survived the power cut: the \
         harness cannot see a missing fsync{log}",
        run.writes.acked.len()
    );
    // Losing unsynced writes is all it does: the server still starts and serves.
    let probe = run
        .api
        .post_json(CONFIGMAPS, &common::configmap("probe", &[]))
        .expect("probe create");
    assert_eq!(probe.status, 201, "{}{log}", probe.body);
    assert!(
        started.elapsed() < BUDGET,
        "took {:?}; budget {BUDGET:?}",
        started.elapsed()
    );
}
