//! Several API servers on one etcd (issue #13, item 3): two `finale server` replicas share an
//! etcd prefix and a PKI directory; the in-process controllers run on whichever holds the
//! Lease `kube-system/finale-controllers`. Killing that replica in the middle of a foreground
//! cascade and a namespace deletion hands both to the other, which finishes them.
//!
//! On a 3-member etcd, killing a follower and then the leader under write and watch load
//! through both replicas loses no acknowledged write and no watch event.
//!
//! Every wait is bounded; everything runs on 127.0.0.1.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Api, binary, configmap, eventually, resource_version, watch_until};
use finale_e2e::{Etcd, EtcdCluster, FinaleServer, Signal};
use serde_json::{Value, json};

/// Short timings, so that the takeover happens within seconds.
const FAST_LEASE: [&str; 3] = [
    "--leader-elect-lease-duration=3s",
    "--leader-elect-renew-deadline=2s",
    "--leader-elect-retry-period=500ms",
];
const HOLD: &str = "example.com/hold";

/// Prompt acquisition, a long term: a frozen leader keeps the Lease for 30 s.
const LONG_LEASE: [&str; 3] = [
    "--leader-elect-lease-duration=30s",
    "--leader-elect-renew-deadline=20s",
    "--leader-elect-retry-period=500ms",
];

fn replica(dir: &Path, name: &str, etcd: &str, pki: &Path) -> FinaleServer {
    replica_with(dir, name, etcd, pki, &FAST_LEASE)
}

fn replica_with(dir: &Path, name: &str, etcd: &str, pki: &Path, lease: &[&str]) -> FinaleServer {
    let pki = pki.to_str().expect("UTF-8 path");
    let mut args = vec!["--etcd-servers", etcd, "--pki-dir", pki];
    args.extend(lease);
    FinaleServer::start_with(binary(), &dir.join(name), "127.0.0.1:0", &args)
        .unwrap_or_else(|e| panic!("start replica {name}: {e:#}"))
}

fn identity(server: &FinaleServer) -> String {
    std::fs::read_to_string(server.data_dir.join("controllers-identity"))
        .expect("identity file")
        .trim()
        .to_string()
}

fn lease_holder(api: &Api) -> Option<String> {
    let lease = api
        .get("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/finale-controllers")
        .ok()?;
    (lease.status == 200).then(|| {
        lease.json()["spec"]["holderIdentity"]
            .as_str()
            .unwrap_or("")
            .to_string()
    })
}

/// A request that must succeed with `code`: the surviving replica answers no 5xx.
fn expect(api: &Api, method: reqwest::Method, path: &str, body: Option<Value>, code: u16) -> Value {
    let response = api
        .request(
            method.clone(),
            path,
            body.as_ref().map(|_| {
                if method == reqwest::Method::PATCH {
                    "application/merge-patch+json"
                } else {
                    "application/json"
                }
            }),
            body.map(|b| serde_json::to_vec(&b).expect("JSON")),
        )
        .unwrap_or_else(|e| panic!("{method} {path}: {e:#}"));
    assert_eq!(response.status, code, "{method} {path}: {}", response.body);
    response.json()
}

fn terminating(api: &Api, path: &str) -> bool {
    api.get(path)
        .ok()
        .filter(|r| r.status == 200)
        .is_some_and(|r| !r.json()["metadata"]["deletionTimestamp"].is_null())
}

fn gone(api: &Api, path: &str) -> bool {
    api.get(path).is_ok_and(|r| r.status == 404)
}

#[test]
fn killing_the_controllers_replica_mid_cascade_hands_its_work_to_the_other() {
    let etcd = Etcd::start_in_memory().expect("start etcd");
    let dir = tempfile::tempdir().expect("temporary directory");
    let pki = dir.path().join("pki");
    let mut a = replica(dir.path(), "a", &etcd.endpoint, &pki);
    let mut b = replica(dir.path(), "b", &etcd.endpoint, &pki);
    // One PKI: each replica's CA and token work against the other.
    assert_eq!(a.ca_pem().expect("CA a"), b.ca_pem().expect("CA b"));
    let api_a = Api::new(&a).expect("client a");
    let api_b = Api::new(&b).expect("client b");

    let holder = eventually(Duration::from_secs(15), || {
        lease_holder(&api_b).filter(|h| *h == identity(&a) || *h == identity(&b))
    })
    .unwrap_or_else(|| {
        panic!(
            "no replica took the controllers' Lease\n{}\n{}",
            a.log(),
            b.log()
        )
    });
    let a_leads = holder == identity(&a);
    let (leader, survivor, api) = if a_leads {
        (&mut a, &b, &api_b)
    } else {
        (&mut b, &a, &api_a)
    };

    // Through the survivor: a foreground cascade whose dependent is held by a finalizer, a
    // namespace whose content is held, and a bystander.
    let cms = "/api/v1/namespaces/default/configmaps";
    expect(
        api,
        reqwest::Method::POST,
        cms,
        Some(configmap("bystander", &[])),
        201,
    );
    let owner = expect(
        api,
        reqwest::Method::POST,
        cms,
        Some(configmap("fg-owner", &[])),
        201,
    );
    let mut dependent = configmap("fg-dep", &[]);
    dependent["metadata"]["finalizers"] = json!([HOLD]);
    dependent["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "fg-owner",
        "uid": owner["metadata"]["uid"], "blockOwnerDeletion": true,
    }]);
    expect(api, reqwest::Method::POST, cms, Some(dependent), 201);
    expect(
        api,
        reqwest::Method::POST,
        "/api/v1/namespaces",
        Some(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "doomed"}})),
        201,
    );
    let mut held = configmap("held", &[]);
    held["metadata"]["finalizers"] = json!([HOLD]);
    expect(
        api,
        reqwest::Method::POST,
        "/api/v1/namespaces/doomed/configmaps",
        Some(held),
        201,
    );
    expect(
        api,
        reqwest::Method::DELETE,
        &format!("{cms}/fg-owner?propagationPolicy=Foreground"),
        None,
        200,
    );
    expect(
        api,
        reqwest::Method::DELETE,
        "/api/v1/namespaces/doomed",
        None,
        200,
    );

    // Precondition: the leader's controllers are in the middle of both: the collector has
    // deleted the dependent and the namespace controller the content, each held.
    let fg_dep = format!("{cms}/fg-dep");
    let held_path = "/api/v1/namespaces/doomed/configmaps/held";
    assert!(
        eventually(Duration::from_secs(15), || {
            (terminating(api, &fg_dep) && terminating(api, held_path)).then_some(())
        })
        .is_some(),
        "the leader's controllers did not start the cascade and the namespace deletion\n{}",
        leader.log()
    );
    let before = resource_version(&expect(api, reqwest::Method::GET, cms, None, 200));

    leader.kill9().expect("kill -9 the leader");

    // Release the holds through the survivor; only its controllers can finish now.
    for path in [fg_dep.as_str(), held_path] {
        expect(
            api,
            reqwest::Method::PATCH,
            path,
            Some(json!({"metadata": {"finalizers": null}})),
            200,
        );
    }
    let finished = eventually(Duration::from_secs(30), || {
        (gone(api, &format!("{cms}/fg-owner")) && gone(api, "/api/v1/namespaces/doomed"))
            .then_some(())
    });
    assert!(
        finished.is_some(),
        "the survivor did not finish the cascade and the namespace deletion\n{}",
        survivor.log()
    );
    assert_eq!(
        lease_holder(api).as_deref(),
        Some(identity(survivor).as_str())
    );
    expect(
        api,
        reqwest::Method::GET,
        &format!("{cms}/bystander"),
        None,
        200,
    );

    // A watch on the survivor, from before the kill, sees each deletion exactly once.
    let mut deleted = Vec::new();
    let events = watch_until(
        survivor,
        "/api/v1/configmaps?allowWatchBookmarks=false",
        before,
        |kind, object| {
            if kind == "DELETED" {
                deleted.push(
                    object["metadata"]["name"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                );
            }
            deleted.iter().any(|n| n == "fg-owner") && deleted.iter().any(|n| n == "held")
        },
    );
    let mut names: Vec<&str> = events
        .iter()
        .filter(|(_, kind, _)| kind == "DELETED")
        .map(|(_, _, object)| object["metadata"]["name"].as_str().unwrap_or(""))
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["fg-dep", "fg-owner", "held"], "{events:?}");
    let versions: Vec<i64> = events.iter().map(|(rv, _, _)| *rv).collect();
    assert!(
        versions.windows(2).all(|w| w[0] < w[1]),
        "in order: {versions:?}"
    );
}

/// What the writers of the member-kill test saw: the names whose create was acknowledged
/// (201), in the order of acknowledgement with its time, and every other answer.
/// Raises its flags when dropped.
struct RaiseOnDrop<'a, const N: usize>([&'a AtomicBool; N]);

impl<const N: usize> Drop for RaiseOnDrop<'_, N> {
    fn drop(&mut self) {
        for flag in self.0 {
            flag.store(true, Ordering::Relaxed);
        }
    }
}

#[derive(Default)]
struct WriteLog {
    acknowledged: Vec<(String, Instant)>,
    failed: Vec<String>,
}

impl WriteLog {
    fn count(log: &Mutex<WriteLog>) -> usize {
        log.lock()
            .unwrap_or_else(|e| e.into_inner())
            .acknowledged
            .len()
    }
}

/// Waits until `more` creates beyond `from` are acknowledged: the cluster is taking writes.
fn writes_continue(
    log: &Mutex<WriteLog>,
    from: usize,
    more: usize,
    what: &str,
    cluster: &EtcdCluster,
) {
    assert!(
        eventually(Duration::from_secs(30), || (WriteLog::count(log)
            >= from + more)
            .then_some(()))
        .is_some(),
        "writes stopped {what}: {} acknowledged\n{}",
        WriteLog::count(log),
        cluster.logs()
    );
}

/// ADDED names a raw watch on `server` sees from `from` until the ConfigMap `sentinel`
/// arrives, re-watching from the last event's resourceVersion when a stream ends (as
/// client-go's reflector does). Any ERROR event (a 410 among them) fails the test.
fn watch_until_sentinel(
    server: &FinaleServer,
    from: i64,
    what: &str,
    abandoned: &AtomicBool,
) -> Vec<(i64, String)> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut added: Vec<(i64, String)> = Vec::new();
    let mut last = from;
    let mut streams = 0;
    while Instant::now() < deadline && streams < 20 && !abandoned.load(Ordering::Relaxed) {
        streams += 1;
        let mut done = false;
        let events = watch_until(
            server,
            "/api/v1/namespaces/default/configmaps?allowWatchBookmarks=false",
            last,
            |kind, object| {
                assert_ne!(kind, "ERROR", "the watch on {what} got an error: {object}");
                done = kind == "ADDED" && object["metadata"]["name"] == "sentinel";
                done
            },
        );
        for (version, kind, object) in events {
            last = version;
            if kind == "ADDED" {
                added.push((
                    version,
                    object["metadata"]["name"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                ));
            }
        }
        if done {
            return added;
        }
    }
    panic!(
        "the watch on {what} did not see the sentinel (abandoned: {}) after {streams} streams; saw {} ADDED",
        abandoned.load(Ordering::Relaxed),
        added.len()
    );
}

#[test]
fn killing_an_etcd_follower_then_the_leader_under_load_loses_no_write_and_no_event() {
    let mut cluster = EtcdCluster::start_in_memory(3).expect("start a 3-member etcd");
    let endpoints = cluster.endpoints();
    let dir = tempfile::tempdir().expect("temporary directory");
    let pki = dir.path().join("pki");
    let a = replica(dir.path(), "a", &endpoints, &pki);
    let b = replica(dir.path(), "b", &endpoints, &pki);
    let api_a = Api::new(&a).expect("client a");
    let api_b = Api::new(&b).expect("client b");
    let from = resource_version(&expect(
        &api_a,
        reqwest::Method::GET,
        "/api/v1/namespaces/default/configmaps",
        None,
        200,
    ));

    let log = Mutex::new(WriteLog::default());
    let (stop, abandoned) = (AtomicBool::new(false), AtomicBool::new(false));
    std::thread::scope(|scope| {
        // A failed assertion below stops the writers and watchers rather than leaving the
        // scope waiting for them.
        let _on_failure = RaiseOnDrop([&stop, &abandoned]);
        let watchers = [(&a, "replica a"), (&b, "replica b")].map(|(server, what)| {
            (
                what,
                scope.spawn(|| watch_until_sentinel(server, from, what, &abandoned)),
            )
        });
        // Two writers per replica, each bounded in count; the test stops them.
        let writers: Vec<_> = (0..4)
            .map(|writer| {
                let api = if writer % 2 == 0 { &api_a } else { &api_b };
                let (log, stop) = (&log, &stop);
                scope.spawn(move || {
                    for index in 0..5_000 {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let name = format!("load-{writer}-{index}");
                        let answer = api.post_json(
                            "/api/v1/namespaces/default/configmaps",
                            &configmap(&name, &[("writer", "load")]),
                        );
                        let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
                        match answer {
                            Ok(response) if response.status == 201 => {
                                log.acknowledged.push((name, Instant::now()))
                            }
                            Ok(response) => log
                                .failed
                                .push(format!("{name}: {} {}", response.status, response.body)),
                            Err(error) => log.failed.push(format!("{name}: {error:#}")),
                        }
                    }
                })
            })
            .collect();

        writes_continue(&log, 0, 40, "before any member was killed", &cluster);
        let leader = cluster.leader().expect("the etcd leader");
        let follower = (leader + 1) % 3;
        cluster.members[follower].stop().expect("kill a follower");
        writes_continue(
            &log,
            WriteLog::count(&log),
            40,
            "with a follower down",
            &cluster,
        );
        cluster.members[follower]
            .start_again()
            .expect("restart the follower");
        cluster
            .wait_healthy(Duration::from_secs(20))
            .expect("the follower rejoins");
        writes_continue(
            &log,
            WriteLog::count(&log),
            20,
            "after the follower rejoined",
            &cluster,
        );

        let leader = cluster.leader().expect("the etcd leader");
        let killed_at = Instant::now();
        cluster.members[leader].stop().expect("kill the leader");
        writes_continue(
            &log,
            WriteLog::count(&log),
            60,
            "after the leader was killed",
            &cluster,
        );
        stop.store(true, Ordering::Relaxed);
        for writer in writers {
            writer.join().expect("writer thread");
        }

        // The longest time without an acknowledged write around the leader's death.
        let log = log.lock().unwrap_or_else(|e| e.into_inner());
        let times: Vec<Instant> = log.acknowledged.iter().map(|(_, at)| *at).collect();
        let gap = times
            .windows(2)
            .filter(|pair| pair[1] > killed_at)
            .map(|pair| pair[1].duration_since(pair[0]))
            .max()
            .unwrap_or_default();
        eprintln!(
            "{} writes acknowledged, {} failed; longest write gap after the leader was killed: {gap:?}",
            log.acknowledged.len(),
            log.failed.len()
        );
        assert!(
            log.failed.is_empty(),
            "every write through a replica succeeds while etcd keeps a quorum: {:?}",
            &log.failed[..log.failed.len().min(5)]
        );

        // The sentinel ends the watches: every event before it has been delivered.
        expect(
            &api_b,
            reqwest::Method::POST,
            "/api/v1/namespaces/default/configmaps",
            Some(configmap("sentinel", &[])),
            201,
        );
        let acknowledged: BTreeSet<&str> = log
            .acknowledged
            .iter()
            .map(|(name, _)| name.as_str())
            .collect();
        for (what, watcher) in watchers {
            let added = watcher.join().expect("watcher thread");
            let versions: Vec<i64> = added.iter().map(|(version, _)| *version).collect();
            assert!(
                versions.windows(2).all(|w| w[0] < w[1]),
                "{what}: events out of order"
            );
            let seen: BTreeSet<&str> = added.iter().map(|(_, name)| name.as_str()).collect();
            assert_eq!(
                seen.len(),
                added.len(),
                "{what}: an event was delivered twice"
            );
            let missed: Vec<_> = acknowledged.difference(&seen).collect();
            assert!(
                missed.is_empty(),
                "{what}: the watch missed {} acknowledged creates: {missed:?}",
                missed.len()
            );
        }
        for (api, what) in [(&api_a, "replica a"), (&api_b, "replica b")] {
            let listed: BTreeSet<String> = api.configmap_names("default").into_iter().collect();
            let lost: Vec<_> = acknowledged
                .iter()
                .filter(|name| !listed.contains(**name))
                .collect();
            assert!(
                lost.is_empty(),
                "{what} lost {} acknowledged writes: {lost:?}",
                lost.len()
            );
        }
    });
}

#[test]
fn what_one_replica_writes_the_other_reads_watches_and_serves() {
    let etcd = Etcd::start_in_memory().expect("start etcd");
    let dir = tempfile::tempdir().expect("temporary directory");
    let pki = dir.path().join("pki");
    let a = replica(dir.path(), "a", &etcd.endpoint, &pki);
    let b = replica(dir.path(), "b", &etcd.endpoint, &pki);
    let api_a = Api::new(&a).expect("client a");
    let api_b = Api::new(&b).expect("client b");
    let cms = "/api/v1/namespaces/default/configmaps";
    let before = resource_version(&expect(&api_a, reqwest::Method::GET, cms, None, 200));

    // A GET without a resourceVersion is a quorum read on every replica: B sees at once what
    // A has just acknowledged, every time.
    let mut created = Vec::new();
    for index in 0..20 {
        let name = format!("cross-{index}");
        let object = expect(
            &api_a,
            reqwest::Method::POST,
            cms,
            Some(configmap(&name, &[])),
            201,
        );
        let read = expect(
            &api_b,
            reqwest::Method::GET,
            &format!("{cms}/{name}"),
            None,
            200,
        );
        assert_eq!(read["metadata"]["uid"], object["metadata"]["uid"]);
        created.push((name, resource_version(&object)));
    }
    // resourceVersion=N is "not older than N" on either replica.
    let (last_name, last_rv) = created.last().cloned().expect("created");
    let read = expect(
        &api_b,
        reqwest::Method::GET,
        &format!("{cms}/{last_name}?resourceVersion={last_rv}"),
        None,
        200,
    );
    assert!(resource_version(&read) >= last_rv);
    let list = expect(
        &api_b,
        reqwest::Method::GET,
        &format!("{cms}?resourceVersion={last_rv}&resourceVersionMatch=NotOlderThan"),
        None,
        200,
    );
    assert!(resource_version(&list) >= last_rv);
    let listed: BTreeSet<&str> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|item| item["metadata"]["name"].as_str())
        .collect();
    assert!(
        created
            .iter()
            .all(|(name, _)| listed.contains(name.as_str()))
    );
    // A watch on B from a resourceVersion A gave out sees A's creates, in order, once each.
    let events = watch_until(
        &b,
        &format!("{cms}?allowWatchBookmarks=false"),
        before,
        |kind, object| kind == "ADDED" && object["metadata"]["name"] == last_name.as_str(),
    );
    let watched: Vec<(i64, &str)> = events
        .iter()
        .filter(|(_, kind, _)| kind == "ADDED")
        .map(|(rv, _, object)| (*rv, object["metadata"]["name"].as_str().unwrap_or("")))
        .collect();
    let expected: Vec<(i64, &str)> = created
        .iter()
        .map(|(name, rv)| (*rv, name.as_str()))
        .collect();
    assert_eq!(watched, expected);

    // A CRD created through A is served by B: discovery, then its custom resources.
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"kind": "Gadget", "plural": "gadgets"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object", "x-kubernetes-preserve-unknown-fields": true,
                }},
            }],
        },
    });
    expect(
        &api_a,
        reqwest::Method::POST,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        Some(crd),
        201,
    );
    let served = eventually(Duration::from_secs(15), || {
        let discovery = api_b.get("/apis/example.com/v1").ok()?;
        (discovery.status == 200 && discovery.body.contains("\"gadgets\"")).then_some(())
    });
    assert!(
        served.is_some(),
        "replica b does not serve the CRD\n{}",
        b.log()
    );
    let gadgets = "/apis/example.com/v1/namespaces/default/gadgets";
    expect(
        &api_b,
        reqwest::Method::POST,
        gadgets,
        Some(json!({"apiVersion": "example.com/v1", "kind": "Gadget",
                    "metadata": {"name": "g1"}, "spec": {"size": 3}})),
        201,
    );
    let gadget = expect(
        &api_a,
        reqwest::Method::GET,
        &format!("{gadgets}/g1"),
        None,
        200,
    );
    assert_eq!(gadget["spec"]["size"], 3);
}

/// A `DeletionReview` of `target` in `mode` through `api`; returns its `status`.
fn review(api: &Api, mode: &str, target: Value) -> Value {
    let body = json!({"apiVersion": "deletion.finale.dev/v1alpha1", "kind": "DeletionReview",
        "spec": {"mode": mode, "target": target, "propagationPolicy": "Background"}});
    let body = if mode == "Plan" {
        body
    } else {
        let mut explain = body;
        explain["spec"]
            .as_object_mut()
            .expect("spec")
            .remove("propagationPolicy");
        explain
    };
    expect(
        api,
        reqwest::Method::POST,
        "/apis/deletion.finale.dev/v1alpha1/deletionreviews",
        Some(body),
        201,
    )["status"]
        .clone()
}

#[test]
fn a_standby_replica_reviews_deletion_from_the_ownership_graph_and_names_the_collectors_replica() {
    let etcd = Etcd::start_in_memory().expect("start etcd");
    let dir = tempfile::tempdir().expect("temporary directory");
    let pki = dir.path().join("pki");
    let a = replica_with(dir.path(), "a", &etcd.endpoint, &pki, &LONG_LEASE);
    let b = replica_with(dir.path(), "b", &etcd.endpoint, &pki, &LONG_LEASE);
    let api_a = Api::new(&a).expect("client a");
    let api_b = Api::new(&b).expect("client b");
    let holder = eventually(Duration::from_secs(15), || {
        lease_holder(&api_a).filter(|h| *h == identity(&a) || *h == identity(&b))
    })
    .unwrap_or_else(|| panic!("no replica took the Lease\n{}\n{}", a.log(), b.log()));
    let (standby, leader_api, leader, leader_identity) = if holder == identity(&a) {
        (&api_b, &api_a, &a, identity(&a))
    } else {
        (&api_a, &api_b, &b, identity(&b))
    };

    // Through the standby: an owner with three dependents, one of them held by a finalizer.
    let cms = "/api/v1/namespaces/default/configmaps";
    let owner = expect(
        standby,
        reqwest::Method::POST,
        cms,
        Some(configmap("plan-owner", &[])),
        201,
    );
    for index in 0..3 {
        let mut dependent = configmap(&format!("plan-dep-{index}"), &[]);
        dependent["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "v1", "kind": "ConfigMap", "name": "plan-owner",
            "uid": owner["metadata"]["uid"], "blockOwnerDeletion": true,
        }]);
        if index == 0 {
            dependent["metadata"]["finalizers"] = json!([HOLD]);
        }
        expect(standby, reqwest::Method::POST, cms, Some(dependent), 201);
    }
    let owner_target = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "namespace": "default", "name": "plan-owner"});

    // The standby's plan follows the dependents at once (it reads them at one revision);
    // the leader's, once its collector has watched them arrive.
    let plan = review(standby, "Plan", owner_target.clone());
    assert_eq!(plan["plan"]["deleted"], 4, "standby's plan: {plan:#}");
    assert!(
        eventually(Duration::from_secs(15), || {
            (review(leader_api, "Plan", owner_target.clone())["plan"]["deleted"] == 4).then_some(())
        })
        .is_some(),
        "the leader's plan never counted the dependents"
    );

    // Deleted in the foreground, the owner waits on the held dependent; the standby's
    // explanation names the replica whose collector does the work, and calls nothing stuck
    // for want of a collector.
    expect(
        standby,
        reqwest::Method::DELETE,
        &format!("{cms}/plan-owner?propagationPolicy=Foreground"),
        None,
        200,
    );
    let held = format!("{cms}/plan-dep-0");
    assert!(
        eventually(Duration::from_secs(15), || terminating(standby, &held)
            .then_some(()))
        .is_some(),
        "the leader's collector did not start the cascade"
    );
    let explained = review(standby, "Explain", owner_target);
    assert_eq!(explained["verdict"], "Stuck", "{explained:#}");
    let blocking = &explained["causes"][0];
    assert_eq!(blocking["type"], "ForegroundDependents", "{explained:#}");
    assert_eq!(blocking["children"][0]["object"]["name"], "plan-dep-0");

    // With the leader frozen (its Lease still current), an orphaning delete waits on the
    // leader's collector: the standby says so, names that replica, and calls it progressing,
    // not stuck for want of a collector.
    let kept = expect(
        standby,
        reqwest::Method::POST,
        cms,
        Some(configmap("orphan-owner", &[])),
        201,
    );
    let mut dependent = configmap("orphan-dep", &[]);
    dependent["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "orphan-owner",
        "uid": kept["metadata"]["uid"],
    }]);
    expect(standby, reqwest::Method::POST, cms, Some(dependent), 201);
    leader.signal(Signal::SIGSTOP).expect("freeze the leader");
    expect(
        standby,
        reqwest::Method::DELETE,
        &format!("{cms}/orphan-owner?propagationPolicy=Orphan"),
        None,
        200,
    );
    let orphan_target = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "namespace": "default", "name": "orphan-owner"});
    let explained = review(standby, "Explain", orphan_target);
    leader.signal(Signal::SIGCONT).expect("thaw the leader");
    let text = explained.to_string();
    assert!(
        !text.contains("garbage collector is not running"),
        "the standby blames a collector that runs elsewhere: {explained:#}"
    );
    let orphan_cause = &explained["causes"][0];
    assert_eq!(orphan_cause["state"], "Progressing", "{explained:#}");
    assert_eq!(
        orphan_cause["evidence"]["gcReplica"],
        leader_identity.as_str(),
        "{explained:#}"
    );
    assert!(
        message_of(orphan_cause).contains(&leader_identity),
        "{explained:#}"
    );
    // Thawed, the leader's collector finishes: the owner goes, its dependent stays, orphaned.
    assert!(
        eventually(Duration::from_secs(30), || gone(
            standby,
            &format!("{cms}/orphan-owner")
        )
        .then_some(()))
        .is_some(),
        "the thawed leader did not finish the orphaning delete"
    );
    let orphan = expect(
        standby,
        reqwest::Method::GET,
        &format!("{cms}/orphan-dep"),
        None,
        200,
    );
    assert!(
        orphan["metadata"]["ownerReferences"].is_null(),
        "{orphan:#}"
    );
}

fn message_of(node: &Value) -> &str {
    node["message"].as_str().unwrap_or_default()
}
