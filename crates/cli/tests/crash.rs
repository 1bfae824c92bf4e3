//! Durability under `kill -9`: every write the server acknowledged (create, update, delete,
//! the start of a finalizer-guarded deletion) survives a crash in the middle of a concurrent
//! load, complete and intact; unacknowledged writes are all-or-nothing; and the server
//! recovers cleanly again and again on the same data directory, even when the crash hit its
//! very first start.
//!
//! `kill -9` loses the process, not the page cache: these tests catch recovery and
//! acknowledgement-ordering bugs, not missing fsyncs; `powerloss.rs` catches those.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Api, Env, resource_version};
use serde_json::{Value, json};

const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";
const WRITERS: usize = 16;
const LOAD: Duration = Duration::from_secs(2);
const CYCLES: usize = 3;
/// The whole test (three load/kill/restart/verify cycles) must fit in this.
const BUDGET: Duration = Duration::from_secs(45);

/// The data a writer puts in the ConfigMap called `name`: derived from the name alone, so a
/// reader can check any object it finds, acknowledged or not.
fn expected_data(name: &str) -> Value {
    json!({
        "name": name,
        "payload": name.repeat(1 + 900 / name.len()),
        "tail": format!("end-of-{name}"),
    })
}

fn manifest(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"suite": "crash"}},
        "data": expected_data(name),
    })
}

#[derive(Default)]
struct Outcome {
    /// Name → resourceVersion of every create answered 201.
    acked: BTreeMap<String, i64>,
    /// Creates whose answer never arrived (in flight at the kill, or failed in transport).
    uncertain: BTreeSet<String>,
    /// Creates answered with anything but 201 before the kill: a server bug.
    refused: Vec<String>,
}

/// One writer: creates ConfigMaps until `stop`, recording what was acknowledged.
fn writer(
    api: Api,
    cycle: usize,
    id: usize,
    stop: Arc<AtomicBool>,
    killed: Arc<AtomicBool>,
) -> Outcome {
    let mut outcome = Outcome::default();
    let mut seq = 0;
    while !stop.load(Ordering::SeqCst) {
        let name = format!("c{cycle}-w{id:02}-{seq:05}");
        seq += 1;
        match api.post_json(CONFIGMAPS, &manifest(&name)) {
            Ok(response) if response.status == 201 => {
                let object = response.json();
                assert_eq!(object["metadata"]["name"], name.as_str());
                outcome.acked.insert(name, resource_version(&object));
            }
            Ok(response) => {
                if killed.load(Ordering::SeqCst) {
                    outcome.uncertain.insert(name);
                } else {
                    outcome.refused.push(format!(
                        "{name}: HTTP {} {}",
                        response.status, response.body
                    ));
                }
            }
            Err(_) => {
                outcome.uncertain.insert(name);
                if killed.load(Ordering::SeqCst) {
                    break;
                }
                // A transport error before the kill: keep going, the name stays uncertain.
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    outcome
}

/// Runs the write load for `LOAD`, then `kill -9`s the server while the writers are busy.
fn load_then_kill(env: &mut Env, cycle: usize) -> Outcome {
    let stop = Arc::new(AtomicBool::new(false));
    let killed = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..WRITERS)
        .map(|id| {
            let api = Api::new(&env.server).expect("client");
            let (stop, killed) = (Arc::clone(&stop), Arc::clone(&killed));
            std::thread::spawn(move || writer(api, cycle, id, stop, killed))
        })
        .collect();
    std::thread::sleep(LOAD);
    killed.store(true, Ordering::SeqCst);
    env.server.kill9().expect("kill -9 the server");
    stop.store(true, Ordering::SeqCst);
    let mut all = Outcome::default();
    for handle in writers {
        let outcome = handle.join().expect("writer thread panicked");
        all.acked.extend(outcome.acked);
        all.uncertain.extend(outcome.uncertain);
        all.refused.extend(outcome.refused);
    }
    all
}

/// Checks one stored object against what its writer sent.
fn check_object(object: &Value) -> Result<(), String> {
    let name = object["metadata"]["name"]
        .as_str()
        .ok_or_else(|| format!("no name: {object}"))?;
    if object["kind"] != "ConfigMap" || object["apiVersion"] != "v1" {
        return Err(format!("{name}: wrong type meta: {object}"));
    }
    if object["data"] != expected_data(name) {
        return Err(format!("{name}: data is not what was written: {object}"));
    }
    if object["metadata"]["labels"]["suite"] != "crash" {
        return Err(format!("{name}: labels lost: {object}"));
    }
    for field in ["uid", "creationTimestamp", "resourceVersion"] {
        if object["metadata"][field].as_str().is_none_or(str::is_empty) {
            return Err(format!("{name}: metadata.{field} missing: {object}"));
        }
    }
    if object["metadata"]["namespace"] != "default" {
        return Err(format!("{name}: wrong namespace: {object}"));
    }
    Ok(())
}

#[test]
fn acknowledged_creates_survive_repeated_kill_9_mid_load() {
    let started = Instant::now();
    let mut env = Env::start();
    // Name → resourceVersion of every acknowledged create, over all cycles.
    let mut acked: BTreeMap<String, i64> = BTreeMap::new();
    let mut uncertain: BTreeSet<String> = BTreeSet::new();
    let mut probes: BTreeSet<String> = BTreeSet::new();

    for cycle in 1..=CYCLES {
        let outcome = load_then_kill(&mut env, cycle);
        assert!(
            outcome.refused.is_empty(),
            "cycle {cycle}: creates refused before the kill:\n{}{}",
            outcome.refused.join("\n"),
            env.log()
        );
        assert!(
            !outcome.acked.is_empty(),
            "cycle {cycle}: no create was acknowledged in {LOAD:?}{}",
            env.log()
        );
        eprintln!(
            "cycle {cycle}: {} acknowledged, {} in flight at the kill",
            outcome.acked.len(),
            outcome.uncertain.len()
        );
        acked.extend(outcome.acked);
        uncertain.extend(outcome.uncertain);

        // Recovery: the server starts again on the same data directory and address.
        let restart = Instant::now();
        env.server
            .restart()
            .unwrap_or_else(|e| panic!("cycle {cycle}: the server did not recover: {e:#}"));
        eprintln!("cycle {cycle}: restarted in {:?}", restart.elapsed());
        let api = env.api();

        // Every stored object is complete and exactly what was written.
        let list = api.get(CONFIGMAPS).expect("list after restart");
        assert_eq!(
            list.status,
            200,
            "cycle {cycle}: {}{}",
            list.body,
            env.log()
        );
        let list = list.json();
        let list_rv = resource_version(&list);
        let mut stored: BTreeMap<String, Value> = BTreeMap::new();
        for item in list["items"].as_array().expect("items") {
            let name = item["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            // List items carry no type meta (as upstream); add it to compare with single GETs.
            let mut typed = item.clone();
            typed["kind"] = json!("ConfigMap");
            typed["apiVersion"] = json!("v1");
            if !probes.contains(&name) {
                if let Err(problem) = check_object(&typed) {
                    panic!("cycle {cycle}: corrupt object after recovery: {problem}");
                }
                assert!(
                    acked.contains_key(&name) || uncertain.contains(&name),
                    "cycle {cycle}: {name} exists but was never written"
                );
            }
            assert!(
                resource_version(item) <= list_rv,
                "cycle {cycle}: {name} is newer than its list"
            );
            stored.insert(name, typed);
        }

        // Every acknowledged create is there, with the resourceVersion that was acknowledged.
        let lost: Vec<&String> = acked.keys().filter(|n| !stored.contains_key(*n)).collect();
        assert!(
            lost.is_empty(),
            "cycle {cycle}: {} of {} acknowledged creates lost after kill -9, e.g. {:?}{}",
            lost.len(),
            acked.len(),
            &lost[..lost.len().min(10)],
            env.log()
        );
        for (name, rv) in &acked {
            assert_eq!(
                resource_version(&stored[name]),
                *rv,
                "cycle {cycle}: {name} changed its resourceVersion"
            );
        }
        let in_flight_kept = uncertain.iter().filter(|n| stored.contains_key(*n)).count();
        eprintln!(
            "cycle {cycle}: {} objects stored; {in_flight_kept} of {} unacknowledged creates committed",
            stored.len(),
            uncertain.len()
        );

        // Single reads agree with the list: the newest acknowledged object of each writer
        // (the likeliest to be lost) and a sample of the rest.
        let mut newest: BTreeMap<&str, &String> = BTreeMap::new();
        for name in acked.keys() {
            newest.insert(&name[..name.rfind('-').unwrap_or(0)], name);
        }
        let sample = newest
            .values()
            .copied()
            .chain(acked.keys().step_by(97))
            .collect::<BTreeSet<_>>();
        for name in sample {
            let response = api.get(&format!("{CONFIGMAPS}/{name}")).expect("get");
            assert_eq!(
                response.status, 200,
                "cycle {cycle}: GET {name}: {}",
                response.body
            );
            let object = response.json();
            check_object(&object).unwrap_or_else(|p| panic!("cycle {cycle}: {p}"));
            assert!(
                object == stored[name.as_str()],
                "cycle {cycle}: GET and list disagree on {name}:\n{object}\n{}",
                stored[name.as_str()]
            );
        }

        // A new write gets a resourceVersion above everything acknowledged before the crash.
        let max_acked = *acked.values().max().expect("acks");
        let probe = format!("probe-{cycle}");
        let response = api
            .post_json(
                CONFIGMAPS,
                &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": probe}}),
            )
            .expect("probe create");
        assert_eq!(
            response.status,
            201,
            "cycle {cycle}: {}{}",
            response.body,
            env.log()
        );
        let probe_rv = resource_version(&response.json());
        assert!(
            probe_rv > max_acked && probe_rv > list_rv,
            "cycle {cycle}: a new write got resourceVersion {probe_rv}, but {max_acked} was acknowledged and the list was at {list_rv}"
        );
        probes.insert(probe.clone());

        // The watch history survived too: watching from the last acknowledged revision sees
        // the probe (and only well-formed events).
        let watch = api
            .get(&format!(
                "{CONFIGMAPS}?watch=true&resourceVersion={max_acked}&timeoutSeconds=1"
            ))
            .expect("watch after restart");
        assert_eq!(watch.status, 200, "cycle {cycle}: {}", watch.body);
        let events: Vec<Value> = watch
            .body
            .lines()
            .map(|l| {
                serde_json::from_str(l).unwrap_or_else(|e| panic!("bad watch line {l:?}: {e}"))
            })
            .collect();
        assert!(
            events.iter().all(|e| e["type"] != "ERROR"),
            "cycle {cycle}: the watch from {max_acked} failed: {events:?}"
        );
        assert!(
            events
                .iter()
                .any(|e| e["type"] == "ADDED" && e["object"]["metadata"]["name"] == probe.as_str()),
            "cycle {cycle}: the watch from {max_acked} missed the probe: {events:?}"
        );
        for event in &events {
            let rv = resource_version(&event["object"]);
            assert!(
                rv > max_acked,
                "cycle {cycle}: the watch replayed {rv} <= {max_acked}"
            );
        }
        // The system namespaces came through every crash unharmed.
        let namespaces = api.get("/api/v1/namespaces").expect("namespaces").json();
        assert_eq!(
            namespaces["items"].as_array().map(Vec::len),
            Some(4),
            "{namespaces}"
        );
    }
    assert!(
        started.elapsed() < BUDGET,
        "the crash test took {:?}; budget {BUDGET:?}",
        started.elapsed()
    );
}

/// What one updater thread saw acknowledged.
#[derive(Default)]
struct UpdateOutcome {
    /// Counter object → (counter, resourceVersion) of the last acknowledged update.
    acked: BTreeMap<String, (u64, i64)>,
    /// Counter object → the highest counter ever sent (acknowledged or not).
    attempted: BTreeMap<String, u64>,
    /// Churn objects whose create was acknowledged.
    created: BTreeSet<String>,
    /// Churn objects whose delete was acknowledged.
    deleted: BTreeSet<String>,
    /// Churn objects whose delete was sent but not answered.
    delete_uncertain: BTreeSet<String>,
    refused: Vec<String>,
}

fn counter_of(object: &Value) -> u64 {
    object["data"]["counter"]
        .as_str()
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no counter in {object}"))
}

/// One updater: round after round, patch one of its counter objects, create a churn object
/// and delete the one it created the round before.
fn updater(
    api: Api,
    id: usize,
    objects: usize,
    stop: Arc<AtomicBool>,
    killed: Arc<AtomicBool>,
) -> UpdateOutcome {
    let mut outcome = UpdateOutcome::default();
    let mut refused = Vec::new();
    let mut previous: Option<String> = None;
    for round in 0u64.. {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        // 1. Update a counter object.
        let name = format!("u{id}-{}", round as usize % objects);
        let counter = outcome.attempted.get(&name).copied().unwrap_or(0) + 1;
        outcome.attempted.insert(name.clone(), counter);
        let patch = json!({"data": {"counter": counter.to_string()}});
        match api.request(
            reqwest::Method::PATCH,
            &format!("{CONFIGMAPS}/{name}"),
            Some("application/merge-patch+json"),
            Some(patch.to_string().into_bytes()),
        ) {
            Ok(r) if r.status == 200 => {
                let object = r.json();
                assert_eq!(counter_of(&object), counter);
                outcome
                    .acked
                    .insert(name, (counter, resource_version(&object)));
            }
            Ok(r) if !killed.load(Ordering::SeqCst) => {
                outcome_refused(&mut refused, &format!("PATCH {name}"), &r)
            }
            Ok(_) => {}
            Err(_) if killed.load(Ordering::SeqCst) => break,
            Err(_) => {}
        }
        // 2. Create a churn object.
        let churn = format!("churn{id}-{round}");
        match api.post_json(CONFIGMAPS, &common::configmap(&churn, &[("round", "x")])) {
            Ok(r) if r.status == 201 => {
                outcome.created.insert(churn.clone());
            }
            Ok(r) if !killed.load(Ordering::SeqCst) => {
                outcome_refused(&mut refused, &format!("POST {churn}"), &r)
            }
            Ok(_) => {}
            Err(_) if killed.load(Ordering::SeqCst) => break,
            Err(_) => {}
        }
        // 3. Delete the previous round's churn object.
        if let Some(doomed) = previous.take().filter(|d| outcome.created.contains(d)) {
            let path = format!("{CONFIGMAPS}/{doomed}");
            match api.request(reqwest::Method::DELETE, &path, None, None) {
                Ok(r) if r.status == 200 => {
                    outcome.deleted.insert(doomed);
                }
                Ok(r) if !killed.load(Ordering::SeqCst) => {
                    outcome_refused(&mut refused, &format!("DELETE {doomed}"), &r)
                }
                Ok(_) => {
                    outcome.delete_uncertain.insert(doomed);
                }
                Err(_) => {
                    outcome.delete_uncertain.insert(doomed);
                    if killed.load(Ordering::SeqCst) {
                        break;
                    }
                }
            }
        }
        previous = Some(churn);
    }
    outcome.refused = refused;
    outcome
}

fn outcome_refused(refused: &mut Vec<String>, what: &str, response: &common::Response) {
    refused.push(format!("{what}: {} {}", response.status, response.body));
}

#[test]
fn acknowledged_updates_and_deletes_survive_kill_9_mid_load() {
    const UPDATERS: usize = 8;
    const OBJECTS_PER_UPDATER: usize = 4;
    let mut env = Env::start();
    let api = env.api();
    for id in 0..UPDATERS {
        for n in 0..OBJECTS_PER_UPDATER {
            let body = common::configmap(&format!("u{id}-{n}"), &[("counter", "0")]);
            assert_eq!(api.post_json(CONFIGMAPS, &body).unwrap().status, 201);
        }
    }

    let stop = Arc::new(AtomicBool::new(false));
    let killed = Arc::new(AtomicBool::new(false));
    let updaters: Vec<_> = (0..UPDATERS)
        .map(|id| {
            let api = env.api();
            let (stop, killed) = (Arc::clone(&stop), Arc::clone(&killed));
            std::thread::spawn(move || updater(api, id, OBJECTS_PER_UPDATER, stop, killed))
        })
        .collect();
    std::thread::sleep(LOAD);
    killed.store(true, Ordering::SeqCst);
    env.server.kill9().expect("kill -9");
    stop.store(true, Ordering::SeqCst);
    let outcomes: Vec<UpdateOutcome> = updaters
        .into_iter()
        .map(|h| h.join().expect("updater panicked"))
        .collect();
    let refused: Vec<&String> = outcomes.iter().flat_map(|o| &o.refused).collect();
    assert!(
        refused.is_empty(),
        "writes refused before the kill: {refused:?}{}",
        env.log()
    );
    let acked_updates: usize = outcomes.iter().map(|o| o.acked.len()).sum();
    let acked_deletes: usize = outcomes.iter().map(|o| o.deleted.len()).sum();
    assert!(
        acked_updates > 0 && acked_deletes > 0,
        "no load{}",
        env.log()
    );

    env.server
        .restart()
        .unwrap_or_else(|e| panic!("the server did not recover: {e:#}"));
    let api = env.api();
    let list = api.get(CONFIGMAPS).unwrap().json();
    let stored: BTreeMap<String, Value> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| {
            (
                i["metadata"]["name"].as_str().unwrap().to_string(),
                i.clone(),
            )
        })
        .collect();
    for outcome in &outcomes {
        for (name, (counter, rv)) in &outcome.acked {
            let object = stored
                .get(name)
                .unwrap_or_else(|| panic!("{name} vanished after kill -9{}", env.log()));
            let (stored_counter, stored_rv) = (counter_of(object), resource_version(object));
            assert!(
                stored_counter >= *counter && stored_rv >= *rv,
                "{name}: update {counter} (resourceVersion {rv}) was acknowledged, but after the crash it is at {stored_counter} ({stored_rv})"
            );
            assert!(
                stored_counter <= outcome.attempted[name],
                "{name}: counter {stored_counter} was never written"
            );
            if stored_rv == *rv {
                assert_eq!(
                    stored_counter, *counter,
                    "{name}: same revision, other data"
                );
            }
        }
        for name in &outcome.deleted {
            assert!(
                !stored.contains_key(name),
                "{name}: its delete was acknowledged but it is back after kill -9"
            );
        }
        for name in &outcome.created {
            if !outcome.deleted.contains(name) && !outcome.delete_uncertain.contains(name) {
                assert!(
                    stored.contains_key(name),
                    "{name}: its create was acknowledged and it was never deleted, but it is gone"
                );
            }
        }
    }
    let unanswered: usize = outcomes.iter().map(|o| o.delete_uncertain.len()).sum();
    eprintln!(
        "{acked_updates} counters with acknowledged updates, {acked_deletes} acknowledged deletes, {unanswered} deletes in flight at the kill: all consistent"
    );
}

#[test]
fn terminating_objects_stay_terminating_across_kill_9_and_their_removal_is_durable() {
    let mut env = Env::start();
    let api = env.api();
    let names: Vec<String> = (0..20).map(|n| format!("guarded-{n}")).collect();
    let mut deletion_timestamps = BTreeMap::new();
    for name in &names {
        let body = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "finalizers": ["example.com/cleanup"]},
            "data": {"k": "v"},
        });
        assert_eq!(api.post_json(CONFIGMAPS, &body).unwrap().status, 201);
        let deleted = api
            .request(
                reqwest::Method::DELETE,
                &format!("{CONFIGMAPS}/{name}"),
                None,
                None,
            )
            .unwrap();
        assert_eq!(deleted.status, 200, "{}", deleted.body);
        let object = deleted.json();
        let timestamp = object["metadata"]["deletionTimestamp"].clone();
        assert!(timestamp.is_string(), "terminating: {object}");
        deletion_timestamps.insert(name.clone(), timestamp);
    }

    env.server.kill9().expect("kill -9");
    env.server.restart().unwrap_or_else(|e| panic!("{e:#}"));
    let api = env.api();
    for name in &names {
        let object = api.get(&format!("{CONFIGMAPS}/{name}")).unwrap();
        assert_eq!(
            object.status, 200,
            "{name} lost while terminating: {}",
            object.body
        );
        let object = object.json();
        assert_eq!(
            object["metadata"]["deletionTimestamp"], deletion_timestamps[name],
            "{name}: the deletion must survive the crash unchanged"
        );
        assert_eq!(
            object["metadata"]["finalizers"],
            json!(["example.com/cleanup"])
        );
    }

    // The finalizer goes; every object is then removed, durably.
    for name in &names[..10] {
        let patched = api
            .request(
                reqwest::Method::PATCH,
                &format!("{CONFIGMAPS}/{name}"),
                Some("application/json-patch+json"),
                Some(br#"[{"op":"remove","path":"/metadata/finalizers"}]"#.to_vec()),
            )
            .unwrap();
        assert_eq!(patched.status, 200, "{}", patched.body);
    }
    env.server.kill9().expect("kill -9");
    env.server.restart().unwrap_or_else(|e| panic!("{e:#}"));
    let left = env.api().configmap_names("default");
    let expected: Vec<String> = names[10..].to_vec();
    let mut left_sorted = left.clone();
    left_sorted.sort();
    let mut expected_sorted = expected.clone();
    expected_sorted.sort();
    assert_eq!(
        left_sorted, expected_sorted,
        "objects whose last finalizer was removed are gone for good; the others still wait"
    );
}

/// Starts `finale server` on `data_dir` and `kill -9`s it after `delay`.
fn start_and_kill_after(data_dir: &std::path::Path, delay: Duration) {
    let mut child = std::process::Command::new(common::binary())
        .args(["server", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn finale");
    std::thread::sleep(delay);
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn a_server_killed_during_its_first_start_starts_cleanly_afterwards() {
    let dir = tempfile::tempdir().unwrap();
    // Kill -9 at various points of a first start (store creation, PKI generation, namespace
    // bootstrap, listener), each on a fresh data directory, then once more during the
    // recovering start; the next start must succeed and be complete.
    let mut failures = Vec::new();
    for delay_ms in [0u64, 1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 30, 50, 80, 120] {
        let data_dir = dir.path().join(format!("data-{delay_ms}"));
        start_and_kill_after(&data_dir, Duration::from_millis(delay_ms));
        start_and_kill_after(&data_dir, Duration::from_millis(delay_ms * 2));
        let server = match finale_e2e::FinaleServer::start(common::binary(), &data_dir) {
            Ok(server) => server,
            Err(error) => {
                failures.push(format!("killed after {delay_ms} ms: {error:#}"));
                continue;
            }
        };
        let api = Api::new(&server).expect("the kubeconfig and PKI are usable");
        let namespaces = api.get("/api/v1/namespaces").unwrap().json();
        let mut names: Vec<&str> = namespaces["items"]
            .as_array()
            .expect("items")
            .iter()
            .filter_map(|n| n["metadata"]["name"].as_str())
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["default", "kube-node-lease", "kube-public", "kube-system"],
            "killed after {delay_ms} ms: {namespaces}"
        );
        let created = api
            .post_json(CONFIGMAPS, &common::configmap("works", &[]))
            .unwrap();
        assert_eq!(
            created.status, 201,
            "killed after {delay_ms} ms: {}",
            created.body
        );
    }
    assert!(
        failures.is_empty(),
        "no clean start after a first start was killed:\n{}",
        failures.join("\n")
    );
}
