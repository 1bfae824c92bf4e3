//! Several API servers on one etcd (issue #13, item 3): two `finale server` replicas share an
//! etcd prefix and a PKI directory; the in-process controllers run on whichever holds the
//! Lease `kube-system/finale-controllers`. Killing that replica in the middle of a foreground
//! cascade and a namespace deletion hands both to the other, which finishes them.
//!
//! Every wait is bounded; everything runs on 127.0.0.1.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{Api, binary, configmap, eventually, resource_version, watch_until};
use finale_e2e::{Etcd, FinaleServer};
use serde_json::{Value, json};

/// Short timings, so that the takeover happens within seconds.
const FAST_LEASE: [&str; 3] = [
    "--leader-elect-lease-duration=3s",
    "--leader-elect-renew-deadline=2s",
    "--leader-elect-retry-period=500ms",
];
const HOLD: &str = "example.com/hold";

fn replica(dir: &Path, name: &str, etcd: &str, pki: &Path) -> FinaleServer {
    let pki = pki.to_str().expect("UTF-8 path");
    let mut args = vec!["--etcd-servers", etcd, "--pki-dir", pki];
    args.extend(FAST_LEASE);
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
