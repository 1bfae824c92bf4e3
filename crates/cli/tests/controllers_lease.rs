//! The in-process controllers run under the `coordination.k8s.io/v1` Lease
//! `kube-system/finale-controllers` (issue #13, item 3; the single-node equivalent the node
//! lifecycle will also run under): the server takes it at start, kubectl shows the holder,
//! and when another holder takes it the garbage collector stops until the Lease comes back.

mod common;

use std::time::Duration;

use common::{Env, configmap, eventually, resource_version, watch_until};
use serde_json::{Value, json};

const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/finale-controllers";
const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

/// Short timings, so that a takeover happens within seconds.
const FAST_LEASE: [&str; 3] = [
    "--leader-elect-lease-duration=3s",
    "--leader-elect-renew-deadline=2s",
    "--leader-elect-retry-period=500ms",
];

fn identity(env: &Env) -> String {
    let path = env.dir.path().join("data").join("controllers-identity");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
        .trim()
        .to_string()
}

/// The value of `apiserver_leader_election_master_status{name="finale-controllers"}`.
fn leader_status(env: &Env) -> Option<i64> {
    let metrics = env.api().get("/metrics").ok()?.body;
    metrics
        .lines()
        .find(|line| {
            line.starts_with("apiserver_leader_election_master_status{name=\"finale-controllers\"}")
        })
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
}

fn created(response: anyhow::Result<common::Response>) -> Value {
    let response = response.expect("create");
    assert_eq!(response.status, 201, "{}", response.body);
    response.json()
}

fn holder(lease: &Value) -> &str {
    lease["spec"]["holderIdentity"].as_str().unwrap_or("")
}

#[test]
fn the_server_holds_the_controllers_lease_and_kubectl_shows_it() {
    let env = Env::start();
    let me = identity(&env);
    assert!(!me.is_empty());
    let held = eventually(Duration::from_secs(10), || {
        let out = env
            .kubectl
            .ok(&[
                "get",
                "lease",
                "-n",
                "kube-system",
                "finale-controllers",
                "-o",
                "jsonpath={.spec.holderIdentity} {.spec.leaseDurationSeconds}",
            ])
            .ok()?;
        (out == format!("{me} 15")).then_some(out)
    });
    assert!(
        held.is_some(),
        "the Lease is not held by {me} with client-go's 15 s{}",
        env.log()
    );
    assert_eq!(leader_status(&env), Some(1), "{}", env.log());
}

#[test]
fn controllers_stop_while_another_replica_holds_the_lease_and_resume_when_it_expires() {
    let env = Env::start_with(&FAST_LEASE);
    let api = env.api();
    let me = identity(&env);
    assert!(
        eventually(Duration::from_secs(10), || (leader_status(&env) == Some(1))
            .then_some(()))
        .is_some(),
        "the server never led{}",
        env.log()
    );

    // Another "replica" takes the Lease: a compare-and-swap on what it read, as client-go's
    // takeover would be after the holder stopped renewing.
    let mut lease = api.get(LEASE).expect("get lease").json();
    lease["spec"]["holderIdentity"] = json!("intruder");
    lease["spec"]["leaseDurationSeconds"] = json!(3);
    lease["spec"]["renewTime"] =
        json!(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true));
    let taken = api
        .request(
            reqwest::Method::PUT,
            LEASE,
            Some("application/json"),
            Some(serde_json::to_vec(&lease).expect("JSON")),
        )
        .expect("put lease");
    assert_eq!(taken.status, 200, "{}", taken.body);
    let intrusion = resource_version(&taken.json());

    // Precondition: the server noticed at its next renewal and stopped its controllers.
    assert!(
        eventually(Duration::from_secs(5), || (leader_status(&env) == Some(0))
            .then_some(()))
        .is_some(),
        "the server did not stand down{}",
        env.log()
    );

    let owner = created(api.post_json(CONFIGMAPS, &configmap("lease-owner", &[])));
    let mut dependent = configmap("lease-dependent", &[]);
    dependent["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "lease-owner",
        "uid": owner["metadata"]["uid"],
    }]);
    created(api.post_json(CONFIGMAPS, &dependent));
    let deleted = api
        .request(
            reqwest::Method::DELETE,
            &format!("{CONFIGMAPS}/lease-owner"),
            None,
            None,
        )
        .expect("delete owner");
    assert_eq!(deleted.status, 200, "{}", deleted.body);

    // The sentinel is the server's own takeover: the dependent is deleted only after it,
    // never while the intruder held the Lease. resourceVersions are one global order.
    let lease_events = watch_until(
        &env.server,
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases?fieldSelector=metadata.name%3Dfinale-controllers",
        intrusion,
        |_, object| holder(object) == me,
    );
    let takeover = lease_events
        .iter()
        .find(|(_, _, object)| holder(object) == me)
        .map(|(rv, _, _)| *rv)
        .unwrap_or_else(|| {
            panic!(
                "the server never took its Lease back: {lease_events:?}{}",
                env.log()
            )
        });
    let dependent_events = watch_until(
        &env.server,
        &format!("{CONFIGMAPS}?fieldSelector=metadata.name%3Dlease-dependent"),
        intrusion,
        |kind, _| kind == "DELETED",
    );
    let removed = dependent_events
        .iter()
        .find(|(_, kind, _)| kind == "DELETED")
        .map(|(rv, _, _)| *rv)
        .unwrap_or_else(|| {
            panic!(
                "the collector never deleted the dependent: {dependent_events:?}{}",
                env.log()
            )
        });
    assert!(
        removed > takeover,
        "the dependent went at {removed}, before the server took the Lease back at {takeover}{}",
        env.log()
    );
    assert_eq!(leader_status(&env), Some(1), "{}", env.log());
}
